/* test_suite.c — core/suite.c: parsing only, no plugins. Fixtures are
 * written into a fresh temporary folder by each test, one line per string
 * literal with its line number alongside, so an expected "file:line" can be
 * read off the fixture. */
#define _GNU_SOURCE
#include "suite.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "util.h"

static char g_dir[512];

/* Write `n` bytes as g_dir/name; returns the malloc'd path. */
static char *putn(const char *name, const char *data, size_t n)
{
    char *path = tb_xasprintf("%s/%s", g_dir, name);
    /* Sub-folders named in `name` ("inc/common.ini"). */
    for (char *s = strchr(path + strlen(g_dir) + 1, '/'); s; s = strchr(s + 1, '/')) {
        *s = '\0';
        mkdir(path, 0700);
        *s = '/';
    }
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (f) {
        CHECK(fwrite(data, 1, n, f) == n);
        fclose(f);
    }
    return path;
}

static char *put(const char *name, const char *text)
{
    return putn(name, text, strlen(text));
}

/* Load g_dir/name holding `text`; CHECKs that it loads. */
static int load_ok(const char *name, const char *text, tb_suite *s)
{
    char *path = put(name, text);
    char *err = NULL;
    int rc = tb_suite_load(path, s, &err);
    CHECK(rc == 0);
    CHECK(err == NULL);
    if (rc != 0)
        fprintf(stderr, "unexpected error loading %s:\n%s", name, err ? err : "(null)\n");
    free(err);
    free(path);
    return rc;
}

/* Load g_dir/name holding `text`; CHECKs that it fails. Returns the error
 * text (malloc'd, "" if there was none). */
static char *load_err(const char *name, const char *text)
{
    char *path = put(name, text);
    tb_suite s;
    char *err = NULL;
    int rc = tb_suite_load(path, &s, &err);
    CHECK(rc == -1);
    if (rc == 0)
        tb_suite_free(&s);
    free(path);
    return err ? err : tb_xstrdup("");
}

/* The load fails and the message holds `where` and `what`. */
#define EXPECT_ERROR(name, text, where, what)                                 \
    do {                                                                      \
        char *e_ = load_err(name, text);                                      \
        CHECK_CONTAINS(e_, where);                                            \
        CHECK_CONTAINS(e_, what);                                             \
        free(e_);                                                             \
    } while (0)

static int ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), m = strlen(tail);
    return n >= m && strcmp(s + n - m, tail) == 0;
}

/* Lines of a backend section that loads. */
#define BACKEND_OK "[backend a]\nplugin = null\n"

/* ------------------------------------------------------------ valid */

static const char *const full_suite =
    "; every key of every section\n"             /* 1 */
    "[suite]\n"                                  /* 2 */
    "name = full-run\n"                          /* 3 */
    "description = every key, set\n"             /* 4 */
    "warmup = 2\n"                               /* 5 */
    "repeat = 7\n"                               /* 6 */
    "seed = 42\n"                                /* 7 */
    "case_timeout = 30.5\n"                      /* 8 */
    "load_timeout = 90\n"                        /* 9 */
    "\n"                                         /* 10 */
    "[matrix]\n"                                 /* 11 */
    "prompt_tokens = 0, 512\n"                   /* 12 */
    "max_new_tokens = 16,32\n"                   /* 13 */
    "batch = 1, 4 ; inline comment\n"            /* 14 */
    "concurrency = 2\n"                          /* 15 */
    "request_rate = 0.5, 2\n"                    /* 16 */
    "steps = 8, 16, 32\n"                        /* 17 */
    "block_length = 4\n"                         /* 18 */
    "step_us = 100, 200\n"                       /* 19 */
    "\n"                                         /* 20 */
    "[backend ar]\n"                             /* 21 */
    "plugin = null\n"                            /* 22 */
    "model = /models/m.gguf\n"                   /* 23 */
    "prefill_us = 10, 20\n"                      /* 24 */
    "spin = yes\n"                               /* 25 */
    "batch = 8\n"                                /* 26 */
    "steps = none\n"                             /* 27 */
    "\n"                                         /* 28 */
    "[backend diff.v2]\n"                        /* 29 */
    "plugin = /opt/x/diff.so\n";                 /* 30 */

static void test_full_suite_keys(void)
{
    tb_suite s;
    if (load_ok("full.ini", full_suite, &s) != 0)
        return;
    CHECK_STR(s.name, "full-run");
    CHECK_STR(s.description, "every key, set");
    CHECK(s.warmup == 2);
    CHECK(s.repeat == 7);
    CHECK(s.seed == 42);
    CHECK_NEAR(s.case_timeout_s, 30.5, 0);
    CHECK_NEAR(s.load_timeout_s, 90, 0);
    CHECK(s.n_files == 1);
    CHECK(ends_with(s.files[0], "/full.ini"));
    CHECK_CONTAINS(s.text, "description = every key, set\n");
    tb_suite_free(&s);
}

static void test_full_suite_matrix(void)
{
    tb_suite s;
    if (load_ok("full.ini", full_suite, &s) != 0)
        return;
    const tb_list *p = &s.dims[TB_DIM_PROMPT_TOKENS];
    CHECK(p->n == 2);
    CHECK_NEAR(p->num[0], 0, 0);
    CHECK_NEAR(p->num[1], 512, 0);
    CHECK_STR(p->items[1], "512");
    CHECK_STR(p->raw, "0, 512");
    CHECK(p->loc.line == 12);
    CHECK(ends_with(p->loc.file, "/full.ini"));
    CHECK(s.dims[TB_DIM_MAX_NEW_TOKENS].n == 2);
    CHECK_NEAR(s.dims[TB_DIM_MAX_NEW_TOKENS].num[1], 32, 0);
    /* The inline comment is not part of the value. */
    CHECK_STR(s.dims[TB_DIM_BATCH].raw, "1, 4");
    CHECK(s.dims[TB_DIM_BATCH].n == 2);
    CHECK(s.dims[TB_DIM_CONCURRENCY].n == 1);
    CHECK_NEAR(s.dims[TB_DIM_CONCURRENCY].num[0], 2, 0);
    CHECK(s.dims[TB_DIM_REQUEST_RATE].n == 2);
    CHECK_NEAR(s.dims[TB_DIM_REQUEST_RATE].num[0], 0.5, 0);
    CHECK(s.dims[TB_DIM_STEPS].n == 3);
    CHECK_NEAR(s.dims[TB_DIM_STEPS].num[2], 32, 0);
    CHECK(s.dims[TB_DIM_STEPS].loc.line == 17);
    CHECK(s.dims[TB_DIM_BLOCK_LENGTH].n == 1);
    CHECK_NEAR(s.dims[TB_DIM_BLOCK_LENGTH].num[0], 4, 0);
    /* A key that is not a dimension is an option sweep, split on commas. */
    CHECK(s.n_sweeps == 1);
    if (s.n_sweeps == 1) {
        CHECK_STR(s.sweeps[0].key, "step_us");
        CHECK(s.sweeps[0].value.n == 2);
        CHECK_STR(s.sweeps[0].value.items[0], "100");
        CHECK_STR(s.sweeps[0].value.items[1], "200");
        CHECK(s.sweeps[0].value.loc.line == 19);
    }
    tb_suite_free(&s);
}

static void test_full_suite_backends(void)
{
    tb_suite s;
    if (load_ok("full.ini", full_suite, &s) != 0)
        return;
    CHECK(s.n_backends == 2);
    if (s.n_backends != 2) {
        tb_suite_free(&s);
        return;
    }
    const tb_suite_backend *a = &s.backends[0], *b = &s.backends[1];
    CHECK_STR(a->label, "ar");
    CHECK_STR(a->plugin, "null");
    CHECK_STR(a->model, "/models/m.gguf");
    CHECK(a->loc.line == 21); /* the section header */
    CHECK(a->plugin_loc.line == 22);
    /* Plugin options stay unsplit until their type is known. */
    CHECK(a->n_settings == 2);
    if (a->n_settings == 2) {
        CHECK_STR(a->settings[0].key, "prefill_us");
        CHECK(a->settings[0].value.n == 1);
        CHECK_STR(a->settings[0].value.raw, "10, 20");
        CHECK(a->settings[0].value.loc.line == 24);
        CHECK_STR(a->settings[1].key, "spin");
        CHECK_STR(a->settings[1].value.raw, "yes");
    }
    /* Dimension override and "none". */
    CHECK(a->dims[TB_DIM_BATCH].n == 1);
    CHECK_NEAR(a->dims[TB_DIM_BATCH].num[0], 8, 0);
    CHECK(a->dims[TB_DIM_BATCH].loc.line == 26);
    CHECK(a->dims[TB_DIM_STEPS].none == 1);
    CHECK(a->dims[TB_DIM_STEPS].n == 0);
    CHECK(a->dims[TB_DIM_STEPS].loc.line == 27);
    CHECK(a->dims[TB_DIM_PROMPT_TOKENS].n == 0);
    CHECK(a->dims[TB_DIM_PROMPT_TOKENS].none == 0);

    CHECK_STR(b->label, "diff.v2");
    CHECK_STR(b->plugin, "/opt/x/diff.so");
    CHECK_STR(b->model, "");
    CHECK(b->loc.line == 29);
    CHECK(b->n_settings == 0);
    for (int d = 0; d < TB_N_DIMS; d++)
        CHECK(b->dims[d].n == 0 && !b->dims[d].none);
    tb_suite_free(&s);
}

static void test_defaults_when_keys_absent(void)
{
    tb_suite s;
    if (load_ok("my-suite.ini", BACKEND_OK, &s) != 0)
        return;
    CHECK_STR(s.name, "my-suite"); /* the file name without .ini */
    CHECK_STR(s.description, "");
    CHECK(s.warmup == 1);
    CHECK(s.repeat == 5);
    CHECK(s.seed == 0);
    CHECK_NEAR(s.case_timeout_s, 600, 0);
    CHECK_NEAR(s.load_timeout_s, 600, 0);
    for (int d = 0; d < TB_N_DIMS; d++)
        CHECK(s.dims[d].n == 0);
    CHECK(s.n_sweeps == 0);
    CHECK(s.n_backends == 1);
    CHECK_STR(s.backends[0].model, "");
    tb_suite_free(&s);
}

static void test_dim_names(void)
{
    CHECK_STR(tb_dim_name(TB_DIM_PROMPT_TOKENS), "prompt_tokens");
    CHECK_STR(tb_dim_name(TB_DIM_BLOCK_LENGTH), "block_length");
    CHECK(tb_dim_from_name("request_rate") == TB_DIM_REQUEST_RATE);
    CHECK(tb_dim_from_name("max_new_tokens") == TB_DIM_MAX_NEW_TOKENS);
    CHECK(tb_dim_from_name("Batch") == TB_N_DIMS);
    CHECK(tb_dim_from_name("sampler") == TB_N_DIMS);
}

static void test_dim_parse_value(void)
{
    double v = -1;
    char *err = NULL;
    CHECK(tb_dim_parse_value(TB_DIM_BATCH, "16", &v, &err) == 0);
    CHECK_NEAR(v, 16, 0);
    CHECK(tb_dim_parse_value(TB_DIM_REQUEST_RATE, "2.5", &v, &err) == 0);
    CHECK_NEAR(v, 2.5, 0);
    CHECK(tb_dim_parse_value(TB_DIM_PROMPT_TOKENS, "0", &v, &err) == 0);
    CHECK_NEAR(v, 0, 0);
    CHECK(tb_dim_parse_value(TB_DIM_STEPS, "0", &v, &err) == -1);
    CHECK_CONTAINS(err, "expected an integer in [1, 1000000000], got \"0\"");
    free(err);
    err = NULL;
    CHECK(tb_dim_parse_value(TB_DIM_BATCH, "4x", &v, &err) == -1);
    CHECK_CONTAINS(err, "\"4x\"");
    free(err);
    err = NULL;
    CHECK(tb_dim_parse_value(TB_DIM_REQUEST_RATE, "inf", &v, &err) == -1);
    CHECK_CONTAINS(err, "expected a rate in requests/s > 0");
    free(err);
}

/* A UTF-8 byte-order mark and CRLF line ends read as plain text; line
 * numbers stay right. */
static void test_bom_and_crlf(void)
{
    tb_suite s;
    if (load_ok("bom.ini",
                "\xEF\xBB\xBF[suite]\r\n"       /* 1 */
                "repeat = 3\r\n"                 /* 2 */
                "[backend a] ; comment\r\n"      /* 3 */
                "plugin = null\r\n",             /* 4 */
                &s) == 0) {
        CHECK(s.repeat == 3);
        CHECK(s.n_backends == 1);
        CHECK_STR(s.backends[0].plugin, "null");
        CHECK(s.backends[0].loc.line == 3);
        CHECK(s.backends[0].plugin_loc.line == 4);
        tb_suite_free(&s);
    }
    EXPECT_ERROR("crlf.ini", "[suite]\r\n\r\nwarmup = x\r\n" BACKEND_OK, "crlf.ini:3: warmup:", "got \"x\"");
}

/* ---------------------------------------------------------- include */

static void test_include_relative_path(void)
{
    char *inc = put("inc/common.ini",
                    "[suite]\n"                  /* 1 */
                    "repeat = 3\n"               /* 2 */
                    "include = more.ini\n"       /* 3: next to common.ini */
                    "[matrix]\n"                 /* 4 */
                    "batch = 2, 4\n");           /* 5 */
    char *more = put("inc/more.ini",
                     "[suite]\n"
                     "seed = 77\n");
    tb_suite s;
    if (load_ok("main.ini",
                "[suite]\n"                      /* 1 */
                "name = main\n"                  /* 2 */
                "include = inc/common.ini\n"     /* 3 */
                "warmup = 0\n"                   /* 4: still in [suite] */
                BACKEND_OK, &s) == 0) {
        CHECK_STR(s.name, "main");
        CHECK(s.repeat == 3);
        CHECK(s.seed == 77);
        CHECK(s.warmup == 0);
        CHECK(s.dims[TB_DIM_BATCH].n == 2);
        CHECK_NEAR(s.dims[TB_DIM_BATCH].num[1], 4, 0);
        CHECK(ends_with(s.dims[TB_DIM_BATCH].loc.file, "inc/common.ini"));
        CHECK(s.dims[TB_DIM_BATCH].loc.line == 5);
        CHECK(s.n_files == 3);
        if (s.n_files == 3) {
            CHECK(ends_with(s.files[0], "/main.ini"));
            CHECK(ends_with(s.files[1], "/inc/common.ini"));
            CHECK(ends_with(s.files[2], "/inc/more.ini"));
        }
        CHECK_CONTAINS(s.text, "seed = 77");
        CHECK_CONTAINS(s.text, "repeat = 3");
        tb_suite_free(&s);
    }
    free(inc);
    free(more);
}

/* An include before any section is not a key outside a section, and keys
 * after an include inside a backend section stay in that section, even when
 * the included file adds backends of its own. */
static void test_include_before_sections_and_inside_backend(void)
{
    free(put("top.ini", "[matrix]\nsteps = 8\n"));
    free(put("mid.ini",
             "[suite]\n"
             "repeat = 4\n"
             "[backend m1]\nplugin = null\n"
             "[backend m2]\nplugin = null\n"
             "[backend m3]\nplugin = null\n"));
    tb_suite s;
    if (load_ok("main2.ini",
                "include = top.ini\n"            /* 1 */
                "[backend a]\n"                  /* 2 */
                "include = mid.ini\n"            /* 3 */
                "plugin = null\n"                /* 4 */
                "step_us = 5\n",                 /* 5 */
                &s) != 0)
        return;
    CHECK(s.dims[TB_DIM_STEPS].n == 1);
    CHECK(s.repeat == 4);
    CHECK(s.n_backends == 4);
    if (s.n_backends == 4) {
        CHECK_STR(s.backends[0].label, "a");
        CHECK_STR(s.backends[0].plugin, "null");
        CHECK(s.backends[0].plugin_loc.line == 4);
        CHECK(ends_with(s.backends[0].plugin_loc.file, "/main2.ini"));
        CHECK(s.backends[0].n_settings == 1);
        CHECK_STR(s.backends[3].label, "m3");
        CHECK(s.backends[3].n_settings == 0);
    }
    tb_suite_free(&s);
}

static void test_include_cycle(void)
{
    free(put("a.ini",
             "[suite]\n"                          /* 1 */
             "include = b.ini\n"                  /* 2 */
             BACKEND_OK));
    free(put("b.ini",
             "[suite]\n"                          /* 1 */
             "repeat = 2\n"                       /* 2 */
             "include = a.ini\n"));               /* 3 */
    char *path = tb_xasprintf("%s/a.ini", g_dir);
    tb_suite s;
    char *err = NULL;
    CHECK(tb_suite_load(path, &s, &err) == -1);
    CHECK_CONTAINS(err, "b.ini:3: include:");
    /* the chain of includes is named (issue 38 item 1) */
    char *chain = tb_xasprintf("a.ini\" includes itself (cycle: %s/a.ini -> %s/b.ini -> %s/a.ini)", g_dir, g_dir, g_dir);
    CHECK_CONTAINS(err, chain);
    free(chain);
    free(err);
    free(path);
    EXPECT_ERROR("self.ini", "include = self.ini\n" BACKEND_OK, "self.ini:1: include:", "(cycle: ");
}

/* Issue 38 item 1: each file is read once. Seven files that each include
 * all the others: the old loader read every chain of them up to the depth
 * limit (tens of thousands of reads, each copying the text read so far);
 * now each file is read once and every include of a file read before is
 * one error: 7 x 6 include lines, 6 of them read a file, 36 errors. */
static void test_include_each_file_once(void)
{
    for (int i = 0; i < 7; i++) {
        tb_str b = {0};
        for (int j = 0; j < 7; j++)
            if (j != i)
                tb_str_appendf(&b, "include = m%d.ini\n", j);
        if (i == 0)
            tb_str_append(&b, BACKEND_OK);
        char name[16];
        snprintf(name, sizeof name, "m%d.ini", i);
        free(put(name, b.s));
        tb_str_free(&b);
    }
    char *path = tb_xasprintf("%s/m0.ini", g_dir);
    tb_suite s;
    char *err = NULL;
    CHECK(tb_suite_load(path, &s, &err) == -1);
    /* 20 errors shown, the rest counted: 36 in all */
    CHECK_CONTAINS(err, "... and 16 more errors\n");
    CHECK_CONTAINS(err, "m1.ini:1: include: ");
    CHECK_CONTAINS(err, "m0.ini\" includes itself (cycle: ");
    free(err);
    free(path);

    /* a diamond: b and c both include d */
    free(put("dia-d.ini", "[matrix]\nbatch = 1\n"));
    free(put("dia-b.ini", "include = dia-d.ini\n"));
    free(put("dia-c.ini", "include = dia-d.ini\n"));
    char *where = tb_xasprintf("dia-c.ini:1: include: \"%s/dia-d.ini\" was included before, at %s/dia-b.ini:1 (a file "
                               "is read once: include it in one place)", g_dir, g_dir);
    EXPECT_ERROR("dia-a.ini", "include = dia-b.ini\ninclude = dia-c.ini\n" BACKEND_OK, where, "");
    free(where);
}

/* Issue 38 item 1: a suite file is read only when it is a regular file,
 * and up to a limit: /dev/zero, a FIFO (opening it would block until a
 * writer came) and a file over 1 MiB are refused with the reason. */
static void test_include_odd_files(void)
{
    EXPECT_ERROR("zero.ini", "include = /dev/zero\n" BACKEND_OK,
                 "zero.ini:1: include: cannot read \"/dev/zero\": a device, not a regular file (expected a suite file)", "");
    char *fifo = tb_xasprintf("%s/fifo.ini", g_dir);
    CHECK(mkfifo(fifo, 0600) == 0);
    EXPECT_ERROR("with-fifo.ini", "include = fifo.ini\n" BACKEND_OK, "with-fifo.ini:1: include: cannot read \"",
                 "fifo.ini\": a FIFO or socket, not a regular file (expected a suite file)");
    /* the suite itself */
    tb_suite s;
    char *err = NULL;
    CHECK(tb_suite_load(fifo, &s, &err) == -1);
    CHECK_CONTAINS(err, "fifo.ini: cannot read suite: a FIFO or socket, not a regular file");
    free(err);
    free(fifo);
    size_t big = TB_READ_MAX_SUITE + 1;
    char *text = tb_xmalloc(big);
    memset(text, '\n', big);
    free(putn("big.ini", text, big));
    free(text);
    EXPECT_ERROR("with-big.ini", "include = big.ini\n" BACKEND_OK, "big.ini\": larger than the limit of 1 MiB for a suite file", "");
    /* exactly the limit is read */
    text = tb_xmalloc(TB_READ_MAX_SUITE);
    memset(text, '\n', TB_READ_MAX_SUITE);
    free(putn("limit.ini", text, TB_READ_MAX_SUITE));
    free(text);
    if (load_ok("with-limit.ini", "include = limit.ini\n" BACKEND_OK, &s) == 0)
        tb_suite_free(&s);
}

/* Issue 38 item 6: a suite's control bytes are escaped in its errors (an
 * ESC or BEL would reach the terminal; a newline from the environment
 * would start a line that looks like an error of another file). */
static void test_error_escapes_control_bytes(void)
{
    char *e = load_err("ctl.ini", "[suite]\nwarmup = 1\n[backend a]\nplugin = null\nlabel_x = \x1b[31mred\x07\n");
    CHECK_CONTAINS(e, "ctl.ini:5: control character 0x1b (a suite is text");
    CHECK(strchr(e, 0x1b) == NULL && strchr(e, 0x07) == NULL);
    free(e);
    setenv("TB_TEST_NL", "1\nfake.ini:1: warmup: injected", 1);
    e = load_err("ctl-env.ini", "[suite]\nwarmup = ${TB_TEST_NL}\n" BACKEND_OK);
    CHECK_CONTAINS(e, "ctl-env.ini:2: warmup: the value from the environment has control character 0x0a");
    CHECK(strchr(e, '\n') == e + strlen(e) - 1); /* one line */
    free(e);
    unsetenv("TB_TEST_NL");
}

/* A suite is UTF-8 text without control bytes (its bytes go into JSON and
 * HTML reports, and onto terminals): a Latin-1 byte, in a value or a
 * comment, and an ESC in the name are errors at their line; so are such
 * bytes from the environment; tab and CRLF are text. */
static void test_suite_is_text(void)
{
    EXPECT_ERROR("latin1.ini", "[suite]\nname = caf\xe9\n" BACKEND_OK, "latin1.ini:2: ",
                 "invalid UTF-8 (byte 0xe9; a suite is UTF-8 text");
    EXPECT_ERROR("comment.ini", "[suite]\n; r\xe9sum\xe9\nrepeat = 2\n" BACKEND_OK, "comment.ini:2: ", "invalid UTF-8");
    EXPECT_ERROR("esc.ini", "[suite]\nrepeat = 2\nname = x\x1b]0;pwned\x07\n" BACKEND_OK, "esc.ini:3: ",
                 "control character 0x1b");
    setenv("TB_TEST_LATIN1", "caf\xe9", 1);
    EXPECT_ERROR("env.ini", "[suite]\nname = ${TB_TEST_LATIN1}\n" BACKEND_OK, "env.ini:2: name: ",
                 "the value from the environment has invalid UTF-8, byte 0xe9");
    unsetenv("TB_TEST_LATIN1");
    tb_suite s;
    if (load_ok("text.ini", "[suite]\r\nname = caf\xc3\xa9\t1\r\n; \xe2\x9c\x93\r\n" BACKEND_OK, &s) != 0)
        return;
    CHECK_STR(s.name, "caf\xc3\xa9\t1");
    tb_suite_free(&s);
}

/* Issue 38 item 6: a default is expanded in turn: ${A:-${B}} is B's value
 * when A is unset (it was the literal text "${B}"). */
static void test_env_nested_default(void)
{
    setenv("TB_TEST_B", "7", 1);
    unsetenv("TB_TEST_A");
    unsetenv("TB_TEST_C");
    tb_suite s;
    if (load_ok("nest.ini",
                "[suite]\n"
                "repeat = ${TB_TEST_A:-${TB_TEST_B}}\n"
                "warmup = ${TB_TEST_A:-${TB_TEST_C:-3}}\n"
                "description = <${TB_TEST_A:-x${TB_TEST_B}y}>${TB_TEST_B}}\n" BACKEND_OK,
                &s) == 0) {
        CHECK(s.repeat == 7);
        CHECK(s.warmup == 3);
        CHECK_STR(s.description, "<x7y>7}");
        tb_suite_free(&s);
    }
    setenv("TB_TEST_A", "5", 1);
    if (load_ok("nest2.ini", "[suite]\nrepeat = ${TB_TEST_A:-${TB_TEST_NOPE}}\n" BACKEND_OK, &s) == 0) {
        CHECK(s.repeat == 5); /* the default is not needed: not expanded */
        tb_suite_free(&s);
    }
    unsetenv("TB_TEST_A");
    EXPECT_ERROR("nest3.ini", "[suite]\nrepeat = ${TB_TEST_A:-${TB_TEST_C}}\n" BACKEND_OK,
                 "nest3.ini:2: repeat: environment variable TB_TEST_C is not set", "");
    EXPECT_ERROR("nest4.ini", "[suite]\nrepeat = ${TB_TEST_A:-${TB_TEST_B}\n" BACKEND_OK,
                 "nest4.ini:2: repeat: unterminated \"${\"", "");
    unsetenv("TB_TEST_B");
}

static void test_include_missing_file(void)
{
    EXPECT_ERROR("inc-missing.ini",
                 "[suite]\n"                      /* 1 */
                 "repeat = 2\n"                   /* 2 */
                 "include = no/such.ini\n"        /* 3 */
                 BACKEND_OK,
                 "inc-missing.ini:3: include: cannot read \"", "no/such.ini\": No such file or directory");
}

/* Errors inside an included file name that file and its own line. */
static void test_include_error_names_included_file(void)
{
    free(put("inc-bad.ini", "[suite]\n\nwarmup = x\n"));
    EXPECT_ERROR("inc-main.ini", "include = inc-bad.ini\n" BACKEND_OK, "inc-bad.ini:3: warmup:",
                 "expected an integer in [0, 1000], got \"x\"");
}

/* -------------------------------------------------------------- env */

static void test_env_expansion(void)
{
    setenv("TB_TEST_REPEAT", "9", 1);
    setenv("TB_TEST_PLUGIN", "null", 1);
    setenv("TB_TEST_EMPTY", "", 1);
    unsetenv("TB_TEST_UNSET");
    tb_suite s;
    if (load_ok("env.ini",
                "[suite]\n"
                "repeat = ${TB_TEST_REPEAT}\n"
                "warmup = ${TB_TEST_UNSET:-3}\n"
                "name = a-${TB_TEST_REPEAT:-0}-${TB_TEST_UNSET:-}-b\n"
                "description = [${TB_TEST_EMPTY:-dflt}] $HOME $ {x}\n"
                "[matrix]\n"
                "batch = 1, ${TB_TEST_REPEAT}\n"
                "[backend a]\n"
                "plugin = ${TB_TEST_PLUGIN}\n",
                &s) == 0) {
        CHECK(s.repeat == 9);
        CHECK(s.warmup == 3);
        /* A set variable wins over the default, even when empty. */
        CHECK_STR(s.name, "a-9--b");
        CHECK_STR(s.description, "[] $HOME $ {x}");
        CHECK_STR(s.dims[TB_DIM_BATCH].raw, "1, 9");
        CHECK_NEAR(s.dims[TB_DIM_BATCH].num[1], 9, 0);
        CHECK_STR(s.backends[0].plugin, "null");
        tb_suite_free(&s);
    }
}

static void test_env_unset_variable(void)
{
    unsetenv("TB_TEST_NOPE");
    EXPECT_ERROR("env-unset.ini",
                 "[suite]\n"                      /* 1 */
                 "repeat = 2\n"                   /* 2 */
                 BACKEND_OK                       /* 3, 4 */
                 "model = /m/${TB_TEST_NOPE}\n",  /* 5 */
                 "env-unset.ini:5: model:", "environment variable TB_TEST_NOPE is not set");
}

static void test_env_malformed_reference(void)
{
    EXPECT_ERROR("env-open.ini", "[suite]\nname = ${TB_TEST_REPEAT\n" BACKEND_OK,
                 "env-open.ini:2: name:", "unterminated \"${\"");
    EXPECT_ERROR("env-name.ini", "[suite]\nname = ${A B}\n" BACKEND_OK,
                 "env-name.ini:2: name:", "bad environment reference \"${A B}\"");
    EXPECT_ERROR("env-empty.ini", "[suite]\nname = ${:-x}\n" BACKEND_OK,
                 "env-empty.ini:2: name:", "bad environment reference");
}

/* ------------------------------------------------------- bad input */

static void test_unknown_section(void)
{
    EXPECT_ERROR("sec.ini",
                 "[suite]\n"                      /* 1 */
                 "repeat = 2\n"                   /* 2 */
                 "[bogus]\n"                      /* 3 */
                 "x = 1\n"                        /* 4 */
                 BACKEND_OK,
                 "sec.ini:3: ", "unknown section [bogus]");
    /* A section without keys is still seen. */
    EXPECT_ERROR("sec-empty.ini", BACKEND_OK "[matrixx]\n", "sec-empty.ini:3: ", "unknown section [matrixx]");
}

static void test_bad_backend_label(void)
{
    EXPECT_ERROR("label.ini", "[backend a b]\nplugin = null\n", "label.ini:1: ",
                 "expected [backend LABEL] with a label of letters");
    EXPECT_ERROR("label0.ini", "[backend]\nplugin = null\n", "label0.ini:1: ", "[backend]: expected");
}

static void test_unknown_suite_key(void)
{
    EXPECT_ERROR("key.ini",
                 "[suite]\n"                      /* 1 */
                 "repeat = 2\n"                   /* 2 */
                 "repeats = 3\n"                  /* 3 */
                 BACKEND_OK,
                 "key.ini:3: repeats: ", "unknown key in [suite] (expected name, description");
}

static void test_key_outside_section(void)
{
    char *e = load_err("outside.ini",
                       "\n"                       /* 1 */
                       "warmup = 1\n"             /* 2 */
                       BACKEND_OK);
    CHECK_CONTAINS(e, "outside.ini:2: warmup: key outside any section");
    CHECK(strstr(e, "unknown section") == NULL);
    free(e);
}

static void test_bad_integers(void)
{
    EXPECT_ERROR("w.ini", "[suite]\nwarmup = -1\n" BACKEND_OK, "w.ini:2: warmup:",
                 "expected an integer in [0, 1000], got \"-1\"");
    EXPECT_ERROR("r0.ini", "[suite]\n\nrepeat = 0\n" BACKEND_OK, "r0.ini:3: repeat:",
                 "expected an integer in [1, 100000], got \"0\"");
    EXPECT_ERROR("rabc.ini", "[suite]\nrepeat = abc\n" BACKEND_OK, "rabc.ini:2: repeat:", "got \"abc\"");
    EXPECT_ERROR("r12.ini", "[suite]\nrepeat = 12x\n" BACKEND_OK, "r12.ini:2: repeat:", "got \"12x\"");
    EXPECT_ERROR("seed.ini", "[suite]\nseed = -5\n" BACKEND_OK, "seed.ini:2: seed:", "got \"-5\"");
    EXPECT_ERROR("seedbig.ini", "[suite]\nseed = 99999999999999999999\n" BACKEND_OK, "seedbig.ini:2: seed:",
                 "expected an integer in [0, ");
}

static void test_bad_durations(void)
{
    EXPECT_ERROR("ct0.ini", "[suite]\ncase_timeout = 0\n" BACKEND_OK, "ct0.ini:2: case_timeout:",
                 "expected a duration in seconds > 0, got \"0\"");
    EXPECT_ERROR("ctneg.ini", "[suite]\ncase_timeout = -3\n" BACKEND_OK, "ctneg.ini:2: case_timeout:",
                 "got \"-3\"");
    EXPECT_ERROR("lt.ini", "[suite]\nload_timeout = 5m\n" BACKEND_OK, "lt.ini:2: load_timeout:",
                 "expected a duration in seconds > 0, got \"5m\"");
    EXPECT_ERROR("ltnan.ini", "[suite]\nload_timeout = nan\n" BACKEND_OK, "ltnan.ini:2: load_timeout:",
                 "got \"nan\"");
    EXPECT_ERROR("old.ini", "[suite]\nname = x\nopen_loop_duration = 0\n" BACKEND_OK,
                 "old.ini:3: open_loop_duration:", "expected a duration in seconds > 0, got \"0\"");
    tb_suite s;
    if (load_ok("old2.ini", "[suite]\nopen_loop_duration = 42.5\n" BACKEND_OK, &s) == 0) {
        CHECK_NEAR(s.open_loop_duration_s, 42.5, 0);
        tb_suite_free(&s);
    }
}

static void test_bad_dimension_values(void)
{
    EXPECT_ERROR("b0.ini", "[matrix]\nbatch = 0\n" BACKEND_OK, "b0.ini:2: batch:",
                 "expected an integer in [1, 1000000000], got \"0\"");
    EXPECT_ERROR("bempty.ini", "[matrix]\nbatch = 1,,2\n" BACKEND_OK, "bempty.ini:2: batch:",
                 "empty list item in \"1,,2\"");
    EXPECT_ERROR("btrail.ini", "[matrix]\nbatch = 1, 2,\n" BACKEND_OK, "btrail.ini:2: batch:", "empty list item");
    EXPECT_ERROR("bx.ini", "[matrix]\nbatch = x\n" BACKEND_OK, "bx.ini:2: batch:", "got \"x\"");
    EXPECT_ERROR("bdup.ini", "[matrix]\nbatch = 1, 2, 1\n" BACKEND_OK, "bdup.ini:2: batch:",
                 "value 1 is listed twice");
    EXPECT_ERROR("rr.ini", "[matrix]\n\nrequest_rate = -1\n" BACKEND_OK, "rr.ini:3: request_rate:",
                 "expected a rate in requests/s > 0, sweep or slo, got \"-1\"");
    /* load searches (core/search.h): an slo search needs a limit, a
     * goodput share needs the goodput limits, and the keys their ranges */
    EXPECT_ERROR("slo0.ini", "[matrix]\nrequest_rate = 5, slo\n" BACKEND_OK, "slo0.ini:2: request_rate:",
                 "set slo_ttft_p99_ms, slo_tpot_p99_ms or slo_goodput_pct in [suite]");
    {
        tb_suite s;
        if (load_ok("slo1.ini",
                    "[suite]\nslo_ttft_p99_ms = 10\nslo_tpot_p99_ms = 2.5\nsweep_rates = 3\nslo_iterations = 4\n"
                    "[matrix]\nrequest_rate = 5, sweep, slo\n" BACKEND_OK,
                    &s) == 0) {
            const tb_list *l = &s.dims[TB_DIM_REQUEST_RATE];
            CHECK(l->n == 3 && l->num[0] == 5 && l->num[1] == TB_RATE_SWEEP && l->num[2] == TB_RATE_SLO);
            CHECK(s.slo_ttft_p99_ms == 10 && s.slo_tpot_p99_ms == 2.5 && s.slo_goodput_pct == 0);
            CHECK(s.sweep_rates == 3 && s.slo_iterations == 4);
            tb_suite_free(&s);
        }
        if (load_ok("slo7.ini", BACKEND_OK, &s) == 0) { /* the defaults */
            CHECK(s.sweep_rates == 5 && s.slo_iterations == 6);
            tb_suite_free(&s);
        }
    }
    EXPECT_ERROR("slo2.ini", "[suite]\nslo_goodput_pct = 90\n[matrix]\nrequest_rate = slo\n" BACKEND_OK,
                 "slo2.ini:2: slo_goodput_pct:", "set one of them");
    EXPECT_ERROR("slo3.ini", "[suite]\nslo_goodput_pct = 101\n" BACKEND_OK, "slo3.ini:2: slo_goodput_pct:",
                 "0 < x <= 100, got \"101\"");
    EXPECT_ERROR("slo4.ini", "[suite]\nslo_tpot_p99_ms = 0\n" BACKEND_OK, "slo4.ini:2: slo_tpot_p99_ms:",
                 "expected a limit in milliseconds > 0");
    EXPECT_ERROR("slo5.ini", "[suite]\nsweep_rates = 0\n" BACKEND_OK, "slo5.ini:2: sweep_rates:", "");
    EXPECT_ERROR("slo6.ini", "[suite]\nslo_iterations = 31\n" BACKEND_OK, "slo6.ini:2: slo_iterations:", "");
    EXPECT_ERROR("pt.ini", "[matrix]\nprompt_tokens = 1.5\n" BACKEND_OK, "pt.ini:2: prompt_tokens:",
                 "got \"1.5\"");
    EXPECT_ERROR("st.ini", "[matrix]\nsteps = none\n" BACKEND_OK, "st.ini:2: steps:", "got \"none\"");
}

/* A backend's own dimensions are checked the same way; only dimensions a
 * backend may lack take "none". */
static void test_bad_backend_dimension_values(void)
{
    EXPECT_ERROR("bb.ini", BACKEND_OK "batch = 2, 0\n", "bb.ini:3: batch:", "got \"0\"");
    EXPECT_ERROR("bnone.ini", BACKEND_OK "batch = none\n", "bnone.ini:3: batch:", "got \"none\"");
    EXPECT_ERROR("pnone.ini", BACKEND_OK "prompt_tokens = none\n", "pnone.ini:3: prompt_tokens:",
                 "got \"none\"");
}

static void test_duplicate_key(void)
{
    EXPECT_ERROR("dup.ini",
                 "[suite]\n"                      /* 1 */
                 "repeat = 3\n"                   /* 2 */
                 "warmup = 1\n"                   /* 3 */
                 "repeat = 4\n"                   /* 4 */
                 BACKEND_OK,
                 "dup.ini:4: repeat:", "set twice in [suite] (first at ");
    EXPECT_ERROR("dupb.ini",
                 BACKEND_OK                       /* 1, 2 */
                 "step_us = 1\n"                  /* 3 */
                 "step_us = 2\n",                 /* 4 */
                 "dupb.ini:4: step_us:", "dupb.ini:3)");
}

static void test_duplicate_backend_section(void)
{
    /* The second section sets other keys: it must not merge silently. */
    EXPECT_ERROR("dupsec.ini",
                 "[backend a]\n"                  /* 1 */
                 "plugin = null\n"                /* 2 */
                 "[matrix]\n"                     /* 3 */
                 "batch = 1\n"                    /* 4 */
                 "[backend a]\n"                  /* 5 */
                 "model = other\n",               /* 6 */
                 "dupsec.ini:5: ", "[backend a] is defined twice (first at ");
    /* Back to back, with the same keys. */
    char *e = load_err("dupsec2.ini",
                       "[backend a]\n"            /* 1 */
                       "plugin = null\n"          /* 2 */
                       "[backend a]\n"            /* 3 */
                       "plugin = null\n");        /* 4 */
    CHECK_CONTAINS(e, "dupsec2.ini:3: [backend a] is defined twice (first at ");
    CHECK_CONTAINS(e, "dupsec2.ini:1)");
    free(e);
}

static void test_backend_without_plugin(void)
{
    EXPECT_ERROR("noplug.ini",
                 "[suite]\n"                      /* 1 */
                 "repeat = 2\n"                   /* 2 */
                 "[backend a]\n"                  /* 3 */
                 "model = m\n",                   /* 4 */
                 "noplug.ini:3: plugin:", "[backend a] has no plugin = NAME");
    /* A backend section with no keys at all. */
    EXPECT_ERROR("noplug2.ini", BACKEND_OK "[backend b]\n", "noplug2.ini:3: plugin:", "[backend b] has no plugin");
    EXPECT_ERROR("noplug3.ini", BACKEND_OK "[backend c]\nplugin =\n", "noplug3.ini:4: plugin:",
                 "expected a plugin name or path");
}

static void test_suite_without_backends(void)
{
    EXPECT_ERROR("nobe.ini", "[suite]\nrepeat = 2\n", "nobe.ini: ", "no [backend LABEL] section");
    EXPECT_ERROR("empty.ini", "", "empty.ini: ", "no [backend LABEL] section");
}

/* inih drops what follows a header's ']': a key there is an error at its
 * line; a comment there is fine. */
static void test_text_after_header(void)
{
    EXPECT_ERROR("hdr.ini", "[suite]\nrepeat = 2\n[matrix] batch = 1, 4\n" BACKEND_OK, "hdr.ini:3: ",
                 "text after the section header [matrix]: \"batch = 1, 4\"");
    EXPECT_ERROR("hdr2.ini", "[suite]x\nrepeat = 2\n" BACKEND_OK, "hdr2.ini:1: ", "[suite]: \"x\"");
    tb_suite s;
    if (load_ok("hdr3.ini", "[suite] ; the run\nrepeat = 2\n[matrix]  # sizes\nbatch = 1, 4\n" BACKEND_OK, &s) != 0)
        return;
    CHECK(s.dims[TB_DIM_BATCH].n == 2);
    tb_suite_free(&s);
}

static void test_line_too_long(void)
{
    /* inih reads at most 199 bytes of a line, newline included. */
    tb_str t = {0};
    tb_str_append(&t, "[suite]\nrepeat = 2\ndescription = ");
    for (int i = 0; i < 250; i++)
        tb_str_append(&t, "x");
    tb_str_append(&t, "\n" BACKEND_OK);
    EXPECT_ERROR("long.ini", t.s, "long.ini:3: ", "line longer than 198 characters");
    tb_str_free(&t);

    /* 198 characters is the longest line taken, whole. */
    tb_str_append(&t, "[suite]\ndescription = ");
    while (t.len - strlen("[suite]\n") < 198)
        tb_str_append(&t, "y");
    tb_str_append(&t, "\n" BACKEND_OK);
    tb_suite s;
    if (load_ok("long198.ini", t.s, &s) == 0) {
        CHECK(strlen(s.description) == 198 - strlen("description = "));
        tb_suite_free(&s);
    }
    tb_str_free(&t);
}

static void test_line_without_equals(void)
{
    EXPECT_ERROR("noeq.ini",
                 "[suite]\n"                      /* 1 */
                 "repeat = 2\n"                   /* 2 */
                 "warmup 3\n"                     /* 3 */
                 BACKEND_OK,
                 "noeq.ini:3: ", "expected \"key = value\", \"[section]\" or a comment");
    EXPECT_ERROR("nobracket.ini", BACKEND_OK "[matrix\n", "nobracket.ini:3: ", "expected \"key = value\"");
}

/* An indented key after another key is an inih continuation line: say so
 * instead of reporting the previous key as set twice. */
static void test_indented_line_is_continuation(void)
{
    EXPECT_ERROR("indent.ini",
                 "[matrix]\n"                     /* 1 */
                 "  batch = 1, 2\n"               /* 2 */
                 "  steps = 4\n"                  /* 3 */
                 BACKEND_OK,
                 "indent.ini:3: batch:", "indented line continues the value of batch");
}

static void test_missing_file(void)
{
    char *path = tb_xasprintf("%s/does-not-exist.ini", g_dir);
    tb_suite s;
    char *err = NULL;
    CHECK(tb_suite_load(path, &s, &err) == -1);
    CHECK_CONTAINS(err, "does-not-exist.ini: cannot read suite: No such file or directory");
    free(err);
    free(path);
}

static void test_nul_byte(void)
{
    static const char data[] = "[suite]\nname = a\0b\n" BACKEND_OK;
    char *path = putn("nul.ini", data, sizeof data - 1);
    tb_suite s;
    char *err = NULL;
    CHECK(tb_suite_load(path, &s, &err) == -1);
    CHECK_CONTAINS(err, "nul.ini: contains a NUL byte (expected a text file)");
    free(err);
    free(path);
}

static void test_all_errors_reported(void)
{
    char *e = load_err("multi.ini",
                       "[suite]\n"                /* 1 */
                       "warmup = -1\n"            /* 2 */
                       "repeat = 5\n"             /* 3 */
                       "[matrix]\n"               /* 4 */
                       "batch = 0\n"              /* 5 */
                       "[nope]\n"                 /* 6 */
                       BACKEND_OK);
    CHECK_CONTAINS(e, "multi.ini:2: warmup:");
    CHECK_CONTAINS(e, "multi.ini:5: batch:");
    CHECK_CONTAINS(e, "multi.ini:6: unknown section [nope]");
    /* One line per problem. */
    int lines = 0;
    for (const char *c = e; *c; c++)
        lines += *c == '\n';
    CHECK(lines == 3);
    free(e);
}

/* tb_suite_parse: the checks of the whole suite run after errors too (a
 * parse error and a backend without a plugin, both at once), and the
 * suite keeps what parsed, a key in error left unset, for the plan's
 * own checks. */
static void test_parse_keeps_going(void)
{
    char *path = put("going.ini",
                     "[suite]\n"          /* 1 */
                     "repeat = many\n"    /* 2 */
                     "warmup = 2\n"       /* 3 */
                     "[matrix]\n"         /* 4 */
                     "batch = 1, x\n"     /* 5 */
                     "max_new_tokens = 7\n" /* 6 */
                     "[backend a]\n"      /* 7 */
                     "plugin = null\n"    /* 8 */
                     "[backend b]\n"      /* 9 */
                     "step_us = 5\n");    /* 10 */
    tb_suite s;
    char *err = NULL;
    CHECK(tb_suite_parse(path, &s, &err) == -1);
    CHECK_CONTAINS(err, "going.ini:2: repeat:");
    CHECK_CONTAINS(err, "going.ini:5: batch:");
    CHECK_CONTAINS(err, "going.ini:9: plugin: [backend b] has no plugin = NAME");
    CHECK(s.warmup == 2 && s.repeat == 5);                 /* the bad repeat: the default */
    CHECK(s.dims[TB_DIM_BATCH].n == 0);                    /* the bad list: unset */
    CHECK(s.dims[TB_DIM_MAX_NEW_TOKENS].n == 1 && s.dims[TB_DIM_MAX_NEW_TOKENS].num[0] == 7);
    CHECK(s.n_backends == 2 && s.backends[0].plugin && strcmp(s.backends[0].plugin, "null") == 0);
    CHECK(s.n_backends == 2 && s.backends[1].plugin == NULL && s.backends[1].n_settings == 1);
    tb_suite_free(&s);
    free(err);
    /* tb_suite_load: the same errors, nothing kept */
    err = NULL;
    CHECK(tb_suite_load(path, &s, &err) == -1);
    CHECK_CONTAINS(err, "going.ini:9: plugin:");
    CHECK(s.n_backends == 0 && s.path == NULL);
    free(err);
    free(path);
}

static void test_error_count_capped(void)
{
    tb_str t = {0};
    tb_str_append(&t, "[suite]\n");
    for (int i = 0; i < 25; i++)
        tb_str_appendf(&t, "bad%d = 1\n", i);
    tb_str_append(&t, BACKEND_OK);
    char *e = load_err("many.ini", t.s);
    CHECK_CONTAINS(e, "many.ini:2: bad0:");
    CHECK_CONTAINS(e, "many.ini:21: bad19:");
    CHECK(strstr(e, "bad20:") == NULL);
    CHECK_CONTAINS(e, "... and 5 more errors");
    free(e);
    tb_str_free(&t);
}

/* ------------------------------------------------------------ main */

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

int main(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/tb_test_suite_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }

    test_full_suite_keys();
    test_full_suite_matrix();
    test_full_suite_backends();
    test_defaults_when_keys_absent();
    test_dim_names();
    test_dim_parse_value();
    test_bom_and_crlf();

    test_include_relative_path();
    test_include_before_sections_and_inside_backend();
    test_include_cycle();
    test_include_each_file_once();
    test_include_odd_files();
    test_error_escapes_control_bytes();
    test_env_nested_default();
    test_include_missing_file();
    test_include_error_names_included_file();

    test_env_expansion();
    test_env_unset_variable();
    test_env_malformed_reference();

    test_unknown_section();
    test_bad_backend_label();
    test_unknown_suite_key();
    test_key_outside_section();
    test_bad_integers();
    test_bad_durations();
    test_bad_dimension_values();
    test_bad_backend_dimension_values();
    test_duplicate_key();
    test_duplicate_backend_section();
    test_backend_without_plugin();
    test_suite_without_backends();
    test_line_too_long();
    test_text_after_header();
    test_suite_is_text();
    test_line_without_equals();
    test_indented_line_is_continuation();
    test_missing_file();
    test_nul_byte();
    test_all_errors_reported();
    test_error_count_capped();
    test_parse_keeps_going();

    nftw(g_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return check_done();
}
