/* test_config.c — plugins/engine/format/config.c on configs as released (Llama 3,
 * Llama 3.1, Qwen2.5, LLaDA-8B-Instruct, Dream-v0-Instruct-7B), the
 * transformers 5 spellings, defaults, and one bad config per check. */
#define _POSIX_C_SOURCE 200809L
#include "config.h"
#include "model.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"

static char err[512];

static int parse(const char *json, tb_model_config *cfg)
{
    err[0] = '\0';
    int rc = tb_config_parse(json, "m/config.json", cfg, err, sizeof err);
    if (rc)
        fprintf(stderr, "  (unexpected error: %s)\n", err);
    return rc;
}

/* Must fail with an error holding each of the (up to two) needles. */
#define CHECK_BAD(json, needle, needle2)                                            \
    do {                                                                            \
        tb_model_config c_;                                                         \
        err[0] = '\0';                                                              \
        CHECK(tb_config_parse(json, "m/config.json", &c_, err, sizeof err) == -1); \
        CHECK_CONTAINS(err, "m/config.json: ");                                     \
        CHECK_CONTAINS(err, needle);                                                \
        CHECK_CONTAINS(err, needle2);                                               \
    } while (0)

/* meta-llama/Meta-Llama-3-8B-Instruct */
static const char llama3[] =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"attention_bias\": false,"
    " \"attention_dropout\": 0.0, \"bos_token_id\": 128000, \"eos_token_id\": 128009,"
    " \"hidden_act\": \"silu\", \"hidden_size\": 4096, \"initializer_range\": 0.02,"
    " \"intermediate_size\": 14336, \"max_position_embeddings\": 8192,"
    " \"model_type\": \"llama\", \"num_attention_heads\": 32, \"num_hidden_layers\": 32,"
    " \"num_key_value_heads\": 8, \"pretraining_tp\": 1, \"rms_norm_eps\": 1e-05,"
    " \"rope_scaling\": null, \"rope_theta\": 500000.0, \"tie_word_embeddings\": false,"
    " \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.40.0.dev0\","
    " \"use_cache\": true, \"vocab_size\": 128256}";

/* meta-llama/Llama-3.1-8B-Instruct */
static const char llama31[] =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"attention_bias\": false,"
    " \"bos_token_id\": 128000, \"eos_token_id\": [128001, 128008, 128009],"
    " \"hidden_act\": \"silu\", \"hidden_size\": 4096, \"intermediate_size\": 14336,"
    " \"max_position_embeddings\": 131072, \"mlp_bias\": false, \"model_type\": \"llama\","
    " \"num_attention_heads\": 32, \"num_hidden_layers\": 32, \"num_key_value_heads\": 8,"
    " \"rms_norm_eps\": 1e-05, \"rope_scaling\": {\"factor\": 8.0, \"low_freq_factor\": 1.0,"
    " \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192,"
    " \"rope_type\": \"llama3\"}, \"rope_theta\": 500000.0, \"tie_word_embeddings\": false,"
    " \"torch_dtype\": \"bfloat16\", \"vocab_size\": 128256}";

/* the same written by transformers 5: rope_parameters, dtype */
static const char llama31_v5[] =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"bos_token_id\": 128000,"
    " \"eos_token_id\": [128001, 128008, 128009], \"hidden_size\": 4096,"
    " \"intermediate_size\": 14336, \"max_position_embeddings\": 131072,"
    " \"num_attention_heads\": 32, \"num_hidden_layers\": 32, \"num_key_value_heads\": 8,"
    " \"rms_norm_eps\": 1e-05, \"rope_parameters\": {\"factor\": 8.0,"
    " \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0,"
    " \"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\","
    " \"rope_theta\": 500000.0}, \"dtype\": \"bfloat16\", \"vocab_size\": 128256}";

/* Qwen/Qwen2.5-0.5B-Instruct */
static const char qwen25[] =
    "{\"architectures\": [\"Qwen2ForCausalLM\"], \"attention_dropout\": 0.0,"
    " \"bos_token_id\": 151643, \"eos_token_id\": 151645, \"hidden_act\": \"silu\","
    " \"hidden_size\": 896, \"initializer_range\": 0.02, \"intermediate_size\": 4864,"
    " \"max_position_embeddings\": 32768, \"max_window_layers\": 21,"
    " \"model_type\": \"qwen2\", \"num_attention_heads\": 14, \"num_hidden_layers\": 24,"
    " \"num_key_value_heads\": 2, \"rms_norm_eps\": 1e-06, \"rope_theta\": 1000000.0,"
    " \"sliding_window\": 32768, \"tie_word_embeddings\": true,"
    " \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.43.1\","
    " \"use_cache\": true, \"use_sliding_window\": false, \"vocab_size\": 151936}";

/* GSAI-ML/LLaDA-8B-Instruct (auto_map and init_* trimmed) */
static const char llada[] =
    "{\"activation_type\": \"silu\", \"alibi\": false, \"alibi_bias_max\": 8.0,"
    " \"architectures\": [\"LLaDAModelLM\"], \"attention_dropout\": 0.0,"
    " \"attention_layer_norm\": false, \"attention_layer_norm_with_affine\": true,"
    " \"bias_for_layer_norm\": false, \"block_group_size\": 1, \"block_type\": \"llama\","
    " \"d_model\": 4096, \"embedding_dropout\": 0.0, \"embedding_size\": 126464,"
    " \"eos_token_id\": 126081, \"flash_attention\": false, \"include_bias\": false,"
    " \"include_qkv_bias\": false, \"init_cutoff_factor\": null, \"input_emb_norm\": false,"
    " \"layer_norm_type\": \"rms\", \"layer_norm_with_affine\": true,"
    " \"mask_token_id\": 126336, \"max_sequence_length\": 4096, \"mlp_hidden_size\": 12288,"
    " \"mlp_ratio\": 4, \"model_type\": \"llada\", \"multi_query_attention\": null,"
    " \"n_heads\": 32, \"n_kv_heads\": 32, \"n_layers\": 32, \"pad_token_id\": 126081,"
    " \"precision\": \"amp_bf16\", \"residual_dropout\": 0.0, \"rms_norm_eps\": 1e-05,"
    " \"rope\": true, \"rope_full_precision\": true, \"rope_theta\": 500000.0,"
    " \"scale_logits\": false, \"transformers_version\": \"4.46.3\", \"use_cache\": false,"
    " \"vocab_size\": 126464, \"weight_tying\": false}";

/* Dream-org/Dream-v0-Instruct-7B (auto_map trimmed) */
static const char dream[] =
    "{\"architectures\": [\"DreamModel\"], \"attention_dropout\": 0.0,"
    " \"bos_token_id\": 151643, \"eos_token_id\": 151643, \"hidden_act\": \"silu\","
    " \"hidden_size\": 3584, \"initializer_range\": 0.02, \"intermediate_size\": 18944,"
    " \"mask_token_id\": 151666, \"max_position_embeddings\": 131072,"
    " \"max_window_layers\": 28, \"model_type\": \"Dream\", \"num_attention_heads\": 28,"
    " \"num_hidden_layers\": 28, \"num_key_value_heads\": 4, \"pad_token_id\": 151643,"
    " \"rms_norm_eps\": 1e-06, \"rope_scaling\": null, \"rope_theta\": 1000000.0,"
    " \"sliding_window\": null, \"tie_word_embeddings\": false, \"torch_dtype\": \"bfloat16\","
    " \"transformers_version\": \"4.46.2\", \"use_cache\": false,"
    " \"use_sliding_window\": false, \"vocab_size\": 152064}";

/* The smallest Llama config; tests splice one more field in front. */
#define MIN_LLAMA                                                                   \
    "\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64,"               \
    " \"intermediate_size\": 128, \"num_hidden_layers\": 2, \"num_attention_heads\": 4," \
    " \"vocab_size\": 100"
#define LLAMA_WITH(extra) "{" extra ", " MIN_LLAMA "}"
#define LLAMA_CFG(hidden, inter, layers, heads, vocab)                             \
    "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": " #hidden           \
    ", \"intermediate_size\": " #inter ", \"num_hidden_layers\": " #layers               \
    ", \"num_attention_heads\": " #heads ", \"vocab_size\": " #vocab "}"
#define MIN_QWEN                                                                   \
    "\"architectures\": [\"Qwen2ForCausalLM\"], \"hidden_size\": 64,"               \
    " \"intermediate_size\": 128, \"num_hidden_layers\": 2, \"num_attention_heads\": 4," \
    " \"vocab_size\": 100"
#define QWEN_WITH(extra) "{" extra ", " MIN_QWEN "}"
#define MIN_LLADA                                                                  \
    "\"architectures\": [\"LLaDAModelLM\"], \"d_model\": 64, \"n_layers\": 2,"      \
    " \"n_heads\": 4, \"vocab_size\": 100"
#define LLADA_WITH(extra) "{" extra ", " MIN_LLADA "}"

static void test_released(void)
{
    tb_model_config c;
    CHECK(parse(llama3, &c) == 0);
    CHECK(c.arch == TB_ARCH_LLAMA);
    CHECK_STR(c.arch_name, "LlamaForCausalLM");
    CHECK(c.vocab_size == 128256 && c.hidden_size == 4096 && c.intermediate_size == 14336);
    CHECK(c.n_layers == 32 && c.n_heads == 32 && c.n_kv_heads == 8 && c.head_dim == 128);
    CHECK_NEAR(c.rms_eps, 1e-5, 0);
    CHECK_NEAR(c.rope_theta, 500000.0, 0);
    CHECK(c.rope_llama3 == 0);
    CHECK(c.max_position_embeddings == 8192);
    CHECK(c.tie_word_embeddings == 0 && c.qkv_bias == 0 && c.o_bias == 0);
    CHECK(c.n_eos == 1 && c.eos_ids[0] == 128009);
    CHECK(c.bos_id == 128000 && c.mask_id == -1);
    CHECK(c.prompt_bos == 128000); /* config.json alone: its BOS, not an EOS */
    CHECK_STR(c.torch_dtype, "bfloat16");
    CHECK(c.random_weights == 0);

    const char *l31[] = {llama31, llama31_v5};
    for (int i = 0; i < 2; i++) {
        CHECK(parse(l31[i], &c) == 0);
        CHECK(c.rope_llama3 == 1);
        CHECK_NEAR(c.rope_factor, 8.0, 0);
        CHECK_NEAR(c.rope_low_freq_factor, 1.0, 0);
        CHECK_NEAR(c.rope_high_freq_factor, 4.0, 0);
        CHECK(c.rope_original_max_pos == 8192);
        CHECK_NEAR(c.rope_theta, 500000.0, 0);
        CHECK(c.max_position_embeddings == 131072);
        CHECK(c.n_eos == 3 && c.eos_ids[0] == 128001 && c.eos_ids[1] == 128008 &&
              c.eos_ids[2] == 128009);
        CHECK_STR(c.torch_dtype, "bfloat16");
    }

    CHECK(parse(qwen25, &c) == 0);
    CHECK(c.arch == TB_ARCH_QWEN2);
    CHECK(c.hidden_size == 896 && c.n_heads == 14 && c.n_kv_heads == 2 && c.head_dim == 64);
    CHECK(c.intermediate_size == 4864 && c.n_layers == 24 && c.vocab_size == 151936);
    CHECK(c.qkv_bias == 1 && c.o_bias == 0 && c.tie_word_embeddings == 1);
    CHECK_NEAR(c.rms_eps, 1e-6, 0);
    CHECK_NEAR(c.rope_theta, 1e6, 0);
    CHECK(c.n_eos == 1 && c.eos_ids[0] == 151645 && c.bos_id == 151643);

    CHECK(parse(llada, &c) == 0);
    CHECK(c.arch == TB_ARCH_LLADA);
    CHECK_STR(c.arch_name, "LLaDAModelLM");
    CHECK(c.hidden_size == 4096 && c.n_layers == 32 && c.n_heads == 32 && c.n_kv_heads == 32);
    CHECK(c.head_dim == 128 && c.intermediate_size == 12288 && c.vocab_size == 126464);
    CHECK(c.max_position_embeddings == 4096);
    CHECK(c.mask_id == 126336 && c.n_eos == 1 && c.eos_ids[0] == 126081 && c.bos_id == -1);
    CHECK(c.qkv_bias == 0 && c.tie_word_embeddings == 0);
    CHECK_NEAR(c.rms_eps, 1e-5, 0);
    CHECK_NEAR(c.rope_theta, 500000.0, 0);
    CHECK_STR(c.torch_dtype, "");

    CHECK(parse(dream, &c) == 0);
    CHECK(c.arch == TB_ARCH_DREAM);
    CHECK(c.hidden_size == 3584 && c.n_heads == 28 && c.n_kv_heads == 4 && c.head_dim == 128);
    CHECK(c.intermediate_size == 18944 && c.n_layers == 28 && c.vocab_size == 152064);
    CHECK(c.qkv_bias == 1 && c.tie_word_embeddings == 0 && c.rope_llama3 == 0);
    CHECK(c.mask_id == 151666 && c.bos_id == 151643 && c.eos_ids[0] == 151643);
    CHECK(c.prompt_bos == -1 && c.mask_is_default == 0); /* its BOS is its EOS */
}

static void test_spellings_and_defaults(void)
{
    tb_model_config c;
    /* defaults of LlamaConfig */
    CHECK(parse("{" MIN_LLAMA "}", &c) == 0);
    CHECK(c.n_kv_heads == 4 && c.head_dim == 16);
    CHECK_NEAR(c.rms_eps, 1e-6, 0);
    CHECK_NEAR(c.rope_theta, 10000.0, 0);
    CHECK(c.max_position_embeddings == 2048);
    CHECK(c.n_eos == 0 && c.bos_id == -1 && c.mask_id == -1 && c.tie_word_embeddings == 0);

    /* model_type when architectures is absent */
    CHECK(parse("{\"model_type\": \"qwen2\", \"hidden_size\": 64, \"intermediate_size\": 128,"
                " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 100}",
                &c) == 0);
    CHECK(c.arch == TB_ARCH_QWEN2 && c.qkv_bias == 1 && c.max_position_embeddings == 32768);
    CHECK_STR(c.arch_name, "qwen2");

    /* explicit head_dim (Llama: heads x head_dim need not be hidden) */
    CHECK(parse(LLAMA_WITH("\"head_dim\": 32"), &c) == 0);
    CHECK(c.head_dim == 32 && c.hidden_size == 64);
    CHECK(parse(LLAMA_WITH("\"head_dim\": null"), &c) == 0);
    CHECK(c.head_dim == 16);

    /* Llama attention_bias: q, k, v and o */
    CHECK(parse(LLAMA_WITH("\"attention_bias\": true"), &c) == 0);
    CHECK(c.qkv_bias == 1 && c.o_bias == 1);
    CHECK(parse(QWEN_WITH("\"attention_bias\": false"), &c) == 0);
    CHECK(c.qkv_bias == 0 && c.o_bias == 0);

    /* rope spellings */
    CHECK(parse(LLAMA_WITH("\"rope_scaling\": {\"type\": \"llama3\", \"factor\": 32,"
                           " \"low_freq_factor\": 1, \"high_freq_factor\": 4,"
                           " \"original_max_position_embeddings\": 8192}"),
                &c) == 0);
    CHECK(c.rope_llama3 == 1 && c.rope_factor == 32);
    CHECK(parse(LLAMA_WITH("\"rope_scaling\": {\"rope_type\": \"default\"}"), &c) == 0);
    CHECK(c.rope_llama3 == 0);
    CHECK(parse(LLAMA_WITH("\"rope_parameters\": {\"rope_type\": \"default\","
                           " \"rope_theta\": 250000}"),
                &c) == 0);
    CHECK(c.rope_llama3 == 0);
    CHECK_NEAR(c.rope_theta, 250000.0, 0);
    CHECK(parse(LLAMA_WITH("\"rope_theta\": 10000"), &c) == 0); /* an int is a number */
    CHECK_NEAR(c.rope_theta, 10000.0, 0);

    /* flags and ids */
    CHECK(parse(LLAMA_WITH("\"tokbench_random_weights\": true, \"bos_token_id\": null,"
                           " \"eos_token_id\": [1, 2]"),
                &c) == 0);
    CHECK(c.random_weights == 1 && c.bos_id == -1 && c.n_eos == 2 && c.eos_ids[1] == 2);
    CHECK(parse(LLAMA_WITH("\"mask_token_id\": 99"), &c) == 0);
    CHECK(c.mask_id == 99);

    /* LLaDA: defaults, OLMo fallbacks, HF names */
    CHECK(parse(LLADA_WITH("\"mask_token_id\": 7"), &c) == 0);
    CHECK(c.n_kv_heads == 4 && c.head_dim == 16 && c.intermediate_size == 256);
    CHECK(c.max_position_embeddings == 1024 && c.vocab_size == 100);
    CHECK_NEAR(c.rms_eps, 1e-5, 0);
    CHECK(parse(LLADA_WITH("\"mask_token_id\": 7, \"n_kv_heads\": null,"
                           " \"multi_query_attention\": true, \"mlp_hidden_size\": null,"
                           " \"mlp_ratio\": 2, \"embedding_size\": 128, \"weight_tying\": true,"
                           " \"include_qkv_bias\": true"),
                &c) == 0);
    CHECK(c.n_kv_heads == 1 && c.intermediate_size == 128 && c.vocab_size == 128);
    CHECK(c.tie_word_embeddings == 1 && c.qkv_bias == 1 && c.o_bias == 0);
    CHECK(parse("{\"model_type\": \"llada\", \"hidden_size\": 64, \"num_hidden_layers\": 2,"
                " \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"
                " \"intermediate_size\": 96, \"vocab_size\": 100, \"mask_token_id\": 5,"
                " \"layer_norm_eps\": 1e-6, \"max_position_embeddings\": 512}",
                &c) == 0);
    CHECK(c.arch == TB_ARCH_LLADA && c.hidden_size == 64 && c.n_kv_heads == 2);
    CHECK(c.intermediate_size == 96 && c.max_position_embeddings == 512);
    CHECK_NEAR(c.rms_eps, 1e-6, 0);
    /* Dream by model_type, any case */
    CHECK(parse("{\"model_type\": \"dream\", \"hidden_size\": 64, \"intermediate_size\": 128,"
                " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 100,"
                " \"mask_token_id\": 3}",
                &c) == 0);
    CHECK(c.arch == TB_ARCH_DREAM && c.qkv_bias == 1);
}

static void test_invalid(void)
{
    CHECK_BAD("{\"architectures\": [\"LlamaForCausalLM\",", "not valid JSON", "byte");
    CHECK_BAD("[1, 2]", "expected a JSON object", "");
    CHECK_BAD("{\"architectures\": [\"GPT2LMHeadModel\"]}", "field architectures: expected",
              "got \"GPT2LMHeadModel\"");
    CHECK_BAD("{\"architectures\": \"LlamaForCausalLM\"}", "field architectures", "got \"Llama");
    CHECK_BAD("{\"model_type\": \"gpt2\"}", "field architectures", "got \"gpt2\"");
    CHECK_BAD("{\"hidden_size\": 4}", "field architectures", "got nothing");

    CHECK_BAD("{\"architectures\": [\"LlamaForCausalLM\"], \"intermediate_size\": 128,"
              " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 100}",
              "field hidden_size: expected an integer in [1, 1048576]", "got nothing");
    CHECK_BAD(LLAMA_CFG(0, 128, 2, 4, 100), "field hidden_size: expected an integer",
              "got 0");
    CHECK_BAD(LLAMA_CFG(null, 128, 2, 4, 100), "field hidden_size", "got null");
    CHECK_BAD(LLAMA_CFG(64, 128, "2", 4, 100), "field num_hidden_layers", "got \"2\"");
    CHECK_BAD(LLAMA_CFG(64, 128, 2, 4, 100.5), "field vocab_size", "got 100.5");
    CHECK_BAD(LLAMA_CFG(64, 128, 2, 4, -1), "field vocab_size", "got -1");
    CHECK_BAD(LLAMA_CFG(64, 128, 2, 4, 16777217), "field vocab_size: expected an integer in "
              "[1, 16777216]", "got 16777217");
    CHECK_BAD(LLAMA_CFG(64, 1e300, 2, 4, 100), "field intermediate_size",
              "got 1.0000000000000001e+300");
    CHECK_BAD(LLAMA_CFG(64, 128, 2, true, 100), "field num_attention_heads", "got true");
    CHECK_BAD(LLAMA_WITH("\"num_key_value_heads\": 3"),
              "field num_key_value_heads: expected a divisor of 4", "got 3");
    CHECK_BAD(QWEN_WITH("\"num_key_value_heads\": 0"), "field num_key_value_heads", "got 0");
    CHECK_BAD("{\"architectures\": [\"Qwen2ForCausalLM\"], \"hidden_size\": 66,"
              " \"intermediate_size\": 128, \"num_hidden_layers\": 2,"
              " \"num_attention_heads\": 4, \"vocab_size\": 100}",
              "field hidden_size: expected a multiple of the number of heads (4)", "got 66");
    CHECK_BAD(LLAMA_CFG(20, 128, 2, 4, 100), "field hidden_size: expected an even", "got 20");
    /* Python's json keeps the last of two; cJSON would keep the first */
    CHECK_BAD("{" MIN_LLAMA ", \"vocab_size\": 200}", "field vocab_size: expected one value",
              "got it twice");
    CHECK_BAD(LLAMA_WITH("\"head_dim\": 15"), "field head_dim: expected an even", "got 15");
    CHECK_BAD(LLAMA_WITH("\"rms_norm_eps\": -1e-5"), "field rms_norm_eps: expected a number",
              "got -1.0000000000000001e-05");
    CHECK_BAD(LLAMA_WITH("\"rope_theta\": \"1e4\""), "field rope_theta", "got \"1e4\"");
    CHECK_BAD(LLAMA_WITH("\"max_position_embeddings\": 0"), "field max_position_embeddings",
              "got 0");
    CHECK_BAD(LLAMA_WITH("\"tie_word_embeddings\": 1"),
              "field tie_word_embeddings: expected true or false", "got 1");
    CHECK_BAD(LLAMA_WITH("\"tokbench_random_weights\": \"yes\""),
              "field tokbench_random_weights", "got \"yes\"");
    CHECK_BAD(LLAMA_WITH("\"torch_dtype\": 16"), "field torch_dtype: expected a string",
              "got 16");

    /* rope scaling */
    CHECK_BAD(LLAMA_WITH("\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4}"),
              "field rope_scaling.rope_type", "unsupported rope scaling");
    CHECK_BAD(LLAMA_WITH("\"rope_scaling\": {\"type\": \"linear\", \"factor\": 4}"),
              "field rope_scaling.type", "unsupported rope scaling");
    CHECK_BAD(LLAMA_WITH("\"rope_parameters\": {\"rope_type\": \"dynamic\"}"),
              "field rope_parameters.rope_type", "got \"dynamic\"");
    CHECK_BAD(LLAMA_WITH("\"rope_scaling\": 8"), "field rope_scaling: expected an object",
              "got 8");
    CHECK_BAD(LLAMA_WITH("\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8,"
                         " \"high_freq_factor\": 4, \"original_max_position_embeddings\": 8192}"),
              "field rope_scaling.low_freq_factor", "got nothing");
    CHECK_BAD(LLAMA_WITH("\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8,"
                         " \"low_freq_factor\": 4, \"high_freq_factor\": 1,"
                         " \"original_max_position_embeddings\": 8192}"),
              "field rope_scaling.high_freq_factor: expected a number above", "got 1");
    CHECK_BAD(LLAMA_WITH("\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8,"
                         " \"low_freq_factor\": 1, \"high_freq_factor\": 4}"),
              "field rope_scaling.original_max_position_embeddings", "got nothing");
    CHECK_BAD(LLAMA_WITH("\"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 0}"),
              "field rope_parameters.rope_theta", "got 0");

    /* token ids */
    CHECK_BAD(LLAMA_WITH("\"eos_token_id\": [1, 2, 3, 4, 5, 6, 7, 8, 9]"),
              "field eos_token_id: expected a list of 1 to 8", "got an array");
    CHECK_BAD(LLAMA_WITH("\"eos_token_id\": []"), "field eos_token_id", "got an array");
    CHECK_BAD(LLAMA_WITH("\"eos_token_id\": 100"),
              "field eos_token_id: expected a token id in [0, 100)", "got 100");
    CHECK_BAD(LLAMA_WITH("\"eos_token_id\": [1, \"2\"]"), "field eos_token_id", "got \"2\"");
    CHECK_BAD(LLAMA_WITH("\"bos_token_id\": [1]"), "field bos_token_id", "got an array");
    CHECK_BAD(LLAMA_WITH("\"bos_token_id\": -5"), "field bos_token_id", "got -5");

    /* what the engine would get silently wrong */
    CHECK_BAD(LLAMA_WITH("\"hidden_act\": \"gelu\""), "field hidden_act: expected \"silu\"",
              "got \"gelu\"");
    CHECK_BAD(LLAMA_WITH("\"mlp_bias\": true"), "field mlp_bias: expected false", "got true");
    CHECK_BAD(QWEN_WITH("\"use_sliding_window\": true"), "field use_sliding_window",
              "got true");

    /* diffusion: no mask_token_id parses, the mask left to the folder's
     * tokenizer (folder.h; tests/engine/test_folders.c) */
    {
        tb_model_config c;
        CHECK(parse("{" MIN_LLADA "}", &c) == 0);
        CHECK(c.mask_id == -1 && c.mask_is_default == 0);
    }
    CHECK_BAD(LLADA_WITH("\"mask_token_id\": 100"), "field mask_token_id", "got 100");
    CHECK_BAD(LLADA_WITH("\"mask_token_id\": 1, \"block_type\": \"sequential\""),
              "field block_type: expected \"llama\"", "got \"sequential\"");
    CHECK_BAD(LLADA_WITH("\"mask_token_id\": 1, \"activation_type\": \"swiglu\""),
              "field activation_type", "got \"swiglu\"");
    CHECK_BAD(LLADA_WITH("\"mask_token_id\": 1, \"include_bias\": true"),
              "field include_bias: expected false", "got true");
    CHECK_BAD(LLADA_WITH("\"mask_token_id\": 1, \"attention_layer_norm\": true"),
              "field attention_layer_norm", "got true");
    CHECK_BAD(LLADA_WITH("\"mask_token_id\": 1, \"embedding_size\": 50"),
              "field embedding_size: expected at least vocab_size", "got 50");
    CHECK_BAD(LLADA_WITH("\"mask_token_id\": 1, \"n_kv_heads\": 3"),
              "field n_kv_heads: expected a divisor of 4", "got 3");
    CHECK_BAD("{\"architectures\": [\"LLaDAModelLM\"], \"n_layers\": 2, \"n_heads\": 4,"
              " \"vocab_size\": 100, \"mask_token_id\": 1}",
              "field d_model", "got nothing");
    CHECK_BAD("{\"architectures\": [\"DreamModel\"], \"hidden_size\": 64,"
              " \"intermediate_size\": 128, \"num_hidden_layers\": 2,"
              " \"num_attention_heads\": 4, \"vocab_size\": 100, \"mask_token_id\": -1}",
              "field mask_token_id", "got -1");
}

/* Qwen3-MoE: Qwen3-30B-A3B's config.json keys, then the errors */
#define MIN_QWEN3_MOE                                                                \
    "\"architectures\": [\"Qwen3MoeForCausalLM\"], \"hidden_size\": 64,"         \
    " \"intermediate_size\": 128, \"num_hidden_layers\": 4, \"num_attention_heads\": 4," \
    " \"vocab_size\": 100, \"moe_intermediate_size\": 32"
#define QWEN3_MOE_WITH(extra) "{" extra ", " MIN_QWEN3_MOE "}"
static void test_moe(void)
{
    tb_model_config c;
    CHECK(parse(QWEN3_MOE_WITH("\"num_experts\": 8, \"num_experts_per_tok\": 2, \"norm_topk_prob\": true,"
                               " \"decoder_sparse_step\": 1, \"mlp_only_layers\": [1, 3]"), &c) == 0);
    CHECK(c.arch == TB_ARCH_QWEN3_MOE && c.qk_norm == 1);
    CHECK(c.n_experts == 8 && c.n_experts_per_tok == 2 && c.moe_intermediate_size == 32 && c.norm_topk_prob == 1);
    CHECK(tb_config_layer_is_moe(&c, 0) && !tb_config_layer_is_moe(&c, 1) && tb_config_layer_is_moe(&c, 2) &&
          !tb_config_layer_is_moe(&c, 3));
    /* Qwen3MoeConfig's defaults: no renormalisation, every layer sparse */
    CHECK(parse(QWEN3_MOE_WITH("\"num_experts\": 8, \"num_experts_per_tok\": 2"), &c) == 0);
    CHECK(c.norm_topk_prob == 0 && c.decoder_sparse_step == 1 && c.n_mlp_only == 0);
    CHECK(parse(QWEN3_MOE_WITH("\"num_experts\": 8, \"num_experts_per_tok\": 2, \"decoder_sparse_step\": 2"),
                &c) == 0);
    CHECK(!tb_config_layer_is_moe(&c, 0) && tb_config_layer_is_moe(&c, 1) && !tb_config_layer_is_moe(&c, 2));
    /* a dense model is never sparse */
    CHECK(parse(LLAMA_WITH("\"head_dim\": 16"), &c) == 0);
    CHECK(c.n_experts == 0 && !tb_config_layer_is_moe(&c, 0));

    CHECK_BAD(QWEN3_MOE_WITH("\"num_experts_per_tok\": 2"), "field num_experts: expected", "got nothing");
    CHECK_BAD(QWEN3_MOE_WITH("\"num_experts\": 8, \"num_experts_per_tok\": 9"),
              "field num_experts_per_tok: expected an integer in [1, 8]", "got 9");
    CHECK_BAD(QWEN3_MOE_WITH("\"num_experts\": 2000, \"num_experts_per_tok\": 2"), "field num_experts",
              "got 2000");
    CHECK_BAD(QWEN3_MOE_WITH("\"num_experts\": 8, \"num_experts_per_tok\": 2, \"mlp_only_layers\": [4]"),
              "field mlp_only_layers: expected layer indices", "got 4");
    CHECK_BAD(QWEN3_MOE_WITH("\"num_experts\": 8, \"num_experts_per_tok\": 2, \"mlp_only_layers\": 1"),
              "field mlp_only_layers: expected a list", "got 1");
    CHECK_BAD(QWEN3_MOE_WITH("\"num_experts\": 8, \"num_experts_per_tok\": 2, \"norm_topk_prob\": 1"),
              "field norm_topk_prob: expected true or false", "got 1");
}

/* LLaDA-MoE: LLaDA-MoE-7B-A1B-Base's config.json keys (16 layers, 64
 * experts, 8 a token, no mask_token_id: 156895 as its generation code),
 * then the options the engine would compute otherwise, each refused */
#define LLADA_MOE_KEYS                                                                                       \
    "\"architectures\": [\"LLaDAMoEModelLM\"], \"model_type\": \"lladamoe\", \"attention_bias\": false,"   \
    " \"dense_intermediate_size\": 8192, \"expert_intermediate_size\": 1024, \"hidden_act\": \"silu\","    \
    " \"hidden_size\": 2048, \"max_position_embeddings\": 8192,"                                           \
    " \"moe_layer_freq\": [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1],"                                \
    " \"moe_router_enable_expert_bias\": false, \"moe_router_score_function\": \"softmax\","              \
    " \"norm_topk_prob\": true, \"num_attention_heads\": 16, \"num_experts\": 64, \"num_experts_per_tok\": 8," \
    " \"num_hidden_layers\": 16, \"num_key_value_heads\": 16, \"partial_rotary_factor\": 1,"               \
    " \"qk_layernorm\": true, \"rms_norm_eps\": 1e-05, \"rope_scaling\": null, \"rope_theta\": 50000,"     \
    " \"shared_expert_intermediate_size\": null, \"clip_qkv\": null, \"tie_word_embeddings\": false,"      \
    " \"eos_token_id\": 156892, \"vocab_size\": 157184"
#define LLADA_MOE_WITH(extra) "{" extra LLADA_MOE_KEYS "}"
static void test_lladamoe(void)
{
    tb_model_config c;
    CHECK(parse(LLADA_MOE_WITH(""), &c) == 0);
    CHECK(c.arch == TB_ARCH_LLADA_MOE && tb_arch_is_diffusion(c.arch) && !tb_arch_is_block_diffusion(c.arch));
    CHECK(c.hidden_size == 2048 && c.n_layers == 16 && c.n_heads == 16 && c.n_kv_heads == 16 && c.head_dim == 128);
    CHECK(c.qk_norm == 1 && c.qkv_bias == 0 && c.o_bias == 0 && c.rope_theta == 50000 && c.rms_eps == 1e-5);
    CHECK(c.n_experts == 64 && c.n_experts_per_tok == 8 && c.moe_intermediate_size == 1024 && c.n_mlp_only == 0);
    /* the block fixes norm_topk_prob = False whatever the config says */
    CHECK(c.norm_topk_prob == 0);
    CHECK(c.mask_id == 156895 && c.n_eos == 1 && c.eos_ids[0] == 156892 && c.vocab_size == 157184);
    CHECK(c.mask_is_default == 1); /* its generation code's, not config.json's: a tokenizer may name it */
    for (int l = 0; l < 16; l++)
        CHECK(tb_config_layer_is_moe(&c, l));
    /* the preset has the same shape */
    tb_model_config p;
    CHECK(tb_preset_config("llada-moe-7b-a1b", &p, err, sizeof err) == 0);
    CHECK(p.arch == c.arch && p.vocab_size == c.vocab_size && p.hidden_size == c.hidden_size &&
          p.n_layers == c.n_layers && p.n_heads == c.n_heads && p.head_dim == c.head_dim && p.qk_norm == c.qk_norm &&
          p.n_experts == c.n_experts && p.n_experts_per_tok == c.n_experts_per_tok &&
          p.moe_intermediate_size == c.moe_intermediate_size && p.norm_topk_prob == 0 && p.mask_id == c.mask_id &&
          p.rope_theta == c.rope_theta);
    /* head_dim is always d_model / heads there; a mask id in the config wins */
    const char *dense = "{\"architectures\": [\"LLaDAMoEModelLM\"], \"hidden_size\": 64, \"num_hidden_layers\": 3,"
                        " \"num_attention_heads\": 4, \"vocab_size\": 512, \"num_experts\": 8,"
                        " \"num_experts_per_tok\": 2, \"expert_intermediate_size\": 32, \"rope_theta\": 50000,"
                        " \"mask_token_id\": 510, \"dense_intermediate_size\": 96, \"head_dim\": 8,"
                        " \"moe_layer_freq\": [1, 0, 1]}";
    CHECK(parse(dense, &c) == 0);
    CHECK(c.head_dim == 16 && c.intermediate_size == 96 && c.mask_id == 510 && c.qk_norm == 0 &&
          c.max_position_embeddings == 4096);
    CHECK(tb_config_layer_is_moe(&c, 0) && !tb_config_layer_is_moe(&c, 1) && tb_config_layer_is_moe(&c, 2));

    CHECK_BAD("{\"shared_expert_intermediate_size\": 1024, \"dense_intermediate_size\": 96,"
              " \"architectures\": [\"LLaDAMoEModelLM\"], \"hidden_size\": 64,"
              " \"num_hidden_layers\": 1, \"num_attention_heads\": 4, \"vocab_size\": 512, \"num_experts\": 8,"
              " \"num_experts_per_tok\": 2, \"expert_intermediate_size\": 32, \"rope_theta\": 50000,"
              " \"mask_token_id\": 510, \"moe_layer_freq\": [1]}",
              "field shared_expert_intermediate_size: expected null (shared experts", "got 1024");
#define TINY_LLADA_MOE(extra)                                                                                   \
    "{" extra "\"architectures\": [\"LLaDAMoEModelLM\"], \"hidden_size\": 64, \"num_hidden_layers\": 2,"         \
    " \"num_attention_heads\": 4, \"vocab_size\": 512, \"num_experts\": 8, \"num_experts_per_tok\": 2,"           \
    " \"expert_intermediate_size\": 32, \"mask_token_id\": 510, \"dense_intermediate_size\": 96}"
    CHECK_BAD(TINY_LLADA_MOE("\"rope_theta\": 50000, \"moe_layer_freq\": [1], "),
              "field moe_layer_freq: expected a list of one 0 or 1 per layer", "got an array");
    CHECK_BAD(TINY_LLADA_MOE("\"rope_theta\": 50000, "), "field moe_layer_freq: expected", "got nothing");
    CHECK_BAD(TINY_LLADA_MOE("\"moe_layer_freq\": [1, 1], "), "field rope_theta: expected a number", "got nothing");
    CHECK_BAD(TINY_LLADA_MOE("\"rope_theta\": null, \"moe_layer_freq\": [1, 1], "), "field rope_theta: expected a number",
              "got null");
    CHECK_BAD("{\"architectures\": [\"LLaDAMoEModelLM\"], \"hidden_size\": 64, \"num_hidden_layers\": 2,"
              " \"num_attention_heads\": 4, \"vocab_size\": 512, \"num_experts\": 8, \"num_experts_per_tok\": 2,"
              " \"expert_intermediate_size\": 32, \"mask_token_id\": 510, \"rope_theta\": 50000,"
              " \"moe_layer_freq\": [1, 0]}",
              "field dense_intermediate_size: expected an integer", "got nothing");
    CHECK_BAD(TINY_LLADA_MOE("\"rope_theta\": 50000, \"moe_layer_freq\": [1, 1], \"moe_router_enable_expert_bias\": true, "),
              "field moe_router_enable_expert_bias: expected false", "got true");
    CHECK_BAD(TINY_LLADA_MOE("\"rope_theta\": 50000, \"moe_layer_freq\": [1, 1], \"moe_router_score_function\": \"sigmoid\", "),
              "field moe_router_score_function: expected \"softmax\"", "got \"sigmoid\"");
    CHECK_BAD(TINY_LLADA_MOE("\"rope_theta\": 50000, \"moe_layer_freq\": [1, 1], \"clip_qkv\": 8, "),
              "field clip_qkv: expected null", "got 8");
    CHECK_BAD(TINY_LLADA_MOE("\"rope_theta\": 50000, \"moe_layer_freq\": [1, 1], \"partial_rotary_factor\": 0.5, "),
              "field partial_rotary_factor: expected 1", "got 0.5");
    CHECK_BAD(TINY_LLADA_MOE("\"rope_theta\": 50000, \"moe_layer_freq\": [1, 1], \"qk_layernorm\": 1, "),
              "field qk_layernorm: expected true or false", "got 1");
}

static void test_load(void)
{
    tb_model_config c;
    char dir[] = "/tmp/tb_test_config_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[256];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f)
        return;
    fputs(dream, f);
    fclose(f);
    CHECK(tb_config_load(path, &c, err, sizeof err) == 0);
    CHECK(c.arch == TB_ARCH_DREAM && c.hidden_size == 3584);

    /* a NUL inside: cJSON would read only the text before it */
    f = fopen(path, "w");
    fwrite("{}\0{\"x\": 1}", 1, 11, f);
    fclose(f);
    CHECK(tb_config_load(path, &c, err, sizeof err) == -1);
    CHECK_CONTAINS(err, path);
    CHECK_CONTAINS(err, "NUL byte");
    unlink(path);

    CHECK(tb_config_load(path, &c, err, sizeof err) == -1);
    CHECK_CONTAINS(err, path);
    CHECK_CONTAINS(err, "No such file");
    rmdir(dir);

    /* a tiny error buffer truncates, never overflows */
    char small[8];
    CHECK(tb_config_parse("{}", "m/config.json", &c, small, sizeof small) == -1);
    CHECK(strlen(small) == 7);
}

/* LLaDA 2.x: LLaDA2.0-mini's config.json as inclusionAI publishes it
 * (github.com/inclusionAI/dFactory configs/model_configs/llada2_mini/, its
 * architectures and keys; model_type as the Hugging Face model's), then the
 * class defaults and what is refused */
#define LLADA2_KEYS                                                                                          \
    "\"architectures\": [\"LLaDA2MoeModelLM\"], \"attention_dropout\": 0.0, \"num_hidden_layers\": 20,"      \
    " \"hidden_size\": 2048, \"intermediate_size\": 5120, \"first_k_dense_replace\": 1,"                    \
    " \"hidden_act\": \"silu\", \"max_position_embeddings\": 16384, \"model_type\": \"llada2_moe\","       \
    " \"moe_intermediate_size\": 512, \"norm_topk_prob\": true, \"num_experts_per_tok\": 8,"                \
    " \"norm_head\": false, \"num_attention_heads\": 16, \"num_experts\": 256, \"num_key_value_heads\": 4," \
    " \"rope_theta\": 600000, \"rope_scaling\": null, \"tie_word_embeddings\": false,"                     \
    " \"torch_dtype\": \"bfloat16\", \"use_bias\": false, \"use_rmsnorm\": true, \"rms_norm_eps\": 1e-06,"  \
    " \"head_dim\": 128, \"num_shared_experts\": 1, \"use_cache\": false, \"use_qkv_bias\": false,"         \
    " \"vocab_size\": 157184, \"rotary_dim\": 64, \"router_dtype\": \"fp32\","                             \
    " \"moe_router_enable_expert_bias\": true, \"routed_scaling_factor\": 2.5, \"n_group\": 8,"            \
    " \"topk_group\": 4, \"initializer_range\": 0.02, \"max_window_layers\": 28,"                          \
    " \"pad_token_id\": 156892, \"partial_rotary_factor\": 0.5, \"use_sliding_window\": false"
static void test_llada2(void)
{
    tb_model_config c;
    CHECK(parse("{\"score_function\": \"sigmoid\", " LLADA2_KEYS "}", &c) == 0);
    CHECK(c.arch == TB_ARCH_LLADA2_MOE && tb_arch_is_diffusion(c.arch) && tb_arch_is_block_diffusion(c.arch));
    CHECK(c.hidden_size == 2048 && c.n_layers == 20 && c.n_heads == 16 && c.n_kv_heads == 4 && c.head_dim == 128);
    CHECK(c.rope_dim == 64 && tb_config_rope_dim(&c) == 64 && c.rope_theta == 600000 && c.rms_eps == 1e-6);
    CHECK(c.qk_norm == 1 && c.qkv_bias == 0 && c.o_bias == 0 && c.block_size == 32);
    CHECK(c.n_experts == 256 && c.n_experts_per_tok == 8 && c.moe_intermediate_size == 512 && c.n_shared_experts == 1);
    CHECK(c.n_group == 8 && c.topk_group == 4 && c.routed_scale == 2.5 && c.first_k_dense == 1 && c.norm_topk_prob);
    CHECK(c.mask_id == 156895 && c.intermediate_size == 5120);
    CHECK(!tb_config_layer_is_moe(&c, 0) && tb_config_layer_is_moe(&c, 1) && tb_config_layer_is_moe(&c, 19));
    tb_moe_config m;
    tb_model_moe_config(&c, &m);
    CHECK(m.scoring == TB_MOE_SIGMOID && m.n_group == 8 && m.topk_group == 4 && m.group_mask_inf == 1 &&
          m.routed_scale == 2.5f && m.shared_inter == 512 && m.norm_topk == 1);
    /* the preset has the same shape */
    tb_model_config p;
    CHECK(tb_preset_config("llada2-mini", &p, err, sizeof err) == 0);
    CHECK(p.arch == c.arch && p.vocab_size == c.vocab_size && p.hidden_size == c.hidden_size &&
          p.intermediate_size == c.intermediate_size && p.n_layers == c.n_layers && p.n_heads == c.n_heads &&
          p.n_kv_heads == c.n_kv_heads && p.head_dim == c.head_dim && p.rope_dim == c.rope_dim &&
          p.qk_norm == c.qk_norm && p.n_experts == c.n_experts && p.n_experts_per_tok == c.n_experts_per_tok &&
          p.moe_intermediate_size == c.moe_intermediate_size && p.n_shared_experts == c.n_shared_experts &&
          p.n_group == c.n_group && p.topk_group == c.topk_group && p.routed_scale == c.routed_scale &&
          p.first_k_dense == c.first_k_dense && p.mask_id == c.mask_id && p.rope_theta == c.rope_theta &&
          p.rms_eps == c.rms_eps && p.block_size == c.block_size);
    CHECK(tb_config_n_params(&p) > 16000000000LL && tb_config_n_params(&p) < 16500000000LL);
    /* the class defaults: use_bias true (refused at load), qk norms on */
    CHECK(parse("{\"architectures\": [\"LLaDA2MoeModelLM\"], \"hidden_size\": 64, \"num_hidden_layers\": 2,"
                " \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"vocab_size\": 512,"
                " \"intermediate_size\": 96, \"moe_intermediate_size\": 32, \"mask_token_id\": 510}", &c) == 0);
    CHECK(c.o_bias == 1 && c.qk_norm == 1 && c.n_experts == 16 && c.n_experts_per_tok == 2 && c.n_group == 8 &&
          c.topk_group == 4 && c.routed_scale == 2.5 && c.rope_dim == 8 && c.rms_eps == 1e-5 && c.first_k_dense == 0);
    /* refused, naming the field */
    CHECK(parse("{\"score_function\": \"softmax\", " LLADA2_KEYS "}", &c) == -1 && strstr(err, "score_function"));
    CHECK(parse("{\"topk_group\": 1, \"num_experts_per_tok\": 64, \"architectures\": [\"LLaDA2MoeModelLM\"],"
                " \"hidden_size\": 64, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 512,"
                " \"intermediate_size\": 96, \"moe_intermediate_size\": 32, \"num_experts\": 64,"
                " \"mask_token_id\": 510}", &c) == -1 && strstr(err, "topk_group"));
    CHECK(parse("{\"n_group\": 3, \"architectures\": [\"LLaDA2MoeModelLM\"], \"hidden_size\": 64,"
                " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 512,"
                " \"intermediate_size\": 96, \"moe_intermediate_size\": 32, \"mask_token_id\": 510}", &c) == -1 &&
          strstr(err, "n_group"));
    CHECK(parse("{\"partial_rotary_factor\": 0.01, \"architectures\": [\"LLaDA2MoeModelLM\"],"
                " \"hidden_size\": 64, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 512,"
                " \"intermediate_size\": 96, \"moe_intermediate_size\": 32, \"mask_token_id\": 510}", &c) == -1 &&
          strstr(err, "partial_rotary_factor"));
}

int main(void)
{
    test_llada2();
    test_released();
    test_spellings_and_defaults();
    test_invalid();
    test_moe();
    test_lladamoe();
    test_load();
    return check_done();
}
