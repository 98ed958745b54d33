/* sched_fake.c — the fake world the scheduler's tests (test_sched.c,
 * test_sched_embed.c) run in, no GPU: a small SPM vocabulary built in
 * memory, a fake model and backend that keeps its own KV memory (see
 * sched_fake.h for what it computes), what a request yields computed alone,
 * and the helpers that submit, drain and check a test's requests. */
#include "tests/unit/sched_fake.h"

#include <unistd.h>

#include "core/gpu/kcheck.h"
#include "core/gpu/topk.h"
#include "core/model/gguf.h"
#include "tests/common/testutil.h"

/* ---- a small SPM vocabulary, built in memory ---------------------------------- */

static char *vocab_mem;
static size_t vocab_len;

/* The FAKE_V tokens as a GGUF file in memory (vocab_mem) and its tokenizer
 * (the caller's); NULL, said on stderr, if it fails. */
static em_tokenizer *make_tokenizer(void)
{
    em_gguf_writer *w = NULL;
    em_gguf_writer_create(32, &w, NULL);
    const char *toks[FAKE_V];
    char buf[FAKE_V][16];
    float scores[FAKE_V];
    int32_t types[FAKE_V];
    for (int i = 0; i < FAKE_V; i++) {
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
    em_gguf_w_arr_str(w, "tokenizer.ggml.tokens", toks, FAKE_V);
    em_gguf_w_arr(w, "tokenizer.ggml.scores", EM_GGUF_F32, scores, FAKE_V);
    em_gguf_w_arr(w, "tokenizer.ggml.token_type", EM_GGUF_I32, types, FAKE_V);
    em_gguf_w_u32(w, "tokenizer.ggml.bos_token_id", 1);
    em_gguf_w_u32(w, "tokenizer.ggml.eos_token_id", FAKE_EOS);
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

/* Destroy t and the memory its vocabulary was built in. */
static void free_tokenizer(em_tokenizer *t)
{
    em_tokenizer_destroy(t);
    free(vocab_mem);
    vocab_mem = NULL;
    vocab_len = 0;
}

int sched_run(const char *name, void (*const *tests)(em_tokenizer *tok), size_t n)
{
    em_tokenizer *tok = make_tokenizer();
    CHECK(tok != NULL);
    for (size_t i = 0; tok && i < n; i++)
        tests[i](tok);
    free_tokenizer(tok);
    return test_summary(name);
}

/* ---- the fake model -------------------------------------------------------------- */

static uint32_t fake_next(uint64_t h)
{
    if (h % 97 == 0)
        return FAKE_EOS;
    return 259 + (uint32_t)(h % 41);     /* a word token */
}

uint64_t fake_mix(uint64_t h, int32_t t)
{
    return (h ^ (uint64_t)(uint32_t)t) * 0x100000001b3ull;
}

/* A hidden state [FAKE_FE] from a hash. */
void fake_hidden(uint64_t h, float *out)
{
    for (int d = 0; d < FAKE_FE; d++) {
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
                h = fake_mix(h, b->tokens[i]);
        h = fake_mix(fake_mix(h, b->pos[j]), b->types ? b->types[j] : 0);
    } else {
        const int32_t *t = b->tables[b->seq[j]];
        for (int32_t p = 0; p <= b->pos[j]; p++)
            h = fake_mix(h, f->mem[(size_t)t[p / EM_KV_BLOCK] * EM_KV_BLOCK + p % EM_KV_BLOCK]);
    }
    fake_hidden(h, out);
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
        float *o = f->pooled + (size_t)k * FAKE_FE, hv[FAKE_FE];
        memset(o, 0, FAKE_FE * sizeof *o);
        for (int32_t j = b->pool[2 * k]; j < b->pool[2 * k] + b->pool[2 * k + 1]; j++) {
            row_hidden(f, b, (uint32_t)j, hv);
            for (int d = 0; d < FAKE_FE; d++)
                o[d] += hv[d];
            f->pooled_rows++;
        }
    }
    for (uint32_t r = 0; r < b->n_logits; r++) {
        uint32_t i = (uint32_t)b->logit_rows[r];
        const int32_t *t = b->tables[b->seq[i]];
        uint64_t h = 0xcbf29ce484222325ull;
        for (int32_t p = f->local ? b->pos[i] : 0; p <= b->pos[i]; p++)
            h = fake_mix(h, f->mem[(size_t)t[p / EM_KV_BLOCK] * EM_KV_BLOCK + p % EM_KV_BLOCK]);
        if (f->local && fake_next(h) == FAKE_EOS)
            h++;   /* repetitive text that goes on */
        if (f->wrong && b->pos[i] % 3 == 0)
            h = fake_mix(h, 7);
        float *lg = logits + (size_t)r * FAKE_V;
        for (int v = 0; v < FAKE_V; v++)
            lg[v] = 0;
        lg[fake_next(h)] = 12.0f;
    }
    return 0;
}

static int fake_step_top(void *ctx, const em_sched_batch *b, const em_sample_steer *steer, em_sample_top *top,
                         em_err *err)
{
    fake *f = ctx;
    int rc = fake_step(ctx, b, f->rows, err);
    for (uint32_t r = 0; !rc && r < b->n_logits; r++) {
        float *row = f->rows + (size_t)r * FAKE_V;
        em_topk_steer_ref(row, FAKE_V, &steer[r]);
        em_topk_ref(row, FAKE_V, steer[r].temp, &top[r], f->ids[r], f->scratch);
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
    return f->rows + (size_t)i * FAKE_V;
}

static int fake_step_counted(void *ctx, const em_sched_batch *b, float *logits, em_err *err)
{
    ((fake *)ctx)->plain_steps++;
    return fake_step(ctx, b, logits, err);
}

static const float *fake_pooled(void *ctx, uint32_t i)
{
    return ((fake *)ctx)->pooled + (size_t)i * FAKE_FE;
}

fake *fake_new(uint32_t n_blocks, uint32_t max_seqs, uint32_t max_ctx, uint32_t max_tokens,
               em_sched_backend *be)
{
    fake *f = calloc(1, sizeof *f);
    f->n_blocks = n_blocks;
    f->max_seqs = max_seqs;
    f->max_ctx = max_ctx;
    f->max_tokens = max_tokens;
    f->mem = calloc((size_t)n_blocks * EM_KV_BLOCK, sizeof *f->mem);
    f->pooled = calloc((size_t)max_seqs * FAKE_FE, sizeof *f->pooled);
    pthread_mutex_init(&f->gate_mu, NULL);
    pthread_cond_init(&f->gate_cv, NULL);
    *be = (em_sched_backend){ .ctx = f, .n_vocab = FAKE_V, .max_tokens = max_tokens, .max_logits = max_seqs,
                              .max_seqs = max_seqs, .max_ctx = max_ctx, .n_blocks = n_blocks,
                              .copy = fake_copy, .step = fake_step, .destroy = NULL,
                              .pooled = fake_pooled, .n_embd = FAKE_FE };
    return f;
}

/* The fake with the device's choosing: at most max_adj adjustments a step. */
void fake_with_top(fake *f, em_sched_backend *be, uint32_t max_adj)
{
    f->rows = calloc((size_t)f->max_seqs * FAKE_V, sizeof *f->rows);
    f->scratch = malloc((size_t)FAKE_V * 8);
    be->step_top = fake_step_top;
    be->row = fake_row;
    be->max_adj = max_adj;
    be->step = fake_step_counted;
}

void fake_free(fake *f)
{
    free(f->rows);
    free(f->scratch);
    free(f->mem);
    free(f->pooled);
    pthread_mutex_destroy(&f->gate_mu);
    pthread_cond_destroy(&f->gate_cv);
    free(f);
}

void fake_gate(fake *f, int closed)
{
    pthread_mutex_lock(&f->gate_mu);
    f->gate_closed = closed;
    pthread_cond_broadcast(&f->gate_cv);
    pthread_mutex_unlock(&f->gate_mu);
}

/* What a greedy request produces alone: ids until max_tokens, EOS or the context. */
uint32_t fake_alone(const int32_t *prompt, uint32_t n, uint32_t max_tokens, uint32_t max_ctx,
                    int32_t *out, em_finish *fin)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint32_t i = 0; i < n; i++)
        h = fake_mix(h, prompt[i]);
    uint32_t k = 0;
    *fin = EM_FINISH_LENGTH;
    while (k < max_tokens && n + k < max_ctx) {
        uint32_t t = fake_next(h);
        if (t == FAKE_EOS) {
            *fin = EM_FINISH_STOP;
            break;
        }
        out[k++] = (int32_t)t;
        h = fake_mix(h, (int32_t)t);
    }
    return k;
}

/* ---- helpers ------------------------------------------------------------------------ */

int job_submit(em_sched *s, job *j, em_class cls, em_err *e)
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
int job_submit_embed(em_sched *s, job *j, em_class cls, em_err *e)
{
    em_req_params p = { .prompt = j->prompt, .n_prompt = j->n_prompt, .cls = cls, .embed = 1,
                        .pooling = j->pool, .types = j->types };
    j->n_got = 0;
    j->done = 0;
    return em_sched_submit(s, &p, &j->r, NULL, e);
}

/* Drain j's events; returns 1 once DONE was seen. */
int job_pump(job *j, int timeout_ms)
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
            if (ev.embedding && ev.n_embd == FAKE_FE)
                memcpy(j->emb, ev.embedding, sizeof j->emb);
            snprintf(j->why, sizeof j->why, "%s", ev.error);
        }
        em_event_clear(&ev);
    }
    return j->done;
}

/* Drain j until DONE: bounded (10 minutes: a hang, not a speed limit);
 * 1 when it came. */
int job_pump_done(job *j)
{
    for (int i = 0; i < 600 && !j->done; i++)
        job_pump(j, 1000);
    CHECKF(j->done, "no DONE within 600 s (%u tokens so far)", j->n_got);
    return j->done;
}

/* Wait (bounded as pump_done) until j has n tokens or is done. */
void job_pump_tokens(job *j, uint32_t n)
{
    for (int i = 0; i < 600000 && !job_pump(j, 0) && j->n_got < n; i++)
        usleep(1000);
    CHECKF(j->done || j->n_got >= n, "fewer than %u tokens within 600 s (%u)", n, j->n_got);
}

void job_finish(job *j)
{
    job_pump_done(j);
    em_request_release(j->r);
    j->r = NULL;
}

void job_check_alone(const job *j, uint32_t max_ctx, const char *what)
{
    int32_t ref[400];
    em_finish fin;
    uint32_t n = fake_alone(j->prompt, j->n_prompt, j->max_tokens ? j->max_tokens : 400, max_ctx, ref, &fin);
    CHECKF(j->n_got == n && memcmp(j->got, ref, n * sizeof *ref) == 0 && j->finish == fin,
           "%s: %u tokens (finish %s), alone %u (finish %s)", what, j->n_got, em_finish_name(j->finish),
           n, em_finish_name(fin));
}

em_sched *sched_mk_bg(em_sched_backend *be, uint32_t step_tokens, double aging_ms, uint32_t max_wait,
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

em_sched *sched_mk(em_sched_backend *be, uint32_t step_tokens, double aging_ms, uint32_t max_wait,
                   em_tokenizer *tok)
{
    return sched_mk_bg(be, step_tokens, aging_ms, max_wait, 0, tok);
}

void job_fill(job *j, uint32_t n, uint32_t seed, uint32_t shared_prefix)
{
    for (uint32_t i = 0; i < n; i++)
        j->prompt[i] = (int32_t)(i < shared_prefix ? 3 + (i * 7) % 250 : 3 + (seed * 131 + i * 17) % 250);
    j->n_prompt = n;
}

void sched_no_leak(em_sched *s, const char *what)
{
    em_sched_stats st;
    em_sched_get_stats(s, &st);
    CHECKF(st.kv.used == 0 && st.kv.free + st.kv.cached == st.kv.n_blocks,
           "%s: blocks used %u free %u cached %u of %u", what, st.kv.used, st.kv.free, st.kv.cached,
           st.kv.n_blocks);
}
