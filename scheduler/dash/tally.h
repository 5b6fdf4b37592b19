/*
 * The dashboard's per-layer task counts by state, kept incrementally. Every change of a task's
 * state in the scheduler goes through gs__task_state_set(): while a graph has no tally (nobody
 * has looked at it on the dashboard, or no dashboard) that is a store and one NULL test; once a
 * snapshot has built the graph's tally (one scan of its tasks, gs__dash_tally_get), each change
 * moves one count, so snapshots no longer scan task states. Loop thread only. Not installed.
 */
#ifndef GS_SCHEDULER_DASH_TALLY_H
#define GS_SCHEDULER_DASH_TALLY_H

#include "scheduler/sched_int.h"

/* Move task @a t of @a g from state @a from to @a to in g->dash_tally (tally.c). */
void gs__dash_tally_move(gs__graph_t *g, uint32_t t, uint8_t from, uint8_t to);

/** Set task @a t of @a g to state @a st (a GS__TS_* value), keeping the dashboard's tally. */
static inline void gs__task_state_set(gs__graph_t *g, uint32_t t, uint8_t st)
{
    if (g->dash_tally != NULL) gs__dash_tally_move(g, t, g->state[t], st);
    g->state[t] = st;
}

/** The tally of @a g: g->nlayers rows of GS__DS_N counts (scheduler/dash/snapshot.h), built
 *  by one scan on first use and owned by the graph (gs__dash_tally_free). NULL when out of
 *  memory (then the caller scans). */
const uint64_t *gs__dash_tally_get(gs__graph_t *g);

/** Free @a g's tally (graph teardown). */
void gs__dash_tally_free(gs__graph_t *g);

#endif
