#!/usr/bin/env bash
# test_plugin_symbols.sh NM PLUGIN.so...
#
# Proves docs/PLUGINS.md's rule for every shipped plugin: a backend's .so
# exports exactly one symbol, tokbench_backend_entry, a function. Anything
# else in its dynamic symbol table (engine helpers, CUDA stubs, a static
# library's functions) could clash with another plugin's or the host's.
#
# The linker's own boundary symbols (_init, _fini, _edata, _end,
# __bss_start), which some toolchains add to every shared object, are not
# the plugin's and are ignored.
#
# Exit status: 0 pass, 1 fail.
set -uo pipefail

nm=${1:?usage: test_plugin_symbols.sh NM PLUGIN.so...}
shift
[ $# -gt 0 ] || { echo "FAIL: no plugin given" >&2; exit 1; }

bad=0
for so in "$@"; do
    if [ ! -f "$so" ]; then
        echo "FAIL: $so: no such file" >&2
        bad=1
        continue
    fi
    # POSIX format: NAME TYPE VALUE SIZE, one a line
    if ! syms=$("$nm" -D --defined-only -P "$so"); then
        echo "FAIL: $so: $nm failed" >&2
        bad=1
        continue
    fi
    exported=$(printf '%s\n' "$syms" | awk 'NF && $1 !~ /^(_init|_fini|_edata|_end|__bss_start)$/ { print $1, $2 }')
    if [ "$exported" != "tokbench_backend_entry T" ]; then
        n=$(printf '%s\n' "$exported" | grep -c .)
        echo "FAIL: $so exports $n symbols, expected only tokbench_backend_entry (T):" >&2
        printf '%s\n' "$exported" | head -20 | sed 's/^/    /' >&2
        bad=1
    else
        echo "ok: $so exports only tokbench_backend_entry"
    fi
done
exit $bad
