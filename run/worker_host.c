/* worker_host.c — the tb_host table a plugin calls inside the worker
 * (include/tokbench/backend.h): the clock, the log, cancelled(), and
 * emissions, which go into the emission buffer of the case in flight
 * (worker.c sizes it per case) or, when serving, out at once
 * (worker_serve.c). It stands above live serving, whose emissions it
 * hands on, and below the loop (worker.c) that fills it in. */
#define _GNU_SOURCE
#include "worker_host.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "utf8.h"
#include "worker_proc.h"
#include "worker_serve.h"

static int64_t host_now(const tb_host *h)
{
    (void)h;
    return tb_now_ns();
}

static void host_log(const tb_host *h, tb_log_level level, const char *fmt, ...)
{
    static const char *const names[] = {"error", "warn", "info", "debug"};
    tb_worker *w = h->host_data;
    if (level > TB_LOG_INFO && !getenv("TOKBENCH_DEBUG"))
        return;
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    tb_redact_buf(line, sizeof line, (const char *const *)w->secrets, w->n_secrets);
    char valid[sizeof line]; /* plugin text: valid UTF-8 (worker.c, send_status) */
    tb_utf8_copy_valid(valid, sizeof valid, line, sizeof line);
    fprintf(stderr, "[%s] %s: %s\n", w->pb->sb->label, names[level <= 3 ? level : 3], valid);
}

static void host_emit(const tb_host *h, uint32_t request, uint32_t n_tokens, int64_t t_ns)
{
    tb_worker *w = h->host_data;
    if (!n_tokens) /* no token became available: no emission (backend.h), for no timing */
        return;
    if (w->live) {
        tb_worker_live_emit(w, request, n_tokens, t_ns, NULL, NULL, 0);
        return;
    }
    tb_emit_buf *b = &w->em;
    if (request >= b->n_requests) {
        b->dropped++;
        return;
    }
    if (b->limit && b->n >= b->limit) { /* a flood: drop, count, ask to stop */
        b->flood++;
        b->flood_stop = 1;
        return;
    }
    if (b->n == b->cap) { /* rare: the buffer is sized for the case */
        size_t cap = b->cap ? b->cap * 2 : 1024;
        if (b->limit && cap > b->limit)
            cap = b->limit;
        tb_emission *ev = tb_realloc_array(b->ev, cap, sizeof *ev);
        if (!ev) { /* no abort: the call is failed (worker.c) */
            b->nomem = 1;
            b->flood_stop = 1;
            return;
        }
        b->ev = ev;
        b->cap = cap;
    }
    b->ev[b->n++] = (tb_emission){t_ns, request, n_tokens};
}

static void host_emit_output(const tb_host *h, uint32_t request, uint32_t n_tokens, int64_t t_ns,
                             const int32_t *ids, const char *text, size_t text_len)
{
    tb_worker *w = h->host_data;
    if (!n_tokens) /* as host_emit */
        return;
    if (w->live)
        tb_worker_live_emit(w, request, n_tokens, t_ns, ids, text, text_len);
    else
        host_emit(h, request, n_tokens, t_ns); /* measuring: the count only */
}

/* A request's whole failure message, kept for the call's results
 * (worker.c): bounded by tb_raw_request.error. */
static void host_request_error(const tb_host *h, uint32_t request, const char *text)
{
    tb_worker *w = h->host_data;
    tb_emit_buf *b = &w->em;
    if (w->live || !text || request >= b->n_requests)
        return;
    if (!b->errors && !(b->errors = calloc(b->n_requests, sizeof *b->errors)))
        return; /* no memory: the cut message stays */
    free(b->errors[request]);
    b->errors[request] = malloc(TB_RAW_ERROR_SIZE);
    if (b->errors[request]) /* valid UTF-8, cut whole (worker.c reads it) */
        tb_utf8_copy_valid(b->errors[request], TB_RAW_ERROR_SIZE, text, strnlen(text, TB_RAW_ERROR_SIZE * 3));
}

static int host_cancelled(const tb_host *h)
{
    const tb_worker *w = h->host_data;
    return tb_worker_cancel_requested() || w->em.flood_stop;
}

void tb_worker_host_init(tb_worker *w)
{
    w->host = (tb_host){
        .struct_size = sizeof(tb_host),
        .abi_major = TB_ABI_MAJOR,
        .now_ns = host_now,
        .log = host_log,
        .emit = host_emit,
        .cancelled = host_cancelled,
        .host_data = w,
        .emit_output = host_emit_output,
        .request_error = host_request_error,
    };
}
