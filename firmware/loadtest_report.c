/* loadtest_report.c — the outputs of `ember loadtest`: the table on the
 * terminal, one JSON document (shaped like `ember bench --users --json`: a
 * levels array and summary fields), and an SVG chart of throughput and the
 * p99 latencies against the number of users, drawn with firmware/svg.h. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "firmware/loadtest.h"
#include "firmware/svg.h"

/* x formatted as fmt into buf, or "-" when it is NAN. */
static const char *fmt_num(char *buf, size_t cap, const char *fmt, double x)
{
    if (isnan(x))
        snprintf(buf, cap, "-");
    else
        snprintf(buf, cap, fmt, x);
    return buf;
}

static uint32_t n_failed(const em_loadtest_level *l)
{
    uint32_t n = 0;
    for (int k = 0; k < EM_LT_N_ERR; k++)
        n += l->errors[k];
    return n;
}

void em_loadtest_report_table(FILE *f, const em_loadtest_opts *o, const em_loadtest_level *lv, uint32_t n,
                              long best)
{
    char model[600];   /* the server's name for it, printable */
    snprintf(model, sizeof model, "%s", o->model);
    em_err_escape(model, sizeof model);
    fprintf(f, "server      %s, model %s\n", o->url, model);
    fprintf(f, "requests    %u per user, prompts of %u-%u words, max_tokens %u-%u, temperature %g, seed %llu",
            o->requests_per_user, o->prompt_lo, o->prompt_hi, o->gen_lo, o->gen_hi, o->temperature,
            (unsigned long long)o->seed);
    if (o->background)
        fprintf(f, ", %u background users", o->background);
    fprintf(f, "\n\nusers   bg requests failed retries    tok/s   TTFT p50 / p99 ms    TPOT p50 / p99 ms  prompt tok"
               "  goodput tok/s   $/1M tok\n");
    for (uint32_t i = 0; i < n; i++) {
        const em_loadtest_level *l = &lv[i];
        char a[32], b[32], c[32], d[32], e[32], g[32], h[32];
        fprintf(f, "%5u %4u %8u %6u %7u %8.1f %9s / %7s %9s / %7s %10s %14s %10s\n", l->users, l->background,
                l->requests, n_failed(l), l->retries, l->tokens_per_s, fmt_num(a, sizeof a, "%.0f", l->ttft_p50_ms),
                fmt_num(b, sizeof b, "%.0f", l->ttft_p99_ms), fmt_num(c, sizeof c, "%.1f", l->tpot_p50_ms),
                fmt_num(d, sizeof d, "%.1f", l->tpot_p99_ms), fmt_num(e, sizeof e, "%.1f", l->prompt_tokens_mean),
                fmt_num(g, sizeof g, "%.1f", l->goodput_tokens_per_s),
                o->gpu_cost_per_hour < 0 ? "not given" : fmt_num(h, sizeof h, "%.3f", l->cost_per_1m));
    }
    for (uint32_t i = 0; i < n; i++) {
        const em_loadtest_level *l = &lv[i];
        for (int k = 0; k < EM_LT_N_ERR; k++)
            if (l->errors[k])
                fprintf(f, "failed at %u users: %u %s (first: %s)\n", l->users, l->errors[k],
                        em_loadtest_err_names[k], l->first_error[k]);
    }
    if (best < 0) {
        fprintf(f, "no SLO given (--slo-ttft-ms, --slo-tpot-ms): no goodput, no most users within it\n");
        return;
    }
    fprintf(f, "most users within");
    if (o->slo_ttft_ms >= 0)
        fprintf(f, " p99 TTFT <= %g ms", o->slo_ttft_ms);
    if (o->slo_ttft_ms >= 0 && o->slo_tpot_ms >= 0)
        fprintf(f, " and");
    if (o->slo_tpot_ms >= 0)
        fprintf(f, " p99 TPOT <= %g ms", o->slo_tpot_ms);
    fprintf(f, ": %ld\n", best);
}

/* ---- JSON ------------------------------------------------------------------- */

static json_t *num(double x)
{
    return isnan(x) || isinf(x) ? json_null() : json_real(x);
}

static json_t *level_json(const em_loadtest_level *l)
{
    json_t *errs = json_object(), *first = json_object();
    for (int k = 0; k < EM_LT_N_ERR; k++) {
        json_object_set_new(errs, em_loadtest_err_names[k], json_integer(l->errors[k]));
        if (l->errors[k])
            json_object_set_new(first, em_loadtest_err_names[k], json_string(l->first_error[k]));
    }
    json_t *e = json_pack("{s:i, s:i, s:i, s:i, s:o, s:o, s:i, s:i, s:I, s:f, s:f}", "users", (int)l->users,
                          "background", (int)l->background, "requests", (int)l->requests,
                          "completed", (int)l->completed, "errors", errs, "first_errors", first,
                          "retries", (int)l->retries, "background_requests", (int)l->background_requests,
                          "output_tokens", (json_int_t)l->output_tokens, "wall_s", l->wall_s,
                          "tokens_per_s", l->tokens_per_s);
    if (!e)
        return NULL;
    json_object_set_new(e, "ttft_p50_ms", num(l->ttft_p50_ms));
    json_object_set_new(e, "ttft_p99_ms", num(l->ttft_p99_ms));
    json_object_set_new(e, "tpot_p50_ms", num(l->tpot_p50_ms));
    json_object_set_new(e, "tpot_p99_ms", num(l->tpot_p99_ms));
    json_object_set_new(e, "prompt_tokens_mean", num(l->prompt_tokens_mean));
    json_object_set_new(e, "goodput_requests", l->within_slo < 0 ? json_null() : json_integer(l->goodput_requests));
    json_object_set_new(e, "goodput_tokens_per_s", num(l->goodput_tokens_per_s));
    json_object_set_new(e, "cost_per_1m_tokens", num(l->cost_per_1m));
    json_object_set_new(e, "within_slo", l->within_slo < 0 ? json_null() : json_boolean(l->within_slo));
    return e;
}

int em_loadtest_report_json(FILE *f, const em_loadtest_opts *o, const em_loadtest_level *lv, uint32_t n,
                            long best, em_err *err)
{
    json_t *arr = json_array();
    for (uint32_t i = 0; arr && i < n; i++)
        if (json_array_append_new(arr, level_json(&lv[i])))
            break;
    json_t *root = json_pack("{s:s, s:s, s:[i,i], s:[i,i], s:i, s:i, s:f, s:I, s:o, s:o, s:o, s:o, s:o}",
                             "url", o->url, "model", o->model, "prompt_tokens", (int)o->prompt_lo,
                             (int)o->prompt_hi, "gen_tokens", (int)o->gen_lo, (int)o->gen_hi,
                             "requests_per_user", (int)o->requests_per_user, "background", (int)o->background,
                             "temperature", o->temperature, "seed", (json_int_t)o->seed,
                             "slo_ttft_ms", o->slo_ttft_ms < 0 ? json_null() : json_real(o->slo_ttft_ms),
                             "slo_tpot_ms", o->slo_tpot_ms < 0 ? json_null() : json_real(o->slo_tpot_ms),
                             "gpu_cost_per_hour",
                             o->gpu_cost_per_hour < 0 ? json_null() : json_real(o->gpu_cost_per_hour),
                             "levels", arr, "max_users_within_slo", best < 0 ? json_null() : json_integer(best));
    char *txt = root && json_array_size(arr) == n ? json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    int rc = 0;
    if (txt)
        fprintf(f, "%s\n", txt);
    else
        rc = em_err_set(err, EM_ENOMEM, "loadtest: out of memory for the JSON");
    free(txt);
    json_decref(root);
    return rc;
}

/* ---- SVG -------------------------------------------------------------------- */

typedef struct {
    const char *name, *colour;
    int         dashed;
} series;

/* The points (x[i], y[i]) in order, NAN values leaving gaps. */
static void draw_series(FILE *f, const em_svg_panel *p, const double *x, const double *y, uint32_t n,
                        const series *s)
{
    int open = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (isnan(y[i])) {
            if (open)
                fputs("\"/>\n", f);
            open = 0;
            continue;
        }
        if (!open)
            fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\"%s points=\"", s->colour,
                    s->dashed ? " stroke-dasharray=\"5,3\"" : "");
        open = 1;
        fprintf(f, "%.1f,%.1f ", em_svg_x(p, x[i]), em_svg_y(p, y[i]));
    }
    if (open)
        fputs("\"/>\n", f);
    for (uint32_t i = 0; i < n; i++)
        if (!isnan(y[i]))
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"/>\n", em_svg_x(p, x[i]),
                    em_svg_y(p, y[i]), s->colour);
}

typedef struct {
    const char *title, *ylabel;
    double     *y[2];      /* [n] each; y[1] may be NULL */
    series      s[2];
    double      slo;       /* negative: none */
} chart;

static void draw_chart(FILE *f, em_svg_panel *p, const chart *c, const double *x, uint32_t n,
                       const double *ticks, int n_ticks)
{
    double hi = c->slo > 0 ? c->slo : 0;
    for (int k = 0; k < 2; k++)
        for (uint32_t i = 0; c->y[k] && i < n; i++)
            if (!isnan(c->y[k][i]) && c->y[k][i] > hi)
                hi = c->y[k][i];
    em_svg_axis_range(0, hi > 0 ? hi : 1, 1, &p->lo_y, &p->hi_y);
    em_svg_axes(f, p, c->title, "concurrent users", c->ylabel, ticks, n_ticks, 1);
    if (c->slo >= 0)
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#c0392b\" "
                   "stroke-dasharray=\"2,3\"/>\n", p->x0, em_svg_y(p, c->slo), p->x0 + p->w, em_svg_y(p, c->slo));
    double ly = p->y0 + p->h + 52;
    for (int k = 0; k < 2; k++) {
        if (!c->y[k])
            continue;
        draw_series(f, p, x, c->y[k], n, &c->s[k]);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" fill=\"%s\">%s</text>\n", p->x0 + k * 120.0, ly,
                c->s[k].colour, c->s[k].name);
    }
    if (c->slo >= 0)
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" fill=\"#c0392b\">SLO %g ms</text>\n",
                p->x0 + 240, ly, c->slo);
}

static int by_users(const void *a, const void *b)
{
    const em_loadtest_level *x = *(const em_loadtest_level *const *)a, *y = *(const em_loadtest_level *const *)b;
    return x->users < y->users ? -1 : x->users > y->users ? 1 : x < y ? -1 : x > y;   /* stable */
}

int em_loadtest_report_svg(const char *path, const em_loadtest_opts *o, const em_loadtest_level *lv, uint32_t n,
                           em_err *err)
{
    const em_loadtest_level *ord[EM_LOADTEST_MAX_LEVELS];
    double x[EM_LOADTEST_MAX_LEVELS], ticks[EM_LOADTEST_MAX_LEVELS];
    double v[6][EM_LOADTEST_MAX_LEVELS];   /* tok/s, goodput, TTFT p50/p99, TPOT p50/p99 */
    int n_ticks = 0;
    if (n < 1 || n > EM_LOADTEST_MAX_LEVELS)
        return em_err_set(err, EM_EINVAL, "%s: a chart takes 1 to %d levels", path, EM_LOADTEST_MAX_LEVELS);
    for (uint32_t i = 0; i < n; i++)
        ord[i] = &lv[i];
    qsort(ord, n, sizeof ord[0], by_users);   /* for the joining lines */
    for (uint32_t i = 0; i < n; i++) {
        const em_loadtest_level *l = ord[i];
        x[i] = log2(l->users);
        if (!n_ticks || ticks[n_ticks - 1] != x[i])
            ticks[n_ticks++] = x[i];
        v[0][i] = l->tokens_per_s;
        v[1][i] = l->goodput_tokens_per_s;
        v[2][i] = l->ttft_p50_ms;
        v[3][i] = l->ttft_p99_ms;
        v[4][i] = l->tpot_p50_ms;
        v[5][i] = l->tpot_p99_ms;
    }
    int slo = o->slo_ttft_ms >= 0 || o->slo_tpot_ms >= 0;
    chart charts[3] = {
        { "Output tokens/s", "tokens/s", { v[0], slo ? v[1] : NULL },
          { { "all requests", "#4a7ab7", 0 }, { "goodput (within SLO)", "#2e8b57", 1 } }, -1 },
        { "Time to first token", "ms", { v[3], v[2] },
          { { "p99", "#4a7ab7", 0 }, { "p50", "#8fb0d9", 1 } }, o->slo_ttft_ms },
        { "Time per output token", "ms", { v[5], v[4] },
          { { "p99", "#4a7ab7", 0 }, { "p50", "#8fb0d9", 1 } }, o->slo_tpot_ms },
    };
    FILE *f = fopen(path, "w");
    if (!f)
        return em_err_set(err, errno == ENOENT ? EM_ENOENT : EM_EIO, "%s: %s", path, strerror(errno));
    char title[600];
    snprintf(title, sizeof title, "ember loadtest: %.250s, model %.250s", o->url, o->model);
    em_svg_begin(f, 1200, 400, title);
    for (int k = 0; k < 3; k++) {
        em_svg_panel p = { 80 + 400.0 * k, 60, 290, 250, x[0] - 0.5, x[n - 1] + 0.5, 0, 1 };
        draw_chart(f, &p, &charts[k], x, n, ticks, n_ticks);
    }
    fprintf(f, "<text x=\"600\" y=\"392\" font-size=\"11\" text-anchor=\"middle\" fill=\"#555\">"
               "%u requests per user, %u background users; users on a log scale</text>\n</svg>\n",
            o->requests_per_user, o->background);
    if (ferror(f) | (fclose(f) != 0))
        return em_err_set(err, EM_EIO, "%s: write failed", path);
    return 0;
}
