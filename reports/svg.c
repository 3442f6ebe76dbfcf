/* svg.c — see svg.h. Coordinates are SVG user units (= CSS px at the
 * default size); every chart is 640 wide, taller when its legend wraps. */
#define _GNU_SOURCE
#include "svg.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

typedef struct pt {
    double x, y, lo, hi; /* lo/hi: NaN without a whisker */
    char *label;         /* NULL: none */
    int tip_only;        /* label shown on hover only, not drawn */
} pt;

typedef struct series {
    char *name;
    tb_series_style style;
    pt *p;
    size_t n;
} series;

struct tb_chart {
    char *title, *x_label, *y_label;
    int log_x, log_y, y_zero;
    double auto_log_y; /* > 0: log y when max/min exceeds it */
    double y_lo, y_hi; /* fixed y range when y_lo < y_hi */
    double *xt;
    char **xt_label;
    size_t n_xt;
    series *s;
    size_t n_s;
};

/* Okabe–Ito colours (distinguishable with colour blindness), plus marker
 * shapes that cycle at another period so colour is never the only cue. */
static const char *const palette[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000"};
_Static_assert(sizeof palette / sizeof *palette == TB_SVG_COLOURS, "svg.h's TB_SVG_COLOURS is the palette's size");
#define N_SHAPES 4

enum { WIDTH = 640, PLOT_H = 250, LEFT = 72, RIGHT = 20, TOP = 40, BOTTOM = 52 };
#define FONT "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\""

tb_chart *tb_chart_new(const char *title, const char *x_label, const char *y_label)
{
    tb_chart *c = tb_xcalloc(1, sizeof *c);
    c->title = tb_xstrdup(title ? title : "");
    c->x_label = tb_xstrdup(x_label ? x_label : "");
    c->y_label = tb_xstrdup(y_label ? y_label : "");
    c->y_zero = 1;
    return c;
}

void tb_chart_free(tb_chart *c)
{
    if (!c)
        return;
    free(c->title);
    free(c->x_label);
    free(c->y_label);
    for (size_t i = 0; i < c->n_xt; i++)
        free(c->xt_label[i]);
    free(c->xt);
    free(c->xt_label);
    for (size_t i = 0; i < c->n_s; i++) {
        for (size_t k = 0; k < c->s[i].n; k++)
            free(c->s[i].p[k].label);
        free(c->s[i].name);
        free(c->s[i].p);
    }
    free(c->s);
    free(c);
}

void tb_chart_log(tb_chart *c, int log_x, int log_y)
{
    c->log_x = log_x;
    c->log_y = log_y;
}

void tb_chart_y_range(tb_chart *c, double lo, double hi)
{
    c->y_lo = lo;
    c->y_hi = hi;
}

void tb_chart_auto_log_y(tb_chart *c, double ratio)
{
    c->auto_log_y = ratio;
}

void tb_chart_y_from_zero(tb_chart *c, int on)
{
    c->y_zero = on;
}

void tb_chart_x_ticks(tb_chart *c, const double *v, const char *const *labels, size_t n)
{
    c->xt = tb_xrealloc(c->xt, (n ? n : 1) * sizeof *c->xt);
    c->xt_label = tb_xrealloc(c->xt_label, (n ? n : 1) * sizeof *c->xt_label);
    for (size_t i = 0; i < n; i++) {
        c->xt[i] = v[i];
        char buf[32];
        if (!labels || !labels[i])
            tb_svg_number(buf, sizeof buf, v[i]);
        c->xt_label[i] = tb_xstrdup(labels && labels[i] ? labels[i] : buf);
    }
    c->n_xt = n;
}

int tb_chart_series(tb_chart *c, const char *name, tb_series_style style)
{
    c->s = tb_xrealloc(c->s, (c->n_s + 1) * sizeof *c->s);
    c->s[c->n_s] = (series){.name = tb_xstrdup(name ? name : ""), .style = style};
    return (int)c->n_s++;
}

void tb_chart_point_err(tb_chart *c, int series_id, double x, double y, double lo, double hi)
{
    if (series_id < 0 || (size_t)series_id >= c->n_s || !isfinite(x) || !isfinite(y))
        return;
    series *s = &c->s[series_id];
    s->p = tb_xrealloc(s->p, (s->n + 1) * sizeof *s->p);
    s->p[s->n++] = (pt){x, y, lo, hi, NULL, 0};
}

void tb_chart_point_label(tb_chart *c, int series_id, double x, double y, const char *label)
{
    tb_chart_point(c, series_id, x, y);
    series *s = series_id >= 0 && (size_t)series_id < c->n_s ? &c->s[series_id] : NULL;
    if (s && s->n && s->p[s->n - 1].x == x && s->p[s->n - 1].y == y && label)
        s->p[s->n - 1].label = tb_xstrdup(label);
}

void tb_chart_point_tip(tb_chart *c, int series_id, double x, double y, const char *tip)
{
    tb_chart_point_label(c, series_id, x, y, tip);
    series *s = series_id >= 0 && (size_t)series_id < c->n_s ? &c->s[series_id] : NULL;
    if (s && s->n && s->p[s->n - 1].label && s->p[s->n - 1].x == x && s->p[s->n - 1].y == y)
        s->p[s->n - 1].tip_only = 1;
}

void tb_chart_point(tb_chart *c, int series_id, double x, double y)
{
    tb_chart_point_err(c, series_id, x, y, NAN, NAN);
}

size_t tb_chart_points(const tb_chart *c)
{
    size_t n = 0;
    for (size_t i = 0; i < c->n_s; i++)
        n += c->s[i].n;
    return n;
}

void tb_xml_escape(FILE *out, const char *s)
{
    for (; s && *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", out); break;
        case '<': fputs("&lt;", out); break;
        case '>': fputs("&gt;", out); break;
        case '"': fputs("&quot;", out); break;
        case '\'': fputs("&#39;", out); break;
        default:
            /* Control characters are not allowed in XML 1.0 text. */
            if ((unsigned char)*s < 0x20 && *s != '\n' && *s != '\t' && *s != '\r')
                fputc(' ', out);
            else
                fputc(*s, out);
        }
    }
}

void tb_svg_number(char *buf, size_t size, double v)
{
    double a = fabs(v);
    if (a >= 1e6)
        snprintf(buf, size, "%.3gM", v / 1e6);
    else if (a >= 1e4)
        snprintf(buf, size, "%.3gk", v / 1e3);
    else /* 4 digits: 2500 stays 2500, not 2.5e+03 */
        snprintf(buf, size, "%.4g", v);
}

/* ---------------------------------------------------------- scales */

typedef struct axis {
    int log;
    double t0, t1;   /* the range in scale units (log10 when log) */
    double *ticks;   /* values */
    char **labels;   /* NULL: numbers */
    size_t n_ticks;
} axis;

static double to_t(const axis *a, double v)
{
    return a->log ? log10(v) : v;
}

/* 1, 2 or 5 times a power of ten, near range / 5. */
static double nice_step(double range)
{
    double raw = range / 5, p = pow(10, floor(log10(raw))), f = raw / p;
    return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * p;
}

static void add_tick(axis *a, double v)
{
    a->ticks = tb_xrealloc(a->ticks, (a->n_ticks + 1) * sizeof *a->ticks);
    a->ticks[a->n_ticks++] = v;
}

static void axis_fit(axis *a, double lo, double hi, int from_zero)
{
    if (!(lo <= hi)) { /* no data */
        lo = a->log ? 1 : 0;
        hi = a->log ? 10 : 1;
    }
    if (a->log) {
        double l0 = log10(lo), l1 = log10(hi), pad = (l1 - l0) * 0.06;
        if (l1 - l0 < 0.3) {
            pad = (0.3 - (l1 - l0)) / 2 + 0.02;
        }
        a->t0 = l0 - pad;
        a->t1 = l1 + pad;
        if (a->n_ticks)
            return;
        double span = a->t1 - a->t0;
        static const double m125[] = {1, 2, 5}, m1[] = {1}, m19[] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
        const double *mult = span > 3 ? m1 : span > 1 ? m125 : m19;
        size_t nm = span > 3 ? 1 : span > 1 ? 3 : 9;
        for (int d = (int)floor(a->t0); d <= (int)ceil(a->t1); d++)
            for (size_t k = 0; k < nm; k++) {
                double v = mult[k] * pow(10, d), t = log10(v);
                if (t >= a->t0 - 1e-9 && t <= a->t1 + 1e-9)
                    add_tick(a, v);
            }
        return;
    }
    if (a->n_ticks) { /* explicit ticks: pad so no point sits on an edge */
        double pad = (hi - lo) * 0.06;
        if (pad == 0)
            pad = lo == 0 ? 1 : fabs(lo) * 0.1;
        a->t0 = lo - pad;
        a->t1 = hi + pad;
        return;
    }
    /* A little room so no point or label sits on the frame. */
    double room = (hi - lo) * 0.04;
    hi += room;
    if (!from_zero)
        lo -= room;
    if (from_zero && lo > 0)
        lo = 0;
    if (from_zero && hi < 0)
        hi = 0;
    if (hi - lo <= 0) {
        double d = lo == 0 ? 1 : fabs(lo) * 0.5;
        lo -= d;
        hi += d;
        if (from_zero && lo < 0 && hi > 0 && lo + d >= 0)
            lo = 0;
    }
    double step = nice_step(hi - lo);
    a->t0 = floor(lo / step + 1e-9) * step;
    a->t1 = ceil(hi / step - 1e-9) * step;
    for (double v = a->t0; v <= a->t1 + step * 1e-6; v += step)
        add_tick(a, fabs(v) < step * 1e-9 ? 0 : v);
}

static double px_x(const axis *a, double v)
{
    return LEFT + (to_t(a, v) - a->t0) / (a->t1 - a->t0) * (WIDTH - LEFT - RIGHT);
}

static double px_y(const axis *a, double v)
{
    return TOP + PLOT_H - (to_t(a, v) - a->t0) / (a->t1 - a->t0) * PLOT_H;
}

static int usable(int log, double v)
{
    return isfinite(v) && (!log || v > 0);
}

/* ---------------------------------------------------------- drawing */

static void marker(FILE *out, int shape, double x, double y, const char *color)
{
    switch (shape % N_SHAPES) {
    case 0:
        fprintf(out, "<circle class=\"marker\" cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"/>", x, y, color);
        break;
    case 1:
        fprintf(out, "<rect class=\"marker\" x=\"%.1f\" y=\"%.1f\" width=\"7\" height=\"7\" fill=\"%s\"/>", x - 3.5,
                y - 3.5, color);
        break;
    case 2:
        fprintf(out, "<path class=\"marker\" d=\"M%.1f %.1fL%.1f %.1fL%.1f %.1fZ\" fill=\"%s\"/>", x, y - 4.5, x + 4,
                y + 3, x - 4, y + 3, color);
        break;
    default:
        fprintf(out, "<path class=\"marker\" d=\"M%.1f %.1fL%.1f %.1fL%.1f %.1fL%.1f %.1fZ\" fill=\"%s\"/>", x,
                y - 4.5, x + 4.5, y, x, y + 4.5, x - 4.5, y, color);
    }
}

static size_t text_width(const char *s)
{
    size_t w = 0;
    for (; *s; s++)
        w += ((unsigned char)*s & 0xC0) != 0x80;
    return w * 7; /* about 7 px per character at 12 px */
}

/* Legend rows: items laid left to right, wrapped at the chart's width. */
static int legend_rows(const tb_chart *c)
{
    int rows = c->n_s ? 1 : 0;
    double x = LEFT;
    for (size_t i = 0; i < c->n_s; i++) {
        double w = 30 + (double)text_width(c->s[i].name) + 18;
        if (x + w > WIDTH - RIGHT && x > LEFT) {
            rows++;
            x = LEFT;
        }
        x += w;
    }
    return rows;
}

static void write_series(FILE *out, const tb_chart *c, size_t i, const axis *ax, const axis *ay)
{
    const series *s = &c->s[i];
    const char *color = palette[i % TB_ARRAY_LEN(palette)];
    fputs("<g class=\"series-group\" data-series=\"", out);
    tb_xml_escape(out, s->name);
    fputs("\">", out);
    if (s->style == TB_SERIES_HLINE) {
        if (s->n && usable(ay->log, s->p[0].y))
            fprintf(out,
                    "<path class=\"series reference\" d=\"M%d %.1fH%d\" stroke=\"%s\" stroke-width=\"2\""
                    " stroke-dasharray=\"7 4\" fill=\"none\"/>",
                    LEFT, px_y(ay, s->p[0].y), WIDTH - RIGHT, color);
        fputs("</g>\n", out);
        return;
    }
    if (s->style == TB_SERIES_VLINE) {
        if (s->n && usable(ax->log, s->p[0].x)) {
            fprintf(out,
                    "<path class=\"series reference vertical\" d=\"M%.1f %dV%d\" stroke=\"%s\" stroke-width=\"2\""
                    " stroke-dasharray=\"3 3\" fill=\"none\">",
                    px_x(ax, s->p[0].x), TOP, TOP + PLOT_H, color);
            if (s->p[0].label) {
                fputs("<title>", out);
                tb_xml_escape(out, s->p[0].label);
                fputs("</title>", out);
            }
            fputs("</path>", out);
        }
        fputs("</g>\n", out);
        return;
    }
    if (s->style == TB_SERIES_LINE || s->style == TB_SERIES_STEP) {
        tb_str d = {0};
        int pen = 0;
        for (size_t k = 0; k < s->n; k++) {
            const pt *p = &s->p[k];
            if (!usable(ax->log, p->x) || !usable(ay->log, p->y)) {
                pen = 0; /* a gap where a value cannot be drawn */
                continue;
            }
            double x = px_x(ax, p->x), y = px_y(ay, p->y);
            if (!pen)
                tb_str_appendf(&d, "M%.1f %.1f", x, y);
            else if (s->style == TB_SERIES_STEP)
                tb_str_appendf(&d, "H%.1fV%.1f", x, y);
            else
                tb_str_appendf(&d, "L%.1f %.1f", x, y);
            pen = 1;
        }
        if (d.len)
            fprintf(out, "<path class=\"series\" d=\"%s\" stroke=\"%s\" stroke-width=\"2\" fill=\"none\"/>", d.s,
                    color);
        tb_str_free(&d);
    }
    for (size_t k = 0; k < s->n; k++) {
        const pt *p = &s->p[k];
        if (!usable(ax->log, p->x) || !usable(ay->log, p->y))
            continue;
        double x = px_x(ax, p->x), y = px_y(ay, p->y);
        if (usable(ay->log, p->lo) && usable(ay->log, p->hi) && p->hi > p->lo) {
            double y0 = px_y(ay, p->lo), y1 = px_y(ay, p->hi);
            fprintf(out,
                    "<path class=\"whisker\" d=\"M%.1f %.1fV%.1fM%.1f %.1fH%.1fM%.1f %.1fH%.1f\" stroke=\"%s\""
                    " stroke-width=\"1.2\" fill=\"none\"/>",
                    x, y0, y1, x - 3, y0, x + 3, x - 3, y1, x + 3, color);
        }
        if (s->style != TB_SERIES_STEP)
            marker(out, (int)i, x, y, color);
        if (p->label && p->tip_only) { /* a hover target over the marker */
            fprintf(out, "<circle class=\"point-tip\" cx=\"%.1f\" cy=\"%.1f\" r=\"6\" fill=\"transparent\"><title>",
                    x, y);
            tb_xml_escape(out, p->label);
            fputs("</title></circle>", out);
        } else if (p->label) { /* beside the point, on the side with room */
            int left = x > LEFT + (WIDTH - LEFT - RIGHT) * 0.7;
            fprintf(out, "<text class=\"point-label\" x=\"%.1f\" y=\"%.1f\" font-size=\"10\" fill=\"%s\"%s>",
                    left ? x - 6 : x + 6, y < TOP + 14 ? y + 14 : y - 6, color, left ? " text-anchor=\"end\"" : "");
            tb_xml_escape(out, p->label);
            fputs("</text>", out);
        }
    }
    fputs("</g>\n", out);
}

/* Whether y values span more than c->auto_log_y (all positive). */
static int wide_y(const tb_chart *c)
{
    double lo = INFINITY, hi = 0;
    for (size_t i = 0; i < c->n_s; i++)
        for (size_t k = 0; k < c->s[i].n && c->s[i].style != TB_SERIES_VLINE; k++) {
            if (!(c->s[i].p[k].y > 0))
                return 0;
            lo = fmin(lo, c->s[i].p[k].y);
            hi = fmax(hi, c->s[i].p[k].y);
        }
    return lo < INFINITY && hi / lo > c->auto_log_y;
}

void tb_chart_write(const tb_chart *c, FILE *out)
{
    axis ax = {.log = c->log_x}, ay = {.log = c->log_y || (c->auto_log_y > 0 && wide_y(c))};
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    for (size_t i = 0; i < c->n_s; i++)
        for (size_t k = 0; k < c->s[i].n; k++) {
            const pt *p = &c->s[i].p[k];
            if (c->s[i].style != TB_SERIES_HLINE && usable(ax.log, p->x)) {
                x0 = fmin(x0, p->x);
                x1 = fmax(x1, p->x);
            }
            const double ys[] = {p->y, p->lo, p->hi};
            for (int j = 0; j < 3 && c->s[i].style != TB_SERIES_VLINE; j++)
                if (usable(ay.log, ys[j])) {
                    y0 = fmin(y0, ys[j]);
                    y1 = fmax(y1, ys[j]);
                }
        }
    if (c->n_xt)
        ax.labels = tb_xcalloc(c->n_xt, sizeof *ax.labels);
    for (size_t i = 0; i < c->n_xt; i++)
        if (usable(ax.log, c->xt[i])) {
            ax.labels[ax.n_ticks] = c->xt_label[i];
            add_tick(&ax, c->xt[i]);
            x0 = fmin(x0, c->xt[i]);
            x1 = fmax(x1, c->xt[i]);
        }
    axis_fit(&ax, x0, x1, 0);
    if (c->y_lo < c->y_hi && !ay.log) { /* a fixed range: ticks at nice steps inside it */
        double step = nice_step(c->y_hi - c->y_lo);
        ay.t0 = c->y_lo;
        ay.t1 = c->y_hi;
        for (double v = c->y_lo; v <= c->y_hi + step * 1e-6; v += step)
            add_tick(&ay, v);
    } else {
        axis_fit(&ay, y0, y1, c->y_zero && !ay.log);
    }

    int rows = legend_rows(c);
    int height = TOP + PLOT_H + BOTTOM + rows * 20 + 6;
    int right = WIDTH - RIGHT, bottom = TOP + PLOT_H;
    fprintf(out,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"tb-chart\" viewBox=\"0 0 %d %d\" width=\"%d\""
            " height=\"%d\" role=\"img\" " FONT " font-size=\"12\">\n<title>",
            WIDTH, height, WIDTH, height);
    tb_xml_escape(out, c->title);
    fprintf(out, "</title>\n<rect width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n", WIDTH, height);
    /* Long titles in a smaller font, so they fit the width. */
    fprintf(out, "<text class=\"chart-title\" x=\"%d\" y=\"22\" text-anchor=\"middle\" font-size=\"%d\""
                 " font-weight=\"bold\">", WIDTH / 2, text_width(c->title) > 560 ? 12 : 14);
    tb_xml_escape(out, c->title);
    fputs("</text>\n<g class=\"grid\" stroke=\"#e3e3e3\" stroke-width=\"1\">", out);
    for (size_t i = 0; i < ay.n_ticks; i++)
        fprintf(out, "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\"/>", LEFT, right, px_y(&ay, ay.ticks[i]),
                px_y(&ay, ay.ticks[i]));
    for (size_t i = 0; i < ax.n_ticks; i++)
        fprintf(out, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\"/>", px_x(&ax, ax.ticks[i]),
                px_x(&ax, ax.ticks[i]), TOP, bottom);
    fputs("</g>\n", out);
    fprintf(out, "<path class=\"axis\" d=\"M%d %dV%dH%d\" stroke=\"#333333\" stroke-width=\"1\" fill=\"none\"/>\n",
            LEFT, TOP, bottom, right);
    fputs("<g class=\"ticks\" fill=\"#333333\" font-size=\"11\">", out);
    for (size_t i = 0; i < ay.n_ticks; i++) {
        char buf[32];
        tb_svg_number(buf, sizeof buf, ay.ticks[i]);
        fprintf(out, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>", LEFT - 6,
                px_y(&ay, ay.ticks[i]) + 4, buf);
    }
    for (size_t i = 0; i < ax.n_ticks; i++) {
        char buf[32];
        fprintf(out, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">", px_x(&ax, ax.ticks[i]), bottom + 16);
        if (ax.labels) {
            tb_xml_escape(out, ax.labels[i]);
        } else {
            tb_svg_number(buf, sizeof buf, ax.ticks[i]);
            fputs(buf, out);
        }
        fputs("</text>", out);
    }
    fputs("</g>\n", out);
    fprintf(out, "<text class=\"x-label\" x=\"%d\" y=\"%d\" text-anchor=\"middle\">", (LEFT + right) / 2,
            bottom + 36);
    tb_xml_escape(out, c->x_label);
    fputs(c->log_x ? " (log scale)" : "", out);
    fprintf(out, "</text>\n<text class=\"y-label\" transform=\"translate(16 %d) rotate(-90)\""
                 " text-anchor=\"middle\">", TOP + PLOT_H / 2);
    tb_xml_escape(out, c->y_label);
    fputs(ay.log ? " (log scale)" : "", out);
    fputs("</text>\n", out);

    fprintf(out, "<svg x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" viewBox=\"%d %d %d %d\" overflow=\"hidden\">\n",
            LEFT, TOP - 6, right - LEFT + 6, PLOT_H + 12, LEFT, TOP - 6, right - LEFT + 6, PLOT_H + 12);
    for (size_t i = 0; i < c->n_s; i++)
        write_series(out, c, i, &ax, &ay);
    fputs("</svg>\n", out);

    fputs("<g class=\"legend\">", out);
    double lx = LEFT;
    int ly = bottom + BOTTOM + 4;
    for (size_t i = 0; i < c->n_s; i++) {
        const char *color = palette[i % TB_ARRAY_LEN(palette)];
        double w = 30 + (double)text_width(c->s[i].name) + 18;
        if (lx + w > right && lx > LEFT) {
            lx = LEFT;
            ly += 20;
        }
        fprintf(out, "<path d=\"M%.1f %dH%.1f\" stroke=\"%s\" stroke-width=\"2\"%s/>", lx, ly, lx + 24, color,
                c->s[i].style == TB_SERIES_HLINE   ? " stroke-dasharray=\"7 4\""
                : c->s[i].style == TB_SERIES_VLINE ? " stroke-dasharray=\"3 3\""
                                                   : "");
        if (c->s[i].style == TB_SERIES_LINE || c->s[i].style == TB_SERIES_POINTS)
            marker(out, (int)i, lx + 12, ly, color);
        fprintf(out, "<text x=\"%.1f\" y=\"%d\">", lx + 30, ly + 4);
        tb_xml_escape(out, c->s[i].name);
        fputs("</text>", out);
        lx += w;
    }
    fputs("</g>\n</svg>\n", out);
    free(ax.ticks);
    free(ay.ticks);
    free(ax.labels);
}
