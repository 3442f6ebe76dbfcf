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
    CHECK(!strstr(svg, "<circle class=\"marker\"")); /* no markers on a CDF */
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

int main(void)
{
    test_numbers();
    test_escaping();
    test_linear_ticks();
    test_log_and_explicit_ticks();
    test_auto_log_and_step();
    test_labels_and_tips();
    test_empty();
    return check_done();
}
