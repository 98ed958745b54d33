/* forward.h — one batched step of the model on the GPU.
 *
 * A step runs any mix of tokens from several sequences: prompt chunks
 * (prefill) and single decode tokens alike. Each token has a position and a
 * sequence slot; each slot has a block table naming the KV-cache blocks
 * (EM_KV_BLOCK positions each) that hold its positions. The step embeds the
 * tokens, runs every layer (the new K/V are written into the blocks, then
 * attention reads the sequence's earlier positions through its table), and
 * returns logits for the rows asked for. Which blocks a sequence owns is the
 * caller's business (core/run/kv.c; one sequence in core/gpu/engine.c).
 *
 * Weights are repacked and uploaded once at creation (core/gpu/wpack.h,
 * fwd_weights.c); memory is planned before anything is allocated
 * (fwd_plan.h); the kernel variant per device is variants.h's choice;
 * topk.h packs the steering of em_fwd_step_top.
 * Command buffers are recorded once per step shape (tokens, logit rows) and
 * replayed; per-step values travel in a host-visible step buffer. Only the
 * thread that owns the em_fwd may call it. */
#ifndef EM_FORWARD_H
#define EM_FORWARD_H

#include <stdint.h>

#include "core/err.h"
#include "core/model/model.h"
#include "core/run/sample.h"
#include "core/vk/vk.h"

typedef struct {
    uint32_t max_tokens;   /* tokens per step (prefill chunk + decodes) */
    uint32_t max_seqs;     /* sequence slots */
    uint32_t max_ctx;      /* positions per sequence */
    uint32_t n_blocks;     /* KV pool blocks; 0: max_seqs * ceil(max_ctx / EM_KV_BLOCK) */
    uint32_t n_blocks_window; /* a model with sliding-window layers: their K/V in a pool of
                            * this many blocks (em_kv's window pool; each step's batch then
                            * carries its tables), the main pool holding the other layers';
                            * 0: every layer in the main pool */
    uint32_t max_logits;   /* logit rows per step; 0: max_seqs */
    int      profile;      /* time every dispatch with GPU timestamps (em_fwd_profile) */
    uint32_t kv_type;      /* em_kv_type: EM_KV_F16 (default) or EM_KV_Q8_0 */
} em_fwd_opts;

typedef struct em_fwd em_fwd;

/* "f16" / "q8_0" -> EM_KV_F16 / EM_KV_Q8_0; EM_EINVAL otherwise. */
int em_fwd_kv_type_parse(const char *s, uint32_t *out, em_err *err);
const char *em_fwd_kv_type_name(uint32_t kv_type);

/* Device bytes of one KV block (all layers' K and V) for model m;
 * em_fwd_kv_block_bytes_hp the same from the shape alone:
 * n_layer x EM_KV_BLOCK x (em_fwd_kv_row_bytes(Hk*D) + em_fwd_kv_row_bytes(Hk*Dv)). */
uint64_t em_fwd_kv_block_bytes(const em_model *m, uint32_t kv_type);
uint64_t em_fwd_kv_block_bytes_hp(const em_hparams *hp, uint32_t kv_type);
/* Bytes of n K (or V) values of one position: 2 each in f16; in q8_0 34 per
 * 32 (int8 values and an f16 scale per 32). */
uint64_t em_fwd_kv_row_bytes(uint32_t kv_type, uint64_t n);

/* A KV pool size in blocks for vk and m: kv_mb MiB when non-zero, else
 * em_fwd_plan_kv_budget of the largest device-local heap (what the weights,
 * vectors, scratch for max_tokens-token steps of max_seqs sequences,
 * staging and the margin leave of 80% of it), capped at what one layer's
 * K or V binding can address and at what max_seqs x max_ctx can use. A
 * model with sliding-window layers gets their pool first, *n_window blocks
 * (max_seqs x em_fwd_window_blocks; n_window may be NULL, and is 0 for a
 * model without), and the main pool, of the other layers, what is left. */
uint32_t em_fwd_kv_blocks(em_vk *vk, const em_model *m, uint32_t kv_type, uint64_t kv_mb,
                          uint32_t max_seqs, uint32_t max_ctx, uint32_t max_tokens, uint32_t *n_window);
/* The window pool's blocks one sequence slot holds at most: those of
 * window - 1 + max_tokens positions (what a step's queries see and write),
 * plus one for a window that does not start at a block's start, at most the
 * context's. 0 for a model without sliding windows. */
uint32_t em_fwd_window_blocks(const em_hparams *hp, uint32_t max_tokens, uint32_t max_ctx);
/* Device bytes of one block of each pool when the windowed layers have a
 * pool of their own: *main of the other layers, *window of the windowed
 * ones (0 for a model without sliding windows; *main is then
 * em_fwd_kv_block_bytes_hp). */
void em_fwd_kv_split_bytes(const em_hparams *hp, uint32_t kv_type, uint64_t *main, uint64_t *window);

/* 0 if the forward pass has kernels for every part of a model of shape hp,
 * else EM_EUNSUPPORTED with what is missing (a mixture of experts, a final
 * logit soft cap). Needs no device. */
int  em_fwd_model_supported(const em_hparams *hp, em_err *err);

/* Repack and upload m's weights to vk (both borrowed; must outlive the em_fwd),
 * allocate activations and the KV pool. EM_ENOMEM when they do not fit;
 * em_fwd_model_supported's refusal first. */
int  em_fwd_create(em_vk *vk, const em_model *m, const em_fwd_opts *o, em_fwd **out, em_err *err);
void em_fwd_destroy(em_fwd *f);   /* accepts NULL */

typedef struct {
    uint32_t       n_tokens;
    const int32_t *tokens;         /* [n_tokens] token ids */
    const int32_t *pos;            /* [n_tokens] positions */
    const int32_t *seq;            /* [n_tokens] sequence slots */
    uint32_t       n_logits;
    const int32_t *logit_rows;     /* [n_logits] indices into the tokens */
    const int32_t *const *tables;  /* [max_seqs]: block table of each slot used by the
                                    * batch (ceil((max pos + 1) / EM_KV_BLOCK) entries) */
    const uint8_t *decode;         /* [n_tokens] or NULL: 1 for generated tokens (decode
                                    * attention), 0 for prompt tokens (prefill tiles).
                                    * NULL: a token alone in its run of consecutive
                                    * positions is a decode. Keeping the choice with the
                                    * token makes its result independent of the batch. */
    const int32_t *const *tables_window; /* with n_blocks_window: [max_seqs] the window pool's
                                    * tables (entries from the window of each slot's first
                                    * position in the step on; before it, -1 or anything) */
    const uint8_t *types;          /* [n_tokens] or NULL (all 0): token types, an encoder's
                                    * segment embeddings (a reranker's document: 1) */
    uint32_t       n_pool;         /* pooled rows asked of the step (<= max_seqs) */
    const int32_t *pool;           /* [2 * n_pool]: (first token, count) spans of the batch;
                                    * row i of em_fwd_pooled_row is the SUM of the final
                                    * hidden states of span i's tokens (a decoder's normed by
                                    * output_norm, as the logits see them) */
} em_fwd_batch;

/* An encoder (hp->encoder: bert) runs the same steps with these rules:
 * every sequence of a step is whole in it, its tokens one run of
 * consecutive positions from 0 (each token attends to all of its run's,
 * nothing is kept in the KV pool, whose tables are not read), no logit
 * rows (n_logits 0), no decode tokens: the pooled rows are its output.
 * EM_EINVAL for a batch that breaks them.
 *
 * Run one step; logits receives [n_logits][n_vocab] (may be NULL when
 * n_logits is 0). All inputs are borrowed for the call. EM_ERANGE for ids,
 * positions, slots or blocks out of range; EM_EDEVICE if the device fails. */
int em_fwd_step(em_fwd *f, const em_fwd_batch *b, float *logits, em_err *err);
/* The same step, but the logit rows stay on the device: row i is steered
 * in place by steer[i] and summarised into top[i] (max, argmax, sums,
 * the EM_SAMPLE_TOPK largest: em_sampler_sample_top), which is all that is
 * read back. top[i]'s arrays, and the steered rows through
 * em_fwd_logits_row (for what the candidates cannot settle), stay valid
 * until the next step. The rows' adjustments together may number up to
 * EM_FWD_STEER_ADJ per logit row of the em_fwd (max_logits): EM_ERANGE
 * beyond (em_fwd_step and the host's steering then, for that step). */
#define EM_FWD_STEER_ADJ 2048u
int em_fwd_step_top(em_fwd *f, const em_fwd_batch *b, const em_sample_steer *steer, em_sample_top *top,
                    em_err *err);
/* Pooled row i of the last step ([n_embd] floats: the sum over span i of
 * em_fwd_batch.pool); borrowed, valid until the next step. */
const float *em_fwd_pooled_row(const em_fwd *f, uint32_t i);
/* Logit row i of the last step (steered, after em_fwd_step_top); borrowed. */
const float *em_fwd_logits_row(const em_fwd *f, uint32_t i);

/* Copy whole KV blocks of one pool (pool 0: the main pool, all its layers'
 * K and V; 1: the window pool's), src[i] -> dst[i], before the next step
 * (copy on write of shared blocks). Arrays borrowed. */
int em_fwd_copy_blocks(em_fwd *f, uint32_t pool, const int32_t *src, const int32_t *dst, uint32_t n,
                       em_err *err);

typedef struct {
    uint32_t dispatches;      /* in the last step's command buffer */
    uint32_t barriers;
    uint64_t weight_bytes;    /* device bytes of packed weights */
    uint64_t decode_bytes;    /* of those, the bytes a decode step streams: all but an
                               * embedding table that is not also the output matrix, and
                               * of a mixture of experts' the share one token's experts hold */
    uint64_t expert_bytes;    /* of weight_bytes, a mixture of experts' expert matrices */
    uint64_t kv_bytes;        /* device bytes of the KV pool */
    uint64_t act_bytes;       /* activations + step + logits buffers */
    double   last_record_us;  /* host time recording the last step (0 when replayed) */
    double   last_submit_us;  /* host time from submit to fence */
    uint32_t mm_lanes;        /* lanes (subgroup) of a matrix-kernel workgroup */
    uint32_t mm_rows;         /* rows per matrix-kernel workgroup */
} em_fwd_stats;

void em_fwd_get_stats(const em_fwd *f, em_fwd_stats *st);
/* Per-kernel GPU time accumulated over the steps run so far (profile on). */
typedef struct {
    const char *kernel;   /* "qkv", "attn", ... (static) */
    double      us;       /* total microseconds */
    uint32_t    count;    /* dispatches */
} em_fwd_prof;

/* Fills up to max entries, returns how many kernels there are (0 when
 * profiling is off or the device has no timestamps). reset clears the sums. */
uint32_t em_fwd_profile(em_fwd *f, em_fwd_prof *out, uint32_t max, int reset);

/* "mm 8 lanes x 8 rows per workgroup" etc. */
const char *em_fwd_variant(const em_fwd *f);
/* The options f runs with (n_blocks and max_logits resolved); borrowed. */
const em_fwd_opts *em_fwd_get_opts(const em_fwd *f);
/* The sliding window whose layers keep their K/V in the window pool
 * (o.n_blocks_window), 0 when there is none. */
uint32_t em_fwd_window(const em_fwd *f);

/* A pipeline f has built: the kernel (index in em_kernels[]), the matrix
 * kernel's tn and flags spec constants (0 for other kernels), and the
 * pipeline itself (borrowed: it lives as long as f). */
typedef struct {
    uint32_t    kernel, tn, flags;
    em_vk_pipe *pipe;
} em_fwd_pipe_info;

/* The pipelines built so far (steps build them at first use), in the order
 * they were built: fills up to max entries of out, returns how many there
 * are. */
uint32_t em_fwd_pipes(const em_fwd *f, em_fwd_pipe_info *out, uint32_t max);
/* The device f runs on (borrowed), and the matrix kernel's lanes and rows
 * per workgroup (its spec constants 0 and 1). */
em_vk *em_fwd_device(const em_fwd *f);
/* The shape of the model f runs (borrowed: as long as f). */
const em_hparams *em_fwd_hparams(const em_fwd *f);
void   em_fwd_mm_geometry(const em_fwd *f, uint32_t *lanes, uint32_t *rpw);

#endif
