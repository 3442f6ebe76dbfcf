/* worker_host.h — the tb_host table a plugin calls inside the worker
 * (include/tokbench/backend.h; worker_host.c). */
#ifndef TB_WORKER_HOST_H
#define TB_WORKER_HOST_H

#include "worker_state.h"

/* Fills w->host: the table the plugin's create() receives. */
void tb_worker_host_init(tb_worker *w);

#endif
