/* secret_opt.c — a working stub with a TB_OPTF_SECRET option (`token`)
 * next to an ordinary one (`region`), for tests/test_security.sh: the
 * token's value must reach create() and generate() but never the
 * database, logs or reports. The plugin itself keeps it out of its
 * messages, as docs/PLUGINS.md asks. */
#include <string.h>

#include "stub.h"

static const tb_option_decl options[] = {
    {"token", TB_OPT_STRING, "", "an API token (secret)", NULL, 1, 0, TB_OPTF_SECRET},
    {"region", TB_OPT_STRING, "eu", "an ordinary string option", NULL, 1, 0, 0},
};

static tb_status secret_create(const tb_host *host, const char *model, const tb_option_value *opts, uint32_t n,
                               void **ctx_out, char *err, size_t err_size)
{
    if (n < 1 || strlen(opts[0].text) < 8) {
        snprintf(err, err_size, "token missing or shorter than 8 characters");
        return TB_ERR_INVALID;
    }
    host->log(host, TB_LOG_INFO, "authenticated (token of %zu characters), region %s", strlen(opts[0].text),
              n > 1 ? opts[1].text : "?");
    return stub_create(host, model, opts, n, ctx_out, err, err_size);
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
    .generate = stub_generate,
    .last_error = stub_last_error,
};

STUB_EXPORT const tb_backend_ops *tokbench_backend_entry(void);
STUB_EXPORT const tb_backend_ops *tokbench_backend_entry(void)
{
    return &ops;
}
