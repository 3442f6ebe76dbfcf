/* test_dgemma_golden.c — DiffusionGemma on the CPU against transformers
 * (tests/data/golden-dgemma, made on the GPU machine by
 * tools/make_dgemma_golden.py; the argument is that folder). Exits 77
 * (skipped) while it is absent.
 *
 * The engine loads model/ (the published layout) and:
 *   - the temperature schedule equals transformers' float32 values exactly;
 *   - the encoder pass over the prompt gives the golden final-norm output;
 *   - the canvas pass gives the golden logits: first step (no
 *     self-conditioning), with self-conditioning, and after a committed
 *     canvas (cache longer than the window: the sliding rectangle);
 *   - generate() with the golden seed (the shared noise stream) takes the
 *     golden steps one by one: the canvas read, sampled, argmax, accept
 *     mask, next canvas, the stop; and commits the golden output. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "dgemma_cpu.h"
#include "dgemma_forward.h"
#include "dgemma_model.h"
#include "dgemma_sampler.h"
#include "strmem.h"

#define LOGIT_TOL 1e-4
#define HIDDEN_TOL 1e-4

static cJSON *exp_root;

static float *floats(const char *key, size_t want)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(exp_root, key);
    if (!cJSON_IsArray(a) || (size_t)cJSON_GetArraySize(a) != want) {
        fprintf(stderr, "expected.json: %s: want %zu numbers\n", key, want);
        exit(1);
    }
    float *f = malloc(want * sizeof *f);
    size_t i = 0;
    for (const cJSON *x = a->child; x; x = x->next)
        f[i++] = (float)x->valuedouble;
    return f;
}

static int ints(const cJSON *a, int32_t *out, int max)
{
    int n = 0;
    for (const cJSON *x = cJSON_IsArray(a) ? a->child : NULL; x && n < max; x = x->next)
        out[n++] = (int32_t)x->valuedouble;
    return n;
}

static double max_diff(const float *a, const float *b, size_t n)
{
    double d = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]);
        d = isnan(e) ? INFINITY : e > d ? e : d;
    }
    return d;
}

/* generate()'s steps against the golden ones */
typedef struct follow {
    const cJSON *steps; /* the run's array */
    const cJSON *cur;
    int C, n, bad;
    const char *run;
} follow;

static int same_ids(const cJSON *a, const int32_t *b, int C)
{
    int32_t g[1024];
    return ints(a, g, 1024) == C && memcmp(g, b, (size_t)C * sizeof *b) == 0;
}

static void on_step(void *ctx, const tb_dg_step *s)
{
    follow *f = ctx;
    const cJSON *g = f->cur;
    f->n++;
    if (!g) {
        if (f->bad++ < 3)
            fprintf(stderr, "run %s: step %d beyond the golden %d\n", f->run, f->n - 1, cJSON_GetArraySize(f->steps));
        return;
    }
    f->cur = g->next;
    int32_t acc[1024];
    for (int i = 0; i < f->C; i++)
        acc[i] = s->accept[i];
    struct {
        const char *key;
        const int32_t *ours;
    } fields[] = {{"input", s->input}, {"sampled", s->sampled}, {"argmax", s->argmax}, {"accept", acc}, {"next", s->next}};
    for (size_t k = 0; k < sizeof fields / sizeof fields[0]; k++)
        if (!same_ids(cJSON_GetObjectItemCaseSensitive(g, fields[k].key), fields[k].ours, f->C) && f->bad++ < 5)
            fprintf(stderr, "run %s: step %d (canvas %d, remaining %d): %s differs\n", f->run, f->n - 1, s->canvas,
                    s->remaining, fields[k].key);
    const cJSON *rem = cJSON_GetObjectItemCaseSensitive(g, "remaining");
    const cJSON *stop = cJSON_GetObjectItemCaseSensitive(g, "stop");
    if ((!cJSON_IsNumber(rem) || rem->valueint != s->remaining || !cJSON_IsNumber(stop) ||
         stop->valueint != s->stop) &&
        f->bad++ < 5)
        fprintf(stderr, "run %s: step %d: remaining/stop differ\n", f->run, f->n - 1);
}

static double num(const cJSON *o, const char *k, double dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return 77;
    char path[4096];
    snprintf(path, sizeof path, "%s/expected.json", argv[1]);
    size_t len;
    char *text = tb_read_file_max(path, (size_t)64 << 20, &len);
    if (!text) {
        fprintf(stderr, "%s absent: run tools/make_dgemma_golden.py on the GPU machine\n", path);
        return 77;
    }
    exp_root = cJSON_Parse(text);
    free(text);
    if (!exp_root) {
        fprintf(stderr, "%s: not JSON\n", path);
        return 1;
    }
    snprintf(path, sizeof path, "%s/model", argv[1]);
    tb_dgemma_model m;
    char err[512];
    if (tb_dgemma_load(path, &m, err, sizeof err)) {
        fprintf(stderr, "load: %s\n", err);
        return 1;
    }
    const tb_dgemma_config *c = &m.cfg;
    int C = c->canvas, V = c->vocab, H = c->hidden;
    int32_t prompt[4096], canvas0[1024], committed[1024], canvas1[1024];
    int P = ints(cJSON_GetObjectItemCaseSensitive(exp_root, "prompt"), prompt, 4096);
    CHECK(ints(cJSON_GetObjectItemCaseSensitive(exp_root, "canvas0"), canvas0, 1024) == C);
    CHECK(ints(cJSON_GetObjectItemCaseSensitive(exp_root, "committed"), committed, 1024) == C);
    CHECK(ints(cJSON_GetObjectItemCaseSensitive(exp_root, "canvas1"), canvas1, 1024) == C);

    /* the schedule, exactly */
    tb_dg_params p;
    tb_dg_params_default(&p);
    float *temps = floats("temperatures", 48);
    for (int s = 48; s >= 1; s--)
        CHECK(tb_dg_temperature(&p, s) == temps[48 - s]);
    free(temps);

    tb_dgemma_state st;
    CHECK(tb_dgemma_state_init(&st, &m, 4 * P + 8 * C, C, err, sizeof err) == 0);
    float *hid = malloc((size_t)P * H * sizeof *hid), *lg = malloc((size_t)C * V * sizeof *lg);
    float *want = floats("encoder_hidden", (size_t)P * H);
    CHECK(tb_dgemma_encode(&st, prompt, P, hid) == 0);
    double d = max_diff(hid, want, (size_t)P * H);
    fprintf(stderr, "encoder hidden: max diff %.3g\n", d);
    CHECK(d < HIDDEN_TOL);
    free(want);

    struct {
        const char *name, *sc, *logits;
        const int32_t *canvas;
    } pass[] = {{"first step", NULL, "logits0", canvas0},
                {"self-conditioned", "sc0", "logits_sc0", canvas0},
                {"after a committed canvas", "sc1", "logits1", canvas1}};
    for (int k = 0; k < 3; k++) {
        if (k == 2)
            CHECK(tb_dgemma_encode(&st, committed, C, NULL) == 0);
        float *sc = pass[k].sc ? floats(pass[k].sc, (size_t)C * V) : NULL;
        want = floats(pass[k].logits, (size_t)C * V);
        CHECK(tb_dgemma_denoise(&st, pass[k].canvas, C, sc, lg) == 0);
        d = max_diff(lg, want, (size_t)C * V);
        fprintf(stderr, "canvas pass, %s: max diff %.3g\n", pass[k].name, d);
        CHECK(d < LOGIT_TOL);
        free(sc), free(want);
    }

    const cJSON *runs = cJSON_GetObjectItemCaseSensitive(exp_root, "runs");
    CHECK(cJSON_GetArraySize(runs) >= 3);
    for (const cJSON *r = cJSON_IsArray(runs) ? runs->child : NULL; r; r = r->next) {
        const cJSON *pr = cJSON_GetObjectItemCaseSensitive(r, "params");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(r, "name");
        tb_dg_params q;
        tb_dg_params_default(&q);
        q.max_steps = (int)num(pr, "max_denoising_steps", 48);
        q.t_min = num(pr, "t_min", 0.4), q.t_max = num(pr, "t_max", 0.8);
        q.stability = (int)num(pr, "stability_threshold", 1);
        q.confidence = num(pr, "confidence_threshold", 0.005);
        q.max_new_tokens = (int)num(r, "max_new_tokens", C);
        int32_t eos[8], out[4096], gold[4096];
        q.n_eos = ints(cJSON_GetObjectItemCaseSensitive(r, "eos"), eos, 8);
        q.eos_ids = eos;
        int n_gold = ints(cJSON_GetObjectItemCaseSensitive(r, "output"), gold, 4096);
        follow f = {cJSON_GetObjectItemCaseSensitive(r, "steps"), NULL, C, 0, 0, name ? name->valuestring : "?"};
        f.cur = f.steps ? f.steps->child : NULL;
        tb_dg_hooks h = {.ctx = &f, .on_step = on_step};
        tb_dgemma_reset(&st);
        tb_dg_engine e = tb_dg_cpu_engine(&st);
        int n_out = 0;
        tb_dg_stats stats;
        char why[256];
        int rc = tb_dg_generate(&e, &q, prompt, P, (uint64_t)num(r, "seed", 0), NULL, &h, out, &n_out, &stats, why,
                                sizeof why);
        CHECK(rc == 0);
        CHECK(f.bad == 0);
        CHECK(f.n == cJSON_GetArraySize(f.steps));
        CHECK(n_out == n_gold && memcmp(out, gold, (size_t)n_out * sizeof *out) == 0);
        double tpf = num(r, "tokens_per_forward", -1);
        if (tpf >= 0)
            CHECK_NEAR((double)stats.committed / stats.steps, tpf, 1e-5);
        fprintf(stderr, "run %s: %d steps, %d canvases, %s\n", f.run, f.n, stats.canvases,
                f.bad ? "DIFFERS" : "as transformers");
    }
    free(hid), free(lg);
    tb_dgemma_state_free(&st);
    tb_dgemma_free(&m);
    cJSON_Delete(exp_root);
    return check_done();
}
