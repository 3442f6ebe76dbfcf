/* bench_moe.c — the two expert paths of gpu_moe.cu timed on the
 * qwen3-30b-a3b preset (random bf16 weights made on the device), to choose
 * TB_GPU_MOE_GEMV_ROWS: a prefill of B x 128 tokens (each expert's rows by
 * the grouped GEMV, by cuBLAS per expert, or by the grouped tensor-core
 * GEMM) for B = 1, 4, 32 (not with a second argument "decode"), and the
 * decode step (always the GEMV: it is captured in a CUDA graph) at B = 1,
 * 2, 4, 8, 16 and 32 with the roofline's count of what one step reads. Median of 5
 * after a warm-up, host clock around calls that end in a stream sync.
 * Not a test: figures only (tests/gpu/run_moe.sh). */
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

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    const char *preset = argc > 1 ? argv[1] : "qwen3-30b-a3b";
    char err[512];
    tb_model_config cfg;
    tb_gpu *g = NULL;
    if (tb_preset_config(preset, &cfg, err, sizeof err) != 0 || tb_gpu_create(&g, &cfg, NULL, 1, err, sizeof err) != 0 ||
        tb_gpu_reserve(g, 32, 160, 32 * 128, err, sizeof err) != 0) {
        fprintf(stderr, "bench_moe: %s\n", err);
        return 1;
    }
    int32_t *tok = malloc(sizeof(int32_t) * 32 * 128), next[32];
    for (int i = 0; i < 32 * 128; i++)
        tok[i] = (i * 7919) % (cfg.vocab_size - 1);
    const int Bs[3] = {1, 4, 32};
    const char *paths[3] = {"the grouped GEMV", "cuBLAS per expert", "the grouped GEMM"};
    int decode_only = argc > 2 && strcmp(argv[2], "decode") == 0;
    for (int bi = 0; bi < 3 && !decode_only; bi++)
        for (int path = 0; path < 3; path++) {
            int B = Bs[bi];
            tb_gpu_set_moe_gemv_rows(g, path == 0 ? B * 128 : 0);
            tb_gpu_set_moe_span_grouped(g, path == 2);
            double t[6];
            for (int r = 0; r < 6; r++) {
                double t0 = now_s();
                if (tb_gpu_prefill(g, tok, B, 128, next, NULL) != 0) {
                    fprintf(stderr, "bench_moe: %s\n", tb_gpu_error(g));
                    return 1;
                }
                t[r] = now_s() - t0;
            }
            qsort(t + 1, 5, sizeof t[0], cmp);
            printf("bench_moe %s prefill %d x 128 by %-18s %8.2f ms  (%.0f prompt tok/s)\n", preset, B,
                   paths[path], t[3] * 1e3, B * 128 / t[3]);
        }
    tb_gpu_set_moe_gemv_rows(g, TB_GPU_MOE_GEMV_ROWS);
    tb_gpu_set_moe_span_grouped(g, -1);
    const int Ds[6] = {1, 2, 4, 8, 16, 32};
    for (int di = 0; di < 6; di++) {
        int B = Ds[di];
        if (tb_gpu_prefill(g, tok, B, 128, next, NULL) != 0)
            return 1;
        double t[6], f, bytes, reads, rows;
        for (int r = 0; r < 6; r++) {
            tb_gpu_take_work(g, &f, &bytes, &reads, &rows);
            double t0 = now_s();
            if (tb_gpu_decode(g, next, B, NULL) != 0) {
                fprintf(stderr, "bench_moe: %s\n", tb_gpu_error(g));
                return 1;
            }
            t[r] = now_s() - t0;
        }
        tb_gpu_take_work(g, &f, &bytes, &reads, &rows);
        qsort(t + 1, 5, sizeof t[0], cmp);
        printf("bench_moe %s decode step batch %d: %.3f ms (%.0f tok/s); last step read %.1f experts a MoE layer "
               "(%.2f a token), %.2f GB = %.0f GB/s\n",
               preset, B, t[3] * 1e3, B / t[3], reads / (rows / B), reads / rows, bytes / 1e9, bytes / t[3] / 1e9);
    }
    tb_gpu_free(g);
    free(tok);
    return 0;
}
