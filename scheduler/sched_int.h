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

/* request.c */
em_request *em_req_new(const em_req_params *p, uint32_t n_vocab, uint64_t order, em_err *err);
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
