/* progress.c — see progress.h. */
#define _GNU_SOURCE
#include "progress.h"

#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "util.h"

/* Redraws of the bar for calls at most this often: a case of thousands of
 * short calls must not spend its time drawing. */
#define REDRAW_NS (100 * 1000000LL)

/* Print one line (a newline added), redacted: no secret of the run and no
 * URL's credentials reach the terminal or a log file (util/redact.h). */
static void put_line(tb_progress *p, const char *text)
{
    char *r = tb_xredact(text, p->secrets, p->n_secrets);
    fprintf(p->out, "%s\n", r);
    free(r);
}

void tb_progress_init(tb_progress *p, size_t n_cases, uint64_t n_calls)
{
    memset(p, 0, sizeof *p);
    p->out = stderr;
    p->tty = isatty(2);
    p->clock = tb_now_ns;
    p->total = n_cases;
    p->work_total = n_calls;
}

int64_t tb_progress_eta_ns(int64_t elapsed_ns, uint64_t done, uint64_t total)
{
    if (done == 0 || elapsed_ns <= 0)
        return -1;
    if (done >= total)
        return 0;
    return (int64_t)((double)elapsed_ns * (double)(total - done) / (double)done);
}

void tb_progress_duration(char *buf, size_t size, int64_t ns)
{
    long long s = (long long)((ns + 500000000LL) / 1000000000LL);
    if (s < 60)
        snprintf(buf, size, "%lld s", s);
    else if (s < 3600)
        snprintf(buf, size, "%lld min %02lld s", s / 60, s % 60);
    else
        snprintf(buf, size, "%lld h %02lld min", s / 3600, s / 60 % 60);
}

void tb_progress_case_text(char *buf, size_t size, const tb_progress_case *pc, uint32_t calls_done)
{
    buf[0] = '\0';
    if (!pc || !pc->repeat)
        return;
    uint32_t per_pass = pc->per_pass ? pc->per_pass : 1;
    uint64_t measured_calls = (uint64_t)pc->repeat * per_pass;
    if (calls_done < pc->warmup) {
        snprintf(buf, size, "warm-up %u/%u", calls_done, pc->warmup);
        return;
    }
    uint64_t m = calls_done - pc->warmup;
    if (m > measured_calls)
        m = measured_calls;
    int n = snprintf(buf, size, "rep %llu/%u", (unsigned long long)(m / per_pass), pc->repeat);
    if (pc->requests > 1 && n > 0 && (size_t)n < size)
        snprintf(buf + n, size - (size_t)n, ", %llu/%llu requests", (unsigned long long)(m * pc->requests),
                 (unsigned long long)(measured_calls * pc->requests));
}

static void clear_bar(tb_progress *p)
{
    if (p->drawn) {
        fputs("\r\033[K", p->out);
        p->drawn = 0;
    }
}

static int term_width(const tb_progress *p)
{
    if (p->width > 0)
        return p->width;
    struct winsize ws;
    if (ioctl(fileno(p->out), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
        return ws.ws_col;
    const char *env = getenv("COLUMNS");
    int n = env ? atoi(env) : 0;
    return n > 0 ? n : 80;
}

/* The bar, at most width - 1 characters (a line that fills the last
 * column wraps on some terminals, and a wrapped line cannot be cleared):
 * [#####.....] cases  backend label  rep 2/5, 40/100 requests  ETA 3 min 20 s
 * The label is cut first, then the graphic. */
static void draw_bar(tb_progress *p)
{
    enum { GRAPHIC = 20 };
    int width = term_width(p) - 1;
    uint64_t done = p->work_done + p->cur_done, total = p->work_total;
    size_t fill = total ? (size_t)(done * GRAPHIC / (done > total ? done : total)) : 0;
    char graphic[GRAPHIC + 4];
    graphic[0] = '[';
    for (size_t i = 0; i < GRAPHIC; i++)
        graphic[i + 1] = i < fill ? '#' : '.';
    snprintf(graphic + GRAPHIC + 1, 3, "] ");

    char cases[48], what[96] = "", eta[48] = "", right[160];
    snprintf(cases, sizeof cases, "%zu/%zu ", p->done, p->total);
    if (p->have_cur)
        tb_progress_case_text(what, sizeof what, &p->cur, p->cur_done);
    int64_t left_ns = p->t0 ? tb_progress_eta_ns(p->clock() - p->t0, done, total) : -1;
    if (left_ns >= 0) {
        char d[32];
        tb_progress_duration(d, sizeof d, left_ns);
        snprintf(eta, sizeof eta, "ETA %s", d);
    }
    snprintf(right, sizeof right, "%s%s%s%s", *what ? "  " : "", what, *eta ? "  " : "", eta);

    char *name = tb_xasprintf("%s %s", p->backend ? p->backend : "", p->label ? p->label : "");
    int fixed = (int)(strlen(cases) + strlen(right));
    int with_graphic = (int)strlen(graphic);
    const char *g = graphic;
    if (width - fixed - with_graphic < 12) /* the name matters more than the graphic */
        g = "";
    int room = width - fixed - (int)strlen(g);
    int len = (int)strlen(name);
    tb_str line = {0};
    tb_str_append(&line, g);
    tb_str_append(&line, cases);
    if (room >= len)
        tb_str_append(&line, name);
    else if (room > 3)
        tb_str_appendf(&line, "%.*s...", room - 3, name);
    tb_str_append(&line, right);
    if (width > 0 && line.len > (size_t)width) /* a very narrow terminal */
        line.s[width] = '\0';
    clear_bar(p);
    fputs(width > 0 ? line.s : "", p->out);
    fflush(p->out);
    p->drawn = 1;
    p->last_draw = p->clock();
    tb_str_free(&line);
    free(name);
}

void tb_progress_start(tb_progress *p, const char *backend, const char *label, const tb_progress_case *pc)
{
    free(p->backend);
    free(p->label);
    p->backend = tb_xstrdup(backend);
    p->label = tb_xstrdup(label);
    p->have_cur = pc != NULL;
    if (pc)
        p->cur = *pc;
    p->cur_done = 0;
    if (!p->t0)
        p->t0 = p->clock();
    if (p->tty)
        draw_bar(p);
}

void tb_progress_calls(tb_progress *p, uint32_t calls_done)
{
    p->cur_done = calls_done;
    if (p->tty && p->clock() - p->last_draw >= REDRAW_NS)
        draw_bar(p);
}

void tb_progress_done(tb_progress *p, const char *backend, const char *label, const char *status,
                      const char *detail, uint64_t planned_calls)
{
    p->done++;
    /* the calls it ran are done; those it did not run leave the total */
    uint64_t ran = p->cur_done;
    if (ran > planned_calls)
        ran = planned_calls;
    p->work_done += ran;
    p->work_total -= planned_calls - ran > p->work_total ? p->work_total : planned_calls - ran;
    p->cur_done = 0;
    p->have_cur = 0;
    free(p->backend);
    free(p->label);
    p->backend = p->label = NULL;
    clear_bar(p);
    char *line = tb_xasprintf("[%zu/%zu] %-7s %s %s%s%s", p->done, p->total, status, backend, label,
                              detail && *detail ? ": " : "", detail ? detail : "");
    put_line(p, line);
    free(line);
    fflush(p->out);
}

void tb_progress_log(tb_progress *p, const char *line)
{
    int redraw = p->drawn;
    clear_bar(p);
    put_line(p, line);
    if (redraw)
        draw_bar(p);
    else
        fflush(p->out);
}

void tb_progress_note(tb_progress *p, const char *msg)
{
    clear_bar(p);
    put_line(p, msg);
    fflush(p->out);
}

void tb_progress_finish(tb_progress *p)
{
    clear_bar(p);
    fflush(p->out);
    free(p->backend);
    free(p->label);
    p->backend = p->label = NULL;
}
