/* forward.c — the model on the GPU: weights repacked and uploaded once, one
 * command buffer per step shape recorded once and replayed, and per step:
 * embed -> per layer [QKV (norm fused) -> RoPE + KV write -> attention ->
 * output projection (+residual) -> gate/up (norm and SwiGLU fused) -> down
 * (+residual)] -> final norm + logits (fused). Gemma 3 adds the embedding
 * scale, a norm of each block's output before the residual (norm_add.comp),
 * GELU for SiLU, and sliding-window layers with their own rope frequencies
 * (windowed attention kernels). An encoder (bert) records its own layers
 * (record_encoder: post-LayerNorms, biases, attention over each whole
 * sequence in the step, GELU; no KV cache, no logits); any model's step may
 * ask for pooled rows (pool.comp), an embedding's. Shapes: E = n_embd, H/Hk =
 * query/KV heads, D/Dv = head dims, F = n_ff, V = n_vocab, T = tokens. */
#include "core/gpu/forward_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/gpu/fwd_plan.h"
#include "core/gpu/kparams.h"
#include "core/gpu/topk.h"
#include "core/gpu/variants.h"
#include "core/gpu/wpack.h"
#include "core/model/gguf.h"
#include "core/model/quant.h"
#include "shaders/em_kernels.h"

static const char *const prof_names[P_COUNT] = {
    "embed", "qkv", "rope_kv", "attn", "wo", "gate_up", "swiglu", "down", "output",
};

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}


/* Bytes of one position of `n` K (or V) values of all KV heads. */
#define kv_row_bytes em_fwd_kv_row_bytes

/* ---- pipelines ------------------------------------------------------------ */

/* The pipeline of kernel k with (tn, flags) spec constants, created on first use. */
int fwd_get_pipe(em_fwd *f, uint32_t k, uint32_t tn, uint32_t flags, em_vk_pipe **out,
                    em_err *err)
{
    for (uint32_t i = 0; i < f->n_pipes; i++) {
        pipe_entry *p = &f->pipes[i];
        if (p->kernel == k && p->tn == tn && p->flags == flags) {
            *out = p->pipe;
            return 0;
        }
    }
    if (f->n_pipes == MAX_PIPES)
        return em_err_set(err, EM_ENOMEM, "forward: too many pipeline variants");
    uint32_t n_spec = 0;
    uint32_t spec[5];
    if (k >= EM_K_MM_F32 && k <= EM_K_MM_Q6_K) {
        spec[0] = f->L; spec[1] = f->RPW; spec[2] = tn; spec[3] = flags;
        spec[4] = f->hp->n_expert_used ? f->hp->n_expert_used : 1;
        n_spec = 5;
    } else if (k >= EM_K_EMBED_F32 && k <= EM_K_EMBED_Q6_K) {
        spec[0] = f->RPW;        /* rows per packed group */
        spec[1] = f->embd.L.C;   /* blocks per chunk */
        n_spec = 2;
    } else if (k == EM_K_ATTN_DEC || k == EM_K_ATTN_DEC_Q8) {
        spec[0] = f->dec_lanes;
        spec[1] = f->hp->head_dim;
        spec[2] = f->hp->head_dim_v;
        n_spec = 3;
    } else if (k == EM_K_ATTN_DEC_G || k == EM_K_ATTN_DEC_G_Q8) {
        spec[0] = f->dec_lanes;
        spec[1] = f->hp->head_dim;
        spec[2] = f->hp->head_dim_v;
        spec[3] = f->hp->n_head / f->hp->n_head_kv;
        n_spec = 4;
    } else if (k == EM_K_ATTN_PRE || k == EM_K_ATTN_PRE_Q8 || k == EM_K_ATTN_ENC) {
        spec[0] = f->hp->head_dim;
        spec[1] = f->hp->head_dim_v;
        n_spec = 2;
    } else if (k == EM_K_ATTN_PRE_S || k == EM_K_ATTN_PRE_S_Q8) {
        spec[0] = f->hp->head_dim;
        spec[1] = f->hp->head_dim_v;
        spec[2] = em_vk_info(f->vk)->subgroup_size;
        spec[3] = f->pre_heads;
        n_spec = 4;
    } else if (k == EM_K_SWIGLU) {
        spec[0] = f->hp->ffn_gelu != 0;
        n_spec = 1;
    } else if (k == EM_K_ROPE_KV || k == EM_K_ROPE_KV_Q8) {
        spec[0] = f->hp->rope_type == EM_ROPE_NEOX;
        spec[1] = f->hp->has_qk_norm;
        n_spec = 2;
    }
    /* mm.comp's workgroup is one subgroup of L lanes (its sums cross the
     * lanes by subgroupShuffleXor), and attn_pre.comp's SHUF variant shuffles
     * across a subgroup of the device's size: on a device whose subgroup size
     * varies (Intel, AMD RDNA) that size is required of the pipeline, not
     * left to the compiler */
    uint32_t req_sg = 0;
    if (k >= EM_K_MM_F32 && k <= EM_K_MM_Q6_K)
        req_sg = f->L;
    else if (k == EM_K_ATTN_PRE_S || k == EM_K_ATTN_PRE_S_Q8)
        req_sg = em_vk_info(f->vk)->subgroup_size;
    pipe_entry *p = &f->pipes[f->n_pipes];
    int rc = em_vk_pipe_create(f->vk, &em_kernels[k], spec, n_spec, req_sg, &p->pipe, err);
    if (rc)
        return rc;
    p->kernel = k;
    p->tn = tn;
    p->flags = flags;
    f->n_pipes++;
    *out = p->pipe;
    return 0;
}

/* After a dispatch: a timestamp labelled with its kernel (profiling only). */
static void mark(em_fwd *f, em_vk_cmd *cmd, int kind)
{
    recorded *r = f->cur;
    if (!f->o.profile || !r || r->n_ts + 1 >= MAX_TS)
        return;
    r->ts_kind[r->n_ts + 1] = (uint8_t)kind;
    em_vk_cmd_timestamp(cmd, ++r->n_ts);
}

/* Record the dispatches of a site for T tokens. */
static int site_record(em_fwd *f, em_vk_cmd *cmd, const site *s, uint32_t T, uint32_t x_stride,
                       uint32_t y_stride, int kind, em_err *err)
{
    for (uint32_t p = 0; p < s->n_parts; p++) {
        const pmat *pm = &s->part[p];
        uint32_t tn = em_fwd_mm_tokens_per_pass(f->RPW, pm->L.type, T);
        em_vk_pipe *pipe;
        int rc = fwd_get_pipe(f, em_fwd_mm_kernel(pm->L.type), tn, s->flags, &pipe, err);
        if (rc)
            return rc;
        for (uint32_t c = 0; c < pm->n_chunks; c++) {
            const mat_chunk *ch = &pm->ch[c];
            uint32_t gx = (ch->rows + f->RPW - 1) / f->RPW;
            uint32_t gy = em_mm_grid_y(pm->L.K_pad, f->L, f->RPW, T, tn, gx);
            if (gy == 0)
                return em_err_set(err, EM_EUNSUPPORTED,
                                  "forward: rows of %u elements exceed this device's loop budget",
                                  pm->L.K_pad);
            /* stacked experts: a workgroup column per expert of the chunk
             * (each of rows_per rows), the route at the start of moe */
            uint32_t gz = s->experts ? ch->rows / s->rows_per : 1;
            if (s->experts)
                gx = s->rows_per / f->RPW;
            em_pc_mm pc = {
                .K = pm->L.K_pad, .k_real = s->k_real, .N = s->experts ? s->rows_per : ch->rows, .T = T,
                .x_stride = x_stride, .y_stride = y_stride,
                .y_off = s->experts ? 0 : s->y_off[p] + ((s->flags & EM_MM_SWIGLU) ? ch->row0 / 2 : ch->row0),
                .row0 = ch->row0, .norm_off = s->norm_off, .bias_off = s->bias_off[p],
                .gather_off = s->experts ? 0 : f->off_gather, .eps = f->hp->rms_eps,
            };
            em_vk_cmd_dispatch(cmd, pipe, ch->dset, &pc, gx, gy, gz);
            mark(f, cmd, kind);
        }
    }
    return 0;
}

/* ---- creation ----------------------------------------------------------- */

static void choose_variant(em_fwd *f)
{
    const em_vk_dev_info *di = em_vk_info(f->vk);
    /* one subgroup per workgroup; its lanes split each row, every lane
     * reuses its slice of the input for RPW rows */
    f->L = em_fwd_mm_lanes(di);
    f->RPW = em_fwd_mm_rows(di, em_model_weight_bytes(f->m));
    /* decode attention: on a CPU device one SIMD width of lanes (8 beat 16
     * by ~8% at context 4096 on the 155M model); on GPUs 16, one per position
     * of a KV block (attn_dec.comp's lanes walk a block's 16 positions: more
     * would idle and only grow its shared memory, 64 lanes x 256 values past
     * AMD's 64 KiB), 8 where the device's shared memory cannot hold 16 lanes'
     * partial outputs (Vulkan guarantees only 16 KiB) */
    f->dec_lanes = di->cpu_kernels || 16u * (f->hp->head_dim_v + 1u) * 4u > di->max_shared ? 8 : 16;
    f->dec_grouped = em_fwd_dec_grouped(di, f->hp, f->dec_lanes);
    if (f->dec_grouped)
        f->k_dec = f->k_dec == EM_K_ATTN_DEC_Q8 ? EM_K_ATTN_DEC_G_Q8 : EM_K_ATTN_DEC_G;
    /* prefill attention: on a CPU device each K/V row is read once per
     * subgroup and shared with subgroupShuffle (attn_pre.comp, SHUF) */
    uint32_t k_pre_s = f->k_pre == EM_K_ATTN_PRE_Q8 ? EM_K_ATTN_PRE_S_Q8 : EM_K_ATTN_PRE_S;
    f->pre_heads = 1;
    if (di->cpu_kernels && em_vk_kernel_supported(f->vk, &em_kernels[k_pre_s])) {
        f->k_pre = k_pre_s;
        f->pre_heads = em_fwd_pre_heads(f->hp);
    }
    char note[64] = "";
    if (di->subgroup_reported && di->subgroup_reported != di->subgroup_size)
        snprintf(note, sizeof note, " (the device reports %u-lane subgroups, runs %u)",
                 di->subgroup_reported, di->subgroup_size);
    snprintf(f->variant, sizeof f->variant, "mm %u lanes x %u rows per workgroup%s%s", f->L, f->RPW,
             di->type == VK_PHYSICAL_DEVICE_TYPE_CPU && !di->cpu_kernels ? ", GPU kernels" : "", note);
}

int em_fwd_model_supported(const em_hparams *hp, em_err *err)
{
    if (hp->n_expert_used > EM_MOE_MAX_USED)
        return em_err_set(err, EM_EUNSUPPORTED, "forward: %s uses %u experts per token; the router kernel takes "
                          "at most %u", hp->arch_name, hp->n_expert_used, EM_MOE_MAX_USED);
    if (hp->logit_softcap > 0)
        return em_err_set(err, EM_EUNSUPPORTED,
                          "forward: this %s model caps its logits (final_logit_softcapping), which the Vulkan "
                          "kernels do not do yet: ember run, chat, logits and perplexity run it with --backend cpu",
                          hp->arch_name);
    return 0;
}

/* An encoder's embedding tables and norm in vecs, and its kernels' sets. */
static int encoder_sets(em_fwd *f, em_err *err)
{
    const em_encoder_weights *ew = em_model_encoder(f->m);
    em_vk_pipe *p;
    em_vk_buf lb[3] = { f->x, f->vecs, f->step }, gb[1] = { f->hf }, ab[3] = { f->qkv, f->step, f->att };
    int rc;
    if ((rc = fwd_vec_tensor(f, ew->pos, &f->enc_pos_off, err)) ||
        (rc = fwd_vec_tensor(f, ew->types, &f->enc_type_off, err)) ||
        (rc = fwd_vec_tensor(f, ew->norm, &f->enc_norm_off, err)) ||
        (rc = fwd_vec_tensor(f, ew->norm_b, &f->enc_norm_b_off, err)) ||
        (rc = fwd_get_pipe(f, EM_K_LAYERNORM, 0, 0, &p, err)) ||
        (rc = em_vk_dset_create(f->vk, p, lb, &f->ln_ds, err)) || (rc = fwd_get_pipe(f, EM_K_GELU, 0, 0, &p, err)) ||
        (rc = em_vk_dset_create(f->vk, p, gb, &f->gelu_ds, err)) ||
        (rc = fwd_get_pipe(f, EM_K_ATTN_ENC, 0, 0, &p, err)))
        return rc;
    return em_vk_dset_create(f->vk, p, ab, &f->attn_enc_ds, err);
}

int em_fwd_create(em_vk *vk, const em_model *m, const em_fwd_opts *o, em_fwd **out, em_err *err)
{
    *out = NULL;
    const em_hparams *hp = em_model_hparams(m);
    if (!o->max_tokens || !o->max_seqs || !o->max_ctx)
        return em_err_set(err, EM_EINVAL, "forward: max tokens, sequences and context must be positive");
    int rc0 = em_fwd_model_supported(hp, err);
    if (rc0)
        return rc0;
    if (hp->head_dim > 256 || hp->head_dim_v > 256 || hp->head_dim % 8 || hp->head_dim_v % 8)
        return em_err_set(err, EM_EUNSUPPORTED,
                          "forward: head sizes %u/%u: the GPU kernels need multiples of 8 up to 256",
                          hp->head_dim, hp->head_dim_v);
    em_fwd *f = calloc(1, sizeof *f);
    if (!f)
        return em_err_set(err, EM_ENOMEM, "forward: out of memory");
    f->vk = vk;
    f->m = m;
    f->hp = hp;
    f->o = *o;
    f->bt_stride = (o->max_ctx + EM_KV_BLOCK - 1) / EM_KV_BLOCK;
    if (!f->o.n_blocks)
        f->o.n_blocks = o->max_seqs * f->bt_stride;
    if (!hp->n_swa)
        f->o.n_blocks_window = 0;
    f->win_pool = f->o.n_blocks_window > 0;
    if (o->kv_type == EM_KV_Q8_0) {
        if (hp->head_dim % 32 || hp->head_dim_v % 32) {
            free(f);
            return em_err_set(err, EM_EUNSUPPORTED,
                              "forward: a q8_0 KV cache needs head sizes that are multiples of 32 (this model: %u)",
                              hp->head_dim);
        }
        uint64_t rows = (uint64_t)f->o.n_blocks * hp->n_head_kv * EM_KV_BLOCK;
        f->kscale_off = (uint32_t)(rows * hp->head_dim / 2);     /* halves after the int8 rows */
        f->vscale_off = (uint32_t)(rows * hp->head_dim_v / 2);
        rows = (uint64_t)f->o.n_blocks_window * hp->n_head_kv * EM_KV_BLOCK;
        f->kscale_off_w = (uint32_t)(rows * hp->head_dim / 2);
        f->vscale_off_w = (uint32_t)(rows * hp->head_dim_v / 2);
        f->k_rope = EM_K_ROPE_KV_Q8;
        f->k_dec = EM_K_ATTN_DEC_Q8;
        f->k_pre = EM_K_ATTN_PRE_Q8;
    } else if (o->kv_type == EM_KV_F16) {
        f->k_rope = EM_K_ROPE_KV;
        f->k_dec = EM_K_ATTN_DEC;
        f->k_pre = EM_K_ATTN_PRE;
    } else {
        free(f);
        return em_err_set(err, EM_EINVAL, "forward: unknown KV type %d", (int)o->kv_type);
    }
    if (!f->o.max_logits)
        f->o.max_logits = o->max_seqs;
    /* the logits buffer is one binding (the output matrix writes it, topk
     * reads it): at most as many rows of n_vocab floats as one holds */
    uint64_t binding = em_vk_info(vk)->max_storage_range;
    f->o.max_logits = em_fwd_plan_logit_rows(hp, f->o.max_logits, binding);
    if (!f->o.max_logits) {
        free(f);
        return em_err_set(err, EM_EUNSUPPORTED, "forward: one row of logits (%u tokens) or its sampling "
                          "state exceeds the device's binding range (%llu bytes)", hp->n_vocab,
                          (unsigned long long)binding);
    }
    choose_variant(f);

    uint32_t T = o->max_tokens, L = f->o.max_logits;
    f->qkv_dim = hp->n_head * hp->head_dim + hp->n_head_kv * (hp->head_dim + hp->head_dim_v);
    f->E_st = fwd_round_up(hp->n_embd, 32);
    f->qkv_st = fwd_round_up(f->qkv_dim, 32);
    f->att_st = fwd_round_up(hp->n_head * hp->head_dim_v, 32);
    f->F_st = fwd_round_up(hp->n_ff, 32);
    /* gu also holds a block's output before its norm (post-norm models) */
    f->gu_st = fwd_round_up(2 * hp->n_ff > hp->n_embd ? 2 * hp->n_ff : hp->n_embd, 32);
    f->off_tok = 0;
    f->off_pos = T;
    f->off_seq = 2 * T;
    f->off_gather = 3 * T;
    f->off_dec = 3 * T + L;      /* (token, splits) pairs */
    f->off_tiles = 5 * T + L;    /* (first token, count) pairs */
    f->off_bt = 7 * T + L;
    f->off_bt_w = f->off_bt + o->max_seqs * f->bt_stride;   /* (sliding-window models) */
    f->off_pool = f->off_bt_w + (hp->n_swa ? o->max_seqs * f->bt_stride : 0);
    f->off_type = f->off_pool + 2 * o->max_seqs;
    f->step_ints = f->off_type + T;

    int rc;
    f->layers = calloc(hp->n_layer, sizeof *f->layers);
    if (!f->layers) {
        rc = em_err_set(err, EM_ENOMEM, "forward: out of memory");
        goto fail;
    }
    /* activations (zero-filled: padding columns must read as zero), sized
     * by the plan `ember vram` and em_fwd_kv_blocks count with */
    em_fwd_mem plan;
    em_fwd_plan_scratch(hp, T, o->max_seqs, o->max_ctx, L, binding, &plan);
    if (plan.x != (uint64_t)T * f->E_st * 4 || plan.qkv != (uint64_t)T * f->qkv_st * 4 ||
        plan.att != (uint64_t)T * f->att_st * 4 || plan.hf != (uint64_t)T * f->F_st * 4 ||
        plan.gu != (uint64_t)T * f->gu_st * 4 || plan.step != (uint64_t)f->step_ints * 4 ||
        plan.pooled != (uint64_t)o->max_seqs * f->E_st * 4) {
        rc = em_err_set(err, EM_ESTATE, "forward: the memory plan disagrees with the strides");
        goto fail;
    }
    struct { em_vk_buf *b; uint64_t bytes; em_vk_mem_kind kind; } bufs[] = {
        { &f->x, plan.x, EM_VK_MEM_DEVICE },
        { &f->qkv, plan.qkv, EM_VK_MEM_DEVICE },
        { &f->att, plan.att, EM_VK_MEM_DEVICE },
        { &f->hf, plan.hf, EM_VK_MEM_DEVICE },
        { &f->gu, plan.gu, EM_VK_MEM_DEVICE },
        { &f->logits, plan.logits, EM_VK_MEM_READBACK },
        { &f->steer, plan.steer, EM_VK_MEM_UPLOAD },
        { &f->cand, plan.cand, EM_VK_MEM_READBACK },
        { &f->step, plan.step, EM_VK_MEM_UPLOAD },
        { &f->pooled, plan.pooled, EM_VK_MEM_READBACK },
        { &f->dummy, plan.dummy, EM_VK_MEM_DEVICE },
        { &f->part, plan.part, EM_VK_MEM_DEVICE },
        { &f->rl, plan.moe_rl, EM_VK_MEM_DEVICE },
        { &f->mh, plan.moe_mh, EM_VK_MEM_DEVICE },
        { &f->ye, plan.moe_ye, EM_VK_MEM_DEVICE },
        { &f->moe, plan.moe_route, EM_VK_MEM_DEVICE },
    };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        if (!bufs[i].bytes)   /* (a dense model's expert buffers) */
            continue;
        if ((rc = em_vk_alloc(vk, bufs[i].kind, bufs[i].bytes, bufs[i].b, err)))
            goto fail;
        f->st.act_bytes += bufs[i].bytes;
    }
    if (hp->n_expert) {   /* strides and the route's layout: em_fwd_plan_scratch's */
        f->rl_st = fwd_round_up(hp->n_expert, 32);
        f->mh_st = fwd_round_up(hp->n_ff_exp, 32);
        f->moe_list_off = 2 * hp->n_expert;
        f->moe_sel_off = f->moe_list_off + T * hp->n_expert_used;
        f->moe_w_off = f->moe_sel_off + T * hp->n_expert_used;
    }
    /* split-K partials for every query of a step at up to max_split splits
     * each, within one binding: a constant of the engine, so that a token's
     * splits follow its context length alone, never the batch it is in */
    f->max_split = em_fwd_plan_max_split(hp, T, binding);
    /* the vecs buffer must exist before descriptor sets are made: size it
     * first (norms, biases, q/k norms, inverse frequencies) */
    if ((rc = em_vk_alloc(vk, EM_VK_MEM_DEVICE, em_fwd_plan_vec_floats(m, f->RPW) * 4, &f->vecs, err)))
        goto fail;

    {
        em_vk_pipe *rp, *tp, *np;
        em_vk_buf rb[4] = { f->step, f->part, f->att, f->vecs }, tb[3] = { f->logits, f->steer, f->cand };
        em_vk_buf nb[3] = { f->gu, f->vecs, f->x };
        if ((rc = fwd_get_pipe(f, EM_K_ATTN_REDUCE, 0, 0, &rp, err)) ||
            (rc = em_vk_dset_create(vk, rp, rb, &f->reduce_ds, err)) ||
            (rc = fwd_get_pipe(f, EM_K_TOPK, 0, 0, &tp, err)) ||
            (rc = em_vk_dset_create(vk, tp, tb, &f->topk_ds, err)))
            goto fail;
        if (hp->has_post_norms && ((rc = fwd_get_pipe(f, EM_K_NORM_ADD, 0, 0, &np, err)) ||
                                   (rc = em_vk_dset_create(vk, np, nb, &f->norm_add_ds, err))))
            goto fail;
        em_vk_pipe *mrp, *mcp;
        em_vk_buf mrb[2] = { f->rl, f->moe }, mcb[4] = { f->ye, f->moe, f->vecs, f->x };
        if (hp->n_expert && ((rc = fwd_get_pipe(f, EM_K_MOE_ROUTE, 0, 0, &mrp, err)) ||
                             (rc = em_vk_dset_create(vk, mrp, mrb, &f->route_ds, err)) ||
                             (rc = fwd_get_pipe(f, EM_K_MOE_COMBINE, 0, 0, &mcp, err)) ||
                             (rc = em_vk_dset_create(vk, mcp, mcb, &f->combine_ds, err))))
            goto fail;
        f->steer_adj_max = L * EM_FWD_STEER_ADJ;
        em_vk_pipe *pp;
        em_vk_buf pb[4] = { f->x, f->vecs, f->step, f->pooled };
        if ((rc = fwd_get_pipe(f, EM_K_POOL, 0, 0, &pp, err)) ||
            (rc = em_vk_dset_create(vk, pp, pb, &f->pool_ds, err)))
            goto fail;
        if (hp->encoder && (rc = encoder_sets(f, err)))
            goto fail;
    }
    em_vk_progress prog;
    em_vk_progress_begin(&prog, "uploading weights", em_model_weight_bytes(m));
    for (uint32_t il = 0; il < hp->n_layer; il++)
        if ((rc = fwd_build_layer(f, il, &prog, err)))
            goto fail_prog;

    /* output: final norm fused, rows gathered from the step's logit list
     * (an encoder has none: its pooled rows are its output) */
    {
        const em_gguf_tensor *te = em_model_tok_embd(m), *to = em_model_output(m);
        row_src es = { { te }, 1, 0, 0, 0 };
        uint64_t before = f->st.weight_bytes;
        if ((rc = fwd_pmat_build(f, &es, &f->embd, &prog, err)))
            goto fail_prog;
        uint64_t embd_bytes = f->st.weight_bytes - before;
        site *s = &f->out;
        em_vk_pipe *ep;
        if (!to)
            goto embed_sets;
        s->flags = EM_MM_NORM_IN | EM_MM_GATHER_IN;
        s->k_real = hp->n_embd;
        s->n_parts = 1;
        if ((rc = fwd_vec_tensor(f, em_model_out_norm(m), &s->norm_off, err)))
            goto fail_prog;
        if (to == te) {
            s->part[0] = f->embd;        /* tied: the same device memory */
            s->part[0].n_chunks = f->embd.n_chunks;
        } else {
            row_src os = { { to }, 1, 0, 0, 0 };
            if ((rc = fwd_pmat_build(f, &os, &s->part[0], &prog, err)))
                goto fail_prog;
        }
        if ((rc = fwd_site_bind(f, s, &f->x, &f->logits, err)))
            goto fail_prog;
        /* a decode step reads one row of an embedding table that is not
         * also the output matrix, and of the experts those one token chose */
        f->st.decode_bytes = f->st.weight_bytes - (to == te ? 0 : embd_bytes);
        if (hp->n_expert)
            f->st.decode_bytes -= f->st.expert_bytes / hp->n_expert * (hp->n_expert - hp->n_expert_used);
    embed_sets:
        /* the lookup binds each chunk of the table (a large vocabulary's
         * table passes one binding: 152k x 896 at Q8_0 is 145 MB) */
        if ((rc = fwd_get_pipe(f, em_fwd_embed_kernel(f->embd.L.type), 0, 0, &ep, err)))
            goto fail_prog;
        for (uint32_t c = 0; c < f->embd.n_chunks; c++) {
            const mat_chunk *ch = &f->embd.ch[c];
            em_vk_buf eb[4] = { ch->qw, ch->sc, f->step, f->x };
            if ((rc = em_vk_dset_create(vk, ep, eb, &f->embed_ds[c], err)))
                goto fail_prog;
        }
    }
    em_vk_progress_end(&prog);

    /* the rotary angles, computed in double as core/run/ref.c's
     * (em_hparams_rope; sliding-window layers have their own); YaRN's
     * factor on q and k becomes its square on the attention scale */
    for (int swa = 0; swa < (hp->encoder ? 0 : hp->n_swa ? 2 : 1); swa++) {
        uint32_t nf = hp->n_rot / 2, *off = swa ? &f->freq_swa_off : &f->freq_off;
        double *theta = malloc((nf + 1) * sizeof *theta);
        if (!theta) {
            rc = em_err_set(err, EM_ENOMEM, "forward: out of memory");
            goto fail;
        }
        const em_gguf_tensor *ff = em_model_rope_freqs(m);
        em_hparams_rope(hp, swa, ff ? (const float *)ff->data : NULL, theta, &f->rope_mscale[swa]);
        if (!(rc = fwd_vec_add(f, NULL, nf, off, err)))
            for (uint32_t i = 0; i < nf; i++)
                f->vecs_host[*off + i] = (float)theta[i];
        free(theta);
        if (rc)
            goto fail;
    }
    if ((uint64_t)f->n_vecs * 4 > f->vecs.size) {
        rc = em_err_set(err, EM_ESTATE, "forward: vecs buffer sized wrong");
        goto fail;
    }
    if ((rc = em_vk_upload(vk, &f->vecs, 0, f->vecs_host, (size_t)f->n_vecs * 4, NULL, err)))
        goto fail;
    {   /* zeros: activation padding columns are read as zeros, and so are KV
         * positions never written */
        em_vk_cmd *c = NULL;
        if ((rc = em_vk_cmd_create(vk, 0, &c, err)) || (rc = em_vk_cmd_begin(c, err))) {
            em_vk_cmd_destroy(c);
            goto fail;
        }
        em_vk_buf *z[] = { &f->x, &f->qkv, &f->att, &f->hf, &f->gu, &f->dummy, &f->part };
        for (size_t i = 0; i < sizeof z / sizeof z[0]; i++)
            em_vk_cmd_fill(c, z[i], 0);
        for (uint32_t il = 0; il < hp->n_layer && !hp->encoder; il++) {
            em_vk_cmd_fill(c, &f->layers[il].kc, 0);
            em_vk_cmd_fill(c, &f->layers[il].vc, 0);
        }
        rc = em_vk_cmd_end(c, err);
        if (!rc)
            rc = em_vk_cmd_submit_wait(c, err);
        em_vk_cmd_destroy(c);
        if (rc)
            goto fail;
    }
    *out = f;
    return 0;
fail_prog:
    em_vk_progress_end(&prog);
fail:
    em_fwd_destroy(f);
    return rc;
}

void em_fwd_destroy(em_fwd *f)
{
    if (!f)
        return;
    for (uint32_t i = 0; i < MAX_RECORDED; i++)
        em_vk_cmd_destroy(f->rec[i].cmd);
    em_vk_cmd_destroy(f->copy_cmd);
    for (uint32_t il = 0; f->layers && il < f->hp->n_layer; il++) {
        layer *ly = &f->layers[il];
        fwd_site_free(f, &ly->qkv);
        fwd_site_free(f, &ly->wo);
        fwd_site_free(f, &ly->gu);
        fwd_site_free(f, &ly->down);
        fwd_site_free(f, &ly->router);
        fwd_site_free(f, &ly->egu);
        fwd_site_free(f, &ly->edown);
        em_vk_free(f->vk, &ly->kc);
        em_vk_free(f->vk, &ly->vc);
    }
    if (em_model_output(f->m) != em_model_tok_embd(f->m))
        fwd_site_free(f, &f->out);
    fwd_pmat_free(f, &f->embd);
    for (uint32_t c = 0; c < MAX_CHUNKS; c++)
        em_vk_dset_destroy(f->vk, f->embed_ds[c]);
    em_vk_buf *b[] = { &f->x, &f->qkv, &f->att, &f->hf, &f->gu, &f->logits, &f->step, &f->vecs,
                       &f->dummy, &f->part, &f->steer, &f->cand, &f->rl, &f->mh, &f->ye, &f->moe, &f->pooled };
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++)
        em_vk_free(f->vk, b[i]);
    free(f->layers);
    free(f->vecs_host);
    free(f);
}

/* ---- a step ------------------------------------------------------------------ */

/* Post-norm models: x += rmsnorm(gu) * the norm at vecs[norm_off], gu
 * holding the block's output (norm_add.comp), then a barrier. */
static int norm_add(em_fwd *f, em_vk_cmd *cmd, em_pc_norm_add *pn, uint32_t norm_off, int kind, em_err *err)
{
    em_vk_pipe *p;
    int rc = fwd_get_pipe(f, EM_K_NORM_ADD, 0, 0, &p, err);
    if (rc)
        return rc;
    pn->norm_off = norm_off;
    em_vk_cmd_dispatch(cmd, p, f->norm_add_ds, pn, 1, pn->T, 1);
    mark(f, cmd, kind);
    em_vk_cmd_barrier(cmd);
    return 0;
}

/* A mixture-of-experts FFN for T tokens: the router's logits (FFN norm
 * fused), the route (moe_route.comp: each token's experts and weights, the
 * pairs per expert), the experts' gate/up and down products over the pairs
 * routed to them (mm.comp EXPERT: an expert no token chose reads nothing),
 * the weighted sum added to the residual (moe_combine.comp); barriers
 * between, and after. */
static int moe_record(em_fwd *f, em_vk_cmd *cmd, const layer *ly, uint32_t T, em_err *err)
{
    const em_hparams *hp = f->hp;
    uint32_t K = hp->n_expert_used;
    em_vk_pipe *p;
    int rc;
    if ((rc = site_record(f, cmd, &ly->router, T, f->E_st, f->rl_st, P_GU, err)))
        return rc;
    em_vk_cmd_barrier(cmd);
    em_pc_moe_route pr = { T, hp->n_expert, K, f->rl_st, f->moe_list_off, f->moe_sel_off, f->moe_w_off };
    if ((rc = fwd_get_pipe(f, EM_K_MOE_ROUTE, 0, 0, &p, err)))
        return rc;
    em_vk_cmd_dispatch(cmd, p, f->route_ds, &pr, 1, 1, 1);
    mark(f, cmd, P_GU);
    em_vk_cmd_barrier(cmd);
    if ((rc = site_record(f, cmd, &ly->egu, T, f->E_st, f->mh_st, P_GU, err)))
        return rc;
    em_vk_cmd_barrier(cmd);
    if ((rc = site_record(f, cmd, &ly->edown, T, f->mh_st, f->E_st, P_DOWN, err)))
        return rc;
    em_vk_cmd_barrier(cmd);
    em_pc_moe_combine pc = { hp->n_embd, T, K, f->E_st, f->E_st, f->moe_sel_off, f->moe_w_off, ly->b_down_off };
    if ((rc = fwd_get_pipe(f, EM_K_MOE_COMBINE, 0, 0, &p, err)))
        return rc;
    em_vk_cmd_dispatch(cmd, p, f->combine_ds, &pc, (hp->n_embd + 63) / 64, T, 1);
    mark(f, cmd, P_DOWN);
    em_vk_cmd_barrier(cmd);
    return 0;
}

/* The pooled rows: the sums of the step's spans of x (a decoder's rows
 * normed by the output norm first), then a barrier. */
static int pool_record(em_fwd *f, em_vk_cmd *cmd, const shape *sh, em_err *err)
{
    em_vk_pipe *p;
    int rc = fwd_get_pipe(f, EM_K_POOL, 0, 0, &p, err);
    if (rc)
        return rc;
    em_pc_pool pc = { f->hp->n_embd, sh->pool, f->E_st, f->E_st, f->off_pool,
                      f->hp->encoder ? EM_NO_OFF : f->out.norm_off, f->hp->rms_eps };
    em_vk_cmd_dispatch(cmd, p, f->pool_ds, &pc, (f->hp->n_embd + 255) / 256, sh->pool, 1);
    mark(f, cmd, P_OUT);
    em_vk_cmd_barrier(cmd);
    return 0;
}

/* An encoder's LayerNorm of x in place (weight and bias at vecs[w],
 * vecs[b]; embed: the position and type rows added first), then a barrier. */
static int layernorm(em_fwd *f, em_vk_cmd *cmd, uint32_t T, uint32_t w, uint32_t b, int embed, int kind, em_err *err)
{
    em_vk_pipe *p;
    int rc = fwd_get_pipe(f, EM_K_LAYERNORM, 0, 0, &p, err);
    if (rc)
        return rc;
    em_pc_layernorm pc = { f->hp->n_embd, T, f->E_st, w, b, embed ? f->enc_pos_off : EM_NO_OFF, f->enc_type_off,
                           f->off_pos, f->off_type, f->hp->rms_eps };
    em_vk_cmd_dispatch(cmd, p, f->ln_ds, &pc, 1, T, 1);
    mark(f, cmd, kind);
    em_vk_cmd_barrier(cmd);
    return 0;
}

/* An encoder's layers (bert, post-norm) after the lookup: embeddings
 * normed; per layer biased QKV, attention over each token's run, the
 * biased output projection added and normed, the biased up projection,
 * GELU, the biased down projection added and normed. */
static int record_encoder(em_fwd *f, em_vk_cmd *cmd, const shape *sh, em_err *err)
{
    const em_hparams *hp = f->hp;
    const uint32_t T = sh->T;
    int rc = layernorm(f, cmd, T, f->enc_norm_off, f->enc_norm_b_off, 1, P_EMBED, err);
    em_pc_attn_enc pa = { hp->n_head, hp->n_head_kv, f->qkv_st, f->att_st, f->off_dec, f->off_tiles, sh->n_tiles, 0,
                          hp->attn_scale };
    em_pc_gelu pg = { hp->n_ff, T, f->F_st };
    em_vk_pipe *pe, *pgl;
    if (rc || (rc = fwd_get_pipe(f, EM_K_ATTN_ENC, 0, 0, &pe, err)) || (rc = fwd_get_pipe(f, EM_K_GELU, 0, 0, &pgl, err)))
        return rc;
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        const layer *ly = &f->layers[il];
        if ((rc = site_record(f, cmd, &ly->qkv, T, f->E_st, f->qkv_st, P_QKV, err)))
            return rc;
        em_vk_cmd_barrier(cmd);
        em_vk_cmd_dispatch(cmd, pe, f->attn_enc_ds, &pa, hp->n_head, sh->n_tiles, 1);
        mark(f, cmd, P_ATTN);
        em_vk_cmd_barrier(cmd);
        if ((rc = site_record(f, cmd, &ly->wo, T, f->att_st, f->E_st, P_WO, err)))
            return rc;
        em_vk_cmd_barrier(cmd);
        if ((rc = layernorm(f, cmd, T, ly->ln_off[0], ly->ln_off[1], 0, P_WO, err)) ||
            (rc = site_record(f, cmd, &ly->gu, T, f->E_st, f->F_st, P_GU, err)))
            return rc;
        em_vk_cmd_barrier(cmd);
        em_vk_cmd_dispatch(cmd, pgl, f->gelu_ds, &pg, (hp->n_ff + 63) / 64, T, 1);
        mark(f, cmd, P_SWIGLU);
        em_vk_cmd_barrier(cmd);
        if ((rc = site_record(f, cmd, &ly->down, T, f->F_st, f->E_st, P_DOWN, err)))
            return rc;
        em_vk_cmd_barrier(cmd);
        if ((rc = layernorm(f, cmd, T, ly->ln_off[2], ly->ln_off[3], 0, P_DOWN, err)))
            return rc;
    }
    return sh->pool ? pool_record(f, cmd, sh, err) : 0;
}

static int record(em_fwd *f, em_vk_cmd *cmd, const shape *sh, em_err *err)
{
    const uint32_t T = sh->T, L = sh->L;
    const em_hparams *hp = f->hp;
    const int post = hp->has_post_norms;
    int rc = em_vk_cmd_begin(cmd, err);
    if (rc)
        return rc;
    if (f->cur) {
        f->cur->n_ts = 0;
        em_vk_cmd_timestamp(cmd, 0);
    }
    em_vk_pipe *p;
    if ((rc = fwd_get_pipe(f, em_fwd_embed_kernel(f->embd.L.type), 0, 0, &p, err)))
        return rc;
    for (uint32_t c = 0; c < f->embd.n_chunks; c++) {   /* each chunk writes the tokens of its rows */
        em_pc_embed pe = { hp->n_embd, T, f->E_st, f->off_tok, f->embd.ch[c].row0, f->embd.ch[c].rows,
                           hp->embd_scale };
        em_vk_cmd_dispatch(cmd, p, f->embed_ds[c], &pe, (hp->n_embd / 4 + 63) / 64, T, 1);
    }
    mark(f, cmd, P_EMBED);
    em_vk_cmd_barrier(cmd);
    if (hp->encoder) {
        if ((rc = record_encoder(f, cmd, sh, err)))
            return rc;
        goto done;
    }

    em_pc_rope pr = {
        hp->n_head, hp->n_head_kv, hp->head_dim, hp->head_dim_v, hp->n_rot, f->qkv_st,
        f->off_pos, f->off_seq, f->off_bt, f->bt_stride, f->freq_off, 0, 0, hp->rms_eps,
        f->kscale_off, f->vscale_off,
    };
    const float scale = hp->attn_scale;
    em_pc_attn_dec pd = {
        hp->n_head, hp->n_head_kv, hp->head_dim, hp->head_dim_v, f->qkv_st, f->att_st,
        f->off_pos, f->off_seq, f->off_bt, f->bt_stride, f->off_dec, sh->nsplit, scale,
        f->kscale_off, f->vscale_off, 0, EM_NO_SINKS,
    };
    em_pc_attn_pre pp = {
        hp->n_head, hp->n_head_kv, hp->head_dim, hp->head_dim_v, f->qkv_st, f->att_st,
        f->off_pos, f->off_seq, f->off_bt, f->bt_stride, f->off_tiles, scale,
        f->kscale_off, f->vscale_off, 0, EM_NO_SINKS,
    };
    em_pc_attn_reduce pred = { hp->n_head, hp->head_dim_v, sh->nsplit, f->att_st, f->off_dec, EM_NO_SINKS };
    em_pc_swiglu ps = { hp->n_ff, T, f->gu_st, f->F_st };
    em_pc_norm_add pn = { hp->n_embd, T, f->gu_st, f->E_st, 0, hp->rms_eps };
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        layer *ly = &f->layers[il];
        uint32_t window = em_hparams_window(hp, il);
        pr.freq_off = window ? f->freq_swa_off : f->freq_off;
        pd.window = pp.window = window;
        /* a windowed layer of the window pool: its tables and its Q8_0 scales */
        int wp = window && f->win_pool;
        pr.bt_off = pd.bt_off = pp.bt_off = wp ? f->off_bt_w : f->off_bt;
        pr.kscale_off = pd.kscale_off = pp.kscale_off = wp ? f->kscale_off_w : f->kscale_off;
        pr.vscale_off = pd.vscale_off = pp.vscale_off = wp ? f->vscale_off_w : f->vscale_off;
        float ms = f->rope_mscale[window ? 1 : 0];
        pd.scale = pp.scale = scale * ms * ms;
        pd.sink_off = pp.sink_off = pred.sink_off = ly->sink_off;
        if ((rc = site_record(f, cmd, &ly->qkv, T, f->E_st, f->qkv_st, P_QKV, err)))
            return rc;
        em_vk_cmd_barrier(cmd);
        pr.qn_off = ly->qn_off;
        pr.kn_off = ly->kn_off;
        if ((rc = fwd_get_pipe(f, f->k_rope, 0, 0, &p, err)))
            return rc;
        em_vk_cmd_dispatch(cmd, p, ly->rope_ds, &pr, 1, T, 1);
        mark(f, cmd, P_ROPE);
        em_vk_cmd_barrier(cmd);
        if (sh->n_dec) {
            if ((rc = fwd_get_pipe(f, f->k_dec, 0, 0, &p, err)))
                return rc;
            em_vk_cmd_dispatch(cmd, p, ly->dec_ds, &pd, f->dec_grouped ? hp->n_head_kv : hp->n_head,
                               sh->nsplit, sh->n_dec);
            mark(f, cmd, P_ATTN);
        }
        if (sh->n_tiles) {
            if ((rc = fwd_get_pipe(f, f->k_pre, 0, 0, &p, err)))
                return rc;
            em_vk_cmd_dispatch(cmd, p, ly->pre_ds, &pp, hp->n_head / f->pre_heads, sh->n_tiles, 1);
            mark(f, cmd, P_ATTN);
        }
        if (sh->n_dec && sh->nsplit > 1) {
            if ((rc = fwd_get_pipe(f, EM_K_ATTN_REDUCE, 0, 0, &p, err)))
                return rc;
            em_vk_cmd_barrier(cmd);
            em_vk_cmd_dispatch(cmd, p, f->reduce_ds, &pred, hp->n_head, sh->n_dec, 1);
            mark(f, cmd, P_ATTN);
        }
        em_vk_cmd_barrier(cmd);
        if ((rc = site_record(f, cmd, &ly->wo, T, f->att_st, post ? f->gu_st : f->E_st, P_WO, err)))
            return rc;
        em_vk_cmd_barrier(cmd);
        if (post && (rc = norm_add(f, cmd, &pn, ly->post_attn_off, P_WO, err)))
            return rc;
        if (hp->n_expert) {
            if ((rc = moe_record(f, cmd, ly, T, err)))
                return rc;
            continue;
        }
        if (ly->gu_fused) {
            if ((rc = site_record(f, cmd, &ly->gu, T, f->E_st, f->F_st, P_GU, err)))
                return rc;
        } else {
            if ((rc = site_record(f, cmd, &ly->gu, T, f->E_st, f->gu_st, P_GU, err)) ||
                (rc = fwd_get_pipe(f, EM_K_SWIGLU, 0, 0, &p, err)))
                return rc;
            em_vk_cmd_barrier(cmd);
            em_vk_cmd_dispatch(cmd, p, ly->swiglu_ds, &ps, (hp->n_ff + 63) / 64, T, 1);
            mark(f, cmd, P_SWIGLU);
        }
        em_vk_cmd_barrier(cmd);
        if ((rc = site_record(f, cmd, &ly->down, T, f->F_st, post ? f->gu_st : f->E_st, P_DOWN, err)))
            return rc;
        em_vk_cmd_barrier(cmd);
        if (post && (rc = norm_add(f, cmd, &pn, ly->post_ffn_off, P_DOWN, err)))
            return rc;
    }
    if (sh->pool && (rc = pool_record(f, cmd, sh, err)))
        return rc;
    if (L > 0 && (rc = site_record(f, cmd, &f->out, L, f->E_st, hp->n_vocab, P_OUT, err)))
        return rc;
    if (L > 0 && sh->top) {
        em_pc_topk pt = { hp->n_vocab, EM_TOPK_STRIDE };
        if ((rc = fwd_get_pipe(f, EM_K_TOPK, 0, 0, &p, err)))
            return rc;
        em_vk_cmd_barrier(cmd);
        em_vk_cmd_dispatch(cmd, p, f->topk_ds, &pt, L, 1, 1);
        mark(f, cmd, P_OUT);
    }
done:
    f->st.dispatches = em_vk_cmd_dispatches(cmd);
    f->st.barriers = em_vk_cmd_barriers(cmd);
    return em_vk_cmd_end(cmd, err);
}

/* An encoder's batch (forward.h): each slot's tokens one run of positions
 * 0, 1, ... that no other run of the step continues, token types within the
 * model's, no logits or decodes. */
static int check_encoder_batch(const em_fwd *f, const em_fwd_batch *b, em_err *err)
{
    const em_hparams *hp = f->hp;
    if (b->n_logits)
        return em_err_set(err, EM_EINVAL, "forward: an encoder gives no logits");
    for (uint32_t i = 0; i < b->n_tokens; i++) {
        if (b->decode && b->decode[i])
            return em_err_set(err, EM_EINVAL, "forward: an encoder has no decode tokens");
        if (b->types && b->types[i] >= hp->n_token_types)
            return em_err_set(err, EM_ERANGE, "token type %u is out of range (the model has %u)", b->types[i],
                              hp->n_token_types);
        if (b->pos[i] < 0 || (uint32_t)b->pos[i] >= hp->n_pos)
            return em_err_set(err, EM_ERANGE, "position %d is out of range (this encoder has %u)", b->pos[i],
                              hp->n_pos);
        int starts = i == 0 || b->seq[i] != b->seq[i - 1];
        if (starts ? b->pos[i] != 0 : b->pos[i] != b->pos[i - 1] + 1)
            return em_err_set(err, EM_EINVAL, "forward: an encoder's sequence must be whole in its step, its "
                              "positions 0, 1, ... (token %u: slot %d, position %d)", i, b->seq[i], b->pos[i]);
    }
    return 0;
}

static int check_batch(const em_fwd *f, const em_fwd_batch *b, em_err *err)
{
    const em_hparams *hp = f->hp;
    if (b->n_tokens == 0 || b->n_tokens > f->o.max_tokens)
        return em_err_set(err, EM_ERANGE, "forward: %u tokens in a step (1..%u)", b->n_tokens,
                          f->o.max_tokens);
    if (b->n_logits > f->o.max_logits)
        return em_err_set(err, EM_ERANGE, "forward: %u logit rows (at most %u)", b->n_logits,
                          f->o.max_logits);
    if (b->n_pool > f->o.max_seqs)
        return em_err_set(err, EM_ERANGE, "forward: %u pooled rows (at most %u)", b->n_pool, f->o.max_seqs);
    for (uint32_t i = 0; i < b->n_pool; i++)
        if (b->pool[2 * i] < 0 || b->pool[2 * i + 1] < 1 ||
            (uint64_t)b->pool[2 * i] + (uint64_t)b->pool[2 * i + 1] > b->n_tokens)
            return em_err_set(err, EM_ERANGE, "forward: pooled span %u (%d, %d) is out of the step's %u tokens", i,
                              b->pool[2 * i], b->pool[2 * i + 1], b->n_tokens);
    if (hp->encoder) {
        int rc = check_encoder_batch(f, b, err);
        if (rc)
            return rc;
    }
    for (uint32_t i = 0; i < b->n_tokens; i++) {
        if (b->tokens[i] < 0 || (uint32_t)b->tokens[i] >= hp->n_vocab)
            return em_err_set(err, EM_ERANGE, "token id %d is out of range (vocabulary has %u tokens)",
                              b->tokens[i], hp->n_vocab);
        if (b->pos[i] < 0 || (uint32_t)b->pos[i] >= f->o.max_ctx)
            return em_err_set(err, EM_ERANGE, "position %d is out of range (context %u)", b->pos[i],
                              f->o.max_ctx);
        if (b->seq[i] < 0 || (uint32_t)b->seq[i] >= f->o.max_seqs)
            return em_err_set(err, EM_ERANGE, "sequence slot %d is out of range", b->seq[i]);
        if (hp->encoder)
            continue;   /* (its K/V are not kept: no tables) */
        if (!b->tables || !b->tables[b->seq[i]])
            return em_err_set(err, EM_ERANGE, "sequence slot %d has no block table", b->seq[i]);
        const int32_t *t = b->tables[b->seq[i]];
        for (int32_t k = 0; k <= b->pos[i] / EM_KV_BLOCK; k++)
            if (t[k] < 0 || (uint32_t)t[k] >= f->o.n_blocks)
                return em_err_set(err, EM_ERANGE, "block %d of slot %d is out of range", t[k], b->seq[i]);
        if (!f->win_pool)
            continue;
        /* the window pool: the blocks of this token's window (the queries
         * of a prefill tile read from its first token's window on: that
         * token is in the step too) */
        const int32_t *tw = b->tables_window ? b->tables_window[b->seq[i]] : NULL;
        if (!tw)
            return em_err_set(err, EM_ERANGE, "slot %d has no window-pool table", b->seq[i]);
        uint32_t p = (uint32_t)b->pos[i];
        for (uint32_t k = em_kv_window_first_block(hp->n_swa, p); k <= p / EM_KV_BLOCK; k++)
            if (tw[k] < 0 || (uint32_t)tw[k] >= f->o.n_blocks_window)
                return em_err_set(err, EM_ERANGE, "window-pool block %d of slot %d (position %u's window) is out "
                                  "of range", tw[k], b->seq[i], p);
    }
    for (uint32_t i = 0; i < b->n_logits; i++)
        if (b->logit_rows[i] < 0 || (uint32_t)b->logit_rows[i] >= b->n_tokens)
            return em_err_set(err, EM_ERANGE, "logit row %d is out of range", b->logit_rows[i]);
    return 0;
}

static int put_steer(em_fwd *f, const em_sample_steer *steer, uint32_t L, em_err *err)
{
    uint64_t n = 0;
    for (uint32_t i = 0; i < L; i++)
        n += steer[i].n_adj;
    if (n > f->steer_adj_max)
        return em_err_set(err, EM_ERANGE, "forward: %llu logit adjustments in a step (at most %u)",
                          (unsigned long long)n, f->steer_adj_max);
    em_topk_pack(f->steer.map, steer, L, f->hp->n_vocab);
    return 0;
}

static int step(em_fwd *f, const em_fwd_batch *b, const em_sample_steer *steer, em_sample_top *top, float *logits,
                em_err *err);

int em_fwd_step(em_fwd *f, const em_fwd_batch *b, float *logits, em_err *err)
{
    return step(f, b, NULL, NULL, logits, err);
}

int em_fwd_step_top(em_fwd *f, const em_fwd_batch *b, const em_sample_steer *steer, em_sample_top *top,
                    em_err *err)
{
    return step(f, b, steer, top, NULL, err);
}

const float *em_fwd_pooled_row(const em_fwd *f, uint32_t i)
{
    return (const float *)f->pooled.map + (size_t)i * f->E_st;
}

const float *em_fwd_logits_row(const em_fwd *f, uint32_t i)
{
    return (const float *)f->logits.map + (size_t)i * f->hp->n_vocab;
}

/* The run of tokens [i, j) of one sequence cut into attention tiles of up
 * to `tile` tokens: (first, count) pairs onto the step buffer's list. */
static void add_tiles(em_fwd *f, shape *sh, uint32_t i, uint32_t j, uint32_t tile)
{
    int32_t *sp = f->step.map;
    for (uint32_t k = i; k < j; k += tile) {
        sp[f->off_tiles + 2 * sh->n_tiles] = (int32_t)k;
        sp[f->off_tiles + 2 * sh->n_tiles + 1] = (int32_t)(j - k < tile ? j - k : tile);
        sh->n_tiles++;
    }
}

static int step(em_fwd *f, const em_fwd_batch *b, const em_sample_steer *steer, em_sample_top *top, float *logits,
                em_err *err)
{
    int rc = check_batch(f, b, err);
    if (rc)
        return rc;
    if (steer && b->n_logits && (rc = put_steer(f, steer, b->n_logits, err)))
        return rc;
    uint32_t T = b->n_tokens, L = b->n_logits;
    int32_t *sp = f->step.map;
    memcpy(sp + f->off_tok, b->tokens, T * sizeof *sp);
    memcpy(sp + f->off_pos, b->pos, T * sizeof *sp);
    memcpy(sp + f->off_seq, b->seq, T * sizeof *sp);
    if (L)
        memcpy(sp + f->off_gather, b->logit_rows, L * sizeof *sp);
    if (b->n_pool)
        memcpy(sp + f->off_pool, b->pool, 2 * b->n_pool * sizeof *sp);
    shape sh = { T, L, 0, 0, 1, steer != NULL, b->n_pool };
    if (f->hp->encoder) {
        /* each token's run [first, end): its sequence (check_encoder_batch);
         * its type; the runs cut into tiles of attn_enc.comp */
        for (uint32_t i = 0; i < T;) {
            uint32_t j = i + 1;
            while (j < T && b->seq[j] == b->seq[i])
                j++;
            for (uint32_t k = i; k < j; k++) {
                sp[f->off_dec + 2 * k] = (int32_t)i;
                sp[f->off_dec + 2 * k + 1] = (int32_t)j;
                sp[f->off_type + k] = b->types ? b->types[k] : 0;
            }
            add_tiles(f, &sh, i, j, EM_ENC_TILE);
            i = j;
        }
        goto run;
    }
    /* block tables of the slots in this step, as far as their positions reach */
    for (uint32_t i = 0; i < T; i++) {
        int32_t s = b->seq[i];
        uint32_t nblk = (uint32_t)b->pos[i] / EM_KV_BLOCK + 1;
        memcpy(sp + f->off_bt + (uint32_t)s * f->bt_stride, b->tables[s], nblk * sizeof *sp);
        if (f->win_pool)
            memcpy(sp + f->off_bt_w + (uint32_t)s * f->bt_stride, b->tables_window[s], nblk * sizeof *sp);
    }

    /* attention work lists: decode queries one by one, each split by its
     * own context length; runs of consecutive prompt positions of one
     * sequence cut into tiles */
    uint32_t span = em_vk_info(f->vk)->cpu_kernels ? 1024 : 256;
    for (uint32_t i = 0; i < T;) {
        uint32_t j = i + 1;
        int dec_i = b->decode ? b->decode[i] : 0;
        if (!dec_i)
            while (j < T && b->seq[j] == b->seq[i] && b->pos[j] == b->pos[j - 1] + 1 &&
                   !(b->decode && b->decode[j]))
                j++;
        if (dec_i || (!b->decode && j - i == 1)) {
            uint32_t ns = ((uint32_t)b->pos[i] + span) / span;   /* ceil((pos + 1) / span) */
            if (ns > f->max_split)
                ns = f->max_split;
            sp[f->off_dec + 2 * sh.n_dec] = (int32_t)i;
            sp[f->off_dec + 2 * sh.n_dec + 1] = (int32_t)ns;
            sh.n_dec++;
            if (ns > sh.nsplit)
                sh.nsplit = ns;
            j = i + 1;
        } else {
            add_tiles(f, &sh, i, j, EM_ATTN_TILE);
        }
        i = j;
    }
run:;
    /* the recorded command buffer for this shape, or record one */
    recorded *r = NULL, *lru = &f->rec[0];
    for (uint32_t i = 0; i < MAX_RECORDED; i++) {
        if (f->rec[i].valid && memcmp(&f->rec[i].sh, &sh, sizeof sh) == 0) {
            r = &f->rec[i];
            break;
        }
        if (f->rec[i].last_used < lru->last_used)
            lru = &f->rec[i];
    }
    f->st.last_record_us = 0;
    if (!r) {
        r = lru;
        if (!r->cmd && (rc = em_vk_cmd_create(f->vk, f->o.profile ? MAX_TS : 0, &r->cmd, err)))
            return rc;
        double t0 = now_us();
        r->valid = 0;
        f->cur = f->o.profile && em_vk_cmd_has_timestamps(r->cmd) ? r : NULL;
        rc = record(f, r->cmd, &sh, err);
        f->cur = NULL;
        if (rc)
            return rc;
        r->sh = sh;
        r->valid = 1;
        f->st.last_record_us = now_us() - t0;
    }
    r->last_used = ++f->clock;
    double t0 = now_us();
    if ((rc = em_vk_cmd_submit_wait(r->cmd, err)))
        return rc;
    f->st.last_submit_us = now_us() - t0;
    if (f->o.profile && r->n_ts > 0) {
        double ns[MAX_TS];
        if (em_vk_cmd_timestamps(r->cmd, 0, r->n_ts + 1, ns, NULL) == 0) {
            for (uint32_t i = 1; i <= r->n_ts; i++) {
                f->prof_us[r->ts_kind[i]] += (ns[i] - ns[i - 1]) / 1e3;
                f->prof_n[r->ts_kind[i]]++;
            }
        }
    }
    if (L && logits)
        memcpy(logits, f->logits.map, (size_t)L * f->hp->n_vocab * sizeof *logits);
    if (top && L)
        em_topk_unpack(f->cand.map, L, top);
    return 0;
}

int em_fwd_kv_type_parse(const char *s, uint32_t *out, em_err *err)
{
    if (strcmp(s, "f16") == 0)
        *out = EM_KV_F16;
    else if (strcmp(s, "q8_0") == 0)
        *out = EM_KV_Q8_0;
    else
        return em_err_set(err, EM_EINVAL, "--kv-type: '%s' is not a KV type (f16, q8_0)", s);
    return 0;
}

const char *em_fwd_kv_type_name(uint32_t kv_type)
{
    return kv_type == EM_KV_Q8_0 ? "q8_0" : "f16";
}

uint64_t em_fwd_kv_block_bytes(const em_model *m, uint32_t kv_type)
{
    return em_fwd_kv_block_bytes_hp(em_model_hparams(m), kv_type);
}

uint32_t em_fwd_kv_blocks(em_vk *vk, const em_model *m, uint32_t kv_type, uint64_t kv_mb,
                          uint32_t max_seqs, uint32_t max_ctx, uint32_t max_tokens, uint32_t *n_window)
{
    const em_hparams *hp = em_model_hparams(m);
    uint64_t per, per_w;
    em_fwd_kv_split_bytes(hp, kv_type, &per, &per_w);
    uint64_t cap = (uint64_t)max_seqs * ((max_ctx + EM_KV_BLOCK - 1) / EM_KV_BLOCK);
    if (n_window)
        *n_window = 0;
    if (hp->encoder)   /* bookkeeping for the scheduler: no device memory behind them */
        return (uint32_t)cap;
    uint64_t bytes;
    if (kv_mb) {
        bytes = kv_mb << 20;
    } else {
        const em_vk_dev_info *di = em_vk_info(vk);
        em_fwd_mem plan;
        em_fwd_plan_scratch(hp, max_tokens, max_seqs, max_ctx, max_seqs, di->max_storage_range, &plan);
        if (em_fwd_plan_weights(m, em_fwd_mm_rows(di, em_model_weight_bytes(m)), em_fwd_mm_lanes(di),
                                &plan, NULL)) {
            plan.weights = em_model_weight_bytes(m);   /* em_fwd_create will refuse it */
            plan.vecs = 0;
        }
        bytes = em_fwd_plan_kv_budget(di->device_local_bytes, &plan);
    }
    /* the window pool first: every slot's windows */
    uint64_t nw = (uint64_t)max_seqs * em_fwd_window_blocks(hp, max_tokens, max_ctx);
    if (n_window)
        *n_window = (uint32_t)nw;
    bytes = bytes > nw * per_w ? bytes - nw * per_w : 0;
    uint64_t n = bytes / per;
    /* one layer's K (or V) must fit one storage-buffer binding */
    uint64_t per_layer = kv_row_bytes(kv_type, (uint64_t)hp->n_head_kv *
                                                   (hp->head_dim > hp->head_dim_v ? hp->head_dim : hp->head_dim_v)) *
                         EM_KV_BLOCK;
    uint64_t range_cap = em_vk_info(vk)->max_storage_range / per_layer;
    if (n > range_cap)
        n = range_cap;
    if (n > cap)
        n = cap;
    if (n_window && *n_window > range_cap)
        *n_window = (uint32_t)range_cap;   /* (em_fwd_create then refuses what does not fit) */
    return (uint32_t)n;
}

int em_fwd_copy_blocks(em_fwd *f, uint32_t pool, const int32_t *src, const int32_t *dst, uint32_t n,
                       em_err *err)
{
    const em_hparams *hp = f->hp;
    if (pool > 1 || (pool == 1 && !f->win_pool) || hp->encoder)
        return em_err_set(err, EM_EINVAL, "forward: no KV pool %u", pool);
    uint32_t n_blocks = pool ? f->o.n_blocks_window : f->o.n_blocks;
    /* f16: the block's rows; q8_0: the block's int8 rows and, apart, its scales */
    uint64_t kq = (uint64_t)hp->n_head_kv * hp->head_dim * EM_KV_BLOCK, vq = (uint64_t)hp->n_head_kv * hp->head_dim_v * EM_KV_BLOCK;
    int q8 = f->o.kv_type == EM_KV_Q8_0;
    uint64_t kb = q8 ? kq : kq * 2, vb = q8 ? vq : vq * 2;
    uint64_t ks = kq / 32 * 2, vs = vq / 32 * 2;
    for (uint32_t i = 0; i < n; i++)
        if (src[i] < 0 || dst[i] < 0 || (uint32_t)src[i] >= n_blocks || (uint32_t)dst[i] >= n_blocks)
            return em_err_set(err, EM_ERANGE, "forward: block copy %d -> %d out of range", src[i], dst[i]);
    if (!f->copy_cmd) {
        int rc = em_vk_cmd_create(f->vk, 0, &f->copy_cmd, err);
        if (rc)
            return rc;
    }
    int rc = em_vk_cmd_begin(f->copy_cmd, err);
    if (rc)
        return rc;
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        const layer *ly = &f->layers[il];
        if ((uint32_t)(f->win_pool && em_hparams_window(hp, il)) != pool)
            continue;   /* the other pool's layer */
        for (uint32_t i = 0; i < n; i++) {
            em_vk_cmd_copy(f->copy_cmd, &ly->kc, (uint64_t)src[i] * kb, &ly->kc, (uint64_t)dst[i] * kb, kb);
            em_vk_cmd_copy(f->copy_cmd, &ly->vc, (uint64_t)src[i] * vb, &ly->vc, (uint64_t)dst[i] * vb, vb);
            if (q8) {
                uint64_t k0 = (uint64_t)(pool ? f->kscale_off_w : f->kscale_off) * 2;
                uint64_t v0 = (uint64_t)(pool ? f->vscale_off_w : f->vscale_off) * 2;
                em_vk_cmd_copy(f->copy_cmd, &ly->kc, k0 + (uint64_t)src[i] * ks, &ly->kc, k0 + (uint64_t)dst[i] * ks, ks);
                em_vk_cmd_copy(f->copy_cmd, &ly->vc, v0 + (uint64_t)src[i] * vs, &ly->vc, v0 + (uint64_t)dst[i] * vs, vs);
            }
        }
    }
    if ((rc = em_vk_cmd_end(f->copy_cmd, err)))
        return rc;
    return em_vk_cmd_submit_wait(f->copy_cmd, err);
}

void em_fwd_get_stats(const em_fwd *f, em_fwd_stats *st)
{
    *st = f->st;
    st->mm_lanes = f->L;
    st->mm_rows = f->RPW;
}

uint32_t em_fwd_profile(em_fwd *f, em_fwd_prof *out, uint32_t max, int reset)
{
    uint32_t n = 0;
    for (int k = 0; k < P_COUNT; k++) {
        if (!f->prof_n[k])
            continue;
        if (n < max) {
            out[n].kernel = prof_names[k];
            out[n].us = f->prof_us[k];
            out[n].count = f->prof_n[k];
        }
        n++;
    }
    if (reset) {
        memset(f->prof_us, 0, sizeof f->prof_us);
        memset(f->prof_n, 0, sizeof f->prof_n);
    }
    return n;
}

const char *em_fwd_variant(const em_fwd *f)
{
    return f->variant;
}

uint32_t em_fwd_pipes(const em_fwd *f, em_fwd_pipe_info *out, uint32_t max)
{
    for (uint32_t i = 0; i < f->n_pipes && i < max; i++)
        out[i] = (em_fwd_pipe_info){ f->pipes[i].kernel, f->pipes[i].tn, f->pipes[i].flags, f->pipes[i].pipe };
    return f->n_pipes;
}

const em_hparams *em_fwd_hparams(const em_fwd *f)
{
    return f->hp;
}

em_vk *em_fwd_device(const em_fwd *f)
{
    return f->vk;
}

void em_fwd_mm_geometry(const em_fwd *f, uint32_t *lanes, uint32_t *rpw)
{
    *lanes = f->L;
    *rpw = f->RPW;
}

const em_fwd_opts *em_fwd_get_opts(const em_fwd *f)
{
    return &f->o;
}

uint32_t em_fwd_window(const em_fwd *f)
{
    return f->win_pool ? f->hp->n_swa : 0;
}
