#!/usr/bin/env python3
"""triage_tools: the Tool process behind triage.json#classify, on the
Python toolkit (toolkits/python), bound by flow.toml beside it.

Declarations come from tools.json (`flow tools triage.json`), so describe
answers with the declaration's own fingerprint. TRIAGE_DELAY_MS delays each
reply (tests use it to crash a run while a call is out); TRIAGE_SEEN names a
file a line is added to as each call comes in (so a test knows the call is
out, not only recorded). Runs with plain
python3: the toolkit is found in this repository, or on PYTHONPATH, or
wherever it is installed.
"""
import asyncio
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "toolkits", "python"))
from flowd_toolkit import Toolkit  # noqa: E402

tk = Toolkit.from_file(os.path.join(HERE, "tools.json"))
DELAY = int(os.environ.get("TRIAGE_DELAY_MS", "0"))
SEEN = os.environ.get("TRIAGE_SEEN")
RULES = [
    ("high", "outage", ("down", "outage", "cannot log in", "data loss", "urgent")),
    ("medium", "billing", ("refund", "invoice", "charged", "billing")),
    ("medium", "bug", ("error", "crash", "broken")),
]


@tk.tool("triage.json#classify")
async def classify(ticket: str) -> dict:
    if SEEN:
        with open(SEEN, "a") as f:
            f.write("classify\n")
    await asyncio.sleep(DELAY / 1000)
    text = ticket.lower()
    for severity, category, words in RULES:
        if any(w in text for w in words):
            return {"severity": severity, "category": category}
    return {"severity": "low", "category": "question"}


tk.run()
