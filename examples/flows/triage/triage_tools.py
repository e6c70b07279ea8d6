#!/usr/bin/env python3
"""triage_tools: the Tool process behind triage.json#classify, in plain
Python 3 (raw JSON lines, no library), bound by flow.toml beside it.

It answers describe from tools.json (the `flow tools triage.json` document,
so its fingerprint is the declaration's own) and classifies a ticket by its
words. TRIAGE_DELAY_MS delays each reply (tests use it to crash a run while
a call is out). Logs go to stderr only.
"""
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(HERE, "tools.json")) as f:
    doc = json.load(f)
SERVED = "triage.json#classify"
TOOLS = [
    {"tool": t["tool"], "fingerprint": t["fingerprint"], "signature": t["signature"]}
    for p in doc["programs"] for t in p["tools"] if t["tool"] == SERVED
]
DELAY = int(os.environ.get("TRIAGE_DELAY_MS", "0"))
RULES = [
    ("high", "outage", ("down", "outage", "cannot log in", "data loss", "urgent")),
    ("medium", "billing", ("refund", "invoice", "charged", "billing")),
    ("medium", "bug", ("error", "crash", "broken")),
]


def send(msg):
    sys.stdout.write(json.dumps(msg, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def classify(ticket):
    text = ticket.lower()
    for severity, category, words in RULES:
        if any(w in text for w in words):
            return {"severity": severity, "category": category}
    return {"severity": "low", "category": "question"}


for line in sys.stdin:
    try:
        msg = json.loads(line)
    except ValueError:
        print("triage_tools: not JSON: " + line.strip(), file=sys.stderr)
        continue
    method = msg.get("method")
    if method == "describe":
        send({"jsonrpc": "2.0", "id": msg.get("id"), "result": {"data": "1.0", "tools": TOOLS}})
    elif method == "call":
        p = msg["params"]
        if DELAY:
            time.sleep(DELAY / 1000)
        ticket = p.get("args", {}).get("ticket")
        if p.get("tool") != SERVED or not isinstance(ticket, str):
            outcome = {"NotRun": "classify takes ticket, a Text"}
        else:
            outcome = {"Ok": classify(ticket)}
        send({"jsonrpc": "2.0", "method": "reply",
              "params": {"run": p["run"], "call": p["call"], "outcome": outcome}})
