//! Run diff (issue 39, item 4): two histories aligned fact by fact, where
//! they part, and per call and per checkpoint what differs.
//!
//! Alignment: a fork and its parent share the parent's history up to the
//! fork's checkpoint (the fork's Start names it: `parent`), so the fork's
//! starting Checkpoint (its fact 2) stands beside the parent's Checkpoint
//! at that fact, and every later fact beside the one as far after it.
//! Any other two runs stand fact by fact from Start (their Starts compared
//! by input and program, not by run id). The histories part at the first
//! pair that differs (numbers aside). Calls are paired in the order each
//! run made them from the alignment on (the i-th with the i-th, each
//! with its Reply), checkpoints likewise; only pairs that differ are
//! listed, each differing field by a JSON path (`$.args.q`,
//! `$.outcome.Ok.label`, `$.state.label`).

use super::RunService;
use crate::error::Result;
use flow_abi::fact::{Ending, Fact};
use flow_store::RunId;
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;
use std::collections::{BTreeMap, BTreeSet};

/// How the two runs were aligned.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase", tag = "kind")]
pub enum Alignment {
    /// `b` is a fork of `a` from `a`'s Checkpoint at `checkpoint`.
    Fork { checkpoint: u64 },
    /// `a` is a fork of `b` from `b`'s Checkpoint at `checkpoint`.
    Parent { checkpoint: u64 },
    /// Fact by fact from Start.
    Start,
}

/// A fact of each run (either may be missing: that run ended first).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FactPair {
    pub a: Option<u64>,
    pub b: Option<u64>,
}

/// A field that differs: its JSON path and each side's value (missing on
/// a side that has no such field).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FieldDiff {
    pub path: String,
    #[schema(value_type = Option<Object>)]
    pub a: Option<Json>,
    #[schema(value_type = Option<Object>)]
    pub b: Option<Json>,
}

/// One side of a call: its Call and, when recorded, its Reply.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CallSide {
    pub call: String,
    pub fact: u64,
    pub tool: String,
    pub node: String,
    #[schema(value_type = Object)]
    pub args: Json,
    /// The Reply's fact and outcome (`{"Ok": …}`, `{"Failed": …}`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub outcome: Option<Json>,
}

/// The i-th call of each run from the alignment on, when they differ.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CallDiff {
    /// Counting from 1, in the order each run made its calls.
    pub index: u64,
    pub a: Option<CallSide>,
    pub b: Option<CallSide>,
    /// Paths under the call: `$.tool`, `$.node`, `$.args…`, `$.outcome…`.
    pub fields: Vec<FieldDiff>,
}

/// The i-th Checkpoint of each run from the alignment on, when they differ.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointDiff {
    pub index: u64,
    pub facts: FactPair,
    pub node_a: Option<String>,
    pub node_b: Option<String>,
    /// Paths under the checkpoint: `$.node`, `$.task`, `$.state…`.
    pub fields: Vec<FieldDiff>,
}

/// How a run ended, if it did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct EndingView {
    pub fact: u64,
    /// `completed` or `faulted`.
    pub ending: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub output: Option<Json>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault: Option<String>,
}

/// `flow diff A B`, `GET /v1/runs/{a}/diff/{b}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunDiff {
    pub a: String,
    pub b: String,
    pub alignment: Alignment,
    /// Each run's fact count.
    pub facts: FactPair,
    /// The last aligned facts that agree (none: they differ from the
    /// alignment's first pair on).
    pub shared: Option<FactPair>,
    /// The first aligned facts that differ (none: the histories agree
    /// throughout). A side is missing when that run's record ended there.
    pub parted: Option<FactPair>,
    /// Aligned from Start: the inputs' differing fields (`$.input…`).
    pub input: Vec<FieldDiff>,
    pub calls: Vec<CallDiff>,
    pub checkpoints: Vec<CheckpointDiff>,
    pub ending_a: Option<EndingView>,
    pub ending_b: Option<EndingView>,
    /// The two histories agree fact for fact from the alignment on.
    pub same: bool,
}

impl RunService {
    /// The diff of runs `a` and `b` (see the module doc).
    pub async fn diff(&self, a: &RunId, b: &RunId) -> Result<RunDiff> {
        let (this, ra, rb) = (self.clone(), a.clone(), b.clone());
        tokio::task::spawn_blocking(move || {
            let store = &*this.inner.store;
            let fa = store.logical_history(&ra)?;
            let fb = store.logical_history(&rb)?;
            Ok(diff(&ra, &rb, &fa, &fb))
        })
        .await
        .map_err(|e| crate::error::Error::Unreadable(format!("a diff task ended: {e}")))?
    }
}

fn parent_of(facts: &[Fact]) -> Option<(&RunId, u64)> {
    match facts.first() {
        Some(Fact::Start {
            parent: Some(p), ..
        }) => Some((&p.run, p.checkpoint)),
        _ => None,
    }
}

/// The index of fact `n` (numbered from 1).
fn index(n: u64) -> usize {
    usize::try_from(n.saturating_sub(1)).unwrap_or(usize::MAX)
}

/// The diff of two histories (logical facts, numbered from 1).
pub fn diff(a: &RunId, b: &RunId, fa: &[Fact], fb: &[Fact]) -> RunDiff {
    // Where each run's aligned part begins (an index into its facts).
    let (alignment, from_a, from_b) = match (parent_of(fb), parent_of(fa)) {
        (Some((p, k)), _) if p == a => (Alignment::Fork { checkpoint: k }, index(k), 1),
        (_, Some((p, k))) if p == b => (Alignment::Parent { checkpoint: k }, 1, index(k)),
        _ => (Alignment::Start, 0, 0),
    };
    let (xa, xb) = (
        fa.get(from_a.min(fa.len())..).unwrap_or(&[]),
        fb.get(from_b.min(fb.len())..).unwrap_or(&[]),
    );
    let mut shared = None;
    let mut parted = None;
    for i in 0..xa.len().max(xb.len()) {
        let (x, y) = (xa.get(i), xb.get(i));
        if let (Some(x), Some(y)) = (x, y)
            && alike(x, y)
        {
            shared = Some(FactPair {
                a: Some(x.n()),
                b: Some(y.n()),
            });
            continue;
        }
        parted = Some(FactPair {
            a: x.map(Fact::n),
            b: y.map(Fact::n),
        });
        break;
    }
    RunDiff {
        a: a.to_string(),
        b: b.to_string(),
        alignment: alignment.clone(),
        facts: FactPair {
            a: Some(fa.len() as u64),
            b: Some(fb.len() as u64),
        },
        shared,
        same: parted.is_none(),
        parted,
        input: match (&alignment, fa.first(), fb.first()) {
            (
                Alignment::Start,
                Some(Fact::Start { input: ia, .. }),
                Some(Fact::Start { input: ib, .. }),
            ) => {
                let mut out = Vec::new();
                values("$.input", Some(ia), Some(ib), &mut out);
                out
            }
            _ => Vec::new(),
        },
        calls: call_diffs(xa, xb),
        checkpoints: checkpoint_diffs(xa, xb),
        ending_a: ending(fa),
        ending_b: ending(fb),
    }
}

/// Two aligned facts agree: equal but for their numbers (and, for two
/// Starts, but for the run id and lineage: their input and program).
fn alike(x: &Fact, y: &Fact) -> bool {
    match (x, y) {
        (
            Fact::Start {
                input: ia,
                program: pa,
                entry: ea,
                ..
            },
            Fact::Start {
                input: ib,
                program: pb,
                entry: eb,
                ..
            },
        ) => ia == ib && pa == pb && ea == eb,
        _ => x.clone().numbered(0) == y.clone().numbered(0),
    }
}

/// Each run's calls in the order made, with their Replies.
fn calls(facts: &[Fact]) -> Vec<CallSide> {
    let mut sides: Vec<CallSide> = Vec::new();
    let mut at: BTreeMap<String, usize> = BTreeMap::new();
    for f in facts {
        match f {
            Fact::Call {
                n,
                call,
                node,
                tool,
                args,
                ..
            } => {
                at.insert(call.to_string(), sides.len());
                sides.push(CallSide {
                    call: call.to_string(),
                    fact: *n,
                    tool: tool.clone(),
                    node: node.clone(),
                    args: args.clone(),
                    reply: None,
                    outcome: None,
                });
            }
            Fact::Reply { n, call, outcome } => {
                if let Some(&i) = at.get(call.as_str()) {
                    sides[i].reply = Some(*n);
                    sides[i].outcome = Some(outcome.to_json());
                }
            }
            _ => {}
        }
    }
    sides
}

fn call_diffs(xa: &[Fact], xb: &[Fact]) -> Vec<CallDiff> {
    let (ca, cb) = (calls(xa), calls(xb));
    let mut out = Vec::new();
    for i in 0..ca.len().max(cb.len()) {
        let (a, b) = (ca.get(i), cb.get(i));
        let mut fields = Vec::new();
        match (a, b) {
            (Some(a), Some(b)) => {
                let s = |v: &str| Some(Json::String(v.to_string()));
                field(&mut fields, "$.tool", s(&a.tool), s(&b.tool));
                field(&mut fields, "$.node", s(&a.node), s(&b.node));
                values("$.args", Some(&a.args), Some(&b.args), &mut fields);
                values(
                    "$.outcome",
                    a.outcome.as_ref(),
                    b.outcome.as_ref(),
                    &mut fields,
                );
            }
            _ => fields.push(FieldDiff {
                path: "$".into(),
                a: a.map(|c| Json::String(c.call.clone())),
                b: b.map(|c| Json::String(c.call.clone())),
            }),
        }
        if !fields.is_empty() {
            out.push(CallDiff {
                index: i as u64 + 1,
                a: a.cloned(),
                b: b.cloned(),
                fields,
            });
        }
    }
    out
}

fn checkpoint_diffs(xa: &[Fact], xb: &[Fact]) -> Vec<CheckpointDiff> {
    let cps = |facts: &[Fact]| -> Vec<(u64, String, String, Json)> {
        facts
            .iter()
            .filter_map(|f| match f {
                Fact::Checkpoint {
                    n,
                    task,
                    node,
                    state,
                } => Some((*n, task.clone(), node.clone(), state.clone())),
                _ => None,
            })
            .collect()
    };
    let (pa, pb) = (cps(xa), cps(xb));
    let mut out = Vec::new();
    for i in 0..pa.len().max(pb.len()) {
        let (a, b) = (pa.get(i), pb.get(i));
        let mut fields = Vec::new();
        let s = |v: &String| Some(Json::String(v.clone()));
        field(
            &mut fields,
            "$.node",
            a.and_then(|c| s(&c.2)),
            b.and_then(|c| s(&c.2)),
        );
        field(
            &mut fields,
            "$.task",
            a.and_then(|c| s(&c.1)),
            b.and_then(|c| s(&c.1)),
        );
        values("$.state", a.map(|c| &c.3), b.map(|c| &c.3), &mut fields);
        if !fields.is_empty() {
            out.push(CheckpointDiff {
                index: i as u64 + 1,
                facts: FactPair {
                    a: a.map(|c| c.0),
                    b: b.map(|c| c.0),
                },
                node_a: a.map(|c| c.2.clone()),
                node_b: b.map(|c| c.2.clone()),
                fields,
            });
        }
    }
    out
}

fn field(out: &mut Vec<FieldDiff>, path: &str, a: Option<Json>, b: Option<Json>) {
    if a != b {
        out.push(FieldDiff {
            path: path.to_string(),
            a,
            b,
        });
    }
}

/// The fields under `path` where `a` and `b` differ: objects member by
/// member, arrays of one length element by element, anything else whole.
fn values(path: &str, a: Option<&Json>, b: Option<&Json>, out: &mut Vec<FieldDiff>) {
    match (a, b) {
        (Some(Json::Object(x)), Some(Json::Object(y))) => {
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                values(&member(path, k), x.get(k), y.get(k), out);
            }
        }
        (Some(Json::Array(x)), Some(Json::Array(y))) if x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                values(&format!("{path}[{i}]"), Some(p), Some(q), out);
            }
        }
        (a, b) if a != b => out.push(FieldDiff {
            path: path.to_string(),
            a: a.cloned(),
            b: b.cloned(),
        }),
        _ => {}
    }
}

/// `$.state.label`, or `$.state["odd key"]` for a key that is not a plain
/// name.
fn member(path: &str, key: &str) -> String {
    let plain = !key.is_empty()
        && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !key.starts_with(|c: char| c.is_ascii_digit());
    if plain {
        format!("{path}.{key}")
    } else {
        format!("{path}[{}]", Json::String(key.to_string()))
    }
}

fn ending(facts: &[Fact]) -> Option<EndingView> {
    facts.iter().rev().find_map(|f| match f {
        Fact::End { n, ending } => Some(match ending {
            Ending::Completed { exit, output } => EndingView {
                fact: *n,
                ending: "completed".into(),
                exit: Some(exit.clone()),
                output: Some(output.clone()),
                fault: None,
            },
            Ending::Faulted(why) => EndingView {
                fact: *n,
                ending: "faulted".into(),
                exit: None,
                output: None,
                fault: Some(why.clone()),
            },
        }),
        _ => None,
    })
}
