/* variants.h — which kernel variant runs on which device: pure functions of
 * the device's properties (em_vk_dev_info) and the model's shape, so that
 * they can be tested and tuned without a device and a GPU-shaped variant
 * can be added beside the CPU-shaped ones. `ember bench` shows the choice
 * (em_fwd_variant). The measurements behind each choice are in
 * docs/PERFORMANCE.md, "Kernel variants (the choices of variants.h)". */
#ifndef EM_VARIANTS_H
#define EM_VARIANTS_H

#include <stdint.h>

#include "core/model/model.h"
#include "core/vk/vk.h"

/* Index in em_kernels[] of the matrix / embedding kernel that reads weights
 * packed from a tensor of this kernel type (em_wpack_layout.type). */
int em_fwd_mm_kernel(uint32_t type);
int em_fwd_embed_kernel(uint32_t type);

/* Models whose weights are smaller than this are "tiny": on a CPU device
 * their dispatches are too small to split across threads (the engine runs
 * them on one) or to gain from more rows per workgroup. */
#define EM_FWD_TINY_BYTES (16u << 20)

/* Rows per workgroup of the matrix kernel for a model of weight_bytes: on a
 * CPU device 128 for models of EM_FWD_TINY_BYTES and more, 64 below (each
 * lane's input slice then serves more rows); 8 on GPUs.
 * EMBER_MM_RPW=8|16|...|256 (a power of two) overrides it for experiments. */
uint32_t em_fwd_mm_rows(const em_vk_dev_info *di, uint64_t weight_bytes);
/* Lanes of a matrix-kernel workgroup: the device's subgroup, at most 64
 * (32 where the device reports none). */
uint32_t em_fwd_mm_lanes(const em_vk_dev_info *di);
/* Tokens per pass of the matrix kernel over weights of kernel type type for
 * T tokens at rpw rows per workgroup: with 32 rows or more (CPU devices) 8
 * from T >= 8, 16 from T >= 16 for Q8_0 and the K-quants; else 2 (1 for one
 * token). The last pass of a T that is not a multiple computes idle tokens. */
uint32_t em_fwd_mm_tokens_per_pass(uint32_t rpw, uint32_t type, uint32_t T);

/* Whether decode attention runs one workgroup per KV head for all its query
 * heads (shaders/attn_dec_g.comp: each K/V word loaded once for the GQA
 * group) instead of one per query head (attn_dec.comp): on a CPU device, for
 * groups of 2..EM_FWD_DEC_GROUP_MAX heads, lanes within one subgroup and
 * head sizes that are multiples of 8 * lanes. Not on GPUs (not measured). */
#define EM_FWD_DEC_GROUP_MAX 8u
int em_fwd_dec_grouped(const em_vk_dev_info *di, const em_hparams *hp, uint32_t lanes);

/* Query heads per workgroup of the shuffled prefill attention on a CPU
 * device (shaders/attn_pre.comp, spec constant 3): the largest divisor of
 * the GQA group of at most EM_FWD_DEC_GROUP_MAX heads whose head sizes add
 * up to at most EM_FWD_PRE_GROUP_DIMS (llvmpipe's compile time grows about
 * 4x per doubling of that sum), else 1. */
#define EM_FWD_PRE_GROUP_DIMS 256u
uint32_t em_fwd_pre_heads(const em_hparams *hp);

#endif
