#!/usr/bin/env bash
# On the GPU machine: the GPU tests, then suites/gpu-8b.ini and the PyTorch
# peers in the same call; a short table last. Build here first:
#   meson setup build-gpu -Dcuda=enabled -Dbuildtype=release && ninja -C build-gpu
# (meson 1.0 gives nvcc no depfile, so a changed .cuh does not rebuild the
# .cu files that include it: `touch plugins/*/*.cu` first, or build from
# clean; a stale object with an old struct layout crashes at run time)
#   mkdir -p build-gpu/lib && cp -L /usr/lib/x86_64-linux-gnu/{libinih.so.1,libcjson.so.1,libutf8proc.so.2,libmicrohttpd.so.12} build-gpu/lib/
# then (device tool) carry build-gpu and run: bash tests/gpu/run.sh [build-gpu] [--no-peers]
set -uo pipefail
build=${1:-build-gpu}
peers=1
[ "${2:-}" = "--no-peers" ] && peers=0
out=${OUT:-/tmp}
export LD_LIBRARY_PATH="$PWD/$build/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export TB_SOURCE_ROOT=$PWD
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$out/gpu.txt"
echo "== GPU tests"
"$build/tests/test_gpu" 2>&1 | tee "$out/test_gpu.log"
gpu_rc=${PIPESTATUS[0]}
echo "== the bf16 GEMM ceiling held for 6 s (the power limit; docs/PERFORMANCE.md)"
"$build/tests/bench_power" 6 8192
echo "== tokbench suites/gpu-8b.ini"
"$build/tokbench" run suites/gpu-8b.ini --db "$out/gpu.db" >"$out/gpu-8b.txt" 2>"$out/gpu-8b.err"
echo "tokbench exit $?"
echo "== tokbench suites/gpu-8b-text.ini (the threshold rows, on text)"
"$build/tokbench" run suites/gpu-8b-text.ini --db "$out/gpu.db" >"$out/gpu-8b-text.txt" 2>"$out/gpu-8b-text.err"
echo "tokbench exit $?"
if [ $peers = 1 ]; then
    echo "== peers"
    python3 tools/peer_hf_generate.py 2>&1 | grep -E "^peer|Error" | tee "$out/peers.txt"
    python3 tools/peer_llada.py --batches 1,8 2>&1 | grep -E "^peer|Error" | tee -a "$out/peers.txt"
fi
echo "== summary (test_gpu exit $gpu_rc)"
sed -n '/^backend  /,/^$/p' "$out/gpu-8b.txt" "$out/gpu-8b-text.txt" | cut -c1-200
grep -E "failed|error" "$out/gpu-8b.err" "$out/gpu-8b-text.err" | head -5
echo "== the plugins' CUDA path on shipped folder models (load, upload, describe)"
cat >"$out/tiny-cuda.ini" <<EOT
[suite]
warmup = 0
repeat = 1
[matrix]
prompt_tokens = 16
max_new_tokens = 32
steps = 8
[backend ar]
plugin = ar
model = $PWD/models/tiny-llama-random
device = cuda
[backend llada]
plugin = diffusion
model = $PWD/models/tiny-llada-random
device = cuda
block_length = 32
EOT
"$build/tokbench" run "$out/tiny-cuda.ini" --db "$out/tiny.db" 2>&1 | grep -E "^\[|backend (ar|llada):" | cut -c1-200
