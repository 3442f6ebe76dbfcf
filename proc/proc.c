/* proc.c — see proc.h. */
#define _GNU_SOURCE
#include "proc.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* LeakSanitizer's check runs at exit(); children end with _exit. */
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

int tb_proc_spawn(tb_proc *p, tb_proc_fn child, void *arg)
{
    int to[2], from[2], err[2] = {-1, -1};
    if (pipe2(to, O_CLOEXEC) != 0)
        return -1;
    if (pipe2(from, O_CLOEXEC) != 0) {
        close(to[0]);
        close(to[1]);
        return -1;
    }
    if (p->on_log && pipe2(err, O_CLOEXEC) != 0) {
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
        /* A process group of its own, so that whatever a plugin forks can
         * be ended with it (kill(-pid)); the parent sets it too, so that
         * it holds before either side goes on. Not a terminal's foreground
         * group: Ctrl-C reaches the parent, which stops its children. */
        setpgid(0, 0);
        /* Die with the parent, even a SIGKILLed one: an orphan would keep
         * running (and holding a GPU) with no deadline over it. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(1); /* it died before prctl */
        /* stderr into the parent's relay (dup2 clears O_CLOEXEC; the
         * original goes with the descriptors closed below) */
        if (err[1] >= 0)
            dup2(err[1], 2);
        /* Keep stdio and the two pipe ends only. */
        unsigned lo = (unsigned)(to[0] < from[1] ? to[0] : from[1]);
        unsigned hi = (unsigned)(to[0] < from[1] ? from[1] : to[0]);
        if (lo > 3)
            close_range(3, lo - 1, 0);
        if (hi > lo + 1)
            close_range(lo + 1, hi - 1, 0);
        close_range(hi + 1, ~0u, 0);
        child(arg, to[0], from[1]);
        tb_proc_child_exit();
    }
    setpgid(pid, pid); /* fails harmlessly when the child did it first */
    close(to[0]);
    close(from[1]);
    p->pid = pid;
    /* its end as a descriptor (Linux 5.3): a descendant holding the pipes
     * open must not hide it; without one, the pipe's end still says it */
    p->exit_fd = (int)syscall(SYS_pidfd_open, pid, 0);
    p->has_exit = p->exit_fd >= 0;
    p->to_fd = to[1];
    p->from_fd = from[0];
    if (err[0] >= 0) {
        close(err[1]);
        /* read when there is something (the parent also waits on the
         * frames); room for a burst while the parent stores a case */
        fcntl(err[0], F_SETFL, O_NONBLOCK);
        fcntl(err[0], F_SETPIPE_SZ, 1 << 20);
        p->log_fd = err[0];
        p->has_log = 1;
        p->log_len = 0;
    }
    return 0;
}

int tb_proc_wait(tb_proc *p, int *status, struct rusage *ru)
{
    /* The group's leader ended (or ends now): end the rest of the group
     * before reaping it, while its pid, the group's id, cannot be reused. */
    siginfo_t si;
    while (waitid(P_PID, (id_t)p->pid, &si, WEXITED | WNOWAIT) != 0 && errno == EINTR)
        ;
    kill(-p->pid, SIGKILL);
    pid_t r;
    do
        r = wait4(p->pid, status, 0, ru);
    while (r < 0 && errno == EINTR);
    int e = errno;
    close(p->to_fd);
    close(p->from_fd);
    if (p->has_exit) /* a tb_proc not made by tb_proc_spawn has none */
        close(p->exit_fd);
    p->has_exit = 0;
    p->exit_fd = -1;
    if (p->has_log) {
        close(p->log_fd);
        p->has_log = 0;
    }
    free(p->log_buf);
    p->log_buf = NULL;
    p->log_len = p->log_cap = 0;
    p->pid = 0;
    errno = e;
    return r < 0 ? -1 : 0;
}

char *tb_proc_ending(int status)
{
    if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        const char *abbrev = sigabbrev_np(sig);
        return tb_xasprintf("killed by signal %d (%s%s%s%s)%s", sig, abbrev ? "SIG" : "", abbrev ? abbrev : "",
                            abbrev ? ", " : "", strsignal(sig),
                            sig == SIGKILL ? "; possibly out of memory (the kernel's OOM killer sends SIGKILL)"
                            : sig == SIGBUS ? "; a memory-mapped file (a model?) was truncated, or its storage failed"
                                            : "");
    }
    return tb_xasprintf("exited with status %d", WEXITSTATUS(status));
}

int tb_proc_await_exit(const tb_proc *p, int64_t deadline_ns, volatile int *interrupted)
{
    for (;;) {
        siginfo_t si = {0};
        /* WNOWAIT: look without reaping, so tb_proc_wait can tell how. */
        if (waitid(P_PID, (id_t)p->pid, &si, WEXITED | WNOHANG | WNOWAIT) != 0 || si.si_pid != 0)
            return 1;
        if (interrupted && *interrupted)
            return -1;
        if (tb_now_ns() >= deadline_ns)
            return 0;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

void tb_proc_kill(tb_proc *p)
{
    if (!p->pid)
        return;
    kill(-p->pid, SIGKILL); /* the group: the child and what it started */
    kill(p->pid, SIGKILL);  /* the child, had it left its group */
    int status;
    struct rusage ru;
    tb_proc_wait(p, &status, &ru);
}

void tb_proc_child_exit(void)
{
#ifdef TB_LSAN
    __lsan_do_leak_check(); /* _exit skips LSan's atexit check */
#endif
    _exit(0);
}
