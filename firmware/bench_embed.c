/* bench_embed.c — `ember bench` on an encoder (bert): embeddings per second
 * on the GPU at batches of several inputs of one length, each batch one
 * forward-pass step (every input's tokens attend to its own, pooled rows
 * read back), as /v1/embeddings runs them. Times are the host's wall clock
 * around em_fwd_step after a warm-up step of the same shape (its command
 * buffer recorded), repeated until a second has passed (at least 3 times). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/gpu/forward.h"
#include "core/vk/vk.h"
#include "firmware/bench.h"
#include "firmware/cli.h"

int em_bench_embed(const em_model *m, const uint32_t *batches, uint32_t n_batches, uint32_t tokens, int profile, int json)
{
    const em_hparams *hp = em_model_hparams(m);
    em_err err = { 0 };
    if (tokens > hp->n_pos)
        return em_cli_fail(2, "bench: %u tokens per input; this encoder takes at most %u", tokens, hp->n_pos);
    uint32_t max_b = 1;
    for (uint32_t i = 0; i < n_batches; i++)
        max_b = batches[i] > max_b ? batches[i] : max_b;
    em_vk *vk = NULL;
    em_fwd *f = NULL;
    em_vk_opts vo = EM_VK_OPTS_INIT;
    em_fwd_opts fo = { .max_tokens = max_b * tokens, .max_seqs = max_b, .max_ctx = tokens, .profile = profile };
    int32_t *tok = malloc((size_t)max_b * tokens * sizeof *tok), *pos = malloc((size_t)max_b * tokens * sizeof *pos);
    int32_t *seq = malloc((size_t)max_b * tokens * sizeof *seq), *pool = malloc(2 * (size_t)max_b * sizeof *pool);
    int status = 0;
    json_t *rows = json ? json_array() : NULL;
    if (!tok || !pos || !seq || !pool || (json && !rows)) {
        status = em_cli_fail(1, "bench: out of memory");
        goto done;
    }
    if (em_vk_create(&vo, &vk, &err) || em_fwd_create(vk, m, &fo, &f, &err)) {
        status = em_cli_fail_err(&err);
        goto done;
    }
    srand(7);
    for (uint32_t s = 0; s < max_b; s++) {
        for (uint32_t j = 0; j < tokens; j++) {
            uint32_t k = s * tokens + j;
            tok[k] = (int32_t)(hp->n_vocab / 4 + (uint32_t)rand() % (hp->n_vocab / 2));   /* (words, not specials) */
            pos[k] = (int32_t)j;
            seq[k] = (int32_t)s;
        }
        pool[2 * s] = (int32_t)(s * tokens);
        pool[2 * s + 1] = (int32_t)tokens;
    }
    const em_vk_dev_info *di = em_vk_info(vk);
    if (!json)
        printf("embed     %s, %u-token inputs on %s (%s)\n", hp->arch_name, tokens, di->name, di->type_name);
    for (uint32_t i = 0; i < n_batches; i++) {
        uint32_t B = batches[i];
        em_fwd_batch b = { B * tokens, tok, pos, seq, 0, NULL, NULL, NULL, NULL, NULL, B, pool };
        if (em_fwd_step(f, &b, NULL, &err)) {   /* (warm-up: the shape's command buffer recorded) */
            status = em_cli_fail_err(&err);
            goto done;
        }
        uint32_t reps = 0;
        double t0 = em_cli_now(), t = 0;
        while (reps < 3 || t < 1.0) {
            if (em_fwd_step(f, &b, NULL, &err)) {
                status = em_cli_fail_err(&err);
                goto done;
            }
            reps++;
            t = em_cli_now() - t0;
        }
        double per = t / reps, eps = B / per;
        if (json)
            json_array_append_new(rows, json_pack("{s:I, s:I, s:f, s:f, s:f}", "inputs", (json_int_t)B, "tokens",
                                                  (json_int_t)tokens, "step_ms", per * 1e3, "embeddings_per_s", eps,
                                                  "tokens_per_s", eps * tokens));
        else
            printf("          %3u inputs: %8.1f embeddings/s  %9.0f tokens/s  (%.1f ms a step, %u steps)\n", B, eps,
                   eps * tokens, per * 1e3, reps);
        em_fwd_prof pr[16];
        uint32_t np = em_fwd_profile(f, pr, 16, 1);
        for (uint32_t k = 0; !json && k < np && k < 16; k++)
            printf("            %-8s %10.1f ms  %6u dispatches\n", pr[k].kernel, pr[k].us / 1e3 / (reps + 1), pr[k].count / (reps + 1));
    }
    if (json) {
        char *s = json_dumps(rows, JSON_COMPACT);
        if (s)
            printf("{\"embed\": %s}\n", s);
        free(s);
    }
done:
    json_decref(rows);
    em_fwd_destroy(f);
    em_vk_destroy(vk);
    free(tok);
    free(pos);
    free(seq);
    free(pool);
    return status;
}
