#!/usr/bin/env bash
# End to end: `tokbench bench` (cli/bench.c), one command line for a
# server or a model (issue 39 item 1):
#   1. the suites it writes: every option's key, checked line by line and
#      read back by `tokbench run --dry-run` (an ordinary suite, existing
#      keys only); the engine plugin inferred from config.json; every bad
#      value refused (exit 2, nothing printed, no database) with its option
#      named; values that would inject a line, a section, a comment or an
#      environment variable into the suite refused the same way;
#   2. `tokbench bench --url` against `tokbench serve` (the tiny random
#      Llama): closed loops and an slo search, each session stored with the
#      suite file's text, path and the bench command line; `tokbench run`
#      of the written suite runs the same suite again;
#   3. `tokbench bench --model models/small-llama --plugin ar`, tiny lengths.
#
# usage: test_bench.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
tb_init bench "$@"
need_sqlite3
[ -f "$build/plugins/ar/ar.so" ] || { echo "SKIP: no engine plugins in this build"; exit 77; }
have_http=0
[ -f "$build/plugins/http/http.so" ] && have_http=1
cd "$tmp" || exit 1
export TOKBENCH_DB="$tmp/default.db" # a refused command must not make it
export TB_BENCH_KEY=secret                # --api-key-env's: run --dry-run checks it is set
tok="$src/models/tiny-llama-random/tokenizer.json"

# ------------------------------------------------------------------ 1
# print NAME ARGS...: `bench ARGS --print-suite` into NAME.ini (exit 0)
print() {
    local name=$1
    shift
    "$tb" bench "$@" --print-suite >"$name.ini" 2>"$name.err" || { fail "bench $*: exit $?: $(head -3 "$name.err")"; return 1; }
    [ -s "$name.err" ] && fail "bench $* --print-suite wrote to stderr: $(head -3 "$name.err")"
    return 0
}
# suite NAME ARGS...: print, then the suite read back by run --dry-run
suite() {
    print "$@" || return 1
    "$tb" run "$1.ini" --dry-run >"$1.plan" 2>&1 || fail "bench $*: run --dry-run of its suite: $(head -5 "$1.plan")"
}
# has NAME LINE...: NAME.ini holds each line, whole
has() {
    local name=$1 l
    shift
    for l in "$@"; do grep -qxF -- "$l" "$name.ini" || fail "$name.ini lacks the line '$l': $(cat "$name.ini")"; done
}

if [ $have_http = 1 ]; then
    printf '%s\n' '{"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "the"}]}' >data.jsonl
    suite all --url http://127.0.0.1:9/v1 --model served --tokenizer "$tok" --concurrency 1,8 --request-rate 2,4 \
        --input-len normal:64:16:8:128 --output-len uniform:16:4 --header 'X-Team: bench' \
        --header 'X-Quote:say "hi"' --api-key-env TB_BENCH_KEY --requests 12 --repeat 2
    diff -u - all.ini <<EOF || fail "the suite of every server option differs"
; Made by \`tokbench bench\` (a server, plugins/http). An ordinary suite: edit it, run it with \`tokbench run\`.
[suite]
name = bench
warmup = 1
repeat = 2

[matrix]
concurrency = 1, 8
request_rate = 2, 4
requests = 12
prompt_tokens = 64
max_new_tokens = 16

[backend server]
plugin = http
url = http://127.0.0.1:9/v1
model_name = served
tokenizer = $tok
api_key_env = TB_BENCH_KEY
headers = {"X-Team":"bench","X-Quote":"say \"hi\""}
prompt_dist = normal
prompt_stdev = 16
prompt_min = 8
prompt_max = 128
output_dist = uniform
output_stdev = 4
EOF
    grep -q '^suite bench (.*): 4 cases (0 to skip)' all.plan || fail "every option: 4 cases expected: $(cat all.plan)"
    suite plain --url https://example.invalid
    has plain 'concurrency = 1, 8, 32' 'prompt_tokens = 512' 'max_new_tokens = 128' 'url = https://example.invalid'
    suite slo --url http://[::1]:8000 --slo ttft_p99=250,tpot_p99=20.5 --duration 30
    has slo 'request_rate = slo' 'slo_ttft_p99_ms = 250' 'slo_tpot_p99_ms = 20.5' 'open_loop_duration = 30' \
        'url = http://[::1]:8000'
    # repeated --slo options add up
    suite slo2 --url http://h:1 --slo ttft_p99=5 --slo tpot_p99=3
    has slo2 'request_rate = slo' 'slo_ttft_p99_ms = 5' 'slo_tpot_p99_ms = 3'
    grep -q '^concurrency' slo.ini && fail "an slo search got a concurrency: $(cat slo.ini)"
    suite sweep --url http://h:1 --request-rate sweep --input-len 32,64
    has sweep 'request_rate = sweep' 'prompt_tokens = 32, 64'
    suite data --url http://h:1 --dataset data.jsonl --tokenizer "$tok"
    has data "dataset = $tmp/data.jsonl"
    grep -q '^prompt_tokens\|^dataset_output' data.ini && fail "a dataset with a tokenizer: $(cat data.ini)"
    suite data2 --url http://h:1 --dataset data.jsonl --output-len 8
    has data2 'dataset_output = dist' 'max_new_tokens = 8'
    pass "server suites: every option's key, each read back by run --dry-run"
fi
suite ar --model "$src/models/small-llama" --batch 1,4 --input-len 8 --output-len 4
has ar '[backend ar]' 'plugin = ar' "model = $src/models/small-llama" 'device = auto' 'batch = 1, 4' 'prompt_tokens = 8'
print llada --model "$src/models/small-llada" --input-len 8 --output-len 8
has llada 'plugin = diffusion'
suite flow --model "$src/models/small-flow" --input-len 8 --output-len 8 --steps 2,4
has flow 'plugin = flow' 'steps = 2, 4'
print sdar --model "$src/models/small-sdar" --input-len 8 --output-len 8
has sdar 'plugin = diffusion'
print preset --model preset:tiny-llama --plugin ar --input-len 8 --output-len 4
has preset 'model = preset:tiny-llama'
pass "engine suites: the plugin from config.json (ar, diffusion, flow), preset with --plugin"

# refused WANT ARGS...: `bench ARGS --print-suite` exits 2, prints
# nothing, makes no database, and says WANT on stderr
refused() {
    local want=$1
    shift
    "$tb" bench "$@" --print-suite >out 2>err
    local rc=$?
    [ $rc = 2 ] || fail "bench $*: exit $rc, expected 2: $(head -3 err)"
    [ -s out ] && fail "bench $*: printed a suite: $(head -5 out)"
    grep -qF -- "$want" err || fail "bench $*: stderr lacks '$want': $(cat err)"
    [ -e "$TOKBENCH_DB" ] && fail "bench $*: made a database"
}
u=(--url http://127.0.0.1:9)
m=(--model "$src/models/small-llama")
refused 'give --url URL (a server) or --model' --input-len 8
refused '--url "ftp://x": expected an http:// or https:// URL' --url ftp://x
refused '--url "http://h:1?x=1": a query ("?...") is not taken' --url 'http://h:1?x=1'
refused '--url "http://h:1/#f": a fragment ("#...") is not taken' --url 'http://h:1/#f'
refused '--url "http://": no host' --url http://
refused '--url "http://h:99999": the port "99999": expected a number in 1..65535' --url http://h:99999
# a password would be kept in bench-TIME.ini: refused, never quoted
refused '--url "http://(secret)@127.0.0.1:9": holds credentials (USER:PASS@), which the suite file would keep' \
    --url http://alice:s3cretpw@127.0.0.1:9
grep -q s3cretpw err && fail "the refusal quotes the password: $(cat err)"
refused '--concurrency "0": expected an integer in [1, 1000000000]' "${u[@]}" --concurrency 0
refused '--concurrency "1,,2": an empty item' "${u[@]}" --concurrency 1,,2
refused '--concurrency "4, 4": value 4 is listed twice' "${u[@]}" --concurrency '4, 4'
refused '--request-rate "0": expected a rate in requests/s > 0' "${u[@]}" --request-rate 0
refused '--request-rate "sweep,5": sweep is a load search' "${u[@]}" --request-rate sweep,5
refused '--request-rate "slo": slo searches for the highest rate within limits' "${u[@]}" --request-rate slo
refused '--concurrency "4": a load search' "${u[@]}" --request-rate sweep --concurrency 4
refused '--slo "ttft_p99=0": ttft_p99: expected milliseconds > 0' "${u[@]}" --slo ttft_p99=0
refused '--slo "p50=3": expected ttft_p99=MS' "${u[@]}" --slo p50=3
refused '--slo "ttft_p99=5,ttft_p99=6": ttft_p99 is given twice' "${u[@]}" --slo ttft_p99=5,ttft_p99=6
refused '--slo "ttft_p99=5": the limits are the slo search' "${u[@]}" --slo ttft_p99=5 --request-rate sweep
refused '--duration: sizes open loops' "${u[@]}" --duration 5
refused '--duration: --requests 5 sizes every load, open loops too, so the duration would be ignored: give one' \
    "${u[@]}" --request-rate 10 --duration 2 --requests 5
refused '--slo "tpot_p99=4": tpot_p99 is given twice' "${u[@]}" --slo ttft_p99=5,tpot_p99=3 --slo tpot_p99=4
refused '--duration 0: expected seconds in (0, ' "${u[@]}" --duration 0
refused '--input-len "normal:512": expected N[,N...] or DIST:MEAN:SD' "${u[@]}" --input-len normal:512
refused '--input-len "gamma:5:1": unknown distribution' "${u[@]}" --input-len gamma:5:1
refused '--input-len "normal:100:-1": SD:' "${u[@]}" --input-len normal:100:-1
refused '--input-len "normal:100:1:9:3": MIN:MAX' "${u[@]}" --input-len normal:100:1:9:3
refused '--output-len "normal:100:10:1:500": MAX 500 is more than 4 x MEAN' "${u[@]}" --output-len normal:100:10:1:500
refused '--output-len "x": expected an integer in [1, 1000000000]' "${u[@]}" --output-len x
refused '--input-len "8": the prompts are --dataset' "${u[@]}" --dataset "$tok" --input-len 8
refused '--header "NoColon": expected NAME:VALUE' "${u[@]}" --header NoColon
refused 'is not an HTTP header name' "${u[@]}" --header 'Bad Name:x'
refused 'header x-a is given twice' "${u[@]}" --header X-A:1 --header x-a:2
refused '--api-key-env "1KEY": expected an environment variable' "${u[@]}" --api-key-env 1KEY
refused "--tokenizer \"$tmp/none.json\": No such file" "${u[@]}" --tokenizer "$tmp/none.json"
refused '--dataset "'"$tmp"'": a folder, expected a file' "${u[@]}" --dataset "$tmp"
refused '--batch: applies to the engine only' "${u[@]}" --batch 2
refused '--plugin: applies to the engine only' "${u[@]}" --plugin ar
refused '--concurrency: applies to a server only (--url)' "${m[@]}" --concurrency 2
refused '--tokenizer: applies to a server only (--url)' "${m[@]}" --tokenizer "$tok"
refused '--input-len "normal:8:1": a distribution needs --url' "${m[@]}" --input-len normal:8:1
refused '--plugin: is required with a preset' --model preset:tiny-llama
refused "--plugin: is required: $tmp/config.json: No such file" --model "$tmp"
mkdir -p gpt2 notjson
echo '{"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2"}' >gpt2/config.json
echo '{"model_type": ' >notjson/config.json
refused "--plugin: is required: $tmp/gpt2/config.json: architectures \"GPT2LMHeadModel\", model_type \"gpt2\": a family bench does not know" \
    --model gpt2
refused "--plugin: is required: $tmp/notjson/config.json: not JSON" --model notjson
mkdir -p fifo && mkfifo fifo/config.json # read, it would block: refused before it is opened
refused "--plugin: is required: $tmp/fifo/config.json: a FIFO or socket, not a regular file" --model fifo
print gpt2 --model gpt2 --plugin ar
has gpt2 "model = $tmp/gpt2" 'plugin = ar'
"$tb" bench extra "${u[@]}" >out 2>err
[ $? = 2 ] && grep -q '^usage: tokbench bench' err || fail "bench with an argument: $(head -3 err)"
refused '--plugin ll: expected' "${m[@]}" --plugin ll
refused '--steps "4": the ar plugin has no steps' "${m[@]}" --steps 4
refused '--steps: is required with the flow plugin' --model "$src/models/small-flow"
refused '--steps: applies to the engine only' "${u[@]}" --steps 4
pass "bad values: exit 2, nothing printed, no database, the option named"

# injection: a value that would start a line, a section or a comment, or
# expand the environment, is refused; nothing reaches a suite
refused '--url "http://h\x0a[backend x]\x0aplugin = null": contains a control character' \
    --url $'http://h\n[backend x]\nplugin = null'
refused 'contains a control character' "${u[@]}" --model $'m\nplugin = null'
refused 'contains a control character' "${u[@]}" --model $'m\rx'
refused "--model \"m ; x\": contains ';'" "${u[@]}" --model 'm ; x'
refused '--model "${HOME}": contains "${"' "${u[@]}" --model '${HOME}'
refused "--model \"[suite]\": contains '[' or ']'" "${u[@]}" --model '[suite]'
refused '--header "X-A:1\x0a[suite]": contains a control character' "${u[@]}" --header $'X-A:1\n[suite]'
refused "--header \"X-A:a;b\": contains ';'" "${u[@]}" --header 'X-A:a;b'
refused "--url \"http://h;x\": contains ';'" --url 'http://h;x'
refused 'contains "${"' --url 'http://h/${HOME}'
refused 'expected an environment variable' "${u[@]}" --api-key-env $'K\n[suite]'
refused 'starts or ends with a space' "${u[@]}" --model ' m'
long=$(printf 'x%.0s' $(seq 1 200))
refused 'too long for a suite: the line "url = ..." would have 213 characters, a suite line holds 198' \
    --url "http://$long"
: >$'tok\n[backend evil].json'
refused 'contains a control character' "${u[@]}" --tokenizer $'tok\n[backend evil].json'
mkdir -p 'm;x' && cp "$src/models/small-llama/config.json" 'm;x/'
refused "contains ';'" --model 'm;x'
pass "injection attempts (newline, CR, ';', \${, brackets, spaces, long lines, file names) refused"

# ------------------------------------------------------------------ 2
if [ $have_http = 0 ] || ! "$tb" serve --help >/dev/null 2>&1; then
    echo "note: no http plugin or no tokbench serve: part 2 skipped"
else
    start_server ar "$tb" serve --backend ar-tiny "$src/tests/data/suites/serve-ar.ini" --port 0 --max-batch 4
fi
if [ -n "${port:-}" ]; then
    mkdir -p srv
    "$tb" bench --url "http://127.0.0.1:$port/v1" --model ar-tiny --tokenizer "$tok" --concurrency 1,2 \
        --input-len 8 --output-len 4 --requests 4 --repeat 1 --header 'X-Bench: e2e' --db srv/s.db >srv.out 2>srv.err
    rc=$?
    [ $rc = 0 ] || fail "bench --url: exit $rc: $(tail -5 srv.err)"
    file=$(ls srv/bench-*.ini 2>/dev/null)
    [ "$(echo "$file" | wc -l)" = 1 ] && [ -f "$file" ] || fail "bench --url: no one suite next to the database: $(ls srv)"
    grep -qF "suite $tmp/$file (\`tokbench run $tmp/$file\` runs it again)" srv.err \
        || fail "bench --url does not name its suite: $(head -3 srv.err)"
    db=srv/s.db
    [ "$(q $db "select status || ' ' || suite_name || ' ' || suite_path from session")" = "completed bench $tmp/$file" ] \
        || fail "the session: $(q $db 'select status, suite_name, suite_path from session')"
    # the stored text: each file read, after a line naming it
    [ "$(q $db 'select suite_text from session')" = "$(printf '# ---- %s\n' "$tmp/$file"; cat "$file")" ] \
        || fail "the stored suite text is not the file's: $(q $db 'select suite_text from session' | head -3)"
    grep -q " bench --url http://127.0.0.1:$port/v1 --model ar-tiny " <<<"$(q $db 'select command_line from session')" \
        || fail "the stored command line: $(q $db 'select command_line from session')"
    got=$(q $db "select group_concat(concurrency || ':' || status || ':' || prompt_tokens || ':' || max_new_tokens, ' ')
                 from (select * from bench_case order by ordinal)")
    [ "$got" = "1:ok:8:4 2:ok:8:4" ] || fail "bench --url: cases $got"
    got=$(q $db "select count(*) from request r join sample s on r.sample_id = s.id where r.status = 'ok' and not s.warmup")
    [ "$got" = 8 ] || fail "bench --url: $got measured requests ok, expected 4 per case"
    grep -qF 'X-Bench' <<<"$(q $db 'select options_json from backend')" || fail "the header is not in the stored options"
    pass "bench --url against tokbench serve: 2 cases ok, the session has the suite file's text and path"

    "$tb" run "$tmp/$file" --db srv/s.db >rerun.out 2>&1 || fail "run of the written suite: $(tail -5 rerun.out)"
    [ "$(q $db 'select count(distinct suite_sha256) || count(*) from session')" = 12 ] \
        || fail "run of the written suite: another suite: $(q $db 'select suite_sha256 from session')"
    pass "tokbench run of the written suite runs the same suite again"

    "$tb" bench --url "http://127.0.0.1:$port" --model ar-tiny --tokenizer "$tok" --slo ttft_p99=600000,tpot_p99=600000 \
        --input-len 8 --output-len 4 --requests 4 --repeat 1 --db srv/slo.db >slo.out 2>slo.err
    rc=$?
    [ $rc = 0 ] || fail "bench --slo: exit $rc: $(tail -5 slo.err)"
    got=$(q srv/slo.db "select kind || ' ' || status from search")
    [ "$got" = "slo above" ] || fail "bench --slo: the search: $got ($(q srv/slo.db 'select error from search'))"
    grep -qx 'request_rate = slo' <<<"$(q srv/slo.db 'select suite_text from session')" || fail "bench --slo: the stored suite"
    pass "bench --slo: an slo search stored (above: the limits hold at the throughput rate)"
fi

# ------------------------------------------------------------------ 3
mkdir -p eng
"$tb" bench --model "$src/models/small-llama" --plugin ar --input-len 8 --output-len 4 --repeat 1 --db eng/e.db \
    >eng.out 2>eng.err
rc=$?
[ $rc = 0 ] || fail "bench --model: exit $rc: $(tail -5 eng.err)"
file=$(ls eng/bench-*.ini 2>/dev/null)
[ -f "$file" ] || fail "bench --model: no suite next to the database: $(ls eng)"
db=eng/e.db
got=$(q $db "select s.status, b.label, b.plugin, c.status, c.prompt_tokens, c.max_new_tokens, c.batch, s.suite_path
             from session s join backend b on b.session_id = s.id join bench_case c on c.backend_id = b.id")
[ "$got" = "completed|ar|ar|ok|8|4|1|$tmp/$file" ] || fail "bench --model: $got"
[ "$(q $db 'select suite_text from session')" = "$(printf '# ---- %s\n' "$tmp/$file"; cat "$file")" ] \
    || fail "bench --model: the stored suite text"
grep -q ' bench --model ' <<<"$(q $db 'select command_line from session')" || fail "bench --model: the command line"
pass "bench --model small-llama --plugin ar: one case ok, stored with its suite"

[ -e "$TOKBENCH_DB" ] && fail "a command with --db wrote \$TOKBENCH_DB"
tb_finish
