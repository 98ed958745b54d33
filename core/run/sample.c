/* sample.c — token sampling: the penalties over a sparse record of the
 * tokens a sequence has seen and logit_bias on a copy of the logits, then
 * greedy, or temperature + top-k + top-p + min-p over the softmax with a
 * xoshiro256** PRNG seeded through splitmix64; log-probabilities and the
 * most likely alternatives on request. */
#include "core/run/sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct { float p; int32_t id; } cand;

/* A token the sequence has seen: open addressing, id -1 = empty. */
typedef struct {
    int32_t  id;
    uint32_t n_gen;      /* times generated */
    uint8_t  in_prompt;
    float    bias;       /* logit_bias */
} seen;

struct em_sampler {
    em_sample_params prm;
    uint32_t         n_vocab;
    uint64_t         rng[4];
    cand            *c;        /* [n_vocab] scratch */
    float           *adj;      /* [n_vocab] the logits after penalties and bias (when any) */
    em_logit_bias   *bias;     /* prm.logit_bias, owned */
    seen            *tab;      /* [cap], cap a power of two */
    uint32_t         cap, used;
    int              penalize;
};

em_sample_params em_sample_defaults(void)
{
    em_sample_params p = { .temp = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f, .repetition_penalty = 1 };
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

static uint32_t slot_of(const em_sampler *s, int32_t id)
{
    uint32_t h = ((uint32_t)id * 0x9e3779b1u) & (s->cap - 1);
    while (s->tab[h].id != id && s->tab[h].id != -1)
        h = (h + 1) & (s->cap - 1);
    return h;
}

/* The table's entry of id, made when new (the table kept at most half
 * full); NULL when it cannot grow. */
static seen *entry(em_sampler *s, int32_t id)
{
    if (2 * (s->used + 1) > s->cap) {
        uint32_t cap = s->cap ? s->cap * 2 : 256;
        seen *t = malloc(cap * sizeof *t), *old = s->tab;
        if (!t)
            return NULL;
        for (uint32_t i = 0; i < cap; i++)
            t[i].id = -1;
        uint32_t old_cap = s->cap;
        s->tab = t;
        s->cap = cap;
        for (uint32_t i = 0; i < old_cap; i++)
            if (old[i].id != -1)
                s->tab[slot_of(s, old[i].id)] = old[i];
        free(old);
    }
    seen *e = &s->tab[slot_of(s, id)];
    if (e->id == -1) {
        *e = (seen){ .id = id };
        s->used++;
    }
    return e;
}

int em_sampler_create(const em_sample_params *p, uint32_t n_vocab, em_sampler **out, em_err *err)
{
    *out = NULL;
    if (!(p->temp >= 0 && p->temp <= 100) || p->top_k < 0 || !(p->top_p > 0 && p->top_p <= 1) ||
        !(p->min_p >= 0 && p->min_p <= 1) || n_vocab == 0)
        return em_err_set(err, EM_EINVAL,
                          "sampling: parameters out of range (temp %g, top_k %d, top_p %g, min_p %g)",
                          p->temp, p->top_k, p->top_p, p->min_p);
    if (!(p->presence_penalty >= -2 && p->presence_penalty <= 2))
        return em_err_set(err, EM_EINVAL, "sampling: presence_penalty %g is not in [-2, 2]", p->presence_penalty);
    if (!(p->frequency_penalty >= -2 && p->frequency_penalty <= 2))
        return em_err_set(err, EM_EINVAL, "sampling: frequency_penalty %g is not in [-2, 2]", p->frequency_penalty);
    if (!(p->repetition_penalty >= 0 && p->repetition_penalty <= 10))
        return em_err_set(err, EM_EINVAL, "sampling: repetition_penalty %g is not in (0, 10] (0: off)",
                          p->repetition_penalty);
    if (p->n_logit_bias > EM_SAMPLE_MAX_BIAS)
        return em_err_set(err, EM_EINVAL, "sampling: %u logit_bias entries (at most %d)", p->n_logit_bias,
                          EM_SAMPLE_MAX_BIAS);
    for (uint32_t i = 0; i < p->n_logit_bias; i++) {
        const em_logit_bias *b = &p->logit_bias[i];
        if (b->id < 0 || (uint32_t)b->id >= n_vocab)
            return em_err_set(err, EM_EINVAL, "sampling: logit_bias names token %d, past the vocabulary of %u",
                              b->id, n_vocab);
        if (!(b->bias >= -100 && b->bias <= 100))
            return em_err_set(err, EM_EINVAL, "sampling: logit_bias of token %d is %g (it must be in [-100, 100])",
                              b->id, b->bias);
    }
    em_sampler *s = calloc(1, sizeof *s);
    int penalize = p->presence_penalty != 0 || p->frequency_penalty != 0 ||
                   (p->repetition_penalty != 0 && p->repetition_penalty != 1);
    if (!s || !(s->c = malloc((size_t)n_vocab * sizeof *s->c)) ||
        ((penalize || p->n_logit_bias) && !(s->adj = malloc((size_t)n_vocab * sizeof *s->adj))) ||
        (p->n_logit_bias && !(s->bias = malloc(p->n_logit_bias * sizeof *s->bias)))) {
        em_sampler_destroy(s);
        return em_err_set(err, EM_ENOMEM, "sampling: out of memory");
    }
    s->prm = *p;
    s->n_vocab = n_vocab;
    s->penalize = penalize;
    if (p->n_logit_bias)
        memcpy(s->bias, p->logit_bias, p->n_logit_bias * sizeof *s->bias);
    s->prm.logit_bias = s->bias;
    for (uint32_t i = 0; i < p->n_logit_bias; i++) {
        seen *e = entry(s, p->logit_bias[i].id);
        if (!e) {
            em_sampler_destroy(s);
            return em_err_set(err, EM_ENOMEM, "sampling: out of memory");
        }
        e->bias += p->logit_bias[i].bias;
    }
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
    free(s->adj);
    free(s->bias);
    free(s->tab);
    free(s);
}

int em_sampler_accept(em_sampler *s, int32_t id, int generated)
{
    if (!s->penalize || id < 0 || (uint32_t)id >= s->n_vocab)
        return 0;
    seen *e = entry(s, id);
    if (!e)
        return EM_ENOMEM;
    if (generated)
        e->n_gen++;
    else
        e->in_prompt = 1;
    return 0;
}

void em_sampler_forget(em_sampler *s)
{
    for (uint32_t i = 0; i < s->cap; i++) {   /* the biased ids stay */
        s->tab[i].n_gen = 0;
        s->tab[i].in_prompt = 0;
    }
}

/* What the penalties and the bias make of a seen token: x becomes
 * (rep != 1 ? (x > 0 ? x / rep : x * rep) : x) - sub. 0 when nothing. */
static int adj_of(const em_sampler *s, const seen *e, float *rep, float *sub)
{
    const em_sample_params *p = &s->prm;
    float rp = p->repetition_penalty;
    *rep = (e->n_gen || e->in_prompt) && rp != 0 && rp != 1 ? rp : 1;
    *sub = (e->n_gen ? p->frequency_penalty * (float)e->n_gen + p->presence_penalty : 0) - e->bias;
    return *rep != 1 || *sub != 0;
}

uint32_t em_sampler_adjustments(const em_sampler *s, em_sample_adj *out, uint32_t cap)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < s->cap; i++) {
        float rep, sub;
        if (s->tab[i].id == -1 || !adj_of(s, &s->tab[i], &rep, &sub))
            continue;
        if (n < cap)
            out[n] = (em_sample_adj){ s->tab[i].id, rep, sub };
        n++;
    }
    return n;
}

float em_sampler_temp(const em_sampler *s)
{
    return s->prm.top_k == 1 ? 0 : s->prm.temp;
}

/* The logits the draw sees: a copy with the penalties and the bias applied
 * (only the seen and the biased tokens change) and the tokens outside
 * allow at -inf, or the logits themselves. */
static const float *steered(em_sampler *s, const float *logits, const uint32_t *allow)
{
    if (!s->adj && !allow)
        return logits;
    if (!s->adj && !(s->adj = malloc((size_t)s->n_vocab * sizeof *s->adj)))
        return logits;   /* out of memory: unmasked rather than nothing (em_sampler_sample_lp masks after) */
    memcpy(s->adj, logits, (size_t)s->n_vocab * sizeof *s->adj);
    for (uint32_t i = 0; i < s->cap; i++) {
        float rep, sub;
        if (s->tab[i].id == -1 || !adj_of(s, &s->tab[i], &rep, &sub))
            continue;
        float *x = &s->adj[s->tab[i].id];
        if (rep != 1)
            *x = *x > 0 ? *x / rep : *x * rep;
        *x -= sub;
    }
    for (uint32_t w = 0; allow && w < (s->n_vocab + 31) / 32; w++) {
        if (allow[w] == 0xffffffffu)
            continue;
        for (uint32_t b = 0; b < 32 && w * 32 + b < s->n_vocab; b++)
            if (!(allow[w] >> b & 1))
                s->adj[w * 32 + b] = -INFINITY;
    }
    return s->adj;
}

/* log-softmax figures of x: the chosen id's, and the n_top largest. */
static void logprobs(const em_sampler *s, const float *x, int32_t chosen, uint32_t n_top, em_sample_lp *lp)
{
    uint32_t n = s->n_vocab;
    float max = x[em_argmax(x, n)];
    double sum = 0;
    for (uint32_t i = 0; i < n; i++)
        sum += exp((double)x[i] - max);
    double lse = max + log(sum);
    lp->logprob = (float)(x[chosen] - lse);
    if (n_top > EM_SAMPLE_MAX_TOP)
        n_top = EM_SAMPLE_MAX_TOP;
    if (n_top > n)
        n_top = n;
    /* the n_top largest by insertion into a short sorted list (ties: lower id first) */
    uint32_t k = 0;
    for (uint32_t i = 0; i < n && n_top; i++) {
        float v = x[i];
        if (!(v == v))
            continue;   /* NaN */
        if (k == n_top && !(v > x[lp->top_id[k - 1]]))
            continue;
        uint32_t j = k < n_top ? k++ : k - 1;
        while (j > 0 && v > x[lp->top_id[j - 1]]) {
            lp->top_id[j] = lp->top_id[j - 1];
            j--;
        }
        lp->top_id[j] = (int32_t)i;
    }
    lp->n_top = k;
    for (uint32_t i = 0; i < k; i++)
        lp->top_lp[i] = (float)(x[lp->top_id[i]] - lse);
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

/* Move the k first (by cmp_cand) of c[lo, hi) to c[lo, lo + k), in any
 * order: quickselect, Lomuto partitions around a median-of-three pivot
 * (each pass shrinks the range, whatever the comparisons say of NaNs). */
static void select_first(cand *c, uint32_t lo, uint32_t hi, uint32_t k)
{
    uint32_t want = lo + k;
    while (hi - lo > 1 && want > lo && want < hi) {
        uint32_t mid = lo + (hi - lo) / 2, last = hi - 1;
        if (cmp_cand(&c[mid], &c[lo]) < 0) { cand t = c[mid]; c[mid] = c[lo]; c[lo] = t; }
        if (cmp_cand(&c[last], &c[lo]) < 0) { cand t = c[last]; c[last] = c[lo]; c[lo] = t; }
        if (cmp_cand(&c[mid], &c[last]) < 0) { cand t = c[mid]; c[mid] = c[last]; c[last] = t; }
        cand piv = c[last];   /* the median of the three */
        uint32_t st = lo;
        for (uint32_t i = lo; i < last; i++)
            if (cmp_cand(&c[i], &piv) < 0) {
                cand t = c[i]; c[i] = c[st]; c[st] = t;
                st++;
            }
        cand t = c[st]; c[st] = c[last]; c[last] = t;
        if (st == want || st + 1 == want)
            return;
        if (st > want)
            hi = st;
        else
            lo = st + 1;
    }
}

/* Make c[0, need) the need first of c[0, m) in order, c[0, *sorted) being
 * so already: the next block (at least doubling) selected, then sorted. */
static void sort_prefix(cand *c, uint32_t *sorted, uint32_t need, uint32_t m)
{
    if (need <= *sorted)
        return;
    uint32_t end = *sorted * 2 > need ? *sorted * 2 : need;
    end = end < 64 ? 64 : end;
    end = end > m ? m : end;
    select_first(c, *sorted, m, end - *sorted);
    qsort(c + *sorted, end - *sorted, sizeof *c, cmp_cand);
    *sorted = end;
}

/* The distribution the draw is from, over the steered logits: s->c[0, m)
 * the kept tokens with their probabilities before renormalising by total,
 * sorted as far as *sorted. Returns 1 with *id the answer when there is
 * nothing to draw (greedy, or nothing kept: the argmax). */
static int kept_set(em_sampler *s, const float *logits, uint32_t *m_out, uint32_t *sorted_out, double *total_out,
                    int32_t *id)
{
    const em_sample_params *p = &s->prm;
    uint32_t n = s->n_vocab;
    if (p->temp == 0 || p->top_k == 1) {
        *id = em_argmax(logits, n);
        return 1;
    }

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
    if (m == 0) {   /* NaN logits keep nothing (no p compares >= floor): the argmax, not c[-1] */
        *id = em_argmax(logits, n);
        return 1;
    }
    /* the candidates in descending order, sorted only as far as the walk
     * needs: top-k, the top-p prefix and the draw usually stop within the
     * first few dozen of a 50k vocabulary (a full sort cost 14 ms a token) */
    uint32_t sorted = 0;
    if (p->top_k > 0 && (uint32_t)p->top_k < m) {
        sort_prefix(s->c, &sorted, (uint32_t)p->top_k, m);
        m = (uint32_t)p->top_k;
    }
    if (p->top_p < 1) {
        double cum = 0;
        uint32_t k = 0;
        while (k < m) {
            sort_prefix(s->c, &sorted, k + 1, m);
            cum += s->c[k++].p;
            if (cum >= p->top_p)
                break;
        }
        m = k;
    }
    double total = 0;
    for (uint32_t i = 0; i < m; i++)
        total += s->c[i].p;
    *m_out = m;
    *sorted_out = sorted;
    *total_out = total;
    return 0;
}

/* The draw over the steered logits. */
static int32_t draw(em_sampler *s, const float *logits)
{
    uint32_t m, sorted;
    double total;
    int32_t id;
    if (kept_set(s, logits, &m, &sorted, &total, &id))
        return id;
    double r = (double)(next_u64(s->rng) >> 11) * (1.0 / 9007199254740992.0) * total;
    double acc = 0;
    int32_t last = s->c[0].id;   /* the last with some mass: rounding can leave r past the walk's sum */
    for (uint32_t i = 0; i < m; i++) {
        sort_prefix(s->c, &sorted, i + 1, m);
        acc += s->c[i].p;
        if (r < acc)
            return s->c[i].id;
        if (s->c[i].p > 0)
            last = s->c[i].id;
        else
            break;   /* descending: only zeros (masked, underflowed) follow */
    }
    return last;
}

int32_t em_sampler_sample(em_sampler *s, const float *logits)
{
    return draw(s, steered(s, logits, NULL));
}

int32_t em_sampler_sample_lp(em_sampler *s, const float *logits, const uint32_t *allow, uint32_t n_top,
                             em_sample_lp *lp)
{
    const float *x = steered(s, logits, allow);
    if (allow && x == logits)
        return -1;   /* could not mask: no token rather than a forbidden one */
    int32_t id = draw(s, x);
    if (lp)
        logprobs(s, x, id, n_top, lp);
    return id;
}

int32_t em_sampler_sample_steered(em_sampler *s, const float *row, uint32_t n_top, em_sample_lp *lp)
{
    int32_t id = draw(s, row);
    if (lp)
        logprobs(s, row, id, n_top, lp);
    return id;
}

/* The first of c[0, n) (sorted, descending) whose p is not above the last
 * one's: how many are sure to precede every token outside them. */
static uint32_t above_last(const cand *c, uint32_t n)
{
    uint32_t k = n;
    while (k > 0 && !(c[k - 1].p > c[n - 1].p))
        k--;
    return k;
}

int32_t em_sampler_sample_top(em_sampler *s, const em_sample_top *top, uint32_t n_top, em_sample_lp *lp)
{
    const em_sample_params *p = &s->prm;
    uint32_t n = top->n < EM_SAMPLE_TOPK ? top->n : EM_SAMPLE_TOPK;
    if (n == 0 || !isfinite(top->max))
        return -1;
    int whole = n >= s->n_vocab;   /* the candidates are the whole row */
    /* by value (descending, lowest id on ties): the greedy pick, logprobs */
    cand v[EM_SAMPLE_TOPK];
    for (uint32_t i = 0; i < n; i++)
        v[i] = (cand){ top->val[i], top->id[i] };
    qsort(v, n, sizeof *v, cmp_cand);
    uint32_t v_safe = whole ? n : above_last(v, n);
    float temp = em_sampler_temp(s);
    int32_t id = -1;
    uint64_t saved[4];
    memcpy(saved, s->rng, sizeof saved);
    if (temp == 0) {
        id = top->argmax >= 0 && (uint32_t)top->argmax < s->n_vocab ? top->argmax : 0;
    } else {
        /* as draw(): p = expf((x - max) / T) / sum in the host's order (p
         * descending, lowest id on ties), then min-p, top-k, top-p, the
         * walk, as far as the candidates surely first go */
        double sum = top->sum_t;
        if (!(sum > 0))
            return -1;
        cand c[EM_SAMPLE_TOPK];
        for (uint32_t i = 0; i < n; i++)
            c[i] = (cand){ (float)(expf((v[i].p - top->max) / temp) / sum), v[i].id };
        qsort(c, n, sizeof *c, cmp_cand);
        uint32_t safe = whole ? n : above_last(c, n);
        uint32_t m = safe;      /* what is known of the kept set */
        int m_whole = whole;    /* m is all of it */
        if (p->min_p > 0) {
            float floor_p = p->min_p * (float)(1.0 / sum);
            uint32_t k = 0;
            while (k < safe && c[k].p >= floor_p)
                k++;
            if (k < safe) {
                if (k == 0)
                    return -1;   /* nothing kept: the host's rule, on the row */
                m = k;
                m_whole = 1;
            }
        }
        if (p->top_k > 0 && (uint32_t)p->top_k <= m) {
            m = (uint32_t)p->top_k;
            m_whole = 1;
        }
        if (p->top_p < 1) {
            double cum = 0;
            uint32_t k = 0;
            while (k < m && cum < p->top_p)
                cum += c[k++].p;
            if (cum >= p->top_p) {
                m = k;
                m_whole = 1;
            }
        }
        double total = 0;
        if (m_whole)
            for (uint32_t i = 0; i < m; i++)
                total += c[i].p;
        else if (p->top_k == 0 && p->top_p >= 1 && p->min_p <= 0)
            total = 1;   /* nothing filtered: the p add up to 1 (the host's sum, up to rounding) */
        else
            return -1;   /* a filter reaches past the candidates */
        double r = (double)(next_u64(s->rng) >> 11) * (1.0 / 9007199254740992.0) * total;
        double acc = 0;
        for (uint32_t i = 0; i < m && id < 0; i++) {
            acc += c[i].p;
            if (r < acc)
                id = c[i].id;
        }
        if (id < 0 && m_whole && m > 0)
            id = c[m - 1].id;   /* rounding left r past the kept set's sum */
    }
    if (id >= 0 && lp) {
        uint32_t want = n_top > EM_SAMPLE_MAX_TOP ? EM_SAMPLE_MAX_TOP : n_top;
        want = want > n ? n : want;
        float chosen = NAN;
        for (uint32_t i = 0; i < n; i++)
            if (v[i].id == id)
                chosen = v[i].p;
        if (want > v_safe || !(chosen == chosen)) {
            id = -1;
        } else {
            double lse = top->max + log(top->sum1);
            lp->logprob = (float)(chosen - lse);
            lp->n_top = want;
            for (uint32_t i = 0; i < want; i++) {
                lp->top_id[i] = v[i].id;
                lp->top_lp[i] = (float)(v[i].p - lse);
            }
        }
    }
    if (id < 0)
        memcpy(s->rng, saved, sizeof saved);   /* the row's draw takes the same number */
    return id;
}

int32_t em_sampler_verify(em_sampler *s, const float *logits, int is_steered, int32_t draft, int *accepted)
{
    const float *x = is_steered ? logits : steered(s, logits, NULL);
    uint32_t m, sorted;
    double total;
    int32_t id;
    *accepted = 0;
    if (kept_set(s, x, &m, &sorted, &total, &id)) {
        *accepted = id == draft;
        return id;
    }
    sort_prefix(s->c, &sorted, m, m);
    uint32_t at = m;   /* the draft among the kept tokens */
    for (uint32_t i = 0; i < m && at == m; i++)
        if (s->c[i].id == draft)
            at = i;
    double pd = at < m ? s->c[at].p : 0;
    double u = (double)(next_u64(s->rng) >> 11) * (1.0 / 9007199254740992.0);
    if (at < m && u * total < pd) {   /* accepted with probability p(draft) */
        *accepted = 1;
        return draft;
    }
    /* rejected: a draw from the rest, renormalised (the residual of p less
     * the draft's point mass) */
    double rest = total - pd;
    if (!(rest > 0))
        return draft;   /* p(draft) = 1: never rejected but for rounding */
    double r = (double)(next_u64(s->rng) >> 11) * (1.0 / 9007199254740992.0) * rest, acc = 0;
    int32_t last = -1;
    for (uint32_t i = 0; i < m; i++) {
        if (i == at)
            continue;
        acc += s->c[i].p;
        if (r < acc)
            return s->c[i].id;
        if (s->c[i].p > 0)
            last = s->c[i].id;
    }
    return last >= 0 ? last : draft;
}

/* ---- a draft model's proposals (speculative decoding) ---- */

void em_sampler_dist(em_sampler *s, const float *logits, int is_steered, float *p)
{
    const float *x = is_steered ? logits : steered(s, logits, NULL);
    uint32_t m, sorted;
    double total;
    int32_t id;
    memset(p, 0, (size_t)s->n_vocab * sizeof *p);
    if (kept_set(s, x, &m, &sorted, &total, &id)) {
        p[id] = 1;
        return;
    }
    for (uint32_t i = 0; i < m; i++)
        p[s->c[i].id] = (float)(s->c[i].p / total);
}

int32_t em_sampler_draw_dist(em_sampler *s, const float *p)
{
    if (s->prm.temp == 0 || s->prm.top_k == 1)
        return em_argmax(p, s->n_vocab);   /* one-hot: no draw, as greedy takes none */
    double r = (double)(next_u64(s->rng) >> 11) * (1.0 / 9007199254740992.0), acc = 0;
    int32_t last = -1;
    for (uint32_t i = 0; i < s->n_vocab; i++) {
        if (!(p[i] > 0))
            continue;
        acc += p[i];
        if (r < acc)
            return (int32_t)i;
        last = (int32_t)i;
    }
    return last >= 0 ? last : em_argmax(p, s->n_vocab);
}

int32_t em_sampler_verify_dist(em_sampler *s, const float *logits, int is_steered, int32_t draft, const float *q,
                               int *accepted)
{
    const float *x = is_steered ? logits : steered(s, logits, NULL);
    uint32_t m, sorted;
    double total;
    int32_t id;
    *accepted = 0;
    if (kept_set(s, x, &m, &sorted, &total, &id)) {   /* greedy: kept when it is the argmax */
        *accepted = id == draft;
        return id;
    }
    double pd = 0;
    for (uint32_t i = 0; i < m; i++)
        if (s->c[i].id == draft) {
            pd = s->c[i].p / total;
            break;
        }
    double qd = draft >= 0 && (uint32_t)draft < s->n_vocab ? q[draft] : 0;
    double u = (double)(next_u64(s->rng) >> 11) * (1.0 / 9007199254740992.0);
    if (pd > 0 && u * qd < pd) {   /* kept with probability min(1, p / q) */
        *accepted = 1;
        return draft;
    }
    /* rejected: a draw from the residual max(p - q, 0), renormalised; only
     * tokens the target keeps have p > 0 */
    double rest = 0;
    for (uint32_t i = 0; i < m; i++) {
        double d = s->c[i].p / total - q[s->c[i].id];
        rest += d > 0 ? d : 0;
    }
    if (!(rest > 0))
        return draft;   /* p = q: never rejected but for rounding */
    double r = (double)(next_u64(s->rng) >> 11) * (1.0 / 9007199254740992.0) * rest, acc = 0;
    int32_t last = -1;
    for (uint32_t i = 0; i < m; i++) {
        double d = s->c[i].p / total - q[s->c[i].id];
        if (!(d > 0))
            continue;
        acc += d;
        if (r < acc)
            return s->c[i].id;
        last = s->c[i].id;
    }
    return last >= 0 ? last : draft;
}

uint32_t em_prompt_lookup(const int32_t *t, uint32_t n, uint32_t k, int32_t *out)
{
    for (uint32_t g = 3; g >= 1; g--) {
        if (n < g + 1)
            continue;
        for (uint32_t at = n - g; at-- > 0;) {
            if (memcmp(t + at, t + n - g, g * sizeof *t) != 0)
                continue;
            uint32_t m = 0;
            while (m < k && at + g + m < n) {
                out[m] = t[at + g + m];
                m++;
            }
            if (m)
                return m;
        }
    }
    return 0;
}
