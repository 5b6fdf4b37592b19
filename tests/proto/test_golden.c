/* The wire format pinned: golden_frames.hex holds, one line per message type ("<type> <hex>"), the
 * frame of tests/proto's sample of that type as encoded when the format was fixed. The encoder
 * must reproduce those bytes exactly, and the decoder must turn them back into the same message.
 * Regenerate (only when the protocol is deliberately versioned): GS_GOLDEN_WRITE=1 test_proto
 * --filter 'proto_golden/encoder*' rewrites the file next to this source. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/msg.h"
#include "samples.h"

#ifndef GS_PROTO_GOLDEN_PATH
#error "GS_PROTO_GOLDEN_PATH must name tests/proto/golden_frames.hex"
#endif

static void encode_sample(uint32_t type, gs_buf_t *out)
{
    gs_buf_init(out);
    sample_frame(type, out);
}

static void write_golden(void)
{
    FILE *f = fopen(GS_PROTO_GOLDEN_PATH, "w");
    cr_assert_not_null(f, "cannot write %s", GS_PROTO_GOLDEN_PATH);
    for (uint32_t t = GS_MSG_HELLO; t < GS_MSG_TYPE_MAX; t++) {
        gs_buf_t b;
        encode_sample(t, &b);
        fprintf(f, "%u ", t);
        for (size_t i = 0; i < b.len; i++) fprintf(f, "%02x", b.data[i]);
        fputc('\n', f);
        gs_buf_cleanup(&b);
    }
    fclose(f);
}

static int hex_nibble(int c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* The golden frame of @a type (malloc'd, *len_p bytes); asserts it is in the file. */
static uint8_t *read_golden(uint32_t type, size_t *len_p)
{
    FILE *f = fopen(GS_PROTO_GOLDEN_PATH, "r");
    uint8_t *bytes = NULL;
    unsigned t;
    cr_assert_not_null(f, "cannot read %s", GS_PROTO_GOLDEN_PATH);
    while (fscanf(f, "%u ", &t) == 1) {
        size_t n = 0, cap = 64;
        int hi, lo, c;
        uint8_t *buf = malloc(cap);
        while ((c = fgetc(f)) != EOF && c != '\n') {
            hi = hex_nibble(c);
            lo = hex_nibble(fgetc(f));
            cr_assert(hi >= 0 && lo >= 0, "bad hex in the golden line of type %u", t);
            if (n == cap) buf = realloc(buf, cap *= 2);
            buf[n++] = (uint8_t)(hi << 4 | lo);
        }
        if (t == type) {
            bytes = buf;
            *len_p = n;
            break;
        }
        free(buf);
    }
    fclose(f);
    cr_assert_not_null(bytes, "no golden frame for %s (type %u)", gs_msg_type_name(type), type);
    return bytes;
}

Test(proto_golden, encoder_reproduces_and_decoder_round_trips_every_golden_frame)
{
    if (getenv("GS_GOLDEN_WRITE") != NULL) write_golden();
    for (uint32_t t = GS_MSG_HELLO; t < GS_MSG_TYPE_MAX; t++) {
        size_t glen = 0;
        uint8_t *golden = read_golden(t, &glen);
        gs_buf_t b, again;
        gs_msg_t sample, decoded;

        encode_sample(t, &b);
        cr_assert_eq(b.len, glen, "%s: encoded %zu bytes, golden %zu", gs_msg_type_name(t), b.len, glen);
        cr_assert(memcmp(b.data, golden, glen) == 0, "%s: encoded bytes differ from the golden frame",
                  gs_msg_type_name(t));

        cr_assert_eq(gs_msg_decode(golden + GS_PROTO_FRAME_HEADER, glen - GS_PROTO_FRAME_HEADER, &decoded),
                     GS_OK, "%s: %s", gs_msg_type_name(t), gs_last_error());
        sample_msg(t, &sample);
        assert_msg_eq(&sample, &decoded);
        gs_buf_init(&again);
        cr_assert_eq(gs_msg_encode(&decoded, &again), GS_OK, "%s: %s", gs_msg_type_name(t), gs_last_error());
        cr_assert(again.len == glen && memcmp(again.data, golden, glen) == 0,
                  "%s: the decoded golden frame re-encodes differently", gs_msg_type_name(t));

        gs_msg_cleanup(&decoded);
        gs_buf_cleanup(&again);
        gs_buf_cleanup(&b);
        free(golden);
    }
    proto_check_no_leaks();
}
