/* score.c — prompt sets and scorers; see score.h for every definition.
 *
 * cJSON parses each line, but it neither checks UTF-8, nor keeps a
 * number's text, nor can a C string hold the U+0000 that "\u0000" decodes
 * to (cJSON writes the byte and the string ends there). So after cJSON has
 * accepted a line, a small scanner walks the same text again to find each
 * top-level member's key and value bytes: the value's text for a numeric
 * "answer", and any "\u0000" escape. cJSON keeps an object's members in
 * text order (duplicates included), so the i-th child is the i-th span. */
#define _GNU_SOURCE
#include "score.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <locale.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "util.h"

#define MAX_ERRORS 20
/* Longest excerpt of user text quoted in a message, in bytes. */
#define EXCERPT_MAX 40

/* ------------------------------------------------------------ UTF-8 */

/* Decode one UTF-8 sequence at s[0..n) (n >= 1): its length (1-4) and
 * *cp, or 0 when it is not a valid, shortest-form, non-surrogate
 * sequence of at most U+10FFFF. */
static size_t utf8_decode(const unsigned char *s, size_t n, uint32_t *cp)
{
    unsigned c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t len;
    uint32_t v, min;
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2, v = c & 0x1f, min = 0x80;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3, v = c & 0x0f, min = 0x800;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4, v = c & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        v = (v << 6) | (s[i] & 0x3f);
    }
    if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
        return 0;
    *cp = v;
    return len;
}

int tb_utf8_valid(const char *s, size_t n, size_t *bad)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        size_t l = utf8_decode(u + i, n - i, &cp);
        if (!l) {
            if (bad)
                *bad = i;
            return 0;
        }
        i += l;
    }
    return 1;
}

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
        size_t l = utf8_decode(u + a, b - a, &cp);
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
        size_t l = utf8_decode(u + k, b - k, &cp);
        if (l != b - k || !is_uspace(cp))
            break;
        b = k;
    }
    *start = a;
    *len = b - a;
}

/* Append s[0..n) to b quoted, at most `max` bytes of it (cut at a
 * character boundary, then "..."), with '"', '\\', control bytes and
 * invalid UTF-8 escaped, so that a message stays one readable line. */
static void append_quoted(tb_str *b, const char *s, size_t n, size_t max)
{
    const unsigned char *u = (const unsigned char *)s;
    tb_str_append(b, "\"");
    size_t i = 0;
    while (i < n) {
        if (i >= max) {
            tb_str_append(b, "...");
            break;
        }
        uint32_t cp;
        size_t l = utf8_decode(u + i, n - i, &cp);
        if (!l) {
            tb_str_appendf(b, "\\x%02x", u[i]);
            i++;
        } else if (cp == '"' || cp == '\\') {
            tb_str_appendf(b, "\\%c", (char)cp);
            i++;
        } else if (cp < 0x20 || cp == 0x7f) {
            tb_str_appendf(b, "\\x%02x", (unsigned)cp);
            i++;
        } else {
            tb_str_appendn(b, s + i, l);
            i += l;
        }
    }
    tb_str_append(b, "\"");
}

static void set_err(char *err, size_t err_size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_err(char *err, size_t err_size, const char *fmt, ...)
{
    if (!err || err_size == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_size, fmt, ap);
    va_end(ap);
}

/* ------------------------------------------------------------ scorers */

static const char *const scorer_names[TB_N_SCORERS] = {
    [TB_SCORER_EXACT] = "exact",
    [TB_SCORER_CONTAINS] = "contains",
    [TB_SCORER_REGEX] = "regex",
    [TB_SCORER_NUMERIC] = "numeric",
};

#define SCORER_LIST "exact, contains, regex, numeric"

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
 * digit), grammar in score.h. Appends its digits, '.' and exponent (no
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
static int parse_expected_number(const char *expected, double *value, char *err, size_t err_size)
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
        append_quoted(&msg, expected, strlen(expected), EXCERPT_MAX);
        set_err(err, err_size, "%s", msg.s);
        tb_str_free(&msg);
        tb_str_free(&clean);
        return -1;
    }
    double v = number_value(&clean);
    tb_str_free(&clean);
    if (!isfinite(v)) {
        tb_str msg = {0};
        tb_str_append(&msg, "expected a finite number, got ");
        append_quoted(&msg, expected, strlen(expected), EXCERPT_MAX);
        set_err(err, err_size, "%s", msg.s);
        tb_str_free(&msg);
        return -1;
    }
    *value = v;
    return 0;
}

static pcre2_code *compile_regex(const char *pattern, char *err, size_t err_size)
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
        set_err(err, err_size, "bad regex: %s at offset %zu", (const char *)buf, (size_t)off);
    }
    return re;
}

int tb_scorer_check_expected(tb_scorer s, const char *expected, char *err, size_t err_size)
{
    if (!expected) {
        set_err(err, err_size, "no expected answer");
        return -1;
    }
    switch (s) {
    case TB_SCORER_EXACT:
        return 0;
    case TB_SCORER_CONTAINS: {
        size_t a, len;
        utrim(expected, strlen(expected), &a, &len);
        if (len == 0) {
            set_err(err, err_size,
                    "empty expected answer (only whitespace): \"contains\" would match every output");
            return -1;
        }
        return 0;
    }
    case TB_SCORER_REGEX: {
        pcre2_code *re = compile_regex(expected, err, err_size);
        if (!re)
            return -1;
        pcre2_code_free(re);
        return 0;
    }
    case TB_SCORER_NUMERIC: {
        double v;
        return parse_expected_number(expected, &v, err, err_size);
    }
    }
    set_err(err, err_size, "unknown scorer %d", (int)s);
    return -1;
}

int tb_score_answer(tb_scorer s, const char *output, const char *expected, char *err,
                    size_t err_size)
{
    if (!output)
        output = "";
    if (tb_scorer_check_expected(s, expected, err, err_size) != 0)
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
        pcre2_code *re = compile_regex(expected, err, err_size);
        if (!re)
            return -1;
        pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
        if (!md) {
            pcre2_code_free(re);
            set_err(err, err_size, "out of memory matching a regex");
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
        set_err(err, err_size, "regex match failed: %s", (const char *)buf);
        return -1;
    }
    case TB_SCORER_NUMERIC: {
        double b, a;
        if (parse_expected_number(expected, &b, err, err_size) != 0)
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

/* ------------------------------------------------------------ errors */

typedef struct errs {
    const char *path;
    tb_str buf;
    int n;
} errs;

static void add_err(errs *e, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void add_err(errs *e, int line, const char *fmt, ...)
{
    if (++e->n > MAX_ERRORS)
        return;
    if (e->buf.len)
        tb_str_append(&e->buf, "\n");
    if (line > 0)
        tb_str_appendf(&e->buf, "%s:%d: ", e->path, line);
    else
        tb_str_appendf(&e->buf, "%s: ", e->path);
    va_list ap;
    va_start(ap, fmt);
    tb_str_vappendf(&e->buf, fmt, ap);
    va_end(ap);
}

/* Into err[err_size]: whole lines while they fit, else the first line cut. */
static void errs_finish(errs *e, char *err, size_t err_size)
{
    if (e->n > MAX_ERRORS)
        tb_str_appendf(&e->buf, "\n%s: %d more errors", e->path, e->n - MAX_ERRORS);
    if (err && err_size > 0 && e->buf.s) {
        size_t n = e->buf.len;
        if (n >= err_size) {
            n = 0;
            for (size_t i = 0; i < err_size - 1; i++)
                if (e->buf.s[i] == '\n')
                    n = i;
            if (n == 0)
                n = err_size - 1;
        }
        memcpy(err, e->buf.s, n);
        err[n] = '\0';
    }
    tb_str_free(&e->buf);
}

/* ------------------------------------------------------------ JSONL */

/* One top-level member of a line as written: where its value is, and
 * whether its key or any string inside its value has a \u0000. */
typedef struct member_span {
    size_t val_off, val_len;
    int key_nul, val_nul;
} member_span;

/* Skip bytes cJSON skips between tokens (every byte <= 32). */
static size_t skip_ws(const char *s, size_t n, size_t i)
{
    while (i < n && (unsigned char)s[i] <= 32)
        i++;
    return i;
}

/* s[i] == '"': past the closing quote; *nul set when a \u0000 occurs. */
static size_t skip_string(const char *s, size_t n, size_t i, int *nul)
{
    i++;
    while (i < n) {
        if (s[i] == '\\') {
            if (i + 5 < n && s[i + 1] == 'u' && memcmp(s + i + 2, "0000", 4) == 0)
                *nul = 1;
            i += 2;
        } else if (s[i] == '"') {
            return i + 1;
        } else {
            i++;
        }
    }
    return n;
}

static size_t skip_value(const char *s, size_t n, size_t i, int *nul)
{
    if (i >= n)
        return n;
    if (s[i] == '"')
        return skip_string(s, n, i, nul);
    if (s[i] == '{' || s[i] == '[') {
        int depth = 0;
        while (i < n) {
            char c = s[i];
            if (c == '"') {
                i = skip_string(s, n, i, nul);
                continue;
            }
            if (c == '{' || c == '[')
                depth++;
            else if ((c == '}' || c == ']') && --depth == 0)
                return i + 1;
            i++;
        }
        return n;
    }
    while (i < n && (unsigned char)s[i] > 32 && s[i] != ',' && s[i] != '}' && s[i] != ']')
        i++;
    return i;
}

/* The members of the object that cJSON parsed from s[0..n). Returns how
 * many were found (at most max). */
static size_t scan_members(const char *s, size_t n, member_span *m, size_t max)
{
    size_t i = skip_ws(s, n, 0), k = 0;
    if (i >= n || s[i] != '{')
        return 0;
    i = skip_ws(s, n, i + 1);
    if (i < n && s[i] == '}')
        return 0;
    while (i < n && k < max && s[i] == '"') {
        member_span *ms = &m[k];
        memset(ms, 0, sizeof *ms);
        i = skip_string(s, n, i, &ms->key_nul);
        i = skip_ws(s, n, i);
        if (i >= n || s[i] != ':')
            break;
        i = skip_ws(s, n, i + 1);
        ms->val_off = i;
        i = skip_value(s, n, i, &ms->val_nul);
        ms->val_len = i - ms->val_off;
        k++;
        i = skip_ws(s, n, i);
        if (i >= n || s[i] != ',')
            break;
        i = skip_ws(s, n, i + 1);
    }
    return k;
}

static const char *json_type(const cJSON *j)
{
    if (cJSON_IsString(j))
        return "a string";
    if (cJSON_IsNumber(j))
        return "a number";
    if (cJSON_IsBool(j))
        return "a boolean";
    if (cJSON_IsNull(j))
        return "null";
    if (cJSON_IsArray(j))
        return "an array";
    if (cJSON_IsObject(j))
        return "an object";
    return "an invalid value";
}

enum { K_PROMPT, K_ANSWER, K_TAGS, K_SCORER, N_KEYS };
static const char *const key_names[N_KEYS] = {"prompt", "answer", "tags", "scorer"};

/* A quoted excerpt of s for a message (malloc'd). */
static char *quoted(const char *s)
{
    tb_str b = {0};
    append_quoted(&b, s, strlen(s), EXCERPT_MAX);
    return tb_str_take(&b);
}

static int bad_utf8(errs *e, int line, const char *what, const char *s)
{
    size_t bad;
    if (tb_utf8_valid(s, strlen(s), &bad))
        return 0;
    add_err(e, line, "%s is not valid UTF-8 (byte 0x%02x at offset %zu)", what,
            (unsigned char)s[bad], bad);
    return 1;
}

static int valid_tag(const char *t)
{
    if (!*t)
        return 0;
    for (; *t; t++)
        if (!((*t >= 'a' && *t <= 'z') || is_digit((unsigned char)*t) || *t == '_'))
            return 0;
    return 1;
}

static void prompt_free(tb_prompt *p)
{
    free(p->prompt);
    free(p->answer);
    for (int i = 0; i < p->n_tags; i++)
        free(p->tags[i]);
    free(p->tags);
    memset(p, 0, sizeof *p);
}

/* The tags array j (already checked to be an array) into p; 0 or -1. */
static int parse_tags(errs *e, int line, const cJSON *j, tb_prompt *p)
{
    int n = cJSON_GetArraySize(j), i = 0;
    if (n == 0)
        return 0;
    p->tags = tb_xcalloc((size_t)n, sizeof *p->tags);
    const cJSON *t;
    cJSON_ArrayForEach(t, j)
    {
        char what[48];
        snprintf(what, sizeof what, "\"tags\"[%d]", i);
        if (!cJSON_IsString(t)) {
            add_err(e, line, "%s must be a string (a tag, [a-z0-9_]+), not %s", what, json_type(t));
            return -1;
        }
        if (bad_utf8(e, line, what, t->valuestring))
            return -1;
        if (!valid_tag(t->valuestring)) {
            char *q = quoted(t->valuestring);
            add_err(e, line, "%s %s is not a valid tag (expected [a-z0-9_]+)", what, q);
            free(q);
            return -1;
        }
        for (int k = 0; k < p->n_tags; k++)
            if (strcmp(p->tags[k], t->valuestring) == 0) {
                add_err(e, line, "%s \"%s\" is a duplicate tag", what, t->valuestring);
                return -1;
            }
        p->tags[p->n_tags++] = tb_xstrdup(t->valuestring);
        i++;
    }
    return 0;
}

/* One non-blank line s[0..n) into *p; 0, or -1 after one add_err. */
static int parse_line(errs *e, int line, const char *s, size_t n, tb_prompt *p)
{
    memset(p, 0, sizeof *p);
    p->line = line;
    p->scorer = -1;
    const char *nul = memchr(s, '\0', n);
    if (nul) {
        add_err(e, line, "NUL byte at column %zu", (size_t)(nul - s) + 1);
        return -1;
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(s, n, &end, 0);
    if (!root) {
        size_t pos = end && end >= s && end <= s + n ? (size_t)(end - s) : 0;
        tb_str m = {0};
        /* cJSON reports an error at or past the end as the last byte. */
        if (pos >= n) {
            tb_str_append(&m, "at the end of the line");
        } else {
            tb_str_appendf(&m, "at column %zu%s, near ", pos + 1,
                           pos + 1 == n ? " (the end of the line)" : "");
            append_quoted(&m, s + pos, n - pos, 20);
        }
        add_err(e, line, "not a JSON object: invalid JSON %s", m.s);
        tb_str_free(&m);
        return -1;
    }
    int rc = -1;
    size_t rest = end ? skip_ws(s, n, (size_t)(end - s)) : n;
    member_span *spans = NULL;
    int seen[N_KEYS] = {0};
    if (rest < n) {
        add_err(e, line, "not a JSON object: unexpected text after the object at column %zu",
                rest + 1);
        goto done;
    }
    if (!cJSON_IsObject(root)) {
        add_err(e, line, "not a JSON object: found %s", json_type(root));
        goto done;
    }
    size_t nmem = (size_t)cJSON_GetArraySize(root);
    spans = tb_xcalloc(nmem ? nmem : 1, sizeof *spans);
    size_t nspans = scan_members(s, n, spans, nmem);
    size_t idx = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, root)
    {
        const member_span *sp = nspans == nmem ? &spans[idx] : NULL;
        idx++;
        const char *key = m->string ? m->string : "";
        if (bad_utf8(e, line, "a key", key))
            goto done;
        int k = 0;
        while (k < N_KEYS && strcmp(key, key_names[k]) != 0)
            k++;
        if (sp && sp->key_nul) {
            char *q = quoted(key);
            add_err(e, line, "key %s... contains U+0000 (\\u0000)", q);
            free(q);
            goto done;
        }
        if (k == N_KEYS) {
            char *q = quoted(key);
            add_err(e, line, "unknown key %s (expected prompt, answer, tags, scorer)", q);
            free(q);
            goto done;
        }
        if (seen[k]++) {
            add_err(e, line, "duplicate key \"%s\"", key);
            goto done;
        }
        if (sp && sp->val_nul) {
            add_err(e, line, "\"%s\" contains U+0000 (\\u0000), which tokbench cannot pass on",
                    key);
            goto done;
        }
        switch (k) {
        case K_PROMPT:
            if (!cJSON_IsString(m) || !m->valuestring[0]) {
                add_err(e, line, "\"prompt\" must be a non-empty string, not %s",
                        cJSON_IsString(m) ? "\"\"" : json_type(m));
                goto done;
            }
            if (bad_utf8(e, line, "\"prompt\"", m->valuestring))
                goto done;
            p->prompt = tb_xstrdup(m->valuestring);
            break;
        case K_ANSWER:
            if (cJSON_IsString(m)) {
                if (bad_utf8(e, line, "\"answer\"", m->valuestring))
                    goto done;
                p->answer = tb_xstrdup(m->valuestring);
            } else if (cJSON_IsNumber(m)) {
                if (sp && sp->val_len > 0)
                    p->answer = tb_xstrndup(s + sp->val_off, sp->val_len);
                else
                    p->answer = tb_xasprintf("%.17g", m->valuedouble);
            } else {
                add_err(e, line, "\"answer\" must be a string or a number, not %s", json_type(m));
                goto done;
            }
            break;
        case K_TAGS:
            if (!cJSON_IsArray(m)) {
                add_err(e, line, "\"tags\" must be an array of strings ([a-z0-9_]+), not %s",
                        json_type(m));
                goto done;
            }
            if (parse_tags(e, line, m, p) != 0)
                goto done;
            break;
        case K_SCORER: {
            tb_scorer sc;
            if (!cJSON_IsString(m)) {
                add_err(e, line, "\"scorer\" must be a string (one of " SCORER_LIST "), not %s",
                        json_type(m));
                goto done;
            }
            if (tb_scorer_parse(m->valuestring, &sc) != 0) {
                char *q = quoted(m->valuestring);
                add_err(e, line, "unknown \"scorer\" %s (expected " SCORER_LIST ")", q);
                free(q);
                goto done;
            }
            p->scorer = (int)sc;
            break;
        }
        }
    }
    if (!p->prompt) {
        add_err(e, line, "missing \"prompt\" (a non-empty string)");
        goto done;
    }
    if (p->scorer >= 0) {
        char msg[512];
        if (!p->answer) {
            add_err(e, line, "\"scorer\" given without \"answer\"");
            goto done;
        }
        if (tb_scorer_check_expected((tb_scorer)p->scorer, p->answer, msg, sizeof msg) != 0) {
            add_err(e, line, "\"answer\" for scorer %s: %s", tb_scorer_name((tb_scorer)p->scorer),
                    msg);
            goto done;
        }
    }
    rc = 0;
done:
    free(spans);
    cJSON_Delete(root);
    if (rc != 0)
        prompt_free(p);
    return rc;
}

static int blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!is_aspace((unsigned char)s[i]))
            return 0;
    return 1;
}

void tb_prompt_set_free(tb_prompt_set *ps)
{
    if (!ps)
        return;
    for (size_t i = 0; i < ps->n; i++)
        prompt_free(&ps->items[i]);
    free(ps->items);
    free(ps->path);
    memset(ps, 0, sizeof *ps);
}

int tb_prompt_set_load(const char *path, tb_prompt_set *out, char *err, size_t err_size)
{
    memset(out, 0, sizeof *out);
    if (err && err_size)
        err[0] = '\0';
    errs e = {.path = path};
    struct stat st;
    size_t len = 0;
    char *text = NULL;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        errno = EISDIR;
    else
        text = tb_read_file(path, &len);
    if (!text) {
        add_err(&e, 0, "%s", strerror(errno));
        errs_finish(&e, err, err_size);
        return -1;
    }
    tb_prompt_set ps = {0};
    size_t cap = 0;
    const char *p = text, *end = text + len;
    if (len >= 3 && memcmp(p, "\xef\xbb\xbf", 3) == 0)
        p += 3;
    int line = 0;
    while (p < end) {
        line++;
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        if (!blank(p, n)) {
            tb_prompt item;
            if (parse_line(&e, line, p, n, &item) == 0) {
                if (ps.n == cap) {
                    cap = cap ? 2 * cap : 64;
                    ps.items = tb_xrealloc(ps.items, cap * sizeof *ps.items);
                }
                ps.items[ps.n++] = item;
            }
        }
        p = nl ? nl + 1 : end;
    }
    if (e.n == 0 && ps.n == 0)
        add_err(&e, 0, "no prompts: %s", len == 0 ? "the file is empty" : "every line is blank");
    if (e.n) {
        tb_prompt_set_free(&ps);
        free(text);
        errs_finish(&e, err, err_size);
        return -1;
    }
    tb_sha256_hex(text, len, ps.sha256);
    free(text);
    ps.path = tb_xstrdup(path);
    *out = ps;
    return 0;
}

tb_scorer tb_prompt_scorer(const tb_prompt *p, tb_scorer dflt)
{
    return p->scorer >= 0 && p->scorer < TB_N_SCORERS ? (tb_scorer)p->scorer : dflt;
}

int tb_prompt_set_check(const tb_prompt_set *ps, tb_scorer dflt, int need_answers, char *err,
                        size_t err_size)
{
    if (err && err_size)
        err[0] = '\0';
    errs e = {.path = ps->path ? ps->path : "(prompt set)"};
    for (size_t i = 0; i < ps->n; i++) {
        const tb_prompt *p = &ps->items[i];
        tb_scorer s = tb_prompt_scorer(p, dflt);
        char msg[512];
        if (!p->answer) {
            if (need_answers)
                add_err(&e, p->line, "no \"answer\" (scorer %s needs one)", tb_scorer_name(s));
        } else if (tb_scorer_check_expected(s, p->answer, msg, sizeof msg) != 0) {
            add_err(&e, p->line, "\"answer\" for scorer %s: %s", tb_scorer_name(s), msg);
        }
    }
    if (!e.n)
        return 0;
    errs_finish(&e, err, err_size);
    return -1;
}
