/* ppl_report.c — the outputs of `ember perplexity --report`: the table on
 * the terminal, a CSV file, and an SVG chart of quality against file size
 * (two em_svg_panels: perplexity and mean KL divergence from the base), drawn here
 * with plain SVG elements so that nothing leaves the box. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "firmware/ppl.h"
#include "firmware/svg.h"

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

void em_ppl_report_table(FILE *f, const em_ppl_row *rows, int n, const char *device)
{
    fprintf(f, "\n%-8s %9s %7s %21s %10s %10s %9s %8s  %s\n", "type", "size MiB", "bits/w",
            "perplexity", "mean KL", "KL p99", "top-1", "tok/s", "file");
    for (int i = 0; i < n; i++) {
        const em_ppl_row *r = &rows[i];
        char ppl[48], kl[16], p99[16], top[16], tok[16];
        snprintf(ppl, sizeof ppl, "%.4f ± %.4f", r->r.ppl, r->r.ppl_se);
        if (i == 0) {
            snprintf(kl, sizeof kl, "(base)");
            snprintf(p99, sizeof p99, "-");
            snprintf(top, sizeof top, "-");
        } else {
            snprintf(kl, sizeof kl, "%.6f", r->r.kl_mean);
            snprintf(p99, sizeof p99, "%.5f", r->r.kl_p99);
            snprintf(top, sizeof top, "%.2f%%", 100 * r->r.top1);
        }
        if (r->tok_s > 0)
            snprintf(tok, sizeof tok, "%.1f", r->tok_s);
        else
            snprintf(tok, sizeof tok, "-");
        /* "±" is two bytes and one column: pad the field by one more byte */
        fprintf(f, "%-8s %9.2f %7.2f %22s %10s %10s %9s %8s  %s\n", r->type,
                (double)r->size / (1 << 20), r->bpw, ppl, kl, p99, top, tok, base_name(r->path));
    }
    if (device)
        fprintf(f, "decode tok/s: batch 1 on %s\n", device);
}

/* A CSV field: quoted when it holds a comma, quote or newline. */
static void csv_str(FILE *f, const char *s)
{
    if (!strpbrk(s, ",\"\n")) {
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

int em_ppl_report_csv(const char *path, const em_ppl_row *rows, int n, em_err *err)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return em_err_set(err, errno == ENOENT ? EM_ENOENT : EM_EIO, "%s: %s", path, strerror(errno));
    fprintf(f, "type,file,size_bytes,bits_per_weight,ppl,ppl_stderr,kl_mean,kl_stderr,kl_p99,top1,top1_stderr,decode_tok_s\n");
    for (int i = 0; i < n; i++) {
        const em_ppl_row *r = &rows[i];
        csv_str(f, r->type);
        fputc(',', f);
        csv_str(f, r->path);
        fprintf(f, ",%llu,%.4f,%.6f,%.6f,%.8f,%.8f,%.8f,%.6f,%.6f,%.2f\n", (unsigned long long)r->size,
                r->bpw, r->r.ppl, r->r.ppl_se, i ? r->r.kl_mean : 0.0, i ? r->r.kl_se : 0.0,
                i ? r->r.kl_p99 : 0.0, i ? r->r.top1 : 1.0, i ? r->r.top1_se : 0.0, r->tok_s);
    }
    if (fclose(f) != 0)
        return em_err_set(err, EM_EIO, "%s: write failed", path);
    return 0;
}

/* ---- SVG ------------------------------------------------------------------ */

/* Points (size, value) joined in order of size; the base in another colour. */
static void draw_series(FILE *f, const em_svg_panel *p, const em_ppl_row *rows, const int *order, int n, int kl)
{
    fputs("<polyline fill=\"none\" stroke=\"#4a7ab7\" stroke-width=\"1.5\" points=\"", f);
    for (int j = 0; j < n; j++) {
        const em_ppl_row *r = &rows[order[j]];
        double v = kl ? (order[j] ? r->r.kl_mean : 0) : r->r.ppl;
        fprintf(f, "%.1f,%.1f ", em_svg_x(p, (double)r->size / (1 << 20)), em_svg_y(p, v));
    }
    fputs("\"/>\n", f);
    double lx[64], ly[64];                    /* labels placed so far */
    for (int j = 0; j < n; j++) {
        const em_ppl_row *r = &rows[order[j]];
        double v = kl ? (order[j] ? r->r.kl_mean : 0) : r->r.ppl;
        double x = em_svg_x(p, (double)r->size / (1 << 20)), y = em_svg_y(p, v);
        double ty = y - 6;
        for (int again = 1; again;) {           /* move a label up until it overlaps no other */
            again = 0;
            for (int i = 0; i < j; i++) {
                if (fabs(lx[i] - (x + 6)) < 40 && fabs(ly[i] - ty) < 13) {
                    ty = ly[i] - 13;
                    again = 1;
                }
            }
        }
        lx[j] = x + 6;
        ly[j] = ty;
        if (!kl && r->r.ppl_se > 0)       /* the perplexity's standard error as a bar */
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#999\"/>\n", x,
                    em_svg_y(p, v - r->r.ppl_se), x, em_svg_y(p, v + r->r.ppl_se));
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"%s\"/>\n", x, y,
                order[j] == 0 ? "#c0392b" : "#4a7ab7");
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">", x + 6, ty);
        em_svg_text(f, r->type);
        fputs("</text>\n", f);
    }
}

int em_ppl_report_svg(const char *path, const em_ppl_row *rows, int n, const char *title, em_err *err)
{
    int order[64];
    if (n < 1 || n > 64)
        return em_err_set(err, EM_EINVAL, "%s: a chart takes 1 to 64 models", path);
    for (int i = 0; i < n; i++)
        order[i] = i;
    for (int i = 1; i < n; i++)              /* by size, for the joining line */
        for (int j = i; j > 0 && rows[order[j]].size < rows[order[j - 1]].size; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    double smin = 1e300, smax = 0, pmin = 1e300, pmax = -1e300, kmax = 0;
    for (int i = 0; i < n; i++) {
        double s = (double)rows[i].size / (1 << 20);
        smin = s < smin ? s : smin;
        smax = s > smax ? s : smax;
        pmin = fmin(pmin, rows[i].r.ppl - rows[i].r.ppl_se);
        pmax = fmax(pmax, rows[i].r.ppl + rows[i].r.ppl_se);
        if (i)
            kmax = fmax(kmax, rows[i].r.kl_mean);
    }
    em_svg_panel a = { 80, 60, 340, 250, 0, 0, 0, 0 }, b = { 540, 60, 340, 250, 0, 0, 0, 0 };
    em_svg_axis_range(smin, smax, 1, &a.lo_x, &a.hi_x);
    em_svg_axis_range(pmin, pmax, 0, &a.lo_y, &a.hi_y);
    b.lo_x = a.lo_x;
    b.hi_x = a.hi_x;
    em_svg_axis_range(0, kmax > 0 ? kmax : 1e-3, 1, &b.lo_y, &b.hi_y);

    FILE *f = fopen(path, "w");
    if (!f)
        return em_err_set(err, errno == ENOENT ? EM_ENOENT : EM_EIO, "%s: %s", path, strerror(errno));
    em_svg_begin(f, 920, 380, title);
    em_svg_axes(f, &a, "Perplexity (lower is better)", "file size (MiB)", "perplexity", NULL, 0, 0);
    draw_series(f, &a, rows, order, n, 0);
    em_svg_axes(f, &b, "KL from the base (lower is better)", "file size (MiB)",
                "mean KL divergence (nats)", NULL, 0, 0);
    draw_series(f, &b, rows, order, n, 1);
    fputs("<text x=\"460\" y=\"372\" font-size=\"11\" text-anchor=\"middle\" fill=\"#555\">red: the base model; "
          "bars: perplexity standard error</text>\n</svg>\n", f);
    if (fclose(f) != 0)
        return em_err_set(err, EM_EIO, "%s: write failed", path);
    return 0;
}
