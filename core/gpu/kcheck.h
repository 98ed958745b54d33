/* kcheck.h — known-answer checks of one kernel on small random inputs
 * against core/run/ref.c: the matrix kernel (shaders/mm.comp) for a weight type,
 * a token tile and a set of fused epilogues. The boot self-test
 * (core/gpu/selftest.h) runs one for every matrix pipeline the model's steps
 * built, so that a driver bug is named down to the kernel variant;
 * tests/gpu/test_kernels.c runs many over awkward shapes. */
#ifndef EM_KCHECK_H
#define EM_KCHECK_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "core/run/sample.h"
#include "core/vk/vk.h"

typedef struct {
    uint32_t src_type;   /* weight type of the random rows (EM_T_*); packed as em_wpack does */
    uint32_t K, N, T;    /* row length, rows, tokens */
    uint32_t flags;      /* EM_MM_* epilogues (core/gpu/kparams.h) */
    uint32_t tn;         /* tokens per pass (the pipeline's spec constant 2) */
    float    x_scale;    /* magnitude of the random activations (1 when 0) */
    uint64_t seed;       /* of the random weights and activations */
} em_kcheck_mm_case;

/* Run case c on the device through pipe, a pipeline of
 * em_fwd_mm_kernel(packed type) built with spec constants (lanes, rpw,
 * c->tn, c->flags) (borrowed), and compare the output rows with the CPU
 * reference. Returns 0 with *nmse set (NAN when the device wrote a value
 * that is not finite); an error code with err set when the case cannot run
 * (layout, out of memory, the device failing). Random weights have sane
 * scales; K must suit the type's block size. A converted type (packed as
 * F16) differs from the reference by f16 rounding (NMSE ~1e-7); the
 * native types by summation order (below 1e-9 on llvmpipe). */
int em_kcheck_mm(em_vk *vk, em_vk_pipe *pipe, uint32_t lanes, uint32_t rpw, const em_kcheck_mm_case *c,
                 double *nmse, em_err *err);

/* Rows of a V x E embedding table of src_type, gathered by the embedding
 * kernel through pipe (em_fwd_embed_kernel(packed type), spec constants
 * (rpw, the layout's blocks per chunk); borrowed), against em_dequant_row:
 * *nmse is the worst row's (NAN for a value not finite). Errors as
 * em_kcheck_mm. */
int em_kcheck_embed(em_vk *vk, em_vk_pipe *pipe, uint32_t lanes, uint32_t rpw, uint32_t src_type,
                    uint32_t E, uint32_t V, uint64_t seed, double *nmse, em_err *err);

/* The token-choosing kernel (shaders/topk.comp) through pipe (borrowed) on
 * L rows of V random logits with exact ties, steered by random adjustments
 * (a ban among them), a mask on every other row, greedy and sampled
 * temperatures, against the same on the CPU. Returns 0 with *bad the rows
 * whose maximum, argmax, sums (relative 1e-4) or candidates (the set of
 * ids, and their values) differ, why (cap bytes) saying how the first did;
 * an error code with err set when the check cannot run. */
int em_kcheck_topk(em_vk *vk, em_vk_pipe *pipe, uint32_t V, uint32_t L, uint64_t seed, uint32_t *bad, char *why,
                   size_t cap, em_err *err);

/* topk.comp on the CPU, the reference: steer row (V values) in place as
 * the kernel does; summarise a steered row into t (ids: EM_SAMPLE_TOPK
 * entries, t->id points at it and t->val is NULL; scratch: 8 * V bytes). */
void em_topk_steer_ref(float *row, uint32_t V, const em_sample_steer *st);
void em_topk_ref(const float *row, uint32_t V, float temp, em_sample_top *t, int32_t *ids, void *scratch);

/* NMSE of a against the reference b over n values (both borrowed): the sum
 * of squared differences over the sum of squares of b; NAN when a holds a
 * value that is not finite. */
double em_kcheck_nmse(const float *a, const float *b, size_t n);

/* The EM_MM_* flags in words ("norm_in+bias", "none" for 0), written into
 * buf (cap bytes, 48 hold every combination); returns buf. */
const char *em_kcheck_flags_name(uint32_t flags, char *buf, size_t cap);

#endif
