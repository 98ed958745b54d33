/* fwd_plan.h — the device memory of a forward pass, planned before anything
 * is allocated (fwd_plan.c): `ember vram`, the KV pool's size in `ember
 * serve`, and em_fwd_create's own buffers use the same figures. */
#ifndef EM_FWD_PLAN_H
#define EM_FWD_PLAN_H

#include <stdint.h>

#include "core/err.h"
#include "core/model/model.h"
#include "core/model/quant.h"
#include "core/vk/vk.h"

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
    uint64_t moe_rl, moe_mh, moe_ye, moe_route; /* a mixture of experts' (0 for a dense model) */
    uint64_t dummy;                      /* the bound-but-unused buffer */
    uint64_t logits;                     /* readback: [max_logits][n_vocab] f32 */
    uint64_t steer;                      /* upload: per row temperature, adjustments, mask */
    uint64_t cand;                       /* readback: per row max, sums, the top candidates */
    uint64_t step;                       /* upload: per-step ints and block tables */
    uint64_t pooled;                     /* readback: [max_seqs][n_embd] pooled rows */
    uint64_t staging;                    /* em_vk's upload staging buffer */
    uint64_t margin;                     /* EM_FWD_MARGIN_BYTES */
} em_fwd_mem;

/* Weights and vectors of m (borrowed) packed for matrix workgroups of rows
 * rows (em_fwd_mm_rows) and lanes lanes, into mem->weights,
 * weights_by_type and vecs. EM_EUNSUPPORTED for a type with no GPU path. */
int em_fwd_plan_weights(const em_model *m, uint32_t rows, uint32_t lanes, em_fwd_mem *mem,
                        em_err *err);
/* Floats of m's vectors buffer (norms, biases, q/k norms, rope frequencies)
 * for matrix workgroups of `rows` rows (the experts' biases are padded as
 * their rows are). */
uint64_t em_fwd_plan_vec_floats(const em_model *m, uint32_t rows);
/* Logit rows a step can hold when one binding holds max_binding bytes (0:
 * no limit): want, or fewer for a large vocabulary (the logits, steering
 * and candidate buffers are one binding each); 0 when not even one row
 * fits. */
uint32_t em_fwd_plan_logit_rows(const em_hparams *hp, uint32_t want, uint64_t max_binding);
/* Bytes of one decode query's split-K partials per split (all heads). */
uint64_t em_fwd_plan_part_unit(const em_hparams *hp);
/* Splits per decode query (1..EM_ATTN_MAX_SPLIT) when max_tokens queries'
 * partials share one binding of max_binding bytes (0: no limit). A constant
 * of the engine: a token's splits follow its context length alone. */
uint32_t em_fwd_plan_max_split(const em_hparams *hp, uint32_t max_tokens, uint64_t max_binding);
/* The scratch buffers for steps of max_tokens tokens, max_seqs slots of
 * max_ctx positions and max_logits logit rows (0: max_seqs), on a device
 * whose bindings hold max_binding bytes (0: no limit; the logit rows and
 * the split-K partials are cut to one binding), and the staging and margin
 * figures; only hp's shape is read. */
void em_fwd_plan_scratch(const em_hparams *hp, uint32_t max_tokens, uint32_t max_seqs,
                         uint32_t max_ctx, uint32_t max_logits, uint64_t max_binding, em_fwd_mem *mem);
/* x + qkv + att + hf + gu + part + the moe buffers + dummy + logits + steer + cand + step + pooled. */
uint64_t em_fwd_mem_scratch(const em_fwd_mem *mem);
/* Bytes left for the KV pool on a heap of heap bytes: 80% of it (ember
 * serve leaves 20% to the driver and other processes) less weights,
 * vectors, scratch, staging and margin; 0 when they do not fit. */
uint64_t em_fwd_plan_kv_budget(uint64_t heap, const em_fwd_mem *mem);

#endif
