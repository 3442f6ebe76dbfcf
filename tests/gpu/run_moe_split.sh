#!/usr/bin/env bash
# On the GPU machine: the grouped GEMM's split over K by the tiles
# (gpu_tune.h's TB_GPU_MOE_SPLIT=auto) against the unsplit form (off,
# the default until this is measured), the GPU tests first
# (test_gpu's check_moe_tiles: the split forms within the CPU's bound, the
# same bits run after run):
#   1. suites/gpu-llada2.ini at max_new_tokens = 256 alone (LLaDA2.0-mini's
#      shape, batch 1 and 32), split by the tiles and off, interleaved,
#      the round twice;
#   2. the batch-1 case once more under each with the kernel profile
#      (TB_GPU_KERNEL_PROFILE): the grouped GEMM's time a launch;
#   3. batch 1 with the parts fixed at 2 and at 8.
# Build as tests/gpu/run.sh says, carry the build folder, then:
#   bash tests/gpu/run_moe_split.sh [build-gpu]
# Logs, databases and profiles: $OUT/moe-split-logs.tgz.
set -uo pipefail
build=${1:-build-gpu}
here=$(cd "$(dirname "$0")/../.." && pwd)
out=$(mktemp -d /tmp/moe-split.XXXXXX) # logs, databases, profiles: packed into $OUT at the end
trap 'tar -czf "${OUT:-/tmp}/moe-split-logs.tgz" -C "$out" .' EXIT
export LD_LIBRARY_PATH="$PWD/$build/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export TB_SOURCE_ROOT=$PWD
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader | tee "$out/gpu.txt"
timeout ${GPU_TEST_TIMEOUT:-200} "$build/tests/test_gpu" >"$out/test_gpu.log" 2>&1
echo "test_gpu exit $? ($(tail -1 "$out/test_gpu.log"))"
grep -E "span by the grouped GEMM, |launches over" "$out/test_gpu.log" | grep -E "parts|split|launches" | cut -c1-230
grep -E "FAIL" "$out/test_gpu.log" | head -20 | cut -c1-230
ini=/tmp/gpu-llada2-256.ini
sed -e 's/^max_new_tokens = 32, 256 .*/max_new_tokens = 256/' -e 's/^name = gpu-llada2$/name = gpu-llada2-256/' \
    -e "s|^file = data/text.jsonl|file = $here/suites/data/text.jsonl|" "$here/suites/gpu-llada2.ini" >"$ini"
form_env() { export TB_GPU_MOE_SPLIT=$1; } # auto, off, or the parts
for round in 1 2; do
    for f in auto off; do
        form_env "$f"
        db="$out/llada2-$f-$round.db"
        timeout 150 "$build/tokbench" run "$ini" --db "$db" >"$out/llada2-$f-$round.txt" 2>&1
        rc=$?
        printf '== llada2 split %s, round %d (exit %d)\n' "$f" "$round" "$rc"
        grep -E "^llada2" "$out/llada2-$f-$round.txt" | cut -c1-110
        "$build/tokbench" report --db "$db" --format md 2>/dev/null | grep -E "roofline\\\\_pct" | cut -d'|' -f3,7 |
            sed 's/^/   roofline % median:/'
    done
done
for f in 2 8; do # the parts fixed, batch 1
    form_env "$f"
    timeout 150 "$build/tokbench" run "$ini" --filter batch=1 --db "$out/llada2-b1-$f.db" >"$out/llada2-b1-$f.txt" 2>&1
    printf '== llada2 split %s, batch 1 (exit %d)\n' "$f" "$?"
    grep -E "^llada2" "$out/llada2-b1-$f.txt" | cut -c1-110
done
for f in auto off; do
    form_env "$f"
    prof="$out/kprof-llada2-b1-$f.tsv"
    TB_GPU_KERNEL_PROFILE=$prof timeout 150 "$build/tokbench" run "$ini" --filter batch=1 --db "$out/kprof-$f.db" \
        >"$out/kprof-$f.txt" 2>&1
    echo "== kernel profile, batch 1, split $f (exit $?): the five longest"
    grep -E "^[0-9.]+\s" "$prof" | sort -t$'\t' -k2 -g -r | head -5 | cut -c1-150
done
unset TB_GPU_MOE_SPLIT
