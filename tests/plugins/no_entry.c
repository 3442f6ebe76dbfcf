/* no_entry.c — a well-formed ops table behind the wrong symbol name (a
 * near miss): the loader must say that tokbench_backend_entry is absent. */
#include "stub.h"

static const tb_backend_ops ops = {
    .abi_major = TB_ABI_MAJOR,
    .struct_size = sizeof(tb_backend_ops),
    .name = "no_entry",
    .version = "0",
    .description = "test plugin: no entry symbol",
    .create = stub_create,
    .destroy = stub_destroy,
    .generate = stub_generate,
    .last_error = stub_last_error,
};

STUB_EXPORT const tb_backend_ops *tokbench_backend_entry_v0(void);
STUB_EXPORT const tb_backend_ops *tokbench_backend_entry_v0(void)
{
    return &ops;
}
