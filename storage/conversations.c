/* conversations.c — chat history for the web UI: conversations and their
 * messages, scoped per API key (key_id 0 = no key), deletion, and the
 * store_content switch that turns storing chat text off. */
#include "storage/storage_int.h"
#include "core/grow.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MESSAGE_MAX (4 * 1024 * 1024)   /* bytes of one message's text */

static void bind_key(sqlite3_stmt *s, int i, int64_t key_id)
{
    if (key_id > 0)
        sqlite3_bind_int64(s, i, key_id);
    else
        sqlite3_bind_null(s, i);
}

static int content_off(const em_storage *st, em_err *err)
{
    return em_err_set(err, EM_ESTATE, "%s: storing conversations is switched off", st->path);
}

int em_storage_conv_create(em_storage *st, int64_t key_id, const char *title, int64_t *conv_id,
                           em_err *err)
{
    int ret, rc = SQLITE_OK;
    *conv_id = 0;
    if (!st->opts.store_content)
        return content_off(st, err);
    if ((ret = em_sto_ops_begin(st, err)))
        return ret;
    sqlite3_stmt *s = em_sto_stmt(&st->ops, EM_STMT_CONV_INSERT,
                                  "INSERT INTO conversations (key_id, title, created_ms, updated_ms)"
                                  " VALUES (?1, ?2, ?3, ?3)",
                                  st->path, err);
    if (!s) {
        ret = err ? err->code : EM_EIO;
        goto done;
    }
    bind_key(s, 1, key_id);
    if (title)
        sqlite3_bind_text(s, 2, title, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 3, em_storage_now_ms());
    rc = sqlite3_step(s);
    sqlite3_clear_bindings(s);
    sqlite3_reset(s);
    if (rc != SQLITE_DONE) {
        ret = em_sto_fail(st->ops.db, rc, st->path, "creating a conversation", err);
        goto done;
    }
    rc = SQLITE_OK;
    *conv_id = sqlite3_last_insert_rowid(st->ops.db);
done:
    em_sto_ops_end(st, rc);
    return ret;
}

int em_storage_conv_list(em_storage *st, int64_t key_id, em_conv_info **out, size_t *n,
                         em_err *err)
{
    int ret, rc = SQLITE_OK;
    em_conv_info *v = NULL;
    size_t cnt = 0, cap = 0;
    *out = NULL;
    *n = 0;
    if ((ret = em_sto_ops_begin(st, err)))
        return ret;
    sqlite3_stmt *s = em_sto_stmt(&st->ops, EM_STMT_CONV_LIST,
                                  "SELECT c.id, c.key_id, c.title, c.created_ms, c.updated_ms,"
                                  " (SELECT count(*) FROM messages m WHERE m.conversation_id = c.id)"
                                  " FROM conversations c WHERE c.key_id IS ?1"
                                  " ORDER BY c.updated_ms DESC, c.id DESC",
                                  st->path, err);
    if (!s) {
        ret = err ? err->code : EM_EIO;
        goto done;
    }
    bind_key(s, 1, key_id);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (em_grow((void **)&v, &cap, cnt, sizeof *v, 16)) {
            ret = em_err_set(err, EM_ENOMEM, "%s: out of memory", st->path);
            rc = SQLITE_OK;
            goto done;
        }
        em_conv_info *c = &v[cnt++];
        memset(c, 0, sizeof *c);
        c->id = sqlite3_column_int64(s, 0);
        c->key_id = sqlite3_column_int64(s, 1);
        const unsigned char *t = sqlite3_column_text(s, 2);
        if (t)
            snprintf(c->title, sizeof c->title, "%s", (const char *)t);
        c->created_ms = sqlite3_column_int64(s, 3);
        c->updated_ms = sqlite3_column_int64(s, 4);
        c->n_messages = sqlite3_column_int64(s, 5);
    }
    if (rc != SQLITE_DONE) {
        ret = em_sto_fail(st->ops.db, rc, st->path, "listing conversations", err);
        goto done;
    }
    rc = SQLITE_OK;
done:
    if (s) {
        sqlite3_clear_bindings(s);
        sqlite3_reset(s);
    }
    em_sto_ops_end(st, rc);
    if (ret) {
        free(v);
        return ret;
    }
    *out = v;
    *n = cnt;
    return 0;
}

int em_storage_conv_delete(em_storage *st, int64_t key_id, int64_t conv_id, em_err *err)
{
    int ret, rc = SQLITE_OK;
    if ((ret = em_sto_ops_begin(st, err)))
        return ret;
    sqlite3_stmt *s = em_sto_stmt(&st->ops, EM_STMT_CONV_DELETE,
                                  "DELETE FROM conversations WHERE id = ?1 AND key_id IS ?2",
                                  st->path, err);
    if (!s) {
        ret = err ? err->code : EM_EIO;
        goto done;
    }
    sqlite3_bind_int64(s, 1, conv_id);
    bind_key(s, 2, key_id);
    rc = sqlite3_step(s);
    sqlite3_reset(s);
    if (rc != SQLITE_DONE) {
        ret = em_sto_fail(st->ops.db, rc, st->path, "deleting a conversation", err);
        goto done;
    }
    rc = SQLITE_OK;
    if (sqlite3_changes(st->ops.db) != 1)
        ret = em_err_set(err, EM_ENOENT, "conversation %lld: no such conversation",
                         (long long)conv_id);
done:
    em_sto_ops_end(st, rc);
    return ret;
}

/* Step s to completion; 1 when it gave a row. */
static int step_exists(sqlite3_stmt *s, int *rc)
{
    *rc = sqlite3_step(s);
    int row = *rc == SQLITE_ROW;
    if (row || *rc == SQLITE_DONE)
        *rc = SQLITE_OK;
    sqlite3_reset(s);
    return row;
}

int em_storage_message_add(em_storage *st, int64_t key_id, int64_t conv_id, const char *role,
                           const char *content, int64_t tokens, int64_t *msg_id, em_err *err)
{
    int ret, rc = SQLITE_OK, in_txn = 0;
    if (msg_id)
        *msg_id = 0;
    if (!st->opts.store_content)
        return content_off(st, err);
    if (!role || (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant")))
        return em_err_set(err, EM_EINVAL, "message: role must be system, user or assistant");
    if (!content || strlen(content) > MESSAGE_MAX)
        return em_err_set(err, EM_EINVAL, "message: no text, or more than %d bytes", MESSAGE_MAX);
    if ((ret = em_sto_ops_begin(st, err)))
        return ret;
    em_sto_conn *c = &st->ops;
    sqlite3_stmt *begin = em_sto_stmt(c, EM_STMT_OPS_BEGIN, "BEGIN IMMEDIATE", st->path, err);
    sqlite3_stmt *commit = begin ? em_sto_stmt(c, EM_STMT_OPS_COMMIT, "COMMIT", st->path, err)
                                 : NULL;
    sqlite3_stmt *rollback = commit ? em_sto_stmt(c, EM_STMT_OPS_ROLLBACK, "ROLLBACK", st->path, err)
                                    : NULL;
    sqlite3_stmt *owned = rollback ? em_sto_stmt(c, EM_STMT_CONV_OWNED,
                                                 "SELECT 1 FROM conversations"
                                                 " WHERE id = ?1 AND key_id IS ?2",
                                                 st->path, err)
                                   : NULL;
    sqlite3_stmt *ins = owned ? em_sto_stmt(c, EM_STMT_MSG_INSERT,
                                            "INSERT INTO messages (conversation_id, role, content,"
                                            " tokens, created_ms) VALUES (?1, ?2, ?3, ?4, ?5)",
                                            st->path, err)
                              : NULL;
    sqlite3_stmt *touch = ins ? em_sto_stmt(c, EM_STMT_CONV_TOUCH,
                                            "UPDATE conversations SET updated_ms = ?2 WHERE id = ?1",
                                            st->path, err)
                              : NULL;
    if (!touch) {
        ret = err ? err->code : EM_EIO;
        goto done;
    }
    if ((rc = sqlite3_step(begin)) != SQLITE_DONE)
        goto done;
    sqlite3_reset(begin);
    in_txn = 1;
    sqlite3_bind_int64(owned, 1, conv_id);
    bind_key(owned, 2, key_id);
    if (!step_exists(owned, &rc)) {
        if (rc == SQLITE_OK)
            ret = em_err_set(err, EM_ENOENT, "conversation %lld: no such conversation",
                             (long long)conv_id);
        goto done;
    }
    int64_t now = em_storage_now_ms();
    sqlite3_bind_int64(ins, 1, conv_id);
    sqlite3_bind_text(ins, 2, role, -1, SQLITE_STATIC);
    sqlite3_bind_text(ins, 3, content, -1, SQLITE_STATIC);
    sqlite3_bind_int64(ins, 4, tokens);
    sqlite3_bind_int64(ins, 5, now);
    rc = sqlite3_step(ins);
    sqlite3_clear_bindings(ins);
    sqlite3_reset(ins);
    if (rc != SQLITE_DONE)
        goto done;
    if (msg_id)
        *msg_id = sqlite3_last_insert_rowid(c->db);
    sqlite3_bind_int64(touch, 1, conv_id);
    sqlite3_bind_int64(touch, 2, now);
    if ((rc = sqlite3_step(touch)) != SQLITE_DONE)
        goto done;
    sqlite3_reset(touch);
    rc = sqlite3_step(commit);
    sqlite3_reset(commit);
    if (rc == SQLITE_DONE) {
        rc = SQLITE_OK;
        in_txn = 0;
    }
done:
    if (rc != SQLITE_OK && !ret)
        ret = em_sto_fail(c->db, rc, st->path, "adding a message", err);
    if (ret && msg_id)
        *msg_id = 0;
    if (begin)
        sqlite3_reset(begin);
    if (touch)
        sqlite3_reset(touch);
    if (in_txn && !sqlite3_get_autocommit(c->db)) {
        sqlite3_step(rollback);
        sqlite3_reset(rollback);
    }
    em_sto_ops_end(st, rc);
    return ret;
}

int em_storage_message_list(em_storage *st, int64_t key_id, int64_t conv_id, em_message **out,
                            size_t *n, em_err *err)
{
    int ret, rc = SQLITE_OK;
    em_message *v = NULL;
    size_t cnt = 0, cap = 0;
    *out = NULL;
    *n = 0;
    if ((ret = em_sto_ops_begin(st, err)))
        return ret;
    sqlite3_stmt *owned = em_sto_stmt(&st->ops, EM_STMT_CONV_OWNED,
                                      "SELECT 1 FROM conversations WHERE id = ?1 AND key_id IS ?2",
                                      st->path, err);
    sqlite3_stmt *s = owned ? em_sto_stmt(&st->ops, EM_STMT_MSG_LIST,
                                          "SELECT id, role, content, tokens, created_ms"
                                          " FROM messages WHERE conversation_id = ?1 ORDER BY id",
                                          st->path, err)
                            : NULL;
    if (!s) {
        ret = err ? err->code : EM_EIO;
        goto done;
    }
    sqlite3_bind_int64(owned, 1, conv_id);
    bind_key(owned, 2, key_id);
    if (!step_exists(owned, &rc)) {
        if (rc == SQLITE_OK)
            ret = em_err_set(err, EM_ENOENT, "conversation %lld: no such conversation",
                             (long long)conv_id);
        else
            ret = em_sto_fail(st->ops.db, rc, st->path, "listing messages", err);
        goto done;
    }
    sqlite3_bind_int64(s, 1, conv_id);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (em_grow((void **)&v, &cap, cnt, sizeof *v, 16)) {
            ret = em_err_set(err, EM_ENOMEM, "%s: out of memory", st->path);
            rc = SQLITE_OK;
            goto done;
        }
        em_message *m = &v[cnt];
        memset(m, 0, sizeof *m);
        m->id = sqlite3_column_int64(s, 0);
        const unsigned char *role = sqlite3_column_text(s, 1);
        snprintf(m->role, sizeof m->role, "%s", role ? (const char *)role : "");
        const unsigned char *text = sqlite3_column_text(s, 2);
        size_t len = (size_t)sqlite3_column_bytes(s, 2);
        m->content = malloc(len + 1);
        if (!m->content) {
            ret = em_err_set(err, EM_ENOMEM, "%s: out of memory", st->path);
            rc = SQLITE_OK;
            goto done;
        }
        if (len)
            memcpy(m->content, text, len);
        m->content[len] = 0;
        m->tokens = sqlite3_column_int64(s, 3);
        m->created_ms = sqlite3_column_int64(s, 4);
        cnt++;
    }
    if (rc != SQLITE_DONE) {
        ret = em_sto_fail(st->ops.db, rc, st->path, "listing messages", err);
        goto done;
    }
    rc = SQLITE_OK;
done:
    if (s)
        sqlite3_reset(s);
    em_sto_ops_end(st, rc);
    if (ret) {
        em_storage_messages_free(v, cnt);
        return ret;
    }
    *out = v;
    *n = cnt;
    return 0;
}

void em_storage_messages_free(em_message *msgs, size_t n)
{
    if (!msgs)
        return;
    for (size_t i = 0; i < n; i++)
        free(msgs[i].content);
    free(msgs);
}
