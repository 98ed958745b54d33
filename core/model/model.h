/* model.h — a model: architecture hyperparameters and weight tensors read
 * from a GGUF file. (The tokenizer is built separately from em_model_gguf().)
 *
 * em_model_open() opens and validates the file, reads `<arch>.*` metadata,
 * finds every tensor the architecture needs and checks its shape and type.
 * Weights stay in the mmap'd file; em_model owns the em_gguf and frees it in
 * em_model_close(). Everything returned by the
 * getters is borrowed from the model and valid until em_model_close(). */
#ifndef EM_MODEL_H
#define EM_MODEL_H

#include <stdint.h>

#include "core/err.h"
#include "core/model/gguf.h"

typedef enum { EM_ARCH_LLAMA, EM_ARCH_QWEN2, EM_ARCH_QWEN3, EM_ARCH_GEMMA3, EM_ARCH_QWEN3MOE, EM_ARCH_GPTOSS,
               EM_ARCH_BERT } em_arch;
typedef enum { EM_ROPE_NORM, EM_ROPE_NEOX } em_rope_type;
/* How a sequence's hidden states become one vector (<arch>.pooling_type,
 * llama.cpp's numbering): none, the mean over its tokens, the first
 * token's ([CLS]), the last token's, a classifier's score (rank). */
typedef enum { EM_POOL_NONE = 0, EM_POOL_MEAN = 1, EM_POOL_CLS = 2, EM_POOL_LAST = 3, EM_POOL_RANK = 4 } em_pooling;

typedef struct {
    em_arch      arch;
    char         arch_name[16];
    char         name[128];      /* general.name or the file name */
    uint32_t     n_embd;         /* model width */
    uint32_t     n_layer;
    uint32_t     n_head;         /* query heads */
    uint32_t     n_head_kv;      /* key/value heads (GQA when < n_head) */
    uint32_t     head_dim;       /* per-head size of q and k */
    uint32_t     head_dim_v;     /* per-head size of v */
    uint32_t     n_ff;           /* FFN hidden width */
    uint32_t     n_vocab;
    uint32_t     n_ctx_train;
    uint32_t     n_rot;          /* rotated dims per head (<= head_dim) */
    em_rope_type rope_type;
    float        rope_base;      /* theta */
    float        rope_freq_scale;/* 1 / the linear or YaRN scaling factor */
    /* YaRN (rope.scaling.type = yarn; 0 yarn_orig_ctx: none): the context
     * the model was trained at before scaling, the ramp's corners */
    uint32_t     yarn_orig_ctx;
    float        yarn_beta_fast, yarn_beta_slow;
    float        rms_eps;
    int          has_qkv_bias;   /* qwen2 */
    int          has_qk_norm;    /* qwen3 */
    int          tied_output;    /* no output.weight: logits use token_embd */
    /* gemma3 (the others: 1, 0, 0, 0, 0 and 0) */
    float        embd_scale;     /* the embedding rows times this (sqrt(n_embd)) */
    float        attn_scale;     /* scores are q.k times this (1/sqrt(head_dim)) */
    int          has_post_norms; /* RMS norms of the attention and FFN outputs before the residual */
    int          ffn_gelu;       /* GELU (tanh form) gates the FFN instead of SiLU */
    float        logit_softcap;  /* logits = c * tanh(logits / c) when > 0 */
    uint32_t     n_swa;          /* sliding window (positions a query sees, itself included); 0: none */
    uint32_t     swa_pattern;    /* every swa_pattern-th layer is global, the others windowed */
    float        rope_base_swa;  /* the windowed layers' rope base and freq scale (gemma3: their */
    float        rope_freq_scale_swa; /* own base, scale 1; gpt-oss: the others') */
    /* mixture of experts (qwen3moe; 0 for a dense model): a router picks
     * n_expert_used of n_expert SiLU-gated experts of n_ff_exp rows per
     * token, weighted by the router's softmax renormalised over the chosen */
    uint32_t     n_expert;
    uint32_t     n_expert_used;
    uint32_t     n_ff_exp;
    /* gpt-oss (the others: 0): experts with biases and OpenAI's clamped
     * SwiGLU; attention sinks and an output-projection bias */
    int          ffn_oai;
    int          has_attn_sinks;
    int          has_out_bias;
    /* an encoder (bert; the others 0, 0, 0, 0): no causal mask, learned
     * positions (n_pos of them) and token types, LayerNorms with biases
     * after each sub-block (rms_eps is their epsilon), biased projections,
     * an erf-GELU FFN without a gate; it gives vectors, not text */
    int          encoder;
    uint32_t     n_pos;
    uint32_t     n_token_types;
    em_pooling   pooling;        /* the model's own (any architecture may say; EM_POOL_NONE: unsaid) */
} em_hparams;

/* The most experts a mixture-of-experts model may have (Qwen3-235B-A22B:
 * 128; DeepSeek-V3: 256). */
#define EM_MAX_EXPERTS 256

/* The rotary angle per position of each pair i < n_rot / 2 of a layer's
 * heads (swa: a sliding-window layer's), theta[i], and the factor mscale
 * that cos and sin are multiplied by (1 but with YaRN), as llama.cpp
 * computes them: base^(-2i / n_rot) times the frequency scale, divided by
 * ff[i] (Llama 3's rope_freqs, or NULL); with YaRN each pair mixes that
 * (interpolated) and the unscaled angle by its ramp between the corner
 * pairs beta_fast and beta_slow, and mscale is 1 + 0.1 ln(1 / scale). */
void em_hparams_rope(const em_hparams *hp, int swa, const float *ff, double *theta, float *mscale);

/* The window of layer il: hp->n_swa for a windowed layer, 0 for a global one. */
static inline uint32_t em_hparams_window(const em_hparams *hp, uint32_t il)
{
    return hp->n_swa && (il + 1) % hp->swa_pattern ? hp->n_swa : 0;
}

/* Weights of one transformer block. Shapes are ggml order [ne0 (row length), ne1 (rows)]. */
typedef struct {
    const em_gguf_tensor *attn_norm;  /* [n_embd] */
    const em_gguf_tensor *wq;         /* [n_embd, n_head*head_dim] */
    const em_gguf_tensor *wk;         /* [n_embd, n_head_kv*head_dim] */
    const em_gguf_tensor *wv;         /* [n_embd, n_head_kv*head_dim_v] */
    const em_gguf_tensor *bq, *bk, *bv; /* biases (qwen2, gpt-oss) or NULL */
    const em_gguf_tensor *bo;         /* [n_embd] output-projection bias (gpt-oss) or NULL */
    const em_gguf_tensor *attn_sinks; /* [n_head] one extra logit per head (gpt-oss) or NULL */
    const em_gguf_tensor *q_norm;     /* [head_dim] (qwen3) or NULL */
    const em_gguf_tensor *k_norm;     /* [head_dim] (qwen3) or NULL */
    const em_gguf_tensor *wo;         /* [n_head*head_dim_v, n_embd] */
    const em_gguf_tensor *ffn_norm;   /* [n_embd] (gpt-oss: post_attention_norm) */
    const em_gguf_tensor *w_gate;     /* [n_embd, n_ff] (NULL in a mixture of experts) */
    const em_gguf_tensor *w_up;       /* [n_embd, n_ff] (NULL in a mixture of experts) */
    const em_gguf_tensor *w_down;     /* [n_ff, n_embd] (NULL in a mixture of experts) */
    /* mixture of experts, else NULL: the router and the experts' matrices,
     * expert e's rows e * ne[1] .. of each (ne[2] = n_expert) */
    const em_gguf_tensor *ffn_gate_inp;   /* [n_embd, n_expert] */
    const em_gguf_tensor *w_gate_exps;    /* [n_embd, n_ff_exp, n_expert] */
    const em_gguf_tensor *w_up_exps;      /* [n_embd, n_ff_exp, n_expert] */
    const em_gguf_tensor *w_down_exps;    /* [n_ff_exp, n_embd, n_expert] */
    const em_gguf_tensor *b_gate_inp;     /* [n_expert] (gpt-oss) or NULL */
    const em_gguf_tensor *b_gate_exps;    /* [n_ff_exp, n_expert] (gpt-oss) or NULL */
    const em_gguf_tensor *b_up_exps;      /* [n_ff_exp, n_expert] (gpt-oss) or NULL */
    const em_gguf_tensor *b_down_exps;    /* [n_embd, n_expert] (gpt-oss) or NULL */
    const em_gguf_tensor *post_attn_norm; /* [n_embd] (gemma3) or NULL */
    const em_gguf_tensor *post_ffn_norm;  /* [n_embd] (gemma3) or NULL */
    /* an encoder's: attn_norm and ffn_norm are the LayerNorms after the
     * attention and the FFN (attn_output_norm, layer_output_norm), these
     * their biases; the FFN's biases (w_gate NULL) */
    const em_gguf_tensor *attn_norm_b, *ffn_norm_b;   /* [n_embd] */
    const em_gguf_tensor *b_up;                       /* [n_ff] */
    const em_gguf_tensor *b_down;                     /* [n_embd] */
} em_layer_weights;

/* An encoder's embeddings: learned positions and token types, and the
 * LayerNorm after their sum; a cross-encoder's classification head (a
 * reranker's, pooling rank), as llama.cpp's converter writes it: on the
 * first token's hidden state h, out = cls_out (tanh(cls h + cls_b)) +
 * cls_out_b, or cls_out h + cls_out_b without cls. NULL members for a
 * decoder, and for a head's parts a model does not have. */
typedef struct {
    const em_gguf_tensor *pos;          /* [n_embd, n_pos] */
    const em_gguf_tensor *types;        /* [n_embd, n_token_types] */
    const em_gguf_tensor *norm, *norm_b;/* [n_embd] */
    const em_gguf_tensor *cls, *cls_b;  /* [n_embd, n_embd], [n_embd] */
    const em_gguf_tensor *cls_out, *cls_out_b;   /* [n_embd, n_labels], [n_labels] */
} em_encoder_weights;

typedef struct em_model em_model;

/* Open, validate and describe a model. Errors (exit status 2 material):
 * EM_ENOENT/EM_EFORMAT for the file, EM_EUNSUPPORTED for an architecture or
 * tensor type ember cannot run, EM_EFORMAT for missing/misshapen tensors. */
int  em_model_open(const char *path, em_model **out, em_err *err);
void em_model_close(em_model *m);   /* accepts NULL */

const em_hparams       *em_model_hparams(const em_model *m);
const em_layer_weights *em_model_layer(const em_model *m, uint32_t il);
const em_gguf_tensor   *em_model_tok_embd(const em_model *m);  /* [n_embd, n_vocab] */
const em_gguf_tensor   *em_model_out_norm(const em_model *m);  /* [n_embd]; NULL for an encoder */
const em_gguf_tensor   *em_model_output(const em_model *m);    /* [n_embd, n_vocab]; token_embd when tied
                                                                  (an encoder: NULL) */
const em_encoder_weights *em_model_encoder(const em_model *m);
/* Llama 3 rope frequency factors [n_rot/2] (rope_freqs.weight) or NULL. */
const em_gguf_tensor   *em_model_rope_freqs(const em_model *m);
const em_gguf          *em_model_gguf(const em_model *m);

/* Total bytes of all weight tensors. */
uint64_t em_model_weight_bytes(const em_model *m);
/* Parameter count (elements of all weight tensors). */
uint64_t em_model_n_params(const em_model *m);
/* The parameters one token uses: of a mixture of experts the experts'
 * share n_expert_used / n_expert only; em_model_n_params otherwise. */
uint64_t em_model_n_params_active(const em_model *m);

/* Dequantize row `row` of a 2-D tensor into dst[t->ne[0]]. */
void em_tensor_row(const em_gguf_tensor *t, uint64_t row, float *dst);

#endif
