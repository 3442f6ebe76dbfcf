#!/usr/bin/env bash
# On the GPU machine: the MoE grouped GEMM's tile forms side by side
# (gpu_tune.h's TB_GPU_MOE_TILES, through the environment), the GPU tests
# first (test_gpu's check_moe_tiles: the forms' logits equal to the bit):
#   1. suites/gpu-llada2.ini at max_new_tokens = 256 alone (LLaDA2.0-mini's
#      shape, batch 1 and 32: 256 and 8,192 pairs over 256 experts), each
#      form in turn, the round twice;
#   2. bench_moe's Qwen3-30B-A3B prefill (1, 4 and 32 x 128 rows: 8 pairs
#      an expert and up) by the grouped GEMM under each form.
# "default" is the form the engine picks (the variable unset). Build as
# tests/gpu/run.sh says, carry the build folder, then:
#   bash tests/gpu/run_moe_tiles.sh [build-gpu] [form ...]
# default forms: regs wide narrow default. Logs and databases under $OUT.
set -uo pipefail
build=${1:-build-gpu}
shift || true
forms=${*:-regs wide narrow default}
here=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-/tmp}
export LD_LIBRARY_PATH="$PWD/$build/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export TB_SOURCE_ROOT=$PWD
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader | tee "$out/gpu.txt"
timeout 200 "$build/tests/test_gpu" >"$out/test_gpu.log" 2>&1
echo "test_gpu exit $? ($(tail -1 "$out/test_gpu.log"))"
grep -E "span by the grouped GEMM, " "$out/test_gpu.log" | cut -c1-160
# the suite at the long reply alone, its prompt file by absolute path
ini=/tmp/gpu-llada2-256.ini
sed -e 's/^max_new_tokens = 32, 256 .*/max_new_tokens = 256/' -e 's/^name = gpu-llada2$/name = gpu-llada2-256/' \
    -e "s|^file = data/text.jsonl|file = $here/suites/data/text.jsonl|" "$here/suites/gpu-llada2.ini" >"$ini"
form_env() { # the environment of a form: TB_GPU_MOE_TILES set, or unset for "default"
    if [ "$1" = default ]; then unset TB_GPU_MOE_TILES; else export TB_GPU_MOE_TILES=$1; fi
}
for round in 1 2; do
    for f in $forms; do
        form_env "$f"
        db="$out/llada2-$f-$round.db"
        timeout 150 "$build/tokbench" run "$ini" --db "$db" >"$out/llada2-$f-$round.txt" 2>&1
        rc=$?
        printf '== llada2 %s, round %d (exit %d)\n' "$f" "$round" "$rc"
        grep -E "^llada2" "$out/llada2-$f-$round.txt" | cut -c1-110
        "$build/tokbench" report --db "$db" --format md 2>/dev/null | grep -E "roofline\\\\_pct" | cut -d'|' -f3,7 |
            sed 's/^/   roofline % median:/'
    done
done
unset TB_GPU_MOE_TILES
for f in $forms; do
    form_env "$f"
    timeout 120 "$build/tests/bench_moe" qwen3-30b-a3b >"$out/bench_moe-$f.txt" 2>&1
    echo "== bench_moe qwen3-30b-a3b prefill, $f (exit $?)"
    grep -E "by the grouped GEMM" "$out/bench_moe-$f.txt" | cut -c1-110
done
unset TB_GPU_MOE_TILES
