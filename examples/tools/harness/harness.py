#!/usr/bin/env python3
"""harness: a small reference harness, the Tool process behind
`std/harness#<node type>` (docs/engine.md, "Harness nodes"), on the Python
toolkit (toolkits/python).

Usage: harness.py [TOOLS.json]   (default: tools.json beside this file,
`flow tools tour.json`, which lists all 13 harness declarations; their
fingerprints are the same for every flow). Bind it in flow.toml:

    [tools."std/harness"]
    command = "python3 path/to/examples/tools/harness/harness.py"

Each call gets {harness_config, node, state} and answers a json.Value whose
`state` member, when present, is a patch of state fields the run writes
through its reducers. This reference does the least that shows the shape:

- display nodes (world_model, hypothesis_set, control_state,
  task_graph_node, evidence_store_node, experience_store_node) pass the state
  through (an empty answer);
- update_world_model writes `world_model: {beliefs}`, the values of the
  state's `evidence` entries (only OBSERVATION ones in `observations_only`
  mode, the default);
- verification_gate writes `verification: {passed, layers}`: the enabled
  layers (all 9 by default), passed unless `evidence_sufficiency` is enabled
  and there is no evidence;
- recovery_node writes `recovery: {strategy}`, the first of
  `strategy_order_override` (DIRECT_EDIT by default);
- reviewer_pass writes `review: {findings: [], reopened_tasks: []}`;
- process_concept writes `process_concept`, its concept_id;
- apply_tool_reliability and gather_evidence (with no source tool) change
  nothing.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "toolkits", "python"))
from flowd_toolkit import Toolkit  # noqa: E402

tk = Toolkit.from_file(sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "tools.json"))

LAYERS = [
    "syntax", "unit", "integration", "consistency", "requirements",
    "assumptions", "goal_correctness", "evidence_sufficiency", "output_contract_partial",
]
DISPLAY = [
    "world_model", "hypothesis_set", "control_state", "task_graph_node",
    "evidence_store_node", "experience_store_node",
]


def evidence(state):
    items = state.get("evidence") if isinstance(state, dict) else None
    return [e for e in items or [] if isinstance(e, dict)]


def update_world_model(harness_config, node, state):
    mode = harness_config.get("integration_mode", "observations_only")
    beliefs = [
        e.get("value") for e in evidence(state)
        if mode == "infer_beliefs" or e.get("evidence_type") == "OBSERVATION"
    ]
    return {"state": {"world_model": {"beliefs": beliefs}}}


def verification_gate(harness_config, node, state):
    layers = harness_config.get("enabled_layers") or LAYERS
    passed = "evidence_sufficiency" not in layers or bool(evidence(state))
    return {"state": {"verification": {"passed": passed, "layers": layers}}}


def recovery_node(harness_config, node, state):
    order = harness_config.get("strategy_order_override") or ["DIRECT_EDIT"]
    return {"state": {"recovery": {"strategy": order[0]}}}


def reviewer_pass(harness_config, node, state):
    return {"state": {"review": {"findings": [], "reopened_tasks": []}}}


def process_concept(harness_config, node, state):
    return {"state": {"process_concept": harness_config.get("concept_id", "")}}


def unchanged(harness_config, node, state):
    return {}


ACTIVE = {
    "update_world_model": update_world_model,
    "verification_gate": verification_gate,
    "recovery_node": recovery_node,
    "reviewer_pass": reviewer_pass,
    "process_concept": process_concept,
    "apply_tool_reliability": unchanged,
    "gather_evidence": unchanged,
}

for node_type in DISPLAY:
    tk.handle(f"std/harness#{node_type}", unchanged)
for node_type, fn in ACTIVE.items():
    tk.handle(f"std/harness#{node_type}", fn)

tk.run()
