/* backend_common.h — what the ar and diffusion backends share around the
 * engine: loading `model = ...` (a Hugging Face folder or preset:NAME) onto
 * the CPU or the GPU with its tokenizer, reading their declared options,
 * and making synthetic prompts of an exact length. */
#ifndef TB_ENGINE_BACKEND_COMMON_H
#define TB_ENGINE_BACKEND_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include <tokbench/backend.h>

#include "engine_options.h"
#include "model.h"
#include "tokenizer.h"

struct tb_gpu;
struct tb_energy;

typedef struct tb_loaded {
    /* CPU: the weights. GPU: the weights live on the device; only cfg,
     * name, n_params and source_dtype are kept here. */
    tb_model model;
    tb_tokenizer *tok;   /* NULL: no tokenizer.json (presets) */
    struct tb_gpu *gpu;  /* device = cuda */
    /* The GPU's energy meter (energy.h), NULL on the CPU or where NVML has
     * none; energy_note says which, for describe(). */
    struct tb_energy *energy;
    char energy_note[200];
    /* The last call was too short for the counter: skip the NVML reads
     * (tens of µs each, inside the timed call) until a call is long. */
    int energy_skip;
    /* The device's measured ceilings for the roofline (GPU; 0 = unknown),
     * and the GEMM the FLOP/s one is of ("bf16", or "fp8" under dtype =
     * fp8 with FP8 GEMMs: tb_gpu_gemm_dtype); describe() names it. */
    double peak_flops, peak_bytes_per_s;
    const char *peak_flops_dtype;
    /* The batch-1 GEMV variant each weight shape runs, timed at load
     * (gpu.h's tb_gpu_gemv_picks: "OUTxIN=V,...", "" when none), bf16's
     * and FP8's; describe() keeps them with the run. */
    char gemv_picks[256], fp8_gemv_picks[256];
    int fp8; /* dtype = fp8: E4M3 projection weights (fp8.h) */
    /* Tokens are chosen among ids [0, pick_vocab) only (the greedy argmax,
     * sampling, loglik's normalisation); 0: the whole vocabulary. Set by
     * tb_loaded_set_tokenizer: a preset served with a smaller tokenizer
     * emits only ids that are text. */
    int pick_vocab;
} tb_loaded;

struct cJSON;
/* What describe() says of the device the model loaded on, into o: the
 * roofline's ceilings (peak_tflops_bf16 or _fp8, peak_tb_per_s) and the
 * GEMV picks (gemv_picks, fp8_gemv_picks), each only where measured.
 * 1, or 0 when cJSON ran out of memory. */
int tb_loaded_describe_device(const tb_loaded *l, struct cJSON *o);

/* The ids a token is chosen among: pick_vocab, else the vocabulary. */
int tb_loaded_pick_vocab(const tb_loaded *l);
/* A preset's tokenizer (ar's `tokenizer` option): `path`, a tokenizer.json
 * or a folder holding one, becomes l's, and tokens are chosen among its
 * ids only (pick_vocab = its vocabulary size; the model computes every
 * logit still, so its work is the preset's). Before tb_engine_open.
 * TB_OK; TB_ERR_INVALID when l has a tokenizer already (a model folder's),
 * the tokenizer's vocabulary is larger than the model's or has an id
 * without a token below its largest; TB_ERR_MODEL
 * (or TB_ERR_NO_MEMORY) when it does not load; the reason in err. */
tb_status tb_loaded_set_tokenizer(tb_loaded *l, const char *path, char *err, size_t err_size);

/* TB_ERR_NO_MEMORY when the error text err says an allocation failed ("out
 * of memory", "out of device memory", "out of host memory": the engine's
 * messages say so), else `otherwise`. */
tb_status tb_status_of(const char *err, tb_status otherwise);

/* Load `spec` for a backend that runs diffusion models (want_diffusion
 * 1) or autoregressive ones (0), or either an autoregressive model or a
 * block-diffusion model in SDAR's layout run causally, its AR mode
 * (TB_LOAD_AR_OR_SDAR: the ar backend), on the GPU (on_gpu, CUDA builds) or the CPU.
 * A preset's random weights are made where they run. fp8 (the `dtype`
 * option's fp8): the projection weights in E4M3 with per-channel scales
 * (model.h's tb_model_round_fp8 on the CPU; the GPU keeps the codes).
 * tp (the `tp` option): 0 one device; N >= 1 tensor parallel over devices
 * 0 .. N - 1 through NCCL (gpu.h's tb_gpu_create_tp; on_gpu only; not
 * with fp8). Returns TB_OK, TB_ERR_NO_MEMORY, TB_ERR_UNSUPPORTED (fp8 of a
 * model it does not cover, tp on the CPU, tp with fp8) or TB_ERR_MODEL
 * with the reason in err. */
#define TB_LOAD_AR_OR_SDAR 2
tb_status tb_load(const char *spec, int want_diffusion, int on_gpu, int fp8, uint64_t preset_seed, int tp,
                  tb_loaded *out, char *err, size_t err_size);

/* What tb_load refuses of `tp` before it reads a model (tp on the CPU,
 * where device = auto finds no GPU too; tp with fp8), from the options'
 * texts: so that a backend's validate() says it at suite load (--dry-run
 * too) instead of create(). TB_OK, or TB_ERR_UNSUPPORTED with err. */
tb_status tb_load_check(const char *device, int fp8, int tp, char *err, size_t err_size);
/* describe()'s "dtype": "fp8", else "bf16" on the GPU, "f32" on the CPU. */
const char *tb_loaded_dtype(const tb_loaded *l);

void tb_loaded_free(tb_loaded *l);

/* Energy meter readings around a call (energy.h): call tb_loaded_energy_mark
 * at its start and tb_loaded_energy_mj at its end; -1 where it is unknown
 * (no meter, or a call too short for the counter). After a call too short
 * to measure, the next call reads nothing (a repeated case has the same
 * length; its first call, the warm-up, decides), so short calls carry no
 * NVML overhead; a long call turns the reads back on for the next. */
typedef struct tb_energy_mark {
    int64_t mj, ns;
} tb_energy_mark;
tb_energy_mark tb_loaded_energy_mark(const tb_loaded *l, int64_t now_ns);
int64_t tb_loaded_energy_mj(tb_loaded *l, tb_energy_mark start, int64_t now_ns);

/* Roofline figures of a call on the GPU: tb_loaded_work_start before it
 * (forgets earlier work), tb_loaded_work_report after it (the call's FLOPs
 * and bytes and the ceilings into res, where the host has those fields).
 * No-ops on the CPU path. */
void tb_loaded_work_start(tb_loaded *l);
void tb_loaded_work_report(tb_loaded *l, tb_result *res);
/* The FLOPs and bytes since the last take or start, then zeroed (0 and 0
 * on the CPU): a second model's work added to a call's (a drafter). */
void tb_loaded_take_work(tb_loaded *l, double *flops, double *bytes);

/* Peak device memory of a call (gpu.h: what it counts): tb_loaded_memory_start
 * at the call's start, before it reserves anything, forgets earlier peaks;
 * tb_loaded_memory_peak at its end gives the most the context held in
 * between, bytes (tb_result.peak_device_bytes), or -1 on the CPU path. */
void tb_loaded_memory_start(tb_loaded *l);
int64_t tb_loaded_memory_peak(const tb_loaded *l);

/* The ops table's tokenize()/detokenize() on a loaded model: -1 with
 * "this model has no tokenizer.json" in err when it has none. */
int64_t tb_loaded_tokenize(const tb_loaded *l, const char *text, int32_t *ids, size_t cap, char *err,
                           size_t err_size);
int64_t tb_loaded_detokenize(const tb_loaded *l, const int32_t *ids, size_t n, char *out, size_t cap, char *err,
                             size_t err_size);
/* The ops table's is_special(): tokenizer.json's "special" mark; 0
 * without a tokenizer. */
int tb_loaded_is_special(const tb_loaded *l, int32_t id);

/* A deterministic prompt of exactly P tokens for request r: the BOS a text
 * prompt starts with when there is one (tb_prompt_bos), then ids from the
 * ordinary vocabulary (below the added tokens when a tokenizer is known),
 * never a BOS, EOS or `avoid` (-1: none). */
void tb_synth_prompt(const tb_model_config *cfg, const tb_tokenizer *tok, int32_t avoid, uint64_t seed, uint32_t r,
                     int32_t *ids, size_t P);

/* Whether t is one of the model's EOS ids. */
int tb_is_eos(const tb_model_config *cfg, int32_t t);
/* Tokens before the first EOS of ids[n] (n when none): the answer a
 * reader sees, without an AR stop token or a diffusion canvas's padding. */
uint32_t tb_answer_length(const tb_model_config *cfg, const int32_t *ids, uint32_t n);

/* The token prepended to every prompt, -1: none: cfg->prompt_bos, what the
 * folder's tokenizer adds (format/folder.h); without a tokenizer.json
 * (presets), config.json's BOS unless it is also an EOS. */
int32_t tb_prompt_bos(const tb_model_config *cfg);
/* The id left padding is filled with (masked: any id would do). */
int32_t tb_filler_token(const tb_model_config *cfg);
/* Whether the model is a preset (format/model.h: random weights at a
 * published shape, "preset:NAME", no tokenizer.json). */
int tb_is_preset(const tb_model *m);
/* A preset's stand-in for a text's tokens, having no tokenizer: each of
 * the text's UTF-8 bytes as 3 + byte (past ids 0-2, which are pad, EOS
 * and BOS in Gemma's vocabulary; modulo a vocabulary smaller than that),
 * so a text suite runs a preset on prompts of the text's length in bytes
 * (its random weights read no meaning in them either way).
 * tools/peer_dgemma.py feeds its peer the same ids. */
int32_t tb_preset_byte_token(unsigned char byte, int vocab);
/* Tokenize n prompts (BOS as above): ids_out[r] holds lens_out[r] tokens;
 * *max_len the longest; a preset without a tokenizer takes the bytes'
 * stand-in (tb_preset_byte_token); another model without one is refused.
 * Free with tb_free_prompts. */
tb_status tb_tokenize_prompts(const tb_loaded *l, const char *const *texts, uint32_t n, int32_t ***ids_out,
                              int64_t **lens_out, size_t *max_len, char *err, size_t err_size);
void tb_free_prompts(int32_t **ids, int64_t *lens, uint32_t n);
/* dst[width] = filler x (width - n), then src[n]. */
void tb_left_pad(int32_t *dst, size_t width, const int32_t *src, size_t n, int32_t filler);

#endif
