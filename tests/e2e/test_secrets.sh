#!/usr/bin/env bash
# End to end: secrets stay secret against hostile servers and plugins
# (issue 38, item 4). The real CLI, tests/e2e/hostile_server.py and the
# secret_opt test plugin:
#   1. an API key with CR/LF ("sk-X\r\nX-Secret: injected"), through
#      api_key_env or ${ENV} in api_key, is refused at load (exit 2, the
#      option named, the key not quoted): the server never sees the
#      injected header;
#   2. keys a server echoes back (a 401 saying "Bearer sk-..."): api_key,
#      api_key_env (a key only the plugin knows) and a key longer than an
#      error's buffer; a plugin that logs its secret token and puts it in
#      its errors; a metrics_url with user:password; a backend url with
#      user:password. None of them is in stdout, stderr, `run --dry-run`,
#      the database (SQL dump and raw files: the suite text, config_json,
#      the backend's options_json), the
#      Markdown, HTML and JSON reports or `show`; "(secret)" stands in;
#   3. a backend process holding secrets writes no core dump: it says it
#      is not dumpable (prctl), and where core_pattern writes plain files
#      a crash with ulimit -c unlimited leaves none (not under ASan, which
#      writes none anyway).
#
# usage: test_secrets.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
tb_init secrets "$@"
need_sqlite3
python=${PYTHON:-python3}
command -v "$python" >/dev/null || { echo "SKIP: python3 not installed"; exit 77; }
command -v curl >/dev/null || { echo "SKIP: curl not installed"; exit 77; }
[ -f "$build/plugins/http/http.so" ] || { echo "SKIP: no http plugin (built without libcurl)"; exit 77; }
export TOKBENCH_PLUGIN_PATH="$build/plugins"
secret_so="$build/tests/plugins/secret_opt.so"
asan=0
grep -q __asan_init "$tb" && asan=1

start_server hostile "$python" "$src/tests/e2e/hostile_server.py" --quiet || tb_finish
stat() { curl -s "http://127.0.0.1:$port/stats" | "$python" -c "import json, sys; print(json.load(sys.stdin)['$1'])"; }

# ---------------------------------------------------------------- 1. CR/LF
export TB_CRLF_KEY=$'sk-X\r\nX-Secret: injected'
for how in env suite; do
    key_line="api_key_env = TB_CRLF_KEY"
    [ $how = suite ] && key_line='api_key = ${TB_CRLF_KEY}'
    cat >"$tmp/crlf-$how.ini" <<EOT
[suite]
name = crlf
warmup = 0
repeat = 1
[matrix]
prompt_tokens = 4
max_new_tokens = 4
[backend crlf]
plugin = http
url = http://127.0.0.1:$port/ok/v1
$key_line
EOT
    "$tb" run "$tmp/crlf-$how.ini" --db "$tmp/crlf.db" >"$tmp/crlf-$how.out" 2>"$tmp/crlf-$how.err"
    rc=$?
    if [ $rc = 2 ] && grep -q "control character" "$tmp/crlf-$how.err"; then
        pass "a CR/LF key ($how) refused at load: $(grep -m1 "control character" "$tmp/crlf-$how.err")"
    else
        fail "a CR/LF key ($how): exit $rc, expected 2 and a message: $(tail -3 "$tmp/crlf-$how.err")"
    fi
    grep -aq "injected" "$tmp/crlf-$how.err" "$tmp/crlf-$how.out" && fail "the message quotes the key ($how)"
done
n=$(stat x_secret)
[ "$n" = 0 ] && pass "the server saw no injected header" || fail "the server saw $n requests with an injected X-Secret header"

# ---------------------------------------------------------------- 2. echoes
lit='sk-LITERAL-7d1e0c5a9b'
envkey='sk-ENVONLY-3fa8b2c6d4'
long="sk-LONG-$(printf 'a%.0s' $(seq 1 90))$(printf 'Z%.0s' $(seq 1 90))" # past every error buffer
tok='tok-LEAKED-55e1f0a2'
pw='pa55-W0RD-91c3'
urlpw='u5er-PA55-6b2d0e'
export TB_ECHO_KEY=$envkey
cat >"$tmp/echo.ini" <<EOT
[suite]
name = echoes
warmup = 0
repeat = 1
[matrix]
prompt_tokens = 4
max_new_tokens = 4
requests = 2
concurrency = 1
[backend held]          ; waits for $tmp/go: the scrapes go on meanwhile
plugin = $build/tests/plugins/misbehave.so
wait_file = $tmp/go
[backend literal]
plugin = http
preflight = false   ; each request echoes the key
url = http://127.0.0.1:$port/echo_key/v1
api_key = $lit
[backend env]
plugin = http
preflight = false   ; each request echoes the key
url = http://127.0.0.1:$port/echo_key/v1
api_key_env = TB_ECHO_KEY
[backend long]
plugin = http
preflight = false   ; each request echoes the key
url = http://127.0.0.1:$port/echo_key/v1
api_key = $long
[backend checked]       ; the preflight's 1-token request gets the echo: the case's reason
plugin = http
url = http://127.0.0.1:$port/echo_key/v1
api_key = $lit
[backend urlpw]         ; a password in the url: the request is ok
plugin = http
url = http://alice:$urlpw@127.0.0.1:$port/ok/v1
[backend leaky]
plugin = $secret_so
token = $tok
leak = true
[telemetry]
metrics_url = http://scraper:$pw@127.0.0.1:$port/metrics
period = 0.05
nvml = off
EOT
"$tb" run "$tmp/echo.ini" --dry-run >"$tmp/dry.out" 2>&1 || fail "echoes: run --dry-run: $(tail -3 "$tmp/dry.out")"
"$tb" run "$tmp/echo.ini" --db "$tmp/e.db" >"$tmp/e.out" 2>"$tmp/e.err" &
runner=$!
pids+=("$runner")
# the second scrape arrives once the first was answered and read: then go
until [ "$(stat metrics)" -ge 2 ] || ! kill -0 $runner 2>/dev/null; do sleep 0.05; done
touch "$tmp/go"
wait $runner
rc=$?
[ $rc = 1 ] || fail "echoes: exit $rc, expected 1 (every request fails): $(tail -3 "$tmp/e.err")"
n=$(q "$tmp/e.db" "select count(*) from request where error like 'http_4xx: HTTP 401: Incorrect API key provided: Bearer (secret)%'")
[ "$n" = 6 ] && pass "6 echoed keys stored as 'Bearer (secret)'" \
    || fail "echoed keys: $n of 6 redacted: $(q "$tmp/e.db" "select distinct error from request")"
[ "$(q "$tmp/e.db" "select count(*) from bench_case where status = 'failed' and error like '%before the load: http_4xx: HTTP 401: Incorrect API key provided: Bearer (secret)%'")" = 1 ] \
    && pass "the preflight's echoed key stored as 'Bearer (secret)'" \
    || fail "the preflight's echo: $(q "$tmp/e.db" "select error from bench_case where error like '%before the load%'")"
[ "$(q "$tmp/e.db" "select count(*) from request where error = 'http_4xx: HTTP 401: bad key (secret)'")" -ge 1 ] \
    && pass "the plugin's leaked token stored as (secret)" || fail "leaky plugin errors: $(q "$tmp/e.db" "select distinct r.error from request r")"
grep -q "leaking the token: (secret)" "$tmp/e.err" && pass "the plugin's log line redacted" \
    || fail "the leaky log line: $(grep -a leaking "$tmp/e.err")"
grep -q "dumpable 0" "$tmp/e.err" && pass "a worker holding secrets is not dumpable" \
    || fail "the secret_opt worker is dumpable: $(grep -a dumpable "$tmp/e.err")"
[ "$(q "$tmp/e.db" "select count(*) from session where suite_text like '%metrics_url = http://(secret)@127.0.0.1:%'")" = 1 ] \
    && pass "the stored suite text hides the URL's credentials" || fail "suite text: $(q "$tmp/e.db" "select suite_text from session" | grep metrics_url)"
[ "$(q "$tmp/e.db" "select count(*) from telemetry_series where source like 'http://(secret)@%'")" -ge 1 ] \
    && pass "telemetry series name the URL without its credentials" \
    || fail "telemetry sources: $(q "$tmp/e.db" "select distinct source from telemetry_series")"
[ "$(q "$tmp/e.db" "select count(*) from bench_case c join backend b on b.id = c.backend_id
                     where b.label = 'urlpw' and c.status = 'ok'")" = 1 ] \
    || fail "url with a password: $(q "$tmp/e.db" "select b.label, c.status, c.error from bench_case c join backend b on b.id = c.backend_id where b.label = 'urlpw'")"
got=$(q "$tmp/e.db" "select json_extract(options_json, '\$.url') from backend where label = 'urlpw'
                     union all select json_extract(config_json, '\$.backends.urlpw.options.url') from session" | tr '\n' ' ')
[ "$got" = "http://(secret)@127.0.0.1:$port/ok/v1 http://(secret)@127.0.0.1:$port/ok/v1 " ] \
    && pass "a url's password: the case ran, the backend's options_json and config_json say (secret)" \
    || fail "a url's password: stored urls: $got"
"$tb" report --db "$tmp/e.db" --last --format md -o "$tmp/r.md" 2>>"$tmp/e.err"
"$tb" report --db "$tmp/e.db" --last --format html -o "$tmp/r.html" 2>>"$tmp/e.err"
"$tb" export 1 --db "$tmp/e.db" --format json -o "$tmp/r.json" 2>>"$tmp/e.err"
"$tb" show 1 --db "$tmp/e.db" >"$tmp/show.out" 2>>"$tmp/e.err"
sqlite3 "$tmp/e.db" .dump >"$tmp/dump.sql"
leaks=0
for f in "$tmp/dry.out" "$tmp/e.out" "$tmp/e.err" "$tmp/r.md" "$tmp/r.html" "$tmp/r.json" "$tmp/show.out" "$tmp/dump.sql" "$tmp/e.db" "$tmp/e.db-wal"; do
    [ -f "$f" ] || continue
    for s in "$lit" "$envkey" "${long:0:16}" "$tok" "$pw" "$urlpw"; do
        if grep -aqF -- "$s" "$f"; then
            fail "secret '${s:0:16}' in $(basename "$f"): $(grep -aoF -m1 -- "$s" "$f" | head -c 80)"
            leaks=$((leaks + 1))
        fi
    done
done
[ $leaks = 0 ] && pass "no key, token or password in the output, --dry-run, database, reports or show"
grep -q "(secret)" "$tmp/r.md" && pass "the Markdown report says (secret)" || fail "the Markdown report has no (secret) in its errors"

# ---------------------------------------------------------------- 3. core dumps
mkdir -p "$tmp/core"
ctok='tok-COREDUMP-0b7e4d'
cat >"$tmp/crash.ini" <<EOT
[suite]
name = crash
warmup = 0
repeat = 1
[matrix]
max_new_tokens = 4
[backend crashy]
plugin = $secret_so
token = $ctok
crash = true
EOT
pattern=$(cat /proc/sys/kernel/core_pattern 2>/dev/null)
(cd "$tmp/core" && ulimit -c unlimited 2>/dev/null; "$tb" run "$tmp/crash.ini" --db "$tmp/c.db" >"$tmp/c.out" 2>"$tmp/c.err")
case "$(q "$tmp/c.db" "select error from bench_case")" in
    *"signal 11"*) pass "the crashing backend's case failed with its signal";;
    *) fail "crash: $(q "$tmp/c.db" "select status, error from bench_case")";;
esac
grep -q "dumpable 0" "$tmp/c.err" && pass "crash: the worker was not dumpable" || fail "crash: $(grep -a dumpable "$tmp/c.err")"
if [ $asan = 1 ]; then
    pass "real core dump not checked under ASan (it writes none)"
elif [[ "$pattern" == "|"* || "$pattern" == *"/"* ]] || ! (ulimit -c unlimited 2>/dev/null); then
    pass "real core dump not checked: core_pattern '$pattern' is not a plain file in the working folder, or ulimit -c is capped"
else
    cores=$(find "$tmp/core" -name 'core*' -type f | wc -l)
    if [ "$cores" = 0 ]; then
        pass "no core file (core_pattern '$pattern', ulimit -c unlimited)"
    else
        fail "$cores core file(s) written; holding the token $(cat "$tmp"/core/core* | grep -acF -- "$ctok") time(s)"
    fi
fi
tb_finish
