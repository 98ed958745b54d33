/* topk.c — the host side of shaders/topk.comp: packing each logit row's
 * steering (temperature, penalties, biases, the grammar mask) into the words
 * the kernel reads, and unpacking the summary it writes (max, argmax, sums,
 * the EM_SAMPLE_TOPK largest) into em_sample_top. */
#include "core/gpu/topk.h"

#include <string.h>

#include "core/gpu/kparams.h"

size_t em_topk_steer_words(uint32_t L, uint64_t n_adj, uint32_t n_vocab)
{
    return (size_t)L * (4 + ((size_t)n_vocab + 31) / 32) + 3 * (size_t)n_adj;
}

void em_topk_pack(uint32_t *w, const em_sample_steer *steer, uint32_t L, uint32_t n_vocab)
{
    uint32_t words = (n_vocab + 31) / 32, at = 4 * L;
    for (uint32_t i = 0; i < L; i++) {
        const em_sample_steer *st = &steer[i];
        memcpy(&w[4 * i], &st->temp, 4);
        w[4 * i + 1] = st->n_adj;
        w[4 * i + 2] = at;
        for (uint32_t k = 0; k < st->n_adj; k++) {
            w[at + 3 * k] = (uint32_t)st->adj[k].id;
            memcpy(&w[at + 3 * k + 1], &st->adj[k].rep, 4);
            memcpy(&w[at + 3 * k + 2], &st->adj[k].sub, 4);
        }
        at += 3 * st->n_adj;
        if (st->allow) {
            w[4 * i + 3] = at;
            memcpy(&w[at], st->allow, words * 4);
            at += words;
        } else {
            w[4 * i + 3] = 0xffffffffu;
        }
    }
}

void em_topk_unpack(const uint32_t *o, uint32_t L, em_sample_top *top)
{
    for (uint32_t i = 0; i < L; i++, o += EM_TOPK_STRIDE) {
        em_sample_top *t = &top[i];
        memcpy(&t->max, &o[0], 4);
        t->argmax = (int32_t)o[1];
        memcpy(&t->sum1, &o[2], 4);
        memcpy(&t->sum_t, &o[3], 4);
        t->n = o[4] <= EM_SAMPLE_TOPK ? o[4] : 0;
        t->id = (const int32_t *)(o + EM_TOPK_HEAD);
        t->val = (const float *)(o + EM_TOPK_HEAD + EM_SAMPLE_TOPK);
    }
}

/* The rows' steering into the steer buffer. */
