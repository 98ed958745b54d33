/* engine.h — one sequence on one backend: the simple front door used by the
 * CLI tools (`ember run`, `logits`, `bench`, `perplexity`, `embed`). It feeds
 * tokens at positions and returns logits, or a sequence's embedding, on the
 * CPU reference or on the GPU.
 * (The server's scheduler drives the batched GPU forward pass directly.) */
#ifndef EM_ENGINE_H
#define EM_ENGINE_H

#include <stdint.h>

#include "core/err.h"
#include "core/model/model.h"

typedef enum { EM_BACKEND_VULKAN, EM_BACKEND_CPU } em_backend;

/* Parse "vulkan" / "cpu"; EM_EINVAL otherwise. */
int em_backend_parse(const char *s, em_backend *out, em_err *err);

typedef struct em_engine em_engine;

typedef struct {
    uint32_t chunk;     /* tokens per GPU step (prefill chunk); 0: min(n_ctx, 512) */
    int      profile;   /* time every GPU dispatch (see em_fwd_profile) */
    uint32_t kv_type;   /* em_kv_type (core/gpu/kparams.h): EM_KV_F16 (0) or EM_KV_Q8_0 */
} em_engine_opts;

/* A sequence of up to n_ctx tokens over m (borrowed; must outlive the engine).
 * opts may be NULL (defaults). */
int  em_engine_create(const em_model *m, em_backend backend, uint32_t n_ctx,
                      const em_engine_opts *opts, em_engine **out, em_err *err);
void em_engine_destroy(em_engine *e);   /* accepts NULL */

/* Feed tokens[0..n) at positions pos..pos+n-1 (pos <= tokens fed so far;
 * an earlier pos rewinds). logits: when all_logits, [n][n_vocab] for every
 * position, else [n_vocab] for the last one; NULL for none. EM_ERANGE for a
 * token id or position out of range. */
int em_engine_eval(em_engine *e, const int32_t *tokens, uint32_t n, uint32_t pos,
                   float *logits, int all_logits, em_err *err);

/* The embedding of ids[0..n) (positions 0..n-1, from scratch: whatever was
 * fed before is overwritten) into out[n_embd], the caller's: the final
 * hidden states (an encoder's; a decoder's normed by output_norm) pooled
 * by mode (EM_POOL_NONE: the model's own pooling, else the mean; RANK is
 * refused) and scaled to unit length when normalize. The CPU backend is
 * em_ref_embed (core/run/encode.h). The engine's only use of an encoder
 * (em_engine_eval refuses one); on the GPU an encoder's n fits one step
 * (the engine's chunk). EM_ERANGE for n of 0 or past n_ctx. */
int em_engine_embed(em_engine *e, const int32_t *ids, uint32_t n, em_pooling mode, int normalize, float *out,
                    em_err *err);

/* EM_EDEVICE when the Vulkan validation layer (EMBER_VK_VALIDATE=1) has
 * reported errors so far; 0 otherwise (and always for the CPU backend).
 * Tools call it before they exit so that validation failures fail them. */
int em_engine_check(const em_engine *e, em_err *err);

/* The GPU objects behind a vulkan engine (NULL for the CPU backend), for
 * statistics and benchmarks. Borrowed: valid until em_engine_destroy. */
struct em_fwd;
struct em_vk;
struct em_fwd *em_engine_fwd(const em_engine *e);
struct em_vk  *em_engine_vk(const em_engine *e);

uint32_t    em_engine_n_ctx(const em_engine *e);
em_backend  em_engine_backend(const em_engine *e);
/* One line describing the backend and device ("cpu reference", "vulkan: llvmpipe ..."). */
const char *em_engine_describe(const em_engine *e);

#endif
