/* encode.c — the CPU reference of a bert encoder over a whole sequence
 * (encode.h): embeddings of tokens, positions and type 0 summed and
 * LayerNorm'd; per block, biased Q/K/V, attention of every token over
 * every token, the biased output projection, residual and LayerNorm, the
 * erf-GELU FFN with biases, residual and LayerNorm (post-norm, as BERT).
 * And pooling, for any model's hidden states. Dims: E = n_embd, H =
 * n_head, D = head_dim, F = n_ff, n = tokens. */
#include "core/run/encode.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/model/quant.h"
#include "core/run/ref.h"

void em_ref_layernorm(float *out, const float *x, const float *w, const float *b, int n, float eps)
{
    double mean = 0, var = 0;
    for (int i = 0; i < n; i++)
        mean += x[i];
    mean /= n;
    for (int i = 0; i < n; i++)
        var += ((double)x[i] - mean) * ((double)x[i] - mean);
    var /= n;
    double s = 1.0 / sqrt(var + eps);
    for (int i = 0; i < n; i++)
        out[i] = (float)(((double)x[i] - mean) * s) * w[i] + (b ? b[i] : 0.0f);
}

void em_ref_gelu_erf(float *out, const float *x, int n)
{
    for (int i = 0; i < n; i++)
        out[i] = (float)(0.5 * x[i] * (1.0 + erf(x[i] / sqrt(2.0))));
}

void em_pool(em_pooling mode, const float *h, uint32_t n, uint32_t dim, float *out)
{
    if (mode == EM_POOL_CLS || mode == EM_POOL_LAST) {
        memcpy(out, h + (size_t)(mode == EM_POOL_CLS ? 0 : n - 1) * dim, dim * sizeof *out);
        return;
    }
    for (uint32_t d = 0; d < dim; d++) {
        double s = 0;
        for (uint32_t t = 0; t < n; t++)
            s += h[(size_t)t * dim + d];
        out[d] = (float)(s / n);
    }
}

int em_pool_resolve(const em_hparams *hp, em_pooling *mode, em_err *err)
{
    if (*mode == EM_POOL_NONE)
        *mode = hp->pooling != EM_POOL_NONE ? hp->pooling : EM_POOL_MEAN;
    if (*mode == EM_POOL_RANK)
        return em_err_set(err, EM_EUNSUPPORTED, "embed: rank pooling gives a score, not a vector");
    return 0;
}

uint32_t em_pool_rows(em_pooling mode, uint32_t done, uint32_t c, uint32_t n, uint32_t *first)
{
    *first = 0;
    if (mode == EM_POOL_MEAN)
        return c;
    if (mode == EM_POOL_LAST) {
        *first = c - 1;
        return done + c == n;
    }
    return done == 0;   /* (CLS, RANK: the first position's) */
}

void em_l2_normalize(float *v, uint32_t n)
{
    double ss = 0;
    for (uint32_t i = 0; i < n; i++)
        ss += (double)v[i] * v[i];
    if (ss <= 0)
        return;
    double s = 1.0 / sqrt(ss);
    for (uint32_t i = 0; i < n; i++)
        v[i] = (float)(v[i] * s);
}

/* A whole vector tensor (norm, bias) as f32, malloc'd. */
static float *vec_of(const em_gguf_tensor *t)
{
    float *v = malloc(t->nelem * sizeof *v);
    if (v)
        em_dequant_row(t->type, t->data, v, (int64_t)t->nelem);
    return v;
}

/* y[j][ne1] = W x[j] + b for the n rows x[j][ne0]: each weight row
 * dequantized once (row, ne0 floats of scratch). */
static void matmul(const em_gguf_tensor *w, const float *b, const float *x, uint32_t n, float *y, float *row)
{
    uint64_t ne0 = w->ne[0], ne1 = w->ne[1];
    for (uint64_t r = 0; r < ne1; r++) {
        em_tensor_row(w, r, row);
        for (uint32_t j = 0; j < n; j++) {
            const float *xj = x + (size_t)j * ne0;
            double acc = 0;
            for (uint64_t i = 0; i < ne0; i++)
                acc += (double)row[i] * xj[i];
            y[(size_t)j * ne1 + r] = (float)acc + (b ? b[r] : 0.0f);
        }
    }
}

/* Every query of n over every key: q, k, v [n][H*D] (heads side by side),
 * out [n][H*D]; p: [n] scratch. */
static void attend_all(const float *q, const float *k, const float *v, uint32_t n, uint32_t H, uint32_t D, float scale,
                       float *out, double *p)
{
    size_t W = (size_t)H * D;
    for (uint32_t h = 0; h < H; h++)
        for (uint32_t i = 0; i < n; i++) {
            const float *qi = q + i * W + h * D;
            double mx = -INFINITY, sum = 0;
            for (uint32_t j = 0; j < n; j++) {
                const float *kj = k + j * W + h * D;
                double s = 0;
                for (uint32_t d = 0; d < D; d++)
                    s += (double)qi[d] * kj[d];
                p[j] = s * scale;
                mx = p[j] > mx ? p[j] : mx;
            }
            for (uint32_t j = 0; j < n; j++)
                sum += p[j] = exp(p[j] - mx);
            float *oi = out + i * W + h * D;
            for (uint32_t d = 0; d < D; d++) {
                double acc = 0;
                for (uint32_t j = 0; j < n; j++)
                    acc += p[j] * v[j * W + h * D + d];
                oi[d] = (float)(acc / sum);
            }
        }
}

int em_ref_encode(const em_model *m, const int32_t *ids, const uint8_t *types, uint32_t n, float *out, em_err *err)
{
    const em_hparams *hp = em_model_hparams(m);
    if (!hp->encoder)
        return em_err_set(err, EM_EUNSUPPORTED, "encode: %s is not an encoder", hp->arch_name);
    if (n == 0 || n > hp->n_pos)
        return em_err_set(err, EM_ERANGE, "encode: %u tokens; this model takes 1 to %u", n, hp->n_pos);
    for (uint32_t j = 0; j < n; j++)
        if (ids[j] < 0 || (uint32_t)ids[j] >= hp->n_vocab)
            return em_err_set(err, EM_ERANGE, "encode: token %d is not in the vocabulary of %u", ids[j], hp->n_vocab);
    for (uint32_t j = 0; types && j < n; j++)
        if (types[j] >= hp->n_token_types)
            return em_err_set(err, EM_ERANGE, "encode: token type %u; this model has %u", types[j], hp->n_token_types);
    const em_encoder_weights *ew = em_model_encoder(m);
    size_t E = hp->n_embd, H = hp->n_head, D = hp->head_dim, F = hp->n_ff, W = H * D;
    size_t big = F > W ? F : W;
    big = big > E ? big : E;
    float *x = out;                                        /* [n][E] the residual stream */
    float *q = malloc(n * big * sizeof *q), *k = malloc(n * W * sizeof *k), *v = malloc(n * W * sizeof *v);
    float *a = malloc(n * big * sizeof *a);                /* [n][max(W, F, E)] */
    float *row = malloc(big * sizeof *row), *t = malloc(E * sizeof *t);
    double *p = malloc(n * sizeof *p);
    float *nw = vec_of(ew->norm), *nb = vec_of(ew->norm_b);
    int rc = 0;
    if (!q || !k || !v || !a || !row || !t || !p || !nw || !nb) {
        rc = em_err_set(err, EM_ENOMEM, "encode: out of memory");
        goto done;
    }
    for (uint32_t j = 0; j < n; j++) {   /* token + position + type, normed */
        float *xj = x + j * E;
        em_tensor_row(em_model_tok_embd(m), (uint64_t)ids[j], xj);
        em_tensor_row(ew->pos, j, t);
        for (size_t i = 0; i < E; i++)
            xj[i] += t[i];
        em_tensor_row(ew->types, types ? types[j] : 0, t);
        for (size_t i = 0; i < E; i++)
            xj[i] += t[i];
        em_ref_layernorm(xj, xj, nw, nb, (int)E, hp->rms_eps);
    }
    for (uint32_t il = 0; il < hp->n_layer && !rc; il++) {
        const em_layer_weights *w = em_model_layer(m, il);
        float *bq = vec_of(w->bq), *bk = vec_of(w->bk), *bv = vec_of(w->bv), *bo = vec_of(w->bo);
        float *an = vec_of(w->attn_norm), *anb = vec_of(w->attn_norm_b), *fn = vec_of(w->ffn_norm);
        float *fnb = vec_of(w->ffn_norm_b), *bu = vec_of(w->b_up), *bd = vec_of(w->b_down);
        if (!bq || !bk || !bv || !bo || !an || !anb || !fn || !fnb || !bu || !bd) {
            rc = em_err_set(err, EM_ENOMEM, "encode: out of memory");
        } else {
            matmul(w->wq, bq, x, n, q, row);
            matmul(w->wk, bk, x, n, k, row);
            matmul(w->wv, bv, x, n, v, row);
            attend_all(q, k, v, n, (uint32_t)H, (uint32_t)D, hp->attn_scale, a, p);
            matmul(w->wo, bo, a, n, q, row);                     /* q: [n][E] the attention's output */
            for (uint32_t j = 0; j < n; j++) {
                for (size_t i = 0; i < E; i++)
                    x[j * E + i] += q[j * E + i];
                em_ref_layernorm(x + j * E, x + j * E, an, anb, (int)E, hp->rms_eps);
            }
            matmul(w->w_up, bu, x, n, a, row);                   /* a: [n][F] */
            em_ref_gelu_erf(a, a, (int)(n * F));
            matmul(w->w_down, bd, a, n, q, row);                 /* q: [n][E] the FFN's output */
            for (uint32_t j = 0; j < n; j++) {
                for (size_t i = 0; i < E; i++)
                    x[j * E + i] += q[j * E + i];
                em_ref_layernorm(x + j * E, x + j * E, fn, fnb, (int)E, hp->rms_eps);
            }
        }
        free(bq); free(bk); free(bv); free(bo); free(an); free(anb); free(fn); free(fnb); free(bu); free(bd);
    }
done:
    free(q); free(k); free(v); free(a); free(row); free(t); free(p); free(nw); free(nb);
    return rc;
}

int em_ref_embed(const em_model *m, const int32_t *ids, uint32_t n, em_pooling mode, int normalize, float *out,
                 em_err *err)
{
    const em_hparams *hp = em_model_hparams(m);
    int rc = em_pool_resolve(hp, &mode, err);
    if (rc)
        return rc;
    if (n == 0)
        return em_err_set(err, EM_ERANGE, "embed: no tokens");
    size_t E = hp->n_embd;
    float *h = malloc((size_t)n * E * sizeof *h);
    if (!h)
        return em_err_set(err, EM_ENOMEM, "embed: out of memory");
    if (hp->encoder) {
        rc = em_ref_encode(m, ids, NULL, n, h, err);
    } else {   /* a decoder: position by position, each one's final hidden state */
        em_ref *r = NULL;
        rc = em_ref_create(m, n, &r, err);
        for (uint32_t j = 0; !rc && j < n; j++)
            if (!(rc = em_ref_forward(r, ids[j], j, NULL, err)))
                rc = em_ref_hidden(r, h + j * E, err);
        em_ref_destroy(r);
    }
    if (!rc) {
        em_pool(mode, h, n, (uint32_t)E, out);
        if (normalize)
            em_l2_normalize(out, (uint32_t)E);
    }
    free(h);
    return rc;
}

int em_ref_cls_head(const em_model *m, const float *h, float *out)
{
    const em_encoder_weights *ew = em_model_encoder(m);
    uint32_t E = em_model_hparams(m)->n_embd;
    float *t = malloc(E * sizeof *t), *b = malloc(E * sizeof *b);
    if (!t || !b) {
        free(t);
        free(b);
        return EM_ENOMEM;
    }
    const float *in = h;
    if (ew->cls) {   /* dense, then tanh */
        em_ref_matvec(ew->cls->type, ew->cls->data, E, E, h, t);
        if (ew->cls_b)
            em_dequant_row(ew->cls_b->type, ew->cls_b->data, b, E);
        for (uint32_t i = 0; i < E; i++)
            t[i] = tanhf(t[i] + (ew->cls_b ? b[i] : 0.0f));
        in = t;
    }
    if (ew->cls_out) {
        uint64_t labels = ew->cls_out->ne[1];
        em_ref_matvec(ew->cls_out->type, ew->cls_out->data, E, labels, in, out);
        if (ew->cls_out_b) {   /* (labels <= E: the loader's bound) */
            em_dequant_row(ew->cls_out_b->type, ew->cls_out_b->data, b, (int64_t)labels);
            for (uint64_t i = 0; i < labels; i++)
                out[i] += b[i];
        }
    } else {
        memcpy(out, in, E * sizeof *out);   /* (a head of its dense layer alone: E outputs) */
    }
    free(t);
    free(b);
    return 0;
}

int em_ref_score(const em_model *m, const int32_t *ids, const uint8_t *types, uint32_t n, float *score, em_err *err)
{
    const em_hparams *hp = em_model_hparams(m);
    const em_encoder_weights *ew = em_model_encoder(m);
    if (!hp->encoder || (!ew->cls && !ew->cls_out))
        return em_err_set(err, EM_EUNSUPPORTED, "score: %s has no classification head (a reranker's)", hp->arch_name);
    size_t E = hp->n_embd, labels = ew->cls_out ? ew->cls_out->ne[1] : E;
    float *h = malloc((size_t)n * E * sizeof *h), *out = malloc(labels * sizeof *out);
    int rc = !h || !out ? em_err_set(err, EM_ENOMEM, "score: out of memory") : em_ref_encode(m, ids, types, n, h, err);
    if (!rc && em_ref_cls_head(m, h, out))   /* the first token's ([CLS]) */
        rc = em_err_set(err, EM_ENOMEM, "score: out of memory");
    if (!rc)
        *score = out[0];
    free(h);
    free(out);
    return rc;
}
