/* bench_sample.c — what choosing a token costs on the host, per token, for
 * the vocabularies ember serves (32000: the 155M benchmark model; 49152:
 * SmolLM2; 151936: Qwen), under the settings requests use: greedy, the
 * OpenAI API's defaults (temperature 1, no filters: a draw from the whole
 * softmax), ember run's defaults (top-k 40, top-p 0.95, min-p 0.05),
 * penalties over 512 seen tokens, and logprobs with 20 alternatives.
 * Logits are a fixed pseudo-random spread (a model's are similar in shape).
 * Prints microseconds per token; not a test. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "core/run/sample.h"

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

int main(void)
{
    static const uint32_t vocabs[] = { 32000, 49152, 151936 };
    printf("%-8s %-34s %12s\n", "vocab", "settings", "us/token");
    for (size_t vi = 0; vi < sizeof vocabs / sizeof vocabs[0]; vi++) {
        uint32_t V = vocabs[vi];
        float *lg = malloc(V * sizeof *lg);
        uint64_t x = 88172645463325252ull;
        for (uint32_t i = 0; i < V; i++) {   /* a heavy-tailed spread: a few likely, most not */
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            double u = (double)(x >> 11) / 9007199254740992.0;
            lg[i] = (float)(-8 + 20 * pow(u, 6));
        }
        for (int mode = 0; mode < 5; mode++) {
            static const char *const names[] = { "greedy", "API default (temp 1, no filter)",
                                                 "run default (k40 p.95 minp.05)", "API default + penalties",
                                                 "API default + logprobs 20" };
            em_sample_params p = em_sample_defaults();
            if (mode == 0)
                p.temp = 0;
            if (mode == 1 || mode >= 3) {
                p.temp = 1;
                p.top_k = 0;
                p.top_p = 1;
                p.min_p = 0;
            }
            if (mode == 3) {
                p.presence_penalty = 0.5f;
                p.frequency_penalty = 0.5f;
                p.repetition_penalty = 1.1f;
            }
            em_sampler *s = NULL;
            em_err err = { 0 };
            if (em_sampler_create(&p, V, &s, &err)) {
                fprintf(stderr, "%s\n", err.msg);
                return 1;
            }
            for (int i = 0; i < 512 && mode == 3; i++)
                em_sampler_accept(s, (int32_t)((i * 7919u) % V), i & 1);
            int reps = 40;
            em_sample_lp lp;
            volatile int32_t sink = 0;
            double t0 = now_us();
            for (int r = 0; r < reps; r++)
                sink += mode == 4 ? em_sampler_sample_lp(s, lg, NULL, 20, &lp) : em_sampler_sample(s, lg);
            double us = (now_us() - t0) / reps;
            (void)sink;
            printf("%-8u %-34s %12.1f\n", V, names[mode], us);
            em_sampler_destroy(s);
        }
        free(lg);
    }
    return 0;
}
