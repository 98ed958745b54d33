/* test_sched_gpu.c — the scheduler on the real forward pass: 32 concurrent
 * requests of mixed prompt and output lengths in both classes, some sharing
 * prompt prefixes, all complete, and each greedy output equals the same
 * request run alone (one at a time, no prefix cache) on the same model, token
 * for token: a token's computation does not depend on the batch it is in (its
 * attention path follows the token — prompt tile or decode — and decode
 * splits follow its own context length). No KV block is leaked afterwards.
 * The model must be one whose greedy output depends on the context (checked:
 * most outputs vary), else attention and KV bugs pass unseen.
 * A model with sliding-window layers (synth gemma3: a window of 16) keeps
 * their K/V in the window pool (em_kv): released as the windows move on,
 * the prefix cache finding a prefix's last window there; the alone runs
 * keep every layer in one pool for the whole context (a forward pass
 * without a window pool), so the outputs' equality checks the window pool
 * too, and no block of either pool may be leaked.
 * (After a preemption a recomputed history goes through the prefill path,
 * which rounds differently from decode; the pool here is large enough that
 * no request is preempted, and the test checks that none was.)
 * usage: test_sched_gpu MODEL (relative to the shared folder) */
#include <stdint.h>

#include "core/gpu/forward.h"
#include "core/model/model.h"
#include "core/text/tokenizer.h"
#include "scheduler/scheduler.h"
#include "tests/gpu/gpu_util.h"

#define N_REQ 32

typedef struct {
    int32_t  prompt[256];
    uint32_t n_prompt, max_tokens;
    em_class cls;
    int32_t  out[128];
    uint32_t n_out;
    em_finish finish;
    em_req_metrics m;
} req;

static em_sched *start(em_fwd *f, em_vk *vk, const em_model *m, const em_tokenizer *tok, int cache,
                       uint32_t step_tokens)
{
    em_sched_backend be;
    em_sched_backend_gpu(f, vk, em_model_hparams(m)->n_vocab, 128, 16, 16, 512, 16 * 32, &be);
    em_sched_opts o;
    em_sched_opts_init(&o);
    o.prefix_cache = cache;
    o.step_tokens = step_tokens;
    em_sched *s = NULL;
    em_err e = { 0 };
    CHECKF(em_sched_create(&o, &be, tok, &s, &e) == 0, "%s", e.msg);
    return s;
}

static em_request *submit(em_sched *s, const req *q)
{
    em_req_params p = { .prompt = q->prompt, .n_prompt = q->n_prompt, .cls = q->cls,
                        .max_tokens = q->max_tokens };
    p.sample.temp = 0;
    p.sample.top_p = 1;
    em_request *r = NULL;
    em_err e = { 0 };
    CHECKF(em_sched_submit(s, &p, &r, NULL, &e) == 0, "submit: %s", e.msg);
    return r;
}

static void collect(em_request *r, req *q)
{
    em_event ev;
    q->n_out = 0;
    for (;;) {
        if (!em_request_next(r, &ev, 60000)) {
            CHECKF(0, "no event for 60 s");
            break;
        }
        int done = ev.kind == EM_EV_DONE;
        if (!done && q->n_out < 128)
            q->out[q->n_out++] = ev.token;
        if (done) {
            q->finish = ev.finish;
            q->m = ev.metrics;
        }
        em_event_clear(&ev);
        if (done)
            break;
    }
    em_request_release(r);
}

int main(int argc, char **argv)
{
    if (argc != 2 || !test_shared_dir()) {
        printf("SKIP: shared folder absent\n");
        return 77;
    }
    char path[1024];
    snprintf(path, sizeof path, "%s", test_shared(argv[1]));
    em_model *m = NULL;
    em_tokenizer *tok = NULL;
    em_err e = { 0 };
    if (em_model_open(path, &m, &e) || em_tokenizer_create(em_model_gguf(m), &tok, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    em_vk_opts vo = EM_VK_OPTS_INIT;
    vo.cpu_threads = 0;   /* a tiny model */
    em_vk *vk = gpu_open("sched_gpu", &vo);
    em_fwd_opts fo = { .max_tokens = 128, .max_seqs = 16, .max_ctx = 512, .n_blocks = 16 * 32,
                       .n_blocks_window = 16 * em_fwd_window_blocks(em_model_hparams(m), 128, 512),
                       .max_logits = 16 };
    em_fwd_opts fo_alone = fo;
    fo_alone.n_blocks_window = 0;
    em_fwd *f = NULL, *f_alone = NULL;
    CHECKF(em_fwd_create(vk, m, &fo, &f, &e) == 0, "%s", e.msg);
    CHECKF(!f || em_fwd_create(vk, m, &fo_alone, &f_alone, &e) == 0, "%s", e.msg);
    if (!f || !f_alone) {
        em_fwd_destroy(f);
        gpu_close(vk);
        return test_summary("sched_gpu");
    }

    static req q[N_REQ], alone[N_REQ];
    unsigned long long seed = 5;
    uint32_t V = em_model_hparams(m)->n_vocab;
    for (int i = 0; i < N_REQ; i++) {
        q[i].n_prompt = 5 + (uint32_t)(test_rand(&seed) % 200);
        q[i].max_tokens = 5 + (uint32_t)(test_rand(&seed) % 60);
        q[i].cls = i % 2 ? EM_CLASS_BACKGROUND : EM_CLASS_INTERACTIVE;
        q[i].prompt[0] = em_tokenizer_bos(tok) >= 0 ? em_tokenizer_bos(tok) : 1;
        for (uint32_t k = 1; k < q[i].n_prompt; k++)   /* a third share their first 64 ids */
            q[i].prompt[k] = (int32_t)(i % 3 == 0 && k < 64 ? 3 + (k * 7) % (V - 3)
                                                             : 3 + test_rand(&seed) % (V - 3));
    }

    /* alone: one request at a time, nothing cached, no window pool */
    em_sched *s = start(f_alone, vk, m, tok, 0, 128);
    for (int i = 0; i < N_REQ && s; i++) {
        alone[i] = q[i];
        collect(submit(s, &alone[i]), &alone[i]);
    }
    em_sched_destroy(s);

    /* together, with a smaller step budget so that prompts are chunked */
    s = start(f, vk, m, tok, 1, 96);
    em_request *rs[N_REQ];
    for (int i = 0; i < N_REQ && s; i++)
        rs[i] = submit(s, &q[i]);
    for (int i = 0; i < N_REQ && s; i++)
        collect(rs[i], &q[i]);
    /* a model whose output does not depend on the context (the qwen2 synth
     * model repeats the last prompt token) passes with any attention or KV
     * bug: require varied outputs, different between requests */
    int varied = 0, differ = 0;
    for (int i = 0; i < N_REQ; i++) {
        int distinct = 0;
        for (uint32_t k = 0; k < alone[i].n_out; k++) {
            int seen = 0;
            for (uint32_t j = 0; j < k && !seen; j++)
                seen = alone[i].out[j] == alone[i].out[k];
            distinct += !seen;
        }
        varied += distinct >= 3;
        differ += i > 0 && (alone[i].n_out != alone[i - 1].n_out ||
                            memcmp(alone[i].out, alone[i - 1].out, alone[i].n_out * sizeof(int32_t)));
    }
    CHECKF(varied >= N_REQ * 3 / 4, "%s: only %d of %d alone outputs have 3 or more distinct tokens: "
           "the model's output hardly depends on its context, so this test would check nothing",
           argv[1], varied, N_REQ);
    CHECKF(differ >= N_REQ * 3 / 4, "only %d of %d consecutive alone outputs differ", differ, N_REQ - 1);
    int equal = 0;
    for (int i = 0; i < N_REQ; i++) {
        int same = q[i].n_out == alone[i].n_out && q[i].finish == alone[i].finish &&
                   memcmp(q[i].out, alone[i].out, q[i].n_out * sizeof(int32_t)) == 0;
        equal += same;
        CHECKF(q[i].finish == EM_FINISH_LENGTH || q[i].finish == EM_FINISH_STOP,
               "request %d finished with %s", i, em_finish_name(q[i].finish));
        CHECKF(same, "request %d: %u tokens together vs %u alone", i, q[i].n_out, alone[i].n_out);
        CHECK(q[i].m.preemptions == 0);
    }
    if (s) {
        em_sched_drain(s);
        em_sched_stats st;
        em_sched_get_stats(s, &st);
        CHECKF(st.kv.used == 0 && st.kv.free + st.kv.cached == st.kv.n_blocks,
               "blocks leaked: used %u free %u cached %u", st.kv.used, st.kv.free, st.kv.cached);
        CHECKF(st.kv.w_used == 0 && st.kv.w_free + st.kv.w_cached == st.kv.w_blocks,
               "window-pool blocks leaked: used %u free %u cached %u", st.kv.w_used, st.kv.w_free, st.kv.w_cached);
        CHECKF(st.kv.w_blocks == fo.n_blocks_window, "window pool of %u blocks, the forward pass's %u",
               st.kv.w_blocks, fo.n_blocks_window);
        CHECK(st.kv.hit_blocks > 0);
        printf("%s: %d of %d requests equal alone; %llu steps, %llu prefix-cache block hits; window pool %u "
               "blocks\n", argv[1], equal, N_REQ, (unsigned long long)st.steps,
               (unsigned long long)st.kv.hit_blocks, st.kv.w_blocks);
    }
    em_sched_destroy(s);
    em_fwd_destroy(f);
    em_fwd_destroy(f_alone);
    gpu_close(vk);
    em_tokenizer_destroy(tok);
    em_model_close(m);
    return test_summary("sched_gpu");
}
