/**
 * One step of a cumulative sum or product (graph/kernel.h, SCAN), defined once for every
 * backend: plain C that also compiles as CUDA C++ (GS_HD functions), on the stack values of
 * chunkops/elem_dtype.h (floats as doubles already rounded to their dtype, integers and bool as
 * int64 bit patterns already wrapped).
 *
 * A float step computes in double and rounds once to the dtype: for float32 and float16 that is
 * the correctly rounded float32/float16 sum or product (double holds more than twice their
 * precision), what NumPy's float32 and float16 loops give. Integers wrap to their width; bool
 * adds as logical or and multiplies as logical and (NumPy's bool add and multiply).
 */
#ifndef GS_CHUNKOPS_SCAN_ELEM_H
#define GS_CHUNKOPS_SCAN_ELEM_H

#include "chunkops/elem_dtype.h"

/* The identity of @a op (0 or 1) as a stack value of dtype @a dt. */
GS_HD double gs_scan_identity(int op, int dt)
{
    const int one = op == GS_SCAN_PROD;
    return gs_dt_is_float(dt) ? (double)one : gs_i_v(one);
}

/* acc OP x, both stack values of dtype @a dt. */
GS_HD double gs_scan_step(int op, int dt, double acc, double x)
{
    if (gs_dt_is_float(dt)) return gs_round_float(dt, op == GS_SCAN_PROD ? acc * x : acc + x);
    return gs_i_v(gs_int_binary(op == GS_SCAN_PROD ? GS_OP_MUL : GS_OP_ADD, dt, gs_v_i(acc),
                                gs_v_i(x)));
}

/* Element @a i of @a base (dtype @a in_dt) converted to a stack value of dtype @a dt. */
GS_HD double gs_scan_load(int in_dt, int dt, const void *base, int64_t i)
{
    const double v = gs_load_elem(in_dt, base, i);
    return in_dt == dt ? v : gs_cast_value(in_dt, dt, v);
}

#endif
