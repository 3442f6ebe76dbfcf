/* worker_proc.h — a backend's worker as a process (proc.h), the floor of
 * the worker's files: the parent's side (relaying its stderr, reaping it
 * into a reason, killing it) and the child's setup and exit around
 * tb_worker_main's loop (worker.h). Knows nothing of what the worker
 * runs. */
#ifndef TB_WORKER_PROC_H
#define TB_WORKER_PROC_H

#include "proc.h"

/* A worker process as its parent sees it. */
typedef tb_proc tb_worker_proc;

/* ------------------------------------------------------ the parent's side */

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

/* ------------------------------------------------------ the child's side */

/* The forked child's process, before anything else: the address-space
 * limit (memory_limit_mb > 0, in MiB), stdout onto stderr, SIGINT and
 * SIGTERM as a cancel request, SIGPIPE ignored. 0, or -1 with *err when
 * the limit could not be set (all the rest is done anyway). */
int tb_worker_child_setup(double memory_limit_mb, char **err);
/* Nonzero once SIGINT or SIGTERM arrived. */
int tb_worker_cancel_requested(void);
/* The child's end: the leak check of sanitizer builds, then _exit(0). */
void tb_worker_child_exit(void) __attribute__((noreturn));

#endif
