/* bench.h — the parts of `ember bench` that live in their own files
 * (bench_load.c: concurrent users through the scheduler; bench_embed.c: an
 * encoder's embeddings per second). */
#ifndef EM_BENCH_H
#define EM_BENCH_H

#include <stdint.h>

#include "core/model/model.h"
#include "scheduler/scheduler.h"

typedef struct {
    uint32_t levels[16];          /* interactive user counts */
    uint32_t n_levels;
    uint32_t background;          /* saturating background users at every level */
    uint32_t prompt_tokens, gen_tokens;
    uint32_t requests_per_user;
    uint32_t n_vocab;
    uint32_t prefix_tokens;       /* prompt length of the prefix-cache measurement; 0: skip */
    double   gpu_cost_per_hour;   /* negative: not given (no cost printed) */
    double   slo_tpot_ms;         /* negative: no SLO */
    double   temp;                /* the requests' temperature: 0 greedy; else no top-k/p, min-p */
} em_bench_load_opts;

/* Run the levels on s (borrowed) and print a table (or JSON). Returns 0 or
 * an EM_E* code when requests failed. */
int em_bench_load(em_sched *s, const em_bench_load_opts *o, int json);

/* An encoder m (borrowed): embeddings per second on the GPU at each batch
 * size of batches[n_batches] (inputs of `tokens` tokens, one step each),
 * printed as a table (or one JSON line; profile: GPU time per kernel). 0, or the exit status (the
 * error printed). */
int em_bench_embed(const em_model *m, const uint32_t *batches, uint32_t n_batches, uint32_t tokens, int profile,
                   int json);

#endif
