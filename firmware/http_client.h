/* http_client.h — a small, bounded HTTP/1.1 client over POSIX sockets, for
 * `ember loadtest` (firmware/cmd_loadtest.c) to talk to any OpenAI-compatible
 * server: plain http:// only (no TLS), IPv4 and IPv6 literals and host names.
 *
 * One em_http_client is one keep-alive connection, used by one thread: a
 * request is sent with a Content-Length, and its response read as a status
 * line, headers and a body framed by Content-Length, chunked transfer
 * encoding or the end of the connection, either line by line (server-sent
 * events) or whole. Everything is bounded: a connect, and every wait for the
 * next byte, fails after opts.timeout_ms; a body line over opts.max_line
 * bytes, a body over opts.max_body bytes, or a header section over 64 KiB is
 * an error, never unbounded memory. A request on a kept connection that the
 * server closed while it was idle is sent again once on a new one.
 *
 * Errors are EM_E* codes with a message in the optional em_err; what kind
 * of failure it was (connect, timeout, closed, protocol, too large,
 * cancelled) is em_http_failure(). All pointers are borrowed unless a
 * comment says otherwise. */
#ifndef EM_HTTP_CLIENT_H
#define EM_HTTP_CLIENT_H

#include <stdatomic.h>
#include <stddef.h>
#include <sys/socket.h>

#include "core/err.h"

#define EM_HTTP_MAX_ADDRS 8

/* A parsed http:// URL with its host resolved (em_http_url_resolve). */
typedef struct {
    char host[256];        /* name or address, IPv6 without its brackets */
    char port[8];          /* "80" when the URL gives none */
    char authority[300];   /* the Host header: "host", "host:port", "[::1]:port" */
    char base[1024];       /* path prefix, no trailing '/': "" or "/proxy" */
    struct sockaddr_storage addr[EM_HTTP_MAX_ADDRS];
    socklen_t addr_len[EM_HTTP_MAX_ADDRS];
    int n_addr;
} em_http_url;

/* Parse "http://host[:port][/prefix]" into u (not resolved yet). With strip
 * (a NUL-terminated suffix such as "/v1"), a path that ends in it loses it,
 * so that ".../v1" and "..." name the same server. Other schemes, user
 * info, queries, fragments, an empty host or a bad port are EM_EINVAL. */
int em_http_url_parse(const char *url, const char *strip, em_http_url *u, em_err *err);

/* Resolve u->host (getaddrinfo, at most EM_HTTP_MAX_ADDRS addresses, tried
 * in order on connect). EM_ENOENT when the name does not resolve. */
int em_http_url_resolve(em_http_url *u, em_err *err);

typedef struct {
    int    timeout_ms;          /* connect, and each wait for a byte */
    size_t max_line;            /* longest body line em_http_line returns */
    size_t max_body;            /* longest body of one response */
    const atomic_int *cancel;   /* non-zero: waits end with EM_ECANCELED; NULL: never */
} em_http_opts;

typedef enum {
    EM_HTTP_FAIL_NONE,
    EM_HTTP_FAIL_CONNECT,    /* no connection: refused, unreachable, connect timed out */
    EM_HTTP_FAIL_TIMEOUT,    /* no byte for timeout_ms while sending or reading */
    EM_HTTP_FAIL_CLOSED,     /* the connection ended or broke before the response did */
    EM_HTTP_FAIL_PROTOCOL,   /* not HTTP/1.x, or bad framing */
    EM_HTTP_FAIL_TOO_LARGE,  /* a line, the headers or the body past its bound */
    EM_HTTP_FAIL_CANCELED,   /* *opts.cancel became non-zero */
} em_http_fail;

typedef struct {
    int    status;             /* 200, 429, ... */
    double retry_after_s;      /* Retry-After in seconds (delay or date); -1: none */
    char   content_type[128];  /* "" when absent */
} em_http_resp;

typedef struct em_http_client em_http_client;

/* A client for u (borrowed: it must outlive the client) with opts (copied).
 * Connects on the first request. */
int  em_http_client_create(const em_http_url *u, const em_http_opts *opts, em_http_client **out, em_err *err);
void em_http_client_destroy(em_http_client *c);

/* Send "METHOD u->base + path HTTP/1.1" with Host, Content-Length (when body
 * is non-NULL: len bytes of it) and headers (NULL, or lines each ending in
 * "\r\n") on the kept connection or a new one, then read the status line and
 * headers into *resp (1xx responses skipped). The body is then read with
 * em_http_line / em_http_body and the response ended with em_http_end. */
int em_http_request(em_http_client *c, const char *method, const char *path, const char *headers,
                    const char *body, size_t len, em_http_resp *resp, em_err *err);

/* The next line of the body, without its "\n" or "\r\n": 1 with *line
 * (valid until the next call; NUL-terminated, *len bytes) set; 0 at the end
 * of the body (a last line without a newline comes first); negative on an
 * error. */
int em_http_line(em_http_client *c, const char **line, size_t *len, em_err *err);

/* The rest of the body as one NUL-terminated malloc'd buffer (*body, owned
 * by the caller; *len bytes). */
int em_http_body(em_http_client *c, char **body, size_t *len, em_err *err);

/* End the response: what is left of the body is read (for up to 1 s and
 * 64 KiB; a server that sends more is cut off); the connection is kept when
 * the body ended where its framing says and the server did not ask to close
 * it, else closed. */
void em_http_end(em_http_client *c);

/* What the last failed call of c failed on. */
em_http_fail em_http_failure(const em_http_client *c);

/* A Retry-After value: delay-seconds or an HTTP-date, as seconds from now
 * (0 for a date in the past); -1 when it is neither. */
double em_http_parse_retry_after(const char *v);

#endif
