/* Plain-C reference of the integer reductions (graph/kernel.h "Integer records"), shared by the
 * chunkops and graph tests: NumPy's int64 arithmetic, wrapping modulo 2^64 through uint64_t. */
#ifndef GS_TESTS_INTSUM_REF_H
#define GS_TESTS_INTSUM_REF_H

#include <stdint.h>

#include <gsched/array.h>

/* a OP x for reduction @a op (GS_RED_SUM, GS_RED_PROD, GS_RED_MIN; anything else: MAX). */
static inline int64_t ref_int_op(int op, int64_t a, int64_t x)
{
    switch (op) {
    case GS_RED_SUM: return (int64_t)((uint64_t)a + (uint64_t)x);
    case GS_RED_PROD: return (int64_t)((uint64_t)a * (uint64_t)x);
    case GS_RED_MIN: return x < a ? x : a;
    default: return x > a ? x : a;
    }
}

/* The reduction of no values: 1 for PROD, INT64_MAX for MIN, INT64_MIN for MAX, else 0. */
static inline int64_t ref_int_empty(int op)
{
    return op == GS_RED_PROD ? 1 : op == GS_RED_MIN ? INT64_MAX : op == GS_RED_MAX ? INT64_MIN : 0;
}

#endif
