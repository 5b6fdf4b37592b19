/* The wire format pinned. Both files hold one line per message type ("<type> <hex frame>"):
 *   golden_frames.hex   frames of the hand-written samples, encoded by the codec that preceded the
 *                       schema table (proto/msg_schema.h); the table-derived codec was checked
 *                       against them field by field. Never regenerated: every frame of a type
 *                       without integer tables must decode and re-encode to exactly the same
 *                       bytes; the others predate protocol version 3 (tables padded to an 8-byte
 *                       boundary) and must be refused as malformed.
 *   golden_samples.hex  frames of the table-derived samples (tests/proto/samples.c): the encoder
 *                       must reproduce them exactly and the decoder turn them back into the sample.
 *                       Values are seeded by field names, so reordering or retyping fields shows.
 * Regenerate golden_samples.hex (when the protocol is deliberately versioned, or the sample
 * generator changes): GS_GOLDEN_WRITE=1 test_proto --filter 'proto_golden/samples*'. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/msg.h"
#include "proto/msg_codec.h"
#include "samples.h"

#ifndef GS_PROTO_GOLDEN_DIR
#error "GS_PROTO_GOLDEN_DIR must name tests/proto"
#endif

static void encode_sample(uint32_t type, gs_buf_t *out)
{
    gs_buf_init(out);
    sample_frame(type, out);
}

#define GOLDEN_FRAMES GS_PROTO_GOLDEN_DIR "/golden_frames.hex"
#define GOLDEN_SAMPLES GS_PROTO_GOLDEN_DIR "/golden_samples.hex"

static void write_golden(const char *path)
{
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "cannot write %s", path);
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
static uint8_t *read_golden(const char *path, uint32_t type, size_t *len_p)
{
    FILE *f = fopen(path, "r");
    uint8_t *bytes = NULL;
    unsigned t;
    cr_assert_not_null(f, "cannot read %s", path);
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

/* The golden frame of @a type decodes and re-encodes to the same bytes; returns it decoded. */
static void decode_reencode(const uint8_t *golden, size_t glen, uint32_t type, gs_msg_t *decoded)
{
    gs_buf_t again;
    cr_assert_eq(gs_msg_decode(golden + GS_PROTO_FRAME_HEADER, glen - GS_PROTO_FRAME_HEADER, decoded), GS_OK,
                 "%s: %s", gs_msg_type_name(type), gs_last_error());
    cr_assert_eq(decoded->type, type);
    gs_buf_init(&again);
    cr_assert_eq(gs_msg_encode(decoded, &again), GS_OK, "%s: %s", gs_msg_type_name(type), gs_last_error());
    cr_assert(again.len == glen && memcmp(again.data, golden, glen) == 0,
              "%s: the decoded golden frame re-encodes differently", gs_msg_type_name(type));
    gs_buf_cleanup(&again);
}

/* Whether messages of @a type carry integer tables (TAB, CSR, DTAB). */
static int has_tables(uint32_t type)
{
    const gs__msg_desc_t *d = gs__msg_desc(type);
    cr_assert_not_null(d);
    for (unsigned i = 0; i < d->nfields; i++) {
        gs__fkind_t k = d->fields[i].kind;
        if (k == GS__F_TAB || k == GS__F_CSR || k == GS__F_DTAB) return 1;
    }
    return 0;
}

Test(proto_golden, frames_of_the_codec_before_the_table_decode_and_reencode_identically)
{
    unsigned nplain = 0, ntables = 0;
    for (uint32_t t = GS_MSG_HELLO; t < GS_MSG_TYPE_MAX; t++) {
        size_t glen = 0;
        uint8_t *golden = read_golden(GOLDEN_FRAMES, t, &glen);
        gs_msg_t decoded;
        if (has_tables(t)) {
            /* version 2 tables: unpadded, so not at an 8-byte boundary of the payload */
            cr_assert_eq(gs_msg_decode(golden + GS_PROTO_FRAME_HEADER, glen - GS_PROTO_FRAME_HEADER, &decoded),
                         GS_ERR_PROTO, "%s: a version 2 frame was accepted", gs_msg_type_name(t));
            cr_assert(strstr(gs_last_error(), "of padding (to an 8-byte boundary of the payload)") != NULL,
                      "%s: %s", gs_msg_type_name(t), gs_last_error());
            ntables++;
        } else {
            decode_reencode(golden, glen, t, &decoded);
            gs_msg_cleanup(&decoded);
            nplain++;
        }
        free(golden);
    }
    cr_assert_gt(nplain, 0);
    cr_assert_gt(ntables, 0);
    proto_check_no_leaks();
}

Test(proto_golden, samples_encode_to_their_golden_frames_and_decode_back)
{
    if (getenv("GS_GOLDEN_WRITE") != NULL) write_golden(GOLDEN_SAMPLES);
    for (uint32_t t = GS_MSG_HELLO; t < GS_MSG_TYPE_MAX; t++) {
        size_t glen = 0;
        uint8_t *golden = read_golden(GOLDEN_SAMPLES, t, &glen);
        gs_buf_t b;
        gs_msg_t sample, decoded;

        encode_sample(t, &b);
        cr_assert_eq(b.len, glen, "%s: encoded %zu bytes, golden %zu", gs_msg_type_name(t), b.len, glen);
        cr_assert(memcmp(b.data, golden, glen) == 0, "%s: encoded bytes differ from the golden frame",
                  gs_msg_type_name(t));
        decode_reencode(golden, glen, t, &decoded);
        sample_msg(t, &sample);
        assert_msg_eq(&sample, &decoded);
        gs_msg_cleanup(&decoded);
        gs_buf_cleanup(&b);
        free(golden);
    }
    proto_check_no_leaks();
}
