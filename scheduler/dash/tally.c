/* The dashboard's incremental per-layer task counts by state (tally.h). */
#include "scheduler/dash/tally.h"
#include "scheduler/dash/snapshot.h"

#include "common/alloc.h"

/* The dashboard's state of each scheduler state (GS__DS_N: not counted). */
static const uint8_t gs__dstate_of[] = {
    [GS__TS_WAITING] = GS__DS_WAITING,   [GS__TS_READY] = GS__DS_READY,
    [GS__TS_ASSIGNED] = GS__DS_PROCESSING, [GS__TS_MEMORY] = GS__DS_MEMORY,
    [GS__TS_RELEASED] = GS__DS_RELEASED, [GS__TS_ERRED] = GS__DS_ERRED,
    [GS__TS_CULLED] = GS__DS_N,          [GS__TS_DEFERRED] = GS__DS_READY,
    [GS__TS_LOST] = GS__DS_WAITING,      [GS__TS_LOST_RUNNING] = GS__DS_PROCESSING,
};

static inline uint8_t gs__dstate(uint8_t st)
{
    return st < sizeof gs__dstate_of ? gs__dstate_of[st] : GS__DS_N;
}

void gs__dash_tally_move(gs__graph_t *g, uint32_t t, uint8_t from, uint8_t to)
{
    uint8_t a = gs__dstate(from), b = gs__dstate(to);
    uint32_t l = g->task_layer[t];
    uint64_t *row;
    if (a == b || l >= g->nlayers) return;
    row = g->dash_tally + (size_t)l * GS__DS_N;
    if (a != GS__DS_N) row[a]--;
    if (b != GS__DS_N) row[b]++;
}

const uint64_t *gs__dash_tally_get(gs__graph_t *g)
{
    if (g->dash_tally != NULL) return g->dash_tally;
    g->dash_tally = gs_calloc((size_t)(g->nlayers ? g->nlayers : 1) * GS__DS_N, sizeof *g->dash_tally,
                              "dashboard task counts");
    if (g->dash_tally == NULL) return NULL;
    for (uint32_t t = 0; t < g->ntasks; t++) {
        uint8_t ds = gs__dstate(g->state[t]);
        uint32_t l = g->task_layer[t];
        if (ds != GS__DS_N && l < g->nlayers) g->dash_tally[(size_t)l * GS__DS_N + ds]++;
    }
    return g->dash_tally;
}

void gs__dash_tally_free(gs__graph_t *g)
{
    gs_free(g->dash_tally);
    g->dash_tally = NULL;
}
