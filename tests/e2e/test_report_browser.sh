#!/usr/bin/env bash
# The HTML report in a real browser: headless Chromium (Debian's chromium)
# loads the reports of real sessions and
#   1. a probe script (added to a copy of each report; the report itself
#      has none) measures each chart as laid out: its size, the length of
#      every drawn curve, its markers and tick labels, the box of every
#      text; and reads the axes each chart's <svg> says it chose
#      (data-x-lo ... data-y-ticks, reports/svg.h) and each curve's colour
#      and marker. The checks (issue 39 item 9):
#        - no axis starts below 0 (every quantity charted is one that is
#          never negative: tokens/s, ms, seconds since start, a rate, a
#          fraction);
#        - the log axis of inter-token gaps does not reach down to 1 µs:
#          gaps of at most 1 µs (zero at the stored resolution) are left
#          out, and the chart says which share;
#        - no (colour, marker) pair twice in a chart;
#        - one chart per metric: a swept option (sdar's threshold), the
#          offered rate or the concurrency are curves of one chart, not a
#          chart per value;
#        - no percentile curves on the achieved-vs-offered requests/s chart;
#        - no text (title, labels, legend, notes, ticks) outside its chart;
#      on three reports: two sessions of the scripted null suite (history,
#      a synthetic quality score: Pareto), the quick.ini fixture
#      (ar/llada/flow/sdar with a swept threshold: quick_fixture.sh), and
#      an open-loop rate sweep of plugins/http against fault_server.py
#      beside a concurrency sweep, with [telemetry] from metrics_server.py;
#   2. a screenshot of one chart is decoded (PNG, in Python's standard
#      library) and must show the curve's and the reference line's colours;
#   3. a screenshot of the whole report must not be blank.
# Skips (77) when chromium or python3 is missing; the serving report is
# left out (said) when the http plugin is not built.
#
# usage: test_report_browser.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
tb_init report_browser "$@"
chromium=$(command -v chromium || command -v chromium-browser || true)
[ -n "$chromium" ] || { echo "SKIP: chromium not installed (Debian package chromium)"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: python3 not installed"; exit 77; }
need_sqlite3
export TOKBENCH_PLUGIN_PATH="$build/plugins"

# Chromium as root in a container: no sandbox, no GPU, nothing from the
# network, a throwaway profile. One Chromium renders every page
# (tests/e2e/browser.py; a launch costs seconds), each page sent to it as
# soon as it is written: the null suite's and the serving report while the
# quick.ini fixture may still run, the fixture's report last.
exec {browser}> >(exec python3 "$src/tests/e2e/browser.py" "$chromium" \
    "$(mktemp -d "$tmp/profile.XXXXXX")" --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync --hide-scrollbars \
    >"$tmp/browser.out" 2>>"$tmp/chromium.log")
browser_pid=$!
pids+=("$browser_pid")
# render dom|png W H PAGE OUT: a job for the browser (a W x H viewport);
# in a subshell: a browser gone fails the check, not the script by SIGPIPE
render() { (echo "$1 $2 $3 file://$4 $5" >&"$browser") 2>/dev/null || fail "the browser is gone: job $1 $4"; }

# probe R: a copy of R.html with the probe script, its DOM after the load
# event to R.dom.html (1.: every chart laid out and drawn; a JSON line a chart)
probe() {
    python3 - "$tmp/$1.html" "$tmp/$1.probe.html" <<'EOF'
import sys
html = open(sys.argv[1], encoding="utf-8").read()
probe = """<script>
const rows = [];
for (const svg of document.querySelectorAll('svg.tb-chart')) {
  const r = svg.getBoundingClientRect();
  const vb = svg.viewBox.baseVal;
  let curves = 0, length = 0;
  for (const p of svg.querySelectorAll('path.series')) {
    const l = p.getTotalLength();
    if (l > 0) { curves++; length += l; }
  }
  // text outside the chart: every text but the point labels (those sit
  // in the plot's clipping viewport); the y label is rotated: its box
  // in the chart's coordinates
  const outside = [];
  for (const t of svg.querySelectorAll(':scope > text, :scope > g > text')) {
    let b = t.getBBox();
    const m = t.getCTM(), root = svg.getCTM();
    if (m && root) {
      const k = root.inverse().multiply(m), pts = [[b.x, b.y], [b.x + b.width, b.y], [b.x, b.y + b.height],
                                                    [b.x + b.width, b.y + b.height]].map(([x, y]) =>
        new DOMPoint(x, y).matrixTransform(k));
      const xs = pts.map(p => p.x), ys = pts.map(p => p.y);
      b = {x: Math.min(...xs), y: Math.min(...ys), width: Math.max(...xs) - Math.min(...xs),
           height: Math.max(...ys) - Math.min(...ys)};
    }
    if (b.x < -0.5 || b.y < -0.5 || b.x + b.width > vb.width + 0.5 || b.y + b.height > vb.height + 0.5)
      outside.push(t.textContent + ' @' + [b.x, b.y, b.width, b.height].map(Math.round).join(','));
  }
  const series = [];
  for (const g of svg.querySelectorAll('g.series-group'))
    series.push([g.dataset.series, g.dataset.colour, g.dataset.marker]);
  const d = svg.dataset;
  rows.push(JSON.stringify({kind: svg.closest('figure').dataset.kind, title: svg.querySelector('title').textContent,
    w: Math.round(r.width), h: Math.round(r.height), curves: curves, length: Math.round(length),
    markers: svg.querySelectorAll('.marker').length, ticks: svg.querySelectorAll('.ticks text').length,
    xscale: d.xScale, xlo: +d.xLo, xhi: +d.xHi, yscale: d.yScale, ylo: +d.yLo, yhi: +d.yHi,
    ylabel: svg.querySelector('.y-label').textContent, series: series, outside: outside,
    notes: Array.from(svg.querySelectorAll('.notes text')).map(t => t.textContent).join(' ')}));
}
const pre = document.createElement('pre');
pre.id = 'probe';
pre.textContent = 'PROBE\\n' + rows.join('\\n') + '\\nEND';
document.body.appendChild(pre);
</script>"""
assert html.count("</body>") == 1
open(sys.argv[2], "w", encoding="utf-8").write(html.replace("</body>", probe + "</body>"))
EOF
    render dom 1400 1000 "$tmp/$1.probe.html" "$tmp/$1.dom.html"
}

# The null suite: two sessions (history), a synthetic quality score (Pareto chart).
db="$tmp/r.db"
for i in 1 2; do
    "$tb" run "$src/tests/data/suites/null-quick.ini" --db "$db" --filter prompt_tokens=32 >/dev/null 2>&1 \
        || fail "run $i"
done
# The score falls as aggregate tokens/s rises: every case is on the Pareto
# front, whatever the machine's speed made each case's rate (a score by
# steps left one case dominating the rest, a front of one point, when a
# loaded machine slowed the diffusion-like cases more).
sqlite3 "$db" "insert into metric (case_id, name, unit, n, median, p5, p95)
  select c.id, 'quality', 'accuracy', 5, 0.5 + 0.05 * (select count(*) from bench_case c2 join metric m2
    on m2.case_id = c2.id and m2.name = 'agg_tps' where c2.session_id = 2 and m2.median > m.median), 0.4, 0.95
  from bench_case c join metric m on m.case_id = c.id and m.name = 'agg_tps' where c.session_id = 2"
"$tb" report --db "$db" --format html -o "$tmp/report.html" 2>/dev/null || fail "report html"
reports="report"
probe report
# 2. and 3.: one chart alone and the whole report, screenshots (checked below)
python3 - "$tmp/report.html" "$tmp/chart.html" <<'EOF'
import re, sys
html = open(sys.argv[1], encoding="utf-8").read()
m = re.search(r'<figure class="chart" data-kind="steps">\n(<svg .*?</svg>\n)<figcaption>', html, re.S)
assert m, "no steps chart"
open(sys.argv[2], "w", encoding="utf-8").write(
    '<!DOCTYPE html><html><body style="margin:0;background:#fff">' + m.group(1) + '</body></html>')
EOF
render png 660 420 "$tmp/chart.html" "$tmp/chart.png"
render png 1400 2400 "$tmp/report.html" "$tmp/report.png"

# Serving: rates 20 and 40/s (open loop) beside concurrency 1 and 2, each
# case scraping a stand-in /metrics. A long backend label, as a served
# model's name often is: its telemetry titles do not fit one line.
if [ -f "$build/plugins/http/http.so" ]; then
    start_server fault python3 "$src/tests/e2e/fault_server.py" --quiet || exit 1
    python3 "$src/tests/e2e/metrics_server.py" "$tmp/metrics.port" ok &
    pids+=($!)
    [ -n "$(wait_port "$tmp/metrics.port" $!)" ] || { fail "metrics server did not start"; tb_finish; }
    cat >"$tmp/serve.ini" <<EOT
[suite]
name = serve
warmup = 0
repeat = 2
seed = 1
goodput_ttft_ms = 10000
[matrix]
prompt_tokens = 8
max_new_tokens = 8
requests = 8
[backend sweep]
plugin = http
url = http://127.0.0.1:$port/v1
request_rate = 20, 40
[backend closed-loop-meta-llama-3.1-8b-instruct]
plugin = http
url = http://127.0.0.1:$port/v1
concurrency = 1, 2
[telemetry]
metrics_url = http://127.0.0.1:$(cat "$tmp/metrics.port")/metrics
period = 0.05
EOT
    "$tb" run "$tmp/serve.ini" --db "$tmp/serve.db" >"$tmp/serve.out" 2>&1 || fail "run serve: $(tail -5 "$tmp/serve.out")"
    "$tb" report --db "$tmp/serve.db" --format html -o "$tmp/serve.html" 2>/dev/null || fail "report serve"
    reports="$reports serve"
else
    echo "note: the http plugin is not built (libcurl missing): no serving report"
fi
[[ " $reports " == *" serve "* ]] && probe serve

# The quick.ini fixture.
if fixture=$(bash "$src/tests/e2e/quick_fixture.sh" check "$build" "$src"); then
    "$tb" report --db "$fixture" --format html -o "$tmp/quick.html" 2>/dev/null || fail "report of quick.ini"
    reports="$reports quick"
    # the measured cases' Pareto front (accuracy against aggregate tokens/s,
    # from the JSON export): its points, where the chart must draw a line
    # (a front of one point, one case faster and better than the rest on a
    # busy machine, is a point with no line)
    "$tb" report --db "$fixture" --format json 2>/dev/null | python3 -c '
import json, sys
pts = []
for c in json.load(sys.stdin)["cases"]:
    m = c.get("metrics") or {}
    q, x = (m.get("accuracy") or {}).get("median"), (m.get("agg_tps") or {}).get("median")
    if c.get("status") == "ok" and q is not None and x is not None:
        pts.append((x, q))
best, n = float("-inf"), 0
for x, q in sorted(pts, reverse=True):  # fastest first: on the front when better than every faster one
    if q > best:
        best, n = q, n + 1
print(n)' >"$tmp/quick.front" || fail "quick.ini: its cases from the JSON export"
else
    fail "quick.ini fixture: $fixture"
fi
[[ " $reports " == *" quick "* ]] && probe quick

# every page sent: the browser ends when it has rendered them (the
# servers above hold the pipe too: no end of file)
render_end() { (echo end >&"$browser") 2>/dev/null; }
render_end
exec {browser}>&-
wait "$browser_pid" || fail "the browser exited $?: $(grep -v dbus "$tmp/chromium.log" | tail -5)"

# 1. The probes read back
for r in $reports; do
    awk '/^END/ {p = 0} p {print} /PROBE$/ {p = 1}' "$tmp/$r.dom.html" \
        | python3 -c 'import html, sys; sys.stdout.write(html.unescape(sys.stdin.read()))' >"$tmp/$r.probe.txt"
    # the DOM Chromium built holds the SVG elements (parsed as SVG, not text)
    grep -q '<path class="series" d="M[0-9]' "$tmp/$r.dom.html" || fail "$r: no drawn series in the DOM"
done

if python3 - "$tmp" "$reports" <<'EOF'; then
import json, re, sqlite3, sys
tmp, reports = sys.argv[1], sys.argv[2].split()
bad = []
charts = {}
for r in reports:
    charts[r] = [json.loads(l) for l in open("%s/%s.probe.txt" % (tmp, r), encoding="utf-8") if l.strip()]
# the quick fixture's measured Pareto front, in points (2 where unknown: a line is then required)
try:
    quick_front = int(open("%s/quick.front" % tmp).read())
except (OSError, ValueError):
    quick_front = 2

def kinds(r):
    out = {}
    for c in charts[r]:
        out[c["kind"]] = out.get(c["kind"], 0) + 1
    return out

for r in reports:
    if not charts[r]:
        bad.append("%s: no chart laid out" % r)
    for c in charts[r]:
        what = "%s: %s chart %r" % (r, c["kind"], c["title"])
        if not (c["w"] >= 600 and c["h"] >= 300):
            bad.append("%s laid out at %dx%d" % (what, c["w"], c["h"]))
        # a Pareto front of measured points may be one point (one case
        # faster and better than the rest on this machine) or two close
        # ones: its drawn length is the data's, not the renderer's
        min_len = 0 if c["kind"] == "pareto" and r == "quick" else 100
        min_curves = 1
        if c["kind"] == "pareto" and r == "quick" and quick_front < 2:
            min_curves = 0  # the measured front is one point: no line to draw
        if not (c["curves"] >= min_curves and c["length"] >= min_len):
            bad.append("%s: %d curves, %d px drawn" % (what, c["curves"], c["length"]))
        if c["ticks"] < 4:
            bad.append("%s: %d tick labels" % (what, c["ticks"]))
        if c["markers"] < 2:
            bad.append("%s: %d markers" % (what, c["markers"]))
        # every quantity charted is non-negative: no axis below 0
        for ax in "xy":
            lo, scale = c.get(ax + "lo"), c.get(ax + "scale")
            if scale not in ("linear", "log") or lo is None:
                bad.append("%s: the <svg> does not say its %s axis (data-%s-scale %r, data-%s-lo %r)" % (what, ax, ax, scale, ax, lo))
            elif not (lo >= 0 if scale == "linear" else lo > 0):
                bad.append("%s: %s axis (%s) starts at %r" % (what, ax, scale, lo))
        pairs = [tuple(x[1:]) for x in c["series"]]
        if len(set(pairs)) != len(pairs) or any(not col or not mk for col, mk in pairs):
            bad.append("%s: (colour, marker) pairs repeat: %s" % (what, c["series"]))
        if c["outside"]:
            bad.append("%s: text outside the chart: %s" % (what, c["outside"]))
        if c["kind"] == "goodput":
            names = [s[0] for s in c["series"]]
            if any(re.search(r"\bp(50|90|95|99)\b", n) for n in names) or re.search(r"\bp(50|90|99)\b", c["ylabel"]):
                bad.append("%s: percentiles on a rate chart: %s, %r" % (what, names, c["ylabel"]))
        if c["kind"] == "itl" and (c.get("xscale") != "log" or not c.get("xlo", 0) > 0.001):
            bad.append("%s: gap axis %s from %r ms (1 µs gaps drawn?)" % (what, c.get("xscale"), c.get("xlo")))

if "report" in charts:
    # prompt 32 only: steps × 2 batches, latency + throughput, ITL × 2,
    # Pareto, history × 2 backends
    if kinds("report") != {"steps": 2, "latency": 1, "throughput": 1, "itl": 2, "pareto": 1, "history": 2}:
        bad.append("report: charts %s" % kinds("report"))

if "quick" in charts:
    # sdar's thresholds: curves of the batch and ITL charts (one ITL chart
    # per batch), never a chart of their own; the speculative rows
    # (ten curves: ar-small-dflash sweeps its draft length) fill two
    # acceptance charts; a canvas chart per batch (issue 41)
    if kinds("quick") != {"steps": 4, "latency": 1, "throughput": 1, "itl": 2, "pareto": 1, "acceptance": 2,
                          "canvas": 2}:
        bad.append("quick: charts %s" % kinds("quick"))
    for c in charts["quick"]:
        if "threshold" in c["title"]:
            bad.append("quick: a chart of one threshold: %r" % c["title"])
        if c["kind"] in ("itl", "latency", "throughput"):
            th = sorted(x[0] for x in c["series"] if "threshold" in x[0])
            if len(th) != 3:
                bad.append("quick: %s chart %r: threshold curves %s" % (c["kind"], c["title"], th))
    pareto = [c for c in charts["quick"] if c["kind"] == "pareto"]
    if pareto and pareto[0].get("xlo") != 0:
        bad.append("quick: Pareto x axis from %r, not 0" % pareto[0].get("xlo"))

if "serve" in charts:
    db = sqlite3.connect("%s/serve.db" % tmp)
    # the metrics with a value to draw (one is NaN throughout: not drawn)
    metrics = db.execute("select count(distinct case when instr(name, '{') then substr(name, 1, instr(name, '{') - 1) "
                         "else name end) from telemetry_series s where exists (select 1 from telemetry_point p "
                         "where p.series_id = s.id and p.value is not null)").fetchone()[0]
    # ITL: the rates and concurrencies, 4 curves of one chart; telemetry:
    # per backend a chart a metric, a curve per rate or concurrency
    k = kinds("serve")
    if k.get("itl") != 1 or k.get("rate") != 3 or k.get("goodput") != 1 or k.get("telemetry") != 2 * metrics:
        bad.append("serve: charts %s (%d metrics)" % (k, metrics))
    for c in charts["serve"]:
        if re.search(r"rate [0-9]+/s|concurrency [0-9]", c["title"]):
            bad.append("serve: a chart of one rate or concurrency: %r" % c["title"])
        if c["kind"] == "itl" and len(c["series"]) != 4:
            bad.append("serve: ITL curves %s" % [s[0] for s in c["series"]])
        if c["kind"] == "telemetry" and len(c["series"]) < 2:
            bad.append("serve: telemetry chart %r has one curve" % c["title"])
    # fault_server streams its chunks at once: many gaps are under 1 µs,
    # left out of the log axis, and the chart says so
    zero = db.execute("with e as (select r.id rid, e.key k, json_extract(e.value, '$[0]') t from request r join sample s "
                      "on s.id = r.sample_id, json_each(r.emissions_json) e where s.warmup = 0 and r.status = 'ok'), "
                      "g as (select t - lag(t) over (partition by rid order by k) d from e) "
                      "select count(*) from g where d is not null and d < 0.0015").fetchone()[0]
    itl = [c for c in charts["serve"] if c["kind"] == "itl"]
    # whether the server's chunks land within 1 µs depends on the
    # machine's speed (a sanitizer build is slower): with none, the note
    # is not checked here (tests/unit/test_svg.c checks zero gaps always)
    if not zero:
        print("  note: no gap of at most 1 µs stored this time: the zero-gap note is not checked here")
    elif itl and "at most 1 µs" not in itl[0].get("notes", ""):
        bad.append("serve: %d gaps of at most 1 µs, no note: %r" % (zero, itl[0]["notes"]))

for b in bad:
    print("  " + b)
sys.exit(1 if bad else 0)
EOF
    pass "probe: $(for r in $reports; do printf '%s %s charts; ' "$r" "$(wc -l <"$tmp/$r.probe.txt")"; done)axes from 0, a (colour, marker) pair a curve, one chart a metric, no text outside"
else
    fail "the charts as Chromium laid them out (above)"
fi

# 2. One chart alone, screenshot decoded: the diffusion curve (first
# palette colour, #0072B2) and the AR reference line (#D55E00) are there.
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
size=$(stat -c %s "$tmp/report.png" 2>/dev/null || echo 0)
[ "$size" -ge 60000 ] || fail "report screenshot is $size bytes: blank?"
pass "report screenshot: $size bytes"

[ $failures = 0 ] || tail -5 "$tmp/chromium.log"
tb_finish
