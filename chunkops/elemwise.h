/**
 * The extended elementwise opcodes (graph/kernel.h, GS_OP_EXTENDED and on), defined once for
 * every backend: plain C that also compiles as CUDA C++ (GS_HD functions), so the CPU and CUDA
 * backends give the same values for the same libm results.
 *
 * NumPy semantics, float64:
 *   rint: halves to even (np.round with decimals 0); sign: -1, 0, +1, NaN for NaN (and +0 for
 *   both zeros); reciprocal 1/x; isnan/isinf/isfinite and the logical ops 1.0 or 0.0, a value
 *   being true when nonzero (NaN is true).
 *   mod and floor_divide as NumPy's npy_divmod: mod = fmod(a, b) moved into the sign of b (a
 *   zero result takes the sign of b); floor_divide = (a - mod) / b rounded to the nearest
 *   integer, a zero quotient taking the sign of a / b; b == 0 gives fmod(a, 0) = NaN for mod
 *   and a / b (inf or NaN) for floor_divide.
 *   cast: in an all-float64 program (graph/kernel.h, "Dtypes") the identity.
 */
#ifndef GS_CHUNKOPS_ELEMWISE_H
#define GS_CHUNKOPS_ELEMWISE_H

#include "chunkops/random.h" /* GS_HD */
#include "graph/kernel.h"

#include <math.h>

/* -x with the sign bit flipped for every x, NaN included (NumPy on the CPU): PTX leaves the
 * sign of neg.f64's NaN result unspecified (sm_90 keeps it), so the device flips the bit. */
GS_HD double gs_neg_f64(double x)
{
#if defined(__CUDA_ARCH__)
    return __longlong_as_double(__double_as_longlong(x) ^ (long long)0x8000000000000000ull);
#else
    return -x;
#endif
}

/* floor(a / b) and a mod b, as npy_divmod */
GS_HD double gs_elem_divmod(double a, double b, double *mod_p)
{
    double mod = fmod(a, b), div, floordiv;
    if (b == 0.0) {
        *mod_p = mod;
        return a / b;
    }
    div = (a - mod) / b;
    if (mod != 0.0) {
        if ((b < 0.0) != (mod < 0.0)) {
            mod += b;
            div -= 1.0;
        }
    } else {
        mod = copysign(0.0, b);
    }
    if (div != 0.0) {
        floordiv = floor(div);
        if (div - floordiv > 0.5) floordiv += 1.0;
    } else {
        floordiv = copysign(0.0, a / b);
    }
    *mod_p = mod;
    return floordiv;
}

GS_HD double gs_elem_mod(double a, double b)
{
    double m;
    (void)gs_elem_divmod(a, b, &m);
    return m;
}

GS_HD double gs_elem_floordiv(double a, double b)
{
    double m;
    return gs_elem_divmod(a, b, &m);
}

GS_HD double gs_elem_truth(double x)
{
    return x != 0.0 ? 1.0 : 0.0;   /* NaN != 0 */
}

/** Binary extended op @a op (GS_OP_MOD..GS_OP_LXOR) on a, b. */
GS_HD double gs_elem_binary(int op, double a, double b)
{
    switch (op) {
    case GS_OP_MOD: return gs_elem_mod(a, b);
    case GS_OP_FLOORDIV: return gs_elem_floordiv(a, b);
    case GS_OP_LAND: return (a != 0.0 && b != 0.0) ? 1.0 : 0.0;
    case GS_OP_LOR: return (a != 0.0 || b != 0.0) ? 1.0 : 0.0;
    default: return gs_elem_truth(a) != gs_elem_truth(b) ? 1.0 : 0.0; /* GS_OP_LXOR */
    }
}

/** Unary extended op @a op (GS_OP_SIN..GS_OP_LNOT, GS_OP_MOD_IMM..GS_OP_LXOR_IMM) on x, with
 *  the immediate @a imm of the *_IMM ops (x OP imm; RMOD/RFLOORDIV: imm OP x). */
GS_HD double gs_elem_unary(int op, double x, double imm)
{
    switch (op) {
    case GS_OP_SIN: return sin(x);
    case GS_OP_COS: return cos(x);
    case GS_OP_TAN: return tan(x);
    case GS_OP_ARCSIN: return asin(x);
    case GS_OP_ARCCOS: return acos(x);
    case GS_OP_ARCTAN: return atan(x);
    case GS_OP_SINH: return sinh(x);
    case GS_OP_COSH: return cosh(x);
    case GS_OP_TANH: return tanh(x);
    case GS_OP_EXP2: return exp2(x);
    case GS_OP_LOG2: return log2(x);
    case GS_OP_LOG10: return log10(x);
    case GS_OP_LOG1P: return log1p(x);
    case GS_OP_EXPM1: return expm1(x);
    case GS_OP_FLOOR: return floor(x);
    case GS_OP_CEIL: return ceil(x);
    case GS_OP_RINT: return rint(x);
    case GS_OP_TRUNC: return trunc(x);
    case GS_OP_SIGN: return x > 0.0 ? 1.0 : x < 0.0 ? -1.0 : x == 0.0 ? 0.0 : x;
    case GS_OP_SQUARE: return x * x;
    case GS_OP_RECIP: return 1.0 / x;
    case GS_OP_ISNAN: return isnan(x) ? 1.0 : 0.0;
    case GS_OP_ISINF: return isinf(x) ? 1.0 : 0.0;
    case GS_OP_ISFINITE: return isfinite(x) ? 1.0 : 0.0;
    case GS_OP_LNOT: return x == 0.0 ? 1.0 : 0.0;
    case GS_OP_MOD_IMM: return gs_elem_mod(x, imm);
    case GS_OP_RMOD_IMM: return gs_elem_mod(imm, x);
    case GS_OP_FLOORDIV_IMM: return gs_elem_floordiv(x, imm);
    case GS_OP_RFLOORDIV_IMM: return gs_elem_floordiv(imm, x);
    case GS_OP_LAND_IMM: return gs_elem_binary(GS_OP_LAND, x, imm);
    case GS_OP_LOR_IMM: return gs_elem_binary(GS_OP_LOR, x, imm);
    case GS_OP_CAST: return x; /* float64 to float64 (typed casts: elem_dtype.h) */
    default: return gs_elem_binary(GS_OP_LXOR, x, imm); /* GS_OP_LXOR_IMM */
    }
}

#endif
