/* html.c — see html.h. */
#define _GNU_SOURCE
#include "html.h"

#include <stdlib.h>
#include <string.h>

#include "charts.h"
#include "html_page.h"
#include "rsession.h"
#include "warnings.h"
#include "svg.h"
#include "report_tables.h"
#include "util.h"

#define esc tb_xml_escape

static void kv_table(FILE *out, const tb_rkvs *k)
{
    fputs("<table class=\"kv\">\n", out);
    for (size_t i = 0; i < k->n; i++) {
        fputs("<tr><th>", out);
        esc(out, k->v[i].key);
        fputs("</th><td>", out);
        esc(out, k->v[i].value);
        fputs("</td></tr>\n", out);
    }
    fputs("</table>\n", out);
}

static void table(FILE *out, const tb_rtable *t)
{
    fprintf(out, "<table id=\"table-%s\">\n<tr>", t->id);
    for (size_t c = 0; c < t->n_cols; c++) {
        fputs("<th>", out);
        esc(out, t->head[c]);
        fputs("</th>", out);
    }
    fputs("</tr>\n", out);
    for (size_t r = 0; r < t->n_rows; r++) {
        fputs("<tr>", out);
        for (size_t c = 0; c < t->n_cols; c++) {
            const char *v = t->cells[r * t->n_cols + c];
            int flagged = strstr(v, " !") != NULL || strcmp(v, "failed") == 0;
            fputs(t->numeric[c] ? "<td class=\"num\">" : "<td>", out);
            if (flagged)
                fputs("<span class=\"flag\">", out);
            esc(out, v);
            if (flagged)
                fputs("</span>", out);
            fputs("</td>", out);
        }
        fputs("</tr>\n", out);
    }
    fputs("</table>\n", out);
    if (t->note && *t->note) {
        fputs("<p class=\"note\">", out);
        esc(out, t->note);
        fputs("</p>\n", out);
    }
}

static const tb_rtable *find_table(const tb_rtables *ts, const char *id)
{
    for (size_t i = 0; i < ts->n; i++)
        if (strcmp(ts->v[i].id, id) == 0)
            return &ts->v[i];
    return NULL;
}

/* One section of charts of the given kinds (in the order produced, so a
 * latency chart sits beside its throughput chart). */
static void charts(FILE *out, const tb_rcharts *cs, const char *const *kinds, size_t n_kinds, const char *title,
                   const char *intro)
{
    size_t n = 0;
    for (size_t i = 0; i < cs->n; i++)
        for (size_t k = 0; k < n_kinds; k++)
            n += strcmp(cs->v[i].kind, kinds[k]) == 0;
    if (!n)
        return;
    fputs("<h3>", out);
    esc(out, title);
    fputs("</h3>\n<p class=\"note\">", out);
    esc(out, intro);
    fputs("</p>\n<div class=\"charts\">\n", out);
    for (size_t i = 0; i < cs->n; i++)
        for (size_t k = 0; k < n_kinds; k++)
            if (strcmp(cs->v[i].kind, kinds[k]) == 0) {
                fprintf(out, "<figure class=\"chart\" data-kind=\"%s\">\n", cs->v[i].kind);
                tb_chart_write(cs->v[i].chart, out);
                fputs("<figcaption>", out);
                esc(out, cs->v[i].caption);
                fputs("</figcaption>\n</figure>\n", out);
            }
    fputs("</div>\n", out);
}

int tb_report_html(sqlite3 *db, int64_t session, FILE *out, char **err)
{
    tb_rsession s;
    if (tb_rsession_load(db, session, &s, err) != 0)
        return -1;
    tb_rcharts cs;
    if (tb_charts_session(db, &s, &cs, err) != 0) { /* before a byte is written */
        tb_rsession_free(&s);
        return -1;
    }
    tb_warnings w;
    tb_warnings_derive(&s, &w);
    tb_rtables ts;
    tb_rtables_build(&s, &ts);

    char *title = tb_xasprintf("tokbench report: %s, session %lld", s.suite_name, (long long)s.id);
    tb_html_begin(out, title);
    fputs("<h1>", out);
    esc(out, title);
    fputs("</h1>\n<p class=\"note\">", out);
    esc(out, s.started_at);
    fputs(" · ", out);
    esc(out, s.hostname);
    fputs(" · status ", out);
    esc(out, s.status);
    fputs(" · suite sha256 ", out);
    esc(out, s.suite_sha256);
    fputs("</p>\n", out);
    for (size_t b = 0; b < s.n_backends; b++)
        if (s.backends[b].random_weights == 1) {
            fputs("<p><span class=\"flag\">RANDOM WEIGHTS</span> ", out);
            esc(out, s.backends[b].label);
            fputs(": speed only; outputs and quality mean nothing.</p>\n", out);
        }

    fputs("<h2 id=\"warnings\">Warnings</h2>\n", out);
    if (w.n) {
        fputs("<ul class=\"warnings\">\n", out);
        for (size_t i = 0; i < w.n; i++) {
            fputs("<li>", out);
            esc(out, w.text[i]);
            fputs("</li>\n", out);
        }
        fputs("</ul>\n", out);
    } else {
        fputs("<p>None.</p>\n", out);
    }

    const tb_rtable *sbs = find_table(&ts, "side-by-side");
    if (sbs) {
        fputs("<h2 id=\"side-by-side\">", out);
        esc(out, sbs->title);
        fputs("</h2>\n", out);
        table(out, sbs);
    }

    fputs("<h2 id=\"charts\">Charts</h2>\n", out);
    if (!cs.n)
        fputs("<p>Nothing to draw: no case finished.</p>\n", out);
    static const char *const k_steps[] = {"steps"}, *const k_batch[] = {"latency", "throughput"},
                             *const k_rate[] = {"rate", "goodput"}, *const k_pareto[] = {"pareto"}, *const k_acc[] = {"acceptance"},
                             *const k_canvas[] = {"canvas"}, *const k_itl[] = {"itl"}, *const k_tel[] = {"telemetry"},
                             *const k_hist[] = {"history"};
    charts(out, &cs, k_steps, 1, "Tokens/s against denoising steps",
           "Steps are the diffusion speed/quality lever; the autoregressive backends, which have no steps, are "
           "the dashed reference lines.");
    charts(out, &cs, k_batch, 2, "Latency and throughput against batch",
           "The two curves the articles ask for: what one user waits for, beside what the machine delivers to "
           "all users.");
    charts(out, &cs, k_rate, 2, "Serving: latency against request rate",
           "Cases that differ only in the offered request rate (an open-loop sweep): the latency percentiles "
           "at each rate, and the requests/s the server achieved (and goodput, where the suite sets its "
           "limits). Where the tails turn up and achieved falls below offered, the server is saturated.");
    charts(out, &cs, k_pareto, 1, "Quality against speed", "Who is faster at the same quality.");
    const tb_rtable *aup = find_table(&ts, "aup"); /* its one number per backend, beside the chart */
    if (aup) {
        fputs("<h3 id=\"aup\">", out);
        esc(out, aup->title);
        fputs("</h3>\n", out);
        table(out, aup);
    }
    charts(out, &cs, k_acc, 1, "Speculative decoding: acceptance by position",
           "For each speculative case, the share of verifications that accepted each draft position: where "
           "its drafter stops being right.");
    charts(out, &cs, k_canvas, 1, "Diffusion: tokens committed a step",
           "For each diffusion case, the denoising steps a canvas took and the tokens it committed a step: "
           "what an adaptive sampler saves, and what a fixed schedule costs.");
    charts(out, &cs, k_itl, 1, "Inter-token latency", "How evenly tokens arrive.");
    charts(out, &cs, k_tel, 1, "Telemetry",
           "What the server (its Prometheus /metrics: queue depth, KV-cache use, running requests) and the "
           "local GPUs (NVML: utilisation, memory, power, clocks, temperature) reported while each case ran "
           "(the suite's [telemetry]).");
    charts(out, &cs, k_hist, 1, "History", "The same cases in other sessions of this database.");

    for (size_t i = 0; i < ts.n; i++) {
        const tb_rtable *t = &ts.v[i];
        if (t == sbs || t == aup)
            continue;
        int big = strcmp(t->id, "statistics") == 0;
        fprintf(out, "<h2 id=\"%s\">", t->id);
        esc(out, t->title);
        fputs("</h2>\n", out);
        if (big)
            fputs("<details><summary>show all statistics</summary>\n", out);
        table(out, t);
        if (big)
            fputs("</details>\n", out);
    }

    fputs("<h2 id=\"conditions\">Conditions</h2>\n<div class=\"cols\">\n<div><h3>Session</h3>\n", out);
    kv_table(out, &s.session);
    fputs("</div>\n<div><h3>Machine</h3>\n", out);
    kv_table(out, &s.machine);
    fputs("</div>\n</div>\n<div class=\"cols\">\n", out);
    for (size_t b = 0; b < s.n_backends; b++) {
        fputs("<div><h3>Backend ", out);
        esc(out, s.backends[b].label);
        fputs("</h3>\n", out);
        kv_table(out, &s.backends[b].info);
        fputs("</div>\n", out);
    }
    fputs("</div>\n<h3>Suite</h3>\n<details><summary>the suite as run (includes inlined)</summary>\n<pre>", out);
    esc(out, s.suite_text);
    fputs("</pre>\n</details>\n", out);
    tb_html_end(out);

    free(title);
    tb_rcharts_free(&cs);
    tb_rtables_free(&ts);
    tb_warnings_free(&w);
    tb_rsession_free(&s);
    return 0;
}
