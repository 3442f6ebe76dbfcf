/* flow_net.h — the flow model's network on its device behind one
 * interface, ggml's {iface; context} as the engine's tb_engine
 * (plugins/engine/backend/engine.h): a CPU implementation (flow_net_cpu.c:
 * flow_cpu.c's float32 network under flow_sampler.c's host sampler) and a
 * CUDA one (flow_net_cuda.c: flow_gpu.cu's bf16 network with the whole
 * sampler on the device), so the plugin (flow.c) is written once and the
 * device is chosen once, at tb_flow_net_open.
 *
 * The unit of work is a whole sampling call, not a forward: on the device
 * z, x_sc and x0 never leave it, so there is no per-forward slot both
 * could fill. The host sampler's own denoiser (tb_flow_engine,
 * flow_sampler.h) is the CPU implementation's business.
 *
 * Every operation returns 0, or -1 with the reason in error() (an
 * allocation failure says "out of memory"; the device's, "out of device
 * memory"). */
#ifndef TB_FLOW_NET_H
#define TB_FLOW_NET_H

#include <stddef.h>
#include <stdint.h>

#include "flow_model.h"
#include "flow_sampler.h"

/* What a sampling call did, for the result's forward count and roofline. */
typedef struct tb_flow_work {
    int forwards;         /* forwards run (on a failure: how many did) */
    int64_t peak_bytes;   /* device memory held at most; -1: no device (the CPU) */
    double flops, bytes;  /* the forwards' work by count (flow_gpu.h's definition); 0: not counted */
} tb_flow_work;

typedef struct tb_flow_net_iface {
    /* The model's shapes and names (cfg, n_params, name, source_dtype);
     * its weights only where the network runs on the host (the CPU). */
    const tb_flow_model *(*model)(void *ctx);
    /* Room for B canvases of L positions; what is held already is kept
     * when it is enough. The reason in err. */
    int (*reserve)(void *ctx, int B, int L, char *err, size_t err_size);
    /* tb_flow_sample (flow_sampler.h) where the network runs: the same
     * tokens, pad, gen0, progress and meaning, the starting noise of
     * canvas b made there from the stream state noise_states[b] (host [B])
     * as tb_flow_gaussian makes it, one stream of L x D numbers a canvas.
     * The call must fit the last reserve. *work: what it did. */
    int (*sample)(void *ctx, const tb_flow_params *p, int32_t *tokens, const int *pad, int B, int L, int gen0,
                  const uint64_t *noise_states, tb_flow_progress progress, void *progress_ctx, tb_flow_work *work);
    /* The roofline's ceilings, measured on the device (bf16 GEMM FLOP/s,
     * copy bytes/s); both 0 where there is none to measure (the CPU). */
    int (*ceilings)(void *ctx, double *peak_flops, double *peak_bytes_per_s);
    /* For describe(): the device ("cpu", or the GPU's name) and the dtype
     * the weights are held in there ("f32", "bf16"). */
    const char *(*device_name)(void *ctx);
    const char *(*dtype)(void *ctx);
    const char *(*error)(void *ctx);
    void (*free)(void *ctx);
} tb_flow_net_iface;

typedef struct tb_flow_net {
    const tb_flow_net_iface *iface;
    void *ctx;
} tb_flow_net;

/* Whether this build has the CUDA implementation (the plugin's
 * capabilities say so: device memory is reported only from there). */
#ifdef TB_HAVE_CUDA
#define TB_FLOW_NET_HAS_CUDA 1
#else
#define TB_FLOW_NET_HAS_CUDA 0
#endif

/* The network of `model` (a folder: config.json + model.safetensors, or
 * "preset:NAME" with seeded random weights, flow_model.h) on the GPU
 * (on_gpu, CUDA builds) or the CPU with `threads` (<= 0: every online
 * CPU). 0, or -1 with "what is wrong" in err. */
int tb_flow_net_open(tb_flow_net *n, const char *model, int on_gpu, uint64_t preset_seed, int threads, char *err,
                     size_t err_size);
/* The two implementations (tb_flow_net_open picks one): a folder `dir`,
 * or with dir NULL preset `preset` (flow_model.h's names, "preset:"
 * stripped). On the GPU a preset is made on the device (an 8B-class
 * preset never exists on the host); a folder's weights go there and the
 * host keeps the shapes. */
int tb_flow_net_open_cpu(tb_flow_net *n, const char *dir, const char *preset, uint64_t seed, int threads, char *err,
                         size_t err_size);
#ifdef TB_HAVE_CUDA
int tb_flow_net_open_cuda(tb_flow_net *n, const char *dir, const char *preset, uint64_t seed, char *err,
                          size_t err_size);
#endif
/* Free n's context (a net never opened, or closed: nothing). */
void tb_flow_net_close(tb_flow_net *n);

#endif
