/* prompt_set.h — prompt sets: the JSONL files of prompts and expected
 * answers that a suite's [prompts] section names. The scorers that grade
 * outputs against the answers are scorers.h's.
 *
 * FORMAT
 *
 * One JSON object per line (JSONL, UTF-8). Keys:
 *   "prompt"  required; a non-empty string.
 *   "answer"  optional; a string, or a number, which is kept as its text
 *             exactly as written in the file (`"answer": 1.50` gives
 *             "1.50", not cJSON's re-formatted double).
 *   "tags"    optional; an array of strings, each [a-z0-9_]+, no tag twice.
 *   "scorer"  optional; a scorer name (exact, contains, regex, numeric) for
 *             this line, overriding the suite's. Needs an "answer", which
 *             is checked against it at load time (tb_scorer_check_expected).
 * Every other key is refused, and so is a key given twice. Lines are split
 * at '\n' (a '\r' before it is JSON whitespace); a line of ASCII whitespace
 * only is skipped but still counted; a UTF-8 BOM at the start of the file
 * is skipped. Strings must be valid UTF-8 (utf8.h; checked here: cJSON does
 * not), must not contain U+0000 (written \u0000; a raw NUL byte anywhere on a
 * line is refused too). Lines have no length limit. A file without any
 * object is an error. The sha256 is of the file's bytes as read. */
#ifndef TB_PROMPT_SET_H
#define TB_PROMPT_SET_H

#include <stddef.h>

#include "scorers.h"

/* A prompt set: one JSON object per line of a JSONL file. */
typedef struct tb_prompt {
    char *prompt;  /* required, non-empty string */
    char *answer;  /* optional: NULL when the line has none */
    char **tags;   /* optional array of strings ([a-z0-9_]+ each), n_tags;
                      NULL when none */
    int n_tags;
    int scorer;    /* optional per-line "scorer" override: a tb_scorer value, or -1 */
    int line;      /* 1-based line number in the file */
} tb_prompt;

typedef struct tb_prompt_set {
    tb_prompt *items;
    size_t n;
    char *path;        /* as given to tb_prompt_set_load */
    char sha256[65];   /* of the file's bytes, lowercase hex */
} tb_prompt_set;

/* Load `path`. 0 on success; -1 with *out zeroed and *err a malloc'd
 * message: one line per problem (at most 20, then a line "path: N more
 * errors"), lines separated by '\n' with no final newline. Each line is
 * "path:LINE: <what>" or, for the whole file, "path: <what>" (e.g.
 * "path: No such file or directory"). At most one problem is reported per
 * line of the file. */
int tb_prompt_set_load(const char *path, tb_prompt_set *out, char **err);
/* Frees everything and zeroes *ps (safe on a zeroed set and twice). */
void tb_prompt_set_free(tb_prompt_set *ps);

/* The scorer of item p: its own when it has one, else `dflt`. */
tb_scorer tb_prompt_scorer(const tb_prompt *p, tb_scorer dflt);

/* Checks every item's answer against its scorer (tb_prompt_scorer(p,
 * dflt)), and with need_answers that every item has one. 0, or -1 with
 * *err: one "path:LINE: ..." line per problem (as tb_prompt_set_load). */
int tb_prompt_set_check(const tb_prompt_set *ps, tb_scorer dflt, int need_answers, char **err);

#endif
