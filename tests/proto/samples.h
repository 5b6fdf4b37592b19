/* Test helpers for tests/proto: one non-trivial sample message of every type, deep comparison,
 * and a live-heap counter for leak checks. */
#ifndef GS_TESTS_PROTO_SAMPLES_H
#define GS_TESTS_PROTO_SAMPLES_H

#include "proto/msg.h"

#include <stddef.h>
#include <stdint.h>

/* The message types, first to last (loops over every type). */
#define FIRST_TYPE GS_MSG_HELLO
#define LAST_TYPE (GS_MSG_TYPE_MAX - 1)

/** Fill @a m with the sample of @a type (pointers into static storage; never cleanup). */
void sample_msg(uint32_t type, gs_msg_t *m);
/** Encode the sample of @a type as one frame into @a out (appended). Asserts success. */
void sample_frame(uint32_t type, gs_buf_t *out);
/** Assert (Criterion) that @a a and @a b carry the same message. */
void assert_msg_eq(const gs_msg_t *a, const gs_msg_t *b);
/** Heap blocks currently allocated by gsched code (counted through -Wl,--wrap=malloc,...). */
size_t live_heap_blocks(void);
/** Bytes requested from malloc/calloc/realloc by gsched code so far (cumulative). */
size_t heap_bytes_requested(void);

/** Called at the end of every proto test: nothing gsched allocated is still live (and, under ASan,
 *  LeakSanitizer finds no leak at all). */
void proto_check_no_leaks(void);

/** Deterministic PRNG (xorshift64*). */
static inline uint64_t test_rand(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 2685821657736338717ull;
}

#endif
