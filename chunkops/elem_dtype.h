/**
 * Typed elements of the fused program (graph/kernel.h, "Dtypes"), defined once for every
 * backend: plain C that also compiles as CUDA C++ (GS_HD functions).
 *
 * Representation on the program's value stack: every value is 8 bytes. A floating dtype holds
 * a double already rounded to the dtype's precision; an integer dtype (and bool) holds the
 * int64 bit pattern of its value, already wrapped to the dtype's width (bool: 0 or 1). Loads
 * convert from the element type in memory, stores convert back; both are exact.
 *
 * Integer arithmetic is two's complement modulo the width (NumPy wraps); floor_divide and mod
 * follow Python's floor semantics, and dividing by zero gives 0 (NumPy warns and gives 0).
 * pow with a negative exponent gives 0 (NumPy raises). Float -> integer conversion of NaN,
 * infinities and values outside int64 gives INT64_MIN before wrapping (what x86's cvttsd2si
 * gives; NumPy leaves it platform-dependent).
 */
#ifndef GS_CHUNKOPS_ELEM_DTYPE_H
#define GS_CHUNKOPS_ELEM_DTYPE_H

#include "chunkops/elemwise.h"

#include <stdint.h>
#include <string.h>

/* Generated from GS_DTYPE_MAP: whether a dtype is floating ('f'). */
GS_HD int gs_dt_is_float(int dt)
{
    switch (dt) {
#define GS__DT_ISF(name, val, str, size, kind) case name: return (kind) == 'f';
        GS_DTYPE_MAP(GS__DT_ISF)
#undef GS__DT_ISF
    default: return 0;
    }
}

GS_HD int gs_dt_size(int dt)
{
    switch (dt) {
#define GS__DT_SZ(name, val, str, size, kind) case name: return (size);
        GS_DTYPE_MAP(GS__DT_SZ)
#undef GS__DT_SZ
    default: return 8;
    }
}

/* Whether opcode @a op gives bool in a typed program (comparisons, logical ops, predicates). */
GS_HD int gs_op_is_predicate(int op)
{
    switch (op) {
    case GS_OP_LT: case GS_OP_LE: case GS_OP_GT: case GS_OP_GE: case GS_OP_EQ: case GS_OP_NE:
    case GS_OP_LT_IMM: case GS_OP_LE_IMM: case GS_OP_GT_IMM: case GS_OP_GE_IMM:
    case GS_OP_EQ_IMM: case GS_OP_NE_IMM:
    case GS_OP_LAND: case GS_OP_LOR: case GS_OP_LXOR:
    case GS_OP_LAND_IMM: case GS_OP_LOR_IMM: case GS_OP_LXOR_IMM:
    case GS_OP_ISNAN: case GS_OP_ISINF: case GS_OP_ISFINITE: case GS_OP_LNOT:
        return 1;
    default: return 0;
    }
}

GS_HD int64_t gs_v_i(double v)
{
    int64_t i;
    memcpy(&i, &v, sizeof(i));
    return i;
}

GS_HD double gs_i_v(int64_t i)
{
    double v;
    memcpy(&v, &i, sizeof(v));
    return v;
}

/* binary16 bits -> double (exact). */
GS_HD double gs_f16_to_f64(uint16_t h)
{
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v;
    if (e == 0) v = ldexp((double)m, -24);
    else if (e == 31) v = m ? NAN : INFINITY;
    else v = ldexp((double)(m | 0x400), e - 25);
    return (h & 0x8000) ? -v : v;
}

/* double -> binary16 bits, rounded to nearest even directly from the double. */
GS_HD uint16_t gs_f64_to_f16(double d)
{
    uint64_t b;
    memcpy(&b, &d, sizeof(b));
    uint16_t sign = (uint16_t)((b >> 48) & 0x8000u);
    int exp = (int)((b >> 52) & 0x7ff);
    uint64_t mant = b & ((1ull << 52) - 1);
    if (exp == 0x7ff) return mant ? (uint16_t)0x7e00u : (uint16_t)(sign | 0x7c00u); /* NaN: canonical */
    int e = exp - 1023 + 15;
    if (e >= 31) return (uint16_t)(sign | 0x7c00u);
    if (e <= 0) {
        if (e < -10) return sign;
        uint64_t m = mant | (1ull << 52);
        int shift = 43 - e;
        uint64_t h = m >> shift, rem = m & ((1ull << shift) - 1), half = 1ull << (shift - 1);
        if (rem > half || (rem == half && (h & 1))) h++;
        return (uint16_t)(sign | h);
    }
    uint64_t h = ((uint64_t)e << 10) | (mant >> 42);
    uint64_t rem = mant & ((1ull << 42) - 1), half = 1ull << 41;
    if (rem > half || (rem == half && (h & 1))) h++;
    return (uint16_t)(sign | h);
}

/* Integer value @a v wrapped to integer dtype @a dt. */
GS_HD int64_t gs_wrap_int(int dt, int64_t v)
{
    switch (dt) {
    case GS_DTYPE_INT32: return (int64_t)(int32_t)(uint32_t)(uint64_t)v;
    case GS_DTYPE_UINT8: return (int64_t)((uint64_t)v & 0xffu);
    case GS_DTYPE_BOOL: return v != 0;
    default: return v;
    }
}

/* double -> int64 without undefined behaviour (see the file comment). */
GS_HD int64_t gs_f64_to_i64(double x)
{
    if (!(x >= -9223372036854775808.0 && x < 9223372036854775808.0)) return INT64_MIN;
    return (int64_t)x;
}

/* float64 <-> float32 with NaN defined alike on every backend: every NaN becomes the positive
 * quiet NaN with no payload. The GPU's arithmetic does not keep a NaN's sign (PTX: neg, abs and
 * the IEEE operations "yield an unspecified NaN"; x86 keeps the operand's sign and payload), so
 * stored NaNs of every dtype are made canonical (NumPy leaves NaN bits unspecified too). */
GS_HD float gs_f64_to_f32(double x)
{
    if (x != x) {
        const uint32_t f = 0x7fc00000u;
        float r;
        memcpy(&r, &f, sizeof r);
        return r;
    }
    return (float)x;
}

GS_HD double gs_f64_canonical(double x)
{
    if (x != x) {
        const uint64_t b = 0x7ff8000000000000ull;
        double r;
        memcpy(&r, &b, sizeof r);
        return r;
    }
    return x;
}

GS_HD double gs_f32_to_f64(float x)
{
    if (x != x) return gs_f64_canonical((double)x);
    return (double)x;
}

/* Round a double to floating dtype @a dt's precision. */
GS_HD double gs_round_float(int dt, double x)
{
    if (dt == GS_DTYPE_FLOAT32) return gs_f32_to_f64(gs_f64_to_f32(x));
    if (dt == GS_DTYPE_FLOAT16) return gs_f16_to_f64(gs_f64_to_f16(x));
    return x;
}

/* Stack value @a v of dtype @a from as dtype @a to (NumPy astype). */
GS_HD double gs_cast_value(int from, int to, double v)
{
    if (gs_dt_is_float(from)) {
        if (gs_dt_is_float(to)) return gs_round_float(to, v);
        if (to == GS_DTYPE_BOOL) return gs_i_v(v != 0.0);
        return gs_i_v(gs_wrap_int(to, gs_f64_to_i64(v)));
    }
    int64_t i = gs_v_i(v);
    if (gs_dt_is_float(to)) return gs_round_float(to, (double)i);
    return gs_i_v(gs_wrap_int(to, i));
}

/* Element @a i of memory @a base holding dtype @a dt, as a stack value. */
GS_HD double gs_load_elem(int dt, const void *base, int64_t i)
{
    switch (dt) {
    case GS_DTYPE_FLOAT32: return gs_f32_to_f64(((const float *)base)[i]);
    case GS_DTYPE_FLOAT16: return gs_f16_to_f64(((const uint16_t *)base)[i]);
    case GS_DTYPE_INT32: return gs_i_v(((const int32_t *)base)[i]);
    case GS_DTYPE_INT64: return gs_i_v(((const int64_t *)base)[i]);
    case GS_DTYPE_UINT8: return gs_i_v(((const uint8_t *)base)[i]);
    case GS_DTYPE_BOOL: return gs_i_v(((const uint8_t *)base)[i] != 0);
    default: return ((const double *)base)[i];
    }
}

/* Store stack value @a v of dtype @a dt as element @a i of memory @a base. */
GS_HD void gs_store_elem(int dt, void *base, int64_t i, double v)
{
    switch (dt) {
    case GS_DTYPE_FLOAT32: ((float *)base)[i] = gs_f64_to_f32(v); break;
    case GS_DTYPE_FLOAT16: ((uint16_t *)base)[i] = gs_f64_to_f16(v); break;
    case GS_DTYPE_INT32: ((int32_t *)base)[i] = (int32_t)gs_v_i(v); break;
    case GS_DTYPE_INT64: ((int64_t *)base)[i] = gs_v_i(v); break;
    case GS_DTYPE_UINT8:
    case GS_DTYPE_BOOL: ((uint8_t *)base)[i] = (uint8_t)gs_v_i(v); break;
    default: ((double *)base)[i] = gs_f64_canonical(v); break;
    }
}

GS_HD int64_t gs_int_pow(int64_t x, int64_t y)
{
    uint64_t r = 1, b = (uint64_t)x;
    if (y < 0) return 0;
    while (y > 0) {
        if (y & 1) r *= b;
        b *= b;
        y >>= 1;
    }
    return (int64_t)r;
}

GS_HD int64_t gs_int_floordiv(int64_t x, int64_t y)
{
    if (y == 0) return 0;
    if (y == -1) return (int64_t)(0u - (uint64_t)x);
    int64_t q = x / y;
    if ((x % y != 0) && ((x < 0) != (y < 0))) q--;
    return q;
}

GS_HD int64_t gs_int_mod(int64_t x, int64_t y)
{
    if (y == 0 || y == -1) return 0;
    int64_t r = x % y;
    if (r != 0 && ((r < 0) != (y < 0))) r += y;
    return r;
}

/* Integer binary op @a op of compute dtype @a dt (IMM forms take y = imm, R forms swap). The
 * result is wrapped (predicates give 0/1). */
GS_HD int64_t gs_int_binary(int op, int dt, int64_t x, int64_t y)
{
    int64_t r;
    switch (op) {
    case GS_OP_ADD: case GS_OP_ADD_IMM: r = (int64_t)((uint64_t)x + (uint64_t)y); break;
    case GS_OP_SUB: case GS_OP_SUB_IMM: r = (int64_t)((uint64_t)x - (uint64_t)y); break;
    case GS_OP_RSUB_IMM: r = (int64_t)((uint64_t)y - (uint64_t)x); break;
    case GS_OP_MUL: case GS_OP_MUL_IMM: r = (int64_t)((uint64_t)x * (uint64_t)y); break;
    case GS_OP_DIV: case GS_OP_DIV_IMM: r = y == 0 ? 0 : y == -1 ? (int64_t)(0u - (uint64_t)x) : x / y; break;
    case GS_OP_RDIV_IMM: r = x == 0 ? 0 : x == -1 ? (int64_t)(0u - (uint64_t)y) : y / x; break;
    case GS_OP_POW: case GS_OP_POW_IMM: r = gs_int_pow(x, y); break;
    case GS_OP_RPOW_IMM: r = gs_int_pow(y, x); break;
    case GS_OP_LT: case GS_OP_LT_IMM: return x < y;
    case GS_OP_LE: case GS_OP_LE_IMM: return x <= y;
    case GS_OP_GT: case GS_OP_GT_IMM: return x > y;
    case GS_OP_GE: case GS_OP_GE_IMM: return x >= y;
    case GS_OP_EQ: case GS_OP_EQ_IMM: return x == y;
    case GS_OP_NE: case GS_OP_NE_IMM: return x != y;
    case GS_OP_MIN: case GS_OP_MIN_IMM: r = x < y ? x : y; break;
    case GS_OP_MAX: case GS_OP_MAX_IMM: r = x > y ? x : y; break;
    case GS_OP_MOD: case GS_OP_MOD_IMM: r = gs_int_mod(x, y); break;
    case GS_OP_RMOD_IMM: r = gs_int_mod(y, x); break;
    case GS_OP_FLOORDIV: case GS_OP_FLOORDIV_IMM: r = gs_int_floordiv(x, y); break;
    case GS_OP_RFLOORDIV_IMM: r = gs_int_floordiv(y, x); break;
    case GS_OP_LAND: case GS_OP_LAND_IMM: return (x != 0) && (y != 0);
    case GS_OP_LOR: case GS_OP_LOR_IMM: return (x != 0) || (y != 0);
    case GS_OP_LXOR: case GS_OP_LXOR_IMM: return (x != 0) != (y != 0);
    default: r = 0; break;
    }
    return gs_wrap_int(dt, r);
}

/* Integer unary op; ops without an integer meaning (exp, sin, ...) go through float64 and
 * back (the lowering never emits them on integers: it casts to a float first). */
GS_HD int64_t gs_int_unary(int op, int dt, int64_t x)
{
    int64_t r;
    switch (op) {
    case GS_OP_NEG: r = (int64_t)(0u - (uint64_t)x); break;
    case GS_OP_ABS: r = x < 0 ? (int64_t)(0u - (uint64_t)x) : x; break;
    case GS_OP_SIGN: r = (x > 0) - (x < 0); break;
    case GS_OP_SQUARE: r = (int64_t)((uint64_t)x * (uint64_t)x); break;
    case GS_OP_RECIP: r = (x == 1 || x == -1) ? x : 0; break;
    case GS_OP_FLOOR: case GS_OP_CEIL: case GS_OP_RINT: case GS_OP_TRUNC: r = x; break;
    case GS_OP_ISNAN: case GS_OP_ISINF: return 0;
    case GS_OP_ISFINITE: return 1;
    case GS_OP_LNOT: return x == 0;
    case GS_OP_EXP: r = gs_f64_to_i64(exp((double)x)); break;
    case GS_OP_LOG: r = gs_f64_to_i64(log((double)x)); break;
    case GS_OP_SQRT: r = gs_f64_to_i64(sqrt((double)x)); break;
    default:
        r = op >= GS_OP_EXTENDED && op < GS_OP_COUNT ? gs_f64_to_i64(gs_elem_unary(op, (double)x, 0.0)) : 0;
        break;
    }
    return gs_wrap_int(dt, r);
}

/* Any float64 opcode on scalars (the IMM forms take y = imm). */
GS_HD double gs_f64_apply1(int op, double imm, double x, double y)
{
    switch (op) {
    case GS_OP_CONST: return imm;
    case GS_OP_NEG: return gs_neg_f64(x);
    case GS_OP_ABS: return fabs(x);
    case GS_OP_EXP: return exp(x);
    case GS_OP_LOG: return log(x);
    case GS_OP_SQRT: return sqrt(x);
    case GS_OP_ADD: return x + y;
    case GS_OP_SUB: return x - y;
    case GS_OP_MUL: return x * y;
    case GS_OP_DIV: return x / y;
    case GS_OP_POW: return pow(x, y);
    case GS_OP_LT: return x < y ? 1.0 : 0.0;
    case GS_OP_LE: return x <= y ? 1.0 : 0.0;
    case GS_OP_GT: return x > y ? 1.0 : 0.0;
    case GS_OP_GE: return x >= y ? 1.0 : 0.0;
    case GS_OP_EQ: return x == y ? 1.0 : 0.0;
    case GS_OP_NE: return x != y ? 1.0 : 0.0;
    case GS_OP_MIN: return (x < y || x != x) ? x : y;
    case GS_OP_MAX: return (x > y || x != x) ? x : y;
    case GS_OP_ADD_IMM: return x + imm;
    case GS_OP_SUB_IMM: return x - imm;
    case GS_OP_MUL_IMM: return x * imm;
    case GS_OP_DIV_IMM: return x / imm;
    case GS_OP_POW_IMM: return pow(x, imm);
    case GS_OP_RSUB_IMM: return imm - x;
    case GS_OP_RDIV_IMM: return imm / x;
    case GS_OP_RPOW_IMM: return pow(imm, x);
    case GS_OP_LT_IMM: return x < imm ? 1.0 : 0.0;
    case GS_OP_LE_IMM: return x <= imm ? 1.0 : 0.0;
    case GS_OP_GT_IMM: return x > imm ? 1.0 : 0.0;
    case GS_OP_GE_IMM: return x >= imm ? 1.0 : 0.0;
    case GS_OP_EQ_IMM: return x == imm ? 1.0 : 0.0;
    case GS_OP_NE_IMM: return x != imm ? 1.0 : 0.0;
    case GS_OP_MIN_IMM: return (x < imm || x != x) ? x : imm;
    case GS_OP_MAX_IMM: return (x > imm || x != x) ? x : imm;
    case GS_OP_MOD: case GS_OP_FLOORDIV: case GS_OP_LAND: case GS_OP_LOR: case GS_OP_LXOR:
        return gs_elem_binary(op, x, y);
    default: return op >= GS_OP_EXTENDED && op < GS_OP_COUNT ? gs_elem_unary(op, x, imm) : x;
    }
}

/* One typed instruction on stack values (graph/kernel.h, "Dtypes"): @a x the operand (the
 * left one of a binary op), @a y the right one. The same rules as the CPU backend's tile
 * loops, element by element. */
GS_HD double gs_typed_apply1(const gs_kinstr_t *in, int arity, double x, double y)
{
    const int dt = in->dtype, op = in->op;
    if (op == GS_OP_CAST) return gs_cast_value(dt, in->arg, x);
    if (gs_dt_is_float(dt)) {
        double r = gs_f64_apply1(op, op == GS_OP_CONST ? gs_round_float(dt, in->imm) : in->imm, x, y);
        if (gs_op_is_predicate(op)) return gs_i_v(r != 0.0);
        return gs_round_float(dt, r);
    }
    const int64_t imm = gs_f64_to_i64(in->imm);
    if (arity == 0) return gs_i_v(gs_wrap_int(dt, imm));
    if (arity == 2) return gs_i_v(gs_int_binary(op, dt, gs_v_i(x), gs_v_i(y)));
    if ((op >= GS_OP_ADD_IMM && op <= GS_OP_MAX_IMM) || (op >= GS_OP_MOD_IMM && op <= GS_OP_LXOR_IMM))
        return gs_i_v(gs_int_binary(op, dt, gs_v_i(x), imm));
    return gs_i_v(gs_int_unary(op, dt, gs_v_i(x)));
}

#endif
