/* test_workload.c — plugins/http/workload.c (docs/METRICS.md, "Serving
 * workloads"): length distributions drawn many times (mean, standard
 * deviation, bounds, a histogram's proportions), histogram and dataset
 * files with every error naming file, line and field, and the sessions of
 * a call (shared prefixes per group, the same in every call; multi-turn
 * histories with the answers; a dataset's turns and reference lengths
 * through the tokenizer).
 *
 * usage: test_workload TOKENIZER_JSON */
#define _GNU_SOURCE
#include "workload.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

/* Mean and standard deviation of n draws of d. */
static void moments(const tb_len_dist *d, size_t n, double *mean, double *sd, uint32_t *lo, uint32_t *hi)
{
    tb_arrival_rng r;
    tb_arrival_rng_seed(&r, 42);
    double s = 0, s2 = 0;
    *lo = UINT32_MAX;
    *hi = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t x = tb_len_draw(d, &r);
        s += x;
        s2 += (double)x * x;
        *lo = x < *lo ? x : *lo;
        *hi = x > *hi ? x : *hi;
    }
    *mean = s / (double)n;
    *sd = sqrt(s2 / (double)n - *mean * *mean);
}

static void test_distributions(void)
{
    const size_t n = 200000;
    double m, sd;
    uint32_t lo, hi;
    tb_len_dist fixed = {.kind = TB_LEN_FIXED, .mean = 128, .stdev = 50, .min = 128, .max = 128};
    moments(&fixed, 1000, &m, &sd, &lo, &hi);
    CHECK(lo == 128 && hi == 128);
    /* wide bounds: the draws' moments are the asked ones (4 sigma of the
     * mean's sampling error: sd / sqrt(n) ~ 0.11) */
    const tb_len_kind kinds[] = {TB_LEN_UNIFORM, TB_LEN_NORMAL, TB_LEN_LOGNORMAL};
    for (size_t k = 0; k < 3; k++) {
        tb_len_dist d = {.kind = kinds[k], .mean = 500, .stdev = 50, .min = 1, .max = 100000};
        moments(&d, n, &m, &sd, &lo, &hi);
        CHECK_NEAR(m, 500, 0.5);
        CHECK_NEAR(sd, 50, 0.5);
        if (kinds[k] == TB_LEN_UNIFORM) /* [500 - 50 sqrt 3, 500 + 50 sqrt 3] */
            CHECK(lo >= 413 && hi <= 587 && lo <= 415 && hi >= 585);
    }
    /* lognormal: right-skewed, its median below its mean: exp(mu) */
    tb_len_dist ln = {.kind = TB_LEN_LOGNORMAL, .mean = 100, .stdev = 100, .min = 1, .max = 1000000};
    moments(&ln, n, &m, &sd, &lo, &hi);
    CHECK_NEAR(m, 100, 1.5);
    CHECK_NEAR(sd, 100, 5);
    /* clipping: every draw inside [min, max] */
    tb_len_dist cl = {.kind = TB_LEN_NORMAL, .mean = 100, .stdev = 100, .min = 60, .max = 140};
    moments(&cl, 10000, &m, &sd, &lo, &hi);
    CHECK(lo == 60 && hi == 140);
}

static void test_histogram(void)
{
    char err[512];
    tb_len_hist *h = NULL;
    CHECK(tb_len_hist_parse("h.txt", "# lengths\n5 1\n\n9-11 3  # three lengths, three times the weight\n", &h, err,
                            sizeof err) == 0);
    CHECK(h && h->n == 2);
    if (h) {
        CHECK_NEAR(h->mean, (5 * 1 + 10 * 3) / 4.0, 1e-12);
        tb_len_dist d = {.kind = TB_LEN_HISTOGRAM, .min = 1, .max = 100, .hist = h};
        tb_arrival_rng r;
        tb_arrival_rng_seed(&r, 7);
        size_t count[12] = {0}, other = 0, n = 40000;
        for (size_t i = 0; i < n; i++) {
            uint32_t x = tb_len_draw(&d, &r);
            if (x < 12)
                count[x]++;
            else
                other++;
        }
        CHECK(other == 0 && count[5] + count[9] + count[10] + count[11] == n);
        CHECK_NEAR((double)count[5] / n, 0.25, 0.01);
        CHECK_NEAR((double)count[9] / n, 0.25, 0.01);
        CHECK_NEAR((double)count[11] / n, 0.25, 0.01);
        tb_len_hist_free(h);
    }
    /* errors: file and line, what was expected */
    static const struct {
        const char *text, *want;
    } bad[] = {
        {"5 1\nx 2\n", "h.txt:2: bin \"x 2\": expected a length"},
        {"5 1\n9-7 2\n", "h.txt:2: bin \"9-7 2\""},
        {"5 1\n\n0 2\n", "h.txt:3: bin"},
        {"5 -1\n", "h.txt:1: weight \"-1\": expected a number >= 0"},
        {"5 1 2\n", "h.txt:1: weight \"1 2\""},
        {"5 0\n", "h.txt: no bin with a positive weight"},
        {"", "h.txt: no bin with a positive weight"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err[0] = '\0';
        CHECK(tb_len_hist_parse("h.txt", bad[i].text, &h, err, sizeof err) == -1 && h == NULL);
        if (!strstr(err, bad[i].want))
            fprintf(stderr, "  histogram %zu: \"%s\", want \"%s\"\n", i, err, bad[i].want);
        CHECK(strstr(err, bad[i].want) != NULL);
    }
    CHECK(tb_len_hist_load("/nonexistent/h.txt", &h, err, sizeof err) == -1);
    CHECK(strstr(err, "histogram /nonexistent/h.txt: No such file") != NULL);
}

static void test_dataset(void)
{
    char err[512];
    tb_dataset *d = NULL;
    const char *ok =
        "{\"id\": 1, \"conversations\": [{\"from\": \"system\", \"value\": \"be brief\"}, {\"from\": \"human\", "
        "\"value\": \"hi\"}, {\"from\": \"gpt\", \"value\": \"hello\"}, {\"from\": \"human\", \"value\": \"more\"}]}\n"
        "\n"
        "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}, {\"type\": \"text\", "
        "\"text\": \"b\"}]}, {\"role\": \"assistant\", \"content\": \"ok\"}]}\n";
    CHECK(tb_dataset_parse("d.jsonl", ok, &d, err, sizeof err) == 0);
    CHECK(d && d->n == 2);
    if (d && d->n == 2) {
        CHECK(d->conv[0].line == 1 && d->conv[1].line == 3);
        CHECK(strcmp(d->conv[0].system, "be brief") == 0);
        CHECK(d->conv[0].n_turns == 2);
        CHECK(strcmp(d->conv[0].turns[0].user, "hi") == 0 && strcmp(d->conv[0].turns[0].assistant, "hello") == 0);
        CHECK(strcmp(d->conv[0].turns[1].user, "more") == 0 && d->conv[0].turns[1].assistant == NULL);
        CHECK(d->conv[1].system == NULL && strcmp(d->conv[1].turns[0].user, "ab") == 0);
        CHECK(tb_dataset_eligible(d, 1) == 2 && tb_dataset_eligible(d, 2) == 1 && tb_dataset_eligible(d, 3) == 0);
    }
    tb_dataset_free(d);
    static const struct {
        const char *text, *want;
    } bad[] = {
        {"{\"conversations\": []}\n", "d.jsonl:1: field conversations: expected a non-empty list"},
        {"[1]\n", "d.jsonl:1: not a JSON object"},
        {"{\"conversations\": [{\"from\": \"human\", \"value\": \"x\"}\n", "d.jsonl:1: not valid JSON (at column 50)"},
        {"{\"prompt\": \"x\"}\n", "d.jsonl:1: no \"conversations\" (ShareGPT) or \"messages\" (OpenAI chat) list"},
        {"\n{\"conversations\": [{\"from\": \"human\", \"value\": 3}]}\n",
         "d.jsonl:2: field conversations[0].value: expected a string"},
        {"{\"conversations\": [{\"from\": \"robot\", \"value\": \"x\"}]}\n",
         "d.jsonl:1: field conversations[0].from: \"robot\": expected human"},
        {"{\"conversations\": [{\"value\": \"x\"}]}\n", "d.jsonl:1: field conversations[0].from: expected a string"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"user\", \"content\": \"b\"}]}\n",
         "d.jsonl:1: field messages[1].role: a user message where an assistant message was expected"},
        {"{\"messages\": [{\"role\": \"assistant\", \"content\": \"a\"}]}\n",
         "d.jsonl:1: field messages[0].role: a assistant message where a user message was expected"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"system\", \"content\": \"b\"}]}\n",
         "d.jsonl:1: field messages[1].role: a system message"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\"}]}]}\n",
         "d.jsonl:1: field messages[0].content[0]: expected a text part"},
        {"{\"messages\": [{\"role\": \"user\"}]}\n", "d.jsonl:1: field messages[0].content: expected a string"},
        {"{\"messages\": [{\"role\": \"tool\", \"content\": \"x\"}]}\n",
         "d.jsonl:1: field messages[0].role: \"tool\": expected user, assistant"},
        {"{\"messages\": [{\"role\": \"system\", \"content\": \"x\"}]}\n", "d.jsonl:1: field messages: no user message"},
        {"\n\n", "d.jsonl: no conversation"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err[0] = '\0';
        CHECK(tb_dataset_parse("d.jsonl", bad[i].text, &d, err, sizeof err) == -1 && d == NULL);
        if (!strstr(err, bad[i].want))
            fprintf(stderr, "  dataset %zu: \"%s\", want \"%s\"\n", i, err, bad[i].want);
        CHECK(strstr(err, bad[i].want) != NULL);
    }
}

/* Issue 38 item 15: weights whose sum passes DBL_MAX are refused (every
 * draw came from the last bin); a subnormal weight is a number. */
static void test_histogram_weights(void)
{
    char err[512] = "";
    tb_len_hist *h = NULL;
    CHECK(tb_len_hist_parse("h.txt", "5 1e308\n9 1e308\n", &h, err, sizeof err) == -1 && h == NULL);
    CHECK_CONTAINS(err, "h.txt:2: the weights add up past the largest number a double holds");
    err[0] = '\0';
    CHECK(tb_len_hist_parse("h.txt", "5 1e-320\n9 1e-320\n", &h, err, sizeof err) == 0);
    if (!h) {
        fprintf(stderr, "  subnormal weights: %s\n", err);
        return;
    }
    tb_len_dist d = {.kind = TB_LEN_HISTOGRAM, .min = 1, .max = 100, .hist = h};
    tb_arrival_rng r;
    tb_arrival_rng_seed(&r, 7);
    size_t fives = 0, nines = 0, n = 4000;
    for (size_t i = 0; i < n; i++) {
        uint32_t x = tb_len_draw(&d, &r);
        fives += x == 5;
        nines += x == 9;
    }
    CHECK(fives + nines == n);
    CHECK_NEAR((double)fives / n, 0.5, 0.05);
    tb_len_hist_free(h);
}

/* Issue 38 item 15: what a dataset line must be, each fault named. */
static void test_dataset_strict(void)
{
    char deep[2200];
    size_t k = (size_t)snprintf(deep, sizeof deep, "{\"conversations\": ");
    for (int i = 0; i < 1001; i++)
        deep[k++] = '[';
    for (int i = 0; i < 1001; i++)
        deep[k++] = ']';
    snprintf(deep + k, sizeof deep - k, "}\n");
    const struct {
        const char *text, *want;
    } bad[] = {
        {"{\"conversations\": [{\"from\": \"human\", \"value\": \"x\"}]} x\n",
         "d.jsonl:1: text after the JSON object at column 54 (expected one object a line)"},
        {"{\"conversations\": [{\"from\": \"human\", \"value\": \"x\"}]}{}\n", "d.jsonl:1: text after the JSON object"},
        {"{\"conversations\": [{\"from\": \"human\", \"value\": \"x\"}], \"conversations\": []}\n",
         "d.jsonl:1: key \"conversations\" is set twice in one object"},
        {"{\"conversations\": [{\"from\": \"human\", \"value\": \"x\", \"value\": \"y\"}]}\n",
         "d.jsonl:1: key \"value\" is set twice in one object"},
        {"{\"conversations\": [{\"from\": \"human\", \"value\": \"\"}]}\n",
         "d.jsonl:1: field conversations[0].value: an empty user message (a prompt needs text)"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \" \\n\"}]}\n",
         "d.jsonl:1: field messages[0].content: an empty user message"},
        {deep, "d.jsonl:1: nested 1002 levels deep, more than the 1000 a line may have"},
        {"{\"conversations\": [{\"from\": \"human\", \"value\": \"a\\ud800b\"}]}\n",
         "d.jsonl:1: a lone UTF-16 surrogate \\uD800 at column 49 (not a character)"},
        {"{\"conversations\": [{\"from\": \"human\", \"value\": \"\\udc00\"}]}\n", "a lone UTF-16 surrogate \\uDC00"},
        /* bytes that are not UTF-8 (the server would refuse every body) */
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"caf\xe9 au lait\"}]}\n",
         "d.jsonl:1: field messages[0].content: not valid UTF-8 (byte 0xE9 at byte 3 of the text)"},
        {"{\"conversations\": [{\"from\": \"system\", \"value\": \"ok\"}, {\"from\": \"human\", \"value\": \"x\"}, "
         "{\"from\": \"gpt\", \"value\": \"\xc0\xaf\"}]}\n",
         "d.jsonl:1: field conversations[2].value: not valid UTF-8 (byte 0xC0 at byte 0 of the text)"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\xed\xa0\x80\"}]}]}\n",
         "d.jsonl:1: field messages[0].content: not valid UTF-8 (byte 0xED at byte 1"},
    };
    char err[512];
    tb_dataset *d = NULL;
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err[0] = '\0';
        CHECK(tb_dataset_parse("d.jsonl", bad[i].text, &d, err, sizeof err) == -1 && d == NULL);
        if (!strstr(err, bad[i].want))
            fprintf(stderr, "  dataset %zu: \"%s\", want \"%s\"\n", i, err, bad[i].want);
        CHECK(strstr(err, bad[i].want) != NULL);
        tb_dataset_free(d);
        d = NULL;
    }
    /* a pair of surrogates is one character, and whitespace after the
     * object is no fault */
    CHECK(tb_dataset_parse("d.jsonl", "{\"conversations\": [{\"from\": \"human\", \"value\": \"\\ud83d\\ude00\"}]}  \r\n",
                           &d, err, sizeof err) == 0);
    tb_dataset_free(d);
}

static void test_sessions(const char *tok_path)
{
    char err[512];
    tb_tokenizer *tok = NULL;
    if (tb_tokenizer_load(tok_path, &tok, err, sizeof err) != 0) {
        fprintf(stderr, "test_workload: %s\n", err);
        CHECK(0);
        return;
    }
    tb_prompt_vocab *v = tb_prompt_vocab_new(tok);
    CHECK(v != NULL);
    /* shared prefix: 2 groups of 10-token system prompts, 5-token users */
    tb_workload w = {.prompt = {.kind = TB_LEN_FIXED, .mean = 5, .min = 5, .max = 5},
                     .output = {.kind = TB_LEN_UNIFORM, .mean = 20, .stdev = 5, .min = 1, .max = 40},
                     .prefix_groups = 2, .prefix_tokens = 10, .turns = 1};
    tb_session *a = NULL, *b = NULL;
    CHECK(tb_sessions_make(&w, v, tok, 1, 99, 4, &a, err, sizeof err) == 0);
    CHECK(tb_sessions_make(&w, v, tok, 2, 99, 4, &b, err, sizeof err) == 0); /* another call, same prefix seed */
    if (a && b) {
        CHECK(strcmp(a[0].system, a[2].system) == 0 && strcmp(a[1].system, a[3].system) == 0);
        CHECK(strcmp(a[0].system, a[1].system) != 0);
        CHECK(strcmp(a[0].system, b[0].system) == 0); /* what a prefix cache keeps */
        CHECK(strcmp(a[0].user[0], b[0].user[0]) != 0);
        for (int i = 0; i < 4; i++) {
            char *p = tb_session_prompt(&a[i], 0);
            CHECK(tb_tokenizer_encode(tok, p, strlen(p), NULL, 0) == 15);
            CHECK(tb_tokenizer_encode(tok, a[i].system, strlen(a[i].system), NULL, 0) == 10);
            CHECK(a[i].max_tokens[0] >= 11 && a[i].max_tokens[0] <= 29); /* 20 +- 5 sqrt 3, rounded */
            free(p);
        }
    }
    tb_sessions_free(a, 4);
    tb_sessions_free(b, 4);
    /* multi-turn: turn t's messages are the history, answers included */
    w.prefix_groups = 0;
    w.turns = 3;
    CHECK(tb_sessions_make(&w, v, tok, 1, 99, 2, &a, err, sizeof err) == 0);
    if (a) {
        a[0].answer[0] = strdup(" answer one");
        a[0].answer[1] = strdup(" answer two");
        tb_message m[8];
        size_t n = tb_session_messages(&a[0], 2, m);
        CHECK(n == 5);
        CHECK(strcmp(m[0].role, "user") == 0 && strcmp(m[1].role, "assistant") == 0 && strcmp(m[4].role, "user") == 0);
        CHECK(strcmp(m[1].content, " answer one") == 0 && strcmp(m[3].content, " answer two") == 0);
        char *p = tb_session_prompt(&a[0], 2), *want = NULL;
        if (asprintf(&want, "%s answer one%s answer two%s", a[0].user[0], a[0].user[1], a[0].user[2]) < 0)
            want = NULL;
        CHECK(p && want && strcmp(p, want) == 0);
        free(p);
        free(want);
        CHECK(tb_session_messages(&a[0], 0, m) == 1);
    }
    tb_sessions_free(a, 2);
    /* a dataset: its user turns, output lengths from the references */
    tb_dataset *d = NULL;
    const char *text = "{\"conversations\": [{\"from\": \"human\", \"value\": \"one\"}, {\"from\": \"gpt\", \"value\": "
                       "\" the the the\"}, {\"from\": \"human\", \"value\": \"two\"}]}\n"
                       "{\"conversations\": [{\"from\": \"human\", \"value\": \"solo\"}]}\n";
    CHECK(tb_dataset_parse("d.jsonl", text, &d, err, sizeof err) == 0);
    tb_workload wd = {.prompt = w.prompt, .output = {.kind = TB_LEN_FIXED, .mean = 7, .min = 7, .max = 7},
                      .turns = 2, .dataset = d, .output_from_reference = 1};
    CHECK(tb_sessions_make(&wd, v, tok, 5, 99, 3, &a, err, sizeof err) == 0);
    if (a) { /* only the first conversation has 2 user turns */
        for (int i = 0; i < 3; i++) {
            CHECK(a[i].conv == 0);
            CHECK(strcmp(a[i].user[0], "one") == 0 && strcmp(a[i].user[1], "two") == 0);
            /* " the the the": 3 tokens, within [7, 7]: raised to 7 */
            CHECK(a[i].max_tokens[0] == 7);
            CHECK(a[i].max_tokens[1] == 7); /* no reference: drawn */
        }
        a[0].answer[0] = strdup("x");
        char *p = tb_session_prompt(&a[0], 1);
        CHECK(p && strcmp(p, "one\nx\ntwo") == 0);
        free(p);
    }
    tb_sessions_free(a, 3);
    wd.output.max = 100;
    wd.output.min = 1;
    wd.turns = 1;
    CHECK(tb_sessions_make(&wd, v, tok, 5, 99, 2, &a, err, sizeof err) == 0);
    if (a) {
        int64_t k = tb_tokenizer_encode(tok, " the the the", 12, NULL, 0);
        CHECK(k > 0);
        for (int i = 0; i < 2; i++)
            CHECK(a[i].max_tokens[0] == (a[i].conv == 0 ? (uint32_t)k : 7));
        CHECK(a[0].conv != a[1].conv); /* consecutive sessions, consecutive conversations */
    }
    tb_sessions_free(a, 2);
    wd.turns = 3;
    CHECK(tb_sessions_make(&wd, v, tok, 5, 99, 2, &a, err, sizeof err) == -1);
    CHECK(strstr(err, "no conversation with 3 user turns") != NULL);
    tb_dataset_free(d);
    tb_prompt_vocab_free(v);
    tb_tokenizer_free(tok);
}

int main(int argc, char **argv)
{
    test_distributions();
    test_histogram();
    test_dataset();
    test_dataset_strict();
    test_histogram_weights();
    if (argc > 1)
        test_sessions(argv[1]);
    else
        CHECK(!"usage: test_workload TOKENIZER_JSON");
    return check_done();
}
