/* Users' CUDA C++ kernels compiled with NVRTC (chunkops/cuda/rtc.h, issue 16). Compilation
 * needs no GPU, so every test here runs on any machine with the CUDA toolkit. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "chunkops/cuda/rtc.h"
#include "common/alloc.h"
#include "tests/kernels/test_kernels_cuda.h"
#include "tests/tmp_tree.h"

#define ARCH 90

static const char k_scale[] =
    "extern \"C\" __global__ void scale(gs_cuda_args_t a)\n"
    "{\n"
    "    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i < a.n_out) a.out.data[i] = 2.0 * a.in[0].data[i];\n"
    "}\n";

/* line 3 lacks a semicolon */
static const char k_broken[] =
    "extern \"C\" __global__ void scale(gs_cuda_args_t a)\n"
    "{\n"
    "    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x\n"
    "    if (i < a.n_out) a.out.data[i] = 2.0 * a.in[0].data[i];\n"
    "}\n";

/* the prelude's typed members and dtype names */
static const char k_typed[] = GS_TEST_TYPED_CUDA_SRC;

static char dir[256];

static void setup_dir(void)
{
    snprintf(dir, sizeof(dir), "/tmp/gs-test-rtc-%ld", (long)getpid());
    tmp_tree_remove(dir);
}

static void teardown_dir(void)
{
    tmp_tree_remove(dir);
}

static void compile_ok(const char *src, const char *name, const char *cache, void **img,
                       size_t *len, int *cached)
{
    gs_status_t st = gs_cuda_rtc_compile(src, name, ARCH, cache, img, len, cached);
    cr_assert_eq(st, GS_OK, "compile: %s: %s", gs_status_string(st), gs_last_error());
    cr_assert_gt(*len, 4);
    cr_assert(memcmp(*img, "\177ELF", 4) == 0, "the image is a CUBIN (ELF)");
}

Test(chunkops_cuda_rtc, compiles_a_kernel_to_a_cubin_without_a_gpu)
{
    void *img = NULL;
    size_t len = 0;
    int cached = -1;
    compile_ok(k_scale, "scale", NULL, &img, &len, &cached);
    cr_assert_eq(cached, 0);
    gs_free(img);
}

Test(chunkops_cuda_rtc, a_syntax_error_returns_the_log_naming_the_line)
{
    void *img = (void *)0x1;
    size_t len = 7;
    gs_status_t st = gs_cuda_rtc_compile(k_broken, "scale", ARCH, NULL, &img, &len, NULL);
    cr_assert_eq(st, GS_ERR_TASK_FAILED, "%s", gs_status_string(st));
    cr_assert_not_null(strstr(gs_last_error(), "cuda kernel scale does not compile"), "%s",
                       gs_last_error());
    cr_assert_not_null(strstr(gs_last_error(), "scale.cu(3)"), "log names line 3: %s",
                       gs_last_error());
    cr_assert_not_null(strstr(gs_cuda_rtc_last_log(), "error"), "%s", gs_cuda_rtc_last_log());
    cr_assert_eq(img, (void *)0x1, "outputs untouched on failure");
    cr_assert_eq(len, 7);
}

Test(chunkops_cuda_rtc, the_disk_cache_is_hit_the_second_time, .init = setup_dir,
     .fini = teardown_dir)
{
    void *a = NULL, *b = NULL;
    size_t la = 0, lb = 0;
    int cached = -1;
    char sub[300];
    snprintf(sub, sizeof(sub), "%s/deep/er", dir);   /* created on first use */
    compile_ok(k_scale, "scale", sub, &a, &la, &cached);
    cr_assert_eq(cached, 0, "first compilation is a miss");
    cr_assert_eq(tmp_tree_count(sub, ".cubin"), 1);
    cr_assert_eq(tmp_tree_count(sub, ".tmp"), 0, "no temporary file left behind");
    compile_ok(k_scale, "scale", sub, &b, &lb, &cached);
    cr_assert_eq(cached, 1, "second compilation of the same source is a hit");
    cr_assert_eq(la, lb);
    cr_assert(memcmp(a, b, la) == 0);
    cr_assert_eq(tmp_tree_count(sub, ".cubin"), 1);
    gs_free(a);
    gs_free(b);
}

Test(chunkops_cuda_rtc, a_different_source_or_arch_misses_the_cache, .init = setup_dir,
     .fini = teardown_dir)
{
    void *img = NULL;
    size_t len = 0;
    int cached = -1;
    char other[sizeof(k_scale) + 32];
    compile_ok(k_scale, "scale", dir, &img, &len, &cached);
    gs_free(img);
    /* same kernel, one character changed */
    snprintf(other, sizeof(other), "%s", k_scale);
    *strstr(other, "2.0") = '3';
    compile_ok(other, "scale", dir, &img, &len, &cached);
    cr_assert_eq(cached, 0, "a changed source is compiled again");
    gs_free(img);
    cr_assert_eq(tmp_tree_count(dir, ".cubin"), 2);
    cr_assert_eq(gs_cuda_rtc_compile(k_scale, "scale", 80, dir, &img, &len, &cached), GS_OK,
                 "%s", gs_last_error());
    cr_assert_eq(cached, 0, "another architecture is compiled again");
    gs_free(img);
    cr_assert_eq(tmp_tree_count(dir, ".cubin"), 3);
    compile_ok(k_scale, "scale", dir, &img, &len, &cached);
    cr_assert_eq(cached, 1, "the first image is still cached");
    gs_free(img);
}

/* The single cache file of @a d, into @a path. */
static void only_file(const char *d, char *path, size_t n)
{
    DIR *dd = opendir(d);
    struct dirent *de;
    path[0] = '\0';
    cr_assert_not_null(dd);
    while ((de = readdir(dd)) != NULL)
        if (strstr(de->d_name, ".cubin") != NULL) tmp_path_join(path, n, d, de->d_name);
    closedir(dd);
    cr_assert_neq(path[0], '\0');
}

Test(chunkops_cuda_rtc, a_truncated_or_foreign_cache_file_is_a_miss_and_rewritten,
     .init = setup_dir, .fini = teardown_dir)
{
    void *a = NULL, *b = NULL;
    size_t la = 0, lb = 0;
    int cached = -1;
    char path[512];
    struct stat sb;
    compile_ok(k_scale, "scale", dir, &a, &la, &cached);
    only_file(dir, path, sizeof(path));
    cr_assert_eq(truncate(path, 40), 0);
    compile_ok(k_scale, "scale", dir, &b, &lb, &cached);
    cr_assert_eq(cached, 0, "a truncated file is not used");
    cr_assert(la == lb && memcmp(a, b, la) == 0);
    gs_free(b);
    cr_assert_eq(stat(path, &sb), 0);
    cr_assert_gt(sb.st_size, (off_t)la, "the file is rewritten whole");
    /* same name, another key inside (as a hash collision would give): a miss */
    FILE *f = fopen(path, "r+b");
    cr_assert_not_null(f);
    cr_assert_eq(fseek(f, 8 + 16, SEEK_SET), 0);
    cr_assert_eq(fputc('X', f), 'X');
    fclose(f);
    compile_ok(k_scale, "scale", dir, &b, &lb, &cached);
    cr_assert_eq(cached, 0, "a file holding another key is not used");
    cr_assert(la == lb && memcmp(a, b, la) == 0);
    gs_free(b);
    compile_ok(k_scale, "scale", dir, &b, &lb, &cached);
    cr_assert_eq(cached, 1);
    gs_free(a);
    gs_free(b);
}

Test(chunkops_cuda_rtc, rejects_bad_names_arches_and_sources_without_the_kernel)
{
    void *img = NULL;
    size_t len = 0;
    cr_assert_eq(gs_cuda_rtc_compile(NULL, "scale", ARCH, NULL, &img, &len, NULL),
                 GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_cuda_rtc_compile(k_scale, "sca le", ARCH, NULL, &img, &len, NULL),
                 GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_cuda_rtc_compile(k_scale, "1scale", ARCH, NULL, &img, &len, NULL),
                 GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_cuda_rtc_compile(k_scale, "scale", 5, NULL, &img, &len, NULL),
                 GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_cuda_rtc_compile(k_scale, "scal", ARCH, NULL, &img, &len, NULL),
                 GS_ERR_INVALID_PARAM, "a name that only prefixes another is not found");
    cr_assert_not_null(strstr(gs_last_error(), "does not define"), "%s", gs_last_error());
    cr_assert_null(img);
}

Test(chunkops_cuda_rtc, the_cache_directory_follows_local_dir_then_xdg_then_home)
{
    char buf[256];
    setenv("XDG_CACHE_HOME", "/x/cache", 1);
    setenv("HOME", "/h", 1);
    cr_assert_eq(gs_cuda_rtc_cache_dir("/w/local", buf, sizeof(buf)), GS_OK);
    cr_assert_str_eq(buf, "/w/local/nvrtc-cache");
    cr_assert_eq(gs_cuda_rtc_cache_dir(NULL, buf, sizeof(buf)), GS_OK);
    cr_assert_str_eq(buf, "/x/cache/gsched/nvrtc");
    unsetenv("XDG_CACHE_HOME");
    cr_assert_eq(gs_cuda_rtc_cache_dir("", buf, sizeof(buf)), GS_OK);
    cr_assert_str_eq(buf, "/h/.cache/gsched/nvrtc");
    unsetenv("HOME");
    cr_assert_eq(gs_cuda_rtc_cache_dir(NULL, buf, sizeof(buf)), GS_ERR_NOT_FOUND);
    cr_assert_eq(gs_cuda_rtc_cache_dir("/w/local", buf, 8), GS_ERR_INVALID_PARAM);
}

Test(chunkops_cuda_rtc, a_kernel_on_typed_blocks_compiles_and_the_prelude_names_every_dtype)
{
    void *img = NULL;
    size_t len = 0;
    compile_ok(k_typed, "typed", NULL, &img, &len, NULL);
    gs_free(img);
    /* every gs_dtype_t is named in the prelude with its value, and the block has its dtype */
#define NAMED(name, val, str, size, kind) \
    cr_assert_not_null(strstr(gs_cuda_rtc_prelude, #name " = " #val ","), "%s", #name);
    GS_DTYPE_MAP(NAMED)
#undef NAMED
    cr_assert_not_null(strstr(gs_cuda_rtc_prelude, "int dtype;"));
    /* a kernel written before dtypes (a.in[0].data) still compiles */
    compile_ok(k_scale, "scale", NULL, &img, &len, NULL);
    gs_free(img);
}
