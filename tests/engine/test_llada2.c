/* test_llada2.c — LLaDA 2.x (LLaDA2MoeModelLM) on the CPU engine against
 * its published PyTorch modelling code.
 *
 * tests/data/golden-diffusion/llada2-tiny (tools/make_llada2_golden.py)
 * is a tiny random model in the published layout (fused query_key_value,
 * per-head q/k norms, half of each head rotated, a dense first layer, the
 * sigmoid router with expert_bias and groups, routed scaling, a shared
 * expert); expected-llada2.json holds the logits the published model gave
 * for one causal forward. The engine's must match within LOGIT_TOL
 * (relative to max |logit|) and pick the same argmax everywhere. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cpu_forward.h"
#include "model.h"
#include "sampling.h"
#include "util.h"

#define LOGIT_TOL 2e-5

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_llada2 GOLDEN_DIFFUSION_DIR\n");
        return 2;
    }
    char path[8192], err[512];
    snprintf(path, sizeof path, "%s/expected-llada2.json", argv[1]);
    char *text = tb_read_file(path, NULL);
    CHECK(text != NULL);
    if (!text)
        return check_done();
    cJSON *all = cJSON_Parse(text);
    free(text);
    const cJSON *fwd = cJSON_GetObjectItem(cJSON_GetObjectItem(all, "llada2"), "forward");
    const cJSON *ids = cJSON_GetObjectItem(fwd, "input_ids"), *lg = cJSON_GetObjectItem(fwd, "logits");
    CHECK(cJSON_IsArray(ids) && cJSON_IsArray(lg));
    CHECK(strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(fwd, "mask")), "causal") == 0);

    tb_model m;
    snprintf(path, sizeof path, "%s/llada2-tiny", argv[1]);
    int rc = tb_model_load(path, &m, err, sizeof err);
    if (rc != 0)
        fprintf(stderr, "%s\n", err);
    CHECK(rc == 0);
    if (rc != 0) {
        cJSON_Delete(all);
        return check_done();
    }
    const tb_model_config *c = &m.cfg;
    CHECK(c->arch == TB_ARCH_LLADA2_MOE && c->rope_dim == 8 && c->n_shared_experts == 1 && c->n_group == 4 &&
          c->topk_group == 2 && c->first_k_dense == 1 && m.layers[1].score_bias && m.layers[1].shared_gate_up &&
          !m.layers[0].router);

    int L = cJSON_GetArraySize(ids), V = c->vocab_size;
    int32_t *tok = malloc((size_t)L * sizeof *tok);
    for (int i = 0; i < L; i++)
        tok[i] = cJSON_GetArrayItem(ids, i)->valueint;
    CHECK(cJSON_GetArraySize(lg) == L);
    float *out = malloc((size_t)L * V * sizeof(float));
    tb_cpu_state st;
    CHECK(tb_cpu_state_init(&st, &m, 1, L, L, 1, err, sizeof err) == 0);
    int slot = 0;
    CHECK(tb_cpu_forward_rows(&st, tok, &slot, 1, 0, L, L, 1, 0, L, out) == 0);
    double ref = 0, diff = 0;
    int argmax_same = 0;
    for (int i = 0; i < L; i++) {
        const cJSON *row = cJSON_GetArrayItem(lg, i);
        CHECK(cJSON_GetArraySize(row) == V);
        int best_ref = 0;
        float best_v = -INFINITY;
        for (int v = 0; v < V; v++) {
            double want = cJSON_GetArrayItem(row, v)->valuedouble;
            ref = fabs(want) > ref ? fabs(want) : ref;
            double d = fabs(want - out[(size_t)i * V + v]);
            diff = d > diff || isnan(d) ? (isnan(d) ? INFINITY : d) : diff;
            if (want > best_v)
                best_v = (float)want, best_ref = v;
        }
        argmax_same += tb_argmax(out + (size_t)i * V, V) == best_ref;
    }
    fprintf(stderr, "llada2-tiny: causal logits of %d positions, max |ref| %.3f, max diff %.3g (bound %.3g); argmax "
            "%d of %d; CPU router margin %.3g; expert reads %.0f over %.0f rows\n",
            L, ref, diff, LOGIT_TOL * (ref > 1 ? ref : 1), argmax_same, L, st.moe.min_gap, st.expert_reads,
            st.moe_rows);
    CHECK(diff <= LOGIT_TOL * (ref > 1 ? ref : 1));
    CHECK(argmax_same == L);
    /* each MoE layer call read at most its rows x top_k experts */
    CHECK(st.expert_reads > 0 && st.expert_reads <= (double)(c->n_layers - 1) * c->n_experts);
    free(out);
    free(tok);
    tb_cpu_state_free(&st);
    tb_model_free(&m);
    cJSON_Delete(all);
    return check_done();
}
