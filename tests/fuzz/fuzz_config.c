/* fuzz_config.c — libFuzzer target for config.json parsing: any text must
 * give either a config that passes the header's invariants or an error
 * naming the file.
 * Built and run by tests/fuzz/run.sh. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    tb_model_config c;
    char err[512];
    if (tb_config_parse(text, "fuzz/config.json", &c, err, sizeof err) != 0) {
        if (strncmp(err, "fuzz/config.json: ", 18) != 0)
            abort();
    } else if (c.vocab_size < 1 || c.hidden_size < 1 || c.intermediate_size < 1 ||
               c.n_layers < 1 || c.n_heads < 1 || c.n_kv_heads < 1 ||
               c.n_heads % c.n_kv_heads != 0 || c.head_dim < 2 || c.head_dim % 2 != 0 ||
               !(c.rms_eps > 0) || !(c.rope_theta > 0) || c.n_eos < 0 || c.n_eos > TB_MAX_EOS ||
               c.bos_id >= c.vocab_size || c.mask_id >= c.vocab_size ||
               /* LLaDA, LLaDA-MoE and Dream split the model width across
                * the heads; every other family reads an explicit head_dim
                * (Qwen3's may differ from hidden / heads) */
               ((c.arch == TB_ARCH_LLADA || c.arch == TB_ARCH_LLADA_MOE || c.arch == TB_ARCH_DREAM) &&
                c.hidden_size != c.n_heads * c.head_dim) ||
               (c.prompt_bos != -1 && c.prompt_bos != c.bos_id) || (c.mask_is_default && c.mask_id < 0)) {
        abort();
    }
    free(text);
    return 0;
}
