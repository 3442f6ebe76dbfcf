/* test_tp_split.c — tensor parallelism's split (plugins/engine/cpu/tp_split.h) on
 * the CPU, for the tiny presets of three families (Llama with GQA, Qwen3
 * with QK-norm, Qwen2 with QKV bias and one kv head) at tp 2 and 4:
 *   - the ranks' weights reassemble to the originals, bit for bit (q heads,
 *     kv heads, with the ranks that share one when tp exceeds them, biases,
 *     o_proj columns, gate, up, down columns, the vocabulary's rows);
 *   - tp ranks, one thread each with its own shard and KV cache, all-reduce
 *     summing the row-parallel partials (in rank order, one rank computing
 *     at a time: the threads only take turns): the gathered logits equal
 *     tp = 1's within float32 rounding, on a causal prefill of two
 *     sequences, three decode steps after it, and a bidirectional forward;
 *     and the greedy tokens are the same wherever tp = 1's margin is clear;
 *   - the refusals: a head count tp does not divide, kv heads neither
 *     dividing nor divided by tp, a MoE model, a rank out of range. */
#define _GNU_SOURCE /* pthread_barrier_t */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_common.h"
#include "check.h"
#include "cpu_forward.h"
#include "model.h"
#include "tp_split.h"

enum { MAX_TP = 4, NSEQ = 2, PREFILL = 5, DECODE = 3, BIDIR = 7 };
static const int32_t prefill_tokens[NSEQ * PREFILL] = {3, 17, 99, 250, 7, 11, 400, 23, 5, 301};
static const int32_t decode_tokens[DECODE][NSEQ] = {{42, 8}, {313, 77}, {6, 480}};
static const int32_t bidir_tokens[BIDIR] = {9, 120, 33, 500, 2, 71, 64};

/* every logit of the script, in order: prefill (all rows), decode steps
 * (last row of each sequence), the bidirectional forward (all rows) */
#define SCRIPT_ROWS (NSEQ * PREFILL + DECODE * NSEQ + BIDIR)

/* Runs the script on st, logits [SCRIPT_ROWS][width]. */
static int run_script(tb_cpu_state *st, int width, float *logits)
{
    tb_cpu_state_reset(st);
    if (tb_cpu_forward(st, prefill_tokens, NSEQ, PREFILL, 1, 1, logits) != 0)
        return -1;
    float *at = logits + (size_t)NSEQ * PREFILL * width;
    for (int d = 0; d < DECODE; d++, at += (size_t)NSEQ * width)
        if (tb_cpu_forward(st, decode_tokens[d], NSEQ, 1, 1, 0, at) != 0)
            return -1;
    tb_cpu_state_reset(st);
    return tb_cpu_forward(st, bidir_tokens, 1, BIDIR, 0, 1, at);
}

typedef struct comm {
    int tp;
    pthread_barrier_t bar;
    pthread_mutex_t turn; /* held by the rank computing: one at a time */
    float *parts[MAX_TP];
} comm;

typedef struct rank_job {
    comm *cm;
    int rank;
    tb_cpu_state st;
    float *sum;     /* scratch: the all-reduce's result */
    float *logits;  /* [SCRIPT_ROWS][its vocabulary slice] */
    int width, rc;
} rank_job;

static void allreduce(void *ctx, float *buf, size_t n)
{
    rank_job *j = ctx;
    comm *cm = j->cm;
    cm->parts[j->rank] = buf;
    pthread_mutex_unlock(&cm->turn);
    pthread_barrier_wait(&cm->bar); /* every partial in place */
    for (size_t i = 0; i < n; i++) {
        float s = 0;
        for (int r = 0; r < cm->tp; r++)
            s += cm->parts[r][i];
        j->sum[i] = s;
    }
    pthread_barrier_wait(&cm->bar); /* every rank has read every partial */
    memcpy(buf, j->sum, n * sizeof(float));
    pthread_mutex_lock(&cm->turn);
}

static void *rank_main(void *arg)
{
    rank_job *j = arg;
    pthread_mutex_lock(&j->cm->turn);
    j->rc = run_script(&j->st, j->width, j->logits);
    pthread_mutex_unlock(&j->cm->turn);
    return NULL;
}

static double max_abs(const float *x, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fabs(x[i]) > m ? fabs(x[i]) : m;
    return m;
}

/* The ranks' slices put back together equal full's tensors. */
static void check_reassembly(const tb_model *full, const tb_model *sh, const tb_tp_split *s, int tp)
{
    const tb_model_config *c = &full->cfg;
    size_t h = c->hidden_size, hd = c->head_dim, fq = (size_t)c->n_heads * hd, fkv = (size_t)c->n_kv_heads * hd;
    size_t inter = c->intermediate_size;
    int same = 1, cover_q = 0, cover_i = 0, cover_v = 0;
    char kv_seen[64] = {0};
    for (int r = 0; r < tp; r++) {
        const tb_tp_split *p = &s[r];
        const tb_model *m = &sh[r];
        size_t nq = (size_t)p->n_q_heads * hd, nkv = (size_t)p->n_kv_heads * hd, ni = p->n_inter;
        cover_q += p->n_q_heads;
        cover_i += p->n_inter;
        cover_v += p->n_vocab;
        for (int k = 0; k < p->n_kv_heads; k++)
            kv_seen[p->kv_head0 + k] = 1;
        /* every q head a rank holds reads a kv head it holds */
        int group = c->n_heads / c->n_kv_heads;
        CHECK(p->q_head0 / group >= p->kv_head0 &&
              (p->q_head0 + p->n_q_heads - 1) / group < p->kv_head0 + p->n_kv_heads);
        same &= memcmp(m->lm_head, full->lm_head + (size_t)p->vocab0 * h, (size_t)p->n_vocab * h * 4) == 0;
        same &= memcmp(m->embed, full->embed, (size_t)c->vocab_size * h * 4) == 0;
        for (int l = 0; l < c->n_layers; l++) {
            const tb_layer *F = &full->layers[l], *L = &m->layers[l];
            const float *fw = F->wqkv;
            same &= memcmp(L->wqkv, fw + (size_t)p->q_head0 * hd * h, nq * h * 4) == 0;
            same &= memcmp(L->wqkv + nq * h, fw + (fq + (size_t)p->kv_head0 * hd) * h, nkv * h * 4) == 0;
            same &= memcmp(L->wqkv + (nq + nkv) * h, fw + (fq + fkv + (size_t)p->kv_head0 * hd) * h, nkv * h * 4) ==
                    0;
            if (c->qkv_bias) {
                same &= memcmp(L->bqkv, F->bqkv + (size_t)p->q_head0 * hd, nq * 4) == 0;
                same &= memcmp(L->bqkv + nq, F->bqkv + fq + (size_t)p->kv_head0 * hd, nkv * 4) == 0;
                same &= memcmp(L->bqkv + nq + nkv, F->bqkv + fq + fkv + (size_t)p->kv_head0 * hd, nkv * 4) == 0;
            }
            for (size_t i = 0; i < h; i++) {
                same &= memcmp(L->wo + i * nq, F->wo + i * fq + (size_t)p->q_head0 * hd, nq * 4) == 0;
                same &= memcmp(L->w_down + i * ni, F->w_down + i * inter + p->inter0, ni * 4) == 0;
            }
            same &= memcmp(L->w_gate_up, F->w_gate_up + (size_t)p->inter0 * h, ni * h * 4) == 0;
            same &= memcmp(L->w_gate_up + ni * h, F->w_gate_up + (inter + p->inter0) * h, ni * h * 4) == 0;
        }
    }
    int all_kv = 1;
    for (int k = 0; k < c->n_kv_heads; k++)
        all_kv &= kv_seen[k];
    CHECK(same);
    CHECK(cover_q == c->n_heads && cover_i == c->intermediate_size && cover_v == c->vocab_size && all_kv);
}

static void check_preset(const char *name, int tp, const float *ref)
{
    char err[256];
    tb_model full;
    if (tb_model_preset(name, 7, &full, err, sizeof err) != 0) {
        fprintf(stderr, "%s: %s\n", name, err);
        CHECK(0);
        return;
    }
    int V = full.cfg.vocab_size;
    tb_tp_split s[MAX_TP];
    tb_model sh[MAX_TP];
    comm cm = {.tp = tp};
    pthread_barrier_init(&cm.bar, NULL, (unsigned)tp);
    pthread_mutex_init(&cm.turn, NULL);
    rank_job job[MAX_TP];
    pthread_t th[MAX_TP];
    int ok = 1;
    for (int r = 0; r < tp; r++) {
        ok &= tb_tp_split_plan(&full.cfg, tp, r, &s[r], err, sizeof err) == 0;
        ok &= ok && tb_tp_split_model(&full, &s[r], &sh[r], err, sizeof err) == 0;
        if (!ok) {
            fprintf(stderr, "%s tp %d rank %d: %s\n", name, tp, r, err);
            CHECK(0);
            return;
        }
    }
    check_reassembly(&full, sh, s, tp);
    for (int r = 0; r < tp; r++) {
        job[r] = (rank_job){.cm = &cm, .rank = r, .width = s[r].n_vocab};
        CHECK(tb_cpu_state_init(&job[r].st, &sh[r], NSEQ, 16, 16, 1, err, sizeof err) == 0);
        job[r].st.allreduce = allreduce;
        job[r].st.allreduce_ctx = &job[r];
        job[r].sum = malloc(16 * (size_t)full.cfg.hidden_size * sizeof(float));
        job[r].logits = malloc((size_t)SCRIPT_ROWS * s[r].n_vocab * sizeof(float));
    }
    for (int r = 0; r < tp; r++)
        pthread_create(&th[r], NULL, rank_main, &job[r]);
    for (int r = 0; r < tp; r++)
        pthread_join(th[r], NULL);
    float *got = malloc((size_t)SCRIPT_ROWS * V * sizeof(float));
    for (int r = 0; r < tp; r++) {
        CHECK(job[r].rc == 0);
        for (int row = 0; row < SCRIPT_ROWS; row++)
            memcpy(got + (size_t)row * V + s[r].vocab0, job[r].logits + (size_t)row * s[r].n_vocab,
                   (size_t)s[r].n_vocab * sizeof(float));
    }
    double ref_max = max_abs(ref, (size_t)SCRIPT_ROWS * V), diff = 0;
    for (size_t i = 0; i < (size_t)SCRIPT_ROWS * V; i++)
        diff = fabs(got[i] - ref[i]) > diff ? fabs(got[i] - ref[i]) : diff;
    /* the greedy token of every row whose tp = 1 margin is clear */
    int clear = 0, same = 0;
    for (int row = 0; row < SCRIPT_ROWS; row++) {
        const float *a = ref + (size_t)row * V, *b = got + (size_t)row * V;
        int best = 0, second = -1, gbest = 0;
        for (int v = 1; v < V; v++) {
            if (a[v] > a[best]) {
                second = best;
                best = v;
            } else if (second < 0 || a[v] > a[second]) {
                second = v;
            }
            gbest = b[v] > b[gbest] ? v : gbest;
        }
        if (a[best] - a[second] > 1e-3 * (ref_max > 1 ? ref_max : 1)) {
            clear++;
            same += gbest == best;
        }
    }
    fprintf(stderr, "%s tp %d: logits max diff %.3g (max |logit| %.2f) over %d rows; greedy %d of %d clear rows\n",
            name, tp, diff, ref_max, SCRIPT_ROWS, same, clear);
    CHECK(diff <= 1e-4 * (ref_max > 1 ? ref_max : 1));
    CHECK(clear >= SCRIPT_ROWS / 2 && same == clear);
    free(got);
    for (int r = 0; r < tp; r++) {
        tb_cpu_state_free(&job[r].st);
        free(job[r].sum);
        free(job[r].logits);
        tb_model_free(&sh[r]);
    }
    pthread_barrier_destroy(&cm.bar);
    pthread_mutex_destroy(&cm.turn);
    tb_model_free(&full);
}

static void refused(const char *name, int tp, int rank, const char *want)
{
    tb_model_config cfg;
    char err[256] = "";
    tb_tp_split s;
    CHECK(tb_preset_config(name, &cfg, err, sizeof err) == 0);
    int rc = tb_tp_split_plan(&cfg, tp, rank, &s, err, sizeof err);
    fprintf(stderr, "%s tp %d rank %d: %s\n", name, tp, rank, rc ? err : "(accepted)");
    CHECK(rc != 0 && strstr(err, want) != NULL);
}

int main(void)
{
    const char *presets[] = {"tiny-llama", "tiny-qwen3", "tiny-qwen2"};
    for (int i = 0; i < 3; i++) {
        char err[256];
        tb_model full;
        if (tb_model_preset(presets[i], 7, &full, err, sizeof err) != 0) {
            fprintf(stderr, "%s: %s\n", presets[i], err);
            CHECK(0);
            continue;
        }
        tb_cpu_state st;
        float *ref = malloc((size_t)SCRIPT_ROWS * full.cfg.vocab_size * sizeof(float));
        CHECK(tb_cpu_state_init(&st, &full, NSEQ, 16, 16, 1, err, sizeof err) == 0);
        CHECK(run_script(&st, full.cfg.vocab_size, ref) == 0);
        tb_cpu_state_free(&st);
        tb_model_free(&full);
        for (int tp = 2; tp <= MAX_TP; tp *= 2)
            check_preset(presets[i], tp, ref);
        free(ref);
    }
    refused("tiny-llama", 3, 0, "num_attention_heads");
    refused("qwen2.5-7b", 7, 0, "neither divides"); /* 28 heads, 4 kv heads */
    refused("tiny-qwen3-moe", 2, 0, "mixture-of-experts");
    refused("tiny-llama", 2, 2, "rank 2 of tp 2");
    refused("tiny-llama", 0, 0, "tp 0");
    /* the 70B preset (Llama-3.1-70B's shape, its published 70.55 G
     * parameters) splits at tp 2, 4 and 8 */
    {
        char err[256];
        tb_model_config c70;
        tb_tp_split s70;
        CHECK(tb_preset_config("llama-3-70b", &c70, err, sizeof err) == 0);
        CHECK(tb_config_n_params(&c70) == 70553706496LL);
        for (int tp = 2; tp <= 8; tp *= 2)
            CHECK(tb_tp_split_plan(&c70, tp, tp - 1, &s70, err, sizeof err) == 0 && s70.n_kv_heads == 8 / tp);
    }
    /* the backends' `tp` option is for device = cuda (tb_load) */
    {
        char err[256] = "";
        tb_loaded ld;
        CHECK(tb_load("preset:tiny-llama", 0, 0, 0, 1, 2, &ld, err, sizeof err) == TB_ERR_UNSUPPORTED);
        fprintf(stderr, "tp 2 on the CPU: %s\n", err);
        CHECK(strstr(err, "device = cuda") != NULL);
        /* ... and not with dtype = fp8 (the ranks hold bf16 shards), refused before any device is touched */
        CHECK(tb_load("preset:tiny-llama", 0, 1, 1, 1, 1, &ld, err, sizeof err) == TB_ERR_UNSUPPORTED);
        fprintf(stderr, "tp 1 with fp8: %s\n", err);
        CHECK(strstr(err, "fp8") != NULL);
        CHECK(tb_load("preset:tiny-llama", 0, 0, 0, 1, 0, &ld, err, sizeof err) == TB_OK);
        tb_loaded_free(&ld);
    }
    return check_done();
}
