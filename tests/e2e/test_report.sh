#!/usr/bin/env bash
# End-to-end: report, compare, history and db merge on real sessions of
# the null backend (figures known from its timing model) and of the CPU
# engines (suites/quick.ini), stored in real SQLite files and checked with
# sqlite3.
#
# The session of suites/quick.ini is the quick.ini fixture
# (tests/quick_fixture.sh, the meson test quick_fixture: meson runs it
# before this test).
#
# usage: test_report.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
tb_init report "$@"
null="$build/plugins/null/null.so"
need_sqlite3

count() { grep -c -- "$2" "$1" || true; } # lines of file $1 matching $2

# --- sessions: two runs of the scripted suite (12 cases each), a third
# where the AR-like backend is 50% slower per step, one with failures and
# noise, one of the CPU engines.
quick="$src/tests/data/suites/null-quick.ini"
db="$tmp/a.db"
for i in 1 2; do
    "$tb" run "$quick" --db "$db" >/dev/null 2>"$tmp/run$i.err" || { fail "null-quick run $i"; cat "$tmp/run$i.err"; }
done
sed -e 's/^step_us = 400/step_us = 600/' "$quick" >"$tmp/slower.ini"
"$tb" run "$tmp/slower.ini" --db "$db" --filter batch=1 --filter prompt_tokens=32 >/dev/null 2>&1 || fail "slower run"
[ "$(q "$db" "select count(*) from session where status = 'completed'")" = 3 ] || fail "expected 3 sessions"

cat >"$tmp/warn.ini" <<EOF
[suite]
name = warn<i>&"q"
warmup = 0
repeat = 6
[matrix]
max_new_tokens = 8
[backend noisy]
plugin = $null
prefill_us = 5000
jitter = 0.9
[backend skewed]
plugin = $null
count_extra = 2
[backend broken]
plugin = $null
fail_at = 2
EOF
"$tb" run "$tmp/warn.ini" --db "$tmp/w.db" >/dev/null 2>&1
[ "$(q "$tmp/w.db" "select count(*) from bench_case where status = 'failed'")" = 1 ] || fail "warn suite: no failed case"

# --- 1. report --format md: conditions, warnings, every metric.
"$tb" report --db "$db" >"$tmp/last.md" || fail "report (default: md of the last session)"
"$tb" report 3 --db "$db" --format md -o "$tmp/3.md" 2>/dev/null || fail "report 3 -o"
cmp -s "$tmp/last.md" "$tmp/3.md" || fail "report of the last session differs from report 3"
"$tb" report --last --db "$db" --format markdown | cmp -s - "$tmp/3.md" || fail "report --last differs"
"$tb" report 1 --db "$db" -o "$tmp/1.md" 2>/dev/null || fail "report 1"
md="$tmp/1.md"
for want in "# tokbench report: quick, session 1" "## Warnings" "## Side by side: aggregate tokens/s" \
    "## Throughput (tokens/s)" "## Latency (ms)" "## Work and resources" "## Every metric of every case" \
    "### Machine" "### Backend ar-like" "| suite sha256 | $(q "$db" "select suite_sha256 from session where id = 1") |" \
    "| tokbench | 0.1.0 (commit" "| random weights | no |" "| dtype |" "| CPU |" "| GPU |" "ini" \
    "p5 (slow tail)" "decode-only" "TTFT p95" "tokens/forward" "energy J/token" "roofline %"; do
    grep -qF -- "$want" "$md" || fail "report md lacks \"$want\""
done
# every (case, metric) row of the metric table appears in the statistics table
rows=$(sed -n '/^## Every metric/,/^## Conditions/p' "$md" | grep -c '^| ar-like \|^| diffusion-like ')
[ "$rows" = "$(q "$db" "select count(*) from metric m join bench_case c on c.id = m.case_id where c.session_id = 1")" ] \
    || fail "statistics table has $rows rows"
# the AR reference fills every steps row of the side-by-side (8 rows, 2 backends)
sbs=$(sed -n '/^## Side by side/,/^## Throughput/p' "$md" | grep -cE '^\| [0-9]+ \| 64 \| [14] \| (8|16) \| [0-9.]+ \| [0-9.]+ \|$')
[ "$sbs" = 8 ] || fail "side by side has $sbs full rows, expected 8"
# the figures are the stored ones: the median agg tok/s of a case, rounded
want=$(q "$db" "select printf('%.1f', median) from metric m join bench_case c on c.id = m.case_id join backend b on b.id = c.backend_id where c.session_id = 1 and b.label = 'ar-like' and c.batch = 4 and c.prompt_tokens = 32 and m.name = 'agg_tps'")
grep -qE "^\| ar-like \| prompt 32, new 64, batch 4 \| ok \| 5 \| [0-9.]+ \| [0-9.]+ \| $want \|" "$md" \
    || fail "throughput row of ar-like batch 4 lacks the stored median $want"
pass "report md: conditions, side by side, every metric"

"$tb" report --db "$tmp/w.db" >"$tmp/w.md" || fail "report of the warning session"
grep -qF 'broken failed \[prompt 128, new 8, batch 1\]: generate() failed at repetition 2' "$tmp/w.md" \
    || fail "md lacks the failed case warning"
grep -q 'noisy \\\[.*\\\]: noisy, aggregate tok/s CV' "$tmp/w.md" || fail "md lacks the noise warning"
grep -q 'skewed: 6 requests in 1 cases count more output tokens than the output ids' "$tmp/w.md" || fail "md lacks the count mismatch warning"
grep -q 'no warm-up run' "$tmp/w.md" || fail "md lacks the no-warm-up warning"
grep -qF '# tokbench report: warn&lt;i&gt;&amp;"q", session 1' "$tmp/w.md" || fail "md title not escaped"
pass "report md: failed, noisy, mismatch, warm-up warnings; escaping"

# a result that contradicts the others (docs/METRICS.md, "Contradicting
# results"): session 1 as measured (the scripted timing model: more steps,
# more forwards, slower) has none; with the agg_tps rows of diffusion-like's
# steps 8 and 16 cases (prompt 32, batch 1) swapped, the 16-step case runs
# twice the forwards per token and is the faster: the warning in show and
# the report, with the stored figures
show1=$("$tb" show 1 --db "$db" --wide 2>&1)
grep -q "yet faster" <<<"$show1" && fail "a contradiction in the scripted session: $(grep "yet faster" <<<"$show1")"
cp "$db" "$tmp/contra.db"
c8=$(q "$db" "select c.id from bench_case c join backend b on b.id = c.backend_id where c.session_id = 1 and b.label = 'diffusion-like' and c.prompt_tokens = 32 and c.batch = 1 and c.steps = 8")
c16=$(q "$db" "select c.id from bench_case c join backend b on b.id = c.backend_id where c.session_id = 1 and b.label = 'diffusion-like' and c.prompt_tokens = 32 and c.batch = 1 and c.steps = 16")
q "$tmp/contra.db" "update metric set case_id = -1 where case_id = $c8 and name = 'agg_tps'; update metric set case_id = $c8 where case_id = $c16 and name = 'agg_tps'; update metric set case_id = $c16 where case_id = -1 and name = 'agg_tps'"
want=$(q "$tmp/contra.db" "select printf('diffusion-like [prompt 32, new 64, batch 1, steps 16]: steps 16 vs 8: more forwards per output token (%.2f vs %.2f tokens/forward) yet faster (%.1f vs %.1f tok/s aggregate, 95%% intervals apart)', (select mean from metric where case_id = $c16 and name = 'tokens_per_forward'), (select mean from metric where case_id = $c8 and name = 'tokens_per_forward'), (select median from metric where case_id = $c16 and name = 'agg_tps'), (select median from metric where case_id = $c8 and name = 'agg_tps'))")
"$tb" show 1 --db "$tmp/contra.db" --wide >"$tmp/contra.out" 2>&1
"$tb" report 1 --db "$tmp/contra.db" -o "$tmp/contra.md" 2>/dev/null || fail "report of the crafted session"
# (Markdown escapes the brackets: the finding after them)
[ "$(grep -c "yet faster" "$tmp/contra.out")" = 1 ] && grep -qF "$want" "$tmp/contra.out" && grep -qF "${want#*]: }" "$tmp/contra.md" \
    || fail "the contradiction: expected \"$want\", show says: $(grep "yet faster" "$tmp/contra.out"), the report: $(grep "yet faster" "$tmp/contra.md")"
pass "a contradiction (16 steps faster than 8, planted): warned in show and report with the stored figures; none as measured"

# --- 2. report --format html: charts present, text escaped.
"$tb" report 1 --db "$db" --format html -o "$tmp/1.html" 2>/dev/null || fail "report html"
h="$tmp/1.html"
kinds() { grep -o 'data-kind="[a-z]*"' "$1" | sort | uniq -c | awk '{printf "%s%s", sep, $2 "=" $1; sep=" "} END {print ""}'; }
# 4 steps charts (prompt × batch), latency+throughput per prompt (2 each),
# 4 ITL charts, and history of both backends (sessions 1-3 share cases):
# ar-like's 4 cases in one chart, diffusion-like's 8 in two (7 a chart).
k=$(kinds "$h")
[ "$k" = 'data-kind="history"=3 data-kind="itl"=4 data-kind="latency"=2 data-kind="steps"=4 data-kind="throughput"=2' ] \
    || fail "html charts: $k"
grep -q 'data-series="ar-like (no steps: reference)"' "$h" || fail "steps chart lacks the AR reference line"
[ "$(grep -c 'class="series reference" d="M' "$h")" = 4 ] || fail "expected 4 AR reference lines"
grep -q 'data-kind="pareto"' "$h" && fail "pareto drawn without a quality metric"
grep -q '<script' "$h" && fail "html has a script"
grep -qE '(src|href)="(https?:)?//' "$h" && fail "html loads something from outside"
"$tb" report --db "$tmp/w.db" --format html -o "$tmp/w.html" 2>/dev/null
grep -qF 'warn&lt;i&gt;&amp;&quot;q&quot;' "$tmp/w.html" || fail "html title not escaped"
grep -q '<i>' "$tmp/w.html" && fail "html has an unescaped <i>"
pass "report html: $k"

# quality: a synthetic score per case draws the Pareto chart and table
cp "$db" "$tmp/qual.db"
q "$tmp/qual.db" "insert into metric (case_id, name, unit, n, median, p5, p95) select id, 'quality', 'accuracy', 5, 0.5 + 0.02 * coalesce(steps, 20) - 0.001 * batch, 0.4, 0.95 from bench_case where session_id = 1"
"$tb" report 1 --db "$tmp/qual.db" --format html -o "$tmp/qual.html" 2>/dev/null || fail "report html with quality"
[ "$(grep -c 'data-kind="pareto"' "$tmp/qual.html")" = 1 ] || fail "no pareto chart with a quality metric"
grep -q 'data-series="Pareto front"' "$tmp/qual.html" || fail "no Pareto front"
"$tb" report 1 --db "$tmp/qual.db" >"$tmp/qual.md"
grep -q '^## Quality next to speed' "$tmp/qual.md" || fail "md lacks the quality table"
pass "quality metric: Pareto chart and table"

# csv and json through report (the export formats)
"$tb" report 1 --db "$db" --format csv -o "$tmp/1.csv" 2>/dev/null || fail "report csv"
[ "$(wc -l <"$tmp/1.csv")" = 13 ] || fail "csv has $(wc -l <"$tmp/1.csv") lines, expected 13"
"$tb" report 1 --db "$db" --format json -o "$tmp/1.json" 2>/dev/null || fail "report json"
[ "$(sqlite3 :memory: "select json_array_length(readfile('$tmp/1.json'), '\$.cases')")" = 12 ] || fail "json export"
"$tb" report 1 --db "$db" --format pdf 2>"$tmp/e"; [ $? = 2 ] || fail "bad --format not exit 2"
grep -q -- '--format pdf: expected md, html, csv or json' "$tmp/e" || fail "bad format message: $(cat "$tmp/e")"
"$tb" report 99 --db "$db" 2>"$tmp/e"; [ $? = 2 ] || fail "missing session not exit 2"
grep -q 'no session "99"' "$tmp/e" || fail "missing session message: $(cat "$tmp/e")"
# a uuid prefix names a session from 8 characters on; a shorter one (like
# a wrong id) never does, even when some uuid starts with it
u=$(q "$db" "select uuid from session where id = 1")
"$tb" report "${u:0:8}" --db "$db" --format csv -o "$tmp/u.csv" 2>/dev/null || fail "uuid prefix of 8 not resolved"
cmp -s "$tmp/u.csv" "$tmp/1.csv" || fail "uuid prefix resolved to another session"
"$tb" report "${u:0:7}" --db "$db" 2>"$tmp/e" >/dev/null; [ $? = 2 ] || fail "a 7-character uuid prefix was taken"
"$tb" report 1 --db "$db" -o "$tmp/no/such/dir.md" 2>"$tmp/e"; [ $? = 1 ] || fail "unwritable -o not exit 1"
pass "report csv/json, bad input"

# --- 3. compare
"$tb" compare 1 2 --db "$db" >"$tmp/c12.out"; rc=$?
[ $rc = 0 ] || fail "compare 1 2 exit $rc"
[ "$(grep -cE '^(ar-like|diffusion-like) ' "$tmp/c12.out")" = 48 ] || fail "compare 1 2: expected 12 cases x 4 metrics"
grep -q '^12 matching cases; 48 rows' "$tmp/c12.out" || fail "compare summary: $(tail -3 "$tmp/c12.out")"
# a threshold that nothing crosses passes (a session against itself: no
# change at all; two runs of the same timing could differ by any amount on
# a loaded machine, so they are not the witness)
"$tb" compare 1 1 --db "$db" --fail-if-slower 1 >"$tmp/c12f.out" || fail "compare 1 1 --fail-if-slower 1: $(grep -E 'slower$' "$tmp/c12f.out")"
# session 3 steps the AR-like backend at 600 us instead of 400 (how much
# slower it measures, its regressions and their p-values are timings:
# test_report_timing.sh, suite timing); exit 0 or 1 (regressions) here
"$tb" compare 1 3 --db "$db" --metric agg_tps,e2e_ms --fail-if-slower 10 >"$tmp/c13.out"; rc=$?
[ $rc = 0 ] || [ $rc = 1 ] || fail "compare 1 3 --fail-if-slower 10: exit $rc"
grep -q '^  suite: sha256' "$tmp/c13.out" || fail "compare 1 3 does not say the suites differ"
grep -q '^3 matching cases (9 only in A, 0 only in B)' "$tmp/c13.out" || fail "compare 1 3 matching: $(grep matching "$tmp/c13.out")"
# two backends of one session: AR (no steps) against each step count
"$tb" compare 1 --backends ar-like diffusion-like --db "$db" --metric agg_tps >"$tmp/cb.out"; rc=$?
[ $rc = 0 ] || fail "compare --backends exit $rc"
[ "$(grep -c '^ar-like vs diffusion-like ' "$tmp/cb.out")" = 8 ] || fail "compare --backends: expected 8 rows"
"$tb" compare 1 --backends ar-like nope --db "$db" 2>"$tmp/e" >/dev/null; rc=$?
[ $rc = 2 ] && grep -q 'session 1 has no backend "nope" (it has: ar-like, diffusion-like)' "$tmp/e" || fail "bad backend: $rc $(cat "$tmp/e")"
"$tb" compare 1 2 --metric bogus --db "$db" 2>"$tmp/e" >/dev/null; [ $? = 2 ] || fail "bad metric not exit 2"
"$tb" compare 1 --db "$db" 2>/dev/null >/dev/null; [ $? = 2 ] || fail "compare with one session not exit 2"
"$tb" compare 1 2 --alpha 2 --db "$db" 2>/dev/null >/dev/null; [ $? = 2 ] || fail "--alpha 2 accepted"
"$tb" compare 1 1 --db "$tmp/w.db" --backends noisy broken >/dev/null 2>&1; [ $? = 0 ] || fail "compare with a failed case"
"$tb" compare 1 1 --db "$tmp/w.db" --backends noisy broken --fail-if-slower 50 >"$tmp/cf.out" 2>&1
[ $? = 1 ] && grep -q 'B not ok' "$tmp/cf.out" || fail "a case failing in B only is not a regression"
pass "compare: sessions, backends, regressions, exit status"

# one suite text, two configurations: ${ENV} resolved differently (issue
# 15.6). The text's sha256 is the same; the configuration's is not, and
# compare, history and the report's conditions say what differs.
cat >"$tmp/env.ini" <<'EOF'
[suite]
warmup = 0
repeat = 3
seed = ${TB_SEED:-1}
[matrix]
max_new_tokens = 8
[backend ar-like]
plugin = null
step_us = ${TB_STEP}
[backend other]
plugin = null
max_new_tokens = ${TB_NEW:-8}
EOF
TOKBENCH_PLUGIN_PATH="$build/plugins" TB_STEP=500 "$tb" run "$tmp/env.ini" --db "$tmp/env.db" >/dev/null 2>&1 || fail "env run 1"
TOKBENCH_PLUGIN_PATH="$build/plugins" TB_STEP=600 TB_SEED=2 TB_NEW=4,8 "$tb" run "$tmp/env.ini" --db "$tmp/env.db" >/dev/null 2>&1 || fail "env run 2"
[ "$(q "$tmp/env.db" "select count(distinct suite_sha256) || ' ' || count(distinct config_sha256) from session")" = "1 2" ] \
    || fail "env: expected one text hash, two configuration hashes: $(q "$tmp/env.db" "select suite_sha256, config_sha256 from session")"
"$tb" compare 1 2 --db "$tmp/env.db" >"$tmp/ce.out" 2>&1 || fail "env compare: $(cat "$tmp/ce.out")"
want="conditions that differ:
  configuration: sha256 $(q "$tmp/env.db" "select substr(config_sha256, 1, 12) from session where id = 1") vs $(q "$tmp/env.db" "select substr(config_sha256, 1, 12) from session where id = 2")
    suite seed: 1 vs 2
  backend ar-like:
    option step_us: 500 vs 600
  backend other:
    matrix max_new_tokens: 8 vs 4, 8"
[ "$(sed -n '/^conditions that differ:/,/^$/p' "$tmp/ce.out" | sed '$d')" = "$want" ] \
    || fail "env compare: conditions: $(sed -n '/^conditions/,/^$/p' "$tmp/ce.out")"
"$tb" history --backend ar-like --db "$tmp/env.db" >"$tmp/he.out" 2>&1 || fail "env history"
grep -q '^  session 2: option step_us: 500 -> 600; suite seed: 1 -> 2: not comparable with the session before$' "$tmp/he.out" \
    || fail "env history notes: $(cat "$tmp/he.out")"
"$tb" report 2 --db "$tmp/env.db" >"$tmp/re.md" 2>/dev/null || fail "env report"
grep -qF "| configuration sha256 | $(q "$tmp/env.db" "select config_sha256 from session where id = 2") |" "$tmp/re.md" \
    || fail "env report: no configuration sha256 in the conditions"
pass "compare/history/report: one text, two configurations, option by option"

# --- 4. history
"$tb" history --backend ar-like --filter batch=1 --filter prompt_tokens=32 --db "$db" >"$tmp/h.out" || fail "history"
grep -q '^agg_tps (tokens/s) of backend ar-like, case prompt 32, new 64, batch 1: 3 sessions' "$tmp/h.out" \
    || fail "history header: $(head -1 "$tmp/h.out")"
[ "$(grep -cE '^ +[123] +20' "$tmp/h.out")" = 3 ] || fail "history rows: $(cat "$tmp/h.out")"
"$tb" history --backend diffusion-like --metric e2e_ms --filter steps=8 --db "$db" --format csv >"$tmp/h.csv" || fail "history csv"
[ "$(grep -c '^diffusion-like,"prompt' "$tmp/h.csv")" = 9 ] || fail "history csv rows: $(wc -l <"$tmp/h.csv")"
"$tb" history --backend ar-like --filter steps=none --db "$db" --format html -o "$tmp/h.html" || fail "history html"
[ "$(grep -c 'data-kind="history"' "$tmp/h.html")" = 4 ] || fail "history html charts"
"$tb" history --backend nope --db "$db" 2>"$tmp/e"; [ $? = 2 ] || fail "history of an unknown backend not exit 2"
grep -q 'no backend "nope" in any session (known: ar-like, diffusion-like)' "$tmp/e" || fail "history message: $(cat "$tmp/e")"
"$tb" history --backend ar-like --metric nope --db "$db" 2>"$tmp/e"; [ $? = 2 ] || fail "unknown metric not exit 2"
grep -q 'has no metric "nope" (known: agg_tps' "$tmp/e" || fail "history metric message: $(cat "$tmp/e")"
"$tb" history --backend ar-like --filter steps=8 --db "$db" 2>/dev/null; [ $? = 2 ] || fail "no match not exit 2"
"$tb" history --backend ar-like --filter bacth=1 --db "$db" 2>"$tmp/e"; [ $? = 2 ] || fail "a mistyped filter key not exit 2"
grep -q 'filter "bacth=1": unknown key "bacth" (expected a dimension — prompt_tokens, .* or an option swept for backend "ar-like")' \
    "$tmp/e" || fail "history, a mistyped filter key: $(cat "$tmp/e")"
"$tb" history --db "$db" 2>/dev/null; [ $? = 2 ] || fail "history without --backend not exit 2"
pass "history: text, csv, html, bad input"

# --- 5. db merge: idempotent, two machines, one transaction, schema checks
counts() { q "$1" "select (select count(*) from session) || ' ' || (select count(*) from machine) || ' ' || (select count(*) from backend) || ' ' || (select count(*) from bench_case) || ' ' || (select count(*) from sample) || ' ' || (select count(*) from request) || ' ' || (select count(*) from metric)"; }
other="$tmp/other.db"
"$tb" run "$quick" --db "$other" --filter batch=4 >/dev/null 2>&1 || fail "run on the other machine"
q "$other" "update machine set fingerprint = 'f00d', hostname = 'gpu-box', gpu_name = 'NVIDIA H200', gpu_count = 1"
cp "$db" "$tmp/m.db"
before=$(counts "$tmp/m.db")
"$tb" db merge "$other" --db "$tmp/m.db" >"$tmp/merge.out" || fail "merge"
grep -q "1 session imported (6 cases, 36 samples, 144 requests" "$tmp/merge.out" || fail "merge output: $(cat "$tmp/merge.out")"
grep -q "machines: 1 new, 0 known" "$tmp/merge.out" || fail "merge machines: $(cat "$tmp/merge.out")"
once=$(counts "$tmp/m.db")
"$tb" db merge "$other" --db "$tmp/m.db" >"$tmp/merge2.out" || fail "second merge"
grep -q "0 sessions imported .* 1 already present" "$tmp/merge2.out" || fail "second merge output: $(cat "$tmp/merge2.out")"
[ "$(counts "$tmp/m.db")" = "$once" ] || fail "merging twice differs from once: $once vs $(counts "$tmp/m.db")"
[ "$once" != "$before" ] || fail "merge added nothing"
[ "$(q "$tmp/m.db" "select count(distinct machine_id) from session")" = 2 ] || fail "merged sessions are not on two machines"
[ "$(q "$tmp/m.db" "pragma foreign_key_check" | wc -l)" = 0 ] || fail "dangling references after merge"
[ "$(q "$tmp/m.db" "select uuid from session where id = 4")" = "$(q "$other" "select uuid from session")" ] || fail "uuid not kept"
# the merged session reads back as it was: same figures in the report tables
"$tb" report 1 --db "$other" >"$tmp/o.md" || fail "report of the other machine's session"
"$tb" report 4 --db "$tmp/m.db" >"$tmp/m.md" || fail "report of the merged session (its 4-character fingerprint)"
sed -n '/^## Throughput/,/^## Conditions/p' "$tmp/o.md" >"$tmp/o.tables"
sed -n '/^## Throughput/,/^## Conditions/p' "$tmp/m.md" >"$tmp/m.tables"
grep -q '^| fingerprint | f00d |$' "$tmp/m.md" || fail "merged session's fingerprint: $(grep fingerprint "$tmp/m.md")"
cmp -s "$tmp/o.tables" "$tmp/m.tables" || fail "merged session's tables differ from the original"
# merging both ways into empty databases gives the same content
"$tb" db merge "$db" --db "$tmp/x.db" >/dev/null && "$tb" db merge "$other" --db "$tmp/x.db" >/dev/null || fail "merge into x"
"$tb" db merge "$other" --db "$tmp/y.db" >/dev/null && "$tb" db merge "$db" --db "$tmp/y.db" >/dev/null || fail "merge into y"
[ "$(counts "$tmp/x.db")" = "$once" ] && [ "$(counts "$tmp/y.db")" = "$once" ] || fail "merge order changes the result"
[ "$(q "$tmp/x.db" "select group_concat(uuid) from (select uuid from session order by uuid)")" = \
  "$(q "$tmp/y.db" "select group_concat(uuid) from (select uuid from session order by uuid)")" ] || fail "uuids differ"
# history now spans two machines, and says so
"$tb" history --backend ar-like --filter batch=4 --filter prompt_tokens=32 --db "$tmp/m.db" >"$tmp/hm.out"
grep -q 'session 4: machine .* -> gpu-box (NVIDIA H200): not comparable' "$tmp/hm.out" || fail "history across machines: $(cat "$tmp/hm.out")"
# a newer schema is refused and nothing changes
cp "$other" "$tmp/newer.db"
q "$tmp/newer.db" "pragma user_version = 99"
"$tb" db merge "$tmp/newer.db" --db "$tmp/m.db" 2>"$tmp/e"; [ $? = 1 ] || fail "newer schema merged"
grep -q 'schema version 99 is newer than this tokbench knows' "$tmp/e" || fail "newer schema message: $(cat "$tmp/e")"
[ "$(counts "$tmp/m.db")" = "$once" ] || fail "a refused merge changed the target"
# an older schema (version 1) is migrated in memory. Dropping what
# migrations 2-6 added (views, tables, columns) gives a version-1 file.
cp "$other" "$tmp/older.db"
for v in $(q "$tmp/older.db" "select name from sqlite_master where type = 'view'"); do
    q "$tmp/older.db" "drop view $v"
done
# migration 4's tables and columns
q "$tmp/older.db" "drop table prompt; drop table score; alter table request drop column prompt_idx;
  alter table request drop column scored; alter table request drop column output_text;
  alter table session drop column prompt_set_path; alter table session drop column prompt_set_sha256"
# migration 5's columns
q "$tmp/older.db" "alter table session drop column owner_boot_id; alter table session drop column owner_pid_ns;
  alter table session drop column owner_pid; alter table session drop column owner_start_ticks"
# migration 6's columns
q "$tmp/older.db" "alter table metric drop column p90; alter table metric drop column p99;
  alter table request drop column prompt_hash; alter table session drop column config_sha256;
  alter table session drop column config_json"
# migration 8's
q "$tmp/older.db" "alter table bench_case drop column search_id; alter table bench_case drop column search_role;
  alter table bench_case drop column search_pass; drop table search; alter table request drop column prompt_tokens"
# migration 9's (sharded runs) and 10's (telemetry)
q "$tmp/older.db" "drop table shard; alter table session drop column shard_index;
  alter table session drop column shard_count; alter table session drop column start_at;
  alter table session drop column clock_offset_ns; alter table session drop column start_late_ns;
  alter table sample drop column start_ns; alter table sample drop column client_busy;
  drop table telemetry_point; drop table telemetry_series"
# migration 11's (block diffusion)
q "$tmp/older.db" "alter table request drop column blocks_done"
# migration 13's (why a session stopped early)
q "$tmp/older.db" "alter table session drop column error"
# migration 14's (the telemetry's scrape tally)
q "$tmp/older.db" "alter table bench_case drop column scrapes; alter table bench_case drop column scrapes_failed;
  alter table bench_case drop column scrape_error"
# migration 15's (speculative decoding)
q "$tmp/older.db" "alter table request drop column spec_verifications; alter table request drop column spec_drafted;
  alter table request drop column spec_accepted; alter table request drop column spec_draft_len;
  alter table request drop column spec_at; alter table request drop column acceptance_length;
  alter table request drop column acceptance_rate; alter table sample drop column draft_ns"
# migration 16's (canvas models)
q "$tmp/older.db" "alter table request drop column canvases; alter table request drop column canvas_steps;
  alter table request drop column canvas_committed; alter table request drop column canvas_positions;
  alter table request drop column canvases_json; alter table request drop column tokens_per_chunk;
  alter table request drop column chunk_gap_ms; alter table request drop column bursty"
# migration 18's (the output-length check's ids)
q "$tmp/older.db" "alter table request drop column output_ids"
q "$tmp/older.db" "pragma user_version = 1"
"$tb" db merge "$tmp/older.db" --db "$tmp/z.db" >/dev/null || fail "older schema not merged"
[ "$(q "$tmp/older.db" "pragma user_version")" = 1 ] || fail "merge modified the other database"
[ "$(q "$tmp/z.db" "select count(*) from summary")" = 6 ] || fail "older schema merge incomplete"
# a conflict inside the transaction rolls everything back
cp "$db" "$tmp/r.db"
q "$tmp/r.db" "create trigger no_requests before insert on request when (select count(*) from request) > 500 begin select raise(abort, 'disk full (simulated)'); end"
before=$(counts "$tmp/r.db")
"$tb" db merge "$other" --db "$tmp/r.db" 2>"$tmp/e"; [ $? = 1 ] || fail "failing merge exit"
grep -q 'disk full (simulated) (nothing was merged)' "$tmp/e" || fail "failing merge message: $(cat "$tmp/e")"
[ "$(counts "$tmp/r.db")" = "$before" ] || fail "a failed merge left rows behind"
"$tb" db merge "$tmp/m.db" --db "$tmp/m.db" 2>"$tmp/e"; [ $? = 1 ] && grep -q 'is the target database itself' "$tmp/e" || fail "self merge"
"$tb" db merge "$tmp/none.db" --db "$tmp/m.db" 2>"$tmp/e"; [ $? = 1 ] && grep -q 'none.db: cannot read' "$tmp/e" || fail "missing file"
printf 'not a database' >"$tmp/junk.db"
"$tb" db merge "$tmp/junk.db" --db "$tmp/m.db" 2>"$tmp/e"; [ $? = 1 ] || fail "junk merged"
"$tb" db frobnicate 2>/dev/null; [ $? = 2 ] || fail "unknown db subcommand"
pass "db merge: idempotent, two machines, order-independent, schema checks, atomic"

# --- 6. the CPU engines (suites/quick.ini, batch 1 and 8: the quick.ini
# fixture, a copy): AR as the reference line in the steps chart of the
# diffusion engine, one steps chart per batch.
if fixture=$(bash "$src/tests/e2e/quick_fixture.sh" check "$build" "$src"); then
    cp "$fixture" "$tmp/cpu.db"
    # its prompts (all 176 of quick.jsonl, or a sanitizer build's every Nth:
    # quick_fixture.sh): requests at batch 1, calls at batch 8, scored tasks
    prompts=$(dirname "$fixture")/prompts.jsonl
    n=$(wc -l <"$prompts")
    calls8=$(((n + 7) / 8))
    tasks=$((n - $(grep -c '"tags": *\["text"\]' "$prompts")))
    "$tb" report --db "$tmp/cpu.db" --format html -o "$tmp/cpu.html" 2>/dev/null || fail "report of quick.ini"
    k=$(kinds "$tmp/cpu.html")
    # per batch: a steps chart for each model swept over steps (the masked
    # and the continuous diffusion model: their block dimension differs;
    # not the block-diffusion one, at one step count per threshold); an
    # ITL chart per batch, one latency and one throughput chart against
    # the batch (the swept threshold: curves, not charts of their own,
    # issue 39 item 9); one Pareto chart
    # and the speculative rows' acceptance by draft position (issue 40: ten
    # curves, two charts: ar-small-dflash sweeps its draft length); per
    # batch a chart of the diffusion cases' committed tokens per step
    # against steps per canvas (issue 41)
    [ "$k" = 'data-kind="acceptance"=2 data-kind="canvas"=2 data-kind="itl"=2 data-kind="latency"=1 data-kind="pareto"=1 data-kind="steps"=4 data-kind="throughput"=1' ] \
        || fail "cpu report charts: $k"
    [ "$(grep -c 'data-series="ar-small (no steps: reference)"' "$tmp/cpu.html")" = 4 ] || fail "a cpu steps chart lacks the AR line"
    # (the steps charts' curves: the canvas charts have a line per backend too)
    steps_curves() { python3 -c 'import re, sys
doc = open(sys.argv[1]).read()
figs = re.findall(r"<figure class=\"chart\" data-kind=\"steps\">(.*?)</figure>", doc, re.S)
print(sum(len(re.findall(r"<g class=\"series-group\" data-series=\"%s\" [^>]*><path class=\"series\" d=\"M" % sys.argv[2], f))
          for f in figs))' "$tmp/cpu.html" "$1"; }
    [ "$(steps_curves flow-small)" = 2 ] || fail "a cpu steps chart lacks the flow curve"
    [ "$(steps_curves llada-small)" = 2 ] || fail "a cpu steps chart lacks the diffusion curve"
    [ "$(grep -c '<g class="series-group" data-series="llada-small" [^>]*><path class="series" d="M' "$tmp/cpu.html")" = 4 ] \
        || fail "the cpu canvas charts lack the diffusion line"
    grep -q 'RANDOM WEIGHTS' "$tmp/cpu.html" && fail "trained models flagged as random weights"
    grep -q 'Quality next to speed' "$tmp/cpu.html" || fail "no quality table in the cpu report"
    "$tb" report --db "$tmp/cpu.db" >"$tmp/cpu.md"
    grep -q "llada-small | prompt set, new 16, batch 1, steps 16, block 16 | ok | $n |" "$tmp/cpu.md" \
        || fail "cpu md lacks the batch-1 diffusion row"
    grep -q "llada-small | prompt set, new 16, batch 8, steps 16, block 16 | ok | $calls8 |" "$tmp/cpu.md" \
        || fail "cpu md lacks the batch-8 diffusion row ($n prompts in $calls8 calls)"
    grep -q "| llada-small | prompt set, new 16, batch 1, steps 2, block 16 | accuracy | fraction | $tasks |" "$tmp/cpu.md" \
        || fail "cpu md lacks the accuracy row: $(grep accuracy "$tmp/cpu.md" | head -3)"
    # accuracy under parallelism (issue 41 item 3): one row per backend and
    # batch in the md, under the Pareto chart in the html, and in the JSON
    # export, whose points are the stored medians and whose score is the
    # published formula recomputed here (docs/METRICS.md)
    [ "$(sed -n '/^## Accuracy under parallelism/,/^## /p' "$tmp/cpu.md" | grep -c '^| [a-z-]* | prompt set, new 16, batch [18]')" = 14 ] \
        || fail "cpu md: AUP rows: $(sed -n '/^## Accuracy under parallelism/,/^## /p' "$tmp/cpu.md" | head -5)"
    python3 -c 'import sys; t = open(sys.argv[1]).read(); p, a = t.find("data-kind=\"pareto\""), t.find("id=\"aup\"");
sys.exit(0 if 0 <= p < a and t.find("<h2", p, a) < 0 else 1)' "$tmp/cpu.html" || fail "cpu html: the AUP table is not under the Pareto chart"
    "$tb" export last --db "$tmp/cpu.db" --format json -o "$tmp/cpu.json" || fail "export json of quick.ini"
    python3 - "$tmp/cpu.json" "$tmp/cpu.db" <<'PYEOF' || fail "cpu json: AUP"
import json, math, re, sqlite3, sys
doc, db = json.load(open(sys.argv[1])), sqlite3.connect(sys.argv[2])
med = {(o, n): v for o, n, v in db.execute("select c.ordinal, m.name, m.median from metric m join bench_case c "
                                            "on c.id = m.case_id where m.name in ('accuracy', 'tokens_per_forward')")}
rows = doc["aup"]
assert len(rows) == 14, len(rows)
for r in rows:
    pts = r["points"]
    for p in pts:  # the stored medians, accuracy in %
        assert math.isclose(p["tokens_per_forward"], med[(p["case"], "tokens_per_forward")], rel_tol=1e-12), p
        assert math.isclose(p["accuracy_pct"], 100 * med[(p["case"], "accuracy")], rel_tol=1e-12), p
    task = lambda c: re.sub(r", block [0-9]+", "", c)  # y_max spans the task: block length aside
    ymax = max(p["accuracy_pct"] for q in rows if task(q["condition"]) == task(r["condition"]) for p in q["points"])
    assert math.isclose(r["y_max_pct"], ymax, rel_tol=1e-12), r
    # the blog's AUP: sorted by tokens per forward, points within 5 of y_1
    s = sorted(((p["tokens_per_forward"], p["accuracy_pct"]) for p in pts), key=lambda x: x[0])
    kept = [x for x in s if x[1] >= s[0][1] - 5]
    w = lambda y: min(math.exp(-3 * (1 - y / ymax)), 1)
    aup = kept[0][0] * kept[0][1] + sum(0.5 * (b[0] - a[0]) * (b[1] * w(b[1]) + a[1] * w(a[1]))
                                        for a, b in zip(kept, kept[1:]))
    assert math.isclose(r["aup"], aup, rel_tol=1e-9), (r, aup)
    assert sum(p["used"] for p in pts) == len(kept), r
PYEOF
    # no sampler of the default suite runs on random tokens: no such warning
    grep -q "but its prompts were random tokens" "$tmp/cpu.md" && fail "the default suite warns of random-token prompts"
    "$tb" compare 1 --backends ar-small llada-small --db "$tmp/cpu.db" --metric agg_tps >"$tmp/cc.out" || fail "compare cpu backends"
    # AR against each of 4 step counts, at 2 batches
    [ "$(grep -c '^ar-small vs llada-small ' "$tmp/cc.out")" = 8 ] || fail "compare cpu: $(cat "$tmp/cc.out")"
    pass "CPU engines: report, charts, compare"
else
    fail "CPU engines: $fixture"
fi

# --- 7. every command answers --help
for c in report compare history "db"; do
    "$tb" $c --help >"$tmp/help" 2>&1 && grep -q "^usage: tokbench $c" "$tmp/help" || fail "$c --help"
done
"$tb" --help >"$tmp/help"
grep -q 'compare A B' "$tmp/help" || fail "main help lacks compare"

tb_finish
