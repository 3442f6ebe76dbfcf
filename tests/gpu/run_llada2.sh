#!/usr/bin/env bash
# On the GPU machine: LLaDA 2.x (issue 22) end to end in one call.
#   1. the golden data from the published modelling code
#      (tools/make_llada2_golden.py, CPU, float32) into $OUT;
#   2. the GPU tests (test_gpu: tiny-llada2's GPU path against the CPU's
#      among them);
#   3. suites/gpu-llada2.ini (then its batch-32 cases again with the
#      experts' spans by cuBLAS per expert, TB_GPU_MOE_SPAN=cublas, against
#      the default's grouped GEMM) and its
#      PyTorch peer (tools/peer_llada2.py,
#      batch 1: the published generate() decodes one sequence) in the same
#      call; a short table last.
# Build as tests/gpu/run.sh says, then (device tool) carry build-gpu and
# the folder with the published modeling_llada2_moe.py and
# configuration_llada2_moe.py, and run from the repository root:
#   bash tests/gpu/run_llada2.sh build-gpu MODELLING_DIR [--no-golden] [--no-peers]
set -uo pipefail
build=${1:-build-gpu}
modelling=${2:?the folder with the published LLaDA 2.x modelling code}
golden=1 peers=1
for a in "${@:3}"; do
    [ "$a" = "--no-golden" ] && golden=0
    [ "$a" = "--no-peers" ] && peers=0
done
here=$(cd "$(dirname "$0")/../.." && pwd) # this script's tree (tools/, suites/)
out=${LLADA2_WORK:-$(mktemp -d /tmp/llada2.XXXXXX)} # logs; packed into $OUT at the end
mkdir -p "$out"
trap 'tar -czf "${OUT:-/tmp}/llada2-logs.tgz" -C "$out" --exclude golden . 2>/dev/null;
      [ -d "$out/golden" ] && tar -czf "${OUT:-/tmp}/llada2-golden.tgz" -C "$out/golden" .' EXIT
export LD_LIBRARY_PATH="$PWD/$build/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export TB_SOURCE_ROOT=$PWD
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$out/gpu.txt"
if [ $golden = 1 ]; then
    echo "== golden (published modelling code)"
    mkdir -p "$out/golden"
    CUDA_VISIBLE_DEVICES="" timeout 40 python3 "$here/tools/make_llada2_golden.py" --modelling "$modelling" \
        --out "$out/golden" >"$out/golden.log" 2>&1
    echo "golden exit $?"
    grep -E "CHECK|WARNING|FATAL|Error|rope default|shims|routing|DONE" "$out/golden.log" | cut -c1-200
    tail -3 "$out/golden.log" | cut -c1-300
fi
echo "== GPU tests"
timeout ${GPU_TEST_TIMEOUT:-75} "$build/tests/test_gpu" >"$out/test_gpu.log" 2>&1
gpu_rc=$?
grep -E "llada2|FAIL|fail" "$out/test_gpu.log" | cut -c1-220
echo "test_gpu exit $gpu_rc"
echo "== tokbench suites/gpu-llada2.ini"
timeout 120 "$build/tokbench" run "$here/suites/gpu-llada2.ini" --db "$out/gpu-llada2.db" \
    >"$out/gpu-llada2.txt" 2>"$out/gpu-llada2.err"
echo "tokbench exit $?"
echo "== the same, batch 32, the experts' spans by cuBLAS per expert (TB_GPU_MOE_SPAN=cublas; the default picks the grouped GEMM there)"
TB_GPU_MOE_SPAN=cublas timeout 120 "$build/tokbench" run "$here/suites/gpu-llada2.ini" --filter batch=32 \
    --db "$out/gpu-llada2-cublas.db" >"$out/gpu-llada2-cublas.txt" 2>&1
echo "tokbench exit $?"
sed -n '/^backend  /,/^$/p' "$out/gpu-llada2-cublas.txt" | cut -c1-260
if [ $peers = 1 ]; then
    echo "== peer"
    timeout ${PEER_TIMEOUT:-60} python3 "$here/tools/peer_llada2.py" --modelling "$modelling" --runs ${PEER_RUNS:-1} 2>&1 |
        grep -E "^peer|Error|error" | tee "$out/peers.txt"
fi
echo "== summary (test_gpu exit $gpu_rc)"
sed -n '/^backend  /,/^$/p' "$out/gpu-llada2.txt" | cut -c1-260
grep -E "failed|error" "$out/gpu-llada2.err" | head -5
