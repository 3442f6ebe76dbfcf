/* replay.c — the fuzz targets without libFuzzer: a main that hands every
 * file named on the command line (or found directly inside a folder named
 * there, in name order) to the target's LLVMFuzzerTestOneInput, once, in a
 * buffer of exactly the file's size (as libFuzzer does, so ASan sees a read
 * past the end). A missing folder is skipped: a target may have no saved
 * crashes yet.
 *
 * tests/fuzz/meson.build links it with each fuzz_*.c into replay_TARGET
 * and runs it on tests/fuzz/corpus/TARGET and tests/fuzz/regressions/TARGET
 * in every build (gcc, gcc + ASan/UBSan): every seed and every crash ever
 * found stays a test, with or without clang. */
#define _DEFAULT_SOURCE
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        return -1;
    }
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    for (;;) {
        if (!buf)
            abort();
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap)
            break;
        cap *= 2;
        buf = realloc(buf, cap);
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        fprintf(stderr, "replay: %s: read error\n", path);
        free(buf);
        return -1;
    }
    uint8_t *exact = malloc(n ? n : 1); /* exactly n bytes, as libFuzzer */
    if (!exact)
        abort();
    memcpy(exact, buf, n);
    free(buf);
    fprintf(stderr, "replay: %s (%zu bytes)\n", path, n);
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    return 0;
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
    return strcmp((*a)->d_name, (*b)->d_name);
}

int main(int argc, char **argv)
{
    if (LLVMFuzzerInitialize)
        LLVMFuzzerInitialize(&argc, &argv);
    int failed = 0, count = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            if (errno == ENOENT)
                continue;
            fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
            failed = 1;
            continue;
        }
        if (!S_ISDIR(st.st_mode)) {
            failed |= replay_file(argv[i]) != 0;
            count++;
            continue;
        }
        struct dirent **ents;
        int n = scandir(argv[i], &ents, NULL, by_name);
        if (n < 0) {
            fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
            failed = 1;
            continue;
        }
        for (int k = 0; k < n; k++) {
            const char *name = ents[k]->d_name;
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[i], name);
            struct stat fs;
            /* files only; dot files and notes (README*) are not inputs */
            if (name[0] != '.' && strncmp(name, "README", 6) != 0 && stat(path, &fs) == 0 &&
                S_ISREG(fs.st_mode)) {
                failed |= replay_file(path) != 0;
                count++;
            }
            free(ents[k]);
        }
        free(ents);
    }
    printf("replay: %d inputs, %s\n", count, failed ? "some unreadable" : "no crash");
    return failed;
}
