/* fwd_plan.c — the device memory of the batched forward pass, planned before
 * anything is allocated: the packed weights (as core/gpu/forward.c packs them:
 * fused QKV and gate/up when their types agree, types without a kernel as
 * F16, rows padded to whole row groups), the f32 vectors, the activation,
 * logits and step buffers em_fwd_create allocates, the KV block, and the KV
 * pool budget `ember serve` takes from a heap. em_fwd_create sizes its
 * buffers with em_fwd_plan_scratch, so the two cannot drift; `ember vram`
 * prints the same figures. */
#include "core/gpu/forward.h"

#include <string.h>

#include "core/gpu/fwd_plan.h"
#include "core/gpu/kparams.h"
#include "core/gpu/topk.h"
#include "core/gpu/variants.h"
#include "core/gpu/wpack.h"

static uint64_t round_up64(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

uint64_t em_fwd_kv_row_bytes(uint32_t kv_type, uint64_t n)
{
    return kv_type == EM_KV_Q8_0 ? n + n / 32 * 2 : n * 2;
}

uint64_t em_fwd_kv_block_bytes_hp(const em_hparams *hp, uint32_t kv_type)
{
    if (hp->encoder)   /* (its blocks are bookkeeping: nothing is kept) */
        return 0;
    return (uint64_t)hp->n_layer * EM_KV_BLOCK *
           (em_fwd_kv_row_bytes(kv_type, (uint64_t)hp->n_head_kv * hp->head_dim) +
            em_fwd_kv_row_bytes(kv_type, (uint64_t)hp->n_head_kv * hp->head_dim_v));
}

void em_fwd_kv_split_bytes(const em_hparams *hp, uint32_t kv_type, uint64_t *main, uint64_t *window)
{
    uint64_t layer = em_fwd_kv_block_bytes_hp(hp, kv_type) / hp->n_layer;
    uint32_t n_win = 0;
    for (uint32_t il = 0; il < hp->n_layer; il++)
        n_win += em_hparams_window(hp, il) != 0;
    *main = layer * (hp->n_layer - n_win);
    *window = layer * n_win;
}

uint32_t em_fwd_window_blocks(const em_hparams *hp, uint32_t max_tokens, uint32_t max_ctx)
{
    if (!hp->n_swa)
        return 0;
    uint64_t n = ((uint64_t)hp->n_swa - 1 + max_tokens + EM_KV_BLOCK - 1) / EM_KV_BLOCK + 1;
    uint64_t ctx = ((uint64_t)max_ctx + EM_KV_BLOCK - 1) / EM_KV_BLOCK;
    return (uint32_t)(n < ctx ? n : ctx);
}

uint64_t em_fwd_plan_vec_floats(const em_model *m, uint32_t rows)
{
    const em_hparams *hp = em_model_hparams(m);
    uint64_t nv = 0;
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        const em_layer_weights *w = em_model_layer(m, il);
        const em_gguf_tensor *v[] = { w->attn_norm, w->ffn_norm, w->bq, w->bk, w->bv,
                                      w->q_norm, w->k_norm, w->post_attn_norm, w->post_ffn_norm,
                                      w->b_gate_inp, w->b_down_exps, w->bo, w->attn_sinks,
                                      w->attn_norm_b, w->ffn_norm_b, w->b_up, w->b_down };
        for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
            if (v[i])
                nv += round_up64(v[i]->nelem, 4);
        if (w->b_gate_exps)   /* (the experts' gate/up biases in their packed rows' order: fwd_weights.c) */
            nv += round_up64((uint64_t)hp->n_expert * round_up64(2 * hp->n_ff_exp, rows), 4);
    }
    const em_encoder_weights *ew = em_model_encoder(m);
    const em_gguf_tensor *ev[] = { ew->pos, ew->types, ew->norm, ew->norm_b };
    for (size_t i = 0; i < sizeof ev / sizeof ev[0]; i++)   /* (an encoder's embeddings; NULL for a decoder) */
        if (ev[i])
            nv += round_up64(ev[i]->nelem, 4);
    /* the output norm, the rope frequencies (a second table for sliding-window layers) */
    return nv + round_up64(hp->n_embd, 4) + (hp->n_swa ? 2 : 1) * round_up64(hp->n_rot / 2, 4) + 4;
}

/* Device bytes of one packed matrix: the rows of the n tensors t[] (one type)
 * stacked, as pmat_build allocates them (whole row groups; block scales in
 * 16-byte words). Adds them to *total and to by_type[type of t[0]]. */
static int plan_mat(const em_gguf_tensor *const *t, uint32_t n, uint32_t rows, uint32_t lanes,
                    em_fwd_mem *mem, em_err *err)
{
    uint32_t N = 0;
    for (uint32_t i = 0; i < n; i++)
        N += (uint32_t)t[i]->ne[1];
    if (t[0]->ne[2] > 1)   /* stacked experts (gate/up pairs together), each padded to whole row groups */
        N = (uint32_t)(t[0]->ne[2] * round_up64(N, rows));
    em_wpack_layout L;
    int rc = em_wpack_layout_for(t[0]->type, (uint32_t)t[0]->ne[0], N, rows, lanes, &L, err);
    if (rc)
        return em_err_prefix(err, rc, "tensor '%s'", t[0]->name);
    /* pmat_build rounds each chunk's scales up to 16 bytes: nb * R * 2 bytes
     * per group already are for the R >= 8 of em_fwd_mm_rows */
    uint64_t b = (uint64_t)L.n_groups * (L.group_qw_bytes + round_up64(L.group_sc_bytes, 16));
    mem->weights += b;
    if (t[0]->type < EM_T_COUNT)
        mem->weights_by_type[t[0]->type] += b;
    return 0;
}

int em_fwd_plan_weights(const em_model *m, uint32_t rows, uint32_t lanes, em_fwd_mem *mem,
                        em_err *err)
{
    const em_hparams *hp = em_model_hparams(m);
    mem->weights = 0;
    memset(mem->weights_by_type, 0, sizeof mem->weights_by_type);
    int rc = 0;
    for (uint32_t il = 0; il < hp->n_layer && !rc; il++) {
        const em_layer_weights *w = em_model_layer(m, il);
        const em_gguf_tensor *qkv[3] = { w->wq, w->wk, w->wv };
        if (w->wq->type == w->wk->type && w->wk->type == w->wv->type)
            rc = plan_mat(qkv, 3, rows, lanes, mem, err);
        else
            for (int i = 0; i < 3 && !rc; i++)
                rc = plan_mat(&qkv[i], 1, rows, lanes, mem, err);
        const em_gguf_tensor *gu[2] = { w->w_gate, w->w_up };
        if (!rc)
            rc = plan_mat(&w->wo, 1, rows, lanes, mem, err);
        if (!rc && hp->n_expert) {   /* the router; the experts' gate/up pairs and down (fwd_weights.c) */
            const em_gguf_tensor *egu[2] = { w->w_gate_exps, w->w_up_exps };
            if (!(rc = plan_mat(&w->ffn_gate_inp, 1, rows, lanes, mem, err)) &&
                !(rc = plan_mat(egu, 2, rows, lanes, mem, err)))
                rc = plan_mat(&w->w_down_exps, 1, rows, lanes, mem, err);
            continue;
        }
        if (!rc && !w->w_gate)   /* (an encoder's FFN has no gate) */
            rc = plan_mat(&gu[1], 1, rows, lanes, mem, err);
        else if (!rc && w->w_gate->type == w->w_up->type)
            rc = plan_mat(gu, 2, rows, lanes, mem, err);
        else if (!rc && !(rc = plan_mat(&gu[0], 1, rows, lanes, mem, err)))
            rc = plan_mat(&gu[1], 1, rows, lanes, mem, err);
        if (!rc)
            rc = plan_mat(&w->w_down, 1, rows, lanes, mem, err);
    }
    const em_gguf_tensor *te = em_model_tok_embd(m), *to = em_model_output(m);
    if (!rc)
        rc = plan_mat(&te, 1, rows, lanes, mem, err);
    if (!rc && to && to != te)   /* tied: the output reuses the embedding's memory (an encoder has none) */
        rc = plan_mat(&to, 1, rows, lanes, mem, err);
    mem->vecs = em_fwd_plan_vec_floats(m, rows) * 4;
    return rc;
}

static uint64_t round32(uint32_t v) { return round_up64(v, 32); }

uint32_t em_fwd_plan_logit_rows(const em_hparams *hp, uint32_t want, uint64_t max_binding)
{
    /* per row: its logits, its steering (mask and adjustments: the larger
     * below ~50k tokens) and its candidates, each buffer one binding */
    uint64_t row = (uint64_t)hp->n_vocab * 4, steer = em_topk_steer_words(1, EM_FWD_STEER_ADJ, hp->n_vocab) * 4;
    if (row < steer)
        row = steer;
    if (row < EM_TOPK_STRIDE * 4)
        row = EM_TOPK_STRIDE * 4;
    uint64_t fit = max_binding ? max_binding / row : want;
    return want < fit ? want : (uint32_t)fit;
}

uint64_t em_fwd_plan_part_unit(const em_hparams *hp)
{
    return (uint64_t)hp->n_head * ((uint64_t)hp->head_dim_v + 2) * 4;   /* per head: M, L, Dv outputs */
}

uint32_t em_fwd_plan_max_split(const em_hparams *hp, uint32_t max_tokens, uint64_t max_binding)
{
    uint64_t fit = max_binding ? max_binding / (em_fwd_plan_part_unit(hp) * (max_tokens ? max_tokens : 1))
                               : EM_ATTN_MAX_SPLIT;
    return fit >= EM_ATTN_MAX_SPLIT ? EM_ATTN_MAX_SPLIT : fit > 1 ? (uint32_t)fit : 1;
}

void em_fwd_plan_scratch(const em_hparams *hp, uint32_t max_tokens, uint32_t max_seqs,
                         uint32_t max_ctx, uint32_t max_logits, uint64_t max_binding, em_fwd_mem *mem)
{
    uint64_t T = max_tokens;
    uint64_t L = em_fwd_plan_logit_rows(hp, max_logits ? max_logits : max_seqs, max_binding);
    if (!L)
        L = 1;   /* (em_fwd_create refuses such a model) */
    uint64_t qkv_dim = (uint64_t)hp->n_head * hp->head_dim +
                       (uint64_t)hp->n_head_kv * (hp->head_dim + hp->head_dim_v);
    mem->x = T * round32(hp->n_embd) * 4;                      /* [T][E] residual stream */
    mem->qkv = T * round_up64(qkv_dim, 32) * 4;                /* [T][H*D + Hk*(D+Dv)] */
    mem->att = T * round32(hp->n_head * hp->head_dim_v) * 4;   /* [T][H*Dv] attention out */
    mem->hf = T * round32(hp->n_ff) * 4;                       /* [T][F] SwiGLU out */
    /* [T][2F] gate/up; also a block's output before its norm (post-norm models) */
    mem->gu = T * round32(2 * hp->n_ff > hp->n_embd ? 2 * hp->n_ff : hp->n_embd) * 4;
    /* split-K partials [query][split] of every head, at the splits per
     * query one binding allows (one split writes no partials) */
    uint32_t splits = em_fwd_plan_max_split(hp, max_tokens, max_binding);
    mem->part = (splits > 1 ? T * splits : 1) * em_fwd_plan_part_unit(hp);
    /* a mixture of experts: router logits [T][NE], each (token, expert)
     * pair's hidden row [T*K][F_exp] and output [T*K][E], and the route:
     * (count, start) per expert, the pair lists, choices and weights [T*K] */
    uint64_t TK = T * hp->n_expert_used;
    mem->moe_rl = hp->n_expert ? T * round_up64(hp->n_expert, 32) * 4 : 0;
    mem->moe_mh = hp->n_expert ? TK * round_up64(hp->n_ff_exp, 32) * 4 : 0;
    mem->moe_ye = hp->n_expert ? TK * round32(hp->n_embd) * 4 : 0;
    mem->moe_route = hp->n_expert ? (2 * (uint64_t)hp->n_expert + 3 * TK) * 4 : 0;
    mem->dummy = 256;
    mem->logits = L * hp->n_vocab * 4;                          /* [L][V] readback */
    /* per row: 4 header words, a mask, adjustments of 3 words; the summary */
    mem->steer = em_topk_steer_words((uint32_t)L, L * EM_FWD_STEER_ADJ, hp->n_vocab) * 4;
    mem->cand = L * EM_TOPK_STRIDE * 4;
    /* tokens, positions, slots [T] each, gather [L], decode and tile pairs
     * [2T] each, block tables [max_seqs][ceil(max_ctx / EM_KV_BLOCK)] (two
     * sets for a sliding-window model: its window pool's), pooled spans
     * [2 max_seqs], token types [T] */
    mem->step = (8 * T + L + 2 * (uint64_t)max_seqs + (hp->n_swa ? 2 : 1) * (uint64_t)max_seqs *
                                 (((uint64_t)max_ctx + EM_KV_BLOCK - 1) / EM_KV_BLOCK)) * 4;
    mem->pooled = (uint64_t)max_seqs * round32(hp->n_embd) * 4;   /* [max_seqs][E] readback */
    mem->staging = EM_FWD_STAGING_BYTES;
    mem->margin = EM_FWD_MARGIN_BYTES;
}

uint64_t em_fwd_mem_scratch(const em_fwd_mem *mem)
{
    return mem->x + mem->qkv + mem->att + mem->hf + mem->gu + mem->part + mem->moe_rl + mem->moe_mh + mem->moe_ye +
           mem->moe_route + mem->dummy + mem->logits + mem->steer + mem->cand + mem->step +
           mem->pooled;
}

uint64_t em_fwd_plan_kv_budget(uint64_t heap, const em_fwd_mem *mem)
{
    uint64_t use = heap * 8 / 10;   /* heaps are far below 2^61 bytes */
    uint64_t used = mem->weights + mem->vecs + em_fwd_mem_scratch(mem) + mem->staging + mem->margin;
    return use > used ? use - used : 0;
}
