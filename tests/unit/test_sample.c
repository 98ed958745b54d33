/* test_sample.c — the sampler (core/run/sample.c): greedy is the argmax, a
 * seed reproduces its picks, filters keep only what they should (top-k,
 * top-p and min-p over logits of known probability mass: excluded ids never
 * drawn, kept ids in proportion), and
 * hostile logits (NaN, infinities) still give an id in range instead of a
 * crash (a model of NaN weights used to crash `ember run` here); the
 * penalties and logit_bias change exactly the logits they should (checked
 * through the log-probabilities against a log-softmax computed here), the
 * top alternatives come sorted, and out-of-range parameters are refused by
 * name. */
#include <math.h>
#include <string.h>

#include "core/run/sample.h"
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

/* log-softmax of x[id] over NV values, in double */
static double lsm(const double *x, int id)
{
    double m = x[0], sum = 0;
    for (int i = 1; i < NV; i++)
        m = x[i] > m ? x[i] : m;
    for (int i = 0; i < NV; i++)
        sum += exp(x[i] - m);
    return x[id] - m - log(sum);
}

static void test_steering(void)
{
    float lg[NV];
    double want[NV];
    for (int i = 0; i < NV; i++)
        lg[i] = (float)((i * 37) % NV) / 8.0f - 3.0f;   /* negative and positive logits */
    em_logit_bias bias[2] = { { 5, 2.5f }, { 9, -100 } };
    em_sample_params p = em_sample_defaults();
    p.temp = 0;
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    p.repetition_penalty = 1.5f;
    p.logit_bias = bias;
    p.n_logit_bias = 2;
    em_sampler *s = NULL;
    em_err err = { 0 };
    CHECKF(em_sampler_create(&p, NV, &s, &err) == 0, "%s", err.msg);
    bias[0].bias = 50;   /* copied at create: later changes do not reach the sampler */
    /* seen: 3 in the prompt; 7 generated twice; 11 in the prompt and generated once */
    CHECK(em_sampler_accept(s, 3, 0) == 0 && em_sampler_accept(s, 7, 1) == 0 && em_sampler_accept(s, 7, 1) == 0 &&
          em_sampler_accept(s, 11, 0) == 0 && em_sampler_accept(s, 11, 1) == 0);
    for (int i = 0; i < NV; i++) {
        double x = lg[i];
        if (i == 3 || i == 7 || i == 11)
            x = x > 0 ? x / 1.5 : x * 1.5;
        if (i == 7)
            x -= 0.25 * 2 + 0.5;
        if (i == 11)
            x -= 0.25 * 1 + 0.5;
        if (i == 5)
            x += 2.5;
        if (i == 9)
            x -= 100;
        want[i] = x;
    }
    em_sample_lp lp;
    int32_t id = em_sampler_sample_lp(s, lg, NULL, 20, &lp);
    int best = 0;
    for (int i = 1; i < NV; i++)
        best = want[i] > want[best] ? i : best;
    CHECKF(id == best, "greedy over the steered logits: %d, want %d", id, best);
    CHECKF(fabs(lp.logprob - lsm(want, id)) < 1e-5, "logprob %g, want %g", (double)lp.logprob, lsm(want, id));
    CHECK(lp.n_top == 20 && lp.top_id[0] == id);
    for (uint32_t k = 0; k < lp.n_top; k++) {
        CHECKF(fabs(lp.top_lp[k] - lsm(want, lp.top_id[k])) < 1e-5, "top %u: id %d logprob %g, want %g", k,
               lp.top_id[k], (double)lp.top_lp[k], lsm(want, lp.top_id[k]));
        if (k)
            CHECK(lp.top_lp[k] <= lp.top_lp[k - 1]);
    }
    /* every token not in the list is no more likely than its last one */
    for (int i = 0; i < NV; i++) {
        int in = 0;
        for (uint32_t k = 0; k < lp.n_top; k++)
            in |= lp.top_id[k] == i;
        CHECK(in || lsm(want, i) <= lp.top_lp[lp.n_top - 1] + 1e-6);
    }
    /* the input logits are not modified */
    CHECK(lg[7] == (float)((7 * 37) % NV) / 8.0f - 3.0f);
    /* forget: only the bias stays */
    em_sampler_forget(s);
    id = em_sampler_sample_lp(s, lg, NULL, 0, &lp);
    double plain[NV];
    int pbest = 0;
    for (int i = 0; i < NV; i++) {
        plain[i] = lg[i] + (i == 5 ? 2.5 : i == 9 ? -100 : 0);
        pbest = plain[i] > plain[pbest] ? i : pbest;
    }
    CHECKF(id == pbest && lp.n_top == 0 && fabs(lp.logprob - lsm(plain, id)) < 1e-5,
           "after forget: %d (logprob %g), want %d (%g)", id, (double)lp.logprob, pbest, lsm(plain, pbest));
    em_sampler_destroy(s);

    /* a banned token is never drawn, however hot */
    em_logit_bias ban = { em_argmax(lg, NV), -100 };
    p = em_sample_defaults();
    p.temp = 2;
    p.top_k = 0;
    p.top_p = 1;
    p.min_p = 0;
    p.logit_bias = &ban;
    p.n_logit_bias = 1;
    CHECK(em_sampler_create(&p, NV, &s, &err) == 0);
    for (int i = 0; i < 500; i++)
        CHECK(em_sampler_sample(s, lg) != ban.id);
    em_sampler_destroy(s);

    /* out of range: refused, the parameter named */
    static const struct { float pres, freq, rep; int32_t id; float b; const char *name; } bad[] = {
        { 2.5f, 0, 1, 0, 0, "presence_penalty" }, { 0, -2.5f, 1, 0, 0, "frequency_penalty" },
        { 0, 0, 11, 0, 0, "repetition_penalty" }, { 0, 0, 1, NV, 1, "vocabulary" }, { 0, 0, 1, 1, 101, "[-100, 100]" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        em_logit_bias b = { bad[i].id, bad[i].b };
        p = em_sample_defaults();
        p.presence_penalty = bad[i].pres;
        p.frequency_penalty = bad[i].freq;
        p.repetition_penalty = bad[i].rep;
        p.logit_bias = &b;
        p.n_logit_bias = bad[i].b != 0;
        em_err e2 = { 0 };
        s = NULL;
        CHECKF(em_sampler_create(&p, NV, &s, &e2) == EM_EINVAL && !s && strstr(e2.msg, bad[i].name),
               "case %zu: %s", i, e2.msg);
    }
}

/* What shaders/topk.comp reports of a steered row, computed here. */
static void top_of(const float *x, uint32_t n, float temp, int32_t *ids, float *vals, em_sample_top *t)
{
    int32_t am = em_argmax(x, n);
    double s1 = 0, st = 0;
    for (uint32_t i = 0; i < n; i++) {
        s1 += exp((double)x[i] - x[am]);
        st += temp > 0 ? exp(((double)x[i] - x[am]) / temp) : 0;
    }
    /* the K largest, ties: lowest ids (a stable selection by value) */
    uint32_t k = n < EM_SAMPLE_TOPK ? n : EM_SAMPLE_TOPK;
    uint8_t taken[4096] = { 0 };
    for (uint32_t j = 0; j < k; j++) {
        int32_t best = -1;
        for (uint32_t i = 0; i < n; i++)
            if (!taken[i] && (best < 0 || x[i] > x[best]))
                best = (int32_t)i;
        taken[best] = 1;
        ids[j] = best;
        vals[j] = x[best];
    }
    /* shuffle, as the kernel's order is not sorted */
    for (uint32_t j = 0; j + 1 < k; j += 2) {
        int32_t ti = ids[j]; ids[j] = ids[j + 1]; ids[j + 1] = ti;
        float tv = vals[j]; vals[j] = vals[j + 1]; vals[j + 1] = tv;
    }
    *t = (em_sample_top){ x[am], am, (float)s1, (float)st, k, ids, vals };
}

/* em_sampler_sample_top against em_sampler_sample_lp on the same row: the
 * same ids (and log-probabilities) draw after draw, or -1 and then the
 * steered row gives the host's pick. */
static void test_top(void)
{
    enum { N = 3000 };
    static float lg[N], row[N];
    uint64_t x = 12345;
    for (int i = 0; i < N; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        lg[i] = (float)(-6 + 14 * pow((double)(x >> 11) / 9007199254740992.0, 5));
        if (i % 97 == 0)
            lg[i] = lg[i - i % 194];   /* ties */
    }
    static const struct { float temp; int32_t top_k; float top_p, min_p; uint32_t n_top; } cases[] = {
        { 0, 0, 1, 0, 5 }, { 1, 0, 1, 0, 0 }, { 0.8f, 40, 0.95f, 0.05f, 3 }, { 1.2f, 10, 1, 0, 20 },
        { 1, 0, 0.5f, 0, 0 }, { 1, 0, 1, 0.1f, 0 }, { 3, 0, 1, 0, 2 }, { 1, 100, 1, 0, 0 },
    };
    uint32_t allow[(N + 31) / 32];
    for (uint32_t w = 0; w < (N + 31) / 32; w++)
        allow[w] = 0xf0f0f0f0u ^ (w * 2654435761u);
    em_logit_bias bias[2] = { { 17, 3 }, { 40, -100 } };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        for (int masked = 0; masked < 2; masked++) {
            em_sample_params p = em_sample_defaults();
            p.temp = cases[ci].temp;
            p.top_k = cases[ci].top_k;
            p.top_p = cases[ci].top_p;
            p.min_p = cases[ci].min_p;
            p.seed = 99 + ci;
            p.frequency_penalty = 0.3f;
            p.repetition_penalty = 1.2f;
            p.logit_bias = bias;
            p.n_logit_bias = 2;
            em_sampler *a = NULL, *b = NULL;
            CHECK(em_sampler_create(&p, N, &a, NULL) == 0 && em_sampler_create(&p, N, &b, NULL) == 0);
            int fell_back = 0;
            for (int d = 0; d < 300; d++) {
                em_sample_lp la, lb;
                int32_t want = em_sampler_sample_lp(a, lg, masked ? allow : NULL, cases[ci].n_top, &la);
                /* the row as the kernel leaves it: steered by the adjustments, masked */
                em_sample_adj adj[4096];
                uint32_t na = em_sampler_adjustments(b, adj, 4096);
                memcpy(row, lg, sizeof row);
                for (uint32_t i = 0; i < na; i++) {
                    float *v = &row[adj[i].id];
                    if (adj[i].rep != 1)
                        *v = *v > 0 ? *v / adj[i].rep : *v * adj[i].rep;
                    *v -= adj[i].sub;
                }
                for (int i = 0; masked && i < N; i++)
                    if (!(allow[i / 32] >> (i % 32) & 1))
                        row[i] = -INFINITY;
                int32_t ids[EM_SAMPLE_TOPK];
                float vals[EM_SAMPLE_TOPK];
                em_sample_top t;
                top_of(row, N, em_sampler_temp(b), ids, vals, &t);
                int32_t got = em_sampler_sample_top(b, &t, cases[ci].n_top, &lb);
                if (got < 0) {
                    fell_back++;
                    got = em_sampler_sample_steered(b, row, cases[ci].n_top, &lb);
                }
                CHECKF(got == want, "case %zu%s draw %d: %d, the host %d", ci, masked ? " masked" : "", d, got, want);
                CHECKF(fabsf(lb.logprob - la.logprob) < 1e-4f && (cases[ci].n_top == 0 || lb.n_top == la.n_top),
                       "case %zu draw %d: logprob %g vs %g", ci, d, (double)lb.logprob, (double)la.logprob);
                for (uint32_t k = 0; k < la.n_top && k < lb.n_top; k++)
                    CHECKF(la.top_id[k] == lb.top_id[k], "case %zu draw %d: top %u %d vs %d", ci, d, k, lb.top_id[k],
                           la.top_id[k]);
                em_sampler_accept(a, want, 1);
                em_sampler_accept(b, got, 1);
            }
            /* greedy never needs the row; a peaked distribution with nothing
             * filtered seldom does (a draw into the tail past the candidates) */
            CHECKF(ci != 0 || fell_back == 0, "greedy: %d of 300 fell back to the row", fell_back);
            CHECKF(ci != 1 || fell_back < 150, "temperature 1, no filter: %d of 300 fell back to the row", fell_back);
            if (masked)
                printf("top: case %zu: %d of 300 draws needed the row\n", ci, fell_back);
            em_sampler_destroy(a);
            em_sampler_destroy(b);
        }
    }
}

/* The rejection rule with a one-token draft keeps the target's
 * distribution: verify's outputs over many draws against the softmax
 * (chi-square, 63 degrees of freedom, at a significance of 0.001: critical
 * value 103.4), for a likely and an unlikely draft, and under top-k a
 * draft outside the kept set is never accepted. */
static void test_verify(void)
{
    float lg[NV];
    for (int i = 0; i < NV; i++)
        lg[i] = (float)((i * 37) % NV) / 16.0f;
    double pr[NV], sum = 0;
    for (int i = 0; i < NV; i++)
        sum += pr[i] = exp(lg[i]);
    for (int i = 0; i < NV; i++)
        pr[i] /= sum;
    int32_t likely = em_argmax(lg, NV), unlikely = 0;
    for (int pass = 0; pass < 2; pass++) {
        em_sampler *s = make(1, 0, 1, 0, 77 + pass);
        enum { N = 40000 };
        static uint32_t hist[NV];
        memset(hist, 0, sizeof hist);
        int acc = 0;
        for (int d = 0; d < N; d++) {
            int ok;
            int32_t id = em_sampler_verify(s, lg, 0, pass ? unlikely : likely, &ok);
            hist[id]++;
            acc += ok;
        }
        double chi = 0;
        for (int i = 0; i < NV; i++)
            chi += (hist[i] - N * pr[i]) * (hist[i] - N * pr[i]) / (N * pr[i]);
        CHECKF(chi < 103.4, "verify, %s draft: chi-square %.1f over 63 df", pass ? "an unlikely" : "a likely", chi);
        double want = N * pr[pass ? unlikely : likely];
        CHECKF(fabs(acc - want) < 5 * sqrt(want) + 1, "accepted %d times, expected %.0f", acc, want);
        em_sampler_destroy(s);
    }
    em_sampler *k = make(1, 10, 1, 0, 5);
    for (int d = 0; d < 2000; d++) {
        int ok;
        int32_t id = em_sampler_verify(k, lg, 0, unlikely, &ok);
        CHECK(!ok && id != unlikely && lg[id] >= (float)(NV - 10) / 16.0f);
    }
    em_sampler_destroy(k);
    em_sampler *g = make(0, 0, 1, 0, 5);
    int ok;
    CHECK(em_sampler_verify(g, lg, 0, likely, &ok) == likely && ok);
    CHECK(em_sampler_verify(g, lg, 0, unlikely, &ok) == likely && !ok);
    em_sampler_destroy(g);
}

/* Draft-model speculation's rejection rule: a draft drawn from another
 * distribution q (em_sampler_draw_dist over em_sampler_dist of different
 * logits, with top-k leaving tokens out of q that the target keeps), checked
 * by em_sampler_verify_dist, must leave tokens following the target's own
 * distribution. Pearson's chi-square over the 64 tokens, 63 degrees of
 * freedom, at significance 0.001 (critical value 103.4); the acceptance rate
 * against sum(min(p, q)). */
static void test_verify_dist(void)
{
    float lg[NV], dl[NV];
    for (int i = 0; i < NV; i++) {
        lg[i] = (float)((i * 37) % NV) / 16.0f;
        dl[i] = (float)((i * 11) % NV) / 12.0f;   /* the draft's: a different order */
    }
    for (int pass = 0; pass < 2; pass++) {
        /* pass 0: the target at temperature 1, the draft at 1 with top-k 20;
         * pass 1: the target with top-k 16 and top-p 0.9, the draft unfiltered */
        em_sampler *t = pass ? make(1, 16, 0.9f, 0, 91) : make(1, 0, 1, 0, 90);
        em_sampler *d = pass ? make(1, 0, 1, 0, 93) : make(1, 20, 1, 0, 92);
        static float p[NV], q[NV];
        em_sampler_dist(t, lg, 0, p);
        em_sampler_dist(d, dl, 0, q);
        double sp = 0, sq = 0, overlap = 0;
        for (int i = 0; i < NV; i++) {
            sp += p[i];
            sq += q[i];
            overlap += p[i] < q[i] ? p[i] : q[i];
        }
        CHECKF(fabs(sp - 1) < 1e-4 && fabs(sq - 1) < 1e-4, "dist sums %.6f %.6f", sp, sq);
        enum { N = 40000 };
        static uint32_t hist[NV];
        memset(hist, 0, sizeof hist);
        int acc = 0;
        for (int n = 0; n < N; n++) {
            int32_t draft = em_sampler_draw_dist(d, q), ok;
            CHECK(q[draft] > 0);
            int32_t id = em_sampler_verify_dist(t, lg, 0, draft, q, &ok);
            CHECK(p[id] > 0 && (!ok || id == draft));
            hist[id]++;
            acc += ok;
        }
        double chi = 0;
        int df = -1;
        for (int i = 0; i < NV; i++) {
            if (p[i] <= 0) {
                CHECKF(hist[i] == 0, "token %d outside the target's kept set came out %u times", i, hist[i]);
                continue;
            }
            chi += (hist[i] - N * p[i]) * (hist[i] - N * p[i]) / (N * p[i]);
            df++;
        }
        /* critical values at 0.001: 63 df 103.4, 15 df (top-k 16) 37.7; a
         * top-p set in between: Wilson-Hilferty's bound at z = 3.09 */
        double crit = df * pow(1 - 2.0 / (9 * df) + 3.09 * sqrt(2.0 / (9 * df)), 3);
        CHECKF(chi < crit, "verify_dist pass %d: chi-square %.1f over %d df (limit %.1f)", pass, chi, df, crit);
        double want = N * overlap;
        CHECKF(fabs(acc - want) < 5 * sqrt(want) + 1, "accepted %d times, expected %.0f", acc, want);
        em_sampler_destroy(t);
        em_sampler_destroy(d);
    }
    /* greedy on both sides: kept when it is the argmax, else the argmax */
    em_sampler *g = make(0, 0, 1, 0, 5), *gd = make(0, 0, 1, 0, 6);
    static float q[NV];
    em_sampler_dist(gd, dl, 0, q);
    int32_t draft = em_sampler_draw_dist(gd, q), ok;
    CHECK(draft == em_argmax(dl, NV) && q[draft] == 1);
    CHECK(em_sampler_verify_dist(g, lg, 0, draft, q, &ok) == em_argmax(lg, NV) && !ok);
    em_sampler_dist(gd, lg, 0, q);
    CHECK(em_sampler_verify_dist(g, lg, 0, em_argmax(lg, NV), q, &ok) == em_argmax(lg, NV) && ok);
    em_sampler_destroy(g);
    em_sampler_destroy(gd);
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
    test_steering();
    test_top();
    test_verify();
    test_verify_dist();
    return test_summary("sample");
}
