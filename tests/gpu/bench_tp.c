/* bench_tp.c — figures, not a test (tests/gpu/run_tp.sh): tensor
 * parallelism's cost and speed on a preset's random weights.
 *
 *   bench_tp PRESET B P N TP...   (TP 0 = one device without NCCL)
 *
 * Per configuration: batch-B greedy decode after a P-token prefill, N
 * graph-replayed steps timed on the host clock around the calls (each
 * returns after its stream syncs), the median of 3 runs -> tokens/s for
 * the node and per GPU; for a group, the in-place all-reduce of one
 * step's B x hidden floats (median of 200, CUDA events) times the 2 per
 * layer -> all-reduce time per step; peak device memory per GPU. For a
 * diffusion preset, one bidirectional forward with picks over P + N
 * positions (batch 1), median of 5. TB_BENCH_DTYPE=fp8: dtype = fp8
 * weights and products at tp 0. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu_tune.h"
#include "model.h"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    if (argc < 6) {
        fprintf(stderr, "usage: bench_tp PRESET B P N TP...\n");
        return 2;
    }
    const char *preset = argv[1];
    int B = atoi(argv[2]), P = atoi(argv[3]), N = atoi(argv[4]);
    char err[512];
    tb_model_config cfg;
    if (tb_preset_config(preset, &cfg, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    int diffusion = tb_arch_is_diffusion(cfg.arch);
    /* TB_BENCH_DTYPE=fp8: dtype = fp8 at tp 0 (fp8.h; tensor parallelism has none) */
    const char *dtype = getenv("TB_BENCH_DTYPE");
    int fp8 = dtype && strcmp(dtype, "fp8") == 0;
    printf("%s (%s), batch %d, prompt %d, gen %d, %d CUDA device(s)\n", preset, diffusion ? "diffusion" : "ar", B, P,
           N, tb_gpu_device_count());
    for (int a = 5; a < argc; a++) {
        int tp = atoi(argv[a]);
        tb_gpu *g = NULL;
        int rc = tp == 0 ? tb_gpu_create_dtype(&g, &cfg, NULL, 1, fp8, err, sizeof err)
                         : tb_gpu_create_tp(&g, &cfg, NULL, 1, tp, err, sizeof err);
        if (rc != 0) {
            printf("tp %d: not run: %s\n", tp, err);
            continue;
        }
        int L = P + N, ok = 1;
        if (tb_gpu_reserve(g, diffusion ? 1 : B, L + 1, diffusion ? L : B * P, err, sizeof err) != 0) {
            printf("tp %d: %s\n", tp, err);
            tb_gpu_free(g);
            continue;
        }
        tb_gpu_reset_peak(g);
        // TB_BENCH_RUNS: more timed calls (a sustained run: the clocks under
        // the power limit), with the first and last fifths' medians printed
        enum { MAX_RUNS = 1000 };
        double t[MAX_RUNS], warm = 0; // warm: the first call's time (graph capture, GEMM algorithm timing)
        int runs = diffusion ? 5 : 3;
        if (getenv("TB_BENCH_RUNS") && atoi(getenv("TB_BENCH_RUNS")) > 0)
            runs = atoi(getenv("TB_BENCH_RUNS")) < MAX_RUNS ? atoi(getenv("TB_BENCH_RUNS")) : MAX_RUNS;
        int32_t *tok = calloc((size_t)B * (P > L ? P : L), sizeof(int32_t)), *next = calloc((size_t)B, sizeof(int32_t));
        double *conf = calloc((size_t)L, sizeof(double));
        int32_t *x0 = calloc((size_t)L, sizeof(int32_t));
        for (int i = 0; i < B * P; i++)
            tok[i] = (int32_t)((i * 7919) % (cfg.vocab_size - 8));
        for (int r = -1; r < runs && ok; r++) { // r = -1: warm-up (graph capture)
            if (diffusion) {
                for (int i = P; i < L; i++)
                    tok[i] = cfg.mask_id;
                double t0 = now_s();
                ok = tb_gpu_forward_pick(g, tok, 1, 1, L, 0, L, L, P, N, 0, 0, 0, x0, conf) == 0;
                if (r >= 0)
                    t[r] = now_s() - t0;
                else
                    warm = now_s() - t0;
            } else {
                ok = tb_gpu_prefill(g, tok, B, P, next, NULL) == 0;
                double t0 = now_s();
                for (int s = 0; s < N - 1 && ok; s++)
                    ok = tb_gpu_decode(g, next, B, NULL) == 0;
                if (r >= 0)
                    t[r] = now_s() - t0;
                else
                    warm = now_s() - t0;
            }
        }
        if (!ok) {
            printf("tp %d: %s\n", tp, tb_gpu_error(g));
            tb_gpu_free(g);
            free(tok), free(next), free(conf), free(x0);
            continue;
        }
        if (runs >= 10) { // in time order, before the sort
            int fifth = runs / 5;
            double first[MAX_RUNS / 5], last[MAX_RUNS / 5];
            memcpy(first, t, fifth * sizeof t[0]);
            memcpy(last, t + runs - fifth, fifth * sizeof t[0]);
            qsort(first, (size_t)fifth, sizeof t[0], cmp_d);
            qsort(last, (size_t)fifth, sizeof t[0], cmp_d);
            printf("tp %d: %d calls: median of the first %d %.3f ms, of the last %d %.3f ms\n", tp, runs, fifth,
                   first[fifth / 2] * 1e3, fifth, last[fifth / 2] * 1e3);
        }
        qsort(t, (size_t)runs, sizeof t[0], cmp_d);
        double med = t[runs / 2];
        int gpus = tp == 0 ? 1 : tp;
        printf("tp %d: first run %.2f ms (graph capture, GEMM algorithm timing), median %.2f ms\n", tp, warm * 1e3,
               med * 1e3);
        if (diffusion)
            printf("tp %d: forward over %d positions with %d picks: %.2f ms\n", tp, L, N, med * 1e3);
        else
            printf("tp %d: decode %.1f tok/s per node, %.1f per GPU (%.3f ms/step)\n", tp, B * (N - 1) / med,
                   B * (N - 1) / med / gpus, med * 1e3 / (N - 1));
        for (int r = 0; r < gpus; r++)
            printf("tp %d: rank %d peak device memory %.2f GB\n", tp, r, tb_gpu_rank_peak_bytes(g, r) / 1e9);
        double us;
        if (tp > 0) {
            size_t count = (size_t)(diffusion ? L : B) * cfg.hidden_size;
            if (tb_gpu_tp_time_allreduce(g, count, 200, &us) == 0)
                printf("tp %d: all-reduce of %zu floats: %.2f us; x %d per step (2 per layer) = %.1f us per step\n", tp,
                       count, us, 2 * cfg.n_layers, us * 2 * cfg.n_layers);
            else
                printf("tp %d: all-reduce timing: %s\n", tp, tb_gpu_error(g));
        }
        tb_gpu_free(g);
        free(tok), free(next), free(conf), free(x0);
    }
    return 0;
}
