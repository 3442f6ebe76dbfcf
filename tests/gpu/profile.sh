#!/usr/bin/env bash
# On the GPU machine: ncu's per-kernel time and DRAM bytes of one decode
# step of the Llama-3-8B preset (the second, a graph replay: batch 1 and
# 32, prompt 128; Qwen3-30B-A3B's the same as moe1, moe32) and of one LLaDA-8B forward over the suite's 384 rows
# (prompt 352 + one 32-row block picked: the shape of suites/gpu-8b.ini's
# forwards). Build and carry as tests/gpu/run.sh says, then:
#   bash tests/gpu/profile.sh [build-gpu]
#
# ncu runs tests/gpu/bench_tp (tp 0: one device, in process), not
# `tokbench run`: the runner forks its worker without exec, and ncu never
# profiled a kernel of that child (three tries, cut at 35-150 s, "No
# kernels were profiled"). TB_GPU_PROFILE_CALL brackets the one call
# (gpu_forward.cu), so the load and its GEMV calibration are skipped.
# --clock-control none: the clocks stay as the suites see them (the
# device library's METHOD.md). Extra environment (TB_GPU_FUSION,
# TB_GPU_PDL; TB_BENCH_DTYPE=fp8 for dtype = fp8) passes through; TB_PROFILE_WHAT (default "ar1 ar32 llada")
# picks, TB_PROFILE_METRICS adds metrics (each may cost a replay pass),
# TB_PROFILE_TIMEOUT is each run's limit (s); TB_GPU_GEMV_PICKS and
# TB_GPU_FP8_PICKS (else taken from runs without ncu, below) the GEMV
# variants. Prints the tables
# (tools/ncu_summary.py); the CSVs go to $OUT.
set -uo pipefail
build=${1:-build-gpu}
out=${OUT:-/tmp}
export LD_LIBRARY_PATH="$PWD/$build/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
bench=$build/tests/bench_tp
[ -x "$bench" ] || bench=$build/bench_tp
metrics=gpu__time_duration.sum,launch__grid_size${TB_PROFILE_METRICS:+,$TB_PROFILE_METRICS}
# the batch-1 GEMV variants a run without ncu picks for each weight shape
# of the profiled presets (gpu_context.cu; ncu's own timings would pick
# others), passed to the profiled runs as "OUTxIN=V" lists: bf16's
# (TB_GPU_GEMV_PICKS) and, under TB_BENCH_DTYPE=fp8, the FP8 GEMV's
# (TB_GPU_FP8_PICKS)
if [ -z "${TB_GPU_GEMV_PICKS:-}${TB_GPU_FP8_PICKS:-}" ]; then
    log=$(mktemp)
    for preset in $(for w in ${TB_PROFILE_WHAT:-ar1 ar32 llada}; do
        case $w in ar*) echo llama-3-8b ;; llada) echo llada-8b ;; moe*) echo qwen3-30b-a3b ;; esac
    done | sort -u); do
        TB_GPU_GEMV_LOG=1 timeout 90 "$bench" "$preset" 1 8 2 0 >>"$log" 2>&1
    done
    export TB_GPU_GEMV_PICKS=$(sed -n 's/^gemv \([0-9]*x[0-9]*\):.*; variant \([0-9]*\)$/\1=\2/p' "$log" | sort -u | paste -sd,)
    export TB_GPU_FP8_PICKS=$(sed -n 's/^gemv fp8 \([0-9]*x[0-9]*\):.*; variant \([0-9]*\)$/\1=\2/p' "$log" | sort -u | paste -sd,)
    echo "GEMV variants by shape, timed without ncu: bf16 ${TB_GPU_GEMV_PICKS:-none}; fp8 ${TB_GPU_FP8_PICKS:-none}"
    rm -f "$log"
fi
for w in ${TB_PROFILE_WHAT:-ar1 ar32 llada}; do
    case $w in
    ar1) args="llama-3-8b 1 128 4 0" call=2 ;;
    ar32) args="llama-3-8b 32 128 4 0" call=2 ;;
    llada) args="llada-8b 1 352 32 0" call=1 ;;
    moe1) args="qwen3-30b-a3b 1 128 4 0" call=2 ;;
    moe32) args="qwen3-30b-a3b 32 128 4 0" call=2 ;;
    *) echo "unknown: $w" >&2; continue ;;
    esac
    TB_GPU_PROFILE_CALL=$call timeout "${TB_PROFILE_TIMEOUT:-150}" "$ncu" --profile-from-start off \
        --clock-control none --metrics "$metrics" --csv --page raw --print-units base \
        "$bench" $args >"$out/ncu-$w.csv" 2>"$out/ncu-$w.err"
    echo "== ncu $w: bench_tp $args (exit $?)"
    python3 tools/ncu_summary.py "$out/ncu-$w.csv" || tail -5 "$out/ncu-$w.err"
done
