/* fuzz_config.c — libFuzzer target for config.json parsing: any text must
 * give either a config that passes the header's invariants or an error
 * naming the file.
 * Built and run by tests/fuzz/run.sh. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "dgemma_model.h"

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
    /* DiffusionGemma's parser (format/dgemma_model.c) reads the same files */
    tb_dgemma_config g;
    if (tb_dgemma_config_parse(text, "fuzz/config.json", &g, err, sizeof err) != 0) {
        if (strncmp(err, "fuzz/config.json: ", 18) != 0)
            abort();
    } else if (g.vocab < 1 || g.hidden < 2 || g.n_layers < 1 || g.n_layers > TB_DG_MAX_LAYERS || g.n_heads < 1 ||
               g.n_heads % g.kv_sliding != 0 || g.n_heads % g.kv_full != 0 || g.hd_sliding % 2 != 0 ||
               g.hd_full % 2 != 0 || g.rope_angles_full < 0 || g.rope_angles_full > g.hd_full / 2 ||
               !g.full[g.n_layers - 1] || g.top_k < 1 || g.top_k > g.n_experts || g.canvas < 1 ||
               g.sliding_window < 1 || g.n_eos < 0 || g.n_eos > TB_DG_MAX_EOS || g.bos_id >= g.vocab ||
               g.pad_id >= g.vocab || g.image_id >= g.vocab || !(g.rms_eps > 0) || !(g.softcap > 0)) {
        abort();
    } else {
        for (int e = 0; e < g.n_eos; e++) /* a parsed config's EOS ids (a refused one's are not read) */
            if (g.eos[e] < 0 || g.eos[e] >= g.vocab)
                abort();
    }
    free(text);
    return 0;
}
