/* test_plugin.c — core/plugin.c: loading the null plugin, refusing each
 * deliberately broken plugin of tests/plugins with the right reason,
 * discovery through TOKBENCH_PLUGIN_PATH, scanning, option parsing and
 * the capability string.
 *
 * Environment (set by tests/meson.build): TB_NULL_PLUGIN = null.so,
 * TB_TEST_PLUGIN_DIR = the folder of the broken plugins. */
#define _GNU_SOURCE
#include "plugin.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "dims.h"
#include "tb_config.h"
#include "util.h"

static const char *null_path;
static const char *broken_dir;
static char tmp_root[PATH_MAX];

static void die(const char *what)
{
    fprintf(stderr, "test_plugin: %s: %s\n", what, strerror(errno));
    exit(2);
}

static char *make_dir(const char *fmt, const char *arg)
{
    char *p = tb_xasprintf(fmt, tmp_root, arg);
    if (mkdir(p, 0755) != 0 && errno != EEXIST)
        die(p);
    return p;
}

static void link_to(const char *target, const char *linkpath)
{
    if (symlink(target, linkpath) != 0)
        die(linkpath);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        die(path);
    fputs(text, f);
    fclose(f);
}

/* ----------------------------------------------------------- null.so */

static void test_null_plugin(void)
{
    tb_plugin p;
    char *err = NULL;
    int rc = tb_plugin_open(null_path, 60, NULL, 0, &p, &err);
    CHECK(rc == 0);
    if (rc != 0) {
        fprintf(stderr, "  %s\n", err);
        free(err);
        return;
    }
    CHECK(err == NULL);
    CHECK_STR(p.path, null_path);
    const tb_backend_ops *o = p.ops;
    CHECK(o->abi_major == TB_ABI_MAJOR);
    CHECK(o->struct_size == sizeof(tb_backend_ops));
    CHECK_STR(o->name, "null");
    CHECK_STR(o->version, "1.0.0");
    CHECK(o->description && *o->description);
    CHECK(o->capabilities == (TB_CAP_BATCH | TB_CAP_STEPS | TB_CAP_STREAMING | TB_CAP_TOKENIZER));
    /* Its data only: the methods are called in a process that loaded it
     * (tb_plugin_load), never here. */
    CHECK(!o->create && !o->destroy && !o->generate && !o->last_error && !o->tokenize && !o->probe);
    CHECK(p.methods == TB_PLUGIN_HAS_DESCRIBE); /* no probe, validate or loglik */
    CHECK(o->n_options >= 10 && o->options != NULL); /* the null plugin's options grow */
    char *caps = tb_caps_string(o->capabilities);
    CHECK_STR(caps, "batch,steps,streaming,tokenizer");
    free(caps);

    const tb_option_decl *d = tb_plugin_option(&p, "step_us");
    CHECK(d != NULL);
    if (d) {
        CHECK_STR(d->name, "step_us");
        CHECK(d->type == TB_OPT_INT);
        CHECK_STR(d->default_value, "200");
        char *t = tb_option_describe_type(d);
        CHECK_STR(t, "int in [0, 3600000000]");
        free(t);
    }
    /* Every declared option is found as itself, the last one included. */
    int lost = 0;
    for (uint32_t i = 0; i < o->n_options; i++)
        lost += tb_plugin_option(&p, o->options[i].name) != &o->options[i];
    CHECK(lost == 0);
    CHECK(tb_plugin_option(&p, "jitter") != NULL);
    CHECK(tb_plugin_option(&p, "step") == NULL);     /* no prefix match */
    CHECK(tb_plugin_option(&p, "step_us_") == NULL);
    CHECK(tb_plugin_option(&p, "") == NULL);

    /* Every default parses as its own type (the loader checked that). */
    int bad = 0;
    for (uint32_t i = 0; i < o->n_options; i++) {
        tb_option_value v;
        char *why = NULL;
        if (tb_option_parse(&o->options[i], o->options[i].default_value, &v, &why) != 0) {
            fprintf(stderr, "  default of %s: %s\n", o->options[i].name, why);
            free(why);
            bad++;
        } else {
            free((char *)v.text);
        }
    }
    CHECK(bad == 0);

    /* A second open of the same file works, and closing one leaves the
     * other usable (each holds its own copy). */
    tb_plugin q;
    CHECK(tb_plugin_open(null_path, 60, NULL, 0, &q, &err) == 0);
    if (q.ops) {
        CHECK(q.ops != p.ops);
        tb_plugin_close(&q);
        CHECK(q.path == NULL && q.ops == NULL);
    }
    CHECK_STR(p.ops->name, "null");

    /* The same table, loaded in this process (what a worker does). */
    const tb_backend_ops *real = NULL;
    CHECK(tb_plugin_load(null_path, "null", &real, &err) == 0);
    if (real) {
        CHECK(real->create && real->destroy && real->generate && real->last_error);
        CHECK(real->tokenize && real->detokenize); /* it claims TB_CAP_TOKENIZER */
        CHECK(tb_plugin_same(&p, real, &err) == 0);
        CHECK(real->n_options == o->n_options);
    }
    tb_plugin_close(&p);
    CHECK(p.path == NULL && p.ops == NULL);
    tb_plugin_close(&p); /* closing a closed plugin is harmless */
}

/* ------------------------------------------------- broken plugins */

/* Open DIR/NAME.so; it must fail with every piece of `want` in the
 * message, the path included; the out struct must stay empty. */
static void expect_refused(const char *name, const char *const *want)
{
    char *path = tb_xasprintf("%s/%s.so", broken_dir, name);
    tb_plugin p;
    memset(&p, 0x5a, sizeof p);
    char *err = NULL;
    int rc = tb_plugin_open(path, 60, NULL, 0, &p, &err);
    CHECK(rc == -1);
    CHECK(p.path == NULL && p.ops == NULL);
    CHECK(err != NULL);
    if (rc == 0)
        tb_plugin_close(&p);
    if (err) {
        CHECK_CONTAINS(err, path);
        CHECK(strncmp(err, "plugin ", 7) == 0);
        for (size_t i = 0; want[i]; i++)
            CHECK_CONTAINS(err, want[i]);
    }
    free(err);
    free(path);
}

static void test_broken_plugins(void)
{
    char abi_has[64], abi_speaks[64];
    snprintf(abi_has, sizeof abi_has, "built for plugin ABI %d", TB_ABI_MAJOR + 1);
    snprintf(abi_speaks, sizeof abi_speaks, "speaks ABI %d", TB_ABI_MAJOR);
    expect_refused("bad_abi", (const char *const[]){abi_has, abi_speaks, NULL});

    expect_refused("no_entry", (const char *const[]){"no entry symbol", "tokbench_backend_entry()", NULL});

    /* Past the ABI check the message names the plugin by its own name. */
    expect_refused("no_generate",
                   (const char *const[]){"plugin no_generate (", "generate()", "missing", NULL});

    char sizes[128];
    snprintf(sizes, sizeof sizes, "ops table is %zu bytes, smaller than the %zu bytes",
             offsetof(tb_backend_ops, detokenize), (size_t)TB_OPS_MIN_SIZE);
    expect_refused("small_struct", (const char *const[]){sizes, NULL});

    expect_refused("bad_option", (const char *const[]){"plugin bad_option (", "\"mode\"", "no choices", NULL});
    expect_refused("dup_option", (const char *const[]){"option \"delay_us\" is declared twice", NULL});

    /* An option named like a key of the suite's [backend] section (its
     * own, every dimension of suite/dims.c): the suite's value would go
     * to the key, never to the option. */
    const char *own[] = {"plugin", "model", "include"};
    for (int d = 0; d < TB_N_DIMS + 3; d++) {
        const char *key = d < 3 ? own[d] : tb_dim_defs[d - 3].name;
        CHECK(tb_plugin_reserved_key(key));
        char *env = tb_xasprintf("option:%s", key), *want = tb_xasprintf("option \"%s\" collides with a suite key", key);
        setenv("TB_BAD_TABLE", env, 1);
        expect_refused("bad_table", (const char *const[]){"plugin bad_table (", want, NULL});
        free(env);
        free(want);
    }
    CHECK(!tb_plugin_reserved_key("batch_size"));
    setenv("TB_BAD_TABLE", "no_description", 1);
    expect_refused("bad_table", (const char *const[]){"no description", NULL});
    setenv("TB_BAD_TABLE", "loglik", 1);
    expect_refused("bad_table", (const char *const[]){"TB_CAP_LOGLIK", "lacks loglik()", NULL});
    setenv("TB_BAD_TABLE", "version_latin1", 1);
    expect_refused("bad_table", (const char *const[]){"version is not valid UTF-8 (byte 3, 0xff)", NULL});
    setenv("TB_BAD_TABLE", "desc_latin1", 1);
    expect_refused("bad_table", (const char *const[]){"description is not valid UTF-8 (byte 3, 0xe9)", NULL});
    setenv("TB_BAD_TABLE", "help_latin1", 1);
    expect_refused("bad_table", (const char *const[]){"option \"mode\": help is not valid UTF-8 (byte 3, 0xe9)", NULL});
    unsetenv("TB_BAD_TABLE");
    { /* unset: the same file loads */
        char *path = tb_xasprintf("%s/bad_table.so", broken_dir);
        tb_plugin p;
        char *err = NULL;
        CHECK(tb_plugin_open(path, 60, NULL, 0, &p, &err) == 0);
        if (!err)
            tb_plugin_close(&p);
        free(err);
        free(path);
    }

    /* A file that is not a shared object: dlopen's own reason. */
    char *junk = tb_xasprintf("%s/junk.so", tmp_root);
    write_file(junk, "this is not an ELF file\n");
    tb_plugin p;
    char *err = NULL;
    CHECK(tb_plugin_open(junk, 60, NULL, 0, &p, &err) == -1);
    CHECK_CONTAINS(err, "cannot load");
    CHECK_CONTAINS(err, junk);
    CHECK(p.path == NULL);
    free(err);
    free(junk);
}

/* --------------------------------------------------------- discovery */

static void test_not_found(void)
{
    char *a = make_dir("%s/%s", "empty_a");
    char *b = make_dir("%s/%s", "empty_b");
    char *env = tb_xasprintf("%s:%s", a, b);
    setenv("TOKBENCH_PLUGIN_PATH", env, 1);

    tb_plugin p;
    char *err = NULL;
    CHECK(tb_plugin_open("nope", 60, NULL, 0, &p, &err) == -1);
    CHECK_CONTAINS(err, "plugin nope: not found");
    char *w[] = {
        tb_xasprintf("%s/nope.so, %s/nope/nope.so, %s/nope.so, %s/nope/nope.so", a, a, b, b),
        tb_xasprintf("%s/nope.so", TB_PLUGIN_INSTALL_DIR),
    };
    CHECK_CONTAINS(err, w[0]); /* every place, in search order */
    CHECK_CONTAINS(err, w[1]);
    CHECK_CONTAINS(err, "TOKBENCH_PLUGIN_PATH"); /* says how to fix it */
    free(w[0]);
    free(w[1]);
    free(err);

    char *tried = NULL;
    CHECK(tb_plugin_find("nope", &tried) == NULL);
    CHECK(tried && strncmp(tried, a, strlen(a)) == 0); /* the env folders come first */
    free(tried);
    CHECK(tb_plugin_find("nope", NULL) == NULL); /* tried is optional */

    /* A path is taken as is: no search. */
    err = NULL;
    CHECK(tb_plugin_open("/nonexistent/dir/x.so", 60, NULL, 0, &p, &err) == -1);
    CHECK_CONTAINS(err, "not found");
    CHECK_CONTAINS(err, "looked at /nonexistent/dir/x.so;");
    free(err);
    tried = NULL;
    CHECK(tb_plugin_find("sub/null", &tried) == NULL); /* a '/' makes it a path */
    CHECK_STR(tried, "sub/null");
    free(tried);

    free(env);
    free(a);
    free(b);
    unsetenv("TOKBENCH_PLUGIN_PATH");
}

static void test_search_path(void)
{
    char *empty = make_dir("%s/%s", "empty_a");
    char *flat = make_dir("%s/%s", "flat");        /* flat/null.so */
    char *nest = make_dir("%s/%s", "nest");        /* nest/null/null.so */
    char *nest_n = make_dir("%s/%s", "nest/null");
    char *both = make_dir("%s/%s", "both");        /* both layouts */
    char *both_n = make_dir("%s/%s", "both/null");
    char *flat_so = tb_xasprintf("%s/null.so", flat);
    char *nest_so = tb_xasprintf("%s/null.so", nest_n);
    char *both_so = tb_xasprintf("%s/null.so", both);
    char *both_nso = tb_xasprintf("%s/null.so", both_n);
    link_to(null_path, flat_so);
    link_to(null_path, nest_so);
    link_to(null_path, both_so);
    link_to(null_path, both_nso);

    char *env = tb_xasprintf("%s:%s:%s", empty, flat, nest);
    setenv("TOKBENCH_PLUGIN_PATH", env, 1);
    char *tried = NULL;
    char *got = tb_plugin_find("null", &tried);
    CHECK_STR(got, flat_so); /* the first folder that has it */
    char *want_tried = tb_xasprintf("%s/null.so, %s/null/null.so, %s/null.so", empty, empty, flat);
    CHECK_STR(tried, want_tried); /* stops looking once found */
    free(want_tried);
    free(tried);
    free(got);
    free(env);

    env = tb_xasprintf("%s:%s", nest, flat);
    setenv("TOKBENCH_PLUGIN_PATH", env, 1);
    got = tb_plugin_find("null", NULL);
    CHECK_STR(got, nest_so); /* DIR/NAME/NAME.so counts too */
    free(got);
    free(env);

    setenv("TOKBENCH_PLUGIN_PATH", both, 1);
    got = tb_plugin_find("null", NULL);
    CHECK_STR(got, both_so); /* DIR/NAME.so before DIR/NAME/NAME.so */
    free(got);

    /* Empty components are skipped, not read as "/null.so". */
    env = tb_xasprintf("::%s:", flat);
    setenv("TOKBENCH_PLUGIN_PATH", env, 1);
    tried = NULL;
    got = tb_plugin_find("null", &tried);
    CHECK_STR(got, flat_so);
    CHECK(tried && tried[0] == '/' && strncmp(tried, "/null", 5) != 0);
    free(tried);
    free(got);
    free(env);

    /* Opening by name loads the file found, and records that path. */
    env = tb_xasprintf("%s:%s", empty, flat);
    setenv("TOKBENCH_PLUGIN_PATH", env, 1);
    tb_plugin p;
    char *err = NULL;
    CHECK(tb_plugin_open("null", 60, NULL, 0, &p, &err) == 0);
    if (p.ops) {
        CHECK_STR(p.path, flat_so);
        CHECK_STR(p.ops->name, "null");
        tb_plugin_close(&p);
    } else {
        fprintf(stderr, "  %s\n", err);
        free(err);
    }
    free(env);
    unsetenv("TOKBENCH_PLUGIN_PATH");

    /* "null.so" without a '/' is a path relative to the working folder
     * (dlopen alone would search its library path instead). */
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd) || chdir(flat) != 0)
        die("chdir");
    err = NULL;
    CHECK(tb_plugin_open("null.so", 60, NULL, 0, &p, &err) == 0);
    if (p.ops) {
        CHECK_STR(p.path, "null.so");
        tb_plugin_close(&p);
    } else {
        fprintf(stderr, "  %s\n", err);
        free(err);
    }
    if (chdir(cwd) != 0)
        die("chdir back");

    free(flat_so);
    free(nest_so);
    free(both_so);
    free(both_nso);
    free(empty);
    free(flat);
    free(nest);
    free(nest_n);
    free(both);
    free(both_n);
}

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

static void test_scan(void)
{
    char *first = make_dir("%s/%s", "scan1");
    char *later = make_dir("%s/%s", "scan2");
    char *s1 = tb_xasprintf("%s/null.so", first);
    char *s2 = tb_xasprintf("%s/null.so", later);
    char *hidden = tb_xasprintf("%s/.hidden.so", first);
    char *txt = tb_xasprintf("%s/readme.txt", first);
    char *sodir = make_dir("%s/%s", "scan1/folder.so"); /* not a file */
    link_to(null_path, s1);
    link_to(null_path, s2);
    link_to(null_path, hidden);
    write_file(txt, "not a plugin\n");

    char *env = tb_xasprintf("%s:%s:%s", first, broken_dir, later);
    setenv("TOKBENCH_PLUGIN_PATH", env, 1);
    char **paths = NULL;
    size_t n = tb_plugin_scan(&paths);
    /* The env folders in order, each sorted; a later null.so is a
     * duplicate of the first; the build/install folders may add more. */
    const char *want_broken[] = {"bad_abi.so",  "bad_option.so",  "bad_table.so",  "dup_option.so",  "misbehave.so",
                                 "no_entry.so", "no_generate.so", "secret_opt.so", "small_struct.so"};
    CHECK(n >= 10);
    if (n >= 10) {
        CHECK_STR(paths[0], s1);
        for (size_t i = 0; i < 9; i++) {
            char *w = tb_xasprintf("%s/%s", broken_dir, want_broken[i]);
            CHECK_STR(paths[1 + i], w);
            free(w);
        }
    }
    int dup = 0, stray = 0;
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < i; j++)
            dup += strcmp(base_name(paths[i]), base_name(paths[j])) == 0;
        stray += strcmp(paths[i], s2) == 0 || strcmp(paths[i], hidden) == 0 || strcmp(paths[i], txt) == 0 ||
                 strstr(paths[i], "folder.so") != NULL;
    }
    CHECK(dup == 0);
    CHECK(stray == 0);
    for (size_t i = 0; i < n; i++)
        free(paths[i]);
    free(paths);
    unsetenv("TOKBENCH_PLUGIN_PATH");

    /* The scan finds null, and what it finds opens. */
    setenv("TOKBENCH_PLUGIN_PATH", later, 1);
    n = tb_plugin_scan(&paths);
    int found = 0;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(base_name(paths[i]), "null.so") == 0) {
            found++;
            CHECK_STR(paths[i], s2);
        }
        free(paths[i]);
    }
    free(paths);
    CHECK(found == 1);
    unsetenv("TOKBENCH_PLUGIN_PATH");

    free(env);
    free(s1);
    free(s2);
    free(hidden);
    free(txt);
    free(sodir);
    free(first);
    free(later);
}

/* ----------------------------------------------------------- options */

/* Parse must succeed with this normalized text, i and f. */
static void ok_parse(const tb_option_decl *d, const char *text, const char *norm, int64_t i, double f)
{
    tb_option_value v;
    memset(&v, 0x5a, sizeof v);
    char *err = NULL;
    int rc = tb_option_parse(d, text, &v, &err);
    CHECK(rc == 0);
    if (rc != 0) {
        fprintf(stderr, "  %s: \"%s\" refused: %s\n", d->name, text, err);
        free(err);
        return;
    }
    CHECK(v.name == d->name);
    CHECK_STR(v.text, norm);
    CHECK(v.i == i);
    CHECK(v.f == f);
    free((char *)v.text);
}

/* Parse must fail with `why` in the message, which quotes the text. */
static void bad_parse(const tb_option_decl *d, const char *text, const char *why)
{
    tb_option_value v;
    char *err = NULL;
    int rc = tb_option_parse(d, text, &v, &err);
    CHECK(rc == -1);
    if (rc == 0) {
        fprintf(stderr, "  %s: \"%s\" accepted as \"%s\"\n", d->name, text, v.text);
        free((char *)v.text);
        return;
    }
    CHECK_CONTAINS(err, why);
    char *quoted = tb_xasprintf("got \"%s\"", text);
    CHECK_CONTAINS(err, quoted);
    free(quoted);
    free(err);
}

static void test_option_bool(void)
{
    const tb_option_decl d = {"flag", TB_OPT_BOOL, "false", "h", NULL, 1, 0, 0};
    const char *yes[] = {"true", "TRUE", "True", "yes", "Yes", "on", "ON", "1"};
    const char *no[] = {"false", "FALSE", "no", "No", "off", "Off", "0"};
    for (size_t i = 0; i < TB_ARRAY_LEN(yes); i++)
        ok_parse(&d, yes[i], "true", 1, 1);
    for (size_t i = 0; i < TB_ARRAY_LEN(no); i++)
        ok_parse(&d, no[i], "false", 0, 0);
    const char *bad[] = {"", "2", "t", "y", "yess", "true ", "-1", "nope"};
    for (size_t i = 0; i < TB_ARRAY_LEN(bad); i++)
        bad_parse(&d, bad[i], "expected a bool (true/false, yes/no, on/off, 1/0)");
}

static void test_option_int(void)
{
    const tb_option_decl d = {"n", TB_OPT_INT, "1", "h", NULL, 1, 64, 0};
    ok_parse(&d, "1", "1", 1, 1);     /* both bounds are inclusive */
    ok_parse(&d, "64", "64", 64, 64);
    ok_parse(&d, "32", "32", 32, 32);
    ok_parse(&d, "+8", "8", 8, 8);    /* normalized */
    ok_parse(&d, "007", "7", 7, 7);   /* decimal, not octal */
    const char *bad[] = {"0", "65", "-1", "", "abc", "12abc", "1.5", "1e1", "0x10", "64 "};
    for (size_t i = 0; i < TB_ARRAY_LEN(bad); i++)
        bad_parse(&d, bad[i], "expected an int in [1, 64]");

    const tb_option_decl u = {"big", TB_OPT_INT, "0", "h", NULL, 1, 0, 0}; /* unbounded */
    ok_parse(&u, "-9223372036854775808", "-9223372036854775808", INT64_MIN, -0x1p63);
    ok_parse(&u, "9223372036854775807", "9223372036854775807", INT64_MAX, 0x1p63);
    ok_parse(&u, "-5", "-5", -5, -5);
    bad_parse(&u, "9223372036854775808", "expected an int,"); /* overflow */
    bad_parse(&u, "-99999999999999999999", "expected an int,");
    bad_parse(&u, "x", "expected an int,");

    const tb_option_decl neg = {"skew", TB_OPT_INT, "0", "h", NULL, -10, 10, 0};
    ok_parse(&neg, "-10", "-10", -10, -10);
    bad_parse(&neg, "-11", "expected an int in [-10, 10]");
}

static void test_option_float(void)
{
    const tb_option_decl d = {"x", TB_OPT_FLOAT, "0", "h", NULL, 0, 1, 0};
    ok_parse(&d, "0", "0", 0, 0);
    ok_parse(&d, "1", "1", 1, 1);
    ok_parse(&d, "0.5", "0.5", 0, 0.5);
    ok_parse(&d, "0.25e0", "0.25", 0, 0.25);
    /* The shortest text that reads back as the same double, not
     * %.17g's "0.10000000000000001": this text ends up in case labels
     * and the database. */
    ok_parse(&d, "0.1", "0.1", 0, 0.1);
    ok_parse(&d, "0.3", "0.3", 0, 0.3);
    const char *bad[] = {"1.0000001", "-0.1", "", "abc", "0.5x", "nan", "NaN", "-nan",
                         "inf", "-inf", "INF", "infinity", "1e400", "0.5 "};
    for (size_t i = 0; i < TB_ARRAY_LEN(bad); i++)
        bad_parse(&d, bad[i], "expected a float in [0, 1]");

    const tb_option_decl u = {"y", TB_OPT_FLOAT, "0", "h", NULL, 1, 0, 0};
    ok_parse(&u, "-1e300", "-1e+300", INT64_MIN, -1e300); /* i saturates: out of int64 range */
    ok_parse(&u, "2.5", "2.5", 2, 2.5);
    ok_parse(&u, "-2.5", "-2.5", -2, -2.5); /* i truncates toward zero */
    ok_parse(&u, "1e-3", "0.001", 0, 0.001);
    ok_parse(&u, "123456789.125", "123456789.125", 123456789, 123456789.125);
    ok_parse(&u, "0.1", "0.1", 0, 0.1);
    ok_parse(&u, "1e22", "1e+22", INT64_MAX, 1e22);
    /* NaN and infinities are refused even without bounds. */
    bad_parse(&u, "nan", "expected a float,");
    bad_parse(&u, "inf", "expected a float,");
    bad_parse(&u, "-infinity", "expected a float,");
    bad_parse(&u, "1e309", "expected a float,");

    const tb_option_decl frac = {"z", TB_OPT_FLOAT, "1", "h", NULL, 0.1, 2.5, 0};
    ok_parse(&frac, "0.1", "0.1", 0, 0.1);
    bad_parse(&frac, "0.09", "expected a float in [0.1, 2.5]");
}

static void test_option_enum_string(void)
{
    const tb_option_decl e = {"mode", TB_OPT_ENUM, "a", "h", "a|bb|ccc", 1, 0, 0};
    ok_parse(&e, "a", "a", 0, 0);
    ok_parse(&e, "bb", "bb", 0, 0);
    ok_parse(&e, "ccc", "ccc", 0, 0);
    const char *bad[] = {"b", "cc", "cccc", "", "A", "a|bb", "|", " a"};
    for (size_t i = 0; i < TB_ARRAY_LEN(bad); i++)
        bad_parse(&e, bad[i], "expected one of a|bb|ccc");

    const tb_option_decl one = {"only", TB_OPT_ENUM, "x", "h", "x", 1, 0, 0};
    ok_parse(&one, "x", "x", 0, 0);
    bad_parse(&one, "", "expected one of x");

    const tb_option_decl s = {"s", TB_OPT_STRING, "", "h", NULL, 1, 0, 0};
    ok_parse(&s, "any text, with = and ,", "any text, with = and ,", 0, 0);
    ok_parse(&s, "", "", 0, 0);
    ok_parse(&s, "nan", "nan", 0, 0);
}

static void test_describe_type(void)
{
    const struct {
        tb_option_decl d;
        const char *want;
    } t[] = {
        {{"a", TB_OPT_BOOL, "0", "", NULL, 1, 0, 0}, "bool (true/false)"},
        {{"b", TB_OPT_INT, "1", "", NULL, 1, 64, 0}, "int in [1, 64]"},
        {{"c", TB_OPT_INT, "1", "", NULL, 1, 0, 0}, "int"},
        {{"d", TB_OPT_INT, "1", "", NULL, 5, 5, 0}, "int in [5, 5]"}, /* min == max is bounded */
        {{"e", TB_OPT_FLOAT, "0", "", NULL, 0, 1, 0}, "float in [0, 1]"},
        {{"f", TB_OPT_FLOAT, "0", "", NULL, 0.1, 2.5, 0}, "float in [0.1, 2.5]"},
        {{"g", TB_OPT_FLOAT, "0", "", NULL, 1, -1, 0}, "float"},
        {{"h", TB_OPT_FLOAT, "0", "", NULL, -1e6, 1e6, 0}, "float in [-1000000, 1000000]"},
        /* a bound past 1e17 in digits too: "1e+18" is not an int the parser reads */
        {{"k", TB_OPT_INT, "0", "", NULL, 0, 1e18, 0}, "int in [0, 1000000000000000000]"},
        {{"i", TB_OPT_STRING, "", "", NULL, 1, 0, 0}, "string"},
        {{"j", TB_OPT_ENUM, "x", "", "x|y|z", 1, 0, 0}, "one of x|y|z"},
    };
    for (size_t i = 0; i < TB_ARRAY_LEN(t); i++) {
        char *s = tb_option_describe_type(&t[i].d);
        CHECK_STR(s, t[i].want);
        free(s);
    }
}

static void test_caps_string(void)
{
    const struct {
        uint32_t caps;
        const char *want;
    } t[] = {
        {0, "none"},
        {TB_CAP_BATCH, "batch"},
        {TB_CAP_STREAMING | TB_CAP_BATCH, "batch,streaming"}, /* bit order, not argument order */
        {TB_CAP_REQUEST_RATE, "request_rate"},
        {TB_CAP_LOGLIK | TB_CAP_TOKENIZER, "tokenizer,loglik"},
        {TB_CAP_BATCH | TB_CAP_CONCURRENCY | TB_CAP_STEPS | TB_CAP_BLOCKS | TB_CAP_STREAMING | TB_CAP_TOKENIZER |
             TB_CAP_DEVICE_MEMORY | TB_CAP_ENERGY | TB_CAP_REQUEST_RATE,
         "batch,concurrency,steps,blocks,streaming,tokenizer,device_memory,energy,request_rate"},
        {TB_CAP_STEPS | (1u << 31), "steps"}, /* bits this tokbench does not know are not named */
    };
    for (size_t i = 0; i < TB_ARRAY_LEN(t); i++) {
        char *s = tb_caps_string(t[i].caps);
        CHECK_STR(s, t[i].want);
        free(s);
    }
}

static int rm_tree(const char *path)
{
    char *cmd = tb_xasprintf("rm -rf '%s'", path);
    int rc = system(cmd);
    free(cmd);
    return rc;
}

int main(void)
{
    null_path = getenv("TB_NULL_PLUGIN");
    broken_dir = getenv("TB_TEST_PLUGIN_DIR");
    if (!null_path || !broken_dir) {
        fprintf(stderr, "test_plugin: TB_NULL_PLUGIN and TB_TEST_PLUGIN_DIR must be set (run through meson test)\n");
        return 1;
    }
    unsetenv("TOKBENCH_PLUGIN_PATH");
    const char *tmp = getenv("TMPDIR");
    snprintf(tmp_root, sizeof tmp_root, "%s/tb_plugin_test.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(tmp_root))
        die("mkdtemp");

    test_null_plugin();
    test_broken_plugins();
    test_not_found();
    test_search_path();
    test_scan();
    test_option_bool();
    test_option_int();
    test_option_float();
    test_option_enum_string();
    test_describe_type();
    test_caps_string();

    rm_tree(tmp_root);
    return check_done();
}
