"""browser.py: one headless Chromium renders many pages (test_report_browser.sh).

A Chromium launch costs seconds; one process, driven through the DevTools
protocol on a pipe (--remote-debugging-pipe: commands in on fd 3, answers
out on fd 4, each a JSON text ended by a NUL byte), renders every page of
the test. Standard library only.

usage: browser.py CHROMIUM PROFILE_DIR [CHROMIUM_FLAGS...] < JOBS

JOBS: one a line, read as they come (the test sends some while it waits
for others' inputs); "end" (or stdin closed) ends the browser (the test's
servers inherit the pipe's end, so the test says "end"):
  dom W H URL OUT   the DOM after the page's load event (what
                    --dump-dom prints: the document's outerHTML) to OUT
  png W H URL OUT   a PNG of the W x H viewport to OUT
Each page is laid out in a viewport of W x H CSS pixels at scale 1.
Prints "done OUT" a job; exit status 1 when Chromium goes away or answers
an error, or when a job takes more than GUARD seconds (a hang guard; the
time between jobs is the test's: it may wait minutes for an input).
"""
import base64
import fcntl
import json
import os
import signal
import subprocess
import sys


GUARD = 120


def guard(signum, frame):
    raise RuntimeError("a job took more than %d s (a hang)" % GUARD)


def high(fd):
    """fd moved to a number of 10 or more"""
    new = fcntl.fcntl(fd, fcntl.F_DUPFD, 10)
    os.close(fd)
    return new


class Browser:
    def __init__(self, chromium, profile, flags):
        # Chromium reads fd 3 and writes fd 4: our pipes moved there by a
        # shell, from fds above 4 (a fresh process's pipes may be 3 and 4)
        cmd_r, self.cmd_w = os.pipe()
        self.out_r, out_w = os.pipe()
        cmd_r, out_w = (high(fd) for fd in (cmd_r, out_w))
        self.proc = subprocess.Popen(
            ["bash", "-c", 'exec "$0" "$@" 3<&%d 4>&%d %d<&- %d>&-' % (cmd_r, out_w, cmd_r, out_w), chromium,
             "--headless", "--remote-debugging-pipe", "--user-data-dir=" + profile] + flags + ["about:blank"],
            pass_fds=(cmd_r, out_w), stdin=subprocess.DEVNULL)
        os.close(cmd_r)
        os.close(out_w)
        self.buf = b""
        self.next_id = 0
        self.events = []  # (method, params, session) not yet looked at

    def _read(self):
        while b"\0" not in self.buf:
            b = os.read(self.out_r, 1 << 20)
            if not b:
                raise RuntimeError("Chromium closed its DevTools pipe (exit %s)" % self.proc.poll())
            self.buf += b
        msg, _, self.buf = self.buf.partition(b"\0")
        return json.loads(msg)

    def call(self, method, params=None, session=None):
        self.next_id += 1
        m = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            m["sessionId"] = session
        os.write(self.cmd_w, json.dumps(m).encode() + b"\0")
        while True:
            r = self._read()
            if r.get("id") == self.next_id:
                if "error" in r:
                    raise RuntimeError("%s: %s" % (method, r["error"]))
                return r.get("result", {})
            if "method" in r:
                self.events.append((r["method"], r.get("params", {}), r.get("sessionId")))

    def wait_event(self, match):
        """The first event, kept or new, for which match(method, params, session)."""
        while True:
            for i, e in enumerate(self.events):
                if match(*e):
                    return self.events.pop(i)
            r = self._read()
            if "method" in r:
                self.events.append((r["method"], r.get("params", {}), r.get("sessionId")))

    def close(self):
        try:
            self.call("Browser.close")
        except RuntimeError:
            pass  # it may close the pipe before it answers
        os.close(self.cmd_w)
        return self.proc.wait()


def main(b):
    signal.signal(signal.SIGALRM, guard)
    signal.alarm(GUARD)  # the start
    target = b.call("Target.createTarget", {"url": "about:blank"})["targetId"]
    s = b.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
    b.call("Page.enable", session=s)
    b.call("Page.setLifecycleEventsEnabled", {"enabled": True}, session=s)
    signal.alarm(0)
    for line in sys.stdin:
        if not line.strip():
            continue
        if line.strip() == "end":
            break
        kind, w, h, url, out = line.split()
        signal.alarm(GUARD)
        b.call("Emulation.setDeviceMetricsOverride",
               {"width": int(w), "height": int(h), "deviceScaleFactor": 1, "mobile": False}, session=s)
        nav = b.call("Page.navigate", {"url": url}, session=s)
        if nav.get("errorText"):
            raise RuntimeError("%s: %s" % (url, nav["errorText"]))
        # this navigation's load event (the probe script has run by then)
        b.wait_event(lambda m, p, sess: sess == s and m == "Page.lifecycleEvent" and p.get("name") == "load"
                     and p.get("loaderId") == nav.get("loaderId"))
        if kind == "dom":
            r = b.call("Runtime.evaluate", {"expression": "document.documentElement.outerHTML",
                                            "returnByValue": True}, session=s)
            open(out, "w", encoding="utf-8").write(r["result"]["value"] + "\n")
        elif kind == "png":
            r = b.call("Page.captureScreenshot", {"format": "png"}, session=s)
            open(out, "wb").write(base64.b64decode(r["data"]))
        else:
            raise RuntimeError("unknown job %r" % line)
        signal.alarm(0)
        print("done", out, flush=True)
    signal.alarm(GUARD)
    return b.close()


if __name__ == "__main__":
    browser = Browser(sys.argv[1], sys.argv[2], sys.argv[3:])
    try:
        sys.exit(main(browser))
    except (RuntimeError, KeyError, ValueError, OSError) as e:
        print("browser.py: %s" % e, file=sys.stderr)
        browser.proc.kill()
        browser.proc.wait()
        sys.exit(1)
