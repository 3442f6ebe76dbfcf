// gpu_context.cu — a device context (gpu.h): the device, its stream and
// cuBLAS handle, every device allocation (dalloc/dfree keep the bytes held
// and their high-water mark), the weights (uploaded from the CPU model or
// made on the device), and the accessors.
#include "gpu_internal.cuh"
#include "gpu_kprof.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

namespace tbgpu {

int fail(tb_gpu *g, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->error, sizeof g->error, fmt, ap);
    va_end(ap);
    return -1;
}

// Every device allocation of the context goes through dalloc and dfree,
// so that bytes_now is what the context holds and bytes_peak its
// high-water mark (the per-call peak device memory).
int dalloc(tb_gpu *g, void **p, size_t bytes)
{
    *p = NULL;
    if (g->n_blocks == g->cap_blocks) {
        size_t cap = g->cap_blocks ? 2 * g->cap_blocks : 64;
        dev_block *b = (dev_block *)realloc(g->blocks, cap * sizeof *b);
        if (!b)
            return fail(g, "out of host memory");
        g->blocks = b;
        g->cap_blocks = cap;
    }
    size_t n = bytes ? bytes : 16;
    cudaError_t e = cudaMalloc(p, n);
    if (e != cudaSuccess) {
        size_t free_b = 0, total = 0;
        cudaMemGetInfo(&free_b, &total);
        *p = NULL;
        return fail(g, "out of device memory: %.2f GB more requested, %.2f of %.2f GB free (%s)", bytes / 1e9,
                    free_b / 1e9, total / 1e9, cudaGetErrorString(e));
    }
    g->blocks[g->n_blocks++] = {*p, n};
    g->bytes_now += n;
    if (g->bytes_now > g->bytes_peak)
        g->bytes_peak = g->bytes_now;
    return 0;
}

// Free a block from dalloc (NULL: nothing).
void dfree(tb_gpu *g, void *p)
{
    if (!p)
        return;
    for (size_t i = g->n_blocks; i-- > 0;)
        if (g->blocks[i].p == p) {
            g->bytes_now -= g->blocks[i].bytes;
            g->blocks[i] = g->blocks[--g->n_blocks];
            break;
        }
    cudaFree(p);
}

} // namespace tbgpu

using namespace tbgpu;

extern "C" int tb_gpu_probe(char *why, size_t why_size)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        snprintf(why, why_size, "no CUDA device (%s)", e != cudaSuccess ? cudaGetErrorString(e) : "count 0");
        return -1;
    }
    return 0;
}

static int upload_bf16(tb_gpu *g, bf16 **dst, const float *src, size_t n, float *stage)
{
    if (dalloc(g, (void **)dst, n * sizeof(bf16)))
        return -1;
    // stage f32 on the device, convert there. The copy goes on our stream:
    // a pageable cudaMemcpy may return before its DMA lands, and our
    // non-blocking stream would not wait for it.
    CK(cudaMemcpyAsync(stage, src, n * sizeof(float), cudaMemcpyHostToDevice, g->stream));
    k_f32_to_bf16<<<blocks_for(n), 256, 0, g->stream>>>(stage, *dst, n);
    LAUNCHED();
    CK(cudaStreamSynchronize(g->stream));
    return 0;
}

static int upload_f32(tb_gpu *g, float **dst, const float *src, size_t n)
{
    if (dalloc(g, (void **)dst, n * sizeof(float)))
        return -1;
    CK(cudaMemcpyAsync(*dst, src, n * sizeof(float), cudaMemcpyHostToDevice, g->stream));
    CK(cudaStreamSynchronize(g->stream));
    return 0;
}

static int random_bf16(tb_gpu *g, bf16 **dst, size_t n, uint64_t *seed)
{
    if (dalloc(g, (void **)dst, n * sizeof(bf16)))
        return -1;
    *seed += 0x632BE59BD9B4E019ULL;
    k_init_uniform<<<4096, 256, 0, g->stream>>>(*dst, n, *seed, 0.02f * 1.7320508f);
    LAUNCHED();
    return 0;
}

static int const_f32(tb_gpu *g, float **dst, size_t n, float v)
{
    float *h = (float *)malloc(n * sizeof(float));
    if (!h)
        return fail(g, "out of host memory");
    for (size_t i = 0; i < n; i++)
        h[i] = v;
    int rc = upload_f32(g, dst, h, n);
    free(h);
    return rc;
}

// dtype = fp8's bf16 path for spans: room for the largest projection
// dequantized.
static int alloc_wdq(tb_gpu *g)
{
    const tb_model_config *c = &g->cfg;
    size_t h = c->hidden_size, I = c->intermediate_size, nq = (size_t)c->n_heads * c->head_dim;
    size_t qkv = (size_t)(c->n_heads + 2 * c->n_kv_heads) * c->head_dim;
    size_t most = 2 * I * h > qkv * h ? 2 * I * h : qkv * h;
    most = h * nq > most ? h * nq : most;
    size_t S = g->moe.shared_inter; // the shared experts' products go this way too
    most = 2 * S * h > most ? 2 * S * h : most;
    return g->wdq ? 0 : dalloc(g, (void **)&g->wdq, most * sizeof(bf16));
}

// dtype = fp8: replace bf16 W[rows][in] by its E4M3 codes and row scales.
static int quantize_fp8(tb_gpu *g, bf16 **w, uint8_t **q, float **scale, size_t rows, size_t in)
{
    if (dalloc(g, (void **)q, rows * in) || dalloc(g, (void **)scale, rows * sizeof(float)))
        return -1;
    k_fp8_quantize_rows<<<(unsigned)rows, 256, 0, g->stream>>>(*w, (int)in, *q, *scale);
    LAUNCHED();
    CK(cudaStreamSynchronize(g->stream));
    dfree(g, *w);
    *w = NULL;
    return 0;
}

extern "C" int tb_gpu_create(tb_gpu **out, const tb_model_config *cfg, const tb_model *cpu, uint64_t seed,
                             char *err, size_t err_size)
{
    return tb_gpu_create_dtype(out, cfg, cpu, seed, 0, err, err_size);
}

extern "C" int tb_gpu_create_dtype(tb_gpu **out, const tb_model_config *cfg, const tb_model *cpu, uint64_t seed,
                                   int fp8, char *err, size_t err_size)
{
    int head_rows = cpu && cpu->lm_head_rows > 0 ? cpu->lm_head_rows : cfg->vocab_size;
    return create_on(out, cfg, cpu, seed, 0, head_rows, fp8, err, err_size);
}

// tb_gpu_create_dtype on device `device` with an LM head of head_rows rows
// (a tensor-parallel rank's vocabulary slice: gpu_tp.cu; fp8 0 there).
int tbgpu::create_on(tb_gpu **out, const tb_model_config *cfg, const tb_model *cpu, uint64_t seed, int device,
                     int head_rows, int fp8, char *err, size_t err_size)
{
    kprof_paused loading; // a load is not in TB_GPU_KERNEL_PROFILE's table
    *out = NULL;
    tb_gpu *g = (tb_gpu *)calloc(1, sizeof *g);
    if (!g) {
        snprintf(err, err_size, "out of host memory");
        return -1;
    }
    g->cfg = *cfg;
    g->pick_vocab = cfg->vocab_size;
    g->device = device;
    g->head_rows = head_rows;
    g->tp = 1;
    const tb_model_config *c = &g->cfg;
    size_t h = c->hidden_size, V = c->vocab_size, I = c->intermediate_size, Vh = (size_t)head_rows;
    size_t rows = qkv_dim(c), nq = (size_t)c->n_heads * c->head_dim;
    int rc = 0;
    float *stage = NULL;
#define TRY(x)          \
    do {                \
        if ((x) != 0) { \
            rc = -1;    \
            goto done;  \
        }               \
    } while (0)
    if (head_rows < 1 || head_rows > c->vocab_size || (head_rows != c->vocab_size && c->tie_word_embeddings)) {
        fail(g, "LM head of %d rows for a vocabulary of %d%s", head_rows, c->vocab_size,
             c->tie_word_embeddings ? " (tied to the embedding)" : "");
        rc = -1;
        goto done;
    }
    if (cudaSetDevice(device) != cudaSuccess || cudaGetDeviceProperties(&g->prop, device) != cudaSuccess) {
        fail(g, "no usable CUDA device %d", device);
        rc = -1;
        goto done;
    }
    if (cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking) != cudaSuccess ||
        cublasCreate(&g->blas) != CUBLAS_STATUS_SUCCESS) {
        fail(g, "cannot create a CUDA stream or cuBLAS handle");
        rc = -1;
        goto done;
    }
    cublasSetStream(g->blas, g->stream);
    // the fused decode path (tb_gpu_set_decode_fusion); the environment
    // selects others for measurements (docs/PERFORMANCE.md)
    g->fusion = getenv("TB_GPU_FUSION") ? atoi(getenv("TB_GPU_FUSION")) & TB_GPU_FUSE_ALL : TB_GPU_FUSE_DEFAULT;
    g->pdl = getenv("TB_GPU_PDL") ? atoi(getenv("TB_GPU_PDL")) != 0 : TB_GPU_PDL_DEFAULT;
    g->profile_call = getenv("TB_GPU_PROFILE_CALL") ? atoi(getenv("TB_GPU_PROFILE_CALL")) : 0;
    g->att_splits = getenv("TB_GPU_ATT_SPLITS") ? atoi(getenv("TB_GPU_ATT_SPLITS")) : 0;
    if (g->att_splits < 0 || g->att_splits > ATT_MAX_SPLIT)
        g->att_splits = 0;
    g->gemv_forced = getenv("TB_GPU_GEMV_VARIANT") ? atoi(getenv("TB_GPU_GEMV_VARIANT")) : -1;
    if (g->gemv_forced >= TB_GPU_GEMV_VARIANTS)
        g->gemv_forced = -1;
    g->fp8_variant = getenv("TB_GPU_FP8_GEMV") ? atoi(getenv("TB_GPU_FP8_GEMV")) : TB_GPU_FP8_GEMV_DEFAULT;
    g->fp8_forced = getenv("TB_GPU_FP8_GEMV") != NULL;
    if (g->fp8_variant < 0 || g->fp8_variant >= TB_GPU_FP8_GEMV_VARIANTS)
        g->fp8_variant = TB_GPU_FP8_GEMV_DEFAULT, g->fp8_forced = 0;
    // decode attention keeps its scores in shared memory: above 48 KB a
    // kernel must opt in
    if (c->n_experts > 0) { // the sparse layers' config, as the CPU path's (gpu_moe.cu)
        char why[256];
        tb_model_moe_config(c, &g->moe);
        if (tb_moe_config_check(&g->moe, why, sizeof why) != 0) {
            fail(g, "%s: %s", c->arch_name, why);
            rc = -1;
            goto done;
        }
        TRY(moe_check(g));
        for (int l = 0; l < c->n_layers; l++)
            g->n_moe_layers += tb_config_layer_is_moe(c, l);
        // TB_GPU_MOE_GEMV_ROWS=N (measurements): the grouped GEMV up to N rows
        g->moe_gemv_max_rows = getenv("TB_GPU_MOE_GEMV_ROWS") && atoi(getenv("TB_GPU_MOE_GEMV_ROWS")) >= 1
                                   ? atoi(getenv("TB_GPU_MOE_GEMV_ROWS"))
                                   : TB_GPU_MOE_GEMV_ROWS;
        // TB_GPU_MOE_GRID=all: the grouped GEMVs' grids over every expert
        // even where fewer are chosen (gpu_moe.cu; the measurement's baseline)
        g->moe_grid_all = getenv("TB_GPU_MOE_GRID") && strcmp(getenv("TB_GPU_MOE_GRID"), "all") == 0;
        const char *span = getenv("TB_GPU_MOE_SPAN"); // grouped, cublas, else by the span (gpu_tune.h)
        g->moe_span_grouped = span && strcmp(span, "grouped") == 0 ? 1 : span && strcmp(span, "cublas") == 0 ? 0 : -1;
        const char *tiles = getenv("TB_GPU_MOE_TILES"); // regs, wide, narrow, big, else by the span (gpu_tune.h)
        g->moe_gemm_tiles = !tiles                         ? -1
                            : strcmp(tiles, "regs") == 0   ? TB_GPU_MOE_TILES_REGS
                            : strcmp(tiles, "wide") == 0   ? TB_GPU_MOE_TILES_WIDE
                            : strcmp(tiles, "narrow") == 0 ? TB_GPU_MOE_TILES_NARROW
                            : strcmp(tiles, "big") == 0    ? TB_GPU_MOE_TILES_BIG
                                                           : -1;
        const char *split = getenv("TB_GPU_MOE_SPLIT"); // off (or 1), 2-8, auto (gpu_tune.h)
        g->moe_splits = !split                                            ? TB_GPU_MOE_SPLIT_DEFAULT
                        : strcmp(split, "off") == 0 || strcmp(split, "1") == 0 ? 1
                        : atoi(split) >= 2 && atoi(split) <= 8               ? atoi(split)
                                                                          : -1;
    }
    if (c->head_dim % 2 || c->head_dim > 256) {
        fail(g, "head_dim %d: the CUDA attention kernels need an even head_dim <= 256", c->head_dim);
        rc = -1;
        goto done;
    }
    if (cudaFuncSetAttribute(k_attn_decode, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)g->prop.sharedMemPerBlockOptin - 1024) != cudaSuccess || // minus its static part
        cudaFuncSetAttribute(k_attn_decode_split, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)g->prop.sharedMemPerBlockOptin - 1024) != cudaSuccess) {
        fail(g, "cannot raise the kernels' shared memory limits");
        rc = -1;
        goto done;
    }
    // (not with MoE layers: a router's near-ties move with every rounding
    // upstream of it, and the float products keep the GPU's expert choices
    // as close to the float reference's as they were)
    g->span_bf16_out = g->n_moe_layers == 0 && !(getenv("TB_GPU_BF16_OUT") && atoi(getenv("TB_GPU_BF16_OUT")) == 0);
    g->trim_last = !(getenv("TB_GPU_TRIM_LAST") && atoi(getenv("TB_GPU_TRIM_LAST")) == 0);
    g->span_fused = attn_span_fused_fits(g) && !(getenv("TB_GPU_SPAN_ATTN") && atoi(getenv("TB_GPU_SPAN_ATTN")) == 0);
    if (g->span_fused && attn_span_fused_init(g)) {
        rc = -1;
        goto done;
    }
    // a fixed workspace so cuBLAS never allocates inside graph capture
    TRY(dalloc(g, &g->blas_ws, TB_GPU_BLAS_WS));
    { // the split-K GEMVs' partials (4 slices at most) and counters, for
      // any one-row product of this model (the widest: the head or gate-up)
        size_t most = V > rows ? V : rows;
        size_t wide[] = {h, 2 * I, (size_t)c->n_experts, 2 * (size_t)c->moe_intermediate_size,
                         2 * (size_t)g->moe.shared_inter};
        for (size_t i = 0; i < sizeof wide / sizeof wide[0]; i++)
            most = wide[i] > most ? wide[i] : most;
        g->gemv_part_out = (int)most;
        TRY(dalloc(g, (void **)&g->gemv_part, 4 * most * sizeof(float)));
        TRY(dalloc(g, (void **)&g->gemv_count, (most + 1) * sizeof(unsigned))); // and NORM_OUT's grid counter
        TRY(cudaMemsetAsync(g->gemv_count, 0, (most + 1) * sizeof(unsigned), g->stream) == cudaSuccess ? 0 : fail(g, "cudaMemsetAsync failed"));
    }
    cublasSetWorkspace(g->blas, g->blas_ws, TB_GPU_BLAS_WS);
    cublasSetMathMode(g->blas, CUBLAS_DEFAULT_MATH);
    g->layers = (gpu_layer *)calloc((size_t)c->n_layers, sizeof *g->layers);
    if (!g->layers) {
        fail(g, "out of host memory");
        rc = -1;
        goto done;
    }
    if (cpu) {
        size_t biggest = V * h > I * 2 * h ? V * h : I * 2 * h;
        size_t experts = (size_t)c->n_experts * 2 * c->moe_intermediate_size * h;
        if (experts > biggest)
            biggest = experts;
        if (rows * h > biggest)
            biggest = rows * h;
        TRY(dalloc(g, (void **)&stage, biggest * sizeof(float)));
        TRY(upload_bf16(g, &g->embed, cpu->embed, V * h, stage));
        if (c->tie_word_embeddings)
            g->lm_head = g->embed;
        else
            TRY(upload_bf16(g, &g->lm_head, cpu->lm_head, Vh * h, stage));
        TRY(upload_f32(g, &g->final_norm, cpu->final_norm, h));
        for (int l = 0; l < c->n_layers; l++) {
            const tb_layer *L = &cpu->layers[l];
            gpu_layer *G = &g->layers[l];
            TRY(upload_f32(g, &G->attn_norm, L->attn_norm, h));
            TRY(upload_f32(g, &G->mlp_norm, L->mlp_norm, h));
            TRY(upload_bf16(g, &G->wqkv, L->wqkv, rows * h, stage));
            if (L->bqkv)
                TRY(upload_f32(g, &G->bqkv, L->bqkv, rows));
            if (L->q_norm) {
                TRY(upload_f32(g, &G->q_norm, L->q_norm, (size_t)c->head_dim));
                TRY(upload_f32(g, &G->k_norm, L->k_norm, (size_t)c->head_dim));
            }
            TRY(upload_bf16(g, &G->wo, L->wo, h * nq, stage));
            if (L->router) {
                size_t E = c->n_experts, mi = c->moe_intermediate_size;
                TRY(upload_bf16(g, &G->router, L->router, E * h, stage));
                TRY(upload_bf16(g, &G->ex_gu, L->experts_gate_up, E * 2 * mi * h, stage));
                TRY(upload_bf16(g, &G->ex_down, L->experts_down, E * h * mi, stage));
                if (L->score_bias)
                    TRY(upload_f32(g, &G->score_bias, L->score_bias, E));
                if (L->shared_gate_up) {
                    size_t S = g->moe.shared_inter;
                    TRY(upload_bf16(g, &G->sh_gu, L->shared_gate_up, 2 * S * h, stage));
                    TRY(upload_bf16(g, &G->sh_down, L->shared_down, h * S, stage));
                }
            } else {
                TRY(upload_bf16(g, &G->wgu, L->w_gate_up, 2 * I * h, stage));
                TRY(upload_bf16(g, &G->wdown, L->w_down, h * I, stage));
            }
        }
        TRY(upload_f32(g, &g->inv_freq, cpu->rope_inv_freq, (size_t)c->head_dim / 2));
    } else {
        uint64_t s = seed ^ 0x746F6B62656E6368ULL;
        TRY(random_bf16(g, &g->embed, V * h, &s));
        if (c->tie_word_embeddings)
            g->lm_head = g->embed;
        else
            TRY(random_bf16(g, &g->lm_head, Vh * h, &s));
        TRY(const_f32(g, &g->final_norm, h, 1.0f));
        for (int l = 0; l < c->n_layers; l++) {
            gpu_layer *G = &g->layers[l];
            TRY(const_f32(g, &G->attn_norm, h, 1.0f));
            TRY(const_f32(g, &G->mlp_norm, h, 1.0f));
            TRY(random_bf16(g, &G->wqkv, rows * h, &s));
            if (c->qkv_bias)
                TRY(const_f32(g, &G->bqkv, rows, 0.01f));
            if (c->qk_norm) {
                TRY(const_f32(g, &G->q_norm, (size_t)c->head_dim, 1.0f));
                TRY(const_f32(g, &G->k_norm, (size_t)c->head_dim, 1.0f));
            }
            TRY(random_bf16(g, &G->wo, h * nq, &s));
            if (tb_config_layer_is_moe(c, l)) {
                size_t E = c->n_experts, mi = c->moe_intermediate_size;
                TRY(random_bf16(g, &G->router, E * h, &s));
                TRY(random_bf16(g, &G->ex_gu, E * 2 * mi * h, &s));
                TRY(random_bf16(g, &G->ex_down, E * h * mi, &s));
                if (c->arch == TB_ARCH_LLADA2_MOE)
                    TRY(const_f32(g, &G->score_bias, E, 0.0f));
                if (g->moe.shared_inter > 0) {
                    size_t S = g->moe.shared_inter;
                    TRY(random_bf16(g, &G->sh_gu, 2 * S * h, &s));
                    TRY(random_bf16(g, &G->sh_down, h * S, &s));
                }
            } else {
                TRY(random_bf16(g, &G->wgu, 2 * I * h, &s));
                TRY(random_bf16(g, &G->wdown, h * I, &s));
            }
        }
        float *inv = (float *)malloc((size_t)c->head_dim / 2 * sizeof(float));
        if (!inv) {
            fail(g, "out of host memory");
            rc = -1;
            goto done;
        }
        tb_rope_inv_freq(c, inv);
        rc = upload_f32(g, &g->inv_freq, inv, (size_t)c->head_dim / 2);
        free(inv);
        TRY(rc);
    }
    if (fp8) {
        if (tb_config_check_fp8(c, g->error, sizeof g->error) != 0) {
            rc = -1;
            goto done;
        }
        g->fp8 = 1;
        for (int l = 0; l < c->n_layers; l++) {
            gpu_layer *G = &g->layers[l];
            TRY(quantize_fp8(g, &G->wqkv, &G->qqkv, &G->sqkv, rows, h));
            TRY(quantize_fp8(g, &G->wo, &G->qo, &G->so, h, nq));
            if (G->wgu) { // a dense feed-forward
                TRY(quantize_fp8(g, &G->wgu, &G->qgu, &G->sgu, 2 * I, h));
                TRY(quantize_fp8(g, &G->wdown, &G->qdown, &G->sdown, h, I));
            }
            if (G->ex_gu) { // a MoE layer's experts, every expert's rows one matrix (the router stays bf16)
                size_t E = g->moe.n_experts, mi = g->moe.expert_inter, S = g->moe.shared_inter;
                TRY(quantize_fp8(g, &G->ex_gu, &G->qex_gu, &G->sex_gu, E * 2 * mi, h));
                TRY(quantize_fp8(g, &G->ex_down, &G->qex_down, &G->sex_down, E * h, mi));
                if (G->sh_gu) {
                    TRY(quantize_fp8(g, &G->sh_gu, &G->qsh_gu, &G->ssh_gu, 2 * S, h));
                    TRY(quantize_fp8(g, &G->sh_down, &G->qsh_down, &G->ssh_down, h, S));
                }
            }
        }
        // FP8 tensor-core GEMMs for spans where the device and cuBLASLt have
        // them (TB_GPU_FP8_GEMM=0 says no: the dequantizing path, measured
        // against them); else wdq for the bf16 path
        const char *env = getenv("TB_GPU_FP8_GEMM");
        g->fp8_gemm = !(env && strcmp(env, "0") == 0) && gemm_fp8_available(g);
        if (!g->fp8_gemm)
            TRY(alloc_wdq(g));
    }
    if (cudaStreamSynchronize(g->stream) != cudaSuccess) {
        fail(g, "weight initialization failed: %s", cudaGetErrorString(cudaGetLastError()));
        rc = -1;
    }
    // a layer's feed-forward weights, dense or every expert's: a MoE model's
    // intermediate_size can be small beside them (Qwen3-30B-A3B's 6,144
    // x 2,048 is under 2^24, its 128 experts' 201 M elements are not)
    if (rc == 0 && ((size_t)c->intermediate_size * c->hidden_size >= (1u << 24) ||
                    (size_t)g->moe.n_experts * g->moe.expert_inter * g->moe.hidden >= (1u << 24))) {
        /* pick the fastest batch-1 GEMV for this device on each weight
         * shape a decode step reads with one (a fraction of a second at
         * load): a narrow one (o, down: h rows) wants another shape than
         * gate-up. The dense FFN's shapes only where a layer is dense;
         * under dtype = fp8 the projections' FP8 GEMV (its variants round
         * alike; not when TB_GPU_FP8_GEMV forces one) and the head's bf16 */
        int shapes[5][2] = {{(int)rows, (int)h}, {(int)h, (int)nq}, {2 * (int)I, (int)h}, {(int)h, (int)I},
                            {(int)Vh, (int)h}};
        int dense = g->n_moe_layers < c->n_layers;
        for (int i = 0; i < 5 && rc == 0; i++) {
            if (i >= 2 && i <= 3 && !dense)
                continue;
            int fp8 = g->fp8 && i < 4;
            if (!(fp8 && g->fp8_forced))
                rc = calibrate_gemv_shape(g, fp8, shapes[i][0], shapes[i][1]);
        }
    }
done:
#undef TRY
    dfree(g, stage); // transient: in bytes_peak, no longer in bytes_now
    if (rc != 0) {
        snprintf(err, err_size, "%s", g->error);
        tb_gpu_free(g);
        return -1;
    }
    // the kernel table starts after the load and its GEMV calibration
    char what[384];
    snprintf(what, sizeof what, "%.100s%s on %.256s", c->arch_name, fp8 ? " (dtype fp8)" : "", g->prop.name);
    g->kprof = tb_gpu_kprof_begin(what);
    *out = g;
    return 0;
}

extern "C" int tb_gpu_fp8_weights(tb_gpu *g, int l, int which, uint8_t *q, float *scale)
{
    const tb_model_config *c = &g->cfg;
    if (!g->fp8 || l < 0 || l >= c->n_layers || which < 0 || which > 3)
        return fail(g, "no fp8 projection %d of layer %d", which, l);
    size_t h = c->hidden_size, I = c->intermediate_size, nq = (size_t)c->n_heads * c->head_dim;
    const gpu_layer *G = &g->layers[l];
    const uint8_t *dq[4] = {G->qqkv, G->qo, G->qgu, G->qdown};
    const float *ds[4] = {G->sqkv, G->so, G->sgu, G->sdown};
    size_t rows[4] = {(size_t)qkv_dim(c), h, 2 * I, h}, in[4] = {h, nq, h, I};
    if (!dq[which]) // a MoE layer's feed-forward: its experts are not one projection
        return fail(g, "layer %d has no dense projection %d", l, which);
    CK(cudaMemcpyAsync(q, dq[which], rows[which] * in[which], cudaMemcpyDeviceToHost, g->stream));
    CK(cudaMemcpyAsync(scale, ds[which], rows[which] * sizeof(float), cudaMemcpyDeviceToHost, g->stream));
    CK(cudaStreamSynchronize(g->stream));
    return 0;
}

extern "C" void tb_gpu_free(tb_gpu *g)
{
    if (!g)
        return;
    if (g->ranks) { // a tensor-parallel group (gpu_tp.cu)
        tp_free_group(g);
        return;
    }
    if (g->kprof)
        tb_gpu_kprof_end();
    free_buffers(g);
    if (g->layers) {
        for (int l = 0; l < g->cfg.n_layers; l++) {
            gpu_layer *G = &g->layers[l];
            void *p[] = {G->attn_norm, G->mlp_norm, G->wqkv,  G->bqkv,   G->q_norm, G->k_norm, G->wo,
                         G->wgu,       G->wdown,    G->router, G->ex_gu, G->ex_down, G->qqkv,  G->qo,
                         G->qgu,       G->qdown,    G->sqkv,  G->so,     G->sgu,     G->sdown,
                         G->score_bias, G->sh_gu,   G->sh_down, G->qex_gu, G->qex_down, G->qsh_gu,
                         G->qsh_down,  G->sex_gu,   G->sex_down, G->ssh_gu, G->ssh_down};
            for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
                dfree(g, p[i]);
        }
        free(g->layers);
    }
    if (g->lm_head != g->embed)
        dfree(g, g->lm_head);
    dfree(g, g->embed);
    dfree(g, g->final_norm);
    dfree(g, g->inv_freq);
    gemm_free(g);
    gemm_fp8_free(g);
    dfree(g, g->blas_ws);
    dfree(g, g->gemv_part);
    dfree(g, g->gemv_count);
    dfree(g, g->wdq);
    if (g->blas)
        cublasDestroy(g->blas);
    if (g->stream)
        cudaStreamDestroy(g->stream);
    free(g->blocks);
    free(g);
}

extern "C" int tb_gpu_pci_bus_id(const tb_gpu *g, char *buf, int len)
{
    // a tensor-parallel group: its first rank's device (gpu_tp.cu)
    int dev = g->ranks ? g->ranks[0]->device : g->device;
    return cudaDeviceGetPCIBusId(buf, len, dev) == cudaSuccess ? 0 : -1;
}

// a tensor-parallel group's: its ranks' summed (per rank: tb_gpu_rank_peak_bytes)
extern "C" size_t tb_gpu_bytes(const tb_gpu *g) { return g->ranks ? tp_bytes(g, 0) : g->bytes_now; }
extern "C" size_t tb_gpu_peak_bytes(const tb_gpu *g) { return g->ranks ? tp_bytes(g, 1) : g->bytes_peak; }
extern "C" void tb_gpu_set_pick_vocab(tb_gpu *g, int n)
{
    g->pick_vocab = n >= 1 && n <= g->cfg.vocab_size ? n : g->cfg.vocab_size;
}

extern "C" void tb_gpu_reset_peak(tb_gpu *g)
{
    for (int r = 0; r < g->n_ranks; r++)
        tb_gpu_reset_peak(g->ranks[r]);
    g->bytes_peak = g->bytes_now;
}
extern "C" const char *tb_gpu_device_name(const tb_gpu *g) { return g->prop.name; }
extern "C" const char *tb_gpu_error(const tb_gpu *g) { return g->error; }

extern "C" void tb_gpu_set_fp8_gemv(tb_gpu *g, int variant)
{
    g->fp8_forced = variant >= 0 && variant < TB_GPU_FP8_GEMV_VARIANTS;
    g->fp8_variant = g->fp8_forced ? variant : TB_GPU_FP8_GEMV_DEFAULT;
    tb_gpu_set_decode_fusion(g, g->fusion, g->pdl); // the captured decode steps hold the old kernel
}

extern "C" int tb_gpu_set_fp8_gemm(tb_gpu *g, int on)
{
    if (!g->fp8)
        return fail(g, "tb_gpu_set_fp8_gemm: not a dtype = fp8 context");
    if (on && !gemm_fp8_available(g))
        return fail(g, "no FP8 GEMM on this device");
    if (!on && alloc_wdq(g))
        return -1;
    if ((on != 0) != (g->fp8_gemm != 0)) {
        g->fp8_gemm = on != 0;
        g->peak_flops = 0; // the FLOP/s ceiling is of the products' GEMM: measured again
        free_buffers(g);   // the next reserve makes what this path reads (xdq)
        g->seqs = g->len = g->rows = 0;
    }
    return 0;
}

extern "C" void tb_gpu_set_attn_splits(tb_gpu *g, int splits)
{
    for (int r = 0; r < g->n_ranks; r++)
        tb_gpu_set_attn_splits(g->ranks[r], splits);
    g->att_splits = splits < 0 || splits > ATT_MAX_SPLIT ? 0 : splits;
    tb_gpu_set_decode_fusion(g, g->fusion, g->pdl); // the captured decode steps hold the old grid
}

extern "C" void tb_gpu_force_gemv_variant(tb_gpu *g, int variant)
{
    for (int r = 0; r < g->n_ranks; r++)
        tb_gpu_force_gemv_variant(g->ranks[r], variant);
    g->gemv_forced = variant >= 0 && variant < TB_GPU_GEMV_VARIANTS ? variant : -1;
    tb_gpu_set_decode_fusion(g, g->fusion, g->pdl); // the captured decode steps hold the old kernels
}

extern "C" void tb_gpu_set_decode_fusion(tb_gpu *g, int fusion, int pdl)
{
    for (int r = 0; r < g->n_ranks; r++) {
        (void)cudaSetDevice(g->ranks[r]->device);
        tb_gpu_set_decode_fusion(g->ranks[r], fusion, pdl);
    }
    if (g->ranks)
        (void)cudaSetDevice(g->ranks[0]->device);
    g->fusion = fusion, g->pdl = pdl;
    // the captured decode steps hold the old kernels
    if (g->graph)
        cudaGraphExecDestroy(g->graph);
    g->graph = NULL;
    g->graph_B = 0;
    for (int b = 0; g->graph_slots && b <= g->seqs; b++)
        if (g->graph_slots[b]) {
            cudaGraphExecDestroy(g->graph_slots[b]);
            g->graph_slots[b] = NULL;
        }
}
