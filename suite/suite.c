/* suite.c — parse suites; see suite.h for the format.
 *
 * inih's handler is not told line numbers (Debian builds it without
 * INI_HANDLER_LINENO), so files are fed through ini_parse_stream with our
 * own line reader, which counts lines: when the handler runs, the reader's
 * count is the line of the key being handled.
 *
 * Nor is the handler told of section headers (no
 * INI_CALL_HANDLER_ON_NEW_SECTION): it only sees each key's section name,
 * which hides sections without keys and a section repeated back to back.
 * So the reader spots header lines itself, the way inih reads them, and
 * enters each section at its own line. */
#define _GNU_SOURCE
#include "suite.h"

#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dims.h"
#include "utf8.h"
#include "util.h"

#define MAX_INCLUDE_DEPTH 8
#define TB_DIM_INT_MAX 1000000000LL /* an integer dimension's largest value (every count fits 32 bits with room) */
#define MAX_ERRORS 20
#define MAX_BACKENDS 1000 /* each has cases of its own; and labels are compared pairwise */

const char *tb_dim_name(tb_dim d)
{
    return d < TB_N_DIMS ? tb_dim_defs[d].name : "?";
}

tb_dim tb_dim_from_name(const char *name)
{
    for (int d = 0; d < TB_N_DIMS; d++)
        if (strcmp(tb_dim_defs[d].name, name) == 0)
            return (tb_dim)d;
    return TB_N_DIMS;
}

int tb_dim_parse_value(tb_dim d, const char *text, double *out, char **err)
{
    char *end;
    errno = 0;
    if (tb_dim_defs[d].is_rate) {
        /* a load search instead of a rate (core/search.h) */
        if (strcmp(text, "sweep") == 0 || strcmp(text, "slo") == 0) {
            *out = text[1] == 'w' ? TB_RATE_SWEEP : TB_RATE_SLO;
            return 0;
        }
        double v = strtod(text, &end);
        if (end == text || *end || errno || !isfinite(v) || v <= 0) {
            *err = tb_xasprintf("expected a rate in requests/s > 0, sweep or slo, got \"%s\"", text);
            return -1;
        }
        if (v < TB_RATE_MIN) {
            *err = tb_xasprintf("a rate of %g requests/s is below the least, %g (TB_RATE_MIN: an open loop's "
                                "schedule of int64 nanoseconds must hold its gaps), got \"%s\"",
                                v, TB_RATE_MIN, text);
            return -1;
        }
        *out = v;
        return 0;
    }
    long long v = strtoll(text, &end, 10);
    long long lo = tb_dim_defs[d].min;
    if (end == text || *end || errno || v < lo || v > TB_DIM_INT_MAX) {
        *err = tb_xasprintf("expected an integer in [%lld, %lld], got \"%s\"", lo, TB_DIM_INT_MAX, text);
        return -1;
    }
    *out = (double)v;
    return 0;
}

/* ------------------------------------------------------------ parsing */

typedef enum { SEC_NONE, SEC_SUITE, SEC_MATRIX, SEC_BACKEND, SEC_PROMPTS, SEC_TELEMETRY } section_kind;

struct parser;

/* One file being read: the in-memory text and the reader's position. */
typedef struct file_reader {
    struct parser *p;
    const char *file; /* owned by suite->files */
    const char *pos, *end;
    int line;          /* lines handed to inih so far */
    int too_long_line; /* first line over inih's limit, or 0 */
    int prev_key;      /* a key was read since the last header (inih's
                          prev_name: an indented line continues it) */
    int continuation;  /* the current line is such a continuation */
} file_reader;

typedef struct parser {
    tb_suite *s;
    tb_str errors;
    int n_errors;
    int depth;
    file_reader *rd; /* the file inih is reading now */
    section_kind sec;
    tb_suite_backend *be; /* current backend section (into s->backends,
                             which an include may move: see parse_file) */
    /* Every file read, by realpath, each once: a file named again is
     * refused (a cycle if it is still being read), so loading is linear
     * in the suite's text however its includes are drawn. */
    struct read_file { char *real; const char *name; tb_loc from; int open; } *read;
    size_t n_read;
    size_t *stack; /* indexes in read of the files being read, outermost first */
    size_t n_stack;
    tb_str text;   /* the files' text, as tb_suite.text */
    /* keys seen in the current section of the suite: for duplicates */
    struct seen { char *section; char *key; tb_loc loc; } *seen;
    size_t n_seen;
    size_t *slots; /* a hash of seen: index + 1, 0 free (a suite may have
                      many keys: a linear search would be quadratic) */
    size_t n_slots;
    char *cur_section; /* name of the current section as written */
    int have_suite_name;
} parser;

static void add_error(parser *p, tb_loc loc, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void add_error(parser *p, tb_loc loc, const char *key, const char *fmt, ...)
{
    if (++p->n_errors > MAX_ERRORS)
        return;
    tb_str m = {0};
    if (loc.line > 0)
        tb_str_appendf(&m, "%s:%d: ", loc.file, loc.line);
    else
        tb_str_appendf(&m, "%s: ", loc.file);
    if (key)
        tb_str_appendf(&m, "%s: ", key);
    va_list ap;
    va_start(ap, fmt);
    tb_str_vappendf(&m, fmt, ap);
    va_end(ap);
    /* the message quotes the suite's bytes: escaped, one line */
    tb_utf8_append_printable(&p->errors, m.s, m.len, 0);
    tb_str_free(&m);
    tb_str_append(&p->errors, "\n");
}

static void enter_section(struct parser *p, const char *name);

/* Classify a line as inih will (ini_parse_stream in inih r55): a comment
 * or blank line, a continuation of the previous key (indented, after a
 * key), or a "[section]" header, which is entered here. */
static void scan_line(file_reader *rd, const char *line)
{
    rd->continuation = 0;
    const char *s = line;
    if (rd->line == 1 && (unsigned char)s[0] == 0xEF && (unsigned char)s[1] == 0xBB &&
        (unsigned char)s[2] == 0xBF)
        s += 3; /* INI_ALLOW_BOM */
    const char *start = s;
    while (*start && isspace((unsigned char)*start))
        start++;
    if (!*start || *start == ';' || *start == '#')
        return;
    if (rd->prev_key && start > line) {
        rd->continuation = 1;
        return;
    }
    if (*start != '[')
        return;
    /* Up to ']', or to an inline comment (';' after a space): then inih
     * reports the line as malformed and stays in the current section. */
    const char *end = start + 1;
    int was_space = 0;
    while (*end && *end != ']' && !(was_space && *end == ';')) {
        was_space = isspace((unsigned char)*end);
        end++;
    }
    if (*end != ']')
        return;
    char *name = tb_xstrndup(start + 1, (size_t)(end - start - 1));
    rd->prev_key = 0;
    enter_section(rd->p, name);
    /* inih drops what follows the ']': a key written there ("[matrix]
     * batch = 1, 4") would vanish without a word. Only a comment may. */
    const char *after = end + 1;
    while (*after && isspace((unsigned char)*after))
        after++;
    if (*after && *after != ';' && *after != '#')
        add_error(rd->p, (tb_loc){rd->file, rd->line}, NULL,
                  "text after the section header [%s]: \"%.*s\" (a key goes on a line of its own)", name,
                  (int)strcspn(after, "\r\n"), after);
    free(name);
}

static char *reader_fn(char *str, int num, void *stream)
{
    file_reader *rd = stream;
    if (rd->pos >= rd->end)
        return NULL;
    const char *nl = memchr(rd->pos, '\n', (size_t)(rd->end - rd->pos));
    size_t len = nl ? (size_t)(nl - rd->pos) + 1 : (size_t)(rd->end - rd->pos);
    rd->line++;
    if (len > (size_t)num - 1) {
        if (!rd->too_long_line)
            rd->too_long_line = rd->line;
        len = (size_t)num - 1; /* inih sees a truncated line; we report it */
    }
    memcpy(str, rd->pos, len);
    str[len] = '\0';
    rd->pos = nl ? nl + 1 : rd->end;
    scan_line(rd, str);
    return str;
}

static tb_loc here(parser *p)
{
    return (tb_loc){p->rd->file, p->rd->line};
}

/* Expand ${VAR} and ${VAR:-default} in v[0, n) onto out; a default is
 * expanded in turn, so ${A:-${B}} is B's value when A is unset. 0, or -1
 * with an error recorded. */
static int expand_into(parser *p, const char *key, const char *v, size_t n, tb_str *out)
{
    const char *end = v + n;
    while (v < end) {
        if (!(v[0] == '$' && v + 1 < end && v[1] == '{')) {
            tb_str_appendn(out, v, 1);
            v++;
            continue;
        }
        /* the matching '}', past nested ${...} */
        const char *close = v + 2;
        for (int depth = 0; close < end; close++) {
            if (close[0] == '$' && close + 1 < end && close[1] == '{')
                depth++, close++;
            else if (*close == '}' && depth-- == 0)
                break;
        }
        if (close >= end) {
            add_error(p, here(p), key, "unterminated \"${\" (expected ${NAME} or ${NAME:-default})");
            return -1;
        }
        const char *name = v + 2, *dflt = NULL;
        size_t name_len = (size_t)(close - name);
        const char *sep = memmem(name, name_len, ":-", 2);
        if (sep) {
            dflt = sep + 2;
            name_len = (size_t)(sep - name);
        }
        int ok = name_len > 0;
        for (size_t k = 0; k < name_len; k++)
            if (!(isalnum((unsigned char)name[k]) || name[k] == '_'))
                ok = 0;
        if (!ok) {
            add_error(p, here(p), key, "bad environment reference \"${%.*s}\" (expected a name of letters, digits and _)",
                      (int)(close - name), name);
            return -1;
        }
        char *var = tb_xstrndup(name, name_len);
        const char *val = getenv(var);
        if (!val && !dflt) {
            add_error(p, here(p), key, "environment variable %s is not set (write ${%s:-default} for a fallback)", var,
                      var);
            free(var);
            return -1;
        }
        free(var);
        if (val)
            tb_str_append(out, val);
        else if (expand_into(p, key, dflt, (size_t)(close - dflt), out) != 0)
            return -1;
        v = close + 1;
    }
    return 0;
}

/* Expand the environment references of a value. Returns malloc'd text or
 * NULL with an error recorded. */
static char *expand_env(parser *p, const char *key, const char *v)
{
    tb_str out = {0};
    if (expand_into(p, key, v, strlen(v), &out) != 0) {
        tb_str_free(&out);
        return NULL;
    }
    return tb_str_take(&out);
}

static void list_split(tb_list *l, const char *value, tb_loc loc, int split)
{
    memset(l, 0, sizeof *l); /* callers hand in fresh, uninitialized slots */
    l->raw = tb_xstrdup(value);
    l->loc = loc;
    l->items = NULL;
    l->n = 0;
    char *copy = tb_xstrdup(value);
    if (!split) {
        l->items = tb_xmalloc(sizeof(char *));
        l->items[l->n++] = tb_xstrdup(tb_trim(copy));
        free(copy);
        return;
    }
    /* strtok_r would merge empty items; walk commas by hand so "1,,2"
     * becomes an empty item the caller rejects. */
    char *start = copy;
    for (;;) {
        char *comma = strchr(start, ',');
        if (comma)
            *comma = '\0';
        l->items = tb_xrealloc(l->items, (l->n + 1) * sizeof(char *));
        l->items[l->n++] = tb_xstrdup(tb_trim(start));
        if (!comma)
            break;
        start = comma + 1;
    }
    free(copy);
}

static void list_free(tb_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->items[i]);
    free(l->items);
    free(l->raw);
    free(l->num);
    memset(l, 0, sizeof *l);
}

static int parse_dim_list(parser *p, tb_dim d, tb_list *l, const char *key)
{
    l->num = tb_xcalloc(l->n, sizeof(double));
    for (size_t i = 0; i < l->n; i++) {
        if (!l->items[i][0]) {
            add_error(p, l->loc, key, "empty list item in \"%s\" (expected comma-separated values)", l->raw);
            return -1;
        }
        char *msg = NULL;
        if (tb_dim_parse_value(d, l->items[i], &l->num[i], &msg) != 0) {
            add_error(p, l->loc, key, "%s", msg);
            free(msg);
            return -1;
        }
        for (size_t j = 0; j < i; j++)
            if (l->num[j] == l->num[i]) {
                add_error(p, l->loc, key, "value %s is listed twice", l->items[i]);
                return -1;
            }
    }
    return 0;
}

static int parse_int_key(parser *p, const char *key, const char *v, long long lo,
                         long long hi, long long *out)
{
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (end == v || *end || errno || x < lo || x > hi) {
        add_error(p, here(p), key, "expected an integer in [%lld, %lld], got \"%s\"", lo, hi, v);
        return -1;
    }
    *out = x;
    return 0;
}

static int parse_seconds_key(parser *p, const char *key, const char *v, double *out)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (end == v || *end || errno || !isfinite(x) || x <= 0 || x > 7 * 24 * 3600.0) {
        add_error(p, here(p), key, "expected a duration in seconds > 0, got \"%s\"", v);
        return -1;
    }
    *out = x;
    return 0;
}

static size_t seen_hash(const char *section, const char *key)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a over section, NUL, key */
    for (const char *c = section;; c++) {
        h = (h ^ (unsigned char)*c) * 1099511628211ull;
        if (!*c)
            break;
    }
    for (const char *c = key; *c; c++)
        h = (h ^ (unsigned char)*c) * 1099511628211ull;
    return (size_t)h;
}

static int check_duplicate(parser *p, const char *key)
{
    if (2 * (p->n_seen + 1) > p->n_slots) { /* keep it at most half full */
        size_t n = p->n_slots ? 2 * p->n_slots : 64;
        free(p->slots);
        p->slots = tb_xcalloc(n, sizeof *p->slots);
        p->n_slots = n;
        for (size_t i = 0; i < p->n_seen; i++) {
            size_t h = seen_hash(p->seen[i].section, p->seen[i].key) & (n - 1);
            while (p->slots[h])
                h = (h + 1) & (n - 1);
            p->slots[h] = i + 1;
        }
    }
    size_t h = seen_hash(p->cur_section, key) & (p->n_slots - 1);
    for (; p->slots[h]; h = (h + 1) & (p->n_slots - 1)) {
        const struct seen *x = &p->seen[p->slots[h] - 1];
        if (strcmp(x->section, p->cur_section) == 0 && strcmp(x->key, key) == 0) {
            add_error(p, here(p), key, "set twice in [%s] (first at %s:%d)", p->cur_section, x->loc.file,
                      x->loc.line);
            return -1;
        }
    }
    p->slots[h] = p->n_seen + 1;
    p->seen = tb_xrealloc(p->seen, (p->n_seen + 1) * sizeof *p->seen);
    p->seen[p->n_seen++] = (struct seen){tb_xstrdup(p->cur_section), tb_xstrdup(key), here(p)};
    return 0;
}

static int parse_file(parser *p, const char *path, tb_loc from);
static int check_text(parser *p, const char *file, const char *text, size_t len);

/* A relative path that exists next to the file being read is taken from
 * there (suites ship with their models); otherwise it is kept as written
 * (relative to the working directory). */
static char *relative_to_file(parser *p, const char *v)
{
    const char *slash = strrchr(p->rd->file, '/');
    if (v[0] == '/' || !v[0] || !slash)
        return tb_xstrdup(v);
    char *near = tb_xasprintf("%.*s/%s", (int)(slash - p->rd->file), p->rd->file, v);
    /* A path ('/' or a .so name) is relative to this file even when
     * nothing is there (the error then names that place), never to the
     * working directory; a bare name next to the file is taken, else it
     * stays a name (a preset, a plugin to search for). */
    size_t vl = strlen(v);
    if (access(near, F_OK) == 0 || strchr(v, '/') || (vl > 3 && strcmp(v + vl - 3, ".so") == 0))
        return near;
    free(near);
    return tb_xstrdup(v);
}

static int valid_label(const char *s)
{
    if (!*s)
        return 0;
    for (; *s; s++)
        if (!(isalnum((unsigned char)*s) || *s == '_' || *s == '-' || *s == '.'))
            return 0;
    return 1;
}

/* Enter section `name` (as written between brackets), at its header line. */
static void enter_section(parser *p, const char *name)
{
    free(p->cur_section);
    p->cur_section = tb_xstrdup(name);
    p->be = NULL;
    if (strcmp(name, "suite") == 0) {
        p->sec = SEC_SUITE;
    } else if (strcmp(name, "matrix") == 0) {
        p->sec = SEC_MATRIX;
    } else if (strcmp(name, "prompts") == 0) {
        p->sec = SEC_PROMPTS;
        p->s->prompts.loc = here(p);
    } else if (strcmp(name, "telemetry") == 0) {
        p->sec = SEC_TELEMETRY;
        p->s->has_telemetry = 1;
    } else if (strncmp(name, "backend", 7) == 0 &&
               (name[7] == ' ' || name[7] == '\t' || name[7] == '\0')) {
        p->sec = SEC_BACKEND;
        char *orig = tb_xstrdup(name + 7);
        char *label = tb_trim(orig);
        if (!valid_label(label)) {
            add_error(p, here(p), NULL, "[%s]: expected [backend LABEL] with a label of letters, digits, '_', '-' or '.'", name);
            p->sec = SEC_NONE;
            free(orig);
            return;
        }
        tb_suite *s = p->s;
        if (s->n_backends >= MAX_BACKENDS) {
            add_error(p, here(p), NULL, "more than %d [backend] sections (expected fewer)", MAX_BACKENDS);
            p->sec = SEC_NONE;
            free(orig);
            return;
        }
        for (size_t i = 0; i < s->n_backends; i++)
            if (strcmp(s->backends[i].label, label) == 0) {
                add_error(p, here(p), NULL, "[backend %s] is defined twice (first at %s:%d)", label,
                          s->backends[i].loc.file, s->backends[i].loc.line);
                p->sec = SEC_NONE;
                free(orig);
                return;
            }
        s->backends = tb_xrealloc(s->backends, (s->n_backends + 1) * sizeof *s->backends);
        p->be = &s->backends[s->n_backends++];
        memset(p->be, 0, sizeof *p->be);
        p->be->label = tb_xstrdup(label);
        p->be->model = tb_xstrdup("");
        p->be->loc = here(p);
        free(orig);
    } else {
        add_error(p, here(p), NULL, "unknown section [%s] (expected [suite], [matrix], [prompts], [telemetry] or [backend LABEL])", name);
        p->sec = SEC_NONE;
    }
}

static void handle_suite_key(parser *p, const char *key, const char *v)
{
    tb_suite *s = p->s;
    long long x;
    if (strcmp(key, "name") == 0) {
        if (!*v) {
            add_error(p, here(p), key, "expected a non-empty name");
            return;
        }
        free(s->name);
        s->name = tb_xstrdup(v);
        p->have_suite_name = 1;
    } else if (strcmp(key, "description") == 0) {
        free(s->description);
        s->description = tb_xstrdup(v);
    } else if (strcmp(key, "warmup") == 0) {
        if (parse_int_key(p, key, v, 0, 1000, &x) == 0)
            s->warmup = (int)x;
    } else if (strcmp(key, "repeat") == 0) {
        if (parse_int_key(p, key, v, 1, 100000, &x) == 0) {
            s->repeat = (int)x;
            s->repeat_loc = here(p);
        }
    } else if (strcmp(key, "seed") == 0) {
        if (parse_int_key(p, key, v, 0, LLONG_MAX, &x) == 0)
            s->seed = (uint64_t)x;
    } else if (strcmp(key, "models_dir") == 0) {
        if (!*v) {
            add_error(p, here(p), key, "expected a folder");
            return;
        }
        free(s->models_dir);
        s->models_dir = relative_to_file(p, v);
        s->models_dir_loc = here(p);
    } else if (strcmp(key, "case_timeout") == 0) {
        parse_seconds_key(p, key, v, &s->case_timeout_s);
    } else if (strcmp(key, "load_timeout") == 0) {
        parse_seconds_key(p, key, v, &s->load_timeout_s);
    } else if (strcmp(key, "memory_limit") == 0) {
        char *end;
        errno = 0;
        double x = strtod(v, &end);
        if (end == v || *end || errno || !isfinite(x) || x < 1 || x > 1 << 30)
            add_error(p, here(p), key, "expected MiB of memory per backend process, >= 1, got \"%s\"", v);
        else
            s->memory_limit_mb = x;
    } else if (strcmp(key, "goodput_ttft_ms") == 0 || strcmp(key, "goodput_tpot_ms") == 0) {
        char *end;
        errno = 0;
        double x = strtod(v, &end);
        if (end == v || *end || errno || !isfinite(x) || x <= 0)
            add_error(p, here(p), key, "expected a limit in milliseconds > 0, got \"%s\"", v);
        else if (strcmp(key, "goodput_ttft_ms") == 0)
            s->goodput_ttft_ms = x;
        else
            s->goodput_tpot_ms = x;
    } else if (strcmp(key, "open_loop_duration") == 0) {
        parse_seconds_key(p, key, v, &s->open_loop_duration_s);
    } else if (strcmp(key, "sweep_rates") == 0) {
        if (parse_int_key(p, key, v, 1, 100, &x) == 0)
            s->sweep_rates = (int)x;
    } else if (strcmp(key, "slo_iterations") == 0) {
        if (parse_int_key(p, key, v, 1, 30, &x) == 0)
            s->slo_iterations = (int)x;
    } else if (strcmp(key, "slo_ttft_p99_ms") == 0 || strcmp(key, "slo_tpot_p99_ms") == 0 ||
               strcmp(key, "slo_goodput_pct") == 0) {
        char *end;
        errno = 0;
        double x = strtod(v, &end);
        int pct = key[4] == 'g';
        if (end == v || *end || errno || !isfinite(x) || x <= 0 || (pct && x > 100))
            add_error(p, here(p), key, pct ? "expected a share of requests in percent, 0 < x <= 100, got \"%s\""
                                           : "expected a limit in milliseconds > 0, got \"%s\"", v);
        else if (pct)
            s->slo_goodput_pct = x;
        else if (key[4] == 't' && key[5] == 't')
            s->slo_ttft_p99_ms = x;
        else
            s->slo_tpot_p99_ms = x;
        s->slo_loc = here(p);
    } else {
        add_error(p, here(p), key, "unknown key in [suite] (expected name, description, warmup, repeat, seed, case_timeout, load_timeout, memory_limit, models_dir, goodput_ttft_ms, goodput_tpot_ms, open_loop_duration, sweep_rates, slo_ttft_p99_ms, slo_tpot_p99_ms, slo_goodput_pct, slo_iterations or include)");
    }
}

static void handle_prompts_key(parser *p, const char *key, const char *v)
{
    tb_suite_prompts *ps = &p->s->prompts;
    long long x;
    if (strcmp(key, "file") == 0) {
        if (!*v) {
            add_error(p, here(p), key, "expected the path of a JSONL prompt set");
            return;
        }
        free(ps->file);
        ps->file = relative_to_file(p, v);
        ps->file_loc = here(p);
    } else if (strcmp(key, "limit") == 0) {
        if (parse_int_key(p, key, v, 0, 100000000, &x) == 0)
            ps->limit = (int)x;
    } else if (strcmp(key, "scorer") == 0) {
        if (strcmp(v, "exact") && strcmp(v, "contains") && strcmp(v, "regex") && strcmp(v, "numeric")) {
            add_error(p, here(p), key, "expected exact, contains, regex or numeric, got \"%s\"", v);
            return;
        }
        free(ps->scorer);
        ps->scorer = tb_xstrdup(v);
        ps->scorer_loc = here(p);
    } else if (strcmp(key, "repetition_n") == 0) {
        if (parse_int_key(p, key, v, 1, 16, &x) == 0)
            ps->repetition_n = (int)x;
    } else if (strcmp(key, "distinct_n") == 0) {
        if (parse_int_key(p, key, v, 1, 16, &x) == 0)
            ps->distinct_n = (int)x;
    } else if (strcmp(key, "judge") == 0) {
        if (!valid_label(v)) {
            add_error(p, here(p), key, "expected the label of a [backend LABEL] section, got \"%s\"", v);
            return;
        }
        free(ps->judge);
        ps->judge = tb_xstrdup(v);
        ps->judge_loc = here(p);
    } else if (strcmp(key, "judge_tags") == 0) {
        list_free(&ps->judge_tags);
        list_split(&ps->judge_tags, v, here(p), 1);
        for (size_t i = 0; i < ps->judge_tags.n; i++) {
            const char *t = ps->judge_tags.items[i];
            if (!*t || strspn(t, "abcdefghijklmnopqrstuvwxyz0123456789_") != strlen(t))
                add_error(p, here(p), key, "expected tags of [a-z0-9_]+ separated by commas, got \"%s\"", t);
        }
    } else if (strcmp(key, "judge_context") == 0) {
        if (strcmp(v, "prompt") == 0)
            ps->judge_context = 1;
        else if (strcmp(v, "none") == 0)
            ps->judge_context = 0;
        else
            add_error(p, here(p), key, "expected prompt (score the output after its prompt) or none, got \"%s\"", v);
    } else {
        add_error(p, here(p), key, "unknown key in [prompts] (expected file, limit, scorer, repetition_n, distinct_n, judge, judge_context, judge_tags or include)");
    }
}

static int handler(void *user, const char *section, const char *name, const char *value)
{
    parser *p = user;
    (void)section; /* the reader entered it (inih truncates long names) */
    p->rd->prev_key = name[0] != '\0'; /* as inih's prev_name */
    if (p->rd->continuation) {
        add_error(p, here(p), name, "indented line continues the value of %s (expected each key = value at the start of its line)",
                  name);
        return 1;
    }

    char *v = expand_env(p, name, value);
    if (!v)
        return 1;
    if (strchr(value, '$')) { /* the file's bytes were checked; the environment's were not */
        size_t bad = 0, n = strlen(v), ctl = strcspn(v, "\x01\x02\x03\x04\x05\x06\x07\x08\x0a\x0b\x0c\x0d\x0e"
                                                         "\x0f\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x1b"
                                                         "\x1c\x1d\x1e\x1f\x7f");
        int valid = tb_utf8_valid(v, n, &bad);
        if (ctl < n || !valid) {
            size_t at = !valid && bad < ctl ? bad : ctl;
            add_error(p, here(p), name, "the value from the environment has %s 0x%02x (a suite value is UTF-8 "
                      "text: no control characters but tab)", at == ctl ? "control character" : "invalid UTF-8, byte",
                      (unsigned char)v[at]);
            free(v);
            return 1;
        }
    }

    if (strcmp(name, "include") == 0) {
        /* parse_file saves and restores the current section. */
        parse_file(p, v, here(p));
        free(v);
        return 1;
    }
    if (!p->cur_section) {
        add_error(p, here(p), name, "key outside any section (expected [suite], [matrix] or [backend LABEL] first)");
        free(v);
        return 1;
    }
    if (p->sec == SEC_NONE) {
        free(v);
        return 1; /* the section's own error was reported */
    }
    if (check_duplicate(p, name) != 0) {
        free(v);
        return 1;
    }

    tb_dim d = tb_dim_from_name(name);
    switch (p->sec) {
    case SEC_SUITE:
        handle_suite_key(p, name, v);
        break;
    case SEC_PROMPTS:
        handle_prompts_key(p, name, v);
        break;
    case SEC_TELEMETRY: { /* checked by core/telemetry.c */
        tb_suite *s = p->s;
        s->telemetry = tb_xrealloc(s->telemetry, (s->n_telemetry + 1) * sizeof *s->telemetry);
        tb_setting *st = &s->telemetry[s->n_telemetry++];
        st->key = tb_xstrdup(name);
        list_split(&st->value, v, here(p), 1);
        break;
    }
    case SEC_MATRIX:
        if (d != TB_N_DIMS) {
            list_split(&p->s->dims[d], v, here(p), 1);
            if (parse_dim_list(p, d, &p->s->dims[d], name) != 0)
                list_free(&p->s->dims[d]); /* as if unset: the plan's checks go on */
        } else {
            tb_suite *s = p->s;
            s->sweeps = tb_xrealloc(s->sweeps, (s->n_sweeps + 1) * sizeof *s->sweeps);
            tb_setting *st = &s->sweeps[s->n_sweeps++];
            st->key = tb_xstrdup(name);
            list_split(&st->value, v, here(p), 1);
        }
        break;
    case SEC_BACKEND: {
        tb_suite_backend *be = p->be;
        if (strcmp(name, "plugin") == 0) {
            if (!*v)
                add_error(p, here(p), name, "expected a plugin name or path");
            free(be->plugin);
            /* a path (a '/' or a .so name) is relative to this file, never
             * to the working directory; a bare name is searched for */
            size_t vl = strlen(v);
            int is_path = strchr(v, '/') || (vl > 3 && strcmp(v + vl - 3, ".so") == 0);
            be->plugin = is_path ? relative_to_file(p, v) : tb_xstrdup(v);
            be->plugin_loc = here(p);
        } else if (strcmp(name, "model") == 0) {
            free(be->model);
            be->model = strchr(v, ':') ? tb_xstrdup(v) : relative_to_file(p, v);
            be->model_loc = here(p);
        } else if (d != TB_N_DIMS) {
            list_split(&be->dims[d], v, here(p), 1);
            if (strcmp(v, "none") == 0 && !tb_dim_defs[d].required) {
                be->dims[d].none = 1;
                be->dims[d].n = 0;
                free(be->dims[d].items[0]);
            } else if (parse_dim_list(p, d, &be->dims[d], name) != 0) {
                list_free(&be->dims[d]); /* as if unset: the plan's checks go on */
            }
        } else {
            /* A plugin option; split later, once its type is known. */
            be->settings = tb_xrealloc(be->settings, (be->n_settings + 1) * sizeof *be->settings);
            tb_setting *st = &be->settings[be->n_settings++];
            st->key = tb_xstrdup(name);
            list_split(&st->value, v, here(p), 0);
        }
        break;
    }
    default:
        break;
    }
    free(v);
    return 1;
}

/* "a.ini -> b.ini -> a.ini": the chain of includes from the file at
 * stack position k to `again`. malloc'd. */
static char *include_chain(parser *p, size_t k, const char *again)
{
    tb_str b = {0};
    for (; k < p->n_stack; k++)
        tb_str_appendf(&b, "%s -> ", p->read[p->stack[k]].name);
    tb_str_append(&b, again);
    return tb_str_take(&b);
}

static int parse_file(parser *p, const char *path, tb_loc from)
{
    tb_suite *s = p->s;
    char *full;
    if (path[0] != '/' && from.file) {
        const char *slash = strrchr(from.file, '/');
        full = slash ? tb_xasprintf("%.*s/%s", (int)(slash - from.file), from.file, path)
                     : tb_xstrdup(path);
    } else {
        full = tb_xstrdup(path);
    }
    if (p->depth >= MAX_INCLUDE_DEPTH) {
        add_error(p, from, "include", "includes nested deeper than %d (expected no cycles)", MAX_INCLUDE_DEPTH);
        free(full);
        return -1;
    }
    char *real = realpath(full, NULL);
    for (size_t i = 0; real && i < p->n_read; i++) {
        if (strcmp(p->read[i].real, real) != 0)
            continue;
        if (p->read[i].open) {
            size_t k = 0;
            while (p->stack[k] != i)
                k++;
            char *chain = include_chain(p, k, full);
            add_error(p, from, "include", "\"%s\" includes itself (cycle: %s)", full, chain);
            free(chain);
        } else if (p->read[i].from.file) {
            add_error(p, from, "include", "\"%s\" was included before, at %s:%d (a file is read once: include it in one place)",
                      full, p->read[i].from.file, p->read[i].from.line);
        } else {
            add_error(p, from, "include", "\"%s\" is the suite itself (cycle)", full);
        }
        free(real);
        free(full);
        return -1;
    }
    size_t len = 0;
    char *text = real ? tb_read_file_max(full, TB_READ_MAX_SUITE, &len) : NULL;
    if (!text) {
        char why[160];
        tb_read_file_why(errno, TB_READ_MAX_SUITE, "a suite file", why, sizeof why);
        if (from.file)
            add_error(p, from, "include", "cannot read \"%s\": %s", full, why);
        else
            add_error(p, (tb_loc){full, 0}, NULL, "cannot read suite: %s", why);
        free(real);
        free(full);
        return -1;
    }
    if (strlen(text) != len || check_text(p, full, text, len) != 0) {
        if (strlen(text) != len)
            add_error(p, (tb_loc){full, 0}, NULL, "contains a NUL byte (expected a text file)");
        free(real);
        free(full);
        free(text);
        return -1;
    }

    s->files = tb_xrealloc(s->files, (s->n_files + 1) * sizeof(char *));
    s->files[s->n_files++] = full;
    p->read = tb_xrealloc(p->read, (p->n_read + 1) * sizeof *p->read);
    p->read[p->n_read] = (struct read_file){real, full, from, 1};
    p->stack = tb_xrealloc(p->stack, (p->n_stack + 1) * sizeof *p->stack);
    p->stack[p->n_stack++] = p->n_read++;

    tb_str_appendf(&p->text, "%s# ---- %s\n%s", p->text.len ? "\n" : "", full, text);

    file_reader rd = {.p = p, .file = full, .pos = text, .end = text + len};
    file_reader *outer = p->rd;
    char *outer_section = p->cur_section ? tb_xstrdup(p->cur_section) : NULL;
    section_kind outer_sec = p->sec;
    /* An index, not a pointer: backends added by this file move the array. */
    size_t outer_be = p->be ? (size_t)(p->be - s->backends) : SIZE_MAX;
    free(p->cur_section);
    p->cur_section = NULL;
    p->sec = SEC_NONE;
    p->rd = &rd;
    p->depth++;

    int rc = ini_parse_stream(reader_fn, &rd, handler, p);
    if (rd.too_long_line)
        add_error(p, (tb_loc){full, rd.too_long_line}, NULL, "line longer than %d characters", INI_MAX_LINE - 2);
    else if (rc > 0)
        add_error(p, (tb_loc){full, rc}, NULL, "expected \"key = value\", \"[section]\" or a comment");

    p->depth--;
    p->rd = outer;
    free(p->cur_section);
    p->cur_section = outer_section;
    p->sec = outer_sec;
    p->be = outer_be != SIZE_MAX ? &s->backends[outer_be] : NULL;
    p->read[p->stack[--p->n_stack]].open = 0;
    free(text);
    return 0;
}

/* A suite is UTF-8 text: its bytes are stored (the suite's text) and
 * shown in reports, JSON and HTML, which must be UTF-8, and on terminals,
 * where an ESC would be obeyed. The first invalid sequence, and the
 * first control byte but tab, CR and LF, are errors at their line. 0, or
 * -1 with the error recorded. */
static int check_text(parser *p, const char *file, const char *text, size_t len)
{
    size_t bad = 0;
    int valid = tb_utf8_valid(text, len, &bad);
    size_t ctl = 0;
    while (ctl < len && !(((unsigned char)text[ctl] < 0x20 && text[ctl] != '\t' && text[ctl] != '\r' &&
                           text[ctl] != '\n') || text[ctl] == 0x7f))
        ctl++;
    if (valid && ctl == len)
        return 0;
    size_t at = !valid && bad < ctl ? bad : ctl;
    int line = 1;
    for (size_t i = 0; i < at; i++)
        line += text[i] == '\n';
    if (at == ctl)
        add_error(p, (tb_loc){file, line}, NULL, "control character 0x%02x (a suite is text: no control "
                  "characters but tab)", (unsigned char)text[at]);
    else
        add_error(p, (tb_loc){file, line}, NULL, "invalid UTF-8 (byte 0x%02x; a suite is UTF-8 text: "
                  "re-save it as UTF-8)", (unsigned char)text[at]);
    return -1;
}

/* models_dir: every model that is a path on disk must resolve, symbolic
 * links followed, inside it — a link in the models folder must not lead a
 * suite to read files elsewhere. */
static void check_models_dir(parser *p)
{
    tb_suite *s = p->s;
    if (!s->models_dir)
        return;
    char *root = realpath(s->models_dir, NULL);
    if (!root) {
        add_error(p, s->models_dir_loc, "models_dir", "cannot resolve \"%s\": %s", s->models_dir, strerror(errno));
        return;
    }
    size_t rl = strlen(root);
    for (size_t i = 0; i < s->n_backends; i++) {
        tb_suite_backend *be = &s->backends[i];
        if (!be->model[0] || strchr(be->model, ':'))
            continue;
        char *real = realpath(be->model, NULL);
        if (!real) {
            if (strchr(be->model, '/'))
                add_error(p, be->model_loc, "model", "\"%s\" does not exist (expected a folder inside models_dir %s)",
                          be->model, root);
            continue; /* a preset name */
        }
        if (strncmp(real, root, rl) != 0 || (real[rl] != '/' && real[rl] != '\0'))
            add_error(p, be->model_loc, "model",
                      "\"%s\" resolves to \"%s\", outside models_dir \"%s\" (a symbolic link leads out of it?)",
                      be->model, real, root);
        free(real);
    }
    free(root);
}

/* request_rate = slo without a limit to search for: an error at its line. */
static void check_slo(parser *p, const tb_list *l)
{
    const tb_suite *s = p->s;
    for (size_t i = 0; l->num && i < l->n; i++)
        if (l->num[i] == TB_RATE_SLO && !s->slo_ttft_p99_ms && !s->slo_tpot_p99_ms && !s->slo_goodput_pct) {
            add_error(p, l->loc, "request_rate",
                      "slo searches for the highest rate meeting limits: set slo_ttft_p99_ms, slo_tpot_p99_ms or "
                      "slo_goodput_pct in [suite]");
            return;
        }
}

static void check_complete(parser *p)
{
    tb_suite *s = p->s;
    tb_loc top = {s->files ? s->files[0] : s->path, 0};
    check_slo(p, &s->dims[TB_DIM_REQUEST_RATE]);
    for (size_t i = 0; i < s->n_backends; i++)
        check_slo(p, &s->backends[i].dims[TB_DIM_REQUEST_RATE]);
    if (s->slo_goodput_pct && !s->goodput_ttft_ms && !s->goodput_tpot_ms)
        add_error(p, s->slo_loc, "slo_goodput_pct",
                  "the share of requests within goodput_ttft_ms / goodput_tpot_ms: set one of them");
    if (s->n_backends == 0)
        add_error(p, top, NULL, "no [backend LABEL] section (expected at least one)");
    for (size_t i = 0; i < s->n_backends; i++) {
        tb_suite_backend *be = &s->backends[i];
        if (!be->plugin)
            add_error(p, be->loc, "plugin", "[backend %s] has no plugin = NAME", be->label);
    }
    check_models_dir(p);
    tb_suite_prompts *ps = &s->prompts;
    if (ps->loc.line && !ps->file)
        add_error(p, ps->loc, "file", "[prompts] has no file = PATH (expected a JSONL prompt set)");
    if (ps->file && s->dims[TB_DIM_PROMPT_TOKENS].n)
        add_error(p, s->dims[TB_DIM_PROMPT_TOKENS].loc, "prompt_tokens",
                  "the prompts come from [prompts] file = %s (expected no prompt_tokens with a prompt set)",
                  ps->file);
    for (size_t i = 0; ps->file && i < s->n_backends; i++)
        if (s->backends[i].dims[TB_DIM_PROMPT_TOKENS].n)
            add_error(p, s->backends[i].dims[TB_DIM_PROMPT_TOKENS].loc, "prompt_tokens",
                      "the prompts come from [prompts] file = %s (expected no prompt_tokens with a prompt set)",
                      ps->file);
    if (ps->judge) {
        size_t i = 0;
        while (i < s->n_backends && strcmp(s->backends[i].label, ps->judge) != 0)
            i++;
        if (i == s->n_backends)
            add_error(p, ps->judge_loc, "judge", "no [backend %s] in this suite (expected the label of one)",
                      ps->judge);
    }
    if (!ps->scorer)
        ps->scorer = tb_xstrdup("exact");
    if (!p->have_suite_name) {
        /* Default the name to the file's base name without ".ini". */
        const char *base = strrchr(s->path, '/');
        base = base ? base + 1 : s->path;
        size_t n = strlen(base);
        if (n > 4 && strcmp(base + n - 4, ".ini") == 0)
            n -= 4;
        free(s->name);
        s->name = tb_xstrndup(base, n);
    }
}

int tb_suite_load(const char *path, tb_suite *s, char **err)
{
    if (tb_suite_parse(path, s, err) != 0) {
        tb_suite_free(s);
        return -1;
    }
    return 0;
}

int tb_suite_parse(const char *path, tb_suite *s, char **err)
{
    memset(s, 0, sizeof *s);
    s->path = tb_xstrdup(path);
    s->description = tb_xstrdup("");
    s->warmup = 1;
    s->repeat = 5;
    s->sweep_rates = 5;
    s->slo_iterations = 6;
    s->seed = 0;
    s->case_timeout_s = 600;
    s->load_timeout_s = 600;
    s->prompts.repetition_n = 4;
    s->prompts.distinct_n = 2;
    s->prompts.judge_context = 1;

    parser p = {.s = s};
    parse_file(&p, path, (tb_loc){NULL, 0});
    if (s->n_files) /* whatever was read, checked too: every error at once */
        check_complete(&p);
    if (p.n_errors > MAX_ERRORS)
        tb_str_appendf(&p.errors, "... and %d more errors\n", p.n_errors - MAX_ERRORS);

    for (size_t i = 0; i < p.n_seen; i++) {
        free(p.seen[i].section);
        free(p.seen[i].key);
    }
    free(p.seen);
    free(p.slots);
    free(p.stack);
    for (size_t i = 0; i < p.n_read; i++)
        free(p.read[i].real);
    free(p.read);
    s->text = p.text.len ? tb_str_take(&p.text) : NULL;
    tb_str_free(&p.text);
    free(p.cur_section);
    if (p.n_errors) {
        *err = tb_str_take(&p.errors);
        return -1;
    }
    tb_str_free(&p.errors);
    *err = NULL;
    return 0;
}

static void settings_free(tb_setting *st, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(st[i].key);
        list_free(&st[i].value);
    }
    free(st);
}

void tb_suite_free(tb_suite *s)
{
    free(s->path);
    free(s->name);
    free(s->description);
    for (int d = 0; d < TB_N_DIMS; d++)
        list_free(&s->dims[d]);
    settings_free(s->sweeps, s->n_sweeps);
    settings_free(s->telemetry, s->n_telemetry);
    for (size_t i = 0; i < s->n_backends; i++) {
        tb_suite_backend *be = &s->backends[i];
        free(be->label);
        free(be->plugin);
        free(be->model);
        for (int d = 0; d < TB_N_DIMS; d++)
            list_free(&be->dims[d]);
        settings_free(be->settings, be->n_settings);
    }
    free(s->backends);
    free(s->models_dir);
    free(s->prompts.file);
    free(s->prompts.scorer);
    free(s->prompts.judge);
    list_free(&s->prompts.judge_tags);
    for (size_t i = 0; i < s->n_files; i++)
        free(s->files[i]);
    free(s->files);
    free(s->text);
    memset(s, 0, sizeof *s);
}
