/* encode.h — the CPU reference of an encoder (bert): a whole sequence's
 * hidden states in one pass (every token attends to every other), and the
 * pooling that makes one vector of a sequence's hidden states, for any
 * model (core/run/encode.c).
 *
 * Like ref.h, written to be obviously right rather than fast: f32
 * activations, double accumulators, each weight row dequantized once per
 * pass. It is the oracle the device's encoder is checked against and
 * `ember embed --backend cpu`. All pointers are borrowed. */
#ifndef EM_ENCODE_H
#define EM_ENCODE_H

#include <stdint.h>

#include "core/err.h"
#include "core/model/model.h"

/* The hidden states of ids[0..n) (of token types types[0..n), NULL: all
 * 0; positions 0..n-1) through encoder m (hp->encoder): out[n][n_embd],
 * the caller's. EM_EUNSUPPORTED for a decoder, EM_ERANGE for an id out of
 * the vocabulary, a type past the model's, or n past its positions
 * (hp->n_pos) or 0, EM_ENOMEM. */
int em_ref_encode(const em_model *m, const int32_t *ids, const uint8_t *types, uint32_t n, float *out, em_err *err);

/* A cross-encoder's score of one sequence (a query and a document, the
 * document's tokens of type 1): its classification head on the first
 * token's hidden state, the first label's output (em_encoder_weights).
 * EM_EUNSUPPORTED for a model without a head; em_ref_encode's errors. */
int em_ref_score(const em_model *m, const int32_t *ids, const uint8_t *types, uint32_t n, float *score, em_err *err);

/* The head on one hidden state h[n_embd]: out[labels] (the caller's;
 * n_embd of them for a head without cls.output). 0 or EM_ENOMEM. */
int em_ref_cls_head(const em_model *m, const float *h, float *out);

/* The embedding of ids[0..n) through m on the CPU: an encoder's hidden
 * states (em_ref_encode), or a decoder's final ones (normed by output_norm,
 * token by token through em_ref), pooled by mode (EM_POOL_NONE: the
 * model's own pooling, else the mean; RANK is refused) and scaled to unit
 * length when normalize: out[n_embd], the caller's. Errors as
 * em_ref_encode's and em_ref_create's. */
int em_ref_embed(const em_model *m, const int32_t *ids, uint32_t n, em_pooling mode, int normalize, float *out,
                 em_err *err);

/* The pooling an embedding of mode gets from a model of shape hp, in
 * *mode: EM_POOL_NONE becomes the model's own pooling, else the mean.
 * EM_EUNSUPPORTED for RANK (a score, not a vector). */
int em_pool_resolve(const em_hparams *hp, em_pooling *mode, em_err *err);

/* The rows a chunk of c tokens at positions done.. of an n-token sequence
 * adds to the sequence's pooled sum under mode: *first (an index into the
 * chunk) and how many, 0 when the chunk holds none of them. MEAN: every
 * row (the sum is then divided by n); CLS and RANK: position 0's; LAST:
 * position n-1's. */
uint32_t em_pool_rows(em_pooling mode, uint32_t done, uint32_t c, uint32_t n, uint32_t *first);

/* One vector of a sequence's hidden states h[n][dim]: their mean (MEAN),
 * the first's (CLS) or the last's (LAST) into out[dim]. n >= 1. */
void em_pool(em_pooling mode, const float *h, uint32_t n, uint32_t dim, float *out);

/* v[n] scaled to unit length (left as it is when it is all zeros). */
void em_l2_normalize(float *v, uint32_t n);

/* out[n] = (x - mean(x)) / sqrt(var(x) + eps) * w + b (b may be NULL). out may alias x. */
void em_ref_layernorm(float *out, const float *x, const float *w, const float *b, int n, float eps);

/* out[n] = gelu(x) in its erf form, x/2 (1 + erf(x / sqrt 2)) (bert). out may alias x. */
void em_ref_gelu_erf(float *out, const float *x, int n);

#endif
