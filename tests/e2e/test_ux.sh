#!/usr/bin/env bash
# The terminal experience (issue 17), end to end on the null backend:
#   1. progress: the workers' log lines never share a line with the
#      progress bar on a terminal; the bar fits the terminal and shows
#      the calls of the case in flight and an ETA; output that is not a
#      terminal has no control codes;
#   2. show's case table fits the terminal (or --width), leaves out the
#      empty columns, names what it left out; a pipe keeps every column;
#   3. labels say what they count (calls, requests, p5);
#   4. readers never create a database; a file they cannot write is read
#      without being changed (an older schema through a copy in memory);
#   5. sessions in time order after a merge; the report's history chart
#      draws every case (12 of one backend);
#   6. suite errors: every one at once (parse, options, files), each with
#      the suite's file:line, before anything runs.
#
# usage: test_ux.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
tb_init ux "$@"
null="$build/plugins/null/null.so"
need_sqlite3
command -v python3 >/dev/null || { echo "SKIP: python3 not installed"; exit 77; }
pty() { env -u COLUMNS python3 "$src/tests/e2e/pty_run.py" "$@"; } # COLUMNS OUT COMMAND...

# A null backend over 12 batch sizes: 12 short cases.
cat >"$tmp/twelve.ini" <<EOF
[suite]
name = twelve
warmup = 0
repeat = 2
[matrix]
prompt_tokens = 8
max_new_tokens = 4
batch = 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12
[backend n]
plugin = $null
step_us = 100
EOF

# --- 1. progress on a terminal: log lines on lines of their own, the bar
# within the terminal, the case's repetitions and an ETA; none of it in a file
cat >"$tmp/log.ini" <<EOF
[suite]
warmup = 1
repeat = 3
[matrix]
prompt_tokens = 8
max_new_tokens = 8
batch = 1, 2
[backend logger]
plugin = $null
step_us = 20000
log_lines = 2
EOF
pty 80 "$tmp/pty.out" "$tb" run "$tmp/log.ini" --db "$tmp/log.db" || fail "run on a terminal"
"$tb" run "$tmp/log.ini" --db "$tmp/log.db" >/dev/null 2>"$tmp/plain.err" || fail "run into a file"
python3 - "$tmp/pty.out" "$tmp/plain.err" >"$tmp/progress.txt" <<'EOF' || fail "progress: $(cat "$tmp/progress.txt")"
import re, sys
tty = open(sys.argv[1], "rb").read().decode()
plain = open(sys.argv[2], "rb").read().decode()
bad = []
# 8 calls x 2 lines, in both: every line relayed, none lost
for name, text in (("terminal", tty), ("file", plain)):
    for what in ("scripted log line", "scripted stderr line"):
        n = text.count(what)
        if n != 8:
            bad.append(f"{name}: {n} '{what}', expected 8")
# on the terminal, a log line starts its line: what precedes it since the
# last newline is nothing, or a bar cleared by \r ESC[K
for m in re.finditer(r"(\[logger\] info: call|null: call) \d+", tty):
    before = tty[tty.rfind("\n", 0, m.start()) + 1:m.start()]
    if before and not before.endswith("\r\x1b[K"):
        bad.append(f"a log line shares its line with {before!r}")
# every bar (the text a \r ends: it is cleared) within 79 columns of the 80
for seg in re.findall(r"([^\r\n]*)\r", tty.replace("\x1b[K", "")):
    if len(seg) > 79:
        bad.append(f"a bar of {len(seg)} columns: {seg!r}")
for want in ("rep 2/3", "ETA ", "[2/2] ok"):
    if want not in tty:
        bad.append(f"the terminal never showed {want!r}")
if "\x1b" in plain or "\r" in plain:
    bad.append("control codes in a file")
print("; ".join(bad) if bad else "ok")
sys.exit(1 if bad else 0)
EOF
pass "progress: 16 worker log lines relayed on their own lines, bars within 80 columns with reps and ETA; a file gets no control codes"
# a worker's last words, written as it dies, are relayed before the case's failure
printf '[suite]\nwarmup = 0\nrepeat = 3\n[matrix]\nmax_new_tokens = 4\n[backend d]\nplugin = %s\nlog_lines = 2\nabort_at = 2\n' "$null" >"$tmp/die.ini"
"$tb" run "$tmp/die.ini" --db "$tmp/die.db" >/dev/null 2>"$tmp/die.err"
last=$(grep -n 'null: call 2: scripted stderr line 2' "$tmp/die.err" | cut -d: -f1)
failed=$(grep -n '^\[1/1\] failed .*SIGABRT' "$tmp/die.err" | cut -d: -f1)
[ -n "$last" ] && [ -n "$failed" ] && [ "$last" -lt "$failed" ] \
    || fail "a dying worker's last line is not relayed before its failure: $(cat "$tmp/die.err")"
pass "a dying worker's last lines relayed before the case's failure"

# --- 3. labels: what each median is of
"$tb" run "$tmp/twelve.ini" --db "$tmp/h.db" --filter batch=3 >"$tmp/l.out" 2>"$tmp/l.err" || fail "run twelve batch=3"
grep -qE '^\[1/1\] ok +n prompt_tokens=8 max_new_tokens=4 batch=3: [0-9.]+ tok/s aggregate \(median of 2 calls\), [0-9.]+ tok/s per request \(median of 6 requests\)$' "$tmp/l.err" \
    || fail "run's case line does not say what its medians are of: $(grep '^\[1/1\]' "$tmp/l.err")"
head=$(grep -m1 '^backend ' "$tmp/l.out")
for want in "req tok/s" "req tok/s p5" "agg tok/s" "calls"; do
    [[ "$head" == *"  $want  "* || "$head" == *"  $want" ]] || fail "show's header lacks \"$want\": $head"
done
[[ "$head" == *"p95 tok/s"* || "$head" == *" runs"* ]] && fail "show's header has an old label: $head"
grep -q '^req tok/s p5: its 5th percentile, the rate 95% of requests reach' "$tmp/l.out" || fail "show's footnote on p5"
[ "$(q "$tmp/h.db" "select calls || ' ' || (req_tps_median > 0) || ' ' || (req_tps_p5 <= req_tps_median) from summary")" = "2 1 1" ] \
    || fail "summary view: calls, req_tps_median"
grep -q '  status  requests  median' < <("$tb" history --backend n --metric req_tps --db "$tmp/h.db") || fail "history of req_tps: n not named requests"
grep -q '  status  calls  median' < <("$tb" history --backend n --db "$tmp/h.db") || fail "history of agg_tps: n not named calls"
pass "labels: median of 2 calls / 6 requests, req tok/s p5, calls; summary calls, req_tps_median"

# --- 2. the case table fits the terminal
"$tb" run "$tmp/twelve.ini" --db "$tmp/h.db" >/dev/null 2>&1 || fail "run twelve"
"$tb" show --db "$tmp/h.db" >"$tmp/pipe.out" || fail "show to a pipe"
head=$(grep -m1 '^backend ' "$tmp/pipe.out")
for want in "req tok/s p5" "decode tok/s" "TPOT ms" "E2E p95" "NFE" "tok/fwd" "CV" "calls"; do
    [[ "$head" == *"$want"* ]] || fail "show to a pipe lacks \"$want\" (a pipe keeps every column): $head"
done
[[ "$head" == *"dev MiB"* ]] && fail "show keeps dev MiB, which no case has (null measures no device memory)"
grep -q 'left out to fit' "$tmp/pipe.out" && fail "show to a pipe left columns out"
table() { sed -n '/^backend /,/^$/p' "$1"; } # the case table, header to the blank line
for w in 80 100 120; do
    "$tb" show --db "$tmp/h.db" --width $w >"$tmp/w$w.out" || fail "show --width $w"
    long=$(table "$tmp/w$w.out" | awk -v w=$w 'length($0) > w' | wc -l)
    [ "$long" = 0 ] || fail "show --width $w: $long lines of the table are wider: $(table "$tmp/w$w.out" | head -3)"
    table "$tmp/w$w.out" >"$tmp/w$w.table" # a file: grep -q on a pipe can SIGPIPE the writer (pipefail)
    grep -q '^backend .*agg tok/s' "$tmp/w$w.table" || fail "show --width $w left out agg tok/s"
    grep -q "^(left out to fit $w columns: " "$tmp/w$w.out" || fail "show --width $w does not say what it left out"
    # the note ends with where to see every column, wrapped to the width
    sed -n '/^(left out/,/csv)$/p' "$tmp/w$w.out" | awk -v w=$w 'length($0) > w {bad = 1} END {exit bad}' \
        || fail "show --width $w: the note is wider than $w"
    tr '\n' ' ' <"$tmp/w$w.out" | grep 'tokbench show --wide; every figure: tokbench export SESSION --format csv)' >/dev/null \
        || fail "show --width $w: the note does not say where to see them"
done
# what is left out at 80 is left out in order: calls (12) before CV (9) before req tok/s p5 (6)
note=$(sed -n '/^(left out/,/csv)$/p' "$tmp/w80.out" | tr '\n' ' ')
[[ "$note" == *"req tok/s p5"*"CV"*"calls"* ]] || fail "the note lists the columns in table order: $note"
# a terminal of 90 columns: fitted; --wide: every column
pty 90 "$tmp/tty.out" "$tb" show --db "$tmp/h.db" || fail "show on a terminal"
long=$(tr -d '\r' <"$tmp/tty.out" | table /dev/stdin | awk 'length($0) > 90' | wc -l)
[ "$long" = 0 ] || fail "show on a 90-column terminal: $long table lines wider"
grep -q '^(left out to fit 90 columns' "$tmp/tty.out" || fail "show on a 90-column terminal: no note"
COLUMNS=100 python3 "$src/tests/e2e/pty_run.py" 90 "$tmp/tty100.out" "$tb" show --db "$tmp/h.db"
grep -q '^(left out to fit 100 columns' "$tmp/tty100.out" || fail "COLUMNS=100 on a terminal is not the width"
pty 90 "$tmp/wide.out" "$tb" show --db "$tmp/h.db" --wide
grep -q 'left out' "$tmp/wide.out" && fail "show --wide left columns out"
[ "$(grep -m1 '^backend ' "$tmp/wide.out")" = "$head" ] || fail "show --wide on a terminal differs from a pipe's header"
pass "show: empty columns left out; fits --width 80/100/120, a 90-column terminal and COLUMNS; a pipe and --wide keep every column"

# --- 4. readers never create a database
for cmd in "sessions" "show" "report" "report --format html" "export last --format csv" "compare 1 2" \
    "history --backend n"; do
    # shellcheck disable=SC2086
    "$tb" $cmd --db "$tmp/typo.db" >/dev/null 2>"$tmp/typo.err"
    rc=$?
    [ $rc = 1 ] || fail "$cmd on a missing database: exit $rc, expected 1"
    grep -q "typo.db: no such database" "$tmp/typo.err" || fail "$cmd: message $(cat "$tmp/typo.err")"
    [ -e "$tmp/typo.db" ] && { fail "$cmd created typo.db"; rm -f "$tmp/typo.db"; }
done
# another program's SQLite database, and an empty file: readers refuse the
# first and read the second as an empty database, changing neither (no
# schema, no WAL switch); run refuses the first and makes the second tokbench's
q "$tmp/app.db" "create table users(id integer primary key, name text); insert into users values (1, 'alice')"
: >"$tmp/empty.db"
app_sum=$(cksum <"$tmp/app.db")
for cmd in "sessions" "show" "report" "export last --format csv" "history --backend n"; do
    # shellcheck disable=SC2086
    "$tb" $cmd --db "$tmp/app.db" >/dev/null 2>"$tmp/app.err"
    rc=$?
    [ $rc = 1 ] && grep -q "app.db: not a tokbench database (schema version 0, and 1 table" "$tmp/app.err" \
        || fail "$cmd on another program's database: exit $rc: $(cat "$tmp/app.err")"
    # shellcheck disable=SC2086
    "$tb" $cmd --db "$tmp/empty.db" >"$tmp/empty.out" 2>&1
    grep -qE "no sessions yet|known: none" "$tmp/empty.out" || fail "$cmd on an empty file: $(cat "$tmp/empty.out")"
done
"$tb" run "$tmp/log.ini" --db "$tmp/app.db" >/dev/null 2>"$tmp/app.err"
rc=$?
[ $rc = 1 ] && grep -q "not a tokbench database" "$tmp/app.err" || fail "run into another program's database: exit $rc"
[ "$(cksum <"$tmp/app.db")" = "$app_sum" ] && [ ! -e "$tmp/app.db-wal" ] \
    && [ "$(q "$tmp/app.db" "pragma journal_mode")" = delete ] && [ "$(q "$tmp/app.db" "select name from users")" = alice ] \
    || fail "another program's database was changed"
[ -s "$tmp/empty.db" ] && fail "a reader wrote into the empty file"
"$tb" run "$tmp/log.ini" --db "$tmp/empty.db" >/dev/null 2>&1 && "$tb" sessions --db "$tmp/empty.db" \
    >/dev/null || fail "run into an empty file: it should become a tokbench database"
# a file the reader cannot write: a user without write access to it and
# its folder; an older schema (version 6) is read, not migrated
mkdir "$tmp/ro"
cp "$tmp/h.db" "$tmp/ro/cur.db"
cp "$tmp/h.db" "$tmp/ro/old.db"
# migration 7 only renames view columns: it applies again; migration 8's
# columns and table go, so that it applies again too
q "$tmp/ro/old.db" "alter table bench_case drop column search_id; alter table bench_case drop column search_role;
  alter table bench_case drop column search_pass; drop table search; alter table request drop column prompt_tokens"
# what migrations 9 (sharded runs) and 10 (telemetry) add, dropped
q "$tmp/ro/old.db" "drop table shard; alter table session drop column shard_index;
  alter table session drop column shard_count; alter table session drop column start_at;
  alter table session drop column clock_offset_ns; alter table session drop column start_late_ns;
  alter table sample drop column start_ns; alter table sample drop column client_busy;
  drop table telemetry_point; drop table telemetry_series"
# and what migration 11 (block diffusion) adds
q "$tmp/ro/old.db" "alter table request drop column blocks_done"
# and what migration 13 (why a session stopped early) adds
q "$tmp/ro/old.db" "alter table session drop column error"
# and what migration 14 (the telemetry's scrape tally) adds
q "$tmp/ro/old.db" "alter table bench_case drop column scrapes; alter table bench_case drop column scrapes_failed;
  alter table bench_case drop column scrape_error"
# and what migration 15 (speculative decoding) adds
q "$tmp/ro/old.db" "alter table request drop column spec_verifications; alter table request drop column spec_drafted;
  alter table request drop column spec_accepted; alter table request drop column spec_draft_len;
  alter table request drop column spec_at; alter table request drop column acceptance_length;
  alter table request drop column acceptance_rate; alter table sample drop column draft_ns"
# and what migration 16 (canvas models) adds
q "$tmp/ro/old.db" "alter table request drop column canvases; alter table request drop column canvas_steps;
  alter table request drop column canvas_committed; alter table request drop column canvas_positions;
  alter table request drop column canvases_json; alter table request drop column tokens_per_chunk;
  alter table request drop column chunk_gap_ms; alter table request drop column bursty"
# and what migration 18 (the output-length check's ids) adds
q "$tmp/ro/old.db" "alter table request drop column output_ids"
q "$tmp/ro/old.db" "pragma user_version = 6" # migration 7 only renames view columns: it applies again
q "$tmp/ro/cur.db" "pragma journal_mode" >/dev/null
as_reader() { "$@"; }
ro_check=1
if [ "$(id -u)" = 0 ]; then
    if command -v setpriv >/dev/null; then
        as_reader() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
    else
        ro_check=0
        echo "note: root without setpriv: the read-only reader is not checked"
    fi
fi
if [ $ro_check = 1 ]; then
    chmod 755 "$tmp" && chmod 555 "$tmp/ro" && chmod 444 "$tmp/ro/"*.db
    before=$(cd "$tmp/ro" && sha256sum cur.db old.db)
    as_reader "$tb" sessions --db "$tmp/ro/cur.db" >"$tmp/ro.out" 2>"$tmp/ro.err" || fail "sessions of a read-only file: $(cat "$tmp/ro.err")"
    grep -q ' twelve ' "$tmp/ro.out" || fail "sessions of a read-only file: $(cat "$tmp/ro.out")"
    as_reader "$tb" show --db "$tmp/ro/old.db" --width 200 >"$tmp/ro.out" 2>"$tmp/ro.err" || fail "show of a read-only older file: $(cat "$tmp/ro.err")"
    grep -q '^backend .*calls' "$tmp/ro.out" || fail "show of a read-only older file: not read through schema 7"
    as_reader "$tb" export last --format csv --db "$tmp/ro/old.db" >"$tmp/ro.csv" || fail "export of a read-only older file"
    grep -q ',calls,' <<<"$(head -1 "$tmp/ro.csv")" || fail "export of a read-only older file: $(head -1 "$tmp/ro.csv")"
    # a file it may write in a folder it may not (no room for -wal, -shm): read-only too
    chmod 666 "$tmp/ro/old.db"
    as_reader "$tb" sessions --db "$tmp/ro/old.db" >/dev/null 2>"$tmp/ro.err" || fail "sessions of a writable file in a read-only folder: $(cat "$tmp/ro.err")"
    # nothing changed (the older file not migrated), nothing left beside them
    [ "$(cd "$tmp/ro" && sha256sum cur.db old.db)" = "$before" ] || fail "a reader changed a file it cannot write"
    [ "$(ls "$tmp/ro")" = "$(printf 'cur.db\nold.db')" ] || fail "a reader left files: $(ls "$tmp/ro")"
    chmod 755 "$tmp/ro" && chmod 644 "$tmp/ro/"*.db
    [ "$(q "$tmp/ro/old.db" "pragma user_version")" = 6 ] || fail "the older file was migrated"
fi
# one it can write is migrated, as every open does
"$tb" sessions --db "$tmp/ro/old.db" >/dev/null || fail "sessions of a writable older file"
[ "$(q "$tmp/ro/old.db" "pragma user_version")" = "$(q "$tmp/h.db" "pragma user_version")" ] || fail "a writable older file was not migrated"
pass "readers: a missing database is an error, never created; a read-only file (older schema too) read unchanged"

# --- 4b. stored text cannot drive a terminal: a name with ESC and BEL (a
# database older than the suite's text check, or merged from one) is printed
# as \xNN on a terminal, byte for byte into a pipe; UTF-8 cut by the stream's
# buffer (a 15,000-byte name of 3-byte characters) arrives whole
cp "$tmp/h.db" "$tmp/esc.db"
long=$(python3 -c 'print("\u2713" * 5000)')
q "$tmp/esc.db" "update session set suite_name = 'x' || char(27) || ']0;pwned' || char(7) where id = 1;
  update session set suite_name = '$long' where id = 2; update backend set label = 'n' || char(27) || '[2J'"
for cmd in "sessions" "show 1" "report 1" "compare 1 2"; do
    # shellcheck disable=SC2086
    pty 200 "$tmp/esc.out" "$tb" $cmd --db "$tmp/esc.db" >/dev/null 2>&1
    LC_ALL=C grep -q $'[\033\007]' "$tmp/esc.out" && fail "$cmd on a terminal: a raw ESC or BEL"
    grep -qF 'x\x1b]0;pwned\x07' "$tmp/esc.out" || [ "$cmd" != sessions ] || fail "$cmd on a terminal: the name not escaped"
done
pty 20000 "$tmp/esc.out" "$tb" sessions --db "$tmp/esc.db" >/dev/null 2>&1
grep -qF "$long" "$tmp/esc.out" && ! grep -q 'x[89a-f][0-9a-f]' "$tmp/esc.out" || fail "a long UTF-8 name on a terminal: cut"
"$tb" sessions --db "$tmp/esc.db" >"$tmp/esc.pipe" 2>&1
LC_ALL=C grep -q $'\033]0;pwned\007' "$tmp/esc.pipe" || fail "sessions into a pipe: the stored bytes changed"
pass "stored control bytes: escaped on a terminal (sessions, show, report, compare), kept in a pipe; long UTF-8 whole"

# --- 4c. a database a writer cannot have: the cause named (SQLite says
# "unable to open database file" for each)
said() { # WHAT EXPECTED COMMAND...: the command fails, its stderr holds EXPECTED
    local what=$1 want=$2
    shift 2
    "$@" >/dev/null 2>"$tmp/said.err" && { fail "$what: exit 0"; return; }
    grep -q -- "$want" "$tmp/said.err" || fail "$what: $(cat "$tmp/said.err")"
}
f0=$failures
mkdir -p "$tmp/adir"
said "run --db a folder" "adir: is a folder, not a database" "$tb" run "$tmp/log.ini" --db "$tmp/adir"
said "run --db in a missing folder" "x.db: its folder $tmp/nodir does not exist" "$tb" run "$tmp/log.ini" --db "$tmp/nodir/x.db"
said "merge into a folder" "adir: is a folder, not a database" "$tb" db merge "$tmp/h.db" --db "$tmp/adir"
said "merge a folder" "adir: is a folder, not a database" "$tb" db merge "$tmp/adir" --db "$tmp/m4c.db"
mkdir -p "$tmp/rofs" && cp "$tmp/h.db" "$tmp/rofs/ro.db"
if mount --bind -o ro "$tmp/rofs" "$tmp/rofs" 2>/dev/null; then # root with mounts allowed (CI): a read-only file system
    said "run --db on a read-only file system" "ro.db: cannot write in its folder $tmp/rofs .*Read-only file system" \
        "$tb" run "$tmp/log.ini" --db "$tmp/rofs/ro.db"
    "$tb" sessions --db "$tmp/rofs/ro.db" >/dev/null || fail "sessions on a read-only file system"
    umount "$tmp/rofs"
fi
[ $failures = "$f0" ] && pass "a database run or merge cannot have: a folder, a missing folder, a read-only file system, each named"

# --- 5. sessions in time order after a merge; every case in the history chart
sed 's/^name = twelve/name = older/' "$tmp/twelve.ini" >"$tmp/older.ini"
"$tb" run "$tmp/older.ini" --db "$tmp/a.db" --filter batch=1 >/dev/null 2>&1 || fail "run older"
"$tb" run "$tmp/twelve.ini" --db "$tmp/b.db" --filter batch=1 >/dev/null 2>&1 || fail "run newer"
"$tb" db merge "$tmp/a.db" --db "$tmp/b.db" >/dev/null || fail "merge"
# the merged session is older (started first) but has the higher id
[ "$(q "$tmp/b.db" "select group_concat(suite_name, ' ') from (select suite_name from session order by id)")" = "twelve older" ] \
    || fail "merge did not append the older session"
order=$("$tb" sessions --db "$tmp/b.db" | awk 'NR > 2 {print $3}' | tr '\n' ' ')
[ "$order" = "twelve older " ] || fail "sessions after a merge: $order, expected newest first (twelve older)"
"$tb" show last --db "$tmp/b.db" >"$tmp/last.out"; grep -q 'suite twelve' <<<"$(head -1 "$tmp/last.out")" || fail "show last after a merge is not the newest session"
"$tb" run "$tmp/twelve.ini" --db "$tmp/h.db" >/dev/null 2>&1 || fail "run twelve again"
"$tb" report --db "$tmp/h.db" --format html -o "$tmp/h.html" 2>/dev/null || fail "report html"
python3 - "$tmp/h.html" >"$tmp/hist.txt" <<'EOF' || fail "history charts: $(cat "$tmp/hist.txt")"
import re, sys
html = open(sys.argv[1], encoding="utf-8").read()
figs = re.findall(r'<figure class="chart" data-kind="history">(.*?)</figure>', html, re.S)
series = [set(re.findall(r'data-series="([^"]*)"', f)) for f in figs]
every = set().union(*series) if series else set()
print(len(figs), [len(s) for s in series], len(every))
ok = len(figs) == 2 and [len(s) for s in series] == [7, 5] and len(every) == 12
ok &= all("cases 8-12 of 12" in f for f in figs[1:])
sys.exit(0 if ok else 1)
EOF
pass "sessions newest first after a merge (show last too); history: 12 cases in 2 charts ($(cat "$tmp/hist.txt"))"

# --- 6. every suite error at once, each at its file:line, before anything runs
ar="$build/plugins/ar/ar.so"
http="$build/plugins/http/http.so"
mkdir -p "$tmp/s/sub"
cat >"$tmp/s/bad.ini" <<EOF
[suite]
repeat = many
[matrix]
max_new_tokens = 4
batch = 1, x
[prompts]
file = nope.jsonl
[backend a]
plugin = $null
step_us = fast
[backend m]
plugin = $ar
model = ../models/none
[backend p]
plugin = nosuch
[backend d]
plugin = $ar
model = preset:tiny-llama
drafter = ar
draft_model = ../models/nodraft
EOF
want=(
    "bad.ini:2: repeat: expected an integer"
    "bad.ini:5: batch: expected an integer in [1, 1000000000], got \"x\""
    "bad.ini:15: plugin: plugin nosuch: not found"
    "bad.ini:10: step_us: expected an int"
    "bad.ini:13: model: \"$tmp/s/../models/none\": No such file or directory (plugin ar loads a model folder or file here)"
    "bad.ini:7: file: \"nope.jsonl\": No such file or directory (expected a JSONL prompt set)"
    # a model option (TB_OPTF_MODEL) is relative to the suite file, as model = is
    "bad.ini:20: draft_model: [backend d] \"$tmp/s/../models/nodraft\": No such file or directory"
)
if [ -f "$http" ]; then
    printf '[backend t]\nplugin = %s\ntokenizer = sub/tokenizer.json\n' "$http" >>"$tmp/s/bad.ini"
    cp "$src/models/tiny-llama-random/tokenizer.json" "$tmp/s/sub/"
    # a path of an option is opened from the working directory; the hint names the one beside the suite
    want+=("bad.ini:23: tokenizer: [backend t] \"sub/tokenizer.json\": No such file or directory (a path of an option is opened from the working directory; \"$tmp/s/sub/tokenizer.json\" exists: write that)")
fi
(cd "$tmp" && "$tb" run "$tmp/s/bad.ini" --db "$tmp/bad.db" >"$tmp/bad.out" 2>"$tmp/bad.err")
rc=$?
[ $rc = 2 ] || fail "a suite with errors: exit $rc, expected 2"
[ -e "$tmp/bad.db" ] && fail "a suite with errors made a database: something ran"
[ "$(head -1 "$tmp/bad.err")" = "tokbench: suite errors:" ] || fail "suite errors: first line $(head -1 "$tmp/bad.err")"
for w in "${want[@]}"; do
    grep -qF -- "$tmp/s/$w" "$tmp/bad.err" || fail "suite errors lack: $w"
done
n=$(($(wc -l <"$tmp/bad.err") - 1))
[ "$n" = "${#want[@]}" ] || fail "suite errors: $n lines, expected ${#want[@]}: $(cat "$tmp/bad.err")"
# a missing model alone: an error at its line, no backend process started
printf '[suite]\nrepeat = 1\n[matrix]\nmax_new_tokens = 4\n[backend m]\nplugin = %s\nmodel = %s\n' "$ar" "$tmp/no-model" >"$tmp/s/model.ini"
"$tb" run "$tmp/s/model.ini" --db "$tmp/bad.db" >/dev/null 2>"$tmp/model.err"
rc=$?
[ $rc = 2 ] && grep -qF "model.ini:7: model: \"$tmp/no-model\": No such file or directory" "$tmp/model.err" \
    || fail "a missing model: exit $rc, $(cat "$tmp/model.err")"
grep -q '^\[1/' "$tmp/model.err" && fail "a missing model: a case ran"
printf '[suite]\nrepeat = 1\n[backend m]\nplugin = %s\n' "$ar" >"$tmp/s/nomodel.ini"
"$tb" run "$tmp/s/nomodel.ini" --dry-run >/dev/null 2>"$tmp/model.err"
grep -qF "nomodel.ini:3: model: [backend m] has no model = (plugin ar loads" "$tmp/model.err" \
    || fail "no model = for ar: $(cat "$tmp/model.err")"
grep -q 'capabilities: .*model_path' < <("$tb" plugins "$ar") || fail "plugins ar: no model_path capability"
if [ -f "$http" ]; then
    "$tb" plugins "$http" >"$tmp/plugins-http.out" # a file: grep -q stops reading at its match
    grep -q 'path (checked to exist when the suite loads)' "$tmp/plugins-http.out" || fail "plugins http: tokenizer not a path"
fi
pass "suite errors: ${#want[@]} at once (parse, plugin, option, model, prompt set$([ -f "$http" ] && echo ", tokenizer")), each at its line; a missing model before any case"

tb_finish
