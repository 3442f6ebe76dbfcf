// kernels_pick.cu — choosing tokens on the device: the greedy argmax
// (CPU twin: sampling.c's tb_argmax) and diffusion's pick of each
// position's token and confidence (CPU twin: plugins/diffusion/pick.c's tb_dllm_pick_row).
#include "gpu_internal.cuh"
#include "kernels_device.cuh"

// First maximum of each row's first V entries (torch.argmax), into
// out[row]; rows `stride` floats apart (the vocabulary; V < stride: a
// preset's ids beyond its tokenizer's are never chosen). One block per
// row, each thread with 4 independent loads in flight (in index order,
// so a thread keeps its first maximum), then a reduction that prefers
// the smaller index on ties.
__global__ void k_argmax(const float *logits, int stride, int V, int32_t *out)
{
    __shared__ float bv[1024];
    __shared__ int bi[1024];
    const float *x = logits + (size_t)blockIdx.x * stride;
    float best = -INFINITY;
    int idx = 0, n = blockDim.x, v = threadIdx.x;
    for (; v + 3 * n < V; v += 4 * n) {
        float a0 = x[v], a1 = x[v + n], a2 = x[v + 2 * n], a3 = x[v + 3 * n];
        if (a0 > best)
            best = a0, idx = v;
        if (a1 > best)
            best = a1, idx = v + n;
        if (a2 > best)
            best = a2, idx = v + 2 * n;
        if (a3 > best)
            best = a3, idx = v + 3 * n;
    }
    for (; v < V; v += n)
        if (x[v] > best)
            best = x[v], idx = v;
    bv[threadIdx.x] = best;
    bi[threadIdx.x] = idx;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            float o = bv[threadIdx.x + s];
            int oi = bi[threadIdx.x + s];
            if (o > bv[threadIdx.x] || (o == bv[threadIdx.x] && oi < bi[threadIdx.x]))
                bv[threadIdx.x] = o, bi[threadIdx.x] = oi;
        }
        __syncthreads();
    }
    if (threadIdx.x == 0)
        out[blockIdx.x] = bi[0];
}

// Diffusion pick for position r of [B][n]. Its logits come from row r, or
// (shifted, Dream) from the previous position of the same sequence; with
// cfg they are combined on the fly with the unconditional row
// uncond_offset floats further. Kinds as in gpu.h.
// never: a token whose logit counts as -inf (block samplers: the mask
// token), -1 = none.
struct pick_row {
    const float *c, *u;
    float cfg;
    int never;
    __device__ float operator[](int v) const
    {
        return v == never ? -INFINITY : cfg > 0 ? u[v] + (cfg + 1.0f) * (c[v] - u[v]) : c[v];
    }
};

__global__ void k_pick(const float *logits, int V, int npick, int nr, int off, int shifted, size_t uncond_offset,
                       float cfg, int kind, int never, int32_t *x0, double *conf)
{
    __shared__ float bv[256];
    __shared__ int bi[256];
    __shared__ double ds[256];
    int b = blockIdx.x / npick, i = blockIdx.x % npick, li = off + i; // li: row within the nr computed
    size_t src = (size_t)b * nr + (shifted && li > 0 ? li - 1 : li);
    pick_row x = {logits + src * V, logits + src * V + uncond_offset, cfg, never};
    float best = -INFINITY;
    int idx = 0;
    for (int v = threadIdx.x; v < V; v += blockDim.x)
        if (x[v] > best)
            best = x[v], idx = v;
    bv[threadIdx.x] = best;
    bi[threadIdx.x] = idx;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            float o = bv[threadIdx.x + s];
            int oi = bi[threadIdx.x + s];
            if (o > bv[threadIdx.x] || (o == bv[threadIdx.x] && oi < bi[threadIdx.x]))
                bv[threadIdx.x] = o, bi[threadIdx.x] = oi;
        }
        __syncthreads();
    }
    float mx = bv[0];
    int am = bi[0];
    __syncthreads();
    if (kind == 0) { // LLaDA: float64 softmax probability of the argmax
        double sum = 0;
        for (int v = threadIdx.x; v < V; v += blockDim.x)
            sum += exp((double)x[v] - (double)mx);
        ds[threadIdx.x] = sum;
        __syncthreads();
        for (int s = blockDim.x / 2; s > 0; s >>= 1) {
            if (threadIdx.x < s)
                ds[threadIdx.x] += ds[threadIdx.x + s];
            __syncthreads();
        }
        if (threadIdx.x == 0) {
            x0[blockIdx.x] = am;
            conf[blockIdx.x] = 1.0 / ds[0];
        }
        return;
    }
    // Dream: float32 probabilities
    float sum = 0;
    for (int v = threadIdx.x; v < V; v += blockDim.x)
        sum += __expf(x[v] - mx);
    bv[threadIdx.x] = sum;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s)
            bv[threadIdx.x] += bv[threadIdx.x + s];
        __syncthreads();
    }
    float z = bv[0];
    __syncthreads();
    float acc = -INFINITY; // kind 2: second largest logit; kind 3: sum p log p
    if (kind == 2) {
        for (int v = threadIdx.x; v < V; v += blockDim.x)
            if (v != am && x[v] > acc)
                acc = x[v];
    } else {
        acc = 0;
        if (kind == 3)
            for (int v = threadIdx.x; v < V; v += blockDim.x) {
                float p = __expf(x[v] - mx) / z;
                acc += p * logf(p + 1e-10f);
            }
    }
    bv[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s)
            bv[threadIdx.x] = kind == 2 ? fmaxf(bv[threadIdx.x], bv[threadIdx.x + s]) : bv[threadIdx.x] + bv[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        x0[blockIdx.x] = am;
        float p1 = 1.0f / z;
        conf[blockIdx.x] = kind == 1 ? p1 : kind == 2 ? p1 - __expf(bv[0] - mx) / z : bv[0];
    }
}

// k_pick's kind 0 (LLaDA) split: grid (chunks, picked rows). Block c of
// picked row p takes logits [c chunk, (c + 1) chunk) of the row (pick_row
// as k_pick: shift, cfg, never) and writes its largest logit, that
// logit's first index, and the float64 sum of exp(logit - its max) to
// part[p][c] (an empty chunk: -inf, V, 0).
__global__ void k_pick_part(const float *logits, int V, int npick, int nr, int off, int shifted,
                            size_t uncond_offset, float cfg, int never, pick_part *part)
{
    __shared__ float bv[256];
    __shared__ int bi[256];
    __shared__ double ds[256];
    int p = blockIdx.y, b = p / npick, i = p % npick, li = off + i;
    size_t src = (size_t)b * nr + (shifted && li > 0 ? li - 1 : li);
    pick_row x = {logits + src * V, logits + src * V + uncond_offset, cfg, never};
    int chunk = (V + gridDim.x - 1) / gridDim.x, v0 = blockIdx.x * chunk, v1 = v0 + chunk < V ? v0 + chunk : V;
    float best = -INFINITY;
    int idx = V;
    for (int v = v0 + threadIdx.x; v < v1; v += blockDim.x)
        if (x[v] > best)
            best = x[v], idx = v;
    bv[threadIdx.x] = best;
    bi[threadIdx.x] = idx;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            float o = bv[threadIdx.x + s];
            int oi = bi[threadIdx.x + s];
            if (o > bv[threadIdx.x] || (o == bv[threadIdx.x] && oi < bi[threadIdx.x]))
                bv[threadIdx.x] = o, bi[threadIdx.x] = oi;
        }
        __syncthreads();
    }
    float mx = bv[0];
    int am = bi[0];
    double sum = 0;
    if (mx > -INFINITY)
        for (int v = v0 + threadIdx.x; v < v1; v += blockDim.x)
            sum += exp((double)x[v] - (double)mx);
    ds[threadIdx.x] = sum;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s)
            ds[threadIdx.x] += ds[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        part[(size_t)p * gridDim.x + blockIdx.x] = {ds[0], mx, am};
}

// The picked rows' partials combined, a warp per row: the first index of
// the row's largest logit (chunks in order, so the lowest index among
// equal maxima) and the float64 probability 1 / sum over chunks of
// sum_c exp(mx_c - max), as k_pick's kind 0.
__global__ void k_pick_combine(const pick_part *part, int n_picks, int chunks, int32_t *x0, double *conf)
{
    int p = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (p >= n_picks)
        return;
    const pick_part *pp = part + (size_t)p * chunks;
    float mx = -INFINITY;
    int am = INT_MAX;
    for (int c = lane; c < chunks; c += 32)
        if (pp[c].mx > mx || (pp[c].mx == mx && pp[c].idx < am))
            mx = pp[c].mx, am = pp[c].idx;
    for (int o = 16; o > 0; o >>= 1) {
        float om = __shfl_xor_sync(0xffffffff, mx, o);
        int oi = __shfl_xor_sync(0xffffffff, am, o);
        if (om > mx || (om == mx && oi < am))
            mx = om, am = oi;
    }
    double sum = 0;
    for (int c = lane; c < chunks; c += 32)
        if (pp[c].sum > 0)
            sum += pp[c].sum * exp((double)pp[c].mx - (double)mx);
    for (int o = 16; o > 0; o >>= 1)
        sum += __shfl_xor_sync(0xffffffff, sum, o);
    if (lane == 0) {
        x0[p] = mx > -INFINITY ? am : 0; // no finite logit: index 0, as k_pick
        conf[p] = 1.0 / sum;
    }
}

namespace tbgpu {

void pick(tb_gpu *g, const float *logits, int V, int n_picks, int npick, int nr, int off, int shifted,
          size_t uncond_offset, float cfg, int kind, int never, int32_t *x0, double *conf)
{
    if (n_picks < 1)
        return;
    if (kind != 0 || n_picks > 65535) {
        k_pick<<<n_picks, 256, 0, g->stream>>>(logits, V, npick, nr, off, shifted, uncond_offset, cfg, kind, never,
                                               x0, conf);
        return;
    }
    // chunks of at least 256 logits, enough blocks for about eight a
    // multiprocessor, at most PICK_MAX_CHUNKS (g->pick_parts's size)
    int chunks = 8 * g->prop.multiProcessorCount / n_picks, most = (V + 255) / 256;
    chunks = chunks > most ? most : chunks;
    chunks = chunks > PICK_MAX_CHUNKS ? PICK_MAX_CHUNKS : chunks < 1 ? 1 : chunks;
    k_pick_part<<<dim3(chunks, n_picks), 256, 0, g->stream>>>(logits, V, npick, nr, off, shifted, uncond_offset,
                                                              cfg, never, g->pick_parts);
    k_pick_combine<<<(n_picks + 7) / 8, 256, 0, g->stream>>>(g->pick_parts, n_picks, chunks, x0, conf);
}

} // namespace tbgpu
