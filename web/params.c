/* params.c — the request parameters every front door shares: one table of
 * what exists and where (HTTP completions and chat, their batch lines, the
 * WebSocket protocol's params), what is not built and is refused by name
 * (unless its value changes nothing), and the checks of each value's type and
 * range into an em_gen_params (web_gen_params) and of chat messages
 * (web_messages_check). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "web/web_int.h"

/* ---- which parameters exist, and where ---------------------------------------- */

static int is_null(const json_t *v) { return json_is_null(v); }
static int not_true(const json_t *v) { return !json_is_true(v); }
static int one(const json_t *v) { return json_is_null(v) || (json_is_integer(v) && json_integer_value(v) == 1); }
static int empty_string(const json_t *v) { return json_is_null(v) || (json_is_string(v) && !json_string_length(v)); }

#define P_CMPL WEB_DOOR_COMPLETIONS
#define P_CHAT WEB_DOOR_CHAT
#define P_WS   WEB_DOOR_WS
#define P_HTTP (P_CMPL | P_CHAT)
#define P_ALL  (P_HTTP | P_WS)

typedef struct {
    const char *name;
    unsigned    doors;                  /* where it is a parameter (WEB_DOOR_*) */
    int       (*neutral)(const json_t *); /* not built: a value that changes nothing passes */
    const char *not_built;              /* non-NULL: refused (400 unsupported_parameter) with this */
} web_param;

static const web_param params[] = {
    { "model", P_HTTP, NULL, NULL },
    { "prompt", P_CMPL, NULL, NULL },
    { "messages", P_CHAT, NULL, NULL },
    { "max_tokens", P_ALL, NULL, NULL },
    { "max_completion_tokens", P_HTTP, NULL, NULL },
    { "temperature", P_ALL, NULL, NULL },
    { "top_p", P_ALL, NULL, NULL },
    { "top_k", P_ALL, NULL, NULL },
    { "min_p", P_ALL, NULL, NULL },
    { "seed", P_ALL, NULL, NULL },
    { "stop", P_ALL, NULL, NULL },
    { "priority", P_ALL, NULL, NULL },
    { "ignore_eos", P_ALL, NULL, NULL },
    { "presence_penalty", P_ALL, NULL, NULL },
    { "frequency_penalty", P_ALL, NULL, NULL },
    { "repetition_penalty", P_ALL, NULL, NULL },
    { "logit_bias", P_ALL, NULL, NULL },
    { "logprobs", P_HTTP, NULL, NULL },
    { "top_logprobs", P_HTTP, NULL, NULL },
    { "response_format", P_ALL, NULL, NULL },
    { "grammar", P_ALL, NULL, NULL },
    { "regex", P_ALL, NULL, NULL },
    { "speculative", P_ALL, NULL, NULL },
    { "n", P_HTTP, NULL, NULL },
    { "stream", P_HTTP, NULL, NULL },
    { "stream_options", P_HTTP, NULL, NULL },
    { "user", P_HTTP, NULL, NULL },
    { "cache", P_HTTP, NULL, NULL },
    { "tools", P_CHAT, NULL, NULL },
    { "tool_choice", P_CHAT, NULL, NULL },
    { "parallel_tool_calls", P_CHAT, NULL, NULL },
    { "include_reasoning", P_CHAT, NULL, NULL },
    { "reasoning_budget", P_CHAT, NULL, NULL },
    { "reasoning_effort", P_CHAT, NULL, NULL },
    { "chat_template_kwargs", P_CHAT, NULL, NULL },
    /* not built: refused by name rather than ignored */
    { "functions", P_HTTP, is_null, "'functions' (the deprecated form of function calling) is not supported: "
                                    "use 'tools'" },
    { "echo", P_CMPL, not_true, "'echo' is not supported by this server" },
    { "best_of", P_CMPL, one, "'best_of' is not supported by this server" },
    { "suffix", P_CMPL, empty_string, "'suffix' is not supported by this server" },
};

int web_params_check(const json_t *obj, unsigned door, em_web_error *e)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)obj, k, v) {
        const web_param *p = NULL;
        for (size_t i = 0; i < sizeof params / sizeof params[0] && !p; i++)
            if (strcmp(params[i].name, k) == 0)
                p = &params[i];
        if (p && (p->doors & door) && p->not_built && !p->neutral(v))
            return em_web_fail(e, 400, "invalid_request_error", "unsupported_parameter", k, "%s", p->not_built);
        /* OpenAI's clients send fields of their own ('metadata', 'store'...): HTTP
         * ignores what it does not know; the WebSocket protocol is ember's own */
        if (door == WEB_DOOR_WS && !(p && (p->doors & door) && !p->not_built))
            return em_web_fail(e, 400, "invalid_request_error", "unsupported_parameter", k,
                               "'%s' is not a parameter of ember.chat.v1", k);
    }
    return 0;
}

/* ---- values ------------------------------------------------------------------- */

int web_want_number(json_t *req, const char *name, double lo, double hi, double *out, em_web_error *e)
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

int web_want_int(json_t *req, const char *name, long long lo, long long hi, long long *out, em_web_error *e)
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

int web_want_bool(json_t *req, const char *name, int *out, em_web_error *e)
{
    json_t *v = json_object_get(req, name);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_boolean(v))
        return em_web_fail(e, 400, "invalid_request_error", NULL, name, "'%s' must be true or false", name);
    *out = json_is_true(v);
    return 0;
}

static int penalties(json_t *obj, em_gen_params *gp, em_web_error *e)
{
    double pres = 0, freq = 0, rep = 1;
    if (web_want_number(obj, "presence_penalty", -2, 2, &pres, e) ||
        web_want_number(obj, "frequency_penalty", -2, 2, &freq, e) ||
        web_want_number(obj, "repetition_penalty", 0, 10, &rep, e))
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
    if (web_want_int(obj, "top_logprobs", 0, EM_SAMPLE_MAX_TOP, &top, e))
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
    if (web_want_number(obj, "temperature", 0, 2, &temp, e) || web_want_number(obj, "top_p", 0, 1, &top_p, e) ||
        web_want_number(obj, "min_p", 0, 1, &min_p, e) || web_want_int(obj, "top_k", 0, 1 << 20, &top_k, e) ||
        web_want_int(obj, "max_tokens", 1, 1 << 24, &max_tokens, e) ||
        web_want_int(obj, "seed", -(1LL << 62), 1LL << 62, &seed, e) || web_want_bool(obj, "ignore_eos", &ignore_eos, e))
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
        if (json_is_object(sv) && web_want_int(sv, "max_draft", 1, EM_SCHED_MAX_DRAFT, &k, e))
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
    return web_want_class(obj, auth, &gp->cls, e);
}

int web_want_class(const json_t *obj, const em_web_auth *auth, em_class *out, em_web_error *e)
{
    *out = auth->default_class;
    json_t *pr = json_object_get(obj, "priority");
    if (pr && !json_is_null(pr)) {
        em_class cls;
        if (!json_is_string(pr) || em_class_parse(json_string_value(pr), &cls))
            return em_web_fail(e, 400, "invalid_request_error", NULL, "priority",
                               "'priority' must be \"interactive\" or \"background\"");
        if (cls == EM_CLASS_INTERACTIVE && auth->default_class == EM_CLASS_BACKGROUND)
            return em_web_fail(e, 403, "permission_error", "priority_not_allowed", "priority",
                               "this API key may only use the background class");
        *out = cls;
    }
    return 0;
}

/* messages -> a new array of {role, content} with content a string (text
 * parts joined); roles the templates know. */
/* An assistant message's tool_calls (OpenAI's shape) as the templates read
 * them: {id, type, function: {name, arguments}} with arguments an object
 * when the string sent parses as one (templates write it with tojson).
 * NULL with e filled (400). */
static json_t *tool_calls_check(json_t *tc, const char *param, em_web_error *e)
{
    if (!json_is_array(tc) || json_array_size(tc) > 128) {
        em_web_fail(e, 400, "invalid_request_error", NULL, param, "%s: 'tool_calls' must be an array of at most "
                    "128 calls", param);
        return NULL;
    }
    json_t *out = json_array(), *c;
    size_t i;
    json_array_foreach(tc, i, c) {
        json_t *fn = json_object_get(c, "function"), *args = json_object_get(fn, "arguments");
        const char *id = json_string_value(json_object_get(c, "id"));
        const char *name = json_string_value(json_object_get(fn, "name"));
        const char *type = json_string_value(json_object_get(c, "type"));
        if (!id || !name || (type && strcmp(type, "function")) || (args && !json_is_string(args) &&
                                                                   !json_is_object(args))) {
            em_web_fail(e, 400, "invalid_request_error", NULL, param, "%s: tool_calls[%zu] must be {\"id\", "
                        "\"type\": \"function\", \"function\": {\"name\", \"arguments\"}}", param, i);
            json_decref(out);
            return NULL;
        }
        json_t *a = json_is_string(args) ? json_loads(json_string_value(args), 0, NULL)
                  : args ? json_incref(args) : json_object();
        if (!json_is_object(a)) {   /* not an object: the template gets the text as sent */
            json_decref(a);
            a = json_incref(args);
        }
        json_array_append_new(out, json_pack("{s:s, s:s, s:{s:s, s:o}}", "id", id, "type", "function", "function",
                                             "name", name, "arguments", a));
    }
    return out;
}

/* A tool message's tool_call_id against the calls of the messages before
 * it (out, checked): the name of the call it answers (borrowed), or NULL
 * with e filled (400). */
static const char *tool_answers(json_t *out, json_t *id, const char *param, em_web_error *e)
{
    if (!json_is_string(id)) {
        em_web_fail(e, 400, "invalid_request_error", NULL, param, "%s: a tool message needs the 'tool_call_id' of "
                    "the call it answers", param);
        return NULL;
    }
    for (size_t i = json_array_size(out); i-- > 0;) {
        size_t k;
        json_t *c;
        json_array_foreach(json_object_get(json_array_get(out, i), "tool_calls"), k, c)
            if (json_equal(json_object_get(c, "id"), id))
                return json_string_value(json_object_get(json_object_get(c, "function"), "name"));
    }
    em_web_fail(e, 400, "invalid_request_error", NULL, param, "%s: tool_call_id '%.64s' answers no tool call of an "
                "earlier assistant message", param, json_string_value(id));
    return NULL;
}

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
        if (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "tool")) {
            em_web_fail(e, 400, "invalid_request_error", NULL, param, "%s: role '%s' is not supported "
                        "(system, developer, user, assistant, tool)", param, role);
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
        json_t *tc = json_object_get(m, "tool_calls"), *calls = NULL;
        if (tc && !json_is_null(tc) && !(json_is_array(tc) && !json_array_size(tc))) {
            if (strcmp(role, "assistant")) {
                em_web_fail(e, 400, "invalid_request_error", NULL, param, "%s: only an assistant message has "
                            "tool_calls", param);
                goto fail_text;
            }
            if (!(calls = tool_calls_check(tc, param, e)))
                goto fail_text;
        }
        const char *answers = NULL;   /* a tool message: the call it answers, by name */
        if (!strcmp(role, "tool") && !(answers = tool_answers(out, json_object_get(m, "tool_call_id"), param, e)))
            goto fail_text;
        json_t *nm = json_pack("{s:s, s:s%}", "role", role, "content", text.s ? text.s : "", text.n);
        em_buf_free(&text);
        if (!nm) {   /* jansson refuses strings that are not valid UTF-8 */
            json_decref(calls);
            em_web_fail(e, 400, "invalid_request_error", NULL, param, "%s: the content is not valid UTF-8", param);
            goto fail;
        }
        if (calls)
            json_object_set_new(nm, "tool_calls", calls);
        if (answers) {
            json_object_set(nm, "tool_call_id", json_object_get(m, "tool_call_id"));
            json_object_set_new(nm, "name", json_string(answers));
        }
        json_array_append_new(out, nm);
        continue;
    fail_text:
        em_buf_free(&text);
        goto fail;
    }
    return out;
fail:
    json_decref(out);
    return NULL;
}

