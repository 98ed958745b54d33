/* sched_int.h — private structures shared by the scheduler's files
 * (sched.c: the thread and the planner; request.c: requests, their event
 * queues, text and metrics). */
#ifndef EM_SCHED_INT_H
#define EM_SCHED_INT_H

#include <pthread.h>
#include <stdatomic.h>

#include "scheduler/scheduler.h"

typedef enum { R_WAITING, R_RUNNING, R_FINISHED } req_state;

struct em_request {
    atomic_int refs;                 /* caller + scheduler */
    atomic_int cancel;

    /* parameters, copied at submit */
    em_sample_params sp;
    em_class         cls;
    uint32_t         n_prompt;
    uint32_t         max_tokens;
    int32_t         *stop_tokens;
    uint32_t         n_stop_tokens;
    char            *stop[EM_MAX_STOP];
    size_t           max_stop_len;
    int              stop_hit;          /* 1 + the stop string that ended the output; 0: none */
    int              ignore_eog;
    int              logprobs;
    uint32_t         top_logprobs;
    em_constraint    con;            /* owned (ctx NULL: none) */
    int              con_fail;       /* this step: the constraint failed or allows nothing */
    /* speculation (prompt lookup): at most spec_max drafts, spec_k next */
    uint32_t         spec_max, spec_k;
    uint32_t         n_draft;        /* this step: drafted tokens at the end of toks */
    uint64_t         spec_drafted, spec_accepted;
    /* draft-model speculation (spec_draft set): the draft's KV slot (-1:
     * none) holds toks[0, d_done); the last draft phase proposed dtok[0,
     * d_n) for positions d_base.., drawn from q[j * n_vocab ..] (the
     * draft's distributions) by dsampler, and fed all but the last */
    int              spec_draft;
    int32_t          d_slot;
    uint32_t         d_done, d_base, d_n;
    int32_t          dtok[EM_SCHED_MAX_DRAFT];
    float           *q;
    em_sampler      *dsampler;
    char             con_why[200];
    /* an embed request (em_req_params.embed): its pooling, token types
     * (NULL: all 0), the pooled sums of the chunks run so far (acc, double
     * [n_embd]; reset at each admission), this step's pooled row (-1:
     * none), and the vector DONE carries (emb, handed to the event) */
    int              embed;
    em_pooling       pooling;
    uint8_t         *types;
    double          *acc;
    int32_t          pool_i;
    float           *emb;
    uint32_t         n_embd;
    void           (*notify)(void *user);
    void            *user;

    /* events: a growable queue guarded by mu */
    pthread_mutex_t  mu;
    pthread_cond_t   cv;
    em_event        *evq;
    size_t           ev_head, ev_n, ev_cap;

    /* scheduler-thread state */
    req_state        state;
    uint64_t         order;          /* submit order */
    em_request      *next;           /* in a waiting queue or the running list */
    em_sampler      *sampler;
    int32_t         *toks;           /* prompt + generated */
    uint32_t         n_toks, cap_toks;
    uint32_t         n_gen;
    uint32_t         n_done;         /* positions with valid K/V */
    int32_t          slot;           /* KV slot or -1 */
    int              admitted_once;
    em_detok         dt;
    char            *text;           /* generated text so far */
    size_t           text_len, text_cap, emitted;
    double           t_last;         /* time of the last token */
    double          *gaps;           /* ms between tokens */
    uint32_t         n_gaps, cap_gaps;
    em_req_metrics   m;
};

/* ---- the scheduler (sched.c; speculate.c and recover.c work on it) --------- */

#define RATE_WINDOW 64   /* steps in the tokens/s window */

struct em_sched {
    em_sched_opts       o;
    em_sched_backend    be;
    const em_tokenizer *tok;
    em_kv              *kv;

    pthread_t           th;
    int                 started;
    pthread_mutex_t     mu;          /* waiting queues, counters, stats, stop */
    pthread_cond_t      cv;          /* work arrived */
    pthread_cond_t      idle_cv;     /* nothing queued or running */
    int                 stop;
    int                 idle;        /* the thread found nothing to do and waits */
    atomic_llong        beat_us;     /* the thread's last sign of life, monotonic microseconds */
    uint64_t            next_order;
    em_request         *waitq[EM_CLASS_COUNT];   /* by submit order */
    uint32_t            n_waiting[EM_CLASS_COUNT];
    uint32_t            n_running[EM_CLASS_COUNT];
    em_request         *running;     /* scheduler thread only; interactive first, then by order */

    /* one step's batch (scheduler thread only) */
    int32_t            *b_tok, *b_pos, *b_seq, *b_rows;
    uint8_t            *b_dec, *b_types;   /* b_types [max_tokens]: token types (embed requests') */
    int32_t            *b_pool;      /* [2 * max_seqs]: the step's pooled spans (embed requests) */
    uint32_t            n_pool;      /* spans in b_pool this step */
    int                 b_has_types; /* a row of this step has a token type (else the batch's types NULL) */
    const int32_t     **b_tables, **b_tables_w;   /* per slot: the KV pools' tables */
    em_request        **b_req;       /* [max_tokens]: request of each row of the batch */
    em_request        **snap;        /* [max_seqs]: the running list as a step plans it */
    uint32_t           *b_cnt;       /* [max_tokens]: tokens of that request in the batch */
    em_kv_copy         *copies;
    uint32_t            max_copies;
    float              *logits;
    uint32_t           *allow;       /* [max_logits][(n_vocab + 31) / 32]: constrained rows' tokens */
    em_sample_steer    *steer;       /* [max_logits]: each row's steering (step_top) */
    em_sample_top      *top;         /* [max_logits]: what the device made of each row */
    em_sample_adj      *adj;         /* [be.max_adj]: the rows' adjustments, one after another */
    int                 on_device;   /* this step chooses from the device's summaries */
    uint64_t            spec_drafted, spec_accepted;   /* speculation, all requests */

    /* the draft model (em_sched_opts.draft; has_draft 0: none, or turned
     * off after a failed draft step) and one draft step's batch */
    em_sched_backend    dbe;
    int                 has_draft;
    int                 draft_down;  /* the device failed: no drafts until the draft is rebuilt */
    em_kv              *dkv;
    int32_t            *d_tok, *d_pos, *d_seq, *d_rows;
    uint8_t            *d_dec;
    const int32_t     **d_tables, **d_tables_w;
    em_kv_copy         *d_copies;
    uint32_t            d_max_copies;
    float              *d_logits;
    int32_t            *eog;         /* the vocabulary's end-of-generation ids */
    uint32_t            n_eog;

    em_sched_stats      st;
    double              recover_after;   /* st.device_down: no new rebuild before this (monotonic s) */
    double              win_t[RATE_WINDOW], win_busy[RATE_WINDOW];
    uint32_t            win_tok[RATE_WINDOW], win_rows[RATE_WINDOW], win_i;
    int                 bg_dec_held;   /* the last step held background decodes back (plan_and_run) */
    double              t_created;   /* monotonic seconds: the rate window starts no earlier */
};

/* sched.c: r ends with f (error for EM_FINISH_ERROR); its slot and blocks go
 * back. r's next token is id: emitted, or r ended (1: r may be gone). */
void sched_finish_running(em_sched *s, em_request *r, em_finish f, const char *error);
int  sched_emit_one(em_sched *s, em_request *r, int32_t id, const em_sample_lp *lp, double now);
/* Every waiting request ends with f (and error); every running one fails. */
void sched_finish_waiting(em_sched *s, em_finish f, const char *error);
void sched_fail_all(em_sched *s, const char *msg);

/* speculate.c. Drafts for a decoding sequence within the step's room
 * (rows, logit rows) after dec_left decodes still to place: pushed onto
 * its tokens (r->n_draft); 1 when it drafted. */
int  sched_drafts(em_sched *s, em_request *r, uint32_t room, uint32_t L, uint32_t dec_left);
/* Before the step is planned: the draft model catches up and proposes. */
void sched_draft_phase(em_sched *s);
/* After the step: a speculating sequence's drafts checked from logit row
 * li0 on, the accepted emitted (gen counts them). */
void sched_spec_advance(em_sched *s, em_request *r, uint32_t li0, double now, uint32_t *gen);
/* The draft model failed (err says why): speculation with it is off. */
void sched_draft_off(em_sched *s, const em_err *err);

/* recover.c. Rebuild the device: 0 when serving again, else it is down. */
int  sched_rebuild_device(em_sched *s);
/* A step failed on the device (why): rebuild it. */
void sched_recover_device(em_sched *s, const em_err *why);
/* While the device is down: every request fails with why. */
void sched_fail_down(em_sched *s);

/* request.c */
em_request *em_req_new(const em_req_params *p, uint32_t n_vocab, uint64_t order, em_err *err);
/* An embed request's state (p->embed): its types copied, the sums for
 * n_embd-wide rows. 0 or EM_ENOMEM. */
int         em_req_embed_init(em_request *r, const em_req_params *p, uint32_t n_embd);
void        em_req_unref(em_request *r);
int         em_req_push_token(em_request *r, int32_t id);   /* toks[] += id; EM_ENOMEM */
/* Emit TOKEN with id's text (stop strings held back); returns 1 if a stop
 * string ended the request (the caller then finishes it with STOP). */
int         em_req_emit_token(em_request *r, const em_tokenizer *tok, int32_t id, const em_sample_lp *lp,
                              double now);
/* Emit DONE (flushes held-back text unless a stop string matched). */
void        em_req_finish(em_request *r, const em_tokenizer *tok, em_finish f, const char *error,
                          double now);

double em_sched_now(void);

#endif
