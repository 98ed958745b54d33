/* cache.c — the response cache's rows (storage.h "the response cache"): a
 * whole response by its key and model fingerprint, marked as used on each
 * hit, evicted least recently used first past a byte bound, dropped for
 * another model. */
#include "storage/storage_int.h"

#include <stdlib.h>
#include <string.h>

int em_storage_cache_get(em_storage *st, const unsigned char *key, const char *model, char **body, size_t *len,
                         em_err *err)
{
    *body = NULL;
    *len = 0;
    int ret, rc = SQLITE_OK;
    if ((ret = em_sto_ops_begin(st, err)))
        return ret;
    sqlite3_stmt *s = em_sto_prep(st, EM_STMT_CACHE_GET,
                                  "SELECT body FROM response_cache WHERE key = ?1 AND model = ?2", &ret, err);
    if (s) {
        sqlite3_bind_blob(s, 1, key, EM_STORAGE_CACHE_KEY, SQLITE_TRANSIENT);
        sqlite3_bind_text(s, 2, model, -1, SQLITE_TRANSIENT);
        int r = sqlite3_step(s);
        if (r == SQLITE_ROW) {
            size_t n = (size_t)sqlite3_column_bytes(s, 0);
            const unsigned char *t = sqlite3_column_text(s, 0);
            if ((*body = malloc(n + 1))) {
                memcpy(*body, t ? (const char *)t : "", n);
                (*body)[n] = 0;
                *len = n;
            } else {
                ret = em_err_set(err, EM_ENOMEM, "cache: out of memory");
            }
        } else if (r == SQLITE_DONE) {
            ret = em_err_set(err, EM_ENOENT, "not cached");
        } else {
            ret = em_sto_fail(st->ops.db, rc = r, st->path, "reading the response cache", err);
        }
        sqlite3_reset(s);
        sqlite3_clear_bindings(s);
    }
    if (!ret) {
        sqlite3_stmt *t = em_sto_prep(st, EM_STMT_CACHE_TOUCH,
                                      "UPDATE response_cache SET last_used_ms = ?2, hits = hits + 1 WHERE key = ?1",
                                      &ret, err);
        if (t) {
            sqlite3_bind_blob(t, 1, key, EM_STORAGE_CACHE_KEY, SQLITE_TRANSIENT);
            sqlite3_bind_int64(t, 2, em_storage_now_ms());
            ret = em_sto_step_done(st, t, &rc, "marking a cached response used", err);
        }
        if (ret) {
            free(*body);
            *body = NULL;
            *len = 0;
        }
    }
    em_sto_ops_end(st, rc);
    return ret;
}

int em_storage_cache_put(em_storage *st, const unsigned char *key, const char *model, const char *body, size_t len,
                         int64_t max_bytes, uint64_t *evicted, em_err *err)
{
    if (evicted)
        *evicted = 0;
    int ret, rc = SQLITE_OK;
    if ((ret = em_sto_ops_begin(st, err)))
        return ret;
    sqlite3_stmt *s = em_sto_prep(st, EM_STMT_CACHE_PUT,
                                  "INSERT OR REPLACE INTO response_cache (key, model, body, bytes, created_ms,"
                                  " last_used_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?5)", &ret, err);
    if (s) {
        sqlite3_bind_blob(s, 1, key, EM_STORAGE_CACHE_KEY, SQLITE_TRANSIENT);
        sqlite3_bind_text(s, 2, model, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(s, 3, body, (int)len, SQLITE_TRANSIENT);
        sqlite3_bind_int64(s, 4, (int64_t)len);
        sqlite3_bind_int64(s, 5, em_storage_now_ms());
        ret = em_sto_step_done(st, s, &rc, "storing a cached response", err);
    }
    /* least recently used first, while over the bound */
    for (int guard = 0; !ret && guard < 100000; guard++) {
        sqlite3_stmt *t = em_sto_prep(st, EM_STMT_CACHE_TOTAL, "SELECT coalesce(sum(bytes), 0) FROM response_cache",
                                      &ret, err);
        if (!t)
            break;
        int64_t total = sqlite3_step(t) == SQLITE_ROW ? sqlite3_column_int64(t, 0) : 0;
        sqlite3_reset(t);
        if (total <= max_bytes)
            break;
        sqlite3_stmt *e = em_sto_prep(st, EM_STMT_CACHE_EVICT,
                                      "DELETE FROM response_cache WHERE key = (SELECT key FROM response_cache"
                                      " ORDER BY last_used_ms, created_ms LIMIT 1)", &ret, err);
        if (!e || (ret = em_sto_step_done(st, e, &rc, "evicting a cached response", err)))
            break;
        if (sqlite3_changes(st->ops.db) == 0)
            break;
        if (evicted)
            (*evicted)++;
    }
    em_sto_ops_end(st, rc);
    return ret;
}

int em_storage_cache_retain(em_storage *st, const char *model, uint64_t *removed, em_err *err)
{
    *removed = 0;
    int ret, rc = SQLITE_OK;
    if ((ret = em_sto_ops_begin(st, err)))
        return ret;
    sqlite3_stmt *s = em_sto_prep(st, EM_STMT_CACHE_CLEAR, "DELETE FROM response_cache WHERE model != ?1", &ret, err);
    if (s) {
        sqlite3_bind_text(s, 1, model, -1, SQLITE_TRANSIENT);
        if (!(ret = em_sto_step_done(st, s, &rc, "clearing the response cache", err)))
            *removed = (uint64_t)sqlite3_changes(st->ops.db);
    }
    em_sto_ops_end(st, rc);
    return ret;
}

int em_storage_cache_size(em_storage *st, int64_t *rows, int64_t *bytes, em_err *err)
{
    *rows = *bytes = 0;
    int ret, rc = SQLITE_OK;
    if ((ret = em_sto_ops_begin(st, err)))
        return ret;
    sqlite3_stmt *s = em_sto_prep(st, EM_STMT_CACHE_SIZE,
                                  "SELECT count(*), coalesce(sum(bytes), 0) FROM response_cache", &ret, err);
    if (s) {
        int r = sqlite3_step(s);
        if (r == SQLITE_ROW) {
            *rows = sqlite3_column_int64(s, 0);
            *bytes = sqlite3_column_int64(s, 1);
        } else {
            ret = em_sto_fail(st->ops.db, rc = r, st->path, "measuring the response cache", err);
        }
        sqlite3_reset(s);
    }
    em_sto_ops_end(st, rc);
    return ret;
}
