/* ar.c — the autoregressive backend: a Llama/Qwen2 model from a Hugging
 * Face folder (or a preset with random weights) on tokbench's own engine.
 *
 * One generate() call = one batch: prefill every prompt in one forward,
 * then one forward per decode step for the whole batch. Each decode step's
 * token is an emission; benchmarks default to fixed output lengths
 * (ignore_eos = true), so every request produces exactly max_new_tokens.
 *
 * With a drafter (option `drafter`), the decode is speculative: spec.h's
 * loop, drafter.h's drafters; the output stays the target's (lossless)
 * unless forced_acceptance fixes the acceptance for cost figures. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tokbench/backend.h>

#include "backend_common.h"
#include "drafter.h"
#include "engine.h"
#include "model.h"
#include "sampling.h"
#include "spec.h"
#include "tokenizer.h"

#define AR_VERSION "0.1.0"

/* Peak device memory and energy are filled on the GPU path only (-1 on
 * the CPU path; energy also -1 without NVML or for a call too short for
 * its counter), so only a CUDA build claims them. */
#ifdef TB_HAVE_CUDA
#define AR_GPU_CAPS (TB_CAP_DEVICE_MEMORY | TB_CAP_ENERGY)
#else
#define AR_GPU_CAPS 0
#endif

enum {
    OPT_DEVICE, OPT_THREADS, OPT_TEMPERATURE, OPT_TOP_K, OPT_TOP_P, OPT_IGNORE_EOS, OPT_PRESET_SEED, OPT_DTYPE, OPT_TP,
    OPT_DRAFTER, OPT_DRAFT_MODEL, OPT_DRAFT_LEN, OPT_FORCED_ACCEPTANCE, OPT_TOKENIZER, N_OPTS
};

/* `drafter`: speculative decoding's drafter kind (drafter.h); an enum, so
 * that a suite sweeps it (a string option is one value) */
#define AR_DRAFTER_LIST(X, SEP) X(DRAFT_NONE, "none") SEP X(DRAFT_AR, "ar") SEP X(DRAFT_SELF, "self") SEP X(DRAFT_DFLASH, "dflash")
typedef enum { TB_CHOICES_ENUM(AR_DRAFTER_LIST) } draft_kind;
static const tb_choice draft_choices[] = TB_CHOICES_TABLE(AR_DRAFTER_LIST);

static const tb_option_decl ar_options[N_OPTS] = {
    [OPT_DEVICE] = TB_OPT_DECL_DEVICE("cpu (float32, OpenBLAS), cuda (bf16 weights, cuBLAS, CUDA graphs; in CUDA builds), "
                                      "or auto (cuda when this build has CUDA and a device is usable, else cpu)"),
    [OPT_THREADS] = TB_OPT_DECL_THREADS("CPU threads for GEMMs and attention; 0 = every online CPU"),
    [OPT_TEMPERATURE] = {"temperature", TB_OPT_FLOAT, "0", "0 = greedy; > 0 samples from softmax(logits / T)", NULL, 0,
                         100, 0},
    [OPT_TOP_K] = {"top_k", TB_OPT_INT, "0", "sample among the k most likely tokens; 0 = off", NULL, 0, 1e9, 0},
    [OPT_TOP_P] = {"top_p", TB_OPT_FLOAT, "1", "sample among the smallest set with this much mass; 1 = off", NULL,
                   1e-6, 1, 0},
    [OPT_IGNORE_EOS] = {"ignore_eos", TB_OPT_BOOL, "true",
                        "keep generating past EOS so every request yields max_new_tokens (fixed-length benchmarks)",
                        NULL, 1, 0, 0},
    [OPT_PRESET_SEED] = TB_OPT_DECL_PRESET_SEED,
    [OPT_DTYPE] = TB_OPT_DECL_DTYPE,
    [OPT_TP] = TB_OPT_DECL_TP,
    [OPT_DRAFTER] = {"drafter", TB_OPT_ENUM, "none",
                     "speculative decoding: none (plain AR), ar (draft_model: a small AR model sharing the target's "
                     "vocabulary), self (the target drafts for itself: a block-diffusion model in SDAR's layout, one "
                     "shared cache) or dflash (draft_model: a DFlash drafter conditioned on the target's hidden "
                     "states)",
                     TB_CHOICES_TEXT(AR_DRAFTER_LIST), 1, 0, TB_OPTF_LOAD},
    [OPT_DRAFT_MODEL] = {"draft_model", TB_OPT_STRING, "",
                         "the drafter's model for drafter = ar or dflash: a Hugging Face folder or preset:NAME "
                         "(ignored with drafter = none); a path is relative to the suite file",
                         NULL, 0, 0, TB_OPTF_LOAD | TB_OPTF_MODEL},
    [OPT_DRAFT_LEN] = {"draft_len", TB_OPT_INT, "0",
                       "draft tokens per verification with a drafter; 0 = the drafter's own (self, dflash: its block "
                       "size - 1; ar: 4)",
                       NULL, 0, TB_SPEC_MAX_DRAFT, 0},
    [OPT_FORCED_ACCEPTANCE] = {"forced_acceptance", TB_OPT_INT, "0",
                               "cost figures on random weights: every verification accepts exactly min(N, "
                               "draft_len) draft tokens, whatever the target says (the output is then not the "
                               "target's); 0 = off (the real rule); ignored with drafter = none",
                               NULL, 0, TB_SPEC_MAX_DRAFT, TB_OPTF_LOAD},
    [OPT_TOKENIZER] = {"tokenizer", TB_OPT_STRING, "",
                       "a preset's tokenizer (a tokenizer.json or a model folder holding one): prompts are "
                       "tokenized with it and tokens are chosen among its ids only (every logit is still "
                       "computed: the preset's work), so that every output token is text that streams (tokbench "
                       "serve); not with a model folder (its own), a drafter or tp; a path is relative to the "
                       "suite file",
                       NULL, 0, 0, TB_OPTF_LOAD | TB_OPTF_MODEL},
};

/* The drafter kind the options name, *model its draft_model; -1 with why
 * when they do not fit together (a model for ar and dflash, none for self;
 * none ignores it, so that `drafter = none, ar` sweeps with one model). */
static int draft_kind_of(const tb_option_value *o, uint32_t n, const char **model, char *why, size_t why_size)
{
    int kind = tb_opt_choice(o, n, ar_options, OPT_DRAFTER, draft_choices);
    *model = tb_opt_text(o, n, ar_options, OPT_DRAFT_MODEL);
    int wants = kind == DRAFT_AR || kind == DRAFT_DFLASH, has = *model && **model;
    if (kind < 0) {
        snprintf(why, why_size, "drafter: expected one of %s", TB_CHOICES_TEXT(AR_DRAFTER_LIST));
        return -1;
    }
    if (wants && !has) {
        snprintf(why, why_size, "drafter = %s needs draft_model = a model folder or preset:NAME",
                 tb_choice_name(draft_choices, kind));
        return -1;
    }
    if (kind == DRAFT_SELF && has) {
        snprintf(why, why_size, "draft_model = %s: drafter = self drafts with the target itself (ar and dflash "
                 "take a draft_model)", *model);
        return -1;
    }
    return kind;
}

/* One request of a stepped session (continuous batching, step_* ops). */
typedef struct ar_slot {
    enum { SLOT_FREE, SLOT_JOINED, SLOT_RUNNING } state;
    int32_t *prompt;      /* [n_prompt] ids, BOS included (JOINED) */
    size_t n_prompt;
    uint32_t max_new;     /* its limit */
    int32_t *out;         /* [session max_new] generated ids */
    uint32_t n_out;
    int32_t next;         /* the token its next decode step feeds */
    int past_eos;         /* produced EOS with ignore_eos: still generating */
    int ignore_eos;
    tb_sampling smp;
    uint64_t rng;
} ar_slot;

/* A stepped session: slots[n] share the engine's KV cache, slot i's
 * sequence in cache sequence i; each holds at most `len` positions. */
typedef struct ar_session {
    ar_slot *slots;
    uint32_t n;
    uint32_t max_new;     /* step_open's limit on any request */
    size_t len;           /* positions per slot: prompt + output */
    int *run_slots;       /* [n] scratch: the slots of one decode step */
    int32_t *run_tokens;  /* [n] their tokens */
    int *join_slots;      /* [n] scratch: the slots of one prefill */
    int32_t *join_tokens; /* [n][len] their prompts */
    int32_t *join_next;   /* [n] their first tokens (the GPU's argmax) */
} ar_session;

typedef struct ar_ctx {
    const tb_host *host;
    tb_loaded ld;          /* the model (CPU weights, or the GPU's), tokenizer */
    tb_engine eng;         /* the forward on ld's device; its cache grown on demand */
    int threads;
    int32_t *prompt;       /* [R][P] */
    int32_t *out;          /* [R][N] generated ids */
    int32_t *next;         /* [R] the tokens of the next step */
    float *logits;         /* [R][vocab] */
    float *scratch;        /* [2 vocab] for sampling */
    size_t cap_r, cap_n, cap_p;
    char *describe_json;
    char error[512];
    ar_drafter drafter;     /* speculative decoding's, when drafter != none */
    int forced;             /* forced_acceptance (a load option: describe() says it) */
    ar_session step;        /* a stepped session (tokbench serve), when open */
} ar_ctx;

static void set_error(ar_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_error(ar_ctx *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->error, sizeof c->error, fmt, ap);
    va_end(ap);
}

#define OPT_I(v, n, which) tb_opt_int(v, n, ar_options, which)
#define OPT_F(v, n, which) tb_opt_float(v, n, ar_options, which)

/* describe()'s JSON; NULL when out of memory (each add checked: a
 * partial description would be stored as if whole). */
static char *make_description(const ar_ctx *c)
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
    if (e->kernels(c->eng.ctx))
        ok &= cJSON_AddStringToObject(o, "kernels", e->kernels(c->eng.ctx)) != NULL;
    ok &= cJSON_AddBoolToObject(o, "random_weights", cfg->random_weights) != NULL;
    ok &= cJSON_AddNumberToObject(o, "params", (double)c->ld.model.n_params) != NULL;
    ok &= cJSON_AddNumberToObject(o, "layers", cfg->n_layers) != NULL;
    ok &= cJSON_AddNumberToObject(o, "hidden_size", cfg->hidden_size) != NULL;
    ok &= cJSON_AddNumberToObject(o, "threads", c->threads) != NULL;
    ok &= cJSON_AddStringToObject(o, "engine_version", AR_VERSION) != NULL;
    ok &= cJSON_AddStringToObject(o, "blas", "OpenBLAS") != NULL;
    ok &= cJSON_AddBoolToObject(o, "tokenizer", c->ld.tok != NULL) != NULL;
    if (c->ld.pick_vocab > 0) /* a preset's tokenizer: tokens among its ids only */
        ok &= cJSON_AddNumberToObject(o, "chosen_among_ids", c->ld.pick_vocab) != NULL;
    /* for a server's context check (tokbench serve): the positions the
     * model has, and whether a prompt gets a BOS before its tokens */
    if (cfg->max_position_embeddings > 0)
        ok &= cJSON_AddNumberToObject(o, "context_length", cfg->max_position_embeddings) != NULL;
    ok &= cJSON_AddBoolToObject(o, "prompt_bos", tb_prompt_bos(cfg) >= 0) != NULL;
    ok &= cJSON_AddStringToObject(o, "energy", c->ld.energy_note) != NULL;
    if (c->drafter.ops) { /* speculative decoding */
        const ar_drafter_ops *d = c->drafter.ops;
        ok &= cJSON_AddStringToObject(o, "drafter", d->kind) != NULL;
        if (*d->model_name(c->drafter.ctx))
            ok &= cJSON_AddStringToObject(o, "draft_model", d->model_name(c->drafter.ctx)) != NULL;
        ok &= cJSON_AddNumberToObject(o, "draft_len_default", d->default_len(c->drafter.ctx)) != NULL;
        if (c->forced > 0) {
            ok &= cJSON_AddNumberToObject(o, "forced_acceptance", c->forced) != NULL;
            ok &= cJSON_AddStringToObject(o, "forced_acceptance_note",
                                          "each verification accepts a fixed count of draft tokens whatever the "
                                          "target says: a cost figure; the output is not the target's") != NULL;
        }
    }
    ok &= tb_loaded_describe_device(&c->ld, o);
    char *s = ok ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return s;
}

static void ar_step_close(void *ctx);

static void ar_destroy(void *p)
{
    ar_ctx *c = p;
    if (!c)
        return;
    ar_step_close(c);
    ar_drafter_close(&c->drafter);
    tb_engine_close(&c->eng);
    tb_loaded_free(&c->ld);
    free(c->prompt);
    free(c->out);
    free(c->next);
    free(c->logits);
    free(c->scratch);
    free(c->describe_json);
    free(c);
}

/* Whether the tokenizer option is set with what it cannot go with (a
 * drafter kind, tp), why in why. */
static int tokenizer_conflict(const tb_option_value *o, uint32_t n, int kind, char *why, size_t why_size)
{
    const char *tok = tb_opt_text(o, n, ar_options, OPT_TOKENIZER);
    if (!tok[0] || (kind == DRAFT_NONE && OPT_I(o, n, OPT_TP) <= 0))
        return 0;
    snprintf(why, why_size, "tokenizer = %s: not with %s", tok,
             kind != DRAFT_NONE ? "a drafter (the drafts would choose among every id)" : "tp");
    return 1;
}

/* At suite load (--dry-run too): what create() would refuse of the
 * device options, said before anything runs. */
static tb_status ar_validate(const tb_request *req, char *why, size_t why_size)
{
    const tb_option_value *o = req->options;
    uint32_t n = req->n_options;
    const char *path;
    int kind = draft_kind_of(o, n, &path, why, why_size);
    if (kind < 0)
        return TB_ERR_INVALID;
    if (tokenizer_conflict(o, n, kind, why, why_size))
        return TB_ERR_UNSUPPORTED;
    return tb_load_check(tb_opt_text(o, n, ar_options, OPT_DEVICE),
                         tb_opt_choice(o, n, ar_options, OPT_DTYPE, tb_dtype_choices) == TB_DTYPE_FP8,
                         (int)OPT_I(o, n, OPT_TP), why, why_size);
}

static tb_status ar_create(const tb_host *host, const char *model, const tb_option_value *options, uint32_t n_options,
                           void **ctx_out, char *err, size_t err_size)
{
    *ctx_out = NULL;
    ar_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, err_size, "out of memory");
        return TB_ERR_NO_MEMORY;
    }
    c->host = host;
    c->threads = (int)OPT_I(options, n_options, OPT_THREADS);
    int on_gpu = tb_device_wants_gpu(tb_opt_text(options, n_options, ar_options, OPT_DEVICE));
    int fp8 = tb_opt_choice(options, n_options, ar_options, OPT_DTYPE, tb_dtype_choices) == TB_DTYPE_FP8;
    const char *draft_path;
    int kind = draft_kind_of(options, n_options, &draft_path, err, err_size);
    if (kind < 0) {
        ar_destroy(c);
        return TB_ERR_INVALID;
    }
    uint64_t preset_seed = (uint64_t)OPT_I(options, n_options, OPT_PRESET_SEED);
    /* self-speculation's target is a block-diffusion model that also runs causally */
    tb_status st = tb_load(model, kind == DRAFT_SELF ? 1 : TB_LOAD_AR_OR_SDAR, on_gpu, fp8, preset_seed, (int)OPT_I(options, n_options, OPT_TP),
                           &c->ld, err, err_size);
    if (st != TB_OK && kind == DRAFT_SELF) {
        char why[400];
        snprintf(why, sizeof why, "%s", err);
        snprintf(err, err_size,
                 "drafter = self needs a block-diffusion model in SDAR's layout (model_type sdar with a "
                 "mask_token_id): %s", why);
    }
    if (st != TB_OK) {
        ar_destroy(c);
        return st;
    }
    const char *tok_path = tb_opt_text(options, n_options, ar_options, OPT_TOKENIZER);
    if (tokenizer_conflict(options, n_options, kind, err, err_size)) {
        ar_destroy(c);
        return TB_ERR_UNSUPPORTED;
    }
    if (tok_path[0]) {
        st = tb_loaded_set_tokenizer(&c->ld, tok_path, err, err_size);
        if (st != TB_OK) {
            ar_destroy(c);
            return st;
        }
    }
    if (tb_engine_open(&c->eng, &c->ld, c->threads) != 0) {
        snprintf(err, err_size, "out of memory");
        ar_destroy(c);
        return TB_ERR_NO_MEMORY;
    }
    int dr = 0;
    if (kind == DRAFT_AR)
        dr = ar_drafter_open_ar(&c->drafter, draft_path, &c->ld, on_gpu, fp8, preset_seed, c->threads, err, err_size);
    else if (kind == DRAFT_SELF)
        dr = ar_drafter_open_self(&c->drafter, &c->ld, &c->eng, err, err_size);
    else if (kind == DRAFT_DFLASH)
        dr = ar_drafter_open_dflash(&c->drafter, draft_path, &c->ld, &c->eng, preset_seed, err, err_size);
    if (dr != 0) {
        ar_destroy(c);
        return tb_status_of(err, TB_ERR_MODEL);
    }
    c->forced = kind == DRAFT_NONE ? 0 : (int)OPT_I(options, n_options, OPT_FORCED_ACCEPTANCE);
    c->describe_json = make_description(c);
    if (!c->describe_json) {
        snprintf(err, err_size, "out of memory");
        ar_destroy(c);
        return TB_ERR_NO_MEMORY;
    }
    host->log(host, TB_LOG_INFO, "loaded %s: %s, %lld parameters%s", c->ld.model.name, c->ld.model.cfg.arch_name,
              (long long)c->ld.model.n_params, c->ld.model.cfg.random_weights ? " (random weights)" : "");
    if (c->forced > 0)
        host->log(host, TB_LOG_WARN,
                  "forced_acceptance = %d: every verification accepts min(%d, draft_len) draft tokens whatever the "
                  "target says; the figures are the cost of drafting and verifying, the output is not the target's",
                  c->forced, c->forced);
    *ctx_out = c;
    return TB_OK;
}

/* The host's buffers for R requests of P prompt and N new tokens (the
 * engine's cache is reserved by each call: decode_loop). */
static tb_status reserve_buffers(ar_ctx *c, size_t R, size_t P, size_t N)
{
    const tb_model_config *cfg = &c->ld.model.cfg;
    if (R > c->cap_r || P > c->cap_p || N > c->cap_n) {
        size_t r = R > c->cap_r ? R : c->cap_r, p = P > c->cap_p ? P : c->cap_p, n = N > c->cap_n ? N : c->cap_n;
        free(c->prompt);
        free(c->out);
        free(c->next);
        free(c->logits);
        c->prompt = malloc(r * p * sizeof(int32_t));
        c->out = malloc(r * n * sizeof(int32_t));
        c->next = malloc(r * sizeof(int32_t));
        c->logits = malloc(r * (size_t)cfg->vocab_size * sizeof(float));
        if (!c->scratch)
            c->scratch = malloc(2 * (size_t)cfg->vocab_size * sizeof(float));
        c->cap_r = c->cap_p = c->cap_n = 0;
        if (!c->prompt || !c->out || !c->next || !c->logits || !c->scratch) {
            set_error(c, "out of memory for a batch of %zu x %zu tokens", r, p + n);
            return TB_ERR_NO_MEMORY;
        }
        c->cap_r = r, c->cap_p = p, c->cap_n = n;
    }
    return TB_OK;
}

/* One batch on the engine: prefill every prompt (c->prompt [R][P]) in one
 * forward, then one forward per decode step for the whole batch; each
 * step's token of each request is an emission. Greedy tokens are chosen by
 * the engine (on the device for CUDA: only next[R] comes back); with
 * temperature > 0 the step's logits come to the host and are sampled. */
static tb_status decode_loop(ar_ctx *c, tb_result *res, uint32_t R, size_t P, uint32_t N, const int *pad,
                             int threads, const tb_sampling *smp, int ignore_eos, uint64_t *rng)
{
    const tb_host *host = c->host;
    const tb_model_config *cfg = &c->ld.model.cfg;
    const tb_engine_iface *e = c->eng.iface;
    void *ec = c->eng.ctx;
    size_t V = (size_t)cfg->vocab_size;
    tb_loaded_memory_start(&c->ld); /* the call's peak includes what it reserves */
    if (e->reserve(ec, (int)R, (int)(P + N), (int)(R * P), c->error, sizeof c->error) != 0)
        return tb_status_of(c->error, TB_ERR);
    if (threads > 0)
        e->set_threads(ec, threads);
    if (e->set_padding(ec, pad, (int)R) != 0) {
        set_error(c, "%s", e->error(ec));
        return TB_ERR;
    }
    float *logits = smp->temperature > 0 ? c->logits : NULL; /* [R][V]: sampled on the host */
    uint32_t *n_out = calloc(R, sizeof *n_out);
    int *done = calloc(R, sizeof *done), *fresh = calloc(R, sizeof *fresh);
    if (!n_out || !done || !fresh) {
        free(n_out);
        free(done);
        free(fresh);
        set_error(c, "out of memory");
        return TB_ERR_NO_MEMORY;
    }
    tb_status rc = TB_OK;
    int64_t t0 = host->now_ns(host), t_prefill_end = 0, forwards = 0;
    tb_energy_mark e0 = tb_loaded_energy_mark(&c->ld, t0);
    e->work_start(ec);
    for (uint32_t step = 0; step < N; step++) {
        if (step > 0 && host->cancelled(host)) {
            set_error(c, "cancelled after %u of %u decode steps", step, N);
            rc = TB_ERR_CANCELLED;
            break;
        }
        int err = step == 0 ? e->prefill(ec, c->prompt, (int)R, (int)P, c->next, logits)
                            : e->decode(ec, c->next, (int)R, logits);
        if (err) {
            set_error(c, "%s", e->error(ec));
            rc = TB_ERR;
            break;
        }
        forwards++;
        int active = 0;
        for (uint32_t r = 0; r < R; r++) {
            if (logits)
                c->next[r] = tb_sample(logits + r * V, tb_loaded_pick_vocab(&c->ld), smp, rng, c->scratch);
            int32_t t = c->next[r];
            fresh[r] = done[r] == 1 ? 0 : done[r] == 2 || tb_is_eos(cfg, t) ? 2 : 1;
            if (done[r] == 1)
                continue; /* still computed with the batch, not counted */
            c->out[(size_t)r * N + n_out[r]++] = t;
            if (tb_is_eos(cfg, t))
                done[r] = ignore_eos ? 2 : 1;
            active += done[r] != 1;
        }
        int64_t now = host->now_ns(host);
        if (step == 0)
            t_prefill_end = now;
        for (uint32_t r = 0; r < R; r++)
            if (fresh[r]) /* the answer's tokens with their ids; its EOS and after: counted only */
                ar_emit_token(host, r, fresh[r] == 1 ? &c->out[(size_t)r * N + n_out[r] - 1] : NULL, now);
        if (!active)
            break;
    }
    int64_t t_end = host->now_ns(host);
    res->prefill_ns = t_prefill_end ? t_prefill_end - t0 : -1;
    res->decode_ns = t_prefill_end ? t_end - t_prefill_end : -1;
    res->forward_passes = forwards;
    res->peak_device_bytes = tb_loaded_memory_peak(&c->ld); /* -1 on the CPU */
    res->energy_mj = tb_loaded_energy_mj(&c->ld, e0, t_end);
    e->work_report(ec, res);
    for (uint32_t r = 0; r < R; r++) {
        tb_request_result *q = &res->requests[r];
        q->n_output_tokens = n_out[r];
        q->output_ids = c->out + (size_t)r * N;
        q->n_output_ids = n_out[r];
        q->n_answer_tokens = tb_answer_length(cfg, q->output_ids, n_out[r]);
        q->status = rc;
    }
    free(n_out);
    free(done);
    free(fresh);
    return rc;
}

static tb_status ar_generate(void *ctx, const tb_request *req, tb_result *res)
{
    ar_ctx *c = ctx;
    const tb_model_config *cfg = &c->ld.model.cfg;
    c->error[0] = '\0';
    if (c->step.slots) { /* its caches are the session's */
        set_error(c, "generate() while a stepped session is open");
        return TB_ERR_UNSUPPORTED;
    }
    uint32_t R = req->n_requests, N = req->max_new_tokens;
    size_t P = req->prompt_tokens;
    tb_sampling smp = {OPT_F(req->options, req->n_options, OPT_TEMPERATURE),
                       (int)OPT_I(req->options, req->n_options, OPT_TOP_K),
                       OPT_F(req->options, req->n_options, OPT_TOP_P)};
    int ignore_eos = OPT_I(req->options, req->n_options, OPT_IGNORE_EOS) != 0;
    int threads = (int)OPT_I(req->options, req->n_options, OPT_THREADS);

    /* Prompts: given text (tokenized; unequal lengths are left-padded to
     * the longest and the padding masked), or synthetic of exactly P
     * tokens. */
    int32_t **text_ids = NULL;
    int64_t *text_len = NULL;
    if (req->prompt_text) {
        /* without a tokenizer: a preset's stand-in tokens, else refused (tb_tokenize_prompts) */
        tb_status ts = tb_tokenize_prompts(&c->ld, req->prompt_text, R, &text_ids, &text_len, &P, c->error,
                                           sizeof c->error);
        if (ts != TB_OK)
            return ts;
    }
    if (P < 1 || N < 1) {
        set_error(c, "prompt_tokens and max_new_tokens must be >= 1 (got %zu, %u)", P, N);
        tb_free_prompts(text_ids, text_len, R);
        return TB_ERR_INVALID;
    }
    /* Past the positions it was trained for, a model's output means
     * nothing (and the cache is sized by them): refused before any work. */
    if (cfg->max_position_embeddings > 0 && P + N > (size_t)cfg->max_position_embeddings) {
        set_error(c, "%s %zu + max_new_tokens %u = %zu positions, more than the model's %d (max_position_embeddings)",
                  req->prompt_text ? "the longest prompt's tokens" : "prompt_tokens", P, N, P + N,
                  cfg->max_position_embeddings);
        tb_free_prompts(text_ids, text_len, R);
        return TB_ERR_INVALID;
    }
    tb_status st = reserve_buffers(c, R, P, N);
    if (st != TB_OK) {
        tb_free_prompts(text_ids, text_len, R);
        return st;
    }
    int *pad = calloc(R, sizeof *pad);
    if (!pad) {
        tb_free_prompts(text_ids, text_len, R);
        set_error(c, "out of memory");
        return TB_ERR_NO_MEMORY;
    }
    for (uint32_t r = 0; r < R; r++) {
        int32_t *ids = c->prompt + (size_t)r * P;
        if (text_ids) {
            pad[r] = (int)(P - (size_t)text_len[r]);
            tb_left_pad(ids, P, text_ids[r], (size_t)text_len[r], tb_filler_token(cfg));
        } else {
            tb_synth_prompt(&c->ld.model.cfg, c->ld.tok, -1, req->seed, r, ids, P);
        }
    }
    tb_free_prompts(text_ids, text_len, R);

    tb_status rc;
    if (c->drafter.ops) {
        int k = (int)OPT_I(req->options, req->n_options, OPT_DRAFT_LEN);
        if (k <= 0)
            k = c->drafter.ops->default_len(c->drafter.ctx);
        k = k < 1 ? 1 : k > TB_SPEC_MAX_DRAFT ? TB_SPEC_MAX_DRAFT : k;
        ar_spec_call sc = {.host = c->host, .ld = &c->ld, .eng = &c->eng, .drafter = &c->drafter, .R = R,
                           .prompt = c->prompt, .P = P, .pad = pad, .N = N, .k = k, .forced = c->forced,
                           .smp = smp, .ignore_eos = ignore_eos, .threads = threads, .seed = req->seed,
                           .out = c->out};
        rc = ar_spec_generate(&sc, res, c->error, sizeof c->error);
    } else {
        uint64_t rng = req->seed ^ 0xA0761D6478BD642FULL;
        rc = decode_loop(c, res, R, P, N, pad, threads, &smp, ignore_eos, &rng);
    }
    free(pad);
    return rc;
}

static const char *ar_last_error(void *ctx)
{
    return ((ar_ctx *)ctx)->error;
}

static const char *ar_describe(void *ctx)
{
    return ((ar_ctx *)ctx)->describe_json;
}

static int64_t ar_tokenize(void *ctx, const char *text, int32_t *ids, size_t cap)
{
    ar_ctx *c = ctx;
    return tb_loaded_tokenize(&c->ld, text, ids, cap, c->error, sizeof c->error);
}

static int64_t ar_detokenize(void *ctx, const int32_t *ids, size_t n, char *out, size_t cap)
{
    ar_ctx *c = ctx;
    return tb_loaded_detokenize(&c->ld, ids, n, out, cap, c->error, sizeof c->error);
}

static int ar_is_special(void *ctx, int32_t id)
{
    ar_ctx *c = ctx;
    return tb_loaded_is_special(&c->ld, id);
}

/* ln p(continuation | context): one causal forward over context +
 * continuation with every position's logits; position i's log-softmax
 * scores token i + 1. On the CPU, or the GPU (device = cuda/auto). */
static tb_status ar_loglik(void *ctx, const char *context, const char *continuation, double *sum_logprob,
                           uint32_t *n_tokens)
{
    ar_ctx *c = ctx;
    const tb_model_config *cfg = &c->ld.model.cfg;
    c->error[0] = '\0';
    *sum_logprob = 0;
    *n_tokens = 0;
    if (!c->ld.tok) {
        set_error(c, "loglik needs a tokenizer.json; this model has none");
        return TB_ERR_UNSUPPORTED;
    }
    const char *texts[2] = {context ? context : "", continuation ? continuation : ""};
    int32_t **ids = NULL;
    int64_t *lens = NULL;
    size_t longest;
    /* context with BOS as a prompt; the continuation without it */
    int64_t nc = tb_tokenizer_encode(c->ld.tok, texts[1], strlen(texts[1]), NULL, 0);
    if (nc == TB_TOKENIZER_NO_MEMORY) {
        set_error(c, "out of memory tokenizing the continuation");
        return TB_ERR_NO_MEMORY;
    }
    if (nc < 0) {
        set_error(c, "the tokenizer failed on the continuation");
        return TB_ERR_INVALID;
    }
    if (nc == 0)
        return TB_OK;
    int32_t bos = tb_prompt_bos(cfg);
    size_t n_ctx = 0;
    int32_t *ctx_ids = NULL;
    if (texts[0][0] || bos >= 0) {
        tb_status ts = tb_tokenize_prompts(&c->ld, texts, 1, &ids, &lens, &longest, c->error, sizeof c->error);
        if (ts != TB_OK)
            return ts;
        ctx_ids = ids[0];
        n_ctx = (size_t)lens[0];
    }
    size_t total = n_ctx + (size_t)nc;
    int32_t *seq = malloc(total * sizeof *seq);
    float *logits = malloc(total * (size_t)cfg->vocab_size * sizeof *logits);
    tb_status rc = seq && logits ? TB_OK : TB_ERR_NO_MEMORY;
    if (rc == TB_OK) {
        if (n_ctx)
            memcpy(seq, ctx_ids, n_ctx * sizeof *seq);
        int64_t again = tb_tokenizer_encode(c->ld.tok, texts[1], strlen(texts[1]), seq + n_ctx, (size_t)nc);
        if (again != nc)
            rc = again == TB_TOKENIZER_NO_MEMORY ? TB_ERR_NO_MEMORY : TB_ERR_INVALID;
    }
    if (rc == TB_OK) {
        /* one causal forward, every position's logits back to the host */
        const tb_engine_iface *e = c->eng.iface;
        if (e->reserve(c->eng.ctx, 1, (int)total, (int)total, c->error, sizeof c->error) != 0 ||
            e->set_padding(c->eng.ctx, NULL, 0) != 0 || e->logits_all(c->eng.ctx, seq, (int)total, logits) != 0) {
            if (!c->error[0])
                set_error(c, "%s", e->error(c->eng.ctx));
            rc = tb_status_of(c->error, TB_ERR);
        }
    }
    if (rc == TB_OK) {
        double sum = 0;
        size_t first = n_ctx ? n_ctx : 1; /* no context, no BOS: token 0 is not scored */
        for (size_t i = first; i < total; i++) {
            /* over the ids a token is chosen among (a preset's tokenizer's) */
            const float *row = logits + (i - 1) * (size_t)cfg->vocab_size;
            const int pick = tb_loaded_pick_vocab(&c->ld);
            double mx = row[0], z = 0;
            for (int v = 1; v < pick; v++)
                mx = row[v] > mx ? row[v] : mx;
            for (int v = 0; v < pick; v++)
                z += exp((double)row[v] - mx);
            sum += (double)row[seq[i]] - mx - log(z);
        }
        *sum_logprob = sum;
        *n_tokens = (uint32_t)(total - first);
    } else if (!c->error[0]) {
        set_error(c, "loglik: %s (%zu tokens)", rc == TB_ERR_NO_MEMORY ? "out of memory" : "the tokenizer failed",
                  total);
    }
    free(seq);
    free(logits);
    tb_free_prompts(ids, lens, 1);
    return rc;
}


/* ------------------------------------------------ stepped sessions
 *
 * Continuous batching for `tokbench serve` (backend.h: step_*): each
 * slot is one sequence of the engine's KV cache; a joining request's
 * prompt is prefilled alone into its slot (the engine's prefill_slots),
 * then it decodes with every running slot in one
 * forward per step, each at its own position. */

/* Positions per slot when the model does not say (or says more): the
 * cache of every slot is allocated at open, and a one-prompt prefill's
 * attention matrix is len x len per head. */
#define AR_STEP_MAX_LEN 4096

static void ar_step_close(void *ctx)
{
    ar_ctx *c = ctx;
    ar_session *S = &c->step;
    for (uint32_t i = 0; S->slots && i < S->n; i++) {
        free(S->slots[i].prompt);
        free(S->slots[i].out);
    }
    free(S->slots);
    free(S->run_slots);
    free(S->run_tokens);
    free(S->join_slots);
    free(S->join_tokens);
    free(S->join_next);
    memset(S, 0, sizeof *S);
}

static tb_status ar_step_open(void *ctx, const tb_request *shape, uint32_t max_slots)
{
    ar_ctx *c = ctx;
    const tb_model_config *cfg = &c->ld.model.cfg;
    c->error[0] = '\0';
    ar_step_close(c);
    if (max_slots < 1 || shape->max_new_tokens < 1) {
        set_error(c, "a stepped session needs >= 1 slot and max_new_tokens >= 1");
        return TB_ERR_INVALID;
    }
    if (!c->ld.tok) {
        set_error(c, "serving text needs a tokenizer.json; this model has none");
        return TB_ERR_UNSUPPORTED;
    }
    if (c->drafter.ops) {
        set_error(c, "stepped sessions (tokbench serve) decode without a drafter: set drafter = none");
        return TB_ERR_UNSUPPORTED;
    }
    size_t len = cfg->max_position_embeddings > 0 ? (size_t)cfg->max_position_embeddings : AR_STEP_MAX_LEN;
    if (len > AR_STEP_MAX_LEN)
        len = AR_STEP_MAX_LEN;
    ar_session *S = &c->step;
    S->n = max_slots;
    /* what a slot can hold with a one-token prompt; a join beyond is refused */
    S->max_new = shape->max_new_tokens < len - 1 ? shape->max_new_tokens : (uint32_t)(len - 1);
    S->len = len;
    S->slots = calloc(max_slots, sizeof *S->slots);
    S->run_slots = calloc(max_slots, sizeof *S->run_slots);
    S->run_tokens = calloc(max_slots, sizeof *S->run_tokens);
    S->join_slots = calloc(max_slots, sizeof *S->join_slots);
    S->join_tokens = calloc((size_t)max_slots * len, sizeof *S->join_tokens);
    S->join_next = calloc(max_slots, sizeof *S->join_next);
    int ok = S->slots && S->run_slots && S->run_tokens && S->join_slots && S->join_tokens && S->join_next;
    for (uint32_t i = 0; ok && i < max_slots; i++)
        ok = (S->slots[i].out = malloc(S->max_new * sizeof(int32_t))) != NULL;
    /* logits for every slot, the sampling scratch; the cache: max_slots
     * sequences of len positions; a prefill of prompts of one length
     * takes up to len rows (more wait for the next step). The session
     * owns the engine's cache: generate() refuses to run while it is
     * open, and reserves its own (its buffers anew: caps 0) after it. */
    size_t rows = len > max_slots ? len : max_slots;
    c->cap_r = c->cap_p = c->cap_n = 0;
    if (ok && !c->scratch)
        ok = (c->scratch = malloc(2 * (size_t)cfg->vocab_size * sizeof(float))) != NULL;
    tb_status st = ok ? TB_OK : TB_ERR_NO_MEMORY;
    if (st == TB_OK) {
        const tb_engine_iface *e = c->eng.iface;
        if (e->reserve(c->eng.ctx, (int)max_slots, (int)len, (int)rows, c->error, sizeof c->error) != 0 ||
            e->set_padding(c->eng.ctx, NULL, 0) != 0) {
            if (!c->error[0])
                set_error(c, "%s", e->error(c->eng.ctx));
            st = tb_status_of(c->error, TB_ERR);
        }
    }
    if (st == TB_OK && !(c->logits = realloc(c->logits, (size_t)rows * cfg->vocab_size * sizeof(float))))
        st = TB_ERR_NO_MEMORY;
    if (st != TB_OK) {
        if (!c->error[0])
            set_error(c, "out of memory for a stepped session of %u slots x %zu positions", max_slots, len);
        ar_step_close(c);
        return st;
    }
    return TB_OK;
}

static tb_status ar_step_join(void *ctx, uint32_t slot, const tb_step_join *j, char *why, size_t why_size)
{
    ar_ctx *c = ctx;
    ar_session *S = &c->step;
    if (!S->slots || slot >= S->n || S->slots[slot].state != SLOT_FREE) {
        snprintf(why, why_size, "slot %u is not free", slot);
        return TB_ERR_INVALID;
    }
    if (j->max_new_tokens < 1 || j->max_new_tokens > S->max_new) {
        snprintf(why, why_size, "max_new_tokens %u outside [1, %u]", j->max_new_tokens, S->max_new);
        return TB_ERR_INVALID;
    }
    int32_t **ids = NULL;
    int64_t *lens = NULL;
    size_t longest;
    const char *texts[1] = {j->prompt_text ? j->prompt_text : ""};
    tb_status ts = tb_tokenize_prompts(&c->ld, texts, 1, &ids, &lens, &longest, why, why_size);
    if (ts != TB_OK)
        return ts;
    if (lens[0] < 1 || (size_t)lens[0] + j->max_new_tokens > S->len) {
        snprintf(why, why_size, "prompt %lld + max_tokens %u = %lld positions; this session holds %zu per request",
                 (long long)lens[0], j->max_new_tokens, (long long)lens[0] + j->max_new_tokens, S->len);
        tb_free_prompts(ids, lens, 1);
        return TB_ERR_INVALID;
    }
    ar_slot *L = &S->slots[slot];
    free(L->prompt);
    L->prompt = ids[0];
    ids[0] = NULL;
    L->n_prompt = (size_t)lens[0];
    tb_free_prompts(ids, lens, 1);
    L->max_new = j->max_new_tokens;
    L->n_out = 0;
    L->past_eos = 0;
    L->ignore_eos = tb_opt_int(j->options, j->n_options, ar_options, OPT_IGNORE_EOS) != 0;
    L->smp = (tb_sampling){tb_opt_float(j->options, j->n_options, ar_options, OPT_TEMPERATURE),
                           (int)tb_opt_int(j->options, j->n_options, ar_options, OPT_TOP_K),
                           tb_opt_float(j->options, j->n_options, ar_options, OPT_TOP_P)};
    L->rng = j->seed ^ 0xA0761D6478BD642FULL;
    L->state = SLOT_JOINED;
    return TB_OK;
}

static void ar_step_leave(void *ctx, uint32_t slot)
{
    ar_ctx *c = ctx;
    if (c->step.slots && slot < c->step.n)
        c->step.slots[slot].state = SLOT_FREE;
}

/* Slot `slot` got token t (sampled from logits, or the device's argmax
 * when logits is NULL): record, emit, and end it when done. */
static void slot_token(ar_ctx *c, uint32_t slot, int32_t t, int64_t now, tb_step_end *ends, uint32_t *n_ends)
{
    const tb_model_config *cfg = &c->ld.model.cfg;
    ar_slot *L = &c->step.slots[slot];
    int eos = tb_is_eos(cfg, t);
    L->out[L->n_out++] = t;
    L->next = t;
    /* the answer's tokens with their ids; its EOS and after: counted only */
    ar_emit_token(c->host, slot, L->past_eos || eos ? NULL : &L->out[L->n_out - 1], now);
    if (eos)
        L->past_eos = 1;
    if (L->n_out >= L->max_new || (eos && !L->ignore_eos)) {
        tb_step_end *e = &ends[(*n_ends)++];
        memset(e, 0, sizeof *e);
        e->slot = slot;
        e->status = TB_OK;
        e->n_output_tokens = L->n_out;
        e->output_ids = L->out;
        e->n_output_ids = L->n_out;
        e->n_answer_tokens = tb_answer_length(cfg, L->out, L->n_out);
        e->t_done_ns = now;
        L->state = SLOT_FREE;
    }
}

/* A failed slot: reported, freed. */
static void slot_failed(ar_ctx *c, uint32_t slot, tb_status st, tb_step_end *ends, uint32_t *n_ends)
{
    ar_slot *L = &c->step.slots[slot];
    tb_step_end *e = &ends[(*n_ends)++];
    memset(e, 0, sizeof *e);
    e->slot = slot;
    e->status = st;
    e->n_output_tokens = L->n_out;
    e->n_answer_tokens = TB_UNKNOWN_COUNT;
    size_t n = strnlen(c->error, sizeof e->error - 1); /* cut at a byte */
    memcpy(e->error, c->error, n);
    e->error[n] = '\0';
    L->state = SLOT_FREE;
}

static tb_status ar_step(void *ctx, tb_step_end *ends, uint32_t *n_ends)
{
    ar_ctx *c = ctx;
    ar_session *S = &c->step;
    const tb_model_config *cfg = &c->ld.model.cfg;
    const tb_engine_iface *e = c->eng.iface;
    void *ec = c->eng.ctx;
    size_t V = (size_t)cfg->vocab_size;
    *n_ends = 0;
    c->error[0] = '\0';
    if (!S->slots) {
        set_error(c, "no stepped session is open");
        return TB_ERR_INVALID;
    }
    /* the slots running before this step decode after the prefills */
    uint32_t k = 0;
    int sampling = 0;
    for (uint32_t i = 0; i < S->n; i++)
        if (S->slots[i].state == SLOT_RUNNING) {
            S->run_slots[k] = (int)i;
            S->run_tokens[k++] = S->slots[i].next;
            sampling |= S->slots[i].smp.temperature > 0;
        }
    /* prefill the joined requests into their slots, those of one prompt
     * length in one forward (as many as fit its rows): their first tokens */
    for (uint32_t i = 0; i < S->n; i++) {
        if (S->slots[i].state != SLOT_JOINED)
            continue;
        size_t P = S->slots[i].n_prompt, room = S->len / P;
        uint32_t k = 0;
        int samples = 0;
        for (uint32_t j = i; j < S->n && k < room; j++) {
            ar_slot *L = &S->slots[j];
            if (L->state != SLOT_JOINED || L->n_prompt != P)
                continue;
            S->join_slots[k] = (int)j;
            memcpy(S->join_tokens + (size_t)k * P, L->prompt, P * sizeof(int32_t));
            samples |= L->smp.temperature > 0;
            L->state = SLOT_RUNNING; /* taken: decodes from the next step */
            k++;
        }
        int err = e->prefill_slots(ec, S->join_tokens, S->join_slots, (int)k, (int)P, S->join_next,
                                   samples ? c->logits : NULL);
        if (err)
            set_error(c, "%s", e->error(ec));
        int64_t now = c->host->now_ns(c->host);
        for (uint32_t q = 0; q < k; q++) {
            uint32_t slot = (uint32_t)S->join_slots[q];
            ar_slot *L = &S->slots[slot];
            if (err) {
                slot_failed(c, slot, tb_status_of(c->error, TB_ERR), ends, n_ends);
                continue;
            }
            int32_t t = samples ? tb_sample(c->logits + (size_t)q * V, tb_loaded_pick_vocab(&c->ld), &L->smp, &L->rng, c->scratch)
                                : S->join_next[q];
            slot_token(c, slot, t, now, ends, n_ends);
        }
    }
    if (k == 0)
        return TB_OK;
    int err = e->decode_slots(ec, S->run_slots, (int)k, S->run_tokens, sampling ? c->logits : NULL);
    if (err)
        set_error(c, "%s", e->error(ec));
    if (err) {
        for (uint32_t r = 0; r < k; r++)
            slot_failed(c, (uint32_t)S->run_slots[r], tb_status_of(c->error, TB_ERR), ends, n_ends);
        return TB_OK;
    }
    int64_t now = c->host->now_ns(c->host);
    for (uint32_t r = 0; r < k; r++) {
        ar_slot *L = &S->slots[S->run_slots[r]];
        int32_t t = sampling ? tb_sample(c->logits + r * V, tb_loaded_pick_vocab(&c->ld), &L->smp, &L->rng, c->scratch) : S->run_tokens[r];
        slot_token(c, (uint32_t)S->run_slots[r], t, now, ends, n_ends);
    }
    return TB_OK;
}

static const tb_backend_ops ar_ops = {
    .abi_major = TB_ABI_MAJOR,
    .struct_size = sizeof(tb_backend_ops),
    .name = "ar",
    .version = AR_VERSION,
    .description = "autoregressive Llama/Qwen2 on tokbench's engine (Hugging Face folders or presets)",
    .capabilities = TB_CAP_BATCH | TB_CAP_STREAMING | TB_CAP_TOKENIZER | TB_CAP_LOGLIK | TB_CAP_MODEL_PATH | AR_GPU_CAPS,
    .options = ar_options,
    .n_options = N_OPTS,
    .probe = NULL,
    .create = ar_create,
    .destroy = ar_destroy,
    .generate = ar_generate,
    .last_error = ar_last_error,
    .describe = ar_describe,
    .tokenize = ar_tokenize,
    .detokenize = ar_detokenize,
    .validate = ar_validate,
    .loglik = ar_loglik,
    .step_open = ar_step_open,
    .step_join = ar_step_join,
    .step = ar_step,
    .step_leave = ar_step_leave,
    .step_close = ar_step_close,
    .is_special = ar_is_special,
};

__attribute__((visibility("default"))) const tb_backend_ops *tokbench_backend_entry(void);
__attribute__((visibility("default"))) const tb_backend_ops *tokbench_backend_entry(void)
{
    return &ar_ops;
}
