#!/usr/bin/env bash
# The command line as its table (cli/options.c) declares it, checked on
# the tokbench binary without a database: every command answers --help
# (and `help COMMAND`) with its usage; a command refuses an option it
# does not take, a value outside an option's range or choices, a
# multi-value option given too few values and a missing required option,
# each with exit 2 and a message that names the option; an alias choice
# is accepted (the command then gets as far as the database: exit 1;
# that it means its choice, e2e test_report.sh checks).
#
# usage: test_cli_parse.sh TOKBENCH
set -uo pipefail
tb=$(realpath "${1:?usage: test_cli_parse.sh TOKBENCH}") # the test runs in a folder of its own
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
export TOKBENCH_DB="$tmp/none.db" # readers never create it: exit 1
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# expect RC STDERR-SUBSTRING ARGS...: exit status RC and stderr holding
# the substring ("" for any)
expect() {
    local rc=$1 want=$2
    shift 2
    "$tb" "$@" >out 2>err
    local got=$?
    [ "$got" = "$rc" ] || { fail "tokbench $*: exit $got, expected $rc: $(head -3 err)"; return; }
    [ -z "$want" ] || grep -qF -- "$want" err || fail "tokbench $*: stderr lacks '$want': $(head -3 err)"
}

# every command of the main usage answers --help on stdout, as help COMMAND does
"$tb" help >usage || fail "tokbench help: exit $?"
cmds=$(sed -n '/^commands:/,/^$/p' usage | awk '/^  [a-z]/ {print $1}')
[ "$(echo "$cmds" | wc -l)" -ge 10 ] || fail "the main usage lists $(echo "$cmds" | wc -l) commands: $cmds"
for c in $cmds; do
    "$tb" "$c" --help >h1 2>&1 || fail "$c --help: exit $?"
    grep -q "^usage: tokbench $c" h1 || fail "$c --help: $(head -1 h1)"
    "$tb" help "$c" >h2 || fail "help $c: exit $?"
    cmp -s h1 h2 || fail "help $c differs from $c --help"
done
"$tb" -h | cmp -s - usage || fail "tokbench -h is not tokbench help"

# an option of another command: getopt's message and the usage, exit 2
expect 2 "unrecognized option '--dry-run'" sessions --dry-run
grep -q '^usage: tokbench sessions' err || fail "sessions --dry-run: no usage on stderr"
expect 2 "unrecognized option '--port'" show --port 1
# serve is there only with libmicrohttpd: before parsing, it says so (exit 1)
have_serve=0
"$tb" serve --help >/dev/null 2>&1 && have_serve=1
[ $have_serve = 0 ] || expect 2 "unrecognized option '--db'" serve --db x --backend b s.ini

# ranges: integers and doubles, closed and open bounds, not a number
expect 2 "tokbench sessions: --limit abc: expected a count in [0, " sessions --limit abc
expect 2 "--width 19: expected a width in characters in [20, 100000]" show --width 19
expect 1 "" show --width 20
expect 2 "--alpha 1: expected a level in (0, 1)" compare 1 2 --alpha 1
expect 2 "--alpha 0: expected a level in (0, 1)" compare 1 2 --alpha 0
expect 1 "" compare 1 2 --alpha 0.999
expect 2 "--fail-if-slower -1: expected a percentage >= 0" compare 1 2 --fail-if-slower -1
expect 2 "--load-timeout 0: expected seconds in (0, 86400]" plugins --load-timeout 0
expect 2 "--max-error-rate nan: expected a fraction in [0, 1]" run x.ini --max-error-rate nan
[ $have_serve = 0 ] || expect 2 "--port 65536: expected a port in [0, 65535]" serve --backend b --port 65536 s.ini
[ $have_serve = 0 ] || expect 2 "--batching fast: expected continuous or static" serve --backend b --batching fast s.ini
[ $have_serve = 0 ] || expect 2 "tokbench serve: --backend LABEL is required" serve s.ini

# choices: the command's own set, an alias
expect 2 "tokbench report: --format pdf: expected md, html, csv or json" report --format pdf
expect 2 "--format md: expected csv, json, aiperf or vllm" export 1 --format md
expect 2 "--format json: expected text, csv or html" history --backend b --format json
expect 1 "no such database" report --format markdown
expect 1 "no such database" export 1 --format json

# required options, multi-value options
expect 2 "tokbench export: --format csv|json|aiperf|vllm is required" export 1
expect 2 "tokbench history: --backend LABEL is required" history
expect 2 "--backends takes 2 labels: --backends X Y" compare 1 --backends x
expect 2 "--backends takes 2 labels: --backends X Y" compare 1 --backends x y --backends z
expect 1 "no such database" compare 1 --backends x y
expect 1 "no such database" compare 1 2 --backends x y

# positional arguments and commands
expect 2 "usage: tokbench show" show a b
expect 2 "tokbench: unknown command \"nosuch\"" nosuch
expect 2 "tokbench: unknown command \"nosuch\"" help nosuch

[ $failures = 0 ] || { echo "$failures failures"; exit 1; }
echo "PASS"
