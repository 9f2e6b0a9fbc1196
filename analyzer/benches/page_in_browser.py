#!/usr/bin/env python3
"""The report page in headless Chromium: time to the first complete drawing, and hover time.

    python3 analyzer/benches/page_in_browser.py PAGE.html [--chromium chromium] [--reps 5]

Each repetition loads the page in a fresh headless Chromium (the flags of the browser tests,
through analyzer/tests/support/cdp.py) and reads: first-contentful-paint (the browser's paint
timing), and `vramtraceReadyMs` (performance.now() when the script has drawn every view: the
page is usable from then on). Then it moves the mouse over 60 points of the timeline, timing each
`mousemove` handler in the page (hit test, tooltip text and its layout), and keeps the median
and the largest. It prints every repetition, then medians and spread.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "support"))
import cdp  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("page")
parser.add_argument("--chromium", default="chromium")
parser.add_argument("--reps", type=int, default=5)
args = parser.parse_args()
page = os.path.abspath(args.page)

HOVER = """(() => {
  const c = document.getElementById('timeline'); c.scrollIntoView({block: 'center'});
  const r = c.getBoundingClientRect(), T = window.vramtraceView.T, out = [];
  for (let k = 0; k < 60; k++) {
    const x = r.left + T.left + (k + 0.5) / 60 * T.pw, y = r.top + T.top + T.ph * (0.3 + 0.6 * ((k * 7) % 10) / 10);
    const t = performance.now();
    c.dispatchEvent(new MouseEvent('mousemove', {clientX: x, clientY: y, bubbles: true}));
    void document.getElementById('tooltip').offsetHeight;
    out.push(performance.now() - t);
  }
  return out;
})()"""

rows = []
for rep in range(args.reps):
    with tempfile.TemporaryDirectory() as profile:
        b = cdp.Browser(args.chromium, profile)
        try:
            targets = b.send("Target.getTargets", session=False)["targetInfos"]
            target = next(t for t in targets if t["type"] == "page")
            b.session = b.send("Target.attachToTarget", {"targetId": target["targetId"], "flatten": True}, session=False)["sessionId"]
            b.send("Page.enable")
            b.send("Emulation.setDeviceMetricsOverride", {"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": False})
            b.send("Page.navigate", {"url": "file://" + page})
            b.wait_event("Page.loadEventFired", timeout=120)
            deadline = time.time() + 120
            while not cdp.evaluate(b, "document.body.dataset.ready") and time.time() < deadline:
                time.sleep(0.05)
            ready = cdp.evaluate(b, "window.vramtraceReadyMs")
            fcp = cdp.evaluate(b, "(performance.getEntriesByName('first-contentful-paint')[0] || {}).startTime || null")
            hovers = cdp.evaluate(b, HOVER)
        finally:
            b.close()
    row = {"fcp_ms": fcp, "ready_ms": ready, "hover_median_ms": statistics.median(hovers), "hover_max_ms": max(hovers)}
    rows.append(row)
    print(f"rep {rep + 1}: " + json.dumps(row), flush=True)

for k in rows[0]:
    v = [r[k] for r in rows if r[k] is not None]
    print(f"{k:16} median {statistics.median(v):9.1f}  (min {min(v):.1f}, max {max(v):.1f}, {len(v)} runs)")
print(f"page: {os.path.getsize(page):,} bytes")
