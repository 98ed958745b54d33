/* selftest.h — the known-answer check a server runs on its device before it
 * serves: the model's own forward pass, on the em_fwd the server will use,
 * against the CPU reference (core/run/ref.c) on fixed tokens.
 *
 * Three stages, each a path of kernels a request takes:
 *   prefill — one step of several consecutive prompt tokens (the matrix
 *             kernels over many tokens, prefill attention, every epilogue);
 *   decode  — steps of one generated token each (the single-token matrix
 *             kernels, decode attention);
 *   batch   — one step mixing two sequences: a decode of the first next to
 *             a prompt chunk of a second, through separate block tables
 *             (skipped when the em_fwd has one sequence slot or KV block).
 * Each stage's logits must be finite and within EM_SELFTEST_NMSE of the
 * reference's (NMSE over the stage's rows): a driver that miscompiles a
 * kernel lands far above it (a wrong nibble in one weight type: ~1e-1).
 * Running the stages builds and warms every pipeline those paths use, so a
 * first request no longer pays for shader compilation. Then every matrix
 * pipeline they built (one per weight type, token tile and fused epilogue
 * the model's steps use) checks alone on small random inputs against the
 * reference (core/gpu/kcheck.h), within EM_SELFTEST_KERNEL_NMSE: a failure is
 * named down to that variant; when the matrix kernels pass but a stage
 * fails, the message names the stage's other kernels (attention, RoPE,
 * embedding). The token-choosing kernel (topk.comp) checks alone too, over
 * the model's vocabulary (core/gpu/kcheck.h em_kcheck_topk).
 *
 * The check writes KV blocks 0 and 1 of the em_fwd: run it before anything
 * else (the scheduler) owns the pool. */
#ifndef EM_SELFTEST_H
#define EM_SELFTEST_H

#include <stdint.h>

#include <jansson.h>

#include "core/err.h"
#include "core/model/model.h"

typedef struct em_fwd em_fwd;   /* core/gpu/forward.h: only the run needs it */

#define EM_SELFTEST_NMSE 1e-3
#define EM_SELFTEST_KERNEL_NMSE 1e-6   /* llvmpipe: below 1e-9 (summation order) */
#define EM_SELFTEST_MAX_KERNELS 48

typedef enum { EM_SELFTEST_PREFILL, EM_SELFTEST_DECODE, EM_SELFTEST_BATCH, EM_SELFTEST_N } em_selftest_stage;

typedef struct {
    const char *name;      /* "prefill", "decode", "batch" (static) */
    const char *kernels;   /* what the stage exercises, for messages (static) */
    int         ran;       /* 0: skipped (see skipped) */
    const char *skipped;   /* why, when not run (static) */
    uint32_t    rows;      /* logit rows compared */
    double      nmse;      /* against the reference; NAN when a value was not finite */
    int         ok;
    double      device_ms; /* the stage's steps on the device, pipeline creation included */
} em_selftest_stage_result;

/* One matrix pipeline checked alone. */
typedef struct {
    char     name[64];    /* "mm_q4_k tn=8 norm_in+bias" */
    char     kernel[24];  /* "mm_q4_k" */
    char     flags[48];   /* "norm_in+bias", "none" */
    uint32_t tn;
    double   nmse;        /* NAN when a value was not finite; topk: the rows that differ */
    char     detail[160]; /* topk: how the first row differed ("" when ok) */
    int      ok;
} em_selftest_kernel_result;

typedef struct em_selftest_report {
    em_selftest_stage_result stage[EM_SELFTEST_N];
    em_selftest_kernel_result kernel[EM_SELFTEST_MAX_KERNELS];
    uint32_t n_kernels;
    double kernels_ms;    /* the kernel checks' share */
    char   others[160];   /* the non-matrix kernels the stages used ("embed_f16, rope_kv, ...") */
    int    ok;            /* every stage that ran and every kernel passed */
    double ref_ms;        /* the CPU reference's share */
    double total_ms;
    char   failure[480];  /* the first failed kernel, else stage, in words ("" when ok) */
} em_selftest_report;

/* Run the check on f (its model m; both borrowed). Returns 0 with rep
 * filled, rep->ok telling the outcome; a failure to run at all (out of
 * memory, the device lost) is the error code with err set.
 * EMBER_SELFTEST_FAULT=prefill|decode|batch (tests only) perturbs that
 * stage's device logits, as a miscompiled kernel would;
 * EMBER_SELFTEST_FAULT=<kernel name>, e.g. mm_f32, checks that matrix
 * kernel's pipelines against a reference with the bias epilogue toggled, so
 * the device's (right) output is wrong for the check; =topk counts a row of
 * the token-choosing check as differing. */
int em_selftest_run(em_fwd *f, const em_model *m, em_selftest_report *rep, em_err *err);

/* A report as JSON (a new reference; NULL when out of memory): ok,
 * limit_nmse, stages [{name, checks, ran, rows, nmse, ok, device_ms |
 * skipped}], kernel_limit_nmse, kernels [{name, nmse, ok}], other_kernels,
 * kernels_ms, reference_ms, total_ms, failure (only when not ok). What
 * `ember selftest --json` prints and /healthz shows. */
json_t *em_selftest_json(const em_selftest_report *rep);

#endif
