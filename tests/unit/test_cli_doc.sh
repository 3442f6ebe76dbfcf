#!/usr/bin/env bash
# docs/CLI.md is what `tokbench help --markdown` prints from the option
# table (cli/options.c): a row changed without regenerating the file, or
# the file edited by hand, fails here with the difference. Regenerate:
#   BUILD/tokbench help --markdown > docs/CLI.md
# The Markdown is the same from every build: it names no install path.
#
# usage: test_cli_doc.sh TOKBENCH DOCS/CLI.md
set -uo pipefail
tb=${1:?usage: test_cli_doc.sh TOKBENCH DOCS/CLI.md}
doc=${2:?usage: test_cli_doc.sh TOKBENCH DOCS/CLI.md}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$tb" help --markdown >"$tmp/cli.md" || fail "tokbench help --markdown: exit $?"
[ -s "$tmp/cli.md" ] || fail "tokbench help --markdown printed nothing"
diff -u "$doc" "$tmp/cli.md" >"$tmp/diff" \
    || fail "$doc differs from \`tokbench help --markdown\` (regenerate it from the table):
$(head -40 "$tmp/diff")"

# The main usage names this build's plugin folder; the Markdown must not.
"$tb" help >"$tmp/usage" || fail "tokbench help: exit $?"
dir=$(tr '\n' ' ' <"$tmp/usage" | sed -n 's/.* the build tree and \(.*\)\. *$/\1/p')
[ -n "$dir" ] || fail "tokbench help does not name the plugin folder: $(tail -3 "$tmp/usage")"
grep -qF "$dir" "$tmp/cli.md" && fail "the Markdown names this build's plugin folder $dir"

echo "PASS: $doc is tokbench help --markdown"
