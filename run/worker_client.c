/* worker_client.c — see worker_client.h. */
#define _GNU_SOURCE
#include "worker_client.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"
#include "worker.h"

void tb_wc_init(tb_worker_client *wc, const tb_plan *plan, size_t backend, volatile int *interrupted)
{
    *wc = (tb_worker_client){
        .plan = plan,
        .backend = backend,
        .interrupted = interrupted,
        .load_timeout_ns = (int64_t)(plan->suite->load_timeout_s * 1e9),
        .case_timeout_ns = (int64_t)(plan->suite->case_timeout_s * 1e9),
    };
    tb_wire_reader_init(&wc->rd, -1);
}

void tb_wc_set_log(tb_worker_client *wc, void (*on_log)(void *ctx, const char *line), void *ctx)
{
    wc->proc.on_log = on_log;
    wc->proc.log_ctx = ctx;
}

/* The reader's side channel: the worker's stderr. */
static int relay_log(void *ctx)
{
    tb_worker_client *wc = ctx;
    return tb_worker_relay_log(&wc->proc);
}

void tb_wc_free(tb_worker_client *wc)
{
    tb_wc_stop(wc);
    tb_wire_reader_free(&wc->rd);
}

int tb_wc_running(const tb_worker_client *wc)
{
    return wc->proc.pid != 0;
}

void tb_wc_kill(tb_worker_client *wc)
{
    tb_worker_kill(&wc->proc);
}

/* The worker closed its pipe (or cannot be written to): it is ending.
 * Reap it, but not forever: a plugin that closed its descriptors and
 * hangs would block a plain wait. It gets the grace period, cut short by
 * the deadline of what it was doing (`limit`, `limit_s`: its name and
 * length; NULL: none) and by a stop asked for (Ctrl-C, SIGTERM); then it
 * is killed. Returns why it ended. */
static char *reap_ended(tb_worker_client *wc, int64_t deadline, const char *limit, double limit_s)
{
    int64_t grace_end = tb_now_ns() + TB_WORKER_GRACE_NS;
    int by_limit = limit && deadline < grace_end;
    int ended = tb_proc_await_exit(&wc->proc, by_limit ? deadline : grace_end, wc->interrupted);
    if (ended > 0)
        return tb_worker_reap(&wc->proc, 0);
    tb_worker_kill(&wc->proc);
    if (ended < 0)
        return tb_xstrdup("backend process closed its pipe but did not exit; killed (interrupted)");
    if (by_limit)
        return tb_xasprintf("backend process closed its pipe but did not exit within %s (%.0f s); killed", limit,
                            limit_s);
    return tb_xasprintf("backend process closed its pipe but did not exit within %.0f s; killed",
                        (double)TB_WORKER_GRACE_NS * 1e-9);
}

/* The read ended without a frame: turn it into a result, leaving the
 * worker running only when interrupted. `deadline` is the read's, of
 * `limit` (its name: "load_timeout", "case_timeout"), `timeout_what`
 * what overran it. */
static tb_wc_result read_failed(tb_worker_client *wc, tb_wire_rc rc, const char *timeout_what, const char *limit,
                                double timeout_s, int64_t deadline, char **why)
{
    switch (rc) {
    case TB_WIRE_INTERRUPTED:
        *why = tb_xstrdup("interrupted (Ctrl-C or SIGTERM) while running");
        return TB_WC_INTERRUPTED;
    case TB_WIRE_TIMEOUT:
        tb_worker_kill(&wc->proc);
        *why = tb_xasprintf("timed out: %s (%.0f s); backend process killed", timeout_what, timeout_s);
        return TB_WC_TIMEOUT;
    case TB_WIRE_ERROR:
        if (errno == EMSGSIZE) {
            tb_worker_kill(&wc->proc);
            *why = tb_xasprintf("protocol error: a message from the backend process is over %zu bytes; killed",
                                TB_WIRE_MAX_FRAME);
            return TB_WC_PROTOCOL;
        }
        break; /* the pipe is unusable: as at its end */
    default:
        break;
    }
    *why = reap_ended(wc, deadline, limit, timeout_s);
    return TB_WC_DIED;
}

static tb_wc_result protocol_error(tb_worker_client *wc, const char *expected, uint32_t got, char **why)
{
    tb_worker_kill(&wc->proc);
    *why = tb_xasprintf("protocol error: expected %s, got message %u from the backend process", expected, got);
    return TB_WC_PROTOCOL;
}

/* A tb_wire_status at the start of a frame, its message terminated. */
static int take_status(const tb_wire_frame *f, tb_wire_status *st)
{
    if (f->len < sizeof *st)
        return -1;
    memcpy(st, f->payload, sizeof *st);
    st->message[sizeof st->message - 1] = '\0';
    return 0;
}

tb_wc_result tb_wc_start(tb_worker_client *wc, char **why)
{
    if (wc->proc.pid)
        return TB_WC_OK;
    if (tb_worker_spawn(wc->plan, wc->backend, &wc->proc) != 0) {
        *why = tb_xasprintf("cannot start a backend process: %s", strerror(errno));
        return TB_WC_DIED;
    }
    tb_wire_reader_free(&wc->rd); /* nothing left over from a dead worker */
    tb_wire_reader_init(&wc->rd, wc->proc.from_fd);
    tb_wire_reader_watch_exit(&wc->rd, wc->proc.exit_fd); /* its crash, not a timeout */
    if (wc->proc.has_log)
        tb_wire_reader_watch(&wc->rd, wc->proc.log_fd, relay_log, wc);
    tb_wire_frame f;
    int64_t deadline = tb_now_ns() + wc->load_timeout_ns;
    tb_wire_rc rc = tb_wire_read(&wc->rd, deadline, wc->interrupted, &f);
    if (rc != TB_WIRE_FRAME) {
        tb_wc_result r = read_failed(wc, rc, "probe() did not answer within load_timeout", "load_timeout",
                                     wc->plan->suite->load_timeout_s, deadline, why);
        if (r == TB_WC_INTERRUPTED)
            tb_worker_kill(&wc->proc); /* nothing of a case to save */
        return r;
    }
    tb_wire_status st;
    if (f.type != TB_MSG_PROBE || take_status(&f, &st) != 0)
        return protocol_error(wc, "the probe answer", f.type, why);
    if (st.status != TB_OK) {
        tb_worker_kill(&wc->proc);
        *why = tb_xstrdup(st.message);
        return TB_WC_REFUSED;
    }
    return TB_WC_OK;
}

tb_wc_result tb_wc_send(tb_worker_client *wc, uint32_t type, const void *payload, size_t len, char **why)
{
    if (!wc->proc.pid) {
        *why = tb_xstrdup("no backend process");
        return TB_WC_DIED;
    }
    if (tb_wire_send(wc->proc.to_fd, type, payload, len) != 0) {
        /* Its end of the pipe is closed: it is ending (say how), or it
         * hangs without it (killed after the grace period). */
        *why = reap_ended(wc, 0, NULL, 0);
        return TB_WC_DIED;
    }
    return TB_WC_OK;
}

tb_wc_result tb_wc_await_loaded(tb_worker_client *wc, int *reused, char **info, char **why)
{
    if (info)
        *info = NULL;
    tb_wire_frame f;
    int64_t deadline = tb_now_ns() + wc->load_timeout_ns;
    tb_wire_rc rc = tb_wire_read(&wc->rd, deadline, wc->interrupted, &f);
    if (rc != TB_WIRE_FRAME)
        return read_failed(wc, rc, "create() did not finish within load_timeout", "load_timeout",
                           wc->plan->suite->load_timeout_s, deadline, why);
    tb_wire_status st;
    if (f.type == TB_MSG_CASE_ERROR && take_status(&f, &st) == 0) {
        *why = tb_xstrdup(st.message);
        return TB_WC_REFUSED;
    }
    if (f.type != TB_MSG_LOADED || take_status(&f, &st) != 0)
        return protocol_error(wc, "the load answer", f.type, why);
    if (st.status != TB_OK) {
        *why = tb_xstrdup(st.message);
        return TB_WC_REFUSED;
    }
    *reused = st.reused != 0;
    if (info && !st.reused && f.len > sizeof st)
        *info = tb_xstrndup(f.payload + sizeof st, f.len - sizeof st);
    return TB_WC_OK;
}

tb_wc_result tb_wc_await(tb_worker_client *wc, int64_t since_ns, const uint32_t *expected, size_t n_expected,
                         tb_wire_frame *frame, char **why)
{
    int64_t deadline = since_ns + wc->case_timeout_ns;
    tb_wire_rc rc = tb_wire_read(&wc->rd, deadline, wc->interrupted, frame);
    if (rc != TB_WIRE_FRAME)
        return read_failed(wc, rc, "the case did not finish within case_timeout", "case_timeout",
                           wc->plan->suite->case_timeout_s, deadline, why);
    for (size_t i = 0; i < n_expected; i++)
        if (frame->type == expected[i])
            return TB_WC_OK;
    tb_wire_status st;
    if (frame->type == TB_MSG_CASE_ERROR && take_status(frame, &st) == 0) {
        *why = tb_xstrdup(st.message);
        return TB_WC_REFUSED;
    }
    return protocol_error(wc, "the case's answer", frame->type, why);
}

tb_wc_result tb_wc_cancel(tb_worker_client *wc, uint32_t type, tb_wire_frame *frame)
{
    if (!wc->proc.pid)
        return TB_WC_INTERRUPTED;
    kill(wc->proc.pid, SIGTERM);
    int64_t deadline = tb_now_ns() + TB_WORKER_GRACE_NS;
    for (;;) {
        tb_wire_rc rc = tb_wire_read(&wc->rd, deadline, NULL, frame);
        if (rc != TB_WIRE_FRAME)
            break;
        if (frame->type == type)
            return TB_WC_OK; /* it finished after all */
        if (frame->type == TB_MSG_CASE_ERROR)
            break; /* it stopped without the answer */
        /* live emissions of a batch may come first: skip them */
    }
    tb_worker_kill(&wc->proc);
    return TB_WC_INTERRUPTED;
}

void tb_wc_stop(tb_worker_client *wc)
{
    if (!wc->proc.pid)
        return;
    if (tb_wire_send(wc->proc.to_fd, TB_MSG_QUIT, NULL, 0) == 0) {
        /* A plugin's destroy() may take a while; do not wait forever. */
        int64_t deadline = tb_now_ns() + TB_WORKER_GRACE_NS;
        tb_wire_frame f;
        while (tb_wire_read(&wc->rd, deadline, NULL, &f) == TB_WIRE_FRAME)
            ; /* frames left over; the pipe closes when it exits */
    }
    tb_worker_kill(&wc->proc);
}
