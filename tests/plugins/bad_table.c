/* bad_table.c — an ops table broken as TB_BAD_TABLE (in the environment
 * of the process that loads it) says, one rule of backend.h each; the
 * loader must refuse it with a message naming what is wrong:
 *   option:NAME     declares an option NAME (a suite key: plugin, model,
 *                   include or a dimension, e.g. option:batch)
 *   no_description  description = NULL
 *   loglik          claims TB_CAP_LOGLIK without loglik()
 *   version_latin1  a version that is not UTF-8 ("1.0\xff")
 *   desc_latin1     a description that is not UTF-8
 *   help_latin1     an option's help that is not UTF-8
 * Unset: a valid table (the stub backend). */
#include "stub.h"

#include <stdlib.h>
#include <string.h>

static char opt_name[64] = "mode";
static tb_option_decl options[] = {
    {opt_name, TB_OPT_STRING, "", "an option", NULL, 0, 0, 0},
};

static tb_backend_ops ops = {
    .abi_major = TB_ABI_MAJOR,
    .struct_size = sizeof(tb_backend_ops),
    .name = "bad_table",
    .version = "0",
    .description = "test plugin: an ops table broken as TB_BAD_TABLE says",
    .options = options,
    .n_options = 1,
    .create = stub_create,
    .destroy = stub_destroy,
    .generate = stub_generate,
    .last_error = stub_last_error,
};

STUB_EXPORT const tb_backend_ops *tokbench_backend_entry(void);
STUB_EXPORT const tb_backend_ops *tokbench_backend_entry(void)
{
    const char *v = getenv("TB_BAD_TABLE");
    if (!v)
        return &ops;
    if (strncmp(v, "option:", 7) == 0)
        snprintf(opt_name, sizeof opt_name, "%s", v + 7);
    else if (strcmp(v, "no_description") == 0)
        ops.description = NULL;
    else if (strcmp(v, "loglik") == 0)
        ops.capabilities |= TB_CAP_LOGLIK;
    else if (strcmp(v, "version_latin1") == 0)
        ops.version = "1.0\xff";
    else if (strcmp(v, "desc_latin1") == 0)
        ops.description = "caf\xe9";
    else if (strcmp(v, "help_latin1") == 0)
        options[0].help = "caf\xe9";
    return &ops;
}
