// gpu_tp.cu — tensor parallelism over the GPUs of one host (gpu.h's
// tb_gpu_create_tp; tp_split.h has the split).
//
// One process drives N devices, so a backend stays one worker process to
// the runner. A group's context holds N rank contexts, rank r on device r
// with rank r's shard (tb_tp_split_model, or rank-seeded random weights for a
// preset) and its NCCL communicator (ncclCommInitAll). Each entry point on
// the group runs the same entry point on every rank, one thread per rank
// (NCCL needs the ranks' collectives issued concurrently), and returns rank
// 0's results: every rank ends a forward with the whole logits (the head's
// all-gather), so its picks are the same. tp = 1 runs the same path: one
// rank, the collectives over one device.
//
// NCCL is loaded at run time (dlopen of libnccl.so.2, or TB_NCCL_LIB), so
// a CUDA build without NCCL still loads; only the group needs it. Built
// without nccl.h (TB_HAVE_NCCL unset), tb_gpu_create_tp says so.
#include "gpu_internal.cuh"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <thread>
#include <vector>

extern "C" {
#include "tp_split.h"
}

#ifdef TB_HAVE_NCCL
#include <nccl.h>
#endif

using namespace tbgpu;

#ifdef TB_HAVE_NCCL
// The NCCL functions the group uses, from the library loaded at run time.
static struct {
    int tried;
    char why[300];
    ncclResult_t (*comm_init_all)(ncclComm_t *, int, const int *);
    ncclResult_t (*comm_destroy)(ncclComm_t);
    ncclResult_t (*all_reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
    ncclResult_t (*all_gather)(const void *, void *, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
    const char *(*error_string)(ncclResult_t);
    ncclResult_t (*version)(int *);
} nccl;

// 0, or -1 with the reason in nccl.why (once per process).
static int nccl_load(void)
{
    if (nccl.tried)
        return nccl.why[0] ? -1 : 0;
    nccl.tried = 1;
    const char *lib = getenv("TB_NCCL_LIB") ? getenv("TB_NCCL_LIB") : "libnccl.so.2";
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(nccl.why, sizeof nccl.why, "cannot load NCCL (%s): put libnccl.so.2 on LD_LIBRARY_PATH or set TB_NCCL_LIB",
                 dlerror());
        return -1;
    }
    *(void **)&nccl.comm_init_all = dlsym(h, "ncclCommInitAll");
    *(void **)&nccl.comm_destroy = dlsym(h, "ncclCommDestroy");
    *(void **)&nccl.all_reduce = dlsym(h, "ncclAllReduce");
    *(void **)&nccl.all_gather = dlsym(h, "ncclAllGather");
    *(void **)&nccl.error_string = dlsym(h, "ncclGetErrorString");
    *(void **)&nccl.version = dlsym(h, "ncclGetVersion");
    if (!nccl.comm_init_all || !nccl.comm_destroy || !nccl.all_reduce || !nccl.all_gather || !nccl.error_string ||
        !nccl.version) {
        snprintf(nccl.why, sizeof nccl.why, "%s lacks an NCCL function this build calls", lib);
        return -1;
    }
    return 0;
}

#define NK(call)                                                                                    \
    do {                                                                                            \
        ncclResult_t r_ = (call);                                                                   \
        if (r_ != ncclSuccess)                                                                      \
            return fail(g, "%s:%d: %s: %s", __FILE__, __LINE__, #call, nccl.error_string(r_));     \
    } while (0)
#endif

// logits[r][v] = rank k's column v - k nv of row r, k = v / nv: gath holds
// rank k's [rows][w_k] block at k rows nv (w_k = nv, the last rank's V - k nv).
__global__ void k_vocab_gather(const float *gath, float *logits, int rows, int V, int nv, int tp)
{
    size_t n = (size_t)rows * V;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        int r = (int)(i / V), v = (int)(i % V), k = v / nv;
        int w = k == tp - 1 ? V - k * nv : nv;
        logits[i] = gath[(size_t)k * rows * nv + (size_t)r * w + (v - k * nv)];
    }
}

namespace tbgpu {

int tp_allreduce(tb_gpu *g, float *x, size_t count)
{
#ifdef TB_HAVE_NCCL
    NK(nccl.all_reduce(x, x, count, ncclFloat32, ncclSum, (ncclComm_t)g->comm, g->stream));
    return 0;
#else
    (void)x, (void)count;
    return fail(g, "tensor parallel: built without NCCL");
#endif
}

int tp_gather_logits(tb_gpu *g, int rows)
{
#ifdef TB_HAVE_NCCL
    int V = g->cfg.vocab_size, nv = (V + g->tp - 1) / g->tp;
    NK(nccl.all_gather(g->logits_part, g->gath, (size_t)rows * nv, ncclFloat32, (ncclComm_t)g->comm, g->stream));
    k_vocab_gather<<<blocks_for((size_t)rows * V), 256, 0, g->stream>>>(g->gath, g->logits, rows, V, nv, g->tp);
    LAUNCHED();
    return 0;
#else
    (void)rows;
    return fail(g, "tensor parallel: built without NCCL");
#endif
}

void tp_free_group(tb_gpu *g)
{
    for (int r = 0; r < g->n_ranks; r++) {
        tb_gpu *k = g->ranks[r];
        if (!k)
            continue;
        (void)cudaSetDevice(k->device);
#ifdef TB_HAVE_NCCL
        if (k->comm)
            nccl.comm_destroy((ncclComm_t)k->comm);
#endif
        k->comm = NULL;
        tb_gpu_free(k);
    }
    free(g->ranks);
    free(g);
}

// Run f(r, rank context) on every rank, each on its own thread with its
// device current (one rank: on the caller's thread); 0, or -1 with the
// first failing rank's error in the group's. A rank that fails before a
// collective leaves the others waiting in it: NCCL has no timeout here.
template <typename F> static int fan(tb_gpu *g, F f)
{
    int n = g->n_ranks;
    std::vector<int> rc((size_t)n, 0);
    auto one = [&](int r) {
        rc[(size_t)r] = cudaSetDevice(g->ranks[r]->device) == cudaSuccess ? f(r, g->ranks[r]) : -1;
    };
    if (n == 1) {
        one(0);
    } else {
        std::vector<std::thread> t;
        for (int r = 0; r < n; r++)
            t.emplace_back(one, r);
        for (auto &th : t)
            th.join();
    }
    for (int r = 0; r < n; r++)
        if (rc[(size_t)r] != 0)
            return fail(g, "rank %d of %d (device %d): %s", r, n, g->ranks[r]->device,
                        g->ranks[r]->error[0] ? g->ranks[r]->error : "cudaSetDevice failed");
    return 0;
}

// Rank 0 writes the caller's buffer; the others (whose results are the
// same) write a scratch copy of n elements, NULL when the caller's is.
template <typename T> struct scratch {
    std::vector<std::vector<T>> s;
    scratch(int ranks, const T *like, size_t n) : s((size_t)ranks)
    {
        for (auto &v : s)
            if (like)
                v.assign(like, like + n);
    }
    T *at(int r, T *mine) { return r == 0 || !mine ? mine : s[(size_t)r].data(); }
};

} // namespace tbgpu

extern "C" int tb_gpu_create_tp(tb_gpu **out, const tb_model_config *cfg, const tb_model *cpu, uint64_t seed, int tp,
                                char *err, size_t err_size)
{
    *out = NULL;
    int devices = 0;
    if (tp < 1) {
        snprintf(err, err_size, "tensor parallel: tp = %d (it must be at least 1)", tp);
        return -1;
    }
    std::vector<tb_tp_split> plan((size_t)tp);
    for (int r = 0; r < tp; r++)
        if (tb_tp_split_plan(cfg, tp, r, &plan[(size_t)r], err, err_size) != 0)
            return -1;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < tp) {
        snprintf(err, err_size, "tensor parallel: tp = %d but this host has %d CUDA device%s", tp, devices,
                 devices == 1 ? "" : "s");
        return -1;
    }
#ifndef TB_HAVE_NCCL
    (void)cpu, (void)seed;
    snprintf(err, err_size, "tensor parallel: this tokbench was built without NCCL (no nccl.h)");
    return -1;
#else
    if (nccl_load() != 0) {
        snprintf(err, err_size, "tensor parallel: %s", nccl.why);
        return -1;
    }
    tb_gpu *g = (tb_gpu *)calloc(1, sizeof *g);
    tb_gpu **ranks = (tb_gpu **)calloc((size_t)tp, sizeof *ranks);
    if (!g || !ranks) {
        free(g);
        free(ranks);
        snprintf(err, err_size, "out of host memory");
        return -1;
    }
    g->cfg = *cfg;
    g->pick_vocab = cfg->vocab_size;
    g->ranks = ranks;
    g->n_ranks = tp;
    g->tp = tp;
    g->head_rows = cfg->vocab_size;
    std::vector<int> devs((size_t)tp);
    std::vector<ncclComm_t> comms((size_t)tp);
    for (int r = 0; r < tp; r++)
        devs[(size_t)r] = r;
    ncclResult_t nr = nccl.comm_init_all(comms.data(), tp, devs.data());
    if (nr != ncclSuccess) {
        snprintf(err, err_size, "tensor parallel: ncclCommInitAll over %d device%s: %s", tp, tp == 1 ? "" : "s",
                 nccl.error_string(nr));
        tp_free_group(g);
        return -1;
    }
    int rc = 0;
    for (int r = 0; r < tp && rc == 0; r++) {
        const tb_tp_split *s = &plan[(size_t)r];
        tb_model_config rc_cfg = *cfg; // the rank's shapes, as tb_tp_split_model makes them
        rc_cfg.n_heads = s->n_q_heads;
        rc_cfg.n_kv_heads = s->n_kv_heads;
        rc_cfg.intermediate_size = s->n_inter;
        rc_cfg.tie_word_embeddings = 0;
        if (cpu) {
            tb_model part;
            rc = tb_tp_split_model(cpu, s, &part, err, err_size);
            if (rc == 0) {
                rc = create_on(&ranks[r], &part.cfg, &part, seed, r, s->n_vocab, 0, err, err_size);
                tb_model_free(&part);
            }
        } else {
            // random weights: rank 0's seed is the caller's, so tp = 1 draws
            // what tb_gpu_create draws for an untied model
            if (tp == 1)
                rc_cfg.tie_word_embeddings = cfg->tie_word_embeddings;
            rc = create_on(&ranks[r], &rc_cfg, NULL, seed + 0x9E3779B97F4A7C15ULL * (uint64_t)r, r, s->n_vocab, 0,
                           err, err_size);
        }
        if (rc == 0) {
            ranks[r]->comm = comms[(size_t)r];
            comms[(size_t)r] = NULL;
            ranks[r]->tp = tp;
            ranks[r]->tp_rank = r;
        }
    }
    for (int r = 0; r < tp; r++) // the communicators no rank took
        if (comms[(size_t)r]) {
            (void)cudaSetDevice(r);
            nccl.comm_destroy(comms[(size_t)r]);
        }
    (void)cudaSetDevice(0);
    if (rc != 0) {
        char why[512];
        snprintf(why, sizeof why, "%s", err);
        snprintf(err, err_size, "tensor parallel: %s", why);
        tp_free_group(g);
        return -1;
    }
    g->prop = ranks[0]->prop;
    g->device = 0;
    *out = g;
    return 0;
#endif
}

extern "C" int tb_gpu_device_count(void)
{
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

extern "C" int tb_gpu_tp_size(const tb_gpu *g) { return g->ranks ? g->n_ranks : 0; }

// Every rank sums count floats in place, iters times after a warm-up, all
// ranks at once (their threads); the median of the per-call times rank 0's
// CUDA events see, in microseconds.
extern "C" int tb_gpu_tp_time_allreduce(tb_gpu *g, size_t count, int iters, double *us)
{
    if (!g->ranks || iters < 1)
        return fail(g, "tb_gpu_tp_time_allreduce: not a tensor-parallel group");
    std::vector<float> ms((size_t)iters);
    int rc = fan(g, [&](int r, tb_gpu *k) {
        float *buf = NULL;
        cudaEvent_t e0 = NULL, e1 = NULL;
        int ok = dalloc(k, (void **)&buf, count * sizeof(float)) == 0 &&
                 cudaMemsetAsync(buf, 0, count * sizeof(float), k->stream) == cudaSuccess &&
                 cudaEventCreate(&e0) == cudaSuccess && cudaEventCreate(&e1) == cudaSuccess;
        for (int i = -3; ok && i < iters; i++) { // 3 warm-up calls
            ok = cudaEventRecord(e0, k->stream) == cudaSuccess && tp_allreduce(k, buf, count) == 0 &&
                 cudaEventRecord(e1, k->stream) == cudaSuccess && cudaEventSynchronize(e1) == cudaSuccess;
            float t = 0;
            if (ok && r == 0 && i >= 0 && cudaEventElapsedTime(&t, e0, e1) == cudaSuccess)
                ms[(size_t)i] = t;
        }
        if (!ok && !k->error[0])
            fail(k, "all-reduce timing failed: %s", cudaGetErrorString(cudaGetLastError()));
        if (e0)
            cudaEventDestroy(e0);
        if (e1)
            cudaEventDestroy(e1);
        dfree(k, buf);
        return ok ? 0 : -1;
    });
    if (rc)
        return -1;
    std::sort(ms.begin(), ms.end());
    *us = 1e3 * ms[(size_t)iters / 2];
    return 0;
}

extern "C" size_t tb_gpu_rank_peak_bytes(const tb_gpu *g, int rank)
{
    if (!g->ranks)
        return rank == 0 ? g->bytes_peak : 0;
    return rank >= 0 && rank < g->n_ranks ? g->ranks[rank]->bytes_peak : 0;
}

// The group's entry points (called from gpu.h's when g->ranks is set).
namespace tbgpu {

int tp_reserve(tb_gpu *g, int seqs, int len, int rows)
{
    return fan(g, [&](int, tb_gpu *k) {
        char e[8];
        return tb_gpu_reserve(k, seqs, len, rows, e, sizeof e); // the message stays in k->error
    });
}

int tp_set_padding(tb_gpu *g, const int *pad, int n)
{
    return fan(g, [&](int, tb_gpu *k) { return tb_gpu_set_padding(k, pad, n); });
}

size_t tp_bytes(const tb_gpu *g, int peak)
{
    size_t s = 0;
    for (int r = 0; r < g->n_ranks; r++)
        s += peak ? g->ranks[r]->bytes_peak : g->ranks[r]->bytes_now;
    return s;
}

int tp_prefill(tb_gpu *g, const int32_t *tokens, int B, int P, int32_t *next, float *logits_out)
{
    scratch<int32_t> nx(g->n_ranks, next, (size_t)B);
    return fan(g, [&](int r, tb_gpu *k) {
        return tb_gpu_prefill(k, tokens, B, P, nx.at(r, next), r == 0 ? logits_out : NULL);
    });
}

int tp_decode(tb_gpu *g, int32_t *next, int B, float *logits_out)
{
    scratch<int32_t> nx(g->n_ranks, next, (size_t)B);
    return fan(g, [&](int r, tb_gpu *k) { return tb_gpu_decode(k, nx.at(r, next), B, r == 0 ? logits_out : NULL); });
}

int tp_prefill_slots(tb_gpu *g, const int32_t *tokens, int B, int P, const int *slots, int32_t *next,
                     float *logits_out)
{
    scratch<int32_t> nx(g->n_ranks, next, (size_t)B);
    return fan(g, [&](int r, tb_gpu *k) {
        return tb_gpu_prefill_slots(k, tokens, B, P, slots, nx.at(r, next), r == 0 ? logits_out : NULL);
    });
}

int tp_decode_slots(tb_gpu *g, const int *slots, int B, int32_t *next, float *logits_out)
{
    scratch<int32_t> nx(g->n_ranks, next, (size_t)B);
    return fan(g, [&](int r, tb_gpu *k) {
        return tb_gpu_decode_slots(k, slots, B, nx.at(r, next), r == 0 ? logits_out : NULL);
    });
}

int tp_logits(tb_gpu *g, const int32_t *tokens, int B, int pos0, int n, int n_attend, int causal, float *logits)
{
    scratch<float> lg(g->n_ranks, NULL, 0);
    for (int r = 1; r < g->n_ranks; r++)
        lg.s[(size_t)r].resize((size_t)B * n * g->cfg.vocab_size);
    return fan(g, [&](int r, tb_gpu *k) {
        return tb_gpu_logits(k, tokens, B, pos0, n, n_attend, causal, r == 0 ? logits : lg.s[(size_t)r].data());
    });
}

int tp_forward_pick(tb_gpu *g, const int32_t *canvas, int rows, int B, int L, int pos0, int n, int n_attend,
                    int pick0, int npick, int kind, double cfg_scale, int shifted, int32_t *x0, double *conf)
{
    scratch<int32_t> xs(g->n_ranks, x0, (size_t)B * n);
    scratch<double> cs(g->n_ranks, conf, (size_t)B * n);
    return fan(g, [&](int r, tb_gpu *k) {
        return tb_gpu_forward_pick(k, canvas, rows, B, L, pos0, n, n_attend, pick0, npick, kind, cfg_scale, shifted,
                                   xs.at(r, x0), cs.at(r, conf));
    });
}

int tp_forward_logits(tb_gpu *g, const int32_t *canvas, int rows, int L, int pos0, int n, int n_attend, int pick0,
                      int npick, int shifted, float *logits)
{
    scratch<float> lg(g->n_ranks, NULL, 0);
    for (int r = 1; r < g->n_ranks; r++)
        lg.s[(size_t)r].resize((size_t)rows * npick * g->cfg.vocab_size);
    return fan(g, [&](int r, tb_gpu *k) {
        return tb_gpu_forward_logits(k, canvas, rows, L, pos0, n, n_attend, pick0, npick, shifted,
                                     r == 0 ? logits : lg.s[(size_t)r].data());
    });
}

int tp_forward_pick_rows(tb_gpu *g, const int32_t *canvas, int L, const int *rows, int n_rows, int pos0, int n,
                         int n_attend, int mask_block, int pick0, int npick, int kind, int shifted, int32_t never,
                         int32_t *x0, double *conf)
{
    scratch<int32_t> xs(g->n_ranks, x0, (size_t)n_rows * n);
    scratch<double> cs(g->n_ranks, conf, (size_t)n_rows * n);
    return fan(g, [&](int r, tb_gpu *k) {
        return tb_gpu_forward_pick_rows(k, canvas, L, rows, n_rows, pos0, n, n_attend, mask_block, pick0, npick, kind,
                                        shifted, never, xs.at(r, x0), cs.at(r, conf));
    });
}

// The work of every rank, summed (each rank's counts its own shard).
void tp_take_work(tb_gpu *g, double *flops, double *bytes, double *expert_reads, double *moe_rows)
{
    *flops = *bytes = 0;
    if (expert_reads)
        *expert_reads = 0;
    if (moe_rows)
        *moe_rows = 0;
    for (int r = 0; r < g->n_ranks; r++) {
        double f, b;
        (void)cudaSetDevice(g->ranks[r]->device);
        tb_gpu_take_work(g->ranks[r], &f, &b, NULL, NULL);
        *flops += f;
        *bytes += b;
    }
    (void)cudaSetDevice(g->ranks[0]->device);
}

} // namespace tbgpu
