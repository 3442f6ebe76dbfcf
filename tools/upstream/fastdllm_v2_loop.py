"""Pure-Python transcription of Fast-dLLM v2's block-diffusion generation loops.

Standard library only.  The network is injected as

    logits_fn(canvas_tokens, query_positions, key_positions) -> list[list[float]]

returning one RAW logit row (full vocabulary) per query position, in order,
i.e. what `model.forward(...).logits` returns for those positions BEFORE the
loop applies the token shift.  `canvas_tokens[p]` is the token whose K/V the
upstream model uses at key position p (the current canvas, except for stale
block-cache entries when use_block_cache=True, see below).  If logits_fn also
accepts a keyword `rope_positions` (or **kwargs) it receives the RoPE position
of each query; for Fast-dLLM these can DIFFER from canvas positions (prompt
length == block_size case, see NOTES.md).

Upstream sources (control flow transcribed line by line):

  H. Efficient-Large-Model/Fast_dLLM_v2_7B  modeling.py
     Fast_dLLM_QwenForCausalLM.generate + sample_with_top_p  -- what
     `model.generate(...)` runs (v2/run_chatbot.py, the model-card Quickstart).
     The Hugging Face repo itself cannot be fetched here; the code was read from
     two independent GitHub copies that agree line for line apart from their own
     additions:  Satgoy152/DualDiffusion @189fa7a7
     FastDLLM-inferencing/Fast_dLLM_v2_7B/modeling.py (adds a `steps` cap;
     line numbers "HF Lnnn" below refer to this copy) and a second copy that adds
     unused top-2 margin lines.  NVlabs/Fast-dLLM v2/generation_functions.py
     mdm_sample_with_visualization (L171-323) has the same control flow.
     -> fastdllm_v2_generate()

  E. NVlabs/Fast-dLLM  v2/generation_functions.py  batch_sample (L17-168),
     which v2/eval.py binds as model.mdm_sample for lm-eval (all benchmark
     numbers).  Blob 76fc22d1d4eb, unchanged from d259b48a (2025-10-07)
     through 5332e2fc (2025-11-28), read from the fork lamawmouk/Fast-dLLM
     which carries NVlabs' history.  Transcribed for batch size 1.
     -> fastdllm_v2_batch_sample()

Softmax: sample_with_top_p (HF L763-795) takes torch.softmax over the FULL
vocabulary (vocab_size 152064) with nothing suppressed: the mask token
|<MASK>| (151665) is part of the distribution and can in principle be the
argmax (it would then be "committed" and stay a mask).  Same here.

Token shift: every full-block forward's logits are shifted right by one
inside the block: row i is used for position i+1, and position 0 of the block
reuses its OWN row (HF L730/L735/L739: cat(logits[:, :1], logits[:, :-1])).

Trace entries:
    kind         "prefill" | "denoise" | "commit" | "denoise_blockcache_refresh"
                 | "denoise_blockcache_reuse"
    block        block loop index (None for prefill)
    sub_block    sub-block index (None for prefill / commit)
    query        [start, end)  canvas positions of the forward's input tokens
    keys         list of [start, end) canvas spans attended
    attn         "block_causal" (prefill) or "full"
    rope         [start, end)  RoPE positions (past_seen_tokens + offset)
    update_cache forward appends its K/V to past_key_values
    committed    {position: token} written by this forward (commit forwards:
                 the appended next token)
    canvas_after x_t after the forward's commits (the growing sequence)
"""

import random

from common import NEG_INF, call_logits as _call_logits, multinomial as _multinomial, softmax as _softmax


def _argmax(row):
    # torch.argmax: index of the FIRST maximal value
    best, bi = None, 0
    for i, v in enumerate(row):
        if best is None or v > best:
            best, bi = v, i
    return bi


def sample_with_top_p(rows, top_p=0.95, temperature=1.0, rng=None):
    """HF L763-795.  Returns (x_1 list, p_1t list of prob rows)."""
    if temperature > 0:                                             # L765
        xs, ps = [], []
        for row in rows:
            probs = _softmax([v / temperature for v in row])        # L766, L772
            order = sorted(range(len(probs)), key=lambda i: (-probs[i], i))  # L774
            cum, c = [], 0.0
            for i in order:
                c += probs[i]
                cum.append(c)
            remove = [cv > top_p for cv in cum]                     # L777
            remove = [False] + remove[:-1]                          # L778-779
            for rank, i in enumerate(order):                        # L781-785
                if remove[rank]:
                    probs[i] = 0.0
            s = sum(probs)                                          # L789-790
            probs = [q / s for q in probs]
            xs.append(_multinomial(probs, rng))                     # L793 (torch RNG)
            ps.append(probs)
        return xs, ps
    # L767-770: temperature <= 0 -> greedy; p_1t = softmax over full vocab
    ps = [_softmax(row) for row in rows]
    xs = [_argmax(p) for p in ps]
    return xs, ps


def _spans(positions):
    out = []
    for p in positions:
        if out and out[-1][1] == p:
            out[-1][1] = p + 1
        else:
            out.append([p, p + 1])
    return out


class _Model:
    """Tracks past_key_values (as the list of canvas positions whose K/V it
    holds; None when upstream's variable is None), the optional block cache,
    and records every forward."""

    def __init__(self, logits_fn):
        self.logits_fn = logits_fn
        self.past = None            # upstream `past_key_values`
        self.trace = []
        self.nfe = 0

    def forward(self, kind, x_t, q_positions, update, block, sub_block,
                attn="full", kv_view=None, rope_offset=0, extra_keys=None):
        """Model.forward (HF L440-525 + attention L175-254).
        RoPE positions = past_seen_tokens (+replace_position) + arange(len)
        (HF L469-487), independent of where the tokens sit in the canvas."""
        past_seen = len(self.past) if self.past is not None else 0
        rope = [past_seen + rope_offset + i for i in range(len(q_positions))]
        if extra_keys is not None:       # block-cache reuse: whole block cache
            keys = (self.past or []) + list(extra_keys)
        else:
            keys = (self.past or []) + list(q_positions)
        canvas = kv_view if kv_view is not None else x_t
        rows = _call_logits(self.logits_fn, canvas, q_positions, keys, rope)
        self.nfe += 1
        if update:
            # use_cache=True with past None creates a DynamicCache (HF L458-459)
            # that the caller stores back (HF L674, L705)
            self.past = (self.past or []) + list(q_positions)
        ent = {"kind": kind, "block": block, "sub_block": sub_block,
               "query": [q_positions[0], q_positions[-1] + 1],
               "keys": _spans(keys), "attn": attn,
               "rope": [rope[0], rope[-1] + 1], "update_cache": update,
               "committed": {}, "canvas_after": list(x_t)}
        self.trace.append(ent)
        return rows, ent


def _shift(rows):
    # torch.cat([logits[:, :1, :], logits[:, :-1, :]], dim=1)
    return [rows[0]] + rows[:-1]


def _denoise_step(model, x_t, block_size, small_block_start_idx, start_i, end_i,
                  mask_idx, use_block_cache, bc, block_idx, sbi, top_p,
                  temperature, threshold, mask_id, rng):
    """One sub-block denoising forward + commit (HF L726-754; identical in
    generation_functions.py batch_sample L101-123).  start_i/end_i are
    absolute canvas indices of the sub-block; mask_idx covers the last block.
    Returns (trace entry, x_1, unmask_idx)."""
    L = len(x_t)
    blk = list(range(L - block_size, L))
    if use_block_cache:
        if bc["kv"] is None or x_t[L - block_size + small_block_start_idx] == mask_id:
            # HF L727-732: refresh -- full block forward, builds a NEW block cache
            rows, ent = model.forward("denoise_blockcache_refresh", x_t, blk, False,
                                      block_idx, sbi)
            bc["kv"] = {p: x_t[p] for p in blk}   # tokens the block-cache K/V encode
            rows = _shift(rows)[start_i - (L - block_size):end_i - (L - block_size)]
        else:
            # HF L733-736: only the sub-block is fed; K/V of the other block
            # positions come from the block cache (stale: computed at the last
            # refresh).  Sub-block K/V are replaced in place (HF L218-225).
            view = list(x_t)
            for p, t in bc["kv"].items():
                if not (start_i <= p < end_i):
                    view[p] = t
            q = list(range(start_i, end_i))
            rows, ent = model.forward("denoise_blockcache_reuse", x_t, q, False,
                                      block_idx, sbi, kv_view=view,
                                      rope_offset=small_block_start_idx,
                                      extra_keys=blk)
            for p in q:
                bc["kv"][p] = x_t[p]
            rows = _shift(rows)   # shift WITHIN the sub-block (row 0 reuses itself)
    else:
        # HF L737-741: full last-block forward, no cache update
        rows, ent = model.forward("denoise", x_t, blk, False, block_idx, sbi)
        rows = _shift(rows)[start_i - (L - block_size):end_i - (L - block_size)]

    # HF L744-754
    x_1, p_1t = sample_with_top_p(rows, top_p=top_p, temperature=temperature, rng=rng)
    sub_mask = mask_idx[start_i - (L - block_size):end_i - (L - block_size)]
    x1_p = [p_1t[i][x_1[i]] if sub_mask[i] else NEG_INF for i in range(len(x_1))]
    unmask_idx = [p > threshold for p in x1_p]                      # L749
    unmask_idx[_argmax(x1_p)] = True                                # L750-751
    unmask_idx = [u and m for u, m in zip(unmask_idx, sub_mask)]    # L752
    for i, u in enumerate(unmask_idx):                              # L754
        if u:
            x_t[start_i + i] = x_1[i]
            ent["committed"][start_i + i] = x_1[i]
    ent["canvas_after"] = list(x_t)
    return ent, x_1, unmask_idx


def _stop_and_no_mask_before(x_t, prompt_length, stop_token, mask_id):
    # HF L696-699 / L721-724:
    # if stop in x_t[prompt_length:] and no mask before its first occurrence
    tail = x_t[prompt_length:]
    if stop_token in tail:
        idx = tail.index(stop_token)
        if mask_id not in tail[:idx]:
            return True
    return False


# ----------------------------------------------------------------------------
# H. model.generate  (HF modeling.py; == generation_functions.py
#    mdm_sample_with_visualization control flow)
# ----------------------------------------------------------------------------

def fastdllm_v2_generate(logits_fn, input_ids, max_new_tokens, mask_id=151665,
                         threshold=1, small_block_size=8, block_size=32,
                         stop_token=151645, top_p=0.95, temperature=0,
                         use_block_cache=False, seed=0):
    """Returns (tokens_returned, nfe, trace).  tokens_returned = upstream's
    return value input_ids[0]: prompt + generated, truncated right after the
    first stop_token if one was generated (HF L757-761)."""
    rng = random.Random(seed)
    model = _Model(logits_fn)
    input_ids = list(input_ids)
    num_blocks = max_new_tokens // block_size                        # L668
    original_input_length = len(input_ids)                           # L669

    if len(input_ids) > block_size:                                  # L672 (strict >)
        n = len(input_ids) // block_size * block_size
        rows, ent = model.forward("prefill", input_ids, list(range(n)), True,
                                  None, None, attn="block_causal")   # L673-674
        if len(input_ids) % block_size == 0:                         # L675
            next_token = _argmax(rows[-1])                           # L676 raw-logit argmax
            input_ids.append(next_token)                             # L677
            ent["committed"][n] = next_token
            ent["canvas_after"] = list(input_ids)
    else:
        model.past = None                                            # L679

    num_small_blocks = block_size // small_block_size                # L681

    for block_idx in range(num_blocks):                              # L683
        if stop_token in input_ids[original_input_length:]:          # L684-685
            break
        prompt_length = len(input_ids)                               # L686
        x_init = input_ids + [mask_id] * (block_size - prompt_length % block_size)  # L688-689
        x_t = list(x_init)                                           # L691
        bc = {"kv": None}                                            # L692
        while True:                                                  # L693
            if _stop_and_no_mask_before(x_t, prompt_length, stop_token, mask_id):  # L696-699
                break
            mask_idx = [t == mask_id for t in x_t[-block_size:]]     # L700
            if sum(mask_idx) == 0:                                   # L702
                # L703-708 commit forward: whole block, update cache, append
                # argmax of the block's LAST raw row as the next token.
                L = len(x_t)
                rows, ent = model.forward("commit", x_t, list(range(L - block_size, L)),
                                          True, block_idx, None)
                next_token = _argmax(rows[-1])
                x_t.append(next_token)
                ent["committed"][L] = next_token
                ent["canvas_after"] = list(x_t)
                break
            for small_block_idx in range(num_small_blocks):          # L709
                small_block_start_idx = small_block_idx * small_block_size
                small_block_end_idx = small_block_start_idx + small_block_size
                L = len(x_t)
                start_i = L - block_size + small_block_start_idx      # L713
                end_i = L - block_size + small_block_end_idx          # L714
                while True:                                          # L715
                    mask_idx = [t == mask_id for t in x_t[-block_size:]]  # L718
                    if sum(mask_idx[start_i - (L - block_size):end_i - (L - block_size)]) == 0:
                        break                                        # L719-720
                    if _stop_and_no_mask_before(x_t, prompt_length, stop_token, mask_id):
                        break                                        # L721-724
                    _denoise_step(model, x_t, block_size, small_block_start_idx,
                                  start_i, end_i, mask_idx, use_block_cache, bc,
                                  block_idx, small_block_idx, top_p, temperature,
                                  threshold, mask_id, rng)
        input_ids = x_t                                              # L756
    # L757-760 truncate after the first stop token
    if stop_token in input_ids[original_input_length:]:
        idx = input_ids[original_input_length:].index(stop_token)
        input_ids = input_ids[:idx + original_input_length + 1]
    return input_ids, model.nfe, model.trace                         # L761


# ----------------------------------------------------------------------------
# E. generation_functions.py batch_sample  (lm-eval path), batch size 1
# ----------------------------------------------------------------------------

class UpstreamCrash(RuntimeError):
    pass


def fastdllm_v2_batch_sample(logits_fn, input_ids, max_new_tokens, block_size=32,
                             small_block_size=8, mask_id=151665, threshold=0.95,
                             stop_token=151645, use_block_cache=False, top_p=0.95,
                             temperature=0.0, pad_token_id=151643, seed=0):
    """Batch size 1 (min_len == seq_len == len(input_ids)).
    Returns (tokens_returned, nfe, trace); tokens_returned = finished_samples[0]
    (L146/L165): the full x_t, NOT truncated; after a stop token every later
    position of the canvas is replaced by pad_token_id (L75-78).  eval.py
    then decodes generated_ids[seq_len:] with skip_special_tokens=True."""
    rng = random.Random(seed)
    model = _Model(logits_fn)
    input_ids = list(input_ids)
    seq_len = min_len = len(input_ids)
    # L33  (seq_len.max() == seq_len for B=1)
    num_blocks = max_new_tokens // block_size + seq_len // block_size

    if min_len > block_size:                                         # L36 (strict >)
        n = min_len // block_size * block_size
        rows, ent = model.forward("prefill", input_ids, list(range(n)), True,
                                  None, None, attn="block_causal")   # L37-38
        if min_len % block_size == 0:                                # L39-46
            next_token = _argmax(rows[-1])
            if len(input_ids) <= min_len:
                input_ids.append(next_token)
            else:
                input_ids[min_len] = next_token
            ent["committed"][n] = next_token
            ent["canvas_after"] = list(input_ids)
    else:
        model.past = None                                            # L48

    seq_block_idx = seq_len // block_size                            # L50 (original seq_len)
    finished_flag = False                                            # L51
    start_block_idx = min_len // block_size                          # L53
    num_small_blocks = block_size // small_block_size                # L54
    finished_sample = None
    x_t = None
    for block_idx in range(start_block_idx, num_blocks):            # L58
        if finished_flag:                                            # L59-60
            break
        if seq_block_idx == block_idx:                               # L61-64 (always, B=1)
            x_init = input_ids + [mask_id] * (block_size - len(input_ids) % block_size)
            input_ids = x_init
        else:
            x_init = input_ids[:(block_idx + 1) * block_size]        # L66 (unreachable, B=1)
        x_t = list(x_init)                                           # L68-69
        block_past = {"kv": None}                                    # L71
        while True:                                                  # L72
            mask_idx = [t == mask_id for t in x_t[-block_size:]]     # L73
            if sum(mask_idx) == 0:                                   # L74
                if finished_flag and seq_len < (block_idx + 1) * block_size:  # L75-78
                    k = x_t[seq_len:].index(stop_token)
                    for p in range(seq_len + k + 1, len(x_t)):
                        x_t[p] = pad_token_id
                if finished_flag:                                    # L79-80: no commit forward
                    break
                L = len(x_t)                                         # L81-88
                rows, ent = model.forward("commit", x_t, list(range(L - block_size, L)),
                                          True, block_idx, None)
                next_token = _argmax(rows[-1])
                x_t.append(next_token)
                ent["committed"][L] = next_token
                ent["canvas_after"] = list(x_t)
                break
            for small_block_idx in range(num_small_blocks):          # L90
                small_block_start_idx = small_block_idx * small_block_size
                L = len(x_t)
                start_i = L - block_size + small_block_start_idx      # L94
                end_i = start_i + small_block_size                   # L95
                while True:                                          # L96
                    mask_idx = [t == mask_id for t in x_t[-block_size:]]
                    if sum(mask_idx[start_i - (L - block_size):end_i - (L - block_size)]) == 0:
                        break                                        # L97-99 (no stop check here)
                    ent, x_1, unmask = _denoise_step(
                        model, x_t, block_size, small_block_start_idx, start_i, end_i,
                        mask_idx, use_block_cache, block_past, block_idx,
                        small_block_idx, top_p, temperature, threshold, mask_id, rng)
                    # L125-126: finished once a stop token is COMMITTED (masks
                    # before it or not); decoding of the block continues.
                    if any(t == stop_token and u for t, u in zip(x_1, unmask)):
                        finished_flag = True
        # L130-141: input_ids <- x_t (equal content for B=1)
        input_ids = list(x_t)
        seq_block_idx = block_idx + 1                                # L141
        if finished_flag:                                            # L142-157
            finished_sample = list(x_t)
            if model.past is None:
                # L153: `for layer_id in range(len(past_key_values))` with
                # past_key_values None -> TypeError upstream.
                raise UpstreamCrash(
                    "batch_sample: stop token in a block decoded without any "
                    "cache (prompt <= block_size, first block): "
                    "len(None) TypeError at generation_functions.py L153")
            break   # batch now empty: L59 `finished_flag.all()` on empty -> True
    if finished_sample is None:                                      # L162-165
        if x_t is None:
            # block loop never ran (max_new_tokens < block_size): upstream
            # reads x_t.shape at L163 -> UnboundLocalError
            raise UpstreamCrash("batch_sample: no block decoded, x_t unbound at L163")
        finished_sample = x_t
    return finished_sample, model.nfe, model.trace                   # L168
