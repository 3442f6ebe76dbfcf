/* bad_abi.c — claims an ABI major the host does not speak: the loader must
 * refuse it, naming both versions. */
#include "stub.h"

static const tb_backend_ops ops = {
    .abi_major = TB_ABI_MAJOR + 1,
    .struct_size = sizeof(tb_backend_ops),
    .name = "bad_abi",
    .version = "0",
    .description = "test plugin: wrong ABI major",
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
