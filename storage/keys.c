/* keys.c — API keys: generation (libsodium randombytes_buf, 256 bits),
 * hashing (keyed BLAKE2b, crypto_generichash), verification with a
 * constant-time hash comparison (sodium_memcmp), listing and revocation;
 * admin keys (which may read every key's usage).
 * Only the hash and a short display prefix are stored; the key itself is
 * never written to the database and never appears in an error message. */
#include "core/grow.h"
#include "storage/storage_int.h"

#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#define KEY_RAW_BYTES 32
#define KEY_B64_LEN   43                   /* base64url, no padding, of 32 bytes */
#define KEY_LEN       (3 + KEY_B64_LEN)    /* "em_" + base64url */
#define HASH_BYTES    crypto_generichash_BYTES

_Static_assert(KEY_LEN < EM_STORAGE_KEY_MAX, "key buffer too small");
_Static_assert(HASH_BYTES == 32, "BLAKE2b-256 expected");

/* Domain separation: these hashes are ember API keys, nothing else. */
static const unsigned char hash_ctx[crypto_generichash_KEYBYTES] = "ember.api_key.v1 hash context.";

static void key_hash(const char *key, unsigned char out[HASH_BYTES])
{
    crypto_generichash(out, HASH_BYTES, (const unsigned char *)key, strlen(key), hash_ctx,
                       sizeof hash_ctx);
}

int em_sto_hash_equal(em_storage *st, const unsigned char *a, const unsigned char *b)
{
    st->ct_compares++;
    return sodium_memcmp(a, b, HASH_BYTES) == 0;
}

int em_sto_key_name_ok(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n >= EM_STORAGE_NAME_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)name[i] < 0x20 || name[i] == 0x7f)
            return 0;
    return 1;
}

/* The shape of a key we issued: "em_" + 43 base64url characters. */
static int valid_key_shape(const char *key)
{
    if (!key || strncmp(key, "em_", 3) != 0 || strlen(key) != KEY_LEN)
        return 0;
    for (const char *p = key + 3; *p; p++) {
        char c = *p;
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_'))
            return 0;
    }
    return 1;
}

static void copy_col(char *dst, size_t cap, sqlite3_stmt *s, int col)
{
    const unsigned char *t = sqlite3_column_text(s, col);
    size_t n = t ? strnlen((const char *)t, cap - 1) : 0;
    if (n)
        memcpy(dst, t, n);
    dst[n] = 0;
}

#define KEY_COLS EM_STO_KEY_COLUMNS
#define KEY_COL_HASH EM_STO_KEY_COL_HASH

void em_sto_key_row(sqlite3_stmt *s, em_key_info *k)
{
    memset(k, 0, sizeof *k);
    k->id = sqlite3_column_int64(s, 0);
    copy_col(k->name, sizeof k->name, s, 1);
    copy_col(k->prefix, sizeof k->prefix, s, 2);
    em_usage_class c = EM_USAGE_INTERACTIVE;
    em_storage_class_parse((const char *)sqlite3_column_text(s, 3), &c);
    k->default_class = c;
    k->rate_limit_per_min = sqlite3_column_int(s, 4);
    k->created_ms = sqlite3_column_int64(s, 5);
    k->revoked_ms = sqlite3_column_int64(s, 6);   /* NULL reads as 0 */
    k->admin = sqlite3_column_int(s, 7) != 0;
    k->response_cache = sqlite3_column_int(s, 8) != 0;
}

/* A new secret: the key ("em_" + 43 base64url characters) into key_out,
 * its hash and display prefix. */
static void new_secret(char *key_out, unsigned char *hash, char *prefix)
{
    unsigned char raw[KEY_RAW_BYTES];
    char b64[KEY_B64_LEN + 1];
    randombytes_buf(raw, sizeof raw);
    sodium_bin2base64(b64, sizeof b64, raw, sizeof raw, sodium_base64_VARIANT_URLSAFE_NO_PADDING);
    memcpy(key_out, "em_", 3);
    memcpy(key_out + 3, b64, KEY_B64_LEN + 1);
    key_hash(key_out, hash);
    memcpy(prefix, key_out, EM_STORAGE_PREFIX_LEN);
    prefix[EM_STORAGE_PREFIX_LEN] = 0;
    sodium_memzero(raw, sizeof raw);
    sodium_memzero(b64, sizeof b64);
}

int em_storage_key_rotate(em_storage *st, int64_t id, char *key_out, size_t cap, em_key_info *info, em_err *err)
{
    if (!key_out || cap < EM_STORAGE_KEY_MAX)
        return em_err_set(err, EM_EINVAL, "api key: output buffer too small");
    em_key_info old;
    int ret = em_storage_key_get(st, id, &old, err), rc = SQLITE_OK;
    if (ret)
        return ret;
    if (old.revoked_ms)
        return em_err_set(err, EM_ESTATE, "api key %lld: revoked (make a new one with ember keys add)",
                          (long long)id);
    unsigned char hash[HASH_BYTES];
    char prefix[EM_STORAGE_PREFIX_LEN + 1];
    new_secret(key_out, hash, prefix);
    if (!(ret = em_sto_ops_begin(st, err))) {
        sqlite3_stmt *s = em_sto_prep(st, EM_STMT_KEY_ROTATE, "UPDATE api_keys SET prefix = ?2, hash = ?3"
                                      " WHERE id = ?1 AND revoked_ms IS NULL", &ret, err);
        if (s) {
            sqlite3_bind_int64(s, 1, id);
            sqlite3_bind_text(s, 2, prefix, -1, SQLITE_STATIC);
            sqlite3_bind_blob(s, 3, hash, HASH_BYTES, SQLITE_STATIC);
            ret = em_sto_step_done(st, s, &rc, "rotating an api key", err);
            if (!ret && sqlite3_changes(st->ops.db) != 1)
                ret = em_err_set(err, EM_ESTATE, "api key %lld: revoked meanwhile", (long long)id);
        }
        em_sto_ops_end(st, rc);
    }
    sodium_memzero(hash, sizeof hash);
    if (ret) {
        sodium_memzero(key_out, cap);
        return ret;
    }
    if (info) {
        *info = old;
        memcpy(info->prefix, prefix, sizeof prefix);
    }
    return 0;
}

static int key_add(em_storage *st, const char *name, em_usage_class default_class,
                   int32_t rate_limit_per_min, int admin, char *key_out, size_t cap,
                   em_key_info *info, em_err *err)
{
    int ret = 0, rc = SQLITE_OK, locked = 0;
    unsigned char hash[HASH_BYTES];
    if (!key_out || cap < EM_STORAGE_KEY_MAX) {
        ret = em_err_set(err, EM_EINVAL, "api key: output buffer too small");
        goto done;
    }
    key_out[0] = 0;
    if (!em_sto_key_name_ok(name)) {
        ret = em_err_set(err, EM_EINVAL,
                         "api key: the name must be 1 to %d printable characters",
                         EM_STORAGE_NAME_MAX - 1);
        goto done;
    }
    if (rate_limit_per_min < 0 ||
        (default_class != EM_USAGE_INTERACTIVE && default_class != EM_USAGE_BACKGROUND)) {
        ret = em_err_set(err, EM_EINVAL, "api key %s: bad class or rate limit", name);
        goto done;
    }
    char prefix[EM_STORAGE_PREFIX_LEN + 1];
    new_secret(key_out, hash, prefix);
    int64_t now = em_storage_now_ms();

    if ((ret = em_sto_ops_begin(st, err)))
        goto done;
    locked = 1;
    sqlite3_stmt *s = em_sto_stmt(&st->ops, EM_STMT_KEY_INSERT,
                                  "INSERT INTO api_keys (name, prefix, hash, default_class,"
                                  " rate_limit_per_min, created_ms, admin)"
                                  " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                                  st->path, err);
    if (!s) {
        ret = err ? err->code : EM_EIO;
        goto done;
    }
    sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 2, prefix, -1, SQLITE_STATIC);
    sqlite3_bind_blob(s, 3, hash, HASH_BYTES, SQLITE_STATIC);
    sqlite3_bind_text(s, 4, em_storage_class_name(default_class), -1, SQLITE_STATIC);
    sqlite3_bind_int(s, 5, rate_limit_per_min);
    sqlite3_bind_int64(s, 6, now);
    sqlite3_bind_int(s, 7, admin ? 1 : 0);
    rc = sqlite3_step(s);
    sqlite3_clear_bindings(s);
    sqlite3_reset(s);
    if (rc != SQLITE_DONE) {
        ret = em_sto_fail(st->ops.db, rc, st->path, "adding an api key", err);
        goto done;
    }
    rc = SQLITE_OK;
    if (info) {
        memset(info, 0, sizeof *info);
        info->id = sqlite3_last_insert_rowid(st->ops.db);
        snprintf(info->name, sizeof info->name, "%s", name);
        memcpy(info->prefix, prefix, sizeof prefix);
        info->default_class = default_class;
        info->rate_limit_per_min = rate_limit_per_min;
        info->created_ms = now;
        info->admin = admin ? 1 : 0;
        info->response_cache = 1;
    }
done:
    if (locked)
        em_sto_ops_end(st, rc);
    if (ret && key_out && cap)
        sodium_memzero(key_out, cap);
    sodium_memzero(hash, sizeof hash);
    return ret;
}

int em_storage_key_add(em_storage *st, const char *name, em_usage_class default_class,
                       int32_t rate_limit_per_min, char *key_out, size_t cap,
                       em_key_info *info, em_err *err)
{
    return key_add(st, name, default_class, rate_limit_per_min, 0, key_out, cap, info, err);
}

int em_storage_key_add_admin(em_storage *st, const char *name, em_usage_class default_class,
                             int32_t rate_limit_per_min, char *key_out, size_t cap,
                             em_key_info *info, em_err *err)
{
    return key_add(st, name, default_class, rate_limit_per_min, 1, key_out, cap, info, err);
}

int em_storage_key_list(em_storage *st, em_key_info **out, size_t *n, em_err *err)
{
    int ret, rc = SQLITE_OK;
    em_key_info *v = NULL;
    size_t cnt = 0, cap = 0;
    *out = NULL;
    *n = 0;
    if ((ret = em_sto_ops_begin(st, err)))
        return ret;
    sqlite3_stmt *s = em_sto_stmt(&st->ops, EM_STMT_KEY_LIST,
                                  "SELECT " KEY_COLS " FROM api_keys ORDER BY id", st->path, err);
    if (!s) {
        ret = err ? err->code : EM_EIO;
        goto done;
    }
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (em_grow((void **)&v, &cap, cnt, sizeof *v, 16)) {
            ret = em_err_set(err, EM_ENOMEM, "%s: out of memory listing keys", st->path);
            rc = SQLITE_OK;
            goto done;
        }
        em_sto_key_row(s, &v[cnt++]);
    }
    if (rc != SQLITE_DONE) {
        ret = em_sto_fail(st->ops.db, rc, st->path, "listing api keys", err);
        goto done;
    }
    rc = SQLITE_OK;
done:
    if (s)
        sqlite3_reset(s);
    em_sto_ops_end(st, rc);
    if (ret) {
        free(v);
        return ret;
    }
    *out = v;
    *n = cnt;
    return 0;
}

int em_storage_key_revoke(em_storage *st, int64_t id, em_err *err)
{
    int ret, rc = SQLITE_OK;
    if ((ret = em_sto_ops_begin(st, err)))
        return ret;
    sqlite3_stmt *u = em_sto_stmt(&st->ops, EM_STMT_KEY_REVOKE,
                                  "UPDATE api_keys SET revoked_ms = ?2"
                                  " WHERE id = ?1 AND revoked_ms IS NULL",
                                  st->path, err);
    sqlite3_stmt *g = u ? em_sto_stmt(&st->ops, EM_STMT_KEY_GET,
                                      "SELECT " KEY_COLS " FROM api_keys WHERE id = ?1",
                                      st->path, err)
                        : NULL;
    if (!g) {
        ret = err ? err->code : EM_EIO;
        goto done;
    }
    sqlite3_bind_int64(u, 1, id);
    sqlite3_bind_int64(u, 2, em_storage_now_ms());
    rc = sqlite3_step(u);
    sqlite3_reset(u);
    if (rc != SQLITE_DONE) {
        ret = em_sto_fail(st->ops.db, rc, st->path, "revoking an api key", err);
        goto done;
    }
    rc = SQLITE_OK;
    if (sqlite3_changes(st->ops.db) == 1)
        goto done;
    /* Nothing changed: no such key, or revoked already. */
    sqlite3_bind_int64(g, 1, id);
    rc = sqlite3_step(g);
    if (rc == SQLITE_ROW)
        ret = em_err_set(err, EM_ESTATE, "api key %lld: already revoked", (long long)id);
    else if (rc == SQLITE_DONE)
        ret = em_err_set(err, EM_ENOENT, "api key %lld: no such key", (long long)id);
    else
        ret = em_sto_fail(st->ops.db, rc, st->path, "revoking an api key", err);
    rc = rc == SQLITE_ROW || rc == SQLITE_DONE ? SQLITE_OK : rc;
    sqlite3_reset(g);
done:
    em_sto_ops_end(st, rc);
    return ret;
}

int em_storage_key_get(em_storage *st, int64_t id, em_key_info *out, em_err *err)
{
    int ret, rc = SQLITE_OK;
    if ((ret = em_sto_ops_begin(st, err)))
        return ret;
    sqlite3_stmt *g = em_sto_prep(st, EM_STMT_KEY_GET, "SELECT " KEY_COLS " FROM api_keys WHERE id = ?1", &ret, err);
    if (g) {
        sqlite3_bind_int64(g, 1, id);
        rc = sqlite3_step(g);
        if (rc == SQLITE_ROW)
            em_sto_key_row(g, out);
        else if (rc == SQLITE_DONE)
            ret = em_err_set(err, EM_ENOENT, "api key %lld: no such key", (long long)id);
        else
            ret = em_sto_fail(st->ops.db, rc, st->path, "reading an api key", err);
        rc = rc == SQLITE_ROW || rc == SQLITE_DONE ? SQLITE_OK : rc;
        sqlite3_reset(g);
    }
    em_sto_ops_end(st, rc);
    return ret;
}

int em_storage_key_set_cache(em_storage *st, int64_t id, int on, em_err *err)
{
    int ret, rc = SQLITE_OK;
    if ((ret = em_sto_ops_begin(st, err)))
        return ret;
    sqlite3_stmt *s = em_sto_prep(st, EM_STMT_KEY_SET_CACHE, "UPDATE api_keys SET response_cache = ?2 WHERE id = ?1",
                                  &ret, err);
    if (s) {
        sqlite3_bind_int64(s, 1, id);
        sqlite3_bind_int(s, 2, on ? 1 : 0);
        ret = em_sto_step_done(st, s, &rc, "setting an api key's response cache", err);
        if (!ret && sqlite3_changes(st->ops.db) != 1)
            ret = em_err_set(err, EM_ENOENT, "api key %lld: no such key", (long long)id);
    }
    em_sto_ops_end(st, rc);
    return ret;
}

int em_storage_key_verify(em_storage *st, const char *key, em_key_info *out, em_err *err)
{
    int ret = 0, rc = SQLITE_OK, found = 0, locked = 0;
    unsigned char hash[HASH_BYTES];
    em_key_info match;
    memset(&match, 0, sizeof match);
    if (!valid_key_shape(key)) {
        ret = em_err_set(err, EM_ENOENT, "api key: not recognised");
        goto done;
    }
    key_hash(key, hash);
    char prefix[EM_STORAGE_PREFIX_LEN + 1];
    memcpy(prefix, key, EM_STORAGE_PREFIX_LEN);
    prefix[EM_STORAGE_PREFIX_LEN] = 0;

    if ((ret = em_sto_ops_begin(st, err)))
        goto done;
    locked = 1;
    sqlite3_stmt *s = em_sto_stmt(&st->ops, EM_STMT_KEY_BY_PREFIX,
                                  "SELECT " KEY_COLS ", hash FROM api_keys WHERE prefix = ?1",
                                  st->path, err);
    if (!s) {
        ret = err ? err->code : EM_EIO;
        goto done;
    }
    sqlite3_bind_text(s, 1, prefix, -1, SQLITE_STATIC);
    /* Look at every candidate (prefixes may collide); the comparison itself
     * takes the same time whatever the bytes. */
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        const void *h = sqlite3_column_blob(s, KEY_COL_HASH);
        if (h && sqlite3_column_bytes(s, KEY_COL_HASH) == HASH_BYTES && em_sto_hash_equal(st, hash, h) &&
            !found) {
            em_sto_key_row(s, &match);
            found = 1;
        }
    }
    sqlite3_reset(s);
    if (rc != SQLITE_DONE) {
        ret = em_sto_fail(st->ops.db, rc, st->path, "checking an api key", err);
        goto done;
    }
    rc = SQLITE_OK;
    if (!found)
        ret = em_err_set(err, EM_ENOENT, "api key: not recognised");
    else if (match.revoked_ms)
        ret = em_err_set(err, EM_ESTATE, "api key %s (id %lld): revoked", match.prefix,
                         (long long)match.id);
    else if (out)
        *out = match;
done:
    if (locked)
        em_sto_ops_end(st, rc);
    sodium_memzero(hash, sizeof hash);
    return ret;
}
