/* test_engine.c — the CPU forward pass against Hugging Face transformers.
 *
 * tests/data/golden/<model>/ holds tiny random models saved by
 * transformers (tools/make_golden.py) and expected.json with the logits
 * transformers computed (float32, CPU, eager attention) and its greedy
 * continuation. The engine must give the same logits within
 *     max |ours - theirs| <= LOGIT_TOL * max(1, max |theirs|)
 * and exactly the same greedy tokens. LOGIT_TOL = 2e-5: both sides compute
 * in float32; only the summation order differs (OpenBLAS vs PyTorch). */
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

static const char *golden_dir(void)
{
    static char buf[4096];
    const char *root = getenv("TB_SOURCE_ROOT");
    snprintf(buf, sizeof buf, "%s/tests/data/golden", root ? root : ".");
    return buf;
}

static int32_t *int_array(const cJSON *a, int *n)
{
    *n = cJSON_GetArraySize(a);
    int32_t *v = malloc((size_t)(*n ? *n : 1) * sizeof *v);
    for (int i = 0; i < *n; i++)
        v[i] = (int32_t)cJSON_GetArrayItem(a, i)->valuedouble;
    return v;
}

/* Compare all-position logits of `ids` with the [seq][vocab] array ref. */
static void check_logits(const char *name, tb_model *m, const int32_t *ids, int n, const cJSON *ref)
{
    int V = m->cfg.vocab_size;
    tb_cpu_state st;
    char err[512];
    CHECK(tb_cpu_state_init(&st, m, 1, n + 4, n, 1, err, sizeof err) == 0);
    float *logits = malloc((size_t)n * V * sizeof(float));
    CHECK(tb_cpu_forward(&st, ids, 1, n, 1, 1, logits) == 0);
    CHECK(cJSON_GetArraySize(ref) == n);
    double max_ref = 0, max_diff = 0;
    for (int t = 0; t < n; t++) {
        const cJSON *row = cJSON_GetArrayItem(ref, t);
        CHECK(cJSON_GetArraySize(row) == V);
        for (int v = 0; v < V; v++) {
            double r = cJSON_GetArrayItem(row, v)->valuedouble;
            double d = fabs(r - logits[(size_t)t * V + v]);
            if (fabs(r) > max_ref)
                max_ref = fabs(r);
            if (d > max_diff || isnan(d))
                max_diff = isnan(d) ? INFINITY : d;
        }
    }
    double tol = LOGIT_TOL * (max_ref > 1 ? max_ref : 1);
    fprintf(stderr, "%s: %d positions, max |logit| %.4f, max diff %.3g (tol %.3g)\n", name, n, max_ref, max_diff,
            tol);
    CHECK(max_diff <= tol);

    /* The same logits token by token through the KV cache. */
    tb_cpu_state_reset(&st);
    double inc_diff = 0;
    for (int t = 0; t < n; t++) {
        float last[V];
        CHECK(tb_cpu_forward(&st, ids + t, 1, 1, 1, 0, last) == 0);
        for (int v = 0; v < V; v++) {
            double d = fabs(last[v] - logits[(size_t)t * V + v]);
            if (d > inc_diff)
                inc_diff = d;
        }
    }
    CHECK(inc_diff <= LOGIT_TOL * (max_ref > 1 ? max_ref : 1));
    free(logits);
    tb_cpu_state_free(&st);
}

/* Greedy continuation through the KV cache, batch of 2 identical prompts
 * (each sequence must follow the reference on its own). */
static void check_greedy(const char *name, tb_model *m, const cJSON *greedy)
{
    int np, nn;
    int32_t *prompt = int_array(cJSON_GetObjectItem(greedy, "prompt_ids"), &np);
    int32_t *want = int_array(cJSON_GetObjectItem(greedy, "new_ids"), &nn);
    int V = m->cfg.vocab_size;
    tb_cpu_state st;
    char err[512];
    CHECK(tb_cpu_state_init(&st, m, 2, np + nn, 2 * np, 2, err, sizeof err) == 0);
    int32_t *batch = malloc(2 * (size_t)np * sizeof *batch);
    memcpy(batch, prompt, (size_t)np * sizeof *batch);
    memcpy(batch + np, prompt, (size_t)np * sizeof *batch);
    float *logits = malloc(2 * (size_t)V * sizeof(float));
    CHECK(tb_cpu_forward(&st, batch, 2, np, 1, 0, logits) == 0);
    int same = 1;
    for (int i = 0; i < nn; i++) {
        int32_t next[2] = {tb_argmax(logits, V), tb_argmax(logits + V, V)};
        if (next[0] != want[i] || next[1] != want[i]) {
            fprintf(stderr, "%s: greedy token %d: got %d/%d, transformers %d\n", name, i, next[0], next[1], want[i]);
            same = 0;
            break;
        }
        if (i + 1 < nn)
            CHECK(tb_cpu_forward(&st, next, 2, 1, 1, 0, logits) == 0);
    }
    CHECK(same);
    free(batch);
    free(logits);
    free(prompt);
    free(want);
    tb_cpu_state_free(&st);
}

static void check_model(const char *name)
{
    char dir[8192], path[8300], err[1024]; /* golden_dir() is at most 4095 bytes */
    snprintf(dir, sizeof dir, "%s/%s", golden_dir(), name);
    snprintf(path, sizeof path, "%s/expected.json", dir);
    char *text = tb_read_file(path, NULL);
    CHECK(text != NULL);
    if (!text) {
        fprintf(stderr, "%s: missing\n", path);
        return;
    }
    cJSON *exp = cJSON_Parse(text);
    free(text);
    tb_model m;
    int rc = tb_model_load(dir, &m, err, sizeof err);
    if (rc != 0)
        fprintf(stderr, "%s: %s\n", name, err);
    CHECK(rc == 0);
    if (rc == 0) {
        int n;
        int32_t *ids = int_array(cJSON_GetObjectItem(exp, "input_ids"), &n);
        check_logits(name, &m, ids, n, cJSON_GetObjectItem(exp, "logits"));
        free(ids);
        const cJSON *second = cJSON_GetObjectItem(exp, "batch_logits");
        const cJSON *second_ids = cJSON_GetObjectItem(exp, "batch_input_ids");
        if (second && second_ids) {
            ids = int_array(second_ids, &n);
            check_logits(name, &m, ids, n, second);
            free(ids);
        }
        check_greedy(name, &m, cJSON_GetObjectItem(exp, "greedy"));
        tb_model_free(&m);
    }
    cJSON_Delete(exp);
}

int main(void)
{
    check_model("llama-gqa");
    check_model("llama-tied");
    check_model("qwen2-bias");
    check_model("qwen3-moe"); /* Qwen3-MoE: routed experts, a dense layer (mlp_only_layers), QK-norm */
    return check_done();
}
