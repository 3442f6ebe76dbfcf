/* metrics.c — see metrics.h and docs/METRICS.md. */
#include "metrics.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "record.h"
#include "tokbench/backend.h"
#include "util.h"

void tb_request_metrics_compute(int64_t submit_ns, int64_t done_ns, uint32_t n_out,
                                const int64_t *em_t, size_t n_em, tb_request_metrics *out)
{
    int64_t first = n_em ? em_t[0] : done_ns;
    int64_t last = n_em ? em_t[n_em - 1] : done_ns;
    for (size_t i = 0; i < n_em; i++) { /* do not trust arrival order */
        if (em_t[i] < first)
            first = em_t[i];
        if (em_t[i] > last)
            last = em_t[i];
    }
    int64_t done = done_ns > last ? done_ns : last;
    out->submit_ns = submit_ns;
    out->done_ns = done;
    out->ttft_ns = first - submit_ns;
    out->e2e_ns = done - submit_ns;
    /* not streamed (the tokens came at one instant: no emission, or
     * every emission at once): no time between tokens was seen, so none
     * is reported (not 0) */
    int streamed = n_em >= 2 && last > first;
    out->tpot_ns = n_out >= 2 && streamed ? (double)(out->e2e_ns - out->ttft_ns) / (double)(n_out - 1) : NAN;
    out->tps = out->e2e_ns > 0 ? (double)n_out / ((double)out->e2e_ns * 1e-9) : NAN;
}

void tb_rep_metrics_compute(const tb_request_metrics *req, const uint32_t *n_out, const int *ok,
                            size_t n, int64_t prefill_ns, int64_t forward_passes,
                            tb_rep_metrics *out)
{
    int64_t start = 0, end = 0;
    uint64_t tokens = 0;
    for (size_t i = 0; i < n; i++) {
        if (i == 0 || req[i].submit_ns < start)
            start = req[i].submit_ns;
        if (i == 0 || req[i].done_ns > end)
            end = req[i].done_ns;
        if (ok[i])
            tokens += n_out[i];
    }
    out->wall_ns = end - start;
    out->output_tokens = tokens;
    double wall_s = (double)out->wall_ns * 1e-9;
    out->aggregate_tps = out->wall_ns > 0 ? (double)tokens / wall_s : NAN;
    out->decode_tps = prefill_ns >= 0 && prefill_ns < out->wall_ns
                          ? (double)tokens / ((double)(out->wall_ns - prefill_ns) * 1e-9)
                          : NAN;
    out->tokens_per_forward = forward_passes > 0 ? (double)tokens / (double)forward_passes : NAN;
}

double tb_sent_rate(const tb_request_metrics *req, size_t n)
{
    if (n < 2)
        return NAN;
    int64_t first = req[0].submit_ns, last = req[0].submit_ns;
    for (size_t i = 1; i < n; i++) {
        if (req[i].submit_ns < first)
            first = req[i].submit_ns;
        if (req[i].submit_ns > last)
            last = req[i].submit_ns;
    }
    return last > first ? (double)(n - 1) / ((double)(last - first) * 1e-9) : NAN;
}

double tb_roofline_pct(double flops, double bytes, double peak_flops, double peak_bytes_per_s, int64_t wall_ns)
{
    if (!(flops > 0) || !(bytes > 0) || !(peak_flops > 0) || !(peak_bytes_per_s > 0) || wall_ns <= 0 ||
        !isfinite(flops) || !isfinite(bytes) || !isfinite(peak_flops) || !isfinite(peak_bytes_per_s))
        return NAN;
    double t_compute = flops / peak_flops, t_memory = bytes / peak_bytes_per_s;
    return 100.0 * (t_compute > t_memory ? t_compute : t_memory) / ((double)wall_ns * 1e-9);
}

/* ------------------------------------------- speculative decoding */

const char *tb_spec_check(const tb_spec_counts *s, char *why, size_t n)
{
    if (s->draft_len > TB_SPEC_MAX_DRAFT) {
        snprintf(why, n, "draft_len %u > %d", s->draft_len, TB_SPEC_MAX_DRAFT);
        return why;
    }
    if (s->drafted && s->accepted > s->drafted) {
        snprintf(why, n, "accepted %u > drafted %u", s->accepted, s->drafted);
        return why;
    }
    if (!s->verifications && (s->accepted || s->drafted)) {
        snprintf(why, n, "%u drafted, %u accepted in 0 verifications", s->drafted, s->accepted);
        return why;
    }
    for (uint32_t i = 0; i < TB_SPEC_MAX_DRAFT; i++) {
        uint32_t d = s->drafted_at[i], a = s->accepted_at[i];
        if (i >= s->draft_len && (d || a))
            snprintf(why, n, "drafted_at[%u] %u, accepted_at[%u] %u past draft_len %u", i, d, i, a, s->draft_len);
        else if (a > d)
            snprintf(why, n, "accepted_at[%u] %u > drafted_at[%u] %u", i, a, i, d);
        else if (d > s->verifications)
            snprintf(why, n, "drafted_at[%u] %u > verifications %u", i, d, s->verifications);
        else
            continue;
        return why;
    }
    return NULL;
}

int tb_spec_any(const tb_spec_counts *s)
{
    return s->verifications || s->drafted || s->accepted || s->draft_len;
}

double tb_acceptance_length(const tb_spec_counts *s)
{
    return s->verifications ? ((double)s->accepted + (double)s->verifications) / (double)s->verifications : NAN;
}

double tb_acceptance_rate(const tb_spec_counts *s)
{
    return s->drafted ? (double)s->accepted / (double)s->drafted : NAN;
}

double tb_acceptance_at(const tb_spec_counts *s, uint32_t i)
{
    return i < TB_SPEC_MAX_DRAFT && s->drafted_at[i] ? (double)s->accepted_at[i] / (double)s->drafted_at[i] : NAN;
}

double tb_draft_time_share(int64_t draft_ns, int64_t decode_ns)
{
    return draft_ns > 0 && decode_ns > 0 ? (double)draft_ns / (double)decode_ns : NAN;
}

double tb_target_forwards_per_token(int64_t forward_passes, uint64_t output_tokens)
{
    return forward_passes > 0 && output_tokens > 0 ? (double)forward_passes / (double)output_tokens : NAN;
}

/* ------------------------------------------------- canvas models */

static const char *canvas_one(const tb_canvas *k, uint32_t count, int64_t *t_prev, int64_t t_lo, int64_t t_hi,
                              const char *what, uint32_t i, char *why, size_t n)
{
    if (k->steps < count)
        snprintf(why, n, "%s %u: %u steps", what, i, k->steps);
    else if (k->positions < k->steps)
        snprintf(why, n, "%s %u: %llu positions in %u steps", what, i, (unsigned long long)k->positions, k->steps);
    else if (k->t_done_ns < t_lo || k->t_done_ns > t_hi)
        snprintf(why, n, "%s %u: committed at %+.3f ms, outside the request", what, i,
                 (double)(k->t_done_ns - t_lo) * 1e-6);
    else if (k->t_done_ns < *t_prev)
        snprintf(why, n, "%s %u: committed %.3f ms before the one before it", what, i,
                 (double)(*t_prev - k->t_done_ns) * 1e-6);
    else {
        *t_prev = k->t_done_ns;
        return NULL;
    }
    return why;
}

void tb_canvas_total(const tb_canvas_counts *c, tb_canvas_sum *s)
{
    memset(s, 0, sizeof *s);
    uint32_t n = c->n < TB_CANVAS_MAX ? c->n : TB_CANVAS_MAX;
    for (uint32_t i = 0; i < n; i++) {
        s->steps += c->at[i].steps;
        s->committed += c->at[i].committed;
        s->positions += c->at[i].positions;
    }
    s->canvases = (uint64_t)n + c->n_past;
    s->steps += c->past.steps;
    s->committed += c->past.committed;
    s->positions += c->past.positions;
}

const char *tb_canvas_check(const tb_canvas_counts *c, uint32_t n_out, uint32_t steps_done, int64_t t_lo,
                            int64_t t_hi, char *why, size_t n)
{
    static const tb_canvas zero;
    if (c->n > TB_CANVAS_MAX) {
        snprintf(why, n, "%u canvases > %d", c->n, TB_CANVAS_MAX);
        return why;
    }
    if (c->n_past && c->n < TB_CANVAS_MAX) {
        snprintf(why, n, "%u canvases past the cap with %u of %d kept", c->n_past, c->n, TB_CANVAS_MAX);
        return why;
    }
    if (!c->n_past && memcmp(&c->past, &zero, sizeof zero) != 0) {
        snprintf(why, n, "figures of canvases past the cap, and none counted");
        return why;
    }
    int64_t t_prev = t_lo;
    for (uint32_t i = 0; i < c->n; i++)
        if (canvas_one(&c->at[i], 1, &t_prev, t_lo, t_hi, "canvas", i, why, n))
            return why;
    if (c->n_past && canvas_one(&c->past, c->n_past, &t_prev, t_lo, t_hi, "canvases past the cap, after", c->n, why, n))
        return why;
    tb_canvas_sum t;
    tb_canvas_total(c, &t);
    if (t.committed > n_out)
        snprintf(why, n, "canvases committed %llu tokens of %u output", (unsigned long long)t.committed, n_out);
    else if (steps_done && t.steps > steps_done)
        snprintf(why, n, "canvases took %llu steps of %u done", (unsigned long long)t.steps, steps_done);
    else
        return NULL;
    return why;
}

double tb_committed_per_step(const tb_canvas *k)
{
    return k->steps ? (double)k->committed / (double)k->steps : NAN;
}

double tb_positions_per_token(uint64_t positions, uint64_t committed)
{
    return committed ? (double)positions / (double)committed : NAN;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

int tb_stream_bursty(const uint32_t *tok, size_t n, double *median_tokens)
{
    *median_tokens = NAN;
    if (!n)
        return 0;
    uint32_t *v = tb_xmalloc(n * sizeof *v);
    memcpy(v, tok, n * sizeof *v);
    qsort(v, n, sizeof *v, cmp_u32);
    *median_tokens = n % 2 ? v[n / 2] : 0.5 * ((double)v[n / 2 - 1] + (double)v[n / 2]);
    free(v);
    return n >= TB_BURST_MIN_CHUNKS && *median_tokens >= TB_BURST_MIN_TOKENS;
}

int tb_case_is_canvas(size_t canvas_gap_n)
{
    return canvas_gap_n > 0;
}

/* ------------------------------------------------------ the registry */

/* Indices of the metrics tb_case_metrics computes, in registry order. */
enum {
    M_REQ_TPS, M_AGG_TPS, M_DECODE_TPS, M_TTFT, M_TPOT, M_ITL, M_E2E, M_PREFILL, M_DECODE, M_WALL, M_NFE, M_TPF,
    M_STEPS, M_BLOCKS, M_ANSWER, M_SENT_RATE, M_REQ_RATE, M_ERR_RATE, M_GOODPUT, M_ROOFLINE, M_RUNNER, M_CLIENT_BUSY, M_EXPERTS,
    M_ACTIVE_BYTES, M_ACC_LEN, M_ACC_RATE, M_DRAFT_SHARE, M_TARGET_FPT, M_STEPS_CANVAS, M_COMMIT_STEP, M_CANVAS_GAP,
    M_POS_TOKEN, M_TOK_CHUNK, M_PROMPT_LEN, M_COUNT
};

const tb_metric_def tb_metric_defs[] = {
    [M_REQ_TPS] = {"req_tps", "tokens/s", TB_BETTER_HIGHER, "requests", "median:req_tps_median p5:req_tps_p5"},
    [M_AGG_TPS] = {"agg_tps", "tokens/s", TB_BETTER_HIGHER, "calls", "n:calls median:aggregate_tps cv:agg_tps_cv"},
    [M_DECODE_TPS] = {"decode_tps", "tokens/s", TB_BETTER_HIGHER, "calls", "median:decode_tps"},
    [M_TTFT] = {"ttft_ms", "ms", TB_BETTER_LOWER, "requests", "median:ttft_ms p90:ttft_p90_ms p99:ttft_p99_ms"},
    [M_TPOT] = {"tpot_ms", "ms", TB_BETTER_LOWER, "requests", "median:tpot_ms p90:tpot_p90_ms p99:tpot_p99_ms"},
    [M_ITL] = {"itl_ms", "ms", TB_BETTER_LOWER, "gaps", "p90:itl_p90_ms p99:itl_p99_ms"},
    [M_E2E] = {"e2e_ms", "ms", TB_BETTER_LOWER, "requests", "median:e2e_ms p95:e2e_p95_ms p90:e2e_p90_ms p99:e2e_p99_ms"},
    [M_PREFILL] = {"prefill_ms", "ms", TB_BETTER_LOWER, "calls", NULL},
    [M_DECODE] = {"decode_ms", "ms", TB_BETTER_LOWER, "calls", NULL},
    [M_WALL] = {"wall_ms", "ms", TB_BETTER_LOWER, "calls", NULL},
    [M_NFE] = {"forward_passes", "count", TB_BETTER_NONE, "calls", "median:nfe"},
    [M_TPF] = {"tokens_per_forward", "tokens", TB_BETTER_HIGHER, "calls", "median:tokens_per_forward"},
    [M_STEPS] = {"steps_done", "count", TB_BETTER_NONE, "requests", "median:steps_done"},
    [M_BLOCKS] = {"blocks_done", "count", TB_BETTER_NONE, "requests", NULL},
    [M_ANSWER] = {"answer_tokens", "tokens", TB_BETTER_NONE, "requests", "median:answer_tokens"},
    [M_SENT_RATE] = {"sent_rate", "requests/s", TB_BETTER_NONE, "calls", "median:sent_per_s"},
    [M_REQ_RATE] = {"req_throughput", "requests/s", TB_BETTER_HIGHER, "calls", "median:req_per_s"},
    /* (the view's error_rate counts the requests itself, over the case) */
    [M_ERR_RATE] = {"error_rate", "fraction", TB_BETTER_LOWER, "calls", NULL},
    [M_GOODPUT] = {"goodput", "requests/s", TB_BETTER_HIGHER, "calls", "median:goodput"},
    [M_ROOFLINE] = {"roofline_pct", "%", TB_BETTER_HIGHER, "calls", NULL},
    [M_RUNNER] = {"runner_us", "us", TB_BETTER_LOWER, "calls", NULL},
    [M_CLIENT_BUSY] = {"client_busy", "%", TB_BETTER_LOWER, "calls", NULL},
    [M_EXPERTS] = {"experts_per_token", "experts", TB_BETTER_NONE, "calls", NULL},
    [M_ACTIVE_BYTES] = {"active_bytes_per_token", "bytes", TB_BETTER_LOWER, "calls", NULL},
    /* speculative decoding (absent from other cases); acceptance_at_I
     * follows the prompt length, with the prefixes */
    [M_ACC_LEN] = {"acceptance_length", "tokens", TB_BETTER_HIGHER, "requests", "median:acceptance_length"},
    [M_ACC_RATE] = {"acceptance_rate", "fraction", TB_BETTER_HIGHER, "requests", "median:acceptance_rate"},
    [M_DRAFT_SHARE] = {"draft_time_share", "fraction", TB_BETTER_LOWER, "calls", "median:draft_time_share"},
    [M_TARGET_FPT] = {"target_forwards_per_token", "forwards", TB_BETTER_LOWER, "calls", "median:target_forwards_per_token"},
    /* canvas models (absent from other cases); docs/METRICS.md */
    [M_STEPS_CANVAS] = {"steps_per_canvas", "steps", TB_BETTER_NONE, "canvases", "median:steps_per_canvas"},
    [M_COMMIT_STEP] = {"committed_per_step", "tokens", TB_BETTER_HIGHER, "canvases", "median:committed_per_step"},
    [M_CANVAS_GAP] = {"canvas_gap_ms", "ms", TB_BETTER_LOWER, "gaps", "median:canvas_gap_ms"},
    [M_POS_TOKEN] = {"positions_per_token", "positions", TB_BETTER_LOWER, "case", "median:positions_per_token"},
    [M_TOK_CHUNK] = {"tokens_per_chunk", "tokens", TB_BETTER_NONE, "chunks", "median:tokens_per_chunk"},
    /* the prompt lengths as sent: a dataset's, not the matrix's
     * prompt_tokens (reports show its mean in the prompt column) */
    [M_PROMPT_LEN] = {"prompt_len", "tokens", TB_BETTER_NONE, "requests", NULL},
    /* acceptance_at_1 .. _k: the share of draft position I accepted */
    {TB_ACCEPTANCE_AT_PREFIX, "fraction", TB_BETTER_HIGHER, "requests", NULL},
    /* The quality metrics (quality.c, judge.c); "quality" is a score
     * another tool may store with the runs. */
    {"quality", "score", TB_BETTER_HIGHER, "samples", NULL},
    {"accuracy", "fraction", TB_BETTER_HIGHER, "items", "median:accuracy ci_lo:accuracy_ci_lo ci_hi:accuracy_ci_hi"},
    {"accuracy_", "fraction", TB_BETTER_HIGHER, "items", NULL},
    {"judge_ppl", "perplexity", TB_BETTER_LOWER, "requests", "median:judge_ppl"},
    {"repetition", "fraction", TB_BETTER_LOWER, "requests", "median:repetition"},
    {"distinct", "fraction", TB_BETTER_HIGHER, "requests", NULL},
    {"errors_", "requests", TB_BETTER_LOWER, "calls", NULL},
};
const size_t tb_n_metric_defs = sizeof tb_metric_defs / sizeof *tb_metric_defs;

const tb_metric_def *tb_metric_find(const char *name)
{
    for (size_t i = 0; i < tb_n_metric_defs; i++) {
        const char *d = tb_metric_defs[i].name;
        size_t n = strlen(d);
        if (d[n - 1] == '_' ? strncmp(name, d, n) == 0 && name[n] : strcmp(name, d) == 0)
            return &tb_metric_defs[i];
    }
    return NULL;
}

const char *tb_metric_unit(const char *name)
{
    const tb_metric_def *d = tb_metric_find(name);
    return d ? d->unit : NULL;
}

const char *const tb_error_classes[] = {
    "connect", "timeout", "http_429", "http_4xx", "http_5xx", "server_error", "malformed_stream", "dropped", "other",
};
const size_t tb_n_error_classes = sizeof tb_error_classes / sizeof *tb_error_classes;

size_t tb_error_class(const char *error)
{
    if (error) {
        size_t n = strspn(error, "abcdefghijklmnopqrstuvwxyz0123456789_");
        if (n && strncmp(error + n, TB_ERROR_CLASS_SEP, 2) == 0)
            for (size_t k = 0; k + 1 < tb_n_error_classes; k++)
                if (strlen(tb_error_classes[k]) == n && strncmp(error, tb_error_classes[k], n) == 0)
                    return k;
    }
    return tb_n_error_classes - 1;
}

/* ------------------------------------------------------ one case */

/* A growing sample set. */
typedef struct dvec {
    double *v;
    size_t n, cap;
} dvec;

static void push(dvec *d, double x)
{
    if (d->n == d->cap) {
        d->cap = d->cap ? 2 * d->cap : 64;
        d->v = tb_xrealloc(d->v, d->cap * sizeof(double));
    }
    d->v[d->n++] = x;
}

/* A call's emissions grouped by request, each group in arrival order:
 * request r's are em[idx[first[r]]] .. em[idx[first[r + 1] - 1]] (one
 * pass to count, one to place: a call of R requests and E emissions
 * costs O(R + E), not R scans of E). */
typedef struct em_index {
    uint32_t *first; /* [n_requests + 1] */
    uint32_t *idx;   /* [n_emissions] */
} em_index;

static void em_index_build(const tb_call_view *cv, em_index *ix)
{
    uint32_t n = cv->call.n_requests, ne = cv->call.n_emissions;
    ix->first = tb_xcalloc((size_t)n + 2, sizeof *ix->first);
    ix->idx = tb_xcalloc(ne ? ne : 1, sizeof *ix->idx);
    for (uint32_t e = 0; e < ne; e++)
        if (cv->em[e].request < n)
            ix->first[cv->em[e].request + 2]++;
    for (uint32_t r = 0; r < n; r++)
        ix->first[r + 2] += ix->first[r + 1];
    for (uint32_t e = 0; e < ne; e++) /* first[r + 1]: where r's next goes */
        if (cv->em[e].request < n)
            ix->idx[ix->first[cv->em[e].request + 1]++] = e;
}

/* Request r's emission times in arrival order into *t (grown); count. */
static size_t emission_times(const tb_call_view *cv, const em_index *ix, uint32_t r, int64_t **t, size_t *cap)
{
    size_t n = 0;
    for (uint32_t k = ix->first[r]; k < ix->first[r + 1]; k++) {
        if (n == *cap) {
            *cap = *cap ? 2 * *cap : 256;
            *t = tb_xrealloc(*t, *cap * sizeof **t);
        }
        (*t)[n++] = cv->em[ix->idx[k]].t_ns;
    }
    return n;
}

static char *emissions_json(const tb_call_view *cv, const em_index *ix, uint32_t r, int streaming)
{
    tb_str js = {0};
    tb_str_append(&js, "[");
    for (uint32_t k = ix->first[r]; streaming && k < ix->first[r + 1]; k++) {
        const tb_emission *e = &cv->em[ix->idx[k]];
        tb_str_appendf(&js, "%s[%.3f,%u]", js.len > 1 ? "," : "", (double)(e->t_ns - cv->req[r].t_submit_ns) * 1e-6,
                       e->n_tokens);
    }
    tb_str_append(&js, "]");
    return tb_str_take(&js);
}

/* Request r's chunk sizes (tokens per emission) into *tok (grown). */
static size_t emission_tokens(const tb_call_view *cv, const em_index *ix, uint32_t r, uint32_t **tok, size_t *cap)
{
    size_t n = 0;
    for (uint32_t k = ix->first[r]; k < ix->first[r + 1]; k++) {
        if (n == *cap) {
            *cap = *cap ? 2 * *cap : 256;
            *tok = tb_xrealloc(*tok, *cap * sizeof **tok);
        }
        (*tok)[n++] = cv->em[ix->idx[k]].n_tokens;
    }
    return n;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median gap of t[n] (ms); NaN with fewer than 2. */
static double median_gap_ms(const int64_t *t, size_t n)
{
    if (n < 2)
        return NAN;
    double *g = tb_xmalloc((n - 1) * sizeof *g);
    for (size_t e = 1; e < n; e++)
        g[e - 1] = (double)(t[e] - t[e - 1]) * 1e-6;
    qsort(g, n - 1, sizeof *g, cmp_double);
    size_t m = n - 1;
    double v = m % 2 ? g[m / 2] : 0.5 * (g[m / 2 - 1] + g[m / 2]);
    free(g);
    return v;
}

/* A request's kept canvases as [[steps, committed, positions, ms since
 * submit], ...]; NULL when it has none. */
static char *canvases_json(const tb_canvas_counts *c, int64_t submit_ns)
{
    if (!c->n)
        return NULL;
    tb_str js = {0};
    tb_str_append(&js, "[");
    for (uint32_t i = 0; i < c->n && i < TB_CANVAS_MAX; i++)
        tb_str_appendf(&js, "%s[%u,%u,%llu,%.3f]", i ? "," : "", c->at[i].steps, c->at[i].committed,
                       (unsigned long long)c->at[i].positions, (double)(c->at[i].t_done_ns - submit_ns) * 1e-6);
    tb_str_append(&js, "]");
    return tb_str_take(&js);
}

/* Does request r meet the suite's goodput limits (an unset one holds;
 * TPOT undefined for a one-token answer holds)? */
int tb_request_good(const tb_request_metrics *m, double goodput_ttft_ms, double goodput_tpot_ms)
{
    double ttft_ms = (double)m->ttft_ns * 1e-6, tpot_ms = m->tpot_ns * 1e-6;
    return (goodput_ttft_ms <= 0 || ttft_ms <= goodput_ttft_ms) &&
           (goodput_tpot_ms <= 0 || isnan(tpot_ms) || tpot_ms <= goodput_tpot_ms);
}

int tb_count_mismatch(const tb_raw_request *q)
{
    if (q->status != TB_OK)
        return TB_COUNT_HELD;
    if (q->has_ids)
        return q->n_output_tokens != q->n_ids ? TB_COUNT_NOT_IDS : TB_COUNT_HELD;
    return q->recount >= 0 && (uint32_t)q->recount != q->n_output_tokens ? TB_COUNT_NOT_TEXT : TB_COUNT_HELD;
}

static int good(const tb_request_metrics *m, const tb_case_metrics_opts *o)
{
    return tb_request_good(m, o->goodput_ttft_ms, o->goodput_tpot_ms);
}

/* One call into its sample record; measured calls add to the sets. */
/* A case's speculative counts summed over its measured good requests: the
 * case's acceptance figures are pooled (total tokens / total
 * verifications), as upstream's loops and servers report them, so a short
 * request weighs by its verifications, not as much as a long one. */
typedef struct spec_pool {
    tb_spec_counts sum;
    int any;
} spec_pool;

static void spec_pool_add(spec_pool *p, const tb_spec_counts *c)
{
    if (!tb_spec_any(c))
        return;
    p->any = 1;
    p->sum.verifications += c->verifications;
    p->sum.drafted += c->drafted;
    p->sum.accepted += c->accepted;
    if (c->draft_len > p->sum.draft_len)
        p->sum.draft_len = c->draft_len;
    for (uint32_t i = 0; i < TB_SPEC_MAX_DRAFT; i++) {
        p->sum.drafted_at[i] += c->drafted_at[i];
        p->sum.accepted_at[i] += c->accepted_at[i];
    }
}

static void one_call(const tb_call_view *cv, uint32_t k, const tb_case_metrics_opts *o, tb_sample_record *s,
                     dvec m[M_COUNT], dvec *cls, spec_pool *pool, uint64_t canvas_pool[2], int64_t **em_t,
                     size_t *em_cap, uint32_t **em_tok, size_t *tok_cap)
{
    const tb_raw_call *call = &cv->call;
    const int streaming = (o->capabilities & TB_CAP_STREAMING) != 0;
    uint32_t n = call->n_requests;
    *s = (tb_sample_record){
        .repetition = k,
        .warmup = call->is_warmup != 0,
        .n_requests = n,
        .prefill_ns = call->prefill_ns,
        .decode_ns = call->decode_ns,
        .forward_passes = call->forward_passes,
        .peak_device_bytes = o->capabilities & TB_CAP_DEVICE_MEMORY ? call->peak_device_bytes : -1,
        .energy_mj = o->capabilities & TB_CAP_ENERGY ? call->energy_mj : -1,
        .n_emissions = streaming ? call->n_emissions : 0,
        .runner_ns = call->runner_ns,
        .draft_ns = call->draft_ns > 0 ? call->draft_ns : 0,
        .requests = tb_xcalloc(n ? n : 1, sizeof *s->requests),
    };
    uint32_t *n_out = tb_xcalloc(n ? n : 1, sizeof *n_out);
    int *ok = tb_xcalloc(n ? n : 1, sizeof *ok);
    tb_request_metrics *rm = tb_xcalloc(n ? n : 1, sizeof *rm);
    em_index ix;
    em_index_build(cv, &ix);
    int64_t first_submit = INT64_MAX;
    for (uint32_t r = 0; r < n; r++)
        if (cv->req[r].t_submit_ns < first_submit)
            first_submit = cv->req[r].t_submit_ns;
    s->start_ns = n ? first_submit : 0;
    s->client_busy = call->client_busy;
    const char *text = cv->texts;
    static const tb_canvas_counts no_canvas; /* all 0: not a canvas model */
    for (uint32_t r = 0; r < n; r++) {
        const tb_raw_request *w = &cv->req[r];
        const tb_canvas_counts *cc = w->has_canvas && cv->canvas && cv->canvas[r] ? cv->canvas[r] : &no_canvas;
        /* A backend that does not stream has no first token before its
         * last: its emissions (if any) are not timings. */
        size_t ne = streaming ? emission_times(cv, &ix, r, em_t, em_cap) : 0;
        /* Neither emissions nor a done time: the request ended, at the
         * latest, when generate() returned. */
        int64_t done = w->t_done_ns || ne ? w->t_done_ns : call->t_return_ns;
        if (cv->measured)
            rm[r] = cv->measured[r];
        else
            tb_request_metrics_compute(w->t_submit_ns, done, w->n_output_tokens, *em_t, ne, &rm[r]);
        n_out[r] = w->n_output_tokens;
        ok[r] = w->status == TB_OK;
        tb_request_record *q = &s->requests[r];
        *q = (tb_request_record){
            .status = w->status,
            .error = ok[r] ? NULL : tb_xstrdup(w->error[0] ? w->error : "failed (no message)"),
            .submit_offset_ns = w->t_submit_ns - first_submit,
            .m = rm[r],
            .n_out = w->n_output_tokens,
            .recount = w->recount,
            .output_ids = w->has_ids ? (int64_t)w->n_ids : -1,
            .count_mismatch = tb_count_mismatch(w),
            .steps_done = w->steps_done,
            .blocks_done = w->blocks_done,
            .answer_tokens = w->answer_tokens,
            .output_hash = w->output_hash,
            .prompt_hash = w->prompt_hash,
            .prompt_idx = w->prompt_idx,
            .scored = w->scored && ok[r],
            .prompt_tokens = w->prompt_tokens,
            .max_tokens = w->max_tokens,
            .emissions_json = emissions_json(cv, &ix, r, streaming),
            .spec = w->spec,
            .canvases_json = canvases_json(cc, w->t_submit_ns),
            .tokens_per_chunk = NAN,
            .chunk_gap_ms = NAN,
        };
        tb_canvas_sum cs;
        tb_canvas_total(cc, &cs);
        q->canvases = (int64_t)cs.canvases, q->canvas_steps = (int64_t)cs.steps;
        q->canvas_committed = (int64_t)cs.committed, q->canvas_positions = (int64_t)cs.positions;
        size_t nt = streaming ? emission_tokens(cv, &ix, r, em_tok, tok_cap) : 0;
        if (nt) {
            q->bursty = tb_stream_bursty(*em_tok, nt, &q->tokens_per_chunk);
            q->chunk_gap_ms = median_gap_ms(*em_t, ne);
        }
        for (int i = 0; i < TB_N_SCORES; i++)
            q->scores[i] = NAN;
        if (o->keep_texts && w->prompt_idx >= 0)
            q->output_text = tb_xstrndup(text, w->text_len);
        text += w->text_len;
        if (q->recount < 0 || s->recount_tokens < 0)
            s->recount_tokens = -1;
        else
            s->recount_tokens += q->recount;
        if (!s->warmup && ok[r]) {
            push(&m[M_REQ_TPS], rm[r].tps);
            push(&m[M_TTFT], (double)rm[r].ttft_ns * 1e-6);
            push(&m[M_TPOT], rm[r].tpot_ns * 1e-6);
            push(&m[M_E2E], (double)rm[r].e2e_ns * 1e-6);
            if (q->steps_done)
                push(&m[M_STEPS], q->steps_done);
            if (q->blocks_done)
                push(&m[M_BLOCKS], q->blocks_done);
            if (q->answer_tokens != TB_UNKNOWN_COUNT)
                push(&m[M_ANSWER], q->answer_tokens);
            if (q->prompt_tokens)
                push(&m[M_PROMPT_LEN], q->prompt_tokens);
            spec_pool_add(pool, &q->spec);
            /* canvas models: each kept canvas, the gaps between commits
             * (a bursty stream without records: between its chunks) */
            for (uint32_t i = 0; i < cc->n && i < TB_CANVAS_MAX; i++) {
                push(&m[M_STEPS_CANVAS], cc->at[i].steps);
                push(&m[M_COMMIT_STEP], tb_committed_per_step(&cc->at[i]));
                if (i)
                    push(&m[M_CANVAS_GAP], (double)(cc->at[i].t_done_ns - cc->at[i - 1].t_done_ns) * 1e-6);
            }
            canvas_pool[0] += cs.positions, canvas_pool[1] += cs.committed;
            for (size_t e = 1; !cc->n && q->bursty && e < ne; e++)
                push(&m[M_CANVAS_GAP], (double)((*em_t)[e] - (*em_t)[e - 1]) * 1e-6);
            for (size_t e = 0; e < nt; e++)
                push(&m[M_TOK_CHUNK], (*em_tok)[e]);
            for (size_t e = 1; e < ne; e++)
                push(&m[M_ITL], (double)((*em_t)[e] - (*em_t)[e - 1]) * 1e-6);
        }
    }
    tb_rep_metrics_compute(rm, n_out, ok, n, call->prefill_ns, call->forward_passes, &s->m);
    if (!s->warmup) {
        /* Serving figures: completed and good requests per second of the
         * window, and the failures by class. */
        uint32_t n_ok = 0, n_good = 0;
        for (size_t c = 0; c < tb_n_error_classes; c++)
            push(&cls[c], 0);
        for (uint32_t r = 0; r < n; r++) {
            if (!ok[r]) {
                cls[tb_error_class(s->requests[r].error)].v[cls[0].n - 1] += 1;
                continue;
            }
            n_ok++;
            n_good += good(&rm[r], o);
        }
        double wall_s = (double)s->m.wall_ns * 1e-9;
        /* open loop: what the schedule sent, every request counted (a
         * failed one was sent too) */
        double sent = o->request_rate > 0 ? tb_sent_rate(rm, n) : NAN;
        if (isfinite(sent))
            push(&m[M_SENT_RATE], sent);
        push(&m[M_REQ_RATE], wall_s > 0 ? n_ok / wall_s : NAN);
        push(&m[M_ERR_RATE], n ? (double)(n - n_ok) / n : NAN);
        if (o->goodput_ttft_ms > 0 || o->goodput_tpot_ms > 0)
            push(&m[M_GOODPUT], wall_s > 0 ? n_good / wall_s : NAN);
        push(&m[M_AGG_TPS], s->m.aggregate_tps);
        push(&m[M_DECODE_TPS], s->m.decode_tps);
        push(&m[M_WALL], (double)s->m.wall_ns * 1e-6);
        push(&m[M_RUNNER], (double)s->runner_ns * 1e-3);
        if (call->prefill_ns >= 0)
            push(&m[M_PREFILL], (double)call->prefill_ns * 1e-6);
        if (call->decode_ns >= 0)
            push(&m[M_DECODE], (double)call->decode_ns * 1e-6);
        if (call->forward_passes > 0) {
            push(&m[M_NFE], (double)call->forward_passes);
            push(&m[M_TPF], s->m.tokens_per_forward);
        }
        double roof = tb_roofline_pct(call->flops, call->bytes, call->peak_flops, call->peak_bytes_per_s,
                                      s->m.wall_ns);
        if (!isnan(roof))
            push(&m[M_ROOFLINE], roof);
        if (call->client_busy > 0)
            push(&m[M_CLIENT_BUSY], 100.0 * call->client_busy);
        if (call->expert_reads > 0 && call->moe_tokens > 0)
            push(&m[M_EXPERTS], call->expert_reads / call->moe_tokens);
        uint64_t out_tokens = 0;
        int spec = call->draft_ns > 0;
        for (uint32_t r = 0; r < n; r++) {
            out_tokens += n_out[r];
            spec |= tb_spec_any(&cv->req[r].spec);
        }
        if (call->bytes > 0 && isfinite(call->bytes) && out_tokens > 0)
            push(&m[M_ACTIVE_BYTES], call->bytes / (double)out_tokens);
        /* a speculative call's own figures (its output tokens: every
         * request's, as tokens_per_forward counts them) */
        double share = tb_draft_time_share(call->draft_ns, call->decode_ns);
        double tfpt = tb_target_forwards_per_token(call->forward_passes, s->m.output_tokens);
        if (spec && !isnan(share))
            push(&m[M_DRAFT_SHARE], share);
        if (spec && !isnan(tfpt))
            push(&m[M_TARGET_FPT], tfpt);
    }
    free(n_out);
    free(ok);
    free(rm);
    free(ix.first);
    free(ix.idx);
}

void tb_case_metrics(const tb_call_view *calls, size_t n_calls, const tb_case_metrics_opts *o,
                     tb_case_record *rec)
{
    dvec m[M_COUNT] = {{0}};
    spec_pool pool = {0};
    uint64_t canvas_pool[2] = {0, 0}; /* positions, committed */
    uint32_t *em_tok = NULL;
    size_t tok_cap = 0;
    dvec *cls = tb_xcalloc(tb_n_error_classes, sizeof *cls);
    int64_t *em_t = NULL;
    size_t em_cap = 0;
    rec->samples = tb_xcalloc(n_calls ? n_calls : 1, sizeof *rec->samples);
    for (size_t k = 0; k < n_calls; k++)
        one_call(&calls[k], (uint32_t)k, o, &rec->samples[rec->n_samples++], m, cls, &pool, canvas_pool, &em_t,
                 &em_cap, &em_tok, &tok_cap);
    /* positions_per_token, pooled: one value for the case */
    double ppt = tb_positions_per_token(canvas_pool[0], canvas_pool[1]);
    if (!isnan(ppt))
        push(&m[M_POS_TOKEN], ppt);
    /* the pooled acceptance figures: one value each (n 1) */
    dvec at[TB_SPEC_MAX_DRAFT] = {{0}}; /* acceptance_at_(i+1) */
    if (pool.any) {
        double al = tb_acceptance_length(&pool.sum), ar = tb_acceptance_rate(&pool.sum);
        if (!isnan(al))
            push(&m[M_ACC_LEN], al);
        if (!isnan(ar))
            push(&m[M_ACC_RATE], ar);
        for (uint32_t i = 0; i < pool.sum.draft_len && i < TB_SPEC_MAX_DRAFT; i++)
            if (pool.sum.drafted_at[i])
                push(&at[i], tb_acceptance_at(&pool.sum, i));
    }
    for (int k = 0; k < M_COUNT; k++) {
        tb_metric_record *mr = tb_case_record_add_metric(rec, tb_metric_defs[k].name, tb_metric_defs[k].unit);
        /* Pooled gaps are correlated within a request: no bootstrap CI. */
        tb_stats_compute_ci(m[k].v, m[k].n, o->seed, k != M_ITL && k != M_CANVAS_GAP && k != M_TOK_CHUNK, &mr->st);
        free(m[k].v);
    }
    /* A draft position gets a row only when some measured request drafted it. */
    for (uint32_t i = 0; i < TB_SPEC_MAX_DRAFT; i++) {
        if (at[i].n) {
            char *name = tb_xasprintf(TB_ACCEPTANCE_AT_PREFIX "%u", i + 1);
            tb_metric_record *mr = tb_case_record_add_metric(rec, name, tb_metric_unit(name));
            mr->name_buf = name;
            tb_stats_compute_ci(at[i].v, at[i].n, o->seed, 1, &mr->st);
        }
        free(at[i].v);
    }
    /* A class gets a row only when some measured call had such a failure. */
    for (size_t k = 0; k < tb_n_error_classes; k++) {
        double any = 0;
        for (size_t i = 0; i < cls[k].n; i++)
            any += cls[k].v[i];
        if (any > 0) {
            char *name = tb_xasprintf("errors_%s", tb_error_classes[k]);
            tb_metric_record *mr = tb_case_record_add_metric(rec, name, tb_metric_unit(name));
            mr->name_buf = name;
            tb_stats_compute_ci(cls[k].v, cls[k].n, o->seed, 1, &mr->st);
        }
        free(cls[k].v);
    }
    free(cls);
    free(em_t);
    free(em_tok);
}

void tb_case_request_tally(const tb_case_record *rec, tb_request_tally *t)
{
    _Static_assert(sizeof tb_error_classes / sizeof *tb_error_classes <= sizeof t->per_class / sizeof *t->per_class,
                   "room for every error class");
    memset(t, 0, sizeof *t);
    for (size_t i = 0; i < rec->n_samples; i++) {
        const tb_sample_record *s = &rec->samples[i];
        if (s->warmup)
            continue;
        for (uint32_t r = 0; r < s->n_requests; r++) {
            t->requests++;
            if (s->requests[r].status != TB_OK) {
                t->failed++;
                size_t k = tb_error_class(s->requests[r].error);
                t->per_class[k]++;
                if (!t->first[k])
                    t->first[k] = s->requests[r].error;
            }
        }
    }
}

char *tb_case_all_failed(const tb_case_record *rec)
{
    tb_request_tally t;
    tb_case_request_tally(rec, &t);
    if (!t.requests || t.failed < t.requests)
        return NULL;
    tb_str b = {0};
    tb_str_appendf(&b, "every request failed: %zu of %zu (", t.failed, t.requests);
    const char *sep = "";
    for (size_t k = 0; k < tb_n_error_classes; k++)
        if (t.per_class[k]) {
            tb_str_appendf(&b, "%s%s %zu", sep, tb_error_classes[k], t.per_class[k]);
            sep = ", ";
        }
    tb_str_append(&b, ")");
    for (size_t i = 0; i < rec->n_samples; i++)
        if (!rec->samples[i].warmup && rec->samples[i].n_requests) {
            const char *e = rec->samples[i].requests[0].error;
            tb_str_appendf(&b, "; first: %s", e ? e : "(no message)");
            break;
        }
    return tb_str_take(&b);
}

int tb_case_degraded(const tb_request_tally *t, double max_error_rate)
{
    return t->failed > 0 && (double)t->failed > max_error_rate * (double)t->requests;
}

char *tb_first_errors_text(const char *const *first, size_t n_classes, const char *skip)
{
    tb_str b = {0};
    for (size_t k = 0; k < n_classes && k < tb_n_error_classes; k++) {
        if (!first[k] || (skip && strstr(skip, first[k])))
            continue;
        const char *m = first[k];
        size_t n = strlen(tb_error_classes[k]);
        if (strncmp(m, tb_error_classes[k], n) == 0 && strncmp(m + n, ": ", 2) == 0)
            m += n + 2; /* the class is said already */
        tb_str_appendf(&b, "%sfirst %s failure: %s", b.len ? "\n" : "", tb_error_classes[k], m);
    }
    return b.len ? tb_str_take(&b) : NULL;
}

/* ------------------------------------------- speculative counters */

/* A series name "base{labels}" against a counter's base name, with or
 * without the exposition's "_total" suffix. */
static int series_is(const char *name, const char *base)
{
    size_t n = strlen(base), m = strcspn(name, "{");
    return strncmp(name, base, n) == 0 && (m == n || (m == n + 6 && strncmp(name + n, "_total", 6) == 0));
}

void tb_case_spec_counters(tb_case_record *rec, uint64_t seed)
{
    tb_metric_record *len = NULL, *rate = NULL;
    for (size_t i = 0; i < rec->n_metrics; i++) {
        if (strcmp(rec->metrics[i].name, "acceptance_length") == 0)
            len = &rec->metrics[i];
        else if (strcmp(rec->metrics[i].name, "acceptance_rate") == 0)
            rate = &rec->metrics[i];
    }
    if (!len || !rate || len->st.n || !rec->n_tseries)
        return; /* per-request counts win; no counters without telemetry */
    /* each series' first and last values (points arrive in time order
     * per series: the sampler appends) */
    double *first = tb_xmalloc(rec->n_tseries * sizeof *first), *last = tb_xmalloc(rec->n_tseries * sizeof *last);
    for (size_t i = 0; i < rec->n_tseries; i++)
        first[i] = last[i] = NAN;
    for (size_t k = 0; k < rec->n_tpoints; k++) {
        const tb_telemetry_point *p = &rec->tpoints[k];
        if (p->series >= rec->n_tseries || !isfinite(p->value))
            continue;
        if (isnan(first[p->series]))
            first[p->series] = p->value;
        last[p->series] = p->value;
    }
    double drafts = 0, draft_tokens = 0, accepted = 0, at[TB_SPEC_MAX_DRAFT] = {0};
    uint32_t k = 0; /* positions seen */
    for (size_t i = 0; i < rec->n_tseries; i++) {
        const char *name = rec->tseries[i].name;
        double d = last[i] - first[i]; /* a counter's growth over the case */
        if (!name || !isfinite(d) || d < 0)
            continue;
        if (series_is(name, "vllm:spec_decode_num_drafts"))
            drafts += d;
        else if (series_is(name, "vllm:spec_decode_num_draft_tokens"))
            draft_tokens += d;
        else if (series_is(name, "vllm:spec_decode_num_accepted_tokens"))
            accepted += d;
        else if (series_is(name, "vllm:spec_decode_num_accepted_tokens_per_pos")) {
            const char *pos = strstr(name, "position=\"");
            char *end;
            unsigned long p = pos ? strtoul(pos + 10, &end, 10) : TB_SPEC_MAX_DRAFT;
            if (pos && *end == '"' && p < TB_SPEC_MAX_DRAFT) {
                at[p] += d;
                if (p + 1 > k)
                    k = (uint32_t)p + 1;
            }
        }
    }
    free(first);
    free(last);
    if (!(drafts > 0))
        return;
    /* one value for the case, from the server's counters */
    double v = (accepted + drafts) / drafts;
    tb_stats_compute_ci(&v, 1, seed, 0, &len->st);
    if (draft_tokens > 0 && accepted <= draft_tokens) {
        v = accepted / draft_tokens;
        tb_stats_compute_ci(&v, 1, seed, 0, &rate->st);
    }
    for (uint32_t p = 0; p < k; p++) {
        if (at[p] > drafts)
            continue;
        char *name = tb_xasprintf(TB_ACCEPTANCE_AT_PREFIX "%u", p + 1);
        tb_metric_record *mr = tb_case_record_add_metric(rec, name, tb_metric_unit(name));
        mr->name_buf = name;
        v = at[p] / drafts;
        tb_stats_compute_ci(&v, 1, seed, 0, &mr->st);
    }
}
