/* fuzz_common.h — helpers for the fuzz targets that must hand their input
 * to a loader that reads files: a private temporary folder (under $TMPDIR;
 * tests/fuzz/run.sh points that into the build folder), removed at exit,
 * and writing bytes to a file in it.
 *
 * Header-only (static functions), so each target stays one .c file that
 * builds both under libFuzzer and with the replay main (regressions/). */
#ifndef TB_FUZZ_COMMON_H
#define TB_FUZZ_COMMON_H

#define _GNU_SOURCE
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char fuzz_dir_[4096];

static inline int fuzz_rm_(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

static inline void fuzz_cleanup_(void)
{
    if (fuzz_dir_[0])
        nftw(fuzz_dir_, fuzz_rm_, 16, FTW_DEPTH | FTW_PHYS);
}

/* Create the folder once ("$TMPDIR/tb-fuzz-NAME-XXXXXX") and return it;
 * exits on failure (the target cannot run at all). */
static inline const char *fuzz_tmpdir(const char *name)
{
    if (fuzz_dir_[0])
        return fuzz_dir_;
    const char *tmp = getenv("TMPDIR");
    snprintf(fuzz_dir_, sizeof fuzz_dir_, "%s/tb-fuzz-%s-XXXXXX", tmp && *tmp ? tmp : "/tmp", name);
    if (!mkdtemp(fuzz_dir_)) {
        perror(fuzz_dir_);
        exit(2);
    }
    atexit(fuzz_cleanup_);
    return fuzz_dir_;
}

/* Write n bytes to path (replacing it); exits on failure. */
static inline void fuzz_write(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) {
        perror(path);
        exit(2);
    }
}

/* Split data at its first NUL bytes into up to max parts (the last part
 * keeps any further NULs); returns the number of parts (>= 1). */
static inline size_t fuzz_split(const uint8_t *data, size_t size, const uint8_t **part, size_t *len,
                         size_t max)
{
    size_t n = 0;
    while (n + 1 < max) {
        const uint8_t *nul = size ? memchr(data, 0, size) : NULL;
        if (!nul)
            break;
        part[n] = data;
        len[n] = (size_t)(nul - data);
        n++;
        size -= len[n - 1] + 1;
        data = nul + 1;
    }
    part[n] = data;
    len[n] = size;
    return n + 1;
}

#endif
