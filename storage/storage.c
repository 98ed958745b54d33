/* storage.c — opening and closing an em_storage (connections, writer
 * thread), the shared "ops" connection used by keys and conversations,
 * maintenance (retention, interrupted requests) and the name tables. */
#include "storage/storage_int.h"

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void em_storage_opts_init(em_storage_opts *o)
{
    memset(o, 0, sizeof *o);
    o->path = "ember.db";
    o->create = 1;
    o->store_content = 1;
    o->retention_days = 0;
    o->queue_cap = 4096;
    o->batch_rows = 256;
    o->batch_ms = 200;
    o->retry_ms = 1000;
    o->busy_ms = 2000;
    o->max_pages = 0;
    o->quick_check = 1;
}

void em_usage_record_init(em_usage_record *rec)
{
    memset(rec, 0, sizeof *rec);
    rec->cls = EM_USAGE_INTERACTIVE;
    rec->status = EM_USAGE_ADMITTED;
    rec->queue_ms = rec->ttft_ms = rec->tpot_mean_ms = rec->tpot_p99_ms = -1.0;
}

int64_t em_storage_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

const char *em_storage_class_name(em_usage_class c)
{
    return c == EM_USAGE_BACKGROUND ? "background" : "interactive";
}

int em_storage_class_parse(const char *s, em_usage_class *out)
{
    if (s && strcmp(s, "interactive") == 0)
        *out = EM_USAGE_INTERACTIVE;
    else if (s && strcmp(s, "background") == 0)
        *out = EM_USAGE_BACKGROUND;
    else
        return EM_EINVAL;
    return 0;
}

const char *em_storage_status_name(em_usage_status s)
{
    switch (s) {
    case EM_USAGE_ADMITTED:            return "admitted";
    case EM_USAGE_COMPLETED:           return "completed";
    case EM_USAGE_PREEMPTED_COMPLETED: return "preempted_completed";
    case EM_USAGE_CANCELLED:           return "cancelled";
    case EM_USAGE_FAILED:              return "failed";
    case EM_USAGE_REJECTED:            return "rejected";
    case EM_USAGE_INTERRUPTED:         return "interrupted";
    }
    return "failed";
}

const char *em_storage_path(const em_storage *st)
{
    return st->path;
}

static em_sto_conn_params ops_params(const em_storage *st, int first)
{
    em_sto_conn_params p = {
        .path = st->path, .create = st->opts.create, .migrate = 1,
        .quick_check = first && st->opts.quick_check,
        .busy_ms = st->opts.busy_ms, .max_pages = st->opts.max_pages,
    };
    return p;
}

int em_sto_ops_begin(em_storage *st, em_err *err)
{
    pthread_mutex_lock(&st->ops_lock);
    if (st->ops.db && !st->ops.broken)
        return 0;
    em_sto_conn_close(&st->ops);
    em_sto_conn_params p = ops_params(st, 0);
    int ret = em_sto_conn_open(&p, &st->ops, err);
    if (ret)
        pthread_mutex_unlock(&st->ops_lock);
    return ret;
}

void em_sto_ops_end(em_storage *st, int sqlite_rc)
{
    if (sqlite_rc != SQLITE_OK && em_sto_conn_fault(sqlite_rc))
        st->ops.broken = 1;
    /* A read-only connection stays read-only: reopen it once a write failed,
     * so that a file made writable again is picked up. */
    if ((sqlite_rc & 0xff) == SQLITE_READONLY)
        st->ops.broken = 1;
    pthread_mutex_unlock(&st->ops_lock);
}

static int check_opts(const em_storage_opts *o, em_err *err)
{
    if (!o || !o->path || !o->path[0])
        return em_err_set(err, EM_EINVAL, "storage: no database path");
    if (o->queue_cap < 1 || o->batch_rows < 1 || o->batch_ms < 0 || o->retry_ms < 0 ||
        o->busy_ms < 0 || o->retention_days < 0 || o->max_pages < 0)
        return em_err_set(err, EM_EINVAL, "%s: storage options out of range", o->path);
    return 0;
}

int em_storage_open(const em_storage_opts *opts, em_storage **out, em_err *err)
{
    int ret = 0;
    em_storage *st = NULL;
    pthread_condattr_t ca;
    *out = NULL;
    if ((ret = check_opts(opts, err)))
        goto fail;
    if (sodium_init() < 0) {
        ret = em_err_set(err, EM_EIO, "storage: libsodium failed to initialise");
        goto fail;
    }
    st = calloc(1, sizeof *st);
    if (!st) {
        ret = em_err_set(err, EM_ENOMEM, "%s: out of memory", opts->path);
        goto fail;
    }
    pthread_mutex_init(&st->ops_lock, NULL);
    pthread_mutex_init(&st->lock, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&st->wake, &ca);
    pthread_cond_init(&st->done, &ca);
    pthread_condattr_destroy(&ca);

    st->opts = *opts;
    st->path = strdup(opts->path);
    st->cap = (size_t)opts->queue_cap;
    st->ring = calloc(st->cap, sizeof *st->ring);
    st->ring_ns = calloc(st->cap, sizeof *st->ring_ns);
    st->batch = calloc((size_t)opts->batch_rows, sizeof *st->batch);
    st->batch_ok = calloc((size_t)opts->batch_rows, sizeof *st->batch_ok);
    if (!st->path || !st->ring || !st->ring_ns || !st->batch || !st->batch_ok) {
        ret = em_err_set(err, EM_ENOMEM, "%s: out of memory", opts->path);
        goto fail;
    }
    st->opts.path = st->path;

    em_sto_conn_params p = ops_params(st, 1);
    if ((ret = em_sto_conn_open(&p, &st->ops, err)))
        goto fail;
    if (st->ops.readonly) {
        char why[300];
        snprintf(why, sizeof why, "%s: the database file is read-only", st->path);
        em_sto_set_degraded(st, why);
    }
    if ((ret = em_sto_writer_start(st, err)))
        goto fail;
    *out = st;
    return 0;
fail:
    em_storage_close(st);
    return ret;
}

void em_storage_close(em_storage *st)
{
    if (!st)
        return;
    em_sto_writer_stop(st);
    em_sto_conn_close(&st->w);
    em_sto_conn_close(&st->ops);
    pthread_cond_destroy(&st->wake);
    pthread_cond_destroy(&st->done);
    pthread_mutex_destroy(&st->lock);
    pthread_mutex_destroy(&st->ops_lock);
    free(st->ring);
    free(st->ring_ns);
    free(st->batch);
    free(st->batch_ok);
    free(st->path);
    free(st);
}

int em_storage_mark_interrupted(em_storage *st, int64_t *n, em_err *err)
{
    int ret, rc = SQLITE_OK;
    if (n)
        *n = 0;
    if ((ret = em_sto_ops_begin(st, err)))
        return ret;
    sqlite3_stmt *s = em_sto_stmt(&st->ops, EM_STMT_MARK_INTERRUPTED,
                                  "UPDATE requests SET status = 'interrupted'"
                                  " WHERE status = 'admitted'",
                                  st->path, err);
    if (!s) {
        ret = err ? err->code : EM_EIO;
        goto done;
    }
    rc = sqlite3_step(s);
    sqlite3_reset(s);
    if (rc != SQLITE_DONE) {
        ret = em_sto_fail(st->ops.db, rc, st->path, "marking interrupted requests", err);
        goto done;
    }
    rc = SQLITE_OK;
    if (n)
        *n = sqlite3_changes64(st->ops.db);
done:
    em_sto_ops_end(st, rc);
    return ret;
}

/* Run the delete in slot (sql: one bound parameter, the cutoff) and add
 * the rows it removed to *n. */
static int retention_delete(em_storage *st, int slot, const char *sql, int64_t cutoff, int64_t *n, int *rc,
                            const char *what, em_err *err)
{
    int ret = 0;
    sqlite3_stmt *s = em_sto_prep(st, slot, sql, &ret, err);
    if (!s)
        return ret;
    sqlite3_bind_int64(s, 1, cutoff);
    if ((ret = em_sto_step_done(st, s, rc, what, err)))
        return ret;
    *n += sqlite3_changes64(st->ops.db);
    return 0;
}

int em_storage_retention_run(em_storage *st, int64_t now_ms, int64_t *deleted, em_err *err)
{
    int ret, rc = SQLITE_OK;
    int64_t n = 0;
    if (deleted)
        *deleted = 0;
    if (st->opts.retention_days <= 0)
        return 0;
    if ((ret = em_sto_ops_begin(st, err)))
        return ret;
    int64_t cutoff = now_ms - (int64_t)st->opts.retention_days * 86400000LL;
    /* Messages go with their conversation (ON DELETE CASCADE); both tables
     * in one transaction. */
    if (!(ret = em_sto_txn(st, EM_STMT_OPS_BEGIN, &rc, err)) &&
        !(ret = retention_delete(st, EM_STMT_RETENTION, "DELETE FROM conversations WHERE updated_ms < ?1", cutoff,
                                 &n, &rc, "deleting expired conversations", err)) &&
        !(ret = retention_delete(st, EM_STMT_RETENTION_RESPONSES, "DELETE FROM responses WHERE created_ms < ?1",
                                 cutoff, &n, &rc, "deleting expired responses", err)))
        ret = em_sto_txn(st, EM_STMT_OPS_COMMIT, &rc, err);
    if (ret) {
        em_sto_txn_abort(st);
        n = 0;
    }
    if (deleted)
        *deleted = n;
    em_sto_ops_end(st, rc);
    return ret;
}
