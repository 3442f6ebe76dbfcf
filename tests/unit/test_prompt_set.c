/* test_prompt_set.c — core/prompt_set.c: loading a good file, every error
 * the loader reports (each with its file:line), and checking the answers
 * against a default scorer. */
#define _GNU_SOURCE
#include "prompt_set.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

/* The message of the last load or check (malloc'd; the next call frees
 * it): set exactly when the call returns -1, the convention of core. */
static char *last_err;

static int load(const char *path, tb_prompt_set *ps)
{
    free(last_err);
    last_err = NULL;
    int rc = tb_prompt_set_load(path, ps, &last_err);
    CHECK((rc == -1) == (last_err != NULL));
    return rc;
}

static int check_set(const tb_prompt_set *ps, tb_scorer dflt, int need_answers)
{
    free(last_err);
    last_err = NULL;
    int rc = tb_prompt_set_check(ps, dflt, need_answers, &last_err);
    CHECK((rc == -1) == (last_err != NULL));
    return rc;
}

/* Loads a one-file set that must fail; returns the message (last_err). */
static const char *load_err(const char *name, const char *text)
{
    const char *path = write_file(name, text);
    tb_prompt_set ps;
    int rc = load(path, &ps);
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
    int rc = load(path, &ps);
    CHECK(rc == 0);
    if (rc != 0) {
        fprintf(stderr, "%s\n", last_err);
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
    CHECK(check_set(&ps, TB_SCORER_EXACT, 0) == 0);
    CHECK(check_set(&ps, TB_SCORER_REGEX, 0) == -1);
    CHECK_CONTAINS(last_err,
                   "good.jsonl:10: \"answer\" for scorer regex: bad regex: missing closing parenthesis at offset 3");
    CHECK(last_err && strchr(last_err, '\n') == NULL);
    CHECK(check_set(&ps, TB_SCORER_NUMERIC, 0) == -1);
    CHECK_CONTAINS(last_err, "good.jsonl:3: \"answer\" for scorer numeric: expected a number");
    CHECK(last_err && strstr(last_err, "good.jsonl:1:") == NULL);
    CHECK(last_err && strstr(last_err, "good.jsonl:6:") == NULL); /* "1.50" is a number */
    CHECK(check_set(&ps, TB_SCORER_EXACT, 1) == -1);
    CHECK_CONTAINS(last_err, "good.jsonl:5: no \"answer\" (scorer exact needs one)");
    CHECK_CONTAINS(last_err, "good.jsonl:8: no \"answer\"");

    tb_prompt_set_free(&ps);
    CHECK(ps.n == 0 && ps.items == NULL && ps.path == NULL);
    tb_prompt_set_free(&ps); /* twice is fine */
    tb_str_free(&t);

    /* A BOM before the first line is skipped; the hash covers it. */
    const char bom[] = "\xef\xbb\xbf{\"prompt\":\"a\"}";
    path = write_file("bom.jsonl", bom);
    CHECK(load(path, &ps) == 0);
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
    CHECK(load(path, &ps) == -1);
    snprintf(want, sizeof want, "%s: No such file or directory", path);
    CHECK_STR(last_err, want);
    CHECK(load(tmpdir, &ps) == -1);
    snprintf(want, sizeof want, "%s: a folder, not a regular file (expected a prompt set)", tmpdir);
    CHECK_STR(last_err, want);
    /* issue 38 item 1: neither read until memory runs out nor opened to
     * block on */
    CHECK(load("/dev/zero", &ps) == -1);
    CHECK_STR(last_err, "/dev/zero: a device, not a regular file (expected a prompt set)");
    snprintf(path, sizeof path, "%s/fifo.jsonl", tmpdir);
    CHECK(mkfifo(path, 0600) == 0);
    CHECK(load(path, &ps) == -1);
    CHECK_CONTAINS(last_err, "/fifo.jsonl: a FIFO or socket, not a regular file (expected a prompt set)");
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
        CHECK(load(pp, &ps) == -1);
        CHECK_CONTAINS(last_err, "nul5.jsonl:1: NUL byte at column 14");
    }

    /* Several problems: one line each, in file order, at most 20. */
    tb_str t = {0};
    tb_str_append(&t, "{\"prompt\": \"ok\"}\n{\"prompt\": 1}\n{\"prompt\": \"ok\"}\n{\"x\": 1}\n");
    const char *mp = write_file_n("multi.jsonl", t.s, t.len);
    CHECK(load(mp, &ps) == -1);
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
    CHECK(load(mp, &ps) == -1);
    int lines = 1;
    for (const char *c = last_err; *c; c++)
        lines += *c == '\n';
    CHECK(lines == 21);
    CHECK_CONTAINS(last_err, "many.jsonl:20: ");
    CHECK(strstr(last_err, "many.jsonl:21: ") == NULL);
    CHECK_CONTAINS(last_err, "many.jsonl: 5 more errors");
    CHECK(last_err[strlen(last_err) - 1] != '\n');

    /* The whole message, however long: every one of the 20 lines names
     * its file and line, in order, and the count comes last. */
    const char *l = last_err;
    for (int i = 1; i <= 20 && l; i++) {
        char want[64];
        snprintf(want, sizeof want, "many.jsonl:%d: \"prompt\" must be a non-empty string", i);
        const char *at = strstr(l, "many.jsonl:");
        CHECK(at && strncmp(at, want, strlen(want)) == 0);
        l = strchr(l, '\n');
        l = l ? l + 1 : NULL;
    }
    CHECK(l && strstr(l, "many.jsonl: 5 more errors") && !strchr(l, '\n'));

    /* With a long file name the 21 lines pass the 4096 bytes that a
     * caller's buffer used to hold: nothing is cut now. */
    char name[220];
    memset(name, 'x', 200);
    strcpy(name + 200, ".jsonl");
    for (int i = 0; i < 25; i++)
        tb_str_append(&t, "{\"prompt\": 1}\n");
    mp = write_file_n(name, t.s, t.len);
    tb_str_free(&t);
    CHECK(load(mp, &ps) == -1);
    CHECK(last_err && strlen(last_err) > 4096);
    lines = 1;
    for (const char *c = last_err; c && *c; c++)
        lines += *c == '\n';
    CHECK(lines == 21);
    snprintf(want, sizeof want, "%s: 5 more errors", name);
    CHECK_CONTAINS(last_err, want);
}

/* The checks above must be able to fail: a wrong expected value is caught
 * by the same macros (counted here, then taken back out of the tally). */
static void test_checks_can_fail(void)
{
    int before = check_failures_;
    fprintf(stderr, "(one deliberate failure follows)\n");
    CHECK_LOAD_ERR("fail.jsonl", "{\"prompt\": 1}", 2, "must be a non-empty string"); /* line 1 */
    int caught = check_failures_ - before;
    check_failures_ = before;
    CHECK(caught == 1);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/tb_prompt_set_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 2;
    }
    test_load_good();
    test_load_errors();
    test_checks_can_fail();
    free(last_err);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
    return check_done();
}
