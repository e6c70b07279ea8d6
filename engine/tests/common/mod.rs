//! Shared test support for the interpreter tests: loading run flows from
//! `engine/tests/flows/run/`, a recording driver that keeps the history a
//! host would write, and a compact text form of effects for exact
//! assertions.
//!
//! Offline conventions: every reply is given by the test itself (no Tool
//! runs); the recorded history is replayed at the end of a test and must
//! come back `matched` (or `incomplete` for a paused run).

#![allow(dead_code)]

use flow_abi::fact::Fact;
use flow_abi::protocol::Outcome;
use flow_engine::machine::{Effect, Ending, Machine};
use flow_engine::program::Program;
use flow_engine::replay::{Verdict, replay};
use serde_json::{Value as Json, json};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

pub fn flows_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/flows/run")
}

/// Reads `flows/run/<name>.json`: `{"about": …, "flow": {…}}`.
pub fn flow_doc(name: &str) -> Json {
    let path = flows_dir().join(format!("{name}.json"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let doc = flow_abi::json::parse(&text).unwrap_or_else(|e| panic!("{name}: {e:?}"));
    assert!(
        doc.get("about").and_then(Json::as_str).is_some(),
        "{name}: say what the flow is about"
    );
    doc["flow"].clone()
}

/// Loads a program whose root is `names[0]`, each file as module
/// `<name>.json`.
pub fn program(names: &[&str]) -> Arc<Program> {
    let mut files = BTreeMap::new();
    for n in names {
        files.insert(format!("{n}.json"), flow_doc(n));
    }
    program_of(files, &format!("{}.json", names[0]))
}

pub fn program_of(files: BTreeMap<String, Json>, root: &str) -> Arc<Program> {
    Arc::new(Program::load(&files, root).unwrap_or_else(|e| {
        panic!(
            "{root}: {}",
            e.diagnostics
                .iter()
                .map(|(m, d)| format!("{m}: {d}"))
                .collect::<Vec<_>>()
                .join("\n")
        )
    }))
}

/// One effect as a line: `Checkpoint root node`, `Call c1:root#1 tool
/// {args}`, `Close c1:root#1 reason`, `Deadline c1:root#1 60`,
/// `End Completed exit {output}` or `End Faulted why`.
pub fn line(e: &Effect) -> String {
    let c = flow_abi::json::canonical;
    match e {
        Effect::Call {
            call,
            tool,
            args,
            nested,
            ..
        } => match nested {
            Some(m) => format!("Call {call} {tool} nested={m} {}", c(args)),
            None => format!("Call {call} {tool} {}", c(args)),
        },
        Effect::Checkpoint { task, node, .. } | Effect::Changed { task, node, .. } => {
            format!("Checkpoint {task} {node}")
        }
        Effect::Close { call, reason } => format!("Close {call} {reason}"),
        Effect::Deadline { call, seconds } => format!("Deadline {call} {seconds}"),
        Effect::End(Ending::Completed { exit, output }) => {
            format!("End Completed {exit} {}", c(output))
        }
        Effect::End(Ending::Faulted(why)) => format!("End Faulted {why}"),
    }
}

pub fn lines(effects: &[Effect]) -> Vec<String> {
    effects.iter().map(line).collect()
}

/// Lines without the Checkpoints (most tests care about calls and ends).
pub fn calls(effects: &[Effect]) -> Vec<String> {
    effects
        .iter()
        .filter(|e| !matches!(e, Effect::Checkpoint { .. } | Effect::Changed { .. }))
        .map(line)
        .collect()
}

/// The nodes of the Checkpoints, as `task:node`.
pub fn checkpoints(effects: &[Effect]) -> Vec<String> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Checkpoint { task, node, .. } | Effect::Changed { task, node, .. } => {
                Some(format!("{task}:{node}"))
            }
            _ => None,
        })
        .collect()
}

pub fn ok(v: Json) -> Outcome {
    Outcome::Ok(v)
}

pub fn failed(message: &str) -> Outcome {
    Outcome::Failed(json!({"code": "test", "message": message}))
}

pub fn text(t: &str) -> Outcome {
    Outcome::Ok(json!({ "text": t }))
}

/// A run as a host keeps it: the machine, every effect so far, and the
/// recorded facts.
pub struct Run {
    pub program: Arc<Program>,
    pub module: String,
    pub machine: Machine,
    pub effects: Vec<Effect>,
    pub facts: Vec<Json>,
}

/// The run id of the histories these tests record.
pub const TEST_RUN: &str = "run-00000000000000000000000000";

/// Recorded facts (kept as JSON so tests can tamper with them) as the
/// typed facts replay takes; every one must read.
pub fn typed(facts: &[Json]) -> Vec<Fact> {
    facts
        .iter()
        .map(|f| Fact::from_json(f).unwrap_or_else(|e| panic!("{f}: {e}")))
        .collect()
}

pub fn start_fact(module: &str, input: &Json) -> Json {
    json!({"fact": "Start", "n": 1, "run": TEST_RUN, "data": "1.0",
        "entry": {"module": module, "function": "main"},
        "program": "sha256:0", "sources": [], "input": input})
}

impl Run {
    /// Starts `module` of `program` with `input`; the first effects are
    /// returned and recorded.
    pub fn start(program: &Arc<Program>, module: &str, input: Json) -> (Run, Vec<Effect>) {
        let (mut machine, effects) = Machine::start(program.clone(), module, &input)
            .unwrap_or_else(|e| panic!("start refused: {e}"));
        let effects = machine.settle(effects);
        let mut run = Run {
            program: program.clone(),
            module: module.to_string(),
            machine,
            effects: Vec::new(),
            facts: vec![start_fact(module, &input)],
        };
        run.take(&effects);
        (run, effects)
    }

    /// Loads `name` as the only module and starts it.
    pub fn of(name: &str, input: Json) -> (Run, Vec<Effect>) {
        let p = program(&[name]);
        Run::start(&p, &format!("{name}.json"), input)
    }

    fn take(&mut self, effects: &[Effect]) {
        for e in effects {
            if let Some(f) = e.fact() {
                let n = self.facts.len() as u64 + 1;
                self.facts.push(f.numbered(n).into_json());
            }
        }
        self.effects.extend(effects.iter().cloned());
    }

    /// Records the Reply, feeds it and records what follows.
    pub fn feed(&mut self, call: &str, outcome: Outcome) -> Vec<Effect> {
        let n = self.facts.len() as u64 + 1;
        self.facts
            .push(json!({"fact": "Reply", "n": n, "call": call, "outcome": outcome.to_json()}));
        let effects = self
            .machine
            .feed(call, &outcome)
            .unwrap_or_else(|e| panic!("feed {call}: {e}"));
        let effects = self.machine.settle(effects);
        self.take(&effects);
        effects
    }

    /// A durable deadline passed.
    pub fn expire(&mut self, call: &str) -> Vec<Effect> {
        let effects = self
            .machine
            .expire(call)
            .unwrap_or_else(|e| panic!("expire {call}: {e}"));
        let effects = self.machine.settle(effects);
        self.take(&effects);
        effects
    }

    pub fn ending(&self) -> Option<&Ending> {
        self.machine.ending()
    }

    /// The output of a completed run.
    pub fn output(&self) -> Json {
        match self.ending() {
            Some(Ending::Completed { output, .. }) => output.clone(),
            other => panic!("not completed: {other:?}"),
        }
    }

    /// The fault of a faulted run.
    pub fn fault(&self) -> String {
        match self.ending() {
            Some(Ending::Faulted(why)) => why.clone(),
            other => panic!("not faulted: {other:?}"),
        }
    }

    /// Open call ids in order.
    pub fn open(&self) -> Vec<String> {
        self.machine
            .open_calls()
            .into_iter()
            .map(|c| c.call.to_string())
            .collect()
    }

    /// The recorded history replays `matched` when the run ended, else
    /// `incomplete`.
    pub fn assert_replays(&self) {
        let r = replay(self.program.clone(), typed(&self.facts));
        let want = if self.ending().is_some() {
            Verdict::Matched
        } else {
            Verdict::Incomplete
        };
        assert_eq!(r.verdict, want, "replay of {}", self.module);
    }
}

/// The fact numbers renumbered from 1 after an edit.
pub fn renumber(facts: &mut [Json]) {
    for (i, f) in facts.iter_mut().enumerate() {
        f["n"] = json!(i as u64 + 1);
    }
}

/// The verdict of replaying `facts` as (fact, reason) of a divergence.
pub fn diverged_at(program: &Arc<Program>, facts: &[Json]) -> (u64, String) {
    match replay(program.clone(), typed(facts)).verdict {
        Verdict::Diverged { fact, reason } => (fact, reason),
        v => panic!("expected diverged, got {v:?}"),
    }
}
