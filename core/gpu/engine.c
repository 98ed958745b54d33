/* engine.c — single-sequence front door over the CPU reference (core/run/ref.c)
 * and, when built in, the GPU forward pass. */
#include "core/gpu/engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/gpu/forward.h"
#include "core/gpu/kparams.h"
#include "core/gpu/variants.h"
#include "core/run/encode.h"
#include "core/run/ref.h"
#include "core/vk/vk.h"

struct em_engine {
    const em_model *m;
    em_backend      backend;
    uint32_t        n_ctx;
    em_ref         *ref;
    em_vk          *vk;
    em_fwd         *fwd;
    int32_t        *table;      /* [n_ctx / EM_KV_BLOCK]: block i holds positions 16i.. */
    int32_t        *scratch;    /* pos/seq/rows for a step */
    uint32_t        chunk;      /* tokens per GPU step */
    uint32_t        max_logits; /* logit rows per GPU step (a large vocabulary's rows fill a binding sooner) */
    uint32_t        n_fed;      /* positions holding valid KV */
    char            desc[256];
};

int em_backend_parse(const char *s, em_backend *out, em_err *err)
{
    if (strcmp(s, "vulkan") == 0)
        *out = EM_BACKEND_VULKAN;
    else if (strcmp(s, "cpu") == 0)
        *out = EM_BACKEND_CPU;
    else
        return em_err_set(err, EM_EINVAL, "--backend: '%s' is not a backend (vulkan, cpu)", s);
    return 0;
}

static int create_gpu(em_engine *e, const em_engine_opts *opts, em_err *err)
{
    em_vk_opts vo = EM_VK_OPTS_INIT;
    /* on a CPU "GPU" (llvmpipe) a tiny model's dispatches are too small to
     * pay for handing them to worker threads: run them on this thread
     * (measured: stories260K decode 280 -> 660 tokens/s) */
    if (em_model_weight_bytes(e->m) < EM_FWD_TINY_BYTES)
        vo.cpu_threads = 0;
    int rc = em_vk_create(&vo, &e->vk, err);
    if (rc)
        return rc;
    uint32_t nb = (e->n_ctx + EM_KV_BLOCK - 1) / EM_KV_BLOCK;
    e->chunk = opts && opts->chunk ? opts->chunk : 512;
    if (e->chunk > e->n_ctx)
        e->chunk = e->n_ctx;
    em_fwd_opts fo = { .max_tokens = e->chunk, .max_seqs = 1, .max_ctx = e->n_ctx,
                       .n_blocks = nb, .max_logits = e->chunk, .profile = opts && opts->profile,
                       .kv_type = opts ? opts->kv_type : EM_KV_F16 };
    e->table = malloc(nb * sizeof *e->table);
    e->scratch = malloc(3 * (size_t)e->chunk * sizeof *e->scratch);
    if (!e->table || !e->scratch)
        return em_err_set(err, EM_ENOMEM, "engine: out of memory");
    for (uint32_t i = 0; i < nb; i++)
        e->table[i] = (int32_t)i;
    if ((rc = em_fwd_create(e->vk, e->m, &fo, &e->fwd, err)))
        return rc;
    e->max_logits = em_fwd_get_opts(e->fwd)->max_logits;
    const em_vk_dev_info *di = em_vk_info(e->vk);
    snprintf(e->desc, sizeof e->desc, "vulkan: %s (%s), %s", di->name, di->type_name,
             em_fwd_variant(e->fwd));
    return 0;
}

int em_engine_create(const em_model *m, em_backend backend, uint32_t n_ctx,
                     const em_engine_opts *opts, em_engine **out, em_err *err)
{
    *out = NULL;
    if (n_ctx == 0)
        return em_err_set(err, EM_EINVAL, "engine: context length must be positive");
    const em_hparams *hp = em_model_hparams(m);
    if (hp->encoder && n_ctx > hp->n_pos)
        return em_err_set(err, EM_ERANGE, "engine: %u positions; this %s encoder has %u", n_ctx, hp->arch_name,
                          hp->n_pos);
    em_engine *e = calloc(1, sizeof *e);
    if (!e)
        return em_err_set(err, EM_ENOMEM, "engine: out of memory");
    e->m = m;
    e->backend = backend;
    e->n_ctx = n_ctx;
    int rc;
    if (backend == EM_BACKEND_CPU) {
        /* (an encoder's reference is core/run/encode.c, a whole sequence
         * at a time: em_engine_embed calls it) */
        rc = hp->encoder ? 0 : em_ref_create(m, n_ctx, &e->ref, err);
        snprintf(e->desc, sizeof e->desc, "cpu reference");
    } else {
        rc = create_gpu(e, opts, err);
    }
    if (rc) {
        em_engine_destroy(e);
        return rc;
    }
    *out = e;
    return 0;
}

void em_engine_destroy(em_engine *e)
{
    if (!e)
        return;
    em_ref_destroy(e->ref);
    em_fwd_destroy(e->fwd);
    em_vk_destroy(e->vk);
    free(e->table);
    free(e->scratch);
    free(e);
}

int em_engine_eval(em_engine *e, const int32_t *tokens, uint32_t n, uint32_t pos,
                   float *logits, int all_logits, em_err *err)
{
    uint32_t V = em_model_hparams(e->m)->n_vocab;
    if (em_model_hparams(e->m)->encoder)
        return em_err_set(err, EM_EUNSUPPORTED, "this %s model is an encoder: it gives vectors (ember embed), not "
                          "text", em_model_hparams(e->m)->arch_name);
    if (n == 0)
        return 0;
    if ((uint64_t)pos + n > e->n_ctx)
        return em_err_set(err, EM_ERANGE, "%u tokens at position %u do not fit the %u-token context",
                          n, pos, e->n_ctx);
    if (e->ref) {
        for (uint32_t i = 0; i < n; i++) {
            float *out = NULL;
            if (logits)
                out = all_logits ? logits + (size_t)i * V : (i == n - 1 ? logits : NULL);
            int rc = em_ref_forward(e->ref, tokens[i], pos + i, out, err);
            if (rc)
                return rc;
        }
        return 0;
    }
    if (pos > e->n_fed)
        return em_err_set(err, EM_ERANGE, "position %u is past the %u tokens fed so far", pos, e->n_fed);
    /* GPU: chunks of up to e->chunk tokens, one step each */
    int32_t *ps = e->scratch, *ss = ps + e->chunk, *rows = ss + e->chunk;
    const int32_t *tables[1] = { e->table };
    uint32_t step_max = logits && all_logits && e->max_logits < e->chunk ? e->max_logits : e->chunk;
    for (uint32_t i = 0; i < n; i += step_max) {
        uint32_t k = n - i < step_max ? n - i : step_max;
        int last = i + k == n;
        uint32_t nl = !logits ? 0 : all_logits ? k : (last ? 1 : 0);
        for (uint32_t j = 0; j < k; j++) {
            ps[j] = (int32_t)(pos + i + j);
            ss[j] = 0;
            rows[j] = all_logits ? (int32_t)j : (int32_t)(k - 1);
        }
        em_fwd_batch b = { k, tokens + i, ps, ss, nl, rows, tables, NULL, NULL, NULL, 0, NULL };
        float *out = nl ? (all_logits ? logits + (size_t)i * V : logits) : NULL;
        int rc = em_fwd_step(e->fwd, &b, out, err);
        if (rc)
            return rc;
        e->n_fed = pos + i + k;
    }
    return 0;
}

/* The GPU's embedding: steps of up to e->chunk tokens (an encoder's
 * sequence in one), each pooling the rows the mode needs of it
 * (em_pool_rows); the mean's sums added up and divided. */
static int embed_gpu(em_engine *e, const int32_t *ids, uint32_t n, em_pooling mode, float *out, em_err *err)
{
    const em_hparams *hp = em_model_hparams(e->m);
    if (hp->encoder && n > e->chunk)
        return em_err_set(err, EM_ERANGE, "%u tokens; this engine takes %u at once", n, e->chunk);
    int32_t *ps = e->scratch, *ss = ps + e->chunk;
    const int32_t *tables[1] = { e->table };
    memset(out, 0, hp->n_embd * sizeof *out);
    for (uint32_t i = 0; i < n; i += e->chunk) {
        uint32_t k = n - i < e->chunk ? n - i : e->chunk, first;
        for (uint32_t j = 0; j < k; j++) {
            ps[j] = (int32_t)(i + j);
            ss[j] = 0;
        }
        uint32_t rows = em_pool_rows(mode, i, k, n, &first);
        int32_t span[2] = { (int32_t)first, (int32_t)rows };
        em_fwd_batch b = { k, ids + i, ps, ss, 0, NULL, tables, NULL, NULL, NULL, rows ? 1 : 0, span };
        int rc = em_fwd_step(e->fwd, &b, NULL, err);
        if (rc)
            return rc;
        for (uint32_t d = 0; rows && d < hp->n_embd; d++)
            out[d] += em_fwd_pooled_row(e->fwd, 0)[d];
        e->n_fed = i + k;
    }
    for (uint32_t d = 0; mode == EM_POOL_MEAN && d < hp->n_embd; d++)
        out[d] /= (float)n;
    return 0;
}

int em_engine_embed(em_engine *e, const int32_t *ids, uint32_t n, em_pooling mode, int normalize, float *out,
                    em_err *err)
{
    const em_hparams *hp = em_model_hparams(e->m);
    int rc = em_pool_resolve(hp, &mode, err);
    if (rc)
        return rc;
    if (n == 0 || n > e->n_ctx)
        return em_err_set(err, EM_ERANGE, "embed: %u tokens; this engine takes 1 to %u", n, e->n_ctx);
    if (!e->fwd)
        return em_ref_embed(e->m, ids, n, mode, normalize, out, err);
    if (!(rc = embed_gpu(e, ids, n, mode, out, err)) && normalize)
        em_l2_normalize(out, hp->n_embd);
    return rc;
}

int em_engine_check(const em_engine *e, em_err *err)
{
    uint32_t n = e->vk ? em_vk_validation_errors(e->vk) : 0;
    if (n)
        return em_err_set(err, EM_EDEVICE, "vulkan: the validation layer reported %u error(s)", n);
    return 0;
}

struct em_fwd *em_engine_fwd(const em_engine *e) { return e->fwd; }
struct em_vk *em_engine_vk(const em_engine *e) { return e->vk; }

uint32_t em_engine_n_ctx(const em_engine *e) { return e->n_ctx; }
em_backend em_engine_backend(const em_engine *e) { return e->backend; }
const char *em_engine_describe(const em_engine *e) { return e->desc; }
