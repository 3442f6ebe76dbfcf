/* bench.c — `tokbench bench`: a suite made from options, then run.
 *
 * The options become an ordinary INI suite, written with the keys a
 * suite already has ([suite], [matrix], one [backend] of plugins/http or
 * of the engine), so that what ran can be kept, edited and run again
 * with `tokbench run`. The suite is run by cmd_run itself: one code path
 * for every run, which stores the suite's text with the session.
 *
 * Every value the user gives is checked here and refused with its option
 * named; a value is written only when the line `key = value` reads back
 * as exactly that value (bench_put): nothing a user types can start a
 * line, a section or a comment, or reach the suite's ${VAR} expansion. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <ini.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "suite.h"
#include "url.h"
#include "utf8.h"
#include "util.h"

/* The longest line inih reads whole (suite.c reports longer ones). */
#define LINE_MAX_CHARS (INI_MAX_LINE - 2)

typedef struct bench {
    const cli_args *c;
    tb_str errs;   /* one line per refused value */
    tb_str suite;  /* [suite] keys */
    tb_str matrix; /* [matrix] keys */
    tb_str backend; /* the backend's keys */
} bench;

static void refuse(bench *b, const char *flag, const char *value, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* "tokbench bench: --flag "value": why" (the value quoted, its control
 * characters escaped: a newline in it shows as one). */
static void refuse(bench *b, const char *flag, const char *value, const char *fmt, ...)
{
    tb_str_appendf(&b->errs, "tokbench bench: --%s", flag);
    if (value) {
        tb_str_append(&b->errs, " ");
        tb_utf8_append_quoted(&b->errs, value, strlen(value), 200);
    }
    tb_str_append(&b->errs, ": ");
    va_list ap;
    va_start(ap, fmt);
    tb_str_vappendf(&b->errs, fmt, ap);
    va_end(ap);
    tb_str_append(&b->errs, "\n");
}

/* Whether `key = v` is one line of the suite that reads back as exactly
 * v (suite.c, inih): no control character (a newline would start a line
 * of its own: a key, a section), no ';' (inih ends a value at " ;", a
 * comment), no "${" (the suite expands it from the environment), no
 * '[' or ']' (brackets_ok: a URL's IPv6 host), no space at either end
 * (trimmed), not empty, and short enough for inih's line. */
static int value_ok(bench *b, const char *flag, const char *key, const char *v, int brackets_ok)
{
    const char *why = NULL;
    size_t n = strlen(v);
    for (size_t i = 0; i < n && !why; i++)
        if ((unsigned char)v[i] < 0x20 || v[i] == 0x7f)
            why = "contains a control character (a newline would start a line of its own in the suite)";
    if (why)
        ;
    else if (!n)
        why = "is empty";
    else if (isspace((unsigned char)v[0]) || isspace((unsigned char)v[n - 1]))
        why = "starts or ends with a space (a suite trims it)";
    else if (!tb_utf8_valid(v, n, NULL))
        why = "is not valid UTF-8";
    else if (strstr(v, "${"))
        why = "contains \"${\" (a suite reads it as an environment variable)";
    else if (strchr(v, ';'))
        why = "contains ';' (a suite reads the rest of the line as a comment)";
    else if (!brackets_ok && strpbrk(v, "[]"))
        why = "contains '[' or ']' (refused in a suite's values: a section header is \"[name]\")";
    if (why) {
        refuse(b, flag, v, "%s", why);
        return 0;
    }
    size_t line = strlen(key) + 3 + n;
    if (line > LINE_MAX_CHARS) {
        refuse(b, flag, v, "too long for a suite: the line \"%s = ...\" would have %zu characters, a suite line holds "
                           "%d",
               key, line, LINE_MAX_CHARS);
        return 0;
    }
    return 1;
}

/* Append `key = v` to a section, when v passes value_ok. */
static void put(bench *b, tb_str *sec, const char *flag, const char *key, const char *v)
{
    if (value_ok(b, flag, key, v, 0))
        tb_str_appendf(sec, "%s = %s\n", key, v);
}

/* A list of dimension values, N[,N...] (a dimension's own parser:
 * suite.h), written as typed, trimmed; each value once. */
static void put_dim_list(bench *b, const char *flag, const char *text, tb_dim d)
{
    char *copy = tb_xstrdup(text);
    tb_str out = {0};
    double *seen = NULL;
    size_t n = 0;
    int ok = 1;
    /* not strtok: "1,,2" must be an empty item */
    for (char *item = copy, *next; ok && item; item = next) {
        next = strchr(item, ',');
        if (next)
            *next++ = '\0';
        item = tb_trim(item);
        char *why = NULL;
        double v;
        ok = 0;
        if (!*item)
            refuse(b, flag, text, "an empty item (expected comma-separated values)");
        else if (tb_dim_parse_value(d, item, &v, &why) != 0)
            refuse(b, flag, text, "%s", why);
        else if (v < 0 && (n || next)) /* sweep, slo: a search, alone */
            refuse(b, flag, text, "%s is a load search: it comes alone, not in a list of rates", item);
        else
            ok = 1;
        for (size_t i = 0; ok && i < n; i++)
            if (seen[i] == v) {
                refuse(b, flag, text, "value %s is listed twice", item);
                ok = 0;
            }
        free(why);
        if (!ok)
            break;
        seen = tb_xrealloc(seen, (n + 1) * sizeof *seen);
        seen[n++] = v;
        tb_str_appendf(&out, "%s%s", out.len ? ", " : "", item);
    }
    if (ok && value_ok(b, flag, tb_dim_name(d), out.s, 0))
        tb_str_appendf(&b->matrix, "%s = %s\n", tb_dim_name(d), out.s);
    tb_str_free(&out);
    free(seen);
    free(copy);
}

/* A number as typed: finite, in [lo, hi] (integer: a whole number). */
static int number(const char *text, double lo, double hi, int integer, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || *end || errno || !isfinite(v) || v < lo || v > hi || (integer && v != floor(v)))
        return 0;
    *out = v;
    return 1;
}

/* --input-len / --output-len: N[,N...] (the dimension d), or with a
 * server DIST:MEAN:SD[:MIN:MAX], the http plugin's PREFIX_dist,
 * PREFIX_stdev, PREFIX_min and PREFIX_max around the dimension as mean. */
static void put_length(bench *b, const char *flag, const char *text, tb_dim d, const char *prefix, int server)
{
    if (!strchr(text, ':')) {
        put_dim_list(b, flag, text, d);
        return;
    }
    if (!server) {
        refuse(b, flag, text, "a distribution needs --url (the http backend draws lengths); the engine takes N[,N...]");
        return;
    }
    char *copy = tb_xstrdup(text);
    char *part[6];
    int n = 0;
    for (char *s = copy, *colon; n < 6; s = colon + 1) {
        part[n++] = s;
        if (!(colon = strchr(s, ':')))
            break;
        *colon = '\0';
    }
    static const char *const dists[] = {"uniform", "normal", "lognormal"};
    int dist = -1;
    for (int i = 0; i < 3; i++)
        if (strcmp(part[0], dists[i]) == 0)
            dist = i;
    double mean = 0, sd, lo = 1, hi = 0;
    char *why = NULL;
    if (n != 3 && n != 5)
        refuse(b, flag, text, "expected N[,N...] or DIST:MEAN:SD[:MIN:MAX] (DIST uniform, normal or lognormal)");
    else if (dist < 0)
        refuse(b, flag, text, "unknown distribution \"%s\" (expected uniform, normal or lognormal; a histogram: edit "
                              "%s_histogram into the suite from --print-suite)",
               part[0], prefix);
    else if (tb_dim_parse_value(d, part[1], &mean, &why) != 0)
        refuse(b, flag, text, "MEAN: %s", why);
    else if (!number(part[2], 0, 1e9, 0, &sd))
        refuse(b, flag, text, "SD: expected a standard deviation in tokens, a number in [0, 1e9], got \"%s\"", part[2]);
    else if (n == 5 && (!number(part[3], 1, 1e9, 1, &lo) || !number(part[4], 1, 1e9, 1, &hi) || lo > hi))
        refuse(b, flag, text, "MIN:MAX: expected whole numbers of tokens, 1 <= MIN <= MAX, got %s:%s", part[3],
               part[4]);
    else if (n == 5 && d == TB_DIM_MAX_NEW_TOKENS && hi > 4 * mean)
        refuse(b, flag, text, "MAX %s is more than 4 x MEAN (what a case's buffers are sized for)", part[4]);
    else {
        char key[32];
        put(b, &b->matrix, flag, tb_dim_name(d), part[1]);
        snprintf(key, sizeof key, "%s_dist", prefix);
        put(b, &b->backend, flag, key, dists[dist]);
        snprintf(key, sizeof key, "%s_stdev", prefix);
        put(b, &b->backend, flag, key, part[2]);
        if (n == 5) {
            snprintf(key, sizeof key, "%s_min", prefix);
            put(b, &b->backend, flag, key, part[3]);
            snprintf(key, sizeof key, "%s_max", prefix);
            put(b, &b->backend, flag, key, part[4]);
        }
    }
    free(why);
    free(copy);
}

/* --slo ttft_p99=MS[,tpot_p99=MS] (each given): the [suite] limits of
 * the slo search; have[] spans the options, so repeated ones add up and
 * a limit given twice, in one or in two, is refused. */
static void put_slo(bench *b, const char *text, int have[2])
{
    static const char *const names[] = {"ttft_p99", "tpot_p99"};
    static const char *const keys[] = {"slo_ttft_p99_ms", "slo_tpot_p99_ms"};
    char *copy = tb_xstrdup(text);
    for (char *item = copy, *next; item; item = next) {
        next = strchr(item, ',');
        if (next)
            *next++ = '\0';
        char *eq = strchr(item, '=');
        int k = -1;
        if (eq) {
            *eq = '\0';
            for (int i = 0; i < 2; i++)
                if (strcmp(tb_trim(item), names[i]) == 0)
                    k = i;
        }
        double ms;
        if (k < 0) {
            refuse(b, "slo", text, "expected ttft_p99=MS and/or tpot_p99=MS, comma-separated");
            break;
        }
        char *v = tb_trim(eq + 1);
        if (have[k]++) {
            refuse(b, "slo", text, "%s is given twice", names[k]);
            break;
        }
        if (!number(v, 0, 1e9, 0, &ms) || ms <= 0) {
            refuse(b, "slo", text, "%s: expected milliseconds > 0, got \"%s\"", names[k], v);
            break;
        }
        put(b, &b->suite, "slo", keys[k], v);
    }
    free(copy);
}

/* --header NAME:VALUE (each): the http plugin's headers, a JSON object.
 * The name is an HTTP token, the value has no control character: a
 * header is one line of the request, whatever JSON would carry. */
static void put_headers(bench *b, const cli_list *h)
{
    if (!h->n)
        return;
    cJSON *o = cJSON_CreateObject();
    int ok = 1;
    for (size_t i = 0; i < h->n && ok; i++) {
        const char *text = h->v[i];
        if (!value_ok(b, "header", "headers", text, 0)) { /* as typed: the refusal shows it */
            ok = 0;
            break;
        }
        const char *colon = strchr(text, ':');
        char *name = colon ? tb_xstrndup(text, (size_t)(colon - text)) : NULL;
        char *value = colon ? tb_xstrdup(colon + 1) : NULL;
        const char *v = value ? tb_trim(value) : NULL;
        ok = 0;
        if (!name || !*name)
            refuse(b, "header", text, "expected NAME:VALUE");
        else if (name[strspn(name, "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyz"
                                   "ABCDEFGHIJKLMNOPQRSTUVWXYZ")])
            refuse(b, "header", text, "the name \"%s\" is not an HTTP header name (letters, digits and !#$%%&'*+-.^_`|~)",
                   name);
        else if (cJSON_GetObjectItem(o, name)) /* case-insensitive, as HTTP's names */
            refuse(b, "header", text, "header %s is given twice", name);
        else {
            ok = 1;
            for (const char *p = v; *p && ok; p++)
                if (((unsigned char)*p < 0x20 && *p != '\t') || *p == 0x7f) {
                    refuse(b, "header", text, "the value contains a control character");
                    ok = 0;
                }
            if (ok)
                cJSON_AddStringToObject(o, name, v);
        }
        free(name);
        free(value);
    }
    if (ok) {
        char *json = cJSON_PrintUnformatted(o);
        if (!json) {
            fprintf(stderr, "tokbench: out of memory\n");
            abort();
        }
        put(b, &b->backend, "header", "headers", json);
        cJSON_free(json);
    }
    cJSON_Delete(o);
}

/* A file or folder the suite names, made absolute: the suite may be
 * written anywhere, and resolves relative paths against its own folder.
 * NULL after refusing. */
static char *existing_path(bench *b, const char *flag, const char *path, int want_dir)
{
    char *real = realpath(path, NULL);
    struct stat st;
    if (!real || stat(real, &st) != 0) {
        refuse(b, flag, path, "%s", strerror(errno));
        free(real);
        return NULL;
    }
    if (want_dir != !!S_ISDIR(st.st_mode)) {
        refuse(b, flag, path, "%s", want_dir ? "not a folder" : "a folder, expected a file");
        free(real);
        return NULL;
    }
    return real;
}

/* The engine plugin a model folder's config.json asks for: its
 * architectures[0], else its model_type (ignoring case), among the
 * families the engine loads (plugins/engine/format/config.c has the
 * whole table); NULL when unknown, with why in *why. */
static const char *plugin_of_folder(const char *dir, char **why)
{
    static const struct {
        const char *arch, *model_type, *plugin;
    } families[] = {
        {"LlamaForCausalLM", "llama", "ar"},
        {"Qwen2ForCausalLM", "qwen2", "ar"},
        {"Qwen3ForCausalLM", "qwen3", "ar"},
        {"Qwen3MoeForCausalLM", "qwen3_moe", "ar"},
        {"LLaDAModelLM", "llada", "diffusion"},
        {"LLaDAMoEModelLM", "lladamoe", "diffusion"},
        {"LLaDA2MoeModelLM", "llada2_moe", "diffusion"},
        {"DreamModel", "dream", "diffusion"},
        {"SDARForCausalLM", "sdar", "diffusion"},
        {"Fast_dLLM_QwenForCausalLM", "Fast_dLLM_Qwen", "diffusion"},
        {"", "LangFlow", "flow"},
        {"", "flow", "flow"},
    };
    char *path = tb_xasprintf("%s/config.json", dir);
    const char *plugin = NULL;
    cJSON *cfg = NULL;
    char *text = tb_read_file_max(path, TB_READ_MAX_CONFIG, NULL);
    if (!text) {
        char buf[160];
        *why = tb_xasprintf("%s: %s", path, tb_read_file_why(errno, TB_READ_MAX_CONFIG, "a model's JSON file", buf,
                                                             sizeof buf));
        goto out;
    }
    cfg = cJSON_Parse(text);
    const cJSON *archs = cJSON_GetObjectItemCaseSensitive(cfg, "architectures");
    const cJSON *arch = cJSON_IsArray(archs) ? cJSON_GetArrayItem(archs, 0) : NULL;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(cfg, "model_type");
    const char *a = cJSON_IsString(arch) ? arch->valuestring : "";
    const char *t = cJSON_IsString(type) ? type->valuestring : "";
    for (size_t i = 0; i < sizeof families / sizeof *families && !plugin; i++)
        if ((*a && strcmp(a, families[i].arch) == 0) || (*t && strcasecmp(t, families[i].model_type) == 0))
            plugin = families[i].plugin;
    if (!plugin)
        *why = cfg ? tb_xasprintf("%s: architectures \"%s\", model_type \"%s\": a family bench does not know", path,
                                  a, t)
                   : tb_xasprintf("%s: not JSON", path);
out:
    cJSON_Delete(cfg);
    free(text);
    free(path);
    return plugin;
}

/* The options that only a server, or only the engine, takes. */
static void refuse_other_mode(bench *b, int server)
{
    const cli_args *c = b->c;
    const struct {
        const char *flag;
        int given, server_only;
    } opts[] = {
        {"tokenizer", c->bench.tokenizer != NULL, 1},
        {"concurrency", c->bench.concurrency != NULL, 1},
        {"request-rate", c->bench.request_rate != NULL, 1},
        {"dataset", c->bench.dataset != NULL, 1},
        {"duration", !isnan(c->bench.duration), 1},
        {"slo", c->bench.slo.n > 0, 1},
        {"header", c->bench.headers.n > 0, 1},
        {"api-key-env", c->bench.api_key_env != NULL, 1},
        {"requests", c->bench.requests > 0, 1},
        {"plugin", c->bench.plugin != NULL, 0},
        {"batch", c->bench.batch != NULL, 0},
        {"steps", c->bench.steps != NULL, 0},
    };
    for (size_t i = 0; i < sizeof opts / sizeof *opts; i++)
        if (opts[i].given && opts[i].server_only != server)
            refuse(b, opts[i].flag, NULL, "%s",
                   server ? "applies to the engine only (without --url); a server's load is --concurrency or "
                            "--request-rate"
                          : "applies to a server only (--url)");
}

/* The server's backend: plugins/http. */
static void server_suite(bench *b)
{
    const cli_args *c = b->c;
    const char *url = c->bench.url;
    char why[200];
    int credentials = 0;
    char *shown = tb_xredact(url, NULL, 0); /* refusals never quote a password */
    if (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0)
        refuse(b, "url", shown, "expected an http:// or https:// URL");
    else if (value_ok(b, "url", "url", shown, 1)) {
        if (tb_url_check(url, &credentials, why, sizeof why) != 0)
            refuse(b, "url", shown, "%s", why);
        /* The suite is a file next to the database, kept to run again:
         * a password would sit in it in plain text (and a redacted one
         * would not run). */
        else if (credentials)
            refuse(b, "url", shown, "holds credentials (USER:PASS@), which the suite file would keep in plain text: "
                                    "give a key with --api-key-env VAR (sent as Bearer), or write a suite with "
                                    "url = http://USER:${VAR}@HOST (the password from the environment) and "
                                    "`tokbench run` it");
        else
            tb_str_appendf(&b->backend, "url = %s\n", url);
    }
    free(shown);
    if (c->bench.model)
        put(b, &b->backend, "model", "model_name", c->bench.model);
    if (c->bench.tokenizer) {
        char *p = existing_path(b, "tokenizer", c->bench.tokenizer, 0);
        if (p)
            put(b, &b->backend, "tokenizer", "tokenizer", p);
        free(p);
    }
    if (c->bench.api_key_env) {
        const char *v = c->bench.api_key_env;
        if (!(isalpha((unsigned char)v[0]) || v[0] == '_') ||
            v[strspn(v, "_0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")])
            refuse(b, "api-key-env", v, "expected an environment variable's name (letters, digits and _)");
        else
            put(b, &b->backend, "api-key-env", "api_key_env", v);
    }
    put_headers(b, &c->bench.headers);

    /* the load: closed loops, open loops or a search */
    const char *rate = c->bench.request_rate;
    int search = 0;
    char rate_word[8] = "";
    if (rate) {
        char *copy = tb_xstrdup(rate);
        char *t = tb_trim(copy);
        if (strcmp(t, "sweep") == 0 || strcmp(t, "slo") == 0) {
            search = 1;
            snprintf(rate_word, sizeof rate_word, "%s", t);
        }
        free(copy);
    } else if (c->bench.slo.n) {
        rate = "slo"; /* limits ask for the highest rate within them */
        search = 1;
        snprintf(rate_word, sizeof rate_word, "slo");
    }
    if (c->bench.slo.n && strcmp(rate_word, "slo") != 0)
        refuse(b, "slo", c->bench.slo.v[0], "the limits are the slo search's: give --request-rate slo, or no "
                                            "--request-rate");
    if (strcmp(rate_word, "slo") == 0 && !c->bench.slo.n)
        refuse(b, "request-rate", rate, "slo searches for the highest rate within limits: give --slo ttft_p99=MS "
                                        "and/or tpot_p99=MS");
    if (search && c->bench.concurrency)
        refuse(b, "concurrency", c->bench.concurrency, "a load search (--request-rate %s) runs its own loads: "
                                                       "concurrency 1, all requests at once, then open loops",
               rate_word);
    if (!isnan(c->bench.duration) && !rate)
        refuse(b, "duration", NULL, "sizes open loops: give --request-rate R[,R...], sweep or slo");
    int slo_have[2] = {0, 0};
    for (size_t i = 0; i < c->bench.slo.n; i++)
        put_slo(b, c->bench.slo.v[i], slo_have);
    /* --requests sizes every load, open loops too (docs/METRICS.md, "The
     * length of an open-loop load"): --duration would be ignored */
    if (!isnan(c->bench.duration) && c->bench.requests > 0)
        refuse(b, "duration", NULL, "--requests %ld sizes every load, open loops too, so the duration would be "
                                    "ignored: give one of them",
               c->bench.requests);
    if (!isnan(c->bench.duration))
        tb_str_appendf(&b->suite, "open_loop_duration = %.17g\n", c->bench.duration);
    if (c->bench.concurrency)
        put_dim_list(b, "concurrency", c->bench.concurrency, TB_DIM_CONCURRENCY);
    else if (!rate)
        tb_str_append(&b->matrix, "concurrency = 1, 8, 32\n");
    if (rate)
        put_dim_list(b, "request-rate", rate, TB_DIM_REQUEST_RATE);
    if (c->bench.requests > 0)
        tb_str_appendf(&b->matrix, "requests = %ld\n", c->bench.requests);

    /* what each request sends */
    if (c->bench.dataset) {
        if (c->bench.input_len)
            refuse(b, "input-len", c->bench.input_len, "the prompts are --dataset's user turns");
        char *p = existing_path(b, "dataset", c->bench.dataset, 0);
        if (p)
            put(b, &b->backend, "dataset", "dataset", p);
        free(p);
        /* without a tokenizer the answers cannot be counted in tokens */
        if (c->bench.output_len || !c->bench.tokenizer)
            tb_str_append(&b->backend, "dataset_output = dist\n");
    } else {
        put_length(b, "input-len", c->bench.input_len ? c->bench.input_len : "512", TB_DIM_PROMPT_TOKENS, "prompt",
                   1);
    }
    put_length(b, "output-len", c->bench.output_len ? c->bench.output_len : "128", TB_DIM_MAX_NEW_TOKENS, "output",
               1);
}

/* The engine's backend: plugin ar, diffusion or flow on a folder or a
 * preset. Returns the plugin's name (the backend's label), or NULL. */
static const char *engine_suite(bench *b)
{
    const cli_args *c = b->c;
    const char *model = c->bench.model;
    const char *plugin = c->bench.plugin;
    if (strncmp(model, "preset:", 7) == 0) {
        const char *name = model + 7;
        if (!*name || name[strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789._-")])
            refuse(b, "model", model, "expected preset:NAME, NAME of lower-case letters, digits, '.', '_' and '-'");
        else if (!plugin)
            refuse(b, "plugin", NULL, "is required with a preset (%s): ar, diffusion or flow", model);
        else
            tb_str_appendf(&b->backend, "model = %s\n", model);
    } else {
        char *dir = existing_path(b, "model", model, 1);
        char *why = NULL;
        const char *inferred = dir ? plugin_of_folder(dir, &why) : NULL;
        if (dir && !plugin && !inferred)
            refuse(b, "plugin", NULL, "is required: %s", why);
        if (dir)
            put(b, &b->backend, "model", "model", dir);
        if (!plugin)
            plugin = inferred;
        free(why);
        free(dir);
    }
    tb_str_append(&b->backend, "device = auto\n"); /* the GPU when this build and host have one */
    if (c->bench.batch)
        put_dim_list(b, "batch", c->bench.batch, TB_DIM_BATCH);
    if (plugin && strcmp(plugin, "ar") == 0 && c->bench.steps)
        refuse(b, "steps", c->bench.steps, "the ar plugin has no steps (one forward a token)");
    else if (c->bench.steps)
        put_dim_list(b, "steps", c->bench.steps, TB_DIM_STEPS);
    else if (plugin && strcmp(plugin, "flow") == 0)
        refuse(b, "steps", NULL, "is required with the flow plugin: its Euler steps, e.g. --steps 16");
    put_length(b, "input-len", c->bench.input_len ? c->bench.input_len : "512", TB_DIM_PROMPT_TOKENS, "prompt", 0);
    put_length(b, "output-len", c->bench.output_len ? c->bench.output_len : "128", TB_DIM_MAX_NEW_TOKENS, "output",
               0);
    return plugin;
}

/* The suite's text, or NULL with every refusal in *errs. */
static char *bench_suite(const cli_args *c, char **errs)
{
    bench b = {.c = c};
    int server = c->bench.url != NULL;
    const char *label = "server", *plugin = "http";
    if (!server && !c->bench.model) {
        tb_str_append(&b.errs, "tokbench bench: give --url URL (a server) or --model FOLDER|preset:NAME (the engine)\n");
    } else {
        refuse_other_mode(&b, server);
        if (server)
            server_suite(&b);
        else
            label = plugin = engine_suite(&b);
    }
    char *text = NULL;
    if (!b.errs.len) {
        tb_str s = {0};
        tb_str_appendf(&s, "; Made by `tokbench bench` (%s). An ordinary suite: edit it, run it with `tokbench run`.\n",
                       server ? "a server, plugins/http" : "tokbench's engine");
        tb_str_appendf(&s, "[suite]\nname = bench\nwarmup = 1\nrepeat = %ld\n%s", c->bench.repeat,
                       b.suite.len ? b.suite.s : "");
        tb_str_appendf(&s, "\n[matrix]\n%s", b.matrix.s);
        tb_str_appendf(&s, "\n[backend %s]\nplugin = %s\n%s", label, plugin, b.backend.s ? b.backend.s : "");
        text = tb_str_take(&s);
    }
    *errs = b.errs.len ? tb_str_take(&b.errs) : NULL;
    tb_str_free(&b.errs);
    tb_str_free(&b.suite);
    tb_str_free(&b.matrix);
    tb_str_free(&b.backend);
    return text;
}

/* Write the suite next to the database, as bench-YYYYMMDD-HHMMSS.ini
 * (-2, -3... when taken): the session stores its path, and `tokbench
 * run` runs it again. Returns the path, or NULL after saying why. */
static char *write_suite(const char *db, const char *text)
{
    const char *slash = strrchr(db, '/');
    char *named = slash ? tb_xstrndup(db, (size_t)(slash - db) + (slash == db)) : tb_xstrdup(".");
    char *dir = realpath(named, NULL); /* the session stores the suite's path: one that holds anywhere */
    if (!dir) {
        fprintf(stderr, "tokbench bench: %s (the database's folder): %s\n", named, strerror(errno));
        free(named);
        return NULL;
    }
    free(named);
    char stamp[32];
    time_t now = time(NULL);
    struct tm tm;
    strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", localtime_r(&now, &tm));
    char *path = NULL;
    int fd = -1;
    for (int k = 1; k < 100 && fd < 0; k++) {
        free(path);
        path = k == 1 ? tb_xasprintf("%s/bench-%s.ini", dir, stamp) : tb_xasprintf("%s/bench-%s-%d.ini", dir, stamp, k);
        fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0 && errno != EEXIST)
            break;
    }
    free(dir);
    size_t n = strlen(text), done = 0;
    while (fd >= 0 && done < n) {
        ssize_t w = write(fd, text + done, n - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        done += (size_t)w;
    }
    if (fd < 0 || done < n || close(fd) != 0) {
        fprintf(stderr, "tokbench bench: cannot write the suite %s (next to the database): %s\n", path,
                strerror(errno));
        if (fd >= 0)
            unlink(path);
        free(path);
        return NULL;
    }
    return path;
}

int cmd_bench(const cli_command *cmd, const cli_args *c, const char *cmdline)
{
    if (c->n_pos != 0) {
        cli_usage(cmd, stderr);
        return 2;
    }
    char *errs = NULL;
    char *text = bench_suite(c, &errs);
    if (!text) {
        fputs(errs, stderr);
        free(errs);
        return 2;
    }
    if (c->bench.print_suite) {
        fputs(text, stdout);
        free(text);
        return fflush(stdout) == 0 ? 0 : 1;
    }
    char *path = write_suite(c->db, text);
    free(text);
    if (!path)
        return 1;
    fprintf(stderr, "tokbench: suite %s (`tokbench run %s` runs it again)\n", path, path);
    /* run's own path: the same checks, store and report as any suite */
    cli_args ra = *c;
    char *pos[2] = {path, NULL};
    ra.pos = pos;
    ra.n_pos = 1;
    ra.dry_run = 0;
    ra.filters = (cli_list){0};
    ra.shard_k = ra.shard_n = 0;
    ra.start_at = -1;
    ra.start_at_text = NULL;
    int rc = cmd_run(cli_command_find("run"), &ra, cmdline);
    free(path);
    return rc;
}
