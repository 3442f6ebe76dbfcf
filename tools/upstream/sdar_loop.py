"""Pure-Python transcription of SDAR's block-diffusion generation loops.

Standard library only.  The network is injected as

    logits_fn(canvas_tokens, query_positions, key_positions) -> list[list[float]]

returning one logit row (full vocabulary) per query position, in order.
`canvas_tokens[p]` is the token whose K/V the upstream model would use at key
position p (for SDAR this is always the current canvas: cached K/V were
computed from tokens that never change afterwards).  If logits_fn also accepts
a keyword `rope_positions` (or **kwargs) it receives the RoPE position of each
query (for SDAR always equal to the canvas position).

Two upstream loops are transcribed, control flow line by line:

  A. `block_diffusion_generate` in JetAstra/SDAR  generate.py
     (repo snapshot HEAD c2041a8333333d685f6e15122c84f60f51f85ebd; the file was
     last changed in 1c06c39469e1821784dad920ba7ebe4a4e7995fe).
     -> sdar_generate_py()

  B. `block_diffusion_generate` in JetAstra/SDAR
     evaluation/opencompass/opencompass/models/huggingface_bd3.py
     (added in b050e17aeb5b9ef1f54c193ee149b459187da877, unchanged at HEAD
     c2041a8).  This is the HF-transformers evaluation path used by
     evaluation/opencompass/configs/eval_sdar_hf.py.
     -> sdar_opencompass_bd3()

Softmax: upstream applies F.softmax over the FULL vocabulary (config
vocab_size, 151936 for SDAR-4B/8B) including the mask token <|MASK|> (151669)
and the padded, never-trained ids.  Nothing is suppressed.  This file does the
same (softmax over every entry of the row that logits_fn returns).

Sampling: upstream uses torch.multinomial.  Here a seeded random.Random is
used instead, so sampled runs are NOT bit-identical to torch.  With top_k=1
(the official eval config) the draw is deterministic (one-hot distribution,
unless the top logit is tied).

Trace: every forward is recorded as a dict
    kind         "prefill" | "denoise" | "store"
    block        block index (None for prefill)
    step         denoising-step index inside the block (None for prefill)
    query        [start, end)  canvas positions fed as queries
    keys         [start, end)  canvas positions attended (cache + current)
    attn         "block_causal" (prefill) or "full" (one block vs all earlier)
    rope         [start, end)  RoPE positions of the queries
    store_kv     whether the forward appends its K/V to the cache
    committed    {position: token} written into the canvas by this forward
    canvas_after full canvas after the forward's commits
"""

import random

from common import NEG_INF, call_logits as _call_logits, multinomial as _multinomial, softmax as _softmax

# ----------------------------------------------------------------------------
# helpers reproducing the tensor ops upstream uses
# ----------------------------------------------------------------------------


def _top_k_logits(row, k):
    # generate.py L8-14 / huggingface_bd3.py L43-50
    if k <= 0:
        return list(row)
    values = sorted(row, reverse=True)[:k]
    min_value = values[-1]
    return [NEG_INF if v < min_value else v for v in row]


def _top_p_logits(row, p):
    # generate.py L17-26 / huggingface_bd3.py L52-64
    # torch.sort is not stable; ties are ordered by index here.
    order = sorted(range(len(row)), key=lambda i: (-row[i], i))
    sorted_logits = [row[i] for i in order]
    probs = _softmax(sorted_logits)
    cum, c = [], 0.0
    for q in probs:
        c += q
        cum.append(c)
    sorted_mask = [c > p for c in cum]
    sorted_mask = [False] + sorted_mask[:-1]          # shift right, keep first
    out = list(row)
    for rank, idx in enumerate(order):
        if sorted_mask[rank]:
            out[idx] = NEG_INF
    return out


def _topk_indices(values, k):
    # torch.topk(values, k) indices.  Tie order (including among -inf
    # entries) is implementation-defined on CUDA; here: larger value first,
    # then lower index first.
    order = sorted(range(len(values)), key=lambda i: (-values[i], i))
    return order[:k]


def get_num_transfer_tokens(block_length, steps):
    # generate.py L49-54 ; huggingface_bd3.py L94-108
    base = block_length // steps
    remainder = block_length % steps
    n = [base] * steps
    for i in range(remainder):
        n[i] += 1
    return n


class _Recorder:
    def __init__(self, logits_fn):
        self.logits_fn = logits_fn
        self.trace = []
        self.nfe = 0

    def forward(self, kind, block, step, canvas, q0, q1, k1, attn, store_kv):
        q = range(q0, q1)
        rows = _call_logits(self.logits_fn, canvas, q, range(0, k1), q)
        self.nfe += 1
        ent = {"kind": kind, "block": block, "step": step,
               "query": [q0, q1], "keys": [0, k1], "attn": attn,
               "rope": [q0, q1], "store_kv": store_kv,
               "committed": {}, "canvas_after": list(canvas)}
        self.trace.append(ent)
        return rows, ent


# ----------------------------------------------------------------------------
# A. generate.py  block_diffusion_generate   (c2041a8, lines cited)
# ----------------------------------------------------------------------------

def _sample_generate_py(rows, temperature, top_k, top_p, rng):
    # generate.py L29-46  sample_with_temperature_topk_topp
    toks, probs_out = [], []
    for row in rows:
        logits = list(row)
        if temperature != 1.0:                                   # L35
            if temperature == 0:
                raise ZeroDivisionError(
                    "generate.py divides logits by temperature; 0 gives inf/nan "
                    "(there is no greedy branch; use top_k=1)")
            logits = [v / temperature for v in logits]           # L36
        if top_k > 0:                                            # L37
            logits = _top_k_logits(logits, top_k)
        if top_p < 1.0:                                          # L39
            logits = _top_p_logits(logits, top_p)
        probs = _softmax(logits)       # L41: full vocab, mask token included
        t = _multinomial(probs, rng)                             # L43
        toks.append(t)
        probs_out.append(probs[t])     # L44: prob in the FILTERED distribution
    return toks, probs_out


def sdar_generate_py(logits_fn, prompt_ids, mask_id, gen_length=128,
                     block_length=8, denoising_steps=8, temperature=1.0,
                     top_k=0, top_p=1.0,
                     remasking_strategy="low_confidence_dynamic",
                     confidence_threshold=0.85, eb_threshold=None,
                     stopping_criteria_idx=None, seed=0):
    """Returns (tokens_returned, nfe, trace).

    tokens_returned is upstream's return value `x[0]`: the WHOLE canvas
    (prompt + every block, length num_blocks*block_length); blocks never
    reached after an early stop are left as mask_id (generate.py L202).
    """
    rng = random.Random(seed)
    rec = _Recorder(logits_fn)
    prompt_length = len(prompt_ids)                                   # L76
    # L79-81
    num_blocks = (prompt_length + gen_length + block_length - 1) // block_length
    total_length = num_blocks * block_length
    # L83-87 attention mask = block-level lower-triangular; positions = arange
    # L89-91
    x = [mask_id] * total_length
    x[:prompt_length] = list(prompt_ids)
    # L92-93
    prefill_blocks = prompt_length // block_length
    prefill_length = prefill_blocks * block_length

    # L95-106 prefill: one forward over all FULL prompt blocks, store_kv=True
    if prefill_length > 0:
        rec.forward("prefill", None, None, x, 0, prefill_length,
                    prefill_length, "block_causal", True)

    # L108-109
    num_transfer_tokens = get_num_transfer_tokens(block_length, denoising_steps)

    # L111-112 decode stage; the first decode block holds the prompt tail
    for num_block in range(prefill_blocks, num_blocks):
        b0 = num_block * block_length
        b1 = (num_block + 1) * block_length
        cur_x = x[b0:b1]                                              # L113 (.clone())
        for step in range(denoising_steps + 1):                      # L119
            mask_index = [t == mask_id for t in cur_x]                # L120
            if sum(mask_index) == 0:                                  # L121
                # L122-129 store-KV forward of the finished block; runs for
                # EVERY block, the last one included; logits unused.
                canvas = x[:b0] + cur_x + x[b1:]
                rec.forward("store", num_block, step, canvas, b0, b1, b1,
                            "full", True)
                break

            # L131-137 denoise forward (store_kv=False)
            canvas = x[:b0] + cur_x + x[b1:]
            rows, ent = rec.forward("denoise", num_block, step, canvas,
                                    b0, b1, b1, "full", False)
            # L140-145
            x0, x0_p = _sample_generate_py(rows, temperature, top_k, top_p, rng)

            transfer_index = [False] * block_length
            if remasking_strategy == "sequential":                    # L148-158
                if any(mask_index):
                    first = mask_index.index(True)
                    for i in range(first, min(block_length,
                                              first + num_transfer_tokens[step])):
                        transfer_index[i] = True
                else:
                    raise ValueError("No mask tokens found in the current block.")
            elif remasking_strategy == "low_confidence_static":       # L160-166
                confidence = [p if m else NEG_INF for p, m in zip(x0_p, mask_index)]
                for i in _topk_indices(confidence, num_transfer_tokens[step]):
                    transfer_index[i] = True
            elif remasking_strategy == "low_confidence_dynamic":      # L168-179
                confidence = [p if m else NEG_INF for p, m in zip(x0_p, mask_index)]
                high_conf_mask = [c > confidence_threshold for c in confidence]
                num_high_confidence = sum(high_conf_mask)
                if num_high_confidence >= num_transfer_tokens[step]:  # L174
                    transfer_index = high_conf_mask
                else:
                    for i in _topk_indices(confidence, num_transfer_tokens[step]):
                        transfer_index[i] = True
            elif remasking_strategy == "entropy_bounded":             # L180-190
                # Upstream branch never initialises `transfer_index` and sums
                # the entropy over the block axis: it raises
                # UnboundLocalError on its first use.  Not reproducible.
                raise NotImplementedError(
                    "generate.py entropy_bounded branch is broken upstream "
                    "(transfer_index unbound at L190)")
            else:
                raise ValueError("Unknown remasking strategy: %s" % remasking_strategy)

            # L196  cur_x[transfer_index] = x0[transfer_index]
            # NOTE: no torch.where(mask_index, x0, cur_x) here: when topk is
            # asked for more positions than there are masks it selects
            # -inf (non-mask) positions and OVERWRITES them with the sampled
            # token (prompt tail or earlier commits).  Happens only when
            # num_transfer_tokens[step] > remaining masks, i.e. steps <
            # block_length; never with block_length == denoising_steps.
            for i in range(block_length):
                if transfer_index[i]:
                    if mask_index[i]:
                        ent["committed"][b0 + i] = x0[i]
                    else:  # upstream quirk: non-mask position overwritten
                        ent.setdefault("overwrote_nonmask", {})[b0 + i] = [cur_x[i], x0[i]]
                    cur_x[i] = x0[i]
            ent["canvas_after"] = x[:b0] + cur_x + x[b1:]

        x[b0:b1] = cur_x                                              # L198
        # L199-200 stop check over everything after the prompt, AFTER the
        # block's store forward.
        if stopping_criteria_idx is not None and any(
                s in x[prompt_length:] for s in stopping_criteria_idx):
            break

    return x, rec.nfe, rec.trace                                      # L202


# ----------------------------------------------------------------------------
# B. evaluation/opencompass/opencompass/models/huggingface_bd3.py
#    block_diffusion_generate  (b050e17 == c2041a8, lines cited)
# ----------------------------------------------------------------------------

def _sample_bd3(rows, temperature, top_k, top_p, rng):
    # huggingface_bd3.py L66-92
    toks, probs_out = [], []
    assert temperature > 0, "Temperature must be positive"          # L73
    for row in rows:
        logits = [v / temperature for v in row] if temperature != 1.0 else list(row)
        ori_probs = _softmax(logits)   # L75: full vocab, mask token included
        if top_k > 0:                                                # L78
            logits = _top_k_logits(logits, top_k)
        if top_p < 1.0:                                              # L80
            logits = _top_p_logits(logits, top_p)
        probs = _softmax(logits)                                     # L83
        t = _multinomial(probs, rng)                                 # L87
        toks.append(t)
        probs_out.append(ori_probs[t])  # L90: confidence from UNFILTERED probs
    return toks, probs_out


def sdar_opencompass_bd3(logits_fn, prompt_ids, mask_id, gen_length=128,
                         block_length=8, denoising_steps=8, temperature=0.0,
                         top_k=0, top_p=1.0, remasking="low_confidence",
                         threshold=1.0, stopping_criteria_idx=None, seed=0):
    """Returns (tokens_returned, nfe, trace).  tokens_returned = whole canvas
    (L272); the wrapper then slices [prompt_len:] (L779), decodes, deletes
    '<|MASK|>' strings and cuts at the first stop string (L781-784)."""
    rng = random.Random(seed)
    rec = _Recorder(logits_fn)
    prompt_length = len(prompt_ids)                                   # L140
    # L146-147
    num_blocks = (prompt_length + gen_length + block_length - 1) // block_length
    total_length = num_blocks * block_length
    # L162-164
    x = [mask_id] * total_length
    x[:prompt_length] = list(prompt_ids)
    # L167-168
    prefill_blocks = prompt_length // block_length
    prefill_length = prefill_blocks * block_length
    # L171-182
    if prefill_length > 0:
        rec.forward("prefill", None, None, x, 0, prefill_length,
                    prefill_length, "block_causal", True)
    # L185-186
    assert block_length % denoising_steps == 0 and block_length >= denoising_steps
    num_transfer_tokens = get_num_transfer_tokens(block_length, denoising_steps)
    end_generate = False                                              # L187
    for num_block in range(prefill_blocks, num_blocks):              # L188
        b0 = num_block * block_length
        b1 = b0 + block_length
        cur_x = x[b0:b1]   # L189: a view in upstream (x updated in place)
        for i in range(denoising_steps + 1):                         # L193
            mask_index = [t == mask_id for t in cur_x]                # L194
            if sum(mask_index) == 0:                                  # L195-203
                canvas = x[:b0] + cur_x + x[b1:]
                rec.forward("store", num_block, i, canvas, b0, b1, b1, "full", True)
                break
            # L205-211
            canvas = x[:b0] + cur_x + x[b1:]
            rows, ent = rec.forward("denoise", num_block, i, canvas, b0, b1, b1,
                                    "full", False)
            if remasking == "low_confidence":                         # L217-226
                x0, x0_p = _sample_bd3(rows, temperature, top_k, top_p, rng)
            else:
                # 'random' remasking (L227-229) uses torch.rand; not transcribed
                raise NotImplementedError(remasking)
            # L233  x0 = torch.where(mask_index, x0, cur_x)
            x0 = [a if m else c for a, m, c in zip(x0, mask_index, cur_x)]
            confidence = [p if m else NEG_INF for p, m in zip(x0_p, mask_index)]
            transfer_index = [False] * block_length
            if threshold < 1.0:                                       # L234-250 dynamic
                high_conf_mask = [c > threshold for c in confidence]
                if sum(high_conf_mask) >= num_transfer_tokens[i]:
                    transfer_index = high_conf_mask
                else:
                    for j in _topk_indices(confidence, num_transfer_tokens[i]):
                        transfer_index[j] = True
            else:                                                     # L251-260 static
                for j in _topk_indices(confidence, num_transfer_tokens[i]):
                    transfer_index[j] = True
            for j in range(block_length):                             # L262
                if transfer_index[j]:
                    if mask_index[j]:
                        ent["committed"][b0 + j] = x0[j]
                    cur_x[j] = x0[j]
            ent["canvas_after"] = x[:b0] + cur_x + x[b1:]
        x[b0:b1] = cur_x                                              # L264
        for stop_idx in (stopping_criteria_idx or []):               # L265-270
            if stop_idx in x[prompt_length:]:
                end_generate = True
                break
        if end_generate:
            break
    return x, rec.nfe, rec.trace                                      # L272
