/* sched.c — the scheduler thread and its step planner: continuous batching
 * of interactive and background requests over one device (see scheduler.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "core/run/encode.h"
#include "core/run/kv.h"
#include "scheduler/sched_int.h"

#define IDLE_BEAT_S 0.5  /* an idle thread wakes this often to show it lives (em_sched_heartbeat_us) */

void em_sched_opts_init(em_sched_opts *o)
{
    memset(o, 0, sizeof *o);
    o->step_tokens = 512;
    o->max_waiting[EM_CLASS_INTERACTIVE] = 256;
    o->max_waiting[EM_CLASS_BACKGROUND] = 1024;
    o->aging_ms = 10000;
    o->bg_step_ms = 200;
    o->prefix_cache = 1;
}

/* ---- lists --------------------------------------------------------------------- */

/* Insert into a singly linked list kept in (class, order) order. */
static void list_insert(em_request **head, em_request *r)
{
    em_request **pp = head;
    while (*pp && ((*pp)->cls < r->cls || ((*pp)->cls == r->cls && (*pp)->order < r->order)))
        pp = &(*pp)->next;
    r->next = *pp;
    *pp = r;
}

static void list_remove(em_request **head, em_request *r)
{
    for (em_request **pp = head; *pp; pp = &(*pp)->next) {
        if (*pp == r) {
            *pp = r->next;
            r->next = NULL;
            return;
        }
    }
}

/* ---- finishing and preempting ---------------------------------------------------- */

static void release_slot(em_sched *s, em_request *r)
{
    if (r->slot >= 0) {
        em_kv_seq_close(s->kv, r->slot);
        r->slot = -1;
    }
    r->n_done = 0;
    if (r->d_slot >= 0) {
        em_kv_seq_close(s->dkv, r->d_slot);
        r->d_slot = -1;
    }
    r->d_done = r->d_n = 0;
}

/* A running request ends: blocks released, DONE sent, the scheduler's
 * reference dropped. */
void sched_finish_running(em_sched *s, em_request *r, em_finish f, const char *error)
{
    release_slot(s, r);
    list_remove(&s->running, r);
    pthread_mutex_lock(&s->mu);
    s->n_running[r->cls]--;
    pthread_mutex_unlock(&s->mu);
    em_req_finish(r, s->tok, f, error, em_sched_now());
    em_req_unref(r);
}

/* Send a running request back to the waiting queue; it is recomputed
 * (prompt + what it generated) when admitted again. */
static void preempt(em_sched *s, em_request *r)
{
    release_slot(s, r);
    list_remove(&s->running, r);
    r->state = R_WAITING;
    r->m.preemptions++;
    pthread_mutex_lock(&s->mu);
    s->n_running[r->cls]--;
    list_insert(&s->waitq[r->cls], r);
    s->n_waiting[r->cls]++;
    s->st.preemptions++;
    pthread_mutex_unlock(&s->mu);
}

static int in_batch(const em_sched *s, uint32_t n_rows, const em_request *r)
{
    for (uint32_t i = 0; i < n_rows; i++)
        if (s->b_req[i] == r)
            return 1;
    return 0;
}

/* The running request to preempt so that `for_r` can get blocks: the newest
 * background one not already in this step's batch (for a background
 * requester, only newer ones). NULL if none. */
static em_request *pick_victim(em_sched *s, const em_request *for_r, uint32_t n_rows)
{
    em_request *v = NULL;
    for (em_request *r = s->running; r; r = r->next) {
        if (r == for_r || r->cls != EM_CLASS_BACKGROUND || in_batch(s, n_rows, r))
            continue;
        if (for_r->cls == EM_CLASS_BACKGROUND && r->order < for_r->order)
            continue;
        if (!v || r->order > v->order)
            v = r;
    }
    return v;
}

/* Reserve positions [from, to) for r, preempting background work if r may.
 * Returns 0, or EM_EBUSY when the blocks cannot be had this step. */
static int reserve(em_sched *s, em_request *r, uint32_t from, uint32_t to, uint32_t n_rows,
                   uint32_t *n_copies)
{
    for (;;) {
        int rc = em_kv_seq_reserve(s->kv, r->slot, from, to, s->copies, s->max_copies, n_copies, NULL);
        if (rc != EM_EBUSY)
            return rc;
        em_request *v = pick_victim(s, r, n_rows);
        if (!v)
            return EM_EBUSY;
        preempt(s, v);
    }
}

/* ---- planning ---------------------------------------------------------------------- */

/* A generated token of r waits to be fed alone: a decode (an embed
 * request's last prompt token is prompt work). */
static int decoding(const em_request *r)
{
    return !r->embed && r->n_toks - r->n_done == 1;
}

/* The pooled span of an embed request's chunk of c tokens at batch row
 * first (its positions r->n_done..): the rows its pooling sums
 * (em_pool_rows); none when the chunk holds none of them. */
static void embed_span(em_sched *s, em_request *r, uint32_t first, uint32_t c)
{
    uint32_t at, n = em_pool_rows(r->pooling, r->n_done, c, r->n_toks, &at);
    r->pool_i = -1;
    if (n) {
        s->b_pool[2 * s->n_pool] = (int32_t)(first + at);
        s->b_pool[2 * s->n_pool + 1] = (int32_t)n;
        r->pool_i = (int32_t)s->n_pool++;
    }
    s->b_has_types |= r->types != NULL;
}

/* Add tokens [r->n_done, r->n_done + c) of r to the batch. */
static void add_rows(em_sched *s, em_request *r, uint32_t c, uint32_t *T, uint32_t *L)
{
    if (r->embed)
        embed_span(s, r, *T, c);
    for (uint32_t i = 0; i < c; i++) {
        uint32_t p = r->n_done + i;
        s->b_tok[*T] = r->toks[p];
        s->b_pos[*T] = (int32_t)p;
        s->b_seq[*T] = r->slot;
        /* a generated token fed alone takes the decode path; prompt chunks
         * (also a recomputed history) the prefill path, whatever their size */
        s->b_dec[*T] = c == 1 && p >= r->n_prompt;
        s->b_req[*T] = r;
        s->b_cnt[*T] = i == 0 ? c : 0;
        s->b_types[*T] = r->types ? r->types[p] : 0;   /* (an embed request's: p < n_prompt) */
        if (!r->embed && p + 1 + r->n_draft >= r->n_toks)   /* the last token's logits, and each draft's */
            s->b_rows[(*L)++] = (int32_t)*T;
        (*T)++;
    }
    s->b_tables[r->slot] = em_kv_seq_table(s->kv, r->slot);
    s->b_tables_w[r->slot] = em_kv_seq_table_window(s->kv, r->slot);
}

/* The next waiting request to admit: an aged background one first (so none
 * waits forever), else the oldest interactive, else the oldest background. */
static int aged_out(const em_sched *s, const em_request *r, double now)
{
    double aging = s->o.aging_ms > 0 ? s->o.aging_ms : 10000;
    return (now - r->m.t_submit) * 1e3 >= aging;
}

static em_request *next_waiting(em_sched *s, double now)
{
    em_request *bg = s->waitq[EM_CLASS_BACKGROUND], *ia = s->waitq[EM_CLASS_INTERACTIVE];
    if (bg && aged_out(s, bg, now))
        return bg;
    return ia ? ia : bg;
}

/* Try to admit r: a slot, its cached prefix, room for its whole pending
 * prompt (preempting background work for an interactive request), and a
 * first chunk of at most budget tokens. An embed request takes nothing
 * from the prefix cache and needs no room to generate; on an encoder its
 * whole prompt goes in this step or it waits. 0 when admitted. */
static int admit(em_sched *s, em_request *r, uint32_t budget, uint32_t *T, uint32_t *L,
                 uint32_t *n_copies, double now)
{
    if (s->be.encoder && r->n_toks > budget)
        return EM_EBUSY;
    int32_t slot;
    while (em_kv_seq_open(s->kv, &slot, NULL)) {   /* every slot taken: an interactive request takes a
                                                       * background one's (it is recomputed later, its
                                                       * full blocks from the prefix cache) */
        em_request *v = r->cls == EM_CLASS_INTERACTIVE ? pick_victim(s, r, *T) : NULL;
        if (!v)
            return EM_EBUSY;
        preempt(s, v);
    }
    r->slot = slot;
    uint32_t matched = r->embed ? 0 : em_kv_seq_match(s->kv, slot, r->toks, r->n_toks);
    /* room for the whole pending prompt and one generated token */
    uint32_t need = (r->n_toks + !r->embed + EM_KV_BLOCK - 1) / EM_KV_BLOCK - matched / EM_KV_BLOCK;
    while (em_kv_available(s->kv) < need) {
        em_request *v = r->cls == EM_CLASS_INTERACTIVE ? pick_victim(s, r, *T) : NULL;
        if (!v) {
            release_slot(s, r);
            return EM_EBUSY;
        }
        preempt(s, v);
    }
    r->n_done = matched;
    uint32_t c = r->n_toks - matched;
    if (c > budget)
        c = budget;
    if (em_kv_seq_reserve(s->kv, slot, matched, matched + c, s->copies, s->max_copies, n_copies, NULL)) {
        release_slot(s, r);
        return EM_EBUSY;
    }
    pthread_mutex_lock(&s->mu);
    list_remove(&s->waitq[r->cls], r);
    s->n_waiting[r->cls]--;
    s->n_running[r->cls]++;
    pthread_mutex_unlock(&s->mu);
    r->state = R_RUNNING;
    list_insert(&s->running, r);
    if (!r->admitted_once) {
        r->admitted_once = 1;
        /* (now is this step's clock: a request submitted after it was read waited not at all) */
        r->m.t_start = now > r->m.t_submit ? now : r->m.t_submit;
        r->m.cached_tokens = matched < r->n_prompt ? matched : r->n_prompt;
    }
    if (r->embed)   /* (again after a preemption: the prompt is run again from its start) */
        memset(r->acc, 0, r->n_embd * sizeof *r->acc);
    add_rows(s, r, c, T, L);
    return 0;
}

/* Requests cancelled while waiting end here; running ones in the step. */
static void reap_cancelled(em_sched *s)
{
    for (em_request *r = s->running, *next; r; r = next) {
        next = r->next;
        if (atomic_load(&r->cancel))
            sched_finish_running(s, r, EM_FINISH_CANCELLED, NULL);
    }
    for (int c = 0; c < EM_CLASS_COUNT; c++) {
        for (;;) {
            em_request *found = NULL;
            pthread_mutex_lock(&s->mu);
            for (em_request *r = s->waitq[c]; r; r = r->next) {
                if (atomic_load(&r->cancel)) {
                    found = r;
                    list_remove(&s->waitq[c], r);
                    s->n_waiting[c]--;
                    break;
                }
            }
            pthread_mutex_unlock(&s->mu);
            if (!found)
                break;
            em_req_finish(found, s->tok, EM_FINISH_CANCELLED, NULL, em_sched_now());
            em_req_unref(found);
        }
    }
}

static int is_stop_token(const em_request *r, int32_t id)
{
    for (uint32_t i = 0; i < r->n_stop_tokens; i++)
        if (r->stop_tokens[i] == id)
            return 1;
    return 0;
}

/* The tokens a constrained request may take next into s->allow: the
 * constraint's, the end-of-generation ids when it can end there (never
 * with ignore_eog). Nonzero with why filled when there are none, or the
 * constraint failed. */
static int constrain(em_sched *s, em_request *r, uint32_t *allow, char *why, size_t cap)
{
    uint32_t words = (s->be.n_vocab + 31) / 32;
    memset(allow, 0, words * sizeof *allow);
    em_err err = { 0 };
    if (r->con.allowed(r->con.ctx, allow, &err)) {
        snprintf(why, cap, "%s", err.msg);
        return -1;
    }
    int can_end = !r->ignore_eog && r->con.can_end(r->con.ctx);
    for (uint32_t i = 0; i < s->n_eog; i++) {
        if (can_end)
            allow[s->eog[i] / 32] |= 1u << (s->eog[i] % 32);
        else
            allow[s->eog[i] / 32] &= ~(1u << (s->eog[i] % 32));
    }
    for (uint32_t i = 0; i < r->n_stop_tokens; i++)   /* a stop token ends the output: only where it may */
        if (!can_end && (uint32_t)r->stop_tokens[i] < s->be.n_vocab)
            allow[r->stop_tokens[i] / 32] &= ~(1u << (r->stop_tokens[i] % 32));
    for (uint32_t w = 0; w < words; w++)
        if (allow[w])
            return 0;
    snprintf(why, cap, "the output's grammar allows no token of the vocabulary here (after %u generated tokens)",
             r->n_gen);
    return -1;
}

/* Before the step: each logit row's mask (a constrained request's) and,
 * when the device chooses, its steering; a step whose adjustments do not
 * fit be.max_adj goes to the host whole (s->on_device 0). Row li belongs to
 * the request whose chunk ends at token b_rows[li]. */
static void steer_rows(em_sched *s, uint32_t T, uint32_t L)
{
    uint32_t words = (s->be.n_vocab + 31) / 32, li = 0;
    uint64_t used = 0;
    s->on_device = s->be.step_top != NULL;
    for (uint32_t i = 0; i < T; i++) {
        if (!s->b_cnt[i])
            continue;
        em_request *r = s->b_req[i];
        if (r->embed || r->n_done + s->b_cnt[i] < r->n_toks)
            continue;   /* a prompt chunk (an embed request's are all): no logits yet */
        while (li < L && (uint32_t)s->b_rows[li] < i)
            li++;
        if (li >= L)
            break;
        uint32_t *allow = s->allow + (size_t)li * words;
        r->con_fail = r->con.ctx && constrain(s, r, allow, r->con_why, sizeof r->con_why);
        if (!s->on_device)
            continue;
        uint32_t room = used < s->be.max_adj ? (uint32_t)(s->be.max_adj - used) : 0;
        em_sample_adj *adj = s->adj + used;
        uint32_t n = em_sampler_adjustments(r->sampler, adj, room);
        if (n > room) {
            s->on_device = 0;   /* penalties over long contexts: this step on the host */
            continue;
        }
        used += n;
        /* a speculating sequence's rows (no penalties, no constraint) share it */
        for (uint32_t k = 0; k <= r->n_draft && li + k < L; k++)
            s->steer[li + k] = (em_sample_steer){ em_sampler_temp(r->sampler), adj, n,
                                                  r->con.ctx && !r->con_fail ? allow : NULL };
    }
}

/* r's next token is id (lp: its log-probabilities, or NULL): end it there
 * (end of text, a stop token), or take it — the sampler's record, the
 * constraint, the text and its stop strings — and end r where it is done.
 * Returns 1 when r finished. */
int sched_emit_one(em_sched *s, em_request *r, int32_t id, const em_sample_lp *lp, double now)
{
    if ((!r->ignore_eog && em_tokenizer_is_eog(s->tok, id)) || is_stop_token(r, id)) {
        sched_finish_running(s, r, EM_FINISH_STOP, NULL);
        return 1;
    }
    if (em_req_push_token(r, id) || em_sampler_accept(r->sampler, id, 1)) {
        sched_finish_running(s, r, EM_FINISH_ERROR, "out of memory");
        return 1;
    }
    em_err cerr = { 0 };
    if (r->con.ctx && r->con.accept(r->con.ctx, id, &cerr)) {
        sched_finish_running(s, r, EM_FINISH_ERROR, cerr.msg);
        return 1;
    }
    int stopped = em_req_emit_token(r, s->tok, id, lp, now);
    if (!stopped && r->con.ctx && r->con.done(r->con.ctx))
        stopped = 1;   /* the constraint is complete: nothing more may follow */
    if (stopped) {
        sched_finish_running(s, r, EM_FINISH_STOP, NULL);
        return 1;
    }
    if ((r->max_tokens && r->n_gen >= r->max_tokens) || r->n_toks >= s->be.max_ctx) {
        sched_finish_running(s, r, EM_FINISH_LENGTH, NULL);
        return 1;
    }
    return 0;
}

/* After the step, an embed request's chunk of c tokens: its pooled row
 * into the sums, and at the prompt's end the vector (the mean divides by
 * the prompt's length) on DONE. Nothing goes into the prefix cache, but a
 * sliding-window model's commit, which hands back the window pool's blocks
 * behind the window (and registers the full ones). */
static void embed_advance(em_sched *s, em_request *r, uint32_t c)
{
    r->n_done += c;
    if (s->be.window)
        em_kv_seq_commit(s->kv, r->slot, r->toks, r->n_done);
    if (r->pool_i >= 0) {
        const float *row = s->be.pooled(s->be.ctx, (uint32_t)r->pool_i);
        r->pool_i = -1;
        if (!row) {
            sched_finish_running(s, r, EM_FINISH_ERROR, "the step gave no pooled row");
            return;
        }
        for (uint32_t d = 0; d < r->n_embd; d++)
            r->acc[d] += row[d];
    }
    if (r->n_done < r->n_toks)
        return;
    double div = r->pooling == EM_POOL_MEAN ? r->n_toks : 1;
    free(r->emb);
    if (!(r->emb = malloc(r->n_embd * sizeof *r->emb))) {
        sched_finish_running(s, r, EM_FINISH_ERROR, "out of memory");
        return;
    }
    for (uint32_t d = 0; d < r->n_embd; d++)
        r->emb[d] = (float)(r->acc[d] / div);
    sched_finish_running(s, r, EM_FINISH_STOP, NULL);
}

/* After the step: advance every request in the batch, sample where it
 * produced logits, emit, and finish what is done. */
static void advance(em_sched *s, uint32_t T, uint32_t L, double now)
{
    uint32_t gen = 0, pre = 0, summary = 0, whole = 0;
    uint32_t li = 0;
    for (uint32_t i = 0; i < T; i++) {
        if (!s->b_cnt[i])
            continue;
        em_request *r = s->b_req[i];
        uint32_t c = s->b_cnt[i];
        if (r->embed) {
            pre += c;
            embed_advance(s, r, c);
            continue;
        }
        if (r->n_draft) {
            while (li < L && (uint32_t)s->b_rows[li] < i)
                li++;
            sched_spec_advance(s, r, li, now, &gen);
            continue;
        }
        r->n_done += c;
        em_kv_seq_commit(s->kv, r->slot, r->toks, r->n_done);
        if (r->n_done < r->n_toks) {   /* a prompt chunk: no logits yet */
            pre += c;
            continue;
        }
        pre += c > 1 ? c - 1 : 0;
        while (li < L && (uint32_t)s->b_rows[li] < i)
            li++;
        const float *lg = s->logits + (size_t)li * s->be.n_vocab;
        em_sample_lp lp, *lpp = r->logprobs ? &lp : NULL;
        if (r->con_fail) {
            sched_finish_running(s, r, EM_FINISH_ERROR, r->con_why);
            continue;
        }
        int32_t id;
        if (s->on_device) {   /* from the device's summary; the steered row when it is not enough */
            id = em_sampler_sample_top(r->sampler, &s->top[li], r->top_logprobs, lpp);
            if (id < 0) {
                id = em_sampler_sample_steered(r->sampler, s->be.row(s->be.ctx, li), r->top_logprobs, lpp);
                whole++;
            } else {
                summary++;
            }
        } else {
            const uint32_t *allow = r->con.ctx ? s->allow + (size_t)li * ((s->be.n_vocab + 31) / 32) : NULL;
            id = em_sampler_sample_lp(r->sampler, lg, allow, r->top_logprobs, lpp);
        }
        if (id < 0) {
            sched_finish_running(s, r, EM_FINISH_ERROR, "out of memory");
            continue;
        }
        gen++;
        sched_emit_one(s, r, id, lpp, now);
    }
    pthread_mutex_lock(&s->mu);
    s->st.tokens_generated += gen;
    s->st.tokens_prefilled += pre;
    s->st.chosen_on_device += summary;
    s->st.chosen_from_row += whole;
    s->st.spec_drafted = s->spec_drafted;
    s->st.spec_accepted = s->spec_accepted;
    s->win_tok[s->win_i % RATE_WINDOW] = gen;
    pthread_mutex_unlock(&s->mu);
}

/* Every waiting request finishes with f (and error). */
void sched_finish_waiting(em_sched *s, em_finish f, const char *error)
{
    for (int c = 0; c < EM_CLASS_COUNT; c++) {
        for (;;) {
            pthread_mutex_lock(&s->mu);
            em_request *r = s->waitq[c];
            if (r) {
                s->waitq[c] = r->next;
                s->n_waiting[c]--;
            }
            pthread_mutex_unlock(&s->mu);
            if (!r)
                break;
            em_req_finish(r, s->tok, f, error, em_sched_now());
            em_req_unref(r);
        }
    }
}

/* Fail every running request (device error): their blocks are freed. */
void sched_fail_all(em_sched *s, const char *msg)
{
    while (s->running)
        sched_finish_running(s, s->running, EM_FINISH_ERROR, msg);
}

static void plan_and_run(em_sched *s);

/* One step, then the KV counters for em_sched_get_stats. */
static void step_once(em_sched *s)
{
    plan_and_run(s);
    em_kv_stats ks, dks = { 0 };
    em_kv_get_stats(s->kv, &ks);
    if (s->dkv)
        em_kv_get_stats(s->dkv, &dks);
    pthread_mutex_lock(&s->mu);
    s->st.kv = ks;
    s->st.kv_draft = dks;
    s->st.kv_live_sum += ks.tokens_live;
    s->st.kv_alloc_sum += ks.tokens_alloc;
    pthread_mutex_unlock(&s->mu);
}

/* A least-squares fit of step time (ms) = a + b * rows over the recent
 * steps: 1 with *a and *b when steps of different sizes show a cost per
 * row; 0 when they do not (one step size only, or noise), *b then the mean
 * time per row and *a 0; -1 while there is too little history. */
static int step_fit(const em_sched *s, double *a_out, double *b_out)
{
    uint32_t n = s->win_i < RATE_WINDOW ? s->win_i : RATE_WINDOW;
    if (n < 4)
        return -1;
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (uint32_t i = 0; i < n; i++) {
        double x = s->win_rows[i], y = s->win_busy[i] * 1e3;
        sx += x;
        sy += y;
        sxx += x * x;
        sxy += x * y;
    }
    double var = sxx - sx * sx / n, a, b;
    if (var > 1e-9 * n) {
        b = (sxy - sx * sy / n) / var;
        a = (sy - b * sx) / n;
    } else {
        b = 0;
        a = 0;
    }
    int fit = b > 0;
    if (!fit) {   /* one step size only, or noise: charge all time to the rows */
        b = sx > 0 ? sy / sx : 0;
        a = 0;
    }
    *a_out = a;
    *b_out = b;
    return fit;
}

/* Rows a step may hold to last about ms (step_fit); UINT32_MAX while there
 * is too little history (or no measurable cost per row) to say. */
static uint32_t rows_within(const em_sched *s, double ms)
{
    double a, b;
    if (step_fit(s, &a, &b) < 0 || b <= 1e-6)
        return UINT32_MAX;
    double rows = (ms - (a > 0 ? a : 0)) / b;
    return rows <= 0 ? 0 : rows >= (double)UINT32_MAX ? UINT32_MAX : (uint32_t)rows;
}

/* One step's plan as it fills: the token budget, the batch's rows and
 * logit rows so far, the block copies it needs, and the class rules'
 * state (see plan_limits). */
typedef struct {
    uint32_t budget, T, L, n_copies;
    uint32_t bg_rows;    /* background prompt rows still allowed (UINT32_MAX: no bound) */
    uint32_t bg_placed;  /* background prompt rows placed */
    uint32_t dec_left;   /* decodes not yet placed (speculation leaves them room) */
    int      ia_prompt;  /* an interactive prompt is in the step */
    int      hold_bg_dec;/* background decodes sit this step out */
} plan;

/* Background prompt work is what makes a step long, and an interactive
 * request arriving meanwhile waits for that step: background prompt rows
 * stop while an interactive prompt is in the step, and otherwise fill a
 * step only to about bg_step_ms (at least one block's worth, so they always
 * progress). Background decodes run in every step but one that carries an
 * interactive prompt where, by the measured cost per row (step_fit), they
 * would make the step half as long again: on a compute-bound device an
 * arriving chat's first token then costs its own prefill, not the batch's
 * decodes too; on one where rows are nearly free they stay. Never two steps
 * in a row, so background decoding keeps at least half its pace under any
 * chat load. Called as the background class's turn begins. */
static void plan_limits(em_sched *s, plan *p, uint32_t n_snap)
{
    if (s->o.bg_step_ms > 0) {
        uint32_t fit = rows_within(s, s->o.bg_step_ms);
        p->bg_rows = p->ia_prompt ? 0 : fit > p->T + EM_KV_BLOCK ? fit - p->T : EM_KV_BLOCK;
    }
    double a, b;
    uint32_t n_dec = 0;
    for (uint32_t k = 0; k < n_snap; k++)
        n_dec += s->snap[k]->state == R_RUNNING && s->snap[k]->cls == EM_CLASS_BACKGROUND && decoding(s->snap[k]);
    p->hold_bg_dec = p->ia_prompt && !s->bg_dec_held && n_dec && step_fit(s, &a, &b) == 1 &&
                     b * n_dec > 0.5 * ((a > 0 ? a : 0) + b * p->T);
    s->bg_dec_held = p->hold_bg_dec;
}

/* The running requests of class cls into the batch: their decodes (with
 * drafts, when they speculate), then their prompt chunks. */
static void plan_running(em_sched *s, plan *p, int cls, uint32_t n_snap)
{
    for (int pass = 0; pass < 2; pass++) {
        for (uint32_t k = 0; k < n_snap && p->T < p->budget; k++) {
            em_request *r = s->snap[k];
            if (r->state != R_RUNNING || (int)r->cls != cls)   /* preempted earlier in this step */
                continue;
            uint32_t pending = r->n_toks - r->n_done;
            if ((pass == 0) != decoding(r) || in_batch(s, p->T, r) || (pass == 0 && p->hold_bg_dec))
                continue;
            uint32_t c = pending < p->budget - p->T ? pending : p->budget - p->T;
            if (pass == 1 && cls == EM_CLASS_BACKGROUND) {
                if (!p->bg_rows)
                    continue;
                c = c < p->bg_rows ? c : p->bg_rows;
            }
            if (!r->embed && p->L == s->be.max_logits && r->n_done + c == r->n_toks)
                continue;
            if (pass == 0 && r->spec_max && sched_drafts(s, r, p->budget - p->T, p->L, p->dec_left))
                c += r->n_draft;
            if (reserve(s, r, r->n_done, r->n_done + c, p->T, &p->n_copies)) {
                if (!r->n_draft)
                    continue;   /* waits a step; may be preempted if this persists */
                r->n_toks -= r->n_draft;   /* no room for the drafts: decode as usual */
                r->n_draft = 0;
                c = 1;
                if (reserve(s, r, r->n_done, r->n_done + c, p->T, &p->n_copies))
                    continue;
            }
            add_rows(s, r, c, &p->T, &p->L);
            p->dec_left -= pass == 0 && p->dec_left;
            if (pass == 1 && cls == EM_CLASS_INTERACTIVE)
                p->ia_prompt = 1;
            if (pass == 1 && cls == EM_CLASS_BACKGROUND && p->bg_rows != UINT32_MAX)
                p->bg_rows -= c;
            p->bg_placed += pass == 1 && cls == EM_CLASS_BACKGROUND ? c : 0;
        }
    }
}

/* Admissions in class cls's turn: the interactive turn admits interactive
 * and aged background requests; an interactive request still waiting in the
 * background turn could not get room, nor may anything behind it. */
static void plan_admissions(em_sched *s, plan *p, int cls, double t0)
{
    while (p->T < p->budget && p->L < s->be.max_logits) {
        pthread_mutex_lock(&s->mu);
        em_request *r = next_waiting(s, t0);
        int aged = r && r->cls == EM_CLASS_BACKGROUND && aged_out(s, r, t0);
        pthread_mutex_unlock(&s->mu);
        if (!r)
            break;
        if (cls == EM_CLASS_INTERACTIVE ? (r->cls != EM_CLASS_INTERACTIVE && !aged)
                                        : r->cls == EM_CLASS_INTERACTIVE)
            break;
        uint32_t room = p->budget - p->T, T_before = p->T;
        if (cls == EM_CLASS_BACKGROUND && p->bg_rows < room)
            room = p->bg_rows;
        /* an encoder's sequence goes whole or not at all: the step's first
         * background one goes past the bound rather than never */
        if (s->be.encoder && cls == EM_CLASS_BACKGROUND && room < r->n_toks && !p->ia_prompt && !p->bg_placed)
            room = p->budget - p->T;
        if (!room || admit(s, r, room, &p->T, &p->L, &p->n_copies, t0))
            break;
        if (r->cls == EM_CLASS_INTERACTIVE)
            p->ia_prompt = 1;
        uint32_t placed = p->T - T_before;
        if (cls == EM_CLASS_BACKGROUND && p->bg_rows != UINT32_MAX)
            p->bg_rows = p->bg_rows > placed ? p->bg_rows - placed : 0;
        p->bg_placed += cls == EM_CLASS_BACKGROUND ? placed : 0;
    }
}

/* Nothing could run: every running sequence waits for blocks held by the
 * others — recompute the newest later so the rest can go on — or a request
 * alone cannot get the blocks it needs: it fails. */
static void unstick(em_sched *s, double t0)
{
    em_request *newest = NULL;
    for (em_request *r = s->running; r; r = r->next)
        if (!newest || r->cls > newest->cls || (r->cls == newest->cls && r->order > newest->order))
            newest = r;
    if (newest && s->running->next) {
        preempt(s, newest);
    } else if (newest) {
        sched_finish_running(s, newest, EM_FINISH_ERROR, "the request does not fit the KV cache");
    } else {
        pthread_mutex_lock(&s->mu);
        em_request *r = next_waiting(s, t0);
        if (r) {
            list_remove(&s->waitq[r->cls], r);
            s->n_waiting[r->cls]--;
        }
        pthread_mutex_unlock(&s->mu);
        if (r) {
            em_req_finish(r, s->tok, EM_FINISH_ERROR, "the request does not fit the KV cache", em_sched_now());
            em_req_unref(r);
        }
    }
}

/* The planned batch on the device, then every request advanced; a device
 * failure fails the step's requests (counted first: whoever sees their
 * error sees the count moved; web/batch.c runs such lines again) and
 * rebuilds the device. */
static void run_step(em_sched *s, const plan *p, double t0)
{
    em_err err = { 0 };
    int rc = p->n_copies ? s->be.copy(s->be.ctx, s->copies, p->n_copies, &err) : 0;
    if (!rc) {
        em_sched_batch b = { .n_tokens = p->T, .tokens = s->b_tok, .pos = s->b_pos, .seq = s->b_seq,
                             .n_logits = p->L, .logit_rows = s->b_rows, .tables = s->b_tables,
                             .decode = s->b_dec, .tables_window = s->be.window ? s->b_tables_w : NULL,
                             .types = s->b_has_types ? s->b_types : NULL, .n_pool = s->n_pool,
                             .pool = s->b_pool };
        steer_rows(s, p->T, p->L);
        if (!p->L)
            s->on_device = 0;   /* nothing to choose (embeddings alone) */
        rc = s->on_device ? s->be.step_top(s->be.ctx, &b, s->steer, s->top, &err)
                          : s->be.step(s->be.ctx, &b, s->logits, &err);
    }
    double t1 = em_sched_now();
    if (rc) {
        if (rc == EM_EDEVICE) {
            pthread_mutex_lock(&s->mu);
            s->st.device_failures++;
            pthread_mutex_unlock(&s->mu);
        }
        sched_fail_all(s, err.msg[0] ? err.msg : em_err_str(rc));
        if (rc == EM_EDEVICE)
            sched_recover_device(s, &err);
        return;
    }
    advance(s, p->T, p->L, t1);
    pthread_mutex_lock(&s->mu);
    s->st.steps++;
    s->st.busy_s += t1 - t0;
    s->win_t[s->win_i % RATE_WINDOW] = t1;
    s->win_busy[s->win_i % RATE_WINDOW] = t1 - t0;
    s->win_rows[s->win_i % RATE_WINDOW] = p->T;
    s->win_i++;
    pthread_mutex_unlock(&s->mu);
}

/* One step. Interactive work first, then background: for each class its
 * running decodes (every one keeps going), its running prompt chunks, then
 * its admissions. Background rows are placed last, so an interactive request
 * can still preempt any background sequence this step. A background request
 * that has waited past the aging bound is admitted in the interactive turn. */
static void plan_and_run(em_sched *s)
{
    double t0 = em_sched_now();
    reap_cancelled(s);
    /* st.device_down is written on this thread only: read here without mu */
    if (s->st.device_down && (t0 < s->recover_after || sched_rebuild_device(s))) {
        sched_fail_down(s);
        return;
    }
    sched_draft_phase(s);
    plan p = { .budget = s->o.step_tokens, .bg_rows = UINT32_MAX };
    s->n_pool = 0;
    s->b_has_types = 0;
    uint32_t n_snap = 0;   /* every running request holds a slot: at most max_seqs */
    for (em_request *r = s->running; r && n_snap < s->be.max_seqs; r = r->next)
        s->snap[n_snap++] = r;
    for (uint32_t k = 0; k < n_snap; k++)
        p.dec_left += s->snap[k]->state == R_RUNNING && decoding(s->snap[k]);
    for (int cls = 0; cls < EM_CLASS_COUNT; cls++) {
        if (cls == EM_CLASS_BACKGROUND)
            plan_limits(s, &p, n_snap);
        plan_running(s, &p, cls, n_snap);
        plan_admissions(s, &p, cls, t0);
    }
    if (p.T == 0)
        unstick(s, t0);
    else
        run_step(s, &p, t0);
}

static void beat(em_sched *s)
{
    atomic_store(&s->beat_us, (long long)(em_sched_now() * 1e6));
}

static void *thread_main(void *arg)
{
    em_sched *s = arg;
    pthread_mutex_lock(&s->mu);
    while (!s->stop) {
        beat(s);   /* idle or after a step: the watchdog's sign of life */
        uint32_t work = s->n_waiting[0] + s->n_waiting[1] + s->n_running[0] + s->n_running[1];
        if (!work && s->st.device_down && em_sched_now() >= s->recover_after) {
            s->idle = 0;   /* the device comes back without a request having to fail first */
            pthread_mutex_unlock(&s->mu);
            sched_rebuild_device(s);
            pthread_mutex_lock(&s->mu);
            continue;
        }
        if (!work) {
            s->idle = 1;
            pthread_cond_broadcast(&s->idle_cv);
            double t = em_sched_now() + IDLE_BEAT_S;
            struct timespec ts = { (time_t)t, (long)((t - (double)(time_t)t) * 1e9) };
            pthread_cond_timedwait(&s->cv, &s->mu, &ts);   /* cv waits on CLOCK_MONOTONIC */
            continue;
        }
        s->idle = 0;
        pthread_mutex_unlock(&s->mu);
        step_once(s);
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    /* shutting down: everything still here is cancelled */
    while (s->running)
        sched_finish_running(s, s->running, EM_FINISH_CANCELLED, NULL);
    sched_finish_waiting(s, EM_FINISH_CANCELLED, NULL);
    em_kv_stats ks, dks = { 0 };
    em_kv_get_stats(s->kv, &ks);
    if (s->dkv)
        em_kv_get_stats(s->dkv, &dks);
    pthread_mutex_lock(&s->mu);
    s->st.kv = ks;
    s->st.kv_draft = dks;
    pthread_cond_broadcast(&s->idle_cv);
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ---- public ------------------------------------------------------------------------ */

int em_sched_create(const em_sched_opts *o, const em_sched_backend *backend,
                    const em_tokenizer *tok, em_sched **out, em_err *err)
{
    *out = NULL;
    em_sched *s = calloc(1, sizeof *s);
    if (!s) {
        if (backend->destroy)
            backend->destroy(backend->ctx);
        if (o->draft && o->draft->destroy)
            o->draft->destroy(o->draft->ctx);
        return em_err_set(err, EM_ENOMEM, "scheduler: out of memory");
    }
    s->o = *o;
    s->o.draft = NULL;
    s->be = *backend;
    if (o->draft) {
        s->dbe = *o->draft;
        s->has_draft = 1;
    }
    s->idle = 0;
    s->tok = tok;
    s->t_created = em_sched_now();
    if (!s->o.step_tokens || s->o.step_tokens > s->be.max_tokens)
        s->o.step_tokens = s->be.max_tokens;
    pthread_mutex_init(&s->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);   /* em_sched_now's clock: the idle beat's timed wait */
    pthread_cond_init(&s->cv, &ca);
    pthread_condattr_destroy(&ca);
    atomic_init(&s->beat_us, (long long)(s->t_created * 1e6));
    pthread_cond_init(&s->idle_cv, NULL);
    uint32_t T = s->be.max_tokens;
    s->max_copies = 4 * s->be.max_seqs + 64;
    em_kv_opts ko = { s->be.n_blocks, s->be.max_seqs, s->be.max_ctx, s->o.prefix_cache, s->be.window,
                      s->be.n_blocks_window };
    int rc = em_kv_create(&ko, &s->kv, err);
    if (!rc)
        em_kv_get_stats(s->kv, &s->st.kv);
    if (!rc && s->has_draft && s->dbe.n_vocab != s->be.n_vocab)
        rc = em_err_set(err, EM_EINVAL, "scheduler: the draft model's vocabulary has %u tokens, the model's %u",
                        s->dbe.n_vocab, s->be.n_vocab);
    if (!rc && s->has_draft) {
        em_kv_opts dko = { s->dbe.n_blocks, s->dbe.max_seqs, s->dbe.max_ctx, s->o.prefix_cache, s->dbe.window,
                           s->dbe.n_blocks_window };
        uint32_t DT = s->dbe.max_tokens;
        s->d_max_copies = 4 * s->dbe.max_seqs + 64;
        rc = em_kv_create(&dko, &s->dkv, err);
        if (!rc) {
            s->d_tok = malloc(DT * sizeof *s->d_tok);
            s->d_pos = malloc(DT * sizeof *s->d_pos);
            s->d_seq = malloc(DT * sizeof *s->d_seq);
            s->d_rows = malloc(DT * sizeof *s->d_rows);
            s->d_dec = malloc(DT * sizeof *s->d_dec);
            s->d_tables = calloc(s->dbe.max_seqs, sizeof *s->d_tables);
            s->d_tables_w = calloc(s->dbe.max_seqs, sizeof *s->d_tables_w);
            s->d_copies = malloc(s->d_max_copies * sizeof *s->d_copies);
            s->d_logits = malloc((size_t)s->dbe.max_logits * s->dbe.n_vocab * sizeof *s->d_logits);
            if (!s->d_tok || !s->d_pos || !s->d_seq || !s->d_rows || !s->d_dec || !s->d_tables || !s->d_tables_w ||
                !s->d_copies ||
                !s->d_logits)
                rc = em_err_set(err, EM_ENOMEM, "scheduler: out of memory");
        }
    }
    if (!rc) {
        s->b_tok = malloc(T * sizeof *s->b_tok);
        s->b_pos = malloc(T * sizeof *s->b_pos);
        s->b_seq = malloc(T * sizeof *s->b_seq);
        s->b_rows = malloc(T * sizeof *s->b_rows);
        s->b_dec = malloc(T * sizeof *s->b_dec);
        s->b_types = malloc(T * sizeof *s->b_types);
        s->b_pool = malloc(2 * (size_t)s->be.max_seqs * sizeof *s->b_pool);
        s->b_req = malloc(T * sizeof *s->b_req);
        s->b_cnt = malloc(T * sizeof *s->b_cnt);
        s->b_tables = calloc(s->be.max_seqs, sizeof *s->b_tables);
        s->b_tables_w = calloc(s->be.max_seqs, sizeof *s->b_tables_w);
        s->snap = calloc(s->be.max_seqs, sizeof *s->snap);
        s->copies = malloc(s->max_copies * sizeof *s->copies);
        s->logits = malloc((size_t)s->be.max_logits * s->be.n_vocab * sizeof *s->logits);
        const char *host = getenv("EMBER_SAMPLE_HOST");   /* whole rows to the host: to compare, */
        if (host && *host && strcmp(host, "0") != 0)       /* or around a suspect driver */
            s->be.step_top = NULL;
        uint32_t rows = s->be.max_logits;
        s->allow = malloc((size_t)rows * ((s->be.n_vocab + 31) / 32) * sizeof *s->allow);
        if (s->be.step_top) {
            s->steer = calloc(rows, sizeof *s->steer);
            s->top = calloc(rows, sizeof *s->top);
            s->adj = malloc((size_t)s->be.max_adj * sizeof *s->adj);
            if (!s->steer || !s->top || !s->adj)
                rc = em_err_set(err, EM_ENOMEM, "scheduler: out of memory");
        }
        uint32_t nt = tok ? em_tokenizer_n_vocab(tok) : 0;
        for (uint32_t i = 0; i < nt; i++)
            s->n_eog += em_tokenizer_is_eog(tok, (int32_t)i) != 0;
        s->eog = malloc((s->n_eog + 1) * sizeof *s->eog);
        for (uint32_t i = 0, k = 0; s->eog && i < nt; i++)
            if (em_tokenizer_is_eog(tok, (int32_t)i))
                s->eog[k++] = (int32_t)i;
        if (!s->b_tok || !s->b_pos || !s->b_seq || !s->b_rows || !s->b_dec || !s->b_types || !s->b_pool ||
            !s->b_req || !s->b_cnt ||
            !s->b_tables || !s->b_tables_w || !s->snap || !s->copies || !s->logits || !s->allow || !s->eog)
            rc = em_err_set(err, EM_ENOMEM, "scheduler: out of memory");
    }
    if (!rc && pthread_create(&s->th, NULL, thread_main, s) != 0)
        rc = em_err_set(err, EM_ENOMEM, "scheduler: cannot start its thread");
    if (rc) {
        em_sched_destroy(s);
        return rc;
    }
    s->started = 1;
    *out = s;
    return 0;
}

void em_sched_destroy(em_sched *s)
{
    if (!s)
        return;
    if (s->started) {
        pthread_mutex_lock(&s->mu);
        s->stop = 1;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->th, NULL);
    }
    if (s->be.destroy)
        s->be.destroy(s->be.ctx);
    if (s->dbe.destroy)
        s->dbe.destroy(s->dbe.ctx);
    em_kv_destroy(s->kv);
    em_kv_destroy(s->dkv);
    free(s->d_tok); free(s->d_pos); free(s->d_seq); free(s->d_rows); free(s->d_dec);
    free(s->d_tables); free(s->d_tables_w);
    free(s->d_copies); free(s->d_logits);
    free(s->b_tok); free(s->b_pos); free(s->b_seq); free(s->b_rows); free(s->b_dec); free(s->b_req);
    free(s->b_types); free(s->b_pool);
    free(s->b_cnt); free(s->b_tables); free(s->b_tables_w); free(s->snap); free(s->copies); free(s->logits);
    free(s->allow); free(s->eog); free(s->steer); free(s->top); free(s->adj);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    pthread_cond_destroy(&s->idle_cv);
    free(s);
}

int em_sched_submit(em_sched *s, const em_req_params *p, em_request **out, uint32_t *retry_ms,
                    em_err *err)
{
    *out = NULL;
    if (retry_ms)
        *retry_ms = 0;
    if (!p->prompt || p->n_prompt == 0)
        return em_err_set(err, EM_EINVAL, "request: the prompt is empty");
    if ((unsigned)p->cls >= EM_CLASS_COUNT)
        return em_err_set(err, EM_EINVAL, "request: unknown class %d", (int)p->cls);
    for (uint32_t i = 0; i < p->n_prompt; i++)
        if (p->prompt[i] < 0 || (uint32_t)p->prompt[i] >= s->be.n_vocab)
            return em_err_set(err, EM_EINVAL, "request: token id %d is out of range", p->prompt[i]);
    if (p->embed && (!s->be.pooled || !s->be.n_embd))
        return em_err_set(err, EM_EINVAL, "request: this model's backend gives no embeddings");
    if (p->embed && (unsigned)p->pooling > EM_POOL_RANK)
        return em_err_set(err, EM_EINVAL, "request: unknown pooling %d", (int)p->pooling);
    if (!p->embed && s->be.encoder)
        return em_err_set(err, EM_EINVAL, "this model does not generate text (an encoder: embeddings and rerank "
                          "only)");
    if (s->be.encoder && (p->n_prompt > s->o.step_tokens || p->n_prompt > s->be.max_ctx))
        return em_err_set(err, EM_EINVAL, "request: %u tokens; this encoder takes at most %u in one sequence",
                          p->n_prompt, s->o.step_tokens < s->be.max_ctx ? s->o.step_tokens : s->be.max_ctx);
    uint32_t gen = p->embed ? 0 : p->max_tokens ? p->max_tokens : 1;
    if ((uint64_t)p->n_prompt + gen > s->be.max_ctx)
        return em_err_set(err, EM_ERANGE,
                          "request: %u prompt tokens + %u to generate exceed the %u-token context",
                          p->n_prompt, gen, s->be.max_ctx);
    uint64_t blocks = ((uint64_t)p->n_prompt + gen + EM_KV_BLOCK - 1) / EM_KV_BLOCK;
    if (blocks > s->be.n_blocks)
        return em_err_set(err, EM_ERANGE,
                          "request: %llu KV blocks needed, the cache holds %u: it does not fit the KV cache",
                          (unsigned long long)blocks, s->be.n_blocks);
    pthread_mutex_lock(&s->mu);
    if (s->n_waiting[p->cls] >= s->o.max_waiting[p->cls]) {
        uint32_t w = s->n_waiting[p->cls], run = s->n_running[0] + s->n_running[1];
        s->st.rejected_busy++;
        pthread_mutex_unlock(&s->mu);
        uint32_t hint = 500 * (1 + w / (run + 1));
        if (hint > 30000)
            hint = 30000;
        if (retry_ms)
            *retry_ms = hint;
        return em_err_set(err, EM_EBUSY, "busy: %u %s requests are waiting; retry in %u ms", w,
                          em_class_name(p->cls), hint);
    }
    uint64_t order = s->next_order++;
    pthread_mutex_unlock(&s->mu);
    if (p->spec_method == EM_SPEC_DRAFT && !s->dbe.step)
        return em_err_set(err, EM_EINVAL, "request: speculation with a draft model needs a server started "
                          "with a draft model (--draft-model)");
    em_request *r = em_req_new(p, s->be.n_vocab, order, err);
    if (!r)
        return err ? err->code : EM_ENOMEM;
    if (p->embed && em_req_embed_init(r, p, s->be.n_embd)) {
        atomic_store(&r->refs, 1);
        em_req_unref(r);
        return em_err_set(err, EM_ENOMEM, "scheduler: out of memory");
    }
    r->con = p->constraint;   /* the scheduler's from here */
    int32_t k = p->speculate ? p->speculate : (int32_t)s->o.speculate;
    const em_sample_params *sp = &p->sample;
    int steered_by_history = sp->presence_penalty != 0 || sp->frequency_penalty != 0 ||
                             (sp->repetition_penalty != 0 && sp->repetition_penalty != 1);
    if (k > 0 && !p->embed && !r->con.ctx && !r->logprobs && !steered_by_history) {
        r->spec_max = (uint32_t)k < EM_SCHED_MAX_DRAFT ? (uint32_t)k : EM_SCHED_MAX_DRAFT;
        r->spec_k = r->spec_max < 4 ? r->spec_max : 4;
        /* drafts from the draft model: its own sampler (the request's
         * parameters, a PRNG stream of its own) */
        if (p->spec_method != EM_SPEC_LOOKUP && s->dbe.step) {
            em_sample_params dp = *sp;
            dp.seed ^= 0xd1b54a32d192ed03ull;
            if (em_sampler_create(&dp, s->be.n_vocab, &r->dsampler, NULL) == 0)
                r->spec_draft = 1;
            else
                r->spec_max = 0;
        }
    }
    r->m.t_submit = em_sched_now();
    pthread_mutex_lock(&s->mu);
    list_insert(&s->waitq[r->cls], r);
    s->n_waiting[r->cls]++;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    *out = r;
    return 0;
}

void em_sched_get_stats(em_sched *s, em_sched_stats *st)
{
    pthread_mutex_lock(&s->mu);
    *st = s->st;
    for (int c = 0; c < EM_CLASS_COUNT; c++) {
        st->running[c] = s->n_running[c];
        st->waiting[c] = s->n_waiting[c];
    }
    /* The window: the last EM_SCHED_RATE_S seconds up to now, or less where
     * the ring no longer holds the steps that far back (it starts where its
     * oldest step ended) or the scheduler is younger. Steps run one after
     * another, so a step that ended inside it began at or after the end of
     * the step before: a step straddling the start counts pro rata. */
    uint32_t n = s->win_i < RATE_WINDOW ? s->win_i : RATE_WINDOW;
    double now = em_sched_now(), start = now - EM_SCHED_RATE_S, tok = 0, busy = 0;
    if (start < s->t_created)
        start = s->t_created;
    if (n == RATE_WINDOW && s->win_t[(s->win_i - n) % RATE_WINDOW] > start)
        start = s->win_t[(s->win_i - n) % RATE_WINDOW];
    for (uint32_t i = 0; i < n; i++) {
        uint32_t k = (s->win_i - 1 - i) % RATE_WINDOW;
        double t1 = s->win_t[k], t0 = t1 - s->win_busy[k];
        if (t1 <= start)
            break;
        double in = t1 - (t0 > start ? t0 : start);
        tok += t1 > t0 ? s->win_tok[k] * in / (t1 - t0) : s->win_tok[k];
        busy += in;
    }
    st->tokens_per_s = now > start ? tok / (now - start) : 0;
    st->busy_ratio = now > start ? busy / (now - start) : 0;
    pthread_mutex_unlock(&s->mu);
}

uint32_t em_sched_queue_position(em_sched *s, const em_request *r)
{
    uint32_t k = 0, pos = 0;
    pthread_mutex_lock(&s->mu);
    for (const em_request *q = s->waitq[r->cls]; q && !pos; q = q->next) {   /* cls is fixed at submit */
        k++;
        if (q == r)
            pos = k;
    }
    pthread_mutex_unlock(&s->mu);
    return pos;
}

long long em_sched_heartbeat_us(em_sched *s)
{
    return atomic_load(&s->beat_us);
}

void em_sched_drain(em_sched *s)
{
    pthread_mutex_lock(&s->mu);
    while ((s->n_waiting[0] + s->n_waiting[1] + s->n_running[0] + s->n_running[1] || !s->idle) &&
           !s->stop)
        pthread_cond_wait(&s->idle_cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
}
