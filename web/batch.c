/* batch.c — the OpenAI Batch API (docs/api.md "Batches"):
 *   POST /v1/batches             input_file_id, endpoint, completion_window "24h", metadata
 *   GET  /v1/batches[?limit=&after=]
 *   GET  /v1/batches/ID
 *   POST /v1/batches/ID/cancel
 * and the runner that does the work. A batch validates after it is created
 * (status validating), on a thread of its own so that a large file does
 * not stall the service thread and every client with it: its input file
 * is read line by line, every line checked (a JSON object
 * with a unique custom_id, method POST, the batch's url, a body for this
 * model that does not stream); any bad line fails the batch before any
 * work, with an error per line. Otherwise its lines go into the database
 * (storage/batches.c) and it is in_progress. The runner, on the service
 * thread after each lws_service, keeps a bounded number of lines in
 * flight — each a completions request of the background class through the
 * same path as the HTTP endpoint (openai.c web_openai_start), so the
 * scheduler keeps chat first — records each line's result as it finishes
 * (result and count in one transaction), and when none are left writes the
 * output and error files and completes the batch. A cancelled batch stops
 * its lines in flight and keeps the results it has. While the device is
 * down no line starts, and a line that failed because the device failed
 * under it is not recorded: it stays pending and runs again once the
 * device is back (at most DEV_RETRIES times). After a restart (even
 * SIGKILL) the batches not finished go on: pending lines run, recorded
 * ones never again. Scoped per key like files. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "web/web_int.h"

#define PREFIX       "/v1/batches"
#define PREFIX_LEN   (sizeof PREFIX - 1)
#define MAX_LINES    50000        /* OpenAI's bound on a batch's requests */
#define MAX_ERRORS   100          /* validation errors kept in the batch's "errors" */
#define MAX_FLIGHT   64           /* lines in flight at most (all batches) */
#define DEV_RETRIES  3            /* a line the device failed under runs again this often, then fails */
#define WINDOW_MS    (24LL * 3600 * 1000)
#define MAX_VQ       64           /* batches waiting for the validator (more wait for a later look) */
#define RETRY_US     (1000 * 1000)   /* after a storage failure (a full disk, a locked ledger) the batches
                                        are looked at again this much later, not in a tight loop */

typedef struct {
    char            batch[EM_STORAGE_BATCH_ID_MAX];
    int64_t         line;
    char            custom_id[128];
    char            req_id[64];
    struct api_req *a;
    uint64_t        dev_failures0;   /* the scheduler's device failures when it started */
} flight;

struct web_batches {
    int     kick;                 /* look at the batches again (created, cancelled, a line done, boot) */
    long long retry_us;           /* a storage failure: kick at this monotonic time (later); 0: none */
    flight  fl[MAX_FLIGHT];
    size_t  n_fl;
    size_t  max_fl;               /* lines in flight at most: 2 per sequence the server runs, <= MAX_FLIGHT */
    uint64_t lines_done;          /* /metrics */
    /* lines the device failed under, and how often (a ring: the oldest goes) */
    struct { char batch[EM_STORAGE_BATCH_ID_MAX]; int64_t line; int n; } dev_tries[MAX_FLIGHT];
    size_t  dev_next;
    /* the validator thread: batch ids to validate (vq), the one in hand
     * (vbusy), all under vmu; it sets validated and wakes the service loop
     * when one is done */
    pthread_t       vthr;
    int             vthr_up, vstop;
    pthread_mutex_t vmu;
    pthread_cond_t  vcv;
    char            vq[MAX_VQ][EM_STORAGE_BATCH_ID_MAX];
    size_t          n_vq;
    char            vbusy[EM_STORAGE_BATCH_ID_MAX];
    atomic_int      validated;    /* VALID_DONE | VALID_RETRY: what the validator did since the last look */
};

enum { VALID_DONE = 1, VALID_RETRY = 2 };

/* The storage failed: look at the batches again in RETRY_US (the service
 * loop turns at least every half second, alive.c), so that a batch whose
 * result or file could not be written goes on once the storage is back. */
static void later(web_batches *B)
{
    if (!B->retry_us)
        B->retry_us = web_now_us() + RETRY_US;
}

/* ---- JSON out ------------------------------------------------------------------ */

static json_t *secs_or_null(int64_t ms)
{
    return ms ? json_integer((json_int_t)(ms / 1000)) : json_null();
}

static json_t *text_or_null(const char *s)
{
    return s && s[0] ? json_string(s) : json_null();
}

static json_t *batch_json(const em_batch_info *b)
{
    json_t *errors = json_null(), *meta = json_null();
    if (b->errors) {
        json_t *data = json_loads(b->errors, 0, NULL);
        errors = json_pack("{s:s, s:o}", "object", "list", "data", data ? data : json_array());
    }
    if (b->metadata && !(meta = json_loads(b->metadata, 0, NULL)))
        meta = json_null();
    json_t *j = json_pack("{s:s, s:s, s:s, s:o, s:s, s:s, s:s}", "id", b->id, "object", "batch", "endpoint",
                          b->endpoint, "errors", errors, "input_file_id", b->input_file_id, "completion_window",
                          b->completion_window, "status", b->status);
    json_object_set_new(j, "output_file_id", text_or_null(b->output_file_id));
    json_object_set_new(j, "error_file_id", text_or_null(b->error_file_id));
    json_object_set_new(j, "created_at", secs_or_null(b->created_ms));
    json_object_set_new(j, "in_progress_at", secs_or_null(b->in_progress_ms));
    json_object_set_new(j, "expires_at", secs_or_null(b->expires_ms));
    json_object_set_new(j, "finalizing_at", secs_or_null(b->finalizing_ms));
    json_object_set_new(j, "completed_at", secs_or_null(b->completed_ms));
    json_object_set_new(j, "failed_at", secs_or_null(b->failed_ms));
    json_object_set_new(j, "expired_at", secs_or_null(b->expired_ms));
    json_object_set_new(j, "cancelling_at", secs_or_null(b->cancelling_ms));
    json_object_set_new(j, "cancelled_at", secs_or_null(b->cancelled_ms));
    json_object_set_new(j, "request_counts", json_pack("{s:I, s:I, s:I}", "total", (json_int_t)b->total,
                                                       "completed", (json_int_t)b->completed, "failed",
                                                       (json_int_t)b->failed));
    json_object_set_new(j, "metadata", meta);
    return j;
}

static int answer(web_conn *c, int status, const char *type, const char *code, const char *param, const char *msg)
{
    em_web_error e = { 0 };
    em_web_fail(&e, status, type, code, param, "%s", msg);
    web_respond_error(c, &e);
    return 0;
}

static const web_store batch_store = { "batch", "No such Batch object: %.64s", "id", 409, NULL, NULL };

/* A storage failure as the API says it (web_storage_fail): 404, 400, 409
 * for a batch not in a state that allows it, else 503. */
static int storage_error(web_conn *c, int rc, const char *id, const em_err *err)
{
    em_web_error e = { 0 };
    web_storage_fail(&e, rc, err, &batch_store, id, NULL);
    web_respond_error(c, &e);
    return 0;
}

static int respond_batch(web_conn *c, const char *id)
{
    em_batch_info b;
    em_err err = { 0 };
    int rc = em_storage_batch_get(c->w->o.storage, EM_STORAGE_ANY_KEY, id, &b, &err);
    if (rc)
        return storage_error(c, rc, id, &err);
    json_t *j = batch_json(&b);
    em_batch_info_clear(&b);
    web_respond_json(c, 200, j);
    json_decref(j);
    return 0;
}

/* ---- validation ------------------------------------------------------------------ */

typedef web_batch_errors verrs;

static void verr(verrs *v, size_t line, const char *code, const char *param, const char *fmt, const char *arg)
{
    v->n_errors++;
    if (json_array_size(v->errors) >= MAX_ERRORS)
        return;
    char msg[300];
    snprintf(msg, sizeof msg, fmt, arg);
    json_array_append_new(v->errors, json_pack("{s:s, s:s, s:o, s:I}", "code", code, "message", msg, "param",
                                               param ? json_string(param) : json_null(), "line",
                                               (json_int_t)line));
}

size_t web_batch_check_lines(const char *data, size_t len, const char *endpoint, const char *model_id,
                             em_batch_line **lines, size_t *n, web_batch_errors *v)
{
    *lines = NULL;
    *n = 0;
    json_t *seen = json_object();   /* custom_ids */
    size_t cap = 0;
    size_t ln = 0;
    for (size_t off = 0; off < len;) {
        const char *s = data + off, *nl = memchr(s, '\n', len - off);
        size_t l = nl ? (size_t)(nl - s) : len - off;
        off += l + (nl ? 1 : 0);
        ln++;
        if (l && s[l - 1] == '\r')
            l--;
        if (!l) {
            if (off < len)
                verr(v, ln, "invalid_json_line", NULL, "%s", "line is empty");
            continue;
        }
        if (ln > MAX_LINES) {
            verr(v, ln, "too_many_requests", NULL, "%s", "a batch holds at most 50000 requests");
            break;
        }
        json_error_t je;
        json_t *o = json_loadb(s, l, JSON_REJECT_DUPLICATES, &je);
        if (!json_is_object(o)) {
            verr(v, ln, "invalid_json_line", NULL, "%s", o ? "a line must be a JSON object" : je.text);
            json_decref(o);
            continue;
        }
        const char *k;
        json_t *val;
        int bad = 0;
        json_object_foreach(o, k, val) {
            if (strcmp(k, "custom_id") && strcmp(k, "method") && strcmp(k, "url") && strcmp(k, "body")) {
                verr(v, ln, "invalid_request", k, "unknown field '%.64s' (custom_id, method, url, body)", k);
                bad = 1;
            }
        }
        json_t *cid = json_object_get(o, "custom_id"), *method = json_object_get(o, "method"),
               *url = json_object_get(o, "url"), *body = json_object_get(o, "body");
        if (!json_is_string(cid) || !json_string_length(cid) || json_string_length(cid) >= 128) {
            verr(v, ln, "invalid_request", "custom_id", "%s", "'custom_id' must be a string of 1 to 127 bytes");
            bad = 1;
        } else if (json_object_get(seen, json_string_value(cid))) {
            verr(v, ln, "duplicate_custom_id", "custom_id", "custom_id '%.64s' is used by an earlier line",
                 json_string_value(cid));
            bad = 1;
        }
        if (!json_is_string(method) || strcmp(json_string_value(method), "POST") != 0) {
            verr(v, ln, "invalid_method", "method", "%s", "'method' must be \"POST\"");
            bad = 1;
        }
        if (!json_is_string(url) || strcmp(json_string_value(url), endpoint) != 0) {
            verr(v, ln, "invalid_url", "url", "'url' must be the batch's endpoint, %s", endpoint);
            bad = 1;
        }
        if (!json_is_object(body)) {
            verr(v, ln, "invalid_request", "body", "%s", "'body' must be a JSON object");
            bad = 1;
        } else {
            json_t *model = json_object_get(body, "model"), *stream = json_object_get(body, "stream");
            if (model && (!json_is_string(model) || strcmp(json_string_value(model), model_id) != 0)) {
                verr(v, ln, "model_not_found", "body.model", "this server serves '%s'", model_id);
                bad = 1;
            }
            if (json_is_true(stream)) {
                verr(v, ln, "invalid_request", "body.stream", "%s", "a batch's requests cannot stream");
                bad = 1;
            }
        }
        if (!bad) {
            json_object_set_new(seen, json_string_value(cid), json_true());
            if (*n == cap) {
                size_t nc = cap ? 2 * cap : 64;
                em_batch_line *nv = realloc(*lines, nc * sizeof *nv);
                if (!nv) {
                    verr(v, ln, "server_error", NULL, "%s", "out of memory");
                    json_decref(o);
                    break;
                }
                *lines = nv;
                cap = nc;
            }
            em_batch_line *bl = &(*lines)[(*n)++];
            bl->line = (int64_t)(*n - 1);
            snprintf(bl->custom_id, sizeof bl->custom_id, "%s", json_string_value(cid));
            bl->body = json_dumps(body, JSON_COMPACT);
        }
        json_decref(o);
    }
    json_decref(seen);
    if (!v->n_errors && !*n)
        verr(v, 0, "empty_file", "input_file_id", "%s", "the input file holds no requests");
    if (v->n_errors) {
        em_batch_lines_free(*lines, *n);
        *lines = NULL;
        *n = 0;
    }
    return v->n_errors;
}

/* Validate batch b's input file (read whoever owns it: scope_key): 0 with
 * lines[] (the caller's: em_batch_lines_free), or the error count with
 * v->errors filled. */
static size_t validate(em_web *w, const em_batch_info *b, int64_t scope_key, em_batch_line **lines, size_t *n,
                       verrs *v)
{
    *lines = NULL;
    *n = 0;
    char *data = NULL;
    size_t len = 0;
    em_err err = { 0 };
    int rc = em_storage_file_read(w->o.storage, scope_key, b->input_file_id, &data, &len, &err);
    if (rc) {
        verr(v, 0, rc == EM_ENOENT ? "invalid_file" : "file_unreadable", "input_file_id", "%s", err.msg);
        return v->n_errors;
    }
    size_t bad = web_batch_check_lines(data, len, b->endpoint, w->model_id, lines, n, v);
    free(data);
    return bad;
}

/* Validate and start (or fail) batch b: on the validator thread (storage
 * and the model's id are safe there). 0, or -1 when the outcome could not
 * be stored (tried again later). */
static int validate_batch(em_web *w, const em_batch_info *b)
{
    int stored = 0;
    verrs v = { json_array(), 0 };
    em_batch_line *lines = NULL;
    size_t n = 0;
    em_err err = { 0 };
    /* the file was the key's (or an admin's to use) when the batch was
     * made; a restart validating again reads it whoever owns it */
    if (validate(w, b, EM_STORAGE_ANY_KEY, &lines, &n, &v)) {
        char *txt = json_dumps(v.errors, JSON_COMPACT);
        if (em_storage_batch_set_status(w->o.storage, b->id, "validating", "failed", txt, NULL, NULL, &err) &&
            err.code != EM_ESTATE) {   /* cancelled meanwhile */
            em_log(EM_LOG_ERROR, NULL, "batch %s: %s", b->id, err.msg);
            stored = -1;
        }
        free(txt);
    } else if (em_storage_batch_start(w->o.storage, b->id, lines, n, WINDOW_MS, &err) && err.code != EM_ESTATE) {
        em_log(EM_LOG_ERROR, NULL, "batch %s: cannot store its lines (tried again later): %s", b->id, err.msg);
        stored = -1;
    }
    em_batch_lines_free(lines, n);
    json_decref(v.errors);
    return stored;
}

static void *validator(void *arg)
{
    em_web *w = arg;
    web_batches *B = w->batches;
    pthread_mutex_lock(&B->vmu);
    for (;;) {
        while (!B->vstop && !B->n_vq)
            pthread_cond_wait(&B->vcv, &B->vmu);
        if (B->vstop)
            break;
        memcpy(B->vbusy, B->vq[0], sizeof B->vbusy);
        memmove(B->vq[0], B->vq[1], (B->n_vq - 1) * sizeof B->vq[0]);
        B->n_vq--;
        pthread_mutex_unlock(&B->vmu);
        em_batch_info b;
        em_err err = { 0 };
        int done = VALID_RETRY;
        if (em_storage_batch_get(w->o.storage, EM_STORAGE_ANY_KEY, B->vbusy, &b, &err) == 0) {
            done = strcmp(b.status, "validating") != 0 || validate_batch(w, &b) == 0 ? VALID_DONE : VALID_RETRY;
            em_batch_info_clear(&b);
        }
        atomic_fetch_or(&B->validated, done);
        pthread_mutex_lock(&w->mu);   /* wake the service loop: it starts the batch's lines */
        if (!w->closing)
            lws_cancel_service(w->ctx);
        pthread_mutex_unlock(&w->mu);
        pthread_mutex_lock(&B->vmu);
        B->vbusy[0] = 0;
    }
    pthread_mutex_unlock(&B->vmu);
    return NULL;
}

/* Batch id to the validator, unless it is there already. */
static void validate_later(web_batches *B, const char *id)
{
    pthread_mutex_lock(&B->vmu);
    int known = strcmp(B->vbusy, id) == 0;
    for (size_t i = 0; i < B->n_vq && !known; i++)
        known = strcmp(B->vq[i], id) == 0;
    if (!known && B->n_vq < MAX_VQ) {
        snprintf(B->vq[B->n_vq++], sizeof B->vq[0], "%s", id);
        pthread_cond_signal(&B->vcv);
    }
    pthread_mutex_unlock(&B->vmu);
}

/* ---- the runner -------------------------------------------------------------------- */

/* A line's result line (OpenAI's batch output shape). */
static char *result_line(em_web *w, flight *f, int *ok)
{
    int status = 0;
    json_t *body = web_openai_whole(w, f->a, &status);
    char rid[64];
    web_new_id(w, "batch_req_", rid, sizeof rid);
    *ok = status == 200;
    json_t *err = json_null();
    if (!*ok) {
        json_t *e = json_object_get(body, "error");
        json_t *code = json_object_get(e, "code");
        err = json_pack("{s:O, s:O}", "code", json_is_string(code) ? code : json_object_get(e, "type"), "message",
                        json_object_get(e, "message"));
    }
    json_t *j = json_pack("{s:s, s:s, s:{s:i, s:s, s:o}, s:o}", "id", rid, "custom_id", f->custom_id, "response",
                          "status_code", status, "request_id", f->req_id, "body", body, "error", err);
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    return s;
}

/* A line that could not start (its body refused): its error line. */
static char *refused_line(em_web *w, const em_batch_line *l, const em_web_error *e)
{
    char rid[64];
    web_new_id(w, "batch_req_", rid, sizeof rid);
    json_t *body = em_web_error_json(e);
    json_t *j = json_pack("{s:s, s:s, s:{s:i, s:n, s:o}, s:{s:s, s:s}}", "id", rid, "custom_id", l->custom_id,
                          "response", "status_code", e->status, "request_id", "body", body, "error", "code",
                          e->code ? e->code : e->type ? e->type : "invalid_request_error", "message", e->message);
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    return s;
}

/* 0, or -1 when the result could not be stored: the line is still
 * pending, and runs again once the batches are looked at (later). */
static int record(em_web *w, const char *batch, int64_t line, int ok, const char *result)
{
    em_err err = { 0 };
    w->batches->lines_done++;
    if (em_storage_batch_line_done(w->o.storage, batch, line, ok, result ? result : "{}", &err) == 0)
        return 0;
    em_log(EM_LOG_ERROR, NULL, "batch %s: line %lld: its result could not be recorded (it runs again): %s",
           batch, (long long)line, err.msg);
    return -1;
}

/* The device's state: its failed steps so far, and whether it is down
 * (every request then fails at once until a rebuild succeeds). */
static uint64_t device_state(em_web *w, int *down)
{
    em_sched_stats st;
    *down = 0;
    if (!w->o.sched)
        return 0;
    em_sched_get_stats(w->o.sched, &st);
    *down = st.device_down != 0;
    return st.device_failures;
}

/* Count one more device failure under a line; whether it may run again. */
static int dev_retry(web_batches *B, const flight *f)
{
    for (size_t i = 0; i < MAX_FLIGHT; i++)
        if (B->dev_tries[i].n && B->dev_tries[i].line == f->line && !strcmp(B->dev_tries[i].batch, f->batch))
            return ++B->dev_tries[i].n <= DEV_RETRIES;
    size_t i = B->dev_next++ % MAX_FLIGHT;
    memcpy(B->dev_tries[i].batch, f->batch, sizeof B->dev_tries[i].batch);   /* the same size, NUL-ended */
    B->dev_tries[i].line = f->line;
    B->dev_tries[i].n = 1;
    return 1;
}

static void drop_flight(web_batches *B, size_t i)
{
    web_openai_free(B->fl[i].a);
    B->fl[i] = B->fl[--B->n_fl];
}

/* The output and error files of batch b, then its final status. */
static void finalize(em_web *w, const em_batch_info *b, const char *final)
{
    em_err err = { 0 };
    char out_id[EM_STORAGE_FILE_ID_MAX] = "", err_id[EM_STORAGE_FILE_ID_MAX] = "";
    if (strcmp(final, "completed") == 0 && strcmp(b->status, "finalizing") != 0 &&
        em_storage_batch_set_status(w->o.storage, b->id, b->status, "finalizing", NULL, NULL, NULL, &err)) {
        if (err.code != EM_ESTATE)
            later(w->batches);
        return;
    }
    for (int state = 1; state <= 2; state++) {
        char *text = NULL, name[96];
        size_t n = 0;
        if (em_storage_batch_results(w->o.storage, b->id, state, &text, &n, &err)) {
            em_log(EM_LOG_ERROR, NULL, "batch %s: its results cannot be read: %s", b->id, err.msg);
            later(w->batches);
            return;
        }
        em_file_info f;
        snprintf(name, sizeof name, "%s_%s.jsonl", b->id, state == 1 ? "output" : "error");
        /* a finalize cut short (a crash, a failed write) may have left this
         * file: the same results give the same bytes, so it is taken again */
        if (n && em_storage_file_find(w->o.storage, b->key_id, name, "batch_output", &f, NULL) == 0) {
            if (f.bytes == (int64_t)n) {
                snprintf(state == 1 ? out_id : err_id, EM_STORAGE_FILE_ID_MAX, "%s", f.id);
                free(text);
                continue;
            }
            em_storage_file_delete(w->o.storage, b->key_id, f.id, NULL);
        }
        if (n && em_storage_file_add(w->o.storage, b->key_id, name, "batch_output", text, n, &f, &err)) {
            em_log(EM_LOG_ERROR, NULL, "batch %s: its %s file cannot be written: %s", b->id,
                   state == 1 ? "output" : "error", err.msg);
            free(text);
            later(w->batches);
            return;
        }
        if (n)
            snprintf(state == 1 ? out_id : err_id, EM_STORAGE_FILE_ID_MAX, "%s", f.id);
        free(text);
    }
    if (em_storage_batch_set_status(w->o.storage, b->id, NULL, final, NULL, out_id, err_id, &err)) {
        em_log(EM_LOG_ERROR, NULL, "batch %s: %s", b->id, err.msg);
        later(w->batches);
    } else
        em_log(EM_LOG_INFO, NULL, "batch %s: %s", b->id, final);
}

/* Batch b's key was revoked: it is cancelled (its lines in flight too, at
 * the next step), its errors saying why. */
static void key_revoked(em_web *w, const em_batch_info *b)
{
    em_err err = { 0 };
    static const char why[] = "[{\"code\":\"key_revoked\",\"message\":\"the API key that created this batch was "
                              "revoked: no further line runs\",\"param\":null,\"line\":null}]";
    if (em_storage_batch_set_status(w->o.storage, b->id, "in_progress", "cancelling", why, NULL, NULL, &err)) {
        em_log(EM_LOG_ERROR, NULL, "batch %s: %s", b->id, err.msg);
        later(w->batches);
        return;
    }
    em_log(EM_LOG_WARN, NULL, "batch %s: its key %lld was revoked: cancelled", b->id, (long long)b->key_id);
    w->batches->kick = 1;
}

/* Start lines of batch b while there is room. */
static void fill(em_web *w, const em_batch_info *b)
{
    web_batches *B = w->batches;
    int64_t after = -1;
    size_t mine = 0;
    for (size_t i = 0; i < B->n_fl; i++)
        if (strcmp(B->fl[i].batch, b->id) == 0) {
            mine++;
            after = B->fl[i].line > after ? B->fl[i].line : after;
        }
    em_batch_line *lines = NULL;
    size_t n = 0;
    em_err err = { 0 };
    size_t room = B->max_fl - B->n_fl;
    if (room && em_storage_batch_pending(w->o.storage, b->id, after, room, &lines, &n, &err)) {
        em_log(EM_LOG_ERROR, NULL, "batch %s: %s", b->id, err.msg);
        later(B);
        return;
    }
    if (!n && !mine && room) {   /* nothing pending, nothing running: done */
        em_batch_lines_free(lines, n);
        finalize(w, b, "completed");
        return;
    }
    em_web_auth auth = { .key_id = b->key_id, .default_class = EM_CLASS_BACKGROUND };
    em_key_info ki;
    int krc = b->key_id ? em_storage_key_get(w->o.storage, b->key_id, &ki, &err) : EM_EINVAL;
    if (krc == EM_ENOENT || (krc == 0 && ki.revoked_ms)) {   /* its key was revoked: no line starts */
        em_batch_lines_free(lines, n);
        key_revoked(w, b);
        return;
    }
    if (n && krc == 0) {
        snprintf(auth.key_name, sizeof auth.key_name, "%s", ki.name);
        auth.no_cache = !ki.response_cache;   /* the key's cache setting holds for its batches */
    }
    /* No per-key rate limit per line: a key's rate limit guards the
     * interactive capacity against bursts, and a batch's lines are
     * background work the server itself paces (at most max_fl in flight,
     * the background class behind every interactive request); the batch
     * was one request, counted when it was created. */
    int chat = strcmp(b->endpoint, "/v1/chat/completions") == 0;
    int down = 0;
    uint64_t failures = device_state(w, &down);
    for (size_t i = 0; i < n && !down; i++) {   /* (a device down: the lines wait, pending) */
        flight *f = &B->fl[B->n_fl];
        memset(f, 0, sizeof *f);
        f->dev_failures0 = failures;
        snprintf(f->batch, sizeof f->batch, "%s", b->id);
        f->line = lines[i].line;
        snprintf(f->custom_id, sizeof f->custom_id, "%s", lines[i].custom_id);
        web_new_id(w, chat ? "chatcmpl-" : "cmpl-", f->req_id, sizeof f->req_id);
        json_t *req = json_loads(lines[i].body, 0, NULL);
        em_web_error e = { 0 };
        if (web_openai_start(w, req, chat, &auth, "batch", f->req_id, b->id, &f->a, &e)) {
            device_state(w, &down);
            if (down) {   /* refused for the device's sake, not its own: it stays pending */
                json_decref(req);
                break;
            }
            char *res = refused_line(w, &lines[i], &e);
            record(w, b->id, lines[i].line, 0, res);
            free(res);
        } else {
            B->n_fl++;
        }
        json_decref(req);
    }
    if (down)   /* look again in a second */
        later(B);
    em_batch_lines_free(lines, n);
}

void web_batch_step(em_web *w)
{
    web_batches *B = w->batches;
    if (!B || !w->o.storage)
        return;
    for (size_t i = 0; i < B->n_fl;) {   /* lines that finished */
        if (!web_openai_collect(B->fl[i].a)) {
            i++;
            continue;
        }
        int ok = 0, down = 0;
        char *res = result_line(w, &B->fl[i], &ok);
        if (!ok && (device_state(w, &down) != B->fl[i].dev_failures0 || down) && dev_retry(B, &B->fl[i])) {
            /* the device failed under it, or is down: not the line's fault. It
             * stays pending and runs again once the device is back (at most
             * DEV_RETRIES times: a line that fails the device each time fails) */
            em_log(EM_LOG_WARN, B->fl[i].req_id, "batch %s: line %lld: the device failed under it; it runs again "
                   "when the device is back", B->fl[i].batch, (long long)B->fl[i].line);
            later(B);
        } else if (record(w, B->fl[i].batch, B->fl[i].line, ok, res) == 0) {
            B->kick = 1;
        } else {
            later(B);
        }
        free(res);
        drop_flight(B, i);
    }
    int v = atomic_exchange(&B->validated, 0);
    if (v & VALID_DONE)
        B->kick = 1;
    if (v & VALID_RETRY)
        later(B);
    if (B->retry_us && web_now_us() >= B->retry_us) {
        B->retry_us = 0;
        B->kick = 1;
    }
    if (!B->kick || atomic_load(&w->draining))
        return;
    B->kick = 0;
    char (*ids)[EM_STORAGE_BATCH_ID_MAX] = NULL;
    size_t n = 0;
    em_err err = { 0 };
    if (em_storage_batch_active(w->o.storage, &ids, &n, &err)) {
        em_log(EM_LOG_ERROR, NULL, "batches: %s", err.msg);
        later(B);
        return;
    }
    int64_t now = (int64_t)time(NULL) * 1000;
    for (size_t k = 0; k < n; k++) {
        em_batch_info b;
        if (em_storage_batch_get(w->o.storage, EM_STORAGE_ANY_KEY, ids[k], &b, &err))
            continue;
        int cancelling = strcmp(b.status, "cancelling") == 0;
        int expired = strcmp(b.status, "in_progress") == 0 && b.expires_ms && now > b.expires_ms;
        if (cancelling || expired) {   /* stop its lines in flight; final once none is left */
            size_t left = 0;
            for (size_t i = 0; i < B->n_fl; i++)
                if (strcmp(B->fl[i].batch, b.id) == 0) {
                    web_openai_cancel(B->fl[i].a);
                    left++;
                }
            for (size_t i = 0; i < B->n_fl;)   /* a cancelled line's result is not kept: it never finished */
                if (strcmp(B->fl[i].batch, b.id) == 0)
                    drop_flight(B, i);
                else
                    i++;
            (void)left;
            finalize(w, &b, cancelling ? "cancelled" : "expired");
        } else if (strcmp(b.status, "validating") == 0) {
            validate_later(B, b.id);
        } else if (strcmp(b.status, "finalizing") == 0) {
            finalize(w, &b, "completed");
        } else if (strcmp(b.status, "in_progress") == 0) {
            fill(w, &b);
        }
        em_batch_info_clear(&b);
    }
    free(ids);
}

void web_batch_metrics(em_web *w, em_buf *b)
{
    char line[256];
    int n = snprintf(line, sizeof line, "# HELP ember_batch_lines_total Batch lines this server ran to a result "
                     "(succeeded or failed).\n# TYPE ember_batch_lines_total counter\nember_batch_lines_total %llu\n",
                     (unsigned long long)(w->batches ? w->batches->lines_done : 0));
    em_buf_add(b, line, (size_t)n);
    static const char head[] = "# HELP ember_batch_requests The requests of each batch not yet finished: total, "
                               "completed and failed (request_counts).\n# TYPE ember_batch_requests gauge\n";
    char (*ids)[EM_STORAGE_BATCH_ID_MAX] = NULL;
    size_t k = 0;
    em_err err = { 0 };
    if (!w->o.storage || em_storage_batch_active(w->o.storage, &ids, &k, &err))
        return;
    if (k)   /* a family only with samples */
        em_buf_add(b, head, sizeof head - 1);
    for (size_t i = 0; i < k; i++) {
        em_batch_info bi;
        if (em_storage_batch_get(w->o.storage, EM_STORAGE_ANY_KEY, ids[i], &bi, &err))
            continue;
        const char *st[3] = { "total", "completed", "failed" };
        int64_t v[3] = { bi.total, bi.completed, bi.failed };
        for (int j = 0; j < 3; j++) {   /* the id is ours: "batch_" and hex digits, no escaping needed */
            n = snprintf(line, sizeof line, "ember_batch_requests{batch=\"%s\",state=\"%s\"} %lld\n", bi.id, st[j],
                         (long long)v[j]);
            em_buf_add(b, line, (size_t)n);
        }
        em_batch_info_clear(&bi);
    }
    free(ids);
}

int web_batch_create(em_web *w)
{
    if (!(w->batches = calloc(1, sizeof *w->batches)))
        return -1;
    w->batches->kick = 1;   /* the batches a restart interrupted go on */
    size_t m = 2 * (w->o.parallel ? w->o.parallel : 8);
    w->batches->max_fl = m < MAX_FLIGHT ? m : MAX_FLIGHT;
    pthread_mutex_init(&w->batches->vmu, NULL);
    pthread_cond_init(&w->batches->vcv, NULL);
    if (w->o.storage && pthread_create(&w->batches->vthr, NULL, validator, w) == 0)
        w->batches->vthr_up = 1;
    else if (w->o.storage)
        return -1;
    return 0;
}

void web_batch_destroy(em_web *w)
{
    web_batches *B = w->batches;
    if (!B)
        return;
    if (B->vthr_up) {   /* a batch being validated finishes it; those waiting validate at the next start */
        pthread_mutex_lock(&B->vmu);
        B->vstop = 1;
        pthread_cond_signal(&B->vcv);
        pthread_mutex_unlock(&B->vmu);
        pthread_join(B->vthr, NULL);
    }
    pthread_mutex_destroy(&B->vmu);
    pthread_cond_destroy(&B->vcv);
    while (B->n_fl)   /* their lines stay pending: they run again at the next start */
        drop_flight(B, B->n_fl - 1);
    free(B);
    w->batches = NULL;
}

/* ---- the API ------------------------------------------------------------------- */

static int create(web_conn *c, const em_web_auth *a)
{
    json_error_t je;
    json_t *req = c->body.n ? json_loadb(c->body.s, c->body.n, JSON_REJECT_DUPLICATES, &je) : NULL;
    char msg[300];
    if (!json_is_object(req)) {
        json_decref(req);
        return answer(c, 400, "invalid_request_error", NULL, NULL, "the body must be a JSON object");
    }
    const char *k;
    json_t *v;
    json_object_foreach(req, k, v) {
        if (strcmp(k, "input_file_id") && strcmp(k, "endpoint") && strcmp(k, "completion_window") &&
            strcmp(k, "metadata")) {
            snprintf(msg, sizeof msg, "unknown parameter '%.64s' (input_file_id, endpoint, completion_window, "
                     "metadata)", k);
            json_decref(req);
            return answer(c, 400, "invalid_request_error", "unknown_parameter", k, msg);
        }
    }
    json_t *file = json_object_get(req, "input_file_id"), *ep = json_object_get(req, "endpoint"),
           *win = json_object_get(req, "completion_window"), *meta = json_object_get(req, "metadata");
    const char *bad = NULL, *why = NULL;
    if (!json_is_string(file))
        bad = "input_file_id", why = "'input_file_id' is required: the id of a file uploaded with purpose batch";
    else if (!json_is_string(ep) || (strcmp(json_string_value(ep), "/v1/chat/completions") &&
                                     strcmp(json_string_value(ep), "/v1/completions")))
        bad = "endpoint", why = "'endpoint' must be \"/v1/chat/completions\" or \"/v1/completions\"";
    else if (!json_is_string(win) || strcmp(json_string_value(win), "24h"))
        bad = "completion_window", why = "'completion_window' must be \"24h\"";
    else if (meta && !json_is_null(meta)) {
        if (!json_is_object(meta) || json_object_size(meta) > 16)
            bad = "metadata", why = "'metadata' must be an object of at most 16 string values";
        json_object_foreach(meta, k, v)
            if (!bad && (strlen(k) > 64 || !json_is_string(v) || json_string_length(v) > 512))
                bad = "metadata", why = "'metadata': keys of at most 64 bytes, string values of at most 512";
    }
    if (bad) {
        json_decref(req);
        return answer(c, 400, "invalid_request_error", NULL, bad, why);
    }
    em_file_info f;
    em_err err = { 0 };
    int64_t scope = a->admin ? EM_STORAGE_ANY_KEY : a->key_id;
    int rc = em_storage_file_get(c->w->o.storage, scope, json_string_value(file), &f, &err);
    if (rc == 0 && strcmp(f.purpose, "batch") != 0)
        rc = EM_EINVAL;
    if (rc) {
        snprintf(msg, sizeof msg, rc == EM_EINVAL ? "file %.64s is not a batch input (purpose %s)"
                                                  : "No such File object: %.64s", json_string_value(file),
                 rc == EM_EINVAL ? f.purpose : "");
        json_decref(req);
        return answer(c, rc == EM_EINVAL ? 400 : 404, "invalid_request_error", rc == EM_EINVAL ? NULL : "not_found",
                      "input_file_id", msg);
    }
    char *mtxt = meta && json_is_object(meta) ? json_dumps(meta, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    em_batch_info b;
    rc = em_storage_batch_create(c->w->o.storage, a->key_id, json_string_value(ep), f.id, "24h", mtxt, &b, &err);
    free(mtxt);
    json_decref(req);
    if (rc)
        return storage_error(c, rc, "", &err);
    validate_later(c->w->batches, b.id);   /* answered now, as validating */
    char id[EM_STORAGE_BATCH_ID_MAX];
    snprintf(id, sizeof id, "%s", b.id);
    em_batch_info_clear(&b);
    return respond_batch(c, id);
}

static int list(web_conn *c, const em_web_auth *a)
{
    char after[EM_STORAGE_BATCH_ID_MAX + 8] = "", frag[128];
    long limit = 20;
    for (int i = 0; lws_hdr_copy_fragment(c->wsi, frag, sizeof frag, WSI_TOKEN_HTTP_URI_ARGS, i) >= 0; i++) {
        char *eq = strchr(frag, '=');
        char *end = NULL;
        if (eq && strncmp(frag, "after=", 6) == 0) {
            snprintf(after, sizeof after, "%s", eq + 1);
        } else if (eq && strncmp(frag, "limit=", 6) == 0 && (limit = strtol(eq + 1, &end, 10), !*end) &&
                   limit >= 1 && limit <= 100) {
        } else {
            return answer(c, 400, "invalid_request_error", NULL, eq && strncmp(frag, "limit=", 6) == 0 ? "limit" : NULL,
                          "the query takes limit (1 to 100) and after (a batch id)");
        }
    }
    em_batch_info *v = NULL;
    size_t n = 0;
    int more = 0;
    em_err err = { 0 };
    int rc = em_storage_batch_list(c->w->o.storage, a->admin ? EM_STORAGE_ANY_KEY : a->key_id,
                                   after[0] ? after : NULL, (size_t)limit, &v, &n, &more, &err);
    if (rc)
        return storage_error(c, rc, after, &err);
    json_t *data = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(data, batch_json(&v[i]));
    web_respond_list(c, data, n ? v[0].id : NULL, n ? v[n - 1].id : NULL, more);
    for (size_t i = 0; i < n; i++)
        em_batch_info_clear(&v[i]);
    free(v);
    return 0;
}

static int cancel(web_conn *c, const em_web_auth *a, const char *id)
{
    em_batch_info b;
    em_err err = { 0 };
    int rc = em_storage_batch_get(c->w->o.storage, a->admin ? EM_STORAGE_ANY_KEY : a->key_id, id, &b, &err);
    if (rc)
        return storage_error(c, rc, id, &err);
    const char *from = strcmp(b.status, "in_progress") == 0 || strcmp(b.status, "validating") == 0 ? b.status : NULL;
    em_batch_info_clear(&b);
    if (!from) {
        char msg[200];
        snprintf(msg, sizeof msg, "batch %s cannot be cancelled: it is %s", id, b.status);
        return answer(c, 409, "invalid_request_error", NULL, NULL, msg);
    }
    if ((rc = em_storage_batch_set_status(c->w->o.storage, id, from, "cancelling", NULL, NULL, NULL, &err)))
        return storage_error(c, rc, id, &err);
    c->w->batches->kick = 1;
    web_batch_step(c->w);   /* its lines in flight stop now */
    return respond_batch(c, id);
}

int web_batch_route(web_conn *c)
{
    const char *p = c->path;
    if (strncmp(p, PREFIX, PREFIX_LEN) != 0 || (p[PREFIX_LEN] && p[PREFIX_LEN] != '/'))
        return 1;
    em_web_error e = { 0 };
    em_web_auth a;
    if (web_auth(c->w, c, &a, &e)) {
        web_respond_error(c, &e);
        return 0;
    }
    if (!c->w->o.storage || !c->w->batches)
        return answer(c, 503, "server_error", NULL, NULL, "this server runs no batches (no database)");
    const char *rest = p + PREFIX_LEN;
    int m = c->method;
    if (!*rest || strcmp(rest, "/") == 0) {
        if (m == EM_M_POST)   /* a batch is one request of its key's rate (its lines are not: see fill) */
            return web_drain_refuse(c->w, &e) || web_rate_check(c->w, &a, &e) ? (web_respond_error(c, &e), 0)
                                                                               : create(c, &a);
        return m == EM_M_GET ? list(c, &a) : answer(c, 405, "invalid_request_error", "method_not_allowed", NULL,
                                                    PREFIX " takes GET or POST");
    }
    char id[EM_STORAGE_BATCH_ID_MAX + 8];
    const char *slash = strchr(rest + 1, '/');
    size_t il = slash ? (size_t)(slash - rest - 1) : strlen(rest + 1);
    if (!il || il >= sizeof id)
        return answer(c, 404, "invalid_request_error", "not_found", "id", "No such Batch object");
    memcpy(id, rest + 1, il);
    id[il] = 0;
    if (slash && strcmp(slash, "/cancel") == 0)
        return m == EM_M_POST ? cancel(c, &a, id)
                              : answer(c, 405, "invalid_request_error", "method_not_allowed", NULL,
                                       PREFIX "/ID/cancel takes POST");
    if (slash)
        return answer(c, 404, "invalid_request_error", "not_found", NULL, "no such route");
    if (m != EM_M_GET)
        return answer(c, 405, "invalid_request_error", "method_not_allowed", NULL, PREFIX "/ID takes GET");
    em_batch_info b;
    em_err err = { 0 };
    int rc = em_storage_batch_get(c->w->o.storage, a.admin ? EM_STORAGE_ANY_KEY : a.key_id, id, &b, &err);
    if (rc)
        return storage_error(c, rc, id, &err);
    json_t *j = batch_json(&b);
    em_batch_info_clear(&b);
    web_respond_json(c, 200, j);
    json_decref(j);
    return 0;
}
