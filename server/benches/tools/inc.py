#!/usr/bin/env python3
"""inc: the bench's Python Tool process, plain Python 3, raw JSON lines.

Usage: inc.py TOOLS.json   (a `flow tools` document)

Serves every declaration in the document whose tool id is `inc` or
`tally`: `inc(i: Int) -> {i: Int}` answers `{"i": i + 1}` at once, so a
loop of `tool_invoke` nodes can count its steps in state; `tally(i: Int) ->
{i: Int, v: Int}` answers `{"i": i + 1, "v": i + 1}`, so a loop can also
append every result to a list in state. Logs go to stderr only.
"""
import json
import sys

with open(sys.argv[1]) as f:
    doc = json.load(f)
TOOLS = [
    {"tool": t["tool"], "fingerprint": t["fingerprint"], "signature": t["signature"]}
    for p in doc["programs"] for t in p["tools"] if t["tool"].rsplit("#", 1)[-1] in ("inc", "tally")
]
SERVED = {t["tool"] for t in TOOLS}


def send(msg):
    sys.stdout.write(json.dumps(msg, separators=(",", ":")) + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    try:
        msg = json.loads(line)
    except ValueError:
        print("inc: ignored a line that is not JSON", file=sys.stderr)
        continue
    method = msg.get("method")
    if method == "describe":
        send({"jsonrpc": "2.0", "id": msg.get("id"), "result": {"data": "1.0", "tools": TOOLS}})
    elif method == "call":
        p = msg["params"]
        i = p.get("args", {}).get("i")
        if p.get("tool") not in SERVED or not isinstance(i, int) or isinstance(i, bool):
            outcome = {"NotRun": "inc and tally take i, an Int"}
        elif p["tool"].endswith("#tally"):
            outcome = {"Ok": {"i": i + 1, "v": i + 1}}
        else:
            outcome = {"Ok": {"i": i + 1}}
        send({"jsonrpc": "2.0", "method": "reply",
              "params": {"run": p["run"], "call": p["call"], "outcome": outcome}})
    elif method == "cancel":
        pass  # every call is answered at once; nothing to stop
    else:
        print("inc: ignored method", method, file=sys.stderr)
