#include "samples.h"
#include "schema_rules.h"

#include "proto/msg_codec.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#if defined(__SANITIZE_ADDRESS__)
#define GS_TEST_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GS_TEST_LSAN 1
#endif
#endif
#ifdef GS_TEST_LSAN
#include <sanitizer/lsan_interface.h>
#endif

/* The test binary is linked with -Wl,--wrap=malloc,... so every allocation made by gsched's static
 * libraries (gs_malloc & co in common/alloc.c) is counted here; libuv and Criterion are shared
 * libraries and are not. Works the same under ASan (__real_malloc is ASan's malloc). */
void *__real_malloc(size_t size);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t size);
void __real_free(void *p);
void *__wrap_malloc(size_t size);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t size);
void __wrap_free(void *p);

static long live_blocks;
static size_t requested_bytes;

void *__wrap_malloc(size_t size)
{
    void *p = __real_malloc(size);
    requested_bytes += size;
    if (p != NULL) live_blocks++;
    return p;
}

void *__wrap_calloc(size_t n, size_t size)
{
    void *p = __real_calloc(n, size);
    requested_bytes += n * size;
    if (p != NULL) live_blocks++;
    return p;
}

void *__wrap_realloc(void *p, size_t size)
{
    void *q = __real_realloc(p, size);
    requested_bytes += size;
    if (p == NULL && q != NULL) live_blocks++;
    if (p != NULL && q == NULL && size == 0) live_blocks--;
    return q;
}

void __wrap_free(void *p)
{
    if (p != NULL) live_blocks--;
    __real_free(p);
}

size_t live_heap_blocks(void)
{
    return (size_t)live_blocks;
}

size_t heap_bytes_requested(void)
{
    return requested_bytes;
}

void proto_check_no_leaks(void)
{
    cr_assert_eq(live_heap_blocks(), 0, "%zu heap blocks allocated by gsched were not freed", live_heap_blocks());
#ifdef GS_TEST_LSAN
    /* Criterion's workers exit without LeakSanitizer's report: ask for it explicitly */
    cr_assert_eq(__lsan_do_recoverable_leak_check(), 0, "LeakSanitizer found leaks");
#endif
}

/* ---- samples and comparison, derived from the schema table (proto/msg_schema.h) ----
 *
 * Every field gets a value chosen by its kind, seeded by the message and field names: integers of
 * every msgpack width, strings with UTF-8 and control bytes, tables whose entries include zeros,
 * CSR offsets with empty rows, arrays whose second element is empty. Counted tables have
 * SAMPLE_COUNT entries, arrays SAMPLE_ARRAY elements. The table's rules are satisfied by
 * schema_rule_count() (schema_rules.h) and sample_rule_value(): a new rule needs a line there; a new message or
 * field needs nothing. */

#define SAMPLE_COUNT 4
#define SAMPLE_ARRAY 3
#define SAMPLE_CHUNK 8000
#define SAMPLE_ARENA 16384

static _Alignas(16) uint8_t sample_arena[GS_MSG_TYPE_MAX][SAMPLE_ARENA];
static size_t sample_used;
static uint32_t sample_type;

static void *sample_alloc(size_t n)
{
    size_t o = (sample_used + 15) & ~(size_t)15;
    cr_assert_leq(o + n, SAMPLE_ARENA, "sample of %s does not fit its arena", gs_msg_type_name(sample_type));
    sample_used = o + n;
    return sample_arena[sample_type] + o;
}

static uint64_t sample_seed(uint32_t type, const char *field)
{
    uint64_t h = 1469598103934665603ull ^ type;
    for (const char *c = field; *c != '\0'; c++) h = (h ^ (uint8_t)*c) * 1099511628211ull;
    return h | 1;
}

/* A value of 1 to 8 significant bytes (every msgpack integer width). */
static uint64_t sample_u64(uint64_t *s)
{
    uint64_t v = test_rand(s);
    return v >> (8 * (v >> 61));
}

static gs_str_t sample_str(const char *field, size_t k, uint64_t *s)
{
    char text[64];
    int n = snprintf(text, sizeof text, "%s-%zu-\xc3\xa9\x01-%llx", field, k,
                     (unsigned long long)(test_rand(s) >> 40));
    char *p = sample_alloc((size_t)n + 1);
    memcpy(p, text, (size_t)n + 1);
    return (gs_str_t){(const uint8_t *)p, (size_t)n};
}

static gs_bytes_t sample_bin(size_t len, uint64_t *s)
{
    uint8_t *p = len > 0 ? sample_alloc(len) : NULL;
    for (size_t i = 0; i < len; i++) p[i] = (uint8_t)(test_rand(s) >> 56);
    return (gs_bytes_t){p, len};
}

/* ... and of an integer or a table entry (@a i). */
static uint64_t sample_rule_value(const void *body, const gs__field_t *f, uint64_t i, uint64_t dflt)
{
    if (f->rule == gs__rule_peer_role) return GS_ROLE_WORKER;
    if (f->rule == gs__rule_none_or_one_per_key) return ((const gs_msg_replicate_t *)body)->n;
    if (f->rule == gs__rule_layer_index) return i % ((const gs_msg_graph_submit_t *)body)->nlayers;
    return dflt;
}

static void sample_store(void *dst, unsigned size, uint64_t v)
{
    uint32_t v32 = (uint32_t)v;
    if (size == 4) {
        memcpy(dst, &v32, 4);
    } else {
        memcpy(dst, &v, 8);
    }
}

static void *sample_table(const void *body, const gs__field_t *f, uint64_t n, uint64_t *s)
{
    uint8_t *p = n > 0 ? sample_alloc((size_t)n * f->size) : NULL;
    for (uint64_t i = 0; i < n; i++) {
        sample_store(p + i * f->size, f->size, sample_rule_value(body, f, i, i % 3 == 0 ? 0 : sample_u64(s)));
    }
    return p;
}

/* Array elements (schema_fill_array): element 1 is empty (strings, binaries, peer names). */
static gs_bytes_t sample_elem(void *ctx, const gs__field_t *f, const char *role, uint32_t k)
{
    uint64_t *s = ctx;
    if (strcmp(role, "bin") == 0) return sample_bin(k == 1 ? 0 : 1 + k * 5, s);
    if (strcmp(role, "ucx") == 0) return sample_bin(3 + k, s);
    if (strcmp(role, "host") == 0) return sample_str("host", k, s);
    if (k == 1) return (gs_str_t){(const uint8_t *)"", 0};
    return sample_str(strcmp(role, "name") == 0 ? "peer" : f->name, k, s);
}

static uint64_t sample_id(void *ctx)
{
    return sample_u64(ctx);
}

static void *sample_alloc_cb(void *ctx, size_t n)
{
    (void)ctx;
    return sample_alloc(n);
}

static void *sample_array(void *body, const gs__field_t *f, uint64_t *s)
{
    schema_gen_t g = {sample_elem, sample_id, sample_alloc_cb, s};
    return schema_fill_array(body, f, SAMPLE_ARRAY, &g);
}

void sample_msg(uint32_t type, gs_msg_t *m)
{
    const gs__msg_desc_t *d = gs__msg_desc(type);
    void *body = &m->u;
    uint64_t ndeps = 0;
    memset(m, 0, sizeof *m);
    m->type = type;
    if (d == NULL) return;
    sample_type = type;
    sample_used = 0;
    for (unsigned i = 0; i < d->nfields; i++) {
        const gs__field_t *f = &d->fields[i];
        uint64_t s = sample_seed(type, f->name), count = 0;
        void *dst = (uint8_t *)body + f->off;
        uint64_t *off;
        switch (f->kind) {
        case GS__F_UINT:
        case GS__F_INT:
            count = schema_is_count(d, f) ? SAMPLE_COUNT : sample_u64(&s);
            sample_store(dst, f->size, sample_rule_value(body, f, 0, count));
            break;
        case GS__F_STR: *(gs_str_t *)dst = sample_str(f->name, 0, &s); break;
        case GS__F_BIN: *(gs_bytes_t *)dst = sample_bin(1 + s % 12, &s); break;
        case GS__F_CHUNK: *(gs_bytes_t *)dst = sample_bin(SAMPLE_CHUNK, &s); break;
        case GS__F_TAB:
            gs__field_set_ptr(body, f, sample_table(body, f, gs__field_count(body, f) * f->per, &s));
            break;
        case GS__F_DTAB: gs__field_set_ptr(body, f, sample_table(body, f, ndeps * f->per, &s)); break;
        case GS__F_CSR:
            count = gs__field_count(body, f);
            off = sample_alloc((size_t)(count + 1) * 8);
            off[0] = 0;
            for (uint64_t k = 0; k < count; k++) off[k + 1] = off[k] + (k + s) % 3;  /* some rows empty */
            ndeps = off[count];
            gs__field_set_ptr(body, f, off);
            break;
        case GS__F_STRS:
        case GS__F_BINS:
        case GS__F_PEERS: gs__field_set_ptr(body, f, sample_array(body, f, &s)); break;
        }
    }
}

void sample_frame(uint32_t type, gs_buf_t *out)
{
    gs_msg_t m;
    sample_msg(type, &m);
    gs_status_t st = gs_msg_encode(&m, out);
    cr_assert_eq(st, GS_OK, "encoding sample %s: %s", gs_msg_type_name(type), gs_last_error());
}

static void assert_bytes_eq(gs_bytes_t a, gs_bytes_t b, const char *what)
{
    cr_assert_eq(a.len, b.len, "%s: length %zu vs %zu", what, a.len, b.len);
    if (a.len > 0) cr_assert(memcmp(a.data, b.data, a.len) == 0, "%s differs", what);
}

static void assert_table_eq(const void *a, const void *b, uint64_t n, size_t width, const char *what)
{
    if (n == 0) return;
    cr_assert_not_null(a, "%s is NULL", what);
    cr_assert_not_null(b, "%s is NULL", what);
    cr_assert(memcmp(a, b, (size_t)n * width) == 0, "%s differs", what);
}

static void assert_array_eq(const void *x, const void *y, const gs__field_t *f, const char *what)
{
    const uint8_t *a = gs__field_ptr(x, f), *b = gs__field_ptr(y, f);
    uint64_t n = gs__field_count(x, f);
    cr_assert_eq(n, gs__field_count(y, f), "%s: count", what);
    for (uint64_t k = 0; k < n; k++) {
        if (f->kind == GS__F_PEERS) {
            const gs_peer_info_t *p = (const gs_peer_info_t *)(const void *)a + k;
            const gs_peer_info_t *q = (const gs_peer_info_t *)(const void *)b + k;
            cr_assert_eq(p->id, q->id, "%s[%llu].id", what, (unsigned long long)k);
            assert_bytes_eq(p->name, q->name, what);
            assert_bytes_eq(p->host, q->host, what);
            assert_bytes_eq(p->ucx_address, q->ucx_address, what);
        } else {
            assert_bytes_eq(((const gs_bytes_t *)(const void *)a)[k], ((const gs_bytes_t *)(const void *)b)[k], what);
        }
    }
}

void assert_msg_eq(const gs_msg_t *a, const gs_msg_t *b)
{
    const gs__msg_desc_t *d = gs__msg_desc(a->type);
    const void *x = &a->u, *y = &b->u;
    uint64_t ndeps = 0;
    char what[96];
    cr_assert_eq(a->type, b->type);
    if (d == NULL) return;
    for (unsigned i = 0; i < d->nfields; i++) {
        const gs__field_t *f = &d->fields[i];
        snprintf(what, sizeof what, "%s.%s", d->name, f->name);
        switch (f->kind) {
        case GS__F_UINT:
        case GS__F_INT:
            cr_assert_eq(gs__uint_at(x, f->off, f->size), gs__uint_at(y, f->off, f->size), "%s differs", what);
            break;
        case GS__F_STR:
        case GS__F_BIN:
        case GS__F_CHUNK:
            assert_bytes_eq(*(const gs_bytes_t *)gs__field_at(x, f), *(const gs_bytes_t *)gs__field_at(y, f), what);
            break;
        case GS__F_TAB:
            assert_table_eq(gs__field_ptr(x, f), gs__field_ptr(y, f), gs__field_count(x, f) * f->per, f->size, what);
            break;
        case GS__F_CSR:
            assert_table_eq(gs__field_ptr(x, f), gs__field_ptr(y, f), gs__field_count(x, f) + 1, 8, what);
            ndeps = gs__csr_ndeps(x, f);
            break;
        case GS__F_DTAB:
            assert_table_eq(gs__field_ptr(x, f), gs__field_ptr(y, f), ndeps * f->per, f->size, what);
            break;
        case GS__F_STRS:
        case GS__F_BINS:
        case GS__F_PEERS: assert_array_eq(x, y, f, what); break;
        }
    }
}
