#!/usr/bin/env bash
# Issue 38 item 7: a WAL database with a -wal file but no -shm, in a
# folder the reader cannot write, is read, committed -wal content
# included (SQLite cannot open it read-only: wal.html, "Read-Only
# Databases"; tokbench reads a private copy), and nothing beside it
# changes. Run as root, the reader is another user (setpriv), as in
# test_ux.sh.
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
tb_init ro_wal "$@"
need_sqlite3
as_reader() { "$@"; }
if [ "$(id -u)" = 0 ]; then
    command -v setpriv >/dev/null || { echo "SKIP: root without setpriv"; exit 77; }
    as_reader() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
fi
cat >"$tmp/s.ini" <<'INI'
[suite]
name = walsuite
warmup = 0
repeat = 1
[matrix]
prompt_tokens = 8
max_new_tokens = 4
[backend n]
plugin = null
INI
mkdir "$tmp/ro"
"$tb" run "$tmp/s.ini" --db "$tmp/w.db" >/dev/null 2>&1 || fail "run"
# a change committed to the -wal only, copied with the database while the
# connection that made it is open (no checkpoint yet), without the -shm
python3 - "$tmp/w.db" "$tmp/ro/w.db" <<'PY' || fail "setup: no -wal file"
import shutil, sqlite3, sys
c = sqlite3.connect(sys.argv[1])
c.execute("pragma wal_autocheckpoint = 0")
c.execute("update session set suite_name = 'in-the-wal'")
c.commit()
shutil.copy(sys.argv[1], sys.argv[2])
shutil.copy(sys.argv[1] + "-wal", sys.argv[2] + "-wal")
PY
[ -s "$tmp/ro/w.db-wal" ] || fail "setup: no -wal file left"
chmod 755 "$tmp" && chmod 555 "$tmp/ro" && chmod 444 "$tmp/ro/w.db" "$tmp/ro/w.db-wal"
before=$(cd "$tmp/ro" && sha256sum w.db w.db-wal)
as_reader "$tb" sessions --db "$tmp/ro/w.db" >"$tmp/out" 2>"$tmp/err" || fail "sessions: $(cat "$tmp/err")"
grep -q 'in-the-wal' "$tmp/out" || fail "sessions: the -wal's content not read: $(cat "$tmp/out" "$tmp/err")"
as_reader "$tb" export last --format csv --db "$tmp/ro/w.db" >"$tmp/csv" 2>"$tmp/err" || fail "export: $(cat "$tmp/err")"
[ "$(cd "$tmp/ro" && sha256sum w.db w.db-wal)" = "$before" ] || fail "a reader changed the files"
[ "$(ls "$tmp/ro")" = "$(printf 'w.db\nw.db-wal')" ] || fail "a reader left files: $(ls "$tmp/ro")"
chmod 755 "$tmp/ro"
[ $failures = 0 ] && pass "a read-only WAL database without its -shm is read, the -wal's content included, unchanged"
tb_finish
