/* test_kernels.c — the matrix and embedding kernels against core/run/ref.c for
 * every weight type (the seven with kernels, and the ones converted to F16
 * at upload), over awkward shapes: one row, rows not a multiple of the
 * workgroup, K not a multiple of 32 (plain types), long rows, several token
 * counts, and every fused epilogue (norm, bias, residual add, SwiGLU,
 * gathered input rows), and the token-choosing kernel (topk.comp) over
 * vocabularies around its sizes. The cases themselves are core/gpu/kcheck.c's
 * (the boot self-test runs them too): random blocks with sane scales. */
#include <math.h>
#include <stdint.h>

#include "core/gpu/forward.h"
#include "core/gpu/kcheck.h"
#include "core/gpu/kparams.h"
#include "core/gpu/variants.h"
#include "core/gpu/wpack.h"
#include "core/model/quant.h"
#include "shaders/em_kernels.h"
#include "tests/gpu/gpu_util.h"

static unsigned long long seed = 7;
static float x_scale = 1;   /* magnitude of the random inputs */

typedef struct {
    em_vk *vk;
    uint32_t L, RPW;            /* lanes and rows per workgroup of mm.comp */
    em_vk_pipe *pipes[128];
    uint32_t keys[128][3];
    int n_pipes;
} harness;

static em_vk_pipe *pipe_for(harness *h, uint32_t k, uint32_t tn, uint32_t flags)
{
    for (int i = 0; i < h->n_pipes; i++)
        if (h->keys[i][0] == k && h->keys[i][1] == tn && h->keys[i][2] == flags)
            return h->pipes[i];
    if (h->n_pipes == (int)(sizeof h->pipes / sizeof h->pipes[0])) {
        CHECKF(0, "harness: more than %d pipelines", h->n_pipes);
        exit(1);
    }
    uint32_t spec[4] = { h->L, h->RPW, tn, flags };
    if (k >= EM_K_EMBED_F32 && k <= EM_K_EMBED_Q6_K) {
        spec[0] = h->RPW;   /* rows per packed group */
        spec[1] = tn;       /* blocks per chunk of the packed table (embed_case) */
    }
    em_err err = { 0 };
    em_vk_pipe *p = NULL;
    uint32_t n_spec = k >= EM_K_EMBED_F32 && k <= EM_K_EMBED_Q6_K ? 2 : k == EM_K_TOPK ? 0 : 4;
    int rc = em_vk_pipe_create(h->vk, &em_kernels[k], spec, n_spec, 0, &p, &err);
    CHECK_OK(rc, err);
    h->pipes[h->n_pipes] = p;
    h->keys[h->n_pipes][0] = k;
    h->keys[h->n_pipes][1] = tn;
    h->keys[h->n_pipes][2] = flags;
    h->n_pipes++;
    return p;
}

/* One mm case: N x K weights of src_type, T tokens, fused flags, tn tokens per pass. */
static void mm_case(harness *h, uint32_t src_type, uint32_t K, uint32_t N, uint32_t T, uint32_t flags,
                    uint32_t tn)
{
    em_err err = { 0 };
    em_wpack_layout L;
    int rc = em_wpack_layout_for(src_type, K, N, h->RPW, h->L, &L, &err);
    CHECK_OK(rc, err);
    if (rc)
        return;
    em_kcheck_mm_case c = { src_type, K, N, T, flags, tn, x_scale, seed++ };
    double e;
    rc = em_kcheck_mm(h->vk, pipe_for(h, (uint32_t)em_fwd_mm_kernel(L.type), tn, flags), h->L, h->RPW, &c, &e,
                      &err);
    CHECK_OK(rc, err);
    double limit = L.type != src_type ? 1e-5 : 1e-9;   /* f16 rounding of converted types; else summation order */
    CHECKF(!rc && e < limit, "mm %s K=%u N=%u T=%u flags=%u tn=%u: nmse %.3e", em_ttype_name(src_type), K, N,
           T, flags, tn, e);
}

/* Embedding rows of every kernel type against em_dequant_row. */
static void embed_case(harness *h, uint32_t src_type, uint32_t E, uint32_t V)
{
    em_err err = { 0 };
    em_wpack_layout L;
    int rc = em_wpack_layout_for(src_type, E, V, h->RPW, h->L, &L, &err);
    CHECK_OK(rc, err);
    if (rc)
        return;
    double e;
    rc = em_kcheck_embed(h->vk, pipe_for(h, (uint32_t)em_fwd_embed_kernel(L.type), L.C, 0), h->L, h->RPW,
                         src_type, E, V, seed++, &e, &err);
    CHECK_OK(rc, err);
    CHECKF(!rc && e < (L.type != src_type ? 1e-6 : 1e-12), "embed %s E=%u: worst row nmse %.3e",
           em_ttype_name(src_type), E, e);
}

int main(void)
{
    em_vk *vk = gpu_open("kernels", NULL);
    const em_vk_dev_info *di = em_vk_info(vk);
    harness h = { .vk = vk };
    /* the geometry ember picks for this device, and smaller ones */
    uint32_t sg = di->subgroup_size;
    uint32_t big = em_fwd_mm_rows(di, EM_FWD_TINY_BYTES), small = em_fwd_mm_rows(di, 0);
    uint32_t geoms[3][2] = { { sg, big }, { sg, small == big ? 16 : small }, { sg > 1 ? sg / 2 : 1, 8 } };
    static const uint32_t types[] = { EM_T_F32, EM_T_F16, EM_T_Q8_0, EM_T_Q4_0, EM_T_Q4_K, EM_T_Q5_K,
                                      EM_T_Q6_K, EM_T_BF16, EM_T_Q4_1, EM_T_Q5_0, EM_T_Q5_1, EM_T_Q2_K,
                                      EM_T_Q3_K, EM_T_IQ4_NL, EM_T_IQ4_XS, EM_T_MXFP4 };
    for (int gi = 0; gi < 3; gi++) {
        h.L = geoms[gi][0];
        h.RPW = geoms[gi][1];
        h.n_pipes = 0;
        for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
            uint32_t t = types[i];
            uint32_t bs = em_ttype_get(t)->blck;
            uint32_t K1 = bs == 1 ? 40 : bs;              /* plain types: K not a multiple of 32 */
            mm_case(&h, t, K1, 1, 1, 0, 1);                /* single row */
            mm_case(&h, t, bs == 256 ? 512 : 96, 3 * h.RPW + 5, 3, EM_MM_NORM_IN | EM_MM_BIAS, 2);
            mm_case(&h, t, bs == 256 ? 256 : 64, 2 * h.RPW + 6, 9, EM_MM_SWIGLU | EM_MM_NORM_IN, 8);
            em_wpack_layout pl;
            em_err perr = { 0 };
            CHECK_OK(em_wpack_layout_for(t, bs == 256 ? 256 : 64, 1, h.RPW, h.L, &pl, &perr), perr);
            /* (the 16-token passes and the gathered, accumulated output at
             * the first geometry only: the rows' and lanes' layout is the
             * cases above's at every geometry, and each case is a pipeline
             * to compile, most of this test's time with a cold shader
             * cache: 226 s in CI with 21 types at all three) */
            if (gi == 0 && pl.type != EM_T_F32 && pl.type != EM_T_F16)
                mm_case(&h, t, bs == 256 ? 256 : 64, h.RPW + 2, 37, EM_MM_SWIGLU | EM_MM_BIAS, 16);  /* ember's tn 16: quantized */
            if (gi == 0)
                mm_case(&h, t, bs == 256 ? 768 : 160, h.RPW + 1, 17, EM_MM_ADD_OUT | EM_MM_GATHER_IN, 1);
            if (gi == 0 && (t == EM_T_F16 || t == EM_T_Q4_K))
                mm_case(&h, t, bs == 256 ? 256 : 64, 2 * h.RPW + 6, 9,
                        EM_MM_SWIGLU | EM_MM_GELU | EM_MM_NORM_IN, 8);  /* Gemma's GELU gate: its types */
            if (gi == 0)
                mm_case(&h, t, bs == 256 ? 16384 : 8192, 2 * h.RPW, 1, EM_MM_NORM_IN, 1);  /* long rows */
            if (gi == 0 && t == EM_T_Q4_0) {
                /* activations whose 8-bit scale (amax / 127) is past the
                 * f16 range: the kernel keeps it in f32 instead of inf */
                x_scale = 3e7f;
                mm_case(&h, t, 256, h.RPW, 3, 0, 2);
                x_scale = 1;
            }
            if (gi == 0 && (t == EM_T_Q4_0 || t == EM_T_Q4_K)) {
                /* past llvmpipe's loop limit unsplit: long rows (unit loop
                 * x row loop), and many 8-token tiles of short rows (the
                 * per-tile sums and writes); both fail without the row
                 * terms of em_mm_grid_y once the row loop is not unrolled */
                mm_case(&h, t, 8192 * 4, 2 * h.RPW, 160, 0, 1);
                mm_case(&h, t, 256, 2 * h.RPW, 10240, 0, 8);
                mm_case(&h, t, 256, 2 * h.RPW, 10240, 0, 16);
            }
            if (gi == 0 && t != EM_T_BF16) {
                embed_case(&h, t, bs == 256 ? 512 : 96, 37);
            }
        }
    }
    /* the token-choosing kernel: vocabularies below, at and past its 64
     * candidates and its 256 lanes, and the chat models' */
    static const uint32_t vocabs[] = { 7, 64, 300, 4099, 32000, 49152 };
    em_vk_pipe *tp = pipe_for(&h, EM_K_TOPK, 0, 0);
    for (size_t i = 0; i < sizeof vocabs / sizeof vocabs[0]; i++) {
        uint32_t bad = 0;
        char why[256];
        em_err err = { 0 };
        int rc = em_kcheck_topk(vk, tp, vocabs[i], 5, 77 + i, &bad, why, sizeof why, &err);
        CHECK_OK(rc, err);
        CHECKF(!rc && bad == 0, "topk V=%u: %u rows differ: %s", vocabs[i], bad, why);
    }
    gpu_close(vk);
    return test_summary("kernels");
}
