/* test_proxy.c — unit tests of web/proxy.c, who the client is behind a
 * reverse proxy: trusted_proxies parsed (IPv4, IPv6, CIDR blocks, mapped
 * addresses) and bad entries refused by name; X-Forwarded-For read only from
 * a trusted peer and walked from the right past trusted hops, so that a
 * client's own header cannot choose its address; garbage entries, ports,
 * brackets; the loopback rule following the client (a forwarded request
 * from an undeclared proxy on this box is not local); and every truncation
 * of a header read in bounds (ASan). */
#include <stdlib.h>
#include <string.h>

#include "tests/common/testutil.h"
#include "web/web_int.h"

static web_cidr *v;
static size_t n;

/* The client web_forwarded_client names; *lo its loopback answer. */
static const char *client(const char *peer, const char *xff, int forwarded, int *lo)
{
    static char out[64];
    *lo = web_forwarded_client(v, n, peer, xff, forwarded, out, sizeof out);
    return out;
}

int main(void)
{
    em_err err = { 0 };
    /* the list */
    CHECK(web_proxies_parse(NULL, &v, &n, &err) == 0 && n == 0 && !v);
    CHECK(web_proxies_parse("  ,, ", &v, &n, &err) == 0 && n == 0);
    static const char *bad[] = { "10.0.0.300", "10.0.0.0/33", "fd00::/129", "10.0.0.0/", "10.0.0.0/x", "host.lan",
                                 "10.0.0.0/8/8", "[::1]", "10.0.0.1/-1", "::1/1x" };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECKF(web_proxies_parse(bad[i], &v, &n, &err) == EM_EINVAL && strstr(err.msg, "trusted_proxies") &&
               strstr(err.msg, bad[i]), "%s: %s", bad[i], err.msg);
        CHECK(!v && n == 0);
    }
    CHECK(web_proxies_parse("127.0.0.1, 10.1.0.0/16 fd00::/8,::ffff:192.0.2.7 ::1", &v, &n, &err) == 0 && n == 5);
    CHECK(web_proxy_trusted(v, n, "127.0.0.1") && !web_proxy_trusted(v, n, "127.0.0.2"));
    CHECK(web_proxy_trusted(v, n, "10.1.255.3") && !web_proxy_trusted(v, n, "10.2.0.1"));
    CHECK(web_proxy_trusted(v, n, "fd12:3456::1") && !web_proxy_trusted(v, n, "fe80::1"));
    CHECK(web_proxy_trusted(v, n, "192.0.2.7") && web_proxy_trusted(v, n, "::ffff:10.1.2.3"));
    CHECK(web_proxy_trusted(v, n, "::1") && !web_proxy_trusted(v, n, "") && !web_proxy_trusted(v, n, "garbage"));

    int lo;
    /* an untrusted peer: its header is ignored, and it is not local once it says it was forwarded */
    CHECK(!strcmp(client("10.9.9.9", "1.2.3.4", 0, &lo), "10.9.9.9") && !lo);
    CHECK(!strcmp(client("127.0.0.2", NULL, 0, &lo), "127.0.0.2") && lo);
    CHECK(!strcmp(client("127.0.0.2", "127.0.0.2", 0, &lo), "127.0.0.2") && !lo);
    CHECK(!strcmp(client("127.0.0.2", NULL, 1, &lo), "127.0.0.2") && !lo);
    CHECK(!strcmp(client("127.0.0.2", "", 0, &lo), "127.0.0.2") && lo);
    /* a trusted peer: the first untrusted hop from the right */
    CHECK(!strcmp(client("127.0.0.1", "192.168.1.20", 0, &lo), "192.168.1.20") && !lo);
    CHECK(!strcmp(client("127.0.0.1", "6.6.6.6, 192.168.1.20", 0, &lo), "192.168.1.20") && !lo);   /* forged left part */
    CHECK(!strcmp(client("127.0.0.1", "127.0.0.1,192.168.1.20, 10.1.0.9", 0, &lo), "192.168.1.20") && !lo);
    CHECK(!strcmp(client("127.0.0.1", "192.168.1.20,10.1.0.9,10.1.3.3", 0, &lo), "192.168.1.20"));
    CHECK(!strcmp(client("::ffff:127.0.0.1", "127.0.0.3", 0, &lo), "127.0.0.3") && lo);   /* a client on this box */
    CHECK(!strcmp(client("127.0.0.1", "10.1.0.9", 0, &lo), "10.1.0.9") && !lo);   /* every hop trusted: the leftmost */
    CHECK(!strcmp(client("127.0.0.1", "127.0.0.1", 0, &lo), "127.0.0.1") && lo);
    /* no header, or garbage: the proxy itself, never local */
    CHECK(!strcmp(client("127.0.0.1", NULL, 0, &lo), "127.0.0.1") && !lo);
    CHECK(!strcmp(client("127.0.0.1", "unknown", 0, &lo), "127.0.0.1") && !lo);
    CHECK(!strcmp(client("127.0.0.1", "127.0.0.5, unknown", 0, &lo), "127.0.0.1") && !lo);
    CHECK(!strcmp(client("127.0.0.1", "unknown, 192.168.1.20", 0, &lo), "192.168.1.20") && !lo);
    CHECK(!strcmp(client("127.0.0.1", "10.1.0.9,,192.168.1.20", 0, &lo), "192.168.1.20"));
    /* spellings: ports, brackets, IPv6, mapped, spaces */
    CHECK(!strcmp(client("127.0.0.1", " 192.168.1.20:5123 ", 0, &lo), "192.168.1.20"));
    CHECK(!strcmp(client("127.0.0.1", "[2001:db8::7]:443", 0, &lo), "2001:db8::7"));
    CHECK(!strcmp(client("127.0.0.1", "2001:db8::7", 0, &lo), "2001:db8::7"));
    CHECK(!strcmp(client("127.0.0.1", "::ffff:192.168.1.20", 0, &lo), "192.168.1.20"));
    CHECK(!strcmp(client("127.0.0.1", "[::1]", 0, &lo), "::1") && lo);
    CHECK(!strcmp(client("127.0.0.1", "[2001:db8::7", 0, &lo), "127.0.0.1") && !lo);
    CHECK(!strcmp(client("127.0.0.1", "1.2.3.4:5:6", 0, &lo), "127.0.0.1"));
    /* the output is truncated to its buffer, never overrun */
    char small[4];
    web_forwarded_client(v, n, "127.0.0.1", "192.168.1.20", 0, small, sizeof small);
    CHECK(!strcmp(small, "192"));
    /* every prefix of a long header, in a buffer of its own size (ASan sees a read past it) */
    const char *h = "6.6.6.6, [2001:db8::7]:443 ,unknown, 10.1.0.9:80,::ffff:127.0.0.9, 192.168.1.20";
    for (size_t k = 0; k <= strlen(h); k++) {
        char *p = malloc(k + 1);
        memcpy(p, h, k);
        p[k] = 0;
        char out[64];
        web_forwarded_client(v, n, "127.0.0.1", p, 0, out, sizeof out);
        CHECK(out[0]);
        free(p);
    }
    free(v);
    return test_summary("proxy");
}
