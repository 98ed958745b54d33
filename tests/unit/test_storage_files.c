/* test_storage_files.c — unit tests of storage/files.c, the Batch API's
 * uploaded files: bytes round-trip exactly (binary, empty, 1 MiB) and lie
 * on disk under "<database>.files" with mode 0600 in a 0700 directory;
 * rows survive reopening; each key sees its own files only (another key's
 * id is ENOENT like a missing one, an admin scope sees all); listing by
 * purpose, in both orders, in pages with the cursor; deletion removes row
 * and bytes; bad names and ids are refused, ids that could name other paths
 * never reach the disk; bytes gone or truncated on disk are an EIO that
 * says so; an unwritable directory leaves no row; storage/batches.c's
 * start (lines stored in several transactions, in order; a batch no
 * longer validating is refused, its lines kept, or dropped when it was
 * cancelled while validating); and storage/cache.c, the response cache's
 * LRU rows; storage/responses.c, the Responses API's stored responses
 * (round trip of big texts, each key and key 0 its own scope both ways,
 * deletion, duplicate ids, refusals, the content switch). Real SQLite
 * files in a temporary directory. */
#include "tests/unit/storage_test.h"

static int test_round_trip(void)
{
    char db[512], dir[600];
    t_path(db, sizeof db, "files.db");
    snprintf(dir, sizeof dir, "%s.files", db);
    em_storage *st = t_open_at(db, NULL);
    REQUIRE(st);
    em_err err = { 0 };
    static char big[1 << 20];
    for (size_t i = 0; i < sizeof big; i++)
        big[i] = (char)(i * 131 + (i >> 9));
    em_file_info a, b, c, e;
    CHECK_RC(em_storage_file_add(st, 1, "batch.jsonl", "batch", "{\"x\":1}\n\0tail", 14, &a, &err), 0);
    usleep(2000);   /* b newer than a by the clock: the lists' order below (ids break ties at random) */
    CHECK_RC(em_storage_file_add(st, 1, "big.bin", "batch", big, sizeof big, &b, &err), 0);
    CHECK_RC(em_storage_file_add(st, 2, "other.jsonl", "batch", "", 0, &c, &err), 0);
    CHECK_RC(em_storage_file_add(st, 0, "loopback.jsonl", "batch_output", "zz", 2, &e, &err), 0);
    CHECK(strncmp(a.id, "file-", 5) == 0 && strlen(a.id) == 29 && strcmp(a.id, b.id) != 0);
    CHECK(a.bytes == 14 && b.bytes == (int64_t)sizeof big && c.bytes == 0 && a.key_id == 1 && e.key_id == 0);
    struct stat sd, sf;
    char fp[700];
    snprintf(fp, sizeof fp, "%s/%s", dir, b.id);
    CHECK(stat(dir, &sd) == 0 && (sd.st_mode & 0777) == 0700);
    CHECK(stat(fp, &sf) == 0 && (sf.st_mode & 0777) == 0600 && sf.st_size == (off_t)sizeof big);
    em_storage_close(st);

    st = t_open_at(db, NULL);   /* rows and bytes outlive the process */
    REQUIRE(st);
    char *data = NULL;
    size_t n = 0;
    CHECK_RC(em_storage_file_read(st, 1, a.id, &data, &n, &err), 0);
    CHECK(n == 14 && data && memcmp(data, "{\"x\":1}\n\0tail", 14) == 0 && data[14] == 0);
    free(data);
    CHECK_RC(em_storage_file_read(st, 1, b.id, &data, &n, &err), 0);
    CHECK(n == sizeof big && data && memcmp(data, big, n) == 0);
    free(data);
    CHECK_RC(em_storage_file_read(st, 2, c.id, &data, &n, &err), 0);
    CHECK(n == 0 && data && data[0] == 0);
    free(data);
    em_file_info g;
    CHECK_RC(em_storage_file_get(st, 1, a.id, &g, &err), 0);
    CHECK(strcmp(g.filename, "batch.jsonl") == 0 && strcmp(g.purpose, "batch") == 0 && g.created_ms == a.created_ms);

    /* scope: another key's file is missing, an admin's scope reaches it */
    CHECK_RC(em_storage_file_get(st, 2, a.id, &g, &err), EM_ENOENT);
    CHECK(strstr(err.msg, a.id) != NULL);
    CHECK_RC(em_storage_file_read(st, 0, a.id, &data, &n, &err), EM_ENOENT);
    CHECK_RC(em_storage_file_delete(st, 2, a.id, &err), EM_ENOENT);
    CHECK_RC(em_storage_file_get(st, EM_STORAGE_ANY_KEY, a.id, &g, &err), 0);
    CHECK_RC(em_storage_file_get(st, 0, e.id, &g, &err), 0);
    CHECK_RC(em_storage_file_get(st, 1, e.id, &g, &err), EM_ENOENT);

    /* lists: the key's, newest first or oldest first, by purpose, in pages */
    em_file_info *v = NULL;
    int more = 0;
    CHECK_RC(em_storage_file_list(st, 1, NULL, NULL, 0, 10, &v, &n, &more, &err), 0);
    CHECK(n == 2 && !more && strcmp(v[0].id, b.id) == 0 && strcmp(v[1].id, a.id) == 0);
    free(v);
    CHECK_RC(em_storage_file_list(st, 1, NULL, NULL, 1, 1, &v, &n, &more, &err), 0);
    CHECK(n == 1 && more && strcmp(v[0].id, a.id) == 0);
    free(v);
    CHECK_RC(em_storage_file_list(st, 1, NULL, a.id, 1, 1, &v, &n, &more, &err), 0);
    CHECK(n == 1 && !more && strcmp(v[0].id, b.id) == 0);
    free(v);
    CHECK_RC(em_storage_file_list(st, 1, NULL, b.id, 0, 5, &v, &n, &more, &err), 0);
    CHECK(n == 1 && !more && strcmp(v[0].id, a.id) == 0);
    free(v);
    CHECK_RC(em_storage_file_list(st, EM_STORAGE_ANY_KEY, "batch", NULL, 0, 10, &v, &n, &more, &err), 0);
    CHECK(n == 3 && !more);
    free(v);
    CHECK_RC(em_storage_file_list(st, 2, "batch_output", NULL, 0, 10, &v, &n, &more, &err), 0);
    CHECK(n == 0);
    free(v);
    CHECK_RC(em_storage_file_list(st, 2, NULL, a.id, 0, 10, &v, &n, &more, &err), EM_ENOENT);   /* a cursor not its own */

    /* deletion: row and bytes */
    CHECK_RC(em_storage_file_delete(st, 1, b.id, &err), 0);
    CHECK(stat(fp, &sf) != 0 && errno == ENOENT);
    CHECK_RC(em_storage_file_get(st, 1, b.id, &g, &err), EM_ENOENT);
    CHECK_RC(em_storage_file_delete(st, 1, b.id, &err), EM_ENOENT);

    /* bytes truncated or gone under a row: EIO naming the file */
    snprintf(fp, sizeof fp, "%s/%s", dir, a.id);
    CHECK(truncate(fp, 3) == 0);
    CHECK_RC(em_storage_file_read(st, 1, a.id, &data, &n, &err), EM_EIO);
    CHECK(strstr(err.msg, "3 bytes on disk, 14 recorded") != NULL && !data);
    CHECK(unlink(fp) == 0);
    CHECK_RC(em_storage_file_read(st, 1, a.id, &data, &n, &err), EM_EIO);
    CHECK(strstr(err.msg, "gone") != NULL);
    em_storage_close(st);
    return 0;
}

static int test_refusals(void)
{
    char db[512], dir[600];
    t_path(db, sizeof db, "refuse.db");
    snprintf(dir, sizeof dir, "%s.files", db);
    em_storage *st = t_open_at(db, NULL);
    REQUIRE(st);
    em_err err = { 0 };
    em_file_info f, g;
    char name[300];
    memset(name, 'n', sizeof name);
    name[256] = 0;
    CHECK_RC(em_storage_file_add(st, 1, "", "batch", "x", 1, &f, &err), EM_EINVAL);
    CHECK_RC(em_storage_file_add(st, 1, name, "batch", "x", 1, &f, &err), EM_EINVAL);
    CHECK_RC(em_storage_file_add(st, 1, "a\nb", "batch", "x", 1, &f, &err), EM_EINVAL);
    CHECK(strstr(err.msg, "filename") != NULL);
    CHECK_RC(em_storage_file_add(st, 1, "ok", "", "x", 1, &f, &err), EM_EINVAL);
    /* ids that are not ours never reach the disk */
    const char *bad[] = { "../refuse.db", "file-../../etc/passwd", "file-", "FILE-0123456789abcdef01234567",
                          "file-0123456789abcdef0123456g", "" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_RC(em_storage_file_get(st, EM_STORAGE_ANY_KEY, bad[i], &g, &err), EM_ENOENT);
        CHECK_RC(em_storage_file_delete(st, EM_STORAGE_ANY_KEY, bad[i], &err), EM_ENOENT);
    }
    /* a directory that cannot be written: an error naming it, and no row */
    if (geteuid() != 0) {   /* root writes anywhere */
        CHECK(mkdir(dir, 0500) == 0);
        CHECK_RC(em_storage_file_add(st, 1, "x.jsonl", "batch", "x", 1, &f, &err), EM_EIO);
        CHECK(strstr(err.msg, dir) != NULL);
        chmod(dir, 0700);
    } else {   /* a file where the directory should be */
        FILE *fp = fopen(dir, "w");
        CHECK(fp != NULL);
        if (fp)
            fclose(fp);
        CHECK_RC(em_storage_file_add(st, 1, "x.jsonl", "batch", "x", 1, &f, &err), EM_EIO);
        CHECK(strstr(err.msg, dir) != NULL);
        unlink(dir);
    }
    em_file_info *v = NULL;
    size_t n = 0;
    int more = 0;
    CHECK_RC(em_storage_file_list(st, EM_STORAGE_ANY_KEY, NULL, NULL, 0, 10, &v, &n, &more, &err), 0);
    CHECK(n == 0);
    free(v);
    em_storage_close(st);
    return 0;
}

/* The response cache's rows: get/put by key and model, the least recently
 * used evicted past the bound (a hit counts as a use), another model's rows
 * retained away. */
static int test_batch_start(void)
{
    char db[512];
    t_path(db, sizeof db, "batches.db");
    em_storage *st = t_open_at(db, NULL);
    REQUIRE(st);
    em_err err = { 0 };
    enum { N = 1234 };   /* more than two transactions' worth */
    static em_batch_line lines[N];
    static char bodies[N][32];
    for (int i = 0; i < N; i++) {
        lines[i].line = i;
        snprintf(lines[i].custom_id, sizeof lines[i].custom_id, "c%d", i);
        snprintf(bodies[i], sizeof bodies[i], "{\"prompt\":\"%d\"}", i);
        lines[i].body = bodies[i];
    }
    em_batch_info a, b;
    CHECK_RC(em_storage_batch_create(st, 1, "/v1/completions", "file-x", "24h", NULL, &a, &err), 0);
    CHECK(!strcmp(a.status, "validating"));
    CHECK_RC(em_storage_batch_start(st, a.id, lines, N, 3600000, &err), 0);
    em_batch_info got;
    CHECK_RC(em_storage_batch_get(st, 1, a.id, &got, &err), 0);
    CHECK(!strcmp(got.status, "in_progress") && got.total == N && got.expires_ms == a.created_ms + 3600000);
    em_batch_info_clear(&got);
    em_batch_line *p = NULL;
    size_t n = 0;
    CHECK_RC(em_storage_batch_pending(st, a.id, 498, 5, &p, &n, &err), 0);   /* across the first boundary */
    CHECK(n == 5 && p[0].line == 499 && p[4].line == 503 && !strcmp(p[1].custom_id, "c500") &&
          !strcmp(p[1].body, "{\"prompt\":\"500\"}"));
    em_batch_lines_free(p, n);
    CHECK_RC(em_storage_batch_line_done(st, a.id, 0, 1, "{\"r\":0}", &err), 0);
    /* file_find: the newest of a key's files with that name and purpose */
    em_file_info f1, f2, ff;
    CHECK_RC(em_storage_file_add(st, 1, "o.jsonl", "batch_output", "a", 1, &f1, &err), 0);
    CHECK_RC(em_storage_file_add(st, 1, "o.jsonl", "batch_output", "bb", 2, &f2, &err), 0);
    CHECK_RC(em_storage_file_find(st, 1, "o.jsonl", "batch_output", &ff, &err), 0);
    CHECK(!strcmp(ff.id, f2.id) && ff.bytes == 2);
    CHECK_RC(em_storage_file_find(st, 2, "o.jsonl", "batch_output", &ff, NULL), EM_ENOENT);
    CHECK_RC(em_storage_file_find(st, 1, "o.jsonl", "batch", &ff, NULL), EM_ENOENT);
    CHECK_RC(em_storage_file_find(st, 0, "o.jsonl", "batch_output", &ff, NULL), EM_ENOENT);
    /* started already: refused, and what it holds untouched */
    CHECK_RC(em_storage_batch_start(st, a.id, lines, N, 3600000, NULL), EM_ESTATE);
    CHECK_RC(em_storage_batch_pending(st, a.id, -1, N + 1, &p, &n, &err), 0);
    CHECK(n == N - 1 && p[0].line == 1);
    em_batch_lines_free(p, n);
    /* cancelled while it validated: refused, and no line of it is left */
    CHECK_RC(em_storage_batch_create(st, 1, "/v1/completions", "file-x", "24h", NULL, &b, &err), 0);
    CHECK_RC(em_storage_batch_set_status(st, b.id, "validating", "cancelling", NULL, NULL, NULL, &err), 0);
    CHECK_RC(em_storage_batch_start(st, b.id, lines, N, 3600000, NULL), EM_ESTATE);
    CHECK_RC(em_storage_batch_pending(st, b.id, -1, 10, &p, &n, &err), 0);
    CHECK(n == 0);
    em_batch_lines_free(p, n);
    em_batch_info_clear(&a);
    em_batch_info_clear(&b);
    em_storage_close(st);
    return 0;
}

static int test_cache(void)
{
    char db[512];
    t_path(db, sizeof db, "cache.db");
    em_storage *st = t_open_at(db, NULL);
    REQUIRE(st);
    em_err err = { 0 };
    unsigned char k[4][EM_STORAGE_CACHE_KEY];
    for (int i = 0; i < 4; i++)
        memset(k[i], 'a' + i, EM_STORAGE_CACHE_KEY);
    char body[101];
    memset(body, 'x', 100);
    body[100] = 0;
    uint64_t ev = 9;
    char *got = NULL;
    size_t n = 0;
    CHECK_RC(em_storage_cache_get(st, k[0], "m1", &got, &n, &err), EM_ENOENT);
    CHECK_RC(em_storage_cache_put(st, k[0], "m1", body, 100, 350, &ev, &err), 0);
    CHECK(ev == 0);
    usleep(2000);   /* times in ms: keep the order of use unambiguous */
    CHECK_RC(em_storage_cache_put(st, k[1], "m1", body, 100, 350, &ev, &err), 0);
    usleep(2000);
    CHECK_RC(em_storage_cache_put(st, k[2], "m1", body, 100, 350, &ev, &err), 0);
    usleep(2000);
    CHECK_RC(em_storage_cache_get(st, k[0], "m1", &got, &n, &err), 0);   /* k0 used: k1 is the oldest now */
    CHECK(n == 100 && got && memcmp(got, body, 100) == 0 && got[100] == 0);
    free(got);
    CHECK_RC(em_storage_cache_get(st, k[0], "m2", &got, &n, &err), EM_ENOENT);   /* another model's key space */
    usleep(2000);
    CHECK_RC(em_storage_cache_put(st, k[3], "m1", body, 100, 350, &ev, &err), 0);
    CHECK(ev == 1);
    CHECK_RC(em_storage_cache_get(st, k[1], "m1", &got, &n, &err), EM_ENOENT);
    CHECK_RC(em_storage_cache_get(st, k[0], "m1", &got, &n, &err), 0);
    free(got);
    int64_t rows = 0, bytes = 0;
    CHECK_RC(em_storage_cache_size(st, &rows, &bytes, &err), 0);
    CHECK(rows == 3 && bytes == 300);
    CHECK_RC(em_storage_cache_put(st, k[1], "m2", body, 50, 1 << 20, &ev, &err), 0);
    uint64_t gone = 0;
    CHECK_RC(em_storage_cache_retain(st, "m2", &gone, &err), 0);
    CHECK(gone == 3);
    CHECK_RC(em_storage_cache_size(st, &rows, &bytes, &err), 0);
    CHECK(rows == 1 && bytes == 50);
    em_storage_close(st);
    return 0;
}

/* storage/responses.c: the Responses API's stored responses, per key. */
static int test_responses(void)
{
    char db[512];
    em_err err = { 0 };
    t_path(db, sizeof db, "responses.db");
    em_storage *st = t_open_at(db, NULL);
    REQUIRE(st);
    /* a big text (bounded only by the caller), with UTF-8 in it */
    size_t big_n = (size_t)3 << 20;
    char *big = malloc(big_n + 1);
    REQUIRE(big);
    for (size_t i = 0; i < big_n; i++)
        big[i] = (char)('a' + i % 26);
    memcpy(big + 100, "\xc3\xa9\xe2\x82\xac", 5);
    big[big_n] = 0;
    const char *conv = "[{\"role\":\"user\",\"content\":\"h\\u00e9\"},{\"role\":\"assistant\",\"content\":\"hi\"}]";
    CHECK_RC(em_storage_response_put(st, "resp_A1b2C3d4E5f6G7h8", 1, 1000, conv, "\"hello\"", big, &err), 0);
    CHECK_RC(em_storage_response_put(st, "resp_key2aaaaaaaaaaaa", 2, 2000, "[]", "[{\"type\":\"message\"}]", "{}", &err), 0);
    CHECK_RC(em_storage_response_put(st, "resp_loopbackaaaaaaa", 0, 3000, "[1]", "\"\"", "{\"id\":\"x\"}", &err), 0);
    em_storage_close(st);

    st = t_open_at(db, NULL);   /* rows outlive the process */
    REQUIRE(st);
    char *c = NULL, *in = NULL, *r = NULL;
    CHECK_RC(em_storage_response_get(st, "resp_A1b2C3d4E5f6G7h8", 1, &c, &in, &r, &err), 0);
    CHECK(c && strcmp(c, conv) == 0 && in && strcmp(in, "\"hello\"") == 0 && r && strlen(r) == big_n &&
          memcmp(r, big, big_n) == 0);
    free(c);
    free(in);
    free(r);
    CHECK_RC(em_storage_response_get(st, "resp_loopbackaaaaaaa", 0, &c, &in, &r, &err), 0);
    CHECK(c && strcmp(c, "[1]") == 0 && in && strcmp(in, "\"\"") == 0 && r && strcmp(r, "{\"id\":\"x\"}") == 0);
    free(c);
    free(in);
    free(r);
    CHECK_RC(em_storage_response_get(st, "resp_key2aaaaaaaaaaaa", 2, NULL, &in, NULL, &err), 0);   /* outs optional */
    CHECK(in && strcmp(in, "[{\"type\":\"message\"}]") == 0);
    free(in);

    /* scope: another key's id is missing, the same answer as an unknown one,
     * every way round including key 0; the outs stay NULL */
    static const struct { const char *id; int64_t key; } other[] = {
        { "resp_A1b2C3d4E5f6G7h8", 2 }, { "resp_A1b2C3d4E5f6G7h8", 0 }, { "resp_key2aaaaaaaaaaaa", 1 },
        { "resp_key2aaaaaaaaaaaa", 0 }, { "resp_loopbackaaaaaaa", 1 },  { "resp_loopbackaaaaaaa", 2 },
        { "resp_nosuchaaaaaaaaa", 1 },  { "resp_nosuchaaaaaaaaa", 0 },  { "", 1 },
    };
    char unknown[sizeof err.msg];
    static char mark[] = "x";
    for (size_t i = 0; i < sizeof other / sizeof other[0]; i++) {
        c = in = r = mark;
        CHECK_RC(em_storage_response_get(st, other[i].id, other[i].key, &c, &in, &r, &err), EM_ENOENT);
        CHECK(!c && !in && !r);
        if (i == 0)
            snprintf(unknown, sizeof unknown, "%s", err.msg);
        if (i == 0 || i == 6)   /* the same words whether it is another key's or none at all */
            CHECK(strstr(err.msg, other[i].id) != NULL && strstr(err.msg, "does not exist") != NULL);
        CHECK_RC(em_storage_response_delete(st, other[i].id, other[i].key, &err), EM_ENOENT);
    }
    CHECK_RC(em_storage_response_get(st, "resp_A1b2C3d4E5f6G7h8", EM_STORAGE_ANY_KEY, &c, NULL, NULL, &err),
             EM_ENOENT);   /* no admin scope here */
    CHECK(!c);
    CHECK_RC(em_storage_response_delete(st, "resp_loopbackaaaaaaa", EM_STORAGE_ANY_KEY, &err), EM_ENOENT);
    /* ... and nothing was deleted by those tries */
    CHECK_RC(em_storage_response_get(st, "resp_A1b2C3d4E5f6G7h8", 1, NULL, NULL, NULL, &err), 0);
    CHECK_RC(em_storage_response_get(st, "resp_key2aaaaaaaaaaaa", 2, NULL, NULL, NULL, &err), 0);
    CHECK_RC(em_storage_response_get(st, "resp_loopbackaaaaaaa", 0, NULL, NULL, NULL, &err), 0);

    /* a duplicate id replaces nothing, whichever key tries */
    CHECK_RC(em_storage_response_put(st, "resp_A1b2C3d4E5f6G7h8", 1, 5000, "[]", "\"x\"", "{}", &err), EM_EINVAL);
    CHECK(strstr(err.msg, "taken") != NULL);
    CHECK_RC(em_storage_response_put(st, "resp_A1b2C3d4E5f6G7h8", 2, 5000, "[]", "\"x\"", "{}", &err), EM_EINVAL);
    CHECK_RC(em_storage_response_put(st, "resp_loopbackaaaaaaa", 0, 5000, "[]", "\"x\"", "{}", &err), EM_EINVAL);
    CHECK_RC(em_storage_response_get(st, "resp_A1b2C3d4E5f6G7h8", 1, NULL, &in, NULL, &err), 0);
    CHECK(in && strcmp(in, "\"hello\"") == 0);
    free(in);
    CHECK_RC(em_storage_response_get(st, "resp_A1b2C3d4E5f6G7h8", 2, NULL, NULL, NULL, &err), EM_ENOENT);

    /* refusals: bad ids, a negative key, a missing text */
    char longid[EM_STORAGE_RESPONSE_ID_MAX + 1];
    memset(longid, 'r', sizeof longid - 1);
    longid[sizeof longid - 1] = 0;
    CHECK_RC(em_storage_response_put(st, "", 1, 1, "[]", "\"\"", "{}", &err), EM_EINVAL);
    CHECK_RC(em_storage_response_put(st, NULL, 1, 1, "[]", "\"\"", "{}", &err), EM_EINVAL);
    CHECK_RC(em_storage_response_put(st, longid, 1, 1, "[]", "\"\"", "{}", &err), EM_EINVAL);
    CHECK_RC(em_storage_response_put(st, "resp_negkeyaaaaaaaaa", -1, 1, "[]", "\"\"", "{}", &err), EM_EINVAL);
    CHECK_RC(em_storage_response_put(st, "resp_nulltextaaaaaaa", 1, 1, NULL, "\"\"", "{}", &err), EM_EINVAL);
    CHECK_RC(em_storage_response_put(st, "resp_nulltextaaaaaaa", 1, 1, "[]", NULL, "{}", &err), EM_EINVAL);
    CHECK_RC(em_storage_response_put(st, "resp_nulltextaaaaaaa", 1, 1, "[]", "\"\"", NULL, &err), EM_EINVAL);
    CHECK_RC(em_storage_response_get(st, longid, 1, &c, NULL, NULL, &err), EM_ENOENT);
    CHECK_RC(em_storage_response_get(st, NULL, 1, &c, NULL, NULL, &err), EM_ENOENT);
    CHECK(!c);

    /* delete: the key's own, once */
    CHECK_RC(em_storage_response_delete(st, "resp_A1b2C3d4E5f6G7h8", 1, &err), 0);
    CHECK_RC(em_storage_response_get(st, "resp_A1b2C3d4E5f6G7h8", 1, &c, &in, &r, &err), EM_ENOENT);
    CHECK(strcmp(err.msg, unknown) == 0);   /* gone reads as another key's did */
    CHECK_RC(em_storage_response_delete(st, "resp_A1b2C3d4E5f6G7h8", 1, &err), EM_ENOENT);
    CHECK_RC(em_storage_response_delete(st, "resp_loopbackaaaaaaa", 0, &err), 0);
    CHECK_RC(em_storage_response_get(st, "resp_key2aaaaaaaaaaaa", 2, NULL, NULL, NULL, &err), 0);
    em_storage_close(st);
    sqlite3 *h = t_db_open(db);
    REQUIRE(h);
    CHECK(t_int(h, "SELECT count(*) FROM responses") == 1);
    CHECK(t_int(h, "SELECT count(*) FROM responses WHERE id = 'resp_key2aaaaaaaaaaaa' AND key_id = 2"
                   " AND created_ms = 2000") == 1);
    sqlite3_close(h);

    /* content switched off: nothing new is stored; what is there still reads and deletes */
    em_storage_opts o;
    em_storage_opts_init(&o);
    o.store_content = 0;
    st = t_open_at(db, &o);
    REQUIRE(st);
    CHECK_RC(em_storage_response_put(st, "resp_secretaaaaaaaaa", 1, 1, "[\"secret text\"]", "\"\"", "{}", &err),
             EM_ESTATE);
    CHECK(strstr(err.msg, "switched off") != NULL);
    CHECK_RC(em_storage_response_get(st, "resp_key2aaaaaaaaaaaa", 2, &c, NULL, NULL, &err), 0);
    free(c);
    CHECK_RC(em_storage_response_delete(st, "resp_key2aaaaaaaaaaaa", 2, &err), 0);
    em_storage_close(st);
    CHECK(!t_file_contains(db, "secret text"));
    free(big);
    return 0;
}

int main(void)
{
    if (t_mkdtemp("storage-files"))
        return 1;
    struct {
        const char *name;
        int (*fn)(void);
    } tests[] = {
        { "round_trip", test_round_trip },
        { "refusals", test_refusals },
        { "batch_start", test_batch_start },
        { "cache", test_cache },
        { "responses", test_responses },
    };
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        int before = test_failures;
        if (tests[i].fn())
            test_failures++;
        printf("%s %s\n", test_failures == before ? "ok  " : "FAIL", tests[i].name);
    }
    return test_summary("storage-files");
}
