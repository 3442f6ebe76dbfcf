/* no_generate.c — a required method is NULL: the loader must refuse the
 * plugin with "no generate()". */
#include "stub.h"

static const tb_backend_ops ops = {
    .abi_major = TB_ABI_MAJOR,
    .struct_size = sizeof(tb_backend_ops),
    .name = "no_generate",
    .version = "0",
    .description = "test plugin: generate is NULL",
    .create = stub_create,
    .destroy = stub_destroy,
    .generate = NULL,
    .last_error = stub_last_error,
};

STUB_EXPORT const tb_backend_ops *tokbench_backend_entry(void);
STUB_EXPORT const tb_backend_ops *tokbench_backend_entry(void)
{
    return &ops;
}
