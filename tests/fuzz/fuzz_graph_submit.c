/* libFuzzer target: graph submission validation (scheduler/sched.h gs_sched_graph_check) and
 * what a worker then does with the graph's layers.
 *
 * Input: byte 0 selects the mode.
 *   even: the rest is a GRAPH_SUBMIT payload (as a client sends it), decoded with gs_msg_decode;
 *         other message types are ignored.
 *   odd:  the rest drives a builder that makes a graph directly (see fz_build): small task
 *         tables whose dependencies, sizes, layer ids, offsets and outputs are mostly sane with
 *         input-chosen defects (self and forward dependencies, dangling ids, sizes at and past
 *         GS_SCHED_MAX_TASK_NBYTES, bad CSR offsets, unknown flags, huge declared counts over
 *         small tables, layers without data).
 * Properties:
 *   - gs_sched_graph_check returns GS_OK or GS_ERR_INVALID_PARAM, reads only the declared tables,
 *     and accepts exactly the graphs an independent reference check of its documented contract
 *     accepts (fz_ref_check);
 *   - an accepted graph is acyclic (Kahn's algorithm) and survives a GRAPH_SUBMIT encode/decode
 *     round trip still accepted;
 *   - an accepted graph is then run the way workers run it (capped): each layer decoded (a bad
 *     layer or unknown opcode fails its tasks), each task's block and dependency count checked
 *     against its layer, and each task instantiated with its dependencies' actual outputs
 *     (externals: zero chunks of the expected size) and run on the CPU backend with exactly
 *     sized buffers. Declared sizes that do not match the layer, wrong dependency lists and
 *     hostile layers must end in errors, never in an out-of-bounds access. */
#include "fuzz_util.h"

#include "common/alloc.h"
#include "common/buf.h"
#include "proto/msg.h"
#include "scheduler/sched.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FZ_MAX_BUILD_TASKS 512
#define FZ_MAX_RUN_TASKS 96
#define FZ_MAX_RUN_LAYERS 32
#define FZ_BUDGET (1 << 16)

/* ------------------------------------------------------------------ reference check */

/* The contract of gs_sched_graph_check (scheduler/sched.h), written independently. Returns 1
 * when the graph should be accepted; *why_p names the first reason otherwise. */
static int fz_ref_check(const gs_msg_graph_submit_t *g, const char **why_p)
{
    uint64_t n = g->ntasks, ndeps = 0;
#define FZ_REJECT(why) do { *why_p = (why); return 0; } while (0)
    if (g->flags & ~(uint32_t)GS_SUBMIT_PERSIST) FZ_REJECT("unknown flags");
    if (n > GS_SCHED_MAX_TASKS) FZ_REJECT("too many tasks");
    if (g->nexternals > GS_SCHED_MAX_TASKS) FZ_REJECT("too many externals");
    if (g->nlayers > 0 && g->layers == NULL) FZ_REJECT("no layer array");
    if (n > 0 && (!g->task_layer || !g->task_block || !g->dep_off || !g->task_nbytes))
        FZ_REJECT("no task table");
    if (g->nexternals > 0 && g->externals == NULL) FZ_REJECT("no externals array");
    if (g->noutputs > 0 && g->outputs == NULL) FZ_REJECT("no outputs array");
    for (uint32_t l = 0; l < g->nlayers; l++)
        if (g->layers[l].data == NULL && g->layers[l].len > 0) FZ_REJECT("layer without data");
    if (n > 0) {
        if (g->dep_off[0] != 0) FZ_REJECT("dep_off[0] != 0");
        ndeps = g->dep_off[n];
        if (ndeps > (uint64_t)UINT32_MAX - 1) FZ_REJECT("too many dependencies");
        if (ndeps > 0 && g->deps == NULL) FZ_REJECT("no deps array");
    }
    for (uint64_t i = 0; i < n; i++) {
        if (g->dep_off[i + 1] < g->dep_off[i] || g->dep_off[i + 1] > ndeps) FZ_REJECT("bad offsets");
        if (g->task_layer[i] >= g->nlayers) FZ_REJECT("bad layer id");
        if (g->task_nbytes[i] > GS_SCHED_MAX_TASK_NBYTES) FZ_REJECT("huge declared size");
        for (uint64_t j = g->dep_off[i]; j < g->dep_off[i + 1]; j++) {
            uint64_t d = g->deps[j];
            if (d < n) {
                if (d >= i) FZ_REJECT("cycle or forward dependency");
            } else if (d - n >= g->nexternals) {
                FZ_REJECT("dangling dependency");
            }
        }
    }
    for (uint64_t o = 0; o < g->noutputs; o++)
        if (g->outputs[o] >= n) FZ_REJECT("bad output");
    return 1;
#undef FZ_REJECT
}

/* Kahn's algorithm over the internal edges: an accepted graph must order completely. */
static void fz_check_acyclic(const gs_msg_graph_submit_t *g)
{
    uint64_t n = g->ntasks, head = 0, tail = 0;
    uint32_t *indeg, *queue;
    uint64_t *roff, *radj, *fill;

    if (n == 0 || n > FZ_MAX_BUILD_TASKS * 64) return;
    indeg = gs_calloc(n, sizeof *indeg, "fuzz indeg");
    queue = gs_calloc(n, sizeof *queue, "fuzz queue");
    roff = gs_calloc(n + 1, sizeof *roff, "fuzz roff");
    fill = gs_calloc(n + 1, sizeof *fill, "fuzz fill");
    radj = gs_calloc(g->dep_off[n] + 1, sizeof *radj, "fuzz radj");
    if (!indeg || !queue || !roff || !fill || !radj) FZ_BUG("harness out of memory");
    for (uint64_t i = 0; i < n; i++)
        for (uint64_t j = g->dep_off[i]; j < g->dep_off[i + 1]; j++)
            if (g->deps[j] < n) {
                indeg[i]++;
                roff[g->deps[j] + 1]++;
            }
    for (uint64_t i = 0; i < n; i++) roff[i + 1] += roff[i];
    memcpy(fill, roff, (n + 1) * sizeof *fill);
    for (uint64_t i = 0; i < n; i++)
        for (uint64_t j = g->dep_off[i]; j < g->dep_off[i + 1]; j++)
            if (g->deps[j] < n) radj[fill[g->deps[j]]++] = i;
    for (uint64_t i = 0; i < n; i++)
        if (indeg[i] == 0) queue[tail++] = (uint32_t)i;
    while (head < tail) {
        uint32_t t = queue[head++];
        for (uint64_t k = roff[t]; k < roff[t + 1]; k++)
            if (--indeg[radj[k]] == 0) queue[tail++] = (uint32_t)radj[k];
    }
    if (tail != n)
        FZ_BUG("accepted graph has a cycle: only %llu of %llu tasks can be ordered",
               (unsigned long long)tail, (unsigned long long)n);
    gs_free(indeg);
    gs_free(queue);
    gs_free(roff);
    gs_free(fill);
    gs_free(radj);
}

static void fz_check_codec(const gs_msg_graph_submit_t *g)
{
    gs_msg_t m, m2;
    gs_buf_t f;
    gs_status_t st;

    memset(&m, 0, sizeof m);
    m.type = GS_MSG_GRAPH_SUBMIT;
    m.u.graph_submit = *g;
    gs_buf_init(&f);
    if ((st = gs_msg_encode(&m, &f)) != GS_OK)
        FZ_BUG("an accepted graph does not encode as GRAPH_SUBMIT: %s", gs_status_name(st));
    if ((st = gs_msg_decode(f.data + GS_PROTO_FRAME_HEADER, f.len - GS_PROTO_FRAME_HEADER, &m2)) != GS_OK)
        FZ_BUG("an encoded accepted graph does not decode: %s", gs_status_name(st));
    if (m2.type != GS_MSG_GRAPH_SUBMIT || gs_sched_graph_check(&m2.u.graph_submit) != GS_OK)
        FZ_BUG("an accepted graph is rejected after a codec round trip");
    gs_msg_cleanup(&m2);
    gs_buf_cleanup(&f);
}

/* ------------------------------------------------------------------ worker emulation */

static void fz_run_graph(const gs_msg_graph_submit_t *g)
{
    uint32_t nl = g->nlayers < FZ_MAX_RUN_LAYERS ? g->nlayers : FZ_MAX_RUN_LAYERS;
    uint64_t nt = g->ntasks < FZ_MAX_RUN_TASKS ? g->ntasks : FZ_MAX_RUN_TASKS;
    gs_layer_t *layers[FZ_MAX_RUN_LAYERS] = {0};
    double *outs[FZ_MAX_RUN_TASKS] = {0};
    int64_t out_len[FZ_MAX_RUN_TASKS] = {0};
    fz_budget_t budget = {FZ_BUDGET};

    for (uint32_t l = 0; l < nl; l++) {
        gs_status_t st = gs_layer_decode(g->layers[l].data, g->layers[l].len, &layers[l]);
        if (st != GS_OK && st != GS_ERR_PROTO)
            FZ_BUG("layer decode returned %s, not GS_ERR_PROTO", gs_status_name(st));
    }
    for (uint64_t t = 0; t < nt; t++) {
        const gs_layer_t *l = g->task_layer[t] < nl ? layers[g->task_layer[t]] : NULL;
        uint64_t b = g->task_block[t], d0 = g->dep_off[t], nd = g->dep_off[t + 1] - d0;
        int64_t lens[GS_KERNEL_MAX_COMBINE];
        uint64_t nbytes[GS_KERNEL_MAX_COMBINE];
        gs_chunk_ref_t in[GS_KERNEL_MAX_COMBINE];
        double *ext[GS_KERNEL_MAX_COMBINE] = {0};
        int n = 0, runnable = 1, nin;

        if (l == NULL) continue;                              /* the worker fails the task */
        if (b >= gs_layer_nblocks(l)) continue;               /* likewise */
        nin = gs_layer_ninputs(l, b);
        if (nin < 0 || (uint64_t)nin != nd) continue;         /* likewise */
        if (fz_block_inputs(l, b, &n, lens, nbytes) != GS_OK) {
            /* only a generators-only fused layer answers 0 without resolving the block; its
             * instantiation must then refuse the block (the worker fails the task) */
            gs_ktask_t kt;
            double scratch[4];
            if (!fz_generator_only(l) || nin != 0)
                FZ_BUG("block %llu does not resolve, gs_layer_ninputs says %d",
                       (unsigned long long)b, nin);
            if (gs_layer_instantiate(l, b, 0, NULL, scratch, &kt) == GS_OK)
                FZ_BUG("block %llu does not resolve but instantiates", (unsigned long long)b);
            continue;
        }
        if (n != nin)
            FZ_BUG("block %llu resolves to %d inputs, gs_layer_ninputs says %d",
                   (unsigned long long)b, n, nin);
        for (int i = 0; i < n && runnable; i++) {
            uint64_t d = g->deps[d0 + (uint64_t)i];
            if (d < g->ntasks) {
                if (d >= nt || outs[d] == NULL) runnable = 0;  /* input failed or not run */
                in[i].data = runnable ? outs[d] : NULL;
                in[i].len = runnable ? out_len[d] : 0;
                /* the producer's bytes, as the worker's chunk has them (typed outputs) */
                in[i].nbytes = runnable ? gs_layer_out_nbytes(layers[g->task_layer[d]],
                                                              g->task_block[d])
                                        : 0;
            } else {
                /* an external: the worker fetches a chunk of the size its producer made */
                if (lens[i] > budget.left) {
                    runnable = 0;
                    break;
                }
                budget.left -= lens[i];
                ext[i] = gs_calloc(nbytes[i] ? (size_t)nbytes[i] : 1, 1, "fuzz external");
                if (ext[i] == NULL) FZ_BUG("harness out of memory");
                in[i].data = ext[i];
                in[i].len = lens[i];
                in[i].nbytes = nbytes[i];
            }
        }
        if (runnable) {
            double *out = NULL;
            if (fz_run_block(l, b, n, in, &budget, &out) == GS_OK) {
                outs[t] = out;
                out_len[t] = (int64_t)(gs_layer_out_nbytes(l, b) / sizeof(double));
            }
        }
        for (int i = 0; i < n; i++) gs_free(ext[i]);
    }
    if (getenv("GS_FUZZ_VERBOSE") != NULL) {
        uint64_t ok = 0, bad_layers = 0;
        for (uint64_t t = 0; t < nt; t++) ok += outs[t] != NULL;
        for (uint32_t l = 0; l < nl; l++) bad_layers += layers[l] == NULL;
        fprintf(stderr, "fuzz_graph_submit: accepted %llu tasks, %u layers (%llu undecodable); "
                "%llu of the first %llu tasks ran\n", (unsigned long long)g->ntasks, g->nlayers,
                (unsigned long long)bad_layers, (unsigned long long)ok, (unsigned long long)nt);
    }
    for (uint64_t t = 0; t < nt; t++) gs_free(outs[t]);
    for (uint32_t l = 0; l < nl; l++) gs_layer_free(layers[l]);
}

/* ------------------------------------------------------------------ builder */

typedef struct fz_cur {
    const uint8_t *p, *end;
} fz_cur_t;

static uint8_t fz_byte(fz_cur_t *c)
{
    return c->p < c->end ? *c->p++ : 0;
}

typedef struct fz_built {
    gs_msg_graph_submit_t g;
    gs_bytes_t layers[8];
    uint32_t task_layer[FZ_MAX_BUILD_TASKS];
    uint64_t task_block[FZ_MAX_BUILD_TASKS];
    uint64_t dep_off[FZ_MAX_BUILD_TASKS + 1];
    uint64_t deps[FZ_MAX_BUILD_TASKS * 4];
    uint64_t task_nbytes[FZ_MAX_BUILD_TASKS];
    uint64_t externals[2 * 4];
    uint64_t outputs[8];
    uint64_t ntasks, nexternals, ndeps;   /* true table sizes (g may declare others) */
} fz_built_t;

static uint64_t fz_special_count(uint8_t v)
{
    static const uint64_t s[] = {GS_SCHED_MAX_TASKS + 1, UINT64_MAX, UINT64_MAX / 8, 1ull << 32,
                                 (uint64_t)UINT32_MAX + 7};
    return s[v % (sizeof s / sizeof s[0])];
}

/* Build a graph from the bytes at @a c into @a b (all tables inside @a b). */
static void fz_build(fz_cur_t *c, fz_built_t *b)
{
    gs_msg_graph_submit_t *g = &b->g;
    uint8_t v, special;
    uint64_t ntasks, nd = 0;

    memset(g, 0, sizeof *g);
    v = fz_byte(c);
    g->flags = v < 0xf0 ? (v & 1u) : 1u << (v & 31);
    g->client_ref = fz_byte(c);
    g->nlayers = fz_byte(c) % 6;
    g->layers = b->layers;
    v = fz_byte(c);
    ntasks = ((uint64_t)(v & 1) << 8 | fz_byte(c)) % (FZ_MAX_BUILD_TASKS + 1);
    g->nexternals = fz_byte(c) % 5;
    g->noutputs = fz_byte(c) % 9;
    special = fz_byte(c);   /* >= 0xf8: one structural defect (below) */

    for (uint32_t l = 0; l < g->nlayers; l++) {
        size_t len = fz_byte(c) % 12, left = (size_t)(c->end - c->p);
        if (len > left) len = left;
        b->layers[l].data = len ? c->p : NULL;
        b->layers[l].len = len;
        c->p += len;
    }
    for (uint64_t k = 0; k < 2 * g->nexternals; k++) b->externals[k] = fz_byte(c);
    g->externals = b->externals;

    b->dep_off[0] = 0;
    for (uint64_t i = 0; i < ntasks; i++) {
        uint64_t ndi;
        v = fz_byte(c);
        b->task_layer[i] = g->nlayers ? v % (g->nlayers + (v >= 0xf0)) : v % 2;
        b->task_block[i] = fz_byte(c);
        v = fz_byte(c);
        b->task_nbytes[i] = v < 0xf8 ? (uint64_t)v * 8
                            : (const uint64_t[]){GS_SCHED_MAX_TASK_NBYTES, GS_SCHED_MAX_TASK_NBYTES + 1,
                                                 GS_SCHED_MAX_TASK_NBYTES - 1, UINT64_MAX, 1ull << 63,
                                                 GS_SCHED_MAX_TASK_NBYTES * 2, 8, 0}[v - 0xf8];
        ndi = fz_byte(c) % 5;
        for (uint64_t k = 0; k < ndi; k++) {
            uint64_t d;
            v = fz_byte(c);
            if (v < 0xf0) {
                if (i > 0 && ((v & 1) || g->nexternals == 0)) d = (v >> 1) % i;   /* earlier task */
                else if (g->nexternals > 0) d = ntasks + (v >> 1) % g->nexternals;   /* external */
                else d = 0;                                                          /* i == 0: self */
            } else {
                switch (v & 7) {
                case 0: d = i; break;                                   /* self cycle */
                case 1: d = i + 1; break;                               /* forward (or external) */
                case 2: d = ntasks + g->nexternals; break;              /* dangling */
                case 3: d = UINT64_MAX; break;
                case 4: d = ntasks ? ntasks - 1 : 0; break;             /* last task */
                case 5: d = ntasks + g->nexternals - 1; break;          /* last external / task */
                case 6: d = (uint64_t)UINT32_MAX + i; break;
                default: d = i + 1 + (v >> 3); break;
                }
            }
            b->deps[nd++] = d;
        }
        b->dep_off[i + 1] = nd;
    }
    for (uint64_t o = 0; o < g->noutputs; o++) {
        v = fz_byte(c);
        b->outputs[o] = ntasks ? (v < 0xf8 ? v % ntasks : ntasks + (v & 3)) : v;
    }

    g->ntasks = b->ntasks = ntasks;
    b->nexternals = g->nexternals;
    b->ndeps = nd;
    g->task_layer = b->task_layer;
    g->task_block = b->task_block;
    g->dep_off = b->dep_off;
    g->deps = nd ? b->deps : NULL;
    g->task_nbytes = b->task_nbytes;
    g->outputs = b->outputs;
    if (ntasks == 0) {
        g->task_layer = NULL;
        g->task_block = NULL;
        g->task_nbytes = NULL;
        g->dep_off = (fz_byte(c) & 1) ? b->dep_off : NULL;
    }

    if (special >= 0xf8) {
        v = fz_byte(c);
        switch (special & 7) {
        case 0:   /* huge declared task count over small tables: must be refused unread */
            g->ntasks = fz_special_count(v);
            break;
        case 1:
            g->nexternals = fz_special_count(v);
            break;
        case 2:   /* corrupt one CSR offset */
            if (ntasks > 0) {
                uint64_t k = v % (ntasks + 1);
                uint8_t w = fz_byte(c);
                b->dep_off[k] = w < 0x80 ? b->dep_off[k] + 1 + (w & 7)
                                : w < 0xc0 ? (b->dep_off[k] ? b->dep_off[k] - 1 : UINT64_MAX)
                                           : (uint64_t)UINT32_MAX + (w & 3);
            }
            break;
        case 3:   /* a declared layer without bytes */
            if (g->nlayers > 0) b->layers[v % g->nlayers] = (gs_bytes_t){NULL, 1 + (size_t)(v & 7)};
            break;
        case 4:
            g->layers = g->nlayers ? NULL : g->layers;
            break;
        case 5:
            if (g->noutputs) g->outputs = NULL;
            break;
        case 6:
            if (g->nexternals) g->externals = NULL;
            break;
        default:
            if (nd) g->deps = NULL;
            break;
        }
    }
}

/* Copy every table of the built graph into a heap block of exactly its true size (a CSR end
 * offset corrupted upwards by a little gets that many zero dependencies appended, as a decoder
 * would have sized the table), so that reading past any table is an AddressSanitizer report.
 * Layer bytes already point into the fuzzer's exactly sized input. */
static void *fz_dup(const void *src, uint64_t n, size_t w, uint64_t extra, void **own, int *nown)
{
    uint8_t *p = gs_malloc((size_t)((n + extra) * w), "fuzz table");
    if (p == NULL) FZ_BUG("harness out of memory");
    if (n) memcpy(p, src, (size_t)(n * w));
    if (extra) memset(p + n * w, 0, (size_t)(extra * w));
    own[(*nown)++] = p;
    return p;
}

static void fz_graph_exact(const fz_built_t *b, void (*fn)(const gs_msg_graph_submit_t *))
{
    gs_msg_graph_submit_t h = b->g;
    void *own[8];
    int nown = 0;
    uint64_t claimed = 0, extra = 0;

    if (b->ntasks > 0 && b->g.dep_off != NULL) claimed = b->g.dep_off[b->ntasks];
    if (claimed > b->ndeps && claimed - b->ndeps <= 16) extra = claimed - b->ndeps;
    if (h.layers) h.layers = fz_dup(b->g.layers, b->g.nlayers, sizeof(gs_bytes_t), 0, own, &nown);
    if (h.task_layer) h.task_layer = fz_dup(b->g.task_layer, b->ntasks, sizeof(uint32_t), 0, own, &nown);
    if (h.task_block) h.task_block = fz_dup(b->g.task_block, b->ntasks, sizeof(uint64_t), 0, own, &nown);
    if (h.task_nbytes) h.task_nbytes = fz_dup(b->g.task_nbytes, b->ntasks, sizeof(uint64_t), 0, own, &nown);
    if (h.dep_off) h.dep_off = fz_dup(b->g.dep_off, b->ntasks + 1, sizeof(uint64_t), 0, own, &nown);
    if (h.deps) h.deps = fz_dup(b->g.deps, b->ndeps, sizeof(uint64_t), extra, own, &nown);
    if (h.externals) h.externals = fz_dup(b->g.externals, 2 * b->nexternals, sizeof(uint64_t), 0, own, &nown);
    if (h.outputs) h.outputs = fz_dup(b->g.outputs, b->g.noutputs, sizeof(uint64_t), 0, own, &nown);
    fn(&h);
    for (int i = 0; i < nown; i++) gs_free(own[i]);
}

/* ------------------------------------------------------------------ entry */

static void fz_graph(const gs_msg_graph_submit_t *g)
{
    const char *why = "";
    int ref = fz_ref_check(g, &why);
    gs_status_t st = gs_sched_graph_check(g);

    if (st != GS_OK && st != GS_ERR_INVALID_PARAM)
        FZ_BUG("gs_sched_graph_check returned %s", gs_status_name(st));
    if (ref && st != GS_OK)
        FZ_BUG("gs_sched_graph_check rejects a graph the contract accepts (%llu tasks)",
               (unsigned long long)g->ntasks);
    if (!ref && st == GS_OK)
        FZ_BUG("gs_sched_graph_check accepts a graph the contract rejects: %s", why);
    if (st != GS_OK) return;
    fz_check_acyclic(g);
    fz_check_codec(g);
    fz_run_graph(g);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_init();
    if (size < 1) return 0;
    if ((data[0] & 1) == 0) {
        gs_msg_t m;
        if (gs_msg_decode(data + 1, size - 1, &m) != GS_OK) return 0;
        if (m.type == GS_MSG_GRAPH_SUBMIT) fz_graph(&m.u.graph_submit);
        gs_msg_cleanup(&m);
    } else {
        static fz_built_t b;   /* ~30 KiB of tables */
        fz_cur_t c = {data + 1, data + size};
        fz_build(&c, &b);
        fz_graph_exact(&b, fz_graph);
    }
    return 0;
}
