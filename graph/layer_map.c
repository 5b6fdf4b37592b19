/* USER layers (gs_array_map_blocks; stencil_int.h): per block its inputs (each with its
 * length, shape and global start), the kernel's name and arg, the dtypes of its inputs and
 * output. Checks, instantiation to gs_kuser_t, the wire body. */
#include "graph/stencil_int.h"

#include <string.h>

#define GS__UBOX_W(nd) (1 + 2 * (int64_t)(nd))

void gs__user_free(gs_layer_t *l)
{
    gs_free(l->u.ub.ioff);
    gs_free(l->u.ub.ibox);
    gs__ukernel_free(l->u.ub.user);
    gs__ufuse_free(l->u.ub.fuse);
    l->u.ub.ioff = l->u.ub.ibox = NULL;
    l->u.ub.user = NULL;
    l->u.ub.fuse = NULL;
}

/* Inputs the kernel itself takes in block @a block. */
static int gs__user_nkin(const gs_layer_t *l, uint64_t block)
{
    return (int)(l->u.ub.ioff[block + 1] - l->u.ub.ioff[block]);
}

int gs__user_ninputs(const gs_layer_t *l, uint64_t block)
{
    if (l->u.ub.fuse != NULL) return gs__ufuse_ninputs(l, block);
    return gs__user_nkin(l, block);
}

int gs__user_check(const gs_layer_t *l, const char **why_p)
{
    const int32_t nd = l->grid.ndim;
    const uint64_t nb = gs_grid_nblocks(&l->grid);
    const int64_t *ioff = l->u.ub.ioff;
    if (ioff == NULL || l->u.ub.ibox == NULL || l->u.ub.user == NULL) {
        *why_p = "user layer without tables or kernel";
        return 0;
    }
    if (ioff[0] != 0) {
        *why_p = "user layer input table does not start at 0";
        return 0;
    }
    for (uint64_t b = 0; b < nb; b++) {
        int64_t ni = ioff[b + 1] - ioff[b];
        if (ni < 1 || ni > GS_KERNEL_MAX_USER_IN) {
            *why_p = "a user block has a bad number of inputs";
            return 0;
        }
        for (int64_t i = ioff[b]; i < ioff[b + 1]; i++) {
            const int64_t *t = l->u.ub.ibox + i * GS__UBOX_W(nd);
            int64_t v = 1, nz = 1;   /* the length; the product of the nonzero extents */
            for (int32_t j = 0; j < nd; j++) {
                if (t[1 + j] < 0) {
                    *why_p = "a user input has a negative extent";
                    return 0;
                }
                /* bounded whatever comes after (an extent of 0 further on once let an
                 * overflowed product stand for the length of an empty block) */
                if (t[1 + j] > 0 && nz > GS__MAX_ELEMENTS / t[1 + j]) {
                    *why_p = "a user input is too large";
                    return 0;
                }
                if (t[1 + j] > 0) nz *= t[1 + j];
                v *= t[1 + j];
            }
            if (v != t[0]) {
                *why_p = "a user input's length does not match its shape";
                return 0;
            }
        }
    }
    if (l->u.ub.user->flags & ~GS_KERNEL_ELEMENTWISE) {
        *why_p = "a user kernel has unknown flags";
        return 0;
    }
    if (l->u.ub.out_dtype < 0 || l->u.ub.out_dtype >= GS_DTYPE_COUNT) {
        *why_p = "a user kernel's output dtype is unknown";
        return 0;
    }
    for (int k = 0; k < GS_KERNEL_MAX_USER_IN; k++)
        if (l->u.ub.in_dtype[k] < 0 || l->u.ub.in_dtype[k] >= GS_DTYPE_COUNT) {
            *why_p = "a user kernel's input dtype is unknown";
            return 0;
        }
    return l->u.ub.fuse == NULL || gs__ufuse_check(l, why_p);
}

uint64_t gs__user_ref_nbytes(const gs_chunk_ref_t *r)
{
    return r->nbytes != 0 ? r->nbytes : (uint64_t)r->len * sizeof(double);
}

int gs__user_ref_fits(const gs_chunk_ref_t *r, int64_t n, int32_t dtype)
{
    if (r->data == NULL) return 0;
    if (dtype == GS_DTYPE_FLOAT64)   /* len counts doubles; nbytes (when set) agrees */
        return r->len == n && (r->nbytes == 0 || r->nbytes == (uint64_t)n * sizeof(double));
    return r->nbytes == (uint64_t)n * gs_dtype_size((gs_dtype_t)dtype);
}

int gs__user_typed(const gs_layer_t *l)
{
    if (l->u.ub.out_dtype != GS_DTYPE_FLOAT64) return 1;
    for (int k = 0; k < GS_KERNEL_MAX_USER_IN; k++)
        if (l->u.ub.in_dtype[k] != GS_DTYPE_FLOAT64) return 1;
    return 0;
}

void gs__user_fill(const gs_layer_t *l, uint64_t block, gs_kuser_t *k)
{
    const int32_t nd = l->grid.ndim;
    memset(k, 0, sizeof(*k));
    k->lib = l->u.ub.user->library;
    k->cuda_src = l->u.ub.user->cuda_src;
    if (k->cuda_src != NULL) k->lib = NULL;
    k->sym = l->u.ub.user->symbol;
    k->arg_len = l->u.ub.user->arg_len;
    k->arg = k->arg_len > 0 ? l->u.ub.user->arg : NULL;
    k->nin = gs__user_nkin(l, block);
    for (int i = 0; i < k->nin; i++) {
        const int64_t *t = l->u.ub.ibox + (l->u.ub.ioff[block] + i) * GS__UBOX_W(nd);
        k->in[i].ndim = nd;
        k->in[i].dtype = l->u.ub.in_dtype[i];
        k->in_len[i] = t[0];
        for (int32_t j = 0; j < nd; j++) {
            k->in[i].shape[j] = t[1 + j];
            k->in[i].start[j] = t[1 + nd + j];
        }
    }
    k->out.ndim = nd;
    k->out.dtype = l->u.ub.out_dtype;
    gs_grid_block_region(&l->grid, block, k->out.start, k->out.shape);
}

gs_status_t gs__user_instantiate(const gs_layer_t *l, uint64_t block, int ninputs,
                                 const gs_chunk_ref_t *inputs, double *out, gs_kuser_t *k)
{
    const int expected = gs__user_nkin(l, block);
    if (ninputs != expected || inputs == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "block %llu of a user layer expects %d inputs, "
                            "got %d", (unsigned long long)block, expected, ninputs);
    gs__user_fill(l, block, k);
    for (int i = 0; i < ninputs; i++) {
        if (!gs__user_ref_fits(&inputs[i], k->in_len[i], k->in[i].dtype))
            return gs_error_set(GS_ERR_INVALID_PARAM, "input %d of a user task has %llu bytes, "
                                "expected %lld %s elements", i,
                                (unsigned long long)gs__user_ref_nbytes(&inputs[i]),
                                (long long)k->in_len[i], gs_dtype_name((gs_dtype_t)k->in[i].dtype));
        k->in[i].data = (double *)inputs[i].data;
    }
    k->out.data = out;
    return GS_OK;
}

void gs__user_encode_body(gs_mp_writer_t *w, const gs_layer_t *l)
{
    const uint64_t nb = gs_grid_nblocks(&l->grid);
    const int64_t ni = l->u.ub.ioff[nb], nbox = ni * GS__UBOX_W(l->grid.ndim);
    const gs__ukernel_t *u = l->u.ub.user;
    /* a 6th field, the CUDA source, only for CUDA kernels (CPU kernels keep the 5-field form);
     * flags and fusion in the 8-field form only where there are any */
    const int typed = gs__user_typed(l), ext = typed || u->flags != 0 || l->u.ub.fuse != NULL;
    gs_mp_write_array(w, typed ? 9 : ext ? 8 : u->cuda_src != NULL ? 6 : 5);
    gs_mp_write_array(w, (uint32_t)(nb + 1));
    for (uint64_t b = 0; b <= nb; b++) gs_mp_write_i64(w, l->u.ub.ioff[b]);
    gs_mp_write_array(w, (uint32_t)nbox);
    for (int64_t i = 0; i < nbox; i++) gs_mp_write_i64(w, l->u.ub.ibox[i]);
    gs_mp_write_str(w, u->library, strlen(u->library));
    gs_mp_write_str(w, u->symbol, strlen(u->symbol));
    gs_mp_write_bin(w, u->arg, u->arg_len);
    if (u->cuda_src != NULL) gs_mp_write_str(w, u->cuda_src, strlen(u->cuda_src));
    else if (ext) gs_mp_write_str(w, "", 0);
    if (!ext) return;
    gs_mp_write_u64(w, u->flags);
    gs__ufuse_encode(w, l);
    if (!typed) return;
    gs_mp_write_array(w, 1 + GS_KERNEL_MAX_USER_IN);
    gs_mp_write_i64(w, l->u.ub.out_dtype);
    for (int k = 0; k < GS_KERNEL_MAX_USER_IN; k++) gs_mp_write_i64(w, l->u.ub.in_dtype[k]);
}

int gs__user_decode_body(gs_mp_reader_t *r, gs_layer_t *l)
{
    const uint64_t nb = gs_grid_nblocks(&l->grid);
    uint32_t m, n;
    const char *lib, *sym;
    const uint8_t *arg;
    uint32_t nl, ns, na;
    char lb[4096], sb[1024];
    gs_status_t st;
    if (!gs_mp_read_array(r, &m)) return 0;
    if (m != 5 && m != 6 && m != 8 && m != 9)
        return gs_mp_fail(r, "user body must have 5, 6, 8 or 9 fields");
    if (!gs_mp_read_array(r, &n)) return 0;
    if ((uint64_t)n != nb + 1) return gs_mp_fail(r, "user input offsets do not match the grid");
    l->u.ub.ioff = gs_malloc(((size_t)n + 1) * sizeof(int64_t), "user input offsets");
    if (l->u.ub.ioff == NULL) goto nomem;
    for (uint32_t i = 0; i < n; i++) {
        if (!gs_mp_read_i64(r, &l->u.ub.ioff[i])) return 0;
        if (i > 0 && (l->u.ub.ioff[i] < l->u.ub.ioff[i - 1] ||
                      l->u.ub.ioff[i] - l->u.ub.ioff[i - 1] > GS_KERNEL_MAX_USER_IN))
            return gs_mp_fail(r, "user input offsets out of order");
    }
    if (!gs_mp_read_array(r, &n)) return 0;
    if ((int64_t)n != l->u.ub.ioff[nb] * GS__UBOX_W(l->grid.ndim))
        return gs_mp_fail(r, "user input table does not match its offsets");
    l->u.ub.ibox = gs_malloc(((size_t)n + 1) * sizeof(int64_t), "user input table");
    if (l->u.ub.ibox == NULL) goto nomem;
    for (uint32_t i = 0; i < n; i++)
        if (!gs_mp_read_i64(r, &l->u.ub.ibox[i])) return 0;
    if (!gs_mp_read_str(r, &lib, &nl) || !gs_mp_read_str(r, &sym, &ns) ||
        !gs_mp_read_bin(r, &arg, &na))
        return 0;
    if (nl == 0 || nl >= sizeof(lb) || ns == 0 || ns >= sizeof(sb) || memchr(lib, 0, nl) != NULL ||
        memchr(sym, 0, ns) != NULL)
        return gs_mp_fail(r, "user kernel names are empty, too long or hold NUL");
    memcpy(lb, lib, nl);
    lb[nl] = '\0';
    memcpy(sb, sym, ns);
    sb[ns] = '\0';
    if ((st = gs__ukernel_copy(lb, sb, arg, na, &l->u.ub.user)) != GS_OK) {
        r->err = st == GS_ERR_NO_MEMORY ? st : GS_ERR_PROTO;
        return 0;
    }
    if (m >= 6) {
        const char *src;
        uint32_t nsrc;
        char *c;
        if (!gs_mp_read_str(r, &src, &nsrc)) return 0;
        if (m >= 8 && nsrc == 0) goto flags;   /* a CPU kernel */
        if (nsrc == 0 || nsrc > GS__UKERNEL_MAX_SRC || memchr(src, 0, nsrc) != NULL)
            return gs_mp_fail(r, "cuda kernel source is empty, too long or holds NUL");
        if ((c = gs_malloc((size_t)nsrc + 1, "cuda kernel source")) == NULL) goto nomem;
        memcpy(c, src, nsrc);
        c[nsrc] = '\0';
        l->u.ub.user->cuda_src = c;
    }
flags:
    if (m >= 8) {
        uint64_t fl;
        if (!gs_mp_read_u64(r, &fl)) return 0;
        if (fl & ~(uint64_t)GS_KERNEL_ELEMENTWISE) return gs_mp_fail(r, "unknown user kernel flags");
        l->u.ub.user->flags = (uint32_t)fl;
        if (!gs__ufuse_decode(r, l)) return 0;
    }
    if (m == 9) {   /* dtypes: [out, in_0 .. in_{GS_KERNEL_MAX_USER_IN-1}] */
        int64_t dt[1 + GS_KERNEL_MAX_USER_IN];
        if (!gs_mp_read_array(r, &n)) return 0;
        if (n != 1 + GS_KERNEL_MAX_USER_IN) return gs_mp_fail(r, "user dtypes of a wrong length");
        for (uint32_t i = 0; i < n; i++) {
            if (!gs_mp_read_i64(r, &dt[i])) return 0;
            if (dt[i] < 0 || dt[i] >= GS_DTYPE_COUNT) return gs_mp_fail(r, "unknown user dtype");
        }
        l->u.ub.out_dtype = (int32_t)dt[0];
        for (int k = 0; k < GS_KERNEL_MAX_USER_IN; k++) l->u.ub.in_dtype[k] = (int32_t)dt[1 + k];
    }
    return 1;
nomem:
    r->err = gs_error_set(GS_ERR_NO_MEMORY, "out of memory decoding a user layer");
    return 0;
}
