/* svg.h — line and scatter charts as standalone SVG, drawn by tokbench
 * (no script, no external file): axes with ticks and grid lines, linear or
 * log scales, a legend, series as lines with markers, points, horizontal
 * and vertical reference lines, step curves (CDFs), and vertical error
 * whiskers.
 *
 *   tb_chart *c = tb_chart_new("tok/s vs steps", "steps", "tokens/s");
 *   tb_chart_log(c, 1, 0);
 *   int s = tb_chart_series(c, "llada", TB_SERIES_LINE);
 *   tb_chart_point(c, s, 8, 812.5);
 *   tb_chart_write(c, stdout);
 *
 * Every text (titles, labels, legend) is XML-escaped on output. */
#ifndef TB_SVG_H
#define TB_SVG_H

#include <stddef.h>
#include <stdio.h>

/* Series colours and marker shapes: series i of a chart is drawn in
 * colour i % TB_SVG_COLOURS with shape i % TB_SVG_SHAPES (coprime), so
 * the first TB_SVG_STYLES series each have their own (colour, shape)
 * pair and the first TB_SVG_COLOURS their own colour. A chart draws no
 * more series than that: it says under its legend how many it left out. */
#define TB_SVG_COLOURS 7
#define TB_SVG_SHAPES 5
#define TB_SVG_STYLES (TB_SVG_COLOURS * TB_SVG_SHAPES)

typedef enum tb_series_style {
    TB_SERIES_LINE,   /* points joined in the order given, with markers */
    TB_SERIES_POINTS, /* markers only */
    TB_SERIES_HLINE,  /* a dashed horizontal reference at the first point's y */
    TB_SERIES_STEP,   /* a staircase through the points (for CDFs), no markers */
    TB_SERIES_VLINE,  /* a dashed vertical reference at the first point's x
                         (its y is not drawn; a tip names it on hover) */
} tb_series_style;

typedef struct tb_chart tb_chart;

tb_chart *tb_chart_new(const char *title, const char *x_label, const char *y_label);
void tb_chart_free(tb_chart *c);

/* Log10 scales (non-positive values are then left out). Default: linear. */
void tb_chart_log(tb_chart *c, int log_x, int log_y);
/* A fixed y range (e.g. 0..1 for a fraction); ticks at nice steps. */
void tb_chart_y_range(tb_chart *c, double lo, double hi);
/* Log y when the values (all positive) span more than `ratio` (e.g. 30:
 * an AR engine at 20k tok/s beside a diffusion one at 700), else linear. */
void tb_chart_auto_log_y(tb_chart *c, double ratio);
/* A linear y axis starts at 0 by default (honest bars of throughput);
 * 0 here fits the axis to the data instead. */
void tb_chart_y_from_zero(tb_chart *c, int on);
/* Ticks on x exactly at these values (e.g. the step counts swept), with
 * these labels (NULL: the numbers). Copied. */
void tb_chart_x_ticks(tb_chart *c, const double *v, const char *const *labels, size_t n);

/* A new series (its colour and marker follow its index); returns its id. */
int tb_chart_series(tb_chart *c, const char *name, tb_series_style style);
void tb_chart_point(tb_chart *c, int series, double x, double y);
/* A point with a vertical whisker from lo to hi (e.g. a 95% CI). */
void tb_chart_point_err(tb_chart *c, int series, double x, double y, double lo, double hi);

/* A point with a small text label beside it (e.g. "steps 8"). */
void tb_chart_point_label(tb_chart *c, int series, double x, double y, const char *label);
/* A point whose label shows only on hover (an SVG <title>), not drawn. */
void tb_chart_point_tip(tb_chart *c, int series, double x, double y, const char *tip);

/* A line of text under the legend (e.g. what a log axis leaves out);
 * wrapped to the chart's width. Copied. */
void tb_chart_note(tb_chart *c, const char *text);

/* Number of points drawn so far in all series (0: nothing to show). */
size_t tb_chart_points(const tb_chart *c);

/* The chart as an <svg> element (no XML prolog: it is embedded in HTML).
 * The root tells the axes it chose, for tests and tools:
 *   data-x-scale, data-y-scale   "linear" or "log"
 *   data-x-lo, data-x-hi, ...    the ends of each axis, in data units
 *   data-x-ticks, data-y-ticks   the tick values, space-separated
 * and each series group its style: data-colour and data-marker
 * (circle, square, triangle, diamond, triangle-down). A title longer
 * than the width is wrapped (up to 3 lines; the rest cut with an
 * ellipsis, whole in the <title>). */
void tb_chart_write(const tb_chart *c, FILE *out);

/* &, <, >, " and ' as entities: for SVG and HTML text and attributes. */
void tb_xml_escape(FILE *out, const char *s);

/* A compact tick label: 3 significant digits, k/M for large values. */
void tb_svg_number(char *buf, size_t size, double v);

#endif
