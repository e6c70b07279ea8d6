#!/usr/bin/env python3
"""`kv`: a Tool process on the Python toolkit (toolkits/python).

Usage: kv.py [TOOLS.json]   (the `flow tools` document listing kv.json#put
and kv.json#get; default tools.json beside this file)

  kv.json#put(key: Text, value: Text) -> Unit        stores a value
  kv.json#get(key: Text) -> Text, Failed ToolError   reads it back

Runs with plain python3: the toolkit is found in this repository, or
wherever it is installed (pip install toolkits/python).
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "toolkits", "python"))
from flowd_toolkit import ToolError, Toolkit  # noqa: E402

tk = Toolkit.from_file(sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "tools.json"))
store = {}


# Neither handler ever waits, so both run on the toolkit's event loop
# (`async def`) rather than in a worker thread.
@tk.tool("kv.json#put")
async def put(key: str, value: str) -> None:
    store[key] = value


@tk.tool("kv.json#get")
async def get(key: str) -> str:
    if key not in store:
        raise ToolError(f"no value for {key}")
    return store[key]


tk.run()
