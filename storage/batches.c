/* batches.c — the Batch API's batches (storage.h "batches"): the batch rows
 * with OpenAI's status and counts, their lines with bodies and results. A
 * line's result and the batch's count move together in one transaction,
 * which is what makes a batch resumable after a crash: pending lines run
 * again, recorded ones never do. */
#include "storage/storage_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#define LINES_PER_TXN 500   /* em_storage_batch_start: lines stored per transaction */

#define BATCH_COLUMNS                                                                                   \
    "id, coalesce(key_id, 0), endpoint, input_file_id, completion_window, metadata, status,"           \
    " coalesce(output_file_id, ''), coalesce(error_file_id, ''), errors, total, completed, failed,"    \
    " created_ms, coalesce(in_progress_ms, 0), coalesce(expires_ms, 0), coalesce(finalizing_ms, 0),"   \
    " coalesce(completed_ms, 0), coalesce(failed_ms, 0), coalesce(expired_ms, 0),"                     \
    " coalesce(cancelling_ms, 0), coalesce(cancelled_ms, 0)"

static int64_t now_ms(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

void em_batch_info_clear(em_batch_info *b)
{
    if (!b)
        return;
    free(b->metadata);
    free(b->errors);
    b->metadata = b->errors = NULL;
}

void em_batch_lines_free(em_batch_line *v, size_t n)
{
    for (size_t i = 0; v && i < n; i++)
        free(v[i].body);
    free(v);
}

static char *dup_text(sqlite3_stmt *s, int col)
{
    if (sqlite3_column_type(s, col) == SQLITE_NULL)
        return NULL;
    const unsigned char *t = sqlite3_column_text(s, col);
    return t ? strdup((const char *)t) : NULL;
}

static void batch_row(sqlite3_stmt *s, em_batch_info *b)
{
    memset(b, 0, sizeof *b);
    snprintf(b->id, sizeof b->id, "%s", (const char *)sqlite3_column_text(s, 0));
    b->key_id = sqlite3_column_int64(s, 1);
    snprintf(b->endpoint, sizeof b->endpoint, "%s", (const char *)sqlite3_column_text(s, 2));
    snprintf(b->input_file_id, sizeof b->input_file_id, "%s", (const char *)sqlite3_column_text(s, 3));
    snprintf(b->completion_window, sizeof b->completion_window, "%s", (const char *)sqlite3_column_text(s, 4));
    b->metadata = dup_text(s, 5);
    snprintf(b->status, sizeof b->status, "%s", (const char *)sqlite3_column_text(s, 6));
    snprintf(b->output_file_id, sizeof b->output_file_id, "%s", (const char *)sqlite3_column_text(s, 7));
    snprintf(b->error_file_id, sizeof b->error_file_id, "%s", (const char *)sqlite3_column_text(s, 8));
    b->errors = dup_text(s, 9);
    b->total = sqlite3_column_int64(s, 10);
    b->completed = sqlite3_column_int64(s, 11);
    b->failed = sqlite3_column_int64(s, 12);
    int64_t *t[] = { &b->created_ms, &b->in_progress_ms, &b->expires_ms, &b->finalizing_ms, &b->completed_ms,
                     &b->failed_ms, &b->expired_ms, &b->cancelling_ms, &b->cancelled_ms };
    for (int i = 0; i < 9; i++)
        *t[i] = sqlite3_column_int64(s, 13 + i);
}

static int id_ok(const char *id)
{
    return em_sto_id_ok(id, "batch_");
}

static int no_batch(const char *id, em_err *err)
{
    return em_err_set(err, EM_ENOENT, "batch %.64s does not exist", id);
}

int em_storage_batch_create(em_storage *st, int64_t key_id, const char *endpoint, const char *input_file_id,
                            const char *window, const char *metadata, em_batch_info *out, em_err *err)
{
    char id[EM_STORAGE_BATCH_ID_MAX];
    int ret, rc = SQLITE_OK;
    if ((ret = em_sto_new_id("batch_", id, sizeof id, err)) || (ret = em_sto_ops_begin(st, err)))
        return ret;
    sqlite3_stmt *s = em_sto_prep(st, EM_STMT_BATCH_INSERT,
                                  "INSERT INTO batches (id, key_id, endpoint, input_file_id, completion_window,"
                                  " metadata, status, created_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'validating', ?7)",
                                  &ret, err);
    if (s) {
        sqlite3_bind_text(s, 1, id, -1, SQLITE_TRANSIENT);
        em_sto_bind_key(s, 2, key_id);
        sqlite3_bind_text(s, 3, endpoint, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(s, 4, input_file_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(s, 5, window, -1, SQLITE_TRANSIENT);
        if (metadata)
            sqlite3_bind_text(s, 6, metadata, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(s, 7, now_ms());
        ret = em_sto_step_done(st, s, &rc, "recording a batch", err);
    }
    em_sto_ops_end(st, rc);
    return ret ? ret : em_storage_batch_get(st, EM_STORAGE_ANY_KEY, id, out, err);
}

int em_storage_batch_get(em_storage *st, int64_t key_id, const char *id, em_batch_info *out, em_err *err)
{
    memset(out, 0, sizeof *out);
    if (!id_ok(id))
        return no_batch(id, err);
    int ret, rc = SQLITE_OK;
    if ((ret = em_sto_ops_begin(st, err)))
        return ret;
    sqlite3_stmt *s = em_sto_prep(st, EM_STMT_BATCH_GET,
                                  "SELECT " BATCH_COLUMNS " FROM batches WHERE id = ?1 AND (?2 OR key_id IS ?3)",
                                  &ret, err);
    if (s) {
        sqlite3_bind_text(s, 1, id, -1, SQLITE_TRANSIENT);
        em_sto_bind_scope(s, 2, key_id);
        int r = sqlite3_step(s);
        if (r == SQLITE_ROW)
            batch_row(s, out);
        else if (r == SQLITE_DONE)
            ret = no_batch(id, err);
        else
            ret = em_sto_fail(st->ops.db, rc = r, st->path, "reading a batch", err);
        sqlite3_reset(s);
        sqlite3_clear_bindings(s);
    }
    em_sto_ops_end(st, rc);
    return ret;
}

int em_storage_batch_list(em_storage *st, int64_t key_id, const char *after, size_t limit, em_batch_info **out,
                          size_t *n, int *more, em_err *err)
{
    *out = NULL;
    *n = 0;
    *more = 0;
    em_batch_info cursor = { 0 };
    int ret = 0, rc = SQLITE_OK;
    if (after && (ret = em_storage_batch_get(st, key_id, after, &cursor, err)))
        return ret;
    em_batch_info_clear(&cursor);
    if (!(*out = calloc(limit ? limit : 1, sizeof **out)))
        return em_err_set(err, EM_ENOMEM, "batches: out of memory");
    if ((ret = em_sto_ops_begin(st, err)))
        return ret;
    sqlite3_stmt *s = em_sto_prep(st, EM_STMT_BATCH_LIST,
                                  "SELECT " BATCH_COLUMNS " FROM batches WHERE (?1 OR key_id IS ?2)"
                                  " AND (?3 IS NULL OR (created_ms, id) < (?4, ?3))"
                                  " ORDER BY created_ms DESC, id DESC LIMIT ?5", &ret, err);
    if (s) {
        em_sto_bind_scope(s, 1, key_id);
        if (after) {
            sqlite3_bind_text(s, 3, cursor.id, -1, SQLITE_TRANSIENT);
            sqlite3_bind_int64(s, 4, cursor.created_ms);
        }
        sqlite3_bind_int64(s, 5, (int64_t)limit + 1);
        int r;
        while ((r = sqlite3_step(s)) == SQLITE_ROW) {
            if (*n == limit) {
                *more = 1;
                continue;
            }
            batch_row(s, &(*out)[(*n)++]);
        }
        if (r != SQLITE_DONE)
            ret = em_sto_fail(st->ops.db, rc = r, st->path, "listing batches", err);
        sqlite3_reset(s);
        sqlite3_clear_bindings(s);
    }
    em_sto_ops_end(st, rc);
    if (ret) {
        for (size_t i = 0; i < *n; i++)
            em_batch_info_clear(&(*out)[i]);
        free(*out);
        *out = NULL;
        *n = 0;
    }
    return ret;
}

/* UPDATE the status if it is `from` (NULL: not a final one); changes in *changed. */
static int set_status(em_storage *st, const char *id, const char *from, const char *status, const char *errors,
                      const char *out_id, const char *err_id, int64_t expires_ms, int *changed, int *rc,
                      em_err *err)
{
    int ret = 0;
    sqlite3_stmt *s = em_sto_prep(st, EM_STMT_BATCH_SET_STATUS,
                                  "UPDATE batches SET status = ?2,"
                                  " errors = coalesce(?4, errors),"
                                  " output_file_id = coalesce(nullif(?5, ''), output_file_id),"
                                  " error_file_id = coalesce(nullif(?6, ''), error_file_id),"
                                  " expires_ms = coalesce(?8, expires_ms),"
                                  " in_progress_ms = CASE WHEN ?2 = 'in_progress' THEN ?7 ELSE in_progress_ms END,"
                                  " finalizing_ms = CASE WHEN ?2 = 'finalizing' THEN ?7 ELSE finalizing_ms END,"
                                  " completed_ms = CASE WHEN ?2 = 'completed' THEN ?7 ELSE completed_ms END,"
                                  " failed_ms = CASE WHEN ?2 = 'failed' THEN ?7 ELSE failed_ms END,"
                                  " expired_ms = CASE WHEN ?2 = 'expired' THEN ?7 ELSE expired_ms END,"
                                  " cancelling_ms = CASE WHEN ?2 = 'cancelling' THEN ?7 ELSE cancelling_ms END,"
                                  " cancelled_ms = CASE WHEN ?2 = 'cancelled' THEN ?7 ELSE cancelled_ms END"
                                  " WHERE id = ?1 AND (CASE WHEN ?3 IS NULL THEN status NOT IN"
                                  " ('failed', 'completed', 'expired', 'cancelled') ELSE status = ?3 END)",
                                  &ret, err);
    if (!s)
        return ret;
    sqlite3_bind_text(s, 1, id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 2, status, -1, SQLITE_TRANSIENT);
    if (from)
        sqlite3_bind_text(s, 3, from, -1, SQLITE_TRANSIENT);
    if (errors)
        sqlite3_bind_text(s, 4, errors, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 5, out_id ? out_id : "", -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 6, err_id ? err_id : "", -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(s, 7, now_ms());
    if (expires_ms)
        sqlite3_bind_int64(s, 8, expires_ms);
    if ((ret = em_sto_step_done(st, s, rc, "changing a batch's status", err)))
        return ret;
    *changed = sqlite3_changes(st->ops.db);
    return 0;
}

int em_storage_batch_set_status(em_storage *st, const char *id, const char *from, const char *status,
                                const char *errors, const char *output_file_id, const char *error_file_id,
                                em_err *err)
{
    int ret, rc = SQLITE_OK, changed = 0;
    if ((ret = em_sto_ops_begin(st, err)))
        return ret;
    ret = set_status(st, id, from, status, errors, output_file_id, error_file_id, 0, &changed, &rc, err);
    em_sto_ops_end(st, rc);
    if (!ret && !changed)
        ret = em_err_set(err, EM_ESTATE, "batch %s is not %s", id, from ? from : "running");
    return ret;
}

int em_storage_batch_start(em_storage *st, const char *id, const em_batch_line *lines, size_t n, int64_t window_ms,
                           em_err *err)
{
    em_batch_info b;
    int ret = em_storage_batch_get(st, EM_STORAGE_ANY_KEY, id, &b, err), rc = SQLITE_OK, changed = 0;
    if (ret)
        return ret;
    int validating = strcmp(b.status, "validating") == 0;
    em_batch_info_clear(&b);
    if (!validating)   /* its lines, if any, are not to be touched */
        return em_err_set(err, EM_ESTATE, "batch %s is no longer validating", id);
    /* the lines in chunks, each its own transaction, so that other users of
     * the connection wait at most one chunk; a line stored before (a restart
     * that validates again) is replaced by the same line */
    for (size_t at = 0; at < n; at += LINES_PER_TXN) {
        if ((ret = em_sto_ops_begin(st, err)))
            return ret;
        rc = SQLITE_OK;
        ret = em_sto_txn(st, EM_STMT_OPS_BEGIN, &rc, err);
        sqlite3_stmt *s = ret ? NULL : em_sto_prep(st, EM_STMT_BATCH_LINE_INSERT,
                                                   "INSERT OR REPLACE INTO batch_lines (batch_id, line, custom_id, body)"
                                                   " VALUES (?1, ?2, ?3, ?4)", &ret, err);
        for (size_t i = at; s && !ret && i < n && i < at + LINES_PER_TXN; i++) {
            sqlite3_bind_text(s, 1, id, -1, SQLITE_TRANSIENT);
            sqlite3_bind_int64(s, 2, lines[i].line);
            sqlite3_bind_text(s, 3, lines[i].custom_id, -1, SQLITE_TRANSIENT);
            sqlite3_bind_text(s, 4, lines[i].body, -1, SQLITE_TRANSIENT);
            ret = em_sto_step_done(st, s, &rc, "storing a batch's lines", err);
        }
        if (!ret)
            ret = em_sto_txn(st, EM_STMT_OPS_COMMIT, &rc, err);
        if (ret)
            em_sto_txn_abort(st);
        em_sto_ops_end(st, rc);
        if (ret)
            return ret;
        /* a thread waiting for the connection gets it now: a mutex is not
         * fair, and taking it straight back would starve the service thread */
        struct timespec pause = { 0, 200 * 1000 };
        nanosleep(&pause, NULL);
    }
    /* then, in one transaction, in progress with its count */
    if ((ret = em_sto_ops_begin(st, err)))
        return ret;
    rc = SQLITE_OK;
    if ((ret = em_sto_txn(st, EM_STMT_OPS_BEGIN, &rc, err)))
        goto done;
    if (!ret)
        ret = set_status(st, id, "validating", "in_progress", NULL, NULL, NULL, b.created_ms + window_ms, &changed,
                         &rc, err);
    if (!ret && !changed) {   /* cancelled meanwhile: its lines will never run */
        sqlite3_stmt *d = em_sto_prep(st, EM_STMT_BATCH_LINES_DROP, "DELETE FROM batch_lines WHERE batch_id = ?1",
                                      &ret, err);
        if (d) {
            sqlite3_bind_text(d, 1, id, -1, SQLITE_TRANSIENT);
            ret = em_sto_step_done(st, d, &rc, "dropping a cancelled batch's lines", err);
        }
        if (!ret && !(ret = em_sto_txn(st, EM_STMT_OPS_COMMIT, &rc, err)))
            ret = em_err_set(err, EM_ESTATE, "batch %s is no longer validating", id);
        else
            em_sto_txn_abort(st);
        goto done;
    }
    if (!ret) {
        sqlite3_stmt *t = em_sto_prep(st, EM_STMT_BATCH_COUNT_DONE,
                                      "UPDATE batches SET total = ?2, completed = ?3, failed = ?4 WHERE id = ?1",
                                      &ret, err);
        if (t) {
            sqlite3_bind_text(t, 1, id, -1, SQLITE_TRANSIENT);
            sqlite3_bind_int64(t, 2, (int64_t)n);
            sqlite3_bind_int64(t, 3, 0);
            sqlite3_bind_int64(t, 4, 0);
            ret = em_sto_step_done(st, t, &rc, "counting a batch's lines", err);
        }
    }
    if (!ret)
        ret = em_sto_txn(st, EM_STMT_OPS_COMMIT, &rc, err);
    if (ret)
        em_sto_txn_abort(st);
done:
    em_sto_ops_end(st, rc);
    return ret;
}

int em_storage_batch_pending(em_storage *st, const char *id, int64_t after, size_t max, em_batch_line **out,
                             size_t *n, em_err *err)
{
    *out = NULL;
    *n = 0;
    if (!(*out = calloc(max ? max : 1, sizeof **out)))
        return em_err_set(err, EM_ENOMEM, "batches: out of memory");
    int ret, rc = SQLITE_OK;
    if ((ret = em_sto_ops_begin(st, err)))
        return ret;
    sqlite3_stmt *s = em_sto_prep(st, EM_STMT_BATCH_PENDING,
                                  "SELECT line, custom_id, body FROM batch_lines WHERE batch_id = ?1 AND state = 0"
                                  " AND line > ?2 ORDER BY line LIMIT ?3", &ret, err);
    if (s) {
        sqlite3_bind_text(s, 1, id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(s, 2, after);
        sqlite3_bind_int64(s, 3, (int64_t)max);
        int r;
        while ((r = sqlite3_step(s)) == SQLITE_ROW && *n < max) {
            em_batch_line *l = &(*out)[*n];
            l->line = sqlite3_column_int64(s, 0);
            snprintf(l->custom_id, sizeof l->custom_id, "%s", (const char *)sqlite3_column_text(s, 1));
            if (!(l->body = dup_text(s, 2))) {
                ret = em_err_set(err, EM_ENOMEM, "batches: out of memory");
                break;
            }
            (*n)++;
        }
        if (!ret && r != SQLITE_DONE && r != SQLITE_ROW)
            ret = em_sto_fail(st->ops.db, rc = r, st->path, "reading a batch's lines", err);
        sqlite3_reset(s);
        sqlite3_clear_bindings(s);
    }
    em_sto_ops_end(st, rc);
    if (ret) {
        em_batch_lines_free(*out, *n);
        *out = NULL;
        *n = 0;
    }
    return ret;
}

int em_storage_batch_line_done(em_storage *st, const char *id, int64_t line, int ok, const char *result,
                               em_err *err)
{
    int ret, rc = SQLITE_OK;
    if ((ret = em_sto_ops_begin(st, err)))
        return ret;
    if ((ret = em_sto_txn(st, EM_STMT_OPS_BEGIN, &rc, err)))
        goto done;
    sqlite3_stmt *s = em_sto_prep(st, EM_STMT_BATCH_LINE_DONE,
                                  "UPDATE batch_lines SET state = ?3, result = ?4 WHERE batch_id = ?1 AND line = ?2"
                                  " AND state = 0", &ret, err);
    if (s) {
        sqlite3_bind_text(s, 1, id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(s, 2, line);
        sqlite3_bind_int(s, 3, ok ? 1 : 2);
        sqlite3_bind_text(s, 4, result, -1, SQLITE_TRANSIENT);
        ret = em_sto_step_done(st, s, &rc, "recording a batch line", err);
    }
    if (!ret && sqlite3_changes(st->ops.db) == 1) {   /* recorded now: counted with it */
        sqlite3_stmt *t = em_sto_prep(st, EM_STMT_BATCH_BUMP,
                                      "UPDATE batches SET completed = completed + ?2, failed = failed + ?3"
                                      " WHERE id = ?1", &ret, err);
        if (t) {
            sqlite3_bind_text(t, 1, id, -1, SQLITE_TRANSIENT);
            sqlite3_bind_int(t, 2, ok != 0);
            sqlite3_bind_int(t, 3, ok == 0);
            ret = em_sto_step_done(st, t, &rc, "counting a batch line", err);
        }
    }
    if (!ret)
        ret = em_sto_txn(st, EM_STMT_OPS_COMMIT, &rc, err);
    if (ret)
        em_sto_txn_abort(st);
done:
    em_sto_ops_end(st, rc);
    return ret;
}

int em_storage_batch_active(em_storage *st, char (**ids)[EM_STORAGE_BATCH_ID_MAX], size_t *n, em_err *err)
{
    *ids = NULL;
    *n = 0;
    size_t cap = 0;
    int ret, rc = SQLITE_OK;
    if ((ret = em_sto_ops_begin(st, err)))
        return ret;
    sqlite3_stmt *s = em_sto_prep(st, EM_STMT_BATCH_ACTIVE,
                                  "SELECT id FROM batches WHERE status IN ('validating', 'in_progress', 'finalizing',"
                                  " 'cancelling') ORDER BY created_ms, id", &ret, err);
    if (s) {
        int r;
        while ((r = sqlite3_step(s)) == SQLITE_ROW) {
            if (*n == cap) {
                size_t nc = cap ? 2 * cap : 16;
                char (*nv)[EM_STORAGE_BATCH_ID_MAX] = realloc(*ids, nc * sizeof **ids);
                if (!nv) {
                    ret = em_err_set(err, EM_ENOMEM, "batches: out of memory");
                    break;
                }
                *ids = nv;
                cap = nc;
            }
            snprintf((*ids)[(*n)++], EM_STORAGE_BATCH_ID_MAX, "%s", (const char *)sqlite3_column_text(s, 0));
        }
        if (!ret && r != SQLITE_DONE)
            ret = em_sto_fail(st->ops.db, rc = r, st->path, "listing running batches", err);
        sqlite3_reset(s);
    }
    em_sto_ops_end(st, rc);
    if (ret) {
        free(*ids);
        *ids = NULL;
        *n = 0;
    }
    return ret;
}

int em_storage_batch_results(em_storage *st, const char *id, int state, char **text, size_t *n, em_err *err)
{
    *text = NULL;
    *n = 0;
    size_t cap = 256;
    char *buf = malloc(cap);
    if (!buf)
        return em_err_set(err, EM_ENOMEM, "batches: out of memory");
    buf[0] = 0;
    int ret, rc = SQLITE_OK;
    if ((ret = em_sto_ops_begin(st, err))) {
        free(buf);
        return ret;
    }
    sqlite3_stmt *s = em_sto_prep(st, EM_STMT_BATCH_RESULTS,
                                  "SELECT result FROM batch_lines WHERE batch_id = ?1 AND state = ?2 ORDER BY line",
                                  &ret, err);
    if (s) {
        sqlite3_bind_text(s, 1, id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int(s, 2, state);
        int r;
        while ((r = sqlite3_step(s)) == SQLITE_ROW) {
            size_t l = (size_t)sqlite3_column_bytes(s, 0);
            const unsigned char *t = sqlite3_column_text(s, 0);
            if (*n + l + 2 > cap) {
                size_t nc = cap;
                while (*n + l + 2 > nc)
                    nc *= 2;
                char *nb = realloc(buf, nc);
                if (!nb) {
                    ret = em_err_set(err, EM_ENOMEM, "batches: out of memory");
                    break;
                }
                buf = nb;
                cap = nc;
            }
            memcpy(buf + *n, t ? (const char *)t : "", l);
            *n += l;
            buf[(*n)++] = '\n';
            buf[*n] = 0;
        }
        if (!ret && r != SQLITE_DONE)
            ret = em_sto_fail(st->ops.db, rc = r, st->path, "reading a batch's results", err);
        sqlite3_reset(s);
        sqlite3_clear_bindings(s);
    }
    em_sto_ops_end(st, rc);
    if (ret) {
        free(buf);
        *n = 0;
        return ret;
    }
    *text = buf;
    return 0;
}
