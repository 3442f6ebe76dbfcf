#!/usr/bin/env bash
# Security (issue 9, part 4), end to end with the real CLI:
#  - plugins load only from named paths or the search folders, never
#    implicitly from the working directory;
#  - a TB_OPTF_SECRET option's value (written in the suite or through
#    ${ENV}) reaches no database row, log line, report or error message;
#  - SQL statements bind their values: a hostile suite name is stored
#    verbatim and drops nothing;
#  - paths in a suite resolve relative to the suite file, and with
#    models_dir set a symbolic link cannot lead a model out of it.
#
# usage: test_security.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
tb_init security "$@"
secret_so="$build/tests/plugins/secret_opt.so"
need_sqlite3

# 1. The working directory is never searched. A "null.so" there (a copy of
# another plugin, so loading it would show in plugin_path and name) must
# not replace the real null plugin, and "plugin = x.so" means next to the
# suite file.
mkdir -p "$tmp/cwd" "$tmp/suites"
cp "$secret_so" "$tmp/cwd/null.so"
cp "$secret_so" "$tmp/cwd/stray.so"
cat >"$tmp/suites/null.ini" <<EOT
[suite]
warmup = 0
repeat = 1
[matrix]
max_new_tokens = 4
[backend a]
plugin = null
EOT
(cd "$tmp/cwd" && env -u TOKBENCH_PLUGIN_PATH "$tb" run "$tmp/suites/null.ini" --db "$tmp/p.db" >/dev/null 2>"$tmp/p.err") \
    || { fail "null suite from another cwd"; cat "$tmp/p.err"; }
path=$(q "$tmp/p.db" "select plugin_path || ' ' || plugin from backend")
case "$path" in
"$tmp/cwd/"*) fail "loaded the working directory's null.so: $path" ;;
*" null") ;;
*) fail "unexpected plugin: $path" ;;
esac
printf '[suite]\nrepeat = 1\n[backend a]\nplugin = stray.so\n' >"$tmp/suites/stray.ini"
(cd "$tmp/cwd" && "$tb" run "$tmp/suites/stray.ini" --db "$tmp/p.db" --dry-run >"$tmp/stray.out" 2>&1) \
    && fail "plugin = stray.so loaded from the working directory"
grep -q "$tmp/suites/stray.so" "$tmp/stray.out" || fail "stray.so not looked for next to the suite: $(cat "$tmp/stray.out")"

# 2. Secrets: in the suite text, through ${ENV}, and in a failing create().
secret='s3cr3t-TOKEN-9f4e'
envsecret='envS3CR3T-77aa21'
cat >"$tmp/suites/secret.ini" <<EOT
[suite]
name = secrets
warmup = 0
repeat = 2
[matrix]
max_new_tokens = 4
[backend literal]
plugin = $secret_so
token = $secret
region = ${secret:0:0}north
[backend from-env]
plugin = $secret_so
token = \${TB_TEST_TOKEN}
[backend short]
plugin = $secret_so
token = x7
EOT
TB_TEST_TOKEN=$envsecret "$tb" run "$tmp/suites/secret.ini" --db "$tmp/s.db" >"$tmp/s.out" 2>"$tmp/s.err"
[ $? = 1 ] || fail "secret suite: expected exit 1 (the 'short' backend fails its case)"
[ "$(q "$tmp/s.db" "select count(*) from bench_case where status = 'ok'")" = 2 ] || fail "secret suite: 2 ok cases expected"
"$tb" report --db "$tmp/s.db" --last --format md -o "$tmp/r.md" 2>>"$tmp/s.err"
"$tb" report --db "$tmp/s.db" --last --format html -o "$tmp/r.html" 2>>"$tmp/s.err"
"$tb" export 1 --db "$tmp/s.db" --format json -o "$tmp/r.json" 2>>"$tmp/s.err"
"$tb" show 1 --db "$tmp/s.db" >"$tmp/show.out" 2>>"$tmp/s.err"
sqlite3 "$tmp/s.db" .dump >"$tmp/dump.sql"
for f in "$tmp/s.out" "$tmp/s.err" "$tmp/r.md" "$tmp/r.html" "$tmp/r.json" "$tmp/show.out" "$tmp/dump.sql" "$tmp/s.db" "$tmp/s.db-wal"; do
    [ -f "$f" ] || continue
    grep -aq -e "$secret" -e "$envsecret" -e "token = x7" "$f" && fail "a secret leaked into $(basename "$f")"
done
grep -q '"token":"(secret)"' "$tmp/dump.sql" || fail "options_json does not show the secret as (secret)"
grep -q 'token = (secret)' "$tmp/dump.sql" || fail "the stored suite text does not redact the token line"
grep -q '"region":"north"' "$tmp/dump.sql" || fail "an ordinary option was redacted"

# The http backend's own secrets (api_key, secret_headers), against a port
# where nothing listens: every request fails to connect, nothing leaks.
if [ -f "$build/plugins/http/http.so" ]; then
    hsecret='hTTp-K3Y-0042xyz'
    cat >"$tmp/suites/http-secret.ini" <<EOT
[suite]
warmup = 0
repeat = 1
case_timeout = 30
[matrix]
prompt_tokens = 4
max_new_tokens = 4
[backend remote]
plugin = http
preflight = false   ; the requests' own errors
url = http://127.0.0.1:9
api_key = $hsecret
secret_headers = {"X-Api-Key": "$hsecret-2"}
connect_timeout = 2
EOT
    "$tb" run "$tmp/suites/http-secret.ini" --db "$tmp/h.db" >"$tmp/h.out" 2>"$tmp/h.err"
    "$tb" report --db "$tmp/h.db" --last --format json -o "$tmp/h.json" 2>>"$tmp/h.err"
    sqlite3 "$tmp/h.db" .dump >"$tmp/h.sql"
    [ "$(q "$tmp/h.db" "select count(*) from request where error like 'connect:%'")" -ge 1 ] \
        || fail "http secrets: the requests should fail to connect: $(q "$tmp/h.db" "select error from bench_case")"
    for f in "$tmp/h.out" "$tmp/h.err" "$tmp/h.json" "$tmp/h.sql"; do
        grep -aq "$hsecret" "$f" && fail "the http api_key leaked into $(basename "$f")"
    done
    grep -q '"api_key":"(secret)"' "$tmp/h.sql" || fail "http api_key not shown as (secret)"
fi

# 3. Bound parameters: a hostile suite name is data.
evil="x'); drop table sample;--"
printf '[suite]\nname = %s\nwarmup = 0\nrepeat = 1\n[matrix]\nmax_new_tokens = 4\n[backend a]\nplugin = null\n' "$evil" >"$tmp/suites/evil.ini"
"$tb" run "$tmp/suites/evil.ini" --db "$tmp/e.db" >/dev/null 2>&1 || fail "evil suite did not run"
[ "$(q "$tmp/e.db" "select suite_name from session")" = "$evil" ] || fail "suite name not stored verbatim"
[ "$(q "$tmp/e.db" "select count(*) from sample")" = 1 ] || fail "sample table damaged"
"$tb" history --db "$tmp/e.db" --backend "a' or '1'='1" >/dev/null 2>&1
[ "$(q "$tmp/e.db" "select count(*) from sample")" = 1 ] || fail "history with a hostile label changed the database"

# 4. models_dir: a symbolic link out of it is refused; inside is fine.
mkdir -p "$tmp/models/real"
cp -r "$src/models/tiny-llama-random/." "$tmp/models/real/"
ln -s "$src/models/tiny-llama-random" "$tmp/models/escape"
for m in real escape; do
    printf '[suite]\nrepeat = 1\nmodels_dir = ../models\n[matrix]\nmax_new_tokens = 4\n[backend a]\nplugin = null\nmodel = ../models/%s\n' "$m" >"$tmp/suites/m-$m.ini"
done
"$tb" run "$tmp/suites/m-real.ini" --dry-run >/dev/null 2>"$tmp/m.err" || fail "a model inside models_dir refused: $(cat "$tmp/m.err")"
"$tb" run "$tmp/suites/m-escape.ini" --dry-run >"$tmp/m.out" 2>&1 && fail "a symlink out of models_dir accepted"
grep -q "m-escape.ini:8: model: .*outside models_dir" "$tmp/m.out" || fail "models_dir error: $(cat "$tmp/m.out")"

tb_finish
