#!/usr/bin/env bash
# End to end: the HTML report's serving charts (docs/REPORTS.md, "The
# charts"): cases that differ only in request_rate, an open-loop sweep of
# plugins/http against tests/fault_server.py (a healthy, instant
# OpenAI-compatible server), get
#   - one chart each of TTFT, TPOT and E2E against the offered rate
#     (data-kind "rate"), with the series BACKEND p50, p90 and p99, one
#     point per rate, each value the stored median, p90 or p99 of the
#     case at that rate;
#   - one chart of sent and achieved requests/s and goodput against the
#     rate (data-kind "goodput"): the stored medians of sent_rate,
#     req_throughput and goodput (goodput only when the suite sets a
#     goodput limit; sent only where stored, schema 12), and the offered
#     rate itself;
# and a session without a rate sweep (one rate; a concurrency sweep; the
# scripted null suite) has neither. Nothing here depends on timing: the
# checks compare the chart with what the store holds.
#
# usage: test_report_rate.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
tb_init report_rate "$@"
need_sqlite3
command -v python3 >/dev/null || { echo "SKIP: python3 not installed"; exit 77; }
[ -f "$build/plugins/http/http.so" ] || { echo "SKIP: http plugin not built (libcurl missing)"; exit 77; }
export TOKBENCH_PLUGIN_PATH="$build/plugins"

kinds() { grep -o 'data-kind="[a-z]*"' "$1" | sort | uniq -c | awk '{printf "%s%s", sep, $2 "=" $1; sep=" "} END {print ""}'; }

start_server fault python3 "$src/tests/e2e/fault_server.py" --quiet || exit 1
url="http://127.0.0.1:$port/v1"

# suite NAME GOODPUT BACKENDS...: a suite with the named backends, each
# "LABEL KEY = VALUES" (a rate or concurrency sweep).
suite() {
    local name=$1 goodput=$2
    shift 2
    {
        printf '[suite]\nname = %s\nwarmup = 0\nrepeat = 2\nseed = 1\n%s\n' "$name" "$goodput"
        printf '[matrix]\nprompt_tokens = 8\nmax_new_tokens = 8\nrequests = 8\n'
        for b in "$@"; do
            printf '[backend %s]\nplugin = http\nurl = %s\n%s\n' "${b%% *}" "$url" "${b#* }"
        done
    } >"$tmp/$name.ini"
    "$tb" run "$tmp/$name.ini" --db "$tmp/$name.db" >"$tmp/$name.out" 2>&1 || { fail "run $name: exit $?"; tail -5 "$tmp/$name.out"; }
    "$tb" report --db "$tmp/$name.db" --format html -o "$tmp/$name.html" 2>/dev/null || fail "report $name"
}

# 1. a sweep of three rates with a goodput limit, beside a closed-loop
#    backend (a concurrency sweep: no rate, in no rate chart)
suite sweep "goodput_ttft_ms = 10000" "sweep request_rate = 20, 40, 80" "closed concurrency = 1, 2"
# 2. the same sweep without a goodput limit: no goodput series
suite nolimit "" "sweep request_rate = 20, 80"
# 3. no sweep: one rate, and a concurrency sweep
suite single "goodput_ttft_ms = 10000" "single request_rate = 50" "closed concurrency = 1, 2"

# check_charts NAME RATES GOODPUT [PERCENTILES [SENT]]: every rate and
# goodput chart of NAME.html against NAME.db (python: figures parsed from
# the SVG hover titles and compared with the stored values); PERCENTILES:
# the latency series expected (default p50,p90,p99); SENT 0: no sent
# series expected (default 1: the stored sent_rate medians).
check_charts() {
    python3 - "$tmp/$1.html" "$tmp/$1.db" "$2" "$3" "${4:-p50,p90,p99}" "${5:-1}" <<'EOF'
import html, re, sqlite3, sys, xml.etree.ElementTree
page, dbfile, rates, goodput = sys.argv[1], sys.argv[2], [float(r) for r in sys.argv[3].split(",")], sys.argv[4] == "1"
pcts = sys.argv[5].split(",")
sent = sys.argv[6] == "1"
doc = open(page, encoding="utf-8").read()
db = sqlite3.connect(dbfile)
bad = []

def stored(metric, col, rate):
    r = db.execute("select m.%s from metric m join bench_case c on c.id = m.case_id join backend b on b.id = c.backend_id "
                   "where b.label = 'sweep' and c.request_rate = ? and m.name = ?" % col, (rate, metric)).fetchone()
    return r[0] if r else None

def series(fig):
    """{name: [(rate, value)]} from the hover titles, and the markers per series."""
    out, markers = {}, {}
    for name, body in re.findall(r'<g class="series-group" data-series="([^"]*)"[^>]*>(.*?)</g>', fig, re.S):
        name = html.unescape(name)
        markers[name] = body.count('class="marker"')
        out[name] = [(float(r), float(v)) for r, v in
                     re.findall(r'<title>[^<]*: rate ([0-9.e+]+)/s, ([0-9.e+-]+) [a-z/]+</title>', body)]
    return out, markers

figs = re.findall(r'<figure class="chart" data-kind="(rate|goodput)">(.*?)</figure>', doc, re.S)
kinds = [k for k, _ in figs]
if kinds.count("rate") != 3 or kinds.count("goodput") != 1:
    bad.append("charts: %s" % kinds)
titles = {}
for kind, fig in figs:
    try:  # the SVG is well-formed XML
        xml.etree.ElementTree.fromstring(re.search(r'<svg .*</svg>', fig, re.S).group(0))
    except Exception as e:
        bad.append("%s chart: not well-formed SVG: %s" % (kind, e))
    title = html.unescape(re.search(r'<svg [^>]*>\n<title>([^<]*)</title>', fig).group(1))
    metric = title.split(" vs ")[0]
    titles[metric] = 1
    s, markers = series(fig)
    if "offered request rate, requests/s (log scale)" not in fig:
        bad.append("%s: x is not the offered rate on a log scale" % title)
    ticks = re.search(r'<g class="ticks"[^>]*>(.*?)</g>', fig, re.S).group(1)
    xt = re.findall(r'text-anchor="middle">([^<]*)</text>', ticks)
    if xt != ["%g" % r for r in rates]:
        bad.append("%s: x ticks %s, not the rates %s" % (title, xt, rates))
    if kind == "rate":
        want = {"sweep " + p: {"p50": "median"}.get(p, p) for p in pcts}
        m = {"TTFT": "ttft_ms", "TPOT": "tpot_ms", "E2E": "e2e_ms"}.get(metric)
    else:
        want = {"sweep achieved": "req_throughput", "offered": None}
        if sent:
            want["sweep sent"] = "sent_rate"
        if goodput:
            want["sweep goodput"] = "goodput"
        m = None
    if sorted(s) != sorted(want):
        bad.append("%s: series %s, expected %s" % (title, sorted(s), sorted(want)))
        continue
    for name, what in want.items():
        if markers[name] != len(rates):
            bad.append("%s: %s has %d points, expected one per rate (%d)" % (title, name, markers[name], len(rates)))
        if what is None:  # the diagonal: no hover titles, the offered rate itself
            continue
        got = s[name]
        if [r for r, _ in got] != rates:
            bad.append("%s: %s at rates %s" % (title, name, [r for r, _ in got]))
        for r, v in got:
            st = stored(m, what, r) if kind == "rate" else stored(what, "median", r)
            if st is None or abs(v - st) > 1e-5 * abs(st) + 1e-9:
                bad.append("%s: %s at %g/s is %r, stored %r" % (title, name, r, v, st))
if sorted(titles) != ["E2E", "TPOT", "TTFT", "achieved requests/s"]:
    bad.append("titles: %s" % sorted(titles))
for b in bad:
    print("  " + b)
sys.exit(1 if bad else 0)
EOF
}

if check_charts sweep 20,40,80 1; then
    pass "rate sweep 20, 40, 80/s: TTFT, TPOT, E2E p50/p90/p99 and sent/achieved/goodput/offered, one point per rate, the stored figures"
else
    fail "rate sweep charts of session sweep ($(kinds "$tmp/sweep.html"))"
fi
grep -q 'data-series="closed' <(sed -n '/data-kind="rate"/,/<\/figure>/p;/data-kind="goodput"/,/<\/figure>/p' "$tmp/sweep.html") \
    && fail "the closed-loop backend (no rate) is in a rate chart"
grep -q '<h3>Serving: latency against request rate</h3>' "$tmp/sweep.html" || fail "no serving section heading"
if check_charts nolimit 20,80 0; then
    pass "without a goodput limit: sent, achieved and offered only"
else
    fail "rate sweep charts of session nolimit"
fi
# a failed case is left out (its rate too); sessions before schema 6
# stored no p90/p99: their series are left out, the median stays
cp "$tmp/sweep.db" "$tmp/failed.db"
sqlite3 "$tmp/failed.db" "update bench_case set status = 'failed', error = 'planted' where request_rate = 40"
"$tb" report --db "$tmp/failed.db" --format html -o "$tmp/failed.html" 2>/dev/null || fail "report failed"
check_charts failed 20,80 1 && pass "a failed case is left out: rates 20, 80" || fail "rate charts with a failed case"
cp "$tmp/sweep.db" "$tmp/old.db"
sqlite3 "$tmp/old.db" "update metric set p90 = null, p99 = null"
"$tb" report --db "$tmp/old.db" --format html -o "$tmp/old.html" 2>/dev/null || fail "report old"
check_charts old 20,40,80 1 p50 && pass "without stored p90/p99 (before schema 6): p50 only" || fail "rate charts without p90/p99"
sqlite3 "$tmp/old.db" "delete from metric where name = 'sent_rate'"
"$tb" report --db "$tmp/old.db" --format html -o "$tmp/old.html" 2>/dev/null || fail "report old"
check_charts old 20,40,80 1 p50 0 && pass "without a stored sent_rate (before schema 12): no sent series" || fail "rate charts without sent_rate"
for name in single; do
    k=$(kinds "$tmp/$name.html")
    case $k in *'"rate"'* | *'"goodput"'*) fail "$name (no rate sweep) has rate charts: $k" ;; esac
    grep -q 'Serving: latency against request rate' "$tmp/$name.html" && fail "$name has the serving section"
done
# the scripted null suite (no serving backend at all)
"$tb" run "$src/tests/data/suites/null-quick.ini" --db "$tmp/null.db" --filter prompt_tokens=32 --filter batch=1 >/dev/null 2>&1 \
    || fail "null-quick run"
"$tb" report --db "$tmp/null.db" --format html -o "$tmp/null.html" 2>/dev/null || fail "report null-quick"
k=$(kinds "$tmp/null.html")
case $k in *'"rate"'* | *'"goodput"'* | '') fail "null-quick: $k" ;; esac
pass "no rate chart without a rate sweep: one rate ($(kinds "$tmp/single.html")), null-quick ($k)"

tb_finish
