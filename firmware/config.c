/* config.c — `ember serve`'s configuration (firmware/config.h): the key
 * table (EM_CONFIG_KEYS), values checked the same way from the INI file
 * (inih, through a reader that counts lines and checks section headers)
 * and from the flags, the sources kept per key, --print-config, and the
 * SIGHUP reload's comparison of the running configuration with the file,
 * and what `ember serve` does with it (log switches, TLS files checked
 * before start, the reload hook over em_web_update). */
#include "firmware/config.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <ini.h>

#include "core/log.h"
#include "firmware/cli.h"
#include "web/web.h"

typedef enum { K_STR, K_INT, K_FLOAT, K_BOOL, K_ENUM } kind;

typedef struct {
    const char *section, *name;
    kind        k;
    double      min, max;
    const char *choices;   /* K_ENUM: "a|b|c" */
    const char *flag;      /* K_BOOL: a flag that sets the opposite of the default */
    int         reload;
    const char *def;
} key_def;

static const key_def keys[EM_CFG_COUNT] = {
#define EM_CONFIG_ROW(id, sec, name, k, mn, mx, ch, flag, rl, def) { sec, name, K_##k, mn, mx, ch, flag, rl, def },
    EM_CONFIG_KEYS(EM_CONFIG_ROW)
#undef EM_CONFIG_ROW
};

static const char *const sections[] = { "model", "models", "server", "scheduler", "auth", "storage", "log" };
#define N_SECTIONS (sizeof sections / sizeof sections[0])

enum { SRC_DEFAULT, SRC_FILE, SRC_FLAG };

typedef struct {
    char  *s;       /* the value as text (normalised: bools "true"/"false") */
    long   i;
    double f;
    int    src;
    int    line;    /* SRC_FILE */
    const char *flag;   /* SRC_FLAG: the flag that set it */
} value;

struct em_config {
    value v[EM_CFG_COUNT];
    char *file;
};

const char *em_config_name(em_config_key k)
{
    return keys[k].name;
}

/* Check text against key k; 0 with *out filled (out->s malloc'd), else -1
 * with why (no "where" prefix). */
static int parse_value(em_config_key k, const char *text, value *out, char *why, size_t cap)
{
    const key_def *d = &keys[k];
    char *end;
    memset(out, 0, sizeof *out);
    switch (d->k) {
    case K_STR:
        if (k != EM_CFG_MODEL_PATH && k != EM_CFG_DRAFT_MODEL && k != EM_CFG_ALLOWED_ORIGINS && k != EM_CFG_TLS_CERT &&
            k != EM_CFG_ALLOWED_HOSTS && k != EM_CFG_TRUSTED_PROXIES &&
            k != EM_CFG_TLS_KEY &&
            !text[0]) {
            snprintf(why, cap, "an empty value");
            return -1;
        }
        break;
    case K_INT: {
        const char *dg = text + (text[0] == '-');
        errno = 0;
        long v = *dg >= '0' && *dg <= '9' ? strtol(text, &end, 10) : 0;
        if (!(*dg >= '0' && *dg <= '9') || *end) {
            snprintf(why, cap, "'%s' is not an integer", text);
            return -1;
        }
        /* 0 is "automatic" for keys whose default is 0 */
        if (errno || ((v < d->min || v > d->max) && !(v == 0 && strcmp(d->def, "0") == 0))) {
            snprintf(why, cap, "%s is out of range [%.0f, %.0f]%s", text, d->min, d->max,
                     strcmp(d->def, "0") == 0 && d->min > 0 ? " (or 0: automatic)" : "");
            return -1;
        }
        out->i = v;
        out->f = (double)v;
        break;
    }
    case K_FLOAT: {
        const char *dg = text + (text[0] == '-');
        double v = strtod(text, &end);
        if (!((*dg >= '0' && *dg <= '9') || *dg == '.') || *end || !isfinite(v)) {
            snprintf(why, cap, "'%s' is not a number", text);
            return -1;
        }
        if (v < d->min || v > d->max) {
            snprintf(why, cap, "%s is out of range [%g, %g]", text, d->min, d->max);
            return -1;
        }
        out->f = v;
        out->i = (long)v;
        break;
    }
    case K_BOOL:
        if (!strcasecmp(text, "true") || !strcasecmp(text, "yes") || !strcasecmp(text, "on") || !strcmp(text, "1"))
            out->i = 1;
        else if (!strcasecmp(text, "false") || !strcasecmp(text, "no") || !strcasecmp(text, "off") ||
                 !strcmp(text, "0"))
            out->i = 0;
        else {
            snprintf(why, cap, "'%s' is not true or false", text);
            return -1;
        }
        text = out->i ? "true" : "false";
        break;
    case K_ENUM: {
        size_t n = strlen(text);
        int ok = 0;
        for (const char *c = d->choices; *c && !ok;) {
            const char *bar = strchr(c, '|');
            size_t len = bar ? (size_t)(bar - c) : strlen(c);
            ok = n && len == n && strncmp(c, text, n) == 0;
            c += len + (bar != NULL);
        }
        if (!ok) {
            snprintf(why, cap, "'%s' is not one of %s", text, d->choices);
            return -1;
        }
        break;
    }
    }
    if (!(out->s = strdup(text))) {
        snprintf(why, cap, "out of memory");
        return -1;
    }
    return 0;
}

static void set_value(em_config *c, em_config_key k, value *nv)
{
    free(c->v[k].s);
    c->v[k] = *nv;
}

/* ---- the file -------------------------------------------------------------- */

typedef struct {
    em_config *c;
    FILE      *f;
    const char *path;
    int        line;            /* the line inih is at */
    int        err_line;        /* the first error found by the reader or the handler; 0: none */
    char       err[512];
    int        seen_line[EM_CFG_COUNT];
    int        section_line[N_SECTIONS];
    char      *buf;
    size_t     cap;
} file_ctx;

static void file_error(file_ctx *x, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void file_error(file_ctx *x, int line, const char *fmt, ...)
{
    if (x->err_line && x->err_line <= line)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(x->err, sizeof x->err, fmt, ap);
    va_end(ap);
    x->err_line = line;
}

/* inih's reader: one whole line per call (counted), section headers checked
 * here (inih reports none to the handler), continuation lines refused. */
static char *reader(char *str, int num, void *stream)
{
    file_ctx *x = stream;
    ssize_t n = getline(&x->buf, &x->cap, x->f);
    if (n < 0)
        return NULL;
    x->line++;
    const char *p = x->buf;
    if (x->line == 1 && (unsigned char)p[0] == 0xef && (unsigned char)p[1] == 0xbb && (unsigned char)p[2] == 0xbf)
        p += 3;
    size_t len = strlen(p);
    if (len != (size_t)n - (size_t)(p - x->buf)) {
        file_error(x, x->line, "a NUL byte");
        str[0] = 0;
        return str;
    }
    if (len >= (size_t)num) {
        file_error(x, x->line, "a line longer than %d bytes", num - 2);
        str[0] = 0;
        return str;
    }
    const char *q = p;
    while (*q == ' ' || *q == '\t')
        q++;
    if (q != p && *q && *q != '\n' && *q != '\r' && *q != ';' && *q != '#') {
        file_error(x, x->line, "a line that starts with a space (continuation lines are not supported)");
        str[0] = 0;
        return str;
    }
    if (*q == '[') {
        const char *e = strchr(q, ']');
        if (e) {
            size_t sl = (size_t)(e - q - 1);
            size_t i;
            for (i = 0; i < N_SECTIONS; i++)
                if (strlen(sections[i]) == sl && strncmp(sections[i], q + 1, sl) == 0)
                    break;
            if (i == N_SECTIONS)
                file_error(x, x->line, "unknown section [%.*s] (sections: [model] [models] [server] [scheduler] [auth] "
                           "[storage] [log])", (int)sl, q + 1);
            else if (x->section_line[i])
                file_error(x, x->line, "section [%s] appears twice (first at line %d)", sections[i],
                           x->section_line[i]);
            else
                x->section_line[i] = x->line;
        }
    }
    memcpy(str, p, len + 1);
    return str;
}

static int handler(void *user, const char *section, const char *name, const char *val)
{
    file_ctx *x = user;
    int k;
    for (k = 0; k < EM_CFG_COUNT; k++)
        if (strcmp(keys[k].section, section) == 0 && strcmp(keys[k].name, name) == 0)
            break;
    if (k == EM_CFG_COUNT) {
        size_t i;
        for (i = 0; i < N_SECTIONS && strcmp(sections[i], section); i++) {}
        if (i == N_SECTIONS && section[0])
            return 1;   /* the reader named the section already */
        const char *other = NULL;
        for (int j = 0; j < EM_CFG_COUNT; j++)
            if (strcmp(keys[j].name, name) == 0)
                other = keys[j].section;
        if (!section[0])
            file_error(x, x->line, other ? "%s before any [section] (it belongs in [%s])"
                                         : "%s before any [section] (and no section has it)", name, other);
        else if (other)
            file_error(x, x->line, "unknown key %s in [%s] (it belongs in [%s])", name, section, other);
        else
            file_error(x, x->line, "unknown key %s in [%s]", name, section);
        return 0;
    }
    if (x->seen_line[k]) {
        file_error(x, x->line, "duplicate key %s in [%s] (first at line %d)", name, section, x->seen_line[k]);
        return 0;
    }
    x->seen_line[k] = x->line;
    value nv;
    char why[400];
    if (parse_value((em_config_key)k, val, &nv, why, sizeof why)) {
        file_error(x, x->line, "[%s] %s: %s", section, name, why);
        return 0;
    }
    nv.src = SRC_FILE;
    nv.line = x->line;
    set_value(x->c, (em_config_key)k, &nv);
    return 1;
}

static int read_file(em_config *c, const char *path, em_err *err)
{
    file_ctx x;
    memset(&x, 0, sizeof x);
    x.c = c;
    x.path = path;
    if (!(x.f = fopen(path, "r")))
        return em_err_set(err, errno == ENOENT ? EM_ENOENT : EM_EINVAL, "%s: %s", path, strerror(errno));
    int rc = ini_parse_stream(reader, &x, handler, &x);
    int io = ferror(x.f);
    fclose(x.f);
    free(x.buf);
    if (io)
        return em_err_set(err, EM_EIO, "%s: read error", path);
    if (rc < 0)
        return em_err_set(err, EM_ENOMEM, "%s: out of memory", path);
    if (rc > 0 && (!x.err_line || rc < x.err_line))   /* inih's own: no '=' or an unclosed '[' */
        return em_err_set(err, EM_EINVAL, "%s:%d: not a `key = value` line or a [section] header", path, rc);
    if (x.err_line)
        return em_err_set(err, EM_EINVAL, "%s:%d: %s", path, x.err_line, x.err);
    return 0;
}

/* ---- building it ----------------------------------------------------------- */

static void defaults(em_config *c)
{
    for (int k = 0; k < EM_CFG_COUNT; k++) {
        value nv;
        char why[256];
        if (parse_value((em_config_key)k, keys[k].def, &nv, why, sizeof why)) {   /* "" for paths */
            memset(&nv, 0, sizeof nv);
            nv.s = strdup(keys[k].def);
        }
        nv.src = SRC_DEFAULT;
        set_value(c, (em_config_key)k, &nv);
    }
}

#define MAX_OPTS (EM_CFG_COUNT + 8)

/* defaults, the file, then the flags; 0 or an exit status (error printed) */
static int build(int argc, char **argv, const char *usage, em_config *c, int *print, int quiet_flags_err,
                 em_err *ferr)
{
    const char *flag_val[EM_CFG_COUNT] = { 0 };
    int flag_set[EM_CFG_COUNT] = { 0 };
    const char *config = NULL, *max_queued = NULL;
    int print_config = 0, verbose = 0;
    em_cli_opt opts[MAX_OPTS];
    int n = 0;
    opts[n++] = (em_cli_opt){ "--config", "-c", EM_OPT_STR, &config, 0, 0 };
    opts[n++] = (em_cli_opt){ "--print-config", NULL, EM_OPT_FLAG, &print_config, 0, 0 };
    opts[n++] = (em_cli_opt){ "--verbose", "-v", EM_OPT_FLAG, &verbose, 0, 0 };
    opts[n++] = (em_cli_opt){ "--max-queued", NULL, EM_OPT_STR, &max_queued, 0, 0 };
    for (int k = 0; k < EM_CFG_COUNT; k++)
        if (keys[k].flag) {
            if (keys[k].k == K_BOOL)
                opts[n++] = (em_cli_opt){ keys[k].flag, NULL, EM_OPT_FLAG, &flag_set[k], 0, 0 };
            else
                opts[n++] = (em_cli_opt){ keys[k].flag, k == EM_CFG_MODEL_PATH ? "-m" : NULL, EM_OPT_STR,
                                          &flag_val[k], 0, 0 };
        }
    opts[n] = (em_cli_opt){ NULL, NULL, 0, NULL, 0, 0 };
    int rc = em_cli_parse("serve", argc, argv, opts, NULL, 0, NULL, usage);
    if (rc)
        return rc;
    if (print)
        *print = print_config;
    defaults(c);
    if (config) {
        if (!(c->file = strdup(config)))
            return em_cli_fail(1, "serve: out of memory");
        em_err err = { 0 };
        if (read_file(c, config, &err)) {
            if (quiet_flags_err) {
                *ferr = err;
                return 2;
            }
            return em_cli_fail(2, "serve: %s", err.msg);
        }
    }
    /* --verbose is --log-level debug; --max-queued sets both queues */
    const char *by[EM_CFG_COUNT];
    for (int k = 0; k < EM_CFG_COUNT; k++)
        by[k] = keys[k].flag;
    if (verbose && !flag_val[EM_CFG_LOG_LEVEL]) {
        flag_val[EM_CFG_LOG_LEVEL] = "debug";
        by[EM_CFG_LOG_LEVEL] = "--verbose";
    }
    for (int k = EM_CFG_MAX_QUEUED_INTERACTIVE; max_queued && k <= EM_CFG_MAX_QUEUED_BACKGROUND; k++)
        if (!flag_val[k]) {
            flag_val[k] = max_queued;
            by[k] = "--max-queued";
        }
    for (int k = 0; k < EM_CFG_COUNT; k++) {
        const char *text = flag_val[k];
        if (keys[k].k == K_BOOL && flag_set[k])
            text = strcmp(keys[k].def, "true") == 0 ? "false" : "true";
        if (!text)
            continue;
        value nv;
        char why[400];
        if (parse_value((em_config_key)k, text, &nv, why, sizeof why))
            return em_cli_fail(2, "serve: %s: %s", by[k], why);
        nv.src = SRC_FLAG;
        nv.flag = by[k];
        set_value(c, (em_config_key)k, &nv);
    }
    return 0;
}

int em_config_load(int argc, char **argv, const char *usage, em_config **out, int *print_config)
{
    *out = NULL;
    em_config *c = calloc(1, sizeof *c);
    if (!c)
        return em_cli_fail(1, "serve: out of memory");
    int rc = build(argc, argv, usage, c, print_config, 0, NULL);
    if (rc) {
        em_config_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

void em_config_free(em_config *c)
{
    if (!c)
        return;
    for (int k = 0; k < EM_CFG_COUNT; k++)
        free(c->v[k].s);
    free(c->file);
    free(c);
}

const char *em_config_file(const em_config *c)
{
    return c->file;
}

const char *em_config_str(const em_config *c, em_config_key k)
{
    return c->v[k].s ? c->v[k].s : "";
}

long em_config_int(const em_config *c, em_config_key k)
{
    return c->v[k].i;
}

double em_config_float(const em_config *c, em_config_key k)
{
    return c->v[k].f;
}

int em_config_is_set(const em_config *c, em_config_key k)
{
    return c->v[k].src != SRC_DEFAULT;
}

static void where(const em_config *c, em_config_key k, char *buf, size_t cap)
{
    const value *v = &c->v[k];
    if (v->src == SRC_FILE)
        snprintf(buf, cap, "file %s:%d", c->file, v->line);
    else if (v->src == SRC_FLAG)
        snprintf(buf, cap, "flag %s", v->flag);
    else
        snprintf(buf, cap, "default");
}

void em_config_print(const em_config *c)
{
    const char *sec = NULL;
    printf("# ember serve: the effective configuration (defaults, %s%s%sflags)\n", c->file ? "the file " : "",
           c->file ? c->file : "", c->file ? ", " : "");
    for (int k = 0; k < EM_CFG_COUNT; k++) {
        if (!sec || strcmp(sec, keys[k].section)) {
            sec = keys[k].section;
            printf("\n[%s]\n", sec);
        }
        char w[4200], line[8400];
        where(c, (em_config_key)k, w, sizeof w);
        snprintf(line, sizeof line, "%s = %s", keys[k].name, em_config_str(c, (em_config_key)k));
        printf("%-40s ; %s\n", line, w);
    }
}

/* ---- SIGHUP ---------------------------------------------------------------- */

int em_config_reload(em_config *running, int argc, char **argv, int changed[EM_CFG_COUNT])
{
    memset(changed, 0, sizeof(int) * EM_CFG_COUNT);
    if (!running->file) {
        em_log(EM_LOG_WARN, NULL, "SIGHUP: no configuration file to reload (started without --config)");
        return -1;
    }
    em_config *c = calloc(1, sizeof *c);
    em_err err = { 0 };
    if (!c || build(argc, argv, NULL, c, NULL, 1, &err)) {
        em_log(EM_LOG_ERROR, NULL, "SIGHUP: %s: the running configuration is kept",
               c && err.msg[0] ? err.msg : "out of memory");
        em_config_free(c);
        return -1;
    }
    int n_changed = 0;
    for (int k = 0; k < EM_CFG_COUNT; k++) {
        if (strcmp(em_config_str(running, (em_config_key)k), em_config_str(c, (em_config_key)k)) == 0)
            continue;
        if (!keys[k].reload) {
            em_log(EM_LOG_WARN, NULL, "SIGHUP: %s changed in the file: needs a restart (still %s, file says %s)",
                   em_config_name((em_config_key)k), em_config_str(running, (em_config_key)k),
                   em_config_str(c, (em_config_key)k));
            continue;
        }
        em_log(EM_LOG_INFO, NULL, "SIGHUP: %s: %s -> %s", em_config_name((em_config_key)k),
               em_config_str(running, (em_config_key)k), em_config_str(c, (em_config_key)k));
        value nv = c->v[k];
        c->v[k].s = NULL;
        set_value(running, (em_config_key)k, &nv);
        changed[k] = 1;
        n_changed++;
    }
    em_log(EM_LOG_INFO, NULL, "SIGHUP: reloaded %s: %d setting(s) changed; API keys and their rate limits are "
           "read from the database on every request", running->file, n_changed);
    em_config_free(c);
    return 0;
}

/* ---- ember serve ------------------------------------------------------------- */

void em_config_apply_log(const em_config *c)
{
    em_log_level lv = EM_LOG_INFO;
    em_log_level_parse(em_config_str(c, EM_CFG_LOG_LEVEL), &lv);
    em_log_configure(lv, strcmp(em_config_str(c, EM_CFG_LOG_FORMAT), "json") == 0,
                     (int)em_config_int(c, EM_CFG_LOG_CONTENT));
}

int em_config_check_tls(const em_config *c)
{
    const char *cert = em_config_str(c, EM_CFG_TLS_CERT), *key = em_config_str(c, EM_CFG_TLS_KEY);
    if (!cert[0] != !key[0])
        return em_cli_fail(2, "serve: tls_cert and tls_key go together: %s is set, %s is not",
                           cert[0] ? "tls_cert" : "tls_key", cert[0] ? "tls_key" : "tls_cert");
    for (int i = 0; i < 2 && cert[0]; i++) {   /* before the model: a missing file costs no load */
        const char *f = i ? key : cert;
        FILE *fp = fopen(f, "r");
        if (!fp)
            return em_cli_fail(2, "serve: %s: %s: %s", i ? "tls_key" : "tls_cert", f, strerror(errno));
        fclose(fp);
    }
    return 0;
}

void em_config_serve_reload(void *ctx, struct em_web *w)
{
    em_config_reload_ctx *r = ctx;
    int changed[EM_CFG_COUNT];
    if (em_config_reload(r->cfg, r->argc, r->argv, changed))
        return;
    em_config_apply_log(r->cfg);
    em_err err = { 0 };
    if (em_web_update(w, (int)em_config_int(r->cfg, EM_CFG_REQUIRE_KEY), (int32_t)em_config_int(r->cfg, EM_CFG_RATE_LIMIT),
                      em_config_str(r->cfg, EM_CFG_ALLOWED_ORIGINS), em_config_str(r->cfg, EM_CFG_ALLOWED_HOSTS),
                      em_config_str(r->cfg, EM_CFG_TRUSTED_PROXIES),
                      &err))
        em_log(EM_LOG_ERROR, NULL, "SIGHUP: %s", err.msg);
}
