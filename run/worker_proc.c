/* worker_proc.c — see worker_proc.h: the worker as a process. Spawning
 * one is worker.c's (tb_worker_spawn), which names the child's main. */
#define _GNU_SOURCE
#include "worker_proc.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util.h"

/* ------------------------------------------------------ the child's side */

/* Set by SIGINT and SIGTERM: the plugin's cancelled() turns true and
 * stays so (a judge pass stops too). */
static volatile sig_atomic_t cancel_flag;

static void on_signal(int sig)
{
    (void)sig;
    cancel_flag = 1;
}

int tb_worker_cancel_requested(void)
{
    return cancel_flag != 0;
}

/* memory_limit: the address space this process may add to what it has
 * now (RLIMIT_AS, so that it holds in sanitizer builds too, whose
 * reserved shadow memory is already counted). A backend that leaks then
 * fails an allocation (a clean TB_ERR_NO_MEMORY, or its own abort) long
 * before the kernel's OOM killer picks a process, maybe not this one. */
/* 0, or -1 with *err when the limit could not be set. */
static int apply_memory_limit(double mb, char **err)
{
    if (mb <= 0)
        return 0;
    unsigned long long vm_kib = 0;
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmSize: %llu kB", &vm_kib) == 1)
            break;
    if (f)
        fclose(f);
    rlim_t lim = (rlim_t)vm_kib * 1024 + (rlim_t)(mb * 1048576.0);
    struct rlimit rl = {lim, lim};
    if (setrlimit(RLIMIT_AS, &rl) != 0) {
        *err = tb_xasprintf("memory_limit: setrlimit: %s", strerror(errno));
        return -1;
    }
    return 0;
}

int tb_worker_child_setup(double memory_limit_mb, char **err)
{
    int rc = apply_memory_limit(memory_limit_mb, err);
    /* Plugins must not write to stdout (the runner's results): point it
     * at stderr. Ctrl-C and SIGTERM ask the plugin to stop. */
    dup2(2, 1);
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    return rc;
}

void tb_worker_child_exit(void)
{
    tb_proc_child_exit();
}

/* ------------------------------------------------------ the parent's side */

/* A worker's stderr lines longer than this are relayed in pieces. */
#define LOG_LINE_MAX 4096

static void log_emit(tb_worker_proc *w, const char *s, size_t n)
{
    char *line = tb_xstrndup(s, n);
    w->on_log(w->log_ctx, line);
    free(line);
}

/* Relay what can be read now, in at most max_reads reads: 1 when all of
 * it was (the pipe is empty), 0 when there may be more, -1 when the pipe
 * is closed (then the last piece is relayed too). */
static int relay(tb_worker_proc *w, int max_reads)
{
    if (!w->has_log)
        return -1;
    for (int reads = 0; reads < max_reads; reads++) {
        if (w->log_cap - w->log_len < 4096) {
            w->log_cap = w->log_cap ? w->log_cap * 2 : 8192;
            w->log_buf = tb_xrealloc(w->log_buf, w->log_cap);
        }
        ssize_t got = read(w->log_fd, w->log_buf + w->log_len, w->log_cap - w->log_len);
        if (got < 0 && errno == EINTR)
            continue;
        if (got > 0) {
            w->log_len += (size_t)got;
            size_t start = 0;
            for (size_t i = 0; i < w->log_len; i++)
                if (w->log_buf[i] == '\n' || i - start >= LOG_LINE_MAX) {
                    log_emit(w, w->log_buf + start, i - start);
                    start = i + (w->log_buf[i] == '\n');
                }
            memmove(w->log_buf, w->log_buf + start, w->log_len - start);
            w->log_len -= start;
            continue;
        }
        if (got < 0 && errno == EAGAIN)
            return 1;
        /* the end (or an error): the last piece, then no more */
        if (w->log_len)
            log_emit(w, w->log_buf, w->log_len);
        w->log_len = 0;
        close(w->log_fd);
        w->has_log = 0;
        free(w->log_buf);
        w->log_buf = NULL;
        w->log_cap = 0;
        return -1;
    }
    return 0;
}

int tb_worker_relay_log(tb_worker_proc *w)
{
    /* a worker that never stops writing must not keep its frames
     * waiting: a bounded number of reads a call, the rest at the next */
    return relay(w, 64) < 0 ? -1 : 0;
}

char *tb_worker_reap(tb_worker_proc *w, int killed_by_us)
{
    int status = 0;
    struct rusage ru = {0};
    /* What it wrote last (a sanitizer's report, a plugin's last words):
     * relayed before the reason of its end. A child of the worker that
     * still holds the pipe keeps no reader waiting: what is there now. */
    for (int rounds = 0; rounds < 1024 && w->has_log && relay(w, 64) == 0; rounds++)
        ;
    if (w->has_log && w->log_len) /* a child of the worker holds the pipe open */
        log_emit(w, w->log_buf, w->log_len);
    int r = tb_proc_wait(w, &status, &ru); /* closes the log pipe too */
    if (killed_by_us)
        return NULL;
    if (r < 0)
        return tb_xasprintf("backend process lost: %s", strerror(errno));
    /* The peak resident size tells a leak (or a memory_limit reached)
     * from a plain bug. */
    long peak_mib = ru.ru_maxrss / 1024;
    char *how = tb_proc_ending(status);
    char *why = WIFSIGNALED(status)
                    ? tb_xasprintf("backend process crashed: %s; peak RSS %ld MiB", how, peak_mib)
                    : tb_xasprintf("backend process crashed: %s before finishing the case; peak RSS %ld MiB", how,
                                   peak_mib);
    free(how);
    return why;
}

void tb_worker_kill(tb_worker_proc *w)
{
    tb_proc_kill(w);
}
