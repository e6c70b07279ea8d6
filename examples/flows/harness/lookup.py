#!/usr/bin/env python3
"""lookup: harness.json#lookup, the evidence source of the gather node, on
the Python toolkit (declarations from tools.json, `flow tools harness.json`).
It answers a fixed fact per known word of the question."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "toolkits", "python"))
from flowd_toolkit import Toolkit  # noqa: E402

tk = Toolkit.from_file(os.path.join(HERE, "tools.json"))
FACTS = {
    "rust": "Rust has no garbage collector.",
    "python": "Python's reference implementation is CPython.",
}


@tk.tool("harness.json#lookup")
async def lookup(question: str) -> dict:
    words = question.lower().replace("?", " ").split()
    return {"facts": [FACTS[w] for w in words if w in FACTS]}


tk.run()
