/* test_progress.c — run/progress.c: the ETA (of the cases' work), the
 * lines cut at a boundary, the case's own progress,
 * and the terminal's rules: a log line is printed on a line of its own
 * (the bar cleared first, drawn again after), the bar never reaches the
 * terminal's last column, and output that is not a terminal has no
 * control codes. A fake clock: nothing here depends on the machine. */
#define _GNU_SOURCE
#include "progress.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static int64_t fake_now;
static int64_t fake_clock(void)
{
    return fake_now;
}

#define S 1000000000LL

static void test_eta(void)
{
    CHECK(tb_progress_eta_ns(10 * S, 0, 4) == -1); /* nothing measured: unknown */
    CHECK(tb_progress_eta_ns(0, 1, 4) == -1);
    CHECK(tb_progress_eta_ns(10 * S, 1, 4) == 40 * S); /* 10 s a unit */
    CHECK(tb_progress_eta_ns(10 * S, 3, 1) == 10 * S / 3);
    CHECK(tb_progress_eta_ns(10 * S, 4, 0) == 0);
    CHECK(tb_progress_eta_ns(10 * S, 5, -1) == 0);
    char b[32];
    tb_progress_duration(b, sizeof b, 45 * S);
    CHECK_STR(b, "45 s");
    tb_progress_duration(b, sizeof b, 200 * S);
    CHECK_STR(b, "3 min 20 s");
    tb_progress_duration(b, sizeof b, 7500 * S);
    CHECK_STR(b, "2 h 05 min");
}

/* The ETA of a run from its cases' expected work (issue 39 item 8: the
 * default suite's went 42 s, 1 min 20 s, 2 min 41 s for a 6-minute run,
 * from the first case's share of the cases). Scripted works and times:
 * a small AR case first, then cases of 8 and 16 steps (2x and 4x its
 * work), on a fake clock. */
static void test_eta_work(void)
{
    tb_progress p;
    tb_progress_init(&p, 4, 100 + 200 + 400 + 300);
    p.tty = 0;
    p.out = fopen("/dev/null", "w");
    p.clock = fake_clock;
    fake_now = 100 * S;
    tb_progress_case pc = {.warmup = 0, .repeat = 4, .per_pass = 1, .requests = 1, .work = 100};

    /* before a case has finished: no number, however far the first got */
    tb_progress_start(&p, "ar", "steps=none", NULL, &pc);
    CHECK(tb_progress_eta(&p) == -1);
    fake_now += 7 * S;
    tb_progress_calls(&p, 3);
    CHECK(tb_progress_eta(&p) == -1);
    fake_now += 3 * S;
    tb_progress_calls(&p, 4);
    tb_progress_done(&p, "ar", "steps=none", NULL, "ok", "", 100);
    /* 100 units in 10 s: the 900 left at 0.1 s each (by cases: 3 x 10 s) */
    CHECK(tb_progress_eta(&p) == 90 * S);

    /* a case of 200 units: half its calls done leave 800 */
    pc.work = 200;
    tb_progress_start(&p, "diff", "steps=8", NULL, &pc);
    fake_now += 20 * S;
    tb_progress_calls(&p, 2);
    CHECK(tb_progress_eta(&p) == 80 * S);
    fake_now += 30 * S; /* slower than the first: 300 units in 60 s */
    tb_progress_calls(&p, 4);
    tb_progress_done(&p, "diff", "steps=8", NULL, "ok", "", 200);
    CHECK(tb_progress_eta(&p) == 140 * S); /* 700 units at 0.2 s */

    /* a case that fails before any call: its work leaves the total, its
     * time (a load) does not change the rate */
    pc.work = 400;
    tb_progress_start(&p, "diff", "steps=16", NULL, &pc);
    fake_now += 5 * S;
    tb_progress_done(&p, "diff", "steps=16", NULL, "failed", "load failed", 400);
    CHECK(p.work_total == 600 && p.work_done == 300);
    CHECK(tb_progress_eta(&p) == 60 * S); /* 300 units at 0.2 s */

    /* the last: done, nothing left */
    pc.work = 300;
    tb_progress_start(&p, "diff", "steps=12", NULL, &pc);
    fake_now += 60 * S;
    tb_progress_calls(&p, 4);
    tb_progress_done(&p, "diff", "steps=12", NULL, "ok", "", 300);
    CHECK(tb_progress_eta(&p) == 0);
    tb_progress_finish(&p);
    fclose(p.out);
}

/* Lines cut at a boundary, never inside a number. */
static void test_fit(void)
{
    char *s = tb_progress_fit("abc 123.45 tok/s", 0);
    CHECK_STR(s, "abc 123.45 tok/s");
    free(s);
    s = tb_progress_fit("abc 123.45 tok/s", 16);
    CHECK_STR(s, "abc 123.45 tok/s");
    free(s);
    s = tb_progress_fit("abc 123.45 tok/s", 12);
    CHECK_STR(s, "abc 123.45…");
    free(s);
    s = tb_progress_fit("abc 123.45 tok/s", 9); /* not "abc 123.…" */
    CHECK_STR(s, "abc…");
    free(s);
    /* a field's end first: "x: 1.5 tok/s (of 2 calls), 3.5 tok/s" */
    s = tb_progress_fit("x: 1.5 tok/s (of 2 calls), 3.5 tok/s (of 6)", 36);
    CHECK_STR(s, "x: 1.5 tok/s (of 2 calls)…");
    free(s);
    s = tb_progress_fit("é é é é", 4); /* columns, not bytes */
    CHECK_STR(s, "é é…");
    free(s);
}

static void test_case_text(void)
{
    char b[96];
    tb_progress_case pc = {.warmup = 1, .repeat = 5, .per_pass = 1, .requests = 1};
    tb_progress_case_text(b, sizeof b, &pc, 0);
    CHECK_STR(b, "warm-up 0/1");
    tb_progress_case_text(b, sizeof b, &pc, 1);
    CHECK_STR(b, "rep 0/5");
    tb_progress_case_text(b, sizeof b, &pc, 3);
    CHECK_STR(b, "rep 2/5");
    pc.requests = 8; /* with requests: the measured ones */
    tb_progress_case_text(b, sizeof b, &pc, 6);
    CHECK_STR(b, "rep 5/5, 40/40 requests");
    /* the warm-up counts its requests too (issue 39 item 8) */
    tb_progress_case_text(b, sizeof b, &pc, 0);
    CHECK_STR(b, "warm-up 0/1, 0/8 requests");
    pc.warmup = 2;
    tb_progress_case_text(b, sizeof b, &pc, 1);
    CHECK_STR(b, "warm-up 1/2, 8/16 requests");
    /* a prompt set of 3 calls a pass: a repetition is 3 calls */
    pc = (tb_progress_case){.warmup = 0, .repeat = 2, .per_pass = 3, .requests = 4};
    tb_progress_case_text(b, sizeof b, &pc, 4);
    CHECK_STR(b, "rep 1/2, 16/24 requests");
    tb_progress_case_text(b, sizeof b, NULL, 4);
    CHECK_STR(b, "");
}

/* A progress printing into a string, as a terminal of `width` columns. */
static void open_fake(tb_progress *p, FILE **f, char **buf, size_t *len, int tty, int width, size_t cases,
                      uint64_t calls)
{
    tb_progress_init(p, cases, calls);
    *f = open_memstream(buf, len);
    p->out = *f;
    p->tty = tty;
    p->width = width;
    p->clock = fake_clock;
    fake_now = 100 * S;
}

static void test_terminal(void)
{
    tb_progress p;
    FILE *f;
    char *buf = NULL;
    size_t len = 0;
    open_fake(&p, &f, &buf, &len, 1, 70, 2, 120);
    tb_progress_case pc = {.warmup = 1, .repeat = 5, .per_pass = 1, .requests = 1, .work = 60};
    tb_progress_start(&p, "ar-small", "prompt_tokens=128 max_new_tokens=64 batch=1 steps=16 block_length=32",
                      "batch=1 steps=16", &pc);
    fflush(f);
    CHECK(strchr(buf, '\n') == NULL); /* the bar: no newline */
    CHECK(len > 0 && len <= 69);      /* never the last column */
    /* the label too long: its tag, the values that tell the cases apart */
    CHECK_CONTAINS(buf, "] 0/2 ar-small batch=1 steps=16  warm-up 0/1");
    CHECK(strstr(buf, "ETA") == NULL); /* nothing done yet */
    size_t mark = len;

    /* 3 of the case's 6 calls in 10 s: no case finished, no ETA yet */
    fake_now += 10 * S;
    tb_progress_calls(&p, 3);
    fflush(f);
    CHECK_CONTAINS(buf + mark, "\r\033[K[##");
    CHECK_CONTAINS(buf + mark, "rep 2/5");
    CHECK(strstr(buf + mark, "ETA") == NULL);
    mark = len;

    /* within 100 ms of the last draw: no redraw */
    fake_now += 50 * 1000000LL;
    tb_progress_calls(&p, 4);
    fflush(f);
    CHECK(len == mark);

    /* a log line: the bar cleared, the line on its own, the bar again */
    tb_progress_log(&p, "[ar-small] info: loaded model (3.7M parameters)");
    fflush(f);
    CHECK(strncmp(buf + mark, "\r\033[K[ar-small] info: loaded model (3.7M parameters)\n[", 53) == 0);
    CHECK_CONTAINS(buf + mark, "rep 3/5");
    CHECK(strchr(buf + mark + 53, '\n') == NULL); /* the bar redrawn, open */
    mark = len;

    /* the case ends (10.05 s): its line replaces the bar */
    tb_progress_calls(&p, 6);
    tb_progress_done(&p, "ar-small", "batch=1", "batch=1", "ok", "12.0 tok/s", 60);
    fflush(f);
    CHECK_CONTAINS(buf + mark, "\r\033[K[1/2] ok      ar-small batch=1: 12.0 tok/s\n");
    CHECK(p.work_done == 60 && p.work_total == 120);
    /* the next case: the ETA of its 60 units at the first's rate */
    tb_progress_start(&p, "ar-small", "batch=2", NULL, &pc);
    fflush(f);
    CHECK_CONTAINS(buf + mark, "ETA 10 s");
    /* it fails after 2 of its 6 calls: the 40 units left leave the total */
    tb_progress_calls(&p, 2);
    tb_progress_done(&p, "ar-small", "batch=2", NULL, "failed", "crashed", 60);
    CHECK(p.work_done == 80 && p.work_total == 80);
    /* a finished case's line too wide: the tag, then cut after a field */
    mark = len;
    tb_progress_start(&p, "ar-small", "prompts=176 max_new_tokens=16 batch=8 steps=2 block_length=16",
                      "batch=8 steps=2", &pc);
    tb_progress_calls(&p, 6);
    tb_progress_done(&p, "ar-small", "prompts=176 max_new_tokens=16 batch=8 steps=2 block_length=16",
                     "batch=8 steps=2", "ok",
                     "862.7 tok/s aggregate (median of 22 calls), 107.8 tok/s per request (median of 176 requests)",
                     60);
    fflush(f);
    CHECK_CONTAINS(buf + mark, "\r\033[K[3/2] ok      ar-small batch=8 steps=2: 862.7 tok/s aggregate…\n");
    /* every bar fits: check each stretch after a \r */
    for (const char *s = buf; (s = strchr(s, '\r')); s++) {
        size_t n = strcspn(s + 1, "\r\n");
        CHECK(n <= 69 + 3); /* + "\033[K" */
    }
    tb_progress_finish(&p);
    fclose(f);
    free(buf);

    /* a narrow terminal: no graphic, the counts and the label kept */
    buf = NULL;
    open_fake(&p, &f, &buf, &len, 1, 40, 1, 6);
    tb_progress_start(&p, "b", "batch=1", NULL, &pc);
    fflush(f);
    CHECK(len <= 39);
    CHECK(strncmp(buf, "0/1 b batch=1", 13) == 0);
    tb_progress_finish(&p);
    fclose(f);
    free(buf);
}

static void test_not_a_terminal(void)
{
    tb_progress p;
    FILE *f;
    char *buf = NULL;
    size_t len = 0;
    open_fake(&p, &f, &buf, &len, 0, 0, 1, 6);
    tb_progress_case pc = {.warmup = 1, .repeat = 5, .per_pass = 1, .requests = 1};
    tb_progress_start(&p, "b", "batch=1", "batch=1", &pc);
    fake_now += S;
    tb_progress_calls(&p, 3);
    tb_progress_log(&p, "[b] info: a line");
    tb_progress_note(&p, "tokbench: a note");
    tb_progress_calls(&p, 6);
    tb_progress_done(&p, "b", "batch=1", "batch=1", "ok", "1.0 tok/s", 6);
    tb_progress_finish(&p);
    fclose(f);
    CHECK_STR(buf, "[b] info: a line\ntokbench: a note\n[1/1] ok      b batch=1: 1.0 tok/s\n");
    free(buf);
}

int main(void)
{
    test_eta();
    test_eta_work();
    test_fit();
    test_case_text();
    test_terminal();
    test_not_a_terminal();
    return check_done();
}
