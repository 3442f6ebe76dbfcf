/* telemetry.c — see telemetry.h. */
#define _GNU_SOURCE
#include "telemetry.h"

#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#ifdef TB_HAVE_CURL
#include <curl/curl.h>
#endif

#include "proc.h"
#include "util.h"

/* ------------------------------------------------------ configuration */

static void add_err(tb_str *e, const tb_setting *st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void add_err(tb_str *e, const tb_setting *st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *m = NULL;
    if (vasprintf(&m, fmt, ap) < 0)
        m = NULL;
    va_end(ap);
    tb_str_appendf(e, "%s:%d: %s: %s\n", st->value.loc.file, st->value.loc.line, st->key, m ? m : "invalid");
    free(m);
}

static int seconds(const char *v, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (end == v || *end || errno || !(x >= lo && x <= hi))
        return -1;
    *out = x;
    return 0;
}

int tb_telemetry_config_parse(const tb_suite *suite, tb_telemetry_config *cfg, char **err)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->period_s = 1;
    cfg->timeout_s = 2;
    cfg->nvml = 1;
    if (!suite->has_telemetry)
        return 0;
    tb_str e = {0};
    for (size_t i = 0; i < suite->n_telemetry; i++) {
        const tb_setting *st = &suite->telemetry[i];
        const char *v = st->value.raw ? st->value.raw : "";
        if (strcmp(st->key, "metrics_url") == 0) {
            if (strcmp(v, "none") == 0 || !*v)
                continue;
#ifndef TB_HAVE_CURL
            add_err(&e, st, "this tokbench was built without libcurl: it cannot scrape %s", v);
#else
            if (strncmp(v, "http://", 7) != 0 && strncmp(v, "https://", 8) != 0)
                add_err(&e, st, "expected http://HOST[:PORT]/PATH (a Prometheus /metrics endpoint), got \"%s\"", v);
            else
                cfg->metrics_url = tb_xstrdup(v);
#endif
        } else if (strcmp(st->key, "period") == 0) {
            if (seconds(v, 0.05, 3600, &cfg->period_s) != 0)
                add_err(&e, st, "expected seconds between samples, 0.05 to 3600, got \"%s\"", v);
        } else if (strcmp(st->key, "timeout") == 0) {
            if (seconds(v, 0.01, 600, &cfg->timeout_s) != 0)
                add_err(&e, st, "expected seconds one scrape may take, 0.01 to 600, got \"%s\"", v);
        } else if (strcmp(st->key, "nvml") == 0) {
            if (strcmp(v, "auto") == 0)
                cfg->nvml = 1;
            else if (strcmp(v, "off") == 0)
                cfg->nvml = 0;
            else
                add_err(&e, st, "expected auto (sample the local GPUs when NVML is present) or off, got \"%s\"", v);
        } else if (strcmp(st->key, "metrics") == 0) {
            for (size_t k = 0; k < st->value.n; k++) {
                const char *n = st->value.items[k];
                size_t ok = strspn(n, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_:");
                if (!*n || n[ok] || (n[0] >= '0' && n[0] <= '9')) {
                    add_err(&e, st, "\"%s\" is not a Prometheus metric name ([a-zA-Z_:][a-zA-Z0-9_:]*)", n);
                    continue;
                }
                cfg->metrics = tb_xrealloc(cfg->metrics, (cfg->n_metrics + 1) * sizeof *cfg->metrics);
                cfg->metrics[cfg->n_metrics++] = tb_xstrdup(n);
            }
        } else {
            add_err(&e, st, "unknown key in [telemetry] (expected metrics_url, period, metrics, nvml or timeout)");
        }
    }
    cfg->enabled = cfg->metrics_url != NULL || cfg->nvml;
    if (e.len) {
        *err = tb_str_take(&e);
        tb_telemetry_config_free(cfg);
        return -1;
    }
    return 0;
}

void tb_telemetry_config_free(tb_telemetry_config *cfg)
{
    free(cfg->metrics_url);
    for (size_t i = 0; i < cfg->n_metrics; i++)
        free(cfg->metrics[i]);
    free(cfg->metrics);
    memset(cfg, 0, sizeof *cfg);
}

int tb_telemetry_keep(const tb_telemetry_config *cfg, const char *name)
{
    if (cfg->n_metrics) {
        for (size_t i = 0; i < cfg->n_metrics; i++)
            if (strcmp(cfg->metrics[i], name) == 0)
                return 1;
        return 0;
    }
    size_t n = strlen(name);
    return !(n >= 7 && strcmp(name + n - 7, "_bucket") == 0);
}

/* ------------------------------------------------------ the exposition format */

static int name_char(char c, int first)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' || (!first && c >= '0' && c <= '9');
}

int tb_prom_parse_line(const char *line, size_t len, tb_prom_sample *out, char *why, size_t why_size)
{
    const char *p = line, *end = line + len;
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    if (p == end || *p == '#' || *p == '\r')
        return 0; /* blank, # HELP, # TYPE, # EOF, a comment */
    size_t n = 0;
    while (p < end && name_char(*p, n == 0)) {
        if (n + 1 >= sizeof out->name) {
            snprintf(why, why_size, "a metric name longer than %zu bytes", sizeof out->name - 1);
            return -1;
        }
        out->name[n++] = *p++;
    }
    out->name[n] = '\0';
    if (n == 0) {
        snprintf(why, why_size, "expected a metric name at the start of the line");
        return -1;
    }
    size_t ln = 0;
    out->labels[0] = '\0';
#define LABEL_PUT(c)                                                                                           \
    do {                                                                                                       \
        if (ln + 1 >= sizeof out->labels) {                                                                    \
            snprintf(why, why_size, "labels longer than %zu bytes", sizeof out->labels - 1);                   \
            return -1;                                                                                         \
        }                                                                                                      \
        out->labels[ln++] = (c);                                                                               \
    } while (0)
    if (p < end && *p == '{') {
        p++;
        for (;;) {
            while (p < end && (*p == ' ' || *p == '\t'))
                p++;
            if (p < end && *p == '}') {
                p++;
                break;
            }
            if (ln)
                LABEL_PUT(',');
            size_t k = 0;
            while (p < end && name_char(*p, k == 0) && *p != ':') {
                LABEL_PUT(*p++);
                k++;
            }
            while (p < end && (*p == ' ' || *p == '\t'))
                p++;
            if (k == 0 || p >= end || *p != '=') {
                snprintf(why, why_size, "expected label=\"value\" inside {}");
                return -1;
            }
            for (p++; p < end && (*p == ' ' || *p == '\t');)
                p++;
            if (p >= end || *p != '"') {
                snprintf(why, why_size, "expected label=\"value\" inside {}");
                return -1;
            }
            LABEL_PUT('=');
            LABEL_PUT('"');
            p++;
            for (;;) {
                if (p >= end) {
                    snprintf(why, why_size, "a label value without its closing quote");
                    return -1;
                }
                char c = *p++;
                if (c == '"')
                    break;
                if (c == '\\') { /* \\, \" and \n stay escaped in the canonical form */
                    if (p >= end || (*p != '\\' && *p != '"' && *p != 'n')) {
                        snprintf(why, why_size, "a label value with a bad escape (expected \\\\, \\\" or \\n)");
                        return -1;
                    }
                    LABEL_PUT('\\');
                    LABEL_PUT(*p++);
                    continue;
                }
                if ((unsigned char)c < 0x20) {
                    snprintf(why, why_size, "a control character in a label value");
                    return -1;
                }
                LABEL_PUT(c);
            }
            LABEL_PUT('"');
            while (p < end && (*p == ' ' || *p == '\t'))
                p++;
            if (p < end && *p == ',') {
                p++;
                continue;
            }
            if (p < end && *p == '}') {
                p++;
                break;
            }
            snprintf(why, why_size, "expected , or } after a label");
            return -1;
        }
    }
#undef LABEL_PUT
    out->labels[ln] = '\0';
    if (p >= end || (*p != ' ' && *p != '\t')) {
        snprintf(why, why_size, "expected a space and a value after %s", out->name);
        return -1;
    }
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    char num[64];
    size_t k = 0;
    while (p < end && *p != ' ' && *p != '\t' && *p != '\r') {
        if (k + 1 >= sizeof num) {
            snprintf(why, why_size, "a value longer than %zu bytes", sizeof num - 1);
            return -1;
        }
        num[k++] = *p++;
    }
    num[k] = '\0';
    if (strcmp(num, "+Inf") == 0 || strcmp(num, "Inf") == 0)
        out->value = INFINITY;
    else if (strcmp(num, "-Inf") == 0)
        out->value = -INFINITY;
    else if (strcmp(num, "NaN") == 0)
        out->value = NAN;
    else {
        char *e;
        errno = 0;
        out->value = strtod(num, &e);
        /* strtod's own spellings of infinity and NaN are not the format's */
        if (k == 0 || *e || errno == EINVAL || strpbrk(num, "iInNxXpP")) {
            snprintf(why, why_size, "\"%.40s\" is not a number", num);
            return -1;
        }
    }
    /* an optional timestamp (ms), then nothing */
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    if (p < end && *p != '\r') {
        if (*p == '-')
            p++;
        const char *t = p; /* the timestamp's digits */
        while (p < end && *p >= '0' && *p <= '9')
            p++;
        int digits = p > t;
        while (p < end && (*p == ' ' || *p == '\t' || *p == '\r'))
            p++;
        if (!digits || p < end) {
            snprintf(why, why_size, "unexpected text after the value");
            return -1;
        }
    }
    return 1;
}

/* ------------------------------------------------------ the sampler (child) */

typedef struct series {
    char *source, *name;
} series;

typedef struct point {
    uint32_t series;
    int64_t t_ns;
    double value;
} point;

typedef struct sampler {
    const tb_telemetry_config *cfg;
    series *s;
    size_t n_s;
    point *p;
    size_t n_p, cap_p;
    size_t dropped;           /* points past the bounds */
    size_t scrapes, failed;   /* scrapes of metrics_url; those that got nothing */
    size_t partial;           /* scrapes with malformed lines (the others kept) */
    size_t abandoned;         /* scrapes unanswered when the runner stopped it */
    char first_partial[256];
    char first_error[256];
    char nvml_note[256];
    /* the body of the scrape in progress */
    char *body;
    size_t body_len;
    int too_large;
    /* `metrics =`: which names some answered scrape had (matched[i] of
     * cfg->metrics[i]), after how many answered scrapes, and the
     * distinct names the endpoint offered (for the close ones) */
    unsigned char *matched; /* cfg->n_metrics of them */
    size_t answered;
    char **offered;
    size_t n_offered;
} sampler;

/* Edit distance of a and b (bounded: 0..255 characters each), or a large
 * number past that. */
static size_t distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 255 || lb > 255)
        return SIZE_MAX;
    size_t row[256];
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

static uint32_t series_id(sampler *sm, const char *source, const char *name)
{
    for (size_t i = sm->n_s; i-- > 0;)
        if (strcmp(sm->s[i].name, name) == 0 && strcmp(sm->s[i].source, source) == 0)
            return (uint32_t)i;
    if (sm->n_s >= TB_TELEMETRY_MAX_SERIES)
        return UINT32_MAX;
    sm->s = tb_xrealloc(sm->s, (sm->n_s + 1) * sizeof *sm->s);
    sm->s[sm->n_s] = (series){tb_xstrdup(source), tb_xstrdup(name)};
    return (uint32_t)sm->n_s++;
}

static void add_point(sampler *sm, const char *source, const char *name, int64_t t, double v)
{
    uint32_t id = series_id(sm, source, name);
    if (id == UINT32_MAX || sm->n_p >= TB_TELEMETRY_MAX_POINTS) {
        sm->dropped++;
        return;
    }
    if (sm->n_p == sm->cap_p) {
        sm->cap_p = sm->cap_p ? 2 * sm->cap_p : 1024;
        sm->p = tb_xrealloc(sm->p, sm->cap_p * sizeof *sm->p);
    }
    sm->p[sm->n_p++] = (point){id, t, v};
}

#ifdef TB_HAVE_CURL /* a failed scrape: counted, the first one's reason kept */
static void scrape_failed(sampler *sm, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void scrape_failed(sampler *sm, const char *fmt, ...)
{
    sm->failed++;
    if (sm->first_error[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sm->first_error, sizeof sm->first_error, fmt, ap);
    va_end(ap);
}

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *user)
{
    sampler *sm = user;
    size_t n = size * nmemb;
    if (n > TB_TELEMETRY_MAX_BODY - sm->body_len) {
        sm->too_large = 1;
        return 0; /* aborts the transfer: a body is bounded */
    }
    memcpy(sm->body + sm->body_len, ptr, n);
    sm->body_len += n;
    return n;
}

/* Is the runner's stop (its end of the pipe closed) there? */
static int stop_asked(int fd_in)
{
    struct pollfd p = {.fd = fd_in, .events = POLLIN};
    return poll(&p, 1, 0) > 0;
}

/* One scrape, on a multi handle watched beside the runner's pipe: at the
 * case's end (or Ctrl-C) a scrape in flight gets TB_TELEMETRY_GRACE_MS
 * more (at most its timeout) and is then abandoned, whatever the endpoint
 * does, so a hung endpoint never holds up a case or a signal (issue 38,
 * item 10). 1: the runner asked to stop meanwhile. */
static int scrape(sampler *sm, CURLM *m, CURL *e, int64_t t, int fd_in)
{
    sm->scrapes++;
    sm->body_len = 0;
    sm->too_large = 0;
    if (curl_multi_add_handle(m, e) != CURLM_OK) {
        scrape_failed(sm, "cannot start a transfer");
        return 0;
    }
    int running = 1, stopped = 0, abandon = 0;
    int64_t until = 0; /* once stopped: the end of the grace */
    CURLcode rc = CURLE_OK;
    for (;;) {
        if (curl_multi_perform(m, &running) != CURLM_OK || !running)
            break;
        if (!stopped) {
            struct curl_waitfd w = {.fd = fd_in, .events = CURL_WAIT_POLLIN};
            curl_multi_poll(m, &w, 1, 1000, NULL);
            if ((stopped = stop_asked(fd_in))) {
                double grace_ms = fmin(TB_TELEMETRY_GRACE_MS, sm->cfg->timeout_s * 1000);
                until = tb_now_ns() + (int64_t)(grace_ms * 1e6);
            }
        } else { /* the pipe stays readable: wait on the transfer alone */
            int64_t left = until - tb_now_ns();
            if (left <= 0) {
                abandon = 1;
                break;
            }
            curl_multi_poll(m, NULL, 0, (int)((left + 999999) / 1000000), NULL);
        }
    }
    int left;
    CURLMsg *msg;
    while ((msg = curl_multi_info_read(m, &left)))
        if (msg->msg == CURLMSG_DONE)
            rc = msg->data.result;
    curl_multi_remove_handle(m, e);
    if (abandon) { /* not a failure of the endpoint's: said apart */
        sm->scrapes--;
        sm->abandoned++;
        return 1;
    }
    long code = 0;
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code);
    if (sm->too_large) {
        scrape_failed(sm, "a response larger than %u MiB", TB_TELEMETRY_MAX_BODY >> 20);
        return stopped;
    }
    if (rc != CURLE_OK) {
        scrape_failed(sm, "%s", curl_easy_strerror(rc));
        return stopped;
    }
    if (code != 200) {
        scrape_failed(sm, "HTTP %ld", code);
        return stopped;
    }
    const char *src = sm->cfg->metrics_url;
    size_t bad = 0, line_no = 0;
    sm->answered++;
    char why[160], first_bad[200] = "";
    for (size_t at = 0; at < sm->body_len;) {
        const char *l = sm->body + at;
        const char *nl = memchr(l, '\n', sm->body_len - at);
        size_t len = nl ? (size_t)(nl - l) : sm->body_len - at;
        at += len + 1;
        line_no++;
        if (len > TB_TELEMETRY_MAX_LINE) {
            if (!bad++)
                snprintf(first_bad, sizeof first_bad, "line %zu: longer than %d bytes", line_no, TB_TELEMETRY_MAX_LINE);
            continue;
        }
        tb_prom_sample ps;
        int r = tb_prom_parse_line(l, len, &ps, why, sizeof why);
        if (r < 0) {
            if (!bad++)
                snprintf(first_bad, sizeof first_bad, "line %zu: %s", line_no, why);
            continue;
        }
        if (r == 1 && sm->cfg->n_metrics) {
            for (size_t i = 0; i < sm->cfg->n_metrics; i++)
                sm->matched[i] |= strcmp(sm->cfg->metrics[i], ps.name) == 0;
            size_t k = 0;
            while (k < sm->n_offered && strcmp(sm->offered[k], ps.name) != 0)
                k++;
            if (k == sm->n_offered && sm->n_offered < TB_TELEMETRY_MAX_SERIES) {
                sm->offered = tb_xrealloc(sm->offered, (sm->n_offered + 1) * sizeof *sm->offered);
                sm->offered[sm->n_offered++] = tb_xstrdup(ps.name);
            }
        }
        if (r == 0 || !tb_telemetry_keep(sm->cfg, ps.name))
            continue;
        char full[sizeof ps.name + sizeof ps.labels + 2];
        snprintf(full, sizeof full, ps.labels[0] ? "%s{%s}" : "%s", ps.name, ps.labels);
        add_point(sm, src, full, t, ps.value);
    }
    if (bad && !sm->partial++)
        snprintf(sm->first_partial, sizeof sm->first_partial, "%zu malformed lines; first: %s", bad, first_bad);
    return stopped;
}
#endif

/* NVML through dlopen: the few calls the sampler makes. */
typedef struct nvml_api {
    void *lib;
    int (*init)(void);
    int (*shutdown)(void);
    int (*count)(unsigned *);
    int (*handle)(unsigned, void **);
    int (*util)(void *, unsigned[2]);          /* nvmlUtilization_t: gpu, memory % */
    int (*mem)(void *, unsigned long long[3]); /* nvmlMemory_t: total, free, used */
    int (*power)(void *, unsigned *);          /* mW */
    int (*clock)(void *, int, unsigned *);     /* MHz; 1: SM, 2: memory */
    int (*temp)(void *, int, unsigned *);      /* 0: the GPU die, C */
    unsigned n;
} nvml_api;

static void *sym(void *lib, const char *name, int *ok)
{
    void *p = dlsym(lib, name);
    *ok &= p != NULL;
    return p;
}

static int nvml_open(nvml_api *a, char *note, size_t note_size)
{
    memset(a, 0, sizeof *a);
    a->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!a->lib) {
        snprintf(note, note_size, "NVML not sampled: libnvidia-ml.so.1 not found");
        return -1;
    }
    int ok = 1;
    void *f[10] = {
        sym(a->lib, "nvmlInit_v2", &ok), sym(a->lib, "nvmlShutdown", &ok), sym(a->lib, "nvmlDeviceGetCount_v2", &ok),
        sym(a->lib, "nvmlDeviceGetHandleByIndex_v2", &ok), sym(a->lib, "nvmlDeviceGetUtilizationRates", &ok),
        sym(a->lib, "nvmlDeviceGetMemoryInfo", &ok), sym(a->lib, "nvmlDeviceGetPowerUsage", &ok),
        sym(a->lib, "nvmlDeviceGetClockInfo", &ok), sym(a->lib, "nvmlDeviceGetTemperature", &ok), NULL,
    };
    if (!ok) {
        snprintf(note, note_size, "NVML not sampled: libnvidia-ml.so.1 lacks a function the sampler needs");
        dlclose(a->lib);
        a->lib = NULL;
        return -1;
    }
    /* function pointers from void *: memcpy, as ISO C allows */
    memcpy(&a->init, &f[0], sizeof f[0]);
    memcpy(&a->shutdown, &f[1], sizeof f[1]);
    memcpy(&a->count, &f[2], sizeof f[2]);
    memcpy(&a->handle, &f[3], sizeof f[3]);
    memcpy(&a->util, &f[4], sizeof f[4]);
    memcpy(&a->mem, &f[5], sizeof f[5]);
    memcpy(&a->power, &f[6], sizeof f[6]);
    memcpy(&a->clock, &f[7], sizeof f[7]);
    memcpy(&a->temp, &f[8], sizeof f[8]);
    if (a->init() != 0 || a->count(&a->n) != 0) {
        snprintf(note, note_size, "NVML not sampled: nvmlInit failed (no GPU or driver)");
        dlclose(a->lib);
        a->lib = NULL;
        return -1;
    }
    return 0;
}

static void nvml_sample(sampler *sm, nvml_api *a, int64_t t)
{
    for (unsigned i = 0; i < a->n && i < 64; i++) {
        void *h = NULL;
        if (a->handle(i, &h) != 0)
            continue;
        char name[64];
        unsigned u[2], v;
        unsigned long long m[3];
#define NV(what, expr, val)                                                                                    \
    do {                                                                                                       \
        if ((expr) == 0) {                                                                                     \
            snprintf(name, sizeof name, "gpu%u:%s", i, what);                                                  \
            add_point(sm, "nvml", name, t, (double)(val));                                                     \
        }                                                                                                      \
    } while (0)
        if (a->util(h, u) == 0) {
            NV("util_pct", 0, u[0]);
            NV("mem_util_pct", 0, u[1]);
        }
        NV("mem_used_mib", a->mem(h, m), (double)m[2] / 1048576.0);
        NV("power_w", a->power(h, &v), v / 1000.0);
        NV("sm_clock_mhz", a->clock(h, 1, &v), v);
        NV("mem_clock_mhz", a->clock(h, 2, &v), v);
        NV("temp_c", a->temp(h, 0, &v), v);
#undef NV
    }
}

/* What the child hands back, text lines:
 *   S <id> <source> <name>     a series (tab-separated)
 *   P <id> <t_ns> <value>      a point
 *   T <made> <failed> <first>  the scrapes of metrics_url
 *   N <note>                   a note for the user */
static void dump(sampler *sm, int fd)
{
    FILE *f = fdopen(fd, "w");
    if (!f)
        return;
    /* a `metrics =` name no answered scrape had (a typo, or a metric
     * the server does not serve): a series without points, stored with
     * the case (warnings.c says it), and a note naming the close names
     * the endpoint offered */
    for (size_t i = 0; sm->answered && i < sm->cfg->n_metrics; i++) {
        if (sm->matched[i])
            continue;
        const char *want = sm->cfg->metrics[i];
        series_id(sm, sm->cfg->metrics_url, want);
        tb_str close = {0};
        size_t limit = strlen(want) / 4 + 1;
        for (size_t k = 0; k < sm->n_offered; k++)
            if (distance(want, sm->offered[k]) <= limit)
                tb_str_appendf(&close, "%s%s", close.len ? ", " : "", sm->offered[k]);
        fprintf(f, "N\tmetrics = %s matched no sample in the %zu answered scrapes of %s: no points stored for it%s%s%s\n",
                want, sm->answered, sm->cfg->metrics_url, close.len ? " (close names it offered: " : "",
                close.len ? close.s : "", close.len ? ")" : "");
        tb_str_free(&close);
    }
    for (size_t i = 0; i < sm->n_s; i++)
        fprintf(f, "S\t%zu\t%s\t%s\n", i, sm->s[i].source, sm->s[i].name);
    for (size_t i = 0; i < sm->n_p; i++)
        fprintf(f, "P\t%u\t%lld\t%.17g\n", sm->p[i].series, (long long)sm->p[i].t_ns, sm->p[i].value);
    /* the tally, stored with the case (a result: warnings.c) */
    if (sm->scrapes)
        fprintf(f, "T\t%zu\t%zu\t%s\n", sm->scrapes, sm->failed, sm->failed ? sm->first_error : "");
    else if (sm->abandoned)
        fprintf(f, "T\t%zu\t%zu\tunanswered at the case's end (abandoned)\n", sm->abandoned, sm->abandoned);
    if (sm->failed)
        fprintf(f, "N\t%zu of %zu scrapes of %s failed (first: %s)\n", sm->failed, sm->scrapes,
                sm->cfg->metrics_url, sm->first_error);
    if (sm->abandoned && !sm->scrapes)
        fprintf(f, "N\tno scrape of %s answered while the case ran (the last one abandoned at its end)\n",
                sm->cfg->metrics_url);
    if (sm->partial)
        fprintf(f, "N\t%zu of %zu scrapes of %s had lines that are not the exposition format, skipped (first "
                   "scrape: %s)\n", sm->partial, sm->scrapes, sm->cfg->metrics_url, sm->first_partial);
    if (sm->nvml_note[0])
        fprintf(f, "N\t%s\n", sm->nvml_note);
    if (sm->dropped)
        fprintf(f, "N\t%zu samples past the bounds (%d series, %d points a case) not kept\n", sm->dropped,
                TB_TELEMETRY_MAX_SERIES, TB_TELEMETRY_MAX_POINTS);
    fclose(f);
}

static void child(void *arg, int fd_in, int fd_out)
{
    const tb_telemetry_config *cfg = arg;
    sampler sm = {.cfg = cfg, .matched = tb_xcalloc(cfg->n_metrics + 1, 1)};
    nvml_api nv = {0};
    if (cfg->nvml)
        nvml_open(&nv, sm.nvml_note, sizeof sm.nvml_note);
#ifdef TB_HAVE_CURL
    CURL *e = NULL;
    CURLM *m = NULL;
    if (cfg->metrics_url) {
        sm.body = tb_xmalloc(TB_TELEMETRY_MAX_BODY);
        e = curl_easy_init();
        m = curl_multi_init();
        if (e && !m) {
            curl_easy_cleanup(e);
            e = NULL;
        }
        if (e) {
            curl_easy_setopt(e, CURLOPT_URL, cfg->metrics_url);
            curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
            curl_easy_setopt(e, CURLOPT_WRITEDATA, &sm);
            curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)(cfg->timeout_s * 1000));
            curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)(cfg->timeout_s * 1000));
            curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
            curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
        }
    }
#endif
    int64_t t0 = tb_now_ns(), period = (int64_t)(cfg->period_s * 1e9), next = t0;
    for (;;) {
        int64_t now = tb_now_ns();
        if (now >= next) {
#ifdef TB_HAVE_CURL
            if (e && scrape(&sm, m, e, now - t0, fd_in))
                break; /* stopped while scraping */
#endif
            if (nv.lib)
                nvml_sample(&sm, &nv, now - t0);
            next += period;
            now = tb_now_ns();
            if (next <= now) /* a slow scrape: skip the samples it overran */
                next = now + period - (now - t0) % period;
        }
        int ms = (int)((next - now + 999999) / 1000000);
        struct pollfd p = {.fd = fd_in, .events = POLLIN};
        int r = poll(&p, 1, ms);
        if (r > 0) /* the runner's stop: its end of the pipe closed */
            break;
        if (r < 0 && errno != EINTR)
            break;
    }
#ifdef TB_HAVE_CURL
    if (e)
        curl_easy_cleanup(e);
    if (m)
        curl_multi_cleanup(m);
#endif
    if (nv.lib)
        nv.shutdown();
    dump(&sm, fd_out);
    tb_proc_child_exit();
}

/* ------------------------------------------------------ the runner's side */

struct tb_telemetry {
    tb_proc proc;
    int64_t t_start;
};

tb_telemetry *tb_telemetry_start(const tb_telemetry_config *cfg, char **err)
{
    if (!cfg || !cfg->enabled)
        return NULL;
#ifdef TB_HAVE_CURL
    static int curl_ready;
    if (!curl_ready) { /* here, once, in the parent: not thread-safe, and the child inherits it */
        curl_global_init(CURL_GLOBAL_DEFAULT);
        curl_ready = 1;
    }
#endif
    tb_telemetry *t = tb_xcalloc(1, sizeof *t);
    t->t_start = tb_now_ns();
    if (tb_proc_spawn(&t->proc, child, (void *)cfg) != 0) {
        *err = tb_xasprintf("telemetry: cannot start the sampler: %s", strerror(errno));
        free(t);
        return NULL;
    }
    return t;
}

int tb_telemetry_stop(tb_telemetry *t, tb_case_record *rec, char **note, char **err)
{
    *note = NULL;
    close(t->proc.to_fd); /* the child's poll wakes: it hands over and exits */
    t->proc.to_fd = -1;
    /* It answers at once, a scrape in flight or not; a sampler that does
     * not (stuck in NVML, say) is killed rather than waited for. */
    int64_t until = tb_now_ns() + (int64_t)TB_TELEMETRY_STOP_S * 1000000000;
    struct pollfd pf = {.fd = t->proc.from_fd, .events = POLLIN};
    int ready;
    while ((ready = poll(&pf, 1, 100)) == 0 || (ready < 0 && errno == EINTR))
        if (tb_now_ns() >= until)
            break;
    if (ready <= 0) {
        tb_proc_kill(&t->proc);
        *err = tb_xasprintf("telemetry: the sampler did not hand over within %d s of the case's end; killed (its "
                            "samples are lost)",
                            TB_TELEMETRY_STOP_S);
        free(t);
        return -1;
    }
    FILE *f = fdopen(dup(t->proc.from_fd), "r");
    tb_str notes = {0};
    int rc = 0;
    if (!f) {
        *err = tb_xasprintf("telemetry: cannot read the sampler: %s", strerror(errno));
        rc = -1;
    } else {
        char *line = NULL;
        size_t cap = 0;
        ssize_t n;
        size_t n_series = 0;
        while ((n = getline(&line, &cap, f)) > 0) {
            if (line[n - 1] == '\n')
                line[--n] = '\0';
            if (line[0] == 'S' && line[1] == '\t') {
                char *src = strchr(line + 2, '\t');
                char *name = src ? strchr(src + 1, '\t') : NULL;
                if (!name)
                    continue;
                *name++ = '\0';
                rec->tseries = tb_xrealloc(rec->tseries, (n_series + 1) * sizeof *rec->tseries);
                rec->tseries[n_series++] = (tb_telemetry_series){tb_xstrdup(src + 1), tb_xstrdup(name)};
                rec->n_tseries = n_series;
            } else if (line[0] == 'P' && line[1] == '\t') {
                unsigned id;
                long long ts;
                char v[64];
                if (sscanf(line + 2, "%u\t%lld\t%63s", &id, &ts, v) != 3 || id >= n_series)
                    continue;
                if ((rec->n_tpoints & (rec->n_tpoints - 1)) == 0) /* grow at powers of two */
                    rec->tpoints = tb_xrealloc(rec->tpoints, (rec->n_tpoints ? 2 * rec->n_tpoints : 1) *
                                                                 sizeof *rec->tpoints);
                rec->tpoints[rec->n_tpoints++] = (tb_telemetry_point){id, ts, strtod(v, NULL)};
            } else if (line[0] == 'T' && line[1] == '\t') {
                char *end;
                long long made = strtoll(line + 2, &end, 10), failed = *end == '\t' ? strtoll(end + 1, &end, 10) : -1;
                if (made > 0 && failed >= 0 && failed <= made && *end == '\t') {
                    rec->scrapes = made;
                    rec->scrapes_failed = failed;
                    free(rec->scrape_error);
                    rec->scrape_error = end[1] ? tb_xstrdup(end + 1) : NULL;
                }
            } else if (line[0] == 'N' && line[1] == '\t') {
                static int said_nvml; /* a machine without NVML: said once a run */
                if (strncmp(line + 2, "NVML not sampled", 16) == 0 && said_nvml++)
                    continue;
                tb_str_appendf(&notes, "%stelemetry: %s", notes.len ? "\n" : "", line + 2);
            }
        }
        free(line);
        fclose(f);
    }
    int status;
    tb_proc_wait(&t->proc, &status, NULL);
    if (rc == 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
        char *how = tb_proc_ending(status);
        *err = tb_xasprintf("telemetry: the sampler %s", how);
        free(how);
        rc = -1;
    }
    *note = notes.len ? tb_str_take(&notes) : NULL;
    tb_str_free(&notes);
    free(t);
    return rc;
}
