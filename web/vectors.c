/* vectors.c — POST /v1/embeddings, and /v1/rerank (also /rerank): the
 * requests embeddings.c and rerank.c check and tokenize, run as scheduler
 * embed requests, one per input or sequence (a window of them in flight at
 * once, so that they batch with each other and with other requests
 * without filling the class's queue), in the request's class (a
 * background key's bulk indexing waits behind chat). The vectors come
 * back as each finishes: normalised (unless "normalize": false) for
 * embeddings; for rerank scored by the model's classification head on the
 * [CLS] state of each query-document pair (a cross-encoder, pooling rank)
 * or by the cosine of the query's and each document's embedding. The door
 * rules of the completions routes hold: the key and its rate, the model's
 * name, the drain, and one ledger row per request (endpoint "embeddings"
 * or "rerank"; refusals through em_gen_start like every door's). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/run/encode.h"
#include "web/api_req.h"
#include "web/embeddings.h"
#include "web/rerank.h"

#define VEC_WINDOW 64   /* sequences of one request in the scheduler at once */

typedef struct {
    em_web         *w;
    int             rerank;
    web_embed_req   er;        /* /v1/embeddings' inputs */
    web_rerank_req  rr;        /* /v1/rerank's sequences */
    json_t         *body;      /* the request (rr.docs points into it) */
    em_pooling      pooling;   /* what each sequence's hidden states become */
    size_t          n;         /* sequences */
    int32_t       **ids;       /* [n] borrowed from er or rr */
    uint32_t       *n_ids;
    uint8_t       **types;     /* [n] or NULL */
    em_class        cls;
    em_request    **req;       /* [n]: submitted so far (n_sub) */
    size_t          n_sub, n_done;
    uint8_t        *done;      /* [n] */
    float          *vecs;      /* [n][dim] */
    uint32_t        dim;
    int             failed, cancelled, drain_stopped, counted;
    em_web_error    err;       /* the answer when failed */
    double          t_submit, t_start;   /* the scheduler's clock: first submit, first admission */
    em_usage_record rec;
} vec_req;

static void vec_free(void *door)
{
    vec_req *v = door;
    if (!v)
        return;
    int all = v->n_sub == v->n && v->n_done == v->n;
    for (size_t i = 0; i < v->n_sub; i++)
        em_request_release(v->req[i]);   /* what still runs is cancelled: its blocks go back */
    if (v->counted) {   /* the final row */
        v->rec.status = v->failed ? EM_USAGE_FAILED : v->cancelled || !all ? EM_USAGE_CANCELLED : EM_USAGE_COMPLETED;
        snprintf(v->rec.finish_reason, sizeof v->rec.finish_reason, "%s", v->failed ? "error"
                 : v->rec.status == EM_USAGE_CANCELLED ? "cancelled" : "stop");
        if (v->failed)
            snprintf(v->rec.error, sizeof v->rec.error, "%d %s", v->err.status, v->err.message);
        em_gen_row(v->w, &v->rec);
        atomic_fetch_sub(&v->w->gens, 1);
    }
    web_embed_free(&v->er);
    web_rerank_free(&v->rr);
    json_decref(v->body);
    free(v->req);
    free(v->done);
    free(v->vecs);
    free(v);
}

/* Submit sequences until VEC_WINDOW are unfinished or all are in. 0, or
 * -1 with v->err filled: a sequence the scheduler refuses (400 naming
 * it), or a full queue with none of ours left in it to wait for (503). */
static int top_up(vec_req *v)
{
    while (v->n_sub < v->n && v->n_sub - v->n_done < VEC_WINDOW) {
        size_t i = v->n_sub;
        em_req_params p = { .prompt = v->ids[i], .n_prompt = v->n_ids[i], .cls = v->cls, .embed = 1,
                            .pooling = v->pooling, .types = v->types ? v->types[i] : NULL,
                            .notify = em_gen_notify, .user = v->w };
        uint32_t retry_ms = 0;
        em_err err = { 0 };
        int rc = em_sched_submit(v->w->o.sched, &p, &v->req[i], &retry_ms, &err);
        if (rc == EM_EBUSY && v->n_sub > v->n_done)
            return 0;   /* ours ahead of it finish first: again at the next pump */
        if (rc == EM_EBUSY) {
            em_web_fail(&v->err, 503, "server_error", "server_busy", NULL, "the %s queue is full; try again later",
                        em_class_name(v->cls));
            v->err.retry_after_s = retry_ms ? (retry_ms + 999) / 1000 : 1;
            return -1;
        }
        if (rc) {
            char param[48] = "query";
            if (!v->rerank)
                snprintf(param, sizeof param, "input[%zu]", i);
            else if (v->rr.pairs || i)
                snprintf(param, sizeof param, "documents[%zu]", v->rr.pairs ? i : i - 1);
            return em_web_fail(&v->err, rc == EM_ENOMEM ? 500 : 400, rc == EM_ENOMEM ? "server_error"
                               : "invalid_request_error", NULL, param, "%s: %s", param, err.msg);
        }
        v->n_sub++;
    }
    return 0;
}

/* Scores of the documents: the head's output on each pair's [CLS] state,
 * or the cosine of each document's vector and the query's (vector 0). */
static int rerank_scores(vec_req *v, float *scores)
{
    const em_model *m = v->w->o.model;
    if (v->rr.pairs) {
        const em_encoder_weights *ew = em_model_encoder(m);
        uint32_t labels = ew && ew->cls_out ? (uint32_t)ew->cls_out->ne[1] : v->dim;
        float *out = malloc((labels > v->dim ? labels : v->dim) * sizeof *out);
        if (!out)
            return EM_ENOMEM;
        for (size_t i = 0; i < v->rr.n_docs; i++) {
            if (em_ref_cls_head(m, v->vecs + i * v->dim, out)) {
                free(out);
                return EM_ENOMEM;
            }
            scores[i] = out[0];
        }
        free(out);
        return 0;
    }
    for (size_t i = 0; i < v->n; i++)
        em_l2_normalize(v->vecs + i * v->dim, v->dim);
    for (size_t i = 0; i < v->rr.n_docs; i++) {
        double dot = 0;
        for (uint32_t d = 0; d < v->dim; d++)
            dot += (double)v->vecs[d] * v->vecs[(i + 1) * v->dim + d];
        scores[i] = (float)dot;
    }
    return 0;
}

/* Every sequence done: the answer. */
static void respond(web_conn *c, vec_req *v)
{
    em_web_error e = { 0 };
    json_t *j = NULL;
    float *scores = NULL;
    if (v->drain_stopped && v->cancelled) {
        web_drain_stopped(v->w, 0, &e);
        web_respond_error(c, &e);
        return;
    }
    if (v->failed) {
        web_respond_error(c, &v->err);
        return;
    }
    if (v->rerank) {
        scores = malloc((v->rr.n_docs ? v->rr.n_docs : 1) * sizeof *scores);
        if (scores && !rerank_scores(v, scores))
            j = web_rerank_response(&v->rr, scores, v->w->model_id);
    } else {
        for (size_t i = 0; v->er.normalize && i < v->n; i++)
            em_l2_normalize(v->vecs + i * v->dim, v->dim);
        j = web_embed_response(&v->er, v->vecs, v->dim, v->w->model_id);
    }
    free(scores);
    if (!j) {
        v->failed = 1;
        em_web_fail(&v->err, 500, "server_error", NULL, NULL, "out of memory");
        web_respond_error(c, &v->err);
        return;
    }
    web_respond_json(c, 200, j);
    json_decref(j);
}

/* Sequence i's DONE. */
static void finished(vec_req *v, size_t i, em_event *ev)
{
    v->done[i] = 1;
    v->n_done++;
    const em_req_metrics *m = &ev->metrics;
    if (m->t_start > 0 && (v->t_start == 0 || m->t_start < v->t_start))
        v->t_start = m->t_start;
    if (v->t_submit == 0 || m->t_submit < v->t_submit)
        v->t_submit = m->t_submit;
    if (m->queue_ms > v->rec.queue_ms)
        v->rec.queue_ms = m->queue_ms;   /* the longest wait of its sequences */
    v->rec.preemptions += (int32_t)m->preemptions;
    if (ev->finish == EM_FINISH_CANCELLED) {
        v->cancelled = 1;
    } else if (ev->finish != EM_FINISH_STOP || !ev->embedding || ev->n_embd != v->dim) {
        if (!v->failed)
            em_web_fail(&v->err, 500, "server_error", NULL, NULL, "embedding failed: sequence %zu: %s", i,
                        ev->error[0] ? ev->error : "no vector");
        v->failed = 1;
    } else {
        memcpy(v->vecs + i * v->dim, ev->embedding, v->dim * sizeof *v->vecs);
    }
}

/* A writable callback: the vectors that came, more sequences in, and the
 * answer once all are done. */
static void vec_pump(web_conn *c)
{
    vec_req *v = c->api->door;
    if (web_drain_stopping(v->w) && !v->drain_stopped) {   /* --drain-s is up: stop */
        v->drain_stopped = 1;
        for (size_t i = 0; i < v->n_sub; i++)
            em_request_cancel(v->req[i]);
        v->n = v->n_sub;   /* nothing more goes in */
    }
    em_event ev;
    for (size_t i = 0; i < v->n_sub; i++) {
        while (!v->done[i] && em_request_next(v->req[i], &ev, 0)) {
            if (ev.kind == EM_EV_DONE)
                finished(v, i, &ev);
            em_event_clear(&ev);
        }
    }
    if (!v->failed && !v->cancelled && top_up(v))
        v->failed = 1;
    if (v->failed || v->cancelled) {   /* the rest will not be needed */
        for (size_t i = 0; i < v->n_sub; i++)
            em_request_cancel(v->req[i]);
        v->n = v->n_sub;
    }
    if (v->n_done < v->n)
        return;
    v->rec.started_ms = v->t_start > 0 ? v->rec.received_ms + (int64_t)((v->t_start - v->t_submit) * 1e3) : 0;
    respond(c, v);
}

/* The request's sequences from its parsed body: 0, or -1 with e filled. */
static int vec_parse(vec_req *v, const json_t *req, em_web_error *e)
{
    em_web *w = v->w;
    const em_hparams *hp = em_model_hparams(w->o.model);
    const em_encoder_weights *ew = em_model_encoder(w->o.model);
    uint32_t max = w->o.embed_max_tokens ? w->o.embed_max_tokens : w->o.n_ctx;
    em_pooling own = hp->pooling == EM_POOL_NONE ? EM_POOL_MEAN : hp->pooling == EM_POOL_RANK ? EM_POOL_CLS
                   : hp->pooling;
    v->dim = hp->n_embd;
    if (v->rerank) {
        int pairs = hp->pooling == EM_POOL_RANK || (ew && ew->cls_out);
        if (web_rerank_parse(req, w->o.tok, pairs, max, &v->rr, e))
            return -1;
        v->n = v->rr.n_seq;
        v->ids = v->rr.ids;
        v->n_ids = v->rr.n_ids;
        v->types = v->rr.types;
        v->pooling = pairs ? EM_POOL_RANK : own;
        v->rec.prompt_tokens = (int64_t)v->rr.tokens;
    } else {
        if (web_embed_parse(req, w->o.tok, hp->n_vocab, hp->n_embd, max, &v->er, e))
            return -1;
        v->n = v->er.n;
        v->ids = v->er.ids;
        v->n_ids = v->er.n_ids;
        v->pooling = v->er.pooling != EM_POOL_NONE ? v->er.pooling : own;
        v->rec.prompt_tokens = (int64_t)v->er.tokens;
    }
    v->req = calloc(v->n, sizeof *v->req);
    v->done = calloc(v->n, 1);
    v->vecs = malloc(v->n * v->dim * sizeof *v->vecs);
    if (!v->req || !v->done || !v->vecs)
        return em_web_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    return 0;
}

static void vectors(web_conn *c, int rerank)
{
    em_web *w = c->w;
    em_web_error e = { 0 };
    em_web_auth auth = { 0 };
    char id[64];
    json_t *req = web_door_begin(c, rerank ? "rerank-" : "embd-", id, sizeof id, &auth, &e);
    em_gen_params gp = { .auth = &auth, .client_addr = c->addr, .request_id = id,
                         .cls = auth.default_class, .endpoint = rerank ? "rerank" : "embeddings" };
    vec_req *v = calloc(1, sizeof *v);
    api_req *a = calloc(1, sizeof *a);
    if (!e.status && (!v || !a))
        em_web_fail(&e, 500, "server_error", NULL, NULL, "out of memory");
    if (!e.status && !json_is_object(req))
        em_web_fail(&e, 400, "invalid_request_error", NULL, NULL, "the request body must be a JSON object");
    if (!e.status && !web_model_check(w, req, &e) && !web_want_class(req, &auth, &gp.cls, &e))
        web_drain_refuse(w, &e);
    if (!e.status) {
        v->w = w;
        v->rerank = rerank;
        v->cls = gp.cls;
        v->body = json_incref(req);
        em_gen_row_begin(w, &gp, &v->rec);
        if (!vec_parse(v, req, &e) && top_up(v))
            e = v->err;
    }
    if (e.status) {   /* refused: the row em_gen_start writes for every door */
        em_gen *none = NULL;
        em_gen_start(w, &gp, &none, &e);
        web_respond_error(c, &e);
        free(a);
        vec_free(v);
        json_decref(req);
        return;
    }
    v->rec.status = EM_USAGE_ADMITTED;
    em_gen_row(w, &v->rec);
    v->counted = 1;
    atomic_fetch_add(&w->gens, 1);   /* a drain waits for it */
    a->created = (int64_t)time(NULL);
    a->auth = auth;
    snprintf(a->id, sizeof a->id, "%s", id);
    web_api_go(c, a, v, vec_free, vec_pump);
    json_decref(req);
}

int web_vectors_route(web_conn *c)
{
    const char *p = c->path;
    int rerank = !strcmp(p, "/v1/rerank") || !strcmp(p, "/rerank");
    if (!rerank && strcmp(p, "/v1/embeddings"))
        return 1;
    if (c->method != EM_M_POST) {
        em_web_error e = { 0 };
        em_web_fail(&e, 405, "invalid_request_error", "method_not_allowed", NULL, "%s takes POST", p);
        web_respond_error(c, &e);
        return 0;
    }
    vectors(c, rerank);
    return 0;
}
