/* Plain-C references for NumPy's float64 mod and floor_divide, shared by the graph and chunkops
 * tests. Written from Python's float semantics (what NumPy follows), case by case, not from the
 * backends' code (chunkops/elemwise.h). */
#ifndef GS_TESTS_NUMPY_REF_H
#define GS_TESTS_NUMPY_REF_H

#include <math.h>

/* a % b: the result has the sign of b (a zero result too); NaN for b == 0, NaN operands or an
 * infinite a; a finite a % inf is a when a has the sign of inf, else inf itself. */
static inline double ref_np_mod(double a, double b)
{
    if (b == 0 || isnan(a) || isnan(b) || isinf(a)) return NAN;
    if (isinf(b)) {
        if (a == 0) return copysign(0.0, b);
        return (a < 0) == (b < 0) ? a : b;
    }
    double r = fmod(a, b);
    if (r == 0) return copysign(0.0, b);
    return (r < 0) != (b < 0) ? r + b : r;
}

/* a // b: floor of the exact quotient; a / b for b == 0 (inf or NaN), NaN for NaN operands or
 * an infinite a; a zero quotient has the sign of a / b. */
static inline double ref_np_floor_divide(double a, double b)
{
    if (b == 0) return a / b;
    if (isnan(a) || isnan(b) || isinf(a)) return NAN;
    if (isinf(b)) {
        if (a == 0 || (a < 0) == (b < 0)) return copysign(0.0, a / b);
        return -1.0;
    }
    double r = fmod(a, b);
    double q = (a - r) / b;   /* truncated quotient, an integer up to rounding */
    if (r != 0 && (r < 0) != (b < 0)) q -= 1.0;
    q = nearbyint(q);
    return q == 0 ? copysign(0.0, a / b) : q;
}

#endif
