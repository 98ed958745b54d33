/* openai.c — the OpenAI-compatible HTTP API: POST /v1/chat/completions and
 * POST /v1/completions (plain JSON, or with "stream": true Server-Sent
 * Events: role first, content deltas, finish_reason on the choice's last
 * chunk, an optional usage chunk, then [DONE]), GET /v1/models and
 * /v1/models/ID. It parses the request body (its parameters are params.c's,
 * shared with the WebSocket protocol and batch lines: what is not built is
 * refused with a 400, never silently ignored), hands the request to the one
 * generation path (gen.c), and frames what comes back, from the response
 * cache when it has the answer. Errors are OpenAI's shape and statuses. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"
#include "core/model/model.h"
#include "web/api_req.h"

#define BACKLOG_MAX (256 * 1024)   /* a slow reader: stop pulling events past this */


static void api_free(api_req *a)
{
    if (!a)
        return;
    if (a->door_free)
        a->door_free(a->door);
    free(a->cached);
    for (uint32_t i = 0; i < EM_GEN_MAX_N; i++)
        json_decref(a->lp_all[i]);
    em_gen_destroy(a->gen);
    web_tools_free(&a->tools);
    json_decref(a->body);
    json_decref(a->tvars);
    em_buf_free(&a->rdelta);
    for (int i = 0; i < EM_GEN_MAX_N; i++) {
        em_buf_free(&a->delta[i]);
    }
    free(a);
}

void web_openai_close(web_conn *c)
{
    if (!c->api)
        return;
    web_live_remove(c);
    api_free(c->api);
    c->api = NULL;
}

/* ---- responses -------------------------------------------------------------- */

static json_t *usage_json(const api_req *a)
{
    uint32_t prompt, cached, comp;
    em_gen_usage(a->gen, &prompt, &cached, &comp);
    return json_pack("{s:I, s:I, s:I, s:{s:I}, s:{s:I}}", "prompt_tokens", (json_int_t)prompt, "completion_tokens",
                     (json_int_t)comp, "total_tokens", (json_int_t)(prompt + comp), "prompt_tokens_details",
                     "cached_tokens", (json_int_t)cached, "completion_tokens_details", "reasoning_tokens",
                     (json_int_t)em_gen_reasoning_tokens(a->gen));
}

static json_t *envelope(const api_req *a, const em_web *w, const char *object)
{
    return json_pack("{s:s, s:s, s:I, s:s, s:n}", "id", a->id, "object", object, "created",
                     (json_int_t)a->created, "model", w->model_id, "system_fingerprint");
}

static void sse_send(web_conn *c, const json_t *j)
{
    em_buf b = { 0 };
    em_buf_add(&b, "data: ", 6);
    em_buf_add_json(&b, j);
    em_buf_add(&b, "\n\n", 2);
    web_stream_write(c, b.s, b.n);
    em_buf_free(&b);
}

/* Chat-shaped entries (em_gen_take_logprobs) in the choice's "logprobs":
 * chat {"content": [...], "refusal": null}; completions the legacy
 * {"tokens", "token_logprobs", "top_logprobs": [{token: logprob}],
 * "text_offset"}. Steals entries; null when logprobs were not asked for. */
static json_t *choice_logprobs(api_req *a, uint32_t i, json_t *entries)
{
    if (!entries)
        return json_null();
    if (a->chat)
        return json_pack("{s:o, s:n}", "content", entries, "refusal");
    json_t *toks = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    size_t k;
    json_t *en;
    json_array_foreach(entries, k, en) {
        json_array_append(toks, json_object_get(en, "token"));
        json_array_append(lps, json_object_get(en, "logprob"));
        json_t *alt = json_object(), *t;
        size_t m;
        json_array_foreach(json_object_get(en, "top_logprobs"), m, t)
            json_object_set(alt, json_string_value(json_object_get(t, "token")), json_object_get(t, "logprob"));
        json_array_append_new(tops, alt);
        json_array_append_new(offs, json_integer((json_int_t)a->text_off[i]));
        a->text_off[i] += json_array_size(json_object_get(en, "bytes"));
    }
    json_decref(entries);
    return json_pack("{s:o, s:o, s:o, s:o}", "tokens", toks, "token_logprobs", lps, "top_logprobs", tops,
                     "text_offset", offs);
}

/* Choice i's new logprob entries (lp borrowed; NULL: none) onto the whole
 * answer's (its text is gen.c's: em_gen_text). */
static void keep_choice(api_req *a, uint32_t i, json_t *lp)
{
    if (lp && !a->lp_all[i])
        a->lp_all[i] = json_copy(lp);
    else if (lp)
        json_array_extend(a->lp_all[i], lp);
}

/* Choice i's new logprob entries (NULL: none), also kept for the whole
 * answer when a stream's answer is to be cached. */
static json_t *stream_logprobs(api_req *a, uint32_t i)
{
    json_t *lp = em_gen_take_logprobs(a->gen, i);
    if (a->store)
        keep_choice(a, i, lp);
    return lp;
}

/* One SSE chunk for choice i with its new text and tool-call deltas (calls,
 * stolen; NULL: none), and finish_reason if done. */
static void stream_choice(web_conn *c, api_req *a, uint32_t i, int done, json_t *calls)
{
    json_t *ch;
    json_t *fr = done ? json_string(em_gen_finish_reason(a->gen, i)) : json_null();
    json_t *lp = stream_logprobs(a, i);
    if (a->chat) {
        json_t *delta = json_object();
        em_buf_reset(&a->rdelta);
        em_gen_take_reasoning(a->gen, i, &a->rdelta);
        if (a->rdelta.n && !a->hide_reasoning)
            json_object_set_new(delta, "reasoning_content", json_stringn(a->rdelta.s, a->rdelta.n));
        if (!a->role_sent[i]) {
            json_object_set_new(delta, "role", json_string("assistant"));
            a->role_sent[i] = 1;
        }
        if (a->delta[i].n)
            json_object_set_new(delta, "content", json_stringn(a->delta[i].s, a->delta[i].n));
        else if (json_object_get(delta, "role"))
            json_object_set_new(delta, "content", a->tools.n ? json_null() : json_string(""));
        if (calls)
            json_object_set_new(delta, "tool_calls", calls);
        ch = json_pack("{s:I, s:o, s:o, s:o}", "index", (json_int_t)i, "delta", delta, "logprobs",
                       choice_logprobs(a, i, lp), "finish_reason", fr);
    } else {
        ch = json_pack("{s:s%, s:I, s:o, s:o}", "text", a->delta[i].s ? a->delta[i].s : "", a->delta[i].n,
                       "index", (json_int_t)i, "logprobs", choice_logprobs(a, i, lp), "finish_reason", fr);
    }
    json_t *j = envelope(a, c->w, a->chat ? "chat.completion.chunk" : "text_completion");
    json_object_set_new(j, "choices", json_pack("[o]", ch));
    if (a->include_usage)
        json_object_set_new(j, "usage", json_null());
    sse_send(c, j);
    json_decref(j);
    em_buf_reset(&a->delta[i]);
}

/* A stored answer: its id and time those of this request, marked cached. */
static json_t *cached_whole(const api_req *a)
{
    json_t *j = json_loads(a->cached, 0, NULL);
    if (!j)
        return NULL;
    json_object_set_new(j, "id", json_string(a->id));
    json_object_set_new(j, "created", json_integer((json_int_t)a->created));
    json_t *u = json_object_get(j, "usage");
    if (json_is_object(u))
        json_object_set_new(u, "cached_response", json_true());
    return j;
}

/* A plain response's part of a pump: the new text and logprob entries onto
 * the whole answer's. */
static void collect_deltas(api_req *a, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        json_t *lp = em_gen_take_logprobs(a->gen, i);
        keep_choice(a, i, lp);
        json_decref(lp);
        em_buf_reset(&a->delta[i]);
        em_buf_reset(&a->rdelta);   /* (the whole reasoning is em_gen_reasoning's) */
        em_gen_take_reasoning(a->gen, i, &a->rdelta);
    }
}

/* The whole answer from what was collected (em_gen_text, a->lp_all, taken). */
static json_t *answer_json(em_web *w, api_req *a)
{
    json_t *choices = json_array();
    for (uint32_t i = 0; i < em_gen_n(a->gen); i++) {
        a->text_off[i] = 0;
        json_t *fr = json_string(em_gen_finish_reason(a->gen, i));
        size_t tn;
        const char *t = em_gen_text(a->gen, i, &tn);
        json_t *lp = choice_logprobs(a, i, a->lp_all[i]);
        a->lp_all[i] = NULL;
        json_t *ch = a->chat
            ? json_pack("{s:I, s:{s:s, s:s%, s:n}, s:o, s:o}", "index", (json_int_t)i, "message", "role",
                        "assistant", "content", t, tn, "refusal", "logprobs", lp, "finish_reason", fr)
            : json_pack("{s:s%, s:I, s:o, s:o}", "text", t, tn, "index", (json_int_t)i, "logprobs",
                        lp, "finish_reason", fr);
        size_t rn;
        const char *rt = a->chat ? em_gen_reasoning(a->gen, i, &rn) : "";
        if (a->chat && rn && !a->hide_reasoning)   /* the reasoning apart from the answer (vLLM's, DeepSeek's name) */
            json_object_set_new(json_object_get(ch, "message"), "reasoning_content", json_stringn(rt, rn));
        const json_t *calls = a->chat ? em_gen_tool_calls(a->gen, i) : NULL;
        if (calls) {   /* OpenAI: no text beside the calls is null content */
            json_t *msg = json_object_get(ch, "message");
            json_object_set_new(msg, "tool_calls", json_deep_copy(calls));
            if (!tn)
                json_object_set_new(msg, "content", json_null());
        }
        json_array_append_new(choices, ch);
    }
    json_t *j = envelope(a, w, a->chat ? "chat.completion" : "text_completion");
    json_object_set_new(j, "choices", choices);
    json_object_set_new(j, "usage", usage_json(a));
    return j;
}

/* A miss's answer j (borrowed) into the response cache, if it is to be kept
 * and complete: not one the drain or a cancel cut. */
static void cache_keep(em_web *w, api_req *a, const json_t *j)
{
    int whole = 1;
    for (uint32_t i = 0; i < em_gen_n(a->gen); i++)
        whole &= em_gen_finish(a->gen, i) == EM_FINISH_STOP || em_gen_finish(a->gen, i) == EM_FINISH_LENGTH;
    if (a->store && whole)
        web_cache_store(w, a->key, j, a->id);
    a->store = 0;
}

json_t *web_openai_whole(em_web *w, api_req *a, int *status)
{
    if (a->cached) {
        json_t *j = cached_whole(a);
        if (j) {
            *status = 200;
            return j;
        }
        em_web_error e = { 0 };
        em_web_fail(&e, 500, "server_error", NULL, NULL, "a cached answer does not read back");
        *status = 500;
        return em_web_error_json(&e);
    }
    const char *err = em_gen_error(a->gen);
    if (err) {
        em_web_error e = { 0 };
        em_web_fail(&e, 500, "server_error", NULL, NULL, "generation failed: %s", err);
        *status = 500;
        return em_web_error_json(&e);
    }
    json_t *j = answer_json(w, a);
    *status = 200;
    cache_keep(w, a, j);
    return j;
}

static void respond_whole(web_conn *c, api_req *a)
{
    int status;
    json_t *j = web_openai_whole(c->w, a, &status);
    web_respond_json(c, status, j);
    json_decref(j);
}

int web_openai_collect(api_req *a)
{
    if (a->cached)
        return 1;
    int all = em_gen_pump(a->gen, a->delta);
    collect_deltas(a, em_gen_n(a->gen));
    return all;
}

void web_openai_free(api_req *a)
{
    api_free(a);
}

void web_openai_cancel(api_req *a)
{
    if (a && a->gen)
        em_gen_cancel(a->gen);
}

/* ---- answers from the response cache (cache.c) ------------------------------- */

/* A cached answer to c: whole, or as the stream its request asked for (one
 * chunk of each choice's text, one with its finish_reason, the usage if
 * asked, [DONE]). */
static void respond_cached(web_conn *c, api_req *a)
{
    int status;
    json_t *j = web_openai_whole(c->w, a, &status);
    if (!a->stream || status != 200) {
        web_respond_json(c, status, j);
        json_decref(j);
        return;
    }
    web_stream_begin(c, 200, "text/event-stream");
    size_t i;
    json_t *ch;
    json_array_foreach(json_object_get(j, "choices"), i, ch) {
        for (int last = 0; last < 2; last++) {
            json_t *env = envelope(a, c->w, a->chat ? "chat.completion.chunk" : "text_completion"), *one;
            json_t *fr = last ? json_incref(json_object_get(ch, "finish_reason")) : json_null();
            json_t *lp = last ? json_null() : json_incref(json_object_get(ch, "logprobs"));
            if (a->chat) {
                json_t *msg = json_object_get(ch, "message");
                json_t *delta = last ? json_object()
                                     : json_pack("{s:s, s:O}", "role", "assistant", "content",
                                                 json_object_get(msg, "content"));
                one = json_pack("{s:I, s:o, s:o, s:o}", "index", (json_int_t)i, "delta", delta, "logprobs", lp,
                                "finish_reason", fr);
            } else {
                one = json_pack("{s:s, s:I, s:o, s:o}", "text",
                                last ? "" : json_string_value(json_object_get(ch, "text")), "index", (json_int_t)i,
                                "logprobs", lp, "finish_reason", fr);
            }
            json_object_set_new(env, "choices", json_pack("[o]", one));
            if (a->include_usage)
                json_object_set_new(env, "usage", json_null());
            sse_send(c, env);
            json_decref(env);
        }
    }
    if (a->include_usage) {
        json_t *env = envelope(a, c->w, a->chat ? "chat.completion.chunk" : "text_completion");
        json_object_set_new(env, "choices", json_array());
        json_object_set(env, "usage", json_object_get(j, "usage"));
        sse_send(c, env);
        json_decref(env);
    }
    json_decref(j);
    web_stream_write(c, "data: [DONE]\n\n", 14);
    web_stream_end(c);
}

void web_openai_pump(web_conn *c)
{
    api_req *a = c->api;
    if (!a || c->complete)
        return;
    if (a->door_pump) {   /* another door's framing (responses.c, messages.c) */
        if (!a->stream || c->head_sent)
            a->door_pump(c);
        return;
    }
    if (a->stream && !c->head_sent)
        return;   /* the headers go first */
    if (web_backlog(c) > BACKLOG_MAX)
        return;   /* the client reads slowly: the events wait and come coalesced */
    uint32_t n = em_gen_n(a->gen);
    int all = em_gen_pump(a->gen, a->delta);
    /* stopped by the drain: the client gets an error, not a short answer */
    em_web_error se = { 0 };
    int stopped = all && em_gen_drain_error(a->gen, &se);
    if (!a->stream) {
        collect_deltas(a, n);
        if (stopped)
            web_respond_error(c, &se);
        else if (all)
            respond_whole(c, a);
        return;
    }
    for (uint32_t i = 0; i < n; i++) {
        int done = em_gen_choice_done(a->gen, i) && !a->finish_sent[i];
        json_t *calls = em_gen_take_tool_deltas(a->gen, i);
        size_t rn = 0;
        em_gen_reasoning(a->gen, i, &rn);
        int more_reasoning = a->chat && rn > a->rsent[i];
        a->rsent[i] = rn;
        if (a->delta[i].n || done || calls || more_reasoning || (a->chat && !a->role_sent[i]))
            stream_choice(c, a, i, done, calls);
        if (done)
            a->finish_sent[i] = 1;
    }
    if (!all)
        return;
    const char *err = em_gen_error(a->gen);
    if (err || stopped) {
        em_web_error e = { 0 };
        if (err)
            em_web_fail(&e, 500, "server_error", NULL, NULL, "generation failed: %s", err);
        json_t *j = em_web_error_json(err ? &e : &se);
        sse_send(c, j);
        json_decref(j);
    }
    if (a->include_usage) {
        json_t *j = envelope(a, c->w, a->chat ? "chat.completion.chunk" : "text_completion");
        json_object_set_new(j, "choices", json_array());
        json_object_set_new(j, "usage", usage_json(a));
        sse_send(c, j);
        json_decref(j);
    }
    web_stream_write(c, "data: [DONE]\n\n", 14);
    web_stream_end(c);
    if (a->store && !err && !stopped) {   /* a streamed miss is kept as the whole answer it was */
        json_t *j = answer_json(c->w, a);
        cache_keep(c->w, a, j);
        json_decref(j);
    }
}

/* ---- what the other doors share ----------------------------------------------- */

void web_api_go(web_conn *c, api_req *a, void *door, void (*door_free)(void *), void (*door_pump)(web_conn *c))
{
    a->door = door;
    a->door_free = door_free;
    a->door_pump = door_pump;
    c->api = a;
    web_live_add(c);
    if (a->stream)
        web_stream_begin(c, 200, "text/event-stream");
}

void web_sse_event(web_conn *c, const char *type, json_t *j)
{
    json_object_set_new(j, "type", json_string(type));
    if (c) {
        em_buf b = { 0 };
        em_buf_addf(&b, "event: %s\ndata: ", type);
        em_buf_add_json(&b, j);
        em_buf_add(&b, "\n\n", 2);
        web_stream_write(c, b.s, b.n);
        em_buf_free(&b);
    }
    json_decref(j);
}

void web_api_take(api_req *a, void (*piece)(void *ctx, int kind, const char *s, size_t n, const json_t *call),
                  void *ctx)
{
    em_buf r = { 0 };
    em_gen_take_reasoning(a->gen, 0, &r);
    if (r.n)
        piece(ctx, WEB_PIECE_REASONING, r.s, r.n, NULL);
    em_buf_free(&r);
    if (a->delta[0].n)
        piece(ctx, WEB_PIECE_TEXT, a->delta[0].s, a->delta[0].n, NULL);
    em_buf_reset(&a->delta[0]);
    json_t *calls = em_gen_take_tool_deltas(a->gen, 0), *cd;
    size_t k;
    json_array_foreach(calls, k, cd) {
        if (json_object_get(cd, "id"))
            piece(ctx, WEB_PIECE_CALL, "", 0, cd);
        json_t *frag = json_object_get(json_object_get(cd, "function"), "arguments");
        if (json_string_length(frag))
            piece(ctx, WEB_PIECE_ARGS, json_string_value(frag), json_string_length(frag), NULL);
    }
    json_decref(calls);
}

/* ---- requests ----------------------------------------------------------------- */

void web_new_id(em_web *w, const char *prefix, char *out, size_t cap)
{
    static const char digits[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    unsigned char r[16];
    if (getentropy(r, sizeof r) != 0) {
        pthread_mutex_lock(&w->mu);
        uint64_t s = ++w->seq;
        pthread_mutex_unlock(&w->mu);
        memcpy(r, &s, sizeof s);
        memset(r + 8, 0x5a, 8);
    }
    size_t k = (size_t)snprintf(out, cap, "%s", prefix);
    for (size_t i = 0; i < sizeof r && k + 1 < cap; i++)
        out[k++] = digits[r[i] % (sizeof digits - 1)];
    out[k] = 0;
}

/* A chat's reasoning parameters: include_reasoning (false: the reasoning is
 * not sent back; its tokens still count), reasoning_budget (the think
 * block's tokens at most: then it is closed), reasoning_effort and
 * chat_template_kwargs (variables the template reads: enable_thinking,
 * reasoning_effort, as transformers' apply_chat_template takes them). 0, or
 * -1 with e filled (400). */
static int reasoning_params(json_t *req, api_req *a, em_web_error *e)
{
    int inc = 1;
    long long budget = 0;
    if (web_want_bool(req, "include_reasoning", &inc, e) ||
        web_want_int(req, "reasoning_budget", 1, 1 << 24, &budget, e))
        return -1;
    a->budget = (uint32_t)budget;
    a->hide_reasoning = !inc;
    json_t *kw = json_object_get(req, "chat_template_kwargs"), *eff = json_object_get(req, "reasoning_effort");
    if (kw && !json_is_null(kw) && !json_is_object(kw))
        return em_web_fail(e, 400, "invalid_request_error", NULL, "chat_template_kwargs",
                           "'chat_template_kwargs' must be an object of template variables");
    const char *ev = json_string_value(eff);
    if (eff && !json_is_null(eff) && (!ev || (strcmp(ev, "minimal") && strcmp(ev, "low") && strcmp(ev, "medium") &&
                                             strcmp(ev, "high"))))
        return em_web_fail(e, 400, "invalid_request_error", NULL, "reasoning_effort",
                           "'reasoning_effort' must be 'minimal', 'low', 'medium' or 'high'");
    if ((kw && json_is_object(kw)) || ev) {
        a->tvars = kw && json_is_object(kw) ? json_deep_copy(kw) : json_object();
        if (ev && !json_object_get(a->tvars, "reasoning_effort"))
            json_object_set_new(a->tvars, "reasoning_effort", json_string(ev));
    }
    return 0;
}

int web_model_check(em_web *w, const json_t *req, em_web_error *e)
{
    json_t *model = json_object_get(req, "model");
    if (model && !json_is_string(model))
        return em_web_fail(e, 400, "invalid_request_error", NULL, "model", "'model' must be a string");
    if (model && strcmp(json_string_value(model), w->model_id) != 0)
        return em_web_fail(e, 404, "invalid_request_error", "model_not_found", "model",
                           "The model '%s' does not exist; this server serves '%s'.", json_string_value(model),
                           w->model_id);
    return 0;
}

/* Check a completions body and start it: see web_int.h. */
int web_openai_start(em_web *w, json_t *req, int chat, const em_web_auth *auth, const char *addr, const char *id,
                     const char *batch_id, api_req **out, em_web_error *e)
{
    return web_api_start(w, req, chat ? WEB_API_CHAT : WEB_API_COMPLETIONS, auth, addr, id, batch_id, out, e);
}

/* web_api_start, or with count non-NULL web_api_count: the prompt's tokens
 * counted instead of run (and no ledger row). */
static int api_begin(em_web *w, json_t *req, int kind, const em_web_auth *auth, const char *addr, const char *id,
                     const char *batch_id, api_req **out, uint32_t *count, em_web_error *e)
{
    int chat = kind != WEB_API_COMPLETIONS;
    static const char *const endpoints[] = { "completions", "chat.completions", "responses", "messages" };
    api_req *a = NULL;
    json_t *msgs = NULL;
    em_gen *none = NULL;
    *out = NULL;
    em_gen_params gp = { .n = 1, .max_tokens = -1, .auth = auth, .client_addr = addr, .request_id = id,
                         .batch_id = batch_id, .cls = batch_id ? EM_CLASS_BACKGROUND : EM_CLASS_INTERACTIVE,
                         .endpoint = endpoints[kind] };
    int background = batch_id != NULL;
    if (e->status)   /* refused at the door (auth, rate, the body's JSON) */
        goto fail;
    if (!json_is_object(req)) {
        em_web_fail(e, 400, "invalid_request_error", NULL, NULL, "the request body must be a JSON object");
        goto fail;
    }
    if (web_model_check(w, req, e))
        goto fail;
    if (web_params_check(req, chat ? WEB_DOOR_CHAT : WEB_DOOR_COMPLETIONS, e))
        goto fail;
    if (web_gen_params(req, auth, &gp, e))
        goto fail;
    if (background)
        gp.cls = EM_CLASS_BACKGROUND;
    long long mct = -1, n = 1;
    int stream = 0, include_usage = 0;
    if (web_want_int(req, "max_completion_tokens", 1, 1 << 24, &mct, e) ||
        web_want_int(req, "n", 1, EM_GEN_MAX_N, &n, e) || web_want_bool(req, "stream", &stream, e))
        goto fail;
    if (stream && background) {
        em_web_fail(e, 400, "invalid_request_error", NULL, "stream", "a batch's requests cannot stream");
        goto fail;
    }
    json_t *so = json_object_get(req, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so) || web_want_bool(so, "include_usage", &include_usage, e)) {
            if (!e->status)
                em_web_fail(e, 400, "invalid_request_error", NULL, "stream_options",
                            "'stream_options' must be an object");
            goto fail;
        }
        if (!stream) {
            em_web_fail(e, 400, "invalid_request_error", NULL, "stream_options",
                        "'stream_options' is only allowed when 'stream' is true");
            goto fail;
        }
    }
    if (mct > 0)
        gp.max_tokens = mct;
    gp.n = (uint32_t)n;
    gp.structure = req;   /* response_format, grammar, regex: read by em_gen_start */
    json_t *user = json_object_get(req, "user");
    if (user && !json_is_null(user) && !json_is_string(user)) {
        em_web_fail(e, 400, "invalid_request_error", NULL, "user", "'user' must be a string");
        goto fail;
    }
    a = calloc(1, sizeof *a);
    if (!a) {
        em_web_fail(e, 500, "server_error", NULL, NULL, "out of memory");
        goto fail;
    }
    if (chat) {
        if (web_tools_parse(req, &a->tools, e) || reasoning_params(req, a, e))
            goto fail;
        gp.template_vars = a->tvars;
        gp.reasoning_budget = a->budget;
        gp.tools = &a->tools;
        a->body = json_incref(req);   /* the tools' names and schemas point into it */
        if (!(msgs = web_messages_check(json_object_get(req, "messages"), e)))
            goto fail;
        gp.messages = msgs;
        gp.param_name = "messages";
    } else {
        json_t *p = json_object_get(req, "prompt");
        if (json_is_array(p) && json_array_size(p) == 1 && json_is_string(json_array_get(p, 0)))
            p = json_array_get(p, 0);
        if (!json_is_string(p)) {
            em_web_fail(e, 400, "invalid_request_error", NULL, "prompt",
                        "'prompt' must be a string (or an array of one string)");
            goto fail;
        }
        gp.prompt = json_string_value(p);
        gp.prompt_len = json_string_length(p);
        gp.param_name = "prompt";
    }
    json_t *cv = json_object_get(req, "cache");
    if (cv && !json_is_boolean(cv)) {
        em_web_fail(e, 400, "invalid_request_error", NULL, "cache", "'cache' must be true or false");
        goto fail;
    }
    if (count) {
        int rc = em_gen_count_prompt(w, &gp, count, e);
        api_free(a);
        json_decref(msgs);
        return rc;
    }
    a->chat = chat;
    a->kind = kind;
    a->stream = stream;
    a->include_usage = include_usage;
    a->auth = *auth;
    a->created = (int64_t)time(NULL);
    snprintf(a->id, sizeof a->id, "%s", id);
    /* deterministic (greedy, or a seed given) and not refused: the cache */
    if (!json_is_false(cv) && !auth->no_cache && !a->tools.n && kind <= WEB_API_CHAT &&
        (gp.sample.temp == 0 || gp.sample.top_k == 1 || json_object_get(req, "seed"))) {
        const char *fr = NULL;
        double ms = 0;
        int hit = web_cache_lookup(w, req, chat, a->key, &a->cached, &fr, &ms);
        if (hit > 0) {
            em_gen_cached(w, id, gp.endpoint, auth, addr, gp.cls, batch_id, fr, ms);
            json_decref(msgs);
            *out = a;
            return 0;
        }
        a->store = hit == 0;
    }
    if (em_gen_start(w, &gp, &a->gen, e))
        goto done;
    json_decref(msgs);
    *out = a;
    return 0;
fail:   /* refused before the start: em_gen_start writes its row */
    if (!count)
        em_gen_start(w, &gp, &none, e);
done:
    api_free(a);
    json_decref(msgs);
    return -1;
}

int web_api_start(em_web *w, json_t *req, int kind, const em_web_auth *auth, const char *addr, const char *id,
                  const char *batch_id, api_req **out, em_web_error *e)
{
    return api_begin(w, req, kind, auth, addr, id, batch_id, out, NULL, e);
}

int web_api_count(em_web *w, json_t *req, const em_web_auth *auth, uint32_t *n, em_web_error *e)
{
    api_req *none = NULL;
    return api_begin(w, req, WEB_API_CHAT, auth, "", "", NULL, &none, n, e);
}

json_t *web_door_begin(web_conn *c, const char *prefix, char *id, size_t cap, em_web_auth *auth, em_web_error *e)
{
    json_t *req = NULL;
    json_error_t je;
    web_new_id(c->w, prefix, id, cap);
    snprintf(c->rid, sizeof c->rid, "%s", id);   /* for the log lines of this request */
    if (!web_auth(c->w, c, auth, e) && !web_rate_check(c->w, auth, e) &&
        !(req = json_loadb(c->body.s ? c->body.s : "", c->body.n, JSON_REJECT_DUPLICATES, &je)))
        em_web_fail(e, 400, "invalid_request_error", NULL, NULL, "We could not parse the JSON body of your "
                    "request: %s (line %d, column %d).", je.text, je.line, je.column);
    return req;
}

static void completions(web_conn *c, int chat)
{
    em_web *w = c->w;
    em_web_error e = { 0 };
    api_req *a = NULL;
    json_t *req = NULL;
    em_web_auth auth;
    char id[64];
    req = web_door_begin(c, chat ? "chatcmpl-" : "cmpl-", id, sizeof id, &auth, &e);
    /* (a refusal so far goes through too: its ledger row is the generation path's) */
    if (web_openai_start(w, req, chat, &auth, c->addr, id, NULL, &a, &e))
        goto fail;
    if (a->cached) {   /* from the response cache: the whole answer now */
        respond_cached(c, a);
        api_free(a);
        json_decref(req);
        return;
    }
    web_api_go(c, a, NULL, NULL, NULL);
    json_decref(req);
    return;
fail:
    json_decref(req);
    web_respond_error(c, &e);
}

static void models(web_conn *c, const char *id)
{
    em_web_error e = { 0 };
    em_web_auth auth;
    if (web_auth(c->w, c, &auth, &e)) {
        web_respond_error(c, &e);
        return;
    }
    json_t *m = json_pack("{s:s, s:s, s:I, s:s, s:b}", "id", c->w->model_id, "object", "model", "created",
                          (json_int_t)time(NULL), "owned_by", "ember", "generates_text",
                          !em_model_hparams(c->w->o.model)->encoder);
    if (id) {
        if (strcmp(id, c->w->model_id) != 0) {
            json_decref(m);
            em_web_fail(&e, 404, "invalid_request_error", "model_not_found", "model",
                        "The model '%s' does not exist; this server serves '%s'.", id, c->w->model_id);
            web_respond_error(c, &e);
            return;
        }
        web_respond_json(c, 200, m);
        json_decref(m);
        return;
    }
    json_t *j = json_pack("{s:s, s:[o]}", "object", "list", "data", m);
    web_respond_json(c, 200, j);
    json_decref(j);
}

int web_openai_route(web_conn *c)
{
    const char *p = c->path;
    if (strncmp(p, "/v1/", 4) != 0)
        return 1;
    em_web_error e = { 0 };
    int post = c->method == EM_M_POST, get = c->method == EM_M_GET;
    if (strcmp(p, "/v1/chat/completions") == 0 || strcmp(p, "/v1/completions") == 0) {
        if (!post) {
            em_web_fail(&e, 405, "invalid_request_error", "method_not_allowed", NULL, "%s takes POST", p);
            web_respond_error(c, &e);
        } else {
            completions(c, strcmp(p, "/v1/chat/completions") == 0);
        }
        return 0;
    }
    if (get && strcmp(p, "/v1/models") == 0) {
        models(c, NULL);
        return 0;
    }
    if (get && strncmp(p, "/v1/models/", 11) == 0) {
        models(c, p + 11);
        return 0;
    }
    return 1;
}
