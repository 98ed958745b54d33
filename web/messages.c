/* messages.c — Anthropic's Messages API: POST /v1/messages (a whole
 * message, or streamed as Anthropic's events: message_start,
 * content_block_start / _delta (text_delta, input_json_delta,
 * thinking_delta) / _stop, ping, message_delta with the stop_reason and
 * usage, message_stop) and POST /v1/messages/count_tokens. The key comes
 * from x-api-key or "Authorization: Bearer"; errors are Anthropic's shape
 * ({"type": "error", "error": {"type", "message"}}) and statuses. A request
 * is translated into a chat completions body (system, text / tool_use /
 * tool_result blocks, tools with input_schema, tool_choice, stop_sequences,
 * thinking) and runs on the one generation path: a tool_use block's input
 * has the same guarantee as an OpenAI tool call (it validates against the
 * tool's input_schema). Only the framing is this file's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "web/api_req.h"

/* ---- errors in Anthropic's shape ----------------------------------------------- */

static const char *error_type(int status)
{
    switch (status) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return "overloaded_error";
    default:  return status >= 500 ? "api_error" : "invalid_request_error";
    }
}

static json_t *error_json(const em_web_error *e)
{
    return json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "type", error_type(e->status), "message",
                     e->message);
}

static void respond_error(web_conn *c, const em_web_error *e)
{
    json_t *j = error_json(e);
    if (e->retry_after_s)
        snprintf(c->headers + strlen(c->headers), sizeof c->headers - strlen(c->headers), "Retry-After: %u\r\n",
                 e->retry_after_s);
    web_respond_json(c, e->status, j);
    json_decref(j);
}

/* The key: x-api-key, else the Authorization header. */
static int auth_of(web_conn *c, em_web_auth *a, em_web_error *e)
{
    if (c->api_key[0])
        return web_auth_key(c->w, c->api_key, c->loopback, c->addr, "as \"x-api-key: KEY\"", a, e);
    return web_auth(c->w, c, a, e);
}

/* ---- the request, as a chat completions body ----------------------------------- */

/* A block's or a tool_result's text: a string, or text blocks. NULL with e
 * filled. */
static json_t *blocks_text(json_t *c, const char *param, em_web_error *e)
{
    if (json_is_string(c))
        return json_incref(c);
    em_buf b = { 0 };
    size_t i;
    json_t *blk;
    json_array_foreach(json_is_array(c) ? c : NULL, i, blk) {
        const char *type = json_string_value(json_object_get(blk, "type"));
        json_t *t = json_object_get(blk, "text");
        if (!type || strcmp(type, "text") || !json_is_string(t)) {
            em_buf_free(&b);
            em_web_fail(e, 400, "invalid_request_error", NULL, param, "%s: only text blocks are supported here, not "
                        "'%s'", param, type ? type : "?");
            return NULL;
        }
        em_buf_add(&b, json_string_value(t), json_string_length(t));
    }
    if (!json_is_array(c) && c && !json_is_null(c)) {
        em_web_fail(e, 400, "invalid_request_error", NULL, param, "%s: content must be a string or an array of "
                    "blocks", param);
        return NULL;
    }
    json_t *s = json_stringn(b.s ? b.s : "", b.n);
    em_buf_free(&b);
    if (!s)
        em_web_fail(e, 400, "invalid_request_error", NULL, param, "%s: the text is not valid UTF-8", param);
    return s;
}

/* One Anthropic message onto msgs as chat messages: a user's tool_result
 * blocks become tool messages (before its text), an assistant's tool_use
 * blocks its tool_calls (input as JSON text), thinking blocks dropped (the
 * templates drop earlier reasoning). */
static int message_of(json_t *m, size_t i, json_t *msgs, em_web_error *e)
{
    char param[48];
    snprintf(param, sizeof param, "messages[%zu]", i);
    const char *role = json_string_value(json_object_get(m, "role"));
    json_t *content = json_object_get(m, "content");
    if (!json_is_object(m) || !role || (strcmp(role, "user") && strcmp(role, "assistant")))
        return em_web_fail(e, 400, "invalid_request_error", NULL, param, "%s: 'role' must be user or assistant",
                           param);
    if (json_is_string(content)) {
        json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", role, "content", content));
        return 0;
    }
    if (!json_is_array(content))
        return em_web_fail(e, 400, "invalid_request_error", NULL, param, "%s: 'content' must be a string or an array "
                           "of content blocks", param);
    em_buf text = { 0 };
    json_t *calls = json_array(), *blk;
    size_t k;
    int rc = 0;
    json_array_foreach(content, k, blk) {
        const char *type = json_string_value(json_object_get(blk, "type"));
        if (type && !strcmp(type, "text") && json_is_string(json_object_get(blk, "text"))) {
            em_buf_add(&text, json_string_value(json_object_get(blk, "text")),
                       json_string_length(json_object_get(blk, "text")));
        } else if (type && !strcmp(type, "tool_use") && !strcmp(role, "assistant")) {
            json_t *id = json_object_get(blk, "id"), *name = json_object_get(blk, "name"),
                   *input = json_object_get(blk, "input");
            if (!json_is_string(id) || !json_is_string(name) || !json_is_object(input)) {
                rc = em_web_fail(e, 400, "invalid_request_error", NULL, param, "%s: a tool_use block needs 'id', "
                                 "'name' and an 'input' object", param);
                break;
            }
            char *args = json_dumps(input, JSON_COMPACT);
            json_array_append_new(calls, json_pack("{s:O, s:s, s:{s:O, s:s}}", "id", id, "type", "function", "function",
                                                   "name", name, "arguments", args ? args : "{}"));
            free(args);
        } else if (type && !strcmp(type, "tool_result") && !strcmp(role, "user")) {
            json_t *id = json_object_get(blk, "tool_use_id");
            json_t *t = json_is_string(id) ? blocks_text(json_object_get(blk, "content"), param, e) : NULL;
            if (!t) {
                if (!e->status)
                    em_web_fail(e, 400, "invalid_request_error", NULL, param, "%s: a tool_result block needs "
                                "'tool_use_id'", param);
                rc = -1;
                break;
            }
            if (json_is_true(json_object_get(blk, "is_error"))) {   /* said, as the templates have no flag for it */
                json_t *err = json_pack("s+", "Error: ", json_string_value(t));
                json_decref(t);
                t = err;
            }
            json_array_append_new(msgs, json_pack("{s:s, s:O, s:o}", "role", "tool", "tool_call_id", id, "content", t));
        } else if (type && (!strcmp(type, "thinking") || !strcmp(type, "redacted_thinking"))) {
            continue;
        } else {
            rc = em_web_fail(e, 400, "invalid_request_error", NULL, param, "%s: content blocks of type '%s' are not "
                             "supported here (text, tool_use from the assistant, tool_result from the user)", param,
                             type ? type : "?");
            break;
        }
    }
    if (!rc && (text.n || json_array_size(calls) || !strcmp(role, "assistant") ||
                !json_array_size(content))) {
        json_t *nm = json_pack("{s:s, s:s%}", "role", role, "content", text.s ? text.s : "", text.n);
        if (json_array_size(calls))
            json_object_set(nm, "tool_calls", calls);
        json_array_append_new(msgs, nm);
    }
    json_decref(calls);
    em_buf_free(&text);
    return rc;
}

/* The chat completions body of a Messages request (a new reference);
 * count: for count_tokens (max_tokens not needed). NULL with e filled. */
static json_t *to_chat(json_t *req, int count, em_web_error *e)
{
    if (!json_is_object(req)) {
        em_web_fail(e, 400, "invalid_request_error", NULL, NULL, "the request body must be a JSON object");
        return NULL;
    }
    json_t *msgs = json_object_get(req, "messages"), *mt = json_object_get(req, "max_tokens");
    if (!json_is_array(msgs) || !json_array_size(msgs)) {
        em_web_fail(e, 400, "invalid_request_error", NULL, "messages", "messages: a non-empty array is required");
        return NULL;
    }
    if (!count && !json_is_integer(mt)) {
        em_web_fail(e, 400, "invalid_request_error", NULL, "max_tokens", "max_tokens: an integer is required");
        return NULL;
    }
    json_t *chat = json_object(), *out = json_array();
    json_object_set_new(chat, "messages", out);
    json_t *sys = json_object_get(req, "system");
    if (sys && !json_is_null(sys)) {
        json_t *t = blocks_text(sys, "system", e);
        if (!t) {
            json_decref(chat);
            return NULL;
        }
        json_array_append_new(out, json_pack("{s:s, s:o}", "role", "system", "content", t));
    }
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m)
        if (message_of(m, i, out, e)) {
            json_decref(chat);
            return NULL;
        }
    json_t *tools = json_object_get(req, "tools"), *tc = json_object_get(req, "tool_choice"), *t;
    if (tools && !json_is_null(tools)) {
        if (!json_is_array(tools)) {
            json_decref(chat);
            em_web_fail(e, 400, "invalid_request_error", NULL, "tools", "tools: an array is required");
            return NULL;
        }
        json_t *ct = json_array();
        json_array_foreach(tools, i, t) {
            const char *type = json_string_value(json_object_get(t, "type"));
            if (type && strcmp(type, "custom")) {   /* server tools (web_search_...): not here */
                json_decref(ct);
                json_decref(chat);
                em_web_fail(e, 400, "invalid_request_error", NULL, "tools", "tools.%zu: the server tool '%s' is not "
                            "available on this server (custom tools with an input_schema only)", i, type);
                return NULL;
            }
            json_t *fn = json_object();
            if (json_object_get(t, "name"))
                json_object_set(fn, "name", json_object_get(t, "name"));
            if (json_object_get(t, "description"))
                json_object_set(fn, "description", json_object_get(t, "description"));
            if (json_object_get(t, "input_schema"))
                json_object_set(fn, "parameters", json_object_get(t, "input_schema"));
            json_array_append_new(ct, json_pack("{s:s, s:o}", "type", "function", "function", fn));
        }
        json_object_set_new(chat, "tools", ct);
    }
    if (tc && !json_is_null(tc)) {
        const char *type = json_string_value(json_object_get(tc, "type"));
        json_t *name = json_object_get(tc, "name");
        if (!type || (strcmp(type, "auto") && strcmp(type, "any") && strcmp(type, "none") &&
                      (strcmp(type, "tool") || !json_is_string(name)))) {
            json_decref(chat);
            em_web_fail(e, 400, "invalid_request_error", NULL, "tool_choice", "tool_choice: must be {\"type\": "
                        "\"auto\" | \"any\" | \"none\"} or {\"type\": \"tool\", \"name\": ...}");
            return NULL;
        }
        if (!strcmp(type, "tool"))
            json_object_set_new(chat, "tool_choice", json_pack("{s:s, s:{s:O}}", "type", "function", "function",
                                                               "name", name));
        else
            json_object_set_new(chat, "tool_choice", json_string(!strcmp(type, "any") ? "required" : type));
        if (json_is_true(json_object_get(tc, "disable_parallel_tool_use")))
            json_object_set_new(chat, "parallel_tool_calls", json_false());
    }
    json_t *stop = json_object_get(req, "stop_sequences");
    if (stop && !json_is_null(stop)) {
        if (!json_is_array(stop) || json_array_size(stop) > EM_MAX_STOP) {
            json_decref(chat);
            em_web_fail(e, 400, "invalid_request_error", NULL, "stop_sequences", "stop_sequences: at most %d strings",
                        EM_MAX_STOP);
            return NULL;
        }
        json_object_set(chat, "stop", stop);
    }
    json_t *think = json_object_get(req, "thinking");
    if (json_is_object(think)) {   /* the template's switch, where it has one (Qwen3's enable_thinking) */
        const char *type = json_string_value(json_object_get(think, "type"));
        json_object_set_new(chat, "chat_template_kwargs", json_pack("{s:b}", "enable_thinking",
                                                                    type && !strcmp(type, "enabled")));
        json_t *bt = json_object_get(think, "budget_tokens");
        if (type && !strcmp(type, "enabled") && bt)   /* the block is closed past it */
            json_object_set(chat, "reasoning_budget", bt);
    }
    if (!count)
        json_object_set(chat, "max_tokens", mt);
    static const char *const same[] = { "model", "temperature", "top_p", "top_k", "stream" };
    for (size_t k = 0; k < sizeof same / sizeof same[0]; k++)
        if (json_object_get(req, same[k]) && !(count && !strcmp(same[k], "stream")))
            json_object_set(chat, same[k], json_object_get(req, same[k]));
    return chat;
}

/* ---- the answer ------------------------------------------------------------------------- */

enum { BLOCK_NONE, BLOCK_THINKING, BLOCK_TEXT, BLOCK_TOOL };

typedef struct {
    json_t *msg;          /* the message (content filled as it comes) */
    json_t *stop;         /* the request's stop_sequences (for stop_sequence) */
    int     cur;          /* BLOCK_*: the block open now */
    json_t *block;        /* it (a reference into msg's content) */
    em_buf  text;         /* its text or input JSON so far */
    int     started, pinged;
} msg_door;

static void door_free(void *p)
{
    msg_door *d = p;
    if (!d)
        return;
    json_decref(d->msg);
    json_decref(d->stop);
    em_buf_free(&d->text);
    free(d);
}

static json_t *content(msg_door *d)
{
    return json_object_get(d->msg, "content");
}

static void close_block(web_conn *c, msg_door *d)
{
    if (d->cur == BLOCK_NONE)
        return;
    size_t idx = json_array_size(content(d)) - 1;
    json_t *t = json_stringn(d->text.s ? d->text.s : "", d->text.n);
    if (d->cur == BLOCK_TEXT) {
        json_object_set(d->block, "text", t);
    } else if (d->cur == BLOCK_THINKING) {
        json_object_set(d->block, "thinking", t);
        web_sse_event(c, "content_block_delta", json_pack("{s:I, s:{s:s, s:s}}", "index", (json_int_t)idx, "delta",
                                                          "type", "signature_delta", "signature", ""));
    } else {
        json_t *input = json_loads(json_string_value(t), 0, NULL);
        json_object_set_new(d->block, "input", input ? input : json_object());
    }
    json_decref(t);
    web_sse_event(c, "content_block_stop", json_pack("{s:I}", "index", (json_int_t)idx));
    d->cur = BLOCK_NONE;
    d->block = NULL;
    em_buf_reset(&d->text);
}

static void open_block(web_conn *c, msg_door *d, int kind, json_t *call)
{
    close_block(c, d);
    json_t *b, *start;
    if (kind == BLOCK_TEXT) {
        b = json_pack("{s:s, s:s}", "type", "text", "text", "");
        start = json_incref(b);
    } else if (kind == BLOCK_THINKING) {
        b = json_pack("{s:s, s:s, s:s}", "type", "thinking", "thinking", "", "signature", "");
        start = json_incref(b);
    } else {
        char id[64];   /* call_X as toolu_X; an id the model wrote (its template checks it) as it is */
        const char *cid = json_string_value(json_object_get(call, "id"));
        int ours = !strncmp(cid, "call_", 5);
        snprintf(id, sizeof id, "%s%s", ours ? "toolu_" : "", ours ? cid + 5 : cid);
        b = json_pack("{s:s, s:s, s:O, s:{}}", "type", "tool_use", "id", id, "name",
                      json_object_get(json_object_get(call, "function"), "name"), "input");
        start = json_incref(b);
    }
    size_t idx = json_array_size(content(d));
    json_array_append_new(content(d), b);
    d->block = b;
    d->cur = kind;
    web_sse_event(c, "content_block_start", json_pack("{s:I, s:o}", "index", (json_int_t)idx, "content_block", start));
    if (!d->pinged) {
        web_sse_event(c, "ping", json_object());
        d->pinged = 1;
    }
}

static void delta(web_conn *c, msg_door *d, const char *type, const char *field, const char *s, size_t n)
{
    em_buf_add(&d->text, s, n);
    web_sse_event(c, "content_block_delta", json_pack("{s:I, s:{s:s, s:s%}}", "index",
                                              (json_int_t)(json_array_size(content(d)) - 1), "delta", "type", type,
                                              field, s, n));
}

/* One piece of what the generation produced (web_api_take) into the block
 * it belongs to, opening it first when another is open. */
typedef struct {
    web_conn *c;
    msg_door *d;
} take_ctx;

static void piece(void *ctx, int kind, const char *s, size_t n, const json_t *call)
{
    take_ctx *t = ctx;
    static const int block[] = { BLOCK_THINKING, BLOCK_TEXT, BLOCK_TOOL, BLOCK_TOOL };
    if (kind == WEB_PIECE_CALL || (kind != WEB_PIECE_ARGS && t->d->cur != block[kind]))
        open_block(t->c, t->d, block[kind], (json_t *)call);
    if (kind == WEB_PIECE_REASONING)
        delta(t->c, t->d, "thinking_delta", "thinking", s, n);
    else if (kind == WEB_PIECE_TEXT)
        delta(t->c, t->d, "text_delta", "text", s, n);
    else if (kind == WEB_PIECE_ARGS && t->d->cur == BLOCK_TOOL)
        delta(t->c, t->d, "input_json_delta", "partial_json", s, n);
}

static json_t *usage_json(api_req *a)
{
    uint32_t prompt, cached, comp;
    em_gen_usage(a->gen, &prompt, &cached, &comp);
    return json_pack("{s:I, s:I, s:I, s:I}", "input_tokens", (json_int_t)(prompt - cached), "output_tokens",
                     (json_int_t)comp, "cache_read_input_tokens", (json_int_t)cached, "cache_creation_input_tokens",
                     (json_int_t)0);
}

static void pump(web_conn *c)
{
    api_req *a = c->api;
    msg_door *d = a->door;
    web_conn *sc = a->stream ? c : NULL;
    if (a->stream && !d->started) {
        json_t *m = json_deep_copy(d->msg);
        json_object_set_new(m, "usage", usage_json(a));
        web_sse_event(sc, "message_start", json_pack("{s:o}", "message", m));
        d->started = 1;
    }
    int all = em_gen_pump(a->gen, a->delta);
    take_ctx tc = { sc, d };
    web_api_take(a, piece, &tc);
    if (!all)
        return;
    em_web_error e = { 0 };
    if (em_gen_failed(a->gen, &e)) {
        if (!a->stream) {
            respond_error(c, &e);
            return;
        }
        web_sse_event(sc, "error", json_pack("{s:{s:s, s:s}}", "error", "type", error_type(e.status), "message",
                                             e.message));
        web_stream_end(c);
        return;
    }
    if (json_array_size(content(d)) == 0 && d->cur == BLOCK_NONE)
        open_block(sc, d, BLOCK_TEXT, NULL);   /* an empty answer is one empty text block */
    close_block(sc, d);
    /* a tool_use cut off by max_tokens is not one: the gen keeps whole calls only */
    const json_t *whole = em_gen_tool_calls(a->gen, 0);
    size_t n_whole = whole ? json_array_size(whole) : 0, n_tool = 0, i;
    json_t *b;
    json_array_foreach(content(d), i, b)
        n_tool += !strcmp(json_string_value(json_object_get(b, "type")), "tool_use");
    if (n_tool > n_whole && !a->stream)
        json_array_remove(content(d), json_array_size(content(d)) - 1);
    em_finish f = em_gen_finish(a->gen, 0);
    int si = em_gen_stop_index(a->gen, 0);
    const char *reason = f == EM_FINISH_LENGTH ? "max_tokens" : si >= 0 ? "stop_sequence"
                       : n_whole ? "tool_use" : "end_turn";
    json_object_set_new(d->msg, "stop_reason", json_string(reason));
    json_object_set(d->msg, "stop_sequence", si >= 0 ? json_array_get(d->stop, (size_t)si) : json_null());
    json_object_set_new(d->msg, "usage", usage_json(a));
    if (!a->stream) {
        web_respond_json(c, 200, d->msg);
        return;
    }
    uint32_t prompt, cached, comp;
    em_gen_usage(a->gen, &prompt, &cached, &comp);
    web_sse_event(sc, "message_delta", json_pack("{s:{s:s, s:O}, s:{s:I}}", "delta", "stop_reason", reason,
                                                 "stop_sequence", json_object_get(d->msg, "stop_sequence"), "usage",
                                                 "output_tokens", (json_int_t)comp));
    web_sse_event(sc, "message_stop", json_object());
    web_stream_end(c);
}

static void create(web_conn *c)
{
    em_web *w = c->w;
    em_web_error e = { 0 };
    api_req *a = NULL;
    json_t *req = NULL, *chat = NULL;
    em_web_auth auth;
    char id[64];
    web_new_id(w, "msg_", id, sizeof id);
    snprintf(c->rid, sizeof c->rid, "%s", id);
    json_error_t je;
    if (!auth_of(c, &auth, &e) && !web_rate_check(w, &auth, &e) &&
        !(req = json_loadb(c->body.s ? c->body.s : "", c->body.n, JSON_REJECT_DUPLICATES, &je)))
        em_web_fail(&e, 400, "invalid_request_error", NULL, NULL, "the request body is not valid JSON: %s (line %d, "
                    "column %d)", je.text, je.line, je.column);
    if (!e.status)
        chat = to_chat(req, 0, &e);
    /* (a refusal so far goes through too: its ledger row is the generation path's) */
    if (web_api_start(w, chat, WEB_API_MESSAGES, &auth, c->addr, id, NULL, &a, &e))
        goto fail;
    msg_door *d = calloc(1, sizeof *d);
    if (d)
        d->msg = json_pack("{s:s, s:s, s:s, s:[], s:s, s:n, s:n}", "id", id, "type", "message", "role", "assistant",
                           "content", "model", w->model_id, "stop_reason", "stop_sequence");
    if (!d || !d->msg) {
        free(d);
        web_openai_free(a);
        em_web_fail(&e, 500, "server_error", NULL, NULL, "out of memory");
        goto fail;
    }
    d->stop = json_incref(json_object_get(req, "stop_sequences"));
    web_api_go(c, a, d, door_free, pump);
    json_decref(req);
    json_decref(chat);
    return;
fail:
    json_decref(req);
    json_decref(chat);
    respond_error(c, &e);
}

static void count_tokens(web_conn *c)
{
    em_web_error e = { 0 };
    em_web_auth auth;
    json_t *req = NULL, *chat = NULL;
    json_error_t je;
    uint32_t n = 0;
    if (!auth_of(c, &auth, &e) && !web_rate_check(c->w, &auth, &e) &&
        !(req = json_loadb(c->body.s ? c->body.s : "", c->body.n, JSON_REJECT_DUPLICATES, &je)))
        em_web_fail(&e, 400, "invalid_request_error", NULL, NULL, "the request body is not valid JSON: %s (line %d, "
                    "column %d)", je.text, je.line, je.column);
    if (!e.status && (chat = to_chat(req, 1, &e)) && !web_api_count(c->w, chat, &auth, &n, &e)) {
        json_t *j = json_pack("{s:I}", "input_tokens", (json_int_t)n);
        web_respond_json(c, 200, j);
        json_decref(j);
    } else {
        respond_error(c, &e);
    }
    json_decref(req);
    json_decref(chat);
}

int web_messages_route(web_conn *c)
{
    const char *p = c->path;
    if (strcmp(p, "/v1/messages") && strcmp(p, "/v1/messages/count_tokens"))
        return 1;
    if (c->method != EM_M_POST) {
        em_web_error e = { 0 };
        em_web_fail(&e, 405, "invalid_request_error", "method_not_allowed", NULL, "%s takes POST", p);
        respond_error(c, &e);
    } else if (!strcmp(p, "/v1/messages")) {
        create(c);
    } else {
        count_tokens(c);
    }
    return 0;
}
