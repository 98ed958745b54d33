/* ws_chat.c — the WebSocket chat protocol ember.chat.v1 on GET /ws
 * (docs/protocol.md): one JSON text frame per message. It authenticates the
 * socket (an auth message, under web_auth's rules), parses chat requests
 * (the whole conversation; or one new message for a stored one, under its
 * current leaf or under the message parent_id names, which is how an edit
 * branches off; or a regenerate, a new answer to a stored user message;
 * parameters checked by the same function as the HTTP API), hands each to
 * the one generation path (gen.c), and frames what comes back: queued (with
 * the queue position, sent again as it changes), token (all the text that
 * arrived since the last frame: a slow reader gets fewer, larger frames),
 * done (usage, timings, the conversation and the ids of the messages it
 * stored) or error. Each finished exchange is stored in a conversation of
 * the socket's key, as a branch of its message tree (storage.h).
 *
 * Only the service thread runs here. Frames wait in a per-socket queue and
 * go out in LWS_CALLBACK_SERVER_WRITEABLE, at most WEB_WS_CHUNK bytes per
 * write; events are pulled from the scheduler only when that queue is
 * empty, and reading from a client whose queue grows past WS_BACKLOG_MAX
 * stops until it drains, so no buffer grows without bound. A socket that
 * closes cancels all its requests (their KV blocks go back at once). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "web/web_int.h"

#define WS_MAX_REQUESTS  8             /* requests in flight per socket */
#define WS_BACKLOG_MAX   (256 * 1024)  /* queued output bytes before reading stops */
#define WS_MAX_AUTH_FAIL 3             /* failed auth messages before the socket is closed */
#define WS_ID_MAX        256           /* bytes of a string id */
#define WS_TITLE_MAX     60            /* bytes of a conversation title */
#define WS_RECHECK_S     2.0           /* a socket's key is checked again this often (revoked, rotated) */

typedef struct ws_frame {
    struct ws_frame *next;
    size_t           len, off;         /* bytes of text, bytes sent */
    unsigned char    buf[];            /* LWS_PRE + len */
} ws_frame;

typedef struct {
    json_t     *id;                    /* the client's id, echoed */
    char        request_id[64];        /* the ledger's */
    em_gen     *gen;
    em_buf      delta;                 /* text not framed yet */
    uint32_t    position;              /* the queue position last sent */
    int64_t     key_id;                /* the conversation's owner */
    int64_t     conv_id;               /* 0: a new conversation, created when stored */
    int64_t     parent_id;             /* where to_store goes: a message id, EM_STORAGE_ROOT or _LEAF */
    json_t     *to_store;              /* {role, content} to store before the answer (a chain) */
} ws_req;

typedef struct ws_chat {
    em_web     *w;
    struct lws *wsi;
    char        addr[64];              /* the client's (proxy.c) */
    char        peer[64];              /* the socket's peer */
    int         loopback;
    struct ws_chat *pend_prev, *pend_next;   /* in w->ws_pending while it awaits auth */
    int         pend_linked;
    int         authed;                /* may chat */
    int         key_gone;              /* its key was revoked or rotated: closing, nothing stored */
    int         auth_fails;
    em_web_auth auth;
    em_buf      rx;                    /* the message being received */
    em_buf      think;                 /* a request's reasoning taken for its frame (ws_pump) */
    size_t      rx_n;                  /* its bytes so far (binary ones are not kept) */
    int         rx_open, rx_binary;
    ws_frame   *q_head, *q_tail;
    size_t      q_bytes;
    int         rx_paused;
    int         close_code;            /* close once the queue is out (0: no) */
    ws_req     *req[WS_MAX_REQUESTS];
    uint32_t    n_req;
    web_live    live;                  /* in w->live while n_req > 0 */
} ws_chat;

/* ---- frames out ------------------------------------------------------------- */

/* Queue j (taken) as one text frame and ask for a writable callback. */
static void ws_send(ws_chat *c, json_t *j)
{
    char *s = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6)) : NULL;
    json_decref(j);
    if (!s)
        return;   /* out of memory: the frame is lost, the socket goes on */
    size_t n = strlen(s);
    ws_frame *f = malloc(sizeof *f + LWS_PRE + n);
    if (f) {
        f->next = NULL;
        f->len = n;
        f->off = 0;
        memcpy(f->buf + LWS_PRE, s, n);
        if (c->q_tail)
            c->q_tail->next = f;
        else
            c->q_head = f;
        c->q_tail = f;
        c->q_bytes += n;
        if (c->q_bytes > WS_BACKLOG_MAX && !c->rx_paused) {
            c->rx_paused = 1;   /* a client that sends and never reads */
            lws_rx_flow_control(c->wsi, 0);
        }
    }
    free(s);
    lws_callback_on_writable(c->wsi);
}

static json_t *id_or_null(const json_t *id)
{
    return id ? json_deep_copy(id) : json_null();
}

static void ws_error(ws_chat *c, const json_t *id, const char *code, const char *param, uint32_t retry_after_s,
                     const char *fmt, ...) __attribute__((format(printf, 6, 7)));

static void ws_error(ws_chat *c, const json_t *id, const char *code, const char *param, uint32_t retry_after_s,
                     const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    em_err_escape(msg, sizeof msg);
    json_t *j = json_pack("{s:s, s:o, s:s, s:s}", "type", "error", "id", id_or_null(id), "code", code, "message",
                          msg);
    if (j && param && *param)
        json_object_set_new(j, "param", json_string(param));
    if (j && retry_after_s)
        json_object_set_new(j, "retry_after_s", json_integer(retry_after_s));
    ws_send(c, j);
}

/* An HTTP-shaped error as an error frame: its code, or one named for its status. */
static void ws_error_web(ws_chat *c, const json_t *id, const em_web_error *e)
{
    const char *code = e->code;
    if (!code)
        code = e->status == 400 ? "invalid_request"
             : e->status == 401 ? "unauthorized"
             : e->status == 403 ? "forbidden"
             : e->status == 404 ? "not_found"
             : e->status == 429 ? "rate_limited"
             : e->status == 503 ? "busy"
                                : "server_error";
    ws_error(c, id, code, e->param, e->retry_after_s, "%s", e->message);
}

static void ws_ready(ws_chat *c)
{
    em_web *w = c->w;
    json_t *j = json_pack("{s:s, s:s, s:s, s:I, s:{s:I, s:I}, s:o}", "type", "ready", "model", w->model_id,
                          "device", w->device, "context", (json_int_t)w->o.n_ctx, "limits", "max_message_bytes",
                          (json_int_t)w->o.max_ws_message, "max_requests", (json_int_t)WS_MAX_REQUESTS, "key",
                          c->auth.key_id ? json_string(c->auth.key_name) : json_null());
    if (em_model_hparams(w->o.model)->encoder)   /* (only then: every chat is refused) */
        json_object_set_new(j, "generates_text", json_false());
    ws_send(c, j);
}

/* One writable callback: the head frame's next piece. -1 closes the socket. */
static int ws_write(ws_chat *c)
{
    ws_frame *f = c->q_head;
    size_t n = f->len - f->off;
    if (n > WEB_WS_CHUNK)
        n = WEB_WS_CHUNK;
    int last = f->off + n == f->len;
    int proto = f->off == 0 ? LWS_WRITE_TEXT : LWS_WRITE_CONTINUATION;
    if (!last)
        proto |= LWS_WRITE_NO_FIN;
    /* lws writes its header into the LWS_PRE bytes before the data: for a
     * later piece those hold text already sent */
    if (lws_write(c->wsi, f->buf + LWS_PRE + f->off, n, (enum lws_write_protocol)proto) < (int)n)
        return -1;
    f->off += n;
    if (last) {
        c->q_head = f->next;
        if (!c->q_head)
            c->q_tail = NULL;
        c->q_bytes -= f->len;
        free(f);
        if (c->rx_paused && c->q_bytes < WS_BACKLOG_MAX / 2) {
            c->rx_paused = 0;
            lws_rx_flow_control(c->wsi, 1);
        }
    }
    return 0;
}

/* ---- requests --------------------------------------------------------------- */

static void req_free(ws_req *r)
{
    if (!r)
        return;
    em_gen_destroy(r->gen);   /* cancels what still runs; writes the final ledger row */
    json_decref(r->id);
    json_decref(r->to_store);
    em_buf_free(&r->delta);
    free(r);
}

static void req_remove(ws_chat *c, uint32_t i)
{
    req_free(c->req[i]);
    c->req[i] = c->req[--c->n_req];
    c->req[c->n_req] = NULL;
    if (!c->n_req)
        web_live_unlink(c->w, &c->live);
}

static int find_req(const ws_chat *c, const json_t *id)
{
    for (uint32_t i = 0; i < c->n_req; i++)
        if (json_equal(c->req[i]->id, id))
            return (int)i;
    return -1;
}

/* The title of a new conversation: its first user message, on one line,
 * cut at a character boundary to at most WS_TITLE_MAX bytes. */
static void make_title(const json_t *msgs, char *out, size_t cap)
{
    out[0] = 0;
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        if (strcmp(json_string_value(json_object_get(m, "role")), "user") != 0)
            continue;
        const char *t = json_string_value(json_object_get(m, "content"));
        size_t n = strlen(t), k = 0;
        while (n && (*t == ' ' || *t == '\n' || *t == '\r' || *t == '\t')) {
            t++;
            n--;
        }
        if (n > WS_TITLE_MAX) {
            n = WS_TITLE_MAX;
            while (n && ((unsigned char)t[n] & 0xC0) == 0x80)   /* not inside a character */
                n--;
        }
        for (; k < n && k + 1 < cap; k++)
            out[k] = t[k] == '\n' || t[k] == '\r' || t[k] == '\t' ? ' ' : t[k];
        while (k && out[k - 1] == ' ')
            k--;
        out[k] = 0;
        return;
    }
}

/* Store r's exchange: a new conversation (titled) or the one named, the
 * messages to_store and then the answer (its token count and finish
 * reason) as one chain under r->parent_id, in one transaction. The
 * conversation's id, or 0 when nothing was stored (storing switched off, no
 * output at all, a failure, which is logged); *user_id and *answer_id get the ids
 * of the user message sent (the last one stored before the answer, when it
 * is a user's) and of the answer, 0 when not stored. */
static int64_t store_exchange(ws_chat *c, ws_req *r, uint32_t completion_tokens, em_finish finish,
                              int64_t *user_id, int64_t *answer_id)
{
    em_storage *st = c->w->o.storage;
    *user_id = *answer_id = 0;
    size_t answer_len, reasoning_len;
    const char *answer = em_gen_text(r->gen, 0, &answer_len);
    em_gen_reasoning(r->gen, 0, &reasoning_len);
    if (!st || !r->to_store || (!answer_len && !reasoning_len))   /* (a model that only thought: its empty answer) */
        return 0;
    em_err err = { 0 };
    int64_t conv = r->conv_id;
    int rc = 0;
    size_t n = json_array_size(r->to_store) + 1;
    em_message_new *msgs = calloc(n, sizeof *msgs);
    int64_t *ids = calloc(n, sizeof *ids);
    if (!msgs || !ids) {
        rc = em_err_set(&err, EM_ENOMEM, "out of memory");
        goto done;
    }
    if (!conv) {
        char title[WS_TITLE_MAX + 1];
        make_title(r->to_store, title, sizeof title);
        if ((rc = em_storage_conv_create(st, r->key_id, title[0] ? title : NULL, &conv, &err)))
            goto done;
    }
    for (size_t i = 0; i + 1 < n; i++) {
        json_t *m = json_array_get(r->to_store, i);
        msgs[i].role = json_string_value(json_object_get(m, "role"));
        msgs[i].content = json_string_value(json_object_get(m, "content"));
    }
    int kept = finish == EM_FINISH_STOP || finish == EM_FINISH_LENGTH || finish == EM_FINISH_CANCELLED;
    msgs[n - 1] = (em_message_new){ .role = "assistant", .content = answer, .tokens = completion_tokens,
                                    .finish_reason = kept ? em_finish_name(finish) : NULL };
    rc = em_storage_message_append(st, r->key_id, conv, r->parent_id, msgs, n, ids, &err);
done:
    if (!rc) {
        *answer_id = ids[n - 1];
        if (n >= 2 && strcmp(msgs[n - 2].role, "user") == 0)
            *user_id = ids[n - 2];
    }
    free(msgs);
    free(ids);
    if (rc == EM_ESTATE)
        return 0;   /* store_content = 0: nothing is kept */
    if (rc) {
        em_log(EM_LOG_ERROR, r->request_id, "%s: storing conversation %lld: %s", c->addr, (long long)conv, err.msg);
        return conv == r->conv_id ? 0 : conv;
    }
    return conv;
}

/* x to the thousandth, or null when it is not known */
static json_t *rounded_or_null(double x, int known)
{
    return known ? json_real(round(x * 1000) / 1000) : json_null();
}

/* r is done: its error, or done with usage, timings and the conversation. */
static void req_done(ws_chat *c, ws_req *r)
{
    const char *err = em_gen_error(r->gen);
    if (err) {
        ws_error(c, r->id, "generation_failed", NULL, 0, "generation failed: %s", err);
        return;
    }
    uint32_t prompt, cached, comp;
    em_gen_usage(r->gen, &prompt, &cached, &comp);
    double queue_ms, ttft_ms, tok_s;
    em_gen_timings(r->gen, &queue_ms, &ttft_ms, &tok_s);
    em_finish finish = em_gen_finish(r->gen, 0);
    int64_t user_id, answer_id;
    int64_t conv = store_exchange(c, r, comp, finish, &user_id, &answer_id);
    em_web_error e = { 0 };
    if (em_gen_drain_error(r->gen, &e)) {
        /* the drain's time was up: kept as a stopped answer, and the client told why */
        if (conv)
            snprintf(e.message + strlen(e.message), sizeof e.message - strlen(e.message),
                     "; what was generated is kept in conversation %lld", (long long)conv);
        ws_error_web(c, r->id, &e);
        return;
    }
    json_t *j = json_pack("{s:s, s:O, s:o, s:o, s:o, s:s, s:{s:I, s:I, s:I, s:I}, s:{s:o, s:o, s:o}}", "type", "done",
                          "id", r->id, "conversation_id", conv ? json_integer(conv) : json_null(),
                          "user_message_id", user_id ? json_integer(user_id) : json_null(), "message_id",
                          answer_id ? json_integer(answer_id) : json_null(), "finish_reason",
                          em_finish_name(finish), "usage", "prompt_tokens", (json_int_t)prompt,
                          "completion_tokens", (json_int_t)comp, "cached_tokens", (json_int_t)cached,
                          "reasoning_tokens", (json_int_t)em_gen_reasoning_tokens(r->gen), "timings",
                          "queue_ms", rounded_or_null(queue_ms, 1), "ttft_ms", rounded_or_null(ttft_ms, comp > 0),
                          "tokens_per_s", rounded_or_null(tok_s, comp > 1));
    ws_send(c, j);
}

/* Take r's new text onto delta (not framed yet; the whole answer is
 * gen.c's). 1 once it is done. */
static int req_pull(ws_req *r)
{
    return em_gen_pump(r->gen, &r->delta);
}

/* Move every request's new events into frames: a position that changed,
 * all new text in one token frame, then done. */
static void ws_pump(ws_chat *c)
{
    for (uint32_t i = 0; i < c->n_req;) {
        ws_req *r = c->req[i];
        int all = req_pull(r);
        uint32_t pos = all ? 0 : em_gen_queue_position(r->gen);
        if (!all && pos != r->position) {
            r->position = pos;
            ws_send(c, json_pack("{s:s, s:O, s:I}", "type", "queued", "id", r->id, "position", (json_int_t)pos));
        }
        em_buf_reset(&c->think);
        em_gen_take_reasoning(r->gen, 0, &c->think);
        if (c->think.n) {   /* the reasoning before the answer: frames of its own */
            json_t *text = json_stringn(c->think.s, c->think.n);
            ws_send(c, json_pack("{s:s, s:O, s:o}", "type", "reasoning", "id", r->id, "text",
                                 text ? text : json_string("\xef\xbf\xbd")));
        }
        if (r->delta.n) {
            json_t *text = json_stringn(r->delta.s, r->delta.n);
            ws_send(c, json_pack("{s:s, s:O, s:o}", "type", "token", "id", r->id, "text",
                                 text ? text : json_string("\xef\xbf\xbd")));
            em_buf_reset(&r->delta);
        }
        if (all) {
            req_done(c, r);
            req_remove(c, i);   /* the last one moves to i */
            continue;
        }
        i++;
    }
}

/* ---- messages in ------------------------------------------------------------- */

/* ---- sockets awaiting auth ----------------------------------------------------- */

static void pend_link(ws_chat *c)
{
    ws_chat **p = &c->w->ws_pending, *last = NULL;
    while (*p) {   /* at the end: the list is oldest first (at most WEB_PENDING_MAX long) */
        last = *p;
        p = &(*p)->pend_next;
    }
    c->pend_prev = last;
    c->pend_next = NULL;
    *p = c;
    c->pend_linked = 1;
}

static void pend_unlink(ws_chat *c)
{
    if (!c->pend_linked)
        return;
    if (c->pend_prev)
        c->pend_prev->pend_next = c->pend_next;
    else
        c->w->ws_pending = c->pend_next;
    if (c->pend_next)
        c->pend_next->pend_prev = c->pend_prev;
    c->pend_prev = c->pend_next = NULL;
    c->pend_linked = 0;
}

/* Room for a socket awaiting auth from client: 0, or e filled (429) when
 * that address has WEB_PENDING_PER_ADDR already. When all WEB_PENDING_MAX
 * are taken, the oldest is closed (1008): it has had the longest to say who
 * it is, and a newcomer (a real client authenticates at once) gets in. */
static int pend_room(em_web *w, const char *client, em_web_error *e)
{
    uint32_t same = 0;
    for (ws_chat *p = w->ws_pending; p; p = p->pend_next)
        same += strcmp(p->addr, client) == 0;
    if (same >= WEB_PENDING_PER_ADDR)
        return em_web_fail(e, 429, "rate_limit_error", "too_many_connections", NULL,
                           "too many WebSockets awaiting authentication from %s (at most %d)", client,
                           WEB_PENDING_PER_ADDR);
    if (w->n_pending >= WEB_PENDING_MAX && w->ws_pending) {
        ws_chat *old = w->ws_pending;
        em_log(EM_LOG_WARN, NULL, "%s: WebSocket closed (1008) unauthenticated: %d sockets await auth, a new one "
               "came", old->addr, WEB_PENDING_MAX);
        ws_error(old, NULL, "auth_timeout", NULL, 0, "closed before authenticating: %d other sockets await auth",
                 WEB_PENDING_MAX);
        old->close_code = LWS_CLOSE_STATUS_POLICY_VIOLATION;
        pend_unlink(old);
        web_addr_release(w, lws_get_socket_fd(old->wsi));
        lws_callback_on_writable(old->wsi);
    }
    return 0;
}

static int valid_id(const json_t *id)
{
    return (json_is_string(id) && json_string_length(id) > 0 && json_string_length(id) <= WS_ID_MAX) ||
           json_is_number(id);
}

static void ws_auth(ws_chat *c, json_t *m, const json_t *id)
{
    em_web_auth a;
    em_web_error e = { 0 };
    json_t *key = json_object_get(m, "key");
    if (key && !json_is_string(key) && !json_is_null(key)) {
        ws_error(c, id, "invalid_request", "key", 0, "'key' must be a string");
        return;
    }
    if (web_auth_key(c->w, json_string_value(key), c->loopback, c->addr, "in {\"type\": \"auth\", \"key\": KEY}", &a, &e)) {
        em_log(EM_LOG_WARN, NULL, "%s: WebSocket auth: %d %s", c->addr, e.status, e.message);
        ws_error_web(c, id, &e);
        if (++c->auth_fails >= WS_MAX_AUTH_FAIL)
            c->close_code = LWS_CLOSE_STATUS_POLICY_VIOLATION;
        return;
    }
    if (web_addr_promote(c->w, lws_get_socket_fd(c->wsi), c->peer, &e)) {   /* now an open connection */
        em_log(EM_LOG_WARN, NULL, "%s: WebSocket refused: %s", c->addr, e.message);
        ws_error_web(c, id, &e);
        c->close_code = LWS_CLOSE_STATUS_POLICY_VIOLATION;
        return;
    }
    pend_unlink(c);
    /* from now the timer checks the key again (ws_timer) */
    lws_set_timer_usecs(c->wsi, a.key_id ? (lws_usec_t)(WS_RECHECK_S * 1e6) : LWS_SET_TIMER_USEC_CANCEL);
    c->auth = a;
    c->authed = 1;
    ws_ready(c);
}

/* The socket's key was revoked or rotated (e says which): what runs is
 * cancelled (not stored), and the socket closed (1008) once the frames
 * queued (the caller's error frame among them) are out. */
static void ws_key_gone(ws_chat *c, const em_web_error *e)
{
    em_log(EM_LOG_WARN, NULL, "%s: WebSocket of key %lld: %s: closed (1008)", c->addr, (long long)c->auth.key_id,
           e->message);
    c->key_gone = 1;
    c->close_code = LWS_CLOSE_STATUS_POLICY_VIOLATION;
    for (uint32_t i = 0; i < c->n_req; i++)
        em_gen_cancel(c->req[i]->gen);
    lws_callback_on_writable(c->wsi);
}

/* Where a chat on stored history goes: conversation_id, parent_id (a
 * message id, 0 for a new first message; absent or null: the current leaf)
 * and regenerate, checked. 0, or -1 with e filled. */
static int chat_place(json_t *m, ws_req *r, int *regenerate, em_web_error *e)
{
    json_t *cid = json_object_get(m, "conversation_id"), *pid = json_object_get(m, "parent_id");
    json_t *regen = json_object_get(m, "regenerate");
    r->parent_id = EM_STORAGE_LEAF;
    *regenerate = 0;
    if (cid && !json_is_null(cid)) {
        if (!json_is_integer(cid) || json_integer_value(cid) <= 0)
            return em_web_fail(e, 400, "invalid_request_error", NULL, "conversation_id",
                               "'conversation_id' must be a positive integer");
        r->conv_id = json_integer_value(cid);
    }
    if (regen && !json_is_null(regen)) {
        if (!json_is_boolean(regen))
            return em_web_fail(e, 400, "invalid_request_error", NULL, "regenerate", "'regenerate' must be true or false");
        *regenerate = json_is_true(regen);
    }
    if (pid && !json_is_null(pid)) {
        if (!json_is_integer(pid) || json_integer_value(pid) < 0)
            return em_web_fail(e, 400, "invalid_request_error", NULL, "parent_id",
                               "'parent_id' must be a message id, or 0 for a new first message");
        r->parent_id = json_integer_value(pid);
    }
    if ((r->parent_id != EM_STORAGE_LEAF || *regenerate) && !r->conv_id)
        return em_web_fail(e, 400, "invalid_request_error", NULL, "conversation_id",
                           "'parent_id' and 'regenerate' name messages of a stored conversation: they need "
                           "'conversation_id'");
    int has_msgs = json_object_get(m, "messages") != NULL, has_one = json_object_get(m, "message") != NULL;
    if (*regenerate && (has_msgs || has_one))
        return em_web_fail(e, 400, "invalid_request_error", NULL, has_one ? "message" : "messages",
                           "a regenerate sends no text: it answers the user message 'parent_id' again");
    if (*regenerate && r->parent_id <= 0)
        return em_web_fail(e, 400, "invalid_request_error", NULL, "parent_id",
                           "a regenerate needs 'parent_id': the user message to answer again");
    if (!*regenerate && has_msgs == has_one)
        return em_web_fail(e, 400, "invalid_request_error", NULL, "messages",
                           "a chat carries either 'messages' (the whole conversation) or 'message' (one new user "
                           "message for conversation_id)");
    if (has_msgs && r->parent_id != EM_STORAGE_LEAF)
        return em_web_fail(e, 400, "invalid_request_error", NULL, "parent_id",
                           "'parent_id' continues stored history: it goes with 'message', not 'messages'");
    return 0;
}

/* The stored history to continue from: the path root -> r->parent_id of
 * r->conv_id (or just a check that the conversation is the key's, for
 * 'messages'). 0, or -1 with e filled (404 naming what is missing). */
static int chat_history(ws_chat *c, ws_req *r, int only_check, em_message **out, size_t *n, em_web_error *e)
{
    em_storage *st = c->w->o.storage;
    em_err err = { 0 };
    em_conv_info ci;
    /* a path of more messages than the context has positions cannot fit
     * (each message costs its role's tokens at least): not even read */
    int rc = !st ? EM_ENOENT
           : only_check ? em_storage_conv_get(st, r->key_id, r->conv_id, &ci, &err)
                        : em_storage_message_path(st, r->key_id, r->conv_id, r->parent_id, c->w->o.n_ctx, out, n,
                                                  &err);
    if (rc == EM_ERANGE)
        return em_web_fail(e, 400, "invalid_request_error", "context_length_exceeded", "conversation_id",
                           "This model's maximum context length is %u tokens. However, conversation %lld holds more "
                           "than %u messages before this one: start a new conversation, or branch off an earlier "
                           "message (parent_id).", c->w->o.n_ctx, (long long)r->conv_id, c->w->o.n_ctx);
    if (rc == EM_ENOENT) {
        /* the conversation, or a message not in it (another key's is not in it) */
        int conv_ok = st && r->parent_id > 0 && em_storage_conv_get(st, r->key_id, r->conv_id, &ci, NULL) == 0;
        if (conv_ok)
            return em_web_fail(e, 404, "invalid_request_error", "not_found", "parent_id",
                               "message %lld is not in conversation %lld", (long long)r->parent_id,
                               (long long)r->conv_id);
        return em_web_fail(e, 404, "invalid_request_error", "not_found", "conversation_id",
                           "conversation %lld does not exist", (long long)r->conv_id);
    }
    if (rc)
        return em_web_fail(e, 503, "server_error", NULL, NULL, "loading the conversation failed: %s", err.msg);
    return 0;
}

/* The conversation to render for a chat message: messages as given, or the
 * stored branch root -> parent (the current leaf by default) plus message,
 * or for a regenerate the branch root -> the user message parent_id. Sets
 * r's conversation, parent and what to store; NULL with e filled. */
static json_t *chat_messages(ws_chat *c, json_t *m, ws_req *r, em_web_error *e)
{
    json_t *msgs = json_object_get(m, "messages"), *one = json_object_get(m, "message"), *out = NULL, *hist = NULL;
    em_message *stored = NULL;
    size_t n_stored = 0;
    int regenerate = 0;
    if (chat_place(m, r, &regenerate, e))
        goto done;
    if (one && (!json_is_string(one) || !r->conv_id)) {
        em_web_fail(e, 400, "invalid_request_error", NULL, "message",
                    json_is_string(one) ? "'message' continues a stored conversation: it needs 'conversation_id'"
                                        : "'message' must be a string");
        goto done;
    }
    if (r->conv_id && chat_history(c, r, msgs != NULL, &stored, &n_stored, e))
        goto done;
    if (regenerate && strcmp(stored[n_stored - 1].role, "user") != 0) {
        em_web_fail(e, 400, "invalid_request_error", NULL, "parent_id",
                    "a regenerate answers a user message; message %lld is a %s message", (long long)r->parent_id,
                    stored[n_stored - 1].role);
        goto done;
    }
    if (!msgs) {
        hist = json_array();
        for (size_t i = 0; i < n_stored; i++)
            json_array_append_new(hist, json_pack("{s:s, s:s}", "role", stored[i].role, "content", stored[i].content));
        if (one)
            json_array_append_new(hist, json_pack("{s:s, s:O}", "role", "user", "content", one));
        msgs = hist;
    }
    if (!(out = web_messages_check(msgs, e)))
        goto done;
    if (!r->conv_id) {
        r->to_store = json_incref(out);   /* a new conversation: all of it */
        r->parent_id = EM_STORAGE_ROOT;
        goto done;
    }
    /* the new message (the last one), if any: the history is stored already */
    r->to_store = json_array();
    if (!regenerate)
        json_array_append(r->to_store, json_array_get(out, json_array_size(out) - 1));
    if (one)   /* the answer goes where its history came from, wherever the leaf moves meanwhile */
        r->parent_id = n_stored ? stored[n_stored - 1].id : EM_STORAGE_ROOT;
done:
    em_storage_messages_free(stored, n_stored);
    json_decref(hist);
    return out;
}

static const char *const chat_fields[] = { "type", "id", "conversation_id", "parent_id", "regenerate",
                                           "messages", "message", "params" };

static int known(const char *k, const char *const *names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(k, names[i]) == 0)
            return 1;
    return 0;
}

static void ws_chat_start(ws_chat *c, json_t *m, const json_t *id)
{
    em_web *w = c->w;
    em_web_error e = { 0 };
    ws_req *r = NULL;
    json_t *msgs = NULL, *params = json_object_get(m, "params"), *empty = json_object();
    em_gen *none = NULL;
    char rid[64];
    web_new_id(w, "chatws-", rid, sizeof rid);
    em_gen_params gp = { .n = 1, .max_tokens = -1, .auth = &c->auth, .client_addr = c->addr, .request_id = rid,
                         .endpoint = "ws.chat",
                         .param_name = "messages" };
    if (!valid_id(id)) {   /* not a request the client could refer to: no ledger row */
        ws_error(c, NULL, id ? "invalid_id" : "missing_id", "id", 0,
                 "a chat needs an 'id': a string of 1 to %d bytes or a number", WS_ID_MAX);
        goto done;
    }
    if (find_req(c, id) >= 0) {
        ws_error(c, id, "duplicate_id", "id", 0, "a request with this id is still running");
        goto done;
    }
    gp.cls = c->auth.default_class;
    if (!c->authed) {
        em_web_fail(&e, 401, "invalid_request_error", "unauthorized", NULL,
                    "authenticate first: send {\"type\": \"auth\", \"key\": KEY}");
        goto done;
    }
    if (web_auth_recheck(w, &c->auth, &e)) {   /* revoked or rotated since the socket authenticated */
        ws_key_gone(c, &e);
        goto done;
    }
    if (c->n_req >= WS_MAX_REQUESTS) {
        em_web_fail(&e, 429, "rate_limit_error", "too_many_requests", NULL,
                    "at most %d requests run at once on one socket", WS_MAX_REQUESTS);
        goto done;
    }
    if (web_rate_check(w, &c->auth, &e))
        goto done;
    const char *k;
    json_t *v;
    json_object_foreach(m, k, v) {
        if (!known(k, chat_fields, sizeof chat_fields / sizeof chat_fields[0])) {
            em_web_fail(&e, 400, "invalid_request_error", "unknown_field", k, "a chat has no field '%s'", k);
            goto done;
        }
    }
    if (params && !json_is_null(params) && !json_is_object(params)) {
        em_web_fail(&e, 400, "invalid_request_error", NULL, "params", "'params' must be an object");
        goto done;
    }
    if (!json_is_object(params))
        params = empty;
    if (web_params_check(params, WEB_DOOR_WS, &e))   /* params.c: the one table of parameters */
        goto done;
    if (web_gen_params(params, &c->auth, &gp, &e))
        goto done;
    gp.structure = params;   /* response_format, grammar, regex */
    r = calloc(1, sizeof *r);
    if (!r) {
        em_web_fail(&e, 500, "server_error", NULL, NULL, "out of memory");
        goto done;
    }
    r->key_id = c->auth.key_id;
    if (!(msgs = chat_messages(c, m, r, &e)))
        goto done;
    gp.messages = msgs;
    r->id = json_deep_copy(id);
    snprintf(r->request_id, sizeof r->request_id, "%s", rid);
    if (em_gen_start(w, &gp, &r->gen, &e)) {
        ws_error_web(c, id, &e);   /* (its ledger row is written) */
        goto out;
    }
    c->req[c->n_req++] = r;
    c->live.wsi = c->wsi;
    web_live_link(w, &c->live);
    r->position = em_gen_queue_position(r->gen);
    ws_send(c, json_pack("{s:s, s:O, s:I, s:s}", "type", "queued", "id", r->id, "position", (json_int_t)r->position,
                         "request_id", r->request_id));   /* the ledger row's id */
    em_log(EM_LOG_DEBUG, rid, "%s WebSocket chat", c->addr);
    r = NULL;
done:
    if (e.status) {   /* refused: the ledger row (em_gen_start's, as over HTTP) and the error */
        em_gen_start(w, &gp, &none, &e);
        ws_error_web(c, id, &e);
    }
out:
    req_free(r);
    json_decref(msgs);
    json_decref(empty);
}

static void ws_cancel(ws_chat *c, const json_t *id)
{
    if (!valid_id(id)) {
        ws_error(c, NULL, id ? "invalid_id" : "missing_id", "id", 0, "a cancel needs the 'id' of a chat");
        return;
    }
    int i = find_req(c, id);
    if (i < 0) {
        ws_error(c, id, "unknown_id", "id", 0, "no request with this id is running on this socket");
        return;
    }
    em_gen_cancel(c->req[i]->gen);   /* done (cancelled) follows */
}

/* One whole text message. */
static void ws_message(ws_chat *c, const char *s, size_t n)
{
    json_error_t je;
    json_t *m = json_loadb(s, n, JSON_REJECT_DUPLICATES, &je);
    if (!m || !json_is_object(m)) {
        if (m)
            ws_error(c, NULL, "invalid_json", NULL, 0, "a message must be a JSON object");
        else
            ws_error(c, NULL, "invalid_json", NULL, 0, "the message is not JSON: %s (line %d, column %d)", je.text,
                     je.line, je.column);
        json_decref(m);
        return;
    }
    const char *type = json_string_value(json_object_get(m, "type"));
    json_t *id = json_object_get(m, "id");
    const json_t *echo = valid_id(id) ? id : NULL;
    if (!type)
        ws_error(c, echo, "invalid_message", "type", 0, "a message needs a 'type' string");
    else if (strcmp(type, "auth") == 0)
        ws_auth(c, m, echo);
    else if (strcmp(type, "chat") == 0)
        ws_chat_start(c, m, id);
    else if (strcmp(type, "cancel") == 0 && !c->authed)
        ws_error(c, echo, "unauthorized", NULL, 0, "authenticate first: send {\"type\": \"auth\", \"key\": KEY}");
    else if (strcmp(type, "cancel") == 0)
        ws_cancel(c, id);
    else
        ws_error(c, echo, "unknown_type", "type", 0, "unknown message type '%.64s' (auth, chat, cancel)", type);
    json_decref(m);
}

/* A piece of a message. -1 closes the socket (1009 past the limit). */
static int ws_receive(ws_chat *c, const void *in, size_t len)
{
    size_t max = c->w->o.max_ws_message;
    if (c->close_code)
        return 0;   /* closing: what it sends is not read */
    if (!c->rx_open) {
        c->rx_open = 1;
        c->rx_binary = lws_frame_is_binary(c->wsi);
        c->rx_n = 0;
        em_buf_reset(&c->rx);
    }
    c->rx_n += len;
    if (c->rx_n + lws_remaining_packet_payload(c->wsi) > max) {
        static const char why[] = "message too large";
        em_log(EM_LOG_WARN, NULL, "%s: WebSocket message over %zu bytes: closed (1009)", c->addr, max);
        lws_close_reason(c->wsi, LWS_CLOSE_STATUS_MESSAGE_TOO_LARGE, (unsigned char *)why, sizeof why - 1);
        return -1;
    }
    if (!c->rx_binary && em_buf_add(&c->rx, in, len)) {
        lws_close_reason(c->wsi, LWS_CLOSE_STATUS_UNEXPECTED_CONDITION, NULL, 0);
        return -1;
    }
    if (!lws_is_final_fragment(c->wsi))
        return 0;
    c->rx_open = 0;
    if (c->rx_binary)
        ws_error(c, NULL, "binary_frame", NULL, 0, "ember.chat.v1 takes JSON text frames only");
    else
        ws_message(c, c->rx.s ? c->rx.s : "", c->rx.n);
    return 0;
}

/* ---- the socket ------------------------------------------------------------- */

/* A client gone mid-answer: r is cancelled as it is freed, and what it had
 * generated (delivered or not) is stored as a stopped answer would be, with
 * finish_reason cancelled (or its own, when it ended just now), so a dropped
 * connection loses neither the user's message nor the text so far. */
static void store_cut_off(ws_chat *c, ws_req *r)
{
    int all = req_pull(r);
    if (em_gen_error(r->gen))
        return;
    uint32_t prompt, cached, comp;
    em_gen_usage(r->gen, &prompt, &cached, &comp);
    int64_t user_id, answer_id;
    store_exchange(c, r, comp, all ? em_gen_finish(r->gen, 0) : EM_FINISH_CANCELLED, &user_id, &answer_id);
}

static void ws_free(ws_chat *c)
{
    while (c->n_req) {   /* a client gone: its requests are cancelled, their text so far kept */
        if (!c->key_gone)   /* (a revoked key's conversations get nothing more) */
            store_cut_off(c, c->req[c->n_req - 1]);
        req_remove(c, c->n_req - 1);
    }
    web_live_unlink(c->w, &c->live);
    pend_unlink(c);
    for (ws_frame *f = c->q_head, *next; f; f = next) {
        next = f->next;
        free(f);
    }
    em_buf_free(&c->rx);
    em_buf_free(&c->think);
    free(c);
}

/* Only GET /ws speaks the protocol. */
static int ws_filter(struct lws *wsi)
{
    char path[64] = "";
    if (lws_hdr_copy(wsi, path, sizeof path, WSI_TOKEN_GET_URI) < 0 || strcmp(path, "/ws") != 0)
        return -1;
    return 0;
}

/* A new socket: ready when it may chat as it is (counted as an open
 * connection), else auth_required (counted apart, among those awaiting
 * auth, and closed with 1008 if it has not authenticated within
 * ws_auth_timeout_s); past either budget: an error and close 1008. */
static int ws_open(em_web *w, struct lws *wsi, ws_chat **slot)
{
    ws_chat *c = calloc(1, sizeof *c);
    if (!c)
        return -1;
    c->w = w;
    c->wsi = wsi;
    *slot = c;
    lws_get_peer_simple(wsi, c->peer, sizeof c->peer);
    web_client_of(w, wsi, c->peer, c->addr, sizeof c->addr, &c->loopback);   /* proxy.c: the upgrade's headers */
    em_web_error e = { 0 };
    /* a client beyond loopback (and any with --require-key) says who it is first */
    c->authed = web_auth_key(w, NULL, c->loopback, c->addr, "", &c->auth, &e) == 0;
    int fd = lws_get_socket_fd(wsi);
    memset(&e, 0, sizeof e);
    if (c->authed ? web_addr_acquire(w, fd, c->peer, &e)
                  : pend_room(w, c->addr, &e) || web_addr_acquire_pending(w, fd, c->addr, &e)) {
        em_log(EM_LOG_WARN, NULL, "%s: WebSocket refused: %s", c->addr, e.message);
        ws_error_web(c, NULL, &e);
        c->close_code = LWS_CLOSE_STATUS_POLICY_VIOLATION;
        return 0;
    }
    if (c->authed) {
        ws_ready(c);
    } else {
        pend_link(c);
        ws_send(c, json_pack("{s:s, s:f}", "type", "auth_required", "timeout_s", w->o.ws_auth_timeout_s));
        lws_set_timer_usecs(wsi, (lws_usec_t)(w->o.ws_auth_timeout_s * 1e6));
    }
    return 0;
}

/* The socket's timer: before auth, its deadline (a socket that has not said
 * who it is goes); after, the next check of its key. */
static void ws_timer(ws_chat *c)
{
    em_web_error e = { 0 };
    if (c->close_code)
        return;
    if (c->authed) {
        if (web_auth_recheck(c->w, &c->auth, &e)) {
            ws_error_web(c, NULL, &e);
            ws_key_gone(c, &e);
        } else
            lws_set_timer_usecs(c->wsi, (lws_usec_t)(WS_RECHECK_S * 1e6));
        return;
    }
    em_log(EM_LOG_WARN, NULL, "%s: WebSocket not authenticated within %.0f s: closed (1008)", c->addr,
           c->w->o.ws_auth_timeout_s);
    ws_error(c, NULL, "auth_timeout", NULL, 0, "no auth message within %g s: send {\"type\": \"auth\", \"key\": KEY} "
             "first", c->w->o.ws_auth_timeout_s);
    c->close_code = LWS_CLOSE_STATUS_POLICY_VIOLATION;
}

int web_ws_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len)
{
    ws_chat **slot = user, *c = slot ? *slot : NULL;
    em_web *w = lws_context_user(lws_get_context(wsi));
    switch (reason) {
    case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION:
        return ws_filter(wsi);
    case LWS_CALLBACK_ESTABLISHED:
        return ws_open(w, wsi, slot);
    case LWS_CALLBACK_RECEIVE:
        return c ? ws_receive(c, in, len) : -1;
    case LWS_CALLBACK_SERVER_WRITEABLE:
        if (!c)
            return -1;
        if (!c->q_head && !c->close_code)
            ws_pump(c);
        if (c->q_head) {
            if (ws_write(c))
                return -1;
            lws_callback_on_writable(wsi);   /* the next piece, or one more pump */
        } else if (c->close_code) {
            lws_close_reason(wsi, (enum lws_close_status)c->close_code, NULL, 0);
            return -1;
        }
        return 0;
    case LWS_CALLBACK_TIMER:   /* the auth deadline, then the key's checks */
        if (c) {
            ws_timer(c);
            lws_callback_on_writable(wsi);
        }
        return 0;
    case LWS_CALLBACK_CLOSED:   /* the socket is still open here: its count goes */
        web_addr_release(w, lws_get_socket_fd(wsi));
        /* fall through */
    case LWS_CALLBACK_WSI_DESTROY:
        if (c) {
            ws_free(c);
            *slot = NULL;
        }
        return 0;
    default:
        return 0;
    }
}
