/* diffusion.c — the masked-diffusion backend: LLaDA and Dream models (a
 * Hugging Face folder or a preset with random weights) on tokbench's
 * engine with bidirectional attention, sampled by sampler.c; and the block
 * diffusion models SDAR and Fast-dLLM v2 (block-causal attention, exact
 * KV cache of finished blocks), sampled by block_sampler.c.
 *
 * One generate() call = one batch of canvases (prompt + gen_length masks,
 * gen_length = max_new_tokens) denoised together. Every step's committed
 * tokens are an emission, so time to first commit, the commit curve and
 * time to the full answer come from the runner's usual metrics. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tokbench/backend.h>

#include "backend_common.h"
#include "cpu_engine.h"
#include "dgemma_backend.h"
#include "folder.h"
#ifdef TB_HAVE_CUDA
#include "cuda_engine.h"
#endif
#include "model.h"
#include "generate.h"
#include "sampling.h"
#include "tokenizer.h"

#define DIFFUSION_VERSION "0.1.0"

/* Peak device memory and energy are filled on the GPU path only (-1 on
 * the CPU path; energy also -1 without NVML or for a call too short for
 * its counter), so only a CUDA build claims them. */
#ifdef TB_HAVE_CUDA
#define DIFFUSION_GPU_CAPS (TB_CAP_DEVICE_MEMORY | TB_CAP_ENERGY)
#else
#define DIFFUSION_GPU_CAPS 0
#endif

enum {
    OPT_DEVICE, OPT_THREADS, OPT_SAMPLER, OPT_THRESHOLD, OPT_CACHE, OPT_CFG_SCALE, OPT_TEMPERATURE, OPT_TOP_K,
    OPT_ALG_TEMP, OPT_EPS, OPT_MASK_ID, OPT_PRESET_SEED, OPT_SUB_BLOCK, OPT_DTYPE, OPT_TP, OPT_IGNORE_EOS, OPT_FINAL_STORE, N_OPTS
};

static const tb_option_decl diffusion_options[N_OPTS] = {
    [OPT_DEVICE] = TB_OPT_DECL_DEVICE("cpu (float32, OpenBLAS), cuda (bf16 weights, cuBLAS; picks on the GPU; in CUDA "
                                      "builds), or auto (cuda when this build has CUDA and a device is usable, else cpu)"),
    [OPT_THREADS] = TB_OPT_DECL_THREADS("CPU threads for the GEMMs; 0 = every online CPU"),
    [OPT_SAMPLER] = {"sampler", TB_OPT_ENUM, "low_confidence",
                     "LLaDA remasking (low_confidence, random), Fast-dLLM threshold, Dream's origin, "
                     "maskgit_plus, topk_margin, entropy; block diffusion: SDAR's sdar_static, sdar_dynamic "
                     "(SDAR models), fast_dllm_v2 (Fast-dLLM v2 models); entropy_bound (DiffusionGemma)",
                     TB_CHOICES_TEXT(TB_DLLM_SAMPLER_LIST), 1, 0, 0},
    [OPT_THRESHOLD] = {"threshold", TB_OPT_FLOAT, "0.9",
                       "threshold, sdar_dynamic, fast_dllm_v2: commit every masked position of the block (or "
                       "sub-block) this confident (0, 1]", NULL,
                       -1e9, 1e9, 0},
    [OPT_CACHE] = {"cache", TB_OPT_ENUM, "none",
                   "Fast-dLLM KV cache: prefix (block + suffix over cached prefix) or dual (block alone); "
                   "fast_dllm_v2: dual = its sub-block cache (the sub-block alone over its block's cache)",
                   TB_CHOICES_TEXT(TB_DLLM_CACHE_LIST), 1, 0, 0},
    [OPT_CFG_SCALE] = {"cfg_scale", TB_OPT_FLOAT, "0", "classifier-free guidance scale; 0 = off", NULL, 0, 100, 0},
    [OPT_TEMPERATURE] = {"temperature", TB_OPT_FLOAT, "0",
                         "0 = deterministic; > 0: Gumbel-max (LLaDA family) or sampling (Dream algorithms)", NULL, 0,
                         100, 0},
    [OPT_TOP_K] = {"top_k", TB_OPT_INT, "0", "Dream algorithms: sample among the k most likely; 0 = off", NULL, 0,
                   1e9, 0},
    [OPT_ALG_TEMP] = {"alg_temp", TB_OPT_FLOAT, "0",
                      "Dream algorithms: 0 = commit the most confident, > 0 = draw positions by softmax(conf / T)",
                      NULL, 0, 100, 0},
    [OPT_EPS] = {"eps", TB_OPT_FLOAT, "0.001", "Dream algorithms: the last timestep of linspace(1, eps, steps + 1)",
                 NULL, 1e-9, 0.999, 0},
    [OPT_MASK_ID] = {"mask_id", TB_OPT_INT, "-1", "mask token id; -1 = the model's (config.json's mask_token_id, else its tokenizer's mask token)", NULL, -1, 1e9,
                     TB_OPTF_LOAD},
    [OPT_PRESET_SEED] = TB_OPT_DECL_PRESET_SEED,
    [OPT_TP] = TB_OPT_DECL_TP,
    [OPT_SUB_BLOCK] = {"sub_block", TB_OPT_INT, "0",
                       "fast_dllm_v2: sub-block size (a divisor of block_length); 0 = the whole block", NULL, 0,
                       1e6, 0},
    [OPT_DTYPE] = TB_OPT_DECL_DTYPE,
    [OPT_IGNORE_EOS] = {"ignore_eos", TB_OPT_BOOL, "false",
                        "block samplers: decode past a block that holds an EOS, so every request decodes its whole "
                        "canvas (fixed-length runs); the other samplers always decode the whole canvas",
                        NULL, 1, 0, 0},
    [OPT_FINAL_STORE] = {"final_store", TB_OPT_BOOL, "true",
                         "sdar_static, sdar_dynamic: run the cache-store forward after the last block and after a "
                         "request's EOS block, as SDAR's loop does; false skips them (one forward fewer a request, "
                         "counted in NFE)",
                         NULL, 1, 0, 0},
};

typedef struct dctx {
    const tb_host *host;
    tb_loaded ld;      /* the model (CPU weights, or the GPU's), tokenizer */
    tb_engine eng;     /* the forward on ld's device */
    /* the samplers' forward over it (cpu_engine.h / cuda_engine.h) */
    tb_dllm_engine sampler_engine;
    tb_dllm_cpu cpu_binding;
    int threads;
    int shifted;      /* Dream: position i is predicted from i - 1 */
    int32_t mask_id;
    int32_t *canvas;  /* [B][L] */
    size_t canvas_cap;
    int *pad;              /* [3B]: left padding of each canvas (text prompts), [2B] ... */
    int *prompt_end;       /* ... = pad + 2B, [B]: where each canvas's prompt ends */
    size_t pad_cap;
    int *req_steps;        /* [3][B]: block samplers' denoising forwards, output positions decoded, blocks decoded */
    int64_t *last_emit;    /* [B]: when each request's last tokens were committed (host clock, ns; 0 none yet) */
    size_t req_steps_cap;  /* both arrays' B */
#ifdef TB_HAVE_CUDA
    tb_dllm_cuda cuda_binding;
#endif
    /* Why the last forward failed (the sampler's message says only
     * where), appended to that message: the binding's */
    char *forward_error;
    tb_dg_backend *dg; /* DiffusionGemma (dgemma_backend.h): its own load and sampler; NULL otherwise */
    char *describe_json;
    char error[512];
} dctx;

static void set_error(dctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_error(dctx *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->error, sizeof c->error, fmt, ap);
    va_end(ap);
}

#define OPT_I(v, n, which) tb_opt_int(v, n, diffusion_options, which)
#define OPT_F(v, n, which) tb_opt_float(v, n, diffusion_options, which)
#define OPT_TEXT(v, n, which) tb_opt_text(v, n, diffusion_options, which)
#define OPT_CHOICE(v, n, which, choices) tb_opt_choice(v, n, diffusion_options, which, choices)

/* The sampler parameters of a request (dimensions + options); cfg NULL
 * (validate(): no model yet) or the model's, for its EOS ids and, for a
 * block sampler, its trained block when the case sets no block_length. */
static tb_dllm_params params_of(const tb_request *req, int32_t mask_id, const tb_model_config *cfg)
{
    tb_dllm_params p = {
        .sampler = (tb_dllm_sampler)OPT_CHOICE(req->options, req->n_options, OPT_SAMPLER, tb_dllm_sampler_choices),
        .gen_length = (int)req->max_new_tokens,
        .block_length = req->block_length ? (int)req->block_length : (int)req->max_new_tokens,
        .steps = req->steps ? (int)req->steps : (int)req->max_new_tokens,
        .threshold = OPT_F(req->options, req->n_options, OPT_THRESHOLD),
        .cache = (tb_dllm_cache)OPT_CHOICE(req->options, req->n_options, OPT_CACHE, tb_dllm_cache_choices),
        .cfg_scale = OPT_F(req->options, req->n_options, OPT_CFG_SCALE),
        .temperature = OPT_F(req->options, req->n_options, OPT_TEMPERATURE),
        .top_p = 1,
        .top_k = (int)OPT_I(req->options, req->n_options, OPT_TOP_K),
        .alg_temp = OPT_F(req->options, req->n_options, OPT_ALG_TEMP),
        .eps = OPT_F(req->options, req->n_options, OPT_EPS),
        .mask_id = mask_id,
        .sub_block = (int)OPT_I(req->options, req->n_options, OPT_SUB_BLOCK),
        .skip_final_store = !OPT_I(req->options, req->n_options, OPT_FINAL_STORE),
        /* ignore_eos: no EOS stops a request */
        .eos_ids = cfg ? cfg->eos_ids : NULL,
        .n_eos = cfg && !OPT_I(req->options, req->n_options, OPT_IGNORE_EOS) ? cfg->n_eos : 0,
    };
    if (tb_dllm_is_block_sampler(p.sampler)) {
        if (!req->block_length && cfg && cfg->block_size > 0)
            p.block_length = cfg->block_size;
        if (!req->steps) /* SDAR: steps per block; one token a step by default */
            p.steps = p.block_length;
    }
    return p;
}

static tb_status diffusion_validate(const tb_request *req, char *why, size_t why_size)
{
    tb_dllm_params p = params_of(req, 0, NULL);
    if (tb_dllm_validate(&p, why, why_size) != 0)
        return TB_ERR_INVALID;
    const tb_option_value *o = req->options;
    uint32_t n = req->n_options;
    return tb_load_check(OPT_TEXT(o, n, OPT_DEVICE), OPT_CHOICE(o, n, OPT_DTYPE, tb_dtype_choices) == TB_DTYPE_FP8,
                         (int)OPT_I(o, n, OPT_TP), why, why_size);
}

/* describe()'s JSON; NULL when out of memory (each add checked: a
 * partial description would be stored as if whole). */
static char *make_description(const dctx *c)
{
    const tb_model_config *cfg = &c->ld.model.cfg;
    cJSON *o = cJSON_CreateObject();
    int ok = o != NULL;
    ok &= cJSON_AddStringToObject(o, "model_name", c->ld.model.name) != NULL;
    ok &= cJSON_AddStringToObject(o, "architecture", cfg->arch_name) != NULL;
    ok &= cJSON_AddStringToObject(o, "dtype", tb_loaded_dtype(&c->ld)) != NULL;
    ok &= cJSON_AddStringToObject(o, "checkpoint_dtype", c->ld.model.source_dtype) != NULL;
    const tb_engine_iface *e = c->eng.iface;
    ok &= cJSON_AddStringToObject(o, "device", e->device_name(c->eng.ctx)) != NULL;
    if (e->tensor_parallel(c->eng.ctx) > 0) /* tensor parallel: GPUs 0 .. tp - 1 of the host */
        ok &= cJSON_AddNumberToObject(o, "tensor_parallel", e->tensor_parallel(c->eng.ctx)) != NULL;
    ok &= cJSON_AddBoolToObject(o, "random_weights", cfg->random_weights) != NULL;
    ok &= cJSON_AddNumberToObject(o, "params", (double)c->ld.model.n_params) != NULL;
    ok &= cJSON_AddNumberToObject(o, "mask_id", c->mask_id) != NULL;
    ok &= cJSON_AddBoolToObject(o, "shifted_logits", c->shifted || cfg->arch == TB_ARCH_FAST_DLLM_V2) != NULL;
    if (cfg->block_size > 0)
        ok &= cJSON_AddNumberToObject(o, "model_block_size", cfg->block_size) != NULL;
    /* the samplers whose speed depends on the prompt's content: a case
     * of one on random-token prompts gets a warning (reports/warnings.c) */
    cJSON *adaptive = cJSON_AddArrayToObject(o, "content_dependent_samplers");
    ok &= adaptive != NULL;
    for (size_t i = 0; ok && tb_dllm_sampler_choices[i].name; i++)
        if (tb_dllm_content_dependent((tb_dllm_sampler)tb_dllm_sampler_choices[i].value))
            ok &= cJSON_AddItemToArray(adaptive, cJSON_CreateString(tb_dllm_sampler_choices[i].name));
    ok &= cJSON_AddStringToObject(o, "engine_version", DIFFUSION_VERSION) != NULL;
    ok &= cJSON_AddBoolToObject(o, "tokenizer", c->ld.tok != NULL) != NULL;
    /* for a server's context check (tokbench serve): the positions the
     * model has, and whether a prompt gets a BOS before its tokens */
    if (cfg->max_position_embeddings > 0)
        ok &= cJSON_AddNumberToObject(o, "context_length", cfg->max_position_embeddings) != NULL;
    ok &= cJSON_AddBoolToObject(o, "prompt_bos", tb_prompt_bos(cfg) >= 0) != NULL;
    ok &= cJSON_AddStringToObject(o, "energy", c->ld.energy_note) != NULL;
    ok &= tb_loaded_describe_device(&c->ld, o);
    char *s = ok ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return s;
}

static void diffusion_destroy(void *p)
{
    dctx *c = p;
    if (!c)
        return;
    tb_dllm_cpu_free(&c->cpu_binding);
    tb_loaded_free(&c->ld);
    free(c->canvas);
    free(c->pad);
#ifdef TB_HAVE_CUDA
    tb_dllm_cuda_free(&c->cuda_binding);
#endif
    tb_engine_close(&c->eng);
    tb_dg_backend_free(c->dg);
    free(c->req_steps);
    free(c->last_emit);
    free(c->describe_json);
    free(c);
}

static tb_status diffusion_create(const tb_host *host, const char *model, const tb_option_value *options,
                                  uint32_t n_options, void **ctx_out, char *err, size_t err_size)
{
    *ctx_out = NULL;
    dctx *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, err_size, "out of memory");
        return TB_ERR_NO_MEMORY;
    }
    c->host = host;
    c->threads = (int)OPT_I(options, n_options, OPT_THREADS);
    int on_gpu = tb_device_wants_gpu(OPT_TEXT(options, n_options, OPT_DEVICE));
    int fp8 = OPT_CHOICE(options, n_options, OPT_DTYPE, tb_dtype_choices) == TB_DTYPE_FP8;
    int dgemma = tb_dg_backend_claims(model);
    if (dgemma < 0) {
        snprintf(err, err_size, "out of memory");
        diffusion_destroy(c);
        return TB_ERR_NO_MEMORY;
    }
    if (dgemma) { /* DiffusionGemma: device = cuda runs it on the GPU; auto means the CPU so far */
        int cuda = strcmp(OPT_TEXT(options, n_options, OPT_DEVICE), "cuda") == 0;
        tb_status ds = tb_dg_backend_create(host, model, cuda, fp8, (int)OPT_I(options, n_options, OPT_TP),
                                            (uint64_t)OPT_I(options, n_options, OPT_PRESET_SEED), c->threads,
                                            &c->ld.tok, &c->dg, err, err_size);
        if (ds == TB_OK && !(c->describe_json = strdup(tb_dg_backend_describe(c->dg)))) {
            snprintf(err, err_size, "out of memory");
            ds = TB_ERR_NO_MEMORY;
        }
        if (ds != TB_OK) {
            diffusion_destroy(c);
            return ds;
        }
        *ctx_out = c;
        return TB_OK;
    }
    tb_status st = tb_load(model, 1, on_gpu, fp8,
                           (uint64_t)OPT_I(options, n_options, OPT_PRESET_SEED), (int)OPT_I(options, n_options, OPT_TP),
                           &c->ld, err, err_size);
    if (st != TB_OK) {
        diffusion_destroy(c);
        return st;
    }
    c->shifted = c->ld.model.cfg.arch == TB_ARCH_DREAM;
    if (tb_engine_open(&c->eng, &c->ld, c->threads) != 0) {
        snprintf(err, err_size, "out of memory");
        diffusion_destroy(c);
        return TB_ERR_NO_MEMORY;
    }
    /* the samplers pick on the device where the engine is CUDA's (only
     * tokens and confidences come back), else on the host */
#ifdef TB_HAVE_CUDA
    if (c->ld.gpu) {
        tb_dllm_cuda_init(&c->cuda_binding, c->ld.gpu, c->ld.model.cfg.vocab_size, c->shifted);
        c->sampler_engine = tb_dllm_cuda_engine(&c->cuda_binding);
        c->forward_error = c->cuda_binding.error;
    } else
#endif
    {
        tb_dllm_cpu_bind(&c->cpu_binding, &c->ld.model, &c->eng);
        c->sampler_engine = tb_dllm_cpu_engine(&c->cpu_binding);
        c->forward_error = c->cpu_binding.error;
    }
    int64_t mask = OPT_I(options, n_options, OPT_MASK_ID);
    c->mask_id = mask >= 0 ? (int32_t)mask : c->ld.model.cfg.mask_id;
    if (c->mask_id < 0 || c->mask_id >= c->ld.model.cfg.vocab_size) {
        if (c->mask_id < 0) /* the folder names none (folder.h) */
            tb_folder_no_mask(model, &c->ld.model.cfg, err, err_size);
        else
            snprintf(err, err_size, "mask id %d is outside the vocabulary (set mask_id)", c->mask_id);
        diffusion_destroy(c);
        return TB_ERR_MODEL;
    }
    c->describe_json = make_description(c);
    if (!c->describe_json) {
        snprintf(err, err_size, "out of memory");
        diffusion_destroy(c);
        return TB_ERR_NO_MEMORY;
    }
    host->log(host, TB_LOG_INFO, "loaded %s: %s, %lld parameters, mask id %d%s", c->ld.model.name,
              c->ld.model.cfg.arch_name, (long long)c->ld.model.n_params, c->mask_id,
              c->ld.model.cfg.random_weights ? " (random weights)" : "");
    *ctx_out = c;
    return TB_OK;
}

typedef struct hook_ctx {
    dctx *c;
    int64_t t_prefill; /* block samplers: when the prompt's prefill returned; 0 = none ran */
    tb_canvas_counts *canvas; /* tb_result.canvas, or NULL (a host without it) */
} hook_ctx;

/* A canvas of request b ended: its record (backend.h), timed when its last
 * tokens were committed, not now: a block sampler's store forward runs
 * between the two (SDAR's after the last block too, when the answer is
 * complete), and is no part of the commit. */
static void on_canvas(void *ctx, int b, int steps, int committed, int64_t positions)
{
    hook_ctx *hc = ctx;
    int64_t t = hc->c->last_emit[b] ? hc->c->last_emit[b] : hc->c->host->now_ns(hc->c->host);
    if (hc->canvas)
        tb_canvas_push(&hc->canvas[b], (uint32_t)steps, (uint32_t)committed, (uint64_t)positions, t);
}

static void on_prefill(void *ctx)
{
    hook_ctx *hc = ctx;
    hc->t_prefill = hc->c->host->now_ns(hc->c->host);
}

static void on_commit(void *ctx, int b, int n_tokens)
{
    dctx *c = ((hook_ctx *)ctx)->c;
    c->last_emit[b] = c->host->now_ns(c->host);
    c->host->emit(c->host, (uint32_t)b, (uint32_t)n_tokens, c->last_emit[b]);
}

static int on_cancel(void *ctx)
{
    dctx *c = ((hook_ctx *)ctx)->c;
    return c->host->cancelled(c->host);
}


/* c->canvas = B canvases of P prompt positions (text: left-padded with
 * c->pad[b] filler positions; else synthetic) + masks to the canvas
 * length (gen_length, for a block sampler to a whole block). A block
 * sampler's text prompts are left-padded by whole blocks only, so that a
 * canvas's block grid starts at its first token as in training (a grid
 * shifted by a part of a block puts tokens of two trained blocks in one:
 * docs/METRICS.md has what that cost);
 * each prompt then ends in the last block before P, at c->prompt_end[b],
 * and its masks follow it. */
static tb_status fill_canvases(dctx *c, const tb_request *req, int B, int P, const tb_dllm_params *p,
                               int32_t *const *text_ids, const int64_t *text_len)
{
    const tb_model_config *cfg = &c->ld.model.cfg;
    int L = tb_dllm_canvas_length(p, P);
    if ((size_t)B * L > c->canvas_cap) {
        free(c->canvas);
        c->canvas = malloc((size_t)B * L * sizeof(int32_t));
        c->canvas_cap = c->canvas ? (size_t)B * L : 0;
        if (!c->canvas) {
            set_error(c, "out of memory for %d canvases", B);
            return TB_ERR_NO_MEMORY;
        }
    }
    if ((size_t)B > c->pad_cap) {
        free(c->pad);
        c->pad = malloc(3 * (size_t)B * sizeof *c->pad);
        c->pad_cap = c->pad ? (size_t)B : 0;
        if (!c->pad) {
            set_error(c, "out of memory for %d canvases", B);
            return TB_ERR_NO_MEMORY;
        }
    }
    c->prompt_end = c->pad + 2 * (size_t)B;
    int block = tb_dllm_is_block_sampler(p->sampler) ? p->block_length : 1;
    for (int b = 0; b < B; b++) {
        int32_t *x = c->canvas + (size_t)b * L;
        c->pad[b] = 0;
        c->prompt_end[b] = P;
        if (text_ids) {
            int n = (int)text_len[b];
            c->pad[b] = (P - n) / block * block;
            c->prompt_end[b] = c->pad[b] + n;
            tb_left_pad(x, (size_t)c->prompt_end[b], text_ids[b], (size_t)n, tb_filler_token(cfg));
        } else {
            tb_synth_prompt(cfg, c->ld.tok, c->mask_id, req->seed, (uint32_t)b, x, (size_t)P);
        }
        for (int i = c->prompt_end[b]; i < L; i++)
            x[i] = c->mask_id;
    }
    return TB_OK;
}

static tb_status diffusion_generate(void *ctx, const tb_request *req, tb_result *res)
{
    dctx *c = ctx;
    const tb_host *host = c->host;
    const tb_model_config *cfg = &c->ld.model.cfg;
    c->error[0] = '\0';
    if (c->dg) { /* DiffusionGemma takes its own sampler, and only it */
        int s = (int)OPT_CHOICE(req->options, req->n_options, OPT_SAMPLER, tb_dllm_sampler_choices);
        if (s != TB_DLLM_ENTROPY_BOUND) {
            set_error(c, "sampler %s does not fit DiffusionGemma (it takes entropy_bound)",
                      tb_choice_name(tb_dllm_sampler_choices, s));
            return TB_ERR_INVALID;
        }
        /* the other samplers' options mean nothing to entropy_bound: one set
         * away from its default would label runs that are all the same */
        static const int unused[] = {OPT_THRESHOLD, OPT_CACHE,   OPT_CFG_SCALE, OPT_TEMPERATURE, OPT_TOP_K,
                                     OPT_ALG_TEMP,  OPT_EPS,     OPT_MASK_ID,   OPT_SUB_BLOCK,   OPT_FINAL_STORE};
        for (size_t i = 0; i < sizeof unused / sizeof unused[0]; i++) {
            const tb_option_decl *d = &diffusion_options[unused[i]];
            int set = d->type == TB_OPT_ENUM   ? strcmp(OPT_TEXT(req->options, req->n_options, unused[i]),
                                                        d->default_value) != 0
                      : d->type == TB_OPT_BOOL ? OPT_I(req->options, req->n_options, unused[i]) !=
                                                     (strcmp(d->default_value, "true") == 0)
                                               : OPT_F(req->options, req->n_options, unused[i]) !=
                                                     strtod(d->default_value, NULL);
            if (set) {
                set_error(c, "%s: DiffusionGemma's sampler (entropy_bound) does not use it; leave it at %s",
                          d->name, d->default_value);
                return TB_ERR_INVALID;
            }
        }
        if (req->block_length) {
            set_error(c, "block_length %u: DiffusionGemma's canvas is its config's canvas_length",
                      req->block_length);
            return TB_ERR_INVALID;
        }
        return tb_dg_backend_generate(c->dg, host, c->ld.tok, req, (int)OPT_I(req->options, req->n_options, OPT_IGNORE_EOS),
                                      (int)OPT_I(req->options, req->n_options, OPT_THREADS), res, c->error,
                                      sizeof c->error);
    }
    int64_t t0 = host->now_ns(host);
    tb_energy_mark e0 = tb_loaded_energy_mark(&c->ld, t0);
    c->eng.iface->work_start(c->eng.ctx);
    tb_loaded_memory_start(&c->ld);
    tb_dllm_params p = params_of(req, c->mask_id, cfg);
    if (tb_dllm_validate(&p, c->error, sizeof c->error) != 0)
        return TB_ERR_INVALID;
    /* a block model needs the sampler it was trained for, and only it */
    int block_model = tb_arch_is_block_diffusion(cfg->arch), block_sampler = tb_dllm_is_block_sampler(p.sampler);
    int fast_sampler = p.sampler == TB_DLLM_FAST_DLLM_V2;
    if (block_model != block_sampler || (block_model && fast_sampler != (cfg->arch == TB_ARCH_FAST_DLLM_V2))) {
        set_error(c, "sampler %s does not fit %s (%s)", tb_choice_name(tb_dllm_sampler_choices, p.sampler), cfg->arch_name,
                  cfg->arch == TB_ARCH_SDAR || cfg->arch == TB_ARCH_LLADA2_MOE
                      ? "SDAR and LLaDA 2.x models take sdar_static or sdar_dynamic"
                  : cfg->arch == TB_ARCH_FAST_DLLM_V2 ? "Fast-dLLM v2 models take fast_dllm_v2"
                                                      : "block samplers need a block-diffusion model");
        return TB_ERR_INVALID;
    }
    if (c->shifted && p.cache != TB_DLLM_CACHE_NONE) {
        set_error(c, "cache = %s needs a model with unshifted logits (LLaDA); %s shifts them",
                  tb_choice_name(tb_dllm_cache_choices, p.cache), cfg->arch_name);
        return TB_ERR_UNSUPPORTED;
    }
    int B = (int)req->n_requests, P = (int)req->prompt_tokens;
    /* Text prompts: tokenized, left-padded to the longest (masked). */
    int32_t **text_ids = NULL;
    int64_t *text_len = NULL;
    if (req->prompt_text) {
        /* without a tokenizer: a preset's stand-in tokens, else refused (tb_tokenize_prompts) */
        size_t longest;
        tb_status ts = tb_tokenize_prompts(&c->ld, req->prompt_text, (uint32_t)B, &text_ids, &text_len, &longest,
                                           c->error, sizeof c->error);
        if (ts != TB_OK)
            return ts;
        P = (int)longest;
    }
    /* A canvas longer than the model's positions: refused before any work
     * (its output would mean nothing; P + gen_length would overflow an
     * int near 2^31). */
    int64_t canvas_len = (int64_t)P + p.gen_length;
    if (block_sampler) /* rounded up to a whole block */
        canvas_len = (canvas_len + p.block_length - 1) / p.block_length * p.block_length;
    if (cfg->max_position_embeddings > 0 && canvas_len > cfg->max_position_embeddings) {
        set_error(c, "%s %d + max_new_tokens %d = %lld positions%s, more than the model's %d (%s)",
                  req->prompt_text ? "the longest prompt's tokens" : "prompt_tokens", P, p.gen_length,
                  (long long)canvas_len, block_sampler ? " (to a whole block)" : "", cfg->max_position_embeddings,
                  cfg->arch == TB_ARCH_LLADA ? "max_sequence_length" : "max_position_embeddings");
        tb_free_prompts(text_ids, text_len, (uint32_t)B);
        return TB_ERR_INVALID;
    }
    tb_status rs = fill_canvases(c, req, B, P, &p, text_ids, text_len);
    tb_free_prompts(text_ids, text_len, (uint32_t)B);
    if (rs != TB_OK)
        return rs;
    int L = tb_dllm_canvas_length(&p, P);
    p.prompt_end = c->prompt_end;
    int seqs = p.cfg_scale > 0 ? 2 * B : B;
    for (int b = B; b < seqs; b++) /* the CFG rows B..2B-1 share their canvas's padding */
        c->pad[b] = c->pad[b % B];
    const tb_engine_iface *e = c->eng.iface;
    if (e->reserve(c->eng.ctx, seqs, L, seqs * L, c->error, sizeof c->error) != 0)
        return tb_status_of(c->error, TB_ERR);
    int threads = (int)OPT_I(req->options, req->n_options, OPT_THREADS);
    if (threads > 0)
        e->set_threads(c->eng.ctx, threads);
    if (e->set_padding(c->eng.ctx, c->pad, seqs) != 0) {
        set_error(c, "%s", e->error(c->eng.ctx));
        return TB_ERR;
    }
    if ((size_t)B > c->req_steps_cap) {
        free(c->req_steps);
        free(c->last_emit);
        c->req_steps = malloc(3 * (size_t)B * sizeof(int));
        c->last_emit = malloc((size_t)B * sizeof(int64_t));
        c->req_steps_cap = c->req_steps && c->last_emit ? (size_t)B : 0;
        if (!c->req_steps_cap) {
            set_error(c, "out of memory for %d canvases", B);
            return TB_ERR_NO_MEMORY;
        }
    }
    memset(c->req_steps, 0, 3 * (size_t)B * sizeof(int));
    memset(c->last_emit, 0, (size_t)B * sizeof(int64_t));
    hook_ctx hc = {c, 0, TB_STRUCT_HAS(res, tb_result, canvas) ? res->canvas : NULL};
    tb_dllm_hooks hooks = {.ctx = &hc, .on_commit = on_commit, .cancelled = on_cancel, .on_prefill = on_prefill,
                           .on_canvas = on_canvas};
    tb_dllm_stats stats = {
        .request_steps = c->req_steps, .request_tokens = c->req_steps + B, .request_blocks = c->req_steps + 2 * B};
    c->forward_error[0] = '\0';
    int64_t t_denoise = host->now_ns(host);
    int rc = tb_dllm_generate(&c->sampler_engine, &p, c->canvas, B, P, req->seed, &hooks, &stats, c->error, sizeof c->error);
    int64_t t_end = host->now_ns(host);
    if (rc == 1) {
        set_error(c, "cancelled after %d steps", stats.steps);
        return TB_ERR_CANCELLED;
    }
    if (rc != 0) {
        if (c->forward_error[0]) {
            size_t len = strlen(c->error);
            snprintf(c->error + len, sizeof c->error - len, ": %s", c->forward_error);
        }
        return tb_status_of(c->error, TB_ERR); /* "out of memory" from the sampler or a forward */
    }
    /* prompt-only work: building the canvases (no forward runs on the
     * prompt alone in the full-attention samplers), and for a block
     * sampler its prompt prefill (the block-causal forward of the prompt's
     * whole blocks) too */
    int64_t t_prefilled = hc.t_prefill ? hc.t_prefill : t_denoise;
    res->prefill_ns = t_prefilled - t0;
    res->decode_ns = t_end - t_prefilled;
    res->forward_passes = stats.forwards;
    if (stats.mask_fallbacks > 0)
        host->log(host, TB_LOG_WARN,
                  "%d denoising forward(s) ran with the mask token kept from the proposals: the model proposed it "
                  "where upstream's loop would then fail (SDAR) or repeat a forward forever (Fast-dLLM v2)",
                  stats.mask_fallbacks);
    res->peak_device_bytes = tb_loaded_memory_peak(&c->ld); /* -1 on the CPU */
    res->energy_mj = tb_loaded_energy_mj(&c->ld, e0, t_end);     /* -1 on the CPU */
    e->work_report(c->eng.ctx, res);
    for (int b = 0; b < B; b++) {
        tb_request_result *q = &res->requests[b];
        const int32_t *gen = c->canvas + (size_t)b * L + c->prompt_end[b];
        /* a block sampler's request that stopped at an EOS decoded its
         * positions through that block only: the rest are not output */
        uint32_t n_out = (uint32_t)(block_sampler ? c->req_steps[B + b] : p.gen_length);
        q->n_output_tokens = n_out;
        q->n_answer_tokens = tb_answer_length(cfg, gen, n_out);
        q->output_ids = gen;
        q->n_output_ids = n_out;
        /* block samplers: the request's own denoising forwards (a
         * finished or stopped request leaves the batch's forwards) */
        q->steps_done = (uint32_t)(block_sampler ? c->req_steps[b] : stats.steps);
        q->status = TB_OK;
        if (block_sampler && TB_STRUCT_HAS(res, tb_result, blocks_done) && res->blocks_done)
            res->blocks_done[b] = (uint32_t)c->req_steps[2 * B + b];
    }
    return TB_OK;
}

static const char *diffusion_last_error(void *ctx)
{
    return ((dctx *)ctx)->error;
}

static const char *diffusion_describe(void *ctx)
{
    return ((dctx *)ctx)->describe_json;
}

static int64_t diffusion_tokenize(void *ctx, const char *text, int32_t *ids, size_t cap)
{
    dctx *c = ctx;
    return tb_loaded_tokenize(&c->ld, text, ids, cap, c->error, sizeof c->error);
}

static int64_t diffusion_detokenize(void *ctx, const int32_t *ids, size_t n, char *out, size_t cap)
{
    dctx *c = ctx;
    return tb_loaded_detokenize(&c->ld, ids, n, out, cap, c->error, sizeof c->error);
}

static int diffusion_is_special(void *ctx, int32_t id)
{
    dctx *c = ctx;
    return tb_loaded_is_special(&c->ld, id);
}

static const tb_backend_ops diffusion_ops = {
    .abi_major = TB_ABI_MAJOR,
    .struct_size = sizeof(tb_backend_ops),
    .name = "diffusion",
    .version = DIFFUSION_VERSION,
    .description = "masked-diffusion LLaDA/Dream on tokbench's engine: LLaDA, Fast-dLLM and Dream samplers",
    .capabilities = TB_CAP_BATCH | TB_CAP_STEPS | TB_CAP_BLOCKS | TB_CAP_STREAMING | TB_CAP_TOKENIZER |
                    TB_CAP_MODEL_PATH | DIFFUSION_GPU_CAPS,
    .options = diffusion_options,
    .n_options = N_OPTS,
    .create = diffusion_create,
    .destroy = diffusion_destroy,
    .generate = diffusion_generate,
    .last_error = diffusion_last_error,
    .describe = diffusion_describe,
    .tokenize = diffusion_tokenize,
    .detokenize = diffusion_detokenize,
    .validate = diffusion_validate,
    .is_special = diffusion_is_special,
};

__attribute__((visibility("default"))) const tb_backend_ops *tokbench_backend_entry(void);
__attribute__((visibility("default"))) const tb_backend_ops *tokbench_backend_entry(void)
{
    return &diffusion_ops;
}
