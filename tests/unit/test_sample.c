/* test_sample.c — the sampler (core/sample.c): greedy is the argmax, a
 * seed reproduces its picks, filters keep only what they should (top-k,
 * top-p and min-p over logits of known probability mass: excluded ids never
 * drawn, kept ids in proportion), and
 * hostile logits (NaN, infinities) still give an id in range instead of a
 * crash (a model of NaN weights used to crash `ember run` here). */
#include <math.h>

#include "core/sample.h"
#include "tests/common/testutil.h"

#define NV 64

static em_sampler *make(float temp, int32_t top_k, float top_p, float min_p, uint64_t seed)
{
    em_sample_params p = em_sample_defaults();
    p.temp = temp;
    p.top_k = top_k;
    p.top_p = top_p;
    p.min_p = min_p;
    p.seed = seed;
    em_sampler *s = NULL;
    em_err err = { 0 };
    int rc = em_sampler_create(&p, NV, &s, &err);
    CHECKF(rc == 0, "em_sampler_create: %s", err.msg);
    return s;
}

int main(void)
{
    float lg[NV];
    for (int i = 0; i < NV; i++)
        lg[i] = (float)((i * 37) % NV) / 8.0f;   /* distinct; the largest (63/8) at i = 63 * 37^-1 */
    int32_t am = em_argmax(lg, NV);
    CHECK(lg[am] == 63.0f / 8.0f);

    em_sampler *g = make(0, 40, 0.95f, 0.05f, 1);
    CHECK(em_sampler_sample(g, lg) == am);
    em_sampler_destroy(g);

    /* the same seed, the same picks; top-k 3 keeps the three largest */
    em_sampler *a = make(1.5f, 3, 1.0f, 0, 42), *b = make(1.5f, 3, 1.0f, 0, 42);
    int seen_other = 0;
    for (int i = 0; i < 200; i++) {
        int32_t x = em_sampler_sample(a, lg), y = em_sampler_sample(b, lg);
        CHECKF(x == y, "draw %d: %d vs %d with one seed", i, x, y);
        CHECKF(lg[x] >= 61.0f / 8.0f, "draw %d: id %d (logit %g) is not in the top 3", i, x, (double)lg[x]);
        seen_other += x != am;
    }
    CHECK(seen_other > 0);   /* temperature 1.5 over three close logits does move */
    em_sampler_destroy(a);
    em_sampler_destroy(b);

    /* top-p and min-p (the defaults of every sampled run) over logits of
     * known probability mass: 0.5, 0.3, 0.15, and 0.05 spread over the
     * other 61 ids. Excluded ids are never drawn; the kept ones in
     * proportion to their renormalised mass. */
    static const struct {
        float   top_p, min_p;
        int32_t top_k;
        int     kept;        /* ids 0..kept-1 survive */
    } filt[] = {
        { 0.75f, 0, 0, 2 },     /* 0.5 + 0.3 >= 0.75: stop after two */
        { 0.9f, 0, 0, 3 },      /* 0.95 >= 0.9 */
        { 0.4f, 0, 0, 1 },      /* the top token alone covers 0.4 */
        { 1.0f, 0.2f, 0, 3 },   /* floor 0.1: drops the 0.05 tail */
        { 1.0f, 0.7f, 0, 1 },   /* floor 0.35: only 0.5 stays */
        { 1.0f, 0.55f, 0, 2 },  /* floor 0.275 keeps 0.3 */
        { 0.9f, 0.55f, 0, 2 },  /* both: min-p is the tighter */
        { 0.99f, 0.01f, 2, 2 }, /* top-k tighter than both */
    };
    float mass[NV];
    mass[0] = 0.5f;
    mass[1] = 0.3f;
    mass[2] = 0.15f;
    for (int i = 3; i < NV; i++)
        mass[i] = 0.05f / (NV - 3);
    float known[NV];
    for (int i = 0; i < NV; i++)
        known[i] = logf(mass[i]);
    for (size_t f = 0; f < sizeof filt / sizeof filt[0]; f++) {
        em_sampler *s = make(1.0f, filt[f].top_k, filt[f].top_p, filt[f].min_p, 1000 + f);
        enum { DRAWS = 4000 };
        int count[NV] = { 0 };
        for (int i = 0; i < DRAWS; i++) {
            int32_t id = em_sampler_sample(s, known);
            CHECKF(id >= 0 && id < NV, "filter %zu: id %d", f, id);
            if (id >= 0 && id < NV)
                count[id]++;
        }
        double kept_mass = 0;
        for (int i = 0; i < filt[f].kept; i++)
            kept_mass += mass[i];
        int outside = 0;
        for (int i = filt[f].kept; i < NV; i++)
            outside += count[i];
        CHECKF(outside == 0, "top_p %g min_p %g top_k %d: %d of %d draws outside the %d kept ids",
               (double)filt[f].top_p, (double)filt[f].min_p, filt[f].top_k, outside, DRAWS, filt[f].kept);
        for (int i = 0; i < filt[f].kept; i++) {
            double want = mass[i] / kept_mass, got = (double)count[i] / DRAWS;
            double sigma = sqrt(want * (1 - want) / DRAWS);
            CHECKF(fabs(got - want) <= 5 * sigma + 1e-9,
                   "top_p %g min_p %g top_k %d: id %d drawn %.4f of the time, expected %.4f",
                   (double)filt[f].top_p, (double)filt[f].min_p, filt[f].top_k, i, got, want);
        }
        em_sampler_destroy(s);
    }

    /* hostile logits: every sampler setting returns an id in range */
    float bad[4][NV];
    for (int i = 0; i < NV; i++) {
        bad[0][i] = NAN;
        bad[1][i] = i == 5 ? NAN : (float)i;
        bad[2][i] = -INFINITY;
        bad[3][i] = i == 9 ? INFINITY : 0.0f;
    }
    const float temps[3] = { 0, 0.8f, 2.0f };
    for (int c = 0; c < 4; c++)
        for (int t = 0; t < 3; t++) {
            em_sampler *s = make(temps[t], t == 2 ? 0 : 40, t == 2 ? 1.0f : 0.95f, t == 2 ? 0 : 0.05f, 7);
            for (int i = 0; i < 20; i++) {
                int32_t id = em_sampler_sample(s, bad[c]);
                CHECKF(id >= 0 && id < NV, "case %d temp %g: id %d", c, (double)temps[t], id);
            }
            em_sampler_destroy(s);
        }
    return test_summary("sample");
}
