/* progress.h — progress on stderr: a redrawn bar on a terminal, one plain
 * line per finished case otherwise (logs, CI).
 *
 * The runner owns the terminal while it runs: the backend processes'
 * stderr lines reach it through the runner (worker_client.h,
 * tb_wc_set_log), which prints them with tb_progress_log: the bar is
 * cleared, the line printed, the bar drawn again, so a log line never
 * shares a line with the bar. On a terminal the bar shows the cases done,
 * the case in flight with its repetitions and requests done (the worker
 * reports each call: wire.h, TB_MSG_PROGRESS) and an ETA; it is cut to
 * the terminal's width (a wrapped bar could not be cleared), and so is
 * each finished case's line, at a space (never mid-number), with the
 * case's short label (its tag: the values that tell the cases apart)
 * when the whole one does not fit.
 *
 * The ETA is of work, not of cases: each case's expected work (the
 * runner's: calls x requests x new tokens x steps) is known before the
 * run; the cases finished so far give the time a unit of work takes,
 * and the work left is scaled by it. Before a case has finished there
 * is none (no number rather than a wild one). Output that
 * is not a terminal gets no control codes: the finished cases' lines and
 * the log lines, as they come. */
#ifndef TB_PROGRESS_H
#define TB_PROGRESS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The shape of a case, for its progress: calls = warmup + repeat x
 * per_pass, each of `requests` requests. */
typedef struct tb_progress_case {
    uint32_t warmup, repeat, per_pass, requests;
    uint64_t work; /* its expected work (the ETA's unit) */
} tb_progress_case;

typedef struct tb_progress {
    FILE *out;            /* stderr */
    int tty;              /* draw the bar (isatty(2)) */
    int width;            /* 0: the terminal's, asked at every draw */
    int64_t (*clock)(void); /* ns; tb_now_ns */
    size_t total, done;   /* cases */
    uint64_t work_total, work_done; /* work of the cases not skipped */
    double measured_work; /* work of the finished cases that ran ... */
    int64_t measured_ns;  /* ... and the time they took */
    int64_t case_t0;      /* the case in flight's start */
    int64_t last_draw;
    int drawn;            /* a bar is on the current line */
    /* the case in flight */
    char *backend, *label, *tag;
    tb_progress_case cur;
    uint64_t cur_work;    /* its expected work */
    int have_cur;
    uint32_t cur_done;    /* its calls done */
    /* the run's secret values (tb_plan_secrets, borrowed): every line
     * printed is redacted with them, URL credentials too (util/redact.h) */
    const char *const *secrets;
    size_t n_secrets;
} tb_progress;

/* n_cases cases, `work` units of expected work in all of those that
 * will run (not skipped by the plan): the ETA's measure. */
void tb_progress_init(tb_progress *p, size_t n_cases, uint64_t work);
/* The case about to run (bar mode shows it) with its label and its tag
 * (the short label, NULL: none); pc NULL: shape unknown. Its expected
 * work is pc->work. */
void tb_progress_start(tb_progress *p, const char *backend, const char *label, const char *tag,
                       const tb_progress_case *pc);
/* The case in flight finished `calls_done` of its calls. Redraws at most
 * every 100 ms. */
void tb_progress_calls(tb_progress *p, uint32_t calls_done);
/* A case finished with `status` ("ok", "failed", "skipped") and a short
 * figure or reason. planned_work: the work it was counted for in init's
 * total (0 when none): what it did not run (its calls not made) leaves
 * the total; what it ran, with the time since its start, measures the
 * rate of work. */
void tb_progress_done(tb_progress *p, const char *backend, const char *label, const char *tag, const char *status,
                      const char *detail, uint64_t planned_work);
/* A line from a backend process (no newline): printed on its own line,
 * the bar drawn again below it. */
void tb_progress_log(tb_progress *p, const char *line);
/* Print a message line without breaking the bar. */
void tb_progress_note(tb_progress *p, const char *msg);
void tb_progress_finish(tb_progress *p);

/* The time left, ns, for `work_left` units of work when `measured_work`
 * units took `measured_ns`, at the same rate; -1 when not known yet
 * (nothing measured). */
int64_t tb_progress_eta_ns(int64_t measured_ns, double measured_work, double work_left);
/* The run's ETA now: the work left (the cases not finished, the one in
 * flight by its calls not done) at the finished cases' rate; -1: none. */
int64_t tb_progress_eta(const tb_progress *p);
/* `line` cut to `width` columns (0: not cut) at a boundary, never inside
 * a number: the last ", " that fits (when it keeps half the room), else
 * the last space; "…" marks the cut. Malloc'd. */
char *tb_progress_fit(const char *line, size_t width);
/* "45 s", "3 min 20 s", "2 h 05 min" into buf. */
void tb_progress_duration(char *buf, size_t size, int64_t ns);
/* What the case has done: "warm-up 1/1", "rep 2/5", with ", 40/100
 * requests" when its calls have more than one (the warm-up's requests in
 * the warm-up), into buf (empty: unknown). */
void tb_progress_case_text(char *buf, size_t size, const tb_progress_case *pc, uint32_t calls_done);

#endif
