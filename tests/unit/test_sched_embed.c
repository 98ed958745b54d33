/* test_sched_embed.c — the scheduler's embed requests over the fake backend
 * of sched_fake.h (no GPU), each vector against the fake's hidden states
 * pooled alone: on a decoder (chunked, pooled spans per chunk, no prefix
 * cache, batched with generation, recomputed after preemption), on an
 * encoder (each sequence whole in a step, token types, refusals), and
 * their class order on both. */
#include <math.h>
#include <pthread.h>
#include <unistd.h>

#include "tests/common/testutil.h"
#include "tests/unit/sched_fake.h"

/* What j's embedding is, computed alone: the fake's hidden states of its
 * prompt pooled as asked (a decoder's from the prefix up to each position,
 * an encoder's from the whole sequence). */
static void embed_ref(const job *j, int encoder, float *out)
{
    double acc[FAKE_FE] = { 0 };
    uint64_t whole = 0xcbf29ce484222325ull, pre = 0xcbf29ce484222325ull;
    for (uint32_t i = 0; i < j->n_prompt; i++)
        whole = fake_mix(whole, j->prompt[i]);
    uint32_t n = 0;
    for (uint32_t p = 0; p < j->n_prompt; p++) {
        pre = fake_mix(pre, j->prompt[p]);
        int take = j->pool == EM_POOL_MEAN || j->pool == EM_POOL_NONE ? 1
                 : j->pool == EM_POOL_LAST ? p + 1 == j->n_prompt : p == 0;
        if (!take)
            continue;
        float hv[FAKE_FE];
        fake_hidden(encoder ? fake_mix(fake_mix(whole, (int32_t)p), j->types ? j->types[p] : 0) : pre, hv);
        for (int d = 0; d < FAKE_FE; d++)
            acc[d] += hv[d];
        n++;
    }
    for (int d = 0; d < FAKE_FE; d++)
        out[d] = (float)(acc[d] / n);
}

static void check_embed(const job *j, int encoder, const char *what)
{
    float ref[FAKE_FE];
    embed_ref(j, encoder, ref);
    double err = 0;
    for (int d = 0; d < FAKE_FE; d++)
        err = fmax(err, fabs((double)j->emb[d] - ref[d]));
    CHECKF(j->finish == EM_FINISH_STOP && j->n_emb == FAKE_FE && err < 1e-5, "%s: finish %s (%s), %u dims, error %g",
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
    sched_no_leak(s, what);
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
    em_sched *s = sched_mk(&be, 64, 0, 0, tok);
    static job e[6], g[4];
    const em_pooling pools[6] = { EM_POOL_MEAN, EM_POOL_CLS, EM_POOL_LAST, EM_POOL_MEAN, EM_POOL_NONE, EM_POOL_RANK };
    uint64_t rows_expected = 0;
    for (int i = 0; i < 6; i++) {   /* two with the same prompt: the second finds no cached prefix */
        job_fill(&e[i], 150 - (uint32_t)i * 7 * (i != 3), i == 3 ? 0 : (uint32_t)i, 0);
        e[i].pool = pools[i];
        rows_expected += pools[i] == EM_POOL_MEAN || pools[i] == EM_POOL_NONE ? e[i].n_prompt : 1;
        em_err er = { 0 };
        CHECKF(job_submit_embed(s, &e[i], i % 2 ? EM_CLASS_BACKGROUND : EM_CLASS_INTERACTIVE, &er) == 0, "%s", er.msg);
        if (i == 2)
            job_finish(&e[0]);   /* (e[3] repeats e[0]'s prompt after it ended) */
    }
    for (int i = 1; i < 6; i++)
        job_finish(&e[i]);
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
        job_fill(&g[i], 40 + (uint32_t)i * 9, 50 + (uint32_t)i, 0);
        g[i].max_tokens = 12;
        CHECK(job_submit(s, &g[i], i % 2 ? EM_CLASS_BACKGROUND : EM_CLASS_INTERACTIVE, NULL) == 0);
        CHECK(job_submit_embed(s, &e[i], i % 2 ? EM_CLASS_INTERACTIVE : EM_CLASS_BACKGROUND, NULL) == 0);
    }
    for (int i = 0; i < 4; i++) {
        job_finish(&g[i]);
        job_finish(&e[i]);
        job_check_alone(&g[i], 512, "generated beside embeddings");
        check_embed(&e[i], 0, "embed beside generation");
    }
    CHECK(f->top_steps > 0 && f->max_batch_seen > 1);
    em_sched_drain(s);
    sched_no_leak(s, "decoder embeddings");
    /* no pooled rows: refused */
    em_sched_destroy(s);
    be.pooled = NULL;
    s = sched_mk(&be, 64, 0, 0, tok);
    em_err er = { 0 };
    CHECKF(job_submit_embed(s, &e[0], EM_CLASS_INTERACTIVE, &er) == EM_EINVAL && strstr(er.msg, "embeddings"), "%s",
           er.msg);
    em_sched_destroy(s);
    fake_free(f);

    /* preempted mid-prompt: 28 blocks, a background embed of 400 tokens
     * (25 blocks) holds 24 when an interactive request needing 13 comes */
    f = fake_new(28, 4, 512, 64, &be);
    f->close_after = 5;   /* the sixth step (positions 320..383) waits */
    s = sched_mk(&be, 64, 60000, 0, tok);
    static job big, ia;
    job_fill(&big, 400, 77, 0);
    big.pool = EM_POOL_MEAN;
    CHECK(job_submit_embed(s, &big, EM_CLASS_BACKGROUND, NULL) == 0);
    for (int i = 0; i < 10000; i++) {
        pthread_mutex_lock(&f->gate_mu);
        int held = f->gate_closed;
        pthread_mutex_unlock(&f->gate_mu);
        if (held)
            break;
        usleep(1000);
    }
    job_fill(&ia, 200, 78, 0);
    ia.max_tokens = 10;
    CHECK(job_submit(s, &ia, EM_CLASS_INTERACTIVE, NULL) == 0);
    usleep(20000);
    f->close_after = 0;
    fake_gate(f, 0);
    job_finish(&ia);
    job_finish(&big);
    job_check_alone(&ia, 512, "interactive past an embedding");
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
    em_sched *s = sched_mk(&be, 64, 0, 0, tok);
    static job j[16], bad;
    em_err er = { 0 };
    job_fill(&bad, 10, 1, 0);
    bad.max_tokens = 4;
    CHECKF(job_submit(s, &bad, EM_CLASS_INTERACTIVE, &er) == EM_EINVAL && strstr(er.msg, "does not generate text"),
           "generation on an encoder: %s", er.msg);
    job_fill(&bad, 65, 1, 0);
    bad.pool = EM_POOL_MEAN;
    CHECKF(job_submit_embed(s, &bad, EM_CLASS_INTERACTIVE, &er) == EM_EINVAL && strstr(er.msg, "at most 64"),
           "65 tokens on a 64-token step: %s", er.msg);
    static uint8_t types[16][64];
    fake_gate(f, 1);
    for (int i = 0; i < 16; i++) {
        job_fill(&j[i], 5 + (uint32_t)(i * 23) % 60, (uint32_t)i + 5, 0);
        j[i].pool = (em_pooling)(1 + i % 3);
        if (i % 4 == 3) {   /* a pair: its second half of type 1 */
            for (uint32_t k = 0; k < j[i].n_prompt; k++)
                types[i][k] = k >= j[i].n_prompt / 2;
            j[i].types = types[i];
        }
        CHECK(job_submit_embed(s, &j[i], i % 2 ? EM_CLASS_BACKGROUND : EM_CLASS_INTERACTIVE, NULL) == 0);
    }
    fake_gate(f, 0);
    for (int i = 0; i < 16; i++) {
        job_finish(&j[i]);
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
        em_sched *s = sched_mk(&be, 64, 60000, 0, tok);
        static job bulk[12], ia;
        fake_gate(f, 1);
        for (int i = 0; i < 12; i++) {
            job_fill(&bulk[i], 60, 200 + (uint32_t)i, 0);
            bulk[i].pool = EM_POOL_MEAN;
            CHECK(job_submit_embed(s, &bulk[i], EM_CLASS_BACKGROUND, NULL) == 0);
        }
        usleep(20000);   /* the first step is planned (the gate holds it) */
        job_fill(&ia, 60, 300, 0);
        ia.pool = EM_POOL_CLS;
        CHECK(job_submit_embed(s, &ia, EM_CLASS_INTERACTIVE, NULL) == 0);
        fake_gate(f, 0);
        job_finish(&ia);
        int after = 0;
        for (int i = 0; i < 12; i++) {
            job_finish(&bulk[i]);
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
    static void (*const tests[])(em_tokenizer *tok) = {
        test_embed_decoder, test_embed_encoder, test_embed_classes
    };
    return sched_run("sched-embed", tests, sizeof tests / sizeof *tests);
}
