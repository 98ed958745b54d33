/* test_teacher.c — teacher-forced agreement with a golden greedy story
 * (or a synth model's greedy continuation: the decode path, one token per
 * step, against the reference):
 * feed the golden prompt + generated ids and, at every generated position,
 * check that the golden token is our top token, or within MARGIN logits of
 * it. This is the check for models whose reference run quantizes activations
 * to 8 bits (Q8_0): there exact greedy equality depends on near-ties, which
 * the reference's rounding decides (TinyStories-656K-Q8_0 has a 0.046 logit
 * gap out of 14 at generated token 78). Exact rounding does not settle it
 * either: a scratch emulation of the reference's x86 arithmetic (8-bit
 * activations rounded as its AVX code does, its lane order for Q8_0 and f16
 * dot products, f16 KV cache and probabilities, its vectorized exp) matches
 * all 64 rows of synth-llama-256-Q8_0.t64 bit for bit, yet puts token 78's
 * golden id 0.066 behind, so that story came from a run whose arithmetic
 * differs from the logits goldens'. Also requires an exact greedy match
 * of at least MIN_PREFIX tokens, and refuses a golden continuation of fewer
 * than MIN_DISTINCT distinct tokens.
 * usage: test_teacher MODEL BACKEND MIN_TOP_SHARE MARGIN MIN_PREFIX */
#include <stdint.h>

#include "core/run/sample.h"
#include "tests/golden/golden_engine.h"

/* the fewest distinct golden tokens a continuation must have to be checked */
#define MIN_DISTINCT 8

int main(int argc, char **argv)
{
    int rc = golden_start(argc, 6, "test_teacher MODEL BACKEND MIN_TOP_SHARE MARGIN MIN_PREFIX");
    if (rc >= 0)
        return rc;
    /* a story (prompt + 200 generated ids), or for a synth model the
     * 32-token greedy continuation of the 64-token golden sequence */
    int synth = strncmp(argv[1], "synth-", 6) == 0;
    char path[1024];
    snprintf(path, sizeof path, synth ? "golden/logits/%s.t64.txt" : "golden/stories/%s.once.ids", argv[1]);
    char *gold = test_read_file(test_shared(path), NULL);
    snprintf(path, sizeof path, synth ? "models/synth/%s.gguf" : "models/%s.gguf", argv[1]);
    char mpath[1024];
    snprintf(mpath, sizeof mpath, "%s", test_shared(path));
    if (!gold) {
        fprintf(stderr, "cannot read the golden ids\n");
        return 1;
    }
    double min_share = atof(argv[3]), margin = atof(argv[4]);
    int min_prefix = atoi(argv[5]);
    int32_t prompt[64], gen[256];
    int np = golden_read_ids(gold, "tokens:", prompt, 64), ng = golden_read_ids(gold, "greedy:", gen, 256);
    CHECK(np > 0 && ng > 0);
    /* a continuation of one or two tokens repeated (the qwen synth goldens)
     * is passed by nearly any bug that keeps the argmax: refuse it */
    int distinct = 0;
    for (int i = 0; i < ng; i++) {
        int seen = 0;
        for (int j = 0; j < i && !seen; j++)
            seen = gen[j] == gen[i];
        distinct += !seen;
    }
    if (distinct < MIN_DISTINCT) {
        fprintf(stderr, "%s: the golden continuation has %d distinct tokens (fewer than %d): "
                "teacher forcing along it checks nothing; use another model\n", argv[1], distinct,
                MIN_DISTINCT);
        return 1;
    }

    em_model *m;
    em_engine *e;
    em_err err = { 0 };
    if ((rc = golden_engine_open(mpath, argv[2], 512, &m, &e)))
        return rc;
    uint32_t V = em_model_hparams(m)->n_vocab;
    float *lg = malloc((size_t)V * sizeof *lg);

    /* 1. free-running greedy: the exact prefix */
    int prefix = 0;
    CHECK(em_engine_eval(e, prompt, (uint32_t)np, 0, lg, 0, &err) == 0);
    for (int i = 0; i < ng; i++) {
        int32_t id = em_argmax(lg, V);
        if (id != gen[i])
            break;
        prefix++;
        if (i + 1 < ng)
            CHECK(em_engine_eval(e, &id, 1, (uint32_t)(np + i), lg, 0, &err) == 0);
    }
    /* 2. teacher-forced along the golden story */
    int top = 0;
    double worst = 0;
    CHECK(em_engine_eval(e, prompt, (uint32_t)np, 0, lg, 0, &err) == 0);
    for (int i = 0; i < ng; i++) {
        int32_t best = em_argmax(lg, V);
        double gap = (double)lg[best] - lg[gen[i]];
        top += best == gen[i];
        if (gap > worst)
            worst = gap;
        CHECKF(gap <= margin, "position %d: golden token %d is %.4f below our top token %d", i, gen[i],
               gap, best);
        if (i + 1 < ng)
            CHECK(em_engine_eval(e, &gen[i], 1, (uint32_t)(np + i), lg, 0, &err) == 0);
    }
    printf("%s (%s): exact greedy prefix %d of %d; golden token on top at %d of %d positions; "
           "largest gap %.4f\n", argv[1], argv[2], prefix, ng, top, ng, worst);
    CHECKF(prefix >= min_prefix, "exact prefix %d < %d", prefix, min_prefix);
    CHECKF(top >= min_share * ng, "top share %d/%d < %.2f", top, ng, min_share);
    free(lg);
    free(gold);
    em_engine_destroy(e);
    em_model_close(m);
    return test_summary("teacher");
}
