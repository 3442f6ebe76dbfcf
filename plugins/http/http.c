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
 * The API key is read from the environment variable `api_key_env` names,
 * at create(); it lives only in this process's memory (the request
 * headers), never in describe(), logs or the database. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <stdarg.h>
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
#include "tokenizer.h"

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
    OPT_LOOPS,
    N_OPTS
};

static const tb_option_decl http_options[N_OPTS] = {
    [OPT_URL] = {"url", TB_OPT_STRING, "http://127.0.0.1:8000",
                 "server base URL; /v1/completions or /v1/chat/completions is appended (after /v1 if the URL "
                 "ends there)",
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
    [OPT_LOOPS] = {"loops", TB_OPT_INT, "1",
                   "client event loops, each a thread of its own (0: one per CPU this process may run on); "
                   "requests are spread across them, on one clock",
                   NULL, 0, 256, 0},
};

typedef struct http_ctx {
    const tb_host *host;
    char *model;               /* the backend's model = */
    tb_tokenizer *tok;         /* NULL without `tokenizer` */
    tb_prompt_vocab *vocab;
    tb_http_client *client;
    struct curl_slist *headers; /* holds the API key: wiped on destroy */
    char *describe_json;
    /* the last call's requests (output text lives in the client) */
    tb_http_result *results;
    char **bodies;
    int64_t *offsets, *prompt_counted;
    uint32_t n_cap;
    char error[512];
} http_ctx;

static void set_error(http_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_error(http_ctx *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->error, sizeof c->error, fmt, ap);
    va_end(ap);
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
    if (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0) {
        snprintf(why, size, "url \"%s\": expected http://HOST[:PORT][/PATH] or https://...", url);
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

static tb_status http_validate(const tb_request *req, char *why, size_t why_size)
{
    check_options(req->options, req->n_options, why, why_size);
    if (why[0])
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
    tb_prompt_vocab_free(c->vocab);
    tb_tokenizer_free(c->tok);
    for (uint32_t i = 0; i < c->n_cap && c->bodies; i++)
        free(c->bodies[i]);
    free(c->bodies);
    free(c->results);
    free(c->offsets);
    free(c->prompt_counted);
    free(c->model);
    free(c->describe_json);
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
        size_t len = strlen(key) + 32;
        char *line = malloc(len);
        ok = line != NULL;
        if (line) {
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
        for (int i = 0; i < k && ok; i++)
            ok = add_header(c, lines[i]);
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
static char *make_body(const http_ctx *c, const tb_request *req, const char *prompt, const cJSON *extra)
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
    if (chat) {
        cJSON *msgs = cJSON_AddArrayToObject(o, "messages"), *m = cJSON_CreateObject();
        ok &= cJSON_AddStringToObject(m, "role", "user") != NULL;
        ok &= cJSON_AddStringToObject(m, "content", prompt) != NULL;
        if (!cJSON_AddItemToArray(msgs, m)) {
            cJSON_Delete(m);
            ok = 0;
        }
    } else {
        ok &= cJSON_AddStringToObject(o, "prompt", prompt) != NULL;
    }
    ok &= cJSON_AddNumberToObject(o, "max_tokens", req->max_new_tokens) != NULL;
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
    for (uint32_t i = 0; i < c->n_cap; i++)
        free(c->bodies[i]);
    free(c->bodies);
    free(c->results);
    free(c->offsets);
    free(c->prompt_counted);
    c->bodies = calloc(n, sizeof *c->bodies);
    c->results = calloc(n, sizeof *c->results);
    c->offsets = calloc(n, sizeof *c->offsets);
    c->prompt_counted = calloc(n, sizeof *c->prompt_counted);
    c->n_cap = n;
    if (!c->bodies || !c->results || !c->offsets || !c->prompt_counted) {
        free(c->bodies);
        c->bodies = NULL;
        c->n_cap = 0;
        set_error(c, "out of memory for %u requests", n);
        return TB_ERR_NO_MEMORY;
    }
    return TB_OK;
}

/* The client's own CPU (docs/METRICS.md, client_busy) into the result,
 * and its cost per streamed chunk logged with TOKBENCH_DEBUG=1
 * (docs/PERFORMANCE.md). */
static void report_client_cpu(http_ctx *c, uint32_t n, tb_result *res)
{
    const tb_http_cpu *u = tb_http_client_cpu(c->client);
    uint64_t chunks = 0;
    for (uint32_t r = 0; r < n; r++)
        chunks += c->results[r].chunks;
    double busy = u->busiest_loop > u->process_share ? u->busiest_loop : u->process_share;
    if (TB_STRUCT_HAS(res, tb_result, client_busy))
        res->client_busy = busy > 0 ? busy : 0;
    double cpu = (double)u->loops_cpu_ns * 1e-9, wall = (double)u->wall_ns * 1e-9;
    c->host->log(c->host, TB_LOG_DEBUG,
                 "client: %u requests, %llu chunks, %u loops, %.3f s loop CPU in %.3f s (busiest loop %.0f%%, "
                 "process %.2f of %d cores, %.2f us per chunk)",
                 n, (unsigned long long)chunks, u->loops, cpu, wall, 100.0 * u->busiest_loop,
                 (double)u->process_cpu_ns * 1e-9 / (wall > 0 ? wall : 1), u->cores,
                 chunks ? cpu * 1e6 / (double)chunks : 0.0);
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
    int chat = strcmp(opt_s(v, nv, OPT_ENDPOINT), "chat") == 0, stream = opt_b(v, nv, OPT_STREAM);
    int unique = opt_b(v, nv, OPT_UNIQUE_PROMPTS);
    uint64_t call_seed = unique ? mix(mix(req->seed, req->repetition), req->is_warmup ? 0xAA : 0x55) : req->seed;

    /* Everything before the first send: bodies and the schedule. */
    const char *extra_text = opt_s(v, nv, OPT_EXTRA_JSON);
    cJSON *extra = tb_http_extra_json(extra_text);
    if (*extra_text && !extra) { /* checked at load: NULL here is memory */
        set_error(c, "out of memory parsing extra_json");
        return TB_ERR_NO_MEMORY;
    }
    for (uint32_t r = 0; r < n; r++) {
        free(c->bodies[r]);
        c->bodies[r] = NULL;
        char *synth = NULL;
        const char *prompt;
        c->prompt_counted[r] = -1;
        if (req->prompt_text) {
            prompt = req->prompt_text[r];
        } else {
            synth = tb_prompt_synth(c->vocab, req->prompt_tokens, mix(call_seed, r), &c->prompt_counted[r]);
            prompt = synth;
        }
        c->bodies[r] = prompt ? make_body(c, req, prompt, extra) : NULL;
        /* Synthetic prompts are this plugin's own (with unique_prompts, a
         * new one every repetition): say which, so that the host compares
         * outputs of the same prompt only. */
        if (synth && TB_STRUCT_HAS(res, tb_result, prompt_hash) && res->prompt_hash)
            res->prompt_hash[r] = text_hash(synth);
        free(synth);
        if (!c->bodies[r]) {
            cJSON_Delete(extra);
            set_error(c, "out of memory building request %u", r);
            return TB_ERR_NO_MEMORY;
        }
    }
    cJSON_Delete(extra);
    if (c->tok)
        for (uint32_t r = 0; r < n && !req->prompt_text; r++)
            if (c->prompt_counted[r] != req->prompt_tokens) {
                host->log(host, TB_LOG_WARN, "request %u: a %lld-token prompt (asked for %u): this vocabulary has "
                          "too few one-token words", r, (long long)c->prompt_counted[r], req->prompt_tokens);
                break;
            }
    const int64_t *offsets = NULL;
    if (req->request_rate > 0) {
        tb_arrivals_schedule(mix(call_seed, 0xA77), req->request_rate, opt_f(v, nv, OPT_BURSTINESS), n, c->offsets);
        offsets = c->offsets;
    }
    char *url = endpoint_url(opt_s(v, nv, OPT_URL), chat);
    if (!url) {
        set_error(c, "out of memory");
        return TB_ERR_NO_MEMORY;
    }
    tb_http_target t = {
        .url = url,
        .headers = c->headers,
        .stream = stream,
        .connect_timeout_ms = (long)(opt_f(v, nv, OPT_CONNECT_TIMEOUT) * 1000 + 0.5),
        .timeout_ms = (long)(opt_f(v, nv, OPT_TIMEOUT) * 1000 + 0.5),
        .max_response_bytes = (size_t)(opt_f(v, nv, OPT_MAX_RESPONSE_MB) * 1048576.0),
        .max_chunks = req->max_new_tokens <= (UINT32_MAX - 16) / 4 ? 4 * req->max_new_tokens + 16 : 0,
        /* the same slack for the server's count of the tokens; past
         * 32 bits the parser refuses it (TB_OAI_MAX_COUNT) */
        .max_usage_tokens = req->max_new_tokens <= (UINT32_MAX - 16) / 4 ? 4 * req->max_new_tokens + 16 : 0,
    };
    uint32_t inflight = req->concurrency ? req->concurrency : offsets ? 0 : 1;
    int64_t loops = (int64_t)opt_f(v, nv, OPT_LOOPS);
    st = tb_http_client_run(c->client, &t, n, c->bodies, offsets, inflight,
                            loops ? (uint32_t)loops : (uint32_t)tb_http_usable_cores(), c->results);
    free(url);
    report_client_cpu(c, n, res);

    uint32_t no_usage = 0, prompt_diff_req = UINT32_MAX;
    for (uint32_t r = 0; r < n; r++) {
        const tb_http_result *h = &c->results[r];
        tb_request_result *q = &res->requests[r];
        q->t_submit_ns = h->t_submit_ns;
        q->t_done_ns = h->t_done_ns;
        q->status = h->status;
        q->output_text = h->text;
        if (h->usage_completion_tokens >= 0) {
            q->n_output_tokens = (uint32_t)h->usage_completion_tokens;
        } else if (stream) {
            q->n_output_tokens = h->chunks;
        } else if (c->tok) {
            int64_t k = tb_tokenizer_encode(c->tok, h->text, h->text_len, NULL, 0);
            q->n_output_tokens = k > 0 ? (uint32_t)k : 0;
            if (k == TB_TOKENIZER_NO_MEMORY && q->status == TB_OK) { /* 0 would pass for a count */
                q->status = TB_ERR_NO_MEMORY;
                snprintf(q->error, sizeof q->error, "out of memory counting the output tokens");
            }
        }
        if (h->status != TB_OK)
            snprintf(q->error, sizeof q->error, "%s", h->error);
        else if (h->usage_completion_tokens < 0)
            no_usage++;
        if (h->status == TB_OK && !chat && c->prompt_counted[r] >= 0 && c->tok && h->usage_prompt_tokens >= 0 &&
            h->usage_prompt_tokens != c->prompt_counted[r] && prompt_diff_req == UINT32_MAX)
            prompt_diff_req = r;
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
    int64_t lag = tb_http_client_max_lag(c->client);
    if (offsets && lag > 5000000)
        host->log(host, TB_LOG_WARN, "open loop: sends ran up to %.1f ms behind schedule (inside the measured "
                  "latencies): the client is near its ceiling", (double)lag * 1e-6);
    res->prefill_ns = -1;
    res->decode_ns = -1;
    res->forward_passes = 0;
    res->peak_device_bytes = -1;
    res->energy_mj = -1;
    if (st == TB_ERR_CANCELLED)
        set_error(c, "cancelled while requests were in flight");
    else if (st != TB_OK)
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
