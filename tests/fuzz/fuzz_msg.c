/* libFuzzer target: message decoding and framing (proto/msg.h).
 *
 * Every input is used twice:
 *  1. as one payload for gs_msg_decode. Decoding is total (GS_OK, GS_ERR_PROTO, or
 *     GS_ERR_MSG_TOO_LARGE over the type's cap; no leak, no out-of-bounds access, no allocation
 *     sized by an unchecked declared length). A decoded
 *     message must encode again (the encoder accepting everything the decoder accepts is what
 *     keeps relays such as gsched's DATA and TASK_ASSIGN forwarding safe), the encoding must
 *     decode to a message that encodes to the very same bytes, and decoding it again under
 *     injected allocation failures gives GS_OK or GS_ERR_NO_MEMORY only; gs_msg_decode_borrow of
 *     an 8-byte aligned copy (tables read in place) agrees with it;
 *  2. as a byte stream fed to a gs_frame_reader in pieces of input-derived sizes, with an
 *     input-derived frame limit. Every payload the reader yields must be exactly the next frame
 *     of the stream as an independent parser sees it, GS_INPROGRESS / GS_ERR_MSG_TOO_LARGE must
 *     come exactly when that parser says so, and every yielded payload goes through step 1. */
#include "fuzz_util.h"

#include "common/alloc.h"
#include "common/buf.h"
#include "proto/msg.h"

#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint32_t fz_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void fz_check_roundtrip(const gs_msg_t *m)
{
    gs_buf_t f1, f2;
    gs_msg_t m2;
    gs_status_t st;
    const char *name = gs_msg_type_name(m->type);

    gs_buf_init(&f1);
    gs_buf_init(&f2);
    if ((st = gs_msg_encode(m, &f1)) != GS_OK)
        FZ_BUG("a decoded %s message does not encode: %s", name, gs_status_name(st));
    if (f1.len < GS_PROTO_FRAME_HEADER || fz_le32(f1.data) != f1.len - GS_PROTO_FRAME_HEADER)
        FZ_BUG("%s frame header does not announce its payload (%zu bytes)", name, f1.len);
    if ((st = gs_msg_decode(f1.data + GS_PROTO_FRAME_HEADER, f1.len - GS_PROTO_FRAME_HEADER, &m2)) != GS_OK)
        FZ_BUG("the encoding of a decoded %s message does not decode: %s", name, gs_status_name(st));
    if (m2.type != m->type) FZ_BUG("round trip turned %s into %s", name, gs_msg_type_name(m2.type));
    if ((st = gs_msg_encode(&m2, &f2)) != GS_OK)
        FZ_BUG("a re-decoded %s message does not encode: %s", name, gs_status_name(st));
    if (f1.len != f2.len || memcmp(f1.data, f2.data, f1.len) != 0)
        FZ_BUG("%s encoding is not stable across a round trip (%zu vs %zu bytes)", name, f1.len, f2.len);
    gs_msg_cleanup(&m2);
    gs_buf_cleanup(&f1);
    gs_buf_cleanup(&f2);
}

static void fz_check_alloc_failures(const uint8_t *p, size_t len, fz_rng_t *rng)
{
    gs_msg_t m;
    long k = (long)(fz_rng_next(rng) % 4);
    gs_status_t st;

    gs_alloc_fail_after(k);
    st = gs_msg_decode(p, len, &m);
    unsigned long injected = gs_alloc_injected_failures();
    gs_alloc_fail_after(-1);
    if (st == GS_OK) {
        gs_msg_cleanup(&m);
    } else if (st != GS_ERR_NO_MEMORY || injected == 0) {
        FZ_BUG("decoding a valid message with allocation %ld failing gave %s (%lu failures injected)",
               k, gs_status_name(st), injected);
    }
}

/* gs_msg_decode_borrow on an 8-byte aligned copy of the payload (tables read in place, as gsched
 * reads a large frame) must agree with gs_msg_decode: same status, and when valid a message that
 * encodes to the same bytes. */
static void fz_check_borrow(const uint8_t *p, size_t len, gs_status_t want, const gs_msg_t *owned)
{
    uint8_t *copy = gs_malloc(len > 0 ? len : 1, "fuzz aligned payload");
    gs_buf_t f1, f2;
    gs_msg_t m;
    gs_status_t st;
    if (copy == NULL) FZ_BUG("out of memory copying a payload of %zu bytes", len);
    if (len > 0) memcpy(copy, p, len);
    st = gs_msg_decode_borrow(copy, len, &m);
    if (st != want) FZ_BUG("gs_msg_decode gave %s, gs_msg_decode_borrow %s", gs_status_name(want), gs_status_name(st));
    if (st == GS_OK) {
        gs_buf_init(&f1);
        gs_buf_init(&f2);
        if (gs_msg_encode(owned, &f1) != GS_OK || gs_msg_encode(&m, &f2) != GS_OK)
            FZ_BUG("a decoded %s message does not encode", gs_msg_type_name(m.type));
        if (f1.len != f2.len || memcmp(f1.data, f2.data, f1.len) != 0)
            FZ_BUG("the borrowed and the owned %s message differ", gs_msg_type_name(m.type));
        gs_buf_cleanup(&f1);
        gs_buf_cleanup(&f2);
        gs_msg_cleanup(&m);
    }
    gs_free(copy);
}

/* Step 1 on one payload. */
static void fz_payload(const uint8_t *p, size_t len, fz_rng_t *rng)
{
    gs_msg_t m;
    gs_status_t st = gs_msg_decode(p, len, &m);
    fz_check_borrow(p, len, st, st == GS_OK ? &m : NULL);
    if (st != GS_OK) {
        if (st != GS_ERR_PROTO && st != GS_ERR_MSG_TOO_LARGE)   /* malformed, or over its type's cap */
            FZ_BUG("gs_msg_decode returned %s, not GS_ERR_PROTO or GS_ERR_MSG_TOO_LARGE", gs_status_name(st));
        return;
    }
    if (m.type < GS_MSG_HELLO || m.type >= GS_MSG_TYPE_MAX) FZ_BUG("decoded a message of type %u", m.type);
    fz_check_roundtrip(&m);
    gs_msg_cleanup(&m);
    fz_check_alloc_failures(p, len, rng);
}

/* Step 2. */
static void fz_stream(const uint8_t *data, size_t size, fz_rng_t *rng)
{
    gs_frame_reader_t r;
    uint32_t max_frame;
    size_t fed = 0, off = 0;   /* off: where the independent parser expects the next frame */
    int done = 0;

    switch (fz_rng_next(rng) % 4) {
    /* a 1 MiB limit stands in for the default (1 GiB): a frame whose header passes the limit
     * is reserved whole up front, and under ASan reserving up to 1 GiB per input would slow the
     * run ~50x; inputs are a few KiB, so no frame near either limit completes anyway (the unit
     * tests cover large frames) */
    case 0: max_frame = 1u << 20; break;
    case 1: max_frame = (uint32_t)(fz_rng_next(rng) % 64); break;
    default: max_frame = (uint32_t)(fz_rng_next(rng) % 65536); break;
    }
    gs_frame_reader_init(&r, max_frame);
    if (max_frame == 0) max_frame = GS_PROTO_DEFAULT_MAX_FRAME;

    while (!done && fed < size) {
        size_t piece, left = size - fed;
        switch (fz_rng_next(rng) % 4) {
        case 0: piece = 1 + fz_rng_next(rng) % 4; break;
        case 1: piece = 1 + fz_rng_next(rng) % 64; break;
        case 2: piece = left; break;
        default: piece = fz_rng_next(rng) % 16; break;   /* may be 0 */
        }
        if (piece > left) piece = left;
        if (gs_frame_reader_feed(&r, data + fed, piece) != GS_OK) FZ_BUG("frame reader feed failed");
        fed += piece;
        for (;;) {
            const uint8_t *payload = NULL;
            size_t plen = 0;
            gs_status_t st = gs_frame_reader_next(&r, &payload, &plen);
            size_t avail = fed - off;
            uint32_t flen = avail >= GS_PROTO_FRAME_HEADER ? fz_le32(data + off) : 0;
            int have_header = avail >= GS_PROTO_FRAME_HEADER;
            if (st == GS_OK) {
                if (!have_header || flen > max_frame || avail - GS_PROTO_FRAME_HEADER < flen)
                    FZ_BUG("frame reader yielded a payload at offset %zu where there is no complete frame", off);
                if (plen != flen || memcmp(payload, data + off + GS_PROTO_FRAME_HEADER, plen) != 0)
                    FZ_BUG("frame reader yielded the wrong payload at offset %zu (%zu bytes, frame has %u)",
                           off, plen, flen);
                off += GS_PROTO_FRAME_HEADER + (size_t)flen;
                fz_payload(payload, plen, rng);
            } else if (st == GS_INPROGRESS) {
                if (have_header && flen <= max_frame && avail - GS_PROTO_FRAME_HEADER >= flen)
                    FZ_BUG("frame reader waits for more bytes but a complete frame is at offset %zu", off);
                if (have_header && flen > max_frame)
                    FZ_BUG("frame reader waits for the rest of a %u-byte frame over its %u-byte limit",
                           flen, max_frame);
                break;
            } else if (st == GS_ERR_MSG_TOO_LARGE) {
                if (!have_header || flen <= max_frame)
                    FZ_BUG("frame reader says a frame at offset %zu is too large (header %u, limit %u)",
                           off, flen, max_frame);
                done = 1;   /* the stream is unusable from here */
                break;
            } else {
                FZ_BUG("gs_frame_reader_next returned %s", gs_status_name(st));
            }
        }
    }
    gs_frame_reader_cleanup(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_rng_t rng;
    fz_init();
    fz_rng_seed(&rng, data, size);
    fz_payload(data, size, &rng);
    fz_stream(data, size, &rng);
    return 0;
}
