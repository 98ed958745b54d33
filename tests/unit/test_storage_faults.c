/* test_storage_faults.c — degraded mode of the ledger writer. For each fault
 * (full disk via max_page_count, a locked database, a read-only file, a file
 * corrupted under a running ember) the storage keeps accepting records,
 * reports degraded with a reason, counts what it drops, and recovers by
 * itself once the fault is cleared, losing none of the records it accepted.
 * Waits poll the health with a bound; nothing depends on timing. */
#include <grp.h>

#include "tests/unit/storage_test.h"

static em_storage *open_fast(const char *path, int64_t max_pages, int queue_cap)
{
    em_storage_opts o;
    em_storage_opts_init(&o);
    o.path = path;
    o.retry_ms = 10;
    o.busy_ms = 20;
    o.batch_ms = 5;
    o.batch_rows = 32;
    o.queue_cap = queue_cap;
    o.max_pages = max_pages;
    em_err err = { 0 };
    em_storage *st = NULL;
    if (em_storage_open(&o, &st, &err))
        fprintf(stderr, "open %s: %s\n", path, err.msg);
    return st;
}

static int submit_n(em_storage *st, int *seq, int n, int *accepted, int *busy)
{
    for (int i = 0; i < n; i++) {
        em_usage_record r;
        char id[32];
        snprintf(id, sizeof id, "f%d", (*seq)++);
        t_record(&r, id, EM_USAGE_COMPLETED);
        int rc = em_storage_submit(st, &r);
        if (rc == 0)
            (*accepted)++;
        else if (rc == EM_EBUSY)
            (*busy)++;
        else
            return rc;
    }
    return 0;
}

static long long count_rows(const char *path)
{
    sqlite3 *db = t_db_open(path);
    long long n = db ? t_int(db, "SELECT count(*) FROM requests") : -1;
    sqlite3_close(db);
    return n;
}

static int test_full_disk(void)
{
    char path[512];
    t_path(path, sizeof path, "full.db");
    em_storage *st = open_fast(path, 40, 64);
    REQUIRE(st);
    int seq = 0, accepted = 0, busy = 0, full = 0;
    em_err err = { 0 };
    for (int chunk = 0; chunk < 500 && !full; chunk++) {
        CHECK_RC(submit_n(st, &seq, 32, &accepted, &busy), 0);
        full = em_storage_flush(st, -1, &err) == EM_EIO;
    }
    REQUIRE(full);
    fprintf(stderr, "  (expected) %s\n", err.msg);
    CHECK(strstr(err.msg, "full") != NULL);
    em_storage_health h;
    em_storage_health_get(st, &h);
    CHECK(h.degraded && strstr(h.reason, "full") && h.since_ms > 0);

    /* Degraded: still accepting, until the queue is full; then dropping. */
    CHECK_RC(submit_n(st, &seq, 200, &accepted, &busy), 0);
    CHECK(busy > 0);
    em_storage_counters c;
    em_storage_counters_get(st, &c);
    CHECK(c.degraded && c.rows_dropped == (uint64_t)busy && c.write_errors > 0);
    CHECK(c.queue_depth > 0 && c.last_error[0]);

    /* Clear the fault: make room. */
    sqlite3 *db = t_db_open(path);
    REQUIRE(db);
    CHECK(t_exec(db, "DELETE FROM requests") == SQLITE_OK);
    long long deleted = sqlite3_changes(db);
    sqlite3_close(db);
    CHECK(t_wait_health(st, 0, NULL));
    CHECK_RC(em_storage_flush(st, -1, &err), 0);
    long long left = count_rows(path);
    /* Every accepted record is in the file or was deleted by us. */
    CHECK(left == accepted - deleted);
    em_storage_counters_get(st, &c);
    CHECK(c.rows_written == (uint64_t)(deleted + left));
    CHECK(c.rows_dropped == (uint64_t)busy);
    fprintf(stderr, "  full disk: %d accepted, %d dropped, %lld deleted to make room\n", accepted,
            busy, deleted);
    em_storage_close(st);
    CHECK(t_integrity_ok(path));
    return 0;
}

static int test_locked(void)
{
    char path[512];
    t_path(path, sizeof path, "locked.db");
    em_storage *st = open_fast(path, 0, 4096);
    REQUIRE(st);
    int seq = 0, accepted = 0, busy = 0;
    em_err err = { 0 };
    CHECK_RC(submit_n(st, &seq, 5, &accepted, &busy), 0);
    CHECK_RC(em_storage_flush(st, -1, &err), 0);

    sqlite3 *db = t_db_open(path);
    REQUIRE(db);
    REQUIRE(t_exec(db, "BEGIN IMMEDIATE") == SQLITE_OK);   /* another writer holds the lock */
    CHECK_RC(submit_n(st, &seq, 5, &accepted, &busy), 0);
    CHECK_RC(em_storage_flush(st, -1, &err), EM_EIO);
    CHECK(strstr(err.msg, "locked") != NULL);
    CHECK(t_wait_health(st, 1, "locked"));
    CHECK_RC(submit_n(st, &seq, 5, &accepted, &busy), 0);
    em_storage_counters c;
    em_storage_counters_get(st, &c);
    CHECK(c.queue_depth == 10);
    CHECK(t_exec(db, "COMMIT") == SQLITE_OK);

    CHECK(t_wait_health(st, 0, NULL));
    CHECK_RC(em_storage_flush(st, -1, &err), 0);
    CHECK(count_rows(path) == 15);
    CHECK(busy == 0);

    /* Closing while locked: one last attempt, then the rest is dropped;
     * close returns. */
    REQUIRE(t_exec(db, "BEGIN IMMEDIATE") == SQLITE_OK);
    CHECK_RC(submit_n(st, &seq, 3, &accepted, &busy), 0);
    em_storage_close(st);
    CHECK(t_exec(db, "COMMIT") == SQLITE_OK);
    sqlite3_close(db);
    CHECK(count_rows(path) == 15);
    CHECK(t_integrity_ok(path));
    return 0;
}

/* Runs in a child process, as an unprivileged user when the test runs as
 * root (root may write a 0444 file). Returns the number of failures. */
static int readonly_child(const char *dir)
{
    char path[512];
    snprintf(path, sizeof path, "%s/ro.db", dir);
    int seq = 0, accepted = 0, busy = 0;
    em_err err = { 0 };
    char key[EM_STORAGE_KEY_MAX], key2[EM_STORAGE_KEY_MAX];
    em_storage *st = open_fast(path, 0, 4096);
    REQUIRE(st);
    REQUIRE(em_storage_key_add(st, "k", EM_USAGE_INTERACTIVE, 0, key, sizeof key, NULL, &err) == 0);
    CHECK_RC(submit_n(st, &seq, 3, &accepted, &busy), 0);
    CHECK_RC(em_storage_flush(st, -1, &err), 0);
    em_storage_close(st);

    REQUIRE(chmod(path, 0444) == 0);
    st = open_fast(path, 0, 4096);   /* opens, degraded */
    REQUIRE(st);
    em_storage_health h;
    em_storage_health_get(st, &h);
    CHECK(h.degraded && strstr(h.reason, "read-only"));
    fprintf(stderr, "  (expected) %s\n", h.reason);
    CHECK_RC(submit_n(st, &seq, 3, &accepted, &busy), 0);
    CHECK_RC(em_storage_flush(st, -1, &err), EM_EIO);
    CHECK_RC(em_storage_key_add(st, "k2", EM_USAGE_INTERACTIVE, 0, key2, sizeof key2, NULL, &err),
             EM_EIO);
    em_key_info info;
    CHECK_RC(em_storage_key_verify(st, key, &info, &err), 0);   /* reads still work */

    /* SQLite made the -wal and -shm it needed with the file's mode: an admin
     * fixes all of them (chmod ember.db*). */
    REQUIRE(chmod(path, 0644) == 0);
    static const char *const side[] = { "-wal", "-shm" };
    for (int i = 0; i < 2; i++) {
        char p2[600];
        snprintf(p2, sizeof p2, "%s%s", path, side[i]);
        CHECK(chmod(p2, 0644) == 0 || errno == ENOENT);
    }
    CHECK(t_wait_health(st, 0, NULL));
    CHECK_RC(em_storage_flush(st, -1, &err), 0);
    CHECK(count_rows(path) == 6);
    CHECK_RC(em_storage_key_add(st, "k2", EM_USAGE_INTERACTIVE, 0, key2, sizeof key2, NULL, &err),
             0);
    em_storage_close(st);
    CHECK(t_integrity_ok(path));
    return test_failures;
}

static int readonly_skipped;   /* the whole test then reports SKIP, not a pass */

static int test_readonly(void)
{
    char dir[512];
    t_path(dir, sizeof dir, "ro");
    REQUIRE(mkdir(dir, 0755) == 0);
    int as_root = geteuid() == 0;
    if (as_root) {
        /* Let an unprivileged uid reach and own the directory. */
        REQUIRE(chmod(t_dir, 0711) == 0);
        REQUIRE(chown(dir, 65534, 65534) == 0);
    }
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        if (as_root && (setgroups(0, NULL) != 0 || setgid(65534) != 0 || setuid(65534) != 0))
            _exit(77);
        int fails = readonly_child(dir);
        fflush(NULL);
        _exit(fails ? 1 : 0);
    }
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 77) {
        /* root ignores file modes: the case cannot be made here */
        fprintf(stderr, "  read-only: cannot drop root privileges here: not run\n");
        readonly_skipped = 1;
        return 0;
    }
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    return 0;
}

/* Overwrite (or restore) the file from a child process: closing a
 * descriptor of a file in this process would drop SQLite's POSIX locks. */
static int write_file_in_child(const char *path, const unsigned char *data, size_t len,
                               off_t from)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int fd = open(path, O_WRONLY);
        int ok = fd >= 0;
        for (off_t off = from; ok && off < (off_t)len; off += 4096) {
            size_t n = len - (size_t)off < 4096 ? len - (size_t)off : 4096;
            ok = pwrite(fd, data + off, n, off) == (ssize_t)n;
        }
        ok = ok && fsync(fd) == 0;
        _exit(ok ? 0 : 1);
    }
    int status = 0;
    if (waitpid(pid, &status, 0) != pid)
        return -1;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

static unsigned char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = n > 0 ? malloc((size_t)n) : NULL;
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *len = buf ? (size_t)n : 0;
    return buf;
}

static int test_corrupt_while_running(void)
{
    char path[512];
    t_path(path, sizeof path, "runtime.db");
    em_storage *st = open_fast(path, 0, 4096);
    REQUIRE(st);
    int seq = 0, accepted = 0, busy = 0;
    em_err err = { 0 };
    CHECK_RC(submit_n(st, &seq, 20, &accepted, &busy), 0);
    CHECK_RC(em_storage_flush(st, -1, &err), 0);

    /* Everything into the main file, then keep a good copy. */
    sqlite3 *db = t_db_open(path);
    REQUIRE(db);
    CHECK(t_int(db, "PRAGMA wal_checkpoint(TRUNCATE)") == 0);
    size_t len = 0;
    unsigned char *good = read_all(path, &len);
    REQUIRE(good && len > 4096);
    unsigned char *bad = malloc(len);
    REQUIRE(bad);
    memcpy(bad, good, 4096);
    memset(bad + 4096, 0xA5, len - 4096);   /* every page after the first */

    /* Park the writer (locked), so that it reads the file afresh next time. */
    REQUIRE(t_exec(db, "BEGIN IMMEDIATE") == SQLITE_OK);
    CHECK_RC(submit_n(st, &seq, 1, &accepted, &busy), 0);
    CHECK(t_wait_health(st, 1, "locked"));
    CHECK(write_file_in_child(path, bad, len, 4096) == 0);
    CHECK(t_exec(db, "ROLLBACK") == SQLITE_OK);
    sqlite3_close(db);

    CHECK(t_wait_health(st, 1, "the file is corrupt"));
    em_storage_health h;
    em_storage_health_get(st, &h);
    fprintf(stderr, "  (expected) %s\n", h.reason);
    CHECK(strstr(h.reason, path) != NULL);
    CHECK_RC(submit_n(st, &seq, 5, &accepted, &busy), 0);
    CHECK_RC(em_storage_flush(st, -1, &err), EM_EIO);

    /* The file is repaired (restored from the copy): back to ok, nothing lost. */
    CHECK(write_file_in_child(path, good, len, 0) == 0);
    CHECK(t_wait_health(st, 0, NULL));
    CHECK_RC(em_storage_flush(st, -1, &err), 0);
    CHECK(count_rows(path) == 26);
    CHECK(busy == 0);
    em_storage_close(st);
    CHECK(t_integrity_ok(path));
    free(good);
    free(bad);
    return 0;
}

int main(void)
{
    if (t_mkdtemp("storage-faults"))
        return 1;
    struct {
        const char *name;
        int (*fn)(void);
    } tests[] = {
        { "full_disk", test_full_disk },
        { "locked", test_locked },
        { "readonly", test_readonly },
        { "corrupt_while_running", test_corrupt_while_running },
    };
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        int before = test_failures;
        if (tests[i].fn())
            test_failures++;
        printf("%s %s\n", test_failures == before ? "ok  " : "FAIL", tests[i].name);
        fflush(stdout);
    }
    if (!test_failures && readonly_skipped) {
        printf("SKIP: the read-only case could not run (root without setuid); the rest passed\n");
        return 77;
    }
    return test_summary("storage-faults");
}
