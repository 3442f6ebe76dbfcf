/* dup_option.c — declares the same option name twice: the loader must
 * refuse the plugin, naming the option. */
#include "stub.h"

static const tb_option_decl options[] = {
    {"delay_us", TB_OPT_INT, "0", "first declaration", NULL, 0, 1e6, 0},
    {"mode", TB_OPT_ENUM, "a", "a valid ENUM", "a|b", 1, 0, 0},
    {"delay_us", TB_OPT_FLOAT, "0", "second declaration", NULL, 0, 1e6, 0},
};

static const tb_backend_ops ops = {
    .abi_major = TB_ABI_MAJOR,
    .struct_size = sizeof(tb_backend_ops),
    .name = "dup_option",
    .version = "0",
    .description = "test plugin: option name declared twice",
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
