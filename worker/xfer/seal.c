/* Sealed active messages: proof of cluster membership on every worker-to-worker message.
 *
 * gsched draws a data-plane key at start and hands it only to workers that passed the
 * registration handshake (WELCOME, masked with the token: common/auth.h). Every active message
 * a worker sends a peer (FETCH_REQ, IPC_REQ, IPC_RELEASE, DATA, DATA_PART, IPC_GRANT) carries
 * a trailer after its header:
 *
 *     sender id (u64 LE) | receiver id (u64 LE) | counter (u64 LE) | HMAC-SHA256 (32 bytes)
 *
 * the HMAC, keyed by the data-plane key, covering the AM id, the header before the trailer and
 * the three numbers. The receiver serves or accepts the message only when the MAC is right, the
 * receiver id is its own, the sender is a live peer gsched announced (PEERS), and the counter
 * was not seen before from that sender (a window of GS__SEAL_WINDOW counters tolerates UCX
 * reordering). Anything else is dropped without an answer, counted in the worker's stats
 * (requests_refused) and logged at most once a second. The seal does not cover payloads (chunk
 * bytes, the IPC host key): a peer without the key cannot get a header accepted, so cannot
 * inject them, but bytes altered on the way would pass. With the payload MAC on (--payload-mac,
 * default when the cluster has a token) chunk bytes carry their own GMAC (gs__wpmac_tag below,
 * its counter and tag inside the sealed header), checked by the requester before the chunk is
 * used; bytes UCX moves device-to-device and CUDA IPC copies are trusted (gs_worker_params_t).
 * The ids are gsched's (WELCOME, PEERS): a worker cannot be reached, nor answered, under an id
 * gsched did not give it, whatever UCX address it presents. */
#include "worker/xfer/xfer_int.h"

#include "common/time.h"

#include <inttypes.h>
#include <string.h>

#define GS__SEAL_LOG_NS 1000000000ull   /* refusals are logged at most once per second */

static void gs__seal_put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t gs__seal_get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

gs_status_t gs__xfer_set_key(gs_worker_t *w, const uint8_t *key)
{
    gs_auth_mac_t *m;
    gs_auth_pmac_t *pm = NULL;
    gs_status_t st = gs_auth_mac_create(key, GS_AUTH_KEY_BYTES, &m);
    if (st != GS_OK) return st;
    if (w->xfer->payload_mac && (st = gs_auth_pmac_create(key, &pm)) != GS_OK) {
        gs_auth_mac_destroy(m);
        return st;
    }
    gs_auth_mac_destroy(w->xfer->seal);
    w->xfer->seal = m;
    gs_auth_pmac_destroy(w->xfer->pmac);
    w->xfer->pmac = pm;
    return GS_OK;
}

/* ---------------------------------------------------------------- payload MACs
 * The tag covers the answer it belongs to (request id, graph, task, offset and total size, u64
 * LE each) and the bytes, under IV = sender id || counter; counter and tag travel in the sealed
 * header, so they cannot be changed either. */

static gs_status_t gs__wpmac(gs_worker_t *w, uint64_t sender, const uint64_t bind[5], const void *data,
                             size_t len, uint64_t counter, uint8_t *tag)
{
    uint8_t iv[GS_AUTH_PMAC_IV_BYTES], b[40];
    gs_auth_part_t parts[2];
    gs_status_t st;
    if (w->xfer->pmac == NULL) return gs_error_set(GS_ERR_AUTH, "no data-plane key yet (not welcomed by gsched)");
    if ((st = gs_auth_pmac_iv(sender, counter, iv)) != GS_OK) return st;
    for (int i = 0; i < 5; i++) gs__seal_put64(b + 8 * i, bind[i]);
    parts[0] = (gs_auth_part_t){b, sizeof b};
    parts[1] = (gs_auth_part_t){data, len};
    return gs_auth_pmac_compute(w->xfer->pmac, iv, parts, 2, tag);
}

gs_status_t gs__wpmac_tag(gs_worker_t *w, const uint64_t bind[5], const void *data, size_t len,
                          uint64_t *counter_p, uint8_t *tag)
{
    uint64_t c = ++w->xfer->pmac_counter;
    gs_status_t st = gs__wpmac(w, w->id, bind, data, len, c, tag);
    if (st == GS_OK) *counter_p = c;
    return st;
}

int gs__wpmac_check(gs_worker_t *w, uint64_t sender, const uint64_t bind[5], const void *data, size_t len,
                    uint64_t counter, const uint8_t *tag)
{
    uint8_t want[GS_AUTH_PMAC_TAG_BYTES];
    if (gs__wpmac(w, sender, bind, data, len, counter, want) != GS_OK) return 0;
    return gs_auth_equal(want, tag, sizeof want);
}

static gs_status_t gs__seal_mac(gs_worker_t *w, unsigned am_id, const void *hdr, size_t len, const uint8_t *ids,
                                uint8_t mac[GS_AUTH_MAC_BYTES])
{
    uint8_t id4[4];
    gs_auth_part_t parts[3];
    for (int i = 0; i < 4; i++) id4[i] = (uint8_t)(am_id >> (8 * i));
    parts[0] = (gs_auth_part_t){id4, sizeof id4};
    parts[1] = (gs_auth_part_t){hdr, len};
    parts[2] = (gs_auth_part_t){ids, 24};
    return gs_auth_mac_compute(w->xfer->seal, parts, 3, mac);
}

gs_status_t gs__wseal(gs_worker_t *w, unsigned am_id, gs_wsend_t *s)
{
    uint8_t tr[GS__SEAL_TRAILER];
    uint64_t v;
    gs_wpeer_t *p;
    gs_status_t st;

    if (w->xfer->seal == NULL) return gs_error_set(GS_ERR_AUTH, "no data-plane key yet (not welcomed by gsched)");
    if (!gs_u64map_get(&w->xfer->peers, s->from_worker, &v))
        return gs_error_set(GS_ERR_WORKER_LOST, "worker %" PRIu64 " is not a peer gsched announced", s->from_worker);
    p = (gs_wpeer_t *)(uintptr_t)v;
    gs__seal_put64(tr, w->id);
    gs__seal_put64(tr + 8, p->id);
    gs__seal_put64(tr + 16, ++p->tx_counter);
    st = gs__seal_mac(w, am_id, s->header.data + GS_PROTO_FRAME_HEADER, s->header.len - GS_PROTO_FRAME_HEADER, tr,
                      tr + 24);
    if (st != GS_OK) return st;
    return gs_buf_append(&s->header, tr, sizeof tr);
}

static void gs__seal_refuse(gs_worker_t *w, unsigned am_id, const char *why, uint64_t sender)
{
    uint64_t now = gs_now_ns();
    w->st.requests_refused++;
    w->xfer->refused_unlogged++;
    if (w->xfer->refuse_log_ns != 0 && now - w->xfer->refuse_log_ns < GS__SEAL_LOG_NS) return;
    GS_LOG_WARN("refused %" PRIu64 " peer message(s) since the last report; the latest (active message %u, "
                "claiming worker %" PRIu64 "): %s", w->xfer->refused_unlogged, am_id, sender, why);
    w->xfer->refused_unlogged = 0;
    w->xfer->refuse_log_ns = now;
}

/* Record counter @a c of @a p; 0 when it was seen or is older than the window. */
static int gs__seal_fresh(gs_wpeer_t *p, uint64_t c)
{
    uint64_t back;
    if (c > p->rx_top) {
        uint64_t shift = c - p->rx_top;
        if (shift >= GS__SEAL_WINDOW) {
            memset(p->rx_seen, 0, sizeof p->rx_seen);
        } else {
            /* bit i of the window is counter rx_top - i: move every bit up by shift */
            const unsigned nw = GS__SEAL_WINDOW / 64, ws = (unsigned)(shift / 64), bs = (unsigned)(shift % 64);
            for (unsigned i = nw; i-- > 0;) {
                uint64_t v = i >= ws ? p->rx_seen[i - ws] << bs : 0;
                if (bs != 0 && i >= ws + 1) v |= p->rx_seen[i - ws - 1] >> (64 - bs);
                p->rx_seen[i] = v;
            }
        }
        p->rx_top = c;
        p->rx_seen[0] |= 1u;
        return 1;
    }
    back = p->rx_top - c;
    if (c == 0 || back >= GS__SEAL_WINDOW || (p->rx_seen[back / 64] >> (back % 64)) & 1u) return 0;
    p->rx_seen[back / 64] |= 1ull << (back % 64);
    return 1;
}

int gs__wseal_open(gs_worker_t *w, unsigned am_id, const void *header, size_t *len, uint64_t *sender_p)
{
    const uint8_t *tr;
    uint8_t want[GS_AUTH_MAC_BYTES];
    uint64_t sender, receiver, counter, v;
    gs_wpeer_t *p;

    if (header == NULL || *len < GS__SEAL_TRAILER) {
        gs__seal_refuse(w, am_id, "no seal (sent without the cluster's data-plane key)", 0);
        return 0;
    }
    tr = (const uint8_t *)header + *len - GS__SEAL_TRAILER;
    sender = gs__seal_get64(tr);
    receiver = gs__seal_get64(tr + 8);
    counter = gs__seal_get64(tr + 16);
    if (w->xfer->seal == NULL) {
        gs__seal_refuse(w, am_id, "this worker has no data-plane key yet", sender);
        return 0;
    }
    if (gs__seal_mac(w, am_id, header, *len - GS__SEAL_TRAILER, tr, want) != GS_OK ||
        !gs_auth_equal(want, tr + 24, GS_AUTH_MAC_BYTES)) {
        gs__seal_refuse(w, am_id, "wrong MAC (not sealed with this cluster's data-plane key)", sender);
        return 0;
    }
    if (receiver != w->id) {
        gs__seal_refuse(w, am_id, "addressed to another worker", sender);
        return 0;
    }
    if (!gs_u64map_get(&w->xfer->peers, sender, &v)) {
        gs__seal_refuse(w, am_id, "the sender is not a live peer gsched announced", sender);
        return 0;
    }
    p = (gs_wpeer_t *)(uintptr_t)v;
    if (!gs__seal_fresh(p, counter)) {
        gs__seal_refuse(w, am_id, "replayed (its counter was seen before)", sender);
        return 0;
    }
    *len -= GS__SEAL_TRAILER;
    *sender_p = sender;
    return 1;
}

void gs__wseal_mismatch(gs_worker_t *w, unsigned am_id, uint64_t sender, const char *what)
{
    gs__seal_refuse(w, am_id, what, sender);
}
