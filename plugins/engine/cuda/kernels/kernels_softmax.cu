// kernels_softmax.cu — the masked row softmax of a span's attention
// scores into bf16 probabilities (CPU twin: cpu_forward.c's layer_forward, the
// softmax of its scores under visible_keys' mask and the left padding).
#include "gpu_internal.cuh"
#include "kernels_device.cuh"

// Row softmax of scores [sequence][head][n][n_keys] into bf16
// probabilities; causal rows (causal 1) see keys up to their own position
// pos0 + t, block-causal ones (causal k > 1) to the end of their block of
// k positions (blocks counted from position 0).
// Keys [0, pad[b]) are left padding, masked for real rows (a padding row
// attends as usual; nothing reads it), as on the CPU.
// The body of k_softmax and k_softmax_slots (row_slot: the call's
// sequence b is cache slot row_slot[b], whose padding applies).
__device__ void softmax_row(const float *sc, bf16 *p, int n, int n_keys, int pos0, int causal, const int *pad,
                            const int *row_slot, int nh, float *red)
{
    size_t row = blockIdx.x;
    int t = (int)(row % n), visible = n_keys;
    if (causal > 0) { // causal (1) or block-causal (k > 1): to the end of the row's block
        long end = ((long)(pos0 + t) / causal + 1) * causal;
        visible = end < n_keys ? (int)end : n_keys;
    }
    int b = (int)(row / ((size_t)n * nh));
    if (row_slot)
        b = row_slot[b];
    int lo = pos0 + t >= pad[b] ? pad[b] : 0;
    const float *x = sc + row * n_keys;
    bf16 *y = p + row * n_keys;
    float mx = -INFINITY;
    for (int j = lo + threadIdx.x; j < visible; j += blockDim.x)
        mx = fmaxf(mx, x[j]);
    for (int o = 16; o > 0; o >>= 1)
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, o));
    if (threadIdx.x % 32 == 0)
        red[threadIdx.x / 32] = mx;
    __syncthreads();
    mx = red[0];
    for (int w = 1; w < (int)blockDim.x / 32; w++)
        mx = fmaxf(mx, red[w]);
    __syncthreads();
    float sum = 0;
    for (int j = lo + threadIdx.x; j < visible; j += blockDim.x)
        sum += __expf(x[j] - mx);
    sum = block_sum(sum, red);
    float inv = 1.0f / sum;
    for (int j = threadIdx.x; j < n_keys; j += blockDim.x)
        y[j] = __float2bfloat16(j >= lo && j < visible ? __expf(x[j] - mx) * inv : 0.0f);
}

__global__ void k_softmax(const float *sc, bf16 *p, int n, int n_keys, int pos0, int causal, const int *pad, int nh)
{
    __shared__ float red[32];
    softmax_row(sc, p, n, n_keys, pos0, causal, pad, NULL, nh, red);
}

__global__ void k_softmax_slots(const float *sc, bf16 *p, int n, int n_keys, int pos0, int causal, const int *pad,
                                const int *row_slot, int nh)
{
    __shared__ float red[32];
    softmax_row(sc, p, n, n_keys, pos0, causal, pad, row_slot, nh, red);
}

// softmax_row's rows, a warp per row and SOFTMAX_WARP_ROWS rows a block,
// for n_keys <= 32 K: the row's scores stay in registers (K a lane), so
// the scores are read once, exp once, and no block barrier. The same
// values as softmax_row (its max, __expf(x - max) / sum) but for the
// order of the sum.
#define SOFTMAX_WARP_ROWS 8
template <int K>
__global__ void __launch_bounds__(SOFTMAX_WARP_ROWS * 32)
    k_softmax_warp(const float *sc, bf16 *p, size_t n_rows, int n, int n_keys, int pos0, int causal, const int *pad,
                   const int *row_slot, int nh)
{
    size_t row = (size_t)blockIdx.x * SOFTMAX_WARP_ROWS + threadIdx.x / 32;
    if (row >= n_rows)
        return;
    int lane = threadIdx.x % 32;
    int t = (int)(row % n), visible = n_keys;
    if (causal > 0) {
        long end = ((long)(pos0 + t) / causal + 1) * causal;
        visible = end < n_keys ? (int)end : n_keys;
    }
    int b = (int)(row / ((size_t)n * nh));
    if (row_slot)
        b = row_slot[b];
    int lo = pos0 + t >= pad[b] ? pad[b] : 0;
    const float *x = sc + row * n_keys;
    bf16 *y = p + row * n_keys;
    float e[K];
    float mx = -INFINITY;
#pragma unroll
    for (int k = 0; k < K; k++) {
        int j = lane + 32 * k;
        e[k] = j >= lo && j < visible ? x[j] : -INFINITY;
        mx = fmaxf(mx, e[k]);
    }
    for (int o = 16; o > 0; o >>= 1)
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, o));
    float sum = 0;
#pragma unroll
    for (int k = 0; k < K; k++) {
        int j = lane + 32 * k;
        e[k] = j >= lo && j < visible ? __expf(e[k] - mx) : 0.0f;
        sum += e[k];
    }
    for (int o = 16; o > 0; o >>= 1)
        sum += __shfl_xor_sync(0xffffffff, sum, o);
    float inv = 1.0f / sum;
#pragma unroll
    for (int k = 0; k < K; k++) {
        int j = lane + 32 * k;
        if (j < n_keys)
            y[j] = __float2bfloat16(j >= lo && j < visible ? e[k] * inv : 0.0f);
    }
}

namespace tbgpu {

void softmax_span(tb_gpu *g, const float *sc, bf16 *p, size_t n_rows, int n, int n_keys, int pos0, int causal,
                  const int *pad, const int *row_slot, int nh)
{
    unsigned blocks = (unsigned)((n_rows + SOFTMAX_WARP_ROWS - 1) / SOFTMAX_WARP_ROWS);
    dim3 block(SOFTMAX_WARP_ROWS * 32);
    if (n_keys <= 32 * 4)
        k_softmax_warp<4><<<blocks, block, 0, g->stream>>>(sc, p, n_rows, n, n_keys, pos0, causal, pad, row_slot, nh);
    else if (n_keys <= 32 * 8)
        k_softmax_warp<8><<<blocks, block, 0, g->stream>>>(sc, p, n_rows, n, n_keys, pos0, causal, pad, row_slot, nh);
    else if (n_keys <= 32 * 16)
        k_softmax_warp<16><<<blocks, block, 0, g->stream>>>(sc, p, n_rows, n, n_keys, pos0, causal, pad, row_slot, nh);
    else if (n_keys <= 32 * 32)
        k_softmax_warp<32><<<blocks, block, 0, g->stream>>>(sc, p, n_rows, n, n_keys, pos0, causal, pad, row_slot, nh);
    else
        k_softmax_slots<<<(unsigned)n_rows, 256, 0, g->stream>>>(sc, p, n, n_keys, pos0, causal, pad, row_slot, nh);
}

} // namespace tbgpu
