/* sample.h — choose the next token from logits: greedy, or temperature with
 * top-k / top-p / min-p filtering, driven by a seeded PRNG so that a run is
 * reproducible from its seed. One em_sampler per sequence; not thread-safe. */
#ifndef EM_SAMPLE_H
#define EM_SAMPLE_H

#include <stdint.h>

#include "core/err.h"

typedef struct {
    float    temp;     /* 0: greedy (argmax, lowest id on ties) */
    int32_t  top_k;    /* keep the k most likely; 0 = off */
    float    top_p;    /* keep the smallest set with cumulative p >= top_p; 1 = off */
    float    min_p;    /* drop tokens with p < min_p * p_max; 0 = off */
    uint64_t seed;
} em_sample_params;

/* Defaults: temp 0.8, top_k 40, top_p 0.95, min_p 0.05, seed 0. */
em_sample_params em_sample_defaults(void);

typedef struct em_sampler em_sampler;

/* EM_EINVAL for out-of-range parameters (temp < 0, top_p not in (0,1], ...). */
int  em_sampler_create(const em_sample_params *p, uint32_t n_vocab, em_sampler **out, em_err *err);
void em_sampler_destroy(em_sampler *s);   /* accepts NULL */

/* Pick a token from logits[n_vocab] (borrowed, not modified). Always an id
 * in [0, n_vocab), even for NaN or infinite logits (callers that can say
 * why should refuse those first). */
int32_t em_sampler_sample(em_sampler *s, const float *logits);

/* Index of the largest value (lowest index on ties). */
int32_t em_argmax(const float *v, uint32_t n);

#endif
