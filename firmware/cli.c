/* cli.c — option parsing and error reporting shared by the ember subcommands. */
#include "firmware/cli.h"

#include <dirent.h>
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/model/model.h"
#include "core/text/tokenizer.h"

static void note_v(const char *fmt, va_list ap)
{
    char msg[2048];   /* arguments and file strings quoted in it are escaped (em_err_escape) */
    vsnprintf(msg, sizeof msg, fmt, ap);
    em_err_escape(msg, sizeof msg);
    fprintf(stderr, "ember: %s\n", msg);
}

void em_cli_note(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    note_v(fmt, ap);
    va_end(ap);
}

int em_cli_fail(int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    note_v(fmt, ap);
    va_end(ap);
    return status;
}

int em_cli_fail_err(const em_err *err)
{
    int status = em_err_is_input(err->code) ? 2 : 1;
    return em_cli_fail(status, "%s", err->msg[0] ? err->msg : em_err_str(err->code));
}

static const em_cli_opt *find_opt(const em_cli_opt *opts, const char *name, size_t len)
{
    for (const em_cli_opt *o = opts; o && o->name; o++) {
        if (strlen(o->name) == len && strncmp(o->name, name, len) == 0)
            return o;
        if (o->alias && strlen(o->alias) == len && strncmp(o->alias, name, len) == 0)
            return o;
    }
    return NULL;
}

static int set_value(const char *cmd, const em_cli_opt *o, const char *val)
{
    char *end;
    int bounded = !(o->min == 0 && o->max == 0);
    switch (o->kind) {
    case EM_OPT_STR:
        *(const char **)o->dst = val;
        return 0;
    case EM_OPT_MULTI: {
        em_cli_list *l = o->dst;
        if (l->n >= (int)(sizeof l->vals / sizeof l->vals[0]))
            return em_cli_fail(2, "%s: %s: given too many times", cmd, o->name);
        l->vals[l->n++] = val;
        return 0;
    }
    case EM_OPT_INT: {
        /* digits with an optional '-': strtol alone would also take a '+', leading spaces */
        const char *d = val + (val[0] == '-');
        if (*d < '0' || *d > '9')
            return em_cli_fail(2, "%s: %s: '%s' is not an integer", cmd, o->name, val);
        errno = 0;
        long v = strtol(val, &end, 10);
        if (*end)
            return em_cli_fail(2, "%s: %s: '%s' is not an integer", cmd, o->name, val);
        if (errno)
            return em_cli_fail(2, "%s: %s: %s is out of range [%.0f, %.0f]", cmd, o->name, val,
                               bounded ? o->min : (double)LONG_MIN, bounded ? o->max : (double)LONG_MAX);
        if (bounded && (v < o->min || v > o->max))
            return em_cli_fail(2, "%s: %s: %ld is out of range [%.0f, %.0f]", cmd, o->name, v,
                               o->min, o->max);
        *(long *)o->dst = v;
        return 0;
    }
    case EM_OPT_FLOAT: {
        const char *d = val + (val[0] == '-');
        double v = strtod(val, &end);
        if (!((*d >= '0' && *d <= '9') || *d == '.') || *end || isnan(v))
            return em_cli_fail(2, "%s: %s: '%s' is not a number", cmd, o->name, val);
        if (isinf(v))   /* a finite number that overflows a double (an underflow rounds to 0) */
            return em_cli_fail(2, "%s: %s: %s is out of range [%g, %g]", cmd, o->name, val,
                               bounded ? o->min : -DBL_MAX, bounded ? o->max : DBL_MAX);
        if (bounded && (v < o->min || v > o->max))
            return em_cli_fail(2, "%s: %s: %g is out of range [%g, %g]", cmd, o->name, v,
                               o->min, o->max);
        *(double *)o->dst = v;
        return 0;
    }
    case EM_OPT_FLAG:
        break;
    }
    return em_cli_fail(2, "%s: %s: takes no value", cmd, o->name);
}

int em_cli_parse(const char *cmd, int argc, char **argv, const em_cli_opt *opts,
                 const char **pos, int max_pos, int *n_pos, const char *usage)
{
    int np = 0, only_pos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (only_pos || a[0] != '-' || a[1] == 0) {
            if (np >= max_pos)
                return em_cli_fail(2, "%s: unexpected argument '%s'", cmd, a);
            pos[np++] = a;
            continue;
        }
        if (strcmp(a, "--") == 0) {
            only_pos = 1;
            continue;
        }
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            if (usage)
                fputs(usage, stdout);
            return -1;
        }
        const char *eq = strchr(a, '=');
        size_t len = eq && a[1] == '-' ? (size_t)(eq - a) : strlen(a);
        const em_cli_opt *o = find_opt(opts, a, len);
        if (!o)
            return em_cli_fail(2, "%s: unknown option '%.*s' (see ember %s --help)", cmd,
                               (int)len, a, cmd);
        if (o->kind == EM_OPT_FLAG) {
            if (eq && a[1] == '-')
                return em_cli_fail(2, "%s: %s: takes no value", cmd, o->name);
            *(int *)o->dst = 1;
            continue;
        }
        const char *val;
        if (eq && a[1] == '-')
            val = eq + 1;
        else if (i + 1 < argc)
            val = argv[++i];
        else
            return em_cli_fail(2, "%s: %s: missing value", cmd, o->name);
        int rc = set_value(cmd, o, val);
        if (rc)
            return rc;
    }
    if (n_pos)
        *n_pos = np;
    return 0;
}

void em_cli_warn_ctx(const char *cmd, uint32_t ctx, uint32_t n_ctx_train)
{
    if (ctx > n_ctx_train)
        em_cli_note("%s: warning: a %u-token context is longer than the %u tokens the model was trained for; "
                    "text past position %u is likely to degrade", cmd, ctx, n_ctx_train, n_ctx_train);
}

int em_cli_check_out_path(const char *flag, const char *path, em_err *err)
{
    if (!path[0])
        return em_err_set(err, EM_EINVAL, "%s: the path is empty", flag);
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return em_err_set(err, EM_EINVAL, "%s: %s is a directory", flag, path);
    char dir[4096];
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else
        snprintf(dir, sizeof dir, "%.*s", (int)(slash == path ? 1 : slash - path), path);
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return em_err_set(err, EM_ENOENT, "%s: %s: no such directory", flag, dir);
    if (access(dir, W_OK) != 0)
        return em_err_set(err, EM_EINVAL, "%s: %s: %s", flag, dir, strerror(errno));
    return 0;
}

int em_cli_read_file(const char *path, char **data, size_t *len, em_err *err)
{
    *data = NULL;
    *len = 0;
    struct stat st;
    if (stat(path, &st) != 0)
        return em_err_set(err, errno == ENOENT ? EM_ENOENT : EM_EIO, "%s: %s", path,
                          strerror(errno));
    if (S_ISDIR(st.st_mode))
        return em_err_set(err, EM_EINVAL, "%s: is a directory", path);
    if (S_ISREG(st.st_mode) && (uint64_t)st.st_size > EM_CLI_MAX_INPUT)
        return em_err_set(err, EM_ERANGE, "%s: %llu bytes, larger than the %zu MiB an input file may have",
                          path, (unsigned long long)st.st_size, EM_CLI_MAX_INPUT >> 20);
    FILE *f = fopen(path, "rb");
    if (!f)
        return em_err_set(err, EM_EIO, "%s: %s", path, strerror(errno));
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    int rc = 0;
    while (buf && n <= EM_CLI_MAX_INPUT) {
        if (n + 1 >= cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        size_t want = cap - 1 - n, left = EM_CLI_MAX_INPUT + 1 - n;   /* one byte past the cap tells */
        size_t got = fread(buf + n, 1, want < left ? want : left, f);
        n += got;
        if (got == 0)
            break;
    }
    if (!buf)
        rc = em_err_set(err, EM_ENOMEM, "%s: out of memory", path);
    else if (n > EM_CLI_MAX_INPUT)
        rc = em_err_set(err, EM_ERANGE, "%s: larger than the %zu MiB an input file may have", path,
                        EM_CLI_MAX_INPUT >> 20);
    else if (ferror(f))
        rc = em_err_set(err, EM_EIO, "%s: read error", path);
    fclose(f);
    if (rc) {
        free(buf);
        return rc;
    }
    buf[n] = 0;
    *data = buf;
    *len = n;
    return 0;
}

int em_cli_finite_logits(const char *cmd, const char *model_path, const float *logits, size_t n_rows,
                         uint32_t n_vocab, size_t pos0)
{
    for (size_t k = 0; k < n_rows * n_vocab; k++)
        if (!isfinite(logits[k]))
            return em_cli_fail(2, "%s: %s: the model gives a non-finite logit (%g for token %zu at position %zu): "
                               "its weights are broken", cmd, model_path, (double)logits[k], k % n_vocab,
                               pos0 + k / n_vocab);
    return 0;
}

int em_cli_parse_ids(const char *text, size_t len, const char *what, int32_t **ids, size_t *n,
                     em_err *err)
{
    size_t cap = 64, cnt = 0;
    int32_t *v = malloc(cap * sizeof *v);
    if (!v)
        return em_err_set(err, EM_ENOMEM, "%s: out of memory", what);
    const char *p = text, *e = text + len;
    for (;;) {
        while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
            p++;
        if (p == e)
            break;
        if (!*p) {   /* strtoll would stop here: the ids after it would be dropped unseen */
            free(v);
            return em_err_set(err, EM_EFORMAT, "%s: a NUL byte after token %zu (byte %zu): not a list of ids",
                              what, cnt, (size_t)(p - text));
        }
        char *end;
        errno = 0;
        long long x = strtoll(p, &end, 10);
        if (end == p || errno || x < 0 || x > INT32_MAX ||
            (*end && *end != ' ' && *end != '\t' && *end != '\n' && *end != '\r')) {
            free(v);
            return em_err_set(err, EM_EFORMAT, "%s: token %zu is not a non-negative integer",
                              what, cnt + 1);
        }
        if (cnt == cap) {
            int32_t *nv = realloc(v, cap * 2 * sizeof *v);
            if (!nv) {
                free(v);
                return em_err_set(err, EM_ENOMEM, "%s: out of memory", what);
            }
            v = nv;
            cap *= 2;
        }
        v[cnt++] = (int32_t)x;
        p = end;
    }
    *ids = v;
    *n = cnt;
    return 0;
}

static int is_gguf_name(const char *s)
{
    size_t n = strlen(s);
    return n > 5 && strcmp(s + n - 5, ".gguf") == 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int em_cli_default_model(char *buf, size_t cap, em_err *err)
{
    DIR *d = opendir("models");
    if (d) {
        char *names[256];
        int n = 0;
        struct dirent *e;
        while ((e = readdir(d)) && n < 256)
            if (is_gguf_name(e->d_name) && (names[n] = strdup(e->d_name)))
                n++;
        closedir(d);
        qsort(names, (size_t)n, sizeof names[0], cmp_str);
        int found = n > 0;
        if (found)
            snprintf(buf, cap, "models/%s", names[0]);
        for (int i = 0; i < n; i++)
            free(names[i]);
        if (found)
            return 0;
    }
    static const char *demo[] = {
        "../shared/models/TinyStories-656K-Q8_0.gguf",
        EMBER_SOURCE_DIR "/../shared/models/TinyStories-656K-Q8_0.gguf",
    };
    for (size_t i = 0; i < sizeof demo / sizeof demo[0]; i++) {
        struct stat st;
        if (stat(demo[i], &st) == 0 && S_ISREG(st.st_mode)) {
            snprintf(buf, cap, "%s", demo[i]);
            return 0;
        }
    }
    return em_err_set(err, EM_ENOENT,
                      "no model: pass --model PATH, or put a .gguf file in ./models");
}

void em_cli_bytes(char *buf, size_t cap, uint64_t v)
{
    static const char *const unit[] = { "B", "KiB", "MiB", "GiB", "TiB" };
    double d = (double)v;
    int u = 0;
    while (d >= 1024 && u < 4) {
        d /= 1024;
        u++;
    }
    snprintf(buf, cap, u ? "%.1f %s" : "%.0f %s", d, unit[u]);
}

double em_cli_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int em_cli_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double em_cli_percentile(double *v, size_t n, double q)
{
    if (!n)
        return 0;
    qsort(v, n, sizeof *v, em_cli_cmp_double);
    size_t k = (size_t)ceil(q * (double)n);
    return v[k ? (k > n ? n : k) - 1 : 0];
}

int em_cli_parse_list(const char *cmd, const char *flag, const char *s, uint32_t *v, uint32_t max,
                      uint32_t *n, uint32_t hi)
{
    const char *all = s;
    *n = 0;
    if (!*s)
        return em_cli_fail(2, "%s: %s: empty list", cmd, flag);
    for (;;) {
        char *end;
        errno = 0;
        long x = *s >= '0' && *s <= '9' ? strtol(s, &end, 10) : 0;
        if (!(*s >= '0' && *s <= '9') || (*end && *end != ','))
            return em_cli_fail(2, "%s: %s: '%s' is not a comma-separated list of numbers", cmd, flag, all);
        if (errno || x < 1 || x > (long)hi)
            return em_cli_fail(2, "%s: %s: %.*s is out of range [1, %u]", cmd, flag, (int)(end - s), s, hi);
        if (*n == max)
            return em_cli_fail(2, "%s: %s: more than %u values", cmd, flag, max);
        v[(*n)++] = (uint32_t)x;
        if (!*end)
            return 0;
        s = end + 1;
    }
}

uint64_t em_cli_seed(long seed)
{
    uint64_t v = (uint64_t)seed;
    if (seed < 0) {
        if (getentropy(&v, sizeof v) != 0)
            v = (uint64_t)(em_cli_now() * 1e9);
        v &= 0xffffffffu;
    }
    return v;
}

em_sample_params em_cli_sample_params(const em_cli_sampling *s)
{
    em_sample_params p = em_sample_defaults();
    p.temp = (float)s->temp;
    p.top_k = (int32_t)s->top_k;
    p.top_p = (float)s->top_p;
    p.min_p = (float)s->min_p;
    p.seed = em_cli_seed(s->seed);
    p.presence_penalty = (float)s->presence;
    p.frequency_penalty = (float)s->frequency;
    p.repetition_penalty = (float)s->repeat;
    return p;
}

int em_cli_open_model(const char *cmd, const char *path, em_model **m, em_tokenizer **tok)
{
    em_err err = { 0 };
    *m = NULL;
    *tok = NULL;
    if (em_model_open(path, m, &err) || em_tokenizer_create(em_model_gguf(*m), tok, &err)) {
        em_model_close(*m);
        *m = NULL;
        return em_cli_fail_err(&err);
    }
    uint32_t n_tok = em_tokenizer_n_vocab(*tok), n_vocab = em_model_hparams(*m)->n_vocab;
    if (n_tok > n_vocab) {
        em_tokenizer_destroy(*tok);
        em_model_close(*m);
        *tok = NULL;
        *m = NULL;
        return em_cli_fail(2, "%s: %s: the tokenizer has %u tokens but the model only %u", cmd, path,
                           n_tok, n_vocab);
    }
    return 0;
}

int em_cli_same_vocab(const em_tokenizer *a, const em_tokenizer *b, em_err *err)
{
    uint32_t na = em_tokenizer_n_vocab(a), nb = em_tokenizer_n_vocab(b);
    if (na != nb)
        return em_err_set(err, EM_EINVAL, "its vocabulary has %u tokens, the model's %u", nb, na);
    for (uint32_t i = 0; i < na; i++) {
        const char *x = em_tokenizer_token_text(a, (int32_t)i), *y = em_tokenizer_token_text(b, (int32_t)i);
        if (strcmp(x ? x : "", y ? y : "") != 0)
            return em_err_set(err, EM_EINVAL, "token %u is \"%.40s\" in its vocabulary, \"%.40s\" in the model's",
                              i, y ? y : "", x ? x : "");
    }
    return 0;
}
