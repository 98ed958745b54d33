/* test_storage.c — unit tests of storage/: schema creation and migration from
 * every earlier version, refusal of newer and corrupt files, the writer's
 * upsert/batching/queue-full behaviour, API keys (hashing, constant-time
 * comparison, revocation, admin keys, no key in the file), conversations
 * (per key, deletion, retention of them and of stored responses, the
 * content switch; branches, import and export are test_storage_conv.c's;
 * stored responses' calls test_storage_files.c's), the ledger's endpoint, reasoning
 * tokens and tool calls, usage reports (all keys' or one key's; by hour; by
 * endpoint; queue-time percentiles) and utilization (samples added per
 * hour, by hour and day, windows, the derived figures, JSON, a ledger
 * without the table). Real SQLite files in a temporary directory. */
#include <jansson.h>
#include <math.h>

#include "tests/unit/storage_test.h"

#define D1 1714521600000LL   /* 2024-05-01T00:00:00Z */
#define HOUR 3600000LL

/* ---- schema and migrations ---- */

/* A database at schema version v (0 = an empty file) with rows that each
 * version can hold. */
static int make_db_at(const char *path, int v)
{
    sqlite3 *db = NULL;
    em_err err = { 0 };
    int ret = 0;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) != SQLITE_OK)
        ret = -1;
    if (!ret && v > 0 && em_sto_migrate(db, v, path, &err)) {
        fprintf(stderr, "migrate to %d: %s\n", v, err.msg);
        ret = -1;
    }
    if (!ret && v >= 1)
        ret = t_exec(db,
                     "PRAGMA journal_mode = WAL;"
                     "INSERT INTO api_keys (id, name, prefix, hash, default_class,"
                     " rate_limit_per_min, created_ms) VALUES"
                     " (1, 'old', 'em_oldkey', zeroblob(32), 'background', 5, 1000);"
                     "INSERT INTO requests (request_id, key_id, class, model, received_ms,"
                     " finished_ms, status, prompt_tokens, completion_tokens, ttft_ms,"
                     " tpot_mean_ms) VALUES ('old-1', 1, 'background', 'm', 1714557600000,"
                     " 1714557601000, 'completed', 7, 3, 12.5, 4.5);");
    if (!ret && v >= 2)
        ret = t_exec(db,
                     "INSERT INTO requests (request_id, class, received_ms, status,"
                     " prompt_tokens, cached_tokens, completion_tokens, preemptions, tpot_p99_ms)"
                     " VALUES ('old-2', 'interactive', 1714557700000, 'preempted_completed',"
                     " 8, 4, 2, 2, 9.5);");
    if (!ret && v >= 7)
        ret = t_exec(db,
                     "INSERT INTO requests (request_id, class, received_ms, status, prompt_tokens,"
                     " completion_tokens, batch_id, response_cached) VALUES ('old-7', 'interactive',"
                     " 1714557800000, 'completed', 6, 0, 'batch_old', 1);");
    if (!ret && v >= 8)
        ret = t_exec(db,
                     "INSERT INTO requests (request_id, class, received_ms, status, prompt_tokens,"
                     " completion_tokens, endpoint, reasoning_tokens, tool_calls) VALUES ('old-8',"
                     " 'interactive', 1714557900000, 'completed', 5, 4, 'responses', 2, 1);");
    if (!ret && v >= 9)
        ret = t_exec(db,
                     "INSERT INTO responses (id, key_id, created_ms, conversation, input, response)"
                     " VALUES ('resp_old9aaaaaaaaaaaa', 1, 1714557900000, '[]', '\"hi\"', '{}');");
    if (!ret && v >= 3 && v < 5)
        ret = t_exec(db,
                     "INSERT INTO conversations (id, key_id, title, created_ms, updated_ms)"
                     " VALUES (1, 1, 'old chat', 1000, 2000), (2, 1, 'second', 1000, 3000),"
                     " (3, NULL, 'empty', 1000, 1000);"
                     /* interleaved: each conversation's chain is its own */
                     "INSERT INTO messages (id, conversation_id, role, content, tokens, created_ms)"
                     " VALUES (1, 1, 'user', 'hello', 0, 1500), (2, 2, 'user', 'other', 0, 1600),"
                     " (3, 1, 'assistant', 'hi there', 3, 1700), (4, 1, 'user', 'again', 0, 1800),"
                     " (5, 2, 'assistant', 'reply', 2, 1900);");
    if (!ret && v >= 5)   /* the same, as a tree: each under the one before it */
        ret = t_exec(db,
                     "INSERT INTO conversations (id, key_id, title, created_ms, updated_ms)"
                     " VALUES (1, 1, 'old chat', 1000, 2000), (2, 1, 'second', 1000, 3000),"
                     " (3, NULL, 'empty', 1000, 1000);"
                     "INSERT INTO messages (id, conversation_id, parent_id, role, content, tokens, created_ms)"
                     " VALUES (1, 1, NULL, 'user', 'hello', 0, 1500), (2, 2, NULL, 'user', 'other', 0, 1600),"
                     " (3, 1, 1, 'assistant', 'hi there', 3, 1700), (4, 1, 3, 'user', 'again', 0, 1800),"
                     " (5, 2, 2, 'assistant', 'reply', 2, 1900);"
                     "UPDATE conversations SET current_leaf_id = 4 WHERE id = 1;"
                     "UPDATE conversations SET current_leaf_id = 5 WHERE id = 2;");
    sqlite3_close(db);
    return ret;
}

static void schema_text(const char *path, char *buf, size_t cap)
{
    sqlite3 *db = t_db_open(path);
    if (!db) {
        buf[0] = 0;
        return;
    }
    t_text(db,
           "SELECT group_concat(type || ' ' || name || ' ' || coalesce(sql, ''), char(10))"
           " FROM (SELECT * FROM sqlite_schema ORDER BY name)",
           buf, cap);
    sqlite3_close(db);
}

static int test_migrations(void)
{
    char fresh[512], path[512];
    static char want[16384], got[16384];
    t_path(fresh, sizeof fresh, "fresh.db");
    em_storage *st = t_open_at(fresh, NULL);
    REQUIRE(st);
    em_storage_close(st);
    schema_text(fresh, want, sizeof want);
    REQUIRE(want[0]);

    for (int v = 0; v < EM_STORAGE_SCHEMA_VERSION; v++) {
        char name[32];
        snprintf(name, sizeof name, "v%d.db", v);
        t_path(path, sizeof path, name);
        REQUIRE(make_db_at(path, v) == 0);
        st = t_open_at(path, NULL);
        CHECK(st != NULL);
        if (!st)
            continue;
        /* The new tables work on a migrated file. */
        int64_t conv = 0;
        em_err err = { 0 };
        CHECK_RC(em_storage_conv_create(st, 0, "new", &conv, &err), 0);
        em_util_sample us = { D1, D1 + 60000, 1.5, 10, 20, 3 };
        CHECK_RC(em_storage_util_add(st, &us, &err), 0);
        char *conv_json = NULL;
        CHECK_RC(em_storage_response_put(st, "resp_migratedaaaaaaa", 1, D1, "[{\"role\":\"user\"}]", "\"q\"",
                                         "{}", &err), 0);
        CHECK_RC(em_storage_response_get(st, "resp_migratedaaaaaaa", 1, &conv_json, NULL, NULL, &err), 0);
        CHECK(conv_json && strcmp(conv_json, "[{\"role\":\"user\"}]") == 0);
        free(conv_json);
        CHECK_RC(em_storage_response_get(st, "resp_migratedaaaaaaa", 0, NULL, NULL, NULL, &err), EM_ENOENT);
        em_storage_close(st);

        sqlite3 *db = t_db_open(path);
        REQUIRE(db);
        CHECK(t_int(db, "PRAGMA user_version") == EM_STORAGE_SCHEMA_VERSION);
        char mode[32];
        t_text(db, "PRAGMA journal_mode", mode, sizeof mode);
        CHECK(strcmp(mode, "wal") == 0);
        CHECK(t_int(db, "SELECT count(*) FROM pragma_foreign_key_check") == 0);
        if (v >= 1) {
            /* Rows survive; columns added later take their defaults. */
            CHECK(t_int(db, "SELECT count(*) FROM requests WHERE request_id = 'old-1'"
                            " AND key_id = 1 AND prompt_tokens = 7 AND completion_tokens = 3"
                            " AND ttft_ms = 12.5 AND cached_tokens = 0 AND preemptions = 0"
                            " AND tpot_p99_ms IS NULL AND status = 'completed'") == 1);
            CHECK(t_int(db, "SELECT count(*) FROM api_keys WHERE name = 'old'") == 1);
            /* A key from before admin keys stays an ordinary one. */
            CHECK(t_int(db, "SELECT admin FROM api_keys WHERE name = 'old'") == 0);
            /* Rows from before version 8: no endpoint, no reasoning tokens or tool calls. */
            CHECK(t_int(db, "SELECT count(*) FROM requests WHERE request_id != 'old-8' AND"
                            " (endpoint IS NOT NULL OR reasoning_tokens != 0 OR tool_calls != 0)") == 0);
        }
        if (v >= 8)   /* a version 8 row keeps its endpoint, reasoning tokens and tool calls */
            CHECK(t_int(db, "SELECT count(*) FROM requests WHERE request_id = 'old-8' AND endpoint = 'responses'"
                            " AND reasoning_tokens = 2 AND tool_calls = 1 AND completion_tokens = 4") == 1);
        /* responses (version 9): empty before, the one put above after */
        CHECK(t_int(db, "SELECT count(*) FROM responses") == 1);
        CHECK(t_int(db, "SELECT count(*) FROM responses WHERE id = 'resp_migratedaaaaaaa' AND key_id = 1"
                        " AND created_ms = 1714521600000 AND input = '\"q\"' AND response = '{}'") == 1);
        if (v >= 7)
            CHECK(t_int(db, "SELECT count(*) FROM requests WHERE request_id = 'old-7'"
                            " AND batch_id = 'batch_old' AND response_cached = 1 AND endpoint IS NULL"
                            " AND reasoning_tokens = 0 AND tool_calls = 0") == 1);
        if (v >= 2)
            CHECK(t_int(db, "SELECT count(*) FROM requests WHERE request_id = 'old-2'"
                            " AND cached_tokens = 4 AND preemptions = 2") == 1);
        CHECK(t_int(db, "SELECT count(*) FROM utilization WHERE hour_ms = 1714521600000 AND up_ms = 60000"
                        " AND busy_ms = 1500 AND generated_tokens = 10 AND prefilled_tokens = 20 AND steps = 3") == 1);
        if (v >= 3) {
            /* Messages from before branches: a chain per conversation, the
             * last one the current leaf, no finish reasons. */
            char chain[128];
            t_text(db, "SELECT group_concat(id || ':' || coalesce(parent_id, '-'), ' ')"
                       " FROM (SELECT * FROM messages ORDER BY id)", chain, sizeof chain);
            CHECK(strcmp(chain, "1:- 2:- 3:1 4:3 5:2") == 0);
            t_text(db, "SELECT group_concat(id || ':' || coalesce(current_leaf_id, '-'), ' ')"
                       " FROM (SELECT * FROM conversations WHERE id <= 3 ORDER BY id)", chain, sizeof chain);
            CHECK(strcmp(chain, "1:4 2:5 3:-") == 0);
            CHECK(t_int(db, "SELECT count(*) FROM messages WHERE finish_reason IS NOT NULL") == 0);
            CHECK(t_int(db, "SELECT count(*) FROM conversations WHERE id = 1 AND updated_ms = 2000") == 1);
        }
        sqlite3_close(db);
        if (v >= 3) {
            /* ... and read through the API: the path, a continuation under the leaf. */
            st = t_open_at(path, NULL);
            REQUIRE(st);
            em_message *m = NULL;
            size_t n = 0;
            CHECK_RC(em_storage_message_path(st, 1, 1, EM_STORAGE_LEAF, 0, &m, &n, &err), 0);
            CHECK(n == 3 && strcmp(m[0].content, "hello") == 0 && strcmp(m[1].content, "hi there") == 0 &&
                  m[1].tokens == 3 && m[1].parent_id == 1 && strcmp(m[2].content, "again") == 0 &&
                  m[0].parent_id == 0 && !m[1].finish_reason[0]);
            em_storage_messages_free(m, n);
            int64_t id = 0;
            CHECK_RC(em_storage_message_add(st, 1, 1, "assistant", "new", 1, &id, &err), 0);
            em_conv_info ci;
            CHECK_RC(em_storage_conv_get(st, 1, 1, &ci, &err), 0);
            CHECK(ci.current_leaf_id == id && ci.n_messages == 4 && strcmp(ci.title, "old chat") == 0);
            CHECK_RC(em_storage_message_path(st, 1, 1, id, 0, &m, &n, &err), 0);
            CHECK(n == 4 && m[3].parent_id == 4);
            em_storage_messages_free(m, n);
            CHECK_RC(em_storage_conv_get(st, 0, 3, &ci, &err), 0);
            CHECK(ci.current_leaf_id == 0 && ci.n_messages == 0);
            em_storage_close(st);
            CHECK(t_integrity_ok(path));
        }
        CHECK(t_integrity_ok(path));
        schema_text(path, got, sizeof got);
        if (strcmp(want, got) != 0) {
            fprintf(stderr, "schema after migrating from v%d differs:\n%s\n--- fresh:\n%s\n", v,
                    got, want);
            test_failures++;
        }
    }
    return 0;
}

/* Ledgers of old versions are read as they are: a version 1 one (no
 * cached tokens), and one from before the endpoint column, whose requests
 * all group under "-" by endpoint. */
static int test_usage_reads_old_ledger(void)
{
    static const int versions[] = { 1, 7 };
    for (size_t i = 0; i < sizeof versions / sizeof versions[0]; i++) {
        char path[512], name[32];
        snprintf(name, sizeof name, "old-ledger-v%d.db", versions[i]);
        t_path(path, sizeof path, name);
        REQUIRE(make_db_at(path, versions[i]) == 0);
        em_usage_query q;
        em_storage_usage_query_init(&q);
        em_usage_report *rep = NULL;
        em_err err = { 0 };
        const char *paths[1] = { path };
        CHECK_RC(em_storage_usage_query(paths, 1, &q, &rep, &err), 0);
        if (rep && versions[i] == 1) {
            CHECK(rep->total.requests == 1);
            CHECK(rep->total.prompt_tokens == 7);
            CHECK(rep->total.cached_tokens == 0);
        }
        em_storage_usage_free(rep);
        q.group_by = EM_USAGE_BY_ENDPOINT;
        CHECK_RC(em_storage_usage_query(paths, 1, &q, &rep, &err), 0);
        CHECK(rep && rep->n_rows == 1 && strcmp(rep->rows[0].label, "-") == 0 &&
              rep->rows[0].requests == (versions[i] == 1 ? 1 : 3));
        em_storage_usage_free(rep);
        sqlite3 *db = t_db_open(path);
        REQUIRE(db);
        CHECK(t_int(db, "PRAGMA user_version") == versions[i]);   /* read, not migrated */
        sqlite3_close(db);
    }
    return 0;
}

static int test_refusals(void)
{
    char path[512];
    em_err err = { 0 };
    em_storage_opts o;
    em_storage *st = NULL;
    em_storage_opts_init(&o);

    /* Newer schema than this build. */
    t_path(path, sizeof path, "newer.db");
    REQUIRE(make_db_at(path, EM_STORAGE_SCHEMA_VERSION) == 0);
    sqlite3 *db = t_db_open(path);
    REQUIRE(db);
    t_exec(db, "PRAGMA user_version = 99");
    sqlite3_close(db);
    o.path = path;
    CHECK_RC(em_storage_open(&o, &st, &err), EM_EUNSUPPORTED);
    CHECK(st == NULL);
    CHECK(strstr(err.msg, path) != NULL);

    /* Not a database at all. */
    t_path(path, sizeof path, "garbage.db");
    FILE *f = fopen(path, "wb");
    REQUIRE(f);
    for (int i = 0; i < 8192; i++)
        fputc((i * 7919) & 0xff, f);
    fclose(f);
    o.path = path;
    memset(&err, 0, sizeof err);
    CHECK_RC(em_storage_open(&o, &st, &err), EM_EFORMAT);
    CHECK(strstr(err.msg, path) != NULL);
    fprintf(stderr, "  (expected) %s\n", err.msg);

    /* A real database whose pages after the first are destroyed. */
    t_path(path, sizeof path, "broken.db");
    st = t_open_at(path, NULL);
    REQUIRE(st);
    for (int i = 0; i < 50; i++) {
        em_usage_record r;
        char id[32];
        snprintf(id, sizeof id, "r%d", i);
        t_record(&r, id, EM_USAGE_COMPLETED);
        em_storage_submit(st, &r);
    }
    CHECK_RC(em_storage_flush(st, -1, NULL), 0);
    em_storage_close(st);
    st = NULL;
    struct stat sb;
    REQUIRE(stat(path, &sb) == 0 && sb.st_size > 4096);
    int fd = open(path, O_WRONLY);
    REQUIRE(fd >= 0);
    static unsigned char junk[4096];
    memset(junk, 0xA5, sizeof junk);
    for (off_t off = 4096; off < sb.st_size; off += 4096)
        CHECK(pwrite(fd, junk, sizeof junk, off) == (ssize_t)sizeof junk);
    close(fd);
    o.path = path;
    memset(&err, 0, sizeof err);
    CHECK_RC(em_storage_open(&o, &st, &err), EM_EFORMAT);
    CHECK(strstr(err.msg, path) != NULL);
    fprintf(stderr, "  (expected) %s\n", err.msg);

    /* Missing file without create. */
    t_path(path, sizeof path, "missing.db");
    o.path = path;
    o.create = 0;
    memset(&err, 0, sizeof err);
    CHECK_RC(em_storage_open(&o, &st, &err), EM_ENOENT);
    CHECK(strstr(err.msg, path) != NULL);
    return 0;
}

/* ---- the writer ---- */

typedef struct {
    size_t rows, calls;
} commit_seen;

static void on_commit(void *ctx, const em_usage_record *const *rows, size_t n)
{
    commit_seen *c = ctx;
    c->calls++;
    c->rows += n;
    (void)rows;
}

/* A request's record with its front door, reasoning tokens and tool calls. */
static void submit_door(em_storage *st, const char *id, em_usage_status status, const char *endpoint,
                        int64_t reasoning, int32_t tool_calls)
{
    em_usage_record r;
    t_record(&r, id, status);
    snprintf(r.endpoint, sizeof r.endpoint, "%s", endpoint);
    r.reasoning_tokens = reasoning;
    r.tool_calls = tool_calls;
    CHECK_RC(em_storage_submit(st, &r), 0);
}

static int test_writer(void)
{
    char path[512];
    t_path(path, sizeof path, "writer.db");
    commit_seen seen = { 0, 0 };
    em_storage_opts o;
    em_storage_opts_init(&o);
    o.on_commit = on_commit;
    o.on_commit_ctx = &seen;
    em_storage *st = t_open_at(path, &o);
    REQUIRE(st);

    /* Admission, then the end of the same request: one row, merged. */
    em_usage_record a;
    t_record(&a, "req-1", EM_USAGE_ADMITTED);
    a.started_ms = a.received_ms + 5;
    a.queue_ms = 5;
    CHECK_RC(em_storage_submit(st, &a), 0);
    em_usage_record e = a;
    e.client_addr[0] = 0;   /* unknown now: keeps the admitted value */
    e.queue_ms = -1;
    e.status = EM_USAGE_PREEMPTED_COMPLETED;
    e.first_token_ms = a.received_ms + 40;
    e.finished_ms = a.received_ms + 400;
    e.prompt_tokens = 100;
    e.cached_tokens = 64;
    e.completion_tokens = 20;
    e.ttft_ms = 35;
    e.tpot_mean_ms = 18;
    e.tpot_p99_ms = 30;
    e.preemptions = 1;
    snprintf(e.finish_reason, sizeof e.finish_reason, "stop");
    CHECK_RC(em_storage_submit(st, &e), 0);
    /* A row the database refuses on its own (no such key) is dropped, the
     * rest of the batch commits. */
    em_usage_record bad;
    t_record(&bad, "req-bad", EM_USAGE_COMPLETED);
    bad.key_id = 999;
    CHECK_RC(em_storage_submit(st, &bad), 0);
    em_usage_record noid;
    em_usage_record_init(&noid);
    CHECK_RC(em_storage_submit(st, &noid), EM_EINVAL);
    CHECK_RC(em_storage_flush(st, -1, NULL), 0);

    em_storage_counters c;
    em_storage_counters_get(st, &c);
    CHECK(c.rows_written == 2);
    CHECK(c.rows_dropped == 2);
    CHECK(c.queue_depth == 0);
    CHECK(strstr(c.last_error, "req-bad") != NULL);
    CHECK(seen.rows == 2);

    sqlite3 *db = t_db_open(path);
    REQUIRE(db);
    CHECK(t_int(db, "SELECT count(*) FROM requests") == 1);
    CHECK(t_int(db, "SELECT count(*) FROM requests WHERE request_id = 'req-1'"
                    " AND client_addr = '192.0.2.1' AND queue_ms = 5 AND ttft_ms = 35"
                    " AND status = 'preempted_completed' AND cached_tokens = 64"
                    " AND preemptions = 1 AND finish_reason = 'stop' AND error IS NULL"
                    " AND started_ms IS NOT NULL AND first_token_ms IS NOT NULL"
                    " AND tpot_p99_ms = 30 AND key_id IS NULL") == 1);
    sqlite3_close(db);

    /* The front door, reasoning tokens and tool calls: a round trip; the
     * end's record without an endpoint keeps the admitted one's, and a
     * request that never names one stores NULL. */
    em_usage_record z;
    em_usage_record_init(&z);
    CHECK(z.endpoint[0] == 0 && z.reasoning_tokens == 0 && z.tool_calls == 0);
    submit_door(st, "req-ep", EM_USAGE_ADMITTED, "chat.completions", 0, 0);
    submit_door(st, "req-ep", EM_USAGE_COMPLETED, "", 4, 2);
    submit_door(st, "req-noep", EM_USAGE_COMPLETED, "", 0, 0);
    em_usage_record el;   /* a full array without a terminator: cut to 31 bytes */
    t_record(&el, "req-longep", EM_USAGE_COMPLETED);
    memset(el.endpoint, 'x', sizeof el.endpoint);
    CHECK_RC(em_storage_submit(st, &el), 0);
    CHECK_RC(em_storage_flush(st, -1, NULL), 0);
    db = t_db_open(path);
    REQUIRE(db);
    CHECK(t_int(db, "SELECT count(*) FROM requests WHERE request_id = 'req-ep'"
                    " AND endpoint = 'chat.completions' AND completion_tokens = 5"
                    " AND reasoning_tokens = 4 AND tool_calls = 2 AND status = 'completed'") == 1);
    CHECK(t_int(db, "SELECT count(*) FROM requests WHERE request_id = 'req-noep'"
                    " AND endpoint IS NULL AND reasoning_tokens = 0 AND tool_calls = 0") == 1);
    CHECK(t_int(db, "SELECT length(endpoint) FROM requests WHERE request_id = 'req-longep'") ==
          EM_USAGE_ENDPOINT_MAX - 1);
    /* A later record replaces the counts, as it does completion_tokens. */
    submit_door(st, "req-ep", EM_USAGE_COMPLETED, "", 0, 0);
    CHECK_RC(em_storage_flush(st, -1, NULL), 0);
    CHECK(t_int(db, "SELECT count(*) FROM requests WHERE request_id = 'req-ep'"
                    " AND endpoint = 'chat.completions' AND reasoning_tokens = 0 AND tool_calls = 0") == 1);
    sqlite3_close(db);

    /* Interrupted requests: admitted, never ended. */
    em_usage_record lone;
    t_record(&lone, "req-lone", EM_USAGE_ADMITTED);
    CHECK_RC(em_storage_submit(st, &lone), 0);
    CHECK_RC(em_storage_flush(st, -1, NULL), 0);
    int64_t n = 0;
    CHECK_RC(em_storage_mark_interrupted(st, &n, NULL), 0);
    CHECK(n == 1);
    em_storage_close(st);
    db = t_db_open(path);
    REQUIRE(db);
    CHECK(t_int(db, "SELECT count(*) FROM requests WHERE status = 'interrupted'") == 1);
    sqlite3_close(db);
    return 0;
}

static int test_queue_full(void)
{
    char path[512];
    t_path(path, sizeof path, "queue.db");
    em_storage_opts o;
    em_storage_opts_init(&o);
    o.queue_cap = 4;
    o.batch_rows = 100;      /* never reached ... */
    o.batch_ms = 600000;     /* ... nor this: the writer waits for a flush */
    em_storage *st = t_open_at(path, &o);
    REQUIRE(st);
    int busy = 0;
    for (int i = 0; i < 10; i++) {
        em_usage_record r;
        char id[32];
        snprintf(id, sizeof id, "q%d", i);
        t_record(&r, id, EM_USAGE_COMPLETED);
        int rc = em_storage_submit(st, &r);
        CHECK(rc == 0 || rc == EM_EBUSY);
        busy += rc == EM_EBUSY;
    }
    CHECK(busy == 6);
    em_storage_counters c;
    em_storage_counters_get(st, &c);
    CHECK(c.rows_dropped == 6);
    CHECK(c.queue_depth == 4);
    CHECK(c.queue_cap == 4);
    CHECK_RC(em_storage_flush(st, -1, NULL), 0);
    em_storage_counters_get(st, &c);
    CHECK(c.rows_written == 4);
    CHECK(c.batches == 1);
    em_storage_close(st);
    return 0;
}

/* ---- keys ---- */

static int test_keys(void)
{
    char path[512], wal[600];
    t_path(path, sizeof path, "keys.db");
    snprintf(wal, sizeof wal, "%s-wal", path);
    em_storage *st = t_open_at(path, NULL);
    REQUIRE(st);
    em_err err = { 0 };
    char key[EM_STORAGE_KEY_MAX], key2[EM_STORAGE_KEY_MAX];
    em_key_info info, got;

    CHECK_RC(em_storage_key_add(st, "alice", EM_USAGE_BACKGROUND, 60, key, sizeof key, &info,
                                &err), 0);
    CHECK(strncmp(key, "em_", 3) == 0 && strlen(key) == 46);
    CHECK(strncmp(info.prefix, key, EM_STORAGE_PREFIX_LEN) == 0);
    CHECK(strlen(info.prefix) == EM_STORAGE_PREFIX_LEN);
    CHECK_RC(em_storage_key_add(st, "bob", EM_USAGE_INTERACTIVE, 0, key2, sizeof key2, NULL,
                                &err), 0);
    CHECK(strcmp(key, key2) != 0);

    CHECK_RC(em_storage_key_verify(st, key, &got, &err), 0);
    CHECK(got.id == info.id && strcmp(got.name, "alice") == 0);
    CHECK(got.default_class == EM_USAGE_BACKGROUND && got.rate_limit_per_min == 60);

    /* Same prefix, one character different: found by prefix, rejected by
     * the constant-time hash comparison. */
    char forged[EM_STORAGE_KEY_MAX];
    snprintf(forged, sizeof forged, "%s", key);
    forged[45] = forged[45] == 'A' ? 'B' : 'A';
    uint64_t before = st->ct_compares;
    memset(&err, 0, sizeof err);
    CHECK_RC(em_storage_key_verify(st, forged, &got, &err), EM_ENOENT);
    CHECK(st->ct_compares == before + 1);
    CHECK(strstr(err.msg, forged) == NULL && strstr(err.msg, forged + 3) == NULL);
    CHECK_RC(em_storage_key_verify(st, "em_short", &got, NULL), EM_ENOENT);
    CHECK_RC(em_storage_key_verify(st, "", &got, NULL), EM_ENOENT);
    CHECK_RC(em_storage_key_verify(st, NULL, &got, NULL), EM_ENOENT);

    /* Revocation. */
    CHECK_RC(em_storage_key_revoke(st, info.id, &err), 0);
    memset(&err, 0, sizeof err);
    CHECK_RC(em_storage_key_verify(st, key, &got, &err), EM_ESTATE);
    CHECK(strstr(err.msg, "revoked") != NULL);
    CHECK(strstr(err.msg, key + 3) == NULL);   /* never the key itself */
    CHECK_RC(em_storage_key_revoke(st, info.id, NULL), EM_ESTATE);
    CHECK_RC(em_storage_key_revoke(st, 12345, NULL), EM_ENOENT);
    CHECK_RC(em_storage_key_verify(st, key2, &got, NULL), 0);

    em_key_info *list = NULL;
    size_t n = 0;
    CHECK_RC(em_storage_key_list(st, &list, &n, &err), 0);
    CHECK(n == 2);
    if (n == 2) {
        CHECK(list[0].revoked_ms > 0 && list[1].revoked_ms == 0);
        CHECK(strcmp(list[1].name, "bob") == 0);
    }
    free(list);

    /* An admin key: stored, verified and listed as one; the others are not. */
    char ka[EM_STORAGE_KEY_MAX];
    em_key_info ainfo;
    CHECK_RC(em_storage_key_add_admin(st, "root", EM_USAGE_INTERACTIVE, 0, ka, sizeof ka, &ainfo,
                                      &err), 0);
    CHECK(ainfo.admin == 1);
    CHECK_RC(em_storage_key_verify(st, ka, &got, &err), 0);
    CHECK(got.id == ainfo.id && got.admin == 1 && strcmp(got.name, "root") == 0);
    CHECK_RC(em_storage_key_verify(st, key2, &got, &err), 0);
    CHECK(got.admin == 0);
    CHECK_RC(em_storage_key_list(st, &list, &n, &err), 0);
    CHECK(n == 3);
    for (size_t i = 0; i < n; i++)
        CHECK(list[i].admin == (list[i].id == ainfo.id));
    free(list);
    CHECK_RC(em_storage_key_add_admin(st, "", EM_USAGE_INTERACTIVE, 0, ka, sizeof ka, NULL, NULL),
             EM_EINVAL);
    sqlite3 *kdb = t_db_open(path);
    REQUIRE(kdb);
    CHECK(t_int(kdb, "SELECT count(*) FROM api_keys WHERE admin = 1") == 1);
    /* The column holds 0 or 1 only. */
    CHECK(t_exec(kdb, "UPDATE api_keys SET admin = 2 WHERE name = 'root'") != SQLITE_OK);
    sqlite3_close(kdb);

    /* Bad input. */
    char k3[EM_STORAGE_KEY_MAX];
    CHECK_RC(em_storage_key_add(st, "", EM_USAGE_INTERACTIVE, 0, k3, sizeof k3, NULL, NULL),
             EM_EINVAL);
    CHECK_RC(em_storage_key_add(st, "tab\there", EM_USAGE_INTERACTIVE, 0, k3, sizeof k3, NULL,
                                NULL), EM_EINVAL);
    CHECK_RC(em_storage_key_add(st, "x", EM_USAGE_INTERACTIVE, -1, k3, sizeof k3, NULL, NULL),
             EM_EINVAL);
    CHECK_RC(em_storage_key_add(st, "x", EM_USAGE_INTERACTIVE, 0, k3, 10, NULL, NULL), EM_EINVAL);
    /* A name is bound, never spliced into SQL. */
    CHECK_RC(em_storage_key_add(st, "x'); DROP TABLE api_keys; --", EM_USAGE_INTERACTIVE, 0, k3,
                                sizeof k3, &info, NULL), 0);
    CHECK_RC(em_storage_key_verify(st, k3, &got, NULL), 0);
    CHECK(strcmp(got.name, "x'); DROP TABLE api_keys; --") == 0);

    /* The keys are nowhere in the files, neither whole nor their secret part. */
    CHECK(!t_file_contains(path, key + 3) && !t_file_contains(wal, key + 3));
    CHECK(!t_file_contains(path, key2 + 3) && !t_file_contains(wal, key2 + 3));
    em_storage_close(st);
    CHECK(!t_file_contains(path, key + 3) && !t_file_contains(path, key2 + 3));
    CHECK(!t_file_contains(path, k3 + 3));
    return 0;
}

/* ---- conversations ---- */

static int test_conversations(void)
{
    char path[512];
    t_path(path, sizeof path, "conv.db");
    em_storage_opts o;
    em_storage_opts_init(&o);
    em_storage *st = t_open_at(path, &o);
    REQUIRE(st);
    em_err err = { 0 };
    char ka[EM_STORAGE_KEY_MAX], kb[EM_STORAGE_KEY_MAX];
    em_key_info a, b;
    REQUIRE(em_storage_key_add(st, "a", EM_USAGE_INTERACTIVE, 0, ka, sizeof ka, &a, &err) == 0);
    REQUIRE(em_storage_key_add(st, "b", EM_USAGE_INTERACTIVE, 0, kb, sizeof kb, &b, &err) == 0);

    int64_t c1 = 0, c2 = 0, c3 = 0, m = 0;
    CHECK_RC(em_storage_conv_create(st, a.id, "first", &c1, &err), 0);
    CHECK_RC(em_storage_conv_create(st, a.id, NULL, &c2, &err), 0);
    CHECK_RC(em_storage_conv_create(st, 0, "anonymous", &c3, &err), 0);
    /* Fixed, old times (no reliance on the clock): c2 looks newer than c1
     * until a message arrives in c1. */
    sqlite3 *db = t_db_open(path);
    REQUIRE(db);
    CHECK(t_exec(db, "UPDATE conversations SET updated_ms = 1000 + id WHERE key_id IS NOT NULL") ==
          SQLITE_OK);
    CHECK_RC(em_storage_message_add(st, a.id, c1, "user", "hello", 1, &m, &err), 0);
    CHECK(m > 0);
    CHECK_RC(em_storage_message_add(st, a.id, c1, "assistant", "hi there", 2, NULL, &err), 0);
    CHECK_RC(em_storage_message_add(st, a.id, c1, "robot", "x", 0, NULL, NULL), EM_EINVAL);
    /* Another key can neither write to, read, nor delete a's conversation. */
    CHECK_RC(em_storage_message_add(st, b.id, c1, "user", "intruder", 1, NULL, NULL), EM_ENOENT);
    em_message *msgs = NULL;
    size_t n = 0;
    CHECK_RC(em_storage_message_list(st, b.id, c1, &msgs, &n, NULL), EM_ENOENT);
    CHECK_RC(em_storage_conv_delete(st, b.id, c1, NULL), EM_ENOENT);
    CHECK_RC(em_storage_conv_delete(st, 0, c1, NULL), EM_ENOENT);

    em_conv_info *convs = NULL;
    CHECK_RC(em_storage_conv_list(st, a.id, &convs, &n, &err), 0);
    CHECK(n == 2);
    if (n == 2) {
        CHECK(convs[0].id == c1);   /* most recently updated first: a message touches it */
        CHECK(convs[1].id == c2 && convs[1].updated_ms == 1000 + c2);
        CHECK(convs[0].n_messages == 2 && strcmp(convs[0].title, "first") == 0);
    }
    free(convs);
    CHECK_RC(em_storage_conv_list(st, b.id, &convs, &n, &err), 0);
    CHECK(n == 0);
    free(convs);
    CHECK_RC(em_storage_conv_list(st, 0, &convs, &n, &err), 0);
    CHECK(n == 1);
    free(convs);

    CHECK_RC(em_storage_message_list(st, a.id, c1, &msgs, &n, &err), 0);
    CHECK(n == 2);
    if (n == 2) {
        CHECK(strcmp(msgs[0].role, "user") == 0 && strcmp(msgs[0].content, "hello") == 0);
        CHECK(strcmp(msgs[1].content, "hi there") == 0 && msgs[1].tokens == 2);
    }
    em_storage_messages_free(msgs, n);

    /* Deletion takes the messages along. */
    CHECK_RC(em_storage_conv_delete(st, a.id, c1, &err), 0);
    CHECK_RC(em_storage_conv_delete(st, a.id, c1, NULL), EM_ENOENT);
    CHECK(t_int(db, "SELECT count(*) FROM messages") == 0);

    /* Retention, with fixed times so that neither the clock nor the pass the
     * writer makes at open matters: c2 updated at now + 10 days, c3 at
     * now + 40 days; a pass "at" now + 50 days with 30 days kept removes c2. */
    CHECK_RC(em_storage_message_add(st, a.id, c2, "user", "old", 1, NULL, &err), 0);
    /* Stored responses by created_ms, the same cutoff (now + 20 days): the
     * ones before it go (any key, key 0 too), the one at it and after stay. */
    int64_t now = em_storage_now_ms(), day = 86400000LL;
    static const struct { const char *id; int64_t key, at_days; int kept; } rs[] = {
        { "resp_old1aaaaaaaaaaaa", 1, 10, 0 }, { "resp_old0aaaaaaaaaaaa", 0, 19, 0 },
        { "resp_edgeaaaaaaaaaaaa", 1, 20, 1 }, { "resp_new0aaaaaaaaaaaa", 0, 40, 1 },
    };
    for (size_t i = 0; i < sizeof rs / sizeof rs[0]; i++)
        CHECK_RC(em_storage_response_put(st, rs[i].id, rs[i].key == 1 ? a.id : 0, now + rs[i].at_days * day, "[]",
                                         "\"x\"", "{}", &err), 0);
    em_storage_close(st);
    char sql[160];
    snprintf(sql, sizeof sql, "UPDATE conversations SET updated_ms = %lld WHERE id = %lld",
             (long long)(now + 10 * day), (long long)c2);
    CHECK(t_exec(db, sql) == SQLITE_OK);
    snprintf(sql, sizeof sql, "UPDATE conversations SET updated_ms = %lld WHERE id = %lld",
             (long long)(now + 40 * day), (long long)c3);
    CHECK(t_exec(db, sql) == SQLITE_OK);
    o.retention_days = 30;
    st = t_open_at(path, &o);
    REQUIRE(st);
    int64_t deleted = 0;
    for (size_t i = 0; i < sizeof rs / sizeof rs[0]; i++)   /* the pass at open (now) removed none */
        CHECK_RC(em_storage_response_get(st, rs[i].id, rs[i].key == 1 ? a.id : 0, NULL, NULL, NULL, &err), 0);
    CHECK_RC(em_storage_retention_run(st, now + 50 * day, &deleted, &err), 0);
    CHECK(deleted == 3);   /* c2 and two responses */
    for (size_t i = 0; i < sizeof rs / sizeof rs[0]; i++)
        CHECK_RC(em_storage_response_get(st, rs[i].id, rs[i].key == 1 ? a.id : 0, NULL, NULL, NULL, &err),
                 rs[i].kept ? 0 : EM_ENOENT);
    CHECK(t_int(db, "SELECT count(*) FROM responses") == 2);
    CHECK_RC(em_storage_retention_run(st, now + 50 * day, &deleted, &err), 0);   /* again: nothing left to do */
    CHECK(deleted == 0);
    CHECK(t_int(db, "SELECT count(*) FROM conversations") == 1);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM conversations WHERE id = %lld", (long long)c3);
    CHECK(t_int(db, sql) == 1);
    CHECK(t_int(db, "SELECT count(*) FROM messages") == 0);
    sqlite3_close(db);
    em_storage_close(st);

    /* Content switched off: nothing new is stored. */
    o.store_content = 0;
    st = t_open_at(path, &o);
    REQUIRE(st);
    CHECK_RC(em_storage_conv_create(st, a.id, "no", &c1, NULL), EM_ESTATE);
    CHECK_RC(em_storage_message_add(st, 0, c3, "user", "secret text", 1, NULL, NULL), EM_ESTATE);
    em_storage_close(st);
    CHECK(!t_file_contains(path, "secret text"));
    return 0;
}

/* ---- usage ---- */

static void add_req(em_storage *st, const char *id, int64_t key, em_usage_class cls,
                    const char *model, int64_t recv, int64_t prompt, int64_t cached,
                    int64_t compl, double ttft, double tpot, em_usage_status status)
{
    em_usage_record r;
    em_usage_record_init(&r);
    snprintf(r.request_id, sizeof r.request_id, "%s", id);
    snprintf(r.model, sizeof r.model, "%s", model);
    r.key_id = key;
    r.cls = cls;
    r.received_ms = recv;
    r.finished_ms = recv + 2000;
    r.prompt_tokens = prompt;
    r.cached_tokens = cached;
    r.completion_tokens = compl;
    r.ttft_ms = ttft;
    r.queue_ms = ttft >= 0 ? ttft / 2 : -1;
    r.tpot_mean_ms = tpot;
    r.status = status;
    em_storage_submit(st, &r);
}

static int fill_ledger(const char *path)
{
    em_storage *st = t_open_at(path, NULL);
    REQUIRE(st);
    char k[EM_STORAGE_KEY_MAX];
    REQUIRE(em_storage_key_add(st, "alice", EM_USAGE_INTERACTIVE, 0, k, sizeof k, NULL, NULL) == 0);
    REQUIRE(em_storage_key_add(st, "bob", EM_USAGE_BACKGROUND, 0, k, sizeof k, NULL, NULL) == 0);
    add_req(st, "r1", 1, EM_USAGE_INTERACTIVE, "m1", D1 + 10 * HOUR, 100, 25, 10, 10, 2,
            EM_USAGE_COMPLETED);
    add_req(st, "r2", 1, EM_USAGE_INTERACTIVE, "m1", D1 + 11 * HOUR, 100, 75, 30, 30, 4,
            EM_USAGE_COMPLETED);
    add_req(st, "r3", 2, EM_USAGE_BACKGROUND, "m2", D1 + 34 * HOUR, 200, 0, 60, 20, 6,
            EM_USAGE_COMPLETED);
    add_req(st, "r4", 0, EM_USAGE_INTERACTIVE, "m2", D1 + 36 * HOUR, 50, 0, 0, -1, -1,
            EM_USAGE_FAILED);
    int rc = em_storage_flush(st, -1, NULL);
    em_storage_close(st);
    return rc;
}

static int near(double a, double b)
{
    return fabs(a - b) <= 1e-9 * (fabs(b) > 1 ? fabs(b) : 1);
}

static const em_usage_row *find_row(const em_usage_report *rep, const char *label)
{
    for (size_t i = 0; i < rep->n_rows; i++)
        if (strcmp(rep->rows[i].label, label) == 0)
            return &rep->rows[i];
    fprintf(stderr, "no group '%s'\n", label);
    return NULL;
}

static int test_usage(void)
{
    char p1[512], p2[512];
    t_path(p1, sizeof p1, "usage1.db");
    t_path(p2, sizeof p2, "usage2.db");
    REQUIRE(fill_ledger(p1) == 0);
    REQUIRE(fill_ledger(p2) == 0);
    const char *one[1] = { p1 }, *two[2] = { p1, p2 };
    em_usage_query q;
    em_usage_report *rep = NULL;
    em_err err = { 0 };

    /* Totals over the two full days, $3 per GPU-hour. */
    em_storage_usage_query_init(&q);
    q.since_ms = D1;
    q.until_ms = D1 + 48 * HOUR;
    q.gpu_cost_per_hour = 3;
    CHECK_RC(em_storage_usage_query(one, 1, &q, &rep, &err), 0);
    REQUIRE(rep);
    const em_usage_row *t = &rep->total;
    CHECK(t->requests == 4 && t->prompt_tokens == 450 && t->cached_tokens == 100);
    CHECK(t->completion_tokens == 100);
    CHECK(near(t->cached_share, 100.0 / 450.0));
    CHECK(t->ttft_p50_ms == 20 && t->ttft_p99_ms == 30);   /* of {10, 20, 30} */
    CHECK(t->tpot_p50_ms == 4 && t->tpot_p99_ms == 6);
    CHECK(t->queue_p50_ms == 10 && t->queue_p99_ms == 15);   /* of {5, 10, 15} */
    CHECK(near(t->gpu_hours, 48) && near(t->cost, 144) && near(t->cost_per_1m, 1.44e6));
    CHECK(rep->n_rows == 0);
    em_storage_usage_free(rep);

    /* By hour: each hour its own GPU hour. */
    q.group_by = EM_USAGE_BY_HOUR;
    CHECK_RC(em_storage_usage_query(one, 1, &q, &rep, &err), 0);
    REQUIRE(rep);
    CHECK(rep->n_rows == 4);
    const em_usage_row *h = find_row(rep, "2024-05-01T10:00Z");
    CHECK(h && h->requests == 1 && h->completion_tokens == 10 && near(h->gpu_hours, 1) && near(h->cost_per_1m, 3e5));
    CHECK(h && h->queue_p50_ms == 5 && h->ttft_p50_ms == 10);
    h = find_row(rep, "2024-05-02T10:00Z");
    CHECK(h && h->requests == 1 && h->completion_tokens == 60 && near(h->cost_per_1m, 5e4));
    h = find_row(rep, "2024-05-02T12:00Z");
    CHECK(h && h->requests == 1 && isnan(h->queue_p50_ms) && isnan(h->cost_per_1m));
    em_usage_group_by gb;
    CHECK(em_storage_group_by_parse("hour", &gb) == 0 && gb == EM_USAGE_BY_HOUR);
    char *hj = NULL;
    CHECK_RC(em_storage_usage_json(rep, &hj, &err), 0);
    CHECK(hj && strstr(hj, "\"group_by\": \"hour\"") && strstr(hj, "\"queue_p99_ms\": 15.0"));
    free(hj);
    em_storage_usage_free(rep);
    q.group_by = EM_USAGE_BY_NONE;

    /* By key: GPU hours shared by completion tokens. */
    q.group_by = EM_USAGE_BY_KEY;
    CHECK_RC(em_storage_usage_query(one, 1, &q, &rep, &err), 0);
    REQUIRE(rep);
    CHECK(rep->n_rows == 3);
    const em_usage_row *r = find_row(rep, "alice");
    CHECK(r && r->requests == 2 && near(r->gpu_hours, 19.2) && near(r->cost_per_1m, 1.44e6));
    CHECK(r && near(r->cached_share, 0.5) && r->ttft_p50_ms == 10 && r->ttft_p99_ms == 30);
    r = find_row(rep, "-");
    CHECK(r && r->requests == 1 && r->gpu_hours == 0 && isnan(r->cost_per_1m) &&
          isnan(r->ttft_p50_ms));
    em_storage_usage_free(rep);

    /* By day: each day its own hours. */
    q.group_by = EM_USAGE_BY_DAY;
    CHECK_RC(em_storage_usage_query(one, 1, &q, &rep, &err), 0);
    REQUIRE(rep);
    CHECK(rep->n_rows == 2);
    r = find_row(rep, "2024-05-01");
    CHECK(r && r->completion_tokens == 40 && near(r->gpu_hours, 24) && near(r->cost_per_1m, 1.8e6));
    r = find_row(rep, "2024-05-02");
    CHECK(r && r->completion_tokens == 60 && near(r->cost_per_1m, 1.2e6));

    /* The three formats. */
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    REQUIRE(f);
    CHECK_RC(em_storage_usage_write(rep, EM_USAGE_TABLE, f, &err), 0);
    CHECK_RC(em_storage_usage_write(rep, EM_USAGE_CSV, f, &err), 0);
    fclose(f);
    CHECK(strstr(buf, "2024-05-02") && strstr(buf, "cost_per_1m") && strstr(buf, "total"));
    CHECK(strstr(buf, "2024-05-01,2,200,100,0.5000,40,10.0,30.0,2.0,4.0,24.00,72.0000,1800000.0000,5.0,15.0\r\n"));
    free(buf);
    char *js = NULL;
    CHECK_RC(em_storage_usage_json(rep, &js, &err), 0);
    json_error_t jerr;
    json_t *root = js ? json_loads(js, 0, &jerr) : NULL;
    CHECK(root != NULL);
    if (root) {
        CHECK(json_array_size(json_object_get(root, "groups")) == 2);
        json_t *tot = json_object_get(root, "total");
        CHECK(json_integer_value(json_object_get(tot, "requests")) == 4);
        CHECK(near(json_real_value(json_object_get(tot, "cost_per_1m")), 1.44e6));
        CHECK(json_is_null(json_object_get(root, "until_ms")) == 0);
        CHECK(strcmp(json_string_value(json_object_get(root, "group_by")), "day") == 0);
    }
    json_decref(root);
    free(js);
    em_storage_usage_free(rep);

    /* Two boxes merged: twice the requests, twice the GPU hours. */
    q.group_by = EM_USAGE_BY_CLASS;
    CHECK_RC(em_storage_usage_query(two, 2, &q, &rep, &err), 0);
    REQUIRE(rep);
    CHECK(rep->total.requests == 8 && near(rep->total.gpu_hours, 96));
    CHECK(near(rep->total.cost_per_1m, 1.44e6));
    r = find_row(rep, "background");
    CHECK(r && r->requests == 2);
    r = find_row(rep, "interactive");
    CHECK(r && r->requests == 6);
    em_storage_usage_free(rep);

    /* One key's requests: alice's (key 1), those without a key (0). */
    em_storage_usage_query_init(&q);
    q.only_key = 1;
    q.key_id = 1;
    q.group_by = EM_USAGE_BY_KEY;
    CHECK_RC(em_storage_usage_query(one, 1, &q, &rep, &err), 0);
    REQUIRE(rep);
    CHECK(rep->total.requests == 2 && rep->total.prompt_tokens == 200);
    CHECK(rep->n_rows == 1 && find_row(rep, "alice"));
    CHECK_RC(em_storage_usage_json(rep, &js, &err), 0);
    root = js ? json_loads(js, 0, &jerr) : NULL;
    CHECK(root && json_integer_value(json_object_get(root, "key_id")) == 1);
    json_decref(root);
    free(js);
    em_storage_usage_free(rep);
    q.key_id = 0;
    CHECK_RC(em_storage_usage_query(two, 2, &q, &rep, &err), 0);
    REQUIRE(rep);
    CHECK(rep->total.requests == 2 && rep->n_rows == 1 && find_row(rep, "-"));
    em_storage_usage_free(rep);
    q.key_id = 99;
    CHECK_RC(em_storage_usage_query(one, 1, &q, &rep, &err), 0);
    REQUIRE(rep);
    CHECK(rep->total.requests == 0 && rep->n_rows == 0);
    em_storage_usage_free(rep);
    /* Every key's: no key_id in the JSON. */
    em_storage_usage_query_init(&q);
    CHECK_RC(em_storage_usage_query(one, 1, &q, &rep, &err), 0);
    REQUIRE(rep);
    CHECK(rep->total.requests == 4);
    CHECK_RC(em_storage_usage_json(rep, &js, &err), 0);
    root = js ? json_loads(js, 0, &jerr) : NULL;
    CHECK(root && !json_object_get(root, "key_id"));
    json_decref(root);
    free(js);
    em_storage_usage_free(rep);

    /* Open window: from the first request to the last event. */
    em_storage_usage_query_init(&q);
    q.group_by = EM_USAGE_BY_MODEL;
    CHECK_RC(em_storage_usage_query(one, 1, &q, &rep, &err), 0);
    REQUIRE(rep);
    CHECK(near(rep->total.gpu_hours, 26.0 + 2.0 / 3600.0));
    CHECK(isnan(rep->total.cost));
    CHECK(rep->n_rows == 2 && find_row(rep, "m1") && find_row(rep, "m2"));
    em_storage_usage_free(rep);

    /* Bad queries. */
    const char *missing[1] = { "/nonexistent/ember.db" };
    em_storage_usage_query_init(&q);
    memset(&err, 0, sizeof err);
    CHECK_RC(em_storage_usage_query(missing, 1, &q, &rep, &err), EM_ENOENT);
    CHECK(strstr(err.msg, "/nonexistent/ember.db") != NULL);
    q.since_ms = D1 + HOUR;
    q.until_ms = D1;
    CHECK_RC(em_storage_usage_query(one, 1, &q, &rep, NULL), EM_EINVAL);
    return 0;
}

/* Grouped by the front door ("-" where a row names none; older ledgers:
 * test_usage_reads_old_ledger). */
static int test_usage_by_endpoint(void)
{
    char path[512];
    t_path(path, sizeof path, "endpoints.db");
    em_storage *st = t_open_at(path, NULL);
    REQUIRE(st);
    static const char *const doors[] = { "chat.completions", "completions", "chat.completions", "ws.chat", "" };
    for (size_t i = 0; i < sizeof doors / sizeof doors[0]; i++) {
        char id[16];
        snprintf(id, sizeof id, "ep%zu", i);
        submit_door(st, id, EM_USAGE_COMPLETED, doors[i], 0, 0);
    }
    CHECK_RC(em_storage_flush(st, -1, NULL), 0);
    em_storage_close(st);

    em_usage_query q;
    em_storage_usage_query_init(&q);
    CHECK_RC(em_storage_group_by_parse("endpoint", &q.group_by), 0);
    CHECK(q.group_by == EM_USAGE_BY_ENDPOINT);
    em_usage_report *rep = NULL;
    em_err err = { 0 };
    const char *one[1] = { path };
    CHECK_RC(em_storage_usage_query(one, 1, &q, &rep, &err), 0);
    REQUIRE(rep);
    CHECK(rep->n_rows == 4);
    const em_usage_row *r = find_row(rep, "chat.completions");
    CHECK(r && r->requests == 2 && r->completion_tokens == 10);
    r = find_row(rep, "completions");
    CHECK(r && r->requests == 1 && r->completion_tokens == 5);
    r = find_row(rep, "ws.chat");
    CHECK(r && r->requests == 1);
    r = find_row(rep, "-");
    CHECK(r && r->requests == 1 && r->completion_tokens == 5);
    CHECK(rep->total.requests == 5 && rep->total.completion_tokens == 25);
    char *js = NULL;
    CHECK_RC(em_storage_usage_json(rep, &js, &err), 0);
    CHECK(js && strstr(js, "\"group_by\": \"endpoint\""));
    free(js);
    em_storage_usage_free(rep);
    return 0;
}

/* ---- utilization ---- */

static const em_util_row *util_row(const em_util_report *rep, const char *label)
{
    for (size_t i = 0; i < rep->n_rows; i++)
        if (strcmp(rep->rows[i].label, label) == 0)
            return &rep->rows[i];
    fprintf(stderr, "no bucket '%s'\n", label);
    return NULL;
}

static int test_utilization(void)
{
    char path[512], old[512], v5[512];
    t_path(path, sizeof path, "util.db");
    em_storage *st = t_open_at(path, NULL);
    REQUIRE(st);
    em_err err = { 0 };
    /* two minutes of 10:00 on May 1 (added into one row), a minute of 11:00
     * idle, and the whole of 09:00 on May 2 */
    const em_util_sample s[] = {
        { D1 + 10 * HOUR, D1 + 10 * HOUR + 60000, 30.0, 3000, 500, 100 },
        { D1 + 10 * HOUR + 1800000, D1 + 10 * HOUR + 1860000, 6.0, 600, 100, 20 },
        { D1 + 11 * HOUR, D1 + 11 * HOUR + 60000, 0.0, 0, 0, 0 },
        { D1 + 33 * HOUR, D1 + 34 * HOUR, 360.0, 72000, 9000, 4000 },
    };
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++)
        CHECK_RC(em_storage_util_add(st, &s[i], &err), 0);
    const em_util_sample bad[] = {
        { D1 + 10 * HOUR + 3590000, D1 + 11 * HOUR + 10000, 1.0, 0, 0, 0 },   /* crosses 11:00 */
        { D1, D1, 0.0, 0, 0, 0 },                                             /* empty */
        { D1, D1 + 1000, 1.5, 0, 0, 0 },                                      /* busier than long */
        { D1, D1 + 1000, -1.0, 0, 0, 0 },
        { D1, D1 + 1000, 0.5, -1, 0, 0 },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_RC(em_storage_util_add(st, &bad[i], NULL), EM_EINVAL);
    em_util_bucket b;
    CHECK(em_storage_util_bucket_parse("day", &b) == 0 && b == EM_UTIL_DAY);
    CHECK(em_storage_util_bucket_parse("week", &b) == EM_EINVAL);

    /* by hour, $2 an hour */
    em_util_query q;
    em_storage_util_query_init(&q);
    q.gpu_cost_per_hour = 2;
    em_util_report *rep = NULL;
    CHECK_RC(em_storage_util(st, &q, &rep, &err), 0);
    REQUIRE(rep);
    CHECK(rep->n_rows == 3);
    const em_util_row *r = util_row(rep, "2024-05-01T10:00Z");
    CHECK(r && r->start_ms == D1 + 10 * HOUR && near(r->up_s, 120) && near(r->busy_s, 36));
    CHECK(r && r->generated_tokens == 3600 && r->prefilled_tokens == 600 && r->steps == 120);
    CHECK(r && near(r->utilization, 0.3) && near(r->busy_tokens_per_s, 100));
    CHECK(r && near(r->cost_per_1m_full_load, 2.0 / (100 * 3600.0) * 1e6));
    CHECK(r && near(r->cost_per_1m_measured, r->cost_per_1m_full_load / 0.3));
    r = util_row(rep, "2024-05-01T11:00Z");
    CHECK(r && near(r->up_s, 60) && r->busy_s == 0 && r->utilization == 0 && isnan(r->busy_tokens_per_s) &&
          isnan(r->cost_per_1m_full_load) && isnan(r->cost_per_1m_measured));
    r = util_row(rep, "2024-05-02T09:00Z");
    CHECK(r && near(r->utilization, 0.1) && near(r->busy_tokens_per_s, 200));
    const em_util_row *t = &rep->total;
    CHECK(strcmp(t->label, "total") == 0 && near(t->up_s, 3780) && near(t->busy_s, 396) && t->generated_tokens == 75600);
    CHECK(near(t->utilization, 396.0 / 3780.0) && near(t->cost_per_1m_measured, 2.0 * 3780 / 3600 / 75600 * 1e6));
    CHECK(near(t->cost_per_1m_measured * t->utilization, t->cost_per_1m_full_load));
    char *js = NULL;
    CHECK_RC(em_storage_util_json(rep, &js, &err), 0);
    json_error_t jerr;
    json_t *root = js ? json_loads(js, 0, &jerr) : NULL;
    CHECK(root != NULL);
    if (root) {
        CHECK(strcmp(json_string_value(json_object_get(root, "bucket")), "hour") == 0);
        CHECK(json_real_value(json_object_get(root, "gpu_cost_per_hour")) == 2.0);
        json_t *bs = json_object_get(root, "buckets");
        CHECK(json_array_size(bs) == 3);
        json_t *b1 = json_array_get(bs, 1);
        CHECK(strcmp(json_string_value(json_object_get(b1, "period")), "2024-05-01T11:00Z") == 0);
        CHECK(json_is_null(json_object_get(b1, "busy_tokens_per_s")) && json_is_null(json_object_get(b1, "cost_per_1m_measured")));
        json_t *tot = json_object_get(root, "total");
        CHECK(json_is_null(json_object_get(tot, "start_ms")));
        CHECK(json_integer_value(json_object_get(tot, "generated_tokens")) == 75600);
        CHECK(near(json_real_value(json_object_get(tot, "utilization")), 396.0 / 3780.0));
        CHECK(json_is_null(json_object_get(root, "since_ms")));
    }
    json_decref(root);
    free(js);
    em_storage_util_free(rep);

    /* by day; without a price no cost */
    em_storage_util_query_init(&q);
    q.bucket = EM_UTIL_DAY;
    CHECK_RC(em_storage_util(st, &q, &rep, &err), 0);
    REQUIRE(rep);
    CHECK(rep->n_rows == 2);
    r = util_row(rep, "2024-05-01");
    CHECK(r && r->start_ms == D1 && near(r->up_s, 180) && near(r->busy_s, 36) && isnan(r->cost_per_1m_full_load));
    r = util_row(rep, "2024-05-02");
    CHECK(r && near(r->up_s, 3600) && r->steps == 4000);
    em_storage_util_free(rep);

    /* a window: the hours that start in [10:30 May 1, 10:00 May 2) */
    em_storage_util_query_init(&q);
    q.since_ms = D1 + 10 * HOUR + 1800000;
    q.until_ms = D1 + 34 * HOUR;
    CHECK_RC(em_storage_util(st, &q, &rep, &err), 0);
    REQUIRE(rep);
    CHECK(rep->n_rows == 2 && util_row(rep, "2024-05-01T11:00Z") && util_row(rep, "2024-05-02T09:00Z"));
    CHECK(near(rep->total.up_s, 3660));
    em_storage_util_free(rep);
    q.until_ms = q.since_ms;
    CHECK_RC(em_storage_util(st, &q, &rep, NULL), EM_EINVAL);
    em_storage_close(st);

    /* a ledger from before the table reads as empty, and is not migrated */
    t_path(old, sizeof old, "util-v4.db");
    REQUIRE(make_db_at(old, 4) == 0);
    em_storage_util_query_init(&q);
    CHECK_RC(em_storage_util_query(old, &q, &rep, &err), 0);
    REQUIRE(rep);
    CHECK(rep->n_rows == 0 && rep->total.up_s == 0 && isnan(rep->total.utilization));
    em_storage_util_free(rep);
    sqlite3 *db = t_db_open(old);
    REQUIRE(db);
    CHECK(t_int(db, "PRAGMA user_version") == 4);
    sqlite3_close(db);

    /* the step is self-contained: a file whose table an earlier-numbered
     * step already made keeps it, rows and all */
    t_path(v5, sizeof v5, "util-v5.db");
    REQUIRE(make_db_at(v5, 5) == 0);
    db = t_db_open(v5);
    REQUIRE(db);
    CHECK(t_exec(db, "CREATE TABLE utilization (hour_ms INTEGER PRIMARY KEY, up_ms INTEGER NOT NULL DEFAULT 0,"
                     " busy_ms REAL NOT NULL DEFAULT 0, generated_tokens INTEGER NOT NULL DEFAULT 0,"
                     " prefilled_tokens INTEGER NOT NULL DEFAULT 0, steps INTEGER NOT NULL DEFAULT 0);"
                     "INSERT INTO utilization (hour_ms, up_ms) VALUES (1714521600000, 5000);") == 0);
    sqlite3_close(db);
    st = t_open_at(v5, NULL);
    CHECK(st != NULL);
    em_storage_close(st);
    db = t_db_open(v5);
    REQUIRE(db);
    CHECK(t_int(db, "PRAGMA user_version") == EM_STORAGE_SCHEMA_VERSION);
    CHECK(t_int(db, "SELECT up_ms FROM utilization WHERE hour_ms = 1714521600000") == 5000);
    sqlite3_close(db);
    return 0;
}

static int test_parse(void)
{
    int64_t ms = 0;
    CHECK_RC(em_storage_parse_time("2024-05-01", 0, &ms, NULL), 0);
    CHECK(ms == D1);
    CHECK_RC(em_storage_parse_time("2024-05-01", 1, &ms, NULL), 0);
    CHECK(ms == D1 + 24 * HOUR);
    CHECK_RC(em_storage_parse_time("2024-05-01T10:00", 1, &ms, NULL), 0);
    CHECK(ms == D1 + 10 * HOUR);
    CHECK_RC(em_storage_parse_time("2024-05-01 10:00:30Z", 0, &ms, NULL), 0);
    CHECK(ms == D1 + 10 * HOUR + 30000);
    CHECK_RC(em_storage_parse_time("2024-02-30", 0, &ms, NULL), EM_EINVAL);
    CHECK_RC(em_storage_parse_time("2024-5-1", 0, &ms, NULL), EM_EINVAL);
    CHECK_RC(em_storage_parse_time("yesterday", 0, &ms, NULL), EM_EINVAL);
    CHECK_RC(em_storage_parse_time("2024-05-01T10:00x", 0, &ms, NULL), EM_EINVAL);
    em_usage_group_by g;
    CHECK_RC(em_storage_group_by_parse("model", &g), 0);
    CHECK(g == EM_USAGE_BY_MODEL);
    CHECK_RC(em_storage_group_by_parse("user", &g), EM_EINVAL);
    em_usage_format fmt;
    CHECK_RC(em_storage_format_parse("csv", &fmt), 0);
    CHECK(fmt == EM_USAGE_CSV);
    CHECK_RC(em_storage_format_parse("xml", &fmt), EM_EINVAL);
    em_storage_close(NULL);
    em_storage_usage_free(NULL);
    em_storage_messages_free(NULL, 0);
    return 0;
}

int main(void)
{
    if (t_mkdtemp("storage"))
        return 1;
    struct {
        const char *name;
        int (*fn)(void);
    } tests[] = {
        { "migrations", test_migrations },
        { "usage_reads_old_ledger", test_usage_reads_old_ledger },
        { "refusals", test_refusals },
        { "writer", test_writer },
        { "queue_full", test_queue_full },
        { "keys", test_keys },
        { "conversations", test_conversations },
        { "usage", test_usage },
        { "usage_by_endpoint", test_usage_by_endpoint },
        { "utilization", test_utilization },
        { "parse", test_parse },
    };
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        int before = test_failures;
        if (tests[i].fn())
            test_failures++;
        printf("%s %s\n", test_failures == before ? "ok  " : "FAIL", tests[i].name);
    }
    return test_summary("storage");
}
