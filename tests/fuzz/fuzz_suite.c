/* fuzz_suite.c — libFuzzer target for the suite loader (core/suite.c):
 * INI through inih, `include = FILE`, ${VAR} and ${VAR:-default}.
 *
 * The input is cut at its first two NUL bytes into three files of one
 * private folder: main.ini, inc.ini and sub/inc.ini (a missing part: that
 * file does not exist, so an include of it fails). tb_suite_load reads
 * main.ini. The environment has TB_FUZZ_INC=inc.ini, TB_FUZZ_SUB=sub/inc.ini,
 * TB_FUZZ_LIST="8, 16", TB_FUZZ_EMPTY="" and no TB_FUZZ_UNSET, so
 * "include = ${TB_FUZZ_INC}" and the other forms are reachable.
 *
 * For every input:
 *   - failure: a message, every line "FILE...: ..." or the "... and N
 *     more errors" tail, and nothing left in the suite;
 *   - success: the suite's invariants (a backend, each with a plugin;
 *     list items parsed; every file read listed, the main one first);
 *   - success with one file: every key inih itself reports in
 *     [matrix] or [backend X] of that file is in the suite where that
 *     section says (core/suite.c tracks sections with its own line
 *     scanner, so this checks that scanner against inih). */
#include "fuzz_common.h"

#include <ini.h>

#include "suite.h"
#include "util.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char *main_path, *inc_path, *sub_path;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *dir = fuzz_tmpdir("suite");
    main_path = tb_xasprintf("%s/main.ini", dir);
    inc_path = tb_xasprintf("%s/inc.ini", dir);
    sub_path = tb_xasprintf("%s/sub/inc.ini", dir);
    char *sub = tb_xasprintf("%s/sub", dir);
    mkdir(sub, 0700);
    free(sub);
    setenv("TB_FUZZ_INC", "inc.ini", 1);
    setenv("TB_FUZZ_SUB", "sub/inc.ini", 1);
    setenv("TB_FUZZ_LIST", "8, 16", 1);
    setenv("TB_FUZZ_EMPTY", "", 1);
    unsetenv("TB_FUZZ_UNSET");
    return 0;
}

#define CHECK(cond)                                                                         \
    do {                                                                                    \
        if (!(cond)) {                                                                      \
            fprintf(stderr, "fuzz_suite: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                        \
        }                                                                                   \
    } while (0)

static void check_list(const tb_list *l, int dim)
{
    CHECK(l->n == 0 || (l->items && l->raw));
    for (size_t i = 0; i < l->n; i++)
        CHECK(l->items[i] != NULL);
    if (dim && l->n)
        CHECK(l->num != NULL);
}

/* Where a key inih reports must be found in the loaded suite. */
typedef struct expect_ctx {
    const tb_suite *s;
    int bad;
} expect_ctx;

static int has_setting(const tb_setting *st, size_t n, const char *key)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(st[i].key, key) == 0)
            return 1;
    return 0;
}

static int on_key(void *user, const char *section, const char *name, const char *value)
{
    expect_ctx *x = user;
    const tb_suite *s = x->s;
    (void)value;
    if (strcmp(name, "include") == 0)
        return 1;
    tb_dim d = tb_dim_from_name(name);
    if (strcmp(section, "matrix") == 0) {
        if (d != TB_N_DIMS ? s->dims[d].n == 0 : !has_setting(s->sweeps, s->n_sweeps, name)) {
            fprintf(stderr, "fuzz_suite: inih has [matrix] %s, the suite does not\n", name);
            x->bad = 1;
        }
    } else if (strncmp(section, "backend", 7) == 0 && strlen(section) < 40) {
        char *label = tb_xstrdup(section + 7);
        const char *l = tb_trim(label);
        const tb_suite_backend *be = NULL;
        for (size_t i = 0; i < s->n_backends && !be; i++)
            if (strcmp(s->backends[i].label, l) == 0)
                be = &s->backends[i];
        int found = be && (strcmp(name, "plugin") == 0  ? be->plugin != NULL
                           : strcmp(name, "model") == 0 ? be->model != NULL
                           : d != TB_N_DIMS             ? be->dims[d].n > 0 || be->dims[d].none
                                            : has_setting(be->settings, be->n_settings, name));
        if (!found) {
            fprintf(stderr, "fuzz_suite: inih has [%s] %s, the suite does not\n", section, name);
            x->bad = 1;
        }
        free(label);
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *part[3];
    size_t len[3];
    size_t n = fuzz_split(data, size, part, len, 3);
    const char *paths[3] = {main_path, inc_path, sub_path};
    for (size_t i = 0; i < 3; i++) {
        if (i < n)
            fuzz_write(paths[i], part[i], len[i]);
        else
            unlink(paths[i]);
    }

    tb_suite s;
    char *err = NULL;
    if (tb_suite_load(main_path, &s, &err) != 0) {
        CHECK(err && *err);
        CHECK(s.n_backends == 0 && s.backends == NULL && s.files == NULL && s.text == NULL);
        /* every line names a file (or is the count of the rest) */
        for (const char *line = err; *line;) {
            const char *nl = strchr(line, '\n');
            CHECK(nl != NULL); /* each message ends its line */
            CHECK(line[0] == '/' || strncmp(line, "... and ", 8) == 0);
            line = nl + 1;
        }
        free(err);
        return 0;
    }
    CHECK(err == NULL);
    CHECK(s.n_backends >= 1 && s.n_files >= 1 && s.text && s.name && *s.name);
    CHECK(strcmp(s.files[0], main_path) == 0 && strcmp(s.path, main_path) == 0);
    CHECK(s.warmup >= 0 && s.repeat >= 1 && s.case_timeout_s > 0 && s.load_timeout_s > 0);
    for (int d = 0; d < TB_N_DIMS; d++)
        check_list(&s.dims[d], 1);
    for (size_t i = 0; i < s.n_sweeps; i++)
        check_list(&s.sweeps[i].value, 0);
    for (size_t i = 0; i < s.n_backends; i++) {
        const tb_suite_backend *be = &s.backends[i];
        CHECK(be->label && *be->label && be->plugin && be->model);
        for (size_t j = 0; j < i; j++)
            CHECK(strcmp(s.backends[j].label, be->label) != 0);
        for (int d = 0; d < TB_N_DIMS; d++)
            check_list(&be->dims[d], !be->dims[d].none);
        for (size_t j = 0; j < be->n_settings; j++)
            check_list(&be->settings[j].value, 0);
    }
    if (s.n_files == 1) {
        char *text = tb_xstrndup((const char *)part[0], len[0]);
        expect_ctx x = {&s, 0};
        ini_parse_string(text, on_key, &x);
        free(text);
        CHECK(!x.bad);
    }
    tb_suite_free(&s);
    return 0;
}
