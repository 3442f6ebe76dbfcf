/* secret_opt.c — a working stub with a TB_OPTF_SECRET option (`token`)
 * next to an ordinary one (`region`), for tests/test_security.sh and
 * tests/test_secrets.sh: the token's value must reach create() and
 * generate() but never the database, logs, reports or a core dump. The
 * plugin keeps it out of its messages, as docs/PLUGINS.md asks, unless
 * told to misbehave:
 *   leak = true    create() logs the token, and each request fails with
 *                  an error that holds it (the host must redact both)
 *   crash = true   generate() crashes (SIGSEGV) with the token in memory
 * create() logs whether its process may dump core ("dumpable N", from
 * prctl(PR_GET_DUMPABLE)). */
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>

#include "stub.h"

static const tb_option_decl options[] = {
    {"token", TB_OPT_STRING, "", "an API token (secret)", NULL, 1, 0, TB_OPTF_SECRET},
    {"region", TB_OPT_STRING, "eu", "an ordinary string option", NULL, 1, 0, 0},
    {"leak", TB_OPT_BOOL, "false", "misbehave: log the token and put it in errors", NULL, 1, 0, 0},
    {"crash", TB_OPT_BOOL, "false", "misbehave: crash in generate()", NULL, 1, 0, 0},
};

static int leak, crash;
static char token[256];

static tb_status secret_create(const tb_host *host, const char *model, const tb_option_value *opts, uint32_t n,
                               void **ctx_out, char *err, size_t err_size)
{
    if (n < 1 || strlen(opts[0].text) < 8) {
        snprintf(err, err_size, "token missing or shorter than 8 characters");
        return TB_ERR_INVALID;
    }
    leak = n > 2 && opts[2].i;
    crash = n > 3 && opts[3].i;
    snprintf(token, sizeof token, "%s", opts[0].text);
    host->log(host, TB_LOG_INFO, "authenticated (token of %zu characters), region %s; dumpable %d",
              strlen(opts[0].text), n > 1 ? opts[1].text : "?", prctl(PR_GET_DUMPABLE));
    if (leak)
        host->log(host, TB_LOG_INFO, "leaking the token: %s", token);
    return stub_create(host, model, opts, n, ctx_out, err, err_size);
}

static tb_status secret_generate(void *vctx, const tb_request *req, tb_result *res)
{
    if (crash)
        raise(SIGSEGV);
    tb_status st = stub_generate(vctx, req, res);
    for (uint32_t r = 0; leak && r < req->n_requests; r++) {
        res->requests[r].status = TB_ERR_IO;
        snprintf(res->requests[r].error, sizeof res->requests[r].error, "http_4xx: HTTP 401: bad key %.90s", token);
    }
    return st;
}

static const tb_backend_ops ops = {
    .abi_major = TB_ABI_MAJOR,
    .struct_size = sizeof(tb_backend_ops),
    .name = "secret_opt",
    .version = "0",
    .description = "test plugin: a secret option",
    .capabilities = TB_CAP_BATCH,
    .options = options,
    .n_options = sizeof options / sizeof options[0],
    .create = secret_create,
    .destroy = stub_destroy,
    .generate = secret_generate,
    .last_error = stub_last_error,
};

STUB_EXPORT const tb_backend_ops *tokbench_backend_entry(void);
STUB_EXPORT const tb_backend_ops *tokbench_backend_entry(void)
{
    return &ops;
}
