#!/usr/bin/env bash
# On the GPU machine: ncu's per-kernel time and DRAM bytes of one batch-1
# decode step of the Llama-3-8B preset (the second, after the graph is
# captured) and of one LLaDA-8B forward (prompt 128, block 32: 160 rows),
# each bracketed by TB_GPU_PROFILE_CALL (gpu_forward.cu) so that ncu skips
# the load-time calibration. Build and carry as tests/gpu/run.sh says, then:
#   bash tests/gpu/profile.sh [build-gpu]
# Extra environment (TB_GPU_FUSION, TB_GPU_PDL) passes through;
# TB_PROFILE_DTYPE (auto, fp8) sets the backends' dtype, TB_PROFILE_WHAT
# (default "ar llada") which to profile, TB_PROFILE_TIMEOUT each ncu run's
# limit (s). Prints the tables (tools/ncu_summary.py); the CSVs go to $OUT.
set -uo pipefail
build=${1:-build-gpu}
out=${OUT:-/tmp}
dtype=${TB_PROFILE_DTYPE:-auto}
export LD_LIBRARY_PATH="$PWD/$build/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export TB_SOURCE_ROOT=$PWD
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
cat >/tmp/profile-ar.ini <<EOT
[suite]
name = profile-ar
warmup = 0
repeat = 1
[matrix]
prompt_tokens = 128
max_new_tokens = 3
[backend ar]
plugin = ar
model = preset:llama-3-8b
device = cuda
dtype = $dtype
batch = 1
EOT
cat >/tmp/profile-llada.ini <<EOT
[suite]
name = profile-llada
warmup = 0
repeat = 1
[matrix]
prompt_tokens = 128
max_new_tokens = 32
[backend llada]
plugin = diffusion
model = preset:llada-8b
device = cuda
dtype = $dtype
sampler = low_confidence
block_length = 32
steps = 1
batch = 1
EOT
for w in ${TB_PROFILE_WHAT:-ar llada}; do
    call=1
    [ $w = ar ] && call=2
    TB_GPU_PROFILE_CALL=$call timeout "${TB_PROFILE_TIMEOUT:-280}" "$ncu" --profile-from-start off --target-processes all \
        --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,launch__grid_size \
        --csv --page raw --print-units base \
        "$build/tokbench" run /tmp/profile-$w.ini --db /tmp/profile-$w.db >"$out/ncu-$w-$dtype.csv" 2>/tmp/profile-$w.err
    echo "== ncu $w, dtype $dtype (exit $?)"
    python3 tools/ncu_summary.py "$out/ncu-$w-$dtype.csv" || tail -5 /tmp/profile-$w.err
done
