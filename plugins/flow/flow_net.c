/* flow_net.c — see flow_net.h: the device chosen once. */
#include "flow_net.h"

#include <stdio.h>
#include <string.h>

int tb_flow_net_open(tb_flow_net *n, const char *model, int on_gpu, uint64_t preset_seed, int threads, char *err,
                     size_t err_size)
{
    n->iface = NULL;
    n->ctx = NULL;
    const char *preset = strncmp(model, "preset:", 7) == 0 ? model + 7 : NULL;
    const char *dir = preset ? NULL : model;
    if (on_gpu) {
#ifdef TB_HAVE_CUDA
        return tb_flow_net_open_cuda(n, dir, preset, preset_seed, err, err_size);
#else
        snprintf(err, err_size, "this build has no CUDA");
        return -1;
#endif
    }
    return tb_flow_net_open_cpu(n, dir, preset, preset_seed, threads, err, err_size);
}

void tb_flow_net_close(tb_flow_net *n)
{
    if (n->iface)
        n->iface->free(n->ctx);
    n->iface = NULL;
    n->ctx = NULL;
}
