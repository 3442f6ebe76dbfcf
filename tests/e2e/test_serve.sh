#!/usr/bin/env bash
# End to end: `tokbench serve` on the trained small models shipped in
# models/ (as suites/quick.ini configures them), checked over HTTP:
#   1. tests/serve_api.py: the answer text (never the EOS text), usage and
#      finish_reason, streamed or not, on both endpoints; the diffusion
#      canvas rounded up to whole blocks; stop, seed and temperature
#      honoured; n, logprobs and unknown fields refused with 400 naming
#      the field; an unknown model 404; a request beyond the context 400
#      before any work; the chat templates (ChatML, Llama-3.1) applied,
#      judged by usage.prompt_tokens against the template's own text;
#      usage.prompt_tokens and vllm:prompt_tokens_total count the BOS
#      where the backend adds one (tiny-llama-random), as the context
#      check does;
#   2. accuracy through HTTP = accuracy in-process: the quick suite's task
#      set (suites/data/tasks.jsonl, the quick scorer setup) run on the AR
#      model in-process and through plugins/http against the server; each
#      run's accuracy lies in the other's 95% interval, and every item's
#      answer text is the same;
#   3. batching: continuous for the ar backend, the static fallback for
#      the null one, --batching static; concurrent answers = answers alone.
#
# usage: test_serve.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
tb_init serve "$@"
need_sqlite3
command -v python3 >/dev/null || { echo "SKIP: python3 not installed"; exit 77; }
[ -f "$build/plugins/ar/ar.so" ] || { echo "SKIP: no engine plugins in this build"; exit 77; }
[ -f "$build/plugins/http/http.so" ] || { echo "SKIP: http plugin not built (libcurl missing)"; exit 77; }
"$tb" serve --help >/dev/null 2>&1 || { echo "SKIP: no tokbench serve (libmicrohttpd missing)"; exit 77; }
export TOKBENCH_PLUGIN_PATH="$build/plugins"

# serve_backend NAME SUITE LABEL: serve in the background on a free port;
# sets $port (empty when it did not start).
serve_backend() { start_server "$1" "$tb" serve --backend "$3" "$2" --port 0; }

# Model folders with a chat template: the small Llama's files and a
# tokenizer_config.json (its tokenizer lacks the templates' special
# tokens, so they are plain text to it: prompt_tokens still tells
# whether the template's text was the prompt).
for fam in chatml llama3; do
    mkdir -p "$tmp/$fam"
    for f in config.json generation_config.json model.safetensors tokenizer.json; do
        ln -s "$src/models/small-llama/$f" "$tmp/$fam/$f"
    done
done
python3 - "$tmp" <<'EOF'
import json, sys
qwen2 = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
         "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
         "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
         "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
llama31 = ("{{- bos_token }}\n{%- if not date_string is defined %}\n    {%- set date_string = \"26 Jul 2024\" %}\n"
           "{%- endif %}\n{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}\n"
           "{{- \"Cutting Knowledge Date: December 2023\\n\" }}\n{{- \"Today Date: \" + date_string + \"\\n\\n\" }}\n"
           "{{- system_message }}\n{{- \"<|eot_id|>\" }}\n{%- for message in messages %}"
           "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + "
           "'<|eot_id|>' }}{%- endfor %}")
for fam, t in (("chatml", qwen2), ("llama3", llama31)):
    json.dump({"chat_template": t, "eos_token": "<|endoftext|>"}, open("%s/%s/tokenizer_config.json" % (sys.argv[1], fam), "w"))
EOF

# The quick suite's two backends (threads 1: the machine is shared), a
# null one (no sampling options) and the two templated copies.
cat >"$tmp/serve.ini" <<EOF
[suite]
name = serve-e2e
seed = 42
[matrix]
max_new_tokens = 16
steps = 2
[backend ar-small]
plugin = ar
model = $src/models/small-llama
ignore_eos = false
threads = 1
[backend llada-small]
plugin = diffusion
model = $src/models/small-llada
sampler = low_confidence
block_length = 16
threads = 1
[backend null]
plugin = null
step_us = 100
[backend tiny]
plugin = ar
model = $src/models/tiny-llama-random
threads = 1
[backend chatml]
plugin = ar
model = $tmp/chatml
ignore_eos = false
threads = 1
[backend llama3]
plugin = ar
model = $tmp/llama3
ignore_eos = false
threads = 1
EOF
declare -A P
for b in ar-small llada-small null chatml llama3 tiny; do
    serve_backend "$b" "$tmp/serve.ini" "$b"
    P[$b]=$port
done
grep -q "chat template: ChatML" "$tmp/chatml.log" || fail "chatml: $(grep 'chat template' "$tmp/chatml.log")"
grep -q "chat template: Llama-3.1" "$tmp/llama3.log" || fail "llama3: $(grep 'chat template' "$tmp/llama3.log")"

# ------------------------------------------------------------------ 1
if python3 "$src/tests/e2e/serve_api.py" "${P[ar-small]}" "${P[llada-small]}" "${P[null]}" "${P[chatml]}" "${P[llama3]}" \
    "${P[tiny]}" "$src/suites/data/tasks.jsonl" "$src/suites/data/text.jsonl" >"$tmp/api.out" 2>&1; then
    pass "serve API: $(grep -c '^ok:' "$tmp/api.out") checks"
else
    grep -v '^ok:' "$tmp/api.out"
    fail "serve API: $(grep -c '^FAIL' "$tmp/api.out") checks failed"
fi

# ------------------------------------------------------------------ 2
# The same model, prompts and scorer in-process and through HTTP.
cat >"$tmp/acc.ini" <<EOF
[suite]
name = serve-accuracy
warmup = 0
repeat = 1
seed = 42
case_timeout = 300
[matrix]
max_new_tokens = 16
[prompts]
file = $src/suites/data/tasks.jsonl
scorer = exact
[backend in-process]
plugin = ar
model = $src/models/small-llama
ignore_eos = false
threads = 1
batch = 8
[backend via-http]
plugin = http
url = http://127.0.0.1:${P[ar-small]}
model_name = ar-small
tokenizer = $src/models/small-llama/tokenizer.json
concurrency = 4
EOF
if "$tb" run "$tmp/acc.ini" --db "$tmp/acc.db" >"$tmp/acc.out" 2>"$tmp/acc.err"; then
    pass "accuracy suite ran"
else
    fail "accuracy suite: exit $?"; cat "$tmp/acc.err"; tail -20 "$tmp/acc.out"
fi
acc() { # LABEL -> "median ci_lo ci_hi n"
    q "$tmp/acc.db" "select m.median || ' ' || m.ci_lo || ' ' || m.ci_hi from metric m join bench_case c on c.id = m.case_id
      join backend b on b.id = c.backend_id where b.label = '$1' and m.name = 'accuracy'"
}
read -r a_med a_lo a_hi <<<"$(acc in-process)"
read -r h_med h_lo h_hi <<<"$(acc via-http)"
echo "accuracy in-process ${a_med:-none} [${a_lo:-}, ${a_hi:-}], through serve + http ${h_med:-none} [${h_lo:-}, ${h_hi:-}]"
if [ -n "${a_med:-}" ] && [ -n "${h_med:-}" ] &&
    awk -v a="$a_med" -v al="$a_lo" -v ah="$a_hi" -v h="$h_med" -v hl="$h_lo" -v hh="$h_hi" \
        'BEGIN { exit !(a > 0.5 && h >= al && h <= ah && a >= hl && a <= hh) }'; then
    pass "accuracy through HTTP $h_med is within in-process's 95% interval [$a_lo, $a_hi] (and the reverse)"
else
    fail "accuracy through HTTP ${h_med:-none} vs in-process ${a_med:-none} [${a_lo:-}, ${a_hi:-}]"
fi
[ "$(q "$tmp/acc.db" "select count(*) from request where scored = 1")" = 320 ] \
    || fail "expected 160 scored requests per backend: $(q "$tmp/acc.db" "select count(*) from request where scored = 1")"
differ=$(q "$tmp/acc.db" "select count(*) from (select r.prompt_idx, count(distinct r.output_text) k, count(*) n
  from request r where r.scored = 1 group by r.prompt_idx) where k <> 1 or n <> 2")
[ "$differ" = 0 ] && pass "every item's answer text is the same in-process and through HTTP" \
    || fail "$differ items answered differently through HTTP: $(q "$tmp/acc.db" "select r.prompt_idx, b.label, quote(r.output_text) from request r join sample s on s.id = r.sample_id join bench_case c on c.id = s.case_id join backend b on b.id = c.backend_id where r.scored = 1 and r.prompt_idx in (select prompt_idx from request where scored = 1 group by prompt_idx having count(distinct output_text) > 1) order by r.prompt_idx limit 6")"
[ "$(q "$tmp/acc.db" "select count(*) from request where output_text like '%<|endoftext|>%'")" = 0 ] \
    || fail "the EOS text reached stored answers"

# ------------------------------------------------------------------ 3
# Batching: the ar backend is served continuously (its step ops), the null
# backend (none) falls back to static batches, and --batching static is
# honoured; concurrent requests of mixed lengths, stop sequences and
# streaming get the answers they get alone, in both modes
# (tests/serve_concurrent.py). That a short request that joins a running
# batch ends first is counted in steps in tests/test_ar_step.c.
grep -q "continuous batching" "$tmp/ar-small.log" || fail "ar-small: $(grep listening "$tmp/ar-small.log")"
grep -q "plugin null has no step ops: static batches" "$tmp/null.log" \
    || fail "null: no fallback line: $(tail -3 "$tmp/null.log")"
"$tb" serve --backend ar-small "$tmp/serve.ini" --port 0 --port-file "$tmp/static.port" --batching static \
    >"$tmp/static.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 600); do [ -s "$tmp/static.port" ] && break; sleep 0.1; done
grep -q "static batching" "$tmp/static.log" || fail "--batching static: $(grep listening "$tmp/static.log")"
for mode in continuous static; do
    p=${P[ar-small]}
    [ $mode = static ] && p=$(cat "$tmp/static.port" 2>/dev/null)
    if python3 "$src/tests/e2e/serve_concurrent.py" "${p:-0}" "$src/suites/data/tasks.jsonl" >"$tmp/conc.out" 2>&1; then
        pass "$mode batching: $(tail -1 "$tmp/conc.out")"
    else
        cat "$tmp/conc.out"
        fail "$mode batching: concurrent answers differ from the answers alone"
    fi
done

tb_finish
