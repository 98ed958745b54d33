/* test_sched.c — the scheduler's planner over a fake backend (no GPU;
 * sched_fake.h: a request's output must equal it computed alone). Directed
 * tests cover priority order, aging, preemption and resume, cancellation,
 * the queue bound, queue positions, requests that cannot fit, stop strings
 * and the busy time and rates of em_sched_get_stats, a constraint (as a
 * grammar is: only its tokens, end-of-text only where it may end, stop
 * when done, a dead end an error, its state freed once), choosing from the
 * device's summaries giving the host's tokens (also when a step's
 * adjustments overflow to the host), a device that fails and cannot be
 * rebuilt at once (down: requests fail naming it, then back by itself); a
 * randomized test runs hundreds of scenarios and checks that every request
 * finishes exactly once, correctly, and that no KV block leaks. Embed
 * requests are test_sched_embed.c's. */
#include <time.h>
#include <unistd.h>

#include "tests/common/testutil.h"
#include "tests/unit/sched_fake.h"

/* ---- directed tests ------------------------------------------------------------------------ */

static void test_concurrent(em_tokenizer *tok)
{
    em_sched_backend be;
    fake *f = fake_new(256, 16, 512, 64, &be);
    em_sched *s = sched_mk(&be, 64, 0, 0, tok);
    static job jobs[32];
    for (int i = 0; i < 32; i++) {
        job_fill(&jobs[i], 5 + (uint32_t)(i * 37) % 120, (uint32_t)i, i % 3 == 0 ? 40 : 0);
        jobs[i].max_tokens = 10 + (uint32_t)(i * 13) % 60;
        em_err e = { 0 };
        CHECKF(job_submit(s, &jobs[i], i % 2 ? EM_CLASS_BACKGROUND : EM_CLASS_INTERACTIVE, &e) == 0, "%s",
               e.msg);
    }
    for (int i = 0; i < 32; i++) {
        job_finish(&jobs[i]);
        job_check_alone(&jobs[i], 512, "concurrent");
    }
    em_sched_drain(s);
    sched_no_leak(s, "concurrent");
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
        fake_gate(f, 1);
        em_sched *s = sched_mk(&be, 32, aged ? 1.0 : 60000, 0, tok);
        static job bg, ia, first;
        job_fill(&first, 8, 99, 0);
        first.max_tokens = 2;
        CHECK(job_submit(s, &first, EM_CLASS_BACKGROUND, NULL) == 0);   /* occupies the gated step */
        usleep(20000);
        job_fill(&bg, 30, 1, 0);
        bg.max_tokens = 5;
        job_fill(&ia, 30, 2, 0);
        ia.max_tokens = 5;
        CHECK(job_submit(s, &bg, EM_CLASS_BACKGROUND, NULL) == 0);
        CHECK(job_submit(s, &ia, EM_CLASS_INTERACTIVE, NULL) == 0);
        usleep(20000);   /* with aging 1 ms the background request is now aged */
        fake_gate(f, 0);
        job_finish(&first);
        job_finish(&bg);
        job_finish(&ia);
        /* both may be admitted in one step, but the first in line gets the
         * step's budget and so its first token a step earlier */
        if (aged)
            CHECKF(bg.m.t_first < ia.m.t_first, "aged background request not served first");
        else
            CHECKF(ia.m.t_first < bg.m.t_first, "interactive request not served first");
        job_check_alone(&bg, 512, "bg");
        job_check_alone(&ia, 512, "ia");
        em_sched_drain(s);
        sched_no_leak(s, "priority");
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
    em_sched *s = sched_mk(&be, 64, 60000, 0, tok);
    static job b1, b2, ia;
    job_fill(&b1, 100, 11, 0);
    b1.max_tokens = 40;
    job_fill(&b2, 100, 12, 0);
    b2.max_tokens = 40;
    CHECK(job_submit(s, &b1, EM_CLASS_BACKGROUND, NULL) == 0);
    CHECK(job_submit(s, &b2, EM_CLASS_BACKGROUND, NULL) == 0);
    job_pump_tokens(&b2, 3);    /* both are decoding */
    job_fill(&ia, 120, 13, 0);
    ia.max_tokens = 10;
    CHECK(job_submit(s, &ia, EM_CLASS_INTERACTIVE, NULL) == 0);
    job_finish(&ia);
    job_finish(&b1);
    job_finish(&b2);
    job_check_alone(&ia, 512, "interactive after preemption");
    job_check_alone(&b1, 512, "background 1 resumed");
    job_check_alone(&b2, 512, "background 2 resumed");
    CHECKF(b1.m.preemptions + b2.m.preemptions >= 1, "no background request was preempted");
    CHECK(ia.m.preemptions == 0);
    em_sched_drain(s);
    sched_no_leak(s, "preemption");
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
    em_sched *s = sched_mk(&be, 64, 60000, 0, tok);
    static job b1, b2, ia;
    job_fill(&b1, 20, 21, 0);
    b1.max_tokens = 200;
    job_fill(&b2, 20, 22, 0);
    b2.max_tokens = 200;
    CHECK(job_submit(s, &b1, EM_CLASS_BACKGROUND, NULL) == 0);
    CHECK(job_submit(s, &b2, EM_CLASS_BACKGROUND, NULL) == 0);
    job_pump_tokens(&b2, 3);
    job_fill(&ia, 20, 23, 0);
    ia.max_tokens = 5;
    CHECK(job_submit(s, &ia, EM_CLASS_INTERACTIVE, NULL) == 0);
    job_finish(&ia);
    job_pump(&b1, 0);
    job_pump(&b2, 0);
    CHECKF(!b1.done && !b2.done, "the interactive request waited for background work to end");
    job_finish(&b1);
    job_finish(&b2);
    job_check_alone(&ia, 512, "interactive in a taken slot");
    job_check_alone(&b1, 512, "background 1");
    job_check_alone(&b2, 512, "background 2");
    CHECKF(b1.m.preemptions + b2.m.preemptions >= 1, "no background request gave up its slot");
    em_sched_drain(s);
    sched_no_leak(s, "slot preemption");
    em_sched_destroy(s);
    fake_free(f);
}

static void test_cancel_and_limits(em_tokenizer *tok)
{
    em_sched_backend be;
    fake *f = fake_new(64, 4, 256, 16, &be);
    f->delay_us = 2000;
    em_sched *s = sched_mk(&be, 16, 60000, 2, tok);
    static job a, q[4];
    /* a prompt whose greedy continuation runs to the context without EOS */
    for (uint32_t sd = 0;; sd++) {
        int32_t ref[400];
        em_finish fin;
        job_fill(&a, 40, sd, 0);
        if (fake_alone(a.prompt, 40, 400, 256, ref, &fin) == 216 && fin == EM_FINISH_LENGTH)
            break;
    }
    a.max_tokens = 0;                     /* until the context */
    CHECK(job_submit(s, &a, EM_CLASS_INTERACTIVE, NULL) == 0);
    job_pump_tokens(&a, 2);
    em_sched_stats st;
    em_sched_get_stats(s, &st);
    CHECK(st.kv.used > 0);
    em_request_cancel(a.r);
    job_finish(&a);
    CHECKF(a.finish == EM_FINISH_CANCELLED, "finish %s after %u tokens", em_finish_name(a.finish), a.n_got);
    CHECKF(a.n_got < 20, "cancel took %u tokens", a.n_got);
    em_sched_drain(s);
    sched_no_leak(s, "cancel");
    f->delay_us = 0;

    /* queue bound: the gate holds the step, two may wait, the third is busy */
    fake_gate(f, 1);
    for (int i = 0; i < 3; i++) {
        job_fill(&q[i], 10, (uint32_t)(20 + i), 0);
        q[i].max_tokens = 3;
    }
    CHECK(job_submit(s, &q[0], EM_CLASS_BACKGROUND, NULL) == 0);
    usleep(20000);   /* q[0] is in the gated step, no longer waiting */
    CHECK(job_submit(s, &q[1], EM_CLASS_BACKGROUND, NULL) == 0);
    CHECK(job_submit(s, &q[2], EM_CLASS_BACKGROUND, NULL) == 0);
    em_req_params p = { .prompt = q[3].prompt, .n_prompt = 10, .cls = EM_CLASS_BACKGROUND, .max_tokens = 3 };
    p.sample.top_p = 1;
    job_fill(&q[3], 10, 23, 0);
    em_request *r = NULL;
    uint32_t retry = 0;
    em_err e = { 0 };
    CHECK(em_sched_submit(s, &p, &r, &retry, &e) == EM_EBUSY && retry > 0 && strstr(e.msg, "busy") && !r);
    /* the interactive queue is separate */
    p.cls = EM_CLASS_INTERACTIVE;
    CHECK(em_sched_submit(s, &p, &r, NULL, &e) == 0);
    fake_gate(f, 0);
    for (int i = 0; i < 3; i++)
        job_finish(&q[i]);
    job tmp = { .r = r };
    job_finish(&tmp);
    CHECK(tmp.finish == EM_FINISH_LENGTH);

    /* requests that can never fit */
    p.n_prompt = 10;
    p.max_tokens = 300;
    CHECK(em_sched_submit(s, &p, &r, NULL, &e) == EM_ERANGE && strstr(e.msg, "context"));
    int32_t bad = FAKE_V + 5;
    em_req_params pb = { .prompt = &bad, .n_prompt = 1, .max_tokens = 1 };
    CHECK(em_sched_submit(s, &pb, &r, NULL, &e) == EM_EINVAL);
    pb.n_prompt = 0;
    CHECK(em_sched_submit(s, &pb, &r, NULL, &e) == EM_EINVAL);
    em_sched_drain(s);
    sched_no_leak(s, "limits");
    em_sched_destroy(s);
    fake_free(f);

    /* a pool smaller than one request */
    f = fake_new(4, 2, 256, 16, &be);
    s = sched_mk(&be, 16, 60000, 0, tok);
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
    fake_gate(f, 1);
    em_sched *s = sched_mk(&be, 32, 60000, 0, tok);
    static job first, ia[3], bg;
    job_fill(&first, 8, 40, 0);
    first.max_tokens = 2;
    CHECK(job_submit(s, &first, EM_CLASS_INTERACTIVE, NULL) == 0);
    for (int i = 0; i < 200 && em_sched_queue_position(s, first.r) != 0; i++)
        usleep(1000);   /* taken into the gated step */
    CHECK(em_sched_queue_position(s, first.r) == 0);
    for (int i = 0; i < 3; i++) {
        job_fill(&ia[i], 10, (uint32_t)(41 + i), 0);
        ia[i].max_tokens = 3;
        CHECK(job_submit(s, &ia[i], EM_CLASS_INTERACTIVE, NULL) == 0);
    }
    job_fill(&bg, 10, 44, 0);
    bg.max_tokens = 3;
    CHECK(job_submit(s, &bg, EM_CLASS_BACKGROUND, NULL) == 0);
    for (int i = 0; i < 3; i++)
        CHECKF(em_sched_queue_position(s, ia[i].r) == (uint32_t)i + 1, "interactive %d at %u", i,
               em_sched_queue_position(s, ia[i].r));
    CHECK(em_sched_queue_position(s, bg.r) == 1);   /* its own class's queue */
    fake_gate(f, 0);
    job *all[] = { &first, &ia[0], &ia[1], &ia[2], &bg };
    for (int i = 0; i < 5; i++) {
        job_pump_done(all[i]);
        CHECK(em_sched_queue_position(s, all[i]->r) == 0);
        job_finish(all[i]);
    }
    em_sched_drain(s);
    em_sched_destroy(s);
    fake_free(f);
}

static void test_stop_string(em_tokenizer *tok)
{
    em_sched_backend be;
    fake *f = fake_new(64, 2, 256, 32, &be);
    em_sched *s = sched_mk(&be, 32, 60000, 0, tok);
    job j;
    job_fill(&j, 12, 7, 0);
    int32_t ref[400];
    em_finish fin;
    uint32_t n = fake_alone(j.prompt, 12, 20, 256, ref, &fin);
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
    em_sched *s = sched_mk(&be, 32, 60000, 0, tok);
    job j;
    job_fill(&j, 12, 3, 0);
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
    s = sched_mk(&be, 32, 60000, 0, tok);
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
        em_sched *s = sched_mk(&be, 64, 60000, 0, tok);
        em_logit_bias bias[2] = { { 270, 4 }, { 280, -100 } };
        int freed = 0;
        toy_con con = { .lo = 269, .hi = 290, .min_len = 4, .max_len = 12, .freed = &freed };
        em_request *r[NR];
        job j[NR];
        for (int q = 0; q < NR; q++) {
            job_fill(&j[q], 10 + q, 20 + q, 0);
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
            em_sched *s = sched_mk(&be, 64, 60000, 0, tok);
            em_request *r[4];
            job j[4];
            for (int q = 0; q < 4; q++) {
                job_fill(&j[q], 8 + q, 40 + q, 0);
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
            sched_no_leak(s, "speculation");
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
        job_fill(&j[q], 8 + 20 * q, 40 + q, q == 3 ? 48 : 0);
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
    sched_no_leak(s, "draft model");
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
    dbe.n_vocab = FAKE_V + 1;
    em_sched_opts o;
    em_sched_opts_init(&o);
    o.draft = &dbe;
    em_sched *s = NULL;
    em_err e = { 0 };
    CHECK(em_sched_create(&o, &be, tok, &s, &e) == EM_EINVAL && !s && strstr(e.msg, "vocabulary"));
    s = sched_mk(&be, 64, 0, 0, tok);
    job j;
    job_fill(&j, 8, 1, 0);
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
        em_sched *s = sched_mk(&be, step, 1 + (double)(test_rand(&seed) % 50), 0, tok);
        static job jobs[24];
        int n = 4 + (int)(test_rand(&seed) % 20);
        for (int i = 0; i < n; i++) {
            job *j = &jobs[i];
            uint32_t len = 1 + (uint32_t)(test_rand(&seed) % 150);
            job_fill(j, len, (uint32_t)(test_rand(&seed) % 5), (uint32_t)(test_rand(&seed) % 2) * 48);
            j->max_tokens = 1 + (uint32_t)(test_rand(&seed) % 60);
            if ((j->n_prompt + j->max_tokens + 15) / 16 > blocks)
                j->max_tokens = 1;
            em_err e = { 0 };
            int rc = job_submit(s, j, test_rand(&seed) % 2 ? EM_CLASS_BACKGROUND : EM_CLASS_INTERACTIVE, &e);
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
            job_finish(j);
            requests++;
            if (!cancel && j->finish != EM_FINISH_ERROR)
                job_check_alone(j, 256, "random");
            CHECKF(j->finish != EM_FINISH_ERROR, "scenario %d request %d failed", sc, i);
        }
        em_sched_drain(s);
        sched_no_leak(s, "random");
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
        em_sched *s = sched_mk_bg(&be, 128, 0, 0, bounded ? 20.0 : 0, tok);
        static job bg[4], ia;
        for (int i = 0; i < 4; i++) {
            job_fill(&bg[i], 380, (uint32_t)i + 7, 0);
            bg[i].max_tokens = 20;
            CHECK(job_submit(s, &bg[i], EM_CLASS_BACKGROUND, NULL) == 0);
        }
        usleep(60000);
        for (uint32_t i = 0; i < 100; i++)
            ia.prompt[i] = (int32_t)(259 + (i * 7) % 41);
        ia.n_prompt = 100;
        ia.max_tokens = 5;
        CHECK(job_submit(s, &ia, EM_CLASS_INTERACTIVE, NULL) == 0);
        job_finish(&ia);
        job_check_alone(&ia, 512, "bounded step");
        for (int i = 0; i < 4; i++) {
            job_finish(&bg[i]);
            job_check_alone(&bg[i], 512, "bounded step");
        }
        em_sched_drain(s);
        sched_no_leak(s, "bounded step");
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
        em_sched *s = sched_mk_bg(&be, 128, 0, 0, 0, tok);
        static job bg[8], ia;
        for (int i = 0; i < 8; i++) {
            job_fill(&bg[i], 8, (uint32_t)i + 3, 0);
            bg[i].max_tokens = 60;
            CHECK(job_submit(s, &bg[i], EM_CLASS_BACKGROUND, NULL) == 0);
        }
        for (int i = 0; i < 2000 && f->steps < 12; i++)   /* decoding, with a history of step costs */
            usleep(1000);
        for (uint32_t i = 0; i < 4; i++)
            ia.prompt[i] = (int32_t)(259 + (i * 7) % 41);
        ia.n_prompt = 4;
        ia.max_tokens = 3;
        CHECK(job_submit(s, &ia, EM_CLASS_INTERACTIVE, NULL) == 0);
        job_finish(&ia);
        job_check_alone(&ia, 512, "decodes yield");
        for (int i = 0; i < 8; i++) {
            job_finish(&bg[i]);
            job_check_alone(&bg[i], 512, "decodes yield");
        }
        em_sched_drain(s);
        sched_no_leak(s, "decodes yield");
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
    em_sched *s = sched_mk(&be, 64, 0, 0, tok);
    em_sched_stats st, st2;
    em_sched_get_stats(s, &st);
    CHECK(st.busy_s == 0 && st.tokens_per_s == 0 && st.busy_ratio == 0);
    static job j;
    for (uint32_t seed = 0; seed < 4; seed++) {   /* > 64 steps in all: the ring wraps */
        job_fill(&j, 20, seed, 0);
        j.max_tokens = 100;
        CHECK(job_submit(s, &j, EM_CLASS_INTERACTIVE, NULL) == 0);
        job_finish(&j);
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
    em_sched *s = sched_mk(&be, 64, 0, 0, tok);
    em_err e = { 0 };
    job a = { .max_tokens = 10 };
    job_fill(&a, 5, 1, 0);
    CHECK(job_submit(s, &a, EM_CLASS_INTERACTIVE, &e) == 0);
    job_finish(&a);
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
    job_fill(&b, 5, 2, 0);
    CHECK(job_submit(s, &b, EM_CLASS_BACKGROUND, &e) == 0);
    job_finish(&b);
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
    job_fill(&c, 5, 3, 0);
    CHECK(job_submit(s, &c, EM_CLASS_INTERACTIVE, &e) == 0);
    job_finish(&c);
    job_check_alone(&c, 256, "after the device came back");
    em_sched_drain(s);
    sched_no_leak(s, "device down");
    em_sched_destroy(s);
    fake_free(f);
}

int main(void)
{
    static void (*const tests[])(em_tokenizer *tok) = {
        test_concurrent, test_priority_and_aging, test_preemption, test_cancel_and_limits, test_queue_position,
        test_stop_string, test_constraint, test_device_choice, test_slot_preemption, test_speculation,
        test_draft_model, test_background_step_bound, test_background_decodes_yield, test_busy_time,
        test_device_down, test_random
    };
    return sched_run("sched", tests, sizeof tests / sizeof *tests);
}
