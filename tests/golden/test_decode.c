/* test_decode.c — the decode path against the logits goldens at every
 * context length: a synth model is fed the golden token sequence one token
 * per step (each step attends to all the positions before it, so a
 * 512-token sequence crosses the decode attention's split-K boundaries:
 * 256 positions on GPUs), and the logits of all steps together must be
 * within the NMSE limit of the golden file, which the reference made in one
 * prefill. For F32/F16 models (LIMIT <= 1e-5) also requires every row's
 * top token to agree with the golden row's unless the two are within 1e-3
 * logits there (a near-tie); a quantized synth model's random logits have
 * near-ties of a few hundredths, inside its 1e-3 NMSE, so there only the
 * agreement is printed.
 * usage: test_decode MODEL N BACKEND LIMIT
 *   (models/synth/MODEL.gguf, golden/logits/tokens-N.txt, MODEL.tN.f32) */
#include <math.h>
#include <stdint.h>

#include "core/run/sample.h"
#include "tests/golden/golden_engine.h"

int main(int argc, char **argv)
{
    int rc = golden_start(argc, 5, "test_decode MODEL N BACKEND LIMIT");
    if (rc >= 0)
        return rc;
    const char *model = argv[1];
    int n = atoi(argv[2]);
    double limit = atof(argv[4]);
    if (n <= 0 || limit <= 0) {
        fprintf(stderr, "test_decode: bad N or LIMIT\n");
        return 2;
    }
    char path[1024], mpath[1024];
    snprintf(path, sizeof path, "golden/logits/tokens-%d.txt", n);
    char *text = test_read_file(test_shared(path), NULL);
    snprintf(path, sizeof path, "golden/logits/%s.t%d.f32", model, n);
    size_t gold_bytes = 0;
    float *gold = (float *)test_read_file(test_shared(path), &gold_bytes);
    snprintf(path, sizeof path, "models/synth/%s.gguf", model);
    snprintf(mpath, sizeof mpath, "%s", test_shared(path));
    if (!text || !gold) {
        fprintf(stderr, "test_decode: cannot read the golden tokens or logits\n");
        return 1;
    }
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    int nt = golden_read_ids(text, NULL, ids, n);
    CHECKF(nt == n, "%d ids in the token file, expected %d", nt, n);

    em_model *m;
    em_engine *e;
    em_err err = { 0 };
    if ((rc = golden_engine_open(mpath, argv[3], (uint32_t)n, &m, &e)))
        return rc;
    uint32_t V = em_model_hparams(m)->n_vocab;
    int sized = gold_bytes == (size_t)n * V * sizeof(float);
    CHECKF(sized, "golden file of %zu bytes for %d x %u logits", gold_bytes, n, V);
    float *lg = malloc((size_t)V * sizeof *lg);
    double num = 0, den = 0;
    int top_agree = 0, ties = 0;
    for (int i = 0; i < nt && sized; i++) {
        if (em_engine_eval(e, &ids[i], 1, (uint32_t)i, lg, 0, &err)) {
            CHECKF(0, "step %d: %s", i, err.msg);
            break;
        }
        const float *g = gold + (size_t)i * V;
        for (uint32_t v = 0; v < V; v++) {
            CHECKF(isfinite(lg[v]), "step %d: logit %u is not finite", i, v);
            double d = (double)lg[v] - g[v];
            num += d * d;
            den += (double)g[v] * g[v];
        }
        int32_t ours = em_argmax(lg, V), theirs = em_argmax(g, V);
        if (ours == theirs)
            top_agree++;
        else if (fabs((double)g[ours] - g[theirs]) <= 1e-3 || limit > 1e-5)
            ties++;
        else
            CHECKF(0, "step %d: top token %d, golden %d (%.4f vs %.4f there)", i, ours, theirs,
                   (double)g[ours], (double)g[theirs]);
    }
    double nmse = den > 0 ? num / den : num;
    printf("%s (%s, one token per step): nmse %.3e over %d steps; top token agrees at %d, not at %d\n",
           model, argv[3], nmse, nt, top_agree, ties);
    CHECKF(nmse < limit, "nmse %.3e >= %.1e", nmse, limit);
    free(lg);
    free(ids);
    free(gold);
    free(text);
    em_engine_destroy(e);
    em_model_close(m);
    return test_summary("decode");
}
