#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "proto/mp.h"
#include "proto/msg.h"
#include "samples.h"


static uint32_t frame_len(const gs_buf_t *b)
{
    return (uint32_t)b->data[0] | (uint32_t)b->data[1] << 8 | (uint32_t)b->data[2] << 16 |
           (uint32_t)b->data[3] << 24;
}

/* Decode @a len bytes that must be rejected with GS_ERR_PROTO, without leaking and, because parse
 * errors are found before the one allocation, without even trying to allocate. */
static void expect_proto_no_alloc(const uint8_t *p, size_t len, const char *what, size_t at)
{
    gs_msg_t m;
    memset(&m, 0xab, sizeof m);
    gs_alloc_fail_after(0);
    gs_status_t st = gs_msg_decode(p, len, &m);
    unsigned long tried = gs_alloc_injected_failures();
    gs_alloc_fail_after(-1);
    cr_assert_eq(st, GS_ERR_PROTO, "%s at %zu: got %s", what, at, gs_status_name(st));
    cr_assert_eq(tried, 0, "%s at %zu: decoder allocated before finding the error", what, at);
    cr_assert_eq(((uint8_t *)&m)[0], 0xab, "output written on error");
    cr_assert_neq(gs_last_error()[0], '\0');
}

/* Decode: GS_OK (then re-encode and decode again), GS_ERR_PROTO, or GS_ERR_MSG_TOO_LARGE for a
 * payload over its type's cap; never anything else. */
static int decode_total(const uint8_t *p, size_t len)
{
    gs_msg_t m, m2;
    gs_status_t st = gs_msg_decode(p, len, &m);
    if (st == GS_ERR_PROTO || st == GS_ERR_MSG_TOO_LARGE) return 0;
    cr_assert_eq(st, GS_OK, "decode returned %s: %s", gs_status_name(st), gs_last_error());
    gs_buf_t b;
    gs_buf_init(&b);
    cr_assert_eq(gs_msg_encode(&m, &b), GS_OK, "decoded %s does not re-encode: %s", gs_msg_type_name(m.type),
                 gs_last_error());
    cr_assert_eq(frame_len(&b), b.len - 4);
    cr_assert_eq(gs_msg_decode(b.data + 4, b.len - 4, &m2), GS_OK, "%s", gs_last_error());
    assert_msg_eq(&m, &m2);
    gs_msg_cleanup(&m2);
    gs_msg_cleanup(&m);
    gs_buf_cleanup(&b);
    return 1;
}

Test(proto_msg, names_every_type)
{
    cr_assert_str_eq(gs_msg_type_name(GS_MSG_TASK_ASSIGN), "task-assign");
    cr_assert_str_eq(gs_msg_type_name(GS_MSG_HELLO), "hello");
    cr_assert_str_eq(gs_msg_type_name(GS_MSG_INFO), "info");
    cr_assert_str_eq(gs_msg_type_name(0), "unknown");
    cr_assert_str_eq(gs_msg_type_name(GS_MSG_TYPE_MAX), "unknown");
    cr_assert_str_eq(gs_msg_type_name(UINT32_MAX), "unknown");
    for (uint32_t t = FIRST_TYPE; t <= LAST_TYPE; t++) cr_assert_str_neq(gs_msg_type_name(t), "unknown");
    proto_check_no_leaks();
}

Test(proto_msg, round_trips_every_type)
{
    for (uint32_t t = FIRST_TYPE; t <= LAST_TYPE; t++) {
        gs_msg_t m, d;
        gs_buf_t b;
        gs_buf_init(&b);
        sample_msg(t, &m);
        cr_assert_eq(gs_msg_encode(&m, &b), GS_OK, "%s: %s", gs_msg_type_name(t), gs_last_error());
        cr_assert_geq(b.len, 5);
        cr_assert_eq(frame_len(&b), b.len - GS_PROTO_FRAME_HEADER, "%s: header", gs_msg_type_name(t));
        cr_assert_eq(gs_msg_decode(b.data + 4, b.len - 4, &d), GS_OK, "%s: %s", gs_msg_type_name(t),
                     gs_last_error());
        assert_msg_eq(&m, &d);
        gs_msg_cleanup(&d);
        cr_assert_null(d.owned);
        gs_msg_cleanup(&d);  /* idempotent */
        gs_buf_cleanup(&b);
    }
    proto_check_no_leaks();
}

Test(proto_msg, decoded_strings_are_nul_terminated_and_tables_aligned)
{
    gs_buf_t b;
    gs_msg_t d;
    gs_buf_init(&b);
    sample_frame(GS_MSG_TASK_DONE, &b);
    sample_frame(GS_MSG_GRAPH_SUBMIT, &b);
    cr_assert_eq(gs_msg_decode(b.data + 4, frame_len(&b), &d), GS_OK);
    for (uint32_t i = 0; i < d.u.task_done.nerrors; i++) {
        cr_assert_eq(d.u.task_done.errors[i].data[d.u.task_done.errors[i].len], '\0');
    }
    gs_msg_t sample;
    sample_msg(GS_MSG_TASK_DONE, &sample);
    cr_assert_geq(d.u.task_done.nerrors, 2);
    cr_assert_str_eq((const char *)d.u.task_done.errors[1].data, (const char *)sample.u.task_done.errors[1].data);
    cr_assert_eq((uintptr_t)d.u.task_done.status % 8, 0);
    cr_assert_eq((uintptr_t)d.u.task_done.run_ns % 8, 0);
    gs_msg_cleanup(&d);

    size_t off = 4 + frame_len(&b);
    gs_buf_t b2;
    gs_buf_init(&b2);
    /* decode from an odd address: copies must still be aligned */
    cr_assert_eq(gs_buf_append(&b2, "x", 1), GS_OK);
    cr_assert_eq(gs_buf_append(&b2, b.data + off + 4, b.len - off - 4), GS_OK);
    cr_assert_eq(gs_msg_decode(b2.data + 1, b2.len - 1, &d), GS_OK, "%s", gs_last_error());
    cr_assert_eq((uintptr_t)d.u.graph_submit.deps % 8, 0);
    cr_assert_eq((uintptr_t)d.u.graph_submit.task_layer % 8, 0);
    cr_assert_eq((uintptr_t)d.u.graph_submit.layers % 8, 0);
    sample_msg(GS_MSG_GRAPH_SUBMIT, &sample);
    uint64_t ndeps = sample.u.graph_submit.dep_off[sample.u.graph_submit.ntasks];
    cr_assert_gt(ndeps, 0);
    cr_assert_eq(d.u.graph_submit.deps[ndeps - 1], sample.u.graph_submit.deps[ndeps - 1]);
    cr_assert_eq(d.u.graph_submit.layers[1].len, 0);
    gs_msg_cleanup(&d);

    gs_msg_t e = {.type = GS_MSG_ERROR};  /* empty string decodes as "" */
    gs_buf_cleanup(&b);
    cr_assert_eq(gs_msg_encode(&e, &b), GS_OK);
    cr_assert_eq(gs_msg_decode(b.data + 4, b.len - 4, &d), GS_OK);
    cr_assert_not_null(d.u.error.message.data);
    cr_assert_str_eq((const char *)d.u.error.message.data, "");
    gs_msg_cleanup(&d);
    gs_buf_cleanup(&b);
    gs_buf_cleanup(&b2);
    proto_check_no_leaks();
}

Test(proto_msg, decode_makes_one_allocation_and_fails_cleanly_without_memory)
{
    for (uint32_t t = FIRST_TYPE; t <= LAST_TYPE; t++) {
        gs_buf_t b;
        gs_buf_init(&b);
        sample_frame(t, &b);
        long k;
        for (k = 0;; k++) {
            gs_msg_t d;
            memset(&d, 0xcd, sizeof d);
            size_t before = live_heap_blocks();
            gs_alloc_fail_after(k);
            gs_status_t st = gs_msg_decode(b.data + 4, b.len - 4, &d);
            gs_alloc_fail_after(-1);
            if (st == GS_OK) {
                gs_msg_cleanup(&d);
                cr_assert_eq(live_heap_blocks(), before, "%s: leak after cleanup", gs_msg_type_name(t));
                break;
            }
            cr_assert_eq(st, GS_ERR_NO_MEMORY, "%s: k=%ld gave %s", gs_msg_type_name(t), k, gs_status_name(st));
            cr_assert_eq(live_heap_blocks(), before, "%s: leak at k=%ld", gs_msg_type_name(t), k);
            cr_assert_eq(((uint8_t *)&d)[0], 0xcd, "output written on error");
        }
        cr_assert_leq(k, 1, "%s needed %ld allocations", gs_msg_type_name(t), k);
        gs_buf_cleanup(&b);
    }
    proto_check_no_leaks();
}

Test(proto_msg, decode_allocation_is_bounded_by_payload)
{
    for (uint32_t t = FIRST_TYPE; t <= LAST_TYPE; t++) {
        gs_buf_t b;
        gs_msg_t d;
        gs_buf_init(&b);
        sample_frame(t, &b);
        size_t before = heap_bytes_requested();
        cr_assert_eq(gs_msg_decode(b.data + 4, b.len - 4, &d), GS_OK);
        size_t used = heap_bytes_requested() - before;
        cr_assert_leq(used, 24 * (b.len - 4) + 64, "%s: %zu bytes for a %zu-byte payload", gs_msg_type_name(t),
                      used, b.len - 4);
        gs_msg_cleanup(&d);
        gs_buf_cleanup(&b);
    }
    /* worst case: many empty strings; 100000 names in ~100 KB */
    gs_buf_t b;
    gs_mp_writer_t w;
    gs_buf_init(&b);
    gs_mp_writer_init(&w, &b);
    gs_mp_write_array(&w, 6);
    gs_mp_write_u64(&w, GS_MSG_INFO);
    for (int i = 0; i < 4; i++) gs_mp_write_u64(&w, 0);
    gs_mp_write_array(&w, 100000);
    for (int i = 0; i < 100000; i++) gs_mp_write_str(&w, "", 0);
    cr_assert_eq(w.err, GS_OK);
    gs_msg_t d;
    size_t before = heap_bytes_requested();
    cr_assert_eq(gs_msg_decode(b.data, b.len, &d), GS_OK, "%s", gs_last_error());
    cr_assert_eq(d.u.info.nnames, 100000);
    cr_assert_leq(heap_bytes_requested() - before, 24 * b.len);
    gs_msg_cleanup(&d);
    gs_buf_cleanup(&b);
    proto_check_no_leaks();
}

Test(proto_msg, rejects_every_truncation_of_every_type)
{
    for (uint32_t t = FIRST_TYPE; t <= LAST_TYPE; t++) {
        gs_buf_t b;
        gs_buf_init(&b);
        sample_frame(t, &b);
        const uint8_t *payload = b.data + 4;
        size_t len = b.len - 4;
        size_t before = live_heap_blocks();
        for (size_t cut = 0; cut < len; cut++) expect_proto_no_alloc(payload, cut, gs_msg_type_name(t), cut);
        cr_assert_eq(live_heap_blocks(), before);
        /* the frame reader sees every truncated frame as incomplete */
        for (size_t cut = 0; cut < b.len; cut += (cut < 64 ? 1 : 97)) {
            gs_frame_reader_t fr;
            const uint8_t *p;
            size_t n;
            gs_frame_reader_init(&fr, 0);
            cr_assert_eq(gs_frame_reader_feed(&fr, b.data, cut), GS_OK);
            cr_assert_eq(gs_frame_reader_next(&fr, &p, &n), GS_INPROGRESS);
            gs_frame_reader_cleanup(&fr);
        }
        gs_buf_cleanup(&b);
    }
    proto_check_no_leaks();
}

Test(proto_msg, survives_every_byte_flipped)
{
    static const uint8_t masks[] = {0x01, 0x02, 0x10, 0x40, 0x80, 0x7f, 0xff};
    size_t before = live_heap_blocks();
    unsigned ok = 0, total = 0;
    for (uint32_t t = FIRST_TYPE; t <= LAST_TYPE; t++) {
        gs_buf_t b;
        gs_buf_init(&b);
        sample_frame(t, &b);
        uint8_t *payload = b.data + 4;
        size_t len = b.len - 4;
        size_t step = len > 2000 ? 7 : 1;  /* DATA: the chunk bytes are all alike */
        for (size_t i = 0; i < len; i += step) {
            for (size_t k = 0; k < sizeof masks; k++) {
                payload[i] ^= masks[k];
                ok += decode_total(payload, len);
                total++;
                payload[i] ^= masks[k];
            }
        }
        gs_buf_cleanup(&b);
    }
    cr_assert_eq(live_heap_blocks(), before);
    cr_assert_gt(ok, 0);
    cr_assert_lt(ok, total);
    proto_check_no_leaks();
}

Test(proto_msg, survives_random_payloads)
{
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    uint8_t buf[64];
    unsigned ok = 0;
    size_t before = live_heap_blocks();
    for (int iter = 0; iter < 200000; iter++) {
        uint64_t r = test_rand(&seed);
        size_t len = (size_t)(r % sizeof buf);
        for (size_t i = 0; i < len; i += 8) {
            uint64_t v = test_rand(&seed);
            memcpy(buf + i, &v, len - i < 8 ? len - i : 8);
        }
        if (len >= 2 && (r >> 8) % 2 == 0) {  /* half of them look like a message array */
            buf[0] = (uint8_t)(0x90 | ((r >> 16) % 16));
            buf[1] = (uint8_t)((r >> 24) % (GS_MSG_TYPE_MAX + 2));
        }
        ok += decode_total(buf, len);
    }
    cr_assert_eq(live_heap_blocks(), before);
    cr_assert_gt(ok, 0);  /* e.g. [19] (SHUTDOWN) */
    proto_check_no_leaks();
}

/* Field kinds of each type after the type, so that random payloads are mostly coherent and reach
 * the checks deep inside the decoder:
 *   u small uint   i small negative int   s short str   b any bin   S array of str   P array of peers
 *   C count (remembered)   L array of layer bins (count remembered as nlayers)
 *   w u32 table [count] with values < nlayers   l u32 table [nlayers]   q u64 table [count]
 *   k 16-byte table [count]   t 32-byte table [count]   o dep_off [count + 1], mostly monotone (remembers ndeps)
 *   D u64 table [ndeps]   K 16-byte table [ndeps]   x i32 status table [count] (remembers failures)
 *   e array of one str per failure   T array of str [count]   N count again, or 0 (remembered)
 *   M array of str [nlayers] (or none) */
static const char *const schema[GS_MSG_TYPE_MAX] = {
    [GS_MSG_HELLO] = "uussb", [GS_MSG_WELCOME] = "uuub", [GS_MSG_WORKER_REGISTER] = "sssiuuubs",
    [GS_MSG_HEARTBEAT] = "uuuuuuuuuuuuuuuuuuuuu", [GS_MSG_PEERS] = "PCq", [GS_MSG_GRAPH_SUBMIT] = "uuLCwqoDqCkCqM",
    [GS_MSG_GRAPH_ACCEPTED] = "uu", [GS_MSG_TASK_ASSIGN] = "uLlCqwqoKDD", [GS_MSG_TASK_DONE] = "Cqqxqqqeuqq",
    [GS_MSG_RELEASE] = "Ck", [GS_MSG_GATHER_REQ] = "uCk", [GS_MSG_DATA] = "uuuib", [GS_MSG_FETCH_REQ] = "uuuu",
    [GS_MSG_PROGRESS] = "uuu", [GS_MSG_GRAPH_DONE] = "uisuuu", [GS_MSG_CANCEL] = "u", [GS_MSG_RELEASE_GRAPH] = "u",
    [GS_MSG_ERROR] = "is", [GS_MSG_SHUTDOWN] = "", [GS_MSG_INFO_REQ] = "", [GS_MSG_INFO] = "uuuuS",
    [GS_MSG_BANDWIDTH] = "CqqqwT", [GS_MSG_REPLICATE] = "uusCkNqq", [GS_MSG_REPLICATE_DONE] = "uisCkq",
    [GS_MSG_WORKERS_REQ] = "", [GS_MSG_WORKERS] = "CqxwqqTTTTqqqqqqqqqqqqqq", [GS_MSG_CHALLENGE] = "bb", [GS_MSG_AUTH] = "b", [GS_MSG_REPORT_REQ] = "uu",
    [GS_MSG_REPORT] = "uisb", [GS_MSG_LOCATE_REQ] = "uCk", [GS_MSG_LOCATIONS] = "uCqqtTT",
    [GS_MSG_CHUNK_REQ] = "uuuubsu",
};

typedef struct gen_state {
    uint64_t seed;
    uint64_t count, nlayers, ndeps, nfailed;
} gen_state_t;

static void gen_any(gs_mp_writer_t *w, uint64_t *seed, int depth);

/* Usually @a n; now and then one more or one less. */
static uint64_t fuzz_count(gen_state_t *g, uint64_t n)
{
    uint64_t r = test_rand(&g->seed) % 40;
    if (r == 0) return n + 1;
    if (r == 1 && n > 0) return n - 1;
    return n;
}

/* An integer table as protocol version 3 sends it: bin 32, zero padding to an 8-byte boundary of
 * the payload (which starts at offset 0 of the writer's buffer here), then the entries. */
static void put_table(gs_mp_writer_t *w, const void *p, size_t len)
{
    gs_mp_write_bin32_padded(w, (0u - (unsigned)(w->out->len + 5)) & 7u, p, len);
}

static void gen_table(gs_mp_writer_t *w, gen_state_t *g, uint64_t count, unsigned width, int kind)
{
    uint8_t bin[16 * 8];
    uint64_t prev = 0;
    count = fuzz_count(g, count);
    if (count * width > sizeof bin) count = sizeof bin / width;
    memset(bin, 0, sizeof bin);
    for (uint64_t i = 0; i < count; i++) {
        uint64_t r = test_rand(&g->seed);
        uint64_t v = r % 4;
        if (kind == 'w') v = g->nlayers > 0 && r % 30 != 0 ? (r >> 8) % g->nlayers : v;
        if (kind == 'o') {
            v = i == 0 ? (r % 30 == 0 ? 1 : 0) : prev + (r % 30 == 0 ? (uint64_t)-1 : (r >> 8) % 3);
            prev = v;
        }
        if (kind == 'x') {
            v = r % 3 == 0 ? (uint64_t)(uint32_t)GS_ERR_TASK_FAILED : 0;
            g->nfailed += v != 0;
        }
        for (unsigned k = 0; k < width && k < 8; k++) bin[i * width + k] = (uint8_t)(v >> (8 * k));
    }
    if (kind == 'o') g->ndeps = count > 0 ? prev : 0;
    put_table(w, bin, (size_t)(count * width));
}

static void gen_field(gs_mp_writer_t *w, char kind, gen_state_t *g)
{
    uint64_t r = test_rand(&g->seed);
    char s[8];
    if (r % 24 == 0) {  /* occasionally the wrong kind */
        gen_any(w, &g->seed, 0);
        return;
    }
    r >>= 5;
    switch (kind) {
    case 'u': gs_mp_write_u64(w, r % 8 == 0 ? r : (r >> 3) % 5); break;
    case 'i': gs_mp_write_i64(w, r % 3 == 0 ? 0 : -(int64_t)((r >> 2) % 50)); break;
    case 'C':
        g->count = r % 5;
        gs_mp_write_u64(w, r % 50 == 0 ? r : g->count);
        break;
    case 's': {
        size_t n = r % 6;
        for (size_t i = 0; i < n; i++) s[i] = (char)('a' + (r >> (3 + i)) % 26);
        if (n > 0 && (r >> 20) % 10 == 0) s[0] = '\0';
        gs_mp_write_str(w, s, n);
        break;
    }
    case 'b': gs_mp_write_bin(w, "\x93\x01\x02\x03\x04\x05\x06\x07", r % 9); break;
    case 'w': gen_table(w, g, g->count, 4, 'w'); break;
    case 'l': gen_table(w, g, g->nlayers, 4, 'l'); break;
    case 'q': gen_table(w, g, g->count, 8, 'q'); break;
    case 'k': gen_table(w, g, g->count, 16, 'k'); break;
    case 't': gen_table(w, g, g->count, 32, 't'); break;
    case 'o': gen_table(w, g, g->count + 1, 8, 'o'); break;
    case 'D': gen_table(w, g, g->ndeps, 8, 'D'); break;
    case 'K': gen_table(w, g, g->ndeps, 16, 'K'); break;
    case 'x': g->nfailed = 0; gen_table(w, g, g->count, 4, 'x'); break;
    case 'N':
        if (r % 2 == 0) g->count = 0;
        gs_mp_write_u64(w, g->count);
        break;
    case 'M':
    case 'T': {
        uint32_t n = kind == 'M' ? (r % 3 == 0 ? 0 : (uint32_t)fuzz_count(g, g->nlayers)) : (uint32_t)fuzz_count(g, g->count);
        gs_mp_write_array(w, n);
        for (uint32_t i = 0; i < n; i++) gen_field(w, 's', g);
        break;
    }
    case 'L':
    case 'S':
    case 'P':
    case 'e': {
        uint32_t n = kind == 'e' ? (uint32_t)fuzz_count(g, g->nfailed) : (uint32_t)(r % 4);
        if (kind == 'L') g->nlayers = n;
        gs_mp_write_array(w, n);
        for (uint32_t i = 0; i < n; i++) {
            if (kind == 'L') {
                gen_field(w, 'b', g);
            } else if (kind == 'S' || kind == 'e') {
                gen_field(w, 's', g);
            } else {
                gs_mp_write_array(w, (test_rand(&g->seed) % 16 == 0) ? 3 : 4);
                gen_field(w, 'u', g);
                gen_field(w, 's', g);
                gen_field(w, 's', g);
                gen_field(w, 'b', g);
            }
        }
        break;
    }
    default: break;
    }
}

static void gen_any(gs_mp_writer_t *w, uint64_t *seed, int depth)
{
    uint64_t r = test_rand(seed);
    switch (r % 10) {
    case 0: gs_mp_write_nil(w); break;
    case 1: gs_mp_write_bool(w, (int)(r >> 8) & 1); break;
    case 2: gs_mp_write_f64(w, (double)(r >> 11)); break;
    case 3: gs_mp_write_i64(w, -(int64_t)(r >> 40)); break;
    case 4: gs_mp_write_u64(w, r >> (r % 64)); break;
    case 5: gs_mp_write_str(w, "abcdefgh", (r >> 8) % 9); break;
    case 6: gs_mp_write_bin(w, "\0\1\2\3\4\5\6\7", (r >> 8) % 9); break;
    case 7:
    case 8: {
        uint32_t n = depth < 3 ? (uint32_t)((r >> 8) % 4) : 0;
        if (r % 10 == 7) {
            gs_mp_write_array(w, n);
            for (uint32_t i = 0; i < n; i++) gen_any(w, seed, depth + 1);
        } else {
            gs_mp_write_map(w, n);
            for (uint32_t i = 0; i < 2 * n; i++) gen_any(w, seed, depth + 1);
        }
        break;
    }
    default: gs_mp_write_u64(w, (r >> 8) % GS_MSG_TYPE_MAX); break;
    }
}

Test(proto_msg, survives_random_msgpack_shaped_payloads)
{
    gen_state_t g = {.seed = 12345};
    unsigned ok_by_type[GS_MSG_TYPE_MAX] = {0};
    unsigned total_by_type[GS_MSG_TYPE_MAX] = {0};
    size_t before = live_heap_blocks();
    gs_buf_t b;
    gs_buf_init(&b);
    for (int iter = 0; iter < 200000; iter++) {
        gs_mp_writer_t w;
        uint64_t r = test_rand(&g.seed);
        uint32_t type = (uint32_t)(r % (GS_MSG_TYPE_MAX + 1));
        g.count = g.nlayers = g.ndeps = g.nfailed = 0;
        const char *sch = type < GS_MSG_TYPE_MAX && schema[type] != NULL ? schema[type] : "uu";
        uint32_t nf = (uint32_t)strlen(sch) + 1;
        b.len = 0;
        gs_mp_writer_init(&w, &b);
        if ((r >> 8) % 20 == 0) nf += (uint32_t)((r >> 16) % 3) - 1;  /* wrong field count */
        gs_mp_write_array(&w, nf);
        gs_mp_write_u64(&w, type);
        for (uint32_t i = 0; i + 1 < nf; i++) gen_field(&w, i < strlen(sch) ? sch[i] : 'u', &g);
        if ((r >> 24) % 50 == 0) gs_mp_write_nil(&w);  /* trailing garbage */
        cr_assert_eq(w.err, GS_OK);
        if (decode_total(b.data, b.len)) ok_by_type[type]++;
        if (type < GS_MSG_TYPE_MAX) total_by_type[type]++;
    }
    gs_buf_cleanup(&b);
    cr_assert_eq(live_heap_blocks(), before);
    /* the generator reaches valid messages of every type, so the checks deep inside run too */
    for (uint32_t t = FIRST_TYPE; t <= LAST_TYPE; t++) {
        cr_assert_gt(ok_by_type[t], 0, "no valid %s generated", gs_msg_type_name(t));
        cr_assert_lt(ok_by_type[t], total_by_type[t], "no invalid %s generated", gs_msg_type_name(t));
    }
    proto_check_no_leaks();
}

/* ---- specific rejections ---- */

static void encode_raw(gs_msg_t *m, gs_buf_t *b)
{
    b->len = 0;
    cr_assert_eq(gs_msg_encode(m, b), GS_OK, "%s", gs_last_error());
}

static void expect_decode_error(const gs_buf_t *b, const char *needle)
{
    gs_msg_t d;
    size_t before = live_heap_blocks();
    cr_assert_eq(gs_msg_decode(b->data + 4, b->len - 4, &d), GS_ERR_PROTO);
    cr_assert_eq(live_heap_blocks(), before);
    cr_assert(strstr(gs_last_error(), needle) != NULL, "error '%s' does not mention '%s'", gs_last_error(), needle);
}

/* Overwrite the @a idx-th 8-byte entry of the table whose raw bytes equal @a table in @a b. */
static void patch_u64(gs_buf_t *b, const uint64_t *table, size_t nbytes, size_t idx, uint64_t v)
{
    for (size_t off = 4; off + nbytes <= b->len; off++) {
        if (memcmp(b->data + off, table, nbytes) == 0) {
            memcpy(b->data + off + 8 * idx, &v, 8);
            return;
        }
    }
    cr_assert_fail("table not found in frame");
}

Test(proto_msg, rejects_bad_csr_offsets_and_counts)
{
    gs_msg_t m;
    gs_buf_t b;
    gs_buf_init(&b);
    const uint64_t *dep_off;
    uint64_t ntasks, ndeps;
    size_t csr_bytes;
    char needle[64];

    /* dep_off decreasing: the next-to-last offset above the last */
    sample_msg(GS_MSG_GRAPH_SUBMIT, &m);
    dep_off = m.u.graph_submit.dep_off;
    ntasks = m.u.graph_submit.ntasks;
    ndeps = dep_off[ntasks];
    csr_bytes = (size_t)(ntasks + 1) * 8;
    cr_assert_geq(ntasks, 2);
    encode_raw(&m, &b);
    patch_u64(&b, dep_off, csr_bytes, ntasks - 1, ndeps + 1);
    snprintf(needle, sizeof needle, "dep_off decreases at task %llu", (unsigned long long)(ntasks - 1));
    expect_decode_error(&b, needle);

    /* dep_off not starting at 0 */
    encode_raw(&m, &b);
    patch_u64(&b, dep_off, csr_bytes, 0, 1);
    expect_decode_error(&b, "dep_off[0]");

    /* last offset does not match the deps table */
    encode_raw(&m, &b);
    patch_u64(&b, dep_off, csr_bytes, ntasks, ndeps - 1);
    snprintf(needle, sizeof needle, "and %llu entries of 8 bytes", (unsigned long long)(ndeps - 1));
    expect_decode_error(&b, needle);
    cr_assert(strstr(gs_last_error(), "deps has ") != NULL, "%s", gs_last_error());

    /* huge last offset: rejected without allocating */
    encode_raw(&m, &b);
    patch_u64(&b, dep_off, csr_bytes, ntasks, UINT64_MAX);
    expect_proto_no_alloc(b.data + 4, b.len - 4, "huge ndeps", 0);

    /* task-assign dep_off */
    sample_msg(GS_MSG_TASK_ASSIGN, &m);
    ntasks = m.u.task_assign.ntasks;
    encode_raw(&m, &b);
    patch_u64(&b, m.u.task_assign.dep_off, (size_t)(ntasks + 1) * 8, 1, m.u.task_assign.dep_off[ntasks] + 1);
    expect_decode_error(&b, "dep_off decreases");

    gs_buf_cleanup(&b);
    proto_check_no_leaks();
}

/* Build a payload by hand: [type, fields...] */
static void hand_payload(gs_buf_t *b, gs_mp_writer_t *w, uint32_t nfields, uint32_t type)
{
    b->len = 0;
    gs_mp_writer_init(w, b);
    gs_mp_write_array(w, nfields);
    gs_mp_write_u64(w, type);
}

static void expect_payload_error(gs_buf_t *b, const char *needle)
{
    gs_msg_t d;
    size_t before = live_heap_blocks();
    cr_assert_eq(gs_msg_decode(b->data, b->len, &d), GS_ERR_PROTO, "accepted; wanted '%s'", needle);
    cr_assert_eq(live_heap_blocks(), before);
    cr_assert(strstr(gs_last_error(), needle) != NULL, "error '%s' does not mention '%s'", gs_last_error(), needle);
}

/* Each type's cap (msg_schema.h) is checked before anything is parsed or allocated: a HEARTBEAT
 * padded past 256 bytes is refused whatever follows its type; types without a cap take any size. */
Test(proto_msg, refuses_payloads_over_their_type_cap_before_allocating)
{
    gs_buf_t b;
    gs_mp_writer_t w;
    gs_msg_t m;
    gs_buf_init(&b);
    hand_payload(&b, &w, 22, GS_MSG_HEARTBEAT);
    for (int i = 0; i < 21; i++) gs_mp_write_u64(&w, 1);
    cr_assert_eq(gs_msg_decode(b.data, b.len, &m), GS_OK);
    gs_msg_cleanup(&m);
    while (b.len <= 256) cr_assert_eq(gs_buf_append(&b, "\xc0", 1), GS_OK);   /* trailing nils */
    size_t before = live_heap_blocks();
    cr_assert_eq(gs_msg_decode(b.data, b.len, &m), GS_ERR_MSG_TOO_LARGE);
    cr_assert_eq(live_heap_blocks(), before);
    cr_assert(strstr(gs_last_error(), "heartbeat message of 257 bytes exceeds its cap of 256") != NULL, "%s",
              gs_last_error());
    /* a DATA message is bounded by the frame limit only */
    hand_payload(&b, &w, 6, GS_MSG_DATA);
    for (int i = 0; i < 3; i++) gs_mp_write_u64(&w, 1);
    gs_mp_write_u64(&w, 0);
    {
        static uint8_t big[1 << 20];
        gs_mp_write_bin(&w, big, sizeof big);
    }
    cr_assert_eq(gs_msg_decode(b.data, b.len, &m), GS_OK, "%s", gs_last_error());
    gs_msg_cleanup(&m);
    gs_buf_cleanup(&b);
}

Test(proto_msg, rejects_declared_sizes_larger_than_the_data)
{
    gs_buf_t b;
    gs_mp_writer_t w;
    gs_buf_init(&b);

    /* graph-submit claiming 2^40 tasks with empty tables */
    hand_payload(&b, &w, 15, GS_MSG_GRAPH_SUBMIT);
    gs_mp_write_u64(&w, 1);
    gs_mp_write_u64(&w, 0);
    gs_mp_write_array(&w, 0);
    gs_mp_write_u64(&w, 1ull << 40);
    for (int i = 0; i < 5; i++) put_table(&w, "", 0);
    gs_mp_write_u64(&w, 0);
    put_table(&w, "", 0);
    gs_mp_write_u64(&w, 0);
    put_table(&w, "", 0);
    gs_mp_write_array(&w, 0);
    expect_proto_no_alloc(b.data, b.len, "2^40 tasks", 0);
    expect_payload_error(&b, "task_layer has 5 bytes, expected 5 bytes of padding (to an 8-byte boundary of the payload) and 1099511627776 entries");

    /* task-done with n = UINT64_MAX */
    hand_payload(&b, &w, 12, GS_MSG_TASK_DONE);
    gs_mp_write_u64(&w, UINT64_MAX);
    for (int i = 0; i < 6; i++) put_table(&w, "\0\0\0\0\0\0\0\0", 8);
    gs_mp_write_array(&w, 0);
    gs_mp_write_u64(&w, 0);
    for (int i = 0; i < 2; i++) put_table(&w, "\0\0\0\0\0\0\0\0", 8);
    expect_proto_no_alloc(b.data, b.len, "n = 2^64-1", 0);

    /* an array of layers declaring 2^32-1 entries */
    hand_payload(&b, &w, 15, GS_MSG_GRAPH_SUBMIT);
    gs_mp_write_u64(&w, 1);
    gs_mp_write_u64(&w, 0);
    gs_buf_append(&b, "\xdd\xff\xff\xff\xff", 5);
    for (int i = 0; i < 20; i++) gs_buf_append(&b, "\xc0", 1);  /* enough bytes for the outer array */
    expect_proto_no_alloc(b.data, b.len, "2^32 layers", 0);
    expect_payload_error(&b, "declares 4294967295 elements");

    /* a release with keys of the wrong width */
    hand_payload(&b, &w, 3, GS_MSG_RELEASE);
    gs_mp_write_u64(&w, 1);
    put_table(&w, "\1\0\0\0\0\0\0\0", 8);
    expect_payload_error(&b, "keys has 8 bytes, expected 0 bytes of padding (to an 8-byte boundary of the payload) and 1 entries of 16 bytes");

    gs_buf_cleanup(&b);
    proto_check_no_leaks();
}

Test(proto_msg, rejects_semantic_errors)
{
    gs_buf_t b;
    gs_mp_writer_t w;
    gs_buf_init(&b);

    /* error count != failed statuses */
    int32_t status[2] = {0, -42};
    hand_payload(&b, &w, 12, GS_MSG_TASK_DONE);
    gs_mp_write_u64(&w, 2);
    put_table(&w, "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 16);
    put_table(&w, "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 16);
    put_table(&w, status, 8);
    for (int i = 0; i < 3; i++) put_table(&w, "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 16);
    gs_mp_write_array(&w, 2);
    gs_mp_write_str(&w, "a", 1);
    gs_mp_write_str(&w, "b", 1);
    gs_mp_write_u64(&w, 0);
    for (int i = 0; i < 2; i++) put_table(&w, "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 16);
    expect_payload_error(&b, "2 error messages for 1 failed tasks");

    /* unknown role */
    hand_payload(&b, &w, 6, GS_MSG_HELLO);
    gs_mp_write_u64(&w, 1);
    gs_mp_write_u64(&w, 3);
    gs_mp_write_str(&w, "t", 1);
    gs_mp_write_str(&w, "n", 1);
    gs_mp_write_bin(&w, "", 0);
    expect_payload_error(&b, "unknown peer role 3");

    /* NUL inside a string */
    hand_payload(&b, &w, 6, GS_MSG_HELLO);
    gs_mp_write_u64(&w, 1);
    gs_mp_write_u64(&w, GS_ROLE_CLIENT);
    gs_mp_write_str(&w, "tok\0en", 6);
    gs_mp_write_str(&w, "n", 1);
    gs_mp_write_bin(&w, "", 0);
    expect_payload_error(&b, "token contains a NUL byte");

    /* task referring to a layer that is not there */
    hand_payload(&b, &w, 15, GS_MSG_GRAPH_SUBMIT);
    gs_mp_write_u64(&w, 1);
    gs_mp_write_u64(&w, 0);
    gs_mp_write_array(&w, 1);
    gs_mp_write_bin(&w, "L", 1);
    gs_mp_write_u64(&w, 1);
    put_table(&w, "\1\0\0\0", 4);
    put_table(&w, "\0\0\0\0\0\0\0\0", 8);
    put_table(&w, "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 16);
    put_table(&w, "", 0);
    put_table(&w, "\0\0\0\0\0\0\0\0", 8);
    gs_mp_write_u64(&w, 0);
    put_table(&w, "", 0);
    gs_mp_write_u64(&w, 0);
    put_table(&w, "", 0);
    gs_mp_write_array(&w, 0);
    expect_payload_error(&b, "task 0 uses layer 1 of 1");

    /* layer names: neither none nor one per layer */
    hand_payload(&b, &w, 15, GS_MSG_GRAPH_SUBMIT);
    gs_mp_write_u64(&w, 1);
    gs_mp_write_u64(&w, 0);
    gs_mp_write_array(&w, 1);
    gs_mp_write_bin(&w, "L", 1);
    gs_mp_write_u64(&w, 1);
    put_table(&w, "\0\0\0\0", 4);
    put_table(&w, "\0\0\0\0\0\0\0\0", 8);
    put_table(&w, "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 16);
    put_table(&w, "", 0);
    put_table(&w, "\0\0\0\0\0\0\0\0", 8);
    gs_mp_write_u64(&w, 0);
    put_table(&w, "", 0);
    gs_mp_write_u64(&w, 0);
    put_table(&w, "", 0);
    gs_mp_write_array(&w, 2);
    gs_mp_write_str(&w, "a", 1);
    gs_mp_write_str(&w, "b", 1);
    expect_payload_error(&b, "2 layer names for 1 layers");

    /* wrong field count, unknown type, trailing bytes, not an array, negative where unsigned */
    hand_payload(&b, &w, 3, GS_MSG_CANCEL);
    gs_mp_write_u64(&w, 1);
    gs_mp_write_u64(&w, 2);
    expect_payload_error(&b, "cancel message has 3 fields, expected 2");
    hand_payload(&b, &w, 1, 99);
    expect_payload_error(&b, "unknown message type 99");
    hand_payload(&b, &w, 1, 0);
    expect_payload_error(&b, "unknown message type 0");
    hand_payload(&b, &w, 1, GS_MSG_SHUTDOWN);
    gs_mp_write_nil(&w);
    expect_payload_error(&b, "1 trailing bytes");
    hand_payload(&b, &w, 2, GS_MSG_CANCEL);
    gs_mp_write_i64(&w, -1);
    expect_payload_error(&b, "negative integer");
    b.len = 0;
    gs_mp_writer_init(&w, &b);
    gs_mp_write_map(&w, 0);
    expect_payload_error(&b, "expected array");
    b.len = 0;
    gs_mp_writer_init(&w, &b);
    gs_mp_write_array(&w, 0);
    expect_payload_error(&b, "empty message array");
    expect_proto_no_alloc((const uint8_t *)"", 0, "empty payload", 0);

    gs_buf_cleanup(&b);
    proto_check_no_leaks();
}

/* ---- encoder ---- */

static void expect_encode_invalid(gs_msg_t *m, const char *needle)
{
    gs_buf_t b;
    gs_buf_init(&b);
    cr_assert_eq(gs_buf_append(&b, "abc", 3), GS_OK);
    cr_assert_eq(gs_msg_encode(m, &b), GS_ERR_INVALID_PARAM, "accepted; wanted '%s'", needle);
    cr_assert_eq(b.len, 3);
    cr_assert(memcmp(b.data, "abc", 3) == 0);
    cr_assert(strstr(gs_last_error(), needle) != NULL, "error '%s' does not mention '%s'", gs_last_error(), needle);
    gs_buf_cleanup(&b);
}

Test(proto_msg, encode_rejects_inconsistent_messages_and_leaves_output)
{
    gs_msg_t m;
    memset(&m, 0, sizeof m);
    m.type = 0;
    expect_encode_invalid(&m, "unknown message type 0");
    m.type = GS_MSG_TYPE_MAX;
    expect_encode_invalid(&m, "unknown message type");

    sample_msg(GS_MSG_TASK_DONE, &m);
    m.u.task_done.nerrors = 1;
    expect_encode_invalid(&m, "1 error messages for 2 failed tasks");

    sample_msg(GS_MSG_GRAPH_SUBMIT, &m);
    uint64_t bad_off[6] = {0, 2, 1, 3, 3, 5};
    m.u.graph_submit.dep_off = bad_off;
    expect_encode_invalid(&m, "dep_off decreases at task 1");
    m.u.graph_submit.dep_off = NULL;
    expect_encode_invalid(&m, "dep_off is NULL");

    sample_msg(GS_MSG_GRAPH_SUBMIT, &m);
    m.u.graph_submit.outputs = NULL;
    expect_encode_invalid(&m, "outputs is NULL");

    sample_msg(GS_MSG_HELLO, &m);
    m.u.hello.role = 0;
    expect_encode_invalid(&m, "unknown peer role");
    sample_msg(GS_MSG_HELLO, &m);
    m.u.hello.name = (gs_str_t){NULL, 3};
    expect_encode_invalid(&m, "name has 3 bytes but no data");
    m.u.hello.name = (gs_str_t){(const uint8_t *)"a\0b", 3};
    expect_encode_invalid(&m, "name contains a NUL byte");
    proto_check_no_leaks();
}

Test(proto_msg, encode_accepts_empty_graph_with_null_tables)
{
    gs_msg_t m, d;
    gs_buf_t b;
    memset(&m, 0, sizeof m);
    m.type = GS_MSG_GRAPH_SUBMIT;
    m.u.graph_submit.client_ref = 3;
    gs_buf_init(&b);
    cr_assert_eq(gs_msg_encode(&m, &b), GS_OK, "%s", gs_last_error());
    cr_assert_eq(gs_msg_decode(b.data + 4, b.len - 4, &d), GS_OK, "%s", gs_last_error());
    cr_assert_eq(d.u.graph_submit.ntasks, 0);
    cr_assert_not_null(d.u.graph_submit.dep_off);
    cr_assert_eq(d.u.graph_submit.dep_off[0], 0);
    cr_assert_eq(d.u.graph_submit.client_ref, 3);
    gs_msg_cleanup(&d);
    gs_buf_cleanup(&b);
    proto_check_no_leaks();
}

Test(proto_msg, encode_out_of_memory_leaves_output)
{
    for (uint32_t t = FIRST_TYPE; t <= LAST_TYPE; t++) {
        gs_msg_t m;
        sample_msg(t, &m);
        for (long k = 0;; k++) {
            gs_buf_t b;
            gs_buf_init(&b);
            cr_assert_eq(gs_buf_append(&b, "abcd", 4), GS_OK);
            uint8_t *before_data = b.data;
            (void)before_data;
            gs_alloc_fail_after(k);
            gs_status_t st = gs_msg_encode(&m, &b);
            gs_alloc_fail_after(-1);
            if (st == GS_OK) {
                cr_assert_gt(b.len, 4);
                cr_assert(memcmp(b.data, "abcd", 4) == 0);
                gs_buf_cleanup(&b);
                break;
            }
            cr_assert_eq(st, GS_ERR_NO_MEMORY, "%s k=%ld: %s", gs_msg_type_name(t), k, gs_status_name(st));
            cr_assert_eq(b.len, 4);
            cr_assert(memcmp(b.data, "abcd", 4) == 0);
            gs_buf_cleanup(&b);
            cr_assert_lt(k, 100);
        }
    }
    proto_check_no_leaks();
}

Test(proto_msg, encode_refuses_tables_beyond_4_gib)
{
    gs_msg_t m;
    gs_buf_t b;
    static const uint64_t fake = 0;
    memset(&m, 0, sizeof m);
    m.type = GS_MSG_RELEASE;
    m.u.release.n = 1ull << 31;  /* 32 GiB of keys: refused before touching them */
    m.u.release.keys = &fake;
    gs_buf_init(&b);
    cr_assert_eq(gs_msg_encode(&m, &b), GS_ERR_MSG_TOO_LARGE);
    cr_assert_eq(b.len, 0);
    m.type = GS_MSG_DATA;
    m.u.data.data = (gs_bytes_t){(const uint8_t *)&fake, (size_t)UINT32_MAX + 1};
    cr_assert_eq(gs_msg_encode(&m, &b), GS_ERR_MSG_TOO_LARGE);
    cr_assert_eq(b.len, 0);
    gs_buf_cleanup(&b);
    proto_check_no_leaks();
}

Test(proto_msg, decode_rejects_null_arguments)
{
    gs_msg_t d;
    cr_assert_eq(gs_msg_decode(NULL, 3, &d), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_msg_decode("\x91\x13", 2, NULL), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_msg_decode("\x91\x13", 2, &d), GS_OK);
    cr_assert_eq(d.type, GS_MSG_SHUTDOWN);
    cr_assert_null(d.owned);
    gs_msg_cleanup(&d);
    gs_msg_cleanup(NULL);
    proto_check_no_leaks();
}

Test(proto_msg, rejects_inconsistent_bandwidth_replicate_and_workers)
{
    gs_msg_t m;
    gs_buf_t b;
    gs_buf_init(&b);
    /* bandwidth: one path for two entries */
    sample_msg(GS_MSG_BANDWIDTH, &m);
    m.u.bandwidth.npaths = 1;
    cr_assert_eq(gs_msg_encode(&m, &b), GS_ERR_INVALID_PARAM);
    /* replicate: sources for some keys only */
    sample_msg(GS_MSG_REPLICATE, &m);
    m.u.replicate.nsrc = 2;
    cr_assert_eq(gs_msg_encode(&m, &b), GS_ERR_INVALID_PARAM);
    /* replicate without sources (client -> gsched) is fine */
    sample_msg(GS_MSG_REPLICATE, &m);
    m.u.replicate.nsrc = 0;
    m.u.replicate.from = NULL;
    m.u.replicate.nbytes = NULL;
    cr_assert_eq(gs_msg_encode(&m, &b), GS_OK, "%s", gs_last_error());
    {
        gs_msg_t d;
        cr_assert_eq(gs_msg_decode(b.data + 4, b.len - 4, &d), GS_OK, "%s", gs_last_error());
        cr_assert_eq(d.u.replicate.nsrc, 0);
        cr_assert_null(d.u.replicate.from);
        assert_msg_eq(&m, &d);
        gs_msg_cleanup(&d);
    }
    b.len = 0;
    /* workers: a string array shorter than the tables */
    sample_msg(GS_MSG_WORKERS, &m);
    m.u.workers.naddr = 2;
    cr_assert_eq(gs_msg_encode(&m, &b), GS_ERR_INVALID_PARAM);
    cr_assert_eq(b.len, 0);
    gs_buf_cleanup(&b);
    proto_check_no_leaks();
}
