/* A complete gsched client program: connect to a cluster (or start a private local one), build a
 * lazy chunked array expression, compute a scalar, gather an array, reuse a persisted array, and
 * report errors the gsched way (status code + gs_last_error()).
 *
 *   gsched-example                 # starts a local cluster (gs-local-cluster) for the run
 *   gsched-example tcp://host:8786 # uses a running cluster
 *
 * Build outside the source tree with CMake:
 *   find_package(gsched REQUIRED)
 *   add_executable(myprog array_example.c)
 *   target_link_libraries(myprog PRIVATE gsched::gsched)
 * or with pkg-config:  cc array_example.c $(pkg-config --cflags --libs gsched)
 */
#include <gsched/gsched.h>

#include <stdio.h>
#include <stdlib.h>

/* Print the failing call, the status name and the library's message, then jump to cleanup. */
#define CHECK(call)                                                                          \
    do {                                                                                     \
        gs_status_t st_ = (call);                                                            \
        if (st_ != GS_OK) {                                                                  \
            fprintf(stderr, "%s failed: %s: %s\n", #call, gs_status_name(st_),               \
                    gs_last_error());                                                        \
            goto out;                                                                        \
        }                                                                                    \
    } while (0)

int main(int argc, char **argv)
{
    const char *address = argc > 1 ? argv[1] : "local";
    gs_client_params_t params = {0};
    gs_client_h client = NULL;
    gs_array_h x = NULL, y = NULL, ys = NULL, mean = NULL, colmax = NULL, total = NULL;
    double *cols = NULL;
    double m = 0.0, t = 0.0;
    int rc = 1;

    /* 1. connect: "local" starts gsched + workers as child processes, stopped at destroy */
    params.address = address;
    /* a progress bar on stderr when it is a terminal (or pass your own GS_CLIENT_FIELD_PROGRESS
     * callback: it runs on the client's I/O thread, so keep it short and never block there) */
    params.field_mask = GS_CLIENT_FIELD_PROGRESS_BAR;
    params.progress_bar = GS_PROGRESS_BAR_TTY;
    CHECK(gs_client_connect(&params, &client));
    printf("connected to %s with %d worker(s)\n", gs_client_address(client),
           gs_client_nworkers(client));

    /* 2. build an expression; nothing runs yet. x: 3000 x 2000 standard normal values in
     *    1000 x 500 chunks; y = 2x + 1; ys = y[::3, ::-2] (NumPy slicing, negative step) */
    {
        const int64_t shape[2] = {3000, 2000}, chunks[2] = {1000, 500};
        const gs_slice_t s[2] = {GS_SLICE_STEP(3), GS_SLICE_STEP(-2)};
        CHECK(gs_array_random_normal(42, 0.0, 1.0, 2, shape, chunks, &x));
        CHECK(gs_array_binary_array_scalar(GS_BINARY_MUL, x, 2.0, &y));
        gs_array_release(x);   /* y holds its own reference to x's node */
        x = NULL;
        CHECK(gs_array_binary_array_scalar(GS_BINARY_ADD, y, 1.0, &x));
        gs_array_release(y);
        y = x;                 /* y = 2x + 1 */
        x = NULL;
        CHECK(gs_array_slice(y, 2, s, &ys));
    }

    /* 3. a scalar: the mean of ys (about 1.0) */
    CHECK(gs_array_reduce(GS_RED_MEAN, ys, NULL, &mean));
    CHECK(gs_client_compute_scalar(client, mean, &m));
    printf("mean of (2x + 1)[::3, ::-2] = %.6f\n", m);

    /* 4. an array gathered into our own buffer: the maximum of every column of ys */
    {
        gs_reduce_params_t rp = {0};
        int64_t shape[1];
        rp.field_mask = GS_REDUCE_FIELD_AXIS;
        rp.axis = 0;
        CHECK(gs_array_reduce(GS_RED_MAX, ys, &rp, &colmax));
        gs_array_shape(colmax, shape);
        cols = malloc((size_t)shape[0] * sizeof(double));
        if (cols == NULL) goto out;
        CHECK(gs_client_compute(client, colmax, cols, (size_t)shape[0]));
        printf("%lld column maxima; the first three: %.4f %.4f %.4f\n", (long long)shape[0],
               cols[0], cols[1], cols[2]);
    }

    /* 5. persist y on the workers, then reuse it: the sum reads the kept chunks */
    CHECK(gs_client_persist(client, y));
    CHECK(gs_array_reduce(GS_RED_SUM, y, NULL, &total));
    CHECK(gs_client_compute_scalar(client, total, &t));
    printf("sum of 2x + 1 over 3000 x 2000 = %.3f (about 6e6)\n", t);
    CHECK(gs_client_unpersist(client, y));
    rc = 0;

out:
    free(cols);
    gs_array_release(total);
    gs_array_release(colmax);
    gs_array_release(mean);
    gs_array_release(ys);
    gs_array_release(y);
    gs_array_release(x);
    gs_client_destroy(client);   /* stops the local cluster; NULL is fine */
    return rc;
}
