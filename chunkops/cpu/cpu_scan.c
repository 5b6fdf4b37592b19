/* SCAN on the CPU (graph/kernel.h gs_kscan_t): a cumulative sum or product along one axis of a
 * row-major block, row after row along the axis so that the contiguous index is innermost
 * (each output row is the previous one OP the input row). float64 -> float64 has its own loops;
 * every other dtype pair goes through chunkops/scan_elem.h, the definition the CUDA kernels
 * share. */
#include "chunkops/cpu/cpu.h"
#include "chunkops/scan_elem.h"

/* Blocks as [outer][n][inner] around the axis. */
static void gs__scan_dims(const gs_kscan_t *k, int64_t *outer_p, int64_t *n_p, int64_t *inner_p)
{
    int64_t outer = 1, inner = 1;
    for (int32_t j = 0; j < k->axis; j++) outer *= k->shape[j];
    for (int32_t j = k->axis + 1; j < k->ndim; j++) inner *= k->shape[j];
    *outer_p = outer;
    *n_p = k->shape[k->axis];
    *inner_p = inner;
}

#define GS__SCAN_F64(OPER)                                                                     \
    for (int64_t o = 0; o < outer; o++) {                                                      \
        const double *x = in + o * n * inner;                                                  \
        const double *c = init != NULL ? init + o * inner : NULL;                              \
        if (inner == 1) { /* the last axis: one running value per row */                       \
            double acc = c != NULL ? c[0] : id, *row = total ? out + o : out + o * n;          \
            if (total)                                                                         \
                for (int64_t i = 0; i < n; i++) acc = acc OPER x[i];                           \
            else                                                                               \
                for (int64_t i = 0; i < n; i++) row[i] = acc = acc OPER x[i];                  \
            if (total) row[0] = acc;                                                           \
        } else if (total) {                                                                           \
            double *acc = out + o * inner;                                                     \
            for (int64_t j = 0; j < inner; j++) acc[j] = c != NULL ? c[j] : id;                \
            for (int64_t i = 0; i < n; i++, x += inner)                                        \
                for (int64_t j = 0; j < inner; j++) acc[j] = acc[j] OPER x[j];                 \
        } else {                                                                               \
            double *row = out + o * n * inner;                                                 \
            for (int64_t i = 0; i < n; i++, x += inner, row += inner) {                        \
                const double *prev = i > 0 ? row - inner : c;                                  \
                if (prev != NULL)                                                              \
                    for (int64_t j = 0; j < inner; j++) row[j] = prev[j] OPER x[j];            \
                else                                                                           \
                    for (int64_t j = 0; j < inner; j++) row[j] = id OPER x[j];                 \
            }                                                                                  \
        }                                                                                      \
    }

static void gs__scan_f64(const gs_kscan_t *k, int64_t outer, int64_t n, int64_t inner)
{
    const double *in = k->in, *init = k->init;
    double *out = k->out;
    const int total = k->mode == GS_KSCAN_TOTAL;
    const double id = k->op == GS_SCAN_PROD ? 1.0 : 0.0;
    if (k->op == GS_SCAN_PROD) {
        GS__SCAN_F64(*)
    } else {
        GS__SCAN_F64(+)
    }
}

static void gs__scan_typed(const gs_kscan_t *k, int64_t outer, int64_t n, int64_t inner)
{
    const int op = k->op, dt = k->out_dtype, idt = k->in_dtype;
    const int total = k->mode == GS_KSCAN_TOTAL;
    const double id = gs_scan_identity(op, dt);
    for (int64_t o = 0; o < outer; o++) {
        const int64_t xb = o * n * inner, cb = o * inner;
        if (total) {
            for (int64_t j = 0; j < inner; j++) {
                double acc = k->init != NULL ? gs_load_elem(dt, k->init, cb + j) : id;
                for (int64_t i = 0; i < n; i++)
                    acc = gs_scan_step(op, dt, acc, gs_scan_load(idt, dt, k->in, xb + i * inner + j));
                gs_store_elem(dt, k->out, cb + j, acc);
            }
            continue;
        }
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < inner; j++) {
                const int64_t p = xb + i * inner + j;
                double acc = i > 0 ? gs_load_elem(dt, k->out, p - inner)
                             : k->init != NULL ? gs_load_elem(dt, k->init, cb + j) : id;
                gs_store_elem(dt, k->out, p,
                              gs_scan_step(op, dt, acc, gs_scan_load(idt, dt, k->in, p)));
            }
    }
}

void gs__cpu_scan_run(const gs_kscan_t *k)
{
    int64_t outer, n, inner;
    gs__scan_dims(k, &outer, &n, &inner);
    if (k->in_dtype == GS_DTYPE_FLOAT64 && k->out_dtype == GS_DTYPE_FLOAT64)
        gs__scan_f64(k, outer, n, inner);
    else
        gs__scan_typed(k, outer, n, inner);
}
