/* See intsum_spec.h. */
#include "intsum_spec.h"

#include <string.h>

void is_reduce_spec(gs_kfused_t *k, gs_dtype_t dt, const void *data, int64_t R, int64_t C, int op,
                    int axis, double *out)
{
    memset(k, 0, sizeof(*k));
    k->ndim = 2;
    k->shape[0] = R;
    k->shape[1] = C;
    k->nleaves = 1;
    k->leaves[0].kind = GS_LEAF_CHUNK;
    k->leaves[0].dtype = dt;
    k->leaves[0].data = data;
    k->leaves[0].data_len = R * C;
    k->leaves[0].stride[0] = C;
    k->leaves[0].stride[1] = 1;
    k->prog[0].op = GS_OP_LEAF;
    k->prog[0].dtype = dt;
    k->nprog = 1;
    if (dt != GS_DTYPE_INT64) {
        k->prog[1].op = GS_OP_CAST;
        k->prog[1].dtype = dt;
        k->prog[1].arg = GS_DTYPE_INT64;
        k->nprog = 2;
    }
    k->terminal = GS_TERM_REDUCE;
    k->redop = op;
    k->red_axis = axis;
    k->out_dtype = GS_DTYPE_INT64;
    k->out = out;
}

void is_cast_to_bool(gs_kfused_t *k)
{
    gs_kinstr_t *in = &k->prog[k->nprog];
    in[0].op = GS_OP_CAST;
    in[0].dtype = GS_DTYPE_INT64;
    in[0].arg = GS_DTYPE_BOOL;
    in[1].op = GS_OP_CAST;
    in[1].dtype = GS_DTYPE_BOOL;
    in[1].arg = GS_DTYPE_INT64;
    k->nprog += 2;
}

void is_combine_spec(gs_kcombine_t *kc, int op, int64_t nrec, int ninputs, int finalize,
                     gs_dtype_t out_dtype)
{
    memset(kc, 0, sizeof(*kc));
    kc->redop = op;
    kc->finalize = finalize;
    kc->out_dtype = out_dtype;
    kc->rec_dtype = GS_DTYPE_INT64;
    kc->nrec = nrec;
    kc->ninputs = ninputs;
}

int64_t is_big_value(uint64_t (*rnd)(void))
{
    static const int64_t v[] = {(1ll << 53) + 1, (1ll << 62) + 3, -(1ll << 53) - 1, INT64_MAX,
                                INT64_MIN + 7, 9007199254740993ll, 3, -5, 1, -1};
    /* plus 0..2, wrapping (INT64_MAX + 1 is INT64_MIN, as NumPy's int64 gives) */
    return (int64_t)((uint64_t)v[rnd() % (sizeof(v) / sizeof(v[0]))] + rnd() % 3);
}
