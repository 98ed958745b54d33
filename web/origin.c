/* origin.c — which browser pages may use this server. First the Host
 * header, against DNS rebinding (a name of the attacker's that resolves to
 * this box makes the attacker's page "same origin"): it must be an IP
 * address, localhost, this machine's host name (or NAME.local), the
 * address the server listens on, or a name in allowed_hosts ("*": any);
 * else 403 host_not_allowed. A request without a Host header (HTTP/1.0:
 * not a browser) goes on. Then a request or a
 * WebSocket upgrade that carries an Origin header must come from the
 * server's own origin (the scheme's host[:port] equal to the Host header)
 * or one listed in allowed_origins (comma- or space-separated, "*" for
 * any); anything else is refused with 403 origin_not_allowed, so that a
 * page of another site cannot drive the API with a loopback user's
 * rights. Requests without an Origin (curl, the SDKs) are not browsers'
 * cross-site calls and go on. A listed origin also gets the CORS headers
 * that let its page read the answers, and its preflights (OPTIONS) a 204
 * (web_cors). Service thread only. */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "core/log.h"
#include "web/web_int.h"

/* Whether origin appears in list (exact, case-insensitive, a trailing '/' ignored). */
static int listed(const char *list, const char *origin)
{
    size_t on = strlen(origin);
    while (on && origin[on - 1] == '/')
        on--;
    for (const char *p = list; *p;) {
        while (*p == ',' || *p == ' ' || *p == '\t')
            p++;
        const char *e = p;
        while (*e && *e != ',' && *e != ' ' && *e != '\t')
            e++;
        size_t n = (size_t)(e - p);
        while (n && p[n - 1] == '/')
            n--;
        if ((n == 1 && *p == '*') || (n && n == on && strncasecmp(p, origin, n) == 0))
            return 1;
        p = e;
    }
    return 0;
}

/* Whether the name (a Host header less its port) is one of this server's. */
static int host_ok(const em_web *w, const char *name, size_t n)
{
    char h[256];
    if (!n || n >= sizeof h)
        return 0;
    memcpy(h, name, n);
    h[n] = 0;
    while (n && h[n - 1] == '.')   /* "localhost." is localhost */
        h[--n] = 0;
    unsigned char addr[16];
    if (inet_pton(AF_INET, h, addr) == 1)
        return 1;   /* an address: what a rebinding attack cannot choose */
    if (h[0] == '[' && n > 2 && h[n - 1] == ']') {
        h[n - 1] = 0;
        return inet_pton(AF_INET6, h + 1, addr) == 1;
    }
    if (!strcasecmp(h, "localhost") || (n > 10 && !strcasecmp(h + n - 10, ".localhost")))
        return 1;
    if (w->host && !strcasecmp(h, w->host))
        return 1;
    char me[256];
    if (gethostname(me, sizeof me) == 0) {
        me[sizeof me - 1] = 0;
        size_t mn = strlen(me);
        if (!strcasecmp(h, me) || (n == mn + 6 && !strncasecmp(h, me, mn) && !strcasecmp(h + mn, ".local")))
            return 1;
        char *dot = strchr(me, '.');   /* a fully qualified host name: its first label too */
        if (dot && (size_t)(dot - me) == n && !strncasecmp(h, me, n))
            return 1;
    }
    return listed(w->hosts, h);
}

/* Header t into buf: 1 when there, 0 when absent, -1 when longer than cap - 1. */
static int header(struct lws *wsi, enum lws_token_indexes t, char *buf, size_t cap)
{
    int len = lws_hdr_total_length(wsi, t);
    buf[0] = 0;
    if (len <= 0)
        return 0;
    if (len >= (int)cap || lws_hdr_copy(wsi, buf, (int)cap, t) < 0)
        return -1;
    return 1;
}

/* Whether origin (http[s]://host[:port]) is the server's own: the Host header's. */
static int own_origin(const char *origin, const char *host)
{
    const char *rest = !strncasecmp(origin, "http://", 7) ? origin + 7 : !strncasecmp(origin, "https://", 8)
                       ? origin + 8 : NULL;
    return rest && host[0] && strcasecmp(rest, host) == 0;
}

int web_host_check(em_web *w, struct lws *wsi, em_web_error *e)
{
    char host[256];
    int got = header(wsi, WSI_TOKEN_HOST, host, sizeof host);
    if (!got)
        return 0;
    if (got < 0)
        return em_web_fail(e, 403, "invalid_request_error", "host_not_allowed", NULL,
                           "the Host header is longer than %zu bytes", sizeof host - 1);
    size_t n = strlen(host);
    const char *colon = host[0] == '[' ? strstr(host, "]:") : strrchr(host, ':');
    if (colon && (host[0] != '[' || (colon = colon + 1)))
        n = (size_t)(colon - host);
    if (listed(w->hosts, "*") || host_ok(w, host, n))
        return 0;
    return em_web_fail(e, 403, "invalid_request_error", "host_not_allowed", NULL,
                       "Host %.200s is not a name of this server: ask by its address, or add the name to "
                       "allowed_hosts (a guard against DNS rebinding)", host);
}

int web_origin_check(em_web *w, struct lws *wsi, em_web_error *e)
{
    char origin[256], host[256];
    if (web_host_check(w, wsi, e))
        return -1;
    int got = header(wsi, WSI_TOKEN_ORIGIN, origin, sizeof origin);
    if (!got)
        return 0;
    if (got < 0)
        return em_web_fail(e, 403, "invalid_request_error", "origin_not_allowed", NULL,
                           "the Origin header is longer than %zu bytes", sizeof origin - 1);
    header(wsi, WSI_TOKEN_HOST, host, sizeof host);   /* (checked above: it fits) */
    if (own_origin(origin, host))
        return 0;   /* the server's own page */
    if (listed(w->origins, origin))
        return 0;
    return em_web_fail(e, 403, "invalid_request_error", "origin_not_allowed", NULL,
                       "Origin %s is not allowed: this server answers pages of its own origin (%s) and those "
                       "listed in allowed_origins", origin, host[0] ? host : "no Host header");
}

int web_cors(web_conn *c)
{
    char origin[256], host[256];
    if (header(c->wsi, WSI_TOKEN_ORIGIN, origin, sizeof origin) <= 0)
        return c->method == EM_M_OPTIONS;   /* no browser's preflight: an OPTIONS all the same */
    header(c->wsi, WSI_TOKEN_HOST, host, sizeof host);
    size_t used = strlen(c->headers);
    if (!own_origin(origin, host))   /* listed (web_origin_check refused the rest): this page may read the answer */
        snprintf(c->headers + used, sizeof c->headers - used, "access-control-allow-origin: %s\r\nvary: Origin\r\n"
                 "access-control-expose-headers: retry-after\r\n", origin);
    if (c->method != EM_M_OPTIONS)
        return 0;
    used = strlen(c->headers);
    snprintf(c->headers + used, sizeof c->headers - used, "access-control-allow-methods: GET, POST, PATCH, DELETE\r\n"
             "access-control-allow-headers: authorization, content-type\r\naccess-control-max-age: 600\r\n");
    return 1;
}

int web_origin_upgrade(em_web *w, struct lws *wsi)
{
    em_web_error e = { 0 };
    if (web_origin_check(w, wsi, &e) == 0)
        return 0;
    char addr[64] = "";
    lws_get_peer_simple(wsi, addr, sizeof addr);
    em_log(EM_LOG_WARN, NULL, "%s: WebSocket refused: %d %s", addr, e.status, e.message);
    json_t *j = em_web_error_json(&e);
    char *body = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(j);
    if (!body)
        return -1;
    /* the status line and headers by hand: lws would answer an upgrade request
     * as HTTP/1.0, which WebSocket clients refuse to read */
    unsigned char buf[LWS_PRE + 2048];
    int n = snprintf((char *)buf + LWS_PRE, sizeof buf - LWS_PRE,
                     "HTTP/1.1 403 Forbidden\r\ncontent-type: application/json\r\ncontent-length: %zu\r\n"
                     "connection: close\r\n\r\n%s", strlen(body), body);
    int rc = 1;
    if (n < 0 || (size_t)n >= sizeof buf - LWS_PRE ||
        lws_write(wsi, buf + LWS_PRE, (size_t)n, LWS_WRITE_RAW) != n)
        rc = -1;
    free(body);
    return rc;
}
