/* Helpers of the graph file tests (test_file.c, test_zarr.c, test_file_dtype.c): files written
 * and read back whole, and hostile FILE layers (the read layer of an array, its file spec
 * changed as a peer could send it, through the layer codec as a worker receives it).
 * Header-only; the test fails on any I/O error. */
#ifndef GS_TESTS_GRAPH_FILE_UTIL_H
#define GS_TESTS_GRAPH_FILE_UTIL_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "graph_eval_util.h"
#include "graph/graph_internal.h"
#include "graph/taskgraph.h"

/* Write the @a n bytes at @a p to the file @a path, replacing it. */
static inline void gx_file_write(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "%s", path);
    cr_assert_eq(fwrite(p, 1, n, f), n);
    cr_assert_eq(fclose(f), 0);
}

/* gx_file_write to "@a dir/@a rel" after making the directories above it (mkdir -p). */
static inline void gx_file_put(const char *dir, const char *rel, const void *p, size_t n)
{
    const char *path = gx_path(dir, rel);
    char cmd[600];
    cr_assert_lt((size_t)snprintf(cmd, sizeof(cmd), "mkdir -p \"$(dirname %s)\"", path),
                 sizeof(cmd));
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    gx_file_write(path, p, n);
}

/* gx_file_put of the string @a s (without its NUL). */
static inline void gx_file_put_str(const char *dir, const char *rel, const char *s)
{
    gx_file_put(dir, rel, s, strlen(s));
}

/* The bytes of the file @a path, malloc'd (the caller frees them) with a NUL after the last;
 * their number in *n_p. */
static inline void *gx_file_read(const char *path, size_t *n_p)
{
    FILE *f = fopen(path, "rb");
    long n;
    char *p;
    cr_assert_not_null(f, "%s", path);
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    p = malloc((size_t)n + 1);
    cr_assert_not_null(p);
    cr_assert_eq(fread(p, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    p[n] = 0;
    *n_p = (size_t)n;
    return p;
}

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
