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
        gs_array_h x, s, x0;
        double *got = malloc(50 * 21 * sizeof(double));
        snprintf(path, sizeof(path), "%s/%s", dir, names[k]);
        OK(gs_array_from_npy(path, chunks, &x0));
        cr_assert_eq(gs_array_dtype(x0), k == 0 ? GS_DTYPE_FLOAT64 : k == 1 ? GS_DTYPE_FLOAT32
                                                                          : GS_DTYPE_INT32);
        OK(gs_array_astype(x0, GS_DTYPE_FLOAT64, &x));   /* compared as float64 below */
        gs_array_release(x0);
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

/* The bytes of file @a name in dir (malloc'd; *n_p its size). */
static uint8_t *slurp(const char *name, size_t *n_p)
{
    char path[200];
    FILE *f;
    long n;
    uint8_t *p;
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f = fopen(path, "rb");
    cr_assert_not_null(f, "%s", path);
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    p = malloc((size_t)n + 1);
    cr_assert_eq(fread(p, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *n_p = (size_t)n;
    return p;
}

/* numpy's typed files: each array name.npy, its values in C order and native byte order in
 * name.bin, and those of the slice [3:50:4, 20::-3] in name.sl.bin. */
static const struct { const char *name; gs_dtype_t dt; } typed[] = {
    {"f4", GS_DTYPE_FLOAT32}, {"i4be", GS_DTYPE_INT32}, {"b1", GS_DTYPE_BOOL},
    {"u1", GS_DTYPE_UINT8},   {"i8", GS_DTYPE_INT64},   {"f2", GS_DTYPE_FLOAT16},
    {"f8be", GS_DTYPE_FLOAT64},
};
#define NTYPED (sizeof(typed) / sizeof(typed[0]))

static const char typed_py[] =
    "import numpy as np\n"
    "i, j = np.meshgrid(np.arange(50), np.arange(21), indexing='ij')\n"
    "v = i * 37 - j * 11 - 500\n"
    "arrs = {'f4': np.asfortranarray((v / 3.0).astype('<f4')),\n"
    "        'i4be': (v * 100003).astype('>i4'),\n"
    "        'b1': (v % 3 == 0),\n"
    "        'u1': (v % 256).astype('|u1'),\n"
    "        'i8': (v.astype('<i8') << 40) + 7,\n"
    "        'f2': (v / 7.0).astype('<f2'),\n"
    "        'f8be': (v / 9.0).astype('>f8')}\n"
    "for k, a in arrs.items():\n"
    "    np.save(k + '.npy', a)\n"
    "    n = a.astype(a.dtype.newbyteorder('='))\n"
    "    open(k + '.bin', 'wb').write(np.ascontiguousarray(n).tobytes())\n"
    "    open(k + '.sl.bin', 'wb').write(np.ascontiguousarray(n[3:50:4, 20::-3]).tobytes())\n";

Test(integration_files, typed_numpy_files_are_read_and_written_in_their_dtype, .init = up2,
     .fini = down)
{
    char path[160], name[64];
    const int64_t chunks[2] = {17, 6};
    if (!have_numpy()) cr_skip_test("python3-numpy is not installed (.ci/install-deps.sh)");
    cr_assert_eq(py(typed_py), 0);
    for (size_t k = 0; k < NTYPED; k++) {
        gs_array_h x, s;
        size_t n, ns, isz = gs_dtype_size(typed[k].dt);
        snprintf(name, sizeof(name), "%s.bin", typed[k].name);
        uint8_t *want = slurp(name, &n);
        snprintf(name, sizeof(name), "%s.sl.bin", typed[k].name);
        uint8_t *want_sl = slurp(name, &ns);
        uint8_t *got = calloc(n + 8, 1);
        cr_assert_eq(n, 50 * 21 * isz);
        snprintf(path, sizeof(path), "%s/%s.npy", dir, typed[k].name);
        OK(gs_array_from_npy(path, chunks, &x));
        cr_assert_eq(gs_array_dtype(x), (int)typed[k].dt, "%s read as %s", typed[k].name,
                     gs_dtype_name((gs_dtype_t)gs_array_dtype(x)));
        OK(gs_client_compute(C, x, (double *)got, 50 * 21));
        cr_assert(memcmp(got, want, n) == 0, "%s: the workers read other values than numpy's",
                  typed[k].name);
        /* a slice read straight from the file, in the file's dtype */
        gs_slice_t sl[2] = {{3, 50, 4, GS_SLICE_HAS_START}, {20, 0, -3, GS_SLICE_HAS_START}};
        OK(gs_array_slice(x, 2, sl, &s));
        cr_assert_eq(gs_array_dtype(s), (int)typed[k].dt);
        cr_assert_eq((size_t)gs_array_size(s) * isz, ns);
        OK(gs_client_compute(C, s, (double *)got, (size_t)gs_array_size(s)));
        cr_assert(memcmp(got, want_sl, ns) == 0, "%s: slice", typed[k].name);
        /* the workers write it back (little-endian, C order) as .npy and as zarr v2 */
        snprintf(path, sizeof(path), "%s/out-%s.npy", dir, typed[k].name);
        OK(gs_client_to_npy(C, x, path));
        snprintf(path, sizeof(path), "%s/out-%s.zarr", dir, typed[k].name);
        OK(gs_client_to_zarr(C, x, path, 2, (int)(k % 3)));
        gs_array_release(s);
        gs_array_release(x);
        free(got);
        free(want);
        free(want_sl);
    }
    cr_assert_eq(py("import numpy as np, glob\n"
                    "for k in ['f4', 'i4be', 'b1', 'u1', 'i8', 'f2', 'f8be']:\n"
                    "    a = np.load(k + '.npy')\n"
                    "    y = np.load('out-' + k + '.npy')\n"
                    "    want = a.dtype.newbyteorder('<') if a.dtype.itemsize > 1 else a.dtype\n"
                    "    assert y.dtype == want and y.dtype.str == want.str, (k, y.dtype.str)\n"
                    "    assert y.shape == a.shape and np.array_equal(y, a), k\n"
                    "assert not glob.glob('*gs-tmp*'), glob.glob('*gs-tmp*')\n"), 0,
                 "numpy does not read back, in their dtype, the typed files the workers wrote");
    if (have_zarr())
        cr_assert_eq(py("import numpy as np, zarr\n"
                        "for k in ['f4', 'i4be', 'b1', 'u1', 'i8', 'f2', 'f8be']:\n"
                        "    a = np.load(k + '.npy')\n"
                        "    z = zarr.open('out-' + k + '.zarr', mode='r')\n"
                        "    assert z.dtype == a.dtype.newbyteorder('<'), (k, z.dtype)\n"
                        "    assert np.array_equal(z[:], a), k\n"), 0,
                     "zarr does not read back the typed stores the workers wrote");
}

/* Raw files numpy wrote big-endian (arr.astype('>f8').tofile(...)) are read by the workers
 * through gs_array_from_raw_ex(GS_BYTEORDER_BIG), exactly, C and Fortran order; name.bin holds
 * numpy's values in native order. The int64 file's sum and product wrap modulo 2^64: gathered
 * as int64, they equal numpy's (issue 20, exact integer reductions). */
static const struct { const char *name; gs_dtype_t dt; gs_order_t order; } rawbe[] = {
    {"f8", GS_DTYPE_FLOAT64, GS_ORDER_C}, {"f4", GS_DTYPE_FLOAT32, GS_ORDER_F},
    {"i4", GS_DTYPE_INT32, GS_ORDER_C},   {"i8", GS_DTYPE_INT64, GS_ORDER_C},
    {"u1", GS_DTYPE_UINT8, GS_ORDER_F},
};

static const char rawbe_py[] =
    "import numpy as np\n"
    "i, j = np.meshgrid(np.arange(50), np.arange(21), indexing='ij')\n"
    "v = i * 37 - j * 11 - 500\n"
    "arrs = {'f8': (v / 9.0, 'C'), 'f4': (v / 3.0, 'F'), 'i4': (v * 100003, 'C'),\n"
    "        'i8': ((v.astype('<i8') << 52) + 7, 'C'), 'u1': (v % 256, 'F')}\n"
    "for k, (a, order) in arrs.items():\n"
    "    b = a.astype('>' + k)\n"
    "    (b.T if order == 'F' else b).tofile(k + '.be')\n"
    "    open(k + '.bin', 'wb').write(np.ascontiguousarray(a.astype('=' + k)).tobytes())\n"
    "with np.errstate(over='ignore'):\n"
    "    x = arrs['i8'][0][0]\n"
    "    open('i8.sum', 'w').write('%d %d' % (x.sum(), x.prod()))\n";

Test(integration_files, big_endian_raw_files_written_by_numpy_are_read_exactly, .init = up2,
     .fini = down)
{
    char path[160], name[64];
    const int64_t shape[2] = {50, 21}, chunks[2] = {17, 6};
    gs_array_h x = NULL;
    if (!have_numpy()) cr_skip_test("python3-numpy is not installed (.ci/install-deps.sh)");
    cr_assert_eq(py(rawbe_py), 0);
    for (size_t k = 0; k < sizeof(rawbe) / sizeof(rawbe[0]); k++) {
        size_t n, isz = gs_dtype_size(rawbe[k].dt);
        snprintf(name, sizeof(name), "%s.bin", rawbe[k].name);
        uint8_t *want = slurp(name, &n), *got = calloc(n + 8, 1);
        cr_assert_eq(n, 50 * 21 * isz);
        snprintf(path, sizeof(path), "%s/%s.be", dir, rawbe[k].name);
        OK(gs_array_from_raw_ex(path, rawbe[k].dt, GS_BYTEORDER_BIG, 2, shape, rawbe[k].order, 0,
                                chunks, &x));
        cr_assert_eq(gs_array_dtype(x), (int)rawbe[k].dt);
        OK(gs_client_compute(C, x, (double *)got, 50 * 21));
        cr_assert(memcmp(got, want, n) == 0, "%s: the workers read other values than numpy's",
                  rawbe[k].name);
        if (rawbe[k].dt == GS_DTYPE_INT64) {
            /* row 0: 21 values near 2^62 whose sum and product wrap */
            long long want_sum = 0, want_prod = 0;
            int64_t got_sum = 0, got_prod = 0;
            gs_array_h row, s, p;
            size_t ns;
            uint8_t *txt = slurp("i8.sum", &ns);
            txt = realloc(txt, ns + 1);
            txt[ns] = 0;
            cr_assert_eq(sscanf((char *)txt, "%lld %lld", &want_sum, &want_prod), 2);
            gs_slice_t sl[1] = {GS_SLICE_AT(0)};
            OK(gs_array_slice(x, 1, sl, &row));
            OK(gs_array_reduce(GS_RED_SUM, row, NULL, &s));
            OK(gs_array_reduce(GS_RED_PROD, row, NULL, &p));
            OK(gs_client_compute(C, s, (double *)&got_sum, 1));
            OK(gs_client_compute(C, p, (double *)&got_prod, 1));
            cr_assert_eq(got_sum, (int64_t)want_sum, "sum %lld, numpy %lld", (long long)got_sum,
                         want_sum);
            cr_assert_eq(got_prod, (int64_t)want_prod, "prod %lld, numpy %lld",
                         (long long)got_prod, want_prod);
            gs_array_release(p);
            gs_array_release(s);
            gs_array_release(row);
            free(txt);
        }
        gs_array_release(x);
        free(got);
        free(want);
    }
    /* a byte order outside the enum: refused at once, naming the file */
    snprintf(path, sizeof(path), "%s/u1.be", dir);
    x = NULL;
    cr_assert_eq(gs_array_from_raw_ex(path, GS_DTYPE_UINT8, (gs_byteorder_t)7, 2, shape,
                                      GS_ORDER_C, 0, chunks, &x),
                 GS_ERR_INVALID_PARAM);
    cr_assert_not_null(strstr(gs_last_error(), "u1.be"), "%s", gs_last_error());
    cr_assert_null(x);
}

/* Dtypes gsched lacks are refused with their name and the supported list, never misread. */
Test(integration_files, numpy_files_of_dtypes_gsched_lacks_are_refused, .init = up2, .fini = down)
{
    char path[160];
    if (!have_numpy()) cr_skip_test("python3-numpy is not installed (.ci/install-deps.sh)");
    cr_assert_eq(py("import numpy as np\n"
                    "np.save('i2.npy', np.arange(10, dtype='<i2'))\n"
                    "np.save('u4.npy', np.arange(10, dtype='>u4'))\n"
                    "np.save('c16.npy', np.arange(10) * (1 + 1j))\n"
                    "np.save('s.npy', np.zeros(4, dtype=[('a', '<f8'), ('b', '<i4')]))\n"
                    "np.save('u.npy', np.array(['ab', 'c']))\n"
                    "np.save('o.npy', np.array([1, 'x'], dtype=object), allow_pickle=True)\n"
                    "a = np.arange(12, dtype='<f8')\n"
                    "np.save('short.npy', a)\n"
                    "b = open('short.npy', 'rb').read()\n"
                    "open('short.npy', 'wb').write(b[:-5])\n"
                    "open('lie.npy', 'wb').write(b.replace(b'<f8', b'<f4'))\n"), 0);
    const struct { const char *file, *needle; gs_status_t st; } cases[] = {
        {"i2.npy", "'<i2'", GS_ERR_UNSUPPORTED},  {"u4.npy", "'>u4'", GS_ERR_UNSUPPORTED},
        {"c16.npy", "'<c16'", GS_ERR_UNSUPPORTED}, {"s.npy", "structured", GS_ERR_UNSUPPORTED},
        {"u.npy", "'<U2'", GS_ERR_UNSUPPORTED},   {"o.npy", "'|O'", GS_ERR_UNSUPPORTED},
        {"short.npy", "truncated", GS_ERR_IO},    {"lie.npy", "disagrees", GS_ERR_INVALID_PARAM},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        gs_array_h x = NULL;
        snprintf(path, sizeof(path), "%s/%s", dir, cases[k].file);
        gs_status_t st = gs_array_from_npy(path, (int64_t[]){4}, &x);
        cr_assert_eq(st, cases[k].st, "%s: %d (%s)", cases[k].file, (int)st, gs_last_error());
        cr_assert_null(x);
        cr_assert_not_null(strstr(gs_last_error(), cases[k].file), "%s", gs_last_error());
        cr_assert_not_null(strstr(gs_last_error(), cases[k].needle), "%s", gs_last_error());
        if (cases[k].st == GS_ERR_UNSUPPORTED)
            cr_assert_not_null(strstr(gs_last_error(), "float64, float32, float16, int32, int64, "
                                                       "uint8, bool"), "%s", gs_last_error());
    }
}

/* zarr-python writes typed v2 stores (big-endian, bool, fill values of each dtype, chunks
 * partly unwritten); the workers read them in their dtype, exactly. */
Test(integration_files, typed_zarr_v2_stores_written_by_zarr_python_are_read_exactly,
     .init = up2, .fini = down)
{
    char path[160], name[64];
    if (!have_zarr()) cr_skip_test("python3-zarr is not installed (apt-get install python3-zarr)");
    cr_assert_eq(py("import numpy as np, zarr, numcodecs\n"
                    "i, j = np.meshgrid(np.arange(45), np.arange(22), indexing='ij')\n"
                    "v = i * 37 - j * 11 - 500\n"
                    "arrs = {'f4': ((v / 3.0).astype('<f4'), float('nan')),\n"
                    "        'i4be': ((v * 100003).astype('>i4'), -3),\n"
                    "        'b1': ((v % 3 == 0), True),\n"
                    "        'u1': ((v % 256).astype('|u1'), 7),\n"
                    "        'i8': ((v.astype('<i8') << 40) + 7, -(1 << 50) - 1),\n"
                    "        'f2': ((v / 7.0).astype('<f2'), float('-inf'))}\n"
                    "comps = [None, numcodecs.Zstd(level=3), numcodecs.Blosc(cname='lz4')]\n"
                    "for n, (k, (a, fill)) in enumerate(arrs.items()):\n"
                    "    z = zarr.open(k + '.zarr', mode='w', shape=a.shape, chunks=(10, 7),\n"
                    "                  dtype=a.dtype, compressor=comps[n % 3], fill_value=fill,\n"
                    "                  order='F' if n % 2 else 'C')\n"
                    "    z[:40, :] = a[:40, :]\n"
                    "    full = z[:]\n"
                    "    n8 = full.astype(full.dtype.newbyteorder('='))\n"
                    "    open(k + '.bin', 'wb').write(np.ascontiguousarray(n8).tobytes())\n"), 0);
    const char *names[] = {"f4", "i4be", "b1", "u1", "i8", "f2"};
    const gs_dtype_t dts[] = {GS_DTYPE_FLOAT32, GS_DTYPE_INT32, GS_DTYPE_BOOL,
                              GS_DTYPE_UINT8,   GS_DTYPE_INT64, GS_DTYPE_FLOAT16};
    for (int k = 0; k < 6; k++) {
        gs_array_h x;
        size_t n;
        snprintf(name, sizeof(name), "%s.bin", names[k]);
        uint8_t *want = slurp(name, &n);
        uint8_t *got = calloc(n + 8, 1);
        snprintf(path, sizeof(path), "%s/%s.zarr", dir, names[k]);
        /* compute chunks unlike the zarr chunks (10, 7) */
        OK(gs_array_from_zarr(path, (int64_t[]){16, 9}, &x));
        cr_assert_eq(gs_array_dtype(x), (int)dts[k], "%s read as %s", names[k],
                     gs_dtype_name((gs_dtype_t)gs_array_dtype(x)));
        cr_assert_eq(n, 45 * 22 * gs_dtype_size(dts[k]));
        OK(gs_client_compute(C, x, (double *)got, 45 * 22));
        cr_assert(memcmp(got, want, n) == 0, "%s: the workers read other values than zarr's",
                  names[k]);
        gs_array_release(x);
        free(got);
        free(want);
    }
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

/* The workers count the bytes their file reads took by path and report them in heartbeats
 * (gs_client_workers file_read_bytes): all through host memory ("cpu") on CPU workers; staged
 * or cuFile on CUDA workers ($GS_TEST_BACKEND=cuda; GSCHED_FILE_PATH chooses). */
Test(integration_files, workers_report_the_bytes_their_file_reads_took_by_path, .init = up2,
     .fini = down)
{
    const int64_t shape[2] = {64, 40}, chunks[2] = {16, 40};
    const int cuda = getenv("GS_TEST_BACKEND") && !strcmp(getenv("GS_TEST_BACKEND"), "cuda");
    gs_client_worker_info_t wi[8];
    uint64_t before[GS_FILE_READ_PATHS] = {0}, now[GS_FILE_READ_PATHS];
    char path[160];
    size_t n = 0;
    gs_array_h x;
    double *v = malloc(64 * 40 * sizeof(double));
    FILE *f;
    uint64_t total = 0;

    for (int i = 0; i < 64 * 40; i++) v[i] = i * 0.25;
    snprintf(path, sizeof(path), "%s/r.raw", dir);
    cr_assert((f = fopen(path, "wb")) != NULL);
    cr_assert(fwrite("hdr", 1, 3, f) == 3 && fwrite(v, sizeof(double), 64 * 40, f) == 64 * 40);
    cr_assert(fclose(f) == 0);
    OK(gs_client_workers(C, wi, 8, &n));
    for (size_t i = 0; i < n && i < 8; i++)
        for (int p = 0; p < GS_FILE_READ_PATHS; p++) before[p] += wi[i].file_read_bytes[p];
    OK(gs_array_from_raw(path, GS_DTYPE_FLOAT64, 2, shape, GS_ORDER_C, 3, chunks, &x));
    OK(gs_client_persist(C, x));
    /* the next heartbeats carry the counts: wait for them (up to 20 s) */
    for (int tries = 0; tries < 400 && total < 64 * 40 * 8; tries++) {
        if (tries > 0) usleep(50000);
        OK(gs_client_workers(C, wi, 8, &n));
        memset(now, 0, sizeof(now));
        for (size_t i = 0; i < n && i < 8; i++)
            for (int p = 0; p < GS_FILE_READ_PATHS; p++) now[p] += wi[i].file_read_bytes[p];
        total = 0;
        for (int p = 0; p < GS_FILE_READ_PATHS; p++) total += now[p] - before[p];
    }
    cr_assert_eq(total, 64 * 40 * 8u, "the heartbeats counted %llu bytes read",
                 (unsigned long long)total);
    if (cuda)
        cr_assert_eq(now[0], before[0], "a CUDA worker read into host memory");
    else
        cr_assert_eq(now[0] - before[0], total, "a CPU worker's reads: %s %llu, %s %llu",
                     gs_file_read_path_name(1), (unsigned long long)(now[1] - before[1]),
                     gs_file_read_path_name(2), (unsigned long long)(now[2] - before[2]));
    cr_assert_str_eq(gs_file_read_path_name(0), "cpu");
    cr_assert_str_eq(gs_file_read_path_name(4), "unknown");
    OK(gs_client_unpersist(C, x));
    gs_array_release(x);
    free(v);
}
