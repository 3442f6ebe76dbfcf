/* bad_option.c — declares an ENUM option without choices: the loader must
 * refuse the plugin, naming the option. */
#include "stub.h"

static const tb_option_decl options[] = {
    {"size", TB_OPT_INT, "1", "a valid option", NULL, 0, 10, 0},
    {"mode", TB_OPT_ENUM, "fast", "an ENUM with no choices", NULL, 1, 0, 0},
};

static const tb_backend_ops ops = {
    .abi_major = TB_ABI_MAJOR,
    .struct_size = sizeof(tb_backend_ops),
    .name = "bad_option",
    .version = "0",
    .description = "test plugin: ENUM option with choices = NULL",
    .options = options,
    .n_options = sizeof options / sizeof options[0],
    .create = stub_create,
    .destroy = stub_destroy,
    .generate = stub_generate,
    .last_error = stub_last_error,
};

STUB_EXPORT const tb_backend_ops *tokbench_backend_entry(void);
STUB_EXPORT const tb_backend_ops *tokbench_backend_entry(void)
{
    return &ops;
}
