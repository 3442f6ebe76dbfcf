#!/usr/bin/env bash
# On the GPU machine: a restructuring's A/B in one call. The GPU tests on
# the new build, then the same suites on the old and the new build one
# after the other (same card, same call): suites/gpu-8b.ini (AR, LLaDA,
# threshold caches, flow; repeat 2) and suites/quick.ini (the four small
# models and the judge on the GPU: equal accuracy and judge perplexity
# say the tokens are equal). Build both here (tests/gpu/run.sh says how),
# copy tokbench, plugins/*/*.so, tests/test_gpu, test_tp and lib/ of each
# into two folders, carry both and run:
#   bash tests/gpu/run_ab.sh BEFORE_DIR AFTER_DIR [PARTS]
# PARTS: any of tests, quick, suite (default all three; one device call
# holds 10 minutes: tests + quick in one, suite in another).
set -uo pipefail
before=$1
after=$2
parts=${3:-tests quick suite}
has() { [[ " $parts " == *" $1 "* ]]; }
out=${OUT:-/tmp}
export TB_SOURCE_ROOT=$PWD
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"
lib() { echo "$PWD/$1/lib:/usr/local/cuda/lib64"; }
if has tests; then
echo "== GPU tests (after)"
LD_LIBRARY_PATH=$(lib "$after") timeout 300 "$after/tests/test_gpu" >"$out/test_gpu.log" 2>&1
echo "test_gpu exit $?"; grep -E "checks|FAIL|failed" "$out/test_gpu.log" | tail -5
LD_LIBRARY_PATH=$(lib "$after") timeout 60 "$after/tests/test_tp" >"$out/test_tp.log" 2>&1
echo "test_tp exit $?"; tail -2 "$out/test_tp.log"
fi
sed 's/^repeat = 3/repeat = 2/' suites/gpu-8b.ini >"$out/gpu-8b-ab.ini"
has suite && for side in before after; do
    dir=${!side}
    echo "== $side: gpu-8b (repeat 2)"
    LD_LIBRARY_PATH=$(lib "$dir") timeout 280 "$dir/tokbench" run "$out/gpu-8b-ab.ini" --db "$out/gpu-$side.db" \
        >"$out/gpu-8b-$side.txt" 2>"$out/gpu-8b-$side.err"
    echo "exit $?"
    sed -n '/^backend  /,/^$/p' "$out/gpu-8b-$side.txt" | cut -c1-150
done
has quick && for side in before after; do
    dir=${!side}
    echo "== $side: quick.ini on the GPU"
    LD_LIBRARY_PATH=$(lib "$dir") timeout 100 "$dir/tokbench" run suites/quick.ini --db "$out/quick-$side.db" \
        >"$out/quick-$side.txt" 2>"$out/quick-$side.err"
    echo "exit $?"
    sed -n '/^side by side/,$p' "$out/quick-$side.txt" | cut -c1-170
done
