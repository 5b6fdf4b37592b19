/* Test helpers: a minimal HTTP/1.1 client over loopback sockets (raw bytes, so that tests can
 * also send malformed requests) and a strict parser of the Prometheus text format. */
#ifndef GS_TESTS_HTTP_H
#define GS_TESTS_HTTP_H

#include <stddef.h>

typedef struct th_resp {
    int status;                  /* HTTP status, 0 when no valid status line came back */
    char *head;                  /* status line and headers (NUL-terminated; free with th_resp_free) */
    char *body;                  /* NUL-terminated */
    size_t body_len;
} th_resp_t;

/** Send @a raw (len bytes) to 127.0.0.1:@a port, read until the server closes (or @a timeout_s)
 *  and parse the answer. Returns 1 when a connection was made. */
int th_http_raw(int port, const char *raw, size_t len, double timeout_s, th_resp_t *r);
/** GET @a path with optional extra header lines (@a extra: "Name: value\r\n"..., or NULL). */
int th_http_get(int port, const char *path, const char *extra, th_resp_t *r);
/** The value of header @a name (case-insensitive) copied into @a buf, or NULL. */
const char *th_resp_header(const th_resp_t *r, const char *name, char *buf, size_t len);
void th_resp_free(th_resp_t *r);

/** Parse a Prometheus text exposition strictly (metric and label names, escapes, one HELP and
 *  one TYPE per family before its samples, counters named *_total, histograms with cumulative
 *  le buckets ending in +Inf equal to _count, no duplicate series, final newline). Returns NULL
 *  when valid, else a static message naming the line. */
const char *th_prom_check(const char *text);
/** Value of the sample whose name and label set print exactly as @a series (e.g.
 *  "gsched_tasks_total{state=\"done\"}"); returns 1 when found. */
int th_prom_value(const char *text, const char *series, double *v_p);

#endif
