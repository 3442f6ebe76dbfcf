#!/usr/bin/env bash
# Tables that fit (issue 39 item 8), on pseudo-terminals of 80 and 120
# columns (tests/e2e/pty_run.py):
#   1. the engine suite (the quick.ini fixture: four backends): `show`
#      prints no line wider than the terminal, keeps tokens/s, NFE and
#      accuracy at 80 columns, and fits the side-by-side table (the
#      backends over several tables of the same rows, every backend in one);
#   2. a serving suite (plugins/http against tests/fault_server.py, a
#      concurrency sweep): no line wider, and at 80 columns TTFT, TPOT p99
#      and req/s are kept;
#   3. a run's live lines (a null suite of long labels): no line, bar or
#      finished case's, wider than the terminal; a finished case's line
#      keeps the backend and the values that tell the cases apart, and is
#      never cut inside a number; no ETA before the first case has ended;
#      the warm-up counts its requests.
# The ETA's arithmetic is tests/unit/test_progress.c (scripted works and
# times). Nothing here depends on timing. The fixture's part runs last:
# the others run while the fixture may still be running.
#
# usage: test_tables.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
tb_init tables "$@"
need_sqlite3
command -v python3 >/dev/null || { echo "SKIP: python3 not installed"; exit 77; }
null="$build/plugins/null/null.so"
pty() { env -u COLUMNS python3 "$src/tests/e2e/pty_run.py" "$@"; } # COLUMNS OUT COMMAND...

# check_width W FILE: every line of a terminal's output (split at \n and
# \r, control codes removed) at most W columns; prints the wider ones
check_width() {
    python3 - "$1" "$2" <<'EOF'
import re, sys
w, text = int(sys.argv[1]), open(sys.argv[2], "rb").read().decode()
text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", text)
bad = [l for l in re.split(r"[\r\n]", text) if len(l) > w]
for l in bad[:5]:
    print(f"{len(l)} columns: {l!r}")
sys.exit(1 if bad else 0)
EOF
}

# header FILE: the case table's header line (the first that starts "backend ")
header() { tr -d '\r' <"$1" | grep -m1 '^backend '; }

# --- 2. a serving suite: plugins/http against an instant server
if [ -f "$build/plugins/http/http.so" ]; then
    export TOKBENCH_PLUGIN_PATH="$build/plugins"
    start_server fault python3 "$src/tests/e2e/fault_server.py" --quiet || exit 1
    cat >"$tmp/serving.ini" <<EOF
[suite]
name = serving
warmup = 1
repeat = 2
goodput_ttft_ms = 10000
[matrix]
prompt_tokens = 8
max_new_tokens = 8
requests = 8
[backend vllm-like-server]
plugin = http
url = http://127.0.0.1:$port/v1
concurrency = 1, 2, 4
EOF
    for w in 80 120; do
        # in $tmp, short paths: the run's own lines name its files
        (cd "$tmp" && pty $w "serving$w.out" "$tb" run serving.ini --db "s$w.db") || fail "run serving on $w columns"
        wide=$(check_width $w "$tmp/serving$w.out") || fail "run serving on $w columns: lines wider: $wide"
        head=$(header "$tmp/serving$w.out")
        for want in "TTFT ms" "TPOT p99" "req/s"; do
            [[ "$head" == *"$want"* ]] || fail "run serving on $w columns: the serving table left out \"$want\": $head"
        done
        # the warm-up counts its requests (8 a call), as the measured calls do
        grep -q 'warm-up 0/1, 0/8 requests' "$tmp/serving$w.out" || fail "run serving on $w columns: no request counter in the warm-up"
    done
    pass "serving suite: run and show within 80 and 120 columns, TTFT ms, TPOT p99 and req/s kept; the warm-up counts requests"
else
    echo "note: http plugin not built (libcurl missing): the serving table not checked"
fi

# --- 3. a run's live lines: long labels, a tag that tells the cases apart
cat >"$tmp/live.ini" <<EOF
[suite]
name = live
warmup = 1
repeat = 2
[matrix]
prompt_tokens = 8
max_new_tokens = 4
batch = 1, 2
steps = 2, 4
[backend tbns-long-backend-name]
plugin = $null
step_us = 100
EOF
for w in 80 120; do
    (cd "$tmp" && pty $w "live$w.out" "$tb" run live.ini --db "l$w.db") || fail "run live on $w columns"
    wide=$(check_width $w "$tmp/live$w.out") || fail "run on $w columns: lines wider: $wide"
    python3 - "$tmp/live$w.out" <<'EOF' >"$tmp/live$w.txt" || fail "run on $w columns: $(cat "$tmp/live$w.txt")"
import re, sys
text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", open(sys.argv[1], "rb").read().decode())
bad = []
done = re.findall(r"\[(\d)/4\] ok +([^\r\n]*)", text)
if len(done) != 4:
    bad.append(f"{len(done)} finished cases' lines, expected 4")
seen = set()
for n, line in done:
    m = re.match(r"tbns-long-backend-name .*batch=(\d) steps=(\d)", line)
    if not m:
        bad.append(f"a finished case's line lacks the backend or its batch and steps: {line!r}")
    else:
        seen.add(m.groups())
    if re.search(r"[0-9.]…", line):
        bad.append(f"cut inside a number: {line!r}")
if len(seen) != 4 and not bad:
    bad.append(f"the lines do not tell the 4 cases apart: {sorted(seen)}")
# no ETA before the first case has ended
first = text.find("[1/4] ")
if first < 0 or "ETA" in text[:first]:
    bad.append("an ETA before the first case ended")
print("; ".join(bad) if bad else "ok")
sys.exit(1 if bad else 0)
EOF
done
pass "live lines within 80 and 120 columns, the backend and the swept values kept, never cut inside a number, no ETA before a case ends"


# --- 1. the engine suite: the quick.ini fixture (a copy)
if fixture=$(bash "$src/tests/e2e/quick_fixture.sh" check "$build" "$src"); then
    cp "$fixture" "$tmp/quick.db"
    backends=$(q "$tmp/quick.db" "select label from backend order by id")
    [ "$(echo "$backends" | wc -l)" -ge 4 ] || fail "the fixture has not four backends: $backends"
    for w in 80 120; do
        pty $w "$tmp/quick$w.out" "$tb" show --db "$tmp/quick.db" || fail "show on $w columns"
        wide=$(check_width $w "$tmp/quick$w.out") || fail "show on $w columns: lines wider: $wide"
        head=$(header "$tmp/quick$w.out")
        for want in "agg tok/s" "NFE" "accuracy"; do
            [[ "$head" == *"$want"* ]] || fail "show on $w columns: the engine table left out \"$want\": $head"
        done
        # the side-by-side: every backend in a header of its tables, every
        # table of the same rows (as many as the first)
        # (up to the tables after it: speculative decoding, warnings, the legend)
        tr -d '\r' <"$tmp/quick$w.out" | awk '/^side by side/ {on = 1} /^(Speculative decoding:|warnings:|req tok\/s:)/ {on = 0} on' >"$tmp/sbs$w.txt"
        for b in $backends; do
            grep -qE "^(prompt|new|batch|steps)  .*  $b( |$)" "$tmp/sbs$w.txt" \
                || fail "show on $w columns: $b in no side-by-side table: $(head -5 "$tmp/sbs$w.txt")"
        done
        rows=$(awk '/^-/ {if (n) print n; n = 0; t = 1; next} /^$/ {if (t && n) print n; n = 0; t = 0; next} t {n++} END {if (t && n) print n}' "$tmp/sbs$w.txt" | sort -u)
        [ "$(echo "$rows" | wc -l)" = 1 ] || fail "show on $w columns: side-by-side tables of different rows: $rows"
    done
    [ "$(grep -c '^-' "$tmp/sbs80.txt")" -ge 2 ] || fail "show on 80 columns: the side-by-side not split"
    grep -qE '[0-9]+\.[0-9] @[0-9]+% ppl [0-9]+\.[0-9]' "$tmp/sbs80.txt" || fail "side-by-side cells not short: $(sed -n 4p "$tmp/sbs80.txt")"
    pass "engine suite (the fixture): show within 80 and 120 columns, agg tok/s, NFE and accuracy kept; side by side split into tables of the same rows"
else
    fail "the quick.ini fixture: $fixture"
fi

tb_finish
