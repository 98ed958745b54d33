/* web.h — `ember serve`'s front door: one libwebsockets service thread that
 * serves HTTP and WebSocket on one port — the OpenAI-compatible API
 * (/v1/chat/completions, /v1/completions, /v1/models; plain and SSE;
 * /v1/embeddings and /v1/rerank), the
 * WebSocket chat protocol ember.chat.v1 (/ws), the conversations and usage
 * API (/api/...), /metrics and /healthz — over a running scheduler, with
 * API keys and the usage ledger from the storage layer.
 *
 * Threads. em_web_run() is the lws service loop: the only thread that
 * touches sockets. The scheduler thread wakes it through the requests'
 * notify hook (lws_cancel_service); em_web_stop() may be called from any
 * thread or a signal handler. web/ never touches Vulkan.
 *
 * Ownership. em_web_create borrows everything in its options (scheduler,
 * model, tokenizer, storage): they must outlive the em_web. */
#ifndef EM_WEB_H
#define EM_WEB_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

struct em_sched;
struct em_model;
struct em_tokenizer;
struct em_storage;
struct em_kv;

typedef struct em_web em_web;

struct em_selftest_report;
struct json_t;

/* How the server's boot went: its stages in order with their durations,
 * and the known-answer self-test's report (core/gpu/selftest.h). /healthz and
 * /metrics show them. */
#define EM_WEB_BOOT_MAX 8
typedef struct {
    struct { const char *name; double ms; } stage[EM_WEB_BOOT_MAX];   /* names static */
    uint32_t n;
    const struct em_selftest_report *selftest;   /* NULL: none ran */
} em_web_boot;

typedef struct {
    const char *host;               /* listen address; "0.0.0.0" / "::": every interface */
    int         port;               /* 0: any free port (see em_web_port) */
    struct em_sched           *sched;
    const struct em_model     *model;
    struct em_tokenizer       *tok;         /* em_web_create shows the control tokens a tool
                                             * call's format writes (em_tokenizer_show) */
    struct em_storage         *storage;     /* ledger, keys, conversations; NULL: none */
    const char *model_id;           /* the name /v1/models lists and requests name */
    const char *device;             /* device description for /healthz and /metrics */
    uint32_t    n_ctx;              /* positions per sequence */
    uint32_t    embed_max_tokens;   /* tokens one embedding or rerank sequence may have (an encoder's:
                                       its positions and one step's tokens); 0: n_ctx */
    uint32_t    parallel;           /* running sequences at most (for /healthz) */
    int         require_key;        /* loopback clients need a key too */
    size_t      max_body;           /* request body bytes (413 past it) */
    size_t      max_upload;         /* a POST /v1/files body's bytes (413 past it; default 64 MiB) */
    int64_t     response_cache_bytes;   /* the response cache's bound; 0 (the default): off */
    size_t      max_ws_message;     /* WebSocket message bytes (close 1009 past it) */
    uint32_t    max_conns_per_addr; /* connections from one client address */
    uint32_t    max_connections;    /* in all */
    double      ping_s;             /* an SSE stream silent this long gets ": ping" */
    double      ws_auth_timeout_s;  /* a WebSocket that has not authenticated by then is closed (1008) */
    uint32_t    drain_s;            /* em_web_drain: how long running requests may take to finish */
    const char *tls_cert, *tls_key; /* PEM files: HTTPS and WSS on the port (both or neither; NULL or
                                       "": plain HTTP) */
    const char *allowed_origins;    /* browser origins allowed besides the server's own, separated by
                                       commas or spaces ("https://app.example:8443"); "*": any; NULL or
                                       "": none (em_web_create copies it) */
    const char *allowed_hosts;      /* Host names this server answers besides its addresses, localhost,
                                       the machine's host name and --host, separated by commas or spaces;
                                       "*": any (no DNS-rebinding guard); copied like allowed_origins */
    const char *trusted_proxies;    /* reverse proxies whose X-Forwarded-For names the client: addresses
                                       and CIDR blocks separated by commas or spaces ("10.0.0.2,
                                       fd00::/8"); NULL or "": none (web/proxy.c; em_web_create parses
                                       it: EM_EINVAL naming a bad entry) */
    int32_t     rate_limit_per_min; /* requests per minute of a key without a limit of its own; 0: none */
    void      (*on_reload)(void *ctx, em_web *w);   /* em_web_reload's work, on the service thread */
    void       *reload_ctx;         /* passed to on_reload, never dereferenced */
    const em_web_boot *boot;        /* borrowed, outlives the server; NULL: not shown */
} em_web_opts;

/* Defaults: 127.0.0.1:8080, 4 MiB bodies, 1 MiB WebSocket messages,
 * 64 connections per address, 1024 in all, pings after 10 s, 10 s for a
 * WebSocket to authenticate, 30 s to drain. */
void em_web_opts_init(em_web_opts *o);

/* Create the server and bind its port (EM_EIO naming host:port when the
 * address is taken or not local). *out is the caller's: em_web_destroy. */
int  em_web_create(const em_web_opts *o, em_web **out, em_err *err);

/* The port bound (useful with port 0). */
int  em_web_port(const em_web *w);

/* Serve until em_web_stop. Returns 0, or a negative code if the service
 * loop failed. */
int  em_web_run(em_web *w);

/* Ask em_web_run to return (async-signal-safe: sets a flag, wakes the loop). */
void em_web_stop(em_web *w);

/* Drain (async-signal-safe, like em_web_stop): refuse new generation
 * requests (503 server_draining with Retry-After; /healthz answers 503),
 * let the running ones finish, and have em_web_run return once none is
 * left or drain_s seconds have passed (em_web_destroy then cancels the
 * rest). em_web_stop still stops at once. */
void em_web_drain(em_web *w);

/* The service loop's last turn, CLOCK_MONOTONIC microseconds: em_web_run
 * turns at least every half second even when nothing happens, so a value
 * that stops moving means the lws thread is stuck (the systemd watchdog,
 * firmware/notify.h, stops its pings then). Any thread. */
long long em_web_heartbeat_us(em_web *w);

/* SIGHUP (async-signal-safe, like em_web_stop): have the service loop call
 * o.on_reload(o.reload_ctx, w) once, on its own thread. Without on_reload,
 * nothing. */
void em_web_reload(em_web *w);

/* What a reload may change while serving: require_key, rate_limit_per_min,
 * allowed_origins, allowed_hosts and trusted_proxies (copied) take effect
 * for the next request (a WebSocket already open keeps its client). Service
 * thread only (from on_reload). EM_ENOMEM, or EM_EINVAL for a bad
 * trusted_proxies entry (named), changes nothing. */
int  em_web_update(em_web *w, int require_key, int32_t rate_limit_per_min, const char *allowed_origins,
                   const char *allowed_hosts, const char *trusted_proxies, em_err *err);

/* Close every connection (cancelling their requests) and free. Accepts NULL. */
void em_web_destroy(em_web *w);

#endif
