/* Page-locked host buffers for the CUDA backend's host_alloc / host_free (chunkops.h), with a
 * small cache: cudaHostAlloc page-locks every page (tens to hundreds of ms for the 2 x 200 MB
 * staging of a zarr chunk read) and cudaFreeHost waits for the whole device, so buffers given
 * back are kept (at most GS__CUDA_PIN_SLOTS of them, GS__CUDA_PIN_CACHE_BYTES in all) and handed
 * out again to requests they fit without wasting more than half. Each buffer starts with a
 * header page holding its size; callers get the page after it (still page-aligned). */
#include "chunkops/cuda/cuda_internal.h"
#include "common/error.h"
#include "common/log.h"

#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#define GS__CUDA_PIN_HDR ((size_t)4096)
#define GS__CUDA_PIN_MAGIC UINT64_C(0x6773706e6e656421) /* "gspnned!" */

typedef struct {
    uint64_t magic;
    size_t size; /* usable bytes after the header */
} gs__pin_hdr_t;

gs_status_t gs__cuda_pincache_init(gs__cuda_pincache_t *c)
{
    memset(c, 0, sizeof(*c));
    if (pthread_mutex_init(&c->lock, NULL) != 0)
        return gs_error_set(GS_ERR_NO_RESOURCE, "cuda pinned cache: pthread_mutex_init failed");
    return GS_OK;
}

gs_status_t gs__cuda_pinned_alloc(gs__cuda_pincache_t *c, size_t nbytes, void **ptr_p)
{
    void *p = NULL;
    int best = -1;
    if (nbytes == 0) nbytes = 1;
    pthread_mutex_lock(&c->lock);
    for (int i = 0; i < c->n; i++)
        if (c->size[i] >= nbytes && c->size[i] - nbytes <= c->size[i] / 2 &&
            (best < 0 || c->size[i] < c->size[best]))
            best = i;
    if (best >= 0) {
        p = c->ptr[best];
        c->bytes -= c->size[best];
        c->n--;
        c->ptr[best] = c->ptr[c->n];
        c->size[best] = c->size[c->n];
        c->hits++;
    }
    pthread_mutex_unlock(&c->lock);
    if (p != NULL) {
        *ptr_p = p;
        return GS_OK;
    }
    if (nbytes > SIZE_MAX - GS__CUDA_PIN_HDR)
        return gs_error_set(GS_ERR_NO_MEMORY, "cuda host_alloc: %zu pinned bytes", nbytes);
    void *base = NULL;
    cudaError_t e = cudaHostAlloc(&base, nbytes + GS__CUDA_PIN_HDR, cudaHostAllocPortable);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return e == cudaErrorMemoryAllocation
                   ? gs_error_set(GS_ERR_NO_MEMORY, "cuda host_alloc: %zu pinned bytes", nbytes)
                   : gs__cuda_error((int)e, "cudaHostAlloc");
    }
    gs__pin_hdr_t *h = (gs__pin_hdr_t *)base;
    h->magic = GS__CUDA_PIN_MAGIC;
    h->size = nbytes;
    *ptr_p = (char *)base + GS__CUDA_PIN_HDR;
    return GS_OK;
}

static void gs__pin_release(void *p)
{
    if (cudaFreeHost((char *)p - GS__CUDA_PIN_HDR) != cudaSuccess) (void)cudaGetLastError();
}

void gs__cuda_pinned_free(gs__cuda_pincache_t *c, void *ptr)
{
    if (ptr == NULL) return;
    const gs__pin_hdr_t *h = (const gs__pin_hdr_t *)((char *)ptr - GS__CUDA_PIN_HDR);
    if (h->magic != GS__CUDA_PIN_MAGIC) {
        GS_LOG_ERROR("cuda host_free: %p was not given by host_alloc; not freed", ptr);
        return;
    }
    pthread_mutex_lock(&c->lock);
    if (c->n < GS__CUDA_PIN_SLOTS && h->size <= GS__CUDA_PIN_CACHE_BYTES - c->bytes) {
        c->ptr[c->n] = ptr;
        c->size[c->n] = h->size;
        c->n++;
        c->bytes += h->size;
        ptr = NULL;
    }
    pthread_mutex_unlock(&c->lock);
    if (ptr != NULL) gs__pin_release(ptr);
}

void gs__cuda_pincache_destroy(gs__cuda_pincache_t *c)
{
    for (int i = 0; i < c->n; i++) gs__pin_release(c->ptr[i]);
    if (c->hits > 0)
        GS_LOG_DEBUG("cuda pinned cache: %llu of the host_alloc calls reused a cached buffer",
                     (unsigned long long)c->hits);
    c->n = 0;
    c->bytes = 0;
    pthread_mutex_destroy(&c->lock);
}
