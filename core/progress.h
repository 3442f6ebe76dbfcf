/* progress.h — progress on stderr: a redrawn bar on a terminal, one plain
 * line per finished case otherwise (logs, CI). */
#ifndef TB_PROGRESS_H
#define TB_PROGRESS_H

#include <stddef.h>

typedef struct tb_progress {
    size_t total, done;
    int tty;
    int drawn; /* a bar is on the current line */
} tb_progress;

void tb_progress_init(tb_progress *p, size_t total);
/* The case about to run (bar mode shows it). */
void tb_progress_start(tb_progress *p, const char *backend, const char *label);
/* A case finished with `status` ("ok", "failed", "skipped") and a short
 * figure or reason. */
void tb_progress_done(tb_progress *p, const char *backend, const char *label, const char *status,
                      const char *detail);
/* Print a message line without breaking the bar. */
void tb_progress_note(tb_progress *p, const char *msg);
void tb_progress_finish(tb_progress *p);

#endif
