/* forward.h — one batched step of the model on the GPU.
 *
 * A step runs any mix of tokens from several sequences: prompt chunks
 * (prefill) and single decode tokens alike. Each token has a position and a
 * sequence slot; each slot has a block table naming the KV-cache blocks
 * (EM_KV_BLOCK positions each) that hold its positions. The step embeds the
 * tokens, runs every layer (the new K/V are written into the blocks, then
 * attention reads the sequence's earlier positions through its table), and
 * returns logits for the rows asked for. Which blocks a sequence owns is the
 * caller's business (core/kv.c; one sequence in core/engine.c).
 *
 * Weights are repacked and uploaded once at creation (core/wpack.h).
 * Command buffers are recorded once per step shape (tokens, logit rows) and
 * replayed; per-step values travel in a host-visible step buffer. Only the
 * thread that owns the em_fwd may call it. */
#ifndef EM_FORWARD_H
#define EM_FORWARD_H

#include <stdint.h>

#include "core/err.h"
#include "core/model.h"
#include "core/sample.h"
#include "core/vk.h"

typedef struct {
    uint32_t max_tokens;   /* tokens per step (prefill chunk + decodes) */
    uint32_t max_seqs;     /* sequence slots */
    uint32_t max_ctx;      /* positions per sequence */
    uint32_t n_blocks;     /* KV pool blocks; 0: max_seqs * ceil(max_ctx / EM_KV_BLOCK) */
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
 * K or V binding can address and at what max_seqs x max_ctx can use. */
uint32_t em_fwd_kv_blocks(em_vk *vk, const em_model *m, uint32_t kv_type, uint64_t kv_mb,
                          uint32_t max_seqs, uint32_t max_ctx, uint32_t max_tokens);

/* ---- planning (core/fwd_plan.c): device memory before it is allocated --- */

/* What ember serve keeps free beyond what it sizes exactly: suballocation
 * blocks part-used, pipelines, descriptor pools, the driver's own. */
#define EM_FWD_MARGIN_BYTES (256ull << 20)
#define EM_FWD_STAGING_BYTES EM_VK_STAGING_BYTES

/* The memory of one em_fwd, in bytes. The scratch buffers (x ... step) are
 * the ones em_fwd_create allocates, sized by em_fwd_plan_scratch. */
typedef struct {
    uint64_t weights;                    /* packed weight matrices (em_fwd_stats.weight_bytes) */
    uint64_t weights_by_type[EM_T_COUNT];/* of those, by the tensors' GGUF type */
    uint64_t vecs;                       /* f32 norms, biases, rope frequencies */
    uint64_t x, qkv, att, hf, gu, part;  /* device activations (shapes in fwd_plan.c) */
    uint64_t dummy;                      /* the bound-but-unused buffer */
    uint64_t logits;                     /* readback: [max_logits][n_vocab] f32 */
    uint64_t steer;                      /* upload: per row temperature, adjustments, mask */
    uint64_t cand;                       /* readback: per row max, sums, the top candidates */
    uint64_t step;                       /* upload: per-step ints and block tables */
    uint64_t staging;                    /* em_vk's upload staging buffer */
    uint64_t margin;                     /* EM_FWD_MARGIN_BYTES */
} em_fwd_mem;

/* Weights and vectors of m (borrowed) packed for matrix workgroups of rows
 * rows (em_fwd_mm_rows) and lanes lanes, into mem->weights,
 * weights_by_type and vecs. EM_EUNSUPPORTED for a type with no GPU path. */
int em_fwd_plan_weights(const em_model *m, uint32_t rows, uint32_t lanes, em_fwd_mem *mem,
                        em_err *err);
/* Floats of m's vectors buffer (norms, biases, q/k norms, rope frequencies). */
uint64_t em_fwd_plan_vec_floats(const em_model *m);
/* The scratch buffers for steps of max_tokens tokens, max_seqs slots of
 * max_ctx positions and max_logits logit rows (0: max_seqs), and the
 * staging and margin figures; only hp's shape is read. */
void em_fwd_plan_scratch(const em_hparams *hp, uint32_t max_tokens, uint32_t max_seqs,
                         uint32_t max_ctx, uint32_t max_logits, em_fwd_mem *mem);
/* x + qkv + att + hf + gu + part + dummy + logits + steer + cand + step. */
uint64_t em_fwd_mem_scratch(const em_fwd_mem *mem);
/* Bytes left for the KV pool on a heap of heap bytes: 80% of it (ember
 * serve leaves 20% to the driver and other processes) less weights,
 * vectors, scratch, staging and margin; 0 when they do not fit. */
uint64_t em_fwd_plan_kv_budget(uint64_t heap, const em_fwd_mem *mem);

/* Repack and upload m's weights to vk (both borrowed; must outlive the em_fwd),
 * allocate activations and the KV pool. EM_ENOMEM when they do not fit. */
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
} em_fwd_batch;

/* Run one step; logits receives [n_logits][n_vocab] (may be NULL when
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
/* topk.comp's buffers: the words of the steer buffer for L rows with n_adj
 * adjustments in all; pack L rows' steering into w (that many words;
 * offsets from w); unpack L rows of output at o (EM_TOPK_STRIDE words
 * each) into top (its arrays point into o). */
size_t em_topk_steer_words(uint32_t L, uint64_t n_adj, uint32_t n_vocab);
void   em_topk_pack(uint32_t *w, const em_sample_steer *steer, uint32_t L, uint32_t n_vocab);
void   em_topk_unpack(const uint32_t *o, uint32_t L, em_sample_top *top);

/* Logit row i of the last step (steered, after em_fwd_step_top); borrowed. */
const float *em_fwd_logits_row(const em_fwd *f, uint32_t i);

/* Copy whole KV blocks (all layers' K and V), src[i] -> dst[i], before the
 * next step (copy on write of shared blocks). Arrays borrowed. */
int em_fwd_copy_blocks(em_fwd *f, const int32_t *src, const int32_t *dst, uint32_t n, em_err *err);

typedef struct {
    uint32_t dispatches;      /* in the last step's command buffer */
    uint32_t barriers;
    uint64_t weight_bytes;    /* device bytes of packed weights */
    uint64_t decode_bytes;    /* of those, the bytes a decode step streams: all but an
                               * embedding table that is not also the output matrix */
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

/* Index in em_kernels[] of the matrix / embedding kernel that reads weights
 * packed from a tensor of this kernel type (em_wpack_layout.type). */
int em_fwd_mm_kernel(uint32_t type);
int em_fwd_embed_kernel(uint32_t type);

/* Models whose weights are smaller than this are "tiny": on a CPU device
 * their dispatches are too small to split across threads (the engine runs
 * them on one) or to gain from more rows per workgroup. */
#define EM_FWD_TINY_BYTES (16u << 20)

/* Rows per workgroup of the matrix kernel for a model of weight_bytes on a
 * device. On a CPU device 128 for models >= 16 MB, 64 below: llvmpipe loads
 * every 32-bit word lane by lane, so the cost is in loading each lane's input
 * slice, which then serves more rows, and past 32 rows the loop over them is
 * no longer unrolled, which keeps the code small (155M model: prefill 1.7x
 * and decode 1.3-1.6x the 32-row kernel; the shared 1-3 MB models decode
 * 2.5-3.5x faster with 64; see docs/PERFORMANCE.md). 128-row groups leave
 * a 1024-wide matrix 8 workgroups: enough for 2 cores, not measured on
 * CPUs with many more. 8 on GPUs (enough workgroups for small matrices).
 * EMBER_MM_RPW=8|16|...|256 (a power of two) overrides it for experiments. */
uint32_t em_fwd_mm_rows(const em_vk_dev_info *di, uint64_t weight_bytes);
/* Lanes of a matrix-kernel workgroup: the device's subgroup, at most 64
 * (32 where the device reports none). */
uint32_t em_fwd_mm_lanes(const em_vk_dev_info *di);

/* Whether decode attention runs one workgroup per KV head for all its query
 * heads (shaders/attn_dec_g.comp, lanes splitting the head dimensions: each
 * K/V word is loaded once for the whole GQA group) instead of one per query
 * head (attn_dec.comp, lanes walking positions). On a CPU device, where
 * llvmpipe pays per loaded word, for groups of 2..EM_FWD_DEC_GROUP_MAX query
 * heads, lanes within one subgroup (the kernel adds across a subgroup) and
 * head sizes that are multiples of 8 * lanes: 1.7x faster at 4096
 * positions on the 155M model (docs/PERFORMANCE.md). Not on GPUs (not
 * measured there). */
#define EM_FWD_DEC_GROUP_MAX 8u
int em_fwd_dec_grouped(const em_vk_dev_info *di, const em_hparams *hp, uint32_t lanes);

/* Query heads per workgroup of the shuffled prefill attention on a CPU
 * device (shaders/attn_pre.comp, spec constant 3): the largest divisor of
 * the GQA group of at most EM_FWD_DEC_GROUP_MAX heads whose head sizes add
 * up to at most EM_FWD_PRE_GROUP_DIMS, else 1. Each K/V row shared across
 * the subgroup then serves every head of the workgroup (512-token prefill
 * attention of the 155M model: 138 -> 89 ms with 4 heads of 64), but
 * llvmpipe's compile time grows about 4x per doubling of the heads' total
 * size (heads of 128 on an empty shader cache: 2 heads 1.5 s, 4 heads
 * 5.1 s, 8 heads 20 s), while 4 heads of 128 instead of 2 gain only
 * 8-17% of the attention, ~1% of the prefill (docs/PERFORMANCE.md). */
#define EM_FWD_PRE_GROUP_DIMS 256u
uint32_t em_fwd_pre_heads(const em_hparams *hp);

/* "mm 8 lanes x 8 rows per workgroup" etc. */
const char *em_fwd_variant(const em_fwd *f);
/* The options f runs with (n_blocks and max_logits resolved); borrowed. */
const em_fwd_opts *em_fwd_get_opts(const em_fwd *f);

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
void   em_fwd_mm_geometry(const em_fwd *f, uint32_t *lanes, uint32_t *rpw);

#endif
