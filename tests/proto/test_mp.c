#include <criterion/criterion.h>
#include <float.h>
#include <stdint.h>
#include <string.h>

#include "common/alloc.h"
#include "proto/mp.h"
#include "samples.h"

static gs_mp_reader_t reader_of(const void *p, size_t len)
{
    gs_mp_reader_t r;
    gs_mp_reader_init(&r, p, len);
    return r;
}

Test(proto_mp, round_trips_every_kind)
{
    gs_buf_t b;
    gs_mp_writer_t w;
    gs_buf_init(&b);
    gs_mp_writer_init(&w, &b);
    gs_mp_write_array(&w, 14);
    gs_mp_write_u64(&w, 0);
    gs_mp_write_u64(&w, UINT64_MAX);
    gs_mp_write_i64(&w, -1);
    gs_mp_write_i64(&w, INT64_MIN);
    gs_mp_write_i64(&w, 300);
    gs_mp_write_f64(&w, -2.5e300);
    gs_mp_write_str(&w, "hello", 5);
    gs_mp_write_str(&w, NULL, 0);
    gs_mp_write_bin(&w, "\0\1\2", 3);
    gs_mp_write_nil(&w);
    gs_mp_write_bool(&w, 1);
    gs_mp_write_bool(&w, 0);
    gs_mp_write_map(&w, 1);
    gs_mp_write_str(&w, "k", 1);
    gs_mp_write_u64(&w, 70000);
    char big[70000];
    memset(big, 'x', sizeof big);
    gs_mp_write_str(&w, big, sizeof big);  /* str32 */
    cr_assert_eq(w.err, GS_OK);

    gs_mp_reader_t r = reader_of(b.data, b.len);
    uint32_t n, len;
    uint64_t u;
    int64_t i;
    double d;
    int v;
    const char *s;
    const uint8_t *p;
    cr_assert(gs_mp_read_array(&r, &n));
    cr_assert_eq(n, 14);
    cr_assert(gs_mp_read_u64(&r, &u) && u == 0);
    cr_assert(gs_mp_read_u64(&r, &u) && u == UINT64_MAX);
    cr_assert(gs_mp_read_i64(&r, &i) && i == -1);
    cr_assert(gs_mp_read_i64(&r, &i) && i == INT64_MIN);
    cr_assert(gs_mp_read_i64(&r, &i) && i == 300);
    cr_assert(gs_mp_read_f64(&r, &d) && d == -2.5e300);
    cr_assert(gs_mp_read_str(&r, &s, &len) && len == 5 && memcmp(s, "hello", 5) == 0);
    cr_assert(gs_mp_read_str(&r, &s, &len) && len == 0);
    cr_assert(gs_mp_read_bin(&r, &p, &len) && len == 3 && p[2] == 2);
    cr_assert(gs_mp_read_nil(&r));
    cr_assert(gs_mp_read_bool(&r, &v) && v == 1);
    cr_assert(gs_mp_read_bool(&r, &v) && v == 0);
    cr_assert(gs_mp_read_map(&r, &n) && n == 1);
    cr_assert(gs_mp_skip(&r));
    cr_assert(gs_mp_read_u64(&r, &u) && u == 70000);
    cr_assert(gs_mp_read_str(&r, &s, &len) && len == sizeof big && s[69999] == 'x');
    cr_assert(gs_mp_at_end(&r));
    cr_assert_eq(r.err, GS_OK);

    r = reader_of(b.data, b.len);
    cr_assert(gs_mp_skip(&r));
    cr_assert(gs_mp_at_end(&r));
    gs_buf_cleanup(&b);
    proto_check_no_leaks();
}

Test(proto_mp, reads_foreign_encodings)
{
    /* int8/16/32/64 with sign, uint8..64, float32, fixext/ext for skip */
    static const uint8_t data[] = {
        0xd0, 0x80,                                      /* int8 -128 */
        0xd1, 0xff, 0x7f,                                /* int16 -129 */
        0xd2, 0x80, 0x00, 0x00, 0x00,                    /* int32 INT32_MIN */
        0xd3, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x05, /* int64 5 */
        0xcc, 0xff,                                      /* uint8 255 */
        0xcd, 0x01, 0x00,                                /* uint16 256 */
        0xca, 0x3f, 0xc0, 0x00, 0x00,                    /* float32 1.5 */
        0xd4, 0x01, 0xaa,                                /* fixext1 */
        0xc7, 0x02, 0x05, 0x01, 0x02,                    /* ext8 len 2 */
        0xe0,                                            /* -32 */
    };
    gs_mp_reader_t r = reader_of(data, sizeof data);
    int64_t i;
    int32_t i32;
    uint32_t u32;
    double d;
    cr_assert(gs_mp_read_i64(&r, &i) && i == -128);
    cr_assert(gs_mp_read_i32(&r, &i32) && i32 == -129);
    cr_assert(gs_mp_read_i32(&r, &i32) && i32 == INT32_MIN);
    cr_assert(gs_mp_read_u32(&r, &u32) && u32 == 5);
    cr_assert(gs_mp_read_f64(&r, &d) && d == 255.0);
    cr_assert(gs_mp_read_u32(&r, &u32) && u32 == 256);
    cr_assert(gs_mp_read_f64(&r, &d) && d == 1.5);
    cr_assert(gs_mp_skip(&r));
    cr_assert(gs_mp_skip(&r));
    cr_assert(gs_mp_read_f64(&r, &d) && d == -32.0);
    cr_assert(gs_mp_at_end(&r));
    proto_check_no_leaks();
}

static gs_mp_reader_t one_int(gs_buf_t *b, int is_signed, uint64_t v)
{
    gs_mp_writer_t w;
    b->len = 0;
    gs_mp_writer_init(&w, b);
    if (is_signed) {
        gs_mp_write_i64(&w, (int64_t)v);
    } else {
        gs_mp_write_u64(&w, v);
    }
    cr_assert_eq(w.err, GS_OK);
    return reader_of(b->data, b->len);
}

Test(proto_mp, range_checks_integers)
{
    gs_buf_t b;
    gs_mp_reader_t r;
    uint32_t u32 = 7;
    int32_t i32 = 7;
    uint64_t u64 = 7;
    int64_t i64 = 7;
    gs_buf_init(&b);

    r = one_int(&b, 0, (uint64_t)UINT32_MAX + 1);
    cr_assert_not(gs_mp_read_u32(&r, &u32));
    cr_assert_eq(r.err, GS_ERR_PROTO);
    cr_assert_eq(r.p, r.start, "error offset points at the integer");
    cr_assert(strstr(gs_last_error(), "UINT32_MAX") != NULL, "%s", gs_last_error());
    cr_assert_eq(u32, 7);
    r = one_int(&b, 0, UINT32_MAX);
    cr_assert(gs_mp_read_u32(&r, &u32) && u32 == UINT32_MAX);

    r = one_int(&b, 1, (uint64_t)((int64_t)INT32_MIN - 1));
    cr_assert_not(gs_mp_read_i32(&r, &i32));
    cr_assert_eq(i32, 7);
    r = one_int(&b, 1, (uint64_t)((int64_t)INT32_MIN - 1));
    cr_assert(gs_mp_read_i64(&r, &i64) && i64 == (int64_t)INT32_MIN - 1);
    r = one_int(&b, 0, (uint64_t)INT32_MAX + 1);
    cr_assert_not(gs_mp_read_i32(&r, &i32));
    r = one_int(&b, 0, (uint64_t)INT32_MAX);
    cr_assert(gs_mp_read_i32(&r, &i32) && i32 == INT32_MAX);

    r = one_int(&b, 1, (uint64_t)-1);
    cr_assert_not(gs_mp_read_u64(&r, &u64));
    cr_assert(strstr(gs_last_error(), "negative") != NULL);
    cr_assert_eq(u64, 7);
    r = one_int(&b, 1, (uint64_t)-1);
    cr_assert_not(gs_mp_read_u32(&r, &u32));

    i64 = 7;
    r = one_int(&b, 0, (uint64_t)INT64_MAX + 1);
    cr_assert_not(gs_mp_read_i64(&r, &i64));
    cr_assert(strstr(gs_last_error(), "INT64_MAX") != NULL, "%s", gs_last_error());
    cr_assert_eq(i64, 7);

    /* floats are not integers */
    gs_mp_writer_t w;
    b.len = 0;
    gs_mp_writer_init(&w, &b);
    gs_mp_write_f64(&w, 1.0);
    r = reader_of(b.data, b.len);
    cr_assert_not(gs_mp_read_u64(&r, &u64));
    gs_buf_cleanup(&b);
    proto_check_no_leaks();
}

Test(proto_mp, latches_first_error)
{
    static const uint8_t data[] = {0xc0, 0x01};
    gs_mp_reader_t r = reader_of(data, sizeof data);
    uint64_t u = 9;
    cr_assert_not(gs_mp_read_u64(&r, &u));  /* nil is not an integer */
    cr_assert_eq(r.err, GS_ERR_PROTO);
    cr_assert(strstr(gs_last_error(), "expected unsigned integer at offset 0") != NULL, "%s", gs_last_error());
    cr_assert_not(gs_mp_read_nil(&r));  /* would succeed, but the error is latched */
    cr_assert_not(gs_mp_skip(&r));
    cr_assert_not(gs_mp_at_end(&r));
    cr_assert_eq(u, 9);
    cr_assert_eq(gs_mp_fail(&r, "later"), 0);
    cr_assert(strstr(gs_last_error(), "later") == NULL, "first message kept");
    gs_mp_reader_t r2 = reader_of(data, sizeof data);
    cr_assert_eq(gs_mp_fail(&r2, "count does not match"), 0);
    cr_assert_eq(r2.err, GS_ERR_PROTO);
    cr_assert(strstr(gs_last_error(), "count does not match at offset 0") != NULL, "%s", gs_last_error());
    proto_check_no_leaks();
}

Test(proto_mp, rejects_declared_lengths_beyond_the_data)
{
    static const struct {
        uint8_t bytes[9];
        size_t len;
        int kind;  /* 0 array, 1 map, 2 str, 3 bin */
    } cases[] = {
        {{0xdd, 0xff, 0xff, 0xff, 0xff}, 5, 0},
        {{0xdc, 0x00, 0x03, 0x01, 0x02}, 5, 0},  /* 3 elements, 2 bytes left */
        {{0x93, 0x01}, 2, 0},                    /* fixarray: same check */
        {{0xdf, 0xff, 0xff, 0xff, 0xff}, 5, 1},
        {{0x82, 0x01, 0x02, 0x03}, 4, 1},        /* 2 entries = 4 objects, 3 bytes left */
        {{0xdb, 0xff, 0xff, 0xff, 0xff, 'a'}, 6, 2},
        {{0xd9, 0x05, 'a', 'b'}, 4, 2},
        {{0xa5, 'a'}, 2, 2},
        {{0xc6, 0xff, 0xff, 0xff, 0xff}, 5, 3},
        {{0xc4, 0x02, 0x00}, 3, 3},
        {{0xc5, 0x00}, 2, 3},                    /* truncated header */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        gs_mp_reader_t r = reader_of(cases[i].bytes, cases[i].len);
        uint32_t n = 5;
        const char *s = NULL;
        const uint8_t *p = NULL;
        int ok;
        switch (cases[i].kind) {
        case 0: ok = gs_mp_read_array(&r, &n); break;
        case 1: ok = gs_mp_read_map(&r, &n); break;
        case 2: ok = gs_mp_read_str(&r, &s, &n); break;
        default: ok = gs_mp_read_bin(&r, &p, &n); break;
        }
        cr_assert_not(ok, "case %zu accepted", i);
        cr_assert_eq(r.err, GS_ERR_PROTO);
        cr_assert_eq(n, 5, "case %zu wrote its output", i);
        cr_assert_eq(r.p, r.start, "case %zu consumed bytes", i);
        r = reader_of(cases[i].bytes, cases[i].len);
        cr_assert_not(gs_mp_skip(&r), "case %zu skipped", i);
    }
    /* ext32 declaring 4 GiB */
    static const uint8_t ext[] = {0xc9, 0xff, 0xff, 0xff, 0xff, 0x01, 0x00};
    gs_mp_reader_t r = reader_of(ext, sizeof ext);
    cr_assert_not(gs_mp_skip(&r));
    cr_assert(strstr(gs_last_error(), "declares 4294967295 bytes") != NULL, "%s", gs_last_error());
    proto_check_no_leaks();
}

/* The integer reads' fast forms (positive fixint, uint 8/16/32) and the general path agree, at
 * every boundary, and a truncated uint header fails the same way whichever path reads it. */
Test(proto_mp, reads_unsigned_widths_at_their_boundaries_and_rejects_them_truncated)
{
    static const uint64_t vals[] = {0, 1, 127, 128, 255, 256, 65535, 65536, UINT32_MAX,
                                    (uint64_t)UINT32_MAX + 1, (uint64_t)INT64_MAX};
    gs_buf_t b;
    gs_buf_init(&b);
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        gs_mp_reader_t r = one_int(&b, 0, vals[i]);
        int64_t v = -1;
        uint64_t u = 0;
        cr_assert(gs_mp_read_i64(&r, &v), "value %llu", (unsigned long long)vals[i]);
        cr_assert_eq((uint64_t)v, vals[i]);
        cr_assert(gs_mp_at_end(&r));
        r = one_int(&b, 0, vals[i]);
        cr_assert(gs_mp_read_u64(&r, &u) && u == vals[i]);
        /* every truncation of the encoding fails with a protocol error and consumes nothing */
        for (size_t cut = 0; cut < b.len; cut++) {
            gs_mp_reader_t t = reader_of(b.data, cut);
            cr_assert_not(gs_mp_read_i64(&t, &v), "value %llu cut at %zu", (unsigned long long)vals[i], cut);
            cr_assert_eq(t.err, GS_ERR_PROTO);
            cr_assert_eq(t.p, b.data);
        }
    }
    gs_buf_cleanup(&b);
    proto_check_no_leaks();
}

Test(proto_mp, rejects_truncated_headers_of_every_type)
{
    static const uint8_t types[] = {0xc4, 0xc5, 0xc6, 0xc7, 0xc8, 0xc9, 0xca, 0xcb, 0xcc, 0xcd, 0xce, 0xcf,
                                    0xd0, 0xd1, 0xd2, 0xd3, 0xd4, 0xd5, 0xd6, 0xd7, 0xd8, 0xd9, 0xda, 0xdb,
                                    0xdc, 0xdd, 0xde, 0xdf};
    for (size_t i = 0; i < sizeof types; i++) {
        uint8_t one = types[i];
        gs_mp_reader_t r = reader_of(&one, 1);
        cr_assert_not(gs_mp_skip(&r), "type 0x%02x with no argument skipped", one);
        cr_assert_eq(r.err, GS_ERR_PROTO);
    }
    uint8_t c1 = 0xc1;
    gs_mp_reader_t r = reader_of(&c1, 1);
    cr_assert_not(gs_mp_skip(&r));
    cr_assert(strstr(gs_last_error(), "0xc1") != NULL);
    r = reader_of(NULL, 0);
    cr_assert_not(gs_mp_skip(&r));
    cr_assert(strstr(gs_last_error(), "end of data") != NULL);
    r = reader_of(NULL, 0);
    cr_assert(gs_mp_at_end(&r));
    proto_check_no_leaks();
}

Test(proto_mp, skip_limits_nesting_depth)
{
    uint8_t deep[100000];
    memset(deep, 0x91, sizeof deep);  /* [[[[...]]]] with no end: must fail, not overflow the stack */
    gs_mp_reader_t r = reader_of(deep, sizeof deep);
    cr_assert_not(gs_mp_skip(&r));
    cr_assert(strstr(gs_last_error(), "nesting") != NULL, "%s", gs_last_error());

    /* 32 levels of containers are fine, 33 are not */
    uint8_t ok[33];
    memset(ok, 0x91, 32);
    ok[32] = 0xc0;
    r = reader_of(ok, 33);
    cr_assert(gs_mp_skip(&r), "%s", gs_last_error());
    cr_assert(gs_mp_at_end(&r));
    uint8_t bad[34];
    memset(bad, 0x81, 33);  /* maps too */
    bad[33] = 0xc0;
    r = reader_of(bad, 34);
    cr_assert_not(gs_mp_skip(&r));

    /* wide is fine: one array of 60000 nils */
    static uint8_t wide[5 + 60000];
    wide[0] = 0xdd;
    wide[1] = 0;
    wide[2] = 0;
    wide[3] = 0xea;
    wide[4] = 0x60;
    memset(wide + 5, 0xc0, 60000);
    r = reader_of(wide, sizeof wide);
    cr_assert(gs_mp_skip(&r));
    cr_assert(gs_mp_at_end(&r));
    proto_check_no_leaks();
}

Test(proto_mp, writer_latches_out_of_memory_and_size_limits)
{
    gs_buf_t b;
    gs_mp_writer_t w;
    gs_buf_init(&b);
    gs_mp_writer_init(&w, &b);
    gs_alloc_fail_after(0);
    gs_mp_write_u64(&w, 5);
    gs_alloc_fail_after(-1);
    cr_assert_eq(w.err, GS_ERR_NO_MEMORY);
    gs_mp_write_u64(&w, 6);  /* latched: nothing more is written */
    cr_assert_eq(b.len, 0);
    gs_buf_cleanup(&b);

    gs_mp_writer_init(&w, &b);
    gs_mp_write_bin(&w, NULL, (size_t)UINT32_MAX + 1);  /* refused before reading the data */
    cr_assert_eq(w.err, GS_ERR_MSG_TOO_LARGE);
    gs_mp_writer_init(&w, &b);
    gs_mp_write_str(&w, NULL, (size_t)UINT32_MAX + 1);
    cr_assert_eq(w.err, GS_ERR_MSG_TOO_LARGE);
    cr_assert_eq(b.len, 0);
    gs_buf_cleanup(&b);
    proto_check_no_leaks();
}

Test(proto_mp, survives_random_bytes)
{
    uint64_t s = 1;
    uint8_t buf[32];
    for (int iter = 0; iter < 100000; iter++) {
        for (size_t i = 0; i < sizeof buf; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            buf[i] = (uint8_t)(s >> 56);
        }
        size_t len = (size_t)(s % (sizeof buf + 1));
        gs_mp_reader_t r = reader_of(buf, len);
        while (r.err == GS_OK && !gs_mp_at_end(&r)) {
            const uint8_t *before = r.p;
            if (!gs_mp_skip(&r)) break;
            cr_assert_gt(r.p, before);
            cr_assert_leq(r.p, r.end);
        }
        cr_assert_leq(r.p, r.end);
    }
    proto_check_no_leaks();
}

Test(proto_mp, bulk_i64s_match_one_by_one_at_every_width_boundary)
{
    static const int64_t edges[] = {0, 1, 31, 32, 127, 128, 255, 256, 65535, 65536,
                                    INT64_C(4294967295), INT64_C(4294967296), INT64_MAX,
                                    -1, -31, -32, -33, -127, -128, -129, -32767, -32768,
                                    -32769, INT64_C(-2147483647), INT64_C(-2147483648),
                                    INT64_C(-2147483649), INT64_MIN};
    enum { N = sizeof(edges) / sizeof(edges[0]) };
    int64_t v[3 * N];
    gs_buf_t one, bulk;
    gs_mp_writer_t w1, w2;
    for (int i = 0; i < N; i++) {
        v[3 * i] = edges[i];
        v[3 * i + 1] = edges[i] == INT64_MIN ? edges[i] : edges[i] - 1;
        v[3 * i + 2] = edges[i] == INT64_MAX ? edges[i] : edges[i] + 1;
    }
    gs_buf_init(&one);
    gs_buf_init(&bulk);
    gs_mp_writer_init(&w1, &one);
    gs_mp_writer_init(&w2, &bulk);
    for (int i = 0; i < 3 * N; i++) gs_mp_write_i64(&w1, v[i]);
    gs_mp_write_i64s(&w2, v, 0);
    cr_assert_eq(bulk.len, 0);
    gs_mp_write_i64s(&w2, v, 5);
    gs_mp_write_i64s(&w2, v + 5, 3 * N - 5);
    cr_assert_eq(w1.err, GS_OK);
    cr_assert_eq(w2.err, GS_OK);
    cr_assert_eq(bulk.len, one.len);
    cr_assert(memcmp(bulk.data, one.data, one.len) == 0, "bulk encoding differs");
    gs_buf_cleanup(&one);
    gs_buf_cleanup(&bulk);
}
