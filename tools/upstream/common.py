"""common.py — what the two transcriptions (sdar_loop.py, fastdllm_v2_loop.py)
share: the tensor ops both upstream loops use, in plain Python (float64),
and the call of the injected network. Standard library only."""

import inspect
import math

NEG_INF = float("-inf")


def softmax(row):
    """F.softmax over the whole row; an entry of -inf gets 0."""
    m = max(row)
    if m == NEG_INF:
        raise ValueError("all logits are -inf")
    ex = [math.exp(v - m) if v != NEG_INF else 0.0 for v in row]
    s = sum(ex)
    return [e / s for e in ex]


def multinomial(probs, rng):
    """Stand-in for torch.multinomial(probs, 1) (not its RNG): deterministic
    when one entry holds all the mass."""
    nz = [i for i, q in enumerate(probs) if q > 0.0]
    if len(nz) == 1:
        return nz[0]
    u = rng.random() * sum(probs)
    c = 0.0
    for i, q in enumerate(probs):
        c += q
        if c > u and q > 0.0:
            return i
    return nz[-1]


def call_logits(logits_fn, canvas, q, k, rope):
    """logits_fn's rows for queries q over keys k (its rope_positions too,
    when it takes them); one row per query."""
    try:
        params = inspect.signature(logits_fn).parameters
        takes = "rope_positions" in params or any(
            p.kind == p.VAR_KEYWORD for p in params.values())
    except (TypeError, ValueError):
        takes = False
    if takes:
        rows = logits_fn(list(canvas), list(q), list(k), rope_positions=list(rope))
    else:
        rows = logits_fn(list(canvas), list(q), list(k))
    rows = [list(r) for r in rows]
    if len(rows) != len(q):
        raise ValueError("logits_fn returned %d rows for %d queries" % (len(rows), len(q)))
    return rows
