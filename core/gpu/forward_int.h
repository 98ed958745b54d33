/* forward_int.h — what the files of the forward pass share (forward.c: the
 * pipelines, recording and running steps; fwd_weights.c: packing and
 * uploading the weights, building each layer's bindings): the em_fwd
 * struct and its parts. Private to core/gpu. Shapes: E = n_embd, H/Hk =
 * query/KV heads, D/Dv = head dims, F = n_ff, V = n_vocab, T = tokens. */
#ifndef EM_FORWARD_INT_H
#define EM_FORWARD_INT_H

#include "core/gpu/forward.h"
#include "core/gpu/kparams.h"
#include "core/gpu/wpack.h"
#include "core/model/gguf.h"

#define MAX_CHUNKS   16
#define MAX_PARTS    3
#define MAX_PIPES    48
#define MAX_RECORDED 4
#define MAX_TS       1024   /* timestamp slots per recorded step (profiling) */

enum { P_EMBED, P_QKV, P_ROPE, P_ATTN, P_WO, P_GU, P_SWIGLU, P_DOWN, P_OUT, P_COUNT };

typedef struct {
    em_vk_buf qw, sc;          /* sc: a dummy when the type has none */
    uint32_t  row0, rows;
    em_vk_dset *dset;          /* bound to this site's input/output */
} mat_chunk;

/* One packed matrix (possibly several tensors concatenated or pair-interleaved). */
typedef struct {
    em_wpack_layout L;
    uint32_t        n_chunks;
    mat_chunk       ch[MAX_CHUNKS];
} pmat;

/* A matrix product site: up to MAX_PARTS matrices writing into one output. */
typedef struct {
    uint32_t n_parts;
    pmat     part[MAX_PARTS];
    uint32_t y_off[MAX_PARTS];    /* output column of each part */
    uint32_t bias_off[MAX_PARTS]; /* vecs offset of each part's bias (BIAS) */
    uint32_t flags;
    uint32_t norm_off;            /* vecs offset of the norm weight (NORM_IN) */
    uint32_t k_real;
    uint32_t experts, rows_per;   /* EXPERT: stacked matrices of rows_per (padded) rows */
} site;

typedef struct {
    site      qkv, wo, gu, down;
    int       gu_fused;           /* gate/up interleaved with the SwiGLU epilogue */
    em_vk_buf kc, vc;             /* KV cache of this layer */
    em_vk_dset *rope_ds, *dec_ds, *pre_ds, *swiglu_ds;
    uint32_t  qn_off, kn_off;
    uint32_t  post_attn_off, post_ffn_off;   /* post-norm models: vecs offsets of the norms */
    site      router, egu, edown;  /* mixture of experts: the router, the experts' gate/up and down */
    uint32_t  b_down_off;          /* vecs offset of the experts' down biases, UINT32_MAX: none */
    uint32_t  sink_off;            /* vecs offset of the heads' attention sinks, EM_NO_SINKS: none */
    uint32_t  ln_off[4];           /* an encoder: vecs offsets of the LayerNorms after the attention
                                    * and the FFN, weight and bias each (gu is then its up site) */
} layer;

typedef struct {
    uint32_t    kernel, tn, flags;
    em_vk_pipe *pipe;
} pipe_entry;

/* What a recorded command buffer depends on besides the model. */
typedef struct {
    uint32_t T, L;            /* tokens, logit rows */
    uint32_t n_dec, n_tiles;  /* decode tokens, prefill tiles */
    uint32_t nsplit;          /* KV splits of decode attention */
    uint32_t top;             /* the rows summarised on the device (topk.comp) */
    uint32_t pool;            /* pooled spans (pool.comp) */
} shape;

typedef struct {
    shape      sh;
    int        valid;
    em_vk_cmd *cmd;
    uint64_t   last_used;
    uint32_t   n_ts;              /* timestamps written (profiling) */
    uint8_t    ts_kind[MAX_TS];   /* kernel of the dispatch ending at slot i */
} recorded;

struct em_fwd {
    em_vk            *vk;
    const em_model   *m;
    const em_hparams *hp;
    em_fwd_opts       o;
    uint32_t L, RPW;               /* matrix kernel: lanes, rows per workgroup */
    char     variant[128];

    /* strides (floats) of the activation rows, multiples of 32 */
    uint32_t E_st, qkv_st, att_st, F_st, gu_st;
    uint32_t qkv_dim;
    uint32_t bt_stride;            /* ints per block table */
    /* step buffer layout (int offsets) */
    uint32_t off_tok, off_pos, off_seq, off_gather, off_dec, off_tiles, off_bt, step_ints;
    uint32_t dec_lanes;            /* workgroup width of attn_dec */
    int      dec_grouped;          /* decode attention by KV head (attn_dec_g.comp) */
    uint32_t pre_heads;            /* query heads per prefill attention workgroup */
    uint32_t k_rope, k_dec, k_pre; /* kernels for the KV element type */
    uint32_t kscale_off, vscale_off; /* Q8_0 KV: half index of the scales in a layer's K / V */
    int      win_pool;             /* the windowed layers' K/V in a pool of their own (o.n_blocks_window) */
    uint32_t kscale_off_w, vscale_off_w; /* the same for a layer of that pool */
    uint32_t off_bt_w;             /* step buffer: the window pool's tables */
    uint32_t off_pool, off_type;   /* step buffer: pooled spans [2 max_seqs], token types [T] */
    em_vk_buf pooled;              /* readback: [max_seqs][E_st] pooled rows */
    em_vk_dset *pool_ds;           /* x, vecs, step -> pooled (pool.comp) */
    /* an encoder: the embeddings' position and type tables and LayerNorm
     * in vecs; its kernels' bindings (layernorm.comp on x, gelu.comp on
     * hf, attn_enc.comp qkv -> att) */
    uint32_t  enc_pos_off, enc_type_off, enc_norm_off, enc_norm_b_off;
    em_vk_dset *ln_ds, *gelu_ds, *attn_enc_ds;
    em_vk_buf part;                /* split-K partials [query][H][nsplit][Dv + 2] */
    uint32_t  max_split;           /* splits per decode query (part holds T of them) */
    em_vk_dset *reduce_ds;

    em_vk_buf x, qkv, att, hf, gu, logits, step, vecs, dummy;
    em_vk_buf steer, cand;         /* topk.comp's input and output */
    em_vk_dset *topk_ds;
    uint32_t  steer_adj_max;       /* adjustments per step, all rows together */
    layer    *layers;
    site      out;
    pmat      embd;                /* token_embd (shared with out when tied) */
    em_vk_dset *embed_ds[MAX_CHUNKS];   /* the embedding lookup, one per chunk of embd */
    uint32_t  out_norm_off, freq_off;
    uint32_t  freq_swa_off;        /* the sliding-window layers' rope frequencies */
    /* mixture of experts: router logits [T][rl_st], the pairs' hidden rows
     * [T*K][mh_st] and outputs [T*K][E_st], the route (moe_route.comp) */
    em_vk_buf rl, mh, ye, moe;
    uint32_t  rl_st, mh_st;
    uint32_t  moe_list_off, moe_sel_off, moe_w_off;
    em_vk_dset *route_ds, *combine_ds;
    float     rope_mscale[2];      /* YaRN's factor on q and k (global, windowed layers; else 1) */
    em_vk_dset *norm_add_ds;       /* post-norm models: gu -> x (norm_add.comp) */

    pipe_entry pipes[MAX_PIPES];
    uint32_t   n_pipes;
    recorded   rec[MAX_RECORDED];
    em_vk_cmd *copy_cmd;          /* block copies (copy on write) */
    uint64_t   clock;

    em_fwd_stats st;
    recorded  *cur;               /* being recorded (profiling labels) */
    double     prof_us[P_COUNT];
    uint32_t   prof_n[P_COUNT];
    float     *vecs_host;
    uint32_t   n_vecs, cap_vecs;
};

/* The rows of one packed matrix: tensors concatenated, or (interleave) the
 * rows of two alternating (gate/up pairs). */
typedef struct {
    const em_gguf_tensor *t[MAX_PARTS];
    uint32_t n;
    int      interleave;   /* rows alternate t[0], t[1] (gate/up pairs) */
    uint32_t experts;      /* > 0: 3-D tensors, their matrices stacked, each padded to rows_per rows */
    uint32_t rows_per;
} row_src;

static inline uint32_t fwd_round_up(uint32_t v, uint32_t a) { return (v + a - 1) / a * a; }

/* forward.c: the pipeline of kernel k with (tn, flags) spec constants,
 * created on first use (f keeps it). */
int  fwd_get_pipe(em_fwd *f, uint32_t k, uint32_t tn, uint32_t flags, em_vk_pipe **out, em_err *err);

/* fwd_weights.c. The vecs buffer (host copy until uploaded): n floats of v
 * (NULL: zeros) or a tensor dequantized, at *off. */
int  fwd_vec_add(em_fwd *f, const float *v, uint32_t n, uint32_t *off, em_err *err);
int  fwd_vec_tensor(em_fwd *f, const em_gguf_tensor *t, uint32_t *off, em_err *err);
/* Pack and upload the rows of s into pm, in chunks that each fit one
 * storage-buffer binding; free them. */
int  fwd_pmat_build(em_fwd *f, const row_src *s, pmat *pm, em_vk_progress *prog, em_err *err);
void fwd_pmat_free(em_fwd *f, pmat *pm);
/* Descriptor sets binding each chunk of each part of s to in -> out; free
 * the site's matrices. */
int  fwd_site_bind(em_fwd *f, site *s, const em_vk_buf *in, const em_vk_buf *out, em_err *err);
/* The same with `stepb` in the step buffer's place (an expert site reads the route there). */
int  fwd_site_bind_step(em_fwd *f, site *s, const em_vk_buf *in, const em_vk_buf *out, const em_vk_buf *stepb,
                        em_err *err);
void fwd_site_free(em_fwd *f, site *s);
/* Layer il: its matrices packed and bound, its vectors, its KV cache. */
int  fwd_build_layer(em_fwd *f, uint32_t il, em_vk_progress *prog, em_err *err);

#endif
