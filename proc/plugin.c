/* plugin.c — see plugin.h. */
#define _GNU_SOURCE
#include "plugin.h"

#include <ctype.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tb_config.h"
#include "utf8.h"
#include "util.h"

static int is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static int is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The folder holding the running executable (malloc'd), or NULL. */
static char *exe_dir(void)
{
    char buf[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0)
        return NULL;
    buf[n] = '\0';
    char *slash = strrchr(buf, '/');
    if (!slash)
        return NULL;
    *slash = '\0';
    return tb_xstrdup(buf);
}

/* The build tree's plugin folder when running from it, else NULL. */
static char *build_plugin_dir(void)
{
    char *dir = exe_dir();
    if (!dir)
        return NULL;
    char *pd = tb_xasprintf("%s/plugins", dir);
    free(dir);
    if (!is_dir(pd)) {
        free(pd);
        return NULL;
    }
    return pd;
}

static int try_path(tb_str *tried, const char *path)
{
    if (tried->len)
        tb_str_append(tried, ", ");
    tb_str_append(tried, path);
    return is_file(path);
}

char *tb_plugin_find(const char *name, char **tried_out)
{
    size_t n = strlen(name);
    if (strchr(name, '/') || (n > 3 && strcmp(name + n - 3, ".so") == 0)) {
        if (tried_out)
            *tried_out = tb_xstrdup(name);
        return is_file(name) ? tb_xstrdup(name) : NULL;
    }
    tb_str tried = {0};
    char *found = NULL;

    const char *env = getenv("TOKBENCH_PLUGIN_PATH");
    if (env && *env) {
        char *copy = tb_xstrdup(env), *save = NULL;
        for (char *dir = strtok_r(copy, ":", &save); dir && !found; dir = strtok_r(NULL, ":", &save)) {
            char *a = tb_xasprintf("%s/%s.so", dir, name);
            char *b = tb_xasprintf("%s/%s/%s.so", dir, name, name);
            if (try_path(&tried, a))
                found = tb_xstrdup(a);
            else if (try_path(&tried, b))
                found = tb_xstrdup(b);
            free(a);
            free(b);
        }
        free(copy);
    }
    if (!found) {
        char *bd = build_plugin_dir();
        if (bd) {
            char *a = tb_xasprintf("%s/%s/%s.so", bd, name, name);
            if (try_path(&tried, a))
                found = tb_xstrdup(a);
            free(a);
            free(bd);
        }
    }
    if (!found) {
        char *a = tb_xasprintf("%s/%s.so", TB_PLUGIN_INSTALL_DIR, name);
        if (try_path(&tried, a))
            found = tb_xstrdup(a);
        free(a);
    }
    if (tried_out)
        *tried_out = tb_str_take(&tried);
    else
        tb_str_free(&tried);
    return found;
}

static int valid_option_name(const char *s)
{
    if (!s || !*s)
        return 0;
    for (; *s; s++)
        if (!(islower((unsigned char)*s) || isdigit((unsigned char)*s) || *s == '_'))
            return 0;
    return 1;
}

/* The [backend] keys of a suite (suite/suite.c): its own, then the case
 * dimensions (suite/dims.c's names, which proc, below suite, cannot
 * read; tests/unit/test_plugin.c checks every one is here). An option
 * named so would be shadowed: the suite's value goes to the key. */
static const char *const reserved_keys[] = {
    "plugin", "model", "include",
    "prompt_tokens", "max_new_tokens", "batch", "concurrency", "request_rate", "steps", "block_length", "requests",
};

int tb_plugin_reserved_key(const char *name)
{
    for (size_t i = 0; i < sizeof reserved_keys / sizeof *reserved_keys; i++)
        if (strcmp(name, reserved_keys[i]) == 0)
            return 1;
    return 0;
}

/* NULL when s (may be NULL) is valid UTF-8, else a reason naming `what`:
 * the table's text is stored and exported as it is. */
static char *not_utf8(const char *what, const char *s)
{
    size_t bad;
    if (!s || tb_utf8_valid(s, strlen(s), &bad))
        return NULL;
    return tb_xasprintf("%s is not valid UTF-8 (byte %zu, 0x%02x)", what, bad, (unsigned char)s[bad]);
}

/* Check the data of an ops table (no method); returns a malloc'd reason
 * or NULL when it is fine. The runner checks the copy its loading
 * process sent too (plugin_proc.c). */
char *tb_plugin_check_data(const tb_backend_ops *o)
{
    if (o->abi_major != TB_ABI_MAJOR)
        return tb_xasprintf("built for plugin ABI %u, this tokbench speaks ABI %d (rebuild the plugin against this tokbench's backend.h)",
                            o->abi_major, TB_ABI_MAJOR);
    if (o->struct_size < TB_OPS_MIN_SIZE)
        return tb_xasprintf("ops table is %u bytes, smaller than the %zu bytes of ABI %d (struct_size must be sizeof(tb_backend_ops))",
                            o->struct_size, (size_t)TB_OPS_MIN_SIZE, TB_ABI_MAJOR);
    if (!o->name || !valid_option_name(o->name))
        return tb_xstrdup("no name, or a name that is not [a-z0-9_]+");
    if (!o->version)
        return tb_xstrdup("no version string");
    if (!o->description)
        return tb_xstrdup("no description (a one-line string: docs/PLUGINS.md)");
    char *bad = not_utf8("version", o->version);
    if (!bad)
        bad = not_utf8("description", o->description);
    if (bad)
        return bad;
    if (o->n_options && !o->options)
        return tb_xasprintf("declares %u options but no option table", o->n_options);
    for (uint32_t i = 0; i < o->n_options; i++) {
        const tb_option_decl *d = &o->options[i];
        if (!valid_option_name(d->name))
            return tb_xasprintf("option %u has no name or a name that is not [a-z0-9_]+", i);
        for (uint32_t j = 0; j < i; j++)
            if (strcmp(o->options[j].name, d->name) == 0)
                return tb_xasprintf("option \"%s\" is declared twice", d->name);
        if (tb_plugin_reserved_key(d->name))
            return tb_xasprintf("option \"%s\" collides with a suite key (plugin, model, include and the "
                                "dimensions are the suite's)", d->name);
        if (d->type < TB_OPT_BOOL || d->type > TB_OPT_ENUM)
            return tb_xasprintf("option \"%s\" has unknown type %d", d->name, (int)d->type);
        if (d->type == TB_OPT_ENUM && (!d->choices || !*d->choices))
            return tb_xasprintf("enum option \"%s\" has no choices", d->name);
        if ((d->flags & TB_OPTF_PATH) && d->type != TB_OPT_STRING)
            return tb_xasprintf("option \"%s\" is a path (TB_OPTF_PATH) but not a string", d->name);
        if ((d->flags & TB_OPTF_MODEL) && d->type != TB_OPT_STRING)
            return tb_xasprintf("option \"%s\" is a model (TB_OPTF_MODEL) but not a string", d->name);
        if (!d->default_value)
            return tb_xasprintf("option \"%s\" has no default value", d->name);
        const char *const text[] = {d->default_value, d->help, d->choices};
        const char *const text_name[] = {"default", "help", "choices"};
        for (int k = 0; k < 3; k++)
            if ((bad = not_utf8(text_name[k], text[k]))) {
                char *r = tb_xasprintf("option \"%s\": %s", d->name, bad);
                free(bad);
                return r;
            }
        tb_option_value v;
        char *why = NULL;
        if (tb_option_parse(d, d->default_value, &v, &why) != 0) {
            char *r = tb_xasprintf("option \"%s\": default \"%s\" is invalid: %s", d->name, d->default_value, why);
            free(why);
            return r;
        }
        free((char *)v.text);
    }
    return NULL;
}

/* The whole table: its data, then its methods. */
static char *check_ops(const tb_backend_ops *o)
{
    if (o->abi_major != TB_ABI_MAJOR || o->struct_size < TB_OPS_MIN_SIZE)
        return tb_plugin_check_data(o); /* nothing more can be read */
    const char *missing = !o->create ? "create()" : !o->destroy ? "destroy()"
                        : !o->generate ? "generate()" : !o->last_error ? "last_error()" : NULL;
    if (missing)
        return tb_xasprintf("required method %s is missing", missing);
    if ((o->capabilities & TB_CAP_TOKENIZER) && (!o->tokenize || !o->detokenize))
        return tb_xstrdup("claims the tokenizer capability but lacks tokenize() or detokenize()");
    if ((o->capabilities & TB_CAP_LOGLIK) && (!TB_STRUCT_HAS(o, tb_backend_ops, loglik) || !o->loglik))
        return tb_xstrdup("claims the loglik capability (TB_CAP_LOGLIK) but lacks loglik()");
    return tb_plugin_check_data(o);
}

int tb_plugin_load(const char *path, const char *name, const tb_backend_ops **out, char **err)
{
    *out = NULL;
    /* dlopen needs a '/' to take a path literally rather than search. */
    char *dl_path = strchr(path, '/') ? tb_xstrdup(path) : tb_xasprintf("./%s", path);
    /* RTLD_NODELETE: a plugin linking a GPU runtime keeps state past
     * dlclose (and LeakSanitizer would report it as leaked) */
    void *h = dlopen(dl_path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    free(dl_path);
    if (!h) {
        *err = tb_xasprintf("plugin %s (%s): cannot load: %s", name, path, dlerror());
        return -1;
    }
    dlerror();
    void *sym = dlsym(h, TB_BACKEND_ENTRY_SYMBOL);
    if (!sym) {
        *err = tb_xasprintf("plugin %s (%s): no entry symbol %s() (a backend exports exactly that function)",
                            name, path, TB_BACKEND_ENTRY_SYMBOL);
        dlclose(h);
        return -1;
    }
    tb_backend_entry_fn entry;
    memcpy(&entry, &sym, sizeof entry); /* object → function pointer, POSIX */
    const tb_backend_ops *ops = entry();
    char *why = ops ? check_ops(ops) : tb_xstrdup("entry function returned NULL");
    if (why) {
        /* Name the plugin by its own name only when its table is one we
         * can read that far: same ABI, and struct_size covers `name`. */
        int named = ops && ops->abi_major == TB_ABI_MAJOR && TB_STRUCT_HAS(ops, tb_backend_ops, name) && ops->name;
        *err = tb_xasprintf("plugin %s (%s): %s", named ? ops->name : name, path, why);
        free(why);
        dlclose(h);
        return -1;
    }
    *out = ops; /* loaded for the life of this process */
    return 0;
}

static int same_str(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

int tb_plugin_same(const tb_plugin *p, const tb_backend_ops *o, char **err)
{
    const tb_backend_ops *m = p->ops;
    int same = same_str(m->name, o->name) && same_str(m->version, o->version) &&
               m->capabilities == o->capabilities && m->n_options == o->n_options;
    for (uint32_t i = 0; same && i < o->n_options; i++) {
        const tb_option_decl *a = &m->options[i], *b = &o->options[i];
        same = same_str(a->name, b->name) && a->type == b->type && a->flags == b->flags &&
               same_str(a->default_value, b->default_value) && same_str(a->choices, b->choices) &&
               memcmp(&a->min, &b->min, sizeof a->min) == 0 && memcmp(&a->max, &b->max, sizeof a->max) == 0;
    }
    if (same)
        return 0;
    *err = tb_xasprintf("plugin %s (%s): its file changed since the suite was loaded (now %s %s): run the suite "
                        "again", m->name, p->path, o->name, o->version);
    return -1;
}

void tb_plugin_close(tb_plugin *p)
{
    tb_backend_ops *o = (tb_backend_ops *)p->ops;
    if (o) {
        for (uint32_t i = 0; i < o->n_options; i++) {
            tb_option_decl *d = (tb_option_decl *)&o->options[i];
            free((char *)d->name);
            free((char *)d->default_value);
            free((char *)d->help);
            free((char *)d->choices);
        }
        free((tb_option_decl *)o->options);
        free((char *)o->name);
        free((char *)o->version);
        free((char *)o->description);
        free(o);
    }
    free(p->probe_why);
    free(p->path);
    memset(p, 0, sizeof *p);
}

static char *dup_or_null(const char *s)
{
    return s ? tb_xstrdup(s) : NULL;
}

void tb_plugin_copy(tb_plugin *dst, const tb_plugin *src)
{
    *dst = *src;
    dst->path = tb_xstrdup(src->path);
    dst->probe_why = dup_or_null(src->probe_why);
    tb_backend_ops *o = tb_xmalloc(sizeof *o);
    *o = *src->ops;
    o->name = dup_or_null(o->name);
    o->version = dup_or_null(o->version);
    o->description = dup_or_null(o->description);
    tb_option_decl *d = o->n_options ? tb_xcalloc(o->n_options, sizeof *d) : NULL;
    for (uint32_t i = 0; i < o->n_options; i++) {
        d[i] = src->ops->options[i];
        d[i].name = dup_or_null(d[i].name);
        d[i].default_value = dup_or_null(d[i].default_value);
        d[i].help = dup_or_null(d[i].help);
        d[i].choices = dup_or_null(d[i].choices);
    }
    o->options = d;
    dst->ops = o;
}

static int has_path(char **paths, size_t n, const char *base)
{
    for (size_t i = 0; i < n; i++) {
        const char *b = strrchr(paths[i], '/');
        if (strcmp(b ? b + 1 : paths[i], base) == 0)
            return 1;
    }
    return 0;
}

static void scan_dir(const char *dir, int nested, char ***paths, size_t *n)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    /* readdir order is arbitrary: collect then sort for stable listings */
    char **found = NULL;
    size_t nf = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char *full;
        if (nested) /* build tree: plugins/NAME/NAME.so */
            full = tb_xasprintf("%s/%s/%s.so", dir, e->d_name, e->d_name);
        else {
            size_t l = strlen(e->d_name);
            if (l < 4 || strcmp(e->d_name + l - 3, ".so") != 0)
                continue;
            full = tb_xasprintf("%s/%s", dir, e->d_name);
        }
        if (!is_file(full)) {
            free(full);
            continue;
        }
        found = tb_xrealloc(found, (nf + 1) * sizeof *found);
        found[nf++] = full;
    }
    closedir(d);
    for (size_t i = 1; i < nf; i++)
        for (size_t j = i; j > 0 && strcmp(found[j - 1], found[j]) > 0; j--) {
            char *t = found[j];
            found[j] = found[j - 1];
            found[j - 1] = t;
        }
    for (size_t i = 0; i < nf; i++) {
        const char *base = strrchr(found[i], '/') + 1;
        if (has_path(*paths, *n, base)) {
            free(found[i]);
            continue;
        }
        *paths = tb_xrealloc(*paths, (*n + 1) * sizeof **paths);
        (*paths)[(*n)++] = found[i];
    }
    free(found);
}

size_t tb_plugin_scan(char ***paths)
{
    *paths = NULL;
    size_t n = 0;
    const char *env = getenv("TOKBENCH_PLUGIN_PATH");
    if (env && *env) {
        char *copy = tb_xstrdup(env), *save = NULL;
        for (char *dir = strtok_r(copy, ":", &save); dir; dir = strtok_r(NULL, ":", &save))
            scan_dir(dir, 0, paths, &n);
        free(copy);
    }
    char *bd = build_plugin_dir();
    if (bd) {
        scan_dir(bd, 1, paths, &n);
        free(bd);
    }
    scan_dir(TB_PLUGIN_INSTALL_DIR, 0, paths, &n);
    return n;
}

const tb_option_decl *tb_plugin_option(const tb_plugin *p, const char *name)
{
    for (uint32_t i = 0; i < p->ops->n_options; i++)
        if (strcmp(p->ops->options[i].name, name) == 0)
            return &p->ops->options[i];
    return NULL;
}

static int bounded(const tb_option_decl *d)
{
    return d->min <= d->max;
}

/* The shortest %g text that reads back as the same double: "0.1", not
 * %.17g's "0.10000000000000001" (this text lands in case labels and the
 * database). Whole numbers below 1e17 print in full, as %.17g did
 * ("3600000000", not "3.6e+09"). */
static char *fmt_double(double v)
{
    if (v == floor(v) && fabs(v) <= 9.2e18) /* an int option's bound, in digits the parser reads back */
        return tb_xasprintf("%.0f", v);
    for (int prec = 1; prec < 17; prec++) {
        char buf[64];
        snprintf(buf, sizeof buf, "%.*g", prec, v);
        if (strtod(buf, NULL) == v)
            return tb_xstrdup(buf);
    }
    return tb_xasprintf("%.17g", v);
}

static char *describe_range(const char *type, const tb_option_decl *d)
{
    if (!bounded(d))
        return tb_xstrdup(type);
    char *lo = fmt_double(d->min), *hi = fmt_double(d->max);
    char *s = tb_xasprintf("%s in [%s, %s]", type, lo, hi);
    free(lo);
    free(hi);
    return s;
}

char *tb_option_describe_type(const tb_option_decl *d)
{
    switch (d->type) {
    case TB_OPT_BOOL:
        return tb_xstrdup("bool (true/false)");
    case TB_OPT_INT:
        return describe_range("int", d);
    case TB_OPT_FLOAT:
        return describe_range("float", d);
    case TB_OPT_STRING:
        return tb_xstrdup(d->flags & TB_OPTF_PATH ? "path (checked to exist when the suite loads)" : "string");
    case TB_OPT_ENUM:
        return tb_xasprintf("one of %s", d->choices ? d->choices : "?");
    }
    return tb_xstrdup("?");
}

static int enum_has(const char *choices, const char *v)
{
    size_t n = strlen(v);
    const char *c = choices;
    while (c && *c) {
        const char *bar = strchr(c, '|');
        size_t len = bar ? (size_t)(bar - c) : strlen(c);
        if (len == n && strncmp(c, v, n) == 0)
            return 1;
        c = bar ? bar + 1 : NULL;
    }
    return 0;
}

int tb_option_parse(const tb_option_decl *d, const char *text, tb_option_value *out, char **err)
{
    memset(out, 0, sizeof *out);
    out->name = d->name;
    char *end;
    errno = 0;
    switch (d->type) {
    case TB_OPT_BOOL: {
        static const char *const yes[] = {"true", "yes", "on", "1"};
        static const char *const no[] = {"false", "no", "off", "0"};
        for (size_t i = 0; i < 4; i++) {
            if (strcasecmp(text, yes[i]) == 0) {
                out->i = 1;
                out->f = 1;
                out->text = tb_xstrdup("true");
                return 0;
            }
            if (strcasecmp(text, no[i]) == 0) {
                out->text = tb_xstrdup("false");
                return 0;
            }
        }
        *err = tb_xasprintf("expected a bool (true/false, yes/no, on/off, 1/0), got \"%s\"", text);
        return -1;
    }
    case TB_OPT_INT: {
        long long v = strtoll(text, &end, 10);
        if (end == text || *end || errno || (bounded(d) && (v < d->min || v > d->max))) {
            char *t = tb_option_describe_type(d);
            *err = tb_xasprintf("expected an %s, got \"%s\"", t, text);
            free(t);
            return -1;
        }
        out->i = v;
        out->f = (double)v;
        out->text = tb_xasprintf("%lld", v);
        return 0;
    }
    case TB_OPT_FLOAT: {
        double v = strtod(text, &end);
        if (end == text || *end || errno || !isfinite(v) || (bounded(d) && (v < d->min || v > d->max))) {
            char *t = tb_option_describe_type(d);
            *err = tb_xasprintf("expected a %s, got \"%s\"", t, text);
            free(t);
            return -1;
        }
        out->f = v;
        /* Saturate: converting a double outside int64's range is UB. */
        out->i = v >= 0x1p63 ? INT64_MAX : v < -0x1p63 ? INT64_MIN : (int64_t)v;
        out->text = fmt_double(v);
        return 0;
    }
    case TB_OPT_STRING:
        out->text = tb_xstrdup(text);
        return 0;
    case TB_OPT_ENUM:
        if (!enum_has(d->choices, text)) {
            *err = tb_xasprintf("expected one of %s, got \"%s\"", d->choices, text);
            return -1;
        }
        out->text = tb_xstrdup(text);
        return 0;
    }
    *err = tb_xstrdup("unknown option type");
    return -1;
}

char *tb_caps_string(uint32_t caps)
{
    static const struct { uint32_t bit; const char *name; } names[] = {
        {TB_CAP_BATCH, "batch"},       {TB_CAP_CONCURRENCY, "concurrency"},
        {TB_CAP_STEPS, "steps"},       {TB_CAP_BLOCKS, "blocks"},
        {TB_CAP_STREAMING, "streaming"}, {TB_CAP_TOKENIZER, "tokenizer"},
        {TB_CAP_DEVICE_MEMORY, "device_memory"}, {TB_CAP_ENERGY, "energy"},
        {TB_CAP_REQUEST_RATE, "request_rate"}, {TB_CAP_LOGLIK, "loglik"},
        {TB_CAP_MODEL_PATH, "model_path"},
    };
    tb_str b = {0};
    for (size_t i = 0; i < TB_ARRAY_LEN(names); i++)
        if (caps & names[i].bit) {
            if (b.len)
                tb_str_append(&b, ",");
            tb_str_append(&b, names[i].name);
        }
    if (!b.len)
        tb_str_append(&b, "none");
    return tb_str_take(&b);
}
