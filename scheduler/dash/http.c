/* The dashboard's HTTP server: libmicrohttpd in its own threads (an internal polling thread
 * pool), routing, authentication, limits and static assets. Handlers read snapshots only
 * (gs__dash_snapshot_get); nothing here touches the scheduler. See dash.h. */
#include "scheduler/dash/assets.h"
#include "scheduler/dash/dash_int.h"
#include "common/log.h"
#include "common/token.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <inttypes.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GS__HTTP_THREADS 4u
#define GS__HTTP_MAX_CONNS 2048u          /* libmicrohttpd also stays below FD_SETSIZE/fd limit */
#define GS__HTTP_TIMEOUT_S 10u            /* idle or slow connections are closed after this */
#define GS__HTTP_CONN_MEMORY (32u * 1024u) /* request line + headers: more is answered 431 */
#define GS__COOKIE_TOKEN_MAX 4096u          /* = GS_TOKEN_MAX */
#define GS__SNAP_MAX_AGE_MS 300u          /* data older than this waits for the next snapshot */

static const char *const gs__ct_json = "application/json; charset=utf-8";
static const char *const gs__ct_text = "text/plain; charset=utf-8";
static const char *const gs__ct_metrics = "text/plain; version=0.0.4; charset=utf-8";
static const char *const gs__ct_html = "text/html; charset=utf-8";

static void gs__http_log(void *arg, const char *fmt, va_list ap)
{
    char line[256];
    (void)arg;
    vsnprintf(line, sizeof line, fmt, ap);
    line[strcspn(line, "\n")] = '\0';
    GS_LOG_DEBUG("dashboard http: %s", line);
}

/* Queue a response owning @a body (malloc'd; freed by libmicrohttpd with free()). */
static enum MHD_Result gs__http_reply(gs__dash_t *d, struct MHD_Connection *c, unsigned code, const char *ctype,
                                      char *body, size_t len, const char *cookie)
{
    struct MHD_Response *r;
    enum MHD_Result ret;
    if (body == NULL) {
        static const char oom[] = "out of memory\n";
        code = MHD_HTTP_INTERNAL_SERVER_ERROR;
        ctype = gs__ct_text;
        r = MHD_create_response_from_buffer(sizeof oom - 1, (void *)oom, MHD_RESPMEM_PERSISTENT);
    } else {
        r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    }
    if (r == NULL) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    if (cookie != NULL) MHD_add_response_header(r, MHD_HTTP_HEADER_SET_COOKIE, cookie);
    if (code >= 400) atomic_fetch_add_explicit(&d->http_errors_total, 1, memory_order_relaxed);
    ret = MHD_queue_response(c, code, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result gs__http_text(gs__dash_t *d, struct MHD_Connection *c, unsigned code, const char *text)
{
    size_t n = strlen(text);
    char *body = malloc(n + 1);
    if (body != NULL) memcpy(body, text, n + 1);
    return gs__http_reply(d, c, code, gs__ct_text, body, n, NULL);
}

static int gs__http_token_ok(const gs__dash_t *d, const char *tok, size_t len)
{
    return gs_token_equal(d->token, d->token_len, tok, len);
}

/* 1 when @a tok can be a cookie value as is (RFC 6265 cookie-octets). */
static int gs__http_cookie_safe(const char *tok)
{
    for (; *tok != '\0'; tok++) {
        unsigned char ch = (unsigned char)*tok;
        if (ch <= 0x20 || ch >= 0x7f || ch == '"' || ch == ',' || ch == ';' || ch == '\\') return 0;
    }
    return 1;
}

/* 1 when the request carries the cluster token (or none is needed); *from_query_p set when it
 * came as ?token= (the answer then sets the cookie). */
static int gs__http_authorized(gs__dash_t *d, struct MHD_Connection *c, int *from_query_p)
{
    const char *v;
    *from_query_p = 0;
    if (!d->need_token) return 1;
    v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (v != NULL && strncmp(v, "Bearer ", 7) == 0 && gs__http_token_ok(d, v + 7, strlen(v + 7))) return 1;
    v = MHD_lookup_connection_value(c, MHD_COOKIE_KIND, "gsched_token");
    if (v != NULL && gs__http_token_ok(d, v, strlen(v))) return 1;
    v = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "token");
    if (v != NULL && gs__http_token_ok(d, v, strlen(v))) {
        *from_query_p = 1;
        return 1;
    }
    return 0;
}

/* Parse a decimal u64 query argument (absent = @a dflt). 0 when malformed. */
static int gs__http_u64_arg(struct MHD_Connection *c, const char *key, uint64_t dflt, uint64_t *v_p)
{
    const char *v = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, key);
    char *end;
    unsigned long long x;
    if (v == NULL || v[0] == '\0') {
        *v_p = dflt;
        return 1;
    }
    if (v[0] < '0' || v[0] > '9') return 0;
    errno = 0;
    x = strtoull(v, &end, 10);
    if (*end != '\0' || errno != 0) return 0;
    *v_p = (uint64_t)x;
    return 1;
}

static enum MHD_Result gs__http_route(gs__dash_t *d, struct MHD_Connection *c, const char *url, const char *cookie)
{
    const gs__dasset_t *a = url[0] == '/' ? gs__dash_asset_find(url) : NULL;   /* only URL paths */
    gs__dsnap_t *snap;
    char *body = NULL;
    const char *ctype = gs__ct_json;
    unsigned code = MHD_HTTP_OK;
    uint64_t arg = 0;
    enum MHD_Result ret;

    if (a != NULL) {
        struct MHD_Response *r = MHD_create_response_from_buffer(a->len, (void *)a->data, MHD_RESPMEM_PERSISTENT);
        if (r == NULL) return MHD_NO;
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, a->content_type);
        MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
        if (cookie != NULL) MHD_add_response_header(r, MHD_HTTP_HEADER_SET_COOKIE, cookie);
        ret = MHD_queue_response(c, MHD_HTTP_OK, r);
        MHD_destroy_response(r);
        return ret;
    }
    if (strcmp(url, "/health") == 0) return gs__http_text(d, c, MHD_HTTP_OK, "ok\n");
    if (strcmp(url, "/api/workers") != 0 && strcmp(url, "/api/graphs") != 0 && strcmp(url, "/api/tasks") != 0 &&
        strcmp(url, "/api/transfers") != 0 && strcmp(url, "/metrics") != 0 && strcmp(url, "/report") != 0) {
        return gs__http_text(d, c, MHD_HTTP_NOT_FOUND, "not found: see / for the dashboard\n");
    }
    if (!gs__http_u64_arg(c, strcmp(url, "/report") == 0 ? "graph" : "since", 0, &arg)) {
        return gs__http_text(d, c, MHD_HTTP_BAD_REQUEST, "query argument is not a decimal number\n");
    }
    if (strcmp(url, "/report") == 0 && arg == 0) {
        return gs__http_text(d, c, MHD_HTTP_BAD_REQUEST, "/report needs ?graph=ID\n");
    }
    snap = gs__dash_snapshot_get(d, GS__SNAP_MAX_AGE_MS);
    if (snap == NULL) return gs__http_text(d, c, MHD_HTTP_SERVICE_UNAVAILABLE, "no snapshot yet: retry\n");
    if (strcmp(url, "/api/workers") == 0) body = gs__dash_api_workers(snap);
    else if (strcmp(url, "/api/graphs") == 0) body = gs__dash_api_graphs(snap);
    else if (strcmp(url, "/api/tasks") == 0) body = gs__dash_api_tasks(snap, arg);
    else if (strcmp(url, "/api/transfers") == 0) body = gs__dash_api_transfers(snap);
    else if (strcmp(url, "/metrics") == 0) {
        ctype = gs__ct_metrics;
        body = gs__dash_metrics(snap, atomic_load(&d->requests_total), atomic_load(&d->http_errors_total));
    } else {
        int status = 200;
        ctype = gs__ct_html;
        body = gs__dash_report(snap, arg, &status);
        if (body == NULL && status == 404) {
            gs__dsnap_unref(snap);
            return gs__http_text(d, c, MHD_HTTP_NOT_FOUND, "no such graph (finished graphs are kept a while)\n");
        }
    }
    gs__dsnap_unref(snap);
    return gs__http_reply(d, c, code, ctype, body, body != NULL ? strlen(body) : 0, cookie);
}

static enum MHD_Result gs__http_on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                           const char *version, const char *upload_data, size_t *upload_size,
                                           void **con_cls)
{
    gs__dash_t *d = cls;
    int from_query;
    char cookie[64 + GS__COOKIE_TOKEN_MAX];
    int set_cookie;
    (void)version;
    (void)upload_data;
    if (*con_cls == NULL) {   /* first call: headers only */
        *con_cls = d;
        atomic_fetch_add_explicit(&d->requests_total, 1, memory_order_relaxed);
        return MHD_YES;
    }
    if (*upload_size != 0) {   /* a body: not wanted; answered after it is read (discarded) */
        *upload_size = 0;
        return MHD_YES;
    }
    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
        return gs__http_text(d, c, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET and HEAD\n");
    }
    if (!gs__http_authorized(d, c, &from_query)) {
        return gs__http_text(d, c, MHD_HTTP_UNAUTHORIZED,
                             "this dashboard needs the cluster token: open /?token=TOKEN once (a cookie keeps "
                             "it) or send 'Authorization: Bearer TOKEN'\n");
    }
    set_cookie = from_query && d->token_len <= GS__COOKIE_TOKEN_MAX && gs__http_cookie_safe(d->token);
    if (set_cookie) snprintf(cookie, sizeof cookie, "gsched_token=%s; Path=/; HttpOnly; SameSite=Strict", d->token);
    return gs__http_route(d, c, url, set_cookie ? cookie : NULL);
}

gs_status_t gs__dash_http_start(gs__dash_t *d)
{
    struct sockaddr_storage ss;
    unsigned flags = MHD_USE_AUTO | MHD_USE_INTERNAL_POLLING_THREAD;
    const union MHD_DaemonInfo *info;
    int v6 = strchr(d->host, ':') != NULL;

    memset(&ss, 0, sizeof ss);
    if (v6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        a->sin6_port = htons((uint16_t)d->port);
        inet_pton(AF_INET6, d->host, &a->sin6_addr);
        flags |= MHD_USE_IPv6;
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        a->sin_port = htons((uint16_t)d->port);
        inet_pton(AF_INET, d->host, &a->sin_addr);
    }
    d->mhd = MHD_start_daemon(flags, (uint16_t)d->port, NULL, NULL, gs__http_on_request, d,
                              MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
                              MHD_OPTION_THREAD_POOL_SIZE, (unsigned)GS__HTTP_THREADS,
                              MHD_OPTION_CONNECTION_LIMIT, (unsigned)GS__HTTP_MAX_CONNS,
                              MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)GS__HTTP_TIMEOUT_S,
                              MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)GS__HTTP_CONN_MEMORY,
                              MHD_OPTION_EXTERNAL_LOGGER, gs__http_log, (void *)NULL,
                              MHD_OPTION_END);
    if (d->mhd == NULL) {
        return gs_error_set(GS_ERR_BUSY, "cannot serve the dashboard on %s:%d (address in use or not local?)",
                            d->host, d->port);
    }
    info = MHD_get_daemon_info(d->mhd, MHD_DAEMON_INFO_BIND_PORT);
    if (info != NULL && info->port != 0) d->port = info->port;
    if (v6) snprintf(d->address, sizeof d->address, "[%s]:%d", d->host, d->port);
    else snprintf(d->address, sizeof d->address, "%s:%d", d->host, d->port);
    return GS_OK;
}

void gs__dash_http_stop(gs__dash_t *d)
{
    if (d->mhd == NULL) return;
    MHD_stop_daemon(d->mhd);
    d->mhd = NULL;
}

const gs__dasset_t *gs__dash_asset_find(const char *path)
{
    if (strcmp(path, "/index.html") == 0) path = "/";
    for (size_t i = 0; i < gs__dash_nassets; i++) {
        if (strcmp(gs__dash_assets[i].path, path) == 0) return &gs__dash_assets[i];
    }
    return NULL;
}
