/* schema.c — the database schema, its forward migrations (PRAGMA
 * user_version), and opening a configured connection: pragmas, version
 * check, quick check, lazily prepared statements, SQLite error mapping. */
#include "storage/storage_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The device's busy time per UTC hour: ember serve adds to an hour's row
 * about every minute (em_storage_util_add); GET /api/utilization and the
 * dashboard's utilization and cost read it. Self-contained (it touches no
 * other table and creates only what is missing), so its step may be
 * renumbered when migrations merge. */
#define MIGRATE_UTILIZATION                                                                      \
    "CREATE TABLE IF NOT EXISTS utilization ("                                                     \
    "  hour_ms          INTEGER PRIMARY KEY,"                                                      \
    "  up_ms            INTEGER NOT NULL DEFAULT 0 CHECK (up_ms >= 0),"                            \
    "  busy_ms          REAL    NOT NULL DEFAULT 0 CHECK (busy_ms >= 0),"                          \
    "  generated_tokens INTEGER NOT NULL DEFAULT 0 CHECK (generated_tokens >= 0),"                 \
    "  prefilled_tokens INTEGER NOT NULL DEFAULT 0 CHECK (prefilled_tokens >= 0),"                 \
    "  steps            INTEGER NOT NULL DEFAULT 0 CHECK (steps >= 0)"                             \
    ");"

/* migrations[v] takes a database from version v to v + 1. Each runs in one
 * transaction together with its user_version bump. Never edit a released
 * step: add a new one (docs/storage.md, "Migration policy"). */
static const char *const migrations[EM_STORAGE_SCHEMA_VERSION] = {
    /* 0 -> 1: API keys and the usage ledger. */
    "CREATE TABLE api_keys ("
    "  id                 INTEGER PRIMARY KEY,"
    "  name               TEXT    NOT NULL,"
    "  prefix             TEXT    NOT NULL,"
    "  hash               BLOB    NOT NULL,"
    "  default_class      TEXT    NOT NULL DEFAULT 'interactive'"
    "                     CHECK (default_class IN ('interactive', 'background')),"
    "  rate_limit_per_min INTEGER NOT NULL DEFAULT 0 CHECK (rate_limit_per_min >= 0),"
    "  created_ms         INTEGER NOT NULL,"
    "  revoked_ms         INTEGER"
    ");"
    "CREATE INDEX api_keys_prefix ON api_keys(prefix);"
    "CREATE TABLE requests ("
    "  id                INTEGER PRIMARY KEY,"
    "  request_id        TEXT    NOT NULL UNIQUE,"
    "  key_id            INTEGER REFERENCES api_keys(id),"
    "  client_addr       TEXT,"
    "  class             TEXT    NOT NULL CHECK (class IN ('interactive', 'background')),"
    "  model             TEXT,"
    "  received_ms       INTEGER NOT NULL,"
    "  started_ms        INTEGER,"
    "  first_token_ms    INTEGER,"
    "  finished_ms       INTEGER,"
    "  status            TEXT    NOT NULL CHECK (status IN ('admitted', 'completed',"
    "                    'cancelled', 'failed', 'rejected')),"
    "  prompt_tokens     INTEGER NOT NULL DEFAULT 0,"
    "  completion_tokens INTEGER NOT NULL DEFAULT 0,"
    "  queue_ms          REAL,"
    "  ttft_ms           REAL,"
    "  tpot_mean_ms      REAL,"
    "  finish_reason     TEXT,"
    "  error             TEXT"
    ");"
    "CREATE INDEX requests_received ON requests(received_ms);"
    "PRAGMA user_version = 1;",

    /* 1 -> 2: prefix-cache and preemption accounting. The status CHECK
     * grows, which SQLite can only do by rebuilding the table. */
    "CREATE TABLE requests_v2 ("
    "  id                INTEGER PRIMARY KEY,"
    "  request_id        TEXT    NOT NULL UNIQUE,"
    "  key_id            INTEGER REFERENCES api_keys(id),"
    "  client_addr       TEXT,"
    "  class             TEXT    NOT NULL CHECK (class IN ('interactive', 'background')),"
    "  model             TEXT,"
    "  received_ms       INTEGER NOT NULL,"
    "  started_ms        INTEGER,"
    "  first_token_ms    INTEGER,"
    "  finished_ms       INTEGER,"
    "  status            TEXT    NOT NULL CHECK (status IN ('admitted', 'completed',"
    "                    'preempted_completed', 'cancelled', 'failed', 'rejected',"
    "                    'interrupted')),"
    "  prompt_tokens     INTEGER NOT NULL DEFAULT 0,"
    "  cached_tokens     INTEGER NOT NULL DEFAULT 0,"
    "  completion_tokens INTEGER NOT NULL DEFAULT 0,"
    "  queue_ms          REAL,"
    "  ttft_ms           REAL,"
    "  tpot_mean_ms      REAL,"
    "  tpot_p99_ms       REAL,"
    "  preemptions       INTEGER NOT NULL DEFAULT 0,"
    "  finish_reason     TEXT,"
    "  error             TEXT"
    ");"
    "INSERT INTO requests_v2 (id, request_id, key_id, client_addr, class, model,"
    "  received_ms, started_ms, first_token_ms, finished_ms, status, prompt_tokens,"
    "  completion_tokens, queue_ms, ttft_ms, tpot_mean_ms, finish_reason, error)"
    " SELECT id, request_id, key_id, client_addr, class, model,"
    "  received_ms, started_ms, first_token_ms, finished_ms, status, prompt_tokens,"
    "  completion_tokens, queue_ms, ttft_ms, tpot_mean_ms, finish_reason, error"
    " FROM requests;"
    "DROP TABLE requests;"
    "ALTER TABLE requests_v2 RENAME TO requests;"
    "CREATE INDEX requests_received ON requests(received_ms);"
    "CREATE INDEX requests_key ON requests(key_id, received_ms);"
    "PRAGMA user_version = 2;",

    /* 2 -> 3: conversation history for the web UI. */
    "CREATE TABLE conversations ("
    "  id          INTEGER PRIMARY KEY,"
    "  key_id      INTEGER REFERENCES api_keys(id) ON DELETE CASCADE,"
    "  title       TEXT,"
    "  created_ms  INTEGER NOT NULL,"
    "  updated_ms  INTEGER NOT NULL"
    ");"
    "CREATE INDEX conversations_key ON conversations(key_id, updated_ms);"
    "CREATE INDEX conversations_updated ON conversations(updated_ms);"
    "CREATE TABLE messages ("
    "  id              INTEGER PRIMARY KEY,"
    "  conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,"
    "  role            TEXT    NOT NULL CHECK (role IN ('system', 'user', 'assistant')),"
    "  content         TEXT    NOT NULL,"
    "  tokens          INTEGER NOT NULL DEFAULT 0,"
    "  created_ms      INTEGER NOT NULL"
    ");"
    "CREATE INDEX messages_conversation ON messages(conversation_id, id);"
    "PRAGMA user_version = 3;",

    /* 3 -> 4: admin keys (may read every key's usage). Existing keys stay
     * ordinary ones. */
    "ALTER TABLE api_keys ADD COLUMN admin INTEGER NOT NULL DEFAULT 0 CHECK (admin IN (0, 1));"
    "PRAGMA user_version = 4;",

    /* 4 -> 5: messages form a tree per conversation (edits and regenerated
     * answers are siblings). messages is rebuilt for its table constraints:
     * a parent in the same conversation (a composite foreign key), created
     * before its child (parent_id < id: no cycles), finish_reason on
     * assistant messages only. Existing rows become a chain, each message
     * under the one before it, and the last is the current leaf. Nothing
     * refers to messages yet, so dropping the old table touches nothing. */
    "CREATE TABLE messages_v5 ("
    "  id              INTEGER PRIMARY KEY,"
    "  conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,"
    "  parent_id       INTEGER,"
    "  role            TEXT    NOT NULL CHECK (role IN ('system', 'user', 'assistant')),"
    "  content         TEXT    NOT NULL,"
    "  tokens          INTEGER NOT NULL DEFAULT 0,"
    "  finish_reason   TEXT    CHECK (finish_reason IS NULL OR (role = 'assistant' AND"
    "                  finish_reason IN ('stop', 'length', 'cancelled'))),"
    "  created_ms      INTEGER NOT NULL,"
    "  CHECK (parent_id IS NULL OR parent_id < id),"
    "  FOREIGN KEY (conversation_id, parent_id) REFERENCES messages_v5(conversation_id, id)"
    "    ON DELETE CASCADE"
    ");"
    "CREATE UNIQUE INDEX messages_tree ON messages_v5(conversation_id, id);"
    "CREATE INDEX messages_children ON messages_v5(conversation_id, parent_id);"
    "INSERT INTO messages_v5 (id, conversation_id, parent_id, role, content, tokens, created_ms)"
    " SELECT id, conversation_id, (SELECT max(p.id) FROM messages p"
    "  WHERE p.conversation_id = m.conversation_id AND p.id < m.id),"
    "  role, content, tokens, created_ms FROM messages m ORDER BY id;"
    "DROP TABLE messages;"
    "ALTER TABLE messages_v5 RENAME TO messages;"
    "ALTER TABLE conversations ADD COLUMN current_leaf_id INTEGER"
    "  REFERENCES messages(id) ON DELETE SET NULL;"
    "UPDATE conversations SET current_leaf_id ="
    " (SELECT max(m.id) FROM messages m WHERE m.conversation_id = conversations.id);"
    "CREATE TRIGGER conversations_leaf BEFORE UPDATE OF current_leaf_id ON conversations"
    " WHEN NEW.current_leaf_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM messages m"
    "  WHERE m.id = NEW.current_leaf_id AND m.conversation_id = NEW.id)"
    " BEGIN SELECT RAISE(ABORT, 'current_leaf_id is not a message of this conversation'); END;"
    "PRAGMA user_version = 5;",

    /* 5 -> 6: utilization (MIGRATE_UTILIZATION above). */
    MIGRATE_UTILIZATION
    "PRAGMA user_version = 6;",

    /* 6 -> 7: files uploaded for the Batch API (their bytes live on disk
     * beside the database, storage/files.c), owned by the key that made
     * them (NULL: loopback without a key). */
    "CREATE TABLE files ("
    "  id         TEXT    PRIMARY KEY,"
    "  key_id     INTEGER,"
    "  filename   TEXT    NOT NULL,"
    "  purpose    TEXT    NOT NULL,"
    "  bytes      INTEGER NOT NULL CHECK (bytes >= 0),"
    "  created_ms INTEGER NOT NULL"
    ");"
    "CREATE INDEX files_by_key ON files(key_id, created_ms);"
    /* batches (storage/batches.c): one row per batch with OpenAI's status,
     * counts and times; its lines with their bodies (copied from the input
     * file when it validated) and, once run, their result lines */
    "CREATE TABLE batches ("
    "  id                TEXT    PRIMARY KEY,"
    "  key_id            INTEGER,"
    "  endpoint          TEXT    NOT NULL,"
    "  input_file_id     TEXT    NOT NULL,"
    "  completion_window TEXT    NOT NULL,"
    "  metadata          TEXT,"
    "  status            TEXT    NOT NULL CHECK (status IN ('validating', 'failed', 'in_progress',"
    "                    'finalizing', 'completed', 'expired', 'cancelling', 'cancelled')),"
    "  output_file_id    TEXT,"
    "  error_file_id     TEXT,"
    "  errors            TEXT,"
    "  total             INTEGER NOT NULL DEFAULT 0,"
    "  completed         INTEGER NOT NULL DEFAULT 0,"
    "  failed            INTEGER NOT NULL DEFAULT 0,"
    "  created_ms        INTEGER NOT NULL,"
    "  in_progress_ms    INTEGER,"
    "  expires_ms        INTEGER,"
    "  finalizing_ms     INTEGER,"
    "  completed_ms      INTEGER,"
    "  failed_ms         INTEGER,"
    "  expired_ms        INTEGER,"
    "  cancelling_ms     INTEGER,"
    "  cancelled_ms      INTEGER"
    ");"
    "CREATE INDEX batches_by_key ON batches(key_id, created_ms);"
    "CREATE TABLE batch_lines ("
    "  batch_id  TEXT    NOT NULL REFERENCES batches(id) ON DELETE CASCADE,"
    "  line      INTEGER NOT NULL,"
    "  custom_id TEXT    NOT NULL,"
    "  body      TEXT    NOT NULL,"
    "  state     INTEGER NOT NULL DEFAULT 0 CHECK (state IN (0, 1, 2)),"
    "  result    TEXT,"
    "  PRIMARY KEY (batch_id, line)"
    ") WITHOUT ROWID;"
    /* a batch line's ledger row names its batch */
    "ALTER TABLE requests ADD COLUMN batch_id TEXT;"
    "CREATE INDEX requests_by_batch ON requests(batch_id) WHERE batch_id IS NOT NULL;"
    /* the response cache (storage/cache.c): deterministic answers by the
     * hash of everything that shapes them; a request answered from it is
     * marked in its ledger row and costs no tokens */
    "ALTER TABLE requests ADD COLUMN response_cached INTEGER NOT NULL DEFAULT 0;"
    "CREATE TABLE response_cache ("
    "  key          BLOB    PRIMARY KEY,"
    "  model        TEXT    NOT NULL,"
    "  body         TEXT    NOT NULL,"
    "  bytes        INTEGER NOT NULL,"
    "  created_ms   INTEGER NOT NULL,"
    "  last_used_ms INTEGER NOT NULL,"
    "  hits         INTEGER NOT NULL DEFAULT 0"
    ");"
    "CREATE INDEX response_cache_lru ON response_cache(last_used_ms);"
    /* a key may be kept out of the response cache (`ember keys set ID
     * --response-cache off`): its requests are always computed afresh */
    "ALTER TABLE api_keys ADD COLUMN response_cache INTEGER NOT NULL DEFAULT 1 CHECK (response_cache IN (0, 1));"
    "PRAGMA user_version = 7;",

    /* 7 -> 8: which front door a request came through (NULL: unknown, as
     * for every row written before this step), the completion tokens it
     * spent thinking and the tool calls its answer made (0 for older rows). */
    "ALTER TABLE requests ADD COLUMN endpoint TEXT;"
    "ALTER TABLE requests ADD COLUMN reasoning_tokens INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE requests ADD COLUMN tool_calls INTEGER NOT NULL DEFAULT 0;"
    "PRAGMA user_version = 8;",

    /* 8 -> 9: stored responses of the Responses API (storage/responses.c):
     * the caller's JSON texts per response id, owned by the key that made
     * them (NULL: no key, as files), deleted by retention by created_ms. */
    "CREATE TABLE responses ("
    "  id           TEXT    PRIMARY KEY,"
    "  key_id       INTEGER,"
    "  created_ms   INTEGER NOT NULL,"
    "  conversation TEXT    NOT NULL,"
    "  input        TEXT    NOT NULL,"
    "  response     TEXT    NOT NULL"
    ");"
    "CREATE INDEX responses_created ON responses(created_ms);"
    "PRAGMA user_version = 9;",
};

int em_sto_code(int sqlite_rc)
{
    switch (sqlite_rc & 0xff) {
    case SQLITE_OK:
    case SQLITE_ROW:
    case SQLITE_DONE:     return EM_OK;
    case SQLITE_NOMEM:    return EM_ENOMEM;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:   return EM_EBUSY;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:   return EM_EFORMAT;
    case SQLITE_CANTOPEN: return EM_ENOENT;
    case SQLITE_CONSTRAINT:
    case SQLITE_TOOBIG:
    case SQLITE_MISMATCH:
    case SQLITE_RANGE:    return EM_EINVAL;
    default:              return EM_EIO;
    }
}

int em_sto_conn_fault(int sqlite_rc)
{
    switch (sqlite_rc & 0xff) {
    case SQLITE_CONSTRAINT:
    case SQLITE_TOOBIG:
    case SQLITE_MISMATCH:
    case SQLITE_RANGE:
    case SQLITE_OK:
    case SQLITE_ROW:
    case SQLITE_DONE:
        return 0;
    default:
        return 1;
    }
}

int em_sto_fail(sqlite3 *db, int rc, const char *path, const char *what, em_err *err)
{
    int code = em_sto_code(rc);
    const char *msg = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    /* sqlite3_errmsg describes the last call on db; fall back to the code's
     * text when the last call succeeded (e.g. a constraint seen by step). */
    if (db && sqlite3_errcode(db) == SQLITE_OK)
        msg = sqlite3_errstr(rc);
    const char *hint = "";
    if ((rc & 0xff) == SQLITE_CORRUPT || (rc & 0xff) == SQLITE_NOTADB)
        hint = " (the file is corrupt or not an ember database)";
    if (what)
        return em_err_set(err, code, "%s: %s: %s%s", path, what, msg, hint);
    return em_err_set(err, code, "%s: %s%s", path, msg, hint);
}

int em_sto_user_version(sqlite3 *db, int *v, const char *path, em_err *err)
{
    sqlite3_stmt *s = NULL;
    int rc = sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &s, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        *v = sqlite3_column_int(s, 0);
        rc = SQLITE_OK;
    }
    int ret = rc == SQLITE_OK ? 0 : em_sto_fail(db, rc, path, "reading the schema version", err);
    sqlite3_finalize(s);
    return ret;
}

int em_sto_migrate(sqlite3 *db, int target, const char *path, em_err *err)
{
    int ret = 0;
    if (target < 0 || target > EM_STORAGE_SCHEMA_VERSION)
        return em_err_set(err, EM_EINVAL, "%s: no schema version %d", path, target);
    for (;;) {
        int v = 0;
        int rc = sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
        if (rc != SQLITE_OK) {
            ret = em_sto_fail(db, rc, path, "migrating the schema", err);
            goto done;
        }
        /* Re-read under the write lock: another process may have migrated. */
        if ((ret = em_sto_user_version(db, &v, path, err)))
            goto done;
        if (v >= target) {
            rc = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
            if (rc != SQLITE_OK)
                ret = em_sto_fail(db, rc, path, "migrating the schema", err);
            goto done;
        }
        rc = sqlite3_exec(db, migrations[v], NULL, NULL, NULL);
        if (rc == SQLITE_OK)
            rc = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
        if (rc != SQLITE_OK) {
            char what[64];
            snprintf(what, sizeof what, "migrating the schema from version %d to %d", v, v + 1);
            ret = em_sto_fail(db, rc, path, what, err);
            goto done;
        }
    }
done:
    if (!sqlite3_get_autocommit(db))
        sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    return ret;
}

static int exec_pragma(sqlite3 *db, const char *sql, const char *path, em_err *err)
{
    int rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
    return rc == SQLITE_OK ? 0 : em_sto_fail(db, rc, path, NULL, err);
}

static int quick_check(sqlite3 *db, const char *path, em_err *err)
{
    sqlite3_stmt *s = NULL;
    int ret = 0;
    int rc = sqlite3_prepare_v2(db, "PRAGMA quick_check(1)", -1, &s, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(s);
    if (rc != SQLITE_ROW) {
        ret = em_sto_fail(db, rc, path, "checking the database", err);
        goto done;
    }
    const char *res = (const char *)sqlite3_column_text(s, 0);
    if (!res || strcmp(res, "ok") != 0) {
        ret = em_err_set(err, EM_EFORMAT, "%s: the database is corrupt: %s", path,
                         res ? res : "quick_check gave no answer");
        for (char *p = err ? err->msg : NULL; p && *p; p++)   /* one line */
            if (*p == '\n' || *p == '\r')
                *p = ' ';
    }
done:
    sqlite3_finalize(s);
    return ret;
}

void em_sto_conn_close(em_sto_conn *c)
{
    for (int i = 0; i < EM_STMT_COUNT; i++) {
        sqlite3_finalize(c->stmt[i]);
        c->stmt[i] = NULL;
    }
    sqlite3_close(c->db);   /* accepts NULL; all statements are finalized */
    c->db = NULL;
    c->readonly = 0;
    c->broken = 0;
}

int em_sto_conn_open(const em_sto_conn_params *p, em_sto_conn *c, em_err *err)
{
    int ret = 0, v = 0;
    memset(c, 0, sizeof *c);
    int flags = p->readonly ? SQLITE_OPEN_READONLY
                            : SQLITE_OPEN_READWRITE | (p->create ? SQLITE_OPEN_CREATE : 0);
    struct stat sb;
    if (!p->create || p->readonly) {
        if (stat(p->path, &sb) != 0) {
            ret = em_err_set(err, errno == ENOENT ? EM_ENOENT : EM_EIO, "%s: %s", p->path,
                             strerror(errno));
            goto fail;
        }
    }
    int rc = sqlite3_open_v2(p->path, &c->db, flags, NULL);
    if (rc != SQLITE_OK) {
        ret = em_sto_fail(c->db, rc, p->path, "cannot open", err);
        goto fail;
    }
    sqlite3_busy_timeout(c->db, p->busy_ms);
    if ((ret = exec_pragma(c->db, "PRAGMA foreign_keys = ON", p->path, err)) ||
        (ret = em_sto_user_version(c->db, &v, p->path, err)))
        goto fail;
    if (v > EM_STORAGE_SCHEMA_VERSION) {
        ret = em_err_set(err, EM_EUNSUPPORTED,
                         "%s: schema version %d is newer than this ember understands (%d)",
                         p->path, v, EM_STORAGE_SCHEMA_VERSION);
        goto fail;
    }
    c->readonly = p->readonly || sqlite3_db_readonly(c->db, "main") == 1;
    if (p->quick_check && (ret = quick_check(c->db, p->path, err)))
        goto fail;
    if (p->query_only && (ret = exec_pragma(c->db, "PRAGMA query_only = ON", p->path, err)))
        goto fail;
    if (!c->readonly && p->migrate) {
        if ((ret = exec_pragma(c->db, "PRAGMA journal_mode = WAL", p->path, err)) ||
            (ret = exec_pragma(c->db, "PRAGMA synchronous = FULL", p->path, err)))
            goto fail;
        if (p->max_pages > 0) {
            /* PRAGMA takes no bound parameters; the value is an integer. */
            char sql[64];
            snprintf(sql, sizeof sql, "PRAGMA max_page_count = %lld", (long long)p->max_pages);
            if ((ret = exec_pragma(c->db, sql, p->path, err)))
                goto fail;
        }
    }
    if (p->migrate && v < EM_STORAGE_SCHEMA_VERSION) {
        if (c->readonly) {
            ret = em_err_set(err, EM_EIO,
                             "%s: schema version %d needs an upgrade to %d but the file is read-only",
                             p->path, v, EM_STORAGE_SCHEMA_VERSION);
            goto fail;
        }
        if ((ret = em_sto_migrate(c->db, EM_STORAGE_SCHEMA_VERSION, p->path, err)))
            goto fail;
    } else if (!p->migrate && v < 1) {
        ret = em_err_set(err, EM_EFORMAT, "%s: not an ember database (no schema)", p->path);
        goto fail;
    }
    return 0;
fail:
    em_sto_conn_close(c);
    return ret;
}

sqlite3_stmt *em_sto_stmt(em_sto_conn *c, int slot, const char *sql, const char *path,
                          em_err *err)
{
    if (c->stmt[slot]) {
        sqlite3_reset(c->stmt[slot]);
        sqlite3_clear_bindings(c->stmt[slot]);
        return c->stmt[slot];
    }
    int rc = sqlite3_prepare_v3(c->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &c->stmt[slot], NULL);
    if (rc != SQLITE_OK) {
        em_sto_fail(c->db, rc, path, "preparing a statement", err);
        sqlite3_finalize(c->stmt[slot]);
        c->stmt[slot] = NULL;
        if (em_sto_conn_fault(rc))
            c->broken = 1;
        return NULL;
    }
    return c->stmt[slot];
}
