/* variants.c — which kernel variant runs where: pure functions of the
 * device's properties and the model's shape (variants.h; the measurements
 * behind each choice are in docs/PERFORMANCE.md, "Kernel variants"). */
#include "core/gpu/variants.h"

#include <stdio.h>
#include <stdlib.h>

#include "core/model/quant.h"
#include "shaders/em_kernels.h"

int em_fwd_mm_kernel(uint32_t type)
{
    switch (type) {
    case EM_T_F32:  return EM_K_MM_F32;
    case EM_T_F16:  return EM_K_MM_F16;
    case EM_T_Q8_0: return EM_K_MM_Q8_0;
    case EM_T_Q4_0: return EM_K_MM_Q4_0;
    case EM_T_Q4_1: return EM_K_MM_Q4_1;
    case EM_T_Q5_0: return EM_K_MM_Q5_0;
    case EM_T_Q5_1: return EM_K_MM_Q5_1;
    case EM_T_IQ4_NL: return EM_K_MM_IQ4_NL;
    case EM_T_IQ4_XS: return EM_K_MM_IQ4_XS;
    case EM_T_Q2_K: return EM_K_MM_Q2_K;
    case EM_T_Q3_K: return EM_K_MM_Q3_K;
    case EM_T_MXFP4: return EM_K_MM_MXFP4;
    case EM_T_Q4_K: return EM_K_MM_Q4_K;
    case EM_T_Q5_K: return EM_K_MM_Q5_K;
    default:        return EM_K_MM_Q6_K;
    }
}

int em_fwd_embed_kernel(uint32_t type)
{
    switch (type) {
    case EM_T_F32:  return EM_K_EMBED_F32;
    case EM_T_F16:  return EM_K_EMBED_F16;
    case EM_T_Q8_0: return EM_K_EMBED_Q8_0;
    case EM_T_Q4_0: return EM_K_EMBED_Q4_0;
    case EM_T_Q4_1: return EM_K_EMBED_Q4_1;
    case EM_T_Q5_0: return EM_K_EMBED_Q5_0;
    case EM_T_Q5_1: return EM_K_EMBED_Q5_1;
    case EM_T_IQ4_NL: return EM_K_EMBED_IQ4_NL;
    case EM_T_IQ4_XS: return EM_K_EMBED_IQ4_XS;
    case EM_T_Q2_K: return EM_K_EMBED_Q2_K;
    case EM_T_Q3_K: return EM_K_EMBED_Q3_K;
    case EM_T_MXFP4: return EM_K_EMBED_MXFP4;
    case EM_T_Q4_K: return EM_K_EMBED_Q4_K;
    case EM_T_Q5_K: return EM_K_EMBED_Q5_K;
    default:        return EM_K_EMBED_Q6_K;
    }
}

uint32_t em_fwd_mm_rows(const em_vk_dev_info *di, uint64_t weight_bytes)
{
    const char *env = getenv("EMBER_MM_RPW");
    unsigned rpw;
    if (env && sscanf(env, "%u", &rpw) == 1 && rpw >= 8 && rpw <= 256 && (rpw & (rpw - 1)) == 0)
        return rpw;
    if (!di->cpu_kernels)
        return 8;
    return weight_bytes >= EM_FWD_TINY_BYTES ? 128 : 64;
}

uint32_t em_fwd_mm_lanes(const em_vk_dev_info *di)
{
    uint32_t sg = di->subgroup_size ? di->subgroup_size : 32;
    return sg > 64 ? 64 : sg;
}

int em_fwd_dec_grouped(const em_vk_dev_info *di, const em_hparams *hp, uint32_t lanes)
{
    uint32_t group = hp->n_head_kv ? hp->n_head / hp->n_head_kv : 0;
    return di->cpu_kernels && group >= 2 && group <= EM_FWD_DEC_GROUP_MAX &&
           lanes <= di->subgroup_size && hp->head_dim % (8 * lanes) == 0 && hp->head_dim_v % (8 * lanes) == 0;
}

uint32_t em_fwd_pre_heads(const em_hparams *hp)
{
    uint32_t group = hp->n_head_kv ? hp->n_head / hp->n_head_kv : 1;
    uint32_t d = hp->head_dim > hp->head_dim_v ? hp->head_dim : hp->head_dim_v;
    for (uint32_t g = group < EM_FWD_DEC_GROUP_MAX ? group : EM_FWD_DEC_GROUP_MAX; g > 1; g--)
        if (group % g == 0 && g * d <= EM_FWD_PRE_GROUP_DIMS)
            return g;
    return 1;
}

uint32_t em_fwd_mm_tokens_per_pass(uint32_t rpw, uint32_t type, uint32_t T)
{
    if (T >= 8 && rpw >= 32)
        return T >= 16 && (type == EM_T_Q8_0 || type == EM_T_Q4_K || type == EM_T_Q5_K || type == EM_T_Q6_K)
               ? 16 : 8;
    return T >= 2 ? 2 : 1;
}
