/* gs-bench io: array files written and read by the workers, against dd on the same disk.
 *
 * A local cluster (or --scheduler) computes x = normal(0, 1, (n, n)) in (chunk, chunk) chunks
 * and writes it to DIR (gs_client_to_npy for npy and raw, gs_client_to_zarr for zarr: the
 * timed write includes generating x, which costs far less than the I/O); then reads it back
 * into worker memory (gs_client_persist of the file source: the timed read) and checks every
 * element against a fresh x on the cluster ((y != x).sum() == 0, bit-for-bit equality of
 * every double). In the same run dd writes a file of the same size (conv=fdatasync) and reads
 * the written array file back (bs=16M), so the GB/s sit beside what the disk gives a plain
 * sequential copy. The page cache is not dropped (a shared machine): reads of a file just
 * written come mostly from memory, for gsched and dd alike.
 *
 * read_path: the path the workers' reads took (chunkops/fileio.c), from the bytes each path
 * read as the workers' heartbeats report them (gs_client_workers file_read_bytes), the
 * counters before the read subtracted: "cpu", "pinned" (page-locked staging, double-buffered),
 * "cufile" (GPUDirect Storage) or "cufile-compat" (cuFile's compatibility mode), joined with
 * '+' when reads took several; "unknown" when no heartbeat brought them within 10 s. The
 * worker's option --file-path (default $GSCHED_FILE_PATH: auto, pinned, cufile) chooses. */
#include "gs-bench.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct gs__io_opts {
    gs__common_t c;
    const char *format;
    const char *codec;
    const char *dir;
    gs_dtype_t dtype;
    int zarr_version;
    int64_t n, chunk;
    int keep;
    int big;            /* raw: the file's data byte-swapped to big-endian before the read */
} gs__io_opts_t;

static void gs__io_usage(FILE *f)
{
    fprintf(f,
            "usage: gs-bench io --format npy|raw|zarr --n N --chunk C [options]\n"
            "Write x = normal(0, 1, (n, n)) from the workers as a file, read it back into the\n"
            "workers' memory, check every element, and time dd on the same directory.\n"
            "  --format npy|raw|zarr  file format (raw: the .npy file read as raw bytes at its\n"
            "                         data offset)\n"
            "  --codec none|zstd|blosc zarr chunk compression (default none; npy/raw: none)\n"
            "  --byteorder little|big raw: big byte-swaps the written file's data in place\n"
            "                         (untimed) and reads it with gs_array_from_raw_ex(BIG):\n"
            "                         the workers swap every element as they read it\n"
            "  --zarr-version 2|3     (default 3)\n"
            "  --dtype D              the array's dtype and the file's (float64 default,\n"
            "                         float32, float16, int32, int64, uint8, bool: x is the\n"
            "                         normal array times 1000 converted to D)\n"
            "  --n N --chunk C        array side and chunk side\n"
            "  --dir DIR              where the files go (default $TMPDIR or /tmp)\n"
            "  --keep                 leave the files in place\n"
            "  --workers W --backend cpu|cuda --scheduler URL --repeat R --seed S\n"
            "Prints one JSON line per repeat: bench, format, codec, backend, workers, n, chunk,\n"
            "dtype, bytes, file_bytes, write_s, write_gb_per_s, read_s, read_gb_per_s, dd_write_gb_per_s,\n"
            "dd_read_gb_per_s, mismatches, read_path (cpu, pinned, cufile, cufile-compat: the\n"
            "workers' reads as their heartbeats count them; $GSCHED_FILE_PATH=auto|pinned|cufile\n"
            "for the workers of a local cluster chooses).\n");
}

static int gs__io_args(int argc, char **argv, gs__io_opts_t *o, int *done)
{
    memset(o, 0, sizeof(*o));
    gs__common_defaults(&o->c);
    o->codec = "none";
    o->zarr_version = 3;
    o->dir = getenv("TMPDIR") && getenv("TMPDIR")[0] ? getenv("TMPDIR") : "/tmp";
    *done = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int r;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            gs__io_usage(stdout);
            *done = 1;
            return 0;
        }
        if (strcmp(a, "--format") == 0 || strcmp(a, "--codec") == 0 || strcmp(a, "--dir") == 0) {
            if (v == NULL) return gs__bad("option %s needs a value", a);
            if (a[2] == 'f') o->format = v;
            else if (a[2] == 'c') o->codec = v;
            else o->dir = v;
            i++;
            continue;
        }
        if (strcmp(a, "--dtype") == 0) {
            int k = 0;
            if (v == NULL) return gs__bad("option %s needs a value", a);
            while (k < GS_DTYPE_COUNT && strcmp(v, gs_dtype_name((gs_dtype_t)k)) != 0) k++;
            if (k == GS_DTYPE_COUNT)
                return gs__bad("--dtype expects float64, float32, float16, int32, int64, uint8 "
                               "or bool, not '%s'", v);
            o->dtype = (gs_dtype_t)k;
            i++;
            continue;
        }
        if (strcmp(a, "--zarr-version") == 0) {
            int64_t zv;
            if (!gs__int_arg(a, v, 2, 3, &zv)) return 2;
            o->zarr_version = (int)zv;
            i++;
            continue;
        }
        if (strcmp(a, "--n") == 0 || strcmp(a, "--chunk") == 0) {
            if (!gs__int_arg(a, v, 1, INT64_C(1) << 22, a[2] == 'n' ? &o->n : &o->chunk)) return 2;
            i++;
            continue;
        }
        if (strcmp(a, "--byteorder") == 0) {
            if (v == NULL || (strcmp(v, "little") && strcmp(v, "big")))
                return gs__bad("--byteorder expects little or big");
            o->big = !strcmp(v, "big");
            i++;
            continue;
        }
        if (strcmp(a, "--keep") == 0) {
            o->keep = 1;
            continue;
        }
        r = gs__common_arg(argc, argv, &i, &o->c);
        if (r < 0) return 2;
        if (r == 0) return gs__bad("unknown option '%s'", a);
    }
    if (o->format == NULL) return gs__bad("--format is required");
    if (strcmp(o->format, "npy") && strcmp(o->format, "raw") && strcmp(o->format, "zarr"))
        return gs__bad("--format expects npy, raw or zarr, not '%s'", o->format);
    if (strcmp(o->codec, "none") && strcmp(o->codec, "zstd") && strcmp(o->codec, "blosc"))
        return gs__bad("--codec expects none, zstd or blosc, not '%s'", o->codec);
    if (strcmp(o->format, "zarr") && strcmp(o->codec, "none"))
        return gs__bad("--codec %s needs --format zarr", o->codec);
    if (o->big && strcmp(o->format, "raw"))
        return gs__bad("--byteorder big needs --format raw");
    if (o->n == 0 || o->chunk == 0) return gs__bad("--n and --chunk are required");
    return 0;
}

/* Seconds a shell command takes; -1 when it fails. */
static double gs__io_timed(const char *cmd)
{
    double t0 = gs__now();
    if (system(cmd) != 0) {
        fprintf(stderr, "%s %s: '%s' failed\n", g_prog, g_sub, cmd);
        return -1;
    }
    return gs__now() - t0;
}

/* Bytes a file or directory tree takes (apparent sizes). */
static int64_t gs__io_du(const char *path)
{
    char cmd[1200], line[64];
    FILE *p;
    int64_t n = -1;
    snprintf(cmd, sizeof(cmd), "du -sb '%s' 2>/dev/null", path);
    if ((p = popen(cmd, "r")) == NULL) return -1;
    if (fgets(line, sizeof(line), p) != NULL) n = strtoll(line, NULL, 10);
    pclose(p);
    return n;
}

static int gs__io_rm(const char *path)
{
    char cmd[1200];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", path);
    return system(cmd);
}

/* Byte-swap the @a nbytes of items of @a isz bytes at byte @a off of file @a path in place
 * (16 MiB at a time): a little-endian file becomes the big-endian file numpy's
 * astype('>f8').tofile() writes. 0 on success. */
static int gs__io_swap_file(const char *path, int64_t off, int64_t nbytes, size_t isz)
{
    const size_t blk = (size_t)16 << 20;
    unsigned char *buf = isz > 1 ? malloc(blk) : NULL;
    FILE *f = isz > 1 ? fopen(path, "r+b") : NULL;
    int rc = isz > 1 && (buf == NULL || f == NULL);
    for (int64_t done = 0; rc == 0 && isz > 1 && done < nbytes;) {
        size_t n = (size_t)(nbytes - done < (int64_t)blk ? nbytes - done : (int64_t)blk);
        if (fseek(f, (long)(off + done), SEEK_SET) != 0 || fread(buf, 1, n, f) != n) {
            rc = 1;
            break;
        }
        for (size_t i = 0; i + isz <= n; i += isz)
            for (size_t a = 0; a < isz / 2; a++) {
                unsigned char t = buf[i + a];
                buf[i + a] = buf[i + isz - 1 - a];
                buf[i + isz - 1 - a] = t;
            }
        if (fseek(f, (long)(off + done), SEEK_SET) != 0 || fwrite(buf, 1, n, f) != n) rc = 1;
        done += (int64_t)n;
    }
    if (f != NULL && fclose(f) != 0) rc = 1;
    free(buf);
    return rc;
}

/* The bytes file reads took by each path, summed over the workers; 0 on success. */
static int gs__io_read_bytes(gs_client_h client, uint64_t sum[GS_FILE_READ_PATHS])
{
    gs_client_worker_info_t wi[64];
    size_t n = 0;
    memset(sum, 0, GS_FILE_READ_PATHS * sizeof(uint64_t));
    if (gs_client_workers(client, wi, 64, &n) != GS_OK) return -1;
    for (size_t i = 0; i < n && i < 64; i++)
        for (int p = 0; p < GS_FILE_READ_PATHS; p++) sum[p] += wi[i].file_read_bytes[p];
    return 0;
}

/* The read path of the @a bytes read since the counters were @a before (waits up to 10 s for
 * the heartbeats that carry them), into @a out. */
static void gs__io_read_path(gs_client_h client, const uint64_t before[GS_FILE_READ_PATHS],
                             int64_t bytes, char *out, size_t cap)
{
    uint64_t now[GS_FILE_READ_PATHS], total = 0;
    double t0 = gs__now();
    snprintf(out, cap, "unknown");
    for (;;) {
        total = 0;
        if (gs__io_read_bytes(client, now) != 0) return;
        for (int p = 0; p < GS_FILE_READ_PATHS; p++) total += now[p] - before[p];
        if (total >= (uint64_t)bytes || gs__now() - t0 > 10) break;
        usleep(20000);
    }
    if (total == 0) return;
    out[0] = '\0';
    for (int p = 0; p < GS_FILE_READ_PATHS; p++)
        if (now[p] > before[p])
            snprintf(out + strlen(out), cap - strlen(out), "%s%s", out[0] ? "+" : "",
                     gs_file_read_path_name(p));
}

int gs__bench_io(int argc, char **argv)
{
    gs__io_opts_t o;
    gs_client_h client = NULL;
    gs_array_h x = NULL;
    double connect_s = 0;
    int64_t shape[2], chunks[2], bytes;
    int rc, done;
    char path[1024], ddfile[1100], cmd[2400];
    int zcodec;

    if ((rc = gs__io_args(argc, argv, &o, &done)) != 0 || done) return rc;
    shape[0] = shape[1] = o.n;
    chunks[0] = chunks[1] = o.chunk;
    bytes = o.n * o.n * (int64_t)gs_dtype_size(o.dtype);
    zcodec = !strcmp(o.codec, "zstd") ? GS_ZARR_ZSTD : !strcmp(o.codec, "blosc") ? GS_ZARR_BLOSC
                                                                                 : GS_ZARR_NONE;
    snprintf(path, sizeof(path), "%s/gs-bench-io-%ld.%s", o.dir, (long)getpid(),
             strcmp(o.format, "zarr") ? "npy" : "zarr");
    snprintf(ddfile, sizeof(ddfile), "%s/gs-bench-io-%ld.dd", o.dir, (long)getpid());
    if (gs_array_random_normal(o.c.seed, 0, o.dtype == GS_DTYPE_FLOAT64 ? 1 : 1000, 2, shape,
                               chunks, &x) != GS_OK) {
        return gs__cannot_build("x");
    }
    if (o.dtype != GS_DTYPE_FLOAT64) {
        gs_array_h xt;
        if (gs_array_astype(x, o.dtype, &xt) != GS_OK) {
            gs__cannot_build("x");
            gs_array_release(x);
            return 2;
        }
        gs_array_release(x);
        x = xt;
    }
    if (gs__connect(&o.c, &client, &connect_s) != 0) {
        rc = 1;
        goto out;
    }
    rc = 1;
    for (int r = 0; r < o.c.repeat; r++) {
        gs_array_h y = NULL, ne = NULL, cnt = NULL;
        double write_s, read_s, dd_w, dd_r, mism = NAN;
        uint64_t rb0[GS_FILE_READ_PATHS];
        char read_path[64];
        int64_t file_bytes;
        gs_status_t st;
        (void)gs__io_rm(path);
        /* write */
        {
            double t0 = gs__now();
            st = strcmp(o.format, "zarr") ? gs_client_to_npy(client, x, path)
                                          : gs_client_to_zarr(client, x, path, o.zarr_version,
                                                              zcodec);
            write_s = gs__now() - t0;
        }
        if (st != GS_OK) {
            fprintf(stderr, "%s %s: the write failed: %s\n", g_prog, g_sub, gs_last_error());
            goto out;
        }
        file_bytes = gs__io_du(path);
        /* read */
        if (!strcmp(o.format, "npy")) {
            st = gs_array_from_npy(path, chunks, &y);
        } else if (!strcmp(o.format, "raw")) {
            unsigned char h[10] = {0};
            FILE *f = fopen(path, "rb");
            size_t got = f ? fread(h, 1, sizeof(h), f) : 0;
            if (f) fclose(f);
            const int64_t off = 10 + h[8] + 256 * h[9];
            if (got == sizeof(h) && o.big &&
                gs__io_swap_file(path, off, bytes, gs_dtype_size(o.dtype)) != 0) {
                fprintf(stderr, "%s %s: cannot byte-swap %s\n", g_prog, g_sub, path);
                goto out;
            }
            st = got == sizeof(h)
                     ? gs_array_from_raw_ex(path, o.dtype,
                                            o.big ? GS_BYTEORDER_BIG : GS_BYTEORDER_NATIVE, 2,
                                            shape, GS_ORDER_C, off, chunks, &y)
                     : GS_ERR_IO;
        } else {
            st = gs_array_from_zarr(path, chunks, &y);
        }
        if (st != GS_OK) {
            fprintf(stderr, "%s %s: cannot open %s: %s\n", g_prog, g_sub, path, gs_last_error());
            goto out;
        }
        if (gs__io_read_bytes(client, rb0) != 0) memset(rb0, 0, sizeof(rb0));
        {
            double t0 = gs__now();
            st = gs_client_persist(client, y);
            read_s = gs__now() - t0;
        }
        if (st != GS_OK) {
            fprintf(stderr, "%s %s: the read failed: %s\n", g_prog, g_sub, gs_last_error());
            gs_array_release(y);
            goto out;
        }
        gs__io_read_path(client, rb0, bytes, read_path, sizeof(read_path));
        /* every element, bit for bit (normal values: no NaN, no signed zero ambiguity) */
        if (gs_array_binary(GS_BINARY_NE, y, x, &ne) != GS_OK ||
            gs_array_reduce(GS_RED_SUM, ne, NULL, &cnt) != GS_OK ||
            gs_client_compute_scalar(client, cnt, &mism) != GS_OK) {
            fprintf(stderr, "%s %s: the check failed: %s\n", g_prog, g_sub, gs_last_error());
            mism = NAN;
        }
        gs_array_release(cnt);
        gs_array_release(ne);
        (void)gs_client_unpersist(client, y);
        gs_array_release(y);
        /* dd on the same directory: a sequential write of as many bytes, and a read of the
         * array file (npy/raw) or of the dd file (zarr: many small files) */
        snprintf(cmd, sizeof(cmd),
                 "dd if=/dev/zero of='%s' bs=16M count=%" PRId64 " conv=fdatasync status=none",
                 ddfile, (bytes + (16 << 20) - 1) / (16 << 20));
        dd_w = gs__io_timed(cmd);
        snprintf(cmd, sizeof(cmd), "dd if='%s' of=/dev/null bs=16M status=none",
                 strcmp(o.format, "zarr") ? path : ddfile);
        dd_r = gs__io_timed(cmd);
        unlink(ddfile);
        printf("{\"bench\":\"io\",\"format\":\"%s\",\"codec\":\"%s\"", o.format, o.codec);
        if (!strcmp(o.format, "zarr")) printf(",\"zarr_version\":%d", o.zarr_version);
        if (!strcmp(o.format, "raw")) printf(",\"byteorder\":\"%s\"", o.big ? "big" : "little");
        printf(",\"dtype\":\"%s\"", gs_dtype_name(o.dtype));
        printf(",\"backend\":\"%s\",\"workers\":%d,\"n\":%" PRId64 ",\"chunk\":%" PRId64
               ",\"run\":%d,\"bytes\":%" PRId64 ",\"file_bytes\":%" PRId64,
               o.c.backend, o.c.workers, o.n, o.chunk, r, bytes, file_bytes);
        gs__json_num("write_s", write_s);
        gs__json_num("write_gb_per_s", bytes / write_s / 1e9);
        gs__json_num("read_s", read_s);
        gs__json_num("read_gb_per_s", bytes / read_s / 1e9);
        gs__json_num("dd_write_gb_per_s", dd_w > 0 ? (double)((bytes + (16 << 20) - 1) / (16 << 20)) * (16 << 20) / dd_w / 1e9 : NAN);
        gs__json_num("dd_read_gb_per_s",
                     dd_r > 0 ? (double)(strcmp(o.format, "zarr") ? file_bytes
                                                                  : (bytes + (16 << 20) - 1) / (16 << 20) * (16 << 20)) / dd_r / 1e9
                              : NAN);
        gs__json_num("mismatches", mism);
        /* the workers' read path (chunkops/fileio.c; also in the worker's log) */
        printf(",\"read_path\":\"%s\"}\n", read_path);
        fflush(stdout);
        if (!(mism == 0)) {
            fprintf(stderr, "%s %s: %.0f elements read back differ from x\n", g_prog, g_sub, mism);
            goto out;
        }
    }
    rc = 0;
out:
    if (!o.keep) (void)gs__io_rm(path);
    gs_array_release(x);
    gs_client_destroy(client);
    return rc;
}
