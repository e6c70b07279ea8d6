//! The one read model of what a run waits for (issue 37 §2): its calls
//! with no Reply or Close yet, read from its history once and as typed
//! facts, and the calls a client answers to continue it (a call that
//! drives a nested run not ended stands for that run's calls, in turn).
//! The run view (`GET /v1/runs/{run}`), the inbox (`GET /v1/calls`),
//! `flow watch`, `flow history` and a drive that pauses all read it here.

use super::RunService;
use super::nested::{MAX_DEPTH, nested_runs};
use super::outcome::PendingCall;
use super::store::Store;
use crate::error::Result;
use flow_abi::fact::{Ending, Fact};
use flow_engine::machine::OpenCall;
use flow_store::RunId;
use std::collections::BTreeSet;

/// A run's calls waiting for a reply, and its ending once it has one.
#[derive(Debug, Default)]
pub struct Waits {
    /// The calls with no Reply or Close, in fact order, each with its
    /// Call's fact number and its arguments expanded.
    pub open: Vec<PendingCall>,
    pub ending: Option<Ending>,
}

/// The calls of `run`'s history with no Reply or Close yet, and its End:
/// one read of the history; only the open Calls and the End are expanded.
pub fn waiting(store: &dyn Store, run: &RunId) -> Result<Waits> {
    let h = store.read_history(run)?;
    let mut settled = BTreeSet::new();
    for f in &h.facts {
        if let Fact::Reply { call, .. } | Fact::Close { call, .. } = &f.fact {
            settled.insert(call);
        }
    }
    let mut w = Waits::default();
    for f in &h.facts {
        match &f.fact {
            Fact::Call { call, .. } => {
                if settled.contains(call) {
                    continue;
                }
                let Fact::Call {
                    call,
                    task,
                    node,
                    tool,
                    args,
                    ..
                } = store.expand_fact(run, f)?
                else {
                    continue;
                };
                w.open.push(PendingCall {
                    run: run.clone(),
                    fact: Some(f.n),
                    open: OpenCall {
                        call,
                        task,
                        node,
                        tool,
                        args,
                    },
                });
            }
            Fact::End { .. } => {
                if let Fact::End { ending, .. } = store.expand_fact(run, f)? {
                    w.ending = Some(ending);
                }
            }
            _ => {}
        }
    }
    Ok(w)
}

impl RunService {
    /// What `run` waits for: [`waiting`], its open calls expanded through
    /// the nested runs they drive ([`RunService::pending_of`]).
    pub fn pending(&self, run: &RunId) -> Result<Waits> {
        let w = waiting(&*self.inner.store, run)?;
        Ok(Waits {
            open: self.expand(run, w.open, 0)?,
            ending: w.ending,
        })
    }

    /// The calls a client answers to continue `run`, whose open calls are
    /// `open` (a live machine's): each call that drives a nested run not
    /// ended is replaced by that run's pending calls (in turn).
    pub fn pending_of(&self, run: &RunId, open: Vec<OpenCall>) -> Result<Vec<PendingCall>> {
        let own = open
            .into_iter()
            .map(|open| PendingCall {
                run: run.clone(),
                fact: None,
                open,
            })
            .collect();
        self.expand(run, own, 0)
    }

    fn expand(&self, run: &RunId, own: Vec<PendingCall>, depth: usize) -> Result<Vec<PendingCall>> {
        let store = &*self.inner.store;
        let links = nested_runs(store, run)?;
        let mut out = Vec::new();
        for c in own {
            let inner = links
                .get(&c.open.call)
                .filter(|_| depth < MAX_DEPTH)
                .filter(|n| store.run_info(n).is_ok_and(|i| i.ending.is_none()));
            match inner {
                Some(n) => {
                    let calls = waiting(store, n)?.open;
                    out.extend(self.expand(n, calls, depth + 1)?);
                }
                None => out.push(c),
            }
        }
        Ok(out)
    }

    /// The pending Tool calls of `run` itself that were sent: those a
    /// draining drive recorded and never sent are not among them (see
    /// `RunView::calls_out`).
    pub fn calls_out(&self, run: &RunId, pending: &[PendingCall]) -> Result<Vec<String>> {
        let mine: Vec<&str> = pending
            .iter()
            .filter(|c| &c.run == run && c.open.tool != crate::host::HUMAN)
            .map(|c| c.open.call.as_str())
            .collect();
        if mine.is_empty() {
            return Ok(Vec::new());
        }
        let unsent = super::unsent(&*self.inner.store, run)?;
        Ok(mine
            .into_iter()
            .filter(|c| !unsent.contains(*c))
            .map(str::to_string)
            .collect())
    }
}
