/* sample.c — token sampling: greedy, or temperature + top-k + top-p + min-p
 * over the softmax, with a xoshiro256** PRNG seeded through splitmix64. */
#include "core/sample.h"

#include <math.h>
#include <stdlib.h>

typedef struct { float p; int32_t id; } cand;

struct em_sampler {
    em_sample_params prm;
    uint32_t         n_vocab;
    uint64_t         rng[4];
    cand            *c;        /* [n_vocab] scratch */
};

em_sample_params em_sample_defaults(void)
{
    em_sample_params p = { 0.8f, 40, 0.95f, 0.05f, 0 };
    return p;
}

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t next_u64(uint64_t s[4])
{
    uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

int em_sampler_create(const em_sample_params *p, uint32_t n_vocab, em_sampler **out, em_err *err)
{
    *out = NULL;
    if (!(p->temp >= 0 && p->temp <= 100) || p->top_k < 0 || !(p->top_p > 0 && p->top_p <= 1) ||
        !(p->min_p >= 0 && p->min_p <= 1) || n_vocab == 0)
        return em_err_set(err, EM_EINVAL,
                          "sampling: parameters out of range (temp %g, top_k %d, top_p %g, min_p %g)",
                          p->temp, p->top_k, p->top_p, p->min_p);
    em_sampler *s = calloc(1, sizeof *s);
    if (!s || !(s->c = malloc((size_t)n_vocab * sizeof *s->c))) {
        free(s);
        return em_err_set(err, EM_ENOMEM, "sampling: out of memory");
    }
    s->prm = *p;
    s->n_vocab = n_vocab;
    uint64_t x = p->seed;
    for (int i = 0; i < 4; i++)
        s->rng[i] = splitmix64(&x);
    *out = s;
    return 0;
}

void em_sampler_destroy(em_sampler *s)
{
    if (!s)
        return;
    free(s->c);
    free(s);
}

int32_t em_argmax(const float *v, uint32_t n)
{
    int32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (v[i] > v[best])
            best = (int32_t)i;
    return best;
}

static int cmp_cand(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->p != y->p)
        return x->p < y->p ? 1 : -1;
    return x->id < y->id ? -1 : x->id > y->id;
}

int32_t em_sampler_sample(em_sampler *s, const float *logits)
{
    const em_sample_params *p = &s->prm;
    uint32_t n = s->n_vocab;
    if (p->temp == 0 || p->top_k == 1)
        return em_argmax(logits, n);

    /* softmax of logits / temp */
    float max = logits[em_argmax(logits, n)];
    double sum = 0;
    for (uint32_t i = 0; i < n; i++) {
        float e = expf((logits[i] - max) / p->temp);
        s->c[i].p = e;
        s->c[i].id = (int32_t)i;
        sum += e;
    }
    for (uint32_t i = 0; i < n; i++)
        s->c[i].p = (float)(s->c[i].p / sum);

    /* min-p needs only p_max; drop before sorting to keep the sort short */
    uint32_t m = n;
    if (p->min_p > 0) {
        float pmax = (float)(1.0 / sum);   /* the argmax had exp(0) = 1 */
        float floor_p = p->min_p * pmax;
        uint32_t k = 0;
        for (uint32_t i = 0; i < m; i++)
            if (s->c[i].p >= floor_p)
                s->c[k++] = s->c[i];
        m = k;
    }
    if (m == 0)   /* NaN logits keep nothing (no p compares >= floor): the argmax, not c[-1] */
        return em_argmax(logits, n);
    qsort(s->c, m, sizeof *s->c, cmp_cand);
    if (p->top_k > 0 && (uint32_t)p->top_k < m)
        m = (uint32_t)p->top_k;
    if (p->top_p < 1) {
        double cum = 0;
        uint32_t k = 0;
        while (k < m) {
            cum += s->c[k++].p;
            if (cum >= p->top_p)
                break;
        }
        m = k;
    }
    double total = 0;
    for (uint32_t i = 0; i < m; i++)
        total += s->c[i].p;
    double r = (double)(next_u64(s->rng) >> 11) * (1.0 / 9007199254740992.0) * total;
    double acc = 0;
    for (uint32_t i = 0; i < m; i++) {
        acc += s->c[i].p;
        if (r < acc)
            return s->c[i].id;
    }
    return s->c[m - 1].id;
}
