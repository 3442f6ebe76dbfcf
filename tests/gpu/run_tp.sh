#!/usr/bin/env bash
# On the GPU machine: tensor parallelism (issue 23). test_tp (tp = 1
# through NCCL against one device; tp = N against tp = 1 where N GPUs
# exist), bench_tp (decode and diffusion forward, the all-reduce time per
# step, per-GPU memory) at every tp the host allows, suites/gpu-tp.ini,
# then test_gpu (the one-device path unchanged). Build as tests/gpu/run.sh
# says, then (device tool) carry build-gpu and run:
#   bash tests/gpu/run_tp.sh [build-gpu]
# TP_SUITE=0 / TP_GPU_TEST=0 skip the suite / test_gpu; TP_GEN sets the
# AR bench's generated tokens (128).
# NCCL comes from the pip package nvidia-nccl-cu13 there (loaded at run
# time: TB_NCCL_LIB); NVLink multicast (NVLS) stays off.
set -uo pipefail
build=${1:-build-gpu}
out=${OUT:-/tmp}
export LD_LIBRARY_PATH="$PWD/$build/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export TB_SOURCE_ROOT=$PWD
export NCCL_NVLS_ENABLE=0
if [ -z "${TB_NCCL_LIB:-}" ]; then
    d=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null)
    [ -n "$d" ] && [ -e "$d/lib/libnccl.so.2" ] && export TB_NCCL_LIB="$d/lib/libnccl.so.2"
    [ -z "${TB_NCCL_LIB:-}" ] && export TB_NCCL_LIB=$(find /usr /opt /root -name libnccl.so.2 -path '*site-packages*' 2>/dev/null | head -1)
fi
echo "NCCL: ${TB_NCCL_LIB:-libnccl.so.2 on the loader path}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"
echo "== test_tp"
timeout 60 "$build/tests/test_tp" >"$out/test_tp.log" 2>&1
tp_rc=$?
cut -c1-200 "$out/test_tp.log" | tail -40
echo "test_tp exit $tp_rc"
n=$(nvidia-smi -L | wc -l)
tps="0 1"
for t in 2 4 8; do [ "$t" -le "$n" ] && tps="$tps $t"; done
echo "== bench_tp (tp: $tps)"
timeout 60 "$build/tests/bench_tp" llama-3-8b 1 128 ${TP_GEN:-128} $tps 2>&1 | tee "$out/bench_tp.txt"
timeout 60 "$build/tests/bench_tp" llada-8b 1 128 256 $tps 2>&1 | tee -a "$out/bench_tp.txt"
if [ "${TP_SUITE:-1}" = 1 ]; then
    echo "== tokbench suites/gpu-tp.ini"
    timeout 150 "$build/tokbench" run suites/gpu-tp.ini --db "$out/gpu-tp.db" >"$out/gpu-tp.txt" 2>"$out/gpu-tp.err"
    echo "tokbench exit $?"
    sed -n '/^backend  /,/^$/p' "$out/gpu-tp.txt" | cut -c1-220
    grep -E "failed|error" "$out/gpu-tp.err" | head -5
fi
if [ "${TP_GPU_TEST:-1}" = 1 ]; then
    echo "== test_gpu"
    timeout 150 "$build/tests/test_gpu" >"$out/test_gpu.log" 2>&1
    echo "test_gpu exit $?"
    grep -E "FAIL|fail" "$out/test_gpu.log" | head -10
fi
