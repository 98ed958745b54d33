/* cmd_bench.c — `ember bench`: prefill and decode speed of one model on one
 * device, next to the device's own ceilings measured on the spot (streaming
 * read bandwidth, FMA peak), so that every figure comes with its efficiency. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/engine.h"
#include "core/forward.h"
#include "core/model.h"
#include "core/sample.h"
#include "core/vk.h"
#include "core/vk_bench.h"
#include "firmware/cli.h"

static const char usage[] =
    "usage: ember bench [--model PATH] [--prompt-tokens N] [--gen-tokens N] [--json] [--profile]\n"
    "  Measures prefill of N prompt tokens (default 512) and decode of N tokens at\n"
    "  batch 1 (default 128) on the GPU, and the device's streaming-read bandwidth\n"
    "  and FMA peak; prints efficiencies against them. --profile adds GPU time per kernel.\n";

/* Matrix-vector flops per token of the transformer layers (2 per weight). */
static double layer_flops(const em_model *m)
{
    const em_hparams *hp = em_model_hparams(m);
    double per = 0;
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        const em_layer_weights *w = em_model_layer(m, il);
        const em_gguf_tensor *t[] = { w->wq, w->wk, w->wv, w->wo, w->w_gate, w->w_up, w->w_down };
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
            per += 2.0 * (double)t[i]->nelem;
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
    const char *model_path = NULL;
    long n_prompt = 512, n_gen = 128;
    int json = 0, profile = 0;
    em_cli_opt opts[] = {
        { "--model", "-m", EM_OPT_STR, &model_path, 0, 0 },
        { "--prompt-tokens", NULL, EM_OPT_INT, &n_prompt, 1, 1 << 16 },
        { "--gen-tokens", NULL, EM_OPT_INT, &n_gen, 1, 1 << 16 },
        { "--json", NULL, EM_OPT_FLAG, &json, 0, 0 },
        { "--profile", NULL, EM_OPT_FLAG, &profile, 0, 0 },
        { NULL, NULL, 0, NULL, 0, 0 },
    };
    int rc = em_cli_parse("bench", argc, argv, opts, NULL, 0, NULL, usage);
    if (rc)
        return rc;
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
    uint32_t n_ctx = (uint32_t)(n_prompt + n_gen + 1);
    em_engine_opts eo = { 0, profile };
    if ((rc = em_engine_create(m, EM_BACKEND_VULKAN, n_ctx, &eo, &e, &err))) {
        status = em_cli_fail_err(&err);
        goto done;
    }
    em_vk *vk = em_engine_vk(e);
    em_fwd *fwd = em_engine_fwd(e);
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

    double read_gbps = 0, fma_gflops = 0;
    if ((rc = em_vk_measure_read_bw(vk, 0, &read_gbps, &err)) ||
        (rc = em_vk_measure_fma(vk, &fma_gflops, &err)))
        goto fail;

    const em_vk_dev_info *di = em_vk_info(vk);
    double lf = layer_flops(m), out_flops = 2.0 * hp->n_embd * hp->n_vocab;
    double prefill_flops = lf * n_prompt + attn_flops(hp, n_prompt / 2.0) * n_prompt + out_flops;
    double prefill_tps = n_prompt / best_prefill;
    double prefill_gflops = prefill_flops / best_prefill / 1e9;
    double decode_tps = n_gen / t_dec;
    double bytes_per_tok = (double)st.weight_bytes;   /* every packed matrix is streamed once */
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
        char *txt = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        if (txt)
            puts(txt);
        free(txt);
        json_decref(o);
    } else {
        printf("device      %s (%s), %s\n", di->name, di->type_name, em_fwd_variant(fwd));
        printf("model       %s: %s, %.1fM parameters, %.1f MB packed weights on the device\n",
               model_path, hp->name, em_model_n_params(m) / 1e6, st.weight_bytes / 1e6);
        printf("ceilings    read %.2f GB/s, FMA %.1f GFLOP/s (measured now)\n", read_gbps, fma_gflops);
        printf("prefill     %ld tokens: %.1f tok/s, %.2f GFLOP/s -> prefill efficiency %.2f\n",
               n_prompt, prefill_tps, prefill_gflops, pre_eff);
        printf("decode      %ld tokens at batch 1: %.1f tok/s, %.2f MB weights/token, %.2f GB/s "
               "-> decode efficiency %.2f\n",
               n_gen, decode_tps, bytes_per_tok / 1e6, decode_gbps, dec_eff);
        printf("per step    %u dispatches, %u barriers, %.0f us/step, %.0f us on the host "
               "(sampling, step buffer, submit)\n",
               st.dispatches, st.barriers, step_us, host_us);
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
