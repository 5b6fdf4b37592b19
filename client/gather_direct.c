/* Direct gathers: output chunks fetched from the workers that hold them instead of relayed
 * through gsched (client/gather.c falls back to the relay for whatever this file leaves).
 *
 * 1. Locate (I/O thread): one LOCATE_REQ for the gather's distinct keys; LOCATIONS names, per
 *    key, its size, the holding worker's data port and host, and a ticket (an HMAC under the
 *    cluster's data-plane key, common/auth.h) that the worker checks.
 * 2. Fetch (caller's thread): up to GS__DIRECT_THREADS threads take keys from a shared counter,
 *    each with a blocking TCP connection per worker it talks to (kept for the next key). A
 *    thread sends CHUNK_REQ and reads the DATA answer straight into the caller's buffer: the
 *    rows of the chunk go, with readv, to their places in the array (no intermediate copy).
 *    Workers of this host (same host name, or a loopback address) are asked to write the chunk
 *    into a shared-memory slot of the thread instead (path AUTO or SHM), which the thread then
 *    copies row by row into the buffer; a worker that cannot open it is asked again over TCP.
 * 3. Anything not fetched (no address, a connection or worker failure, a wrong size, key or
 *    status, a truncated answer) stays unmarked in op->got and is relayed.
 *
 * Every answer is checked before a byte lands in the caller's buffer: the frame's key and
 * request id, its status, and a payload of exactly the chunk's size. */
#include "client/client_internal.h"

#include "common/alloc.h"
#include "common/error.h"
#include "common/log.h"
#include "proto/mp.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define GS__DIRECT_THREADS 8
#define GS__DIRECT_CONNS 8          /* worker connections a thread keeps */
#define GS__DIRECT_TIMEOUT_S 120    /* a silent worker: the chunk is relayed instead */
#define GS__DIRECT_IOV 512
#define GS__DIRECT_SHM_BYTES ((uint64_t)4 << 30)   /* shared-memory slots of one client, about */

/* ------------------------------------------------------------------------------------------ */
/* I/O thread: locating */

void gs__locate_send(gs_client_h c, gs__op_t *op)
{
    gs_status_t st;
    gs_msg_t m;
    op->req_id = ++c->next_req_id;
    if ((st = gs_u64map_put(&c->gathers, op->req_id, (uint64_t)(uintptr_t)op)) != GS_OK) {
        gs__op_finish(c, op, st, "out of memory tracking a locate request");
        return;
    }
    memset(&m, 0, sizeof m);
    m.type = GS_MSG_LOCATE_REQ;
    m.u.locate_req.req_id = op->req_id;
    m.u.locate_req.n = op->nloc;
    m.u.locate_req.keys = op->loc_keys;
    if ((st = gs_conn_send(c->conn, &m)) != GS_OK) {
        gs_u64map_del(&c->gathers, op->req_id);
        gs__op_finish(c, op, st, "could not send a locate request to the scheduler");
    }
}

static void gs__strcopy(char *dst, size_t cap, const gs_str_t *s)
{
    size_t n = s->len < cap ? s->len : 0;   /* too long: treated as absent */
    if (n > 0) memcpy(dst, s->data, n);
    dst[n] = '\0';
}

void gs__locate_on_answer(gs_client_h c, const gs_msg_locations_t *m)
{
    uint64_t v;
    gs__op_t *op;
    if (!gs_u64map_get(&c->gathers, m->req_id, &v)) return;
    op = (gs__op_t *)(uintptr_t)v;
    if (op->kind != GS__OP_LOCATE) return;
    gs_u64map_del(&c->gathers, m->req_id);
    if (m->n != op->nloc) {
        gs__op_finish(c, op, GS_ERR_PROTO, "the scheduler located a different number of chunks");
        return;
    }
    op->loc = gs_calloc(op->nloc ? op->nloc : 1, sizeof *op->loc, "chunk locations");
    if (op->loc == NULL) {
        gs__op_finish(c, op, GS_ERR_NO_MEMORY, "out of memory for chunk locations");
        return;
    }
    for (uint64_t i = 0; i < op->nloc; i++) {
        gs__loc_t *l = &op->loc[i];
        if (m->keys[2 * i] != op->loc_keys[2 * i] || m->keys[2 * i + 1] != op->loc_keys[2 * i + 1]) {
            l->addr[0] = '\0';   /* not what was asked: relayed */
            continue;
        }
        l->nbytes = m->nbytes[i];
        for (unsigned k = 0; k < GS_MSG_TICKET_WORDS; k++)
            for (int b = 0; b < 8; b++) l->ticket[8 * k + b] = (uint8_t)(m->ticket[GS_MSG_TICKET_WORDS * i + k] >> (8 * b));
        gs__strcopy(l->addr, sizeof l->addr, &m->addr[i]);
        gs__strcopy(l->host, sizeof l->host, &m->host[i]);
    }
    gs__op_finish(c, op, GS_OK, NULL);
}

/* ------------------------------------------------------------------------------------------ */
/* Placing a chunk: the destination rows of a block in the caller's buffer. */

typedef struct gs__rows {
    uint8_t *out;               /* the caller's buffer: elements of `es` bytes */
    size_t es;                  /* element size of the result's dtype */
    const int64_t *out_stride;
    int nd;
    int64_t start[GS_MAX_NDIM], shape[GS_MAX_NDIM];
    int64_t inner;              /* elements per row */
    int64_t nrows;
    int64_t row;                /* cursor: next row */
    size_t off;                 /* bytes of that row done */
    int64_t idx[GS_MAX_NDIM];   /* multi-index of `row` over the outer axes */
} gs__rows_t;

static uint64_t gs__rows_init(gs__rows_t *r, const gs__op_t *op, uint64_t block)
{
    const gs_grid_t *grid = &op->fut->grid;
    int64_t nelem = 1;
    memset(r, 0, sizeof *r);
    r->out = (uint8_t *)op->out;
    r->es = op->out_es;
    r->out_stride = op->out_stride;
    r->nd = grid->ndim;
    gs_grid_block_region(grid, block, r->start, r->shape);
    for (int a = 0; a < r->nd; a++) nelem *= r->shape[a];
    r->inner = r->nd > 0 ? r->shape[r->nd - 1] : 1;
    r->nrows = r->inner > 0 ? nelem / r->inner : 0;
    return (uint64_t)nelem * r->es;
}

/* Where row r->row starts in the caller's buffer. */
static uint8_t *gs__rows_dst(const gs__rows_t *r)
{
    int64_t off = r->nd > 0 ? r->start[r->nd - 1] : 0;
    for (int a = 0; a < r->nd - 1; a++) off += (r->start[a] + r->idx[a]) * r->out_stride[a];
    return r->out + (size_t)off * r->es;
}

/* Advance the cursor by @a n bytes. */
static void gs__rows_advance(gs__rows_t *r, size_t n)
{
    size_t rowb = (size_t)r->inner * r->es;
    while (n > 0 && r->row < r->nrows) {
        size_t take = rowb - r->off < n ? rowb - r->off : n;
        r->off += take;
        n -= take;
        if (r->off == rowb) {
            r->off = 0;
            r->row++;
            for (int a = r->nd - 2; a >= 0; a--) {
                if (++r->idx[a] < r->shape[a]) break;
                r->idx[a] = 0;
            }
        }
    }
}

/* Copy @a len bytes from @a src to the rows at the cursor. */
static void gs__rows_copy(gs__rows_t *r, const uint8_t *src, size_t len)
{
    size_t rowb = (size_t)r->inner * r->es;
    while (len > 0 && r->row < r->nrows) {
        size_t take = rowb - r->off < len ? rowb - r->off : len;
        memcpy(gs__rows_dst(r) + r->off, src, take);
        src += take;
        len -= take;
        gs__rows_advance(r, take);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Sockets. */

static gs_status_t gs__read_full(int fd, void *buf, size_t len)
{
    uint8_t *p = buf;
    while (len > 0) {
        ssize_t n = recv(fd, p, len, 0);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
        } else if (n == 0) {
            return gs_error_set(GS_ERR_CONN_CLOSED, "the worker closed the connection mid-answer");
        } else if (errno != EINTR) {
            return gs_error_set(GS_ERR_IO, "reading from the worker: %s", strerror(errno));
        }
    }
    return GS_OK;
}

static gs_status_t gs__write_full(int fd, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
        } else if (n < 0 && errno != EINTR) {
            return gs_error_set(GS_ERR_IO, "writing to the worker: %s", strerror(errno));
        }
    }
    return GS_OK;
}

/* Read @a len payload bytes into the rows at the cursor (readv over the destination rows). */
static gs_status_t gs__read_rows(int fd, gs__rows_t *r, size_t len)
{
    struct iovec iov[GS__DIRECT_IOV];
    size_t rowb = (size_t)r->inner * r->es;
    while (len > 0) {
        gs__rows_t probe = *r;
        int niov = 0;
        size_t want = 0;
        ssize_t n;
        while (niov < GS__DIRECT_IOV && want < len && probe.row < probe.nrows) {
            size_t take = rowb - probe.off;
            if (take > len - want) take = len - want;
            iov[niov].iov_base = gs__rows_dst(&probe) + probe.off;
            iov[niov].iov_len = take;
            niov++;
            want += take;
            gs__rows_advance(&probe, take);
        }
        if (niov == 0) return gs_error_set(GS_ERR_PROTO, "the worker sent more bytes than the chunk has");
        n = readv(fd, iov, niov);
        if (n == 0) return gs_error_set(GS_ERR_CONN_CLOSED, "the worker closed the connection mid-chunk "
                                                           "(%zu bytes missing)", len);
        if (n < 0) {
            if (errno == EINTR) continue;
            return gs_error_set(GS_ERR_IO, "reading a chunk from the worker: %s", strerror(errno));
        }
        gs__rows_advance(r, (size_t)n);
        len -= (size_t)n;
    }
    return GS_OK;
}

/* Copy the chunk now complete at block k0's place to the blocks k0+1 .. k1-1 (one task placed
 * at several blocks of the output). */
static void gs__place_copies(gs__op_t *op, uint64_t k0, uint64_t k1)
{
    for (uint64_t k = k0 + 1; k < k1; k++) {
        gs__rows_t src, dst;
        gs__rows_init(&src, op, op->keys[k0].block);
        gs__rows_init(&dst, op, op->keys[k].block);
        for (int64_t i = 0; i < src.nrows; i++) {
            memcpy(gs__rows_dst(&dst), gs__rows_dst(&src), (size_t)src.inner * src.es);
            gs__rows_advance(&src, (size_t)src.inner * src.es);
            gs__rows_advance(&dst, (size_t)dst.inner * dst.es);
        }
    }
}

#define GS__HEAD_PEEK 64u   /* bytes of a large DATA frame read before its payload */

gs_status_t gs__direct_read_answer(int fd, gs__op_t *op, uint64_t k0, uint64_t k1, uint64_t req_id,
                                   uint64_t nbytes, const uint8_t *shm)
{
    uint8_t hdr[GS_PROTO_FRAME_HEADER], head[GS__HEAD_PEEK];
    uint64_t graph = op->keys[k0].graph, task = op->keys[k0].task;
    uint32_t flen, n = 0, type = 0, blen;
    uint64_t rreq = 0, rgraph = 0, rtask = 0, want;
    int32_t status = 0;
    size_t peek, hlen;
    gs_mp_reader_t rd;
    gs__rows_t rows;
    gs_status_t st;

    want = gs__rows_init(&rows, op, op->keys[k0].block);
    if (want != nbytes)
        return gs_error_set(GS_ERR_PROTO, "chunk (%llu, %llu): the scheduler says %llu bytes, the block "
                                          "has %llu", (unsigned long long)graph, (unsigned long long)task,
                            (unsigned long long)nbytes, (unsigned long long)want);
    if ((st = gs__read_full(fd, hdr, sizeof hdr)) != GS_OK) return st;
    flen = (uint32_t)hdr[0] | (uint32_t)hdr[1] << 8 | (uint32_t)hdr[2] << 16 | (uint32_t)hdr[3] << 24;
    peek = flen < GS__HEAD_PEEK ? flen : GS__HEAD_PEEK;
    if ((st = gs__read_full(fd, head, peek)) != GS_OK) return st;
    gs_mp_reader_init(&rd, head, peek);
    if (!gs_mp_read_array(&rd, &n) || n != 6 || !gs_mp_read_u32(&rd, &type) || type != GS_MSG_DATA ||
        !gs_mp_read_u64(&rd, &rreq) || !gs_mp_read_u64(&rd, &rgraph) || !gs_mp_read_u64(&rd, &rtask) ||
        !gs_mp_read_i32(&rd, &status))
        return gs_error_set(GS_ERR_PROTO, "chunk (%llu, %llu): the worker's answer is not a DATA message",
                            (unsigned long long)graph, (unsigned long long)task);
    if (rreq != req_id || rgraph != graph || rtask != task)
        return gs_error_set(GS_ERR_PROTO, "asked for chunk (%llu, %llu) (request %llu), the worker answered "
                                          "(%llu, %llu) (request %llu)", (unsigned long long)graph,
                            (unsigned long long)task, (unsigned long long)req_id, (unsigned long long)rgraph,
                            (unsigned long long)rtask, (unsigned long long)rreq);
    if (status != GS_OK)
        return gs_error_set(status < 0 ? (gs_status_t)status : GS_ERR_PROTO, "the worker cannot serve chunk "
                            "(%llu, %llu): %s", (unsigned long long)graph, (unsigned long long)task,
                            gs_status_string((gs_status_t)status));
    /* the bin header of the payload */
    {
        size_t left = (size_t)(rd.end - rd.p);
        const uint8_t *p = rd.p;
        if (left >= 2 && p[0] == 0xc4) {
            blen = p[1];
            hlen = 2;
        } else if (left >= 3 && p[0] == 0xc5) {
            blen = (uint32_t)p[1] << 8 | p[2];
            hlen = 3;
        } else if (left >= 5 && p[0] == 0xc6) {
            blen = (uint32_t)p[1] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 8 | p[4];
            hlen = 5;
        } else {
            return gs_error_set(GS_ERR_PROTO, "chunk (%llu, %llu): the worker's DATA has no payload",
                                (unsigned long long)graph, (unsigned long long)task);
        }
        hlen += (size_t)(p - head);
    }
    if ((uint64_t)hlen + blen != flen)
        return gs_error_set(GS_ERR_PROTO, "chunk (%llu, %llu): a frame of %u bytes holding %u payload bytes",
                            (unsigned long long)graph, (unsigned long long)task, flen, blen);
    if (shm != NULL) {
        if (blen != 0)
            return gs_error_set(GS_ERR_PROTO, "chunk (%llu, %llu): bytes inline where shared memory was asked",
                                (unsigned long long)graph, (unsigned long long)task);
        gs__rows_copy(&rows, shm, (size_t)nbytes);
        gs__place_copies(op, k0, k1);
        return GS_OK;
    }
    if (blen != nbytes)
        return gs_error_set(GS_ERR_PROTO, "chunk (%llu, %llu): the worker sent %u bytes, the chunk has %llu",
                            (unsigned long long)graph, (unsigned long long)task, blen,
                            (unsigned long long)nbytes);
    gs__rows_copy(&rows, head + hlen, peek - hlen);
    if ((st = gs__read_rows(fd, &rows, blen - (peek - hlen))) != GS_OK) return st;
    gs__place_copies(op, k0, k1);
    return GS_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Fetching threads. */

typedef struct gs__dconn {
    char addr[80];
    int fd;                     /* -1: none */
    int reused;                 /* it served an earlier chunk (it may have died since) */
    int shm_refused;            /* this worker cannot write our shared memory */
} gs__dconn_t;

typedef struct gs__direct {
    gs_client_h c;
    gs__op_t *op;
    gs__op_t *lop;              /* the answered LOCATE op */
    const uint64_t *first;      /* nloc: the first key index of each distinct key */
    uint64_t *bytes;            /* nloc: each distinct key's size by the grid (what is expected:
                                   gsched's task sizes are only used to find the workers) */
    int path;
    uint64_t client_id;
    char hostname[64];
    size_t slot_bytes;          /* the largest located chunk */
    atomic_uint_fast64_t next;
    uv_mutex_t mu;              /* stats below */
    gs_gather_stats_t st;
} gs__direct_t;

/* One fetching thread's state; kept in the client between gathers (c->dpool). */
typedef struct gs__dthread {
    gs__direct_t *d;            /* the gather it serves now */
    uv_thread_t tid;
    int started;
    gs__dconn_t conns[GS__DIRECT_CONNS];
    int nconns;
    char shm_name[64];          /* "" until created, "!" when it cannot be */
    uint8_t *shm;
    size_t shm_size;
    uint64_t req;
} gs__dthread_t;

static int gs__connect_to(const char *addr)
{
    char host[80], port[16];
    int p, fd = -1, one = 1;
    struct addrinfo hints, *res = NULL, *ai;
    struct timeval tv = {GS__DIRECT_TIMEOUT_S, 0};
    if (gs_addr_parse(addr, host, sizeof host, &p) != GS_OK) return -1;
    snprintf(port, sizeof port, "%d", p);
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
    if (getaddrinfo(host, port, &hints, &res) != 0) return -1;
    for (ai = res; ai != NULL; ai = ai->ai_next) {
        fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) continue;
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) break;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) return -1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    return fd;
}

static gs__dconn_t *gs__dthread_conn(gs__dthread_t *t, const char *addr)
{
    gs__dconn_t *dc = NULL;
    for (int i = 0; i < t->nconns; i++)
        if (strcmp(t->conns[i].addr, addr) == 0) dc = &t->conns[i];
    if (dc == NULL) {
        if (t->nconns == GS__DIRECT_CONNS) {   /* full: reuse the first */
            if (t->conns[0].fd >= 0) close(t->conns[0].fd);
            dc = &t->conns[0];
        } else {
            dc = &t->conns[t->nconns++];
        }
        memset(dc, 0, sizeof *dc);
        snprintf(dc->addr, sizeof dc->addr, "%s", addr);
        dc->fd = -1;
    }
    if (dc->fd < 0) {
        dc->fd = gs__connect_to(addr);
        dc->reused = 0;
    }
    return dc->fd >= 0 ? dc : NULL;
}

/* Is the worker at @a l on this host? Its host name is ours, or its address is loopback. */
static int gs__same_host(const gs__direct_t *d, const gs__loc_t *l)
{
    return (d->hostname[0] && strcmp(l->host, d->hostname) == 0) || strncmp(l->addr, "127.", 4) == 0 ||
           strncmp(l->addr, "[::1]", 5) == 0;
}

static void gs__dthread_shm_free(gs__dthread_t *t)
{
    if (t->shm != NULL) {
        munmap(t->shm, t->shm_size);
        shm_unlink(t->shm_name);
    }
    t->shm = NULL;
    t->shm_size = 0;
}

/* This thread's shared-memory slot (one chunk of the gather), created on first use and kept
 * (the workers map it once per connection); replaced by a larger one when a gather needs it.
 * NULL: none possible. */
static uint8_t *gs__dthread_shm(gs__dthread_t *t)
{
    static atomic_uint seq;
    int fd;
    void *p;
    if (t->shm != NULL && t->shm_size >= t->d->slot_bytes) return t->shm;
    if (t->shm_name[0] == '!') return NULL;   /* failed before */
    gs__dthread_shm_free(t);
    snprintf(t->shm_name, sizeof t->shm_name, "/gs-%ld-%u-%lx", (long)getpid(), atomic_fetch_add(&seq, 1),
             (unsigned long)time(NULL));
    fd = shm_open(t->shm_name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0) goto err_name;
    if (ftruncate(fd, (off_t)t->d->slot_bytes) != 0) goto err_unlink;
    p = mmap(NULL, t->d->slot_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) goto err_unlink;
    close(fd);
    t->shm = p;
    t->shm_size = t->d->slot_bytes;
    return t->shm;
err_unlink:
    close(fd);
    shm_unlink(t->shm_name);
err_name:
    GS_LOG_DEBUG("no shared memory for direct gathers (%s): chunks come over TCP", strerror(errno));
    t->shm_name[0] = '!';
    t->shm_name[1] = '\0';
    return NULL;
}

/* Fetch distinct key @a u over @a dc (through shared memory when @a shm). */
static gs_status_t gs__dthread_fetch(gs__dthread_t *t, gs__dconn_t *dc, uint64_t u, int shm)
{
    gs__direct_t *d = t->d;
    const gs__loc_t *l = &d->lop->loc[u];
    uint64_t k0 = d->first[u], k1 = k0;
    gs_msg_t m;
    gs_buf_t b;
    gs_status_t st;

    while (k1 < d->op->nkeys && d->op->keys[k1].graph == d->op->keys[k0].graph &&
           d->op->keys[k1].task == d->op->keys[k0].task)
        k1++;
    memset(&m, 0, sizeof m);
    m.type = GS_MSG_CHUNK_REQ;
    m.u.chunk_req.req_id = ++t->req;
    m.u.chunk_req.graph_id = d->op->keys[k0].graph;
    m.u.chunk_req.task_id = d->op->keys[k0].task;
    m.u.chunk_req.client_id = d->client_id;
    m.u.chunk_req.ticket = (gs_bytes_t){l->ticket, sizeof l->ticket};
    if (shm) m.u.chunk_req.shm = (gs_str_t){(const uint8_t *)t->shm_name, strlen(t->shm_name)};
    gs_buf_init(&b);
    st = gs_msg_encode(&m, &b);
    if (st == GS_OK) st = gs__write_full(dc->fd, b.data, b.len);
    gs_buf_cleanup(&b);
    if (st != GS_OK) return st;
    return gs__direct_read_answer(dc->fd, d->op, k0, k1, t->req, d->bytes[u], shm ? t->shm : NULL);
}

static void gs__dthread_run(void *arg)
{
    gs__dthread_t *t = arg;
    gs__direct_t *d = t->d;
    for (;;) {
        uint64_t u = atomic_fetch_add(&d->next, 1);
        const gs__loc_t *l;
        gs__dconn_t *dc;
        gs_status_t st = GS_ERR_NOT_FOUND;
        int shm = 0;
        if (u >= d->lop->nloc) break;
        l = &d->lop->loc[u];
        if (l->addr[0] == '\0') continue;   /* relayed */
        dc = gs__dthread_conn(t, l->addr);
        if (dc == NULL) {
            GS_LOG_DEBUG("cannot reach the worker at %s: its chunks are relayed", l->addr);
            uv_mutex_lock(&d->mu);
            d->st.fallbacks++;
            uv_mutex_unlock(&d->mu);
            continue;
        }
        if (d->path != GS_GATHER_DIRECT && !dc->shm_refused && d->bytes[u] > 0 && gs__same_host(d, l) &&
            gs__dthread_shm(t) != NULL) {
            shm = 1;
            st = gs__dthread_fetch(t, dc, u, 1);
            if (st == GS_ERR_UNSUPPORTED) {
                dc->shm_refused = 1;   /* it cannot use our region: ask for the bytes instead */
                shm = 0;
            }
        }
        if (!shm) st = gs__dthread_fetch(t, dc, u, 0);
        if ((st == GS_ERR_CONN_CLOSED || st == GS_ERR_IO) && dc->reused) {
            /* a connection kept from an earlier gather, gone since (worker restarted): once more */
            close(dc->fd);
            dc->fd = -1;
            if ((dc = gs__dthread_conn(t, l->addr)) != NULL) {
                shm = shm && !dc->shm_refused;
                st = gs__dthread_fetch(t, dc, u, shm);
            }
        }
        if (dc != NULL) dc->reused = 1;
        if (st != GS_OK) {
            GS_LOG_WARN("direct gather of chunk (%llu, %llu) from %s failed (%s); it is relayed through gsched",
                        (unsigned long long)d->op->keys[d->first[u]].graph,
                        (unsigned long long)d->op->keys[d->first[u]].task, l->addr, gs_last_error());
            if (dc != NULL && st != GS_ERR_NOT_FOUND) {   /* the stream may be out of step */
                close(dc->fd);
                dc->fd = -1;
            }
            uv_mutex_lock(&d->mu);
            d->st.fallbacks++;
            uv_mutex_unlock(&d->mu);
            continue;
        }
        d->op->got[d->op->keys[d->first[u]].uniq] = 1;   /* this thread's key alone */
        uv_mutex_lock(&d->mu);
        if (shm) {
            d->st.chunks_shm++;
            d->st.bytes_shm += d->bytes[u];
        } else {
            d->st.chunks_direct++;
            d->st.bytes_direct += d->bytes[u];
        }
        uv_mutex_unlock(&d->mu);
    }
}

static void gs__dpool_free(gs__dthread_t *pool)
{
    if (pool == NULL) return;
    for (int k = 0; k < GS__DIRECT_THREADS; k++) {
        gs__dthread_t *t = &pool[k];
        for (int i = 0; i < t->nconns; i++)
            if (t->conns[i].fd >= 0) close(t->conns[i].fd);
        gs__dthread_shm_free(t);
    }
    gs_free(pool);
}

void gs__gather_direct_close(gs_client_h c)
{
    gs__dthread_t *pool = NULL;
    uv_mutex_lock(&c->mu);
    c->dpool_closed = 1;
    if (!c->dpool_busy) {
        pool = c->dpool;
        c->dpool = NULL;
    }
    uv_mutex_unlock(&c->mu);
    gs__dpool_free(pool);
}

void gs__gather_direct(gs_client_h c, gs__op_t *op, int path)
{
    gs__direct_t d;
    gs__dthread_t *threads = NULL;
    uint64_t *keys = NULL, *first = NULL, nloc = 0, nthreads;
    int own_pool = 0;
    gs__op_t *lop;
    gs_status_t st;

    memset(&d, 0, sizeof d);
    keys = gs_malloc(gs_size_mul(op->nuniq ? op->nuniq : 1, 2 * sizeof(uint64_t)), "locate keys");
    first = gs_malloc(gs_size_mul(op->nuniq ? op->nuniq : 1, sizeof(uint64_t)), "locate keys");
    lop = gs__op_new(GS__OP_LOCATE);
    if (keys == NULL || first == NULL || lop == NULL) goto out_free;
    for (uint64_t k = 0; k < op->nkeys; k++) {
        if (k > 0 && op->keys[k].uniq == op->keys[k - 1].uniq) continue;
        keys[2 * nloc] = op->keys[k].graph;
        keys[2 * nloc + 1] = op->keys[k].task;
        first[nloc++] = k;
    }
    lop->loc_keys = keys;   /* the op's from now on */
    keys = NULL;
    lop->nloc = nloc;
    if ((st = gs__op_call(c, lop, gs__deadline(60.0), "the scheduler did not locate the chunks in 60 s")) != GS_OK) {
        GS_LOG_DEBUG("locating the chunks failed (%s): the gather is relayed", gs_last_error());
        lop = NULL;   /* no longer ours */
        goto out_free;
    }
    d.c = c;
    d.op = op;
    d.lop = lop;
    d.first = first;
    d.path = path;
    uv_mutex_lock(&c->mu);
    d.client_id = c->client_id;
    uv_mutex_unlock(&c->mu);
    if (gethostname(d.hostname, sizeof d.hostname - 1) != 0) d.hostname[0] = '\0';
    if ((d.bytes = gs_malloc(gs_size_mul(nloc ? nloc : 1, sizeof *d.bytes), "gather sizes")) == NULL) goto out_free;
    for (uint64_t i = 0; i < nloc; i++) {
        gs__rows_t r;
        d.bytes[i] = gs__rows_init(&r, op, op->keys[first[i]].block);
        if (lop->loc[i].addr[0] && d.bytes[i] > d.slot_bytes) d.slot_bytes = (size_t)d.bytes[i];
    }
    atomic_init(&d.next, 0);
    if (uv_mutex_init(&d.mu) != 0) goto out_bytes;
    nthreads = nloc < GS__DIRECT_THREADS ? nloc : GS__DIRECT_THREADS;
    if (path != GS_GATHER_DIRECT && d.slot_bytes > 0 && nthreads > GS__DIRECT_SHM_BYTES / d.slot_bytes) {
        /* one shared-memory slot per thread (page-locked by GPU workers): at most about
         * GS__DIRECT_SHM_BYTES of them, at least one thread */
        nthreads = GS__DIRECT_SHM_BYTES / d.slot_bytes > 0 ? GS__DIRECT_SHM_BYTES / d.slot_bytes : 1;
    }
    /* the client's kept threads' state, unless another gather uses it (then a fresh one) */
    uv_mutex_lock(&c->mu);
    if (!c->dpool_busy && !c->dpool_closed) {
        if (c->dpool == NULL) c->dpool = gs_calloc(GS__DIRECT_THREADS, sizeof *threads, "gather threads");
        threads = c->dpool;
        own_pool = threads != NULL;
        c->dpool_busy = own_pool;
    }
    uv_mutex_unlock(&c->mu);
    if (threads == NULL) threads = gs_calloc(GS__DIRECT_THREADS, sizeof *threads, "gather threads");
    if (threads == NULL) goto out_mutex;
    for (uint64_t i = 0; i < nthreads; i++) {
        threads[i].d = &d;
        threads[i].started = uv_thread_create(&threads[i].tid, gs__dthread_run, &threads[i]) == 0;
    }
    for (uint64_t i = 0; i < nthreads; i++)
        if (threads[i].started) uv_thread_join(&threads[i].tid);
    for (uint64_t i = 0; i < nloc; i++)
        if (op->got[op->keys[first[i]].uniq]) op->nremaining--;
    uv_mutex_lock(&c->mu);
    c->gstats.chunks_direct += d.st.chunks_direct;
    c->gstats.bytes_direct += d.st.bytes_direct;
    c->gstats.chunks_shm += d.st.chunks_shm;
    c->gstats.bytes_shm += d.st.bytes_shm;
    c->gstats.fallbacks += d.st.fallbacks;
    if (own_pool) {
        c->dpool_busy = 0;
        if (c->dpool_closed) c->dpool = NULL;   /* destroyed meanwhile: ours to free */
        else threads = NULL;                    /* kept for the next gather */
    }
    uv_mutex_unlock(&c->mu);
    gs__dpool_free(threads);
out_mutex:
    uv_mutex_destroy(&d.mu);
out_bytes:
    gs_free(d.bytes);
out_free:
    if (lop != NULL) gs__op_free(lop);
    gs_free(first);
    gs_free(keys);
}
