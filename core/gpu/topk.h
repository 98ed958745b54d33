/* topk.h — the words of shaders/topk.comp's buffers, packed and unpacked on
 * the host (topk.c): the per-row steering em_fwd_step_top sends and the
 * per-row summary it reads back. */
#ifndef EM_TOPK_H
#define EM_TOPK_H

#include <stddef.h>
#include <stdint.h>

#include "core/run/sample.h"

/* topk.comp's buffers: the words of the steer buffer for L rows with n_adj
 * adjustments in all; pack L rows' steering into w (that many words;
 * offsets from w); unpack L rows of output at o (EM_TOPK_STRIDE words
 * each) into top (its arrays point into o). */
size_t em_topk_steer_words(uint32_t L, uint64_t n_adj, uint32_t n_vocab);
void   em_topk_pack(uint32_t *w, const em_sample_steer *steer, uint32_t L, uint32_t n_vocab);
void   em_topk_unpack(const uint32_t *o, uint32_t L, em_sample_top *top);

#endif
