/* Chunk grids: block counts, regions, bisection, copying. */
#include "graph/graph_internal.h"
#include "common/heap.h"

#include <string.h>

uint64_t gs_grid_nblocks(const gs_grid_t *g)
{
    uint64_t n = 1;
    for (int32_t a = 0; a < g->ndim; a++) n *= (uint64_t)g->nchunks[a];
    return n;
}

void gs__grid_block_coords(const gs_grid_t *g, uint64_t block, int64_t *idx_p)
{
    if (g->ndim == 1 && block < (uint64_t)g->nchunks[0]) {   /* the common case: no division */
        idx_p[0] = (int64_t)block;
        return;
    }
    for (int32_t a = g->ndim - 1; a >= 0; a--) {
        uint64_t nc = (uint64_t)g->nchunks[a];
        idx_p[a] = (int64_t)(block % nc);
        block /= nc;
    }
}

uint64_t gs__grid_block_index(const gs_grid_t *g, const int64_t *idx)
{
    uint64_t b = 0;
    for (int32_t a = 0; a < g->ndim; a++) b = b * (uint64_t)g->nchunks[a] + (uint64_t)idx[a];
    return b;
}

void gs_grid_block_region(const gs_grid_t *g, uint64_t block, int64_t *start_p, int64_t *shape_p)
{
    int64_t idx[GS_MAX_NDIM];
    gs__grid_block_coords(g, block, idx);
    for (int32_t a = 0; a < g->ndim; a++) {
        start_p[a] = g->bounds[a][idx[a]];
        shape_p[a] = g->bounds[a][idx[a] + 1] - g->bounds[a][idx[a]];
    }
}

void gs_grid_cleanup(gs_grid_t *g)
{
    if (g == NULL) return;
    for (int32_t a = 0; a < GS_MAX_NDIM; a++) {
        gs_free(g->bounds[a]);
        g->bounds[a] = NULL;
    }
    g->ndim = 0;
}

gs_status_t gs__grid_alloc(gs_grid_t *g)
{
    for (int32_t a = 0; a < g->ndim; a++) {
        g->bounds[a] = gs_calloc((size_t)g->nchunks[a] + 1, sizeof(int64_t), "grid bounds");
        if (g->bounds[a] == NULL) {
            gs_grid_cleanup(g);
            return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for chunk bounds");
        }
        (void)gs_heap_advise_huge(g->bounds[a], ((size_t)g->nchunks[a] + 1) * sizeof(int64_t));
    }
    return GS_OK;
}

gs_status_t gs_grid_copy(gs_grid_t *dst, const gs_grid_t *src)
{
    gs_grid_t g;
    memset(&g, 0, sizeof(g));
    g.ndim = src->ndim;
    for (int32_t a = 0; a < src->ndim; a++) {
        g.shape[a] = src->shape[a];
        g.nchunks[a] = src->nchunks[a];
    }
    if (gs__grid_alloc(&g) != GS_OK) return GS_ERR_NO_MEMORY;
    for (int32_t a = 0; a < src->ndim; a++)
        memcpy(g.bounds[a], src->bounds[a], ((size_t)src->nchunks[a] + 1) * sizeof(int64_t));
    *dst = g;
    return GS_OK;
}

int64_t gs__grid_size(const gs_grid_t *g)
{
    int64_t n = 1;
    for (int32_t a = 0; a < g->ndim; a++) n *= g->shape[a];
    return n;
}

int64_t gs__grid_find(const gs_grid_t *g, int axis, int64_t c)
{
    const int64_t *b = g->bounds[axis];
    int64_t lo = 0, hi = g->nchunks[axis];   /* invariant: b[lo] <= c < b[hi] */
    int64_t w = b[1] - b[0];
    /* Regular grids (every chunk as wide as the first but the last): the chunk is c / w. The
     * k with b[k] <= c < b[k + 1] is unique, so a guess that passes is the search's answer. */
    if (w > 0 && c >= b[0]) {
        int64_t k = (c - b[0]) / w;
        if (k < hi && b[k] <= c && c < b[k + 1]) return k;
    }
    while (hi - lo > 1) {
        int64_t mid = lo + (hi - lo) / 2;
        if (b[mid] <= c) lo = mid;
        else hi = mid;
    }
    return lo;
}

int gs__grid_check(const gs_grid_t *g, const char **why_p)
{
    int64_t size = 1, nblocks = 1;
    if (g->ndim < 0 || g->ndim > GS_MAX_NDIM) {
        *why_p = "grid ndim out of range";
        return 0;
    }
    for (int32_t a = 0; a < g->ndim; a++) {
        if (g->shape[a] < 0) {
            *why_p = "grid has a negative shape";
            return 0;
        }
        if (g->nchunks[a] < 1) {
            *why_p = "grid has an axis without chunks";
            return 0;
        }
        if (g->bounds[a] == NULL || g->bounds[a][0] != 0 ||
            g->bounds[a][g->nchunks[a]] != g->shape[a]) {
            *why_p = "grid bounds do not span the shape";
            return 0;
        }
        for (int64_t k = 0; k < g->nchunks[a]; k++) {
            if (g->bounds[a][k + 1] < g->bounds[a][k]) {
                *why_p = "grid bounds are not monotone";
                return 0;
            }
        }
        if (__builtin_mul_overflow(size, g->shape[a], &size) ||
            __builtin_mul_overflow(nblocks, g->nchunks[a], &nblocks)) {
            *why_p = "grid element or block count overflows";
            return 0;
        }
    }
    if (size > GS__MAX_ELEMENTS) {
        *why_p = "grid element count overflows";
        return 0;
    }
    return 1;
}

int gs__grid_equal(const gs_grid_t *x, const gs_grid_t *y)
{
    if (x->ndim != y->ndim) return 0;
    for (int32_t a = 0; a < x->ndim; a++) {
        if (x->shape[a] != y->shape[a] || x->nchunks[a] != y->nchunks[a]) return 0;
        if (memcmp(x->bounds[a], y->bounds[a], ((size_t)x->nchunks[a] + 1) * sizeof(int64_t)))
            return 0;
    }
    return 1;
}
