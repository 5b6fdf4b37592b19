/* tests/fuzz/sockfuzz: a socket-level fuzz harness for running daemons (sockfuzz.c: the cluster,
 * the attackers and the checks; sockfuzz_gen.c: random messages derived from the schema table;
 * sockfuzz_net.c: sockets; /proc readings come from bench/gs-bench/proc_cpu.h). See
 * tests/fuzz/README.md. */
#ifndef GS_TESTS_SOCKFUZZ_H
#define GS_TESTS_SOCKFUZZ_H

#include "common/buf.h"
#include "proto/msg.h"
#include "samples.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/** A thread's random stream (tests/proto/samples.h's xorshift64*). */
typedef struct sf_rng {
    uint64_t s;
} sf_rng_t;

static inline uint64_t sf_rand(sf_rng_t *r)
{
    return test_rand(&r->s);
}

/** Uniform in [0, n) (n > 0). */
static inline uint64_t sf_below(sf_rng_t *r, uint64_t n)
{
    return sf_rand(r) % n;
}

/* ---- sockfuzz_gen.c ---- */

/** Append to @a out one frame holding a random message of @a type that the project's encoder
 *  accepts (every field drawn by its kind from proto/msg_schema.h: counts, widths, ids near live
 *  ones, empty and long strings and tables), so a new message type or field is fuzzed without
 *  code here. With @a mutate, some payload bytes are then flipped (the header stays exact).
 *  Returns 1, or 0 when no encodable message was drawn in a few tries (@a out unchanged). */
int sf_gen_frame(sf_rng_t *r, uint32_t type, int mutate, gs_buf_t *out);

/** Free the calling thread's generator memory (before the thread ends). */
void sf_gen_release(void);

/** Append random bytes (1 .. @a max) to @a out. */
void sf_gen_bytes(sf_rng_t *r, size_t max, gs_buf_t *out);

/* ---- sockfuzz_net.c ---- */

/** Connect to 127.0.0.1:@a port from source address @a src (NULL: any), within @a timeout_s.
 *  Returns a non-blocking socket, or -1 (errno set). */
int sf_connect(int port, const char *src, double timeout_s);
/** Send all of @a len bytes within @a timeout_s; 1 on success, 0 when the peer is gone / timeout. */
int sf_send_all(int fd, const void *p, size_t len, double timeout_s);
/** Read what is readable now, without waiting; returns 0 once the peer closed, else 1. With
 *  @a reader (may be NULL: bytes discarded), the bytes go through it and every complete frame
 *  is decoded; a decoded message of type T adds one to @a seen[T] (GS_MSG_TYPE_MAX entries). */
int sf_drain(int fd, gs_frame_reader_t *reader, uint64_t *seen);

#endif
