/* Spec builders shared by the CPU and CUDA chunkops tests (test-only, static inline). */
#ifndef GS_TESTS_CHUNKOPS_SPEC_UTIL_H
#define GS_TESTS_CHUNKOPS_SPEC_UTIL_H

#include "graph/kernel.h"

#include <string.h>

/* A 1-D STORE spec of n elements over two dense chunk leaves a and b (backend memory), then
 * one op: binary on (a, b), unary on a with immediate imm. Output into out. */
static inline void spec_one_op(gs_kfused_t *k, int64_t n, const double *a, const double *b,
                               int op, int binary, double imm, double *out)
{
    memset(k, 0, sizeof(*k));
    k->ndim = 1;
    k->shape[0] = n;
    k->nleaves = 2;
    k->leaves[0].kind = k->leaves[1].kind = GS_LEAF_CHUNK;
    k->leaves[0].data = a;
    k->leaves[1].data = b;
    k->leaves[0].data_len = k->leaves[1].data_len = n;
    k->leaves[0].stride[0] = k->leaves[1].stride[0] = 1;
    k->prog[0].op = GS_OP_LEAF;
    k->prog[1].op = GS_OP_LEAF;
    k->prog[1].arg = 1;
    k->prog[binary ? 2 : 1].op = op;
    k->prog[binary ? 2 : 1].arg = 0;   /* GS_OP_CAST: to float64 (the identity) */
    k->prog[binary ? 2 : 1].imm = imm;
    k->nprog = binary ? 3 : 2;
    k->terminal = GS_TERM_STORE;
    k->out = out;
}

#endif
