/* test_oom.c — a plugin's code under allocation failure: every allocation
 * the plugin itself makes, failed one at a time, must come back through
 * its ABI as TB_ERR_NO_MEMORY (tokenize/detokenize: -1 with "memory" in
 * last_error), never as an abort, a crash, another status or a success
 * (docs/PLUGINS.md: a plugin must never abort).
 *
 *   test_oom MODEL [--no-generate] [NAME=VALUE...]
 *
 * Built once per backend with that backend's sources linked in (so
 * tokbench_backend_entry is the plugin's own) and with the linker wrapping
 * malloc, calloc, realloc, strdup and strndup (-Wl,--wrap=...): every call
 * the plugin's code, the engine and tokbench-util make goes through the
 * wrappers below, which fail the Nth. Allocations inside shared libraries
 * (libc's own, cJSON, PCRE2, OpenBLAS, libcurl) are not counted.
 *
 * The scenario, run once to count the allocations A, then for N = 1..A
 * with allocation N failing: create(MODEL, options), generate() on two
 * text prompts (unless --no-generate), tokenize(), detokenize(),
 * loglik() where declared, destroy(). */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tokbench/backend.h>

#include "check.h"
#include "plugin_host.h"

/* ---- the allocation wrappers */

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t n);
char *__wrap_strdup(const char *s);
char *__wrap_strndup(const char *s, size_t n);

static long alloc_count; /* allocations since the scenario started */
static long fail_at;     /* the one to fail, 1-based; 0: none */

/* Whether this allocation is the one to fail. */
static int fail_now(void)
{
    return ++alloc_count == fail_at;
}

void *__wrap_malloc(size_t n)
{
    return fail_now() ? NULL : __real_malloc(n);
}

void *__wrap_calloc(size_t n, size_t size)
{
    return fail_now() ? NULL : __real_calloc(n, size);
}

void *__wrap_realloc(void *p, size_t n)
{
    return fail_now() ? NULL : __real_realloc(p, n);
}

char *__wrap_strdup(const char *s)
{
    return fail_now() ? NULL : __real_strdup(s);
}

char *__wrap_strndup(const char *s, size_t n)
{
    return fail_now() ? NULL : __real_strndup(s, n);
}


/* ---- the scenario */

#define MAX_OPTS 64

/* Every declared option at its default, NAME=VALUE arguments overriding. */
static uint32_t make_options(const tb_backend_ops *ops, char **overrides, int n_over, tb_option_value *v)
{
    test_option set[16];
    size_t n_set = 0;
    for (int k = 0; k < n_over && n_set < 16; k++) {
        char *eq = strchr(overrides[k], '=');
        if (eq) {
            *eq = '\0'; /* argv's own storage: NAME, then VALUE */
            set[n_set++] = (test_option){overrides[k], eq + 1};
        }
    }
    return test_options(ops, set, n_set, v, MAX_OPTS);
}

enum { STEP_CREATE, STEP_GENERATE, STEP_TOKENIZE, STEP_DETOKENIZE, STEP_LOGLIK, N_STEPS };
static const char *const step_names[N_STEPS] = {"create", "generate", "tokenize", "detokenize", "loglik"};

typedef struct outcome {
    int step;         /* the step that failed, N_STEPS when none did */
    tb_status status; /* its status (tokenize/detokenize: TB_ERR_NO_MEMORY
                         when "memory" is in last_error, else TB_ERR) */
    char error[512];
} outcome;

static tb_status of_count(int64_t n, const tb_backend_ops *ops, void *ctx)
{
    if (n >= 0)
        return TB_OK;
    return strstr(ops->last_error(ctx), "memory") ? TB_ERR_NO_MEMORY : TB_ERR;
}

static outcome run(const tb_backend_ops *ops, const char *model, const tb_option_value *opts, uint32_t n_opts,
                   int generate)
{
    outcome o = {.step = N_STEPS, .status = TB_OK};
    void *ctx = NULL;
    char err[512] = "";
    tb_status st = ops->create(&test_host, model, opts, n_opts, &ctx, err, sizeof err);
    if (st != TB_OK) {
        o.step = STEP_CREATE, o.status = st;
        snprintf(o.error, sizeof o.error, "%s", err);
        return o;
    }
    /* a prompt with invalid UTF-8 (the tokenizer cleans it) and a plain one */
    static const char *const prompts[2] = {"Hello w\xc3\xb6rld \xff, once more", "The quick brown fox"};
    int step = STEP_GENERATE;
    if (generate) {
        tb_request_result rr[2];
        memset(rr, 0, sizeof rr);
        tb_request req = {.struct_size = sizeof req, .n_requests = 2, .max_new_tokens = 4, .batch = 2, .steps = 4,
                          .block_length = 4, .seed = 7, .prompt_text = prompts, .options = opts,
                          .n_options = n_opts};
        tb_result res = {.struct_size = sizeof res, .n_requests = 2, .requests = rr};
        st = ops->generate(ctx, &req, &res);
        for (int r = 0; r < 2 && st == TB_OK; r++)
            st = rr[r].status;
    }
    int32_t ids[256];
    int64_t n = 0;
    if (st == TB_OK && ops->tokenize) {
        step = STEP_TOKENIZE;
        n = ops->tokenize(ctx, prompts[0], ids, sizeof ids / sizeof ids[0]);
        st = of_count(n, ops, ctx);
    }
    if (st == TB_OK && ops->detokenize) {
        step = STEP_DETOKENIZE;
        char text[512];
        st = of_count(ops->detokenize(ctx, ids, (size_t)n, text, sizeof text), ops, ctx);
    }
    if (st == TB_OK && (ops->capabilities & TB_CAP_LOGLIK) && ops->loglik) {
        step = STEP_LOGLIK;
        double sum;
        uint32_t k;
        st = ops->loglik(ctx, prompts[1], " jumps", &sum, &k);
    }
    if (st != TB_OK) {
        o.step = step, o.status = st;
        snprintf(o.error, sizeof o.error, "%s", ops->last_error(ctx));
    }
    ops->destroy(ctx);
    return o;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_oom MODEL [--no-generate] [NAME=VALUE...]\n");
        return 2;
    }
    const char *model = argv[1];
    int generate = 1, n_over = 0;
    char *over[MAX_OPTS];
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--no-generate") == 0)
            generate = 0;
        else if (n_over < MAX_OPTS)
            over[n_over++] = argv[i];
    }
    const tb_backend_ops *ops = tokbench_backend_entry();
    tb_option_value opts[MAX_OPTS];
    uint32_t n_opts = make_options(ops, over, n_over, opts);

    /* the scenario as it runs with memory: every step succeeds */
    alloc_count = 0, fail_at = 0;
    outcome base = run(ops, model, opts, n_opts, generate);
    long total = alloc_count;
    if (base.step != N_STEPS) {
        fprintf(stderr, "%s: %s failed without any injected failure (%d): %s\n", ops->name, step_names[base.step],
                (int)base.status, base.error);
        CHECK(base.step == N_STEPS);
        return check_done();
    }
    CHECK(total > 0);

    long wrong = 0, by_step[N_STEPS] = {0};
    for (long k = 1; k <= total; k++) {
        alloc_count = 0, fail_at = k;
        outcome o = run(ops, model, opts, n_opts, generate);
        int ok = o.step < N_STEPS && o.status == TB_ERR_NO_MEMORY && strstr(o.error, "memory");
        if (!ok) {
            if (wrong++ < 10)
                fprintf(stderr, "%s: allocation %ld of %ld failed: %s returned %d: \"%s\"\n", ops->name, k, total,
                        o.step < N_STEPS ? step_names[o.step] : "every step succeeded and", (int)o.status, o.error);
        } else {
            by_step[o.step]++;
        }
    }
    CHECK(wrong == 0);
    printf("%s: %ld allocations failed one at a time, %ld reported as TB_ERR_NO_MEMORY (", ops->name, total,
           total - wrong);
    for (int s = 0; s < N_STEPS; s++)
        printf("%s%s %ld", s ? ", " : "", step_names[s], by_step[s]);
    printf(")\n");
    return check_done();
}
