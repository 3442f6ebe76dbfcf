/* fuzz_http_options.c — libFuzzer target for the http backend's JSON
 * options (plugins/http/json_options.c): `extra_json` (tb_http_extra_json,
 * then tb_http_extra_merge into a request body as http.c builds one) and
 * `headers`/`secret_headers` (tb_http_header_lines, what http.c checks at
 * load and turns into libcurl header lines).
 *
 * The input is up to two suite values separated by a NUL byte (a suite
 * value has no NUL); each is checked both as extra_json and as headers.
 *
 * For every value:
 *   - extra_json is accepted exactly when it is one JSON object with
 *     nothing after it but whitespace (checked on cJSON's own parse);
 *     merged into a request body, each of its names is in the body once,
 *     with its last value in extra_json, the body's other fields are kept,
 *     and the printed body parses back to an object with as many fields;
 *   - headers are accepted exactly when the value is such an object of
 *     strings, each name an HTTP token and each value free of control
 *     characters but tab (checked here character by character); "" gives
 *     no lines; each line is "name: value" of the members in order, so no
 *     value can end its line or add a header. */
#include "fuzz_common.h" /* first: it defines _GNU_SOURCE */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "json_options.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what, const char *text)
{
    fprintf(stderr, "fuzz_http_options: %s: %.200s\n", what, text);
    abort();
}

/* cJSON's own parse of text: the value when it is an object with nothing
 * after it but whitespace (cJSON's: any byte up to the space), else NULL. */
static cJSON *whole_object(const char *text)
{
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithOpts(text, &end, 0);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return NULL;
    }
    while (*end && (unsigned char)*end <= ' ')
        end++;
    if (*end) {
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

/* The last member of o named name (a duplicate name: the last one wins). */
static const cJSON *last_named(const cJSON *o, const char *name)
{
    const cJSON *it, *found = NULL;
    cJSON_ArrayForEach(it, o) if (strcmp(it->string, name) == 0) found = it;
    return found;
}

/* The same JSON text: cJSON_Compare says 1e999 (infinity) differs from
 * itself, and the body carries text. */
static int same_text(const cJSON *a, const cJSON *b)
{
    char *x = cJSON_PrintUnformatted(a), *y = cJSON_PrintUnformatted(b);
    if (!x || !y)
        abort();
    int same = strcmp(x, y) == 0;
    free(x);
    free(y);
    return same;
}

static void check_extra(const char *text)
{
    cJSON *extra = tb_http_extra_json(text), *want = whole_object(text);
    if (!extra != !want)
        fail(extra ? "extra_json accepted what is not one object" : "extra_json refused an object", text);
    cJSON_Delete(want);
    if (!extra)
        return;

    /* a body as http.c's make_body writes one */
    cJSON *body = cJSON_CreateObject();
    cJSON_AddStringToObject(body, "model", "m");
    cJSON_AddStringToObject(body, "prompt", "p");
    cJSON_AddNumberToObject(body, "max_tokens", 16);
    cJSON_AddNumberToObject(body, "temperature", 0);
    cJSON_AddBoolToObject(body, "stream", 1);
    cJSON_AddTrueToObject(cJSON_AddObjectToObject(body, "stream_options"), "include_usage");
    cJSON *before = cJSON_Duplicate(body, 1);
    tb_http_extra_merge(body, extra);

    const cJSON *it, *other;
    int fields = 0;
    cJSON_ArrayForEach(it, body)
    {
        fields++;
        cJSON_ArrayForEach(other, body) if (other != it && strcmp(other->string, it->string) == 0)
            fail("a field twice in the merged body", text);
        const cJSON *from = last_named(extra, it->string);
        if (!from)
            from = cJSON_GetObjectItemCaseSensitive(before, it->string);
        if (!from || !same_text(it, from))
            fail("a merged field is not extra_json's last or the body's own", text);
    }
    cJSON_ArrayForEach(it, extra) if (!cJSON_GetObjectItemCaseSensitive(body, it->string))
        fail("a member of extra_json missing from the body", text);
    cJSON_ArrayForEach(it, before) if (!cJSON_GetObjectItemCaseSensitive(body, it->string))
        fail("a field of the body lost", text);

    char *printed = cJSON_PrintUnformatted(body);
    if (!printed)
        abort();
    cJSON *back = cJSON_Parse(printed);
    if (!cJSON_IsObject(back) || cJSON_GetArraySize(back) != fields)
        fail("the merged body does not parse back", text);
    cJSON_Delete(back);
    free(printed);
    cJSON_Delete(before);
    cJSON_Delete(body);
    cJSON_Delete(extra);
}

static int is_token(const char *s)
{
    static const char tchar[] = "!#$%&'*+-.^_`|~0123456789"
                                "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    return *s && strspn(s, tchar) == strlen(s);
}

static int is_field_value(const char *s)
{
    for (size_t i = 0; s[i]; i++)
        if (((unsigned char)s[i] < 0x20 && s[i] != '\t') || s[i] == 0x7F)
            return 0;
    return 1;
}

static void check_headers(const char *text)
{
    char *unset = NULL, **lines = &unset; /* must be set either way */
    int k = tb_http_header_lines(text, &lines);
    if (k < -1 || (k <= 0 && lines) || (k > 0 && !lines))
        fail("a count and lines that disagree", text);
    if (!*text) {
        if (k != 0)
            fail("\"\" is not zero lines", text);
        return;
    }
    cJSON *j = whole_object(text);
    int valid = j != NULL;
    const cJSON *it;
    cJSON_ArrayForEach(it, j) if (!cJSON_IsString(it) || !is_token(it->string) || !is_field_value(it->valuestring))
        valid = 0;
    if (valid != (k >= 0))
        fail(valid ? "headers refused a valid object" : "headers accepted an invalid value", text);
    if (valid && k != cJSON_GetArraySize(j))
        fail("not one line per member", text);
    int i = 0;
    cJSON_ArrayForEach(it, j)
    {
        if (i >= k)
            break;
        const char *line = lines[i++];
        size_t name = strlen(it->string);
        if (strncmp(line, it->string, name) != 0 || strncmp(line + name, ": ", 2) != 0 ||
            strcmp(line + name + 2, it->valuestring) != 0)
            fail("a line is not \"name: value\"", text);
        if (strpbrk(line, "\r\n") || strchr(line, ':') != line + name)
            fail("a line that could add a header", text);
    }
    cJSON_Delete(j);
    tb_http_header_lines_free(lines, k);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *part[2];
    size_t len[2];
    size_t n = fuzz_split(data, size, part, len, 2);
    for (size_t p = 0; p < n; p++) {
        /* a suite value is a C string: up to its first NUL */
        char *text = malloc(len[p] + 1);
        if (!text)
            abort();
        memcpy(text, part[p], len[p]);
        text[len[p]] = '\0';
        check_extra(text);
        check_headers(text);
        free(text);
    }
    return 0;
}
