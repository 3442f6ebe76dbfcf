/* engine_cuda.c — engine.h's CUDA implementation: gpu.h's forward (bf16
 * weights, CUDA graphs per decode step), greedy choices on the device (only
 * the chosen tokens come back), the roofline's work counted there. */
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "gpu.h"

typedef struct cuda_engine {
    tb_loaded *ld; /* ld->gpu: the device model */
} cuda_engine;

static tb_gpu *gpu_of(void *ctx)
{
    return ((cuda_engine *)ctx)->ld->gpu;
}

static int cuda_reserve(void *ctx, int seqs, int len, int rows, char *err, size_t err_size)
{
    return tb_gpu_reserve(gpu_of(ctx), seqs, len, rows, err, err_size);
}

static void cuda_set_threads(void *ctx, int n)
{
    (void)ctx; /* the device's threads are its kernels' */
    (void)n;
}

/* tb_gpu_prefill forgets the sequences itself */
static int cuda_set_padding(void *ctx, const int *pad, int n)
{
    return tb_gpu_set_padding(gpu_of(ctx), pad, pad ? n : 0);
}

static int cuda_prefill(void *ctx, const int32_t *tokens, int B, int P, int32_t *next, float *logits)
{
    return tb_gpu_prefill(gpu_of(ctx), tokens, B, P, next, logits);
}

static int cuda_decode(void *ctx, int32_t *next, int B, float *logits)
{
    return tb_gpu_decode(gpu_of(ctx), next, B, logits);
}

static int cuda_prefill_slots(void *ctx, const int32_t *tokens, const int *slots, int B, int P, int32_t *next,
                              float *logits)
{
    return tb_gpu_prefill_slots(gpu_of(ctx), tokens, B, P, slots, next, logits);
}

static int cuda_decode_slots(void *ctx, const int *slots, int B, int32_t *next, float *logits)
{
    return tb_gpu_decode_slots(gpu_of(ctx), slots, B, next, logits);
}

static int cuda_logits_all(void *ctx, const int32_t *tokens, int n, float *logits)
{
    return tb_gpu_logits(gpu_of(ctx), tokens, 1, 0, n, n, 1, logits);
}

static int cuda_forward_span(void *ctx, const int32_t *tokens, int B, int pos0, int n, int n_attend, float *logits)
{
    return tb_gpu_logits(gpu_of(ctx), tokens, B, pos0, n, n_attend, 0, logits);
}

static int cuda_verify_slots(void *ctx, const int32_t *tokens, const int *slots, int B, int n, int32_t *argmax,
                             float *logits)
{
    return tb_gpu_verify_slots(gpu_of(ctx), tokens, slots, B, n, argmax, logits);
}

static int cuda_truncate_slot(void *ctx, int slot, int len)
{
    return tb_gpu_truncate_slot(gpu_of(ctx), slot, len);
}

static int cuda_draft_span_slots(void *ctx, const int32_t *tokens, const int *slots, int B, int n, int32_t *argmax,
                                 float *logits)
{
    return tb_gpu_draft_slots(gpu_of(ctx), tokens, slots, B, n, argmax, logits);
}

static int cuda_set_capture(void *ctx, const int *layers, int n_layers)
{
    return tb_gpu_set_capture(gpu_of(ctx), layers, n_layers);
}

/* a device pointer (engine.h) */
static const float *cuda_captured(void *ctx, int *rows)
{
    return tb_gpu_captured(gpu_of(ctx), rows);
}

static void cuda_work_start(void *ctx)
{
    tb_loaded_work_start(((cuda_engine *)ctx)->ld);
}

static void cuda_work_report(void *ctx, tb_result *res)
{
    tb_loaded_work_report(((cuda_engine *)ctx)->ld, res);
}

static const char *cuda_device_name(void *ctx)
{
    return tb_gpu_device_name(gpu_of(ctx));
}

static int cuda_tensor_parallel(void *ctx)
{
    return tb_gpu_tp_size(gpu_of(ctx));
}

static const char *cuda_kernels(void *ctx)
{
    if (!((cuda_engine *)ctx)->ld->fp8)
        return "cuBLAS bf16 GEMMs (fp32 accumulate), own GEMV at batch 1, CUDA graph per decode step";
    return strcmp(tb_gpu_gemm_dtype(gpu_of(ctx)), "fp8") == 0
               ? "FP8 W8A8 (E4M3 weights, E4M3 inputs scaled per row): own E4M3 GEMV at batch 1, else "
                 "cuBLASLt FP8 GEMMs (fp32 accumulate), CUDA graph per decode step"
               : "FP8 W8A8 (E4M3 weights, E4M3 inputs scaled per row): own E4M3 GEMV at batch 1, else both "
                 "dequantized to bf16 for cuBLAS bf16 GEMMs (no FP8 GEMM on this device), CUDA graph per "
                 "decode step";
}

static const char *cuda_error(void *ctx)
{
    return tb_gpu_error(gpu_of(ctx));
}

static void cuda_free(void *ctx)
{
    free(ctx); /* the device model is ld's */
}

static const tb_engine_iface cuda_iface = {
    .reserve = cuda_reserve,
    .set_threads = cuda_set_threads,
    .set_padding = cuda_set_padding,
    .prefill = cuda_prefill,
    .decode = cuda_decode,
    .prefill_slots = cuda_prefill_slots,
    .decode_slots = cuda_decode_slots,
    .logits_all = cuda_logits_all,
    .forward_span = cuda_forward_span,
    .forward_span_rows = NULL, /* block diffusion picks on the device */
    .verify_slots = cuda_verify_slots,
    .truncate_slot = cuda_truncate_slot,
    .draft_span_slots = cuda_draft_span_slots,
    .set_capture = cuda_set_capture,
    .captured = cuda_captured,
    .work_start = cuda_work_start,
    .work_report = cuda_work_report,
    .device_name = cuda_device_name,
    .tensor_parallel = cuda_tensor_parallel,
    .kernels = cuda_kernels,
    .error = cuda_error,
    .free = cuda_free,
};

int tb_engine_open_cuda(tb_engine *e, tb_loaded *ld)
{
    cuda_engine *c = calloc(1, sizeof *c);
    if (!c)
        return -1;
    c->ld = ld;
    e->iface = &cuda_iface;
    e->ctx = c;
    return 0;
}
