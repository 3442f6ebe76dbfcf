/* output.c — see output.h. */
#define _GNU_SOURCE
#include "output.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

/* Is the file at path (links followed) an SQLite database: its 16-byte
 * header. */
static int is_sqlite(const char *path)
{
    char head[16];
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return 0;
    struct stat sb;
    int yes = fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && read(fd, head, sizeof head) == (ssize_t)sizeof head &&
              memcmp(head, "SQLite format 3", 16) == 0;
    close(fd);
    return yes;
}

/* Would writing path destroy a database: a database itself (the -o that
 * names --db by a slip), or the write-ahead log, shared-memory index or
 * journal beside one (its uncommitted pages). */
static int is_database_file(const char *path)
{
    if (is_sqlite(path))
        return 1;
    static const char *const companion[] = {"-wal", "-shm", "-journal"};
    size_t n = strlen(path);
    for (size_t i = 0; i < sizeof companion / sizeof *companion; i++) {
        size_t k = strlen(companion[i]);
        if (n > k && strcmp(path + n - k, companion[i]) == 0) {
            char *stem = tb_xasprintf("%.*s", (int)(n - k), path);
            int yes = is_sqlite(stem);
            free(stem);
            if (yes)
                return 1;
        }
    }
    return 0;
}

int cli_output_open(cli_output *o, const char *path)
{
    *o = (cli_output){.f = stdout};
    if (!path || strcmp(path, "-") == 0)
        return 0;
    o->path = path;
    if (is_database_file(path)) {
        fprintf(stderr, "tokbench: -o %s: that is an SQLite database (or its log); a report never overwrites one: "
                        "name another file\n", path);
        return -1;
    }
    struct stat sb;
    int exists = lstat(path, &sb) == 0;
    if (exists && !S_ISREG(sb.st_mode)) {
        /* a link, FIFO or device: written where it leads, never replaced */
        o->f = fopen(path, "w");
        if (!o->f) {
            fprintf(stderr, "tokbench: %s: cannot write: %s\n", path, strerror(errno));
            return -1;
        }
        return 0;
    }
    o->tmp = tb_xasprintf("%s.XXXXXX", path);
    int fd = mkstemp(o->tmp);
    if (fd < 0) {
        fprintf(stderr, "tokbench: %s: cannot write: %s\n", path, strerror(errno));
        free(o->tmp);
        o->tmp = NULL;
        return -1;
    }
    /* the mode a new file would get (or the old file's), not mkstemp's 0600 */
    mode_t mask = umask(0);
    umask(mask);
    fchmod(fd, exists ? sb.st_mode & 07777 : 0666 & ~mask);
    o->f = fdopen(fd, "w");
    if (!o->f) { /* only out of memory */
        fprintf(stderr, "tokbench: %s: cannot write: %s\n", path, strerror(errno));
        close(fd);
        unlink(o->tmp);
        free(o->tmp);
        o->tmp = NULL;
        return -1;
    }
    return 0;
}

int cli_output_close(cli_output *o, int rc)
{
    const char *name = o->path ? o->path : "stdout";
    /* the error flag says whether any write failed; then the last ones */
    errno = 0;
    int failed = fflush(o->f) != 0;
    int e = failed ? errno : 0;
    failed |= ferror(o->f) != 0;
    if (o->f != stdout && fclose(o->f) != 0 && !failed) {
        failed = 1;
        e = errno;
    }
    o->f = NULL;
    if (failed) {
        fprintf(stderr, "tokbench: %s: write failed: %s\n", name, e ? strerror(e) : "I/O error");
        rc = 1;
    }
    if (o->tmp) {
        if (rc == 0 && rename(o->tmp, o->path) != 0) {
            fprintf(stderr, "tokbench: %s: cannot write: %s\n", o->path, strerror(errno));
            rc = 1;
        }
        if (rc != 0)
            unlink(o->tmp); /* ours: the target is untouched */
        free(o->tmp);
        o->tmp = NULL;
    }
    return rc;
}
