#!/usr/bin/env python3
"""prompts: a small prompt library, the Tool process behind
`std/prompts#get` (an llm_call's prompt_ref, docs/engine.md "prompt_ref"),
on the Python toolkit. Prompts come from library.json beside this file:

    {"<name>": {"versions": {"1": "<template>", ...}, "labels": {"<label>": 1}}}

get(name, version?, label?) answers the template text of the version asked
for, else the label's version, else the latest; a prompt it does not have
is a Failed reply."""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "toolkits", "python"))
from flowd_toolkit import Toolkit, ToolError  # noqa: E402

tk = Toolkit.from_file(os.path.join(HERE, "tools.json"))
with open(os.path.join(HERE, "library.json")) as f:
    LIBRARY = json.load(f)


@tk.tool("std/prompts#get")
async def get(name: str, version, label) -> str:
    prompt = LIBRARY.get(name)
    if prompt is None:
        raise ToolError(f"no prompt {name}")
    versions = prompt["versions"]
    if version is None and label is not None:
        version = prompt.get("labels", {}).get(label)
        if version is None:
            raise ToolError(f"prompt {name} has no label {label}")
    if version is None:
        version = max(int(v) for v in versions)
    text = versions.get(str(version))
    if text is None:
        raise ToolError(f"prompt {name} has no version {version}")
    return text


tk.run()
