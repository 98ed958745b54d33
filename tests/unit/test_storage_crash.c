/* test_storage_crash.c — crash safety of the ledger. A child process writes
 * ledger rows as fast as it can (admission and completion of each request)
 * and reports, from the writer's commit callback, every row the writer says
 * it committed through a pipe; the parent kills it with SIGKILL at a random
 * moment (also during open and schema creation), many times. After each kill
 * PRAGMA integrity_check must say ok and every reported row must be in the
 * file, at least as advanced as reported. Then a database at schema v1 is
 * killed mid-migration the same way. Random moments come from a seeded
 * generator (EMBER_CRASH_SEED to replay); the loop is bounded. At least one
 * kill must land inside the migration. And since SIGKILL cannot tell
 * synchronous=FULL from OFF, the pragmas are checked on the connections. */
#include <signal.h>

#include "tests/unit/storage_test.h"

#define ITERATIONS   48
#define MIG_ITERS    16    /* kills during a migration, at least */
#define MIG_MAX      64    /* at most, until one has landed inside it */
#define MAX_REPORTS  (1u << 22)

static uint64_t rng_state;

static uint32_t rnd(void)
{
    /* xorshift64* */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 2685821657736338717ULL) >> 32);
}

static int report_fd = -1;

/* A report: iteration << 40 | request number << 1 | completed. */
static void child_on_commit(void *ctx, const em_usage_record *const *rows, size_t n)
{
    (void)ctx;
    uint64_t buf[512];   /* 4096 bytes: one write of at most PIPE_BUF is atomic */
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned it = 0, num = 0;
        if (sscanf(rows[i]->request_id, "c%u-%u", &it, &num) != 2)
            continue;
        buf[k++] = (uint64_t)it << 40 | (uint64_t)num << 1 |
                   (rows[i]->status == EM_USAGE_COMPLETED);
        if (k == 512 || i + 1 == n) {
            if (write(report_fd, buf, k * sizeof buf[0]) != (ssize_t)(k * sizeof buf[0]))
                _exit(4);
            k = 0;
        }
    }
    if (k && write(report_fd, buf, k * sizeof buf[0]) != (ssize_t)(k * sizeof buf[0]))
        _exit(4);
}

/* The child: write until killed (bounded all the same). */
static void child_main(const char *path, unsigned it, int fd)
{
    report_fd = fd;
    em_storage_opts o;
    em_storage_opts_init(&o);
    o.path = path;
    o.batch_rows = 64;
    o.batch_ms = 2;
    o.queue_cap = 1024;
    o.on_commit = child_on_commit;
    em_err err = { 0 };
    em_storage *st = NULL;
    if (em_storage_open(&o, &st, &err)) {
        fprintf(stderr, "child: %s\n", err.msg);
        _exit(3);
    }
    for (unsigned n = 0; n < 2000000; n++) {
        em_usage_record r;
        char id[40];
        snprintf(id, sizeof id, "c%u-%u", it, n);
        t_record(&r, id, EM_USAGE_ADMITTED);
        r.received_ms += n;
        while (em_storage_submit(st, &r) == EM_EBUSY)
            sched_yield();
        r.status = EM_USAGE_COMPLETED;
        r.finished_ms = r.received_ms + 100;
        r.prompt_tokens = n % 1000;
        r.completion_tokens = n % 100;
        snprintf(r.error, sizeof r.error, "%*s", (int)(n % 200), "");   /* vary row sizes */
        while (em_storage_submit(st, &r) == EM_EBUSY)
            sched_yield();
    }
    em_storage_close(st);
    _exit(0);
}

/* Read what is in the pipe into *buf; blocking when block, until EOF or
 * at least one report arrived. Returns the number of bytes read, -1 on EOF. */
static ssize_t drain(int fd, unsigned char *buf, size_t *len, size_t cap, int until_eof)
{
    ssize_t total = 0;
    for (;;) {
        if (*len >= cap)
            return total;
        ssize_t n = read(fd, buf + *len, cap - *len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return total ? total : -1;
        *len += (size_t)n;
        total += n;
        if (!until_eof && *len >= sizeof(uint64_t))
            return total;
    }
}

static int check_reports(const char *path, const uint64_t *rep, size_t n, unsigned it)
{
    int bad = 0;
    sqlite3 *db = t_db_open(path);
    REQUIRE(db);
    sqlite3_stmt *s = NULL;
    if (n && sqlite3_prepare_v2(db, "SELECT status FROM requests WHERE request_id = ?1", -1, &s,
                                NULL) != SQLITE_OK) {
        fprintf(stderr, "iteration %u: %s\n", it, sqlite3_errmsg(db));
        sqlite3_close(db);
        return 1;
    }
    for (size_t i = 0; i < n && bad < 5; i++) {
        char id[40];
        unsigned rit = (unsigned)(rep[i] >> 40), num = (unsigned)((rep[i] >> 1) & 0x7fffffffffULL);
        int done = (int)(rep[i] & 1);
        snprintf(id, sizeof id, "c%u-%u", rit, num);
        sqlite3_bind_text(s, 1, id, -1, SQLITE_TRANSIENT);
        int rc = sqlite3_step(s);
        const char *status = rc == SQLITE_ROW ? (const char *)sqlite3_column_text(s, 0) : NULL;
        if (!status || (done && strcmp(status, "completed") != 0)) {
            fprintf(stderr, "iteration %u: committed row %s (%s) is %s\n", it, id,
                    done ? "completed" : "admitted", status ? status : "missing");
            bad++;
        }
        sqlite3_reset(s);
    }
    sqlite3_finalize(s);
    sqlite3_close(db);
    return bad;
}

/* SIGKILL cannot tell synchronous=FULL from OFF (the OS still writes the
 * page cache out); a power cut can. Check the setting itself, on the
 * writer's connection (opened by the writer thread for the first batch) and
 * on the keys/conversations one, and that both are in WAL mode. */
static int test_pragmas(void)
{
    char path[512];
    t_path(path, sizeof path, "pragmas.db");
    em_storage_opts o;
    em_storage_opts_init(&o);
    o.path = path;
    em_storage *st = NULL;
    em_err err = { 0 };
    REQUIRE(em_storage_open(&o, &st, &err) == 0);
    em_usage_record r;
    em_usage_record_init(&r);
    snprintf(r.request_id, sizeof r.request_id, "pragma-1");
    r.status = EM_USAGE_COMPLETED;
    CHECK_RC(em_storage_submit(st, &r), 0);
    CHECK_RC(em_storage_flush(st, 10000, &err), 0);
    /* the writer thread waits for work now; SQLite connections are
     * serialized, so reading a pragma from here is safe */
    sqlite3 *conns[2] = { st->w.db, st->ops.db };
    for (int i = 0; i < 2; i++) {
        REQUIRE(conns[i]);
        CHECK(t_int(conns[i], "PRAGMA synchronous") == 2);   /* FULL */
        sqlite3_stmt *q = NULL;
        REQUIRE(sqlite3_prepare_v2(conns[i], "PRAGMA journal_mode", -1, &q, NULL) == SQLITE_OK);
        CHECK(sqlite3_step(q) == SQLITE_ROW && strcmp((const char *)sqlite3_column_text(q, 0), "wal") == 0);
        sqlite3_finalize(q);
    }
    CHECK(sqlite3_threadsafe() == 1);
    em_storage_close(st);
    return 0;
}

static int test_kill_loop(void)
{
    char path[512];
    t_path(path, sizeof path, "crash.db");
    size_t cap = MAX_REPORTS * sizeof(uint64_t);
    unsigned char *buf = malloc(cap);
    REQUIRE(buf);
    long long prev_rows = 0;
    size_t total_reports = 0;
    int kills_before_report = 0;
    for (unsigned it = 0; it < ITERATIONS; it++) {
        int p[2];
        REQUIRE(pipe(p) == 0);
        fflush(NULL);
        pid_t pid = fork();
        REQUIRE(pid >= 0);
        if (pid == 0) {
            close(p[0]);
            child_main(path, it, p[1]);
        }
        close(p[1]);
        size_t len = 0;
        /* One in four: kill at once (opening, creating the schema, first
         * batch). Otherwise after the first commit, plus a random delay. */
        if (it % 4 == 0) {
            t_sleep_ms((int)(rnd() % 4));
        } else {
            drain(p[0], buf, &len, cap, 0);
            struct timespec ts = { 0, (long)(rnd() % 30000) * 1000L };
            nanosleep(&ts, NULL);
        }
        kill(pid, SIGKILL);
        drain(p[0], buf, &len, cap, 1);
        close(p[0]);
        int status = 0;
        REQUIRE(waitpid(pid, &status, 0) == pid);
        if (!(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)) {
            fprintf(stderr, "iteration %u: child ended by itself (status %d)\n", it, status);
            test_failures++;
        }
        size_t n = len / sizeof(uint64_t);
        kills_before_report += n == 0;
        total_reports += n;
        if (access(path, F_OK) != 0) {   /* killed before it created the file */
            CHECK(n == 0 && prev_rows == 0);
            continue;
        }
        CHECK(t_integrity_ok(path));
        if (n)
            CHECK(check_reports(path, (const uint64_t *)buf, n, it) == 0);
        /* Rows never disappear. */
        sqlite3 *db = t_db_open(path);
        REQUIRE(db);
        long long rows = t_int(db, "SELECT count(*) FROM sqlite_schema WHERE name = 'requests'") == 1
                             ? t_int(db, "SELECT count(*) FROM requests")
                             : 0;
        sqlite3_close(db);
        CHECK(rows >= prev_rows);
        prev_rows = rows;
    }
    free(buf);
    /* Finally the daemon's start: rows left admitted become interrupted. */
    em_storage_opts o;
    em_storage_opts_init(&o);
    o.path = path;
    em_storage *st = NULL;
    em_err err = { 0 };
    CHECK_RC(em_storage_open(&o, &st, &err), 0);
    int64_t interrupted = 0;
    if (st)
        CHECK_RC(em_storage_mark_interrupted(st, &interrupted, &err), 0);
    em_storage_close(st);
    printf("  %d kills, %zu committed rows reported, %lld rows in the ledger, %lld interrupted, "
           "%d kills before any commit\n",
           ITERATIONS, total_reports, prev_rows, (long long)interrupted, kills_before_report);
    return 0;
}

/* Kill a child while it migrates a v1 database; the file must stay intact
 * at some version, and the next open must finish the job. */
static int make_v1(const char *path)
{
    sqlite3 *db = NULL;
    int ok = sqlite3_open(path, &db) == SQLITE_OK && em_sto_migrate(db, 1, path, NULL) == 0 &&
             t_exec(db, "PRAGMA journal_mode = WAL;"
                        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n"
                        " WHERE i < 5000) INSERT INTO requests (request_id, class,"
                        " received_ms, status) SELECT 'm' || i, 'interactive', i,"
                        " 'completed' FROM n") == SQLITE_OK;
    sqlite3_close(db);
    return ok ? 0 : -1;
}

static long long now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int test_kill_migration(void)
{
    char path[512];
    int mid = 0, inside = 0;
    /* How long one migration takes here, only to spread the kills over it. */
    t_path(path, sizeof path, "mig-calibrate.db");
    REQUIRE(make_v1(path) == 0);
    em_storage_opts co;
    em_storage_opts_init(&co);
    co.path = path;
    em_storage *cst = NULL;
    long long t0 = now_us();
    REQUIRE(em_storage_open(&co, &cst, NULL) == 0);
    long long took_us = now_us() - t0, span_us = took_us * 3 / 2 + 1000;
    em_storage_close(cst);
    /* Kills land in [lo, hi) us after the fork. Opening takes longer than
     * the migration inside it, so most land before it starts: after
     * MIG_ITERS kills, go on (bounded) with the window narrowed to between
     * the latest kill before the start and the earliest after the end. */
    long long lo = 0, hi = span_us;
    unsigned iters = 0;
    for (unsigned it = 0; it < MIG_MAX && (it < MIG_ITERS || !inside); it++) {
        iters++;
        char name[32];
        snprintf(name, sizeof name, "mig%u.db", it);
        t_path(path, sizeof path, name);
        REQUIRE(make_v1(path) == 0);
        sqlite3 *db = NULL;
        fflush(NULL);
        pid_t pid = fork();
        REQUIRE(pid >= 0);
        if (pid == 0) {
            em_storage_opts o;
            em_storage_opts_init(&o);
            o.path = path;
            em_storage *st = NULL;
            int rc = em_storage_open(&o, &st, NULL);
            em_storage_close(st);
            _exit(rc ? 3 : 0);
        }
        if (lo >= hi) {   /* noisy timing crossed the bounds: start over */
            lo = 0;
            hi = span_us;
        }
        long long us = lo + (long long)(rnd() % (uint32_t)(hi - lo));
        struct timespec ts = { (time_t)(us / 1000000), (long)(us % 1000000) * 1000L };
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        int status = 0;
        REQUIRE(waitpid(pid, &status, 0) == pid);
        /* before anything opens it again: the child's WAL holds frames only
         * once a migration step has begun writing (make_v1 leaves none) */
        char wal[600];
        struct stat sb;
        snprintf(wal, sizeof wal, "%s-wal", path);
        long long wal_bytes = stat(wal, &sb) == 0 ? (long long)sb.st_size : 0;
        CHECK(t_integrity_ok(path));
        db = t_db_open(path);
        REQUIRE(db);
        long long v = t_int(db, "PRAGMA user_version");
        CHECK(v >= 1 && v <= EM_STORAGE_SCHEMA_VERSION);
        mid += v < EM_STORAGE_SCHEMA_VERSION;
        /* inside: between two steps, or in the middle of one */
        int in = v < EM_STORAGE_SCHEMA_VERSION && (v > 1 || wal_bytes > 0);
        inside += in;
        if (v == 1 && !in && us > lo)
            lo = us;   /* it had not started */
        if (v == EM_STORAGE_SCHEMA_VERSION && us < hi)
            hi = us;   /* it had finished */
        CHECK(t_int(db, "SELECT count(*) FROM requests") == 5000);
        sqlite3_close(db);
        em_storage_opts o;
        em_storage_opts_init(&o);
        o.path = path;
        em_storage *st = NULL;
        CHECK_RC(em_storage_open(&o, &st, NULL), 0);
        em_storage_close(st);
        db = t_db_open(path);
        REQUIRE(db);
        CHECK(t_int(db, "PRAGMA user_version") == EM_STORAGE_SCHEMA_VERSION);
        CHECK(t_int(db, "SELECT count(*) FROM requests") == 5000);
        sqlite3_close(db);
    }
    printf("  %d kills during a v1 -> v%d migration (%.1f ms each), %d before it finished, "
           "%d of them inside it\n", iters, EM_STORAGE_SCHEMA_VERSION, (double)took_us / 1000.0,
           mid, inside);
    /* a test whose kills all land before the migration starts, or after it
     * ends, has not tested a kill during a migration */
    CHECK(inside >= 1);
    return 0;
}

int main(void)
{
    if (t_mkdtemp("storage-crash"))
        return 1;
    const char *seed = getenv("EMBER_CRASH_SEED");
    rng_state = seed && *seed ? strtoull(seed, NULL, 0) : 0x9E3779B97F4A7C15ULL;
    if (!rng_state)
        rng_state = 1;
    printf("seed 0x%llx (set EMBER_CRASH_SEED to replay)\n", (unsigned long long)rng_state);
    struct {
        const char *name;
        int (*fn)(void);
    } tests[] = {
        { "pragmas", test_pragmas },
        { "kill_loop", test_kill_loop },
        { "kill_migration", test_kill_migration },
    };
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        int before = test_failures;
        if (tests[i].fn())
            test_failures++;
        printf("%s %s\n", test_failures == before ? "ok  " : "FAIL", tests[i].name);
        fflush(stdout);
    }
    return test_summary("storage-crash");
}
