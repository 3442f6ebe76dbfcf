/* flow.c — the `flow` backend: continuous (embedding-space) diffusion
 * language models in the LangFlow layout (flow_model.h), sampled with
 * Euler (as published) or Heun steps over a noise schedule
 * (flow_sampler.h), on the CPU or the GPU: one network interface
 * (flow_net.h), its implementation chosen once, at create().
 *
 * One generate() call = one batch of canvases, each the prompt (left-padded
 * to the longest) and max_new_tokens positions to generate; `steps` is the
 * number of denoising steps N (forwards: N for euler, 2N - 1 for heun).
 * Nothing is committed before the last forward, so each request's one
 * emission comes at the end (TTFT = E2E): the answer's tokens with their
 * ids, the rest (EOS and after) as a count. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tokbench/backend.h>

#include "backend_common.h"
#include "flow_model.h"
#include "flow_net.h"
#include "flow_sampler.h"
#include "tokenizer.h"

#define FLOW_VERSION "0.3.0" /* 0.2: prompt_gamma "min" models; 0.3: prompt_attention "prompt" */

enum { OPT_DEVICE, OPT_THREADS, OPT_SOLVER, OPT_PROMPT, OPT_PRESET_SEED, N_OPTS };

static const tb_option_decl flow_options[N_OPTS] = {
    [OPT_DEVICE] = TB_OPT_DECL_DEVICE(
        "cpu (float32, OpenBLAS), cuda (bf16 weights, cuBLAS, the sampler on the device; in CUDA builds), "
        "or auto (cuda when this build has CUDA and a device is usable, else cpu)"),
    [OPT_THREADS] = TB_OPT_DECL_THREADS("CPU threads for the GEMMs; 0 = every online CPU"),
    [OPT_SOLVER] = {"solver", TB_OPT_ENUM, "euler",
                    "euler: the published deterministic step (DDIM); heun: second order, 2 forwards a step but the last",
                    TB_CHOICES_TEXT(TB_FLOW_SOLVER_LIST), 0, 0, 0},
    [OPT_PROMPT] = {"prompt", TB_OPT_ENUM, "clean",
                    "clean: prompt positions stay at their embeddings (models trained with clean conditions); "
                    "noised: re-noised to each step's level (models trained unconditionally)",
                    TB_CHOICES_TEXT(TB_FLOW_PROMPT_LIST), 0, 0, 0},
    [OPT_PRESET_SEED] = TB_OPT_DECL_PRESET_SEED,
};

typedef struct flow_ctx {
    const tb_host *host;
    tb_flow_net net;        /* the network on its device */
    const tb_flow_model *m; /* net's shapes and names (its weights are net's business) */
    /* the device's roofline ceilings, measured at load (0: unknown) */
    double peak_flops, peak_bytes_per_s;
    tb_tokenizer *tok; /* NULL: the folder has no tokenizer.json (presets) */
    int32_t *out;      /* [R][N] the last call's generated ids */
    size_t cap_out;
    char *describe_json;
    char error[512];
} flow_ctx;

static void set_error(flow_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_error(flow_ctx *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->error, sizeof c->error, fmt, ap);
    va_end(ap);
}

static char *make_description(const flow_ctx *c)
{
    const tb_flow_config *cfg = &c->m->cfg;
    cJSON *o = cJSON_CreateObject();
    int ok = o != NULL;
    ok &= cJSON_AddStringToObject(o, "model_name", c->m->name) != NULL;
    ok &= cJSON_AddStringToObject(o, "architecture", cfg->arch_name) != NULL;
    ok &= cJSON_AddStringToObject(o, "dtype", c->net.iface->dtype(c->net.ctx)) != NULL;
    ok &= cJSON_AddStringToObject(o, "checkpoint_dtype", c->m->source_dtype) != NULL;
    ok &= cJSON_AddStringToObject(o, "device", c->net.iface->device_name(c->net.ctx)) != NULL;
    ok &= cJSON_AddBoolToObject(o, "random_weights", cfg->random_weights) != NULL;
    if (c->peak_flops > 0) { /* the roofline's ceilings, measured at load, as the ar and diffusion backends say them */
        ok &= cJSON_AddNumberToObject(o, "peak_tflops_bf16", c->peak_flops / 1e12) != NULL;
        ok &= cJSON_AddNumberToObject(o, "peak_tb_per_s", c->peak_bytes_per_s / 1e12) != NULL;
    }
    ok &= cJSON_AddNumberToObject(o, "params", (double)c->m->n_params) != NULL;
    ok &= cJSON_AddNumberToObject(o, "layers", cfg->n_blocks) != NULL;
    ok &= cJSON_AddNumberToObject(o, "hidden_size", cfg->hidden) != NULL;
    ok &= cJSON_AddNumberToObject(o, "context_length", cfg->model_length) != NULL;
    ok &= cJSON_AddBoolToObject(o, "self_conditioning", cfg->self_conditioning) != NULL;
    ok &= cJSON_AddStringToObject(o, "prompt_gamma", cfg->prompt_gamma_min ? "min" : "canvas") != NULL;
    ok &= cJSON_AddStringToObject(o, "prompt_attention", cfg->prompt_attends_prompt ? "prompt" : "full") != NULL;
    ok &= cJSON_AddStringToObject(o, "engine_version", FLOW_VERSION) != NULL;
    ok &= cJSON_AddBoolToObject(o, "tokenizer", c->tok != NULL) != NULL;
    ok &= cJSON_AddBoolToObject(o, "prompt_bos", 0) != NULL;
    char *s = ok ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return s;
}

static void flow_destroy(void *p)
{
    flow_ctx *c = p;
    if (!c)
        return;
    tb_flow_net_close(&c->net);
    tb_tokenizer_free(c->tok);
    free(c->out);
    free(c->describe_json);
    free(c);
}

static tb_status flow_create(const tb_host *host, const char *model, const tb_option_value *options,
                             uint32_t n_options, void **ctx_out, char *err, size_t err_size)
{
    *ctx_out = NULL;
    flow_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, err_size, "out of memory");
        return TB_ERR_NO_MEMORY;
    }
    c->host = host;
    int on_gpu = tb_device_wants_gpu(tb_opt_text(options, n_options, flow_options, OPT_DEVICE));
    uint64_t pseed = (uint64_t)tb_opt_int(options, n_options, flow_options, OPT_PRESET_SEED);
    int threads = (int)tb_opt_int(options, n_options, flow_options, OPT_THREADS);
    int rc = tb_flow_net_open(&c->net, model, on_gpu, pseed, threads, err, err_size);
    if (rc == 0) {
        c->m = c->net.iface->model(c->net.ctx);
        /* a failure to measure leaves the roofline unknown, nothing more */
        if (c->net.iface->ceilings(c->net.ctx, &c->peak_flops, &c->peak_bytes_per_s) != 0)
            c->peak_flops = c->peak_bytes_per_s = 0;
    }
    if (rc == 0 && strncmp(model, "preset:", 7) != 0) {
        char path[4096];
        snprintf(path, sizeof path, "%s/tokenizer.json", model);
        if (access(path, F_OK) == 0) { /* not fopen: a FIFO would block */
            rc = tb_tokenizer_load(path, &c->tok, err, err_size);
            if (rc == 0 && tb_tokenizer_vocab_size(c->tok) > (size_t)c->m->cfg.vocab) {
                snprintf(err, err_size, "%s: %zu tokens, more than the model's vocabulary of %d (config.json)", path,
                         tb_tokenizer_vocab_size(c->tok), c->m->cfg.vocab);
                rc = -1;
            }
        }
    }
    if (rc != 0) {
        tb_status st = strstr(err, "out of memory") || strstr(err, "out of device memory") ? TB_ERR_NO_MEMORY
                                                                                           : TB_ERR_MODEL;
        flow_destroy(c);
        return st;
    }
    c->describe_json = make_description(c);
    if (!c->describe_json) {
        snprintf(err, err_size, "out of memory");
        flow_destroy(c);
        return TB_ERR_NO_MEMORY;
    }
    host->log(host, TB_LOG_INFO, "loaded %s: %s, %lld parameters%s", c->m->name, c->m->cfg.arch_name,
              (long long)c->m->n_params, c->m->cfg.random_weights ? " (random weights)" : "");
    *ctx_out = c;
    return TB_OK;
}

static int on_forward(void *ctx, int forward)
{
    (void)forward;
    const flow_ctx *c = ctx;
    return c->host->cancelled(c->host) ? -1 : 0;
}

/* The most denoising steps a flow case may ask for: the sampler holds a
 * schedule of `steps` doubles and runs a forward each; published
 * continuous-diffusion samplers use at most a few thousand, and past this
 * a case is a typo that would run for ever (or fail out of memory). */
#define FLOW_MAX_STEPS 65536

static tb_status check_request(const tb_request *req, char *why, size_t why_size)
{
    if (req->steps < 1) {
        snprintf(why, why_size, "the flow sampler needs steps >= 1 (got %u): add steps = ... to [matrix]", req->steps);
        return TB_ERR_INVALID;
    }
    if (req->steps > FLOW_MAX_STEPS) {
        snprintf(why, why_size, "steps %u: more than %d, the most the flow sampler takes (FLOW_MAX_STEPS)", req->steps,
                 FLOW_MAX_STEPS);
        return TB_ERR_INVALID;
    }
    if (req->max_new_tokens < 1) {
        snprintf(why, why_size, "max_new_tokens must be >= 1");
        return TB_ERR_INVALID;
    }
    return TB_OK;
}

static tb_status flow_validate(const tb_request *req, char *why, size_t why_size)
{
    return check_request(req, why, why_size);
}

static tb_status flow_generate(void *ctx, const tb_request *req, tb_result *res)
{
    flow_ctx *c = ctx;
    const tb_flow_config *cfg = &c->m->cfg;
    c->error[0] = '\0';
    tb_status st = check_request(req, c->error, sizeof c->error);
    if (st != TB_OK)
        return st;
    uint32_t R = req->n_requests, N = req->max_new_tokens;
    /* prompts: tokenized text, or prompt_tokens synthetic ids */
    int32_t **ids = calloc(R, sizeof *ids);
    size_t *lens = calloc(R, sizeof *lens), P = 0;
    if (!ids || !lens) {
        free(ids);
        free(lens);
        set_error(c, "out of memory");
        return TB_ERR_NO_MEMORY;
    }
    if (req->prompt_text && !c->tok) {
        st = TB_ERR_UNSUPPORTED;
        set_error(c, "text prompts need a tokenizer.json; this model has none");
    }
    uint64_t syn = req->seed ^ 0x2545F4914F6CDD1DULL;
    for (uint32_t r = 0; r < R && st == TB_OK; r++) {
        int64_t n = req->prompt_text ? tb_tokenizer_encode(c->tok, req->prompt_text[r], strlen(req->prompt_text[r]),
                                                           NULL, 0)
                                     : (int64_t)req->prompt_tokens;
        if (n < 0) {
            st = n == TB_TOKENIZER_NO_MEMORY ? TB_ERR_NO_MEMORY : TB_ERR_INVALID;
            set_error(c, "%s on prompt %u", n == TB_TOKENIZER_NO_MEMORY ? "out of memory" : "the tokenizer failed", r);
            break;
        }
        if ((uint64_t)n + N > (uint64_t)cfg->model_length) {
            st = TB_ERR_INVALID;
            set_error(c, "prompt %lld + max_new_tokens %u = %llu positions, more than the model's %d (model_length)",
                      (long long)n, N, (unsigned long long)n + N, cfg->model_length);
            break;
        }
        ids[r] = malloc(((size_t)n + 1) * sizeof(int32_t));
        if (!ids[r]) {
            st = TB_ERR_NO_MEMORY;
            set_error(c, "out of memory");
            break;
        }
        if (req->prompt_text) {
            int64_t again = tb_tokenizer_encode(c->tok, req->prompt_text[r], strlen(req->prompt_text[r]), ids[r],
                                                (size_t)n);
            for (int64_t i = 0; again == n && i < n; i++)
                if (ids[r][i] < 0 || ids[r][i] >= cfg->vocab)
                    again = -1; /* the tokenizer's vocabulary is checked at load; never trust it twice */
            if (again != n) {
                st = again == TB_TOKENIZER_NO_MEMORY ? TB_ERR_NO_MEMORY : TB_ERR_INVALID;
                set_error(c, "%s on prompt %u", again == TB_TOKENIZER_NO_MEMORY ? "out of memory" : "the tokenizer failed",
                          r);
                break;
            }
        } else {
            for (int64_t i = 0; i < n; i++) { /* ids the tokenizer knows, never EOS */
                syn = syn * 6364136223846793005ULL + 1442695040888963407ULL;
                int32_t t = (int32_t)((syn >> 33) % (uint64_t)cfg->vocab);
                ids[r][i] = t == cfg->eos_token_id ? (t + 1) % cfg->vocab : t;
            }
        }
        lens[r] = (size_t)n;
        P = (size_t)n > P ? (size_t)n : P;
    }
    size_t L = P + N;
    int32_t *tokens = NULL;
    int *pad = NULL;
    uint64_t *noise_states = NULL; /* each canvas's starting noise, as a stream (made where the net runs) */
    if (st == TB_OK) {
        tokens = calloc((size_t)R * L, sizeof *tokens);
        pad = calloc(R, sizeof *pad);
        noise_states = malloc(R * sizeof *noise_states);
        if (!tokens || !pad || !noise_states) {
            st = TB_ERR_NO_MEMORY;
            set_error(c, "out of memory for %u canvases of %zu positions", R, L);
        }
    }
    if (st == TB_OK && c->net.iface->reserve(c->net.ctx, (int)R, (int)L, c->error, sizeof c->error) != 0)
        st = tb_status_of(c->error, TB_ERR);
    if (st == TB_OK && (size_t)R * N > c->cap_out) {
        free(c->out);
        c->cap_out = 0;
        if (!(c->out = malloc((size_t)R * N * sizeof *c->out))) {
            st = TB_ERR_NO_MEMORY;
            set_error(c, "out of memory");
        } else {
            c->cap_out = (size_t)R * N;
        }
    }
    if (st == TB_OK) {
        for (uint32_t r = 0; r < R; r++) {
            pad[r] = (int)(P - lens[r]);
            memcpy(tokens + (size_t)r * L + pad[r], ids[r], lens[r] * sizeof(int32_t));
            noise_states[r] = tb_flow_noise_state(req->seed, r);
        }
        tb_flow_params p = {.steps = (int)req->steps};
        p.solver = (tb_flow_solver)tb_opt_choice(req->options, req->n_options, flow_options, OPT_SOLVER,
                                                 tb_flow_solver_choices);
        p.prompt = (tb_flow_prompt)tb_opt_choice(req->options, req->n_options, flow_options, OPT_PROMPT,
                                                 tb_flow_prompt_choices);
        tb_flow_work w;
        int rc = c->net.iface->sample(c->net.ctx, &p, tokens, pad, (int)R, (int)L, (int)P, noise_states, on_forward, c,
                                      &w);
        int64_t now = c->host->now_ns(c->host);
        if (rc != 0) {
            const char *why = c->net.iface->error(c->net.ctx);
            st = c->host->cancelled(c->host) ? TB_ERR_CANCELLED : tb_status_of(why, TB_ERR);
            set_error(c, "%s after %d forwards", st == TB_ERR_CANCELLED ? "cancelled" : why, w.forwards);
        } else {
            res->forward_passes = w.forwards;
            res->prefill_ns = -1; /* no phases: every forward runs the whole canvas */
            res->decode_ns = -1;
            res->peak_device_bytes = w.peak_bytes;
            res->energy_mj = -1;
            if (TB_STRUCT_HAS(res, tb_result, peak_bytes_per_s)) { /* the roofline (docs/METRICS.md) */
                res->flops = w.flops; /* the device's GEMMs and attention, by count */
                res->bytes = w.bytes; /* its weights and K/V, by count */
                res->peak_flops = c->peak_flops;
                res->peak_bytes_per_s = c->peak_bytes_per_s;
            }
            for (uint32_t r = 0; r < R; r++) {
                int32_t *gen = c->out + (size_t)r * N;
                memcpy(gen, tokens + (size_t)r * L + P, N * sizeof(int32_t));
                uint32_t ans = N;
                for (uint32_t i = 0; i < N && cfg->eos_token_id >= 0; i++)
                    if (gen[i] == cfg->eos_token_id) {
                        ans = i;
                        break;
                    }
                const tb_host *h = c->host;
                int with_ids = TB_STRUCT_HAS(h, tb_host, emit_output) && h->emit_output;
                if (ans && with_ids)
                    h->emit_output(h, r, ans, now, gen, NULL, 0);
                if (N - ans && with_ids)
                    h->emit_output(h, r, N - ans, now, NULL, NULL, 0);
                if (!with_ids)
                    h->emit(h, r, N, now);
                tb_request_result *q = &res->requests[r];
                q->n_output_tokens = N;
                q->output_ids = gen;
                q->n_output_ids = N;
                q->n_answer_tokens = ans;
                q->steps_done = req->steps;
                q->status = TB_OK;
                /* one canvas, the whole generation: its forwards each ran
                 * the request's L rows (backend.h, tb_canvas) */
                if (TB_STRUCT_HAS(res, tb_result, canvas) && res->canvas)
                    tb_canvas_push(&res->canvas[r], req->steps, N, (uint64_t)w.forwards * L, now);
            }
        }
    }
    for (uint32_t r = 0; r < R; r++)
        free(ids[r]);
    free(ids);
    free(lens);
    free(tokens);
    free(pad);
    free(noise_states);
    return st;
}

static const char *flow_last_error(void *ctx)
{
    return ((flow_ctx *)ctx)->error;
}

static const char *flow_describe(void *ctx)
{
    return ((flow_ctx *)ctx)->describe_json;
}

static int64_t flow_tokenize(void *ctx, const char *text, int32_t *ids, size_t cap)
{
    flow_ctx *c = ctx;
    if (!c->tok) {
        set_error(c, "this model has no tokenizer.json");
        return -1;
    }
    int64_t n = tb_tokenizer_encode(c->tok, text, strlen(text), ids, cap);
    if (n < 0)
        set_error(c, "%s", n == TB_TOKENIZER_NO_MEMORY ? "out of memory" : "the tokenizer failed");
    return n < 0 ? -1 : n;
}

static int64_t flow_detokenize(void *ctx, const int32_t *ids, size_t n, char *out, size_t cap)
{
    flow_ctx *c = ctx;
    if (!c->tok) {
        set_error(c, "this model has no tokenizer.json");
        return -1;
    }
    int64_t k = tb_tokenizer_decode(c->tok, ids, n, out, cap);
    if (k < 0)
        set_error(c, "%s", k == TB_TOKENIZER_NO_MEMORY ? "out of memory" : "an id outside the vocabulary");
    return k < 0 ? -1 : k;
}

static const tb_backend_ops flow_ops = {
    .abi_major = TB_ABI_MAJOR,
    .struct_size = sizeof(tb_backend_ops),
    .name = "flow",
    .version = FLOW_VERSION,
    .description = "continuous (embedding-space) diffusion LMs, LangFlow layout: Euler/Heun over a noise schedule",
    .capabilities = TB_CAP_BATCH | TB_CAP_STEPS | TB_CAP_TOKENIZER | TB_CAP_MODEL_PATH |
                    (TB_FLOW_NET_HAS_CUDA ? TB_CAP_DEVICE_MEMORY : 0),
    .options = flow_options,
    .n_options = N_OPTS,
    .create = flow_create,
    .destroy = flow_destroy,
    .generate = flow_generate,
    .last_error = flow_last_error,
    .describe = flow_describe,
    .tokenize = flow_tokenize,
    .detokenize = flow_detokenize,
    .validate = flow_validate,
};

__attribute__((visibility("default"))) const tb_backend_ops *tokbench_backend_entry(void);
__attribute__((visibility("default"))) const tb_backend_ops *tokbench_backend_entry(void)
{
    return &flow_ops;
}
