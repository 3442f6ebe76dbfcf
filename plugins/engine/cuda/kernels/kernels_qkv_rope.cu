// kernels_qkv_rope.cu — after the QKV product: bias, q/k norm, RoPE, and
// k/v into the cache (CPU twin: cpu_forward.c's layer_forward: its bias,
// q/k norm, rope() and cache write).
#include "gpu_internal.cuh"
#include "kernels_device.cuh"

// Bias, half-split RoPE on q and k (over the first rd dims of a head,
// pairs (i, i + rd/2); dims from rd on unrotated: partial rotary), k/v
// into the cache, q to bf16. Grid (row, group of QKV_POST_WARPS heads of
// q, k and v), a warp per head, lanes over the pairs of dims; the row's
// rotation (cos, sin of each pair's angle: the same for every head of the
// row) is computed once per block into shared memory (rd floats, dynamic).
// Positions pos0 + (row % n_new), or *d_pos in decode. A left-padded
// sequence's RoPE positions start at its first real token (pos - pad[b]),
// as on the CPU; the cache slot stays pos.
template <typename In>
__device__ __forceinline__ void qkv_post(const In *qkv, const float *bias, const float *q_norm, const float *k_norm, float eps,
               const float *inv_freq, int n_new, int pos0, const int *d_pos, const int *row_slot, const int *row_pos,
               const int *pad, bf16 *kc, bf16 *vc, int len, bf16 *q_out, int nh, int nkv, int hd, int rd,
               const float *sx, const float *sw)
{
    extern __shared__ float rot[]; // [rd / 2] cos, then [rd / 2] sin
    griddep_wait();
    griddep_launch();
    int r = blockIdx.x, b = r / n_new;
    // sequence b of the call: cache sequence b at a shared position, or
    // (row_pos given: continuous batching) slot row_slot[b] at its own
    int pos = (row_pos ? row_pos[b] : d_pos ? *d_pos : pos0) + r % n_new;
    if (row_slot)
        b = row_slot[b];
    int rpos = pos >= pad[b] ? pos - pad[b] : 0;
    int nq = nh * hd, kvd = nkv * hd, qkvd = nq + 2 * kvd, half = rd / 2;
    int head0 = blockIdx.y * QKV_POST_WARPS;
    if (head0 < nh + nkv) // the block holds a q or k head: the row's rotation
        for (int i = threadIdx.x; i < half; i += blockDim.x) {
            float ang = (float)rpos * inv_freq[i];
            rot[i] = cosf(ang);
            rot[half + i] = sinf(ang);
        }
    __syncthreads();
    int head = head0 + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (head >= nh + 2 * nkv)
        return;
    const In *v = qkv + (size_t)r * qkvd + (size_t)head * hd;
    const float *bb = bias ? bias + (size_t)head * hd : NULL;
    const float *swh = sw ? sw + (size_t)head * hd : NULL;
    float sxr = sx ? sx[blockIdx.x] : 1.0f;
    size_t at = ((size_t)b * len + pos) * kvd;
    bf16 *dst = head < nh         ? q_out + (size_t)r * nq + (size_t)head * hd
                : head < nh + nkv ? kc + at + (size_t)(head - nh) * hd
                                  : vc + at + (size_t)(head - nh - nkv) * hd;
    qkv_head(v, bb, swh, sxr, head < nh ? q_norm : head < nh + nkv ? k_norm : NULL, eps,
             head < nh + nkv ? rot : NULL, hd, rd, dst, lane);
}
// k_qkv_post over the product as float (the FP8 GEMM's, the GEMV's, or
// with TB_GPU_BF16_OUT=0) or as bf16 (gemm_bf16_out's): one signature, so
// the caller picks either by pointer
#define QKV_POST_KERNEL(name, In)                                                                                       \
    __global__ void __launch_bounds__(QKV_POST_WARPS * 32)                                                              \
        name(const void *qkv, const float *bias, const float *q_norm, const float *k_norm, float eps,                    \
             const float *inv_freq, int n_new, int pos0, const int *d_pos, const int *row_slot, const int *row_pos,   \
             const int *pad, bf16 *kc, bf16 *vc, int len, bf16 *q_out, int nh, int nkv, int hd, int rd,               \
             const float *sx, const float *sw)                                                                        \
    {                                                                                                                  \
        qkv_post((const In *)qkv, bias, q_norm, k_norm, eps, inv_freq, n_new, pos0, d_pos, row_slot, row_pos, pad, kc, vc, len,   \
                 q_out, nh, nkv, hd, rd, sx, sw);                                                                      \
    }
QKV_POST_KERNEL(k_qkv_post, float)
QKV_POST_KERNEL(k_qkv_post_bf16, bf16)
