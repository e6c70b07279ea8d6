#!/usr/bin/env python3
"""slow_tool: the Tool process behind slow.json#wait (raw JSON lines, no
library), bound by flow.toml beside it. It answers describe from
tools.json (the `flow tools slow.json` document, so the fingerprint is the
declaration's own) and replies to a call after args.ms milliseconds, each
call on its own thread so a cancel or a second call is never held up."""
import json
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(HERE, "tools.json")) as f:
    doc = json.load(f)
SERVED = "slow.json#wait"
TOOLS = [
    {"tool": t["tool"], "fingerprint": t["fingerprint"], "signature": t["signature"]}
    for p in doc["programs"] for t in p["tools"] if t["tool"] == SERVED
]
LOCK = threading.Lock()


def send(msg):
    with LOCK:
        sys.stdout.write(json.dumps(msg, separators=(",", ":")) + "\n")
        sys.stdout.flush()


def answer(p):
    ms = p.get("args", {}).get("ms")
    if p.get("tool") != SERVED or not isinstance(ms, int):
        outcome = {"NotRun": "wait takes ms, an Int"}
    else:
        time.sleep(max(ms, 0) / 1000)
        outcome = {"Ok": {"waited": ms}}
    send({"jsonrpc": "2.0", "method": "reply",
          "params": {"run": p["run"], "call": p["call"], "outcome": outcome}})


for line in sys.stdin:
    try:
        msg = json.loads(line)
    except ValueError:
        print("slow_tool: not JSON: " + line.strip(), file=sys.stderr)
        continue
    method = msg.get("method")
    if method == "describe":
        send({"jsonrpc": "2.0", "id": msg.get("id"), "result": {"data": "1.0", "tools": TOOLS}})
    elif method == "call":
        threading.Thread(target=answer, args=(msg["params"],), daemon=True).start()
