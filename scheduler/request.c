/* request.c — a request's life outside the planner: parameters copied at
 * submit, the event queue its consumer drains, generated text with stop
 * strings held back until they can no longer match, and the metrics
 * reported when it finishes. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "scheduler/sched_int.h"

double em_sched_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

const char *em_class_name(em_class c)
{
    return c == EM_CLASS_BACKGROUND ? "background" : "interactive";
}

int em_class_parse(const char *s, em_class *out)
{
    if (strcmp(s, "interactive") == 0)
        *out = EM_CLASS_INTERACTIVE;
    else if (strcmp(s, "background") == 0)
        *out = EM_CLASS_BACKGROUND;
    else
        return EM_EINVAL;
    return 0;
}

const char *em_finish_name(em_finish f)
{
    switch (f) {
    case EM_FINISH_STOP:      return "stop";
    case EM_FINISH_LENGTH:    return "length";
    case EM_FINISH_CANCELLED: return "cancelled";
    case EM_FINISH_ERROR:     return "error";
    default:                  return "none";
    }
}

void em_event_clear(em_event *ev)
{
    free(ev->text);
    ev->text = NULL;
    ev->text_len = 0;
    free(ev->embedding);
    ev->embedding = NULL;
    ev->n_embd = 0;
}

em_request *em_req_new(const em_req_params *p, uint32_t n_vocab, uint64_t order, em_err *err)
{
    em_request *r = calloc(1, sizeof *r);
    if (!r) {
        em_err_set(err, EM_ENOMEM, "scheduler: out of memory");
        return NULL;
    }
    atomic_init(&r->refs, 2);
    atomic_init(&r->cancel, 0);
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->sp = p->sample;
    r->cls = p->cls;
    r->n_prompt = p->n_prompt;
    r->max_tokens = p->max_tokens;
    r->ignore_eog = p->ignore_eog;
    r->logprobs = p->logprobs;
    r->top_logprobs = p->top_logprobs > EM_SAMPLE_MAX_TOP ? EM_SAMPLE_MAX_TOP : p->top_logprobs;
    r->notify = p->notify;
    r->user = p->user;
    r->order = order;
    r->pool_i = -1;
    r->slot = -1;
    r->d_slot = -1;
    r->state = R_WAITING;
    r->cap_toks = p->n_prompt + 64;
    r->toks = malloc(r->cap_toks * sizeof *r->toks);
    int rc = r->toks ? 0 : EM_ENOMEM;
    if (!rc) {
        memcpy(r->toks, p->prompt, p->n_prompt * sizeof *r->toks);
        r->n_toks = p->n_prompt;
    }
    if (!rc && p->n_stop_tokens) {
        r->stop_tokens = malloc(p->n_stop_tokens * sizeof *r->stop_tokens);
        if (!r->stop_tokens)
            rc = EM_ENOMEM;
        else {
            memcpy(r->stop_tokens, p->stop_tokens, p->n_stop_tokens * sizeof *r->stop_tokens);
            r->n_stop_tokens = p->n_stop_tokens;
        }
    }
    for (int i = 0; !rc && i < EM_MAX_STOP; i++) {
        if (!p->stop[i] || !p->stop[i][0])
            continue;
        if (!(r->stop[i] = strdup(p->stop[i])))
            rc = EM_ENOMEM;
        else if (strlen(r->stop[i]) > r->max_stop_len)
            r->max_stop_len = strlen(r->stop[i]);
    }
    if (rc)
        em_err_set(err, rc, "scheduler: out of memory");
    else if (!p->embed)   /* (an embedding samples nothing) */
        rc = em_sampler_create(&r->sp, n_vocab, &r->sampler, err);
    r->sp.logit_bias = NULL;   /* the caller's; the sampler keeps its copy */
    r->sp.n_logit_bias = 0;
    for (uint32_t i = 0; !rc && r->sampler && i < p->n_prompt; i++)   /* the repetition penalty sees the prompt */
        if ((rc = em_sampler_accept(r->sampler, p->prompt[i], 0)))
            em_err_set(err, rc, "scheduler: out of memory");
    if (rc) {
        atomic_store(&r->refs, 1);
        em_req_unref(r);
        return NULL;
    }
    em_detok_init(&r->dt, 0);
    r->m.cls = p->cls;
    r->m.prompt_tokens = p->n_prompt;
    return r;
}

int em_req_embed_init(em_request *r, const em_req_params *p, uint32_t n_embd)
{
    r->embed = 1;
    r->pooling = p->pooling == EM_POOL_NONE ? EM_POOL_MEAN : p->pooling;
    r->n_embd = n_embd;
    r->acc = calloc(n_embd, sizeof *r->acc);
    if (!r->acc)
        return EM_ENOMEM;
    if (p->types) {
        if (!(r->types = malloc(p->n_prompt)))
            return EM_ENOMEM;
        memcpy(r->types, p->types, p->n_prompt);
    }
    return 0;
}

void em_req_unref(em_request *r)
{
    if (!r || atomic_fetch_sub(&r->refs, 1) != 1)
        return;
    for (size_t i = 0; i < r->ev_n; i++)
        em_event_clear(&r->evq[(r->ev_head + i) % r->ev_cap]);
    free(r->evq);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    em_sampler_destroy(r->sampler);
    em_sampler_destroy(r->dsampler);
    free(r->q);
    if (r->con.ctx && r->con.destroy)
        r->con.destroy(r->con.ctx);
    free(r->toks);
    free(r->stop_tokens);
    for (int i = 0; i < EM_MAX_STOP; i++)
        free(r->stop[i]);
    free(r->text);
    free(r->gaps);
    free(r->types);
    free(r->acc);
    free(r->emb);
    free(r);
}

void em_request_release(em_request *r)
{
    if (!r)
        return;
    atomic_store(&r->cancel, 1);
    em_req_unref(r);
}

void em_request_cancel(em_request *r)
{
    atomic_store(&r->cancel, 1);
}

int em_request_next(em_request *r, em_event *ev, int timeout_ms)
{
    pthread_mutex_lock(&r->mu);
    if (r->ev_n == 0 && timeout_ms != 0) {
        if (timeout_ms < 0) {
            while (r->ev_n == 0)
                pthread_cond_wait(&r->cv, &r->mu);
        } else {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += timeout_ms / 1000;
            ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            while (r->ev_n == 0)
                if (pthread_cond_timedwait(&r->cv, &r->mu, &ts) != 0)
                    break;
        }
    }
    int got = r->ev_n > 0;
    if (got) {
        *ev = r->evq[r->ev_head];
        r->ev_head = (r->ev_head + 1) % r->ev_cap;
        r->ev_n--;
    }
    pthread_mutex_unlock(&r->mu);
    return got;
}

/* Queue an event (takes ownership of ev->text) and wake the consumer. */
static void push_event(em_request *r, em_event *ev)
{
    pthread_mutex_lock(&r->mu);
    if (r->ev_n == r->ev_cap) {
        size_t cap = r->ev_cap ? r->ev_cap * 2 : 16;
        em_event *nq = malloc(cap * sizeof *nq);
        if (!nq) {   /* out of memory: drop the text, keep the event */
            em_event_clear(ev);
            pthread_mutex_unlock(&r->mu);
            return;
        }
        for (size_t i = 0; i < r->ev_n; i++)
            nq[i] = r->evq[(r->ev_head + i) % r->ev_cap];
        free(r->evq);
        r->evq = nq;
        r->ev_cap = cap;
        r->ev_head = 0;
    }
    r->evq[(r->ev_head + r->ev_n) % r->ev_cap] = *ev;
    r->ev_n++;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    if (r->notify)
        r->notify(r->user);
}

int em_req_push_token(em_request *r, int32_t id)
{
    if (r->n_toks == r->cap_toks) {
        uint32_t cap = r->cap_toks * 2;
        int32_t *nt = realloc(r->toks, cap * sizeof *nt);
        if (!nt)
            return EM_ENOMEM;
        r->toks = nt;
        r->cap_toks = cap;
    }
    r->toks[r->n_toks++] = id;
    return 0;
}

static int append_text(em_request *r, const char *s, size_t n)
{
    if (r->text_len + n + 1 > r->text_cap) {
        size_t cap = r->text_cap ? r->text_cap : 256;
        while (cap < r->text_len + n + 1)
            cap *= 2;
        char *nt = realloc(r->text, cap);
        if (!nt)
            return EM_ENOMEM;
        r->text = nt;
        r->text_cap = cap;
    }
    memcpy(r->text + r->text_len, s, n);
    r->text_len += n;
    r->text[r->text_len] = 0;
    return 0;
}

static char *dup_range(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d) {
        if (n)   /* s may be NULL when there is no text yet */
            memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

/* Bytes at the end of the text that could still grow into a stop string. */
static size_t held_back(const em_request *r)
{
    size_t best = 0;
    for (int i = 0; i < EM_MAX_STOP; i++) {
        const char *st = r->stop[i];
        if (!st)
            continue;
        size_t sl = strlen(st);
        for (size_t k = sl - 1; k > best; k--) {
            if (k <= r->text_len - r->emitted &&
                memcmp(r->text + r->text_len - k, st, k) == 0) {
                best = k;
                break;
            }
        }
    }
    return best;
}

int em_req_emit_token(em_request *r, const em_tokenizer *tok, int32_t id, const em_sample_lp *lp, double now)
{
    char piece[512];
    int k = em_detok_push(tok, &r->dt, id, piece, sizeof piece);
    if (k > 0)
        append_text(r, piece, (size_t)k);
    int stopped = 0;
    size_t upto = r->text_len;
    if (r->max_stop_len) {
        /* a stop string may straddle the previous emission point */
        size_t from = r->emitted > r->max_stop_len ? r->emitted - r->max_stop_len : 0;
        for (int i = 0; i < EM_MAX_STOP; i++) {
            const char *hit = r->stop[i] ? strstr(r->text + from, r->stop[i]) : NULL;
            if (hit && (size_t)(hit - r->text) < upto) {
                upto = (size_t)(hit - r->text);
                stopped = 1;
                r->stop_hit = i + 1;
            }
        }
        if (!stopped)
            upto = r->text_len - held_back(r);
        if (upto < r->emitted)
            upto = r->emitted;
    }
    em_event ev = { .kind = EM_EV_TOKEN, .token = id };
    if (lp) {
        ev.has_lp = 1;
        ev.lp = *lp;
    }
    ev.text = dup_range(r->text + r->emitted, upto - r->emitted);
    ev.text_len = ev.text ? (uint32_t)(upto - r->emitted) : 0;
    r->emitted = upto;
    if (stopped)
        r->text_len = upto;   /* the stop string and anything after it are dropped */

    r->n_gen++;
    r->m.completion_tokens = r->n_gen;
    if (r->n_gen == 1) {
        r->m.t_first = now;
    } else {
        if (r->n_gaps == r->cap_gaps) {
            uint32_t cap = r->cap_gaps ? r->cap_gaps * 2 : 64;
            double *ng = realloc(r->gaps, cap * sizeof *ng);
            if (ng) {
                r->gaps = ng;
                r->cap_gaps = cap;
            }
        }
        if (r->n_gaps < r->cap_gaps)
            r->gaps[r->n_gaps++] = (now - r->t_last) * 1e3;
    }
    r->t_last = now;
    push_event(r, &ev);
    return stopped;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

void em_req_finish(em_request *r, const em_tokenizer *tok, em_finish f, const char *error, double now)
{
    if (r->state == R_FINISHED)
        return;
    r->state = R_FINISHED;
    if (f != EM_FINISH_STOP || r->emitted == r->text_len) {
        char piece[64];
        int k = em_detok_flush(tok, &r->dt, piece, sizeof piece);
        if (k > 0)
            append_text(r, piece, (size_t)k);
    }
    em_event ev = { .kind = EM_EV_DONE, .finish = f, .stop_hit = f == EM_FINISH_STOP ? r->stop_hit : 0 };
    ev.text = dup_range(r->text + r->emitted, r->text_len - r->emitted);
    ev.text_len = ev.text ? (uint32_t)(r->text_len - r->emitted) : 0;
    r->emitted = r->text_len;
    if (error)
        snprintf(ev.error, sizeof ev.error, "%s", error);
    if (r->emb && f == EM_FINISH_STOP) {   /* an embed request's vector: the event's now */
        ev.embedding = r->emb;
        ev.n_embd = r->n_embd;
        r->emb = NULL;
    }
    em_req_metrics *m = &r->m;
    m->t_end = now;
    m->total_ms = (now - m->t_submit) * 1e3;
    m->queue_ms = r->admitted_once ? (m->t_start - m->t_submit) * 1e3 : m->total_ms;
    m->ttft_ms = r->n_gen ? (m->t_first - m->t_submit) * 1e3 : 0;
    if (r->n_gaps) {
        double sum = 0;
        for (uint32_t i = 0; i < r->n_gaps; i++)
            sum += r->gaps[i];
        m->tpot_mean_ms = sum / r->n_gaps;
        qsort(r->gaps, r->n_gaps, sizeof *r->gaps, cmp_double);
        uint32_t k = (uint32_t)ceil(0.99 * r->n_gaps);
        m->tpot_p99_ms = r->gaps[k ? k - 1 : 0];
    }
    ev.metrics = *m;
    push_event(r, &ev);
}
