/* web_int.h — what the files of web/ share: the server struct, one HTTP
 * connection's state, the growable byte buffer, the OpenAI-shaped error,
 * and the entry points each file offers the others. Private to web/. */
#ifndef EM_WEB_INT_H
#define EM_WEB_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include <jansson.h>
#include <libwebsockets.h>

#include "core/err.h"
#include "scheduler/scheduler.h"
#include "storage/storage.h"
#include "web/web.h"

/* ---- bytes --------------------------------------------------------------- */

typedef struct {
    char  *s;       /* NUL-terminated when non-NULL */
    size_t n, cap;
} em_buf;

int  em_buf_add(em_buf *b, const void *data, size_t n);   /* EM_ENOMEM */
int  em_buf_addf(em_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int  em_buf_add_json(em_buf *b, const json_t *j);        /* compact, key order kept */
void em_buf_reset(em_buf *b);                             /* n = 0, keeps the memory */
void em_buf_free(em_buf *b);

/* ---- errors in OpenAI's shape ---------------------------------------------- */

typedef struct {
    int      status;          /* HTTP status */
    const char *type;         /* "invalid_request_error", "authentication_error", ... */
    const char *code;         /* "context_length_exceeded", ... or NULL */
    char     param[64];       /* "" for none */
    char     message[512];
    uint32_t retry_after_s;   /* 0: no Retry-After header */
} em_web_error;

/* Fill e (printf-style message) and return -1. */
int em_web_fail(em_web_error *e, int status, const char *type, const char *code, const char *param,
                const char *fmt, ...) __attribute__((format(printf, 6, 7)));

/* {"error": {"message", "type", "param", "code"}} (new reference). */
json_t *em_web_error_json(const em_web_error *e);

/* How a store's failures read (the one mapping from storage codes to
 * HTTP, for conversations, files and batches alike). */
typedef struct {
    const char *name;         /* "conversation": "the conversation store failed: ..." (503) */
    const char *not_found;    /* EM_ENOENT: 404 not_found, this format of one %s (the id) */
    const char *id_param;     /* the param a 404 names (NULL: none) */
    int         state_status; /* EM_ESTATE: this status (0: a 503 like any other failure) */
    const char *state_code;   /* ... with this code (NULL: none) */
    const char *state_msg;    /* ... and this message (NULL: the store's) */
} web_store;
/* A storage failure rc (err: its message; borrowed) into e, returning -1:
 * EM_ENOENT 404 (st's message with id), EM_EINVAL 400 (param, else the
 * place err's message names before its ':'), EM_ESTATE as st says, else
 * 503 "the <name> store failed". */
int web_storage_fail(em_web_error *e, int rc, const em_err *err, const web_store *st, const char *id,
                     const char *param);

/* ---- auth ---------------------------------------------------------------- */

typedef struct {
    int64_t  key_id;          /* 0: no key (a loopback client) */
    char     key_name[64];
    em_class default_class;
    int32_t  rate_limit_per_min;
    int      admin;
    int      no_cache;        /* the key is kept out of the response cache */
    char     key_prefix[16];  /* the key's display prefix when it was checked ("" for no key) */
} em_web_auth;

/* ---- the wake-up list ------------------------------------------------------ */

/* A connection the scheduler's wake-up reaches: an HTTP one with a
 * generation running, a WebSocket with requests live. On each wake-up every
 * linked wsi is asked for a writable callback, where it pulls its events. */
typedef struct web_live {
    struct lws      *wsi;
    struct web_live *prev, *next;
    int              linked;
} web_live;

/* Link l (l->wsi set) into w's list / take it out; both idempotent. */
void web_live_link(em_web *w, web_live *l);
void web_live_unlink(em_web *w, web_live *l);

/* ---- one HTTP connection ------------------------------------------------- */

struct api_req;

enum { WEB_BODY_NONE, WEB_BODY_READ, WEB_BODY_IGNORE };
enum { EM_M_GET = 1, EM_M_POST, EM_M_DELETE, EM_M_OTHER, EM_M_PATCH, EM_M_OPTIONS };
/* "GET", "POST", "PATCH", "DELETE"; "OTHER" (static). */
const char *web_method_name(int method);

typedef struct web_conn {
    struct lws *wsi;
    em_web     *w;
    int         tx_open;           /* counted in w->open_tx: a transaction begun, not ended */
    int         method;
    char        path[512];
    char        addr[64];          /* the peer's address */
    int         loopback;
    char        authz[512];        /* the Authorization header as received */
    char        api_key[512];      /* the x-api-key header (Anthropic's clients send the key there) */
    char        if_none_match[80]; /* the If-None-Match header (assets.c) */
    char        ctype_in[256];     /* the request's Content-Type header */
    size_t      max_body;          /* this request's body bound (uploads have their own) */
    double      t_received;        /* monotonic seconds */
    char        rid[64];           /* the request id once one is made (log lines), else "" */
    /* the request body (server.c: how its framing is trusted) */
    int         body_mode;         /* WEB_BODY_NONE, _READ (Content-Length bytes to come), _IGNORE */
    em_buf      body;
    size_t      content_length;
    uintptr_t   piece_lo, piece_hi;/* where lws's last body piece lay (never read again) */
    /* the response */
    int         status;
    char        ctype[64];
    char        headers[512];      /* extra "name: value\r\n" lines */
    int         streaming;         /* no Content-Length: chunked */
    int         head_sent, complete, final_sent;
    int         routed;            /* route() ran for this transaction */
    int         body_done;         /* LWS_CALLBACK_HTTP_BODY_COMPLETION calls for it */
    int         close_after;       /* close the connection once the answer is out */
    em_buf      out;               /* bytes still to write */
    size_t      out_off;
    double      t_last_write;
    /* the generation it serves (OpenAI endpoints) */
    struct api_req *api;
    web_live    live;              /* in w->live while api is set */
} web_conn;

/* Queue a whole response (body copied) and ask for a writable callback. */
void web_respond(web_conn *c, int status, const char *ctype, const char *body, size_t len);
void web_respond_json(web_conn *c, int status, const json_t *j);
void web_respond_error(web_conn *c, const em_web_error *e);
/* Start a streamed (chunked) response; web_stream_write appends, web_stream_end finishes. */
void web_stream_begin(web_conn *c, int status, const char *ctype);
int  web_stream_write(web_conn *c, const char *data, size_t len);
void web_stream_end(web_conn *c);
/* Bytes queued and not yet written (a slow reader's backlog). */
size_t web_backlog(const web_conn *c);
/* CLOCK_MONOTONIC in microseconds (alive.c). */
long long web_now_us(void);

/* Put c on / take it off the list woken when the scheduler has events. */
void web_live_add(web_conn *c);
void web_live_remove(web_conn *c);

/* ---- batch.c: the Batch API and its runner ------------------------------------- */

typedef struct web_batches web_batches;
int      web_batch_create(em_web *w);    /* -1: out of memory */
void     web_batch_destroy(em_web *w);   /* lines in flight stop; they stay pending */
/* After each lws_service: finished lines recorded, new ones started, done
 * batches finalized. Cheap when there is nothing to do. Service thread. */
void     web_batch_step(em_web *w);
int      web_batch_route(web_conn *c);   /* /v1/batches: 0 when it answered, 1: not its path */
/* The batch families of /metrics onto b: lines run, each unfinished batch's counts. */
void     web_batch_metrics(em_web *w, em_buf *b);

/* ---- openai.c: one completions request, apart from its connection ---------- */

/* The doors a generation request comes through (its framing). */
enum { WEB_API_COMPLETIONS, WEB_API_CHAT, WEB_API_RESPONSES, WEB_API_MESSAGES };

/* One request's state beside its connection: struct api_req, web/api_req.h. */

/* web_openai_start for any door: req is a chat completions body (the
 * Responses and Messages doors translate theirs into one); kind says how
 * the answer is framed (the response cache only for completions and
 * chat). */
int     web_api_start(em_web *w, json_t *req, int kind, const em_web_auth *auth, const char *addr, const char *id,
                      const char *batch_id, struct api_req **out, em_web_error *e);
/* The tokens a chat completions body's prompt takes (its messages and
 * tools through the template), nothing run, no ledger row: 0 with *n, or
 * -1 with e filled. */
int     web_api_count(em_web *w, json_t *req, const em_web_auth *auth, uint32_t *n, em_web_error *e);

/* Check a /v1/chat/completions (chat) or /v1/completions body req
 * (borrowed) of auth and start it (batch_id non-NULL: a line of that batch,
 * in the background class, named in its ledger row, and it may not
 * stream); 0 with *out the caller's (web_openai_free), or -1 with e filled
 * and the ledger row written (em_gen_start's). e already filled on entry:
 * the door refused it (req may be NULL): only its row is written. id names
 * the request (ledger, response). */
int     web_openai_start(em_web *w, json_t *req, int chat, const em_web_auth *auth, const char *addr, const char *id,
                         const char *batch_id, struct api_req **out, em_web_error *e);
/* A POST door's start: a request id (prefix + random) into id (cap
 * bytes; also c->rid, for the log lines), the key checked (auth) and its
 * rate, then the body parsed: the request (the caller's reference), or
 * NULL with e filled (401, 429, 400 for a body that is not JSON). */
json_t *web_door_begin(web_conn *c, const char *prefix, char *id, size_t cap, em_web_auth *auth, em_web_error *e);
/* req's "model", when given, names the model served: 0, or -1 with e
 * filled (400 not a string, 404 model_not_found). */
int     web_model_check(em_web *w, const json_t *req, em_web_error *e);
/* Take what the generation produced into the whole answer: 1 once done. */
int     web_openai_collect(struct api_req *a);
/* The whole response once done: the chat.completion / text_completion
 * object (*status 200) or the error's (*status its HTTP status). New reference. */
json_t *web_openai_whole(em_web *w, struct api_req *a, int *status);
void    web_openai_cancel(struct api_req *a);
/* ---- cache.c: the response cache ------------------------------------------------ */

/* The response cache's model fingerprint, and its rows of other models dropped. */
void    web_cache_open(em_web *w);
/* A deterministic request req (borrowed) of chat or completions: its key
 * into key (EM_STORAGE_CACHE_KEY bytes); 1 with *cached (malloc'd: the
 * whole answer as stored), *finish_reason (static) and *ms (the lookup's
 * time) when the cache has it; 0 on a miss (store the answer under key
 * once whole); -1 without a cache. Counts hits and misses. */
int     web_cache_lookup(em_web *w, const json_t *req, int chat, unsigned char *key, char **cached,
                         const char **finish_reason, double *ms);
/* A whole answer (borrowed) under key; rid names the request in a warning. */
void    web_cache_store(em_web *w, const unsigned char *key, const json_t *whole, const char *rid);
void    web_openai_free(struct api_req *a);   /* accepts NULL */

/* vectors.c: POST /v1/embeddings, /v1/rerank and /rerank: 0 when it
 * answered, 1 when the path is not its. */
int web_vectors_route(web_conn *c);

/* responses.c: OpenAI's Responses API (/v1/responses[/ID[/input_items]]);
 * messages.c: Anthropic's Messages API (/v1/messages[/count_tokens]). Each
 * 0 when it answered, 1 when the path is not its. */
int web_responses_route(web_conn *c);
int web_messages_route(web_conn *c);

/* ---- multipart/form-data (multipart.c) ---------------------------------- */

typedef struct {
    char        name[64];
    char        filename[256];
    int         has_filename;
    char        ctype[96];
    const char *data;     /* into the body (borrowed) */
    size_t      len;
} web_part;

/* The boundary of a Content-Type "multipart/form-data; boundary=..." into
 * boundary (cap >= 71); -1 when ctype is not that or has no boundary. */
int web_multipart_boundary(const char *ctype, char *boundary, size_t cap);
/* Split body[0..n) into up to max parts; 0 with *n_parts, or -1 with why
 * saying what is malformed. */
int web_multipart_parse(const char *body, size_t n, const char *boundary, web_part *parts, size_t max,
                        size_t *n_parts, char *why, size_t why_cap);

/* A batch input file's lines checked (batch.c): each a JSON object of
 * custom_id (1..127 bytes, unique), method POST, url endpoint, a body
 * object (model, when given, model_id; no stream), at most 50000; data
 * borrowed. 0 with *lines (malloc'd: em_batch_lines_free; bodies compact
 * JSON) and *n, or the number of errors with v->errors (a JSON array the
 * caller made, the first 100 kept) filled and no lines. */
typedef struct {
    json_t *errors;       /* [{code, message, param, line}] */
    size_t  n_errors;
} web_batch_errors;
size_t web_batch_check_lines(const char *data, size_t len, const char *endpoint, const char *model_id,
                             em_batch_line **lines, size_t *n, web_batch_errors *v);

/* The Files API (files.c): /v1/files. 0 when it answered, 1: not its path. */
int web_files_route(web_conn *c);
/* A file in OpenAI's shape (new reference). */
json_t *web_file_json(const em_file_info *f);
/* 200 with OpenAI's page {"object": "list", "data" (stolen), "first_id",
 * "last_id" (NULL: null), "has_more"} (files.c; the batches' too). */
void    web_respond_list(web_conn *c, json_t *data, const char *first, const char *last, int more);

/* ---- the server ---------------------------------------------------------- */

struct em_web {
    em_web_opts          o;
    char                *host, *model_id, *device;
    web_batches         *batches;       /* batch.c: the Batch API's runner */
    /* openai.c: the response cache (service thread only) */
    char                 cache_model[200];   /* the model's fingerprint: rows of another are dropped */
    uint64_t             cache_hits, cache_misses, cache_stores, cache_evictions;
    struct lws_context  *ctx;
    struct lws_vhost    *vhost;
    int                  port;
    atomic_int           stop;
    atomic_int           wake;          /* the scheduler has events for someone */
    web_live            *live;          /* connections with generations running (HTTP and WebSocket) */
    /* connections per client address (lws thread only) */
    struct { int fd; int pending; char addr[64]; } *fds;   /* pending: a WebSocket awaiting auth */
    size_t               n_fds, cap_fds, n_pending;
    struct ws_chat      *ws_pending;    /* ws_chat.c: the sockets awaiting auth, oldest first */
    /* per-key request rate (lws thread only) */
    struct { int64_t key_id; double tokens, t; } *rates;
    size_t               n_rates, cap_rates;
    struct web_auth_fail { char addr[64]; double since; uint32_t n; } *fails;   /* auth.c: wrong keys per address */
    size_t               n_fails, cap_fails;
    /* counters for /metrics: under mu */
    pthread_mutex_t      mu;
    uint64_t             seq;           /* request ids */
    int                  closing;       /* under mu: em_web_destroy began; notify hooks do nothing */
    /* metrics.c, drain.c: the request counters (under mu) and draining */
    struct web_metrics  *metrics;
    atomic_int           gens;          /* generations started and not yet destroyed */
    atomic_int           draining;      /* em_web_drain was called (a signal handler may set it) */
    atomic_llong         drain_end_us;  /* the drain's deadline, monotonic microseconds; 0 before */
    lws_sorted_usec_list_t drain_sul;   /* wakes the service loop while draining */
    int                  open_tx;       /* HTTP transactions begun and not ended (service thread) */
    long long            unlisten_us;   /* drain.c: when the listening socket was shut; 0 before */
    atomic_int           drain_stop;    /* drain.c: --drain-s passed: the front doors stop what runs
                                         * and tell its clients (web_drain_stopping) */
    long long            stop_us;       /* drain.c: when drain_stop was set (service thread) */
    struct web_util     *util;          /* utilization.c: the busy-time recorder (service thread) */
    struct web_structured *structured;  /* structured.c: compiled grammars shared by requests */
    atomic_llong         beat_us;       /* alive.c: the service loop's last turn, monotonic microseconds */
    lws_sorted_usec_list_t beat_sul;    /* alive.c: keeps the loop turning while nothing happens */
    atomic_int           reload;        /* em_web_reload was called (a signal handler may set it) */
    char                *origins;       /* allowed_origins as given (origin.c; service thread) */
    char                *hosts;         /* allowed_hosts as given (origin.c; service thread) */
    struct web_cidr     *proxies;       /* trusted_proxies, parsed (proxy.c) */
    size_t               n_proxies;
    char                *tmpl;          /* the model's chat template, copied (NULL: none, ChatML) */
    size_t               tmpl_len;
    struct web_toolfmt  *toolfmt;       /* tools.c: how the template writes a tool call (read at start) */
    struct web_thinkfmt *thinkfmt;      /* reasoning.c: the tags the model thinks between (read at start) */
};

/* alive.c (service thread): start the timer that turns the loop at least
 * every half second, record a turn, cancel the timer (em_web_run's end). */
void web_alive_start(em_web *w);
void web_alive_beat(em_web *w);
void web_alive_stop(em_web *w);

/* 127.0.0.0/8, ::1 or ::ffff:127.x.x.x */
int  web_is_loopback(const char *addr);

/* proxy.c: the trusted reverse proxies and the client behind them. */
typedef struct web_cidr web_cidr;
/* Parse trusted_proxies (addresses and CIDR blocks separated by commas or
 * spaces; NULL or "": none). 0 with *out malloc'd (the caller frees it;
 * NULL when none) and *n set, else EM_EINVAL naming the bad entry. */
int  web_proxies_parse(const char *list, web_cidr **out, size_t *n, em_err *err);
/* Whether addr (text) is in one of the n blocks of v. */
int  web_proxy_trusted(const web_cidr *v, size_t n, const char *addr);
/* The client of a request from peer whose X-Forwarded-For is xff (NULL:
 * none) and that carried a Forwarded header (forwarded != 0), as
 * proxy.c's header describes: written to out (cap bytes, truncated);
 * returns whether the loopback rule applies to it. Pure: any bytes. */
int  web_forwarded_client(const web_cidr *v, size_t n, const char *peer, const char *xff, int forwarded,
                          char *out, size_t cap);
/* web_forwarded_client on wsi's headers (an HTTP request or a WebSocket
 * upgrade, while its headers are there): addr and *loopback set. */
void web_client_of(em_web *w, struct lws *wsi, const char *peer, char *addr, size_t cap, int *loopback);

/* Connections per client, in two budgets. An open connection (HTTP, or a
 * WebSocket that may chat) counts against max_conns_per_addr by its peer
 * address (a trusted proxy's connections only against the total) and
 * max_connections in all. A WebSocket awaiting its auth message counts
 * apart, against WEB_PENDING_PER_ADDR by its client address and
 * WEB_PENDING_MAX in all (ws_chat.c makes room by closing the oldest), so
 * that sockets nobody authenticated never crowd out those that did;
 * web_addr_promote moves it to the first budget once it authenticates.
 * Each: 0, or e filled (429). Release forgets fd in either (a no-op for an
 * fd never counted). Service thread only. */
#define WEB_PENDING_PER_ADDR 8
#define WEB_PENDING_MAX      64
int  web_addr_acquire(em_web *w, int fd, const char *addr, em_web_error *e);
int  web_addr_acquire_pending(em_web *w, int fd, const char *client, em_web_error *e);
int  web_addr_promote(em_web *w, int fd, const char *addr, em_web_error *e);
void web_addr_release(em_web *w, int fd);

/* ---- auth.c --------------------------------------------------------------- */

/* Who is asking: the Authorization header's key, or the loopback rule.
 * 0 with *a filled; -1 with e filled (401). */
int web_auth(em_web *w, const web_conn *c, em_web_auth *a, em_web_error *e);
/* The same rules for a key given as a string (NULL: none given) by the
 * client at addr (its failures are counted: 429 too_many_auth_failures
 * past 10 a minute; from loopback without require_key a key the server
 * does not know is no key, logged once and not counted); how says how to
 * send one, for the missing-key message ("as \"Authorization: ...\""). */
int web_auth_key(em_web *w, const char *key, int loopback, const char *addr, const char *how, em_web_auth *a,
                 em_web_error *e);
/* The key's rate limit: 0 to go on, -1 with e filled (429, Retry-After). */
int web_rate_check(em_web *w, const em_web_auth *a, em_web_error *e);
/* Whether a's key, checked a while ago (a socket's), still holds: 0 when it
 * does (or a is no key, or the key store cannot say: logged), -1 with e
 * filled (401 key_revoked; invalid_api_key when it was rotated since). */
int web_auth_recheck(em_web *w, const em_web_auth *a, em_web_error *e);

/* ---- structured.c: grammars for structured output ------------------------------ */

typedef struct web_structured web_structured;
typedef struct web_grammar web_grammar;

int  web_structured_create(web_structured **out);   /* EM_ENOMEM */
/* Drops the registry's grammars; those still used by requests live on. */
void web_structured_destroy(web_structured *s);
/* The grammar req (borrowed) asks for — OpenAI's response_format
 * (json_object, json_schema), or ember's "grammar" (GBNF) or "regex" — from
 * the registry or compiled now: *out a reference the caller drops with
 * web_grammar_unref, NULL when it asks for none. -1 with e filled (400
 * naming the parameter and, for GBNF, line and column; 500). */
int  web_structured_get(em_web *w, const json_t *req, web_grammar **out, em_web_error *e);
/* Whether req (borrowed; NULL: no) asks for structure at all: a
 * response_format other than text, a grammar or a regex (checked or not). */
int  web_structured_asked(const json_t *req);
/* The same for GBNF text (taken: text is freed here, whatever happens; len
 * bytes) that param came from, for the errors. */
int  web_structured_text(em_web *w, char *text, size_t len, const char *param, web_grammar **out,
                         em_web_error *e);
void web_grammar_unref(web_grammar *g);   /* accepts NULL; any thread */
/* A new matcher of g at its start as a scheduler constraint (*out's
 * destroy drops it and a reference to g: the scheduler's once submitted,
 * else web_constraint_free). trigger (borrowed, copied; NULL: none): the
 * grammar applies only once the generated text contains it, from the
 * trigger's first byte on (a tool call in free text); before that any
 * token may come and the output may end. start (with a trigger; NULL or
 * "": none): the grammar applies also, from the output's first byte, when
 * the output begins with a bare call of that key (web_tools_bare_start). */
int  web_grammar_constraint(web_grammar *g, uint32_t n_vocab, const char *trigger, const char *start,
                            em_constraint *out, em_err *err);
void web_constraint_free(em_constraint *c);
/* A reasoning budget as a constraint: the output's think block (tags f,
 * borrowed and copied; inside: the prompt opened it) may take budget
 * tokens, then its close tag is forced and the output goes on free. inner
 * (taken, emptied; may be empty) is the request's other constraint, asked
 * and told of every token as well. *out's destroy frees it all. */
struct web_thinkfmt;
int  web_budget_constraint(em_web *w, const struct web_thinkfmt *f, int inside, uint32_t budget, uint32_t n_vocab,
                           em_constraint *inner, em_constraint *out, em_err *err);

/* ---- gen.c: the one generation path ---------------------------------------- */

#define EM_GEN_MAX_N 8
#define EM_GEN_MAX_BIAS 300   /* logit_bias entries, as OpenAI allows */

typedef struct em_gen em_gen;

typedef struct {
    const json_t *messages;        /* chat: rendered through the model's template, or */
    const char   *prompt;          /* completions: the text as given */
    size_t        prompt_len;
    uint32_t      n;               /* choices, 1..EM_GEN_MAX_N */
    int64_t       max_tokens;      /* -1: up to the context */
    em_sample_params sample;       /* its logit_bias points into bias[] */
    em_logit_bias bias[EM_GEN_MAX_BIAS];
    const char   *stop[EM_MAX_STOP];
    em_class      cls;
    int           ignore_eos;
    const json_t *structure;       /* the request object its response_format / grammar / regex are read
                                    * from (borrowed; NULL: none) */
    int           logprobs;        /* each token's log-probability (em_gen_take_logprobs) */
    uint32_t      top_logprobs;    /* and this many alternatives (<= 20) */
    int32_t       speculate;       /* em_req_params.speculate */
    int           spec_method;     /* em_req_params.spec_method */
    const em_web_auth *auth;
    const char   *client_addr;
    const char   *request_id;      /* for the ledger */
    const char   *batch_id;        /* the ledger row's batch (a batch line), or NULL */
    const char   *param_name;      /* "messages" or "prompt", for errors */
    const struct web_tools *tools; /* chat: the request's tools (tools.h; NULL or none: no tools) */
    const json_t *template_vars;   /* chat: more variables for the template (borrowed; NULL: none):
                                    * chat_template_kwargs, reasoning_effort */
    const char   *endpoint;        /* the door, for the ledger: "chat.completions", "responses", ... */
    uint32_t      reasoning_budget; /* chat: the think block's tokens at most, then it is closed (0: no bound) */
} em_gen_params;

/* The one start of every generation request, whatever its door: render,
 * tokenize, check the context, submit every choice; 0 with *out the
 * caller's (em_gen_destroy). A door calls it exactly once per request, also
 * for one it refused itself (e already filled: auth, rate limit, a bad
 * body; p then needs only request_id, auth, client_addr, cls, batch_id):
 * on every failure it returns -1 with e filled and has written the
 * request's one ledger row (rejected for 401/403/429/503, else failed; a
 * 401's row names no key). */
int  em_gen_start(em_web *w, const em_gen_params *p, em_gen **out, em_web_error *e);
/* The tokens p's prompt takes (its messages through the template with its
 * tools, or its completion prompt), nothing run and no ledger row: 0 with
 * *n, or -1 with e filled (400 for a prompt past the context or one the
 * template refuses). */
int  em_gen_count_prompt(em_web *w, const em_gen_params *p, uint32_t *n, em_web_error *e);
/* The ledger row of a request answered from the response cache: completed,
 * response_cached, no tokens, server_ms (the lookup) as its TTFT. */
void em_gen_cached(em_web *w, const char *request_id, const char *endpoint, const em_web_auth *auth,
                   const char *client_addr, em_class cls, const char *batch_id, const char *finish_reason,
                   double server_ms);

/* For a request that runs beside em_gen (embeddings, rerank: vectors.c;
 * its refusals still go through em_gen_start with e filled): its ledger
 * row begun from p's request_id, batch_id, client_addr, auth, cls and
 * endpoint (received now); em_gen_row writes a row (the admitted one, then
 * the final one, which /metrics counts and the log shows; finished_ms
 * set if still 0). em_gen_notify is the scheduler requests' notify hook
 * (user: the em_web): it wakes the service loop. */
void em_gen_row_begin(em_web *w, const em_gen_params *p, em_usage_record *r);
void em_gen_row(em_web *w, em_usage_record *r);
void em_gen_notify(void *user);

/* Move what the scheduler produced into the choices' text: appends each
 * choice's new text to delta[i] (caller's buffers, n of them). Returns 1
 * once every choice is done. Once the drain's time is up (--drain-s) it
 * cancels the request: see em_gen_drain_error. */
int  em_gen_pump(em_gen *g, em_buf *delta);
/* Choice i's tool-call deltas taken by em_gen_pump since the last call, in
 * OpenAI's streamed shape ([{"index", "id", "type", "function": {"name",
 * "arguments"}}] for a call's start, [{"index", "function": {"arguments"}}]
 * for more of its arguments): a new array (the caller's), NULL when none
 * came. */
json_t *em_gen_take_tool_deltas(em_gen *g, uint32_t i);
/* Choice i's whole tool calls once it is done ([{"id", "type", "function":
 * {"name", "arguments"}}], arguments a JSON text that parses and validates
 * against the tool's schema; a call cut off by max_tokens is not among
 * them), borrowed from g; NULL when it made none. */
const json_t *em_gen_tool_calls(const em_gen *g, uint32_t i);
/* Choice i's reasoning so far (the think block its answer began with, a
 * harmony model's analysis channel; never in its text): the whole (g's,
 * valid until the next pump) and its length; what came since the last
 * take appended to out (the caller's buffer); the tokens all choices spent
 * on it. */
const char *em_gen_reasoning(const em_gen *g, uint32_t i, size_t *len);
void        em_gen_take_reasoning(em_gen *g, uint32_t i, em_buf *out);
uint32_t    em_gen_reasoning_tokens(const em_gen *g);
/* Choice i's whole answer so far (all em_gen_pump took; g's, valid until the
 * next pump) and its length. */
const char *em_gen_text(const em_gen *g, uint32_t i, size_t *len);
/* 1 with e filled (503 server_shutting_down, Retry-After 1) when the
 * request is done because the drain stopped it: its client is told so
 * instead of getting a cut-off answer as if whole; else 0. */
int  em_gen_drain_error(const em_gen *g, em_web_error *e);
/* Once every choice is done: 1 with e filled when the request did not end
 * as an answer — a choice failed (500 "generation failed: ...") or the
 * drain stopped it (em_gen_drain_error's 503); else 0. */
int  em_gen_failed(const em_gen *g, em_web_error *e);

/* The log-probability entries of choice i's tokens taken by em_gen_pump
 * since the last call, as a new JSON array (the caller's reference) of
 * OpenAI's chat shape {"token", "logprob", "bytes", "top_logprobs": [{"token",
 * "logprob", "bytes"}]} ("token" is the piece's text, or "bytes:\\xNN..." for a
 * piece that is not whole UTF-8); an empty array when none came; NULL when
 * the request did not ask for logprobs. */
json_t *em_gen_take_logprobs(em_gen *g, uint32_t i);

/* Ask every choice to stop: a DONE (cancelled) follows through em_gen_pump. */
void        em_gen_cancel(em_gen *g);
/* The first choice's place in its class's queue (em_sched_queue_position):
 * 0 once it runs or is done. */
uint32_t    em_gen_queue_position(const em_gen *g);

uint32_t    em_gen_n(const em_gen *g);
int         em_gen_choice_done(const em_gen *g, uint32_t i);
em_finish   em_gen_finish(const em_gen *g, uint32_t i);         /* compare these, not the names */
const char *em_gen_finish_reason(const em_gen *g, uint32_t i);   /* "stop", "length", ... (for the wire) */
const char *em_gen_error(const em_gen *g);                      /* NULL unless a choice failed */
/* Which of the request's stop strings ended choice i (its index), -1 when
 * none did (an end-of-text token, max_tokens, a grammar's end). */
int         em_gen_stop_index(const em_gen *g, uint32_t i);
void        em_gen_usage(const em_gen *g, uint32_t *prompt, uint32_t *cached, uint32_t *completion);
/* Queue ms, TTFT ms and tokens/s of the first choice (after done). */
void        em_gen_timings(const em_gen *g, double *queue_ms, double *ttft_ms, double *tok_s);

/* Cancel what still runs, write the final ledger row, free. Accepts NULL. */
void em_gen_destroy(em_gen *g);

/* ---- openai.c --------------------------------------------------------------- */

/* Route c's request (method, path, body) if it is one of /v1/...; returns 0
 * when it took it, 1 when the path is not its. */
int  web_openai_route(web_conn *c);
/* ---- params.c: the parameters of every front door ------------------------------ */

/* The doors a parameter may come through (params.c's one table). */
enum { WEB_DOOR_COMPLETIONS = 1, WEB_DOOR_CHAT = 2, WEB_DOOR_WS = 4 };
/* The names in obj (a request body, or a WebSocket chat's params; borrowed)
 * for a door: one that exists there but is not built is refused by name
 * unless its value changes nothing (tools: [], echo: false, best_of: 1,
 * ...); over HTTP other unknown names are ignored (OpenAI's clients send
 * fields of their own), over the WebSocket refused. 0, or -1 with e filled
 * (400 unsupported_parameter, param naming it). */
int  web_params_check(const json_t *obj, unsigned door, em_web_error *e);
/* obj's field name, when present and not null: a number in [lo, hi], an
 * integer in [lo, hi], a boolean, into *out; 0, or -1 with e filled (400). */
int  web_want_number(json_t *obj, const char *name, double lo, double hi, double *out, em_web_error *e);
int  web_want_int(json_t *obj, const char *name, long long lo, long long hi, long long *out, em_web_error *e);
int  web_want_bool(json_t *obj, const char *name, int *out, em_web_error *e);
/* The generation parameters both front doors take, named as in the OpenAI
 * API: temperature, top_p, top_k, min_p, seed, max_tokens, stop,
 * presence_penalty, frequency_penalty, repetition_penalty, logit_bias,
 * logprobs (true/false as in chat, or a count of alternatives as in
 * completions), top_logprobs, speculative, ignore_eos, priority (the key's class unless
 * named; a background-only key cannot ask for interactive). Fills gp's
 * sample, bias, max_tokens, stop (pointing into obj: keep obj alive while gp
 * is used), logprobs, top_logprobs, ignore_eos and cls; leaves the rest. 0,
 * or -1 with e filled (400, 403). */
int  web_gen_params(json_t *obj, const em_web_auth *auth, em_gen_params *gp, em_web_error *e);
/* priority: the key's class unless obj names one ("interactive",
 * "background"; a background-only key cannot ask for interactive): 0 with
 * *out, or -1 with e filled (400, 403). web_gen_params reads it so. */
int  web_want_class(const json_t *obj, const em_web_auth *auth, em_class *out, em_web_error *e);
/* messages -> a new array of {role, content} with content a string (text
 * parts joined), roles the templates know; NULL with e filled (400). */
json_t *web_messages_check(json_t *msgs, em_web_error *e);
/* A request id: prefix + 16 random characters (cap bytes, NUL included). */
void web_new_id(em_web *w, const char *prefix, char *out, size_t cap);
/* A writable callback for a connection with c->api: move events to the wire. */
void web_openai_pump(web_conn *c);
/* The connection went away. */
void web_openai_close(web_conn *c);

/* ---- metrics.c: /metrics, /healthz and the counters behind them ------------ */

int  web_metrics_create(em_web *w);      /* EM_ENOMEM */
void web_metrics_destroy(em_web *w);     /* accepts a server without them */
/* Count one request's final ledger row (any status but admitted); any thread.
 * gen.c calls it wherever it writes one, so every front door is counted. */
void web_metrics_count(em_web *w, const em_usage_record *r);
/* Route GET /metrics, /healthz, /api/usage and /api/utilization: 0 when it
 * took the request, 1 when the path is not its. */
int  web_metrics_route(web_conn *c);

/* ---- usage_api.c: GET /api/usage, and the query strings of /api/... ------------ */

void web_usage_api(web_conn *c);

#define WEB_ARG_MAX  256   /* one "name=value", decoded */
#define WEB_MAX_ARGS 16
/* Read c's query string: the value of each name=value whose name is
 * names[i] (n of them) into vals[i], and seen[i] = 1 (0 for those absent).
 * An unknown, repeated, valueless or too long parameter: -1 with e filled
 * (400 naming it). */
int web_query_args(web_conn *c, const char *const *names, size_t n, char (*vals)[WEB_ARG_MAX], int *seen,
                   em_web_error *e);
/* since and until (NULL: not given) as em_storage_parse_time reads them (an
 * until date includes that day) into *since_ms, *until_ms (left alone when
 * not given); until must be later. -1 with e filled (400 naming it). */
int web_query_window(const char *since, const char *until, int64_t *since_ms, int64_t *until_ms, em_web_error *e);

/* ---- utilization.c: the busy-time recorder and GET /api/utilization ------------ */

/* Start recording (after the vhost exists; nothing without storage): the
 * first span starts now. EM_ENOMEM. */
int  web_util_start(em_web *w);
/* Record the last span and stop (before lws_context_destroy); accepts a
 * server that never started. */
void web_util_stop(em_web *w);
void web_util_api(web_conn *c);

/* ---- drain.c: stopping gently ----------------------------------------------------- */

/* While draining: -1 with e filled (503 server_draining, Retry-After); else 0. */
int      web_drain_refuse(em_web *w, em_web_error *e);
/* Seconds a client should wait before retrying while draining (>= 1). */
uint32_t web_drain_retry_s(em_web *w);
/* Whether the drain's time is up: a front door then cancels its running
 * generations (once) and, when they end cancelled, answers their clients
 * with the error web_drain_stopped fills instead of a cut-off answer. */
int  web_drain_stopping(em_web *w);
/* The error for an answer stopped by the drain after completion_tokens
 * tokens: 503 server_error / server_shutting_down, Retry-After 1. */
void web_drain_stopped(em_web *w, uint32_t completion_tokens, em_web_error *e);
/* The service loop, after each lws_service: 1 when em_web_run should return
 * (drained, or the drain's time is up: em_web_destroy cancels the rest). */
int      web_drain_step(em_web *w);

/* ---- origin.c: which browser pages may call ------------------------------------ */

/* The request's Host header against the server's names and allowed_hosts
 * (0: it may go on; no Host header: not a browser), else -1 with e filled
 * (403 host_not_allowed). */
int  web_host_check(em_web *w, struct lws *wsi, em_web_error *e);
/* web_host_check, then the request's Origin header against the server's
 * own (the Host header) and allowed_origins: 0 when it may go on (no Origin
 * header: not a browser's cross-site call), else -1 with e filled (403
 * host_not_allowed or origin_not_allowed). */
int  web_origin_check(em_web *w, struct lws *wsi, em_web_error *e);
/* CORS for a request web_origin_check let through: when its Origin is
 * another site's that allowed_origins lists, the headers that let that
 * page read the answer go into c->headers (Access-Control-Allow-Origin:
 * that origin, Vary: Origin; for a preflight, OPTIONS, the methods and
 * headers allowed too). Returns 1 for a preflight, which the caller
 * answers 204; 0 otherwise. The server's own pages need none of it. */
int  web_cors(web_conn *c);
/* Refuse a WebSocket upgrade whose origin is not allowed: writes the 403
 * (JSON error) itself; returns 1 when it did (the upgrade is then refused),
 * 0 to let it proceed. */
int  web_origin_upgrade(em_web *w, struct lws *wsi);

/* ---- ws_chat.c: the WebSocket protocol ember.chat.v1 (docs/protocol.md) ------- */

#define WEB_WS_PROTOCOL "ember.chat.v1"
#define WEB_WS_CHUNK    (16 * 1024)   /* bytes per receive callback and per send */

/* The protocol's lws callback: GET /ws only. Its per-session data is one
 * pointer (struct ws_chat *), allocated when the socket opens and freed,
 * its requests cancelled, when it closes. */
int  web_ws_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len);

/* ---- api.c: the conversations API --------------------------------------------- */

/* Route /api/conversations[/ID] (GET list, GET one, DELETE one); returns 0
 * when it took c's request, 1 when the path is not its. */
int  web_api_route(web_conn *c);

/* ---- assets.c: the embedded browser UI -------------------------------------- */

/* Route GET /, /dashboard and /static/...: 0 when it took the request, 1
 * when the path is not its. */
int web_assets_route(web_conn *c);

#endif
