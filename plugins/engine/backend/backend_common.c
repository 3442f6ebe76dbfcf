/* backend_common.c — see backend_common.h. */
#define _GNU_SOURCE
#include "backend_common.h"

#include <cjson/cJSON.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "energy.h"
#include "folder.h"
#include "sampling.h"
#ifdef TB_HAVE_CUDA
#include "gpu.h"
#endif

tb_status tb_status_of(const char *err, tb_status otherwise)
{
    static const char *const oom[] = {"out of memory", "out of device memory", "out of host memory"};
    for (size_t i = 0; i < sizeof oom / sizeof oom[0]; i++)
        if (strstr(err, oom[i]))
            return TB_ERR_NO_MEMORY;
    return otherwise;
}

const char *tb_loaded_dtype(const tb_loaded *l)
{
    return l->fp8 ? "fp8" : l->gpu ? "bf16" : "f32";
}

/* tb_load's rules of tp, on what the options resolved to. */
static tb_status check_tp(int on_gpu, int fp8, int tp, char *err, size_t err_size)
{
    if (tp != 0 && !on_gpu) {
        snprintf(err, err_size, "tp = %d: tensor parallelism runs on GPUs; set device = cuda", tp);
        return TB_ERR_UNSUPPORTED;
    }
    if (tp != 0 && fp8) {
        snprintf(err, err_size, "dtype = fp8 with tp = %d: not supported (the tensor-parallel ranks hold bf16 shards)", tp);
        return TB_ERR_UNSUPPORTED;
    }
    return TB_OK;
}

tb_status tb_load_check(const char *device, int fp8, int tp, char *err, size_t err_size)
{
    /* device = auto asks the GPU (a probe) only where tp needs the answer */
    int d = tb_choice_value(tb_device_choices, device);
    int on_gpu = d == TB_DEVICE_CUDA || (d == TB_DEVICE_AUTO && tp != 0 && tb_device_wants_gpu(device));
    tb_status st = check_tp(on_gpu, fp8, tp, err, err_size);
    if (st != TB_OK && d == TB_DEVICE_AUTO && tp != 0 && !on_gpu)
        snprintf(err, err_size, "tp = %d: tensor parallelism runs on GPUs, and device = auto found none", tp);
    return st;
}

tb_status tb_load(const char *spec, int want_diffusion, int on_gpu, int fp8, uint64_t preset_seed, int tp, tb_loaded *out,
                  char *err, size_t err_size)
{
    memset(out, 0, sizeof *out);
    tb_status st = check_tp(on_gpu, fp8, tp, err, err_size);
    if (st != TB_OK)
        return st;
    if (!spec || !*spec) {
        snprintf(err, err_size, "no model: set model = a Hugging Face folder or preset:NAME");
        return TB_ERR_MODEL;
    }
#ifndef TB_HAVE_CUDA
    if (on_gpu) {
        snprintf(err, err_size, "device = cuda: this tokbench was built without CUDA");
        return TB_ERR_UNSUPPORTED;
    }
#endif
    int preset = strncmp(spec, "preset:", 7) == 0, rc;
    tb_model *m = &out->model;
    if (preset && on_gpu) { /* random weights made on the device: no host copy */
        rc = tb_preset_config(spec + 7, &m->cfg, err, err_size);
        snprintf(m->name, sizeof m->name, "%s", spec);
        snprintf(m->source_dtype, sizeof m->source_dtype, "random");
        m->n_params = tb_config_n_params(&m->cfg);
    } else if (preset) {
        rc = tb_model_preset(spec + 7, preset_seed, m, err, err_size);
    } else {
        rc = tb_model_load(spec, m, err, err_size);
    }
    /* the ar backend also runs SDAR's layout causally (its AR mode) */
    int causal_block = want_diffusion == TB_LOAD_AR_OR_SDAR && m->cfg.arch == TB_ARCH_SDAR;
    if (want_diffusion == TB_LOAD_AR_OR_SDAR)
        want_diffusion = 0;
    if (rc == 0 && !causal_block && tb_arch_is_diffusion(m->cfg.arch) != (want_diffusion != 0)) {
        snprintf(err, err_size, "%s: %s is %s model: use plugin = %s", spec, m->cfg.arch_name,
                 want_diffusion ? "not a diffusion (LLaDA or Dream)" : "a diffusion", want_diffusion ? "ar" : "diffusion");
        rc = -1;
    }
    if (rc == 0 && fp8) { /* refused before anything is made on the device */
        rc = preset && on_gpu ? 0 : tb_model_round_fp8(m, err, err_size);
        if (rc == 0 && on_gpu) /* the device's FP8 kernels' shape rule, before any upload */
            rc = tb_config_check_fp8(&m->cfg, err, err_size);
        if (rc != 0) {
            tb_loaded_free(out);
            return TB_ERR_UNSUPPORTED;
        }
        out->fp8 = 1;
    }
    if (rc == 0 && !preset) {
        char path[4096];
        struct stat sb;
        snprintf(path, sizeof path, "%s/tokenizer.json", spec);
        if (stat(path, &sb) == 0 && tb_tokenizer_load(path, &out->tok, err, err_size) != 0)
            rc = -1;
        /* generation_config.json's stop ids, the tokenizer's BOS and mask token */
        if (rc == 0 && tb_folder_read(spec, out->tok, &m->cfg, err, err_size) != 0)
            rc = -1;
    }
#ifdef TB_HAVE_CUDA
    if (rc == 0 && on_gpu) {
        rc = tp > 0 ? tb_gpu_create_tp(&out->gpu, &m->cfg, preset ? NULL : m, preset_seed, tp, err, err_size)
                    : tb_gpu_create_dtype(&out->gpu, &m->cfg, preset ? NULL : m, preset_seed, fp8, err, err_size);
        if (rc == 0 && !preset) { /* keep what describes the model, drop the host weights */
            tb_model keep = *m;
            tb_model_free(m);
            m->cfg = keep.cfg;
            memcpy(m->name, keep.name, sizeof m->name);
            memcpy(m->source_dtype, keep.source_dtype, sizeof m->source_dtype);
            m->n_params = keep.n_params;
        }
        if (rc == 0) {
            char bus[32], why[160];
            if (tb_gpu_tp_size(out->gpu) > 1) /* one GPU's counter would under-count the group */
                snprintf(why, sizeof why, "tp = %d: the energy of several GPUs is not summed yet", tp);
            else if (tb_gpu_pci_bus_id(out->gpu, bus, sizeof bus) != 0)
                snprintf(why, sizeof why, "no PCI bus id for the device");
            else
                out->energy = tb_energy_open(bus, why, sizeof why);
            if (out->energy)
                snprintf(out->energy_note, sizeof out->energy_note,
                         "NVML energy counter: advances every %.1f ms; calls shorter than %.0f ms are not measured",
                         tb_energy_period_ms(out->energy), TB_ENERGY_MIN_PERIODS * tb_energy_period_ms(out->energy));
            else
                snprintf(out->energy_note, sizeof out->energy_note, "not measured: %s", why);
            /* a failure to measure leaves the roofline unknown, nothing more */
            if (tb_gpu_measure_ceilings(out->gpu, &out->peak_flops, &out->peak_bytes_per_s) != 0)
                out->peak_flops = out->peak_bytes_per_s = 0;
            out->peak_flops_dtype = tb_gpu_gemm_dtype(out->gpu);
            tb_gpu_gemv_picks(out->gpu, 0, out->gemv_picks, sizeof out->gemv_picks);
            tb_gpu_gemv_picks(out->gpu, 1, out->fp8_gemv_picks, sizeof out->fp8_gemv_picks);
        }
    }
#endif
    if (rc == 0 && !on_gpu)
        snprintf(out->energy_note, sizeof out->energy_note, "not measured on the CPU path");
    if (rc != 0) {
        tb_status s = tb_status_of(err, TB_ERR_MODEL);
        tb_loaded_free(out);
        return s;
    }
    return TB_OK;
}

tb_energy_mark tb_loaded_energy_mark(const tb_loaded *l, int64_t now_ns)
{
    return (tb_energy_mark){l->energy && !l->energy_skip ? tb_energy_read_mj(l->energy) : -1, now_ns};
}

int64_t tb_loaded_energy_mj(tb_loaded *l, tb_energy_mark start, int64_t now_ns)
{
    if (!l->energy)
        return -1;
    int64_t ns = now_ns - start.ns;
    l->energy_skip = (double)ns / 1e6 < TB_ENERGY_MIN_PERIODS * tb_energy_period_ms(l->energy);
    if (start.mj < 0)
        return -1;
    return tb_energy_of_call(l->energy, start.mj, tb_energy_read_mj(l->energy), ns);
}

void tb_loaded_work_start(tb_loaded *l)
{
#ifdef TB_HAVE_CUDA
    double f, b;
    if (l->gpu)
        tb_gpu_take_work(l->gpu, &f, &b, NULL, NULL);
#else
    (void)l;
#endif
}

void tb_loaded_work_report(tb_loaded *l, tb_result *res)
{
#ifdef TB_HAVE_CUDA
    if (!l->gpu || !TB_STRUCT_HAS(res, tb_result, peak_bytes_per_s))
        return;
    double reads = 0, tokens = 0;
    tb_gpu_take_work(l->gpu, &res->flops, &res->bytes, &reads, &tokens);
    if (TB_STRUCT_HAS(res, tb_result, moe_tokens)) {
        res->expert_reads = reads;
        res->moe_tokens = tokens;
    }
    res->peak_flops = l->peak_flops;
    res->peak_bytes_per_s = l->peak_bytes_per_s;
#else
    (void)l;
    (void)res;
#endif
}

void tb_loaded_take_work(tb_loaded *l, double *flops, double *bytes)
{
    *flops = *bytes = 0;
#ifdef TB_HAVE_CUDA
    if (l->gpu)
        tb_gpu_take_work(l->gpu, flops, bytes, NULL, NULL);
#else
    (void)l;
#endif
}

void tb_loaded_memory_start(tb_loaded *l)
{
#ifdef TB_HAVE_CUDA
    if (l->gpu)
        tb_gpu_reset_peak(l->gpu);
#else
    (void)l;
#endif
}

int64_t tb_loaded_memory_peak(const tb_loaded *l)
{
#ifdef TB_HAVE_CUDA
    if (l->gpu)
        return (int64_t)tb_gpu_peak_bytes(l->gpu);
#else
    (void)l;
#endif
    return -1;
}

int tb_loaded_describe_device(const tb_loaded *l, cJSON *o)
{
    int ok = 1;
    if (l->peak_flops > 0) { /* the roofline's ceilings, measured at load */
        char key[32]; /* peak_tflops_bf16, or _fp8 when dtype = fp8's products run on FP8 tensor cores */
        snprintf(key, sizeof key, "peak_tflops_%s", l->peak_flops_dtype ? l->peak_flops_dtype : "bf16");
        ok &= cJSON_AddNumberToObject(o, key, l->peak_flops / 1e12) != NULL;
        ok &= cJSON_AddNumberToObject(o, "peak_tb_per_s", l->peak_bytes_per_s / 1e12) != NULL;
    }
    if (l->gemv_picks[0])
        ok &= cJSON_AddStringToObject(o, "gemv_picks", l->gemv_picks) != NULL;
    if (l->fp8_gemv_picks[0])
        ok &= cJSON_AddStringToObject(o, "fp8_gemv_picks", l->fp8_gemv_picks) != NULL;
    return ok;
}

int tb_loaded_pick_vocab(const tb_loaded *l)
{
    return l->pick_vocab > 0 ? l->pick_vocab : l->model.cfg.vocab_size;
}

tb_status tb_loaded_set_tokenizer(tb_loaded *l, const char *path, char *err, size_t err_size)
{
    if (l->tok) {
        snprintf(err, err_size, "tokenizer = %s: the model has a tokenizer.json of its own (the option is for "
                                "presets)", path);
        return TB_ERR_INVALID;
    }
    char file[4096];
    struct stat sb;
    int dir = stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
    if (snprintf(file, sizeof file, dir ? "%s/tokenizer.json" : "%s", path) >= (int)sizeof file) {
        snprintf(err, err_size, "tokenizer = %.200s...: path too long", path);
        return TB_ERR_INVALID;
    }
    char why[512] = "";
    tb_tokenizer *tok = NULL;
    if (tb_tokenizer_load(file, &tok, why, sizeof why) != 0) {
        snprintf(err, err_size, "tokenizer = %s: %s", path, why);
        return tb_status_of(why, TB_ERR_MODEL);
    }
    size_t n = tb_tokenizer_vocab_size(tok);
    if (n < 1 || n > (size_t)l->model.cfg.vocab_size) {
        snprintf(err, err_size, "tokenizer = %s: %zu ids, more than the model's vocabulary of %d", path, n,
                 l->model.cfg.vocab_size);
        tb_tokenizer_free(tok);
        return TB_ERR_INVALID;
    }
    /* every id chosen must be text: a vocabulary with a gap is refused */
    for (size_t id = 0; id < n; id++) {
        size_t len;
        if (!tb_tokenizer_id_bytes(tok, (int32_t)id, &len)) {
            snprintf(err, err_size, "tokenizer = %s: id %zu of its %zu has no token (tokens are chosen among "
                                    "every id below the largest)", path, id, n);
            tb_tokenizer_free(tok);
            return TB_ERR_INVALID;
        }
    }
    l->tok = tok;
    l->pick_vocab = (int)n;
#ifdef TB_HAVE_CUDA
    if (l->gpu)
        tb_gpu_set_pick_vocab(l->gpu, l->pick_vocab);
#endif
    return TB_OK;
}

void tb_loaded_free(tb_loaded *l)
{
    tb_energy_close(l->energy);
#ifdef TB_HAVE_CUDA
    tb_gpu_free(l->gpu);
#endif
    tb_model_free(&l->model);
    tb_tokenizer_free(l->tok);
    memset(l, 0, sizeof *l);
}

int64_t tb_loaded_tokenize(const tb_loaded *l, const char *text, int32_t *ids, size_t cap, char *err,
                           size_t err_size)
{
    if (!l->tok) {
        snprintf(err, err_size, "this model has no tokenizer.json");
        return -1;
    }
    int64_t n = tb_tokenizer_encode(l->tok, text, strlen(text), ids, cap);
    if (n < 0)
        snprintf(err, err_size, "%s", n == TB_TOKENIZER_NO_MEMORY ? "tokenize: out of memory" : "the tokenizer failed");
    return n < 0 ? -1 : n;
}

int64_t tb_loaded_detokenize(const tb_loaded *l, const int32_t *ids, size_t n, char *out, size_t cap, char *err,
                             size_t err_size)
{
    if (!l->tok) {
        snprintf(err, err_size, "this model has no tokenizer.json");
        return -1;
    }
    int64_t len = tb_tokenizer_decode(l->tok, ids, n, out, cap);
    if (len < 0)
        snprintf(err, err_size, "%s", len == TB_TOKENIZER_NO_MEMORY ? "detokenize: out of memory" : "detokenize: an id outside the vocabulary");
    return len < 0 ? -1 : len;
}

int tb_loaded_is_special(const tb_loaded *l, int32_t id)
{
    return l->tok ? tb_tokenizer_is_special(l->tok, id) : 0;
}

void tb_synth_prompt(const tb_model_config *cfg, const tb_tokenizer *tok, int32_t avoid, uint64_t seed, uint32_t r,
                     int32_t *ids, size_t P)
{
    uint64_t rng = seed ^ (0xD1B54A32D192ED03ULL * (r + 1));
    int32_t range = cfg->vocab_size;
    if (tok) { /* stay below the added/special tokens (Llama 3 numbering) */
        int32_t lowest_special = tb_tokenizer_token_id(tok, "<|begin_of_text|>");
        if (lowest_special > 0 && lowest_special < range)
            range = lowest_special;
    }
    for (size_t i = 0; i < P; i++) {
        if (i == 0 && cfg->prompt_bos >= 0) {
            ids[i] = cfg->prompt_bos;
            continue;
        }
        int32_t t;
        int bad;
        do {
            t = (int32_t)(tb_rng_uniform(&rng) * range);
            bad = t == cfg->bos_id || t == cfg->prompt_bos || t == avoid;
            for (int e = 0; e < cfg->n_eos; e++)
                bad |= t == cfg->eos_ids[e];
        } while (bad);
        ids[i] = t;
    }
}

int tb_is_eos(const tb_model_config *cfg, int32_t t)
{
    for (int e = 0; e < cfg->n_eos; e++)
        if (cfg->eos_ids[e] == t)
            return 1;
    return 0;
}

uint32_t tb_answer_length(const tb_model_config *cfg, const int32_t *ids, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        if (tb_is_eos(cfg, ids[i]))
            return i;
    return n;
}

int32_t tb_prompt_bos(const tb_model_config *cfg)
{
    return cfg->prompt_bos;
}

int32_t tb_filler_token(const tb_model_config *cfg)
{
    if (cfg->n_eos > 0)
        return cfg->eos_ids[0];
    return cfg->bos_id >= 0 ? cfg->bos_id : 0;
}

void tb_free_prompts(int32_t **ids, int64_t *lens, uint32_t n)
{
    for (uint32_t i = 0; ids && i < n; i++)
        free(ids[i]);
    free(ids);
    free(lens);
}

int tb_is_preset(const tb_model *m)
{
    return strncmp(m->name, "preset:", 7) == 0;
}

int32_t tb_preset_byte_token(unsigned char byte, int vocab)
{
    return 3 + (int32_t)(byte % (unsigned)(vocab > 3 ? vocab - 3 : 1));
}

tb_status tb_tokenize_prompts(const tb_loaded *l, const char *const *texts, uint32_t n, int32_t ***ids_out,
                              int64_t **lens_out, size_t *max_len, char *err, size_t err_size)
{
    int bytes = !l->tok; // a preset's stand-in tokens
    if (bytes && !tb_is_preset(&l->model)) {
        snprintf(err, err_size, "text prompts need a tokenizer.json; this model has none");
        return TB_ERR_UNSUPPORTED;
    }
    int32_t bos = tb_prompt_bos(&l->model.cfg);
    int32_t **ids = calloc(n, sizeof *ids);
    int64_t *lens = calloc(n, sizeof *lens);
    *ids_out = NULL;
    *lens_out = NULL;
    if (!ids || !lens) {
        tb_free_prompts(ids, lens, n);
        snprintf(err, err_size, "out of memory");
        return TB_ERR_NO_MEMORY;
    }
    size_t longest = 0;
    for (uint32_t r = 0; r < n; r++) {
        const char *t = texts[r] ? texts[r] : "";
        int64_t k = bytes ? (int64_t)strlen(t) : tb_tokenizer_encode(l->tok, t, strlen(t), NULL, 0);
        if (k < 0) {
            tb_free_prompts(ids, lens, n);
            if (k == TB_TOKENIZER_NO_MEMORY) {
                snprintf(err, err_size, "prompt %u: out of memory in the tokenizer", r);
                return TB_ERR_NO_MEMORY;
            }
            snprintf(err, err_size, "prompt %u: the tokenizer failed", r);
            return TB_ERR_INVALID;
        }
        int off = bos >= 0;
        ids[r] = malloc(((size_t)k + 1) * sizeof(int32_t));
        if (!ids[r]) {
            tb_free_prompts(ids, lens, n);
            snprintf(err, err_size, "out of memory");
            return TB_ERR_NO_MEMORY;
        }
        if (off)
            ids[r][0] = bos;
        int64_t again = k;
        if (bytes)
            for (int64_t i = 0; i < k; i++)
                ids[r][off + i] = tb_preset_byte_token((unsigned char)t[i], l->model.cfg.vocab_size);
        else
            again = tb_tokenizer_encode(l->tok, t, strlen(t), ids[r] + off, (size_t)k);
        if (again != k) {
            tb_free_prompts(ids, lens, n);
            if (again == TB_TOKENIZER_NO_MEMORY) {
                snprintf(err, err_size, "prompt %u: out of memory in the tokenizer", r);
                return TB_ERR_NO_MEMORY;
            }
            snprintf(err, err_size, "prompt %u: the tokenizer failed", r);
            return TB_ERR_INVALID;
        }
        lens[r] = k + off;
        if (lens[r] == 0) {
            snprintf(err, err_size, "prompt %u is empty (no tokens, and the model has no BOS)", r);
            tb_free_prompts(ids, lens, n);
            return TB_ERR_INVALID;
        }
        if ((size_t)lens[r] > longest)
            longest = (size_t)lens[r];
    }
    *ids_out = ids;
    *lens_out = lens;
    *max_len = longest;
    return TB_OK;
}

void tb_left_pad(int32_t *dst, size_t width, const int32_t *src, size_t n, int32_t filler)
{
    size_t pad = width - n;
    for (size_t i = 0; i < pad; i++)
        dst[i] = filler;
    memcpy(dst + pad, src, n * sizeof *src);
}
