/* ref.c — the scalar CPU reference forward pass for llama / qwen2 / qwen3.
 * One token per call, f32 everywhere, weights dequantized row by row. Shapes
 * are written next to every buffer; dims: E = n_embd, H = n_head, Hk = n_head_kv,
 * D = head_dim, Dv = head_dim_v, F = n_ff, V = n_vocab, C = n_ctx. */
#include "core/run/ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/model/quant.h"

typedef struct {
    float *attn_norm, *ffn_norm;   /* [E] */
    float *bq, *bk, *bv;           /* [H*D], [Hk*D], [Hk*Dv] or NULL */
    float *q_norm, *k_norm;        /* [D] or NULL */
    float *post_attn_norm, *post_ffn_norm;   /* [E] or NULL (gemma3) */
    float *bo, *sinks;             /* [E], [H] or NULL (gpt-oss) */
    float *b_inp, *b_gate, *b_up, *b_down;   /* [n_expert], [n_expert][F], .., [n_expert][E] or NULL */
} ref_layer_vecs;

struct em_ref {
    const em_model   *m;
    const em_hparams *hp;
    uint32_t          n_ctx;
    ref_layer_vecs   *lv;          /* [n_layer] */
    float *out_norm;               /* [E] */
    float *rope_ff;                /* [n_rot/2] or NULL */
    double *theta[2];              /* [n_rot/2] rotary angles: the global layers', the windowed ones' */
    float  mscale[2];
    float *x, *xb, *xb2;           /* [E] residual stream, normed, scratch */
    float *router, *xe;            /* mixture of experts: [n_expert] router, [E] one expert's output */
    float *q, *k, *v;              /* [H*D], [Hk*D], [Hk*Dv] */
    float *att_out;                /* [H*Dv] */
    float *hg, *hu;                /* [F] gate, up */
    float *kcache, *vcache;        /* [n_layer][C][Hk*D], [n_layer][C][Hk*Dv] */
    uint32_t n_fed;                /* positions with valid KV */
};

void em_ref_rmsnorm(float *out, const float *x, const float *w, int n, float eps)
{
    double ss = 0;
    for (int i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    /* a mean square past the float range would make the factor 0 and
     * silently zero the row: NaN instead, which the logits check reports as
     * broken weights (shaders/common.glsl rms_scale does the same) */
    float ms = (float)(ss / n);
    float s = isinf(ms) ? NAN : 1.0f / sqrtf(ms + eps);
    for (int i = 0; i < n; i++)
        out[i] = x[i] * s * (w ? w[i] : 1.0f);
}

void em_ref_matvec(uint32_t type, const void *w, uint64_t ne0, uint64_t ne1,
                   const float *x, float *y)
{
    const em_ttype_info *ti = em_ttype_get(type);
    uint64_t row_bytes = ne0 / ti->blck * ti->bytes;
    float *row = malloc(ne0 * sizeof *row);
    if (!row)
        return;
    for (uint64_t r = 0; r < ne1; r++) {
        em_dequant_row(type, (const uint8_t *)w + r * row_bytes, row, (int64_t)ne0);
        double acc = 0;
        for (uint64_t i = 0; i < ne0; i++)
            acc += (double)row[i] * x[i];
        y[r] = (float)acc;
    }
    free(row);
}

void em_ref_rope(float *x, int n_heads, int head_dim, int n_rot, int pos, em_rope_type type,
                 const double *theta, float mscale)
{
    for (int h = 0; h < n_heads; h++) {
        float *xh = x + h * head_dim;
        for (int i = 0; i < n_rot / 2; i++) {
            double t = (double)pos * theta[i];
            float c = (float)cos(t) * mscale, s = (float)sin(t) * mscale;
            int i0 = type == EM_ROPE_NORM ? 2 * i : i;
            int i1 = type == EM_ROPE_NORM ? 2 * i + 1 : i + n_rot / 2;
            float x0 = xh[i0], x1 = xh[i1];
            xh[i0] = x0 * c - x1 * s;
            xh[i1] = x0 * s + x1 * c;
        }
    }
}

void em_ref_attention(const float *q, const float *k, const float *v, int n_kv,
                      int n_head, int n_head_kv, int head_dim, int head_dim_v,
                      int kv_stride_k, int kv_stride_v, float scale, const float *sinks, float *out)
{
    int group = n_head / n_head_kv;
    float *score = malloc((size_t)(n_kv > 0 ? n_kv : 1) * sizeof *score);
    if (!score)
        return;
    for (int h = 0; h < n_head; h++) {
        const float *qh = q + h * head_dim;
        int kvh = h / group;
        float max = -INFINITY;
        for (int t = 0; t < n_kv; t++) {        /* score[t] = q . k_t * scale */
            const float *kt = k + (size_t)t * kv_stride_k + kvh * head_dim;
            float s = 0;
            for (int i = 0; i < head_dim; i++)
                s += qh[i] * kt[i];
            score[t] = s * scale;
            if (score[t] > max)
                max = score[t];
        }
        float sk = sinks ? sinks[h] : 0;
        if (sinks && sk > max)
            max = sk;
        double sum = sinks ? expf(sk - max) : 0;
        for (int t = 0; t < n_kv; t++) {
            score[t] = expf(score[t] - max);
            sum += score[t];
        }
        float *oh = out + h * head_dim_v;
        for (int i = 0; i < head_dim_v; i++)
            oh[i] = 0;
        for (int t = 0; t < n_kv; t++) {
            const float *vt = v + (size_t)t * kv_stride_v + kvh * head_dim_v;
            float a = (float)(score[t] / sum);
            for (int i = 0; i < head_dim_v; i++)
                oh[i] += a * vt[i];
        }
    }
    free(score);
}

void em_ref_geglu(float *out, const float *gate, const float *up, int n)
{
    const float c = 0.7978845608028654f;   /* sqrt(2 / pi) */
    for (int i = 0; i < n; i++) {
        float g = gate[i];
        out[i] = 0.5f * g * (1.0f + tanhf(c * g * (1.0f + 0.044715f * g * g))) * up[i];
    }
}

void em_ref_swiglu_oai(float *out, const float *gate, const float *up, int n)
{
    for (int i = 0; i < n; i++) {
        float g = fminf(gate[i], 7.0f), u = fminf(fmaxf(up[i], -7.0f), 7.0f);
        out[i] = g / (1.0f + expf(-1.702f * g)) * (u + 1.0f);
    }
}

void em_ref_swiglu(float *out, const float *gate, const float *up, int n)
{
    for (int i = 0; i < n; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

/* ---- whole model ---------------------------------------------------------- */

static float *load_vec(const em_gguf_tensor *t, int *fail)
{
    if (!t)
        return NULL;
    float *v = malloc(t->nelem * sizeof *v);
    if (!v) {
        *fail = 1;
        return NULL;
    }
    em_dequant_row(t->type, t->data, v, (int64_t)t->nelem);
    return v;
}

int em_ref_create(const em_model *m, uint32_t n_ctx, em_ref **out, em_err *err)
{
    *out = NULL;
    const em_hparams *hp = em_model_hparams(m);
    if (n_ctx == 0)
        return em_err_set(err, EM_EINVAL, "reference: context length must be positive");
    if (hp->encoder)
        return em_err_set(err, EM_EUNSUPPORTED, "this %s model is an encoder: it gives vectors (ember embed), not "
                          "text", hp->arch_name);
    em_ref *r = calloc(1, sizeof *r);
    if (!r)
        return em_err_set(err, EM_ENOMEM, "reference: out of memory");
    r->m = m;
    r->hp = hp;
    r->n_ctx = n_ctx;
    size_t E = hp->n_embd, F = hp->n_ff > hp->n_ff_exp ? hp->n_ff : hp->n_ff_exp;
    size_t qd = (size_t)hp->n_head * hp->head_dim, kd = (size_t)hp->n_head_kv * hp->head_dim;
    size_t vd = (size_t)hp->n_head_kv * hp->head_dim_v, od = (size_t)hp->n_head * hp->head_dim_v;
    int fail = 0;
    r->lv = calloc(hp->n_layer, sizeof *r->lv);
    fail |= !r->lv;
    for (uint32_t il = 0; !fail && il < hp->n_layer; il++) {
        const em_layer_weights *w = em_model_layer(m, il);
        ref_layer_vecs *lv = &r->lv[il];
        lv->attn_norm = load_vec(w->attn_norm, &fail);
        lv->ffn_norm = load_vec(w->ffn_norm, &fail);
        lv->bq = load_vec(w->bq, &fail);
        lv->bk = load_vec(w->bk, &fail);
        lv->bv = load_vec(w->bv, &fail);
        lv->q_norm = load_vec(w->q_norm, &fail);
        lv->k_norm = load_vec(w->k_norm, &fail);
        lv->post_attn_norm = load_vec(w->post_attn_norm, &fail);
        lv->post_ffn_norm = load_vec(w->post_ffn_norm, &fail);
        lv->bo = load_vec(w->bo, &fail);
        lv->sinks = load_vec(w->attn_sinks, &fail);
        lv->b_inp = load_vec(w->b_gate_inp, &fail);
        lv->b_gate = load_vec(w->b_gate_exps, &fail);
        lv->b_up = load_vec(w->b_up_exps, &fail);
        lv->b_down = load_vec(w->b_down_exps, &fail);
    }
    r->out_norm = load_vec(em_model_out_norm(m), &fail);
    r->rope_ff = load_vec(em_model_rope_freqs(m), &fail);
    for (int swa = 0; swa < 2 && !fail; swa++) {
        r->theta[swa] = malloc((hp->n_rot / 2 + 1) * sizeof *r->theta[swa]);
        if (!r->theta[swa])
            fail = 1;
        else
            em_hparams_rope(hp, swa, r->rope_ff, r->theta[swa], &r->mscale[swa]);
    }
    r->x = calloc(E, sizeof(float));
    r->xb = calloc(E > od ? E : od, sizeof(float));
    r->xb2 = calloc(E, sizeof(float));
    r->q = calloc(qd, sizeof(float));
    r->k = calloc(kd, sizeof(float));
    r->v = calloc(vd, sizeof(float));
    r->att_out = calloc(od, sizeof(float));
    r->hg = calloc(F, sizeof(float));
    r->hu = calloc(F, sizeof(float));
    if (hp->n_expert) {
        r->router = calloc(hp->n_expert, sizeof(float));
        r->xe = calloc(E, sizeof(float));
        fail |= !r->router || !r->xe;
    }
    r->kcache = calloc((size_t)hp->n_layer * n_ctx * kd, sizeof(float));
    r->vcache = calloc((size_t)hp->n_layer * n_ctx * vd, sizeof(float));
    if (fail || !r->x || !r->xb || !r->xb2 || !r->q || !r->k || !r->v || !r->att_out ||
        !r->hg || !r->hu || !r->kcache || !r->vcache) {
        em_ref_destroy(r);
        return em_err_set(err, EM_ENOMEM, "reference: out of memory for a %u-token context", n_ctx);
    }
    *out = r;
    return 0;
}

void em_ref_destroy(em_ref *r)
{
    if (!r)
        return;
    for (uint32_t il = 0; r->lv && il < r->hp->n_layer; il++) {
        ref_layer_vecs *lv = &r->lv[il];
        free(lv->attn_norm); free(lv->ffn_norm); free(lv->bq); free(lv->bk); free(lv->bv);
        free(lv->q_norm); free(lv->k_norm); free(lv->post_attn_norm); free(lv->post_ffn_norm);
        free(lv->bo); free(lv->sinks); free(lv->b_inp); free(lv->b_gate); free(lv->b_up); free(lv->b_down);
    }
    free(r->theta[0]); free(r->theta[1]);
    free(r->lv);
    free(r->out_norm); free(r->rope_ff);
    free(r->x); free(r->xb); free(r->xb2); free(r->q); free(r->k); free(r->v);
    free(r->att_out); free(r->hg); free(r->hu); free(r->kcache); free(r->vcache);
    free(r->router); free(r->xe);
    free(r);
}

static void matvec_t(const em_gguf_tensor *t, const float *x, float *y)
{
    em_ref_matvec(t->type, t->data, t->ne[0], t->ne[1], x, y);
}

static void add_bias(float *y, const float *b, size_t n)
{
    if (b)
        for (size_t i = 0; i < n; i++)
            y[i] += b[i];
}

/* y[ne1] = expert e's matrix of the 3-D tensor t (its rows e * ne1 ..) times x */
static void matvec_expert(const em_gguf_tensor *t, uint32_t e, const float *x, float *y)
{
    uint64_t mat_bytes = t->nbytes / t->ne[2];
    em_ref_matvec(t->type, (const uint8_t *)t->data + e * mat_bytes, t->ne[0], t->ne[1], x, y);
}

/* softmax of v[n] in place */
static void softmax(float *v, uint32_t n)
{
    float mx = v[0];
    for (uint32_t e = 1; e < n; e++)
        mx = fmaxf(mx, v[e]);
    double sum = 0;
    for (uint32_t e = 0; e < n; e++)
        sum += v[e] = expf(v[e] - mx);
    for (uint32_t e = 0; e < n; e++)
        v[e] = (float)(v[e] / sum);
}

/* The mixture-of-experts FFN of one token: the router's logits (+ bias),
 * the n_expert_used largest (the lower index first on a tie), weighted by
 * their softmax probabilities renormalised to sum 1 (qwen3moe; gpt-oss's
 * softmax of the chosen logits alone is the same weights);
 * out[E] = sum over them of weight * down(act(gate(xb), up(xb))),
 * with the experts' biases where the model has them (gpt-oss: its clamped
 * SwiGLU, ffn_oai; else SiLU-gated). */
static void moe_ffn(em_ref *r, const em_layer_weights *w, const ref_layer_vecs *lv, const float *xb, float *out)
{
    const em_hparams *hp = r->hp;
    uint32_t ne = hp->n_expert, k = hp->n_expert_used, F = hp->n_ff_exp, E = hp->n_embd;
    matvec_t(w->ffn_gate_inp, xb, r->router);
    add_bias(r->router, lv->b_inp, ne);
    softmax(r->router, ne);   /* (monotonic: the same top-k as the logits') */
    uint32_t pick[EM_MAX_EXPERTS];
    uint8_t taken[EM_MAX_EXPERTS] = { 0 };
    double wsum = 0;
    for (uint32_t j = 0; j < k; j++) {
        uint32_t best = 0;
        for (uint32_t e = 0, first = 1; e < ne; e++)
            if (!taken[e] && (first || r->router[e] > r->router[best])) {
                best = e;
                first = 0;
            }
        taken[best] = 1;
        pick[j] = best;
        wsum += r->router[best];
    }
    memset(out, 0, E * sizeof *out);
    for (uint32_t j = 0; j < k; j++) {
        uint32_t e = pick[j];
        matvec_expert(w->w_gate_exps, e, xb, r->hg);                    /* hg[F] */
        matvec_expert(w->w_up_exps, e, xb, r->hu);                      /* hu[F] */
        add_bias(r->hg, lv->b_gate ? lv->b_gate + (size_t)e * F : NULL, F);
        add_bias(r->hu, lv->b_up ? lv->b_up + (size_t)e * F : NULL, F);
        (hp->ffn_oai ? em_ref_swiglu_oai : em_ref_swiglu)(r->hg, r->hg, r->hu, (int)F);
        matvec_expert(w->w_down_exps, e, r->hg, r->xe);                 /* xe[E] */
        add_bias(r->xe, lv->b_down ? lv->b_down + (size_t)e * E : NULL, E);
        float wt = (float)(r->router[e] / wsum);
        for (uint32_t i = 0; i < E; i++)
            out[i] += wt * r->xe[i];
    }
}


int em_ref_forward(em_ref *r, int32_t token, uint32_t pos, float *logits, em_err *err)
{
    const em_hparams *hp = r->hp;
    if (token < 0 || (uint32_t)token >= hp->n_vocab)
        return em_err_set(err, EM_ERANGE, "token id %d is out of range (vocabulary has %u tokens)",
                          token, hp->n_vocab);
    if (pos >= r->n_ctx || pos > r->n_fed)
        return em_err_set(err, EM_ERANGE, "position %u is out of range (context %u, %u fed)",
                          pos, r->n_ctx, r->n_fed);
    int E = (int)hp->n_embd, H = (int)hp->n_head, Hk = (int)hp->n_head_kv;
    int D = (int)hp->head_dim, Dv = (int)hp->head_dim_v, F = (int)hp->n_ff;
    int kd = Hk * D, vd = Hk * Dv;

    em_tensor_row(em_model_tok_embd(r->m), (uint64_t)token, r->x);      /* x[E] */
    if (hp->embd_scale != 1.0f)
        for (int i = 0; i < E; i++)
            r->x[i] *= hp->embd_scale;

    for (uint32_t il = 0; il < hp->n_layer; il++) {
        const em_layer_weights *w = em_model_layer(r->m, il);
        const ref_layer_vecs *lv = &r->lv[il];
        float *kc = r->kcache + (size_t)il * r->n_ctx * kd;             /* [C][Hk*D] */
        float *vc = r->vcache + (size_t)il * r->n_ctx * vd;             /* [C][Hk*Dv] */

        em_ref_rmsnorm(r->xb, r->x, lv->attn_norm, E, hp->rms_eps);     /* xb[E] */
        matvec_t(w->wq, r->xb, r->q);                                   /* q[H*D] */
        matvec_t(w->wk, r->xb, r->k);                                   /* k[Hk*D] */
        matvec_t(w->wv, r->xb, r->v);                                   /* v[Hk*Dv] */
        add_bias(r->q, lv->bq, (size_t)H * D);
        add_bias(r->k, lv->bk, (size_t)kd);
        add_bias(r->v, lv->bv, (size_t)vd);
        if (lv->q_norm) {                                               /* per-head norm */
            for (int h = 0; h < H; h++)
                em_ref_rmsnorm(r->q + h * D, r->q + h * D, lv->q_norm, D, hp->rms_eps);
            for (int h = 0; h < Hk; h++)
                em_ref_rmsnorm(r->k + h * D, r->k + h * D, lv->k_norm, D, hp->rms_eps);
        }
        /* a windowed layer: its own rope base, unscaled, and the last
         * `window` positions (this one included) */
        uint32_t window = em_hparams_window(hp, il);
        int sw = window != 0;
        em_ref_rope(r->q, H, D, (int)hp->n_rot, (int)pos, hp->rope_type, r->theta[sw], r->mscale[sw]);
        em_ref_rope(r->k, Hk, D, (int)hp->n_rot, (int)pos, hp->rope_type, r->theta[sw], r->mscale[sw]);
        memcpy(kc + (size_t)pos * kd, r->k, (size_t)kd * sizeof(float));
        memcpy(vc + (size_t)pos * vd, r->v, (size_t)vd * sizeof(float));

        uint32_t first = window && pos + 1 > window ? pos + 1 - window : 0;
        em_ref_attention(r->q, kc + (size_t)first * kd, vc + (size_t)first * vd, (int)(pos + 1 - first), H, Hk,
                         D, Dv, kd, vd, hp->attn_scale, lv->sinks, r->att_out);   /* att_out[H*Dv] */
        matvec_t(w->wo, r->att_out, r->xb2);                            /* xb2[E] */
        add_bias(r->xb2, lv->bo, (size_t)E);
        if (lv->post_attn_norm)
            em_ref_rmsnorm(r->xb2, r->xb2, lv->post_attn_norm, E, hp->rms_eps);
        for (int i = 0; i < E; i++)
            r->x[i] += r->xb2[i];

        em_ref_rmsnorm(r->xb, r->x, lv->ffn_norm, E, hp->rms_eps);
        if (hp->n_expert) {
            moe_ffn(r, w, lv, r->xb, r->xb2);                           /* xb2[E] */
        } else {
            matvec_t(w->w_gate, r->xb, r->hg);                          /* hg[F] */
            matvec_t(w->w_up, r->xb, r->hu);                            /* hu[F] */
            if (hp->ffn_gelu)
                em_ref_geglu(r->hg, r->hg, r->hu, F);
            else
                em_ref_swiglu(r->hg, r->hg, r->hu, F);
            matvec_t(w->w_down, r->hg, r->xb2);                         /* xb2[E] */
        }
        if (lv->post_ffn_norm)
            em_ref_rmsnorm(r->xb2, r->xb2, lv->post_ffn_norm, E, hp->rms_eps);
        for (int i = 0; i < E; i++)
            r->x[i] += r->xb2[i];
    }
    r->n_fed = pos + 1;
    if (logits) {
        em_ref_rmsnorm(r->xb, r->x, r->out_norm, E, hp->rms_eps);
        matvec_t(em_model_output(r->m), r->xb, logits);                 /* logits[V] */
        if (hp->logit_softcap > 0)
            for (uint32_t i = 0; i < hp->n_vocab; i++)
                logits[i] = hp->logit_softcap * tanhf(logits[i] / hp->logit_softcap);
    }
    return 0;
}

int em_ref_hidden(const em_ref *r, float *out, em_err *err)
{
    if (!r->n_fed)
        return em_err_set(err, EM_EINVAL, "reference: no position was fed");
    em_ref_rmsnorm(out, r->x, r->out_norm, (int)r->hp->n_embd, r->hp->rms_eps);
    return 0;
}
