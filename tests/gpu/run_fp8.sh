#!/usr/bin/env bash
# On the GPU machine: the GPU tests (dtype = fp8 among them), then
# suites/gpu-8b-fp8.ini (bf16 against fp8, W8A8: Llama-3-8B AR batch 1 and
# 32, LLaDA-8B 8 and 64 steps at batch 1 and 8, SDAR-8B batch 1 and 8;
# about 100 s on the H200). Build and carry as tests/gpu/run.sh says, then:
#   bash tests/gpu/run_fp8.sh [build-gpu] [suite]
# Optional stages: TB_FP8_VARIANTS="0 1 2 3 4" (AR batch 1 with each FP8
# GEMV shape), TB_FP8_PROFILE=SECONDS (ncu, tests/gpu/profile.sh);
# TB_TEST_TIMEOUT, TB_SUITE_TIMEOUT (0: skip the suite). Logs under $OUT.
set -uo pipefail
build=${1:-build-gpu}
suite=${2:-suites/gpu-8b-fp8.ini}
out=${OUT:-/tmp}
export LD_LIBRARY_PATH="$PWD/$build/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export TB_SOURCE_ROOT=${TB_SOURCE_ROOT:-$PWD}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$out/gpu.txt"
timeout "${TB_TEST_TIMEOUT:-150}" "$build/tests/test_gpu" >"$out/test_gpu.log" 2>&1
echo "test_gpu exit $? ($(tail -1 "$out/test_gpu.log"))"
grep -E "CHECK failed|dtype fp8|fp8 codes|roofline bytes|qwen3-moe, dtype|^-- dtype" "$out/test_gpu.log" | head -40
sed -n '/^-- dtype fp8/,$p' "$out/test_gpu.log" | grep -E "max diff|identical|CHECK" | head -40
[ "${TB_SUITE_TIMEOUT:-240}" != 0 ] && timeout "${TB_SUITE_TIMEOUT:-240}" "$build/tokbench" run "$suite" --db "$out/fp8.db" >"$out/fp8-suite.txt" 2>"$out/fp8-suite.err"
echo "tokbench exit $?"
grep -E "^\[|error|failed" "$out/fp8-suite.txt" "$out/fp8-suite.err" | cut -c1-240 | head -20
sed -n '/^backend  /,/^$/p' "$out/fp8-suite.txt" | cut -c1-240
# the batch-1 FP8 GEMV's shapes (gpu.h's tb_gpu_set_fp8_gemv, through
# TB_GPU_FP8_GEMV) on AR batch 1 when TB_FP8_VARIANTS lists them
if [ -n "${TB_FP8_VARIANTS:-}" ]; then
    cat >/tmp/ar-b1-fp8.ini <<EOT
[suite]
name = ar-b1-fp8-gemv
warmup = 1
repeat = 3
seed = 1
[matrix]
prompt_tokens = 128
max_new_tokens = 256
[backend ar-llama3-8b-fp8]
plugin = ar
model = preset:llama-3-8b
device = cuda
dtype = fp8
batch = 1
EOT
    for v in $TB_FP8_VARIANTS; do
        TB_GPU_FP8_GEMV=$v timeout 60 "$build/tokbench" run /tmp/ar-b1-fp8.ini --db /tmp/fp8-gemv.db >/tmp/fp8-one.txt 2>&1
        { echo "== fp8 GEMV variant $v"; cat /tmp/fp8-one.txt; } >>"$out/fp8-gemv.log"
        printf 'fp8 GEMV variant %s: %s\n' "$v" "$(grep -oE '[0-9.]+ tok/s aggregate' /tmp/fp8-one.txt | head -1)"
    done
fi
# ncu: one decode step (batch 1, 32) and one LLaDA forward at bf16 and at
# fp8 (tests/gpu/profile.sh over bench_tp, TB_BENCH_DTYPE) when
# TB_FP8_PROFILE is set (seconds per ncu run)
if [ -n "${TB_FP8_PROFILE:-}" ]; then
    prof=${TB_PROFILE_SCRIPT:-tests/gpu/profile.sh}
    for d in ${TB_FP8_PROFILE_DTYPES:-auto fp8}; do
        TB_BENCH_DTYPE=$d TB_PROFILE_WHAT=${TB_FP8_PROFILE_WHAT:-ar1 ar32 llada} TB_PROFILE_TIMEOUT=$TB_FP8_PROFILE bash "$prof" "$build"
    done
fi
