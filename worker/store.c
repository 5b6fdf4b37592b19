/* Chunk store of gworker: graphs (layers, chunks, live tasks) keyed by graph id, chunks keyed
 * by task id inside their graph, refcounted backend memory with the worker's accounting. */
#include "worker/worker_int.h"

#include "common/time.h"

#include <stdlib.h>
#include <string.h>

static void gs__wgraph_free_layers(gs_wgraph_t *g)
{
    g->layer_bytes = 0;
    for (size_t i = 0; i < g->layers.cap; i++) {
        uint64_t k = g->layers.keys[i];
        if (k == GS_U64MAP_EMPTY || k == GS_U64MAP_TOMB) continue;
        gs_layer_free((gs_layer_t *)(uintptr_t)g->layers.vals[i]);
    }
    gs_u64map_cleanup(&g->layers);
}

/* The graph @a id, or NULL. Lookups come in runs for one graph (a task's inputs, a batch of
 * releases): the last graph found is checked first. */
static gs_wgraph_t *gs__wgraph_find(gs_worker_t *w, uint64_t id)
{
    uint64_t v;
    if (w->graph_last != NULL && w->graph_last->id == id) return w->graph_last;
    if (!gs_u64map_get(&w->graphs, id, &v)) return NULL;
    w->graph_last = (gs_wgraph_t *)(uintptr_t)v;
    return w->graph_last;
}

gs_status_t gs__wgraph_get(gs_worker_t *w, uint64_t id, int create, gs_wgraph_t **g_p)
{
    gs_wgraph_t *g;
    gs_status_t status;

    if ((g = gs__wgraph_find(w, id)) != NULL) {
        *g_p = g;
        return GS_OK;
    }
    if (!create) return GS_ERR_NOT_FOUND;
    if (id >= GS_U64MAP_TOMB)
        return gs_error_set(GS_ERR_INVALID_PARAM, "graph id %llu is reserved",
                            (unsigned long long)id);
    g = gs_calloc(1, sizeof(*g), "worker graph");
    if (g == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for graph %llu",
                                       (unsigned long long)id);
    g->id = id;
    gs__wlist_init(&g->idle_link);
    gs_u64map_init(&g->layers);
    gs_idtab_init(&g->chunks);
    gs_idtab_init(&g->tasks);
    status = gs_u64map_put(&w->graphs, id, (uint64_t)(uintptr_t)g);
    if (status != GS_OK) {
        gs_free(g);
        return gs_error_set(status, "out of memory for graph %llu", (unsigned long long)id);
    }
    w->spill_defer_misses = 0;   /* a new graph: admission may wait for releases again */
    *g_p = g;
    return GS_OK;
}

void gs__wgraph_unidle(gs_worker_t *w, gs_wgraph_t *g)
{
    if (!g->idle) return;
    gs__wlist_del(&g->idle_link);
    g->idle = 0;
    w->nidle--;
    w->idle_layer_bytes -= g->layer_bytes;
}

static void gs__wgraph_destroy(gs_worker_t *w, gs_wgraph_t *g)
{
    gs__wgraph_unidle(w, g);
    gs_u64map_del(&w->graphs, g->id);
    if (w->graph_last == g) w->graph_last = NULL;
    gs__wgraph_free_layers(g);
    gs_idtab_cleanup(&g->chunks);
    gs_idtab_cleanup(&g->tasks);
    gs_free(g);
}

void gs__wgraph_maybe_free(gs_worker_t *w, gs_wgraph_t *g, int drop_layers)
{
    if (g->tasks.len != 0 || g->nowned != 0) return;
    if (g->layers.len != 0) {
        if (!drop_layers) {
            /* Idle: keep the layers (gsched sends a layer once per worker and graph) in a
             * bounded cache, oldest dropped first by gs__wgraph_evict_idle(). */
            if (!g->idle) {
                /* empty tables keep a spare page and their directory: give them back */
                if (g->chunks.len == 0) gs_idtab_cleanup(&g->chunks);
                gs_idtab_cleanup(&g->tasks);
                gs__wlist_push(&w->idle_graphs, &g->idle_link);
                g->idle = 1;
                w->nidle++;
                w->idle_layer_bytes += g->layer_bytes;
            }
            return;
        }
        GS_LOG_DEBUG("graph %llu: dropping %zu layers", (unsigned long long)g->id,
                     g->layers.len);
        gs__wgraph_unidle(w, g);
        gs__wgraph_free_layers(g);
    }
    if (g->nchunks_alive != 0) return;
    gs__wgraph_destroy(w, g);
}

void gs__wgraph_evict_idle(gs_worker_t *w)
{
    while (w->nidle > GS_W_IDLE_GRAPHS || w->idle_layer_bytes > GS_W_IDLE_LAYER_BYTES) {
        gs_wgraph_t *g = GS_WCONTAINER(w->idle_graphs.next, gs_wgraph_t, idle_link);
        GS_LOG_DEBUG("graph %llu: idle, dropping its cached layers", (unsigned long long)g->id);
        gs__wgraph_maybe_free(w, g, 1);
    }
}

gs_wchunk_t *gs__wstore_find(gs_worker_t *w, uint64_t graph, uint64_t task)
{
    gs_wgraph_t *g = gs__wgraph_find(w, graph);
    return g != NULL ? gs_idtab_get(&g->chunks, task) : NULL;
}

gs_status_t gs__wmem_alloc(gs_worker_t *w, uint64_t nbytes, void **ptr_p)
{
    gs_status_t nomem = w->streams_mode ? GS_ERR_NO_DEVICE_MEMORY : GS_ERR_NO_MEMORY;
    gs_status_t status;
    void *ptr = NULL;

    if (nbytes > w->mem_limit || w->mem_used > w->mem_limit - nbytes)
        return gs_error_set(nomem, "%llu bytes do not fit: %llu of %llu bytes in use",
                            (unsigned long long)nbytes, (unsigned long long)w->mem_used,
                            (unsigned long long)w->mem_limit);
    if ((uint64_t)(size_t)nbytes != nbytes)
        return gs_error_set(nomem, "%llu bytes do not fit in size_t", (unsigned long long)nbytes);
    status = w->ops->mem_alloc(w->ctx, (size_t)nbytes, &ptr);
    if (status != GS_OK) return status;
    w->mem_used += nbytes;
    *ptr_p = ptr;
    return GS_OK;
}

void gs__wmem_free(gs_worker_t *w, void *ptr, uint64_t nbytes)
{
    w->ops->mem_free(w->ctx, ptr);
    gs_assert(w->mem_used >= nbytes);
    w->mem_used -= nbytes;
    gs__wmem_freed(w);
}

gs_status_t gs__wchunk_new(gs_worker_t *w, gs_wgraph_t *g, uint64_t task, uint64_t nbytes,
                           gs_wchunk_t **c_p)
{
    gs_status_t status;
    gs_wchunk_t *c;
    void *ptr = NULL;

    c = gs_mpool_get(&w->chunk_pool);
    if (c == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for a chunk header");
    status = gs__wmem_alloc(w, nbytes, &ptr);
    if (status != GS_OK) {
        gs_mpool_put(&w->chunk_pool, c);
        return status;
    }
    memset(c, 0, sizeof(*c));
    c->graph = g;
    c->task = task;
    c->ptr = ptr;
    c->nbytes = nbytes;
    c->refs = 1;
    c->state = GS_WCHUNK_PENDING;
    g->nchunks_alive++;
    *c_p = c;
    return GS_OK;
}

void gs__wchunk_ref(gs_wchunk_t *c)
{
    gs_assert_always(c->refs > 0);
    c->refs++;
}

void gs__wchunk_unref(gs_worker_t *w, gs_wchunk_t *c)
{
    gs_wgraph_t *g = c->graph;

    gs_assert_always(c->refs > 0);
    if (--c->refs > 0) return;
    if (c->in_map) {               /* a fetched copy: the map holds no reference */
        gs_assert(!c->owned);
        (void)gs_idtab_del(&g->chunks, c->task);
        c->in_map = 0;
    }
    gs_assert(c->waiters.len == 0);
    GS_VEC_FREE(&c->waiters);
    gs__wspill_forget(w, c, 1);
    if (c->sp.tier == GS_WTIER_MEM) gs__wmem_free(w, c->ptr, c->nbytes);
    else gs__wmem_freed(w);
    g->nchunks_alive--;
    gs_mpool_put(&w->chunk_pool, c);
    gs__wgraph_maybe_free(w, g, 0);
}

static void gs__wstore_unmapped(gs_worker_t *w, gs_wchunk_t *c);

gs_status_t gs__wstore_insert(gs_worker_t *w, gs_wchunk_t *c)
{
    gs_wgraph_t *g = c->graph;
    void *old = NULL;
    gs_status_t status;

    gs_assert(!c->in_map);
    /* one lookup: c replaces the chunk of that key, if any, which is then detached */
    status = gs_idtab_swap(&g->chunks, c->task, c, &old);
    if (status != GS_OK)
        return gs_error_set(status, "%s storing chunk (%llu, %llu)",
                            status == GS_ERR_NO_MEMORY ? "out of memory" : "reserved key",
                            (unsigned long long)g->id, (unsigned long long)c->task);
    if (old != NULL) {
        /* pin the graph: detaching may drop the last reference of old */
        g->nowned++;
        gs__wstore_unmapped(w, old);
        g->nowned--;
    }
    c->in_map = 1;
    if (c->owned) {
        g->nowned++;
        w->st.chunks++;
        gs__wspill_track(w, c);
    }
    return GS_OK;
}

/* What detaching does once the map no longer holds @a c (in_map still set). */
static void gs__wstore_unmapped(gs_worker_t *w, gs_wchunk_t *c)
{
    gs_wgraph_t *g = c->graph;
    c->in_map = 0;
    gs__wspill_forget(w, c, 0);
    if (c->owned) {
        c->owned = 0;
        g->nowned--;
        w->st.chunks--;
        gs__wchunk_unref(w, c);    /* the store's reference */
    }
}

void gs__wstore_detach(gs_worker_t *w, gs_wchunk_t *c)
{
    if (!c->in_map) return;
    (void)gs_idtab_del(&c->graph->chunks, c->task);
    gs__wstore_unmapped(w, c);
}

void gs__wstore_release(gs_worker_t *w, uint64_t graph, uint64_t task)
{
    gs_wgraph_t *g;
    gs_wchunk_t *c;

    if ((g = gs__wgraph_find(w, graph)) == NULL) {
        GS_LOG_DEBUG("release of (%llu, %llu): graph not on this worker",
                     (unsigned long long)graph, (unsigned long long)task);
        return;
    }
    if ((c = gs_idtab_get(&g->chunks, task)) != NULL) {
        if (c->owned) {
            g->nowned++;           /* pin while detaching */
            gs__wstore_detach(w, c);
            g->nowned--;
        }
    } else {
        GS_LOG_DEBUG("release of (%llu, %llu): no such chunk", (unsigned long long)graph,
                     (unsigned long long)task);
    }
    gs__wgraph_maybe_free(w, g, 0);
}

static int gs__wchunk_cmp_addr_desc(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)*(gs_wchunk_t *const *)a, y = (uintptr_t)*(gs_wchunk_t *const *)b;
    return (x < y) - (x > y);
}

/* Sort @a c[0 .. n) by descending address. A graph's chunks come out of its table (id order)
 * mostly in ascending address order, as they were made from the LIFO pools: that order is
 * reversed in O(n) instead of sorted (a qsort of a million chunks was ~4 % of a worker's CPU
 * in gs-bench tasks). */
static void gs__wchunks_sort_addr_desc(gs_wchunk_t **c, size_t n)
{
    size_t i, up = 0, down = 0;
    for (i = 1; i < n; i++) {
        if ((uintptr_t)c[i] > (uintptr_t)c[i - 1]) up++;
        else down++;
    }
    if (up == 0) return;                     /* descending already */
    if (down == 0) {                         /* ascending: reverse */
        for (i = 0; i < n / 2; i++) {
            gs_wchunk_t *x = c[i];
            c[i] = c[n - 1 - i];
            c[n - 1 - i] = x;
        }
        return;
    }
    qsort(c, n, sizeof(c[0]), gs__wchunk_cmp_addr_desc);
}

void gs__wgraph_cancel(gs_worker_t *w, uint64_t graph)
{
    uint64_t v;
    gs_wgraph_t *g;
    GS_VEC(gs_wtask_t *) tasks = {0};
    GS_VEC(gs_wchunk_t *) chunks = {0};
    size_t i;

    if (!gs_u64map_get(&w->graphs, graph, &v)) return;
    g = (gs_wgraph_t *)(uintptr_t)v;
    GS_LOG_DEBUG("cancel graph %llu: %zu tasks, %zu chunks", (unsigned long long)graph,
                 g->tasks.len, g->chunks.len);
    /* Snapshot first: dropping tasks and chunks edits the tables. If the snapshot cannot be
     * allocated we fall back to repeated scans. */
    g->nowned++;                   /* pin the graph */
    if (GS_VEC_RESERVE(&tasks, g->tasks.len) == GS_OK &&
        GS_VEC_RESERVE(&chunks, g->chunks.len) == GS_OK) {
        gs_idtab_iter_t it = GS_IDTAB_ITER_INIT;
        void *p;
        while (gs_idtab_next(&g->tasks, &it, NULL, &p)) tasks.data[tasks.len++] = p;
        for (i = 0; i < tasks.len; i++) {
            gs_wtask_t *t = tasks.data[i];
            if (t->state == GS_WTASK_RUNNING) t->canceled = 1;
            else gs__wtask_drop(w, t);
        }
        it = (gs_idtab_iter_t)GS_IDTAB_ITER_INIT;
        while (gs_idtab_next(&g->chunks, &it, NULL, &p)) chunks.data[chunks.len++] = p;
        /* Free in descending address order: the chunk pools (headers, tiny CPU chunks) are
         * LIFO, so the next graph's chunks are handed out in ascending address order, as they
         * were made (the table's id order need not be that order). */
        if (chunks.len > 1) gs__wchunks_sort_addr_desc(chunks.data, chunks.len);
        /* every chunk leaves the table: drop it whole instead of one removal per chunk */
        gs_idtab_cleanup(&g->chunks);
        for (i = 0; i < chunks.len; i++) {
            gs_wchunk_t *c = chunks.data[i];
            /* fetched copies stay alive for their other users but leave the map */
            if (c->owned) gs__wstore_unmapped(w, c);
            else c->in_map = 0;
        }
    } else {
        /* dropping a task or a chunk removes entries (its own, and chunks whose last
         * reference it held) but never inserts: one pass over each table */
        gs_idtab_iter_t it = GS_IDTAB_ITER_INIT;
        void *p;
        while (gs_idtab_next(&g->tasks, &it, NULL, &p)) {
            gs_wtask_t *t = p;
            if (t->state == GS_WTASK_RUNNING) t->canceled = 1;
            else gs__wtask_drop(w, t);
        }
        it = (gs_idtab_iter_t)GS_IDTAB_ITER_INIT;
        while (gs_idtab_next(&g->chunks, &it, NULL, &p)) {
            gs_wchunk_t *c = p;
            if (c->owned) gs__wstore_detach(w, c);
            else { (void)gs_idtab_del(&g->chunks, c->task); c->in_map = 0; }
        }
    }
    GS_VEC_FREE(&tasks);
    GS_VEC_FREE(&chunks);
    g->nowned--;
    /* layers go now unless running tasks still use them (then with the last of them) */
    if (g->tasks.len == 0) gs__wgraph_maybe_free(w, g, 1);
}

void gs__wstore_clear(gs_worker_t *w)
{
    for (size_t i = 0; i < w->graphs.cap; i++) {
        gs_wgraph_t *g;
        if (w->graphs.keys[i] >= GS_U64MAP_TOMB) continue;
        g = (gs_wgraph_t *)(uintptr_t)w->graphs.vals[i];
        g->nowned++;                    /* pin */
        /* one pass: detaching removes entries, nothing is inserted */
        gs_idtab_iter_t it = GS_IDTAB_ITER_INIT;
        void *p;
        while (gs_idtab_next(&g->chunks, &it, NULL, &p)) {
            gs_wchunk_t *c = p;
            if (c->owned) gs__wstore_detach(w, c);
            else { (void)gs_idtab_del(&g->chunks, c->task); c->in_map = 0; }
        }
        g->nowned--;
    }
}

void gs__wgraph_free_all(gs_worker_t *w)
{
    /* Last resort at destroy: everything has been dropped through the normal paths; what is
     * left here is leaked state we free without the backend (its context is still alive). */
    for (size_t i = 0; i < w->graphs.cap; i++) {
        gs_wgraph_t *g;
        if (w->graphs.keys[i] >= GS_U64MAP_TOMB) continue;
        g = (gs_wgraph_t *)(uintptr_t)w->graphs.vals[i];
        if (g->chunks.len || g->tasks.len || g->nchunks_alive)
            GS_LOG_WARN("graph %llu still holds %zu chunks and %zu tasks at destroy",
                        (unsigned long long)g->id, g->chunks.len, g->tasks.len);
        gs__wgraph_free_layers(g);
        gs_idtab_cleanup(&g->chunks);
        gs_idtab_cleanup(&g->tasks);
        gs_free(g);
    }
    gs_u64map_cleanup(&w->graphs);
    w->graph_last = NULL;
}

void gs__wmem_freed(gs_worker_t *w)
{
    /* last_mem_free is read only while admission is blocked (the watchdog takes the later of it
     * and mem_blocked_since): no clock read per freed chunk otherwise */
    if (w->mem_blocked_since) w->last_mem_free = gs_now_ns();
    w->admit_epoch++;
}
