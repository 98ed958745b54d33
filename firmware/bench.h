/* bench.h — the parts of `ember bench` that live in their own files
 * (bench_load.c: concurrent users through the scheduler). */
#ifndef EM_BENCH_H
#define EM_BENCH_H

#include <stdint.h>

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

#endif
