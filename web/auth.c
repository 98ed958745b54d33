/* auth.c — who is asking, and how often: an API key (from an
 * "Authorization: Bearer" header, or a WebSocket auth message) checked
 * against the storage layer (only its hash is stored; a failed check is
 * logged without the key), the loopback rule (a client on 127.0.0.0/8 or
 * ::1 may go without a key unless --require-key; there a key this server
 * does not know counts as no key, since the OpenAI SDKs insist on sending
 * one: logged once per process, not counted as a failure; a revoked key is
 * still refused), and each key's requests-per-minute limit as a token
 * bucket (429 with Retry-After past it; a key without a limit of its own
 * gets the server's rate_limit). Failed keys are counted per client
 * address: past AUTH_FAIL_MAX in AUTH_FAIL_WINDOW_S seconds the address
 * gets 429 too_many_auth_failures (no key is even checked) until the
 * window ends, so keys cannot be guessed at speed. An admin key says so in
 * em_web_auth.admin, one kept out of the response cache in no_cache.
 * Service thread only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "core/grow.h"
#include "core/log.h"
#include "web/web_int.h"

#define AUTH_FAIL_MAX      10       /* failed keys from one address ... */
#define AUTH_FAIL_WINDOW_S 60.0     /* ... in this long; then 429 until it ends */
#define AUTH_FAIL_ADDRS    4096     /* addresses remembered (the oldest window goes first) */

static double now_s(void);

/* The loopback rule for a key the store does not know: 0 (no key), and the
 * first time in this process a warning (the address, never the key). */
static int unknown_as_none(const char *addr)
{
    static int said;   /* service thread only */
    if (!said) {
        said = 1;
        em_log(EM_LOG_WARN, NULL, "%s: an API key this server does not know came from loopback: accepted as no key "
               "(the loopback rule; --require-key refuses it). Said once.", addr ? addr : "?");
    }
    return 0;
}

/* e's Retry-After: wait seconds rounded up, at least 1. */
static void retry_in(em_web_error *e, double wait)
{
    e->retry_after_s = (uint32_t)(wait + 0.999);
    if (!e->retry_after_s)
        e->retry_after_s = 1;
}

/* The failure record of addr, made (or taken over from the oldest) when
 * absent and make is set; NULL otherwise. */
static struct web_auth_fail *fail_of(em_web *w, const char *addr, double now, int make)
{
    size_t oldest = 0;
    for (size_t i = 0; i < w->n_fails; i++) {
        if (!strcmp(w->fails[i].addr, addr))
            return &w->fails[i];
        if (w->fails[i].since < w->fails[oldest].since)
            oldest = i;
    }
    if (!make)
        return NULL;
    struct web_auth_fail *f;
    if (w->n_fails < AUTH_FAIL_ADDRS &&
        !em_grow((void **)&w->fails, &w->cap_fails, w->n_fails + 1, sizeof *w->fails, 16))
        f = &w->fails[w->n_fails++];
    else if (w->n_fails)
        f = &w->fails[oldest];
    else
        return NULL;
    snprintf(f->addr, sizeof f->addr, "%s", addr);
    f->since = now;
    f->n = 0;
    return f;
}

int web_auth_key(em_web *w, const char *key, int loopback, const char *addr, const char *how, em_web_auth *a,
                 em_web_error *e)
{
    memset(a, 0, sizeof *a);
    a->default_class = EM_CLASS_INTERACTIVE;
    if (!key) {
        if (loopback && !w->o.require_key)
            return 0;
        return em_web_fail(e, 401, "invalid_request_error", "missing_api_key", NULL,
                           "You didn't provide an API key. Send it %s "
                           "(make one on the server with `ember keys add NAME`).", how);
    }
    int unknown_ok = loopback && !w->o.require_key;   /* a key not known: the loopback rule */
    if (!w->o.storage && unknown_ok)
        return unknown_as_none(addr);
    if (!w->o.storage)
        return em_web_fail(e, 401, "invalid_request_error", "invalid_api_key", NULL,
                           "This server keeps no API keys.");
    double now = now_s();
    struct web_auth_fail *f = fail_of(w, addr ? addr : "", now, 0);
    if (f && now - f->since >= AUTH_FAIL_WINDOW_S) {   /* a new window */
        f->since = now;
        f->n = 0;
    }
    if (f && f->n >= AUTH_FAIL_MAX) {
        double wait = f->since + AUTH_FAIL_WINDOW_S - now;
        em_web_fail(e, 429, "rate_limit_error", "too_many_auth_failures", NULL,
                    "Too many wrong API keys from this address (%d in %.0f s). Retry in %.0f s.", AUTH_FAIL_MAX,
                    AUTH_FAIL_WINDOW_S, wait < 1 ? 1.0 : wait);
        retry_in(e, wait);
        return -1;
    }
    em_key_info ki;
    em_err err = { 0 };
    int rc = em_storage_key_verify(w->o.storage, key, &ki, &err);
    if (rc == EM_ENOENT && unknown_ok)   /* not a wrong key here: not counted */
        return unknown_as_none(addr);
    if (rc == EM_ENOENT || rc == EM_ESTATE || rc == EM_EINVAL) {
        if ((f = f ? f : fail_of(w, addr ? addr : "", now, 1)) && ++f->n == AUTH_FAIL_MAX)
            em_log(EM_LOG_WARN, NULL, "%s: %d wrong API keys in %.0f s: refused until %.0f s have passed",
                   addr ? addr : "?", AUTH_FAIL_MAX, now - f->since, AUTH_FAIL_WINDOW_S);
        return em_web_fail(e, 401, "invalid_request_error", "invalid_api_key", NULL,
                           rc == EM_ESTATE ? "This API key has been revoked." : "Incorrect API key provided.");
    }
    if (rc)
        return em_web_fail(e, 503, "server_error", NULL, NULL, "the key store failed: %s", err.msg);
    a->key_id = ki.id;
    snprintf(a->key_name, sizeof a->key_name, "%s", ki.name);
    a->default_class = ki.default_class == EM_USAGE_BACKGROUND ? EM_CLASS_BACKGROUND : EM_CLASS_INTERACTIVE;
    /* the key's own limit, else the server's (auth.rate_limit; 0: none) */
    a->rate_limit_per_min = ki.rate_limit_per_min > 0 ? ki.rate_limit_per_min : w->o.rate_limit_per_min;
    a->admin = ki.admin;   /* may read every key's usage (usage_api.c) */
    a->no_cache = !ki.response_cache;
    snprintf(a->key_prefix, sizeof a->key_prefix, "%s", ki.prefix);
    return 0;
}

int web_auth_recheck(em_web *w, const em_web_auth *a, em_web_error *e)
{
    if (!a->key_id || !w->o.storage)
        return 0;
    em_key_info ki;
    em_err err = { 0 };
    int rc = em_storage_key_get(w->o.storage, a->key_id, &ki, &err);
    if (rc == EM_ENOENT || (rc == 0 && ki.revoked_ms))
        return em_web_fail(e, 401, "invalid_request_error", "key_revoked", NULL, "This API key has been revoked.");
    if (rc == 0 && strcmp(ki.prefix, a->key_prefix) != 0)
        return em_web_fail(e, 401, "invalid_request_error", "invalid_api_key", NULL,
                           "This API key has been rotated: authenticate again with the new key.");
    if (rc)   /* the store failing is not the key's fault: it holds until the store can say */
        em_log(EM_LOG_WARN, NULL, "key %lld: cannot check it again: %s", (long long)a->key_id, err.msg);
    return 0;
}

int web_auth(em_web *w, const web_conn *c, em_web_auth *a, em_web_error *e)
{
    static const char how[] = "as \"Authorization: Bearer KEY\"";
    const char *h = c->authz;
    while (*h == ' ')
        h++;
    if (!*h)
        return web_auth_key(w, NULL, c->loopback, c->addr, how, a, e);
    if (strncasecmp(h, "Bearer ", 7) != 0) {
        memset(a, 0, sizeof *a);
        a->default_class = EM_CLASS_INTERACTIVE;
        return em_web_fail(e, 401, "invalid_request_error", "invalid_api_key", NULL,
                           "The Authorization header must be \"Bearer KEY\".");
    }
    h += 7;
    while (*h == ' ')
        h++;
    return web_auth_key(w, h, c->loopback, c->addr, how, a, e);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int web_rate_check(em_web *w, const em_web_auth *a, em_web_error *e)
{
    if (!a->key_id || a->rate_limit_per_min <= 0)
        return 0;
    double now = now_s(), cap = a->rate_limit_per_min, per_s = cap / 60.0;
    size_t i;
    for (i = 0; i < w->n_rates && w->rates[i].key_id != a->key_id; i++) {}
    if (i == w->n_rates) {
        if (em_grow((void **)&w->rates, &w->cap_rates, w->n_rates + 1, sizeof *w->rates, 16))
            return em_web_fail(e, 500, "server_error", NULL, NULL, "out of memory");
        w->rates[i].key_id = a->key_id;
        w->rates[i].tokens = cap;
        w->rates[i].t = now;
        w->n_rates++;
    }
    /* a bucket of `cap` requests refilled at cap per minute */
    double t = w->rates[i].tokens + (now - w->rates[i].t) * per_s;
    w->rates[i].tokens = t > cap ? cap : t;
    w->rates[i].t = now;
    if (w->rates[i].tokens < 1.0) {
        double wait = (1.0 - w->rates[i].tokens) / per_s;
        em_web_fail(e, 429, "rate_limit_error", "rate_limit_exceeded", NULL,
                    "Rate limit reached for this key: %d requests per minute. Retry in %.0f s.",
                    a->rate_limit_per_min, wait < 1 ? 1.0 : wait);
        retry_in(e, wait);
        return -1;
    }
    w->rates[i].tokens -= 1.0;
    return 0;
}
