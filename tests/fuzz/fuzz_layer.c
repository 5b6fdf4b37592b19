/* libFuzzer target: layer decoding and execution (graph/taskgraph.h, chunkops/eval.h).
 *
 * The input is an encoded layer, as a worker receives it inside TASK_ASSIGN. Properties:
 *  - gs_layer_decode is total: GS_OK or GS_ERR_PROTO, no leak, no out-of-bounds access, no
 *    huge allocation from a declared size;
 *  - a decoded layer re-encodes, the encoding decodes again, and re-encoding that gives the same
 *    bytes; its decode under injected allocation failures gives GS_OK or GS_ERR_NO_MEMORY only;
 *  - every block (or, for layers with many blocks, the first, the last and a sample; the kernel
 *    work per input is capped) agrees between gs_layer_ninputs and the resolved inputs;
 *    instantiated against inputs of exactly the expected sizes (each its own heap block) and an
 *    output of exactly gs_layer_out_nbytes() bytes, it either fails with an error or runs on the
 *    CPU backend without touching memory outside those buffers;
 *  - instantiation refuses a wrong number of inputs, a wrong input length and a block outside
 *    the layer. */
#include "fuzz_util.h"

#include "common/alloc.h"
#include "common/buf.h"

#include <stdint.h>
#include <string.h>

#define FZ_BUDGET (1 << 16)       /* elements of kernel work per input */
#define FZ_MAX_BLOCKS 48          /* blocks instantiated per layer */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fz_check_roundtrip(const gs_layer_t *l)
{
    gs_buf_t b1, b2;
    gs_layer_t *l2 = NULL;
    gs_status_t st;

    gs_buf_init(&b1);
    gs_buf_init(&b2);
    if ((st = gs_layer_encode(l, &b1)) != GS_OK)
        FZ_BUG("a decoded %s layer does not encode: %s", gs_layer_name(l), gs_status_name(st));
    if ((st = gs_layer_decode(b1.data, b1.len, &l2)) != GS_OK)
        FZ_BUG("the encoding of a decoded %s layer does not decode: %s", gs_layer_name(l),
               gs_status_name(st));
    if (gs_layer_kind(l2) != gs_layer_kind(l) || gs_layer_nblocks(l2) != gs_layer_nblocks(l))
        FZ_BUG("round trip changed the layer (kind %d -> %d, blocks %llu -> %llu)",
               (int)gs_layer_kind(l), (int)gs_layer_kind(l2),
               (unsigned long long)gs_layer_nblocks(l), (unsigned long long)gs_layer_nblocks(l2));
    if ((st = gs_layer_encode(l2, &b2)) != GS_OK)
        FZ_BUG("re-decoded layer does not encode: %s", gs_status_name(st));
    if (b1.len != b2.len || memcmp(b1.data, b2.data, b1.len) != 0)
        FZ_BUG("layer encoding is not stable across a round trip (%zu vs %zu bytes)", b1.len, b2.len);
    gs_layer_free(l2);
    gs_buf_cleanup(&b1);
    gs_buf_cleanup(&b2);
}

static void fz_check_alloc_failures(const uint8_t *data, size_t size, fz_rng_t *rng)
{
    gs_layer_t *l = NULL;
    long k = (long)(fz_rng_next(rng) % 12);
    gs_status_t st;

    gs_alloc_fail_after(k);
    st = gs_layer_decode(data, size, &l);
    unsigned long injected = gs_alloc_injected_failures();
    gs_alloc_fail_after(-1);
    if (st == GS_OK) {
        gs_layer_free(l);
    } else if (st != GS_ERR_NO_MEMORY || injected == 0) {
        FZ_BUG("decoding a valid layer with allocation %ld failing gave %s (%lu failures injected)",
               k, gs_status_name(st), injected);
    }
}

static double fz_fill_value(fz_rng_t *rng, int special)
{
    static const double v[] = {0.0, 1.0, -1.0, 0.5, 3.0, -2.5, 1e300, -1e-300};
    return special ? v[fz_rng_next(rng) % (sizeof v / sizeof v[0])] : 0.0;
}

static void fz_run_one_block(const gs_layer_t *l, uint64_t block, fz_rng_t *rng, fz_budget_t *budget)
{
    int64_t lens[GS_KERNEL_MAX_COMBINE + 1];
    uint64_t nbytes[GS_KERNEL_MAX_COMBINE + 1];
    gs_chunk_ref_t in[GS_KERNEL_MAX_COMBINE + 1];
    double *bufs[GS_KERNEL_MAX_COMBINE + 1] = {0};
    double scratch[4], *out = NULL;
    gs_ktask_t t;
    int n = 0, special = (fz_rng_next(rng) & 3) == 0;
    int64_t total = 0;
    gs_status_t st;

    st = fz_block_inputs(l, block, &n, lens, nbytes);
    if (st != GS_OK) {
        /* an unresolvable block must be refused everywhere (a generators-only fused layer's
         * gs_layer_ninputs is 0 without resolving: its instantiation refuses it) */
        if (gs_layer_ninputs(l, block) >= 0 &&
            !(fz_generator_only(l) && gs_layer_ninputs(l, block) == 0))
            FZ_BUG("block %llu of a %s layer does not resolve but gs_layer_ninputs says %d",
                   (unsigned long long)block, gs_layer_name(l), gs_layer_ninputs(l, block));
        if (gs_layer_instantiate(l, block, 0, NULL, scratch, &t) == GS_OK)
            FZ_BUG("block %llu of a %s layer does not resolve but instantiates",
                   (unsigned long long)block, gs_layer_name(l));
        return;
    }
    if (gs_layer_ninputs(l, block) != n)
        FZ_BUG("block %llu of a %s layer: gs_layer_ninputs %d, resolved %d inputs",
               (unsigned long long)block, gs_layer_name(l), gs_layer_ninputs(l, block), n);
    for (int i = 0; i < n; i++) {
        if (lens[i] < 0) FZ_BUG("input %d of block %llu has negative length", i, (unsigned long long)block);
        total += lens[i];
        if (total > budget->left) return;   /* too big to materialise */
    }
    for (int i = 0; i < n; i++) {
        /* exactly the bytes the input has (typed inputs: not a whole number of doubles) */
        if (nbytes[i] < (uint64_t)lens[i] * sizeof(double) || nbytes[i] - (uint64_t)lens[i] * sizeof(double) >= sizeof(double))
            FZ_BUG("input %d of block %llu: %llu bytes for %lld doubles", i,
                   (unsigned long long)block, (unsigned long long)nbytes[i], (long long)lens[i]);
        bufs[i] = gs_malloc(nbytes[i] > 0 ? (size_t)nbytes[i] : 1, "fuzz input");
        if (bufs[i] == NULL) FZ_BUG("harness out of memory");
        for (int64_t e = 0; e < lens[i]; e++) bufs[i][e] = fz_fill_value(rng, special);
        for (uint64_t e = (uint64_t)lens[i] * sizeof(double); e < nbytes[i]; e++)
            ((uint8_t *)bufs[i])[e] = (uint8_t)fz_rng_next(rng);
        in[i].data = bufs[i];
        in[i].len = lens[i];
        in[i].nbytes = nbytes[i];
    }
    {
        /* a commit goes ahead only on the total its writes made: give it that half the time */
        double expect;
        if (n == 1 && lens[0] == 1 && fz_file_commit_expect(l, &expect) && (fz_rng_next(rng) & 1))
            bufs[0][0] = expect;
    }

    /* wrong tables must be refused before anything is read (a double more or less: the
     * element count of float64 inputs, the bytes of typed ones) */
    if (n > 0) {
        in[0].len++;
        in[0].nbytes += sizeof(double);
        if (gs_layer_instantiate(l, block, n, in, scratch, &t) == GS_OK)
            FZ_BUG("block %llu of a %s layer accepted input 0 one element too long",
                   (unsigned long long)block, gs_layer_name(l));
        in[0].len -= 2;
        in[0].nbytes -= 2 * sizeof(double);
        if (in[0].len >= 0 && gs_layer_instantiate(l, block, n, in, scratch, &t) == GS_OK)
            FZ_BUG("block %llu of a %s layer accepted input 0 one element too short",
                   (unsigned long long)block, gs_layer_name(l));
        in[0].len++;
        in[0].nbytes += sizeof(double);
        if (gs_layer_instantiate(l, block, n - 1, in, scratch, &t) == GS_OK)
            FZ_BUG("block %llu of a %s layer accepted %d inputs instead of %d",
                   (unsigned long long)block, gs_layer_name(l), n - 1, n);
    }
    if (n < GS_KERNEL_MAX_COMBINE) {
        in[n].data = scratch;
        in[n].len = 1;
        if (gs_layer_instantiate(l, block, n + 1, in, scratch, &t) == GS_OK)
            FZ_BUG("block %llu of a %s layer accepted %d inputs instead of %d",
                   (unsigned long long)block, gs_layer_name(l), n + 1, n);
    }

    st = fz_run_block(l, block, n, in, budget, &out);
    (void)st;   /* errors are fine: the point is that nothing outside the buffers was touched */
    gs_free(out);
    for (int i = 0; i < n; i++) gs_free(bufs[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    gs_layer_t *l = NULL;
    gs_status_t st;
    fz_rng_t rng;
    fz_budget_t budget = {FZ_BUDGET};
    uint64_t nb;
    double scratch[4];
    gs_ktask_t t;

    fz_init();
    st = gs_layer_decode(data, size, &l);
    if (st != GS_OK) {
        if (st != GS_ERR_PROTO) FZ_BUG("layer decode returned %s, not GS_ERR_PROTO", gs_status_name(st));
        return 0;
    }
    fz_rng_seed(&rng, data, size);
    fz_check_roundtrip(l);
    fz_check_alloc_failures(data, size, &rng);

    nb = gs_layer_nblocks(l);
    if (gs_layer_instantiate(l, nb, 0, NULL, scratch, &t) == GS_OK)
        FZ_BUG("block %llu of a %llu-block layer instantiates", (unsigned long long)nb,
               (unsigned long long)nb);
    if (nb <= FZ_MAX_BLOCKS) {
        for (uint64_t b = 0; b < nb; b++) fz_run_one_block(l, b, &rng, &budget);
    } else {
        for (uint64_t b = 0; b < 8; b++) fz_run_one_block(l, b, &rng, &budget);
        for (uint64_t b = nb - 8; b < nb; b++) fz_run_one_block(l, b, &rng, &budget);
        for (int i = 0; i < FZ_MAX_BLOCKS - 16; i++)
            fz_run_one_block(l, fz_rng_next(&rng) % nb, &rng, &budget);
    }
    gs_layer_free(l);
    return 0;
}
