/* The CUDA backend's kernel planner (host code, no GPU needed): the collapsed "records x loop"
 * form of a fused spec must address exactly the elements the spec names, each with the right
 * output position, and the launch geometry must respect the kernels' assumptions. Same for
 * the collapsed copy pieces. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chunkops/cuda/cuda_internal.h"
#include "chunkops/random.h"

static uint64_t rng_state;

static uint64_t rnd(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int64_t rndr(int64_t lo, int64_t hi) /* inclusive */
{
    return lo + (int64_t)(rnd() % (uint64_t)(hi - lo + 1));
}

static gs__cuda_dev_t fake_dev(void)
{
    gs__cuda_dev_t d;
    memset(&d, 0, sizeof(d));
    d.num_sms = 132;
    for (int i = 0; i < GS__CUDA_FUSED_KERNELS; i++) d.occ_fused[i] = 4;
    for (int i = 0; i < GS__CUDA_FLAT_KERNELS; i++) d.occ_flat[i] = 4;
    for (int i = 0; i < 2 * GS__CUDA_NACC; i++) d.occ_flat_uniform[i] = 4;
    d.occ_merge = d.occ_combine = d.occ_copy = 8;
    return d;
}

/* One resident block on one SM: flat walks of a few hundred elements take many steps. */
static gs__cuda_dev_t tiny_dev(void)
{
    gs__cuda_dev_t d = fake_dev();
    d.num_sms = 1;
    for (int i = 0; i < GS__CUDA_FLAT_KERNELS; i++) d.occ_flat[i] = 1;
    for (int i = 0; i < 2 * GS__CUDA_NACC; i++) d.occ_flat_uniform[i] = 1;
    return d;
}

static gs__cuda_scratch_t fake_scratch(void)
{
    gs__cuda_scratch_t s;
    s.counter = (unsigned int *)(uintptr_t)0x100000;
    s.partials = (double *)(uintptr_t)0x200000;
    s.npartials = ((size_t)4 << 20) / 8 - 32;
    return s;
}

/* One element as the kernels see it: output key, leaf offsets (plan order), arg index. */
typedef struct tup {
    int64_t key;
    int64_t off[GS_KERNEL_MAX_LEAVES];
    int64_t idx;
} tup_t;

static int tup_cmp(const void *a, const void *b)
{
    const tup_t *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    for (int i = 0; i < GS_KERNEL_MAX_LEAVES; i++)
        if (x->off[i] != y->off[i]) return x->off[i] < y->off[i] ? -1 : 1;
    if (x->idx != y->idx) return x->idx < y->idx ? -1 : 1;
    return 0;
}

static int64_t plan_walk(const gs__cuda_fplan_t *p, tup_t *t)
{
    int64_t n = 0;
    for (int64_t r = 0; r < p->R; r++) {
        int64_t row[GS_KERNEL_MAX_LEAVES], ridx = p->index.base, q = r;
        for (int k = 0; k < p->nleaves; k++) row[k] = p->leaves[k].base;
        for (int j = p->nr - 1; j >= 0; j--) {
            int64_t d = q % p->rshape[j];
            q /= p->rshape[j];
            for (int k = 0; k < p->nleaves; k++) row[k] += d * p->leaves[k].rstride[j];
            ridx += d * p->index.rstride[j];
        }
        for (int64_t l = 0; l < p->L; l++) {
            memset(&t[n], 0, sizeof(t[n]));
            t[n].key = p->mode == GS__CUDA_MODE_STORE ? r * p->L + l
                       : p->mode == GS__CUDA_MODE_FULL ? 0
                                                       : r;
            for (int k = 0; k < p->nleaves; k++) t[n].off[k] = row[k] + l * p->leaves[k].lstride;
            t[n].idx = ridx + l * p->index.lstride;
            n++;
        }
    }
    return n;
}

/* The flat kernels' walk (fused_device.cuh: flat_start, flat_advance, flat_gather), replayed on the
 * host thread by thread. Also checks what the kernels assume: slots per thread and the wrapped
 * index fit 32 bits, and a leaf whose pairs are one 16-byte load (fload2) has the pair's
 * second element right after the first, inside the row, with the first 16-byte aligned. */
static int64_t flat_walk(const gs__cuda_fplan_t *p, tup_t *out)
{
    const int64_t T = (int64_t)p->grid_x * GS__CUDA_BLOCK, V = p->fvec;
    int64_t n_out = 0;
    cr_assert(p->grid_y == 1 && (V == 1 || V == 2) && p->lw >= 1 && p->fdl < p->lw);
    cr_assert(V * T <= (int64_t)p->lw || p->nr == 1, "1-D walks start in wrap row 0");
    for (int64_t t = 0; t < T; t++) {
        uint32_t n = p->fq + ((uint32_t)t < p->fr ? 1u : 0u);
        if (n == 0) continue;
        uint32_t e0 = (uint32_t)(t * V), wr = e0 / p->lw, wl = e0 - wr * p->lw;
        int64_t off[GS_KERNEL_MAX_LEAVES], idx;
        for (int k = 0; k < p->nleaves; k++)
            off[k] = p->leaves[k].base + (int64_t)wr * p->leaves[k].frs +
                     (int64_t)wl * p->leaves[k].lstride;
        idx = p->index.base + (int64_t)wr * p->index.frs + (int64_t)wl * p->index.lstride;
        int half = p->fodd && (uint32_t)t == p->fodd_t;
        int64_t e = (int64_t)e0;
        for (uint32_t i = 0; i < n; i++) {
            for (int v = 0; v < V; v++) {
                if (v == 1 && half && i + 1 == n) continue;
                int w = v == 1 && wl + 1 == p->lw;
                tup_t *u = &out[n_out++];
                memset(u, 0, sizeof(*u));
                u->key = p->mode == GS__CUDA_MODE_STORE ? e + v : 0;
                for (int k = 0; k < p->nleaves; k++) {
                    const gs__cuda_leaf_t *lf = &p->leaves[k];
                    u->off[k] = off[k] + (v ? lf->lstride + (w ? lf->fwrap : 0) : 0);
                    if (v == 1 && ((p->fload2 >> k) & 1u)) {
                        cr_assert(!w && u->off[k] == off[k] + 1, "a 16-byte pair is adjacent");
                        cr_assert(((((uintptr_t)lf->data >> 3) + (uint64_t)off[k]) & 1) == 0,
                                  "a 16-byte pair is aligned");
                    }
                }
                u->idx = idx + (v ? p->index.lstride + (w ? p->index.fwrap : 0) : 0);
            }
            wl += p->fdl;
            int w = wl >= p->lw;
            if (w) wl -= p->lw;
            for (int k = 0; k < p->nleaves; k++)
                off[k] += p->leaves[k].fstep + (w ? p->leaves[k].fwrap : 0);
            idx += p->index.fstep + (w ? p->index.fwrap : 0);
            e += V * T;
        }
    }
    return n_out;
}

static int64_t spec_walk(const gs_kfused_t *k, tup_t *t)
{
    int32_t order[GS_KERNEL_MAX_LEAVES], nl = 0, seen[GS_KERNEL_MAX_LEAVES] = {0};
    for (int i = 0; i < k->nprog; i++)
        if (k->prog[i].op == GS_OP_LEAF && !seen[k->prog[i].arg]) {
            seen[k->prog[i].arg] = 1;
            order[nl++] = k->prog[i].arg;
        }
    int64_t N = gs_region_size(k->ndim, k->shape);
    int reduce = k->terminal == GS_TERM_REDUCE;
    int arg = reduce && (k->redop == GS_RED_ARGMIN || k->redop == GS_RED_ARGMAX);
    for (int64_t f = 0; f < N; f++) {
        int64_t pos[GS_MAX_NDIM], q = f;
        for (int j = k->ndim - 1; j >= 0; j--) {
            pos[j] = q % k->shape[j];
            q /= k->shape[j];
        }
        memset(&t[f], 0, sizeof(t[f]));
        for (int i = 0; i < nl; i++) {
            const gs_kleaf_t *lf = &k->leaves[order[i]];
            int64_t o = lf->base;
            for (int j = 0; j < k->ndim; j++) o += pos[j] * lf->stride[j];
            t[f].off[i] = o;
        }
        if (arg) {
            if (k->red_axis < 0) {
                t[f].idx = k->idx_base;
                for (int j = 0; j < k->ndim; j++) t[f].idx += pos[j] * k->idx_stride[j];
            } else {
                t[f].idx = k->idx_base + pos[k->red_axis];
            }
        }
        if (!reduce) {
            t[f].key = f;
        } else if (k->red_axis < 0) {
            t[f].key = 0;
        } else {
            int64_t rec = 0;
            for (int j = 0; j < k->ndim; j++)
                if (j != k->red_axis) rec = rec * k->shape[j] + pos[j];
            t[f].key = rec;
        }
    }
    return N;
}

/* Random strides: contiguous row-major (possibly stepped or over a permutation) or random. */
static void gen_strides(const gs_kfused_t *k, int64_t *stride)
{
    int style = (int)(rnd() % 4);
    if (style == 0) {
        for (int j = 0; j < k->ndim; j++) stride[j] = rndr(-50, 50);
        return;
    }
    int perm[GS_MAX_NDIM];
    for (int j = 0; j < k->ndim; j++) perm[j] = j;
    if (style == 2)
        for (int j = k->ndim - 1; j > 0; j--) {
            int i = (int)(rnd() % (uint64_t)(j + 1)), t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
    int64_t step = style == 3 ? rndr(1, 3) : 1, c = step;
    for (int jj = k->ndim - 1; jj >= 0; jj--) {
        int j = perm[jj];
        stride[j] = (rnd() % 8 == 0) ? 0 : c;
        c *= k->shape[j] > 0 ? k->shape[j] : 1;
    }
}

static void gen_spec(gs_kfused_t *k)
{
    memset(k, 0, sizeof(*k));
    k->ndim = (int32_t)rndr(0, 5);
    int64_t budget = 4000;
    for (int j = 0; j < k->ndim; j++) {
        int64_t m = rnd() % 3 == 0 ? 1 : rndr(1, 12);
        if (rnd() % 6 == 0) m = rndr(60, 300);
        if (m > budget) m = 1;
        budget /= m > 0 ? m : 1;
        k->shape[j] = m;
    }
    k->nleaves = (int32_t)rndr(1, GS_KERNEL_MAX_LEAVES);
    for (int i = 0; i < k->nleaves; i++) {
        k->leaves[i].kind = (int32_t)(rnd() % 2 ? GS_LEAF_CHUNK : GS_LEAF_INDEX);
        k->leaves[i].data = (const double *)(uintptr_t)0x5000;
        k->leaves[i].base = rndr(0, 1000);
        gen_strides(k, k->leaves[i].stride);
    }
    /* program: push a random subset of leaves (some twice, some never), fold with adds */
    int n = 0, depth = 0, pushes = (int)rndr(1, 6);
    for (int i = 0; i < pushes; i++) {
        k->prog[n].op = GS_OP_LEAF;
        k->prog[n].arg = (int32_t)(rnd() % (uint64_t)k->nleaves);
        n++;
        if (++depth >= 2 && rnd() % 2) {
            k->prog[n++].op = GS_OP_ADD;
            depth--;
        }
    }
    while (depth > 1) {
        k->prog[n++].op = GS_OP_MUL;
        depth--;
    }
    k->nprog = n;
    k->terminal = rnd() % 3 == 0 ? GS_TERM_STORE : GS_TERM_REDUCE;
    k->redop = (int32_t)(rnd() % GS_RED_COUNT);
    k->red_axis = k->ndim > 0 && rnd() % 3 ? (int32_t)(rnd() % (uint64_t)k->ndim) : -1;
    k->idx_base = rndr(0, 100);
    gen_strides(k, k->idx_stride);
    k->out = (double *)(uintptr_t)0x9000;
}

static void check_geometry(const gs_kfused_t *k, const gs__cuda_fplan_t *p,
                           const gs__cuda_scratch_t *s)
{
    int W = gs__cuda_acc_width(p->acc);
    switch (p->mode) {
    case GS__CUDA_MODE_STORE:
    case GS__CUDA_MODE_FULL:
        cr_assert(p->tpr >= 1 && p->tile_rows >= 1 && p->tpr * p->tile_rows <= GS__CUDA_BLOCK);
        cr_assert(p->grid_x >= 1 && p->grid_y >= 1 && p->grid_y <= 65535);
        if (p->mode == GS__CUDA_MODE_FULL)
            cr_assert((size_t)p->grid_x * p->grid_y * W <= s->npartials);
        cr_assert_eq(p->merge_grid, 0);
        break;
    case GS__CUDA_MODE_ROW:
        cr_assert_eq(p->tpr, 32);
        cr_assert_eq(p->tpr * p->tile_rows, GS__CUDA_BLOCK);
        cr_assert(p->grid_y >= 1 && p->grid_y <= 65535);
        cr_assert_eq((int64_t)p->grid_x, p->nsplit);
        break;
    case GS__CUDA_MODE_COL:
        cr_assert(p->nsplit >= 1 && p->split_len >= 1);
        cr_assert((int64_t)p->nsplit * p->split_len >= p->L);
        cr_assert((int64_t)(p->nsplit - 1) * p->split_len < p->L, "an empty split");
        cr_assert(p->grid_x >= 1);
        break;
    default: cr_assert_fail("unexpected mode %d", p->mode);
    }
    if (p->mode == GS__CUDA_MODE_ROW || p->mode == GS__CUDA_MODE_COL) {
        if (p->nsplit > 1) {
            cr_assert((size_t)p->nsplit * (size_t)p->R * W <= s->npartials);
            cr_assert(p->merge_grid >= 1);
        } else {
            cr_assert_eq(p->merge_grid, 0);
        }
    }
    cr_assert_eq(p->wout, k->terminal == GS_TERM_REDUCE ? gs_redop_width(k->redop) : 1);
}

Test(chunkops_cuda_plan, collapsed_form_addresses_the_same_elements)
{
    gs__cuda_dev_t devs[3] = {fake_dev(), tiny_dev(), fake_dev()};
    devs[2].no_flat = 1; /* the tile kernels (GS_CUDA_FLAT=0) */
    gs__cuda_scratch_t scr = fake_scratch();
    tup_t *a = malloc(sizeof(tup_t) * 4096), *b = malloc(sizeof(tup_t) * 4096);
    gs_kfused_t k;
    gs__cuda_fplan_t p;
    rng_state = 7;
    int modes[6] = {0}, flat[3] = {0}, tricky[3] = {0};
    for (int it = 0; it < 9000; it++) {
        gen_spec(&k);
        gs__cuda_fplan_build(&devs[it % 3], &scr, &k, &p);
        if (it % 3 == 2) cr_assert(!p.flat);
        int64_t N = gs_region_size(k.ndim, k.shape);
        if (N == 0) {
            cr_assert(p.mode == GS__CUDA_MODE_NONE || p.mode == GS__CUDA_MODE_MERGE_ONLY);
            continue;
        }
        cr_assert(N <= 4096);
        modes[p.mode]++;
        check_geometry(&k, &p, &scr);
        cr_assert_eq(p.R * p.L, N, "iteration %d: R %lld x L %lld != %lld", it, (long long)p.R,
                     (long long)p.L, (long long)N);
        int64_t na = plan_walk(&p, a), nb = spec_walk(&k, b);
        cr_assert_eq(na, nb);
        qsort(a, (size_t)na, sizeof(tup_t), tup_cmp);
        qsort(b, (size_t)nb, sizeof(tup_t), tup_cmp);
        for (int64_t i = 0; i < na; i++)
            cr_assert_eq(tup_cmp(&a[i], &b[i]), 0, "iteration %d (mode %d): element %lld differs",
                         it, p.mode, (long long)i);
        if (!p.flat) continue;
        flat[p.fvec]++;
        if (p.fvec == 2 && p.fload2) flat[0]++;
        if (p.fvec == 2 && p.nr == 1 && p.lw % 2 == 1) tricky[0]++; /* pairs straddle rows */
        if (p.fodd) tricky[1]++;                                    /* a half pair */
        if (p.fq >= 3 && p.nr == 1) tricky[2]++;                     /* walks that wrap */
        cr_assert(p.mode == GS__CUDA_MODE_STORE || p.mode == GS__CUDA_MODE_FULL);
        na = flat_walk(&p, a);
        cr_assert_eq(na, nb, "iteration %d: the flat walk visits %lld elements, not %lld", it,
                     (long long)na, (long long)nb);
        qsort(a, (size_t)na, sizeof(tup_t), tup_cmp);
        for (int64_t i = 0; i < na; i++)
            cr_assert_eq(tup_cmp(&a[i], &b[i]), 0,
                         "iteration %d (flat, mode %d, fvec %d): element %lld differs", it, p.mode,
                         p.fvec, (long long)i);
    }
    for (int m = 0; m < GS__CUDA_NMODES; m++) cr_assert(modes[m] > 0, "mode %d never planned", m);
    cr_assert(flat[1] > 0 && flat[2] > 0 && flat[0] > 0, "flat walks: %d, %d in pairs, %d loading "
              "pairs as one", flat[1], flat[2], flat[0]);
    cr_assert(tricky[0] > 0 && tricky[1] > 0 && tricky[2] > 0, "straddling pairs %d, half pairs "
              "%d, wrapping walks %d", tricky[0], tricky[1], tricky[2]);
    free(a);
    free(b);
}

static void seed_spec(gs_kfused_t *k)
{
    memset(k, 0, sizeof(*k));
    k->ndim = 2;
    k->shape[0] = k->shape[1] = 5000;
    k->nleaves = 1;
    k->leaves[0].kind = GS_LEAF_NORMAL;
    k->leaves[0].stride[0] = 2 * 10000;
    k->leaves[0].stride[1] = 2;
    k->leaves[0].p1 = 1.0;
    k->nprog = 2;
    k->prog[0].op = GS_OP_LEAF;
    k->prog[1].op = GS_OP_ADD_IMM;
    k->prog[1].imm = 1.0;
    k->terminal = GS_TERM_REDUCE;
    k->redop = GS_RED_SUM;
    k->red_axis = -1;
    k->out = (double *)(uintptr_t)0x9000;
}

Test(chunkops_cuda_plan, seed_case_is_one_chain_kernel_over_a_persistent_grid)
{
    gs__cuda_dev_t dev = fake_dev();
    gs__cuda_scratch_t scr = fake_scratch();
    gs_kfused_t k;
    gs__cuda_fplan_t p;
    seed_spec(&k);
    gs__cuda_fplan_build(&dev, &scr, &k, &p);
    cr_assert_eq(p.variant, GS__CUDA_VAR_CHAIN);
    cr_assert_eq(p.mode, GS__CUDA_MODE_FULL);
    cr_assert_eq(p.acc, GS__CUDA_ACC_SUM);
    cr_assert_eq(p.R, 5000);
    cr_assert_eq(p.L, 5000);
    cr_assert(p.flat && p.fvec == 1 && p.lw == 5000, "the flat walk, one element per slot");
    cr_assert_eq(p.merge_grid, 0, "no second kernel");
    cr_assert(p.grid_x * p.grid_y <= 132 * 4, "one wave of resident blocks");
    cr_assert(p.grid_x * p.grid_y >= 132 * 4 * 9 / 10, "the wave fills the device");
}

Test(chunkops_cuda_plan, picks_the_smallest_program_variant)
{
    gs__cuda_dev_t dev = fake_dev();
    gs__cuda_scratch_t scr = fake_scratch();
    gs_kfused_t k;
    gs__cuda_fplan_t p;
    seed_spec(&k);
    k.nleaves = 3; /* unused leaves are dropped */
    k.leaves[2] = k.leaves[0];
    k.prog[0].arg = 2;
    gs__cuda_fplan_build(&dev, &scr, &k, &p);
    cr_assert_eq(p.variant, GS__CUDA_VAR_CHAIN);
    cr_assert_eq(p.nleaves, 1);
    cr_assert_eq(p.prog[0].arg, 0);
    /* leaf 0 + leaf 2: depth 2, two leaves */
    k.nprog = 3;
    k.prog[0].op = GS_OP_LEAF;
    k.prog[0].arg = 0;
    k.prog[1].op = GS_OP_LEAF;
    k.prog[1].arg = 2;
    k.prog[2].op = GS_OP_ADD;
    gs__cuda_fplan_build(&dev, &scr, &k, &p);
    cr_assert_eq(p.variant, GS__CUDA_VAR_PAIR);
    cr_assert_eq(p.nleaves, 2);
    /* three leaves */
    k.leaves[1] = k.leaves[0];
    k.nprog = 5;
    k.prog[3].op = GS_OP_LEAF;
    k.prog[3].arg = 1;
    k.prog[4].op = GS_OP_MUL;
    gs__cuda_fplan_build(&dev, &scr, &k, &p);
    cr_assert_eq(p.variant, GS__CUDA_VAR_GENERIC);
    cr_assert_eq(p.nleaves, 3);
    /* no random leaf: the memory-bound forms (several elements in flight per thread) */
    k.leaves[0].kind = k.leaves[2].kind = GS_LEAF_CHUNK;
    k.leaves[0].data = k.leaves[2].data = (const double *)(uintptr_t)0x5000;
    k.nprog = 3;
    gs__cuda_fplan_build(&dev, &scr, &k, &p);
    cr_assert_eq(p.variant, GS__CUDA_VAR_PAIR_MEM);
    k.nprog = 1;
    gs__cuda_fplan_build(&dev, &scr, &k, &p);
    cr_assert_eq(p.variant, GS__CUDA_VAR_CHAIN_MEM);
    k.leaves[0].kind = GS_LEAF_UNIFORM;
    gs__cuda_fplan_build(&dev, &scr, &k, &p);
    cr_assert_eq(p.variant, GS__CUDA_VAR_CHAIN);
}

/* Any extended op (chunkops/elemwise.h) sends the program to the EXT variant, whatever its
 * shape; programs without one never go there. */
Test(chunkops_cuda_plan, extended_ops_run_on_the_ext_variant_only)
{
    gs__cuda_dev_t dev = fake_dev();
    gs__cuda_scratch_t scr = fake_scratch();
    gs_kfused_t k;
    gs__cuda_fplan_t p;
    seed_spec(&k);   /* normal leaf + 1: CHAIN (seed_case_is_one_chain_kernel_...) */
    for (int op = GS_OP_EXTENDED; op < GS_OP_COUNT; op++) {
        if (op == GS_OP_WHERE) continue; /* ternary, typed programs only (test_cuda_dtype.c) */
        if (op >= GS_OP_MOD && op <= GS_OP_LXOR) continue;   /* binary: below */
        k.prog[1].op = op;
        gs__cuda_fplan_build(&dev, &scr, &k, &p);
        cr_assert_eq(p.variant, GS__CUDA_VAR_EXT, "op %d", op);
    }
    /* normal(...) OP 2.0 with the constant pushed: depth 2, still EXT */
    k.nprog = 3;
    k.prog[1].op = GS_OP_CONST;
    k.prog[1].imm = 2.0;
    for (int op = GS_OP_MOD; op <= GS_OP_LXOR; op++) {
        k.prog[2].op = op;
        gs__cuda_fplan_build(&dev, &scr, &k, &p);
        cr_assert_eq(p.variant, GS__CUDA_VAR_EXT, "op %d", op);
    }
    k.prog[2].op = GS_OP_SUB;
    gs__cuda_fplan_build(&dev, &scr, &k, &p);
    cr_assert_eq(p.variant, GS__CUDA_VAR_PAIR);
}

Test(chunkops_cuda_plan, costly_ops_leave_the_memory_bound_variants)
{
    gs__cuda_dev_t dev = fake_dev();
    gs__cuda_scratch_t scr = fake_scratch();
    gs_kfused_t k;
    gs__cuda_fplan_t p;
    seed_spec(&k);
    k.leaves[0].kind = GS_LEAF_CHUNK;
    k.leaves[0].data = (const double *)(uintptr_t)0x5000;
    gs__cuda_fplan_build(&dev, &scr, &k, &p); /* chunk + 1 */
    cr_assert_eq(p.variant, GS__CUDA_VAR_CHAIN_MEM);
    static const int costly[] = {GS_OP_EXP, GS_OP_LOG, GS_OP_SQRT, GS_OP_DIV_IMM,
                                 GS_OP_POW_IMM, GS_OP_RDIV_IMM, GS_OP_RPOW_IMM};
    for (int i = 0; i < (int)(sizeof(costly) / sizeof(costly[0])); i++) {
        k.prog[1].op = costly[i];
        gs__cuda_fplan_build(&dev, &scr, &k, &p);
        cr_assert_eq(p.variant, GS__CUDA_VAR_PAIR, "op %d", costly[i]);
    }
    /* chunk / chunk, chunk ** chunk: PAIR; chunk * chunk stays memory-bound */
    k.nleaves = 2;
    k.leaves[1] = k.leaves[0];
    k.nprog = 3;
    k.prog[1].op = GS_OP_LEAF;
    k.prog[1].arg = 1;
    k.prog[2].op = GS_OP_DIV;
    gs__cuda_fplan_build(&dev, &scr, &k, &p);
    cr_assert_eq(p.variant, GS__CUDA_VAR_PAIR);
    k.prog[2].op = GS_OP_POW;
    gs__cuda_fplan_build(&dev, &scr, &k, &p);
    cr_assert_eq(p.variant, GS__CUDA_VAR_PAIR);
    k.prog[2].op = GS_OP_MUL;
    gs__cuda_fplan_build(&dev, &scr, &k, &p);
    cr_assert_eq(p.variant, GS__CUDA_VAR_PAIR_MEM);
}

/* CHAIN plans run a tail of at most x * m then x + a as exactly those two roundings; any
 * other tail is interpreted. */
Test(chunkops_cuda_plan, chain_tails_of_scale_then_shift_are_precomputed)
{
    gs__cuda_dev_t dev = fake_dev();
    gs__cuda_scratch_t scr = fake_scratch();
    gs_kfused_t k;
    gs__cuda_fplan_t p;
    for (int chunk = 0; chunk < 2; chunk++) {
        seed_spec(&k); /* normal + 1 */
        if (chunk) {
            k.leaves[0].kind = GS_LEAF_CHUNK;
            k.leaves[0].data = (const double *)(uintptr_t)0x5000;
        }
        int variant = chunk ? GS__CUDA_VAR_CHAIN_MEM : GS__CUDA_VAR_CHAIN;
        gs__cuda_fplan_build(&dev, &scr, &k, &p);
        cr_assert_eq(p.variant, variant);
        cr_assert(p.tail_ma && p.tail_m == 1.0 && p.tail_a == 1.0);
        k.nprog = 1; /* the leaf alone: identities, the additive one -0.0 (x + -0.0 is x) */
        gs__cuda_fplan_build(&dev, &scr, &k, &p);
        cr_assert(p.tail_ma && p.tail_m == 1.0 && p.tail_a == 0.0 && signbit(p.tail_a));
        k.nprog = 3; /* * 2.5 - 3 */
        k.prog[1].op = GS_OP_MUL_IMM;
        k.prog[1].imm = 2.5;
        k.prog[2].op = GS_OP_SUB_IMM;
        k.prog[2].imm = 3.0;
        gs__cuda_fplan_build(&dev, &scr, &k, &p);
        cr_assert(p.tail_ma && p.tail_m == 2.5 && p.tail_a == -3.0);
        k.prog[2].op = GS_OP_MUL_IMM; /* two scales: interpreted */
        gs__cuda_fplan_build(&dev, &scr, &k, &p);
        cr_assert_eq(p.variant, variant);
        cr_assert(!p.tail_ma);
        k.nprog = 2; /* a shift then a scale: interpreted */
        k.prog[1].op = GS_OP_ADD_IMM;
        k.prog[2].op = GS_OP_MUL_IMM;
        k.nprog = 3;
        gs__cuda_fplan_build(&dev, &scr, &k, &p);
        cr_assert(!p.tail_ma);
        k.nprog = 2;
        k.prog[1].op = GS_OP_NEG;
        gs__cuda_fplan_build(&dev, &scr, &k, &p);
        cr_assert(!p.tail_ma);
    }
    k.prog[0].op = GS_OP_CONST; /* no leaf: interpreted */
    k.nleaves = 0;
    k.nprog = 1;
    gs__cuda_fplan_build(&dev, &scr, &k, &p);
    cr_assert_eq(p.variant, GS__CUDA_VAR_CHAIN_MEM);
    cr_assert(!p.tail_ma);
}

/* A 3 x 4 region of a chunk leaf (unit column stride): flat, in pairs; one 16-byte load per
 * pair only when every pair is inside a row and starts 16-byte aligned. */
static void pair_spec(gs_kfused_t *k, int64_t rstride, int64_t base, uintptr_t data)
{
    memset(k, 0, sizeof(*k));
    k->ndim = 2;
    k->shape[0] = 3;
    k->shape[1] = 4;
    k->nleaves = 1;
    k->leaves[0].kind = GS_LEAF_CHUNK;
    k->leaves[0].data = (const double *)data;
    k->leaves[0].base = base;
    k->leaves[0].stride[0] = rstride;
    k->leaves[0].stride[1] = 1;
    k->nprog = 1;
    k->prog[0].op = GS_OP_LEAF;
    k->terminal = GS_TERM_STORE;
    k->red_axis = -1;
    k->out = (double *)(uintptr_t)0x9000;
}

Test(chunkops_cuda_plan, pairs_load_as_one_only_when_aligned_and_inside_rows)
{
    gs__cuda_dev_t dev = fake_dev();
    gs__cuda_scratch_t scr = fake_scratch();
    gs_kfused_t k;
    gs__cuda_fplan_t p;
    pair_spec(&k, 6, 2, 0x5000);
    gs__cuda_fplan_build(&dev, &scr, &k, &p);
    cr_assert(p.flat && p.fvec == 2 && p.nr == 1 && p.lw == 4);
    cr_assert_eq(p.fload2, 1u);
    cr_assert_eq(p.fstore2, 1);
    pair_spec(&k, 6, 1, 0x5000); /* odd base */
    gs__cuda_fplan_build(&dev, &scr, &k, &p);
    cr_assert_eq(p.fload2, 0u);
    pair_spec(&k, 6, 1, 0x5008); /* odd base of a data pointer 8 bytes past alignment */
    gs__cuda_fplan_build(&dev, &scr, &k, &p);
    cr_assert_eq(p.fload2, 1u);
    pair_spec(&k, 5, 0, 0x5000); /* odd row stride: every other row starts unaligned */
    gs__cuda_fplan_build(&dev, &scr, &k, &p);
    cr_assert_eq(p.fload2, 0u);
    pair_spec(&k, 6, 0, 0x5000);
    k.shape[1] = 3; /* odd rows: pairs straddle row ends */
    gs__cuda_fplan_build(&dev, &scr, &k, &p);
    cr_assert(p.flat && p.lw == 3);
    cr_assert_eq(p.fload2, 0u);
    pair_spec(&k, 4, 0, 0x5000); /* contiguous: one dim, 12 elements */
    k.out = (double *)(uintptr_t)0x9008;
    gs__cuda_fplan_build(&dev, &scr, &k, &p);
    cr_assert(p.flat && p.nr == 0);
    cr_assert_eq(p.fload2, 1u);
    cr_assert_eq(p.fstore2, 0, "an unaligned output is stored element by element");
}

Test(chunkops_cuda_plan, empty_regions_launch_only_the_empty_record_writer)
{
    gs__cuda_dev_t dev = fake_dev();
    gs__cuda_scratch_t scr = fake_scratch();
    gs_kfused_t k;
    gs__cuda_fplan_t p;
    seed_spec(&k);
    k.shape[1] = 0;
    gs__cuda_fplan_build(&dev, &scr, &k, &p);
    cr_assert_eq(p.mode, GS__CUDA_MODE_MERGE_ONLY);
    cr_assert_eq(p.R, 1);
    cr_assert_eq(p.nsplit, 0);
    cr_assert_eq(p.merge_grid, 1);
    k.red_axis = 1; /* 5000 records over an empty axis */
    gs__cuda_fplan_build(&dev, &scr, &k, &p);
    cr_assert_eq(p.mode, GS__CUDA_MODE_MERGE_ONLY);
    cr_assert_eq(p.R, 5000);
    k.red_axis = 0; /* no records */
    gs__cuda_fplan_build(&dev, &scr, &k, &p);
    cr_assert_eq(p.R, 0);
    cr_assert_eq(p.merge_grid, 0);
    k.terminal = GS_TERM_STORE;
    gs__cuda_fplan_build(&dev, &scr, &k, &p);
    cr_assert_eq(p.mode, GS__CUDA_MODE_NONE);
}

Test(chunkops_cuda_plan, long_axis_with_few_records_is_split)
{
    gs__cuda_dev_t dev = fake_dev();
    gs__cuda_scratch_t scr = fake_scratch();
    gs_kfused_t k;
    gs__cuda_fplan_t p;
    seed_spec(&k);
    k.shape[0] = 3;
    k.shape[1] = 1000000;
    k.red_axis = 1; /* 3 rows of a million: a warp per row would idle the device */
    gs__cuda_fplan_build(&dev, &scr, &k, &p);
    cr_assert_eq(p.mode, GS__CUDA_MODE_ROW);
    cr_assert(p.nsplit > 1 && p.merge_grid == 1);
    k.shape[0] = 1000000;
    k.shape[1] = 3;
    k.red_axis = 0; /* random leaves: still a warp per column (nothing to coalesce) */
    gs__cuda_fplan_build(&dev, &scr, &k, &p);
    cr_assert_eq(p.mode, GS__CUDA_MODE_ROW);
    cr_assert(p.nsplit > 1 && p.merge_grid == 1);
    k.leaves[0].kind = GS_LEAF_CHUNK; /* 3 columns of a dense chunk: a thread per column */
    k.leaves[0].data = (const double *)(uintptr_t)0x5000;
    k.leaves[0].stride[0] = 3;
    k.leaves[0].stride[1] = 1;
    gs__cuda_fplan_build(&dev, &scr, &k, &p);
    cr_assert_eq(p.mode, GS__CUDA_MODE_COL);
    cr_assert(p.nsplit > 1 && p.merge_grid == 1);
}

Test(chunkops_cuda_plan, tile_shape_fits_the_block)
{
    for (int64_t c = 0; c < 600; c++) {
        int32_t tpr, rows;
        gs__cuda_tile_shape(c, &tpr, &rows);
        cr_assert(tpr >= 1 && rows >= 1 && tpr * rows <= GS__CUDA_BLOCK, "cols %lld", (long long)c);
        if (c >= GS__CUDA_BLOCK) cr_assert_eq(tpr, GS__CUDA_BLOCK);
        if (c >= 1 && c < 32) cr_assert_eq(tpr, c);
    }
}

static int pair_cmp(const void *a, const void *b)
{
    const int64_t *x = a, *y = b;
    if (x[0] != y[0]) return x[0] < y[0] ? -1 : 1;
    return x[1] < y[1] ? -1 : x[1] > y[1];
}

/* Copy pieces: the collapsed piece moves the same (src, dst) pairs as the spec. */
Test(chunkops_cuda_plan, collapsed_copy_pieces_move_the_same_elements)
{
    rng_state = 99;
    int64_t *pa = malloc(sizeof(int64_t) * 2 * 5000), *pb = malloc(sizeof(int64_t) * 2 * 5000);
    for (int it = 0; it < 2000; it++) {
        gs_kcopy_t k;
        memset(&k, 0, sizeof(k));
        k.ndim = (int32_t)rndr(0, 5);
        int64_t budget = 5000;
        for (int j = 0; j < k.ndim; j++) {
            int64_t m = rnd() % 3 == 0 ? 1 : rndr(1, 10);
            if (m > budget) m = 1;
            budget /= m;
            k.shape[j] = m;
        }
        k.npieces = 1;
        gs_kpiece_t *pc = &k.pieces[0];
        pc->src = (const double *)(uintptr_t)0x4000;
        pc->src_base = rndr(0, 50);
        for (int j = 0; j < k.ndim; j++) {
            pc->dst_start[j] = rndr(0, k.shape[j] - 1);
            pc->size[j] = rndr(0, k.shape[j] - pc->dst_start[j]);
            if (rnd() % 3) pc->size[j] = k.shape[j] - pc->dst_start[j];
        }
        int64_t c = 1;
        int contiguous = rnd() % 2;
        for (int j = k.ndim - 1; j >= 0; j--) {
            pc->src_stride[j] = contiguous ? c : rndr(-20, 20);
            c *= pc->size[j] > 0 ? pc->size[j] : 1;
        }
        gs__cuda_cpiece_t cp;
        int64_t n = gs_region_size(k.ndim, pc->size);
        int nonempty = gs__cuda_cpiece_build(&k, 0, &cp);
        cr_assert_eq(nonempty, n > 0);
        if (!nonempty) continue;
        cr_assert_eq(cp.rows * cp.cols, n);
        cr_assert(cp.tpr * cp.tile_rows <= GS__CUDA_BLOCK);
        int64_t na = 0;
        for (int64_t r = 0; r < cp.rows; r++) {
            int64_t so = cp.src_base, d = cp.dst_base, q = r;
            for (int j = cp.nr - 1; j >= 0; j--) {
                int64_t dg = q % cp.rshape[j];
                q /= cp.rshape[j];
                so += dg * cp.src_rstride[j];
                d += dg * cp.dst_rstride[j];
            }
            for (int64_t col = 0; col < cp.cols; col++, na++) {
                pa[2 * na] = d + col * cp.dst_cstride;
                pa[2 * na + 1] = so + col * cp.src_cstride;
            }
        }
        int64_t nb = 0;
        for (int64_t f = 0; f < n; f++, nb++) {
            int64_t q = f, so = pc->src_base, d = 0, ost = 1;
            int64_t pos[GS_MAX_NDIM];
            for (int j = k.ndim - 1; j >= 0; j--) {
                pos[j] = q % pc->size[j];
                q /= pc->size[j];
            }
            for (int j = k.ndim - 1; j >= 0; j--) {
                so += pos[j] * pc->src_stride[j];
                d += (pc->dst_start[j] + pos[j]) * ost;
                ost *= k.shape[j];
            }
            pb[2 * nb] = d;
            pb[2 * nb + 1] = so;
        }
        cr_assert_eq(na, nb);
        /* destinations are unique: compare as maps dst -> src after sorting by dst */
        qsort(pa, (size_t)na, 2 * sizeof(int64_t), pair_cmp);
        qsort(pb, (size_t)nb, 2 * sizeof(int64_t), pair_cmp);
        for (int64_t i = 0; i < 2 * na; i++)
            cr_assert_eq(pa[i], pb[i], "iteration %d: pair %lld differs", it, (long long)(i / 2));
    }
    free(pa);
    free(pb);
}

/* The kernels run Philox from the plan's precomputed round keys: a host replica of that loop
 * must give gs_random_block()'s words. */
Test(chunkops_cuda_plan, precomputed_round_keys_reproduce_the_generator)
{
    gs__cuda_dev_t dev = fake_dev();
    gs__cuda_scratch_t scr = fake_scratch();
    gs_kfused_t k;
    gs__cuda_fplan_t p;
    rng_state = 11;
    for (int it = 0; it < 200; it++) {
        seed_spec(&k);
        k.leaves[0].kind = it % 2 ? GS_LEAF_NORMAL : GS_LEAF_UNIFORM;
        k.leaves[0].seed = rnd();
        gs__cuda_fplan_build(&dev, &scr, &k, &p);
        for (int j = 0; j < 50; j++) {
            uint64_t i = rnd() >> (j % 40);
            uint32_t c[4] = {(uint32_t)i, (uint32_t)(i >> 32), 0u, 0u};
            for (int r = 0; r < 10; r++) {
                uint64_t p0 = (uint64_t)GS_PHILOX_M0 * c[0], p1 = (uint64_t)GS_PHILOX_M1 * c[2];
                uint32_t n0 = (uint32_t)(p1 >> 32) ^ c[1] ^ p.leaves[0].rk[2 * r];
                uint32_t n2 = (uint32_t)(p0 >> 32) ^ c[3] ^ p.leaves[0].rk[2 * r + 1];
                c[0] = n0;
                c[1] = (uint32_t)p1;
                c[2] = n2;
                c[3] = (uint32_t)p0;
            }
            gs_philox4_t ref = gs_random_block(k.leaves[0].seed, i);
            for (int w = 0; w < 4; w++) cr_assert_eq(c[w], ref.v[w], "seed %d index %d word %d", it, j, w);
        }
    }
}

/* x + x.T over a chunk pair: the transposed leaf goes through the shared-memory tiles (and
 * only it), one block per tile up to the resident blocks; switched off, or with three
 * transposed leaves, or over a 3-D region, the plan keeps to the other kernels. */
Test(chunkops_cuda_plan, transposed_chunk_leaf_takes_the_transposed_tiles)
{
    gs__cuda_dev_t dev = fake_dev();
    for (int i = 0; i < GS__CUDA_TT_VARIANTS * (1 + GS__CUDA_NACC); i++) dev.occ_ttile[i] = 2;
    gs__cuda_scratch_t scr = fake_scratch();
    gs_kfused_t k;
    gs__cuda_fplan_t p;
    memset(&k, 0, sizeof(k));
    k.ndim = 2;
    k.shape[0] = 10000;
    k.shape[1] = 10000;
    k.nleaves = 2;
    for (int i = 0; i < 2; i++) {
        k.leaves[i].kind = GS_LEAF_CHUNK;
        k.leaves[i].data = (const double *)(uintptr_t)0x5000;
    }
    k.leaves[0].stride[0] = 10000;
    k.leaves[0].stride[1] = 1;
    k.leaves[1].stride[0] = 1;
    k.leaves[1].stride[1] = 10000;
    k.nprog = 3;
    k.prog[0].op = GS_OP_LEAF;
    k.prog[1].op = GS_OP_LEAF;
    k.prog[1].arg = 1;
    k.prog[2].op = GS_OP_ADD;
    k.terminal = GS_TERM_REDUCE;
    k.redop = GS_RED_SUM;
    k.red_axis = -1;
    k.out = (double *)(uintptr_t)0x9000;
    gs__cuda_fplan_build(&dev, &scr, &k, &p);
    cr_assert(p.ttile && !p.flat);
    cr_assert_eq(p.mode, GS__CUDA_MODE_FULL);
    cr_assert_eq(p.tvariant, 2, "chunk leaves only: the variant that loads them first");
    dev.tt_pf = 1; /* the context's default: one row-major + one transposed leaf, pipelined */
    gs__cuda_fplan_build(&dev, &scr, &k, &p);
    cr_assert_eq(p.tvariant, 3);
    cr_assert_eq(p.grid_x, 132u * 2u);
    k.leaves[0].stride[0] = 1; /* both leaves transposed: not the pipelined kernel */
    k.leaves[0].stride[1] = 10000;
    gs__cuda_fplan_build(&dev, &scr, &k, &p);
    cr_assert(p.ttile);
    cr_assert_eq(p.ntt, 2);
    cr_assert_eq(p.tvariant, 2);
    k.leaves[0].stride[0] = 10000;
    k.leaves[0].stride[1] = 1;
    dev.tt_pf = 0;
    gs__cuda_fplan_build(&dev, &scr, &k, &p);
    cr_assert_eq(p.ntt, 1);
    cr_assert_eq(p.tt_leaf[0], 1);
    cr_assert(p.tslot[0] == -1 && p.tslot[1] == 0);
    cr_assert_eq(p.grid_x, 132u * 2u);
    cr_assert_eq(p.grid_y, 1u);
    cr_assert_eq(p.R, 10000);
    cr_assert_eq(p.L, 10000);
    /* a small region: one block per tile */
    k.shape[0] = 33;
    k.shape[1] = 40;
    gs__cuda_fplan_build(&dev, &scr, &k, &p);
    cr_assert(p.ttile);
    cr_assert_eq(p.grid_x, 4u);
    /* STORE */
    k.terminal = GS_TERM_STORE;
    gs__cuda_fplan_build(&dev, &scr, &k, &p);
    cr_assert(p.ttile);
    cr_assert_eq(p.mode, GS__CUDA_MODE_STORE);
    cr_assert_eq(p.tvariant, 2);
    /* a random leaf beside the transposed chunk: the variant that reads leaves as it goes */
    k.leaves[0].kind = GS_LEAF_NORMAL;
    gs__cuda_fplan_build(&dev, &scr, &k, &p);
    cr_assert(p.ttile);
    cr_assert_eq(p.tvariant, 0);
    k.leaves[0].kind = GS_LEAF_CHUNK;
    /* switched off */
    dev.no_ttile = 1;
    gs__cuda_fplan_build(&dev, &scr, &k, &p);
    cr_assert(!p.ttile);
    dev.no_ttile = 0;
    /* row-major leaves only: the flat walk */
    k.leaves[1].stride[0] = 40;
    k.leaves[1].stride[1] = 1;
    gs__cuda_fplan_build(&dev, &scr, &k, &p);
    cr_assert(!p.ttile && p.flat);
    /* an axis reduction keeps its own kernels */
    k.leaves[1].stride[0] = 1;
    k.leaves[1].stride[1] = 33;
    k.terminal = GS_TERM_REDUCE;
    k.red_axis = 1;
    gs__cuda_fplan_build(&dev, &scr, &k, &p);
    cr_assert(!p.ttile);
    cr_assert(p.mode == GS__CUDA_MODE_ROW || p.mode == GS__CUDA_MODE_COL);
}

/* Version-2 normals read along the loop with unit stride (and unary ops after the leaf) take
 * the pair kernels; a strided read, a second leaf or a version-1 leaf do not. */
Test(chunkops_cuda_plan, normal_v2_rows_take_the_pair_kernels)
{
    gs__cuda_dev_t dev = fake_dev();
    for (int i = 0; i < 1 + GS__CUDA_NACC; i++) dev.occ_pairs[0][i] = dev.occ_pairs[1][i] = 3;
    gs__cuda_scratch_t scr = fake_scratch();
    gs_kfused_t k;
    gs__cuda_fplan_t p;
    memset(&k, 0, sizeof(k));
    k.ndim = 2;
    k.shape[0] = 1001;
    k.shape[1] = 999;
    k.nleaves = 1;
    k.leaves[0].kind = GS_LEAF_NORMAL_V2;
    k.leaves[0].base = 12345;
    k.leaves[0].stride[0] = 4001;
    k.leaves[0].stride[1] = 1;
    k.leaves[0].p1 = 1.0;
    k.nprog = 3;
    k.prog[0].op = GS_OP_LEAF;
    k.prog[1].op = GS_OP_MUL_IMM;
    k.prog[1].imm = 3.0;
    k.prog[2].op = GS_OP_ADD_IMM;
    k.prog[2].imm = 1.0;
    k.terminal = GS_TERM_REDUCE;
    k.redop = GS_RED_SUM;
    k.red_axis = -1;
    k.out = (double *)(uintptr_t)0x9000;
    gs__cuda_fplan_build(&dev, &scr, &k, &p);
    cr_assert(p.pairs && !p.flat && !p.ttile);
    cr_assert_eq(p.mode, GS__CUDA_MODE_FULL);
    cr_assert(p.tail_ma && p.tail_m == 3.0 && p.tail_a == 1.0);
    cr_assert_eq(p.R, 1001);
    cr_assert_eq(p.L, 999);
    cr_assert_eq(p.grid_x, 2u); /* 500 pairs a row: two blocks of 256 threads */
    cr_assert(p.grid_y >= 1 && p.grid_y <= 1001);
    cr_assert((size_t)p.grid_x * p.grid_y <= scr.npartials);
    k.terminal = GS_TERM_STORE;
    gs__cuda_fplan_build(&dev, &scr, &k, &p);
    cr_assert(p.pairs);
    k.leaves[0].stride[1] = 2; /* [::2]: lone halves, per-element kernels */
    gs__cuda_fplan_build(&dev, &scr, &k, &p);
    cr_assert(!p.pairs);
    /* version 3: stride 1 and 2 take the pair kernels (2 * (999 / 4 + 2) = 502 and
     * 999 / 2 + 2 = 501 pairs a row: two blocks; one with two pairs per thread), 3 and -2 not */
    k.leaves[0].kind = GS_LEAF_NORMAL_V3;
    for (int s1 = -2; s1 <= 3; s1++) {
        if (s1 == 0) continue;
        k.leaves[0].stride[1] = s1;
        k.leaves[0].base = 12345 + (s1 < 0 ? 2 * 998 : 0);
        for (int u = 1; u <= 2; u++) {
            dev.pairs_u = u;
            gs__cuda_fplan_build(&dev, &scr, &k, &p);
            if (s1 == 1 || s1 == 2) {
                cr_assert_eq(p.pairs, u, "stride %d", s1);
                cr_assert_eq(p.grid_x, u == 1 ? 2u : 1u, "stride %d", s1);
            } else {
                cr_assert(!p.pairs, "stride %d", s1);
            }
        }
    }
    dev.pairs_u = 1;
    k.leaves[0].base = 12345;
    k.leaves[0].kind = GS_LEAF_NORMAL_V2;
    k.leaves[0].stride[1] = 1;
    k.leaves[0].kind = GS_LEAF_NORMAL;
    gs__cuda_fplan_build(&dev, &scr, &k, &p);
    cr_assert(!p.pairs);
    cr_assert_eq(p.variant, GS__CUDA_VAR_CHAIN);
    k.leaves[0].kind = GS_LEAF_NORMAL_V2;
    k.nleaves = 2; /* normal_v2 + normal_v2: two leaves, the PAIR variant */
    k.leaves[1] = k.leaves[0];
    k.nprog = 3;
    k.prog[1].op = GS_OP_LEAF;
    k.prog[1].arg = 1;
    k.prog[2].op = GS_OP_ADD;
    gs__cuda_fplan_build(&dev, &scr, &k, &p);
    cr_assert(!p.pairs);
    cr_assert_eq(p.variant, GS__CUDA_VAR_PAIR);
}
