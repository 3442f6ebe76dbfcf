#!/usr/bin/env bash
# On the GPU machine (issue 19): the block-diffusion golden data made by
# tools/make_block_golden.py (CPU PyTorch) and checked at once by
# test_block_diffusion, the GPU tests, suites/gpu-block.ini and its PyTorch
# peer (tools/peer_sdar.py) in the same call. Build and carry as run.sh says.
#   bash tests/gpu/run_block.sh [build-gpu]
set -uo pipefail
. "$(dirname "$0")/parts.sh"
build=${1:-build-gpu}
out=${OUT:-/tmp}
export LD_LIBRARY_PATH="$PWD/$build/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export TB_SOURCE_ROOT=$PWD
{
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv,noheader
    echo "== golden data (CPU, float32)"
    CUDA_VISIBLE_DEVICES="" python3 tools/make_block_golden.py --out "$out/golden" 2>&1 | tail -40
    part_status golden "${PIPESTATUS[0]}"
    echo "== test_block_diffusion against it"
    "$build/tests/engine/test_block_diffusion" "$out/golden" 2>&1 | tail -30
    part_status test_block_diffusion "${PIPESTATUS[0]}"
    echo "== GPU tests"
    "$build/tests/test_gpu" 2>&1 | tail -40
    part_status test_gpu "${PIPESTATUS[0]}"
} >"$out/tests.log" 2>&1
tar -C "$out/golden" -czf "$out/golden.tar.gz" . && rm -rf "$out/golden"
echo "== tokbench suites/gpu-block.ini"
"$build/tokbench" run suites/gpu-block.ini --db "$out/block.db" >"$out/block.txt" 2>"$out/block.err"
part_status "tokbench gpu-block.ini" $?
echo "== tokbench suites/gpu-block-text.ini (Fast-dLLM v2, on text)"
"$build/tokbench" run suites/gpu-block-text.ini --db "$out/block.db" >"$out/block-text.txt" 2>"$out/block-text.err"
part_status "tokbench gpu-block-text.ini" $?
rm -f "$out/block.db"
python3 tools/peer_sdar.py --runs 2 >"$out/peer.log" 2>&1
part_status peer_sdar.py $?
grep -E "^peer|Error" "$out/peer.log" | tee "$out/peer.txt"
grep -E "exit|checks|FAIL" "$out/tests.log"
sed -n '/^backend  /,/^$/p' "$out/block.txt" "$out/block-text.txt" | cut -c1-220
parts_exit
