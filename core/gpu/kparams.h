/* kparams.h — C mirrors of the kernels' push-constant blocks and the flag
 * bits of their specialization constants. Offsets are pinned against the
 * GLSL std430/push-constant layout with _Static_assert, so a change on one
 * side that is not made on the other fails to compile. */
#ifndef EM_KPARAMS_H
#define EM_KPARAMS_H

#include <stddef.h>
#include <stdint.h>

#include "core/run/kv.h"   /* EM_KV_BLOCK, em_kv_type */

/* shaders/mm.comp: spec constants 0 L (lanes), 1 RPW (rows per workgroup), 2 TN, 3 FLAGS,
 * 4 MK (experts per token, EXPERT) */
enum {
    EM_MM_NORM_IN = 1, EM_MM_BIAS = 2, EM_MM_ADD_OUT = 4, EM_MM_SWIGLU = 8, EM_MM_GATHER_IN = 16,
    EM_MM_GELU = 32,       /* with SWIGLU: GELU (tanh form) gates instead of SiLU */
    EM_MM_EXPERT = 64,     /* stacked expert matrices, each run on the pairs routed to it */
    EM_MM_EXPERT_TOK = 128,/* with EXPERT: the input rows are the pairs' tokens */
    EM_MM_OAI = 256,       /* with SWIGLU: gpt-oss's clamped SwiGLU */
};

typedef struct {
    uint32_t K, k_real, N, T;
    uint32_t x_stride, y_stride, y_off, row0;
    uint32_t norm_off, bias_off, gather_off;
    float    eps;
} em_pc_mm;
_Static_assert(offsetof(em_pc_mm, K) == 0, "mm push layout");
_Static_assert(offsetof(em_pc_mm, k_real) == 4, "mm push layout");
_Static_assert(offsetof(em_pc_mm, N) == 8, "mm push layout");
_Static_assert(offsetof(em_pc_mm, T) == 12, "mm push layout");
_Static_assert(offsetof(em_pc_mm, x_stride) == 16, "mm push layout");
_Static_assert(offsetof(em_pc_mm, y_stride) == 20, "mm push layout");
_Static_assert(offsetof(em_pc_mm, y_off) == 24, "mm push layout");
_Static_assert(offsetof(em_pc_mm, row0) == 28, "mm push layout");
_Static_assert(offsetof(em_pc_mm, norm_off) == 32, "mm push layout");
_Static_assert(offsetof(em_pc_mm, bias_off) == 36, "mm push layout");
_Static_assert(offsetof(em_pc_mm, gather_off) == 40, "mm push layout");
_Static_assert(offsetof(em_pc_mm, eps) == 44, "mm push layout");
_Static_assert(sizeof(em_pc_mm) == 48, "mm push layout");

/* Dynamic loop iterations one invocation may run. llvmpipe ends every loop
 * of a shader invocation after 65535 iterations in total (a guard against
 * endless loops, shared by all loops), silently: work is split so that no
 * invocation comes near it. Loops with constant trip counts up to 32 are
 * unrolled and do not count. */
#define EM_LOOP_BUDGET 60000u

/* Workgroups along the token axis for mm.comp: enough for parallelism when
 * there are few row groups (gx), and enough that no invocation's loops
 * exceed the budget. Per token tile of tn tokens an invocation runs the unit
 * loop (K / 32 / L iterations at most); with more than 32 rows per workgroup
 * the loops over the rows are not unrolled and count too: rpw iterations
 * per unit plus the sums and writes per tile. Measured on llvmpipe with 64
 * and 128 rows, 1 and 8 tokens per pass (the largest tile count that still
 * gives correct sums): about rpw + 2 per unit and 2 * rpw * (tn + 1) per
 * tile; the estimate below stays above both. Returns 0 when even one token
 * tile would exceed the budget. */
static inline uint32_t em_mm_grid_y(uint32_t K_pad, uint32_t L, uint32_t rpw, uint32_t T, uint32_t tn,
                                    uint32_t gx)
{
    uint32_t tiles = (T + tn - 1) / tn;
    uint32_t units = (K_pad / 32 + L - 1) / L;
    uint32_t rows = rpw > 32 ? rpw : 0;
    uint32_t cost = units * (1 + (rows ? rows + 2 * tn + 4 : 0)) + 2 * rows * (tn + 3) + 4;
    uint32_t max_tiles = EM_LOOP_BUDGET / cost;
    if (max_tiles == 0)
        return 0;
    uint32_t gy = gx >= 64 ? 1 : 64 / gx;
    if (gy > tiles)
        gy = tiles;
    if (gy < (tiles + max_tiles - 1) / max_tiles)
        gy = (tiles + max_tiles - 1) / max_tiles;
    return gy ? gy : 1;
}

/* shaders/embed.comp: spec constant 0 R */
typedef struct {
    uint32_t E, T, x_stride, tok_off;
    uint32_t row0, rows;   /* the table's rows this dispatch's chunk holds */
    float    scale;        /* the rows times this (hp->embd_scale) */
} em_pc_embed;
_Static_assert(offsetof(em_pc_embed, scale) == 24 && sizeof(em_pc_embed) == 28, "embed push layout");

/* shaders/rope_kv.comp: spec constants 0 NEOX, 1 QK_NORM */
typedef struct {
    uint32_t H, Hk, D, Dv, n_rot;
    uint32_t qkv_stride, pos_off, seq_off, bt_off, bt_stride;
    uint32_t freq_off, qn_off, kn_off;
    float    eps;
    uint32_t kscale_off, vscale_off;   /* Q8_0 KV: half index of the scales */
} em_pc_rope;
_Static_assert(offsetof(em_pc_rope, n_rot) == 16, "rope push layout");
_Static_assert(offsetof(em_pc_rope, qkv_stride) == 20, "rope push layout");
_Static_assert(offsetof(em_pc_rope, bt_stride) == 36, "rope push layout");
_Static_assert(offsetof(em_pc_rope, freq_off) == 40, "rope push layout");
_Static_assert(offsetof(em_pc_rope, eps) == 52, "rope push layout");
_Static_assert(offsetof(em_pc_rope, vscale_off) == 60 && sizeof(em_pc_rope) == 64, "rope push layout");

/* shaders/attn_dec.comp: spec constant 0 lanes */
typedef struct {
    uint32_t H, Hk, D, Dv;
    uint32_t qkv_stride, out_stride;
    uint32_t pos_off, seq_off, bt_off, bt_stride;
    uint32_t list_off, nsplit;
    float    scale;
    uint32_t kscale_off, vscale_off;   /* Q8_0 KV: half index of the scales */
    uint32_t window;                   /* a sliding-window layer's positions (0: all) */
    uint32_t sink_off;                 /* vecs offset of the heads' sink logits; EM_NO_SINKS: none */
} em_pc_attn_dec;
_Static_assert(offsetof(em_pc_attn_dec, qkv_stride) == 16, "attn_dec push layout");
_Static_assert(offsetof(em_pc_attn_dec, list_off) == 40, "attn_dec push layout");
_Static_assert(offsetof(em_pc_attn_dec, scale) == 48, "attn_dec push layout");
_Static_assert(offsetof(em_pc_attn_dec, sink_off) == 64 && sizeof(em_pc_attn_dec) == 68,
               "attn_dec push layout");
#define EM_NO_SINKS 0xFFFFFFFFu

/* shaders/attn_pre.comp */
typedef struct {
    uint32_t H, Hk, D, Dv;
    uint32_t qkv_stride, out_stride;
    uint32_t pos_off, seq_off, bt_off, bt_stride;
    uint32_t list_off;
    float    scale;
    uint32_t kscale_off, vscale_off;   /* Q8_0 KV: half index of the scales */
    uint32_t window;                   /* a sliding-window layer's positions (0: all) */
    uint32_t sink_off;                 /* vecs offset of the heads' sink logits; EM_NO_SINKS: none */
} em_pc_attn_pre;
_Static_assert(offsetof(em_pc_attn_pre, list_off) == 40, "attn_pre push layout");
_Static_assert(offsetof(em_pc_attn_pre, scale) == 44, "attn_pre push layout");
_Static_assert(offsetof(em_pc_attn_pre, sink_off) == 60 && sizeof(em_pc_attn_pre) == 64,
               "attn_pre push layout");

/* shaders/attn_reduce.comp */
typedef struct {
    uint32_t H, Dv, nsplit, out_stride, list_off;
    uint32_t sink_off;                 /* vecs offset of the heads' sink logits; EM_NO_SINKS: none */
} em_pc_attn_reduce;
_Static_assert(offsetof(em_pc_attn_reduce, sink_off) == 20 && sizeof(em_pc_attn_reduce) == 24,
               "attn_reduce push layout");

/* decode attention: most KV splits per token, and prefill tile width */
#define EM_ATTN_MAX_SPLIT 16
#define EM_ATTN_TILE      16

/* shaders/topk.comp: one workgroup per logit row; K = EM_SAMPLE_TOPK (core/run/sample.h) */
typedef struct {
    uint32_t V, out_stride;
} em_pc_topk;
#define EM_TOPK_HEAD 8u   /* words before a row's K ids and K values in the output */
#define EM_TOPK_STRIDE (EM_TOPK_HEAD + 2u * 64u)   /* words per row of the output */

/* shaders/swiglu.comp: spec constant 0 GELU */
typedef struct {
    uint32_t F, T, gu_stride, h_stride;
} em_pc_swiglu;
_Static_assert(offsetof(em_pc_swiglu, h_stride) == 12 && sizeof(em_pc_swiglu) == 16, "swiglu push layout");

/* shaders/moe_route.comp (one workgroup) */
typedef struct {
    uint32_t T, NE, K, rl_stride, list_off, sel_off, w_off;
} em_pc_moe_route;
_Static_assert(offsetof(em_pc_moe_route, w_off) == 24 && sizeof(em_pc_moe_route) == 28, "moe_route push layout");
#define EM_MOE_MAX_USED 16u   /* experts per token moe_route.comp takes */

/* shaders/moe_combine.comp */
typedef struct {
    uint32_t E, T, K, ye_stride, x_stride, sel_off, w_off, bias_off;
} em_pc_moe_combine;
_Static_assert(offsetof(em_pc_moe_combine, bias_off) == 28 && sizeof(em_pc_moe_combine) == 32,
               "moe_combine push layout");

/* shaders/norm_add.comp: x[t] += rmsnorm(y[t]) * w */
typedef struct {
    uint32_t E, T, y_stride, x_stride, norm_off;
    float    eps;
} em_pc_norm_add;
_Static_assert(offsetof(em_pc_norm_add, eps) == 20 && sizeof(em_pc_norm_add) == 24, "norm_add push layout");

/* shaders/layernorm.comp: an encoder's LayerNorm in place (pos_off
 * EM_NO_OFF: no embeddings added first) */
#define EM_NO_OFF 0xFFFFFFFFu
typedef struct {
    uint32_t E, T, x_stride, w_off, b_off, pos_off, type_off, step_pos, step_type;
    float    eps;
} em_pc_layernorm;
_Static_assert(offsetof(em_pc_layernorm, eps) == 36 && sizeof(em_pc_layernorm) == 40, "layernorm push layout");

/* shaders/gelu.comp: erf-GELU in place */
typedef struct {
    uint32_t F, T, stride;
} em_pc_gelu;
_Static_assert(sizeof(em_pc_gelu) == 12, "gelu push layout");

/* shaders/attn_enc.comp: an encoder's attention over each token's run, in
 * tiles of up to EM_ENC_TILE tokens of one run; spec constants head_dim,
 * head_dim_v */
#define EM_ENC_TILE 64u
typedef struct {
    uint32_t H, Hk, qkv_stride, att_stride, span_off, tile_off, n_tiles, pad;
    float    scale;
} em_pc_attn_enc;
_Static_assert(offsetof(em_pc_attn_enc, scale) == 32 && sizeof(em_pc_attn_enc) == 36, "attn_enc push layout");

/* shaders/pool.comp: sums of spans' final hidden states (norm_off
 * EM_NO_OFF: none) */
typedef struct {
    uint32_t E, n, x_stride, o_stride, span_off, norm_off;
    float    eps;
} em_pc_pool;
_Static_assert(offsetof(em_pc_pool, eps) == 24 && sizeof(em_pc_pool) == 28, "pool push layout");

/* EM_KV_BLOCK (the shaders' BLK) and em_kv_type: core/run/kv.h */

#endif
