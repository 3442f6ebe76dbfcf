/* proc.h — a child process of tokbench's own, for plugin code: forked
 * without exec (it inherits what the parent has in memory, the plan
 * included), with a pipe each way, dying with its parent. Backends'
 * workers (worker.h) and plugin loaders (plugin.h: the entry function,
 * validate(), probe() for `tokbench plugins`) are such processes; the
 * parent never runs plugin code itself. The parent has no threads when
 * it forks, except `serve`, which restarts a worker that died. */
#ifndef TB_PROC_H
#define TB_PROC_H

#include <stdint.h>
#include <sys/types.h>

struct rusage;

/* A child process as its parent sees it. */
typedef struct tb_proc {
    pid_t pid; /* 0: none running; also its process group's id */
    int to_fd, from_fd;
    /* A pidfd of the child, while has_exit (else -1 after a spawn):
     * readable once it ended, even while a descendant of it still holds
     * its pipes open (the wire reader watches it:
     * tb_wire_reader_watch_exit). */
    int exit_fd;
    int has_exit;
    /* Set before spawning to relay the child's stderr (and stdout, which
     * a worker points there) line by line through on_log instead of
     * letting it reach the terminal directly (worker_proc.c reads it);
     * NULL: the child inherits stderr. */
    void (*on_log)(void *ctx, const char *line);
    void *log_ctx;
    int log_fd;           /* the pipe's read end, while has_log */
    int has_log;
    char *log_buf;        /* a line not yet ended */
    size_t log_len, log_cap;
} tb_proc;

/* The child's function: reads fd_in, writes fd_out; must not return
 * (tb_proc_child_exit). */
typedef void (*tb_proc_fn)(void *arg, int fd_in, int fd_out);

/* Fork a child that runs child(arg, fd_in, fd_out), after: a process
 * group of its own (everything it forks is in it, and ends with it:
 * tb_proc_wait), death with the parent (PR_SET_PDEATHSIG, even a
 * SIGKILLed one), and every descriptor closed but stdin/stdout/stderr and
 * its two pipe ends (a server's sockets close when the server closes
 * them, not when a child dies). 0, or -1 with errno. */
int tb_proc_spawn(tb_proc *p, tb_proc_fn child, void *arg);

/* Wait for a child that ended (or was killed), SIGKILL what is left of
 * its process group (a plugin's forked children and theirs: nothing it
 * started outlives it, unless it left the group with setsid or setpgid),
 * then reap it and close its pipes (the stderr relay's too, what it
 * holds unread dropped: read it first). 0 with *status and *ru (wait4's),
 * or -1 with errno. */
int tb_proc_wait(tb_proc *p, int *status, struct rusage *ru);

/* A wait4 status in words: "killed by signal 11 (SIGSEGV, Segmentation
 * fault)" (SIGKILL: "; possibly out of memory (...)", SIGBUS: "; a
 * memory-mapped file ... was truncated ..."), or "exited with status 0".
 * malloc'd. */
char *tb_proc_ending(int status);

/* A child that closed its pipe is ending, or hangs without it (a plugin
 * that closed every descriptor): wait, without reaping, until it ends,
 * `deadline_ns` (tb_now_ns) passes, or *interrupted turns nonzero
 * (interrupted may be NULL). 1 when it ended (tb_proc_wait then returns
 * at once), 0 when the deadline passed, -1 when interrupted. */
int tb_proc_await_exit(const tb_proc *p, int64_t deadline_ns, volatile int *interrupted);

/* SIGKILL its process group, reap, close its pipes; nothing when none
 * is running. */
void tb_proc_kill(tb_proc *p);

/* In the child, its end: the leak check of sanitizer builds, then
 * _exit(0) (the parent's atexit handlers and stdio buffers are not the
 * child's). */
void tb_proc_child_exit(void) __attribute__((noreturn));

#endif
