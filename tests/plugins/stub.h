/* stub.h — a minimal working backend shared by the deliberately broken
 * plugins in this folder: each one breaks exactly one rule of backend.h
 * and is otherwise valid, so a loader test that accepts it has found a
 * missing check rather than some other fault. */
#ifndef TB_TEST_PLUGIN_STUB_H
#define TB_TEST_PLUGIN_STUB_H

#include <tokbench/backend.h>

#include <stdio.h>
#include <stdlib.h>

#define STUB_UNUSED __attribute__((unused))
#define STUB_EXPORT __attribute__((visibility("default")))

typedef struct stub_ctx {
    const tb_host *host;
} stub_ctx;

STUB_UNUSED static tb_status stub_create(const tb_host *host,
                                         const char *model,
                                         const tb_option_value *options,
                                         uint32_t n_options, void **ctx_out,
                                         char *err, size_t err_size)
{
    (void)model, (void)options, (void)n_options;
    stub_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) {
        if (err && err_size)
            snprintf(err, err_size, "out of memory");
        return TB_ERR_NO_MEMORY;
    }
    ctx->host = host;
    *ctx_out = ctx;
    return TB_OK;
}

STUB_UNUSED static void stub_destroy(void *ctx)
{
    free(ctx);
}

/* Every request gets all its tokens in one emission. */
STUB_UNUSED static tb_status stub_generate(void *vctx, const tb_request *req,
                                           tb_result *res)
{
    stub_ctx *ctx = vctx;
    int64_t t = ctx->host->now_ns(ctx->host);
    for (uint32_t r = 0; r < req->n_requests; r++) {
        ctx->host->emit(ctx->host, r, req->max_new_tokens, t);
        res->requests[r].status = TB_OK;
        res->requests[r].n_output_tokens = req->max_new_tokens;
    }
    res->prefill_ns = -1;
    res->decode_ns = -1;
    res->forward_passes = 1;
    res->peak_device_bytes = -1;
    res->energy_mj = -1;
    return TB_OK;
}

STUB_UNUSED static const char *stub_last_error(void *ctx)
{
    (void)ctx;
    return "";
}

#endif
