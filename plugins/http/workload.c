/* workload.c — see workload.h. */
#define _GNU_SOURCE
#include "workload.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "strmem.h"
#include "utf8_valid.h"

const char *const tb_len_kind_names[TB_N_LEN_KINDS] = {"fixed", "uniform", "normal", "lognormal", "histogram"};

tb_len_kind tb_len_kind_from_name(const char *name)
{
    for (int k = 0; k < TB_N_LEN_KINDS; k++)
        if (strcmp(name, tb_len_kind_names[k]) == 0)
            return (tb_len_kind)k;
    return TB_N_LEN_KINDS;
}

static void msg(char *err, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void msg(char *err, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, size, fmt, ap);
    va_end(ap);
}

/* A whole file, at most TB_WL_MAX_FILE bytes. NULL with err set. */
static char *read_bounded(const char *path, const char *what, char *err, size_t size)
{
    char why[160];
    char *text = tb_read_file_max(path, TB_WL_MAX_FILE, NULL);
    if (!text)
        msg(err, size, "%s %s: %s", what, path, tb_read_file_why(errno, TB_WL_MAX_FILE, "a workload file", why, sizeof why));
    return text;
}

/* ------------------------------------------------ histograms */

void tb_len_hist_free(tb_len_hist *h)
{
    if (!h)
        return;
    free(h->lo);
    free(h->hi);
    free(h->cum);
    free(h);
}

/* An unsigned length at *p (advanced): 1 .. 2^31; 0 when not one. */
static uint32_t parse_len(const char **p)
{
    const char *s = *p;
    if (!isdigit((unsigned char)*s))
        return 0;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || v < 1 || v > (1ull << 31))
        return 0;
    *p = end;
    return (uint32_t)v;
}

int tb_len_hist_parse(const char *name, const char *text, tb_len_hist **out, char *err, size_t size)
{
    *out = NULL;
    tb_len_hist *h = calloc(1, sizeof *h);
    size_t cap = 0;
    double total = 0;
    if (!h)
        goto nomem;
    size_t line = 0;
    for (const char *p = text; *p;) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        line++;
        char buf[256];
        if (len >= sizeof buf) {
            msg(err, size, "%s:%zu: a line over %zu bytes: expected \"TOKENS WEIGHT\" or \"LO-HI WEIGHT\"", name, line,
                sizeof buf - 1);
            goto fail;
        }
        memcpy(buf, p, len);
        buf[len] = '\0';
        p = eol ? eol + 1 : p + len;
        char *hash = strchr(buf, '#');
        if (hash)
            *hash = '\0';
        const char *s = tb_trim(buf);
        if (!*s)
            continue;
        const char *at = s;
        uint32_t lo = parse_len(&at), hi = lo;
        if (lo && *at == '-') {
            at++;
            hi = parse_len(&at);
        }
        if (!lo || !hi || hi < lo || !isspace((unsigned char)*at)) {
            msg(err, size, "%s:%zu: bin \"%.40s\": expected a length TOKENS or a range LO-HI (1 <= LO <= HI <= 2^31) "
                "then a weight", name, line, s);
            goto fail;
        }
        char *end;
        errno = 0;
        double wgt = strtod(at, &end);
        while (isspace((unsigned char)*end))
            end++;
        /* a subnormal weight is a number: strtod's ERANGE for underflow
         * is no error (an overflow is infinite, refused below) */
        if (end == at || *end || (errno && !(errno == ERANGE && fabs(wgt) <= DBL_MIN)) || !isfinite(wgt) ||
            wgt < 0) {
            msg(err, size, "%s:%zu: weight \"%.40s\": expected a number >= 0", name, line, tb_trim((char *)at));
            goto fail;
        }
        if (h->n == cap) {
            size_t nc = cap ? 2 * cap : 16;
            uint32_t *nlo = tb_realloc_array(h->lo, nc, sizeof *nlo);
            if (nlo)
                h->lo = nlo;
            uint32_t *nhi = tb_realloc_array(h->hi, nc, sizeof *nhi);
            if (nhi)
                h->hi = nhi;
            double *nc_ = tb_realloc_array(h->cum, nc, sizeof *nc_);
            if (nc_)
                h->cum = nc_;
            if (!nlo || !nhi || !nc_)
                goto nomem;
            cap = nc;
        }
        total += wgt;
        if (!isfinite(total)) { /* else every draw lands in the last bin */
            msg(err, size, "%s:%zu: the weights add up past the largest number a double holds (%g): scale them down",
                name, line, DBL_MAX);
            goto fail;
        }
        h->lo[h->n] = lo;
        h->hi[h->n] = hi;
        h->cum[h->n] = total;
        h->n++;
    }
    if (total <= 0) {
        msg(err, size, "%s: no bin with a positive weight: expected lines \"TOKENS WEIGHT\" or \"LO-HI WEIGHT\"", name);
        goto fail;
    }
    /* by shares of the total, which cannot overflow */
    h->mean = 0;
    for (size_t i = 0; i < h->n; i++)
        h->mean += (h->cum[i] - (i ? h->cum[i - 1] : 0)) / total * (((double)h->lo[i] + h->hi[i]) / 2);
    *out = h;
    return 0;
nomem:
    msg(err, size, "%s: out of memory", name);
fail:
    tb_len_hist_free(h);
    return -1;
}

int tb_len_hist_load(const char *path, tb_len_hist **out, char *err, size_t size)
{
    *out = NULL;
    char *text = read_bounded(path, "histogram", err, size);
    if (!text)
        return -1;
    int rc = tb_len_hist_parse(path, text, out, err, size);
    free(text);
    return rc;
}

/* A standard normal draw (Box-Muller). */
static double std_normal(tb_arrival_rng *r)
{
    double u1 = tb_arrival_uniform(r), u2 = tb_arrival_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

uint32_t tb_len_draw(const tb_len_dist *d, tb_arrival_rng *r)
{
    double x = d->mean;
    switch (d->kind) {
    case TB_LEN_FIXED:
    case TB_N_LEN_KINDS:
        break;
    case TB_LEN_UNIFORM:
        x = d->mean + sqrt(3.0) * d->stdev * (2.0 * tb_arrival_uniform(r) - 1.0);
        break;
    case TB_LEN_NORMAL:
        x = d->mean + d->stdev * std_normal(r);
        break;
    case TB_LEN_LOGNORMAL: {
        /* the log's parameters from the length's mean m and stdev s:
         * sigma^2 = ln(1 + s^2/m^2), mu = ln m - sigma^2/2 */
        double m = d->mean > 0 ? d->mean : 1, s2 = log(1.0 + d->stdev * d->stdev / (m * m));
        x = exp(log(m) - s2 / 2 + sqrt(s2) * std_normal(r));
        break;
    }
    case TB_LEN_HISTOGRAM: {
        const tb_len_hist *h = d->hist;
        double u = tb_arrival_uniform(r) * h->cum[h->n - 1];
        size_t lo = 0, hi = h->n - 1; /* the first bin with cum > u */
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (h->cum[mid] > u)
                hi = mid;
            else
                lo = mid + 1;
        }
        uint64_t width = (uint64_t)h->hi[lo] - h->lo[lo] + 1;
        x = (double)(h->lo[lo] + (width > 1 ? tb_arrival_rng_next(r) % width : 0));
        break;
    }
    }
    x = floor(x + 0.5);
    if (!(x >= d->min)) /* NaN too */
        x = d->min;
    if (x > d->max)
        x = d->max;
    return (uint32_t)x;
}

/* ------------------------------------------------ datasets */

static void conv_free(tb_conversation *c)
{
    free(c->system);
    for (size_t t = 0; t < c->n_turns; t++) {
        free(c->turns[t].user);
        free(c->turns[t].assistant);
    }
    free(c->turns);
}

void tb_dataset_free(tb_dataset *d)
{
    if (!d)
        return;
    for (size_t i = 0; i < d->n; i++)
        conv_free(&d->conv[i]);
    free(d->conv);
    free(d);
}

enum { ROLE_SYSTEM, ROLE_USER, ROLE_ASSISTANT, ROLE_BAD };

static int sharegpt_role(const char *from)
{
    static const char *const users[] = {"human", "user"};
    static const char *const bots[] = {"gpt", "assistant", "chatgpt", "bard", "bing", "model"};
    if (strcmp(from, "system") == 0)
        return ROLE_SYSTEM;
    for (size_t i = 0; i < sizeof users / sizeof *users; i++)
        if (strcmp(from, users[i]) == 0)
            return ROLE_USER;
    for (size_t i = 0; i < sizeof bots / sizeof *bots; i++)
        if (strcmp(from, bots[i]) == 0)
            return ROLE_ASSISTANT;
    return ROLE_BAD;
}

static int openai_role(const char *role)
{
    if (strcmp(role, "system") == 0 || strcmp(role, "developer") == 0)
        return ROLE_SYSTEM;
    if (strcmp(role, "user") == 0)
        return ROLE_USER;
    if (strcmp(role, "assistant") == 0)
        return ROLE_ASSISTANT;
    return ROLE_BAD;
}

/* OpenAI content: a string, or a list of {"type": "text", "text": ...}
 * parts (joined). malloc'd text; NULL with *why (a static reason, or
 * "out of memory"). */
static char *content_text(const cJSON *c, const char **why, size_t *bad_part)
{
    if (cJSON_IsString(c)) {
        char *s = strdup(c->valuestring);
        if (!s)
            *why = "out of memory";
        return s;
    }
    if (!cJSON_IsArray(c)) {
        *why = "expected a string or a list of {\"type\": \"text\", \"text\": ...} parts";
        return NULL;
    }
    tb_str b = {0};
    size_t i = 0;
    const cJSON *part;
    cJSON_ArrayForEach(part, c)
    {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") != 0 || !cJSON_IsString(text)) {
            *bad_part = i;
            *why = "expected a text part {\"type\": \"text\", \"text\": \"...\"} (no images or audio)";
            tb_str_free(&b);
            return NULL;
        }
        tb_str_try_append(&b, text->valuestring);
        i++;
    }
    char *s = tb_str_try_take(&b);
    if (!s)
        *why = "out of memory";
    return s;
}

/* What is wrong with a line cJSON could not parse, in words: nesting
 * deeper than cJSON's limit, a lone UTF-16 surrogate escape, or else
 * where it stopped. */
static void json_problem(const char *s, size_t n, size_t at, char *buf, size_t size)
{
    size_t depth = 0, deepest = 0, lone = SIZE_MAX;
    unsigned lone_cp = 0;
    int in_str = 0;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (!in_str) {
            if (ch == '"')
                in_str = 1;
            else if (ch == '[' || ch == '{')
                deepest = ++depth > deepest ? depth : deepest;
            else if ((ch == ']' || ch == '}') && depth)
                depth--;
            continue;
        }
        if (ch == '"') {
            in_str = 0;
        } else if (ch == '\\' && i + 1 < n && s[i + 1] == 'u') {
            unsigned cp = 0;
            if (i + 6 > n || sscanf(s + i + 2, "%4x", &cp) != 1) {
                i++;
                continue;
            }
            unsigned next = 0;
            int pair = cp >= 0xD800 && cp <= 0xDBFF && i + 12 <= n && s[i + 6] == '\\' && s[i + 7] == 'u' &&
                       sscanf(s + i + 8, "%4x", &next) == 1 && next >= 0xDC00 && next <= 0xDFFF;
            if (cp >= 0xD800 && cp <= 0xDFFF && !pair && lone == SIZE_MAX) {
                lone = i;
                lone_cp = cp;
            }
            i += pair ? 11 : 5;
        } else if (ch == '\\') {
            i++;
        }
    }
    if (deepest > CJSON_NESTING_LIMIT)
        snprintf(buf, size, "nested %zu levels deep, more than the %d a line may have", deepest, CJSON_NESTING_LIMIT);
    else if (lone != SIZE_MAX)
        snprintf(buf, size, "a lone UTF-16 surrogate \\u%04X at column %zu (not a character)", lone_cp, lone + 1);
    else
        snprintf(buf, size, "not valid JSON (at column %zu)", at + 1);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A key set twice in one object, anywhere in j (sorted: objects may be
 * large), or NULL; *oom when out of memory. */
static const char *duplicate_key(const cJSON *j, int *oom)
{
    if (!cJSON_IsObject(j) && !cJSON_IsArray(j))
        return NULL;
    const cJSON *c;
    if (cJSON_IsObject(j)) {
        size_t n = (size_t)cJSON_GetArraySize(j), k = 0;
        const char **keys = tb_realloc_array(NULL, n, sizeof *keys);
        if (!keys) {
            *oom = 1;
            return NULL;
        }
        cJSON_ArrayForEach(c, j) keys[k++] = c->string ? c->string : "";
        qsort(keys, n, sizeof *keys, cmp_str);
        const char *dup = NULL;
        for (k = 1; k < n && !dup; k++)
            if (strcmp(keys[k - 1], keys[k]) == 0)
                dup = keys[k];
        free(keys);
        if (dup)
            return dup;
    }
    cJSON_ArrayForEach(c, j)
    {
        const char *d = duplicate_key(c, oom);
        if (d || *oom)
            return d;
    }
    return NULL;
}

/* One line's conversation. 0, or -1 with err naming name:line and the
 * field. */
static int parse_conversation(const char *name, size_t line, const char *text, size_t len, tb_conversation *c,
                              char *err, size_t size)
{
    memset(c, 0, sizeof *c);
    c->line = line;
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!j) {
        char why[160];
        json_problem(text, len, end && end >= text ? (size_t)(end - text) : 0, why, sizeof why);
        msg(err, size, "%s:%zu: %s", name, line, why);
        return -1;
    }
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        msg(err, size, "%s:%zu: not a JSON object: expected {\"conversations\": [...]} (ShareGPT) or {\"messages\": "
            "[...]} (OpenAI chat)", name, line);
        return -1;
    }
    size_t rest = (size_t)(end - text);
    while (rest < len && isspace((unsigned char)text[rest]))
        rest++;
    if (rest < len) {
        cJSON_Delete(j);
        msg(err, size, "%s:%zu: text after the JSON object at column %zu (expected one object a line)", name, line,
            rest + 1);
        return -1;
    }
    int oom = 0;
    const char *dup = duplicate_key(j, &oom);
    if (dup || oom) {
        if (oom)
            msg(err, size, "%s:%zu: out of memory", name, line);
        else
            msg(err, size, "%s:%zu: key \"%.40s\" is set twice in one object (which one counts is not defined)", name,
                line, dup);
        cJSON_Delete(j);
        return -1;
    }
    const cJSON *conv = cJSON_GetObjectItemCaseSensitive(j, "conversations");
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(j, "messages");
    int sharegpt = conv != NULL;
    const cJSON *list = sharegpt ? conv : msgs;
    const char *lname = sharegpt ? "conversations" : "messages";
    const char *kname = sharegpt ? "from" : "role", *vname = sharegpt ? "value" : "content";
    if (!list) {
        msg(err, size, "%s:%zu: no \"conversations\" (ShareGPT) or \"messages\" (OpenAI chat) list", name, line);
        goto fail;
    }
    if (!cJSON_IsArray(list) || cJSON_GetArraySize(list) == 0) {
        msg(err, size, "%s:%zu: field %s: expected a non-empty list of {\"%s\": ..., \"%s\": ...}", name, line, lname,
            kname, vname);
        goto fail;
    }
    int n = cJSON_GetArraySize(list), expect = ROLE_USER;
    c->turns = calloc((size_t)n, sizeof *c->turns);
    if (!c->turns) {
        msg(err, size, "%s:%zu: out of memory", name, line);
        goto fail;
    }
    int i = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, list)
    {
        const cJSON *k = cJSON_GetObjectItemCaseSensitive(m, kname);
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(m, vname);
        if (!cJSON_IsString(k)) {
            msg(err, size, "%s:%zu: field %s[%d].%s: expected a string (%s)", name, line, lname, i, kname,
                sharegpt ? "human, gpt or system" : "user, assistant or system");
            goto fail;
        }
        int role = sharegpt ? sharegpt_role(k->valuestring) : openai_role(k->valuestring);
        if (role == ROLE_BAD) {
            msg(err, size, "%s:%zu: field %s[%d].%s: \"%.40s\": expected %s", name, line, lname, i, kname,
                k->valuestring,
                sharegpt ? "human (or user), gpt (or assistant, chatgpt, bard, bing, model) or system"
                         : "user, assistant, or system (developer)");
            goto fail;
        }
        const char *why = NULL;
        size_t part = SIZE_MAX, bad;
        char *value = NULL;
        if (sharegpt) {
            if (cJSON_IsString(v))
                value = strdup(v->valuestring);
            why = !cJSON_IsString(v) ? "expected a string" : !value ? "out of memory" : NULL;
        } else {
            value = v ? content_text(v, &why, &part) : NULL;
            if (!v)
                why = "expected a string or a list of text parts";
        }
        if (!value) {
            if (part != SIZE_MAX)
                msg(err, size, "%s:%zu: field %s[%d].%s[%zu]: %s", name, line, lname, i, vname, part, why);
            else
                msg(err, size, "%s:%zu: field %s[%d].%s: %s", name, line, lname, i, vname, why);
            goto fail;
        }
        /* cJSON keeps a string's bytes as they are: one that is not
         * UTF-8 (a Latin-1 byte) makes every request's body JSON the
         * server refuses */
        if (!tb_utf8_valid(value, strlen(value), &bad)) {
            msg(err, size, "%s:%zu: field %s[%d].%s: not valid UTF-8 (byte 0x%02X at byte %zu of the text)", name,
                line, lname, i, vname, (unsigned char)value[bad], bad);
            free(value);
            goto fail;
        }
        if (role == ROLE_SYSTEM && i == 0) {
            c->system = value;
        } else if (role != expect) {
            free(value);
            msg(err, size, "%s:%zu: field %s[%d].%s: a %s message where a%s %s message was expected (a system "
                "message may only come first; then user and assistant alternate, the user first)",
                name, line, lname, i, kname, role == ROLE_SYSTEM ? "system" : role == ROLE_USER ? "user" : "assistant",
                expect == ROLE_USER ? "" : "n", expect == ROLE_USER ? "user" : "assistant");
            goto fail;
        } else if (role == ROLE_USER && !value[strspn(value, " \t\r\n")]) {
            free(value);
            msg(err, size, "%s:%zu: field %s[%d].%s: an empty user message (a prompt needs text)", name, line, lname,
                i, vname);
            goto fail;
        } else if (role == ROLE_USER) {
            c->turns[c->n_turns++].user = value;
            expect = ROLE_ASSISTANT;
        } else {
            c->turns[c->n_turns - 1].assistant = value;
            expect = ROLE_USER;
        }
        i++;
    }
    if (c->n_turns == 0) {
        msg(err, size, "%s:%zu: field %s: no user message", name, line, lname);
        goto fail;
    }
    cJSON_Delete(j);
    return 0;
fail:
    cJSON_Delete(j);
    conv_free(c);
    memset(c, 0, sizeof *c);
    return -1;
}

int tb_dataset_parse(const char *name, const char *text, tb_dataset **out, char *err, size_t size)
{
    *out = NULL;
    tb_dataset *d = calloc(1, sizeof *d);
    size_t cap = 0, line = 0;
    if (!d) {
        msg(err, size, "%s: out of memory", name);
        return -1;
    }
    for (const char *p = text; *p;) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        const char *start = p;
        p = eol ? eol + 1 : p + len;
        line++;
        size_t k = 0;
        while (k < len && isspace((unsigned char)start[k]))
            k++;
        if (k == len)
            continue;
        if (d->n == cap) {
            size_t nc = cap ? 2 * cap : 64;
            tb_conversation *nv = tb_realloc_array(d->conv, nc, sizeof *nv);
            if (!nv) {
                msg(err, size, "%s:%zu: out of memory", name, line);
                tb_dataset_free(d);
                return -1;
            }
            d->conv = nv;
            cap = nc;
        }
        if (parse_conversation(name, line, start, len, &d->conv[d->n], err, size) != 0) {
            tb_dataset_free(d);
            return -1;
        }
        d->n++;
    }
    if (d->n == 0) {
        msg(err, size, "%s: no conversation (one JSON object a line)", name);
        tb_dataset_free(d);
        return -1;
    }
    *out = d;
    return 0;
}

int tb_dataset_load(const char *path, tb_dataset **out, char *err, size_t size)
{
    *out = NULL;
    char *text = read_bounded(path, "dataset", err, size);
    if (!text)
        return -1;
    int rc = tb_dataset_parse(path, text, out, err, size);
    free(text);
    return rc;
}

size_t tb_dataset_eligible(const tb_dataset *d, uint32_t turns)
{
    size_t n = 0;
    for (size_t i = 0; d && i < d->n; i++)
        n += d->conv[i].n_turns >= turns;
    return n;
}

/* ------------------------------------------------ sessions */

static uint64_t mix(uint64_t a, uint64_t b)
{
    uint64_t z = a ^ (b + 0x9E3779B97F4A7C15ull + (a << 6) + (a >> 2));
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    return z ^ (z >> 31);
}

void tb_sessions_free(tb_session *s, uint32_t n)
{
    if (!s)
        return;
    for (uint32_t i = 0; i < n; i++) {
        free(s[i].system);
        for (uint32_t t = 0; s[i].user && t < s[i].turns; t++) {
            free(s[i].user[t]);
            free(s[i].answer[t]);
        }
        free(s[i].user);
        free(s[i].answer);
        free(s[i].max_tokens);
    }
    free(s);
}

/* Tokens of text by tok; -1 when it cannot say (out of memory). */
static int64_t count_tokens(const tb_tokenizer *tok, const char *text)
{
    return tb_tokenizer_encode(tok, text, strlen(text), NULL, 0);
}

/* The conversation of session i: the i-th (from `base`) with enough
 * user turns. */
static size_t pick_conversation(const tb_dataset *d, uint32_t turns, size_t eligible, uint64_t base, uint32_t i)
{
    size_t want = (size_t)((base + i) % eligible);
    for (size_t k = 0; k < d->n; k++)
        if (d->conv[k].n_turns >= turns && want-- == 0)
            return k;
    return 0; /* not reached: eligible counts them */
}

int tb_sessions_make(const tb_workload *w, const tb_prompt_vocab *vocab, const tb_tokenizer *tok, uint64_t call_seed,
                     uint64_t prefix_seed, uint32_t n_sessions, tb_session **out, char *err, size_t size)
{
    *out = NULL;
    uint32_t turns = w->turns ? w->turns : 1;
    size_t eligible = tb_dataset_eligible(w->dataset, turns);
    if (w->dataset && eligible == 0) {
        msg(err, size, "the dataset has no conversation with %u user turns (turns = %u)", turns, turns);
        return -1;
    }
    tb_session *s = calloc(n_sessions ? n_sessions : 1, sizeof *s);
    if (!s)
        goto nomem;
    tb_arrival_rng lens;
    tb_arrival_rng_seed(&lens, mix(call_seed, 0x1E45));
    for (uint32_t i = 0; i < n_sessions; i++) {
        tb_session *x = &s[i];
        x->turns = turns;
        x->conv = SIZE_MAX;
        x->user = calloc(turns, sizeof *x->user);
        x->answer = calloc(turns, sizeof *x->answer);
        x->max_tokens = calloc(turns, sizeof *x->max_tokens);
        if (!x->user || !x->answer || !x->max_tokens)
            goto nomem;
        const tb_conversation *cv = NULL;
        if (w->dataset) {
            x->conv = pick_conversation(w->dataset, turns, eligible, call_seed, i);
            cv = &w->dataset->conv[x->conv];
        }
        tb_str sys = {0};
        if (w->prefix_groups) {
            int64_t counted;
            char *p = tb_prompt_synth(vocab, w->prefix_tokens, mix(prefix_seed, 0x9F00 + i % w->prefix_groups),
                                      &counted);
            if (!p)
                goto nomem;
            tb_str_try_append(&sys, p);
            free(p);
        }
        if (cv && cv->system) {
            if (sys.len)
                tb_str_try_append(&sys, "\n");
            tb_str_try_append(&sys, cv->system);
        }
        if (sys.failed) {
            tb_str_free(&sys);
            goto nomem;
        }
        x->system = sys.len ? tb_str_try_take(&sys) : NULL;
        tb_str_free(&sys);
        for (uint32_t t = 0; t < turns; t++) {
            if (cv) {
                x->user[t] = strdup(cv->turns[t].user);
                if (!x->user[t])
                    goto nomem;
            } else {
                int64_t counted;
                uint32_t len = tb_len_draw(&w->prompt, &lens);
                x->user[t] = tb_prompt_synth(vocab, len, mix(call_seed, ((uint64_t)i << 20) + t), &counted);
                if (!x->user[t])
                    goto nomem;
            }
            uint32_t out_len = tb_len_draw(&w->output, &lens);
            if (cv && w->output_from_reference && cv->turns[t].assistant && tok) {
                int64_t k = count_tokens(tok, cv->turns[t].assistant);
                if (k == TB_TOKENIZER_NO_MEMORY)
                    goto nomem;
                if (k > 0) { /* the reference's length, within the same bounds */
                    out_len = (uint32_t)(k < w->output.min ? w->output.min : k > w->output.max ? w->output.max : k);
                }
            }
            x->max_tokens[t] = out_len;
        }
    }
    *out = s;
    return 0;
nomem:
    tb_sessions_free(s, n_sessions);
    msg(err, size, "out of memory making %u sessions", n_sessions);
    return -1;
}

size_t tb_session_messages(const tb_session *s, uint32_t t, tb_message *msgs)
{
    size_t n = 0;
    if (s->system)
        msgs[n++] = (tb_message){"system", s->system};
    for (uint32_t k = 0; k <= t && k < s->turns; k++) {
        msgs[n++] = (tb_message){"user", s->user[k]};
        if (k < t)
            msgs[n++] = (tb_message){"assistant", s->answer[k] ? s->answer[k] : ""};
    }
    return n;
}

char *tb_session_prompt(const tb_session *s, uint32_t t)
{
    tb_message m[2 * (size_t)t + 3];
    size_t n = tb_session_messages(s, t, m);
    const char *sep = s->conv != SIZE_MAX ? "\n" : "";
    tb_str b = {0};
    for (size_t i = 0; i < n; i++) {
        if (i)
            tb_str_try_append(&b, sep);
        tb_str_try_append(&b, m[i].content);
    }
    return tb_str_try_take(&b);
}
