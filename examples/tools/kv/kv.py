#!/usr/bin/env python3
"""`kv`: a Tool process in plain Python 3, raw JSON lines, no library.

It proves the Tool process protocol is language neutral: JSON-RPC 2.0, one
message per line on stdin/stdout (host-boundary.txt, "The Tool process
protocol").

Usage: kv.py [TOOLS.json]   (the `flow tools` document listing kv.json#put
and kv.json#get; default tools.json in the working directory)

  kv.json#put(key: Text, value: Text) -> Unit        stores a value
  kv.json#get(key: Text) -> Text, Failed ToolError   reads it back

It answers describe from the document (so its fingerprints are the
declarations' own), answers a call that does not name a served tool or
whose args are not Texts with NotRun (its code never ran), and logs to
stderr only.
"""
import json
import sys

doc_path = sys.argv[1] if len(sys.argv) > 1 else "tools.json"
with open(doc_path) as f:
    doc = json.load(f)

# describe lists each tool this process serves, exactly as the document does.
SERVED = ("kv.json#put", "kv.json#get")
tools = [
    {"tool": t["tool"], "fingerprint": t["fingerprint"], "signature": t["signature"]}
    for program in doc["programs"]
    for t in program["tools"]
    if t["tool"] in SERVED
]
store = {}


def send(msg):
    sys.stdout.write(json.dumps(msg, ensure_ascii=False, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def reply(params, outcome):
    send({"jsonrpc": "2.0", "method": "reply",
          "params": {"run": params["run"], "call": params["call"], "outcome": outcome}})


def call(p):
    tool, args = p["tool"], p.get("args", {})
    texts = {k: v for k, v in args.items() if isinstance(v, str)}
    if tool == "kv.json#put":
        if "key" not in texts or "value" not in texts:
            return reply(p, {"NotRun": "put takes key and value, both Text"})
        store[texts["key"]] = texts["value"]
        return reply(p, {"Ok": None})
    if tool == "kv.json#get":
        if "key" not in texts:
            return reply(p, {"NotRun": "get takes key, a Text"})
        if texts["key"] not in store:
            return reply(p, {"Failed": {"message": "no value for " + texts["key"]}})
        return reply(p, {"Ok": store[texts["key"]]})
    reply(p, {"NotRun": "this process serves no declaration " + tool})


for line in sys.stdin:
    try:
        msg = json.loads(line)
    except ValueError:
        print("kv: ignored a line that is not JSON", file=sys.stderr)
        continue
    method = msg.get("method")
    if method == "describe":
        send({"jsonrpc": "2.0", "id": msg["id"], "result": {"data": "1.0", "tools": tools}})
    elif method == "call":
        call(msg["params"])
    elif method == "cancel":
        pass  # every call is answered at once; nothing to stop
    else:
        print("kv: ignored method", method, file=sys.stderr)
