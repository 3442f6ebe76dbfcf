#!/usr/bin/env bash
# On the GPU machine: DiffusionGemma on CUDA in one call (issue 41).
#   1. tests/gpu/test_dgemma_gpu (the GPU passes, decide and generate()
#      against the CPU; the published-shape preset loads and runs a canvas);
#   2. suites/gpu-dgemma.ini and its PyTorch peer (tools/peer_dgemma.py:
#      transformers' DiffusionGemmaForBlockDiffusion at the same shape,
#      random bf16 weights, its generate()) in the same call, one after the
#      other (each needs the ~50 GB of weights on the card); a short table
#      last. Logs under $OUT (dgemma-logs.tgz).
# Build as tests/gpu/run.sh says, carry the build folder, and run from the
# repository root:
#   bash tests/gpu/run_dgemma.sh build-gpu [--no-tests] [--no-suite] [--no-peer] [--short]
# --short: vLLM's published condition alone (step cap 16, a reply of 256 =
# one canvas), the first 2 prompts, suite and peer alike: a few minutes of
# device time where the whole suite and its peer take about ten.
set -uo pipefail
build=${1:-build-gpu}
tests=1 suite=1 peer=1 short=0
for a in "${@:2}"; do
    [ "$a" = "--no-tests" ] && tests=0
    [ "$a" = "--no-suite" ] && suite=0
    [ "$a" = "--no-peer" ] && peer=0
    [ "$a" = "--short" ] && short=1
done
here=$(cd "$(dirname "$0")/../.." && pwd)
out=${DGEMMA_WORK:-$(mktemp -d /tmp/dgemma.XXXXXX)}
mkdir -p "$out"
trap 'tar -czf "${OUT:-/tmp}/dgemma-logs.tgz" -C "$out" . 2>/dev/null' EXIT
export LD_LIBRARY_PATH="$PWD/$build/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export TB_SOURCE_ROOT=$PWD
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"
test_rc=-
if [ $tests = 1 ]; then
    echo "== test_dgemma_gpu"
    timeout ${GPU_TEST_TIMEOUT:-240} "$build/tests/test_dgemma_gpu" "$here/tests/data/golden-dgemma" \
        >"$out/test_dgemma_gpu.log" 2>&1
    test_rc=$?
    grep -vE "^$" "$out/test_dgemma_gpu.log" | cut -c1-240 | tail -40
    echo "test_dgemma_gpu exit $test_rc"
fi
if [ $suite = 1 ]; then
    ini=$here/suites/gpu-dgemma.ini
    if [ $short = 1 ]; then # the same suite at one condition (the keys as the file writes them)
        sed -e 's/^max_new_tokens = 32, 256/max_new_tokens = 256/' -e 's/^limit = 4 /limit = 2 /' \
            -e 's/^steps = 48, 16 /steps = 16 /' -e 's/^name = gpu-dgemma$/name = gpu-dgemma-short/' \
            -e "s|^file = data/|file = $here/suites/data/|" \
            "$ini" >"$out/gpu-dgemma-short.ini"
        for k in "max_new_tokens = 256" "limit = 2 " "steps = 16 " "name = gpu-dgemma-short" "file = /"; do
            grep -q "^$k" "$out/gpu-dgemma-short.ini" || { echo "run_dgemma.sh: --short: no '$k' made" >&2; exit 2; }
        done
        ini=$out/gpu-dgemma-short.ini
    fi
    echo "== tokbench $ini"
    timeout ${SUITE_TIMEOUT:-300} "$build/tokbench" run "$ini" --db "$out/gpu-dgemma.db" \
        >"$out/gpu-dgemma.txt" 2>"$out/gpu-dgemma.err"
    suite_rc=$?
    echo "tokbench exit $suite_rc"
fi
if [ $peer = 1 ]; then
    echo "== peer (transformers)"
    peer_args=(--runs ${PEER_RUNS:-1} --limit ${PEER_LIMIT:-4})
    [ $short = 1 ] && peer_args=(--runs 1 --limit 2 --lengths 256 --steps 16)
    timeout ${PEER_TIMEOUT:-300} python3 "$here/tools/peer_dgemma.py" "${peer_args[@]}" >"$out/peer.txt" 2>&1
    peer_rc=$?
    echo "peer exit $peer_rc"
    grep -E "^peer|Error|error" "$out/peer.txt" | cut -c1-300
fi
echo "== summary (test_dgemma_gpu exit $test_rc)"
[ -f "$out/gpu-dgemma.txt" ] && sed -n '/^backend  /,/^$/p' "$out/gpu-dgemma.txt" | cut -c1-260
[ -f "$out/gpu-dgemma.err" ] && grep -E "failed|error" "$out/gpu-dgemma.err" | head -5
# a failed part fails the script (a skipped test, 77, is not a failure here)
case $test_rc in 0 | 77 | -) ;; *) exit 1 ;; esac
[ "${suite_rc:-0}" = 0 ] && [ "${peer_rc:-0}" = 0 ] || exit 1
exit 0
