/* output.h — where a command's report goes: `-o PATH` or stdout.
 *
 * A PATH that is missing or a regular file is written through a
 * temporary file in its folder, renamed over it once every byte is
 * written: a failed write leaves the old file as it was, and removes
 * only the temporary file. Anything else (a symlink, a FIFO, a device)
 * is opened and written as it is, never replaced or removed. Every write
 * is checked: stdio's error flag, then the flush and close. A PATH that
 * is an SQLite database, or the -wal, -shm or -journal file beside one,
 * is refused: `-o tokbench.db` would have replaced every stored session
 * with a report. */
#ifndef TB_CLI_OUTPUT_H
#define TB_CLI_OUTPUT_H

#include <stdio.h>

typedef struct cli_output {
    FILE *f;
    const char *path; /* -o PATH, or NULL for stdout */
    char *tmp;        /* the temporary file renamed over path, or NULL */
} cli_output;

/* Open -o PATH (NULL or "-": stdout). 0, or -1 after printing why. */
int cli_output_open(cli_output *o, const char *path);

/* Finish: with rc 0 and every write done, the file is in place (0);
 * else nothing of ours is left (the temporary file removed) and the
 * return is 1 (printed why, for a write that failed). */
int cli_output_close(cli_output *o, int rc);

#endif
