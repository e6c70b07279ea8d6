"""The cancelled request is answered by nothing (MCPS-3), seen on the wire:
plain JSON-RPC lines to `flow mcp` (the 2025-11-25 handshake, a string
request id), no SDK in between to drop a late answer. Also checks that
ng.flowla/request keeps a string id a string (MCPS-7). Run by
tests/mcp.rs as `wire.py FLOW DATA`."""
import json
import os
import select
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SLOW = os.path.join(HERE, "slow", "slow.json")
DEADLINE = time.monotonic() + 60


def check(cond, what, detail=None):
    if not cond:
        raise AssertionError(what + ("" if detail is None else f": {detail!r}"))


class Wire:
    def __init__(self, flow, data):
        self.p = subprocess.Popen([flow, "--data", data, "mcp", "--allow"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=sys.stderr)
        self.buf = b""
        self.seen = []

    def send(self, msg):
        self.p.stdin.write((json.dumps(msg) + "\n").encode())
        self.p.stdin.flush()

    def read(self):
        while b"\n" not in self.buf:
            left = DEADLINE - time.monotonic()
            check(left > 0, "the server answered in time",
                  [m.get("method") or m.get("id") for m in self.seen[-5:]])
            r, _, _ = select.select([self.p.stdout], [], [], left)
            if r:
                chunk = os.read(self.p.stdout.fileno(), 65536)
                check(chunk, "the server is still there")
                self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        msg = json.loads(line)
        self.seen.append(msg)
        return msg

    def request(self, id, method, params):
        self.send({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
        while True:
            m = self.read()
            if m.get("id") == id and "method" not in m:
                return m

    def tool(self, id, name, args):
        r = self.request(id, "tools/call", {"name": name, "arguments": args})
        return r["result"]["structuredContent"]


def main():
    w = Wire(sys.argv[1], sys.argv[2])
    try:
        init = w.request(0, "initialize", {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "wire", "version": "1"}})
        check("result" in init, "initialized", init)
        w.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        w.send({"jsonrpc": "2.0", "id": "req-7", "method": "tools/call", "params": {
            "name": "run", "arguments": {"path": SLOW, "input": {"ms": 600000}},
            "_meta": {"progressToken": "tok-7"}}})
        while True:
            m = w.read()
            if m.get("method") == "notifications/progress":
                break
        p = m["params"]
        check(p["progressToken"] == "tok-7" and p["progress"] == 1, "token copied, progress 1", p)
        meta = p["_meta"]
        check(meta["ng.flowla/request"] == "req-7", "a string request id stays a string", meta)
        run = meta["ng.flowla/run"]
        n = 1
        while True:
            n += 1
            h = w.tool(n, "history", {"run": run, "kind": "Call"})
            if h["page"]["total"] == 1:
                break
            time.sleep(0.1)
        w.send({"jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": {"requestId": "req-7", "reason": "test"}})
        while True:
            n += 1
            if w.tool(n, "history", {"run": run})["state"] == "halted":
                break
            time.sleep(0.1)
        # Give a late answer every chance to show up, then look.
        time.sleep(1)
        n += 1
        w.request(n, "ping", {})
        answers = [m for m in w.seen if m.get("id") == "req-7"]
        check(answers == [], "the cancelled request is answered by nothing", answers)
        print("wire: ok")
    finally:
        w.p.stdin.close()
        try:
            w.p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            w.p.kill()
            w.p.wait()


if __name__ == "__main__":
    main()
