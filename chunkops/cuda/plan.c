/* Kernel planning for the CUDA backend: rewrite a validated spec into the form the kernels run.
 *
 * Fused specs become "records x loop": a record index r (row-major over the record dims
 * rshape[0..nr)) and a loop index l in [0, L). For STORE and FULL reductions the loop dim is
 * the last axis and the records are the rows; for an axis reduction the loop dim is the
 * reduced axis and the records are the output records. Every leaf (and the arg index) is an
 * affine function of (r's digits, l). Axes of extent 1 are dropped and neighbouring record
 * axes are merged whenever every affine term allows it, so most regions become 1 or 2 dims.
 * Then the launch geometry is chosen from the device's SM count and each kernel's occupancy.
 */
#include "chunkops/chunkops.h"
#include "chunkops/cuda/cuda_internal.h"
#include "chunkops/random.h"

#include <stdint.h>
#include <string.h>

#define GS__NTERMS (GS_KERNEL_MAX_LEAVES + 1) /* leaves, then the arg index */
#define GS__IDX GS_KERNEL_MAX_LEAVES

static const int8_t gs__cuda_arity[GS_OP_COUNT] = {
#define GS__OPC_ARITY(name, val, str, arity) [val] = (arity),
    GS_OPCODE_MAP(GS__OPC_ARITY)
#undef GS__OPC_ARITY
};

static int64_t gs__ceil_div(int64_t a, int64_t b)
{
    return a / b + (a % b != 0);
}

static int64_t gs__min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

static int64_t gs__max64(int64_t a, int64_t b)
{
    return a > b ? a : b;
}

void gs__cuda_tile_shape(int64_t cols, int32_t *tpr_p, int32_t *tile_rows_p)
{
    if (cols >= GS__CUDA_BLOCK) {
        *tpr_p = GS__CUDA_BLOCK;
        *tile_rows_p = 1;
        return;
    }
    if (cols < 32) { /* a whole row per pass, several rows per block */
        int32_t t = cols < 1 ? 1 : (int32_t)cols;
        *tpr_p = t;
        *tile_rows_p = GS__CUDA_BLOCK / t;
        return;
    }
    /* 32 <= cols < 256: the tile width with the fewest idle thread slots (ties: wider) */
    int32_t best = GS__CUDA_BLOCK;
    double best_eff = -1.0;
    for (int32_t t = GS__CUDA_BLOCK; t >= 32; t--) {
        int32_t rows = GS__CUDA_BLOCK / t;
        int64_t passes = gs__ceil_div(cols, t);
        double eff = (double)rows * (double)cols / ((double)passes * GS__CUDA_BLOCK);
        if (eff > best_eff + 1e-9) {
            best_eff = eff;
            best = t;
        }
    }
    *tpr_p = best;
    *tile_rows_p = GS__CUDA_BLOCK / best;
}

/* Affine dims under construction: extent and one stride per term. */
typedef struct gs__pdim {
    int64_t n;
    int64_t s[GS__NTERMS];
} gs__pdim_t;

static int gs__pdim_mergeable(const gs__pdim_t *a, const gs__pdim_t *b)
{
    for (int t = 0; t < GS__NTERMS; t++)
        if (a->s[t] != b->s[t] * b->n) return 0;
    return 1;
}

static int64_t gs__occ_total(const gs__cuda_dev_t *dev, int occ)
{
    int64_t sms = dev->num_sms > 0 ? dev->num_sms : 1;
    return sms * (occ > 0 ? occ : 1);
}

/* CHAIN, CHAIN_MEM with a leaf: whether the ops after the leaf are at most x * m then x + a
 * (x - c is x + (-c), the same IEEE operation); an absent op is its identity (x * 1.0 and
 * x + -0.0 give x exactly, -0.0 included; NaN stays NaN), so the kernel runs exactly the
 * program's roundings. */
static void gs__cuda_chain_tail(gs__cuda_fplan_t *p)
{
    int32_t i = 1;
    p->tail_ma = 0;
    p->tail_m = 1.0;
    p->tail_a = -0.0;
    if (i < p->nprog && p->prog[i].op == GS_OP_MUL_IMM) p->tail_m = p->prog[i++].imm;
    if (i < p->nprog && p->prog[i].op == GS_OP_ADD_IMM) p->tail_a = p->prog[i++].imm;
    else if (i < p->nprog && p->prog[i].op == GS_OP_SUB_IMM) p->tail_a = -p->prog[i++].imm;
    p->tail_ma = i == p->nprog;
}

/* The flat walk's step terms of one affine term (see gs__cuda_leaf_t). */
static void gs__flat_term(gs__cuda_leaf_t *t, int nr, uint32_t lw, int64_t dr, int64_t dl)
{
    if (nr == 0) { /* one dim: offsets linear in e; starts (e0 < lw) are all in wrap row 0 */
        t->frs = 0;
        t->fstep = (dr * (int64_t)lw + dl) * t->lstride;
        t->fwrap = 0;
    } else {
        t->frs = t->rstride[0];
        t->fstep = dr * t->frs + dl * t->lstride;
        t->fwrap = t->frs - (int64_t)lw * t->lstride;
    }
}

/* Plan the flat walk for STORE/FULL when the region collapsed to at most 2 dims (every region
 * a chunk task usually has); returns 0 to leave the plan to the tile kernels. */
static int gs__cuda_flat_plan(const gs__cuda_dev_t *dev, int64_t npart, int W, int64_t N,
                              gs__cuda_fplan_t *p)
{
    const int64_t lw_max = ((int64_t)1 << 31) - 2; /* even; wl + fdl stays below 2^32 */
    if (dev->no_flat || p->nr > 1 || (p->nr == 1 && p->L > lw_max)) return 0;
    int mem = p->variant == GS__CUDA_VAR_CHAIN_MEM || p->variant == GS__CUDA_VAR_PAIR_MEM;
    int64_t V = mem ? GS__CUDA_FLAT_VEC : 1;
    int64_t Ns = gs__ceil_div(N, V);
    int full = p->mode == GS__CUDA_MODE_FULL, acc = full ? p->acc : 0;
    int occ = p->variant == GS__CUDA_VAR_CHAIN && p->leaves[0].kind == GS_LEAF_UNIFORM
                  ? dev->occ_flat_uniform[full * GS__CUDA_NACC + acc]
                  : dev->occ_flat[gs__cuda_flat_kid(p->variant, p->mode, acc)];
    /* one wave of resident blocks, each thread looping over its slots */
    int64_t gx = gs__min64(gs__ceil_div(Ns, GS__CUDA_BLOCK), gs__occ_total(dev, occ));
    gx = gs__min64(gx, lw_max / (V * GS__CUDA_BLOCK)); /* V * T <= lw_max */
    if (p->mode == GS__CUDA_MODE_FULL && gx * W > npart) gx = gs__max64(1, npart / W);
    int64_t T = gx * GS__CUDA_BLOCK;
    if (Ns / T >= (int64_t)UINT32_MAX) return 0; /* slots per thread must fit 32 bits */
    uint32_t lw = p->nr == 1 ? (uint32_t)p->L : (uint32_t)lw_max;
    int64_t VT = V * T;
    int64_t dr = VT / lw, dl = VT % lw;
    p->flat = 1;
    p->fvec = (int32_t)V;
    p->lw = lw;
    p->fdl = (uint32_t)dl;
    p->fq = (uint32_t)(Ns / T);
    p->fr = (uint32_t)(Ns % T);
    p->fodd = V == 2 && N % 2 != 0;
    p->fodd_t = p->fodd ? (uint32_t)((Ns - 1) % T) : 0u;
    for (int32_t t = 0; t < p->nleaves; t++) {
        gs__cuda_leaf_t *lf = &p->leaves[t];
        gs__flat_term(lf, p->nr, lw, dr, dl);
        /* pairs (even e) of a unit-stride chunk leaf: one 16-byte load when every pair starts
         * 16-byte aligned and never straddles a row end (lw even) */
        uintptr_t a = (uintptr_t)lf->data;
        if (V == 2 && lf->kind == GS_LEAF_CHUNK && lf->lstride == 1 && lw % 2 == 0 &&
            (a & 7) == 0 && (((a >> 3) + (uint64_t)lf->base) & 1) == 0 &&
            (p->nr == 0 || (lf->frs & 1) == 0))
            p->fload2 |= 1u << t;
    }
    gs__flat_term(&p->index, p->nr, lw, dr, dl);
    p->fstore2 = V == 2 && p->mode == GS__CUDA_MODE_STORE && ((uintptr_t)p->out & 15) == 0;
    p->tpr = GS__CUDA_BLOCK;
    p->tile_rows = 1;
    p->grid_x = (uint32_t)gx;
    p->grid_y = 1;
    return 1;
}

/* Plan the pair kernels for STORE/FULL of one version-2 normal leaf with unit stride, or one
 * version-3 leaf with stride 1 or 2, along the loop dim (at most one record dim) and unary ops
 * (@a chainlike: the leaf is prog[0] and the stack never holds two values); returns 0 to leave
 * the plan to the other kernels. */
static int gs__cuda_pairs_plan(const gs__cuda_dev_t *dev, int64_t npart, int W, int chainlike,
                               gs__cuda_fplan_t *p)
{
    const int32_t kind = p->leaves[0].kind;
    const int64_t ls = p->leaves[0].lstride;
    if (!chainlike || p->nleaves != 1 || p->nr > 1 ||
        !((kind == GS_LEAF_NORMAL_V2 && ls == 1) || (kind == GS_LEAF_NORMAL_V3 && (ls == 1 || ls == 2))))
        return 0;
    gs__cuda_chain_tail(p);
    const int U = dev->pairs_u == 2 ? 2 : 1;
    int occ = dev->occ_pairs[U - 1][p->mode == GS__CUDA_MODE_FULL ? 1 + p->acc : 0];
    int64_t T = gs__occ_total(dev, occ);
    /* pairs a row can touch (fused_pairs.cu) */
    int64_t ppr = kind == GS_LEAF_NORMAL_V2 ? p->L / 2 + 1 : ls == 1 ? 2 * (p->L / 4 + 2) : p->L / 2 + 2;
    int64_t gx = gs__min64(gs__ceil_div(ppr, (int64_t)U * GS__CUDA_BLOCK), T);
    int64_t gy = gs__min64(p->R, gs__max64(1, T / gx));
    gy = gs__min64(gy, 65535);
    if (p->mode == GS__CUDA_MODE_FULL && gx * gy * W > npart) {
        gy = gs__max64(1, npart / (W * gx));
        if (gx * gy * W > npart) gx = gy = 1;
    }
    p->pairs = U;
    p->tpr = GS__CUDA_BLOCK;
    p->tile_rows = 1;
    p->grid_x = (uint32_t)gx;
    p->grid_y = (uint32_t)gy;
    return 1;
}

/* Plan the transposed-tile kernels for STORE/FULL over a 2-D region (nr == 1) in which one or
 * two chunk leaves run down the rows with unit stride and along them with a long one (x.T of a
 * chunk); returns 0 to leave the plan to the flat walk or the row tiles. */
static int gs__cuda_ttile_plan(const gs__cuda_dev_t *dev, int64_t npart, int W, gs__cuda_fplan_t *p)
{
    if (dev->no_ttile || p->nr != 1 || p->variant == GS__CUDA_VAR_EXT || p->R < 2 || p->L < 2)
        return 0;
    int32_t ntt = 0, chunks = 1;
    for (int32_t t = 0; t < p->nleaves; t++) {
        const gs__cuda_leaf_t *lf = &p->leaves[t];
        p->tslot[t] = -1;
        if (lf->kind != GS_LEAF_CHUNK) chunks = 0;
        if (lf->kind != GS_LEAF_CHUNK || (lf->rstride[0] != 1 && lf->rstride[0] != -1) ||
            (lf->lstride >= -1 && lf->lstride <= 1))
            continue;
        if (ntt == GS__CUDA_TT_MAX) return 0;
        p->tslot[t] = (int8_t)ntt;
        p->tt_leaf[ntt++] = t;
    }
    if (ntt == 0) return 0;
    p->tvariant = p->variant == GS__CUDA_VAR_GENERIC ? 1 : chunks ? 2 : 0;
    if (p->tvariant == 2 && dev->tt_pf && ntt == 1 && p->nleaves == 2)
        p->tvariant = 3; /* one row-major and one transposed chunk leaf: pipelined */
    int occ = dev->occ_ttile[gs__cuda_ttile_kid(p->tvariant, p->mode, p->acc)];
    int64_t ntiles = gs__ceil_div(p->R, GS__CUDA_TT) * gs__ceil_div(p->L, GS__CUDA_TT);
    int64_t gx = gs__min64(ntiles, gs__occ_total(dev, occ));
    if (p->mode == GS__CUDA_MODE_FULL && gx * W > npart) gx = gs__max64(1, npart / W);
    gx = gs__min64(gx, (int64_t)INT32_MAX);
    p->ttile = 1;
    p->ntt = ntt;
    p->tpr = GS__CUDA_TT;
    p->tile_rows = GS__CUDA_BLOCK / GS__CUDA_TT;
    p->grid_x = (uint32_t)gx;
    p->grid_y = 1;
    return 1;
}

void gs__cuda_fplan_build(const gs__cuda_dev_t *dev, const gs__cuda_scratch_t *scratch,
                          const gs_kfused_t *k, gs__cuda_fplan_t *p)
{
    int32_t map[GS_KERNEL_MAX_LEAVES];
    int32_t orig[GS_KERNEL_MAX_LEAVES];
    int32_t nl = 0, depth = 0, maxdepth = 0;

    memset(p, 0, sizeof(*p));
    p->out = k->out;
    p->counter = scratch->counter;
    p->partials = scratch->partials;

    /* leaves the program reads, in first-use order; the rest are dropped */
    for (int32_t i = 0; i < GS_KERNEL_MAX_LEAVES; i++) map[i] = -1;
    p->nprog = k->nprog;
    for (int32_t i = 0; i < k->nprog; i++) {
        gs_kinstr_t in = k->prog[i];
        if (in.op == GS_OP_LEAF) {
            if (map[in.arg] < 0) {
                orig[nl] = in.arg;
                map[in.arg] = nl++;
            }
            in.arg = map[in.arg];
        }
        p->prog[i] = in;
        int ar = gs__cuda_arity[in.op];
        depth += ar == 0 ? 1 : 1 - ar;
        if (depth > maxdepth) maxdepth = depth;
    }
    p->nleaves = nl;
    for (int32_t t = 0; t < nl; t++) {
        const gs_kleaf_t *lf = &k->leaves[orig[t]];
        p->leaves[t].kind = lf->kind;
        p->leaves[t].base = lf->base;
        p->leaves[t].data = lf->data;
        p->leaves[t].seed = lf->seed;
        p->leaves[t].p0 = lf->p0;
        p->leaves[t].p1 = lf->p1;
        if (lf->kind == GS_LEAF_NORMAL || lf->kind == GS_LEAF_UNIFORM ||
            lf->kind == GS_LEAF_NORMAL_V2 || lf->kind == GS_LEAF_NORMAL_V3) {
            uint32_t k0 = (uint32_t)lf->seed, k1 = (uint32_t)(lf->seed >> 32);
            for (int r = 0; r < 10; r++) {
                p->leaves[t].rk[2 * r] = k0;
                p->leaves[t].rk[2 * r + 1] = k1;
                k0 += GS_PHILOX_W0;
                k1 += GS_PHILOX_W1;
            }
        }
    }
    int random = 0, costly = 0, ext = 0, v2 = 0;
    for (int32_t t = 0; t < nl; t++) {
        if (p->leaves[t].kind == GS_LEAF_NORMAL || p->leaves[t].kind == GS_LEAF_UNIFORM) random = 1;
        if (p->leaves[t].kind == GS_LEAF_NORMAL_V2 || p->leaves[t].kind == GS_LEAF_NORMAL_V3)
            random = v2 = 1;
    }
    for (int32_t i = 0; i < k->nprog; i++) {
        if (gs__cuda_op_costly(k->prog[i].op)) costly = 1;
        if (k->prog[i].op >= GS_OP_EXTENDED) ext = 1;
    }
    /* programs with extended ops run on EXT alone; the memory-bound variants run programs
     * without random leaves or costly ops; CHAIN is one random leaf; the rest go to PAIR or
     * GENERIC */
    if (ext)
        p->variant = GS__CUDA_VAR_EXT;
    else if (maxdepth <= 1 && nl <= 1 && !random && !costly)
        p->variant = GS__CUDA_VAR_CHAIN_MEM;
    else if (maxdepth <= 1 && nl == 1 && random && !v2) /* CHAIN kernels: v1 normal, uniform */
        p->variant = GS__CUDA_VAR_CHAIN;
    else if (maxdepth <= 2 && nl <= 2)
        p->variant = random || costly ? GS__CUDA_VAR_PAIR : GS__CUDA_VAR_PAIR_MEM;
    else
        p->variant = GS__CUDA_VAR_GENERIC;
    if ((p->variant == GS__CUDA_VAR_CHAIN || p->variant == GS__CUDA_VAR_CHAIN_MEM) &&
        p->nleaves == 1 && p->prog[0].op == GS_OP_LEAF)
        gs__cuda_chain_tail(p);

    /* terminal */
    int reduce = k->terminal == GS_TERM_REDUCE;
    int axis = reduce ? k->red_axis : -1;
    if (!reduce) {
        p->mode = GS__CUDA_MODE_STORE;
        p->acc = 0;
        p->wout = 1;
    } else {
        p->redop = k->redop;
        p->wout = gs_redop_width((gs_redop_t)k->redop);
        switch (k->redop) {
        case GS_RED_SUM: p->acc = GS__CUDA_ACC_SUM; break;
        case GS_RED_MEAN: p->acc = GS__CUDA_ACC_SUM; p->is_mean = 1; break;
        case GS_RED_MIN: p->acc = GS__CUDA_ACC_MIN; break;
        case GS_RED_MAX: p->acc = GS__CUDA_ACC_MIN; p->is_max = 1; break;
        case GS_RED_PROD: p->acc = GS__CUDA_ACC_MIN; p->is_prod = 1; break;
        case GS_RED_VAR:
        case GS_RED_STD: p->acc = GS__CUDA_ACC_VAR; break;
        case GS_RED_ARGMIN: p->acc = GS__CUDA_ACC_ARG; break;
        default: p->acc = GS__CUDA_ACC_ARG; p->is_max = 1; break; /* ARGMAX */
        }
        p->mode = axis < 0 ? GS__CUDA_MODE_FULL : GS__CUDA_MODE_ROW; /* ROW/COL decided below */
    }
    int use_idx = reduce && p->acc == GS__CUDA_ACC_ARG;
    p->index.kind = GS_LEAF_INDEX;
    p->index.base = use_idx ? k->idx_base : 0;

    /* dims: the loop dim and the record dims, each with one stride per term */
    int32_t loopdim = reduce && axis >= 0 ? axis : k->ndim - 1;
    gs__pdim_t loop, rec[GS_MAX_NDIM];
    int32_t nrec = 0;
    memset(&loop, 0, sizeof(loop));
    loop.n = 1;
    int64_t N = gs_region_size(k->ndim, k->shape);
    for (int32_t j = 0; j < k->ndim; j++) {
        gs__pdim_t d;
        memset(&d, 0, sizeof(d));
        d.n = k->shape[j];
        for (int32_t t = 0; t < nl; t++) d.s[t] = k->leaves[orig[t]].stride[j];
        if (use_idx) d.s[GS__IDX] = axis >= 0 ? (j == axis ? 1 : 0) : k->idx_stride[j];
        if (j == loopdim) {
            loop = d;
        } else {
            rec[nrec++] = d;
        }
    }

    if (N == 0) {
        if (!reduce) {
            p->mode = GS__CUDA_MODE_NONE;
            return;
        }
        int64_t R = 1;
        if (axis >= 0)
            for (int32_t j = 0; j < nrec; j++) R *= rec[j].n;
        p->mode = GS__CUDA_MODE_MERGE_ONLY;
        p->R = R;
        p->L = 0;
        p->nsplit = 0;
        p->count = 0.0;
        p->merge_grid = (uint32_t)gs__min64(gs__ceil_div(R, GS__CUDA_BLOCK),
                                            8 * gs__occ_total(dev, dev->occ_merge));
        return;
    }

    /* drop unit record dims, merge neighbours */
    int32_t nr = 0;
    for (int32_t j = 0; j < nrec; j++) {
        if (rec[j].n == 1) continue;
        if (nr > 0 && gs__pdim_mergeable(&rec[nr - 1], &rec[j])) {
            rec[nr - 1].n *= rec[j].n;
            memcpy(rec[nr - 1].s, rec[j].s, sizeof(rec[j].s));
        } else {
            rec[nr++] = rec[j];
        }
    }
    if (p->mode == GS__CUDA_MODE_STORE || p->mode == GS__CUDA_MODE_FULL) {
        if (loop.n == 1 && nr > 0) loop = rec[--nr];
        while (nr > 0 && gs__pdim_mergeable(&rec[nr - 1], &loop)) {
            loop.n *= rec[nr - 1].n;
            nr--;
        }
    }
    int64_t R = 1;
    p->nr = nr;
    for (int32_t j = 0; j < nr; j++) {
        p->rshape[j] = rec[j].n;
        R *= rec[j].n;
        for (int32_t t = 0; t < nl; t++) p->leaves[t].rstride[j] = rec[j].s[t];
        p->index.rstride[j] = rec[j].s[GS__IDX];
    }
    for (int32_t t = 0; t < nl; t++) p->leaves[t].lstride = loop.s[t];
    p->index.lstride = loop.s[GS__IDX];
    p->R = R;
    p->L = loop.n;
    p->count = p->mode == GS__CUDA_MODE_FULL ? (double)N : (double)p->L;

    int W = gs__cuda_acc_width(p->acc);
    int64_t npart = (int64_t)scratch->npartials;

    /* axis reductions: a warp per record when the axis is long and reading along it is
     * contiguous (or there is nothing to read and few records), else a thread per record */
    if (p->mode == GS__CUDA_MODE_ROW) {
        int unit = 0, far = 0;
        for (int32_t t = 0; t < nl; t++) {
            if (p->leaves[t].kind != GS_LEAF_CHUNK) continue;
            int64_t s = p->leaves[t].lstride;
            if (s == 1 || s == -1) unit = 1;
            else if (s != 0) far = 1;
        }
        int64_t threads = gs__max64(1, dev->num_sms) * 2048;
        if (!(p->L >= 64 && !far && (unit || R < threads))) p->mode = GS__CUDA_MODE_COL;
    }

    int64_t T = gs__occ_total(dev, dev->occ_fused[gs__cuda_fused_kid(p->variant, p->mode,
                                                                       p->acc)]);
    p->nsplit = 1;
    switch (p->mode) {
    case GS__CUDA_MODE_STORE:
    case GS__CUDA_MODE_FULL: {
        if (gs__cuda_pairs_plan(dev, npart, W, maxdepth <= 1 && !ext, p)) break;
        if (gs__cuda_ttile_plan(dev, npart, W, p)) break;
        if (gs__cuda_flat_plan(dev, npart, W, N, p)) break;
        gs__cuda_tile_shape(p->L, &p->tpr, &p->tile_rows);
        int64_t gx = gs__min64(gs__ceil_div(p->L, p->tpr), T);
        int64_t gy = gs__min64(gs__ceil_div(R, p->tile_rows), gs__max64(1, T / gx));
        gy = gs__min64(gy, 65535);
        if (p->mode == GS__CUDA_MODE_FULL && gx * gy * W > npart) { /* never with 4 MiB */
            gy = gs__max64(1, npart / (W * gx));
            if (gx * gy * W > npart) gx = gy = 1;
        }
        p->grid_x = (uint32_t)gx;
        p->grid_y = (uint32_t)gy;
        break;
    }
    case GS__CUDA_MODE_ROW: {
        p->tpr = 32;
        p->tile_rows = GS__CUDA_BLOCK / 32;
        int64_t gy = gs__ceil_div(R, p->tile_rows), gx = 1;
        if (gy >= T) {
            gy = gs__min64(gy, 65535);
        } else {
            gx = gs__min64(gs__ceil_div(T, gy), gs__max64(1, gs__ceil_div(p->L, 32 * 16)));
            gx = gs__min64(gx, gs__max64(1, npart / (R * W)));
        }
        p->grid_x = (uint32_t)gx;
        p->grid_y = (uint32_t)gy;
        p->nsplit = (int32_t)gx;
        break;
    }
    default: { /* COL */
        int64_t S = 1;
        if (R < T * GS__CUDA_BLOCK) {
            S = gs__ceil_div(T * GS__CUDA_BLOCK, R);
            S = gs__min64(S, gs__max64(1, p->L / 16));
            S = gs__min64(S, gs__max64(1, npart / (R * W)));
        }
        p->split_len = gs__ceil_div(p->L, S);
        S = gs__ceil_div(p->L, p->split_len);
        p->nsplit = (int32_t)S;
        p->grid_x = (uint32_t)gs__min64(gs__ceil_div(R * S, GS__CUDA_BLOCK), 8 * T);
        p->grid_y = 1;
        break;
    }
    }
    if (p->nsplit > 1)
        p->merge_grid = (uint32_t)gs__min64(gs__ceil_div(R, GS__CUDA_BLOCK),
                                            8 * gs__occ_total(dev, dev->occ_merge));
}

int gs__cuda_cpiece_build(const gs_kcopy_t *k, int32_t i, gs__cuda_cpiece_t *pc)
{
    const gs_kpiece_t *src = &k->pieces[i];
    int64_t ostride[GS_MAX_NDIM];
    struct { int64_t n, ss, ds; } d[GS_MAX_NDIM];
    int32_t nd = 0;

    memset(pc, 0, sizeof(*pc));
    int64_t st = 1;
    for (int32_t j = k->ndim - 1; j >= 0; j--) {
        ostride[j] = st;
        st *= k->shape[j];
    }
    pc->src = src->src;
    pc->src_base = src->src_base;
    for (int32_t j = 0; j < k->ndim; j++) {
        if (src->size[j] == 0) return 0;
        pc->dst_base += src->dst_start[j] * ostride[j];
        if (src->size[j] == 1) continue;
        if (nd > 0 && d[nd - 1].ss == src->src_stride[j] * src->size[j] &&
            d[nd - 1].ds == ostride[j] * src->size[j]) {
            d[nd - 1].n *= src->size[j];
            d[nd - 1].ss = src->src_stride[j];
            d[nd - 1].ds = ostride[j];
        } else {
            d[nd].n = src->size[j];
            d[nd].ss = src->src_stride[j];
            d[nd].ds = ostride[j];
            nd++;
        }
    }
    if (nd == 0) {
        pc->cols = 1;
    } else {
        nd--;
        pc->cols = d[nd].n;
        pc->src_cstride = d[nd].ss;
        pc->dst_cstride = d[nd].ds;
    }
    pc->nr = nd;
    pc->rows = 1;
    for (int32_t j = 0; j < nd; j++) {
        pc->rshape[j] = d[j].n;
        pc->src_rstride[j] = d[j].ss;
        pc->dst_rstride[j] = d[j].ds;
        pc->rows *= d[j].n;
    }
    gs__cuda_tile_shape(pc->cols, &pc->tpr, &pc->tile_rows);
    pc->colchunks = gs__ceil_div(pc->cols, (int64_t)pc->tpr * GS__CUDA_COPY_UNROLL);
    pc->units = gs__ceil_div(pc->rows, pc->tile_rows) * pc->colchunks;
    return 1;
}
