/* The dashboard's incremental per-layer task counts (scheduler/dash/tally.h): after any sequence
 * of state changes made through gs__task_state_set they equal a fresh scan of the states. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/dash/snapshot.h"
#include "scheduler/dash/tally.h"

#define NT 997u
#define NL 3u
#define NSTATES (GS__TS_LOST_RUNNING + 1)

/* A fresh scan of @a g's states, as a tally built on first use. */
static void scan(const gs__graph_t *g, uint64_t *out)
{
    gs__graph_t copy = *g;
    const uint64_t *fresh;
    copy.dash_tally = NULL;
    fresh = gs__dash_tally_get(&copy);
    cr_assert_not_null(fresh);
    memcpy(out, fresh, NL * GS__DS_N * sizeof *out);
    gs__dash_tally_free(&copy);
}

Test(scheduler_tally, incremental_counts_equal_a_fresh_scan)
{
    gs__graph_t g;
    uint32_t task_layer[NT];
    uint8_t state[NT];
    uint64_t want[NL * GS__DS_N];
    const uint64_t *tally;
    unsigned seed = 12345;

    memset(&g, 0, sizeof g);
    g.ntasks = NT;
    g.nlayers = NL;
    g.task_layer = task_layer;
    g.state = state;
    for (uint32_t t = 0; t < NT; t++) {
        task_layer[t] = t % NL;
        state[t] = t % 5 == 0 ? GS__TS_CULLED : GS__TS_WAITING;
    }
    tally = gs__dash_tally_get(&g);
    cr_assert_not_null(tally);
    /* no culled task counts; every other one is waiting */
    cr_assert_eq(tally[0 * GS__DS_N + GS__DS_WAITING] + tally[1 * GS__DS_N + GS__DS_WAITING] +
                 tally[2 * GS__DS_N + GS__DS_WAITING], NT - (NT + 4) / 5);
    for (int round = 0; round < 200; round++) {
        for (int k = 0; k < 500; k++) {
            seed = seed * 1103515245u + 12345u;
            uint32_t t = (seed >> 8) % NT;
            uint8_t st = (uint8_t)((seed >> 20) % NSTATES);
            gs__task_state_set(&g, t, st);
            cr_assert_eq(state[t], st);
        }
        scan(&g, want);
        cr_assert(memcmp(g.dash_tally, want, sizeof want) == 0, "tally drifted from the states by round %d", round);
    }
    /* an assigned task counts as processing, a lost-while-running one too */
    gs__task_state_set(&g, 1, GS__TS_ASSIGNED);
    gs__task_state_set(&g, 4, GS__TS_LOST_RUNNING);
    scan(&g, want);
    cr_assert(memcmp(g.dash_tally, want, sizeof want) == 0);
    cr_assert_geq(g.dash_tally[1 * GS__DS_N + GS__DS_PROCESSING], 2);
    gs__dash_tally_free(&g);
    cr_assert_null(g.dash_tally);
}
