/* worker_proc.c — the worker as a process (proc.h): the parent's side
 * (spawn, reap into a reason, kill; worker.h) and the child's own setup
 * and exit around tb_worker_main's loop (worker_internal.h). */
#define _GNU_SOURCE
#include "worker.h"

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
#include "worker_internal.h"

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

typedef struct spawn_arg {
    const tb_plan *plan;
    size_t backend;
} spawn_arg;

static void worker_child(void *arg, int fd_in, int fd_out)
{
    const spawn_arg *a = arg;
    tb_worker_main(a->plan, a->backend, fd_in, fd_out);
}

int tb_worker_spawn(const tb_plan *plan, size_t backend, tb_worker_proc *w)
{
    spawn_arg a = {plan, backend}; /* the child's copy of this frame lives on */
    return tb_proc_spawn(w, worker_child, &a);
}

char *tb_worker_reap(tb_worker_proc *w, int killed_by_us)
{
    int status = 0;
    struct rusage ru = {0};
    int r = tb_proc_wait(w, &status, &ru);
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
