/* fwd_weights.c — the model's weights on the device: every matrix repacked
 * for the matrix kernel (core/gpu/wpack.h) and uploaded once, in chunks
 * that each fit one storage binding, and bound per matrix-product site;
 * every small vector (norms, biases) in one f32 buffer; each layer's KV
 * cache. Shapes as forward_int.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/gpu/forward_int.h"
#include "core/gpu/variants.h"
#include "core/model/quant.h"
#include "shaders/em_kernels.h"

/* Bytes of one position of `n` K (or V) values of all KV heads. */
#define kv_row_bytes em_fwd_kv_row_bytes

/* ---- the vecs buffer: every small f32 vector of the model --------------- */

int fwd_vec_add(em_fwd *f, const float *v, uint32_t n, uint32_t *off, em_err *err)
{
    uint32_t need = fwd_round_up(f->n_vecs + n, 4);
    if (need > f->cap_vecs) {
        uint32_t cap = f->cap_vecs ? f->cap_vecs : 4096;
        while (cap < need)
            cap *= 2;
        float *nv = realloc(f->vecs_host, (size_t)cap * sizeof *nv);
        if (!nv)
            return em_err_set(err, EM_ENOMEM, "forward: out of memory");
        f->vecs_host = nv;
        f->cap_vecs = cap;
    }
    *off = f->n_vecs;
    if (v)
        memcpy(f->vecs_host + f->n_vecs, v, (size_t)n * sizeof *v);
    else
        memset(f->vecs_host + f->n_vecs, 0, (size_t)n * sizeof *v);
    f->n_vecs = need;
    for (uint32_t i = *off + n; i < need; i++)
        f->vecs_host[i] = 0;
    return 0;
}

int fwd_vec_tensor(em_fwd *f, const em_gguf_tensor *t, uint32_t *off, em_err *err)
{
    int rc = fwd_vec_add(f, NULL, (uint32_t)t->nelem, off, err);
    if (!rc)
        em_dequant_row(t->type, t->data, f->vecs_host + *off, (int64_t)t->nelem);
    return rc;
}

/* ---- weights ---------------------------------------------------------------- */


static const void *src_row(const row_src *s, uint32_t r)
{
    const em_gguf_tensor *t;
    uint64_t row;
    if (s->experts) {   /* expert e's matrix, padded: NULL (zeros) past its rows */
        uint32_t e = r / s->rows_per, i = r % s->rows_per;
        uint32_t k = s->interleave ? i & 1 : 0;
        row = s->interleave ? i / 2 : i;
        t = s->t[k];
        if (row >= t->ne[1])
            return NULL;
        uint64_t row_bytes = t->nbytes / (t->ne[1] * t->ne[2]);
        return (const uint8_t *)t->data + ((uint64_t)e * t->ne[1] + row) * row_bytes;
    }
    if (s->interleave) {
        t = s->t[r & 1];
        row = r >> 1;
    } else {
        uint32_t i = 0;
        row = r;
        while (i + 1 < s->n && row >= s->t[i]->ne[1]) {
            row -= s->t[i]->ne[1];
            i++;
        }
        t = s->t[i];
    }
    uint64_t row_bytes = t->nbytes / t->ne[1];
    return (const uint8_t *)t->data + row * row_bytes;
}

/* Pack and upload the rows of s into a new pmat, split into chunks that each
 * fit one storage-buffer binding. */
int fwd_pmat_build(em_fwd *f, const row_src *s, pmat *pm, em_vk_progress *prog, em_err *err)
{
    uint32_t N = 0;
    for (uint32_t i = 0; i < s->n; i++)
        N += (uint32_t)s->t[i]->ne[1];
    if (s->experts)
        N = s->experts * s->rows_per;
    int rc = em_wpack_layout_for(s->t[0]->type, (uint32_t)s->t[0]->ne[0], N, f->RPW, f->L, &pm->L, err);
    if (rc)
        return em_err_prefix(err, rc, "tensor '%s'", s->t[0]->name);
    const em_wpack_layout *L = &pm->L;
    const em_vk_dev_info *di = em_vk_info(f->vk);
    uint64_t limit = di->max_storage_range;      /* the weights are a texel buffer (mm.comp) */
    if (limit > di->max_texel_elems * 16)
        limit = di->max_texel_elems * 16;
    if (limit > (1ull << 30))
        limit = 1ull << 30;
    uint32_t gpc = (uint32_t)(limit / L->group_qw_bytes);   /* groups per chunk */
    if (s->experts)   /* whole experts per chunk */
        gpc = gpc / (s->rows_per / L->R) * (s->rows_per / L->R);
    if (gpc == 0)
        return em_err_set(err, EM_EUNSUPPORTED,
                          "tensor '%s': one %s (%llu bytes) exceeds the device's binding range", s->t[0]->name,
                          s->experts ? "expert's matrix" : "row group",
                          (unsigned long long)(s->experts ? L->group_qw_bytes * (s->rows_per / L->R)
                                                          : L->group_qw_bytes));
    uint32_t n_chunks = (L->n_groups + gpc - 1) / gpc;
    if (n_chunks > MAX_CHUNKS)
        return em_err_set(err, EM_EUNSUPPORTED, "tensor '%s' is too large (%u chunks)",
                          s->t[0]->name, n_chunks);
    /* host staging for a batch of groups */
    uint32_t gbatch = (uint32_t)((8u << 20) / L->group_qw_bytes);
    if (gbatch == 0)
        gbatch = 1;
    uint32_t *qw = malloc(L->group_qw_bytes * gbatch);
    uint16_t *sc = L->has_sc ? malloc(L->group_sc_bytes * gbatch) : NULL;
    float *tmp = malloc((size_t)L->K_pad * sizeof *tmp);
    if (!qw || (L->has_sc && !sc) || !tmp) {
        rc = em_err_set(err, EM_ENOMEM, "forward: out of memory packing '%s'", s->t[0]->name);
        goto done;
    }
    for (uint32_t c = 0; c < n_chunks; c++) {
        mat_chunk *ch = &pm->ch[c];
        uint32_t g0 = c * gpc, g1 = g0 + gpc < L->n_groups ? g0 + gpc : L->n_groups;
        ch->row0 = g0 * L->R;
        ch->rows = (g1 * L->R < N ? g1 * L->R : N) - ch->row0;
        if ((rc = em_vk_alloc(f->vk, EM_VK_MEM_DEVICE, (g1 - g0) * L->group_qw_bytes, &ch->qw, err)))
            goto done;
        /* kernels read the halves as 32-bit words: round the range up */
        if (L->has_sc && (rc = em_vk_alloc(f->vk, EM_VK_MEM_DEVICE,
                                           ((g1 - g0) * L->group_sc_bytes + 15) / 16 * 16, &ch->sc, err)))
            goto done;
        if (!L->has_sc)
            ch->sc = f->dummy;
        pm->n_chunks = c + 1;
        f->st.weight_bytes += ch->qw.size + (L->has_sc ? ch->sc.size : 0);
        for (uint32_t g = g0; g < g1; g += gbatch) {
            uint32_t ng = g + gbatch < g1 ? gbatch : g1 - g;
            for (uint32_t i = 0; i < ng; i++) {
                const void *rows[256];
                for (uint32_t r = 0; r < L->R; r++) {
                    uint32_t row = (g + i) * L->R + r;
                    rows[r] = row < N ? src_row(s, row) : NULL;
                }
                em_wpack_group(L, rows, (uint32_t *)((uint8_t *)qw + i * L->group_qw_bytes),
                               L->has_sc ? (uint16_t *)((uint8_t *)sc + i * L->group_sc_bytes) : NULL,
                               tmp);
            }
            uint64_t off = (uint64_t)(g - g0);
            if ((rc = em_vk_upload(f->vk, &ch->qw, off * L->group_qw_bytes, qw,
                                   ng * L->group_qw_bytes, prog, err)))
                goto done;
            if (L->has_sc && (rc = em_vk_upload(f->vk, &ch->sc, off * L->group_sc_bytes, sc,
                                                ng * L->group_sc_bytes, NULL, err)))
                goto done;
        }
    }
done:
    free(qw);
    free(sc);
    free(tmp);
    return rc;
}

void fwd_pmat_free(em_fwd *f, pmat *pm)
{
    for (uint32_t c = 0; c < pm->n_chunks; c++) {
        em_vk_free(f->vk, &pm->ch[c].qw);
        if (pm->L.has_sc)
            em_vk_free(f->vk, &pm->ch[c].sc);
    }
    pm->n_chunks = 0;
}

/* Descriptor sets binding each chunk of each part to in -> out. */
int fwd_site_bind(em_fwd *f, site *s, const em_vk_buf *in, const em_vk_buf *out, em_err *err)
{
    return fwd_site_bind_step(f, s, in, out, &f->step, err);
}

int fwd_site_bind_step(em_fwd *f, site *s, const em_vk_buf *in, const em_vk_buf *out, const em_vk_buf *stepb,
                       em_err *err)
{
    em_vk_pipe *pipe;
    int rc = fwd_get_pipe(f, em_fwd_mm_kernel(s->part[0].L.type), 1, s->flags, &pipe, err);
    if (rc)
        return rc;
    for (uint32_t p = 0; p < s->n_parts; p++) {
        for (uint32_t c = 0; c < s->part[p].n_chunks; c++) {
            mat_chunk *ch = &s->part[p].ch[c];
            em_vk_buf b[6] = { ch->qw, ch->sc, *in, *out, f->vecs, *stepb };
            if ((rc = em_vk_dset_create(f->vk, pipe, b, &ch->dset, err)))
                return rc;
        }
    }
    return 0;
}

void fwd_site_free(em_fwd *f, site *s)
{
    for (uint32_t p = 0; p < s->n_parts; p++)
        fwd_pmat_free(f, &s->part[p]);
}



/* Site s as the one matrix t from in to out: its flags, and BIAS with
 * bias's vector where the model has one; k_real the input row's length. */
static int site_one(em_fwd *f, site *s, const em_gguf_tensor *t, const em_gguf_tensor *bias, uint32_t flags,
                    uint32_t k_real, const em_vk_buf *in, const em_vk_buf *out, em_vk_progress *prog, em_err *err)
{
    row_src src = { { t }, 1, 0, 0, 0 };
    int rc;
    s->flags = flags | (bias ? EM_MM_BIAS : 0);
    s->n_parts = 1;
    s->k_real = k_real;
    if ((bias && (rc = fwd_vec_tensor(f, bias, &s->bias_off[0], err))) ||
        (rc = fwd_pmat_build(f, &src, &s->part[0], prog, err)))
        return rc;
    return fwd_site_bind(f, s, in, out, err);
}

/* A mixture-of-experts FFN (core/gpu/forward.c records it): the router
 * (the FFN norm fused, its bias), the experts' gate/up pairs interleaved
 * and down, each expert padded to whole row groups, their biases in the
 * packed order, the down biases for moe_combine.comp. */
static int fwd_build_moe(em_fwd *f, layer *ly, const em_layer_weights *w, em_vk_progress *prog, em_err *err)
{
    const em_hparams *hp = f->hp;
    uint32_t E = hp->n_embd, F = hp->n_ff_exp, NE = hp->n_expert;
    int rc;
    if (w->w_gate_exps->type != w->w_up_exps->type)
        return em_err_set(err, EM_EUNSUPPORTED, "forward: '%s' and '%s' have different types (%s, %s): the "
                          "expert kernels take gate and up of one type", w->w_gate_exps->name, w->w_up_exps->name,
                          em_ttype_name(w->w_gate_exps->type), em_ttype_name(w->w_up_exps->type));
    site *s = &ly->router;
    if ((rc = fwd_vec_tensor(f, w->ffn_norm, &s->norm_off, err)) ||
        (rc = site_one(f, s, w->ffn_gate_inp, w->b_gate_inp, EM_MM_NORM_IN, E, &f->x, &f->rl, prog, err)))
        return rc;
    uint64_t before = f->st.weight_bytes;
    s = &ly->egu;
    s->experts = NE;
    s->rows_per = fwd_round_up(2 * F, f->RPW);
    s->flags = EM_MM_NORM_IN | EM_MM_SWIGLU | EM_MM_EXPERT | EM_MM_EXPERT_TOK | (hp->ffn_oai ? EM_MM_OAI : 0) |
               (w->b_gate_exps ? EM_MM_BIAS : 0);
    s->k_real = E;
    s->n_parts = 1;
    s->norm_off = ly->router.norm_off;
    if (w->b_gate_exps) {   /* the gate/up biases in the packed rows' order */
        if ((rc = fwd_vec_add(f, NULL, NE * s->rows_per, &s->bias_off[0], err)))
            return rc;
        float *bg = f->vecs_host + s->bias_off[0];
        float *tmp = malloc((size_t)2 * NE * F * sizeof *tmp);
        if (!tmp)
            return em_err_set(err, EM_ENOMEM, "forward: out of memory");
        em_dequant_row(w->b_gate_exps->type, w->b_gate_exps->data, tmp, (int64_t)NE * F);
        em_dequant_row(w->b_up_exps->type, w->b_up_exps->data, tmp + (size_t)NE * F, (int64_t)NE * F);
        for (uint32_t e = 0; e < NE; e++)
            for (uint32_t i = 0; i < 2 * F; i++)
                bg[(size_t)e * s->rows_per + i] = tmp[(size_t)(i & 1) * NE * F + (size_t)e * F + i / 2];
        free(tmp);
    }
    {
        row_src src = { { w->w_gate_exps, w->w_up_exps }, 2, 1, NE, s->rows_per };
        if ((rc = fwd_pmat_build(f, &src, &s->part[0], prog, err)) ||
            (rc = fwd_site_bind_step(f, s, &f->x, &f->mh, &f->moe, err)))
            return rc;
    }
    s = &ly->edown;
    s->experts = NE;
    s->rows_per = fwd_round_up(E, f->RPW);
    s->flags = EM_MM_EXPERT;
    s->k_real = F;
    s->n_parts = 1;
    {
        row_src src = { { w->w_down_exps }, 1, 0, NE, s->rows_per };
        if ((rc = fwd_pmat_build(f, &src, &s->part[0], prog, err)) ||
            (rc = fwd_site_bind_step(f, s, &f->mh, &f->ye, &f->moe, err)))
            return rc;
    }
    f->st.expert_bytes += f->st.weight_bytes - before;
    if (w->b_down_exps && (rc = fwd_vec_tensor(f, w->b_down_exps, &ly->b_down_off, err)))
        return rc;
    return 0;
}

int fwd_build_layer(em_fwd *f, uint32_t il, em_vk_progress *prog, em_err *err)
{
    const em_hparams *hp = f->hp;
    const em_layer_weights *w = em_model_layer(f->m, il);
    layer *ly = &f->layers[il];
    int rc;
    uint32_t qd = hp->n_head * hp->head_dim, kd = hp->n_head_kv * hp->head_dim;

    /* QKV: one matrix when the three share a type, else one part each */
    /* (an encoder norms after each sub-block, not before: its norms are
     * layernorm.comp's, run on the residual stream) */
    const int enc = hp->encoder;
    site *s = &ly->qkv;
    s->flags = (enc ? 0 : EM_MM_NORM_IN) | (hp->has_qkv_bias ? EM_MM_BIAS : 0);
    s->k_real = hp->n_embd;
    if (!enc && (rc = fwd_vec_tensor(f, w->attn_norm, &s->norm_off, err)))
        return rc;
    if (enc && ((rc = fwd_vec_tensor(f, w->attn_norm, &ly->ln_off[0], err)) ||
                (rc = fwd_vec_tensor(f, w->attn_norm_b, &ly->ln_off[1], err)) ||
                (rc = fwd_vec_tensor(f, w->ffn_norm, &ly->ln_off[2], err)) ||
                (rc = fwd_vec_tensor(f, w->ffn_norm_b, &ly->ln_off[3], err))))
        return rc;
    uint32_t bias_off = 0;
    if (hp->has_qkv_bias) {
        uint32_t o2, o3;
        if ((rc = fwd_vec_tensor(f, w->bq, &bias_off, err)) || (rc = fwd_vec_tensor(f, w->bk, &o2, err)) ||
            (rc = fwd_vec_tensor(f, w->bv, &o3, err)))
            return rc;
        if (o2 != bias_off + qd || o3 != o2 + kd)
            return em_err_set(err, EM_EFORMAT, "forward: bias layout");   /* dims are multiples of 4 */
    }
    const em_gguf_tensor *qkv_t[3] = { w->wq, w->wk, w->wv };
    uint32_t rows_before[3] = { 0, qd, qd + kd };
    if (w->wq->type == w->wk->type && w->wk->type == w->wv->type) {
        row_src src = { { w->wq, w->wk, w->wv }, 3, 0, 0, 0 };
        s->n_parts = 1;
        s->y_off[0] = 0;
        s->bias_off[0] = bias_off;
        if ((rc = fwd_pmat_build(f, &src, &s->part[0], prog, err)))
            return rc;
    } else {
        s->n_parts = 3;
        for (int i = 0; i < 3; i++) {
            row_src src = { { qkv_t[i] }, 1, 0, 0, 0 };
            s->y_off[i] = rows_before[i];
            s->bias_off[i] = bias_off + rows_before[i];
            if ((rc = fwd_pmat_build(f, &src, &s->part[i], prog, err)))
                return rc;
        }
    }
    if ((rc = fwd_site_bind(f, s, &f->x, &f->qkv, err)))
        return rc;

    /* output projection, added to the residual stream (post-norm models:
     * written to gu, normed and added by norm_add.comp) */
    const int post = hp->has_post_norms;
    if (post && ((rc = fwd_vec_tensor(f, w->post_attn_norm, &ly->post_attn_off, err)) ||
                 (rc = fwd_vec_tensor(f, w->post_ffn_norm, &ly->post_ffn_off, err))))
        return rc;
    ly->sink_off = EM_NO_SINKS;
    if ((rc = site_one(f, &ly->wo, w->wo, w->bo, post ? 0 : EM_MM_ADD_OUT, hp->n_head * hp->head_dim_v, &f->att,
                       post ? &f->gu : &f->x, prog, err)) ||
        (w->attn_sinks && (rc = fwd_vec_tensor(f, w->attn_sinks, &ly->sink_off, err))))
        return rc;

    ly->b_down_off = UINT32_MAX;
    if (hp->n_expert) {
        if ((rc = fwd_build_moe(f, ly, w, prog, err)))
            return rc;
    } else if (enc) {
        /* up (its bias added) into hf, where gelu.comp runs */
        if ((rc = site_one(f, &ly->gu, w->w_up, w->b_up, 0, hp->n_embd, &f->x, &f->hf, prog, err)))
            return rc;
    } else {
        /* gate/up: interleaved pairs with the SwiGLU epilogue when they share a type */
        s = &ly->gu;
        s->k_real = hp->n_embd;
        if ((rc = fwd_vec_tensor(f, w->ffn_norm, &s->norm_off, err)))
            return rc;
        ly->gu_fused = w->w_gate->type == w->w_up->type;
        if (ly->gu_fused) {
            row_src src = { { w->w_gate, w->w_up }, 2, 1, 0, 0 };
            s->flags = EM_MM_NORM_IN | EM_MM_SWIGLU | (hp->ffn_gelu ? EM_MM_GELU : 0);
            s->n_parts = 1;
            if ((rc = fwd_pmat_build(f, &src, &s->part[0], prog, err)) ||
                (rc = fwd_site_bind(f, s, &f->x, &f->hf, err)))
                return rc;
        } else {
            s->flags = EM_MM_NORM_IN;
            s->n_parts = 2;
            s->y_off[1] = hp->n_ff;
            row_src g = { { w->w_gate }, 1, 0, 0, 0 }, u = { { w->w_up }, 1, 0, 0, 0 };
            if ((rc = fwd_pmat_build(f, &g, &s->part[0], prog, err)) ||
                (rc = fwd_pmat_build(f, &u, &s->part[1], prog, err)) ||
                (rc = fwd_site_bind(f, s, &f->x, &f->gu, err)))
                return rc;
            em_vk_pipe *sp;
            em_vk_buf b[2] = { f->gu, f->hf };
            if ((rc = fwd_get_pipe(f, EM_K_SWIGLU, 0, 0, &sp, err)) ||
                (rc = em_vk_dset_create(f->vk, sp, b, &ly->swiglu_ds, err)))
                return rc;
        }
    }
    /* down, added to the residual stream (an encoder's with its bias) */
    if (!hp->n_expert && (rc = site_one(f, &ly->down, w->w_down, w->b_down, post ? 0 : EM_MM_ADD_OUT, hp->n_ff, &f->hf,
                                        post ? &f->gu : &f->x, prog, err)))
        return rc;
    if (enc)
        return 0;   /* (no KV cache: attn_enc.comp reads the step's own K and V) */

    if (hp->has_qk_norm &&
        ((rc = fwd_vec_tensor(f, w->q_norm, &ly->qn_off, err)) || (rc = fwd_vec_tensor(f, w->k_norm, &ly->kn_off, err))))
        return rc;

    /* KV cache of this layer: the window pool's blocks for a windowed layer
     * when it has a pool of its own */
    uint64_t nb = f->win_pool && em_hparams_window(hp, il) ? f->o.n_blocks_window : f->o.n_blocks;
    uint64_t kbytes = nb * kv_row_bytes(f->o.kv_type, hp->n_head_kv * hp->head_dim) * EM_KV_BLOCK;
    uint64_t vbytes = nb * kv_row_bytes(f->o.kv_type, hp->n_head_kv * hp->head_dim_v) * EM_KV_BLOCK;
    if (kbytes > em_vk_info(f->vk)->max_storage_range || vbytes > em_vk_info(f->vk)->max_storage_range)
        return em_err_set(err, EM_EUNSUPPORTED,
                          "forward: a layer's KV cache (%llu MiB) exceeds the device's binding range; use fewer blocks",
                          (unsigned long long)(kbytes >> 20));
    if ((rc = em_vk_alloc(f->vk, EM_VK_MEM_DEVICE, kbytes, &ly->kc, err)) ||
        (rc = em_vk_alloc(f->vk, EM_VK_MEM_DEVICE, vbytes, &ly->vc, err)))
        return rc;
    f->st.kv_bytes += kbytes + vbytes;
    em_vk_pipe *rp, *dp, *pp;
    em_vk_buf rb[5] = { f->qkv, f->vecs, f->step, ly->kc, ly->vc };
    em_vk_buf db[7] = { f->qkv, f->step, ly->kc, ly->vc, f->att, f->part, f->vecs };
    em_vk_buf pb[6] = { f->qkv, f->step, ly->kc, ly->vc, f->att, f->vecs };
    if ((rc = fwd_get_pipe(f, f->k_rope, 0, 0, &rp, err)) ||
        (rc = em_vk_dset_create(f->vk, rp, rb, &ly->rope_ds, err)) ||
        (rc = fwd_get_pipe(f, f->k_dec, 0, 0, &dp, err)) ||
        (rc = em_vk_dset_create(f->vk, dp, db, &ly->dec_ds, err)) ||
        (rc = fwd_get_pipe(f, f->k_pre, 0, 0, &pp, err)) ||
        (rc = em_vk_dset_create(f->vk, pp, pb, &ly->pre_ds, err)))
        return rc;
    return 0;
}
