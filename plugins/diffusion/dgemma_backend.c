/* dgemma_backend.c — see dgemma_backend.h. */
#define _GNU_SOURCE
#include "dgemma_backend.h"

#include <cblas.h>
#include <errno.h>
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "backend_common.h"
#include "dgemma_cpu.h"
#include "dgemma_forward.h"
#include "dgemma_model.h"
#include "dgemma_sampler.h"
#include "strmem.h"
#ifdef TB_HAVE_CUDA
#include "dgemma_cuda.h"
#include "gpu_dgemma.h"
#endif

/* A preset whose float32 weights pass this on the host is made on the
 * device instead (device = cuda): diffusiongemma-26b-a4b's 100 GB. */
#define TB_DG_HOST_PRESET_BYTES 8e9

struct tb_dg_backend {
    tb_dgemma_model m; /* on the GPU: its config, name and counts only (the weights are the device's) */
    tb_dgemma_state st;
#ifdef TB_HAVE_CUDA
    tb_gpu_dgemma *gpu; /* device = cuda; NULL on the CPU */
    double peak_flops, peak_bytes_per_s; /* the roofline's ceilings, measured at load (0: none) */
#endif
    int fp8;           /* dtype = fp8 (dgemma_model.h's tb_dgemma_round_fp8; on CUDA E4M3 codes) */
    int st_ctx;        /* positions st holds (0: none yet) */
    int32_t *prompt;   /* [prompt_cap] */
    size_t prompt_cap;
    int32_t *out;      /* [out_cap] */
    size_t out_cap;
    char *describe;
};

int tb_dg_backend_claims(const char *spec)
{
    if (!spec)
        return 0;
    if (strncmp(spec, "preset:", 7) == 0) {
        tb_dgemma_config c;
        char err[8];
        return tb_dgemma_preset_config(spec + 7, &c, err, sizeof err) == 0;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", spec);
    size_t len;
    errno = 0;
    char *text = tb_read_file_max(path, TB_READ_MAX_CONFIG, &len);
    if (!text)
        return errno == ENOMEM ? -1 : 0; /* no config.json: tb_load says what is missing */
    int ours = strlen(text) == len ? tb_dgemma_is_config(text) : 0;
    free(text);
    return ours;
}

static char *make_describe(const tb_dg_backend *b, int tokenizer)
{
    const tb_dgemma_config *c = &b->m.cfg;
    cJSON *o = cJSON_CreateObject();
    int ok = o != NULL;
    ok &= cJSON_AddStringToObject(o, "model_name", b->m.name) != NULL;
    ok &= cJSON_AddStringToObject(o, "architecture", "DiffusionGemmaForBlockDiffusion") != NULL;
    int gpu = 0;
#ifdef TB_HAVE_CUDA
    gpu = b->gpu != NULL;
#endif
    ok &= cJSON_AddStringToObject(o, "dtype", b->fp8 ? "fp8" : gpu ? "bfloat16" : "float32") != NULL;
    ok &= cJSON_AddStringToObject(o, "checkpoint_dtype", b->m.source_dtype) != NULL;
    ok &= cJSON_AddStringToObject(o, "device", gpu ? "cuda" : "cpu") != NULL;
#ifdef TB_HAVE_CUDA
    if (gpu) {
        ok &= cJSON_AddStringToObject(o, "device_name", tb_gpu_device_name(tb_gpu_dgemma_gpu(b->gpu))) != NULL;
        const char *gemm = tb_gpu_gemm_dtype(tb_gpu_dgemma_gpu(b->gpu)); /* "fp8": FP8 GEMMs run the projections */
        ok &= cJSON_AddStringToObject(
                  o, "kernels",
                  !b->fp8 ? "cuBLAS bf16 GEMMs (fp32 accumulate), experts grouped by expert, attention as batched GEMMs "
                            "around a masked softmax; the sampler's softmax, entropy, argmax and Gumbel draw on the GPU"
                  : strcmp(gemm, "fp8") == 0
                      ? "W8A8: E4M3 projections and inputs (per-row scales) on cuBLASLt FP8 GEMMs (fp32 accumulate), "
                        "the experts in one grouped tensor-core GEMM a projection over their codes, the FP8 GEMV "
                        "for one row; router, LM head and attention bf16; the sampler's per-position work on the GPU"
                      : "W8A8: E4M3 projections and inputs (per-row scales) dequantized to bf16 for cuBLAS bf16 "
                        "GEMMs (no FP8 GEMM on this device), the experts in one grouped tensor-core GEMM a "
                        "projection over their codes; router, LM head and attention bf16; the sampler's "
                        "per-position work on the GPU") != NULL;
        if (b->peak_flops > 0) {
            char key[32]; /* peak_tflops_bf16, or _fp8 when FP8 GEMMs run the projections */
            snprintf(key, sizeof key, "peak_tflops_%s", gemm);
            ok &= cJSON_AddNumberToObject(o, key, b->peak_flops / 1e12) != NULL;
            ok &= cJSON_AddNumberToObject(o, "peak_tb_per_s", b->peak_bytes_per_s / 1e12) != NULL;
        }
    }
#endif
    ok &= cJSON_AddBoolToObject(o, "random_weights", strncmp(b->m.name, "preset:", 7) == 0) != NULL;
    ok &= cJSON_AddNumberToObject(o, "params", (double)b->m.n_params) != NULL;
    ok &= cJSON_AddNumberToObject(o, "active_params", (double)tb_dgemma_n_active(c)) != NULL;
    ok &= cJSON_AddNumberToObject(o, "canvas_length", c->canvas) != NULL;
    ok &= cJSON_AddStringToObject(o, "sampler", "entropy_bound") != NULL;
    /* its stop depends on the content (dllm.c's tb_dllm_content_dependent):
     * random-token prompts get the warning (reports/warnings.c) */
    cJSON *adaptive = cJSON_AddArrayToObject(o, "content_dependent_samplers");
    ok &= adaptive != NULL && cJSON_AddItemToArray(adaptive, cJSON_CreateString("entropy_bound"));
    ok &= cJSON_AddNumberToObject(o, "context_length", c->max_pos) != NULL;
    ok &= cJSON_AddBoolToObject(o, "tokenizer", tokenizer) != NULL;
    char *s = ok ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return s;
}

tb_status tb_dg_backend_create(const tb_host *host, const char *spec, int on_gpu, int fp8, int tp,
                               uint64_t preset_seed, int threads, tb_tokenizer **tok, tb_dg_backend **out, char *err,
                               size_t err_size)
{
    *out = NULL;
    *tok = NULL;
#ifndef TB_HAVE_CUDA
    if (on_gpu) {
        snprintf(err, err_size, "device = cuda: this tokbench was built without CUDA");
        return TB_ERR_UNSUPPORTED;
    }
#endif
    if (tp > 1) {
        snprintf(err, err_size, "%s: DiffusionGemma runs on one device so far (tp > 1 is not supported yet)", spec);
        return TB_ERR_UNSUPPORTED;
    }
    tb_dg_backend *b = calloc(1, sizeof *b);
    if (!b) {
        snprintf(err, err_size, "out of memory");
        return TB_ERR_NO_MEMORY;
    }
    int preset = strncmp(spec, "preset:", 7) == 0;
    int rc;
    b->fp8 = fp8;
#ifdef TB_HAVE_CUDA
    tb_dgemma_config pc;
    if (on_gpu && preset && tb_dgemma_preset_config(spec + 7, &pc, err, err_size) == 0 &&
        4.0 * (double)tb_dgemma_n_params(&pc) > TB_DG_HOST_PRESET_BYTES) {
        /* a preset too large for host float32 (the published shape): made on the device */
        if (fp8 && tb_dgemma_check_fp8_gpu(&pc, err, err_size)) { /* the FP8 kernels' shapes: before any upload */
            tb_dg_backend_free(b);
            return TB_ERR_UNSUPPORTED;
        }
        b->m.cfg = pc;
        snprintf(b->m.name, sizeof b->m.name, "%s", spec);
        snprintf(b->m.source_dtype, sizeof b->m.source_dtype, "random");
        b->m.n_params = tb_dgemma_n_params(&b->m.cfg);
        rc = tb_gpu_dgemma_create_dtype(&b->gpu, &b->m.cfg, NULL, preset_seed, fp8, err, err_size);
    } else
#endif
        rc = preset ? tb_dgemma_preset(spec + 7, preset_seed, &b->m, err, err_size)
                    : tb_dgemma_load(spec, &b->m, err, err_size);
#ifdef TB_HAVE_CUDA
    if (!rc && on_gpu && !b->gpu && fp8 && tb_dgemma_check_fp8_gpu(&b->m.cfg, err, err_size)) {
        tb_dg_backend_free(b); /* the FP8 kernels' shapes: refused before any upload */
        return TB_ERR_UNSUPPORTED;
    }
#endif
    /* dtype = fp8: the host weights rounded to their E4M3 values (the CPU
     * path's; on CUDA the device then quantizes them to the same codes) */
    if (!rc && fp8 && b->m.arena)
        tb_dgemma_round_fp8(&b->m);
#ifdef TB_HAVE_CUDA
    if (!rc && on_gpu && !b->gpu) { /* the host weights, rounded to bf16 on the device; then only the config stays */
        rc = tb_gpu_dgemma_create_dtype(&b->gpu, NULL, &b->m, 0, fp8, err, err_size);
        tb_dgemma_model keep = b->m;
        free(b->m.arena), free(b->m.layers);
        memset(&b->m, 0, sizeof b->m);
        b->m.cfg = keep.cfg, b->m.n_params = keep.n_params;
        memcpy(b->m.name, keep.name, sizeof b->m.name);
        memcpy(b->m.source_dtype, keep.source_dtype, sizeof b->m.source_dtype);
    }
    if (!rc && b->gpu && tb_gpu_measure_ceilings(tb_gpu_dgemma_gpu(b->gpu), &b->peak_flops, &b->peak_bytes_per_s)) {
        host->log(host, TB_LOG_WARN, "%s: no roofline ceilings: %s", spec, tb_gpu_dgemma_error(b->gpu));
        b->peak_flops = b->peak_bytes_per_s = 0;
    }
#endif
    if (rc) {
        tb_dg_backend_free(b);
        return tb_status_of(err, TB_ERR_MODEL);
    }
    if (threads > 0)
        openblas_set_num_threads(threads);
    if (!preset) { /* a tokenizer tokbench cannot read leaves synthetic prompts */
        char path[4096], why[256];
        struct stat sb;
        snprintf(path, sizeof path, "%s/tokenizer.json", spec);
        if (stat(path, &sb) == 0 && tb_tokenizer_load(path, tok, why, sizeof why) != 0) {
            *tok = NULL;
            host->log(host, TB_LOG_WARN, "%s: no text prompts: %s", spec, why);
        }
    }
    b->describe = make_describe(b, *tok != NULL);
    if (!b->describe) {
        tb_dg_backend_free(b);
        tb_tokenizer_free(*tok);
        *tok = NULL;
        snprintf(err, err_size, "out of memory");
        return TB_ERR_NO_MEMORY;
    }
    host->log(host, TB_LOG_INFO, "loaded %s: DiffusionGemma, %lld parameters (%lld active), canvas %d", b->m.name,
              (long long)b->m.n_params, (long long)tb_dgemma_n_active(&b->m.cfg), b->m.cfg.canvas);
    *out = b;
    return TB_OK;
}

void tb_dg_backend_free(tb_dg_backend *b)
{
    if (!b)
        return;
    tb_dgemma_state_free(&b->st);
    tb_dgemma_free(&b->m);
#ifdef TB_HAVE_CUDA
    tb_gpu_dgemma_free(b->gpu);
#endif
    free(b->prompt), free(b->out), free(b->describe);
    free(b);
}

const char *tb_dg_backend_describe(const tb_dg_backend *b)
{
    return b->describe;
}

typedef struct emit_ctx {
    const tb_host *host;
    int64_t t_prefill;
    tb_canvas_counts *canvas; /* the request's canvas records, or NULL (an older host) */
    int C;                    /* canvas_length */
} emit_ctx;

static void on_prefill(void *ctx)
{
    emit_ctx *e = ctx;
    e->t_prefill = e->host->now_ns(e->host);
}

static void on_commit(void *ctx, int canvas, const int32_t *tokens, int n_valid, int steps)
{
    emit_ctx *e = ctx;
    (void)canvas, (void)tokens;
    int64_t now = e->host->now_ns(e->host);
    if (n_valid > 0)
        e->host->emit(e->host, 0, (uint32_t)n_valid, now);
    /* the canvas record (backend.h): every one of its C positions is
     * committed (n_out counts whole canvases), each of its steps evaluated
     * all C */
    if (e->canvas)
        tb_canvas_push(e->canvas, (uint32_t)steps, (uint32_t)e->C, (uint64_t)steps * (uint64_t)e->C, now);
}

static int on_cancel(void *ctx)
{
    emit_ctx *e = ctx;
    return e->host->cancelled(e->host);
}

static int grow(int32_t **p, size_t *cap, size_t n)
{
    if (n <= *cap)
        return 0;
    int32_t *q = realloc(*p, n * sizeof *q);
    if (!q)
        return -1;
    *p = q, *cap = n;
    return 0;
}

tb_status tb_dg_backend_generate(tb_dg_backend *b, const tb_host *host, const tb_tokenizer *tok, const tb_request *req,
                                 int ignore_eos, int threads, tb_result *res, char *err, size_t err_size)
{
    const tb_dgemma_config *c = &b->m.cfg;
    int64_t t0 = host->now_ns(host);
    if (req->n_requests != 1) {
        snprintf(err, err_size, "DiffusionGemma runs one request a call (batch 1) so far; this case has %u",
                 req->n_requests);
        return TB_ERR_UNSUPPORTED;
    }
    if (threads > 0)
        openblas_set_num_threads(threads);
    tb_dg_params p;
    tb_dg_params_default(&p);
    p.max_new_tokens = (int)req->max_new_tokens;
    if (req->steps)
        p.max_steps = (int)req->steps;
    p.eos_ids = c->eos, p.n_eos = ignore_eos ? 0 : c->n_eos, p.pad_id = c->pad_id >= 0 ? c->pad_id : 0;
    if (tb_dg_params_check(&p, err, err_size))
        return TB_ERR_INVALID;
    /* the prompt: text through the tokenizer (BOS first), else synthetic */
    int P;
    if (req->prompt_text && !tok && strncmp(b->m.name, "preset:", 7) == 0) {
        /* a preset has no tokenizer: BOS, then the text's UTF-8 bytes'
         * stand-in tokens (tb_preset_byte_token) */
        const char *text = req->prompt_text[0];
        size_t n = strlen(text) + 1;
        if (grow(&b->prompt, &b->prompt_cap, n)) {
            snprintf(err, err_size, "out of memory");
            return TB_ERR_NO_MEMORY;
        }
        b->prompt[0] = c->bos_id >= 0 ? c->bos_id : 2;
        for (size_t i = 0; i + 1 < n; i++)
            b->prompt[i + 1] = tb_preset_byte_token((unsigned char)text[i], c->vocab);
        P = (int)n;
    } else if (req->prompt_text) {
        if (!tok) {
            snprintf(err, err_size, "text prompts need a tokenizer.json tokbench reads; this model has none");
            return TB_ERR_UNSUPPORTED;
        }
        const char *text = req->prompt_text[0];
        size_t cap = strlen(text) + 2;
        if (grow(&b->prompt, &b->prompt_cap, cap)) {
            snprintf(err, err_size, "out of memory");
            return TB_ERR_NO_MEMORY;
        }
        int32_t bos = tb_tokenizer_template_bos(tok);
        int off = 0;
        if (bos < 0 && c->bos_id >= 0)
            b->prompt[off++] = c->bos_id;
        int64_t n = tb_tokenizer_encode(tok, text, strlen(text), b->prompt + off, cap - (size_t)off);
        /* the count may exceed the room given (nothing written past it):
         * grow to it and encode again */
        if (n > (int64_t)(cap - (size_t)off) && n < INT32_MAX - 1) {
            cap = (size_t)off + (size_t)n;
            if (grow(&b->prompt, &b->prompt_cap, cap)) {
                snprintf(err, err_size, "out of memory");
                return TB_ERR_NO_MEMORY;
            }
            n = tb_tokenizer_encode(tok, text, strlen(text), b->prompt + off, cap - (size_t)off);
        }
        if (n < 0 || n > (int64_t)(cap - (size_t)off)) {
            snprintf(err, err_size, "the tokenizer failed on the prompt");
            return TB_ERR;
        }
        P = off + (int)n;
    } else {
        P = (int)req->prompt_tokens;
        if (P < 1 || grow(&b->prompt, &b->prompt_cap, (size_t)P)) {
            snprintf(err, err_size, P < 1 ? "prompt_tokens must be >= 1" : "out of memory");
            return P < 1 ? TB_ERR_INVALID : TB_ERR_NO_MEMORY;
        }
        tb_dg_rng r; /* ids past pad, EOS and BOS (0..2), as a text would be */
        tb_dg_rng_seed(&r, req->seed ^ 0x70726F6D7074ULL);
        for (int i = 0; i < P; i++)
            b->prompt[i] = 3 + (int32_t)(tb_dg_rng_next(&r) % (uint64_t)(c->vocab > 3 ? c->vocab - 3 : 1));
        if (c->bos_id >= 0)
            b->prompt[0] = c->bos_id;
    }
    int n_max = tb_dg_max_output(&p, c->canvas);
    int64_t ctx = (int64_t)P + n_max;
    if (ctx > c->max_pos) {
        snprintf(err, err_size, "prompt %d + %d output positions (whole canvases) = %lld, more than the model's %d "
                 "(max_position_embeddings)", P, n_max, (long long)ctx, c->max_pos);
        return TB_ERR_INVALID;
    }
    if (grow(&b->out, &b->out_cap, (size_t)n_max)) {
        snprintf(err, err_size, "out of memory");
        return TB_ERR_NO_MEMORY;
    }
    tb_dg_engine e;
#ifdef TB_HAVE_CUDA
    tb_gpu *g = b->gpu ? tb_gpu_dgemma_gpu(b->gpu) : NULL;
    if (g) {
        if (tb_gpu_dgemma_reserve(b->gpu, (int)ctx)) {
            snprintf(err, err_size, "%s", tb_gpu_dgemma_error(b->gpu));
            return tb_status_of(err, TB_ERR_NO_MEMORY);
        }
        tb_gpu_dgemma_reset(b->gpu);
        double f, by;
        tb_gpu_dgemma_take_work(b->gpu, &f, &by, NULL, NULL); /* this call's work from here */
        tb_gpu_reset_peak(g);
        e = tb_dg_cuda_engine(b->gpu, c);
    } else
#endif
    {
        if (ctx > b->st_ctx) {
            tb_dgemma_state_free(&b->st);
            b->st_ctx = 0;
            if (tb_dgemma_state_init(&b->st, &b->m, (int)ctx, c->canvas, err, err_size))
                return TB_ERR_NO_MEMORY;
            b->st_ctx = (int)ctx;
        }
        tb_dgemma_reset(&b->st);
        e = tb_dg_cpu_engine(&b->st);
    }
    emit_ctx ec = {host, 0, TB_STRUCT_HAS(res, tb_result, canvas) ? res->canvas : NULL, c->canvas};
    tb_dg_hooks h = {.ctx = &ec, .on_commit = on_commit, .on_prefill = on_prefill, .cancelled = on_cancel};
    tb_dg_stats stats;
    int n_out = 0;
    /* the request's own noise: its seed, as the other samplers take it */
    if (tb_dg_generate(&e, &p, b->prompt, P, req->seed, NULL, &h, b->out, &n_out, &stats, err, err_size)) {
#ifdef TB_HAVE_CUDA
        if (b->gpu && strcmp(err, "cancelled") != 0) /* the device's reason after the sampler's */
            snprintf(err + strlen(err), err_size - strlen(err), ": %s", tb_gpu_dgemma_error(b->gpu));
#endif
        return strcmp(err, "cancelled") == 0 ? TB_ERR_CANCELLED : tb_status_of(err, TB_ERR);
    }
    int64_t t_end = host->now_ns(host);
    int64_t t_pre = ec.t_prefill ? ec.t_prefill : t0;
    res->prefill_ns = t_pre - t0;
    res->decode_ns = t_end - t_pre;
    res->forward_passes = stats.steps + stats.encodes;
    res->peak_device_bytes = -1;
    res->energy_mj = -1;
#ifdef TB_HAVE_CUDA
    if (g) { /* the roofline's work (gpu_dgemma.h counts it) and the device's high-water mark */
        res->peak_device_bytes = (int64_t)tb_gpu_peak_bytes(g);
        if (TB_STRUCT_HAS(res, tb_result, peak_bytes_per_s)) {
            double reads = 0, rows = 0;
            tb_gpu_dgemma_take_work(b->gpu, &res->flops, &res->bytes, &reads, &rows);
            res->peak_flops = b->peak_flops > 0 ? b->peak_flops : 0;
            res->peak_bytes_per_s = b->peak_bytes_per_s > 0 ? b->peak_bytes_per_s : 0;
            if (TB_STRUCT_HAS(res, tb_result, moe_tokens)) {
                res->expert_reads = reads;
                res->moe_tokens = rows;
            }
        }
    }
#endif
    tb_request_result *q = &res->requests[0];
    q->n_output_tokens = (uint32_t)n_out;
    q->output_ids = b->out;
    q->n_output_ids = (uint32_t)n_out;
    q->steps_done = (uint32_t)stats.steps;
    uint32_t answer = (uint32_t)n_out; /* through the first EOS */
    for (int i = 0; i < n_out && p.n_eos; i++)
        for (int k = 0; k < p.n_eos; k++)
            if (b->out[i] == p.eos_ids[k] && answer == (uint32_t)n_out)
                answer = (uint32_t)i + 1;
    q->n_answer_tokens = answer;
    q->status = TB_OK;
    return TB_OK;
}
