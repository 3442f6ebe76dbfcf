#!/usr/bin/env bash
# End to end: `tokbench serve` on the trained small AR model (models/
# small-llama, as suites/quick.ini configures it) through the official
# OpenAI Node SDK, the `openai` package pinned in tests/node/package-lock.json
# (tests/node/openai_sdk.mjs): completions and chat completions, streamed
# and not; clean text, usage, finish_reason stop/length (streamed with
# stream_options.include_usage too), and the SDK's own errors for what
# serve refuses (400 BadRequestError: n, logprobs; 404 NotFoundError: an
# unknown model).
#
# Node and the SDK are dependencies like any other: `./dev.sh test`
# installs nodejs and npm (apt) and runs `npm ci` in tests/node. Without
# them this test FAILS, saying so; set TOKBENCH_NO_NODE=1 to skip it
# instead (exit 77) on a machine that cannot have them.
#
# usage: test_openai_node.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
# sourced without dirname: the self-check below runs this script with no PATH
. "${BASH_SOURCE[0]%/*}/../lib.sh"
tb_paths openai_node "$@"
if [ "${TOKBENCH_NO_NODE:-0}" = 1 ]; then
    echo "SKIP: TOKBENCH_NO_NODE=1 (the OpenAI Node SDK test is switched off)"
    exit 77
fi
[ -f "$build/plugins/ar/ar.so" ] || { echo "SKIP: no engine plugins in this build"; exit 77; }
"$tb" serve --help >/dev/null 2>&1 || { echo "SKIP: no tokbench serve (libmicrohttpd missing)"; exit 77; }

# Node and the pinned SDK: missing is a failure, not a skip (checked here
# first: this script without node on its PATH must exit 1 naming
# ./dev.sh test, and 77 with TOKBENCH_NO_NODE=1).
if [ -z "${TB_NODE_SELF_CHECK:-}" ]; then
    out=$(TB_NODE_SELF_CHECK=1 PATH=/nonexistent "$BASH" "$0" "$@" 2>&1)
    rc=$?
    { [ $rc = 1 ] && grep -q "not installed" <<<"$out" && grep -q "run ./dev.sh test" <<<"$out"; } ||
        { echo "FAIL: without node: exit $rc, not 1 with the install hint: $out"; exit 1; }
    TOKBENCH_NO_NODE=1 TB_NODE_SELF_CHECK=1 "$BASH" "$0" "$@" >/dev/null 2>&1
    rc=$?
    [ $rc = 77 ] || { echo "FAIL: TOKBENCH_NO_NODE=1: exit $rc, not 77 (skipped)"; exit 1; }
    echo "ok: without node the test fails, naming ./dev.sh test; TOKBENCH_NO_NODE=1 skips it"
fi
missing() {
    echo "FAIL: $*"
    echo "      run ./dev.sh test: it installs Node.js and npm and runs npm ci in tests/node (the README's test command);"
    echo "      or by hand: apt-get install nodejs npm && (cd tests/node && npm ci --no-audit --no-fund);"
    echo "      TOKBENCH_NO_NODE=1 skips this test instead"
    exit 1
}
node=$(command -v node || command -v nodejs) || missing "Node.js (node) is not installed"
major=$("$node" -p 'process.versions.node.split(".")[0]' 2>/dev/null)
[ "${major:-0}" -ge 18 ] 2>/dev/null || missing "Node.js $("$node" --version 2>&1) is older than 18"
pinned=$("$node" -p 'require(process.argv[1]).packages["node_modules/openai"].version' \
    "$src/tests/node/package-lock.json" 2>/dev/null) || missing "tests/node/package-lock.json does not pin openai"
installed=$("$node" -p 'require(process.argv[1]).version' "$src/tests/node/node_modules/openai/package.json" 2>/dev/null) ||
    missing "the OpenAI Node SDK (npm package openai $pinned) is not installed in tests/node/node_modules"
[ "$installed" = "$pinned" ] || missing "tests/node/node_modules has openai $installed, the lock pins $pinned"

tb_tmp openai_node

# The quick suite's AR backend (threads 1: the machine is shared).
cat >"$tmp/serve.ini" <<EOF
[suite]
name = openai-node
seed = 42
[matrix]
max_new_tokens = 16
[backend ar-small]
plugin = ar
model = $src/models/small-llama
ignore_eos = false
threads = 1
EOF
# A free port: the kernel's (--port 0), written to --port-file once
# listening (lib.sh's start_server: no time bound of ours beyond the
# server process being alive; meson's timeout is the backstop).
export TOKBENCH_PLUGIN_PATH="$build/plugins"
start_server serve "$tb" serve --backend ar-small "$tmp/serve.ini" --port 0 || exit 1

if (cd "$src/tests/node" && "$node" openai_sdk.mjs "$port" ar-small "$src/suites/data/tasks.jsonl" \
    "$src/suites/data/text.jsonl" "$src/models/small-llama/tokenizer.json") >"$tmp/sdk.out" 2>&1; then
    head -1 "$tmp/sdk.out"
    echo "ok: OpenAI Node SDK: $(grep -c '^ok:' "$tmp/sdk.out") checks"
    echo "PASS"
else
    cat "$tmp/sdk.out"
    echo "--- server log"
    tail -20 "$tmp/serve.log"
    echo "FAIL: OpenAI Node SDK: $(grep -c '^FAIL' "$tmp/sdk.out") checks failed"
    exit 1
fi
