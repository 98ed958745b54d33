/* ppl_eval.c — scoring for `ember perplexity`: log-softmax of one position,
 * the top-K base record and KL divergence against it, running statistics,
 * and the base-logits file (layout in docs/QUANTIZATION.md):
 *
 *   offset 0   char[8]  "EMBASELP"
 *          8   u32      version (1)
 *         12   u32      n_vocab
 *         16   u32      n_ctx        window length in tokens
 *         20   u32      n_windows
 *         24   u32      n_scored     positions scored per window (n_ctx - 1 - n_ctx/2)
 *         28   u32      k            log-probs kept per position
 *         32   i32      tokens[n_windows][n_ctx]   the ids evaluated (BOS first)
 *          …   record   [n_windows][n_scored], each 8 + 8k bytes:
 *                f32 lp_target, f32 lp_tail, i32 ids[k], f32 lp[k]
 * All little-endian. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/grow.h"
#include "firmware/ppl.h"

static const char base_magic[8] = { 'E', 'M', 'B', 'A', 'S', 'E', 'L', 'P' };
enum { BASE_VERSION = 1, BASE_HEADER = 32 };

double em_ppl_logsumexp(const float *logits, uint32_t n)
{
    float mx = logits[0];
    for (uint32_t i = 1; i < n; i++)
        mx = logits[i] > mx ? logits[i] : mx;
    double s = 0;
    for (uint32_t i = 0; i < n; i++)
        s += exp((double)logits[i] - mx);
    return mx + log(s);
}

/* a ranks above b: higher logit, or the same logit and a lower id */
static int above(const float *l, int32_t a, int32_t b)
{
    return l[a] > l[b] || (l[a] == l[b] && a < b);
}

/* Min-heap (worst on top) of h[0..n) ids under above(). */
static void sift_down(const float *l, int32_t *h, uint32_t n, uint32_t i)
{
    for (;;) {
        uint32_t w = i, c1 = 2 * i + 1, c2 = 2 * i + 2;
        if (c1 < n && above(l, h[w], h[c1]))
            w = c1;
        if (c2 < n && above(l, h[w], h[c2]))
            w = c2;
        if (w == i)
            return;
        int32_t t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

/* ids[0..k): the k best tokens, best first (all n, the best first, when k >= n). */
static uint32_t top_k(const float *l, uint32_t n, uint32_t k, int32_t *ids)
{
    if (k >= n) {                 /* everything: ids in order, the best swapped to the front */
        uint32_t best = 0;
        for (uint32_t i = 0; i < n; i++) {
            ids[i] = (int32_t)i;
            if (above(l, (int32_t)i, (int32_t)best))
                best = i;
        }
        ids[best] = 0;
        ids[0] = (int32_t)best;
        return n;
    }
    for (uint32_t i = 0; i < k; i++)
        ids[i] = (int32_t)i;
    for (uint32_t i = k / 2; i-- > 0;)
        sift_down(l, ids, k, i);
    for (uint32_t i = k; i < n; i++) {
        if (above(l, (int32_t)i, ids[0])) {
            ids[0] = (int32_t)i;
            sift_down(l, ids, k, 0);
        }
    }
    for (uint32_t m = k; m > 1; m--) {     /* heap sort: worst to the back */
        int32_t t = ids[0];
        ids[0] = ids[m - 1];
        ids[m - 1] = t;
        sift_down(l, ids, m - 1, 0);
    }
    return k;
}

/* Log-probs of ids[0..k) and the log of the remaining mass, for logits l. */
static void log_probs(const float *l, uint32_t n, const int32_t *ids, uint32_t k,
                      float *lp, float *lp_tail, double *lse_out)
{
    float mx = l[0];
    for (uint32_t i = 1; i < n; i++)
        mx = l[i] > mx ? l[i] : mx;
    double all = 0, in = 0;
    for (uint32_t i = 0; i < n; i++)
        all += exp((double)l[i] - mx);
    for (uint32_t i = 0; i < k; i++)
        in += exp((double)l[ids[i]] - mx);
    double lse = mx + log(all);
    for (uint32_t i = 0; i < k; i++)
        lp[i] = (float)((double)l[ids[i]] - lse);
    double tail = all - in;
    *lp_tail = k < n && tail > 0 ? (float)log(tail / all) : -INFINITY;
    if (lse_out)
        *lse_out = lse;
}

uint32_t em_ppl_record(const float *logits, uint32_t n_vocab, uint32_t k, int32_t target,
                       int32_t *ids, float *lp, float *lp_tail, float *lp_target)
{
    k = top_k(logits, n_vocab, k, ids);
    double lse;
    log_probs(logits, n_vocab, ids, k, lp, lp_tail, &lse);
    *lp_target = (float)((double)logits[target] - lse);
    return k;
}

double em_ppl_kl(const int32_t *ids, const float *lp, float lp_tail, uint32_t k,
                 const float *logits, uint32_t n_vocab, float *lq)
{
    float lq_tail;
    log_probs(logits, n_vocab, ids, k, lq, &lq_tail, NULL);
    double kl = 0;
    for (uint32_t i = 0; i < k; i++)
        kl += exp((double)lp[i]) * ((double)lp[i] - (double)lq[i]);
    if (isfinite(lp_tail))
        kl += exp((double)lp_tail) * ((double)lp_tail - (double)lq_tail);
    return kl;
}

/* ---- statistics ----------------------------------------------------------- */

void em_ppl_stats_free(em_ppl_stats *s)
{
    free(s->kl);
    s->kl = NULL;
    s->kl_n = s->kl_cap = 0;
}

void em_ppl_add_nll(em_ppl_stats *s, double nll)
{
    s->nll_sum += nll;
    s->nll2_sum += nll * nll;
    s->n++;
}

int em_ppl_add_kl(em_ppl_stats *s, double kl, int same_top)
{
    if (em_grow((void **)&s->kl, &s->kl_cap, s->kl_n, sizeof *s->kl, 4096))
        return EM_ENOMEM;
    s->kl[s->kl_n++] = (float)kl;
    s->kl_sum += kl;
    s->kl2_sum += kl * kl;
    s->top_same += same_top != 0;
    return 0;
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* sqrt(variance / (n - 1)) from sums, 0 when it cannot be estimated */
static double std_err(double sum, double sum2, uint64_t n)
{
    if (n < 2)
        return 0;
    double mean = sum / (double)n, var = sum2 / (double)n - mean * mean;
    return var > 0 ? sqrt(var / (double)(n - 1)) : 0;
}

void em_ppl_result_of(em_ppl_stats *s, em_ppl_result *r)
{
    memset(r, 0, sizeof *r);
    if (s->n) {
        double mean = s->nll_sum / (double)s->n;
        r->ppl = exp(mean);
        r->ppl_se = r->ppl * std_err(s->nll_sum, s->nll2_sum, s->n);
    }
    if (s->kl_n) {
        r->has_kl = 1;
        r->kl_mean = s->kl_sum / (double)s->kl_n;
        r->kl_se = std_err(s->kl_sum, s->kl2_sum, s->kl_n);
        qsort(s->kl, s->kl_n, sizeof *s->kl, cmp_float);
        uint64_t i99 = (uint64_t)ceil(0.99 * (double)s->kl_n);
        r->kl_p99 = s->kl[i99 ? i99 - 1 : 0];
        r->kl_max = s->kl[s->kl_n - 1];
        r->top1 = (double)s->top_same / (double)s->kl_n;
        r->top1_se = s->kl_n > 1 ? sqrt(r->top1 * (1 - r->top1) / (double)(s->kl_n - 1)) : 0;
    }
}

/* ---- base logits ---------------------------------------------------------- */

static uint8_t *rec_at(const em_ppl_base *b, size_t i) { return b->recs + i * b->rec_bytes; }

float em_ppl_rec_target(const em_ppl_base *b, size_t i)
{
    float v;
    memcpy(&v, rec_at(b, i), 4);
    return v;
}

float em_ppl_rec_tail(const em_ppl_base *b, size_t i)
{
    float v;
    memcpy(&v, rec_at(b, i) + 4, 4);
    return v;
}

const int32_t *em_ppl_rec_ids(const em_ppl_base *b, size_t i)
{
    return (const int32_t *)(const void *)(rec_at(b, i) + 8);
}

const float *em_ppl_rec_lp(const em_ppl_base *b, size_t i)
{
    return (const float *)(const void *)(rec_at(b, i) + 8 + 4 * (size_t)b->k);
}

void em_ppl_base_free(em_ppl_base *b)
{
    free(b->tokens);
    free(b->recs);
    memset(b, 0, sizeof *b);
}

int em_ppl_base_init(em_ppl_base *b, uint32_t n_vocab, uint32_t n_ctx, uint32_t n_windows,
                     uint32_t k, em_err *err)
{
    memset(b, 0, sizeof *b);
    b->n_vocab = n_vocab;
    b->n_ctx = n_ctx;
    b->n_windows = n_windows;
    b->n_scored = n_ctx - 1 - n_ctx / 2;
    b->k = k < n_vocab ? k : n_vocab;
    b->rec_bytes = 8 + 8 * (size_t)b->k;
    double need = (double)n_windows * b->n_scored * (double)b->rec_bytes;
    double ram = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    if (ram > 0 && need > ram / 2)
        return em_err_set(err, EM_ENOMEM, "perplexity: keeping %u log-probs for each of %llu positions takes "
                          "%.1f GiB, more than half of this machine's memory; lower --kl-top-k",
                          b->k, (unsigned long long)n_windows * b->n_scored, need / (1 << 30));
    b->tokens = calloc((size_t)n_windows * n_ctx, sizeof *b->tokens);
    b->recs = calloc((size_t)n_windows * b->n_scored, b->rec_bytes);
    if (!b->tokens || !b->recs) {
        em_ppl_base_free(b);
        return em_err_set(err, EM_ENOMEM, "perplexity: out of memory for the base log-probs "
                          "(%u windows x %u positions x %u tokens); lower --kl-top-k",
                          n_windows, n_ctx, k);
    }
    return 0;
}

void em_ppl_base_set(em_ppl_base *b, size_t i, const float *logits, int32_t target)
{
    uint8_t *r = rec_at(b, i);
    float tail, tgt;
    em_ppl_record(logits, b->n_vocab, b->k, target, (int32_t *)(void *)(r + 8),
                  (float *)(void *)(r + 8 + 4 * (size_t)b->k), &tail, &tgt);
    memcpy(r, &tgt, 4);
    memcpy(r + 4, &tail, 4);
}

int em_ppl_base_save(const em_ppl_base *b, const char *path, em_err *err)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return em_err_set(err, errno == ENOENT ? EM_ENOENT : EM_EIO, "%s: %s", path, strerror(errno));
    uint32_t hdr[6] = { BASE_VERSION, b->n_vocab, b->n_ctx, b->n_windows, b->n_scored, b->k };
    size_t nt = (size_t)b->n_windows * b->n_ctx, nr = (size_t)b->n_windows * b->n_scored;
    int ok = fwrite(base_magic, 1, 8, f) == 8 && fwrite(hdr, 4, 6, f) == 6 &&
             fwrite(b->tokens, 4, nt, f) == nt && fwrite(b->recs, b->rec_bytes, nr, f) == nr;
    if (fclose(f) != 0)
        ok = 0;
    if (!ok) {
        remove(path);
        return em_err_set(err, EM_EIO, "%s: write failed", path);
    }
    return 0;
}

int em_ppl_base_load(const char *path, em_ppl_base *b, em_err *err)
{
    memset(b, 0, sizeof *b);
    FILE *f = fopen(path, "rb");
    if (!f)
        return em_err_set(err, errno == ENOENT ? EM_ENOENT : EM_EIO, "%s: %s", path, strerror(errno));
    char magic[8];
    uint32_t h[6];
    struct stat st;
    int rc = 0;
    if (fstat(fileno(f), &st) != 0 || fread(magic, 1, 8, f) != 8 || fread(h, 4, 6, f) != 6 ||
        memcmp(magic, base_magic, 8) != 0) {
        rc = em_err_set(err, EM_EFORMAT, "%s: not a base log-probs file (see ember perplexity --save-logits)", path);
        goto done;
    }
    if (h[0] != BASE_VERSION) {
        rc = em_err_set(err, EM_EFORMAT, "%s: base log-probs version %u (this ember reads %u)", path, h[0],
                        BASE_VERSION);
        goto done;
    }
    uint32_t n_vocab = h[1], n_ctx = h[2], nw = h[3], ns = h[4], k = h[5];
    if (n_vocab == 0 || n_ctx < 4 || n_ctx > (1u << 20) || nw == 0 || nw > (1u << 24) ||
        ns != n_ctx - 1 - n_ctx / 2 || k == 0 || k > n_vocab) {
        rc = em_err_set(err, EM_EFORMAT, "%s: inconsistent header (vocab %u, ctx %u, windows %u, scored %u, k %u)",
                        path, n_vocab, n_ctx, nw, ns, k);
        goto done;
    }
    double want = BASE_HEADER + 4.0 * nw * n_ctx + (double)nw * ns * (8.0 + 8.0 * k);
    if ((double)st.st_size != want) {
        rc = em_err_set(err, EM_EFORMAT, "%s: %lld bytes, expected %.0f for its header", path,
                        (long long)st.st_size, want);
        goto done;
    }
    if ((rc = em_ppl_base_init(b, n_vocab, n_ctx, nw, k, err)))
        goto done;
    size_t nt = (size_t)nw * n_ctx, nr = (size_t)nw * ns;
    if (fread(b->tokens, 4, nt, f) != nt || fread(b->recs, b->rec_bytes, nr, f) != nr) {
        rc = em_err_set(err, EM_EIO, "%s: read failed", path);
        goto done;
    }
    for (size_t i = 0; i < nt && !rc; i++)
        if (b->tokens[i] < 0 || (uint32_t)b->tokens[i] >= n_vocab)
            rc = em_err_set(err, EM_EFORMAT, "%s: token %zu (id %d) is out of range", path, i, b->tokens[i]);
    for (size_t i = 0; i < nr && !rc; i++) {
        const int32_t *ids = em_ppl_rec_ids(b, i);
        for (uint32_t j = 0; j < k && !rc; j++)
            if (ids[j] < 0 || (uint32_t)ids[j] >= n_vocab)
                rc = em_err_set(err, EM_EFORMAT, "%s: record %zu holds id %d, out of range", path, i, ids[j]);
    }
done:
    fclose(f);
    if (rc)
        em_ppl_base_free(b);
    return rc;
}
