#!/usr/bin/env python3
"""spec_eval.py — greedy speculative decoding in Python, the one place the
trained drafters' acceptance is measured (tools/train_spec.py uses it for all
three drafters, so their figures compare with each other and with tokbench's).

The rule (DFlash's benchmark loop, greedy; temperature 0):

  * The committed sequence S starts as the prompt plus the target's greedy
    token after it (the prefill; not a verification).
  * A verification: the drafter proposes d_1..d_k continuing S; one target
    forward over S + d gives the target's greedy tokens g_1..g_{k+1} after S,
    S + d_1, ...; a = the number of leading i with d_i == g_i; S grows by
    d_1..d_a and g_{a+1}: a + 1 tokens per target forward.
  * The request stops once the committed tokens after the prompt hold EOS or
    number max_new; the output is cut there (EOS excluded), and must equal
    the target's own greedy output token for token (checked: lossless).
  * Every verification counts, the last one included, with a + 1 as
    proposed (DFlash's benchmark counts the same way).

Figures (per request set): acceptance length = mean over verifications of
a + 1; acceptance rate = sum a / (k x verifications); per-position
acceptance p_i = share of verifications with a >= i (i = 1..k); target
forwards per output token = (verifications + 1 prefill) / output tokens.

The functions take plain callables so that each model family plugs in its
own forwards (no KV cache: every call recomputes from position 0; the
sequences are short):

  target_next(ids) -> list of len(ids) ints: the target's greedy next token
                      after each position of ids
  draft(S, k)      -> list of k ints: the drafter's proposal after S
"""


def greedy(target_next, prompt, max_new, eos):
    """The target's own greedy continuation (EOS excluded), max_new tokens
    at most."""
    s = list(prompt)
    out = []
    while len(out) < max_new:
        t = target_next(s)[-1]
        if t == eos:
            break
        out.append(t)
        s.append(t)
    return out


def speculate(target_next, draft, prompt, k, max_new, eos):
    """One request under the rule of the module docstring. Returns
    {"out": tokens (EOS excluded), "accepted": [a per verification],
    "k": k}."""
    s = list(prompt)
    new = [target_next(s)[-1]]            # the prefill's token
    s.append(new[0])
    acc = []
    while eos not in new and len(new) < max_new:
        d = list(draft(s, k))
        if len(d) != k:
            raise ValueError("drafter returned %d tokens, wanted %d" % (len(d), k))
        g = target_next(s + d)[len(s) - 1:]   # g[i]: greedy after s + d[:i]
        a = 0
        while a < k and d[a] == g[a]:
            a += 1
        commit = d[:a] + [g[a]]
        acc.append(a)
        s += commit
        new += commit
    if eos in new:
        new = new[:new.index(eos)]
    return {"out": new[:max_new], "accepted": acc, "k": k}


def summarize(results):
    """The figures of the module docstring over a list of speculate()
    results (one k)."""
    k = results[0]["k"]
    acc = [a for r in results for a in r["accepted"]]
    n_ver = len(acc)
    out_tok = sum(len(r["out"]) for r in results)
    fw = n_ver + len(results)
    if n_ver == 0:
        return {"k": k, "requests": len(results), "verifications": 0,
                "acceptance_length": None, "acceptance_rate": None,
                "per_position": [None] * k, "target_forwards_per_token": None,
                "output_tokens": out_tok}
    return {"k": k, "requests": len(results), "verifications": n_ver,
            "acceptance_length": round(sum(a + 1 for a in acc) / n_ver, 4),
            "acceptance_rate": round(sum(acc) / (k * n_ver), 4),
            "per_position": [round(sum(a >= i for a in acc) / n_ver, 4) for i in range(1, k + 1)],
            "target_forwards_per_token": round(fw / max(1, out_tok), 4),
            "output_tokens": out_tok}


def measure(target_next, draft, prompts, ks, max_new, eos, groups=None, tolerance=0.0):
    """Acceptance at each k over token-id prompts. groups: a name per prompt
    (e.g. "tasks", "text"); figures come per group and for "all". Every
    speculative output is compared with the target's greedy one; the count
    that differ is reported ("not_lossless" per group). More than
    tolerance x prompts raises: the measurement itself would be wrong. (A
    float near-tie of the target's argmax between a short and a long
    forward can flip a token on a GPU: tolerance > 0 lets a rare one pass,
    reported.) Returns {k: {group: summarize(...)}} and the greedy outputs."""
    groups = groups or ["all"] * len(prompts)
    ref = [greedy(target_next, p, max_new, eos) for p in prompts]
    res = {}
    for k in ks:
        runs = [speculate(target_next, draft, p, k, max_new, eos) for p in prompts]
        bad = [i for i, (r, g) in enumerate(zip(runs, ref)) if r["out"] != g]
        if len(bad) > tolerance * len(prompts):
            i = bad[0]
            raise AssertionError("not lossless at k=%d on %d of %d prompts, e.g. prompt %d: %r vs "
                                 "greedy %r" % (k, len(bad), len(prompts), i, runs[i]["out"], ref[i]))
        by = {}
        for name in sorted(set(groups)) + (["all"] if "all" not in groups else []):
            idx = [i for i, g in enumerate(groups) if name == "all" or g == name]
            if idx:
                by[name] = summarize([runs[i] for i in idx])
                by[name]["not_lossless"] = sum(1 for i in idx if i in bad)
        res[k] = by
    return res, ref


def table(res, group_order=("tasks", "text", "all")):
    """Markdown: one row per k and group."""
    rows = ["| k | prompts | verifications | acceptance length | acceptance rate | "
            "target forwards / token | per-position acceptance (i = 1..k) |",
            "|---|---|---|---|---|---|---|"]
    for k in sorted(res):
        for g in group_order:
            s = res[k].get(g)
            if s is None or s["verifications"] == 0:
                continue
            rows.append("| %d | %s (%d) | %d | %.2f | %.1f%% | %.3f | %s |"
                        % (k, g, s["requests"], s["verifications"], s["acceptance_length"],
                           100 * s["acceptance_rate"], s["target_forwards_per_token"],
                           " ".join("%.2f" % p for p in s["per_position"])))
    return "\n".join(rows)


def self_test():
    """The rule on toy callables (no torch): a perfect drafter accepts all k,
    a wrong one none, and outputs stay the target's."""
    eos = 0

    def target_next(ids):                  # counts up to 9, then EOS (EOS after EOS)
        return [(x + 1) if 0 < x < 9 else eos for x in ids]

    def perfect(s, k):
        out, x = [], s[-1]
        for _ in range(k):
            x = x + 1 if 0 < x < 9 else eos
            out.append(x)
        return out

    def wrong(s, k):
        return [42] * k                    # never the target's

    r, ref = measure(target_next, perfect, [[1], [3]], [3], 16, eos)
    assert ref == [[2, 3, 4, 5, 6, 7, 8, 9], [4, 5, 6, 7, 8, 9]], ref
    s = r[3]["all"]
    # [1]: prefill 2, then 3 4 5 + 6, 7 8 9 + EOS: 2 verifications of a = 3
    # [3]: prefill 4, then 5 6 7 + 8, 9 EOS EOS + EOS: a = 3, 3
    assert s["verifications"] == 4 and s["acceptance_length"] == 4.0, s
    r, _ = measure(target_next, wrong, [[1]], [3], 16, eos)
    s = r[3]["all"]
    assert s["acceptance_length"] == 1.0 and s["per_position"] == [0.0, 0.0, 0.0], s
    assert s["not_lossless"] == 0, s

    def broken_target(ids):                # a target whose argmax depends on length
        return [x + (len(ids) > 3) for x in target_next(ids)]
    try:
        measure(broken_target, perfect, [[1]], [3], 16, eos)
    except AssertionError:
        pass
    else:
        raise AssertionError("a length-dependent target passed the lossless check")
    return "ok"


if __name__ == "__main__":
    print(self_test())
