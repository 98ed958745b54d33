/* engine.c — single-sequence front door over the CPU reference (core/ref.c)
 * and, when built in, the GPU forward pass. */
#include "core/engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ref.h"

struct em_engine {
    const em_model *m;
    em_backend      backend;
    uint32_t        n_ctx;
    em_ref         *ref;
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

int em_engine_create(const em_model *m, em_backend backend, uint32_t n_ctx,
                     em_engine **out, em_err *err)
{
    *out = NULL;
    if (backend != EM_BACKEND_CPU)
        return em_err_set(err, EM_EUNSUPPORTED, "backend: vulkan is not built yet; use --backend cpu");
    em_engine *e = calloc(1, sizeof *e);
    if (!e)
        return em_err_set(err, EM_ENOMEM, "engine: out of memory");
    e->m = m;
    e->backend = backend;
    e->n_ctx = n_ctx;
    int rc = em_ref_create(m, n_ctx, &e->ref, err);
    if (rc) {
        free(e);
        return rc;
    }
    snprintf(e->desc, sizeof e->desc, "cpu reference");
    *out = e;
    return 0;
}

void em_engine_destroy(em_engine *e)
{
    if (!e)
        return;
    em_ref_destroy(e->ref);
    free(e);
}

int em_engine_eval(em_engine *e, const int32_t *tokens, uint32_t n, uint32_t pos,
                   float *logits, int all_logits, em_err *err)
{
    uint32_t V = em_model_hparams(e->m)->n_vocab;
    if (n == 0)
        return 0;
    if ((uint64_t)pos + n > e->n_ctx)
        return em_err_set(err, EM_ERANGE, "%u tokens at position %u do not fit the %u-token context",
                          n, pos, e->n_ctx);
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

uint32_t em_engine_n_ctx(const em_engine *e) { return e->n_ctx; }
em_backend em_engine_backend(const em_engine *e) { return e->backend; }
const char *em_engine_describe(const em_engine *e) { return e->desc; }
