/* test_sched.c — the scheduler's planner over a fake backend (no GPU).
 *
 * The fake model keeps its own KV memory: a step writes each token id into
 * the block slot its position maps to through the sequence's block table,
 * and the "next token" of a sequence is a hash of the ids it reads back, in
 * order, through that table. So a wrong table, a bad prefix match, a missed
 * copy on write or a lost recompute after preemption all change the output,
 * which must equal the same request computed alone. Directed tests cover
 * priority order, aging, preemption and resume, cancellation, the queue
 * bound, queue positions, requests that cannot fit, stop strings and the
 * busy time and rates of em_sched_get_stats, a constraint (as a grammar
 * is: only its tokens, end-of-text only where it may end, stop when done,
 * a dead end an error, its state freed once), choosing from the device's
 * summaries giving the host's tokens (also when a step's adjustments
 * overflow to the host), a device that fails and cannot be rebuilt at once
 * (down: requests fail naming it, then back by itself); embed requests on a
 * decoder (chunked, pooled spans per chunk, no prefix cache, recomputed
 * after preemption) and on an encoder (each sequence whole in a step, token
 * types, refusals), their class order; a randomized test runs hundreds of scenarios and checks that every request finishes exactly once,
 * correctly, and that no KV block leaks. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include "core/gpu/kcheck.h"
#include "core/gpu/topk.h"
#include "core/model/gguf.h"
#include "core/run/kv.h"
#include "core/text/tokenizer.h"
#include "scheduler/scheduler.h"
#include "tests/common/testutil.h"

#define V 300       /* vocabulary: <unk> <s> </s>, 256 bytes, 41 words */
#define EOS 2
#define FE 8        /* the fake model's hidden width (embeddings) */

/* ---- a small SPM vocabulary, built in memory ---------------------------------- */

static char *vocab_mem;
static size_t vocab_len;

static em_tokenizer *make_tokenizer(void)
{
    em_gguf_writer *w = NULL;
    em_gguf_writer_create(32, &w, NULL);
    const char *toks[V];
    char buf[V][16];
    float scores[V];
    int32_t types[V];
    for (int i = 0; i < V; i++) {
        if (i < 3)
            snprintf(buf[i], 16, "%s", i == 0 ? "<unk>" : i == 1 ? "<s>" : "</s>");
        else if (i < 259)
            snprintf(buf[i], 16, "<0x%02X>", i - 3);
        else
            snprintf(buf[i], 16, "\xe2\x96\x81w%d", i - 259);
        toks[i] = buf[i];
        scores[i] = -(float)i;
        types[i] = i == 0 ? 2 : i < 3 ? 3 : i < 259 ? 6 : 1;
    }
    em_gguf_w_str(w, "tokenizer.ggml.model", "llama");
    em_gguf_w_arr_str(w, "tokenizer.ggml.tokens", toks, V);
    em_gguf_w_arr(w, "tokenizer.ggml.scores", EM_GGUF_F32, scores, V);
    em_gguf_w_arr(w, "tokenizer.ggml.token_type", EM_GGUF_I32, types, V);
    em_gguf_w_u32(w, "tokenizer.ggml.bos_token_id", 1);
    em_gguf_w_u32(w, "tokenizer.ggml.eos_token_id", EOS);
    FILE *f = open_memstream(&vocab_mem, &vocab_len);
    em_gguf_w_header(w, f, NULL);
    fclose(f);
    em_gguf_writer_destroy(w);
    em_gguf *g = NULL;
    em_tokenizer *t = NULL;
    em_err e = { 0 };
    if (em_gguf_open_mem(vocab_mem, vocab_len, "vocab", &g, &e) || em_tokenizer_create(g, &t, &e))
        fprintf(stderr, "vocab: %s\n", e.msg);
    em_gguf_close(g);
    return t;
}

/* ---- the fake model -------------------------------------------------------------- */

static uint32_t next_of(uint64_t h)
{
    if (h % 97 == 0)
        return EOS;
    return 259 + (uint32_t)(h % 41);     /* a word token */
}

static uint64_t mix(uint64_t h, int32_t t)
{
    return (h ^ (uint64_t)(uint32_t)t) * 0x100000001b3ull;
}

typedef struct {
    uint32_t n_blocks, max_seqs, max_ctx, max_tokens;
    int32_t *mem;                 /* [n_blocks][16] token ids written by steps */
    pthread_mutex_t gate_mu;
    pthread_cond_t gate_cv;
    int gate_closed;              /* steps wait while set */
    unsigned delay_us;            /* per step: lets tests act while requests run */
    unsigned row_us;              /* and per row of the batch: a step's cost grows with it */
    uint64_t steps;
    uint32_t max_batch_seen;
    /* prompt rows per step, told apart by their ids: bytes (< 259) or words */
    uint32_t max_byte_prompt_late;   /* most byte-id prompt rows in a step after the 4th */
    uint32_t mixed_steps;            /* steps with prompt rows of both kinds */
    uint32_t word_prompt_steps;      /* steps with word-id prompt rows */
    uint32_t word_prompt_dec_steps;  /* of those, steps with decode rows too */
    /* choosing on the "device" (step_top): the rows, their summaries (core/gpu/kcheck.c's reference) */
    float   *rows;
    int32_t  ids[8][EM_SAMPLE_TOPK];
    void    *scratch;
    uint64_t top_steps, plain_steps;
    int      local;               /* the next token depends on the last one only (repetitive text) */
    int      wrong;               /* a draft model: wrong at every third position */
    uint64_t fail_at;             /* the step (from 1) that fails with EM_EDEVICE; 0: none */
    int      rebuilds_to_fail;    /* recover: fail this many times first */
    int      recover_calls;
    uint64_t steps_at_down;       /* steps when a rebuild last failed */
    /* embeddings: pooled rows of the last step ([max_seqs][FE]); an
     * encoder checks its batch rules (a broken one fails the step) */
    float   *pooled;
    int      encoder;
    uint64_t pooled_rows;         /* rows summed into pooled rows, all steps */
    uint32_t pool_steps_max;      /* most spans in one step */
    uint64_t close_after;         /* the gate closes itself once this many steps ran (0: never) */
} fake;

/* A hidden state [FE] from a hash. */
static void hidden_of(uint64_t h, float *out)
{
    for (int d = 0; d < FE; d++) {
        h = h * 6364136223846793005ull + 1442695040888963407ull;
        out[d] = (float)((h >> 40) & 0xffff) / 65536.0f - 0.5f;
    }
}

static int fake_copy(void *ctx, const em_kv_copy *c, uint32_t n, em_err *err)
{
    fake *f = ctx;
    (void)err;
    for (uint32_t i = 0; i < n; i++)
        memcpy(f->mem + (size_t)c[i].dst * EM_KV_BLOCK, f->mem + (size_t)c[i].src * EM_KV_BLOCK,
               EM_KV_BLOCK * sizeof *f->mem);
    return 0;
}

/* An encoder's step rules (forward.h): every sequence one run of positions
 * from 0, whole in the step (not seen before it ends), no decodes, no
 * logit rows. */
static int encoder_rules(const em_sched_batch *b, em_err *err)
{
    if (b->n_logits)
        return em_err_set(err, EM_EINVAL, "fake encoder: %u logit rows", b->n_logits);
    for (uint32_t i = 0; i < b->n_tokens; i++) {
        int start = i == 0 || b->seq[i - 1] != b->seq[i];
        if (b->decode[i] || b->pos[i] != (start ? 0 : b->pos[i - 1] + 1))
            return em_err_set(err, EM_EINVAL, "fake encoder: row %u (position %d) breaks the rules", i, b->pos[i]);
        for (uint32_t k = 0; start && k < i; k++)
            if (b->seq[k] == b->seq[i])
                return em_err_set(err, EM_EINVAL, "fake encoder: slot %d in two runs", b->seq[i]);
    }
    return 0;
}

/* The fake's final hidden state of batch row j: a decoder's from the ids
 * its sequence reads through its block table up to its position (as its
 * logits); an encoder's from its whole sequence in the step, its position
 * and its type. */
static void row_hidden(const fake *f, const em_sched_batch *b, uint32_t j, float *out)
{
    uint64_t h = 0xcbf29ce484222325ull;
    if (f->encoder) {
        for (uint32_t i = 0; i < b->n_tokens; i++)
            if (b->seq[i] == b->seq[j])
                h = mix(h, b->tokens[i]);
        h = mix(mix(h, b->pos[j]), b->types ? b->types[j] : 0);
    } else {
        const int32_t *t = b->tables[b->seq[j]];
        for (int32_t p = 0; p <= b->pos[j]; p++)
            h = mix(h, f->mem[(size_t)t[p / EM_KV_BLOCK] * EM_KV_BLOCK + p % EM_KV_BLOCK]);
    }
    hidden_of(h, out);
}

static int fake_step(void *ctx, const em_sched_batch *b, float *logits, em_err *err)
{
    fake *f = ctx;
    pthread_mutex_lock(&f->gate_mu);
    if (f->close_after && f->steps == f->close_after)
        f->gate_closed = 1;
    while (f->gate_closed)
        pthread_cond_wait(&f->gate_cv, &f->gate_mu);
    f->steps++;
    if (b->n_tokens > f->max_batch_seen)
        f->max_batch_seen = b->n_tokens;
    uint32_t bytes = 0, words = 0, decs = 0;
    for (uint32_t i = 0; i < b->n_tokens; i++)
        if (!b->decode[i])
            *(b->tokens[i] < 259 ? &bytes : &words) += 1;
        else
            decs++;
    f->word_prompt_steps += words > 0;
    f->word_prompt_dec_steps += words && decs;
    if (f->steps > 4 && bytes > f->max_byte_prompt_late)
        f->max_byte_prompt_late = bytes;
    f->mixed_steps += bytes && words;
    pthread_mutex_unlock(&f->gate_mu);
    if (f->delay_us || f->row_us)
        usleep(f->delay_us + f->row_us * b->n_tokens);
    if (b->n_tokens > f->max_tokens)
        return em_err_set(err, EM_ERANGE, "fake: %u tokens in a step", b->n_tokens);
    if (f->fail_at && f->steps == f->fail_at)
        return em_err_set(err, EM_EDEVICE, "fake: the device is lost");
    if (f->encoder && encoder_rules(b, err))
        return EM_EINVAL;
    for (uint32_t i = 0; i < b->n_tokens; i++) {
        const int32_t *t = b->tables[b->seq[i]];
        f->mem[(size_t)t[b->pos[i] / EM_KV_BLOCK] * EM_KV_BLOCK + b->pos[i] % EM_KV_BLOCK] = b->tokens[i];
    }
    if (b->n_pool > f->pool_steps_max)
        f->pool_steps_max = b->n_pool;
    for (uint32_t k = 0; k < b->n_pool; k++) {
        float *o = f->pooled + (size_t)k * FE, hv[FE];
        memset(o, 0, FE * sizeof *o);
        for (int32_t j = b->pool[2 * k]; j < b->pool[2 * k] + b->pool[2 * k + 1]; j++) {
            row_hidden(f, b, (uint32_t)j, hv);
            for (int d = 0; d < FE; d++)
                o[d] += hv[d];
            f->pooled_rows++;
        }
    }
    for (uint32_t r = 0; r < b->n_logits; r++) {
        uint32_t i = (uint32_t)b->logit_rows[r];
        const int32_t *t = b->tables[b->seq[i]];
        uint64_t h = 0xcbf29ce484222325ull;
        for (int32_t p = f->local ? b->pos[i] : 0; p <= b->pos[i]; p++)
            h = mix(h, f->mem[(size_t)t[p / EM_KV_BLOCK] * EM_KV_BLOCK + p % EM_KV_BLOCK]);
        if (f->local && next_of(h) == EOS)
            h++;   /* repetitive text that goes on */
        if (f->wrong && b->pos[i] % 3 == 0)
            h = mix(h, 7);
        float *lg = logits + (size_t)r * V;
        for (int v = 0; v < V; v++)
            lg[v] = 0;
        lg[next_of(h)] = 12.0f;
    }
    return 0;
}

static int fake_step_top(void *ctx, const em_sched_batch *b, const em_sample_steer *steer, em_sample_top *top,
                         em_err *err)
{
    fake *f = ctx;
    int rc = fake_step(ctx, b, f->rows, err);
    for (uint32_t r = 0; !rc && r < b->n_logits; r++) {
        float *row = f->rows + (size_t)r * V;
        em_topk_steer_ref(row, V, &steer[r]);
        em_topk_ref(row, V, steer[r].temp, &top[r], f->ids[r], f->scratch);
        static float vals[8][EM_SAMPLE_TOPK];
        for (uint32_t k = 0; k < top[r].n; k++)
            vals[r][k] = row[f->ids[r][k]];
        top[r].val = vals[r];
    }
    f->top_steps++;
    return rc;
}

static const float *fake_row(void *ctx, uint32_t i)
{
    fake *f = ctx;
    return f->rows + (size_t)i * V;
}

static int fake_step_counted(void *ctx, const em_sched_batch *b, float *logits, em_err *err)
{
    ((fake *)ctx)->plain_steps++;
    return fake_step(ctx, b, logits, err);
}

static const float *fake_pooled(void *ctx, uint32_t i)
{
    return ((fake *)ctx)->pooled + (size_t)i * FE;
}

static fake *fake_new(uint32_t n_blocks, uint32_t max_seqs, uint32_t max_ctx, uint32_t max_tokens,
                      em_sched_backend *be)
{
    fake *f = calloc(1, sizeof *f);
    f->n_blocks = n_blocks;
    f->max_seqs = max_seqs;
    f->max_ctx = max_ctx;
    f->max_tokens = max_tokens;
    f->mem = calloc((size_t)n_blocks * EM_KV_BLOCK, sizeof *f->mem);
    f->pooled = calloc((size_t)max_seqs * FE, sizeof *f->pooled);
    pthread_mutex_init(&f->gate_mu, NULL);
    pthread_cond_init(&f->gate_cv, NULL);
    *be = (em_sched_backend){ .ctx = f, .n_vocab = V, .max_tokens = max_tokens, .max_logits = max_seqs,
                              .max_seqs = max_seqs, .max_ctx = max_ctx, .n_blocks = n_blocks,
                              .copy = fake_copy, .step = fake_step, .destroy = NULL,
                              .pooled = fake_pooled, .n_embd = FE };
    return f;
}

/* The fake with the device's choosing: at most max_adj adjustments a step. */
static void fake_with_top(fake *f, em_sched_backend *be, uint32_t max_adj)
{
    f->rows = calloc((size_t)f->max_seqs * V, sizeof *f->rows);
    f->scratch = malloc((size_t)V * 8);
    be->step_top = fake_step_top;
    be->row = fake_row;
    be->max_adj = max_adj;
    be->step = fake_step_counted;
}

static void fake_free(fake *f)
{
    free(f->rows);
    free(f->scratch);
    free(f->mem);
    free(f->pooled);
    pthread_mutex_destroy(&f->gate_mu);
    pthread_cond_destroy(&f->gate_cv);
    free(f);
}

static void gate(fake *f, int closed)
{
    pthread_mutex_lock(&f->gate_mu);
    f->gate_closed = closed;
    pthread_cond_broadcast(&f->gate_cv);
    pthread_mutex_unlock(&f->gate_mu);
}

/* What a greedy request produces alone: ids until max_tokens, EOS or the context. */
static uint32_t alone(const int32_t *prompt, uint32_t n, uint32_t max_tokens, uint32_t max_ctx,
                      int32_t *out, em_finish *fin)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint32_t i = 0; i < n; i++)
        h = mix(h, prompt[i]);
    uint32_t k = 0;
    *fin = EM_FINISH_LENGTH;
    while (k < max_tokens && n + k < max_ctx) {
        uint32_t t = next_of(h);
        if (t == EOS) {
            *fin = EM_FINISH_STOP;
            break;
        }
        out[k++] = (int32_t)t;
        h = mix(h, (int32_t)t);
    }
    return k;
}

/* ---- helpers ------------------------------------------------------------------------ */

typedef struct {
    em_request *r;
    int32_t     prompt[400];
    uint32_t    n_prompt, max_tokens;
    int32_t     got[400];
    uint32_t    n_got;
    int         done;
    em_finish   finish;
    char        why[300];   /* a failure's error text */
    em_req_metrics m;
    /* an embed request: its pooling and types (NULL: none), the vector DONE carried */
    em_pooling  pool;
    uint8_t    *types;
    float       emb[FE];
    uint32_t    n_emb;
} job;

static int submit(em_sched *s, job *j, em_class cls, em_err *e)
{
    em_req_params p = { .prompt = j->prompt, .n_prompt = j->n_prompt, .cls = cls,
                        .max_tokens = j->max_tokens };
    p.sample.temp = 0;
    p.sample.top_p = 1;
    j->n_got = 0;
    j->done = 0;
    return em_sched_submit(s, &p, &j->r, NULL, e);
}

/* j as an embed request of class cls. */
static int submit_embed(em_sched *s, job *j, em_class cls, em_err *e)
{
    em_req_params p = { .prompt = j->prompt, .n_prompt = j->n_prompt, .cls = cls, .embed = 1,
                        .pooling = j->pool, .types = j->types };
    j->n_got = 0;
    j->done = 0;
    return em_sched_submit(s, &p, &j->r, NULL, e);
}

/* Drain j's events; returns 1 once DONE was seen. */
static int pump(job *j, int timeout_ms)
{
    em_event ev;
    while (!j->done && em_request_next(j->r, &ev, timeout_ms)) {
        if (ev.kind == EM_EV_TOKEN) {
            if (j->n_got < 400)
                j->got[j->n_got++] = ev.token;
        } else {
            j->done = 1;
            j->finish = ev.finish;
            j->m = ev.metrics;
            j->n_emb = ev.embedding ? ev.n_embd : 0;
            if (ev.embedding && ev.n_embd == FE)
                memcpy(j->emb, ev.embedding, sizeof j->emb);
            snprintf(j->why, sizeof j->why, "%s", ev.error);
        }
        em_event_clear(&ev);
    }
    return j->done;
}

/* Drain j until DONE: bounded (10 minutes: a hang, not a speed limit);
 * 1 when it came. */
static int pump_done(job *j)
{
    for (int i = 0; i < 600 && !j->done; i++)
        pump(j, 1000);
    CHECKF(j->done, "no DONE within 600 s (%u tokens so far)", j->n_got);
    return j->done;
}

/* Wait (bounded as pump_done) until j has n tokens or is done. */
static void pump_tokens(job *j, uint32_t n)
{
    for (int i = 0; i < 600000 && !pump(j, 0) && j->n_got < n; i++)
        usleep(1000);
    CHECKF(j->done || j->n_got >= n, "fewer than %u tokens within 600 s (%u)", n, j->n_got);
}

static void finish_job(job *j)
{
    pump_done(j);
    em_request_release(j->r);
    j->r = NULL;
}

static void check_alone(const job *j, uint32_t max_ctx, const char *what)
{
    int32_t ref[400];
    em_finish fin;
    uint32_t n = alone(j->prompt, j->n_prompt, j->max_tokens ? j->max_tokens : 400, max_ctx, ref, &fin);
    CHECKF(j->n_got == n && memcmp(j->got, ref, n * sizeof *ref) == 0 && j->finish == fin,
           "%s: %u tokens (finish %s), alone %u (finish %s)", what, j->n_got, em_finish_name(j->finish),
           n, em_finish_name(fin));
}

static em_sched *mk_bg(em_sched_backend *be, uint32_t step_tokens, double aging_ms, uint32_t max_wait,
                       double bg_step_ms, em_tokenizer *tok)
{
    em_sched_opts o;
    em_sched_opts_init(&o);
    o.step_tokens = step_tokens;
    o.bg_step_ms = bg_step_ms;
    if (aging_ms > 0)
        o.aging_ms = aging_ms;
    if (max_wait)
        o.max_waiting[0] = o.max_waiting[1] = max_wait;
    em_sched *s = NULL;
    em_err e = { 0 };
    CHECKF(em_sched_create(&o, be, tok, &s, &e) == 0, "%s", e.msg);
    return s;
}

static em_sched *mk(em_sched_backend *be, uint32_t step_tokens, double aging_ms, uint32_t max_wait,
                    em_tokenizer *tok)
{
    return mk_bg(be, step_tokens, aging_ms, max_wait, 0, tok);
}

static void fill_prompt(job *j, uint32_t n, uint32_t seed, uint32_t shared_prefix)
{
    for (uint32_t i = 0; i < n; i++)
        j->prompt[i] = (int32_t)(i < shared_prefix ? 3 + (i * 7) % 250 : 3 + (seed * 131 + i * 17) % 250);
    j->n_prompt = n;
}

static void no_leak(em_sched *s, const char *what)
{
    em_sched_stats st;
    em_sched_get_stats(s, &st);
    CHECKF(st.kv.used == 0 && st.kv.free + st.kv.cached == st.kv.n_blocks,
           "%s: blocks used %u free %u cached %u of %u", what, st.kv.used, st.kv.free, st.kv.cached,
           st.kv.n_blocks);
}

/* ---- directed tests ------------------------------------------------------------------------ */

static void test_concurrent(em_tokenizer *tok)
{
    em_sched_backend be;
    fake *f = fake_new(256, 16, 512, 64, &be);
    em_sched *s = mk(&be, 64, 0, 0, tok);
    static job jobs[32];
    for (int i = 0; i < 32; i++) {
        fill_prompt(&jobs[i], 5 + (uint32_t)(i * 37) % 120, (uint32_t)i, i % 3 == 0 ? 40 : 0);
        jobs[i].max_tokens = 10 + (uint32_t)(i * 13) % 60;
        em_err e = { 0 };
        CHECKF(submit(s, &jobs[i], i % 2 ? EM_CLASS_BACKGROUND : EM_CLASS_INTERACTIVE, &e) == 0, "%s",
               e.msg);
    }
    for (int i = 0; i < 32; i++) {
        finish_job(&jobs[i]);
        check_alone(&jobs[i], 512, "concurrent");
    }
    em_sched_drain(s);
    no_leak(s, "concurrent");
    em_sched_stats st;
    em_sched_get_stats(s, &st);
    CHECK(st.kv.hit_blocks > 0);               /* the shared prefixes were reused */
    CHECK(f->max_batch_seen > 1);               /* and requests were batched */
    em_sched_destroy(s);
    fake_free(f);
}

static void test_priority_and_aging(em_tokenizer *tok)
{
    /* the gate holds the first step: everything is queued before planning */
    for (int aged = 0; aged < 2; aged++) {
        em_sched_backend be;
        fake *f = fake_new(256, 8, 512, 32, &be);
        gate(f, 1);
        em_sched *s = mk(&be, 32, aged ? 1.0 : 60000, 0, tok);
        static job bg, ia, first;
        fill_prompt(&first, 8, 99, 0);
        first.max_tokens = 2;
        CHECK(submit(s, &first, EM_CLASS_BACKGROUND, NULL) == 0);   /* occupies the gated step */
        usleep(20000);
        fill_prompt(&bg, 30, 1, 0);
        bg.max_tokens = 5;
        fill_prompt(&ia, 30, 2, 0);
        ia.max_tokens = 5;
        CHECK(submit(s, &bg, EM_CLASS_BACKGROUND, NULL) == 0);
        CHECK(submit(s, &ia, EM_CLASS_INTERACTIVE, NULL) == 0);
        usleep(20000);   /* with aging 1 ms the background request is now aged */
        gate(f, 0);
        finish_job(&first);
        finish_job(&bg);
        finish_job(&ia);
        /* both may be admitted in one step, but the first in line gets the
         * step's budget and so its first token a step earlier */
        if (aged)
            CHECKF(bg.m.t_first < ia.m.t_first, "aged background request not served first");
        else
            CHECKF(ia.m.t_first < bg.m.t_first, "interactive request not served first");
        check_alone(&bg, 512, "bg");
        check_alone(&ia, 512, "ia");
        em_sched_drain(s);
        no_leak(s, "priority");
        em_sched_destroy(s);
        fake_free(f);
    }
}

static void test_preemption(em_tokenizer *tok)
{
    /* 20 blocks: two background requests hold 7 each while decoding; an
     * interactive one needing 8 must push one of them out */
    em_sched_backend be;
    fake *f = fake_new(20, 4, 512, 64, &be);
    f->delay_us = 2000;
    em_sched *s = mk(&be, 64, 60000, 0, tok);
    static job b1, b2, ia;
    fill_prompt(&b1, 100, 11, 0);
    b1.max_tokens = 40;
    fill_prompt(&b2, 100, 12, 0);
    b2.max_tokens = 40;
    CHECK(submit(s, &b1, EM_CLASS_BACKGROUND, NULL) == 0);
    CHECK(submit(s, &b2, EM_CLASS_BACKGROUND, NULL) == 0);
    pump_tokens(&b2, 3);    /* both are decoding */
    fill_prompt(&ia, 120, 13, 0);
    ia.max_tokens = 10;
    CHECK(submit(s, &ia, EM_CLASS_INTERACTIVE, NULL) == 0);
    finish_job(&ia);
    finish_job(&b1);
    finish_job(&b2);
    check_alone(&ia, 512, "interactive after preemption");
    check_alone(&b1, 512, "background 1 resumed");
    check_alone(&b2, 512, "background 2 resumed");
    CHECKF(b1.m.preemptions + b2.m.preemptions >= 1, "no background request was preempted");
    CHECK(ia.m.preemptions == 0);
    em_sched_drain(s);
    no_leak(s, "preemption");
    em_sched_destroy(s);
    fake_free(f);
}

/* Every sequence slot taken by background work: an interactive request
 * takes one (the newest background sequence is preempted and recomputed
 * later), instead of waiting for a background request to end. */
static void test_slot_preemption(em_tokenizer *tok)
{
    em_sched_backend be;
    fake *f = fake_new(64, 2, 512, 64, &be);   /* two slots, blocks to spare */
    f->delay_us = 2000;
    em_sched *s = mk(&be, 64, 60000, 0, tok);
    static job b1, b2, ia;
    fill_prompt(&b1, 20, 21, 0);
    b1.max_tokens = 200;
    fill_prompt(&b2, 20, 22, 0);
    b2.max_tokens = 200;
    CHECK(submit(s, &b1, EM_CLASS_BACKGROUND, NULL) == 0);
    CHECK(submit(s, &b2, EM_CLASS_BACKGROUND, NULL) == 0);
    pump_tokens(&b2, 3);
    fill_prompt(&ia, 20, 23, 0);
    ia.max_tokens = 5;
    CHECK(submit(s, &ia, EM_CLASS_INTERACTIVE, NULL) == 0);
    finish_job(&ia);
    pump(&b1, 0);
    pump(&b2, 0);
    CHECKF(!b1.done && !b2.done, "the interactive request waited for background work to end");
    finish_job(&b1);
    finish_job(&b2);
    check_alone(&ia, 512, "interactive in a taken slot");
    check_alone(&b1, 512, "background 1");
    check_alone(&b2, 512, "background 2");
    CHECKF(b1.m.preemptions + b2.m.preemptions >= 1, "no background request gave up its slot");
    em_sched_drain(s);
    no_leak(s, "slot preemption");
    em_sched_destroy(s);
    fake_free(f);
}

static void test_cancel_and_limits(em_tokenizer *tok)
{
    em_sched_backend be;
    fake *f = fake_new(64, 4, 256, 16, &be);
    f->delay_us = 2000;
    em_sched *s = mk(&be, 16, 60000, 2, tok);
    static job a, q[4];
    /* a prompt whose greedy continuation runs to the context without EOS */
    for (uint32_t sd = 0;; sd++) {
        int32_t ref[400];
        em_finish fin;
        fill_prompt(&a, 40, sd, 0);
        if (alone(a.prompt, 40, 400, 256, ref, &fin) == 216 && fin == EM_FINISH_LENGTH)
            break;
    }
    a.max_tokens = 0;                     /* until the context */
    CHECK(submit(s, &a, EM_CLASS_INTERACTIVE, NULL) == 0);
    pump_tokens(&a, 2);
    em_sched_stats st;
    em_sched_get_stats(s, &st);
    CHECK(st.kv.used > 0);
    em_request_cancel(a.r);
    finish_job(&a);
    CHECKF(a.finish == EM_FINISH_CANCELLED, "finish %s after %u tokens", em_finish_name(a.finish), a.n_got);
    CHECKF(a.n_got < 20, "cancel took %u tokens", a.n_got);
    em_sched_drain(s);
    no_leak(s, "cancel");
    f->delay_us = 0;

    /* queue bound: the gate holds the step, two may wait, the third is busy */
    gate(f, 1);
    for (int i = 0; i < 3; i++) {
        fill_prompt(&q[i], 10, (uint32_t)(20 + i), 0);
        q[i].max_tokens = 3;
    }
    CHECK(submit(s, &q[0], EM_CLASS_BACKGROUND, NULL) == 0);
    usleep(20000);   /* q[0] is in the gated step, no longer waiting */
    CHECK(submit(s, &q[1], EM_CLASS_BACKGROUND, NULL) == 0);
    CHECK(submit(s, &q[2], EM_CLASS_BACKGROUND, NULL) == 0);
    em_req_params p = { .prompt = q[3].prompt, .n_prompt = 10, .cls = EM_CLASS_BACKGROUND, .max_tokens = 3 };
    p.sample.top_p = 1;
    fill_prompt(&q[3], 10, 23, 0);
    em_request *r = NULL;
    uint32_t retry = 0;
    em_err e = { 0 };
    CHECK(em_sched_submit(s, &p, &r, &retry, &e) == EM_EBUSY && retry > 0 && strstr(e.msg, "busy") && !r);
    /* the interactive queue is separate */
    p.cls = EM_CLASS_INTERACTIVE;
    CHECK(em_sched_submit(s, &p, &r, NULL, &e) == 0);
    gate(f, 0);
    for (int i = 0; i < 3; i++)
        finish_job(&q[i]);
    job tmp = { .r = r };
    finish_job(&tmp);
    CHECK(tmp.finish == EM_FINISH_LENGTH);

    /* requests that can never fit */
    p.n_prompt = 10;
    p.max_tokens = 300;
    CHECK(em_sched_submit(s, &p, &r, NULL, &e) == EM_ERANGE && strstr(e.msg, "context"));
    int32_t bad = V + 5;
    em_req_params pb = { .prompt = &bad, .n_prompt = 1, .max_tokens = 1 };
    CHECK(em_sched_submit(s, &pb, &r, NULL, &e) == EM_EINVAL);
    pb.n_prompt = 0;
    CHECK(em_sched_submit(s, &pb, &r, NULL, &e) == EM_EINVAL);
    em_sched_drain(s);
    no_leak(s, "limits");
    em_sched_destroy(s);
    fake_free(f);

    /* a pool smaller than one request */
    f = fake_new(4, 2, 256, 16, &be);
    s = mk(&be, 16, 60000, 0, tok);
    p.n_prompt = 10;
    p.max_tokens = 100;
    CHECK(em_sched_submit(s, &p, &r, NULL, &e) == EM_ERANGE && strstr(e.msg, "KV cache"));
    em_sched_destroy(s);
    fake_free(f);
}

/* Queue positions: 1-based within each class's queue, 0 once running or done. */
static void test_queue_position(em_tokenizer *tok)
{
    em_sched_backend be;
    fake *f = fake_new(256, 8, 512, 32, &be);
    gate(f, 1);
    em_sched *s = mk(&be, 32, 60000, 0, tok);
    static job first, ia[3], bg;
    fill_prompt(&first, 8, 40, 0);
    first.max_tokens = 2;
    CHECK(submit(s, &first, EM_CLASS_INTERACTIVE, NULL) == 0);
    for (int i = 0; i < 200 && em_sched_queue_position(s, first.r) != 0; i++)
        usleep(1000);   /* taken into the gated step */
    CHECK(em_sched_queue_position(s, first.r) == 0);
    for (int i = 0; i < 3; i++) {
        fill_prompt(&ia[i], 10, (uint32_t)(41 + i), 0);
        ia[i].max_tokens = 3;
        CHECK(submit(s, &ia[i], EM_CLASS_INTERACTIVE, NULL) == 0);
    }
    fill_prompt(&bg, 10, 44, 0);
    bg.max_tokens = 3;
    CHECK(submit(s, &bg, EM_CLASS_BACKGROUND, NULL) == 0);
    for (int i = 0; i < 3; i++)
        CHECKF(em_sched_queue_position(s, ia[i].r) == (uint32_t)i + 1, "interactive %d at %u", i,
               em_sched_queue_position(s, ia[i].r));
    CHECK(em_sched_queue_position(s, bg.r) == 1);   /* its own class's queue */
    gate(f, 0);
    job *all[] = { &first, &ia[0], &ia[1], &ia[2], &bg };
    for (int i = 0; i < 5; i++) {
        pump_done(all[i]);
        CHECK(em_sched_queue_position(s, all[i]->r) == 0);
        finish_job(all[i]);
    }
    em_sched_drain(s);
    em_sched_destroy(s);
    fake_free(f);
}

static void test_stop_string(em_tokenizer *tok)
{
    em_sched_backend be;
    fake *f = fake_new(64, 2, 256, 32, &be);
    em_sched *s = mk(&be, 32, 60000, 0, tok);
    job j;
    fill_prompt(&j, 12, 7, 0);
    int32_t ref[400];
    em_finish fin;
    uint32_t n = alone(j.prompt, 12, 20, 256, ref, &fin);
    CHECK(n >= 6);
    /* stop at the text of generated tokens 4 and 5 */
    char stop[64], full[512] = "", piece[64];
    int k1 = em_tokenizer_piece(tok, ref[4], 0, piece, sizeof piece);
    snprintf(stop, sizeof stop, "%.*s", k1, piece);
    int k2 = em_tokenizer_piece(tok, ref[5], 0, piece, sizeof piece);
    snprintf(stop + strlen(stop), sizeof stop - strlen(stop), "%.*s", k2, piece);
    for (uint32_t i = 0; i < 4; i++) {
        int k = em_tokenizer_piece(tok, ref[i], 0, piece, sizeof piece);
        snprintf(full + strlen(full), sizeof full - strlen(full), "%.*s", k, piece);
    }
    em_req_params p = { .prompt = j.prompt, .n_prompt = 12, .max_tokens = 20, .stop = { stop } };
    p.sample.top_p = 1;
    em_request *r = NULL;
    CHECK(em_sched_submit(s, &p, &r, NULL, NULL) == 0);
    char text[1024] = "";
    em_event ev;
    em_finish got = EM_FINISH_NONE;
    while (got == EM_FINISH_NONE && em_request_next(r, &ev, 2000)) {
        if (ev.text)
            snprintf(text + strlen(text), sizeof text - strlen(text), "%s", ev.text);
        if (ev.kind == EM_EV_DONE)
            got = ev.finish;
        em_event_clear(&ev);
    }
    em_request_release(r);
    CHECKF(got == EM_FINISH_STOP && strcmp(text, full) == 0, "stop string: got [%s] (%s), want [%s]", text,
           em_finish_name(got), full);
    em_sched_destroy(s);
    fake_free(f);
}

/* ---- constraints ----------------------------------------------------------------------------- */

typedef struct {
    uint32_t n, lo, hi;      /* tokens taken; allowed ids [lo, hi) */
    uint32_t min_len, max_len;
    int      bad_accept, destroyed, *freed;
} toy_con;

static int toy_allowed(void *ctx, uint32_t *allow, em_err *err)
{
    (void)err;
    toy_con *c = ctx;
    for (uint32_t id = c->lo; id < c->hi; id++)
        allow[id / 32] |= 1u << (id % 32);
    return 0;
}

static int toy_accept(void *ctx, int32_t id, em_err *err)
{
    toy_con *c = ctx;
    if ((uint32_t)id < c->lo || (uint32_t)id >= c->hi)
        c->bad_accept++;
    c->n++;
    return c->n > c->max_len ? em_err_set(err, EM_EINVAL, "toy: too long") : 0;
}

static int toy_can_end(void *ctx) { toy_con *c = ctx; return c->n >= c->min_len; }
static int toy_done(void *ctx) { toy_con *c = ctx; return c->n >= c->max_len; }
static void toy_destroy(void *ctx) { toy_con *c = ctx; (*c->freed)++; }

static em_finish run_constrained(em_sched *s, toy_con *c, int32_t *prompt, uint32_t n_prompt, int32_t *got,
                                 uint32_t *n_got, char *error, size_t cap)
{
    em_req_params p = { .prompt = prompt, .n_prompt = n_prompt, .max_tokens = 40,
                        .constraint = { c, toy_allowed, toy_accept, toy_can_end, toy_done, toy_destroy } };
    p.sample.top_p = 1;
    p.sample.temp = 1;   /* sampled: the mask must hold for any draw */
    p.sample.seed = 5;
    em_request *r = NULL;
    em_err e = { 0 };
    CHECKF(em_sched_submit(s, &p, &r, NULL, &e) == 0, "%s", e.msg);
    em_event ev;
    em_finish fin = EM_FINISH_NONE;
    *n_got = 0;
    while (fin == EM_FINISH_NONE && r && em_request_next(r, &ev, 5000)) {
        if (ev.kind == EM_EV_TOKEN && *n_got < 64)
            got[(*n_got)++] = ev.token;
        if (ev.kind == EM_EV_DONE) {
            fin = ev.finish;
            snprintf(error, cap, "%s", ev.error);
        }
        em_event_clear(&ev);
    }
    em_request_release(r);
    return fin;
}

static void test_constraint(em_tokenizer *tok)
{
    em_sched_backend be;
    fake *f = fake_new(64, 2, 256, 32, &be);
    em_sched *s = mk(&be, 32, 60000, 0, tok);
    job j;
    fill_prompt(&j, 12, 3, 0);
    int freed = 0;
    int32_t got[64];
    uint32_t n = 0;
    char error[256];
    /* the words w10..w14 only, 3 to 6 of them */
    toy_con c = { .lo = 269, .hi = 274, .min_len = 3, .max_len = 6, .freed = &freed };
    em_finish fin = run_constrained(s, &c, j.prompt, 12, got, &n, error, sizeof error);
    CHECKF(fin == EM_FINISH_STOP && n >= 3 && n <= 6 && c.bad_accept == 0, "constrained: %s after %u tokens",
           em_finish_name(fin), n);
    for (uint32_t i = 0; i < n; i++)
        CHECKF(got[i] >= 269 && got[i] < 274, "token %u: %d is not allowed", i, got[i]);
    CHECK(c.n == n);   /* every token emitted went through accept */
    /* only end-of-text allowed once it may end, and it may end at once: no token, stop */
    toy_con e0 = { .lo = 0, .hi = 0, .min_len = 0, .max_len = 6, .freed = &freed };
    fin = run_constrained(s, &e0, j.prompt, 12, got, &n, error, sizeof error);
    CHECKF(fin == EM_FINISH_STOP && n == 0, "only EOS: %s after %u tokens", em_finish_name(fin), n);
    /* a dead end: nothing allowed and it may not end */
    toy_con dead = { .lo = 0, .hi = 0, .min_len = 1, .max_len = 6, .freed = &freed };
    fin = run_constrained(s, &dead, j.prompt, 12, got, &n, error, sizeof error);
    CHECKF(fin == EM_FINISH_ERROR && n == 0 && strstr(error, "allows no token"), "dead end: %s [%s]",
           em_finish_name(fin), error);
    em_sched_destroy(s);
    CHECKF(freed == 3, "constraints freed: %d of 3", freed);
    /* a refused submit leaves the constraint with the caller */
    s = mk(&be, 32, 60000, 0, tok);
    toy_con keep = { .lo = 269, .hi = 274, .min_len = 1, .max_len = 2, .freed = &freed };
    em_req_params p = { .prompt = j.prompt, .n_prompt = 0,
                        .constraint = { &keep, toy_allowed, toy_accept, toy_can_end, toy_done, toy_destroy } };
    em_request *r = NULL;
    CHECK(em_sched_submit(s, &p, &r, NULL, NULL) != 0 && !r);
    em_sched_destroy(s);
    CHECKF(freed == 3, "a refused request's constraint freed by the scheduler (%d)", freed);
    fake_free(f);
}

/* ---- choosing on the device ------------------------------------------------------------------- */

/* The same requests (greedy, sampled with and without filters, penalties
 * and bias, a constraint) through the plain backend, one that chooses from
 * the device's summaries, and one whose adjustments overflow into whole
 * steps on the host: the same tokens, request by request. */
static void test_device_choice(em_tokenizer *tok)
{
    enum { NR = 5 };
    int32_t out[3][NR][64];
    uint32_t n_out[3][NR];
    uint64_t top_steps[3], plain_steps[3];
    for (int mode = 0; mode < 3; mode++) {
        em_sched_backend be;
        fake *f = fake_new(64, 4, 256, 64, &be);
        if (mode)
            fake_with_top(f, &be, mode == 1 ? 4096 : 20);   /* 20: request 3 outgrows it */
        em_sched *s = mk(&be, 64, 60000, 0, tok);
        em_logit_bias bias[2] = { { 270, 4 }, { 280, -100 } };
        int freed = 0;
        toy_con con = { .lo = 269, .hi = 290, .min_len = 4, .max_len = 12, .freed = &freed };
        em_request *r[NR];
        job j[NR];
        for (int q = 0; q < NR; q++) {
            fill_prompt(&j[q], 10 + q, 20 + q, 0);
            em_req_params p = { .prompt = j[q].prompt, .n_prompt = 10 + q, .max_tokens = 40 };
            p.sample = em_sample_defaults();
            p.sample.seed = 1000 + q;
            p.sample.min_p = 0;
            p.sample.top_k = 0;
            p.sample.top_p = 1;
            if (q == 0)
                p.sample.temp = 0;
            if (q == 1)
                p.sample.temp = 2;
            if (q == 2) {
                p.sample.temp = 1.5f;
                p.sample.top_k = 5;
            }
            if (q == 3) {
                p.sample.temp = 1.8f;
                p.sample.top_p = 0.9f;
                p.sample.frequency_penalty = 1.5f;
                p.sample.repetition_penalty = 1.3f;
                p.sample.logit_bias = bias;
                p.sample.n_logit_bias = 2;
            }
            if (q == 4) {
                p.sample.temp = 2;
                p.constraint = (em_constraint){ &con, toy_allowed, toy_accept, toy_can_end, toy_done, toy_destroy };
            }
            em_err e = { 0 };
            CHECKF(em_sched_submit(s, &p, &r[q], NULL, &e) == 0, "%s", e.msg);
        }
        for (int q = 0; q < NR; q++) {
            em_event ev;
            int done = 0;
            n_out[mode][q] = 0;
            while (!done && em_request_next(r[q], &ev, 5000)) {
                if (ev.kind == EM_EV_TOKEN && n_out[mode][q] < 64)
                    out[mode][q][n_out[mode][q]++] = ev.token;
                done = ev.kind == EM_EV_DONE;
                em_event_clear(&ev);
            }
            CHECKF(done, "mode %d request %d did not finish", mode, q);
            em_request_release(r[q]);
        }
        em_sched_destroy(s);
        top_steps[mode] = f->top_steps;
        plain_steps[mode] = f->plain_steps;
        fake_free(f);
    }
    for (int mode = 1; mode < 3; mode++)
        for (int q = 0; q < NR; q++)
            CHECKF(n_out[mode][q] == n_out[0][q] && memcmp(out[mode][q], out[0][q], n_out[0][q] * 4) == 0,
                   "request %d: %u tokens choosing %s, %u on the host", q, n_out[mode][q],
                   mode == 1 ? "on the device" : "with overflowing adjustments", n_out[0][q]);
    CHECKF(top_steps[1] > 0 && plain_steps[1] == 0, "device choosing: %llu device steps, %llu plain",
           (unsigned long long)top_steps[1], (unsigned long long)plain_steps[1]);
    CHECKF(top_steps[2] > 0 && plain_steps[2] > 0, "overflow: %llu device steps, %llu plain (both wanted)",
           (unsigned long long)top_steps[2], (unsigned long long)plain_steps[2]);
}

/* ---- speculation ------------------------------------------------------------------------------ */

/* Prompt lookup: greedy output token for token the same with and without
 * speculation, over a model whose text repeats (drafts accepted, fewer
 * steps) and one whose text does not (drafts rejected and rolled back);
 * a sampled speculating request runs to its length; no block leaks. */
static void test_speculation(em_tokenizer *tok)
{
    for (int local = 0; local < 2; local++) {
        int32_t out[2][4][64];
        uint32_t n_out[2][4];
        uint64_t steps[2];
        em_sched_stats st[2];
        for (int spec = 0; spec < 2; spec++) {
            em_sched_backend be;
            fake *f = fake_new(64, 4, 256, 64, &be);
            be.max_logits = 4 + 16;   /* rows for drafts beside every decode */
            f->local = local;
            em_sched *s = mk(&be, 64, 60000, 0, tok);
            em_request *r[4];
            job j[4];
            for (int q = 0; q < 4; q++) {
                fill_prompt(&j[q], 8 + q, 40 + q, 0);
                em_req_params p = { .prompt = j[q].prompt, .n_prompt = 8 + q, .max_tokens = 48,
                                    .speculate = spec ? 4 : -1 };
                p.sample.top_p = 1;
                if (q == 3) {   /* sampled: runs to its length either way */
                    p.sample.temp = 1.5f;
                    p.sample.seed = 3;
                }
                CHECK(em_sched_submit(s, &p, &r[q], NULL, NULL) == 0);
            }
            for (int q = 0; q < 4; q++) {
                em_event ev;
                int done = 0;
                n_out[spec][q] = 0;
                while (!done && em_request_next(r[q], &ev, 5000)) {
                    if (ev.kind == EM_EV_TOKEN && n_out[spec][q] < 64)
                        out[spec][q][n_out[spec][q]++] = ev.token;
                    done = ev.kind == EM_EV_DONE;
                    em_event_clear(&ev);
                }
                CHECKF(done, "speculation %d request %d did not finish", spec, q);
                em_request_release(r[q]);
            }
            em_sched_drain(s);
            em_sched_get_stats(s, &st[spec]);
            steps[spec] = f->steps;
            no_leak(s, "speculation");
            em_sched_destroy(s);
            fake_free(f);
        }
        for (int q = 0; q < 3; q++)
            CHECKF(n_out[1][q] == n_out[0][q] && memcmp(out[1][q], out[0][q], n_out[0][q] * 4) == 0,
                   "%s text, request %d: %u tokens speculating, %u not", local ? "repetitive" : "varied", q,
                   n_out[1][q], n_out[0][q]);
        CHECKF(n_out[1][3] >= 1 && n_out[1][3] <= 48, "sampled: %u tokens", n_out[1][3]);
        CHECKF(st[1].spec_drafted > 0 && st[0].spec_drafted == 0, "drafted %llu",
               (unsigned long long)st[1].spec_drafted);
        if (local)
            CHECKF(st[1].spec_accepted * 2 > st[1].spec_drafted && steps[1] < steps[0],
                   "repetitive text: %llu of %llu drafts accepted, %llu steps vs %llu",
                   (unsigned long long)st[1].spec_accepted, (unsigned long long)st[1].spec_drafted,
                   (unsigned long long)steps[1], (unsigned long long)steps[0]);
    }
}

/* Draft-model speculation over the fake: a perfect draft (the same fake
 * model) and a wrong one (wrong at every third position) give greedy
 * outputs identical to decoding without speculation, token for token; the
 * perfect one has every draft accepted and takes fewer steps; neither pool
 * leaks a block. A draft model whose step fails turns drafting off and the
 * requests still come out the same. A draft model of another vocabulary is
 * refused, and so is asking for one from a scheduler without. */
static void run_draft(em_tokenizer *tok, int mode, int32_t out[4][64], uint32_t n_out[4], em_sched_stats *st,
                      uint64_t *steps)
{
    /* mode 0: no speculation; 1: a perfect draft; 2: a wrong one; 3: a draft that fails;
     * 4: a perfect draft whose pool holds about one sequence (they take its blocks in turn) */
    em_sched_backend be, dbe;
    fake *f = fake_new(64, 4, 256, 64, &be), *d = NULL;
    be.max_logits = 4 + 16;
    em_sched_opts o;
    em_sched_opts_init(&o);
    o.step_tokens = 64;
    o.aging_ms = 60000;
    if (mode) {
        d = fake_new(mode == 4 ? 6 : 64, 4, 256, 24, &dbe);   /* a small draft step: prompts catch up in chunks */
        d->wrong = mode == 2;
        d->fail_at = mode == 3 ? 9 : 0;
        o.draft = &dbe;
        o.speculate = 4;
    }
    em_sched *s = NULL;
    em_err e = { 0 };
    CHECKF(em_sched_create(&o, &be, tok, &s, &e) == 0, "%s", e.msg);
    em_request *r[4];
    job j[4];
    for (int q = 0; q < 4; q++) {
        fill_prompt(&j[q], 8 + 20 * q, 40 + q, q == 3 ? 48 : 0);
        em_req_params p = { .prompt = j[q].prompt, .n_prompt = j[q].n_prompt, .max_tokens = 48 };
        p.sample.top_p = 1;
        if (q == 3) {   /* sampled: runs its course either way */
            p.sample.temp = 1.5f;
            p.sample.seed = 3;
        }
        CHECKF(em_sched_submit(s, &p, &r[q], NULL, &e) == 0, "%s", e.msg);
    }
    for (int q = 0; q < 4; q++) {
        em_event ev;
        int done = 0;
        n_out[q] = 0;
        while (!done && em_request_next(r[q], &ev, 5000)) {
            if (ev.kind == EM_EV_TOKEN && n_out[q] < 64)
                out[q][n_out[q]++] = ev.token;
            done = ev.kind == EM_EV_DONE;
            CHECKF(!done || ev.finish != EM_FINISH_ERROR, "draft mode %d, request %d: %s", mode, q, ev.error);
            em_event_clear(&ev);
        }
        CHECKF(done, "draft mode %d request %d did not finish", mode, q);
        em_request_release(r[q]);
    }
    em_sched_drain(s);
    em_sched_get_stats(s, st);
    *steps = f->steps;
    no_leak(s, "draft model");
    CHECKF(st->kv_draft.used == 0, "draft mode %d: %u draft blocks still used", mode, st->kv_draft.used);
    em_sched_destroy(s);
    fake_free(f);
    if (d)
        fake_free(d);
}

static void test_draft_model(em_tokenizer *tok)
{
    int32_t out[5][4][64];
    uint32_t n_out[5][4];
    uint64_t steps[5];
    em_sched_stats st[5];
    for (int mode = 0; mode < 5; mode++)
        run_draft(tok, mode, out[mode], n_out[mode], &st[mode], &steps[mode]);
    for (int mode = 1; mode < 5; mode++) {
        for (int q = 0; q < 3; q++)
            CHECKF(n_out[mode][q] == n_out[0][q] && memcmp(out[mode][q], out[0][q], n_out[0][q] * 4) == 0,
                   "draft mode %d, request %d: %u tokens speculating, %u not", mode, q, n_out[mode][q],
                   n_out[0][q]);
        CHECKF(n_out[mode][3] >= 1 && n_out[mode][3] <= 48, "sampled: %u tokens", n_out[mode][3]);
    }
    CHECKF(st[1].spec_drafted > 0 && st[1].spec_accepted == st[1].spec_drafted && steps[1] < steps[0],
           "perfect draft: %llu of %llu accepted, %llu steps vs %llu", (unsigned long long)st[1].spec_accepted,
           (unsigned long long)st[1].spec_drafted, (unsigned long long)steps[1], (unsigned long long)steps[0]);
    /* the wrong draft is right at two positions in three as long as its K/V
     * holds exactly the sequence's tokens (its hash covers them all): a
     * rollback that kept a rejected proposal would make it wrong from there on */
    CHECKF(st[2].spec_drafted > 0 && st[2].spec_accepted < st[2].spec_drafted &&
           st[2].spec_accepted * 5 > st[2].spec_drafted * 2,
           "wrong draft: %llu of %llu accepted", (unsigned long long)st[2].spec_accepted,
           (unsigned long long)st[2].spec_drafted);
    CHECKF(st[4].spec_drafted > 0 && st[4].spec_accepted == st[4].spec_drafted,
           "perfect draft, small pool: %llu of %llu accepted", (unsigned long long)st[4].spec_accepted,
           (unsigned long long)st[4].spec_drafted);
    CHECKF(st[0].spec_drafted == 0, "no speculation drafted %llu", (unsigned long long)st[0].spec_drafted);

    /* refusals */
    em_sched_backend be, dbe;
    fake *f = fake_new(64, 4, 256, 64, &be), *d = fake_new(64, 4, 256, 64, &dbe);
    dbe.n_vocab = V + 1;
    em_sched_opts o;
    em_sched_opts_init(&o);
    o.draft = &dbe;
    em_sched *s = NULL;
    em_err e = { 0 };
    CHECK(em_sched_create(&o, &be, tok, &s, &e) == EM_EINVAL && !s && strstr(e.msg, "vocabulary"));
    s = mk(&be, 64, 0, 0, tok);
    job j;
    fill_prompt(&j, 8, 1, 0);
    em_req_params p = { .prompt = j.prompt, .n_prompt = 8, .max_tokens = 4, .speculate = 4,
                        .spec_method = EM_SPEC_DRAFT };
    em_request *r = NULL;
    CHECK(em_sched_submit(s, &p, &r, NULL, &e) == EM_EINVAL && !r && strstr(e.msg, "--draft-model"));
    em_sched_destroy(s);
    fake_free(f);
    fake_free(d);
}

/* ---- randomized ---------------------------------------------------------------------------- */

static void test_random(em_tokenizer *tok)
{
    unsigned long long seed = 77;
    int scenarios = 0, requests = 0;
    for (int sc = 0; sc < 400; sc++) {
        uint32_t blocks = 20 + (uint32_t)(test_rand(&seed) % 60);
        uint32_t seqs = 2 + (uint32_t)(test_rand(&seed) % 8);
        uint32_t step = 8 + (uint32_t)(test_rand(&seed) % 60);
        em_sched_backend be;
        fake *f = fake_new(blocks, seqs, 256, step, &be);
        em_sched *s = mk(&be, step, 1 + (double)(test_rand(&seed) % 50), 0, tok);
        static job jobs[24];
        int n = 4 + (int)(test_rand(&seed) % 20);
        for (int i = 0; i < n; i++) {
            job *j = &jobs[i];
            uint32_t len = 1 + (uint32_t)(test_rand(&seed) % 150);
            fill_prompt(j, len, (uint32_t)(test_rand(&seed) % 5), (uint32_t)(test_rand(&seed) % 2) * 48);
            j->max_tokens = 1 + (uint32_t)(test_rand(&seed) % 60);
            if ((j->n_prompt + j->max_tokens + 15) / 16 > blocks)
                j->max_tokens = 1;
            em_err e = { 0 };
            int rc = submit(s, j, test_rand(&seed) % 2 ? EM_CLASS_BACKGROUND : EM_CLASS_INTERACTIVE, &e);
            if (rc) {
                CHECKF(rc == EM_ERANGE, "submit: %s", e.msg);
                j->r = NULL;
            }
        }
        for (int i = 0; i < n; i++) {
            job *j = &jobs[i];
            if (!j->r)
                continue;
            int cancel = test_rand(&seed) % 10 == 0;
            if (cancel)
                em_request_cancel(j->r);
            finish_job(j);
            requests++;
            if (!cancel && j->finish != EM_FINISH_ERROR)
                check_alone(j, 256, "random");
            CHECKF(j->finish != EM_FINISH_ERROR, "scenario %d request %d failed", sc, i);
        }
        em_sched_drain(s);
        no_leak(s, "random");
        em_sched_destroy(s);
        fake_free(f);
        scenarios++;
    }
    printf("random: %d scenarios, %d requests\n", scenarios, requests);
}

/* Background prompt chunks keep steps short (bg_step_ms against the
 * measured cost of a step) and stop while an interactive prompt runs. The
 * fake's steps cost 2 ms + 0.4 ms per row; background prompts are byte ids,
 * the interactive prompt word ids, so each step's rows can be told apart. */
static void test_background_step_bound(em_tokenizer *tok)
{
    for (int bounded = 0; bounded < 2; bounded++) {
        em_sched_backend be;
        fake *f = fake_new(1024, 8, 512, 128, &be);
        f->delay_us = 2000;
        f->row_us = 400;
        em_sched *s = mk_bg(&be, 128, 0, 0, bounded ? 20.0 : 0, tok);
        static job bg[4], ia;
        for (int i = 0; i < 4; i++) {
            fill_prompt(&bg[i], 380, (uint32_t)i + 7, 0);
            bg[i].max_tokens = 20;
            CHECK(submit(s, &bg[i], EM_CLASS_BACKGROUND, NULL) == 0);
        }
        usleep(60000);
        for (uint32_t i = 0; i < 100; i++)
            ia.prompt[i] = (int32_t)(259 + (i * 7) % 41);
        ia.n_prompt = 100;
        ia.max_tokens = 5;
        CHECK(submit(s, &ia, EM_CLASS_INTERACTIVE, NULL) == 0);
        finish_job(&ia);
        check_alone(&ia, 512, "bounded step");
        for (int i = 0; i < 4; i++) {
            finish_job(&bg[i]);
            check_alone(&bg[i], 512, "bounded step");
        }
        em_sched_drain(s);
        no_leak(s, "bounded step");
        if (bounded) {
            /* (20 - 2) / 0.4 = 45 rows fit; allow for a noisy fit */
            CHECKF(f->max_byte_prompt_late > 0 && f->max_byte_prompt_late <= 70,
                   "background prompt rows per step %u with a 20 ms bound", f->max_byte_prompt_late);
            CHECKF(f->mixed_steps == 0, "%u steps mixed background and interactive prompt rows",
                   f->mixed_steps);
        } else {
            CHECKF(f->max_byte_prompt_late > 100, "unbounded: background prompt rows per step %u",
                   f->max_byte_prompt_late);
        }
        em_sched_destroy(s);
        fake_free(f);
    }
}

/* Background decodes sit out the step of an interactive prompt when, by the
 * measured cost per row, they would make it half as long again (a
 * compute-bound device: the fake's steps cost 1 ms + 1 ms per row), and
 * stay when rows are nearly free (20 ms + 10 us per row). Eight background
 * requests decode (byte-id prompts); the interactive prompt is 4 word ids. */
static void test_background_decodes_yield(em_tokenizer *tok)
{
    for (int costly = 0; costly < 2; costly++) {
        em_sched_backend be;
        fake *f = fake_new(1024, 16, 512, 128, &be);
        f->delay_us = costly ? 1000 : 20000;
        f->row_us = costly ? 1000 : 10;
        em_sched *s = mk_bg(&be, 128, 0, 0, 0, tok);
        static job bg[8], ia;
        for (int i = 0; i < 8; i++) {
            fill_prompt(&bg[i], 8, (uint32_t)i + 3, 0);
            bg[i].max_tokens = 60;
            CHECK(submit(s, &bg[i], EM_CLASS_BACKGROUND, NULL) == 0);
        }
        for (int i = 0; i < 2000 && f->steps < 12; i++)   /* decoding, with a history of step costs */
            usleep(1000);
        for (uint32_t i = 0; i < 4; i++)
            ia.prompt[i] = (int32_t)(259 + (i * 7) % 41);
        ia.n_prompt = 4;
        ia.max_tokens = 3;
        CHECK(submit(s, &ia, EM_CLASS_INTERACTIVE, NULL) == 0);
        finish_job(&ia);
        check_alone(&ia, 512, "decodes yield");
        for (int i = 0; i < 8; i++) {
            finish_job(&bg[i]);
            check_alone(&bg[i], 512, "decodes yield");
        }
        em_sched_drain(s);
        no_leak(s, "decodes yield");
        CHECKF(f->word_prompt_steps == 1, "the interactive prompt took %u steps", f->word_prompt_steps);
        if (costly)
            CHECKF(f->word_prompt_dec_steps == 0, "rows cost: background decodes ran beside the chat's prompt");
        else
            CHECKF(f->word_prompt_dec_steps == 1, "rows nearly free: background decodes sat out the chat's prompt");
        em_sched_destroy(s);
        fake_free(f);
    }
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* busy_s is the sum of step times, cumulative; tokens/s and the busy ratio
 * look back EM_SCHED_RATE_S seconds from now, so they fall to 0 once the
 * scheduler has been idle that long (the ring of recent steps stays full). */
static void test_busy_time(em_tokenizer *tok)
{
    em_sched_backend be;
    fake *f = fake_new(64, 4, 512, 64, &be);
    f->delay_us = 1000;   /* every step at least 1 ms */
    double t0 = mono_s();
    em_sched *s = mk(&be, 64, 0, 0, tok);
    em_sched_stats st, st2;
    em_sched_get_stats(s, &st);
    CHECK(st.busy_s == 0 && st.tokens_per_s == 0 && st.busy_ratio == 0);
    static job j;
    for (uint32_t seed = 0; seed < 4; seed++) {   /* > 64 steps in all: the ring wraps */
        fill_prompt(&j, 20, seed, 0);
        j.max_tokens = 100;
        CHECK(submit(s, &j, EM_CLASS_INTERACTIVE, NULL) == 0);
        finish_job(&j);
    }
    em_sched_drain(s);
    em_sched_get_stats(s, &st);
    double wall = mono_s() - t0;
    CHECKF(f->steps > 64 && st.steps == f->steps, "%llu steps", (unsigned long long)f->steps);
    CHECKF(st.busy_s >= (double)f->steps * 0.001 && st.busy_s <= wall, "busy %.4f s in %.4f s, %llu steps",
           st.busy_s, wall, (unsigned long long)f->steps);
    /* one sequence at a time: at most one token per step of >= 1 ms */
    CHECKF(st.tokens_per_s > 0 && st.tokens_per_s <= 1000.0, "%.1f tokens/s", st.tokens_per_s);
    CHECKF(st.busy_ratio > 0 && st.busy_ratio <= 1.0 + 1e-9, "busy ratio %.4f", st.busy_ratio);
    usleep((useconds_t)(EM_SCHED_RATE_S * 1e6) + 300000);
    em_sched_get_stats(s, &st2);
    CHECKF(st2.tokens_per_s == 0 && st2.busy_ratio == 0, "idle: %.3f tokens/s, busy ratio %.3f",
           st2.tokens_per_s, st2.busy_ratio);
    CHECK(st2.busy_s == st.busy_s && st2.tokens_generated == st.tokens_generated);
    em_sched_destroy(s);
    fake_free(f);
}

/* The device fails and its first rebuild fails too (test_device_down). */
static int fake_recover(void *ctx, em_err *err)
{
    fake *f = ctx;
    f->recover_calls++;
    if (f->rebuilds_to_fail > 0) {
        f->rebuilds_to_fail--;
        f->steps_at_down = f->steps;
        return em_err_set(err, EM_EDEVICE, "fake: no device memory for the weights");
    }
    return 0;
}

/* A device failure whose rebuild fails: the device is down (stats say so
 * and why); a request meanwhile fails at once naming it, without a step;
 * with nothing submitted the scheduler tries again EM_SCHED_RECOVER_S
 * later and the device is back; then requests are served as alone, and no
 * block leaked. */
static void test_device_down(em_tokenizer *tok)
{
    em_sched_backend be;
    fake *f = fake_new(64, 4, 256, 64, &be);
    f->fail_at = 3;
    f->rebuilds_to_fail = 1;
    be.recover = fake_recover;
    em_sched *s = mk(&be, 64, 0, 0, tok);
    em_err e = { 0 };
    job a = { .max_tokens = 10 };
    fill_prompt(&a, 5, 1, 0);
    CHECK(submit(s, &a, EM_CLASS_INTERACTIVE, &e) == 0);
    finish_job(&a);
    CHECKF(a.finish == EM_FINISH_ERROR && strstr(a.why, "fake: the device is lost"), "first: %s [%s]",
           em_finish_name(a.finish), a.why);
    em_sched_stats st;
    for (int i = 0; i < 200; i++) {   /* the rebuild follows the error to the request: bounded wait */
        em_sched_get_stats(s, &st);
        if (st.device_down)
            break;
        usleep(10000);
    }
    CHECKF(st.device_down == 1 && strstr(st.device_error, "no device memory") && st.device_failures == 1 &&
           st.device_resets == 0, "down %u [%s] failures %llu resets %llu", st.device_down, st.device_error,
           (unsigned long long)st.device_failures, (unsigned long long)st.device_resets);
    job b = { .max_tokens = 10 };
    fill_prompt(&b, 5, 2, 0);
    CHECK(submit(s, &b, EM_CLASS_BACKGROUND, &e) == 0);
    finish_job(&b);
    em_sched_get_stats(s, &st);
    CHECKF(b.finish == EM_FINISH_ERROR && b.n_got == 0 && strstr(b.why, "the device is down") &&
               strstr(b.why, "no device memory"), "while down: %s, %u tokens [%s]", em_finish_name(b.finish),
           b.n_got, b.why);
    CHECKF(st.device_down == 1 || st.device_resets == 1, "down %u resets %llu", st.device_down,
           (unsigned long long)st.device_resets);
    CHECKF(f->steps == f->steps_at_down || st.device_resets == 1, "a step ran while down: %llu then %llu",
           (unsigned long long)f->steps_at_down, (unsigned long long)f->steps);
    for (int i = 0; i < 1500; i++) {   /* back by itself, idle (bounded: 15 s for a 5 s retry) */
        em_sched_get_stats(s, &st);
        if (!st.device_down)
            break;
        usleep(10000);
    }
    CHECKF(!st.device_down && !st.device_error[0] && st.device_resets == 1 && f->recover_calls == 2 &&
               st.device_failures == 1, "back: down %u resets %llu recover calls %d failures %llu",
           st.device_down, (unsigned long long)st.device_resets, f->recover_calls,
           (unsigned long long)st.device_failures);
    job c = { .max_tokens = 10 };
    fill_prompt(&c, 5, 3, 0);
    CHECK(submit(s, &c, EM_CLASS_INTERACTIVE, &e) == 0);
    finish_job(&c);
    check_alone(&c, 256, "after the device came back");
    em_sched_drain(s);
    no_leak(s, "device down");
    em_sched_destroy(s);
    fake_free(f);
}

/* ---- embeddings ------------------------------------------------------------------------------ */

/* What j's embedding is, computed alone: the fake's hidden states of its
 * prompt pooled as asked (a decoder's from the prefix up to each position,
 * an encoder's from the whole sequence). */
static void embed_ref(const job *j, int encoder, float *out)
{
    double acc[FE] = { 0 };
    uint64_t whole = 0xcbf29ce484222325ull, pre = 0xcbf29ce484222325ull;
    for (uint32_t i = 0; i < j->n_prompt; i++)
        whole = mix(whole, j->prompt[i]);
    uint32_t n = 0;
    for (uint32_t p = 0; p < j->n_prompt; p++) {
        pre = mix(pre, j->prompt[p]);
        int take = j->pool == EM_POOL_MEAN || j->pool == EM_POOL_NONE ? 1
                 : j->pool == EM_POOL_LAST ? p + 1 == j->n_prompt : p == 0;
        if (!take)
            continue;
        float hv[FE];
        hidden_of(encoder ? mix(mix(whole, (int32_t)p), j->types ? j->types[p] : 0) : pre, hv);
        for (int d = 0; d < FE; d++)
            acc[d] += hv[d];
        n++;
    }
    for (int d = 0; d < FE; d++)
        out[d] = (float)(acc[d] / n);
}

static void check_embed(const job *j, int encoder, const char *what)
{
    float ref[FE];
    embed_ref(j, encoder, ref);
    double err = 0;
    for (int d = 0; d < FE; d++)
        err = fmax(err, fabs((double)j->emb[d] - ref[d]));
    CHECKF(j->finish == EM_FINISH_STOP && j->n_emb == FE && err < 1e-5, "%s: finish %s (%s), %u dims, error %g",
           what, em_finish_name(j->finish), j->why, j->n_emb, err);
    CHECKF(j->n_got == 0 && j->m.completion_tokens == 0 && j->m.prompt_tokens == j->n_prompt &&
           j->m.cached_tokens == 0 && j->m.total_ms >= j->m.queue_ms && j->m.queue_ms >= 0,
           "%s: %u tokens, metrics prompt %u completion %u cached %u", what, j->n_got, j->m.prompt_tokens,
           j->m.completion_tokens, j->m.cached_tokens);
}

/* The end of a scheduler's test: it drains, no block leaked, all freed. */
static void done_with(em_sched *s, fake *f, const char *what)
{
    em_sched_drain(s);
    no_leak(s, what);
    em_sched_destroy(s);
    fake_free(f);
}

/* A decoder: embed requests are chunked prompt work (150 tokens in steps of
 * 64), each chunk adding its span (every row for MEAN, the row of position
 * 0 for CLS, of the last for LAST), nothing read from or left in the
 * prefix cache, batched with generating requests that still come out as
 * alone; one preempted mid-prompt is run again from its start. */
static void test_embed_decoder(em_tokenizer *tok)
{
    em_sched_backend be;
    fake *f = fake_new(256, 8, 512, 64, &be);
    fake_with_top(f, &be, 1 << 16);
    em_sched *s = mk(&be, 64, 0, 0, tok);
    static job e[6], g[4];
    const em_pooling pools[6] = { EM_POOL_MEAN, EM_POOL_CLS, EM_POOL_LAST, EM_POOL_MEAN, EM_POOL_NONE, EM_POOL_RANK };
    uint64_t rows_expected = 0;
    for (int i = 0; i < 6; i++) {   /* two with the same prompt: the second finds no cached prefix */
        fill_prompt(&e[i], 150 - (uint32_t)i * 7 * (i != 3), i == 3 ? 0 : (uint32_t)i, 0);
        e[i].pool = pools[i];
        rows_expected += pools[i] == EM_POOL_MEAN || pools[i] == EM_POOL_NONE ? e[i].n_prompt : 1;
        em_err er = { 0 };
        CHECKF(submit_embed(s, &e[i], i % 2 ? EM_CLASS_BACKGROUND : EM_CLASS_INTERACTIVE, &er) == 0, "%s", er.msg);
        if (i == 2)
            finish_job(&e[0]);   /* (e[3] repeats e[0]'s prompt after it ended) */
    }
    for (int i = 1; i < 6; i++)
        finish_job(&e[i]);
    for (int i = 0; i < 6; i++)
        check_embed(&e[i], 0, "decoder embed");
    em_sched_drain(s);
    em_sched_stats st;
    em_sched_get_stats(s, &st);
    CHECKF(st.kv.cached == 0 && st.kv.hit_blocks == 0 && st.kv.used == 0, "embeddings left cached %u, hit %llu, "
           "used %u blocks", st.kv.cached, (unsigned long long)st.kv.hit_blocks, st.kv.used);
    CHECKF(f->pooled_rows == rows_expected, "%llu rows pooled, %llu expected", (unsigned long long)f->pooled_rows,
           (unsigned long long)rows_expected);
    CHECK(st.tokens_generated == 0);
    /* mixed with generation: batched, both right */
    for (int i = 0; i < 4; i++) {
        fill_prompt(&g[i], 40 + (uint32_t)i * 9, 50 + (uint32_t)i, 0);
        g[i].max_tokens = 12;
        CHECK(submit(s, &g[i], i % 2 ? EM_CLASS_BACKGROUND : EM_CLASS_INTERACTIVE, NULL) == 0);
        CHECK(submit_embed(s, &e[i], i % 2 ? EM_CLASS_INTERACTIVE : EM_CLASS_BACKGROUND, NULL) == 0);
    }
    for (int i = 0; i < 4; i++) {
        finish_job(&g[i]);
        finish_job(&e[i]);
        check_alone(&g[i], 512, "generated beside embeddings");
        check_embed(&e[i], 0, "embed beside generation");
    }
    CHECK(f->top_steps > 0 && f->max_batch_seen > 1);
    em_sched_drain(s);
    no_leak(s, "decoder embeddings");
    /* no pooled rows: refused */
    em_sched_destroy(s);
    be.pooled = NULL;
    s = mk(&be, 64, 0, 0, tok);
    em_err er = { 0 };
    CHECKF(submit_embed(s, &e[0], EM_CLASS_INTERACTIVE, &er) == EM_EINVAL && strstr(er.msg, "embeddings"), "%s",
           er.msg);
    em_sched_destroy(s);
    fake_free(f);

    /* preempted mid-prompt: 28 blocks, a background embed of 400 tokens
     * (25 blocks) holds 24 when an interactive request needing 13 comes */
    f = fake_new(28, 4, 512, 64, &be);
    f->close_after = 5;   /* the sixth step (positions 320..383) waits */
    s = mk(&be, 64, 60000, 0, tok);
    static job big, ia;
    fill_prompt(&big, 400, 77, 0);
    big.pool = EM_POOL_MEAN;
    CHECK(submit_embed(s, &big, EM_CLASS_BACKGROUND, NULL) == 0);
    for (int i = 0; i < 10000; i++) {
        pthread_mutex_lock(&f->gate_mu);
        int held = f->gate_closed;
        pthread_mutex_unlock(&f->gate_mu);
        if (held)
            break;
        usleep(1000);
    }
    fill_prompt(&ia, 200, 78, 0);
    ia.max_tokens = 10;
    CHECK(submit(s, &ia, EM_CLASS_INTERACTIVE, NULL) == 0);
    usleep(20000);
    f->close_after = 0;
    gate(f, 0);
    finish_job(&ia);
    finish_job(&big);
    check_alone(&ia, 512, "interactive past an embedding");
    check_embed(&big, 0, "embed preempted");
    CHECKF(big.m.preemptions >= 1, "the embedding was not preempted (%u)", big.m.preemptions);
    done_with(s, f, "embed preemption");
}

/* An encoder: generation refused ("does not generate text"), a prompt past
 * the step refused; sequences whole in one step from position 0 (the fake
 * fails a step that breaks that), batched, token types reaching the rows. */
static void test_embed_encoder(em_tokenizer *tok)
{
    em_sched_backend be;
    fake *f = fake_new(128, 8, 128, 64, &be);
    f->encoder = be.encoder = 1;
    em_sched *s = mk(&be, 64, 0, 0, tok);
    static job j[16], bad;
    em_err er = { 0 };
    fill_prompt(&bad, 10, 1, 0);
    bad.max_tokens = 4;
    CHECKF(submit(s, &bad, EM_CLASS_INTERACTIVE, &er) == EM_EINVAL && strstr(er.msg, "does not generate text"),
           "generation on an encoder: %s", er.msg);
    fill_prompt(&bad, 65, 1, 0);
    bad.pool = EM_POOL_MEAN;
    CHECKF(submit_embed(s, &bad, EM_CLASS_INTERACTIVE, &er) == EM_EINVAL && strstr(er.msg, "at most 64"),
           "65 tokens on a 64-token step: %s", er.msg);
    static uint8_t types[16][64];
    gate(f, 1);
    for (int i = 0; i < 16; i++) {
        fill_prompt(&j[i], 5 + (uint32_t)(i * 23) % 60, (uint32_t)i + 5, 0);
        j[i].pool = (em_pooling)(1 + i % 3);
        if (i % 4 == 3) {   /* a pair: its second half of type 1 */
            for (uint32_t k = 0; k < j[i].n_prompt; k++)
                types[i][k] = k >= j[i].n_prompt / 2;
            j[i].types = types[i];
        }
        CHECK(submit_embed(s, &j[i], i % 2 ? EM_CLASS_BACKGROUND : EM_CLASS_INTERACTIVE, NULL) == 0);
    }
    gate(f, 0);
    for (int i = 0; i < 16; i++) {
        finish_job(&j[i]);
        check_embed(&j[i], 1, "encoder embed");
    }
    CHECKF(f->max_batch_seen > j[0].n_prompt && f->pool_steps_max > 1, "not batched: %u rows, %u spans at most",
           f->max_batch_seen, f->pool_steps_max);
    done_with(s, f, "encoder");
}

/* Class order for embeddings, on a decoder and an encoder: an interactive
 * embed request queued behind a background bulk job is done first, and
 * the bulk job's vectors are still right. */
static void test_embed_classes(em_tokenizer *tok)
{
    for (int enc = 0; enc < 2; enc++) {
        em_sched_backend be;
        fake *f = fake_new(256, 8, 512, 64, &be);
        f->encoder = be.encoder = enc;
        em_sched *s = mk(&be, 64, 60000, 0, tok);
        static job bulk[12], ia;
        gate(f, 1);
        for (int i = 0; i < 12; i++) {
            fill_prompt(&bulk[i], 60, 200 + (uint32_t)i, 0);
            bulk[i].pool = EM_POOL_MEAN;
            CHECK(submit_embed(s, &bulk[i], EM_CLASS_BACKGROUND, NULL) == 0);
        }
        usleep(20000);   /* the first step is planned (the gate holds it) */
        fill_prompt(&ia, 60, 300, 0);
        ia.pool = EM_POOL_CLS;
        CHECK(submit_embed(s, &ia, EM_CLASS_INTERACTIVE, NULL) == 0);
        gate(f, 0);
        finish_job(&ia);
        int after = 0;
        for (int i = 0; i < 12; i++) {
            finish_job(&bulk[i]);
            check_embed(&bulk[i], enc, "bulk embed");
            after += bulk[i].m.t_end > ia.m.t_end;
        }
        check_embed(&ia, enc, "interactive embed");
        /* the gated first step held a background sequence or two; the rest came after */
        CHECKF(after >= 9, "%s: only %d of 12 background embeddings ended after the interactive one",
               enc ? "encoder" : "decoder", after);
        done_with(s, f, "embed classes");
    }
}

int main(void)
{
    em_tokenizer *tok = make_tokenizer();
    CHECK(tok != NULL);
    if (!tok)
        return test_summary("sched");
    test_concurrent(tok);
    test_priority_and_aging(tok);
    test_preemption(tok);
    test_cancel_and_limits(tok);
    test_queue_position(tok);
    test_stop_string(tok);
    test_constraint(tok);
    test_device_choice(tok);
    test_slot_preemption(tok);
    test_speculation(tok);
    test_draft_model(tok);
    test_background_step_bound(tok);
    test_background_decodes_yield(tok);
    test_busy_time(tok);
    test_device_down(tok);
    test_embed_decoder(tok);
    test_embed_encoder(tok);
    test_embed_classes(tok);
    test_random(tok);
    em_tokenizer_destroy(tok);
    free(vocab_mem);
    return test_summary("sched");
}
