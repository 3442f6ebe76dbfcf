/* dgemma_cpu.h — DiffusionGemma's sampler (dgemma_sampler.h) on the CPU
 * forward (cpu/dgemma_forward.h): the engine table over one state.
 * Shared by the golden test and, later, the diffusion plugin. */
#ifndef TB_DIFFUSION_DGEMMA_CPU_H
#define TB_DIFFUSION_DGEMMA_CPU_H

#include "dgemma_forward.h"
#include "dgemma_sampler.h"

/* The engine table over st (its cache is the request's: reset it first). */
tb_dg_engine tb_dg_cpu_engine(tb_dgemma_state *st);

#endif
