// gpu_internal.cuh — what the engine's CUDA files share; not a public
// header (gpu.h is the engine's one public GPU header). The context
// (struct tb_gpu), the error and device-memory helpers, and the kernels
// (gpu_kernels.cuh). Layouts mirror cpu_forward.c: row-major
// [rows][features]; weights [out][in] (PyTorch), so y = x W^T.
//
// The files: kernels_*.cu (device code and its launch wrappers, a file
// per concern named for its CPU twin; kernels_device.cuh their shared
// device helpers),
// gpu_context.cu (device, stream, cuBLAS, device-memory accounting, the
// weights), gpu_forward.cu (the forward pass, in cpu_forward.c's order and
// names), gpu_ceilings.cu (the roofline's ceilings, the GEMV calibration).
#ifndef TB_ENGINE_GPU_INTERNAL_CUH
#define TB_ENGINE_GPU_INTERNAL_CUH

#include "gpu.h"
#include "gpu_tune.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <stddef.h>
#include <stdint.h>

#include "cuda_check.cuh"
#include "gpu_kernels.cuh"

struct gpu_layer {
    float *attn_norm, *mlp_norm; // [h]
    bf16 *wqkv;                  // [(nh + 2 nkv) hd][h]
    float *bqkv;                 // [(nh + 2 nkv) hd] or NULL
    float *q_norm, *k_norm;      // [hd] each, or NULL (QK-norm: Qwen3)
    bf16 *wo;                    // [h][nh hd]
    bf16 *wgu;                   // [2 I][h]
    bf16 *wdown;                 // [h][I]; wgu and wdown NULL in a MoE layer
    // dtype = fp8 (fp8.h): the four projections as E4M3 codes, same
    // layouts, and one float scale per output row; the bf16 pointers
    // above are then NULL (freed once quantized)
    uint8_t *qqkv, *qo, *qgu, *qdown;
    float *sqkv, *so, *sgu, *sdown;
    // a MoE layer (tb_config_layer_is_moe), moe.h's layout; NULL otherwise
    bf16 *router;  // [E][h]
    bf16 *ex_gu;   // [E][2 mi][h]: expert e's gate rows, then up rows
    bf16 *ex_down; // [E][h][mi]
    float *score_bias; // [E] (LLaDA 2.x's expert_bias) or NULL
    bf16 *sh_gu;       // [2 S][h] shared experts (S = moe.shared_inter) or NULL
    bf16 *sh_down;     // [h][S]
    // dtype = fp8: the experts' and shared experts' E4M3 codes (layouts
    // as above) and float scales, one per output row ([E 2 mi], [E h],
    // [2 S], [h]); the bf16 pointers above then NULL. The router stays bf16.
    uint8_t *qex_gu, *qex_down, *qsh_gu, *qsh_down;
    float *sex_gu, *sex_down, *ssh_gu, *ssh_down;
};

// One device allocation made through dalloc.
struct dev_block {
    void *p;
    size_t bytes; // as requested from cudaMalloc
};

struct gemm_cache; // gpu_gemm.cu
struct fp8_gemm_cache; // gpu_gemm_fp8.cu

// cuBLAS's fixed workspace (bytes), shared by cuBLASLt (gpu_gemm.cu)
#define TB_GPU_BLAS_WS (64u << 20)

// weight shapes whose GEMV variant is kept (a model has 5: qkv, o,
// gate-up, down, head)
#define TB_GPU_GEMV_SHAPES 8
// The MoE router's settings as its kernels take them (gpu_moe.cu's
// k_moe_route, k_moe_router; moe.c's tb_moe_config): E experts, top k,
// sigmoid scores (else softmax) with a per-expert choice bias, groups,
// renormalisation, the routed scale
struct moe_route_args {
    int E, k, sigmoid;
    const float *bias;
    int n_group, topk_group, mask_inf, norm_topk;
    float scale;
};
// a batch-1 GEMV's variant kept for the weight shape out x in
struct gemv_shape_pick {
    int out, in, variant;
};

// the most layers tb_gpu_set_capture keeps (DFlash drafters read 5)
#define TB_GPU_MAX_CAPTURE 32

struct tb_gpu {
    tb_model_config cfg;
    // the greedy argmax's range: ids [0, pick_vocab) of each row of
    // vocab_size logits (tb_gpu_set_pick_vocab; vocab_size unless set)
    int pick_vocab;
    cudaDeviceProp prop;
    cublasHandle_t blas;
    cudaStream_t stream;
    void *blas_ws;
    // the span GEMMs' tuned cuBLASLt plans (gpu_gemm.cu), made on first
    // use; gemm_failed: cuBLASLt did not start, cublasGemmEx throughout
    gemm_cache *gemm;
    int gemm_failed;
    // device memory through dalloc/dfree (gpu.h: what is counted): the
    // blocks held, their bytes now, and the most since tb_gpu_reset_peak
    dev_block *blocks;
    size_t n_blocks, cap_blocks;
    size_t bytes_now, bytes_peak;
    bf16 *embed, *lm_head;
    float *final_norm, *inv_freq;
    gpu_layer *layers;
    // capacity
    int seqs, len, rows;
    bf16 *kc, *vc;     // [layers][seqs][len][kvd]
    float *x;          // [rows][h]
    bf16 *xn;          // [rows][h]
    float *qkv;        // [rows][qkvd]
    bf16 *q;           // [rows][nq]
    bf16 *att;         // [rows][nq]
    float *gu;         // [rows][2I]
    bf16 *act;         // [rows][I]
    float *logits;     // [rows][V]
    float *scores;     // [seqs * heads][rows/seqs][len] (batched attention; NULL until it runs
                       // where span attention is one kernel)
    size_t score_elems; // their size
    bf16 *probs;       // same shape, bf16
    int32_t *tok;      // [rows] device tokens
    int32_t *out_tok;  // [rows]
    double *out_conf;  // [rows]
    int *d_pos;        // decode position (device)
    int *d_pad;        // [seqs] left-padding positions of each sequence (device; 0 = none)
    int *d_rslot;      // [seqs] continuous batching: row b's cache slot (device)
    int *d_rpos;       // [seqs] and its position (device)
    int *h_rows;       // pinned [2 seqs]: their staging
    int *slot_len;     // [seqs] host: positions each slot holds (tb_gpu_prefill_slots, tb_gpu_decode_slots)
    const int *span_slots; // host [B], set during tb_gpu_prefill_slots and tb_gpu_forward_pick_rows: span
                           // sequence b is slot span_slots[b] (d_rslot holds the same); NULL: slot0 + b
    // speculative decoding's ragged spans (tb_gpu_span_slots): host [B],
    // sequence b's rows sit at positions [span_pos[b], + n) of its slot
    // and see keys [0, span_pos[b] + n) (d_rpos holds the same); NULL: every
    // sequence at the call's pos0
    const int *span_pos;
    // captured hidden states (tb_gpu_set_capture): the residual stream after
    // layers capture_layers[n_capture], device [capture_cap rows][n_capture]
    // [hidden] float (allocated by the first capturing call that needs
    // them), capture_rows of the last capturing call; capture_on: the call
    // running now captures
    int capture_layers[TB_GPU_MAX_CAPTURE];
    int n_capture, capture_on, capture_cap, capture_rows;
    float *capture;
    void **ptrs;       // batched-GEMM pointer arrays, every layer (device)
    void **hptrs;      // pinned host staging for them
    size_t ptr_cap;
    // decode graph
    cudaGraphExec_t graph;
    int graph_B;
    // the continuous-batching decode step, one graph per batch size B
    // (index B, [seqs + 1]): a server's batch changes size step by step
    cudaGraphExec_t *graph_slots;
    int pos;           // host copy of the decode position
    // the batch-1 GEMV's variant (gemv_pick, kernels_gemv.cu) per weight
    // shape, the fastest tb_gpu_bench_gemv measured at load; gemv_variant
    // for a shape not measured (the last measured one's); gemv_forced >= 0
    // makes every GEMV that variant (tests: tb_gpu_force_gemv_variant)
    int gemv_variant;
    gemv_shape_pick gemv_shapes[TB_GPU_GEMV_SHAPES];
    int n_gemv_shapes, gemv_forced;
    // the split-K variants' partial sums [4][gemv_part_out] and arrival
    // counters, one per row group (zero between launches)
    float *gemv_part;
    unsigned *gemv_count;
    int gemv_part_out;
    // split decode attention's splits per (sequence, head): 0 = as the
    // chip's size asks (gpu_forward.cu); else this many (measurements,
    // tests: tb_gpu_set_attn_splits)
    int att_splits;
    // batch-1 and small-batch decode (tb_gpu_set_decode_fusion): RMSNorm
    // and SwiGLU fused into the GEMVs, split attention; pdl: programmatic
    // dependent launches in the decode graph
    int fusion, pdl;
    // a span's attention in one kernel (gpu_attn_span.cu) where the
    // head_dim allows; 0: batched GEMMs around a softmax kernel (attn_span
    // in gpu_forward.cu). The environment's TB_GPU_SPAN_ATTN=0 turns it off.
    int span_fused;
    int span_shape; // its block shape (gpu_attn_span.cu; measurements)
    // the bf16 path's products of more than one row (spans, decode
    // batches) take QKV and gate-up as bf16 (gemm_bf16_out), not float: k_swiglu reads half the bytes, the GEMMs
    // write half (docs/PERFORMANCE.md). Not in models with MoE layers
    // (gpu_context.cu says why); the environment's TB_GPU_BF16_OUT=0 keeps
    // them float (measurements, tests).
    int span_bf16_out;
    // a span forward whose LM head reads fewer rows than it runs (the
    // diffusion picks' block, a prefill's last row) takes only those rows
    // past the last layer's QKV product (gpu_forward.cu's
    // last_layer_rows); the environment's TB_GPU_TRIM_LAST=0 runs every
    // row through it (measurements, tests)
    int trim_last;
    // dtype = fp8: the projections are E4M3 (gpu_layer's q*, s*), and so
    // is each projection's input (fp8.h: per row). A span of more than one
    // row quantizes its input into xq/xs ([rows][largest in] codes, [rows]
    // scales) for the FP8 GEMM (gpu_gemm_fp8.cu; fp8_gemm 1), or, where
    // that is not available (fp8_gemm 0), also dequantizes them into xdq
    // and the weights into wdq (bf16, exact; wdq the largest projection's
    // size) for the bf16 GEMM: the same products over the same codes.
    int fp8, fp8_gemm;
    uint8_t *xq;
    float *xs;
    bf16 *xdq, *wdq;
    fp8_gemm_cache *gemm_fp8; // its plans, made on first use
    float *fp8_t;             // [FP8_SCALAR_ROWS][largest out]: the small spans' unscaled products
    size_t fp8_t_floats;
    int gemm_fp8_failed;      // cuBLASLt could not plan it: fp8_gemm stays 0
    // the batch-1 FP8 GEMV's variant (kernels_fp8.cu, TB_GPU_FP8_GEMV_VARIANTS
    // of them) per weight shape, the fastest tb_gpu_bench_gemv_fp8 measured
    // at load; fp8_variant for a shape not measured, and for every shape
    // when fp8_forced (TB_GPU_FP8_GEMV, tb_gpu_set_fp8_gemv)
    int fp8_variant, fp8_forced;
    gemv_shape_pick fp8_shapes[TB_GPU_GEMV_SHAPES];
    int n_fp8_shapes;

    float *att_part;    // [seqs][nh][ATT_MAX_SPLIT][hd + 2] split attention's partials
    unsigned *att_count; // [seqs][nh] its arrival counters (zero between launches)
    pick_part *pick_parts; // [rows][PICK_MAX_CHUNKS] the LLaDA pick's partials (kernels_pick.cu's pick)
    // TB_GPU_PROFILE_CALL=N (gpu_forward.cu): the N-th decode step or
    // diffusion forward is bracketed by cudaProfilerStart/Stop for ncu
    int profile_call, profile_seen;
    // TB_GPU_KERNEL_PROFILE (gpu_kprof.h): this context is in the kernel table
    int kprof;
    int32_t *h_tok;    // pinned [rows]
    double *h_conf;    // pinned [rows]
    // roofline: work of the forwards since tb_gpu_take_work, by count
    double work_flops, work_bytes;
    // mixture of experts (cfg.n_experts > 0; gpu_moe.cu): the sparse
    // layers' config, the spans above moe_gemv_max_rows rows that take
    // the experts' GEMMs, and the buffers for `rows` rows (P = rows x k
    // (row, slot) pairs; j = a pair's position grouped by expert)
    tb_moe_config moe;
    int n_moe_layers;
    int moe_gemv_max_rows;
    int moe_grid_all; // TB_GPU_MOE_GRID=all (gpu_moe.cu's moe_grid_rows)
    int moe_span_grouped; // spans above moe_gemv_max_rows by k_moe_gemm: 1, 0 (cuBLAS), -1 by the span (gpu_tune.h)
    int moe_gemm_tiles;   // the grouped GEMM's tiles (bf16): TB_GPU_MOE_TILES_*, -1 by the span (gpu_tune.h)
    int *moe_tile_e, *moe_tile_j, *moe_ntiles; // k_moe_tiles' list: [max tiles] x 2, [1]
    int moe_splits;          // the grouped GEMM's split over K: -1 by the tiles, 1 none, 2.. that many (gpu_tune.h)
    float *moe_part;         // the split's partial sums (moe_part_cap floats)
    unsigned *moe_arrive;    // its counters a (tile, column), zero between launches (moe_arrive_cap)
    size_t moe_part_cap, moe_arrive_cap;
    int moe_resident[3][2]; // blocks of the 16-, 64- and 128-row shapes (without, with SwiGLU) the chip holds at once
    long moe_split_launches; // launches of the grouped GEMM given more than one part (host count, tests)
    float *moe_logits;   // [rows][E]
    int *moe_idx;        // [P] experts chosen
    float *moe_w;        // [P] their weights
    int *moe_off;        // [E + 1] group starts, then [E] the chosen experts ascending (-1 past the last)
    int *moe_order;      // [P] j -> pair
    int *moe_pos;        // [P] pair -> j
    bf16 *moe_xg;        // [P][h] gathered inputs (cuBLAS path)
    float *moe_gu;       // [P][2 mi]
    bf16 *moe_act;       // [P][mi]
    float *moe_y;        // [P][h]
    // dtype = fp8: the layer's input rows and the pairs' activations as
    // E4M3 codes with a scale a row (fp8.h), and the spans' gathered rows
    uint8_t *moe_xq, *moe_aq, *moe_xgq; // [rows][h], [P][mi], [P][h]
    float *moe_xs, *moe_as, *moe_xgs;   // [rows], [P], [P]
    unsigned long long *moe_touched; // device: distinct experts summed over MoE layer calls (roofline)
    unsigned *moe_count; // arrivals (zero between launches): per column of the down GEMV's blocks, then k_moe_router's
    int *h_moe_off;      // pinned [E + 1]
    double work_moe_rows;  // rows through MoE layers since tb_gpu_take_work (host count)
    double work_moe_calls; // MoE layer calls since then
    double peak_flops, peak_bytes_per_s; // measured by tb_gpu_measure_ceilings; 0 = not yet
    // the CUDA device this context runs on (every entry point's caller
    // has it current: device 0, or gpu_tp.cu's rank thread)
    int device;
    // tensor parallelism (gpu_tp.cu, tp_split.h). A rank's context: its
    // shard's weights (cfg's heads and intermediate size are the rank's,
    // vocab_size whole), head_rows lm_head rows (its vocabulary slice;
    // vocab_size when whole), and comm (an ncclComm_t; NULL: none). The
    // row-parallel products (wo, down) write their partial sum into x on
    // ranks > 0 and add it to the residual on rank 0; an all-reduce then
    // completes x. A sliced head writes logits_part [rows][ceil(V / tp)]
    // and an all-gather (gath [tp][rows][ceil(V / tp)]) rebuilds logits
    // [rows][V] on every rank, so the picks and the graph's fed-back token
    // are the same on all of them.
    int head_rows;
    int tp, tp_rank;
    void *comm;
    float *logits_part, *gath;
    // a group's context (tb_gpu_create_tp): no weights of its own; every
    // entry point runs on ranks[0 .. n_ranks) (one thread each) instead
    tb_gpu **ranks;
    int n_ranks;
    char error[512];
};

// Host helpers shared by the .cu files (C++ names: nothing clashes with
// the engine's C code; hidden like the rest).
namespace tbgpu {

// Write the context's error message; returns -1.
int fail(tb_gpu *g, const char *fmt, ...);
// Every device allocation goes through these (gpu_context.cu).
int dalloc(tb_gpu *g, void **p, size_t bytes);
void dfree(tb_gpu *g, void *p);
// y[rows][out] (+)= x[rows][in] W[out][in]^T for rows > 1 (gpu_gemm.cu:
// cuBLASLt with a timed algorithm per shape), and its plans' release.
int gemm_bf16(tb_gpu *g, float *y, const bf16 *x, const bf16 *w, int rows, int out, int in, float beta);
// y[rows][out] = x W^T rounded to bf16 (float32 accumulation), for the
// products whose consumer reads bf16 anyway (span_bf16_out below);
// cublasGemmEx's default algorithm, tuned or not
int gemm_bf16_out(tb_gpu *g, bf16 *y, const bf16 *x, const bf16 *w, int rows, int out, int in);
void gemm_free(tb_gpu *g);
// Whether gemm_bf16 times algorithms (TB_GPU_GEMM_TUNE=1; off by default).
int gemm_tuning(tb_gpu *g);
// dtype = fp8 above one row (gpu_gemm_fp8.cu): whether the device and
// cuBLASLt run FP8 GEMMs with per-row and per-channel scales (makes the
// plan cache); y[rows][out] (+)= xs[r] ws[o] (XQ[rows][in] WQ[out][in]^T)
// over E4M3 codes, float32 out, or, where deferred is given and beta is
// 0, y = the bare products and *deferred = 1: the caller's next kernel
// applies xs and ws; its plans' release.
int gemm_fp8_available(tb_gpu *g);
// the same for n shapes (outs[i] x ins[i]) other than g->cfg's four
// projections (gpu_dgemma.cu's bare context)
int gemm_fp8_available_for(tb_gpu *g, int n, const int *outs, const int *ins);
int gemm_fp8(tb_gpu *g, float *y, const uint8_t *xq, const float *xs, const uint8_t *wq, const float *ws, int rows,
             int out, int in, float beta, int *deferred);
void gemm_fp8_free(tb_gpu *g);
// Free the forward's buffers (gpu_forward.cu, as tb_cpu_state_free).
void free_buffers(tb_gpu *g);
// gpu_attn_span.cu: span attention in one kernel. fits: this model's
// head_dim has the kernel; init raises its shared-memory limit (context
// creation); run: as attn_span (gpu_forward.cu) for layer l.
int attn_span_fused_fits(const tb_gpu *g);
int attn_span_fused_init(tb_gpu *g);
int attn_span_fused(tb_gpu *g, int l, int B, int slot0, int pos0, int n, int n_attend, int causal);
// (g->span_pos set: each sequence at its own position, d_rpos, seeing
// keys [0, its position + n); pos0 and n_attend unused)
// The MoE feed-forward (gpu_moe.cu): refuse what it does not compute, its
// buffers for `rows` rows, and layer l's FFN over g->xn added into g->x
// (graphable: no host wait, the grouped GEMV whatever the rows; norm_w
// given: xn is not made yet, the fused router computes it from g->x with
// these RMSNorm weights, which moe_router_norms must have allowed); the
// distinct experts counted since the last take (then reset).
int moe_check(tb_gpu *g);
int moe_reserve(tb_gpu *g, int rows);
void moe_free(tb_gpu *g);
int moe_router_norms(const tb_gpu *g, int rows);
int moe_ffn(tb_gpu *g, int l, int rows, int graphable, const float *norm_w);
int moe_take_touched(tb_gpu *g, double *touched);
// A device counter's value, read and set to zero on g's stream (waits for
// it): the distinct experts counted by k_moe_group, here and in
// gpu_dgemma.cu.
int take_device_count(tb_gpu *g, unsigned long long *count, unsigned long long *out);
// The grouped GEMM over every expert in one launch (gpu_moe.cu's
// k_moe_gemm, k_moe_gemm_async): Y[j][out] = W[e] x_j (float) for the
// grouped positions j of P pairs over E experts (off [E + 1] on the
// device: expert e's positions [off[e], off[e + 1])), x_j = X[order[j] /
// k] (gather) or X[j]; fp8: W and X E4M3 codes, their row scales WS
// [E][out] and XS applied. Its tile list (k_moe_tiles: up to
// moe_tile_capacity(P, E) entries in e and j, the count in n) made first
// where make_tiles, else reused (the same P: the same tile shape). in % 8
// == 0 (fp8: % 16). moe_grouped_fits: whether P pairs' tiles fit a grid.
// The pipelined shapes split the K steps of a launch whose tiles are too
// few to fill the chip (gpu_tune.h's tb_gpu_set_moe_splits): part, the
// parts' sums [splits][P][out] (part_cap floats), and arrive, a counter
// a (tile, column of tiles) (arrive_cap; zero between launches); NULL:
// no split.
struct moe_tiles {
    int *e, *j, *n;
    float *part;
    unsigned *arrive;
    size_t part_cap, arrive_cap;
};
int moe_tile_capacity(int P, int E);
int moe_gemm_prepare(tb_gpu *g); // the kernels' shared-memory limits, once a context
bool moe_grouped_fits(int P, int E);
int moe_gemm_grouped(tb_gpu *g, int fp8, const void *W, const void *X, const float *WS, const float *XS,
                     const int *off, const int *order, int k, int gather, int P, int E, const moe_tiles &t,
                     int make_tiles, float *Y, int out, int in);
// bf16 gate-up product of the pairs (rows gathered by order) with its
// SwiGLU: act [P][mi] = silu(gate) up, by the pipelined GEMM's epilogue
// under TB_GPU_FUSE_SWIGLU (no float [P][2 mi] round trip, no k_swiglu),
// else through gu [P][2 mi] and k_swiglu; the same bits either way
// (test_gpu's check_moe_tiles). Makes the tiles (t), for the down
// product too.
int moe_gemm_gate_up(tb_gpu *g, const bf16 *W, const bf16 *X, const int *off, const int *order, int k, int P, int E,
                     const moe_tiles &t, float *gu, bf16 *act, int mi, int in);
// Tensor parallelism (gpu_tp.cu): a context for device `device` whose
// lm_head has head_rows rows (tb_gpu_create's body); the collectives on
// a rank's stream (graph-capturable): x[count] summed over the ranks in
// place, and the vocabulary slices of logits_part gathered into logits
// [rows][vocab]; the group's context freed.
int create_on(tb_gpu **out, const tb_model_config *cfg, const tb_model *cpu, uint64_t seed, int device,
              int head_rows, int fp8, char *err, size_t err_size);
int tp_allreduce(tb_gpu *g, float *x, size_t count);
int tp_gather_logits(tb_gpu *g, int rows);
void tp_free_group(tb_gpu *g);
// A group's entry points: each runs gpu.h's on every rank (gpu_tp.cu).
int tp_reserve(tb_gpu *g, int seqs, int len, int rows);
int tp_set_padding(tb_gpu *g, const int *pad, int n);
size_t tp_bytes(const tb_gpu *g, int peak);
int tp_prefill(tb_gpu *g, const int32_t *tokens, int B, int P, int32_t *next, float *logits_out);
int tp_decode(tb_gpu *g, int32_t *next, int B, float *logits_out);
int tp_prefill_slots(tb_gpu *g, const int32_t *tokens, int B, int P, const int *slots, int32_t *next,
                     float *logits_out);
int tp_decode_slots(tb_gpu *g, const int *slots, int B, int32_t *next, float *logits_out);
int tp_logits(tb_gpu *g, const int32_t *tokens, int B, int pos0, int n, int n_attend, int causal, float *logits);
int tp_forward_pick(tb_gpu *g, const int32_t *canvas, int rows, int B, int L, int pos0, int n, int n_attend,
                    int pick0, int npick, int kind, double cfg_scale, int shifted, int32_t *x0, double *conf);
int tp_forward_logits(tb_gpu *g, const int32_t *canvas, int rows, int L, int pos0, int n, int n_attend, int pick0,
                      int npick, int shifted, float *logits);
int tp_forward_pick_rows(tb_gpu *g, const int32_t *canvas, int L, const int *rows, int n_rows, int pos0, int n,
                         int n_attend, int mask_block, int pick0, int npick, int kind, int shifted, int32_t never,
                         int32_t *x0, double *conf);
void tp_take_work(tb_gpu *g, double *flops, double *bytes, double *expert_reads, double *moe_rows);

// Launch kernel k on g's stream, as a programmatic dependent launch when
// pdl (the kernel waits with griddepcontrol.wait before it reads what an
// earlier kernel wrote); errors surface through cudaGetLastError.
template <typename... KArgs, typename... Args>
inline void launch(tb_gpu *g, void (*k)(KArgs...), dim3 grid, dim3 block, size_t smem, int pdl, Args... args)
{
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = g->stream;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = pdl ? 1 : 0;
    (void)cudaLaunchKernelEx(&cfg, k, ((KArgs)args)...);
}

// Keep variant v for shape out x in in a table of *n picks (a shape
// measured again: its entry replaced; a full table: the last entry's).
void keep_shape_pick(gemv_shape_pick *t, int *n, int out, int in, int v);
// The GEMVs' calibration at load (gpu_ceilings.cu): shape out x in timed,
// fp8's variants or bf16's, and the fastest kept; or the variant
// TB_GPU_GEMV_PICKS / TB_GPU_FP8_PICKS gives for the shape, not timed.
int calibrate_gemv_shape(tb_gpu *g, int fp8, int out, int in);

inline int qkv_dim(const tb_model_config *c) { return (c->n_heads + 2 * c->n_kv_heads) * c->head_dim; }
// Blocks of 256 threads for n elements (grid-stride kernels cap it).
inline unsigned blocks_for(size_t n) { return (unsigned)((n + 255) / 256 > 65535 ? 65535 : (n + 255) / 256); }

} // namespace tbgpu

#endif
