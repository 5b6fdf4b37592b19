/* TASK_ASSIGN intake of gworker: decode the layers (cached per graph), create the tasks with
 * their inputs and queue them for admission (exec.c). */
#include "worker/worker_int.h"

#include "chunkops/eval.h"
#include "common/time.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- intake */

typedef struct gs__wbadlayer {
    uint32_t id;
    gs_status_t status;
    char msg[256];
} gs__wbadlayer_t;

void gs__wexec_assign(gs_worker_t *w, const gs_msg_task_assign_t *m)
{
    gs_wgraph_t *g;
    gs_status_t status;
    GS_VEC(gs__wbadlayer_t) bad = {0};
    const gs_layer_t *last_layer = NULL;   /* tasks of a batch come in runs of one layer */
    uint64_t i, ndeps_total;
    uint32_t li, last_layer_id = 0;

    if (w->state != GS_WSTATE_RUNNING) return;
    ndeps_total = m->ntasks ? m->dep_off[m->ntasks] : 0;
    if (m->ntasks && m->dep_off[0] != 0) {
        GS_LOG_ERROR("task-assign for graph %llu: dependency offsets do not start at 0; "
                     "batch ignored", (unsigned long long)m->graph_id);
        return;
    }
    for (i = 0; i < m->ntasks; i++) {
        if (m->dep_off[i + 1] < m->dep_off[i] || m->dep_off[i + 1] > ndeps_total) {
            GS_LOG_ERROR("task-assign for graph %llu: dependency offsets are not monotonic; "
                         "batch ignored", (unsigned long long)m->graph_id);
            return;
        }
    }
    status = gs__wgraph_get(w, m->graph_id, 1, &g);
    if (status != GS_OK) {
        /* cannot even track the graph: report every task failed */
        for (i = 0; i < m->ntasks; i++) {
            char buf[GS_W_ERRLEN];
            snprintf(buf, sizeof(buf), "task %llu (layer ?, block %llu) of graph %llu failed: %s",
                     (unsigned long long)m->task_id[i], (unsigned long long)m->task_block[i],
                     (unsigned long long)m->graph_id, gs_last_error());
            gs__wdone_push(w, m->graph_id, m->task_id[i], status, 0, 0, 0, 0,
                           gs_strdup(buf, "task error"));
        }
        return;
    }
    g->nowned++;   /* pin while building */
    gs__wgraph_unidle(w, g);

    /* Decode the layers that came along (once per (graph, layer id)). */
    for (li = 0; li < m->nlayers; li++) {
        gs_layer_t *l = NULL;
        uint64_t v;
        if (gs_u64map_get(&g->layers, m->layer_ids[li], &v)) continue;
        status = gs_layer_decode(m->layers[li].data, m->layers[li].len, &l);
        if (status == GS_OK) {
            status = gs_u64map_put(&g->layers, m->layer_ids[li], (uint64_t)(uintptr_t)l);
            if (status != GS_OK) {
                gs_layer_free(l);
                gs_error_set(status, "out of memory caching the layer");
            } else {
                g->layer_bytes += m->layers[li].len;
            }
        }
        if (status != GS_OK) {
            gs__wbadlayer_t b;
            b.id = m->layer_ids[li];
            b.status = status;
            snprintf(b.msg, sizeof(b.msg), "%s", gs_last_error());
            GS_LOG_WARN("graph %llu: layer %u could not be decoded: %s",
                        (unsigned long long)m->graph_id, b.id, b.msg);
            (void)GS_VEC_PUSH(&bad, b);
        }
    }

    for (i = 0; i < m->ntasks; i++) {
        gs_wtask_t *t = gs__wtask_alloc(w);
        uint64_t d0 = m->dep_off[i], nd = m->dep_off[i + 1] - m->dep_off[i];
        uint64_t v;
        void *prev = NULL;
        size_t b;
        int nin;

        if (t == NULL) {
            char buf[GS_W_ERRLEN];
            snprintf(buf, sizeof(buf), "task %llu (layer ?, block %llu) of graph %llu failed: "
                     "out of memory for the task", (unsigned long long)m->task_id[i],
                     (unsigned long long)m->task_block[i], (unsigned long long)m->graph_id);
            gs__wdone_push(w, m->graph_id, m->task_id[i], GS_ERR_NO_MEMORY, 0, 0, 0, 0,
                           gs_strdup(buf, "task error"));
            continue;
        }
        t->graph = g;
        t->id = m->task_id[i];
        t->block = m->task_block[i];
        t->layer_id = m->task_layer[i];
        t->state = GS_WTASK_QUEUED;
        /* Not yet counted anywhere: account it as queued so gs__wtask_fail balances. */
        gs__wlist_push(&w->admit_q, &t->link);
        w->nqueued++;

        if (t->id >= GS_U64MAP_TOMB) {
            gs__wtask_fail(w, t, GS_ERR_INVALID_PARAM, "task id is reserved");
            continue;
        }
        /* one lookup: entered, or the task already there is put back */
        if (gs_idtab_swap(&g->tasks, t->id, t, &prev) != GS_OK) {
            gs__wtask_fail(w, t, GS_ERR_NO_MEMORY, "out of memory for the task table");
            continue;
        }
        if (prev != NULL) {
            (void)gs_idtab_swap(&g->tasks, t->id, prev, NULL);   /* overwrites: cannot fail */
            GS_LOG_WARN("task %llu of graph %llu assigned again while queued or running; "
                        "ignored", (unsigned long long)t->id, (unsigned long long)g->id);
            gs__wlist_del(&t->link);
            w->nqueued--;
            t->graph = NULL;
            gs__wtask_recycle(w, t);
            continue;
        }
        for (b = 0; b < bad.len; b++) if (bad.data[b].id == t->layer_id) break;
        if (b < bad.len) {
            gs__wtask_fail(w, t, bad.data[b].status, "layer %u could not be decoded: %s",
                           t->layer_id, bad.data[b].msg);
            continue;
        }
        if (last_layer != NULL && last_layer_id == t->layer_id) {
            v = (uint64_t)(uintptr_t)last_layer;
        } else if (!gs_u64map_get(&g->layers, t->layer_id, &v)) {
            gs__wtask_fail(w, t, GS_ERR_NOT_FOUND,
                           "layer %u of graph %llu is unknown to this worker (never sent, or "
                           "dropped after the graph's last key was released)",
                           t->layer_id, (unsigned long long)g->id);
            continue;
        }
        t->layer = (const gs_layer_t *)(uintptr_t)v;
        last_layer = t->layer;
        last_layer_id = t->layer_id;
        if (t->block >= gs_layer_nblocks(t->layer)) {
            gs__wtask_fail(w, t, GS_ERR_INVALID_PARAM, "block %llu is outside the layer's %llu "
                           "blocks", (unsigned long long)t->block,
                           (unsigned long long)gs_layer_nblocks(t->layer));
            continue;
        }
        nin = gs_layer_ninputs(t->layer, t->block);
        if (nin < 0 || (uint64_t)nin != nd) {
            gs__wtask_fail(w, t, GS_ERR_INVALID_PARAM,
                           "the layer expects %d inputs but the task lists %llu dependencies",
                           nin, (unsigned long long)nd);
            continue;
        }
        if (nd > GS_W_INLINE_DEPS) {
            t->deps = gs_calloc(nd, sizeof(gs_wdep_t), "task deps");
            if (t->deps == NULL) {
                t->deps = t->deps_inline;
                gs__wtask_fail(w, t, GS_ERR_NO_MEMORY, "out of memory for %llu dependencies",
                               (unsigned long long)nd);
                continue;
            }
        } else {
            t->deps = t->deps_inline;    /* entries 0 .. nd - 1 are filled below */
        }
        t->ndeps = (uint32_t)nd;
        {
            int badkey = 0;
            uint64_t in_bytes = 0;
            for (uint64_t k = 0; k < nd; k++) {
                gs_wdep_t *d = &t->deps[k];
                d->graph = m->dep_keys[2 * (d0 + k)];
                d->task = m->dep_keys[2 * (d0 + k) + 1];
                d->worker = m->dep_worker[d0 + k];
                d->nbytes = m->dep_nbytes[d0 + k];
                d->chunk = NULL;
                if (d->graph >= GS_U64MAP_TOMB || d->task >= GS_U64MAP_TOMB) badkey = 1;
                in_bytes += d->nbytes < GS_W_SMALL_TASK_BYTES ? d->nbytes : GS_W_SMALL_TASK_BYTES;
            }
            t->small = in_bytes < GS_W_SMALL_TASK_BYTES;
            if (badkey) {
                gs__wtask_fail(w, t, GS_ERR_INVALID_PARAM, "a dependency key is reserved");
                continue;
            }
        }
        t->out_nbytes = gs_layer_out_nbytes(t->layer, t->block);
        t->small = t->small && t->out_nbytes <= GS_W_SMALL_TASK_BYTES;
    }
    GS_VEC_FREE(&bad);
    g->nowned--;
    w->admit_epoch++;                  /* new tasks may fit where the head does not */
    gs__wgraph_maybe_free(w, g, 0);
    gs__wexec_pump(w);
}
