#!/usr/bin/env bash
# train_spec.sh — trains issue 40's three drafters (tools/train_spec.py) on
# the GPU machine, one after the other, and prints where their folders are.
#
#   bash tools/train_spec.sh [--smoke] OUT [draft] [self] [dflash]
#
# --smoke: a few steps each on a slice, every check (about a minute each);
# folders under OUT/smoke/. Without model names: all three. Needs
# train-data/kjv.txt and train-data/brown.txt (bash tools/train_small.sh
# makes them where apt and npm work). A full run of all three takes about
# 10-15 minutes on one H100/H200 (self ~7, dflash ~4, draft ~2): run self
# apart where a command may last 10 minutes at most.
#
# Writes OUT/<folder>/{config.json, model.safetensors, tokenizer.json,
# TRAINING.md}, OUT/<folder>.summary.json and OUT/<mode>.log; copy the
# folders into models/ to ship them.
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
mkdir -p "$out"
declare -A folder=([draft]=small-llama-draft [self]=small-sdar-self [dflash]=small-llama-dflash)
sub=$out
[ ${#smoke[@]} -eq 0 ] || sub=$out/smoke
status=0
for m in "${modes[@]}"; do
    [ -n "${folder[$m]:-}" ] || { echo "unknown model $m (draft, self, dflash)" >&2; exit 2; }
    echo "== $m ($(date -u +%H:%M:%S))"
    log=$out/${smoke:+smoke-}$m.log
    if python3 tools/train_spec.py "$m" --data train-data --out "$out" "${smoke[@]}" 2>&1 | tee "$log"; then
        echo "== $m: $sub/${folder[$m]}"
    else
        echo "== $m FAILED (log: $log)"
        status=1
    fi
done
echo "== folders:"
for m in "${modes[@]}"; do
    d=$sub/${folder[$m]}
    if [ -f "$d/TRAINING.md" ]; then echo "   $d"; else echo "   $d (missing)"; fi
done
exit $status
