/* telemetry.h — time series sampled while a case runs (docs/METRICS.md,
 * "Telemetry"): a server's Prometheus /metrics endpoint, scraped every
 * `period` (vLLM, SGLang and TGI expose queue depth, KV-cache use, running
 * requests), and the local GPUs' NVML readings (utilisation, memory,
 * power, clocks, temperature) when libnvidia-ml loads (dlopen: a build or
 * a machine without it samples nothing and says so once).
 *
 *   [telemetry]
 *   metrics_url = http://127.0.0.1:8000/metrics   (none: no scraping)
 *   period = 1            seconds between samples (0.05 .. 3600)
 *   metrics = vllm:num_requests_running, vllm:gpu_cache_usage_perc
 *                         metric names to keep (default: every sample
 *                         but histogram buckets, *_bucket)
 *   nvml = auto           auto (when present) | off
 *   timeout = 2           seconds one scrape may take
 *
 * The sampler is a child process of the runner (core/proc.h), started
 * when a case's backend is loaded and stopped when its result arrives:
 * it keeps what it samples in its own memory (bounded: TB_TELEMETRY_MAX_*)
 * and hands it over at the stop, so the runner, which waits on the
 * backend meanwhile, reads nothing during the case. A scrape is bounded
 * (body, line, series); one that fails is counted, not fatal. A scrape
 * never holds up the case: the sampler watches the runner's stop beside
 * the scrape's socket, and a scrape in flight at the stop gets
 * TB_TELEMETRY_GRACE_MS more, then is abandoned (a hung endpoint delays
 * neither a case's end nor Ctrl-C by more than that). */
#ifndef TB_TELEMETRY_H
#define TB_TELEMETRY_H

#include <stddef.h>
#include <stdint.h>

#include "record.h"
#include "suite.h"

#define TB_TELEMETRY_MAX_BODY (4u << 20)  /* bytes of one /metrics response */
#define TB_TELEMETRY_MAX_LINE 65536       /* bytes of one exposition line */
#define TB_TELEMETRY_MAX_SERIES 4096      /* distinct series kept per case */
#define TB_TELEMETRY_MAX_POINTS 2000000   /* points kept per case */
#define TB_TELEMETRY_GRACE_MS 1000       /* a scrape in flight at a case's end:
                                             time left to it (at most its
                                             timeout), then abandoned */
#define TB_TELEMETRY_STOP_S 5             /* the sampler's hand-over at a case's
                                             end, at most (it answers within
                                             the grace above); else killed */

typedef struct tb_telemetry_config {
    char *metrics_url; /* NULL: no scraping */
    double period_s;
    char **metrics;    /* names to keep; n_metrics 0: all but *_bucket */
    size_t n_metrics;
    int nvml;          /* 1: auto, 0: off */
    double timeout_s;
    int enabled;       /* a [telemetry] section with something to sample */
} tb_telemetry_config;

/* The suite's [telemetry] settings, checked: 0, or -1 with *err (one
 * "file:line: key: ..." line per problem). No section: enabled 0. */
int tb_telemetry_config_parse(const tb_suite *suite, tb_telemetry_config *cfg, char **err);
void tb_telemetry_config_free(tb_telemetry_config *cfg);

/* One sample of the Prometheus text exposition format, as the parser
 * reads it: the metric name, its labels as written between the braces
 * ("" when none; label values unescaped, then written back in a
 * canonical form: k="v",k2="v2"), the value. */
typedef struct tb_prom_sample {
    char name[256];
    char labels[1024];
    double value;
} tb_prom_sample;

/* Parse one exposition line. 1: a sample (in *out), 0: nothing to keep
 * (blank, a comment, # HELP / # TYPE / # EOF), -1: malformed (why in
 * why[why_size]). Bounded: names and labels past their buffers are
 * malformed, never cut. */
int tb_prom_parse_line(const char *line, size_t len, tb_prom_sample *out, char *why, size_t why_size);

/* Is metric `name` kept under cfg's filter? */
int tb_telemetry_keep(const tb_telemetry_config *cfg, const char *name);

typedef struct tb_telemetry tb_telemetry;

/* Start sampling (a child process). NULL when cfg is not enabled, or
 * with *err when the child cannot start (the case runs anyway). */
tb_telemetry *tb_telemetry_start(const tb_telemetry_config *cfg, char **err);

/* Stop, and move what was sampled into rec (rec->telemetry, times in ns
 * since the start). 0, or -1 with *err (what was read is kept). A note
 * for the user (scrapes that failed, NVML absent) in *note (malloc'd,
 * NULL when none). Frees t. */
int tb_telemetry_stop(tb_telemetry *t, tb_case_record *rec, char **note, char **err);

#endif
