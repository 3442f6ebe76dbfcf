/* flow_net_cuda.c — flow_net.h's CUDA implementation: flow_gpu.cu's bf16
 * network and its sampler on the device (the starting noise made there,
 * only the final tokens come back), the roofline's work counted there. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flow_gpu.h"
#include "flow_net.h"

typedef struct cuda_net {
    tb_flow_gpu *g;
    tb_flow_model shapes; /* cfg, n_params, name, source_dtype; no weights (the device holds them) */
} cuda_net;

static const tb_flow_model *cuda_model(void *ctx)
{
    return &((cuda_net *)ctx)->shapes;
}

static int cuda_reserve(void *ctx, int B, int L, char *err, size_t err_size)
{
    (void)ctx; /* the device sampler grows its buffers itself, per call */
    (void)B;
    (void)L;
    (void)err;
    (void)err_size;
    return 0;
}

static int cuda_sample(void *ctx, const tb_flow_params *p, int32_t *tokens, const int *pad, int B, int L, int gen0,
                       const uint64_t *noise_states, tb_flow_progress progress, void *progress_ctx, tb_flow_work *work)
{
    cuda_net *c = ctx;
    *work = (tb_flow_work){.forwards = 0, .peak_bytes = -1, .flops = 0, .bytes = 0};
    return tb_flow_gpu_sample(c->g, p, tokens, pad, B, L, gen0, NULL, noise_states, &work->forwards, progress,
                              progress_ctx, NULL, &work->peak_bytes, &work->flops, &work->bytes);
}

static int cuda_ceilings(void *ctx, double *peak_flops, double *peak_bytes_per_s)
{
    return tb_flow_gpu_ceilings(((cuda_net *)ctx)->g, peak_flops, peak_bytes_per_s);
}

static const char *cuda_device_name(void *ctx)
{
    return tb_flow_gpu_device_name(((cuda_net *)ctx)->g);
}

static const char *cuda_dtype(void *ctx)
{
    (void)ctx;
    return "bf16";
}

static const char *cuda_error(void *ctx)
{
    return tb_flow_gpu_error(((cuda_net *)ctx)->g);
}

static void cuda_free(void *ctx)
{
    cuda_net *c = ctx;
    if (!c)
        return;
    tb_flow_gpu_free(c->g);
    free(c);
}

static const tb_flow_net_iface cuda_iface = {
    .model = cuda_model,
    .reserve = cuda_reserve,
    .sample = cuda_sample,
    .ceilings = cuda_ceilings,
    .device_name = cuda_device_name,
    .dtype = cuda_dtype,
    .error = cuda_error,
    .free = cuda_free,
};

int tb_flow_net_open_cuda(tb_flow_net *n, const char *dir, const char *preset, uint64_t seed, char *err,
                          size_t err_size)
{
    n->iface = NULL;
    n->ctx = NULL;
    cuda_net *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, err_size, "out of memory");
        return -1;
    }
    tb_flow_model *s = &c->shapes;
    int rc;
    if (!dir) { /* made on the device */
        rc = tb_flow_gpu_create(&c->g, NULL, preset, seed, err, err_size);
        if (rc == 0) {
            s->cfg = *tb_flow_gpu_config(c->g);
            s->n_params = tb_flow_gpu_params(c->g);
            snprintf(s->name, sizeof s->name, "preset:%s", preset);
            snprintf(s->source_dtype, sizeof s->source_dtype, "random");
        }
    } else { /* loaded on the host, its weights copied to the device */
        tb_flow_model host;
        rc = tb_flow_model_load(dir, &host, err, err_size);
        if (rc == 0)
            rc = tb_flow_gpu_create(&c->g, &host, NULL, 0, err, err_size);
        if (rc == 0) {
            s->cfg = host.cfg;
            s->n_params = host.n_params;
            snprintf(s->name, sizeof s->name, "%s", host.name);
            snprintf(s->source_dtype, sizeof s->source_dtype, "%s", host.source_dtype);
        }
        tb_flow_model_free(&host);
    }
    if (rc != 0) {
        cuda_free(c);
        return -1;
    }
    n->iface = &cuda_iface;
    n->ctx = c;
    return 0;
}
