/* scorers.c — the scorers and the n-gram statistics; see scorers.h for
 * every definition. */
#define _GNU_SOURCE
#include "scorers.h"

#include <locale.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "utf8.h"
#include "util.h"

/* ------------------------------------------------------------ helpers */

/* Unicode White_Space. */
static int is_uspace(uint32_t c)
{
    return (c >= 0x09 && c <= 0x0d) || c == 0x20 || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
           c == 0x205f || c == 0x3000;
}

/* s[0..n) without leading and trailing White_Space: [*start, *start + *len). */
static void utrim(const char *s, size_t n, size_t *start, size_t *len)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t a = 0, b = n;
    while (a < b) {
        uint32_t cp;
        size_t l = tb_utf8_decode(u + a, b - a, &cp);
        if (!l || !is_uspace(cp))
            break;
        a += l;
    }
    while (b > a) {
        /* The last sequence starts at most 3 continuation bytes back. */
        size_t k = b - 1;
        while (k > a && b - k < 4 && (u[k] & 0xc0) == 0x80)
            k--;
        uint32_t cp;
        size_t l = tb_utf8_decode(u + k, b - k, &cp);
        if (l != b - k || !is_uspace(cp))
            break;
        b = k;
    }
    *start = a;
    *len = b - a;
}


/* ------------------------------------------------------------ scorers */

static const char *const scorer_names[TB_N_SCORERS] = {
    [TB_SCORER_EXACT] = "exact",
    [TB_SCORER_CONTAINS] = "contains",
    [TB_SCORER_REGEX] = "regex",
    [TB_SCORER_NUMERIC] = "numeric",
};

int tb_scorer_parse(const char *name, tb_scorer *out)
{
    if (!name)
        return -1;
    for (int i = 0; i < TB_N_SCORERS; i++)
        if (strcmp(name, scorer_names[i]) == 0) {
            *out = (tb_scorer)i;
            return 0;
        }
    return -1;
}

const char *tb_scorer_name(tb_scorer s)
{
    return (unsigned)s < TB_N_SCORERS ? scorer_names[s] : "?";
}

static int is_digit(unsigned char c)
{
    return c >= '0' && c <= '9';
}

static int is_alnum(unsigned char c)
{
    return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* The unsigned part of a number starting at s[i] (a digit, or '.' and a
 * digit), grammar in scorers.h. Appends its digits, '.' and exponent (no
 * separators) to `clean` and returns the index just past it. */
static size_t scan_unsigned(const unsigned char *s, size_t n, size_t i, tb_str *clean)
{
    size_t d = i;
    while (d < n && is_digit(s[d]))
        d++;
    tb_str_appendn(clean, (const char *)s + i, d - i);
    if (d - i >= 1 && d - i <= 3) {
        /* Thousands groups: ",ddd" not followed by a digit. */
        while (d + 4 <= n && s[d] == ',' && is_digit(s[d + 1]) && is_digit(s[d + 2]) &&
               is_digit(s[d + 3]) && !(d + 4 < n && is_digit(s[d + 4]))) {
            tb_str_appendn(clean, (const char *)s + d + 1, 3);
            d += 4;
        }
    }
    if (d + 1 < n && s[d] == '.' && is_digit(s[d + 1])) {
        size_t f = d + 1;
        while (f < n && is_digit(s[f]))
            f++;
        tb_str_appendn(clean, (const char *)s + d, f - d);
        d = f;
    }
    if (d < n && (s[d] == 'e' || s[d] == 'E')) {
        size_t e = d + 1;
        if (e < n && (s[e] == '+' || s[e] == '-'))
            e++;
        if (e < n && is_digit(s[e])) {
            while (e < n && is_digit(s[e]))
                e++;
            tb_str_appendn(clean, (const char *)s + d, e - d);
            d = e;
        }
    }
    return d;
}

/* strtod of an ASCII number ("-1234.5e3") in any LC_NUMERIC. */
static double number_value(tb_str *clean)
{
    const char *dp = localeconv()->decimal_point;
    if (dp && dp[0] && dp[0] != '.' && !dp[1]) {
        char *p = strchr(clean->s, '.');
        if (p)
            *p = dp[0];
    }
    return strtod(clean->s, NULL);
}

static int starts_number(const unsigned char *s, size_t n, size_t i)
{
    return is_digit(s[i]) || (s[i] == '.' && i + 1 < n && is_digit(s[i + 1]));
}

int tb_score_first_number(const char *text, double *value)
{
    if (!text)
        return 0;
    const unsigned char *s = (const unsigned char *)text;
    size_t n = strlen(text);
    for (size_t i = 0; i < n; i++) {
        if (!starts_number(s, n, i))
            continue;
        /* A sign right before, itself not after a letter or digit. */
        int neg = 0;
        size_t sign_at = i;
        if (i >= 1 && (s[i - 1] == '-' || s[i - 1] == '+'))
            sign_at = i - 1;
        else if (i >= 3 && s[i - 3] == 0xe2 && s[i - 2] == 0x88 && s[i - 1] == 0x92)
            sign_at = i - 3;
        if (sign_at < i && (sign_at == 0 || !is_alnum(s[sign_at - 1])))
            neg = s[sign_at] != '+';
        tb_str clean = {0};
        tb_str_append(&clean, neg ? "-" : "");
        scan_unsigned(s, n, i, &clean);
        *value = number_value(&clean);
        tb_str_free(&clean);
        return 1;
    }
    return 0;
}

/* expected as one whole number (surrounding whitespace allowed). */
static int parse_expected_number(const char *expected, double *value, char **err)
{
    size_t a, len;
    utrim(expected, strlen(expected), &a, &len);
    const unsigned char *s = (const unsigned char *)expected + a;
    size_t i = 0;
    int neg = 0;
    if (len >= 1 && (s[0] == '-' || s[0] == '+')) {
        neg = s[0] == '-';
        i = 1;
    } else if (len >= 3 && s[0] == 0xe2 && s[1] == 0x88 && s[2] == 0x92) {
        neg = 1;
        i = 3;
    }
    size_t end = i;
    tb_str clean = {0};
    tb_str_append(&clean, neg ? "-" : "");
    if (i < len && starts_number(s, len, i))
        end = scan_unsigned(s, len, i, &clean);
    if (end > i && end + 1 == len && s[end] == '.')
        end = len; /* "95." */
    if (end == i || end != len) {
        tb_str msg = {0};
        tb_str_append(&msg, "expected a number (e.g. 42, -1,234.5, 6.02e23), got ");
        tb_utf8_append_quoted(&msg, expected, strlen(expected), TB_EXCERPT_MAX);
        *err = tb_str_take(&msg);
        tb_str_free(&clean);
        return -1;
    }
    double v = number_value(&clean);
    tb_str_free(&clean);
    if (!isfinite(v)) {
        tb_str msg = {0};
        tb_str_append(&msg, "expected a finite number, got ");
        tb_utf8_append_quoted(&msg, expected, strlen(expected), TB_EXCERPT_MAX);
        *err = tb_str_take(&msg);
        return -1;
    }
    *value = v;
    return 0;
}

static pcre2_code *compile_regex(const char *pattern, char **err)
{
    uint32_t opts = PCRE2_UTF;
#ifdef PCRE2_MATCH_INVALID_UTF
    opts |= PCRE2_MATCH_INVALID_UTF;
#endif
    int code;
    PCRE2_SIZE off;
    pcre2_code *re =
        pcre2_compile((PCRE2_SPTR)pattern, strlen(pattern), opts, &code, &off, NULL);
    if (!re) {
        PCRE2_UCHAR buf[256];
        if (pcre2_get_error_message(code, buf, sizeof buf) < 0)
            snprintf((char *)buf, sizeof buf, "PCRE2 error %d", code);
        *err = tb_xasprintf("bad regex: %s at offset %zu", (const char *)buf, (size_t)off);
    }
    return re;
}

int tb_scorer_check_expected(tb_scorer s, const char *expected, char **err)
{
    if (!expected) {
        *err = tb_xstrdup("no expected answer");
        return -1;
    }
    switch (s) {
    case TB_SCORER_EXACT:
        return 0;
    case TB_SCORER_CONTAINS: {
        size_t a, len;
        utrim(expected, strlen(expected), &a, &len);
        if (len == 0) {
            *err = tb_xstrdup("empty expected answer (only whitespace): \"contains\" would match every output");
            return -1;
        }
        return 0;
    }
    case TB_SCORER_REGEX: {
        pcre2_code *re = compile_regex(expected, err);
        if (!re)
            return -1;
        pcre2_code_free(re);
        return 0;
    }
    case TB_SCORER_NUMERIC: {
        double v;
        return parse_expected_number(expected, &v, err);
    }
    }
    *err = tb_xasprintf("unknown scorer %d", (int)s);
    return -1;
}

int tb_score_answer(tb_scorer s, const char *output, const char *expected, char **err)
{
    if (!output)
        output = "";
    if (tb_scorer_check_expected(s, expected, err) != 0)
        return -1;
    size_t on = strlen(output), en = strlen(expected);
    switch (s) {
    case TB_SCORER_EXACT: {
        size_t oa, ol, ea, el;
        utrim(output, on, &oa, &ol);
        utrim(expected, en, &ea, &el);
        return ol == el && memcmp(output + oa, expected + ea, el) == 0;
    }
    case TB_SCORER_CONTAINS: {
        size_t ea, el;
        utrim(expected, en, &ea, &el);
        return memmem(output, on, expected + ea, el) != NULL;
    }
    case TB_SCORER_REGEX: {
        pcre2_code *re = compile_regex(expected, err);
        if (!re)
            return -1;
        pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
        if (!md) {
            pcre2_code_free(re);
            *err = tb_xstrdup("out of memory matching a regex");
            return -1;
        }
        int rc = pcre2_match(re, (PCRE2_SPTR)output, on, 0, 0, md, NULL);
        pcre2_match_data_free(md);
        pcre2_code_free(re);
        if (rc >= 0)
            return 1;
        if (rc == PCRE2_ERROR_NOMATCH)
            return 0;
        PCRE2_UCHAR buf[256];
        if (pcre2_get_error_message(rc, buf, sizeof buf) < 0)
            snprintf((char *)buf, sizeof buf, "PCRE2 error %d", rc);
        *err = tb_xasprintf("regex match failed: %s", (const char *)buf);
        return -1;
    }
    case TB_SCORER_NUMERIC: {
        double b, a;
        if (parse_expected_number(expected, &b, err) != 0)
            return -1;
        if (!tb_score_first_number(output, &a))
            return 0;
        return fabs(a - b) <= 1e-9 * fmax(1.0, fabs(b));
    }
    }
    return -1; /* not reached: tb_scorer_check_expected refused s */
}

/* ------------------------------------------------------------ n-grams */

typedef struct word {
    size_t off, len;
} word;

static int is_aspace(unsigned char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r');
}

/* Distinct n-grams / n-grams, or NAN. */
static double distinct_ratio(const char *text, int n)
{
    if (!text || n < 1)
        return NAN;
    const unsigned char *s = (const unsigned char *)text;
    size_t len = strlen(text), nw = 0, cap = 0;
    word *w = NULL;
    for (size_t i = 0; i < len;) {
        while (i < len && is_aspace(s[i]))
            i++;
        if (i == len)
            break;
        size_t st = i;
        while (i < len && !is_aspace(s[i]))
            i++;
        if (nw == cap) {
            cap = cap ? 2 * cap : 64;
            w = tb_xrealloc(w, cap * sizeof *w);
        }
        w[nw++] = (word){st, i - st};
    }
    if (nw < (size_t)n) {
        free(w);
        return NAN;
    }
    size_t total = nw - (size_t)n + 1;
    /* FNV-1a of each word, then of each n-gram's word hashes. */
    uint64_t *wh = tb_xmalloc(nw * sizeof *wh);
    for (size_t i = 0; i < nw; i++) {
        uint64_t h = UINT64_C(14695981039346656037);
        for (size_t k = 0; k < w[i].len; k++)
            h = (h ^ s[w[i].off + k]) * UINT64_C(1099511628211);
        wh[i] = h;
    }
    size_t tcap = 16;
    while (tcap < 2 * total)
        tcap *= 2;
    size_t *table = tb_xcalloc(tcap, sizeof *table); /* n-gram start + 1; 0 = empty */
    uint64_t *th = tb_xmalloc(tcap * sizeof *th);
    size_t distinct = 0;
    for (size_t j = 0; j < total; j++) {
        uint64_t h = UINT64_C(0x9e3779b97f4a7c15);
        for (int k = 0; k < n; k++) {
            h ^= wh[j + (size_t)k];
            h *= UINT64_C(0xff51afd7ed558ccd);
            h ^= h >> 33;
        }
        size_t slot = (size_t)h & (tcap - 1);
        for (;;) {
            if (!table[slot]) {
                table[slot] = j + 1;
                th[slot] = h;
                distinct++;
                break;
            }
            if (th[slot] == h) {
                size_t o = table[slot] - 1;
                int same = 1;
                for (int k = 0; k < n && same; k++) {
                    const word *x = &w[o + (size_t)k], *y = &w[j + (size_t)k];
                    same = x->len == y->len && memcmp(s + x->off, s + y->off, x->len) == 0;
                }
                if (same)
                    break;
            }
            slot = (slot + 1) & (tcap - 1);
        }
    }
    free(table);
    free(th);
    free(wh);
    free(w);
    return (double)distinct / (double)total;
}

double tb_score_distinct(const char *text, int n)
{
    return distinct_ratio(text, n);
}

double tb_score_repetition(const char *text, int n)
{
    double d = distinct_ratio(text, n);
    return isnan(d) ? NAN : 1.0 - d;
}
