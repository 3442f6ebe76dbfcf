#!/usr/bin/env bash
# On the GPU machine: the batch-1 decode paths of issue 20 side by side
# (gpu.h's TB_GPU_FUSE_* mask and PDL, through the environment), the GPU
# tests first; Llama-3-8B preset, prompt 128, output 256, batch 1. Build
# here as tests/gpu/run.sh says, carry the build folder, then:
#   bash tests/gpu/run_fusion.sh [build-gpu] [mask/pdl ...]
# default paths: 0/0 (unfused) 1/0 2/0 3/0 3/1 0/1 7/1. Logs under $OUT (3 files).
set -uo pipefail
build=${1:-build-gpu}
shift || true
paths=${*:-0/0 1/0 2/0 3/0 3/1 0/1 7/1}
out=${OUT:-/tmp}
export LD_LIBRARY_PATH="$PWD/$build/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export TB_SOURCE_ROOT=$PWD
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$out/gpu.txt"
timeout 200 "$build/tests/test_gpu" >"$out/test_gpu.log" 2>&1
echo "test_gpu exit $? ($(tail -1 "$out/test_gpu.log"))"
cat >/tmp/ar-b1-fusion.ini <<EOT
[suite]
name = ar-b1-fusion
warmup = 1
repeat = 3
seed = 1
[matrix]
prompt_tokens = 128
max_new_tokens = 256
[backend ar-llama3-8b]
plugin = ar
model = preset:llama-3-8b
device = cuda
batch = 1
EOT
for p in $paths; do
    TB_GPU_FUSION=${p%/*} TB_GPU_PDL=${p#*/} timeout 120 "$build/tokbench" run /tmp/ar-b1-fusion.ini \
        --db /tmp/fusion.db >/tmp/fusion-one.txt 2>&1
    { echo "== mask ${p%/*} pdl ${p#*/}"; cat /tmp/fusion-one.txt; } >>"$out/fusion.log"
    printf 'mask %s pdl %s: %s\n' "${p%/*}" "${p#*/}" "$(grep -oE '[0-9.]+ tok/s aggregate' /tmp/fusion-one.txt | head -1)"
done
