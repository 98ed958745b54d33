/* backend_gpu.c — the scheduler's backend over the GPU forward pass
 * (core/gpu/forward.c): a step is em_fwd_step_top (tokens chosen from what the
 * device summarises of each row; em_fwd_step where asked for whole rows),
 * copy on write is em_fwd_copy_blocks, pooled rows em_fwd_pooled_row. EMBER_TEST_HANG_STEP=N (tests only) makes the N-th
 * step hang for good, a stuck device for the watchdog's test. */
#include <stdlib.h>
#include <unistd.h>

#include "core/gpu/forward.h"
#include "scheduler/scheduler.h"

typedef struct {
    em_fwd  *f;
    int32_t *src, *dst;
    uint32_t cap;
    unsigned long steps, hang_at;   /* EMBER_TEST_HANG_STEP: the step that never returns; 0: none */
    int (*rebuild)(void *arg, em_fwd **f, em_err *err);   /* em_sched_backend_gpu_recovery */
    void *rebuild_arg;
} gpu_ctx;

static int gpu_copy(void *ctx, const em_kv_copy *copies, uint32_t n, em_err *err)
{
    gpu_ctx *g = ctx;
    if (n > g->cap) {
        int32_t *ns = realloc(g->src, n * sizeof *ns), *nd = NULL;
        if (ns)
            g->src = ns;
        if (ns && (nd = realloc(g->dst, n * sizeof *nd)))
            g->dst = nd;
        if (!ns || !nd)
            return em_err_set(err, EM_ENOMEM, "scheduler: out of memory");
        g->cap = n;
    }
    if (!g->f)
        return em_err_set(err, EM_EDEVICE, "the device could not be rebuilt after it failed");
    int rc = 0;
    for (uint32_t pool = 0; pool < 2 && !rc; pool++) {   /* the main pool's copies, the window pool's */
        uint32_t m = 0;
        for (uint32_t i = 0; i < n; i++)
            if (copies[i].pool == pool) {
                g->src[m] = copies[i].src;
                g->dst[m++] = copies[i].dst;
            }
        if (m)
            rc = em_fwd_copy_blocks(g->f, pool, g->src, g->dst, m, err);
    }
    return rc;
}

/* What every step does first: the test hang, a device that is gone, the batch. */
static int begin_step(gpu_ctx *g, const em_sched_batch *b, em_fwd_batch *fb, em_err *err)
{
    if (g->hang_at && ++g->steps == g->hang_at)
        for (;;)
            pause();   /* a signal handler runs and the step stays stuck */
    if (!g->f)
        return em_err_set(err, EM_EDEVICE, "the device could not be rebuilt after it failed");
    *fb = (em_fwd_batch){ .n_tokens = b->n_tokens, .tokens = b->tokens, .pos = b->pos, .seq = b->seq,
                          .n_logits = b->n_logits, .logit_rows = b->logit_rows, .tables = b->tables,
                          .decode = b->decode, .tables_window = b->tables_window, .types = b->types,
                          .n_pool = b->n_pool, .pool = b->pool };
    return 0;
}

static int gpu_step(void *ctx, const em_sched_batch *b, float *logits, em_err *err)
{
    em_fwd_batch fb;
    int rc = begin_step(ctx, b, &fb, err);
    return rc ? rc : em_fwd_step(((gpu_ctx *)ctx)->f, &fb, logits, err);
}

static int gpu_step_top(void *ctx, const em_sched_batch *b, const em_sample_steer *steer, em_sample_top *top,
                        em_err *err)
{
    em_fwd_batch fb;
    int rc = begin_step(ctx, b, &fb, err);
    return rc ? rc : em_fwd_step_top(((gpu_ctx *)ctx)->f, &fb, steer, top, err);
}

static const float *gpu_row(void *ctx, uint32_t i)
{
    gpu_ctx *g = ctx;
    return em_fwd_logits_row(g->f, i);
}

static const float *gpu_pooled(void *ctx, uint32_t i)
{
    gpu_ctx *g = ctx;
    return g->f ? em_fwd_pooled_row(g->f, i) : NULL;
}

static int gpu_recover(void *ctx, em_err *err)
{
    gpu_ctx *g = ctx;
    em_fwd *f = g->f;
    int rc = g->rebuild(g->rebuild_arg, &f, err);
    g->f = f;
    if (!rc && !f)
        rc = em_err_set(err, EM_EDEVICE, "scheduler: the rebuilt device has no forward pass");
    return rc;
}

void em_sched_backend_gpu_recovery(em_sched_backend *be, int (*rebuild)(void *arg, struct em_fwd **f, em_err *err),
                                   void *arg)
{
    gpu_ctx *g = be->ctx;
    if (!g)
        return;
    g->rebuild = rebuild;
    g->rebuild_arg = arg;
    be->recover = rebuild ? gpu_recover : NULL;
}

static void gpu_destroy(void *ctx)
{
    gpu_ctx *g = ctx;
    if (!g)
        return;
    free(g->src);
    free(g->dst);
    free(g);
}

void em_sched_backend_gpu(struct em_fwd *f, struct em_vk *vk, uint32_t n_vocab, uint32_t max_tokens,
                          uint32_t max_logits, uint32_t max_seqs, uint32_t max_ctx,
                          uint32_t n_blocks, em_sched_backend *out)
{
    (void)vk;
    /* the forward pass may hold fewer logit rows than asked (a large
     * vocabulary's rows fill one binding sooner): the planner keeps to them */
    uint32_t fl = em_fwd_get_opts(f)->max_logits;
    if (max_logits > fl)
        max_logits = fl;
    gpu_ctx *g = calloc(1, sizeof *g);
    const char *hang = getenv("EMBER_TEST_HANG_STEP");
    if (g) {
        g->f = f;
        g->hang_at = hang ? strtoul(hang, NULL, 10) : 0;
    }
    *out = (em_sched_backend){
        .ctx = g, .n_vocab = n_vocab, .max_tokens = max_tokens, .max_logits = max_logits,
        .max_seqs = max_seqs, .max_ctx = max_ctx, .n_blocks = n_blocks,
        .window = em_fwd_window(f),
        .n_blocks_window = em_fwd_get_opts(f)->n_blocks_window,
        .copy = gpu_copy, .step = gpu_step, .destroy = gpu_destroy,
        .step_top = gpu_step_top, .row = gpu_row, .max_adj = max_logits * EM_FWD_STEER_ADJ,
        .pooled = gpu_pooled, .n_embd = em_fwd_hparams(f)->n_embd, .encoder = em_fwd_hparams(f)->encoder,
    };
}
