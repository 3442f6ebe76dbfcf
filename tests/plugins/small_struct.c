/* small_struct.c — struct_size stops short of the ABI-1 layout (as if built
 * before detokenize existed): the loader must refuse it rather than read
 * past the table. */
#include "stub.h"

#include <stddef.h>

static const tb_backend_ops ops = {
    .abi_major = TB_ABI_MAJOR,
    .struct_size = offsetof(tb_backend_ops, detokenize),
    .name = "small_struct",
    .version = "0",
    .description = "test plugin: ops table smaller than TB_OPS_MIN_SIZE",
    .create = stub_create,
    .destroy = stub_destroy,
    .generate = stub_generate,
    .last_error = stub_last_error,
};

_Static_assert(offsetof(tb_backend_ops, detokenize) < TB_OPS_MIN_SIZE,
               "small_struct must be smaller than TB_OPS_MIN_SIZE");

STUB_EXPORT const tb_backend_ops *tokbench_backend_entry(void);
STUB_EXPORT const tb_backend_ops *tokbench_backend_entry(void)
{
    return &ops;
}
