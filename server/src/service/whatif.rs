//! What-if forks (issue 39 §3): a fork from the root Checkpoint before a
//! recorded Call, with that call's Reply replaced by a given outcome —
//! "what if the classifier had said `billing`?".
//!
//! The outcome is admitted as a resume's reply is (DESIGN §4): against the
//! parent's program, with the call open as the parent's history left it
//! right after its Call, so a reply that does not decode against the call's
//! declared type is refused and nothing is recorded. The fork then runs
//! from the Checkpoint; the first call it makes at the same node to the
//! same Tool is the replaced one: its Call is recorded, never sent, and
//! answered at once with the outcome (a host decision about an open call,
//! recorded as `what-if` with the parent's call named, and the Reply's
//! timing `via: what-if`). The fork's Start names its parent and
//! checkpoint as any fork's does.

use super::RunService;
use super::admit::{Reply, admit};
use super::drive::{Step, steps};
use super::fork::Fork;
use super::prepare::reply_fact;
use crate::error::{Error, Result};
use flow_abi::fact::Fact;
use flow_abi::protocol::Outcome;
use flow_engine::machine::Effect;
use flow_store::{Decision, HostDetails, OpenCallDecision, RunId};

/// Where a fork starts.
#[derive(Clone, Debug)]
pub enum ForkAt {
    /// A root-task Checkpoint, by fact number.
    Checkpoint(u64),
    /// The root Checkpoint before recorded Call `call`, whose Reply the
    /// fork replaces with `reply` (an outcome's JSON text).
    WhatIf { call: String, reply: String },
}

impl ForkAt {
    /// A fork's start as a request gives it: a checkpoint, or a call with
    /// the reply that replaces its own.
    pub fn new(
        checkpoint: Option<u64>,
        call: Option<String>,
        reply: Option<String>,
    ) -> Result<ForkAt> {
        match (checkpoint, call, reply) {
            (Some(n), None, None) => Ok(ForkAt::Checkpoint(n)),
            (None, Some(call), Some(reply)) => Ok(ForkAt::WhatIf { call, reply }),
            (None, Some(call), None) => Err(Error::Refused(format!(
                "a what-if fork replaces call {call}'s reply: give the reply too, an outcome such as {{\"Ok\": value}}"
            ))),
            (None, None, Some(_)) => Err(Error::Refused(
                "a reply goes with the call it replaces: give the call too".into(),
            )),
            (None, None, None) => Err(Error::Refused(
                "say where the fork starts: a checkpoint (a root Checkpoint's fact number), or a call whose reply it replaces".into(),
            )),
            (Some(_), _, _) => Err(Error::Refused(
                "a fork starts at a checkpoint or replaces a call's reply, not both (a what-if fork starts at the Checkpoint before the call)".into(),
            )),
        }
    }
}

/// The replaced call, as the fork finds it again.
pub(super) struct Replacement {
    parent: RunId,
    /// The parent's call.
    replaces: String,
    node: String,
    tool: String,
    outcome: Outcome,
}

impl RunService {
    /// The Checkpoint a what-if fork of `parent` starts from, and the
    /// replacement, its outcome admitted (off the async runtime: the
    /// parent's history is replayed up to the Call).
    pub(super) fn what_if_point(
        &self,
        parent: &RunId,
        call: &str,
        reply: &str,
    ) -> Result<(u64, Replacement)> {
        let mut checkpoint = None;
        let mut target = None;
        let (program, replayed) = self.replayed_until(parent, &mut |f| match f {
            Fact::Checkpoint { n, task, .. } if task == "root" => {
                checkpoint = Some(*n);
                true
            }
            Fact::Call {
                call: c,
                node,
                tool,
                ..
            } if c.as_str() == call => {
                target = Some((node.clone(), tool.clone()));
                false
            }
            _ => true,
        })?;
        let Some((node, tool)) = target else {
            return Err(Error::NotFound(format!(
                "{parent} recorded no call {call} (see flow history {parent} --kind Call)"
            )));
        };
        let Some(checkpoint) = checkpoint else {
            return Err(Error::Refused(format!(
                "{parent} has no root Checkpoint before call {call}: there is nothing to fork from"
            )));
        };
        let machine = replayed.machine.ok_or_else(|| {
            Error::Unreadable(format!("{parent} does not replay up to call {call}"))
        })?;
        let reply = Reply::parse(call.to_string(), reply)?;
        let (_, outcome) = admit(parent, &program, &machine, &reply)?;
        Ok((
            checkpoint,
            Replacement {
                parent: parent.clone(),
                replaces: call.to_string(),
                node,
                tool,
                outcome,
            },
        ))
    }
}

/// The fork's first steps with the replaced call answered: its Call
/// recorded and not sent, then, after the rest of the first slice, its
/// Reply and what follows from it. Refused when the fork's first slice
/// makes no call at the replaced call's node to its Tool (the program
/// makes other calls first: fork from the Checkpoint instead).
pub(super) fn answered(fork: &mut Fork, r: &Replacement, checkpoint: u64) -> Result<Vec<Step>> {
    let mut first = Vec::with_capacity(fork.effects.len() + 4);
    let mut hit = None;
    for e in std::mem::take(&mut fork.effects) {
        match &e {
            Effect::Call {
                call, node, tool, ..
            } if hit.is_none() && *node == r.node && *tool == r.tool => {
                hit = Some(call.clone());
                first.extend(e.into_fact().map(Step::Fact));
            }
            _ => first.push(Step::Effect(e)),
        }
    }
    let Some(call) = hit else {
        return Err(Error::Refused(format!(
            "from checkpoint {checkpoint} the program makes other calls before {} ({} at node {}); fork with --checkpoint {checkpoint} instead",
            r.replaces, r.tool, r.node
        )));
    };
    first.push(Step::Fact(reply_fact(&call, r.outcome.clone())));
    first.push(Step::Host(super::times::timing(
        &call,
        None,
        None,
        None,
        Some(super::deadlines::now_ms()),
        Some("what-if"),
    )));
    first.push(Step::Host(HostDetails::OpenCall(OpenCallDecision {
        call: call.clone(),
        decision: Decision::WhatIf,
        reason: format!("replaces call {} of {}", r.replaces, r.parent),
        chosen: None,
    })));
    let more = fork
        .machine
        .feed(call.as_str(), &r.outcome)
        .map_err(|e| Error::Conflict(e.to_string()))?;
    first.extend(steps(more));
    Ok(first)
}
