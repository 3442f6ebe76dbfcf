/* serve.c — see serve.h: the command's frame. The suite, its plan and the
 * served case; the server's context (serve_batch.h); signals; the worker
 * started, the HTTP daemon (serve_http.c) listening, the dispatcher
 * (serve_batch.c) run until a signal, telling the HTTP side of each
 * request's progress, and everything stopped in order. */
#define _GNU_SOURCE
#include "serve.h"

#include <stdio.h>

#ifndef TB_HAVE_MHD

const char *tb_serve_unavailable(void)
{
    return "this tokbench was built without libmicrohttpd (install libmicrohttpd-dev and rebuild)";
}

int tb_serve_main(const tb_serve_options *o)
{
    (void)o;
    fprintf(stderr, "tokbench serve: %s\n", tb_serve_unavailable());
    return 1;
}

#else

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"
#include "serve_batch.h"
#include "serve_http.h"
#include "suite.h"
#include "util.h"
#include "worker_client.h"

/* Set by SIGINT/SIGTERM; what the handler can touch, so file-level. The
 * server reads it through tb_server.stop, the worker client through its
 * `interrupted`. */
static volatile int sig_stop;

static void on_signal(int sig)
{
    (void)sig;
    sig_stop = 1;
}

const char *tb_serve_unavailable(void)
{
    return NULL;
}

/* The API key of --api-key or --api-key-file (its one line, the line end
 * dropped): 0 with *key (malloc'd), or -1 after saying why. The key is
 * never printed. */
static int load_api_key(const tb_serve_options *o, char **key)
{
    *key = NULL;
    if (o->api_key && o->api_key_file) {
        fprintf(stderr, "tokbench serve: --api-key and --api-key-file: give one\n");
        return -1;
    }
    const char *from = o->api_key ? "--api-key" : "--api-key-file";
    char *k;
    if (o->api_key) {
        k = tb_xstrdup(o->api_key);
    } else if (o->api_key_file) {
        FILE *f = fopen(o->api_key_file, "rb");
        if (!f) {
            fprintf(stderr, "tokbench serve: --api-key-file %s: %s\n", o->api_key_file, strerror(errno));
            return -1;
        }
        char buf[4098]; /* a key is a line, not a file of any size */
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        int bad = ferror(f);
        fclose(f);
        if (bad || n == sizeof buf - 1) {
            fprintf(stderr, "tokbench serve: --api-key-file %s: %s\n", o->api_key_file,
                    bad ? "cannot be read" : "longer than 4096 bytes; expected one line, the key");
            return -1;
        }
        buf[n] = '\0';
        if (n && buf[n - 1] == '\n')
            buf[--n] = '\0';
        if (n && buf[n - 1] == '\r')
            buf[--n] = '\0';
        if (strlen(buf) != n) {
            fprintf(stderr, "tokbench serve: --api-key-file %s: the key has a NUL byte\n", o->api_key_file);
            return -1;
        }
        k = tb_xstrdup(buf);
    } else {
        return 0;
    }
    /* What an HTTP header can carry and a client can send back: printable
     * ASCII (tokens, base64) or UTF-8, no control bytes, no spaces. */
    const char *why = !*k ? "the key is empty" : NULL;
    for (const unsigned char *p = (const unsigned char *)k; !why && *p; p++)
        if (*p < 0x20 || *p == 0x7f)
            why = "the key has a control byte (a line end inside it, a tab, ...)";
        else if (*p == ' ')
            why = "the key has a space";
    if (why) {
        fprintf(stderr, "tokbench serve: %s%s%s: %s\n", from, o->api_key ? "" : " ",
                o->api_key ? "" : o->api_key_file, why);
        free(k);
        return -1;
    }
    *key = k;
    return 0;
}

/* Open the stepped session of --max-batch slots before listening, so that
 * what the backend cannot hold (its KV cache past the machine's memory)
 * is said now, naming the limit, not in every answer. No smaller size is
 * tried: a try that fits may take most of the machine's memory. 1 opened,
 * 0 no step ops (static batches), -1 said why. */
static int open_session_first(tb_server *s, const char *label, int asked)
{
    char *why = NULL;
    int o = tb_serve_open_session(s, &why);
    if (o >= 0)
        return o;
    fprintf(stderr, "tokbench serve: --max-batch %u%s: backend %s cannot hold %u requests in flight: %s\n",
            s->max_batch, asked ? "" : " (the default)", label, s->max_batch, why);
    free(why);
    return -1;
}

int tb_serve_main(const tb_serve_options *o)
{
    const char *label = o->backend;
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(o->port)};
    if (inet_pton(AF_INET, o->host, &addr.sin_addr) != 1) {
        fprintf(stderr, "tokbench serve: --host %s: expected an IPv4 address such as 127.0.0.1\n", o->host);
        return 2;
    }
    char *api_key;
    if (load_api_key(o, &api_key) != 0)
        return 2;

    tb_suite suite;
    tb_plan plan;
    char *err = NULL;
    if (tb_suite_load(o->suite, &suite, &err) != 0) {
        fprintf(stderr, "%s", err);
        free(err);
        free(api_key);
        return 2;
    }
    if (tb_plan_build(&suite, &plan, &err) != 0) {
        fprintf(stderr, "%s", err);
        free(err);
        tb_suite_free(&suite);
        free(api_key);
        return 2;
    }
    int rc = 2;
    size_t bi = plan.n_backends;
    for (size_t i = 0; i < plan.n_backends; i++)
        if (strcmp(plan.backends[i].sb->label, label) == 0)
            bi = i;
    size_t ci = plan.n_cases;
    for (size_t i = 0; bi < plan.n_backends && i < plan.n_cases && ci == plan.n_cases; i++)
        if (plan.cases[i].backend == bi && !plan.cases[i].skip_reason)
            ci = i;
    if (bi == plan.n_backends) {
        tb_str known = {0};
        for (size_t i = 0; i < plan.n_backends; i++)
            tb_str_appendf(&known, "%s%s", i ? ", " : "", plan.backends[i].sb->label);
        fprintf(stderr, "tokbench serve: %s: no [backend %s] (it has: %s)\n", suite.path, label,
                known.s ? known.s : "none");
        tb_str_free(&known);
        goto out;
    }
    if (ci == plan.n_cases) {
        fprintf(stderr, "tokbench serve: %s: [backend %s] has no case that can run\n", suite.path, label);
        goto out;
    }
    const tb_backend_ops *ops = plan.backends[bi].plugin.ops;
    /* Lives on this stack until every thread that sees it is joined
     * (tb_serve_http_stop). */
    tb_server srv = {0};
    srv.plan = &plan;
    srv.case_index = (uint32_t)ci;
    srv.label = label;
    srv.stop = &sig_stop;
    srv.reuse_port = o->reuse_port;
    srv.client_timeout = o->client_timeout ? o->client_timeout : 30;
    srv.max_connections = o->max_connections ? o->max_connections : 4096;
    srv.max_connections_per_ip = o->max_connections_per_ip;
    srv.ops = ops;
    srv.api_key = api_key;
    srv.events = &tb_serve_http_events;
    {
        char *why = NULL;
        if (tb_chat_template_load(plan.backends[bi].sb->model, &srv.chat, &why) != 0) {
            fprintf(stderr, "tokbench serve: %s\n", why);
            free(why);
            goto out;
        }
    }
    srv.max_batch = o->max_batch ? o->max_batch : (ops->capabilities & TB_CAP_BATCH) ? 16 : 1;
    srv.continuous = !o->static_batching; /* the dispatcher falls back when the backend cannot step */
    if (!(ops->capabilities & TB_CAP_BATCH) && srv.max_batch > 1) {
        fprintf(stderr, "tokbench serve: --max-batch %u: plugin %s does not batch; serving one request at a time\n",
                srv.max_batch, ops->name);
        srv.max_batch = 1;
    }
    tb_wc_init(&srv.wc, &plan, bi, &sig_stop);
    pthread_mutex_init(&srv.mu, NULL);
    pthread_cond_init(&srv.queue_cv, NULL);
    {
        char *label_s = tb_case_label(&plan, &plan.cases[ci]);
        fprintf(stderr, "tokbench serve: backend %s (plugin %s %s), case #%zu: %s, options %s\n", label, ops->name,
                ops->version, plan.cases[ci].ordinal, label_s, plan.backends[bi].options_json);
        fprintf(stderr, "tokbench serve: chat template: %s%s%s\n", tb_chat_template_name(&srv.chat),
                srv.chat.kind == TB_CHAT_UNKNOWN ? " (chat requests are refused)" : "",
                srv.chat.kind == TB_CHAT_NONE ? " (a chat request is one user message, its text the prompt)" : "");
        free(label_s);
    }

    struct sigaction sa = {0}, old_int, old_term, old_pipe;
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    struct sigaction ign = {0};
    ign.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &ign, &old_pipe);
    sig_stop = 0;

    /* The worker first: forked before any thread exists. */
    char *why = NULL;
    if (tb_serve_start_worker(&srv, &why) != 0) {
        fprintf(stderr, "tokbench serve: backend %s: %s\n", label, why);
        free(why);
        rc = 1;
        goto restore;
    }
    if (srv.continuous) {
        int so = open_session_first(&srv, label, o->max_batch != 0);
        if (so < 0) {
            tb_wc_kill(&srv.wc);
            rc = 2;
            goto restore;
        }
        srv.session_open = so;
        if (so == 0) { /* said here, before listening */
            fprintf(stderr, "tokbench serve: plugin %s has no step ops: static batches\n", ops->name);
            srv.continuous = 0;
        }
    }
    unsigned bound;
    struct MHD_Daemon *d = tb_serve_http_start(&srv, &addr, &bound);
    if (!d) {
        fprintf(stderr, "tokbench serve: cannot listen on %s:%u: %s\n", o->host, (unsigned)o->port, strerror(errno));
        tb_wc_kill(&srv.wc);
        rc = 1;
        goto restore;
    }
    fprintf(stderr, "tokbench serve: listening on http://%s:%u/v1 (%s batching, max batch %u); Ctrl-C stops\n",
            o->host, bound, srv.continuous ? "continuous" : "static", srv.max_batch);
    fprintf(stderr,
            "tokbench serve: clients: at most %u connections (%s%.0u per address), --client-timeout %u s, bodies up to "
            "16 MiB, %s\n",
            srv.max_connections, srv.max_connections_per_ip ? "" : "any number", srv.max_connections_per_ip,
            srv.client_timeout,
            api_key ? "an API key required" : "no API key");
    if ((ntohl(addr.sin_addr.s_addr) >> 24) != 127)
        fprintf(stderr,
                "tokbench serve: warning: %s is not a loopback address: other machines can reach this server%s\n",
                o->host,
                api_key ? " (plain HTTP: the key crosses the network unencrypted)"
                        : ", and with no --api-key anyone among them can use the backend");
    if (o->port_file) {
        FILE *f = fopen(o->port_file, "w");
        if (f) {
            fprintf(f, "%u\n", bound);
            fclose(f);
        }
    }

    tb_serve_dispatch(&srv);

    fprintf(stderr, "tokbench serve: stopping\n");
    /* Every batch has ended; wake the connections still waiting in the
     * queue (they hold their requests through their conn), then join. */
    tb_serve_drain(&srv);
    tb_serve_http_stop(d);
    tb_wc_stop(&srv.wc);
    rc = 0;
restore:
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    sigaction(SIGPIPE, &old_pipe, NULL);
    pthread_cond_destroy(&srv.queue_cv);
    pthread_mutex_destroy(&srv.mu);
    tb_wc_free(&srv.wc);
    tb_chat_template_free(&srv.chat);
out:
    tb_plan_free(&plan);
    tb_suite_free(&suite);
    free(api_key);
    return rc;
}

#endif /* TB_HAVE_MHD */
