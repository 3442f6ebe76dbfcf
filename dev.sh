#!/usr/bin/env bash
# dev.sh — the two commands of the README, on a fresh Debian/Ubuntu machine:
#
#   ./dev.sh quick   install what is missing, build, run suites/quick.ini
#                    and print the side-by-side report
#   ./dev.sh test    install what is missing, build, run every test: the
#                    normal build, then again under ASan+UBSan
#
# Build folders: build/ (release-like, -O2 -g) and build-asan/.
# Set TOKBENCH_NO_INSTALL=1 to skip the package step.
set -euo pipefail
cd "$(dirname "$0")"

packages=(meson ninja-build pkg-config gcc libc6-dev python3 make
          libinih-dev libsqlite3-dev libcjson-dev libssl-dev sqlite3
          libpcre2-dev libutf8proc-dev libcurl4-openssl-dev libopenblas-dev libmicrohttpd-dev
          chromium fonts-dejavu-core  # chromium + a font: the HTML report's browser test
          clang libclang-rt-dev)      # libFuzzer + sanitizers: tests/fuzz/run.sh

install_packages() {
    [ "${TOKBENCH_NO_INSTALL:-0}" = 1 ] && return 0
    local missing=()
    for p in "${packages[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
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

# Run meson test in DIR; prints meson's summary, returns its status.
# Adds the Ok/Fail counts to the totals.
passed=0
failed=0
run_tests() {
    local dir=$1 rc=0
    meson test -C "$dir" --print-errorlogs --num-processes 2 || rc=$?
    local log="$dir/meson-logs/testlog.txt"
    local ok fail
    ok=$(awk '/^Ok:/ {n=$2} END {print n+0}' "$log")
    fail=$(awk '/^(Fail|Timeout|Unexpected Pass):/ {n+=$NF} END {print n+0}' "$log")
    passed=$((passed + ok))
    failed=$((failed + fail))
    [ "$rc" = 0 ] || [ "$fail" -gt 0 ] || failed=$((failed + 1)) # meson failed before testing
    return 0
}

case "${1:-}" in
quick)
    install_packages
    build build
    exec ./build/tokbench run suites/quick.ini "${@:2}"
    ;;
test)
    install_packages
    build build
    run_tests build
    # Sanitizers: ASan + UBSan on the same tests (lundef off: plugins are
    # dlopened into a sanitized executable).
    build build-asan -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debug
    UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 run_tests build-asan
    echo "$passed passed, $failed failed"
    [ "$failed" = 0 ]
    ;;
*)
    sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
