/* test_progress.c — core/progress.c: the ETA, the case's own progress,
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
    CHECK(tb_progress_eta_ns(10 * S, 0, 4) == -1); /* nothing done: unknown */
    CHECK(tb_progress_eta_ns(0, 1, 4) == -1);
    CHECK(tb_progress_eta_ns(10 * S, 1, 4) == 30 * S);
    CHECK(tb_progress_eta_ns(10 * S, 3, 4) == 10 * S / 3);
    CHECK(tb_progress_eta_ns(10 * S, 4, 4) == 0);
    CHECK(tb_progress_eta_ns(10 * S, 5, 4) == 0);
    char b[32];
    tb_progress_duration(b, sizeof b, 45 * S);
    CHECK_STR(b, "45 s");
    tb_progress_duration(b, sizeof b, 200 * S);
    CHECK_STR(b, "3 min 20 s");
    tb_progress_duration(b, sizeof b, 7500 * S);
    CHECK_STR(b, "2 h 05 min");
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
    open_fake(&p, &f, &buf, &len, 1, 70, 2, 12);
    tb_progress_case pc = {.warmup = 1, .repeat = 5, .per_pass = 1, .requests = 1};
    tb_progress_start(&p, "ar-small", "prompt_tokens=128 max_new_tokens=64 batch=1 steps=16 block_length=32", &pc);
    fflush(f);
    CHECK(strchr(buf, '\n') == NULL); /* the bar: no newline */
    CHECK(len > 0 && len <= 69);      /* never the last column */
    CHECK_CONTAINS(buf, "0/2 ar-small prompt_tokens=128"); /* the label, cut */
    CHECK_CONTAINS(buf, "...  warm-up 0/1");
    CHECK(strstr(buf, "ETA") == NULL); /* nothing done yet */
    size_t mark = len;

    /* 3 of the case's 6 calls in 10 s: 9 of 12 left, ETA 30 s */
    fake_now += 10 * S;
    tb_progress_calls(&p, 3);
    fflush(f);
    CHECK_CONTAINS(buf + mark, "\r\033[K[#####");
    CHECK_CONTAINS(buf + mark, "rep 2/5  ETA 30 s");
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

    /* the case ends: its line replaces the bar */
    tb_progress_calls(&p, 6);
    tb_progress_done(&p, "ar-small", "batch=1", "ok", "12.0 tok/s", 6);
    fflush(f);
    CHECK_CONTAINS(buf + mark, "\r\033[K[1/2] ok      ar-small batch=1: 12.0 tok/s\n");
    CHECK(p.work_done == 6 && p.work_total == 12);
    /* the next case fails after 2 of its 6 calls: the 4 left leave the total */
    tb_progress_start(&p, "ar-small", "batch=2", &pc);
    tb_progress_calls(&p, 2);
    tb_progress_done(&p, "ar-small", "batch=2", "failed", "crashed", 6);
    CHECK(p.work_done == 8 && p.work_total == 8);
    tb_progress_finish(&p);
    fclose(f);
    /* every bar fits: check each stretch after a \r */
    for (const char *s = buf; (s = strchr(s, '\r')); s++) {
        size_t n = strcspn(s + 1, "\r\n");
        CHECK(n <= 69 + 3); /* + "\033[K" */
    }
    free(buf);

    /* a narrow terminal: no graphic, the counts and the label kept */
    buf = NULL;
    open_fake(&p, &f, &buf, &len, 1, 40, 1, 6);
    tb_progress_start(&p, "b", "batch=1", &pc);
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
    tb_progress_start(&p, "b", "batch=1", &pc);
    fake_now += S;
    tb_progress_calls(&p, 3);
    tb_progress_log(&p, "[b] info: a line");
    tb_progress_note(&p, "tokbench: a note");
    tb_progress_calls(&p, 6);
    tb_progress_done(&p, "b", "batch=1", "ok", "1.0 tok/s", 6);
    tb_progress_finish(&p);
    fclose(f);
    CHECK_STR(buf, "[b] info: a line\ntokbench: a note\n[1/1] ok      b batch=1: 1.0 tok/s\n");
    free(buf);
}

int main(void)
{
    test_eta();
    test_case_text();
    test_terminal();
    test_not_a_terminal();
    return check_done();
}
