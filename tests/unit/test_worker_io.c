/* test_worker_io.c — a worker's two channels.
 *
 * Out: run/worker_proc.c's relay of a worker's stderr (the runner prints
 * each line above its progress bar): whole lines one at a time, a long
 * line in pieces, and, when the worker has ended, what is still in the
 * pipe (its last words, an unended line too) before the pipe is closed,
 * even when a child of the worker still holds it open. A real child
 * process stands for the worker; the pipe is filled by hand.
 *
 * In: what a real worker (run/worker.c, over the null plugin,
 * $TB_NULL_PLUGIN) does with a frame its message table cannot take: a
 * known type of another size (a CASE that carries a search's run, the
 * old form of CASE_LOAD) or an unknown type is refused, never misread:
 * the worker says so on its stderr (through the relay) and ends.
 *
 * And the RESULT frame's decode (proc/wire.c): a request whose
 * speculative counts are impossible fails with the reason, its counts
 * dropped; the call's draft_ns outside the call is a malformed result. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "plan.h"
#include "suite.h"
#include "util.h"
#include "wire.h"
#include "worker_client.h"
#include "worker_proc.h"

typedef struct lines {
    char *v[16];
    size_t n;
} lines;

static void collect(void *ctx, const char *line)
{
    lines *l = ctx;
    if (l->n < 16)
        l->v[l->n++] = tb_xstrdup(line);
}

static void lines_free(lines *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i]);
    l->n = 0;
}

/* A proc whose worker is a child that exits at once, with its stderr
 * pipe's write end in *wr (the test writes what the worker would). */
static void fake_worker(tb_worker_proc *w, lines *l, int *wr)
{
    memset(w, 0, sizeof *w);
    w->on_log = collect;
    w->log_ctx = l;
    int p[2];
    CHECK(pipe2(p, O_CLOEXEC) == 0);
    fcntl(p[0], F_SETFL, O_NONBLOCK);
    w->log_fd = p[0];
    w->has_log = 1;
    *wr = p[1];
    w->to_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
    w->from_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    pid_t pid = fork();
    if (pid == 0)
        _exit(0);
    w->pid = pid;
}

static void put(int fd, const char *s)
{
    CHECK(write(fd, s, strlen(s)) == (ssize_t)strlen(s));
}

static void test_lines_then_last_words(void)
{
    tb_worker_proc w;
    lines l = {0};
    int wr;
    fake_worker(&w, &l, &wr);
    put(wr, "[b] info: one\nraw two\npart");
    CHECK(tb_worker_relay_log(&w) == 0); /* the pipe is open: more may come */
    CHECK(l.n == 2);
    CHECK(l.n == 2 && !strcmp(l.v[0], "[b] info: one") && !strcmp(l.v[1], "raw two"));
    put(wr, "ial line\nlast words");
    close(wr); /* the worker ends */
    CHECK(tb_worker_reap(&w, 1) == NULL);
    CHECK(l.n == 4);
    CHECK(l.n == 4 && !strcmp(l.v[2], "partial line") && !strcmp(l.v[3], "last words"));
    CHECK(!w.has_log && w.pid == 0);
    CHECK(tb_worker_relay_log(&w) == -1);
    lines_free(&l);
}

/* A line over 4 KiB arrives in pieces, none longer. */
static void test_long_line(void)
{
    tb_worker_proc w;
    lines l = {0};
    int wr;
    fake_worker(&w, &l, &wr);
    char *big = tb_xmalloc(10001);
    memset(big, 'x', 10000);
    big[10000] = '\0';
    put(wr, big);
    put(wr, "\n");
    close(wr);
    while (tb_worker_relay_log(&w) == 0)
        ;
    size_t total = 0, longest = 0;
    for (size_t i = 0; i < l.n; i++) {
        size_t n = strlen(l.v[i]);
        total += n;
        longest = n > longest ? n : longest;
    }
    CHECK(total == 10000 && longest <= 4096 && l.n >= 3);
    free(big);
    lines_free(&l);
    tb_worker_reap(&w, 1);
}

/* The worker ended but something it started holds the pipe: reaping
 * relays what is there and does not wait for the end. */
static void test_pipe_held_open(void)
{
    tb_worker_proc w;
    lines l = {0};
    int wr;
    fake_worker(&w, &l, &wr);
    put(wr, "before\nunended");
    CHECK(tb_worker_reap(&w, 1) == NULL); /* wr still open: must not block */
    CHECK(l.n == 2 && !strcmp(l.v[0], "before") && !strcmp(l.v[1], "unended"));
    CHECK(!w.has_log);
    close(wr);
    lines_free(&l);
}

/* Is `want` in one of the relayed lines? */
static int said(const lines *l, const char *want)
{
    for (size_t i = 0; i < l->n; i++)
        if (strstr(l->v[i], want))
            return 1;
    return 0;
}

/* A fresh worker is sent one frame of `type` with payload p[len]; it
 * must end (the load answer's wait finds it gone, within load_timeout)
 * and say `want` through the relay. */
static void check_refused(tb_worker_client *wc, lines *l, uint32_t type, const void *p, size_t len, const char *want)
{
    char *why = NULL;
    lines_free(l);
    CHECK(tb_wc_start(wc, &why) == TB_WC_OK);
    free(why);
    why = NULL;
    tb_wc_result r = tb_wc_send(wc, type, p, len, &why);
    int reused;
    if (r == TB_WC_OK)
        r = tb_wc_await_loaded(wc, &reused, NULL, &why);
    CHECK(r == TB_WC_DIED);
    CHECK(said(l, want));
    if (r != TB_WC_DIED || !said(l, want))
        fprintf(stderr, "  sent type %u, %zu bytes: result %d (%s); wanted \"%s\" relayed\n", type, len, (int)r,
                why ? why : "", want);
    free(why);
    tb_wc_kill(wc);
}

static void test_frames_refused(void)
{
    const char *null_so = getenv("TB_NULL_PLUGIN");
    CHECK(null_so != NULL);
    if (!null_so)
        return;
    char dir[] = "/tmp/tb_worker_msgXXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char *path = tb_xasprintf("%s/s.ini", dir);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f)
        return;
    fprintf(f, "[suite]\nload_timeout = 60\n[backend a]\nplugin = %s\n", null_so);
    fclose(f);
    tb_suite suite;
    tb_plan plan;
    char *err = NULL;
    int ok = tb_suite_load(path, &suite, &err) == 0;
    CHECK(ok);
    if (ok && tb_plan_build(&suite, &plan, &err) != 0) {
        CHECK(0);
        tb_suite_free(&suite);
        ok = 0;
    }
    if (!ok) {
        fprintf(stderr, "%s", err ? err : "");
        free(err);
        free(path);
        return;
    }
    tb_worker_client wc;
    lines l = {0};
    tb_wc_init(&wc, &plan, 0, NULL);
    tb_wc_set_log(&wc, collect, &l);

    /* a frame of the right size is read: LOAD answered by LOADED */
    char *why = NULL;
    uint32_t idx = 0;
    int reused = -1;
    CHECK(tb_wc_start(&wc, &why) == TB_WC_OK);
    CHECK(tb_wc_send(&wc, TB_MSG_LOAD, &idx, sizeof idx, &why) == TB_WC_OK);
    CHECK(tb_wc_await_loaded(&wc, &reused, NULL, &why) == TB_WC_OK && reused == 0);
    free(why);
    tb_wc_stop(&wc);

    tb_wire_case_load cl = {.index = 0, .concurrency = 2};
    check_refused(&wc, &l, TB_MSG_CASE, &cl, sizeof cl, "CASE message of 16 bytes (expected 4)");
    check_refused(&wc, &l, TB_MSG_CASE_LOAD, &idx, sizeof idx, "CASE_LOAD message of 4 bytes (expected 16)");
    check_refused(&wc, &l, TB_MSG_LOAD, NULL, 0, "LOAD message of 0 bytes (expected 4)");
    check_refused(&wc, &l, TB_MSG_GENERATE, &idx, sizeof idx, "GENERATE message of 4 bytes (expected at least");
    check_refused(&wc, &l, 99, &idx, sizeof idx, "unknown type 99");

    tb_wc_free(&wc);
    lines_free(&l);
    tb_plan_free(&plan);
    tb_suite_free(&suite);
    unlink(path);
    rmdir(dir);
    free(path);
}

/* One call of 3 requests as a worker sends it: request 0's counts
 * possible, 1's accepted > drafted, 2's (already failed) a position past
 * draft_len. */
static void test_result_spec_bounds(void)
{
    struct {
        tb_wire_case wc;
        tb_raw_call call;
        tb_raw_request req[3];
    } m;
    memset(&m, 0, sizeof m);
    m.wc.n_calls = 1;
    m.call.n_requests = 3;
    m.call.t_call_ns = 1000, m.call.t_return_ns = 5000;
    m.call.draft_ns = 1000;
    tb_spec_counts ok = {.verifications = 2, .drafted = 4, .accepted = 3, .draft_len = 2,
                         .drafted_at = {2, 2}, .accepted_at = {2, 1}};
    for (int r = 0; r < 3; r++) {
        m.req[r].status = TB_OK;
        m.req[r].spec = ok;
    }
    m.req[1].spec.accepted = 5;
    m.req[2].status = TB_ERR;
    snprintf(m.req[2].error, sizeof m.req[2].error, "http_5xx: HTTP 500");
    m.req[2].spec.drafted_at[3] = 1;
    tb_call_view *calls;
    size_t n;
    int64_t rss;
    char *err = NULL;
    CHECK(tb_wire_decode_result((const char *)&m, sizeof m, 3, &calls, &n, &rss, &err) == 0 && n == 1);
    if (n == 1) {
        const tb_raw_request *q = calls[0].req;
        CHECK(q[0].status == TB_OK && q[0].spec.accepted == 3 && q[0].spec.drafted_at[1] == 2);
        CHECK(q[1].status == TB_ERR && q[1].spec.accepted == 0 && q[1].spec.verifications == 0);
        CHECK_STR(q[1].error, "impossible figure: speculative counts: accepted 5 > drafted 4");
        CHECK(q[2].status == TB_ERR && q[2].spec.drafted_at[3] == 0);
        CHECK_STR(q[2].error, "http_5xx: HTTP 500"); /* its own reason kept */
    }
    tb_wire_result_free(calls, n);
    m.call.draft_ns = 4001; /* longer than the call */
    CHECK(tb_wire_decode_result((const char *)&m, sizeof m, 3, &calls, &n, &rss, &err) == -1);
    CHECK(err && strstr(err, "draft_ns outside the call"));
    free(err);
    err = NULL;
    m.call.draft_ns = -1;
    CHECK(tb_wire_decode_result((const char *)&m, sizeof m, 3, &calls, &n, &rss, &err) == -1);
    free(err);    err = NULL;
    /* canvases: each request's record after the call's emissions (none
     * here), for the requests with has_canvas; impossible ones fail their
     * request and are dropped */
    m.call.draft_ns = 0;
    m.req[1].spec.accepted = 3;
    tb_canvas_counts k = {0};
    tb_canvas_push(&k, 2, 4, 8, 2000);
    tb_canvas_push(&k, 2, 4, 8, 3000);
    for (int r = 0; r < 3; r++) {
        m.req[r].n_output_tokens = 8;
        m.req[r].t_submit_ns = 1000;
        m.req[r].has_canvas = 1;
    }
    m.req[1].n_output_tokens = 7;
    tb_str b = {0};
    tb_str_appendn(&b, (const char *)&m, sizeof m);
    for (int r = 0; r < 3; r++)
        tb_str_appendn(&b, (const char *)&k, TB_CANVAS_WIRE_BYTES(k.n));
    CHECK(TB_CANVAS_WIRE_BYTES(2) < 100); /* not the whole 6 KB record */
    CHECK(sizeof(tb_raw_request) < sizeof(tb_canvas_counts)); /* nor inside every request */
    CHECK(tb_wire_decode_result(b.s, b.len, 3, &calls, &n, &rss, &err) == 0 && n == 1);
    if (n == 1) {
        const tb_raw_request *q = calls[0].req;
        CHECK(calls[0].canvas && calls[0].canvas[0] && calls[0].canvas[0]->n == 2 &&
              calls[0].canvas[0]->at[1].t_done_ns == 3000);
        CHECK(q[0].status == TB_OK && q[0].has_canvas == 1);
        CHECK(q[1].status == TB_ERR && q[1].has_canvas == 0 && calls[0].canvas && !calls[0].canvas[1]);
        CHECK_STR(q[1].error, "impossible figure: canvases: canvases committed 8 tokens of 7 output");
    }
    tb_wire_result_free(calls, n);
    /* a record cut short, a record of more than TB_CANVAS_MAX canvases, a
     * has_canvas that is not 0 or 1: malformed */
    CHECK(tb_wire_decode_result(b.s, b.len - 1, 3, &calls, &n, &rss, &err) == -1 && err &&
          strstr(err, "truncated canvases"));
    free(err);
    err = NULL;
    m.req[2].has_canvas = 0; /* one record more than the requests say: trailing */
    memcpy(b.s, &m, sizeof m);
    CHECK(tb_wire_decode_result(b.s, b.len, 3, &calls, &n, &rss, &err) == -1 && err && strstr(err, "trailing"));
    free(err);
    err = NULL;
    m.req[2].has_canvas = 2;
    memcpy(b.s, &m, sizeof m);
    CHECK(tb_wire_decode_result(b.s, b.len, 3, &calls, &n, &rss, &err) == -1 && err && strstr(err, "has_canvas"));
    free(err);
    err = NULL;
    m.req[2].has_canvas = 1;
    memcpy(b.s, &m, sizeof m);
    uint32_t too_many = TB_CANVAS_MAX + 1;
    memcpy(b.s + sizeof m, &too_many, sizeof too_many); /* request 0's n */
    CHECK(tb_wire_decode_result(b.s, b.len, 3, &calls, &n, &rss, &err) == -1 && err &&
          strstr(err, "truncated canvases"));
    free(err);
    err = NULL;
    tb_str_free(&b);
    /* none has a record: no canvas array */
    for (int r = 0; r < 3; r++)
        m.req[r].has_canvas = 0;
    CHECK(tb_wire_decode_result((const char *)&m, sizeof m, 3, &calls, &n, &rss, &err) == 0 && n == 1);
    CHECK(n == 1 && calls[0].canvas == NULL);
    tb_wire_result_free(calls, n);
}

int main(void)
{
    test_result_spec_bounds();
    test_lines_then_last_words();
    test_long_line();
    test_pipe_held_open();
    test_frames_refused();
    return check_done();
}
