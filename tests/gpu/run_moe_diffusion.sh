#!/usr/bin/env bash
# On the GPU machine: LLaDA-MoE (issue 22) end to end in one call.
#   1. the golden data from the published modelling code
#      (tools/make_lladamoe_golden.py, CPU, float32) into
#      tests/data/golden-diffusion/ and $OUT/golden/;
#   2. test_diffusion (the CPU engine against it) and the GPU tests
#      (test_gpu: LLaDA-MoE's GPU path against the CPU's among them);
#   3. suites/gpu-moe-diffusion.ini and its PyTorch peer
#      (tools/peer_lladamoe.py) in the same call; a short table last.
# Build as tests/gpu/run.sh says, then (device tool) carry build-gpu and
# the folder with the published modeling_lladamoe.py and
# configuration_lladamoe.py, and run:
#   bash tests/gpu/run_moe_diffusion.sh build-gpu MODELLING_DIR [--no-golden] [--no-peers]
set -uo pipefail
build=${1:-build-gpu}
modelling=${2:?the folder with the published LLaDA-MoE modelling code}
golden=1 peers=1
for a in "${@:3}"; do
    [ "$a" = "--no-golden" ] && golden=0
    [ "$a" = "--no-peers" ] && peers=0
done
# logs and the golden folder go to a work folder, packed into $OUT at the
# end (the device tool brings back at most 8 files)
out=$(mktemp -d /tmp/lmoe.XXXXXX)
trap 'tar -czf "${OUT:-/tmp}/lladamoe-logs.tgz" -C "$out" --exclude golden . 2>/dev/null;
      [ -d "$out/golden" ] && tar -czf "${OUT:-/tmp}/lladamoe-golden.tgz" -C "$out/golden" .' EXIT
export LD_LIBRARY_PATH="$PWD/$build/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export TB_SOURCE_ROOT=$PWD
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$out/gpu.txt"
if [ $golden = 1 ]; then
    echo "== golden (published modelling code)"
    mkdir -p "$out/golden"
    CUDA_VISIBLE_DEVICES="" timeout 100 python3 tools/make_lladamoe_golden.py --modelling "$modelling" \
        --out "$out/golden" >"$out/golden.log" 2>&1
    echo "golden exit $?"
    grep -E "CHECK|WARNING|FATAL|Error|rope default|shims|routing gap|DONE" "$out/golden.log" | cut -c1-200
    cp -r "$out/golden/." tests/data/golden-diffusion/
fi
echo "== test_diffusion (CPU against the golden data)"
"$build/tests/engine/test_diffusion" >"$out/test_diffusion.log" 2>&1
echo "test_diffusion exit $?"
grep -E "llada_moe|FAIL|fail" "$out/test_diffusion.log" | head -20 | cut -c1-220
echo "== GPU tests"
timeout 120 "$build/tests/test_gpu" >"$out/test_gpu.log" 2>&1
gpu_rc=$?
grep -E "llada-moe|FAIL|fail" "$out/test_gpu.log" | cut -c1-220
echo "test_gpu exit $gpu_rc"
echo "== tokbench suites/gpu-moe-diffusion.ini"
timeout 150 "$build/tokbench" run suites/gpu-moe-diffusion.ini --db "$out/gpu-moe-diffusion.db" \
    >"$out/gpu-moe-diffusion.txt" 2>"$out/gpu-moe-diffusion.err"
echo "tokbench exit $?"
if [ $peers = 1 ]; then
    echo "== peer"
    timeout 150 python3 tools/peer_lladamoe.py --modelling "$modelling" --runs ${PEER_RUNS:-2} 2>&1 |
        grep -E "^peer|Error|error" | tee "$out/peers.txt"
fi
echo "== summary (test_gpu exit $gpu_rc)"
sed -n '/^backend  /,/^$/p' "$out/gpu-moe-diffusion.txt" | cut -c1-240
grep -E "failed|error" "$out/gpu-moe-diffusion.err" | head -5
