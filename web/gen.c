/* gen.c — the one generation path that every front door (OpenAI HTTP, SSE,
 * WebSocket, later batch lines) shares: the chat template (or the raw
 * completion prompt) -> token ids -> the context check -> one scheduler
 * request per choice (submitted together: their prompt blocks meet in the
 * prefix cache) -> token events turned into text deltas (UTF-8 safe; stop
 * strings held back by the scheduler until decided) -> done, with usage and
 * timings -> one ledger row per request: admitted when submitted, replaced
 * by its final state (completed, cancelled, failed, rejected) at the end.
 * The protocol handlers only parse requests and frame deltas. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "core/model/model.h"
#include "core/text/harmony.h"
#include "core/text/tokenizer.h"
#include "core/tmpl/chat_tmpl.h"
#include "web/reasoning.h"
#include "web/tools.h"
#include "web/web_int.h"

struct em_gen {
    em_web          *w;
    uint32_t         n;
    em_request      *req[EM_GEN_MAX_N];
    int              done[EM_GEN_MAX_N];
    em_finish        finish[EM_GEN_MAX_N];
    em_req_metrics   m[EM_GEN_MAX_N];
    uint32_t         seen[EM_GEN_MAX_N];   /* TOKEN events taken: the count of a cancelled choice */
    char             error[256];
    uint32_t         prompt_tokens;
    /* choices after the first wait for its prompt to be in the KV cache,
     * so that they take its full blocks from the prefix cache */
    uint32_t         n_submitted;
    em_req_params    rp;
    int32_t         *ids;
    char            *stop[EM_MAX_STOP];
    em_logit_bias    bias[EM_GEN_MAX_BIAS];   /* rp.sample.logit_bias: the later choices' too */
    json_t          *lp[EM_GEN_MAX_N];        /* logprob entries not yet taken (logprobs asked) */
    web_grammar     *grammar;                 /* structured output: each choice's constraint's grammar */
    int              drain_stopped;           /* cancelled because the drain's time was up (em_gen_pump) */
    em_buf           text[EM_GEN_MAX_N];      /* each choice's whole answer so far (em_gen_text) */
    /* a chat with a harmony model (gpt-oss): each choice's stream split
     * into its channels, the answer ("final") the text above, the
     * reasoning ("analysis") kept apart (not shown as content) */
    int              harmony;
    em_harmony       hm[EM_GEN_MAX_N];
    em_buf           reasoning[EM_GEN_MAX_N];
    /* a chat: each choice's answer split into the reasoning it may begin
     * with and the rest (reasoning.h); rdelta: the reasoning not yet taken */
    int              think_on;
    web_think        th[EM_GEN_MAX_N];
    em_buf           rdelta[EM_GEN_MAX_N];
    uint32_t         rtok[EM_GEN_MAX_N];      /* tokens spent on it */
    int              think_inside;            /* the prompt opened the block */
    uint32_t         budget;                  /* the block's tokens at most (0: no bound) */
    /* a chat with tools: each choice's answer split into text and calls */
    int              tools_on;
    const char      *trigger;                 /* the calls' grammar waits for it (tool_choice auto) */
    const char      *start_trigger;           /* or for an answer that begins with it */
    web_toolparse    tp[EM_GEN_MAX_N];
    json_t          *calls[EM_GEN_MAX_N];     /* the calls so far: [{id, type, function: {name, arguments}}] */
    json_t          *tdelta[EM_GEN_MAX_N];    /* their streamed deltas not yet taken */
    int              calls_whole[EM_GEN_MAX_N];
    int              stop_hit[EM_GEN_MAX_N];   /* em_event.stop_hit */
    uint64_t         seed;
    em_usage_record  rec;          /* the ledger row */
};

static int64_t epoch_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The scheduler thread has events: wake the service loop (never touches
 * the gen). Not once em_web_destroy began: the context may be gone. */
void em_gen_notify(void *user)
{
    em_web *w = user;
    pthread_mutex_lock(&w->mu);
    if (!w->closing) {
        atomic_store(&w->wake, 1);
        lws_cancel_service(w->ctx);
    }
    pthread_mutex_unlock(&w->mu);
}

static void ledger(em_web *w, const em_usage_record *r)
{
    if (r->status != EM_USAGE_ADMITTED) {
        web_metrics_count(w, r);   /* every request's final row: /metrics counts it here */
        /* one line per request: its outcome and counts, never its text */
        char times[96] = "";   /* unknown durations (-1) left out */
        if (r->queue_ms >= 0)
            snprintf(times, sizeof times, ", queue %.0f ms", r->queue_ms);
        if (r->ttft_ms >= 0)
            snprintf(times + strlen(times), sizeof times - strlen(times), ", ttft %.0f ms", r->ttft_ms);
        em_log(r->status == EM_USAGE_FAILED ? EM_LOG_WARN : EM_LOG_INFO, r->request_id,
               "%s %s: %s, %lld prompt tokens (%lld cached), %lld completion tokens%s%s%s%s%s",
               r->client_addr, em_storage_class_name(r->cls), em_storage_status_name(r->status),
               (long long)r->prompt_tokens, (long long)r->cached_tokens, (long long)r->completion_tokens, times,
               r->finish_reason[0] ? ", finish " : "", r->finish_reason, r->error[0] ? ": " : "", r->error);
    }
    if (w->o.storage)
        em_storage_submit(w->o.storage, r);
}

void em_gen_row(em_web *w, em_usage_record *r)
{
    if (r->status != EM_USAGE_ADMITTED && !r->finished_ms)
        r->finished_ms = epoch_ms();
    ledger(w, r);
}

void em_gen_row_begin(em_web *w, const em_gen_params *p, em_usage_record *r)
{
    em_usage_record_init(r);
    snprintf(r->request_id, sizeof r->request_id, "%s", p->request_id ? p->request_id : "");
    snprintf(r->batch_id, sizeof r->batch_id, "%s", p->batch_id ? p->batch_id : "");
    snprintf(r->client_addr, sizeof r->client_addr, "%s", p->client_addr ? p->client_addr : "");
    snprintf(r->model, sizeof r->model, "%s", w->model_id);
    snprintf(r->endpoint, sizeof r->endpoint, "%s", p->endpoint ? p->endpoint : "");
    r->key_id = p->auth ? p->auth->key_id : 0;
    r->cls = p->cls == EM_CLASS_BACKGROUND ? EM_USAGE_BACKGROUND : EM_USAGE_INTERACTIVE;
    r->received_ms = epoch_ms();
}

void em_gen_cached(em_web *w, const char *request_id, const char *endpoint, const em_web_auth *auth,
                   const char *client_addr, em_class cls, const char *batch_id, const char *finish_reason,
                   double server_ms)
{
    em_usage_record r;
    em_usage_record_init(&r);
    snprintf(r.endpoint, sizeof r.endpoint, "%s", endpoint ? endpoint : "");
    snprintf(r.request_id, sizeof r.request_id, "%s", request_id);
    snprintf(r.batch_id, sizeof r.batch_id, "%s", batch_id ? batch_id : "");
    snprintf(r.client_addr, sizeof r.client_addr, "%s", client_addr ? client_addr : "");
    snprintf(r.model, sizeof r.model, "%s", w->model_id);
    snprintf(r.finish_reason, sizeof r.finish_reason, "%s", finish_reason ? finish_reason : "");
    r.key_id = auth ? auth->key_id : 0;
    r.cls = cls == EM_CLASS_BACKGROUND ? EM_USAGE_BACKGROUND : EM_USAGE_INTERACTIVE;
    r.received_ms = r.started_ms = r.first_token_ms = r.finished_ms = epoch_ms();
    r.status = EM_USAGE_COMPLETED;
    r.response_cached = 1;   /* no tokens ran: none are counted */
    r.queue_ms = 0;
    r.ttft_ms = server_ms;   /* what answering took: the lookup */
    ledger(w, &r);
}

/* The final row of a request that never reached the scheduler. */
static int refuse(em_gen *g, em_usage_status st, const em_web_error *e)
{
    g->rec.status = st;
    g->rec.finished_ms = epoch_ms();
    snprintf(g->rec.error, sizeof g->rec.error, "%d %s", e->status, e->message);
    ledger(g->w, &g->rec);
    return -1;
}

/* The only row of a request refused before it reached the scheduler:
 * rejected for 401/403/429/503 (refused at the door: auth, rate, busy,
 * draining), else failed (a bad request). A 401's key is none: the key it
 * named was not accepted. Returns -1. */
static int refused_row(em_web *w, const em_gen_params *p, const em_web_error *e)
{
    em_usage_record r;
    em_usage_record_init(&r);
    snprintf(r.request_id, sizeof r.request_id, "%s", p->request_id ? p->request_id : "");
    snprintf(r.batch_id, sizeof r.batch_id, "%s", p->batch_id ? p->batch_id : "");
    snprintf(r.client_addr, sizeof r.client_addr, "%s", p->client_addr ? p->client_addr : "");
    snprintf(r.model, sizeof r.model, "%s", w->model_id);
    snprintf(r.endpoint, sizeof r.endpoint, "%s", p->endpoint ? p->endpoint : "");
    r.key_id = p->auth && e->status != 401 ? p->auth->key_id : 0;
    r.cls = p->cls == EM_CLASS_BACKGROUND ? EM_USAGE_BACKGROUND : EM_USAGE_INTERACTIVE;
    r.received_ms = r.finished_ms = epoch_ms();
    r.status = e->status == 401 || e->status == 403 || e->status == 429 || e->status == 503
                   ? EM_USAGE_REJECTED : EM_USAGE_FAILED;
    snprintf(r.error, sizeof r.error, "%d %s", e->status, e->message);
    ledger(w, &r);
    return -1;
}

static void gen_free(em_gen *g)
{
    for (uint32_t i = 0; i < EM_GEN_MAX_N; i++) {
        em_buf_free(&g->text[i]);
        em_buf_free(&g->reasoning[i]);
        em_buf_free(&g->rdelta[i]);
        web_think_free(&g->th[i]);
    }
    for (int i = 0; i < EM_MAX_STOP; i++)
        free(g->stop[i]);
    for (uint32_t i = 0; i < EM_GEN_MAX_N; i++) {
        json_decref(g->lp[i]);
        json_decref(g->calls[i]);
        json_decref(g->tdelta[i]);
        web_toolparse_free(&g->tp[i]);
    }
    web_grammar_unref(g->grammar);
    free(g->ids);
    free(g);
}

/* A choice's constraint: its grammar (tools, structured output), within
 * the reasoning budget when there is one. 0, or an error code with err. */
static int choice_constraint(em_gen *g, uint32_t n_vocab, em_constraint *out, em_err *err)
{
    *out = (em_constraint){ 0 };
    int rc = g->grammar ? web_grammar_constraint(g->grammar, n_vocab, g->trigger, g->start_trigger, out, err) : 0;
    if (!rc && g->budget && g->think_on) {
        em_constraint inner = *out;
        rc = web_budget_constraint(g->w, g->w->thinkfmt, g->think_inside, g->budget, n_vocab, &inner, out, err);
        web_constraint_free(&inner);   /* (taken on success: empty) */
    }
    return rc;
}

/* The other choices, once the first one's prompt is in the KV cache (its
 * first token came, or it ended). A full queue fails only those choices. */
static void submit_rest(em_gen *g)
{
    if (g->n_submitted >= g->n || !(g->seen[0] || g->done[0]))
        return;
    for (uint32_t i = g->n_submitted; i < g->n; i++) {
        em_err err = { 0 };
        g->rp.sample.seed = g->seed + i;   /* each choice its own draws */
        int rc = choice_constraint(g, em_model_hparams(g->w->o.model)->n_vocab, &g->rp.constraint, &err);
        if (rc || em_sched_submit(g->w->o.sched, &g->rp, &g->req[i], NULL, &err)) {
            web_constraint_free(&g->rp.constraint);
            g->done[i] = 1;
            g->finish[i] = EM_FINISH_ERROR;
            if (!g->error[0])
                snprintf(g->error, sizeof g->error, "choice %u: %s", i, err.msg);
        }
        g->rp.constraint = (em_constraint){ 0 };   /* submitted: the scheduler's */
    }
    g->n_submitted = g->n;
    free(g->ids);
    g->ids = NULL;
}

/* Bytes of text in a messages array (borrowed): string contents and the
 * text of content parts — what the prompt holds at the least. */
static size_t content_bytes(const json_t *messages)
{
    size_t n = 0, i, k;
    json_t *m, *part;
    json_array_foreach(messages, i, m) {
        json_t *c = json_object_get(m, "content");
        if (json_is_string(c))
            n += json_string_length(c);
        json_array_foreach(c, k, part) {
            json_t *t = json_object_get(part, "text");
            n += json_is_string(t) ? json_string_length(t) : 0;
        }
    }
    return n;
}

/* e: the request cannot fit the context; its prompt has (qual) n_prompt tokens. */
static void too_long(em_web *w, const em_gen_params *p, size_t n_prompt, const char *qual, em_web_error *e)
{
    long long comp = p->max_tokens >= 0 ? p->max_tokens : 0;
    e->retry_after_s = 0;
    em_web_fail(e, 400, "invalid_request_error", "context_length_exceeded", p->param_name,
                "This model's maximum context length is %u tokens. However, you requested %s%lld tokens (%s%zu in "
                "the %s, %lld in the completion). Please reduce the length of the %s or completion.", w->o.n_ctx,
                qual, (long long)n_prompt + comp, qual, n_prompt, p->param_name, comp, p->param_name);
}

/* p's prompt: the messages rendered through the model's template (with its
 * tools, unless tool_choice is none), or the completion prompt, as token
 * ids. *text (malloc'd; NULL for a completion) and *ids (malloc'd) the
 * caller's. 0, or -1 with e filled. */
static int prompt_ids(em_web *w, const em_gen_params *p, char **text, size_t *text_len, int32_t **ids, size_t *n_ids,
                      em_web_error *e)
{
    em_err err = { 0 };
    int rc;
    const em_tokenizer *tok = w->o.tok;
    *text = NULL;
    *text_len = 0;
    *ids = NULL;
    *n_ids = 0;
    /* A prompt that cannot fit is refused before the work that would show it
     * (rendering, tokenizing: on the service thread, seconds for megabytes):
     * no token stands for more than max_token_bytes bytes of text. */
    size_t per_tok = em_tokenizer_max_token_bytes(tok), room = w->o.n_ctx - (p->max_tokens > 0 ? 1 : 0);
    size_t text_bytes = p->messages ? content_bytes(p->messages) : p->prompt_len;
    if (text_bytes / per_tok > room) {
        too_long(w, p, text_bytes / per_tok, "at least ", e);
        return -1;
    }
    const web_tools *tl = p->tools && p->tools->n ? p->tools : NULL;
    if (p->messages) {
        /* the template copied at start: a request never reads the model's mapping */
        int32_t bos = em_tokenizer_bos(tok), eos = em_tokenizer_eos(tok);
        /* rendered text past n_ctx * per_tok bytes could not fit either: the
         * render stops there (many short messages) */
        em_tmpl_opts to = { .max_output = (size_t)w->o.n_ctx * per_tok + 1, .extra_vars = p->template_vars };
        rc = em_chat_render(w->tmpl, w->tmpl_len, p->messages, 1, bos >= 0 ? em_tokenizer_token_text(tok, bos) : "",
                            eos >= 0 ? em_tokenizer_token_text(tok, eos) : "",
                            tl && tl->choice != WEB_TOOL_NONE ? tl->render : NULL, &to, text, text_len, &err);
        if (rc == EM_ERANGE && strstr(err.msg, EM_TMPL_OUTPUT_CAPPED)) {
            too_long(w, p, to.max_output / per_tok, "more than ", e);
            return -1;
        }
        if (rc) {
            /* a Jinja error the messages caused (roles out of order,
             * raise_exception): the request's fault; else the template's */
            if (rc == EM_EINVAL)
                return em_web_fail(e, 400, "invalid_request_error", "template_error", "messages",
                                   "the model's chat template refused these messages: %s", err.msg);
            return em_web_fail(e, 500, "server_error", "template_error", NULL, "the model's chat template failed: %s",
                               err.msg);
        }
        rc = em_chat_tokenize(tok, *text, *text_len, ids, n_ids, &err);
    } else {
        rc = em_tokenizer_encode(tok, p->prompt ? p->prompt : "", p->prompt_len, 1, 0, ids, n_ids, &err);
    }
    if (rc) {
        free(*text);
        *text = NULL;
        return em_web_fail(e, 500, "server_error", NULL, NULL, "tokenizing the prompt failed: %s", err.msg);
    }
    return 0;
}

int em_gen_count_prompt(em_web *w, const em_gen_params *p, uint32_t *n, em_web_error *e)
{
    char *text;
    size_t text_len, n_ids;
    int32_t *ids;
    if (prompt_ids(w, p, &text, &text_len, &ids, &n_ids, e))
        return -1;
    free(text);
    free(ids);
    *n = (uint32_t)n_ids;
    return 0;
}

/* Tools asked for (not tool_choice none): the calls' grammar and the split
 * of each choice's answer. 0, or -1 with e filled. */
static int tools_start(em_gen *g, const em_gen_params *p, const web_tools *tl, em_web_error *e)
{
    const web_toolfmt *f = g->w->toolfmt;
    if (!f || !f->ok)
        return em_web_fail(e, 400, "invalid_request_error", "tools_unsupported", "tools",
                           "this model cannot take tools: %s", f ? f->why : "no chat template");
    if (web_structured_asked(p->structure))
        return em_web_fail(e, 400, "invalid_request_error", NULL, "tools",
                           "'tools' with 'response_format', 'grammar' or 'regex' in one request is not supported");
    char *gbnf;
    size_t len;
    if (web_tools_gbnf(f, tl, &gbnf, &len, e) || web_structured_text(g->w, gbnf, len, "tools", &g->grammar, e))
        return -1;
    g->tools_on = 1;
    g->trigger = tl->choice == WEB_TOOL_AUTO ? f->trigger : NULL;
    g->start_trigger = tl->choice == WEB_TOOL_AUTO ? f->bare_key : NULL;
    for (uint32_t i = 0; i < g->n; i++) {
        web_toolparse_init(&g->tp[i], f, tl->choice == WEB_TOOL_AUTO);
        if (!(g->calls[i] = json_array()))
            return em_web_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    }
    return 0;
}

int em_gen_start(em_web *w, const em_gen_params *p, em_gen **out, em_web_error *e)
{
    *out = NULL;
    if (e->status)   /* the door refused it already (auth, rate, a bad body): its row, here */
        return refused_row(w, p, e);
    em_gen *g = calloc(1, sizeof *g);
    if (!g) {
        em_web_fail(e, 500, "server_error", NULL, NULL, "out of memory");
        return refused_row(w, p, e);
    }
    g->w = w;
    g->n = p->n ? p->n : 1;
    g->harmony = p->messages && em_tokenizer_harmony(w->o.tok);   /* (a completion is raw text) */
    for (uint32_t i = 0; i < EM_GEN_MAX_N; i++)
        em_harmony_init(&g->hm[i]);
    em_gen_row_begin(w, p, &g->rec);
    if (web_drain_refuse(w, e)) {   /* stopping: no new work (drain.c) */
        refuse(g, EM_USAGE_REJECTED, e);
        gen_free(g);
        return -1;
    }

    char *text = NULL;
    size_t text_len = 0;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    em_err err = { 0 };
    int rc;
    const web_tools *tl = p->tools && p->tools->n ? p->tools : NULL;
    if (em_model_hparams(w->o.model)->encoder) {   /* (before the template: it has none) */
        em_web_fail(e, 400, "invalid_request_error", "model_not_generative", p->param_name,
                    "this model does not generate text: it serves /v1/embeddings and /v1/rerank");
        goto fail;
    }
    if (tl && tl->choice != WEB_TOOL_NONE && tools_start(g, p, tl, e))
        goto fail;
    if (prompt_ids(w, p, &text, &text_len, &ids, &n_ids, e))
        goto fail;
    if (text && !g->harmony && w->thinkfmt) {   /* a prompt that opens the block: the answer begins inside it */
        g->think_on = 1;
        g->think_inside = web_think_prompt_opens(w->thinkfmt, text, text_len);
        g->budget = p->reasoning_budget;
        for (uint32_t i = 0; i < g->n; i++)
            web_think_init(&g->th[i], w->thinkfmt, g->think_inside);
    }
    if (em_log_content())   /* log_content = true: the prompt as the model sees it */
        em_log(EM_LOG_DEBUG, p->request_id, "prompt: %.*s", (int)(text ? text_len : p->prompt ? p->prompt_len : 0),
               text ? text : p->prompt ? p->prompt : "");
    if (n_ids == 0) {
        em_web_fail(e, 400, "invalid_request_error", NULL, p->param_name, "the prompt is empty");
        goto fail;
    }
    g->prompt_tokens = (uint32_t)n_ids;
    g->rec.prompt_tokens = (int64_t)n_ids;
    uint32_t n_ctx = w->o.n_ctx;
    int64_t want = p->max_tokens >= 0 ? p->max_tokens : (int64_t)n_ctx - (int64_t)n_ids;
    if ((int64_t)n_ids + (p->max_tokens >= 0 ? p->max_tokens : 1) > (int64_t)n_ctx) {
        too_long(w, p, n_ids, "", e);
        goto fail;
    }
    if (want < 1)
        want = 1;

    em_req_params rp = { .prompt = ids, .n_prompt = (uint32_t)n_ids, .sample = p->sample, .cls = p->cls,
                         .max_tokens = (uint32_t)want, .ignore_eog = p->ignore_eos, .logprobs = p->logprobs,
                         .top_logprobs = p->top_logprobs, .speculate = p->speculate,
                         .spec_method = p->spec_method, .notify = em_gen_notify,
                         .user = w };
    uint32_t nb = p->sample.n_logit_bias <= EM_GEN_MAX_BIAS ? p->sample.n_logit_bias : EM_GEN_MAX_BIAS;
    uint32_t n_vocab = em_model_hparams(w->o.model)->n_vocab;
    for (uint32_t i = 0; i < nb; i++)
        if ((uint32_t)p->sample.logit_bias[i].id >= n_vocab) {
            em_web_fail(e, 400, "invalid_request_error", NULL, "logit_bias",
                        "'logit_bias' names token %d, past the model's vocabulary of %u tokens",
                        p->sample.logit_bias[i].id, n_vocab);
            goto fail;
        }
    if (nb)
        memcpy(g->bias, p->sample.logit_bias, nb * sizeof *g->bias);
    rp.sample.logit_bias = g->bias;
    rp.sample.n_logit_bias = nb;
    for (uint32_t i = 0; p->logprobs && i < g->n; i++)
        if (!(g->lp[i] = json_array())) {
            em_web_fail(e, 500, "server_error", NULL, NULL, "out of memory");
            goto fail;
        }
    for (int i = 0; i < EM_MAX_STOP; i++)
        if (p->stop[i] && !(rp.stop[i] = g->stop[i] = strdup(p->stop[i]))) {
            em_web_fail(e, 500, "server_error", NULL, NULL, "out of memory");
            goto fail;
        }
    if (!g->grammar && p->structure && web_structured_get(w, p->structure, &g->grammar, e))
        goto fail;
    if ((rc = choice_constraint(g, n_vocab, &rp.constraint, &err))) {
        em_web_fail(e, rc == EM_ENOMEM ? 500 : 400, rc == EM_ENOMEM ? "server_error" : "invalid_request_error",
                    rc == EM_ENOMEM ? NULL : "invalid_grammar", NULL, "%s", err.msg);
        goto fail;
    }
    uint32_t retry_ms = 0;
    rc = em_sched_submit(w->o.sched, &rp, &g->req[0], &retry_ms, &err);
    if (rc)
        web_constraint_free(&rp.constraint);   /* refused: still ours */
    rp.constraint = (em_constraint){ 0 };   /* the scheduler's; the other choices make their own */
    if (rc == EM_EBUSY) {
        em_web_fail(e, 503, "server_error", "server_busy", NULL, "the %s queue is full; try again later",
                    em_class_name(p->cls));
        e->retry_after_s = retry_ms ? (retry_ms + 999) / 1000 : 1;
        free(ids);
        free(text);
        refuse(g, EM_USAGE_REJECTED, e);
        gen_free(g);
        return -1;
    }
    if (rc) {
        if (rc == EM_ERANGE || rc == EM_EINVAL)
            em_web_fail(e, 400, "invalid_request_error", rc == EM_ERANGE ? "context_length_exceeded" : NULL,
                        p->param_name, "%s", err.msg);
        else
            em_web_fail(e, 500, "server_error", NULL, NULL, "%s", err.msg);
        goto fail;
    }
    g->n_submitted = 1;
    g->rp = rp;
    g->seed = p->sample.seed;
    if (g->n > 1) {   /* kept for the other choices */
        g->ids = ids;
        g->rp.prompt = ids;
        ids = NULL;
    }
    free(ids);
    free(text);
    g->rec.status = EM_USAGE_ADMITTED;
    ledger(w, &g->rec);
    atomic_fetch_add(&w->gens, 1);   /* a drain waits for it */
    *out = g;
    return 0;
fail:
    free(ids);
    free(text);
    refuse(g, EM_USAGE_FAILED, e);
    gen_free(g);
    return -1;
}

/* {"token", "logprob", "bytes"} of token id. */
static json_t *lp_token(const em_tokenizer *tok, int32_t id, float logprob)
{
    char piece[256];
    int n = em_tokenizer_piece(tok, id, 1, piece, sizeof piece);
    if (n < 0 || n > (int)sizeof piece)
        n = 0;
    json_t *bytes = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(bytes, json_integer((unsigned char)piece[i]));
    json_t *text = json_stringn(piece, (size_t)n);   /* NULL when not valid UTF-8 */
    if (!text) {
        char esc[4 * sizeof piece + 8];
        size_t k = (size_t)snprintf(esc, sizeof esc, "bytes:");
        for (int i = 0; i < n; i++)
            k += (size_t)snprintf(esc + k, sizeof esc - k, "\\x%02x", (unsigned char)piece[i]);
        text = json_string(esc);
    }
    /* -inf (a banned token among the alternatives) is not JSON: OpenAI's -9999 */
    double lp = isfinite(logprob) ? logprob : -9999.0;
    return json_pack("{s:o, s:f, s:o}", "token", text, "logprob", lp, "bytes", bytes);
}

static json_t *lp_entry(const em_tokenizer *tok, const em_event *ev)
{
    json_t *o = lp_token(tok, ev->token, ev->lp.logprob), *top = json_array();
    for (uint32_t k = 0; k < ev->lp.n_top; k++)
        json_array_append_new(top, lp_token(tok, ev->lp.top_id[k], ev->lp.top_lp[k]));
    json_object_set_new(o, "top_logprobs", top);
    return o;
}

json_t *em_gen_take_logprobs(em_gen *g, uint32_t i)
{
    if (!g->lp[i])
        return NULL;
    json_t *taken = g->lp[i];
    g->lp[i] = json_array();
    return taken;
}

typedef struct harmony_out harmony_out;
static void harmony_sink(void *ctx, em_harmony_channel ch, const char *s, size_t n);

/* Where a choice's answer goes when it has tools: the text to the delta
 * and the choice's text (a harmony model's: to its channels' split), the
 * calls to g->calls with their deltas. */
typedef struct {
    em_gen      *g;
    uint32_t     i;
    em_buf      *delta;
    harmony_out *ho;   /* a harmony model's (NULL: none) */
} tools_out;

static void tools_text(void *ctx, const char *s, size_t n)
{
    tools_out *o = ctx;
    if (o->ho) {
        em_harmony_feed(&o->g->hm[o->i], s, n, harmony_sink, o->ho);
        return;
    }
    em_buf_add(o->delta, s, n);
    em_buf_add(&o->g->text[o->i], s, n);
}

static void tools_call(void *ctx, uint32_t index, const char *name, const char *model_id)
{
    tools_out *o = ctx;
    em_gen *g = o->g;
    char id[40];
    if (model_id)   /* the one the model wrote: the next turn's template checks it */
        snprintf(id, sizeof id, "%s", model_id);
    else
        web_new_id(g->w, "call_", id, sizeof id);
    json_array_append_new(g->calls[o->i], json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", id, "type", "function",
                                                    "function", "name", name, "arguments", ""));
    if (!g->tdelta[o->i])
        g->tdelta[o->i] = json_array();
    json_array_append_new(g->tdelta[o->i], json_pack("{s:I, s:s, s:s, s:{s:s, s:s}}", "index", (json_int_t)index,
                                                     "id", id, "type", "function", "function", "name", name,
                                                     "arguments", ""));
}

/* s appended to the string member key of o (a JSON object). */
static void string_append(json_t *o, const char *key, const char *s, size_t n)
{
    json_t *v = json_object_get(o, key);
    em_buf b = { 0 };
    em_buf_add(&b, json_string_value(v), json_string_length(v));
    em_buf_add(&b, s, n);
    json_object_set_new(o, key, json_stringn(b.s ? b.s : "", b.n));
    em_buf_free(&b);
}

static void tools_args(void *ctx, uint32_t index, const char *s, size_t n)
{
    tools_out *o = ctx;
    em_gen *g = o->g;
    if (!n)
        return;
    string_append(json_object_get(json_array_get(g->calls[o->i], index), "function"), "arguments", s, n);
    if (!g->tdelta[o->i])
        g->tdelta[o->i] = json_array();
    json_t *last = json_array_get(g->tdelta[o->i], json_array_size(g->tdelta[o->i]) - 1);
    if (last && json_integer_value(json_object_get(last, "index")) == (json_int_t)index)   /* one delta per pump */
        string_append(json_object_get(last, "function"), "arguments", s, n);
    else
        json_array_append_new(g->tdelta[o->i], json_pack("{s:I, s:{s:s%}}", "index", (json_int_t)index, "function",
                                                         "arguments", s, n));
}

static const web_toolsink tools_sink = { tools_text, tools_call, tools_args };

json_t *em_gen_take_tool_deltas(em_gen *g, uint32_t i)
{
    json_t *d = g->tdelta[i];
    g->tdelta[i] = NULL;
    return d;
}

const json_t *em_gen_tool_calls(const em_gen *g, uint32_t i)
{
    return g->calls[i] && json_array_size(g->calls[i]) ? g->calls[i] : NULL;
}

/* Choice i's answer text (after any reasoning): through the split into
 * text and calls when it has tools, else to the delta and its text. */
static void answer_text(em_gen *g, uint32_t i, em_buf *delta, const char *s, size_t n)
{
    if (!n)
        return;
    if (g->tools_on) {
        tools_out to = { g, i, delta, NULL };
        if (g->rtok[i])   /* a bare call counts only at the output's start (the constraint's rule) */
            g->tp[i].at_start = 0;
        web_toolparse_feed(&g->tp[i], s, n, &tools_sink, &to);
    } else {
        em_buf_add(delta, s, n);
        em_buf_add(&g->text[i], s, n);
    }
}

/* Reasoning text of choice i: its delta and its whole. */
static void reasoning_text(em_gen *g, uint32_t i, const char *s, size_t n)
{
    em_buf_add(&g->rdelta[i], s, n);
    em_buf_add(&g->reasoning[i], s, n);
}

/* Choice i's generated bytes: split off the reasoning they begin with (a
 * think block), the rest the answer's. 1 when they were the reasoning's. */
static int think_feed(em_gen *g, uint32_t i, em_buf *delta, const char *s, size_t n, int done)
{
    em_buf r = { 0 }, a = { 0 };
    int in = 0;
    if (done)
        web_think_finish(&g->th[i], &r, &a);
    else
        in = web_think_feed(&g->th[i], s, n, &r, &a);
    reasoning_text(g, i, r.s, r.n);
    answer_text(g, i, delta, a.s, a.n);
    em_buf_free(&r);
    em_buf_free(&a);
    return in;
}

/* Where a harmony channel's text goes: the answer to the delta and the
 * choice's text, the reasoning apart, other channels nowhere (a tool call,
 * in commentary, was taken out before: tools_text). */
struct harmony_out {
    em_gen  *g;
    uint32_t i;
    em_buf  *delta;
    int      analysis;   /* this token's text was (in part) the reasoning's */
};

static void harmony_sink(void *ctx, em_harmony_channel ch, const char *s, size_t n)
{
    harmony_out *o = ctx;
    if (ch == EM_HARMONY_FINAL) {
        em_buf_add(o->delta, s, n);
        em_buf_add(&o->g->text[o->i], s, n);
    } else if (ch == EM_HARMONY_ANALYSIS) {
        reasoning_text(o->g, o->i, s, n);
        o->analysis = 1;
    }
}

int em_gen_pump(em_gen *g, em_buf *delta)
{
    int all = 1;
    if (web_drain_stopping(g->w) && !g->drain_stopped) {   /* --drain-s is up: stop (em_gen_drain_error) */
        g->drain_stopped = 1;
        em_gen_cancel(g);
    }
    for (uint32_t i = 0; i < g->n; i++) {
        em_event ev;
        if (i == 1)
            submit_rest(g);
        while (!g->done[i] && g->req[i] && em_request_next(g->req[i], &ev, 0)) {
            harmony_out ho = { g, i, &delta[i], 0 };
            int reasoning = 0;
            if (ev.text_len && g->harmony) {   /* (with tools: the calls taken out first) */
                tools_out to = { g, i, &delta[i], &ho };
                if (g->tools_on)
                    web_toolparse_feed(&g->tp[i], ev.text, ev.text_len, &tools_sink, &to);
                else
                    em_harmony_feed(&g->hm[i], ev.text, ev.text_len, harmony_sink, &ho);
                reasoning = ho.analysis;
            } else if (g->think_on && (ev.kind == EM_EV_TOKEN || ev.text_len)) {
                reasoning = think_feed(g, i, &delta[i], ev.text, ev.text_len, 0);
            } else if (!g->harmony) {
                answer_text(g, i, &delta[i], ev.text, ev.text_len);
            }
            if (ev.kind == EM_EV_TOKEN && reasoning)
                g->rtok[i]++;
            if (ev.text_len) {
                if (em_log_content())
                    em_log(EM_LOG_DEBUG, g->rec.request_id, "output %u: %.*s", i, (int)ev.text_len, ev.text);
            }
            if (ev.kind == EM_EV_TOKEN)
                g->seen[i]++;
            if (ev.kind == EM_EV_TOKEN && ev.has_lp && g->lp[i])
                json_array_append_new(g->lp[i], lp_entry(g->w->o.tok, &ev));
            if (ev.kind == EM_EV_DONE) {
                if (g->think_on)
                    think_feed(g, i, &delta[i], NULL, 0, 1);
                if (g->tools_on) {   /* (before harmony's: text it held goes there) */
                    tools_out to = { g, i, &delta[i], g->harmony ? &ho : NULL };
                    g->calls_whole[i] = web_toolparse_finish(&g->tp[i], &tools_sink, &to);
                    /* a call cut off (max_tokens) is not a call: only whole ones are returned */
                    size_t whole = g->tp[i].n_done;
                    while (json_array_size(g->calls[i]) > whole)
                        json_array_remove(g->calls[i], json_array_size(g->calls[i]) - 1);
                }
                if (g->harmony)
                    em_harmony_finish(&g->hm[i], harmony_sink, &ho);
                g->done[i] = 1;
                g->finish[i] = ev.finish;
                g->stop_hit[i] = ev.stop_hit;
                g->m[i] = ev.metrics;
                if (ev.finish == EM_FINISH_ERROR && !g->error[0])
                    snprintf(g->error, sizeof g->error, "%s", ev.error[0] ? ev.error : "generation failed");
            }
            em_event_clear(&ev);
        }
        all &= g->done[i];
    }
    return all;
}

const char *em_gen_reasoning(const em_gen *g, uint32_t i, size_t *len)
{
    *len = g->reasoning[i].n;
    return g->reasoning[i].s ? g->reasoning[i].s : "";
}

void em_gen_take_reasoning(em_gen *g, uint32_t i, em_buf *out)
{
    em_buf_add(out, g->rdelta[i].s, g->rdelta[i].n);
    em_buf_reset(&g->rdelta[i]);
}

uint32_t em_gen_reasoning_tokens(const em_gen *g)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < g->n; i++)
        n += g->rtok[i];
    return n;
}

const char *em_gen_text(const em_gen *g, uint32_t i, size_t *len)
{
    *len = g->text[i].n;
    return g->text[i].s ? g->text[i].s : "";
}

int em_gen_drain_error(const em_gen *g, em_web_error *e)
{
    for (uint32_t i = 0; i < g->n; i++)
        if (!g->done[i])
            return 0;
    if (!g->drain_stopped || g->error[0] || g->finish[0] != EM_FINISH_CANCELLED)
        return 0;
    uint32_t prompt, cached, comp;
    em_gen_usage(g, &prompt, &cached, &comp);
    web_drain_stopped(g->w, comp, e);
    return 1;
}

int em_gen_failed(const em_gen *g, em_web_error *e)
{
    if (em_gen_drain_error(g, e))
        return 1;
    if (!g->error[0])
        return 0;
    em_web_fail(e, 500, "server_error", NULL, NULL, "generation failed: %s", g->error);
    return 1;
}

uint32_t em_gen_n(const em_gen *g)
{
    return g->n;
}

int em_gen_choice_done(const em_gen *g, uint32_t i)
{
    return g->done[i];
}

em_finish em_gen_finish(const em_gen *g, uint32_t i)
{
    return g->finish[i];
}

const char *em_gen_finish_reason(const em_gen *g, uint32_t i)
{
    if (g->finish[i] == EM_FINISH_STOP && g->calls_whole[i])
        return "tool_calls";
    return em_finish_name(g->finish[i]);
}

int em_gen_stop_index(const em_gen *g, uint32_t i)
{
    return g->stop_hit[i] - 1;
}

const char *em_gen_error(const em_gen *g)
{
    return g->error[0] ? g->error : NULL;
}

void em_gen_cancel(em_gen *g)
{
    for (uint32_t i = 0; i < g->n_submitted; i++)
        em_request_cancel(g->req[i]);
    for (uint32_t i = g->n_submitted; i < g->n; i++) {   /* choices not submitted yet never will be */
        g->done[i] = 1;
        g->finish[i] = EM_FINISH_CANCELLED;
    }
    g->n_submitted = g->n;
}

uint32_t em_gen_queue_position(const em_gen *g)
{
    return g->done[0] ? 0 : em_sched_queue_position(g->w->o.sched, g->req[0]);
}

void em_gen_usage(const em_gen *g, uint32_t *prompt, uint32_t *cached, uint32_t *completion)
{
    uint32_t comp = 0, cach = 0;
    for (uint32_t i = 0; i < g->n; i++) {
        comp += g->done[i] ? g->m[i].completion_tokens : g->seen[i];
        if (g->m[i].cached_tokens > cach)
            cach = g->m[i].cached_tokens;
    }
    *prompt = g->prompt_tokens;
    *cached = cach;
    *completion = comp;
}

void em_gen_timings(const em_gen *g, double *queue_ms, double *ttft_ms, double *tok_s)
{
    const em_req_metrics *m = &g->m[0];
    *queue_ms = m->queue_ms;
    *ttft_ms = m->ttft_ms;
    double gen_s = (m->t_end - m->t_first);
    *tok_s = m->completion_tokens > 1 && gen_s > 0 ? (double)(m->completion_tokens - 1) / gen_s : 0;
}

void em_gen_destroy(em_gen *g)
{
    if (!g)
        return;
    int cancelled = 0, failed = 0, preempted = 0;
    for (uint32_t i = 0; i < g->n; i++) {   /* count what was generated and not yet taken */
        em_event ev;
        while (!g->done[i] && g->req[i] && em_request_next(g->req[i], &ev, 0)) {
            g->seen[i] += ev.kind == EM_EV_TOKEN;
            em_event_clear(&ev);
        }
    }
    for (uint32_t i = 0; i < g->n; i++) {
        if (!g->done[i])
            cancelled = 1;
        else if (g->finish[i] == EM_FINISH_CANCELLED)
            cancelled = 1;
        else if (g->finish[i] == EM_FINISH_ERROR)
            failed = 1;
        preempted += g->m[i].preemptions > 0;
        em_request_release(g->req[i]);   /* cancels what still runs: its blocks go back at once */
    }
    /* the final ledger row: totals over the choices, times of the first */
    const em_req_metrics *m = &g->m[0];
    em_usage_record *r = &g->rec;
    uint32_t prompt, cached, comp;
    em_gen_usage(g, &prompt, &cached, &comp);
    r->cached_tokens = cached;
    r->completion_tokens = comp;
    r->reasoning_tokens = em_gen_reasoning_tokens(g);
    for (uint32_t i = 0; i < g->n; i++)
        r->tool_calls += g->calls[i] ? (int32_t)json_array_size(g->calls[i]) : 0;
    r->finished_ms = epoch_ms();
    if (g->done[0]) {
        double base = m->t_submit;
        r->started_ms = m->t_start > 0 ? r->received_ms + (int64_t)((m->t_start - base) * 1e3) : 0;
        r->first_token_ms = m->t_first > 0 ? r->received_ms + (int64_t)((m->t_first - base) * 1e3) : 0;
        r->queue_ms = m->queue_ms;
        r->ttft_ms = m->completion_tokens ? m->ttft_ms : -1;
        r->tpot_mean_ms = m->completion_tokens > 1 ? m->tpot_mean_ms : -1;
        r->tpot_p99_ms = m->completion_tokens > 1 ? m->tpot_p99_ms : -1;
        r->preemptions = (int32_t)m->preemptions;
    }
    snprintf(r->finish_reason, sizeof r->finish_reason, "%s",
             cancelled ? "cancelled" : failed ? "error" : em_gen_finish_reason(g, 0));
    r->status = cancelled ? EM_USAGE_CANCELLED
              : failed    ? EM_USAGE_FAILED
              : preempted ? EM_USAGE_PREEMPTED_COMPLETED
                          : EM_USAGE_COMPLETED;
    if (failed)
        snprintf(r->error, sizeof r->error, "%s", g->error);
    ledger(g->w, r);
    atomic_fetch_sub(&g->w->gens, 1);
    gen_free(g);
}
