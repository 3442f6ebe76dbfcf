/* test_scorers.c — core/scorers.c: every scorer on true, false and edge
 * cases, and repetition and distinct-n against hand-computed fractions. */
#include "scorers.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "util.h"

/* The message of the last call that failed (malloc'd, freed by the next
 * call): the convention is *err set exactly when the call returns -1. */
static char *err;

static int answer(tb_scorer s, const char *output, const char *expected)
{
    free(err);
    err = NULL;
    int rc = tb_score_answer(s, output, expected, &err);
    CHECK((rc == -1) == (err != NULL));
    return rc;
}

static int check_expected(tb_scorer s, const char *expected)
{
    free(err);
    err = NULL;
    int rc = tb_scorer_check_expected(s, expected, &err);
    CHECK((rc == -1) == (err != NULL));
    return rc;
}

static int score(tb_scorer s, const char *output, const char *expected)
{
    return answer(s, output, expected);
}

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
    CHECK(answer((tb_scorer)99, "a", "a") == -1);
    CHECK_CONTAINS(err, "unknown scorer 99");
    CHECK(answer(TB_SCORER_EXACT, "a", NULL) == -1);
    CHECK_CONTAINS(err, "no expected answer");
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
    CHECK(answer(C, "anything", "") == -1);
    CHECK_CONTAINS(err, "empty expected answer");
    CHECK(answer(C, "anything", " \t\xc2\xa0") == -1);
    CHECK(check_expected(C, "") == -1);
    CHECK(check_expected(C, "x") == 0);
    CHECK(check_expected(TB_SCORER_EXACT, "") == 0);
}

static void test_regex(void)
{
    tb_scorer R = TB_SCORER_REGEX;
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
    CHECK(answer(R, "ab", "a(b") == -1);
    CHECK_CONTAINS(err, "bad regex: missing closing parenthesis");
    CHECK_CONTAINS(err, "at offset 3");
    CHECK(check_expected(R, "a(b") == -1);
    CHECK_CONTAINS(err, "at offset 3");
    CHECK(check_expected(R, "ab[") == -1);
    CHECK_CONTAINS(err, "missing terminating ] for character class at offset 3");
    CHECK(check_expected(R, "x\xff") == -1);
    CHECK_CONTAINS(err, "UTF-8 error");
    CHECK_CONTAINS(err, "offset 1");
    CHECK(check_expected(R, "^\\d+$") == 0);
    CHECK(check_expected(R, "") == 0);
    /* Catastrophic backtracking: PCRE2's match limit, an error, not a hang. */
    char subject[64];
    memset(subject, 'a', 40);
    strcpy(subject + 40, "!");
    int rc = answer(R, subject, "^(a+)+$");
    CHECK(rc == -1);
    if (rc == -1)
        CHECK_CONTAINS(err, "regex match failed");
}

static void test_numeric(void)
{
    tb_scorer N = TB_SCORER_NUMERIC;
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
    CHECK(answer(N, "42", "forty-two") == -1);
    CHECK_CONTAINS(err, "expected a number");
    CHECK_CONTAINS(err, "\"forty-two\"");
    CHECK(answer(N, "42", "42 apples") == -1);
    CHECK(answer(N, "42", "") == -1);
    CHECK(answer(N, "42", "-") == -1);
    CHECK(answer(N, "42", "1e999") == -1);
    CHECK_CONTAINS(err, "finite");
    CHECK(check_expected(N, "abc") == -1);
    CHECK(check_expected(N, "1,234.5e-2") == 0);
    CHECK(check_expected(N, " -0 ") == 0);
    CHECK(check_expected(N, "95.") == 0);
    CHECK(check_expected(N, "95..") == -1);
    CHECK(check_expected(N, "1,23") == -1);

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

/* The checks above must be able to fail: a wrong expected value is caught
 * by the same macros (counted here, then taken back out of the tally). */
static void test_checks_can_fail(void)
{
    int before = check_failures_;
    fprintf(stderr, "(two deliberate failures follow)\n");
    CHECK_NEAR(tb_score_distinct("a b a b", 2), 0.5, 1e-15);            /* is 2/3 */
    CHECK(score(TB_SCORER_NUMERIC, "1.00000001", "1") == 1);            /* is 0 */
    int caught = check_failures_ - before;
    check_failures_ = before;
    CHECK(caught == 2);
}

int main(void)
{
    test_names();
    test_exact();
    test_contains();
    test_regex();
    test_numeric();
    test_ngrams();
    test_checks_can_fail();
    free(err);
    return check_done();
}
