#!/usr/bin/env bash
# On the GPU machine (issue 40): speculative decoding's GPU tests (the
# engine's operations against the CPU's, the DFlash drafter against the
# CPU's, the ar backend's losslessness with the trained drafters), then
# suites/gpu-spec.ini, suites/quick.ini's speculative rows on the GPU, and
# the PyTorch peers in the same call (tools/peer_spec.py: upstream's DFlash
# loop and HF generate, transcribed).
#
#   bash tests/gpu/run_spec.sh [build-gpu]
# SPEC_QUICK=0 leaves out quick.ini's rows (run them after a retraining).
set -uo pipefail
. "$(dirname "$0")/parts.sh"
build=${1:-build-gpu}
out=${OUT:-/tmp}
export LD_LIBRARY_PATH="$PWD/$build/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export TB_SOURCE_ROOT=$PWD
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"
{
    for t in test_gpu_spec:50 test_dflash_gpu:40 test_ar_spec_gpu:90; do
        echo "== ${t%%:*}"
        timeout "${t##*:}" "$build/tests/${t%%:*}" 2>&1 | tail -25
        part_status "${t%%:*}" "${PIPESTATUS[0]}"
    done
} >"$out/tests.log" 2>&1
grep -E "exit|FAIL" "$out/tests.log"
echo "== tokbench suites/gpu-spec.ini"
timeout 120 "$build/tokbench" run suites/gpu-spec.ini --db "$out/spec.db" >"$out/spec.txt" 2>"$out/spec.err"
part_status "tokbench gpu-spec.ini" $?
echo "== peers"
timeout 90 python3 tools/peer_spec.py --accept 3,7,15 --runs 2 >"$out/peer.log" 2>&1
part_status peer_spec.py $?
grep -E "^peer|Error" "$out/peer.log" | tee "$out/peer.txt"
if [ "${SPEC_QUICK:-1}" = 1 ]; then
    echo "== the speculative rows of suites/quick.ini on the GPU"
    timeout 40 "$build/tokbench" run suites/quick.ini --filter backend=ar-small,ar-small-draft,ar-small-dflash,sdar-self \
        --db "$out/quick.db" >"$out/quick.txt" 2>"$out/quick.err"
    part_status "tokbench quick.ini" $?
fi
echo "== summary"
sed -n '/^backend  /,/^$/p' "$out/spec.txt" | cut -c1-220
sed -n '/^Speculative/,/^$/p' "$out/spec.txt" | cut -c1-220
grep -iE "error|failed" "$out/spec.err" | head -5
[ -f "$out/quick.txt" ] && sed -n '/^Speculative/,/^$/p' "$out/quick.txt" | cut -c1-220
[ -f "$out/quick.err" ] && grep -iE "error|failed" "$out/quick.err" | head -5
echo "== the engine's GPU test (the span attention kernel changed)"
timeout 60 "$build/tests/test_gpu" >"$out/test_gpu.log" 2>&1
part_status test_gpu $?
tail -2 "$out/test_gpu.log"
# the tests' statuses were recorded inside the log's braces, in this shell
parts_exit
