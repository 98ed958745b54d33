/* cmd_selftest.c — `ember selftest`: the known-answer check `ember serve`
 * runs at boot (core/gpu/selftest.h), on its own: the model's forward pass on
 * the Vulkan device against the CPU reference, stage by stage, printed as a
 * table (or one JSON object); exit 0 when every stage passes, 1 when one
 * does not (naming it, the device and the figures), 2 for bad input. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/gpu/forward.h"
#include "core/gpu/selftest.h"
#include "core/model/model.h"
#include "core/run/kv.h"
#include "core/text/tokenizer.h"
#include "core/vk/vk.h"
#include "firmware/cli.h"
#include "web/web.h"

static const char usage[] =
    "usage: ember selftest [--model PATH] [--kv-type f16|q8_0] [--json]\n"
    "  Runs the model's kernels on the Vulkan device (EMBER_DEVICE=N picks one) on\n"
    "  fixed tokens and checks the logits against the CPU reference: a prompt step\n"
    "  (prefill), single-token steps (decode) and a step mixing two sequences\n"
    "  (batch), each within NMSE 1e-3. The same check `ember serve` runs before it\n"
    "  serves. Exit 0: every stage passed; 1: one did not (or the device failed).\n";

int em_cmd_selftest(int argc, char **argv)
{
    const char *model_path = NULL, *kv_name = "f16";
    int as_json = 0;
    em_cli_opt opts[] = {
        { "--model", "-m", EM_OPT_STR, &model_path, 0, 0 },
        { "--kv-type", NULL, EM_OPT_STR, &kv_name, 0, 0 },
        { "--json", NULL, EM_OPT_FLAG, &as_json, 0, 0 },
        { NULL, NULL, 0, NULL, 0, 0 },
    };
    int rc = em_cli_parse("selftest", argc, argv, opts, NULL, 0, NULL, usage);
    if (rc)
        return rc < 0 ? 0 : rc;
    em_err err = { 0 };
    uint32_t kv_type;
    if (em_fwd_kv_type_parse(kv_name, &kv_type, &err))
        return em_cli_fail(2, "selftest: %s", err.msg);
    char default_path[4096];
    if (!model_path) {
        if (em_cli_default_model(default_path, sizeof default_path, &err))
            return em_cli_fail(2, "selftest: %s", err.msg);
        model_path = default_path;
        em_cli_note("using model %s", model_path);
    }
    em_model *m = NULL;
    em_tokenizer *tok = NULL;
    em_vk *vk = NULL;
    em_fwd *fwd = NULL;
    int status;
    if ((status = em_cli_open_model("selftest", model_path, &m, &tok)))
        goto done;
    em_vk_opts vo = EM_VK_OPTS_INIT;
    if (em_vk_create(&vo, &vk, &err)) {
        status = em_cli_fail_err(&err);
        goto done;
    }
    em_fwd_opts fo = { .max_tokens = 16, .max_seqs = 2, .max_ctx = 4 * EM_KV_BLOCK, .max_logits = 16,
                       .kv_type = kv_type };
    if (em_fwd_create(vk, m, &fo, &fwd, &err)) {
        status = em_cli_fail_err(&err);
        goto done;
    }
    em_selftest_report rep;
    if (em_selftest_run(fwd, m, &rep, &err)) {
        status = em_cli_fail(1, "selftest: %s", err.msg);
        goto done;
    }
    const em_vk_dev_info *di = em_vk_info(vk);
    if (as_json) {
        json_t *j = em_selftest_json(&rep);
        json_object_set_new(j, "device", json_sprintf("%s (%s)", di->name, di->type_name));
        json_object_set_new(j, "variant", json_string(em_fwd_variant(fwd)));
        json_object_set_new(j, "kv_type", json_string(em_fwd_kv_type_name(kv_type)));
        char *s = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        json_decref(j);
        if (s)
            puts(s);
        free(s);
    } else {
        printf("self-test on %s (%s), %s, KV %s\n", di->name, di->type_name, em_fwd_variant(fwd),
               em_fwd_kv_type_name(kv_type));
        printf("%-8s %5s %11s %8s %10s  %s\n", "stage", "rows", "NMSE", "limit", "device ms", "result");
        for (int i = 0; i < EM_SELFTEST_N; i++) {
            const em_selftest_stage_result *s = &rep.stage[i];
            if (!s->ran) {
                printf("%-8s %5s %11s %8s %10s  skipped: %s\n", s->name, "-", "-", "-", "-", s->skipped);
                continue;
            }
            printf("%-8s %5u %11.3e %8.0e %10.1f  %s\n", s->name, s->rows, s->nmse, EM_SELFTEST_NMSE,
                   s->device_ms, s->ok ? "ok" : "FAILED");
        }
        printf("%-32s %11s %8s  %s\n", "kernel (alone)", "NMSE", "limit", "result");
        for (uint32_t i = 0; i < rep.n_kernels; i++) {
            const em_selftest_kernel_result *k = &rep.kernel[i];
            printf("%-32s %11.3e %8.0e  %s\n", k->name, k->nmse, EM_SELFTEST_KERNEL_NMSE, k->ok ? "ok" : "FAILED");
        }
        printf("other kernels (checked by the stages): %s\n", rep.others[0] ? rep.others : "none");
        printf("CPU reference %.1f ms, kernel checks %.1f ms, total %.1f ms\n", rep.ref_ms, rep.kernels_ms,
               rep.total_ms);
    }
    fflush(stdout);
    status = rep.ok ? 0 : em_cli_fail(1, "selftest: on %s (%s), %s", di->name, di->type_name, rep.failure);
done:
    em_fwd_destroy(fwd);
    em_vk_destroy(vk);
    em_tokenizer_destroy(tok);
    em_model_close(m);
    return status;
}
