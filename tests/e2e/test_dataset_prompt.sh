#!/usr/bin/env bash
# Issue 39 item 7 (the prompt column): a case of plugins/http with a
# `dataset` sends the dataset's prompts, whatever the matrix's
# prompt_tokens (128 by default) says. show, run, compare, history and
# the Markdown report show "dataset NAME, mean M" in the prompt column,
# M the measured mean prompt length (metric prompt_len, from
# request.prompt_tokens); show checked on a pseudo-terminal at 80 and 120
# columns. A dataset case stores prompt_tokens 0 (as a prompt set's case;
# a prompt_tokens given to it is refused); a case without a dataset keeps
# its prompt_tokens.
#
# usage: test_dataset_prompt.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
tb_init dataset_prompt "$@"
need_sqlite3
command -v python3 >/dev/null || { echo "SKIP: python3 not installed"; exit 77; }
[ -f "$build/plugins/http/http.so" ] || { echo "SKIP: http plugin not built (libcurl missing)"; exit 77; }
"$tb" serve --help >/dev/null 2>&1 || { echo "SKIP: no tokbench serve (libmicrohttpd missing)"; exit 77; }
export TOKBENCH_PLUGIN_PATH="$build/plugins"
tok="$src/models/small-llama/tokenizer.json"

printf '[suite]\nname = srv\n[backend n]\nplugin = null\nprefill_us = 0\nstep_us = 0\n' >"$tmp/srv.ini"
start_server srv "$tb" serve --backend n "$tmp/srv.ini" --port 0 || exit 1
url="http://127.0.0.1:$port"

printf '%s\n' \
    '{"id": "a", "conversations": [{"from": "human", "value": " the cat sat on the mat"}, {"from": "gpt", "value": " the the"}]}' \
    '{"id": "b", "conversations": [{"from": "human", "value": " of"}, {"from": "gpt", "value": " the the the"}]}' \
    >"$tmp/chat.jsonl"
cat >"$tmp/data.ini" <<SUITE
[suite]
name = data
warmup = 0
repeat = 2
[matrix]
max_new_tokens = 8
requests = 4
[backend ds]
plugin = http
url = $url
tokenizer = $tok
dataset = $tmp/chat.jsonl
unique_prompts = false
[backend synth]
plugin = http
url = $url
tokenizer = $tok
SUITE
for i in 1 2; do
    "$tb" run "$tmp/data.ini" --db "$tmp/d.db" --width 120 >"$tmp/run$i.out" 2>&1 || fail "run $i: exit $?"
done
mean=$(q "$tmp/d.db" "select printf('%.0f', avg(r.prompt_tokens)) from request r join sample s on s.id = r.sample_id
    join bench_case c on c.id = s.case_id join backend b on b.id = c.backend_id
    where b.label = 'ds' and s.warmup = 0 and c.session_id = 2 and r.status = 'ok'")
stored=$(q "$tmp/d.db" "select printf('%.0f', m.mean) from metric m join bench_case c on c.id = m.case_id
    join backend b on b.id = c.backend_id where b.label = 'ds' and c.session_id = 2 and m.name = 'prompt_len'")
[ -n "$mean" ] && [ "$mean" = "$stored" ] || fail "metric prompt_len mean '$stored', the requests' '$mean'"
# a dataset case has no prompt length of its own: 0, as a prompt set's
# case (docs/METRICS.md, prompt_tokens), in the case and the summary view;
# the synthetic one keeps the default 128
got=$(q "$tmp/d.db" "select group_concat(b.label || ':' || c.prompt_tokens, ' ') from bench_case c
    join backend b on b.id = c.backend_id where c.session_id = 2")
[ "$got" = "ds:0 synth:128" ] || fail "bench_case.prompt_tokens: $got, expected ds:0 synth:128"
got=$(q "$tmp/d.db" "select group_concat(backend || ':' || prompt_tokens, ' ') from summary where session = 2")
[ "$got" = "ds:0 synth:128" ] || fail "summary.prompt_tokens: $got, expected ds:0 synth:128"
"$tb" run "$tmp/data.ini" --dry-run >"$tmp/dry.out" 2>&1
grep -qF "#1    dataset=$tmp/chat.jsonl max_new_tokens=8 batch=1 requests=4" "$tmp/dry.out" \
    || fail "--dry-run: the dataset case's label: $(grep '#1' "$tmp/dry.out")"
# a prompt length given to a dataset backend would be ignored: refused;
# in the other backends' sections it is theirs
sed 's/^max_new_tokens = 8$/max_new_tokens = 8\nprompt_tokens = 64/' "$tmp/data.ini" >"$tmp/pt.ini"
"$tb" run "$tmp/pt.ini" --dry-run >"$tmp/pt.out" 2>&1
[ $? = 2 ] && grep -qF "pt.ini:7: prompt_tokens: [backend ds] takes its prompts from dataset = $tmp/chat.jsonl: expected no prompt_tokens for it" "$tmp/pt.out" \
    || fail "prompt_tokens with a dataset: $(cat "$tmp/pt.out")"
printf 'prompt_tokens = 64\n' | cat "$tmp/data.ini" - >"$tmp/pt2.ini"
"$tb" run "$tmp/pt2.ini" --dry-run >"$tmp/pt2.out" 2>&1 || fail "prompt_tokens in [backend synth]: $(cat "$tmp/pt2.out")"
grep -qF "prompt_tokens=64 max_new_tokens=8" "$tmp/pt2.out" || fail "prompt_tokens in [backend synth]: $(grep '#' "$tmp/pt2.out")"
want="dataset chat.jsonl, mean $mean"

grep -qF "$want" "$tmp/run2.out" || fail "run: no '$want' in its table: $(cat "$tmp/run2.out")"
for cols in 80 120; do
    python3 "$src/tests/e2e/pty_run.py" "$cols" "$tmp/show$cols.out" "$tb" show last --db "$tmp/d.db" >/dev/null ||
        fail "show on a $cols-column terminal: exit $?"
    grep -qF "$want" "$tmp/show$cols.out" || fail "show at $cols columns: no '$want': $(cat "$tmp/show$cols.out")"
    # the synthetic backend's row keeps its 128
    grep -E "^ *synth +128 " "$tmp/show$cols.out" >/dev/null || fail "show at $cols columns: synth's prompt 128 lost"
done
"$tb" report last --db "$tmp/d.db" --format md -o "$tmp/r.md" || fail "report md"
grep -qF "$want" "$tmp/r.md" || fail "report md: no '$want'"
"$tb" compare 1 2 --db "$tmp/d.db" >"$tmp/cmp.out" 2>&1
grep -qF "$want" "$tmp/cmp.out" || fail "compare: no '$want': $(cat "$tmp/cmp.out")"
"$tb" history --backend ds --db "$tmp/d.db" >"$tmp/hist.out" 2>&1 || fail "history: exit $?"
grep -qF "$want" "$tmp/hist.out" || fail "history: no '$want': $(cat "$tmp/hist.out")"
[ "$failures" = 0 ] && pass "prompt column of a dataset run: '$want' in run, show (80, 120 columns), report, compare, history"
tb_finish
