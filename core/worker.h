/* worker.h — the backend process: probe, create, run cases on request.
 * See runner.h for the other side and wire.h for the messages. */
#ifndef TB_WORKER_H
#define TB_WORKER_H

#include <stddef.h>

#include "plan.h"

/* Run in the forked child: probe the plugin of plan->backends[backend],
 * then serve TB_MSG_CASE requests read from fd_in, answering on fd_out,
 * until TB_MSG_QUIT or EOF. Never returns. */
void tb_worker_main(const tb_plan *plan, size_t backend, int fd_in, int fd_out)
    __attribute__((noreturn));

/* "ok", "out of memory", ... for a tb_status value. */
const char *tb_status_name(int status);

#endif
