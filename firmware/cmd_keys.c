/* cmd_keys.c — `ember keys`: create (printing the key exactly once; --admin
 * for a key that may read every key's usage, --no-response-cache for one
 * whose requests are always computed afresh), change the response-cache
 * setting (`set`), give one a new secret (`rotate`), list and revoke the API keys
 * stored in the ledger database, and export / import them (hashes only) to
 * give every box behind a load balancer the same keys. */
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "firmware/cli.h"
#include "storage/storage.h"

static const char usage[] =
    "usage: ember keys add NAME [--class interactive|background] [--rate-limit N/min] [--admin]\n"
    "                      [--no-response-cache] [--db PATH]\n"
    "       ember keys set ID --response-cache on|off [--db PATH]\n"
    "       ember keys list [--db PATH]\n"
    "       ember keys revoke ID [--db PATH]\n"
    "       ember keys rotate ID [--db PATH]\n"
    "       ember keys export [--db PATH] [--output FILE]\n"
    "       ember keys import FILE [--db PATH]\n"
    "  add prints the new key on stdout; it is shown only this once (only its hash\n"
    "  is stored). An --admin key may read every key's usage (GET /api/usage); the\n"
    "  others only their own. A key with the response cache off (--no-response-cache,\n"
    "  or set later) is never answered from the server's response cache nor adds to\n"
    "  it. rotate gives key ID a new secret, printed once like add's; the old one is\n"
    "  refused from then on, the name, settings and usage stay. --db defaults to\n"
    "  ./ember.db.\n"
    "  export writes every key (active and revoked) as JSON with its hash, never\n"
    "  the key, to FILE (mode 0600) or stdout; import reads such a file (- for\n"
    "  stdin) into another box's database in one transaction: keys already there\n"
    "  (same hash) are updated, revoked ones stay revoked, a name or prefix taken\n"
    "  by a different key is an error and nothing is imported.\n";

/* "N", "N/min" or "N/m" -> N (0 = unlimited). */
static int parse_rate(const char *s, int32_t *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || errno || v < 0 || v > 10000000)
        return -1;
    if (*end && strcmp(end, "/min") != 0 && strcmp(end, "/m") != 0)
        return -1;
    *out = (int32_t)v;
    return 0;
}

static void fmt_time(int64_t ms, char *buf, size_t cap)
{
    if (ms <= 0) {
        snprintf(buf, cap, "-");
        return;
    }
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, cap, "%Y-%m-%d %H:%M:%SZ", &tm);
}

static int open_db(const char *db, int create, em_storage **st, em_err *err)
{
    em_storage_opts o;
    em_storage_opts_init(&o);
    o.path = db;
    o.create = create;
    return em_storage_open(&o, st, err);
}

static int keys_add(int argc, char **argv)
{
    const char *db = "ember.db", *cls_s = "interactive", *rate_s = "0";
    const char *pos[1];
    int n_pos = 0, admin = 0, no_cache = 0;
    em_cli_opt opts[] = {
        { "--class", NULL, EM_OPT_STR, &cls_s, 0, 0 },
        { "--rate-limit", NULL, EM_OPT_STR, &rate_s, 0, 0 },
        { "--admin", NULL, EM_OPT_FLAG, &admin, 0, 0 },
        { "--no-response-cache", NULL, EM_OPT_FLAG, &no_cache, 0, 0 },
        { "--db", NULL, EM_OPT_STR, &db, 0, 0 },
        { NULL, NULL, 0, NULL, 0, 0 },
    };
    int rc = em_cli_parse("keys add", argc, argv, opts, pos, 1, &n_pos, usage);
    if (rc)
        return rc;
    if (n_pos != 1)
        return em_cli_fail(2, "keys add: give the key a NAME (see ember keys --help)");
    em_usage_class cls;
    if (em_storage_class_parse(cls_s, &cls))
        return em_cli_fail(2, "keys add: --class: '%s' is not interactive or background", cls_s);
    int32_t rate;
    if (parse_rate(rate_s, &rate))
        return em_cli_fail(2, "keys add: --rate-limit: '%s' is not N/min", rate_s);

    em_err err = { 0 };
    em_storage *st = NULL;
    em_key_info info;
    char key[EM_STORAGE_KEY_MAX];
    int status = 0;
    if (open_db(db, 1, &st, &err) ||
        (admin ? em_storage_key_add_admin : em_storage_key_add)(st, pos[0], cls, rate, key, sizeof key,
                                                                &info, &err) ||
        (no_cache && em_storage_key_set_cache(st, info.id, 0, &err))) {
        status = em_cli_fail_err(&err);
        goto done;
    }
    printf("%s\n", key);
    fflush(stdout);
    fprintf(stderr, "%skey %lld \"%s\" (%s, %s, rate limit ", info.admin ? "admin " : "",
            (long long)info.id, info.name, info.prefix, em_storage_class_name(info.default_class));
    if (info.rate_limit_per_min)
        fprintf(stderr, "%d/min", info.rate_limit_per_min);
    else
        fputs("none", stderr);
    if (no_cache)
        fputs(", no response cache", stderr);
    fputs("): this is the only time the key is shown; store it now.\n", stderr);
done:
    sodium_memzero(key, sizeof key);
    em_storage_close(st);
    return status;
}

static int keys_list(int argc, char **argv)
{
    const char *db = "ember.db";
    em_cli_opt opts[] = {
        { "--db", NULL, EM_OPT_STR, &db, 0, 0 },
        { NULL, NULL, 0, NULL, 0, 0 },
    };
    int rc = em_cli_parse("keys list", argc, argv, opts, NULL, 0, NULL, usage);
    if (rc)
        return rc;
    em_err err = { 0 };
    em_storage *st = NULL;
    em_key_info *keys = NULL;
    size_t n = 0;
    int status = 0;
    if (open_db(db, 0, &st, &err) || em_storage_key_list(st, &keys, &n, &err)) {
        status = em_cli_fail_err(&err);
        goto done;
    }
    /* Column widths from the data. */
    int wn = 4, wi = 2;
    for (size_t i = 0; i < n; i++) {
        int l = (int)strlen(keys[i].name);
        if (l > wn)
            wn = l;
        char id[24];
        l = snprintf(id, sizeof id, "%lld", (long long)keys[i].id);
        if (l > wi)
            wi = l;
    }
    printf("%-*s  %-*s  %-9s  %-11s  %-10s  %-5s  %-5s  %-20s  %s\n", wi, "id", wn, "name", "prefix", "class",
           "rate_limit", "admin", "cache", "created", "revoked");
    for (size_t i = 0; i < n; i++) {
        const em_key_info *k = &keys[i];
        char created[32], revoked[32], rate[24];
        fmt_time(k->created_ms, created, sizeof created);
        fmt_time(k->revoked_ms, revoked, sizeof revoked);
        if (k->rate_limit_per_min)
            snprintf(rate, sizeof rate, "%d/min", k->rate_limit_per_min);
        else
            snprintf(rate, sizeof rate, "none");
        printf("%*lld  %-*s  %-9s  %-11s  %-10s  %-5s  %-5s  %-20s  %s\n", wi, (long long)k->id, wn, k->name,
               k->prefix, em_storage_class_name(k->default_class), rate, k->admin ? "yes" : "no",
               k->response_cache ? "on" : "off", created, revoked);
    }
done:
    free(keys);
    em_storage_close(st);
    return status;
}

/* `ember keys CMD ARG [--db PATH]`: *db and *arg (pointers into argv), or
 * the exit status (missing: the line what_arg says). */
static int parse_db_arg(const char *cmd, int argc, char **argv, const char **db, const char **arg,
                        const char *what_arg)
{
    int n_pos = 0;
    *db = "ember.db";
    em_cli_opt opts[] = {
        { "--db", NULL, EM_OPT_STR, db, 0, 0 },
        { NULL, NULL, 0, NULL, 0, 0 },
    };
    int rc = em_cli_parse(cmd, argc, argv, opts, arg, 1, &n_pos, usage);
    if (rc)
        return rc;
    if (n_pos != 1)
        return em_cli_fail(2, "%s: %s", cmd, what_arg);
    return 0;
}

/* A key id argument into *id: 0, or 2 after the error line. */
static int key_id_arg(const char *cmd, const char *s, long long *id)
{
    char *end;
    errno = 0;
    *id = strtoll(s, &end, 10);
    if (end == s || *end || errno || *id <= 0)
        return em_cli_fail(2, "%s: '%s' is not a key id", cmd, s);
    return 0;
}

static int keys_revoke(int argc, char **argv)
{
    const char *db, *pos[1];
    long long id;
    int rc = parse_db_arg("keys revoke", argc, argv, &db, pos, "give the key's ID (see ember keys list)");
    if (rc || (rc = key_id_arg("keys revoke", pos[0], &id)))
        return rc;
    em_err err = { 0 };
    em_storage *st = NULL;
    int status = 0;
    if (open_db(db, 0, &st, &err) || em_storage_key_revoke(st, id, &err)) {
        status = em_cli_fail_err(&err);
        goto done;
    }
    printf("revoked key %lld\n", id);
done:
    em_storage_close(st);
    return status;
}

static int keys_rotate(int argc, char **argv)
{
    const char *db, *pos[1];
    long long id;
    int rc = parse_db_arg("keys rotate", argc, argv, &db, pos, "give the key's ID (see ember keys list)");
    if (rc || (rc = key_id_arg("keys rotate", pos[0], &id)))
        return rc;
    em_err err = { 0 };
    em_storage *st = NULL;
    em_key_info info;
    char key[EM_STORAGE_KEY_MAX];
    int status = 0;
    if (open_db(db, 0, &st, &err) || em_storage_key_rotate(st, id, key, sizeof key, &info, &err)) {
        status = em_cli_fail_err(&err);
        goto done;
    }
    printf("%s\n", key);
    fflush(stdout);
    fprintf(stderr, "key %lld \"%s\" (%s) has a new secret; the old one no longer works. This is the only "
            "time the key is shown; store it now.\n", (long long)info.id, info.name, info.prefix);
done:
    sodium_memzero(key, sizeof key);
    em_storage_close(st);
    return status;
}

static int keys_set(int argc, char **argv)
{
    const char *db = "ember.db", *cache_s = NULL, *pos[1];
    int n_pos = 0;
    em_cli_opt opts[] = {
        { "--response-cache", NULL, EM_OPT_STR, &cache_s, 0, 0 },
        { "--db", NULL, EM_OPT_STR, &db, 0, 0 },
        { NULL, NULL, 0, NULL, 0, 0 },
    };
    int rc = em_cli_parse("keys set", argc, argv, opts, pos, 1, &n_pos, usage);
    if (rc)
        return rc;
    if (n_pos != 1)
        return em_cli_fail(2, "keys set: give the key's ID (see ember keys list)");
    long long id;
    if ((rc = key_id_arg("keys set", pos[0], &id)))
        return rc;
    if (!cache_s)
        return em_cli_fail(2, "keys set: nothing to set (--response-cache on|off)");
    int on = strcmp(cache_s, "on") == 0;
    if (!on && strcmp(cache_s, "off") != 0)
        return em_cli_fail(2, "keys set: --response-cache: '%s' is not on or off", cache_s);
    em_err err = { 0 };
    em_storage *st = NULL;
    int status = 0;
    if (open_db(db, 0, &st, &err) || em_storage_key_set_cache(st, id, on, &err)) {
        status = em_cli_fail_err(&err);
        goto done;
    }
    printf("key %lld: response cache %s\n", id, on ? "on" : "off");
done:
    em_storage_close(st);
    return status;
}

/* Write len bytes of data to path: a file beside it (mode 0600) renamed over
 * it at the end, so a failed export leaves path as it was. */
static int write_out(const char *path, const char *data, size_t len)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp)
        return em_cli_fail(2, "keys export: --output: %s: the path is too long", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return em_cli_fail(2, "keys export: %s: %s", tmp, strerror(errno));
    size_t off = 0;
    while (off < len) {
        ssize_t w = write(fd, data + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    int e = off < len ? errno : 0;
    if (!e && fsync(fd))
        e = errno;
    if (close(fd) && !e)
        e = errno;
    if (!e && rename(tmp, path))
        e = errno;
    if (e) {
        unlink(tmp);
        return em_cli_fail(1, "keys export: %s: %s", path, strerror(e ? e : EIO));
    }
    return 0;
}

static int keys_export(int argc, char **argv)
{
    const char *db = "ember.db", *output = NULL;
    em_cli_opt opts[] = {
        { "--db", NULL, EM_OPT_STR, &db, 0, 0 },
        { "--output", "-o", EM_OPT_STR, &output, 0, 0 },
        { NULL, NULL, 0, NULL, 0, 0 },
    };
    int rc = em_cli_parse("keys export", argc, argv, opts, NULL, 0, NULL, usage);
    if (rc)
        return rc;
    em_err err = { 0 };
    if (output && em_cli_check_out_path("--output", output, &err))
        return em_cli_fail_err(&err);
    em_storage *st = NULL;
    char *doc = NULL;
    int status = 0;
    if (open_db(db, 0, &st, &err) || em_storage_keys_export(st, &doc, &err)) {
        status = em_cli_fail_err(&err);
        goto done;
    }
    if (output) {
        status = write_out(output, doc, strlen(doc));
    } else if (fputs(doc, stdout) == EOF || fflush(stdout)) {
        status = em_cli_fail(1, "keys export: stdout: %s", strerror(errno));
    }
done:
    free(doc);
    em_storage_close(st);
    return status;
}

static int keys_import(int argc, char **argv)
{
    const char *db, *pos[1];
    int rc = parse_db_arg("keys import", argc, argv, &db, pos, "give the FILE ember keys export wrote (- for stdin)");
    if (rc)
        return rc;
    em_err err = { 0 };
    char *data = NULL;
    size_t len = 0;
    const char *src = strcmp(pos[0], "-") ? pos[0] : "/dev/stdin";
    if (em_cli_read_file(src, &data, &len, &err))
        return em_cli_fail_err(&err);
    em_storage *st = NULL;
    em_keys_import_stats s;
    int status = 0;
    if (open_db(db, 1, &st, &err)) {
        status = em_cli_fail_err(&err);
        goto done;
    }
    if (em_storage_keys_import(st, data, len, &s, &err)) {
        em_err_prefix(&err, err.code, "keys import: %s: nothing imported", pos[0]);
        status = em_cli_fail_err(&err);
        goto done;
    }
    printf("imported %zu key(s) into %s: %zu added, %zu updated, %zu unchanged\n", s.added + s.updated + s.unchanged,
           db, s.added, s.updated, s.unchanged);
done:
    free(data);
    em_storage_close(st);
    return status;
}

int em_cmd_keys(int argc, char **argv)
{
    if (argc < 2) {
        fputs(usage, stderr);
        return 2;
    }
    const char *sub = argv[1];
    if (strcmp(sub, "--help") == 0 || strcmp(sub, "-h") == 0) {
        fputs(usage, stdout);
        return 0;
    }
    int rc;
    if (strcmp(sub, "add") == 0)
        rc = keys_add(argc - 1, argv + 1);
    else if (strcmp(sub, "list") == 0)
        rc = keys_list(argc - 1, argv + 1);
    else if (strcmp(sub, "revoke") == 0)
        rc = keys_revoke(argc - 1, argv + 1);
    else if (strcmp(sub, "set") == 0)
        rc = keys_set(argc - 1, argv + 1);
    else if (strcmp(sub, "rotate") == 0)
        rc = keys_rotate(argc - 1, argv + 1);
    else if (strcmp(sub, "export") == 0)
        rc = keys_export(argc - 1, argv + 1);
    else if (strcmp(sub, "import") == 0)
        rc = keys_import(argc - 1, argv + 1);
    else
        return em_cli_fail(2, "keys: unknown subcommand '%s' (add, set, rotate, list, revoke, export, import)", sub);
    return rc < 0 ? 0 : rc;
}
