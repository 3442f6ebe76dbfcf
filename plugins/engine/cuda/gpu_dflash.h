/* gpu_dflash.h — DFlash's drafter on an NVIDIA GPU (the CPU twin:
 * cpu/dflash.h, which says what the drafter computes).
 *
 * The drafter runs as a second tb_gpu context on the target's device: a
 * Qwen3 view of its layers (bf16 weights, the engine's GEMMs, norms,
 * k_qkv_post and span attention) whose embedding and LM head are the
 * target context's own device copies (shared, not duplicated). Its KV
 * cache holds, per layer, the context positions' keys and values made
 * from the fused target features (fc, hidden_norm, k_proj / v_proj,
 * k_norm, RoPE); a draft is the engine's bidirectional span forward of
 * the block at [C, C + L) attending to [0, C + L): the block's keys and
 * values land after the context and are overwritten by the next append,
 * as upstream crops them. Built only with CUDA (TB_HAVE_CUDA). */
#ifndef TB_ENGINE_GPU_DFLASH_H
#define TB_ENGINE_GPU_DFLASH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "gpu.h"
#include "model.h"

typedef struct tb_gpu_dflash tb_gpu_dflash;

/* The drafter for target context `target` (which must outlive it), with
 * room for max_seqs sequences of max_ctx context positions and blocks of
 * the drafter's block_size. drafter: host weights (tb_dflash_load,
 * tb_dflash_preset), rounded to bf16; NULL: seeded random weights for
 * dcfg made on the device. target_cpu: the target's host model (its
 * config is checked against the drafter's: tb_dflash_check_target). -1
 * with the reason in err. */
int tb_gpu_dflash_create(tb_gpu_dflash **out, tb_gpu *target, const tb_model_config *target_cfg,
                         const tb_model_config *dcfg, const tb_model *drafter, uint64_t seed, int max_seqs,
                         int max_ctx, char *err, size_t err_size);
void tb_gpu_dflash_free(tb_gpu_dflash *d);

/* Append n feature rows [n][n_target_ids x hidden] (float32) of slot's
 * next context positions: device memory (ready: the producer's stream
 * synchronized) when on_device, else host memory. */
int tb_gpu_dflash_append(tb_gpu_dflash *d, int slot, const float *features, int n, int on_device);
int tb_gpu_dflash_rollback(tb_gpu_dflash *d, int slot, int n_keep);
int tb_gpu_dflash_ctx_len(const tb_gpu_dflash *d, int slot);

/* Drafts for n_seqs distinct slots (as tb_dflash_draft): the greedy
 * draft [n_seqs][L - 1] (the argmax on the device) and, when logits is
 * not NULL, the drafted rows' logits for sampling on the host: logits is
 * [n_seqs][L][vocab] as the CPU's, rows 1 .. L - 1 of each block written
 * (row 0, the anchor's, is not a draft). */
int tb_gpu_dflash_draft(tb_gpu_dflash *d, const int *slots, int n_seqs, const int32_t *anchors, int L,
                        int32_t *draft, float *logits);
/* Every row's logits of slot 0's block (host [L][vocab]): tests. */
int tb_gpu_dflash_logits(tb_gpu_dflash *d, int32_t anchor, int L, float *logits);

/* The drafter's device work since the last call (its drafts' forwards,
 * as tb_gpu_take_work counts them, and its appends' feature projections),
 * then zeroed: the roofline's FLOPs and bytes. */
void tb_gpu_dflash_take_work(tb_gpu_dflash *d, double *flops, double *bytes);

const char *tb_gpu_dflash_error(const tb_gpu_dflash *d);

#ifdef __cplusplus
}
#endif

#endif
