/* openai.c — the OpenAI-compatible HTTP API: POST /v1/chat/completions and
 * POST /v1/completions (plain JSON, or with "stream": true Server-Sent
 * Events: role first, content deltas, finish_reason on the choice's last
 * chunk, an optional usage chunk, then [DONE]), GET /v1/models and
 * /v1/models/ID. It parses and checks the request body (every parameter's
 * type and range; the parameters the decoding issue has yet to implement
 * are refused with a 400, never silently ignored; the sampling ones in
 * web_gen_params, which the WebSocket protocol shares), hands the request
 * to the one generation path (gen.c), and frames what comes back. Errors
 * are OpenAI's shape and statuses. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>

#include "core/log.h"
#include "core/model/model.h"
#include "web/web_int.h"

#define BACKLOG_MAX (256 * 1024)   /* a slow reader: stop pulling events past this */

typedef struct api_req {
    int         chat;              /* chat.completion, else text_completion */
    int         stream, include_usage;
    char        id[64];
    int64_t     created;
    em_web_auth auth;
    em_gen     *gen;
    em_buf      delta[EM_GEN_MAX_N];
    em_buf      text[EM_GEN_MAX_N];   /* the whole answer (plain responses, streams to be cached) */
    int         role_sent[EM_GEN_MAX_N], finish_sent[EM_GEN_MAX_N];
    int         drain_stopped;     /* cancelled because the drain's time was up */
    json_t     *lp_all[EM_GEN_MAX_N];   /* every entry so far (as text[]) */
    size_t      text_off[EM_GEN_MAX_N]; /* completions' text_offset of the next token */
    /* the response cache: a hit's whole response (no generation), or a
     * miss to store once done */
    char       *cached;
    int         store;
    unsigned char key[EM_STORAGE_CACHE_KEY];
} api_req;

static void api_free(api_req *a)
{
    if (!a)
        return;
    free(a->cached);
    for (uint32_t i = 0; i < EM_GEN_MAX_N; i++)
        json_decref(a->lp_all[i]);
    em_gen_destroy(a->gen);
    for (int i = 0; i < EM_GEN_MAX_N; i++) {
        em_buf_free(&a->delta[i]);
        em_buf_free(&a->text[i]);
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

/* ---- parameters -------------------------------------------------------------- */

static int want_number(json_t *req, const char *name, double lo, double hi, double *out, em_web_error *e)
{
    json_t *v = json_object_get(req, name);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_number(v))
        return em_web_fail(e, 400, "invalid_request_error", NULL, name, "'%s' must be a number", name);
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi))
        return em_web_fail(e, 400, "invalid_request_error", NULL, name, "%g is not a valid '%s': it must "
                           "be between %g and %g", x, name, lo, hi);
    *out = x;
    return 0;
}

static int want_int(json_t *req, const char *name, long long lo, long long hi, long long *out, em_web_error *e)
{
    json_t *v = json_object_get(req, name);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v))
        return em_web_fail(e, 400, "invalid_request_error", NULL, name, "'%s' must be an integer", name);
    long long x = json_integer_value(v);
    if (x < lo || x > hi)
        return em_web_fail(e, 400, "invalid_request_error", NULL, name, "%lld is not a valid '%s': it must "
                           "be between %lld and %lld", x, name, lo, hi);
    *out = x;
    return 0;
}

static int want_bool(json_t *req, const char *name, int *out, em_web_error *e)
{
    json_t *v = json_object_get(req, name);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_boolean(v))
        return em_web_fail(e, 400, "invalid_request_error", NULL, name, "'%s' must be true or false", name);
    *out = json_is_true(v);
    return 0;
}

/* What the decoding issue has yet to build, and what this server does not
 * offer: a 400 naming it, unless the value is the one that changes nothing. */
static int refuse_unbuilt(json_t *req, em_web_error *e)
{
    json_t *v;
    if ((v = json_object_get(req, "tools")) && !json_is_null(v) && !(json_is_array(v) && !json_array_size(v)))
        return em_web_fail(e, 400, "invalid_request_error", "unsupported_parameter", "tools",
                           "'tools' (function calling) is not supported by this server");
    if ((v = json_object_get(req, "functions")) && !json_is_null(v))
        return em_web_fail(e, 400, "invalid_request_error", "unsupported_parameter", "functions",
                           "'functions' (function calling) is not supported by this server");
    if ((v = json_object_get(req, "echo")) && json_is_true(v))
        return em_web_fail(e, 400, "invalid_request_error", "unsupported_parameter", "echo",
                           "'echo' is not supported by this server");
    if ((v = json_object_get(req, "best_of")) && !json_is_null(v) &&
        !(json_is_integer(v) && json_integer_value(v) == 1))
        return em_web_fail(e, 400, "invalid_request_error", "unsupported_parameter", "best_of",
                           "'best_of' is not supported by this server");
    if ((v = json_object_get(req, "suffix")) && !json_is_null(v) &&
        !(json_is_string(v) && !json_string_length(v)))
        return em_web_fail(e, 400, "invalid_request_error", "unsupported_parameter", "suffix",
                           "'suffix' is not supported by this server");
    return 0;
}

static int penalties(json_t *obj, em_gen_params *gp, em_web_error *e)
{
    double pres = 0, freq = 0, rep = 1;
    if (want_number(obj, "presence_penalty", -2, 2, &pres, e) ||
        want_number(obj, "frequency_penalty", -2, 2, &freq, e) ||
        want_number(obj, "repetition_penalty", 0, 10, &rep, e))
        return -1;
    if (rep <= 0)
        return em_web_fail(e, 400, "invalid_request_error", NULL, "repetition_penalty",
                           "'repetition_penalty' must be above 0 (1: off)");
    gp->sample.presence_penalty = (float)pres;
    gp->sample.frequency_penalty = (float)freq;
    gp->sample.repetition_penalty = (float)rep;
    return 0;
}

/* {"token id": bias, ...}: ids as decimal strings, biases in [-100, 100]
 * (ids past the vocabulary: the scheduler refuses them, naming the id). */
static int logit_bias(json_t *obj, em_gen_params *gp, em_web_error *e)
{
    json_t *lb = json_object_get(obj, "logit_bias");
    gp->sample.logit_bias = gp->bias;
    gp->sample.n_logit_bias = 0;
    if (!lb || json_is_null(lb))
        return 0;
    if (!json_is_object(lb))
        return em_web_fail(e, 400, "invalid_request_error", NULL, "logit_bias",
                           "'logit_bias' must be an object mapping token ids to biases");
    if (json_object_size(lb) > EM_GEN_MAX_BIAS)
        return em_web_fail(e, 400, "invalid_request_error", NULL, "logit_bias",
                           "'logit_bias' holds %zu tokens (at most %d)", json_object_size(lb), EM_GEN_MAX_BIAS);
    const char *k;
    json_t *v;
    json_object_foreach(lb, k, v) {
        char *end = NULL;
        long id = strtol(k, &end, 10);
        if (!*k || *end || id < 0 || id > INT32_MAX || (k[0] == '0' && k[1]))
            return em_web_fail(e, 400, "invalid_request_error", NULL, "logit_bias",
                               "'logit_bias' key '%s' is not a token id (a non-negative integer)", k);
        if (!json_is_number(v) || !(json_number_value(v) >= -100 && json_number_value(v) <= 100))
            return em_web_fail(e, 400, "invalid_request_error", NULL, "logit_bias",
                               "'logit_bias' of token %ld must be a number between -100 and 100", id);
        gp->bias[gp->sample.n_logit_bias++] = (em_logit_bias){ (int32_t)id, (float)json_number_value(v) };
    }
    return 0;
}

/* Chat: "logprobs": true with "top_logprobs": 0..20; completions:
 * "logprobs": 0..20 alternatives (OpenAI stops at 5; ember gives up to 20). */
static int logprobs(json_t *obj, em_gen_params *gp, em_web_error *e)
{
    json_t *lp = json_object_get(obj, "logprobs");
    long long top = -1;
    if (want_int(obj, "top_logprobs", 0, EM_SAMPLE_MAX_TOP, &top, e))
        return -1;
    gp->logprobs = 0;
    gp->top_logprobs = 0;
    if (lp && json_is_integer(lp)) {
        long long n = json_integer_value(lp);
        if (n < 0 || n > EM_SAMPLE_MAX_TOP)
            return em_web_fail(e, 400, "invalid_request_error", NULL, "logprobs",
                               "%lld is not a valid 'logprobs': it must be between 0 and %d", n, EM_SAMPLE_MAX_TOP);
        if (top >= 0)
            return em_web_fail(e, 400, "invalid_request_error", NULL, "top_logprobs",
                               "'top_logprobs' goes with \"logprobs\": true; a number of alternatives in "
                               "'logprobs' already says how many");
        gp->logprobs = 1;
        gp->top_logprobs = (uint32_t)n;
        return 0;
    }
    if (lp && !json_is_null(lp) && !json_is_boolean(lp))
        return em_web_fail(e, 400, "invalid_request_error", NULL, "logprobs",
                           "'logprobs' must be true or false (or, as in completions, a number of alternatives)");
    gp->logprobs = json_is_true(lp);
    if (top > 0 && !gp->logprobs)
        return em_web_fail(e, 400, "invalid_request_error", NULL, "top_logprobs",
                           "'top_logprobs' needs \"logprobs\": true");
    gp->top_logprobs = top > 0 ? (uint32_t)top : 0;
    return 0;
}

int web_gen_params(json_t *obj, const em_web_auth *auth, em_gen_params *gp, em_web_error *e)
{
    gp->sample = em_sample_defaults();
    gp->sample.temp = 1.0f;
    gp->sample.top_p = 1.0f;
    gp->sample.top_k = 0;
    gp->sample.min_p = 0;
    gp->max_tokens = -1;
    double temp = 1, top_p = 1, min_p = 0;
    long long max_tokens = -1, top_k = 0, seed = -1;
    int ignore_eos = 0;
    if (want_number(obj, "temperature", 0, 2, &temp, e) || want_number(obj, "top_p", 0, 1, &top_p, e) ||
        want_number(obj, "min_p", 0, 1, &min_p, e) || want_int(obj, "top_k", 0, 1 << 20, &top_k, e) ||
        want_int(obj, "max_tokens", 1, 1 << 24, &max_tokens, e) ||
        want_int(obj, "seed", -(1LL << 62), 1LL << 62, &seed, e) || want_bool(obj, "ignore_eos", &ignore_eos, e))
        return -1;
    if (top_p <= 0)
        return em_web_fail(e, 400, "invalid_request_error", NULL, "top_p", "'top_p' must be above 0");
    gp->sample.temp = (float)temp;
    gp->sample.top_p = (float)top_p;
    gp->sample.min_p = (float)min_p;
    gp->sample.top_k = (int32_t)top_k;
    if (seed >= 0 || seed < -1)
        gp->sample.seed = (uint64_t)seed;
    else if (getentropy(&gp->sample.seed, sizeof gp->sample.seed) != 0)
        gp->sample.seed = (uint64_t)time(NULL);
    gp->max_tokens = max_tokens;
    gp->ignore_eos = ignore_eos;
    if (penalties(obj, gp, e) || logit_bias(obj, gp, e) || logprobs(obj, gp, e))
        return -1;
    /* speculative decoding: "prompt_lookup" or "draft_model" (drafts of up
     * to 4 tokens, or {"method": ..., "max_draft": 1..8}), "off", or absent:
     * the server's --speculate (with --draft-model: its draft model) */
    json_t *sv = json_object_get(obj, "speculative");
    gp->speculate = 0;
    gp->spec_method = EM_SPEC_AUTO;
    const char *method = json_is_string(sv) ? json_string_value(sv)
                       : json_is_object(sv) ? json_string_value(json_object_get(sv, "method")) : NULL;
    if (json_is_string(sv) && strcmp(method, "off") == 0) {
        gp->speculate = -1;
    } else if (json_is_string(sv) || json_is_object(sv)) {
        long long k = 4;
        if (method && strcmp(method, "prompt_lookup") == 0)
            gp->spec_method = EM_SPEC_LOOKUP;
        else if (method && strcmp(method, "draft_model") == 0)
            gp->spec_method = EM_SPEC_DRAFT;
        else
            return em_web_fail(e, 400, "invalid_request_error", NULL, "speculative",
                               json_is_object(sv) ? "'speculative.method' must be \"prompt_lookup\" or \"draft_model\""
                                                  : "'speculative' must be \"prompt_lookup\", \"draft_model\", "
                                                    "\"off\" or {\"method\": ..., \"max_draft\": 1..8}");
        if (json_is_object(sv) && want_int(sv, "max_draft", 1, EM_SCHED_MAX_DRAFT, &k, e))
            return -1;
        gp->speculate = (int32_t)k;
    } else if (sv && !json_is_null(sv)) {
        return em_web_fail(e, 400, "invalid_request_error", NULL, "speculative",
                           "'speculative' must be \"prompt_lookup\", \"draft_model\", \"off\" or "
                           "{\"method\": ..., \"max_draft\": 1..8}");
    }
    /* stop: a string or up to 4 strings */
    json_t *stop = json_object_get(obj, "stop");
    if (json_is_string(stop)) {
        if (json_string_length(stop))
            gp->stop[0] = json_string_value(stop);
    } else if (json_is_array(stop)) {
        if (json_array_size(stop) > EM_MAX_STOP)
            return em_web_fail(e, 400, "invalid_request_error", NULL, "stop", "'stop' holds at most %d strings",
                               EM_MAX_STOP);
        size_t i;
        json_t *s;
        json_array_foreach(stop, i, s) {
            if (!json_is_string(s) || !json_string_length(s))
                return em_web_fail(e, 400, "invalid_request_error", NULL, "stop",
                                   "'stop' must hold non-empty strings");
            gp->stop[i] = json_string_value(s);
        }
    } else if (stop && !json_is_null(stop)) {
        return em_web_fail(e, 400, "invalid_request_error", NULL, "stop",
                           "'stop' must be a string or an array of strings");
    }
    /* priority: the key's class unless the request names one; a
     * background-only key cannot ask for interactive */
    gp->cls = auth->default_class;
    json_t *pr = json_object_get(obj, "priority");
    if (pr && !json_is_null(pr)) {
        em_class cls;
        if (!json_is_string(pr) || em_class_parse(json_string_value(pr), &cls))
            return em_web_fail(e, 400, "invalid_request_error", NULL, "priority",
                               "'priority' must be \"interactive\" or \"background\"");
        if (cls == EM_CLASS_INTERACTIVE && auth->default_class == EM_CLASS_BACKGROUND)
            return em_web_fail(e, 403, "permission_error", "priority_not_allowed", "priority",
                               "this API key may only use the background class");
        gp->cls = cls;
    }
    return 0;
}

/* messages -> a new array of {role, content} with content a string (text
 * parts joined); roles the templates know. */
json_t *web_messages_check(json_t *msgs, em_web_error *e)
{
    if (!json_is_array(msgs) || json_array_size(msgs) == 0) {
        em_web_fail(e, 400, "invalid_request_error", NULL, "messages",
                    "'messages' must be a non-empty array of messages");
        return NULL;
    }
    json_t *out = json_array();
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        json_t *content = json_object_get(m, "content");
        char param[64];
        snprintf(param, sizeof param, "messages[%zu]", i);
        if (!json_is_object(m) || !role) {
            em_web_fail(e, 400, "invalid_request_error", NULL, param, "%s must be an object with a 'role'", param);
            goto fail;
        }
        if (strcmp(role, "developer") == 0)
            role = "system";
        if (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant")) {
            em_web_fail(e, 400, "invalid_request_error", NULL, param, "%s: role '%s' is not supported "
                        "(system, developer, user, assistant)", param, role);
            goto fail;
        }
        json_t *tc = json_object_get(m, "tool_calls");
        if (tc && !json_is_null(tc) && !(json_is_array(tc) && !json_array_size(tc))) {
            em_web_fail(e, 400, "invalid_request_error", "unsupported_parameter", param,
                        "%s: tool calls are not supported by this server", param);
            goto fail;
        }
        em_buf text = { 0 };
        if (json_is_string(content)) {
            em_buf_add(&text, json_string_value(content), json_string_length(content));
        } else if (json_is_array(content)) {
            size_t k;
            json_t *part;
            json_array_foreach(content, k, part) {
                const char *type = json_string_value(json_object_get(part, "type"));
                json_t *t = json_object_get(part, "text");
                if (!type || strcmp(type, "text") != 0 || !json_is_string(t)) {
                    em_buf_free(&text);
                    em_web_fail(e, 400, "invalid_request_error", "unsupported_content", param,
                                "%s: only text content parts are supported", param);
                    goto fail;
                }
                em_buf_add(&text, json_string_value(t), json_string_length(t));
            }
        } else if (!(json_is_null(content) && strcmp(role, "assistant") == 0)) {
            em_web_fail(e, 400, "invalid_request_error", NULL, param,
                        "%s: 'content' must be a string or an array of text parts", param);
            goto fail;
        }
        json_t *nm = json_pack("{s:s, s:s%}", "role", role, "content", text.s ? text.s : "", text.n);
        em_buf_free(&text);
        if (!nm) {   /* jansson refuses strings that are not valid UTF-8 */
            em_web_fail(e, 400, "invalid_request_error", NULL, param, "%s: the content is not valid UTF-8", param);
            goto fail;
        }
        json_array_append_new(out, nm);
    }
    return out;
fail:
    json_decref(out);
    return NULL;
}

/* ---- responses -------------------------------------------------------------- */

static json_t *usage_json(const api_req *a)
{
    uint32_t prompt, cached, comp;
    em_gen_usage(a->gen, &prompt, &cached, &comp);
    return json_pack("{s:I, s:I, s:I, s:{s:I}}", "prompt_tokens", (json_int_t)prompt, "completion_tokens",
                     (json_int_t)comp, "total_tokens", (json_int_t)(prompt + comp), "prompt_tokens_details",
                     "cached_tokens", (json_int_t)cached);
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

/* Choice i's new text and logprob entries (lp borrowed; NULL: none) onto
 * the whole answer's. */
static void keep_choice(api_req *a, uint32_t i, json_t *lp)
{
    em_buf_add(&a->text[i], a->delta[i].s ? a->delta[i].s : "", a->delta[i].n);
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

/* One SSE chunk for choice i with its new text (and finish_reason if done). */
static void stream_choice(web_conn *c, api_req *a, uint32_t i, int done)
{
    json_t *ch;
    json_t *fr = done ? json_string(em_gen_finish_reason(a->gen, i)) : json_null();
    json_t *lp = stream_logprobs(a, i);
    if (a->chat) {
        json_t *delta = json_object();
        if (!a->role_sent[i]) {
            json_object_set_new(delta, "role", json_string("assistant"));
            a->role_sent[i] = 1;
        }
        if (a->delta[i].n)
            json_object_set_new(delta, "content", json_stringn(a->delta[i].s, a->delta[i].n));
        else if (json_object_get(delta, "role"))
            json_object_set_new(delta, "content", json_string(""));
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
    }
}

/* The whole answer from what was collected (a->text, a->lp_all, taken). */
static json_t *answer_json(em_web *w, api_req *a)
{
    json_t *choices = json_array();
    for (uint32_t i = 0; i < em_gen_n(a->gen); i++) {
        a->text_off[i] = 0;
        json_t *fr = json_string(em_gen_finish_reason(a->gen, i));
        const char *t = a->text[i].s ? a->text[i].s : "";
        json_t *lp = choice_logprobs(a, i, a->lp_all[i]);
        a->lp_all[i] = NULL;
        json_t *ch = a->chat
            ? json_pack("{s:I, s:{s:s, s:s%, s:n}, s:o, s:o}", "index", (json_int_t)i, "message", "role",
                        "assistant", "content", t, a->text[i].n, "refusal", "logprobs", lp, "finish_reason", fr)
            : json_pack("{s:s%, s:I, s:o, s:o}", "text", t, a->text[i].n, "index", (json_int_t)i, "logprobs",
                        lp, "finish_reason", fr);
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
        whole &= strcmp(em_gen_finish_reason(a->gen, i), "stop") == 0 ||
                 strcmp(em_gen_finish_reason(a->gen, i), "length") == 0;
    if (a->store && whole && w->o.storage) {
        char *text = json_dumps(j, JSON_COMPACT);
        uint64_t evicted = 0;
        em_err e2 = { 0 };
        if (text && em_storage_cache_put(w->o.storage, a->key, w->cache_model, text, strlen(text),
                                         w->o.response_cache_bytes, &evicted, &e2) == 0) {
            w->cache_stores++;
            w->cache_evictions += evicted;
        } else if (text) {
            em_log(EM_LOG_WARN, a->id, "the response cache could not keep this answer: %s", e2.msg);
        }
        free(text);
    }
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

/* ---- the response cache ------------------------------------------------------ */

void web_cache_open(em_web *w)
{
    const em_hparams *hp = w->o.model ? em_model_hparams(w->o.model) : NULL;
    snprintf(w->cache_model, sizeof w->cache_model, "%s|%llu|%llu|%u", w->model_id,
             w->o.model ? (unsigned long long)em_model_weight_bytes(w->o.model) : 0ull,
             w->o.model ? (unsigned long long)em_model_n_params(w->o.model) : 0ull, hp ? hp->n_vocab : 0);
    uint64_t gone = 0;
    em_err err = { 0 };
    if (w->o.storage && em_storage_cache_retain(w->o.storage, w->cache_model, &gone, &err) == 0 && gone)
        em_log(EM_LOG_INFO, NULL, "serve: the response cache dropped %llu answers of another model",
               (unsigned long long)gone);
}

/* The key of a request: everything that shapes its answer — the model, the
 * endpoint and the body less what does not (stream, stream_options, user,
 * cache, priority, model: the server's own) — through BLAKE2b-256. */
static void cache_key(const em_web *w, const json_t *req, int chat, unsigned char *key)
{
    json_t *c = json_deep_copy(req);
    static const char *const drop[] = { "stream", "stream_options", "user", "cache", "priority", "model" };
    for (size_t i = 0; i < sizeof drop / sizeof drop[0]; i++)
        json_object_del(c, drop[i]);
    char *text = json_dumps(c, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(c);
    crypto_generichash_state st;
    crypto_generichash_init(&st, NULL, 0, EM_STORAGE_CACHE_KEY);
    crypto_generichash_update(&st, (const unsigned char *)"ember-response-cache-v1", 24);
    crypto_generichash_update(&st, (const unsigned char *)w->cache_model, strlen(w->cache_model) + 1);
    crypto_generichash_update(&st, (const unsigned char *)(chat ? "chat" : "completions"), chat ? 5 : 12);
    if (text)
        crypto_generichash_update(&st, (const unsigned char *)text, strlen(text));
    crypto_generichash_final(&st, key, EM_STORAGE_CACHE_KEY);
    free(text);
}


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
    if (web_drain_stopping(c->w) && !a->drain_stopped) {   /* --drain-s is up: stop, and say so below */
        a->drain_stopped = 1;
        em_gen_cancel(a->gen);
    }
    if (a->stream && !c->head_sent)
        return;   /* the headers go first */
    if (web_backlog(c) > BACKLOG_MAX)
        return;   /* the client reads slowly: the events wait and come coalesced */
    uint32_t n = em_gen_n(a->gen);
    int all = em_gen_pump(a->gen, a->delta);
    /* stopped by the drain: the client gets an error, not a short answer */
    int stopped = all && a->drain_stopped && !em_gen_error(a->gen) &&
                  strcmp(em_gen_finish_reason(a->gen, 0), "cancelled") == 0;
    em_web_error se = { 0 };
    if (stopped) {
        uint32_t prompt, cached, comp;
        em_gen_usage(a->gen, &prompt, &cached, &comp);
        web_drain_stopped(c->w, comp, &se);
    }
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
        if (a->delta[i].n || done || (a->chat && !a->role_sent[i]))
            stream_choice(c, a, i, done);
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

/* Check a completions body and start it: see web_int.h. */
int web_openai_start(em_web *w, json_t *req, int chat, const em_web_auth *auth, const char *addr, const char *id,
                     const char *batch_id, api_req **out, em_web_error *e)
{
    api_req *a = NULL;
    json_t *msgs = NULL;
    int started = 0;   /* em_gen_start wrote the ledger row itself */
    *out = NULL;
    em_gen_params gp = { .n = 1, .max_tokens = -1, .auth = auth, .client_addr = addr, .request_id = id,
                         .batch_id = batch_id };
    int background = batch_id != NULL;
    if (!json_is_object(req)) {
        em_web_fail(e, 400, "invalid_request_error", NULL, NULL, "the request body must be a JSON object");
        goto fail;
    }
    json_t *model = json_object_get(req, "model");
    if (model && !json_is_string(model)) {
        em_web_fail(e, 400, "invalid_request_error", NULL, "model", "'model' must be a string");
        goto fail;
    }
    if (model && strcmp(json_string_value(model), w->model_id) != 0) {
        em_web_fail(e, 404, "invalid_request_error", "model_not_found", "model",
                    "The model '%s' does not exist; this server serves '%s'.", json_string_value(model),
                    w->model_id);
        goto fail;
    }
    if (refuse_unbuilt(req, e))
        goto fail;
    if (web_gen_params(req, auth, &gp, e))
        goto fail;
    if (background)
        gp.cls = EM_CLASS_BACKGROUND;
    long long mct = -1, n = 1;
    int stream = 0, include_usage = 0;
    if (want_int(req, "max_completion_tokens", 1, 1 << 24, &mct, e) ||
        want_int(req, "n", 1, EM_GEN_MAX_N, &n, e) || want_bool(req, "stream", &stream, e))
        goto fail;
    if (stream && background) {
        em_web_fail(e, 400, "invalid_request_error", NULL, "stream", "a batch's requests cannot stream");
        goto fail;
    }
    json_t *so = json_object_get(req, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so) || want_bool(so, "include_usage", &include_usage, e)) {
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
    if (chat) {
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
    a = calloc(1, sizeof *a);
    if (!a) {
        em_web_fail(e, 500, "server_error", NULL, NULL, "out of memory");
        goto fail;
    }
    a->chat = chat;
    a->stream = stream;
    a->include_usage = include_usage;
    a->auth = *auth;
    a->created = (int64_t)time(NULL);
    snprintf(a->id, sizeof a->id, "%s", id);
    /* deterministic (greedy, or a seed given) and not refused: the cache */
    if (w->o.storage && w->o.response_cache_bytes > 0 && !json_is_false(cv) && !auth->no_cache &&
        (gp.sample.temp == 0 || gp.sample.top_k == 1 || json_object_get(req, "seed"))) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        cache_key(w, req, chat, a->key);
        size_t len = 0;
        em_err ce = { 0 };
        if (em_storage_cache_get(w->o.storage, a->key, w->cache_model, &a->cached, &len, &ce) == 0) {
            json_t *j = json_loads(a->cached, 0, NULL);
            const char *fr = json_string_value(json_object_get(json_array_get(json_object_get(j, "choices"), 0),
                                                               "finish_reason"));
            clock_gettime(CLOCK_MONOTONIC, &t1);
            double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
            w->cache_hits++;
            em_gen_cached(w, id, auth, addr, gp.cls, batch_id, fr, ms);
            json_decref(j);
            json_decref(msgs);
            *out = a;
            return 0;
        }
        a->store = 1;
        w->cache_misses++;
    }
    started = 1;
    if (em_gen_start(w, &gp, &a->gen, e))
        goto fail;
    json_decref(msgs);
    *out = a;
    return 0;
fail:
    if (!started)
        em_gen_refused(w, id, auth, addr, gp.cls, batch_id, e);
    api_free(a);
    json_decref(msgs);
    return -1;
}

static void completions(web_conn *c, int chat)
{
    em_web *w = c->w;
    em_web_error e = { 0 };
    api_req *a = NULL;
    json_t *req = NULL;
    em_web_auth auth;
    char id[64];
    web_new_id(w, chat ? "chatcmpl-" : "cmpl-", id, sizeof id);
    snprintf(c->rid, sizeof c->rid, "%s", id);   /* for the log lines of this request */
    if (web_auth(w, c, &auth, &e) || web_rate_check(w, &auth, &e)) {
        em_gen_refused(w, id, e.status == 401 ? NULL : &auth, c->addr, EM_CLASS_INTERACTIVE, NULL, &e);
        goto fail;
    }
    json_error_t je;
    req = json_loadb(c->body.s ? c->body.s : "", c->body.n, JSON_REJECT_DUPLICATES, &je);
    if (!req) {
        em_web_fail(&e, 400, "invalid_request_error", NULL, NULL, "We could not parse the JSON body of your "
                    "request: %s (line %d, column %d).", je.text, je.line, je.column);
        em_gen_refused(w, id, &auth, c->addr, EM_CLASS_INTERACTIVE, NULL, &e);
        goto fail;
    }
    if (web_openai_start(w, req, chat, &auth, c->addr, id, NULL, &a, &e))
        goto fail;
    if (a->cached) {   /* from the response cache: the whole answer now */
        respond_cached(c, a);
        api_free(a);
        json_decref(req);
        return;
    }
    c->api = a;
    web_live_add(c);
    if (a->stream)
        web_stream_begin(c, 200, "text/event-stream");
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
    json_t *m = json_pack("{s:s, s:s, s:I, s:s}", "id", c->w->model_id, "object", "model", "created",
                          (json_int_t)time(NULL), "owned_by", "ember");
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
