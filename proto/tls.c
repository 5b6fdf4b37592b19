/*
 * TLS sessions over memory BIOs (see proto/tls.h). Each session owns an SSL whose read BIO
 * receives the socket's ciphertext and whose write BIO collects what must go out; conn.c moves
 * bytes between those BIOs and its libuv stream.
 */
#include "proto/tls.h"

#include "common/alloc.h"
#include "common/error.h"
#include "common/log.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <arpa/inet.h>

struct gs_tls_ctx {
    SSL_CTX *ssl_ctx;
    int is_server;
    int require_client_cert;
};

struct gs_tls_session {
    SSL *ssl;
    BIO *rbio;  /* ciphertext from the peer (owned by ssl) */
    BIO *wbio;  /* ciphertext to the peer (owned by ssl) */
    int ready;
    int got_data;  /* plaintext received: the peer accepted us (TLS 1.3 servers refuse a client
                      certificate after the client's handshake has completed) */
    int failed;
    char peer_name[64];
};

/* OpenSSL's first queued error as text ("unknown" when none), and clear the queue. */
static void gs__tls_err_text(char *out, size_t len)
{
    unsigned long e = ERR_get_error();
    if (e == 0) {
        snprintf(out, len, "unknown reason");
    } else {
        ERR_error_string_n(e, out, len);
    }
    ERR_clear_error();
}

static gs_status_t gs__tls_cfg_fail(const char *what, const char *file)
{
    char why[256];
    gs__tls_err_text(why, sizeof why);
    return gs_error_set(GS_ERR_INVALID_PARAM, "tls: cannot load %s '%s': %s", what, file, why);
}

gs_status_t gs_tls_ctx_create(const gs_tls_config_t *cfg, int is_server, gs_tls_ctx_t **ctx_p)
{
    gs_tls_ctx_t *ctx;
    gs_status_t st;
    if (cfg == NULL || ctx_p == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "gs_tls_ctx_create: NULL argument");
    if (cfg->ca_file == NULL || cfg->ca_file[0] == '\0') {
        return gs_error_set(GS_ERR_INVALID_PARAM, "tls: a CA file is required (--tls-ca-file)");
    }
    if ((cfg->cert_file == NULL) != (cfg->key_file == NULL)) {
        return gs_error_set(GS_ERR_INVALID_PARAM, "tls: a certificate and its key go together (--tls-cert and "
                            "--tls-key)");
    }
    if (is_server && cfg->cert_file == NULL) {
        return gs_error_set(GS_ERR_INVALID_PARAM, "tls: the server needs a certificate and key (--tls-cert, "
                            "--tls-key)");
    }
    if (!is_server && cfg->require_client_cert) {
        return gs_error_set(GS_ERR_INVALID_PARAM, "tls: require_client_cert is a server setting");
    }
    ctx = gs_calloc(1, sizeof *ctx, "tls ctx");
    if (ctx == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory creating a TLS context");
    ERR_clear_error();
    ctx->ssl_ctx = SSL_CTX_new(is_server ? TLS_server_method() : TLS_client_method());
    if (ctx->ssl_ctx == NULL) {
        st = gs_error_set(GS_ERR_NO_MEMORY, "tls: SSL_CTX_new failed");
        goto err_free;
    }
    ctx->is_server = is_server;
    ctx->require_client_cert = is_server && cfg->require_client_cert;
    SSL_CTX_set_min_proto_version(ctx->ssl_ctx, TLS1_2_VERSION);
    SSL_CTX_set_mode(ctx->ssl_ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    if (SSL_CTX_load_verify_locations(ctx->ssl_ctx, cfg->ca_file, NULL) != 1) {
        st = gs__tls_cfg_fail("CA file", cfg->ca_file);
        goto err_ctx;
    }
    if (cfg->cert_file != NULL) {
        if (SSL_CTX_use_certificate_chain_file(ctx->ssl_ctx, cfg->cert_file) != 1) {
            st = gs__tls_cfg_fail("certificate", cfg->cert_file);
            goto err_ctx;
        }
        if (SSL_CTX_use_PrivateKey_file(ctx->ssl_ctx, cfg->key_file, SSL_FILETYPE_PEM) != 1) {
            st = gs__tls_cfg_fail("private key", cfg->key_file);
            goto err_ctx;
        }
        if (SSL_CTX_check_private_key(ctx->ssl_ctx) != 1) {
            st = gs__tls_cfg_fail("private key (does not match the certificate)", cfg->key_file);
            goto err_ctx;
        }
    }
    if (!is_server) {
        SSL_CTX_set_verify(ctx->ssl_ctx, SSL_VERIFY_PEER, NULL);
    } else if (ctx->require_client_cert) {
        STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(cfg->ca_file);
        if (names != NULL) SSL_CTX_set_client_CA_list(ctx->ssl_ctx, names);
        SSL_CTX_set_verify(ctx->ssl_ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
    } else {
        SSL_CTX_set_verify(ctx->ssl_ctx, SSL_VERIFY_NONE, NULL);
    }
    ERR_clear_error();
    *ctx_p = ctx;
    return GS_OK;
err_ctx:
    SSL_CTX_free(ctx->ssl_ctx);
err_free:
    gs_free(ctx);
    return st;
}

void gs_tls_ctx_destroy(gs_tls_ctx_t *ctx)
{
    if (ctx == NULL) return;
    SSL_CTX_free(ctx->ssl_ctx);
    gs_free(ctx);
}

int gs_tls_ctx_requires_client_cert(const gs_tls_ctx_t *ctx)
{
    return ctx != NULL && ctx->require_client_cert;
}

static int gs__tls_is_ip(const char *host)
{
    unsigned char a[sizeof(struct in6_addr)];
    return inet_pton(AF_INET, host, a) == 1 || inet_pton(AF_INET6, host, a) == 1;
}

gs_status_t gs_tls_session_create(gs_tls_ctx_t *ctx, const char *peer_host, const char *peer_name,
                                  gs_tls_session_t **session_p)
{
    gs_tls_session_t *s;
    gs_status_t st;
    if (ctx == NULL || session_p == NULL) {
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_tls_session_create: NULL argument");
    }
    if (!ctx->is_server && (peer_host == NULL || peer_host[0] == '\0')) {
        return gs_error_set(GS_ERR_INVALID_PARAM, "tls: a client session needs the host it connects to");
    }
    s = gs_calloc(1, sizeof *s, "tls session");
    if (s == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory creating a TLS session");
    snprintf(s->peer_name, sizeof s->peer_name, "%s", peer_name != NULL ? peer_name : "?");
    ERR_clear_error();
    s->ssl = SSL_new(ctx->ssl_ctx);
    s->rbio = BIO_new(BIO_s_mem());
    s->wbio = BIO_new(BIO_s_mem());
    if (s->ssl == NULL || s->rbio == NULL || s->wbio == NULL) {
        st = gs_error_set(GS_ERR_NO_MEMORY, "out of memory creating a TLS session");
        goto err_free;
    }
    BIO_set_mem_eof_return(s->rbio, -1);  /* empty read BIO: "retry", not EOF */
    SSL_set_bio(s->ssl, s->rbio, s->wbio);  /* ssl owns both from here */
    if (ctx->is_server) {
        SSL_set_accept_state(s->ssl);
    } else {
        int ok;
        SSL_set_connect_state(s->ssl);
        if (gs__tls_is_ip(peer_host)) {
            ok = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(s->ssl), peer_host);
        } else {
            ok = SSL_set1_host(s->ssl, peer_host) && SSL_set_tlsext_host_name(s->ssl, peer_host);
        }
        if (!ok) {
            st = gs_error_set(GS_ERR_INVALID_PARAM, "tls: cannot verify against host '%s'", peer_host);
            SSL_free(s->ssl);
            gs_free(s);
            return st;
        }
        (void)SSL_do_handshake(s->ssl);  /* ClientHello into wbio; returns "want read" */
    }
    ERR_clear_error();
    *session_p = s;
    return GS_OK;
err_free:
    SSL_free(s->ssl);  /* the BIOs are not attached yet */
    BIO_free(s->rbio);
    BIO_free(s->wbio);
    gs_free(s);
    return st;
}

void gs_tls_session_destroy(gs_tls_session_t *s)
{
    if (s == NULL) return;
    SSL_free(s->ssl);
    gs_free(s);
}

/* Map a failed SSL call: GS_INPROGRESS when it only waits for bytes. */
static gs_status_t gs__tls_check(gs_tls_session_t *s, int ret, const char *what)
{
    char why[256];
    int err = SSL_get_error(s->ssl, ret);
    if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
        ERR_clear_error();
        return GS_INPROGRESS;
    }
    s->failed = 1;
    if (err == SSL_ERROR_ZERO_RETURN) {
        ERR_clear_error();
        return gs_error_set(GS_ERR_CONN_CLOSED, "tls: %s closed the session", s->peer_name);
    }
    gs__tls_err_text(why, sizeof why);
    if (!s->ready || !s->got_data) {
        long vr = SSL_get_verify_result(s->ssl);
        if (vr != X509_V_OK) {
            size_t n = strlen(why);
            snprintf(why + n, sizeof why - n, " (%s)", X509_verify_cert_error_string(vr));
        }
        GS_LOG_WARN("connection %s: tls handshake failed: %s", s->peer_name, why);
        return gs_error_set(GS_ERR_AUTH, "tls handshake with %s failed: %s", s->peer_name, why);
    }
    GS_LOG_WARN("connection %s: tls %s failed: %s", s->peer_name, what, why);
    return gs_error_set(GS_ERR_PROTO, "tls %s with %s failed: %s", what, s->peer_name, why);
}

gs_status_t gs_tls_session_feed(gs_tls_session_t *s, const void *data, size_t len, gs_tls_plain_cb cb, void *arg)
{
    char plain[16384];
    gs_status_t st;
    if (s == NULL || cb == NULL || (data == NULL && len > 0)) {
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_tls_session_feed: NULL argument");
    }
    if (s->failed) return gs_error_set(GS_ERR_PROTO, "tls session with %s has failed", s->peer_name);
    if (len > 0 && BIO_write(s->rbio, data, (int)len) != (int)len) {
        s->failed = 1;
        return gs_error_set(GS_ERR_NO_MEMORY, "out of memory buffering TLS records from %s", s->peer_name);
    }
    if (!s->ready) {
        int r = SSL_do_handshake(s->ssl);
        if (r != 1) {
            st = gs__tls_check(s, r, "handshake");
            return st == GS_INPROGRESS ? GS_OK : st;
        }
        s->ready = 1;
        GS_LOG_DEBUG("connection %s: %s established (%s)", s->peer_name, SSL_get_version(s->ssl),
                     SSL_get_cipher_name(s->ssl));
    }
    for (;;) {
        int n = SSL_read(s->ssl, plain, (int)sizeof plain);
        if (n <= 0) {
            st = gs__tls_check(s, n, "read");
            return st == GS_INPROGRESS ? GS_OK : st;
        }
        s->got_data = 1;
        if ((st = cb(arg, plain, (size_t)n)) != GS_OK) return st;
    }
}

int gs_tls_session_ready(const gs_tls_session_t *s)
{
    return s != NULL && s->ready;
}

gs_status_t gs_tls_session_write(gs_tls_session_t *s, const void *data, size_t len)
{
    const uint8_t *p = data;
    if (s == NULL || (data == NULL && len > 0)) {
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_tls_session_write: NULL argument");
    }
    if (!s->ready || s->failed) {
        return gs_error_set(GS_ERR_INVALID_PARAM, "tls session with %s is not established", s->peer_name);
    }
    while (len > 0) {
        int chunk = len > (1u << 30) ? (1 << 30) : (int)len;
        int n = SSL_write(s->ssl, p, chunk);
        if (n <= 0) {
            gs_status_t st = gs__tls_check(s, n, "write");
            if (st == GS_INPROGRESS) {  /* memory BIO: only on allocation failure */
                s->failed = 1;
                st = gs_error_set(GS_ERR_NO_MEMORY, "tls write to %s could not proceed", s->peer_name);
            }
            return st;
        }
        p += n;
        len -= (size_t)n;
    }
    return GS_OK;
}

gs_status_t gs_tls_session_seal(gs_tls_session_t *s, const void *head, size_t head_len, const void *tail,
                                size_t tail_len, uint8_t **out_p, size_t *len_p)
{
    gs_buf_t out;
    gs_status_t st;
    if (s == NULL || out_p == NULL || len_p == NULL) {
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_tls_session_seal: NULL argument");
    }
    gs_buf_init(&out);
    if ((head_len > 0 && (st = gs_tls_session_write(s, head, head_len)) != GS_OK) ||
        (tail_len > 0 && (st = gs_tls_session_write(s, tail, tail_len)) != GS_OK) ||
        (st = gs_tls_session_take_output(s, &out)) != GS_OK) {
        gs_buf_cleanup(&out);
        return st;
    }
    *out_p = gs_buf_detach(&out, len_p);
    return GS_OK;
}

void gs_tls_session_close_notify(gs_tls_session_t *s)
{
    if (s == NULL || !s->ready || s->failed) return;
    (void)SSL_shutdown(s->ssl);
    ERR_clear_error();
}

size_t gs_tls_session_pending_output(const gs_tls_session_t *s)
{
    return s != NULL ? (size_t)BIO_ctrl_pending(s->wbio) : 0;
}

gs_status_t gs_tls_session_take_output(gs_tls_session_t *s, gs_buf_t *out)
{
    size_t n;
    gs_status_t st;
    if (s == NULL || out == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "gs_tls_session_take_output: NULL");
    n = (size_t)BIO_ctrl_pending(s->wbio);
    if (n == 0) return GS_OK;
    if ((st = gs_buf_reserve(out, n)) != GS_OK) return st;
    if (BIO_read(s->wbio, out->data + out->len, (int)n) != (int)n) {
        return gs_error_set(GS_ERR_INTERNAL, "tls: short read from the write BIO");
    }
    out->len += n;
    return GS_OK;
}
