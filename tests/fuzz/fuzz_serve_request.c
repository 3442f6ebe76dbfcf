/* fuzz_serve_request.c — libFuzzer target for the request bodies `tokbench
 * serve` parses: tb_serve_request_parse (core/serve_request.c) on any
 * bytes, as a /v1/completions body and as a /v1/chat/completions body,
 * in a buffer of exactly the body's size (libmicrohttpd's body is not
 * NUL-terminated for the parser: a read past it is an ASan error).
 *
 * For every input, in both forms:
 *   - an error is one of the parser's messages, with nothing left in the
 *     request (no prompt to free);
 *   - a request is accepted exactly when the body is valid by the rules of
 *     serve_request.h, checked here on cJSON's own parse: one JSON object
 *     with nothing after it, a "prompt" string (or a one-string array) or
 *     non-empty "messages" whose every content is a string or text parts,
 *     max_tokens absent, null or an integer in [1, 1000000], n absent or 1;
 *   - an accepted request carries what the body says: the prompt string,
 *     or the contents one per line; max_tokens (16 by default); stream and
 *     include_usage true only for JSON true; a prompt no longer than the
 *     body;
 *   - whitespace after the body (and before it, BOM aside) changes
 *     nothing. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "serve_request.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const messages[] = {
    "the body is not a JSON object",
    "bytes after the JSON object",
    "\"messages\" must be a non-empty array",
    "each message needs a \"content\" string (or text parts)",
    "\"prompt\" must be a string",
    "\"max_tokens\" must be an integer in [1, 1000000]",
    "only n = 1 is supported",
};

static void fail(const char *what, int chat)
{
    fprintf(stderr, "fuzz_serve_request (%s): %s\n", chat ? "chat" : "completions", what);
    abort();
}

/* A chat content: a string, or an array of objects with a "text" string;
 * appended to *p. */
static int content_ok(const cJSON *c, tb_str *p)
{
    if (cJSON_IsString(c)) {
        tb_str_append(p, c->valuestring);
        return 1;
    }
    if (!cJSON_IsArray(c))
        return 0;
    for (int i = 0; i < cJSON_GetArraySize(c); i++) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(c, i), "text");
        if (!cJSON_IsString(t))
            return 0;
        tb_str_append(p, t->valuestring);
    }
    return 1;
}

/* What the rules say of body[n]: 1 when it is a valid request, with the
 * prompt (malloc'd) and fields it should give; 0 when not. */
static int expected(const char *body, size_t n, int chat, tb_serve_request *want)
{
    memset(want, 0, sizeof *want);
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(body, n, &end, 0);
    int ok = cJSON_IsObject(j);
    while (ok && end < body + n && (*end == ' ' || *end == '\t' || *end == '\r' || *end == '\n'))
        end++;
    ok = ok && end == body + n;
    tb_str p = {0};
    if (ok && chat) {
        const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(j, "messages");
        ok = cJSON_IsArray(msgs) && cJSON_GetArraySize(msgs) > 0;
        for (int i = 0; ok && i < cJSON_GetArraySize(msgs); i++) {
            if (p.len) /* one per line; no line before the first non-empty one */
                tb_str_append(&p, "\n");
            ok = content_ok(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(msgs, i), "content"), &p);
        }
    } else if (ok) {
        const cJSON *pr = cJSON_GetObjectItemCaseSensitive(j, "prompt");
        if (cJSON_IsArray(pr))
            pr = cJSON_GetArraySize(pr) == 1 ? cJSON_GetArrayItem(pr, 0) : NULL;
        ok = cJSON_IsString(pr);
        if (ok)
            tb_str_append(&p, pr->valuestring);
    }
    if (ok) {
        const cJSON *mt = cJSON_GetObjectItemCaseSensitive(j, "max_tokens");
        if (!mt) /* the newer name, when the older is absent */
            mt = cJSON_GetObjectItemCaseSensitive(j, "max_completion_tokens");
        want->max_tokens = 16;
        if (mt && !cJSON_IsNull(mt)) {
            double v = mt->valuedouble;
            ok = cJSON_IsNumber(mt) && v >= 1 && v <= 1000000 && floor(v) == v;
            want->max_tokens = ok ? (uint32_t)v : 0;
        }
        const cJSON *nn = cJSON_GetObjectItemCaseSensitive(j, "n");
        ok = ok && (!cJSON_IsNumber(nn) || nn->valuedouble == 1);
        want->stream = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "stream"));
        const cJSON *so = cJSON_GetObjectItemCaseSensitive(j, "stream_options");
        want->include_usage = cJSON_IsObject(so) && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(so, "include_usage"));
    }
    cJSON_Delete(j);
    if (ok)
        want->prompt = tb_str_take(&p);
    else
        tb_str_free(&p);
    return ok;
}

static int same(const char *a_err, const tb_serve_request *a, const char *b_err, const tb_serve_request *b)
{
    if (a_err || b_err)
        return a_err && b_err && strcmp(a_err, b_err) == 0;
    return strcmp(a->prompt, b->prompt) == 0 && a->max_tokens == b->max_tokens && a->stream == b->stream &&
           a->include_usage == b->include_usage;
}

static void one(const uint8_t *data, size_t size, int chat)
{
    char *exact = malloc(size ? size : 1);
    if (!exact)
        abort();
    memcpy(exact, data, size);
    tb_serve_request r;
    const char *err = tb_serve_request_parse(exact, size, chat, &r);

    if (err) {
        size_t k = 0;
        while (k < sizeof messages / sizeof *messages && strcmp(err, messages[k]) != 0)
            k++;
        if (k == sizeof messages / sizeof *messages)
            fail("an error message not in the list", chat);
        if (r.prompt || r.max_tokens || r.stream || r.include_usage)
            fail("an error left fields set", chat);
    } else {
        if (!r.prompt || strlen(r.prompt) > size)
            fail("no prompt, or one longer than the body", chat);
        if (r.max_tokens < 1 || r.max_tokens > 1000000 || (r.stream != 0 && r.stream != 1) ||
            (r.include_usage != 0 && r.include_usage != 1))
            fail("a field out of range", chat);
    }

    tb_serve_request want;
    int valid = expected(exact, size, chat, &want);
    if (valid != !err) {
        fprintf(stderr, "parser: %s\n", err ? err : "accepted");
        fail(valid ? "a valid body refused" : "an invalid body accepted", chat);
    }
    if (valid && !same(NULL, &r, NULL, &want))
        fail("the request differs from what the body says", chat);
    free(want.prompt);

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
    const char *qerr = tb_serve_request_parse(padded, size + lead + 3, chat, &q);
    if (!same(err, &r, qerr, &q))
        fail("whitespace around the body changed the result", chat);
    free(q.prompt);
    free(r.prompt);
    free(padded);
    free(exact);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    one(data, size, 0);
    one(data, size, 1);
    return 0;
}
