#!/usr/bin/env bash
# End to end: one number cannot ask for unbounded work (issue 38 item 9).
# Each is refused at suite load, `run --dry-run` included, at the
# backend's file:line with the limit named; nothing is allocated or run:
#   http  prefix_tokens = 1000000000, prompt_max = 1000000000 (uniform
#         prompts), prompt_tokens = 1000000000: over
#         TB_HTTP_MAX_PROMPT_TOKENS; 4,096 requests of 131,072-token
#         prompts: over TB_HTTP_MAX_CALL_PROMPT_TOKENS; a prompt at the
#         limit is accepted;
#   diffusion  LLaDA (low_confidence) steps = 1000000000 for 64 tokens:
#         more steps than gen_length (a step commits at least one token);
#   flow  steps = 1000000000: over FLOW_MAX_STEPS;
#   ar    tp = 2 on device = cpu: tensor parallelism runs on GPUs (it
#         failed only at create()).
#
# usage: test_bounds.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
tb_init bounds "$@"

# refused NAME PATTERN: `run --dry-run` of $tmp/NAME.ini exits 2 with an
# error line matching PATTERN (grep -E) at the backend's line 8
refused() {
    "$tb" run "$tmp/$1.ini" --db "$tmp/$1.db" --dry-run >"$tmp/$1.out" 2>"$tmp/$1.err"
    local rc=$?
    [ $rc = 2 ] && pass "$1: refused at --dry-run (exit 2)" || { fail "$1: exit $rc, expected 2: $(cat "$tmp/$1.err")"; return; }
    grep -Eq "^$tmp/$1.ini:8: backend: .*$2" "$tmp/$1.err" && pass "$1: the error names the line and the limit" \
        || fail "$1: error is: $(cat "$tmp/$1.err")"
}

# suite NAME PLUGIN [KEY = VALUE]...: a one-backend suite (its line 8 the
# backend's section), its extra lines into the backend
suite() {
    local name=$1 plugin=$2
    shift 2
    {
        printf '[suite]\nrepeat = 1\nwarmup = 0\n[matrix]\nprompt_tokens = 8\nmax_new_tokens = 64\n'
        printf '; the backend is at line 8\n[backend b]\nplugin = %s\n' "$plugin"
        printf '%s\n' "$@"
    } >"$tmp/$name.ini"
}

http="$build/plugins/http/http.so"
if [ -f "$http" ]; then
    url="url = http://127.0.0.1:9/v1" # never reached: nothing runs
    suite prefix "$http" "$url" "prefix_groups = 1" "prefix_tokens = 1000000000"
    refused prefix "prompts of up to 1000000008 tokens .*more than 2097152, the longest prompt tokbench makes \(TB_HTTP_MAX_PROMPT_TOKENS\)"
    suite prompt_max "$http" "$url" "prompt_dist = uniform" "prompt_max = 1000000000"
    refused prompt_max "prompts of up to 1000000000 tokens .*\(TB_HTTP_MAX_PROMPT_TOKENS\)"
    suite prompt_tokens "$http" "$url" "prompt_tokens = 1000000000"
    refused prompt_tokens "prompts of up to 1000000000 tokens .*\(TB_HTTP_MAX_PROMPT_TOKENS\)"
    suite call "$http" "$url" "prompt_tokens = 131072" "requests = 4096" "concurrency = 64"
    refused call "4096 requests of prompts up to 131072 tokens: more than 268435456 prompt tokens in one call.*\(TB_HTTP_MAX_CALL_PROMPT_TOKENS\)"
    suite at_limit "$http" "$url" "prompt_tokens = 2097152"
    "$tb" run "$tmp/at_limit.ini" --db "$tmp/at_limit.db" --dry-run >"$tmp/at_limit.out" 2>"$tmp/at_limit.err" \
        && pass "a prompt at TB_HTTP_MAX_PROMPT_TOKENS: accepted" || fail "a prompt at the limit: $(cat "$tmp/at_limit.err")"
else
    echo "skip: http plugin not built"
fi

dllm="$build/plugins/diffusion/diffusion.so"
if [ -f "$dllm" ]; then
    suite llada "$dllm" "model = $src/models/tiny-llada-random" "sampler = low_confidence" "steps = 1000000000"
    refused llada "steps 1000000000 exceeds gen_length 64 \(max_new_tokens\): a step commits at least one token"
    suite llada_tp "$dllm" "model = $src/models/tiny-llada-random" "device = cpu" "tp = 2"
    refused llada_tp "tp = 2: tensor parallelism runs on GPUs; set device = cuda"
fi

flow="$build/plugins/flow/flow.so"
if [ -f "$flow" ]; then
    suite flow "$flow" "model = $src/models/tiny-flow-random" "steps = 1000000000"
    refused flow "steps 1000000000: more than 65536, the most the flow sampler takes \(FLOW_MAX_STEPS\)"
fi

ar="$build/plugins/ar/ar.so"
if [ -f "$ar" ]; then
    suite ar_tp "$ar" "model = $src/models/tiny-llama-random" "device = cpu" "tp = 2"
    refused ar_tp "tp = 2: tensor parallelism runs on GPUs; set device = cuda"
fi

tb_finish
