/* A minimal HTTP client and a strict Prometheus text parser for the tests (http.h). */
#include "http.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double th_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int th_http_raw(int port, const char *raw, size_t len, double timeout_s, th_resp_t *r)
{
    struct sockaddr_in a;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    size_t cap = 65536, n = 0, off = 0;
    char *buf, *sep;
    double deadline = th_now() + timeout_s;

    memset(r, 0, sizeof *r);
    if (fd < 0) return 0;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return 0;
    }
    while (off < len) {
        ssize_t w = send(fd, raw + off, len - off, MSG_NOSIGNAL);
        if (w <= 0) break;   /* the server may close early (e.g. huge headers): read what it said */
        off += (size_t)w;
    }
    buf = malloc(cap + 1);
    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        double left = deadline - th_now();
        ssize_t got;
        if (left <= 0 || poll(&p, 1, (int)(left * 1000) + 1) <= 0) break;
        if (n == cap) {
            cap *= 2;
            buf = realloc(buf, cap + 1);
        }
        got = recv(fd, buf + n, cap - n, 0);
        if (got <= 0) break;
        n += (size_t)got;
    }
    close(fd);
    buf[n] = '\0';
    sep = strstr(buf, "\r\n\r\n");
    if (sep != NULL) {
        size_t hl = (size_t)(sep - buf);
        r->head = malloc(hl + 1);
        memcpy(r->head, buf, hl);
        r->head[hl] = '\0';
        r->body_len = n - hl - 4;
        r->body = malloc(r->body_len + 1);
        memcpy(r->body, sep + 4, r->body_len);
        r->body[r->body_len] = '\0';
        if (sscanf(r->head, "HTTP/1.%*d %d", &r->status) != 1) r->status = 0;
    }
    free(buf);
    return 1;
}

int th_http_get(int port, const char *path, const char *extra, th_resp_t *r)
{
    char req[8192];
    int n = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n%s\r\n", path,
                     extra != NULL ? extra : "");
    return th_http_raw(port, req, (size_t)n, 30.0, r);
}

const char *th_resp_header(const th_resp_t *r, const char *name, char *buf, size_t len)
{
    size_t nl = strlen(name);
    const char *p = r->head;
    while (p != NULL && (p = strstr(p, "\r\n")) != NULL) {
        p += 2;
        if (strncasecmp(p, name, nl) == 0 && p[nl] == ':') {
            const char *v = p + nl + 1, *e;
            while (*v == ' ') v++;
            e = strstr(v, "\r\n");
            if (e == NULL) e = v + strlen(v);
            snprintf(buf, len, "%.*s", (int)(e - v), v);
            return buf;
        }
    }
    return NULL;
}

void th_resp_free(th_resp_t *r)
{
    free(r->head);
    free(r->body);
    memset(r, 0, sizeof *r);
}

/* ---- Prometheus text format ---- */

#define TH_MAX_FAM 128
#define TH_MAX_SERIES 2048

typedef struct {
    char name[128];
    char type[16];
    int help, samples;
} th_fam_t;

static int th_name_ok(const char *s, size_t n, int metric)
{
    if (n == 0) return 0;
    for (size_t i = 0; i < n; i++) {
        int c = (unsigned char)s[i];
        int ok = isalpha(c) || c == '_' || (metric && c == ':') || (i > 0 && isdigit(c));
        if (!ok) return 0;
    }
    return 1;
}

static int th_value_ok(const char *s, double *v_p)
{
    char *end;
    if (strcmp(s, "+Inf") == 0) *v_p = INFINITY;
    else if (strcmp(s, "-Inf") == 0) *v_p = -INFINITY;
    else if (strcmp(s, "NaN") == 0) *v_p = NAN;
    else {
        *v_p = strtod(s, &end);
        if (end == s || *end != '\0') return 0;
    }
    return 1;
}

static th_fam_t *th_fam(th_fam_t *f, int *nf, const char *name, size_t n, int create)
{
    for (int i = 0; i < *nf; i++) {
        if (strlen(f[i].name) == n && strncmp(f[i].name, name, n) == 0) return &f[i];
    }
    if (!create || *nf == TH_MAX_FAM || n >= sizeof f[0].name) return NULL;
    memset(&f[*nf], 0, sizeof f[0]);
    memcpy(f[*nf].name, name, n);
    return &f[(*nf)++];
}

const char *th_prom_check(const char *text)
{
    static char msg[256];
    static th_fam_t fams[TH_MAX_FAM];
    static char *series[TH_MAX_SERIES];
    int nf = 0, ns = 0, lineno = 0;
    const char *p = text;
    double bucket_prev = -1, bucket_le_prev = -INFINITY, inf_bucket = -1;
    char hist[128] = "";
    const char *err = NULL;

#define TH_FAIL(...)                                          \
    do {                                                      \
        int k_ = snprintf(msg, sizeof msg, "line %d: ", lineno); \
        snprintf(msg + k_, sizeof msg - (size_t)k_, __VA_ARGS__); \
        err = msg;                                            \
        goto done;                                            \
    } while (0)

    if (*text == '\0' || text[strlen(text) - 1] != '\n') {
        snprintf(msg, sizeof msg, "empty or no final newline");
        return msg;
    }
    while (*p != '\0') {
        const char *eol = strchr(p, '\n');
        char line[2048];
        size_t ll = (size_t)(eol - p);
        lineno++;
        if (ll >= sizeof line) TH_FAIL("line too long");
        memcpy(line, p, ll);
        line[ll] = '\0';
        p = eol + 1;
        if (ll == 0) TH_FAIL("empty line");
        if (line[0] == '#') {
            char kw[8], name[256], rest[1024];
            th_fam_t *f;
            if (sscanf(line, "# %7s %255s %1023[^\n]", kw, name, rest) != 3) TH_FAIL("malformed comment '%.80s'", line);
            if (!th_name_ok(name, strlen(name), 1)) TH_FAIL("bad metric name '%.80s'", name);
            f = th_fam(fams, &nf, name, strlen(name), 1);
            if (f == NULL) TH_FAIL("too many families");
            if (f->samples) TH_FAIL("%.80s after samples of %.80s", kw, name);
            if (strcmp(kw, "HELP") == 0) {
                if (f->help++) TH_FAIL("second HELP for %.80s", name);
            } else if (strcmp(kw, "TYPE") == 0) {
                if (f->type[0]) TH_FAIL("second TYPE for %.80s", name);
                if (strcmp(rest, "counter") && strcmp(rest, "gauge") && strcmp(rest, "histogram") &&
                    strcmp(rest, "summary") && strcmp(rest, "untyped")) {
                    TH_FAIL("unknown type '%.80s'", rest);
                }
                if (strcmp(rest, "counter") == 0 && (strlen(name) < 6 || strcmp(name + strlen(name) - 6, "_total") != 0)) {
                    TH_FAIL("counter %.80s does not end in _total", name);
                }
                memcpy(f->type, rest, strlen(rest) + 1);   /* one of the names above: fits */
            } else {
                TH_FAIL("unknown comment keyword '%.80s'", kw);
            }
            continue;
        }
        {
            const char *q = line, *sp;
            size_t nl = strcspn(line, "{ ");
            th_fam_t *f;
            double v, le = NAN;
            int is_bucket = 0;
            char key[2048];
            if (!th_name_ok(line, nl, 1)) TH_FAIL("bad sample name");
            f = th_fam(fams, &nf, line, nl, 0);
            if (f == NULL) {   /* histogram parts */
                static const char *const suf[] = {"_bucket", "_sum", "_count"};
                for (int k = 0; k < 3 && f == NULL; k++) {
                    size_t sl = strlen(suf[k]);
                    if (nl > sl && strncmp(line + nl - sl, suf[k], sl) == 0) {
                        f = th_fam(fams, &nf, line, nl - sl, 0);
                        if (f != NULL && strcmp(f->type, "histogram") != 0 && strcmp(f->type, "summary") != 0) f = NULL;
                        is_bucket = k == 0;
                    }
                }
            } else if (strcmp(f->type, "histogram") == 0) {
                TH_FAIL("bare sample of histogram %.80s", f->name);
            }
            if (f == NULL || !f->type[0] || !f->help) TH_FAIL("sample '%.*s' without HELP and TYPE before it", (int)nl, line);
            f->samples++;
            q = line + nl;
            if (*q == '{') {
                q++;
                while (*q != '}') {
                    size_t kl = strcspn(q, "=");
                    if (!th_name_ok(q, kl, 0) || q[kl] != '=' || q[kl + 1] != '"') TH_FAIL("bad label");
                    int is_le = kl == 2 && strncmp(q, "le", 2) == 0;
                    char val[512];
                    size_t vn = 0;
                    q += kl + 2;
                    while (*q != '"') {
                        if (*q == '\0') TH_FAIL("unterminated label value");
                        if (*q == '\\') {
                            q++;
                            if (*q != '\\' && *q != '"' && *q != 'n') TH_FAIL("bad escape");
                        }
                        if (vn < sizeof val - 1) val[vn++] = *q;
                        q++;
                    }
                    val[vn] = '\0';
                    if (is_le && !th_value_ok(val, &le)) TH_FAIL("bad le '%.80s'", val);
                    q++;
                    if (*q == ',') q++;
                    else if (*q != '}') TH_FAIL("expected , or } after a label");
                }
                q++;
            }
            if (*q != ' ') TH_FAIL("expected one space before the value");
            sp = q + 1;
            if (!th_value_ok(sp, &v)) TH_FAIL("bad value '%.80s'", sp);
            memcpy(key, line, (size_t)(q - line));
            key[q - line] = '\0';
            for (int i = 0; i < ns; i++) {
                if (strcmp(series[i], key) == 0) TH_FAIL("duplicate series %.80s", key);
            }
            if (ns < TH_MAX_SERIES) series[ns++] = strdup(key);
            if (strcmp(f->type, "counter") == 0 && !(v >= 0)) TH_FAIL("negative counter");
            if (strcmp(f->type, "histogram") == 0) {
                if (strcmp(hist, f->name) != 0) {
                    memcpy(hist, f->name, sizeof hist);
                    bucket_prev = -1;
                    bucket_le_prev = -INFINITY;
                    inf_bucket = -1;
                }
                if (is_bucket) {
                    if (isnan(le)) TH_FAIL("bucket without le");
                    if (!(le > bucket_le_prev)) TH_FAIL("le not increasing");
                    if (v < bucket_prev) TH_FAIL("buckets not cumulative");
                    bucket_prev = v;
                    bucket_le_prev = le;
                    if (isinf(le)) inf_bucket = v;
                } else if (nl > 6 && strncmp(line + nl - 6, "_count", 6) == 0) {
                    if (inf_bucket < 0) TH_FAIL("histogram %.80s without +Inf bucket before _count", f->name);
                    if (v != inf_bucket) TH_FAIL("_count != +Inf bucket");
                }
            }
        }
    }
done:
    for (int i = 0; i < ns; i++) free(series[i]);
    return err;
#undef TH_FAIL
}

int th_prom_value(const char *text, const char *series, double *v_p)
{
    size_t n = strlen(series);
    const char *p = text;
    while (p != NULL && *p != '\0') {
        if (strncmp(p, series, n) == 0 && p[n] == ' ') {
            *v_p = strtod(p + n + 1, NULL);
            return 1;
        }
        p = strchr(p, '\n');
        if (p != NULL) p++;
    }
    return 0;
}
