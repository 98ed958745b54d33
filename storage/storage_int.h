/* storage_int.h — private structs and helpers shared by the storage/ sources
 * files (never included outside storage/ except by its unit tests). */
#ifndef EM_STORAGE_INT_H
#define EM_STORAGE_INT_H

#include <pthread.h>
#include <sqlite3.h>

#include "storage/storage.h"

/* Statement slots of a connection. Each statement is prepared on first use
 * and kept (SQLITE_PREPARE_PERSISTENT) until the connection closes; SQL text
 * is always a constant next to its use, values are always bound. */
enum {
    /* writer connection */
    EM_STMT_W_UPSERT,
    EM_STMT_W_BEGIN,
    EM_STMT_W_COMMIT,
    EM_STMT_W_ROLLBACK,
    /* ops connection: keys */
    EM_STMT_KEY_INSERT,
    EM_STMT_KEY_LIST,
    EM_STMT_KEY_BY_PREFIX,
    EM_STMT_KEY_GET,
    EM_STMT_KEY_REVOKE,
    EM_STMT_KEY_SET_CACHE,
    EM_STMT_KEY_ROTATE,
    /* ops connection: keys between boxes (key_transfer.c) */
    EM_STMT_KEY_EXPORT,
    EM_STMT_KEY_BY_HASH,
    EM_STMT_KEY_CLASH,
    EM_STMT_KEY_IMPORT_INSERT,
    EM_STMT_KEY_IMPORT_UPDATE,
    /* ops connection: conversations */
    EM_STMT_CONV_INSERT,
    EM_STMT_CONV_LIST,
    EM_STMT_CONV_DELETE,
    EM_STMT_CONV_TOUCH,
    EM_STMT_MSG_INSERT,
    EM_STMT_MSG_LIST,
    /* ops connection: conversation branches, export, import */
    EM_STMT_CONV_GET,
    EM_STMT_CONV_LEAF,
    EM_STMT_CONV_SET_LEAF,
    EM_STMT_CONV_RENAME,
    EM_STMT_CONV_IMPORT,
    EM_STMT_MSG_IN_CONV,
    EM_STMT_MSG_PATH,
    EM_STMT_OPS_BEGIN_READ,
    /* ops connection: files (files.c) */
    EM_STMT_FILE_INSERT,
    EM_STMT_FILE_GET,
    EM_STMT_FILE_FIND,
    EM_STMT_FILE_LIST,
    EM_STMT_FILE_DELETE,
    /* ops connection: batches (batches.c) */
    EM_STMT_BATCH_INSERT,
    EM_STMT_BATCH_GET,
    EM_STMT_BATCH_LIST,
    EM_STMT_BATCH_LINE_INSERT,
    EM_STMT_BATCH_LINES_DROP,
    EM_STMT_BATCH_SET_STATUS,
    EM_STMT_BATCH_PENDING,
    EM_STMT_BATCH_LINE_DONE,
    EM_STMT_BATCH_COUNT_DONE,
    EM_STMT_BATCH_BUMP,
    /* ops connection: the response cache (cache.c) */
    EM_STMT_CACHE_GET,
    EM_STMT_CACHE_TOUCH,
    EM_STMT_CACHE_PUT,
    EM_STMT_CACHE_TOTAL,
    EM_STMT_CACHE_EVICT,
    EM_STMT_CACHE_CLEAR,
    EM_STMT_CACHE_SIZE,
    EM_STMT_BATCH_ACTIVE,
    EM_STMT_BATCH_RESULTS,
    /* ops connection: stored responses of the Responses API (responses.c) */
    EM_STMT_RESP_INSERT,
    EM_STMT_RESP_GET,
    EM_STMT_RESP_DELETE,
    /* ops connection: maintenance */
    EM_STMT_RETENTION,
    EM_STMT_RETENTION_RESPONSES,
    EM_STMT_MARK_INTERRUPTED,
    EM_STMT_UTIL_ADD,
    EM_STMT_OPS_BEGIN,
    EM_STMT_OPS_COMMIT,
    EM_STMT_OPS_ROLLBACK,
    EM_STMT_COUNT
};

/* One SQLite connection and its prepared statements. */
typedef struct {
    sqlite3      *db;
    sqlite3_stmt *stmt[EM_STMT_COUNT];
    int           readonly;   /* the file could only be opened read-only */
    int           broken;     /* a connection-level failure: reopen before reuse */
} em_sto_conn;

/* How to open a connection. */
typedef struct {
    const char *path;
    int      readonly;       /* SQLITE_OPEN_READONLY */
    int      create;         /* create the file when missing */
    int      migrate;        /* the ledger's own connection: WAL, synchronous,
                                max_pages, forward migrations */
    int      query_only;     /* PRAGMA query_only (usage queries) */
    int      quick_check;    /* PRAGMA quick_check before migrating */
    int      busy_ms;
    int64_t  max_pages;      /* 0 = none */
} em_sto_conn_params;

struct em_storage {
    char            *path;
    em_storage_opts  opts;          /* opts.path points at path */

    /* keys, conversations, maintenance */
    pthread_mutex_t  ops_lock;
    em_sto_conn      ops;
    uint64_t         ct_compares;   /* constant-time hash comparisons (tests) */

    /* the queue and writer status: all under lock */
    pthread_mutex_t  lock;
    pthread_cond_t   wake;          /* signals the writer */
    pthread_cond_t   done;          /* signals flushers: a batch attempt finished */
    em_usage_record *ring;          /* [cap] */
    int64_t         *ring_ns;       /* [cap] monotonic enqueue time */
    size_t           cap, head, count;
    size_t           inflight;      /* records in the writer's current batch */
    uint64_t         enq_seq;       /* records accepted so far */
    uint64_t         done_seq;      /* records resolved (committed, rejected, dropped) */
    uint64_t         fail_gen;      /* failed attempts so far */
    int              stop;
    int              flush_waiters;
    em_storage_health   health;
    em_storage_counters ctr;        /* queue_depth/cap/degraded filled on read */

    /* writer thread only */
    em_sto_conn      w;
    int              w_failed;      /* the last connect attempt failed */
    em_usage_record *batch;         /* [batch_rows] */
    const em_usage_record **batch_ok;   /* [batch_rows] rows that committed */
    pthread_t        thread;
    int              thread_started;
};

/* ---- schema.c ---- */

/* Open a connection per p (pragmas, version check, quick check, migrations).
 * On failure c is left closed and err names the file. */
int  em_sto_conn_open(const em_sto_conn_params *p, em_sto_conn *c, em_err *err);
void em_sto_conn_close(em_sto_conn *c);   /* accepts a closed one */

/* The statement in slot, prepared on first use. NULL on failure (err set). */
sqlite3_stmt *em_sto_stmt(em_sto_conn *c, int slot, const char *sql, const char *path,
                          em_err *err);

/* Apply migrations on db until PRAGMA user_version == target (each step in
 * its own transaction). Exposed for tests, which build older versions. */
int em_sto_migrate(sqlite3 *db, int target, const char *path, em_err *err);

/* PRAGMA user_version of db into *v. */
int em_sto_user_version(sqlite3 *db, int *v, const char *path, em_err *err);

/* Map an SQLite result code to an EM_E* code and set err to
 * "<path>: <what>: <sqlite message>" (what may be NULL). */
int em_sto_fail(sqlite3 *db, int rc, const char *path, const char *what, em_err *err);
int em_sto_code(int sqlite_rc);

/* 1 when an SQLite error means the connection should be reopened. */
int em_sto_conn_fault(int sqlite_rc);

/* ---- writer.c ---- */
int  em_sto_writer_start(em_storage *st, em_err *err);
void em_sto_writer_stop(em_storage *st);   /* commits what it can, joins */
void em_sto_set_degraded(em_storage *st, const char *reason);   /* takes st->lock */

/* ---- storage.c ---- */
/* Lock the ops connection, reopening it first if needed; on success the
 * caller owns ops_lock and must call em_sto_ops_end. */
int  em_sto_ops_begin(em_storage *st, em_err *err);
/* Release ops_lock; rc is the SQLite code of the last failure (0 = none). */
void em_sto_ops_end(em_storage *st, int sqlite_rc);

/* ---- conversations.c: helpers conv_import.c shares ---- */
/* The ops statement of slot (prepared on first use); NULL with *ret set. */
sqlite3_stmt *em_sto_prep(em_storage *st, int slot, const char *sql, int *ret, em_err *err);
/* Step s, which gives no row, and reset it: 0, or the failure (SQLite code
 * in *rc, err says "<what>: ..."). */
int em_sto_step_done(em_storage *st, sqlite3_stmt *s, int *rc, const char *what, em_err *err);
/* On the ops connection: slot EM_STMT_OPS_BEGIN (BEGIN IMMEDIATE),
 * EM_STMT_OPS_BEGIN_READ (BEGIN), EM_STMT_OPS_COMMIT or EM_STMT_OPS_ROLLBACK. */
int em_sto_txn(em_storage *st, int slot, int *rc, em_err *err);
/* Roll back if a transaction is open (after a failure). */
void em_sto_txn_abort(em_storage *st);
/* ---- files.c: helpers batches.c shares ---- */
/* A new id: prefix and 12 random bytes in hex (EM_EIO without randomness). */
int  em_sto_new_id(const char *prefix, char *id, size_t cap, em_err *err);
/* 1 when id is prefix and 24 lowercase hex digits: one em_sto_new_id made. */
int  em_sto_id_ok(const char *id, const char *prefix);
/* Bind a key scope at ?a and ?a+1: (?a OR key_id IS ?a+1), ?a set for
 * EM_STORAGE_ANY_KEY. */
void em_sto_bind_scope(sqlite3_stmt *s, int a, int64_t key_id);
/* Bind key_id as conversations.key_id holds it (0: NULL). */
void em_sto_bind_key(sqlite3_stmt *s, int i, int64_t key_id);
/* The text of column col of the row s is on, as a malloc'd NUL-terminated
 * copy ("" for NULL); NULL when out of memory. */
char *em_sto_column_dup(sqlite3_stmt *s, int col);
/* Read the message row s is on (columns: id, parent_id, role, content,
 * tokens, finish_reason, created_ms) into m (content malloc'd). EM_ENOMEM. */
int em_sto_message_row(sqlite3_stmt *s, em_message *m);
/* Read the conversation row s is on (columns: id, key_id, title,
 * created_ms, updated_ms, message count, current leaf) into c. */
void em_sto_conv_row(sqlite3_stmt *s, em_conv_info *c);
/* Check a message to add: role, content size, finish_reason. what names it
 * in err. 0 or EM_EINVAL. */
int em_sto_message_check(const char *role, const char *content, const char *finish_reason,
                         const char *what, em_err *err);
/* Insert one message of conv_id (parent 0: none; created_ms as given) and
 * put its id in *id. 0 or the failure (SQLite code in *rc). */
int em_sto_message_insert(em_storage *st, int64_t conv_id, int64_t parent, const em_message_new *m,
                          int64_t created_ms, int64_t *id, int *rc, em_err *err);
/* Set conv_id's current leaf (a trigger refuses a message of another one). */
int em_sto_set_leaf(em_storage *st, int64_t conv_id, int64_t leaf_id, int *rc, em_err *err);
/* The error for a missing conversation / for store_content = 0. */
int em_sto_no_conv(int64_t conv_id, em_err *err);
int em_sto_content_off(const em_storage *st, em_err *err);
/* Check a title: NULL, or 1..EM_STORAGE_TITLE_MAX bytes. 0 or EM_EINVAL. */
int em_sto_title_check(const char *title, const char *what, em_err *err);

#define EM_STO_CONV_COLUMNS                                                              \
    "c.id, c.key_id, c.title, c.created_ms, c.updated_ms,"                               \
    " (SELECT count(*) FROM messages m WHERE m.conversation_id = c.id),"                 \
    " coalesce(c.current_leaf_id,"                                                       \
    " (SELECT max(m.id) FROM messages m WHERE m.conversation_id = c.id), 0)"
#define EM_STO_MESSAGE_COLUMNS \
    "id, coalesce(parent_id, 0), role, content, tokens, coalesce(finish_reason, ''), created_ms"

/* ---- usage.c ---- */
/* The UTC day (len_ms one day: "2024-05-01") or hour (one hour:
 * "2024-05-01T10:00Z") that ms falls in: its label (cap >= 18) and start. */
void em_sto_bucket_label(int64_t ms, int64_t len_ms, char *buf, size_t cap, int64_t *start_ms);
/* A grouping's name as em_storage_group_by_parse reads it ("none" for one
 * out of range). Static. */
const char *em_sto_group_by_name(em_usage_group_by g);

/* ---- export.c ---- */
/* v rounded to 1/scale as a JSON real; null when NAN or infinite (new reference). */
struct json_t;
struct json_t *em_sto_json_num(double v, double scale);

/* ---- keys.c ---- */
/* Constant-time comparison of two 32-byte hashes (sodium_memcmp). */
int em_sto_hash_equal(em_storage *st, const unsigned char *a, const unsigned char *b);
/* 1 when name is a valid key name: 1..EM_STORAGE_NAME_MAX-1 bytes, no control bytes. */
int em_sto_key_name_ok(const char *name);
/* The api_keys columns em_sto_key_row reads, in its order. */
#define EM_STO_KEY_COLUMNS \
    "id, name, prefix, default_class, rate_limit_per_min, created_ms, revoked_ms, admin, response_cache"
/* The column index of "hash" when a query selects EM_STO_KEY_COLUMNS ", hash". */
#define EM_STO_KEY_COL_HASH 9
/* Read the key row s is on (EM_STO_KEY_COLUMNS first) into k. */
void em_sto_key_row(sqlite3_stmt *s, em_key_info *k);

#endif
