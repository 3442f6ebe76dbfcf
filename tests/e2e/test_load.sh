#!/usr/bin/env bash
# End to end: serving workloads and load searches of plugins/http
# (docs/METRICS.md, "Serving workloads" and "Load searches") against
# `tokbench serve` with the null backend, checked by counting requests
# and tokens in the stored session, never by timing:
#   1. length distributions: each request's prompt and max_tokens drawn
#      (lognormal prompts, uniform outputs, a histogram file) within their
#      bounds, stored per request (request.prompt_tokens,
#      requested_tokens), the server's usage equal to them (output tokens;
#      no "server counts" warning for prompts), the same draws again with
#      the same seed, other draws with unique prompts over repetitions;
#   2. conversation datasets (ShareGPT and OpenAI chat JSONL): prompts
#      from the user turns, max_tokens the reference answers' tokens; bad
#      input refused before anything runs, naming file, line and field;
#   3. shared prefixes and multi-turn sessions: prompt lengths prefix +
#      user; each turn's prompt holds the previous turn's prompt and
#      answer;
#   4. duration-bounded loads: closed and open loop stop sending at the
#      duration (fewer requests than the bound, none submitted after it);
#   5. request_rate = sweep: synchronous, throughput, then sweep_rates
#      rates evenly between the two runs' stored requests/s;
#   6. request_rate = slo: the answer and status as the stored probes say
#      (limits no run can meet: down to a quarter of the synchronous rate,
#      then why in words; limits every run meets; and a bisection whose
#      every probe is checked against its stored p99s);
#   7. the HTML report of the searches: rate charts with the found limit
#      marked where the stored answer is, the searches' tables; rendered
#      in Chromium (skipped without it): the limit line laid out across
#      the plot.
#
# usage: test_load.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
tb_init load "$@"
need_sqlite3
command -v python3 >/dev/null || { echo "SKIP: python3 not installed"; exit 77; }
[ -f "$build/plugins/http/http.so" ] || { echo "SKIP: http plugin not built (libcurl missing)"; exit 77; }
"$tb" serve --help >/dev/null 2>&1 || { echo "SKIP: no tokbench serve (libmicrohttpd missing)"; exit 77; }
export TOKBENCH_PLUGIN_PATH="$build/plugins"
tok="$src/models/small-llama/tokenizer.json"

# serve_null NAME STEP_US: the null backend served on a free port; sets $port.
serve_null() {
    printf '[suite]\nname = srv\n[backend n]\nplugin = null\nprefill_us = 0\nstep_us = %s\n' "$2" >"$tmp/$1.ini"
    start_server "$1" "$tb" serve --backend n "$tmp/$1.ini" --port 0 || exit 1
}
serve_null fast 0
fast="http://127.0.0.1:$port"
serve_null slow 1000 # TPOT >= 1 ms: each token waits a 1 ms step
slow="http://127.0.0.1:$port"

# run NAME: run $tmp/NAME.ini into NAME.db (output in NAME.out).
run() {
    "$tb" run "$tmp/$1.ini" --db "$tmp/$1.db" >"$tmp/$1.out" 2>&1 || { fail "run $1: exit $?"; tail -5 "$tmp/$1.out"; }
}
# the measured requests of backend LABEL in NAME.db: SQL columns
reqs() {
    q "$tmp/$1.db" "select $3 from (select r.* from request r join sample s on s.id = r.sample_id
                    join bench_case c on c.id = s.case_id join backend b on b.id = c.backend_id
                    where b.label = '$2' and s.warmup = 0 order by s.id, r.idx)"
}

# ------------------------------------------------------------------ 1
cat >"$tmp/hist.txt" <<'EOF'
# prompt lengths of a recorded trace: TOKENS WEIGHT or LO-HI WEIGHT
5 1
9-11 3
EOF
cat >"$tmp/dist.ini" <<EOF
[suite]
name = dist
warmup = 0
repeat = 2
seed = 11
[matrix]
prompt_tokens = 40
max_new_tokens = 20
requests = 40
concurrency = 8
[backend ln]
plugin = http
url = $fast
tokenizer = $tok
prompt_dist = lognormal
prompt_stdev = 20
prompt_min = 8
prompt_max = 90
output_dist = uniform
output_stdev = 5
[backend hist]
plugin = http
url = $fast
tokenizer = $tok
prompt_dist = histogram
prompt_histogram = $tmp/hist.txt
unique_prompts = false
EOF
run dist
mv "$tmp/dist.db" "$tmp/dist1.db"
run dist
read -r n plo phi distinct <<<"$(reqs dist ln "count(*), min(prompt_tokens), max(prompt_tokens), count(distinct prompt_tokens)" | tr '|' ' ')"
[ "$n" = 80 ] && [ "$plo" -ge 8 ] && [ "$phi" -le 90 ] && [ "$distinct" -ge 10 ] \
    || fail "lognormal prompts: $n requests, lengths $plo..$phi, $distinct distinct"
read -r n lo hi distinct exact <<<"$(reqs dist ln "count(*), min(requested_tokens), max(requested_tokens), count(distinct requested_tokens), sum(output_tokens = requested_tokens)" | tr '|' ' ')"
# uniform, mean 20, sd 5: [20 - 5 sqrt 3, 20 + 5 sqrt 3] rounded
[ "$lo" -ge 11 ] && [ "$hi" -le 29 ] && [ "$distinct" -ge 8 ] && [ "$exact" = "$n" ] \
    || fail "uniform outputs: lengths $lo..$hi, $distinct distinct, $exact of $n with output = requested"
grep -q "server counts" "$tmp/dist.out" && fail "the server counted other prompt lengths: $(grep 'server counts' "$tmp/dist.out")"
[ "$(reqs dist hist "count(*) - sum(prompt_tokens in (5, 9, 10, 11))")" = 0 ] || fail "histogram lengths: $(reqs dist hist "group_concat(distinct prompt_tokens)")"
[ "$(reqs dist hist "count(distinct prompt_tokens)")" = 4 ] || fail "histogram: not every bin drawn"
# the same seed: the same draws; unique prompts: repetitions differ
[ "$(reqs dist ln "group_concat(prompt_tokens || ':' || requested_tokens)")" = "$(reqs dist1 ln "group_concat(prompt_tokens || ':' || requested_tokens)")" ] \
    || fail "the same suite and seed drew other lengths"
r0=$(q "$tmp/dist.db" "select group_concat(r.prompt_tokens) from request r join sample s on s.id = r.sample_id join bench_case c on c.id = s.case_id join backend b on b.id = c.backend_id where b.label = 'ln' and s.repetition = 0")
r1=$(q "$tmp/dist.db" "select group_concat(r.prompt_tokens) from request r join sample s on s.id = r.sample_id join bench_case c on c.id = s.case_id join backend b on b.id = c.backend_id where b.label = 'ln' and s.repetition = 1")
[ "$r0" != "$r1" ] || fail "unique prompts: both repetitions drew the same lengths"
h0=$(q "$tmp/dist.db" "select group_concat(r.prompt_tokens) from request r join sample s on s.id = r.sample_id join bench_case c on c.id = s.case_id join backend b on b.id = c.backend_id where b.label = 'hist' and s.repetition = 0")
h1=$(q "$tmp/dist.db" "select group_concat(r.prompt_tokens) from request r join sample s on s.id = r.sample_id join bench_case c on c.id = s.case_id join backend b on b.id = c.backend_id where b.label = 'hist' and s.repetition = 1")
[ "$h0" = "$h1" ] || fail "unique_prompts = false: repetitions drew other lengths"
# the workload is stored with the case's options
grep -q '"prompt_dist":"lognormal"' <<<"$(q "$tmp/dist.db" "select options_json from backend where label = 'ln'")" \
    || fail "prompt_dist not stored with the backend's options"
pass "distributions: lognormal prompts $plo..$phi tokens and uniform outputs $lo..$hi stored per request, the server's counts equal, histogram bins only, reproducible"

# a swept workload parameter: one case per value, stored with the case
cat >"$tmp/swept.ini" <<EOF
[suite]
name = swept
warmup = 0
repeat = 1
[matrix]
prompt_tokens = 16
max_new_tokens = 8
requests = 8
prompt_dist = fixed, uniform
prefix_tokens = 4, 8
[backend h]
plugin = http
url = $fast
tokenizer = $tok
prefix_groups = 2
EOF
run swept
[ "$(q "$tmp/swept.db" "select group_concat(options_json, ' ') from (select options_json from bench_case order by ordinal)")" \
  = '{"prompt_dist":"fixed","prefix_tokens":"4"} {"prompt_dist":"fixed","prefix_tokens":"8"} {"prompt_dist":"uniform","prefix_tokens":"4"} {"prompt_dist":"uniform","prefix_tokens":"8"}' ] \
    || fail "swept workload parameters: $(q "$tmp/swept.db" "select options_json from bench_case")"
fixed_lens=$(q "$tmp/swept.db" "select group_concat(distinct r.prompt_tokens) from request r join sample s on s.id = r.sample_id join bench_case c on c.id = s.case_id where c.options_json like '%fixed%' order by c.ordinal")
[ "$fixed_lens" = "20,24" ] || fail "shared prefix 4 or 8 + a 16-token prompt: $fixed_lens"
pass "swept workload parameters: 4 cases, each with its values stored; prefix + prompt = $fixed_lens tokens"

# ------------------------------------------------------------------ 2
printf '%s\n' \
    '{"id": "a", "conversations": [{"from": "human", "value": " the cat"}, {"from": "gpt", "value": " the the the the the the"}]}' \
    '{"id": "b", "conversations": [{"from": "system", "value": "be brief"}, {"from": "human", "value": " of"}, {"from": "gpt", "value": " the the"}]}' \
    >"$tmp/sharegpt.jsonl"
printf '%s\n' \
    '{"messages": [{"role": "user", "content": " and the"}, {"role": "assistant", "content": " of of of"}]}' \
    >"$tmp/openai.jsonl"
cat >"$tmp/data.ini" <<EOF
[suite]
name = data
warmup = 0
repeat = 1
[matrix]
max_new_tokens = 20
requests = 4
[backend sharegpt]
plugin = http
url = $fast
tokenizer = $tok
dataset = $tmp/sharegpt.jsonl
unique_prompts = false
[backend openai]
plugin = http
url = $fast
tokenizer = $tok
dataset = $tmp/openai.jsonl
EOF
run data
# conversation a: " the cat" (prompt), 6 reference tokens; b: "be brief\n of", 2
got=$(reqs data sharegpt "group_concat(requested_tokens || '/' || output_tokens, ' ')")
[ "$got" = "6/6 2/2 6/6 2/2" ] || fail "ShareGPT: requested/output per request: $got"
[ "$(reqs data openai "group_concat(requested_tokens, ' ')")" = "3 3 3 3" ] || fail "OpenAI chat: $(reqs data openai "group_concat(requested_tokens)")"
pass "datasets: ShareGPT and OpenAI chat, max_tokens = the reference answers' tokens ($got)"
# bad input: refused before anything runs, file:line: field
printf '%s\n' '{"conversations": [{"from": "human", "value": "x"}]}' '{"conversations": [{"from": "human", "value": 7}]}' >"$tmp/bad.jsonl"
sed "s|$tmp/openai.jsonl|$tmp/bad.jsonl|" "$tmp/data.ini" >"$tmp/bad.ini"
"$tb" run "$tmp/bad.ini" --db "$tmp/bad.db" >"$tmp/bad.out" 2>&1
rc=$?
[ $rc = 2 ] || fail "a bad dataset: exit $rc, expected 2"
grep -q "bad.jsonl:2: field conversations\[0\].value: expected a string" "$tmp/bad.out" \
    || fail "a bad dataset's error: $(cat "$tmp/bad.out")"
[ -e "$tmp/bad.db" ] && fail "a bad dataset: a database was made"
printf '5 1\n7-x 2\n' >"$tmp/badhist.txt"
sed "s|$tmp/hist.txt|$tmp/badhist.txt|" "$tmp/dist.ini" >"$tmp/badhist.ini"
"$tb" run "$tmp/badhist.ini" --db "$tmp/badhist.db" >"$tmp/badhist.out" 2>&1
grep -q "badhist.txt:2: bin \"7-x 2\"" "$tmp/badhist.out" || fail "a bad histogram's error: $(cat "$tmp/badhist.out")"
pass "bad dataset and histogram input: exit 2 before anything runs, naming file:line and field"

# ------------------------------------------------------------------ 3
cat >"$tmp/turns.ini" <<EOF
[suite]
name = turns
warmup = 0
repeat = 1
[matrix]
prompt_tokens = 6
max_new_tokens = 5
requests = 6
concurrency = 2
[backend mt]
plugin = http
url = $fast
tokenizer = $tok
turns = 3
prefix_groups = 1
prefix_tokens = 10
EOF
run turns
# 2 sessions x 3 turns: request r is turn r / 2 of session r % 2. Turn 0:
# 10 + 6 tokens; each later turn holds the turn before it, its answer (5
# words, at least 5 tokens) and 6 more tokens.
python3 - "$(reqs turns mt "group_concat(prompt_tokens || ':' || output_tokens)")" <<'EOF' || fail "multi-turn prompt lengths: $(reqs turns mt "group_concat(prompt_tokens)")"
import sys
v = [tuple(map(int, x.split(":"))) for x in sys.argv[1].split(",")]
assert len(v) == 6, v
for s in range(2):
    assert v[s][0] == 16, v
    for t in (1, 2):
        prev, cur = v[(t - 1) * 2 + s], v[t * 2 + s]
        assert cur[0] >= prev[0] + prev[1] + 6, (t, s, v)
EOF
pass "multi-turn: 2 sessions x 3 turns, each turn's prompt = the previous prompt + its answer + a new turn ($(reqs turns mt "group_concat(prompt_tokens)"))"
# every turn's stream is its own request's: each request holds one emission
# per output token (a wave's emissions once went to the first wave's
# requests: turn 0 showed 3x the chunks, later turns none, TTFT = E2E)
em=$(reqs turns mt "group_concat(json_array_length(emissions_json) || ':' || output_tokens)")
python3 - "$em" <<'EOF' || fail "multi-turn emissions per request (emissions:output tokens): $em"
import sys
v = [tuple(map(int, x.split(":"))) for x in sys.argv[1].split(",")]
assert len(v) == 6 and all(e == o and o > 0 for e, o in v), v
EOF
pass "multi-turn: each request's emissions are its own ($em)"
# turns must divide the requests: refused before anything runs
sed 's/^requests = 6/requests = 7/' "$tmp/turns.ini" >"$tmp/turns7.ini"
"$tb" run "$tmp/turns7.ini" --db "$tmp/turns7.db" >"$tmp/turns7.out" 2>&1
grep -q "turns = 3: the requests of a call (7) must be a whole number of sessions" "$tmp/turns7.out" \
    || fail "requests not a multiple of turns: $(cat "$tmp/turns7.out")"

# ------------------------------------------------------------------ 4
cat >"$tmp/dur.ini" <<EOF
[suite]
name = dur
warmup = 0
repeat = 1
[matrix]
prompt_tokens = 8
max_new_tokens = 8
requests = 5000
[backend closed]
plugin = http
url = $slow
concurrency = 1
duration = 0.3
[backend open]
plugin = http
url = $slow
request_rate = 40
duration = 0.5
EOF
run dur
for b in closed open; do
    read -r n late <<<"$(reqs dur $b "count(*), sum(submit_offset_ns >= (case '$b' when 'closed' then 300000000 else 500000000 end))" | tr '|' ' ')"
    # closed loop: each request takes >= 8 steps of 1 ms, so at most 0.3 s
    # / 8 ms of them start before the duration; open loop: 40/s for 0.5 s
    [ "$n" -ge 1 ] && [ "$n" -lt 5000 ] && [ "$late" = 0 ] || fail "duration, $b loop: $n requests, $late submitted after it"
    [ "$(q "$tmp/dur.db" "select count(*) from request where status <> 'ok'")" = 0 ] || fail "duration: failed requests"
done
[ "$(reqs dur closed "count(*)")" -le 38 ] || fail "closed loop ran past its duration: $(reqs dur closed "count(*)") requests of >= 8 ms in 0.3 s"
pass "duration: closed loop $(reqs dur closed "count(*)"), open loop $(reqs dur open "count(*)") requests of a 5000 bound, none submitted after the duration"

# ------------------------------------------------------------------ 4c
# an open loop its concurrency cap holds back (docs/METRICS.md, "Serving:
# HTTP endpoints and request loads"): 8 requests due within 8 ms, one in
# flight at a time, each taking >= 8 steps of 1 ms: 7 wait for the slot.
# The plugin says the cap held them (not the client's ceiling), `show`
# warns that the cap held the load back, naming the achieved rate, and not
# that the schedule's rate was sent.
cat >"$tmp/cap.ini" <<EOF
[suite]
name = cap
warmup = 0
repeat = 1
[matrix]
prompt_tokens = 8
max_new_tokens = 8
requests = 8
[backend cap]
plugin = http
url = $slow
request_rate = 1000
concurrency = 1
EOF
run cap
grep -q "\[cap\] warn: open loop: 7 of 8 sends came due with concurrency = 1 requests in flight and waited for a slot, up to .* the concurrency cap held the sends back from request_rate = 1000: they went out at .* requests/s, the schedule's .* (sent_rate) is not what was sent" "$tmp/cap.out" \
    || fail "a capped open loop: the plugin's line: $(grep -a 'open loop' "$tmp/cap.out")"
grep -q "client is near its ceiling" "$tmp/cap.out" && ! grep -q "the sends the cap did not hold ran" "$tmp/cap.out" \
    && fail "a capped open loop blamed on the client: $(grep -a 'ceiling' "$tmp/cap.out")"
grep -q "^  cap \[.*concurrency 1, rate 1000/s\]: the concurrency cap held the load back: it achieved [0-9.]* requests/s of the offered 1000.00 (req/s), with at most 1 in flight" "$tmp/cap.out" \
    || fail "a capped open loop: no warning that the cap held it: $(sed -n '/^warnings/,$p' "$tmp/cap.out")"
grep -q "the load was scheduled at" "$tmp/cap.out" && fail "a capped open loop said to run at its schedule's rate"
pass "an open loop held by its concurrency cap: the plugin and show say the cap held the sends, the achieved rate named"

# ------------------------------------------------------------------ 4b
# the rate an open loop sent (docs/METRICS.md, "The rate sent" and "The
# length of an open-loop load"): the default length (1,601 requests) and
# a short load of 12, each at two rates, 3 repetitions; every stored
# sent_rate against the stored submit times, the warning where and only
# where the stored median is more than 5% off, `show`'s column; fresh
# arrivals per repetition and rate, the same again on a rerun
cat >"$tmp/sent.ini" <<EOF
[suite]
name = sent
warmup = 0
repeat = 3
seed = 9
[matrix]
prompt_tokens = 8
max_new_tokens = 2
request_rate = 800, 1600
[backend long]
plugin = http
url = $fast
[backend short]
plugin = http
url = $fast
requests = 12
EOF
"$tb" run "$tmp/sent.ini" --dry-run >"$tmp/sent.dry" 2>&1
[ "$(grep -c "request_rate=800 requests=1601\|request_rate=1600 requests=1601" "$tmp/sent.dry")" = 2 ] \
    || fail "the default open-loop length: $(grep requests= "$tmp/sent.dry")"
printf '[suite]\nname = d\nopen_loop_duration = 2.5\n[matrix]\nrequest_rate = 100, 0.1\n[backend h]\nplugin = http\n' >"$tmp/old.ini"
"$tb" run "$tmp/old.ini" --dry-run >"$tmp/old.dry" 2>&1
grep -q "request_rate=100 requests=251$" "$tmp/old.dry" && grep -q "request_rate=0.1 requests=2$" "$tmp/old.dry" \
    || fail "open_loop_duration = 2.5: $(grep requests= "$tmp/old.dry")"
printf '[suite]\nname = d\n[matrix]\nrequest_rate = 2, 0.01\n[backend h]\nplugin = http\n' >"$tmp/slow.ini"
"$tb" run "$tmp/slow.ini" --dry-run >"$tmp/slow.dry" 2>&1
grep -q "request_rate=2 requests=601$" "$tmp/slow.dry" && grep -q "request_rate=0.01 requests=32$" "$tmp/slow.dry" \
    || fail "the default open-loop length at slow rates: $(grep requests= "$tmp/slow.dry")"
run sent
cp "$tmp/sent.db" "$tmp/sent1.db"
python3 - "$tmp/sent.db" "$tmp/sent.out" <<'EOF' || fail "the rate sent: stored figures, warnings and show disagree"
import re, sqlite3, statistics, sys
db = sqlite3.connect(sys.argv[1])
out = open(sys.argv[2]).read()
bad = []
cases = db.execute("select c.id, b.label, c.request_rate from bench_case c join backend b on b.id = c.backend_id order by c.ordinal").fetchall()
assert len(cases) == 4, cases
offs = {}
for cid, label, rate in cases:
    sent = []
    for sid, rep in db.execute("select id, repetition from sample where case_id = ? and warmup = 0 order by repetition", (cid,)):
        sub = [r for (r,) in db.execute("select submit_offset_ns from request where sample_id = ? order by idx", (sid,))]
        want_n = 1601 if label == "long" else 12
        if len(sub) != want_n:
            bad.append("%s @%g rep %d: %d requests, expected %d" % (label, rate, rep, len(sub), want_n))
        sent.append((len(sub) - 1) / ((max(sub) - min(sub)) * 1e-9))
        offs[(label, rate, rep)] = sub
    row = db.execute("select n, median from metric where case_id = ? and name = 'sent_rate'", (cid,)).fetchone()
    view = db.execute("select sent_per_s from summary where backend = ? and request_rate = ?", (label, rate)).fetchone()[0]
    if row[0] != 3 or abs(row[1] - statistics.median(sent)) > 1e-9 * row[1] or view != row[1]:
        bad.append("%s @%g: stored sent_rate n %d median %r, summary %r; from the submits %r" % (label, rate, row[0], row[1], view, sent))
    off = abs(row[1] / rate - 1) > 0.05
    warned = re.search(r"^  %s \[[^]]*rate %g/s[^]]*\]: the load was scheduled at %.2f requests/s" % (label, rate, row[1]), out, re.M)
    if off != bool(warned):
        bad.append("%s @%g: sent %.2f, %s the warning" % (label, rate, row[1], "without" if off else "with"))
    if label == "long" and off:
        bad.append("the default length sent %.2f at %g/s" % (row[1], rate))
    if ("%.2f" % row[1]) not in out:
        bad.append("%s @%g: show does not print the sent rate %.2f" % (label, rate, row[1]))
if "sent req/s" not in out:
    bad.append("show has no sent req/s column")
if not any(abs(db.execute("select median from metric where case_id = ? and name = 'sent_rate'", (cid,)).fetchone()[0] / rate - 1) > 0.05
           for cid, label, rate in cases if label == "short"):
    bad.append("no short load was more than 5% off (pick another seed)")
# fresh arrivals: each repetition its own gaps, each rate its own (not
# the other's scaled)
for label in ("long", "short"):
    for rate in (800, 1600):
        if len({tuple(offs[(label, rate, k)]) for k in range(3)}) != 3:
            bad.append("%s @%g: repetitions with the same arrivals" % (label, rate))
    for k in range(3):
        a, b = offs[(label, 800, k)], offs[(label, 1600, k)]
        if sum(abs(x - 2 * y) < 1000 for x, y in zip(a[1:], b[1:])) > 1:
            bad.append("%s rep %d: 1600/s is 800/s's arrivals halved" % (label, k))
for b in bad:
    print("  " + b)
sys.exit(1 if bad else 0)
EOF
"$tb" run "$tmp/sent.ini" --filter backend=short --db "$tmp/sent2.db" >/dev/null 2>&1 || fail "rerun of the short loads"
subs() { q "$1" "select group_concat(o) from (select r.submit_offset_ns o from request r join sample s on s.id = r.sample_id join bench_case c on c.id = s.case_id join backend b on b.id = c.backend_id where b.label = 'short' order by c.request_rate, s.repetition, r.idx)"; }
[ -n "$(subs "$tmp/sent1.db")" ] && [ "$(subs "$tmp/sent1.db")" = "$(subs "$tmp/sent2.db")" ] || fail "a rerun with the same seed sent other arrivals"
pass "the rate sent: 1,601 requests by default (open_loop_duration: rate x D + 1), sent_rate as the stored submits say, within 5% at the default length, warned where a short load is not ($(grep -c "the load was scheduled at" "$tmp/sent.out") warnings); fresh arrivals per repetition and rate, the same on a rerun"

# ------------------------------------------------------------------ 5, 6
cat >"$tmp/search.ini" <<EOF
[suite]
name = search
warmup = 0
repeat = 1
seed = 5
sweep_rates = 3
slo_ttft_p99_ms = 60000
slo_iterations = 3
goodput_ttft_ms = 60000
[matrix]
prompt_tokens = 8
max_new_tokens = 4
requests = 12
[backend sweep]
plugin = http
url = $fast
request_rate = sweep
[backend above]
plugin = http
url = $fast
request_rate = slo
EOF
run search
db="$tmp/search.db"
# the end of the run: each search's answer, as stored
line=$(grep "^  above: slo #" "$tmp/search.out")
[ "$line" = "$(q "$db" "select printf('  above: slo #%d (case #%d): above, slo_max_rate %.2f requests/s (synchronous %.2f, throughput %.2f requests/s), 3 runs', id, ordinal, slo_rate, sync_rate, max_rate) from search where kind = 'slo'")" ] \
    || fail "the run's end: the SLO search's line: $line"
grep -q "^  sweep: sweep #1 (case #1): done (synchronous [0-9.]*, throughput [0-9.]* requests/s), 5 runs$" "$tmp/search.out" \
    || fail "the run's end: the sweep's line: $(grep "sweep #" "$tmp/search.out")"
[ "$(q "$db" "select group_concat(kind || ':' || status) from search")" = "sweep:done,slo:above" ] \
    || fail "searches: $(q "$db" "select kind, status, error from search")"
[ "$(q "$db" "select group_concat(coalesce(search_role, '-') || '@' || coalesce(concurrency, '') || '@' || (request_rate is not null)) from bench_case c join backend b on b.id = c.backend_id where b.label = 'sweep' order by ordinal")" \
  = "synchronous@1@0,throughput@12@0,rate@@1,rate@@1,rate@@1" ] \
    || fail "sweep runs: $(q "$db" "select search_role, concurrency, request_rate from bench_case")"
# the sweep's rates: evenly between the two runs' stored requests/s
python3 - "$db" <<'EOF' || fail "sweep rates are not evenly between the bounds' stored requests/s"
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
x = db.execute("select id, sync_rate, max_rate from search where kind = 'sweep'").fetchone()
med = lambda role: db.execute("select m.median from metric m join bench_case c on c.id = m.case_id where c.search_id = ? and c.search_role = ? and m.name = 'req_throughput'", (x[0], role)).fetchone()[0]
assert abs(med("synchronous") - x[1]) < 1e-9 and abs(med("throughput") - x[2]) < 1e-9, x
lo, hi = min(x[1], x[2]), max(x[1], x[2])
rates = [r for (r,) in db.execute("select request_rate from bench_case where search_id = ? and search_role = 'rate' order by ordinal", (x[0],))]
want = [lo + (hi - lo) * i / 4 for i in (1, 2, 3)]
assert all(abs(a - b) < 1e-9 * b for a, b in zip(rates, want)) and len(rates) == 3, (rates, want)
EOF
# above: limits every run meets; the answer is the throughput run's rate
read -r status rate maxr probes passed <<<"$(q "$db" "select x.status, x.slo_rate, max(x.sync_rate, x.max_rate), (select count(*) from bench_case where search_id = x.id and search_role = 'probe'), (select sum(search_pass) from bench_case where search_id = x.id) from search x where kind = 'slo'" | tr '|' ' ')"
[ "$status" = above ] && [ "$rate" = "$maxr" ] && [ "$probes" = 1 ] && [ "$passed" = 1 ] \
    || fail "slo above: status $status, rate $rate (higher bound $maxr), $probes probes, $passed met"
pass "sweep: synchronous, throughput, 3 rates between their stored requests/s; slo with limits every run meets: answer = the higher bound"

# history --filter compares a dimension as a number (docs/REPORTS.md,
# "tokbench history"): every rate history prints ("rate 187.323/s", %g of
# 187.3228...) typed back matches its case alone; so do the whole stored
# double, a REAL rate of 800 typed "800" and "800.0", a concurrency typed
# "12.0"; a word where a number belongs is an error
"$tb" history --backend sweep --db "$db" >"$tmp/hs.out" 2>&1 || fail "history of the sweep: $(cat "$tmp/hs.out")"
shown=$(sed -n 's/^agg_tps .*, rate \([^/]*\)\/s: .*/\1/p' "$tmp/hs.out")
[ "$(wc -l <<<"$shown")" = 3 ] || fail "history of the sweep: the rates shown: $shown"
for r in $shown $(python3 -c "import sqlite3, sys; print(repr(sqlite3.connect(sys.argv[1]).execute(\"select request_rate from bench_case where search_role = 'rate'\").fetchone()[0]))" "$db"); do
    "$tb" history --backend sweep --db "$db" --filter "request_rate=$r" >"$tmp/hf.out" 2>&1 || fail "history --filter request_rate=$r: $(cat "$tmp/hf.out")"
    [ "$(grep -c '^agg_tps' "$tmp/hf.out")" = 1 ] || fail "history --filter request_rate=$r: $(grep '^agg_tps' "$tmp/hf.out")"
done
for r in 800 800.0 8e2; do
    "$tb" history --backend long --db "$tmp/sent.db" --filter "request_rate=$r" >"$tmp/hf.out" 2>&1 || fail "history --filter request_rate=$r of a stored 800.0: $(cat "$tmp/hf.out")"
    grep -q '^agg_tps .*, rate 800/s: 1 session' "$tmp/hf.out" || fail "history --filter request_rate=$r: $(cat "$tmp/hf.out")"
done
"$tb" history --backend sweep --db "$db" --filter concurrency=12.0 >"$tmp/hf.out" 2>&1 && grep -q '^agg_tps .*, concurrency 12: 1 session' "$tmp/hf.out" \
    || fail "history --filter concurrency=12.0: $(cat "$tmp/hf.out")"
"$tb" history --backend sweep --db "$db" --filter request_rate=fast >"$tmp/hf.out" 2>&1; rc=$?
[ $rc = 2 ] && grep -q 'filter "request_rate=fast": request_rate is a number (or none), got "fast"' "$tmp/hf.out" \
    || fail "history --filter request_rate=fast: exit $rc, $(cat "$tmp/hf.out")"
pass "history --filter: each rate as printed ($(tr '\n' ' ' <<<"$shown")), the stored double, 800 and 800.0 of a REAL 800, concurrency 12.0: one case each"

# below: a p99 TPOT no run can meet (each token waits a 1 ms step);
# bisect: a p99 TTFT of 7 ms, which the synchronous rate may meet on the
# slow server (one 1 ms step to the first token) and a queue at the
# throughput rate likely does not; whatever the runs measured, every
# verdict and the answer are checked against what they stored
cat >"$tmp/slo.ini" <<EOF
[suite]
name = slo
warmup = 0
repeat = 1
seed = 5
slo_tpot_p99_ms = 0.01
slo_iterations = 3
[matrix]
prompt_tokens = 8
max_new_tokens = 4
requests = 12
request_rate = slo
[backend below]
plugin = http
url = $slow
EOF
run slo
read -r status rate probes passed <<<"$(q "$tmp/slo.db" "select x.status, coalesce(x.slo_rate, 'null'), (select count(*) from bench_case where search_id = x.id and search_role = 'probe'), (select sum(search_pass) from bench_case where search_id = x.id) from search x" | tr '|' ' ')"
[ "$status" = below ] && [ "$rate" = null ] && [ "$probes" = 4 ] && [ "$passed" = 0 ] \
    || fail "slo below: status $status, rate $rate, $probes probes, $passed met"
# below: the synchronous rate halved twice, then the words: the lowest
# rate tried and the figure it missed by, as stored, in the search's row
# and at the run's end
why=$(q "$tmp/slo.db" "select printf('no rate met the limits: the lowest tried, %.2f requests/s (1/4 of the synchronous %.2f), had TPOT p99 %.2f ms > 0.01 ms', c.request_rate, x.sync_rate, m.p99) from search x join bench_case c on c.search_id = x.id join metric m on m.case_id = c.id and m.name = 'tpot_ms' where c.search_role = 'probe' order by c.request_rate limit 1")
[ "$(q "$tmp/slo.db" "select error from search")" = "$why" ] || fail "slo below: the words: $(q "$tmp/slo.db" "select error from search"), expected $why"
[ "$(q "$tmp/slo.db" "select group_concat(round(c.request_rate / x.sync_rate, 6)) from (select * from bench_case where search_role = 'probe' order by ordinal) c join search x on x.id = c.search_id")" = "$(q "$tmp/slo.db" "select round(max_rate / sync_rate, 6) from search"),1.0,0.5,0.25" ] \
    || fail "slo below: probes at $(q "$tmp/slo.db" "select group_concat(request_rate) from bench_case where search_role = 'probe'")"
grep -qF "below (synchronous" "$tmp/slo.out" && grep -qF "runs: $why" "$tmp/slo.out" || fail "slo below: the run's end: $(grep "slo #" "$tmp/slo.out")"
sed -e 's/^slo_tpot_p99_ms = 0.01/slo_ttft_p99_ms = 7\nslo_iterations = 4/' -e '/^slo_iterations = 3/d' \
    -e 's/^requests = 12/requests = 24/' "$tmp/slo.ini" >"$tmp/bisect.ini"
run bisect
python3 - "$tmp/bisect.db" 7 <<'EOF' || fail "slo bisection: a probe or the answer disagrees with the stored figures"
import math, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
limit = float(sys.argv[2])
sid, status, answer, lo, hi = db.execute("select id, status, slo_rate, sync_rate, max_rate from search").fetchone()
probes = db.execute("select c.id, c.request_rate, c.search_pass, c.status,"
                    " (select p99 from metric where case_id = c.id and name = 'ttft_ms'),"
                    " (select count(*) from request r join sample s on s.id = r.sample_id where s.case_id = c.id and s.warmup = 0 and r.status <> 'ok')"
                    " from bench_case c where c.search_id = ? and c.search_role = 'probe' order by c.ordinal", (sid,)).fetchall()
lo, hi = min(lo, hi), max(lo, hi)
# every verdict is the stored p99 TTFT against the limit, no failed request
for cid, rate, ok, st, p99, failed in probes:
    want = int(st == "ok" and failed == 0 and p99 is not None and p99 <= limit)
    assert ok == want, (cid, rate, ok, p99, failed)
assert abs(probes[0][1] - hi) < 1e-9 * hi, "the first probe is at the throughput run's rate"
if status == "above":
    assert len(probes) == 1 and probes[0][2] == 1 and abs(answer - hi) < 1e-9 * hi
else:
    assert abs(probes[1][1] - lo) < 1e-9 * hi, "the second probe is at the synchronous run's rate"
    # not met at lo: down by halves (2 at most) until one is met
    good, bad, i = (lo if probes[1][2] else None), hi, 2
    if good is None:
        bad = lo
        while i < len(probes) and i < 4 and good is None:
            assert abs(probes[i][1] - bad / 2) < 1e-9 * hi, (probes[i][1], bad)
            good, bad = (probes[i][1], bad) if probes[i][2] else (None, probes[i][1])
            i += 1
    if status == "below":
        assert good is None and i == 4 == len(probes) and answer is None, (i, len(probes))
    else:
        assert status == "found" and len(probes) == i + 4, (status, len(probes))
        for cid, rate, ok, *_ in probes[i:]:
            assert abs(rate - (good + bad) / 2) < 1e-9 * hi, (rate, good, bad)
            good, bad = (rate, bad) if ok else (good, rate)
        assert abs(answer - max(r for _, r, ok, *_ in probes if ok)) < 1e-9 * hi, answer
EOF
pass "slo: limits no run meets: below after 1/2 and 1/4 of the synchronous rate, no answer, why in words; bisection ($(q "$tmp/bisect.db" "select status || ' ' || coalesce(round(slo_rate, 1), '-') from search")): every verdict and the answer as the stored runs say"

# a probe cut off (Ctrl-C: stored failed, no figures, search_pass NULL
# by run/search.c, tests/unit/test_search.c; a tokbench before that
# stored 0) has no verdict: the runs table says so, never "not met"
verdicts() { "$tb" report --db "$1" 2>/dev/null | sed -n '/^## Load searches: the runs/,/^## /p' | grep '| probe |' | sed 's/.*| \([^|]*\) |$/\1/' | paste -sd,; }
[ "$(verdicts "$tmp/slo.db")" = "not met,not met,not met,not met" ] || fail "the runs table's verdicts: $(verdicts "$tmp/slo.db")"
for stored in NULL 0; do
    cp "$tmp/slo.db" "$tmp/cut.db"
    q "$tmp/cut.db" "update search set status = 'interrupted', slo_rate = NULL, error = NULL;
        delete from metric where case_id = (select max(id) from bench_case);
        update bench_case set status = 'failed', error = 'interrupted (Ctrl-C or SIGTERM) while running', search_pass = $stored where id = (select max(id) from bench_case)"
    [ "$(verdicts "$tmp/cut.db")" = "not met,not met,not met,interrupted (no verdict)" ] \
        || fail "a cut-off probe (search_pass $stored): $(verdicts "$tmp/cut.db")"
done
pass "the runs table: each probe's verdict as stored; a probe cut off: interrupted (no verdict)"

# ------------------------------------------------------------------ 7
for name in search bisect; do
    "$tb" report --db "$tmp/$name.db" --format html -o "$tmp/$name.html" 2>"$tmp/$name.report.err" || fail "report $name"
    "$tb" report --db "$tmp/$name.db" --format md -o "$tmp/$name.md" 2>/dev/null || fail "report md $name"
done
python3 - "$tmp/search.html" "$tmp/search.db" <<'EOF' || fail "the report of the searches"
import html, re, sqlite3, sys, xml.etree.ElementTree as ET
doc = open(sys.argv[1], encoding="utf-8").read()
db = sqlite3.connect(sys.argv[2])
slo = db.execute("select slo_rate from search where kind = 'slo'").fetchone()[0]
figs = re.findall(r'<figure class="chart" data-kind="(rate|goodput)">(.*?)</figure>', doc, re.S)
kinds = [k for k, _ in figs]
# two groups: the sweep's backend and the slo one's (one probe: no chart
# of its own), 3 latency charts + 1 goodput each where two rates or more
assert kinds.count("rate") == 3 and kinds.count("goodput") == 1, kinds
for kind, fig in figs:
    ET.fromstring(re.search(r'<svg .*</svg>', fig, re.S).group(0))
assert "<h2 id=\"searches\">Load searches</h2>" in doc
assert "<h2 id=\"search-runs\">Load searches: the runs</h2>" in doc
assert ">above<" in doc, "no search with status above in the table"
# the runs' table: each open-loop run's stored sent rate beside its offered one
runs = doc[doc.index('<h2 id="search-runs">'):]
assert "sent req/s" in runs, "no sent req/s column in the searches' runs"
for (v,) in db.execute("select m.median from metric m join bench_case c on c.id = m.case_id where c.search_id is not null and m.name = 'sent_rate'"):
    assert ("%.2f" % v) in runs, ("sent rate %.2f not in the runs' table" % v)
assert ("%.2f" % slo) in doc, ("slo_max_rate %.2f not in the table" % slo)
EOF
# check_limit HTML DB: in every rate chart of the search with an answer,
# one limit line named with the stored answer and status, at the x the
# chart's log axis gives that rate (fitted on the drawn points' x and
# rates); none without an answer.
check_limit() {
    python3 - "$1" "$2" <<'EOF'
import math, re, sqlite3, sys
doc = open(sys.argv[1], encoding="utf-8").read()
db = sqlite3.connect(sys.argv[2])
status, slo = db.execute("select status, slo_rate from search where kind = 'slo'").fetchone()
figs = re.findall(r'<figure class="chart" data-kind="(rate|goodput)">(.*?)</figure>', doc, re.S)
n_rates = db.execute("select count(distinct request_rate) from bench_case where request_rate is not null").fetchone()[0]
if n_rates < 2:
    assert not figs, "a chart of one rate"
    sys.exit(0)
assert len(figs) == 4, [k for k, _ in figs]
for kind, fig in figs:
    lines = re.findall(r'<path class="series reference vertical" d="M([0-9.]+) [0-9]+V[0-9]+"[^>]*><title>([^<]*)</title>', fig)
    if slo is None:
        assert not lines, "a limit marked without an answer"
        continue
    assert len(lines) == 1, (kind, lines)
    assert lines[0][1].endswith("SLO limit: %.4g requests/s (%s)" % (slo, status)), lines
    pts = sorted({(float(r), float(cx)) for cx, r in re.findall(r'cx="([0-9.]+)"[^>]*><title>[^<]*: rate ([0-9.e+]+)/s', fig)})
    assert pts, (kind, "no points")
    (r0, x0), (r1, x1) = pts[0], pts[-1]
    if r1 <= r0 * (1 + 1e-9):
        # a chart whose points all sit at one rate (a loaded machine's runs
        # can give that): the line's title was checked; no span to place it in
        print("note: %s chart: every point at rate %g: the line's position not checked" % (kind, r0))
        continue
    want = x0 + (x1 - x0) * (math.log(slo) - math.log(r0)) / (math.log(r1) - math.log(r0))
    x = float(lines[0][0])
    assert abs(x - want) < 1.0, ("line at x %.1f, the answer %g/s is at %.1f" % (x, slo, want))
EOF
}
check_limit "$tmp/search.html" "$tmp/search.db" || fail "the found limit in the searches' charts"
check_limit "$tmp/bisect.html" "$tmp/bisect.db" || fail "the found limit in the bisection's charts"
grep -q 'data-series="below SLO: p99 TTFT &lt;= 7 ms"' "$tmp/bisect.html" || [ "$(q "$tmp/bisect.db" "select count(distinct request_rate) from bench_case")" -lt 2 ] \
    || fail "no p99 TTFT limit line in the bisection's TTFT chart"
# an answer between the charted rates (planted): the line inside the plot
cp "$tmp/search.db" "$tmp/shown.db"
q "$tmp/shown.db" "update search set status = 'found', slo_rate = (select (min(request_rate) + max(request_rate)) / 2 from bench_case) where kind = 'slo'"
"$tb" report --db "$tmp/shown.db" --format html -o "$tmp/shown.html" 2>/dev/null || fail "report shown"
check_limit "$tmp/shown.html" "$tmp/shown.db" || fail "the found limit between the charted rates"
# the JSON export: the searches, each case's search, each request's prompt
"$tb" export last --format json --db "$tmp/search.db" >"$tmp/search.json" 2>/dev/null || fail "export json"
python3 - "$tmp/search.json" "$tmp/search.db" <<'EOF' || fail "the JSON export of the searches"
import json, sqlite3, sys
doc = json.load(open(sys.argv[1]))
db = sqlite3.connect(sys.argv[2])
got = [(s["kind"], s["status"], s["slo_max_rate"]) for s in doc["searches"]]
want = db.execute("select kind, status, slo_rate from search order by id").fetchall()
assert len(got) == len(want) == 2, got
for g, w in zip(got, want):  # JSON's 15 significant digits
    assert g[:2] == w[:2] and (g[2] is None) == (w[2] is None) and (w[2] is None or abs(g[2] - w[2]) < 1e-9 * w[2]), (g, w)
roles = [c["search_role"] for c in doc["cases"] if c["search_id"]]
assert roles == [r for (r,) in db.execute("select search_role from bench_case where search_id is not null order by ordinal")], roles
assert all(r["prompt_tokens"] is None for c in doc["cases"] for s in c["samples"] for r in s["requests"])
EOF
# db merge carries the searches, each run still pointing at its own
# (a second copy of the session under another uuid: new search ids)
cp "$tmp/search.db" "$tmp/other.db"
q "$tmp/other.db" "update session set uuid = 'another-' || uuid"
"$tb" db merge "$tmp/other.db" --db "$tmp/merged.db" >/dev/null 2>&1 && "$tb" db merge "$tmp/search.db" --db "$tmp/merged.db" >/dev/null 2>&1 \
    || fail "db merge of sessions with searches"
[ "$(q "$tmp/merged.db" "select group_concat(s.session_id || s.kind || (select count(*) from bench_case c where c.search_id = s.id and c.session_id = s.session_id), ' ') from search s")" \
  = "1sweep5 1slo3 2sweep5 2slo3" ] || fail "merged searches: $(q "$tmp/merged.db" "select * from search")"
pass "report: the searches' tables, rate charts with the found limit marked at the stored answer; the JSON export; db merge"

chromium=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$chromium" ]; then
    echo "SKIP (part): chromium not installed: the report is not rendered"
else
    # the report with the planted answer between the charted rates
    python3 - "$tmp/shown.html" "$tmp/probe.html" <<'EOF'
import sys
page = open(sys.argv[1], encoding="utf-8").read()
probe = """<script>
const rows = [];
for (const svg of document.querySelectorAll('svg.tb-chart')) {
  const fig = svg.closest('figure');
  if (fig.dataset.kind !== 'rate' && fig.dataset.kind !== 'goodput') continue;
  const plot = svg.getBoundingClientRect();
  for (const p of svg.querySelectorAll('path.vertical')) {
    const r = p.getBoundingClientRect();
    rows.push([fig.dataset.kind, Math.round(p.getTotalLength()), Math.round(r.left - plot.left), Math.round(plot.width),
               getComputedStyle(p).strokeDasharray.replace(/ /g, '')].join(' '));
  }
}
const pre = document.createElement('pre');
pre.id = 'probe';
pre.textContent = 'PROBE\\n' + rows.join('\\n') + '\\nEND';
document.body.appendChild(pre);
</script>"""
open(sys.argv[2], "w", encoding="utf-8").write(page.replace("</body>", probe + "</body>"))
EOF
    timeout 120 "$chromium" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
        --disable-background-networking --disable-component-update --disable-sync --hide-scrollbars \
        --user-data-dir="$(mktemp -d "$tmp/profile.XXXXXX")" --window-size=1400,1000 --dump-dom \
        "file://$tmp/probe.html" >"$tmp/dom.html" 2>>"$tmp/chromium.log"
    awk '/^END/ {p = 0} p {print} /PROBE$/ {p = 1}' "$tmp/dom.html" >"$tmp/probe.txt"
    n=$(grep -c . "$tmp/probe.txt")
    [ "$n" = 4 ] || fail "Chromium: $n limit lines laid out, expected one in each of the 4 rate charts: $(cat "$tmp/probe.txt")"
    while read -r kind len left width dash; do
        # PLOT_H = 250 px tall, inside the plot's width, dashed
        [ "$len" -ge 240 ] && [ "$left" -gt $((width / 10)) ] && [ "$left" -lt "$width" ] && [ "$dash" = "3px,3px" ] \
            || fail "Chromium: $kind limit line: length $len, at x $left of $width, dash $dash"
    done <"$tmp/probe.txt"
    pass "Chromium: the limit line laid out in each of the $n rate charts, full height, inside the plot"
fi

tb_finish
