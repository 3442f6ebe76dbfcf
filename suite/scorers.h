/* scorers.h — grading one model output: against a prompt's expected
 * answer (the scorers), and on its own (repetition and distinct-n).
 * Prompt sets, which carry the expected answers, are prompt_set.h's.
 *
 * SCORERS: tb_score_answer(s, output, expected) is 1 (correct), 0 (wrong)
 * or -1 (the expected value is unusable for s; *err says why).
 * "Whitespace" below is Unicode White_Space: U+0009..U+000D, U+0020,
 * U+0085, U+00A0, U+1680, U+2000..U+200A, U+2028, U+2029, U+202F, U+205F,
 * U+3000 (as UTF-8). Comparisons are byte-wise: no case folding, no
 * Unicode normalization. A NULL output counts as "".
 *
 *   exact     output and expected, each trimmed of leading and trailing
 *             whitespace, are byte-equal. An empty (trimmed) expected
 *             matches only an output that is empty or whitespace.
 *   contains  expected, trimmed of leading and trailing whitespace, occurs
 *             as a byte substring of the output. An expected that is empty
 *             after trimming is an error (-1): it would match everything.
 *   regex     expected, as written (not trimmed), is a PCRE2 pattern
 *             compiled in UTF mode (PCRE2_UTF; no PCRE2_UCP, so \d \w \s
 *             are ASCII classes unless the pattern says (*UCP)), searched
 *             for anywhere in the output: not anchored; ^ and $ anchor at
 *             the start and end of the whole output ($ also before a final
 *             newline; (?m) makes them line anchors, \z is the very end).
 *             Invalid UTF-8 in the output never matches but is not an
 *             error (PCRE2_MATCH_INVALID_UTF). A pattern that does not
 *             compile is an error: "bad regex: <PCRE2's message> at offset
 *             <N>" (N a byte offset into the pattern). A match that fails
 *             (e.g. PCRE2's backtracking limit) is an error too.
 *   numeric   the first number in the output equals the expected number:
 *             |a - b| <= 1e-9 * max(1, |b|), a the output's, b expected's.
 *             No number in the output: 0. Expected must be exactly one
 *             number (after trimming whitespace; a final '.' is allowed,
 *             so "95." is 95), else -1.
 *
 * A NUMBER (numeric scorer) is, in this order:
 *   - an optional sign: '-', '+' or U+2212 MINUS SIGN. In an output, a
 *     sign counts only when the character before it is not an ASCII
 *     letter or digit ("x = -5" is -5, "COVID-19" is 19);
 *   - an integer part of ASCII digits, either plain ("1234") or with ','
 *     thousands separators: 1 to 3 digits, then groups of ',' and exactly
 *     3 digits ("1,234,567"); a ',' not followed by exactly 3 digits and
 *     then a non-digit ends the number ("1,2" is 1, "12,3456" is 12);
 *     the integer part may be empty when a fraction follows (".5" = 0.5);
 *   - an optional fraction: '.' and at least one digit ("95." is 95, the
 *     '.' being punctuation);
 *   - an optional exponent: 'e' or 'E', an optional '+' or '-', at least
 *     one digit ("2e3" is 2000; "5e" is 5).
 * "The first number" is the one starting at the leftmost digit (or '.'
 * followed by a digit) in the output; digits inside words count ("GPT4"
 * has 4). The value is strtod's (correctly rounded) of the number with
 * separators removed; it must be finite (an expected of 1e999 is an error;
 * an output's 1e999 equals nothing). "-0" equals 0.
 *
 * TEXT STATISTICS over one output. Words are maximal runs of bytes other
 * than ASCII whitespace (space, \t, \n, \v, \f, \r), compared byte-wise;
 * with W words there are T = W - n + 1 word n-grams (consecutive words)
 * and D distinct ones among them:
 *   tb_score_distinct(text, n)   = D / T   (Li et al. 2016's distinct-n,
 *                                           within a single output)
 *   tb_score_repetition(text, n) = 1 - D / T  (0: no n-gram repeats)
 * Both are NAN when W < n (T < 1) or n < 1. */
#ifndef TB_SCORERS_H
#define TB_SCORERS_H

#include <stddef.h>

typedef enum tb_scorer {
    TB_SCORER_EXACT,
    TB_SCORER_CONTAINS,
    TB_SCORER_REGEX,
    TB_SCORER_NUMERIC,
} tb_scorer;

#define TB_N_SCORERS 4
/* The names, in enum order, for messages that list them. */
#define TB_SCORER_LIST "exact, contains, regex, numeric"

int tb_scorer_parse(const char *name, tb_scorer *out);   /* 0 ok, -1 unknown (or NULL) */
const char *tb_scorer_name(tb_scorer s);                 /* "?" when out of range */

/* 1 correct, 0 wrong, -1 error with *err (malloc'd) saying why, e.g. a
 * bad regex with its offset. expected NULL is an error. */
int tb_score_answer(tb_scorer s, const char *output, const char *expected, char **err);
/* Checks an expected value for scorer s (regex compiles, numeric parses,
 * contains non-empty): 0 ok, -1 with *err (malloc'd). tb_score_answer
 * returns -1 for the expected values this refuses, and otherwise only when
 * a regex match fails at run time (PCRE2's match or depth limit). */
int tb_scorer_check_expected(tb_scorer s, const char *expected, char **err);

/* The first number in text as the numeric scorer reads it: 1 and *value,
 * or 0 when there is none. */
int tb_score_first_number(const char *text, double *value);

/* Text statistics over whitespace-separated words (see above). */
double tb_score_repetition(const char *text, int n);
double tb_score_distinct(const char *text, int n);

#endif
