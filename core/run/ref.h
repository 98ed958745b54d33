/* ref.h — the scalar CPU reference forward pass (llama2.c style) and its
 * building blocks.
 *
 * This is the oracle every GPU kernel is tested against and the CLI's
 * `--backend cpu`. It is written to be obviously right, not fast: one token
 * at a time, f32 activations, weights dequantized row by row from the
 * mapping. The building blocks are public so kernel tests can call exactly
 * what the whole-model path calls. All pointers are borrowed. */
#ifndef EM_REF_H
#define EM_REF_H

#include <stdint.h>

#include "core/err.h"
#include "core/model/model.h"

typedef struct em_ref em_ref;

/* State for one sequence of up to n_ctx tokens over model m (borrowed; must
 * outlive the em_ref). Allocates the f32 KV cache [n_layer][n_ctx][kv_dim]. */
int  em_ref_create(const em_model *m, uint32_t n_ctx, em_ref **out, em_err *err);
void em_ref_destroy(em_ref *r);   /* accepts NULL */

/* Feed token at position pos (0 <= pos <= tokens fed so far, pos < n_ctx;
 * feeding an earlier pos rewinds). Writes logits[n_vocab] when logits is
 * non-NULL. EM_ERANGE for a token id or position out of range. */
int em_ref_forward(em_ref *r, int32_t token, uint32_t pos, float *logits, em_err *err);

/* The final hidden state of the position fed last, normed by output_norm
 * (what its logits are computed from): out[n_embd]. EM_EINVAL before any
 * position was fed. */
int em_ref_hidden(const em_ref *r, float *out, em_err *err);

/* ---- building blocks ---- */

/* out[n] = x[n] / sqrt(mean(x^2) + eps) * w[n]  (w may be NULL: no scale). out may alias x. */
void em_ref_rmsnorm(float *out, const float *x, const float *w, int n, float eps);

/* y[ne1] = W[ne1][ne0] . x[ne0] for a weight of any supported type, stored
 * row-major as ne1 rows of ne0 elements (the GGUF layout). */
void em_ref_matvec(uint32_t type, const void *w, uint64_t ne0, uint64_t ne1,
                   const float *x, float *y);

/* Rotate n_heads heads of head_dim in x[n_heads*head_dim] for position pos.
 * NORM rotates pairs (2i, 2i+1); NEOX pairs (i, i + n_rot/2). Only the first
 * n_rot dims of each head rotate, pair i by the angle pos * theta[i]
 * (em_hparams_rope), and the result is multiplied by mscale (YaRN's). */
void em_ref_rope(float *x, int n_heads, int head_dim, int n_rot, int pos, em_rope_type type,
                 const double *theta, float mscale);

/* Causal attention of one query position over n_kv cached positions:
 * q[n_head*head_dim], k[n_kv][n_head_kv*head_dim], v[n_kv][n_head_kv*head_dim_v]
 * (rows kv_stride_k / kv_stride_v floats apart), out[n_head*head_dim_v].
 * Query head h reads KV head h / (n_head / n_head_kv). scale: hp->attn_scale.
 * sinks (NULL: none; gpt-oss): head h's softmax has one more logit,
 * sinks[h] (unscaled), that adds to the denominator and nothing to out. */
void em_ref_attention(const float *q, const float *k, const float *v, int n_kv,
                      int n_head, int n_head_kv, int head_dim, int head_dim_v,
                      int kv_stride_k, int kv_stride_v, float scale, const float *sinks, float *out);

/* out[n] = gelu(gate[n]) * up[n], GELU in its tanh form (gemma3). out may alias gate. */
void em_ref_geglu(float *out, const float *gate, const float *up, int n);

/* out[n] = silu(gate[n]) * up[n] */
void em_ref_swiglu(float *out, const float *gate, const float *up, int n);

/* OpenAI's clamped SwiGLU (gpt-oss experts): with g = min(gate, 7) and
 * u = clamp(up, -7, 7), out = g * sigmoid(1.702 g) * (u + 1). out may alias gate. */
void em_ref_swiglu_oai(float *out, const float *gate, const float *up, int n);

#endif
