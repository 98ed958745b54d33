/* writer.c — the usage-ledger writer: a bounded queue that em_storage_submit
 * fills without ever waiting on disk, and a thread that owns the write
 * connection and commits the queue in batches (every batch_rows rows or
 * batch_ms after the oldest arrived). When a batch fails (full disk,
 * read-only or locked file, corruption) the batch is kept, storage reports
 * degraded, and the thread reopens its connection and retries every
 * retry_ms; meanwhile the queue keeps accepting records and drops (and
 * counts) what does not fit. A row dropped so, or still unwritten when the
 * ledger closes on a failing database, is logged with its billing facts
 * (log_lost). Also: health, counters, flush. */
#include "storage/storage_int.h"

#include "core/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RETENTION_EVERY_MS (3600 * 1000LL)

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Wait on cv until the monotonic deadline (ns) or a signal. */
static void wait_until(pthread_cond_t *cv, pthread_mutex_t *m, int64_t deadline_ns)
{
    struct timespec ts = { (time_t)(deadline_ns / 1000000000LL),
                           (long)(deadline_ns % 1000000000LL) };
    pthread_cond_timedwait(cv, m, &ts);
}

/* Caller holds st->lock. */
static void set_error_locked(em_storage *st, const char *msg)
{
    snprintf(st->ctr.last_error, sizeof st->ctr.last_error, "%s", msg);
    st->ctr.last_error_ms = em_storage_now_ms();
}

/* Caller holds st->lock. */
static void set_degraded_locked(em_storage *st, const char *reason)
{
    if (!st->health.degraded)
        st->health.since_ms = em_storage_now_ms();
    st->health.degraded = 1;
    snprintf(st->health.reason, sizeof st->health.reason, "%s", reason);
    set_error_locked(st, reason);
}

void em_sto_set_degraded(em_storage *st, const char *reason)
{
    pthread_mutex_lock(&st->lock);
    set_degraded_locked(st, reason);
    pthread_mutex_unlock(&st->lock);
}

/* A row the ledger will never hold (its queue full, or the database still
 * failing when it closes): its billing facts go to the log instead, one
 * line per request, so that none is lost without a trace. */
static void log_lost(const em_usage_record *r, const char *why)
{
    em_log(EM_LOG_ERROR, r->request_id,
           "ledger: row not written (%s): key %lld, %s, %s, %lld prompt tokens (%lld cached), %lld completion "
           "tokens, received_ms %lld, finished_ms %lld, client %s%s%s",
           why, (long long)r->key_id, em_storage_class_name(r->cls), em_storage_status_name(r->status),
           (long long)r->prompt_tokens, (long long)r->cached_tokens, (long long)r->completion_tokens,
           (long long)r->received_ms, (long long)r->finished_ms, r->client_addr[0] ? r->client_addr : "?",
           r->batch_id[0] ? ", batch " : "", r->batch_id);
}

/* The rows still queued (the batch, then the ring) as the ledger gives up
 * on them: each request once, in its last state (a later row of the same
 * request, as "completed" after "admitted", replaces the earlier). Holds
 * lock. */
static const em_usage_record *queued_at(const em_storage *st, size_t i)
{
    return i < st->inflight ? &st->batch[i] : &st->ring[(st->head + i - st->inflight) % st->cap];
}

static void log_unwritten(const em_storage *st, const char *why)
{
    size_t n = st->inflight + st->count;
    for (size_t i = 0; i < n; i++) {
        const em_usage_record *r = queued_at(st, i);
        size_t j = i + 1;
        while (j < n && strcmp(queued_at(st, j)->request_id, r->request_id) != 0)
            j++;
        if (j == n)
            log_lost(r, why);
    }
}

static void copy_str(char *dst, size_t cap, const char *src)
{
    size_t n = strnlen(src, cap - 1);
    memcpy(dst, src, n);
    dst[n] = 0;
}

int em_storage_submit(em_storage *st, const em_usage_record *rec)
{
    int ret = 0;
    pthread_mutex_lock(&st->lock);
    if (!rec || !rec->request_id[0]) {
        st->ctr.rows_dropped++;
        ret = EM_EINVAL;
        goto done;
    }
    if (st->count == st->cap || st->stop) {
        st->ctr.rows_dropped++;
        log_lost(rec, st->stop ? "the ledger is closing" : "the ledger's queue is full");
        ret = EM_EBUSY;
        goto done;
    }
    size_t at = (st->head + st->count) % st->cap;
    em_usage_record *r = &st->ring[at];
    *r = *rec;
    /* The caller's arrays may lack a terminator: make every string one. */
    copy_str(r->request_id, sizeof r->request_id, rec->request_id);
    copy_str(r->client_addr, sizeof r->client_addr, rec->client_addr);
    copy_str(r->model, sizeof r->model, rec->model);
    copy_str(r->finish_reason, sizeof r->finish_reason, rec->finish_reason);
    copy_str(r->error, sizeof r->error, rec->error);
    copy_str(r->batch_id, sizeof r->batch_id, rec->batch_id);
    copy_str(r->endpoint, sizeof r->endpoint, rec->endpoint);
    st->ring_ns[at] = mono_ns();
    st->count++;
    st->enq_seq++;
    if (st->count == 1 || st->count >= (size_t)st->opts.batch_rows)
        pthread_cond_signal(&st->wake);
done:
    pthread_mutex_unlock(&st->lock);
    return ret;
}

static void bind_opt_i64(sqlite3_stmt *s, int i, int64_t v)
{
    if (v > 0)
        sqlite3_bind_int64(s, i, v);
    else
        sqlite3_bind_null(s, i);
}

static void bind_opt_ms(sqlite3_stmt *s, int i, double v)
{
    if (v >= 0)
        sqlite3_bind_double(s, i, v);
    else
        sqlite3_bind_null(s, i);
}

static void bind_opt_text(sqlite3_stmt *s, int i, const char *v)
{
    if (v[0])
        sqlite3_bind_text(s, i, v, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(s, i);
}

/* Later records for a request replace earlier ones; unknown (NULL) values
 * keep what was there. */
static const char upsert_sql[] =
    "INSERT INTO requests (request_id, key_id, client_addr, class, model,"
    "  received_ms, started_ms, first_token_ms, finished_ms, status,"
    "  prompt_tokens, cached_tokens, completion_tokens, queue_ms, ttft_ms,"
    "  tpot_mean_ms, tpot_p99_ms, preemptions, finish_reason, error, batch_id, response_cached,"
    "  endpoint, reasoning_tokens, tool_calls)"
    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15,"
    "  ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25)"
    " ON CONFLICT (request_id) DO UPDATE SET"
    "  key_id = coalesce(excluded.key_id, key_id),"
    "  client_addr = coalesce(excluded.client_addr, client_addr),"
    "  class = excluded.class,"
    "  model = coalesce(excluded.model, model),"
    "  received_ms = CASE WHEN excluded.received_ms > 0 THEN excluded.received_ms"
    "                ELSE received_ms END,"
    "  started_ms = coalesce(excluded.started_ms, started_ms),"
    "  first_token_ms = coalesce(excluded.first_token_ms, first_token_ms),"
    "  finished_ms = coalesce(excluded.finished_ms, finished_ms),"
    "  status = excluded.status,"
    "  prompt_tokens = excluded.prompt_tokens,"
    "  cached_tokens = excluded.cached_tokens,"
    "  completion_tokens = excluded.completion_tokens,"
    "  queue_ms = coalesce(excluded.queue_ms, queue_ms),"
    "  ttft_ms = coalesce(excluded.ttft_ms, ttft_ms),"
    "  tpot_mean_ms = coalesce(excluded.tpot_mean_ms, tpot_mean_ms),"
    "  tpot_p99_ms = coalesce(excluded.tpot_p99_ms, tpot_p99_ms),"
    "  preemptions = excluded.preemptions,"
    "  finish_reason = coalesce(excluded.finish_reason, finish_reason),"
    "  error = coalesce(excluded.error, error),"
    "  batch_id = coalesce(excluded.batch_id, batch_id),"
    "  response_cached = excluded.response_cached,"
    "  endpoint = coalesce(excluded.endpoint, endpoint),"
    "  reasoning_tokens = excluded.reasoning_tokens,"
    "  tool_calls = excluded.tool_calls";

static void bind_record(sqlite3_stmt *s, const em_usage_record *r)
{
    sqlite3_bind_text(s, 1, r->request_id, -1, SQLITE_STATIC);
    bind_opt_i64(s, 2, r->key_id);
    bind_opt_text(s, 3, r->client_addr);
    sqlite3_bind_text(s, 4, em_storage_class_name(r->cls), -1, SQLITE_STATIC);
    bind_opt_text(s, 5, r->model);
    sqlite3_bind_int64(s, 6, r->received_ms > 0 ? r->received_ms : 0);
    bind_opt_i64(s, 7, r->started_ms);
    bind_opt_i64(s, 8, r->first_token_ms);
    bind_opt_i64(s, 9, r->finished_ms);
    sqlite3_bind_text(s, 10, em_storage_status_name(r->status), -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 11, r->prompt_tokens);
    sqlite3_bind_int64(s, 12, r->cached_tokens);
    sqlite3_bind_int64(s, 13, r->completion_tokens);
    bind_opt_ms(s, 14, r->queue_ms);
    bind_opt_ms(s, 15, r->ttft_ms);
    bind_opt_ms(s, 16, r->tpot_mean_ms);
    bind_opt_ms(s, 17, r->tpot_p99_ms);
    sqlite3_bind_int(s, 18, r->preemptions);
    bind_opt_text(s, 19, r->finish_reason);
    bind_opt_text(s, 20, r->error);
    bind_opt_text(s, 21, r->batch_id);
    sqlite3_bind_int(s, 22, r->response_cached != 0);
    bind_opt_text(s, 23, r->endpoint);
    sqlite3_bind_int64(s, 24, r->reasoning_tokens);
    sqlite3_bind_int(s, 25, r->tool_calls);
}

static int step_done(sqlite3_stmt *s)
{
    int rc = sqlite3_step(s);
    sqlite3_reset(s);
    return rc == SQLITE_DONE || rc == SQLITE_ROW ? SQLITE_OK : rc;
}

/* Make sure the writer connection is open and usable. Reconnecting after a
 * failure closes every connection this process holds on the file (the ops
 * one too; it reopens on its next use): SQLite shares per-file state between
 * a process's connections (the -shm mapping, held descriptors), and a file
 * that was read-only or replaced is only seen afresh once all are closed. */
static int writer_connect(em_storage *st, em_err *err)
{
    if (st->w.db && !st->w.broken && !st->w.readonly)
        return 0;
    if (st->w.db || st->w_failed) {
        em_sto_conn_close(&st->w);
        pthread_mutex_lock(&st->ops_lock);
        em_sto_conn_close(&st->ops);
        pthread_mutex_unlock(&st->ops_lock);
    }
    st->w_failed = 1;   /* cleared once connected */
    em_sto_conn_params p = {
        .path = st->path, .create = st->opts.create, .migrate = 1,
        .busy_ms = st->opts.busy_ms, .max_pages = st->opts.max_pages,
    };
    int ret = em_sto_conn_open(&p, &st->w, err);
    if (ret == 0 && st->w.readonly) {
        ret = em_err_set(err, EM_EIO, "%s: the database file is read-only", st->path);
        em_sto_conn_close(&st->w);
    }
    if (ret == 0)
        st->w_failed = 0;
    return ret;
}

/* Can the writer write? Take the write lock and let it go. */
static int writer_probe(em_storage *st, em_err *err)
{
    int ret = writer_connect(st, err);
    if (ret)
        return ret;
    sqlite3_stmt *b = em_sto_stmt(&st->w, EM_STMT_W_BEGIN, "BEGIN IMMEDIATE", st->path, err);
    sqlite3_stmt *r = b ? em_sto_stmt(&st->w, EM_STMT_W_ROLLBACK, "ROLLBACK", st->path, err)
                        : NULL;
    if (!b || !r) {
        st->w.broken = 1;
        return err ? err->code : EM_EIO;
    }
    int rc = step_done(b);
    if (rc != SQLITE_OK) {
        st->w.broken = 1;
        return em_sto_fail(st->w.db, rc, st->path, NULL, err);
    }
    step_done(r);
    return 0;
}

/* Write batch[0..n) in one transaction. Rows the database refuses on their
 * own (constraint) are skipped and counted in *n_rejected; anything else
 * fails the whole batch. Committed rows are listed in st->batch_ok. */
static int write_batch(em_storage *st, size_t n, size_t *n_ok, size_t *n_rejected,
                       char *reject_msg, size_t reject_cap, em_err *err)
{
    int ret = 0, rc = SQLITE_OK;
    *n_ok = *n_rejected = 0;
    if ((ret = writer_connect(st, err)))
        return ret;
    em_sto_conn *c = &st->w;
    sqlite3_stmt *up = em_sto_stmt(c, EM_STMT_W_UPSERT, upsert_sql, st->path, err);
    sqlite3_stmt *begin = up ? em_sto_stmt(c, EM_STMT_W_BEGIN, "BEGIN IMMEDIATE", st->path, err)
                             : NULL;
    sqlite3_stmt *commit = begin ? em_sto_stmt(c, EM_STMT_W_COMMIT, "COMMIT", st->path, err)
                                 : NULL;
    sqlite3_stmt *rollback = commit ? em_sto_stmt(c, EM_STMT_W_ROLLBACK, "ROLLBACK", st->path, err)
                                    : NULL;
    if (!rollback) {
        c->broken = 1;
        ret = err && err->code ? err->code : EM_EIO;
        goto done;
    }
    if ((rc = step_done(begin)) != SQLITE_OK)
        goto done;
    for (size_t i = 0; i < n; i++) {
        sqlite3_reset(up);
        sqlite3_clear_bindings(up);
        bind_record(up, &st->batch[i]);
        rc = sqlite3_step(up);
        if (rc == SQLITE_DONE) {
            st->batch_ok[(*n_ok)++] = &st->batch[i];
            rc = SQLITE_OK;
            continue;
        }
        if (!em_sto_conn_fault(rc)) {   /* this row only: skip it */
            snprintf(reject_msg, reject_cap, "%s: request %s: %s", st->path,
                     st->batch[i].request_id, sqlite3_errmsg(c->db));
            (*n_rejected)++;
            rc = SQLITE_OK;
            continue;
        }
        goto done;
    }
    rc = step_done(commit);
done:
    if (up)
        sqlite3_reset(up);
    if (rc != SQLITE_OK) {
        ret = em_sto_fail(c->db, rc, st->path, NULL, err);
        if (c->db && !sqlite3_get_autocommit(c->db))
            step_done(rollback);
        c->broken = 1;   /* reopen on retry: the fault may be in the file itself */
        *n_ok = *n_rejected = 0;
    }
    return ret;
}

/* Move up to batch_rows records from the ring into the batch. Holds lock. */
static void take_batch(em_storage *st)
{
    size_t k = st->count < (size_t)st->opts.batch_rows ? st->count : (size_t)st->opts.batch_rows;
    for (size_t i = 0; i < k; i++)
        st->batch[i] = st->ring[(st->head + i) % st->cap];
    st->head = (st->head + k) % st->cap;
    st->count -= k;
    st->inflight = k;
}

static void run_retention(em_storage *st)
{
    em_err e = { 0 };
    if (em_storage_retention_run(st, em_storage_now_ms(), NULL, &e)) {
        pthread_mutex_lock(&st->lock);
        set_error_locked(st, e.msg);
        pthread_mutex_unlock(&st->lock);
    }
}

static void *writer_main(void *arg)
{
    em_storage *st = arg;
    const int64_t batch_ns = (int64_t)st->opts.batch_ms * 1000000LL;
    const int64_t retry_ns = (int64_t)st->opts.retry_ms * 1000000LL;
    const int retention = st->opts.retention_days > 0;
    int64_t retry_at = 0, retention_at = mono_ns() + RETENTION_EVERY_MS * 1000000LL;
    int need_probe = 1;
    char reject_msg[256];

    if (retention)
        run_retention(st);
    pthread_mutex_lock(&st->lock);
    for (;;) {
        int64_t now = mono_ns();
        if (need_probe && !st->stop && st->inflight == 0 && st->count == 0) {
            need_probe = 0;
            pthread_mutex_unlock(&st->lock);
            em_err e = { 0 };
            int rc = writer_probe(st, &e);
            pthread_mutex_lock(&st->lock);
            if (rc) {
                set_degraded_locked(st, e.msg);
                retry_at = mono_ns() + retry_ns;
            } else {
                st->health.degraded = 0;
                st->health.reason[0] = 0;
                st->health.since_ms = 0;
            }
            continue;
        }
        if (retention && now >= retention_at && !st->stop) {
            retention_at = now + RETENTION_EVERY_MS * 1000000LL;
            pthread_mutex_unlock(&st->lock);
            run_retention(st);
            pthread_mutex_lock(&st->lock);
            continue;
        }
        if (st->inflight == 0 && st->count > 0) {
            int64_t due = st->ring_ns[st->head] + batch_ns;
            if (st->stop || st->flush_waiters || st->count >= (size_t)st->opts.batch_rows ||
                now >= due) {
                take_batch(st);
            } else {
                wait_until(&st->wake, &st->lock, due);
                continue;
            }
        }
        if (st->inflight > 0) {
            if (st->health.degraded && !st->stop && !st->flush_waiters && now < retry_at) {
                wait_until(&st->wake, &st->lock, retry_at);
                continue;
            }
            size_t n = st->inflight, n_ok = 0, n_rej = 0;
            pthread_mutex_unlock(&st->lock);
            em_err e = { 0 };
            reject_msg[0] = 0;
            int rc = write_batch(st, n, &n_ok, &n_rej, reject_msg, sizeof reject_msg, &e);
            if (rc == 0 && n_ok && st->opts.on_commit)
                st->opts.on_commit(st->opts.on_commit_ctx, st->batch_ok, n_ok);
            pthread_mutex_lock(&st->lock);
            if (rc == 0) {
                st->inflight = 0;
                st->done_seq += n;
                st->ctr.rows_written += n_ok;
                st->ctr.rows_dropped += n_rej;
                st->ctr.batches++;
                if (n_rej)
                    set_error_locked(st, reject_msg);
                st->health.degraded = 0;
                st->health.reason[0] = 0;
                st->health.since_ms = 0;
            } else {
                st->ctr.write_errors++;
                st->fail_gen++;
                set_degraded_locked(st, e.msg);
                retry_at = mono_ns() + retry_ns;
                if (st->stop) {   /* closing: what cannot be written goes to the log */
                    char why[sizeof st->health.reason + 40];
                    snprintf(why, sizeof why, "the database failed as the ledger closed: %s", e.msg);
                    log_unwritten(st, why);
                    st->ctr.rows_dropped += st->inflight + st->count;
                    st->done_seq += st->inflight + st->count;
                    st->inflight = st->count = 0;
                }
            }
            pthread_cond_broadcast(&st->done);
            continue;
        }
        if (st->stop)
            break;
        /* Idle. Degraded without a batch (e.g. opened read-only): probe. */
        int64_t until = retention ? retention_at : 0;
        if (st->health.degraded) {
            if (now >= retry_at) {
                need_probe = 1;
                continue;
            }
            if (!until || retry_at < until)
                until = retry_at;
        }
        if (until)
            wait_until(&st->wake, &st->lock, until);
        else
            pthread_cond_wait(&st->wake, &st->lock);
    }
    pthread_mutex_unlock(&st->lock);
    em_sto_conn_close(&st->w);
    return NULL;
}

int em_sto_writer_start(em_storage *st, em_err *err)
{
    int rc = pthread_create(&st->thread, NULL, writer_main, st);
    if (rc)
        return em_err_set(err, EM_ENOMEM, "%s: cannot start the writer thread: %s", st->path,
                          strerror(rc));
    st->thread_started = 1;
    return 0;
}

void em_sto_writer_stop(em_storage *st)
{
    if (!st->thread_started)
        return;
    pthread_mutex_lock(&st->lock);
    st->stop = 1;
    pthread_cond_broadcast(&st->wake);
    pthread_mutex_unlock(&st->lock);
    pthread_join(st->thread, NULL);
    st->thread_started = 0;
}

int em_storage_flush(em_storage *st, int timeout_ms, em_err *err)
{
    int ret = 0;
    int64_t deadline = timeout_ms < 0 ? 0 : mono_ns() + (int64_t)timeout_ms * 1000000LL;
    pthread_mutex_lock(&st->lock);
    uint64_t target = st->enq_seq, fail0 = st->fail_gen;
    st->flush_waiters++;
    pthread_cond_signal(&st->wake);
    while (st->done_seq < target) {
        if (st->fail_gen != fail0) {
            ret = em_err_set(err, EM_EIO, "%s", st->health.reason[0] ? st->health.reason
                                                                      : "the ledger write failed");
            goto done;
        }
        if (deadline && mono_ns() >= deadline) {
            ret = em_err_set(err, EM_EBUSY, "%s: flush timed out with %zu records waiting",
                             st->path, st->count + st->inflight);
            goto done;
        }
        if (deadline)
            wait_until(&st->done, &st->lock, deadline);
        else
            pthread_cond_wait(&st->done, &st->lock);
    }
done:
    st->flush_waiters--;
    pthread_mutex_unlock(&st->lock);
    return ret;
}

void em_storage_health_get(em_storage *st, em_storage_health *out)
{
    pthread_mutex_lock(&st->lock);
    *out = st->health;
    pthread_mutex_unlock(&st->lock);
}

void em_storage_counters_get(em_storage *st, em_storage_counters *out)
{
    pthread_mutex_lock(&st->lock);
    *out = st->ctr;
    out->queue_depth = st->count + st->inflight;
    out->queue_cap = st->cap;
    out->degraded = st->health.degraded;
    pthread_mutex_unlock(&st->lock);
}
