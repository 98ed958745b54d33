/* selftest.h — the known-answer check a server runs on its device before it
 * serves: the model's own forward pass, on the em_fwd the server will use,
 * against the CPU reference (core/ref.c) on fixed tokens.
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
 * first request no longer pays for shader compilation.
 *
 * The check writes KV blocks 0 and 1 of the em_fwd: run it before anything
 * else (the scheduler) owns the pool. */
#ifndef EM_SELFTEST_H
#define EM_SELFTEST_H

#include <stdint.h>

#include "core/err.h"
#include "core/forward.h"
#include "core/model.h"

#define EM_SELFTEST_NMSE 1e-3

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

typedef struct em_selftest_report {
    em_selftest_stage_result stage[EM_SELFTEST_N];
    int    ok;            /* every stage that ran passed */
    double ref_ms;        /* the CPU reference's share */
    double total_ms;
    char   failure[320];  /* the first failed stage, in words ("" when ok) */
} em_selftest_report;

/* Run the check on f (its model m; both borrowed). Returns 0 with rep
 * filled, rep->ok telling the outcome; a failure to run at all (out of
 * memory, the device lost) is the error code with err set.
 * EMBER_SELFTEST_FAULT=prefill|decode|batch (tests only) perturbs that
 * stage's device logits, as a miscompiled kernel would. */
int em_selftest_run(em_fwd *f, const em_model *m, em_selftest_report *rep, em_err *err);

#endif
