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

void tb_progress_init(tb_progress *p, size_t n_cases, uint64_t work)
{
    memset(p, 0, sizeof *p);
    p->out = stderr;
    p->tty = isatty(2);
    p->clock = tb_now_ns;
    p->total = n_cases;
    p->work_total = work;
}

int64_t tb_progress_eta_ns(int64_t measured_ns, double measured_work, double work_left)
{
    if (!(measured_work > 0) || measured_ns <= 0)
        return -1;
    if (!(work_left > 0))
        return 0;
    return (int64_t)((double)measured_ns * work_left / measured_work);
}

/* The share of the case in flight done, by its calls (0..1). */
static double cur_fraction(const tb_progress *p)
{
    if (!p->have_cur)
        return 0;
    uint64_t calls = p->cur.warmup + (uint64_t)p->cur.repeat * (p->cur.per_pass ? p->cur.per_pass : 1);
    return calls && p->cur_done < calls ? (double)p->cur_done / (double)calls : calls ? 1 : 0;
}

int64_t tb_progress_eta(const tb_progress *p)
{
    double left = (double)p->work_total - (double)p->work_done - (double)p->cur_work * cur_fraction(p);
    return tb_progress_eta_ns(p->measured_ns, p->measured_work, left > 0 ? left : 0);
}

/* Display width of UTF-8 text: code points. */
static size_t cols(const char *s, size_t n)
{
    size_t w = 0;
    for (size_t i = 0; i < n && s[i]; i++)
        w += ((unsigned char)s[i] & 0xC0) != 0x80;
    return w;
}

char *tb_progress_fit(const char *line, size_t width)
{
    size_t n = strlen(line);
    if (!width || cols(line, n) <= width)
        return tb_xstrdup(line);
    /* the longest prefix of width - 1 columns (room for the "…") */
    size_t end = 0, w = 0;
    for (size_t i = 0; line[i]; i++) {
        if (((unsigned char)line[i] & 0xC0) != 0x80 && ++w > width - 1)
            break; /* a character that does not fit: cut before it */
        end = i + 1;
    }
    size_t comma = 0, space = 0;
    for (size_t i = 1; i <= end && i < n; i++) {
        if (line[i] == ' ')
            space = i;
        if (line[i] == ',' && line[i + 1] == ' ')
            comma = i;
    }
    /* a field's end when it keeps most of the room, else a word's */
    size_t cut = comma && comma >= end / 2 ? comma : space ? space : end;
    while (cut > 0 && line[cut - 1] == ' ')
        cut--;
    return tb_xasprintf("%.*s…", (int)cut, line);
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
    if (calls_done < pc->warmup) { /* its requests counted as the measured calls' are */
        int n = snprintf(buf, size, "warm-up %u/%u", calls_done, pc->warmup);
        if (pc->requests > 1 && n > 0 && (size_t)n < size)
            snprintf(buf + n, size - (size_t)n, ", %llu/%llu requests",
                     (unsigned long long)calls_done * pc->requests, (unsigned long long)pc->warmup * pc->requests);
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
 * Too wide: the label gives way to the tag, then the graphic goes, then
 * the name is cut at a space. */
static void draw_bar(tb_progress *p)
{
    enum { GRAPHIC = 20 };
    int width = term_width(p) - 1;
    uint64_t total = p->work_total;
    double done = (double)p->work_done + (double)p->cur_work * cur_fraction(p);
    size_t fill = total ? (size_t)(done * GRAPHIC / (done > (double)total ? done : (double)total)) : 0;
    char graphic[GRAPHIC + 4];
    graphic[0] = '[';
    for (size_t i = 0; i < GRAPHIC; i++)
        graphic[i + 1] = i < fill ? '#' : '.';
    snprintf(graphic + GRAPHIC + 1, 3, "] ");

    char cases[48], what[128] = "", eta[48] = "", right[200];
    snprintf(cases, sizeof cases, "%zu/%zu ", p->done, p->total);
    if (p->have_cur)
        tb_progress_case_text(what, sizeof what, &p->cur, p->cur_done);
    int64_t left_ns = tb_progress_eta(p);
    if (left_ns >= 0) {
        char d[32];
        tb_progress_duration(d, sizeof d, left_ns);
        snprintf(eta, sizeof eta, "ETA %s", d);
    }
    snprintf(right, sizeof right, "%s%s%s%s", *what ? "  " : "", what, *eta ? "  " : "", eta);

    const char *b = p->backend ? p->backend : "";
    char *name = tb_xasprintf("%s %s", b, p->label ? p->label : "");
    int fixed = (int)(strlen(cases) + strlen(right));
    if (width - fixed - (int)strlen(graphic) < (int)cols(name, strlen(name)) && p->tag) {
        free(name);
        name = tb_xasprintf("%s %s", b, p->tag);
    }
    const char *g = graphic;
    if (width - fixed - (int)strlen(graphic) < (int)cols(name, strlen(name))) /* the name matters more */
        g = "";
    int room = width - fixed - (int)strlen(g);
    tb_str line = {0};
    tb_str_append(&line, g);
    tb_str_append(&line, cases);
    if (room > 3) {
        char *fit = tb_progress_fit(name, (size_t)room);
        tb_str_append(&line, fit);
        free(fit);
    }
    tb_str_append(&line, right);
    if (width > 0 && cols(line.s, line.len) > (size_t)width) { /* a very narrow terminal */
        char *fit = tb_progress_fit(line.s, (size_t)width);
        tb_str_free(&line);
        tb_str_append(&line, fit);
        free(fit);
    }
    clear_bar(p);
    fputs(width > 0 ? line.s : "", p->out);
    fflush(p->out);
    p->drawn = 1;
    p->last_draw = p->clock();
    tb_str_free(&line);
    free(name);
}

void tb_progress_start(tb_progress *p, const char *backend, const char *label, const char *tag,
                       const tb_progress_case *pc)
{
    free(p->backend);
    free(p->label);
    free(p->tag);
    p->backend = tb_xstrdup(backend);
    p->label = tb_xstrdup(label);
    p->tag = tag && *tag ? tb_xstrdup(tag) : NULL;
    p->have_cur = pc != NULL;
    if (pc)
        p->cur = *pc;
    p->cur_work = pc ? pc->work : 0;
    p->cur_done = 0;
    p->case_t0 = p->clock();
    if (p->tty)
        draw_bar(p);
}

void tb_progress_calls(tb_progress *p, uint32_t calls_done)
{
    p->cur_done = calls_done;
    if (p->tty && p->clock() - p->last_draw >= REDRAW_NS)
        draw_bar(p);
}

void tb_progress_done(tb_progress *p, const char *backend, const char *label, const char *tag, const char *status,
                      const char *detail, uint64_t planned_work)
{
    p->done++;
    /* the work it ran (by its calls) is done and measures the rate; what
     * it did not run leaves the total */
    double frac = p->have_cur ? cur_fraction(p) : 0;
    uint64_t ran = (uint64_t)((double)planned_work * frac);
    if (ran > planned_work)
        ran = planned_work;
    p->work_done += ran;
    p->work_total -= planned_work - ran > p->work_total ? p->work_total : planned_work - ran;
    if (p->have_cur && ran > 0 && p->clock() > p->case_t0) {
        p->measured_work += (double)ran;
        p->measured_ns += p->clock() - p->case_t0;
    }
    p->cur_done = 0;
    p->have_cur = 0;
    p->cur_work = 0;
    free(p->backend);
    free(p->label);
    free(p->tag);
    p->backend = p->label = p->tag = NULL;
    clear_bar(p);
    const char *sep = detail && *detail ? ": " : "", *d = detail ? detail : "";
    char *line = tb_xasprintf("[%zu/%zu] %-7s %s %s%s%s", p->done, p->total, status, backend, label, sep, d);
    if (p->tty) { /* within the terminal, at a boundary: the tag, then cut */
        size_t width = (size_t)term_width(p) - 1;
        if (cols(line, strlen(line)) > width && tag && *tag) {
            free(line);
            line = tb_xasprintf("[%zu/%zu] %-7s %s %s%s%s", p->done, p->total, status, backend, tag, sep, d);
        }
        char *fit = tb_progress_fit(line, width);
        free(line);
        line = fit;
    }
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
    free(p->tag);
    p->backend = p->label = p->tag = NULL;
}
