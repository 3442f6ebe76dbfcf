/* engine.c — see engine.h: the one place the device is chosen. */
#include "engine.h"

#include <string.h>

int tb_engine_open(tb_engine *e, tb_loaded *ld, int threads)
{
#ifdef TB_HAVE_CUDA
    if (ld->gpu)
        return tb_engine_open_cuda(e, ld);
#endif
    if (tb_engine_open_cpu(e, &ld->model, threads) != 0)
        return -1;
    tb_engine_cpu_pick_vocab(e, ld->pick_vocab);
    return 0;
}

void tb_engine_close(tb_engine *e)
{
    if (e->iface)
        e->iface->free(e->ctx);
    memset(e, 0, sizeof *e);
}
