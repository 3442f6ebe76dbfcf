/* membw.c — this machine's memory read bandwidth, the ceiling of batch-1
 * decode on the CPU (every weight is read once per token).
 *
 * Reads a buffer far larger than the caches with every thread (OpenMP),
 * summing floats so the loads cannot be elided; reports the median of
 * several passes in GB/s (10^9 bytes). usage: membw [MiB] [passes] */
#define _GNU_SOURCE
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 2048;
    int passes = argc > 2 ? atoi(argv[2]) : 9;
    if (passes < 1 || passes > 1000)
        passes = 9;
    size_t n = mib * 1024 * 1024 / sizeof(float);
    float *a = malloc(n * sizeof(float));
    if (!a) {
        fprintf(stderr, "membw: cannot allocate %zu MiB\n", mib);
        return 1;
    }
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) /* touch with the same threads that read */
        a[i] = (float)(i & 1023) * 0.001f;
    double *gbs = malloc((size_t)passes * sizeof(double)), sink = 0;
    for (int p = 0; p < passes; p++) {
        double t0 = now();
        /* Integer XOR of the bits: associative, so the compiler vectorizes
         * it (-O3) and the loop measures memory, not an FP add chain. */
        const uint32_t *w = (const uint32_t *)a;
        uint32_t x = 0;
#pragma omp parallel for schedule(static) reduction(^ : x)
        for (size_t i = 0; i < n; i++)
            x ^= w[i];
        double s = x;
        double t = now() - t0;
        sink += s;
        gbs[p] = (double)n * sizeof(float) / t / 1e9;
    }
    qsort(gbs, (size_t)passes, sizeof *gbs, cmp);
    printf("read bandwidth: %.2f GB/s (median of %d passes over %zu MiB, %d threads; min %.2f, max %.2f)%s\n",
           gbs[passes / 2], passes, mib, omp_get_max_threads(), gbs[0], gbs[passes - 1], sink == 42 ? " " : "");
    free(gbs);
    free(a);
    return 0;
}
