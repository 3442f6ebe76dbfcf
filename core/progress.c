/* progress.c — see progress.h. */
#define _GNU_SOURCE
#include "progress.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

void tb_progress_init(tb_progress *p, size_t total)
{
    memset(p, 0, sizeof *p);
    p->total = total;
    p->tty = isatty(2);
}

static void clear_bar(tb_progress *p)
{
    if (p->drawn) {
        fputs("\r\033[K", stderr);
        p->drawn = 0;
    }
}

static void draw_bar(tb_progress *p, const char *backend, const char *label)
{
    enum { WIDTH = 24 };
    size_t fill = p->total ? p->done * WIDTH / p->total : WIDTH;
    char bar[WIDTH + 1];
    for (size_t i = 0; i < WIDTH; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[WIDTH] = '\0';
    clear_bar(p);
    fprintf(stderr, "[%s] %zu/%zu %s %.60s", bar, p->done, p->total, backend, label);
    fflush(stderr);
    p->drawn = 1;
}

void tb_progress_start(tb_progress *p, const char *backend, const char *label)
{
    if (p->tty)
        draw_bar(p, backend, label);
}

void tb_progress_done(tb_progress *p, const char *backend, const char *label, const char *status,
                      const char *detail)
{
    p->done++;
    clear_bar(p);
    fprintf(stderr, "[%zu/%zu] %-7s %s %s%s%s\n", p->done, p->total, status, backend, label,
            detail && *detail ? ": " : "", detail ? detail : "");
    fflush(stderr);
}

void tb_progress_note(tb_progress *p, const char *msg)
{
    clear_bar(p);
    fprintf(stderr, "%s\n", msg);
    fflush(stderr);
}

void tb_progress_finish(tb_progress *p)
{
    clear_bar(p);
}
