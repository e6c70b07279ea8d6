//! Where a run's time went (issue 38 §3): each call's wall-clock span, the
//! pauses and who answered them, and the run's own span, from the history
//! (what was called, at which node, with what outcome) and the `timing`,
//! `pause` and `stderr` host records beside it (when). One implementation
//! behind `GET /v1/runs/{run}/timeline`, `flow history`'s durations and
//! the dashboard's Gantt.
//!
//! Facts carry no clock, by design; a history with no timing records (a
//! run from before them, an imported archive) gives calls with no times,
//! never made-up ones. A duration is given only when both ends are known.

use super::RunService;
use crate::error::Result;
use flow_abi::fact::Fact;
use flow_store::{HostDetails, RunId};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use utoipa::ToSchema;

/// A run's timeline.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Timeline {
    pub run: String,
    /// When the run was created and when it ended, unix ms (none for an
    /// imported run: this store did not see it happen).
    pub started_ms: Option<i64>,
    pub ended_ms: Option<i64>,
    pub duration_ms: Option<i64>,
    /// Every call, in the order the history made them.
    pub calls: Vec<CallSpan>,
    pub pauses: Vec<PauseSpan>,
    /// Where a faulted run failed (issue 38 §4).
    pub fault: Option<Fault>,
}

/// A faulted run's failure, pinpointed: the End's reason, and the last
/// call whose Reply was not Ok before it (its node, Tool, outcome, reason
/// and stderr), when there is one.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Fault {
    /// The End's fault text.
    pub why: String,
    /// The End's fact number.
    pub fact: u64,
    pub call: Option<CallSpan>,
}

/// One call's span.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CallSpan {
    pub call: String,
    /// The fact numbers of its Call and its Reply (none while open).
    pub fact: u64,
    pub reply_fact: Option<u64>,
    pub task: String,
    pub node: String,
    pub tool: String,
    /// What served it: `process`, `mcp`, `worker`, `nested`, `person`,
    /// `clock`, `memory`, `host`.
    pub route: Option<String>,
    /// The remote worker (its id) that answered a call of route `worker`.
    pub worker: Option<String>,
    pub attempt: Option<u32>,
    pub sent_ms: Option<i64>,
    pub replied_ms: Option<i64>,
    pub duration_ms: Option<i64>,
    /// How the Reply came when not from the route: `person`, `timeout`,
    /// `settled`.
    pub via: Option<String>,
    /// The token name of whoever answered it (a person's resume).
    pub by: Option<String>,
    /// `Ok`, `Failed`, `NotRun`, `Unknown`, `BadReply`; none while open,
    /// `Closed` when closed unanswered.
    pub outcome: Option<String>,
    /// The reason of a NotRun, Unknown or BadReply, or a Close.
    pub reason: Option<String>,
    /// The end of the Tool process's stderr when it ended before answering.
    pub stderr: Option<String>,
}

/// A pause: when, with which calls open, and when and by whom it was
/// answered.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PauseSpan {
    pub paused_ms: i64,
    /// The run's last fact when it paused.
    pub fact: u64,
    pub open: Vec<String>,
    pub answered_ms: Option<i64>,
    pub by: Option<String>,
}

impl RunService {
    /// `run`'s timeline. Blocking: it reads the store.
    pub fn timeline(&self, run: &RunId) -> Result<Timeline> {
        let store = self.store();
        let info = store.run_info(run)?;
        let records = store.host_records(run)?;
        let mut calls: Vec<CallSpan> = Vec::new();
        let mut at: BTreeMap<String, usize> = BTreeMap::new();
        let mut faulted: Option<(u64, String)> = None;
        // The facts as stored: the timeline needs their shape, not their
        // values (a run with holes has one too).
        for stored in &store.read_history(run)?.facts {
            match &stored.fact {
                Fact::Call {
                    n,
                    call,
                    task,
                    node,
                    tool,
                    ..
                } => {
                    at.insert(call.as_str().to_string(), calls.len());
                    calls.push(CallSpan {
                        call: call.as_str().to_string(),
                        fact: *n,
                        reply_fact: None,
                        task: task.clone(),
                        node: node.clone(),
                        tool: tool.clone(),
                        route: None,
                        worker: None,
                        attempt: None,
                        sent_ms: None,
                        replied_ms: None,
                        duration_ms: None,
                        via: None,
                        by: None,
                        outcome: None,
                        reason: None,
                        stderr: None,
                    });
                }
                Fact::Reply { n, call, outcome } => {
                    if let Some(c) = at.get(call.as_str()).map(|&i| &mut calls[i]) {
                        c.reply_fact = Some(*n);
                        c.outcome = Some(outcome.tag().to_string());
                        c.reason = match outcome {
                            flow_abi::protocol::Outcome::NotRun(r)
                            | flow_abi::protocol::Outcome::Unknown(r)
                            | flow_abi::protocol::Outcome::BadReply(r) => Some(r.clone()),
                            _ => None,
                        };
                    }
                }
                Fact::Close { call, reason, .. } => {
                    if let Some(c) = at.get(call.as_str()).map(|&i| &mut calls[i])
                        && c.outcome.is_none()
                    {
                        c.outcome = Some("Closed".into());
                        c.reason = Some(reason.clone());
                    }
                }
                Fact::End {
                    n,
                    ending: flow_abi::fact::Ending::Faulted(why),
                } => faulted = Some((*n, why.clone())),
                _ => {}
            }
        }
        let mut pauses: Vec<PauseSpan> = Vec::new();
        for r in &records {
            match &r.details {
                HostDetails::Timing(t) => {
                    let Some(c) = at.get(t.call.as_str()).map(|&i| &mut calls[i]) else {
                        continue;
                    };
                    // The latest of each wins (a resend sends again).
                    if t.sent_ms.is_some() {
                        c.sent_ms = t.sent_ms;
                        c.route = t.route.clone().or(c.route.take());
                        c.attempt = t.attempt.or(c.attempt);
                        if t.replied_ms.is_none() {
                            c.replied_ms = None;
                        }
                    }
                    if t.replied_ms.is_some() {
                        c.replied_ms = t.replied_ms;
                        c.worker = t.worker.clone();
                        c.via = t.via.clone();
                        c.by = t.by.clone();
                        if let Some(p) = pauses.iter_mut().rev().find(|p| {
                            p.answered_ms.is_none() && p.open.iter().any(|o| o == t.call.as_str())
                        }) && t.via.as_deref() == Some("person")
                        {
                            p.answered_ms = t.replied_ms;
                            p.by = t.by.clone();
                        }
                    }
                }
                HostDetails::Timings(ts) => {
                    for t in ts {
                        if let Some(c) = at.get(t.call.as_str()).map(|&i| &mut calls[i]) {
                            c.route = t.route.clone();
                            c.worker = t.worker.clone();
                            c.attempt = t.attempt;
                            c.sent_ms = t.sent_ms;
                            c.replied_ms = t.replied_ms;
                            c.via = None;
                        }
                    }
                }
                HostDetails::Pause { open } => pauses.push(PauseSpan {
                    paused_ms: r.at_ms,
                    fact: r.head.n,
                    open: open.iter().map(|c| c.as_str().to_string()).collect(),
                    answered_ms: None,
                    by: None,
                }),
                HostDetails::Stderr {
                    call: Some(call),
                    text,
                    ..
                } => {
                    if let Some(c) = at.get(call.as_str()).map(|&i| &mut calls[i]) {
                        c.stderr = Some(text.clone());
                    }
                }
                _ => {}
            }
        }
        for c in &mut calls {
            if let (Some(s), Some(r)) = (c.sent_ms, c.replied_ms) {
                c.duration_ms = Some(r.saturating_sub(s).max(0));
            }
        }
        let fault = faulted.map(|(fact, why)| Fault {
            why,
            fact,
            // The last Reply that was not Ok (the one the End followed);
            // calls the End closed unanswered are not where it failed.
            call: calls
                .iter()
                .filter(|c| c.reply_fact.is_some() && c.outcome.as_deref() != Some("Ok"))
                .max_by_key(|c| c.reply_fact)
                .cloned(),
        });
        let own = info.imported_ms.is_none();
        let started_ms = own.then_some(info.created_ms);
        let ended_ms = (own && info.ending.is_some()).then_some(info.state_ms);
        Ok(Timeline {
            run: run.to_string(),
            started_ms,
            ended_ms,
            duration_ms: started_ms
                .zip(ended_ms)
                .map(|(s, e)| e.saturating_sub(s).max(0)),
            calls,
            pauses,
            fault,
        })
    }
}
