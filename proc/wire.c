/* wire.c — see wire.h. */
#define _GNU_SOURCE
#include "wire.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tokbench/backend.h>

const char *tb_status_name(int status)
{
    switch ((tb_status)status) {
    case TB_OK: return "ok";
    case TB_ERR: return "error";
    case TB_ERR_INVALID: return "invalid";
    case TB_ERR_UNSUPPORTED: return "unsupported";
    case TB_ERR_NO_MEMORY: return "out of memory";
    case TB_ERR_IO: return "I/O error";
    case TB_ERR_MODEL: return "model error";
    case TB_ERR_CANCELLED: return "cancelled";
    case TB_ERR_TIMEOUT: return "timeout";
    }
    return "unknown status";
}

static int write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

int tb_wire_send(int fd, uint32_t type, const void *payload, size_t len)
{
    uint32_t hdr[2] = {type, (uint32_t)len};
    if (len > UINT32_MAX) {
        errno = EMSGSIZE;
        return -1;
    }
    if (write_all(fd, hdr, sizeof hdr) != 0)
        return -1;
    return len ? write_all(fd, payload, len) : 0;
}

void tb_wire_frame_append(tb_str *b, uint32_t type, const void *payload, size_t len)
{
    uint32_t hdr[2] = {type, (uint32_t)len};
    tb_str_appendn(b, (const char *)hdr, sizeof hdr);
    if (len)
        tb_str_appendn(b, payload, len);
}

int tb_wire_send_frames(int fd, const tb_str *frames)
{
    return frames->len ? write_all(fd, frames->s, frames->len) : 0;
}

void tb_wire_reader_init(tb_wire_reader *r, int fd)
{
    *r = (tb_wire_reader){.fd = fd, .side_fd = -1, .exit_fd = -1};
}

void tb_wire_reader_free(tb_wire_reader *r)
{
    free(r->buf);
    *r = (tb_wire_reader){.fd = -1, .side_fd = -1, .exit_fd = -1};
}

void tb_wire_reader_watch_exit(tb_wire_reader *r, int exit_fd)
{
    r->exit_fd = exit_fd;
}

void tb_wire_reader_watch(tb_wire_reader *r, int fd, int (*side)(void *ctx), void *ctx)
{
    r->side_fd = side ? fd : -1;
    r->side = side;
    r->side_ctx = ctx;
}

tb_wire_rc tb_wire_read(tb_wire_reader *r, int64_t deadline_ns, volatile int *interrupted, tb_wire_frame *f)
{
    for (;;) {
        size_t have = r->len - r->pos;
        uint32_t hdr[2] = {0, 0};
        if (have >= sizeof hdr) {
            memcpy(hdr, r->buf + r->pos, sizeof hdr);
            if (hdr[1] > TB_WIRE_MAX_FRAME) {
                errno = EMSGSIZE;
                return TB_WIRE_ERROR;
            }
            if (have >= sizeof hdr + hdr[1]) {
                f->type = hdr[0];
                f->payload = r->buf + r->pos + sizeof hdr;
                f->len = hdr[1];
                r->pos += sizeof hdr + hdr[1];
                return TB_WIRE_FRAME;
            }
        }
        /* Keep the partial frame at the start, and room for it and more. */
        if (r->pos) {
            memmove(r->buf, r->buf + r->pos, have);
            r->len = have;
            r->pos = 0;
        }
        size_t need = (have >= sizeof hdr ? sizeof hdr + hdr[1] : sizeof hdr) + 65536;
        if (need > r->cap) {
            r->cap = need + need / 2;
            r->buf = tb_xrealloc(r->buf, r->cap);
        }
        if (interrupted && *interrupted)
            return TB_WIRE_INTERRUPTED;
        int timeout_ms = -1;
        if (deadline_ns) {
            int64_t left = deadline_ns - tb_now_ns();
            if (left <= 0)
                return TB_WIRE_TIMEOUT;
            timeout_ms = left / 1000000 + 1 > INT32_MAX ? INT32_MAX : (int)(left / 1000000 + 1);
        }
        if (interrupted && (timeout_ms < 0 || timeout_ms > 200))
            timeout_ms = 200;
        /* a negative fd is ignored by poll(): the side and the exit are optional */
        struct pollfd pfd[3] = {{.fd = r->fd, .events = POLLIN},
                                {.fd = r->side_fd, .events = POLLIN},
                                {.fd = r->exit_fd, .events = POLLIN}};
        int n = poll(pfd, 3, timeout_ms);
        if (n < 0 && errno != EINTR)
            return TB_WIRE_ERROR;
        if (n <= 0)
            continue;
        /* The writer ended and the pipe holds nothing it wrote: its end,
         * whoever else keeps the pipe open. */
        if (r->exit_fd >= 0 && pfd[2].revents && !pfd[0].revents)
            return TB_WIRE_EOF;
        /* Both ready: frames first (what the other end wrote before its
         * next side output goes first: a worker's progress before the
         * next call's log lines), then the side, in turn, so that a
         * steady stream of frames cannot starve it. */
        int side_ready = r->side_fd >= 0 && pfd[1].revents;
        if (side_ready && (!pfd[0].revents || r->side_turn)) {
            r->side_turn = 0;
            if (r->side(r->side_ctx) != 0)
                r->side_fd = -1;
            continue;
        }
        r->side_turn = side_ready;
        ssize_t got = read(r->fd, r->buf + r->len, r->cap - r->len);
        if (got < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (got < 0)
            return TB_WIRE_ERROR;
        if (got == 0)
            return TB_WIRE_EOF;
        r->len += (size_t)got;
    }
}

void tb_wire_result_free(tb_call_view *calls, size_t n_calls)
{
    for (size_t i = 0; calls && i < n_calls; i++) {
        free((void *)calls[i].req);
        free((void *)calls[i].em);
        for (uint32_t r = 0; calls[i].canvas && r < calls[i].call.n_requests; r++)
            free(calls[i].canvas[r]);
        free((void *)calls[i].canvas);
    }
    free(calls);
}

/* The worker checked the plugin's speculative counts (worker.c,
 * check_figures); a worker whose memory the plugin overwrote may still
 * send impossible ones: the request fails here as it would have there,
 * its counts dropped. */
static void spec_checked(tb_raw_request *q)
{
    char why[120];
    if (!tb_spec_check(&q->spec, why, sizeof why))
        return;
    memset(&q->spec, 0, sizeof q->spec);
    if (q->status != TB_OK)
        return;
    q->status = TB_ERR;
    snprintf(q->error, sizeof q->error, "impossible figure: speculative counts: %s", why);
}

/* The same for its canvases k (tb_canvas_check), inside the call; 0, or
 * -1 when they were dropped (the caller frees k). */
static int canvas_checked(tb_raw_request *q, const tb_canvas_counts *k, int64_t t_call, int64_t t_ret)
{
    char why[120];
    if (!tb_canvas_check(k, q->n_output_tokens, q->steps_done, q->t_submit_ns < t_call ? t_call : q->t_submit_ns,
                         t_ret, why, sizeof why))
        return 0;
    q->has_canvas = 0;
    if (q->status != TB_OK)
        return -1;
    q->status = TB_ERR;
    snprintf(q->error, sizeof q->error, "impossible figure: canvases: %s", why);
    return -1;
}

/* Request canvas records of call c from [*p, end) (TB_CANVAS_WIRE_BYTES
 * each, for the requests with has_canvas, in request order), checked;
 * NULL, or why the message is malformed. */
static const char *canvases_read(tb_call_view *c, tb_raw_request *req, const char **p, const char *end)
{
    tb_canvas_counts **cv = NULL;
    for (uint32_t r = 0; r < c->call.n_requests; r++) {
        if (!req[r].has_canvas)
            continue;
        if (req[r].has_canvas != 1)
            return "has_canvas";
        tb_canvas_counts head;
        size_t head_bytes = TB_CANVAS_WIRE_BYTES(0);
        if ((size_t)(end - *p) < head_bytes)
            return "truncated canvases";
        memcpy(&head, *p, head_bytes);
        if (head.n > TB_CANVAS_MAX || (size_t)(end - *p) < TB_CANVAS_WIRE_BYTES(head.n))
            return "truncated canvases";
        if (!cv)
            c->canvas = cv = tb_xcalloc(c->call.n_requests, sizeof *cv);
        cv[r] = tb_xcalloc(1, sizeof *cv[r]);
        memcpy(cv[r], *p, TB_CANVAS_WIRE_BYTES(head.n));
        *p += TB_CANVAS_WIRE_BYTES(head.n);
        if (canvas_checked(&req[r], cv[r], c->call.t_call_ns, c->call.t_return_ns) != 0) {
            free(cv[r]);
            cv[r] = NULL;
        }
    }
    return NULL;
}

int tb_wire_decode_result(const char *buf, size_t len, uint32_t want_requests, tb_call_view **calls,
                          size_t *n_calls, int64_t *host_peak_rss, char **err)
{
    const char *p = buf, *end = buf + len;
    const char *why = NULL;
    tb_wire_case wc;
    *calls = NULL;
    *n_calls = 0;
    if (len < sizeof wc) {
        *err = tb_xstrdup("malformed result from the backend process (truncated)");
        return -1;
    }
    memcpy(&wc, p, sizeof wc);
    p += sizeof wc;
    *host_peak_rss = wc.host_peak_rss;
    if (wc.n_calls > (size_t)(end - p) / sizeof(tb_raw_call)) {
        *err = tb_xstrdup("malformed result from the backend process (truncated)");
        return -1;
    }
    tb_call_view *v = tb_xcalloc(wc.n_calls ? wc.n_calls : 1, sizeof *v);
    size_t n = 0;
    for (; n < wc.n_calls; n++) {
        tb_call_view *c = &v[n];
        if ((size_t)(end - p) < sizeof c->call) {
            why = "truncated";
            break;
        }
        memcpy(&c->call, p, sizeof c->call);
        p += sizeof c->call;
        /* fewer when a duration ended the load (tb_result.n_unsent) */
        if (c->call.n_requests < 1 || c->call.n_requests > want_requests) {
            why = "request count";
            break;
        }
        size_t req_bytes = (size_t)c->call.n_requests * sizeof(tb_raw_request);
        size_t em_bytes = (size_t)c->call.n_emissions * sizeof(tb_emission);
        if ((size_t)(end - p) < req_bytes || (size_t)(end - p) - req_bytes < em_bytes) {
            why = "truncated";
            break;
        }
        tb_raw_request *req = tb_xmalloc(req_bytes ? req_bytes : 1);
        tb_emission *em = tb_xmalloc(em_bytes ? em_bytes : 1);
        memcpy(req, p, req_bytes);
        p += req_bytes;
        memcpy(em, p, em_bytes);
        p += em_bytes;
        c->req = req;
        c->em = em;
        size_t text_bytes = 0;
        for (uint32_t r = 0; r < c->call.n_requests; r++) {
            req[r].error[sizeof req[r].error - 1] = '\0';
            text_bytes += req[r].text_len;
            spec_checked(&req[r]);
        }
        if ((why = canvases_read(c, req, &p, end))) {
            n++; /* its arrays are to be freed */
            break;
        }
        if (c->call.draft_ns < 0 ||
            (c->call.draft_ns > 0 && c->call.draft_ns > c->call.t_return_ns - c->call.t_call_ns)) {
            n++; /* its arrays are to be freed */
            why = "draft_ns outside the call";
            break;
        }
        if ((size_t)(end - p) < text_bytes) {
            n++; /* its arrays are to be freed */
            why = "truncated texts";
            break;
        }
        c->texts = p;
        p += text_bytes;
    }
    if (!why && p != end)
        why = "trailing bytes";
    if (why) {
        tb_wire_result_free(v, n);
        *err = tb_xasprintf("malformed result from the backend process (%s)", why);
        return -1;
    }
    *calls = v;
    *n_calls = n;
    return 0;
}

/* a * b, or UINT64_MAX when it overflows (or either is UINT64_MAX). */
static uint64_t mul_sat(uint64_t a, uint64_t b)
{
    if (a == UINT64_MAX || b == UINT64_MAX)
        return UINT64_MAX;
    return b && a > UINT64_MAX / b ? UINT64_MAX : a * b;
}

static uint64_t add_sat(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

uint64_t tb_wire_result_bytes(uint64_t calls, uint64_t n_requests, uint64_t emissions, uint64_t canvas)
{
    uint64_t per_request = add_sat(add_sat(sizeof(tb_raw_request), canvas), mul_sat(emissions, sizeof(tb_emission)));
    uint64_t per_call = add_sat(sizeof(tb_raw_call), mul_sat(n_requests, per_request));
    return add_sat(sizeof(tb_wire_case), mul_sat(calls, per_call));
}
