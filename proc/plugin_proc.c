/* plugin_proc.c — plugin code in a process of its own (plugin.h): the
 * child that loads a plugin and runs a function of the caller's there
 * (tb_plugin_call), and tb_plugin_open, which brings back the data of
 * the plugin's ops table that way. The runner never dlopens a plugin:
 * a constructor or entry function that crashes, exits or hangs costs
 * that child, and the runner says so. */
#define _GNU_SOURCE
#include "plugin.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include "proc.h"
#include "util.h"
#include "wire.h"

/* The child's frames (a private pipe: not wire.h's worker messages). */
enum {
    PC_LOADED = 1, /* the plugin is loaded and checked; no payload */
    PC_ERROR = 2,  /* it could not be: tb_plugin_load's message */
    PC_REPLY = 3,  /* one answer of the caller's function */
    PC_DONE = 4,   /* the function returned */
};

/* After the pipe closes, how long the child may take to end before it
 * is killed (it closed its descriptors and hangs?). */
#define ENDING_GRACE_NS (5LL * 1000000000LL)

typedef struct call_arg {
    const char *path, *name;
    tb_plugin_fn fn;
    void *arg;
} call_arg;

static void call_child(void *argp, int fd_in, int fd_out)
{
    const call_arg *a = argp;
    (void)fd_in;
    /* Plugins must not write to stdout (the parent's output): point it
     * at stderr. */
    dup2(2, 1);
    signal(SIGPIPE, SIG_IGN);
    const tb_backend_ops *ops;
    char *err = NULL;
    if (tb_plugin_load(a->path, a->name, &ops, &err) != 0) {
        tb_wire_send(fd_out, PC_ERROR, err, strlen(err));
        free(err);
        tb_proc_child_exit();
    }
    if (tb_wire_send(fd_out, PC_LOADED, NULL, 0) == 0) {
        a->fn(ops, a->arg, fd_out);
        tb_wire_send(fd_out, PC_DONE, NULL, 0);
    }
    tb_proc_child_exit();
}

int tb_plugin_reply(int fd, const void *data, size_t len)
{
    return tb_wire_send(fd, PC_REPLY, data, len);
}

void tb_plugin_answers_free(tb_plugin_answers *ans)
{
    for (size_t i = 0; i < ans->n; i++)
        free(ans->v[i]);
    free(ans->v);
    free(ans->len);
    memset(ans, 0, sizeof *ans);
}

int tb_plugin_call(const char *path, const char *name, double timeout_s, const char *timeout_name, tb_plugin_fn fn,
                   void *arg, tb_plugin_answers *ans, char **why)
{
    memset(ans, 0, sizeof *ans);
    *why = NULL;
    call_arg a = {path, name, fn, arg}; /* the child's copy of this frame lives on */
    tb_proc p = {0};
    if (tb_proc_spawn(&p, call_child, &a) != 0) {
        *why = tb_xasprintf("cannot start a process to load it: %m");
        return -1;
    }
    tb_wire_reader rd;
    tb_wire_reader_init(&rd, p.from_fd);
    tb_wire_reader_watch_exit(&rd, p.exit_fd);
    int64_t timeout_ns = (int64_t)(timeout_s * 1e9);
    int done = 0;
    while (!done && !*why) {
        tb_wire_frame f;
        tb_wire_rc rc = tb_wire_read(&rd, tb_now_ns() + timeout_ns, NULL, &f);
        if (rc == TB_WIRE_FRAME) {
            if (f.type == PC_LOADED && !ans->loaded) {
                ans->loaded = 1;
            } else if (f.type == PC_ERROR && !ans->loaded) {
                *why = tb_xstrndup(f.payload, f.len);
            } else if (f.type == PC_REPLY && ans->loaded) {
                ans->v = tb_xrealloc(ans->v, (ans->n + 1) * sizeof *ans->v);
                ans->len = tb_xrealloc(ans->len, (ans->n + 1) * sizeof *ans->len);
                ans->v[ans->n] = tb_xmalloc(f.len + 1);
                memcpy(ans->v[ans->n], f.payload, f.len);
                ans->v[ans->n][f.len] = '\0';
                ans->len[ans->n++] = f.len;
            } else if (f.type == PC_DONE && ans->loaded) {
                done = 1;
            } else {
                *why = tb_xasprintf("sent message %u out of turn (its process's memory overwritten?)", f.type);
            }
        } else if (rc == TB_WIRE_TIMEOUT) {
            *why = timeout_name ? tb_xasprintf("did not answer within %s (%.3g s); killed", timeout_name, timeout_s)
                                : tb_xasprintf("did not answer within %.3g s; killed", timeout_s);
        } else if (rc == TB_WIRE_ERROR && errno == EMSGSIZE) {
            *why = tb_xasprintf("sent a message over %zu bytes; killed", TB_WIRE_MAX_FRAME);
        } else { /* it closed its pipe: it is ending, or hangs without it */
            if (tb_proc_await_exit(&p, tb_now_ns() + ENDING_GRACE_NS, NULL) > 0) {
                int status = 0;
                struct rusage ru;
                tb_proc_wait(&p, &status, &ru);
                char *how = tb_proc_ending(status);
                *why = WIFSIGNALED(status) ? tb_xasprintf("crashed: %s", how)
                                           : tb_xasprintf("%s (a plugin must never call exit())", how);
                free(how);
            } else {
                *why = tb_xasprintf("closed its pipe but did not exit within %.0f s; killed",
                                    (double)ENDING_GRACE_NS * 1e-9);
            }
        }
    }
    tb_wire_reader_free(&rd);
    tb_proc_kill(&p); /* done, or not answering: nothing more is wanted of it */
    return *why ? -1 : 0;
}

/* ------------------------------------------------------ the ops table */

/* The data of an ops table, as the loading process sends it: u32 and f64
 * in this machine's order (both ends are one executable), strings as a
 * u32 length (NO_STR: NULL) and their bytes. */
#define NO_STR UINT32_MAX

static void put_u32(tb_str *b, uint32_t v)
{
    tb_str_appendn(b, (const char *)&v, sizeof v);
}

static void put_f64(tb_str *b, double v)
{
    tb_str_appendn(b, (const char *)&v, sizeof v);
}

static void put_str(tb_str *b, const char *s)
{
    put_u32(b, s ? (uint32_t)strlen(s) : NO_STR);
    if (s)
        tb_str_appendn(b, s, strlen(s));
}

typedef struct reader {
    const char *p, *end;
    int bad;
} reader;

static uint32_t get_u32(reader *r)
{
    uint32_t v = 0;
    if ((size_t)(r->end - r->p) < sizeof v) {
        r->bad = 1;
        return 0;
    }
    memcpy(&v, r->p, sizeof v);
    r->p += sizeof v;
    return v;
}

static double get_f64(reader *r)
{
    double v = 0;
    if ((size_t)(r->end - r->p) < sizeof v) {
        r->bad = 1;
        return 0;
    }
    memcpy(&v, r->p, sizeof v);
    r->p += sizeof v;
    return v;
}

static char *get_str(reader *r)
{
    uint32_t n = get_u32(r);
    if (r->bad || n == NO_STR)
        return NULL;
    if ((size_t)(r->end - r->p) < n) {
        r->bad = 1;
        return NULL;
    }
    char *s = tb_xstrndup(r->p, n);
    r->p += n;
    return s;
}

typedef struct describe_arg {
    unsigned flags;
} describe_arg;

/* In the loading process: the table's data, then probe()'s verdict. */
static void describe_fn(const tb_backend_ops *o, void *argp, int fd)
{
    const describe_arg *a = argp;
    uint32_t methods = 0;
    if (o->probe)
        methods |= TB_PLUGIN_HAS_PROBE;
    if (o->describe)
        methods |= TB_PLUGIN_HAS_DESCRIBE;
    if (TB_STRUCT_HAS(o, tb_backend_ops, validate) && o->validate)
        methods |= TB_PLUGIN_HAS_VALIDATE;
    if (TB_STRUCT_HAS(o, tb_backend_ops, loglik) && o->loglik)
        methods |= TB_PLUGIN_HAS_LOGLIK;
    tb_str b = {0};
    put_u32(&b, o->abi_major);
    put_u32(&b, o->struct_size < sizeof *o ? o->struct_size : (uint32_t)sizeof *o);
    put_u32(&b, o->capabilities);
    put_u32(&b, methods);
    put_str(&b, o->name);
    put_str(&b, o->version);
    put_str(&b, o->description);
    put_u32(&b, o->n_options);
    for (uint32_t i = 0; i < o->n_options; i++) {
        const tb_option_decl *d = &o->options[i];
        put_str(&b, d->name);
        put_u32(&b, (uint32_t)d->type);
        put_str(&b, d->default_value);
        put_str(&b, d->help);
        put_str(&b, d->choices);
        put_f64(&b, d->min);
        put_f64(&b, d->max);
        put_u32(&b, d->flags);
    }
    int sent = tb_plugin_reply(fd, b.s, b.len);
    tb_str_free(&b);
    if (sent != 0 || !(a->flags & TB_PLUGIN_PROBE))
        return;
    char why[512] = "";
    tb_status st = o->probe ? o->probe(why, sizeof why) : TB_OK;
    why[sizeof why - 1] = '\0';
    tb_str v = {0};
    put_u32(&v, (uint32_t)st);
    put_str(&v, why);
    tb_plugin_reply(fd, v.s, v.len);
    tb_str_free(&v);
}

/* The table sent by describe_fn, into p (an owned copy, every method
 * NULL). 0, or -1 with *why. */
static int decode_table(const char *buf, size_t len, tb_plugin *p, char **why)
{
    reader r = {buf, buf + len, 0};
    tb_backend_ops *o = tb_xcalloc(1, sizeof *o);
    p->ops = o;
    o->abi_major = get_u32(&r);
    o->struct_size = get_u32(&r);
    o->capabilities = get_u32(&r);
    p->methods = get_u32(&r);
    o->name = get_str(&r);
    o->version = get_str(&r);
    o->description = get_str(&r);
    uint32_t n = get_u32(&r);
    /* each declaration takes at least 44 bytes: a count past what is
     * left is a broken message, not an allocation to try */
    if (!r.bad && n > (size_t)(r.end - r.p) / 44)
        r.bad = 1;
    if (!r.bad && n) {
        tb_option_decl *d = tb_xcalloc(n, sizeof *d);
        o->options = d;
        for (uint32_t i = 0; i < n && !r.bad; i++, o->n_options++) {
            d[i].name = get_str(&r);
            d[i].type = (tb_option_type)get_u32(&r);
            d[i].default_value = get_str(&r);
            d[i].help = get_str(&r);
            d[i].choices = get_str(&r);
            d[i].min = get_f64(&r);
            d[i].max = get_f64(&r);
            d[i].flags = get_u32(&r);
        }
    }
    if (r.bad || r.p != r.end) {
        *why = tb_xstrdup("its loading process sent a malformed description of its ops table");
        return -1;
    }
    /* the checks again, on what arrived (plugin code ran in the sender) */
    *why = tb_plugin_check_data(o);
    return *why ? -1 : 0;
}

int tb_plugin_open(const char *name, double timeout_s, const char *timeout_name, unsigned flags, tb_plugin *out,
                   char **err)
{
    memset(out, 0, sizeof *out);
    char *tried = NULL;
    char *path = tb_plugin_find(name, &tried);
    if (!path) {
        *err = tb_xasprintf("plugin %s: not found (looked at %s; set TOKBENCH_PLUGIN_PATH or give a path)", name, tried);
        free(tried);
        return -1;
    }
    free(tried);
    describe_arg a = {flags};
    tb_plugin_answers ans;
    char *why = NULL;
    int rc = tb_plugin_call(path, name, timeout_s, timeout_name, describe_fn, &a, &ans, &why);
    if (!ans.loaded && why && strncmp(why, "plugin ", 7) == 0) {
        *err = why; /* tb_plugin_load's own message: a check failed */
        why = NULL;
    } else if (ans.n == 0) {
        *err = tb_xasprintf("plugin %s (%s): loading it (its constructors and %s(), in a process of its own) %s",
                            name, path, TB_BACKEND_ENTRY_SYMBOL, why ? why : "sent no description");
    } else {
        tb_plugin p = {.path = path};
        char *bad = NULL;
        if (decode_table(ans.v[0], ans.len[0], &p, &bad) != 0) {
            *err = tb_xasprintf("plugin %s (%s): %s", name, path, bad);
            free(bad);
            p.path = NULL;
            tb_plugin_close(&p);
        } else {
            *out = p;
            path = NULL;
            if (flags & TB_PLUGIN_PROBE) {
                reader r = {ans.n > 1 ? ans.v[1] : "", ans.n > 1 ? ans.v[1] + ans.len[1] : "", 0};
                out->probe_status = (int)get_u32(&r);
                out->probe_why = get_str(&r);
                if (ans.n < 2 || r.bad || !out->probe_why) {
                    free(out->probe_why);
                    out->probe_status = TB_ERR;
                    out->probe_why = tb_xasprintf("probe() %s", rc != 0 && why ? why : "sent no verdict");
                }
            }
        }
    }
    free(why);
    free(path);
    tb_plugin_answers_free(&ans);
    return out->ops ? 0 : -1;
}
