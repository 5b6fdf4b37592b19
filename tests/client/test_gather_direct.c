/* Direct gathers, the client's reading of a worker's answer (client/gather_direct.c,
 * gs__direct_read_answer) over a socketpair: chunks of an odd grid placed at their strided
 * places, and hostile answers (wrong size, key, request, status, frame length, truncation,
 * not DATA at all) refused with a clear error before a byte lands in the caller's buffer. */
#include "client/client_internal.h"
#include "common/error.h"
#include "proto/msg.h"

#include <criterion/criterion.h>
#include <math.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define ROWS 40
#define COLS 37

static int64_t rb[] = {0, 16, 32, 40}, cb[] = {0, 10, 20, 30, 37};   /* odd chunks: 16 / 10 */
static struct gs_future fut;
static gs__op_t op;
static gs__gkey_t keys[12];
static double out[ROWS * COLS];
static int sv[2];

static void setup(void)
{
    memset(&fut, 0, sizeof fut);
    fut.grid.ndim = 2;
    fut.grid.shape[0] = ROWS;
    fut.grid.shape[1] = COLS;
    fut.grid.nchunks[0] = 3;
    fut.grid.nchunks[1] = 4;
    fut.grid.bounds[0] = rb;
    fut.grid.bounds[1] = cb;
    memset(&op, 0, sizeof op);
    op.kind = GS__OP_GATHER;
    op.fut = &fut;
    op.out = out;
    op.out_es = sizeof(double);   /* a float64 result */
    op.out_stride[0] = COLS;
    op.out_stride[1] = 1;
    op.nkeys = 12;
    op.keys = keys;
    for (uint64_t b = 0; b < 12; b++) keys[b] = (gs__gkey_t){7, 100 + b, b, b};
    for (int i = 0; i < ROWS * COLS; i++) out[i] = NAN;
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
}

static void teardown(void)
{
    close(sv[0]);
    if (sv[1] >= 0) close(sv[1]);
}

TestSuite(client_gather_direct, .init = setup, .fini = teardown, .timeout = 30);

/* The values of block @a b (global index of each element, row-major in the block) and its size. */
static size_t block_values(uint64_t b, double *v)
{
    int64_t start[2], shape[2];
    gs_grid_block_region(&fut.grid, b, start, shape);
    for (int64_t i = 0; i < shape[0]; i++)
        for (int64_t j = 0; j < shape[1]; j++) v[i * shape[1] + j] = (double)((start[0] + i) * COLS + start[1] + j);
    return (size_t)(shape[0] * shape[1]) * sizeof(double);
}

/* Write DATA (req, graph, task, status, bytes) as a worker would. */
static void send_data(uint64_t req, uint64_t graph, uint64_t task, int32_t status, const void *p, size_t len)
{
    gs_msg_t m;
    gs_buf_t b;
    memset(&m, 0, sizeof m);
    m.type = GS_MSG_DATA;
    m.u.data.req_id = req;
    m.u.data.graph_id = graph;
    m.u.data.task_id = task;
    m.u.data.status = status;
    m.u.data.data = (gs_bytes_t){p, len};
    gs_buf_init(&b);
    cr_assert_eq(gs_msg_encode(&m, &b), GS_OK);
    cr_assert_eq(write(sv[1], b.data, b.len), (ssize_t)b.len);
    gs_buf_cleanup(&b);
}

static int untouched(void)
{
    for (int i = 0; i < ROWS * COLS; i++)
        if (!isnan(out[i])) return 0;
    return 1;
}

Test(client_gather_direct, places_every_block_of_an_odd_grid)
{
    double v[16 * 10];
    for (uint64_t b = 0; b < 12; b++) {
        size_t n = block_values(b, v);
        send_data(50 + b, 7, 100 + b, GS_OK, v, n);
        cr_assert_eq(gs__direct_read_answer(sv[0], &op, b, b + 1, 50 + b, n, NULL), GS_OK, "block %llu: %s",
                     (unsigned long long)b, gs_last_error());
    }
    for (int i = 0; i < ROWS * COLS; i++) cr_assert_eq(out[i], (double)i, "element %d", i);
}

Test(client_gather_direct, one_chunk_placed_at_two_blocks)
{
    double v[16 * 10];
    size_t n = block_values(0, v);
    keys[1] = (gs__gkey_t){7, 100, 5, 0};   /* block 5 (same 16 x 10 shape) holds the same task */
    send_data(1, 7, 100, GS_OK, v, n);
    cr_assert_eq(gs__direct_read_answer(sv[0], &op, 0, 2, 1, n, NULL), GS_OK, "%s", gs_last_error());
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 10; j++) {
            cr_assert_eq(out[i * COLS + j], (double)(i * COLS + j));
            cr_assert_eq(out[(16 + i) * COLS + 10 + j], (double)(i * COLS + j));
        }
}

Test(client_gather_direct, shared_memory_answer_places_from_the_slot)
{
    double v[16 * 10];
    size_t n = block_values(6, v);
    send_data(3, 7, 106, GS_OK, NULL, 0);
    cr_assert_eq(gs__direct_read_answer(sv[0], &op, 6, 7, 3, n, (const uint8_t *)v), GS_OK, "%s", gs_last_error());
    cr_assert_eq(out[16 * COLS + 20], (double)(16 * COLS + 20));
    cr_assert_eq(out[31 * COLS + 29], (double)(31 * COLS + 29));
}

Test(client_gather_direct, refuses_a_wrong_size)
{
    double v[16 * 10];
    size_t n = block_values(0, v);
    send_data(1, 7, 100, GS_OK, v, n - 8);
    cr_assert_eq(gs__direct_read_answer(sv[0], &op, 0, 1, 1, n, NULL), GS_ERR_PROTO);
    cr_assert(strstr(gs_last_error(), "sent 1272 bytes, the chunk has 1280") != NULL, "%s", gs_last_error());
    cr_assert(untouched());
}

Test(client_gather_direct, refuses_a_scheduler_size_that_is_not_the_block)
{
    cr_assert_eq(gs__direct_read_answer(sv[0], &op, 0, 1, 1, 1288, NULL), GS_ERR_PROTO);
    cr_assert(strstr(gs_last_error(), "the scheduler says 1288 bytes") != NULL, "%s", gs_last_error());
}

Test(client_gather_direct, refuses_another_key)
{
    double v[16 * 10];
    size_t n = block_values(0, v);
    send_data(1, 7, 101, GS_OK, v, n);
    cr_assert_eq(gs__direct_read_answer(sv[0], &op, 0, 1, 1, n, NULL), GS_ERR_PROTO);
    cr_assert(strstr(gs_last_error(), "answered (7, 101)") != NULL, "%s", gs_last_error());
    cr_assert(untouched());
}

Test(client_gather_direct, refuses_another_request)
{
    double v[16 * 10];
    size_t n = block_values(0, v);
    send_data(2, 7, 100, GS_OK, v, n);
    cr_assert_eq(gs__direct_read_answer(sv[0], &op, 0, 1, 1, n, NULL), GS_ERR_PROTO);
    cr_assert(untouched());
}

Test(client_gather_direct, passes_on_the_workers_error)
{
    send_data(1, 7, 100, GS_ERR_NOT_FOUND, NULL, 0);
    cr_assert_eq(gs__direct_read_answer(sv[0], &op, 0, 1, 1, 1280, NULL), GS_ERR_NOT_FOUND);
    cr_assert(strstr(gs_last_error(), "cannot serve chunk (7, 100)") != NULL, "%s", gs_last_error());
    cr_assert(untouched());
}

Test(client_gather_direct, refuses_truncated_data)
{
    double v[16 * 10];
    size_t n = block_values(0, v);
    gs_msg_t m;
    gs_buf_t b;
    memset(&m, 0, sizeof m);
    m.type = GS_MSG_DATA;
    m.u.data.req_id = 1;
    m.u.data.graph_id = 7;
    m.u.data.task_id = 100;
    m.u.data.data = (gs_bytes_t){(const uint8_t *)v, n};
    gs_buf_init(&b);
    cr_assert_eq(gs_msg_encode(&m, &b), GS_OK);
    cr_assert_eq(write(sv[1], b.data, b.len - 100), (ssize_t)(b.len - 100));   /* then the worker dies */
    close(sv[1]);
    sv[1] = -1;
    gs_buf_cleanup(&b);
    cr_assert_eq(gs__direct_read_answer(sv[0], &op, 0, 1, 1, n, NULL), GS_ERR_CONN_CLOSED);
    cr_assert(strstr(gs_last_error(), "100 bytes missing") != NULL, "%s", gs_last_error());
}

Test(client_gather_direct, refuses_a_frame_longer_than_its_payload)
{
    double v[16 * 10 + 1];
    size_t n = block_values(0, v);
    gs_msg_t m;
    gs_buf_t b;
    uint32_t len;
    memset(&m, 0, sizeof m);
    m.type = GS_MSG_DATA;
    m.u.data.req_id = 1;
    m.u.data.graph_id = 7;
    m.u.data.task_id = 100;
    m.u.data.data = (gs_bytes_t){(const uint8_t *)v, n};
    gs_buf_init(&b);
    cr_assert_eq(gs_msg_encode(&m, &b), GS_OK);
    memcpy(&len, b.data, 4);   /* little-endian host */
    len += 8;
    memcpy(b.data, &len, 4);
    cr_assert_eq(write(sv[1], b.data, b.len), (ssize_t)b.len);
    cr_assert_eq(write(sv[1], v, 8), 8);
    gs_buf_cleanup(&b);
    cr_assert_eq(gs__direct_read_answer(sv[0], &op, 0, 1, 1, n, NULL), GS_ERR_PROTO);
    cr_assert(untouched());
}

Test(client_gather_direct, refuses_inline_bytes_when_shared_memory_was_asked)
{
    double v[16 * 10], slot[16 * 10];
    size_t n = block_values(0, v);
    send_data(1, 7, 100, GS_OK, v, n);
    cr_assert_eq(gs__direct_read_answer(sv[0], &op, 0, 1, 1, n, (const uint8_t *)slot), GS_ERR_PROTO);
    cr_assert(untouched());
}

Test(client_gather_direct, refuses_a_message_that_is_not_data)
{
    gs_msg_t m;
    gs_buf_t b;
    memset(&m, 0, sizeof m);
    m.type = GS_MSG_HEARTBEAT;
    gs_buf_init(&b);
    cr_assert_eq(gs_msg_encode(&m, &b), GS_OK);
    cr_assert_eq(write(sv[1], b.data, b.len), (ssize_t)b.len);
    gs_buf_cleanup(&b);
    cr_assert_eq(gs__direct_read_answer(sv[0], &op, 0, 1, 1, 1280, NULL), GS_ERR_PROTO);
    cr_assert(strstr(gs_last_error(), "not a DATA message") != NULL, "%s", gs_last_error());
}
