/* sockfuzz: random messages of every type, derived from the schema table (proto/msg_schema.h
 * through proto/msg_codec.h's descriptors) and encoded by the project's own encoder. The walk
 * over the fields follows tests/proto/samples.c's; what differs is the values: random counts
 * (mostly small, sometimes thousands), integers of every width with a bias towards ids a live
 * cluster uses (small numbers) and boundaries, strings and binaries from empty to long. A rule of
 * the table the generator does not know makes some draws unencodable; they are drawn again. */
#include "sockfuzz.h"

#include "proto/msg_codec.h"
#include "schema_rules.h"

#include <stdlib.h>
#include <string.h>

#define SF_ARENA (2u << 20)
#define SF_TRIES 8

/* One bump arena per thread, reset for every message. */
static _Thread_local uint8_t *sf_arena;
static _Thread_local size_t sf_used;
static _Thread_local int sf_full;

static void *sf_alloc(size_t n)
{
    size_t o = (sf_used + 15) & ~(size_t)15;
    if (sf_arena == NULL && (sf_arena = malloc(SF_ARENA)) == NULL) sf_full = 1;
    if (sf_full || o + n > SF_ARENA) {
        sf_full = 1;
        return NULL;
    }
    sf_used = o + n;
    return sf_arena + o;
}

/* An integer: small ids most of the time (they name live graphs, tasks and workers), else a
 * boundary or a random value of random width. */
static uint64_t sf_gen_u64(sf_rng_t *r)
{
    static const uint64_t edges[] = {0, 1, 2, 0x7f, 0xff, 0x7fff, 0xffff, 0x7fffffffull, 0xffffffffull,
                                     0x100000000ull, 0x7fffffffffffffffull, 0x8000000000000000ull,
                                     UINT64_MAX, UINT64_MAX - 1};
    uint64_t k = sf_below(r, 10);
    if (k < 5) return sf_below(r, 64);
    if (k < 7) return edges[sf_below(r, sizeof(edges) / sizeof(edges[0]))];
    {
        uint64_t v = sf_rand(r);
        return v >> (8 * sf_below(r, 8));
    }
}

static uint64_t sf_gen_count(sf_rng_t *r)
{
    uint64_t k = sf_below(r, 100);
    if (k < 70) return sf_below(r, 5);
    if (k < 95) return 5 + sf_below(r, 60);
    return 200 + sf_below(r, 1800);
}

static size_t sf_gen_len(sf_rng_t *r, size_t big)
{
    uint64_t k = sf_below(r, 100);
    if (k < 15) return 0;
    if (k < 90) return 1 + (size_t)sf_below(r, 48);
    return (size_t)sf_below(r, big);
}

static gs_bytes_t sf_gen_blob(sf_rng_t *r, size_t len, int text)
{
    uint8_t *p = len > 0 ? sf_alloc(len + 1) : NULL;
    if (p == NULL) return (gs_bytes_t){(const uint8_t *)"", 0};
    for (size_t i = 0; i < len; i++) {
        uint8_t b = (uint8_t)(sf_rand(r) >> 56);
        p[i] = text && b == 0 ? 'x' : b;   /* strings carry no NUL */
    }
    p[len] = 0;
    return (gs_bytes_t){p, len};
}

/* ... and of an integer or table entry @a i. */
static uint64_t sf_rule_value(sf_rng_t *r, const void *body, const gs__field_t *f, uint64_t i, uint64_t dflt)
{
    if (f->rule == gs__rule_peer_role) return 1 + sf_below(r, 2);
    if (f->rule == gs__rule_none_or_one_per_key) return sf_below(r, 2) ? ((const gs_msg_replicate_t *)body)->n : 0;
    if (f->rule == gs__rule_layer_index) {
        uint32_t nl = ((const gs_msg_graph_submit_t *)body)->nlayers;
        return nl > 0 ? sf_below(r, nl) : 0;
    }
    (void)i;
    return dflt;
}

static void sf_store(void *dst, unsigned size, uint64_t v)
{
    uint32_t v32 = (uint32_t)v;
    if (size == 4) memcpy(dst, &v32, 4);
    else memcpy(dst, &v, 8);
}

static void *sf_table(sf_rng_t *r, const void *body, const gs__field_t *f, uint64_t n)
{
    uint8_t *p;
    if (n == 0) return NULL;
    if ((p = sf_alloc((size_t)n * f->size)) == NULL) return NULL;
    for (uint64_t i = 0; i < n; i++) sf_store(p + i * f->size, f->size, sf_rule_value(r, body, f, i, sf_gen_u64(r)));
    return p;
}

/* Array elements (schema_fill_array): strings up to 512 bytes, names and hosts up to 256,
 * binaries and UCX addresses up to 4096. */
static gs_bytes_t sf_elem(void *ctx, const gs__field_t *f, const char *role, uint32_t k)
{
    sf_rng_t *r = ctx;
    int text = strcmp(role, "bin") != 0 && strcmp(role, "ucx") != 0;
    size_t big = strcmp(role, "str") == 0 ? 512 : text ? 256 : 4096;
    (void)f;
    (void)k;
    return sf_gen_blob(r, sf_gen_len(r, big), text);
}

static uint64_t sf_id(void *ctx)
{
    return sf_gen_u64(ctx);
}

static void *sf_alloc_cb(void *ctx, size_t n)
{
    (void)ctx;
    return sf_alloc(n);
}

static void *sf_array(sf_rng_t *r, void *body, const gs__field_t *f)
{
    schema_gen_t g = {sf_elem, sf_id, sf_alloc_cb, r};
    return schema_fill_array(body, f, (uint32_t)(sf_below(r, 100) < 90 ? sf_below(r, 6) : sf_below(r, 64)), &g);
}

/* Fill @a m with a random message of @a type (pointers into the thread's arena). */
static void sf_gen_msg(sf_rng_t *r, uint32_t type, gs_msg_t *m)
{
    const gs__msg_desc_t *d = gs__msg_desc(type);
    void *body = &m->u;
    uint64_t ndeps = 0;
    memset(m, 0, sizeof *m);
    m->type = type;
    sf_used = 0;
    sf_full = 0;
    if (d == NULL) return;
    for (unsigned i = 0; i < d->nfields; i++) {
        const gs__field_t *f = &d->fields[i];
        void *dst = (uint8_t *)body + f->off;
        uint64_t count;
        uint64_t *off;
        switch (f->kind) {
        case GS__F_UINT:
        case GS__F_INT:
            count = schema_is_count(d, f) ? sf_gen_count(r) : sf_gen_u64(r);
            sf_store(dst, f->size, sf_rule_value(r, body, f, 0, count));
            break;
        case GS__F_STR: *(gs_str_t *)dst = sf_gen_blob(r, sf_gen_len(r, 2048), 1); break;
        case GS__F_BIN: *(gs_bytes_t *)dst = sf_gen_blob(r, sf_gen_len(r, 16384), 0); break;
        case GS__F_CHUNK: *(gs_bytes_t *)dst = sf_gen_blob(r, sf_gen_len(r, 65536), 0); break;
        case GS__F_TAB: gs__field_set_ptr(body, f, sf_table(r, body, f, gs__field_count(body, f) * f->per)); break;
        case GS__F_DTAB: gs__field_set_ptr(body, f, sf_table(r, body, f, ndeps * f->per)); break;
        case GS__F_CSR:
            count = gs__field_count(body, f);
            if ((off = sf_alloc((size_t)(count + 1) * 8)) == NULL) break;
            off[0] = 0;
            for (uint64_t k = 0; k < count; k++) off[k + 1] = off[k] + sf_below(r, 4);
            ndeps = off[count];
            gs__field_set_ptr(body, f, off);
            break;
        case GS__F_STRS:
        case GS__F_BINS:
        case GS__F_PEERS: gs__field_set_ptr(body, f, sf_array(r, body, f)); break;
        }
    }
}

/* Half of the GRAPH_SUBMITs are made plausible, so that gsched accepts some and their tasks reach
 * the workers with random layer bytes: dependencies on earlier tasks only, no externals, outputs
 * that exist, small sizes, at least one layer. */
static void sf_plausible_graph(sf_rng_t *r, gs_msg_graph_submit_t *g)
{
    uint64_t *deps = (uint64_t *)(uintptr_t)g->deps, *nbytes = (uint64_t *)(uintptr_t)g->task_nbytes;
    uint64_t *outs = (uint64_t *)(uintptr_t)g->outputs;
    uint32_t *layer = (uint32_t *)(uintptr_t)g->task_layer;
    if (g->ntasks == 0 || g->nlayers == 0 || g->dep_off == NULL) return;
    for (uint64_t t = 0; t < g->ntasks; t++) {
        for (uint64_t k = g->dep_off[t]; k < g->dep_off[t + 1]; k++) deps[k] = t > 0 ? sf_below(r, t) : 0;
        if (t == 0) for (uint64_t k = g->dep_off[0]; k < g->dep_off[1]; k++) deps[k] = 1;   /* stays invalid */
        nbytes[t] = 8 * sf_below(r, 4096);
        layer[t] = (uint32_t)sf_below(r, g->nlayers);
    }
    g->nexternals = 0;
    g->externals = NULL;
    for (uint64_t o = 0; o < g->noutputs && outs != NULL; o++) outs[o] = sf_below(r, g->ntasks);
    g->flags &= 1u;
}

int sf_gen_frame(sf_rng_t *r, uint32_t type, int mutate, gs_buf_t *out)
{
    for (int t = 0; t < SF_TRIES; t++) {
        gs_msg_t m;
        size_t start = out->len;
        sf_gen_msg(r, type, &m);
        if (!sf_full && type == GS_MSG_GRAPH_SUBMIT && sf_below(r, 2)) sf_plausible_graph(r, &m.u.graph_submit);
        if (sf_full || gs_msg_encode(&m, out) != GS_OK) continue;
        if (mutate && out->len > start + 5) {
            size_t plen = out->len - start - 4;
            int flips = 1 + (int)sf_below(r, 4);
            for (int k = 0; k < flips; k++) {
                size_t at = start + 4 + (size_t)sf_below(r, plen);
                out->data[at] ^= (uint8_t)(1u << sf_below(r, 8));
            }
        }
        return 1;
    }
    return 0;
}

void sf_gen_release(void)
{
    free(sf_arena);
    sf_arena = NULL;
    sf_used = 0;
}

void sf_gen_bytes(sf_rng_t *r, size_t max, gs_buf_t *out)
{
    size_t n = 1 + (size_t)sf_below(r, max);
    if (gs_buf_reserve(out, n) != GS_OK) return;
    for (size_t i = 0; i < n; i++) out->data[out->len + i] = (uint8_t)(sf_rand(r) >> 56);
    out->len += n;
}
