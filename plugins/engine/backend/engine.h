/* engine.h — the transformer engine behind one interface, ggml's
 * {iface; context}: the operations a backend runs on a loaded model, with a
 * CPU implementation (engine_cpu.c over cpu_forward.h) and a CUDA one
 * (engine_cuda.c over gpu.h), so a backend's loops are written once and
 * the device is chosen once, at tb_engine_open. The ar backend runs
 * every operation but the spans; diffusion runs the cache, padding,
 * threads, work and describe operations, and its samplers' forward is
 * bound to the engine (plugins/diffusion: cpu_engine.c over the spans,
 * cuda_engine.c picking on the device).
 *
 * Sequences are the rows of the KV cache. A token choice comes back one of
 * two ways, the caller's pick: with `logits` NULL each sequence's greedy
 * token (first maximum, as tb_argmax) into next[]; with `logits` given,
 * each sequence's last row of logits into logits [n][vocab] (sampling on
 * the host) and next[] left as it is. Every operation returns 0, or -1
 * with the reason in error(). */
#ifndef TB_ENGINE_ENGINE_H
#define TB_ENGINE_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include <tokbench/backend.h>

#include "backend_common.h"

typedef struct tb_engine_iface {
    /* Room for `seqs` sequences of `len` positions and `rows` tokens in one
     * forward; what is held already is kept when it is enough. The reason
     * in err (an allocation failure says "out of memory"). */
    int (*reserve)(void *ctx, int seqs, int len, int rows, char *err, size_t err_size);
    /* CPU threads from now on (n > 0); the CUDA engine has none to set. */
    void (*set_threads)(void *ctx, int n);
    /* Before a prefill: forget every sequence; sequence i < n starts with
     * pad[i] positions of left padding (masked as keys, RoPE counted from
     * the first real token); pad NULL: none. */
    int (*set_padding)(void *ctx, const int *pad, int n);
    /* Causal prefill of sequences 0 .. B - 1 from position 0: tokens
     * [B][P]; their next tokens (or logits) as above. */
    int (*prefill)(void *ctx, const int32_t *tokens, int B, int P, int32_t *next, float *logits);
    /* One decode step of sequences 0 .. B - 1: next[b] is appended to
     * sequence b, then overwritten with its greedy token (or the logits
     * come back and next[] stays). */
    int (*decode)(void *ctx, int32_t *next, int B, float *logits);
    /* Continuous batching, sequences as slots each at its own length:
     * prompts tokens [B][P] into the distinct slots slots[B] from position
     * 0 (what they held forgotten); then decode steps of B distinct slots,
     * next[b] appended to slot slots[b]. Padding must be clear. */
    int (*prefill_slots)(void *ctx, const int32_t *tokens, const int *slots, int B, int P, int32_t *next,
                         float *logits);
    int (*decode_slots)(void *ctx, const int *slots, int B, int32_t *next, float *logits);
    /* Every position's logits [n][vocab] of one causal sequence of n
     * tokens from position 0 (scoring: loglik); padding must be clear. */
    int (*logits_all)(void *ctx, const int32_t *tokens, int n, float *logits);
    /* Diffusion's spans, logits on the host (the CPU engine's picks run
     * there; plugins/diffusion/cpu_engine.c). forward_span: tokens
     * [B][n] of sequences 0 .. B - 1 at positions [pos0, pos0 + n), their
     * keys and values written to the cache there, every row attending to
     * [0, n_attend) (bidirectional); all rows' logits [B][n][vocab].
     * forward_span_rows: as cpu_forward.h's tb_cpu_forward_rows (cache
     * slots, a mask block, the logits of head rows [head_row0, head_row0 +
     * head_rows) only). Optional: NULL where the engine picks on the device
     * instead (CUDA: plugins/diffusion/cuda_engine.c). */
    int (*forward_span)(void *ctx, const int32_t *tokens, int B, int pos0, int n, int n_attend, float *logits);
    int (*forward_span_rows)(void *ctx, const int32_t *tokens, const int *slots, int B, int pos0, int n,
                             int n_attend, int mask_block, int head_row0, int head_rows, float *logits);
    /* Speculative decoding (issue 40), over the slots above; tokens
     * [B][n] of B distinct slots, each slot at its own length len_b
     * (ragged). Row r = b * n + i of a call is token i of slot slots[b],
     * at position len_b + i. Outputs, each NULL when not wanted: argmax
     * [B][n], every row's greedy token (first maximum, as tb_argmax; on
     * CUDA chosen on the device, only the ids come back); logits
     * [B][n][vocab] on the host (CUDA copies them only when asked). Padding
     * must be clear. n <= the reserved rows / B and len_b + n <= the
     * reserved length.
     *
     * verify_slots: the target's verification of a drafted block: the n
     * tokens are appended to each slot, causal (row i sees the slot's
     * prefix and rows 0 .. i of its own slot), and each slot's length grows
     * by n. Equal to n decode_slots steps (within float rounding; the
     * argmax equal where the top two logits are not that close).
     * truncate_slot: roll slot back to its first len positions (0 <= len
     * <= its length): what was after is forgotten, overwritten by the next
     * call, and never read before; a rollback then the same call again
     * gives bit-identical outputs to the first time. decode_slots and
     * verify_slots continue from len.
     * draft_span_slots: self-speculation's draft on a block-diffusion
     * model: the n tokens sit at positions [len_b, len_b + n) of each slot,
     * attend to the slot's prefix [0, len_b) and bidirectionally to each
     * other (mask block 0 over the span: tb_cpu_forward_rows with
     * mask_block 0, pos0 len_b, n_attend len_b + n); their keys and values
     * are written there, but the slot's length does not grow (the
     * verification that follows overwrites them). Each row's own output,
     * unshifted: a shifted model's caller reads row i - 1 for token i.
     *
     * Target features for a DFlash drafter: set_capture(layers[n_layers])
     * makes every later prefill_slots and verify_slots call keep, for each
     * row of the call, the residual stream after decoder layer layers[j]
     * (counted from 0: the output of model.layers[l], before the final
     * norm, which is transformers' hidden_states[l + 1], index 0 being the
     * embeddings; DFlash's target_layer_ids index the same way, reading
     * hidden_states[l + 1]. The last layer differs: transformers' last
     * entry is after the final norm, ours is not). Layers distinct or not,
     * any order, each 0 <= l < n_layers of the model; n_layers 0 turns it
     * off (no cost; decode_slots, draft_span_slots and the others never
     * capture). captured: the last capturing call's states, float32
     * [rows][n_layers][hidden] (row r as above: b * n + i; a prefill's
     * rows b * P + i), *rows set to their count; valid until the next
     * capturing call or set_capture. CPU: a host pointer. CUDA: a device
     * pointer (in the device model's context, written on its stream, done
     * when the call returns). NULL with *rows 0 when nothing is captured.
     * All five optional in the iface's type (NULL: unsupported); both
     * engines here have them. */
    int (*verify_slots)(void *ctx, const int32_t *tokens, const int *slots, int B, int n, int32_t *argmax,
                        float *logits);
    int (*truncate_slot)(void *ctx, int slot, int len);
    int (*draft_span_slots)(void *ctx, const int32_t *tokens, const int *slots, int B, int n, int32_t *argmax,
                            float *logits);
    int (*set_capture)(void *ctx, const int *layers, int n_layers);
    const float *(*captured)(void *ctx, int *rows);
    /* The roofline's work and the MoE counts of a call: work_start before
     * it forgets earlier work; work_report after it fills the fields of
     * res that this engine measures (tb_result's flops, bytes, ceilings,
     * expert_reads, moe_tokens, where res has them). */
    void (*work_start)(void *ctx);
    void (*work_report)(void *ctx, tb_result *res);
    /* For describe(): the device ("cpu", or the GPU's name: "NVIDIA
     * H200"); the tensor-parallel rank count (0: none); the kernels that
     * run the products, NULL where there is nothing to say (the CPU: its
     * BLAS is in describe() already). */
    const char *(*device_name)(void *ctx);
    int (*tensor_parallel)(void *ctx);
    const char *(*kernels)(void *ctx);
    const char *(*error)(void *ctx);
    void (*free)(void *ctx);
} tb_engine_iface;

typedef struct tb_engine {
    const tb_engine_iface *iface;
    void *ctx;
} tb_engine;

/* The engine of ld on its device: CUDA when ld holds a device model
 * (ld->gpu), else the CPU with `threads` (<= 0: every online CPU). Nothing
 * is allocated for the cache until reserve. 0, or -1 (out of memory). */
int tb_engine_open(tb_engine *e, tb_loaded *ld, int threads);
/* The two implementations (tb_engine_open picks one). */
int tb_engine_open_cpu(tb_engine *e, const tb_model *m, int threads);
#ifdef TB_HAVE_CUDA
int tb_engine_open_cuda(tb_engine *e, tb_loaded *ld);
#endif
/* Free e's context (an engine never opened, or closed: nothing). */
void tb_engine_close(tb_engine *e);
/* The CPU engine's greedy choice among ids [0, n) only (tb_loaded's
 * pick_vocab; tb_engine_open sets it; <= 0: the whole vocabulary). */
void tb_engine_cpu_pick_vocab(tb_engine *e, int n);
/* Tests: the CPU engine's state (the MoE router's margins), NULL for
 * another engine or before its first reserve. */
struct tb_cpu_state *tb_engine_cpu_state(const tb_engine *e);

#endif
