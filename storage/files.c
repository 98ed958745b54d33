/* files.c — the Batch API's uploaded files (storage.h "files"): bytes on
 * disk in "<database>.files/<id>" (written to a temporary name, fsynced,
 * renamed, the directory fsynced, and only then the row committed, so a
 * row never names bytes that are not there), rows in the files table,
 * scoped per key like conversations. */
#include "storage/storage_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#define FILE_COLUMNS "id, coalesce(key_id, 0), filename, purpose, bytes, created_ms"

static int64_t now_ms(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

/* "<database>.files", and the path of id in it. */
static void files_dir(const em_storage *st, char *out, size_t cap)
{
    snprintf(out, cap, "%s.files", st->path);
}

static int file_path(const em_storage *st, const char *id, int tmp, char *out, size_t cap)
{
    char dir[4096];
    files_dir(st, dir, sizeof dir);
    int n = snprintf(out, cap, tmp ? "%s/.%s.tmp" : "%s/%s", dir, id);
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

int em_sto_new_id(const char *prefix, char *id, size_t cap, em_err *err)
{
    unsigned char r[12];
    if (getentropy(r, sizeof r) != 0)
        return em_err_set(err, EM_EIO, "no random bytes for an id: %s", strerror(errno));
    int k = snprintf(id, cap, "%s", prefix);
    for (size_t i = 0; i < sizeof r; i++)
        k += snprintf(id + k, cap - (size_t)k, "%02x", r[i]);
    return 0;
}

int em_sto_id_ok(const char *id, const char *prefix)
{
    size_t pl = strlen(prefix);
    if (strncmp(id, prefix, pl) != 0 || strlen(id) != pl + 24)
        return 0;
    for (const char *p = id + pl; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return 0;
    return 1;
}

void em_sto_bind_scope(sqlite3_stmt *s, int a, int64_t key_id)
{
    sqlite3_bind_int(s, a, key_id == EM_STORAGE_ANY_KEY);
    em_sto_bind_key(s, a + 1, key_id == EM_STORAGE_ANY_KEY ? 0 : key_id);
}

static int id_ok(const char *id)   /* only ids we could have made reach the disk */
{
    return em_sto_id_ok(id, "file-");
}

static int no_file(const char *id, em_err *err)
{
    return em_err_set(err, EM_ENOENT, "file %.64s does not exist", id);
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Write the bytes to their place on disk, durably. */
static int put_bytes(const em_storage *st, const char *id, const void *data, size_t n, em_err *err)
{
    char dir[4096], tmp[4200], path[4200];
    files_dir(st, dir, sizeof dir);
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return em_err_set(err, EM_EIO, "%s: cannot create the files directory: %s", dir, strerror(errno));
    if (file_path(st, id, 1, tmp, sizeof tmp) || file_path(st, id, 0, path, sizeof path))
        return em_err_set(err, EM_EIO, "%s: the path is too long", dir);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return em_err_set(err, EM_EIO, "%s: %s", tmp, strerror(errno));
    int bad = write_all(fd, data, n) || fsync(fd) != 0;
    int e = errno;
    if (close(fd) != 0 && !bad) {
        bad = 1;
        e = errno;
    }
    if (!bad && rename(tmp, path) != 0) {
        bad = 1;
        e = errno;
    }
    if (bad) {
        unlink(tmp);
        return em_err_set(err, EM_EIO, "%s: cannot write %zu bytes: %s", path, n, strerror(e));
    }
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {   /* the rename itself durable */
        fsync(dfd);
        close(dfd);
    }
    return 0;
}

static void file_row(sqlite3_stmt *s, em_file_info *f)
{
    memset(f, 0, sizeof *f);
    snprintf(f->id, sizeof f->id, "%s", (const char *)sqlite3_column_text(s, 0));
    f->key_id = sqlite3_column_int64(s, 1);
    snprintf(f->filename, sizeof f->filename, "%s", (const char *)sqlite3_column_text(s, 2));
    snprintf(f->purpose, sizeof f->purpose, "%s", (const char *)sqlite3_column_text(s, 3));
    f->bytes = sqlite3_column_int64(s, 4);
    f->created_ms = sqlite3_column_int64(s, 5);
}

int em_storage_file_add(em_storage *st, int64_t key_id, const char *filename, const char *purpose,
                        const void *data, size_t n, em_file_info *out, em_err *err)
{
    size_t fl = strlen(filename), pl = strlen(purpose);
    if (!fl || fl >= EM_STORAGE_FILENAME_MAX)
        return em_err_set(err, EM_EINVAL, "filename: a file's name must be 1 to %d bytes",
                          EM_STORAGE_FILENAME_MAX - 1);
    for (size_t i = 0; i < fl; i++)
        if ((unsigned char)filename[i] < 0x20 || filename[i] == 0x7f)
            return em_err_set(err, EM_EINVAL, "filename: a file's name may not hold control characters");
    if (!pl || pl >= sizeof out->purpose)
        return em_err_set(err, EM_EINVAL, "purpose: 1 to %zu bytes", sizeof out->purpose - 1);
    em_file_info f = { .key_id = key_id > 0 ? key_id : 0, .bytes = (int64_t)n, .created_ms = now_ms() };
    int ret;
    if ((ret = em_sto_new_id("file-", f.id, sizeof f.id, err)))
        return ret;
    snprintf(f.filename, sizeof f.filename, "%s", filename);
    snprintf(f.purpose, sizeof f.purpose, "%s", purpose);
    if ((ret = put_bytes(st, f.id, data, n, err)))
        return ret;
    int rc = SQLITE_OK;
    if ((ret = em_sto_ops_begin(st, err)))
        goto gone;
    sqlite3_stmt *s = em_sto_prep(st, EM_STMT_FILE_INSERT,
                                  "INSERT INTO files (id, key_id, filename, purpose, bytes, created_ms)"
                                  " VALUES (?1, ?2, ?3, ?4, ?5, ?6)", &ret, err);
    if (s) {
        sqlite3_bind_text(s, 1, f.id, -1, SQLITE_TRANSIENT);
        em_sto_bind_key(s, 2, f.key_id);
        sqlite3_bind_text(s, 3, f.filename, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(s, 4, f.purpose, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(s, 5, f.bytes);
        sqlite3_bind_int64(s, 6, f.created_ms);
        ret = em_sto_step_done(st, s, &rc, "recording a file", err);
    }
    em_sto_ops_end(st, rc);
gone:
    if (ret) {
        char path[4200];
        if (!file_path(st, f.id, 0, path, sizeof path))
            unlink(path);
        return ret;
    }
    if (out)
        *out = f;
    return 0;
}

/* Step s (bound) for one file row into *out and reset it: 0, -1 when there
 * is none (err not set: the caller says what was missing), or the failure
 * (*rc its SQLite code) saying what it was doing. */
static int file_one(em_storage *st, sqlite3_stmt *s, em_file_info *out, int *rc, const char *what, em_err *err)
{
    int ret = 0, r = sqlite3_step(s);
    if (r == SQLITE_ROW)
        file_row(s, out);
    else if (r == SQLITE_DONE)
        ret = -1;
    else
        ret = em_sto_fail(st->ops.db, *rc = r, st->path, what, err);
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    return ret;
}

int em_storage_file_get(em_storage *st, int64_t key_id, const char *id, em_file_info *out, em_err *err)
{
    int ret, rc = SQLITE_OK;
    if (!id_ok(id))
        return no_file(id, err);
    if ((ret = em_sto_ops_begin(st, err)))
        return ret;
    sqlite3_stmt *s = em_sto_prep(st, EM_STMT_FILE_GET,
                                  "SELECT " FILE_COLUMNS " FROM files WHERE id = ?1 AND (?2 OR key_id IS ?3)",
                                  &ret, err);
    if (s) {
        sqlite3_bind_text(s, 1, id, -1, SQLITE_TRANSIENT);
        em_sto_bind_scope(s, 2, key_id);
        if ((ret = file_one(st, s, out, &rc, "reading a file's row", err)) < 0)
            ret = no_file(id, err);
    }
    em_sto_ops_end(st, rc);
    return ret;
}

int em_storage_file_find(em_storage *st, int64_t key_id, const char *filename, const char *purpose,
                         em_file_info *out, em_err *err)
{
    int ret, rc = SQLITE_OK;
    if ((ret = em_sto_ops_begin(st, err)))
        return ret;
    sqlite3_stmt *s = em_sto_prep(st, EM_STMT_FILE_FIND,
                                  "SELECT " FILE_COLUMNS " FROM files WHERE key_id IS ?1 AND filename = ?2"
                                  " AND purpose = ?3 ORDER BY rowid DESC LIMIT 1", &ret, err);
    if (s) {
        em_sto_bind_key(s, 1, key_id);
        sqlite3_bind_text(s, 2, filename, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(s, 3, purpose, -1, SQLITE_TRANSIENT);
        if ((ret = file_one(st, s, out, &rc, "finding a file", err)) < 0)
            ret = em_err_set(err, EM_ENOENT, "no file named %s", filename);
    }
    em_sto_ops_end(st, rc);
    return ret;
}

int em_storage_file_list(em_storage *st, int64_t key_id, const char *purpose, const char *after, int order_asc,
                         size_t limit, em_file_info **out, size_t *n, int *more, em_err *err)
{
    *out = NULL;
    *n = 0;
    *more = 0;
    em_file_info cursor = { 0 };
    int ret = 0, rc = SQLITE_OK;
    if (after && (ret = em_storage_file_get(st, key_id, after, &cursor, err)))
        return ret;
    if (!(*out = malloc((limit ? limit : 1) * sizeof **out)))
        return em_err_set(err, EM_ENOMEM, "files: out of memory");
    if ((ret = em_sto_ops_begin(st, err)))
        return ret;
    /* ?5: 1 oldest first; the cursor (created_ms, id) orders ties */
    sqlite3_stmt *s = em_sto_prep(st, EM_STMT_FILE_LIST,
                                  "SELECT " FILE_COLUMNS " FROM files WHERE (?1 OR key_id IS ?2)"
                                  " AND (?3 IS NULL OR purpose = ?3)"
                                  " AND (?4 IS NULL OR (CASE WHEN ?5 THEN (created_ms, id) > (?6, ?4)"
                                  "                         ELSE (created_ms, id) < (?6, ?4) END))"
                                  " ORDER BY CASE WHEN ?5 THEN created_ms END ASC, CASE WHEN ?5 THEN id END ASC,"
                                  " created_ms DESC, id DESC LIMIT ?7",
                                  &ret, err);
    if (s) {
        em_sto_bind_scope(s, 1, key_id);
        if (purpose)
            sqlite3_bind_text(s, 3, purpose, -1, SQLITE_TRANSIENT);
        if (after) {
            sqlite3_bind_text(s, 4, cursor.id, -1, SQLITE_TRANSIENT);
            sqlite3_bind_int64(s, 6, cursor.created_ms);
        }
        sqlite3_bind_int(s, 5, order_asc != 0);
        sqlite3_bind_int64(s, 7, (int64_t)limit + 1);
        int r;
        while ((r = sqlite3_step(s)) == SQLITE_ROW) {
            if (*n == limit) {
                *more = 1;
                continue;
            }
            file_row(s, &(*out)[(*n)++]);
        }
        if (r != SQLITE_DONE)
            ret = em_sto_fail(st->ops.db, rc = r, st->path, "listing files", err);
        sqlite3_reset(s);
        sqlite3_clear_bindings(s);
    }
    em_sto_ops_end(st, rc);
    if (ret) {
        free(*out);
        *out = NULL;
        *n = 0;
    }
    return ret;
}

int em_storage_file_read(em_storage *st, int64_t key_id, const char *id, char **data, size_t *n, em_err *err)
{
    *data = NULL;
    *n = 0;
    em_file_info f;
    int ret = em_storage_file_get(st, key_id, id, &f, err);
    if (ret)
        return ret;
    char path[4200];
    if (file_path(st, f.id, 0, path, sizeof path))
        return em_err_set(err, EM_EIO, "files: the path is too long");
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return em_err_set(err, EM_EIO, "%s: the bytes of %s are gone: %s", path, f.id, strerror(errno));
    char *buf = malloc((size_t)f.bytes + 1);
    size_t got = buf ? fread(buf, 1, (size_t)f.bytes + 1, fp) : 0;
    fclose(fp);
    if (!buf)
        return em_err_set(err, EM_ENOMEM, "files: out of memory for %lld bytes", (long long)f.bytes);
    if (got != (size_t)f.bytes) {
        free(buf);
        return em_err_set(err, EM_EIO, "%s: %zu bytes on disk, %lld recorded", path, got, (long long)f.bytes);
    }
    buf[got] = 0;
    *data = buf;
    *n = got;
    return 0;
}

int em_storage_file_delete(em_storage *st, int64_t key_id, const char *id, em_err *err)
{
    int ret, rc = SQLITE_OK;
    if (!id_ok(id))
        return no_file(id, err);
    if ((ret = em_sto_ops_begin(st, err)))
        return ret;
    sqlite3_stmt *s = em_sto_prep(st, EM_STMT_FILE_DELETE, "DELETE FROM files WHERE id = ?1 AND (?2 OR key_id IS ?3)",
                                  &ret, err);
    if (s) {
        sqlite3_bind_text(s, 1, id, -1, SQLITE_TRANSIENT);
        em_sto_bind_scope(s, 2, key_id);
        if (!(ret = em_sto_step_done(st, s, &rc, "deleting a file", err)) && sqlite3_changes(st->ops.db) != 1)
            ret = no_file(id, err);
    }
    em_sto_ops_end(st, rc);
    char path[4200];
    if (!ret && !file_path(st, id, 0, path, sizeof path))
        unlink(path);   /* the row is gone: bytes that stay behind are unreachable */
    return ret;
}
