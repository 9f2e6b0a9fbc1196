#!/usr/bin/env python3
"""Drive headless Chromium through the DevTools protocol, for the report page's browser tests.

Usage: cdp.py CHROMIUM PAGE.html < commands.jsonl > results.jsonl

Chromium is started with --remote-debugging-pipe: protocol messages are NUL-terminated JSON on
file descriptors 3 (to the browser) and 4 (from it), so no port, no websocket and nothing but the
standard library. Each input line is one command; each output line is its result:

  {"op": "eval", "expr": "JS"}                      -> {"value": ...}  (promises are awaited)
  {"op": "mouse", "type": "mouseMoved", "x": 1, "y": 2[, "button": "left"][, "modifiers": 8]}
                                                    (modifiers: 1 Alt, 2 Ctrl, 4 Meta, 8 Shift)
  {"op": "wheel", "x": 1, "y": 2, "deltaY": -100}
  {"op": "key", "key": "ArrowRight"}
  {"op": "screenshot", "path": "out.png"[, "clip": [x, y, width, height]]}  (page coordinates)
  {"op": "wait", "expr": "JS condition", "timeout": 10}
  {"op": "viewport", "width": 1280, "height": 1400}  (the page's window size; 1280x900 at first)

The last line is {"console_errors": [...], "exceptions": [...]}: everything the page logged as
an error or threw, from loading to the end.
"""
import base64
import json
import os
import subprocess
import sys
import tempfile
import time

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-pipe",
]


class Browser:
    def __init__(self, binary, profile):
        to_r, self.to_w = os.pipe()
        self.from_r, from_w = os.pipe()
        os.set_inheritable(to_r, True)
        os.set_inheritable(from_w, True)

        def fds():
            os.dup2(to_r, 3)
            os.dup2(from_w, 4)

        self.proc = subprocess.Popen(
            [binary, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
            # Not close_fds: Popen would close 3 and 4 after preexec_fn has put the pipes there.
            preexec_fn=fds,
            close_fds=False,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_r)
        os.close(from_w)
        self.buf = b""
        self.next_id = 0
        self.events = []
        self.session = None

    def send(self, method, params=None, session=True, timeout=60):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        os.write(self.to_w, json.dumps(msg).encode() + b"\0")
        deadline = time.time() + timeout
        while True:
            m = self.read(deadline)
            if m.get("id") == self.next_id:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result", {})
            self.events.append(m)

    def read(self, deadline):
        while b"\0" not in self.buf:
            if time.time() > deadline:
                raise TimeoutError("no answer from chromium")
            chunk = os.read(self.from_r, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed the pipe")
            self.buf += chunk
        raw, self.buf = self.buf.split(b"\0", 1)
        return json.loads(raw)

    def wait_event(self, method, timeout=60):
        deadline = time.time() + timeout
        for i, m in enumerate(self.events):
            if m.get("method") == method:
                return self.events.pop(i)
        while True:
            m = self.read(deadline)
            if m.get("method") == method:
                return m
            self.events.append(m)

    def close(self):
        try:
            self.send("Browser.close", session=False, timeout=5)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def evaluate(b, expr):
    r = b.send("Runtime.evaluate", {"expression": expr, "returnByValue": True, "awaitPromise": True})
    if "exceptionDetails" in r:
        raise RuntimeError(f"{expr}: {r['exceptionDetails'].get('exception', {}).get('description')}")
    return r["result"].get("value")


def main():
    binary, page = sys.argv[1], os.path.abspath(sys.argv[2])
    with tempfile.TemporaryDirectory() as profile:
        b = Browser(binary, profile)
        try:
            run(b, page)
        finally:
            b.close()


def run(b, page):
    targets = b.send("Target.getTargets", session=False)["targetInfos"]
    target = next(t for t in targets if t["type"] == "page")
    b.session = b.send(
        "Target.attachToTarget", {"targetId": target["targetId"], "flatten": True}, session=False
    )["sessionId"]
    for domain in ("Runtime", "Log", "Page"):
        b.send(f"{domain}.enable")
    b.send(
        "Emulation.setDeviceMetricsOverride",
        {"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": False},
    )
    started = time.time()
    b.send("Page.navigate", {"url": "file://" + page})
    b.wait_event("Page.loadEventFired")
    out = sys.stdout
    out.write(json.dumps({"loaded_s": time.time() - started}) + "\n")
    out.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        c = json.loads(line)
        op = c["op"]
        try:
            if op == "eval":
                res = {"value": evaluate(b, c["expr"])}
            elif op == "mouse":
                b.send(
                    "Input.dispatchMouseEvent",
                    {
                        "type": c["type"],
                        "x": c["x"],
                        "y": c["y"],
                        "button": c.get("button", "none"),
                        "clickCount": 1 if c.get("button") else 0,
                        "modifiers": c.get("modifiers", 0),
                    },
                )
                res = {"value": None}
            elif op == "wheel":
                b.send(
                    "Input.dispatchMouseEvent",
                    {"type": "mouseWheel", "x": c["x"], "y": c["y"], "deltaX": 0, "deltaY": c["deltaY"]},
                )
                res = {"value": None}
            elif op == "key":
                for kind in ("keyDown", "keyUp"):
                    b.send("Input.dispatchKeyEvent", {"type": kind, "key": c["key"], "code": c["key"]})
                res = {"value": None}
            elif op == "viewport":
                b.send(
                    "Emulation.setDeviceMetricsOverride",
                    {"width": c["width"], "height": c["height"], "deviceScaleFactor": 1, "mobile": False},
                )
                res = {"value": None}
            elif op == "screenshot":
                params = {"format": "png", "captureBeyondViewport": True}
                if "clip" in c:
                    x, y, w, h = c["clip"]
                    params["clip"] = {"x": x, "y": y, "width": w, "height": h, "scale": 1}
                data = b.send("Page.captureScreenshot", params)
                with open(c["path"], "wb") as f:
                    f.write(base64.b64decode(data["data"]))
                res = {"value": c["path"]}
            elif op == "wait":
                deadline = time.time() + c.get("timeout", 10)
                value = evaluate(b, c["expr"])
                while not value and time.time() < deadline:
                    time.sleep(0.05)
                    value = evaluate(b, c["expr"])
                res = {"value": value}
            else:
                res = {"error": f"unknown op {op}"}
        except Exception as e:  # one failed command is reported, the rest still run
            res = {"error": str(e)}
        out.write(json.dumps(res) + "\n")
        out.flush()
    errors, exceptions = [], []
    for m in b.events:
        p = m.get("params", {})
        if m.get("method") == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            errors.append(" ".join(str(a.get("value", a.get("description"))) for a in p.get("args", [])))
        elif m.get("method") == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
            errors.append(p["entry"].get("text", ""))
        elif m.get("method") == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails", {})
            exceptions.append(d.get("exception", {}).get("description") or d.get("text", ""))
    out.write(json.dumps({"console_errors": errors, "exceptions": exceptions}) + "\n")


if __name__ == "__main__":
    main()
