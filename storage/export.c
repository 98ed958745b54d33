/* export.c — rendering a usage report: an aligned text table for people,
 * CSV (RFC 4180) for spreadsheets, JSON (jansson) for programs and the web
 * dashboard. One column table drives all three. */
#include "storage/storage_int.h"

#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { K_LABEL, K_INT, K_SHARE, K_MS, K_HOURS, K_MONEY, K_RATE } col_kind;

typedef struct {
    const char *name;
    col_kind    kind;
    size_t      off;        /* into em_usage_row */
    int         in_table;   /* 0: CSV/JSON only; 2: table only with a price */
} column;

#define COL(n, k, f, t) { n, k, offsetof(em_usage_row, f), t }
static const column cols[] = {
    COL("group",             K_LABEL, label,             1),
    COL("requests",          K_INT,   requests,          1),
    COL("prompt_tokens",     K_INT,   prompt_tokens,     1),
    COL("cached_tokens",     K_INT,   cached_tokens,     0),
    COL("cached_share",      K_SHARE, cached_share,      1),
    COL("completion_tokens", K_INT,   completion_tokens, 1),
    COL("ttft_p50_ms",       K_MS,    ttft_p50_ms,       1),
    COL("ttft_p99_ms",       K_MS,    ttft_p99_ms,       1),
    COL("tpot_p50_ms",       K_MS,    tpot_p50_ms,       1),
    COL("tpot_p99_ms",       K_MS,    tpot_p99_ms,       1),
    COL("gpu_hours",         K_HOURS, gpu_hours,         1),
    COL("cost",              K_MONEY, cost,              2),
    COL("cost_per_1m",       K_RATE,  cost_per_1m,       2),
    COL("queue_p50_ms",      K_MS,    queue_p50_ms,      0),
    COL("queue_p99_ms",      K_MS,    queue_p99_ms,      0),
};
#define N_COLS (sizeof cols / sizeof cols[0])

static int64_t cell_i(const em_usage_row *r, const column *c)
{
    int64_t v;
    memcpy(&v, (const char *)r + c->off, sizeof v);
    return v;
}

static double cell_d(const em_usage_row *r, const column *c)
{
    double v;
    memcpy(&v, (const char *)r + c->off, sizeof v);
    return v;
}

/* Text of one cell ("" for a missing value); csv: machine form. */
static void cell_text(const em_usage_row *r, const column *c, int csv, char *buf, size_t cap)
{
    if (c->kind == K_LABEL) {
        snprintf(buf, cap, "%s", r->label);
        return;
    }
    if (c->kind == K_INT) {
        snprintf(buf, cap, "%lld", (long long)cell_i(r, c));
        return;
    }
    double v = cell_d(r, c);
    if (isnan(v)) {
        snprintf(buf, cap, "%s", csv ? "" : "-");
        return;
    }
    switch (c->kind) {
    case K_SHARE:
        if (csv)
            snprintf(buf, cap, "%.4f", v);
        else
            snprintf(buf, cap, "%.1f%%", v * 100.0);
        break;
    case K_MS:    snprintf(buf, cap, "%.1f", v); break;
    case K_HOURS: snprintf(buf, cap, "%.2f", v); break;
    case K_MONEY: snprintf(buf, cap, csv ? "%.4f" : "%.2f", v); break;
    case K_RATE:  snprintf(buf, cap, csv || v < 100 ? "%.4f" : "%.2f", v); break;
    default:      buf[0] = 0; break;
    }
}

static int shown(const em_usage_report *rep, const column *c)
{
    return c->in_table == 1 || (c->in_table == 2 && rep->query.gpu_cost_per_hour >= 0);
}

static int write_table(const em_usage_report *rep, FILE *f)
{
    size_t w[N_COLS];
    char buf[160];
    size_t n_lines = rep->n_rows + 1;
    for (size_t c = 0; c < N_COLS; c++) {
        w[c] = strlen(cols[c].name);
        for (size_t i = 0; i < n_lines; i++) {
            const em_usage_row *r = i < rep->n_rows ? &rep->rows[i] : &rep->total;
            cell_text(r, &cols[c], 0, buf, sizeof buf);
            if (strlen(buf) > w[c])
                w[c] = strlen(buf);
        }
    }
    size_t total_w = 0;
    for (size_t c = 0; c < N_COLS; c++) {
        if (!shown(rep, &cols[c]))
            continue;
        fprintf(f, "%s%-*s", c ? "  " : "", (int)w[c], cols[c].name);
        total_w += w[c] + (c ? 2 : 0);
    }
    fputc('\n', f);
    for (size_t i = 0; i < n_lines; i++) {
        const em_usage_row *r = i < rep->n_rows ? &rep->rows[i] : &rep->total;
        if (i == rep->n_rows && rep->n_rows > 0) {
            for (size_t k = 0; k < total_w; k++)
                fputc('-', f);
            fputc('\n', f);
        }
        for (size_t c = 0; c < N_COLS; c++) {
            if (!shown(rep, &cols[c]))
                continue;
            cell_text(r, &cols[c], 0, buf, sizeof buf);
            if (cols[c].kind == K_LABEL)
                fprintf(f, "%-*s", (int)w[c], buf);
            else
                fprintf(f, "  %*s", (int)w[c], buf);
        }
        fputc('\n', f);
    }
    return 0;
}

static void csv_field(FILE *f, const char *s)
{
    if (!strpbrk(s, ",\"\r\n") && s[0] != ' ' && (!s[0] || s[strlen(s) - 1] != ' ')) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

/* Grouped reports list the groups only (a total row would be summed twice
 * by a spreadsheet); an ungrouped one is its total. */
static int write_csv(const em_usage_report *rep, FILE *f)
{
    char buf[160];
    for (size_t c = 0; c < N_COLS; c++)
        fprintf(f, "%s%s", c ? "," : "", cols[c].name);
    fputs("\r\n", f);
    size_t n = rep->query.group_by == EM_USAGE_BY_NONE ? 1 : rep->n_rows;
    for (size_t i = 0; i < n; i++) {
        const em_usage_row *r = rep->query.group_by == EM_USAGE_BY_NONE ? &rep->total
                                                                       : &rep->rows[i];
        for (size_t c = 0; c < N_COLS; c++) {
            if (c)
                fputc(',', f);
            cell_text(r, &cols[c], 1, buf, sizeof buf);
            csv_field(f, buf);
        }
        fputs("\r\n", f);
    }
    return 0;
}

/* Keep JSON numbers short and stable: round to what the table shows and a
 * little more. */
json_t *em_sto_json_num(double v, double scale)
{
    if (isnan(v) || isinf(v))
        return json_null();
    return json_real(round(v * scale) / scale);
}

static json_t *row_json(const em_usage_row *r)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    for (size_t c = 0; c < N_COLS; c++) {
        json_t *v = NULL;
        switch (cols[c].kind) {
        case K_LABEL: v = json_string(r->label); break;
        case K_INT:   v = json_integer((json_int_t)cell_i(r, &cols[c])); break;
        case K_SHARE: v = em_sto_json_num(cell_d(r, &cols[c]), 1e6); break;
        case K_MS:    v = em_sto_json_num(cell_d(r, &cols[c]), 1e3); break;
        case K_HOURS: v = em_sto_json_num(cell_d(r, &cols[c]), 1e6); break;
        case K_MONEY: v = em_sto_json_num(cell_d(r, &cols[c]), 1e4); break;
        case K_RATE:  v = em_sto_json_num(cell_d(r, &cols[c]), 1e6); break;
        }
        if (!v || json_object_set_new(o, cols[c].name, v)) {
            json_decref(o);
            return NULL;
        }
    }
    return o;
}

static json_t *opt_ms(int64_t ms)
{
    return ms > 0 ? json_integer((json_int_t)ms) : json_null();
}

int em_storage_usage_json(const em_usage_report *rep, char **out, em_err *err)
{
    int ret = 0, bad = 0;
    json_t *root = json_object(), *groups = json_array();
    *out = NULL;
    if (!root || !groups) {
        bad = 1;
    } else {
        bad |= json_object_set_new(root, "group_by", json_string(em_sto_group_by_name(rep->query.group_by)));
        bad |= json_object_set_new(root, "since_ms", opt_ms(rep->query.since_ms));
        bad |= json_object_set_new(root, "until_ms", opt_ms(rep->query.until_ms));
        if (rep->query.only_key)   /* one key's usage: which (0: requests without a key) */
            bad |= json_object_set_new(root, "key_id", json_integer((json_int_t)rep->query.key_id));
        bad |= json_object_set_new(root, "ledgers", json_integer((json_int_t)rep->n_dbs));
        bad |= json_object_set_new(root, "gpu_cost_per_hour",
                                   rep->query.gpu_cost_per_hour >= 0
                                       ? json_real(rep->query.gpu_cost_per_hour)
                                       : json_null());
        for (size_t i = 0; i < rep->n_rows && !bad; i++)
            bad |= json_array_append_new(groups, row_json(&rep->rows[i]));
        bad |= json_object_set(root, "groups", groups);
        bad |= json_object_set_new(root, "total", row_json(&rep->total));
    }
    if (!bad && !(*out = json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(12))))
        bad = 1;
    if (bad)
        ret = em_err_set(err, EM_ENOMEM, "usage: out of memory building JSON");
    json_decref(groups);
    json_decref(root);
    return ret;
}

int em_storage_usage_write(const em_usage_report *rep, em_usage_format fmt, FILE *f, em_err *err)
{
    int ret = 0;
    char *js = NULL;
    switch (fmt) {
    case EM_USAGE_TABLE: ret = write_table(rep, f); break;
    case EM_USAGE_CSV:   ret = write_csv(rep, f); break;
    case EM_USAGE_JSON:
        if ((ret = em_storage_usage_json(rep, &js, err)))
            goto done;
        fputs(js, f);
        fputc('\n', f);
        break;
    default:
        ret = em_err_set(err, EM_EINVAL, "usage: unknown output format");
        goto done;
    }
    if (ferror(f))
        ret = em_err_set(err, EM_EIO, "usage: write error");
done:
    free(js);
    return ret;
}
