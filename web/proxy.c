/* proxy.c — who the client is. A connection's peer is the client unless it
 * is one of the trusted_proxies (addresses or CIDR blocks, IPv4 and IPv6,
 * --trusted-proxies): then the client is read from the X-Forwarded-For
 * header the proxy appends to (HAProxy's `option forwardfor`), walking it
 * from the right past every trusted hop to the first address that is not
 * one; an entry that is not an address ends the walk at the hop that added
 * it. So a client cannot choose its own address by sending the header
 * itself: only what trusted hops appended counts. That address is the one
 * the wrong-key limit counts (auth.c), the log names and the ledger
 * records; the per-address connection cap does not apply to a trusted
 * proxy's connections (they carry everyone's requests).
 *
 * The loopback rule (no key needed on 127.0.0.0/8 and ::1 without
 * --require-key) follows the client, not the peer: a request through a
 * trusted proxy is loopback only when the header names a loopback client,
 * and a request from an untrusted loopback peer that carries
 * X-Forwarded-For or Forwarded came through a proxy on this box that was
 * not declared, so it is not treated as local either. Service thread only. */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libwebsockets.h>

#include "core/grow.h"
#include "web/web_int.h"

struct web_cidr {
    int           v6;        /* 0: IPv4 (4 bytes of a), 1: IPv6 (16) */
    unsigned char a[16];
    int           bits;      /* prefix length */
};

/* Parse an address of n bytes (IPv4, IPv6, "[IPv6]" with or without
 * ":port", "IPv4:port"); an IPv4-mapped IPv6 address becomes IPv4. 0 ok. */
static int parse_addr(const char *s, size_t n, int *v6, unsigned char a[16])
{
    char t[64];
    while (n && (*s == ' ' || *s == '\t'))
        s++, n--;
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        n--;
    if (!n || n >= sizeof t)
        return -1;
    if (*s == '[') {   /* [v6] or [v6]:port */
        const char *e = memchr(s, ']', n);
        if (!e)
            return -1;
        s++;
        n = (size_t)(e - s);
        if (!n || n >= sizeof t)
            return -1;
    }
    memcpy(t, s, n);
    t[n] = 0;
    char *colon = strchr(t, ':');
    if (colon && !strchr(colon + 1, ':'))   /* one colon: IPv4:port */
        *colon = 0;
    if (inet_pton(AF_INET, t, a) == 1) {
        *v6 = 0;
        return 0;
    }
    if (inet_pton(AF_INET6, t, a) != 1)
        return -1;
    static const unsigned char mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
    if (!memcmp(a, mapped, 12)) {
        memmove(a, a + 12, 4);
        *v6 = 0;
        return 0;
    }
    *v6 = 1;
    return 0;
}

int web_proxies_parse(const char *list, web_cidr **out, size_t *n_out, em_err *err)
{
    web_cidr *v = NULL;
    size_t n = 0, cap = 0;
    *out = NULL;
    *n_out = 0;
    for (const char *p = list ? list : ""; *p;) {
        while (*p == ',' || *p == ' ' || *p == '\t')
            p++;
        const char *e = p;
        while (*e && *e != ',' && *e != ' ' && *e != '\t')
            e++;
        if (e == p)
            break;
        size_t len = (size_t)(e - p);
        const char *slash = memchr(p, '/', len);
        web_cidr c = { 0 };
        size_t alen = slash ? (size_t)(slash - p) : len;
        int bits = -1;
        if (slash) {
            char b[8];
            size_t bl = len - alen - 1;
            char *end;
            if (bl && bl < sizeof b) {
                memcpy(b, slash + 1, bl);
                b[bl] = 0;
                long x = strtol(b, &end, 10);
                bits = *end || b[0] < '0' || b[0] > '9' ? -1 : (int)(x > 200 ? 200 : x);
            }
        }
        if ((alen && *p == '[') || parse_addr(p, alen, &c.v6, c.a) ||
            (slash && (bits < 0 || bits > (c.v6 ? 128 : 32)))) {
            free(v);
            return em_err_set(err, EM_EINVAL,
                              "serve: trusted_proxies: '%.*s' is not an IP address or a CIDR block "
                              "(192.0.2.10, 10.0.0.0/8, fd00::/8)", (int)(len > 80 ? 80 : len), p);
        }
        c.bits = slash ? bits : c.v6 ? 128 : 32;
        if (em_grow((void **)&v, &cap, n + 1, sizeof *v, 8)) {
            free(v);
            return em_err_set(err, EM_ENOMEM, "serve: out of memory");
        }
        v[n++] = c;
        p = e;
    }
    *out = v;
    *n_out = n;
    return 0;
}

static int in_block(const web_cidr *c, int v6, const unsigned char *a)
{
    if (c->v6 != v6)
        return 0;
    int full = c->bits / 8, rest = c->bits % 8;
    if (memcmp(c->a, a, (size_t)full))
        return 0;
    if (!rest)
        return 1;
    unsigned char m = (unsigned char)(0xff << (8 - rest));
    return (c->a[full] & m) == (a[full] & m);
}

static int trusted(const web_cidr *v, size_t n, int v6, const unsigned char *a)
{
    for (size_t i = 0; i < n; i++)
        if (in_block(&v[i], v6, a))
            return 1;
    return 0;
}

int web_proxy_trusted(const web_cidr *v, size_t n, const char *addr)
{
    int v6;
    unsigned char a[16];
    return n && addr && !parse_addr(addr, strlen(addr), &v6, a) && trusted(v, n, v6, a);
}

int web_forwarded_client(const web_cidr *v, size_t n, const char *peer, const char *xff, int forwarded,
                         char *out, size_t cap)
{
    snprintf(out, cap, "%s", peer);
    if (!web_proxy_trusted(v, n, peer))   /* the header is the client's own word: ignored */
        return web_is_loopback(peer) && !forwarded && !(xff && *xff);
    size_t end = xff ? strlen(xff) : 0;
    int named = 0;   /* the header named someone */
    while (end) {   /* from the right: the hops the trusted proxies appended */
        size_t start = end;
        while (start && xff[start - 1] != ',')
            start--;
        int v6;
        unsigned char a[16];
        if (parse_addr(xff + start, end - start, &v6, a))
            break;   /* not an address: the hop that wrote it is the client we know */
        char s[INET6_ADDRSTRLEN];
        if (!inet_ntop(v6 ? AF_INET6 : AF_INET, a, s, sizeof s))
            break;
        snprintf(out, cap, "%s", s);
        named = 1;
        if (!trusted(v, n, v6, a))
            break;
        end = start ? start - 1 : 0;
    }
    /* through a trusted proxy: local only when the header says so */
    return named && web_is_loopback(out);
}

void web_client_of(em_web *w, struct lws *wsi, const char *peer, char *addr, size_t cap, int *loopback)
{
    int len = lws_hdr_total_length(wsi, WSI_TOKEN_X_FORWARDED_FOR);
    char *xff = NULL;
    if (len > 0 && (xff = malloc((size_t)len + 1)) && lws_hdr_copy(wsi, xff, len + 1, WSI_TOKEN_X_FORWARDED_FOR) < 0) {
        free(xff);
        xff = NULL;
    }
    if (len > 0 && !xff) {   /* present but unreadable (out of memory): the peer, never local */
        snprintf(addr, cap, "%s", peer);
        *loopback = 0;
        return;
    }
    int forwarded = lws_hdr_custom_length(wsi, "forwarded:", 10) > 0;
    *loopback = web_forwarded_client(w->proxies, w->n_proxies, peer, xff, forwarded, addr, cap);
    free(xff);
}
