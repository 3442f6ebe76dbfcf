/* test_spec_dflash.c — the DFlash drafter inside the ar backend's
 * speculative loop (plugins/ar/draft_dflash.c) on the CPU, one thread:
 *
 *   - lossless: models/small-llama drafted by the trained
 *     models/small-llama-dflash gives exactly small-llama's greedy output
 *     (plain ar), batch 1 and a ragged batch of 4, draft_len 3, 7, 15 (and
 *     0: the drafter's block_size - 1 = 15); the counts exact;
 *   - forced_acceptance: exactly min(a, k) accepted per verification;
 *   - acceptance: on suites/data/tasks.jsonl (160 prompts, 16 new tokens,
 *     stop at EOS, temperature 0) the loop's counts equal what
 *     tools/spec_eval.py measured in Python (models/small-llama-dflash/
 *     TRAINING.md's table, k = 3, 7, 15): verifications within VER_TOL,
 *     acceptance length, rate and per-position acceptance within the
 *     table's rounding plus ACC_TOL;
 *   - sampled: the rejection rule's output with the dflash drafter is
 *     distributed as small-llama's own sampling (spec_check.h's
 *     chi-square over three tokens, fixed seeds);
 *   - refusals: a drafter whose hidden size, vocabulary, num_target_layers
 *     or target_layer_ids do not fit the target, naming the file and key;
 *     draft_len past the block; an AR model as a DFlash drafter; the
 *     preset pair tiny-llama / tiny-dflash under forced acceptance; the
 *     8B presets' configs fit their targets';
 *   - with GOLDEN_DIR (tests/data/golden-dflash, made on the GPU machine by
 *     tools/make_dflash_golden.py): its target drafted by its drafter in
 *     the loop (spec.c's ar_spec_generate) proposes exactly the golden
 *     steps' drafts at the golden anchors and outputs the golden tokens;
 *     77 (skipped) while the folder is absent.
 *
 *   test_spec_dflash MODELS_DIR TASKS_JSONL [GOLDEN_DIR]
 *
 * Built with plugins/ar's sources linked in. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tokbench/backend.h>

#include "backend_common.h"
#include "check.h"
#include "engine.h"
#include "plugin_host.h"
#include "sampling.h"
#include "spec.h"
#include "spec_check.h"
#include "model.h"
#include "dflash.h"
#include "util.h"

/* verifications may differ from Python's by this many (float32 argmax
 * near-ties between tokbench's and PyTorch's forwards could flip one; none
 * does), the rates by this much past the table's rounding */
#define VER_TOL 0
#define ACC_TOL 0.0

static char target[1024], dflash[1024];

static const char *ragged[4] = {"93+45=", "sort 9 7 3 1 =", "copy vmoa =", "f=3 a=5 y=1 o=7 d=3 ; d?"};

static void test_lossless(void)
{
    char err[512] = "";
    test_option plain_set[] = {{"device", "cpu"}, {"threads", "1"}, {"ignore_eos", "true"}};
    test_option spec_set[] = {{"device", "cpu"}, {"threads", "1"}, {"drafter", "dflash"}, {"draft_model", dflash}};
    void *plain = open_ctx(target, plain_set, NSET(plain_set), err, sizeof err, NULL);
    void *spec = open_ctx(target, spec_set, NSET(spec_set), err, sizeof err, NULL);
    if (!plain || !spec) {
        fprintf(stderr, "create: %s\n", err);
        CHECK(0);
        return;
    }
    const uint32_t N = 40;
    static run want1[4], want4, got;
    for (uint32_t r = 0; r < 4; r++)
        generate(plain, &ragged[r], 1, N, 1, plain_set, NSET(plain_set), &want1[r]);
    generate(plain, ragged, 4, N, 1, plain_set, NSET(plain_set), &want4);
    for (uint32_t r = 0; r < 4; r++)
        CHECK(want1[r].n_out[0] == N && memcmp(want1[r].ids[0], want4.ids[r], N * sizeof(int32_t)) == 0);
    const char *ks[] = {"3", "7", "15", "0"};
    uint64_t acc = 0, drafted = 0;
    for (size_t i = 0; i < NSET(ks); i++) {
        test_option s[] = {{"device", "cpu"},     {"threads", "1"},     {"drafter", "dflash"},
                           {"draft_model", dflash}, {"draft_len", ks[i]}, {"ignore_eos", "true"}};
        int k = i == 3 ? 15 : atoi(ks[i]);
        for (uint32_t r = 0; r < 4; r++) {
            generate(spec, &ragged[r], 1, N, 1, s, NSET(s), &got);
            CHECK(got.st == TB_OK);
            if (got.st != TB_OK)
                fprintf(stderr, "generate: %s\n", got.error);
            CHECK(same_ids(&got, &want1[r], 1, "dflash, batch 1"));
            check_counts(&got, 0, k, 0);
            CHECK(got.forwards == 1 + (int64_t)got.spec[0].verifications);
        }
        generate(spec, ragged, 4, N, 1, s, NSET(s), &got);
        CHECK(got.st == TB_OK);
        if (got.st != TB_OK)
            fprintf(stderr, "generate: %s\n", got.error);
        CHECK(same_ids(&got, &want4, 4, "dflash, batch 4"));
        uint32_t most = 0;
        for (uint32_t r = 0; r < 4; r++) {
            check_counts(&got, r, k, 0);
            most = got.spec[r].verifications > most ? got.spec[r].verifications : most;
            acc += got.spec[r].accepted;
            drafted += got.spec[r].drafted;
        }
        /* one prefill per distinct prompt length */
        CHECK(got.forwards >= 1 + (int64_t)most && got.forwards <= 4 + (int64_t)most);
        CHECK(got.draft_ns > 0);
    }
    fprintf(stderr, "dflash %s for %s: %llu of %llu drafts accepted over k = 3, 7, 15, 15 (batch 4)\n", dflash,
            target, (unsigned long long)acc, (unsigned long long)drafted);
    CHECK(acc > 0 && acc < drafted); /* some accepted, some not: both paths of the cache */

    /* forced acceptance: exactly min(a, k) a verification, whatever the target says */
    const char *forced[][2] = {{"2", "3"}, {"9", "7"}, {"15", "15"}};
    for (size_t i = 0; i < NSET(forced); i++) {
        test_option f[] = {{"device", "cpu"},        {"threads", "1"},    {"drafter", "dflash"},
                           {"draft_model", dflash},  {"draft_len", forced[i][1]}, {"forced_acceptance", forced[i][0]},
                           {"ignore_eos", "true"}};
        void *fc = open_ctx(target, f, NSET(f), err, sizeof err, NULL);
        CHECK(fc != NULL);
        if (!fc)
            continue;
        int a = atoi(forced[i][0]), k = atoi(forced[i][1]), m = a < k ? a : k;
        generate(fc, ragged, 4, N, 1, f, NSET(f), &got);
        CHECK(got.st == TB_OK);
        for (uint32_t r = 0; r < 4; r++) {
            check_counts(&got, r, k, 0);
            CHECK(got.spec[r].accepted == (uint32_t)m * got.spec[r].verifications);
            CHECK(got.spec[r].verifications == (N - 1 + (uint32_t)m) / ((uint32_t)m + 1));
        }
        tokbench_backend_entry()->destroy(fc);
    }
    tokbench_backend_entry()->destroy(plain);
    tokbench_backend_entry()->destroy(spec);
}

/* ---- acceptance against tools/spec_eval.py's table */

typedef struct table_row {
    int k, verifications;
    double length, rate, pos[15];
} table_row;

/* models/small-llama-dflash/TRAINING.md's "tasks (160)" row at k (the
 * training run writes it: one owner of the figures): 0, or -1 when the
 * row is absent or malformed. */
static int table_row_of(int k, table_row *row)
{
    char path[1100];
    snprintf(path, sizeof path, "%s/TRAINING.md", dflash);
    char *text = tb_read_file(path, NULL);
    if (!text)
        return -1;
    char head[64];
    snprintf(head, sizeof head, "| %d | tasks (160) | ", k);
    const char *at = strstr(text, head);
    int rc = -1;
    if (at) {
        double rate_pct, fwd;
        int used = 0;
        memset(row, 0, sizeof *row);
        row->k = k;
        if (sscanf(at + strlen(head), "%d | %lf | %lf%% | %lf |%n", &row->verifications, &row->length, &rate_pct,
                   &fwd, &used) == 4 && used > 0) {
            row->rate = rate_pct / 100;
            const char *p = at + strlen(head) + used;
            int j = 0, n = 0;
            while (j < k && j < 15 && sscanf(p, "%lf%n", &row->pos[j], &n) == 1)
                p += n, j++;
            rc = j == k ? 0 : -1;
        }
    }
    free(text);
    return rc;
}

static int read_prompts(const char *path, char **out, int max)
{
    char *text = tb_read_file(path, NULL);
    if (!text)
        return -1;
    int n = 0;
    for (char *line = strtok(text, "\n"); line && n < max; line = strtok(NULL, "\n")) {
        cJSON *o = cJSON_Parse(line);
        const cJSON *p = o ? cJSON_GetObjectItem(o, "prompt") : NULL;
        if (cJSON_IsString(p))
            out[n++] = strdup(p->valuestring);
        cJSON_Delete(o);
    }
    free(text);
    return n;
}

static void test_acceptance(const char *tasks_path)
{
    static char *prompts[200];
    int n = read_prompts(tasks_path, prompts, 200);
    CHECK(n == 160);
    if (n <= 0)
        return;
    char err[512] = "";
    test_option set[] = {{"device", "cpu"}, {"threads", "1"}, {"drafter", "dflash"}, {"draft_model", dflash}};
    void *ctx = open_ctx(target, set, NSET(set), err, sizeof err, NULL);
    CHECK(ctx != NULL);
    if (!ctx) {
        fprintf(stderr, "create: %s\n", err);
        return;
    }
    static run got;
    const int ks[] = {3, 7, 15};
    table_row py[3];
    for (size_t t = 0; t < 3; t++) {
        int have = table_row_of(ks[t], &py[t]) == 0;
        if (!have)
            fprintf(stderr, "%s/TRAINING.md: no well-formed \"| %d | tasks (160) |\" row\n", dflash, ks[t]);
        CHECK(have);
        if (!have)
            return;
    }
    for (size_t t = 0; t < 3; t++) {
        char kk[8];
        snprintf(kk, sizeof kk, "%d", py[t].k);
        test_option s[] = {{"device", "cpu"},  {"threads", "1"}, {"drafter", "dflash"}, {"draft_model", dflash},
                           {"draft_len", kk}, {"ignore_eos", "false"}};
        uint64_t ver = 0, acc = 0, at[TB_SPEC_MAX_DRAFT] = {0};
        for (int i = 0; i < n; i += MAX_R) {
            uint32_t R = (uint32_t)(n - i < MAX_R ? n - i : MAX_R);
            generate(ctx, (const char *const *)prompts + i, R, 16, 1, s, NSET(s), &got);
            CHECK(got.st == TB_OK);
            for (uint32_t r = 0; r < R; r++) {
                ver += got.spec[r].verifications;
                acc += got.spec[r].accepted;
                for (int j = 0; j < py[t].k; j++)
                    at[j] += got.spec[r].accepted_at[j];
            }
        }
        double len = ver ? (double)(acc + ver) / (double)ver : 0, rate = ver ? (double)acc / (py[t].k * ver) : 0;
        fprintf(stderr, "k = %d: %llu verifications (Python %d), acceptance length %.4f (%.2f), rate %.4f (%.3f); "
                "per position:", py[t].k, (unsigned long long)ver, py[t].verifications, len, py[t].length, rate,
                py[t].rate);
        CHECK(llabs((long long)ver - py[t].verifications) <= VER_TOL);
        /* the table rounds to 2 decimals (length, positions) and 0.1% (rate) */
        CHECK(fabs(len - py[t].length) <= 0.005 + ACC_TOL);
        CHECK(fabs(rate - py[t].rate) <= 0.0005 + ACC_TOL);
        for (int j = 0; j < py[t].k; j++) {
            double p = ver ? (double)at[j] / (double)ver : 0;
            fprintf(stderr, " %.3f/%.2f", p, py[t].pos[j]);
            CHECK(fabs(p - py[t].pos[j]) <= 0.005 + ACC_TOL);
        }
        fprintf(stderr, "\n");
    }
    tokbench_backend_entry()->destroy(ctx);
    for (int i = 0; i < n; i++)
        free(prompts[i]);
}

/* ---- refusals */

/* a copy of the trained drafter's folder with config.json's `key` set to
 * `json` (a JSON value), in dir */
static int edited_drafter(const char *dir, const char *key, const char *json)
{
    char path[2048];
    if (mkdir(dir, 0700) != 0)
        return -1;
    snprintf(path, sizeof path, "%s/config.json", dflash);
    char *text = tb_read_file(path, NULL);
    cJSON *o = text ? cJSON_Parse(text) : NULL;
    free(text);
    if (!o)
        return -1;
    cJSON *v = cJSON_Parse(json);
    cJSON *parent = o;
    const char *k = key;
    if (strncmp(key, "dflash_config.", 14) == 0) {
        parent = cJSON_GetObjectItem(o, "dflash_config");
        k = key + 14;
    }
    cJSON_ReplaceItemInObject(parent, k, v);
    char *out = cJSON_Print(o);
    cJSON_Delete(o);
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = out ? fopen(path, "w") : NULL;
    int rc = f && fputs(out, f) >= 0 ? 0 : -1;
    if (f && fclose(f) != 0)
        rc = -1;
    free(out);
    char src[2048], dst[2048];
    snprintf(src, sizeof src, "%s/model.safetensors", dflash);
    snprintf(dst, sizeof dst, "%s/model.safetensors", dir);
    unlink(dst);
    char *abs = realpath(src, NULL);
    if (rc == 0 && (!abs || symlink(abs, dst) != 0))
        rc = -1;
    free(abs);
    if (0)
        rc = -1;
    return rc;
}

/* The preset pair tiny-llama / tiny-dflash on the CPU, through spec.c's
 * loop (presets have no tokenizer: token-id prompts): random weights, so
 * forced acceptance (3 of 7), the counts exact. */
static void preset_pair(void)
{
    tb_loaded ld;
    tb_engine eng;
    ar_drafter dr = {0};
    char err[1024] = "";
    CHECK(tb_load("preset:tiny-llama", 0, 0, 0, 1, 0, &ld, err, sizeof err) == TB_OK);
    CHECK(tb_engine_open(&eng, &ld, 1) == 0);
    int rc = ar_drafter_open_dflash(&dr, "preset:tiny-dflash", &ld, &eng, 1, err, sizeof err);
    if (rc)
        fprintf(stderr, "open: %s\n", err);
    CHECK(rc == 0);
    if (rc == 0) {
        enum { R = 3, P = 5, N = 17 };
        int32_t prompt[R * P] = {0, 0, 7, 8, 9, 1, 2, 3, 4, 5, 0, 11, 12, 13, 14}, out[R * N];
        int pad[R] = {2, 0, 1};
        tb_request_result rr[R];
        tb_spec_counts sc[R];
        memset(rr, 0, sizeof rr);
        memset(sc, 0, sizeof sc);
        tb_result res = {.struct_size = sizeof res, .n_requests = R, .requests = rr, .spec = sc};
        ar_spec_call c = {.host = &test_host, .ld = &ld, .eng = &eng, .drafter = &dr, .R = R, .prompt = prompt,
                          .P = P, .pad = pad, .N = N, .k = 7, .forced = 3, .smp = {0, 0, 1}, .ignore_eos = 1,
                          .threads = 1, .seed = 1, .out = out};
        tb_status st = ar_spec_generate(&c, &res, err, sizeof err);
        if (st != TB_OK)
            fprintf(stderr, "generate: %s\n", err);
        CHECK(st == TB_OK);
        for (int r = 0; r < R; r++)
            CHECK(rr[r].n_output_tokens == N && sc[r].verifications == 4 && sc[r].accepted == 12);
        CHECK(res.forward_passes == 3 + 4); /* three prompt lengths, four verifications */
        ar_drafter_close(&dr);
    }
    tb_engine_close(&eng);
    tb_loaded_free(&ld);
}

static void test_refusals(const char *models)
{
    char err[1024] = "", dir[1024], tmp[] = "/tmp/tb_spec_dflash_XXXXXX";
    tb_status st;
    CHECK(mkdtemp(tmp) != NULL);
    struct {
        const char *key, *value, *says;
    } bad[] = {
        {"num_target_layers", "6", "num_target_layers"},
        {"dflash_config.target_layer_ids", "[0, 1, 4]", "target_layer_ids"},
        {"vocab_size", "2048", "vocab_size"},
    };
    for (size_t i = 0; i < NSET(bad); i++) {
        snprintf(dir, sizeof dir, "%s/d%zu", tmp, i);
        CHECK(edited_drafter(dir, bad[i].key, bad[i].value) == 0);
        test_option v[] = {{"device", "cpu"}, {"drafter", "dflash"}, {"draft_model", dir}};
        void *c = open_ctx(target, v, NSET(v), err, sizeof err, &st);
        CHECK(c == NULL && st != TB_OK);
        fprintf(stderr, "refused: %s\n", err);
        CHECK(strstr(err, bad[i].says) != NULL && strstr(err, "config.json") != NULL);
        if (c)
            tokbench_backend_entry()->destroy(c);
        char f[1200];
        snprintf(f, sizeof f, "%s/config.json", dir);
        unlink(f);
        snprintf(f, sizeof f, "%s/model.safetensors", dir);
        unlink(f);
        rmdir(dir);
    }
    rmdir(tmp);
    /* a drafter for another target: tiny-dflash drafts for tiny-llama (hidden 64) */
    test_option v1[] = {{"device", "cpu"}, {"drafter", "dflash"}, {"draft_model", "preset:tiny-dflash"}};
    CHECK(open_ctx(target, v1, NSET(v1), err, sizeof err, &st) == NULL && strstr(err, "hidden_size"));
    /* an AR model is not a DFlash drafter */
    char ar[1024];
    snprintf(ar, sizeof ar, "%s/small-llama-draft", models);
    test_option v2[] = {{"device", "cpu"}, {"drafter", "dflash"}, {"draft_model", ar}};
    CHECK(open_ctx(target, v2, NSET(v2), err, sizeof err, &st) == NULL && strstr(err, "draft_model = "));
    /* draft_len past the block (16: 15 drafts at most) */
    test_option v3[] = {{"device", "cpu"}, {"threads", "1"}, {"drafter", "dflash"}, {"draft_model", dflash}};
    void *c = open_ctx(target, v3, NSET(v3), err, sizeof err, &st);
    CHECK(c != NULL);
    if (c) {
        test_option s[] = {{"device", "cpu"}, {"threads", "1"}, {"drafter", "dflash"}, {"draft_model", dflash},
                           {"draft_len", "16"}};
        static run got;
        generate(c, ragged, 1, 4, 1, s, NSET(s), &got);
        CHECK(got.st != TB_OK && strstr(got.error, "draft_len 16"));
        tokbench_backend_entry()->destroy(c);
    }
    preset_pair();
    /* the 8B presets fit the 8B targets' configs */
    tb_model_config d, t;
    CHECK(tb_dflash_preset_config("dflash-qwen3-8b", &d, err, sizeof err) == 0);
    CHECK(tb_preset_config("qwen3-8b", &t, err, sizeof err) == 0);
    CHECK(tb_dflash_check_target(&d, &t, err, sizeof err) == 0 && d.block_size == 16);
    CHECK(tb_dflash_preset_config("dflash-llama-3-8b", &d, err, sizeof err) == 0);
    CHECK(tb_preset_config("llama-3-8b", &t, err, sizeof err) == 0);
    CHECK(tb_dflash_check_target(&d, &t, err, sizeof err) == 0 && d.block_size == 16);
    CHECK(tb_dflash_check_target(&d, &(tb_model_config){.hidden_size = 4096, .vocab_size = 151936, .n_layers = 36},
                                 err, sizeof err) != 0);
}

static void test_sampled(void)
{
    uint64_t acc, drafted;
    CHECK(sampled_case("cpu", target, 0, "dflash", dflash, "and the", &acc, &drafted));
    CHECK(acc > 100 && acc < drafted - 100); /* both paths of the rule, many times */
}

/* ---- the golden drafter in the loop */

typedef struct recorder {
    ar_drafter inner;
    int n;               /* proposals recorded */
    int start[64];       /* the anchor's position */
    int32_t draft[64][32];
    int k;
} recorder;

static recorder rec;

static int rec_propose(void *ctx, const int *slots, int B, const int32_t *const *seq, const int *n, int k,
                       const tb_sampling *smp, uint64_t *rng, int32_t *draft, float *q)
{
    (void)ctx;
    int rc = rec.inner.ops->propose(rec.inner.ctx, slots, B, seq, n, k, smp, rng, draft, q);
    if (rc == 0 && rec.n < 64 && B == 1) {
        rec.start[rec.n] = n[0] - 1;
        memcpy(rec.draft[rec.n], draft, (size_t)k * sizeof *draft);
        rec.n++;
    }
    return rc;
}

static int test_golden(const char *dir)
{
    char path[4096], err[1024] = "";
    snprintf(path, sizeof path, "%s/expected.json", dir);
    struct stat sb;
    if (stat(path, &sb) != 0) {
        fprintf(stderr, "skip: %s absent (make it with tools/make_dflash_golden.py on the GPU machine)\n", path);
        return 77;
    }
    char *text = tb_read_file(path, NULL);
    cJSON *all = text ? cJSON_Parse(text) : NULL;
    free(text);
    CHECK(all != NULL);
    if (!all)
        return check_done();
    const cJSON *tj = cJSON_GetObjectItem(all, "tokens");
    int T = cJSON_GetArraySize(tj), P = cJSON_GetObjectItem(all, "n_prompt")->valueint;
    int Lb = cJSON_GetObjectItem(all, "block_size")->valueint, k = Lb - 1;
    int32_t tok[512];
    CHECK(T <= 512 && P < T && k <= 32);
    for (int i = 0; i < T && i < 512; i++)
        tok[i] = cJSON_GetArrayItem(tj, i)->valueint;

    tb_loaded ld;
    snprintf(path, sizeof path, "%s/target", dir);
    CHECK(tb_load(path, 0, 0, 0, 0, 0, &ld, err, sizeof err) == TB_OK);
    tb_engine eng;
    CHECK(tb_engine_open(&eng, &ld, 1) == 0);
    snprintf(path, sizeof path, "%s/drafter", dir);
    int rc = ar_drafter_open_dflash(&rec.inner, path, &ld, &eng, 0, err, sizeof err);
    if (rc)
        fprintf(stderr, "open: %s\n", err);
    CHECK(rc == 0);
    if (rc) {
        cJSON_Delete(all);
        return check_done();
    }
    ar_drafter_ops ops = *rec.inner.ops;
    ops.propose = rec_propose;
    ar_drafter wrapped = {&ops, rec.inner.ctx};
    int32_t out[512];
    int pad = 0;
    tb_request_result rr = {0};
    tb_spec_counts sc = {0};
    tb_result res = {.struct_size = sizeof res, .n_requests = 1, .requests = &rr, .spec = &sc};
    ar_spec_call c = {.host = &test_host, .ld = &ld, .eng = &eng, .drafter = &wrapped, .R = 1, .prompt = tok,
                      .P = (size_t)P, .pad = &pad, .N = (uint32_t)(T - P), .k = k, .smp = {0, 0, 1},
                      .ignore_eos = 1, .threads = 1, .seed = 1, .out = out};
    tb_status st = ar_spec_generate(&c, &res, err, sizeof err);
    if (st != TB_OK)
        fprintf(stderr, "generate: %s\n", err);
    CHECK(st == TB_OK);
    /* the output is the golden sequence (upstream's loop is lossless too) */
    CHECK(memcmp(out, tok + P, (size_t)(T - P) * sizeof *out) == 0);
    /* each golden step: the loop's proposal at the same anchor position
     * drafts the same tokens (a draft depends on the context's features
     * and the anchor, not on how the appends were cut: the golden steps
     * advance 1, 3 and 5 positions, the loop as its verifications accept) */
    int i = 0;
    for (const cJSON *s = cJSON_GetObjectItem(all, "steps")->child; s; s = s->next, i++) {
        int start = cJSON_GetObjectItem(s, "start")->valueint, p = 0;
        const cJSON *d = cJSON_GetObjectItem(s, "draft");
        while (p < rec.n && rec.start[p] != start)
            p++;
        CHECK(p < rec.n);
        if (p >= rec.n)
            continue;
        int same = 1;
        for (int j = 0; j < k; j++)
            same &= rec.draft[p][j] == cJSON_GetArrayItem(d, j)->valueint;
        fprintf(stderr, "golden step at %d: the loop's draft %s\n", start, same ? "equal" : "differs");
        CHECK(same);
    }
    fprintf(stderr, "golden: %d steps, %d proposals in the loop, %u of %u drafts accepted\n", i, rec.n, sc.accepted,
            sc.drafted);
    CHECK(i >= 3);
    ar_drafter_close(&rec.inner);
    tb_engine_close(&eng);
    tb_loaded_free(&ld);
    cJSON_Delete(all);
    return check_done();
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: test_spec_dflash MODELS_DIR TASKS_JSONL [GOLDEN_DIR]\n");
        return 2;
    }
    if (argc > 3)
        return test_golden(argv[3]);
    snprintf(target, sizeof target, "%s/small-llama", argv[1]);
    snprintf(dflash, sizeof dflash, "%s/small-llama-dflash", argv[1]);
    test_refusals(argv[1]);
    test_lossless();
    test_acceptance(argv[2]);
    test_sampled();
    return check_done();
}
