/* test_svg.c — reports/svg.c: escaping, tick labels, scales, what is drawn
 * for each series style. The browser test (test_report_browser.sh) checks
 * that Chromium renders the result. */
#define _GNU_SOURCE
#include "svg.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static char *render(const tb_chart *c)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    tb_chart_write(c, f);
    fclose(f);
    return buf;
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

static void test_numbers(void)
{
    char b[32];
    tb_svg_number(b, sizeof b, 2500);
    CHECK_STR(b, "2500");
    tb_svg_number(b, sizeof b, 25000);
    CHECK_STR(b, "25k");
    tb_svg_number(b, sizeof b, 12500);
    CHECK_STR(b, "12.5k");
    tb_svg_number(b, sizeof b, 3.2e6);
    CHECK_STR(b, "3.2M");
    tb_svg_number(b, sizeof b, 0.25);
    CHECK_STR(b, "0.25");
    tb_svg_number(b, sizeof b, 0);
    CHECK_STR(b, "0");
}

static void test_escaping(void)
{
    tb_chart *c = tb_chart_new("a <b> & \"c\"", "x'x", "y<y");
    int s = tb_chart_series(c, "</svg><script>alert(1)</script>", TB_SERIES_LINE);
    tb_chart_point(c, s, 1, 1);
    tb_chart_point(c, s, 2, 3);
    char *svg = render(c);
    CHECK(!strstr(svg, "<script>"));
    CHECK(!strstr(svg, "<b>"));
    CHECK_CONTAINS(svg, "a &lt;b&gt; &amp; &quot;c&quot;");
    CHECK_CONTAINS(svg, "&lt;/svg&gt;&lt;script&gt;");
    CHECK_CONTAINS(svg, "x&#39;x");
    CHECK_CONTAINS(svg, "y&lt;y");
    /* One <svg> root plus the clipping viewport, both closed. */
    CHECK(count(svg, "<svg") == 2 && count(svg, "</svg>") == 2);
    free(svg);
    tb_chart_free(c);
}

static void test_linear_ticks(void)
{
    /* y from 0 (default) to 950: step 200, ticks 0..1000. */
    tb_chart *c = tb_chart_new("t", "x", "y");
    int s = tb_chart_series(c, "s", TB_SERIES_POINTS);
    tb_chart_point(c, s, 1, 400);
    tb_chart_point(c, s, 3, 950);
    char *svg = render(c);
    CHECK_CONTAINS(svg, "text-anchor=\"end\">0</text>");
    CHECK_CONTAINS(svg, "text-anchor=\"end\">1000</text>");
    CHECK_CONTAINS(svg, "text-anchor=\"end\">200</text>");
    CHECK(!strstr(svg, "text-anchor=\"end\">1200</text>"));
    CHECK(count(svg, "class=\"marker\"") == 2 + 1); /* two points + the legend swatch */
    CHECK(!strstr(svg, "class=\"series\"")); /* points only: no line */
    free(svg);
    tb_chart_free(c);
}

static void test_log_and_explicit_ticks(void)
{
    tb_chart *c = tb_chart_new("t", "steps", "tok/s");
    tb_chart_log(c, 1, 1);
    const double xt[] = {4, 8, 16, 32};
    const char *const labels[] = {"4", "8", "16", "thirty-two"};
    tb_chart_x_ticks(c, xt, labels, 4);
    int s = tb_chart_series(c, "d", TB_SERIES_LINE);
    tb_chart_point(c, s, 4, 3000);
    tb_chart_point(c, s, 8, 1500);
    tb_chart_point(c, s, 16, -1); /* cannot sit on a log axis: a gap */
    tb_chart_point(c, s, 32, 40);
    int h = tb_chart_series(c, "ar", TB_SERIES_HLINE);
    tb_chart_point(c, h, 0, 900);
    char *svg = render(c);
    CHECK_CONTAINS(svg, ">thirty-two</text>");
    CHECK_CONTAINS(svg, ">100</text>"); /* decade ticks on y */
    CHECK_CONTAINS(svg, ">1000</text>");
    CHECK_CONTAINS(svg, "(log scale)");
    /* The line breaks at the missing point: two subpaths. */
    const char *d = strstr(svg, "class=\"series\" d=\"");
    CHECK(d != NULL);
    if (d) {
        const char *end = strchr(d + 18, '"');
        int moves = 0;
        for (const char *p = d + 18; p < end; p++)
            moves += *p == 'M';
        CHECK(moves == 2);
    }
    CHECK_CONTAINS(svg, "class=\"series reference\"");
    CHECK_CONTAINS(svg, "stroke-dasharray");
    CHECK(tb_chart_points(c) == 5);
    free(svg);
    tb_chart_free(c);
}

static void test_auto_log_and_step(void)
{
    tb_chart *c = tb_chart_new("t", "x", "y");
    tb_chart_auto_log_y(c, 30);
    int s = tb_chart_series(c, "cdf", TB_SERIES_STEP);
    tb_chart_point(c, s, 1, 1);
    tb_chart_point(c, s, 2, 100);
    char *svg = render(c);
    CHECK_CONTAINS(svg, "(log scale)");
    CHECK_CONTAINS(svg, "H"); /* staircase */
    free(svg);
    tb_chart_free(c);
    c = tb_chart_new("t", "x", "y");
    tb_chart_auto_log_y(c, 30);
    s = tb_chart_series(c, "narrow", TB_SERIES_LINE);
    tb_chart_point(c, s, 1, 10);
    tb_chart_point(c, s, 2, 100);
    svg = render(c);
    CHECK(!strstr(svg, "(log scale)"));
    free(svg);
    tb_chart_free(c);
}

static void test_labels_and_tips(void)
{
    /* A label is drawn beside its point; a tip only names the point on
     * hover (an SVG <title>), escaped like any text. */
    tb_chart *c = tb_chart_new("t", "x", "y");
    int s = tb_chart_series(c, "s", TB_SERIES_POINTS);
    tb_chart_point_label(c, s, 1, 1, "front <1>");
    tb_chart_point_tip(c, s, 2, 2, "inside & below");
    tb_chart_point_tip(c, s, 3, 3, NULL); /* no tip: a plain point */
    char *svg = render(c);
    CHECK(count(svg, "class=\"point-label\"") == 1);
    CHECK_CONTAINS(svg, ">front &lt;1&gt;</text>");
    CHECK(count(svg, "class=\"point-tip\"") == 1);
    CHECK_CONTAINS(svg, "<title>inside &amp; below</title></circle>");
    CHECK(!strstr(svg, ">inside &amp; below</text>"));
    CHECK(count(svg, "class=\"marker\"") == 3 + 1);
    free(svg);
    tb_chart_free(c);
}

static void test_empty(void)
{
    tb_chart *c = tb_chart_new("empty", "x", "y");
    CHECK(tb_chart_points(c) == 0);
    tb_chart_point(c, 7, 1, 1); /* no such series: ignored */
    tb_chart_point(c, tb_chart_series(c, "s", TB_SERIES_LINE), NAN, 1);
    CHECK(tb_chart_points(c) == 0);
    char *svg = render(c); /* still a valid, empty chart */
    CHECK_CONTAINS(svg, "</svg>");
    free(svg);
    tb_chart_free(c);
}

/* The value of attribute `name` of the root <svg> as a number (NaN: none). */
static double attr(const char *svg, const char *name)
{
    char key[64];
    snprintf(key, sizeof key, " %s=\"", name);
    const char *p = strstr(svg, key), *end = strchr(svg, '>');
    return p && p < end ? strtod(p + strlen(key), NULL) : NAN;
}

static int has_tick(const char *svg, const char *axis, double v)
{
    char key[32];
    snprintf(key, sizeof key, " data-%s-ticks=\"", axis);
    const char *p = strstr(svg, key);
    if (!p)
        return 0;
    p += strlen(key);
    while (*p && *p != '"') {
        char *e;
        double t = strtod(p, &e);
        if (e == p)
            return 0;
        if (fabs(t - v) <= 1e-12 * fmax(1, fabs(v)))
            return 1;
        p = e;
        while (*p == ' ')
            p++;
    }
    return 0;
}

/* Issue 39 item 9: a non-negative quantity's axis never starts below 0,
 * linear or with explicit ticks, fitted or not, and the root says the
 * range and ticks it chose. */
static void test_axes_from_zero(void)
{
    /* Pareto: tokens/s on x, fitted to the data (not from zero), 40..1150 */
    tb_chart *c = tb_chart_new("t", "tok/s", "accuracy");
    tb_chart_y_from_zero(c, 0);
    int s = tb_chart_series(c, "s", TB_SERIES_POINTS);
    tb_chart_point(c, s, 40, 0.7);
    tb_chart_point(c, s, 1150, 0.9);
    char *svg = render(c);
    CHECK_CONTAINS(svg, "data-x-scale=\"linear\"");
    CHECK(attr(svg, "data-x-lo") == 0);
    CHECK(attr(svg, "data-x-hi") >= 1150);
    CHECK(attr(svg, "data-y-lo") >= 0 && attr(svg, "data-y-lo") <= 0.7);
    CHECK(has_tick(svg, "x", 0) && !has_tick(svg, "x", -200));
    CHECK(!strstr(svg, ">-"));  /* no negative tick label */
    free(svg);
    tb_chart_free(c);
    /* telemetry: seconds since start, from 0, fitted */
    c = tb_chart_new("t", "s", "v");
    s = tb_chart_series(c, "s", TB_SERIES_LINE);
    tb_chart_point(c, s, 0, 0);
    tb_chart_point(c, s, 0.056, 0);
    svg = render(c);
    CHECK(attr(svg, "data-x-lo") == 0);
    CHECK(attr(svg, "data-y-lo") == 0); /* all zero: 0..1, not -1..1 */
    CHECK(attr(svg, "data-y-hi") > 0);
    free(svg);
    tb_chart_free(c);
    /* explicit ticks on a linear axis: the padding stops at 0 */
    c = tb_chart_new("t", "rate", "v");
    const double xt[] = {0, 5, 10};
    tb_chart_x_ticks(c, xt, NULL, 3);
    s = tb_chart_series(c, "s", TB_SERIES_LINE);
    tb_chart_point(c, s, 0, 1);
    tb_chart_point(c, s, 10, 2);
    svg = render(c);
    CHECK(attr(svg, "data-x-lo") == 0);
    free(svg);
    tb_chart_free(c);
    /* a quantity that is negative keeps its negative axis */
    c = tb_chart_new("t", "x", "change");
    tb_chart_y_from_zero(c, 0);
    s = tb_chart_series(c, "s", TB_SERIES_LINE);
    tb_chart_point(c, s, 1, -5);
    tb_chart_point(c, s, 2, 5);
    svg = render(c);
    CHECK(attr(svg, "data-y-lo") < -5 + 1e-9);
    free(svg);
    tb_chart_free(c);
}

/* A zero on a log axis is left out (never drawn at an invented small
 * value); the axis starts near the smallest positive value. */
static void test_log_zero(void)
{
    tb_chart *c = tb_chart_new("t", "gap, ms", "fraction");
    tb_chart_log(c, 1, 0);
    tb_chart_y_range(c, 0, 1);
    int s = tb_chart_series(c, "cdf", TB_SERIES_STEP);
    tb_chart_point(c, s, 0, 0.5);
    tb_chart_point(c, s, 2, 0.6);
    tb_chart_point(c, s, 20, 1);
    tb_chart_note(c, "zeros left out");
    char *svg = render(c);
    CHECK_CONTAINS(svg, "data-x-scale=\"log\"");
    CHECK(attr(svg, "data-x-lo") > 1 && attr(svg, "data-x-lo") < 2);
    CHECK(!has_tick(svg, "x", 0.001) && !has_tick(svg, "x", 0.01));
    CHECK_CONTAINS(svg, "<g class=\"notes\"");
    CHECK_CONTAINS(svg, ">zeros left out</text>");
    free(svg);
    tb_chart_free(c);
}

/* Every series of a chart has its own (colour, marker) pair, CDF steps and
 * reference lines too (their markers drawn on the curve and in the
 * legend); past TB_SVG_STYLES the rest are left out, and the chart says so. */
static void test_styles(void)
{
    tb_chart *c = tb_chart_new("t", "x", "y");
    static const tb_series_style style[] = {TB_SERIES_LINE, TB_SERIES_STEP, TB_SERIES_POINTS, TB_SERIES_HLINE};
    for (int i = 0; i < TB_SVG_STYLES + 3; i++) {
        char name[16];
        snprintf(name, sizeof name, "s%d", i);
        int s = tb_chart_series(c, name, style[i % 4]);
        for (int k = 1; k <= 12; k++)
            tb_chart_point(c, s, k, i + k);
    }
    char *svg = render(c);
    char pairs[TB_SVG_STYLES + 3][48];
    int n = 0;
    for (const char *p = svg; (p = strstr(p, " data-colour=\"")); p++) {
        char colour[16], mark[24];
        CHECK(sscanf(p, " data-colour=\"%15[^\"]\" data-marker=\"%23[^\"]\"", colour, mark) == 2);
        if (n < TB_SVG_STYLES + 3)
            snprintf(pairs[n], sizeof pairs[n], "%s %s", colour, mark);
        n++;
    }
    CHECK(n == TB_SVG_STYLES);
    for (int i = 0; i < n && i < TB_SVG_STYLES + 3; i++)
        for (int k = 0; k < i; k++)
            CHECK(strcmp(pairs[i], pairs[k]) != 0);
    CHECK(TB_SVG_STYLES >= 35);
    CHECK_CONTAINS(svg, "3 more curves not drawn");
    /* the first TB_SVG_COLOURS series have their own colour each */
    for (int i = 0; i < TB_SVG_COLOURS; i++)
        for (int k = 0; k < i; k++)
            CHECK(strncmp(pairs[i], pairs[k], 7) != 0);
    free(svg);
    tb_chart_free(c);
    /* a CDF (a staircase) carries markers on its curve and in its legend */
    c = tb_chart_new("t", "x", "y");
    int s = tb_chart_series(c, "cdf", TB_SERIES_STEP);
    for (int k = 1; k <= 200; k++)
        tb_chart_point(c, s, k, k / 200.0);
    svg = render(c);
    int markers = count(svg, "class=\"marker\"");
    CHECK(markers >= 1 + 3 && markers <= 1 + 5);
    free(svg);
    tb_chart_free(c);
}

/* A title longer than the width wraps into lines (tspans) that fit;
 * the plot moves down to make room; the whole title stays in <title>. */
static void test_title_wraps(void)
{
    const char *t = "vllm:e2e_request_latency_seconds_bucket_sum_total: a-long-backend-name [prompt 8192, new 1024, "
                    "batch 64, steps 128, block 32, threshold 0.9, temperature 0.7]";
    tb_chart *c = tb_chart_new(t, "x", "a very long y label that will not fit along the plot's height at all");
    int s = tb_chart_series(c, "s", TB_SERIES_LINE);
    tb_chart_point(c, s, 1, 1);
    tb_chart_point(c, s, 2, 2);
    char *svg = render(c);
    char want[512];
    snprintf(want, sizeof want, "<title>%s</title>", t);
    CHECK_CONTAINS(svg, want);
    const char *title = strstr(svg, "<text class=\"chart-title\"");
    CHECK(title != NULL);
    int lines = 0;
    for (const char *p = title; p && (p = strstr(p, "<tspan")) && p < strstr(title, "</text>"); p++) {
        const char *b = strchr(p, '>') + 1, *e = strstr(b, "</tspan>");
        size_t chars = 0;
        for (const char *q = b; q < e; q++)
            chars += ((unsigned char)*q & 0xC0) != 0x80 && *q != '&'; /* &amp; etc.: one */
        CHECK(chars <= 68);
        lines++;
    }
    CHECK(lines == 3);
    /* the plot's top moved down by two lines */
    CHECK_CONTAINS(svg, "<path class=\"axis\" d=\"M72 76V");
    /* the y label in two lines */
    const char *y = strstr(svg, "class=\"y-label\"");
    CHECK(y && count(y, "<tspan") - count(strstr(y, "</text>"), "<tspan") == 2);
    free(svg);
    tb_chart_free(c);
    /* a short title: one line, the plot where it was */
    c = tb_chart_new("short", "x", "y");
    s = tb_chart_series(c, "s", TB_SERIES_LINE);
    tb_chart_point(c, s, 1, 1);
    svg = render(c);
    CHECK_CONTAINS(svg, "<tspan x=\"320\" dy=\"0\">short</tspan></text>");
    CHECK_CONTAINS(svg, "<path class=\"axis\" d=\"M72 40V");
    free(svg);
    tb_chart_free(c);
}

int main(void)
{
    test_numbers();
    test_escaping();
    test_linear_ticks();
    test_log_and_explicit_ticks();
    test_auto_log_and_step();
    test_labels_and_tips();
    test_empty();
    test_axes_from_zero();
    test_log_zero();
    test_styles();
    test_title_wraps();
    return check_done();
}
