/* fuzz_sse.c — libFuzzer target for plugins/http/sse.c.
 * Built and run by tests/fuzz/run.sh.
 *
 * The first input byte picks where the rest is cut into reads. For every
 * input these must hold:
 *   - the events (type, data, id) and the end-of-stream verdict are the same
 *     whether the stream arrives whole, cut as the seed says, or byte by
 *     byte (a server's writes may be split anywhere by TCP);
 *   - every event's data is NUL-terminated at data_len;
 *   - tb_oai_parse on every event's data returns a valid kind, a text of
 *     text_len bytes, and a message for errors. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct log {
    char *s;
    size_t len, cap;
} log_t;

static void log_put(log_t *l, const void *p, size_t n)
{
    if (l->len + n > l->cap) {
        l->cap = (l->len + n) * 2 + 64;
        l->s = realloc(l->s, l->cap);
        if (!l->s)
            abort();
    }
    memcpy(l->s + l->len, p, n);
    l->len += n;
}

static int on_event(void *user, const tb_sse_event *ev)
{
    log_t *l = user;
    if (ev->data[ev->data_len] != '\0')
        abort();
    size_t lens[3] = {ev->type_len, ev->data_len, ev->id_len};
    log_put(l, lens, sizeof lens);
    log_put(l, ev->type, ev->type_len);
    log_put(l, ev->data, ev->data_len);
    log_put(l, ev->id, ev->id_len);

    tb_oai_chunk c;
    tb_oai_kind k = tb_oai_parse(ev->data, ev->data_len, &c);
    if (k != c.kind || k < TB_OAI_CHUNK || k > TB_OAI_MALFORMED)
        abort();
    if (c.text && strlen(c.text) != c.text_len)
        abort();
    if ((k == TB_OAI_ERROR || k == TB_OAI_MALFORMED) && !c.message[0])
        abort();
    tb_oai_chunk_free(&c);
    return 0;
}

/* Parse with reads of the sizes `next` gives; returns the event log. */
static int run(const uint8_t *d, size_t n, uint32_t seed, int bytewise, log_t *out)
{
    tb_sse p;
    tb_sse_init(&p, 4096); /* small: reach the size bound too */
    size_t at = 0;
    int rc = TB_SSE_OK;
    uint32_t s = seed * 2654435761u + 1;
    while (at < n && rc == TB_SSE_OK) {
        size_t step;
        if (bytewise) {
            step = 1;
        } else {
            s = s * 1103515245u + 12345u;
            step = 1 + (s >> 16) % 17;
        }
        if (step > n - at)
            step = n - at;
        rc = tb_sse_feed(&p, (const char *)d + at, step, on_event, out);
        at += step;
    }
    int pending = rc == TB_SSE_OK ? tb_sse_end(&p) : -1;
    tb_sse_free(&p);
    log_put(out, &rc, sizeof rc);
    log_put(out, &pending, sizeof pending);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint32_t seed = data[0];
    data++;
    size--;
    log_t whole = {0}, cut = {0}, bytes = {0};
    {
        tb_sse p;
        tb_sse_init(&p, 4096);
        int rc = tb_sse_feed(&p, (const char *)data, size, on_event, &whole);
        int pending = rc == TB_SSE_OK ? tb_sse_end(&p) : -1;
        tb_sse_free(&p);
        log_put(&whole, &rc, sizeof rc);
        log_put(&whole, &pending, sizeof pending);
    }
    int rc = run(data, size, seed, 0, &cut);
    run(data, size, seed, 1, &bytes);
    /* After TOO_LARGE the events before it may differ by how much of the
     * over-long event each run had buffered; compare only clean runs. */
    if (rc == TB_SSE_OK &&
        (whole.len != cut.len || memcmp(whole.s, cut.s, whole.len) != 0 || whole.len != bytes.len ||
         memcmp(whole.s, bytes.s, whole.len) != 0))
        abort();
    free(whole.s);
    free(cut.s);
    free(bytes.s);
    return 0;
}
