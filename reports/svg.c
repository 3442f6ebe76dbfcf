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
    char **notes;
    size_t n_notes;
};

/* Okabe–Ito colours (distinguishable with colour blindness), plus marker
 * shapes that cycle at another, coprime period: series i has colour
 * i % 7 and shape i % 5, a pair no other of the first 35 has, so colour
 * is never the only cue. */
static const char *const palette[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000"};
static const char *const shapes[] = {"circle", "square", "triangle", "diamond", "triangle-down"};
_Static_assert(sizeof palette / sizeof *palette == TB_SVG_COLOURS, "svg.h's TB_SVG_COLOURS is the palette's size");
_Static_assert(sizeof shapes / sizeof *shapes == TB_SVG_SHAPES, "svg.h's TB_SVG_SHAPES is the shapes' count");
_Static_assert(TB_SVG_COLOURS % TB_SVG_SHAPES != 0 && TB_SVG_SHAPES % TB_SVG_COLOURS != 0 &&
                   TB_SVG_COLOURS * TB_SVG_SHAPES == TB_SVG_STYLES,
               "colour and shape periods coprime (7 and 5): every pair among the first TB_SVG_STYLES series differs");

static const char *colour_of(size_t i)
{
    return palette[i % TB_SVG_COLOURS];
}

static int shape_of(size_t i)
{
    return (int)(i % TB_SVG_SHAPES);
}

/* TOP: the plot's top under a one-line title (each more line adds
 * TITLE_LINE). Text widths are estimates (no font metrics here), kept
 * on the wide side of DejaVu Sans, so a line never runs past the edge:
 * titles (bold 14 px) wrap at TITLE_CHARS, notes (11 px) at NOTE_CHARS,
 * y labels (12 px) at YLABEL_CHARS, two lines at most. */
enum { WIDTH = 640, PLOT_H = 250, LEFT = 72, RIGHT = 20, TOP = 40, BOTTOM = 52, TITLE_LINE = 18, NOTE_LINE = 15 };
enum { TITLE_CHARS = 68, TITLE_LINES = 3, NOTE_CHARS = 88, NOTE_LINES = 4, YLABEL_CHARS = 38 };
#define LEGEND_CHAR_PX 7.5 /* 12 px text */
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
    for (size_t i = 0; i < c->n_notes; i++)
        free(c->notes[i]);
    free(c->notes);
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

void tb_chart_note(tb_chart *c, const char *text)
{
    c->notes = tb_xrealloc(c->notes, (c->n_notes + 1) * sizeof *c->notes);
    c->notes[c->n_notes++] = tb_xstrdup(text ? text : "");
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
    int top;         /* y: the plot's top, px */
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
    /* No value below 0 (tokens/s, seconds since start, a rate): the axis
     * does not start below 0 either, whatever room it leaves. */
    int nonneg = lo <= hi && lo >= 0;
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
        a->t0 = nonneg && lo - pad < 0 ? 0 : lo - pad;
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
    }
    if ((nonneg || from_zero) && lo < 0 && hi > 0)
        lo = 0;
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
    return a->top + PLOT_H - (to_t(a, v) - a->t0) / (a->t1 - a->t0) * PLOT_H;
}

static int usable(int log, double v)
{
    return isfinite(v) && (!log || v > 0);
}

/* ---------------------------------------------------------- drawing */

static void marker(FILE *out, int shape, double x, double y, const char *color)
{
    switch (shape % TB_SVG_SHAPES) {
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
    case 3:
        fprintf(out, "<path class=\"marker\" d=\"M%.1f %.1fL%.1f %.1fL%.1f %.1fL%.1f %.1fZ\" fill=\"%s\"/>", x,
                y - 4.5, x + 4.5, y, x, y + 4.5, x - 4.5, y, color);
        break;
    default:
        fprintf(out, "<path class=\"marker\" d=\"M%.1f %.1fL%.1f %.1fL%.1f %.1fZ\" fill=\"%s\"/>", x, y + 4.5, x + 4,
                y - 3, x - 4, y - 3, color);
    }
}

/* Characters (not bytes) of the first n bytes of UTF-8 text. */
static size_t u8_chars(const char *s, size_t n)
{
    size_t w = 0;
    for (size_t i = 0; i < n && s[i]; i++)
        w += ((unsigned char)s[i] & 0xC0) != 0x80;
    return w;
}

static double text_width(const char *s)
{
    return (double)u8_chars(s, strlen(s)) * LEGEND_CHAR_PX;
}

/* The text in lines of at most `width` characters, broken at spaces (a
 * longer word is cut between characters), at most `max` lines: what is
 * left then ends the last one with an ellipsis. Returns the count; each
 * line malloc'd in lines[]. */
static size_t wrap(const char *s, size_t width, size_t max, char **lines)
{
    size_t n = 0;
    while (*s && n < max) {
        while (*s == ' ')
            s++;
        if (!*s)
            break;
        int last = n + 1 == max;
        size_t room = width - (last ? 1 : 0); /* the ellipsis' place */
        size_t i = 0, chars = 0, space = 0, seam = 0; /* seam: after ':' or before '[' */
        while (s[i]) {
            size_t k = i + 1; /* one character */
            while (((unsigned char)s[k] & 0xC0) == 0x80)
                k++;
            if (chars + 1 > room && !(last && chars + 1 <= width && !s[k]))
                break;
            if (s[i] == ' ') {
                space = i;
                if ((i > 0 && s[i - 1] == ':') || s[i + 1] == '[')
                    seam = i;
            }
            chars++;
            i = k;
        }
        /* at the end; else at a seam in the line's second half (a title
         * "metric: backend [case]" splits there), else at a space */
        size_t take = !s[i] ? i : seam * 2 > i ? seam : space ? space : i;
        if (take == 0) /* room for nothing */
            break;
        tb_str l = {0};
        tb_str_appendf(&l, "%.*s", (int)take, s);
        s += take;
        while (*s == ' ')
            s++;
        if (last && *s)
            tb_str_append(&l, "\u2026");
        lines[n++] = tb_str_take(&l);
    }
    return n;
}

static void free_lines(char **lines, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(lines[i]);
}

/* Legend rows: items laid left to right, wrapped at the chart's width. */
static int legend_rows(const tb_chart *c, size_t n_s)
{
    int rows = n_s ? 1 : 0;
    double x = LEFT;
    for (size_t i = 0; i < n_s; i++) {
        double w = 30 + text_width(c->s[i].name) + 18;
        if (x + w > WIDTH - RIGHT && x > LEFT) {
            rows++;
            x = LEFT;
        }
        x += w;
    }
    return rows;
}

/* Markers along a curve without one at each point (a CDF's staircase):
 * up to 5, at fractions of its drawn points shifted by the series' shape,
 * so that two curves' markers do not sit on each other. */
static int step_marker(size_t k, size_t n, size_t i)
{
    enum { EVERY = 5 };
    if (n <= EVERY)
        return 1;
    double per = (double)n / EVERY, off = per * ((double)(i % TB_SVG_SHAPES) + 0.5) / TB_SVG_SHAPES;
    for (int j = 0; j < EVERY; j++)
        if (k == (size_t)(off + j * per))
            return 1;
    return 0;
}

static void write_series(FILE *out, const tb_chart *c, size_t i, const axis *ax, const axis *ay)
{
    const series *s = &c->s[i];
    const char *color = colour_of(i);
    int shape = shape_of(i);
    int top = ay->top, bottom = ay->top + PLOT_H;
    fputs("<g class=\"series-group\" data-series=\"", out);
    tb_xml_escape(out, s->name);
    fprintf(out, "\" data-colour=\"%s\" data-marker=\"%s\">", color, shapes[shape]);
    if (s->style == TB_SERIES_HLINE) {
        if (s->n && usable(ay->log, s->p[0].y)) {
            double y = px_y(ay, s->p[0].y);
            fprintf(out,
                    "<path class=\"series reference\" d=\"M%d %.1fH%d\" stroke=\"%s\" stroke-width=\"2\""
                    " stroke-dasharray=\"7 4\" fill=\"none\"/>",
                    LEFT, y, WIDTH - RIGHT, color);
            marker(out, shape, WIDTH - RIGHT - 8, y, color); /* its legend entry's marker */
        }
        fputs("</g>\n", out);
        return;
    }
    if (s->style == TB_SERIES_VLINE) {
        if (s->n && usable(ax->log, s->p[0].x)) {
            double x = px_x(ax, s->p[0].x);
            fprintf(out,
                    "<path class=\"series reference vertical\" d=\"M%.1f %dV%d\" stroke=\"%s\" stroke-width=\"2\""
                    " stroke-dasharray=\"3 3\" fill=\"none\">",
                    x, top, bottom, color);
            if (s->p[0].label) {
                fputs("<title>", out);
                tb_xml_escape(out, s->p[0].label);
                fputs("</title>", out);
            }
            fputs("</path>", out);
            marker(out, shape, x, top + 6, color);
        }
        fputs("</g>\n", out);
        return;
    }
    size_t n_drawn = 0;
    for (size_t k = 0; k < s->n; k++)
        n_drawn += usable(ax->log, s->p[k].x) && usable(ay->log, s->p[k].y);
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
    size_t drawn = 0;
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
        if (s->style != TB_SERIES_STEP || step_marker(drawn, n_drawn, i))
            marker(out, shape, x, y, color);
        drawn++;
        if (p->label && p->tip_only) { /* a hover target over the marker */
            fprintf(out, "<circle class=\"point-tip\" cx=\"%.1f\" cy=\"%.1f\" r=\"6\" fill=\"transparent\"><title>",
                    x, y);
            tb_xml_escape(out, p->label);
            fputs("</title></circle>", out);
        } else if (p->label) { /* beside the point, on the side with room */
            int left = x > LEFT + (WIDTH - LEFT - RIGHT) * 0.7;
            fprintf(out, "<text class=\"point-label\" x=\"%.1f\" y=\"%.1f\" font-size=\"10\" fill=\"%s\"%s>",
                    left ? x - 6 : x + 6, y < top + 14 ? y + 14 : y - 6, color, left ? " text-anchor=\"end\"" : "");
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

/* data-NAME-... attributes: the axis's scale, ends and ticks. */
static void axis_attrs(FILE *out, const char *name, const axis *a)
{
    double lo = a->log ? pow(10, a->t0) : a->t0, hi = a->log ? pow(10, a->t1) : a->t1;
    fprintf(out, " data-%s-scale=\"%s\" data-%s-lo=\"%.6g\" data-%s-hi=\"%.6g\" data-%s-ticks=\"", name,
            a->log ? "log" : "linear", name, lo, name, hi, name);
    for (size_t i = 0; i < a->n_ticks; i++)
        fprintf(out, "%s%.6g", i ? " " : "", a->ticks[i]);
    fputc('"', out);
}

void tb_chart_write(const tb_chart *c, FILE *out)
{
    /* Series past TB_SVG_STYLES would repeat a (colour, marker) pair:
     * left out, and said. */
    size_t n_s = c->n_s < TB_SVG_STYLES ? c->n_s : TB_SVG_STYLES, left_out = 0;
    for (size_t i = n_s; i < c->n_s; i++)
        left_out += c->s[i].n > 0;
    char *title[TITLE_LINES], *ylabel[2], *notes[NOTE_LINES * 8];
    size_t n_title = wrap(c->title, TITLE_CHARS, TITLE_LINES, title), n_notes = 0;
    tb_str ytext = {0};
    axis ax = {.log = c->log_x}, ay = {.log = c->log_y || (c->auto_log_y > 0 && wide_y(c))};
    tb_str_append(&ytext, c->y_label);
    tb_str_append(&ytext, ay.log ? " (log scale)" : "");
    size_t n_ylabel = u8_chars(ytext.s, ytext.len) * LEGEND_CHAR_PX > PLOT_H + 20 ? wrap(ytext.s, YLABEL_CHARS, 2, ylabel)
                                                                                  : wrap(ytext.s, ytext.len + 1, 1, ylabel);
    tb_str_free(&ytext);
    for (size_t i = 0; i < c->n_notes && n_notes + NOTE_LINES <= TB_ARRAY_LEN(notes) - NOTE_LINES; i++)
        n_notes += wrap(c->notes[i], NOTE_CHARS, NOTE_LINES, notes + n_notes);
    if (left_out) {
        char *t = tb_xasprintf("%zu more curves not drawn: a chart draws %d at most (the tables have every figure).",
                               left_out, TB_SVG_STYLES);
        n_notes += wrap(t, NOTE_CHARS, NOTE_LINES, notes + n_notes);
        free(t);
    }

    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    for (size_t i = 0; i < n_s; i++)
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

    int top = TOP + (int)(n_title > 1 ? n_title - 1 : 0) * TITLE_LINE;
    ay.top = top;
    int rows = legend_rows(c, n_s);
    int legend_end = top + PLOT_H + BOTTOM + rows * 20;
    int height = legend_end + (int)n_notes * NOTE_LINE + 6;
    int right = WIDTH - RIGHT, bottom = top + PLOT_H;
    fprintf(out,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"tb-chart\" viewBox=\"0 0 %d %d\" width=\"%d\""
            " height=\"%d\" role=\"img\" " FONT " font-size=\"12\"",
            WIDTH, height, WIDTH, height);
    axis_attrs(out, "x", &ax);
    axis_attrs(out, "y", &ay);
    fputs(">\n<title>", out);
    tb_xml_escape(out, c->title);
    fprintf(out, "</title>\n<rect width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n", WIDTH, height);
    fprintf(out, "<text class=\"chart-title\" x=\"%d\" y=\"22\" text-anchor=\"middle\" font-size=\"14\""
                 " font-weight=\"bold\">", WIDTH / 2);
    for (size_t i = 0; i < n_title; i++) {
        fprintf(out, "<tspan x=\"%d\" dy=\"%d\">", WIDTH / 2, i ? TITLE_LINE : 0);
        tb_xml_escape(out, title[i]);
        fputs("</tspan>", out);
    }
    fputs("</text>\n<g class=\"grid\" stroke=\"#e3e3e3\" stroke-width=\"1\">", out);
    for (size_t i = 0; i < ay.n_ticks; i++)
        fprintf(out, "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\"/>", LEFT, right, px_y(&ay, ay.ticks[i]),
                px_y(&ay, ay.ticks[i]));
    for (size_t i = 0; i < ax.n_ticks; i++)
        fprintf(out, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\"/>", px_x(&ax, ax.ticks[i]),
                px_x(&ax, ax.ticks[i]), top, bottom);
    fputs("</g>\n", out);
    fprintf(out, "<path class=\"axis\" d=\"M%d %dV%dH%d\" stroke=\"#333333\" stroke-width=\"1\" fill=\"none\"/>\n",
            LEFT, top, bottom, right);
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
    /* a second line of the y label sits to the right of the first */
    fprintf(out, "</text>\n<text class=\"y-label\" transform=\"translate(%d %d) rotate(-90)\" text-anchor=\"middle\"%s>",
            n_ylabel > 1 ? 12 : 16, top + PLOT_H / 2, n_ylabel > 1 ? " font-size=\"11\"" : "");
    for (size_t i = 0; i < n_ylabel; i++) {
        fprintf(out, "<tspan x=\"0\" dy=\"%d\">", i ? 13 : 0);
        tb_xml_escape(out, ylabel[i]);
        fputs("</tspan>", out);
    }
    fputs("</text>\n", out);

    fprintf(out, "<svg x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" viewBox=\"%d %d %d %d\" overflow=\"hidden\">\n",
            LEFT, top - 6, right - LEFT + 6, PLOT_H + 12, LEFT, top - 6, right - LEFT + 6, PLOT_H + 12);
    for (size_t i = 0; i < n_s; i++)
        write_series(out, c, i, &ax, &ay);
    fputs("</svg>\n", out);

    fputs("<g class=\"legend\">", out);
    double lx = LEFT;
    int ly = bottom + BOTTOM + 4;
    for (size_t i = 0; i < n_s; i++) {
        const char *color = colour_of(i);
        double w = 30 + text_width(c->s[i].name) + 18;
        if (lx + w > right && lx > LEFT) {
            lx = LEFT;
            ly += 20;
        }
        fprintf(out, "<path d=\"M%.1f %dH%.1f\" stroke=\"%s\" stroke-width=\"2\"%s/>", lx, ly, lx + 24, color,
                c->s[i].style == TB_SERIES_HLINE   ? " stroke-dasharray=\"7 4\""
                : c->s[i].style == TB_SERIES_VLINE ? " stroke-dasharray=\"3 3\""
                                                   : "");
        marker(out, shape_of(i), lx + 12, ly, color);
        fprintf(out, "<text x=\"%.1f\" y=\"%d\">", lx + 30, ly + 4);
        tb_xml_escape(out, c->s[i].name);
        fputs("</text>", out);
        lx += w;
    }
    fputs("</g>\n", out);
    if (n_notes) {
        fputs("<g class=\"notes\" fill=\"#444444\" font-size=\"11\">", out);
        for (size_t i = 0; i < n_notes; i++) {
            fprintf(out, "<text x=\"%d\" y=\"%d\">", LEFT - 56, legend_end + 4 + (int)i * NOTE_LINE);
            tb_xml_escape(out, notes[i]);
            fputs("</text>", out);
        }
        fputs("</g>\n", out);
    }
    fputs("</svg>\n", out);
    free_lines(title, n_title);
    free_lines(ylabel, n_ylabel);
    free_lines(notes, n_notes);
    free(ax.ticks);
    free(ay.ticks);
    free(ax.labels);
}
