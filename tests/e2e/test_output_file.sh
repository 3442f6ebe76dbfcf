#!/usr/bin/env bash
# Issue 38 item 11: `report`/`export -o PATH` write a regular file through
# a temporary file renamed over it, and write anything else (a symlink, a
# FIFO, a device) in place: a failed write removes nothing it did not
# create. A full stdout (/dev/full) is an error (exit 1), for every
# format.
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
tb_init output_file "$@"
need_sqlite3
cat >"$tmp/s.ini" <<'INI'
[suite]
name = out
warmup = 0
repeat = 1
[matrix]
prompt_tokens = 8
max_new_tokens = 4
[backend n]
plugin = null
INI
db="$tmp/o.db"
"$tb" run "$tmp/s.ini" --db "$db" >/dev/null 2>&1 || fail "run"

# --- a full stdout: exit 1, for every format of report and export
for f in md html csv json; do
    "$tb" report --db "$db" --format $f >/dev/full 2>"$tmp/err"
    rc=$?
    [ $rc = 1 ] && grep -q 'write failed' "$tmp/err" || fail "report --format $f to a full stdout: exit $rc: $(cat "$tmp/err")"
done
for f in csv json; do
    "$tb" export last --db "$db" --format $f >/dev/full 2>"$tmp/err"
    rc=$?
    [ $rc = 1 ] && grep -q 'write failed' "$tmp/err" || fail "export --format $f to a full stdout: exit $rc: $(cat "$tmp/err")"
done

# --- a symlink to a full device: the write fails, the link stays
ln -s /dev/full "$tmp/link"
"$tb" report --db "$db" --format md -o "$tmp/link" 2>"$tmp/err" && fail "-o a link to /dev/full: exit 0"
[ -L "$tmp/link" ] && [ "$(readlink "$tmp/link")" = /dev/full ] || fail "-o a link to /dev/full: the link is gone"
"$tb" export last --db "$db" --format csv -o "$tmp/link" 2>"$tmp/err" && fail "export -o a link to /dev/full: exit 0"
[ -L "$tmp/link" ] || fail "export -o a link to /dev/full: the link is gone"

# --- a device node of our own (a copy of /dev/full; root only): it stays
if mknod "$tmp/full" c 1 7 2>/dev/null; then
    "$tb" report --db "$db" --format html -o "$tmp/full" 2>"$tmp/err" && fail "-o a full device: exit 0"
    [ -c "$tmp/full" ] || fail "-o a full device: the device node is gone"
    "$tb" export last --db "$db" --format json -o "$tmp/full" 2>/dev/null && fail "export -o a full device: exit 0"
    [ -c "$tmp/full" ] || fail "export -o a full device: the device node is gone"
else
    echo "note: mknod not allowed: the device node is not checked"
fi

# --- a FIFO: written in place, still a FIFO after
mkfifo "$tmp/fifo"
cat "$tmp/fifo" >"$tmp/fifo.out" &
reader=$!
"$tb" report --db "$db" --format md -o "$tmp/fifo" 2>"$tmp/err" || fail "-o a FIFO: $(cat "$tmp/err")"
wait $reader
[ -p "$tmp/fifo" ] || fail "-o a FIFO: it is no longer a FIFO"
grep -q 'out' "$tmp/fifo.out" || fail "-o a FIFO: the reader got no report"

# --- a regular file: replaced whole on success; on a failed write (the
# file size limit) kept as it was, with no temporary file left
echo old >"$tmp/r.md"
"$tb" report --db "$db" --format md -o "$tmp/r.md" 2>/dev/null || fail "-o a regular file"
grep -q 'out' "$tmp/r.md" || fail "-o a regular file: not written"
echo old >"$tmp/r.html"
( trap '' XFSZ; ulimit -f 1; exec "$tb" report --db "$db" --format html -o "$tmp/r.html" ) 2>"$tmp/err" &&
    fail "-o past the file size limit: exit 0"
[ "$(cat "$tmp/r.html")" = old ] || fail "-o past the file size limit: the old file was changed"
[ "$(ls "$tmp" | grep -c '^r\.html')" = 1 ] || fail "-o past the file size limit: left $(ls "$tmp")"
[ $failures = 0 ] && pass "-o: links, FIFOs and devices written in place and kept; a regular file replaced whole or kept; a full stdout is exit 1"

# --- -o naming the database (a slip: -o tokbench.db), its log, or a link to
# it: refused by every writer, the database still a database holding its session
sqlite3 "$db" 'pragma journal_mode = wal; select count(*) from session' >/dev/null
ln -s "$db" "$tmp/dblink"
n=0
for t in "$db" "$db-wal" "$db-shm" "$tmp/dblink"; do
    for cmd in "report --format md" "report --format html" "export last --format json" "history --backend n"; do
        # shellcheck disable=SC2086
        "$tb" $cmd --db "$db" -o "$t" 2>"$tmp/err" && fail "$cmd -o $t: exit 0"
        grep -q "that is an SQLite database" "$tmp/err" || fail "$cmd -o $t: $(cat "$tmp/err")"
        n=$((n + 1))
    done
done
[ "$(sqlite3 "$db" 'select count(*) from session')" = 1 ] && [ -L "$tmp/dblink" ] \
    && pass "-o the database, its -wal or -shm, or a link to it: refused ($n commands), the session kept" \
    || fail "-o the database: the database lost its session"
tb_finish
