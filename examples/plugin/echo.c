/*
 * echo.c — a complete tokbench backend in one file, built outside the tree
 * against the installed header only:
 *
 *     cc $(pkg-config --cflags tokbench) -fPIC -shared -o echo.so echo.c
 *
 * No model: for every request it emits one token per step, waiting
 * `delay_us` before each step. Walked through in docs/PLUGINS.md.
 */
#define _POSIX_C_SOURCE 200809L /* nanosleep */

#include <tokbench/backend.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Options: the host validates suite values against these declarations,
 * fills in defaults and hands every option over, in this order. */
static const tb_option_decl echo_options[] = {
    {
        .name = "delay_us",
        .type = TB_OPT_INT,
        .default_value = "1000",
        .help = "wait before each emitted token, microseconds",
        .min = 0,
        .max = 10e6,
        .flags = 0, /* may change per case: no TB_OPTF_LOAD */
    },
};

/* Everything a context owns. */
typedef struct echo_ctx {
    const tb_host *host; /* valid until destroy() */
    int64_t delay_us;    /* from create(); a case may override it */
    char error[256];     /* what last_error() returns */
} echo_ctx;

/* The value of option `name`, or `fallback`. */
static int64_t option_int(const tb_option_value *v, uint32_t n,
                          const char *name, int64_t fallback)
{
    for (uint32_t k = 0; v && k < n; k++)
        if (v[k].name && strcmp(v[k].name, name) == 0)
            return v[k].i;
    return fallback;
}

static void sleep_us(int64_t us)
{
    struct timespec ts = {.tv_sec = us / 1000000,
                          .tv_nsec = (long)(us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0)
        ; /* interrupted by a signal: sleep the rest */
}

static tb_status echo_create(const tb_host *host, const char *model,
                             const tb_option_value *options,
                             uint32_t n_options, void **ctx_out, char *err,
                             size_t err_size)
{
    (void)model; /* echo loads nothing */
    if (host->abi_major != TB_ABI_MAJOR ||
        !TB_STRUCT_HAS(host, tb_host, cancelled)) {
        snprintf(err, err_size, "echo: host ABI %u is not %d",
                 (unsigned)host->abi_major, TB_ABI_MAJOR);
        return TB_ERR_UNSUPPORTED;
    }
    echo_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) {
        snprintf(err, err_size, "echo: out of memory");
        return TB_ERR_NO_MEMORY;
    }
    ctx->host = host;
    ctx->delay_us = option_int(options, n_options, "delay_us", 1000);
    *ctx_out = ctx;
    return TB_OK;
}

static void echo_destroy(void *vctx)
{
    free(vctx);
}

static tb_status echo_generate(void *vctx, const tb_request *req,
                               tb_result *res)
{
    echo_ctx *ctx = vctx;
    const tb_host *host = ctx->host;
    ctx->error[0] = '\0';

    /* This case's option values (non-LOAD options may differ per case). */
    int64_t delay_us =
        option_int(req->options, req->n_options, "delay_us", ctx->delay_us);

    int64_t t0 = host->now_ns(host);
    uint32_t done = 0;
    for (; done < req->max_new_tokens; done++) {
        if (host->cancelled(host)) {
            snprintf(ctx->error, sizeof ctx->error,
                     "cancelled after %u tokens", done);
            return TB_ERR_CANCELLED;
        }
        sleep_us(delay_us);
        /* One decode step: every request of the batch gets one token,
         * stamped with the host's clock. */
        int64_t t = host->now_ns(host);
        for (uint32_t r = 0; r < req->n_requests; r++)
            host->emit(host, r, 1, t);
    }
    int64_t t1 = host->now_ns(host);

    for (uint32_t r = 0; r < req->n_requests; r++) {
        res->requests[r].status = TB_OK;
        res->requests[r].n_output_tokens = done;
    }
    res->prefill_ns = 0; /* no prompt phase */
    res->decode_ns = t1 - t0;
    res->forward_passes = done;
    res->peak_device_bytes = -1; /* not measured */
    res->energy_mj = -1;
    return TB_OK;
}

static const char *echo_last_error(void *vctx)
{
    return ((echo_ctx *)vctx)->error;
}

static const char *echo_describe(void *vctx)
{
    (void)vctx;
    return "{\"model_name\":\"echo\",\"dtype\":\"none\",\"device\":\"cpu\","
           "\"random_weights\":false,\"engine_version\":\"echo 1.0\"}";
}

static const tb_backend_ops echo_ops = {
    .abi_major = TB_ABI_MAJOR,
    .struct_size = sizeof(tb_backend_ops),
    .name = "echo",
    .version = "1.0",
    .description = "example: one token per step after a fixed delay, no model",
    .capabilities = TB_CAP_BATCH | TB_CAP_STREAMING,
    .options = echo_options,
    .n_options = sizeof echo_options / sizeof echo_options[0],
    .probe = NULL, /* runs anywhere */
    .create = echo_create,
    .destroy = echo_destroy,
    .generate = echo_generate,
    .last_error = echo_last_error,
    .describe = echo_describe,
    .tokenize = NULL, /* no TB_CAP_TOKENIZER */
    .detokenize = NULL,
};

/* The one exported symbol (built with -fvisibility=hidden, everything else
 * stays inside the .so). */
__attribute__((visibility("default"))) const tb_backend_ops *
tokbench_backend_entry(void);

const tb_backend_ops *tokbench_backend_entry(void)
{
    return &echo_ops;
}
