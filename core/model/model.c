/* model.c — read architecture hyperparameters and locate/check every weight
 * tensor of a llama / qwen2 / qwen3 / qwen3moe / gpt-oss / gemma3 GGUF
 * model or a bert encoder; the rotary angles every engine uses. */
#include "core/model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/model/quant.h"

struct em_model {
    em_gguf              *g;
    em_hparams            hp;
    em_layer_weights     *layers;   /* [n_layer] */
    const em_gguf_tensor *tok_embd, *out_norm, *output, *rope_freqs;
    em_encoder_weights    enc;
    uint64_t              weight_bytes, n_params;
};

typedef struct {
    em_model   *m;
    const char *path;
    em_err     *err;
} loader;

/* Fetch "<arch>.<suffix>" as u32; def is used when absent and def_ok. */
static int arch_u32(loader *L, const char *suffix, uint32_t *out, int def_ok, uint32_t def)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", L->m->hp.arch_name, suffix);
    const em_gguf_value *v = em_gguf_get(L->m->g, key);
    if (!v && def_ok) {
        *out = def;
        return 0;
    }
    if (v && v->type == EM_GGUF_ARRAY)
        return em_err_set(L->err, EM_EUNSUPPORTED,
                          "%s: metadata '%s' varies per layer, which ember does not support",
                          L->path, key);
    return em_gguf_get_u32(L->m->g, key, out, L->err);
}

static int arch_f32(loader *L, const char *suffix, float *out, float def)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", L->m->hp.arch_name, suffix);
    if (!em_gguf_get(L->m->g, key)) {
        *out = def;
        return 0;
    }
    return em_gguf_get_f32(L->m->g, key, out, L->err);
}

/* Find a tensor and check its shape (ne0, ne1, ne2; ne1 == 0 means 1-D,
 * ne2 == 0 2-D) and type. */
static int need3(loader *L, const char *name, uint64_t ne0, uint64_t ne1, uint64_t ne2, int optional,
                 const em_gguf_tensor **out)
{
    const em_gguf_tensor *t = em_gguf_find_tensor(L->m->g, name);
    *out = t;
    if (!t) {
        if (optional)
            return 0;
        return em_err_set(L->err, EM_EFORMAT, "%s: missing tensor '%s'", L->path, name);
    }
    int dims_ok = t->ne[0] == ne0 && t->ne[1] == (ne1 ? ne1 : 1) && t->ne[2] == (ne2 ? ne2 : 1) &&
                  t->ne[3] == 1;
    if (!dims_ok) {
        /* every stored dimension, so that the message cannot contradict itself */
        char shape[96];
        size_t o = 0;
        for (uint32_t d = 0; d < t->n_dims && d < 4; d++)
            o += (size_t)snprintf(shape + o, sizeof shape - o, "%s%llu", d ? ", " : "",
                                  (unsigned long long)t->ne[d]);
        if (ne2)
            return em_err_set(L->err, EM_EFORMAT, "%s: tensor '%s' has shape [%s], expected [%llu, %llu, %llu]",
                              L->path, name, shape, (unsigned long long)ne0, (unsigned long long)ne1,
                              (unsigned long long)ne2);
        if (ne1)
            return em_err_set(L->err, EM_EFORMAT, "%s: tensor '%s' has shape [%s], expected [%llu, %llu]",
                              L->path, name, shape, (unsigned long long)ne0, (unsigned long long)ne1);
        return em_err_set(L->err, EM_EFORMAT, "%s: tensor '%s' has shape [%s], expected [%llu]", L->path,
                          name, shape, (unsigned long long)ne0);
    }
    if (!em_quant_supported(t->type))
        return em_err_set(L->err, EM_EUNSUPPORTED,
                          "%s: tensor '%s' has type %s, which ember does not support "
                          "(supported: F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K Q4_K Q5_K Q6_K "
                          "IQ4_NL IQ4_XS MXFP4)",
                          L->path, name, em_ttype_name(t->type));
    L->m->weight_bytes += t->nbytes;
    L->m->n_params += t->nelem;
    return 0;
}

static int need(loader *L, const char *name, uint64_t ne0, uint64_t ne1, int optional,
                const em_gguf_tensor **out)
{
    return need3(L, name, ne0, ne1, 0, optional, out);
}

/* qwen3moe: experts in all, used per token, rows of each; the tensors'
 * shapes are checked against them in find_weights */
static int read_moe(loader *L)
{
    em_hparams *hp = &L->m->hp;
    int rc;
    if ((rc = arch_u32(L, "expert_count", &hp->n_expert, 0, 0)) ||
        (rc = arch_u32(L, "expert_used_count", &hp->n_expert_used, 0, 0)) ||
        (rc = arch_u32(L, "expert_feed_forward_length", &hp->n_ff_exp, 0, 0)))
        return rc;
    if (hp->n_expert == 0 || hp->n_expert > EM_MAX_EXPERTS || hp->n_expert_used == 0 ||
        hp->n_expert_used > hp->n_expert || hp->n_ff_exp == 0 || hp->n_ff_exp > 1u << 20)
        return em_err_set(L->err, EM_EFORMAT,
                          "%s: %s uses %u of %u experts of %u rows: need 1 <= used <= experts <= %u and rows > 0",
                          L->path, hp->arch_name, hp->n_expert_used, hp->n_expert, hp->n_ff_exp, EM_MAX_EXPERTS);
    return 0;
}

/* gemma3: the sliding window, its layer pattern and rope base, the
 * embedding scale, the attention scale (llama.cpp's rule: 1/sqrt(head_dim),
 * but width/heads for the 62-layer 27B) and the optional logit soft cap */
static int read_gemma3(loader *L)
{
    em_hparams *hp = &L->m->hp;
    int rc;
    if ((rc = arch_u32(L, "attention.sliding_window", &hp->n_swa, 0, 0)) ||
        (rc = arch_u32(L, "attention.sliding_window_pattern", &hp->swa_pattern, 1, 6)) ||
        (rc = arch_f32(L, "rope.freq_base_swa", &hp->rope_base_swa, 10000.0f)) ||
        (rc = arch_f32(L, "final_logit_softcapping", &hp->logit_softcap, 0.0f)))
        return rc;
    if (hp->n_swa == 0 || hp->swa_pattern == 0)
        return em_err_set(L->err, EM_EFORMAT, "%s: gemma3 sliding window %u, pattern %u: both must be positive",
                          L->path, hp->n_swa, hp->swa_pattern);
    hp->rope_freq_scale_swa = 1.0f;
    if (!(hp->rope_base_swa > 0) || !(hp->logit_softcap >= 0) || !isfinite(hp->logit_softcap))
        return em_err_set(L->err, EM_EFORMAT, "%s: implausible windowed rope base or logit soft cap", L->path);
    hp->embd_scale = sqrtf((float)hp->n_embd);
    if (hp->n_layer == 62)
        hp->attn_scale = 1.0f / sqrtf((float)(hp->n_embd / hp->n_head));
    return 0;
}

static int read_hparams(loader *L)
{
    em_model *m = L->m;
    em_hparams *hp = &m->hp;
    em_gguf_str s;
    int rc = em_gguf_get_str(m->g, "general.architecture", &s, L->err);
    if (rc)
        return rc == EM_ENOENT ? em_err_set(L->err, EM_EFORMAT,
                                            "%s: no general.architecture: not a model file", L->path)
                               : rc;
    if (em_gguf_str_eq(s, "llama")) {
        hp->arch = EM_ARCH_LLAMA;
        hp->rope_type = EM_ROPE_NORM;
    } else if (em_gguf_str_eq(s, "qwen2")) {
        hp->arch = EM_ARCH_QWEN2;
        hp->rope_type = EM_ROPE_NEOX;
        hp->has_qkv_bias = 1;
    } else if (em_gguf_str_eq(s, "qwen3")) {
        hp->arch = EM_ARCH_QWEN3;
        hp->rope_type = EM_ROPE_NEOX;
        hp->has_qk_norm = 1;
    } else if (em_gguf_str_eq(s, "qwen3moe")) {
        hp->arch = EM_ARCH_QWEN3MOE;
        hp->rope_type = EM_ROPE_NEOX;
        hp->has_qk_norm = 1;
    } else if (em_gguf_str_eq(s, "gpt-oss")) {
        hp->arch = EM_ARCH_GPTOSS;
        hp->rope_type = EM_ROPE_NEOX;
        hp->has_qkv_bias = 1;
        hp->has_out_bias = 1;
        hp->has_attn_sinks = 1;
        hp->ffn_oai = 1;
    } else if (em_gguf_str_eq(s, "gemma3")) {
        hp->arch = EM_ARCH_GEMMA3;
        hp->rope_type = EM_ROPE_NEOX;
        hp->has_qk_norm = 1;
        hp->has_post_norms = 1;
        hp->ffn_gelu = 1;
    } else if (em_gguf_str_eq(s, "bert")) {
        hp->arch = EM_ARCH_BERT;
        hp->encoder = 1;
        hp->has_qkv_bias = 1;
        hp->has_out_bias = 1;
    } else {
        return em_err_set(L->err, EM_EUNSUPPORTED,
                          "%s: architecture '%.*s' is not supported (supported: llama, qwen2, qwen3, qwen3moe, "
                          "gpt-oss, gemma3, bert)",
                          L->path, (int)(s.len > 64 ? 64 : s.len), s.ptr);
    }
    snprintf(hp->arch_name, sizeof hp->arch_name, "%.*s", (int)s.len, s.ptr);

    if (em_gguf_get_str(m->g, "general.name", &s, NULL) == 0 && s.len > 0) {
        snprintf(hp->name, sizeof hp->name, "%.*s", (int)(s.len > 127 ? 127 : s.len), s.ptr);
    } else {
        const char *base = strrchr(L->path, '/');
        snprintf(hp->name, sizeof hp->name, "%s", base ? base + 1 : L->path);
    }

    if ((rc = arch_u32(L, "embedding_length", &hp->n_embd, 0, 0)) ||
        (rc = arch_u32(L, "block_count", &hp->n_layer, 0, 0)) ||
        (rc = arch_u32(L, "feed_forward_length", &hp->n_ff, 0, 0)) ||
        (rc = arch_u32(L, "attention.head_count", &hp->n_head, 0, 0)))
        return rc;
    if (hp->n_embd == 0 || hp->n_layer == 0 || hp->n_ff == 0 || hp->n_head == 0 ||
        hp->n_embd > 65536 || hp->n_layer > 1024 || hp->n_head > 1024 || hp->n_ff > 1u << 20)
        return em_err_set(L->err, EM_EFORMAT,
                          "%s: implausible dimensions (embd %u, layers %u, heads %u, ffn %u)",
                          L->path, hp->n_embd, hp->n_layer, hp->n_head, hp->n_ff);
    if ((rc = arch_u32(L, "attention.head_count_kv", &hp->n_head_kv, 1, hp->n_head)) ||
        (rc = arch_u32(L, "attention.key_length", &hp->head_dim, 1, hp->n_embd / hp->n_head)) ||
        (rc = arch_u32(L, "attention.value_length", &hp->head_dim_v, 1, hp->head_dim)) ||
        (rc = arch_u32(L, "context_length", &hp->n_ctx_train, 1, 2048)) ||
        (rc = arch_u32(L, "rope.dimension_count", &hp->n_rot, 1, hp->head_dim)))
        return rc;
    if (hp->n_ctx_train == 0)
        return em_err_set(L->err, EM_EFORMAT, "%s: metadata '%s.context_length' is 0", L->path,
                          hp->arch_name);
    if (hp->n_head_kv == 0 || hp->n_head % hp->n_head_kv)
        return em_err_set(L->err, EM_EFORMAT, "%s: %u query heads cannot share %u KV heads",
                          L->path, hp->n_head, hp->n_head_kv);
    if (hp->head_dim == 0 || hp->head_dim > 1024 || hp->head_dim % 2 || hp->head_dim_v == 0 ||
        hp->head_dim_v > 1024 || hp->n_rot > hp->head_dim || hp->n_rot % 2)
        return em_err_set(L->err, EM_EFORMAT, "%s: implausible head size %u (v %u, rope dims %u)",
                          L->path, hp->head_dim, hp->head_dim_v, hp->n_rot);
    if ((rc = arch_f32(L, "rope.freq_base", &hp->rope_base, 10000.0f)) ||
        (rc = arch_f32(L, hp->encoder ? "attention.layer_norm_epsilon" : "attention.layer_norm_rms_epsilon",
                       &hp->rms_eps, hp->encoder ? 1e-12f : 1e-5f)))
        return rc;
    uint32_t pooling = 0, causal = 1;
    if ((rc = arch_u32(L, "pooling_type", &pooling, 1, 0)))
        return rc;
    if (pooling > EM_POOL_RANK)
        return em_err_set(L->err, EM_EUNSUPPORTED, "%s: pooling type %u is not supported (0 none, 1 mean, 2 cls, "
                          "3 last, 4 rank)", L->path, pooling);
    hp->pooling = (em_pooling)pooling;
    char ckey[128];
    snprintf(ckey, sizeof ckey, "%s.attention.causal", hp->arch_name);
    const em_gguf_value *cv = em_gguf_get(m->g, ckey);
    if (cv && cv->type == EM_GGUF_BOOL)
        causal = cv->v.u != 0;
    if (causal == (uint32_t)hp->encoder)
        return em_err_set(L->err, EM_EUNSUPPORTED, "%s: %s with %s attention is not supported", L->path,
                          hp->arch_name, causal ? "causal" : "bidirectional");
    if (hp->encoder) {   /* learned positions and token types, no rotary angles */
        hp->n_rot = 0;
        hp->n_pos = hp->n_ctx_train;
        if ((rc = em_gguf_get_u32(m->g, "tokenizer.ggml.token_type_count", &hp->n_token_types, NULL)))
            hp->n_token_types = 2;
        if (hp->n_token_types == 0 || hp->n_token_types > 16)
            return em_err_set(L->err, EM_EFORMAT, "%s: %u token types: implausible", L->path, hp->n_token_types);
    }
    float factor = 1.0f;
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", hp->arch_name);
    if (em_gguf_get_str(m->g, key, &s, NULL) == 0 && !em_gguf_str_eq(s, "none")) {
        int yarn = em_gguf_str_eq(s, "yarn");
        if (!yarn && !em_gguf_str_eq(s, "linear"))
            return em_err_set(L->err, EM_EUNSUPPORTED, "%s: rope scaling '%.*s' is not supported (linear, yarn)",
                              L->path, (int)(s.len > 32 ? 32 : s.len), s.ptr);
        if ((rc = arch_f32(L, "rope.scaling.factor", &factor, 1.0f)))
            return rc;
        if (yarn && ((rc = arch_u32(L, "rope.scaling.original_context_length", &hp->yarn_orig_ctx, 1,
                                    hp->n_ctx_train)) ||
                     (rc = arch_f32(L, "rope.scaling.yarn_beta_fast", &hp->yarn_beta_fast, 32.0f)) ||
                     (rc = arch_f32(L, "rope.scaling.yarn_beta_slow", &hp->yarn_beta_slow, 1.0f))))
            return rc;
        if (yarn && (hp->yarn_orig_ctx == 0 || !(hp->yarn_beta_fast > 0 && hp->yarn_beta_fast < 1e4f) ||
                     !(hp->yarn_beta_slow > 0 && hp->yarn_beta_slow < 1e4f)))
            return em_err_set(L->err, EM_EFORMAT, "%s: YaRN original context %u, beta_fast %g, beta_slow %g: "
                              "implausible", L->path, hp->yarn_orig_ctx, hp->yarn_beta_fast, hp->yarn_beta_slow);
    }
    if (!(factor >= 1e-3f && factor <= 1e3f) || !(hp->rope_base > 0) ||
        !(hp->rms_eps > 0 && hp->rms_eps < 1))
        return em_err_set(L->err, EM_EFORMAT, "%s: implausible rope base, scaling or norm epsilon",
                          L->path);
    hp->rope_freq_scale = 1.0f / factor;
    hp->rope_base_swa = hp->rope_base;
    hp->rope_freq_scale_swa = hp->rope_freq_scale;
    hp->embd_scale = 1.0f;
    hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
    if (hp->arch == EM_ARCH_GEMMA3 && (rc = read_gemma3(L)))
        return rc;
    if ((hp->arch == EM_ARCH_QWEN3MOE || hp->arch == EM_ARCH_GPTOSS) && (rc = read_moe(L)))
        return rc;
    if (hp->arch == EM_ARCH_GPTOSS) {   /* a window on every other layer (the even ones) */
        hp->swa_pattern = 2;
        if ((rc = arch_u32(L, "attention.sliding_window", &hp->n_swa, 0, 0)))
            return rc;
        if (hp->n_swa == 0)
            return em_err_set(L->err, EM_EFORMAT, "%s: gpt-oss sliding window 0: it must be positive", L->path);
    }

    /* vocabulary: <arch>.vocab_size, else the token list, else token_embd rows */
    const em_gguf_tensor *te = em_gguf_find_tensor(m->g, "token_embd.weight");
    if (!te)
        return em_err_set(L->err, EM_EFORMAT, "%s: missing tensor 'token_embd.weight'", L->path);
    const em_gguf_value *toks = em_gguf_get(m->g, "tokenizer.ggml.tokens");
    uint32_t def_vocab = (uint32_t)(te->ne[1] > UINT32_MAX ? 0 : te->ne[1]);
    if (toks && toks->type == EM_GGUF_ARRAY && toks->v.arr.n > 0 && toks->v.arr.n < UINT32_MAX)
        def_vocab = (uint32_t)toks->v.arr.n;
    if ((rc = arch_u32(L, "vocab_size", &hp->n_vocab, 1, def_vocab)))
        return rc;
    if (hp->n_vocab == 0 || hp->n_vocab > 1u << 22)
        return em_err_set(L->err, EM_EFORMAT, "%s: implausible vocabulary size %u", L->path,
                          hp->n_vocab);
    return 0;
}

/* Norms and biases are added elementwise in f32: they must be plain types. */
static int plain_vectors(loader *L, const em_gguf_tensor *const *vec, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (vec[i] && vec[i]->type != EM_T_F32 && vec[i]->type != EM_T_F16)
            return em_err_set(L->err, EM_EUNSUPPORTED, "%s: tensor '%s' must be F32 or F16, not %s", L->path,
                              vec[i]->name, em_ttype_name(vec[i]->type));
    return 0;
}

/* bert: embeddings of tokens, positions and types with their LayerNorm;
 * each block's biased projections, LayerNorms after the attention and the
 * FFN, an ungated FFN with biases; no output head */
static int find_encoder(loader *L)
{
    em_model *m = L->m;
    const em_hparams *hp = &m->hp;
    uint64_t E = hp->n_embd, qd = (uint64_t)hp->n_head * hp->head_dim, kd = (uint64_t)hp->n_head_kv * hp->head_dim;
    uint64_t vd = (uint64_t)hp->n_head_kv * hp->head_dim_v, od = (uint64_t)hp->n_head * hp->head_dim_v;
    em_encoder_weights *e = &m->enc;
    int rc;
    if ((rc = need(L, "token_embd.weight", E, hp->n_vocab, 0, &m->tok_embd)) ||
        (rc = need(L, "position_embd.weight", E, hp->n_pos, 0, &e->pos)) ||
        (rc = need(L, "token_types.weight", E, hp->n_token_types, 0, &e->types)) ||
        (rc = need(L, "token_embd_norm.weight", E, 0, 0, &e->norm)) ||
        (rc = need(L, "token_embd_norm.bias", E, 0, 0, &e->norm_b)))
        return rc;
    /* a classification head (rank pooling): its output's rows are the labels */
    const em_gguf_tensor *co = em_gguf_find_tensor(m->g, "cls.output.weight");
    uint64_t labels = co ? co->ne[1] : 1;
    if ((rc = need(L, "cls.weight", E, E, 1, &e->cls)) || (rc = need(L, "cls.bias", E, 0, 1, &e->cls_b)) ||
        (rc = need(L, "cls.output.weight", E, labels, 1, &e->cls_out)) ||
        (rc = need(L, "cls.output.bias", labels, 0, 1, &e->cls_out_b)))
        return rc;
    if (hp->pooling == EM_POOL_RANK && !e->cls_out && !e->cls)
        return em_err_set(L->err, EM_EFORMAT, "%s: pooling rank without a classification head (cls.output.weight)",
                          L->path);
    if ((e->cls_b && !e->cls) || (e->cls_out_b && !e->cls_out) || labels == 0 || labels > E)
        return em_err_set(L->err, EM_EFORMAT, "%s: a classification head's bias without its weight, or %llu labels",
                          L->path, (unsigned long long)labels);
    const em_gguf_tensor *vec[] = { e->norm, e->norm_b, e->cls_b, e->cls_out_b };
    if ((rc = plain_vectors(L, vec, 4)))
        return rc;
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        em_layer_weights *w = &m->layers[il];
        char n[96];
        struct { const em_gguf_tensor **t; const char *name; uint64_t ne0, ne1; } want[] = {
            { &w->wq, "attn_q.weight", E, qd }, { &w->bq, "attn_q.bias", qd, 0 },
            { &w->wk, "attn_k.weight", E, kd }, { &w->bk, "attn_k.bias", kd, 0 },
            { &w->wv, "attn_v.weight", E, vd }, { &w->bv, "attn_v.bias", vd, 0 },
            { &w->wo, "attn_output.weight", od, E }, { &w->bo, "attn_output.bias", E, 0 },
            { &w->attn_norm, "attn_output_norm.weight", E, 0 }, { &w->attn_norm_b, "attn_output_norm.bias", E, 0 },
            { &w->w_up, "ffn_up.weight", E, hp->n_ff }, { &w->b_up, "ffn_up.bias", hp->n_ff, 0 },
            { &w->w_down, "ffn_down.weight", hp->n_ff, E }, { &w->b_down, "ffn_down.bias", E, 0 },
            { &w->ffn_norm, "layer_output_norm.weight", E, 0 }, { &w->ffn_norm_b, "layer_output_norm.bias", E, 0 },
        };
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
            snprintf(n, sizeof n, "blk.%u.%s", il, want[i].name);
            if ((rc = need(L, n, want[i].ne0, want[i].ne1, 0, want[i].t)))
                return rc;
        }
        const em_gguf_tensor *lv[] = { w->bq, w->bk, w->bv, w->bo, w->attn_norm, w->attn_norm_b, w->b_up, w->b_down,
                                       w->ffn_norm, w->ffn_norm_b };
        if ((rc = plain_vectors(L, lv, sizeof lv / sizeof lv[0])))
            return rc;
    }
    return 0;
}

static int find_weights(loader *L)
{
    em_model *m = L->m;
    const em_hparams *hp = &m->hp;
    uint64_t q_dim = (uint64_t)hp->n_head * hp->head_dim;
    uint64_t k_dim = (uint64_t)hp->n_head_kv * hp->head_dim;
    uint64_t v_dim = (uint64_t)hp->n_head_kv * hp->head_dim_v;
    uint64_t o_dim = (uint64_t)hp->n_head * hp->head_dim_v;
    int rc;
    if (hp->encoder)
        goto layers;
    if ((rc = need(L, "token_embd.weight", hp->n_embd, hp->n_vocab, 0, &m->tok_embd)) ||
        (rc = need(L, "output_norm.weight", hp->n_embd, 0, 0, &m->out_norm)) ||
        (rc = need(L, "output.weight", hp->n_embd, hp->n_vocab, 1, &m->output)) ||
        (rc = need(L, "rope_freqs.weight", hp->n_rot / 2, 0, 1, &m->rope_freqs)))
        return rc;
    if (m->rope_freqs && m->rope_freqs->type != EM_T_F32)
        return em_err_set(L->err, EM_EUNSUPPORTED, "%s: rope_freqs.weight must be F32", L->path);
    m->hp.tied_output = m->output == NULL;
    if (!m->output)
        m->output = m->tok_embd;
layers:

    /* a block_count below the layers stored would run a truncated model
     * without a word: refuse tensors of layers past it */
    for (size_t i = 0; i < em_gguf_n_tensors(m->g); i++) {
        const char *tn = em_gguf_tensor_at(m->g, i)->name;
        char *end;
        if (strncmp(tn, "blk.", 4) == 0) {
            unsigned long il = strtoul(tn + 4, &end, 10);
            if (end != tn + 4 && *end == '.' && il >= hp->n_layer)
                return em_err_set(L->err, EM_EFORMAT,
                                  "%s: tensor '%s' is for layer %lu, but '%s.block_count' is %u", L->path, tn,
                                  il, hp->arch_name, hp->n_layer);
        }
    }
    m->layers = calloc(hp->n_layer, sizeof *m->layers);
    if (!m->layers)
        return em_err_set(L->err, EM_ENOMEM, "%s: out of memory", L->path);
    if (hp->encoder)
        return find_encoder(L);
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        em_layer_weights *w = &m->layers[il];
        char n[96];
#define NEED(field, suffix, ne0, ne1, opt)                              \
        snprintf(n, sizeof n, "blk.%u." suffix, il);                   \
        if ((rc = need(L, n, (ne0), (ne1), (opt), &w->field)))         \
            return rc;
        NEED(attn_norm, "attn_norm.weight", hp->n_embd, 0, 0);
        NEED(wq, "attn_q.weight", hp->n_embd, q_dim, 0);
        NEED(wk, "attn_k.weight", hp->n_embd, k_dim, 0);
        NEED(wv, "attn_v.weight", hp->n_embd, v_dim, 0);
        NEED(wo, "attn_output.weight", o_dim, hp->n_embd, 0);
        NEED(bq, "attn_q.bias", q_dim, 0, !hp->has_qkv_bias);
        NEED(bk, "attn_k.bias", k_dim, 0, !hp->has_qkv_bias);
        NEED(bv, "attn_v.bias", v_dim, 0, !hp->has_qkv_bias);
        NEED(bo, "attn_output.bias", hp->n_embd, 0, !hp->has_out_bias);
        NEED(attn_sinks, "attn_sinks.weight", hp->n_head, 0, !hp->has_attn_sinks);
        NEED(q_norm, "attn_q_norm.weight", hp->head_dim, 0, !hp->has_qk_norm);
        NEED(k_norm, "attn_k_norm.weight", hp->head_dim, 0, !hp->has_qk_norm);
        if (hp->arch == EM_ARCH_GPTOSS) {
            NEED(ffn_norm, "post_attention_norm.weight", hp->n_embd, 0, 0);
        } else {
            NEED(ffn_norm, "ffn_norm.weight", hp->n_embd, 0, 0);
        }
        int moe = hp->n_expert > 0;
        if (moe) {
            NEED(ffn_gate_inp, "ffn_gate_inp.weight", hp->n_embd, hp->n_expert, 0);
#define NEED3(field, suffix, ne0, ne1)                                                  \
            snprintf(n, sizeof n, "blk.%u." suffix, il);                              \
            if ((rc = need3(L, n, (ne0), (ne1), hp->n_expert, 0, &w->field)))         \
                return rc;
            NEED3(w_gate_exps, "ffn_gate_exps.weight", hp->n_embd, hp->n_ff_exp);
            NEED3(w_up_exps, "ffn_up_exps.weight", hp->n_embd, hp->n_ff_exp);
            NEED3(w_down_exps, "ffn_down_exps.weight", hp->n_ff_exp, hp->n_embd);
#undef NEED3
            int b = hp->ffn_oai;   /* (gpt-oss: the router's and experts' biases) */
            NEED(b_gate_inp, "ffn_gate_inp.bias", hp->n_expert, 0, !b);
            NEED(b_gate_exps, "ffn_gate_exps.bias", hp->n_ff_exp, hp->n_expert, !b);
            NEED(b_up_exps, "ffn_up_exps.bias", hp->n_ff_exp, hp->n_expert, !b);
            NEED(b_down_exps, "ffn_down_exps.bias", hp->n_embd, hp->n_expert, !b);
        } else {
            NEED(w_gate, "ffn_gate.weight", hp->n_embd, hp->n_ff, 0);
            NEED(w_up, "ffn_up.weight", hp->n_embd, hp->n_ff, 0);
            NEED(w_down, "ffn_down.weight", hp->n_ff, hp->n_embd, 0);
        }
        if (hp->has_post_norms) {   /* (gpt-oss's post_attention_norm is its FFN norm) */
            NEED(post_attn_norm, "post_attention_norm.weight", hp->n_embd, 0, 0);
            NEED(post_ffn_norm, "post_ffw_norm.weight", hp->n_embd, 0, 0);
        }
#undef NEED
        const em_gguf_tensor *vec[] = { w->attn_norm, w->ffn_norm, w->bq, w->bk, w->bv, w->bo, w->attn_sinks,
                                        w->q_norm, w->k_norm, w->post_attn_norm, w->post_ffn_norm, w->b_gate_inp,
                                        w->b_gate_exps, w->b_up_exps, w->b_down_exps };
        if ((rc = plain_vectors(L, vec, sizeof vec / sizeof vec[0])))
            return rc;
    }
    if (m->out_norm->type != EM_T_F32 && m->out_norm->type != EM_T_F16)
        return em_err_set(L->err, EM_EUNSUPPORTED, "%s: output_norm.weight must be F32 or F16",
                          L->path);
    return 0;
}

int em_model_open(const char *path, em_model **out, em_err *err)
{
    *out = NULL;
    em_model *m = calloc(1, sizeof *m);
    if (!m)
        return em_err_set(err, EM_ENOMEM, "%s: out of memory", path);
    loader L = { m, path, err };
    int rc = em_gguf_open(path, &m->g, err);
    if (!rc)
        rc = read_hparams(&L);
    if (!rc)
        rc = find_weights(&L);
    if (rc) {
        em_model_close(m);
        return rc;
    }
    *out = m;
    return 0;
}

void em_model_close(em_model *m)
{
    if (!m)
        return;
    free(m->layers);
    em_gguf_close(m->g);
    free(m);
}

const em_hparams *em_model_hparams(const em_model *m) { return &m->hp; }
const em_layer_weights *em_model_layer(const em_model *m, uint32_t il) { return &m->layers[il]; }
const em_gguf_tensor *em_model_tok_embd(const em_model *m) { return m->tok_embd; }
const em_gguf_tensor *em_model_out_norm(const em_model *m) { return m->out_norm; }
const em_gguf_tensor *em_model_output(const em_model *m) { return m->output; }
const em_gguf_tensor *em_model_rope_freqs(const em_model *m) { return m->rope_freqs; }
const em_encoder_weights *em_model_encoder(const em_model *m) { return &m->enc; }
const em_gguf *em_model_gguf(const em_model *m) { return m->g; }
uint64_t em_model_n_params_active(const em_model *m)
{
    const em_hparams *hp = &m->hp;
    uint64_t experts = 0;
    for (uint32_t il = 0; hp->n_expert && il < hp->n_layer; il++) {
        const em_layer_weights *w = &m->layers[il];
        experts += w->w_gate_exps->nelem + w->w_up_exps->nelem + w->w_down_exps->nelem;
    }
    return m->n_params - (hp->n_expert ? experts / hp->n_expert * (hp->n_expert - hp->n_expert_used) : 0);
}

uint64_t em_model_weight_bytes(const em_model *m) { return m->weight_bytes; }
uint64_t em_model_n_params(const em_model *m) { return m->n_params; }

void em_tensor_row(const em_gguf_tensor *t, uint64_t row, float *dst)
{
    uint64_t row_bytes = t->nbytes / (t->nelem / t->ne[0]);
    em_dequant_row(t->type, (const uint8_t *)t->data + row * row_bytes, dst, (int64_t)t->ne[0]);
}

void em_hparams_rope(const em_hparams *hp, int swa, const float *ff, double *theta, float *mscale)
{
    double base = swa ? hp->rope_base_swa : hp->rope_base, scale = swa ? hp->rope_freq_scale_swa : hp->rope_freq_scale;
    uint32_t n = hp->n_rot;
    double lo = 0, hi = 0;
    *mscale = 1.0f;
    if (hp->yarn_orig_ctx) {
        /* the pairs whose wavelength makes beta turns over the original
         * context: below `lo` extrapolated, above `hi` interpolated */
        double c = 2.0 * log(base);
        lo = floor(n * log(hp->yarn_orig_ctx / (hp->yarn_beta_fast * 2 * M_PI)) / c);
        hi = ceil(n * log(hp->yarn_orig_ctx / (hp->yarn_beta_slow * 2 * M_PI)) / c);
        lo = lo > 0 ? lo : 0;
        hi = hi < n - 1 ? hi : n - 1;
        *mscale = (float)(1.0 + 0.1 * log(1.0 / scale));
    }
    for (uint32_t i = 0; i < n / 2; i++) {
        double extrap = pow(base, -2.0 * i / n);
        if (ff)
            extrap /= ff[i];
        double t = scale * extrap;
        if (hp->yarn_orig_ctx) {
            double y = ((double)i - lo) / (hi - lo > 0.001 ? hi - lo : 0.001);
            double mix = 1.0 - (y < 0 ? 0 : y > 1 ? 1 : y);   /* 1: the unscaled angle */
            t = t * (1 - mix) + extrap * mix;
        }
        theta[i] = t;
    }
}
