#!/usr/bin/env bash
# train_spec.sh — trains issue 40's three drafters (tools/train_spec.py) on
# the GPU machine, one after the other, and packs each into one file.
#
#   bash tools/train_spec.sh [--smoke] OUT [draft] [self] [dflash]
#
# --smoke: a few steps each on a slice, every check (under a minute each).
# Without model names: all three. Needs train-data/kjv.txt and
# train-data/brown.txt (bash tools/train_small.sh makes them where apt and
# npm work). On one H100 (2026-12-06, the three side by side on one card:
# 7200 steps of draft took 163 s of training, self 374 s, dflash 110 ms a
# step, about twice its time alone): alone, draft ~3 min, dflash ~8 (its
# training stops at 460 s), self ~8 (stops at 400 s).
# A stop says so in TRAINING.md (fewer steps). Run one model a call where a
# command may last 10 minutes at most, and not side by side on one card
# (each step slows about 2x).
#
# The folders are written under $TRAIN_SPEC_WORK (default /tmp/train-spec):
# <folder>/{config.json, model.safetensors, tokenizer.json, TRAINING.md},
# <folder>.summary.json, <mode>.log. OUT gets one archive per model,
# OUT/[smoke-]<folder>.tgz holding those (one file each: the device tool
# brings back 8 files at most). To ship: tar -xzf OUT/<folder>.tgz and copy
# <folder>/ into models/.
set -euo pipefail
cd "$(dirname "$0")/.."
smoke=()
if [ "${1:-}" = --smoke ]; then
    smoke=(--smoke)
    shift
fi
[ $# -ge 1 ] || { echo "usage: $0 [--smoke] OUT [draft] [self] [dflash]" >&2; exit 2; }
out=$1
shift
modes=("$@")
[ ${#modes[@]} -gt 0 ] || modes=(draft dflash self)
for f in train-data/kjv.txt train-data/brown.txt; do
    [ -s "$f" ] || { echo "$f missing: run bash tools/train_small.sh where apt and npm work" >&2; exit 1; }
done
declare -A folder=([draft]=small-llama-draft [self]=small-sdar-self [dflash]=small-llama-dflash)
for m in "${modes[@]}"; do
    [ -n "${folder[$m]:-}" ] || { echo "unknown model $m (draft, self, dflash)" >&2; exit 2; }
done
work=${TRAIN_SPEC_WORK:-/tmp/train-spec}
pre=
sub=$work
if [ ${#smoke[@]} -gt 0 ]; then
    pre=smoke-
    sub=$work/smoke
fi
mkdir -p "$out" "$sub"
export PYTHONUNBUFFERED=1
status=0
for m in "${modes[@]}"; do
    f=${folder[$m]}
    echo "== $m ($(date -u +%H:%M:%S))"
    log=$sub/$m.log
    rm -rf "${sub:?}/$f" "$sub/$f.summary.json"
    if python3 tools/train_spec.py "$m" --data train-data --out "$work" "${smoke[@]}" 2>&1 | tee "$log"; then
        echo "== $m: $sub/$f"
        # the figures, for whoever reads the console
        sed -n '/^## Acceptance/,/^## Reproduce/p' "$sub/$f/TRAINING.md" | grep '^|' || true
        grep -E '^\| (AR greedy|block diffusion|small-llama)' "$sub/$f/TRAINING.md" || true
    else
        echo "== $m FAILED (log: $log)"
        status=1
    fi
    parts=("$m.log")
    [ -d "$sub/$f" ] && parts+=("$f")
    [ -f "$sub/$f.summary.json" ] && parts+=("$f.summary.json")
    tar -czf "$out/$pre$f.tgz" -C "$sub" "${parts[@]}"
    echo "== $m: packed $out/$pre$f.tgz (${parts[*]})"
done
exit $status
