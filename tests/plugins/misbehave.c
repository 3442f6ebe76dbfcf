/* misbehave.c — a backend that breaks the rules of backend.h on purpose
 * (never calls exit(), never hangs the host, never closes the host's
 * descriptors), wherever its code runs, so the tests can check that
 * tokbench survives each (tests/test_isolation.sh):
 *
 *   TB_MISBEHAVE=WHERE:WHAT in the environment, WHERE one of
 *       constructor   the library's constructor (at dlopen)
 *       entry         tokbench_backend_entry()
 *       probe         probe()
 *   and the options validate_fault, create_fault, generate_fault for
 *   validate(), create() and generate(); WHAT (and each option's value)
 *   one of
 *       crash         SIGSEGV
 *       exit          exit(0), as a library that "handles" an error does
 *       hang          never returns, whatever signal is caught
 *       closefds_hang closes every descriptor (the host's pipes too),
 *                     then hangs
 *   wait_file = PATH: generate() waits, polling cancelled(), until PATH
 *   exists (a test holds a run in the middle of its cases with it).
 *
 * Otherwise it is the stub backend: every request gets its tokens in one
 * emission. */
#define _GNU_SOURCE
#include "stub.h"

#include <signal.h>
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
} mctx;

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
    misbehave(option(req->options, req->n_options, "generate_fault"));
    return stub_generate(vctx, req, res);
}

#define FAULTS "none|crash|exit|hang|closefds_hang"

static const tb_option_decl options[] = {
    {"validate_fault", TB_OPT_ENUM, "none", "what validate() does wrong", FAULTS, 0, 0, 0},
    {"create_fault", TB_OPT_ENUM, "none", "what create() does wrong", FAULTS, 0, 0, TB_OPTF_LOAD},
    {"generate_fault", TB_OPT_ENUM, "none", "what generate() does wrong", FAULTS, 0, 0, 0},
    {"wait_file", TB_OPT_STRING, "", "generate() waits until this file exists", NULL, 0, 0, 0},
};

static const tb_backend_ops ops = {
    .abi_major = TB_ABI_MAJOR,
    .struct_size = sizeof(tb_backend_ops),
    .name = "misbehave",
    .version = "0",
    .description = "test plugin: crashes, exits or hangs where it is told to",
    .capabilities = TB_CAP_BATCH,
    .options = options,
    .n_options = sizeof options / sizeof options[0],
    .probe = m_probe,
    .create = m_create,
    .destroy = stub_destroy,
    .generate = m_generate,
    .last_error = stub_last_error,
    .validate = m_validate,
};

STUB_EXPORT const tb_backend_ops *tokbench_backend_entry(void);
STUB_EXPORT const tb_backend_ops *tokbench_backend_entry(void)
{
    misbehave(fault_at("entry"));
    return &ops;
}
