/* cmd_bench.c — `ember bench`: prefill and decode speed of one model on one
 * device, next to the device's own ceilings measured on the spot (streaming
 * read bandwidth, FMA peak), so that every figure comes with its efficiency;
 * decode speed at several context lengths; and, with --users, the load
 * benchmark through the scheduler (firmware/bench_load.c). */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/gpu/engine.h"
#include "core/gpu/forward.h"
#include "core/model/model.h"
#include "core/run/kv.h"
#include "core/run/sample.h"
#include "core/vk/vk.h"
#include "core/vk/vk_bench.h"
#include "firmware/bench.h"
#include "firmware/cli.h"
#include "scheduler/scheduler.h"

static const char usage[] =
    "usage: ember bench [--model PATH] [--prompt-tokens N] [--gen-tokens N] [--contexts N,N,...]\n"
    "                   [--kv-type f16|q8_0] [--json] [--profile]\n"
    "       ember bench [--model PATH] --users N,N,... [--background N] [--prompt-tokens N]\n"
    "                   [--gen-tokens N] [--requests-per-user N] [--prefix-tokens N]\n"
    "                   [--gpu-cost-per-hour X] [--slo-tpot-ms X] [--kv-mb N] [--step-tokens N]\n"
    "                   [--kv-type f16|q8_0] [--temp T] [--json]\n"
    "       ember bench --model ENCODER.gguf [--batches N,N,...] [--prompt-tokens N] [--json]\n"
    "  The first form measures prefill of N prompt tokens (default 512) and decode of N\n"
    "  tokens at batch 1 (default 128) on the GPU, decode at each context length of\n"
    "  --contexts (default 128,1024,4096 where the model allows), and the device's\n"
    "  streaming-read bandwidth and FMA peak; prints efficiencies against them.\n"
    "  --profile adds GPU time per kernel. The second form runs each number of\n"
    "  concurrent interactive users (each doing --requests-per-user requests, default 2,\n"
    "  of --prompt-tokens (default 64) and --gen-tokens (default 32)) through the\n"
    "  scheduler, optionally next to N saturating background users, and reports\n"
    "  tokens/s, TTFT and TPOT percentiles, cost per 1M tokens at the given hourly price,\n"
    "  KV waste, and a --prefix-tokens prompt (default 1024) cold vs with its prefix cached.\n"
    "  --temp: the users' temperature (default 0, greedy; above 0 nothing else filters, as\n"
    "  the OpenAI API's defaults), and how many tokens were chosen on the device.\n"
    "  The third form (an encoder: bert) measures embeddings per second at each batch of\n"
    "  --batches inputs (default 1,16,64) of --prompt-tokens tokens (default 128);\n"
    "  --profile adds GPU time per kernel.\n";

/* Measure the device's read bandwidth and FMA peak; *read / *fma keep the
 * larger of their value and the new one. */
static int measure_ceilings(em_vk *vk, double *read, double *fma, em_err *err)
{
    double r = 0, f = 0;
    int rc = em_vk_measure_read_bw(vk, 0, &r, err);
    if (rc || (rc = em_vk_measure_fma(vk, &f, err)))
        return rc;
    *read = r > *read ? r : *read;
    *fma = f > *fma ? f : *fma;
    return 0;
}

/* --users: the scheduler over a forward pass sized for the levels. */
static int bench_users(const char *model_path, em_model *m, const char *users, long background,
                       long n_prompt, long n_gen, long reqs, long prefix, double cost, double slo,
                       long kv_mb, long step_tokens, uint32_t kv_type, double temp, int json)
{
    em_err err = { 0 };
    em_bench_load_opts lo = { 0 };
    int rc = em_cli_parse_list("bench", "--users", users, lo.levels, 16, &lo.n_levels, 1 << 20);
    if (rc)
        return rc;
    const em_hparams *hp = em_model_hparams(m);
    uint32_t max_users = 0;
    for (uint32_t i = 0; i < lo.n_levels; i++)
        if (lo.levels[i] > max_users)
            max_users = lo.levels[i];
    lo.background = (uint32_t)background;
    lo.prompt_tokens = (uint32_t)n_prompt;
    lo.gen_tokens = (uint32_t)n_gen;
    lo.requests_per_user = (uint32_t)reqs;
    lo.n_vocab = hp->n_vocab;
    lo.gpu_cost_per_hour = cost;
    lo.slo_tpot_ms = slo;
    lo.temp = temp;
    uint32_t ctx = (uint32_t)((n_prompt + n_gen) * 3 / 2 + 16);   /* mixed lengths reach 3/2 */
    lo.prefix_tokens = (uint32_t)prefix;
    if (lo.prefix_tokens + 16 > ctx)
        ctx = lo.prefix_tokens + 16;
    uint32_t seqs = max_users + lo.background + 1;
    uint32_t T = step_tokens > 0 ? (uint32_t)step_tokens : 256;
    em_vk *vk = NULL;
    em_fwd *fwd = NULL;
    em_sched *s = NULL;
    em_tokenizer *tok = NULL;
    int status = 0;
    em_vk_opts vo = EM_VK_OPTS_INIT;
    if ((rc = em_tokenizer_create(em_model_gguf(m), &tok, &err)) || (rc = em_vk_create(&vo, &vk, &err))) {
        status = em_cli_fail_err(&err);
        goto done;
    }
    uint32_t nbw = 0, blocks = em_fwd_kv_blocks(vk, m, kv_type, (uint64_t)kv_mb, seqs, ctx, T, &nbw);
    em_fwd_opts fo = { .max_tokens = T, .max_seqs = seqs, .max_ctx = ctx, .n_blocks = blocks,
                       .n_blocks_window = nbw, .max_logits = seqs, .kv_type = kv_type };
    if (blocks == 0) {
        status = em_cli_fail(1, "bench: no device memory left for a KV cache");
        goto done;
    }
    if ((rc = em_fwd_create(vk, m, &fo, &fwd, &err))) {
        status = em_cli_fail_err(&err);
        goto done;
    }
    em_fwd_stats fst;
    em_fwd_get_stats(fwd, &fst);
    if (!json)
        printf("device      %s (%s), %s\nmodel       %s: %s\n"
               "KV cache    %u blocks of %u tokens = %u tokens, %.1f MiB (%s%s)\n",
               em_vk_info(vk)->name, em_vk_info(vk)->type_name, em_fwd_variant(fwd), model_path, hp->name,
               blocks, EM_KV_BLOCK, blocks * EM_KV_BLOCK, (double)fst.kv_bytes / (1 << 20),
               em_fwd_kv_type_name(kv_type), nbw ? "; with the sliding-window layers' pool" : "");
    em_sched_backend be;
    em_sched_backend_gpu(fwd, vk, hp->n_vocab, T, seqs, seqs, ctx, blocks, &be);
    em_sched_opts so;
    em_sched_opts_init(&so);
    so.step_tokens = T;
    so.max_waiting[0] = so.max_waiting[1] = 4096;
    if ((rc = em_sched_create(&so, &be, tok, &s, &err))) {
        status = em_cli_fail_err(&err);
        goto done;
    }
    if ((rc = em_bench_load(s, &lo, json)))
        status = 1;
    em_sched_stats ss;
    em_sched_get_stats(s, &ss);
    if (!json)
        printf("tokens chosen: %llu from the device's summary of their row, %llu from the whole row%s\n",
               (unsigned long long)ss.chosen_on_device, (unsigned long long)ss.chosen_from_row,
               ss.chosen_on_device + ss.chosen_from_row ? "" : " (EMBER_SAMPLE_HOST: every row to the host)");
done:
    em_sched_destroy(s);
    em_fwd_destroy(fwd);
    em_vk_destroy(vk);
    em_tokenizer_destroy(tok);
    return status;
}

/* Matrix-vector flops per token of the transformer layers (2 per weight;
 * of a mixture of experts, the router and the experts a token uses). */
static double layer_flops(const em_model *m)
{
    const em_hparams *hp = em_model_hparams(m);
    double per = 0;
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        const em_layer_weights *w = em_model_layer(m, il);
        const em_gguf_tensor *t[] = { w->wq, w->wk, w->wv, w->wo, w->w_gate, w->w_up, w->w_down,
                                      w->ffn_gate_inp };
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
            per += t[i] ? 2.0 * (double)t[i]->nelem : 0;
        const em_gguf_tensor *x[] = { w->w_gate_exps, w->w_up_exps, w->w_down_exps };
        for (size_t i = 0; i < 3; i++)
            per += x[i] ? 2.0 * (double)x[i]->nelem * hp->n_expert_used / hp->n_expert : 0;
    }
    return per;
}

/* Attention flops of one token at context length ctx: q.k and p.v per head. */
static double attn_flops(const em_hparams *hp, double ctx)
{
    return 2.0 * ctx * hp->n_head * (hp->head_dim + hp->head_dim_v) * hp->n_layer;
}

int em_cmd_bench(int argc, char **argv)
{
    const char *model_path = NULL, *users = NULL, *contexts = NULL, *kv_name = "f16", *batches = NULL;
    /* -1 (or 0 below the flag's minimum): not given */
    long n_prompt = 0, n_gen = 0, background = -1, reqs = 0, prefix = -1, kv_mb = 0, step_tokens = 0;
    double cost = -1, slo = -1, temp = -1;
    int json = 0, profile = 0;
    em_cli_opt opts[] = {
        { "--model", "-m", EM_OPT_STR, &model_path, 0, 0 },
        { "--prompt-tokens", NULL, EM_OPT_INT, &n_prompt, 1, 1 << 16 },
        { "--gen-tokens", NULL, EM_OPT_INT, &n_gen, 1, 1 << 16 },
        { "--contexts", NULL, EM_OPT_STR, &contexts, 0, 0 },
        { "--json", NULL, EM_OPT_FLAG, &json, 0, 0 },
        { "--profile", NULL, EM_OPT_FLAG, &profile, 0, 0 },
        { "--users", NULL, EM_OPT_STR, &users, 0, 0 },
        { "--background", NULL, EM_OPT_INT, &background, 0, 1024 },
        { "--requests-per-user", NULL, EM_OPT_INT, &reqs, 1, 4096 },
        { "--prefix-tokens", NULL, EM_OPT_INT, &prefix, 0, 1 << 16 },
        { "--gpu-cost-per-hour", NULL, EM_OPT_FLOAT, &cost, 0, 1e6 },
        { "--slo-tpot-ms", NULL, EM_OPT_FLOAT, &slo, 0, 1e7 },
        { "--kv-mb", NULL, EM_OPT_INT, &kv_mb, 1, 1 << 24 },
        { "--step-tokens", NULL, EM_OPT_INT, &step_tokens, 1, 1 << 16 },
        { "--kv-type", NULL, EM_OPT_STR, &kv_name, 0, 0 },
        { "--temp", NULL, EM_OPT_FLOAT, &temp, 0, 100 },
        { "--batches", NULL, EM_OPT_STR, &batches, 0, 0 },
        { NULL, NULL, 0, NULL, 0, 0 },
    };
    int rc = em_cli_parse("bench", argc, argv, opts, NULL, 0, NULL, usage);
    if (rc)
        return rc;
    /* a flag of the other form would be ignored: say so instead */
    const struct { const char *name; int given; } only_users[] = {
        { "--background", background >= 0 }, { "--requests-per-user", reqs > 0 },
        { "--prefix-tokens", prefix >= 0 }, { "--gpu-cost-per-hour", cost >= 0 },
        { "--slo-tpot-ms", slo >= 0 }, { "--kv-mb", kv_mb > 0 }, { "--step-tokens", step_tokens > 0 },
        { "--temp", temp >= 0 },
    };
    for (size_t i = 0; !users && i < sizeof only_users / sizeof only_users[0]; i++)
        if (only_users[i].given)
            return em_cli_fail(2, "bench: %s applies only to the load benchmark (--users)", only_users[i].name);
    if (users && (contexts || profile))
        return em_cli_fail(2, "bench: %s does not apply to the load benchmark (--users)",
                           contexts ? "--contexts" : "--profile");
    background = background < 0 ? 0 : background;
    reqs = reqs ? reqs : 2;
    prefix = prefix < 0 ? 1024 : prefix;
    /* cost and slo stay negative when not given: no cost, no SLO */
    uint32_t kv_type;
    {
        em_err kerr = { 0 };
        if (em_fwd_kv_type_parse(kv_name, &kv_type, &kerr))
            return em_cli_fail(2, "bench: %s", kerr.msg);
    }
    em_err err = { 0 };
    char default_path[4096];
    if (!model_path) {
        if (em_cli_default_model(default_path, sizeof default_path, &err))
            return em_cli_fail(2, "bench: %s", err.msg);
        model_path = default_path;
    }
    em_model *m = NULL;
    em_engine *e = NULL;
    int32_t *toks = NULL;
    float *logits = NULL;
    int status = 0;
    if ((rc = em_model_open(model_path, &m, &err))) {
        status = em_cli_fail_err(&err);
        goto done;
    }
    const em_hparams *hp = em_model_hparams(m);
    if (hp->encoder || batches) {
        uint32_t b[16] = { 1, 16, 64 }, nb = 3;
        if (!hp->encoder || users || n_gen || contexts)
            status = em_cli_fail(2, "bench: %s", !hp->encoder ? "--batches applies only to an encoder (bert)"
                                                              : "an encoder's benchmark takes --batches, "
                                                                "--prompt-tokens, --profile and --json");
        else if (!batches || !(status = em_cli_parse_list("bench", "--batches", batches, b, 16, &nb, 1 << 12)))
            status = em_bench_embed(m, b, nb, n_prompt ? (uint32_t)n_prompt : 128, profile, json);
        goto done;
    }
    if (users) {
        status = bench_users(model_path, m, users, background, n_prompt ? n_prompt : 64, n_gen ? n_gen : 32,
                             reqs, prefix, cost, slo, kv_mb, step_tokens, kv_type, temp < 0 ? 0 : temp, json);
        goto done;
    }
    if (!n_prompt)
        n_prompt = 512;
    if (!n_gen)
        n_gen = 128;
    uint32_t ctxs[8], n_ctxs = 0;
    if (contexts) {
        if ((status = em_cli_parse_list("bench", "--contexts", contexts, ctxs, 8, &n_ctxs, 1 << 20)))
            goto done;
    } else {
        static const uint32_t def[] = { 128, 1024, 4096 };
        for (int i = 0; i < 3; i++)
            if (def[i] + 64 <= hp->n_ctx_train)
                ctxs[n_ctxs++] = def[i];
    }
    uint32_t n_ctx = (uint32_t)(n_prompt + n_gen + 1);
    for (uint32_t i = 0; i < n_ctxs; i++)
        if (ctxs[i] + 64 > n_ctx)
            n_ctx = ctxs[i] + 64;
    em_engine_opts eo = { 0, profile, kv_type };
    if ((rc = em_engine_create(m, EM_BACKEND_VULKAN, n_ctx, &eo, &e, &err))) {
        status = em_cli_fail_err(&err);
        goto done;
    }
    em_vk *vk = em_engine_vk(e);
    em_fwd *fwd = em_engine_fwd(e);
    /* the engine's pool: one sequence of n_ctx positions */
    uint32_t kv_blocks = (n_ctx + EM_KV_BLOCK - 1) / EM_KV_BLOCK;
    uint64_t kv_bytes = (uint64_t)kv_blocks * em_fwd_kv_block_bytes(m, kv_type);
    toks = malloc((size_t)n_ctx * sizeof *toks);
    logits = malloc((size_t)hp->n_vocab * sizeof *logits);
    if (!toks || !logits) {
        status = em_cli_fail(1, "bench: out of memory");
        goto done;
    }
    unsigned long long s = 12345;
    for (uint32_t i = 0; i < n_ctx; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        toks[i] = (int32_t)((s >> 33) % hp->n_vocab);
    }

    /* warm-up: builds every pipeline both shapes use */
    if ((rc = em_engine_eval(e, toks, (uint32_t)n_prompt, 0, logits, 0, &err)) ||
        (rc = em_engine_eval(e, toks, 1, (uint32_t)n_prompt, logits, 0, &err)))
        goto fail;
    /* the device's ceilings: measured here and again after the decode runs,
     * the better of the two kept, so that a burst of a noisy neighbour
     * during one measurement does not lower the ceiling (and raise the
     * efficiencies) */
    double read_gbps = 0, fma_gflops = 0;
    if ((rc = measure_ceilings(vk, &read_gbps, &fma_gflops, &err)))
        goto fail;

    em_fwd_prof prof_pre[16], prof_dec[16];
    uint32_t n_prof_pre = 0, n_prof_dec = 0;
    em_fwd_profile(fwd, prof_pre, 16, 1);
    double best_prefill = 1e30;
    for (int r = 0; r < 3; r++) {
        double t0 = em_cli_now();
        if ((rc = em_engine_eval(e, toks, (uint32_t)n_prompt, 0, logits, 0, &err)))
            goto fail;
        double dt = em_cli_now() - t0;
        if (dt < best_prefill)
            best_prefill = dt;
    }
    n_prof_pre = em_fwd_profile(fwd, prof_pre, 16, 1);
    double t0 = em_cli_now(), submit_us = 0;
    int32_t id = em_argmax(logits, hp->n_vocab);
    for (long i = 0; i < n_gen; i++) {
        if ((rc = em_engine_eval(e, &id, 1, (uint32_t)(n_prompt + i), logits, 0, &err)))
            goto fail;
        em_fwd_stats fs;
        em_fwd_get_stats(fwd, &fs);
        submit_us += fs.last_submit_us;
        id = em_argmax(logits, hp->n_vocab);
    }
    double t_dec = em_cli_now() - t0;
    n_prof_dec = em_fwd_profile(fwd, prof_dec, 16, 1);
    em_fwd_stats st;
    em_fwd_get_stats(fwd, &st);

    /* decode at longer contexts: 32 steps starting at position C - 1 (the
     * attention reads C positions of KV; their content does not matter for
     * the time), rated by the median step so that a noisy neighbour's burst
     * does not decide the ratio between contexts */
    double ctx_tps[8] = { 0 };
    {
        uint32_t nb = (n_ctx + EM_KV_BLOCK - 1) / EM_KV_BLOCK;
        int32_t *table = malloc(nb * sizeof *table);
        if (!table) {
            status = em_cli_fail(1, "bench: out of memory");
            goto done;
        }
        for (uint32_t i = 0; i < nb; i++)
            table[i] = (int32_t)i;
        const int32_t *tables[1] = { table };
        for (uint32_t c = 0; c < n_ctxs && !rc; c++) {
            int32_t tok1 = id, pos1, seq1 = 0, row = 0;
            double dt[32];
            for (int i = 0; i < 33 && !rc; i++) {
                pos1 = (int32_t)(ctxs[c] - 1 + (uint32_t)i);
                em_fwd_batch b = { 1, &tok1, &pos1, &seq1, 1, &row, tables, NULL, NULL, NULL, 0, NULL };
                double ts = em_cli_now();
                rc = em_fwd_step(fwd, &b, logits, &err);
                if (i > 0)   /* the first step of a new shape records its commands */
                    dt[i - 1] = em_cli_now() - ts;
                tok1 = em_argmax(logits, hp->n_vocab);
            }
            if (!rc) {
                qsort(dt, 32, sizeof dt[0], em_cli_cmp_double);
                ctx_tps[c] = 2 / (dt[15] + dt[16]);
            }
        }
        free(table);
        if (rc)
            goto fail;
    }
    if ((rc = measure_ceilings(vk, &read_gbps, &fma_gflops, &err)))
        goto fail;

    const em_vk_dev_info *di = em_vk_info(vk);
    double lf = layer_flops(m), out_flops = 2.0 * hp->n_embd * hp->n_vocab;
    double prefill_flops = lf * n_prompt + attn_flops(hp, n_prompt / 2.0) * n_prompt + out_flops;
    double prefill_tps = n_prompt / best_prefill;
    double prefill_gflops = prefill_flops / best_prefill / 1e9;
    double decode_tps = n_gen / t_dec;
    double bytes_per_tok = (double)st.decode_bytes;   /* every matrix a decode step uses, once */
    double kv_per_tok = (double)st.kv_bytes / (double)em_engine_n_ctx(e) * (n_prompt + n_gen / 2.0);
    double decode_gbps = bytes_per_tok * decode_tps / 1e9;
    double dec_eff = decode_gbps / read_gbps, pre_eff = prefill_gflops / fma_gflops;
    double step_us = t_dec / n_gen * 1e6;
    double host_us = step_us - submit_us / n_gen;

    if (json) {
        json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:I, s:I, s:i, s:i}",
                              "device", di->name, "device_type", di->type_name,
                              "kernel_variant", em_fwd_variant(fwd), "model", hp->name,
                              "params", (json_int_t)em_model_n_params(m),
                              "weight_bytes", (json_int_t)st.weight_bytes,
                              "prompt_tokens", (int)n_prompt, "gen_tokens", (int)n_gen);
        json_object_set_new(o, "kv_blocks", json_integer(kv_blocks));
        json_object_set_new(o, "kv_bytes", json_integer((json_int_t)kv_bytes));
        json_object_set_new(o, "kv_type", json_string(em_fwd_kv_type_name(kv_type)));
        json_object_set_new(o, "prefill_tokens_per_s", json_real(prefill_tps));
        json_object_set_new(o, "prefill_gflops", json_real(prefill_gflops));
        json_object_set_new(o, "decode_tokens_per_s", json_real(decode_tps));
        json_object_set_new(o, "decode_bytes_per_token", json_real(bytes_per_tok));
        json_object_set_new(o, "decode_kv_bytes_per_token", json_real(kv_per_tok));
        json_object_set_new(o, "decode_gbps", json_real(decode_gbps));
        json_object_set_new(o, "read_bandwidth_gbps", json_real(read_gbps));
        json_object_set_new(o, "fma_peak_gflops", json_real(fma_gflops));
        json_object_set_new(o, "decode_efficiency", json_real(dec_eff));
        json_object_set_new(o, "prefill_efficiency", json_real(pre_eff));
        json_object_set_new(o, "dispatches_per_decode_step", json_integer(st.dispatches));
        json_object_set_new(o, "barriers_per_decode_step", json_integer(st.barriers));
        json_object_set_new(o, "decode_step_us", json_real(step_us));
        json_object_set_new(o, "decode_host_us_per_step", json_real(host_us));
        json_t *ca = json_array();
        for (uint32_t c = 0; c < n_ctxs; c++)
            json_array_append_new(ca, json_pack("{s:i, s:f}", "context", (int)ctxs[c], "tokens_per_s", ctx_tps[c]));
        json_object_set_new(o, "decode_at_context", ca);
        char *txt = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        if (txt)
            puts(txt);
        free(txt);
        json_decref(o);
    } else {
        printf("device      %s (%s), %s\n", di->name, di->type_name, em_fwd_variant(fwd));
        printf("model       %s: %s, %.1fM parameters, %.1f MB packed weights on the device\n",
               model_path, hp->name, em_model_n_params(m) / 1e6, st.weight_bytes / 1e6);
        if (hp->n_expert)
            printf("experts     %u of %u per token: %.1fM parameters active, %.2f MB of weights a decode step "
                   "reads\n", hp->n_expert_used, hp->n_expert, em_model_n_params_active(m) / 1e6,
                   st.decode_bytes / 1e6);
        printf("KV cache    %u blocks of %u tokens = %u tokens, %.1f MiB (%s), one sequence\n", kv_blocks,
               EM_KV_BLOCK, kv_blocks * EM_KV_BLOCK, kv_bytes / 1048576.0, em_fwd_kv_type_name(kv_type));
        printf("ceilings    read %.2f GB/s, FMA %.1f GFLOP/s (measured now, best of two)\n", read_gbps, fma_gflops);
        printf("prefill     %ld tokens: %.1f tok/s, %.2f GFLOP/s -> prefill efficiency %.2f\n",
               n_prompt, prefill_tps, prefill_gflops, pre_eff);
        printf("decode      %ld tokens at batch 1: %.1f tok/s, %.2f MB weights/token, %.2f GB/s "
               "-> decode efficiency %.2f\n",
               n_gen, decode_tps, bytes_per_tok / 1e6, decode_gbps, dec_eff);
        printf("per step    %u dispatches, %u barriers, %.0f us/step, %.0f us on the host "
               "(sampling, step buffer, submit)\n",
               st.dispatches, st.barriers, step_us, host_us);
        if (n_ctxs) {
            printf("context     decode tok/s:");
            for (uint32_t c = 0; c < n_ctxs; c++)
                printf(" %u: %.1f%s", ctxs[c], ctx_tps[c], c + 1 < n_ctxs ? "," : "");
            if (n_ctxs > 1 && ctx_tps[0] > 0)
                printf(" (%u vs %u: %.2f)", ctxs[n_ctxs - 1], ctxs[0], ctx_tps[n_ctxs - 1] / ctx_tps[0]);
            printf("\n");
        }
        for (int ph = 0; ph < 2; ph++) {
            em_fwd_prof *pp = ph ? prof_dec : prof_pre;
            uint32_t np = ph ? n_prof_dec : n_prof_pre;
            double tot = 0;
            for (uint32_t i = 0; i < np && i < 16; i++)
                tot += pp[i].us;
            for (uint32_t i = 0; i < np && i < 16; i++)
                printf("%s %-8s %8.1f us per step (%4.1f%%), %u dispatches\n",
                       ph ? "profile decode " : "profile prefill", pp[i].kernel,
                       pp[i].us / (ph ? n_gen : 3), 100 * pp[i].us / tot, pp[i].count);
        }
    }
    if ((rc = em_engine_check(e, &err)))
        goto fail;
    goto done;
fail:
    status = em_cli_fail_err(&err);
done:
    free(toks);
    free(logits);
    em_engine_destroy(e);
    em_model_close(m);
    return status;
}
