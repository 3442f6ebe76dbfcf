/* serve_request.c — see serve_request.h. */
#include "serve_request.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

static int bad(tb_serve_error *e, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(tb_serve_error *e, const char *param, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    snprintf(e->param, sizeof e->param, "%s", param);
    return -1;
}

/* An integer-valued number (no fraction) within [lo, hi]. */
static int is_int_in(const cJSON *v, double lo, double hi)
{
    return cJSON_IsNumber(v) && isfinite(v->valuedouble) && v->valuedouble >= lo && v->valuedouble <= hi &&
           floor(v->valuedouble) == v->valuedouble;
}

/* Text of a chat message's content: a string, or text parts. */
static int content_text(tb_str *p, const cJSON *content)
{
    if (cJSON_IsString(content)) {
        tb_str_append(p, content->valuestring);
        return 0;
    }
    if (!cJSON_IsArray(content) || cJSON_GetArraySize(content) == 0)
        return -1;
    const cJSON *part;
    cJSON_ArrayForEach(part, content)
    {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(part, "text");
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        if (!cJSON_IsObject(part) || !cJSON_IsString(t) ||
            (type && !(cJSON_IsString(type) && strcmp(type->valuestring, "text") == 0)))
            return -1;
        tb_str_append(p, t->valuestring);
    }
    return 0;
}

static int parse_messages(const cJSON *msgs, tb_serve_request *r, tb_serve_error *e)
{
    if (!cJSON_IsArray(msgs) || cJSON_GetArraySize(msgs) == 0)
        return bad(e, "messages", "\"messages\" must be a non-empty array of messages");
    size_t n = (size_t)cJSON_GetArraySize(msgs), i = 0;
    r->messages = tb_xcalloc(n, sizeof *r->messages);
    r->n_messages = n;
    const cJSON *m;
    cJSON_ArrayForEach(m, msgs)
    {
        char at[32];
        snprintf(at, sizeof at, "messages[%zu]", i);
        if (!cJSON_IsObject(m))
            return bad(e, at, "%s must be an object with \"role\" and \"content\"", at);
        const cJSON *f;
        cJSON_ArrayForEach(f, m)
        {
            if (strcmp(f->string, "role") != 0 && strcmp(f->string, "content") != 0 && strcmp(f->string, "name") != 0) {
                char p[64];
                snprintf(p, sizeof p, "%s.%.24s", at, f->string);
                return bad(e, p, "%s.%s is not supported (a message has role, content and name)", at, f->string);
            }
        }
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(m, "name");
        char p[64];
        snprintf(p, sizeof p, "%s.role", at);
        if (!cJSON_IsString(role) || (strcmp(role->valuestring, "system") != 0 &&
                                      strcmp(role->valuestring, "user") != 0 &&
                                      strcmp(role->valuestring, "assistant") != 0))
            return bad(e, p, "%s must be \"system\", \"user\" or \"assistant\"", p);
        snprintf(p, sizeof p, "%s.name", at);
        if (name && !cJSON_IsNull(name) && !cJSON_IsString(name))
            return bad(e, p, "%s must be a string", p);
        tb_str t = {0};
        snprintf(p, sizeof p, "%s.content", at);
        if (content_text(&t, cJSON_GetObjectItemCaseSensitive(m, "content")) != 0) {
            tb_str_free(&t);
            return bad(e, p, "%s must be a string or a non-empty array of text parts", p);
        }
        r->messages[i].role = tb_xstrdup(role->valuestring);
        r->messages[i].content = t.s ? tb_str_take(&t) : tb_xstrdup("");
        i++;
    }
    return 0;
}

static int parse_stop(const cJSON *v, tb_serve_request *r, tb_serve_error *e)
{
    if (cJSON_IsString(v)) {
        if (!v->valuestring[0])
            return bad(e, "stop", "\"stop\" must not be empty");
        r->stop[r->n_stop++] = tb_xstrdup(v->valuestring);
        return 0;
    }
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) > TB_SERVE_MAX_STOP)
        return bad(e, "stop", "\"stop\" must be a string or an array of at most %d strings", TB_SERVE_MAX_STOP);
    const cJSON *s;
    cJSON_ArrayForEach(s, v)
    {
        if (!cJSON_IsString(s) || !s->valuestring[0])
            return bad(e, "stop", "\"stop\" sequences must be non-empty strings");
        r->stop[r->n_stop++] = tb_xstrdup(s->valuestring);
    }
    return 0;
}

/* Is b[0..4) four hex digits (a \u escape's)? */
static int hex4(const char *b)
{
    for (int i = 0; i < 4; i++)
        if (!isxdigit((unsigned char)b[i]))
            return 0;
    return 1;
}

/* Whether the value of member k (from 0) of the JSON object b[n], which
 * cJSON parsed, holds a string with U+0000 in it (an escape or a raw
 * byte, or a \u escape without four hex digits, which cJSON decodes as
 * U+0000): cJSON's strings end at their first NUL, so the parsed value
 * was cut there. Keys are the strings at depth 1 after '{' or ','. */
static int member_has_nul(const char *b, size_t n, size_t k)
{
    int depth = 0, want_key = 0;
    size_t member = 0, keys = 0;
    for (size_t i = 0; i < n; i++) {
        char c = b[i];
        if (c == '{' || c == '[') {
            want_key = ++depth == 1;
        } else if (c == '}' || c == ']') {
            depth--;
        } else if (c == ',' && depth == 1) {
            want_key = 1;
        } else if (c == '"') {
            int nul = 0;
            for (i++; i < n && b[i] != '"'; i++) {
                if (b[i] == '\0')
                    nul = 1;
                if (b[i] != '\\')
                    continue;
                if (n - i > 1 && b[i + 1] == 'u' && (n - i <= 5 || !hex4(b + i + 2) || !memcmp(b + i + 2, "0000", 4)))
                    nul = 1;
                i++; /* the escaped character: never the string's end */
            }
            if (depth == 1 && want_key) {
                want_key = 0;
                member = keys++;
                if (member > k)
                    return 0;
            } else if (keys && member == k && nul) {
                return 1;
            }
        }
    }
    return 0;
}

/* One top-level field (not null). */
static int field(const cJSON *v, int chat, tb_serve_request *r, tb_serve_error *e)
{
    const char *k = v->string;
#define IS(name) (strcmp(k, name) == 0)
    if (IS("prompt") && !chat) {
        const cJSON *pr = cJSON_IsArray(v) && cJSON_GetArraySize(v) == 1 ? cJSON_GetArrayItem(v, 0) : v;
        if (!cJSON_IsString(pr))
            return bad(e, "prompt", "\"prompt\" must be a string (or an array of one string)");
        r->prompt = tb_xstrdup(pr->valuestring);
        return 0;
    }
    if (IS("messages") && chat)
        return parse_messages(v, r, e);
    if (IS("model")) {
        if (!cJSON_IsString(v))
            return bad(e, "model", "\"model\" must be a string");
        r->model = tb_xstrdup(v->valuestring);
        return 0;
    }
    if (IS("max_tokens") || IS("max_completion_tokens")) {
        if (!is_int_in(v, 1, 1e6))
            return bad(e, k, "\"%s\" must be an integer in [1, 1000000]", k);
        return 0; /* read after the walk: max_tokens wins over the newer name */
    }
    if (IS("stream")) {
        if (!cJSON_IsBool(v))
            return bad(e, "stream", "\"stream\" must be true or false");
        r->stream = cJSON_IsTrue(v);
        return 0;
    }
    if (IS("stream_options")) {
        if (!cJSON_IsObject(v))
            return bad(e, "stream_options", "\"stream_options\" must be an object");
        const cJSON *f;
        cJSON_ArrayForEach(f, v)
        {
            if (strcmp(f->string, "include_usage") != 0 || !(cJSON_IsBool(f) || cJSON_IsNull(f)))
                return bad(e, "stream_options", "\"stream_options\" takes only \"include_usage\": true or false");
        }
        r->include_usage = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(v, "include_usage"));
        return 0;
    }
    if (IS("stop"))
        return parse_stop(v, r, e);
    if (IS("seed")) {
        /* what a double holds exactly */
        if (!is_int_in(v, -9007199254740992.0, 9007199254740992.0))
            return bad(e, "seed", "\"seed\" must be an integer");
        r->has_seed = 1;
        r->seed = (uint64_t)(int64_t)v->valuedouble;
        return 0;
    }
    if (IS("temperature")) {
        if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble <= 100))
            return bad(e, "temperature", "\"temperature\" must be a number in [0, 100]");
        r->has_temperature = 1;
        r->temperature = v->valuedouble;
        return 0;
    }
    if (IS("top_p")) {
        if (!cJSON_IsNumber(v) || !(v->valuedouble > 0 && v->valuedouble <= 1))
            return bad(e, "top_p", "\"top_p\" must be a number in (0, 1]");
        r->has_top_p = 1;
        r->top_p = v->valuedouble;
        return 0;
    }
    if (IS("top_k")) {
        if (!is_int_in(v, -1, 1e9))
            return bad(e, "top_k", "\"top_k\" must be an integer in [-1, 1000000000] (-1 or 0: off)");
        r->has_top_k = 1;
        r->top_k = v->valuedouble < 0 ? 0 : (uint32_t)v->valuedouble;
        return 0;
    }
    if (IS("n")) {
        if (!is_int_in(v, 1, 1))
            return bad(e, "n", "\"n\": only 1 is supported (one choice per request)");
        return 0;
    }
    if (IS("user")) {
        if (!cJSON_IsString(v))
            return bad(e, "user", "\"user\" must be a string");
        return 0;
    }
    /* accepted only where they ask for nothing */
    if (IS("logprobs")) {
        if (!cJSON_IsFalse(v) || !chat)
            return bad(e, "logprobs", "\"logprobs\" is not supported (tokbench serve returns no log probabilities)");
        return 0;
    }
    if (IS("top_logprobs")) {
        if (!is_int_in(v, 0, 0))
            return bad(e, "top_logprobs", "\"top_logprobs\" is not supported (tokbench serve returns no log probabilities)");
        return 0;
    }
    if (IS("echo")) {
        if (!cJSON_IsFalse(v))
            return bad(e, "echo", "\"echo\" is not supported");
        return 0;
    }
    if (IS("best_of")) {
        if (!is_int_in(v, 1, 1))
            return bad(e, "best_of", "\"best_of\": only 1 is supported");
        return 0;
    }
    if (IS("suffix")) {
        if (!cJSON_IsString(v) || v->valuestring[0])
            return bad(e, "suffix", "\"suffix\" is not supported");
        return 0;
    }
    if (IS("presence_penalty") || IS("frequency_penalty")) {
        if (!cJSON_IsNumber(v) || v->valuedouble != 0)
            return bad(e, k, "\"%s\" is not supported (only 0)", k);
        return 0;
    }
    if (IS("logit_bias")) {
        if (!cJSON_IsObject(v) || v->child)
            return bad(e, "logit_bias", "\"logit_bias\" is not supported (only {})");
        return 0;
    }
#undef IS
    char p[64];
    snprintf(p, sizeof p, "%.63s", k);
    return bad(e, p, "\"%.100s\" is not supported by tokbench serve%s", k,
               (!chat && strcmp(k, "messages") == 0)  ? " on /v1/completions (use /v1/chat/completions)"
               : (chat && strcmp(k, "prompt") == 0) ? " on /v1/chat/completions (use /v1/completions)"
                                                    : "");
}

int tb_serve_request_parse(const char *body, size_t n, int chat, tb_serve_request *r, tb_serve_error *e)
{
    memset(r, 0, sizeof *r);
    memset(e, 0, sizeof *e);
    /* One value and nothing after it: cJSON stops at the end of the first
     * value, and two bodies run together must not pass as the first. */
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(body, n, &end, 0);
    int rc = 0;
    if (!cJSON_IsObject(j)) {
        rc = bad(e, "", "the body is not a JSON object");
        goto out;
    }
    for (; end < body + n; end++)
        if (*end != ' ' && *end != '\t' && *end != '\n' && *end != '\r') {
            rc = bad(e, "", "bytes after the JSON object");
            goto out;
        }
    r->max_tokens = 16; /* OpenAI's default */
    const cJSON *v;
    size_t k = 0; /* v's index */
    cJSON_ArrayForEach(v, j)
    {
        for (const cJSON *w = j->child; w != v; w = w->next)
            if (strcmp(w->string, v->string) == 0) {
                char p[64];
                snprintf(p, sizeof p, "%.63s", v->string);
                rc = bad(e, p, "\"%.100s\" appears twice", v->string);
                goto out;
            }
        /* a stop sequence cut at a NUL would match early ("\u0000" alone
         * would read as empty): refused (a prompt or chat content is
         * served cut, docs/RELIABILITY.md) */
        if (strcmp(v->string, "stop") == 0 && member_has_nul(body, n, k)) {
            rc = bad(e, "stop", "\"stop\" must not contain U+0000 (NUL): a stop sequence would end there");
            goto out;
        }
        k++;
        if (!cJSON_IsNull(v) && (rc = field(v, chat, r, e)) != 0)
            goto out;
    }
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(j, "max_tokens");
    if (!mt || cJSON_IsNull(mt))
        mt = cJSON_GetObjectItemCaseSensitive(j, "max_completion_tokens");
    if (mt && !cJSON_IsNull(mt))
        r->max_tokens = (uint32_t)mt->valuedouble;
    if (chat && !r->messages)
        rc = bad(e, "messages", "\"messages\" must be a non-empty array of messages");
    else if (!chat && !r->prompt)
        rc = bad(e, "prompt", "\"prompt\" must be a string (or an array of one string)");
out:
    cJSON_Delete(j);
    if (rc != 0)
        tb_serve_request_free(r);
    return rc;
}

void tb_serve_request_free(tb_serve_request *r)
{
    free(r->prompt);
    for (size_t i = 0; i < r->n_messages; i++) {
        free(r->messages[i].role);
        free(r->messages[i].content);
    }
    free(r->messages);
    free(r->model);
    for (uint32_t i = 0; i < r->n_stop; i++)
        free(r->stop[i]);
    memset(r, 0, sizeof *r);
}
