/* prompt_set.c — prompt sets (JSONL); see prompt_set.h for the format.
 *
 * cJSON parses each line, but it neither checks UTF-8, nor keeps a
 * number's text, nor can a C string hold the U+0000 that "\u0000" decodes
 * to (cJSON writes the byte and the string ends there). So after cJSON has
 * accepted a line, a small scanner walks the same text again to find each
 * top-level member's key and value bytes: the value's text for a numeric
 * "answer", and any "\u0000" escape. cJSON keeps an object's members in
 * text order (duplicates included), so the i-th child is the i-th span. */
#define _POSIX_C_SOURCE 200809L /* S_ISDIR */
#include "prompt_set.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "utf8.h"
#include "util.h"

/* Problems reported per load or check before "N more errors". */
#define MAX_ERRORS 20

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

/* The message for the caller: the lines so far, then the count of those
 * left out. */
static char *errs_take(errs *e)
{
    if (e->n > MAX_ERRORS)
        tb_str_appendf(&e->buf, "\n%s: %d more errors", e->path, e->n - MAX_ERRORS);
    return tb_str_take(&e->buf);
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
    tb_utf8_append_quoted(&b, s, strlen(s), TB_EXCERPT_MAX);
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
        if (!((*t >= 'a' && *t <= 'z') || (*t >= '0' && *t <= '9') || *t == '_'))
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
            tb_utf8_append_quoted(&m, s + pos, n - pos, 20);
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
                add_err(e, line, "\"scorer\" must be a string (one of " TB_SCORER_LIST "), not %s",
                        json_type(m));
                goto done;
            }
            if (tb_scorer_parse(m->valuestring, &sc) != 0) {
                char *q = quoted(m->valuestring);
                add_err(e, line, "unknown \"scorer\" %s (expected " TB_SCORER_LIST ")", q);
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
        char *msg = NULL;
        if (!p->answer) {
            add_err(e, line, "\"scorer\" given without \"answer\"");
            goto done;
        }
        if (tb_scorer_check_expected((tb_scorer)p->scorer, p->answer, &msg) != 0) {
            add_err(e, line, "\"answer\" for scorer %s: %s", tb_scorer_name((tb_scorer)p->scorer),
                    msg);
            free(msg);
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

/* Only ASCII whitespace (space, \t, \n, \v, \f, \r): a line skipped. */
static int blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && (s[i] < '\t' || s[i] > '\r'))
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

int tb_prompt_set_load(const char *path, tb_prompt_set *out, char **err)
{
    memset(out, 0, sizeof *out);
    errs e = {.path = path};
    size_t len = 0;
    char *text = tb_read_file_max(path, TB_READ_MAX_PROMPTS, &len);
    if (!text) {
        char why[160];
        add_err(&e, 0, "%s", tb_read_file_why(errno, TB_READ_MAX_PROMPTS, "a prompt set", why, sizeof why));
        *err = errs_take(&e);
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
        *err = errs_take(&e);
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

int tb_prompt_set_check(const tb_prompt_set *ps, tb_scorer dflt, int need_answers, char **err)
{
    errs e = {.path = ps->path ? ps->path : "(prompt set)"};
    for (size_t i = 0; i < ps->n; i++) {
        const tb_prompt *p = &ps->items[i];
        tb_scorer s = tb_prompt_scorer(p, dflt);
        char *msg = NULL;
        if (!p->answer) {
            if (need_answers)
                add_err(&e, p->line, "no \"answer\" (scorer %s needs one)", tb_scorer_name(s));
        } else if (tb_scorer_check_expected(s, p->answer, &msg) != 0) {
            add_err(&e, p->line, "\"answer\" for scorer %s: %s", tb_scorer_name(s), msg);
            free(msg);
        }
    }
    if (!e.n)
        return 0;
    *err = errs_take(&e);
    return -1;
}
