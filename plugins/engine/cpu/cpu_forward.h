/* cpu_forward.h — the transformer forward pass on the CPU: float32,
 * OpenBLAS for every matrix product (attention included), so its threads
 * are the only ones; the element-wise steps are single-threaded and cost
 * O(rows x hidden) against the GEMMs' O(rows x hidden^2).
 *
 * A state holds the KV cache of up to max_seqs sequences of up to max_len
 * positions and the scratch buffers for one call. A call appends n_new
 * tokens to each of n_seqs sequences (the same count for all: the runner's
 * batches share lengths) and returns logits. Attention is causal (AR),
 * bidirectional (diffusion: every position sees every position) or
 * block-causal (block diffusion: a position sees every position of its own
 * block and of the blocks before it; blocks of k positions counted from
 * position 0). A `causal` argument is that mask's block: 0 bidirectional,
 * 1 causal, k > 1 block-causal. */
#ifndef TB_ENGINE_CPU_FORWARD_H
#define TB_ENGINE_CPU_FORWARD_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "moe.h"

typedef struct tb_cpu_state {
    const tb_model *m;
    int max_seqs, max_len, max_rows; /* rows = n_seqs * n_new per call */
    float *k_cache, *v_cache; /* [n_layers][max_seqs][max_len][kv_dim] */
    int *seq_len;             /* [max_seqs]: positions held */
    int *pad;                 /* [max_seqs]: left-padding positions of each
                                 sequence (text prompts of unequal length):
                                 masked as keys, and RoPE counts positions
                                 from the first real token, as transformers
                                 does with an attention mask */
    /* [max_seqs]: the layout of one call: sequence b of the call is cache
     * slot seq_slot[b], its rows start at position seq_pos0[b] and attend
     * to [0, seq_attend[b]) (set by each entry point) */
    int *seq_slot, *seq_pos0, *seq_attend;
    float *x;       /* [rows][hidden]: the residual stream */
    float *xn;      /* [rows][hidden]: normalized */
    float *qkv;     /* [rows][(n_heads + 2 n_kv) head_dim] */
    float *att;     /* [rows][n_heads head_dim]: attention output */
    float *gu;      /* [rows][2 intermediate]: gate | up, then silu(g) u */
    float *scores;  /* [max_rows][max_len]: one head's attention matrix */
    /* MoE models only (n_experts > 0): the layer's config, its scratch, and
     * its output [rows][hidden] before the residual add */
    tb_moe_config moe_cfg;
    tb_moe_scratch moe;
    float *moe_out;
    /* counts since the caller last zeroed them (tb_result's expert_reads
     * and moe_tokens): distinct experts read, summed over MoE layer calls,
     * and the rows those calls processed */
    double expert_reads, moe_rows;
    /* Tensor parallelism (tp_split.h), NULL otherwise: the model is one
     * rank's shard, and allreduce is called on each row-parallel partial
     * sum, [rows][hidden] (attention's o_proj output and the MLP's
     * down_proj output), which it must replace with the sum over the ranks
     * before the residual add. */
    void (*allreduce)(void *ctx, float *buf, size_t n);
    void *allreduce_ctx;
    /* dtype = fp8 (set from m->fp8 at init): each projection's input rows
     * are rounded to bf16, then to their E4M3 form (fp8.h: one
     * power-of-two scale per row) before the product, as the device's FP8
     * kernels read them */
    int fp8_act;
    /* Captured hidden states (tb_cpu_set_capture), off when n_capture 0:
     * the layers, and [max_rows][n_capture][hidden] of the last capturing
     * call's capture_rows rows */
    int *capture_layers, n_capture;
    float *capture;
    int capture_rows;
    int n_threads;
    size_t bytes;   /* allocated, for reporting */
} tb_cpu_state;

/* n_threads <= 0: all online CPUs. */
int tb_cpu_state_init(tb_cpu_state *st, const tb_model *m, int max_seqs, int max_len,
                      int max_rows, int n_threads, char *err, size_t err_size);
/* Threads for OpenBLAS and OpenMP from now on. */
void tb_cpu_set_threads(tb_cpu_state *st, int n_threads);
/* Forget every sequence (lengths and padding to 0). */
void tb_cpu_state_reset(tb_cpu_state *st);
/* Left padding of sequences [0, n): pad[i] leading positions of sequence i
 * hold filler tokens that no real position attends to. Set after a reset,
 * before the first forward; returns -1 when n > max_seqs. */
int tb_cpu_set_padding(tb_cpu_state *st, const int *pad, int n);
void tb_cpu_state_free(tb_cpu_state *st);

/* Autoregressive step: tokens [n_seqs][n_new] appended after what the
 * cache holds (every sequence holds the same length). logits:
 * [n_seqs][all_logits ? n_new : 1][vocab]. Returns 0, or -1 when the call
 * does not fit the state. */
int tb_cpu_forward(tb_cpu_state *st, const int32_t *tokens, int n_seqs, int n_new, int causal,
                   int all_logits, float *logits);

/* Iteration-level batching (a server's continuous batches): sequence b
 * of the call is cache slot slots[b] (distinct), and its n_new tokens
 * tokens[b][n_new] are appended after what that slot holds, whatever the
 * other slots hold: a joining request's prefill (one slot, n_new = its
 * prompt) and a decode step of the running ones (n_new = 1) are both
 * calls of this. Causal; logits of each sequence's last row:
 * [n_seqs][vocab]. Returns 0, or -1 when the call does not fit. */
int tb_cpu_forward_slots(tb_cpu_state *st, const int32_t *tokens, const int *slots, int n_seqs, int n_new,
                         float *logits);
/* Forget slot's sequence (length and padding 0), for the next request. */
void tb_cpu_slot_reset(tb_cpu_state *st, int slot);

/* Speculative decoding (engine.h's verify_slots and draft_span_slots):
 * sequence b of the call is cache slot slots[b] (distinct), its n_new
 * tokens sit at positions [len_b, len_b + n_new), len_b = what the slot
 * holds (ragged), their keys and values written there, attending to [0,
 * len_b + n_new) under mask_block relative to the slot's positions (1:
 * causal; 0: the span bidirectional over the prefix). grow: each slot's
 * length grows by n_new (else it stays: a draft that the next call
 * overwrites). logits: all rows [n_seqs][n_new][vocab] when all_logits,
 * else each sequence's last row [n_seqs][vocab]; NULL runs no LM head.
 * capture: keep the hidden states of tb_cpu_set_capture's layers. 0, or
 * -1 when the call does not fit. */
int tb_cpu_forward_ragged(tb_cpu_state *st, const int32_t *tokens, const int *slots, int n_seqs, int n_new,
                          int mask_block, int grow, int all_logits, int capture, float *logits);
/* Roll slot back to its first len positions (0 <= len <= its length):
 * later calls overwrite what was after and never read it first. -1 when
 * out of range. */
int tb_cpu_slot_truncate(tb_cpu_state *st, int slot, int len);
/* From now on a capturing forward keeps, for each of its rows, the
 * residual stream after each layer layers[j] (0-based, before the final
 * norm): st->capture [rows][n][hidden], st->capture_rows rows. n 0: off.
 * -1 (out of memory, a layer out of range) leaves it off. */
int tb_cpu_set_capture(tb_cpu_state *st, const int *layers, int n);

/* Bidirectional forward of a span, for diffusion: the n_new tokens of each
 * sequence sit at positions [pos0, pos0 + n_new); their keys and values
 * overwrite the cache there; every row attends to positions [0, n_attend),
 * the rest taken from the cache (a prefix or dual cache). All rows' logits:
 * [n_seqs][n_new][vocab]. The state's sequence lengths are not used. */
int tb_cpu_forward_at(tb_cpu_state *st, const int32_t *tokens, int n_seqs, int pos0, int n_new, int n_attend,
                      float *logits);

/* Block diffusion: sequence b of the call is cache slot slots[b]
 * (distinct); its n_new tokens tokens[b][n_new] sit at positions [pos0,
 * pos0 + n_new), their keys and values overwrite the slot's cache there,
 * and they attend to [0, n_attend) under mask_block (0 bidirectional, 1
 * causal, k > 1 block-causal), the rest from the cache: a prompt prefill
 * (block-causal over whole blocks), a block's denoising step over the exact
 * cache of the blocks before it, or a sub-block over that cache and its
 * own block's. Logits of rows [head_row0, head_row0 + head_rows) of each
 * sequence: [n_seqs][head_rows][vocab]; head_rows 0 runs no LM head (a
 * forward that only stores the cache). Returns 0, or -1 when the call does
 * not fit. */
int tb_cpu_forward_rows(tb_cpu_state *st, const int32_t *tokens, const int *slots, int n_seqs, int pos0, int n_new,
                        int n_attend, int mask_block, int head_row0, int head_rows, float *logits);

/* The element-wise steps every CPU forward shares (the engine's and the
 * DFlash drafter's, dflash.c): y[r] = x[r] / rms(x[r]) * w over rows of
 * width n (transformers' RMSNorm: mean of squares in float32, then
 * rsqrt(. + eps)); half-split (NeoX) rotary embedding of the first
 * rope_dim dims of one head vector at position pos. */
void tb_cpu_rmsnorm(float *y, const float *x, const float *w, int rows, int n, double eps);
void tb_cpu_rope(float *v, int rope_dim, int pos, const float *inv_freq);

/* The layers without the LM head: after the call st->x holds the final
 * hidden states (before the final norm) of the n_seqs * n_new rows. For
 * tests that compare per-layer states: stop after `n_layers` layers. */
int tb_cpu_forward_hidden(tb_cpu_state *st, const int32_t *tokens, int n_seqs, int n_new,
                          int causal, int n_layers);

#endif
