#!/usr/bin/env bash
# test_install.sh BUILD_DIR SOURCE_DIR
#
# Issue 39 item 11: an installed tokbench runs its default suite. Install
# the build into a scratch root (as test_oot_plugin.sh does), then, from an
# empty folder, let the installed tokbench plan `run quick` (a suite name,
# no path: the installed suites) and run one case of it (ar-small at batch
# 8: every prompt, a few seconds) into a fresh database. The scratch root
# is not the build's prefix, so TOKBENCH_DATA_DIR and TOKBENCH_PLUGIN_PATH
# point the binary at it; quick.ini's own paths (../models, data/) resolve
# from the installed file.
set -euo pipefail
build=${1:?usage: test_install.sh BUILD_DIR SOURCE_DIR}
meson=${MESON:-meson}
command -v sqlite3 >/dev/null || { echo "SKIP: no sqlite3" >&2; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tokbench-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; [ -n "${2:-}" ] && cat "$2" >&2; exit 1; }

"$meson" install -C "$build" --destdir "$tmp/root" --no-rebuild --quiet >"$tmp/install.log" 2>&1 ||
    fail "meson install --destdir $tmp/root" "$tmp/install.log"
tokbench=$(find "$tmp/root" -path '*/bin/tokbench' -type f -print -quit)
suite=$(find "$tmp/root" -path '*/share/tokbench/suites/quick.ini' -type f -print -quit)
plugins=$(find "$tmp/root" -path '*/tokbench/plugins/ar.so' -type f -printf '%h' -quit)
[ -x "$tokbench" ] && [ -n "$suite" ] && [ -n "$plugins" ] ||
    fail "not installed: bin/tokbench '$tokbench', share/tokbench/suites/quick.ini '$suite', plugins '$plugins'"
data=$(dirname "$(dirname "$suite")")
for f in models/small-llama/model.safetensors models/small-llada/model.safetensors \
    models/small-flow/model.safetensors models/small-sdar/model.safetensors suites/data/quick.jsonl; do
    [ -f "$data/$f" ] || fail "$f not installed beside the suites ($data)"
done
for d in "$tmp"/root/usr/local/lib/*-linux-gnu "$tmp/root/usr/local/lib" "$tmp/root/usr/local/lib64"; do
    [ -d "$d" ] && LD_LIBRARY_PATH=$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
done
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}
export TOKBENCH_PLUGIN_PATH=$plugins TOKBENCH_DATA_DIR=$data
mkdir "$tmp/work"
cd "$tmp/work" # no suites/ or models/ here: only the installed ones

"$tokbench" run quick --dry-run >"$tmp/dry.log" 2>&1 || fail "installed tokbench run quick --dry-run: exit $?" "$tmp/dry.log"
grep -q "#24 " "$tmp/dry.log" || fail "run quick --dry-run: not the 24 cases of quick.ini" "$tmp/dry.log"
"$tokbench" run quick --filter backend=ar-small --filter batch=8 --db "$tmp/q.db" >"$tmp/run.log" 2>&1 ||
    fail "installed tokbench run quick (ar-small, batch 8): exit $?" "$tmp/run.log"
got=$(sqlite3 "$tmp/q.db" "SELECT s.status, s.suite_path = '$suite', count(DISTINCT c.id), sum(r.status = 'ok'),
    (SELECT count(*) FROM prompt) FROM session s JOIN bench_case c ON c.session_id = s.id
    JOIN sample sa ON sa.case_id = c.id AND sa.warmup = 0 JOIN request r ON r.sample_id = sa.id")
[ "$got" = "completed|1|1|176|176" ] ||
    fail "stored session: '$got', expected completed, the installed quick.ini, 1 case, 176 ok requests of 176 prompts" "$tmp/run.log"

# A suite name that is nowhere: the error names it, as a missing file.
rc=0; "$tokbench" run nosuchsuite --dry-run >"$tmp/no.log" 2>&1 || rc=$?
[ $rc = 2 ] && grep -q nosuchsuite "$tmp/no.log" || fail "run nosuchsuite: exit $rc" "$tmp/no.log"
echo "PASS: the installed tokbench planned and ran its default suite by name ($got)"
