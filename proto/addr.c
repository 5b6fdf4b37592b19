/*
 * Addresses and libuv errors at the boundary of the control plane (see proto/conn.h):
 * gs_addr_parse() and gs_status_from_uv(), used by the connections and the daemons.
 */
#include "proto/conn.h"

#include "common/error.h"
#include "common/log.h"

#include <string.h>

gs_status_t gs_status_from_uv(int uv_err, const char *what)
{
    gs_status_t st;
    if (uv_err >= 0) return GS_OK;
    switch (uv_err) {
    case UV_ENOMEM: st = GS_ERR_NO_MEMORY; break;
    case UV_ECONNREFUSED:
    case UV_EHOSTUNREACH:
    case UV_ENETUNREACH: st = GS_ERR_CONN_REFUSED; break;
    case UV_ETIMEDOUT: st = GS_ERR_TIMED_OUT; break;
    case UV_EOF:
    case UV_ECONNRESET:
    case UV_ECONNABORTED:
    case UV_EPIPE:
    case UV_ENOTCONN: st = GS_ERR_CONN_CLOSED; break;
    case UV_ECANCELED: st = GS_ERR_CANCELED; break;
    case UV_EINVAL: st = GS_ERR_INVALID_PARAM; break;
    case UV_EADDRINUSE:
    case UV_EBUSY: st = GS_ERR_BUSY; break;
    case UV_EADDRNOTAVAIL:
    case UV_ENOENT:
    case UV_EAI_NONAME:
    case UV_EAI_NODATA:
    case UV_EAI_FAIL:
    case UV_EAI_AGAIN: st = GS_ERR_NOT_FOUND; break;
    case UV_ENOTSUP:
    case UV_EAFNOSUPPORT:
    case UV_EAI_FAMILY: st = GS_ERR_UNSUPPORTED; break;
    case UV_EMFILE:
    case UV_ENFILE:
    case UV_ENOBUFS: st = GS_ERR_NO_RESOURCE; break;
    default: st = GS_ERR_IO; break;
    }
    GS_LOG_DEBUG("%s: %s (%s)", what != NULL ? what : "libuv", uv_strerror(uv_err), uv_err_name(uv_err));
    return gs_error_set(st, "%s: %s", what != NULL ? what : "libuv", uv_strerror(uv_err));
}

/* ---- address parsing ---- */

gs_status_t gs_addr_parse(const char *addr, char *host, size_t host_len, int *port_p)
{
    const char *s, *hbeg, *pstr, *colon, *scheme;
    size_t hlen;
    long port = 0;
    int ndigits = 0;

    if (addr == NULL || host == NULL || port_p == NULL || host_len == 0) {
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_addr_parse: NULL argument");
    }
    s = addr;
    scheme = strstr(s, "://");
    if (scheme != NULL) {
        if ((size_t)(scheme - s) != 3 || strncmp(s, "tcp", 3) != 0) {
            return gs_error_set(GS_ERR_INVALID_PARAM, "address '%s': only tcp:// is supported", addr);
        }
        s = scheme + 3;
    }
    if (*s == '[') {
        const char *close = strchr(s, ']');
        if (close == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "address '%s': missing ']'", addr);
        hbeg = s + 1;
        hlen = (size_t)(close - hbeg);
        if (close[1] != ':') return gs_error_set(GS_ERR_INVALID_PARAM, "address '%s': missing ':port'", addr);
        pstr = close + 2;
    } else {
        colon = strrchr(s, ':');
        if (colon == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "address '%s': missing ':port'", addr);
        if (memchr(s, ':', (size_t)(colon - s)) != NULL) {
            return gs_error_set(GS_ERR_INVALID_PARAM, "address '%s': an IPv6 host needs [brackets]", addr);
        }
        hbeg = s;
        hlen = (size_t)(colon - s);
        pstr = colon + 1;
    }
    if (hlen == 0) return gs_error_set(GS_ERR_INVALID_PARAM, "address '%s': empty host", addr);
    if (hlen >= host_len) {
        return gs_error_set(GS_ERR_INVALID_PARAM, "address '%s': host longer than %zu bytes", addr, host_len - 1);
    }
    for (const char *p = pstr; *p != '\0'; p++) {
        if (*p < '0' || *p > '9' || ++ndigits > 5) {
            return gs_error_set(GS_ERR_INVALID_PARAM, "address '%s': port '%s' is not a number in 0..65535",
                                addr, pstr);
        }
        port = port * 10 + (*p - '0');
    }
    if (ndigits == 0 || port > 65535) {
        return gs_error_set(GS_ERR_INVALID_PARAM, "address '%s': port '%s' is not a number in 0..65535", addr,
                            pstr);
    }
    memcpy(host, hbeg, hlen);
    host[hlen] = '\0';
    *port_p = (int)port;
    return GS_OK;
}
