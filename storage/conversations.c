/* conversations.c — chat history for the web UI: conversations scoped per
 * API key (key_id 0 = no key), their messages as a tree (each message under
 * a parent of the same conversation; edits and regenerations are siblings),
 * the current leaf that names the branch shown, the path root -> leaf that
 * a continuation renders, rename, title search, deletion, and the
 * store_content switch that turns storing chat text off, and export (one
 * conversation or all a key's, in one read transaction). Import is in
 * conv_import.c, which shares the helpers at the top. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/grow.h"
#include "storage/storage_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MESSAGE_MAX (4 * 1024 * 1024)   /* bytes of one message's text */

/* ---- helpers (storage_int.h) ------------------------------------------------ */

void em_sto_bind_key(sqlite3_stmt *s, int i, int64_t key_id)
{
    if (key_id > 0)
        sqlite3_bind_int64(s, i, key_id);
    else
        sqlite3_bind_null(s, i);
}

sqlite3_stmt *em_sto_prep(em_storage *st, int slot, const char *sql, int *ret, em_err *err)
{
    sqlite3_stmt *s = em_sto_stmt(&st->ops, slot, sql, st->path, err);
    if (!s)
        *ret = err ? err->code : EM_EIO;
    return s;
}

int em_sto_step_done(em_storage *st, sqlite3_stmt *s, int *rc, const char *what, em_err *err)
{
    int r = sqlite3_step(s);
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    if (r == SQLITE_DONE)
        return 0;
    *rc = r;
    return em_sto_fail(st->ops.db, r, st->path, what, err);
}

int em_sto_txn(em_storage *st, int slot, int *rc, em_err *err)
{
    static const char *const sql[] = { "BEGIN IMMEDIATE", "BEGIN", "COMMIT", "ROLLBACK" };
    int i = slot == EM_STMT_OPS_BEGIN ? 0 : slot == EM_STMT_OPS_BEGIN_READ ? 1
          : slot == EM_STMT_OPS_COMMIT ? 2 : 3;
    int ret = 0;
    sqlite3_stmt *s = em_sto_prep(st, slot, sql[i], &ret, err);
    if (!s)
        return ret;
    return em_sto_step_done(st, s, rc, i < 2 ? "starting a transaction" : "ending a transaction", err);
}

void em_sto_txn_abort(em_storage *st)
{
    if (st->ops.db && !sqlite3_get_autocommit(st->ops.db)) {
        int rc = SQLITE_OK;
        em_sto_txn(st, EM_STMT_OPS_ROLLBACK, &rc, NULL);
    }
}

char *em_sto_column_dup(sqlite3_stmt *s, int col)
{
    const unsigned char *t = sqlite3_column_text(s, col);
    size_t len = (size_t)sqlite3_column_bytes(s, col);
    char *p = malloc(len + 1);
    if (!p)
        return NULL;
    if (len)
        memcpy(p, t, len);
    p[len] = 0;
    return p;
}

static void copy_column(sqlite3_stmt *s, int col, char *out, size_t cap)
{
    const unsigned char *t = sqlite3_column_text(s, col);
    snprintf(out, cap, "%s", t ? (const char *)t : "");
}

int em_sto_message_row(sqlite3_stmt *s, em_message *m)
{
    memset(m, 0, sizeof *m);
    m->id = sqlite3_column_int64(s, 0);
    m->parent_id = sqlite3_column_int64(s, 1);
    copy_column(s, 2, m->role, sizeof m->role);
    if (!(m->content = em_sto_column_dup(s, 3)))
        return EM_ENOMEM;
    m->tokens = sqlite3_column_int64(s, 4);
    copy_column(s, 5, m->finish_reason, sizeof m->finish_reason);
    m->created_ms = sqlite3_column_int64(s, 6);
    return 0;
}

void em_sto_conv_row(sqlite3_stmt *s, em_conv_info *c)
{
    memset(c, 0, sizeof *c);
    c->id = sqlite3_column_int64(s, 0);
    c->key_id = sqlite3_column_int64(s, 1);
    copy_column(s, 2, c->title, sizeof c->title);   /* titles are checked to fit */
    c->created_ms = sqlite3_column_int64(s, 3);
    c->updated_ms = sqlite3_column_int64(s, 4);
    c->n_messages = sqlite3_column_int64(s, 5);
    c->current_leaf_id = sqlite3_column_int64(s, 6);
}

int em_sto_message_check(const char *role, const char *content, const char *finish_reason,
                         const char *what, em_err *err)
{
    if (!role || (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant")))
        return em_err_set(err, EM_EINVAL, "%s: role must be system, user or assistant", what);
    if (!content || strlen(content) > MESSAGE_MAX)
        return em_err_set(err, EM_EINVAL, "%s: no text, or more than %d bytes", what, MESSAGE_MAX);
    if (finish_reason && *finish_reason) {
        if (strcmp(finish_reason, "stop") && strcmp(finish_reason, "length") &&
            strcmp(finish_reason, "cancelled"))
            return em_err_set(err, EM_EINVAL, "%s: finish_reason must be stop, length or cancelled", what);
        if (strcmp(role, "assistant") != 0)
            return em_err_set(err, EM_EINVAL, "%s: only an assistant message has a finish_reason", what);
    }
    return 0;
}

int em_sto_title_check(const char *title, const char *what, em_err *err)
{
    if (title && (!*title || strlen(title) > EM_STORAGE_TITLE_MAX))
        return em_err_set(err, EM_EINVAL, "%s: a title is 1 to %d bytes", what, EM_STORAGE_TITLE_MAX);
    return 0;
}

int em_sto_message_insert(em_storage *st, int64_t conv_id, int64_t parent, const em_message_new *m,
                          int64_t created_ms, int64_t *id, int *rc, em_err *err)
{
    int ret = 0;
    sqlite3_stmt *s = em_sto_prep(st, EM_STMT_MSG_INSERT,
                                  "INSERT INTO messages (conversation_id, parent_id, role, content,"
                                  " tokens, finish_reason, created_ms)"
                                  " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                                  &ret, err);
    if (!s)
        return ret;
    sqlite3_bind_int64(s, 1, conv_id);
    if (parent > 0)
        sqlite3_bind_int64(s, 2, parent);
    sqlite3_bind_text(s, 3, m->role, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 4, m->content, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 5, m->tokens);
    if (m->finish_reason && *m->finish_reason)
        sqlite3_bind_text(s, 6, m->finish_reason, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 7, created_ms);
    if ((ret = em_sto_step_done(st, s, rc, "adding a message", err)))
        return ret;
    *id = sqlite3_last_insert_rowid(st->ops.db);
    return 0;
}

int em_sto_set_leaf(em_storage *st, int64_t conv_id, int64_t leaf_id, int *rc, em_err *err)
{
    int ret = 0;
    sqlite3_stmt *s = em_sto_prep(st, EM_STMT_CONV_SET_LEAF,
                                  "UPDATE conversations SET current_leaf_id = ?2 WHERE id = ?1", &ret, err);
    if (!s)
        return ret;
    sqlite3_bind_int64(s, 1, conv_id);
    sqlite3_bind_int64(s, 2, leaf_id);
    return em_sto_step_done(st, s, rc, "switching the branch", err);
}

int em_sto_content_off(const em_storage *st, em_err *err)
{
    return em_err_set(err, EM_ESTATE, "%s: storing conversations is switched off", st->path);
}

int em_sto_no_conv(int64_t conv_id, em_err *err)
{
    return em_err_set(err, EM_ENOENT, "conversation %lld: no such conversation", (long long)conv_id);
}

/* The current leaf of key_id's conv_id into *leaf (0: no messages);
 * EM_ENOENT when it is not the key's. The ops connection is held. */
static int conv_leaf(em_storage *st, int64_t key_id, int64_t conv_id, int64_t *leaf, int *rc,
                     em_err *err)
{
    int ret = 0;
    sqlite3_stmt *s = em_sto_prep(st, EM_STMT_CONV_LEAF,
                                  "SELECT coalesce(c.current_leaf_id, (SELECT max(m.id) FROM messages m"
                                  " WHERE m.conversation_id = c.id), 0)"
                                  " FROM conversations c WHERE c.id = ?1 AND c.key_id IS ?2",
                                  &ret, err);
    if (!s)
        return ret;
    sqlite3_bind_int64(s, 1, conv_id);
    em_sto_bind_key(s, 2, key_id);
    int r = sqlite3_step(s);
    if (r == SQLITE_ROW)
        *leaf = sqlite3_column_int64(s, 0);
    sqlite3_reset(s);
    if (r == SQLITE_ROW)
        return 0;
    if (r == SQLITE_DONE)
        return em_sto_no_conv(conv_id, err);
    *rc = r;
    return em_sto_fail(st->ops.db, r, st->path, "reading a conversation", err);
}

/* 1 when msg_id is a message of conv_id, 0 when not, negative on failure. */
static int in_conv(em_storage *st, int64_t conv_id, int64_t msg_id, int *rc, em_err *err)
{
    int ret = 0;
    sqlite3_stmt *s = em_sto_prep(st, EM_STMT_MSG_IN_CONV,
                                  "SELECT 1 FROM messages WHERE id = ?1 AND conversation_id = ?2",
                                  &ret, err);
    if (!s)
        return ret;
    sqlite3_bind_int64(s, 1, msg_id);
    sqlite3_bind_int64(s, 2, conv_id);
    int r = sqlite3_step(s);
    sqlite3_reset(s);
    if (r == SQLITE_ROW || r == SQLITE_DONE)
        return r == SQLITE_ROW;
    *rc = r;
    return em_sto_fail(st->ops.db, r, st->path, "reading a message", err);
}

/* ---- conversations ------------------------------------------------------------ */

int em_storage_conv_create(em_storage *st, int64_t key_id, const char *title, int64_t *conv_id,
                           em_err *err)
{
    int ret, rc = SQLITE_OK;
    *conv_id = 0;
    if (!st->opts.store_content)
        return em_sto_content_off(st, err);
    if ((ret = em_sto_title_check(title, "conversation", err)))
        return ret;
    if ((ret = em_sto_ops_begin(st, err)))
        return ret;
    sqlite3_stmt *s = em_sto_prep(st, EM_STMT_CONV_INSERT,
                                  "INSERT INTO conversations (key_id, title, created_ms, updated_ms)"
                                  " VALUES (?1, ?2, ?3, ?3)",
                                  &ret, err);
    if (!s)
        goto done;
    em_sto_bind_key(s, 1, key_id);
    if (title)
        sqlite3_bind_text(s, 2, title, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 3, em_storage_now_ms());
    if ((ret = em_sto_step_done(st, s, &rc, "creating a conversation", err)))
        goto done;
    *conv_id = sqlite3_last_insert_rowid(st->ops.db);
done:
    em_sto_ops_end(st, rc);
    return ret;
}

/* Does title contain the pattern (a caseless literal)? */
static int title_matches(const pcre2_code *re, pcre2_match_data *md, const char *title)
{
    return pcre2_match(re, (PCRE2_SPTR)title, PCRE2_ZERO_TERMINATED, 0, 0, md, NULL) >= 0;
}

/* key_id's conversations, newest first, those whose title re matches (NULL:
 * all), appended to *v. The ops connection is held. */
static int conv_rows(em_storage *st, int64_t key_id, const pcre2_code *re, pcre2_match_data *md,
                     em_conv_info **v, size_t *cnt, int *rc, em_err *err)
{
    int ret = 0, r;
    size_t cap = 0;
    sqlite3_stmt *s = em_sto_prep(st, EM_STMT_CONV_LIST,
                                  "SELECT " EM_STO_CONV_COLUMNS " FROM conversations c WHERE c.key_id IS ?1"
                                  " ORDER BY c.updated_ms DESC, c.id DESC",
                                  &ret, err);
    if (!s)
        return ret;
    em_sto_bind_key(s, 1, key_id);
    while ((r = sqlite3_step(s)) == SQLITE_ROW) {
        const char *title = (const char *)sqlite3_column_text(s, 2);
        if (re && (!title || !title_matches(re, md, title)))
            continue;
        if (em_grow((void **)v, &cap, *cnt, sizeof **v, 16)) {
            ret = em_err_set(err, EM_ENOMEM, "%s: out of memory", st->path);
            goto done;
        }
        em_sto_conv_row(s, &(*v)[(*cnt)++]);
    }
    if (r != SQLITE_DONE)
        ret = em_sto_fail(st->ops.db, *rc = r, st->path, "listing conversations", err);
done:
    sqlite3_reset(s);
    return ret;
}

int em_storage_conv_search(em_storage *st, int64_t key_id, const char *q, em_conv_info **out,
                           size_t *n, em_err *err)
{
    int ret = 0, rc = SQLITE_OK;
    em_conv_info *v = NULL;
    size_t cnt = 0;
    pcre2_code *re = NULL;
    pcre2_match_data *md = NULL;
    *out = NULL;
    *n = 0;
    if (q && *q) {
        int ec;
        PCRE2_SIZE eoff;
        re = pcre2_compile((PCRE2_SPTR)q, PCRE2_ZERO_TERMINATED,
                           PCRE2_LITERAL | PCRE2_CASELESS | PCRE2_UTF | PCRE2_MATCH_INVALID_UTF, &ec, &eoff,
                           NULL);
        if (!re) {
            ret = em_err_set(err, EM_EINVAL, "search: the text is not UTF-8 (at byte %zu)", (size_t)eoff);
            goto done;
        }
        if (!(md = pcre2_match_data_create_from_pattern(re, NULL))) {
            ret = em_err_set(err, EM_ENOMEM, "%s: out of memory", st->path);
            goto done;
        }
    }
    if ((ret = em_sto_ops_begin(st, err)))
        goto done;
    ret = conv_rows(st, key_id, re, md, &v, &cnt, &rc, err);
    em_sto_ops_end(st, rc);
done:
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    if (ret) {
        free(v);
        return ret;
    }
    *out = v;
    *n = cnt;
    return 0;
}

int em_storage_conv_list(em_storage *st, int64_t key_id, em_conv_info **out, size_t *n,
                         em_err *err)
{
    return em_storage_conv_search(st, key_id, NULL, out, n, err);
}

/* key_id's conv_id into *out; EM_ENOENT when not the key's. The ops connection is held. */
static int conv_one(em_storage *st, int64_t key_id, int64_t conv_id, em_conv_info *out, int *rc,
                    em_err *err)
{
    int ret = 0;
    sqlite3_stmt *s = em_sto_prep(st, EM_STMT_CONV_GET,
                                  "SELECT " EM_STO_CONV_COLUMNS " FROM conversations c"
                                  " WHERE c.id = ?1 AND c.key_id IS ?2",
                                  &ret, err);
    if (!s)
        return ret;
    sqlite3_bind_int64(s, 1, conv_id);
    em_sto_bind_key(s, 2, key_id);
    int r = sqlite3_step(s);
    if (r == SQLITE_ROW)
        em_sto_conv_row(s, out);
    else if (r == SQLITE_DONE)
        ret = em_sto_no_conv(conv_id, err);
    else
        ret = em_sto_fail(st->ops.db, *rc = r, st->path, "reading a conversation", err);
    sqlite3_reset(s);
    return ret;
}

int em_storage_conv_get(em_storage *st, int64_t key_id, int64_t conv_id, em_conv_info *out,
                        em_err *err)
{
    int ret, rc = SQLITE_OK;
    memset(out, 0, sizeof *out);
    if ((ret = em_sto_ops_begin(st, err)))
        return ret;
    ret = conv_one(st, key_id, conv_id, out, &rc, err);
    em_sto_ops_end(st, rc);
    return ret;
}

int em_storage_conv_update(em_storage *st, int64_t key_id, int64_t conv_id, const char *title,
                           int64_t leaf_id, em_err *err)
{
    int ret, rc = SQLITE_OK;
    int64_t leaf = 0;
    if ((ret = em_sto_title_check(title, "rename", err)))
        return ret;
    if (leaf_id < 0)
        return em_err_set(err, EM_EINVAL, "current leaf: %lld is not a message id", (long long)leaf_id);
    if ((ret = em_sto_ops_begin(st, err)))
        return ret;
    if ((ret = em_sto_txn(st, EM_STMT_OPS_BEGIN, &rc, err)) ||
        (ret = conv_leaf(st, key_id, conv_id, &leaf, &rc, err)))
        goto done;
    if (leaf_id) {
        int in = in_conv(st, conv_id, leaf_id, &rc, err);
        if (in <= 0) {
            ret = in ? in : em_err_set(err, EM_EINVAL, "current leaf: message %lld is not in conversation %lld",
                                       (long long)leaf_id, (long long)conv_id);
            goto done;
        }
        if ((ret = em_sto_set_leaf(st, conv_id, leaf_id, &rc, err)))
            goto done;
    }
    if (title) {
        sqlite3_stmt *s = em_sto_prep(st, EM_STMT_CONV_RENAME, "UPDATE conversations SET title = ?2 WHERE id = ?1",
                                      &ret, err);
        if (!s)
            goto done;
        sqlite3_bind_int64(s, 1, conv_id);
        sqlite3_bind_text(s, 2, title, -1, SQLITE_STATIC);
        if ((ret = em_sto_step_done(st, s, &rc, "renaming a conversation", err)))
            goto done;
    }
    ret = em_sto_txn(st, EM_STMT_OPS_COMMIT, &rc, err);
done:
    if (ret)
        em_sto_txn_abort(st);
    em_sto_ops_end(st, rc);
    return ret;
}

int em_storage_conv_delete(em_storage *st, int64_t key_id, int64_t conv_id, em_err *err)
{
    int ret, rc = SQLITE_OK;
    if ((ret = em_sto_ops_begin(st, err)))
        return ret;
    sqlite3_stmt *s = em_sto_prep(st, EM_STMT_CONV_DELETE,
                                  "DELETE FROM conversations WHERE id = ?1 AND key_id IS ?2", &ret, err);
    if (!s)
        goto done;
    sqlite3_bind_int64(s, 1, conv_id);
    em_sto_bind_key(s, 2, key_id);
    if ((ret = em_sto_step_done(st, s, &rc, "deleting a conversation", err)))
        goto done;
    if (sqlite3_changes(st->ops.db) != 1)
        ret = em_sto_no_conv(conv_id, err);
done:
    em_sto_ops_end(st, rc);
    return ret;
}

/* ---- messages ------------------------------------------------------------------ */

int em_storage_message_append(em_storage *st, int64_t key_id, int64_t conv_id, int64_t parent_id,
                              const em_message_new *msgs, size_t n, int64_t *ids, em_err *err)
{
    int ret = 0, rc = SQLITE_OK;
    int64_t parent = 0, leaf = 0;
    if (ids)
        memset(ids, 0, n * sizeof *ids);
    if (!st->opts.store_content)
        return em_sto_content_off(st, err);
    if (!n || parent_id < EM_STORAGE_LEAF)
        return em_err_set(err, EM_EINVAL, "message: nothing to add, or a bad parent");
    for (size_t i = 0; i < n; i++)
        if ((ret = em_sto_message_check(msgs[i].role, msgs[i].content, msgs[i].finish_reason, "message", err)))
            return ret;
    if ((ret = em_sto_ops_begin(st, err)))
        return ret;
    if ((ret = em_sto_txn(st, EM_STMT_OPS_BEGIN, &rc, err)) ||
        (ret = conv_leaf(st, key_id, conv_id, &leaf, &rc, err)))
        goto done;
    if (parent_id == EM_STORAGE_LEAF) {
        parent = leaf;
    } else if (parent_id > 0) {
        int in = in_conv(st, conv_id, parent_id, &rc, err);
        if (in <= 0) {
            ret = in ? in : em_err_set(err, EM_ENOENT, "message %lld: not a message of conversation %lld",
                                       (long long)parent_id, (long long)conv_id);
            goto done;
        }
        parent = parent_id;
    }
    int64_t now = em_storage_now_ms();
    for (size_t i = 0; i < n; i++) {
        if ((ret = em_sto_message_insert(st, conv_id, parent, &msgs[i], now, &parent, &rc, err)))
            goto done;
        if (ids)
            ids[i] = parent;
    }
    sqlite3_stmt *touch = em_sto_prep(st, EM_STMT_CONV_TOUCH,
                                      "UPDATE conversations SET updated_ms = ?2, current_leaf_id = ?3"
                                      " WHERE id = ?1",
                                      &ret, err);
    if (!touch)
        goto done;
    sqlite3_bind_int64(touch, 1, conv_id);
    sqlite3_bind_int64(touch, 2, now);
    sqlite3_bind_int64(touch, 3, parent);
    if ((ret = em_sto_step_done(st, touch, &rc, "adding a message", err)))
        goto done;
    ret = em_sto_txn(st, EM_STMT_OPS_COMMIT, &rc, err);
done:
    if (ret) {
        em_sto_txn_abort(st);
        if (ids)
            memset(ids, 0, n * sizeof *ids);
    }
    em_sto_ops_end(st, rc);
    return ret;
}

int em_storage_message_add(em_storage *st, int64_t key_id, int64_t conv_id, const char *role,
                           const char *content, int64_t tokens, int64_t *msg_id, em_err *err)
{
    em_message_new m = { .role = role, .content = content, .tokens = tokens };
    int64_t id = 0;
    int ret = em_storage_message_append(st, key_id, conv_id, EM_STORAGE_LEAF, &m, 1, &id, err);
    if (msg_id)
        *msg_id = id;
    return ret;
}

/* Step s to its end, every row a message appended to *v. */
static int read_messages(em_storage *st, sqlite3_stmt *s, em_message **v, size_t *cnt, int *rc,
                         em_err *err)
{
    size_t cap = 0;
    int r;
    while ((r = sqlite3_step(s)) == SQLITE_ROW) {
        if (em_grow((void **)v, &cap, *cnt, sizeof **v, 16) || em_sto_message_row(s, &(*v)[*cnt]))
            return em_err_set(err, EM_ENOMEM, "%s: out of memory", st->path);
        (*cnt)++;
    }
    if (r == SQLITE_DONE)
        return 0;
    *rc = r;
    return em_sto_fail(st->ops.db, r, st->path, "listing messages", err);
}

/* The messages of conv_id (the caller checked it is the key's) into *v. */
static int list_locked(em_storage *st, int64_t conv_id, em_message **v, size_t *cnt, int *rc,
                       em_err *err)
{
    int ret = 0;
    sqlite3_stmt *s = em_sto_prep(st, EM_STMT_MSG_LIST,
                                  "SELECT " EM_STO_MESSAGE_COLUMNS " FROM messages"
                                  " WHERE conversation_id = ?1 ORDER BY id",
                                  &ret, err);
    if (!s)
        return ret;
    sqlite3_bind_int64(s, 1, conv_id);
    ret = read_messages(st, s, v, cnt, rc, err);
    sqlite3_reset(s);
    return ret;
}

int em_storage_message_list(em_storage *st, int64_t key_id, int64_t conv_id, em_message **out,
                            size_t *n, em_err *err)
{
    int ret, rc = SQLITE_OK;
    em_message *v = NULL;
    size_t cnt = 0;
    int64_t leaf = 0;
    *out = NULL;
    *n = 0;
    if ((ret = em_sto_ops_begin(st, err)))
        return ret;
    if (!(ret = conv_leaf(st, key_id, conv_id, &leaf, &rc, err)))
        ret = list_locked(st, conv_id, &v, &cnt, &rc, err);
    em_sto_ops_end(st, rc);
    if (ret) {
        em_storage_messages_free(v, cnt);
        return ret;
    }
    *out = v;
    *n = cnt;
    return 0;
}

int em_storage_message_path(em_storage *st, int64_t key_id, int64_t conv_id, int64_t leaf_id, size_t max,
                            em_message **out, size_t *n, em_err *err)
{
    int ret, rc = SQLITE_OK;
    em_message *v = NULL;
    size_t cnt = 0;
    int64_t leaf = 0;
    sqlite3_stmt *s = NULL;
    *out = NULL;
    *n = 0;
    if (leaf_id < EM_STORAGE_LEAF)
        return em_err_set(err, EM_ENOENT, "message %lld: no such message", (long long)leaf_id);
    if ((ret = em_sto_ops_begin(st, err)))
        return ret;
    if ((ret = conv_leaf(st, key_id, conv_id, &leaf, &rc, err)))
        goto done;
    if (leaf_id != EM_STORAGE_LEAF)
        leaf = leaf_id;
    if (!leaf)
        goto done;   /* the root: an empty path */
    /* Up from the leaf; parent_id < id (a CHECK) so the walk ends, at
     * depth ?3 at the latest (max: one message more says "longer"). */
    s = em_sto_prep(st, EM_STMT_MSG_PATH,
                    "WITH RECURSIVE up(id, depth) AS (SELECT ?2, 0 UNION ALL"
                    " SELECT m.parent_id, up.depth + 1 FROM up JOIN messages m ON m.id = up.id"
                    " WHERE m.conversation_id = ?1 AND m.parent_id IS NOT NULL AND up.depth < ?3)"
                    " SELECT m.id, coalesce(m.parent_id, 0), m.role, m.content, m.tokens,"
                    " coalesce(m.finish_reason, ''), m.created_ms"
                    " FROM up JOIN messages m ON m.id = up.id WHERE m.conversation_id = ?1"
                    " ORDER BY up.depth DESC",
                    &ret, err);
    if (!s)
        goto done;
    sqlite3_bind_int64(s, 1, conv_id);
    sqlite3_bind_int64(s, 2, leaf);
    sqlite3_bind_int64(s, 3, max && max < INT64_MAX ? (int64_t)max : INT64_MAX);
    ret = read_messages(st, s, &v, &cnt, &rc, err);
    sqlite3_reset(s);
    if (!ret && !cnt)
        ret = em_err_set(err, EM_ENOENT, "message %lld: not a message of conversation %lld", (long long)leaf,
                         (long long)conv_id);
    else if (!ret && max && cnt > max)
        ret = em_err_set(err, EM_ERANGE, "conversation %lld: the path to message %lld is longer than %zu messages",
                         (long long)conv_id, (long long)leaf, max);
done:
    em_sto_ops_end(st, rc);
    if (ret) {
        em_storage_messages_free(v, cnt);
        return ret;
    }
    *out = v;
    *n = cnt;
    return 0;
}

/* ---- export ------------------------------------------------------------------------- */

int em_storage_conv_export(em_storage *st, int64_t key_id, int64_t conv_id, em_conv_full **out,
                           size_t *n, em_err *err)
{
    int ret, rc = SQLITE_OK;
    em_conv_info *infos = NULL;
    em_conv_full *v = NULL;
    size_t cnt = 0;
    *out = NULL;
    *n = 0;
    if ((ret = em_sto_ops_begin(st, err)))
        return ret;
    if ((ret = em_sto_txn(st, EM_STMT_OPS_BEGIN_READ, &rc, err)))
        goto done;
    if (conv_id) {
        if (!(infos = calloc(1, sizeof *infos))) {
            ret = em_err_set(err, EM_ENOMEM, "%s: out of memory", st->path);
            goto done;
        }
        if ((ret = conv_one(st, key_id, conv_id, infos, &rc, err)))
            goto done;
        cnt = 1;
    } else if ((ret = conv_rows(st, key_id, NULL, NULL, &infos, &cnt, &rc, err))) {
        goto done;
    }
    if (cnt && !(v = calloc(cnt, sizeof *v))) {
        ret = em_err_set(err, EM_ENOMEM, "%s: out of memory", st->path);
        goto done;
    }
    for (size_t i = 0; i < cnt && !ret; i++) {
        v[i].info = infos[i];
        ret = list_locked(st, infos[i].id, &v[i].msgs, &v[i].n_msgs, &rc, err);
    }
    if (!ret)
        ret = em_sto_txn(st, EM_STMT_OPS_COMMIT, &rc, err);
done:
    if (ret)
        em_sto_txn_abort(st);
    em_sto_ops_end(st, rc);
    free(infos);
    if (ret) {
        em_storage_conv_full_free(v, cnt);
        return ret;
    }
    *out = v;
    *n = cnt;
    return 0;
}

void em_storage_conv_full_free(em_conv_full *v, size_t n)
{
    if (!v)
        return;
    for (size_t i = 0; i < n; i++)
        em_storage_messages_free(v[i].msgs, v[i].n_msgs);
    free(v);
}

void em_storage_messages_free(em_message *msgs, size_t n)
{
    if (!msgs)
        return;
    for (size_t i = 0; i < n; i++)
        free(msgs[i].content);
    free(msgs);
}
