/* Neighbourhood expressions: gs_array_stencil and gs_array_map_overlap (gsched/array.h;
 * stencil_int.h). Both build one STENCIL node: weights, or a user kernel. */
#include "graph/stencil_int.h"

#include <dlfcn.h>
#include <string.h>
#include <unistd.h>

gs_status_t gs__ukernel_copy(const char *library, const char *symbol, const void *arg,
                             size_t arg_len, gs__ukernel_t **uk_p)
{
    gs__ukernel_t *uk;
    if (library == NULL || symbol == NULL || library[0] == '\0' || symbol[0] == '\0')
        return gs_error_set(GS_ERR_INVALID_PARAM, "user kernel: library and symbol must be named");
    if (arg_len > GS__UKERNEL_MAX_ARG || (arg_len > 0 && arg == NULL))
        return gs_error_set(GS_ERR_INVALID_PARAM, "user kernel: arg of %zu bytes (at most %u, "
                            "not NULL)", arg_len, GS__UKERNEL_MAX_ARG);
    uk = gs_calloc(1, sizeof(*uk), "user kernel");
    if (uk == NULL) goto nomem;
    uk->library = gs_malloc(strlen(library) + 1, "user kernel library");
    uk->symbol = gs_malloc(strlen(symbol) + 1, "user kernel symbol");
    uk->arg = gs_malloc(arg_len + 1, "user kernel arg");
    if (uk->library == NULL || uk->symbol == NULL || uk->arg == NULL) goto nomem;
    strcpy(uk->library, library);
    strcpy(uk->symbol, symbol);
    if (arg_len > 0) memcpy(uk->arg, arg, arg_len);
    uk->arg_len = (uint32_t)arg_len;
    *uk_p = uk;
    return GS_OK;
nomem:
    gs__ukernel_free(uk);
    return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for a user kernel");
}

void gs__ukernel_free(gs__ukernel_t *uk)
{
    if (uk == NULL) return;
    gs_free(uk->library);
    gs_free(uk->symbol);
    gs_free(uk->arg);
    gs_free(uk->cuda_src);
    gs_free(uk);
}

gs_status_t gs__ukernel_set_cuda(gs__ukernel_t *uk, const char *src)
{
    size_t n;
    if (src == NULL) return GS_OK;
    n = strlen(src);
    if (n == 0 || n > GS__UKERNEL_MAX_SRC)
        return gs_error_set(GS_ERR_INVALID_PARAM, "cuda kernel %s: source of %zu bytes (1 to %u)",
                            uk->symbol, n, GS__UKERNEL_MAX_SRC);
    char *c = gs_malloc(n + 1, "cuda kernel source");
    if (c == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for a cuda kernel source");
    memcpy(c, src, n + 1);
    gs_free(uk->cuda_src);
    uk->cuda_src = c;
    return GS_OK;
}

/* The STENCIL node: @a weights (nw of them) or @a user (copied), never both. */
static gs_status_t gs__stencil_node(gs_array_h x, const double *weights, const int *radius,
                                    gs_boundary_t boundary, double cval,
                                    const gs__ukernel_t *user, gs_array_h *out_p)
{
    struct gs_array *n;
    gs_status_t st;
    int64_t nw = 1;
    if (x->grid.ndim < 1)
        return gs_error_set(GS_ERR_INVALID_PARAM, "stencil: needs an array of at least one axis");
    if ((int)boundary < 0 || boundary >= GS_BOUNDARY_COUNT)
        return gs_error_set(GS_ERR_INVALID_PARAM, "stencil: unknown boundary %d", (int)boundary);
    if (x->dtype != GS_DTYPE_FLOAT64)   /* the halo assembly moves float64 elements only */
        return gs_error_set(GS_ERR_INVALID_PARAM,
                            "%s: runs on float64 arrays only (this one is %s; convert with "
                            "gs_array_astype first)", user != NULL ? "map_overlap" : "stencil",
                            gs_dtype_name((gs_dtype_t)x->dtype));
    for (int32_t j = 0; j < x->grid.ndim; j++) {
        if (radius[j] < 0 || radius[j] > GS_KERNEL_MAX_WEIGHTS)
            return gs_error_set(GS_ERR_INVALID_PARAM, "stencil: radius %d of axis %d out of range",
                                radius[j], (int)j);
        nw *= 2 * (int64_t)radius[j] + 1;
        if (nw > GS_KERNEL_MAX_WEIGHTS)
            return gs_error_set(GS_ERR_INVALID_PARAM,
                                "stencil: a neighbourhood of more than %d elements "
                                "(prod(2 radius + 1))", GS_KERNEL_MAX_WEIGHTS);
        if ((boundary == GS_BOUNDARY_REFLECT || boundary == GS_BOUNDARY_PERIODIC) &&
            radius[j] > x->grid.shape[j])
            return gs_error_set(GS_ERR_INVALID_PARAM,
                                "stencil: radius %d exceeds axis %d of length %lld (%s boundary)",
                                radius[j], (int)j, (long long)x->grid.shape[j],
                                boundary == GS_BOUNDARY_REFLECT ? "reflect" : "periodic");
    }
    n = gs__array_node_new(GS__NODE_STENCIL, x->grid.ndim);
    if (n == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for an array node");
    if (gs_grid_copy(&n->grid, &x->grid) != GS_OK) {
        gs__array_node_free(n);
        return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for a stencil node");
    }
    if (user != NULL) {
        st = gs__ukernel_copy(user->library, user->symbol, user->arg, user->arg_len, &n->u.st.user);
        if (st == GS_OK) st = gs__ukernel_set_cuda(n->u.st.user, user->cuda_src);
        if (st != GS_OK) {
            gs__array_node_free(n);
            return st;
        }
    } else {
        n->u.st.weights = gs_malloc((size_t)nw * sizeof(double), "stencil weights");
        if (n->u.st.weights == NULL) {
            gs__array_node_free(n);
            return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for a stencil node");
        }
        memcpy(n->u.st.weights, weights, (size_t)nw * sizeof(double));
        n->u.st.nweights = (int32_t)nw;
    }
    for (int32_t j = 0; j < x->grid.ndim; j++) n->u.st.radius[j] = radius[j];
    n->u.st.boundary = (int32_t)boundary;
    n->u.st.cval = boundary == GS_BOUNDARY_CONSTANT ? cval : 0.0;
    if ((st = gs__array_node_finish(n)) != GS_OK) {
        gs__array_node_free(n);
        return st;
    }
    n->ninputs = 1;
    n->in[0] = gs_array_retain(x);
    *out_p = n;
    return GS_OK;
}

gs_status_t gs_array_stencil(gs_array_h x, const double *weights, const int *radius,
                             gs_boundary_t boundary, double cval, gs_array_h *out_p)
{
    if (x == NULL || weights == NULL || radius == NULL || out_p == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "stencil: NULL argument");
    return gs__stencil_node(x, weights, radius, boundary, cval, NULL, out_p);
}

/* Where possible, the error a worker would meet: the library exists here but does not load or
 * lacks the symbol. A library absent here is left to the workers. */
gs_status_t gs__ukernel_check(const gs_user_kernel_t *k)
{
    void *h, *f;
    if (k->cuda_source != NULL) {
        size_t n = strlen(k->cuda_source);
        if (k->symbol == NULL || k->symbol[0] == '\0' || n == 0 || n > GS__UKERNEL_MAX_SRC)
            return gs_error_set(GS_ERR_INVALID_PARAM, "cuda kernel: a name and a source of 1 to "
                                "%u bytes are needed", GS__UKERNEL_MAX_SRC);
        return GS_OK;   /* compiled by the CUDA workers */
    }
    if (k->library == NULL || k->symbol == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "user kernel: library and symbol must be named");
    if (access(k->library, F_OK) != 0) return GS_OK;
    h = dlopen(k->library, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL)
        return gs_error_set(GS_ERR_NOT_FOUND, "user kernel library %s does not load: %s",
                            k->library, dlerror());
    f = dlsym(h, k->symbol);
    if (f == NULL) {
        gs_status_t st = gs_error_set(GS_ERR_NOT_FOUND, "user kernel %s not found in %s: %s",
                                      k->symbol, k->library, dlerror());
        dlclose(h);
        return st;
    }
    dlclose(h);
    return GS_OK;
}

gs_status_t gs_array_map_overlap(const gs_user_kernel_t *kernel, gs_array_h x, const int *depth,
                                 gs_boundary_t boundary, double cval, gs_array_h *out_p)
{
    gs__ukernel_t uk;
    gs_status_t st;
    if (kernel == NULL || x == NULL || depth == NULL || out_p == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "map_overlap: NULL argument");
    if (kernel->cuda_source == NULL &&
        (kernel->library == NULL || kernel->symbol == NULL || kernel->library[0] == '\0' ||
         kernel->symbol[0] == '\0'))
        return gs_error_set(GS_ERR_INVALID_PARAM, "map_overlap: library and symbol must be named");
    if ((st = gs__ukernel_check(kernel)) != GS_OK) return st;
    /* a CUDA source kernel: compiled and run by CUDA workers (chunkops/ktask.c) */
    uk.library = (char *)(kernel->cuda_source != NULL ? GS__UKERNEL_CUDA_LIB : kernel->library);
    uk.cuda_src = (char *)kernel->cuda_source;
    uk.flags = 0;
    uk.symbol = (char *)kernel->symbol;
    uk.arg = (uint8_t *)kernel->arg;
    if (kernel->arg_len > GS__UKERNEL_MAX_ARG)
        return gs_error_set(GS_ERR_INVALID_PARAM, "map_overlap: arg of %zu bytes (at most %u)",
                            kernel->arg_len, GS__UKERNEL_MAX_ARG);
    uk.arg_len = (uint32_t)kernel->arg_len;
    return gs__stencil_node(x, NULL, depth, boundary, cval, &uk, out_p);
}

gs_status_t gs__stencil_rebuild(const struct gs_array *n, gs_array_h a, gs_array_h *out_p)
{
    int radius[GS_MAX_NDIM];
    for (int32_t j = 0; j < n->grid.ndim; j++) radius[j] = n->u.st.radius[j];
    return gs__stencil_node(a, n->u.st.weights, radius, (gs_boundary_t)n->u.st.boundary,
                            n->u.st.cval, n->u.st.user, out_p);
}
