#!/usr/bin/env bash
# On the GPU machine: the GPU tests (MoE included), the MoE expert paths
# timed (bench_moe: the three span paths; the decode step with the compact
# grid and with TB_GPU_MOE_GRID=all; with its epilogues unfused,
# TB_GPU_FUSION=2), suites/gpu-moe.ini (bf16 and fp8) and its PyTorch peer
# (tools/peer_hf_moe.py) in the same call; a short table last. Build as
# tests/gpu/run.sh says, then (device tool) carry build-gpu and run:
#   bash tests/gpu/run_moe.sh [build-gpu] [--no-peers]
set -uo pipefail
build=${1:-build-gpu}
peers=1
[ "${2:-}" = "--no-peers" ] && peers=0
out=${OUT:-/tmp}
export LD_LIBRARY_PATH="$PWD/$build/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export TB_SOURCE_ROOT=$PWD
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$out/gpu.txt"
echo "== GPU tests"
"$build/tests/test_gpu" >"$out/test_gpu.log" 2>&1
gpu_rc=$?
grep -E "moe|FAIL|fail" "$out/test_gpu.log" | cut -c1-220
echo "test_gpu exit $gpu_rc"
if [ $gpu_rc != 0 ]; then # figures of a wrong engine mean nothing: stop here
    tail -40 "$out/test_gpu.log"
    exit 1
fi
echo "== bench_moe"
"$build/tests/bench_moe" 2>&1 | tee "$out/bench_moe.txt"
echo "== bench_moe decode over every expert's blocks (TB_GPU_MOE_GRID=all: the grid before session 19)"
TB_GPU_MOE_GRID=all "$build/tests/bench_moe" qwen3-30b-a3b decode 2>&1 | tee "$out/bench_moe_grid_all.txt"
echo "== bench_moe decode with the MoE epilogues unfused (TB_GPU_FUSION=2: the kernels before session 20)"
TB_GPU_FUSION=2 "$build/tests/bench_moe" qwen3-30b-a3b decode 2>&1 | tee "$out/bench_moe_unfused.txt"
echo "== tokbench suites/gpu-moe.ini"
"$build/tokbench" run suites/gpu-moe.ini --db "$out/gpu-moe.db" >"$out/gpu-moe.txt" 2>"$out/gpu-moe.err"
echo "tokbench exit $?"
if [ $peers = 1 ]; then
    echo "== peer"
    timeout 270 python3 tools/peer_hf_moe.py --runs ${PEER_RUNS:-2} 2>&1 | grep -E "^peer|Error|error" | tee "$out/peers.txt"
fi
echo "== summary (test_gpu exit $gpu_rc)"
sed -n '/^backend  /,/^$/p' "$out/gpu-moe.txt" | cut -c1-220
grep -E "failed|error" "$out/gpu-moe.err" | head -5
