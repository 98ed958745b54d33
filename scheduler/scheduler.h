/* scheduler.h — the scheduler: many requests, one device.
 *
 * Requests of two classes share the device: `interactive` (chat: low time to
 * first token, smooth streaming) and `background` (batch work: throughput).
 * One scheduler thread owns the device and runs steps. Each step it keeps
 * every running sequence decoding, adds prompt chunks under a token budget
 * (interactive first; background chunks wait while an interactive prompt is
 * in the step and otherwise keep a step to about bg_step_ms, so a chat
 * request never waits long behind batch work; background decodes sit out
 * an interactive prompt's step where the measured cost per row says they
 * would lengthen it by half, never two steps running), admits new sequences when
 * their KV blocks fit, ages
 * waiting background requests so that none waits forever, preempts the
 * newest background sequences (freeing their blocks; they are recomputed
 * later) before it ever refuses an interactive one, runs one batched forward
 * pass, samples, and hands tokens back through each request's event queue.
 *
 * The backend is an interface (em_sched_backend) so that the planner can be
 * tested without a GPU; em_sched_backend_gpu() wraps core/gpu/forward.c.
 *
 * Threads: em_sched_submit, em_request_* may be called from any thread. The
 * notify callback of a request runs on the scheduler thread and must only
 * wake its consumer (e.g. lws_cancel_service). */
#ifndef EM_SCHEDULER_H
#define EM_SCHEDULER_H

#include <stdint.h>

#include "core/err.h"
#include "core/model/model.h"
#include "core/run/kv.h"
#include "core/run/sample.h"
#include "core/text/tokenizer.h"

typedef enum { EM_CLASS_INTERACTIVE = 0, EM_CLASS_BACKGROUND = 1, EM_CLASS_COUNT } em_class;

const char *em_class_name(em_class c);                       /* "interactive", "background" */
int         em_class_parse(const char *s, em_class *out);    /* EM_EINVAL if unknown */

/* ---- the backend ------------------------------------------------------------ */

typedef struct {
    uint32_t       n_tokens;
    const int32_t *tokens, *pos, *seq;      /* [n_tokens] */
    uint32_t       n_logits;
    const int32_t *logit_rows;              /* [n_logits] indices into the tokens */
    const int32_t *const *tables;           /* [max_seqs] block tables */
    const uint8_t *decode;                  /* [n_tokens]: 1 for a generated token fed alone */
    const int32_t *const *tables_window;    /* [max_seqs] window-pool tables (em_kv), NULL without */
    const uint8_t *types;                   /* [n_tokens] token types (an encoder's); NULL: all 0 */
    uint32_t       n_pool;                  /* pooled rows asked of the step (<= max_seqs) */
    const int32_t *pool;                    /* [2 * n_pool] (first token, count) spans: the step's
                                             * pooled row i is the SUM of span i's final hidden states */
} em_sched_batch;

typedef struct em_sched_backend {
    void    *ctx;
    uint32_t n_vocab;
    uint32_t max_tokens;    /* tokens per step the backend accepts */
    uint32_t max_logits;    /* logit rows per step */
    uint32_t max_seqs;      /* sequence slots */
    uint32_t max_ctx;       /* positions per sequence */
    uint32_t n_blocks;      /* KV pool blocks */
    uint32_t window;        /* sliding-window layers' KV in a pool of their own (em_kv): the */
    uint32_t n_blocks_window;  /* window and that pool's blocks; 0 and 0: none */
    /* Copy KV blocks (copy on write) before the next step. */
    int  (*copy)(void *ctx, const em_kv_copy *copies, uint32_t n, em_err *err);
    /* Run one step; logits[n_logits][n_vocab]. */
    int  (*step)(void *ctx, const em_sched_batch *b, float *logits, em_err *err);
    /* Optional (NULL: step and whole rows): run one step choosing on the
     * device — each logit row i steered by steer[i] and summarised into
     * top[i] (core/run/sample.h em_sampler_sample_top); row(ctx, i) gives the
     * steered row i until the next step, for what the summary cannot
     * settle. max_adj: adjustments a step's rows may carry in all; a step
     * that needs more runs through step. */
    int  (*step_top)(void *ctx, const em_sched_batch *b, const em_sample_steer *steer, em_sample_top *top,
                     em_err *err);
    const float *(*row)(void *ctx, uint32_t i);
    uint32_t max_adj;
    /* After a step failed with EM_EDEVICE (the device lost, a kernel
     * failure) and the running requests got the error: rebuild the device
     * so that steps work again (0), or fail: the device is then down, and
     * tried again every EM_SCHED_RECOVER_S. NULL: no recovery. Scheduler
     * thread. */
    int  (*recover)(void *ctx, em_err *err);
    void (*destroy)(void *ctx);
    /* Embeddings (NULL / 0: none; embed requests are refused at submit):
     * pooled row i of the last step ([n_embd] floats, the sum over span i
     * of em_sched_batch.pool), valid until the next step. */
    const float *(*pooled)(void *ctx, uint32_t i);
    uint32_t n_embd;
    /* An encoder (bert): every sequence whole in one step from position 0,
     * no logit rows, no decode tokens; it runs embed requests only, each
     * prompt at most step_tokens. */
    int      encoder;
} em_sched_backend;

#define EM_SCHED_RECOVER_S 5.0

struct em_fwd;
struct em_vk;
/* The GPU backend over a forward pass (borrowed; must outlive the scheduler),
 * its pooled rows (embed requests) and whether its model is an encoder
 * (embed requests only, each whole in one step) taken from f. Test only: with EMBER_TEST_HANG_STEP=N in the environment the N-th step
 * (from 1) never returns, as a device that never signals its fence would
 * (tests/e2e/notify_test.py: the watchdog pings stop). */
void em_sched_backend_gpu(struct em_fwd *f, struct em_vk *vk, uint32_t n_vocab, uint32_t max_tokens,
                          uint32_t max_logits, uint32_t max_seqs, uint32_t max_ctx,
                          uint32_t n_blocks, em_sched_backend *out);

/* Give the GPU backend out its recovery: rebuild(arg, &f, err) replaces
 * the forward pass after a device failure (destroying the old one and its
 * device, making new ones with the same options, checking them) and
 * returns 0 with *f the new one; on failure *f is NULL or still usable.
 * arg is borrowed and must outlive the scheduler. */
void em_sched_backend_gpu_recovery(em_sched_backend *be, int (*rebuild)(void *arg, struct em_fwd **f, em_err *err),
                                   void *arg);

/* ---- requests --------------------------------------------------------------- */

#define EM_MAX_STOP 4

/* A constraint on what a request may generate (a grammar, web/ builds it
 * from core/grammar/grammar.h): before each token the scheduler asks which tokens
 * are allowed, after it says which was chosen. ctx NULL: none. The
 * scheduler owns ctx once em_sched_submit succeeded (destroy is called
 * when the request is freed); on a failed submit it is still the caller's.
 * All calls on the scheduler thread. */
typedef struct {
    void *ctx;
    /* Set bit i of allow[(n_vocab + 31) / 32] (zeroed by the caller) for each
     * token that may come next, end-of-generation tokens aside (the
     * scheduler allows those when can_end). 0, or an error code with err
     * set: the request fails with it. */
    int  (*allowed)(void *ctx, uint32_t *allow, em_err *err);
    /* The token chosen (an allowed one, not an end-of-generation token). */
    int  (*accept)(void *ctx, int32_t id, em_err *err);
    int  (*can_end)(void *ctx);   /* 1: the output is complete here */
    int  (*done)(void *ctx);      /* 1: complete, and nothing may follow: the request stops */
    void (*destroy)(void *ctx);
} em_constraint;

typedef struct {
    const int32_t   *prompt;        /* copied at submit */
    uint32_t         n_prompt;
    em_sample_params sample;
    em_class         cls;
    uint32_t         max_tokens;    /* generated tokens at most; 0: up to the context */
    const int32_t   *stop_tokens;   /* extra ids that end the request (copied); EOG ids always do */
    uint32_t         n_stop_tokens;
    const char      *stop[EM_MAX_STOP];   /* stop strings (copied), NULL-padded */
    int              ignore_eog;    /* generate through end-of-text tokens (benchmarks) */
    int              logprobs;      /* TOKEN events carry the token's log-probability */
    uint32_t         top_logprobs;  /* and the most likely alternatives (<= EM_SAMPLE_MAX_TOP) */
    em_constraint    constraint;    /* taken on success (see em_constraint) */
    /* speculative decoding by prompt lookup: drafts of up to this many
     * tokens from n-gram matches in the context, verified in one step (the
     * output's distribution is the model's, greedy output the same token
     * for token). 0: the scheduler's default (em_sched_opts.speculate);
     * -1: none. Not with penalties, a constraint or logprobs. */
    int32_t          speculate;
    /* where drafts come from: EM_SPEC_AUTO the scheduler's draft model
     * (em_sched_opts.draft) when it has one, else prompt lookup;
     * EM_SPEC_LOOKUP prompt lookup; EM_SPEC_DRAFT the draft model
     * (EM_EINVAL at submit when the scheduler has none) */
    int              spec_method;
    void           (*notify)(void *user);  /* called on the scheduler thread after events */
    void            *user;          /* passed to notify, never dereferenced */
    /* An embedding (1): the prompt is run and nothing is generated; DONE
     * (finish STOP) carries its hidden states pooled by `pooling`: MEAN
     * (also NONE) their mean, CLS the first position's, LAST the last
     * position's, RANK the first's (the caller applies a classification
     * head). Prompt work of its class (chunked on a decoder, whole in one
     * step on an encoder, batched with other requests), without sampling,
     * logit rows or the prefix cache (neither looked up nor filled); its
     * KV blocks go back at DONE. Sampling, stop and speculation
     * parameters are ignored. */
    int              embed;
    em_pooling       pooling;
    const uint8_t   *types;         /* [n_prompt] token types (copied); NULL: all 0 */
} em_req_params;

enum { EM_SPEC_AUTO = 0, EM_SPEC_LOOKUP, EM_SPEC_DRAFT };

typedef enum {
    EM_FINISH_NONE = 0,     /* still running */
    EM_FINISH_STOP,         /* end-of-text token or stop string/token */
    EM_FINISH_LENGTH,       /* max_tokens or the context was reached */
    EM_FINISH_CANCELLED,
    EM_FINISH_ERROR,
} em_finish;

const char *em_finish_name(em_finish f);   /* "stop", "length", "cancelled", "error" */

/* What a finished request measured. Times in milliseconds. */
typedef struct {
    em_class cls;
    uint32_t prompt_tokens;      /* as submitted */
    uint32_t cached_tokens;      /* prompt positions taken from the prefix cache */
    uint32_t completion_tokens;
    uint32_t preemptions;
    double   queue_ms;           /* submit -> first admitted */
    double   ttft_ms;            /* submit -> first token */
    double   tpot_mean_ms;       /* between consecutive tokens */
    double   tpot_p99_ms;
    double   total_ms;           /* submit -> finish */
    double   t_submit, t_start, t_first, t_end;   /* monotonic seconds */
} em_req_metrics;

typedef enum { EM_EV_TOKEN, EM_EV_DONE } em_event_kind;

/* One event. A TOKEN carries the new text (may be empty while a UTF-8
 * character or a possible stop string is incomplete); DONE carries the
 * finish reason, any final text, error text and metrics. */
typedef struct {
    em_event_kind  kind;
    int32_t        token;        /* TOKEN: the id */
    int            has_lp;       /* TOKEN of a request with logprobs: lp is set */
    em_sample_lp   lp;
    char          *text;         /* malloc'd, NUL-terminated; owned by the event */
    uint32_t       text_len;
    em_finish      finish;       /* DONE */
    int            stop_hit;     /* DONE with EM_FINISH_STOP: 1 + the index of the stop string that ended it
                                  * (em_req_params.stop); 0: an end-of-text token or a stop token */
    char           error[256];   /* DONE with EM_FINISH_ERROR */
    em_req_metrics metrics;      /* DONE */
    float         *embedding;    /* DONE of an embed request that finished STOP: [n_embd], the pooled
                                  * vector, not normalised; malloc'd, owned by the event */
    uint32_t       n_embd;
} em_event;

void em_event_clear(em_event *ev);   /* frees ev->text and ev->embedding */

typedef struct em_request em_request;

/* Pop the next event into *ev (caller owns its text: em_event_clear).
 * Returns 1 when an event was popped, 0 when none arrived within
 * timeout_ms (0: do not wait, -1: wait forever). */
int em_request_next(em_request *r, em_event *ev, int timeout_ms);

/* Ask the scheduler to stop the request: its blocks are freed within one
 * step and a DONE (cancelled) event follows. Safe to call repeatedly. */
void em_request_cancel(em_request *r);

/* Drop the caller's reference (after DONE, or to abandon the request:
 * release implies cancel). Accepts NULL. */
void em_request_release(em_request *r);

/* ---- the scheduler ---------------------------------------------------------- */

typedef struct {
    uint32_t step_tokens;     /* tokens per step (prefill chunks + decodes); <= backend max_tokens */
    uint32_t max_waiting[EM_CLASS_COUNT];   /* queue bounds: beyond, submit says busy */
    double   aging_ms;        /* a background request waiting this long is admitted like
                                 an interactive one (0: 10 s) */
    double   bg_step_ms;      /* background prompt chunks fill a step only to about this
                                 long (measured), bounding how long an arriving interactive
                                 request waits for the step in flight; 0: no bound */
    int      prefix_cache;    /* share full KV blocks between sequences by prefix */
    uint32_t speculate;       /* requests' default draft length (em_req_params.speculate); 0 off */
    /* Optional (NULL: none): a draft model for speculative decoding, a
     * smaller model with the same vocabulary behind a backend of its own
     * (its own KV pool; only step and copy are used). Each step, before the
     * target's, the sequences that speculate with it catch it up on their
     * tokens and it proposes up to their draft length, one batched draft
     * step per token; the target verifies them by the rejection rule
     * against the draft's distribution (core/run/sample.h
     * em_sampler_verify_dist). Taken like the backend: em_sched_create owns
     * it from the call on, also when it fails; its n_vocab must equal the
     * backend's (EM_EINVAL). A draft step that fails turns drafting off
     * for good (logged); the target goes on. */
    const em_sched_backend *draft;
} em_sched_opts;

#define EM_SCHED_MAX_DRAFT     8   /* drafted tokens per sequence and step */
#define EM_SCHED_SPEC_MAX_SEQS 8   /* no drafting while more sequences than this run */

void em_sched_opts_init(em_sched_opts *o);   /* 512 tokens, 256/1024 waiting, 10 s, 200 ms,
                                                cache on */

typedef struct em_sched em_sched;

/* Start the scheduler thread over backend (takes ownership: its destroy is
 * called by em_sched_destroy) and tokenizer (borrowed: EOG ids, stop
 * strings, text of events). */
int  em_sched_create(const em_sched_opts *o, const em_sched_backend *backend,
                     const em_tokenizer *tok, em_sched **out, em_err *err);

/* Finish or cancel everything still queued or running (DONE events with
 * EM_FINISH_CANCELLED), stop the thread, free everything. Accepts NULL. */
void em_sched_destroy(em_sched *s);

/* Queue a request. On success *out is the caller's reference (release it).
 * EM_EBUSY when the class's queue is full: err says so and *retry_ms (if
 * non-NULL) suggests when to try again. EM_ERANGE when the request can never
 * fit (prompt + max_tokens beyond the context, or more blocks than the pool
 * has). EM_EINVAL for bad parameters (empty prompt, token ids out of range,
 * an embed request on a backend without pooled rows; on an encoder backend
 * a request that is not an embed one, "this model does not generate text",
 * or a prompt past step_tokens or the context). */
int em_sched_submit(em_sched *s, const em_req_params *p, em_request **out, uint32_t *retry_ms,
                    em_err *err);

typedef struct {
    uint32_t running[EM_CLASS_COUNT];
    uint32_t waiting[EM_CLASS_COUNT];
    em_kv_stats kv;
    em_kv_stats kv_draft;         /* the draft model's pool (em_sched_opts.draft); zeros without one */
    uint64_t steps;
    uint64_t tokens_generated;
    uint64_t chosen_on_device;    /* tokens chosen from the device's summary of their row */
    uint64_t chosen_from_row;     /* tokens whose choice needed the whole (steered) row */
    uint64_t spec_drafted;        /* tokens drafted by speculation (prompt lookup, draft model) */
    uint64_t spec_accepted;       /* of those, accepted by the model */
    uint64_t tokens_prefilled;
    uint64_t preemptions;
    uint64_t rejected_busy;
    uint64_t device_resets;    /* device failures after which the backend rebuilt the device */
    uint64_t device_failures;  /* steps that failed with EM_EDEVICE */
    uint32_t device_down;      /* 1 while the device failed and could not be rebuilt: every request
                                  fails at once until a rebuild (tried every EM_SCHED_RECOVER_S,
                                  idle or not) succeeds */
    char     device_error[256];   /* then: why the last rebuild failed */
    /* the KV pool's tokens_live and tokens_alloc added up after every step:
     * 1 - (difference of live) / (difference of alloc) between two reads is
     * the share of allocated KV positions that held no token, step-weighted */
    uint64_t kv_live_sum, kv_alloc_sum;
    double   tokens_per_s;     /* generated, over the last EM_SCHED_RATE_S seconds up to now
                                  (0 once the scheduler has been idle that long) */
    double   busy_ratio;       /* share of that time spent in steps */
    double   busy_s;           /* seconds spent in steps since the scheduler started (the sum of
                                  step times: planning, forward, sampling): busy time over wall
                                  time is the device's utilization */
} em_sched_stats;

#define EM_SCHED_RATE_S 5.0    /* how far back tokens_per_s and busy_ratio look */

void em_sched_get_stats(em_sched *s, em_sched_stats *st);

/* Where r (a request of s, still referenced) waits: 1 + the requests queued
 * ahead of it in its class's queue, in the order they are admitted (aging
 * aside); 0 while it runs and once it has finished (a preempted request
 * waits again, with a position again). */
uint32_t em_sched_queue_position(em_sched *s, const em_request *r);

/* The scheduler thread's last sign of life, CLOCK_MONOTONIC microseconds:
 * it beats after every step and, while idle, at least every half second.
 * A value that stops moving while work waits means a step is stuck (the
 * systemd watchdog, firmware/notify.h, stops its pings then). Any thread. */
long long em_sched_heartbeat_us(em_sched *s);

/* Block until no request is queued or running (tests, benchmarks). */
void em_sched_drain(em_sched *s);

#endif
