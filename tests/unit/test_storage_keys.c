/* test_storage_keys.c — unit tests of storage/key_transfer.c, API keys moved
 * between boxes: a round trip between two databases (every field, revoked
 * keys, ids left behind), a key made on box A verifying on box B, imports
 * that are idempotent, update a key in place and never un-revoke one, name
 * and prefix clashes refused naming both keys, and hostile documents (not
 * JSON, wrong types, bad hashes and prefixes, unknown fields, another
 * version, duplicates, too big, too many) refused with nothing imported.
 * Real SQLite files in a temporary directory. */
#include <jansson.h>

#include "tests/unit/storage_test.h"

/* Every key of st as one comparable line each (ids left out). */
static char *key_lines(em_storage *st)
{
    em_key_info *v = NULL;
    size_t n = 0;
    if (em_storage_key_list(st, &v, &n, NULL))
        return NULL;
    size_t cap = 256 * (n + 1), off = 0;
    char *out = malloc(cap);
    if (out) {
        out[0] = 0;
        for (size_t i = 0; i < n; i++)
            off += (size_t)snprintf(out + off, cap - off, "%s %s %d %d %d %lld %lld\n", v[i].name, v[i].prefix,
                                    (int)v[i].default_class, v[i].rate_limit_per_min, v[i].admin,
                                    (long long)v[i].created_ms, (long long)v[i].revoked_ms);
    }
    free(v);
    return out;
}

static int import_str(em_storage *st, const char *doc, em_keys_import_stats *s, em_err *err)
{
    return em_storage_keys_import(st, doc, strlen(doc), s, err);
}

static int64_t n_keys(em_storage *st)
{
    em_key_info *v = NULL;
    size_t n = 0;
    if (em_storage_key_list(st, &v, &n, NULL))
        return -1;
    free(v);
    return (int64_t)n;
}

/* One valid key object with field f replaced by the raw JSON value v (f NULL: none). */
static void doc_with(char *buf, size_t cap, const char *f, const char *v)
{
    const char *fields[][2] = {
        { "name", "\"eve\"" },
        { "prefix", "\"em_abcdef\"" },
        { "hash", "\"00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\"" },
        { "class", "\"interactive\"" },
        { "rate_limit_per_min", "0" },
        { "admin", "false" },
        { "created_ms", "1000" },
        { "revoked_ms", "null" },
        { "response_cache", "true" },
    };
    size_t off = (size_t)snprintf(buf, cap, "{\"format\": \"ember.keys\", \"version\": 1, \"keys\": [{");
    int first = 1;
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        const char *val = fields[i][1];
        if (f && !strcmp(f, fields[i][0])) {
            if (!v)
                continue;   /* the field left out */
            val = v;
        }
        off += (size_t)snprintf(buf + off, cap - off, "%s\"%s\": %s", first ? "" : ", ", fields[i][0], val);
        first = 0;
    }
    if (f && !v && !strcmp(f, "extra"))
        off += (size_t)snprintf(buf + off, cap - off, ", \"extra\": 1");
    snprintf(buf + off, cap - off, "}]}");
}

/* Two fresh databases, boxes A and B: tag-a.db and tag-b.db (pb gets B's path). */
static int open_pair(const char *tag, em_storage **a, em_storage **b, char *pb, size_t cap)
{
    char pa[512], na[64], nb[64];
    snprintf(na, sizeof na, "%s-a.db", tag);
    snprintf(nb, sizeof nb, "%s-b.db", tag);
    t_path(pa, sizeof pa, na);
    t_path(pb, cap, nb);
    *a = t_open_at(pa, NULL);
    *b = t_open_at(pb, NULL);
    return *a && *b ? 0 : -1;
}

static int test_round_trip(void)
{
    char pb[512];
    em_storage *a, *b;
    REQUIRE(open_pair("trip", &a, &b, pb, sizeof pb) == 0);
    em_err err = { 0 };
    char ka[EM_STORAGE_KEY_MAX], kb[EM_STORAGE_KEY_MAX], kr[EM_STORAGE_KEY_MAX], kl[EM_STORAGE_KEY_MAX];
    em_key_info ia, ir, got;
    CHECK_RC(em_storage_key_add(a, "alice", EM_USAGE_BACKGROUND, 30, ka, sizeof ka, &ia, &err), 0);
    CHECK_RC(em_storage_key_add_admin(a, "root", EM_USAGE_INTERACTIVE, 0, kb, sizeof kb, NULL, &err), 0);
    CHECK_RC(em_storage_key_add(a, "gone", EM_USAGE_INTERACTIVE, 5, kr, sizeof kr, &ir, &err), 0);
    CHECK_RC(em_storage_key_revoke(a, ir.id, &err), 0);
    /* alice is kept out of the response cache; key_get reads it back */
    CHECK(ia.response_cache == 1);
    CHECK_RC(em_storage_key_set_cache(a, ia.id, 0, &err), 0);
    CHECK_RC(em_storage_key_get(a, ia.id, &got, &err), 0);
    CHECK(got.response_cache == 0 && !strcmp(got.name, "alice") && got.rate_limit_per_min == 30);
    CHECK_RC(em_storage_key_set_cache(a, 999, 1, NULL), EM_ENOENT);
    CHECK_RC(em_storage_key_get(a, 999, &got, NULL), EM_ENOENT);
    /* B has a key of its own first: ids on B differ from A's. */
    CHECK_RC(em_storage_key_add(b, "local", EM_USAGE_INTERACTIVE, 0, kl, sizeof kl, NULL, &err), 0);

    char *doc = NULL;
    CHECK_RC(em_storage_keys_export(a, &doc, &err), 0);
    REQUIRE(doc);
    /* Hashes only: no key in the document; the hash is hex. */
    CHECK(strstr(doc, ka + 3) == NULL && strstr(doc, kb + 3) == NULL && strstr(doc, kr + 3) == NULL);
    json_t *j = json_loads(doc, 0, NULL);
    REQUIRE(j);
    CHECK(!strcmp(json_string_value(json_object_get(j, "format")), "ember.keys"));
    CHECK(json_integer_value(json_object_get(j, "version")) == 1);
    json_t *k0 = json_array_get(json_object_get(j, "keys"), 0);
    CHECK(json_array_size(json_object_get(j, "keys")) == 3);
    CHECK(json_object_size(k0) == 9 && !json_object_get(k0, "id"));
    CHECK(json_is_false(json_object_get(k0, "response_cache")));
    CHECK(strlen(json_string_value(json_object_get(k0, "hash"))) == 64);
    CHECK(json_is_null(json_object_get(k0, "revoked_ms")));
    CHECK(json_integer_value(json_object_get(json_array_get(json_object_get(j, "keys"), 2), "revoked_ms")) > 0);
    json_decref(j);

    em_keys_import_stats s;
    CHECK_RC(import_str(b, doc, &s, &err), 0);
    CHECK(s.added == 3 && s.updated == 0 && s.unchanged == 0);
    CHECK(n_keys(b) == 4);
    /* A's keys authenticate on B, as the same keys, under B's ids. */
    CHECK_RC(em_storage_key_verify(b, ka, &got, &err), 0);
    CHECK(!strcmp(got.name, "alice") && got.default_class == EM_USAGE_BACKGROUND && got.rate_limit_per_min == 30 &&
          got.created_ms == ia.created_ms && got.id != ia.id && !got.admin && !got.response_cache);
    CHECK_RC(em_storage_key_verify(b, kb, &got, &err), 0);
    CHECK(got.admin == 1 && !strcmp(got.name, "root") && got.response_cache);
    CHECK_RC(em_storage_key_verify(b, kr, &got, NULL), EM_ESTATE);   /* revoked there, revoked here */
    CHECK_RC(em_storage_key_verify(b, kl, &got, NULL), 0);           /* B's own key is untouched */
    /* B's export, less its own key, is A's. */
    char *la = key_lines(a), *lb = key_lines(b);
    REQUIRE(la && lb);
    CHECK(strstr(lb, la) != NULL);
    free(la);
    free(lb);

    /* Idempotent: the same document again changes nothing. */
    CHECK_RC(import_str(b, doc, &s, &err), 0);
    CHECK(s.added == 0 && s.updated == 0 && s.unchanged == 3);
    CHECK(n_keys(b) == 4);

    /* Back from B to A: A's keys unchanged, B's own added. */
    char *doc_b = NULL;
    CHECK_RC(em_storage_keys_export(b, &doc_b, &err), 0);
    REQUIRE(doc_b);
    CHECK_RC(import_str(a, doc_b, &s, &err), 0);
    CHECK(s.added == 1 && s.unchanged == 3);
    CHECK_RC(em_storage_key_verify(a, kl, &got, &err), 0);
    free(doc_b);

    /* Revoke alice on B, then import A's older document: she stays revoked. */
    CHECK_RC(em_storage_key_verify(b, ka, &got, &err), 0);
    CHECK_RC(em_storage_key_revoke(b, got.id, &err), 0);
    CHECK_RC(import_str(b, doc, &s, &err), 0);
    CHECK(s.unchanged == 3);
    CHECK_RC(em_storage_key_verify(b, ka, &got, NULL), EM_ESTATE);
    free(doc);

    /* A changed key (class, rate, admin, name) updates B's row in place. */
    CHECK_RC(em_storage_keys_export(a, &doc, &err), 0);
    REQUIRE(doc);
    json_t *d = json_loads(doc, 0, NULL);
    REQUIRE(d);
    json_t *root = json_array_get(json_object_get(d, "keys"), 1);
    json_object_set_new(root, "name", json_string("root2"));
    json_object_set_new(root, "rate_limit_per_min", json_integer(9));
    json_object_set_new(root, "admin", json_false());
    json_object_del(root, "response_cache");   /* a document from before the field: the cache on */
    json_object_set_new(json_array_get(json_object_get(d, "keys"), 0), "response_cache", json_true());
    char *doc2 = json_dumps(d, 0);
    REQUIRE(doc2);
    em_key_info before;
    CHECK_RC(em_storage_key_verify(b, kb, &before, &err), 0);
    CHECK_RC(import_str(b, doc2, &s, &err), 0);
    CHECK(s.updated == 2 && s.added == 0);   /* root, and alice (the cache on again; revoked stays) */
    CHECK_RC(em_storage_key_verify(b, kb, &got, &err), 0);
    CHECK(got.id == before.id && !strcmp(got.name, "root2") && got.rate_limit_per_min == 9 && !got.admin &&
          got.response_cache);
    em_key_info *all = NULL;
    size_t n_all = 0, on = 0;
    CHECK_RC(em_storage_key_list(b, &all, &n_all, &err), 0);
    for (size_t i = 0; i < n_all; i++)
        on += !strcmp(all[i].name, "alice") && all[i].revoked_ms && all[i].response_cache;
    CHECK(on == 1);
    free(all);
    free(doc2);
    json_decref(d);
    free(doc);

    em_storage_close(a);
    em_storage_close(b);
    return 0;
}

static int test_clashes(void)
{
    char pb[512];
    em_storage *a, *b;
    REQUIRE(open_pair("clash", &a, &b, pb, sizeof pb) == 0);
    em_err err = { 0 };
    char k1[EM_STORAGE_KEY_MAX], k2[EM_STORAGE_KEY_MAX], k3[EM_STORAGE_KEY_MAX];
    CHECK_RC(em_storage_key_add(a, "new", EM_USAGE_INTERACTIVE, 0, k1, sizeof k1, NULL, &err), 0);
    CHECK_RC(em_storage_key_add(a, "alice", EM_USAGE_INTERACTIVE, 0, k2, sizeof k2, NULL, &err), 0);
    CHECK_RC(em_storage_key_add(b, "alice", EM_USAGE_INTERACTIVE, 0, k3, sizeof k3, NULL, &err), 0);
    char *doc = NULL;
    CHECK_RC(em_storage_keys_export(a, &doc, &err), 0);
    REQUIRE(doc);
    em_keys_import_stats s = { 7, 7, 7 };
    memset(&err, 0, sizeof err);
    CHECK_RC(import_str(b, doc, &s, &err), EM_EINVAL);
    CHECK(strstr(err.msg, "keys[1] \"alice\"") && strstr(err.msg, "its name alice is taken") &&
          strstr(err.msg, pb) && strstr(err.msg, "1 \"alice\""));
    CHECK(s.added == 0 && s.updated == 0 && s.unchanged == 0);
    CHECK(n_keys(b) == 1);   /* "new" (keys[0]) was not imported either: one transaction */
    CHECK_RC(em_storage_key_verify(b, k1, NULL, NULL), EM_ENOENT);

    /* A prefix held by a different key. */
    json_t *d = json_loads(doc, 0, NULL);
    REQUIRE(d);
    char pre[EM_STORAGE_PREFIX_LEN + 1];
    memcpy(pre, k3, EM_STORAGE_PREFIX_LEN);
    pre[EM_STORAGE_PREFIX_LEN] = 0;
    json_t *k = json_array_get(json_object_get(d, "keys"), 1);
    json_object_set_new(k, "name", json_string("alice2"));
    json_object_set_new(k, "prefix", json_string(pre));
    char *doc2 = json_dumps(d, 0);
    REQUIRE(doc2);
    memset(&err, 0, sizeof err);
    CHECK_RC(import_str(b, doc2, &s, &err), EM_EINVAL);
    CHECK(strstr(err.msg, "its prefix") && strstr(err.msg, pre));
    CHECK(n_keys(b) == 1);
    free(doc2);
    /* A name clash resolved in the same document: B's alice is in it too
     * (renamed): allowed, and B ends up with A's names. */
    char *docb = NULL;
    CHECK_RC(em_storage_keys_export(b, &docb, &err), 0);
    REQUIRE(docb);
    json_t *db = json_loads(docb, 0, NULL);
    REQUIRE(db);
    json_object_set_new(json_array_get(json_object_get(db, "keys"), 0), "name", json_string("alice-b"));
    json_t *da = json_loads(doc, 0, NULL);
    REQUIRE(da);
    json_array_append(json_object_get(db, "keys"), json_array_get(json_object_get(da, "keys"), 1));
    json_decref(da);
    char *doc3 = json_dumps(db, 0);
    REQUIRE(doc3);
    CHECK_RC(import_str(b, doc3, &s, &err), 0);
    CHECK(s.updated == 1 && s.added == 1);
    em_key_info got;
    CHECK_RC(em_storage_key_verify(b, k3, &got, &err), 0);
    CHECK(!strcmp(got.name, "alice-b"));
    CHECK_RC(em_storage_key_verify(b, k2, &got, &err), 0);
    CHECK(!strcmp(got.name, "alice"));
    free(doc3);
    json_decref(db);
    free(docb);
    json_decref(d);
    free(doc);
    em_storage_close(a);
    em_storage_close(b);
    return 0;
}

static int test_hostile(void)
{
    char p[512];
    t_path(p, sizeof p, "hostile.db");
    em_storage *st = t_open_at(p, NULL);
    REQUIRE(st);
    em_err err = { 0 };
    char buf[2048];
    doc_with(buf, sizeof buf, NULL, NULL);
    /* The valid document imports (into another file, to keep this one empty). */
    char p2[512];
    t_path(p2, sizeof p2, "hostile-ok.db");
    em_storage *ok = t_open_at(p2, NULL);
    REQUIRE(ok);
    CHECK_RC(import_str(ok, buf, NULL, &err), 0);
    CHECK(n_keys(ok) == 1);
    em_storage_close(ok);

    struct {
        const char *field, *value, *msg;
        int code;
    } bad[] = {
        { "name", "\"\"", "keys[0].name", EM_EINVAL },
        { "name", "\"tab\\there\"", "keys[0].name", EM_EINVAL },
        { "name", "7", "keys[0].name: not a string", EM_EINVAL },
        { "name", "\"0123456789012345678901234567890123456789012345678901234567890123\"", "keys[0].name",
          EM_EINVAL },
        { "name", NULL, "keys[0]: no \"name\"", EM_EINVAL },
        { "prefix", "\"xx_abcdef\"", "keys[0].prefix", EM_EINVAL },
        { "prefix", "\"em_abc\"", "keys[0].prefix", EM_EINVAL },
        { "prefix", "\"em_abc%ef\"", "keys[0].prefix", EM_EINVAL },
        { "hash", "\"00112233\"", "keys[0].hash", EM_EINVAL },
        { "hash", "\"00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff00\"", "keys[0].hash",
          EM_EINVAL },
        { "hash", "\"zz112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\"", "keys[0].hash",
          EM_EINVAL },
        { "hash", "[1,2]", "keys[0].hash: not a string", EM_EINVAL },
        { "class", "\"urgent\"", "keys[0].class", EM_EINVAL },
        { "rate_limit_per_min", "-1", "keys[0].rate_limit_per_min", EM_EINVAL },
        { "rate_limit_per_min", "1.5", "keys[0].rate_limit_per_min", EM_EINVAL },
        { "rate_limit_per_min", "\"5\"", "keys[0].rate_limit_per_min", EM_EINVAL },
        { "rate_limit_per_min", "99999999999", "keys[0].rate_limit_per_min", EM_EINVAL },
        { "admin", "1", "keys[0].admin", EM_EINVAL },
        { "response_cache", "\"off\"", "keys[0].response_cache", EM_EINVAL },
        { "created_ms", "-5", "keys[0].created_ms", EM_EINVAL },
        { "created_ms", "null", "keys[0].created_ms", EM_EINVAL },
        { "revoked_ms", "0", "keys[0].revoked_ms", EM_EINVAL },
        { "revoked_ms", "\"yes\"", "keys[0].revoked_ms", EM_EINVAL },
        { "revoked_ms", NULL, "keys[0]: no \"revoked_ms\"", EM_EINVAL },
        { "extra", NULL, "keys[0]: unknown field \"extra\"", EM_EINVAL },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        doc_with(buf, sizeof buf, bad[i].field, bad[i].value);
        memset(&err, 0, sizeof err);
        CHECK_RC(import_str(st, buf, NULL, &err), bad[i].code);
        if (!strstr(err.msg, bad[i].msg))
            fprintf(stderr, "case %zu: %s\n", i, err.msg);
        CHECK(strstr(err.msg, bad[i].msg) != NULL);
    }
    /* Documents that are not keys documents. */
    const struct {
        const char *doc, *msg;
        int code;
    } docs[] = {
        { "", "not JSON", EM_EFORMAT },
        { "{\"format\": \"ember.keys\", \"version\": 1, \"keys\": [", "not JSON", EM_EFORMAT },
        { "[]", "a JSON object", EM_EFORMAT },
        { "{\"format\": \"ember.conversations\", \"version\": 1, \"keys\": []}", "format", EM_EFORMAT },
        { "{\"version\": 1, \"keys\": []}", "format", EM_EFORMAT },
        { "{\"format\": \"ember.keys\", \"version\": 2, \"keys\": []}", "version 2", EM_EUNSUPPORTED },
        { "{\"format\": \"ember.keys\", \"version\": \"1\", \"keys\": []}", "version", EM_EFORMAT },
        { "{\"format\": \"ember.keys\", \"version\": 1, \"keys\": {}}", "keys: not an array", EM_EFORMAT },
        { "{\"format\": \"ember.keys\", \"version\": 1, \"keys\": [], \"more\": 1}", "unknown field", EM_EFORMAT },
        { "{\"format\": \"ember.keys\", \"format\": \"ember.keys\", \"version\": 1, \"keys\": []}", "not JSON",
          EM_EFORMAT },
        { "{\"format\": \"ember.keys\", \"version\": 1, \"keys\": [7]}", "keys[0]: not an object", EM_EINVAL },
        { "{\"format\": \"ember.keys\", \"version\": 1, \"exported_ms\": \"now\", \"keys\": []}", "exported_ms",
          EM_EFORMAT },
    };
    for (size_t i = 0; i < sizeof docs / sizeof docs[0]; i++) {
        memset(&err, 0, sizeof err);
        CHECK_RC(import_str(st, docs[i].doc, NULL, &err), docs[i].code);
        if (!strstr(err.msg, docs[i].msg))
            fprintf(stderr, "doc %zu: %s\n", i, err.msg);
        CHECK(strstr(err.msg, docs[i].msg) != NULL);
    }
    /* A NUL byte inside the document. */
    static const char nul[] = "{\"format\": \"ember.keys\", \"version\": 1, \"keys\": []}\0junk";
    CHECK_RC(em_storage_keys_import(st, nul, sizeof nul - 1, NULL, NULL), EM_EFORMAT);

    /* The same key twice; a good key before a bad one: nothing imported. */
    const char *h = "\"00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\"";
    snprintf(buf, sizeof buf,
             "{\"format\": \"ember.keys\", \"version\": 1, \"keys\": ["
             "{\"name\": \"a\", \"prefix\": \"em_aaaaaa\", \"hash\": %s, \"class\": \"interactive\","
             " \"rate_limit_per_min\": 0, \"admin\": false, \"created_ms\": 1, \"revoked_ms\": null},"
             "{\"name\": \"b\", \"prefix\": \"em_bbbbbb\", \"hash\": %s, \"class\": \"interactive\","
             " \"rate_limit_per_min\": 0, \"admin\": false, \"created_ms\": 1, \"revoked_ms\": null}]}",
             h, h);
    memset(&err, 0, sizeof err);
    CHECK_RC(import_str(st, buf, NULL, &err), EM_EINVAL);
    CHECK(strstr(err.msg, "keys[0] and keys[1] are the same key") != NULL);
    snprintf(buf, sizeof buf,
             "{\"format\": \"ember.keys\", \"version\": 1, \"keys\": ["
             "{\"name\": \"a\", \"prefix\": \"em_aaaaaa\", \"hash\": %s, \"class\": \"interactive\","
             " \"rate_limit_per_min\": 0, \"admin\": false, \"created_ms\": 1, \"revoked_ms\": null},"
             "{\"name\": \"b\", \"prefix\": \"em_bbbbbb\", \"hash\": \"00\", \"class\": \"interactive\","
             " \"rate_limit_per_min\": 0, \"admin\": false, \"created_ms\": 1, \"revoked_ms\": null}]}",
             h);
    CHECK_RC(import_str(st, buf, NULL, &err), EM_EINVAL);

    /* Too big, too many. */
    size_t big = EM_STORAGE_KEYS_MAX_BYTES + 1;
    char *huge = malloc(big);
    REQUIRE(huge);
    memset(huge, ' ', big);
    memset(&err, 0, sizeof err);
    CHECK_RC(em_storage_keys_import(st, huge, big, NULL, &err), EM_ERANGE);
    CHECK(strstr(err.msg, "MiB") != NULL);
    size_t off = (size_t)snprintf(huge, big, "{\"format\": \"ember.keys\", \"version\": 1, \"keys\": [");
    for (int i = 0; i <= EM_STORAGE_KEYS_MAX_COUNT; i++)
        off += (size_t)snprintf(huge + off, big - off, "%s{}", i ? "," : "");
    snprintf(huge + off, big - off, "]}");
    memset(&err, 0, sizeof err);
    CHECK_RC(em_storage_keys_import(st, huge, strlen(huge), NULL, &err), EM_ERANGE);
    CHECK(strstr(err.msg, "more than the") != NULL);
    free(huge);

    CHECK(n_keys(st) == 0);   /* none of it imported anything */
    em_storage_close(st);
    return 0;
}

int main(void)
{
    if (t_mkdtemp("storage-keys"))
        return 1;
    struct {
        const char *name;
        int (*fn)(void);
    } tests[] = {
        { "round_trip", test_round_trip },
        { "clashes", test_clashes },
        { "hostile", test_hostile },
    };
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        int before = test_failures;
        if (tests[i].fn())
            test_failures++;
        printf("%s %s\n", test_failures == before ? "ok  " : "FAIL", tests[i].name);
    }
    return test_summary("storage-keys");
}
