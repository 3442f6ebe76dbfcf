/* worker.h — the backend process: probe, create, run cases on request
 * (`tokbench run`) or generate batches on request with live emissions
 * (`tokbench serve`). See runner.h and serve.h for the other side and
 * wire.h for the messages. */
#ifndef TB_WORKER_H
#define TB_WORKER_H

#include <stddef.h>
#include <sys/types.h>

#include "plan.h"

/* A worker process as its parent sees it. */
typedef struct tb_worker_proc {
    pid_t pid; /* 0: none running */
    int to_fd, from_fd;
    /* Set before spawning to relay the worker's stderr (and stdout, which
     * points there) line by line through on_log instead of letting it
     * reach the terminal directly; NULL: the worker inherits stderr. */
    void (*on_log)(void *ctx, const char *line);
    void *log_ctx;
    int log_fd;           /* the pipe's read end, while has_log */
    int has_log;
    char *log_buf;        /* a line not yet ended */
    size_t log_len, log_cap;
} tb_worker_proc;

/* Fork a worker for plan->backends[backend]; 0, or -1 with errno. */
int tb_worker_spawn(const tb_plan *plan, size_t backend, tb_worker_proc *w);

/* Relay what the worker wrote to its stderr so far: each whole line
 * through on_log (a line longer than 4 KiB in pieces). 0, or -1 when the
 * pipe is closed (the worker, and any child of it, ended). */
int tb_worker_relay_log(tb_worker_proc *w);

/* Wait for a worker that closed its pipe (or was killed) and close its
 * pipes, relaying the last of its stderr. Returns why it ended
 * (malloc'd), or NULL when killed_by_us. */
char *tb_worker_reap(tb_worker_proc *w, int killed_by_us);

/* SIGKILL and reap; nothing when none is running. */
void tb_worker_kill(tb_worker_proc *w);

/* Run in the forked child: probe the plugin of plan->backends[backend],
 * then serve TB_MSG_CASE requests read from fd_in, answering on fd_out,
 * until TB_MSG_QUIT or EOF. Never returns. */
void tb_worker_main(const tb_plan *plan, size_t backend, int fd_in, int fd_out)
    __attribute__((noreturn));

/* "ok", "out of memory", ... for a tb_status value. */
const char *tb_status_name(int status);

#endif
