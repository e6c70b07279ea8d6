//! The calls a crash, a halt or a drain left open, and how a resume
//! settles them: what the host records say of each (never sent, sent again
//! how often, halted at the head), and the open-call decision recorded for
//! each — sent, sent again, its worker's still, or settled `Unknown`.

use super::RunService;
use super::drive::{Step, ToDispatch, steps};
use super::prepare::{OpenChoice, args_of, reply_fact};
use super::store::Store;
use crate::error::{Error, Result};
use crate::host::Host;
use flow_abi::fact::CallId;
use flow_abi::protocol::Outcome;
use flow_engine::machine::{Machine, OpenCall};
use flow_store::{
    Choice, Decision, FactRef, HostDetails, HostRecord, HostRecordKind, OpenCallDecision, RunId,
};
use std::collections::{BTreeMap, BTreeSet};

/// Tool calls a crash, a halt or a drain left open, with what the host
/// records say of them.
pub(super) struct Crashed {
    pub calls: Vec<OpenCall>,
    /// Calls a draining drive recorded and never sent ([`Decision::Unsent`],
    /// the latest decision recorded for the call).
    pub unsent: BTreeSet<CallId>,
    /// The run was halted at its head (no host restarted).
    pub halted: bool,
    /// How many times each call was sent again already (its attempt is
    /// one more than that, plus one).
    pub resent: BTreeMap<CallId, u32>,
}

impl Crashed {
    /// What `records` say of the calls left open at `head`; the calls are
    /// added by the resume.
    pub(super) fn of(records: &[flow_store::HostRecordRow], head: &FactRef) -> Crashed {
        Crashed {
            calls: Vec::new(),
            unsent: unsent_calls(records),
            halted: halted_at(records, head),
            resent: resent_calls(records),
        }
    }
}

impl RunService {
    /// Decides each call a crash, a halt or a drain left open, with an
    /// open-call-decision host record: a call never sent is sent; one in
    /// the worker queue stays its worker's; any other is sent again or
    /// settled `Unknown`, as `open` chooses, or else as its binding's
    /// `resend` says. The reason says what left it open: `halted`, or
    /// `host restarted`.
    pub(super) async fn settle(
        &self,
        run: &RunId,
        host: &Host,
        machine: &mut Machine,
        crashed: Crashed,
        open: Option<OpenChoice>,
        first: &mut Vec<Step>,
    ) -> Result<Vec<ToDispatch>> {
        let module = machine.module().to_string();
        let mut resend = Vec::new();
        let mut records = Vec::new();
        let left = if crashed.halted {
            "halted"
        } else {
            "host restarted"
        };
        for c in crashed.calls {
            let unsent = crashed.unsent.contains(&c.call);
            // A call in the worker queue is not lost with the host: the
            // drive attaches to it (waits for its worker, sends it if it
            // never went, admits the reply that came meanwhile).
            let queued = !unsent
                && host.is_remote(&module, &c.tool)
                && self.worker_queued(host, run, &c).await;
            let (decision, reason, sending) = if unsent {
                (Decision::Send, "never sent", true)
            } else if queued {
                (Decision::Worker, left, true)
            } else {
                let again = match open {
                    Some(o) => o == OpenChoice::Resend,
                    None => host.resends(&module, &c.tool),
                };
                let d = if again {
                    Decision::Resend
                } else {
                    Decision::Unknown
                };
                (d, left, again)
            };
            records.push(OpenCallDecision {
                call: c.call.clone(),
                decision,
                reason: reason.into(),
                chosen: open.filter(|_| !unsent && !queued).map(Choice::from),
            });
            if sending {
                let attempt = match decision {
                    Decision::Resend => crashed.resent.get(&c.call).copied().unwrap_or(0) + 2,
                    _ => 1,
                };
                resend.push(ToDispatch {
                    call: c.call.clone(),
                    tool: c.tool.clone(),
                    args: args_of(&c),
                    nested: None,
                    attempt,
                });
                continue;
            }
            let outcome = Outcome::Unknown(left.into());
            first.push(Step::Fact(reply_fact(&c.call, outcome.clone())));
            first.push(Step::Host(super::times::timing(
                &c.call,
                None,
                None,
                None,
                Some(super::deadlines::now_ms()),
                Some("settled"),
            )));
            let more = machine
                .feed(c.call.as_str(), &outcome)
                .map_err(|e| Error::Conflict(e.to_string()))?;
            first.extend(steps(machine.settle(more)));
        }
        if records.is_empty() {
            return Ok(resend);
        }
        let r = run.clone();
        super::store::blocking(&self.inner.store, move |s| {
            for d in records {
                s.record_host(&r, HostRecord::now(HostDetails::OpenCall(d)))?;
            }
            Ok(())
        })
        .await?;
        Ok(resend)
    }

    /// Whether an open call of a worker-served declaration has its place
    /// in the worker queue (one without was lost with a crash before it
    /// was queued, or with the database's: it is settled as a crash
    /// settles an open call).
    pub(super) async fn worker_queued(&self, host: &Host, run: &RunId, c: &OpenCall) -> bool {
        let Some(w) = host.workers() else {
            return false;
        };
        match w.queued(run, &c.call).await {
            Ok(q) => q,
            Err(e) => {
                tracing::warn!(run.id = %run, call.id = %c.call, error = %e, "cannot read the worker queue; the call is settled as after a crash");
                false
            }
        }
    }
}

/// The calls of `run` a draining drive recorded and never sent (and no
/// one has sent since).
pub fn unsent(store: &dyn Store, run: &RunId) -> flow_store::Result<BTreeSet<CallId>> {
    Ok(unsent_calls(&store.host_records(run)?))
}

/// The calls whose latest open-call decision is that a draining drive
/// never sent them.
/// How many times each call was sent again (open-call-decision `resend`).
fn resent_calls(records: &[flow_store::HostRecordRow]) -> BTreeMap<CallId, u32> {
    let mut n = BTreeMap::new();
    for r in records {
        if let HostDetails::OpenCall(d) = &r.details
            && d.decision == Decision::Resend
        {
            *n.entry(d.call.clone()).or_insert(0) += 1;
        }
    }
    n
}

fn unsent_calls(records: &[flow_store::HostRecordRow]) -> BTreeSet<CallId> {
    let mut latest = std::collections::BTreeMap::new();
    for r in records {
        if let HostDetails::OpenCall(d) = &r.details {
            latest.insert(&d.call, d.decision);
        }
    }
    latest
        .into_iter()
        .filter(|(_, d)| *d == Decision::Unsent)
        .map(|(c, _)| c.clone())
        .collect()
}

/// Whether the run's last pause or halt is a halt at `head` (the run was
/// halted and nothing was recorded since).
fn halted_at(records: &[flow_store::HostRecordRow], head: &FactRef) -> bool {
    halt_at(records, head).is_some()
}

/// The run's last pause or halt, when it is a halt at `head`.
pub(super) fn halt_at<'a>(
    records: &'a [flow_store::HostRecordRow],
    head: &FactRef,
) -> Option<&'a flow_store::HostRecordRow> {
    records
        .iter()
        .rev()
        .find(|r| matches!(r.kind(), HostRecordKind::Halt | HostRecordKind::Pause))
        .filter(|r| r.kind() == HostRecordKind::Halt && r.head.n == head.n)
}
