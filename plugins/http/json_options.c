/* json_options.c — see json_options.h. */
#define _GNU_SOURCE /* explicit_bzero */
#include "json_options.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

cJSON *tb_http_extra_json(const char *text)
{
    /* require_null_terminated: `{"a": 1} {"b": 2}` is a mistake, not {"a": 1} */
    cJSON *j = cJSON_ParseWithOpts(text, NULL, 1);
    if (cJSON_IsObject(j))
        return j;
    cJSON_Delete(j);
    return NULL;
}

int tb_http_extra_merge(cJSON *body, const cJSON *extra)
{
    const cJSON *it;
    cJSON_ArrayForEach(it, extra)
    {
        cJSON_DeleteItemFromObjectCaseSensitive(body, it->string);
        cJSON *copy = cJSON_Duplicate(it, 1);
        if (!copy || !cJSON_AddItemToObject(body, it->string, copy)) {
            cJSON_Delete(copy);
            return -1;
        }
    }
    return 0;
}

/* An HTTP field name: one or more token characters (RFC 9110, 5.1). */
static int is_token(const char *s)
{
    if (!*s)
        return 0;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              strchr("!#$%&'*+-.^_`|~", c)))
            return 0;
    }
    return 1;
}

/* An HTTP field value: no control character but tab (CR or LF would let a
 * value end its line and add another header). */
static int is_field_value(const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if ((c < 0x20 && c != '\t') || c == 0x7F)
            return 0;
    }
    return 1;
}

int tb_http_field_value_ok(const char *s)
{
    return is_field_value(s);
}

int tb_http_header_lines(const char *text, char ***lines)
{
    *lines = NULL;
    if (!*text)
        return 0;
    cJSON *j = tb_http_extra_json(text), *it;
    if (!j)
        return -1;
    int n = 0, ok = 1;
    cJSON_ArrayForEach(it, j)
    {
        if (!cJSON_IsString(it) || !is_token(it->string) || !is_field_value(it->valuestring))
            ok = 0;
        n++;
    }
    char **out = ok && n ? calloc((size_t)n, sizeof *out) : NULL;
    int k = 0;
    if (out)
        cJSON_ArrayForEach(it, j)
        {
            size_t len = strlen(it->string) + strlen(it->valuestring) + 3;
            if (!(out[k] = malloc(len)))
                break;
            snprintf(out[k], len, "%s: %s", it->string, it->valuestring);
            k++;
        }
    cJSON_Delete(j);
    if (!ok || (n && k < n)) { /* not such an object, or out of memory */
        tb_http_header_lines_free(out, k);
        return -1;
    }
    *lines = out;
    return n;
}

void tb_http_header_lines_free(char **lines, int n)
{
    for (int i = 0; lines && i < n; i++) {
        explicit_bzero(lines[i], strlen(lines[i]));
        free(lines[i]);
    }
    free(lines);
}
