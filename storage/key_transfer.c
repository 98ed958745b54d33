/* key_transfer.c — API keys between boxes: `ember keys export` writes every
 * key of a database (active and revoked) as a versioned JSON document of
 * hashes (never a key itself), `ember keys import` reads one into another
 * database in one transaction, so that every box behind a load balancer
 * accepts the same keys (docs/DEPLOY.md). A document is checked whole
 * before anything is written; keys are matched by hash, so an import is
 * idempotent; a name or prefix held by a different key is refused. */
#include "core/grow.h"
#include "storage/storage_int.h"

#include <jansson.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HASH_BYTES 32
#define HASH_HEX   (2 * HASH_BYTES)
#define RATE_MAX   10000000   /* as `ember keys add --rate-limit` */

/* One key of a document (name borrowed from the parsed JSON tree). */
typedef struct {
    const char    *name;
    char           prefix[EM_STORAGE_PREFIX_LEN + 1];
    unsigned char  hash[HASH_BYTES];
    em_usage_class cls;
    int32_t        rate;
    int            admin;
    int            response_cache;
    int64_t        created_ms, revoked_ms;   /* revoked 0: active */
} key_in;

/* A key already in the database. */
typedef struct {
    em_key_info   info;
    unsigned char hash[HASH_BYTES];
} key_have;

/* ---- export ------------------------------------------------------------------- */

static json_t *key_json(const em_key_info *k, const unsigned char *hash)
{
    char hex[HASH_HEX + 1];
    sodium_bin2hex(hex, sizeof hex, hash, HASH_BYTES);
    return json_pack("{s:s, s:s, s:s, s:s, s:i, s:b, s:b, s:I, s:o}", "name", k->name, "prefix", k->prefix,
                     "hash", hex, "class", em_storage_class_name(k->default_class), "rate_limit_per_min",
                     (int)k->rate_limit_per_min, "admin", k->admin, "response_cache", k->response_cache,
                     "created_ms", (json_int_t)k->created_ms,
                     "revoked_ms", k->revoked_ms ? json_integer(k->revoked_ms) : json_null());
}

int em_storage_keys_export(em_storage *st, char **out, em_err *err)
{
    int ret = 0, rc = SQLITE_OK;
    *out = NULL;
    json_t *keys = json_array(), *doc = NULL;
    if (!keys)
        return em_err_set(err, EM_ENOMEM, "%s: out of memory exporting keys", st->path);
    if ((ret = em_sto_ops_begin(st, err))) {
        json_decref(keys);
        return ret;
    }
    sqlite3_stmt *s = NULL;
    if ((ret = em_sto_txn(st, EM_STMT_OPS_BEGIN_READ, &rc, err)))
        goto done;
    s = em_sto_prep(st, EM_STMT_KEY_EXPORT,
                    "SELECT " EM_STO_KEY_COLUMNS ", hash FROM api_keys ORDER BY id", &ret, err);
    if (!s)
        goto done;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        em_key_info k;
        em_sto_key_row(s, &k);
        const void *h = sqlite3_column_blob(s, EM_STO_KEY_COL_HASH);
        if (!h || sqlite3_column_bytes(s, EM_STO_KEY_COL_HASH) != HASH_BYTES) {
            ret = em_err_set(err, EM_EFORMAT, "%s: api key %lld: its stored hash is not %d bytes", st->path,
                             (long long)k.id, HASH_BYTES);
            rc = SQLITE_OK;
            goto done;
        }
        json_t *j = key_json(&k, h);
        if (!j || json_array_append_new(keys, j)) {
            ret = em_err_set(err, EM_ENOMEM, "%s: out of memory exporting keys", st->path);
            rc = SQLITE_OK;
            goto done;
        }
    }
    if (rc != SQLITE_DONE) {
        ret = em_sto_fail(st->ops.db, rc, st->path, "exporting api keys", err);
        goto done;
    }
    rc = SQLITE_OK;
    ret = em_sto_txn(st, EM_STMT_OPS_COMMIT, &rc, err);
done:
    if (s)
        sqlite3_reset(s);
    if (ret)
        em_sto_txn_abort(st);
    em_sto_ops_end(st, rc);
    if (!ret) {
        doc = json_pack("{s:s, s:i, s:I, s:O}", "format", EM_STORAGE_KEYS_FORMAT, "version",
                        EM_STORAGE_KEYS_VERSION, "exported_ms", (json_int_t)em_storage_now_ms(), "keys", keys);
        char *txt = doc ? json_dumps(doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
        size_t n = txt ? strlen(txt) : 0;
        char *buf = txt ? malloc(n + 2) : NULL;
        if (!buf) {
            ret = em_err_set(err, EM_ENOMEM, "%s: out of memory exporting keys", st->path);
        } else {
            memcpy(buf, txt, n);
            memcpy(buf + n, "\n", 2);
            *out = buf;
        }
        free(txt);
    }
    json_decref(doc);
    json_decref(keys);
    return ret;
}

/* ---- import: the document --------------------------------------------------- */

static int prefix_ok(const char *p)
{
    if (strlen(p) != EM_STORAGE_PREFIX_LEN || strncmp(p, "em_", 3) != 0)
        return 0;
    for (p += 3; *p; p++)
        if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
              *p == '-' || *p == '_'))
            return 0;
    return 1;
}

static int hash_parse(const char *hex, unsigned char out[HASH_BYTES])
{
    size_t bin_len = 0;
    const char *end = NULL;
    if (strlen(hex) != HASH_HEX)
        return -1;
    for (const char *p = hex; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f') || (*p >= 'A' && *p <= 'F')))
            return -1;
    if (sodium_hex2bin(out, HASH_BYTES, hex, HASH_HEX, NULL, &bin_len, &end) || bin_len != HASH_BYTES)
        return -1;
    return 0;
}

static int int_field(json_t *o, const char *f, size_t i, int64_t lo, int64_t hi, int64_t *v, em_err *err)
{
    json_t *j = json_object_get(o, f);
    if (!json_is_integer(j) || json_integer_value(j) < lo || json_integer_value(j) > hi)
        return em_err_set(err, EM_EINVAL, "keys[%zu].%s: not an integer from %lld to %lld", i, f,
                          (long long)lo, (long long)hi);
    *v = json_integer_value(j);
    return 0;
}

static int str_field(json_t *o, const char *f, size_t i, const char **v, em_err *err)
{
    json_t *j = json_object_get(o, f);
    if (!json_is_string(j))
        return em_err_set(err, EM_EINVAL, "keys[%zu].%s: not a string", i, f);
    *v = json_string_value(j);
    return 0;
}

static int parse_key(json_t *o, size_t i, key_in *k, em_err *err)
{
    static const char *const fields[] = { "name", "prefix", "hash", "class", "rate_limit_per_min",
                                          "admin", "created_ms", "revoked_ms", "response_cache" };
    const size_t n_fields = sizeof fields / sizeof fields[0];
    const size_t n_required = n_fields - 1;   /* response_cache: absent in older documents, on */
    if (!json_is_object(o))
        return em_err_set(err, EM_EINVAL, "keys[%zu]: not an object", i);
    const char *f;
    json_t *v;
    json_object_foreach(o, f, v) {
        size_t j = 0;
        while (j < n_fields && strcmp(f, fields[j]))
            j++;
        if (j == n_fields)
            return em_err_set(err, EM_EINVAL, "keys[%zu]: unknown field \"%s\"", i, f);
    }
    for (size_t j = 0; j < n_required; j++)
        if (!json_object_get(o, fields[j]))
            return em_err_set(err, EM_EINVAL, "keys[%zu]: no \"%s\"", i, fields[j]);
    memset(k, 0, sizeof *k);
    const char *prefix = NULL, *hash = NULL, *cls = NULL;
    int64_t rate = 0, revoked = 0;
    int ret;
    if ((ret = str_field(o, "name", i, &k->name, err)) || (ret = str_field(o, "prefix", i, &prefix, err)) ||
        (ret = str_field(o, "hash", i, &hash, err)) || (ret = str_field(o, "class", i, &cls, err)) ||
        (ret = int_field(o, "rate_limit_per_min", i, 0, RATE_MAX, &rate, err)) ||
        (ret = int_field(o, "created_ms", i, 0, INT64_MAX, &k->created_ms, err)))
        return ret;
    if (!em_sto_key_name_ok(k->name))
        return em_err_set(err, EM_EINVAL, "keys[%zu].name: not 1 to %d printable characters", i,
                          EM_STORAGE_NAME_MAX - 1);
    if (!prefix_ok(prefix))
        return em_err_set(err, EM_EINVAL, "keys[%zu].prefix: not em_ and 6 base64url characters", i);
    memcpy(k->prefix, prefix, EM_STORAGE_PREFIX_LEN + 1);
    if (hash_parse(hash, k->hash))
        return em_err_set(err, EM_EINVAL, "keys[%zu].hash: not %d hexadecimal digits (a %d-byte hash)",
                          i, HASH_HEX, HASH_BYTES);
    if (em_storage_class_parse(cls, &k->cls))
        return em_err_set(err, EM_EINVAL, "keys[%zu].class: not interactive or background", i);
    k->rate = (int32_t)rate;
    json_t *a = json_object_get(o, "admin");
    if (!json_is_boolean(a))
        return em_err_set(err, EM_EINVAL, "keys[%zu].admin: not true or false", i);
    k->admin = json_is_true(a);
    json_t *rc = json_object_get(o, "response_cache");
    if (rc && !json_is_boolean(rc))
        return em_err_set(err, EM_EINVAL, "keys[%zu].response_cache: not true or false", i);
    k->response_cache = !rc || json_is_true(rc);
    if (!json_is_null(json_object_get(o, "revoked_ms")) &&
        (ret = int_field(o, "revoked_ms", i, 1, INT64_MAX, &revoked, err)))
        return em_err_set(err, EM_EINVAL, "keys[%zu].revoked_ms: not null or a positive integer", i);
    k->revoked_ms = revoked;
    return 0;
}

/* qsort/bsearch comparators over arrays of pointers. */
static int cmp_in_hash(const void *a, const void *b)
{
    return memcmp((*(const key_in *const *)a)->hash, (*(const key_in *const *)b)->hash, HASH_BYTES);
}

static int cmp_have_hash(const void *a, const void *b)
{
    return memcmp((*(const key_have *const *)a)->hash, (*(const key_have *const *)b)->hash, HASH_BYTES);
}

static int cmp_have_name(const void *a, const void *b)
{
    return strcmp((*(const key_have *const *)a)->info.name, (*(const key_have *const *)b)->info.name);
}

static int cmp_have_prefix(const void *a, const void *b)
{
    return strcmp((*(const key_have *const *)a)->info.prefix, (*(const key_have *const *)b)->info.prefix);
}

/* The document into *keys (*n of them; free() it; names point into *root,
 * json_decref it). Also pointers to them sorted by hash (*by_hash, free()
 * it), no hash twice. */
static int parse_doc(const char *json, size_t len, json_t **root, key_in **keys, size_t *n,
                     const key_in ***by_hash, em_err *err)
{
    json_error_t je;
    *root = NULL;
    *keys = NULL;
    *n = 0;
    *by_hash = NULL;
    if (len > EM_STORAGE_KEYS_MAX_BYTES)
        return em_err_set(err, EM_ERANGE, "the document is %zu bytes, more than the %zu MiB allowed", len,
                          EM_STORAGE_KEYS_MAX_BYTES >> 20);
    json_t *doc = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
    if (!doc)
        return em_err_set(err, EM_EFORMAT, "not JSON: line %d column %d: %s", je.line, je.column, je.text);
    *root = doc;
    if (!json_is_object(doc))
        return em_err_set(err, EM_EFORMAT, "not a keys document (a JSON object)");
    const char *f;
    json_t *v;
    json_object_foreach(doc, f, v) {
        if (strcmp(f, "format") && strcmp(f, "version") && strcmp(f, "exported_ms") && strcmp(f, "keys"))
            return em_err_set(err, EM_EFORMAT, "unknown field \"%s\"", f);
    }
    json_t *fmt = json_object_get(doc, "format"), *ver = json_object_get(doc, "version");
    json_t *arr = json_object_get(doc, "keys"), *exp = json_object_get(doc, "exported_ms");
    if (!json_is_string(fmt) || strcmp(json_string_value(fmt), EM_STORAGE_KEYS_FORMAT))
        return em_err_set(err, EM_EFORMAT, "format: not \"%s\" (ember keys export writes it)",
                          EM_STORAGE_KEYS_FORMAT);
    if (!json_is_integer(ver))
        return em_err_set(err, EM_EFORMAT, "version: not an integer");
    if (json_integer_value(ver) != EM_STORAGE_KEYS_VERSION)
        return em_err_set(err, EM_EUNSUPPORTED, "version %lld: this build reads version %d",
                          (long long)json_integer_value(ver), EM_STORAGE_KEYS_VERSION);
    if (exp && !json_is_integer(exp))
        return em_err_set(err, EM_EFORMAT, "exported_ms: not an integer");
    if (!json_is_array(arr))
        return em_err_set(err, EM_EFORMAT, "keys: not an array");
    size_t cnt = json_array_size(arr);
    if (cnt > EM_STORAGE_KEYS_MAX_COUNT)
        return em_err_set(err, EM_ERANGE, "%zu keys, more than the %d allowed", cnt,
                          EM_STORAGE_KEYS_MAX_COUNT);
    key_in *k = calloc(cnt ? cnt : 1, sizeof *k);
    const key_in **h = calloc(cnt ? cnt : 1, sizeof *h);
    if (!k || !h) {
        free(k);
        free(h);
        return em_err_set(err, EM_ENOMEM, "out of memory reading %zu keys", cnt);
    }
    *keys = k;
    *by_hash = h;
    for (size_t i = 0; i < cnt; i++) {
        int ret = parse_key(json_array_get(arr, i), i, &k[i], err);
        if (ret)
            return ret;
        h[i] = &k[i];
    }
    *n = cnt;
    qsort(h, cnt, sizeof *h, cmp_in_hash);
    for (size_t i = 1; i < cnt; i++)
        if (!cmp_in_hash(&h[i - 1], &h[i])) {
            size_t a = (size_t)(h[i - 1] - k), b = (size_t)(h[i] - k);
            return em_err_set(err, EM_EINVAL, "keys[%zu] and keys[%zu] are the same key (the same hash)",
                              a < b ? a : b, a < b ? b : a);
        }
    return 0;
}

/* ---- import: against the database -------------------------------------------- */

static int load_have(em_storage *st, key_have **out, size_t *n, int *rc, em_err *err)
{
    int ret = 0;
    size_t cap = 0, cnt = 0;
    key_have *v = NULL;
    sqlite3_stmt *s = em_sto_prep(st, EM_STMT_KEY_BY_HASH,
                                  "SELECT " EM_STO_KEY_COLUMNS ", hash FROM api_keys ORDER BY id", &ret, err);
    if (!s)
        return ret;
    int r;
    while ((r = sqlite3_step(s)) == SQLITE_ROW) {
        if (em_grow((void **)&v, &cap, cnt, sizeof *v, 64)) {
            ret = em_err_set(err, EM_ENOMEM, "%s: out of memory reading keys", st->path);
            break;
        }
        key_have *h = &v[cnt++];
        em_sto_key_row(s, &h->info);
        memset(h->hash, 0, HASH_BYTES);   /* a malformed stored hash matches nothing real */
        if (sqlite3_column_bytes(s, EM_STO_KEY_COL_HASH) == HASH_BYTES)
            memcpy(h->hash, sqlite3_column_blob(s, EM_STO_KEY_COL_HASH), HASH_BYTES);
    }
    sqlite3_reset(s);
    if (!ret && r != SQLITE_DONE) {
        *rc = r;
        ret = em_sto_fail(st->ops.db, r, st->path, "reading api keys", err);
    }
    if (ret) {
        free(v);
        return ret;
    }
    *out = v;
    *n = cnt;
    return 0;
}

/* What is in the database, sorted three ways (arrays of pointers into have). */
typedef struct {
    const key_have **hash, **name, **prefix;
    size_t n;
} have_index;

static int index_make(const key_have *have, size_t n, have_index *x)
{
    x->n = n;
    x->hash = calloc(n ? n : 1, sizeof *x->hash);
    x->name = calloc(n ? n : 1, sizeof *x->name);
    x->prefix = calloc(n ? n : 1, sizeof *x->prefix);
    if (!x->hash || !x->name || !x->prefix)
        return EM_ENOMEM;
    for (size_t i = 0; i < n; i++)
        x->hash[i] = x->name[i] = x->prefix[i] = &have[i];
    qsort(x->hash, n, sizeof *x->hash, cmp_have_hash);
    qsort(x->name, n, sizeof *x->name, cmp_have_name);
    qsort(x->prefix, n, sizeof *x->prefix, cmp_have_prefix);
    return 0;
}

static void index_free(have_index *x)
{
    free(x->hash);
    free(x->name);
    free(x->prefix);
}

/* The first of the entries of v (sorted by cmp) equal to probe, or n. */
static size_t lower_bound(const key_have **v, size_t n, const key_have *probe, int (*cmp)(const void *, const void *))
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cmp(&v[mid], &probe) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* A key of the database that shares k's name (or prefix, by cmp) but not
 * its hash, and is not in the document: NULL when none. */
static const key_have *taken(const key_in *k, const key_have **v, size_t n, const key_have *probe,
                             int (*cmp)(const void *, const void *), const key_in *const *by_hash, size_t n_doc)
{
    for (size_t j = lower_bound(v, n, probe, cmp); j < n && !cmp(&v[j], &probe); j++) {
        if (!memcmp(v[j]->hash, k->hash, HASH_BYTES))
            continue;
        key_in in_probe;
        memcpy(in_probe.hash, v[j]->hash, HASH_BYTES);
        const key_in *pp = &in_probe;
        if (!bsearch(&pp, by_hash, n_doc, sizeof *by_hash, cmp_in_hash))
            return v[j];
    }
    return NULL;
}

/* The name and prefix of k must not be held here by a key that is not in
 * the document; the key with k's hash (if any) into *same. */
static int check_clash(const key_in *k, size_t i, const have_index *x, const key_in *const *by_hash, size_t n_doc,
                       const key_have **same, const char *path, em_err *err)
{
    key_have probe;
    memset(&probe, 0, sizeof probe);
    memcpy(probe.hash, k->hash, HASH_BYTES);
    snprintf(probe.info.name, sizeof probe.info.name, "%s", k->name);
    memcpy(probe.info.prefix, k->prefix, sizeof probe.info.prefix);
    size_t j = lower_bound(x->hash, x->n, &probe, cmp_have_hash);
    *same = j < x->n && !cmp_have_hash(&x->hash[j], &(const key_have *){ &probe }) ? x->hash[j] : NULL;
    const key_have *h = taken(k, x->name, x->n, &probe, cmp_have_name, by_hash, n_doc);
    int name = h != NULL;
    if (!h)
        h = taken(k, x->prefix, x->n, &probe, cmp_have_prefix, by_hash, n_doc);
    if (h)
        return em_err_set(err, EM_EINVAL,
                          "keys[%zu] \"%s\" (%s): %s %s is taken in %s by a different key, %lld \"%s\" (%s)",
                          i, k->name, k->prefix, name ? "its name" : "its prefix", name ? k->name : k->prefix, path,
                          (long long)h->info.id, h->info.name, h->info.prefix);
    if (*same && strcmp((*same)->info.prefix, k->prefix))
        return em_err_set(err, EM_EINVAL, "keys[%zu] \"%s\": its prefix %s is not the one of the key with "
                          "its hash in %s (%lld, %s)", i, k->name, k->prefix, path, (long long)(*same)->info.id,
                          (*same)->info.prefix);
    return 0;
}

static void bind_key(sqlite3_stmt *s, const key_in *k, int64_t revoked)
{
    sqlite3_bind_text(s, 1, k->name, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 2, k->prefix, -1, SQLITE_STATIC);
    sqlite3_bind_blob(s, 3, k->hash, HASH_BYTES, SQLITE_STATIC);
    sqlite3_bind_text(s, 4, em_storage_class_name(k->cls), -1, SQLITE_STATIC);
    sqlite3_bind_int(s, 5, k->rate);
    sqlite3_bind_int64(s, 6, k->created_ms);
    if (revoked)
        sqlite3_bind_int64(s, 7, revoked);
    else
        sqlite3_bind_null(s, 7);
    sqlite3_bind_int(s, 8, k->admin ? 1 : 0);
    sqlite3_bind_int(s, 9, k->response_cache ? 1 : 0);
}

static int write_key(em_storage *st, const key_in *k, const key_have *same, em_keys_import_stats *stats, int *rc,
                     em_err *err)
{
    int ret = 0;
    if (!same) {
        sqlite3_stmt *s = em_sto_prep(st, EM_STMT_KEY_IMPORT_INSERT,
                                      "INSERT INTO api_keys (name, prefix, hash, default_class, rate_limit_per_min,"
                                      " created_ms, revoked_ms, admin, response_cache)"
                                      " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                                      &ret, err);
        if (!s)
            return ret;
        bind_key(s, k, k->revoked_ms);
        if (!(ret = em_sto_step_done(st, s, rc, "importing an api key", err)))
            stats->added++;
        return ret;
    }
    const em_key_info *h = &same->info;
    int64_t revoked = h->revoked_ms ? h->revoked_ms : k->revoked_ms;   /* revoked stays revoked */
    if (!strcmp(h->name, k->name) && h->default_class == k->cls && h->rate_limit_per_min == k->rate &&
        h->admin == k->admin && h->response_cache == k->response_cache && h->created_ms == k->created_ms &&
        h->revoked_ms == revoked) {
        stats->unchanged++;
        return 0;
    }
    sqlite3_stmt *s = em_sto_prep(st, EM_STMT_KEY_IMPORT_UPDATE,
                                  "UPDATE api_keys SET name = ?1, prefix = ?2, hash = ?3, default_class = ?4,"
                                  " rate_limit_per_min = ?5, created_ms = ?6, revoked_ms = ?7, admin = ?8,"
                                  " response_cache = ?9 WHERE id = ?10",
                                  &ret, err);
    if (!s)
        return ret;
    bind_key(s, k, revoked);
    sqlite3_bind_int64(s, 10, h->id);
    if (!(ret = em_sto_step_done(st, s, rc, "updating an imported api key", err)))
        stats->updated++;
    return ret;
}

int em_storage_keys_import(em_storage *st, const char *json, size_t len, em_keys_import_stats *stats,
                           em_err *err)
{
    int ret, rc = SQLITE_OK, locked = 0;
    em_keys_import_stats cnt = { 0, 0, 0 };
    json_t *root = NULL;
    key_in *keys = NULL;
    key_have *have = NULL;
    have_index x = { NULL, NULL, NULL, 0 };
    const key_in **by_hash = NULL;
    size_t n = 0, n_have = 0;
    if (stats)
        *stats = cnt;
    if ((ret = parse_doc(json, len, &root, &keys, &n, &by_hash, err)))
        goto done;
    if ((ret = em_sto_ops_begin(st, err)))
        goto done;
    locked = 1;
    if ((ret = em_sto_txn(st, EM_STMT_OPS_BEGIN, &rc, err)) || (ret = load_have(st, &have, &n_have, &rc, err)))
        goto done;
    if (index_make(have, n_have, &x)) {
        ret = em_err_set(err, EM_ENOMEM, "%s: out of memory reading keys", st->path);
        goto done;
    }
    for (size_t i = 0; i < n && !ret; i++) {
        const key_have *same;
        if (!(ret = check_clash(&keys[i], i, &x, by_hash, n, &same, st->path, err)))
            ret = write_key(st, &keys[i], same, &cnt, &rc, err);
    }
    if (!ret)
        ret = em_sto_txn(st, EM_STMT_OPS_COMMIT, &rc, err);
done:
    if (locked) {
        if (ret)
            em_sto_txn_abort(st);
        em_sto_ops_end(st, rc);
    }
    if (!ret && stats)
        *stats = cnt;
    index_free(&x);
    free(have);
    free(by_hash);
    free(keys);
    json_decref(root);
    return ret;
}
