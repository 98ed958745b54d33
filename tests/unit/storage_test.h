/* storage_test.h — helpers shared by the storage unit tests, on the common
 * harness (tests/common/testutil.h: CHECK, CHECK_RC, REQUIRE,
 * test_summary): a temporary directory that is removed afterwards, opening
 * a storage, bounded polling of the storage health, and direct SQLite
 * access to inspect a database. */
#ifndef EM_STORAGE_TEST_H
#define EM_STORAGE_TEST_H

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "storage/storage_int.h"
#include "tests/common/testutil.h"   /* CHECK, CHECK_RC, REQUIRE, test_summary */

static char t_dir[256];

static int t_rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *f)
{
    (void)sb; (void)flag; (void)f;
    return remove(p);
}

static void t_cleanup(void)
{
    if (t_dir[0])
        nftw(t_dir, t_rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    t_dir[0] = 0;
}

/* Create the temporary directory (removed at exit). */
static int t_mkdtemp(const char *tag)
{
    const char *base = getenv("TMPDIR");
    snprintf(t_dir, sizeof t_dir, "%s/ember-%s-XXXXXX", base && *base ? base : "/tmp", tag);
    if (!mkdtemp(t_dir)) {
        perror("mkdtemp");
        t_dir[0] = 0;
        return -1;
    }
    atexit(t_cleanup);
    return 0;
}

static inline void t_path(char *buf, size_t cap, const char *name)
{
    snprintf(buf, cap, "%s/%s", t_dir, name);
}

static inline void t_sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

/* Poll until the storage is (want = 1) or is not (want = 0) degraded, and,
 * when substr is given, the reason contains it. Bounded: gives up after
 * about 60 s of polling, which no healthy run comes near. */
static inline int t_wait_health(em_storage *st, int want, const char *substr)
{
    for (int i = 0; i < 12000; i++) {
        em_storage_health h;
        em_storage_health_get(st, &h);
        if (h.degraded == want && (!substr || strstr(h.reason, substr)))
            return 1;
        t_sleep_ms(5);
    }
    em_storage_health h;
    em_storage_health_get(st, &h);
    fprintf(stderr, "timed out waiting for degraded=%d (%s); now degraded=%d reason '%s'\n", want,
            substr ? substr : "", h.degraded, h.reason);
    return 0;
}

/* Open path with o_in (NULL: the defaults); NULL, said on stderr, on failure. */
static inline em_storage *t_open_at(const char *path, em_storage_opts *o_in)
{
    em_storage_opts o;
    if (o_in)
        o = *o_in;
    else
        em_storage_opts_init(&o);
    o.path = path;
    em_err err = { 0 };
    em_storage *st = NULL;
    if (em_storage_open(&o, &st, &err)) {
        fprintf(stderr, "open %s: %s\n", path, err.msg);
        return NULL;
    }
    return st;
}

static inline sqlite3 *t_db_open(const char *path)
{
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK) {
        fprintf(stderr, "open %s: %s\n", path, db ? sqlite3_errmsg(db) : "?");
        sqlite3_close(db);
        return NULL;
    }
    sqlite3_busy_timeout(db, 10000);
    return db;
}

/* The first column of the first row of sql as an integer (-1 on error). */
static inline long long t_int(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *s = NULL;
    long long v = -1;
    if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW)
        v = sqlite3_column_int64(s, 0);
    else
        fprintf(stderr, "query '%s': %s\n", sql, sqlite3_errmsg(db));
    sqlite3_finalize(s);
    return v;
}

/* The first column of the first row of sql as text into buf ("" on error). */
static inline void t_text(sqlite3 *db, const char *sql, char *buf, size_t cap)
{
    sqlite3_stmt *s = NULL;
    buf[0] = 0;
    if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW &&
        sqlite3_column_text(s, 0))
        snprintf(buf, cap, "%s", (const char *)sqlite3_column_text(s, 0));
    sqlite3_finalize(s);
}

static inline int t_exec(sqlite3 *db, const char *sql)
{
    char *msg = NULL;
    int rc = sqlite3_exec(db, sql, NULL, NULL, &msg);
    if (rc != SQLITE_OK)
        fprintf(stderr, "exec '%s': %s\n", sql, msg ? msg : sqlite3_errstr(rc));
    sqlite3_free(msg);
    return rc;
}

/* PRAGMA integrity_check of path is "ok". */
static inline int t_integrity_ok(const char *path)
{
    sqlite3 *db = t_db_open(path);
    char res[256] = "";
    if (db)
        t_text(db, "PRAGMA integrity_check", res, sizeof res);
    sqlite3_close(db);
    if (strcmp(res, "ok") != 0)
        fprintf(stderr, "%s: integrity_check: %s\n", path, res);
    return strcmp(res, "ok") == 0;
}

/* A usage record with id and a few numbers. */
static inline void t_record(em_usage_record *r, const char *id, em_usage_status status)
{
    em_usage_record_init(r);
    snprintf(r->request_id, sizeof r->request_id, "%s", id);
    snprintf(r->model, sizeof r->model, "test-model");
    snprintf(r->client_addr, sizeof r->client_addr, "192.0.2.1");
    r->received_ms = 1714557600000LL;   /* 2024-05-01T10:00:00Z */
    r->status = status;
    if (status != EM_USAGE_ADMITTED) {
        r->finished_ms = r->received_ms + 1000;
        r->prompt_tokens = 10;
        r->completion_tokens = 5;
    }
}

/* Does the file at path contain the bytes of needle? */
static inline int t_file_contains(const char *path, const char *needle)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    size_t n = strlen(needle), cap = 1 << 20, len = 0;
    char *buf = malloc(cap);
    int found = 0;
    for (;;) {
        if (len == cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb)
                break;
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        if (got == 0)
            break;
        len += got;
    }
    for (size_t i = 0; buf && i + n <= len && !found; i++)
        found = memcmp(buf + i, needle, n) == 0;
    free(buf);
    fclose(f);
    return found;
}

#endif
