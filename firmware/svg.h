/* svg.h — the pieces of the hand-written SVG charts that ember's reports
 * share (`perplexity --report --svg`, `loadtest --svg`): text escaping, axis
 * ranges on "nice" steps, and a panel with its grid, ticks and labels. Plain
 * SVG elements written with fprintf, so that no library and nothing outside
 * the box is needed to draw or to view them. All pointers are borrowed. */
#ifndef EM_SVG_H
#define EM_SVG_H

#include <stdio.h>

typedef struct {
    double x0, y0, w, h;              /* plot area in pixels */
    double lo_x, hi_x, lo_y, hi_y;    /* data range it shows */
} em_svg_panel;

/* s written as XML character data or attribute text (& < > " escaped). */
void em_svg_text(FILE *f, const char *s);

/* A "nice" tick step (1, 2 or 5 times a power of ten) for about 5 ticks over span. */
double em_svg_nice_step(double span);

/* Axis range [lo, hi] widened to whole steps, with a little room; from 0 when from_zero. */
void em_svg_axis_range(double lo, double hi, int from_zero, double *out_lo, double *out_hi);

/* Pixel position of data x / y in p. */
double em_svg_x(const em_svg_panel *p, double x);
double em_svg_y(const em_svg_panel *p, double y);

/* "<?xml ...><svg ...>" of a w x h white canvas with title centred on top. */
void em_svg_begin(FILE *f, int w, int h, const char *title);

/* The panel's title, grid, ticks, frame and axis labels. The x ticks are
 * nice steps when xticks is NULL, else the n_xticks values given; with
 * x_log2 the data x is log2 of what the labels show (2^x is printed). */
void em_svg_axes(FILE *f, const em_svg_panel *p, const char *title, const char *xlabel,
                 const char *ylabel, const double *xticks, int n_xticks, int x_log2);

#endif
