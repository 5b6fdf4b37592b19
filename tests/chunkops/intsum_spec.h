/* Shared by the integer-record tests (test_intsum.c on the CPU backend, test_cuda_intsum.c on
 * CUDA against the CPU): the REDUCE spec they run and the values that float64 accumulation
 * gets wrong. */
#ifndef GS_TESTS_CHUNKOPS_INTSUM_SPEC_H
#define GS_TESTS_CHUNKOPS_INTSUM_SPEC_H

#include <stdint.h>

#include "chunkops/chunkops.h"

/* REDUCE @a op over the R x C region of @a data (dtype @a dt, row-major), along @a axis
 * (-1: all), values cast to int64, into integer records @a out. @a k is overwritten; it
 * borrows @a data and @a out. */
void is_reduce_spec(gs_kfused_t *k, gs_dtype_t dt, const void *data, int64_t R, int64_t C, int op,
                    int axis, double *out);

/* Appends a cast of the program's int64 value to bool and back to int64 (count_nonzero's
 * sum(astype(x, bool)) as a reduction of integer records). */
void is_cast_to_bool(gs_kfused_t *k);

/* COMBINE @a op of @a ninputs inputs of @a nrec integer records each (inputs and out left for
 * the caller); with @a finalize, into values of @a out_dtype (else pass GS_DTYPE_FLOAT64: the
 * out is records). @a kc is overwritten. */
void is_combine_spec(gs_kcombine_t *kc, int op, int64_t nrec, int ninputs, int finalize,
                     gs_dtype_t out_dtype);
/* Odd values beyond 2^53 and the int64 extremes, plus 0..2 (wrapping as NumPy's int64 does),
 * drawn with the test's own generator @a rnd. */
int64_t is_big_value(uint64_t (*rnd)(void));

#endif
