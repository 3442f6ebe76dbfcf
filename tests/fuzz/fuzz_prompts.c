/* fuzz_prompts.c — libFuzzer target for prompt sets (JSONL,
 * core/prompt_set.c) and the scorers (core/scorers.c).
 *
 * The input up to its first NUL byte is written to prompts.jsonl and
 * loaded with tb_prompt_set_load; the bytes after that NUL (if any) are a
 * model output, scored against every loaded answer. For every input:
 *   - failure: *out zeroed, and an error of at most 21 lines, each naming
 *     the file, with no final newline; *err set exactly on failure, here
 *     and in every call below;
 *   - success: at least one prompt; prompt, answer and tags as prompt_set.h
 *     promises (non-empty prompt, valid UTF-8, tags [a-z0-9_]+ and not
 *     twice, a per-line scorer only with an answer it accepts, lines
 *     increasing), the sha256 of the file's bytes;
 *   - tb_prompt_set_check under each default scorer returns 0 or -1 with
 *     a message;
 *   - an answer graded against itself is correct under exact, contains
 *     and numeric whenever that scorer accepts it as an expected value;
 *   - the output graded against each answer by every scorer gives 1, 0 or
 *     -1 (the last only for an expected value the scorer refuses, or a
 *     regex match PCRE2 gives up on);
 *   - distinct-n and repetition-n of the output are NAN or in [0, 1] and
 *     add up to 1. */
#include "fuzz_common.h"

#include <math.h>

#include "prompt_set.h"
#include "scorers.h"
#include "utf8.h"
#include "util.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char *jsonl_path;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    jsonl_path = tb_xasprintf("%s/prompts.jsonl", fuzz_tmpdir("prompts"));
    return 0;
}

#define CHECK(cond)                                                                         \
    do {                                                                                    \
        if (!(cond)) {                                                                      \
            fprintf(stderr, "fuzz_prompts: %s:%d: check failed: %s\n", __FILE__, __LINE__, \
                    #cond);                                                                 \
            abort();                                                                        \
        }                                                                                   \
    } while (0)

static int valid_tag(const char *t)
{
    if (!*t)
        return 0;
    for (; *t; t++)
        if (!((*t >= 'a' && *t <= 'z') || (*t >= '0' && *t <= '9') || *t == '_'))
            return 0;
    return 1;
}

/* The scorers under the convention: a message exactly when -1. */
static int check_expected(tb_scorer s, const char *expected)
{
    char *err = NULL;
    int rc = tb_scorer_check_expected(s, expected, &err);
    CHECK(rc == 0 ? err == NULL : rc == -1 && err && err[0]);
    free(err);
    return rc;
}

static int score_answer(tb_scorer s, const char *output, const char *expected)
{
    char *err = NULL;
    int rc = tb_score_answer(s, output, expected, &err);
    CHECK(rc == -1 ? err && err[0] : err == NULL);
    free(err);
    return rc;
}

static void check_output(const char *out)
{
    double v;
    if (tb_score_first_number(out, &v))
        CHECK(!isnan(v));
    for (int n = 0; n <= 3; n++) {
        double d = tb_score_distinct(out, n), r = tb_score_repetition(out, n);
        CHECK(isnan(d) == isnan(r));
        if (n < 1)
            CHECK(isnan(d));
        if (!isnan(d))
            CHECK(d > 0 && d <= 1 && r >= 0 && r < 1 && fabs(d + r - 1) < 1e-12);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *part[2];
    size_t len[2];
    size_t np = fuzz_split(data, size, part, len, 2);
    fuzz_write(jsonl_path, part[0], len[0]);
    char *out = np > 1 ? tb_xstrndup((const char *)part[1], len[1]) : NULL;
    if (out)
        check_output(out);

    tb_prompt_set ps;
    char *err = NULL;
    if (tb_prompt_set_load(jsonl_path, &ps, &err) != 0) {
        CHECK(ps.items == NULL && ps.n == 0 && ps.path == NULL);
        CHECK(err && err[0] != '\0' && err[strlen(err) - 1] != '\n');
        size_t lines = 0;
        for (const char *l = err; l; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
            CHECK(strncmp(l, jsonl_path, strlen(jsonl_path)) == 0);
            lines++;
        }
        CHECK(lines <= 21);
        free(err);
        free(out);
        return 0;
    }
    CHECK(err == NULL);
    CHECK(ps.n >= 1 && ps.items && ps.path && strcmp(ps.path, jsonl_path) == 0);
    char sha[65];
    tb_sha256_hex(part[0], len[0], sha);
    CHECK(strcmp(sha, ps.sha256) == 0);
    int last_line = 0;
    for (size_t i = 0; i < ps.n; i++) {
        const tb_prompt *p = &ps.items[i];
        CHECK(p->prompt && p->prompt[0] && tb_utf8_valid(p->prompt, strlen(p->prompt), NULL));
        CHECK(!p->answer || tb_utf8_valid(p->answer, strlen(p->answer), NULL));
        CHECK(p->line > last_line);
        last_line = p->line;
        CHECK(p->n_tags >= 0 && (p->n_tags == 0) == (p->tags == NULL));
        for (int t = 0; t < p->n_tags; t++) {
            CHECK(valid_tag(p->tags[t]));
            for (int u = 0; u < t; u++)
                CHECK(strcmp(p->tags[t], p->tags[u]) != 0);
        }
        CHECK(p->scorer >= -1 && p->scorer < TB_N_SCORERS);
        if (p->scorer >= 0)
            CHECK(p->answer && check_expected((tb_scorer)p->scorer, p->answer) == 0);
    }
    for (int s = 0; s < TB_N_SCORERS; s++)
        for (int need = 0; need < 2; need++) {
            int rc = tb_prompt_set_check(&ps, (tb_scorer)s, need, &err);
            CHECK((rc == 0 && !err) || (rc == -1 && err && err[0]));
            free(err);
            err = NULL;
        }
    for (size_t i = 0; i < ps.n && i < 16; i++) {
        const char *a = ps.items[i].answer;
        if (!a)
            continue;
        static const tb_scorer self[] = {TB_SCORER_EXACT, TB_SCORER_CONTAINS, TB_SCORER_NUMERIC};
        for (size_t k = 0; k < sizeof self / sizeof *self; k++)
            if (check_expected(self[k], a) == 0 && score_answer(self[k], a, a) != 1) {
                fprintf(stderr, "fuzz_prompts: scorer %s: answer \"%s\" does not match itself\n",
                        tb_scorer_name(self[k]), a);
                abort();
            }
        if (out)
            for (int s = 0; s < TB_N_SCORERS; s++) {
                int ok = check_expected((tb_scorer)s, a) == 0;
                int r = score_answer((tb_scorer)s, out, a);
                CHECK(r == 1 || r == 0 || (r == -1 && (!ok || s == TB_SCORER_REGEX)));
            }
    }
    tb_prompt_set_free(&ps);
    CHECK(ps.items == NULL && ps.n == 0);
    free(out);
    return 0;
}
