/* Operation names of layers on the dashboard (scheduler/dash/names.h), from real lowered
 * expressions. */
#include <criterion/criterion.h>
#include <string.h>

#include "common/buf.h"
#include "graph/taskgraph.h"
#include "scheduler/dash/names.h"
#include <gsched/array.h>

#define OK(x) cr_assert_eq((x), GS_OK, "%s: %s", #x, gs_last_error())

/* The names of @a a's lowered layers joined by ',' into @a out, each written with @a cap. */
static void names_of(gs_array_h a, size_t cap, char *out, size_t outcap)
{
    gs_taskgraph_t *tg;
    out[0] = '\0';
    OK(gs_graph_lower(a, GS_LOWER_DEFAULT, &tg));
    for (uint32_t l = 0; l < tg->nlayers; l++) {
        gs_buf_t b;
        char name[64];
        gs_buf_init(&b);
        OK(gs_layer_encode(tg->layers[l], &b));
        gs__dash_layer_name(b.data, b.len, name, cap);
        cr_assert_lt(strlen(name), cap);
        if (l > 0) strncat(out, ",", outcap - strlen(out) - 1);
        strncat(out, name, outcap - strlen(out) - 1);
        gs_buf_cleanup(&b);
    }
    gs_taskgraph_free(tg);
}

Test(scheduler_names, layers_are_named_for_what_they_compute)
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

Test(scheduler_names, bytes_that_are_not_a_layer_are_named_layer)
{
    char name[48];
    gs__dash_layer_name((const uint8_t *)"\x93\x01\x00\xc1", 4, name, sizeof name);
    cr_assert_str_eq(name, "layer");
    gs__dash_layer_name((const uint8_t *)"", 0, name, sizeof name);
    cr_assert_str_eq(name, "layer");
}
