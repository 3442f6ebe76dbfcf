/* engine_options.h — the options the engine's backends (ar, diffusion,
 * flow) share, declared once, and the choice lists of enum options.
 *
 * A choice list is one X-macro LIST(X, SEP) of X(value, "name") rows
 * separated by SEP. From it come the declaration's "a|b|c" choices text
 * (TB_CHOICES_TEXT), the name -> value table the option's text is looked up
 * in (TB_CHOICES_TABLE, tb_choice_value) and, where the list owns its
 * values, the enum (TB_CHOICES_ENUM): a value is found by its name, so a
 * reordered list cannot select the wrong entry. */
#ifndef TB_ENGINE_ENGINE_OPTIONS_H
#define TB_ENGINE_ENGINE_OPTIONS_H

#include <stdint.h>

#include <tokbench/backend.h>

/* The value of declared option `which` among values[n] (the host passes
 * every declared option), or its parsed default. */
const tb_option_value *tb_opt_get(const tb_option_value *values, uint32_t n, const tb_option_decl *decls,
                                  int which);
int64_t tb_opt_int(const tb_option_value *values, uint32_t n, const tb_option_decl *decls, int which);
double tb_opt_float(const tb_option_value *values, uint32_t n, const tb_option_decl *decls, int which);
/* The enum/string text, the default when absent. */
const char *tb_opt_text(const tb_option_value *values, uint32_t n, const tb_option_decl *decls, int which);

/* One value an enum option can take: its name as suites write it. */
typedef struct tb_choice {
    const char *name;
    int value;
} tb_choice;

#define TB_CHOICE_ENUM(value, name) value
#define TB_CHOICE_NAME(value, name) name
#define TB_CHOICE_ROW(value, name) {name, value}
#define TB_CHOICE_COMMA ,
#define TB_CHOICE_BAR "|"
/* enum { a, b, c } */
#define TB_CHOICES_ENUM(LIST) LIST(TB_CHOICE_ENUM, TB_CHOICE_COMMA)
/* "a|b|c", for tb_option_decl.choices */
#define TB_CHOICES_TEXT(LIST) LIST(TB_CHOICE_NAME, TB_CHOICE_BAR)
/* {{"a", a}, {"b", b}, {"c", c}, {NULL, -1}} */
#define TB_CHOICES_TABLE(LIST) {LIST(TB_CHOICE_ROW, TB_CHOICE_COMMA), {NULL, -1}}

/* The value named `name` in choices (ended by a NULL name); -1 when none
 * is (the host checks an enum option's text against its choices first). */
int tb_choice_value(const tb_choice *choices, const char *name);
/* The name of `value` in choices; "?" when none has it. */
const char *tb_choice_name(const tb_choice *choices, int value);
/* The value of declared enum option `which` (tb_opt_text) in choices. */
int tb_opt_choice(const tb_option_value *values, uint32_t n, const tb_option_decl *decls, int which,
                  const tb_choice *choices);

/* `device`: where the engine runs. auto: cuda when this build has CUDA
 * and a device is usable, else cpu (tb_device_wants_gpu). */
typedef enum tb_device { TB_DEVICE_AUTO, TB_DEVICE_CPU, TB_DEVICE_CUDA } tb_device;
#ifdef TB_HAVE_CUDA
#define TB_DEVICE_LIST(X, SEP) X(TB_DEVICE_AUTO, "auto") SEP X(TB_DEVICE_CPU, "cpu") SEP X(TB_DEVICE_CUDA, "cuda")
#else
#define TB_DEVICE_LIST(X, SEP) X(TB_DEVICE_AUTO, "auto") SEP X(TB_DEVICE_CPU, "cpu")
#endif
extern const tb_choice tb_device_choices[];
/* help: what the backend does on each device */
#define TB_OPT_DECL_DEVICE(help)                                                                                \
    {"device", TB_OPT_ENUM, "cpu", help, TB_CHOICES_TEXT(TB_DEVICE_LIST), 1, 0, TB_OPTF_LOAD}

/* `threads`: the CPU path's threads (0 = every online CPU); help says
 * what they run */
#define TB_OPT_DECL_THREADS(help) {"threads", TB_OPT_INT, "0", help, NULL, 0, 4096, 0}

/* `dtype` (ar, diffusion): the weights' type (tb_load's fp8) */
typedef enum tb_dtype_option { TB_DTYPE_AUTO, TB_DTYPE_FP8 } tb_dtype_option;
#define TB_DTYPE_LIST(X, SEP) X(TB_DTYPE_AUTO, "auto") SEP X(TB_DTYPE_FP8, "fp8")
extern const tb_choice tb_dtype_choices[];
#define TB_OPT_DECL_DTYPE                                                                                       \
    {"dtype", TB_OPT_ENUM, "auto",                                                                              \
     "auto (the device's own: float32 on the CPU, bf16 on the GPU) or fp8 (E4M3 projection weights, the "       \
     "experts' too, with a per-output-channel scale made at load, and E4M3 inputs per row; embeddings, norms, " \
     "MoE routers and LM head as auto)",                                                                        \
     TB_CHOICES_TEXT(TB_DTYPE_LIST), 1, 0, TB_OPTF_LOAD}

/* `tp` (ar, diffusion): tensor parallelism (tb_load's tp) */
#define TB_OPT_DECL_TP                                                                                          \
    {"tp", TB_OPT_INT, "0",                                                                                     \
     "tensor parallel over the first N GPUs of this host (device = cuda; NCCL, libnccl.so.2 at run time); "    \
     "0 = one GPU without NCCL, 1 = one GPU through the NCCL path",                                             \
     NULL, 0, 64, TB_OPTF_LOAD}

/* `preset_seed`: the seed of a preset's random weights */
#define TB_OPT_DECL_PRESET_SEED                                                                                 \
    {"preset_seed", TB_OPT_INT, "0", "seed of a preset's random weights", NULL, 0, 1e18, TB_OPTF_LOAD}

/* The `device` option's value: "cuda" -> 1, "cpu" -> 0, "auto" -> 1 when
 * this is a CUDA build and a CUDA device is usable, else 0 (so one suite
 * runs on the GPU when there is one and on the CPU elsewhere). */
int tb_device_wants_gpu(const char *device);

#endif
