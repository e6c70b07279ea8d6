"""Real runs through the `flow` binary with the Tool processes written on
the toolkit: examples/flows/triage (its classifier) and examples/tools/kv
(PRO-4, TKT-4..TKT-6, BND-3). Each test has its own store in a temp dir.

`FLOW_BIN` names the binary (`.ci/run` sets it); otherwise the debug build
of this checkout is used, and the tests are skipped when there is none.
"""

import json
import os
import subprocess

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")


def flow_bin():
    explicit = os.environ.get("FLOW_BIN")
    if explicit:
        assert os.access(explicit, os.X_OK), f"FLOW_BIN={explicit} is not an executable"
        return explicit
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(REPO, "target"))
    path = os.path.join(target, "debug", "flow")
    if not os.access(path, os.X_OK):
        pytest.skip(f"no flow binary at {path}: cargo build -p flowd --bin flow, or set FLOW_BIN")
    return path


@pytest.fixture
def flow(tmp_path):
    exe = flow_bin()
    data = tmp_path / "data"

    def run(*args, cwd=None, expect=None):
        p = subprocess.run(
            [exe, "--data", str(data), "--json", *args],
            cwd=cwd or REPO, capture_output=True, text=True, timeout=120,
        )
        if expect is not None:
            assert p.returncode == expect, f"exit {p.returncode}\n{p.stdout}\n{p.stderr}"
        return json.loads(p.stdout)

    return run


def replies(flow, run):
    h = flow("history", run, "--kind", "Reply", expect=0)
    return [f["fact"]["outcome"] for f in h["facts"]]


def test_triage_classifier_on_the_toolkit(flow):
    out = flow("run", "examples/flows/triage/triage.json", "--allow", "--input",
               '{"ticket":"The site is down for everyone","customer":"Acme"}', expect=3)
    assert out["state"] == "paused"
    run, call = out["run"], out["pending"][0]["call"]
    # The classifier's reply is the first Reply: decoded at the declared
    # record, the enum written by its constructor name.
    assert replies(flow, run)[0] == {"Ok": {"category": "outage", "severity": "high"}}
    done = flow("resume", run, "--call", call, "--reply", '{"Ok":{"decision":"send"}}', "--allow", expect=0)
    assert done["state"] == "completed" and done["output"]["severity"] == "high"
    assert flow("replay", run, expect=0)["verdict"] == "matched"
    # A fork from the classify checkpoint classifies the new ticket with a
    # freshly started process.
    forked = flow("fork", run, "--checkpoint", "3", "--set",
                  'ticket="I was charged twice, please refund"', "--allow", expect=3)
    assert "(medium)" in forked["pending"][0]["args"]["prompt"]
    assert {"Ok": {"category": "billing", "severity": "medium"}} in replies(flow, forked["run"])

def test_kv_put_then_get_and_failed(flow, tmp_path):
    (tmp_path / "kv.json").write_text(json.dumps({
        "spec_version": "1.0.0",
        "id": "kv-demo",
        "state_schema": {"type": "object", "properties": {"k": {"type": "string"}, "v": {"type": "string"}}},
        "tools": {
            "put": {"tool_ref": "kv:put", "input_schema": {"key": {"type": "string"}, "value": {"type": "string"}},
                    "output_schema": {"type": "null"}},
            "get": {"tool_ref": "kv:get", "input_schema": {"key": {"type": "string"}},
                    "output_schema": {"type": "string"}},
        },
        "nodes": [
            {"id": "start", "type": "input", "output_schema": {"k": {"type": "string"}, "v": {"type": "string"}}},
            {"id": "put", "type": "tool_invoke", "tool_id": "put", "input_map": {"key": "$.state.k", "value": "$.state.v"}},
            {"id": "get", "type": "tool_invoke", "tool_id": "get", "input_map": {"key": "$.state.k"}},
            {"id": "miss", "type": "tool_invoke", "tool_id": "get", "input_map": {"key": "$.state.v"}},
            {"id": "done", "type": "output"},
        ],
        "edges": [{"from": "start", "to": "put"}, {"from": "put", "to": "get"},
                  {"from": "get", "to": "miss"}, {"from": "miss", "to": "done"}],
    }))
    kv = os.path.join(REPO, "examples", "tools", "kv")
    (tmp_path / "flow.toml").write_text(
        f'[tools."kv.json"]\ncommand = "python3 {kv}/kv.py {kv}/tools.json"\n')
    out = flow("run", str(tmp_path / "kv.json"), "--allow", "--input", '{"k":"key","v":"vé\\n"}', expect=1)
    assert out["state"] == "faulted"
    assert replies(flow, out["run"]) == [
        {"Ok": None},
        {"Ok": "vé\n"},
        {"Failed": {"message": "no value for vé\n"}},
    ]


def test_committed_documents_are_what_flow_tools_prints(flow):
    """The declarations the examples serve are today's: a stale tools.json
    would describe other fingerprints and refuse every run."""
    for flow_file, doc in [
        ("examples/flows/triage/triage.json", "examples/flows/triage/tools.json"),
        ("examples/tools/harness/tour.json", "examples/tools/harness/tools.json"),
        ("examples/flows/harness/harness.json", "examples/flows/harness/tools.json"),
        ("examples/flows/prompts/summary.json", "examples/flows/prompts/tools.json"),
        (os.path.join(FIXTURES, "kit.json"), os.path.join(FIXTURES, "tools.json")),
    ]:
        printed = flow("tools", flow_file)
        with open(os.path.join(REPO, doc)) as f:
            assert json.load(f) == printed, f"{doc} is stale: flow tools {flow_file} > {doc}"
