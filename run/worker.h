/* worker.h — the backend process: probe, create, run cases on request
 * (`tokbench run`) or generate batches on request with live emissions
 * (`tokbench serve`). See runner.h and serve.h for the other side and
 * wire.h for the messages. */
#ifndef TB_WORKER_H
#define TB_WORKER_H

#include <stddef.h>
#include <sys/types.h>

#include "plan.h"
#include "proc.h"

/* A worker process as its parent sees it. */
typedef tb_proc tb_worker_proc;

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
