/* ppl.h — the pieces behind `ember perplexity` (firmware/cmd_perplexity.c):
 * per-position scoring of logits, the compact record of a base model's
 * distribution that KL divergence is measured against, the base-logits file
 * (docs/QUANTIZATION.md documents its layout), running statistics, and the
 * --report outputs (table, CSV, SVG chart).
 *
 * A base record keeps, for one scored position, the log-probabilities of the
 * K most likely tokens exactly (f32), the log of the probability mass of all
 * other tokens lumped together, and the log-probability of the token that
 * actually came next. KL(base || model) is then computed over those K + 1
 * outcomes: exact when K covers the vocabulary, otherwise a lower bound that
 * misses only the divergence inside the tail. All pointers are borrowed
 * unless a comment says otherwise. */
#ifndef EM_PPL_H
#define EM_PPL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/err.h"

/* ---- one position -------------------------------------------------------- */

/* log(sum(exp(logits[0..n)))) in double, with the max taken out. */
double em_ppl_logsumexp(const float *logits, uint32_t n);

/* The record of one position from logits[n_vocab]: ids[k] / lp[k] get the k
 * most likely tokens (descending, ties by lower id; with k >= n_vocab every
 * token, the most likely first) and their log-probabilities; *lp_tail the
 * log of the remaining mass (-inf when none); *lp_target the log-probability
 * of target. Returns k (min(k, n_vocab)). */
uint32_t em_ppl_record(const float *logits, uint32_t n_vocab, uint32_t k, int32_t target,
                       int32_t *ids, float *lp, float *lp_tail, float *lp_target);

/* KL(base || model) at one position, over the base record's k tokens and
 * the lumped tail, the model's side computed from its logits[n_vocab] the
 * same way the record was made (so identical logits give exactly 0).
 * lq[k] is scratch. */
double em_ppl_kl(const int32_t *ids, const float *lp, float lp_tail, uint32_t k,
                 const float *logits, uint32_t n_vocab, float *lq);

/* ---- running statistics -------------------------------------------------- */

typedef struct {
    double   nll_sum, nll2_sum;    /* -log p(next token) */
    uint64_t n;                    /* scored positions */
    double   kl_sum, kl2_sum;
    float   *kl;                   /* [kl_cap] every position's KL (owned), for percentiles */
    size_t   kl_n, kl_cap;
    uint64_t top_same;             /* positions where base and model agree on the top token */
} em_ppl_stats;

void em_ppl_stats_free(em_ppl_stats *s);          /* frees s->kl; s itself is the caller's */
void em_ppl_add_nll(em_ppl_stats *s, double nll);
int  em_ppl_add_kl(em_ppl_stats *s, double kl, int same_top);   /* EM_ENOMEM */

typedef struct {
    double ppl, ppl_se;            /* perplexity and its standard error */
    double kl_mean, kl_se, kl_p99, kl_max;
    double top1, top1_se;          /* share of positions, 0..1 */
    int    has_kl;
} em_ppl_result;

/* Summarize s (sorts s->kl). */
void em_ppl_result_of(em_ppl_stats *s, em_ppl_result *r);

/* ---- base logits file ---------------------------------------------------- */

typedef struct {
    uint32_t n_vocab, n_ctx, n_windows, n_scored, k;
    int32_t *tokens;               /* [n_windows][n_ctx] the ids evaluated (owned) */
    uint8_t *recs;                 /* [n_windows * n_scored] records (owned) */
    size_t   rec_bytes;            /* 8 + 8k */
} em_ppl_base;

/* A record's fields: lp_target, lp_tail, ids[k], lp[k]. */
float          em_ppl_rec_target(const em_ppl_base *b, size_t i);
float          em_ppl_rec_tail(const em_ppl_base *b, size_t i);
const int32_t *em_ppl_rec_ids(const em_ppl_base *b, size_t i);
const float   *em_ppl_rec_lp(const em_ppl_base *b, size_t i);

/* Allocate an empty base for the given shape (records zeroed). */
int  em_ppl_base_init(em_ppl_base *b, uint32_t n_vocab, uint32_t n_ctx, uint32_t n_windows,
                      uint32_t k, em_err *err);
/* Fill record i from logits[n_vocab] (see em_ppl_record). */
void em_ppl_base_set(em_ppl_base *b, size_t i, const float *logits, int32_t target);
void em_ppl_base_free(em_ppl_base *b);            /* accepts a zeroed or freed base */

/* Write / read the documented file. Reading validates the header, the size
 * and every id (EM_EFORMAT with the path); *b is the caller's to free. */
int em_ppl_base_save(const em_ppl_base *b, const char *path, em_err *err);
int em_ppl_base_load(const char *path, em_ppl_base *b, em_err *err);

/* ---- report -------------------------------------------------------------- */

typedef struct {
    char          type[32];        /* "Q4_K_M" */
    const char   *path;            /* borrowed */
    uint64_t      size;            /* file bytes */
    double        bpw;             /* weight bits per parameter */
    em_ppl_result r;
    double        tok_s;           /* decode tokens/s, 0 if not measured */
} em_ppl_row;

/* The table on f; rows[0] is the base. */
void em_ppl_report_table(FILE *f, const em_ppl_row *rows, int n, const char *device);
int  em_ppl_report_csv(const char *path, const em_ppl_row *rows, int n, em_err *err);
/* Two panels, perplexity and mean KL against file size, drawn as SVG. */
int  em_ppl_report_svg(const char *path, const em_ppl_row *rows, int n, const char *title, em_err *err);

#endif
