/* charts.h — the charts of a session report (docs/REPORTS.md):
 *   steps    aggregate tokens/s against denoising steps, one line per
 *            diffusion backend, AR backends as horizontal references;
 *   latency / throughput
 *            per-request latency (E2E) and aggregate tokens/s against batch
 *            (or concurrency): the two curves side by side;
 *   rate / goodput
 *            for cases that differ only in request_rate (an open-loop
 *            sweep): TTFT, TPOT and E2E p50/p90/p99 against the offered
 *            rate, and achieved requests/s and goodput against it;
 *   pareto   quality against tokens/s with the Pareto front (only when a
 *            quality metric is stored);
 *   acceptance
 *            speculative decoding: the share accepted by draft position;
 *   canvas   diffusion samplers: committed tokens per step against
 *            steps per canvas, a point per case, a line per backend;
 *   itl      the distribution (CDF) of inter-token latencies;
 *   telemetry
 *            per case, each metric sampled while it ran (a server's
 *            /metrics, the local GPUs' NVML readings) against time;
 *   history  each backend's aggregate tokens/s across sessions, when the
 *            database holds the same cases from other sessions. */
#ifndef TB_REPORT_CHARTS_H
#define TB_REPORT_CHARTS_H

#include <sqlite3.h>

#include "rsession.h"
#include "svg.h"

typedef struct tb_rchart {
    const char *kind; /* "steps", "latency", "throughput", "rate", "goodput", "pareto", "acceptance",
                         "canvas", "itl", "telemetry", "history" */
    char *caption;    /* what the chart shows and how to read it */
    tb_chart *chart;
} tb_rchart;

typedef struct tb_rcharts {
    tb_rchart *v;
    size_t n;
} tb_rcharts;

/* 0, or -1 with *err when the database could not be read (nothing in
 * *out then). */
int tb_charts_session(sqlite3 *db, const tb_rsession *s, tb_rcharts *out, char **err);
void tb_rcharts_free(tb_rcharts *c);

#endif
