/* http_client.c — the bounded HTTP/1.1 client of `ember loadtest`
 * (firmware/http_client.h): URL parsing and resolution, non-blocking
 * sockets waited on with poll() under a per-byte timeout and a cancel flag,
 * keep-alive with one resend on a connection the server closed while idle,
 * and response bodies framed by Content-Length, chunked encoding or the end
 * of the connection, read as lines or whole. */
#include "firmware/http_client.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "core/grow.h"

#define RBUF_BYTES    65536
#define HEAD_MAX      65536   /* status line + headers of one response */
#define HEAD_LINE_MAX 8192
#define HEAD_LINES    128
#define POLL_SLICE_MS 100     /* how often a wait looks at the cancel flag */

struct em_http_client {
    const em_http_url *u;
    em_http_opts o;
    int    fd;              /* -1: not connected */
    char  *rbuf;            /* [RBUF_BYTES] received, rbuf[rpos..rlen) not yet used */
    size_t rpos, rlen;
    /* the response being read */
    int    in_body, body_done, chunked, chunk_first, keep;
    long long cl_left;      /* Content-Length bytes left; -1: until the connection ends */
    uint64_t chunk_left;
    size_t body_total, head_total;
    char  *line;            /* em_http_line's buffer */
    size_t line_cap;
    em_http_fail fail;
};

static int failed(em_http_client *c, em_http_fail kind, em_err *err, int code, const char *fmt, const char *arg)
{
    c->fail = kind;
    return em_err_set(err, code, fmt, c->u->authority, arg);
}

/* ---- URL ------------------------------------------------------------------ */

static int host_char(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-' ||
           ch == '.' || ch == '_';
}

int em_http_url_parse(const char *url, const char *strip, em_http_url *u, em_err *err)
{
    memset(u, 0, sizeof *u);
    if (strncasecmp(url, "https://", 8) == 0)
        return em_err_set(err, EM_EINVAL, "%s: https:// is not supported, only plain http:// "
                          "(measure the server itself, or through a proxy that speaks HTTP)", url);
    if (strncasecmp(url, "http://", 7) != 0)
        return em_err_set(err, EM_EINVAL, "%s: not an http:// URL", url);
    const char *a = url + 7, *ae = a + strcspn(a, "/?#");
    const char *hs = a, *he, *ps = NULL;
    if (memchr(a, '@', (size_t)(ae - a)))
        return em_err_set(err, EM_EINVAL, "%s: user info in the URL is not supported (use --api-key)", url);
    if (*a == '[') {
        hs = a + 1;
        he = memchr(hs, ']', (size_t)(ae - hs));
        if (!he || he == hs)
            return em_err_set(err, EM_EINVAL, "%s: an IPv6 address must be written [addr]", url);
        for (const char *p = hs; p < he; p++)
            if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f') || (*p >= 'A' && *p <= 'F') ||
                  *p == ':' || *p == '.' || *p == '%'))
                return em_err_set(err, EM_EINVAL, "%s: '%.*s' is not an IPv6 address", url, (int)(he - hs), hs);
        if (he + 1 < ae && he[1] != ':')
            return em_err_set(err, EM_EINVAL, "%s: junk after the IPv6 address", url);
        ps = he + 1 < ae ? he + 2 : NULL;
    } else {
        he = memchr(a, ':', (size_t)(ae - a));
        ps = he ? he + 1 : NULL;
        he = he ? he : ae;
        for (const char *p = hs; p < he; p++)
            if (!host_char(*p))
                return em_err_set(err, EM_EINVAL, "%s: '%.*s' is not a host name", url, (int)(he - hs), hs);
    }
    if (he == hs)
        return em_err_set(err, EM_EINVAL, "%s: no host", url);
    if ((size_t)(he - hs) >= sizeof u->host)
        return em_err_set(err, EM_EINVAL, "%s: the host name is too long", url);
    memcpy(u->host, hs, (size_t)(he - hs));
    long port = 80;
    if (ps) {
        char *end;
        port = ps < ae && *ps >= '0' && *ps <= '9' ? strtol(ps, &end, 10) : 0;
        if (ps >= ae || end != ae || port < 1 || port > 65535)
            return em_err_set(err, EM_EINVAL, "%s: the port must be a number from 1 to 65535", url);
    }
    snprintf(u->port, sizeof u->port, "%ld", port);
    int v6 = *a == '[';
    if (port == 80)
        snprintf(u->authority, sizeof u->authority, "%s%s%s", v6 ? "[" : "", u->host, v6 ? "]" : "");
    else
        snprintf(u->authority, sizeof u->authority, "%s%s%s:%ld", v6 ? "[" : "", u->host, v6 ? "]" : "", port);
    if (*ae == '?' || *ae == '#' || strpbrk(ae, "?#"))
        return em_err_set(err, EM_EINVAL, "%s: a query or fragment has no place in the server's URL", url);
    size_t n = strlen(ae);
    while (n && ae[n - 1] == '/')
        n--;
    size_t sl = strip ? strlen(strip) : 0;
    if (sl && n >= sl && strncmp(ae + n - sl, strip, sl) == 0)
        n -= sl;
    while (n && ae[n - 1] == '/')
        n--;
    if (n >= sizeof u->base)
        return em_err_set(err, EM_EINVAL, "%s: the path is too long", url);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)ae[i] <= ' ' || (unsigned char)ae[i] >= 0x7f)
            return em_err_set(err, EM_EINVAL, "%s: a space, control or non-ASCII byte in the path "
                              "(percent-encode it)", url);
    memcpy(u->base, ae, n);
    return 0;
}

int em_http_url_resolve(em_http_url *u, em_err *err)
{
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV };
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(u->host, u->port, &hints, &res);
    if (rc)
        return em_err_set(err, EM_ENOENT, "%s: cannot resolve the host: %s", u->host,
                          rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
    u->n_addr = 0;
    for (struct addrinfo *ai = res; ai && u->n_addr < EM_HTTP_MAX_ADDRS; ai = ai->ai_next) {
        if (ai->ai_addrlen > sizeof u->addr[0])
            continue;
        memcpy(&u->addr[u->n_addr], ai->ai_addr, ai->ai_addrlen);
        u->addr_len[u->n_addr++] = ai->ai_addrlen;
    }
    freeaddrinfo(res);
    if (!u->n_addr)
        return em_err_set(err, EM_ENOENT, "%s: the host has no address", u->host);
    return 0;
}

/* ---- the connection -------------------------------------------------------- */

int em_http_client_create(const em_http_url *u, const em_http_opts *opts, em_http_client **out, em_err *err)
{
    *out = NULL;
    em_http_client *c = calloc(1, sizeof *c);
    if (!c || !(c->rbuf = malloc(RBUF_BYTES))) {
        free(c);
        return em_err_set(err, EM_ENOMEM, "http client: out of memory");
    }
    c->u = u;
    c->o = *opts;
    c->fd = -1;
    *out = c;
    return 0;
}

static void drop_conn(em_http_client *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->rpos = c->rlen = 0;
    c->in_body = 0;
}

void em_http_client_destroy(em_http_client *c)
{
    if (!c)
        return;
    drop_conn(c);
    free(c->rbuf);
    free(c->line);
    free(c);
}

em_http_fail em_http_failure(const em_http_client *c)
{
    return c->fail;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* Wait until fd is ready for events: 0, EM_ECANCELED, or EM_EIO after
 * timeout_ms (*timed_out set) or a poll error. */
static int wait_fd(em_http_client *c, int fd, short events, int timeout_ms, int *timed_out)
{
    double end = now_ms() + timeout_ms;
    *timed_out = 0;
    for (;;) {
        if (c->o.cancel && atomic_load(c->o.cancel))
            return EM_ECANCELED;
        double left = end - now_ms();
        if (left <= 0) {
            *timed_out = 1;
            return EM_EIO;
        }
        int ms = left < 1 ? 1 : (int)left;
        if (c->o.cancel && ms > POLL_SLICE_MS)
            ms = POLL_SLICE_MS;
        struct pollfd p = { fd, events, 0 };
        int r = poll(&p, 1, ms);
        if (r > 0)
            return 0;
        if (r < 0 && errno != EINTR)
            return EM_EIO;
    }
}

static int wait_io(em_http_client *c, short events, em_err *err)
{
    int to, rc = wait_fd(c, c->fd, events, c->o.timeout_ms, &to);
    if (rc == EM_ECANCELED)
        return failed(c, EM_HTTP_FAIL_CANCELED, err, EM_ECANCELED, "%s: %s", "cancelled");
    if (rc && to) {
        char why[64];
        snprintf(why, sizeof why, "no byte for %.0f s", c->o.timeout_ms / 1e3);
        return failed(c, EM_HTTP_FAIL_TIMEOUT, err, EM_EIO, "%s: %s", why);
    }
    if (rc)
        return failed(c, EM_HTTP_FAIL_CLOSED, err, EM_EIO, "%s: %s", strerror(errno));
    return 0;
}

/* One address: a non-blocking socket connected within the timeout, or -1
 * with *why set (errno text, or "timed out"). */
static int connect_one(em_http_client *c, int i, const char **why, int *canceled)
{
    const struct sockaddr *sa = (const struct sockaddr *)&c->u->addr[i];
    int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        *why = strerror(errno);
        return -1;
    }
    if (connect(fd, sa, c->u->addr_len[i]) != 0) {
        if (errno != EINPROGRESS) {
            *why = strerror(errno);
            goto fail;
        }
        int to, rc = wait_fd(c, fd, POLLOUT, c->o.timeout_ms, &to);
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        if (rc == EM_ECANCELED) {
            *canceled = 1;
            goto fail;
        }
        if (rc) {
            *why = to ? "connect timed out" : strerror(errno);
            goto fail;
        }
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0 || soerr) {
            *why = strerror(soerr ? soerr : errno);
            goto fail;
        }
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
fail:
    close(fd);
    return -1;
}

static int open_conn(em_http_client *c, em_err *err)
{
    const char *why = "no address";
    int canceled = 0;
    drop_conn(c);
    for (int i = 0; i < c->u->n_addr && c->fd < 0 && !canceled; i++)
        c->fd = connect_one(c, i, &why, &canceled);
    if (canceled)
        return failed(c, EM_HTTP_FAIL_CANCELED, err, EM_ECANCELED, "%s: %s", "cancelled");
    if (c->fd < 0)
        return failed(c, EM_HTTP_FAIL_CONNECT, err, EM_EIO, "cannot connect to %s: %s", why);
    return 0;
}

/* A kept connection with something to read before a request: the server
 * closed it (EOF, an error), or sent bytes no request asked for. */
static int conn_stale(em_http_client *c)
{
    struct pollfd p = { c->fd, POLLIN, 0 };
    return poll(&p, 1, 0) != 0;
}

static int send_all(em_http_client *c, const char *p, size_t n, em_err *err)
{
    while (n) {
        ssize_t w = send(c->fd, p, n, MSG_NOSIGNAL);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            int rc = wait_io(c, POLLOUT, err);
            if (rc)
                return rc;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        return failed(c, EM_HTTP_FAIL_CLOSED, err, EM_EIO, "%s: sending the request: %s", strerror(errno));
    }
    return 0;
}

/* Receive into the emptied rbuf: >0 bytes, 0 at the end of the connection, or a
 * negative code. */
static int fill(em_http_client *c, em_err *err)
{
    c->rpos = c->rlen = 0;   /* called only once everything received is used */
    for (;;) {
        ssize_t r = recv(c->fd, c->rbuf + c->rlen, RBUF_BYTES - c->rlen, 0);
        if (r > 0) {
            c->rlen += (size_t)r;
            return (int)r;
        }
        if (r == 0)
            return 0;
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return failed(c, EM_HTTP_FAIL_CLOSED, err, EM_EIO, "%s: %s", strerror(errno));
        int rc = wait_io(c, POLLIN, err);
        if (rc)
            return rc;
    }
}

/* A line of the head or of the chunk framing into buf (NUL-terminated,
 * without "\r\n"), counted against HEAD_MAX where head is set. *got_any is
 * set once a byte arrived. */
static int raw_line(em_http_client *c, char *buf, size_t cap, int head, int *got_any, em_err *err)
{
    size_t n = 0;
    for (;;) {
        if (c->rpos == c->rlen) {
            int r = fill(c, err);
            if (r < 0)
                return r;
            if (r == 0)
                return failed(c, EM_HTTP_FAIL_CLOSED, err, EM_EIO, "%s: %s",
                              c->in_body ? "the connection closed in the middle of the body"
                                         : "the connection closed before a response");
        }
        if (got_any)
            *got_any = 1;
        char ch = c->rbuf[c->rpos++];
        if (head && ++c->head_total > HEAD_MAX)
            return failed(c, EM_HTTP_FAIL_TOO_LARGE, err, EM_ERANGE, "%s: %s", "response headers over 64 KiB");
        if (ch == '\n') {
            if (n && buf[n - 1] == '\r')
                n--;
            buf[n] = 0;
            return 0;
        }
        if (n + 1 >= cap)
            return failed(c, EM_HTTP_FAIL_TOO_LARGE, err, EM_ERANGE, "%s: %s",
                          head ? "a response header line over 8 KiB" : "a chunk size or trailer line over 1 KiB");
        buf[n++] = ch;
    }
}

/* ---- the response head ------------------------------------------------------ */

static const char *header_value(const char *line, const char *name)
{
    size_t n = strlen(name);
    if (strncasecmp(line, name, n) != 0 || line[n] != ':')
        return NULL;
    line += n + 1;
    while (*line == ' ' || *line == '\t')
        line++;
    return line;
}

/* Whether the comma-separated header value v lists token t. */
static int has_token(const char *v, const char *t)
{
    size_t n = strlen(t);
    for (const char *p = v; *p;) {
        while (*p == ' ' || *p == '\t' || *p == ',')
            p++;
        size_t k = strcspn(p, ",");
        size_t e = k;
        while (e && (p[e - 1] == ' ' || p[e - 1] == '\t'))
            e--;
        if (e == n && strncasecmp(p, t, n) == 0)
            return 1;
        p += k;
    }
    return 0;
}

double em_http_parse_retry_after(const char *v)
{
    while (*v == ' ' || *v == '\t')
        v++;
    if (*v >= '0' && *v <= '9') {
        char *end;
        double s = strtod(v, &end);
        while (*end == ' ' || *end == '\t')
            end++;
        return *end ? -1 : s;
    }
    struct tm tm = { 0 };
    const char *end = strptime(v, "%a, %d %b %Y %H:%M:%S GMT", &tm);
    if (!end || *end)
        return -1;
    double d = difftime(timegm(&tm), time(NULL));
    return d > 0 ? d : 0;
}

/* One header line into the response state. */
static int take_header(em_http_client *c, const char *line, em_http_resp *resp, long long *cl, em_err *err)
{
    const char *v;
    if ((v = header_value(line, "Content-Length"))) {
        char *end;
        long long n = *v >= '0' && *v <= '9' ? strtoll(v, &end, 10) : -1;
        if (n < 0 || *end || n > (1ll << 53) || (*cl >= 0 && *cl != n))
            return failed(c, EM_HTTP_FAIL_PROTOCOL, err, EM_EFORMAT, "%s: bad Content-Length '%s'", v);
        *cl = n;
    } else if ((v = header_value(line, "Transfer-Encoding"))) {
        if (has_token(v, "chunked"))
            c->chunked = 1;
        else
            c->keep = 0;   /* another coding alone: the body runs to the end of the connection */
    } else if ((v = header_value(line, "Connection"))) {
        if (has_token(v, "close"))
            c->keep = 0;
        else if (has_token(v, "keep-alive"))
            c->keep = 1;
    } else if ((v = header_value(line, "Retry-After"))) {
        resp->retry_after_s = em_http_parse_retry_after(v);
    } else if ((v = header_value(line, "Content-Type"))) {
        snprintf(resp->content_type, sizeof resp->content_type, "%s", v);
    }
    return 0;
}

/* Header lines (resp non-NULL: taken into it) or trailer lines (ignored)
 * up to the empty line that ends them. */
static int read_fields(em_http_client *c, char *line, size_t cap, em_http_resp *resp, long long *cl, em_err *err)
{
    for (int n = 0;; n++) {
        int rc = raw_line(c, line, cap, resp != NULL, NULL, err);
        if (rc)
            return rc;
        if (!line[0])
            return 0;
        if (n == HEAD_LINES)
            return failed(c, EM_HTTP_FAIL_TOO_LARGE, err, EM_ERANGE, "%s: %s",
                          resp ? "over 128 response headers" : "over 128 trailer lines");
        if (resp && (rc = take_header(c, line, resp, cl, err)))
            return rc;
    }
}

static int read_head(em_http_client *c, const char *method, em_http_resp *resp, int *got_any, em_err *err)
{
    char line[HEAD_LINE_MAX];
    long long cl;
    c->head_total = 0;
    for (;;) {   /* 1xx responses come before the real one */
        int rc = raw_line(c, line, sizeof line, 1, got_any, err);
        if (rc)
            return rc;
        int minor = -1, status = 0, k = 0;
        if (sscanf(line, "HTTP/1.%1d %3d%n", &minor, &status, &k) != 2 || status < 100 ||
            (line[k] && line[k] != ' '))
            return failed(c, EM_HTTP_FAIL_PROTOCOL, err, EM_EFORMAT, "%s: not an HTTP/1.x status line: '%.80s'", line);
        memset(resp, 0, sizeof *resp);
        resp->status = status;
        resp->retry_after_s = -1;
        c->chunked = 0;
        c->keep = minor >= 1;
        cl = -1;
        if ((rc = read_fields(c, line, sizeof line, resp, &cl, err)))
            return rc;
        if (status >= 200)
            break;
    }
    c->in_body = 1;
    c->body_done = 0;
    c->body_total = 0;
    c->chunk_left = 0;
    c->chunk_first = 1;
    c->cl_left = c->chunked ? -1 : cl;
    if (strcmp(method, "HEAD") == 0 || resp->status == 204 || resp->status == 304) {
        c->chunked = 0;
        c->cl_left = 0;
    }
    if (!c->chunked && c->cl_left < 0)
        c->keep = 0;
    return 0;
}

int em_http_request(em_http_client *c, const char *method, const char *path, const char *headers,
                    const char *body, size_t len, em_http_resp *resp, em_err *err)
{
    char head[4096];
    int hn = snprintf(head, sizeof head, "%s %s%s HTTP/1.1\r\nHost: %s\r\nUser-Agent: ember-loadtest\r\n", method,
                      c->u->base, path, c->u->authority);
    if (body)
        hn += snprintf(head + hn, sizeof head - (size_t)hn, "Content-Length: %zu\r\n", len);
    if (hn + strlen(headers ? headers : "") + 3 > sizeof head)
        return em_err_set(err, EM_EINVAL, "%s: request headers over 4 KiB", c->u->authority);
    snprintf(head + hn, sizeof head - (size_t)hn, "%s\r\n", headers ? headers : "");
    c->fail = EM_HTTP_FAIL_NONE;
    if (c->in_body)
        em_http_end(c);
    for (int attempt = 0;; attempt++) {
        if (c->fd >= 0 && conn_stale(c))
            drop_conn(c);
        int kept = c->fd >= 0, got_any = 0, rc;
        if (!kept && (rc = open_conn(c, err)))
            return rc;
        rc = send_all(c, head, strlen(head), err);
        if (!rc && body)
            rc = send_all(c, body, len, err);
        if (!rc)
            rc = read_head(c, method, resp, &got_any, err);
        if (!rc)
            return 0;
        /* the server closed the kept connection as the request went out: once more on a new one */
        int again = kept && !got_any && attempt == 0 && c->fail == EM_HTTP_FAIL_CLOSED;
        drop_conn(c);
        if (!again)
            return rc;
    }
}

/* ---- the body ---------------------------------------------------------------- */

/* The body bytes available now: 1 with *p / *n (in rbuf; consume with
 * take()), 0 at the end of the body, or a negative code. */
static int body_span(em_http_client *c, const char **p, size_t *n, em_err *err)
{
    if (!c->in_body || c->body_done)
        return 0;
    if (c->chunked && c->chunk_left == 0) {
        char line[1024];
        int rc;
        if (!c->chunk_first) {   /* the CRLF after a chunk's data */
            if ((rc = raw_line(c, line, sizeof line, 0, NULL, err)))
                return rc;
            if (line[0])
                return failed(c, EM_HTTP_FAIL_PROTOCOL, err, EM_EFORMAT, "%s: %s", "a chunk longer than its size");
        }
        c->chunk_first = 0;
        if ((rc = raw_line(c, line, sizeof line, 0, NULL, err)))
            return rc;
        char *end;
        int hex = (line[0] >= '0' && line[0] <= '9') || (line[0] >= 'a' && line[0] <= 'f') ||
                  (line[0] >= 'A' && line[0] <= 'F');
        unsigned long long size = hex ? strtoull(line, &end, 16) : 0;
        if (!hex || (*end && *end != ';' && *end != ' ' && *end != '\t') || size > (1ull << 40))
            return failed(c, EM_HTTP_FAIL_PROTOCOL, err, EM_EFORMAT, "%s: bad chunk size line '%.40s'", line);
        if (size == 0) {   /* the last chunk, then trailers up to an empty line */
            if ((rc = read_fields(c, line, sizeof line, NULL, NULL, err)))
                return rc;
            c->body_done = 1;
            return 0;
        }
        c->chunk_left = size;
    } else if (!c->chunked && c->cl_left == 0) {
        c->body_done = 1;
        return 0;
    }
    if (c->rpos == c->rlen) {
        int r = fill(c, err);
        if (r < 0)
            return r;
        if (r == 0) {
            if (!c->chunked && c->cl_left < 0) {
                c->body_done = 1;
                return 0;
            }
            return failed(c, EM_HTTP_FAIL_CLOSED, err, EM_EIO, "%s: %s",
                          "the connection closed in the middle of the body");
        }
    }
    size_t avail = c->rlen - c->rpos;
    if (c->chunked && avail > c->chunk_left)
        avail = (size_t)c->chunk_left;
    if (!c->chunked && c->cl_left >= 0 && avail > (unsigned long long)c->cl_left)
        avail = (size_t)c->cl_left;
    if (avail > c->o.max_body - c->body_total)
        avail = c->o.max_body - c->body_total;
    if (!avail) {
        char why[64];
        snprintf(why, sizeof why, "a response body over %zu bytes", c->o.max_body);
        return failed(c, EM_HTTP_FAIL_TOO_LARGE, err, EM_ERANGE, "%s: %s", why);
    }
    *p = c->rbuf + c->rpos;
    *n = avail;
    return 1;
}

static void take(em_http_client *c, size_t n)
{
    c->rpos += n;
    c->body_total += n;
    if (c->chunked)
        c->chunk_left -= n;
    else if (c->cl_left > 0)
        c->cl_left -= (long long)n;
}

/* Room for need bytes in *buf (capacity *cap), growing by doubling. */
static int reserve(char **buf, size_t *cap, size_t need)
{
    while (*cap < need)
        if (em_grow((void **)buf, cap, *cap, 1, 4096))
            return EM_ENOMEM;
    return 0;
}

int em_http_line(em_http_client *c, const char **line, size_t *len, em_err *err)
{
    size_t n = 0;
    for (;;) {
        const char *p;
        size_t avail;
        int rc = body_span(c, &p, &avail, err);
        if (rc < 0)
            return rc;
        if (rc == 0 && n == 0)
            return 0;
        const char *nl = rc ? memchr(p, '\n', avail) : NULL;
        size_t used = rc ? (nl ? (size_t)(nl - p) + 1 : avail) : 0, copy = nl ? used - 1 : used;
        if (n + copy > c->o.max_line) {
            char why[64];
            snprintf(why, sizeof why, "a line over %zu bytes", c->o.max_line);
            return failed(c, EM_HTTP_FAIL_TOO_LARGE, err, EM_ERANGE, "%s: %s", why);
        }
        if (reserve(&c->line, &c->line_cap, n + copy + 1))
            return em_err_set(err, EM_ENOMEM, "%s: out of memory", c->u->authority);
        if (copy)
            memcpy(c->line + n, p, copy);
        n += copy;
        take(c, used);
        if (nl || rc == 0) {
            if (n && c->line[n - 1] == '\r')
                n--;
            c->line[n] = 0;
            *line = c->line;
            *len = n;
            return 1;
        }
    }
}

int em_http_body(em_http_client *c, char **body, size_t *len, em_err *err)
{
    char *buf = NULL;
    size_t cap = 0, n = 0;
    int rc;
    *body = NULL;
    *len = 0;
    for (;;) {
        const char *p;
        size_t avail;
        if ((rc = body_span(c, &p, &avail, err)) <= 0)
            break;
        if (reserve(&buf, &cap, n + avail + 1)) {
            rc = em_err_set(err, EM_ENOMEM, "%s: out of memory", c->u->authority);
            break;
        }
        memcpy(buf + n, p, avail);
        n += avail;
        take(c, avail);
    }
    if (!rc && reserve(&buf, &cap, n + 1))
        rc = em_err_set(err, EM_ENOMEM, "%s: out of memory", c->u->authority);
    if (rc) {
        free(buf);
        return rc;
    }
    buf[n] = 0;
    *body = buf;
    *len = n;
    return 0;
}

void em_http_end(em_http_client *c)
{
    if (!c->in_body)
        return;
    if (c->fail != EM_HTTP_FAIL_NONE) {   /* a broken response: its connection cannot carry another */
        drop_conn(c);
        return;
    }
    em_http_opts saved = c->o;
    em_http_fail fail = c->fail;
    c->o.timeout_ms = 1000;
    size_t drained = 0;
    const char *p;
    size_t n;
    while (!c->body_done && drained < 65536 && body_span(c, &p, &n, NULL) > 0) {
        take(c, n);
        drained += n;
    }
    c->o = saved;
    c->fail = fail;
    int keep = c->body_done && c->keep;
    c->in_body = 0;
    if (!keep)
        drop_conn(c);
}
