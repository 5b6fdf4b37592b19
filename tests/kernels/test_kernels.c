/* User kernels for the map_overlap / map_blocks tests (built by CMake as a loadable module:
 * tests find it through GS_TEST_KERNELS). Plain C against <gsched/array.h>'s gs_block_t. */
#include <gsched/array.h>

#include <signal.h>
#include <stdint.h>
#include <string.h>

/* The 3x3 mean over a block padded by 1 (arg: the array's shape, int64_t[2]): summed in
 * row-major order from 0.0, as gs_array_stencil does; an element whose neighbourhood leaves
 * the array keeps its value (what gs_array_stencil's boundary "none" gives). */
void gs_test_smooth3x3(const gs_block_t *in, int nin, gs_block_t *out, const void *arg)
{
    const int64_t *shape = arg;
    const int64_t pw = in[0].shape[1];
    (void)nin;
    for (int64_t i = 0; i < out->shape[0]; i++)
        for (int64_t j = 0; j < out->shape[1]; j++) {
            const double *c = in[0].data + (i + 1) * pw + (j + 1);
            const int64_t gi = out->start[0] + i, gj = out->start[1] + j;
            double acc = 0.0;
            if (shape != NULL && (gi == 0 || gj == 0 || gi == shape[0] - 1 || gj == shape[1] - 1)) {
                out->data[i * out->shape[1] + j] = *c;
                continue;
            }
            for (int di = -1; di <= 1; di++)
                for (int dj = -1; dj <= 1; dj++) acc += (1.0 / 9) * c[di * pw + dj];
            out->data[i * out->shape[1] + j] = acc;
        }
}

/* out = global row * 1000 + global column + the input's centre / 2 (any 2-D block, the input
 * padded by arg[0] rows and arg[1] columns, int32_t[2]; NULL: not padded). */
void gs_test_position(const gs_block_t *in, int nin, gs_block_t *out, const void *arg)
{
    const int32_t *d = arg;
    const int64_t ry = d ? d[0] : 0, rx = d ? d[1] : 0, pw = in[0].shape[1];
    (void)nin;
    for (int64_t i = 0; i < out->shape[0]; i++)
        for (int64_t j = 0; j < out->shape[1]; j++)
            out->data[i * out->shape[1] + j] = (double)(out->start[0] + i) * 1000.0 +
                                               (double)(out->start[1] + j) +
                                               0.5 * in[0].data[(i + ry) * pw + j + rx];
}

/* Elementwise sum of every input (map_blocks). */
void gs_test_add(const gs_block_t *in, int nin, gs_block_t *out, const void *arg)
{
    int64_t n = 1;
    (void)arg;
    for (int32_t j = 0; j < out->ndim; j++) n *= out->shape[j];
    for (int64_t i = 0; i < n; i++) {
        double s = 0.0;
        for (int k = 0; k < nin; k++) s += in[k].data[i];
        out->data[i] = s;
    }
}

/* A kernel with a bug: writes through a null pointer. */
void gs_test_crash(const gs_block_t *in, int nin, gs_block_t *out, const void *arg)
{
    volatile double *p = NULL;
    (void)in;
    (void)nin;
    (void)out;
    (void)arg;
    *p = 1.0;
}

/* Elementwise (GS_KERNEL_ELEMENTWISE): out = in0^2 - in1 (when given) + the block's first
 * global row / 1000, so a kernel that saw the wrong block start gives other values. */
void gs_test_ew(const gs_block_t *in, int nin, gs_block_t *out, const void *arg)
{
    int64_t n = 1;
    const double pos = out->ndim > 0 ? (double)out->start[0] / 1000.0 : 0.0;
    (void)arg;
    for (int32_t j = 0; j < out->ndim; j++) n *= out->shape[j];
    for (int64_t i = 0; i < n; i++)
        out->data[i] = in[0].data[i] * in[0].data[i] - (nin > 1 ? in[1].data[i] : 0.0) + pos;
}

/* Element i of @a b (any dtype) as a double. */
static double gs_test_load(const gs_block_t *b, int64_t i)
{
    switch (b->dtype) {
    case GS_DTYPE_FLOAT32: return ((const float *)b->data)[i];
    case GS_DTYPE_FLOAT16: return (double)((const _Float16 *)b->data)[i];
    case GS_DTYPE_INT32: return ((const int32_t *)b->data)[i];
    case GS_DTYPE_INT64: return (double)((const int64_t *)b->data)[i];
    case GS_DTYPE_UINT8: return ((const uint8_t *)b->data)[i];
    case GS_DTYPE_BOOL: return ((const uint8_t *)b->data)[i] != 0;
    default: return b->data[i];
    }
}

/* Elementwise over every dtype (GS_KERNEL_ELEMENTWISE; tests/graph/test_map_dtype.c holds
 * its plain-C twin): v = 2 in0 + in1 (when given) + the element's global row, stored in
 * out's dtype as a C cast stores it (integers through int64_t, so they wrap; bool: v != 0). */
void gs_test_typed(const gs_block_t *in, int nin, gs_block_t *out, const void *arg)
{
    int64_t n = 1, inner = 1;
    (void)arg;
    for (int32_t j = 0; j < out->ndim; j++) n *= out->shape[j];
    for (int32_t j = 1; j < out->ndim; j++) inner *= out->shape[j];
    for (int64_t i = 0; i < n; i++) {
        const double row = out->ndim > 0 ? (double)(out->start[0] + i / inner) : 0.0;
        const double v =
            2.0 * gs_test_load(&in[0], i) + (nin > 1 ? gs_test_load(&in[1], i) : 0.0) + row;
        switch (out->dtype) {
        case GS_DTYPE_FLOAT32: ((float *)out->data)[i] = (float)v; break;
        case GS_DTYPE_FLOAT16: ((_Float16 *)out->data)[i] = (_Float16)v; break;
        case GS_DTYPE_INT32: ((int32_t *)out->data)[i] = (int32_t)(int64_t)v; break;
        case GS_DTYPE_INT64: ((int64_t *)out->data)[i] = (int64_t)v; break;
        case GS_DTYPE_UINT8: ((uint8_t *)out->data)[i] = (uint8_t)(int64_t)v; break;
        case GS_DTYPE_BOOL: ((uint8_t *)out->data)[i] = v != 0.0; break;
        default: out->data[i] = v; break;
        }
    }
}
