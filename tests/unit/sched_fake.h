/* sched_fake.h — the fake world of the scheduler's tests (test_sched.c,
 * test_sched_embed.c; no GPU), built by sched_fake.c.
 *
 * The fake model keeps its own KV memory: a step writes each token id into
 * the block slot its position maps to through the sequence's block table,
 * and the "next token" of a sequence is a hash (fake_mix) of the ids it
 * reads back, in order, through that table; a row's hidden state (pooled
 * for embeddings) is fake_hidden of such a hash. So a wrong table, a bad
 * prefix match, a missed copy on write or a lost recompute after preemption
 * all change the output, which must equal the same request computed alone
 * (fake_alone). */
#ifndef EM_SCHED_FAKE_H
#define EM_SCHED_FAKE_H

#include <pthread.h>
#include <stdint.h>

#include "core/text/tokenizer.h"
#include "scheduler/scheduler.h"

#define FAKE_V 300      /* vocabulary: <unk> <s> </s>, 256 bytes, 41 words */
#define FAKE_EOS 2      /* </s> */
#define FAKE_FE 8       /* the fake model's hidden width (embeddings) */

/* The fake model and its settings (a test sets them before the scheduler runs). */
typedef struct {
    uint32_t n_blocks, max_seqs, max_ctx, max_tokens;
    int32_t *mem;                 /* [n_blocks][16] token ids written by steps */
    pthread_mutex_t gate_mu;
    pthread_cond_t gate_cv;
    int gate_closed;              /* steps wait while set */
    unsigned delay_us;            /* per step: lets tests act while requests run */
    unsigned row_us;              /* and per row of the batch: a step's cost grows with it */
    uint64_t steps;
    uint32_t max_batch_seen;
    /* prompt rows per step, told apart by their ids: bytes (< 259) or words */
    uint32_t max_byte_prompt_late;   /* most byte-id prompt rows in a step after the 4th */
    uint32_t mixed_steps;            /* steps with prompt rows of both kinds */
    uint32_t word_prompt_steps;      /* steps with word-id prompt rows */
    uint32_t word_prompt_dec_steps;  /* of those, steps with decode rows too */
    /* choosing on the "device" (step_top): the rows, their summaries (core/gpu/kcheck.c's reference) */
    float   *rows;
    int32_t  ids[8][EM_SAMPLE_TOPK];
    void    *scratch;
    uint64_t top_steps, plain_steps;
    int      local;               /* the next token depends on the last one only (repetitive text) */
    int      wrong;               /* a draft model: wrong at every third position */
    uint64_t fail_at;             /* the step (from 1) that fails with EM_EDEVICE; 0: none */
    int      rebuilds_to_fail;    /* recover: fail this many times first */
    int      recover_calls;
    uint64_t steps_at_down;       /* steps when a rebuild last failed */
    /* embeddings: pooled rows of the last step ([max_seqs][FAKE_FE]); an
     * encoder checks its batch rules (a broken one fails the step) */
    float   *pooled;
    int      encoder;
    uint64_t pooled_rows;         /* rows summed into pooled rows, all steps */
    uint32_t pool_steps_max;      /* most spans in one step */
    uint64_t close_after;         /* the gate closes itself once this many steps ran (0: never) */
} fake;

/* One request of a test: its prompt and what came back. */
typedef struct {
    em_request *r;
    int32_t     prompt[400];
    uint32_t    n_prompt, max_tokens;
    int32_t     got[400];
    uint32_t    n_got;
    int         done;
    em_finish   finish;
    char        why[300];   /* a failure's error text */
    em_req_metrics m;
    /* an embed request: its pooling and types (NULL: none), the vector DONE carried */
    em_pooling  pool;
    uint8_t    *types;
    float       emb[FAKE_FE];
    uint32_t    n_emb;
} job;

/* ---- the vocabulary and a test's main ---- */

/* A test's main: each of tests[n] in order on the fake's SPM vocabulary of
 * FAKE_V tokens (built in memory, freed after), then test_summary(name). */
int sched_run(const char *name, void (*const *tests)(em_tokenizer *tok), size_t n);

/* ---- the fake model ---- */

/* The fake's hash: h with token (or position, type) t mixed in. */
uint64_t fake_mix(uint64_t h, int32_t t);
/* A hidden state out[FAKE_FE] from a hash. */
void fake_hidden(uint64_t h, float *out);
/* A fake model and its backend in *be (the caller's: fake_free, after which be is dead). */
fake *fake_new(uint32_t n_blocks, uint32_t max_seqs, uint32_t max_ctx, uint32_t max_tokens,
               em_sched_backend *be);
/* Give f and *be the device's choosing: at most max_adj adjustments a step. */
void fake_with_top(fake *f, em_sched_backend *be, uint32_t max_adj);
/* Free f and all it holds (not NULL). */
void fake_free(fake *f);
/* Close (steps wait) or open f's gate. */
void fake_gate(fake *f, int closed);
/* What a greedy request makes alone: ids into out until max_tokens, EOS or the context; their count. */
uint32_t fake_alone(const int32_t *prompt, uint32_t n, uint32_t max_tokens, uint32_t max_ctx,
                    int32_t *out, em_finish *fin);

/* ---- a test's requests (j borrowed; j->r the request, released by job_finish) ---- */

/* Submit j greedy, of class cls (its prompt and max_tokens); 0 or the error. */
int job_submit(em_sched *s, job *j, em_class cls, em_err *e);
/* Submit j as an embed request of class cls (its pooling and types). */
int job_submit_embed(em_sched *s, job *j, em_class cls, em_err *e);
/* Drain j's events, waiting up to timeout_ms for each; 1 once DONE was seen. */
int job_pump(job *j, int timeout_ms);
/* Drain j until DONE, bounded (10 minutes: a hang, not a speed limit; a failed check); 1 when it came. */
int job_pump_done(job *j);
/* Wait (bounded as job_pump_done) until j has n tokens or is done. */
void job_pump_tokens(job *j, uint32_t n);
/* Drain j until DONE and release its request (j->r NULL after). */
void job_finish(job *j);
/* Check j's tokens and finish are what its prompt gives alone in a max_ctx context. */
void job_check_alone(const job *j, uint32_t max_ctx, const char *what);
/* Fill j's prompt with n byte ids from seed, the first shared_prefix the same for every seed. */
void job_fill(job *j, uint32_t n, uint32_t seed, uint32_t shared_prefix);

/* ---- the scheduler ---- */

/* A scheduler over be and tok (borrowed; it is the caller's: em_sched_destroy), options as named (0: default);
 * NULL and a failed check if it cannot be made. */
em_sched *sched_mk_bg(em_sched_backend *be, uint32_t step_tokens, double aging_ms, uint32_t max_wait,
                      double bg_step_ms, em_tokenizer *tok);
/* sched_mk_bg with no bound on background steps. */
em_sched *sched_mk(em_sched_backend *be, uint32_t step_tokens, double aging_ms, uint32_t max_wait,
                   em_tokenizer *tok);
/* Check that no KV block of s is in use (all free or cached). */
void sched_no_leak(em_sched *s, const char *what);

#endif
