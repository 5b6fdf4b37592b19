/* Array files on real gsched + 2 CPU gworker processes on loopback: .npy files written by
 * numpy are read by the workers and files the workers write are read by numpy (python3-numpy;
 * the test skips, saying so, without it); bad files fail the graph with an error naming the
 * file, and the daemons go on serving. */
#include "cluster.h"

#include <gsched/gsched.h>

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static tcluster_t CL;
static gs_client_h C;
static char dir[64];

static void up2(void)
{
    alarm(120);
    snprintf(dir, sizeof(dir), "/tmp/gs-itest-files-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    cr_assert(tc_start(&CL, 2, NULL, NULL), "cluster did not start");
    C = tc_connect(&CL, GS_LOWER_DEFAULT);
    cr_assert_not_null(C, "%s", gs_last_error());
}

static void down(void)
{
    char cmd[128];
    gs_client_destroy(C);
    C = NULL;
    tp_kill_all();
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", dir);
}

#define OK(call) cr_assert_eq((call), GS_OK, "%s: %s", #call, gs_last_error())

/* The first Python with numpy: $GS_TEST_PYTHON, python3 on the PATH, Debian's python3. */
static const char *python;

static int have_numpy(void)
{
    const char *cands[3] = {getenv("GS_TEST_PYTHON"), "python3", "/usr/bin/python3"};
    for (int i = 0; i < 3; i++) {
        char cmd[512];
        if (cands[i] == NULL || !cands[i][0]) continue;
        snprintf(cmd, sizeof(cmd), "%s -c 'import numpy' >/dev/null 2>&1", cands[i]);
        if (system(cmd) == 0) {
            python = cands[i];
            return 1;
        }
    }
    return 0;
}

static int py(const char *code)
{
    char cmd[4096];
    snprintf(cmd, sizeof(cmd), "cd %s && %s -c \"%s\"", dir, python, code);
    return system(cmd);
}

static double sum_of(gs_array_h a)
{
    gs_array_h s;
    double v = NAN;
    OK(gs_array_reduce(GS_RED_SUM, a, NULL, &s));
    OK(gs_client_compute_scalar(C, s, &v));
    gs_array_release(s);
    return v;
}

Test(integration_files, numpy_files_round_trip_through_the_workers, .init = up2, .fini = down)
{
    char path[160], out[160];
    const int64_t chunks[2] = {17, 6};
    if (!have_numpy()) cr_skip_test("python3-numpy is not installed (.ci/install-deps.sh)");
    /* numpy writes C-order float64, Fortran-order float32 and big-endian int32 files */
    cr_assert_eq(py("import numpy as np\n"
                    "i, j = np.meshgrid(np.arange(50), np.arange(21), indexing='ij')\n"
                    "a = i * 1000.0 + j + 0.5\n"
                    "np.save('c.npy', a)\n"
                    "np.save('f.npy', np.asfortranarray(a.astype(np.float32)))\n"
                    "np.save('i.npy', (i * 1000 + j).astype('>i4'))\n"), 0);
    const char *names[3] = {"c.npy", "f.npy", "i.npy"};
    for (int k = 0; k < 3; k++) {
        gs_array_h x, s;
        double *got = malloc(50 * 21 * sizeof(double));
        snprintf(path, sizeof(path), "%s/%s", dir, names[k]);
        OK(gs_array_from_npy(path, chunks, &x));
        OK(gs_client_compute(C, x, got, 50 * 21));
        for (int i = 0; i < 50; i++)
            for (int j = 0; j < 21; j++)
                cr_assert_eq(got[i * 21 + j], i * 1000.0 + j + (k == 2 ? 0.0 : 0.5), "%s (%d, %d)",
                             names[k], i, j);
        /* a slice read straight from the file */
        gs_slice_t sl[2] = {{3, 50, 4, GS_SLICE_HAS_START}, {20, 0, -3, GS_SLICE_HAS_START}};
        OK(gs_array_slice(x, 2, sl, &s));
        double want = 0;
        for (int i = 3; i < 50; i += 4)
            for (int j = 20; j >= 0; j -= 3) want += i * 1000.0 + j + (k == 2 ? 0.0 : 0.5);
        cr_assert_eq(sum_of(s), want, "%s: slice sum", names[k]);
        gs_array_release(s);
        gs_array_release(x);
        free(got);
    }
    /* the workers write 2 x + 1 of the C-order file; numpy reads it back */
    {
        gs_array_h x, y;
        snprintf(path, sizeof(path), "%s/c.npy", dir);
        snprintf(out, sizeof(out), "%s/y.npy", dir);
        OK(gs_array_from_npy(path, chunks, &x));
        OK(gs_array_binary_scalar(GS_BINARY_MUL, x, 2.0, &y));
        gs_array_release(x);
        x = y;
        OK(gs_array_binary_scalar(GS_BINARY_ADD, x, 1.0, &y));
        OK(gs_client_to_npy(C, y, out));
        cr_assert_eq(py("import numpy as np, glob\n"
                        "y = np.load('y.npy')\n"
                        "a = np.load('c.npy')\n"
                        "assert y.dtype == np.float64 and y.shape == (50, 21), (y.dtype, y.shape)\n"
                        "assert np.array_equal(y, 2 * a + 1)\n"
                        "assert not glob.glob('*gs-tmp*'), glob.glob('*gs-tmp*')\n"), 0,
                     "numpy does not read back what the workers wrote");
        gs_array_release(y);
        gs_array_release(x);
    }
}

Test(integration_files, bad_files_fail_the_graph_naming_the_file, .init = up2, .fini = down)
{
    char path[160];
    const int64_t shape[2] = {40, 30}, chunks[2] = {10, 30};
    double *d = calloc(40 * 30, sizeof(double));
    gs_array_h x;
    gs_status_t st;
    FILE *f;
    for (int i = 0; i < 40 * 30; i++) d[i] = i;
    snprintf(path, sizeof(path), "%s/d.raw", dir);
    f = fopen(path, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(d, sizeof(double), 40 * 30, f), 40 * 30);
    fclose(f);
    OK(gs_array_from_raw(path, GS_DTYPE_FLOAT64, 2, shape, GS_ORDER_C, 0, chunks, &x));
    cr_assert_eq(sum_of(x), 40.0 * 30 * (40 * 30 - 1) / 2);
    /* the file shrinks: the graph fails, the message names the file */
    cr_assert_eq(truncate(path, 8 * 100), 0);
    {
        gs_array_h s;
        double v;
        OK(gs_array_reduce(GS_RED_SUM, x, NULL, &s));
        st = gs_client_compute_scalar(C, s, &v);
        cr_assert_neq(st, GS_OK);
        cr_assert_not_null(strstr(gs_last_error(), "d.raw"), "%s", gs_last_error());
        gs_array_release(s);
    }
    /* unwritable target: nothing appears, and the daemons still serve */
    {
        char bad[200];
        snprintf(bad, sizeof(bad), "%s/nodir/o.npy", dir);
        gs_array_h y;
        OK(gs_array_arange(0, 1, 2, shape, chunks, &y));
        st = gs_client_to_npy(C, y, bad);
        cr_assert_neq(st, GS_OK);
        cr_assert_not_null(strstr(gs_last_error(), "nodir/o.npy"), "%s", gs_last_error());
        cr_assert_eq(access(bad, F_OK), -1);
        cr_assert_eq(sum_of(y), 40.0 * 30 * (40 * 30 - 1) / 2, "the cluster still computes");
        gs_array_release(y);
    }
    gs_array_release(x);
    free(d);
}

static int have_zarr(void)
{
    char cmd[512];
    if (!have_numpy()) return 0;
    snprintf(cmd, sizeof(cmd), "%s -c 'import zarr, numcodecs' >/dev/null 2>&1", python);
    return system(cmd) == 0;
}

/* zarr-python (Debian's python3-zarr 2.13: format 2; its format 3 is an older draft than the
 * one gsched reads, so v3 stores are checked against the specification in tests/graph). */
Test(integration_files, zarr_v2_stores_round_trip_through_the_zarr_library, .init = up2,
     .fini = down)
{
    char path[160];
    if (!have_zarr()) cr_skip_test("python3-zarr is not installed (apt-get install python3-zarr)");
    cr_assert_eq(py("import numpy as np, zarr, numcodecs\n"
                    "i, j = np.meshgrid(np.arange(45), np.arange(22), indexing='ij')\n"
                    "a = i * 1000.0 + j + 0.5\n"
                    "for name, comp, order in [('none', None, 'C'),\n"
                    "        ('zstd', numcodecs.Zstd(level=3), 'F'),\n"
                    "        ('blosc', numcodecs.Blosc(cname='lz4', clevel=5), 'C')]:\n"
                    "    z = zarr.open(name + '.zarr', mode='w', shape=a.shape, chunks=(10, 7),\n"
                    "                  dtype='<f8', compressor=comp, order=order, fill_value=-7.0)\n"
                    "    z[:40, :] = a[:40, :]\n"   /* rows 40.. never written: fill_value */
                    ), 0);
    const char *names[3] = {"none", "zstd", "blosc"};
    for (int k = 0; k < 3; k++) {
        gs_array_h x, y;
        double *got = malloc(45 * 22 * sizeof(double));
        snprintf(path, sizeof(path), "%s/%s.zarr", dir, names[k]);
        OK(gs_array_from_zarr(path, (int64_t[]){16, 9}, &x));
        OK(gs_client_compute(C, x, got, 45 * 22));
        for (int i = 0; i < 45; i++)
            for (int j = 0; j < 22; j++)
                cr_assert_eq(got[i * 22 + j], i < 40 ? i * 1000.0 + j + 0.5 : -7.0,
                             "%s (%d, %d)", names[k], i, j);
        /* the workers write 2 x as zarr v2 with this codec; zarr reads it */
        OK(gs_array_binary_scalar(GS_BINARY_MUL, x, 2.0, &y));
        snprintf(path, sizeof(path), "%s/out-%s.zarr", dir, names[k]);
        OK(gs_client_to_zarr(C, y, path, 2, k));
        gs_array_release(y);
        gs_array_release(x);
        free(got);
    }
    cr_assert_eq(py("import numpy as np, zarr, glob\n"
                    "for name in ['none', 'zstd', 'blosc']:\n"
                    "    src = zarr.open(name + '.zarr', mode='r')[:]\n"
                    "    out = zarr.open('out-' + name + '.zarr', mode='r')\n"
                    "    assert out.shape == (45, 22) and out.dtype == np.float64\n"
                    "    assert np.array_equal(out[:], 2 * src), name\n"
                    "assert not glob.glob('*gs-tmp*'), glob.glob('*gs-tmp*')\n"), 0,
                 "zarr does not read back what the workers wrote");
}

/* A worker started with --file-root serves files inside it and refuses every other path
 * (also one reached through a symbolic link or ".."), failing the task, not itself. */
static void up_rooted(void)
{
    char root[128];
    alarm(120);
    snprintf(dir, sizeof(dir), "/tmp/gs-itest-files-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(root, sizeof(root), "%s/root", dir);
    cr_assert_eq(mkdir(root, 0755), 0);
    const char *extra[] = {"--file-root", root, NULL};
    cr_assert(tc_start(&CL, 0, NULL, NULL), "gsched did not start");
    cr_assert_gt(tc_add_worker_args(&CL, "rooted", extra), 0);
    C = tc_connect(&CL, GS_LOWER_DEFAULT);
    cr_assert_not_null(C, "%s", gs_last_error());
    OK(gs_client_wait_for_workers(C, 1, 60.0));
}

Test(integration_files, file_root_confines_the_workers_file_tasks, .init = up_rooted,
     .fini = down)
{
    char in[200], out[200], link[200], dots[220];
    const int64_t shape[1] = {100}, chunks[1] = {30};
    double d[100];
    gs_array_h x, y;
    FILE *f;
    for (int i = 0; i < 100; i++) d[i] = i;
    snprintf(in, sizeof(in), "%s/root/in.raw", dir);
    f = fopen(in, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(d, sizeof(double), 100, f), 100);
    fclose(f);
    OK(gs_array_from_raw(in, GS_DTYPE_FLOAT64, 1, shape, GS_ORDER_C, 0, chunks, &x));
    cr_assert_eq(sum_of(x), 4950.0);
    snprintf(out, sizeof(out), "%s/root/out.npy", dir);
    OK(gs_client_to_npy(C, x, out));
    gs_array_release(x);
    /* outside the root: directly, through a symbolic link, through ".." */
    snprintf(out, sizeof(out), "%s/outside.raw", dir);
    f = fopen(out, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(d, sizeof(double), 100, f), 100);
    fclose(f);
    snprintf(link, sizeof(link), "%s/root/link.raw", dir);
    cr_assert_eq(symlink(out, link), 0);
    snprintf(dots, sizeof(dots), "%s/root/../outside.raw", dir);
    const char *bad[3] = {out, link, dots};
    for (int k = 0; k < 3; k++) {
        double v;
        gs_array_h s;
        OK(gs_array_from_raw(bad[k], GS_DTYPE_FLOAT64, 1, shape, GS_ORDER_C, 0, chunks, &y));
        OK(gs_array_reduce(GS_RED_SUM, y, NULL, &s));
        cr_assert_neq(gs_client_compute_scalar(C, s, &v), GS_OK, "%s was read", bad[k]);
        cr_assert_not_null(strstr(gs_last_error(), "outside this worker's file root"), "%s",
                           gs_last_error());
        gs_array_release(s);
        gs_array_release(y);
    }
    snprintf(out, sizeof(out), "%s/written.npy", dir);
    OK(gs_array_arange(0, 1, 1, shape, chunks, &y));
    cr_assert_neq(gs_client_to_npy(C, y, out), GS_OK);
    cr_assert_eq(access(out, F_OK), -1);
    cr_assert_eq(sum_of(y), 4950.0, "the worker still computes");
    gs_array_release(y);
}
