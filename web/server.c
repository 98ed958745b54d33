/* server.c — the libwebsockets context behind `ember serve`: one vhost on
 * host:port, the HTTP callback (method, path, peer address, headers, the
 * bounded body, routing), writing responses (whole, or streamed with chunked
 * transfer encoding, in pieces as the socket takes them, with comment pings
 * while a stream waits), connections per client address, and the wake-up
 * from the scheduler thread: a request's notify hook sets `wake` and calls
 * lws_cancel_service(); on the service thread every connection with a live
 * generation is then asked for a writable callback, where it pulls its
 * events. Only this thread touches sockets. */
#include <arpa/inet.h>
#include <errno.h>
#include <openssl/ssl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/grow.h"
#include "core/log.h"
#include "core/model/model.h"
#include "core/text/tokenizer.h"
#include "core/tmpl/chat_tmpl.h"
#include "web/caps.h"
#include "web/reasoning.h"
#include "web/tools.h"
#include "web/web_int.h"

#define WRITE_CHUNK (16 * 1024)   /* bytes per lws_write */

/* ---- buffers --------------------------------------------------------------- */

int em_buf_add(em_buf *b, const void *data, size_t n)
{
    if (em_grow((void **)&b->s, &b->cap, b->n + n, 1, 256))
        return EM_ENOMEM;
    if (n)
        memcpy(b->s + b->n, data, n);
    b->n += n;
    b->s[b->n] = 0;
    return 0;
}

int em_buf_addf(em_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = em_grow_vprintf(&b->s, &b->cap, &b->n, fmt, ap);
    va_end(ap);
    return rc;
}

static int dump_cb(const char *buf, size_t size, void *data)
{
    return em_buf_add(data, buf, size) ? -1 : 0;
}

int em_buf_add_json(em_buf *b, const json_t *j)
{
    return json_dump_callback(j, dump_cb, b, JSON_COMPACT | JSON_PRESERVE_ORDER) ? EM_ENOMEM : 0;
}

void em_buf_reset(em_buf *b)
{
    b->n = 0;
    if (b->s)
        b->s[0] = 0;
}

void em_buf_free(em_buf *b)
{
    free(b->s);
    b->s = NULL;
    b->n = b->cap = 0;
}

/* ---- errors ---------------------------------------------------------------- */

int em_web_fail(em_web_error *e, int status, const char *type, const char *code, const char *param,
                const char *fmt, ...)
{
    e->status = status;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    em_err_escape(e->message, sizeof e->message);
    return -1;
}

int web_storage_fail(em_web_error *e, int rc, const em_err *err, const web_store *st, const char *id,
                     const char *param)
{
    if (rc == EM_ENOENT)
        return em_web_fail(e, 404, "invalid_request_error", "not_found", st->id_param, st->not_found, id);
    if (rc == EM_EINVAL) {   /* what the request got wrong: the place err names ("conversations[1].title: ...") */
        char place[64] = "";
        const char *colon = strchr(err->msg, ':');
        size_t len = colon ? (size_t)(colon - err->msg) : 0;
        if (!param && len && len < sizeof place && !memchr(err->msg, ' ', len))
            snprintf(place, sizeof place, "%.*s", (int)len, err->msg);
        return em_web_fail(e, 400, "invalid_request_error", NULL, param ? param : place[0] ? place : NULL, "%s",
                           err->msg);
    }
    if (rc == EM_ESTATE && st->state_status)
        return em_web_fail(e, st->state_status, "invalid_request_error", st->state_code, NULL, "%s",
                           st->state_msg ? st->state_msg : err->msg);
    return em_web_fail(e, 503, "server_error", NULL, NULL, "the %s store failed: %s", st->name, err->msg);
}

json_t *em_web_error_json(const em_web_error *e)
{
    return json_pack("{s:{s:s, s:s, s:o, s:o}}", "error", "message", e->message, "type",
                     e->type ? e->type : "server_error", "param",
                     e->param[0] ? json_string(e->param) : json_null(), "code",
                     e->code ? json_string(e->code) : json_null());
}

/* ---- responses ------------------------------------------------------------- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void web_respond(web_conn *c, int status, const char *ctype, const char *body, size_t len)
{
    c->status = status;
    snprintf(c->ctype, sizeof c->ctype, "%s", ctype);
    c->streaming = 0;
    em_buf_reset(&c->out);
    c->out_off = 0;
    if (em_buf_add(&c->out, body, len)) {   /* out of memory: say so, in a few bytes */
        c->status = 500;
        em_buf_reset(&c->out);
    }
    c->complete = 1;
    lws_callback_on_writable(c->wsi);
}

void web_respond_json(web_conn *c, int status, const json_t *j)
{
    em_buf b = { 0 };
    if (em_buf_add_json(&b, j) || em_buf_add(&b, "\n", 1)) {
        em_buf_free(&b);
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\"}}\n";
        web_respond(c, 500, "application/json", oom, sizeof oom - 1);
        return;
    }
    web_respond(c, status, "application/json", b.s, b.n);
    em_buf_free(&b);
}

void web_respond_error(web_conn *c, const em_web_error *e)
{
    if (e->retry_after_s)
        snprintf(c->headers + strlen(c->headers), sizeof c->headers - strlen(c->headers),
                 "retry-after: %u\r\n", e->retry_after_s);
    json_t *j = em_web_error_json(e);
    web_respond_json(c, e->status, j);
    json_decref(j);
    /* failed auth is always logged (never the key), other refusals at info */
    em_log(e->status == 401 || e->status == 403 ? EM_LOG_WARN : e->status >= 500 ? EM_LOG_WARN : EM_LOG_INFO,
           c->rid, "%s %s %s: %d %s", c->addr, web_method_name(c->method), c->path, e->status, e->message);
}

void web_stream_begin(web_conn *c, int status, const char *ctype)
{
    c->status = status;
    snprintf(c->ctype, sizeof c->ctype, "%s", ctype);
    c->streaming = 1;
    c->complete = 0;
    em_buf_reset(&c->out);
    c->out_off = 0;
    c->t_last_write = now_s();
    lws_set_timer_usecs(c->wsi, (lws_usec_t)(c->w->o.ping_s * 1e6));
    lws_callback_on_writable(c->wsi);
}

int web_stream_write(web_conn *c, const char *data, size_t len)
{
    if (!len)
        return 0;
    /* one HTTP/1.1 chunk per write: size in hex, CRLF, data, CRLF */
    if (em_buf_addf(&c->out, "%zx\r\n", len) || em_buf_add(&c->out, data, len) ||
        em_buf_add(&c->out, "\r\n", 2))
        return EM_ENOMEM;
    lws_callback_on_writable(c->wsi);
    return 0;
}

void web_stream_end(web_conn *c)
{
    em_buf_add(&c->out, "0\r\n\r\n", 5);
    c->complete = 1;
    lws_callback_on_writable(c->wsi);
}

size_t web_backlog(const web_conn *c)
{
    return c->out.n - c->out_off;
}

void web_live_link(em_web *w, web_live *l)
{
    if (l->linked)
        return;
    l->prev = NULL;
    l->next = w->live;
    if (w->live)
        w->live->prev = l;
    w->live = l;
    l->linked = 1;
}

void web_live_unlink(em_web *w, web_live *l)
{
    if (!l->linked)
        return;
    if (l->prev)
        l->prev->next = l->next;
    else
        w->live = l->next;
    if (l->next)
        l->next->prev = l->prev;
    l->prev = l->next = NULL;
    l->linked = 0;
}

void web_live_add(web_conn *c)
{
    c->live.wsi = c->wsi;
    web_live_link(c->w, &c->live);
}

void web_live_remove(web_conn *c)
{
    web_live_unlink(c->w, &c->live);
}

/* What a transaction holds: its generation, its buffers. */
static void conn_release(web_conn *c)
{
    if (c->tx_open) {   /* its answer is out, or its connection gone */
        c->tx_open = 0;
        c->w->open_tx--;
    }
    if (c->api)
        web_openai_close(c);
    em_buf_free(&c->body);
    em_buf_free(&c->out);
    c->out_off = 0;
}

/* On every response: nothing but what is named; scripts from this origin
 * only (no inline, no eval); styles may be inline (KaTeX and Chart.js set
 * style attributes); images also as data: URLs; connections to this origin
 * (fetch and the same-host WebSocket); no plugins, no <base>, no form
 * posts, no framing by other pages; no MIME sniffing, no Referer. */
static const char security_headers[] =
    "content-security-policy: default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; font-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'\r\n"
    "x-content-type-options: nosniff\r\n"
    "x-frame-options: DENY\r\n"
    "referrer-policy: no-referrer\r\n";

/* "name: value\r\n" lines as headers onto *p. -1: no room. */
static int add_header_lines(web_conn *c, const char *h, unsigned char **p, unsigned char *end)
{
    while (*h) {
        const char *colon = strchr(h, ':'), *eol = strstr(h, "\r\n");
        if (!colon || !eol || colon > eol)
            break;
        char name[64];
        int nl = (int)(colon - h) + 1;
        if (nl >= (int)sizeof name)
            break;
        memcpy(name, h, (size_t)nl);
        name[nl] = 0;
        const char *v = colon + 1;
        while (*v == ' ')
            v++;
        if (lws_add_http_header_by_name(c->wsi, (const unsigned char *)name, (const unsigned char *)v,
                                        (int)(eol - v), p, end))
            return -1;
        h = eol + 2;
    }
    return 0;
}

/* The response's status line and headers into one lws write. -1: no room,
 * or the socket failed. */
static int write_head(web_conn *c)
{
    unsigned char buf[LWS_PRE + 4096];
    unsigned char *start = buf + LWS_PRE, *p = start, *end = buf + sizeof buf - 1;
    if (lws_add_http_common_headers(c->wsi, (unsigned)c->status, c->ctype,
                                    c->streaming ? LWS_ILLEGAL_HTTP_CONTENT_LEN : (lws_filepos_t)c->out.n, &p, end))
        return -1;
    if (c->streaming && lws_add_http_header_by_token(c->wsi, WSI_TOKEN_HTTP_TRANSFER_ENCODING,
                                                     (const unsigned char *)"chunked", 7, &p, end))
        return -1;
    /* an answer is never kept by a cache (the assets say otherwise: they revalidate by ETag) */
    if (!strcasestr(c->headers, "cache-control:") &&
        lws_add_http_header_by_token(c->wsi, WSI_TOKEN_HTTP_CACHE_CONTROL, (const unsigned char *)"no-store", 8, &p,
                                     end))
        return -1;
    if (c->close_after && lws_add_http_header_by_token(c->wsi, WSI_TOKEN_CONNECTION, (const unsigned char *)"close",
                                                       5, &p, end))
        return -1;
    if (add_header_lines(c, security_headers, &p, end) || add_header_lines(c, c->headers, &p, end))
        return -1;
    if (lws_finalize_write_http_header(c->wsi, start, &p, end))
        return -1;
    c->head_sent = 1;
    c->t_last_write = now_s();
    return 0;
}

static void route(web_conn *c);

/* Headers, then the body in pieces. Returns -1 to close the connection. */
static int conn_write(web_conn *c)
{
    unsigned char buf[LWS_PRE + 16];
    /* a body that lws completed is routed here, a turn of the service loop
     * later, so that lws has handed it over for good (body_event) */
    if (c->body_mode == WEB_BODY_READ && c->body_done && !c->routed)
        route(c);
    /* a generation moves its events first: a plain response is sent once
     * whole, a stream once its headers are out */
    if (c->api && !c->complete && (!c->streaming || c->head_sent))
        web_openai_pump(c);
    if (!c->head_sent) {
        if (!c->streaming && !c->complete)
            return 0;
        if (write_head(c))
            return -1;
        lws_callback_on_writable(c->wsi);
        return 0;
    }
    size_t left = c->out.n - c->out_off;
    if (left) {
        size_t n = left < WRITE_CHUNK ? left : WRITE_CHUNK;
        int last = c->complete && n == left;
        /* lws_write needs LWS_PRE bytes of room before the data */
        unsigned char *tmp = malloc(LWS_PRE + n);
        if (!tmp)
            return -1;
        memcpy(tmp + LWS_PRE, c->out.s + c->out_off, n);
        int wr = lws_write(c->wsi, tmp + LWS_PRE, n, last ? LWS_WRITE_HTTP_FINAL : LWS_WRITE_HTTP);
        free(tmp);
        if (wr < (int)n)
            return -1;
        c->out_off += n;
        c->t_last_write = now_s();
        if (last)
            c->final_sent = 1;
        if (c->out_off == c->out.n) {
            em_buf_reset(&c->out);
            c->out_off = 0;
        }
        if (!last) {
            lws_callback_on_writable(c->wsi);
            return 0;
        }
    } else if (c->complete && !c->final_sent) {
        /* nothing left but the end of the transaction (an empty body) */
        unsigned char *tmp = buf + LWS_PRE;
        if (lws_write(c->wsi, tmp, 0, LWS_WRITE_HTTP_FINAL) < 0)
            return -1;
        c->final_sent = 1;
    } else if (c->streaming && !c->complete && now_s() - c->t_last_write >= c->w->o.ping_s) {
        /* a long prefill: an SSE comment keeps proxies from timing the stream out */
        web_stream_write(c, ": ping\n\n", 8);
        return 0;
    }
    if (c->final_sent) {
        int close_now = c->close_after;
        conn_release(c);   /* lws may free or reuse the session data from here */
        return close_now || lws_http_transaction_completed(c->wsi) ? -1 : 0;
    }
    return 0;
}

/* ---- connections per address ------------------------------------------------- */

static int addr_add(em_web *w, int fd, const char *addr, int pending, em_web_error *e)
{
    if (em_grow((void **)&w->fds, &w->cap_fds, w->n_fds + 1, sizeof *w->fds, 64))
        return em_web_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    w->fds[w->n_fds].fd = fd;
    w->fds[w->n_fds].pending = pending;
    snprintf(w->fds[w->n_fds].addr, sizeof w->fds[w->n_fds].addr, "%s", addr);
    w->n_fds++;
    w->n_pending += (size_t)pending;
    return 0;
}

/* Whether one more open connection from addr fits; -1 with e filled. */
static int open_fits(em_web *w, const char *addr, em_web_error *e)
{
    uint32_t same = 0;
    for (size_t i = 0; i < w->n_fds; i++)
        same += !w->fds[i].pending && strcmp(w->fds[i].addr, addr) == 0;
    /* a trusted proxy's connections carry everyone's requests: only the total caps them */
    if ((same >= w->o.max_conns_per_addr && !web_proxy_trusted(w->proxies, w->n_proxies, addr)) ||
        w->n_fds - w->n_pending >= w->o.max_connections)
        return em_web_fail(e, 429, "rate_limit_error", "too_many_connections", NULL,
                           "too many connections from %s (at most %u per address, %u in all)", addr,
                           w->o.max_conns_per_addr, w->o.max_connections);
    return 0;
}

int web_addr_acquire(em_web *w, int fd, const char *addr, em_web_error *e)
{
    for (size_t i = 0; i < w->n_fds; i++)
        if (w->fds[i].fd == fd)
            return 0;   /* already counted (keep-alive) */
    return open_fits(w, addr, e) ? -1 : addr_add(w, fd, addr, 0, e);
}

int web_addr_acquire_pending(em_web *w, int fd, const char *client, em_web_error *e)
{
    web_addr_release(w, fd);   /* counted as open by the requests before its upgrade: no longer */
    uint32_t same = 0;
    for (size_t i = 0; i < w->n_fds; i++)
        same += w->fds[i].pending && strcmp(w->fds[i].addr, client) == 0;
    if (same >= WEB_PENDING_PER_ADDR || w->n_pending >= WEB_PENDING_MAX)   /* (ws_chat.c made room before) */
        return em_web_fail(e, 429, "rate_limit_error", "too_many_connections", NULL,
                           "too many WebSockets awaiting authentication (at most %d from %s, %d in all)",
                           WEB_PENDING_PER_ADDR, client, WEB_PENDING_MAX);
    return addr_add(w, fd, client, 1, e);
}

int web_addr_promote(em_web *w, int fd, const char *addr, em_web_error *e)
{
    for (size_t i = 0; i < w->n_fds; i++)
        if (w->fds[i].fd == fd && w->fds[i].pending) {
            if (open_fits(w, addr, e))
                return -1;
            w->fds[i].pending = 0;
            w->n_pending--;
            snprintf(w->fds[i].addr, sizeof w->fds[i].addr, "%s", addr);
            return 0;
        }
    return 0;
}

void web_addr_release(em_web *w, int fd)
{
    for (size_t i = 0; i < w->n_fds; i++)
        if (w->fds[i].fd == fd) {
            w->n_pending -= (size_t)w->fds[i].pending;
            w->fds[i] = w->fds[--w->n_fds];
            return;
        }
}

int web_is_loopback(const char *a)
{
    return strncmp(a, "127.", 4) == 0 || strcmp(a, "::1") == 0 || strncmp(a, "::ffff:127.", 11) == 0;
}

/* ---- routing ----------------------------------------------------------------- */

const char *web_method_name(int m)
{
    return m == EM_M_GET ? "GET" : m == EM_M_POST ? "POST" : m == EM_M_PATCH ? "PATCH"
         : m == EM_M_DELETE ? "DELETE" : m == EM_M_OPTIONS ? "OPTIONS" : "OTHER";
}

static void route(web_conn *c)
{
    em_web_error e = { 0 };
    c->routed = 1;
    if (web_origin_check(c->w, c->wsi, &e)) {   /* a page of another site: 403 */
        web_respond_error(c, &e);
        return;
    }
    if (web_cors(c)) {   /* a preflight (or any OPTIONS): what may be asked, no body */
        snprintf(c->headers + strlen(c->headers), sizeof c->headers - strlen(c->headers),
                 "allow: GET, POST, PATCH, DELETE, OPTIONS\r\n");
        web_respond(c, 204, "text/plain", "", 0);
        return;
    }
    if (web_files_route(c) == 0 || web_batch_route(c) == 0)   /* /v1/files, /v1/batches */
        return;
    if (web_vectors_route(c) == 0)   /* /v1/embeddings, /v1/rerank, /rerank */
        return;
    if (web_responses_route(c) == 0 || web_messages_route(c) == 0)   /* /v1/responses, /v1/messages */
        return;
    if (web_openai_route(c) == 0 || web_metrics_route(c) == 0)   /* /metrics, /healthz, /api/usage, /api/utilization */
        return;
    if (web_api_route(c) == 0)   /* /api/conversations */
        return;
    if (web_assets_route(c) == 0)   /* /, /dashboard, /static/... */
        return;
    em_web_fail(&e, 404, "invalid_request_error", "not_found", NULL, "no route for %s %s",
                web_method_name(c->method), c->path);
    web_respond_error(c, &e);
}

/* A new transaction on c: method, path, address, the headers kept. */
static int begin(web_conn *c, struct lws *wsi, em_web *w, const char *uri)
{
    if (c->w && c->tx_open)
        w->open_tx--;
    em_buf_free(&c->body);
    em_buf_free(&c->out);
    memset(c, 0, sizeof *c);
    c->wsi = wsi;
    c->w = w;
    c->tx_open = 1;   /* until conn_release: the drain waits for it */
    w->open_tx++;
    c->t_received = now_s();
    snprintf(c->path, sizeof c->path, "%s", uri);
    char *q = strchr(c->path, '?');
    if (q)
        *q = 0;
    if (lws_hdr_total_length(wsi, WSI_TOKEN_POST_URI))
        c->method = EM_M_POST;
    else if (lws_hdr_total_length(wsi, WSI_TOKEN_GET_URI))
        c->method = EM_M_GET;
    else if (lws_hdr_total_length(wsi, WSI_TOKEN_DELETE_URI))
        c->method = EM_M_DELETE;
    else if (lws_hdr_total_length(wsi, WSI_TOKEN_PATCH_URI))
        c->method = EM_M_PATCH;
    else if (lws_hdr_total_length(wsi, WSI_TOKEN_OPTIONS_URI))
        c->method = EM_M_OPTIONS;
    else
        c->method = EM_M_OTHER;
    char peer[64] = "";
    lws_get_peer_simple(wsi, peer, sizeof peer);
    web_client_of(w, wsi, peer, c->addr, sizeof c->addr, &c->loopback);   /* proxy.c */
    if (lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_AUTHORIZATION) < (int)sizeof c->authz)
        lws_hdr_copy(wsi, c->authz, sizeof c->authz, WSI_TOKEN_HTTP_AUTHORIZATION);
    if (lws_hdr_custom_length(wsi, "x-api-key:", 10) > 0 &&
        lws_hdr_custom_length(wsi, "x-api-key:", 10) < (int)sizeof c->api_key)
        lws_hdr_custom_copy(wsi, c->api_key, sizeof c->api_key, "x-api-key:", 10);
    if (lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_IF_NONE_MATCH) < (int)sizeof c->if_none_match)
        lws_hdr_copy(wsi, c->if_none_match, sizeof c->if_none_match, WSI_TOKEN_HTTP_IF_NONE_MATCH);
    if (lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_CONTENT_TYPE) < (int)sizeof c->ctype_in)
        lws_hdr_copy(wsi, c->ctype_in, sizeof c->ctype_in, WSI_TOKEN_HTTP_CONTENT_TYPE);
    /* an upload (POST /v1/files) may be larger than an API request */
    c->max_body = c->method == EM_M_POST && strcmp(c->path, "/v1/files") == 0 ? w->o.max_upload : w->o.max_body;
    em_web_error e = { 0 };
    /* a load balancer's health probe is answered past the caps: a box full of
     * connections is busy, not down */
    int probe = c->method == EM_M_GET && strcmp(c->path, "/healthz") == 0;
    if (!probe && web_addr_acquire(w, lws_get_socket_fd(wsi), peer, &e)) {
        c->body_mode = WEB_BODY_IGNORE;   /* not read; the connection goes once refused */
        c->close_after = 1;
        c->routed = 1;
        web_respond_error(c, &e);
        return 1;
    }
    return 0;
}

/* ---- request bodies ------------------------------------------------------------ */

/* How ember takes a request body from libwebsockets 4.1 (Debian 12's; lws
 * main still has the same code), which reads HTTP/1.1 bodies in three ways
 * ember cannot trust:
 *  - it has no chunked request bodies, and takes a POST without a
 *    Content-Length as 100 MB of body to come;
 *  - for a request that was pipelined (its bytes already in lws's buffer
 *    when the answer before it ended), lws_http_action() reads that buffer
 *    as body while its caller is still parsing the same buffer: the body
 *    callback first gets the request's own header bytes, lws frees the
 *    buffer, and its caller then hands LWS_CALLBACK_HTTP_BODY pointers into
 *    the freed memory (fuzz_http: heap-use-after-free in em_buf_add);
 *  - with bytes of a next request behind a completed body, it calls
 *    LWS_CALLBACK_HTTP_BODY_COMPLETION again and again — each turn of the
 *    service loop, or without end inside that same lws_http_action() loop.
 * So: a body is read only when it has one valid Content-Length within the
 * bound; any Transfer-Encoding is refused at once (411 for chunked, 501
 * otherwise) and its bytes never read; a request without a length has no
 * body (RFC 9112 6.3) and its connection closes after the answer, since lws
 * would read what follows as its body; a bodiless method's body is never
 * read. A piece lws hands out a second time (inside the last piece's
 * memory) is never read: the request gets a 400 and the connection closes.
 * A completed body is routed a turn later (conn_write), so a body lws
 * re-reads is refused before anything runs. A second completion means
 * another request waits in lws's buffer behind this body: lws would call
 * again each turn of the service loop until this answer is out (spinning;
 * rx flow control would stop writing too), or without end inside its own
 * loop, so that connection is closed at once, with a 400 when nothing was
 * answered yet. Pipelined requests without a body are answered in order.
 * docs/RELIABILITY.md */

/* The connection is about to close (the caller returns -1) for framing
 * lws cannot deliver: a 400 saying why is written now, or the whole
 * answer already queued (a refusal made before the body came); a
 * generation that runs is cancelled by the close. */
static void refuse_now(web_conn *c, const char *why)
{
    em_log(EM_LOG_WARN, c->rid, "%s %s %s: %s: the connection is closed", c->addr, web_method_name(c->method),
           c->path, why);
    c->body_mode = WEB_BODY_IGNORE;
    c->close_after = 1;
    if (!c->routed) {
        c->routed = 1;
        em_web_error e = { 0 };
        em_web_fail(&e, 400, "invalid_request_error", "bad_framing", NULL, "%s: send each request with a body on "
                    "its own connection, or after the answer to the one before", why);
        json_t *j = em_web_error_json(&e);
        web_respond_json(c, 400, j);
        json_decref(j);
    }
    if (c->head_sent || c->streaming || !c->complete || write_head(c))
        return;
    unsigned char *tmp = malloc(LWS_PRE + c->out.n + 1);
    if (tmp) {
        memcpy(tmp + LWS_PRE, c->out.s, c->out.n);
        if (lws_write(c->wsi, tmp + LWS_PRE, c->out.n, LWS_WRITE_HTTP_FINAL) == (int)c->out.n)
            c->final_sent = 1;
        free(tmp);
    }
}

/* Answer at once (unless something was answered already), the body never
 * read (any more), the connection closed after. */
static void answer_unread(web_conn *c, int status, const char *code, const char *fmt, const char *arg)
{
    em_web_error e = { 0 };
    c->body_mode = WEB_BODY_IGNORE;
    c->close_after = 1;
    if (c->routed)
        return;
    c->routed = 1;
    em_web_fail(&e, status, "invalid_request_error", code, NULL, fmt, arg);
    web_respond_error(c, &e);
}

/* A new request's body framing, decided before lws hands any of it. */
static void http_request(web_conn *c, struct lws *wsi)
{
    char v[64] = "";
    if (lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_TRANSFER_ENCODING)) {
        if (lws_hdr_copy(wsi, v, sizeof v, WSI_TOKEN_HTTP_TRANSFER_ENCODING) < 0)
            snprintf(v, sizeof v, "(too long)");
        em_err_escape(v, sizeof v);
        if (strcasestr(v, "chunked"))
            answer_unread(c, 411, "length_required", "%s: send the body with a Content-Length (chunked request "
                          "bodies are not supported)", "Transfer-Encoding: chunked");
        else
            answer_unread(c, 501, "unsupported_transfer_encoding", "Transfer-Encoding '%s' is not supported: send "
                          "the body with a Content-Length", v);
        return;
    }
    int has_cl = lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_CONTENT_LENGTH) > 0;
    if (has_cl) {   /* digits only: no sign, no list of values, no overflow */
        int n = lws_hdr_copy(wsi, v, sizeof v, WSI_TOKEN_HTTP_CONTENT_LENGTH);
        size_t len = 0;
        int ok = n > 0 && n <= 18;
        for (int i = 0; ok && i < n; i++) {
            ok = v[i] >= '0' && v[i] <= '9';
            len = len * 10 + (size_t)(v[i] - '0');
        }
        if (!ok) {
            if (n < 0)
                snprintf(v, sizeof v, "(too long)");
            em_err_escape(v, sizeof v);
            answer_unread(c, 400, "invalid_content_length", "Content-Length '%s' is not a number of bytes", v);
            return;
        }
        c->content_length = len;
    }
    if (c->method != EM_M_POST && c->method != EM_M_PATCH) {   /* PATCH: /api/conversations/ID */
        if (c->content_length) {   /* not read; lws skips it */
            c->body_mode = WEB_BODY_IGNORE;
            c->close_after = 1;
        }
        route(c);
        return;
    }
    if (c->content_length > c->max_body) {
        /* its length is known: lws skips the body after the answer (so the
         * client, still sending, reads the 413), and the client is asked to
         * close */
        char lim[32];
        snprintf(lim, sizeof lim, "%zu", c->max_body);
        answer_unread(c, 413, "request_too_large", "the request body is larger than %s bytes", lim);
        c->close_after = 0;
        snprintf(c->headers + strlen(c->headers), sizeof c->headers - strlen(c->headers), "connection: close\r\n");
        return;
    }
    if (!c->content_length) {   /* no body; without a length lws would read what follows as one */
        c->body_mode = WEB_BODY_IGNORE;
        c->close_after = !has_cl;
        route(c);
        return;
    }
    c->body_mode = WEB_BODY_READ;
}

/* A piece of the body. Never returns non-zero: lws may call this from
 * inside its own loop over its buffer, where a close would close twice. */
static void body_piece(web_conn *c, const void *in, size_t len)
{
    if (c->body_mode != WEB_BODY_READ || !len)
        return;   /* the body is not read (the pointer is not touched) */
    uintptr_t p = (uintptr_t)in;
    if (p > c->piece_lo && p < c->piece_hi) {   /* inside the last piece: lws has freed it */
        em_log(EM_LOG_WARN, c->rid, "%s %s %s: a pipelined request with a body: the connection is closed after "
               "the answer", c->addr, web_method_name(c->method), c->path);
        answer_unread(c, 400, "bad_framing", "%s: send each request with a body on a new connection, or after the "
                      "answer to the one before", "a pipelined request with a body (libwebsockets 4.1 hands its "
                      "bytes twice)");
        return;
    }
    if (c->body.n + len > c->content_length || em_buf_add(&c->body, in, len)) {
        answer_unread(c, 500, "server_error", "%s", "out of memory for the request body");
        return;
    }
    c->piece_lo = p;
    c->piece_hi = p + len;
}

/* LWS_CALLBACK_HTTP_BODY_COMPLETION: 0, or -1 to close the connection. */
static int body_completion(web_conn *c)
{
    if (c->body_done++) {   /* another request waits behind this body in lws's buffer (above) */
        refuse_now(c, "another request was sent behind this one's body before its answer (pipelining)");
        return -1;
    }
    if (c->body_mode == WEB_BODY_READ && c->body.n != c->content_length)
        answer_unread(c, 400, "bad_framing", "%s", "the request body is not as long as its Content-Length says");
    lws_callback_on_writable(c->wsi);   /* routed in conn_write */
    return 0;
}

static int callback_http(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                         size_t len)
{
    web_conn *c = user;
    em_web *w = lws_context_user(lws_get_context(wsi));
    switch (reason) {
    case LWS_CALLBACK_EVENT_WAIT_CANCELLED:
        if (atomic_exchange(&w->wake, 0))
            for (web_live *l = w->live; l; l = l->next)
                lws_callback_on_writable(l->wsi);
        return 0;
    case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION:
        return -1;   /* a WebSocket without the ember.chat.v1 subprotocol */
    case LWS_CALLBACK_HTTP_CONFIRM_UPGRADE:
        return web_origin_upgrade(w, wsi);   /* 1: refused with a 403 written */
    case LWS_CALLBACK_HTTP:
        if (begin(c, wsi, w, (const char *)in) == 0)
            http_request(c, wsi);
        return 0;
    case LWS_CALLBACK_HTTP_BODY:
        if (c && c->w)
            body_piece(c, in, len);
        return 0;
    case LWS_CALLBACK_HTTP_BODY_COMPLETION:
        return c && c->w ? body_completion(c) : 0;
    case LWS_CALLBACK_TIMER:   /* a stream's ping timer */
        if (c && c->w && c->streaming && !c->complete) {
            lws_callback_on_writable(wsi);
            lws_set_timer_usecs(wsi, (lws_usec_t)(w->o.ping_s * 1e6));
        }
        return 0;
    case LWS_CALLBACK_HTTP_WRITEABLE:
        if (!c || !c->w)
            return 0;
        return conn_write(c);
    case LWS_CALLBACK_CLOSED_HTTP:
    case LWS_CALLBACK_HTTP_DROP_PROTOCOL:
        if (c && c->w)
            conn_release(c);   /* a client gone mid-stream: its requests are cancelled */
        if (reason == LWS_CALLBACK_CLOSED_HTTP)
            web_addr_release(w, lws_get_socket_fd(wsi));
        break;
    case LWS_CALLBACK_WSI_DESTROY:
        web_addr_release(w, lws_get_socket_fd(wsi));
        break;
    default:
        break;
    }
    return lws_callback_http_dummy(wsi, reason, user, in, len);
}

static const struct lws_protocols protocols[] = {
    { "http", callback_http, sizeof(web_conn), 0, 0, NULL, 0 },
    /* GET /ws: messages arrive in chunks of WEB_WS_CHUNK and are bounded by
     * max_ws_message (close 1009 past it) in ws_chat.c */
    { WEB_WS_PROTOCOL, web_ws_callback, sizeof(struct ws_chat *), WEB_WS_CHUNK, 0, NULL, WEB_WS_CHUNK },
    { NULL, NULL, 0, 0, 0, NULL, 0 },
};

/* ---- lifecycle ----------------------------------------------------------------- */

void em_web_opts_init(em_web_opts *o)
{
    memset(o, 0, sizeof *o);
    o->host = "127.0.0.1";
    o->port = 8080;
    o->max_body = 4u << 20;
    o->max_upload = 64u << 20;
    o->response_cache_bytes = 0;
    o->max_ws_message = 1u << 20;
    o->max_conns_per_addr = 64;
    o->max_connections = 1024;
    o->drain_s = 30;
    o->model_id = "ember";
    o->device = "";
    o->ping_s = 10;
    o->ws_auth_timeout_s = 10;
}

static void log_emit(int level, const char *line)
{
    em_log(level & LLL_ERR ? EM_LOG_ERROR : EM_LOG_WARN, NULL, "lws: %s", line);
}

int em_web_create(const em_web_opts *o, em_web **out, em_err *err)
{
    int rc = 0;
    *out = NULL;
    em_web *w = calloc(1, sizeof *w);
    if (!w)
        return em_err_set(err, EM_ENOMEM, "serve: out of memory");
    w->o = *o;
    if (!(w->o.ping_s > 0))
        w->o.ping_s = 10;
    w->host = strdup(o->host ? o->host : "127.0.0.1");
    w->model_id = strdup(o->model_id ? o->model_id : "ember");
    w->device = strdup(o->device ? o->device : "");
    pthread_mutex_init(&w->mu, NULL);
    atomic_init(&w->stop, 0);
    atomic_init(&w->wake, 0);
    atomic_init(&w->gens, 0);
    atomic_init(&w->draining, 0);
    atomic_init(&w->drain_end_us, 0);
    web_alive_beat(w);   /* alive.c: alive from the start, before em_web_run turns */
    if (!w->host || !w->model_id || !w->device || web_metrics_create(w) || web_structured_create(&w->structured)) {
        rc = em_err_set(err, EM_ENOMEM, "serve: out of memory");
        goto fail;
    }
    w->o.host = w->host;
    w->o.model_id = w->model_id;
    w->o.device = w->device;
    w->origins = strdup(o->allowed_origins ? o->allowed_origins : "");
    w->o.allowed_origins = NULL;   /* w->origins holds them */
    w->hosts = strdup(o->allowed_hosts ? o->allowed_hosts : "");
    w->o.allowed_hosts = NULL;
    if ((rc = web_proxies_parse(o->trusted_proxies, &w->proxies, &w->n_proxies, err)))
        goto fail;
    w->o.trusted_proxies = NULL;
    /* what the model can do, read once: the template (copied, so that
     * serving never reads the model file's mapping: it may change on disk),
     * how it writes a tool call, the tags it reasons between */
    if (o->model && o->tok) {
        web_caps caps;
        if ((rc = web_caps_read(o->model, o->tok, &caps, err)))
            goto fail;
        w->tmpl = caps.tmpl;
        w->tmpl_len = caps.tmpl_len;
        w->toolfmt = caps.toolfmt;
        w->thinkfmt = caps.thinkfmt;   /* (w owns them now) */
        if (w->toolfmt && w->toolfmt->ok)
            em_log(EM_LOG_INFO, NULL, "tool calls: the template writes them as %s...%s", w->toolfmt->trigger,
                   w->toolfmt->id_len ? " (with the call's id)" : "");
        else if (w->toolfmt)
            em_log(EM_LOG_INFO, NULL, "tool calls: none (%s)", w->toolfmt->why);
        if (w->thinkfmt)
            em_log(EM_LOG_INFO, NULL, "reasoning: %s...%s%s", w->thinkfmt->open, w->thinkfmt->close,
                   w->thinkfmt->from_template ? " (the template's)" : " (the convention: at an answer's start)");
    }
    atomic_init(&w->reload, 0);
    if (!w->origins || !w->hosts) {
        rc = em_err_set(err, EM_ENOMEM, "serve: out of memory");
        goto fail;
    }
    lws_set_log_level(LLL_ERR, log_emit);

    struct lws_context_creation_info ci;
    memset(&ci, 0, sizeof ci);
    ci.port = CONTEXT_PORT_NO_LISTEN;
    ci.options = LWS_SERVER_OPTION_EXPLICIT_VHOSTS;
    ci.user = w;
    ci.protocols = protocols;
    ci.timeout_secs = 30;
    ci.max_http_header_data = 8192;
    int tls = o->tls_cert && o->tls_cert[0];
    if (tls)
        ci.options |= LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
    w->ctx = lws_create_context(&ci);
    if (!w->ctx) {
        rc = em_err_set(err, EM_EIO, "serve: cannot create the libwebsockets context");
        goto fail;
    }
    struct lws_context_creation_info vi;
    memset(&vi, 0, sizeof vi);
    vi.port = o->port;
    /* lws binds an IP address given as iface; every interface is NULL */
    int any = strcmp(w->host, "0.0.0.0") == 0 || strcmp(w->host, "::") == 0 || !w->host[0];
    vi.iface = any ? NULL : w->host;
    vi.protocols = protocols;
    vi.vhost_name = "ember";
    vi.options = strchr(w->host, ':') || any ? 0 : LWS_SERVER_OPTION_DISABLE_IPV6;
    vi.keepalive_timeout = 30;
    if (tls) {   /* OpenSSL reads both files here: a bad one fails the vhost */
        vi.options |= LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;   /* lws looks for it on the vhost too */
        vi.ssl_cert_filepath = o->tls_cert;
        vi.ssl_private_key_filepath = o->tls_key;
        /* TLS 1.2 and 1.3 only, forward-secret AEAD suites for 1.2 */
        vi.ssl_options_set = SSL_OP_NO_SSLv3 | SSL_OP_NO_TLSv1 | SSL_OP_NO_TLSv1_1 | SSL_OP_NO_COMPRESSION |
                             SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE;
        vi.ssl_cipher_list = "ECDHE+AESGCM:ECDHE+CHACHA20";
    }
    w->vhost = lws_create_vhost(w->ctx, &vi);
    if (!w->vhost && tls) {
        rc = em_err_set(err, EM_EINVAL, "serve: cannot listen on %s:%d with TLS: the certificate %s or the key %s "
                        "is not a readable PEM file that OpenSSL accepts (or the port is in use)", w->host, o->port,
                        o->tls_cert, o->tls_key ? o->tls_key : "");
        goto fail;
    }
    if (!w->vhost) {
        rc = em_err_set(err, EM_EIO, "serve: cannot listen on %s:%d (in use, or not an address of "
                        "this machine)", w->host, o->port);
        goto fail;
    }
    w->port = lws_get_vhost_listen_port(w->vhost);
    web_cache_open(w);   /* openai.c: the response cache's model fingerprint */
    if (web_batch_create(w) || web_util_start(w)) {   /* batch.c; utilization.c: busy time per hour */
        rc = em_err_set(err, EM_ENOMEM, "serve: out of memory");
        goto fail;
    }
    *out = w;
    return 0;
fail:
    em_web_destroy(w);
    return rc;
}

int em_web_port(const em_web *w)
{
    return w->port;
}

int em_web_run(em_web *w)
{
    int rc = 0;
    web_alive_start(w);          /* alive.c: the heartbeat of this thread */
    while (!atomic_load(&w->stop)) {
        if (lws_service(w->ctx, 0) < 0) {
            rc = EM_EIO;
            break;
        }
        web_alive_beat(w);
        web_batch_step(w);   /* batch.c: lines done, lines to start */
        if (web_drain_step(w))   /* drain.c: drained, or its time is up */
            break;
        if (atomic_exchange(&w->reload, 0) && w->o.on_reload)
            w->o.on_reload(w->o.reload_ctx, w);
    }
    web_alive_stop(w);
    return rc;
}

void em_web_stop(em_web *w)
{
    atomic_store(&w->stop, 1);
    if (w->ctx)
        lws_cancel_service(w->ctx);
}

void em_web_reload(em_web *w)
{
    atomic_store(&w->reload, 1);
    if (w->ctx)
        lws_cancel_service(w->ctx);
}

int em_web_update(em_web *w, int require_key, int32_t rate_limit_per_min, const char *allowed_origins,
                  const char *allowed_hosts, const char *trusted_proxies, em_err *err)
{
    web_cidr *px = NULL;
    size_t n_px = 0;
    int rc = web_proxies_parse(trusted_proxies, &px, &n_px, err);
    if (rc)
        return rc;
    char *o = strdup(allowed_origins ? allowed_origins : ""), *h = strdup(allowed_hosts ? allowed_hosts : "");
    if (!o || !h) {
        free(o);
        free(h);
        free(px);
        return em_err_set(err, EM_ENOMEM, "serve: out of memory");
    }
    free(w->proxies);
    w->proxies = px;
    w->n_proxies = n_px;
    free(w->origins);
    w->origins = o;
    free(w->hosts);
    w->hosts = h;
    w->o.require_key = require_key;
    w->o.rate_limit_per_min = rate_limit_per_min;
    return 0;
}

void em_web_destroy(em_web *w)
{
    if (!w)
        return;
    if (w->ctx) {
        pthread_mutex_lock(&w->mu);
        w->closing = 1;                /* from here the requests' notify hooks stay quiet */
        pthread_mutex_unlock(&w->mu);
        web_util_stop(w);              /* the last span of busy time, while the timer can be cancelled */
        lws_context_destroy(w->ctx);   /* closes every connection: CLOSED_HTTP cancels their requests */
        web_batch_destroy(w);          /* the batch lines in flight too (they run again next time) */
        /* the scheduler calls a cancelled request's hook (with w) until it
         * has retired it: wait for that before w goes */
        if (w->o.sched)
            em_sched_drain(w->o.sched);
    }
    web_batch_destroy(w);              /* (without a context: never started) */
    web_metrics_destroy(w);            /* after: those requests' final rows are counted */
    web_structured_destroy(w->structured);   /* grammars running requests use stay until they end */
    pthread_mutex_destroy(&w->mu);
    free(w->fds);
    free(w->rates);
    free(w->fails);
    free(w->host);
    free(w->origins);
    free(w->hosts);
    free(w->proxies);
    free(w->tmpl);
    if (w->toolfmt)
        web_toolfmt_free(w->toolfmt);
    free(w->toolfmt);
    free(w->thinkfmt);
    free(w->model_id);
    free(w->device);
    free(w);
}
