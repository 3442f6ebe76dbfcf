/* worker.h — the backend process: probe, create, run cases on request
 * (`tokbench run`) or generate batches on request with live emissions
 * (`tokbench serve`). See worker_client.h for the other side, wire.h for
 * the messages and worker_proc.h for the process as its parent handles
 * it. */
#ifndef TB_WORKER_H
#define TB_WORKER_H

#include <stddef.h>

#include "plan.h"
#include "worker_proc.h"

/* Fork a worker for plan->backends[backend]; 0, or -1 with errno. */
int tb_worker_spawn(const tb_plan *plan, size_t backend, tb_worker_proc *w);

/* Run in the forked child: probe the plugin of plan->backends[backend],
 * then answer the requests read from fd_in (wire.h: CASE, CASE_LOAD,
 * LOAD, JUDGE, GENERATE, STEP_OPEN, STEP) on fd_out, until TB_MSG_QUIT,
 * EOF or a frame it cannot read. Never returns. */
void tb_worker_main(const tb_plan *plan, size_t backend, int fd_in, int fd_out) __attribute__((noreturn));

#endif
