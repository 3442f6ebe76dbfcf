/* misbehave.c — a backend that breaks the rules of backend.h on purpose
 * (never calls exit(), never hangs the host, never closes the host's
 * descriptors), wherever its code runs, so the tests can check that
 * tokbench survives each (tests/test_isolation.sh):
 *
 *   TB_MISBEHAVE=WHERE:WHAT in the environment, WHERE one of
 *       constructor   the library's constructor (at dlopen)
 *       entry         tokbench_backend_entry() (WHAT serving: no fault, the
 *                     table with TB_CAP_CONCURRENCY, whose submit
 *                     times are its own)
 *       probe         probe()
 *   and the options validate_fault, create_fault, generate_fault for
 *   validate(), create() and generate(); WHAT (and each option's value)
 *   one of
 *       crash         SIGSEGV
 *       exit          exit(0), as a library that "handles" an error does
 *       hang          never returns, whatever signal is caught
 *       closefds_hang closes every descriptor (the host's pipes too),
 *                     then hangs
 *       fork          (generate only) forks two children, which hold the
 *                     host's pipes as forked children do: one lingers for
 *                     ever (SIGTERM ignored) with a lingering child of its
 *                     own, the other crashes (SIGSEGV); then generates
 *       fork_crash    (generate only) the same, then crashes itself
 *   pid_file = PATH: the lingering processes of fork and fork_crash
 *   append their pids to PATH, one a line, before generate() goes on
 *   (the test checks that none survives the run).
 *   bad_figure = WHAT: generate() reports one impossible figure for its
 *   first request (backend.h's promises broken): tokens (4294967294
 *   output tokens), e2e (done at -9.2e18 ns), ttft (its emission 292
 *   years after the call), submit (sent before the call began),
 *   late_submit (20 ms into the call, every request sent at its first
 *   token, which a batch backend may not say), zero_emit (an emission
 *   of 0 tokens at the call's start, its tokens 20 ms later), big_emit
 *   (its emission of 1,000,000 tokens), zero_tokens (0 output tokens
 *   after its emission of max_new_tokens), steps (steps_done 4e9 without
 *   TB_CAP_STEPS), blocks (blocks_done 4e9 without TB_CAP_BLOCKS),
 *   prompt (prompt_tokens 4e9), error_nonul (failed, its error[128] all
 *   'Z', no NUL, request 1's submit time after it holding bytes), or
 *   error_latin1 (failed with "other: caf\xe9 \xff\xfe", not UTF-8); or
 *   for the call: prefill (prefill_ns -5), client_busy (500).
 *   describe_fault = WHAT (a load option): describe() returns big (1 MiB
 *   + 1 byte, past TB_DESCRIBE_MAX), max (exactly TB_DESCRIBE_MAX) or
 *   latin1 ({"model_name":"caf\xe9"}, not UTF-8).
 *   wait_file = PATH: generate() waits, polling cancelled(), until PATH
 *   exists (a test holds a run in the middle of its cases with it).
 *
 * Otherwise it is the stub backend: every request gets its tokens in one
 * emission. */
#define _GNU_SOURCE
#include "stub.h"

#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void misbehave(const char *what)
{
    if (!what || !*what || strcmp(what, "none") == 0)
        return;
    if (strcmp(what, "crash") == 0)
        raise(SIGSEGV);
    if (strcmp(what, "exit") == 0)
        exit(0);
    if (strcmp(what, "closefds_hang") == 0)
        for (int fd = 0; fd < 65536; fd++)
            close(fd);
    if (strcmp(what, "hang") == 0 || strcmp(what, "closefds_hang") == 0)
        for (;;)
            pause(); /* a caught SIGTERM returns here: hang on */
}

/* In a forked child: append this process's pid to pid_file, then tell
 * the parent through `ready` (it waits, so the pid is on file before the
 * host can end anything). */
static void note_pid(const char *pid_file, int ready)
{
    int fd = open(pid_file, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) {
        dprintf(fd, "%d\n", (int)getpid());
        close(fd);
    }
    if (write(ready, "x", 1) != 1)
        _exit(1);
}

static void linger(void)
{
    signal(SIGTERM, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    for (;;)
        pause();
}

/* fork and fork_crash: a lingering child with a lingering child of its
 * own, and a child that crashes. Returns once both lingerers are on
 * file. */
static void fork_children(const char *pid_file)
{
    int p[2];
    if (pipe(p) != 0)
        return;
    pid_t a = fork();
    if (a == 0) {
        close(p[0]);
        pid_t b = fork();
        if (b == 0) {
            note_pid(pid_file, p[1]);
            close(p[1]);
            linger();
        }
        note_pid(pid_file, p[1]);
        close(p[1]);
        linger();
    }
    if (fork() == 0) {
        signal(SIGSEGV, SIG_DFL); /* a plain crash, without a sanitizer's report */
        raise(SIGSEGV);
        _exit(1);
    }
    close(p[1]);
    char c[2];
    size_t got = 0;
    while (a > 0 && got < 2) {
        ssize_t n = read(p[0], c, 2 - got);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(p[0]);
}

/* The WHAT of TB_MISBEHAVE when its WHERE is `where`, else NULL. */
static const char *fault_at(const char *where)
{
    const char *v = getenv("TB_MISBEHAVE");
    size_t n = strlen(where);
    return v && strncmp(v, where, n) == 0 && v[n] == ':' ? v + n + 1 : NULL;
}

__attribute__((constructor)) static void on_load(void)
{
    misbehave(fault_at("constructor"));
}

static const char *option(const tb_option_value *o, uint32_t n, const char *name)
{
    for (uint32_t i = 0; i < n; i++)
        if (strcmp(o[i].name, name) == 0)
            return o[i].text;
    return NULL;
}

typedef struct mctx {
    const tb_host *host; /* first, as in stub_ctx: stub_generate reads it */
    char generate_fault[32];
    char wait_file[256];
    char *describe; /* describe_fault's text, or NULL */
} mctx;

static const char *m_describe(void *vctx)
{
    return ((mctx *)vctx)->describe;
}

static void m_destroy(void *vctx)
{
    free(((mctx *)vctx)->describe);
    free(vctx);
}

static void nap_ms(long ms)
{
    struct timespec ts = {0, ms * 1000 * 1000};
    while (nanosleep(&ts, &ts) != 0)
        ; /* at least that long, whatever signal comes */
}

static tb_status m_probe(char *why, size_t why_size)
{
    (void)why, (void)why_size;
    misbehave(fault_at("probe"));
    return TB_OK;
}

static tb_status m_validate(const tb_request *req, char *why, size_t why_size)
{
    (void)why, (void)why_size;
    misbehave(option(req->options, req->n_options, "validate_fault"));
    return TB_OK;
}

static tb_status m_create(const tb_host *host, const char *model, const tb_option_value *options,
                          uint32_t n_options, void **ctx_out, char *err, size_t err_size)
{
    (void)model;
    misbehave(option(options, n_options, "create_fault"));
    mctx *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, err_size, "out of memory");
        return TB_ERR_NO_MEMORY;
    }
    c->host = host;
    const char *d = option(options, n_options, "describe_fault");
    if (d && (strcmp(d, "big") == 0 || strcmp(d, "max") == 0)) {
        size_t n = TB_DESCRIBE_MAX + (strcmp(d, "big") == 0); /* the JSON's bytes */
        c->describe = malloc(n + 1);
        if (c->describe) {
            memset(c->describe, 'x', n);
            memcpy(c->describe, "{\"model_name\":\"", 15);
            memcpy(c->describe + n - 2, "\"}", 2);
            c->describe[n] = '\0';
        }
    } else if (d && strcmp(d, "latin1") == 0) {
        c->describe = strdup("{\"model_name\":\"caf\xe9\"}");
    }
    *ctx_out = c;
    return TB_OK;
}

static tb_status m_generate(void *vctx, const tb_request *req, tb_result *res)
{
    mctx *c = vctx;
    const char *wait = option(req->options, req->n_options, "wait_file");
    while (wait && *wait && access(wait, F_OK) != 0 && !c->host->cancelled(c->host)) {
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    const char *fault = option(req->options, req->n_options, "generate_fault");
    if (fault && strncmp(fault, "fork", 4) == 0) {
        fork_children(option(req->options, req->n_options, "pid_file"));
        fault = strcmp(fault, "fork_crash") == 0 ? "crash" : NULL;
    }
    misbehave(fault);
    const char *bad = option(req->options, req->n_options, "bad_figure");
    int64_t now = c->host->now_ns(c->host);
    if (strcmp(bad, "ttft") == 0) /* the first emission of request 0 */
        c->host->emit(c->host, 0, 1, now < INT64_C(23000000000000000) ? now + INT64_C(9200000000000000000) : INT64_MAX);
    if (strcmp(bad, "zero_emit") == 0)
        c->host->emit(c->host, 0, 0, now);
    if (strcmp(bad, "zero_emit") == 0 || strcmp(bad, "late_submit") == 0)
        nap_ms(20); /* a prefill: the tokens come 20 ms into the call */
    int64_t t_first = c->host->now_ns(c->host);
    if (strcmp(bad, "big_emit") == 0)
        c->host->emit(c->host, 0, 1000000, t_first);
    tb_status st = stub_generate(vctx, req, res);
    tb_request_result *r0 = &res->requests[0];
    if (strcmp(bad, "ttft") == 0)
        r0->n_output_tokens++; /* its one token more: only its time is impossible */
    if (strcmp(bad, "late_submit") == 0)
        for (uint32_t r = 0; r < req->n_requests; r++)
            res->requests[r].t_submit_ns = t_first;
    if (strcmp(bad, "tokens") == 0)
        r0->n_output_tokens = 4294967294u;
    else if (strcmp(bad, "zero_tokens") == 0)
        r0->n_output_tokens = 0;
    else if (strcmp(bad, "steps") == 0)
        r0->steps_done = 4000000000u;
    else if (strcmp(bad, "blocks") == 0 && TB_STRUCT_HAS(res, tb_result, blocks_done) && res->blocks_done)
        res->blocks_done[0] = 4000000000u;
    else if (strcmp(bad, "prompt") == 0 && TB_STRUCT_HAS(res, tb_result, prompt_tokens) && res->prompt_tokens)
        res->prompt_tokens[0] = 4000000000u;
    else if (strcmp(bad, "client_busy") == 0 && TB_STRUCT_HAS(res, tb_result, client_busy))
        res->client_busy = 500.0;
    else if (strcmp(bad, "error_nonul") == 0) {
        r0->status = TB_ERR;
        memset(r0->error, 'Z', sizeof r0->error);
        if (req->n_requests > 1) /* bytes right after the field: a reader past it would take them */
            res->requests[1].t_submit_ns = now | INT64_C(0x4141414141);
    } else if (strcmp(bad, "error_latin1") == 0) {
        r0->status = TB_ERR;
        snprintf(r0->error, sizeof r0->error, "other: caf\xe9 \xff\xfe");
    }
    else if (strcmp(bad, "e2e") == 0)
        r0->t_done_ns = INT64_MIN + 1;
    else if (strcmp(bad, "submit") == 0)
        r0->t_submit_ns = now - INT64_C(3600000000000);
    else if (strcmp(bad, "prefill") == 0)
        res->prefill_ns = -5;
    return st;
}

#define FAULTS "none|crash|exit|hang|closefds_hang"
#define GENERATE_FAULTS FAULTS "|fork|fork_crash"

static const tb_option_decl options[] = {
    {"validate_fault", TB_OPT_ENUM, "none", "what validate() does wrong", FAULTS, 0, 0, 0},
    {"create_fault", TB_OPT_ENUM, "none", "what create() does wrong", FAULTS, 0, 0, TB_OPTF_LOAD},
    {"generate_fault", TB_OPT_ENUM, "none", "what generate() does wrong", GENERATE_FAULTS, 0, 0, 0},
    {"wait_file", TB_OPT_STRING, "", "generate() waits until this file exists", NULL, 0, 0, 0},
    {"pid_file", TB_OPT_STRING, "", "fork, fork_crash: the lingering children's pids go here", NULL, 0, 0, 0},
    {"bad_figure", TB_OPT_ENUM, "none", "an impossible figure generate() reports",
     "none|tokens|e2e|ttft|submit|prefill|late_submit|zero_emit|big_emit|zero_tokens|steps|blocks|prompt|"
     "client_busy|error_nonul|error_latin1", 0, 0, 0},
    {"describe_fault", TB_OPT_ENUM, "none", "what describe() returns wrong", "none|big|max|latin1", 0, 0,
     TB_OPTF_LOAD},
};

static const tb_backend_ops ops = {
    .abi_major = TB_ABI_MAJOR,
    .struct_size = sizeof(tb_backend_ops),
    .name = "misbehave",
    .version = "0",
    .description = "test plugin: crashes, exits or hangs where it is told to",
    .capabilities = TB_CAP_BATCH | TB_CAP_STREAMING, /* one emission a request */
    .options = options,
    .n_options = sizeof options / sizeof options[0],
    .probe = m_probe,
    .create = m_create,
    .destroy = m_destroy,
    .generate = m_generate,
    .last_error = stub_last_error,
    .validate = m_validate,
    .describe = m_describe,
};

STUB_EXPORT const tb_backend_ops *tokbench_backend_entry(void);
STUB_EXPORT const tb_backend_ops *tokbench_backend_entry(void)
{
    const char *entry = fault_at("entry");
    if (entry && strcmp(entry, "serving") == 0) { /* a serving backend: its own submit times */
        static tb_backend_ops serving;
        serving = ops;
        serving.capabilities |= TB_CAP_CONCURRENCY;
        return &serving;
    }
    misbehave(entry);
    return &ops;
}
