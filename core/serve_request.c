/* serve_request.c — see serve_request.h. */
#include "serve_request.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* Text of a chat message's content: a string, or text parts. */
static int append_content(tb_str *p, const cJSON *content)
{
    if (cJSON_IsString(content)) {
        tb_str_append(p, content->valuestring);
        return 0;
    }
    if (!cJSON_IsArray(content))
        return -1;
    const cJSON *part;
    cJSON_ArrayForEach(part, content)
    {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsString(t))
            return -1;
        tb_str_append(p, t->valuestring);
    }
    return 0;
}

const char *tb_serve_request_parse(const char *body, size_t n, int chat, tb_serve_request *r)
{
    memset(r, 0, sizeof *r);
    /* One value and nothing after it: cJSON stops at the end of the first
     * value, and two bodies run together must not pass as the first. */
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(body, n, &end, 0);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return "the body is not a JSON object";
    }
    for (; end < body + n; end++)
        if (*end != ' ' && *end != '\t' && *end != '\n' && *end != '\r') {
            cJSON_Delete(j);
            return "bytes after the JSON object";
        }
    const char *bad = NULL;
    tb_str p = {0};
    if (chat) {
        const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(j, "messages"), *m;
        if (!cJSON_IsArray(msgs) || cJSON_GetArraySize(msgs) == 0)
            bad = "\"messages\" must be a non-empty array";
        cJSON_ArrayForEach(m, msgs)
        { /* no chat template: the contents, one per line */
            if (p.len)
                tb_str_append(&p, "\n");
            if (append_content(&p, cJSON_GetObjectItemCaseSensitive(m, "content")) != 0)
                bad = "each message needs a \"content\" string (or text parts)";
        }
    } else {
        const cJSON *pr = cJSON_GetObjectItemCaseSensitive(j, "prompt");
        if (cJSON_IsArray(pr) && cJSON_GetArraySize(pr) == 1)
            pr = cJSON_GetArrayItem(pr, 0);
        if (!cJSON_IsString(pr))
            bad = "\"prompt\" must be a string";
        else
            tb_str_append(&p, pr->valuestring);
    }
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(j, "max_tokens");
    if (!mt)
        mt = cJSON_GetObjectItemCaseSensitive(j, "max_completion_tokens");
    r->max_tokens = 16; /* OpenAI's default */
    if (mt && !cJSON_IsNull(mt)) {
        /* an integer: 2.5 is refused, not cut to 2 (as OpenAI and vLLM do) */
        if (!cJSON_IsNumber(mt) || mt->valuedouble < 1 || mt->valuedouble > 1e6 ||
            mt->valuedouble != (double)(uint32_t)mt->valuedouble)
            bad = "\"max_tokens\" must be an integer in [1, 1000000]";
        else
            r->max_tokens = (uint32_t)mt->valuedouble;
    }
    const cJSON *nn = cJSON_GetObjectItemCaseSensitive(j, "n");
    if (cJSON_IsNumber(nn) && nn->valuedouble != 1)
        bad = "only n = 1 is supported";
    r->stream = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "stream"));
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(j, "stream_options");
    r->include_usage = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(so, "include_usage"));
    cJSON_Delete(j);
    if (bad) {
        tb_str_free(&p);
        memset(r, 0, sizeof *r);
        return bad;
    }
    r->prompt = tb_str_take(&p);
    return NULL;
}
