//! Replay: re-derive a recorded history without any Tool.
//!
//! DESIGN §3: "Replay verdicts: `matched` (every recorded fact re-derived,
//! same End), `incomplete` (every recorded fact matched but the record ends
//! first, e.g. a paused or crashed run), `diverged` with the fact number and
//! a reason (other tool, other args, other node, a call the record lacks, a
//! different ending)."
//!
//! Recorded Replies are fed to the machine as they come; every other fact
//! must equal, in order, the next fact the machine derives. Resume uses the
//! same walk: the machine it ends with continues live, and the effects it
//! derived past the end of the record are the ones still to record.

use crate::machine::{Effect, Machine};
use crate::program::Program;
use flow_abi::protocol::Outcome;
use serde_json::Value as Json;
use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;

/// The verdict of a replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Matched,
    Incomplete,
    Diverged { fact: u64, reason: String },
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Matched => f.write_str("matched"),
            Verdict::Incomplete => f.write_str("incomplete"),
            Verdict::Diverged { fact, reason } => write!(f, "diverged at fact {fact}: {reason}"),
        }
    }
}

/// What a replay leaves: the verdict, and (unless it diverged or the
/// history could not start) the machine in the state the record left it,
/// with the effects it derived that the record does not hold yet.
#[derive(Debug)]
pub struct Replayed {
    pub verdict: Verdict,
    pub machine: Option<Machine>,
    pub unrecorded: Vec<Effect>,
}

fn diverged(fact: u64, reason: impl Into<String>) -> Replayed {
    Replayed {
        verdict: Verdict::Diverged {
            fact,
            reason: reason.into(),
        },
        machine: None,
        unrecorded: Vec::new(),
    }
}

fn kind(f: &Json) -> &str {
    f.get("fact").and_then(Json::as_str).unwrap_or("?")
}

fn text(f: &Json, key: &str) -> String {
    f.get(key)
        .and_then(Json::as_str)
        .unwrap_or_default()
        .to_string()
}

/// Replays `facts` (a run's history, numbered from 1, values resolved) of
/// a run of `program`.
pub fn replay(program: Arc<Program>, facts: &[Json]) -> Replayed {
    let Some(start) = facts.first() else {
        return diverged(1, "the history has no Start");
    };
    if kind(start) != "Start" {
        return diverged(1, "the history does not begin with Start");
    }
    let module = start
        .get("entry")
        .and_then(|e| e.get("module"))
        .and_then(Json::as_str)
        .unwrap_or(&program.root)
        .to_string();
    let begun = if start.get("parent").is_some() {
        // A fork: its own first Checkpoint holds the node and state it
        // starts from.
        match facts.get(1) {
            Some(cp) if kind(cp) == "Checkpoint" => Machine::resume_at(
                program.clone(),
                &module,
                &text(cp, "node"),
                cp.get("state").cloned().unwrap_or(Json::Null),
            ),
            _ => return diverged(2, "a fork's history holds its starting Checkpoint second"),
        }
    } else {
        Machine::start(
            program.clone(),
            &module,
            start.get("input").unwrap_or(&Json::Null),
        )
    };
    let (mut machine, first) = match begun {
        Ok(x) => x,
        Err(e) => return diverged(1, format!("the run cannot start: {e}")),
    };
    let mut pending: VecDeque<Effect> = first.into_iter().filter(is_fact).collect();
    for (i, fact) in facts.iter().enumerate().skip(1) {
        let n = i as u64 + 1;
        if fact.get("n").and_then(Json::as_u64) != Some(n) {
            return diverged(n, "fact numbers are not consecutive");
        }
        match kind(fact) {
            "Reply" => {
                if let Some(e) = pending.front() {
                    return diverged(
                        n,
                        format!("the record lacks {} before this Reply", describe(e)),
                    );
                }
                let call = text(fact, "call");
                let outcome = match fact.get("outcome").map(Outcome::from_record) {
                    Some(Ok(o)) => o,
                    _ => return diverged(n, "the Reply's outcome is malformed"),
                };
                match machine.feed(&call, &outcome) {
                    Ok(effects) => pending.extend(effects.into_iter().filter(is_fact)),
                    Err(e) => return diverged(n, format!("a Reply for {call}, but {e}")),
                }
            }
            "Close" if pending.is_empty() && text(fact, "reason") == "timeout" => {
                let call = text(fact, "call");
                match machine.expire(&call) {
                    Ok(effects) => pending.extend(effects.into_iter().filter(is_fact)),
                    Err(e) => return diverged(n, format!("a timeout of {call}, but {e}")),
                }
                if let Err(r) = compare(pending.pop_front(), fact) {
                    return diverged(n, r);
                }
            }
            _ => {
                if let Err(r) = compare(pending.pop_front(), fact) {
                    return diverged(n, r);
                }
            }
        }
    }
    let verdict = if pending.is_empty() && machine.ending().is_some() {
        Verdict::Matched
    } else {
        Verdict::Incomplete
    };
    Replayed {
        verdict,
        machine: Some(machine),
        unrecorded: pending.into_iter().collect(),
    }
}

fn describe(e: &Effect) -> String {
    match e {
        Effect::Call {
            call, tool, node, ..
        } => format!("a Call {call} to {tool} at node {node}"),
        Effect::Checkpoint { node, task, .. } => {
            format!("a Checkpoint of task {task} at node {node}")
        }
        Effect::Close { call, .. } => format!("a Close of {call}"),
        Effect::Deadline { call, .. } => format!("a deadline for {call}"),
        Effect::End(_) => "the End".into(),
    }
}

/// Whether an effect records a fact (a Deadline is a host record).
fn is_fact(e: &Effect) -> bool {
    !matches!(e, Effect::Deadline { .. })
}

/// Whether `recorded` is, member for member, the fact `e` records (with
/// its number `n`). Equal JSON values have equal canonical forms, so this
/// is a fast path: a `false` is settled by the canonical comparison.
fn same_fact(e: &Effect, recorded: &Json) -> bool {
    let Json::Object(r) = recorded else {
        return false;
    };
    let s = |k: &str, v: &str| r.get(k).and_then(Json::as_str) == Some(v);
    let members = |n: usize| r.len() == n + usize::from(r.contains_key("n"));
    match e {
        Effect::Call {
            call,
            task,
            node,
            tool,
            fingerprint,
            args,
            ..
        } => {
            members(7)
                && s("fact", "Call")
                && s("call", call)
                && s("task", task)
                && s("node", node)
                && s("tool", tool)
                && s("fingerprint", fingerprint)
                && r.get("args") == Some(args)
        }
        Effect::Checkpoint { task, node, state } => {
            members(4)
                && s("fact", "Checkpoint")
                && s("task", task)
                && s("node", node)
                && r.get("state") == Some(state)
        }
        Effect::Close { call, reason } => {
            members(3) && s("fact", "Close") && s("call", call) && s("reason", reason)
        }
        Effect::Deadline { .. } | Effect::End(_) => false,
    }
}

/// Compares the next derived effect with a recorded fact.
fn compare(derived: Option<Effect>, recorded: &Json) -> Result<(), String> {
    let Some(d) = derived else {
        return Err(format!(
            "the record has a {} the program does not derive here",
            kind(recorded)
        ));
    };
    if same_fact(&d, recorded) {
        return Ok(());
    }
    let Some(want) = d.fact() else {
        return Err("internal: a host record among facts".into());
    };
    let mut got = recorded.clone();
    if let Json::Object(m) = &mut got {
        m.remove("n");
    }
    if flow_abi::json::canonical(&want) == flow_abi::json::canonical(&got) {
        return Ok(());
    }
    let (wk, rk) = (kind(&want), kind(&got));
    if wk != rk {
        return Err(format!(
            "the record has a {rk} where the program derives {}",
            describe(&d)
        ));
    }
    let differs = |k: &str| want.get(k) != got.get(k);
    Err(match wk {
        "Call" if differs("call") => format!(
            "other call: recorded {}, derived {}",
            text(&got, "call"),
            text(&want, "call")
        ),
        "Call" if differs("tool") => format!(
            "other tool: recorded {}, derived {}",
            text(&got, "tool"),
            text(&want, "tool")
        ),
        "Call" if differs("node") => format!(
            "other node: recorded {}, derived {}",
            text(&got, "node"),
            text(&want, "node")
        ),
        "Call" if differs("fingerprint") => format!(
            "the declaration of {} changed (fingerprint)",
            text(&want, "tool")
        ),
        "Call" => format!("other args for call {}", text(&want, "call")),
        "Checkpoint" if differs("node") => format!(
            "other node: recorded {}, derived {}",
            text(&got, "node"),
            text(&want, "node")
        ),
        "Checkpoint" => format!("other state at node {}", text(&want, "node")),
        "End" => "a different ending".into(),
        _ => format!("a different {wk}"),
    })
}
