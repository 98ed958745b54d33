/* svg.c — shared SVG chart pieces (firmware/svg.h): escaping, nice axis
 * steps, panels with grid, ticks and labels. */
#include "firmware/svg.h"

#include <math.h>

void em_svg_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f); break;
        }
    }
}

double em_svg_nice_step(double span)
{
    if (!(span > 0))
        return 1;
    double raw = span / 5, p = pow(10, floor(log10(raw))), m = raw / p;
    return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
}

double em_svg_x(const em_svg_panel *p, double x) { return p->x0 + (x - p->lo_x) / (p->hi_x - p->lo_x) * p->w; }
double em_svg_y(const em_svg_panel *p, double y) { return p->y0 + p->h - (y - p->lo_y) / (p->hi_y - p->lo_y) * p->h; }

void em_svg_axis_range(double lo, double hi, int from_zero, double *out_lo, double *out_hi)
{
    if (from_zero)
        lo = 0;
    if (hi - lo < 1e-12 * (fabs(hi) + 1)) {
        double pad = hi != 0 ? fabs(hi) * 0.05 : 1;
        lo -= pad;
        hi += pad;
        if (from_zero)
            lo = 0;
    }
    double pad = (hi - lo) * 0.08;
    double step = em_svg_nice_step(hi - lo + 2 * pad);
    *out_lo = from_zero ? 0 : floor((lo - pad) / step) * step;
    *out_hi = ceil((hi + pad) / step) * step;
}

void em_svg_begin(FILE *f, int w, int h, const char *title)
{
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"sans-serif\">\n<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n",
            w, h, w, h, w, h);
    fprintf(f, "<text x=\"%d\" y=\"24\" font-size=\"15\" text-anchor=\"middle\">", w / 2);
    em_svg_text(f, title);
    fputs("</text>\n", f);
}

static void x_tick(FILE *f, const em_svg_panel *p, double x, double label)
{
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e3e3e3\"/>\n",
            em_svg_x(p, x), p->y0, em_svg_x(p, x), p->y0 + p->h);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\">%g</text>\n",
            em_svg_x(p, x), p->y0 + p->h + 15, label);
}

void em_svg_axes(FILE *f, const em_svg_panel *p, const char *title, const char *xlabel,
                 const char *ylabel, const double *xticks, int n_xticks, int x_log2)
{
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"14\" font-weight=\"bold\">", p->x0, p->y0 - 12);
    em_svg_text(f, title);
    fputs("</text>\n", f);
    double sx = em_svg_nice_step(p->hi_x - p->lo_x), sy = em_svg_nice_step(p->hi_y - p->lo_y);
    if (xticks)
        for (int i = 0; i < n_xticks; i++)
            x_tick(f, p, xticks[i], x_log2 ? exp2(xticks[i]) : xticks[i]);
    else
        for (double x = ceil(p->lo_x / sx) * sx; x <= p->hi_x + sx * 1e-6; x += sx)
            x_tick(f, p, x, fabs(x) < sx * 1e-6 ? 0.0 : x_log2 ? exp2(x) : x);
    for (double y = ceil(p->lo_y / sy) * sy; y <= p->hi_y + sy * 1e-6; y += sy) {
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e3e3e3\"/>\n",
                p->x0, em_svg_y(p, y), p->x0 + p->w, em_svg_y(p, y));
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\">%.4g</text>\n",
                p->x0 - 6, em_svg_y(p, y) + 4, fabs(y) < sy * 1e-6 ? 0.0 : y);
    }
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#888\"/>\n",
            p->x0, p->y0, p->w, p->h);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" text-anchor=\"middle\">", p->x0 + p->w / 2,
            p->y0 + p->h + 34);
    em_svg_text(f, xlabel);
    fputs("</text>\n", f);
    fprintf(f, "<text transform=\"translate(%.1f,%.1f) rotate(-90)\" font-size=\"12\" text-anchor=\"middle\">",
            p->x0 - 52, p->y0 + p->h / 2);
    em_svg_text(f, ylabel);
    fputs("</text>\n", f);
}
