/* test_fwd_plan.c — core/gpu/fwd_plan.c against the real thing: for each model
 * given (paths under $EMBER_SHARED, or absolute), em_fwd_create on the
 * device and its stats (packed weight bytes, activation + logits + step
 * bytes, KV pool bytes) equal to what em_fwd_plan_weights,
 * em_fwd_plan_scratch and em_fwd_kv_block_bytes planned, for both KV types
 * and with the device's kernels and the GPU kernels (EMBER_VK_AS_GPU); a
 * sliding-window model with and without its window pool. The figures
 * `ember vram` prints are these. */
#include <stdio.h>
#include <string.h>

#include "core/gpu/forward.h"
#include "core/gpu/fwd_plan.h"
#include "core/gpu/kparams.h"
#include "core/gpu/variants.h"
#include "core/model/model.h"
#include "tests/gpu/gpu_util.h"

static void check_model(em_vk *vk, const char *path)
{
    em_err err = { 0 };
    em_model *m = NULL;
    if (em_model_open(path, &m, &err)) {
        CHECKF(0, "%s: %s", path, err.msg);
        return;
    }
    const em_hparams *hp = em_model_hparams(m);
    const em_vk_dev_info *di = em_vk_info(vk);
    for (uint32_t kvw = 0; kvw < (hp->n_swa ? 4 : 2); kvw++) {
        uint32_t kv = kvw % 2, nbw = kvw / 2 ? 3 * em_fwd_window_blocks(hp, 64, 100) : 0;
        if (kv == EM_KV_Q8_0 && hp->head_dim % 32)
            continue;
        em_fwd_opts o = { .max_tokens = 64, .max_seqs = 3, .max_ctx = 100, .n_blocks = 21,
                          .n_blocks_window = nbw, .max_logits = 2, .kv_type = kv };
        em_fwd *f = NULL;
        CHECK_OK(em_fwd_create(vk, m, &o, &f, &err), err);
        if (!f)
            continue;
        em_fwd_stats st;
        em_fwd_get_stats(f, &st);
        em_fwd_mem plan;
        memset(&plan, 0, sizeof plan);
        CHECK_OK(em_fwd_plan_weights(m, em_fwd_mm_rows(di, em_model_weight_bytes(m)), em_fwd_mm_lanes(di),
                                     &plan, &err), err);
        em_fwd_plan_scratch(hp, o.max_tokens, o.max_seqs, o.max_ctx, o.max_logits, di->max_storage_range,
                            &plan);
        CHECK(plan.part <= di->max_storage_range && plan.logits <= di->max_storage_range);
        uint64_t by_type = 0;
        for (int t = 0; t < EM_T_COUNT; t++)
            by_type += plan.weights_by_type[t];
        CHECKF(plan.weights == st.weight_bytes, "%s: planned weights %llu, allocated %llu", path,
               (unsigned long long)plan.weights, (unsigned long long)st.weight_bytes);
        CHECK(by_type == plan.weights);
        CHECKF(em_fwd_mem_scratch(&plan) == st.act_bytes, "%s: planned scratch %llu, allocated %llu", path,
               (unsigned long long)em_fwd_mem_scratch(&plan), (unsigned long long)st.act_bytes);
        uint64_t kv_main, kv_win;
        em_fwd_kv_split_bytes(hp, kv, &kv_main, &kv_win);
        uint64_t kv_plan = nbw ? 21 * kv_main + nbw * kv_win : 21 * em_fwd_kv_block_bytes(m, kv);
        CHECKF(kv_plan == st.kv_bytes, "%s: planned KV %llu, allocated %llu (window pool %u blocks)", path,
               (unsigned long long)kv_plan, (unsigned long long)st.kv_bytes, nbw);
        CHECK(kv_main + kv_win == em_fwd_kv_block_bytes(m, kv) && (kv_win > 0) == (hp->n_swa > 0));
        /* a model with BF16 tensors (run as F16) grows on the device;
         * one without pads only rows */
        CHECK(plan.weights >= em_model_weight_bytes(m) / 2);
        em_fwd_destroy(f);
    }
    /* a large vocabulary's logit rows and the split-K partials within one
     * binding: the rows that fit, none when one does not; 16 splits with
     * room, fewer without, at least one */
    em_hparams big = *hp;
    big.n_vocab = 151936;
    CHECK(em_fwd_plan_logit_rows(&big, 512, 134217728) == 134217728 / (151936 * 4));
    CHECK(em_fwd_plan_logit_rows(&big, 16, 134217728) == 16);
    CHECK(em_fwd_plan_logit_rows(&big, 16, 0) == 16);
    CHECK(em_fwd_plan_logit_rows(&big, 1, 151936 * 4 - 16) == 0);
    uint64_t unit = em_fwd_plan_part_unit(hp);
    CHECK(em_fwd_plan_max_split(hp, 512, 0) == EM_ATTN_MAX_SPLIT);
    CHECK(em_fwd_plan_max_split(hp, 512, unit * 512 * 100) == EM_ATTN_MAX_SPLIT);
    CHECK(em_fwd_plan_max_split(hp, 512, unit * 512 * 3 + 1) == 3);
    CHECK(em_fwd_plan_max_split(hp, 512, unit * 100) == 1);
    em_model_close(m);
}

int main(int argc, char **argv)
{
    if (!test_shared_dir()) {
        printf("fwd_plan: no shared models: skipped\n");
        return 77;
    }
    em_vk *vk = gpu_open("fwd_plan", NULL);
    for (int i = 1; i < argc; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s", argv[i][0] == '/' ? argv[i] : test_shared(argv[i]));
        FILE *fp = argv[i][0] == '/' ? fopen(path, "rb") : NULL;
        if (argv[i][0] == '/' && !fp) {   /* a real model: absent when set-up could not fetch it */
            printf("fwd_plan: no %s: not checked\n", path);
            continue;
        }
        if (fp)
            fclose(fp);
        check_model(vk, path);
    }
    gpu_close(vk);
    return test_summary("fwd_plan");
}
