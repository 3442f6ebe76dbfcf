#!/usr/bin/env bash
# tests/fuzz/run.sh — build every fuzz target with clang + libFuzzer +
# ASan + UBSan against the project's own sources, and run each for a
# bounded time from its seed corpus (tests/fuzz/corpus/TARGET) and its
# saved crashes (tests/fuzz/regressions/TARGET).
#
#   tests/fuzz/run.sh [--build DIR] [--seconds N] [--jobs N] [TARGET...]
#
#   --build DIR    work folder (default build-fuzz): objects, binaries,
#                  logs/, corpus copies (run/), crashes/
#   --seconds N    time per target (default $TB_FUZZ_SECONDS, else 10)
#   --jobs N       targets fuzzed at once (default: the CPU count, <= 4)
#   TARGET...      some of: config safetensors safetensors_index sse oai
#                  tokenizer tokenizer_json suite serve_request
#                  http_options prompts workload (default: all)
#
# Other settings: TB_FUZZ_CC (default clang), TB_FUZZ_SEED (libFuzzer
# -seed, default 1), TB_FUZZ_RSS_MB (default 2048).
#
# Exit status: 0 when no target crashed; 1 on a crash, leak, timeout or
# out-of-memory (the input is saved under DIR/crashes/TARGET/ and printed
# as base64; copy it to tests/fuzz/regressions/TARGET/ once fixed); 77
# (meson: skipped) when clang or libFuzzer's runtime is missing (Debian:
# apt-get install clang libclang-rt-dev); 2 when a target does not build.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

build=build-fuzz
seconds=${TB_FUZZ_SECONDS:-10}
jobs=
targets=()
while [ $# -gt 0 ]; do
    case $1 in
    --build) build=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    -h|--help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "run.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
    esac
done
case $build in /*) ;; *) build=$PWD/$build ;; esac
if [ -z "$jobs" ]; then
    jobs=$(nproc 2>/dev/null || echo 2)
    [ "$jobs" -gt 4 ] && jobs=4
fi
cc=${TB_FUZZ_CC:-clang}
seed=${TB_FUZZ_SEED:-1}
rss=${TB_FUZZ_RSS_MB:-2048}

# TARGET: its sources besides tests/fuzz/fuzz_TARGET.c, and -max_len.
declare -A srcs=(
    [config]="plugins/engine/format/config.c plugins/engine/format/dgemma_model.c plugins/engine/format/safetensors.c plugins/engine/cpu/fp8.c util/util.c util/redact.c util/strmem.c"
    [safetensors]="plugins/engine/format/safetensors.c util/util.c util/redact.c util/strmem.c"
    [safetensors_index]="plugins/engine/format/safetensors.c util/util.c util/redact.c util/strmem.c"
    [sse]="plugins/http/sse.c"
    [oai]="plugins/http/sse.c"
    [tokenizer]="plugins/engine/format/tokenizer.c util/util.c util/redact.c util/strmem.c"
    [tokenizer_json]="plugins/engine/format/tokenizer.c util/util.c util/redact.c util/strmem.c"
    [suite]="suite/suite.c suite/dims.c util/utf8.c util/utf8_valid.c util/util.c util/redact.c util/strmem.c"
    [serve_request]="serve/serve_request.c util/util.c util/redact.c util/strmem.c"
    [http_options]="plugins/http/json_options.c"
    [workload]="plugins/http/workload.c plugins/http/prompts.c plugins/http/arrivals.c plugins/engine/format/tokenizer.c util/utf8_valid.c util/strmem.c"
    [prompts]="suite/prompt_set.c suite/scorers.c util/utf8.c util/utf8_valid.c util/util.c util/redact.c util/strmem.c"
    [prometheus]="run/telemetry.c proc/proc.c util/util.c util/redact.c util/strmem.c"
)
declare -A max_len=(
    [config]=4096 [safetensors]=4096 [safetensors_index]=4096 [sse]=4096 [oai]=4096
    [tokenizer]=1024 [tokenizer_json]=32768 [suite]=4096 [serve_request]=8192 [http_options]=4096
    [prompts]=4096 [workload]=4096 [prometheus]=4096
)
all=(config safetensors safetensors_index sse oai tokenizer tokenizer_json suite serve_request http_options prompts workload
     prometheus)
[ ${#targets[@]} = 0 ] && targets=("${all[@]}")
for t in "${targets[@]}"; do
    [ -n "${srcs[$t]:-}" ] || { echo "run.sh: unknown target $t (${all[*]})" >&2; exit 2; }
done

# ---- is there a clang with libFuzzer?
skip() { echo "fuzz: skipped: $*" >&2; exit 77; }
command -v "$cc" >/dev/null 2>&1 || skip "no $cc (Debian: apt-get install clang libclang-rt-dev)"
command -v pkg-config >/dev/null 2>&1 || skip "no pkg-config"
mkdir -p "$build" || exit 2
probe=$build/probe.c
printf '%s\n' '#include <stdint.h>' '#include <stddef.h>' \
    'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);' \
    'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }' >"$probe"
"$cc" -fsanitize=fuzzer,address,undefined "$probe" -o "$build/probe" 2>"$build/probe.log" ||
    skip "$cc cannot link -fsanitize=fuzzer,address,undefined (libFuzzer's runtime: apt-get install libclang-rt-dev): $(head -c 300 "$build/probe.log")"

pkgs="libcjson libpcre2-8 libutf8proc libcrypto inih"
pc_cflags=$(pkg-config --cflags $pkgs) || skip "pkg-config: missing one of $pkgs"
pc_libs=$(pkg-config --libs $pkgs)

# ---- build
cflags=(-std=c11 -g -O1 -fno-omit-frame-pointer -Wall -Wextra
        -fsanitize=address,undefined -fno-sanitize-recover=undefined
        -I"$root/include" -I"$root/util" -I"$root/measure" -I"$root/proc" -I"$root/suite" -I"$root/run" -I"$root/serve" -I"$root/plugins/engine/format" -I"$root/plugins/engine/cpu" -I"$root/plugins/http"
        $pc_cflags)
mkdir -p "$build/obj" "$build/logs" "$build/tmp"
declare -A want_src=()
for t in "${targets[@]}"; do
    for s in ${srcs[$t]}; do want_src[$s]=1; done
done
t0=$(date +%s)
for s in "${!want_src[@]}"; do
    o=$build/obj/$(echo "$s" | tr / _).o
    rm -f "$o"
    "$cc" "${cflags[@]}" -fsanitize=fuzzer-no-link -c "$root/$s" -o "$o" 2>"$o.log" &
done
wait
for t in "${targets[@]}"; do
    objs=()
    for s in ${srcs[$t]}; do objs+=("$build/obj/$(echo "$s" | tr / _).o"); done
    rm -f "$build/fuzz_$t"
    "$cc" "${cflags[@]}" -fsanitize=fuzzer "$here/fuzz_$t.c" "${objs[@]}" $pc_libs -lm \
        -o "$build/fuzz_$t" 2>"$build/logs/build_$t.log" &
done
wait
bad=0
for t in "${targets[@]}"; do [ -x "$build/fuzz_$t" ] || bad=1; done
if [ $bad = 1 ]; then
    cat "$build"/obj/*.log "$build"/logs/build_*.log >&2
    echo "fuzz: a target did not build" >&2
    exit 2
fi
echo "fuzz: built ${#targets[@]} targets with $("$cc" --version | head -1) in $(($(date +%s) - t0)) s"

# ---- run
# The file-reading targets write their input to files each run: in memory
# (/dev/shm) when there is one, else in the build folder.
tmp=$(mktemp -d /dev/shm/tb-fuzz.XXXXXX 2>/dev/null) || tmp=$(mktemp -d "$build/tmp/run.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT
export TMPDIR=$tmp TB_SOURCE_ROOT=$root
export ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1:handle_abort=1:symbolize=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
for s in llvm-symbolizer /usr/lib/llvm-*/bin/llvm-symbolizer; do
    if command -v "$s" >/dev/null 2>&1; then export ASAN_SYMBOLIZER_PATH=$(command -v "$s"); break; fi
done

run_one() {
    local t=$1 work=$build/run/$1 crashes=$build/crashes/$1
    rm -rf "$work" "$crashes"
    mkdir -p "$work/corpus" "$crashes"
    [ -d "$here/corpus/$t" ] && cp "$here/corpus/$t"/* "$work/corpus/" 2>/dev/null
    local dict=()
    [ -f "$here/dict/$t.dict" ] && dict=(-dict="$here/dict/$t.dict")
    local regs=()
    [ -d "$here/regressions/$t" ] && regs=("$here/regressions/$t")
    (cd "$work" && "$build/fuzz_$t" -seed="$seed" -max_total_time="$seconds" \
        -rss_limit_mb="$rss" -timeout=10 -max_len="${max_len[$t]}" -print_final_stats=1 \
        -artifact_prefix="$crashes/" "${dict[@]}" corpus "${regs[@]}" \
        </dev/null >"$build/logs/$t.log" 2>&1)
    echo $? >"$build/logs/$t.rc"
}

running=0
for t in "${targets[@]}"; do
    run_one "$t" &
    running=$((running + 1))
    if [ $running -ge "$jobs" ]; then wait -n; running=$((running - 1)); fi
done
wait

# ---- report
failed=0
printf '%-18s %12s %9s %6s %6s %7s  %s\n' target execs exec/s cov ft corpus result
for t in "${targets[@]}"; do
    log=$build/logs/$t.log rc=$(cat "$build/logs/$t.rc" 2>/dev/null || echo 99)
    execs=$(awk '/stat::number_of_executed_units:/ {print $2}' "$log" | tail -1)
    secs=$(awk '/^Done [0-9]+ runs in/ {print $(NF-1)}' "$log" | tail -1)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
    ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
    corpus=$(ls "$build/run/$t/corpus" 2>/dev/null | wc -l)
    rate=-
    [ -n "$execs" ] && [ -n "$secs" ] && [ "$secs" -gt 0 ] 2>/dev/null && rate=$((execs / secs))
    result=ok
    if [ "$rc" != 0 ]; then
        result="FAILED (exit $rc)"
        failed=1
    fi
    printf '%-18s %12s %9s %6s %6s %7s  %s\n' "$t" "${execs:--}" "$rate" "${cov:--}" "${ft:--}" "$corpus" "$result"
done
for t in "${targets[@]}"; do
    rc=$(cat "$build/logs/$t.rc" 2>/dev/null || echo 99)
    [ "$rc" = 0 ] && continue
    echo
    echo "==== fuzz_$t failed (exit $rc); the end of $build/logs/$t.log:"
    tail -n 60 "$build/logs/$t.log"
    for f in "$build/crashes/$t"/*; do
        [ -f "$f" ] || continue
        echo "---- saved input: $f ($(wc -c <"$f") bytes); replay: $build/fuzz_$t $f"
        echo "---- once fixed, keep it: cp $f $here/regressions/$t/"
        if [ "$(wc -c <"$f")" -le 16384 ]; then
            echo "---- base64:"
            base64 "$f"
        fi
    done
done
[ $failed = 0 ] && echo "fuzz: ${#targets[@]} targets, $seconds s each, no crash"
exit $failed
