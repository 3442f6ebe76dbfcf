/* sse.c — see sse.h. */
#include "sse.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const unsigned char bom_bytes[3] = {0xEF, 0xBB, 0xBF};

/* Grow b to hold at least need + 1 bytes (room for a NUL). */
static int buf_reserve(tb_sse_buf *b, size_t need)
{
    if (need + 1 <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need + 1)
        cap *= 2;
    char *s = realloc(b->s, cap);
    if (!s)
        return -1;
    b->s = s;
    b->cap = cap;
    return 0;
}

static int buf_append(tb_sse_buf *b, const char *s, size_t n)
{
    if (buf_reserve(b, b->len + n) != 0)
        return -1;
    if (n)
        memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
    return 0;
}

static int buf_set(tb_sse_buf *b, const char *s, size_t n)
{
    b->len = 0;
    return buf_append(b, s, n);
}

void tb_sse_init(tb_sse *p, size_t max_event_bytes)
{
    memset(p, 0, sizeof *p);
    p->max_event = max_event_bytes ? max_event_bytes : (size_t)1 << 20;
}

void tb_sse_free(tb_sse *p)
{
    free(p->line.s);
    free(p->data.s);
    free(p->type.s);
    free(p->id.s);
    memset(p, 0, sizeof *p);
}

/* A blank line: hand the event over when it has data. */
static int dispatch(tb_sse *p, tb_sse_handler h, void *user)
{
    if (p->data.len == 0) {
        p->type.len = 0;
        return 0;
    }
    p->data.len--; /* the '\n' after the last data line */
    p->data.s[p->data.len] = '\0';
    tb_sse_event ev = {
        .type = p->type.len ? p->type.s : "",
        .type_len = p->type.len,
        .data = p->data.s,
        .data_len = p->data.len,
        .id = p->id.len ? p->id.s : "",
        .id_len = p->id.len,
    };
    p->events++;
    int stop = h ? h(user, &ev) : 0;
    p->data.len = 0;
    p->type.len = 0;
    return stop;
}

static int field_is(const char *f, size_t n, const char *name)
{
    return strlen(name) == n && memcmp(f, name, n) == 0;
}

/* One complete line (without its terminator). Returns TB_SSE_*. */
static int process_line(tb_sse *p, const char *s, size_t n, tb_sse_handler h, void *user)
{
    if (n == 0)
        return dispatch(p, h, user) ? TB_SSE_STOPPED : TB_SSE_OK;
    if (s[0] == ':')
        return TB_SSE_OK; /* comment (servers use them as keep-alives) */
    const char *colon = memchr(s, ':', n);
    size_t flen = colon ? (size_t)(colon - s) : n;
    const char *v = colon ? colon + 1 : s + n;
    size_t vlen = (size_t)(s + n - v);
    if (vlen && v[0] == ' ') {
        v++;
        vlen--;
    }
    int rc = 0;
    if (field_is(s, flen, "data")) {
        if (p->data.len + vlen + 1 > p->max_event)
            return p->error = TB_SSE_TOO_LARGE;
        rc = buf_append(&p->data, v, vlen) || buf_append(&p->data, "\n", 1);
    } else if (field_is(s, flen, "event")) {
        rc = buf_set(&p->type, v, vlen);
    } else if (field_is(s, flen, "id")) {
        if (!memchr(v, '\0', vlen))
            rc = buf_set(&p->id, v, vlen);
    }
    /* "retry" and unknown fields are ignored, as the standard says. */
    if (rc)
        return p->error = TB_SSE_NO_MEMORY;
    return TB_SSE_OK;
}

int tb_sse_feed(tb_sse *p, const char *buf, size_t n, tb_sse_handler h, void *user)
{
    if (p->error)
        return p->error;
    size_t i = 0;
    /* One leading BOM is not part of the stream; it may be split too. */
    while (p->bom < 3 && i < n) {
        if ((unsigned char)buf[i] == bom_bytes[p->bom]) {
            p->bom++;
            i++;
        } else {
            if (p->bom && buf_append(&p->line, (const char *)bom_bytes, p->bom) != 0)
                return p->error = TB_SSE_NO_MEMORY;
            p->bom = 3;
        }
    }
    if (p->after_cr && i < n) {
        if (buf[i] == '\n')
            i++; /* the LF of a CRLF split across reads */
        p->after_cr = 0;
    }
    while (i < n) {
        size_t j = i;
        while (j < n && buf[j] != '\n' && buf[j] != '\r')
            j++;
        if (p->line.len + (j - i) + p->data.len > p->max_event)
            return p->error = TB_SSE_TOO_LARGE;
        if (j == n) { /* the line continues in the next read */
            if (buf_append(&p->line, buf + i, j - i) != 0)
                return p->error = TB_SSE_NO_MEMORY;
            break;
        }
        int rc;
        if (p->line.len) {
            if (buf_append(&p->line, buf + i, j - i) != 0)
                return p->error = TB_SSE_NO_MEMORY;
            size_t len = p->line.len;
            p->line.len = 0; /* the bytes stay valid: nothing appends to it below */
            rc = process_line(p, p->line.s, len, h, user);
        } else {
            rc = process_line(p, buf + i, j - i, h, user);
        }
        if (buf[j] == '\r') {
            if (j + 1 < n) {
                if (buf[j + 1] == '\n')
                    j++;
            } else {
                p->after_cr = 1;
            }
        }
        i = j + 1;
        if (rc)
            return rc;
    }
    return TB_SSE_OK;
}

int tb_sse_end(tb_sse *p)
{
    int pending = p->line.len > 0 || p->data.len > 0 || (p->bom > 0 && p->bom < 3);
    p->line.len = 0;
    p->data.len = 0;
    p->type.len = 0;
    return pending;
}

/* ------------------------------------------------ OpenAI chunks */

static void set_msg(tb_oai_chunk *c, tb_oai_kind kind, const char *what)
{
    c->kind = kind;
    snprintf(c->message, sizeof c->message, "%s", what);
}

/* A string member, a JSON null, or absent: 0; another type: -1. */
static int opt_string(const cJSON *obj, const char *name, const char **out)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, name);
    *out = NULL;
    if (!it || cJSON_IsNull(it))
        return 0;
    if (!cJSON_IsString(it))
        return -1;
    *out = it->valuestring;
    return 0;
}

/* A token count of usage: absent or null: -1 in *out, 0 returned. A
 * count that is not an integer in [0, TB_OAI_MAX_COUNT] (a string, a
 * fraction, a negative, a value a request's 32-bit count cannot hold):
 * -1 returned, with the message naming the value. Never clamped or
 * wrapped: a wrong count would be stored as if the server had said it. */
static int usage_count(const cJSON *usage, const char *name, int64_t *out, tb_oai_chunk *c)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(usage, name);
    *out = -1;
    if (!it || cJSON_IsNull(it))
        return 0;
    if (!cJSON_IsNumber(it)) {
        char *text = cJSON_PrintUnformatted(it);
        snprintf(c->message, sizeof c->message, "usage.%s %.40s is not a number", name, text ? text : "(?)");
        free(text);
        c->kind = TB_OAI_MALFORMED;
        return -1;
    }
    double v = it->valuedouble;
    if (!(v >= 0 && v <= (double)TB_OAI_MAX_COUNT) || v != (double)(int64_t)v) {
        snprintf(c->message, sizeof c->message, "usage.%s %.17g is not a token count (expected an integer in [0, %lu])",
                 name, v, (unsigned long)TB_OAI_MAX_COUNT);
        c->kind = TB_OAI_MALFORMED;
        return -1;
    }
    *out = (int64_t)v;
    return 0;
}

/* A speculative count of meta_info: like a usage count (absent or null:
 * -1; not an integer in [0, TB_OAI_MAX_COUNT]: MALFORMED, named). */
static int spec_count(const cJSON *meta, const char *name, int64_t *out, tb_oai_chunk *c)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(meta, name);
    if (!it || cJSON_IsNull(it))
        return 0;
    double v = cJSON_IsNumber(it) ? it->valuedouble : -1;
    if (!(v >= 0 && v <= (double)TB_OAI_MAX_COUNT) || v != (double)(int64_t)v) {
        char *text = cJSON_PrintUnformatted(it);
        snprintf(c->message, sizeof c->message, "meta_info.%s %.40s is not a count (expected an integer in [0, %lu])",
                 name, text ? text : "(?)", (unsigned long)TB_OAI_MAX_COUNT);
        free(text);
        c->kind = TB_OAI_MALFORMED;
        return -1;
    }
    *out = (int64_t)v;
    return 0;
}

/* SGLang's per-request speculative fields, wherever the chunk carries an
 * object of them: meta_info at the top level or in choices[0], or usage.
 * Names across its versions: spec_accept_token_num (spec_num_correct_drafts,
 * spec_accepted_drafts), spec_draft_token_num (spec_num_proposed_drafts,
 * spec_proposed_drafts). 0, or -1 with the chunk MALFORMED. */
static int parse_spec(const cJSON *meta, tb_oai_chunk *c)
{
    if (!cJSON_IsObject(meta))
        return 0;
    static const char *const acc[] = {"spec_accept_token_num", "spec_num_correct_drafts", "spec_accepted_drafts"};
    static const char *const drf[] = {"spec_draft_token_num", "spec_num_proposed_drafts", "spec_proposed_drafts"};
    tb_oai_spec *s = &c->spec;
    if (spec_count(meta, "spec_verify_ct", &s->verify_ct, c) != 0)
        return -1;
    for (size_t i = 0; i < 3; i++)
        if ((s->accept_tokens < 0 && spec_count(meta, acc[i], &s->accept_tokens, c) != 0) ||
            (s->draft_tokens < 0 && spec_count(meta, drf[i], &s->draft_tokens, c) != 0))
            return -1;
    const cJSON *len = cJSON_GetObjectItemCaseSensitive(meta, "spec_accept_length");
    if (cJSON_IsNumber(len) && isfinite(len->valuedouble) && len->valuedouble >= 1)
        s->accept_length = len->valuedouble;
    const cJSON *hist = cJSON_GetObjectItemCaseSensitive(meta, "spec_accept_histogram");
    if (hist && !cJSON_IsNull(hist)) {
        int n = cJSON_IsArray(hist) ? cJSON_GetArraySize(hist) : -1;
        if (n < 0 || n > TB_OAI_SPEC_HIST) {
            snprintf(c->message, sizeof c->message,
                     "meta_info.spec_accept_histogram is not an array of at most %d counts", TB_OAI_SPEC_HIST);
            c->kind = TB_OAI_MALFORMED;
            return -1;
        }
        for (int j = 0; j < n; j++) {
            const cJSON *it = cJSON_GetArrayItem(hist, j);
            double v = cJSON_IsNumber(it) ? it->valuedouble : -1;
            if (!(v >= 0 && v <= (double)TB_OAI_MAX_COUNT) || v != (double)(int64_t)v) {
                snprintf(c->message, sizeof c->message, "meta_info.spec_accept_histogram[%d] is not a count", j);
                c->kind = TB_OAI_MALFORMED;
                return -1;
            }
            s->hist[j] = (uint32_t)v;
        }
        s->n_hist = (uint32_t)n;
    }
    return 0;
}

static void parse_error(const cJSON *root, const cJSON *err, tb_oai_chunk *c)
{
    const char *m = NULL;
    if (cJSON_IsString(err))
        m = err->valuestring;
    else if (cJSON_IsObject(err))
        opt_string(err, "message", &m);
    else
        opt_string(root, "message", &m); /* {"object": "error", "message": ...} */
    set_msg(c, TB_OAI_ERROR, m && *m ? m : "error object without a message");
}

tb_oai_kind tb_oai_parse(const char *data, size_t len, tb_oai_chunk *c)
{
    memset(c, 0, sizeof *c);
    c->completion_tokens = c->prompt_tokens = -1;
    c->spec.verify_ct = c->spec.accept_tokens = c->spec.draft_tokens = -1;
    c->spec.accept_length = NAN;
    size_t a = 0, b = len;
    while (a < b && (data[a] == ' ' || data[a] == '\t' || data[a] == '\n' || data[a] == '\r'))
        a++;
    while (b > a && (data[b - 1] == ' ' || data[b - 1] == '\t' || data[b - 1] == '\n' || data[b - 1] == '\r'))
        b--;
    if (b - a == 6 && memcmp(data + a, "[DONE]", 6) == 0) {
        c->kind = TB_OAI_DONE;
        return c->kind;
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(data + a, b - a, &end, 0);
    if (root && end != data + b) { /* "{..}\n{..}": two chunks in one event */
        cJSON_Delete(root);
        set_msg(c, TB_OAI_MALFORMED, "bytes after the JSON value");
        return c->kind;
    }
    if (!root) {
        set_msg(c, TB_OAI_MALFORMED, b > a ? "not JSON" : "empty data");
        return c->kind;
    }
    c->json_ = root;
    if (!cJSON_IsObject(root)) {
        set_msg(c, TB_OAI_MALFORMED, "not a JSON object");
        return c->kind;
    }
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(root, "error");
    const cJSON *obj = cJSON_GetObjectItemCaseSensitive(root, "object");
    if ((err && !cJSON_IsNull(err)) || (cJSON_IsString(obj) && strcmp(obj->valuestring, "error") == 0)) {
        parse_error(root, err, c);
        return c->kind;
    }
    const cJSON *choices = cJSON_GetObjectItemCaseSensitive(root, "choices");
    const cJSON *usage = cJSON_GetObjectItemCaseSensitive(root, "usage");
    if (!choices && (!usage || cJSON_IsNull(usage))) {
        set_msg(c, TB_OAI_MALFORMED, "neither \"choices\" nor \"usage\"");
        return c->kind;
    }
    if (choices && !cJSON_IsArray(choices)) {
        set_msg(c, TB_OAI_MALFORMED, "\"choices\" is not an array");
        return c->kind;
    }
    if (usage && !cJSON_IsNull(usage)) {
        if (!cJSON_IsObject(usage)) {
            set_msg(c, TB_OAI_MALFORMED, "\"usage\" is not an object");
            return c->kind;
        }
        if (usage_count(usage, "completion_tokens", &c->completion_tokens, c) != 0 ||
            usage_count(usage, "prompt_tokens", &c->prompt_tokens, c) != 0 || parse_spec(usage, c) != 0)
            return c->kind;
    }
    const cJSON *c0 = choices ? cJSON_GetArrayItem(choices, 0) : NULL;
    if (parse_spec(cJSON_GetObjectItemCaseSensitive(root, "meta_info"), c) != 0 ||
        (cJSON_IsObject(c0) && parse_spec(cJSON_GetObjectItemCaseSensitive(c0, "meta_info"), c) != 0))
        return c->kind;
    if (c0) {
        if (!cJSON_IsObject(c0)) {
            set_msg(c, TB_OAI_MALFORMED, "choices[0] is not an object");
            return c->kind;
        }
        const char *text = NULL, *content = NULL, *reasoning = NULL, *finish = NULL;
        const cJSON *delta = cJSON_GetObjectItemCaseSensitive(c0, "delta");
        const cJSON *message = cJSON_GetObjectItemCaseSensitive(c0, "message");
        const cJSON *holder = delta ? delta : message;
        if (opt_string(c0, "text", &text) != 0 || opt_string(c0, "finish_reason", &finish) != 0 ||
            (holder && !cJSON_IsObject(holder) && !cJSON_IsNull(holder))) {
            set_msg(c, TB_OAI_MALFORMED, "choices[0] has a member of the wrong type");
            return c->kind;
        }
        if (cJSON_IsObject(holder) &&
            (opt_string(holder, "content", &content) != 0 || opt_string(holder, "reasoning_content", &reasoning) != 0)) {
            set_msg(c, TB_OAI_MALFORMED, "choices[0] content is not a string");
            return c->kind;
        }
        c->finished = finish != NULL;
        if (text) {
            c->text = text;
        } else if (reasoning && content) {
            /* Both in one delta: reasoning comes first in the output. */
            size_t n1 = strlen(reasoning), n2 = strlen(content);
            c->joined_ = malloc(n1 + n2 + 1);
            if (!c->joined_) {
                set_msg(c, TB_OAI_MALFORMED, "out of memory");
                return c->kind;
            }
            memcpy(c->joined_, reasoning, n1);
            memcpy(c->joined_ + n1, content, n2 + 1);
            c->text = c->joined_;
        } else {
            c->text = content ? content : reasoning;
        }
        c->text_len = c->text ? strlen(c->text) : 0;
    }
    c->kind = TB_OAI_CHUNK;
    return c->kind;
}

void tb_oai_chunk_free(tb_oai_chunk *c)
{
    cJSON_Delete(c->json_);
    free(c->joined_);
    c->json_ = NULL;
    c->joined_ = NULL;
    c->text = NULL;
}
