/* worker_serve.h — the worker in live mode, for `tokbench serve`
 * (worker_serve.c): the handlers of the serving messages (wire.h) and
 * the live emission the host table hands on while one runs. */
#ifndef TB_WORKER_SERVE_H
#define TB_WORKER_SERVE_H

#include <stddef.h>
#include <stdint.h>

#include "worker_state.h"

/* An emission in live mode (w->live set): sent at once, with the text it
 * adds when the backend gives text or ids it can detokenize. */
void tb_worker_live_emit(tb_worker *w, uint32_t request, uint32_t n_tokens, int64_t t_ns, const int32_t *ids,
                         const char *text, size_t text_len);

/* Answers one TB_MSG_GENERATE message buf[len] (len >= sizeof(tb_wire_gen):
 * the message table checked it) with TB_MSG_EMIT messages and then one
 * TB_MSG_GENERATED. */
void tb_worker_serve_generate(tb_worker *w, const char *buf, size_t len);

/* Stepped sessions (continuous batching): TB_MSG_STEP_OPEN
 * (sizeof(tb_wire_step_open) bytes) answered by STEP_OPENED; TB_MSG_STEP
 * (len >= sizeof(tb_wire_step)) by EMIT frames and STEPPED; close ends
 * the session (also before the context goes). */
void tb_worker_serve_step_open(tb_worker *w, const char *buf, size_t len);
void tb_worker_serve_step(tb_worker *w, const char *buf, size_t len);
void tb_worker_serve_step_close(tb_worker *w);

#endif
