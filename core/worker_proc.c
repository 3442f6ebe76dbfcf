/* worker_proc.c — the worker as a process: the parent's side (fork with
 * two pipes, reap, kill; worker.h) and the child's own setup and exit
 * around tb_worker_main's loop (worker_internal.h). */
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

/* LeakSanitizer's check runs at exit(); workers end with _exit. */
#if defined(__SANITIZE_ADDRESS__)
#define TB_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TB_LSAN 1
#endif
#endif
#ifdef TB_LSAN
#include <sanitizer/lsan_interface.h>
#endif

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
#ifdef TB_LSAN
    __lsan_do_leak_check(); /* _exit skips LSan's atexit check */
#endif
    /* _exit: the runner's atexit handlers and stdio buffers are not ours. */
    _exit(0);
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

int tb_worker_spawn(const tb_plan *plan, size_t backend, tb_worker_proc *w)
{
    int to[2], from[2], err[2] = {-1, -1};
    if (pipe2(to, O_CLOEXEC) != 0)
        return -1;
    if (pipe2(from, O_CLOEXEC) != 0) {
        close(to[0]);
        close(to[1]);
        return -1;
    }
    if (w->on_log && pipe2(err, O_CLOEXEC) != 0) {
        int e = errno;
        close(to[0]), close(to[1]), close(from[0]), close(from[1]);
        errno = e;
        return -1;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(to[0]), close(to[1]), close(from[0]), close(from[1]);
        if (err[0] >= 0)
            close(err[0]), close(err[1]);
        errno = e;
        return -1;
    }
    if (pid == 0) {
        /* Die with the runner, even a SIGKILLed one: an orphan would keep
         * running (and holding a GPU) with no deadline over it. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(1); /* it died before prctl */
        /* stderr into the runner's relay (dup2 clears O_CLOEXEC; the
         * original goes with the descriptors closed below) */
        if (err[1] >= 0)
            dup2(err[1], 2);
        /* Keep stdio and the two pipe ends only: a server's sockets must
         * close when the server closes them, not when the worker dies. */
        unsigned lo = (unsigned)(to[0] < from[1] ? to[0] : from[1]);
        unsigned hi = (unsigned)(to[0] < from[1] ? from[1] : to[0]);
        if (lo > 3)
            close_range(3, lo - 1, 0);
        if (hi > lo + 1)
            close_range(lo + 1, hi - 1, 0);
        close_range(hi + 1, ~0u, 0);
        tb_worker_main(plan, backend, to[0], from[1]);
    }
    close(to[0]);
    close(from[1]);
    w->pid = pid;
    w->to_fd = to[1];
    w->from_fd = from[0];
    if (err[0] >= 0) {
        close(err[1]);
        /* read when there is something (the runner also waits on the
         * frames); room for a burst while the runner stores a case */
        fcntl(err[0], F_SETFL, O_NONBLOCK);
        fcntl(err[0], F_SETPIPE_SZ, 1 << 20);
        w->log_fd = err[0];
        w->has_log = 1;
        w->log_len = 0;
    }
    return 0;
}

char *tb_worker_reap(tb_worker_proc *w, int killed_by_us)
{
    int status = 0;
    struct rusage ru = {0};
    pid_t r;
    do
        r = wait4(w->pid, &status, 0, &ru);
    while (r < 0 && errno == EINTR);
    close(w->to_fd);
    close(w->from_fd);
    w->pid = 0;
    /* What it wrote last (a sanitizer's report, a plugin's last words):
     * relayed before the reason of its end. A child of the worker that
     * still holds the pipe keeps no reader waiting: what is there now. */
    int left = 0;
    for (int rounds = 0; rounds < 1024 && w->has_log && (left = relay(w, 64)) == 0; rounds++)
        ;
    if (w->has_log) { /* a child of the worker holds the pipe open */
        if (w->log_len)
            log_emit(w, w->log_buf, w->log_len);
        close(w->log_fd);
        w->has_log = 0;
        free(w->log_buf);
        w->log_buf = NULL;
        w->log_len = w->log_cap = 0;
    }
    if (killed_by_us)
        return NULL;
    if (r < 0)
        return tb_xasprintf("backend process lost: %s", strerror(errno));
    /* The peak resident size tells a leak (or a memory_limit reached)
     * from a plain bug. */
    long peak_mib = ru.ru_maxrss / 1024;
    if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        const char *abbrev = sigabbrev_np(sig);
        return tb_xasprintf("backend process crashed: killed by signal %d (%s%s%s%s)%s; peak RSS %ld MiB", sig,
                            abbrev ? "SIG" : "", abbrev ? abbrev : "", abbrev ? ", " : "", strsignal(sig),
                            sig == SIGKILL ? "; possibly out of memory (the kernel's OOM killer sends SIGKILL)"
                            : sig == SIGBUS ? "; a memory-mapped file (a model?) was truncated, or its storage failed"
                                            : "",
                            peak_mib);
    }
    return tb_xasprintf("backend process crashed: exited with status %d before finishing the case; peak RSS %ld MiB",
                        WEXITSTATUS(status), peak_mib);
}

void tb_worker_kill(tb_worker_proc *w)
{
    if (!w->pid)
        return;
    kill(w->pid, SIGKILL);
    free(tb_worker_reap(w, 1));
}
