/* test_http_client.c — firmware/http_client.c on its own: URL forms and
 * the errors of bad ones, Retry-After values, and responses from a scripted
 * server on 127.0.0.1 (a thread that answers each request with canned bytes,
 * written a few bytes at a time so that lines and chunk framing straddle
 * reads): chunked bodies with extensions and trailers, Content-Length and
 * close-delimited bodies, keep-alive reuse, 1xx before the answer, the
 * line, body and header caps at their exact edges, bad status lines and
 * chunk sizes, a connection that ends early, a server that goes quiet
 * (timeout), a cancel, a refused connection. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "firmware/http_client.h"
#include "tests/common/testutil.h"

/* ---- the scripted server --------------------------------------------------- */

typedef struct {
    const char *resp;     /* written after a request arrives */
    int         close;    /* then close the connection (the next step accepts a new one) */
    int         hold_ms;  /* wait this long before that */
} step;

typedef struct {
    int         lfd, port, accepts;
    const step *steps;
    int         n;
    pthread_t   th;
} server;

/* Read one request (head, and a Content-Length body); -1 at EOF. */
static int read_request(int fd)
{
    char buf[8192];
    size_t n = 0;
    while (n < sizeof buf - 1) {
        ssize_t r = recv(fd, buf + n, sizeof buf - 1 - n, 0);
        if (r <= 0)
            return -1;
        n += (size_t)r;
        buf[n] = 0;
        char *end = strstr(buf, "\r\n\r\n");
        if (!end)
            continue;
        const char *cl = strstr(buf, "Content-Length: ");
        size_t want = (size_t)(end + 4 - buf) + (cl && cl < end ? strtoul(cl + 16, NULL, 10) : 0);
        while (n < want && n < sizeof buf - 1) {
            if ((r = recv(fd, buf + n, sizeof buf - 1 - n, 0)) <= 0)
                return -1;
            n += (size_t)r;
        }
        return 0;
    }
    return -1;
}

static void *serve(void *arg)
{
    server *s = arg;
    int fd = -1;
    for (int i = 0; i < s->n; i++) {
        if (fd < 0) {
            if ((fd = accept(s->lfd, NULL, NULL)) < 0)
                break;
            s->accepts++;
            int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        }
        if (read_request(fd))
            break;
        const char *p = s->steps[i].resp;
        size_t piece = strlen(p) < 4096 ? 7 : 4096;   /* small answers a few bytes at a time */
        for (size_t left = strlen(p); left;) {
            size_t k = left < piece ? left : piece;
            if (send(fd, p, k, MSG_NOSIGNAL) <= 0)
                break;
            p += k;
            left -= k;
            struct timespec ts = { 0, 200000 };
            nanosleep(&ts, NULL);
        }
        if (s->steps[i].hold_ms) {
            struct timespec ts = { s->steps[i].hold_ms / 1000, (s->steps[i].hold_ms % 1000) * 1000000L };
            nanosleep(&ts, NULL);
        }
        if (s->steps[i].close) {
            close(fd);
            fd = -1;
        }
    }
    if (fd >= 0)
        close(fd);
    return NULL;
}

static void server_start(server *s, const step *steps, int n)
{
    memset(s, 0, sizeof *s);
    s->steps = steps;
    s->n = n;
    s->lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t al = sizeof a;
    CHECK(bind(s->lfd, (struct sockaddr *)&a, sizeof a) == 0 && listen(s->lfd, 4) == 0);
    getsockname(s->lfd, (struct sockaddr *)&a, &al);
    s->port = ntohs(a.sin_port);
    CHECK(pthread_create(&s->th, NULL, serve, s) == 0);
}

static void server_stop(server *s)
{
    shutdown(s->lfd, SHUT_RDWR);   /* ends an accept() still waiting */
    pthread_join(s->th, NULL);
    close(s->lfd);
}

typedef struct {
    em_http_url     u;
    em_http_client *c;
    atomic_int      cancel;
} client;

static void client_open(client *k, int port, int timeout_ms, size_t max_line, size_t max_body)
{
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", port);
    atomic_init(&k->cancel, 0);
    CHECK(em_http_url_parse(url, "/v1", &k->u, NULL) == 0 && em_http_url_resolve(&k->u, NULL) == 0);
    em_http_opts o = { timeout_ms, max_line, max_body, &k->cancel };
    CHECK(em_http_client_create(&k->u, &o, &k->c, NULL) == 0);
}

/* The body's lines joined with '|' into out; the em_http_line result that ended them. */
static int lines(client *k, char *out, size_t cap)
{
    const char *l;
    size_t n;
    int rc;
    out[0] = 0;
    while ((rc = em_http_line(k->c, &l, &n, NULL)) == 1)
        snprintf(out + strlen(out), cap - strlen(out), "%s%s", out[0] ? "|" : "", l);
    return rc;
}

static int get(client *k, em_http_resp *r)
{
    return em_http_request(k->c, "POST", "/x", "Content-Type: text/plain\r\n", "hi", 2, r, NULL);
}

/* ---- the cases ------------------------------------------------------------- */

static void test_urls(void)
{
    static const struct { const char *url, *host, *port, *authority, *base; } ok[] = {
        { "http://127.0.0.1:8080", "127.0.0.1", "8080", "127.0.0.1:8080", "" },
        { "http://127.0.0.1:8080/v1", "127.0.0.1", "8080", "127.0.0.1:8080", "" },
        { "http://127.0.0.1:8080/v1/", "127.0.0.1", "8080", "127.0.0.1:8080", "" },
        { "http://box/ember/v1", "box", "80", "box", "/ember" },
        { "http://box:80/av1", "box", "80", "box", "/av1" },
        { "HTTP://[::1]:9/", "::1", "9", "[::1]:9", "" },
        { "http://my-box.lan_1", "my-box.lan_1", "80", "my-box.lan_1", "" },
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        em_http_url u;
        em_err err = { 0 };
        int rc = em_http_url_parse(ok[i].url, "/v1", &u, &err);
        CHECKF(rc == 0 && !strcmp(u.host, ok[i].host) && !strcmp(u.port, ok[i].port) &&
               !strcmp(u.authority, ok[i].authority) && !strcmp(u.base, ok[i].base),
               "%s: rc %d '%s' '%s' '%s' '%s' %s", ok[i].url, rc, u.host, u.port, u.authority, u.base, err.msg);
    }
    static const char *const bad[] = {
        "https://x", "ftp://x", "x:80", "http://", "http://:80", "http://x:0", "http://x:65536", "http://x:8a",
        "http://x:", "http://[::1", "http://[zz]", "http://[]", "http://[::1]x", "http://u@x", "http://x/?a",
        "http://x#f", "http://x/a b", "http://x/\xc3\xa9", "http://x!y",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        em_http_url u;
        em_err err = { 0 };
        CHECKF(em_http_url_parse(bad[i], "/v1", &u, &err) == EM_EINVAL && err.msg[0], "%s accepted", bad[i]);
    }
}

static void test_retry_after(void)
{
    CHECK(em_http_parse_retry_after("5") == 5);
    CHECK(em_http_parse_retry_after(" 2 ") == 2);
    CHECK(em_http_parse_retry_after("1.5") == 1.5);
    CHECK(em_http_parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0);
    char date[64];
    time_t t = time(NULL) + 100;
    struct tm tm;
    strftime(date, sizeof date, "%a, %d %b %Y %H:%M:%S GMT", gmtime_r(&t, &tm));
    double d = em_http_parse_retry_after(date);
    CHECKF(d >= 97 && d <= 101, "%s: %g", date, d);
    CHECK(em_http_parse_retry_after("soon") == -1);
    CHECK(em_http_parse_retry_after("5x") == -1);
    CHECK(em_http_parse_retry_after("") == -1);
}

static void test_framings(void)
{
    static const step steps[] = {
        { "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/event-stream\r\n\r\n"
          "5;ext=1\r\nab\ncd\r\n3\r\n\nef\r\n0\r\nX-Trailer: 1\r\n\r\n", 0, 0 },
        { "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nx\r\ny\n", 0, 0 },
        { "HTTP/1.1 429 Too Many\r\nretry-after: 3\r\nContent-Length: 4\r\n\r\nbusy", 0, 0 },
        { "HTTP/1.1 204 No Content\r\n\r\n", 0, 0 },
        { "HTTP/1.0 200 OK\r\n\r\nlast\nno newline", 1, 0 },
        { "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", 1, 0 },
        { "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 1, 0 },
    };
    server s;
    server_start(&s, steps, 7);
    client k;
    client_open(&k, s.port, 5000, 1 << 20, 1 << 24);
    em_http_resp r;
    char out[256];
    CHECK(get(&k, &r) == 0 && r.status == 200 && !strcmp(r.content_type, "text/event-stream"));
    CHECKF(lines(&k, out, sizeof out) == 0 && !strcmp(out, "ab|cd|ef"), "chunked: '%s'", out);
    em_http_end(k.c);
    CHECK(get(&k, &r) == 0 && r.status == 200 && r.retry_after_s == -1);
    CHECKF(lines(&k, out, sizeof out) == 0 && !strcmp(out, "x|y"), "length: '%s'", out);
    em_http_end(k.c);
    char *body = NULL;
    size_t len = 0;
    CHECK(get(&k, &r) == 0 && r.status == 429 && r.retry_after_s == 3);
    CHECK(em_http_body(k.c, &body, &len, NULL) == 0 && len == 4 && !strcmp(body, "busy"));
    free(body);
    em_http_end(k.c);
    CHECK(get(&k, &r) == 0 && r.status == 204 && lines(&k, out, sizeof out) == 0 && !out[0]);
    em_http_end(k.c);
    CHECK(get(&k, &r) == 0 && r.status == 200);
    CHECKF(lines(&k, out, sizeof out) == 0 && !strcmp(out, "last|no newline"), "close-delimited: '%s'", out);
    em_http_end(k.c);
    CHECK(get(&k, &r) == 0 && lines(&k, out, sizeof out) == 0 && !strcmp(out, "ok"));   /* a new connection */
    em_http_end(k.c);                                                                   /* closed: asked to */
    CHECK(get(&k, &r) == 0 && lines(&k, out, sizeof out) == 0 && !strcmp(out, "ok"));
    em_http_end(k.c);
    em_http_client_destroy(k.c);
    server_stop(&s);
    CHECKF(s.accepts == 3, "%d connections, expected 3 (kept alive until the close-delimited body)", s.accepts);
}

/* One request on a fresh server answering resp: the em_http_line (lines=1)
 * or em_http_body result of its body, and the failure kind. */
static int one(const char *resp, int hold_ms, int timeout_ms, size_t max_line, size_t max_body, int by_lines,
               int cancel, em_http_fail *fail, int *req_rc)
{
    step st[1] = { { resp, 1, hold_ms } };
    server s;
    server_start(&s, st, 1);
    client k;
    client_open(&k, s.port, timeout_ms, max_line, max_body);
    em_http_resp r;
    char out[256];
    int rc = get(&k, &r);
    *req_rc = rc;
    if (!rc) {
        atomic_store(&k.cancel, cancel);
        if (by_lines) {
            rc = lines(&k, out, sizeof out);
        } else {
            char *body = NULL;
            size_t len;
            rc = em_http_body(k.c, &body, &len, NULL);
            free(body);
        }
    }
    *fail = em_http_failure(k.c);
    em_http_end(k.c);
    em_http_client_destroy(k.c);
    server_stop(&s);
    return rc;
}

static void test_bounds_and_failures(void)
{
    em_http_fail f;
    int req;
    /* caps at their edges: a 4-byte line and a 10-byte body pass, one byte more does not */
    CHECK(one("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabcd\n1234\n", 0, 5000, 4, 10, 1, 0, &f, &req) == 0);
    CHECK(one("HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nabcde\n", 0, 5000, 4, 10, 1, 0, &f, &req) == EM_ERANGE &&
          f == EM_HTTP_FAIL_TOO_LARGE);
    CHECK(one("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n0123456789", 0, 5000, 4, 10, 0, 0, &f, &req) == 0);
    CHECK(one("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\n012345\r\n5\r\n67890\r\n0\r\n\r\n", 0, 5000,
              4, 10, 0, 0, &f, &req) == EM_ERANGE && f == EM_HTTP_FAIL_TOO_LARGE);
    /* bad framing */
    CHECK(one("HTTP/2 200 OK\r\n\r\n", 0, 5000, 64, 64, 1, 0, &f, &req) && req == EM_EFORMAT &&
          f == EM_HTTP_FAIL_PROTOCOL);
    CHECK(one("SSH-2.0-OpenSSH\r\n\r\n", 0, 5000, 64, 64, 1, 0, &f, &req) && f == EM_HTTP_FAIL_PROTOCOL);
    CHECK(one("HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", 0, 5000, 64, 64, 1, 0, &f, &req) &&
          f == EM_HTTP_FAIL_PROTOCOL);
    CHECK(one("HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", 0, 5000, 64, 64, 1, 0, &f,
              &req) && f == EM_HTTP_FAIL_PROTOCOL);
    CHECK(one("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 0, 5000, 64, 64, 1, 0, &f, &req) ==
              EM_EFORMAT && f == EM_HTTP_FAIL_PROTOCOL);
    CHECK(one("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n0\r\n\r\n", 0, 5000, 64, 64, 0, 0,
              &f, &req) == EM_EFORMAT && f == EM_HTTP_FAIL_PROTOCOL);
    /* the connection ends inside a body: of a Content-Length, of a chunk, before the last chunk */
    CHECK(one("HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nabc", 0, 5000, 64, 64, 1, 0, &f, &req) == EM_EIO &&
          f == EM_HTTP_FAIL_CLOSED);
    CHECK(one("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n9\r\nabc", 0, 5000, 64, 64, 1, 0, &f, &req) ==
              EM_EIO && f == EM_HTTP_FAIL_CLOSED);
    CHECK(one("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n", 0, 5000, 64, 64, 1, 0, &f,
              &req) == EM_EIO && f == EM_HTTP_FAIL_CLOSED);
    CHECK(one("", 0, 5000, 64, 64, 1, 0, &f, &req) && req == EM_EIO && f == EM_HTTP_FAIL_CLOSED);
    /* quiet: a timeout; a cancel */
    CHECK(one("HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nab", 400, 100, 64, 64, 1, 0, &f, &req) == EM_EIO &&
          f == EM_HTTP_FAIL_TIMEOUT);
    CHECK(one("HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nab", 400, 5000, 64, 64, 1, 1, &f, &req) ==
              EM_ECANCELED && f == EM_HTTP_FAIL_CANCELED);
    /* headers: over 128 lines; over 64 KiB */
    char *big = malloc(80000);
    strcpy(big, "HTTP/1.1 200 OK\r\n");
    for (int i = 0; i < 129; i++)
        strcat(big, "X-A: b\r\n");
    strcat(big, "\r\n");
    CHECK(one(big, 0, 5000, 64, 64, 1, 0, &f, &req) && req == EM_ERANGE && f == EM_HTTP_FAIL_TOO_LARGE);
    char *p = big + sprintf(big, "HTTP/1.1 200 OK\r\n");
    for (int i = 0; i < 100; i++)   /* 100 lines of 700 bytes */
        p += sprintf(p, "X-Long: %0700d\r\n", i);
    strcat(big, "\r\n");
    CHECK(one(big, 0, 5000, 64, 64, 1, 0, &f, &req) && req == EM_ERANGE && f == EM_HTTP_FAIL_TOO_LARGE);
    free(big);
}

static void test_refused(void)
{
    server s;   /* a port nobody listens on any more */
    step none[1] = { { "", 1, 0 } };
    server_start(&s, none, 0);
    int port = s.port;
    server_stop(&s);
    client k;
    client_open(&k, port, 2000, 64, 64);
    em_http_resp r;
    em_err err = { 0 };
    CHECK(em_http_request(k.c, "GET", "/", NULL, NULL, 0, &r, &err) == EM_EIO &&
          em_http_failure(k.c) == EM_HTTP_FAIL_CONNECT && strstr(err.msg, "cannot connect to 127.0.0.1:"));
    em_http_client_destroy(k.c);
    em_http_client_destroy(NULL);
}

int main(void)
{
    test_urls();
    test_retry_after();
    test_framings();
    test_bounds_and_failures();
    test_refused();
    return test_summary("http_client");
}
