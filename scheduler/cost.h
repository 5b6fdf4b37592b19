/* The cost model placement uses (cost.c). Not installed. */
#ifndef GS_SCHEDULER_COST_H
#define GS_SCHEDULER_COST_H

#include "scheduler/sched_int.h"

/* Set @a w's queue bound (cap) and refill batch from its threads and measured kernel time. */
void gs__sched_worker_capacity(gs__worker_t *w);
/* The slot table grows to @a n slots (before s->nslots changes). */
gs_status_t gs__bw_grow(gs_sched_t *s, uint32_t n);
/* A worker took @a slot: every pair with it starts again from the priors. */
void gs__bw_reset_slot(gs_sched_t *s, uint32_t slot);
/* BANDWIDTH report of worker @a w (transfers it received). */
void gs__sched_bandwidth(gs_sched_t *s, gs__worker_t *w, const gs_msg_bandwidth_t *m);

/* Best source for moving an input to slot @a to: the holder with the highest estimated
 * bandwidth (its estimate in *bw_p). Returns GS__NO_WORKER when no live holder exists. */
static inline uint32_t gs__best_source(const gs_sched_t *s, const gs__input_t *in, uint32_t to,
                                       double *bw_p)
{
    uint32_t best = GS__NO_WORKER;
    double bw = 0.0;
    if (in->slot < s->nslots && s->slots[in->slot] != NULL) {
        best = in->slot;
        bw = s->bw[(size_t)in->slot * s->nslots + to];
    }
    for (uint64_t m = in->mask; m != 0; m &= m - 1) {
        uint32_t r = (uint32_t)__builtin_ctzll(m);
        double b;
        if (r >= s->nslots || s->slots[r] == NULL) continue;
        b = s->bw[(size_t)r * s->nslots + to];
        if (best == GS__NO_WORKER || b > bw) {
            best = r;
            bw = b;
        }
    }
    *bw_p = bw;
    return best;
}

#endif
