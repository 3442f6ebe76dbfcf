/* fuzz_oai.c — libFuzzer target for the HTTP backend's JSON responses:
 * tb_oai_parse (plugins/http/sse.c) on any bytes, as plugins/http/client.c
 * calls it on a whole non-streamed body, on an error body (for the
 * server's message) and on each SSE event's data. (fuzz_sse reaches it
 * only through the event framing; this target feeds bodies directly.)
 *
 * For every input:
 *   - the kind is one of the four, and the same in out->kind;
 *   - a text is NUL-terminated at text_len; ERROR and MALFORMED carry a
 *     message, NUL-terminated inside the fixed buffer;
 *   - usage counts are -1 or in [0, 1e15];
 *   - a CHUNK or ERROR is one whole JSON value: nothing but whitespace
 *     after it (two chunks run together in one event, "{..}\n{..}", must
 *     not pass as the first one, silently dropping the second's text);
 *   - parsing is a function of the bytes: the same input with surrounding
 *     whitespace, or copied to a buffer of exactly its size, gives the
 *     same result. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "sse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const tb_oai_chunk *c, tb_oai_kind k)
{
    if (k != c->kind || k < TB_OAI_CHUNK || k > TB_OAI_MALFORMED)
        abort();
    if (c->text && strlen(c->text) != c->text_len)
        abort();
    if (!c->text && c->text_len)
        abort();
    if (memchr(c->message, '\0', sizeof c->message) == NULL)
        abort();
    if ((k == TB_OAI_ERROR || k == TB_OAI_MALFORMED) && !c->message[0])
        abort();
    if (c->completion_tokens < -1 || c->completion_tokens > 1000000000000000LL ||
        c->prompt_tokens < -1 || c->prompt_tokens > 1000000000000000LL)
        abort();
    if (k != TB_OAI_CHUNK && (c->text || c->finished || c->completion_tokens != -1 ||
                              c->prompt_tokens != -1))
        if (k != TB_OAI_MALFORMED) /* a malformed chunk may have read usage first */
            abort();
}

/* The bytes after the first JSON value of data[len], whitespace aside. */
static int trailing_bytes(const char *data, size_t len)
{
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(data, len, &end, 0);
    if (!j)
        return 0;
    cJSON_Delete(j);
    int n = 0;
    for (const char *p = end; p < data + len; p++)
        n += (unsigned char)*p > ' ';
    return n;
}

static int same(const tb_oai_chunk *a, const tb_oai_chunk *b)
{
    return a->kind == b->kind && a->finished == b->finished &&
           a->completion_tokens == b->completion_tokens && a->prompt_tokens == b->prompt_tokens &&
           !a->text == !b->text && a->text_len == b->text_len &&
           (!a->text || memcmp(a->text, b->text, a->text_len) == 0) &&
           strcmp(a->message, b->message) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* exactly size bytes on the heap: a read past the end is an ASan error */
    char *exact = malloc(size ? size : 1);
    if (!exact)
        return 0;
    memcpy(exact, data, size);
    tb_oai_chunk a, b;
    tb_oai_kind ka = tb_oai_parse(exact, size, &a);
    check(&a, ka);
    if ((ka == TB_OAI_CHUNK || ka == TB_OAI_ERROR) && trailing_bytes(exact, size)) {
        fprintf(stderr, "fuzz_oai: accepted a body with bytes after its JSON value\n");
        abort();
    }

    char *padded = malloc(size + 4);
    if (!padded)
        abort();
    memcpy(padded, " \r\n", 3);
    memcpy(padded + 3, data, size);
    padded[size + 3] = '\t';
    tb_oai_kind kb = tb_oai_parse(padded, size + 4, &b);
    check(&b, kb);
    /* whitespace around the body changes nothing */
    if (!same(&a, &b))
        abort();
    tb_oai_chunk_free(&a);
    tb_oai_chunk_free(&b);
    free(padded);
    free(exact);
    return 0;
}
