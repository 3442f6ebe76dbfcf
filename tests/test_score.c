/* test_score.c — core/score.c: every scorer on true, false and edge cases,
 * repetition and distinct-n against hand-computed fractions, and prompt-set
 * loading of a good file and of every error the loader reports. */
#define _GNU_SOURCE
#include "score.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "util.h"

static char tmpdir[64];

/* ------------------------------------------------------------ helpers */

/* Writes n bytes of text into tmpdir/name; returns the path (static). */
static const char *write_file_n(const char *name, const char *text, size_t n)
{
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(2);
    }
    if (n && fwrite(text, 1, n, f) != n) {
        perror(path);
        exit(2);
    }
    fclose(f);
    return path;
}

static const char *write_file(const char *name, const char *text)
{
    return write_file_n(name, text, strlen(text));
}

static int score(tb_scorer s, const char *output, const char *expected)
{
    char err[256];
    return tb_score_answer(s, output, expected, err, sizeof err);
}

static char last_err[4096];

/* Loads a one-file set that must fail; returns the message (last_err). */
static const char *load_err(const char *name, const char *text)
{
    const char *path = write_file(name, text);
    tb_prompt_set ps;
    last_err[0] = '\0';
    int rc = tb_prompt_set_load(path, &ps, last_err, sizeof last_err);
    CHECK(rc == -1);
    CHECK(ps.n == 0 && ps.items == NULL && ps.path == NULL);
    if (rc == 0)
        tb_prompt_set_free(&ps);
    return last_err;
}

/* The message of a failing load contains path-relative "name:LINE: " and want. */
#define CHECK_LOAD_ERR(name, text, line, want)                                \
    do {                                                                      \
        const char *m_ = load_err(name, text);                                \
        char loc_[128];                                                       \
        snprintf(loc_, sizeof loc_, "%s:%d: ", name, line);                   \
        CHECK_CONTAINS(m_, loc_);                                             \
        CHECK_CONTAINS(m_, want);                                             \
        CHECK(strchr(m_, '\n') == NULL); /* one problem, one line */          \
    } while (0)

/* ------------------------------------------------------------ scorers */

static void test_names(void)
{
    tb_scorer s;
    const char *names[] = {"exact", "contains", "regex", "numeric"};
    for (int i = 0; i < TB_N_SCORERS; i++) {
        CHECK(tb_scorer_parse(names[i], &s) == 0 && (int)s == i);
        CHECK_STR(tb_scorer_name((tb_scorer)i), names[i]);
    }
    CHECK(tb_scorer_parse("fuzzy", &s) == -1);
    CHECK(tb_scorer_parse("Exact", &s) == -1);
    CHECK(tb_scorer_parse("", &s) == -1);
    CHECK(tb_scorer_parse(NULL, &s) == -1);
    CHECK_STR(tb_scorer_name((tb_scorer)99), "?");
    char err[128];
    CHECK(tb_score_answer((tb_scorer)99, "a", "a", err, sizeof err) == -1);
    CHECK(tb_score_answer(TB_SCORER_EXACT, "a", NULL, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "no expected answer");
    /* err may be NULL with size 0. */
    CHECK(tb_score_answer(TB_SCORER_REGEX, "a", "(", NULL, 0) == -1);
}

static void test_exact(void)
{
    tb_scorer E = TB_SCORER_EXACT;
    CHECK(score(E, "Paris", "Paris") == 1);
    CHECK(score(E, "  Paris\n", "Paris") == 1);
    CHECK(score(E, "Paris", "\tParis \r\n") == 1);
    CHECK(score(E, "paris", "Paris") == 0);      /* no case folding */
    CHECK(score(E, "Paris.", "Paris") == 0);
    CHECK(score(E, "Paris is", "Paris") == 0);
    CHECK(score(E, "a  b", "a b") == 0);         /* inner whitespace counts */
    CHECK(score(E, "", "Paris") == 0);
    CHECK(score(E, "", "") == 1);
    CHECK(score(E, " \n\t ", "") == 1);          /* whitespace only = empty */
    CHECK(score(E, "", "   ") == 1);
    CHECK(score(E, NULL, "") == 1);              /* NULL output = "" */
    CHECK(score(E, NULL, "x") == 0);
    /* Unicode White_Space: NBSP U+00A0, ideographic space U+3000, NEL
     * U+0085, em space U+2003, line separator U+2028. */
    CHECK(score(E, "\xc2\xa0Paris\xe3\x80\x80", "Paris") == 1);
    CHECK(score(E, "\xc2\x85\xe2\x80\x83Paris\xe2\x80\xa8", " Paris ") == 1);
    CHECK(score(E, "\xe3\x80\x80", "") == 1);
    /* Every White_Space code point, on each side in turn. */
    static const char *const ws[] = {
        "\t", "\n", "\v", "\f", "\r", " ", "\xc2\x85", "\xc2\xa0", "\xe1\x9a\x80",
        "\xe2\x80\x80", "\xe2\x80\x81", "\xe2\x80\x82", "\xe2\x80\x83", "\xe2\x80\x84",
        "\xe2\x80\x85", "\xe2\x80\x86", "\xe2\x80\x87", "\xe2\x80\x88", "\xe2\x80\x89",
        "\xe2\x80\x8a", "\xe2\x80\xa8", "\xe2\x80\xa9", "\xe2\x80\xaf", "\xe2\x81\x9f",
        "\xe3\x80\x80"};
    for (size_t i = 0; i < TB_ARRAY_LEN(ws); i++) {
        char buf[32];
        snprintf(buf, sizeof buf, "%sok%s", ws[i], ws[i]);
        CHECK(score(E, buf, "ok") == 1);
        CHECK(score(E, "ok", buf) == 1);
    }
    /* ... but not ZERO WIDTH SPACE U+200B, U+180E (no longer White_Space)
     * nor a BOM. */
    CHECK(score(E, "Paris\xe1\xa0\x8e", "Paris") == 0);
    CHECK(score(E, "Paris\xe2\x80\x8b", "Paris") == 0);
    CHECK(score(E, "\xef\xbb\xbfParis", "Paris") == 0);
    /* Invalid UTF-8 is compared as bytes, never trimmed. */
    CHECK(score(E, "Paris\x80", "Paris") == 0);
    CHECK(score(E, "Paris\xa0", "Paris") == 0);   /* a lone continuation byte */
    CHECK(score(E, "\xff", "\xff") == 1);
    CHECK(score(E, "caf\xc3\xa9", "caf\xc3\xa9 ") == 1);
    CHECK(score(E, "cafe\xcc\x81", "caf\xc3\xa9") == 0); /* no normalization */
}

static void test_contains(void)
{
    tb_scorer C = TB_SCORER_CONTAINS;
    char err[256];
    CHECK(score(C, "The capital is Paris.", "Paris") == 1);
    CHECK(score(C, "The capital is Paris.", "  Paris \n") == 1); /* expected trimmed */
    CHECK(score(C, "The capital isParis.", " Paris") == 1);     /* so no word boundary */
    CHECK(score(C, "The capital is paris.", "Paris") == 0);
    CHECK(score(C, "Pari s", "Paris") == 0);
    CHECK(score(C, "", "Paris") == 0);
    CHECK(score(C, "   ", "Paris") == 0);
    CHECK(score(C, NULL, "Paris") == 0);
    CHECK(score(C, "Paris", "Paris") == 1);
    CHECK(score(C, "x\xe3\x80\x80y", "\xe3\x80\x80y") == 1); /* trimmed: "y" */
    /* An empty expected would match every output: an error. */
    CHECK(tb_score_answer(C, "anything", "", err, sizeof err) == -1);
    CHECK_CONTAINS(err, "empty expected answer");
    CHECK(tb_score_answer(C, "anything", " \t\xc2\xa0", err, sizeof err) == -1);
    CHECK(tb_scorer_check_expected(C, "", err, sizeof err) == -1);
    CHECK(tb_scorer_check_expected(C, "x", err, sizeof err) == 0);
    CHECK(tb_scorer_check_expected(TB_SCORER_EXACT, "", err, sizeof err) == 0);
}

static void test_regex(void)
{
    tb_scorer R = TB_SCORER_REGEX;
    char err[256];
    CHECK(score(R, "42", "^\\d+$") == 1);
    CHECK(score(R, "x42", "^\\d+$") == 0);          /* anchored by the user */
    CHECK(score(R, "42x", "^\\d+$") == 0);
    CHECK(score(R, "the answer: 42!", "4\\d") == 1); /* not anchored otherwise */
    CHECK(score(R, "the answer: 41!", "4[2-9]") == 0);
    CHECK(score(R, "", "^$") == 1);
    CHECK(score(R, "", "a") == 0);
    CHECK(score(R, NULL, "^$") == 1);
    CHECK(score(R, "a\n", "^a$") == 1);             /* $ before a final newline */
    CHECK(score(R, "a\n", "^a\\z") == 0);
    CHECK(score(R, "a\nb", "^b$") == 0);            /* not multiline ... */
    CHECK(score(R, "a\nb", "(?m)^b$") == 1);        /* ... unless asked */
    CHECK(score(R, "PARIS", "paris") == 0);
    CHECK(score(R, "PARIS", "(?i)paris") == 1);
    CHECK(score(R, "caf\xc3\xa9", "^caf.$") == 1);  /* UTF mode: é is one character */
    CHECK(score(R, "\xe2\x9c\x93", "^.$") == 1);
    CHECK(score(R, "Paris", " Paris") == 0);        /* a pattern is not trimmed */
    /* Invalid UTF-8 in the output: no error, and never matched. */
    CHECK(score(R, "\xff" "42", "42") == 1);
    CHECK(score(R, "\xff", "^.$") == 0);
    /* Bad patterns: PCRE2's message and the offset. */
    CHECK(tb_score_answer(R, "ab", "a(b", err, sizeof err) == -1);
    CHECK_CONTAINS(err, "bad regex: missing closing parenthesis");
    CHECK_CONTAINS(err, "at offset 3");
    CHECK(tb_scorer_check_expected(R, "a(b", err, sizeof err) == -1);
    CHECK_CONTAINS(err, "at offset 3");
    CHECK(tb_scorer_check_expected(R, "ab[", err, sizeof err) == -1);
    CHECK_CONTAINS(err, "missing terminating ] for character class at offset 3");
    CHECK(tb_scorer_check_expected(R, "x\xff", err, sizeof err) == -1);
    CHECK_CONTAINS(err, "UTF-8 error");
    CHECK_CONTAINS(err, "offset 1");
    CHECK(tb_scorer_check_expected(R, "^\\d+$", err, sizeof err) == 0);
    CHECK(tb_scorer_check_expected(R, "", err, sizeof err) == 0);
    /* Catastrophic backtracking: PCRE2's match limit, an error, not a hang. */
    char subject[64];
    memset(subject, 'a', 40);
    strcpy(subject + 40, "!");
    int rc = tb_score_answer(R, subject, "^(a+)+$", err, sizeof err);
    CHECK(rc == -1);
    if (rc == -1)
        CHECK_CONTAINS(err, "regex match failed");
}

static void test_numeric(void)
{
    tb_scorer N = TB_SCORER_NUMERIC;
    char err[256];
    CHECK(score(N, "The answer is 42.", "42") == 1);
    CHECK(score(N, "The answer is 42.", "42.0") == 1);
    CHECK(score(N, "The answer is 42.", "41") == 0);
    CHECK(score(N, "42", " 42\n") == 1);
    /* Only the first number counts. */
    CHECK(score(N, "41, no: 42", "42") == 0);
    CHECK(score(N, "pages 10-20", "10") == 1);
    /* Signs. */
    CHECK(score(N, "x = -5", "-5") == 1);
    CHECK(score(N, "x = -5", "5") == 0);
    CHECK(score(N, "(-5)", "-5") == 1);
    CHECK(score(N, "-5", "-5") == 1);
    CHECK(score(N, "+7 points", "7") == 1);
    CHECK(score(N, "COVID-19", "19") == 1);          /* a hyphen after a letter */
    CHECK(score(N, "COVID-19", "-19") == 0);
    CHECK(score(N, "\xe2\x88\x92" "5", "-5") == 1);  /* U+2212 MINUS SIGN */
    CHECK(score(N, "-5", "\xe2\x88\x92" "5") == 1);
    CHECK(score(N, "x\xe2\x88\x92" "5", "5") == 1);
    /* -0 equals 0. */
    CHECK(score(N, "0", "-0") == 1);
    CHECK(score(N, "-0", "0") == 1);
    CHECK(score(N, "-0.0", "0") == 1);
    /* Thousands separators. */
    CHECK(score(N, "1,234,567 people", "1234567") == 1);
    CHECK(score(N, "1234567", "1,234,567") == 1);
    CHECK(score(N, "$1,234.50", "1234.5") == 1);
    CHECK(score(N, "-1,000", "-1000") == 1);
    CHECK(score(N, "1,2,3", "1") == 1);              /* a list: not separators */
    CHECK(score(N, "12,3456", "12") == 1);           /* ,3456: not a group of 3 */
    CHECK(score(N, "1234,567", "1234") == 1);        /* first group over 3 digits */
    CHECK(score(N, "1,234,56", "1234") == 1);
    CHECK(score(N, "1,23", "1") == 1);
    /* Decimals. */
    CHECK(score(N, "pi is 3.14159", "3.14159") == 1);
    CHECK(score(N, "pi is 3.14", "3.14159") == 0);
    CHECK(score(N, "It is 95.", "95") == 1);         /* '.' as punctuation */
    CHECK(score(N, "95.", "95.") == 1);              /* an expected "95." is 95 */
    CHECK(score(N, "95.5", "95.") == 0);
    CHECK(score(N, "costs .5", "0.5") == 1);
    CHECK(score(N, "-.5", "-0.5") == 1);
    CHECK(score(N, "1.2.3", "1.2") == 1);
    /* Exponents. */
    CHECK(score(N, "6.02e23", "6.02E+23") == 1);
    CHECK(score(N, "1e-3", "0.001") == 1);
    CHECK(score(N, "2e3", "2000") == 1);
    CHECK(score(N, "5e", "5") == 1);                 /* no exponent digits */
    CHECK(score(N, "5e+", "5") == 1);
    CHECK(score(N, "1e999", "1") == 0);              /* inf equals nothing */
    /* Tolerance: |a - b| <= 1e-9 * max(1, |b|). */
    CHECK(score(N, "1.0000000001", "1") == 1);       /* 1e-10 <= 1e-9 */
    CHECK(score(N, "1.00000001", "1") == 0);         /* 1e-8 > 1e-9 */
    CHECK(score(N, "0.0000000005", "0") == 1);       /* 5e-10 <= 1e-9 * 1 */
    CHECK(score(N, "0.000000002", "0") == 0);
    CHECK(score(N, "1000000000100", "1e12") == 1);   /* 100 <= 1000 */
    CHECK(score(N, "1000000002000", "1e12") == 0);   /* 2000 > 1000 */
    /* No number: wrong, not an error. */
    CHECK(score(N, "no idea", "42") == 0);
    CHECK(score(N, "", "42") == 0);
    CHECK(score(N, " \n ", "42") == 0);
    CHECK(score(N, NULL, "42") == 0);
    CHECK(score(N, "- . e", "0") == 0);
    /* Digits inside words count. */
    CHECK(score(N, "GPT4 says 5", "4") == 1);
    /* An expected value that is not (exactly) a number: an error. */
    CHECK(tb_score_answer(N, "42", "forty-two", err, sizeof err) == -1);
    CHECK_CONTAINS(err, "expected a number");
    CHECK_CONTAINS(err, "\"forty-two\"");
    CHECK(tb_score_answer(N, "42", "42 apples", err, sizeof err) == -1);
    CHECK(tb_score_answer(N, "42", "", err, sizeof err) == -1);
    CHECK(tb_score_answer(N, "42", "-", err, sizeof err) == -1);
    CHECK(tb_score_answer(N, "42", "1e999", err, sizeof err) == -1);
    CHECK_CONTAINS(err, "finite");
    CHECK(tb_scorer_check_expected(N, "abc", err, sizeof err) == -1);
    CHECK(tb_scorer_check_expected(N, "1,234.5e-2", err, sizeof err) == 0);
    CHECK(tb_scorer_check_expected(N, " -0 ", err, sizeof err) == 0);
    CHECK(tb_scorer_check_expected(N, "95.", err, sizeof err) == 0);
    CHECK(tb_scorer_check_expected(N, "95..", err, sizeof err) == -1);
    CHECK(tb_scorer_check_expected(N, "1,23", err, sizeof err) == -1);

    double v = 0;
    CHECK(tb_score_first_number("abc -12.5e1 x", &v) == 1);
    CHECK_NEAR(v, -125, 0);
    CHECK(tb_score_first_number("a1,000,000b", &v) == 1);
    CHECK_NEAR(v, 1e6, 0);
    CHECK(tb_score_first_number("none", &v) == 0);
    CHECK(tb_score_first_number(NULL, &v) == 0);
}

/* ------------------------------------------------------------ n-grams */

static void test_ngrams(void)
{
    /* "a b a b": unigrams a b a b (T 4, D 2: 2/4); bigrams ab ba ab (T 3,
     * D 2: 2/3); trigrams aba bab (T 2, D 2: 1); one 4-gram (1); 5: NAN. */
    const char *t = "a b a b";
    CHECK_NEAR(tb_score_distinct(t, 1), 2.0 / 4, 1e-15);
    CHECK_NEAR(tb_score_repetition(t, 1), 2.0 / 4, 1e-15);
    CHECK_NEAR(tb_score_distinct(t, 2), 2.0 / 3, 1e-15);
    CHECK_NEAR(tb_score_repetition(t, 2), 1.0 / 3, 1e-15);
    CHECK_NEAR(tb_score_distinct(t, 3), 1.0, 0);
    CHECK_NEAR(tb_score_repetition(t, 3), 0.0, 0);
    CHECK_NEAR(tb_score_distinct(t, 4), 1.0, 0);
    CHECK(isnan(tb_score_distinct(t, 5)));
    CHECK(isnan(tb_score_repetition(t, 5)));

    /* "the cat sat on the cat mat": unigrams T 7, D 5 (the, cat twice):
     * 5/7; bigrams "the cat" twice of 6: D 5, 5/6; trigrams all 5 distinct. */
    t = "the cat sat on the cat mat";
    CHECK_NEAR(tb_score_distinct(t, 1), 5.0 / 7, 1e-15);
    CHECK_NEAR(tb_score_repetition(t, 1), 2.0 / 7, 1e-15);
    CHECK_NEAR(tb_score_distinct(t, 2), 5.0 / 6, 1e-15);
    CHECK_NEAR(tb_score_repetition(t, 2), 1.0 / 6, 1e-15);
    CHECK_NEAR(tb_score_repetition(t, 3), 0.0, 0);

    /* Any run of ASCII whitespace separates; none is a word: words a b a
     * (T 3, D 2: 2/3). */
    CHECK_NEAR(tb_score_distinct("  a\tb\r\n\v\fa  ", 1), 2.0 / 3, 1e-15);
    /* Byte-wise: "A" != "a", "a." != "a"; U+00A0 is not a separator, so
     * "a\xc2\xa0b" is one word: words "a", "a.", "A", "a b"(nbsp): 4/4. */
    CHECK_NEAR(tb_score_distinct("a a. A a\xc2\xa0" "b", 1), 1.0, 0);
    /* One word repeated 5 times: unigram 1/5, bigram 1/4, repetition 4/5, 3/4. */
    CHECK_NEAR(tb_score_distinct("x x x x x", 1), 1.0 / 5, 1e-15);
    CHECK_NEAR(tb_score_repetition("x x x x x", 1), 4.0 / 5, 1e-15);
    CHECK_NEAR(tb_score_repetition("x x x x x", 2), 3.0 / 4, 1e-15);
    /* A single word: n = 1 gives 1/1; n = 2 NAN. */
    CHECK_NEAR(tb_score_distinct("word", 1), 1.0, 0);
    CHECK(isnan(tb_score_distinct("word", 2)));
    /* Fewer than n words, or n < 1: NAN. */
    CHECK(isnan(tb_score_distinct("", 1)));
    CHECK(isnan(tb_score_repetition("", 1)));
    CHECK(isnan(tb_score_distinct(" \n\t ", 1)));
    CHECK(isnan(tb_score_distinct(NULL, 1)));
    CHECK(isnan(tb_score_distinct("a b", 0)));
    CHECK(isnan(tb_score_repetition("a b", -1)));

    /* At scale: "w0 w1 ... w9" repeated 100 times (1000 words). Unigrams:
     * 10 distinct of 1000; bigrams: 10 distinct (w9 w0 included) of 999;
     * 10-grams: 10 distinct of 991; 1000-gram: 1 of 1. */
    tb_str b = {0};
    for (int i = 0; i < 1000; i++)
        tb_str_appendf(&b, "%sw%d", i ? " " : "", i % 10);
    CHECK_NEAR(tb_score_distinct(b.s, 1), 10.0 / 1000, 1e-15);
    CHECK_NEAR(tb_score_distinct(b.s, 2), 10.0 / 999, 1e-15);
    CHECK_NEAR(tb_score_distinct(b.s, 10), 10.0 / 991, 1e-15);
    CHECK_NEAR(tb_score_distinct(b.s, 1000), 1.0, 0);
    CHECK(isnan(tb_score_distinct(b.s, 1001)));
    tb_str_free(&b);
    /* All distinct: 5000 different words, repetition 0 for n = 1..3. */
    for (int i = 0; i < 5000; i++)
        tb_str_appendf(&b, "%su%d", i ? "\n" : "", i);
    for (int n = 1; n <= 3; n++)
        CHECK_NEAR(tb_score_repetition(b.s, n), 0.0, 0);
    tb_str_free(&b);
}

/* ------------------------------------------------------------ loading */

static void test_load_good(void)
{
    tb_str t = {0};
    tb_str_append(&t, "{\"prompt\": \"What is 2+2?\", \"answer\": 4, \"tags\": [\"math\", \"easy_1\"], "
                      "\"scorer\": \"numeric\"}\n");                          /* 1 */
    tb_str_append(&t, "\n");                                                /* 2 */
    tb_str_append(&t, "{\"prompt\":\"Capital of France?\",\"answer\":\"Paris\"}\r\n"); /* 3 */
    tb_str_append(&t, "   \t\r\n");                                         /* 4 */
    tb_str_append(&t, "{\"prompt\": \"Say hi\", \"tags\": []}\n");          /* 5 */
    tb_str_append(&t, "{\"answer\": 1.50, \"prompt\": \"x\"}\n");           /* 6 */
    tb_str_append(&t, "{\"prompt\":\"\xc3\xa9 \\u00e9 \xe2\x9c\x93 \\ud83d\\ude00\",\"answer\":-0}\n"); /* 7 */
    tb_str_append(&t, "{\"prompt\":\"");                                    /* 8: over 1 MiB */
    for (int i = 0; i < (1 << 20) / 8 + 10; i++)
        tb_str_append(&t, "abcdefg ");
    tb_str_append(&t, "\"}\n");
    tb_str_append(&t, "{\"prompt\":\"p\\\\u0000\",\"answer\" : 6.02E+23 ,\"scorer\":\"exact\"}\n"); /* 9 */
    tb_str_append(&t, "  {\"prompt\": \"tab\\tquote\\\" nl\\n\", \"answer\": \"a(b\"}  "); /* 10, no final newline */
    const char *path = write_file_n("good.jsonl", t.s, t.len);
    tb_prompt_set ps;
    char err[1024] = "untouched";
    int rc = tb_prompt_set_load(path, &ps, err, sizeof err);
    CHECK(rc == 0);
    CHECK_STR(err, "");
    if (rc != 0) {
        fprintf(stderr, "%s\n", err);
        tb_str_free(&t);
        return;
    }
    CHECK(ps.n == 8);
    CHECK_STR(ps.path, path);
    char sha[65];
    tb_sha256_hex(t.s, t.len, sha);
    CHECK_STR(ps.sha256, sha);
    CHECK(strlen(ps.sha256) == 64);

    const tb_prompt *p = &ps.items[0];
    CHECK(p->line == 1);
    CHECK_STR(p->prompt, "What is 2+2?");
    CHECK_STR(p->answer, "4");
    CHECK(p->n_tags == 2);
    CHECK_STR(p->tags[0], "math");
    CHECK_STR(p->tags[1], "easy_1");
    CHECK(p->scorer == TB_SCORER_NUMERIC);
    CHECK(tb_prompt_scorer(p, TB_SCORER_EXACT) == TB_SCORER_NUMERIC);

    p = &ps.items[1];
    CHECK(p->line == 3);
    CHECK_STR(p->prompt, "Capital of France?");
    CHECK_STR(p->answer, "Paris");
    CHECK(p->n_tags == 0 && p->tags == NULL);
    CHECK(p->scorer == -1);
    CHECK(tb_prompt_scorer(p, TB_SCORER_CONTAINS) == TB_SCORER_CONTAINS);

    p = &ps.items[2];
    CHECK(p->line == 5);
    CHECK_STR(p->prompt, "Say hi");
    CHECK(p->answer == NULL);
    CHECK(p->n_tags == 0 && p->tags == NULL);

    p = &ps.items[3];
    CHECK(p->line == 6);
    CHECK_STR(p->answer, "1.50"); /* as written, not "1.5" */

    p = &ps.items[4];
    CHECK(p->line == 7);
    CHECK_STR(p->prompt, "\xc3\xa9 \xc3\xa9 \xe2\x9c\x93 \xf0\x9f\x98\x80");
    CHECK_STR(p->answer, "-0");

    p = &ps.items[5];
    CHECK(p->line == 8);
    CHECK(strlen(p->prompt) == (size_t)((1 << 20) / 8 + 10) * 8);
    CHECK(strncmp(p->prompt, "abcdefg abcdefg ", 16) == 0);

    p = &ps.items[6];
    CHECK(p->line == 9);
    CHECK_STR(p->prompt, "p\\u0000"); /* an escaped backslash, not U+0000 */
    CHECK_STR(p->answer, "6.02E+23");
    CHECK(p->scorer == TB_SCORER_EXACT);

    p = &ps.items[7];
    CHECK(p->line == 10);
    CHECK_STR(p->prompt, "tab\tquote\" nl\n");
    CHECK_STR(p->answer, "a(b");

    /* Checking answers against a default scorer: line 10's "a(b" is no
     * regex; line 3's "Paris" is no number (line 1 has its own scorer). */
    CHECK(tb_prompt_set_check(&ps, TB_SCORER_EXACT, 0, err, sizeof err) == 0);
    CHECK_STR(err, "");
    CHECK(tb_prompt_set_check(&ps, TB_SCORER_REGEX, 0, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "good.jsonl:10: \"answer\" for scorer regex: bad regex: missing closing parenthesis at offset 3");
    CHECK(strchr(err, '\n') == NULL);
    CHECK(tb_prompt_set_check(&ps, TB_SCORER_NUMERIC, 0, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "good.jsonl:3: \"answer\" for scorer numeric: expected a number");
    CHECK(strstr(err, "good.jsonl:1:") == NULL);
    CHECK(strstr(err, "good.jsonl:6:") == NULL); /* "1.50" is a number */
    CHECK(tb_prompt_set_check(&ps, TB_SCORER_EXACT, 1, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "good.jsonl:5: no \"answer\" (scorer exact needs one)");
    CHECK_CONTAINS(err, "good.jsonl:8: no \"answer\"");

    tb_prompt_set_free(&ps);
    CHECK(ps.n == 0 && ps.items == NULL && ps.path == NULL);
    tb_prompt_set_free(&ps); /* twice is fine */
    tb_str_free(&t);

    /* A BOM before the first line is skipped; the hash covers it. */
    const char bom[] = "\xef\xbb\xbf{\"prompt\":\"a\"}";
    path = write_file("bom.jsonl", bom);
    CHECK(tb_prompt_set_load(path, &ps, err, sizeof err) == 0);
    CHECK(ps.n == 1 && ps.items[0].line == 1);
    tb_sha256_hex(bom, strlen(bom), sha);
    CHECK_STR(ps.sha256, sha);
    tb_prompt_set_free(&ps);
}

static void test_load_errors(void)
{
    char path[256], want[300];
    tb_prompt_set ps;

    /* The file itself. */
    snprintf(path, sizeof path, "%s/nope.jsonl", tmpdir);
    CHECK(tb_prompt_set_load(path, &ps, last_err, sizeof last_err) == -1);
    snprintf(want, sizeof want, "%s: No such file or directory", path);
    CHECK_STR(last_err, want);
    CHECK(tb_prompt_set_load(tmpdir, &ps, last_err, sizeof last_err) == -1);
    snprintf(want, sizeof want, "%s: Is a directory", tmpdir);
    CHECK_STR(last_err, want);
    CHECK_CONTAINS(load_err("empty.jsonl", ""), "empty.jsonl: no prompts: the file is empty");
    CHECK_CONTAINS(load_err("blank.jsonl", "\n  \n\t\r\n"),
                   "blank.jsonl: no prompts: every line is blank");

    /* Line numbers count blank lines. */
    CHECK_LOAD_ERR("prompt_empty.jsonl", "{\"prompt\":\"a\"}\n\n\n\n\n\n{\"prompt\": \"\"}\n", 7,
                   "\"prompt\" must be a non-empty string");
    CHECK_LOAD_ERR("prompt_num.jsonl", "{\"prompt\": 5}", 1,
                   "\"prompt\" must be a non-empty string, not a number");
    CHECK_LOAD_ERR("prompt_missing.jsonl", "{\"answer\": \"x\"}", 1,
                   "missing \"prompt\" (a non-empty string)");
    CHECK_LOAD_ERR("prompt_missing2.jsonl", "{}", 1, "missing \"prompt\"");

    /* Not JSON, or not an object. */
    CHECK_LOAD_ERR("json1.jsonl", "{\"prompt\":\"a\"}\n{\"prompt\": \"a\",}\n", 2,
                   "not a JSON object: invalid JSON at column 16 (the end of the line), near \"}\"");
    CHECK_LOAD_ERR("json2.jsonl", "hello", 1, "not a JSON object: invalid JSON at column 1, near \"hello\"");
    CHECK_LOAD_ERR("json3.jsonl", "{\"prompt\":\"a\"", 1,
                   "not a JSON object: invalid JSON at column 13 (the end of the line)");
    CHECK_LOAD_ERR("json4.jsonl", "[1, 2]", 1, "not a JSON object: found an array");
    CHECK_LOAD_ERR("json5.jsonl", "\"prompt\"", 1, "not a JSON object: found a string");
    CHECK_LOAD_ERR("json6.jsonl", "{\"prompt\":\"a\"} x", 1,
                   "not a JSON object: unexpected text after the object at column 16");
    CHECK_LOAD_ERR("json7.jsonl", "{\"prompt\":\"a\"}{\"prompt\":\"b\"}", 1,
                   "unexpected text after the object at column 15");
    CHECK_LOAD_ERR("json8.jsonl", "{\"prompt\":\"\\ud800\"}", 1, "not a JSON object"); /* lone surrogate */
    CHECK_LOAD_ERR("json9.jsonl", "{\"prompt\":\"\\q\"}", 1, "not a JSON object");

    /* Keys. */
    CHECK_LOAD_ERR("key1.jsonl", "{\"promt\": \"a\"}", 1,
                   "unknown key \"promt\" (expected prompt, answer, tags, scorer)");
    CHECK_LOAD_ERR("key2.jsonl", "{\"prompt\": \"a\", \"Prompt\": \"b\"}", 1, "unknown key \"Prompt\"");
    CHECK_LOAD_ERR("key3.jsonl", "{\"prompt\": \"a\", \"prompt\": \"b\"}", 1, "duplicate key \"prompt\"");
    CHECK_LOAD_ERR("key4.jsonl", "{\"prompt\": \"a\", \"a\\\"b\": 1}", 1, "unknown key \"a\\\"b\"");

    /* answer. */
    CHECK_LOAD_ERR("ans1.jsonl", "{\"prompt\": \"a\", \"answer\": true}", 1,
                   "\"answer\" must be a string or a number, not a boolean");
    CHECK_LOAD_ERR("ans2.jsonl", "{\"prompt\": \"a\", \"answer\": null}", 1,
                   "\"answer\" must be a string or a number, not null");
    CHECK_LOAD_ERR("ans3.jsonl", "{\"prompt\": \"a\", \"answer\": [\"x\"]}", 1,
                   "\"answer\" must be a string or a number, not an array");

    /* tags. */
    CHECK_LOAD_ERR("tags1.jsonl", "{\"prompt\": \"a\", \"tags\": \"math\"}", 1,
                   "\"tags\" must be an array of strings ([a-z0-9_]+), not a string");
    CHECK_LOAD_ERR("tags2.jsonl", "{\"prompt\": \"a\", \"tags\": [\"math\", 3]}", 1,
                   "\"tags\"[1] must be a string");
    CHECK_LOAD_ERR("tags3.jsonl", "{\"prompt\": \"a\", \"tags\": [\"Math\"]}", 1,
                   "\"tags\"[0] \"Math\" is not a valid tag (expected [a-z0-9_]+)");
    CHECK_LOAD_ERR("tags4.jsonl", "{\"prompt\": \"a\", \"tags\": [\"ok\", \"a-b\"]}", 1,
                   "\"tags\"[1] \"a-b\" is not a valid tag");
    CHECK_LOAD_ERR("tags5.jsonl", "{\"prompt\": \"a\", \"tags\": [\"\"]}", 1,
                   "\"tags\"[0] \"\" is not a valid tag");
    CHECK_LOAD_ERR("tags6.jsonl", "{\"prompt\": \"a\", \"tags\": [\"x\", \"y\", \"x\"]}", 1,
                   "\"tags\"[2] \"x\" is a duplicate tag");
    CHECK_LOAD_ERR("tags7.jsonl", "{\"prompt\": \"a\", \"tags\": [\"a b\"]}", 1,
                   "\"tags\"[0] \"a b\" is not a valid tag");

    /* scorer. */
    CHECK_LOAD_ERR("sc1.jsonl", "{\"prompt\": \"a\", \"answer\": \"b\", \"scorer\": \"fuzzy\"}", 1,
                   "unknown \"scorer\" \"fuzzy\" (expected exact, contains, regex, numeric)");
    CHECK_LOAD_ERR("sc2.jsonl", "{\"prompt\": \"a\", \"answer\": \"b\", \"scorer\": 1}", 1,
                   "\"scorer\" must be a string (one of exact, contains, regex, numeric), not a number");
    CHECK_LOAD_ERR("sc3.jsonl", "{\"prompt\": \"a\", \"scorer\": \"exact\"}", 1,
                   "\"scorer\" given without \"answer\"");
    CHECK_LOAD_ERR("sc4.jsonl", "{\"prompt\": \"a\", \"answer\": \"a(b\", \"scorer\": \"regex\"}", 1,
                   "\"answer\" for scorer regex: bad regex: missing closing parenthesis at offset 3");
    CHECK_LOAD_ERR("sc5.jsonl", "{\"prompt\": \"a\", \"answer\": \"four\", \"scorer\": \"numeric\"}", 1,
                   "\"answer\" for scorer numeric: expected a number (e.g. 42, -1,234.5, 6.02e23), got \"four\"");
    CHECK_LOAD_ERR("sc6.jsonl", "{\"prompt\": \"a\", \"answer\": \" \", \"scorer\": \"contains\"}", 1,
                   "\"answer\" for scorer contains: empty expected answer");

    /* UTF-8, which cJSON does not check: a stray byte, an overlong '/', an
     * encoded surrogate, a truncated sequence, above U+10FFFF. */
    CHECK_LOAD_ERR("u1.jsonl", "{\"prompt\": \"ab\xff\"}", 1,
                   "\"prompt\" is not valid UTF-8 (byte 0xff at offset 2)");
    CHECK_LOAD_ERR("u2.jsonl", "{\"prompt\": \"\xc0\xaf\"}", 1,
                   "\"prompt\" is not valid UTF-8 (byte 0xc0 at offset 0)");
    CHECK_LOAD_ERR("u3.jsonl", "{\"prompt\": \"x\xed\xa0\x80\"}", 1,
                   "\"prompt\" is not valid UTF-8 (byte 0xed at offset 1)");
    CHECK_LOAD_ERR("u4.jsonl", "{\"prompt\": \"x\xe2\x9c\"}", 1,
                   "\"prompt\" is not valid UTF-8 (byte 0xe2 at offset 1)");
    CHECK_LOAD_ERR("u5.jsonl", "{\"prompt\": \"\xf4\x90\x80\x80\"}", 1,
                   "\"prompt\" is not valid UTF-8 (byte 0xf4 at offset 0)");
    CHECK_LOAD_ERR("u6.jsonl", "{\"prompt\": \"a\", \"answer\": \"\xe9t\xe9\"}", 1,
                   "\"answer\" is not valid UTF-8 (byte 0xe9 at offset 0)");
    CHECK_LOAD_ERR("u7.jsonl", "{\"prompt\": \"a\", \"tags\": [\"ok\", \"\xff\"]}", 1,
                   "\"tags\"[1] is not valid UTF-8");
    CHECK_LOAD_ERR("u8.jsonl", "{\"prompt\": \"a\", \"k\xff\": 1}", 1, "a key is not valid UTF-8");

    /* U+0000: as an escape (C strings cannot hold it), or as a raw byte. */
    CHECK_LOAD_ERR("nul1.jsonl", "{\"prompt\": \"a\\u0000b\"}", 1, "\"prompt\" contains U+0000");
    CHECK_LOAD_ERR("nul2.jsonl", "{\"prompt\": \"a\", \"answer\": \"\\u0000\"}", 1,
                   "\"answer\" contains U+0000");
    CHECK_LOAD_ERR("nul3.jsonl", "{\"prompt\": \"a\", \"tags\": [\"x\\u0000\"]}", 1,
                   "\"tags\" contains U+0000");
    CHECK_LOAD_ERR("nul4.jsonl", "{\"prompt\\u0000x\": \"a\"}", 1, "key \"prompt\"... contains U+0000");
    {
        const char raw[] = "{\"prompt\": \"a\0b\"}\n";
        const char *pp = write_file_n("nul5.jsonl", raw, sizeof raw - 1);
        CHECK(tb_prompt_set_load(pp, &ps, last_err, sizeof last_err) == -1);
        CHECK_CONTAINS(last_err, "nul5.jsonl:1: NUL byte at column 14");
    }

    /* Several problems: one line each, in file order, at most 20. */
    tb_str t = {0};
    tb_str_append(&t, "{\"prompt\": \"ok\"}\n{\"prompt\": 1}\n{\"prompt\": \"ok\"}\n{\"x\": 1}\n");
    const char *mp = write_file_n("multi.jsonl", t.s, t.len);
    CHECK(tb_prompt_set_load(mp, &ps, last_err, sizeof last_err) == -1);
    char *nl = strchr(last_err, '\n');
    CHECK(nl != NULL);
    if (nl) {
        CHECK(strstr(last_err, "multi.jsonl:2: \"prompt\" must be") < nl);
        CHECK_CONTAINS(nl + 1, "multi.jsonl:4: unknown key \"x\"");
        CHECK(strchr(nl + 1, '\n') == NULL);
    }
    tb_str_free(&t);
    for (int i = 0; i < 25; i++)
        tb_str_append(&t, "{\"prompt\": 1}\n");
    mp = write_file_n("many.jsonl", t.s, t.len);
    tb_str_free(&t);
    CHECK(tb_prompt_set_load(mp, &ps, last_err, sizeof last_err) == -1);
    int lines = 1;
    for (const char *c = last_err; *c; c++)
        lines += *c == '\n';
    CHECK(lines == 21);
    CHECK_CONTAINS(last_err, "many.jsonl:20: ");
    CHECK(strstr(last_err, "many.jsonl:21: ") == NULL);
    CHECK_CONTAINS(last_err, "many.jsonl: 5 more errors");
    CHECK(last_err[strlen(last_err) - 1] != '\n');

    /* A small buffer keeps whole lines: here only the first. */
    char small[120];
    CHECK(tb_prompt_set_load(mp, &ps, small, sizeof small) == -1);
    CHECK(strchr(small, '\n') == NULL);
    CHECK_CONTAINS(small, "many.jsonl:1: \"prompt\" must be a non-empty string");
    char tiny[8];
    CHECK(tb_prompt_set_load(mp, &ps, tiny, sizeof tiny) == -1);
    CHECK(strlen(tiny) == 7);
    CHECK(tb_prompt_set_load(mp, &ps, NULL, 0) == -1);
}

/* The checks above must be able to fail: a wrong expected value is caught
 * by the same macros (counted here, then taken back out of the tally). */
static void test_checks_can_fail(void)
{
    int before = check_failures_;
    fprintf(stderr, "(three deliberate failures follow)\n");
    CHECK_NEAR(tb_score_distinct("a b a b", 2), 0.5, 1e-15);            /* is 2/3 */
    CHECK(score(TB_SCORER_NUMERIC, "1.00000001", "1") == 1);            /* is 0 */
    CHECK_LOAD_ERR("fail.jsonl", "{\"prompt\": 1}", 2, "must be a non-empty string"); /* line 1 */
    int caught = check_failures_ - before;
    check_failures_ = before;
    CHECK(caught == 3);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/tb_score_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 2;
    }
    test_names();
    test_exact();
    test_contains();
    test_regex();
    test_numeric();
    test_ngrams();
    test_load_good();
    test_load_errors();
    test_checks_can_fail();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
    return check_done();
}
