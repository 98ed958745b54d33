/* responses.c — stored responses of the Responses API (storage.h
 * "responses"): one row per response id with the caller's three JSON texts,
 * scoped per key like files and conversations (key_id 0: no key, stored as
 * NULL), refused with the content switch off, deleted by retention
 * (storage.c) by created_ms. */
#include "storage/storage_int.h"

#include <stdlib.h>
#include <string.h>

static int no_response(const char *id, em_err *err)
{
    return em_err_set(err, EM_ENOENT, "response %.64s does not exist", id ? id : "");
}

/* Bind text (borrowed: every statement here is reset and cleared before
 * the call returns, so SQLite need not copy it). */
static void bind_text(sqlite3_stmt *s, int i, const char *t)
{
    sqlite3_bind_text64(s, i, t, (sqlite3_uint64)strlen(t), SQLITE_STATIC, SQLITE_UTF8);
}

/* Take the ops connection and prepare the statement of slot with id bound
 * at ?1 and key_id at ?2. 0: *s ready and ops held (em_sto_ops_end);
 * otherwise nothing is held. */
static int begin(em_storage *st, int slot, const char *sql, const char *id, int64_t key_id, sqlite3_stmt **s,
                 em_err *err)
{
    int ret = em_sto_ops_begin(st, err);
    if (ret)
        return ret;
    if (!(*s = em_sto_prep(st, slot, sql, &ret, err))) {
        em_sto_ops_end(st, SQLITE_OK);
        return ret;
    }
    bind_text(*s, 1, id);
    em_sto_bind_key(*s, 2, key_id);
    return 0;
}

int em_storage_response_put(em_storage *st, const char *id, int64_t key_id, int64_t created_ms,
                            const char *conversation, const char *input, const char *response, em_err *err)
{
    if (!id || !*id || strlen(id) >= EM_STORAGE_RESPONSE_ID_MAX)
        return em_err_set(err, EM_EINVAL, "response id: 1 to %d bytes", EM_STORAGE_RESPONSE_ID_MAX - 1);
    if (key_id < 0)
        return em_err_set(err, EM_EINVAL, "response %s: no key %lld", id, (long long)key_id);
    if (!conversation || !input || !response)
        return em_err_set(err, EM_EINVAL, "response %s: conversation, input and response are required", id);
    if (!st->opts.store_content)
        return em_err_set(err, EM_ESTATE, "%s: storing responses is switched off (store_content)", st->path);
    int ret, rc = SQLITE_OK;
    sqlite3_stmt *s;
    if ((ret = begin(st, EM_STMT_RESP_INSERT,
                     "INSERT INTO responses (id, key_id, created_ms, conversation, input, response)"
                     " VALUES (?1, ?2, ?3, ?4, ?5, ?6)", id, key_id, &s, err)))
        return ret;
    sqlite3_bind_int64(s, 3, created_ms);
    bind_text(s, 4, conversation);
    bind_text(s, 5, input);
    bind_text(s, 6, response);
    ret = em_sto_step_done(st, s, &rc, "storing a response", err);
    em_sto_ops_end(st, rc);
    if (ret && (rc & 0xff) == SQLITE_CONSTRAINT)
        ret = em_err_set(err, EM_EINVAL, "response %s: the id is taken", id);
    return ret;
}

int em_storage_response_get(em_storage *st, const char *id, int64_t key_id, char **conversation, char **input,
                            char **response, em_err *err)
{
    char **out[3] = { conversation, input, response };
    for (int i = 0; i < 3; i++)
        if (out[i])
            *out[i] = NULL;
    if (!id || key_id < 0)
        return no_response(id, err);
    int ret, rc = SQLITE_OK;
    sqlite3_stmt *s;
    if ((ret = begin(st, EM_STMT_RESP_GET, "SELECT conversation, input, response FROM responses"
                     " WHERE id = ?1 AND key_id IS ?2", id, key_id, &s, err)))
        return ret;
    int r = sqlite3_step(s);
    if (r == SQLITE_ROW) {
        for (int i = 0; i < 3 && !ret; i++)
            if (out[i] && !(*out[i] = em_sto_column_dup(s, i)))
                ret = em_err_set(err, EM_ENOMEM, "response %s: out of memory", id);
    } else if (r == SQLITE_DONE) {
        ret = no_response(id, err);
    } else {
        ret = em_sto_fail(st->ops.db, rc = r, st->path, "reading a response", err);
    }
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    em_sto_ops_end(st, rc);
    if (ret)
        for (int i = 0; i < 3; i++)
            if (out[i]) {
                free(*out[i]);
                *out[i] = NULL;
            }
    return ret;
}

int em_storage_response_delete(em_storage *st, const char *id, int64_t key_id, em_err *err)
{
    if (!id || key_id < 0)
        return no_response(id, err);
    int ret, rc = SQLITE_OK;
    sqlite3_stmt *s;
    if ((ret = begin(st, EM_STMT_RESP_DELETE, "DELETE FROM responses WHERE id = ?1 AND key_id IS ?2", id, key_id,
                     &s, err)))
        return ret;
    if (!(ret = em_sto_step_done(st, s, &rc, "deleting a response", err)) && sqlite3_changes(st->ops.db) != 1)
        ret = no_response(id, err);
    em_sto_ops_end(st, rc);
    return ret;
}
