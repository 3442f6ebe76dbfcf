/* flow_net_cpu.c — flow_net.h's CPU implementation: flow_cpu.c's float32
 * network as the denoiser of flow_sampler.c's host sampler, the starting
 * noise made on the host. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flow_cpu.h"
#include "flow_net.h"

typedef struct cpu_net {
    tb_flow_model m;  /* the weights; st points at it */
    tb_flow_cpu st;   /* the forward's buffers, grown by reserve */
    int threads;      /* <= 0: every online CPU */
    char error[256];
} cpu_net;

static const tb_flow_model *cpu_model(void *ctx)
{
    return &((cpu_net *)ctx)->m;
}

static int cpu_reserve(void *ctx, int B, int L, char *err, size_t err_size)
{
    cpu_net *c = ctx;
    if (c->st.max_seqs >= B && c->st.max_len >= L)
        return 0;
    tb_flow_cpu_free(&c->st);
    return tb_flow_cpu_init(&c->st, &c->m, B, L, c->threads, err, err_size);
}

/* The sampler's denoiser (flow_sampler.h's tb_flow_engine) over st. */
static int denoise_forward(void *ctx, const float *z, const float *x_sc, const double *gamma, const int *pad, int B,
                           int L, int gen0, float *logits)
{
    return tb_flow_cpu_forward(ctx, z, x_sc, gamma, pad, B, L, gen0, logits);
}

static void denoise_x0(void *ctx, float *logits, size_t rows, float *x0)
{
    tb_flow_cpu *st = ctx;
    tb_flow_cpu_x0(st->m, logits, rows, x0);
}

static int cpu_sample(void *ctx, const tb_flow_params *p, int32_t *tokens, const int *pad, int B, int L, int gen0,
                      const uint64_t *noise_states, tb_flow_progress progress, void *progress_ctx, tb_flow_work *work)
{
    cpu_net *c = ctx;
    size_t per = (size_t)L * c->m.cfg.hidden; /* one canvas's noise: [L][D] */
    *work = (tb_flow_work){.forwards = 0, .peak_bytes = -1, .flops = 0, .bytes = 0};
    float *noise = malloc((size_t)B * per * sizeof *noise);
    if (!noise) {
        snprintf(c->error, sizeof c->error, "out of memory for %d canvases of %d positions", B, L);
        return -1;
    }
    for (int b = 0; b < B; b++) {
        uint64_t g = noise_states[b];
        tb_flow_gaussian(&g, noise + (size_t)b * per, per);
    }
    tb_flow_engine e = {.ctx = &c->st, .forward = denoise_forward, .x0 = denoise_x0};
    int rc = tb_flow_sample(&c->m, &e, p, tokens, pad, B, L, gen0, noise, &work->forwards, progress, progress_ctx);
    if (rc != 0) /* the sampler's own failures are its allocations (or a stop the caller asked for) */
        snprintf(c->error, sizeof c->error, "out of memory");
    free(noise);
    return rc;
}

static int cpu_ceilings(void *ctx, double *peak_flops, double *peak_bytes_per_s)
{
    (void)ctx; /* the roofline is a device's (docs/METRICS.md) */
    *peak_flops = *peak_bytes_per_s = 0;
    return 0;
}

static const char *cpu_device_name(void *ctx)
{
    (void)ctx;
    return "cpu";
}

static const char *cpu_dtype(void *ctx)
{
    (void)ctx;
    return "f32";
}

static const char *cpu_error(void *ctx)
{
    return ((cpu_net *)ctx)->error;
}

static void cpu_free(void *ctx)
{
    cpu_net *c = ctx;
    if (!c)
        return;
    tb_flow_cpu_free(&c->st);
    tb_flow_model_free(&c->m);
    free(c);
}

static const tb_flow_net_iface cpu_iface = {
    .model = cpu_model,
    .reserve = cpu_reserve,
    .sample = cpu_sample,
    .ceilings = cpu_ceilings,
    .device_name = cpu_device_name,
    .dtype = cpu_dtype,
    .error = cpu_error,
    .free = cpu_free,
};

int tb_flow_net_open_cpu(tb_flow_net *n, const char *dir, const char *preset, uint64_t seed, int threads, char *err,
                         size_t err_size)
{
    n->iface = NULL;
    n->ctx = NULL;
    cpu_net *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, err_size, "out of memory");
        return -1;
    }
    c->threads = threads;
    int rc = dir ? tb_flow_model_load(dir, &c->m, err, err_size)
                 : tb_flow_model_preset(preset, seed, &c->m, err, err_size);
    if (rc != 0) {
        cpu_free(c);
        return -1;
    }
    n->iface = &cpu_iface;
    n->ctx = c;
    return 0;
}
