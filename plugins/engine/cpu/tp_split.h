/* tp_split.h — tensor parallelism's split of a dense transformer over tp
 * ranks (Megatron's scheme), on the CPU model layout (model.h):
 *
 *   column-parallel (each rank holds some output rows, no communication):
 *     wqkv: the rank's q heads and the kv heads they read (GQA: a kv head
 *           serves n_heads / n_kv_heads q heads; when tp exceeds
 *           n_kv_heads each rank holds the one kv head of its q heads, so
 *           a kv head is held by tp / n_kv_heads ranks, as vLLM does);
 *           bqkv likewise; q_norm and k_norm whole (per head_dim)
 *     w_gate_up: the rank's slice of the intermediate rows, of gate and of up
 *     lm_head: the rank's slice of the vocabulary (ceil(V / tp) rows, the
 *           last rank fewer); the caller gathers the logits
 *   row-parallel (each rank holds some input columns; its product is a
 *   partial sum that an all-reduce completes before the residual add):
 *     wo: the columns of the rank's q heads
 *     w_down: the columns of its intermediate slice
 *   whole on every rank: embed, the norms, rope_inv_freq.
 *
 * A rank's model is a tb_model of its own (cfg: n_heads, n_kv_heads and
 * intermediate_size divided; vocab_size whole, lm_head_rows its slice), so
 * the CPU forward (cpu_forward.h, with its all-reduce hook set) and the
 * device upload run on it unchanged. The KV cache is split with the kv
 * heads. MoE layers are not split (expert parallelism is another scheme):
 * tb_tp_split_plan refuses them. */
#ifndef TB_ENGINE_TP_SPLIT_H
#define TB_ENGINE_TP_SPLIT_H

#include <stddef.h>

#include "model.h"

typedef struct tb_tp_split {
    int tp, rank;
    int q_head0, n_q_heads;    /* q heads [q_head0, q_head0 + n_q_heads) */
    int kv_head0, n_kv_heads;  /* kv heads [kv_head0, kv_head0 + n_kv_heads) */
    int inter0, n_inter;       /* intermediate units [inter0, inter0 + n_inter) */
    int vocab0, n_vocab;       /* lm_head rows [vocab0, vocab0 + n_vocab) */
} tb_tp_split;

/* The split of cfg's weights for rank of tp. 0, or -1 with the reason (a
 * head count, intermediate size or vocabulary tp does not divide, a MoE
 * model, tp < 1, rank outside [0, tp)) in err. */
int tb_tp_split_plan(const tb_model_config *cfg, int tp, int rank, tb_tp_split *s, char *err, size_t err_size);

/* Rank s->rank's weights of full, copied into out (its own arena; free it
 * with tb_model_free). 0, or -1 with the reason. */
int tb_tp_split_model(const tb_model *full, const tb_tp_split *s, tb_model *out, char *err, size_t err_size);

#endif
