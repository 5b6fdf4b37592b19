/* Kernel-spec validation: every malformed spec is refused with GS_ERR_INVALID_PARAM and a
 * message naming the problem; the backends refuse it before touching any memory. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "chunkops/chunkops.h"

static double g_data[100];
static double g_out[100];

/* A valid spec: out = chunk[0..10 x 10] + 1, STORE. */
static gs_kfused_t good_fused(void)
{
    gs_kfused_t k;
    memset(&k, 0, sizeof(k));
    k.ndim = 2;
    k.shape[0] = 10;
    k.shape[1] = 10;
    k.nleaves = 1;
    k.leaves[0].kind = GS_LEAF_CHUNK;
    k.leaves[0].data = g_data;
    k.leaves[0].data_len = 100;
    k.leaves[0].stride[0] = 10;
    k.leaves[0].stride[1] = 1;
    k.nprog = 2;
    k.prog[0].op = GS_OP_LEAF;
    k.prog[1].op = GS_OP_ADD_IMM;
    k.prog[1].imm = 1.0;
    k.terminal = GS_TERM_STORE;
    k.out = g_out;
    return k;
}

static void expect_rejected(const gs_kfused_t *k, const char *needle)
{
    gs_status_t st = gs_kfused_validate(k);
    cr_assert_eq(st, GS_ERR_INVALID_PARAM, "expected rejection (%s), got %s", needle,
                 gs_status_name(st));
    cr_assert(strstr(gs_last_error(), needle) != NULL, "message \"%s\" does not mention \"%s\"",
              gs_last_error(), needle);
    /* the backend refuses it too, before writing anything */
    gs_chunkops_ctx_h ctx;
    cr_assert_eq(gs_chunkops_cpu_ops.ctx_create(NULL, &ctx), GS_OK);
    for (int i = 0; i < 100; i++) g_out[i] = -7.0;
    cr_assert_eq(gs_chunkops_cpu_ops.fused(ctx, NULL, k), GS_ERR_INVALID_PARAM);
    for (int i = 0; i < 100; i++) cr_assert_eq(g_out[i], -7.0);
    gs_chunkops_cpu_ops.ctx_destroy(ctx);
}

Test(chunkops_validate, accepts_a_good_spec)
{
    gs_kfused_t k = good_fused();
    cr_assert_eq(gs_kfused_validate(&k), GS_OK, "%s", gs_last_error());
    k.terminal = GS_TERM_REDUCE;
    k.redop = GS_RED_ARGMAX;
    k.red_axis = 1;
    cr_assert_eq(gs_kfused_validate(&k), GS_OK, "%s", gs_last_error());
    cr_assert_eq(gs_kfused_nrecords(&k), 10);
    cr_assert_eq(gs_kfused_out_len(&k), 20);
    k.red_axis = -1;
    k.redop = GS_RED_VAR;
    cr_assert_eq(gs_kfused_nrecords(&k), 1);
    cr_assert_eq(gs_kfused_out_len(&k), 3);
    k.terminal = GS_TERM_STORE;
    cr_assert_eq(gs_kfused_out_len(&k), 100);
}

Test(chunkops_validate, rejects_null_spec)
{
    cr_assert_eq(gs_kfused_validate(NULL), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_kcombine_validate(NULL), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_kcopy_validate(NULL), GS_ERR_INVALID_PARAM);
}

Test(chunkops_validate, rejects_ndim_out_of_range)
{
    gs_kfused_t k = good_fused();
    k.ndim = -1;
    expect_rejected(&k, "ndim");
    k.ndim = GS_MAX_NDIM + 1;
    expect_rejected(&k, "ndim");
}

Test(chunkops_validate, rejects_negative_extent)
{
    gs_kfused_t k = good_fused();
    k.shape[1] = -3;
    expect_rejected(&k, "negative extent");
}

Test(chunkops_validate, rejects_region_larger_than_int64)
{
    gs_kfused_t k = good_fused();
    k.ndim = 3;
    k.shape[0] = k.shape[1] = k.shape[2] = (int64_t)1 << 22;
    expect_rejected(&k, "2^63");
    /* even when another extent is 0 (partial products would overflow) */
    k.shape[2] = 0;
    k.shape[0] = k.shape[1] = (int64_t)1 << 40;
    expect_rejected(&k, "2^63");
}

Test(chunkops_validate, rejects_too_many_leaves)
{
    gs_kfused_t k = good_fused();
    k.nleaves = GS_KERNEL_MAX_LEAVES + 1;
    expect_rejected(&k, "nleaves");
    k.nleaves = -1;
    expect_rejected(&k, "nleaves");
}

Test(chunkops_validate, rejects_unknown_leaf_kind)
{
    gs_kfused_t k = good_fused();
    k.leaves[0].kind = GS_LEAF_KIND_COUNT;
    expect_rejected(&k, "unknown kind");
    k.leaves[0].kind = -1;
    expect_rejected(&k, "unknown kind");
}

Test(chunkops_validate, rejects_chunk_leaf_with_null_data)
{
    gs_kfused_t k = good_fused();
    k.leaves[0].data = NULL;
    expect_rejected(&k, "NULL data");
}

Test(chunkops_validate, rejects_chunk_offsets_past_the_end)
{
    gs_kfused_t k = good_fused();
    k.leaves[0].data_len = 99;
    expect_rejected(&k, "outside");
    k = good_fused();
    k.leaves[0].base = 1;
    expect_rejected(&k, "outside");
    k = good_fused();
    k.leaves[0].stride[0] = 11;
    expect_rejected(&k, "outside");
}

Test(chunkops_validate, rejects_negative_chunk_offsets)
{
    gs_kfused_t k = good_fused();
    k.leaves[0].base = 99;
    k.leaves[0].stride[0] = -10;
    k.leaves[0].stride[1] = -1;
    cr_assert_eq(gs_kfused_validate(&k), GS_OK, "reversed view is fine: %s", gs_last_error());
    k.leaves[0].base = 98;
    expect_rejected(&k, "outside");
}

Test(chunkops_validate, checks_corners_without_overflow)
{
    gs_kfused_t k = good_fused();
    /* base + stride * 9 overflows int64 if computed naively */
    k.leaves[0].base = 0;
    k.leaves[0].stride[0] = INT64_MAX / 4;
    expect_rejected(&k, "outside");
    k.leaves[0].stride[0] = INT64_MIN / 4;
    expect_rejected(&k, "outside");
    k.leaves[0].stride[0] = 10;
    k.leaves[0].base = INT64_MAX;
    expect_rejected(&k, "outside");
    /* random leaf indices must stay in 0..2^63-1 */
    k = good_fused();
    k.leaves[0].kind = GS_LEAF_NORMAL;
    k.leaves[0].base = INT64_MAX - 50;
    expect_rejected(&k, "random leaf");
    k.leaves[0].base = -1;
    expect_rejected(&k, "random leaf");
    k.leaves[0].kind = GS_LEAF_INDEX;
    k.leaves[0].base = INT64_MAX - 50;
    expect_rejected(&k, "index leaf");
}

Test(chunkops_validate, empty_region_reads_nothing)
{
    gs_kfused_t k = good_fused();
    k.shape[0] = 0;
    k.leaves[0].data_len = 0;
    cr_assert_eq(gs_kfused_validate(&k), GS_OK, "%s", gs_last_error());
}

Test(chunkops_validate, rejects_unknown_opcode)
{
    gs_kfused_t k = good_fused();
    k.prog[1].op = GS_OP_COUNT;
    expect_rejected(&k, "unknown opcode");
    k.prog[1].op = -2;
    expect_rejected(&k, "unknown opcode");
}

Test(chunkops_validate, rejects_leaf_argument_out_of_range)
{
    gs_kfused_t k = good_fused();
    k.prog[0].arg = 1;
    expect_rejected(&k, "reads leaf 1 of 1");
    k.prog[0].arg = -1;
    expect_rejected(&k, "reads leaf -1");
}

Test(chunkops_validate, rejects_stack_underflow)
{
    gs_kfused_t k = good_fused();
    k.prog[1].op = GS_OP_ADD;
    expect_rejected(&k, "underflow");
    k = good_fused();
    k.prog[0].op = GS_OP_NEG;
    expect_rejected(&k, "underflow");
}

Test(chunkops_validate, rejects_stack_deeper_than_the_limit)
{
    gs_kfused_t k = good_fused();
    k.nprog = 0;
    for (int i = 0; i < GS_KERNEL_MAX_STACK + 1; i++) k.prog[k.nprog++].op = GS_OP_LEAF;
    for (int i = 0; i < GS_KERNEL_MAX_STACK; i++) k.prog[k.nprog++].op = GS_OP_ADD;
    expect_rejected(&k, "exceeds");
    /* exactly the limit is fine */
    k.nprog = 0;
    for (int i = 0; i < GS_KERNEL_MAX_STACK; i++) k.prog[k.nprog++].op = GS_OP_LEAF;
    for (int i = 0; i < GS_KERNEL_MAX_STACK - 1; i++) k.prog[k.nprog++].op = GS_OP_MUL;
    cr_assert_eq(gs_kfused_validate(&k), GS_OK, "%s", gs_last_error());
}

Test(chunkops_validate, rejects_programs_leaving_other_than_one_value)
{
    gs_kfused_t k = good_fused();
    k.prog[1].op = GS_OP_CONST;
    expect_rejected(&k, "leaves 2 values");
    k.nprog = 0;
    expect_rejected(&k, "program length");
    k.nprog = GS_KERNEL_MAX_PROG + 1;
    expect_rejected(&k, "program length");
}

Test(chunkops_validate, rejects_bad_terminal_redop_and_axis)
{
    gs_kfused_t k = good_fused();
    k.terminal = 2;
    expect_rejected(&k, "unknown terminal");
    k.terminal = GS_TERM_REDUCE;
    k.redop = GS_RED_COUNT;
    expect_rejected(&k, "unknown reduction");
    k.redop = -1;
    expect_rejected(&k, "unknown reduction");
    k.redop = GS_RED_SUM;
    k.red_axis = 2;
    expect_rejected(&k, "reduction axis");
    k.red_axis = -2;
    expect_rejected(&k, "reduction axis");
    k.ndim = 0;
    k.red_axis = 0;
    expect_rejected(&k, "reduction axis");
}

Test(chunkops_validate, rejects_arg_indices_that_doubles_cannot_hold)
{
    gs_kfused_t k = good_fused();
    k.terminal = GS_TERM_REDUCE;
    k.redop = GS_RED_ARGMIN;
    k.red_axis = -1;
    k.idx_stride[0] = 10;
    k.idx_stride[1] = 1;
    k.idx_base = ((int64_t)1 << 53) - 50;
    expect_rejected(&k, "indices");
    k.idx_base = -1;
    expect_rejected(&k, "indices");
}

Test(chunkops_validate, rejects_null_out)
{
    gs_kfused_t k = good_fused();
    k.out = NULL;
    expect_rejected(&k, "out is NULL");
}

/* ---- combine ---- */

static gs_kcombine_t good_combine(void)
{
    gs_kcombine_t k;
    memset(&k, 0, sizeof(k));
    k.redop = GS_RED_VAR;
    k.nrec = 3;
    k.ninputs = 2;
    k.inputs[0] = g_data;
    k.inputs[1] = g_data + 9;
    k.out = g_out;
    return k;
}

static void expect_combine_rejected(const gs_kcombine_t *k, const char *needle)
{
    cr_assert_eq(gs_kcombine_validate(k), GS_ERR_INVALID_PARAM, "expected rejection (%s)", needle);
    cr_assert(strstr(gs_last_error(), needle) != NULL, "message \"%s\" does not mention \"%s\"",
              gs_last_error(), needle);
    gs_chunkops_ctx_h ctx;
    cr_assert_eq(gs_chunkops_cpu_ops.ctx_create(NULL, &ctx), GS_OK);
    cr_assert_eq(gs_chunkops_cpu_ops.combine(ctx, NULL, k), GS_ERR_INVALID_PARAM);
    gs_chunkops_cpu_ops.ctx_destroy(ctx);
}

Test(chunkops_validate, combine_checks_inputs_and_ops)
{
    gs_kcombine_t k = good_combine();
    cr_assert_eq(gs_kcombine_validate(&k), GS_OK, "%s", gs_last_error());
    k.ninputs = 0;
    expect_combine_rejected(&k, "ninputs");
    k.ninputs = GS_KERNEL_MAX_COMBINE + 1;
    expect_combine_rejected(&k, "ninputs");
    k = good_combine();
    k.inputs[1] = NULL;
    expect_combine_rejected(&k, "input 1 is NULL");
    k = good_combine();
    k.redop = GS_RED_COUNT;
    expect_combine_rejected(&k, "unknown reduction");
    k = good_combine();
    k.nrec = -1;
    expect_combine_rejected(&k, "nrec");
    k = good_combine();
    k.out = NULL;
    expect_combine_rejected(&k, "out is NULL");
    k = good_combine();
    k.finalize = 2;
    expect_combine_rejected(&k, "finalize");
    k = good_combine();
    k.ddof = NAN;
    expect_combine_rejected(&k, "ddof");
}

/* ---- copy ---- */

static gs_kcopy_t good_copy(void)
{
    /* 4 x 6 output from two 4 x 3 pieces of a 10 x 10 source */
    gs_kcopy_t k;
    memset(&k, 0, sizeof(k));
    k.ndim = 2;
    k.shape[0] = 4;
    k.shape[1] = 6;
    k.npieces = 2;
    for (int i = 0; i < 2; i++) {
        k.pieces[i].src = g_data;
        k.pieces[i].src_len = 100;
        k.pieces[i].src_base = 3 * i;
        k.pieces[i].src_stride[0] = 10;
        k.pieces[i].src_stride[1] = 1;
        k.pieces[i].dst_start[1] = 3 * i;
        k.pieces[i].size[0] = 4;
        k.pieces[i].size[1] = 3;
    }
    k.out = g_out;
    return k;
}

static void expect_copy_rejected(const gs_kcopy_t *k, const char *needle)
{
    cr_assert_eq(gs_kcopy_validate(k), GS_ERR_INVALID_PARAM, "expected rejection (%s)", needle);
    cr_assert(strstr(gs_last_error(), needle) != NULL, "message \"%s\" does not mention \"%s\"",
              gs_last_error(), needle);
    gs_chunkops_ctx_h ctx;
    cr_assert_eq(gs_chunkops_cpu_ops.ctx_create(NULL, &ctx), GS_OK);
    cr_assert_eq(gs_chunkops_cpu_ops.copy(ctx, NULL, k), GS_ERR_INVALID_PARAM);
    gs_chunkops_cpu_ops.ctx_destroy(ctx);
}

Test(chunkops_validate, copy_checks_pieces)
{
    gs_kcopy_t k = good_copy();
    cr_assert_eq(gs_kcopy_validate(&k), GS_OK, "%s", gs_last_error());
    k.ndim = 9;
    expect_copy_rejected(&k, "ndim");
    k = good_copy();
    k.shape[0] = -1;
    expect_copy_rejected(&k, "negative extent");
    k = good_copy();
    k.npieces = GS_KERNEL_MAX_PIECES + 1;
    expect_copy_rejected(&k, "npieces");
    k = good_copy();
    k.pieces[1].dst_start[1] = 4;
    expect_copy_rejected(&k, "outside the output");
    k = good_copy();
    k.pieces[0].size[0] = -1;
    expect_copy_rejected(&k, "outside the output");
    k = good_copy();
    k.pieces[1].src = NULL;
    expect_copy_rejected(&k, "NULL source");
    k = good_copy();
    k.pieces[1].src_base = 98;
    expect_copy_rejected(&k, "source offsets");
    k = good_copy();
    k.pieces[0].src_stride[0] = -10;
    expect_copy_rejected(&k, "source offsets");
    k = good_copy();
    k.pieces[1].dst_start[1] = 2;
    k.pieces[1].size[1] = 3;
    k.pieces[0].size[1] = 3;
    expect_copy_rejected(&k, "overlap");
    k = good_copy();
    k.npieces = 1;
    expect_copy_rejected(&k, "cover 12 of the 24");
    k = good_copy();
    k.out = NULL;
    expect_copy_rejected(&k, "out is NULL");
}
