/* cmd_logits.c — `ember logits`: feed a token sequence and write the logits
 * after every position as raw little-endian float32 [n_tokens][n_vocab]
 * (the layout of ../shared/golden/logits). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/gpu/engine.h"
#include "core/gpu/forward.h"
#include "core/model/model.h"
#include "firmware/cli.h"

static const char usage[] =
    "usage: ember logits --model PATH --tokens-file F --output OUT [--backend vulkan|cpu]\n"
    "                    [--kv-type f16|q8_0]\n"
    "  Reads whitespace-separated token ids from F and writes float32\n"
    "  [n_tokens][n_vocab] logits (row i: after feeding tokens 0..i) to OUT.\n";

int em_cmd_logits(int argc, char **argv)
{
    const char *model_path = NULL, *tokens_path = NULL, *out_path = NULL, *backend_name = "vulkan", *kv_name = "f16";
    em_cli_opt opts[] = {
        { "--model", "-m", EM_OPT_STR, &model_path, 0, 0 },
        { "--tokens-file", NULL, EM_OPT_STR, &tokens_path, 0, 0 },
        { "--output", "-o", EM_OPT_STR, &out_path, 0, 0 },
        { "--backend", NULL, EM_OPT_STR, &backend_name, 0, 0 },
        { "--kv-type", NULL, EM_OPT_STR, &kv_name, 0, 0 },
        { NULL, NULL, 0, NULL, 0, 0 },
    };
    int rc = em_cli_parse("logits", argc, argv, opts, NULL, 0, NULL, usage);
    if (rc)
        return rc;
    if (!model_path || !tokens_path || !out_path)
        return em_cli_fail(2, "logits: --model, --tokens-file and --output are required");
    em_err err = { 0 };
    em_backend backend;
    em_engine_opts eo = { 0 };
    if (em_backend_parse(backend_name, &backend, &err) || em_fwd_kv_type_parse(kv_name, &eo.kv_type, &err) ||
        em_cli_check_out_path("--output", out_path, &err))
        return em_cli_fail(2, "logits: %s", err.msg);

    em_model *m = NULL;
    em_engine *eng = NULL;
    char *text = NULL;
    int32_t *ids = NULL;
    float *logits = NULL;
    FILE *f = NULL;
    size_t n_ids = 0, len;
    int status = 0;
    char tmp_path[4096 + 32] = "";

    if ((rc = em_cli_read_file(tokens_path, &text, &len, &err)) ||
        (rc = em_cli_parse_ids(text, len, tokens_path, &ids, &n_ids, &err)) ||
        (rc = em_model_open(model_path, &m, &err))) {
        status = em_cli_fail_err(&err);
        goto done;
    }
    if (n_ids == 0) {
        status = em_cli_fail(2, "logits: %s: no token ids", tokens_path);
        goto done;
    }
    const em_hparams *hp = em_model_hparams(m);
    for (size_t i = 0; i < n_ids; i++) {
        if ((uint32_t)ids[i] >= hp->n_vocab) {
            status = em_cli_fail(2, "logits: %s: token %zu (id %d) is out of range: the vocabulary has %u tokens",
                                 tokens_path, i + 1, ids[i], hp->n_vocab);
            goto done;
        }
    }
    if ((rc = em_engine_create(m, backend, (uint32_t)n_ids, &eo, &eng, &err))) {
        status = em_cli_fail_err(&err);
        goto done;
    }
    em_cli_warn_ctx("logits", (uint32_t)n_ids, hp->n_ctx_train);   /* the context is the token list */
    enum { CHUNK = 64 };   /* positions per evaluation: bounds the logits buffer */
    logits = malloc((size_t)CHUNK * hp->n_vocab * sizeof *logits);
    /* written beside OUT and renamed at the end: a failed run leaves OUT as it was */
    snprintf(tmp_path, sizeof tmp_path, "%s.tmp.%ld", out_path, (long)getpid());
    f = fopen(tmp_path, "wb");
    if (!logits || !f) {
        status = em_cli_fail(1, "logits: %s: %s", tmp_path, logits ? strerror(errno) : "out of memory");
        goto done;
    }
    for (size_t i = 0; i < n_ids; i += CHUNK) {
        size_t n = n_ids - i < CHUNK ? n_ids - i : CHUNK;
        if ((rc = em_engine_eval(eng, ids + i, (uint32_t)n, (uint32_t)i, logits, 1, &err))) {
            status = em_cli_fail_err(&err);
            goto done;
        }
        if ((status = em_cli_finite_logits("logits", model_path, logits, n, hp->n_vocab, i)))
            goto done;
        if (fwrite(logits, sizeof(float) * hp->n_vocab, n, f) != n) {
            status = em_cli_fail(1, "logits: %s: write failed: %s", out_path, strerror(errno));
            goto done;
        }
    }
    if ((rc = em_engine_check(eng, &err))) {
        status = em_cli_fail_err(&err);
        goto done;
    }
    if (fclose(f) != 0) {
        f = NULL;
        status = em_cli_fail(1, "logits: %s: write failed: %s", out_path, strerror(errno));
        goto done;
    }
    f = NULL;
    if (rename(tmp_path, out_path) != 0) {
        status = em_cli_fail(1, "logits: %s: %s", out_path, strerror(errno));
        goto done;
    }
    tmp_path[0] = '\0';
done:
    if (f)
        fclose(f);
    if (tmp_path[0])
        remove(tmp_path);
    free(logits);
    em_engine_destroy(eng);
    em_model_close(m);
    free(ids);
    free(text);
    return status;
}
