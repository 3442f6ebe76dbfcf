#!/usr/bin/env bash
# End to end, a canvas-bursty server through the http backend (issue 41;
# docs/METRICS.md, "Canvas models"), with tests/e2e/canvas_server.py:
#   1. /burst streams 16 tokens a chunk with the cumulative usage on each
#      chunk (vLLM's continuous_usage_stats): each request stores
#      tokens_per_chunk 16 and bursty 1, the case tokens_per_chunk (16)
#      and canvas_gap_ms (the gaps between its chunks, 3 a request of 64
#      tokens); on one event loop and on two (the plugin's deferred
#      emissions);
#   2. /token streams one token a chunk, with the same usage: tokens_per_chunk
#      1, bursty 0, no canvas_gap_ms;
#   3. /plain streams 16 words a chunk but without usage per chunk: the
#      client cannot count a chunk's tokens, 1 a chunk, not bursty (the
#      rule's documented limit);
#   4. the reports: the TPOT cell of the bursty cases holds their median
#      canvas gap, marked "*", with the note under the table (show, and the
#      Markdown report's latency table); the other cases' TPOT unmarked;
#   5. the diffusion backends in-process (the small trained models, a
#      masked sampler at two step counts, a block sampler at two
#      thresholds, flow): every request's canvases add up to its output
#      tokens and steps_done, and the HTML report's "canvas" chart has a
#      point per case, a series per backend.
# Counts and flags only: no wall-clock bounds (the server's pacing only
# spreads the chunks out).
#
# usage: test_canvas.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
tb_init canvas "$@"
need_sqlite3
[ -f "$build/plugins/http/http.so" ] || { echo "SKIP: http plugin not built (libcurl missing)"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
export TOKBENCH_PLUGIN_PATH="$build/plugins"

start_server canvas python3 "$src/tests/e2e/canvas_server.py" || tb_finish
cat >"$tmp/c.ini" <<EOT
[suite]
name = canvas-http
warmup = 0
repeat = 2
[matrix]
prompt_tokens = 8
max_new_tokens = 64
requests = 3
concurrency = 1
[backend burst]
plugin = http
url = http://127.0.0.1:$port/burst/v1
preflight = false
[backend burst_loops]
plugin = http
url = http://127.0.0.1:$port/burst/v1
preflight = false
loops = 2
[backend token]
plugin = http
url = http://127.0.0.1:$port/token/v1
preflight = false
[backend plain]
plugin = http
url = http://127.0.0.1:$port/plain/v1
preflight = false
EOT
# burst_loops: 2 requests at once on 2 event loops
sed -i '/^\[backend burst_loops\]/,/^loops/ s/^loops = 2$/loops = 2\nconcurrency = 2/' "$tmp/c.ini"
"$tb" run "$tmp/c.ini" --db "$tmp/c.db" >"$tmp/c.out" 2>"$tmp/c.err"
[ "$(q "$tmp/c.db" "select count(*) from bench_case where status = 'ok'")" = 4 ] && pass "4 cases ran" \
    || { fail "run: $(tail -5 "$tmp/c.err")"; tb_finish; }
req() { # BACKEND: its requests' distinct "tokens_per_chunk/bursty/chunk_gap_ms is null"
    q "$tmp/c.db" "select group_concat(x, ' ') from (select distinct r.tokens_per_chunk || '/' || r.bursty || '/' ||
        (r.chunk_gap_ms is null) as x from request r join sample s on s.id = r.sample_id join bench_case c
        on c.id = s.case_id join backend b on b.id = c.backend_id where b.label = '$1' and r.status = 'ok')"
}
metric() { # BACKEND METRIC: "n|median" of the case's row, "" when none
    q "$tmp/c.db" "select m.n || '|' || m.median from metric m join bench_case c on c.id = m.case_id
        join backend b on b.id = c.backend_id where b.label = '$1' and m.name = '$2'"
}
nreq() { q "$tmp/c.db" "select count(*) from request r join sample s on s.id = r.sample_id join bench_case c
    on c.id = s.case_id join backend b on b.id = c.backend_id where b.label = '$1' and r.status = 'ok'"; }

# ---------------------------------------------------------------- 1-3. the stored figures
for b in burst burst_loops; do
    [ "$(nreq $b)" = 6 ] && [ "$(req $b)" = "16.0/1/0" ] && pass "$b: every request 16 tokens a chunk, bursty" \
        || fail "$b: $(nreq $b) ok requests, '$(req $b)'"
    [ "$(metric $b tokens_per_chunk)" = "24|16.0" ] && pass "$b: tokens_per_chunk 24 chunks, median 16" \
        || fail "$b: tokens_per_chunk '$(metric $b tokens_per_chunk)'"
    [ "$(metric $b canvas_gap_ms | cut -d'|' -f1)" = 18 ] && pass "$b: canvas_gap_ms over 18 gaps (3 a request)" \
        || fail "$b: canvas_gap_ms '$(metric $b canvas_gap_ms)'"
done
[ "$(nreq token)" = 6 ] && [ "$(req token)" = "1.0/0/0" ] && pass "token: 1 token a chunk, not bursty" \
    || fail "token: $(nreq token) ok requests, '$(req token)'"
[ "$(metric token tokens_per_chunk)" = "384|1.0" ] && pass "token: tokens_per_chunk 384 chunks, median 1" \
    || fail "token: tokens_per_chunk '$(metric token tokens_per_chunk)'"
[ -z "$(metric token canvas_gap_ms)" ] && pass "token: no canvas_gap_ms row" \
    || fail "token: canvas_gap_ms '$(metric token canvas_gap_ms)'"
[ "$(req plain)" = "1.0/0/0" ] && [ -z "$(metric plain canvas_gap_ms)" ] \
    && pass "plain: no usage a chunk: 1 token a chunk, not bursty" || fail "plain: '$(req plain)'"
# every case's output tokens are the server's usage (64 a request)
[ "$(q "$tmp/c.db" "select count(*) from request where status = 'ok' and output_tokens = 64")" = 24 ] \
    && pass "64 output tokens in each of the 24 requests" || fail "output tokens"

# ---------------------------------------------------------------- 4. the reports
gap() { printf '%.2f' "$(metric "$1" canvas_gap_ms | cut -d'|' -f2)"; }
tpot() { printf '%.2f' "$(metric "$1" tpot_ms | cut -d'|' -f2)"; }
"$tb" show 1 --db "$tmp/c.db" --wide >"$tmp/show.txt" 2>&1 || fail "show: $(cat "$tmp/show.txt")"
for b in burst burst_loops; do
    grep -qE "^$b .* $(gap $b)\* " "$tmp/show.txt" && pass "show: $b's TPOT cell is its canvas gap $(gap $b), marked" \
        || fail "show: $b's row lacks '$(gap $b)*': $(grep "^$b " "$tmp/show.txt")"
done
for b in token plain; do
    row=$(grep "^$b " "$tmp/show.txt")
    grep -q " $(tpot $b) " <<<"$row" && ! grep -q '\*' <<<"$row" && pass "show: $b's TPOT $(tpot $b), unmarked" \
        || fail "show: $b's row: $row (TPOT $(tpot $b))"
done
[ "$(grep -c 'a canvas model (docs/METRICS.md' "$tmp/show.txt")" = 1 ] && pass "show: the note, once" \
    || fail "show: $(grep -c 'a canvas model' "$tmp/show.txt") notes"
"$tb" report 1 --db "$tmp/c.db" --format md -o "$tmp/r.md" 2>/dev/null || fail "markdown report"
# (Markdown: 3 decimals, the mark escaped)
grep -qE "^\| *burst .*\| *$(printf '%.3f' "$(metric burst canvas_gap_ms | cut -d'|' -f2)")\\\\\* *\|" "$tmp/r.md" \
    && pass "markdown: burst's TPOT cell is its canvas gap, marked" \
    || fail "markdown: $(grep -E '^\| *burst ' "$tmp/r.md")"
grep -qE "^\| *token .*\*" "$tmp/r.md" && fail "markdown: token's row marked: $(grep -E '^\| *token ' "$tmp/r.md")" \
    || pass "markdown: token's row unmarked"
grep -q 'a canvas model (docs/METRICS.md' "$tmp/r.md" && pass "markdown: the note" || fail "markdown: no note"

# ---------------------------------------------------------------- 5. diffusion in-process, the chart
cat >"$tmp/d.ini" <<EOT
[suite]
name = canvas-diffusion
warmup = 0
repeat = 1
seed = 3
[matrix]
prompt_tokens = 8
max_new_tokens = 16
batch = 2
[backend llada]
plugin = diffusion
model = $src/models/small-llada
sampler = low_confidence
block_length = 4
steps = 8, 16
threads = 1
[backend sdar]
plugin = diffusion
model = $src/models/small-sdar
sampler = sdar_dynamic
threshold = 0.9, 0.5
threads = 1
[backend flow]
plugin = flow
model = $src/models/small-flow
solver = euler
steps = 4
threads = 1
EOT
"$tb" run "$tmp/d.ini" --db "$tmp/d.db" >"$tmp/d.out" 2>"$tmp/d.err"
[ "$(q "$tmp/d.db" "select count(*) from bench_case where status = 'ok'")" = 5 ] && pass "diffusion: 5 cases ran" \
    || { fail "diffusion run: $(tail -5 "$tmp/d.err")"; tb_finish; }
# llada: 4 canvases (blocks of 4) of 16 tokens; flow one; sdar its blocks of 4
got=$(q "$tmp/d.db" "select group_concat(x, ' ') from (select distinct b.label || ':' || r.canvases || ':' ||
    (r.canvas_committed = r.output_tokens) || (r.canvas_steps = r.steps_done) ||
    (json_array_length(r.canvases_json) = r.canvases) ||
    (case when b.label = 'flow' then json_extract(r.canvases_json, '\$[#-1][3]') <= r.e2e_ns / 1e6 + 0.0015
     else abs(json_extract(r.canvases_json, '\$[#-1][3]') - r.e2e_ns / 1e6) < 0.0015 end) as x from request r
    join sample s on s.id = r.sample_id join bench_case c on c.id = s.case_id join backend b on b.id = c.backend_id
    order by x)")
# the last flag: the last canvas committed with the answer's last tokens (E2E, to the µs the JSON keeps), not
# after the block's store forward that SDAR runs after its last block too; flow does not stream, so its E2E is
# the call's return, at or after its one canvas
[ "$got" = "flow:1:1111 llada:4:1111 sdar:4:1111" ] \
    && pass "diffusion: canvases add up to output tokens and steps_done, the last at E2E ($got)" \
    || fail "diffusion canvases: $got"
"$tb" report 1 --db "$tmp/d.db" --format html -o "$tmp/d.html" 2>/dev/null || fail "html report"
python3 - "$tmp/d.html" <<'PY' && pass "html: one canvas chart, a series per backend, a point per case" || fail "canvas chart"
import re, sys
doc = open(sys.argv[1]).read()
figs = re.findall(r'<figure class="chart" data-kind="canvas">(.*?)</figure>', doc, re.S)
assert len(figs) == 1, f"{len(figs)} canvas charts"
series = re.findall(r'<g class="series-group" data-series="([^"]*)"', figs[0])
assert series == ["llada", "sdar", "flow"], series
tips = re.findall(r'<title>([^<:]*): ([0-9.]+) steps a canvas, ([0-9.]+) tokens committed a step', figs[0])
cases = [t[0] for t in tips]
assert cases == ["llada, steps 8", "llada, steps 16", "sdar, threshold 0.9", "sdar, threshold 0.5", "flow, steps 4"], tips
# llada's blocks of 4 at 8 and 16 steps: 2 and 4 steps a block, 2 and 1 tokens a step; flow: 4 steps, 4 tokens a step
assert [t[1:] for t in tips[:2] + tips[4:]] == [("2", "2"), ("4", "1"), ("4", "4")], tips
PY
tb_finish
