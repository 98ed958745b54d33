/* sample.h — choose the next token from logits: the sampling chain of a
 * sequence, in order — repetition, frequency and presence penalties over
 * the tokens it has seen, logit_bias, then greedy (temperature 0: argmax) or
 * temperature with top-k / top-p / min-p filtering and a draw from a seeded
 * PRNG, so that a run is reproducible from its seed whatever else runs
 * beside it. Optionally the chosen token's log-probability and the most
 * likely alternatives (logprobs). One em_sampler per sequence; not
 * thread-safe. */
#ifndef EM_SAMPLE_H
#define EM_SAMPLE_H

#include <stdint.h>

#include "core/err.h"

#define EM_SAMPLE_MAX_BIAS 1024   /* logit_bias entries */
#define EM_SAMPLE_MAX_TOP  20     /* alternatives per token in logprobs */

typedef struct {
    int32_t id;
    float   bias;     /* added to the token's logit; -100 bans it, +100 all but forces it */
} em_logit_bias;

typedef struct {
    float    temp;     /* 0: greedy (argmax, lowest id on ties) */
    int32_t  top_k;    /* keep the k most likely; 0 = off */
    float    top_p;    /* keep the smallest set with cumulative p >= top_p; 1 = off */
    float    min_p;    /* drop tokens with p < min_p * p_max; 0 = off */
    uint64_t seed;
    /* penalties (OpenAI's): a token's logit less presence_penalty once it
     * was generated, and frequency_penalty times the number of times it
     * was; each in [-2, 2], 0 = off. Over the generated tokens only. */
    float    presence_penalty, frequency_penalty;
    /* the CTRL / llama.cpp repetition penalty over the prompt and the
     * generated tokens: a seen token's logit divided by it when positive,
     * multiplied when negative; (0, 10], 1 (or 0) = off */
    float    repetition_penalty;
    /* added to the named tokens' logits; borrowed until em_sampler_create,
     * which copies them (ids must be < n_vocab, |bias| <= 100) */
    const em_logit_bias *logit_bias;
    uint32_t n_logit_bias;
} em_sample_params;

/* Defaults: temp 0.8, top_k 40, top_p 0.95, min_p 0.05, seed 0, no
 * penalties, no bias. */
em_sample_params em_sample_defaults(void);

typedef struct em_sampler em_sampler;

/* EM_EINVAL for out-of-range parameters (temp < 0, top_p not in (0,1], a
 * bias id past the vocabulary, ...), err naming the parameter. */
int  em_sampler_create(const em_sample_params *p, uint32_t n_vocab, em_sampler **out, em_err *err);
void em_sampler_destroy(em_sampler *s);   /* accepts NULL */

/* Tell the sampler about a token of the sequence: a prompt token
 * (generated 0: counts for the repetition penalty only) or the token just
 * sampled and kept (generated 1: every penalty). EM_ENOMEM when the
 * record of seen tokens cannot grow (the penalties then miss it). */
int em_sampler_accept(em_sampler *s, int32_t id, int generated);

/* Forget the tokens accepted so far (a new completion by the same sampler:
 * `ember chat`'s next turn); the PRNG goes on. */
void em_sampler_forget(em_sampler *s);

/* The log-probabilities a sample came from: log-softmax of the logits after
 * the penalties and logit_bias, before temperature and filtering (what the
 * model, so steered, thinks of each token). */
typedef struct {
    float    logprob;                    /* of the chosen token */
    uint32_t n_top;                      /* as asked, at most EM_SAMPLE_MAX_TOP */
    int32_t  top_id[EM_SAMPLE_MAX_TOP];  /* most likely first; ties by lowest id */
    float    top_lp[EM_SAMPLE_MAX_TOP];
} em_sample_lp;

/* Pick a token from logits[n_vocab] (borrowed, not modified). Always an id
 * in [0, n_vocab), even for NaN or infinite logits (callers that can say
 * why should refuse those first). It does not accept the token: call
 * em_sampler_accept when the sequence keeps it. lp: NULL, or filled with
 * the chosen token's log-probability and the n_top most likely tokens
 * (n_top <= EM_SAMPLE_MAX_TOP). */
int32_t em_sampler_sample(em_sampler *s, const float *logits);
/* The same, with allow (NULL: every token) a bit set over the vocabulary
 * ((n_vocab + 31) / 32 words, bit i of word i / 32 for token i; borrowed)
 * of the tokens that may be chosen — a grammar's; the others are out of the
 * draw and of the log-probabilities (-inf). The caller makes sure at least
 * one bit is set. -1 (no token) when allow is given and the masked copy of
 * the logits cannot be allocated. */
int32_t em_sampler_sample_lp(em_sampler *s, const float *logits, const uint32_t *allow, uint32_t n_top,
                             em_sample_lp *lp);

/* ---- choosing on the device (core/gpu/forward.h em_fwd_step_top) ----
 * The steering above, as a list of distinct token ids for a kernel: token
 * id's logit x becomes (rep != 1 ? (x > 0 ? x / rep : x * rep) : x) - sub. */
typedef struct {
    int32_t id;
    float   rep, sub;
} em_sample_adj;

/* How a logit row is steered before choosing from it on the device
 * (shaders/topk.comp): the adjustments, a grammar's mask. */
typedef struct {
    float                temp;    /* the sampler's (em_sampler_temp); 0: greedy */
    const em_sample_adj *adj;     /* [n_adj], distinct ids (borrowed) */
    uint32_t             n_adj;
    const uint32_t      *allow;   /* (n_vocab + 31) / 32 words, or NULL: every token */
} em_sample_steer;

/* Writes up to cap entries into out; returns how many there are (at most
 * the distinct tokens accepted plus the logit_bias entries). */
uint32_t em_sampler_adjustments(const em_sampler *s, em_sample_adj *out, uint32_t cap);
/* The temperature the draw uses; 0 for greedy (temp 0 or top_k 1). */
float    em_sampler_temp(const em_sampler *s);

#define EM_SAMPLE_TOPK 64

/* What a device kernel reports of a steered row: its maximum and argmax
 * (lowest id on ties), the sums over the whole row of exp(x - max) and of
 * exp((x - max) / T) at the sampler's temperature, and its n largest
 * values (n = min(EM_SAMPLE_TOPK, n_vocab); ties at the n-th value: the
 * lowest ids) with their ids, in any order (borrowed). */
typedef struct {
    float          max;
    int32_t        argmax;
    float          sum1, sum_t;
    uint32_t       n;
    const int32_t *id;
    const float   *val;
} em_sample_top;

/* Choose from top alone what em_sampler_sample_lp would choose from the
 * whole steered row: the same greedy pick, and the same filters and draw
 * as long as they stay among the candidates strictly above the n-th value
 * (the draw's sums then differ from the host's in float rounding only).
 * Returns the id, or -1 when the choice needs the rest of the row: then
 * call em_sampler_sample_steered on it (the PRNG has not moved). */
int32_t em_sampler_sample_top(em_sampler *s, const em_sample_top *top, uint32_t n_top, em_sample_lp *lp);
/* Choose from a row the kernel has already steered and masked (row
 * borrowed, not modified). */
int32_t em_sampler_sample_steered(em_sampler *s, const float *row, uint32_t n_top, em_sample_lp *lp);

/* Speculative decoding's check of a drafted token against the target's
 * logits (the raw row, or one the device steered: is_steered): with the
 * standard rejection rule for a draft that proposes one token for sure,
 * the draft is kept with the probability the draw gives it (greedy: when
 * it is the argmax), *accepted set and the draft returned; else a token
 * drawn from the rest of the distribution (renormalised) is returned with
 * *accepted 0 — so the output follows the target's distribution exactly.
 * The penalties' record is not advanced (em_sampler_accept). */
int32_t em_sampler_verify(em_sampler *s, const float *logits, int is_steered, int32_t draft, int *accepted);

/* Draft-model speculation. em_sampler_dist writes p[n_vocab] (caller's
 * buffer), the distribution this sampler draws from for logits (the raw
 * row, or one the device steered: is_steered): the tokens temperature,
 * top-k, top-p and min-p keep, renormalised, 0 elsewhere; greedy: 1 at the
 * argmax. em_sampler_draw_dist draws from such a p with the sampler's PRNG
 * (greedy: its argmax, no draw). The penalties' record is not advanced. */
void    em_sampler_dist(em_sampler *s, const float *logits, int is_steered, float *p);
int32_t em_sampler_draw_dist(em_sampler *s, const float *p);
/* The check of a draft drawn from q[n_vocab] (borrowed; a draft model's
 * em_sampler_dist) against the target's logits, by the standard rejection
 * rule: kept with probability min(1, p(draft) / q(draft)), *accepted set
 * and the draft returned; else a token drawn from max(p - q, 0)
 * renormalised, *accepted 0 — the output follows the target's
 * distribution p exactly. Greedy: kept when it is the argmax, else the
 * argmax (no draw). */
int32_t em_sampler_verify_dist(em_sampler *s, const float *logits, int is_steered, int32_t draft, const float *q,
                               int *accepted);

/* Prompt lookup, speculation's drafts without a draft model: the tokens
 * that followed the latest earlier occurrence of t[0..n)'s last g tokens
 * (g = 3, then 2, then 1), at most k of them, into out[k]; returns how many
 * (0: no match). Borrowed arrays. */
uint32_t em_prompt_lookup(const int32_t *t, uint32_t n, uint32_t k, int32_t *out);

/* Index of the largest value (lowest index on ties). */
int32_t em_argmax(const float *v, uint32_t n);

#endif
