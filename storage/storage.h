/* storage.h — everything ember persists: one SQLite database holding the
 * usage ledger (`requests`), API keys, conversation history, the Files and
 * Batch APIs' rows, the response cache and stored responses. No other
 * layer runs SQL. The schema, migration policy and the writer's behaviour are
 * described in docs/storage.md.
 *
 * Threads. em_storage_submit() only copies a record into a bounded queue and
 * returns; a writer thread owns the write connection and commits the queue in
 * batches. Every other em_storage_* call on an open em_storage is safe from
 * any thread: key and conversation calls share one mutex-guarded connection,
 * usage queries open their own read-only connection.
 *
 * Ownership. Every pointer parameter is borrowed for the duration of the call
 * unless its comment says otherwise; the library keeps no pointer to caller
 * memory after a call returns. Arrays returned through `**out` parameters are
 * allocated by the library and released with the free function named next to
 * them. Errors follow core/err.h: 0 or a negative EM_E* code, with an
 * optional caller-owned em_err. */
#ifndef EM_STORAGE_H
#define EM_STORAGE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/err.h"

/* The schema version this build writes (PRAGMA user_version). */
#define EM_STORAGE_SCHEMA_VERSION 9

typedef struct em_storage em_storage;

/* ---- options --------------------------------------------------------------- */

typedef struct em_usage_record em_usage_record;

/* Called on the writer thread right after a batch's COMMIT succeeded; rows
 * (n of them) are borrowed for the duration of the call. Must not call back
 * into em_storage_flush() or em_storage_close(). */
typedef void (*em_storage_commit_fn)(void *ctx, const em_usage_record *const *rows, size_t n);

typedef struct {
    const char *path;        /* database file; copied by em_storage_open */
    int  create;             /* 1: create the file when missing (default 1) */
    int  store_content;      /* 1: keep conversation and stored-response text; 0: refuse to (default 1) */
    int  retention_days;     /* delete conversations not updated, and stored
                                responses not created, for this many days,
                                checked at open and hourly; 0 = keep (default 0) */
    int  queue_cap;          /* records the queue holds before dropping (default 4096) */
    int  batch_rows;         /* commit when this many rows wait (default 256) */
    int  batch_ms;           /* ... or when the oldest waited this long (default 200) */
    int  retry_ms;           /* degraded: wait between retries (default 1000) */
    int  busy_ms;            /* SQLite busy timeout of every connection (default 2000) */
    int64_t max_pages;       /* cap the file at this many 4 KiB pages (PRAGMA
                                max_page_count); 0 = no cap (default 0) */
    int  quick_check;        /* 1: PRAGMA quick_check at open (default 1) */
    em_storage_commit_fn on_commit;   /* optional */
    void *on_commit_ctx;              /* passed to on_commit, never dereferenced */
} em_storage_opts;

/* Fill o with the defaults above (path = "ember.db"). */
void em_storage_opts_init(em_storage_opts *o);

/* ---- lifecycle ----------------------------------------------------------------- */

/* Open (and create, when opts->create) the database, apply forward
 * migrations, check it, and start the writer thread. A file that is not an
 * SQLite database, fails the quick check, or has a schema newer than this
 * build is an error whose message names the file. A database that opens but
 * cannot be written (read-only file, locked) opens fine in degraded mode.
 * *out receives the handle, released with em_storage_close. */
int em_storage_open(const em_storage_opts *opts, em_storage **out, em_err *err);

/* Commit what is queued (one attempt when degraded; what cannot be written is
 * counted as dropped), stop the writer thread and close every connection.
 * Accepts NULL. */
void em_storage_close(em_storage *st);

/* The database path (owned by st, valid until em_storage_close). */
const char *em_storage_path(const em_storage *st);

/* ---- the usage ledger ---------------------------------------------------------- */

typedef enum {
    EM_USAGE_INTERACTIVE = 0,
    EM_USAGE_BACKGROUND  = 1,
} em_usage_class;

typedef enum {
    EM_USAGE_ADMITTED = 0,          /* admitted, not ended yet */
    EM_USAGE_COMPLETED,
    EM_USAGE_PREEMPTED_COMPLETED,   /* completed after one or more preemptions */
    EM_USAGE_CANCELLED,             /* client went away / stop */
    EM_USAGE_FAILED,                /* error text says why */
    EM_USAGE_REJECTED,              /* refused by admission control (busy) */
    EM_USAGE_INTERRUPTED,           /* was running when ember stopped */
} em_usage_status;

#define EM_USAGE_ID_MAX     64
#define EM_USAGE_ADDR_MAX   64
#define EM_USAGE_MODEL_MAX  128
#define EM_USAGE_REASON_MAX 32
#define EM_USAGE_ERROR_MAX  256
#define EM_USAGE_ENDPOINT_MAX 32

/* One row of `requests`. The scheduler submits it when a request is admitted
 * and again, with the same request_id, when it ends: the second replaces the
 * first (columns left unknown keep their earlier value). Strings are
 * NUL-terminated inside their arrays. Timestamps are Unix epoch ms (UTC),
 * 0 = unknown; durations are ms, negative = unknown. */
struct em_usage_record {
    char     request_id[EM_USAGE_ID_MAX];    /* required, unique per request */
    int64_t  key_id;                         /* api_keys.id, 0 = no key */
    char     client_addr[EM_USAGE_ADDR_MAX];
    em_usage_class  cls;
    char     model[EM_USAGE_MODEL_MAX];
    int64_t  received_ms, started_ms, first_token_ms, finished_ms;
    em_usage_status status;
    int64_t  prompt_tokens;
    int64_t  cached_tokens;                  /* prompt tokens served from the prefix cache */
    int64_t  completion_tokens;
    double   queue_ms, ttft_ms, tpot_mean_ms, tpot_p99_ms;
    int32_t  preemptions;
    char     finish_reason[EM_USAGE_REASON_MAX];  /* "stop", "length", ... or "" */
    char     error[EM_USAGE_ERROR_MAX];           /* "" unless failed */
    char     batch_id[EM_USAGE_ID_MAX];           /* the batch a batch line belongs to, else "" */
    int      response_cached;                     /* 1: answered from the response cache (no tokens run) */
    char     endpoint[EM_USAGE_ENDPOINT_MAX];     /* the front door: "chat.completions", "completions",
                                                     "responses", "messages", "ws.chat"; "" = unknown */
    int64_t  reasoning_tokens;                    /* completion tokens spent thinking (part of completion_tokens) */
    int32_t  tool_calls;                          /* tool calls the answer made */
};

/* Zero rec (endpoint "", no reasoning tokens, no tool calls), mark every
 * duration unknown (-1), class interactive, admitted. */
void em_usage_record_init(em_usage_record *rec);

/* Copy rec into the writer's queue and return at once; never waits on disk.
 * 0: queued. EM_EBUSY: the queue is full, the record was dropped (counted,
 * and logged at error level with its billing facts, as are the rows still
 * unwritten when em_storage_close gives up on a failing database).
 * EM_EINVAL: empty request_id (dropped, counted). */
int em_storage_submit(em_storage *st, const em_usage_record *rec);

/* Ask the writer to commit now and wait up to timeout_ms until everything
 * queued before the call is committed. 0: committed. EM_EIO: a write failed
 * meanwhile (err says why; the rows stay queued for retry). EM_EBUSY: timed out. */
int em_storage_flush(em_storage *st, int timeout_ms, em_err *err);

/* Health for /healthz: ok, or degraded with the reason of the last failure.
 * Degraded clears when a later write succeeds. */
typedef struct {
    int     degraded;       /* 0 = ok */
    char    reason[256];    /* "" when ok */
    int64_t since_ms;       /* when it became degraded (epoch ms), 0 when ok */
} em_storage_health;

void em_storage_health_get(em_storage *st, em_storage_health *out);

/* Counters for /metrics. Monotonic except queue_depth and degraded. */
typedef struct {
    uint64_t rows_written;    /* records committed */
    uint64_t rows_dropped;    /* queue full, rejected by the database, or unwritten at close */
    uint64_t batches;         /* committed transactions */
    uint64_t write_errors;    /* failed batch attempts */
    size_t   queue_depth;     /* records waiting (queued + in the current batch) */
    size_t   queue_cap;
    int      degraded;
    char     last_error[256]; /* "" if none yet */
    int64_t  last_error_ms;   /* epoch ms, 0 if none */
} em_storage_counters;

void em_storage_counters_get(em_storage *st, em_storage_counters *out);

/* Daemon start: mark rows still 'admitted' (left by a previous run that
 * stopped before they ended) as 'interrupted'. *n (optional) gets the count.
 * Call only from the process that owns the ledger, before serving. */
int em_storage_mark_interrupted(em_storage *st, int64_t *n, em_err *err);

/* Delete conversations (and their messages) not updated since
 * now_ms - retention_days, and stored responses created before it, in one
 * transaction. No-op when retention_days is 0. *deleted (optional) gets
 * the number of conversations and responses removed. */
int em_storage_retention_run(em_storage *st, int64_t now_ms, int64_t *deleted, em_err *err);

/* Names as stored in the database ("interactive", "completed", ...). Static. */
const char *em_storage_class_name(em_usage_class c);
const char *em_storage_status_name(em_usage_status s);
/* "interactive" / "background" -> *out; EM_EINVAL otherwise. */
int em_storage_class_parse(const char *s, em_usage_class *out);

/* ---- API keys ------------------------------------------------------------------- */

#define EM_STORAGE_KEY_MAX    64   /* buffer for a full key, NUL included */
#define EM_STORAGE_PREFIX_LEN 9    /* "em_" + 6 characters */
#define EM_STORAGE_NAME_MAX   64

typedef struct {
    int64_t id;
    char    name[EM_STORAGE_NAME_MAX];
    char    prefix[EM_STORAGE_PREFIX_LEN + 1];   /* for display, e.g. "em_Xk3q9Z" */
    em_usage_class default_class;
    int32_t rate_limit_per_min;                  /* 0 = unlimited */
    int64_t created_ms;
    int64_t revoked_ms;                          /* 0 = active */
    int     admin;                               /* 1: may read every key's usage */
    int     response_cache;                      /* 0: never answered from / stored in the response cache */
} em_key_info;

/* Create a key: 32 random bytes, written as "em_" + 43 base64url characters
 * into key_out (cap >= EM_STORAGE_KEY_MAX). Only its BLAKE2b hash and display
 * prefix are stored; the caller shows key_out once and should wipe it
 * (sodium_memzero). name: 1..63 printable characters. info (optional) gets
 * the new row. */
int em_storage_key_add(em_storage *st, const char *name, em_usage_class default_class,
                       int32_t rate_limit_per_min, char *key_out, size_t cap,
                       em_key_info *info, em_err *err);

/* The same, for an admin key: one that may read every key's usage
 * (GET /api/usage). info->admin is 1. */
int em_storage_key_add_admin(em_storage *st, const char *name, em_usage_class default_class,
                             int32_t rate_limit_per_min, char *key_out, size_t cap,
                             em_key_info *info, em_err *err);

/* Every key, active and revoked, by id. *out (free() it) gets *n entries. */
int em_storage_key_list(em_storage *st, em_key_info **out, size_t *n, em_err *err);

/* A new secret for key id, everything else kept (name, class, limits, its
 * usage): written into key_out like em_storage_key_add's, the old key
 * refused from now on; *info (may be NULL) the key with its new prefix.
 * EM_ENOENT: no such key; EM_ESTATE: revoked. */
int em_storage_key_rotate(em_storage *st, int64_t id, char *key_out, size_t cap, em_key_info *info, em_err *err);

/* Key id, active or revoked, into *out. EM_ENOENT: no such key. */
int em_storage_key_get(em_storage *st, int64_t id, em_key_info *out, em_err *err);

/* Whether key id's requests use the response cache (new keys do). EM_ENOENT:
 * no such key. A revoked key may be changed too. */
int em_storage_key_set_cache(em_storage *st, int64_t id, int on, em_err *err);

/* Revoke key id. EM_ENOENT: no such key; EM_ESTATE: already revoked. */
int em_storage_key_revoke(em_storage *st, int64_t id, em_err *err);

/* Check a presented key (e.g. from "Authorization: Bearer ..."). The hash is
 * compared in constant time. 0 and *out filled: valid and active.
 * EM_ENOENT: unknown key. EM_ESTATE: revoked. EM_EIO etc.: the database
 * failed. Messages never contain the key. */
int em_storage_key_verify(em_storage *st, const char *key, em_key_info *out, em_err *err);

/* ---- API keys between boxes: export and import (key_transfer.c) ------------------ */
/* The same keys on every box behind a load balancer (docs/DEPLOY.md): a JSON
 * document that carries each key's hash, never the key (format in
 * docs/storage.md, "Moving keys between boxes"). */

#define EM_STORAGE_KEYS_FORMAT    "ember.keys"
#define EM_STORAGE_KEYS_VERSION   1
#define EM_STORAGE_KEYS_MAX_BYTES ((size_t)16 << 20)   /* a bigger document is refused */
#define EM_STORAGE_KEYS_MAX_COUNT 100000               /* keys in one document */

/* Every key, active and revoked, by id: name, prefix, hash (hex), class,
 * rate limit, admin flag, created and revoked times; ids stay behind. One
 * read transaction. *out: a malloc'd NUL-terminated JSON document ending in
 * a newline (free() it). */
int em_storage_keys_export(em_storage *st, char **out, em_err *err);

typedef struct {
    size_t added;       /* new on this box (new ids) */
    size_t updated;     /* there already (same hash), some field changed */
    size_t unchanged;   /* there already, every field the same */
} em_keys_import_stats;

/* Import the len bytes at json (need not be NUL-terminated) in one
 * transaction: all of it or nothing. Each key is found by its hash: a new
 * one is added; one already there takes the document's name, class, rate
 * limit, admin flag and created time, and stays revoked if it was (a
 * revoked one in the document revokes it). Importing the same document
 * twice changes nothing the second time. EM_EFORMAT / EM_EINVAL / EM_ERANGE,
 * err naming the place ("keys[3].hash: ..."), and nothing imported: not
 * JSON, another format or version, wrong types, unknown fields, a bad name,
 * prefix or hash, the same hash twice, more than EM_STORAGE_KEYS_MAX_BYTES
 * or EM_STORAGE_KEYS_MAX_COUNT; a key whose name or prefix is taken on this
 * box by a different key (one not in the document) is EM_EINVAL naming
 * both. stats (optional) gets the counts. */
int em_storage_keys_import(em_storage *st, const char *json, size_t len, em_keys_import_stats *stats,
                           em_err *err);

/* ---- conversations ----------------------------------------------------------------- */
/* Per key: key_id 0 means "no key" (a UI served without authentication).
 * A conversation is visible to and changeable by its own key only: another
 * key's conversation or message id is EM_ENOENT, the same answer as one that
 * does not exist. With store_content = 0, create, the message adds and import
 * fail with EM_ESTATE and the reads return what was stored before.
 *
 * Messages form a tree per conversation (docs/storage.md, "Branches"): each
 * has a parent (none for a first message) in the same conversation, created
 * before it (parent id < id). Editing or regenerating adds a sibling; the
 * conversation's current leaf names the branch shown, and is the newest
 * message added unless set. */

#define EM_STORAGE_TITLE_MAX 512   /* bytes of a conversation title */
#define EM_STORAGE_LEAF      (-1)  /* as a parent or leaf: the current leaf */
#define EM_STORAGE_ROOT      0     /* as a parent: none (a first message) */

typedef struct {
    int64_t id;
    int64_t key_id;
    char    title[EM_STORAGE_TITLE_MAX + 1];   /* as stored, whole; "" = none */
    int64_t created_ms, updated_ms;            /* updated by every new message */
    int64_t n_messages;                        /* every branch's */
    int64_t current_leaf_id;                   /* 0: no messages */
} em_conv_info;

typedef struct {
    int64_t id;
    int64_t parent_id;           /* 0: a first message */
    char    role[16];            /* "system", "user" or "assistant" */
    char   *content;             /* owned by the array, see em_storage_messages_free */
    int64_t tokens;
    char    finish_reason[16];   /* assistant: "stop", "length", "cancelled"; else "" */
    int64_t created_ms;
} em_message;

/* A message to add (all borrowed). */
typedef struct {
    const char *role;            /* "system", "user" or "assistant" */
    const char *content;         /* at most 4 MiB */
    int64_t     tokens;
    const char *finish_reason;   /* NULL, or for an assistant message "stop" / "length" / "cancelled" */
} em_message_new;

/* title may be NULL (none); else at most EM_STORAGE_TITLE_MAX bytes, stored
 * as given. *conv_id gets the new id. */
int em_storage_conv_create(em_storage *st, int64_t key_id, const char *title,
                           int64_t *conv_id, em_err *err);
/* Newest (last updated) first. *out (free() it) gets *n entries. */
int em_storage_conv_list(em_storage *st, int64_t key_id, em_conv_info **out, size_t *n,
                         em_err *err);
/* The same, only those whose title contains q, case-insensitively (Unicode
 * simple case folding). q NULL or "": all. EM_EINVAL: q is not UTF-8. */
int em_storage_conv_search(em_storage *st, int64_t key_id, const char *q, em_conv_info **out,
                           size_t *n, em_err *err);
/* One conversation. EM_ENOENT: not this key's. */
int em_storage_conv_get(em_storage *st, int64_t key_id, int64_t conv_id, em_conv_info *out,
                        em_err *err);
/* Rename (title non-NULL: 1..EM_STORAGE_TITLE_MAX bytes, else EM_EINVAL)
 * and/or switch the branch shown (leaf_id > 0: a message of this
 * conversation, any one, else EM_EINVAL), in one transaction: both or
 * neither. Neither touches updated_ms. EM_ENOENT: the conversation is not
 * this key's. */
int em_storage_conv_update(em_storage *st, int64_t key_id, int64_t conv_id, const char *title,
                           int64_t leaf_id, em_err *err);
/* ---- files (the Batch API's uploads, docs/api.md "Files") ----------------------
 * A file's bytes live on disk in the directory "<database path>.files"
 * (created 0700 on first use), one file per id, written to a temporary name,
 * synced and renamed before its row is committed; its row (id, owner, name,
 * purpose, size, time) in the database. key_id scopes every call like the
 * conversations' (0: loopback without a key); EM_STORAGE_ANY_KEY (an admin
 * key) reaches every key's. A file that is not the key's is EM_ENOENT, as a
 * missing one is. */
#define EM_STORAGE_ANY_KEY     (-1)
#define EM_STORAGE_FILENAME_MAX 256    /* bytes of a file's name, NUL included */
#define EM_STORAGE_FILE_ID_MAX  40

typedef struct {
    char    id[EM_STORAGE_FILE_ID_MAX];          /* "file-" and 24 hex digits */
    int64_t key_id;                              /* the owner; 0: none */
    char    filename[EM_STORAGE_FILENAME_MAX];
    char    purpose[32];
    int64_t bytes;
    int64_t created_ms;
} em_file_info;

/* Store data[0..n) (borrowed) as a new file of key_id named filename (1..255
 * bytes, no control bytes: else EM_EINVAL) with purpose (1..31 bytes); *out
 * describes it. EM_EIO when the directory or the file cannot be written
 * (err names the path): nothing is left behind. */
int em_storage_file_add(em_storage *st, int64_t key_id, const char *filename, const char *purpose,
                        const void *data, size_t n, em_file_info *out, em_err *err);
/* One file's row. */
int em_storage_file_get(em_storage *st, int64_t key_id, const char *id, em_file_info *out, em_err *err);
/* The newest file of key_id (0: none; not a scope) with this filename and
 * purpose. EM_ENOENT: none. */
int em_storage_file_find(em_storage *st, int64_t key_id, const char *filename, const char *purpose,
                         em_file_info *out, em_err *err);
/* The key's files (purpose NULL: every purpose), newest first (order_asc:
 * oldest first), after the file named after (NULL: from the start), at
 * most limit; *more set when there are more. *out malloc'd (free), *n rows. */
int em_storage_file_list(em_storage *st, int64_t key_id, const char *purpose, const char *after, int order_asc,
                         size_t limit, em_file_info **out, size_t *n, int *more, em_err *err);
/* A file's bytes: *data malloc'd (free; NUL-terminated past *n). EM_EIO
 * when the bytes on disk are missing or not the size recorded. */
int em_storage_file_read(em_storage *st, int64_t key_id, const char *id, char **data, size_t *n, em_err *err);
/* Delete a file: its row, then its bytes. */
int em_storage_file_delete(em_storage *st, int64_t key_id, const char *id, em_err *err);

/* ---- the response cache (docs/api.md "The response cache") ---------------------
 * Whole responses of deterministic requests by a 32-byte key (the hash of
 * everything that shapes the answer, computed by the web layer), for one
 * model fingerprint: rows of another are removed by
 * em_storage_cache_retain. Bounded by bytes: a put evicts the least
 * recently used rows past max_bytes. */
#define EM_STORAGE_CACHE_KEY 32

/* 0 with *body (malloc'd, NUL-terminated, *len bytes) and the row marked
 * used; EM_ENOENT on a miss. */
int em_storage_cache_get(em_storage *st, const unsigned char *key, const char *model, char **body, size_t *len,
                         em_err *err);
/* Store (or replace) a row; then evict the least recently used rows while the
 * cache holds more than max_bytes (*evicted: how many, may be NULL). */
int em_storage_cache_put(em_storage *st, const unsigned char *key, const char *model, const char *body, size_t len,
                         int64_t max_bytes, uint64_t *evicted, em_err *err);
/* Remove the rows of every model but this one (*removed: how many). */
int em_storage_cache_retain(em_storage *st, const char *model, uint64_t *removed, em_err *err);
/* Rows and bytes held. */
int em_storage_cache_size(em_storage *st, int64_t *rows, int64_t *bytes, em_err *err);

/* ---- stored responses (the Responses API, web/responses.c) -----------------------
 * A response created with store (the default) is kept so that it can be
 * read back (GET /v1/responses/{id}), continued (previous_response_id) and
 * deleted. Its row holds three JSON texts the caller made, stored and
 * returned byte for byte (bounded only by what the caller sends): the
 * conversation as chat messages up to and including the answer (what a
 * continuation renders), the request's input items, and the response
 * object. Per key like files and conversations: key_id 0 is "no key" (a
 * loopback client), a scope of its own; a response of another key is
 * EM_ENOENT, the same answer as one that does not exist (never told
 * apart). retention_days deletes responses by their created_ms. With
 * store_content = 0 a put is refused (EM_ESTATE); reads and deletes work. */
#define EM_STORAGE_RESPONSE_ID_MAX 64   /* bytes of an id, NUL included */

/* Store a new response id ("resp_" and 16 alphanumerics, as the web layer
 * makes them; 1..63 bytes) of key_id (>= 0) created at created_ms (epoch
 * ms). conversation, input and response: NUL-terminated JSON texts,
 * borrowed, copied into the database. Replaces nothing: an id already
 * stored (by any key) is EM_EINVAL, as are a bad id, a negative key_id and
 * a NULL text. EM_ESTATE: storing content is switched off. */
int em_storage_response_put(em_storage *st, const char *id, int64_t key_id, int64_t created_ms,
                            const char *conversation, const char *input, const char *response, em_err *err);
/* Response id of key_id: *conversation, *input and *response (each
 * optional: NULL to skip) get malloc'd NUL-terminated copies of the stored
 * texts, the caller frees them; all are NULL after a failure. EM_ENOENT:
 * no such id, or it is another key's (never told apart). */
int em_storage_response_get(em_storage *st, const char *id, int64_t key_id, char **conversation, char **input,
                            char **response, em_err *err);
/* Delete response id of key_id. EM_ENOENT as for em_storage_response_get. */
int em_storage_response_delete(em_storage *st, const char *id, int64_t key_id, em_err *err);

/* ---- batches (the Batch API, docs/api.md "Batches") -----------------------------
 * A batch's row holds OpenAI's object (status, counts, times, files); its
 * lines (custom_id and request body, copied from the input file when it
 * validated) and each line's result once it ran: state 0 pending, 1
 * succeeded (result: its output line), 2 failed (result: its error line).
 * A line's result and the batch's counts change in one transaction, so a
 * line is recorded once or not at all: after a crash the pending ones run
 * again and the recorded ones never do. Scoped per key like files. */
#define EM_STORAGE_BATCH_ID_MAX 40

typedef struct {
    char    id[EM_STORAGE_BATCH_ID_MAX];     /* "batch_" and 24 hex digits */
    int64_t key_id;
    char    endpoint[32];
    char    input_file_id[EM_STORAGE_FILE_ID_MAX];
    char    completion_window[16];
    char   *metadata;                        /* JSON object text, or NULL (owned: em_batch_info_clear) */
    char    status[16];
    char    output_file_id[EM_STORAGE_FILE_ID_MAX], error_file_id[EM_STORAGE_FILE_ID_MAX];   /* "": none */
    char   *errors;                          /* JSON array text of validation errors, or NULL (owned) */
    int64_t total, completed, failed;
    int64_t created_ms, in_progress_ms, expires_ms, finalizing_ms, completed_ms, failed_ms, expired_ms,
            cancelling_ms, cancelled_ms;     /* 0: not (yet) */
} em_batch_info;

void em_batch_info_clear(em_batch_info *b);   /* frees metadata and errors; accepts a zeroed one */

typedef struct {
    int64_t line;                             /* 0-based, in the input file's order */
    char    custom_id[128];
    char   *body;                             /* the request body (JSON text; owned by the array) */
} em_batch_line;

void em_batch_lines_free(em_batch_line *v, size_t n);

/* A new batch of key_id in status validating; *out its row (clear it). */
int em_storage_batch_create(em_storage *st, int64_t key_id, const char *endpoint, const char *input_file_id,
                            const char *window, const char *metadata, em_batch_info *out, em_err *err);
/* Validated: its lines stored (in transactions of a few hundred, so other
 * callers wait at most one; a line stored before, by a start that a crash
 * cut short, is replaced), then total set and status in_progress (expiring
 * window_ms after it was created) in one. EM_ESTATE when it is no longer
 * validating (cancelled meanwhile): its lines are dropped again. */
int em_storage_batch_start(em_storage *st, const char *id, const em_batch_line *lines, size_t n, int64_t window_ms,
                           em_err *err);
/* Set the status (failed with errors, a JSON array text; finalizing;
 * completed, expired or cancelled with the output and error files, "" for
 * none) and its time. from: the status it must have now (NULL: any but a
 * final one), else EM_ESTATE. */
int em_storage_batch_set_status(em_storage *st, const char *id, const char *from, const char *status,
                                const char *errors, const char *output_file_id, const char *error_file_id,
                                em_err *err);
/* The batch (scope as for files). */
int em_storage_batch_get(em_storage *st, int64_t key_id, const char *id, em_batch_info *out, em_err *err);
/* The key's batches, newest first, after the batch named after, at most
 * limit; *more when there are more. *out malloc'd (em_batch_info_clear each,
 * then free). */
int em_storage_batch_list(em_storage *st, int64_t key_id, const char *after, size_t limit, em_batch_info **out,
                          size_t *n, int *more, em_err *err);
/* Up to max pending lines of batch id after line `after` (-1: from the
 * start), in order. *out malloc'd (em_batch_lines_free). */
int em_storage_batch_pending(em_storage *st, const char *id, int64_t after, size_t max, em_batch_line **out,
                             size_t *n, em_err *err);
/* Record a pending line's result (ok: succeeded, else failed) and count it.
 * A line already recorded is left as it is (0). */
int em_storage_batch_line_done(em_storage *st, const char *id, int64_t line, int ok, const char *result,
                               em_err *err);
/* The ids of the batches not in a final status (validating, in_progress,
 * finalizing, cancelling), oldest first; *ids malloc'd [n][EM_STORAGE_BATCH_ID_MAX]. */
int em_storage_batch_active(em_storage *st, char (**ids)[EM_STORAGE_BATCH_ID_MAX], size_t *n, em_err *err);
/* The result lines of state (1: succeeded, 2: failed) in line order, each
 * followed by "\n", as one malloc'd text (*n bytes; "" when none). */
int em_storage_batch_results(em_storage *st, const char *id, int state, char **text, size_t *n, em_err *err);

/* Delete a conversation and its messages. EM_ENOENT: not this key's. */
int em_storage_conv_delete(em_storage *st, int64_t key_id, int64_t conv_id, em_err *err);

/* Add msgs[0..n) as a chain in one transaction: msgs[0] under parent_id
 * (EM_STORAGE_LEAF: the current leaf, or none when the conversation is
 * empty; EM_STORAGE_ROOT: none; else a message of this conversation, else
 * EM_ENOENT), each next one under the one before. The last becomes the
 * current leaf; updated_ms is touched. ids (optional, n of them) get the new
 * ids. EM_ENOENT: the conversation is not this key's. */
int em_storage_message_append(em_storage *st, int64_t key_id, int64_t conv_id, int64_t parent_id,
                              const em_message_new *msgs, size_t n, int64_t *ids, em_err *err);
/* One message under the current leaf (em_storage_message_append). msg_id optional. */
int em_storage_message_add(em_storage *st, int64_t key_id, int64_t conv_id, const char *role,
                           const char *content, int64_t tokens, int64_t *msg_id, em_err *err);
/* Every message of every branch, by id (parents before children); release
 * with em_storage_messages_free. */
int em_storage_message_list(em_storage *st, int64_t key_id, int64_t conv_id, em_message **out,
                            size_t *n, em_err *err);
/* The branch root -> leaf_id (EM_STORAGE_LEAF: the current leaf; EM_STORAGE_ROOT:
 * empty), first message first, the leaf last. EM_ENOENT: the conversation is
 * not this key's, or leaf_id is not one of its messages. max (0: none): a
 * path of more messages is not read but EM_ERANGE, in time bounded by max. */
int em_storage_message_path(em_storage *st, int64_t key_id, int64_t conv_id, int64_t leaf_id, size_t max,
                            em_message **out, size_t *n, em_err *err);
void em_storage_messages_free(em_message *msgs, size_t n);   /* accepts NULL */

/* ---- conversations: export (conversations.c) and import (conv_import.c) ---- */

/* One conversation with all its messages. */
typedef struct {
    em_conv_info info;
    em_message  *msgs;           /* by id, as em_storage_message_list */
    size_t       n_msgs;
} em_conv_full;

/* conv_id > 0: that conversation (EM_ENOENT: not this key's); 0: all the
 * key's, newest first. One read transaction: a consistent snapshot. *out
 * (em_storage_conv_full_free) gets *n entries. */
int  em_storage_conv_export(em_storage *st, int64_t key_id, int64_t conv_id, em_conv_full **out,
                            size_t *n, em_err *err);
void em_storage_conv_full_free(em_conv_full *v, size_t n);   /* accepts NULL */

/* A message to import: ids are the source's, any positive integers unique
 * in their conversation; they are not kept. Strings are borrowed. */
typedef struct {
    int64_t     id;
    int64_t     parent_id;       /* 0: a first message; else another message's source id */
    const char *role, *content, *finish_reason;   /* as em_message_new */
    int64_t     tokens;          /* >= 0 */
    int64_t     created_ms;      /* >= 0 */
} em_message_in;

typedef struct {
    const char *title;           /* NULL: none; else as em_storage_conv_create */
    int64_t     created_ms;      /* >= 0 */
    int64_t     updated_ms;      /* >= 0; 0: now */
    int64_t     current_leaf_id; /* a source id; 0: the last message added */
    const em_message_in *msgs;
    size_t      n_msgs;
} em_conv_in;

/* Create convs[0..n) as new conversations of key_id, with new ids; parents
 * and current leaves are mapped to them. Everything is checked first (roles,
 * sizes, unique ids, parents in the same conversation, no cycles, the leaf
 * one of its messages): EM_EINVAL, err naming the place
 * ("conversations[2].messages[5].parent_id: ..."), and nothing is created.
 * Then one transaction: all or nothing. ids (n of them) get the new
 * conversations' ids. Siblings keep their order. */
int em_storage_conv_import(em_storage *st, int64_t key_id, const em_conv_in *convs, size_t n,
                           int64_t *ids, em_err *err);

/* ---- usage queries and export ------------------------------------------------------- */

typedef enum {
    EM_USAGE_BY_NONE = 0,   /* just the total */
    EM_USAGE_BY_KEY,        /* key name ("-" for requests without a key) */
    EM_USAGE_BY_DAY,        /* UTC day of received_ms, YYYY-MM-DD */
    EM_USAGE_BY_CLASS,
    EM_USAGE_BY_MODEL,
    EM_USAGE_BY_HOUR,       /* UTC hour of received_ms, YYYY-MM-DDTHH:00Z */
    EM_USAGE_BY_BATCH,      /* the batch a request was a line of ("-" for the others) */
    EM_USAGE_BY_ENDPOINT,   /* the front door ("chat.completions", ...; "-" when unknown) */
} em_usage_group_by;

typedef enum {
    EM_USAGE_TABLE = 0,
    EM_USAGE_CSV,
    EM_USAGE_JSON,
} em_usage_format;

typedef struct {
    int64_t since_ms;            /* received_ms >= since_ms; 0 = from the start */
    int64_t until_ms;            /* received_ms <  until_ms; 0 = to the end */
    em_usage_group_by group_by;
    double  gpu_cost_per_hour;   /* price of one box's GPU per hour; < 0 = none */
    int     only_key;            /* 1: just the requests of key_id (0: those without a key) */
    int64_t key_id;
} em_usage_query;

/* One group (or the total). Values that do not exist are NAN. */
typedef struct {
    char    label[EM_USAGE_MODEL_MAX];
    int64_t requests;
    int64_t prompt_tokens, cached_tokens, completion_tokens;
    double  cached_share;                 /* cached / prompt tokens */
    double  ttft_p50_ms, ttft_p99_ms;     /* over requests with a first token */
    double  tpot_p50_ms, tpot_p99_ms;     /* over requests' mean TPOT */
    double  queue_p50_ms, queue_p99_ms;   /* over requests admitted: submit to first admission */
    double  gpu_hours;                    /* see docs/storage.md, "Cost" */
    double  cost;                         /* gpu_hours * price */
    double  cost_per_1m;                  /* cost / completion tokens * 1e6 */
} em_usage_row;

typedef struct {
    em_usage_query query;
    size_t        n_dbs;
    em_usage_row *rows;          /* sorted by label */
    size_t        n_rows;
    em_usage_row  total;         /* label "total" */
} em_usage_report;

/* Defaults: everything (every key), no grouping, no price. */
void em_storage_usage_query_init(em_usage_query *q);

/* Aggregate the ledgers in paths[0..n) (merged: several boxes) into *out
 * (release with em_storage_usage_free). Each file gets its own query-only
 * connection (PRAGMA query_only) and is never modified or migrated; older
 * schema versions are read as they are. */
int em_storage_usage_query(const char *const *paths, size_t n, const em_usage_query *q,
                           em_usage_report **out, em_err *err);
/* The same over an open storage's database. */
int em_storage_usage(em_storage *st, const em_usage_query *q, em_usage_report **out,
                     em_err *err);
void em_storage_usage_free(em_usage_report *rep);   /* accepts NULL */

/* Write rep to f as an aligned table, CSV (RFC 4180, header line) or JSON. */
int em_storage_usage_write(const em_usage_report *rep, em_usage_format fmt, FILE *f,
                           em_err *err);
/* The JSON form as a malloc'd NUL-terminated string (*out, free() it). */
int em_storage_usage_json(const em_usage_report *rep, char **out, em_err *err);

/* Parse "YYYY-MM-DD" or "YYYY-MM-DDTHH:MM[:SS][Z]" (UTC) into epoch ms. With
 * end_of_day and a date alone, the result is the following midnight (so an
 * --until date includes that day). */
int em_storage_parse_time(const char *s, int end_of_day, int64_t *ms, em_err *err);
/* "key" "day" "hour" "class" "model" "batch" "endpoint" "none"; "table" "csv" "json".
 * EM_EINVAL otherwise. */
int em_storage_group_by_parse(const char *s, em_usage_group_by *out);
int em_storage_format_parse(const char *s, em_usage_format *out);

/* ---- utilization: the device's busy time ------------------------------------------------ */
/* ember serve records about every minute how long it served ("up") and how
 * long its scheduler spent in steps ("busy"), with the tokens generated and
 * prefilled, into one row per UTC hour (table `utilization`, docs/storage.md,
 * "Utilization"). Busy over up time is the device's utilization; generated
 * tokens over busy time its throughput while it works. */

typedef struct {
    int64_t start_ms, end_ms;    /* the span measured, [start, end), epoch ms; within one UTC hour */
    double  busy_s;              /* scheduler step time in it, 0..its length */
    int64_t generated_tokens, prefilled_tokens, steps;   /* >= 0 */
} em_util_sample;

/* Add s to its hour's row (made when missing), on the ops connection.
 * EM_EINVAL: an empty span, one that crosses an hour boundary, busy time
 * longer than the span, negative counts. */
int em_storage_util_add(em_storage *st, const em_util_sample *s, em_err *err);

typedef enum { EM_UTIL_HOUR = 0, EM_UTIL_DAY } em_util_bucket;

typedef struct {
    int64_t since_ms;            /* hours starting at or after since_ms; 0 = from the start */
    int64_t until_ms;            /* ... and before until_ms; 0 = to the end */
    em_util_bucket bucket;
    double  gpu_cost_per_hour;   /* the box's price per hour; < 0 = none */
} em_util_query;

/* One bucket (or the total). Values that do not exist are NAN. */
typedef struct {
    char    label[32];           /* "2024-05-01T10:00Z", "2024-05-01" or "total" */
    int64_t start_ms;            /* the bucket's start, epoch ms (total: 0) */
    double  up_s, busy_s;
    int64_t generated_tokens, prefilled_tokens, steps;
    double  utilization;         /* busy_s / up_s */
    double  busy_tokens_per_s;   /* generated_tokens / busy_s: the throughput while busy */
    double  cost_per_1m_full_load;   /* price x busy hours / generated x 1e6: every hour busy */
    double  cost_per_1m_measured;    /* price x up hours / generated x 1e6 (= full load / utilization) */
} em_util_row;

typedef struct {
    em_util_query query;
    em_util_row  *rows;          /* buckets that have a row, ascending */
    size_t        n_rows;
    em_util_row   total;
} em_util_report;

void em_storage_util_query_init(em_util_query *q);   /* everything, by hour, no price */

/* Read the utilization of the ledger at path through a query-only
 * connection of its own (never modified; a ledger without the table reads
 * as empty). *out: release with em_storage_util_free. */
int  em_storage_util_query(const char *path, const em_util_query *q, em_util_report **out, em_err *err);
/* The same over an open storage's database. */
int  em_storage_util(em_storage *st, const em_util_query *q, em_util_report **out, em_err *err);
void em_storage_util_free(em_util_report *rep);   /* accepts NULL */
/* The report as JSON (docs/api.md, GET /api/utilization): *out malloc'd, free() it. */
int  em_storage_util_json(const em_util_report *rep, char **out, em_err *err);
/* "hour" / "day" -> *out; EM_EINVAL otherwise. */
int  em_storage_util_bucket_parse(const char *s, em_util_bucket *out);

/* Epoch milliseconds now (CLOCK_REALTIME). */
int64_t em_storage_now_ms(void);

#endif
