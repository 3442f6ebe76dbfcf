/* test_sse.c — plugins/http/sse.c: the event-stream parser on streams cut
 * at every byte, every line ending, comments, multi-line data, BOM, size
 * bound; and OpenAI chunk interpretation ([DONE], text, usage, errors,
 * malformed JSON). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "sse.h"

/* Events collected as "type|data|id" lines. */
typedef struct collected {
    char text[8192];
    size_t len;
    int n;
    int stop_after; /* stop the parser after this many events; 0 = never */
} collected;

static int collect(void *user, const tb_sse_event *ev)
{
    collected *c = user;
    CHECK(strlen(ev->data) == ev->data_len); /* NUL-terminated at data_len */
    int k = snprintf(c->text + c->len, sizeof c->text - c->len, "%.*s|%.*s|%.*s\n", (int)ev->type_len,
                     ev->type, (int)ev->data_len, ev->data, (int)ev->id_len, ev->id);
    if (k > 0)
        c->len += (size_t)k;
    c->n++;
    return c->stop_after && c->n >= c->stop_after;
}

/* Parse `s` fed in pieces cut at the given offsets (ascending, < len). */
static int parse_cut(const char *s, size_t len, const size_t *cuts, size_t ncuts, collected *c, int *pending)
{
    tb_sse p;
    tb_sse_init(&p, 0);
    memset(c, 0, sizeof *c);
    size_t at = 0;
    int rc = TB_SSE_OK;
    for (size_t k = 0; k <= ncuts && rc == TB_SSE_OK; k++) {
        size_t end = k < ncuts ? cuts[k] : len;
        rc = tb_sse_feed(&p, s + at, end - at, collect, c);
        at = end;
    }
    *pending = tb_sse_end(&p);
    tb_sse_free(&p);
    return rc;
}

static void parse_whole(const char *s, collected *c, int *pending)
{
    parse_cut(s, strlen(s), NULL, 0, c, pending);
}

/* The same events, whichever byte the stream is cut at (one cut, two
 * cuts, and byte by byte). */
static void check_every_cut(const char *s, const char *want, int want_pending)
{
    size_t len = strlen(s);
    collected c;
    int pending;
    parse_whole(s, &c, &pending);
    CHECK_STR(c.text, want);
    CHECK(pending == want_pending);
    for (size_t a = 0; a <= len; a++) {
        size_t cuts[1] = {a};
        parse_cut(s, len, cuts, 1, &c, &pending);
        if (strcmp(c.text, want) != 0 || pending != want_pending) {
            fprintf(stderr, "cut at %zu of \"%s\": got \"%s\"\n", a, s, c.text);
            CHECK(0);
            return;
        }
        for (size_t b = a; b <= len; b += 3) {
            size_t cuts2[2] = {a, b};
            parse_cut(s, len, cuts2, 2, &c, &pending);
            if (strcmp(c.text, want) != 0) {
                fprintf(stderr, "cuts at %zu, %zu: got \"%s\"\n", a, b, c.text);
                CHECK(0);
                return;
            }
        }
    }
    size_t *bytes = calloc(len + 1, sizeof *bytes);
    for (size_t i = 0; i < len; i++)
        bytes[i] = i + 1;
    parse_cut(s, len, bytes, len ? len - 1 : 0, &c, &pending);
    CHECK_STR(c.text, want);
    free(bytes);
}

static void test_basic_events(void)
{
    check_every_cut("data: hello\n\n", "|hello|\n", 0);
    check_every_cut("data: a\n\ndata: b\n\n", "|a|\n|b|\n", 0);
    /* one space after the colon is dropped, not more; no colon: empty value */
    check_every_cut("data:x\n\ndata:  y\n\ndata\n\n", "|x|\n| y|\n||\n", 0);
}

static void test_multiline_data(void)
{
    check_every_cut("data: line one\ndata: line two\ndata:\n\n", "|line one\nline two\n|\n", 0);
    check_every_cut("data: {\"a\":\ndata: 1}\n\n", "|{\"a\":\n1}|\n", 0);
}

static void test_line_endings(void)
{
    check_every_cut("data: a\r\n\r\ndata: b\r\rdata: c\n\r\n", "|a|\n|b|\n|c|\n", 0);
    /* CR then LF is one line end, CR CR two. */
    check_every_cut("data: a\r\r\ndata: b\r\n\n", "|a|\n|b|\n", 0);
}

static void test_comments_and_fields(void)
{
    check_every_cut(": keep-alive\n\n:\ndata: x\n: in between\ndata: y\n\n", "|x\ny|\n", 0);
    /* event type and id; type resets after each event, id persists */
    check_every_cut("event: delta\nid: 7\ndata: a\n\ndata: b\n\nid\ndata: c\n\n",
                    "delta|a|7\n|b|7\n|c|\n", 0);
    /* retry and unknown fields are ignored; a blank line without data
     * dispatches nothing and drops the pending type */
    check_every_cut("retry: 100\nfoo: bar\nevent: lost\n\ndata: d\n\n", "|d|\n", 0);
    /* an id containing NUL is ignored */
    const char s[] = "id: 1\ndata: a\n\nid: 2\0x\ndata: b\n\n";
    collected c;
    int pending;
    parse_cut(s, sizeof s - 1, NULL, 0, &c, &pending);
    CHECK_STR(c.text, "|a|1\n|b|1\n");
}

static void test_bom(void)
{
    check_every_cut("\xEF\xBB\xBF" "data: a\n\n", "|a|\n", 0);
    /* only one leading BOM is stripped; a second one is content */
    check_every_cut("\xEF\xBB\xBF\xEF\xBB\xBF" "data: a\n\n", "", 0);
    /* a partial BOM is content: the field name becomes "\xEF" "data" */
    check_every_cut("\xEF" "data: a\n\ndata: b\n\n", "|b|\n", 0);
}

static void test_truncated_stream(void)
{
    check_every_cut("data: a\n\ndata: b\n", "|a|\n", 1);
    check_every_cut("data: a\n\ndata: b", "|a|\n", 1);
    check_every_cut("data: a\n\n", "|a|\n", 0);
}

static void test_size_bound(void)
{
    tb_sse p;
    tb_sse_init(&p, 64);
    collected c = {0};
    char big[200];
    memset(big, 'x', sizeof big);
    CHECK(tb_sse_feed(&p, "data: ok\n\n", 10, collect, &c) == TB_SSE_OK);
    CHECK(tb_sse_feed(&p, "data: ", 6, collect, &c) == TB_SSE_OK);
    int rc = TB_SSE_OK;
    for (int i = 0; i < 3 && rc == TB_SSE_OK; i++)
        rc = tb_sse_feed(&p, big, 30, collect, &c);
    CHECK(rc == TB_SSE_TOO_LARGE);
    CHECK(tb_sse_feed(&p, "\n\ndata: later\n\n", 15, collect, &c) == TB_SSE_TOO_LARGE); /* sticky */
    CHECK(c.n == 1);
    tb_sse_free(&p);

    /* many data lines of one event add up to the bound too */
    tb_sse_init(&p, 64);
    rc = TB_SSE_OK;
    for (int i = 0; i < 20 && rc == TB_SSE_OK; i++)
        rc = tb_sse_feed(&p, "data: 0123456789\n", 17, collect, &c);
    CHECK(rc == TB_SSE_TOO_LARGE);
    tb_sse_free(&p);
}

static void test_handler_stops(void)
{
    tb_sse p;
    tb_sse_init(&p, 0);
    collected c = {0};
    c.stop_after = 1;
    const char *s = "data: a\n\ndata: b\n\n";
    CHECK(tb_sse_feed(&p, s, strlen(s), collect, &c) == TB_SSE_STOPPED);
    CHECK(c.n == 1);
    tb_sse_free(&p);
}

/* ------------------------------------------------ OpenAI chunks */

static tb_oai_kind oai(const char *s, tb_oai_chunk *c)
{
    return tb_oai_parse(s, strlen(s), c);
}

static void test_oai_done(void)
{
    tb_oai_chunk c;
    CHECK(oai("[DONE]", &c) == TB_OAI_DONE);
    tb_oai_chunk_free(&c);
    CHECK(oai(" [DONE]\r\n", &c) == TB_OAI_DONE);
    tb_oai_chunk_free(&c);
    CHECK(oai("[DONE]x", &c) == TB_OAI_MALFORMED);
    tb_oai_chunk_free(&c);
}

static void test_oai_chunks(void)
{
    tb_oai_chunk c;
    /* /v1/completions stream */
    CHECK(oai("{\"id\":\"c1\",\"choices\":[{\"index\":0,\"text\":\" hi\",\"finish_reason\":null}]}", &c) == TB_OAI_CHUNK);
    CHECK_STR(c.text, " hi");
    CHECK(c.text_len == 3 && !c.finished && c.completion_tokens == -1);
    tb_oai_chunk_free(&c);
    /* chat stream: role-only first chunk has no text */
    CHECK(oai("{\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}", &c) == TB_OAI_CHUNK);
    CHECK(c.text != NULL && c.text_len == 0);
    tb_oai_chunk_free(&c);
    CHECK(oai("{\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}", &c) == TB_OAI_CHUNK);
    CHECK(c.text == NULL);
    tb_oai_chunk_free(&c);
    CHECK(oai("{\"choices\":[{\"delta\":{\"content\":\"ab\"},\"finish_reason\":\"length\"}]}", &c) == TB_OAI_CHUNK);
    CHECK_STR(c.text, "ab");
    CHECK(c.finished);
    tb_oai_chunk_free(&c);
    /* reasoning models: reasoning text is output too, first */
    CHECK(oai("{\"choices\":[{\"delta\":{\"reasoning_content\":\"think \",\"content\":\"say\"}}]}", &c) == TB_OAI_CHUNK);
    CHECK_STR(c.text, "think say");
    tb_oai_chunk_free(&c);
    /* the include_usage chunk: no choices, usage */
    CHECK(oai("{\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":64,\"total_tokens\":76}}", &c) == TB_OAI_CHUNK);
    CHECK(c.text == NULL && c.completion_tokens == 64 && c.prompt_tokens == 12);
    tb_oai_chunk_free(&c);
    CHECK(oai("{\"usage\":{\"completion_tokens\":3}}", &c) == TB_OAI_CHUNK);
    CHECK(c.completion_tokens == 3 && c.prompt_tokens == -1);
    tb_oai_chunk_free(&c);
    /* a whole non-streamed chat response */
    CHECK(oai("{\"choices\":[{\"message\":{\"role\":\"assistant\",\"content\":\"w1 w2\"},\"finish_reason\":\"length\"}],"
              "\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":2}}", &c) == TB_OAI_CHUNK);
    CHECK_STR(c.text, "w1 w2");
    CHECK(c.finished && c.completion_tokens == 2);
    tb_oai_chunk_free(&c);
    /* usage: null is no usage */
    CHECK(oai("{\"choices\":[{\"text\":\"a\"}],\"usage\":null}", &c) == TB_OAI_CHUNK);
    CHECK(c.completion_tokens == -1);
    tb_oai_chunk_free(&c);
}

static void test_oai_errors(void)
{
    tb_oai_chunk c;
    CHECK(oai("{\"error\":{\"message\":\"overloaded\",\"type\":\"server_error\"}}", &c) == TB_OAI_ERROR);
    CHECK_STR(c.message, "overloaded");
    tb_oai_chunk_free(&c);
    CHECK(oai("{\"object\":\"error\",\"message\":\"bad model\",\"code\":400}", &c) == TB_OAI_ERROR);
    CHECK_STR(c.message, "bad model");
    tb_oai_chunk_free(&c);
    CHECK(oai("{\"error\":\"plain\"}", &c) == TB_OAI_ERROR);
    CHECK_STR(c.message, "plain");
    tb_oai_chunk_free(&c);
}

static void test_oai_malformed(void)
{
    static const char *const bad[] = {
        "", "   ", "{", "{\"choices\":[{\"text\":\"a\"}]", "garbage", "[1,2]", "42", "\"str\"",
        "{}", "{\"id\":1}", "{\"choices\":{}}", "{\"choices\":[1]}", "{\"choices\":[{\"text\":5}]}",
        "{\"choices\":[{\"delta\":\"x\"}]}", "{\"choices\":[{\"delta\":{\"content\":7}}]}",
        "{\"choices\":[{\"finish_reason\":1}]}", "{\"usage\":5}", "{\"choices\":[],\"usage\":[]}",
        "\x01\x02\xff",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        tb_oai_chunk c;
        tb_oai_kind k = oai(bad[i], &c);
        if (k != TB_OAI_MALFORMED)
            fprintf(stderr, "accepted malformed chunk \"%s\"\n", bad[i]);
        CHECK(k == TB_OAI_MALFORMED);
        CHECK(c.message[0] != '\0');
        tb_oai_chunk_free(&c);
    }
    /* not NUL-terminated input is read to len only */
    tb_oai_chunk c;
    CHECK(tb_oai_parse("[DONE]garbage", 6, &c) == TB_OAI_DONE);
    tb_oai_chunk_free(&c);
}

/* Usage counts: an integer in [0, 2^32 - 2], else the chunk is malformed
 * and the message names the value (never a count cut to 32 bits). */
static void test_oai_usage_counts(void)
{
    tb_oai_chunk c;
    CHECK(oai("{\"usage\":{\"completion_tokens\":4294967294,\"prompt_tokens\":0}}", &c) == TB_OAI_CHUNK);
    CHECK(c.completion_tokens == 4294967294LL && c.prompt_tokens == 0);
    tb_oai_chunk_free(&c);
    CHECK(oai("{\"usage\":{\"completion_tokens\":null}}", &c) == TB_OAI_CHUNK);
    CHECK(c.completion_tokens == -1);
    tb_oai_chunk_free(&c);
    static const struct {
        const char *json, *named;
    } bad[] = {
        {"{\"choices\":[],\"usage\":{\"completion_tokens\":4294967302}}", "usage.completion_tokens 4294967302 "},
        {"{\"usage\":{\"completion_tokens\":4294967295}}", "usage.completion_tokens 4294967295 "},
        {"{\"usage\":{\"completion_tokens\":1e15}}", "usage.completion_tokens 1000000000000000 "},
        {"{\"usage\":{\"completion_tokens\":1e300}}", "usage.completion_tokens 1.0000000000000001e+300 "},
        {"{\"usage\":{\"completion_tokens\":-3}}", "usage.completion_tokens -3 "},
        {"{\"usage\":{\"completion_tokens\":2.5}}", "usage.completion_tokens 2.5 "},
        {"{\"usage\":{\"completion_tokens\":\"12\"}}", "usage.completion_tokens \"12\" is not a number"},
        {"{\"usage\":{\"completion_tokens\":5,\"prompt_tokens\":8589934592}}", "usage.prompt_tokens 8589934592 "},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        tb_oai_kind k = oai(bad[i].json, &c);
        CHECK(k == TB_OAI_MALFORMED);
        if (!strstr(c.message, bad[i].named))
            fprintf(stderr, "%s: message \"%s\" does not name \"%s\"\n", bad[i].json, c.message, bad[i].named);
        CHECK(strstr(c.message, bad[i].named) != NULL);
        tb_oai_chunk_free(&c);
    }
}

int main(void)
{
    test_basic_events();
    test_multiline_data();
    test_line_endings();
    test_comments_and_fields();
    test_bom();
    test_truncated_stream();
    test_size_bound();
    test_handler_stops();
    test_oai_done();
    test_oai_chunks();
    test_oai_errors();
    test_oai_malformed();
    test_oai_usage_counts();
    return check_done();
}
