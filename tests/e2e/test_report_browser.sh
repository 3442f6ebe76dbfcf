#!/usr/bin/env bash
# The HTML report in a real browser: headless Chromium (Debian's chromium)
# loads the report of real sessions and
#   1. a probe script (added to a copy of the report; the report itself has
#      none) measures each chart as laid out: its size, the length of every
#      drawn curve, its markers and tick labels;
#   2. a screenshot of one chart is decoded (PNG, in Python's standard
#      library) and must show the curve's and the reference line's colours;
#   3. a screenshot of the whole report must not be blank.
# Skips (77) when chromium or python3 is missing.
#
# usage: test_report_browser.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
tb_init report_browser "$@"
chromium=$(command -v chromium || command -v chromium-browser || true)
[ -n "$chromium" ] || { echo "SKIP: chromium not installed (Debian package chromium)"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: python3 not installed"; exit 77; }
need_sqlite3

# Chromium as root in a container: no sandbox, no GPU, nothing from the
# network, a throwaway profile.
browse() {
    timeout 120 "$chromium" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
        --disable-background-networking --disable-component-update --disable-sync --hide-scrollbars \
        --user-data-dir="$(mktemp -d "$tmp/profile.XXXXXX")" "$@" 2>>"$tmp/chromium.log"
}

# Two sessions (history), a synthetic quality score (Pareto chart).
db="$tmp/r.db"
for i in 1 2; do
    "$tb" run "$src/tests/data/suites/null-quick.ini" --db "$db" --filter prompt_tokens=32 >/dev/null 2>&1 \
        || fail "run $i"
done
sqlite3 "$db" "insert into metric (case_id, name, unit, n, median, p5, p95) select id, 'quality', 'accuracy', 5, 0.5 + 0.02 * coalesce(steps, 20), 0.4, 0.95 from bench_case where session_id = 2"
"$tb" report --db "$db" --format html -o "$tmp/report.html" 2>/dev/null || fail "report html"

# 1. The probe: every chart laid out and drawn.
python3 - "$tmp/report.html" "$tmp/probe.html" <<'EOF'
import sys
html = open(sys.argv[1], encoding="utf-8").read()
probe = """<script>
const rows = [];
for (const svg of document.querySelectorAll('svg.tb-chart')) {
  const r = svg.getBoundingClientRect();
  let curves = 0, length = 0;
  for (const p of svg.querySelectorAll('path.series')) {
    const l = p.getTotalLength();
    if (l > 0) { curves++; length += l; }
  }
  rows.push([svg.closest('figure').dataset.kind, Math.round(r.width), Math.round(r.height), curves,
             Math.round(length), svg.querySelectorAll('.marker').length,
             svg.querySelectorAll('.ticks text').length].join(' '));
}
const pre = document.createElement('pre');
pre.id = 'probe';
pre.textContent = 'PROBE\\n' + rows.join('\\n') + '\\nEND';
document.body.appendChild(pre);
</script>"""
assert html.count("</body>") == 1
open(sys.argv[2], "w", encoding="utf-8").write(html.replace("</body>", probe + "</body>"))
EOF
browse --window-size=1400,1000 --dump-dom "file://$tmp/probe.html" >"$tmp/dom.html"
awk '/^END/ {p = 0} p {print} /PROBE$/ {p = 1}' "$tmp/dom.html" >"$tmp/probe.txt"
n=$(wc -l <"$tmp/probe.txt")
# prompt 32 only: steps × 2 batches, latency + throughput, ITL × 2, Pareto,
# history × 2 backends
[ "$n" = 9 ] || fail "probe saw $n charts, expected 9: $(cat "$tmp/probe.txt")"
while read -r kind w h curves length markers ticks; do
    [ "$w" -ge 600 ] && [ "$h" -ge 300 ] || fail "$kind chart laid out at ${w}x$h"
    [ "$curves" -ge 1 ] && [ "$length" -ge 100 ] || fail "$kind chart: $curves curves, $length px drawn"
    [ "$ticks" -ge 4 ] || fail "$kind chart: $ticks tick labels"
    case $kind in itl) ;; *) [ "$markers" -ge 2 ] || fail "$kind chart: $markers markers";; esac
done <"$tmp/probe.txt"
# the DOM Chromium built holds the SVG elements (parsed as SVG, not text)
grep -q '<path class="series" d="M[0-9]' "$tmp/dom.html" || fail "no drawn series in the DOM"
pass "probe: $n charts laid out and drawn ($(awk '{print $1}' "$tmp/probe.txt" | sort | uniq -c | awk '{printf "%s %s, ", $1, $2}'))"

# 2. One chart alone, screenshot decoded: the diffusion curve (first
# palette colour, #0072B2) and the AR reference line (#D55E00) are there.
python3 - "$tmp/report.html" "$tmp/chart.html" <<'EOF'
import re, sys
html = open(sys.argv[1], encoding="utf-8").read()
m = re.search(r'<figure class="chart" data-kind="steps">\n(<svg .*?</svg>\n)<figcaption>', html, re.S)
assert m, "no steps chart"
open(sys.argv[2], "w", encoding="utf-8").write(
    '<!DOCTYPE html><html><body style="margin:0;background:#fff">' + m.group(1) + '</body></html>')
EOF
browse --window-size=660,420 --screenshot="$tmp/chart.png" "file://$tmp/chart.html" >/dev/null
cat >"$tmp/png.py" <<'EOF'
# Minimal PNG reader (8-bit RGB/RGBA, non-interlaced), standard library only.
import struct, sys, zlib
def read(path):
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat = 8, b""
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and ctype in (2, 6) and interlace == 0, (depth, ctype, interlace)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    bpp = 3 if ctype == 2 else 4
    raw, stride, prev, px = zlib.decompress(idat), w * bpp, bytearray(w * bpp), []
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1: line[i] = (line[i] + a) & 255
            elif f == 2: line[i] = (line[i] + b) & 255
            elif f == 3: line[i] = (line[i] + ((a + b) >> 1)) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        px.append(bytes(line))
        prev = line
    return w, h, bpp, px
def near(r, g, b, rgb, tol=40):
    return abs(r - rgb[0]) + abs(g - rgb[1]) + abs(b - rgb[2]) <= tol
w, h, bpp, rows = read(sys.argv[1])
blue = orange = ink = 0
for line in rows:
    for x in range(0, w * bpp, bpp):
        r, g, b = line[x], line[x + 1], line[x + 2]
        blue += near(r, g, b, (0x00, 0x72, 0xB2))
        orange += near(r, g, b, (0xD5, 0x5E, 0x00))
        ink += r + g + b < 600
print(w, h, blue, orange, ink)
EOF
read -r w h blue orange ink < <(python3 "$tmp/png.py" "$tmp/chart.png")
[ "${w:-0}" = 660 ] && [ "${h:-0}" = 420 ] || fail "chart screenshot is ${w}x$h"
[ "${blue:-0}" -ge 300 ] || fail "diffusion curve not drawn: $blue blue pixels"
[ "${orange:-0}" -ge 300 ] || fail "AR reference line not drawn: $orange orange pixels"
[ "${ink:-0}" -ge 3000 ] || fail "axes and labels not drawn: $ink dark pixels"
pass "chart screenshot: $blue curve pixels, $orange reference pixels, $ink dark pixels"

# 3. The whole report: a screenshot that is not blank (a white page of this
# size compresses to a few kB).
browse --window-size=1400,2400 --screenshot="$tmp/report.png" "file://$tmp/report.html" >/dev/null
size=$(stat -c %s "$tmp/report.png" 2>/dev/null || echo 0)
[ "$size" -ge 60000 ] || fail "report screenshot is $size bytes: blank?"
pass "report screenshot: $size bytes"

[ $failures = 0 ] || tail -5 "$tmp/chromium.log"
tb_finish
