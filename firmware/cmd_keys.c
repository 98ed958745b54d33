/* cmd_keys.c — `ember keys`: create (printing the key exactly once; --admin
 * for a key that may read every key's usage), list and revoke the API keys
 * stored in the ledger database. */
#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "firmware/cli.h"
#include "storage/storage.h"

static const char usage[] =
    "usage: ember keys add NAME [--class interactive|background] [--rate-limit N/min] [--admin]\n"
    "                      [--db PATH]\n"
    "       ember keys list [--db PATH]\n"
    "       ember keys revoke ID [--db PATH]\n"
    "  add prints the new key on stdout; it is shown only this once (only its hash\n"
    "  is stored). An --admin key may read every key's usage (GET /api/usage); the\n"
    "  others only their own. --db defaults to ./ember.db.\n";

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
    int n_pos = 0, admin = 0;
    em_cli_opt opts[] = {
        { "--class", NULL, EM_OPT_STR, &cls_s, 0, 0 },
        { "--rate-limit", NULL, EM_OPT_STR, &rate_s, 0, 0 },
        { "--admin", NULL, EM_OPT_FLAG, &admin, 0, 0 },
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
                                                                &info, &err)) {
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
    printf("%-*s  %-*s  %-9s  %-11s  %-10s  %-5s  %-20s  %s\n", wi, "id", wn, "name", "prefix", "class",
           "rate_limit", "admin", "created", "revoked");
    for (size_t i = 0; i < n; i++) {
        const em_key_info *k = &keys[i];
        char created[32], revoked[32], rate[24];
        fmt_time(k->created_ms, created, sizeof created);
        fmt_time(k->revoked_ms, revoked, sizeof revoked);
        if (k->rate_limit_per_min)
            snprintf(rate, sizeof rate, "%d/min", k->rate_limit_per_min);
        else
            snprintf(rate, sizeof rate, "none");
        printf("%*lld  %-*s  %-9s  %-11s  %-10s  %-5s  %-20s  %s\n", wi, (long long)k->id, wn, k->name,
               k->prefix, em_storage_class_name(k->default_class), rate, k->admin ? "yes" : "no", created,
               revoked);
    }
done:
    free(keys);
    em_storage_close(st);
    return status;
}

static int keys_revoke(int argc, char **argv)
{
    const char *db = "ember.db";
    const char *pos[1];
    int n_pos = 0;
    em_cli_opt opts[] = {
        { "--db", NULL, EM_OPT_STR, &db, 0, 0 },
        { NULL, NULL, 0, NULL, 0, 0 },
    };
    int rc = em_cli_parse("keys revoke", argc, argv, opts, pos, 1, &n_pos, usage);
    if (rc)
        return rc;
    if (n_pos != 1)
        return em_cli_fail(2, "keys revoke: give the key's ID (see ember keys list)");
    char *end;
    errno = 0;
    long long id = strtoll(pos[0], &end, 10);
    if (end == pos[0] || *end || errno || id <= 0)
        return em_cli_fail(2, "keys revoke: '%s' is not a key id", pos[0]);
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
    else
        return em_cli_fail(2, "keys: unknown subcommand '%s' (add, list, revoke)", sub);
    return rc < 0 ? 0 : rc;
}
