/* Hostile FILE layers for the graph file tests (test_file.c, test_zarr.c): the read layer of an
 * array, its file spec changed as a peer could send it, through the layer codec as a worker
 * receives it. Header-only. */
#ifndef GS_TESTS_GRAPH_FILE_UTIL_H
#define GS_TESTS_GRAPH_FILE_UTIL_H

#include <criterion/criterion.h>

#include "common/buf.h"
#include "graph/graph_internal.h"
#include "graph/taskgraph.h"

/* Lower @a a (a file source; flags 0) to its one FILE layer, let @a edit change that layer's
 * spec, then encode the layer and decode the bytes. The decode's status goes in *st_p; returns
 * the decoded layer (the caller frees it with gs_layer_free), NULL when the decode failed.
 * @a a stays the caller's; the test fails if lowering or encoding fails. */
static inline gs_layer_t *gx_file_layer_edited(gs_array_h a, void (*edit)(gs__fspec_t *),
                                               gs_status_t *st_p)
{
    gs_taskgraph_t *tg = NULL;
    gs_layer_t *l = NULL;
    gs_buf_t b;
    cr_assert_eq(gs_graph_lower(a, 0, &tg), GS_OK, "lowering: %s", gs_last_error());
    cr_assert_eq(tg->nlayers, 1);
    cr_assert_eq(tg->layers[0]->kind, GS_LAYER_FILE);
    edit(tg->layers[0]->u.file.spec);
    gs_buf_init(&b);
    cr_assert_eq(gs_layer_encode(tg->layers[0], &b), GS_OK, "encoding: %s", gs_last_error());
    *st_p = gs_layer_decode(b.data, b.len, &l);
    gs_buf_cleanup(&b);
    gs_taskgraph_free(tg);
    return l;
}

#endif
