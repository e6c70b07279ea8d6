#!/usr/bin/env python3
"""support_tools: the Tool process behind support.json#lookup, in plain
Python 3 (raw JSON lines, no library), bound by flow.toml beside it.

It answers describe from tools.json (the `flow tools support.json` document,
so its fingerprint is the declaration's own) and looks orders up in a small
table. SUPPORT_DELAY_MS delays each reply (tests use it to crash a run while
a call is out). Logs go to stderr only.
"""
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(HERE, "tools.json")) as f:
    doc = json.load(f)
TOOLS = [
    {"tool": t["tool"], "fingerprint": t["fingerprint"], "signature": t["signature"]}
    for p in doc["programs"] for t in p["tools"] if t["tool"] == "support.json#lookup"
]
ORDERS = {"o-1": ("shipped", "9.9"), "o-2": ("packed", "20")}
DELAY = int(os.environ.get("SUPPORT_DELAY_MS", "0"))


def send(msg):
    sys.stdout.write(json.dumps(msg, separators=(",", ":")) + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    try:
        msg = json.loads(line)
    except ValueError:
        print("support_tools: not JSON: " + line.strip(), file=sys.stderr)
        continue
    method = msg.get("method")
    if method == "describe":
        send({"jsonrpc": "2.0", "id": msg.get("id"), "result": {"data": "1.0", "tools": TOOLS}})
    elif method == "call":
        p = msg["params"]
        if DELAY:
            time.sleep(DELAY / 1000)
        order = p.get("args", {}).get("order_id")
        if p.get("tool") != "support.json#lookup" or not isinstance(order, str):
            outcome = {"NotRun": "lookup takes order_id, a Text"}
        elif order in ORDERS:
            status, total = ORDERS[order]
            # Numbers are written as JSON numbers by value (no floats).
            outcome = {"Ok": {"status": status, "total": "__TOTAL__"}}
            line = json.dumps({"jsonrpc": "2.0", "method": "reply",
                               "params": {"run": p["run"], "call": p["call"], "outcome": outcome}},
                              separators=(",", ":")).replace('"__TOTAL__"', total)
            sys.stdout.write(line + "\n")
            sys.stdout.flush()
            continue
        else:
            outcome = {"Failed": {"message": "no order " + order}}
        send({"jsonrpc": "2.0", "method": "reply",
              "params": {"run": p["run"], "call": p["call"], "outcome": outcome}})
    elif method == "cancel":
        pass
