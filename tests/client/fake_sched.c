#include "fake_sched.h"

#include "common/buf.h"
#include "common/time.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int fake_send(fake_t *f, const gs_msg_t *m)
{
    gs_buf_t b;
    size_t off = 0;
    gs_buf_init(&b);
    if (gs_msg_encode(m, &b) != GS_OK) return -1;
    while (off < b.len) {
        ssize_t n = send(f->cfd, b.data + off, b.len - off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            gs_buf_cleanup(&b);
            return -1;
        }
        off += (size_t)n;
    }
    gs_buf_cleanup(&b);
    return 0;
}

int fake_send_data(fake_t *f, uint64_t req_id, uint64_t graph, uint64_t task, int32_t status,
                   const double *v, size_t n)
{
    gs_msg_t m;
    memset(&m, 0, sizeof(m));
    m.type = GS_MSG_DATA;
    m.u.data.req_id = req_id;
    m.u.data.graph_id = graph;
    m.u.data.task_id = task;
    m.u.data.status = status;
    m.u.data.data.data = (const uint8_t *)v;
    m.u.data.data.len = n * sizeof(double);
    return fake_send(f, &m);
}

/* LOCATE_REQ (direct gathers): the fake has no workers with data ports, so every key is located
 * nowhere (or, with locate_error, the request fails); the client then relays. */
static int fake_answer_locate(fake_t *f, const gs_msg_locate_req_t *l)
{
    gs_msg_t r;
    uint64_t n = l->n;
    uint64_t *nbytes = calloc(n ? n : 1, sizeof *nbytes), *ticket = calloc(n ? n : 1, 32);
    gs_str_t *none = calloc(n ? n : 1, sizeof *none);
    int rc;
    if (f->locate_error) {
        free(nbytes);
        free(ticket);
        free(none);
        return fake_send_data(f, l->req_id, 0, 0, GS_ERR_INVALID_PARAM, NULL, 0);
    }
    memset(&r, 0, sizeof r);
    r.type = GS_MSG_LOCATIONS;
    r.u.locations.req_id = l->req_id;
    r.u.locations.n = r.u.locations.naddr = r.u.locations.nhost = (uint32_t)n;
    r.u.locations.keys = l->keys;
    r.u.locations.nbytes = nbytes;
    r.u.locations.ticket = ticket;
    r.u.locations.addr = none;
    r.u.locations.host = none;
    rc = fake_send(f, &r);
    free(nbytes);
    free(ticket);
    free(none);
    return rc;
}

int fake_accept_and_finish(fake_t *f, const gs_msg_t *m)
{
    const gs_msg_graph_submit_t *s = &m->u.graph_submit;
    gs_msg_t r;
    uint64_t gid;
    pthread_mutex_lock(&f->mu);
    gid = f->next_graph_id++;
    f->sub_client_ref = s->client_ref;
    f->sub_flags = s->flags;
    f->sub_ntasks = s->ntasks;
    f->sub_nexternals = s->nexternals;
    f->sub_noutputs = s->noutputs;
    for (uint64_t i = 0; i < s->noutputs && i < FAKE_MAX_OUTPUTS; i++) f->sub_outputs[i] = s->outputs[i];
    f->sub_graph_id = gid;
    pthread_mutex_unlock(&f->mu);
    memset(&r, 0, sizeof(r));
    r.type = GS_MSG_GRAPH_ACCEPTED;
    r.u.graph_accepted.client_ref = s->client_ref;
    r.u.graph_accepted.graph_id = gid;
    if (fake_send(f, &r) != 0) return 1;
    memset(&r, 0, sizeof(r));
    r.type = GS_MSG_PROGRESS;
    r.u.progress.graph_id = gid;
    r.u.progress.done = s->ntasks / 2;
    r.u.progress.total = s->ntasks;
    if (fake_send(f, &r) != 0) return 1;
    memset(&r, 0, sizeof(r));
    r.type = GS_MSG_GRAPH_DONE;
    r.u.graph_done.graph_id = gid;
    r.u.graph_done.status = GS_OK;
    r.u.graph_done.ntasks = s->ntasks;
    r.u.graph_done.run_ns_total = 1000 * s->ntasks;
    r.u.graph_done.wall_ns = 5000000;
    return fake_send(f, &r) != 0;
}

/* HELLO -> CHALLENGE, AUTH -> WELCOME (or ERROR); *done_p set once WELCOME went out. */
static int fake_handshake(fake_t *f, const gs_msg_t *m, int *done_p)
{
    gs_msg_t r;
    const char *want = f->token ? f->token : "";
    memset(&r, 0, sizeof(r));
    if (!f->hs.challenged) {
        if (m->type != GS_MSG_HELLO) return 1;
        if (gs_hs_sched_challenge(&f->hs, want, &m->u.hello, &r) != GS_OK) return 1;
        return fake_send(f, &r) != 0;
    }
    if (m->type != GS_MSG_AUTH) return 1;
    if (!gs_hs_sched_check(&f->hs, &m->u.auth)) {
        static const char msg[] = "wrong cluster token";
        r.type = GS_MSG_ERROR;
        r.u.error.status = GS_ERR_AUTH;
        r.u.error.message.data = (const uint8_t *)msg;
        r.u.error.message.len = sizeof(msg) - 1;
        fake_send(f, &r);
        return 1;
    }
    r.type = GS_MSG_WELCOME;
    r.u.welcome.version = f->refuse_version ? GS_PROTO_VERSION + 7 : GS_PROTO_VERSION;
    r.u.welcome.id = 1;
    r.u.welcome.heartbeat_ms = 1000;
    *done_p = 1;
    return fake_send(f, &r) != 0;
}

/* Read the HELLO on f->cfd and answer it with ERROR GS_ERR_BUSY, as gsched at its connection
 * limit does, or (@a challenge) with CHALLENGE, as gsched does before it closes a connection in
 * the middle of its handshake to make room. */
static void fake_turn_away(fake_t *f, int challenge)
{
    static const char text[] = "too many connections (limit 1)";
    gs_frame_reader_t rd;
    uint8_t buf[4096];
    const uint8_t *payload;
    size_t len;
    gs_msg_t r;
    ssize_t n;
    gs_frame_reader_init(&rd, GS_PROTO_DEFAULT_MAX_FRAME);
    while ((n = recv(f->cfd, buf, sizeof(buf), 0)) > 0 &&
           gs_frame_reader_feed(&rd, buf, (size_t)n) == GS_OK &&
           gs_frame_reader_next(&rd, &payload, &len) != GS_OK) {
    }
    if (challenge) {
        gs_hs_sched_t hs;
        gs_msg_t hello;
        memset(&hs, 0, sizeof(hs));
        memset(&r, 0, sizeof(r));
        if (n > 0 && gs_msg_decode(payload, len, &hello) == GS_OK) {
            if (gs_hs_sched_challenge(&hs, f->token ? f->token : "", &hello.u.hello, &r) == GS_OK)
                fake_send(f, &r);
            gs_msg_cleanup(&hello);
        }
        gs_frame_reader_cleanup(&rd);
        return;
    }
    gs_frame_reader_cleanup(&rd);
    memset(&r, 0, sizeof(r));
    r.type = GS_MSG_ERROR;
    r.u.error.status = GS_ERR_BUSY;
    r.u.error.message.data = (const uint8_t *)text;
    r.u.error.message.len = sizeof(text) - 1;
    fake_send(f, &r);
}

static void *fake_main(void *arg)
{
    fake_t *f = arg;
    gs_frame_reader_t rd;
    int handshaken = 0, stop = 0;
    uint8_t buf[65536];

    for (;;) {
        f->cfd = accept(f->lfd, NULL, NULL);
        if (f->cfd < 0) return NULL;
        pthread_mutex_lock(&f->mu);
        f->accepted++;
        pthread_cond_broadcast(&f->cond);
        pthread_mutex_unlock(&f->mu);
        if (f->close_first > 0) {          /* what gsched's eviction looks like to the peer */
            f->close_first--;
            close(f->cfd);
            continue;
        }
        if (f->busy_first > 0) {           /* what gsched's connection limit says */
            f->busy_first--;
            fake_turn_away(f, 0);
            close(f->cfd);
            continue;
        }
        if (f->hangup_first > 0) {
            f->hangup_first--;
            fake_turn_away(f, 1);
            close(f->cfd);
            continue;
        }
        break;
    }
    if (f->silent) {
        /* read and drop until the peer goes away */
        while (recv(f->cfd, buf, sizeof(buf), 0) > 0) {
        }
        return NULL;
    }
    gs_frame_reader_init(&rd, GS_PROTO_DEFAULT_MAX_FRAME);
    while (!stop) {
        ssize_t n = recv(f->cfd, buf, sizeof(buf), 0);
        const uint8_t *payload;
        size_t len;
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        if (gs_frame_reader_feed(&rd, buf, (size_t)n) != GS_OK) break;
        while (!stop && gs_frame_reader_next(&rd, &payload, &len) == GS_OK) {
            gs_msg_t m;
            if (gs_msg_decode(payload, len, &m) != GS_OK) {
                stop = 1;
                break;
            }
            pthread_mutex_lock(&f->mu);
            if (m.type < GS_MSG_TYPE_MAX) f->counts[m.type]++;
            if (m.type == GS_MSG_CANCEL || m.type == GS_MSG_RELEASE_GRAPH)
                f->last_graph_cmd = m.u.cancel.graph_id;
            pthread_cond_broadcast(&f->cond);
            pthread_mutex_unlock(&f->mu);
            if (!handshaken) {
                stop = fake_handshake(f, &m, &handshaken);
            } else if (m.type == GS_MSG_LOCATE_REQ) {
                stop = fake_answer_locate(f, &m.u.locate_req) != 0;
            } else if (f->handler != NULL) {
                stop = f->handler(f, &m);
            }
            gs_msg_cleanup(&m);
        }
    }
    gs_frame_reader_cleanup(&rd);
    shutdown(f->cfd, SHUT_RDWR);
    pthread_mutex_lock(&f->mu);
    f->closed = 1;
    pthread_cond_broadcast(&f->cond);
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

int fake_start(fake_t *f, fake_handler_t handler, void *arg)
{
    struct sockaddr_in sa;
    socklen_t sl = sizeof(sa);
    f->handler = handler;
    f->arg = arg;
    f->cfd = -1;
    f->next_graph_id = 100;
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cond, NULL);
    f->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (f->lfd < 0) return -1;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = 0;
    if (bind(f->lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(f->lfd, 4) != 0 ||
        getsockname(f->lfd, (struct sockaddr *)&sa, &sl) != 0)
        return -1;
    f->port = ntohs(sa.sin_port);
    snprintf(f->address, sizeof(f->address), "tcp://127.0.0.1:%d", f->port);
    return pthread_create(&f->thread, NULL, fake_main, f) == 0 ? 0 : -1;
}

void fake_stop(fake_t *f)
{
    shutdown(f->lfd, SHUT_RDWR);
    if (f->cfd >= 0) shutdown(f->cfd, SHUT_RDWR);
    pthread_join(f->thread, NULL);
    close(f->lfd);
    if (f->cfd >= 0) close(f->cfd);
}

int fake_wait_count(fake_t *f, uint32_t type, int n, double timeout_s)
{
    double deadline = gs_now_s() + timeout_s;
    int ok;
    pthread_mutex_lock(&f->mu);
    while (f->counts[type] < n && gs_now_s() < deadline) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 10 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&f->cond, &f->mu, &ts);
    }
    ok = f->counts[type] >= n;
    pthread_mutex_unlock(&f->mu);
    return ok;
}
