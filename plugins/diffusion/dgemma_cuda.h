/* dgemma_cuda.h — DiffusionGemma's sampler (dgemma_sampler.h) on the CUDA
 * passes (cuda/gpu_dgemma.h): the engine table over one device model, with
 * the per-position work of each step on the device (denoise_decide). In
 * CUDA builds only. */
#ifndef TB_DIFFUSION_DGEMMA_CUDA_H
#define TB_DIFFUSION_DGEMMA_CUDA_H

#include "dgemma_sampler.h"
#include "gpu_dgemma.h"

/* The engine table over d (its cache is the request's: reset it first). */
tb_dg_engine tb_dg_cuda_engine(tb_gpu_dgemma *d, const tb_dgemma_config *cfg);

#endif
