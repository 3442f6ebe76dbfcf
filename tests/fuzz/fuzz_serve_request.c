/* fuzz_serve_request.c — libFuzzer target for the request bodies `tokbench
 * serve` parses: tb_serve_request_parse (core/serve_request.c) on any
 * bytes, as a /v1/completions body and as a /v1/chat/completions body,
 * in a buffer of exactly the body's size (libmicrohttpd's body is not
 * NUL-terminated for the parser: a read past it is an ASan error).
 *
 * For every input, in both forms:
 *   - an error has a message, names a field that is in the body (or
 *     none, or "messages"/"prompt" when that is missing), and leaves
 *     nothing in the request;
 *   - a request is accepted exactly when the body is valid by the rules of
 *     serve_request.h, checked here on cJSON's own parse, field by field
 *     from a table of what each field admits (and no NUL in "stop",
 *     found by parsing the body again with every NUL made U+0001, and
 *     every \u escape without four hex digits, which cJSON decodes as
 *     U+0000, made a backslash);
 *   - an accepted request carries what the body says: the prompt string
 *     or the messages' roles and texts, max_tokens (16 by default,
 *     max_tokens over max_completion_tokens), stream and include_usage,
 *     the stop sequences, seed, temperature, top_p, top_k;
 *   - whitespace after the body (and before it, BOM aside) changes
 *     nothing. */
#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "serve_request.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what, int chat)
{
    fprintf(stderr, "fuzz_serve_request (%s): %s\n", chat ? "chat" : "completions", what);
    abort();
}

static int integral(const cJSON *v, double lo, double hi)
{
    if (!cJSON_IsNumber(v))
        return 0;
    double x = v->valuedouble;
    return x == x && x >= lo && x <= hi && floor(x) == x;
}

/* A message content's text, or -1. */
static int content(const cJSON *c, tb_str *t)
{
    if (cJSON_IsString(c)) {
        tb_str_append(t, c->valuestring);
        return 0;
    }
    if (!cJSON_IsArray(c) || !c->child)
        return -1;
    for (const cJSON *p = c->child; p; p = p->next) {
        if (!cJSON_IsObject(p))
            return -1;
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(p, "type"),
                    *text = cJSON_GetObjectItemCaseSensitive(p, "text");
        if (type && (!cJSON_IsString(type) || strcmp(type->valuestring, "text") != 0))
            return -1;
        if (!cJSON_IsString(text))
            return -1;
        tb_str_append(t, text->valuestring);
    }
    return 0;
}

static int messages_ok(const cJSON *m, tb_serve_request *w)
{
    if (!cJSON_IsArray(m) || !m->child)
        return 0;
    size_t n = (size_t)cJSON_GetArraySize(m), i = 0;
    w->messages = tb_xcalloc(n, sizeof *w->messages);
    w->n_messages = n;
    for (const cJSON *x = m->child; x; x = x->next, i++) {
        if (!cJSON_IsObject(x))
            return 0;
        for (const cJSON *f = x->child; f; f = f->next)
            if (strcmp(f->string, "role") && strcmp(f->string, "content") && strcmp(f->string, "name"))
                return 0;
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(x, "role");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(x, "name");
        if (!cJSON_IsString(role))
            return 0;
        if (strcmp(role->valuestring, "user") && strcmp(role->valuestring, "system") &&
            strcmp(role->valuestring, "assistant"))
            return 0;
        if (name && !cJSON_IsString(name) && !cJSON_IsNull(name))
            return 0;
        tb_str t = {0};
        if (content(cJSON_GetObjectItemCaseSensitive(x, "content"), &t) != 0) {
            tb_str_free(&t);
            return 0;
        }
        w->messages[i].role = tb_xstrdup(role->valuestring);
        w->messages[i].content = t.s ? tb_str_take(&t) : tb_xstrdup("");
    }
    return 1;
}

/* Whether field v (not null) is valid, filling *w. */
static int field_ok(const cJSON *v, int chat, tb_serve_request *w)
{
    const char *k = v->string;
    if (!strcmp(k, "prompt")) {
        if (chat)
            return 0;
        if (cJSON_IsArray(v) && cJSON_GetArraySize(v) == 1)
            v = v->child;
        if (!cJSON_IsString(v))
            return 0;
        w->prompt = tb_xstrdup(v->valuestring);
        return 1;
    }
    if (!strcmp(k, "messages"))
        return chat && messages_ok(v, w);
    if (!strcmp(k, "model"))
        return cJSON_IsString(v) && (w->model = tb_xstrdup(v->valuestring)) != NULL;
    if (!strcmp(k, "max_tokens") || !strcmp(k, "max_completion_tokens"))
        return integral(v, 1, 1000000);
    if (!strcmp(k, "stream"))
        return cJSON_IsBool(v) && ((w->stream = cJSON_IsTrue(v)), 1);
    if (!strcmp(k, "stream_options")) {
        if (!cJSON_IsObject(v))
            return 0;
        for (const cJSON *f = v->child; f; f = f->next)
            if (strcmp(f->string, "include_usage") || !(cJSON_IsBool(f) || cJSON_IsNull(f)))
                return 0;
        w->include_usage = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(v, "include_usage"));
        return 1;
    }
    if (!strcmp(k, "stop")) {
        const cJSON *first = cJSON_IsArray(v) ? v->child : v, *end = cJSON_IsArray(v) ? NULL : v->next;
        if (cJSON_IsArray(v) && cJSON_GetArraySize(v) > TB_SERVE_MAX_STOP)
            return 0;
        if (!cJSON_IsArray(v) && !cJSON_IsString(v))
            return 0;
        for (const cJSON *s = first; s != end; s = s->next) {
            if (!cJSON_IsString(s) || !s->valuestring[0])
                return 0;
            w->stop[w->n_stop++] = tb_xstrdup(s->valuestring);
        }
        return 1;
    }
    if (!strcmp(k, "seed")) {
        if (!integral(v, -9007199254740992.0, 9007199254740992.0))
            return 0;
        w->has_seed = 1;
        w->seed = (uint64_t)(int64_t)v->valuedouble;
        return 1;
    }
    if (!strcmp(k, "temperature")) {
        if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble <= 100))
            return 0;
        w->has_temperature = 1;
        w->temperature = v->valuedouble;
        return 1;
    }
    if (!strcmp(k, "top_p")) {
        if (!cJSON_IsNumber(v) || !(v->valuedouble > 0 && v->valuedouble <= 1))
            return 0;
        w->has_top_p = 1;
        w->top_p = v->valuedouble;
        return 1;
    }
    if (!strcmp(k, "top_k")) { /* -1 and 0: off */
        if (!integral(v, -1, 1e9))
            return 0;
        w->has_top_k = 1;
        w->top_k = v->valuedouble < 0 ? 0 : (uint32_t)v->valuedouble;
        return 1;
    }
    if (!strcmp(k, "n") || !strcmp(k, "best_of"))
        return integral(v, 1, 1);
    if (!strcmp(k, "user"))
        return cJSON_IsString(v);
    if (!strcmp(k, "logprobs"))
        return chat && cJSON_IsFalse(v);
    if (!strcmp(k, "top_logprobs"))
        return integral(v, 0, 0);
    if (!strcmp(k, "echo"))
        return cJSON_IsFalse(v);
    if (!strcmp(k, "suffix"))
        return cJSON_IsString(v) && !v->valuestring[0];
    if (!strcmp(k, "presence_penalty") || !strcmp(k, "frequency_penalty"))
        return cJSON_IsNumber(v) && v->valuedouble == 0;
    if (!strcmp(k, "logit_bias"))
        return cJSON_IsObject(v) && !v->child;
    return 0;
}

/* What the rules say of body[n]: 1 and *want when valid, else 0;
 * *undecided set where this cannot tell (a stop's NUL behind an escape
 * cJSON reads two ways: above). */
static int expected(const char *body, size_t n, int chat, tb_serve_request *want, int *undecided)
{
    memset(want, 0, sizeof *want);
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(body, n, &end, 0);
    int ok = cJSON_IsObject(j);
    while (ok && end < body + n && (*end == ' ' || *end == '\t' || *end == '\r' || *end == '\n'))
        end++;
    ok = ok && end == body + n;
    want->max_tokens = 16;
    /* The body with every NUL (a \u0000 escape, a raw byte) made U+0001:
     * a stop value that parses differently there was cut at a NUL by
     * cJSON, and is refused. A \u escape without four hex digits, which
     * cJSON decodes as U+0000 over its 6 bytes, becomes \u0001 in its
     * place. cJSON finds a string's end by pairing each backslash with
     * the byte after it, but decodes the escape's 6 bytes as one: where
     * a pair starts at the escape's last byte, the byte after the escape
     * is skipped by the first and decoded by the second; a quote there is
     * written \" (a quote in the string either way), a backslash leaves
     * the body undecided (*undecided: no verdict). */
    char *shown = malloc(2 * n + 1);
    if (!shown)
        abort();
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (body[i] == '\0') {
            shown[m++] = '\1';
            continue;
        }
        if (body[i] != '\\' || i + 1 >= n) {
            shown[m++] = body[i];
            continue;
        }
        int hex = n - i > 5 && body[i + 1] == 'u';
        for (size_t d = 2; hex && d < 6; d++)
            hex = isxdigit((unsigned char)body[i + d]);
        if (n - i > 5 && body[i + 1] == 'u' && (!hex || memcmp(body + i + 2, "0000", 4) == 0)) {
            memcpy(shown + m, "\\u0001", 6);
            m += 6;
            size_t j = i + 2; /* the string-end scan through the escape's bytes */
            while (j < i + 6)
                j += body[j] == '\\' ? 2 : 1;
            if (j == i + 7 && i + 6 < n) { /* a pair from the escape's last byte took the next byte */
                if (body[i + 6] == '\\')
                    *undecided = 1;
                else if (body[i + 6] == '"')
                    shown[m++] = '\\', shown[m++] = '"';
                else
                    shown[m++] = body[i + 6] ? body[i + 6] : '\1';
            }
            i = j - 1;
            continue;
        }
        shown[m++] = body[i], shown[m++] = body[i + 1]; /* an escape pair */
        i++;
    }
    cJSON *j1 = ok ? cJSON_ParseWithLength(shown, m) : NULL;
    const cJSON *v1 = j1 ? j1->child : NULL;
    for (const cJSON *v = ok ? j->child : NULL; ok && v; v = v->next, v1 = v1 ? v1->next : NULL) {
        for (const cJSON *u = j->child; u != v; u = u->next)
            ok = ok && strcmp(u->string, v->string) != 0; /* no field twice */
        ok = ok && !(!strcmp(v->string, "stop") && (!v1 || !cJSON_Compare(v, v1, 1)));
        ok = ok && (cJSON_IsNull(v) || field_ok(v, chat, want));
    }
    cJSON_Delete(j1);
    free(shown);
    ok = ok && (chat ? want->messages != NULL : want->prompt != NULL);
    if (ok) {
        const cJSON *mt = cJSON_GetObjectItemCaseSensitive(j, "max_tokens");
        if (!mt || cJSON_IsNull(mt))
            mt = cJSON_GetObjectItemCaseSensitive(j, "max_completion_tokens");
        if (mt && !cJSON_IsNull(mt))
            want->max_tokens = (uint32_t)mt->valuedouble;
    }
    cJSON_Delete(j);
    if (!ok)
        tb_serve_request_free(want);
    return ok;
}

static int same_str(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static int same(const tb_serve_request *a, const tb_serve_request *b)
{
    int ok = same_str(a->prompt, b->prompt) && same_str(a->model, b->model) && a->max_tokens == b->max_tokens &&
             a->stream == b->stream && a->include_usage == b->include_usage && a->n_stop == b->n_stop &&
             a->has_seed == b->has_seed && a->seed == b->seed && a->has_temperature == b->has_temperature &&
             a->has_top_p == b->has_top_p && a->has_top_k == b->has_top_k && a->top_k == b->top_k &&
             (!a->has_temperature || a->temperature == b->temperature) && (!a->has_top_p || a->top_p == b->top_p) &&
             a->n_messages == b->n_messages;
    for (uint32_t i = 0; ok && i < a->n_stop; i++)
        ok = same_str(a->stop[i], b->stop[i]);
    for (size_t i = 0; ok && i < a->n_messages; i++)
        ok = same_str(a->messages[i].role, b->messages[i].role) &&
             same_str(a->messages[i].content, b->messages[i].content);
    return ok;
}

static int empty(const tb_serve_request *r)
{
    static const tb_serve_request zero;
    return memcmp(r, &zero, sizeof zero) == 0;
}

static void one(const uint8_t *data, size_t size, int chat)
{
    char *exact = malloc(size ? size : 1);
    if (!exact)
        abort();
    memcpy(exact, data, size);
    tb_serve_request r;
    tb_serve_error e;
    int rc = tb_serve_request_parse(exact, size, chat, &r, &e);

    if (rc != 0) {
        if (!e.message[0] || !empty(&r))
            fail("an error without a message, or with fields left set", chat);
        /* the field named is the body's (its top-level name) */
        if (e.param[0]) {
            size_t k = strcspn(e.param, "[.");
            char top[64];
            snprintf(top, sizeof top, "%.*s", (int)k, e.param);
            cJSON *j = cJSON_ParseWithLength(exact, size);
            int named = (j && cJSON_GetObjectItemCaseSensitive(j, top)) ||
                        (j && cJSON_GetObjectItemCaseSensitive(j, e.param)) || !strcmp(top, "messages") ||
                        !strcmp(top, "prompt") || strlen(e.param) == 63;
            cJSON_Delete(j);
            if (!named)
                fail("an error names a field the body does not have", chat);
        }
    } else {
        if ((chat && (!r.messages || r.prompt)) || (!chat && (!r.prompt || r.messages)))
            fail("no prompt (or messages) in an accepted request", chat);
        if (r.max_tokens < 1 || r.max_tokens > 1000000 || r.n_stop > TB_SERVE_MAX_STOP)
            fail("a field out of range", chat);
    }

    tb_serve_request want;
    int undecided = 0;
    int valid = expected(exact, size, chat, &want, &undecided);
    if (!undecided && valid != (rc == 0)) {
        fprintf(stderr, "parser: %s\n", rc ? e.message : "accepted");
        fail(valid ? "a valid body refused" : "an invalid body accepted", chat);
    }
    if (!undecided && valid && rc == 0 && !same(&r, &want))
        fail("the request differs from what the body says", chat);
    tb_serve_request_free(&want);

    /* whitespace around the body: after it always, before it unless the
     * body starts with a BOM (cJSON skips one only at the very start) */
    int bom = size >= 3 && memcmp(data, "\xEF\xBB\xBF", 3) == 0;
    size_t lead = bom ? 0 : 2;
    char *padded = malloc(size + lead + 3);
    if (!padded)
        abort();
    memcpy(padded, "\r ", lead);
    memcpy(padded + lead, data, size);
    memcpy(padded + lead + size, " \n\t", 3);
    tb_serve_request q;
    tb_serve_error qe;
    int qrc = tb_serve_request_parse(padded, size + lead + 3, chat, &q, &qe);
    if (qrc != rc || (rc == 0 && !same(&r, &q)) || (rc != 0 && strcmp(e.message, qe.message) != 0))
        fail("whitespace around the body changed the result", chat);
    tb_serve_request_free(&q);
    tb_serve_request_free(&r);
    free(padded);
    free(exact);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    one(data, size, 0);
    one(data, size, 1);
    return 0;
}
