/* Operation names of layers (gs_layer_display_name, sent in GRAPH_SUBMIT for gsched's dashboard),
 * from real lowered expressions. */
#include <criterion/criterion.h>
#include <string.h>

#include "common/buf.h"
#include "graph/taskgraph.h"
#include <gsched/array.h>

#define OK(x) cr_assert_eq((x), GS_OK, "%s: %s", #x, gs_last_error())

/* The names of @a a's lowered layers joined by ',' into @a out, each written with @a cap. */
static void names_of(gs_array_h a, size_t cap, char *out, size_t outcap)
{
    gs_taskgraph_t *tg;
    out[0] = '\0';
    OK(gs_graph_lower(a, GS_LOWER_DEFAULT, &tg));
    for (uint32_t l = 0; l < tg->nlayers; l++) {
        char name[64];
        memset(name, 'x', sizeof name);
        gs_layer_display_name(tg->layers[l], name, cap);
        cr_assert_lt(strlen(name), cap);
        if (l > 0) strncat(out, ",", outcap - strlen(out) - 1);
        strncat(out, name, outcap - strlen(out) - 1);
    }
    gs_taskgraph_free(tg);
}

Test(graph_layer_name, layers_are_named_for_what_they_compute)
{
    const int64_t shape[1] = {1000}, chunks[1] = {100};
    gs_array_h x, y, z, s;
    char got[256];

    OK(gs_array_random_normal(7, 0.0, 1.0, 1, shape, chunks, &x));
    OK(gs_array_binary_scalar(GS_BINARY_ADD, x, 1.0, &y));
    names_of(y, 48, got, sizeof got);
    cr_assert_str_eq(got, "normal+add");

    OK(gs_array_unary(GS_UNARY_EXP, y, &z));
    OK(gs_array_reduce(GS_RED_SUM, z, NULL, &s));
    names_of(s, 48, got, sizeof got);
    cr_assert_str_eq(got, "normal+add+exp+sum,combine-sum");

    /* a name that does not fit ends with "+..." */
    names_of(s, 16, got, sizeof got);
    cr_assert_str_eq(got, "normal+add+...,combine-sum");

    gs_array_release(s);
    gs_array_release(z);
    gs_array_release(y);
    gs_array_release(x);
}

Test(graph_layer_name, a_slice_and_a_literal_are_named)
{
    const int64_t shape[1] = {1000}, chunks[1] = {100};
    const double data[4] = {1, 2, 3, 4};
    const int64_t lshape[1] = {4}, lchunks[1] = {2};
    const gs_slice_t sl[1] = {GS_SLICE(10, 500, 2)};
    gs_array_h x, y, lit;
    char got[256];

    OK(gs_array_random_normal(7, 0.0, 1.0, 1, shape, chunks, &x));
    OK(gs_array_slice(x, 1, sl, &y));
    names_of(y, 48, got, sizeof got);
    cr_assert_str_eq(got, "normal");
    OK(gs_array_from_host(data, 1, lshape, lchunks, &lit));
    names_of(lit, 48, got, sizeof got);
    cr_assert_str_eq(got, "literal");
    /* no room: an empty name, never an overrun */
    names_of(lit, 1, got, sizeof got);
    cr_assert_str_eq(got, "");
    gs_array_release(lit);
    gs_array_release(y);
    gs_array_release(x);
}
