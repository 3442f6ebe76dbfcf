/* http.c — the "http" backend: any OpenAI-compatible server (vLLM, SGLang,
 * TGI, llama.cpp's server, hosted APIs, `tokbench serve`) measured through
 * /v1/completions or /v1/chat/completions, streamed (SSE with
 * stream_options.include_usage) or not.
 *
 * One generate() call is one load: n_requests requests (the suite's
 * `requests`) sent closed-loop at `concurrency` or open-loop at
 * `request_rate` (gamma arrivals, `burstiness`), on `loops` libcurl multi
 * event loops (client.c: a thread each; the client's own CPU comes back
 * as tb_result.client_busy). Every streamed chunk with text is an emission;
 * each request's submit time is its scheduled send time. Output tokens are
 * the server's usage.completion_tokens; with `tokenizer` (the model's
 * tokenizer.json) the runner re-counts the output text and flags a
 * difference, and prompts are synthesized to the exact token length.
 *
 * What each request sends is the workload (workload.h: length
 * distributions, datasets, shared prefixes, multi-turn sessions sent in
 * waves, a duration); each request's prompt length and max_tokens go
 * back in tb_result.prompt_tokens / max_tokens, the requests a duration
 * left unsent in n_unsent.
 *
 * The API key is read from the environment variable `api_key_env` names,
 * at create(); it lives only in this process's memory (the request
 * headers), never in describe(), logs or the database. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <tokbench/backend.h>

#include "arrivals.h"
#include "client.h"
#include "json_options.h"
#include "prompts.h"
#include "redact.h"
#include "strmem.h"
#include "tokenizer.h"
#include "url.h"
#include "workload.h"

#define HTTP_VERSION "0.1.0"

enum {
    OPT_URL,
    OPT_ENDPOINT,
    OPT_MODEL_NAME,
    OPT_API_KEY_ENV,
    OPT_HEADERS,
    OPT_EXTRA_JSON,
    OPT_TEMPERATURE,
    OPT_STREAM,
    OPT_CONNECT_TIMEOUT,
    OPT_TIMEOUT,
    OPT_TOKENIZER,
    OPT_BURSTINESS,
    OPT_UNIQUE_PROMPTS,
    OPT_MAX_RESPONSE_MB,
    OPT_API_KEY,
    OPT_SECRET_HEADERS,
    /* the workload (workload.h; docs/METRICS.md, "Serving workloads") */
    OPT_PROMPT_DIST,
    OPT_PROMPT_STDEV,
    OPT_PROMPT_MIN,
    OPT_PROMPT_MAX,
    OPT_PROMPT_HISTOGRAM,
    OPT_OUTPUT_DIST,
    OPT_OUTPUT_STDEV,
    OPT_OUTPUT_MIN,
    OPT_OUTPUT_MAX,
    OPT_OUTPUT_HISTOGRAM,
    OPT_DATASET,
    OPT_DATASET_OUTPUT,
    OPT_PREFIX_GROUPS,
    OPT_PREFIX_TOKENS,
    OPT_TURNS,
    OPT_DURATION,
    OPT_LOOPS,
    OPT_PREFLIGHT,
    N_OPTS
};

static const tb_option_decl http_options[N_OPTS] = {
    [OPT_URL] = {"url", TB_OPT_STRING, "http://127.0.0.1:8000",
                 "server base URL, http[s]://HOST[:PORT][/PATH], no query or fragment; /v1/completions or "
                 "/v1/chat/completions is appended (after /v1 if the URL ends there); a USER:PASS@ is sent, and "
                 "stored and shown as (secret)",
                 NULL, 1, 0, 0},
    [OPT_ENDPOINT] = {"endpoint", TB_OPT_ENUM, "completions", "which API: /v1/completions or /v1/chat/completions",
                      "completions|chat", 1, 0, 0},
    [OPT_MODEL_NAME] = {"model_name", TB_OPT_STRING, "",
                        "the request's \"model\"; empty: the backend's model = (none when that is empty too)", NULL,
                        1, 0, 0},
    [OPT_API_KEY_ENV] = {"api_key_env", TB_OPT_STRING, "",
                         "NAME of the environment variable holding the API key (sent as Bearer); the key itself is "
                         "never stored or logged",
                         NULL, 1, 0, TB_OPTF_LOAD},
    [OPT_HEADERS] = {"headers", TB_OPT_STRING, "",
                     "extra request headers as a JSON object {\"Name\": \"value\"} (stored with the run: no "
                     "secrets here)",
                     NULL, 1, 0, TB_OPTF_LOAD},
    [OPT_EXTRA_JSON] = {"extra_json", TB_OPT_STRING, "",
                        "JSON object merged into every request body, e.g. {\"ignore_eos\": true, \"min_tokens\": "
                        "128}",
                        NULL, 1, 0, 0},
    [OPT_TEMPERATURE] = {"temperature", TB_OPT_FLOAT, "0", "sampling temperature sent with each request", NULL, 0,
                         100, 0},
    [OPT_STREAM] = {"stream", TB_OPT_BOOL, "true",
                    "stream the response (SSE, with usage); false: one JSON response, TTFT = E2E", NULL, 1, 0, 0},
    [OPT_CONNECT_TIMEOUT] = {"connect_timeout", TB_OPT_FLOAT, "10", "seconds to establish a connection", NULL,
                             0.001, 3600, 0},
    [OPT_TIMEOUT] = {"timeout", TB_OPT_FLOAT, "600", "seconds one request may take in all", NULL, 0.001, 86400, 0},
    [OPT_TOKENIZER] = {"tokenizer", TB_OPT_STRING, "",
                       "path of the model's tokenizer.json: exact prompt lengths, and output re-counted against "
                       "the server's usage",
                       NULL, 1, 0, TB_OPTF_LOAD | TB_OPTF_PATH},
    [OPT_BURSTINESS] = {"burstiness", TB_OPT_FLOAT, "1",
                        "open loop: shape of the gamma-distributed gaps between sends (1 = Poisson, < 1 burstier, "
                        "> 1 more even)",
                        NULL, 0.01, 1000, 0},
    [OPT_UNIQUE_PROMPTS] = {"unique_prompts", TB_OPT_BOOL, "true",
                            "a different prompt for every request of every repetition, so a server's prefix cache "
                            "cannot serve one from another",
                            NULL, 1, 0, 0},
    [OPT_API_KEY] = {"api_key", TB_OPT_STRING, "",
                     "the API key itself (sent as Bearer; a secret: never stored, logged or shown); api_key_env "
                     "keeps it out of the suite file",
                     NULL, 1, 0, TB_OPTF_LOAD | TB_OPTF_SECRET},
    [OPT_SECRET_HEADERS] = {"secret_headers", TB_OPT_STRING, "",
                            "request headers that are secrets, a JSON object {\"Name\": \"value\"}: sent, never "
                            "stored, logged or shown",
                            NULL, 1, 0, TB_OPTF_LOAD | TB_OPTF_SECRET},
    [OPT_MAX_RESPONSE_MB] = {"max_response_mb", TB_OPT_FLOAT, "64",
                             "largest response body of one request, MiB, streamed or not: a larger one fails as "
                             "malformed_stream, and a stream with more than 4 x max_tokens + 16 text chunks too",
                             NULL, 0.001, 65536, 0},
    [OPT_PROMPT_DIST] = {"prompt_dist", TB_OPT_ENUM, "fixed",
                         "how each prompt's length is drawn: fixed (prompt_tokens), uniform, normal or lognormal "
                         "(mean prompt_tokens, standard deviation prompt_stdev), histogram (prompt_histogram)",
                         "fixed|uniform|normal|lognormal|histogram", 0, 0, 0},
    [OPT_PROMPT_STDEV] = {"prompt_stdev", TB_OPT_FLOAT, "0", "standard deviation of the prompt lengths, tokens",
                          NULL, 0, 1e9, 0},
    [OPT_PROMPT_MIN] = {"prompt_min", TB_OPT_INT, "1", "shortest prompt drawn, tokens (draws below are raised to it)",
                        NULL, 1, 1e9, 0},
    [OPT_PROMPT_MAX] = {"prompt_max", TB_OPT_INT, "0",
                        "longest prompt drawn, tokens (draws above are cut to it); 0: 2 x prompt_tokens, or the "
                        "histogram's longest bin",
                        NULL, 0, 1e9, 0},
    [OPT_PROMPT_HISTOGRAM] = {"prompt_histogram", TB_OPT_STRING, "",
                              "prompt_dist = histogram: a file of lines \"TOKENS WEIGHT\" or \"LO-HI WEIGHT\"",
                              NULL, 1, 0, TB_OPTF_PATH},
    [OPT_OUTPUT_DIST] = {"output_dist", TB_OPT_ENUM, "fixed",
                         "how each request's max_tokens is drawn: fixed (max_new_tokens), uniform, normal or "
                         "lognormal (mean max_new_tokens, standard deviation output_stdev), histogram "
                         "(output_histogram)",
                         "fixed|uniform|normal|lognormal|histogram", 0, 0, 0},
    [OPT_OUTPUT_STDEV] = {"output_stdev", TB_OPT_FLOAT, "0", "standard deviation of the output lengths, tokens",
                          NULL, 0, 1e9, 0},
    [OPT_OUTPUT_MIN] = {"output_min", TB_OPT_INT, "1", "fewest output tokens a request asks for", NULL, 1, 1e9, 0},
    [OPT_OUTPUT_MAX] = {"output_max", TB_OPT_INT, "0",
                        "most output tokens a request asks for; 0: 2 x max_new_tokens, or the histogram's longest "
                        "bin; at most 4 x max_new_tokens (what the case's buffers are sized for)",
                        NULL, 0, 1e9, 0},
    [OPT_OUTPUT_HISTOGRAM] = {"output_histogram", TB_OPT_STRING, "",
                              "output_dist = histogram: a file of lines \"TOKENS WEIGHT\" or \"LO-HI WEIGHT\"",
                              NULL, 1, 0, TB_OPTF_PATH},
    [OPT_DATASET] = {"dataset", TB_OPT_STRING, "",
                     "a local JSONL file of conversations (ShareGPT \"conversations\" or OpenAI chat \"messages\"): "
                     "the user turns are the prompts (never downloaded; the case has no prompt_tokens)",
                     NULL, 1, 0, TB_OPTF_PATH | TB_OPTF_PROMPTS},
    [OPT_DATASET_OUTPUT] = {"dataset_output", TB_OPT_ENUM, "reference",
                            "with a dataset: each request's max_tokens is the reference answer's length (needs "
                            "tokenizer) or drawn from output_dist",
                            "reference|dist", 0, 0, 0},
    [OPT_PREFIX_GROUPS] = {"prefix_groups", TB_OPT_INT, "0",
                           "shared-prefix workload: sessions fall into this many groups, each sharing a system "
                           "prompt of prefix_tokens tokens (0: none)",
                           NULL, 0, 1e6, 0},
    [OPT_PREFIX_TOKENS] = {"prefix_tokens", TB_OPT_INT, "0",
                           "length of each group's shared system prompt, tokens (with the longest prompt: at most "
                           "2097152, TB_HTTP_MAX_PROMPT_TOKENS)",
                           NULL, 0, 1e9, 0},
    [OPT_TURNS] = {"turns", TB_OPT_INT, "1",
                   "multi-turn sessions: each session sends this many turns, each with the previous turns and "
                   "their answers; requests must be a multiple of it",
                   NULL, 1, 256, 0},
    [OPT_DURATION] = {"duration", TB_OPT_FLOAT, "0",
                      "seconds: no request is sent later than this after the call's start (requests bounds the "
                      "count; those not sent are not part of the call); 0: no bound",
                      NULL, 0, 1e7, 0},
    [OPT_LOOPS] = {"loops", TB_OPT_INT, "1",
                   "client event loops, each a thread of its own (0: one per CPU this process may run on); "
                   "requests are spread across them, on one clock",
                   NULL, 0, 256, 0},
    [OPT_PREFLIGHT] = {"preflight", TB_OPT_BOOL, "true",
                       "before a case's first request: GET /v1/models, then one 1-token completion (not measured); "
                       "a server that fails it fails the case with its answer; false: no such request",
                       NULL, 1, 0, 0},
};

typedef struct http_ctx {
    const tb_host *host;
    char *model;               /* the backend's model = */
    tb_tokenizer *tok;         /* NULL without `tokenizer` */
    tb_prompt_vocab *vocab;
    tb_http_client *client;
    struct curl_slist *headers; /* holds the API key: wiped on destroy */
    /* the API key and the secret headers' values (copies, wiped on
     * destroy): every message of this plugin is redacted with them
     * (util/redact.h), whatever a server echoes back */
    char **secrets;
    size_t n_secrets;
    char *describe_json;
    /* the last call's requests (output text lives in the client) */
    tb_http_result *results;
    char **bodies;
    int64_t *offsets, *prompt_counted;
    char **answers;            /* [n_cap] the last call's output texts, copied
                                  (the client's are gone after its next run) */
    uint32_t *max_tokens;      /* [n_cap] what each request asked for */
    uint32_t n_cap;
    struct wl_files *files;    /* the workload's files, kept across calls */
    char *checked;             /* what the preflight passed with (its key);
                                  NULL: none yet */
    char error[1024];
} http_ctx;

static void set_error(http_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_error(http_ctx *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->error, sizeof c->error, fmt, ap);
    va_end(ap);
    tb_redact_buf(c->error, sizeof c->error, (const char *const *)c->secrets, c->n_secrets);
}

static const tb_option_value *opt(const tb_option_value *v, uint32_t n, int which)
{
    for (uint32_t i = 0; v && i < n; i++)
        if (strcmp(v[i].name, http_options[which].name) == 0)
            return &v[i];
    return NULL;
}

static const char *opt_s(const tb_option_value *v, uint32_t n, int which)
{
    const tb_option_value *o = opt(v, n, which);
    return o ? o->text : http_options[which].default_value;
}

static double opt_f(const tb_option_value *v, uint32_t n, int which)
{
    const tb_option_value *o = opt(v, n, which);
    return o ? o->f : strtod(http_options[which].default_value, NULL);
}

static int opt_b(const tb_option_value *v, uint32_t n, int which)
{
    const tb_option_value *o = opt(v, n, which);
    return o ? o->i != 0 : strcmp(http_options[which].default_value, "true") == 0;
}

/* ------------------------------------------------------ checks */

/* Checks of option values that need no context; "" when fine. */
static void check_options(const tb_option_value *v, uint32_t n, char *why, size_t size)
{
    why[0] = '\0';
    const char *url = opt_s(v, n, OPT_URL);
    char url_why[160];
    if (tb_url_check(url, NULL, url_why, sizeof url_why) != 0) { /* quoted without its credentials */
        char *shown = tb_redact(url, NULL, 0);
        snprintf(why, size, "url \"%.200s\": %s", shown ? shown : "(out of memory)", url_why);
        free(shown);
        return;
    }
    const char *extra = opt_s(v, n, OPT_EXTRA_JSON);
    if (*extra) {
        cJSON *j = tb_http_extra_json(extra);
        int ok = j != NULL;
        cJSON_Delete(j);
        if (!ok) {
            snprintf(why, size, "extra_json: expected a JSON object such as {\"ignore_eos\": true}, got %.80s", extra);
            return;
        }
    }
    const char *hdr = opt_s(v, n, OPT_HEADERS);
    if (*hdr) {
        char **lines;
        int k = tb_http_header_lines(hdr, &lines);
        tb_http_header_lines_free(lines, k);
        if (k < 0) {
            snprintf(why, size, "headers: expected a JSON object of strings such as {\"X-Org\": \"team\"} (names: HTTP "
                     "tokens; values: no control characters), got %.80s",
                     hdr);
            return;
        }
    }
    const char *sh = opt_s(v, n, OPT_SECRET_HEADERS);
    if (*sh) {
        char **lines;
        int k = tb_http_header_lines(sh, &lines);
        tb_http_header_lines_free(lines, k);
        if (k < 0) { /* the value is a secret: not quoted */
            snprintf(why, size, "secret_headers: expected a JSON object of strings such as {\"X-Api-Key\": \"...\"} "
                           "(names: HTTP tokens; values: no control characters)");
            return;
        }
    }
    /* The key goes into a header line: a CR or LF in it would end the
     * line and add headers of its own (issue 38, item 4). Not quoted: it
     * is a secret. */
    const char *key_env_name = opt_s(v, n, OPT_API_KEY_ENV);
    const char *env_key = *key_env_name ? getenv(key_env_name) : NULL;
    if (!tb_http_field_value_ok(opt_s(v, n, OPT_API_KEY))) {
        snprintf(why, size, "api_key: a control character (CR, LF, ...) in the key: refused (it would end the "
                       "Authorization header and add others)");
        return;
    }
    if (env_key && !tb_http_field_value_ok(env_key)) {
        snprintf(why, size, "api_key_env: environment variable %s holds a control character (CR, LF, ...): "
                       "refused (it would end the Authorization header and add others)",
                 key_env_name);
        return;
    }
    if (*opt_s(v, n, OPT_API_KEY) && *opt_s(v, n, OPT_API_KEY_ENV)) {
        snprintf(why, size, "api_key and api_key_env: give one of them");
        return;
    }
    const char *key_env = opt_s(v, n, OPT_API_KEY_ENV);
    if (*key_env && !getenv(key_env)) {
        snprintf(why, size, "api_key_env: environment variable %s is not set", key_env);
        return;
    }
    const char *tok = opt_s(v, n, OPT_TOKENIZER);
    if (*tok && access(tok, R_OK) != 0)
        snprintf(why, size, "tokenizer \"%s\": cannot read it (a tokenizer.json path)", tok);
}

/* ------------------------------------------------------ the workload */

/* The files the workload options name, loaded once per path. */
typedef struct wl_files {
    char *hist_path[2]; /* prompt, output */
    tb_len_hist *hist[2];
    char *dataset_path;
    tb_dataset *dataset;
} wl_files;

static void wl_files_free(wl_files *f)
{
    if (!f)
        return;
    for (int k = 0; k < 2; k++) {
        free(f->hist_path[k]);
        tb_len_hist_free(f->hist[k]);
    }
    free(f->dataset_path);
    tb_dataset_free(f->dataset);
    free(f);
}

/* Load what `path` names into the slot unless it holds it already. 0, or
 * -1 with why ("PATH:LINE: field ..."). */
static int wl_load(char **slot_path, void **slot, int dataset, const char *path, char *why, size_t size)
{
    if (*slot_path && strcmp(*slot_path, path) == 0)
        return 0;
    void *obj = NULL;
    int rc = dataset ? tb_dataset_load(path, (tb_dataset **)&obj, why, size)
                     : tb_len_hist_load(path, (tb_len_hist **)&obj, why, size);
    if (rc != 0)
        return -1;
    char *p = strdup(path);
    if (!p) {
        dataset ? tb_dataset_free(obj) : tb_len_hist_free(obj);
        snprintf(why, size, "out of memory");
        return -1;
    }
    if (dataset)
        tb_dataset_free(*slot);
    else
        tb_len_hist_free(*slot);
    free(*slot_path);
    *slot_path = p;
    *slot = obj;
    return 0;
}

/* One length distribution from its options; mean: the case's dimension. */
static int len_dist(const tb_option_value *v, uint32_t n, int which, double mean, tb_len_hist *hist, tb_len_dist *d,
                    char *why, size_t size)
{
    const int o = which ? OPT_OUTPUT_DIST - OPT_PROMPT_DIST : 0; /* the output options follow the prompt ones */
    const char *name = which ? "output" : "prompt";
    *d = (tb_len_dist){
        .kind = tb_len_kind_from_name(opt_s(v, n, OPT_PROMPT_DIST + o)),
        .mean = mean,
        .stdev = opt_f(v, n, OPT_PROMPT_STDEV + o),
        .min = (uint32_t)opt_f(v, n, OPT_PROMPT_MIN + o),
        .max = (uint32_t)opt_f(v, n, OPT_PROMPT_MAX + o),
        .hist = hist,
    };
    if (d->kind == TB_LEN_HISTOGRAM && !hist) {
        snprintf(why, size, "%s_dist = histogram: set %s_histogram = a file of lines \"TOKENS WEIGHT\"", name, name);
        return -1;
    }
    if (!d->max && d->kind == TB_LEN_HISTOGRAM) { /* the longest bin */
        for (size_t i = 0; i < hist->n; i++)
            if (hist->hi[i] > d->max)
                d->max = hist->hi[i];
    } else if (!d->max) { /* never below the least (a prompt set's prompt_tokens is 0) */
        d->max = 2 * mean > d->min ? (uint32_t)(2 * mean) : d->min;
    }
    if (d->max < d->min) {
        snprintf(why, size, "%s_max = %u is below %s_min = %u", name, d->max, name, d->min);
        return -1;
    }
    return 0;
}

/* The case's workload (w) from its options and files. 0, or -1 with why. */
static int workload_config(const tb_request *req, wl_files *f, tb_workload *w, char *why, size_t size)
{
    const tb_option_value *v = req->options;
    uint32_t n = req->n_options;
    memset(w, 0, sizeof *w);
    const int hist_opt[2] = {OPT_PROMPT_HISTOGRAM, OPT_OUTPUT_HISTOGRAM};
    for (int k = 0; k < 2; k++) {
        const char *path = opt_s(v, n, hist_opt[k]);
        if (*path && wl_load(&f->hist_path[k], (void **)&f->hist[k], 0, path, why, size) != 0)
            return -1;
    }
    const char *ds = opt_s(v, n, OPT_DATASET);
    if (*ds && wl_load(&f->dataset_path, (void **)&f->dataset, 1, ds, why, size) != 0)
        return -1;
    if (len_dist(v, n, 0, req->prompt_tokens, *opt_s(v, n, OPT_PROMPT_HISTOGRAM) ? f->hist[0] : NULL, &w->prompt,
                 why, size) != 0 ||
        len_dist(v, n, 1, req->max_new_tokens, *opt_s(v, n, OPT_OUTPUT_HISTOGRAM) ? f->hist[1] : NULL, &w->output,
                 why, size) != 0)
        return -1;
    /* the worker's buffers hold 4 emissions per max_new_tokens of each
     * request (core/worker.c): a longer answer would be cut as a flood */
    if ((uint64_t)w->output.max > 4 * (uint64_t)req->max_new_tokens) {
        snprintf(why, size, "output lengths up to %u tokens: at most 4 x max_new_tokens (%u) per request; raise "
                 "max_new_tokens or lower output_max", w->output.max, req->max_new_tokens);
        return -1;
    }
    w->prefix_groups = (uint32_t)opt_f(v, n, OPT_PREFIX_GROUPS);
    w->prefix_tokens = (uint32_t)opt_f(v, n, OPT_PREFIX_TOKENS);
    if (w->prefix_groups && !w->prefix_tokens) {
        snprintf(why, size, "prefix_groups = %u: set prefix_tokens, the shared system prompt's length", w->prefix_groups);
        return -1;
    }
    if (w->prefix_tokens && !w->prefix_groups) { /* it would be ignored */
        snprintf(why, size, "prefix_tokens = %u: set prefix_groups = N, the shared prefixes' count (session i "
                 "shares group i mod N's), or leave prefix_tokens out", w->prefix_tokens);
        return -1;
    }
    w->turns = (uint32_t)opt_f(v, n, OPT_TURNS);
    if (!*ds) { /* synthetic prompts: what one number can make the client build */
        /* every draw is clipped to [min, max]; a fixed length is the mean, clipped */
        uint64_t user = w->prompt.max;
        if (w->prompt.kind == TB_LEN_FIXED && w->prompt.mean < user)
            user = w->prompt.mean > w->prompt.min ? (uint64_t)(w->prompt.mean + 0.5) : w->prompt.min;
        uint64_t longest = w->prefix_tokens + w->turns * user + (w->turns - 1) * (uint64_t)w->output.max;
        if (longest > TB_HTTP_MAX_PROMPT_TOKENS) {
            snprintf(why, size,
                     "prompts of up to %llu tokens (prefix_tokens %u + %u turn(s) of up to %llu prompt tokens%s): "
                     "more than %u, the longest prompt tokbench makes (TB_HTTP_MAX_PROMPT_TOKENS)",
                     (unsigned long long)longest, w->prefix_tokens, w->turns, (unsigned long long)user,
                     w->turns > 1 ? " and the answers between them" : "", TB_HTTP_MAX_PROMPT_TOKENS);
            return -1;
        }
        if (longest * req->n_requests > TB_HTTP_MAX_CALL_PROMPT_TOKENS) {
            snprintf(why, size,
                     "%u requests of prompts up to %llu tokens: more than %llu prompt tokens in one call, what the "
                     "client holds at once (TB_HTTP_MAX_CALL_PROMPT_TOKENS)",
                     req->n_requests, (unsigned long long)longest, TB_HTTP_MAX_CALL_PROMPT_TOKENS);
            return -1;
        }
    }
    if (req->n_requests % w->turns) {
        snprintf(why, size, "turns = %u: the requests of a call (%u) must be a whole number of sessions of %u turns",
                 w->turns, req->n_requests, w->turns);
        return -1;
    }
    w->dataset = *ds ? f->dataset : NULL;
    if (w->dataset && tb_dataset_eligible(w->dataset, w->turns) == 0) {
        snprintf(why, size, "dataset %s: no conversation has %u user turns (turns = %u)", ds, w->turns, w->turns);
        return -1;
    }
    w->output_from_reference = w->dataset && strcmp(opt_s(v, n, OPT_DATASET_OUTPUT), "reference") == 0;
    if (w->output_from_reference && !*opt_s(v, n, OPT_TOKENIZER)) {
        snprintf(why, size, "dataset_output = reference counts the reference answers' tokens: set tokenizer = the "
                 "model's tokenizer.json, or dataset_output = dist");
        return -1;
    }
    return 0;
}

static tb_status http_validate(const tb_request *req, char *why, size_t why_size)
{
    check_options(req->options, req->n_options, why, why_size);
    if (why[0])
        return TB_ERR_INVALID;
    /* the files are read once in this process, for every case */
    static wl_files files;
    tb_workload w;
    if (workload_config(req, &files, &w, why, why_size) != 0)
        return TB_ERR_INVALID;
    return TB_OK;
}

/* ------------------------------------------------------ lifecycle */

/* Append a header line to c->headers; 0 when out of memory (the list is
 * kept as it was). */
static int add_header(http_ctx *c, const char *line)
{
    struct curl_slist *h = curl_slist_append(c->headers, line);
    if (!h)
        return 0;
    c->headers = h;
    return 1;
}

/* Keep a copy of a secret value (redact.h); 0 when out of memory. */
static int add_secret(http_ctx *c, const char *value)
{
    char **v = tb_realloc_array(c->secrets, c->n_secrets + 1, sizeof *v);
    if (!v)
        return 0;
    c->secrets = v;
    if (!(v[c->n_secrets] = strdup(value)))
        return 0;
    c->n_secrets++;
    return 1;
}

static void wipe_headers(struct curl_slist *h)
{
    for (struct curl_slist *it = h; it; it = it->next)
        explicit_bzero(it->data, strlen(it->data));
    curl_slist_free_all(h);
}

static void http_destroy(void *p)
{
    http_ctx *c = p;
    if (!c)
        return;
    tb_http_client_free(c->client);
    wipe_headers(c->headers);
    for (size_t i = 0; i < c->n_secrets; i++) {
        explicit_bzero(c->secrets[i], strlen(c->secrets[i]));
        free(c->secrets[i]);
    }
    free(c->secrets);
    tb_prompt_vocab_free(c->vocab);
    tb_tokenizer_free(c->tok);
    for (uint32_t i = 0; i < c->n_cap && c->bodies; i++)
        free(c->bodies[i]);
    for (uint32_t i = 0; i < c->n_cap && c->answers; i++)
        free(c->answers[i]);
    free(c->bodies);
    free(c->answers);
    free(c->max_tokens);
    free(c->results);
    free(c->offsets);
    free(c->prompt_counted);
    wl_files_free(c->files);
    free(c->model);
    free(c->describe_json);
    free(c->checked);
    free(c);
}

/* The URL without user:password@ (for describe()). */
static char *redact_url(const char *url)
{
    const char *scheme = strstr(url, "://");
    const char *host = scheme ? scheme + 3 : url;
    const char *at = strchr(host, '@'), *slash = strchr(host, '/');
    char *out = malloc(strlen(url) + 1);
    if (!out)
        return NULL;
    if (at && (!slash || at < slash))
        snprintf(out, strlen(url) + 1, "%.*s%s", (int)(host - url), url, at + 1);
    else
        strcpy(out, url);
    return out;
}

/* describe()'s JSON; NULL when out of memory (each add checked: a
 * partial description would be stored as if whole). */
static char *make_description(const http_ctx *c, const tb_option_value *v, uint32_t n)
{
    cJSON *o = cJSON_CreateObject();
    int ok = o != NULL;
    const char *name = opt_s(v, n, OPT_MODEL_NAME);
    ok &= cJSON_AddStringToObject(o, "model_name", *name ? name : c->model) != NULL;
    char *url = redact_url(opt_s(v, n, OPT_URL));
    ok &= url && cJSON_AddStringToObject(o, "url", url) != NULL;
    free(url);
    ok &= cJSON_AddStringToObject(o, "endpoint", opt_s(v, n, OPT_ENDPOINT)) != NULL;
    ok &= cJSON_AddBoolToObject(o, "stream", opt_b(v, n, OPT_STREAM)) != NULL;
    ok &= cJSON_AddStringToObject(o, "device", "remote") != NULL;
    const char *tok = opt_s(v, n, OPT_TOKENIZER);
    if (*tok)
        ok &= cJSON_AddStringToObject(o, "tokenizer", tok) != NULL;
    else
        ok &= cJSON_AddNullToObject(o, "tokenizer") != NULL;
    const char *key_env = opt_s(v, n, OPT_API_KEY_ENV);
    if (*key_env)
        ok &= cJSON_AddStringToObject(o, "api_key_env", key_env) != NULL; /* the name, never the key */
    ok &= cJSON_AddBoolToObject(o, "api_key", *opt_s(v, n, OPT_API_KEY) || *key_env) != NULL; /* whether, never which */
    cJSON *names = cJSON_AddArrayToObject(o, "headers");
    ok &= names != NULL;
    const char *hdr = opt_s(v, n, OPT_HEADERS);
    cJSON *h = cJSON_Parse(hdr), *it;
    ok &= !*hdr || h != NULL; /* checked at load: NULL here is memory */
    cJSON_ArrayForEach(it, h) ok &= cJSON_AddItemToArray(names, cJSON_CreateString(it->string));
    cJSON_Delete(h);
    ok &= cJSON_AddStringToObject(o, "client", curl_version()) != NULL;
    ok &= cJSON_AddStringToObject(o, "engine_version", "tokbench-http " HTTP_VERSION) != NULL;
    char *s = ok ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return s;
}

/* ------------------------------------------------------ preflight */

static char *endpoint_url(const char *base, int chat);
static char *make_body(const http_ctx *c, const tb_request *req, const char *prompt, const tb_session *sess,
                       uint32_t turn, uint32_t max_tokens, const cJSON *extra);

#define PREFLIGHT_MODELS_MAX ((size_t)1 << 20) /* bytes of /v1/models read */

static size_t models_write(char *ptr, size_t size, size_t nmemb, void *user)
{
    tb_str *b = user;
    size_t n = size * nmemb;
    if (b->len + n > PREFLIGHT_MODELS_MAX || tb_str_try_appendn(b, ptr, n) != 0)
        return 0; /* a list that large is not one: abort, and do without it */
    return n;
}

/* GET /v1/models: 0, with the ids listed ("a, b", at most a few) in
 * ids[ids_size] ("" when none or no such endpoint: many servers lack
 * it); -1 when no connection could be made, or one was and nothing came
 * back in time (the class and curl's reason in why). */
static int list_models(http_ctx *c, const char *base, long connect_ms, long timeout_ms, char *ids, size_t ids_size,
                       char *why, size_t why_size)
{
    ids[0] = '\0';
    size_t n = strlen(base);
    while (n && base[n - 1] == '/')
        n--;
    int has_v1 = n >= 3 && memcmp(base + n - 3, "/v1", 3) == 0;
    char *url = malloc(n + 16);
    CURL *e = url ? curl_easy_init() : NULL;
    if (!e) {
        free(url);
        return 0; /* memory: the completion decides */
    }
    snprintf(url, n + 16, "%.*s%s", (int)n, base, has_v1 ? "/models" : "/v1/models");
    tb_str body = {0};
    char errbuf[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, c->headers);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, connect_ms);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, models_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &body);
    CURLcode rc = curl_easy_perform(e);
    long code = 0;
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code);
    /* Nothing answered in time: no connection, or a server that accepted
     * and never answered ("timeout", the requests' own rule). */
    const char *cls = rc == CURLE_OPERATION_TIMEDOUT && code == 0 ? tb_http_timeout_class(e, 0)
                      : rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST ||
                              rc == CURLE_COULDNT_RESOLVE_PROXY
                          ? "connect"
                          : NULL;
    curl_easy_cleanup(e);
    free(url);
    if (cls) {
        snprintf(why, why_size, "%s: %s", cls, errbuf[0] ? errbuf : curl_easy_strerror(rc));
        tb_str_free(&body);
        return -1;
    }
    cJSON *j = rc == CURLE_OK && code >= 200 && code < 300 && body.s ? cJSON_ParseWithLength(body.s, body.len) : NULL;
    cJSON *data = cJSON_GetObjectItemCaseSensitive(j, "data"), *m;
    if (!cJSON_IsArray(data))
        data = NULL;
    size_t used = 0, shown = 0, total = 0;
    cJSON_ArrayForEach(m, data)
    {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(m, "id");
        if (!cJSON_IsString(id))
            continue;
        total++;
        if (shown < 5 && used + strlen(id->valuestring) + 3 < ids_size) {
            used += (size_t)snprintf(ids + used, ids_size - used, "%s%s", shown ? ", " : "", id->valuestring);
            shown++;
        }
    }
    if (total > shown && used + 16 < ids_size)
        snprintf(ids + used, ids_size - used, " and %zu more", total - shown);
    cJSON_Delete(j);
    tb_str_free(&body);
    return 0;
}

/* What the preflight depends on: a case that differs in it is checked
 * again. malloc'd; NULL when out of memory. */
static char *preflight_key(const tb_option_value *v, uint32_t n)
{
    tb_str k = {0};
    tb_str_try_appendf(&k, "%s\n%s\n%s\n%d\n%s", opt_s(v, n, OPT_URL), opt_s(v, n, OPT_ENDPOINT),
                       opt_s(v, n, OPT_MODEL_NAME), opt_b(v, n, OPT_STREAM), opt_s(v, n, OPT_EXTRA_JSON));
    return tb_str_try_take(&k);
}

/* Before any measured request (issue 39): is a server there, and does it
 * answer one 1-token request as the case will send it (endpoint, model,
 * stream, extra_json)? TB_OK, or a status with the server's answer in
 * why (the connection's error, or the HTTP status and its message). The
 * models list only helps the message: many servers lack /v1/models. */
static tb_status preflight(http_ctx *c, const tb_option_value *v, uint32_t n, char *why, size_t why_size)
{
    const char *base = opt_s(v, n, OPT_URL);
    long connect_ms = (long)(opt_f(v, n, OPT_CONNECT_TIMEOUT) * 1000 + 0.5);
    long timeout_ms = (long)(opt_f(v, n, OPT_TIMEOUT) * 1000 + 0.5);
    char ids[256], err[512];
    char *shown = redact_url(base);
    if (list_models(c, base, connect_ms, timeout_ms, ids, sizeof ids, err, sizeof err) != 0) {
        snprintf(why, why_size, "no server answers at %s: %s (preflight = false skips this check)",
                 shown ? shown : "the url", err);
        free(shown);
        return TB_ERR_IO;
    }
    int chat = strcmp(opt_s(v, n, OPT_ENDPOINT), "chat") == 0;
    const char *extra_text = opt_s(v, n, OPT_EXTRA_JSON);
    cJSON *extra = *extra_text ? tb_http_extra_json(extra_text) : NULL;
    tb_request one = {.struct_size = sizeof one, .n_requests = 1, .max_new_tokens = 1, .batch = 1,
                      .options = v, .n_options = n};
    char *url = endpoint_url(base, chat);
    char *body = url && (!*extra_text || extra) ? make_body(c, &one, "Hello", NULL, 0, 1, extra) : NULL;
    cJSON_Delete(extra);
    if (!body) {
        free(url);
        free(shown);
        snprintf(why, why_size, "out of memory");
        return TB_ERR_NO_MEMORY;
    }
    tb_http_target t = {
        .url = url,
        .headers = c->headers,
        .secrets = (const char *const *)c->secrets,
        .n_secrets = c->n_secrets,
        .stream = opt_b(v, n, OPT_STREAM),
        .connect_timeout_ms = connect_ms,
        .timeout_ms = timeout_ms,
        .max_response_bytes = (size_t)(opt_f(v, n, OPT_MAX_RESPONSE_MB) * 1048576.0),
        .max_chunks = 64,
        .max_usage_tokens = 64,
        .no_emit = 1,
    };
    tb_http_result r;
    memset(&r, 0, sizeof r);
    char *bodies[1] = {body};
    tb_status st = tb_http_client_run(c->client, &t, 1, bodies, NULL, 1, 1, &r);
    free(body);
    if (st == TB_OK && r.status != TB_OK) {
        st = r.status;
        snprintf(why, why_size, "the server at %s failed a 1-token %s request before the load: %s%s%s "
                 "(preflight = false skips this check)",
                 shown ? shown : "the url", chat ? "chat" : "completion", r.error,
                 *ids ? "; it lists the models " : "", ids);
    } else if (st != TB_OK) {
        snprintf(why, why_size, "the 1-token request before the load did not finish: %s",
                 st == TB_ERR_CANCELLED ? "cancelled" : "out of memory");
    }
    free(url);
    free(shown);
    return st;
}

/* The preflight, once for each key (a case's url, endpoint, model,
 * stream and extra_json) unless preflight = false. */
static tb_status preflight_once(http_ctx *c, const tb_option_value *v, uint32_t n, char *why, size_t why_size)
{
    if (!opt_b(v, n, OPT_PREFLIGHT))
        return TB_OK;
    char *key = preflight_key(v, n);
    if (!key) {
        snprintf(why, why_size, "out of memory");
        return TB_ERR_NO_MEMORY;
    }
    if (c->checked && strcmp(c->checked, key) == 0) {
        free(key);
        return TB_OK;
    }
    tb_status st = preflight(c, v, n, why, why_size);
    if (st != TB_OK) /* whatever a server echoes (a model list, a message) */
        tb_redact_buf(why, why_size, (const char *const *)c->secrets, c->n_secrets);
    free(c->checked);
    c->checked = st == TB_OK ? key : NULL;
    if (st != TB_OK)
        free(key);
    return st;
}

static tb_status http_create(const tb_host *host, const char *model, const tb_option_value *options,
                             uint32_t n_options, void **ctx_out, char *err, size_t err_size)
{
    *ctx_out = NULL;
    if (!host || host->abi_major != TB_ABI_MAJOR || !TB_STRUCT_HAS(host, tb_host, cancelled)) {
        snprintf(err, err_size, "http: host table missing or too old");
        return TB_ERR_INVALID;
    }
    char why[512];
    check_options(options, n_options, why, sizeof why);
    if (why[0]) {
        snprintf(err, err_size, "%s", why);
        return TB_ERR_INVALID;
    }
    http_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, err_size, "out of memory");
        return TB_ERR_NO_MEMORY;
    }
    c->host = host;
    c->model = strdup(model ? model : "");
    const char *tok = opt_s(options, n_options, OPT_TOKENIZER);
    if (*tok && tb_tokenizer_load(tok, &c->tok, err, err_size) != 0) {
        http_destroy(c);
        return strstr(err, "out of memory") ? TB_ERR_NO_MEMORY : TB_ERR_MODEL;
    }
    if (err_size)
        err[0] = '\0';
    c->vocab = tb_prompt_vocab_new(c->tok);
    c->client = c->vocab && c->model ? tb_http_client_new(host, err, err_size) : NULL;
    if (!c->client) { /* tb_http_client_new says why; the others are memory */
        tb_status st = err[0] && !strstr(err, "out of memory") ? TB_ERR : TB_ERR_NO_MEMORY;
        if (!err[0])
            snprintf(err, err_size, "out of memory");
        http_destroy(c);
        return st;
    }
    /* Headers: JSON body, no 100-continue round trip, the key, the
     * suite's own. A header missing for want of memory would send
     * requests without it (without the key): that fails create(). */
    int ok = add_header(c, "Content-Type: application/json") && add_header(c, "Expect:");
    const char *key_env = opt_s(options, n_options, OPT_API_KEY_ENV);
    const char *key_opt = opt_s(options, n_options, OPT_API_KEY);
    if (ok && (*key_env || *key_opt)) {
        const char *key = *key_opt ? key_opt : getenv(key_env);
        ok = add_secret(c, key);
        size_t len = strlen(key) + 32;
        char *line = malloc(len);
        ok &= line != NULL;
        if (line && ok) {
            snprintf(line, len, "Authorization: Bearer %s", key);
            ok = add_header(c, line);
            explicit_bzero(line, len);
            free(line);
        }
    }
    for (int which = 0; which < 2 && ok; which++) { /* the suite's headers, then the secret ones */
        char **lines;
        int k = tb_http_header_lines(opt_s(options, n_options, which ? OPT_SECRET_HEADERS : OPT_HEADERS), &lines);
        ok = k >= 0; /* checked at load: -1 here is memory */
        for (int i = 0; i < k && ok; i++) /* a secret header's value: after "Name: " */
            ok = add_header(c, lines[i]) && (!which || add_secret(c, strchr(lines[i], ':') + 2));
        tb_http_header_lines_free(lines, k);
    }
    if (ok)
        c->describe_json = make_description(c, options, n_options);
    if (!c->describe_json) {
        snprintf(err, err_size, "out of memory");
        http_destroy(c);
        return TB_ERR_NO_MEMORY;
    }
    if (c->tok)
        host->log(host, TB_LOG_INFO, "tokenizer %s: %zu one-token words for synthetic prompts", tok,
                  tb_prompt_vocab_size(c->vocab));
    /* A server that is not there, or that refuses the request as the
     * cases will send it, fails here with its answer: before any measured
     * request, for every case of this load. */
    tb_status pst = preflight_once(c, options, n_options, c->error, sizeof c->error);
    if (pst != TB_OK) {
        snprintf(err, err_size, "%s", c->error);
        http_destroy(c);
        return pst;
    }
    *ctx_out = c;
    return TB_OK;
}

/* ------------------------------------------------------ generate */

static uint64_t mix(uint64_t a, uint64_t b)
{
    uint64_t z = a ^ (b + 0x9E3779B97F4A7C15ull + (a << 6) + (a >> 2));
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    return z ^ (z >> 31);
}

/* FNV-1a of a prompt's bytes, never 0: what tb_result.prompt_hash
 * reports for a prompt this plugin made. */
static uint64_t text_hash(const char *t)
{
    uint64_t h = 1469598103934665603ULL;
    for (; *t; t++) {
        h ^= (unsigned char)*t;
        h *= 1099511628211ULL;
    }
    return h ? h : 1;
}

/* The endpoint's full URL (malloc'd). */
static char *endpoint_url(const char *base, int chat)
{
    size_t n = strlen(base);
    while (n && base[n - 1] == '/')
        n--;
    const char *path = chat ? "chat/completions" : "completions";
    int has_v1 = n >= 3 && memcmp(base + n - 3, "/v1", 3) == 0;
    size_t len = n + strlen(path) + 8;
    char *u = malloc(len);
    if (u)
        snprintf(u, len, "%.*s%s%s", (int)n, base, has_v1 ? "/" : "/v1/", path);
    return u;
}

/* A request body; NULL when out of memory (each add checked: a body
 * missing a field would still be sent). */
static char *make_body(const http_ctx *c, const tb_request *req, const char *prompt, const tb_session *sess,
                       uint32_t turn, uint32_t max_tokens, const cJSON *extra)
{
    const tb_option_value *v = req->options;
    uint32_t n = req->n_options;
    int chat = strcmp(opt_s(v, n, OPT_ENDPOINT), "chat") == 0, stream = opt_b(v, n, OPT_STREAM);
    cJSON *o = cJSON_CreateObject();
    int ok = o != NULL;
    const char *name = opt_s(v, n, OPT_MODEL_NAME);
    if (!*name)
        name = c->model;
    if (*name)
        ok &= cJSON_AddStringToObject(o, "model", name) != NULL;
    if (chat) { /* a session's messages (workload.h), or one user message */
        tb_message one = {"user", prompt}, *m = &one;
        size_t nm = 1;
        if (sess) {
            m = malloc((2 * (size_t)turn + 3) * sizeof *m);
            nm = m ? tb_session_messages(sess, turn, m) : 0;
            ok &= m != NULL;
        }
        cJSON *msgs = cJSON_AddArrayToObject(o, "messages");
        ok &= msgs != NULL;
        for (size_t i = 0; i < nm && ok; i++) {
            cJSON *j = cJSON_CreateObject();
            ok &= cJSON_AddStringToObject(j, "role", m[i].role) != NULL;
            ok &= cJSON_AddStringToObject(j, "content", m[i].content) != NULL;
            if (!cJSON_AddItemToArray(msgs, j)) {
                cJSON_Delete(j);
                ok = 0;
            }
        }
        if (m != &one)
            free(m);
    } else {
        ok &= cJSON_AddStringToObject(o, "prompt", prompt) != NULL;
    }
    ok &= cJSON_AddNumberToObject(o, "max_tokens", max_tokens) != NULL;
    ok &= cJSON_AddNumberToObject(o, "temperature", opt_f(v, n, OPT_TEMPERATURE)) != NULL;
    ok &= cJSON_AddBoolToObject(o, "stream", stream) != NULL;
    if (stream)
        ok &= cJSON_AddTrueToObject(cJSON_AddObjectToObject(o, "stream_options"), "include_usage") != NULL;
    ok &= tb_http_extra_merge(o, extra) == 0; /* the suite's fields win */
    char *s = ok ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return s;
}

static tb_status reserve(http_ctx *c, uint32_t n)
{
    if (n <= c->n_cap)
        return TB_OK;
    for (uint32_t i = 0; i < c->n_cap; i++) {
        free(c->bodies[i]);
        free(c->answers[i]);
    }
    free(c->bodies);
    free(c->answers);
    free(c->max_tokens);
    free(c->results);
    free(c->offsets);
    free(c->prompt_counted);
    c->bodies = calloc(n, sizeof *c->bodies);
    c->answers = calloc(n, sizeof *c->answers);
    c->max_tokens = calloc(n, sizeof *c->max_tokens);
    c->results = calloc(n, sizeof *c->results);
    c->offsets = calloc(n, sizeof *c->offsets);
    c->prompt_counted = calloc(n, sizeof *c->prompt_counted);
    c->n_cap = n;
    if (!c->bodies || !c->answers || !c->max_tokens || !c->results || !c->offsets || !c->prompt_counted) {
        free(c->bodies);
        free(c->answers);
        c->bodies = NULL;
        c->answers = NULL;
        c->n_cap = 0;
        set_error(c, "out of memory for %u requests", n);
        return TB_ERR_NO_MEMORY;
    }
    return TB_OK;
}

/* The requests of one wave (turn t of every session: requests
 * [base, base + k)): bodies and hashes (a session's prompt is counted
 * after the call: count_prompts). TB_OK or TB_ERR_NO_MEMORY (set_error
 * says so). */
static tb_status build_wave(http_ctx *c, const tb_request *req, tb_result *res, const tb_session *ss, uint32_t t,
                            uint32_t base, uint32_t k, uint64_t call_seed, const cJSON *extra)
{
    for (uint32_t i = 0; i < k; i++) {
        uint32_t r = base + i;
        free(c->bodies[r]);
        c->bodies[r] = NULL;
        c->prompt_counted[r] = -1;
        char *text = NULL;
        const tb_session *s = NULL;
        if (req->prompt_text) { /* a prompt set: its item, as it is */
            text = strdup(req->prompt_text[r]);
            c->max_tokens[r] = req->max_new_tokens;
        } else if (ss) {
            s = &ss[i];
            text = tb_session_prompt(s, t);
            c->max_tokens[r] = s->max_tokens[t];
        } else { /* the fixed synthetic prompt of before (seeded the same) */
            text = tb_prompt_synth(c->vocab, req->prompt_tokens, mix(call_seed, r), &c->prompt_counted[r]);
            c->max_tokens[r] = req->max_new_tokens;
        }
        if (!text) {
            set_error(c, "out of memory building request %u", r);
            return TB_ERR_NO_MEMORY;
        }
        c->bodies[r] = make_body(c, req, text, s, t, c->max_tokens[r], extra);
        /* Prompts this plugin made (with unique_prompts, new ones every
         * repetition): say which, so that the host compares outputs of
         * the same prompt only. */
        if (!req->prompt_text && TB_STRUCT_HAS(res, tb_result, prompt_hash) && res->prompt_hash)
            res->prompt_hash[r] = text_hash(text);
        free(text);
        if (!c->bodies[r]) {
            set_error(c, "out of memory building request %u", r);
            return TB_ERR_NO_MEMORY;
        }
        if (TB_STRUCT_HAS(res, tb_result, max_tokens) && res->max_tokens)
            res->max_tokens[r] = c->max_tokens[r];
    }
    return TB_OK;
}

/* After the call (outside its window): each sent request's prompt as the
 * tokenizer counts the text sent (chat: the messages' contents, without
 * the server's template), into prompt_counted and res->prompt_tokens.
 * TB_OK or TB_ERR_NO_MEMORY. */
static tb_status count_prompts(http_ctx *c, tb_result *res, const tb_session *ss, uint32_t n_sessions, uint32_t n_sent)
{
    int want = TB_STRUCT_HAS(res, tb_result, prompt_tokens) && res->prompt_tokens;
    for (uint32_t r = 0; r < n_sent && c->tok; r++) {
        if (ss) {
            char *text = tb_session_prompt(&ss[r % n_sessions], r / n_sessions);
            c->prompt_counted[r] = text ? tb_tokenizer_encode(c->tok, text, strlen(text), NULL, 0) : TB_TOKENIZER_NO_MEMORY;
            free(text);
            if (c->prompt_counted[r] == TB_TOKENIZER_NO_MEMORY) {
                set_error(c, "out of memory counting the prompt of request %u", r);
                return TB_ERR_NO_MEMORY;
            }
        }
        if (want && c->prompt_counted[r] > 0 && c->prompt_counted[r] <= UINT32_MAX)
            res->prompt_tokens[r] = (uint32_t)c->prompt_counted[r];
    }
    return TB_OK;
}

/* Is the workload more than the fixed synthetic prompt of before? */
static int shaped(const tb_workload *w)
{
    return w->prompt.kind != TB_LEN_FIXED || w->output.kind != TB_LEN_FIXED || w->dataset || w->prefix_groups ||
           w->turns > 1;
}

/* The client's own CPU (docs/METRICS.md, client_busy) into the result,
 * and its cost per streamed chunk logged with TOKBENCH_DEBUG=1
 * (docs/PERFORMANCE.md). */
static void report_client_cpu(http_ctx *c, uint32_t first, uint32_t n, tb_result *res)
{
    const tb_http_cpu *u = tb_http_client_cpu(c->client);
    uint64_t chunks = 0;
    for (uint32_t r = first; r < first + n; r++)
        chunks += c->results[r].chunks;
    double busy = u->busiest_loop > u->process_share ? u->busiest_loop : u->process_share;
    /* a multi-turn load runs the client once per wave: the busiest wave */
    if (TB_STRUCT_HAS(res, tb_result, client_busy) && busy > res->client_busy)
        res->client_busy = busy;
    double cpu = (double)u->loops_cpu_ns * 1e-9, wall = (double)u->wall_ns * 1e-9;
    c->host->log(c->host, TB_LOG_DEBUG,
                 "client: %u requests, %llu chunks, %u loops, %.3f s loop CPU in %.3f s (busiest loop %.0f%%, "
                 "process %.2f of %d cores, %.2f us per chunk)",
                 n, (unsigned long long)chunks, u->loops, cpu, wall, 100.0 * u->busiest_loop,
                 (double)u->process_cpu_ns * 1e-9 / (wall > 0 ? wall : 1), u->cores,
                 chunks ? cpu * 1e6 / (double)chunks : 0.0);
}

/* Request r's failure: what error[] holds (cut at a character's start),
 * and the whole message through the host, where it takes it. */
static void set_request_error(const tb_host *host, uint32_t r, tb_request_result *q, const char *msg)
{
    size_t n = strlen(msg);
    if (n >= sizeof q->error) {
        n = sizeof q->error - 1;
        while (n && ((unsigned char)msg[n] & 0xc0) == 0x80) /* msg[n]: the first byte left out */
            n--;
        if (TB_STRUCT_HAS(host, tb_host, request_error) && host->request_error)
            host->request_error(host, r, msg);
    }
    memcpy(q->error, msg, n);
    q->error[n] = '\0';
}

/* A server's per-request speculative counts (tb_oai_spec, SGLang's
 * meta_info) as tb_spec_counts (docs/METRICS.md): verifications =
 * spec_verify_ct; accepted = spec_accept_token_num, else from
 * spec_accept_length (tokens per verification: accepted + verifications
 * = length x verifications), else from the histogram; drafted =
 * spec_draft_token_num (0: not said). The histogram's buckets (hist[j]:
 * verifications that accepted j draft tokens, j = 0 .. k) give the
 * positions when they count every verification: each drafted k tokens,
 * and position i was accepted by the verifications that accepted more
 * than i. Nothing when the server said no verification or no accepted
 * count; the runner checks what is filled (impossible counts fail the
 * request). */
static void spec_from_server(const tb_oai_spec *o, tb_spec_counts *out)
{
    memset(out, 0, sizeof *out);
    if (o->verify_ct <= 0 || o->verify_ct > UINT32_MAX)
        return;
    int64_t v = o->verify_ct, acc = o->accept_tokens, hist_sum = 0, hist_acc = 0;
    for (uint32_t j = 0; j < o->n_hist; j++) {
        hist_sum += o->hist[j];
        hist_acc += (int64_t)j * o->hist[j];
    }
    uint32_t k = o->n_hist > 1 && hist_sum == v ? o->n_hist - 1 : 0;
    if (acc < 0 && isfinite(o->accept_length))
        acc = llround(o->accept_length * (double)v) - v;
    if (acc < 0 && k)
        acc = hist_acc;
    if (acc < 0 || acc > UINT32_MAX)
        return;
    out->verifications = (uint32_t)v;
    out->accepted = (uint32_t)acc;
    out->drafted = o->draft_tokens > 0 && o->draft_tokens <= UINT32_MAX ? (uint32_t)o->draft_tokens : 0;
    if (!k || k > TB_SPEC_MAX_DRAFT || (out->drafted && out->drafted != (uint64_t)v * k) || hist_acc != acc)
        return;
    out->draft_len = k;
    if (!out->drafted && (uint64_t)v * k <= UINT32_MAX)
        out->drafted = (uint32_t)(v * k);
    int64_t more = v; /* verifications that accepted at least i + 1 */
    for (uint32_t i = 0; i < k; i++) {
        more -= o->hist[i];
        out->drafted_at[i] = (uint32_t)v;
        out->accepted_at[i] = (uint32_t)more;
    }
}

static tb_status http_generate(void *ctx, const tb_request *req, tb_result *res)
{
    http_ctx *c = ctx;
    const tb_host *host = c->host;
    c->error[0] = '\0';
    const tb_option_value *v = req->options;
    uint32_t nv = req->n_options, n = req->n_requests;
    if (n == 0 || !res->requests || res->n_requests < n) {
        set_error(c, "generate: %u requests, result room for %u", n, res->n_requests);
        return TB_ERR_INVALID;
    }
    tb_status st = reserve(c, n);
    if (st != TB_OK)
        return st;
    if (!c->files && !(c->files = calloc(1, sizeof *c->files))) {
        set_error(c, "out of memory");
        return TB_ERR_NO_MEMORY;
    }
    /* a case that sweeps url, endpoint, model_name, stream or extra_json
     * is checked with its own values (the first call: a warm-up, unless
     * warmup = 0) */
    st = preflight_once(c, v, nv, c->error, sizeof c->error);
    if (st != TB_OK)
        return st;
    tb_workload w;
    char why[512];
    if (workload_config(req, c->files, &w, why, sizeof why) != 0) {
        set_error(c, "%s", why);
        return strstr(why, "out of memory") ? TB_ERR_NO_MEMORY : TB_ERR_INVALID;
    }
    int chat = strcmp(opt_s(v, nv, OPT_ENDPOINT), "chat") == 0, stream = opt_b(v, nv, OPT_STREAM);
    int unique = opt_b(v, nv, OPT_UNIQUE_PROMPTS);
    uint64_t call_seed = unique ? mix(mix(req->seed, req->repetition), req->is_warmup ? 0xAA : 0x55) : req->seed;
    uint32_t turns = req->prompt_text ? 1 : w.turns, n_sessions = n / turns;
    double duration_s = opt_f(v, nv, OPT_DURATION);

    /* Everything before the first send: the sessions (drawn lengths,
     * dataset items, prefixes), the first wave's bodies. */
    const char *extra_text = opt_s(v, nv, OPT_EXTRA_JSON);
    cJSON *extra = tb_http_extra_json(extra_text);
    if (*extra_text && !extra) { /* checked at load: NULL here is memory */
        set_error(c, "out of memory parsing extra_json");
        return TB_ERR_NO_MEMORY;
    }
    tb_session *ss = NULL;
    if (!req->prompt_text && shaped(&w) &&
        tb_sessions_make(&w, c->vocab, c->tok, call_seed, req->seed, n_sessions, &ss, why, sizeof why) != 0) {
        cJSON_Delete(extra);
        set_error(c, "%s", why);
        return strstr(why, "out of memory") ? TB_ERR_NO_MEMORY : TB_ERR_INVALID;
    }
    char *url = endpoint_url(opt_s(v, nv, OPT_URL), chat);
    if (!url) {
        cJSON_Delete(extra);
        tb_sessions_free(ss, n_sessions);
        set_error(c, "out of memory");
        return TB_ERR_NO_MEMORY;
    }
    /* the bounds on what a response may hold: from the most any request
     * of the call asks for */
    uint32_t max_tokens = req->max_new_tokens;
    for (uint32_t i = 0; ss && i < n_sessions; i++)
        for (uint32_t k = 0; k < turns; k++)
            max_tokens = ss[i].max_tokens[k] > max_tokens ? ss[i].max_tokens[k] : max_tokens;
    tb_http_target t = {
        .url = url,
        .headers = c->headers,
        .secrets = (const char *const *)c->secrets,
        .n_secrets = c->n_secrets,
        .stream = stream,
        .connect_timeout_ms = (long)(opt_f(v, nv, OPT_CONNECT_TIMEOUT) * 1000 + 0.5),
        .timeout_ms = (long)(opt_f(v, nv, OPT_TIMEOUT) * 1000 + 0.5),
        .max_response_bytes = (size_t)(opt_f(v, nv, OPT_MAX_RESPONSE_MB) * 1048576.0),
        .max_chunks = max_tokens <= (UINT32_MAX - 16) / 4 ? 4 * max_tokens + 16 : 0,
        /* the same slack for the server's count of the tokens; past
         * 32 bits the parser refuses it (TB_OAI_MAX_COUNT) */
        .max_usage_tokens = max_tokens <= (UINT32_MAX - 16) / 4 ? 4 * max_tokens + 16 : 0,
    };
    uint32_t inflight = req->concurrency ? req->concurrency : req->request_rate > 0 ? 0 : 1;
    int64_t loops = (int64_t)opt_f(v, nv, OPT_LOOPS);
    int64_t wall0 = host->now_ns(host);
    int64_t deadline = duration_s > 0 ? wall0 + (int64_t)(duration_s * 1e9) : 0;
    uint32_t n_sent = 0, prompt_warned = 0, held = 0;
    int64_t lag = 0, held_lag = 0; /* over the waves */
    /* One wave per turn (workload.h): turn t of every session, once turn
     * t - 1 of every session has its answer. */
    for (uint32_t turn = 0; turn < turns && st == TB_OK; turn++) {
        uint32_t base = turn * n_sessions, k = n_sessions;
        int64_t now = host->now_ns(host);
        if (turn > 0 && deadline && now >= deadline)
            break;
        st = build_wave(c, req, res, ss, turn, base, k, call_seed, extra);
        if (st != TB_OK)
            break;
        if (turn == 0 && c->tok && !ss && !req->prompt_text)
            for (uint32_t r = 0; r < k && !prompt_warned; r++)
                if (c->prompt_counted[r] != req->prompt_tokens) {
                    host->log(host, TB_LOG_WARN, "request %u: a %lld-token prompt (asked for %u): this vocabulary "
                              "has too few one-token words", r, (long long)c->prompt_counted[r], req->prompt_tokens);
                    prompt_warned = 1;
                }
        const int64_t *offsets = NULL;
        if (req->request_rate > 0) {
            tb_arrivals_schedule(tb_arrivals_seed(req->seed, req->repetition, req->is_warmup, req->request_rate, turn),
                                 req->request_rate, opt_f(v, nv, OPT_BURSTINESS), k, c->offsets + base);
            offsets = c->offsets + base;
            /* a duration: the sends due after it are not made (the
             * schedule rises; the first is due at once) */
            if (deadline)
                while (k > 1 && now + offsets[k - 1] >= deadline)
                    k--;
        }
        t.send_until_ns = deadline;
        t.first_request = base;
        st = tb_http_client_run(c->client, &t, k, c->bodies + base, offsets, inflight,
                                loops ? (uint32_t)loops : (uint32_t)tb_http_usable_cores(), c->results + base);
        report_client_cpu(c, base, k, res);
        int64_t wave_held_lag = 0;
        held += tb_http_client_held(c->client, &wave_held_lag);
        if (wave_held_lag > held_lag)
            held_lag = wave_held_lag;
        if (tb_http_client_max_lag(c->client) > lag)
            lag = tb_http_client_max_lag(c->client);
        /* closed loop under a duration: the client stops sending at the
         * deadline; what it never sent has no submit time */
        uint32_t sent = 0;
        while (sent < k && c->results[base + sent].t_submit_ns)
            sent++;
        for (uint32_t i = 0; i < k; i++) { /* the answers outlive the client's next run */
            const tb_http_result *h = &c->results[base + i];
            free(c->answers[base + i]);
            c->answers[base + i] = strndup(h->text ? h->text : "", h->text_len);
            if (!c->answers[base + i] && st == TB_OK) {
                st = TB_ERR_NO_MEMORY;
                set_error(c, "out of memory keeping the answers");
            }
            if (ss && turn + 1 < turns && c->answers[base + i]) {
                ss[i].answer[turn] = strdup(c->answers[base + i]);
                if (!ss[i].answer[turn] && st == TB_OK) {
                    st = TB_ERR_NO_MEMORY;
                    set_error(c, "out of memory keeping the answers");
                }
            }
        }
        n_sent = base + sent;
        if (sent < n_sessions)
            break; /* the duration ended inside this wave */
    }
    free(url);
    cJSON_Delete(extra);
    if (n_sent == 0 && st == TB_OK)
        n_sent = 1; /* not reached: the first send is due at once */
    if (st == TB_OK)
        st = count_prompts(c, res, ss, n_sessions, n_sent);

    uint32_t no_usage = 0, prompt_diff_req = UINT32_MAX;
    for (uint32_t r = 0; r < n_sent && st != TB_ERR_NO_MEMORY; r++) {
        const tb_http_result *h = &c->results[r];
        tb_request_result *q = &res->requests[r];
        q->t_submit_ns = h->t_submit_ns;
        q->t_done_ns = h->t_done_ns;
        q->status = h->status;
        q->output_text = c->answers[r];
        if (h->usage_completion_tokens >= 0) {
            q->n_output_tokens = (uint32_t)h->usage_completion_tokens;
        } else if (stream) {
            q->n_output_tokens = h->chunks;
        } else if (c->tok) {
            int64_t k = tb_tokenizer_encode(c->tok, c->answers[r], strlen(c->answers[r]), NULL, 0);
            q->n_output_tokens = k > 0 ? (uint32_t)k : 0;
            if (k == TB_TOKENIZER_NO_MEMORY && q->status == TB_OK) { /* 0 would pass for a count */
                q->status = TB_ERR_NO_MEMORY;
                snprintf(q->error, sizeof q->error, "out of memory counting the output tokens");
            }
        }
        if (h->status != TB_OK)
            set_request_error(host, r, q, h->error);
        else if (h->usage_completion_tokens < 0)
            no_usage++;
        if (TB_STRUCT_HAS(res, tb_result, draft_ns) && res->spec)
            spec_from_server(&h->spec, &res->spec[r]);
        if (h->status == TB_OK && !chat && c->prompt_counted[r] >= 0 && c->tok && h->usage_prompt_tokens >= 0 &&
            h->usage_prompt_tokens != c->prompt_counted[r] && prompt_diff_req == UINT32_MAX)
            prompt_diff_req = r;
    }
    tb_sessions_free(ss, n_sessions);
    if (TB_STRUCT_HAS(res, tb_result, n_unsent))
        res->n_unsent = n - n_sent;
    else if (n_sent < n && st == TB_OK) {
        set_error(c, "duration: this host cannot take a call that sends fewer requests than it was given");
        st = TB_ERR_UNSUPPORTED;
    }
    if (no_usage)
        host->log(host, TB_LOG_WARN, "%u requests came back without usage: output_tokens counts %s", no_usage,
                  stream ? "streamed chunks (does the server honour stream_options.include_usage?)"
                         : "the re-tokenized text");
    if (prompt_diff_req != UINT32_MAX) {
        int64_t got = c->results[prompt_diff_req].usage_prompt_tokens, want = c->prompt_counted[prompt_diff_req];
        host->log(host, got == want + 1 ? TB_LOG_INFO : TB_LOG_WARN,
                  "the server counts %lld prompt tokens for a %lld-token prompt%s", (long long)got, (long long)want,
                  got == want + 1 ? " (it adds a BOS token)" : ": is `tokenizer` the server's?");
    }
    /* Late sends (docs/METRICS.md, "Submit time"): the ones the cap held
     * are the load's doing, the others the client's. */
    if (req->request_rate > 0 && held && held_lag > 5000000) {
        int64_t s0 = INT64_MAX, s1 = INT64_MIN, d0 = INT64_MAX, d1 = INT64_MIN;
        for (uint32_t r = 0; r < n_sent && turns == 1; r++) {
            const tb_http_result *h = &c->results[r];
            s0 = h->t_sent_ns < s0 ? h->t_sent_ns : s0;
            s1 = h->t_sent_ns > s1 ? h->t_sent_ns : s1;
            d0 = h->t_submit_ns < d0 ? h->t_submit_ns : d0;
            d1 = h->t_submit_ns > d1 ? h->t_submit_ns : d1;
        }
        char rates[160] = "";
        if (turns == 1 && n_sent > 1 && s1 > s0 && d1 > d0)
            snprintf(rates, sizeof rates, ": they went out at %.2f requests/s, the schedule's %.2f (sent_rate) is not "
                     "what was sent", (n_sent - 1) / ((double)(s1 - s0) * 1e-9), (n_sent - 1) / ((double)(d1 - d0) * 1e-9));
        host->log(host, TB_LOG_WARN, "open loop: %u of %u sends came due with concurrency = %u requests in flight "
                  "and waited for a slot, up to %.1f ms behind schedule (inside the measured latencies): the "
                  "concurrency cap held the sends back from request_rate = %g%s", held, n_sent, req->concurrency,
                  (double)held_lag * 1e-6, req->request_rate, rates);
    }
    if (req->request_rate > 0 && lag > 5000000)
        host->log(host, TB_LOG_WARN, "open loop: %s ran up to %.1f ms behind schedule (inside the measured "
                  "latencies): the client is near its ceiling", held ? "the sends the cap did not hold" : "sends",
                  (double)lag * 1e-6);
    res->prefill_ns = -1;
    res->decode_ns = -1;
    res->forward_passes = 0;
    res->peak_device_bytes = -1;
    res->energy_mj = -1;
    if (st == TB_ERR_CANCELLED)
        set_error(c, "cancelled while requests were in flight");
    else if (st != TB_OK && !c->error[0])
        set_error(c, "the event loop failed (%d)", (int)st);
    return st;
}

static const char *http_last_error(void *ctx)
{
    return ((http_ctx *)ctx)->error;
}

static const char *http_describe(void *ctx)
{
    return ((http_ctx *)ctx)->describe_json;
}

static int64_t http_tokenize(void *ctx, const char *text, int32_t *ids, size_t cap)
{
    http_ctx *c = ctx;
    if (!c->tok) {
        set_error(c, "no tokenizer: set tokenizer = the model's tokenizer.json");
        return -1;
    }
    int64_t n = tb_tokenizer_encode(c->tok, text, strlen(text), ids, cap);
    if (n < 0)
        set_error(c, "%s", n == TB_TOKENIZER_NO_MEMORY ? "tokenize: out of memory" : "the tokenizer failed");
    return n < 0 ? -1 : n;
}

static int64_t http_detokenize(void *ctx, const int32_t *ids, size_t n, char *out, size_t cap)
{
    http_ctx *c = ctx;
    if (!c->tok) {
        set_error(c, "no tokenizer: set tokenizer = the model's tokenizer.json");
        return -1;
    }
    int64_t len = tb_tokenizer_decode(c->tok, ids, n, out, cap);
    if (len < 0)
        set_error(c, "%s", len == TB_TOKENIZER_NO_MEMORY ? "detokenize: out of memory" : "detokenize: an id outside the vocabulary");
    return len < 0 ? -1 : len;
}

static const tb_backend_ops http_ops = {
    .abi_major = TB_ABI_MAJOR,
    .struct_size = sizeof(tb_backend_ops),
    .name = "http",
    .version = HTTP_VERSION,
    .description = "any OpenAI-compatible server: /v1/completions or /v1/chat/completions, streamed, closed or "
                   "open loop",
    .capabilities = TB_CAP_CONCURRENCY | TB_CAP_REQUEST_RATE | TB_CAP_STREAMING | TB_CAP_TOKENIZER,
    .options = http_options,
    .n_options = N_OPTS,
    .probe = NULL,
    .create = http_create,
    .destroy = http_destroy,
    .generate = http_generate,
    .last_error = http_last_error,
    .describe = http_describe,
    .tokenize = http_tokenize,
    .detokenize = http_detokenize,
    .validate = http_validate,
};

__attribute__((visibility("default"))) const tb_backend_ops *tokbench_backend_entry(void);
__attribute__((visibility("default"))) const tb_backend_ops *tokbench_backend_entry(void)
{
    return &http_ops;
}
