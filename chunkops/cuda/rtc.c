/* Users' CUDA C++ kernels: NVRTC compilation to CUBIN and the on-disk image cache (rtc.h).
 *
 * Cache file layout (all integers little-endian host order; the cache is per machine):
 *     "GSRTC1\n\0"  8 bytes magic
 *     u64 key_len, u64 image_len
 *     key bytes (source, name, prelude, options, arch, NVRTC version, NUL-separated)
 *     image bytes
 * The file name is <hex of gs_hash_bytes(key)>.cubin. A reader compares the whole key, so a
 * hash collision is a miss, never a wrong image. */
#include "chunkops/cuda/rtc.h"
#include "common/alloc.h"
#include "common/error.h"
#include "common/hashmap.h"
#include "common/log.h"

#include <nvrtc.h>

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define GS__RTC_MAGIC "GSRTC1\n"
#define GS__RTC_MAGIC_LEN 8
#define GS__RTC_MAX_IMAGE ((uint64_t)1 << 30)

/* Options every user kernel is compiled with (part of the cache key). --fmad=false as the
 * built-in kernels (chunkops/cuda/CMakeLists.txt): a*b+c rounds twice, as on the CPU. */
static const char *const gs__rtc_opts[] = {"--std=c++17", "--fmad=false", "-default-device"};
#define GS__RTC_NOPTS (sizeof(gs__rtc_opts) / sizeof(gs__rtc_opts[0]))

/* The dtype enumerators, from gsched/array.h's one table */
#define GS__RTC_DT(name, val, str, size, kind) "    " #name " = " #val ",\n"

const char gs_cuda_rtc_prelude[] =
    "enum gs_dtype {\n"
    GS_DTYPE_MAP(GS__RTC_DT)
    "};\n"
    "typedef struct gs_block {\n"
    "    union {\n"
    "        double *data;\n"
    "        double *f64;\n"
    "        float *f32;\n"
    "        unsigned short *f16;\n"
    "        int *i32;\n"
    "        long long *i64;\n"
    "        unsigned char *u8;\n"
    "        bool *b;\n"
    "    };\n"
    "    int ndim;\n"
    "    long long shape[8], start[8];\n"
    "    int dtype;\n"
    "} gs_block_t;\n"
    "typedef struct gs_cuda_args {\n"
    "    int nin;\n"
    "    gs_block_t in[2];\n"
    "    gs_block_t out;\n"
    "    const void *arg;\n"
    "    long long arg_len;\n"
    "    long long n_out;\n"
    "} gs_cuda_args_t;\n";
#undef GS__RTC_DT

/* The device's gs_block_t above has the host's layout (gsched/array.h) */
_Static_assert(offsetof(gs_block_t, ndim) == 8 && offsetof(gs_block_t, shape) == 16 &&
                   offsetof(gs_block_t, start) == 80 && offsetof(gs_block_t, dtype) == 144 &&
                   sizeof(gs_block_t) == 152 && GS_MAX_NDIM == 8,
               "the prelude's gs_block_t no longer matches gsched/array.h's");

static _Thread_local char *gs__rtc_log;

const char *gs_cuda_rtc_last_log(void)
{
    return gs__rtc_log != NULL ? gs__rtc_log : "";
}

gs_status_t gs_cuda_rtc_cache_dir(const char *local_dir, char *buf, size_t len)
{
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int n;
    if (buf == NULL || len == 0)
        return gs_error_set(GS_ERR_INVALID_PARAM, "nvrtc cache directory: no buffer");
    if (local_dir != NULL && local_dir[0] != '\0')
        n = snprintf(buf, len, "%s/nvrtc-cache", local_dir);
    else if (xdg != NULL && xdg[0] == '/')
        n = snprintf(buf, len, "%s/gsched/nvrtc", xdg);
    else if (home != NULL && home[0] != '\0')
        n = snprintf(buf, len, "%s/.cache/gsched/nvrtc", home);
    else
        return gs_error_set(GS_ERR_NOT_FOUND, "nvrtc cache directory: no local directory, "
                            "$XDG_CACHE_HOME or $HOME");
    if (n < 0 || (size_t)n >= len)
        return gs_error_set(GS_ERR_INVALID_PARAM, "nvrtc cache directory: path longer than "
                            "%zu bytes", len - 1);
    return GS_OK;
}

static int gs__rtc_is_ident(const char *s)
{
    if (s[0] == '\0' || !((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z') ||
                          s[0] == '_'))
        return 0;
    for (const char *p = s; *p != '\0'; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '_'))
            return 0;
    return strlen(s) <= 200;
}

/* The cache key (see the top of this file): a new buffer in *key_p of *len_p bytes. */
static gs_status_t gs__rtc_key(const char *source, const char *name, int arch, char **key_p,
                               size_t *len_p)
{
    int major = 0, minor = 0;
    char tail[128];
    size_t ns = strlen(source), nn = strlen(name), np = strlen(gs_cuda_rtc_prelude), nt, off = 0;
    if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) major = minor = -1;
    nt = (size_t)snprintf(tail, sizeof(tail), "sm_%d%cnvrtc %d.%d", arch, '\0', major, minor);
    size_t total = ns + 1 + nn + 1 + np + 1 + nt + 1;
    for (size_t i = 0; i < GS__RTC_NOPTS; i++) total += strlen(gs__rtc_opts[i]) + 1;
    char *key = gs_malloc(total, "nvrtc cache key");
    if (key == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "nvrtc: no memory for a cache key");
    memcpy(key + off, source, ns + 1), off += ns + 1;
    memcpy(key + off, name, nn + 1), off += nn + 1;
    memcpy(key + off, gs_cuda_rtc_prelude, np + 1), off += np + 1;
    for (size_t i = 0; i < GS__RTC_NOPTS; i++) {
        size_t n = strlen(gs__rtc_opts[i]) + 1;
        memcpy(key + off, gs__rtc_opts[i], n), off += n;
    }
    memcpy(key + off, tail, nt), off += nt;
    key[off++] = '\0';
    *key_p = key;
    *len_p = off;
    return GS_OK;
}

/* mkdir -p @a dir (0700 for what it creates). */
static int gs__rtc_mkdirs(const char *dir)
{
    char path[4096];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof(path)) return -1;
    memcpy(path, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (path[i] != '/' && path[i] != '\0') continue;
        char c = path[i];
        path[i] = '\0';
        if (mkdir(path, 0700) != 0 && errno != EEXIST) return -1;
        path[i] = c;
    }
    return 0;
}

/* The cached image for @a key from @a file: GS_OK with a new buffer, GS_ERR_NOT_FOUND on a
 * miss (absent, truncated, another key), GS_ERR_NO_MEMORY. */
static gs_status_t gs__rtc_cache_read(const char *file, const char *key, size_t key_len,
                                      void **image_p, size_t *len_p)
{
    char magic[GS__RTC_MAGIC_LEN];
    uint64_t hdr[2];
    char *fkey = NULL;
    void *image = NULL;
    gs_status_t st = GS_ERR_NOT_FOUND;
    FILE *f = fopen(file, "rb");
    if (f == NULL) return GS_ERR_NOT_FOUND;
    if (fread(magic, 1, sizeof(magic), f) != sizeof(magic) ||
        memcmp(magic, GS__RTC_MAGIC, GS__RTC_MAGIC_LEN) != 0 ||
        fread(hdr, sizeof(hdr[0]), 2, f) != 2 || hdr[0] != key_len || hdr[1] == 0 ||
        hdr[1] > GS__RTC_MAX_IMAGE)
        goto out_close;
    if ((fkey = gs_malloc(key_len, "nvrtc cached key")) == NULL ||
        (image = gs_malloc((size_t)hdr[1], "nvrtc cached image")) == NULL) {
        st = gs_error_set(GS_ERR_NO_MEMORY, "nvrtc: no memory to read a cached image");
        goto out_free;
    }
    if (fread(fkey, 1, key_len, f) != key_len || memcmp(fkey, key, key_len) != 0 ||
        fread(image, 1, (size_t)hdr[1], f) != (size_t)hdr[1] || fgetc(f) != EOF)
        goto out_free;
    gs_free(fkey);
    fclose(f);
    *image_p = image;
    *len_p = (size_t)hdr[1];
    return GS_OK;
out_free:
    gs_free(image);
    gs_free(fkey);
out_close:
    fclose(f);
    return st;
}

/* Write the cache file atomically (temporary name + rename). Failures are logged only. */
static void gs__rtc_cache_write(const char *dir, const char *file, const char *key,
                                size_t key_len, const void *image, size_t len)
{
    char tmp[4200];
    uint64_t hdr[2] = {key_len, len};
    FILE *f;
    int ok;
    if (gs__rtc_mkdirs(dir) != 0) {
        GS_LOG_WARN("nvrtc cache %s cannot be created: %s", dir, strerror(errno));
        return;
    }
    snprintf(tmp, sizeof(tmp), "%s.%ld.tmp", file, (long)getpid());
    if ((f = fopen(tmp, "wb")) == NULL) {
        GS_LOG_WARN("nvrtc cache file %s cannot be written: %s", tmp, strerror(errno));
        return;
    }
    ok = fwrite(GS__RTC_MAGIC, 1, GS__RTC_MAGIC_LEN, f) == GS__RTC_MAGIC_LEN &&
         fwrite(hdr, sizeof(hdr[0]), 2, f) == 2 && fwrite(key, 1, key_len, f) == key_len &&
         fwrite(image, 1, len, f) == len;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, file) != 0) {
        GS_LOG_WARN("nvrtc cache file %s cannot be written: %s", file, strerror(errno));
        unlink(tmp);
    }
}

/* Keep the full log for gs_cuda_rtc_last_log(). */
static void gs__rtc_keep_log(nvrtcProgram prog)
{
    size_t n = 0;
    gs_free(gs__rtc_log);
    gs__rtc_log = NULL;
    if (nvrtcGetProgramLogSize(prog, &n) != NVRTC_SUCCESS || n == 0) return;
    if ((gs__rtc_log = gs_malloc(n, "nvrtc log")) == NULL) return;
    if (nvrtcGetProgramLog(prog, gs__rtc_log) != NVRTC_SUCCESS) gs__rtc_log[0] = '\0';
    gs__rtc_log[n - 1] = '\0';
}

/* Compile with NVRTC: a new image buffer on success. */
static gs_status_t gs__rtc_nvrtc(const char *source, const char *name, int arch,
                                 void **image_p, size_t *len_p)
{
    char arch_opt[32], fname[256];
    const char *opts[GS__RTC_NOPTS + 1];
    nvrtcProgram prog;
    nvrtcResult r;
    size_t n = 0;
    void *image = NULL;
    gs_status_t st;
    size_t plen = strlen(gs_cuda_rtc_prelude), slen = strlen(source);
    /* prelude, then "#line 1" so the user's lines keep their numbers in the log */
    size_t tlen = plen + strlen(name) + 32 + slen + 1;
    char *text = gs_malloc(tlen, "nvrtc source");
    if (text == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "nvrtc: no memory for a source");
    snprintf(text, tlen, "%s#line 1 \"%s.cu\"\n%s", gs_cuda_rtc_prelude, name, source);
    snprintf(fname, sizeof(fname), "%s.cu", name);
    snprintf(arch_opt, sizeof(arch_opt), "-arch=sm_%d", arch);
    for (size_t i = 0; i < GS__RTC_NOPTS; i++) opts[i] = gs__rtc_opts[i];
    opts[GS__RTC_NOPTS] = arch_opt;

    if ((r = nvrtcCreateProgram(&prog, text, fname, 0, NULL, NULL)) != NVRTC_SUCCESS) {
        st = gs_error_set(r == NVRTC_ERROR_OUT_OF_MEMORY ? GS_ERR_NO_MEMORY : GS_ERR_UNSUPPORTED,
                          "nvrtcCreateProgram: %s", nvrtcGetErrorString(r));
        goto err_text;
    }
    r = nvrtcCompileProgram(prog, (int)(GS__RTC_NOPTS + 1), opts);
    gs__rtc_keep_log(prog);
    if (r == NVRTC_ERROR_COMPILATION) {
        st = gs_error_set(GS_ERR_TASK_FAILED, "cuda kernel %s does not compile: %s", name,
                          gs_cuda_rtc_last_log());
        goto err_prog;
    }
    if (r != NVRTC_SUCCESS) {
        st = gs_error_set(r == NVRTC_ERROR_INVALID_OPTION ? GS_ERR_INVALID_PARAM
                                                          : GS_ERR_UNSUPPORTED,
                          "nvrtcCompileProgram (%s): %s", arch_opt, nvrtcGetErrorString(r));
        goto err_prog;
    }
    if ((r = nvrtcGetCUBINSize(prog, &n)) != NVRTC_SUCCESS || n == 0) {
        st = gs_error_set(GS_ERR_UNSUPPORTED, "nvrtcGetCUBINSize: %s", nvrtcGetErrorString(r));
        goto err_prog;
    }
    if ((image = gs_malloc(n, "nvrtc image")) == NULL) {
        st = gs_error_set(GS_ERR_NO_MEMORY, "nvrtc: no memory for an image of %zu bytes", n);
        goto err_prog;
    }
    if ((r = nvrtcGetCUBIN(prog, image)) != NVRTC_SUCCESS) {
        st = gs_error_set(GS_ERR_UNSUPPORTED, "nvrtcGetCUBIN: %s", nvrtcGetErrorString(r));
        goto err_image;
    }
    nvrtcDestroyProgram(&prog);
    gs_free(text);
    *image_p = image;
    *len_p = n;
    return GS_OK;
err_image:
    gs_free(image);
err_prog:
    nvrtcDestroyProgram(&prog);
err_text:
    gs_free(text);
    return st;
}

/* Whether @a source names @a name as an identifier at all (a cheap check before compiling:
 * NVRTC accepts a source without the kernel, the load would fail much later). */
static int gs__rtc_mentions(const char *source, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = strstr(source, name); p != NULL; p = strstr(p + 1, name)) {
        char b = p == source ? ' ' : p[-1], a = p[n];
        int ib = (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') || (b >= '0' && b <= '9') ||
                 b == '_';
        int ia = (a >= 'a' && a <= 'z') || (a >= 'A' && a <= 'Z') || (a >= '0' && a <= '9') ||
                 a == '_';
        if (!ib && !ia) return 1;
    }
    return 0;
}

gs_status_t gs_cuda_rtc_compile(const char *source, const char *name, int arch,
                                const char *cache_dir, void **image_p, size_t *len_p,
                                int *cached_p)
{
    char *key = NULL, file[4096];
    size_t key_len = 0, len = 0;
    void *image = NULL;
    gs_status_t st;
    if (source == NULL || name == NULL || image_p == NULL || len_p == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "nvrtc compile: NULL argument");
    if (!gs__rtc_is_ident(name))
        return gs_error_set(GS_ERR_INVALID_PARAM, "cuda kernel name \"%.64s\" is not a C "
                            "identifier", name);
    if (arch < 10 || arch > 999)
        return gs_error_set(GS_ERR_INVALID_PARAM, "cuda kernel %s: architecture sm_%d out of "
                            "range", name, arch);
    if (!gs__rtc_mentions(source, name))
        return gs_error_set(GS_ERR_INVALID_PARAM, "cuda kernel %s: the source does not define "
                            "it (extern \"C\" __global__ void %s(gs_cuda_args_t a))", name, name);
    if ((st = gs__rtc_key(source, name, arch, &key, &key_len)) != GS_OK) return st;
    if (cache_dir != NULL) {
        int n = snprintf(file, sizeof(file), "%s/%016llx.cubin", cache_dir,
                         (unsigned long long)gs_hash_bytes(key, key_len));
        if (n < 0 || (size_t)n >= sizeof(file)) {
            st = gs_error_set(GS_ERR_INVALID_PARAM, "nvrtc cache directory path too long");
            goto out_key;
        }
        st = gs__rtc_cache_read(file, key, key_len, &image, &len);
        if (st == GS_OK) {
            if (cached_p != NULL) *cached_p = 1;
            goto done;
        }
        if (st != GS_ERR_NOT_FOUND) goto out_key;
    }
    if ((st = gs__rtc_nvrtc(source, name, arch, &image, &len)) != GS_OK) goto out_key;
    if (cache_dir != NULL) gs__rtc_cache_write(cache_dir, file, key, key_len, image, len);
    if (cached_p != NULL) *cached_p = 0;
done:
    gs_free(key);
    *image_p = image;
    *len_p = len;
    return GS_OK;
out_key:
    gs_free(key);
    return st;
}
