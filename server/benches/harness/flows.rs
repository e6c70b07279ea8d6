//! The bench's flows and their Tool bindings, written into the bench's temp
//! dir: a Python Tool (`benches/tools/inc.py`, module `count.json`, tool
//! `inc(i) -> {i: i + 1}`) and the Rust `calc` example (module `calc.json`,
//! tool `add(a, b) -> Int`), bound by one flow.toml for `flow serve --tools`.

use serde_json::{Value as Json, json};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The Python Tool's module: flows submitted with `name: count.json`.
pub const PY_MODULE: &str = "count.json";
/// The Rust Tool's module: flows submitted with `name: calc.json`.
pub const RUST_MODULE: &str = "calc.json";

fn inc_decl() -> Json {
    json!({"tool_ref": "bench:inc",
        "input_schema": {"i": {"type": "integer"}},
        "output_schema": {"type": "object", "properties": {"i": {"type": "integer"}}, "required": ["i"]}})
}

fn counter_state() -> Json {
    json!({"type": "object", "properties": {
        "i": {"type": "integer"}, "n": {"type": "integer"}, "answer": {"type": "object"}}})
}

/// Counts `i` up to `n` (input) by one `inc` Tool step per loop turn, then
/// pauses at `gate`; a reply `{"more": true}` pauses there again, `{"more":
/// false}` ends the run. So one run gives many resumes after the same
/// history, and the program is the same whatever `n` is. One node entry per
/// step (the loop is a conditional edge), so `max_steps` is above the
/// longest `n` plus the gate's turns.
pub fn counter_loop(max_steps: usize) -> Json {
    json!({"spec_version": "1.0.0", "id": "bench-counter",
    "harness_meta": {"enabled": false, "max_steps": max_steps},
    "state_schema": counter_state(),
    "tools": {"inc": inc_decl()},
    "nodes": [
        {"id": "start", "type": "input",
         "output_schema": {"i": {"type": "integer"}, "n": {"type": "integer"}}},
        {"id": "step", "type": "tool_invoke", "tool_id": "inc", "input_map": {"i": "$.state.i"}},
        {"id": "gate", "type": "hitl_breakpoint", "prompt": "go on?",
         "resume_schema": {"type": "object", "properties": {"more": {"type": "boolean"}}, "required": ["more"]},
         "output_key": "answer"},
        {"id": "again", "type": "condition",
         "branches": [{"condition": {"type": "expr", "expr": "$.state.answer.more == true"}, "target": "gate"}],
         "default_target": "done"},
        {"id": "done", "type": "output", "exit_code": "success"}
    ],
    "edges": [
        {"type": "direct", "from": "start", "to": "step"},
        {"type": "conditional", "from": "step",
         "branches": [{"condition": {"type": "expr", "expr": "$.state.i < $.state.n"}, "to": "step"}],
         "default_target": "gate"},
        {"type": "direct", "from": "gate", "to": "again"}
    ]})
}

/// One `inc` step through the Python Tool: input `{i}`.
pub fn one_step_python() -> Json {
    json!({"spec_version": "1.0.0", "id": "bench-one-py",
    "state_schema": counter_state(),
    "tools": {"inc": inc_decl()},
    "nodes": [
        {"id": "start", "type": "input", "output_schema": {"i": {"type": "integer"}}},
        {"id": "step", "type": "tool_invoke", "tool_id": "inc", "input_map": {"i": "$.state.i"}},
        {"id": "done", "type": "output", "exit_code": "success"}
    ],
    "edges": [
        {"type": "direct", "from": "start", "to": "step"},
        {"type": "direct", "from": "step", "to": "done"}
    ]})
}

/// One `add` step through the Rust `calc` Tool: input `{a, b}`.
pub fn one_step_rust() -> Json {
    json!({"spec_version": "1.0.0", "id": "bench-one-rs",
    "state_schema": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
    "tools": {"add": {"tool_ref": "bench:add",
        "input_schema": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "output_schema": {"type": "integer"}}},
    "nodes": [
        {"id": "start", "type": "input",
         "output_schema": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
        {"id": "step", "type": "tool_invoke", "tool_id": "add", "input_map": {"a": "$.state.a", "b": "$.state.b"}},
        {"id": "done", "type": "output", "exit_code": "success"}
    ],
    "edges": [
        {"type": "direct", "from": "start", "to": "step"},
        {"type": "direct", "from": "step", "to": "done"}
    ]})
}

/// The Python interpreter itself: `python3` on PATH may be a launcher
/// script (pyenv's shim costs ~150 ms per start), which would be measured
/// as the server's cost of starting a Tool process.
pub fn python() -> PathBuf {
    let out = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .expect("python3");
    assert!(out.status.success(), "python3 does not run");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// Writes the bindings into `dir` and returns the flow.toml: the Python
/// Tool answers describe from a `flow tools` document made here for
/// `count.json` (so its fingerprints are the declarations' own); `calc`
/// answers from the example's committed document.
pub fn write_bindings(dir: &Path, release: &Path) -> PathBuf {
    let flow = PathBuf::from(env!("CARGO_BIN_EXE_flow"));
    let calc = release.join("flow-example-calc");
    assert!(
        calc.exists(),
        "{} is missing: cargo build --release -p flow-toolkit --bin flow-example-calc",
        calc.display()
    );
    let repo = super::repo();
    let src = dir.join(PY_MODULE);
    std::fs::write(&src, one_step_python().to_string()).expect("count.json");
    let out = Command::new(&flow)
        .arg("tools")
        .arg(&src)
        .output()
        .expect("flow tools");
    assert!(
        out.status.success(),
        "flow tools {}: {}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let doc = dir.join("count-tools.json");
    let python = python();
    std::fs::write(&doc, &out.stdout).expect("count-tools.json");
    let toml = format!(
        "[tools.\"{PY_MODULE}\"]\ncommand = \"{} {} {}\"\n\n[tools.\"{RUST_MODULE}\"]\ncommand = \"{} {}\"\n",
        python.display(),
        repo.join("server/benches/tools/inc.py").display(),
        doc.display(),
        calc.display(),
        repo.join("examples/tools/calc/tools.json").display(),
    );
    let path = dir.join("flow.toml");
    std::fs::write(&path, toml).expect("flow.toml");
    path
}

/// `tally(i) -> {i: i + 1, v: i + 1}`: an `inc` whose `v` a loop appends.
fn tally_decl() -> Json {
    json!({"tool_ref": "bench:tally",
        "input_schema": {"i": {"type": "integer"}},
        "output_schema": {"type": "object",
            "properties": {"i": {"type": "integer"}, "v": {"type": "integer"}},
            "required": ["i", "v"]}})
}

/// How a [`steps_loop`] treats its state.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Accumulate {
    /// Each step replaces the counter `i` (the state stays the same size).
    No,
    /// Each step also appends its result to `all` (reducer `append`), so
    /// the state grows by one element per step.
    Yes,
}

/// W1 (issue 16): `n` (input) sequential durable Tool steps in one run,
/// a loop of one `tool_invoke` node counting `i` up to `n`; with
/// `gate_first`, the run first pauses at a `hitl_breakpoint` (so a
/// subscriber can follow it before its steps start). Declares `inc` and
/// `tally` whichever it calls, so one Tool document serves every variant.
pub fn steps_loop(accumulate: Accumulate, gate_first: bool, max_steps: usize) -> Json {
    let (tool, output_map) = match accumulate {
        Accumulate::No => ("inc", json!({"i": "$.state.i"})),
        Accumulate::Yes => ("tally", json!({"i": "$.state.i", "v": "$.state.all"})),
    };
    let first = if gate_first { "gate" } else { "step" };
    let mut nodes = vec![
        json!({"id": "start", "type": "input",
            "output_schema": {"i": {"type": "integer"}, "n": {"type": "integer"}}}),
        json!({"id": "step", "type": "tool_invoke", "tool_id": tool,
            "input_map": {"i": "$.state.i"}, "output_map": output_map}),
        json!({"id": "done", "type": "output", "exit_code": "success"}),
    ];
    let mut edges = vec![
        json!({"type": "direct", "from": "start", "to": first}),
        json!({"type": "conditional", "from": "step",
            "branches": [{"condition": {"type": "expr", "expr": "$.state.i < $.state.n"}, "to": "step"}],
            "default_target": "done"}),
    ];
    if gate_first {
        nodes.push(
            json!({"id": "gate", "type": "hitl_breakpoint", "prompt": "go?",
            "resume_schema": {"type": "object"}, "output_key": "answer"}),
        );
        edges.push(json!({"type": "direct", "from": "gate", "to": "step"}));
    }
    json!({"spec_version": "1.0.0", "id": "bench-steps",
    "harness_meta": {"enabled": false, "max_steps": max_steps},
    "state_schema": {"type": "object", "properties": {
        "i": {"type": "integer"}, "n": {"type": "integer"}, "answer": {"type": "object"},
        "all": {"type": "array", "items": {"type": "integer"}, "reducer": "append"}}},
    "tools": {"inc": inc_decl(), "tally": tally_decl()},
    "nodes": nodes, "edges": edges})
}
