/* dflash.h — DFlash's drafter (z-lab, arXiv 2602.06036) on the CPU:
 * float32, OpenBLAS for the products, in the order of the published
 * modelling code (tools/dflash_reference.py transcribes it; its docstring
 * has the layout).
 *
 * The drafter (a tb_model of arch TB_ARCH_DFLASH, tb_dflash_load) reads
 * the target's hidden states at cfg.target_layer_ids: a feature row of a
 * position is those layers' outputs (the residual stream after layer id,
 * before the final norm), concatenated in that order, width n_target_ids
 * x hidden. fc and hidden_norm fuse a row to `hidden`; each drafter layer
 * projects the fused rows with its own k_proj / v_proj (k_norm, RoPE at
 * the row's position) into its context cache. A draft runs a block of L
 * rows (the anchor, the last verified token, then L - 1 mask tokens)
 * embedded with the target's embedding, at positions [C, C + L) after the
 * C cached context positions; every block row attends to every cached
 * context position and every block row (no mask); the target's LM head
 * gives the logits, rows 1 .. L - 1 the drafts.
 *
 * Upstream's loop, in these calls: after the target's prefill, append the
 * prompt's features (positions [0, P)) and draft with the target's next
 * token as anchor (block at [P, P + L)); after a verification that
 * accepted a drafts, append the features of the a + 1 verified block
 * positions (the anchor and the accepted drafts) and draft from the bonus
 * token. The block's own keys and values are never kept (upstream crops
 * them). Rollback drops context positions (a caller that appended ahead). */
#ifndef TB_ENGINE_DFLASH_H
#define TB_ENGINE_DFLASH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "model.h"

typedef struct tb_dflash_state {
    const tb_model *d;             /* the drafter */
    const float *embed, *lm_head;  /* the target's, [vocab][hidden] */
    int vocab, feat;               /* feat = n_target_ids x hidden: a feature row's width */
    int max_seqs, max_ctx, max_block, chunk;
    float *k_cache, *v_cache;      /* [n_layers][max_seqs][max_ctx][kv_dim]: k after k_norm and RoPE */
    int *ctx_len;                  /* [max_seqs]: context positions cached */
    float *ctx;                    /* [chunk][hidden]: fused feature rows of one append */
    float *kv;                     /* [chunk][2 kv_dim] */
    float *x, *xn;                 /* [max_seqs max_block][hidden] */
    float *qkv;                    /* [rows][(n_heads + 2 n_kv) head_dim] */
    float *att;                    /* [rows][n_heads head_dim] */
    float *gu;                     /* [rows][2 intermediate] */
    float *scores;                 /* [max_block][max_ctx + max_block] */
    float *logits;                 /* [rows][vocab], when the caller passes none */
    size_t bytes;
} tb_dflash_state;

/* Whether drafter d can draft for target t: same hidden size and
 * vocabulary, every target_layer_id a layer of t, num_target_layers (when
 * given) t's layer count, t's embedding and LM head present. -1 with the
 * reason naming the field. */
int tb_dflash_check_target(const tb_model_config *d, const tb_model_config *t, char *err, size_t err_size);

/* Room for max_seqs sequences of max_ctx context positions, blocks of up
 * to d's block_size rows. Holds pointers to both models. */
int tb_dflash_init(tb_dflash_state *st, const tb_model *drafter, const tb_model *target, int max_seqs, int max_ctx,
                   char *err, size_t err_size);
void tb_dflash_free(tb_dflash_state *st);

/* Append n feature rows (features [n][feat]) of positions [ctx_len,
 * ctx_len + n) of slot to its context cache. -1 when it does not fit. */
int tb_dflash_append(tb_dflash_state *st, int slot, const float *features, int n);
/* Keep the first n_keep context positions of slot (n_keep <= held). */
int tb_dflash_rollback(tb_dflash_state *st, int slot, int n_keep);
int tb_dflash_ctx_len(const tb_dflash_state *st, int slot);

/* Draft a block for each of n_seqs distinct slots: row 0 anchors[b], rows
 * 1 .. L - 1 the mask token, at positions [ctx_len, ctx_len + L) of slot
 * slots[b]; 2 <= L <= block_size. logits (NULL: not wanted) gets [n_seqs][L]
 * [vocab] of every row; draft (NULL: not wanted) [n_seqs][L - 1], the
 * argmax (first of equal maxima) of rows 1 .. L - 1. The caches are not
 * changed. -1 when the call does not fit. */
int tb_dflash_draft(tb_dflash_state *st, const int *slots, int n_seqs, const int32_t *anchors, int L, float *logits,
                    int32_t *draft);

#ifdef __cplusplus
}
#endif

#endif
