#!/usr/bin/env bash
# test_oot_plugin.sh BUILD_DIR SOURCE_DIR
#
# Proves docs/PLUGINS.md: install the build into a scratch root, build
# examples/plugin/echo.c out of tree against the installed header through
# pkg-config only, then let the installed tokbench list the plugin and run
# a small suite with it into a fresh SQLite file.
#
# Exit status: 0 pass, 1 fail, 77 skip (a needed tool is missing).
set -euo pipefail

build=${1:?usage: test_oot_plugin.sh BUILD_DIR SOURCE_DIR}
src=${2:?usage: test_oot_plugin.sh BUILD_DIR SOURCE_DIR}
meson=${MESON:-meson}

for tool in pkg-config sqlite3 make "${CC:-cc}"; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "SKIP: '$tool' not found" >&2
        exit 77
    fi
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/tokbench-oot.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

fail() {
    echo "FAIL: $*" >&2
    exit 1
}

# Show a captured log, then fail.
fail_log() {
    local log=$1
    shift
    echo "---- $log" >&2
    cat "$log" >&2 || true
    echo "----" >&2
    fail "$@"
}

# 1. Install, as a user would (prefix /usr/local), into a scratch root.
"$meson" install -C "$build" --destdir "$tmp/root" --no-rebuild --quiet \
    >"$tmp/install.log" 2>&1 ||
    fail_log "$tmp/install.log" "meson install -C $build --destdir $tmp/root"

pc=$(find "$tmp/root" -name tokbench.pc -type f -print -quit)
[[ -n $pc ]] || fail "no tokbench.pc installed under $tmp/root"
tokbench=$(find "$tmp/root" -path '*/bin/tokbench' -type f -print -quit)
[[ -n $tokbench && -x $tokbench ]] ||
    fail "no executable bin/tokbench installed under $tmp/root"
[[ -n $(find "$tmp/root" -path '*/include/tokbench/backend.h' -print -quit) ]] ||
    fail "include/tokbench/backend.h not installed under $tmp/root"

# pkg-config sees only the scratch root, never a tokbench.pc of the system.
export PKG_CONFIG_PATH
PKG_CONFIG_PATH=$(dirname "$pc")
export PKG_CONFIG_LIBDIR=$PKG_CONFIG_PATH
export PKG_CONFIG_SYSROOT_DIR=$tmp/root
cflags=$(pkg-config --cflags tokbench) || fail "pkg-config --cflags tokbench"
[[ $cflags == *"$tmp/root"* ]] ||
    fail "pkg-config --cflags tokbench gave '$cflags', not a path under $tmp/root"

# Libraries the installed binary may need (none if it is self-contained).
for d in "$tmp"/root/usr/local/lib/*-linux-gnu "$tmp/root/usr/local/lib" \
    "$tmp/root/usr/local/lib64"; do
    if [[ -d $d ]]; then
        LD_LIBRARY_PATH=$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    fi
done
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}
unset TOKBENCH_PLUGIN_PATH

# 2. Build the example out of tree: a copy of examples/plugin, its Makefile.
tmpbuild=$tmp/echo
mkdir -p "$tmpbuild"
cp -R "$src/examples/plugin/." "$tmpbuild/"
rm -f "$tmpbuild/echo.so"
make -C "$tmpbuild" CFLAGS="-O2 -g -Wall -Wextra -Werror" \
    >"$tmp/make.log" 2>&1 || fail_log "$tmp/make.log" "make in $tmpbuild"
[[ -f $tmpbuild/echo.so ]] || fail "make did not produce $tmpbuild/echo.so"

# 3. The installed tokbench lists the plugin's options, by path and by name
#    through TOKBENCH_PLUGIN_PATH.
"$tokbench" plugins "$tmpbuild/echo.so" >"$tmp/plugins.log" 2>&1 ||
    fail_log "$tmp/plugins.log" "tokbench plugins $tmpbuild/echo.so: exit $?"
grep -q delay_us "$tmp/plugins.log" ||
    fail_log "$tmp/plugins.log" "tokbench plugins $tmpbuild/echo.so: no 'delay_us' in the output"

TOKBENCH_PLUGIN_PATH=$tmpbuild "$tokbench" plugins echo >"$tmp/plugins2.log" 2>&1 ||
    fail_log "$tmp/plugins2.log" "TOKBENCH_PLUGIN_PATH=$tmpbuild tokbench plugins echo: exit $?"
grep -q delay_us "$tmp/plugins2.log" ||
    fail_log "$tmp/plugins2.log" "tokbench plugins echo: no 'delay_us' in the output"

# 4. A suite with the plugin runs and stores its samples.
cat >"$tmp/suite.ini" <<SUITE
[suite]
name = oot
warmup = 0
repeat = 2

[matrix]
prompt_tokens = 8
max_new_tokens = 4

[backend echo]
plugin = $tmpbuild/echo.so
SUITE

(cd "$tmp" && "$tokbench" run "$tmp/suite.ini" --db "$tmp/t.db") \
    >"$tmp/run.log" 2>&1 || fail_log "$tmp/run.log" "tokbench run suite.ini: exit $?"
[[ -f $tmp/t.db ]] || fail_log "$tmp/run.log" "tokbench run made no database $tmp/t.db"

n=$(sqlite3 "$tmp/t.db" "select count(*) from sample where warmup = 0") ||
    fail "sqlite3 query of $tmp/t.db failed"
[[ $n == 2 ]] || fail_log "$tmp/run.log" "expected 2 stored samples, found '$n'"

# 5. examples/plugin/README.md: the same example built against the build
#    tree, not installed (its meson-uninstalled/tokbench-uninstalled.pc).
unset PKG_CONFIG_SYSROOT_DIR
treebuild=$tmp/echo-tree
mkdir -p "$treebuild"
cp -R "$src/examples/plugin/." "$treebuild/"
rm -f "$treebuild/echo.so"
PKG_CONFIG_LIBDIR=$build/meson-uninstalled make -C "$treebuild" PKG_CONFIG_PATH="$build/meson-uninstalled" \
    CFLAGS="-O2 -g -Wall -Wextra -Werror" >"$tmp/make-tree.log" 2>&1 ||
    fail_log "$tmp/make-tree.log" "make PKG_CONFIG_PATH=$build/meson-uninstalled in $treebuild"
"$build/tokbench" plugins "$treebuild/echo.so" >"$tmp/plugins-tree.log" 2>&1 ||
    fail_log "$tmp/plugins-tree.log" "tokbench plugins $treebuild/echo.so: exit $?"
grep -q delay_us "$tmp/plugins-tree.log" ||
    fail_log "$tmp/plugins-tree.log" "the build-tree echo.so: no 'delay_us' in the output"

echo "PASS: out-of-tree echo plugin built with pkg-config (installed and build tree), listed and run ($n samples)"
