#!/usr/bin/env bash
# dev.sh — the two commands of the README, on a fresh Debian/Ubuntu machine:
#
#   ./dev.sh quick   install what is missing, build, run suites/quick.ini
#                    and print the side-by-side report
#   ./dev.sh test    install what is missing, build, run every test: the
#                    normal build, then again under ASan+UBSan; in each,
#                    the default `meson test` and the slow suite (fuzzing,
#                    soak, crash trials: `meson test --suite slow`) in one
#                    run; the timing checks (suite timing) in the normal
#                    build only
#
# Build folders: build/ (release-like, -O2 -g) and build-asan/.
# Set TOKBENCH_NO_INSTALL=1 to skip the package step.
set -euo pipefail
cd "$(dirname "$0")"

packages=(meson ninja-build pkg-config gcc libc6-dev python3 make
          libinih-dev libsqlite3-dev libcjson-dev libssl-dev sqlite3
          libpcre2-dev libutf8proc-dev libcurl4-openssl-dev libopenblas-dev libmicrohttpd-dev
          chromium fonts-dejavu-core  # chromium + a font: the HTML report's browser test
          nodejs npm                  # the OpenAI Node SDK test (tests/node, npm ci below)
          python3-yaml                # tests/test_shard.sh reads the Kubernetes example
          clang libclang-rt-dev)      # libFuzzer + sanitizers: tests/fuzz/run.sh

install_packages() {
    [ "${TOKBENCH_NO_INSTALL:-0}" = 1 ] && return 0
    local missing=()
    for p in "${packages[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" && continue
        # npm: NodeSource's nodejs bundles it (and conflicts with Debian's npm)
        [ "$p" = npm ] && command -v npm >/dev/null && continue
        missing+=("$p")
    done
    [ ${#missing[@]} = 0 ] && return 0
    echo "dev.sh: installing ${missing[*]}" >&2
    local sudo=()
    [ "$(id -u)" = 0 ] || sudo=(sudo)
    "${sudo[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
}

# setup DIR [meson options...]: configure once, then build.
build() {
    local dir=$1
    shift
    if [ ! -f "$dir/build.ninja" ]; then
        meson setup "$dir" "$@" >&2
    fi
    ninja -C "$dir" >&2
}

# run_tests DIR [meson test options...]: run meson test in DIR; prints
# meson's summary. Adds the Ok/Fail counts to the totals.
passed=0
failed=0
run_tests() {
    local dir=$1 rc=0
    shift
    local log="$dir/meson-logs/testlog.txt"
    rm -f "$log" # counted once: a run that writes none counts as failed
    # one test more than the 2 cores CI has: a good part of the run waits
    # out deadlines (hangs that tests provoke, servers that must time out)
    # and would hold a core idle
    meson test -C "$dir" --print-errorlogs --num-processes "${TB_TEST_PROCESSES:-3}" "$@" || rc=$?
    local ok=0 fail=0
    if [ -f "$log" ]; then
        ok=$(awk '/^Ok:/ {n=$2} END {print n+0}' "$log")
        fail=$(awk '/^(Fail|Timeout|Unexpected Pass):/ {n+=$NF} END {print n+0}' "$log")
    fi
    passed=$((passed + ok))
    failed=$((failed + fail))
    # meson failed before testing, or ran nothing
    { [ "$rc" = 0 ] && [ -f "$log" ]; } || [ "$fail" -gt 0 ] || failed=$((failed + 1))
    return 0
}

# every_suite DIR: --suite S for each suite of DIR's tests (naming the
# suites runs those the default setup leaves out: slow)
every_suite() {
    meson introspect "$1" --tests | python3 -c 'import json, sys
for s in sorted({s.split(":")[-1] for t in json.load(sys.stdin) for s in t["suite"]}): print("--suite\n" + s)'
}

case "${1:-}" in
quick)
    install_packages
    build build
    exec ./build/tokbench run suites/quick.ini "${@:2}"
    ;;
test)
    install_packages
    # tests/node's npm packages as its lock pins them (the OpenAI Node SDK:
    # tests/test_openai_node.sh), when node_modules is missing or the lock
    # changed (without npm, that test fails saying so)
    if command -v npm >/dev/null && ! cmp -s tests/node/package-lock.json tests/node/node_modules/.installed-lock; then
        (cd tests/node && npm ci --no-audit --no-fund >&2)
        cp tests/node/package-lock.json tests/node/node_modules/.installed-lock
    fi
    build build
    # The default tests and the slow suite, which the default leaves out
    # (top-level meson.build: add_test_setup), in one run: the long slow
    # tests fill in beside the default ones.
    list=$(every_suite build) # set -e: no list, no run
    mapfile -t suites <<<"$list"
    run_tests build "${suites[@]}"
    # Sanitizers: ASan + UBSan on the same tests (lundef off: plugins are
    # dlopened into a sanitized executable), but for the timing checks
    # (suite timing: wall-clock figures, which a sanitizer slows unevenly).
    # The soak's 20 s (60 in the normal build, for its flat RSS) are for
    # LeakSanitizer, which reports at exit whatever the soak's length.
    # Without CUDA: no device runs a kernel here (the GPU tests skip), and
    # nvcc's debug objects were most of this build's time. -O1, as the
    # sanitizers' own docs advise: -O0's code ran the engines' loops several
    # times slower, and the checks are the same.
    build build-asan -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debug -Doptimization=1 -Dcuda=disabled
    list=$(every_suite build-asan)
    mapfile -t suites <<<"$list"
    UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 TB_SOAK_SECONDS=${TB_SOAK_SECONDS:-20} \
        run_tests build-asan "${suites[@]}" --no-suite timing
    echo "$passed passed, $failed failed"
    [ "$failed" = 0 ]
    ;;
*)
    sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
