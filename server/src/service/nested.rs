//! Nested runs (a `subgraph` node; seed running-a-program, "Nested runs"):
//! started, continued, paused, halted, and their calls listed.
//!
//! A nested run is a run with its own history, whose Start names the outer
//! run and call; the outer run's host records name the nested run that
//! serves each such call (a `binding` record with `nested_run`, written
//! before the nested run is created, so a resume after a crash between the
//! two finds the id and creates that run, never a second one).
//!
//! The outer run's drive carries its nested runs: their ending becomes the
//! outer call's Reply (NEST-13; a fault is a Failed reply the node's
//! `fail_branch` routes, never the outer run's fault: NEST-14). A nested
//! run that pauses leaves the outer call open and its drive pauses the
//! outer one, whose pending calls are the nested run's (with its run id).
//! A resume of either run — by the nested run's id, or by the outer one's
//! with the nested call's id — goes to the outermost run whose drive
//! carries the chain: that drive continues the nested run (the reply
//! admitted there), the nested ending is the outer Reply, and the outer
//! run goes on. Halting the outer run halts every nested run it drives,
//! each with its own halt record (NEST-19); closing the outer call halts
//! its nested run (NEST-18).

use super::admit::Reply;
use super::drive::{Ack, Driven, ToDispatch, Writes, create, start_machine, steps};
use super::prepare::OpenChoice;
use super::runs::Seen;
use super::store::{Store, blocking};
use super::{RunResult, RunService};
use crate::error::{Error, Result};
use crate::host::{Host, Served};
use flow_abi::fact::{CallId, Fact};
use flow_engine::machine::OpenCall;
use flow_engine::program::Program;
use flow_store::{Halt, HostDetails, HostRecord, HostRecordRow, Namespace, RunId};
use flow_tools::CallOutcome;
use serde_json::{Map, Value as Json, json};
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// Nested runs inside nested runs, at most (a subgraph cycle is a program
/// the checker allows; it ends here).
pub(super) const MAX_DEPTH: usize = 32;

/// A nested call to carry out: the nested run's module and id, whether it
/// is new (its link to the outer call not recorded yet), and a reply for a
/// call of that run or of one below it.
pub(super) struct NestedCall {
    pub module: String,
    /// `None`: a new nested run, with a new id.
    pub run: Option<RunId>,
    pub reply: Option<DeepReply>,
    /// Told once the reply is durable (the resume's acknowledgement).
    pub ack: Option<Ack>,
    /// The decision for the calls out at a halt or crash, chosen for the
    /// continue of the outer run: it holds for the nested runs too.
    pub open: Option<OpenChoice>,
}

impl NestedCall {
    pub(super) fn start(module: String) -> NestedCall {
        NestedCall {
            module,
            run: None,
            reply: None,
            ack: None,
            open: None,
        }
    }
}

/// A reply for a call of a nested run: `below` names the runs under the
/// one being continued, down to the one whose call it answers (empty:
/// that one).
pub(super) struct DeepReply {
    pub below: Vec<RunId>,
    pub reply: Reply,
}

/// What a dispatched call came back with.
pub(super) enum Answer {
    Reply(Served),
    /// No outcome yet: the nested run paused, or the call is parked for
    /// a remote worker that is absent. The call stays open.
    Paused,
    /// No outcome yet: the nested run drained (its drive let go with no
    /// call out, see `drive::Writes`). The call stays open.
    Drained,
}

/// The nested run serving each call of `run` (its `binding` host records).
pub fn nested_runs(store: &dyn Store, run: &RunId) -> flow_store::Result<BTreeMap<CallId, RunId>> {
    Ok(links(&store.host_records(run)?))
}

pub(super) fn links(records: &[HostRecordRow]) -> BTreeMap<CallId, RunId> {
    records
        .iter()
        .filter_map(|r| match &r.details {
            HostDetails::NestedRun { call, nested_run } => Some((call.clone(), nested_run.clone())),
            _ => None,
        })
        .collect()
}

/// The calls of `run` with a Call and no Reply or Close.
pub(super) fn open_ids(store: &dyn Store, run: &RunId) -> Result<BTreeSet<CallId>> {
    Ok(super::pending::waiting(store, run)?
        .open
        .into_iter()
        .map(|c| c.open.call)
        .collect())
}

/// The nested runs `run` drives now: each open call's nested run that has
/// not ended, in call-id order.
pub(super) fn live_nested(store: &dyn Store, run: &RunId) -> Result<Vec<(CallId, RunId)>> {
    let links = nested_runs(store, run)?;
    if links.is_empty() {
        // Most runs drive no nested run: their history is not read.
        return Ok(Vec::new());
    }
    let open = open_ids(store, run)?;
    let mut out = Vec::new();
    for (call, n) in links {
        if !open.contains(&call) {
            continue;
        }
        match store.run_info(&n) {
            Ok(i) if i.ending.is_none() => out.push((call, n)),
            _ => {}
        }
    }
    Ok(out)
}

/// The outermost run whose drive carries `run`, and the runs under it
/// down to `run` (empty when `run` is its own outermost run). A link
/// counts while the outer run has not ended, the outer call is open, and
/// the outer run's record names `run` as the call's nested run.
pub(super) fn live_root(store: &dyn Store, run: &RunId) -> Result<(RunId, Vec<RunId>)> {
    let mut below = Vec::new();
    let mut cur = run.clone();
    for _ in 0..MAX_DEPTH {
        let Some((outer, call)) = store.run_info(&cur)?.outer else {
            break;
        };
        let live = store.run_info(&outer).is_ok_and(|i| i.ending.is_none())
            && open_ids(store, &outer)?.contains(&call)
            && nested_runs(store, &outer)?.get(&call) == Some(&cur);
        if !live {
            break;
        }
        below.insert(0, cur);
        cur = outer;
    }
    Ok((cur, below))
}

/// The run a reply for `call` sent to `run` answers: `run` itself when the
/// call is its own, else the one nested run below it with that call open.
fn target_of(store: &dyn Store, run: &RunId, call: &str) -> Result<RunId> {
    let nested = live_nested(store, run)?;
    if nested.is_empty() {
        return Ok(run.clone());
    }
    let drives = nested
        .iter()
        .find(|(c, _)| c == call)
        .map(|(_, n)| n.clone());
    if drives.is_none() && open_ids(store, run)?.contains(call) {
        return Ok(run.clone());
    }
    let mut found = Vec::new();
    let mut todo: Vec<(RunId, usize)> = nested.into_iter().map(|(_, n)| (n, 1)).collect();
    while let Some((n, depth)) = todo.pop() {
        let below = live_nested(store, &n)?;
        if !below.iter().any(|(c, _)| c == call) && open_ids(store, &n)?.contains(call) {
            found.push(n.clone());
        }
        if depth < MAX_DEPTH {
            todo.extend(below.into_iter().map(|(_, m)| (m, depth + 1)));
        }
    }
    match (found.len(), drives) {
        (1, _) => Ok(found.remove(0)),
        (0, Some(n)) => Err(Error::Conflict(format!(
            "call {call} of {run} drives nested run {n}: answer that run's pending calls"
        ))),
        (0, None) => Ok(run.clone()),
        _ => {
            found.sort();
            Err(Error::Conflict(format!(
                "call {call} is open in several nested runs of {run} ({}): resume it by the nested run's id",
                found
                    .iter()
                    .map(RunId::as_str)
                    .collect::<Vec<_>>()
                    .join(", ")
            )))
        }
    }
}

/// Where a resume goes: the run to drive, the reply it admits itself, and
/// a reply it carries down to a nested run.
pub(super) struct Route {
    pub root: RunId,
    pub reply: Option<Reply>,
    pub deep: Option<DeepReply>,
}

/// A nested run's ending as the outer call's outcome (NEST-13, NEST-14).
fn ended_outcome(r: Result<Driven>) -> Answer {
    let r = match r {
        Ok(Driven::Drained) => return Answer::Drained,
        Ok(Driven::Result(r)) => Ok(r),
        Err(e) => Err(e),
    };
    Answer::Reply(Served::here(match r {
        Ok(RunResult::Completed { output, .. }) => {
            match flow_abi::decode_json(&output, &flow_abi::Type::Json, &flow_abi::TypeSet::new()) {
                Ok(v) => CallOutcome::Ok(v),
                Err(e) => CallOutcome::BadReply(e.to_string()),
            }
        }
        Ok(RunResult::Faulted { why, .. }) => {
            let mut m = BTreeMap::new();
            m.insert("message".to_string(), flow_abi::Value::Text(why));
            CallOutcome::Failed(flow_abi::Value::Record(m))
        }
        Ok(RunResult::Paused { .. }) => return Answer::Paused,
        Err(e) => CallOutcome::Unknown(format!("nested run cut short: {e}")),
    }))
}

/// The recorded ending of `run` (its End fact).
fn recorded_ending(store: &dyn Store, run: &RunId, last: u64) -> Result<RunResult> {
    let f = store.read_after(run, last.saturating_sub(1), 1)?;
    let end = f
        .first()
        .ok_or_else(|| Error::Unreadable(format!("{run} ended without an End fact")))?;
    match store.expand_fact(run, end)? {
        Fact::End { ending, .. } => Ok(RunResult::ended(run, ending)),
        _ => Err(Error::Unreadable(format!("{run} fact {last}: not an End"))),
    }
}

impl RunService {
    /// Where a resume of `run` with `reply` goes (see the module header).
    /// A reply for a nested run is checked against that run's open call
    /// here, so a refusal comes back before anything is recorded.
    pub(super) async fn route(&self, run: &RunId, reply: Option<Reply>) -> Result<Route> {
        let (r, call) = (run.clone(), reply.as_ref().map(|r| r.call.clone()));
        // An unknown run is refused by live_root's read of it (its host
        // records are none).
        let (target, root, below) = blocking(&self.inner.store, move |s| {
            let target = match &call {
                Some(c) => target_of(s, &r, c)?,
                None => r,
            };
            let (root, below) = live_root(s, &target)?;
            Ok((target, root, below))
        })
        .await?;
        if below.is_empty() {
            return Ok(Route {
                root,
                reply,
                deep: None,
            });
        }
        let Some(reply) = reply else {
            return Ok(Route {
                root,
                reply: None,
                deep: None,
            });
        };
        let t = target.clone();
        let info = blocking(&self.inner.store, move |s| Ok(s.run_info(&t)?)).await?;
        let (program, machine, _, _) = self.machine_at(&target, &info.last_fact).await?;
        super::admit::admit(&target, &program, &machine, &reply)?;
        Ok(Route {
            root,
            reply: None,
            deep: Some(DeepReply { below, reply }),
        })
    }

    /// Records a halt for every nested run `run` drives, and theirs in
    /// turn (NEST-19), after `run`'s drive stopped. Returns the rows.
    pub(super) async fn halt_below(
        &self,
        run: &RunId,
        details: &Halt,
    ) -> Result<Vec<(RunId, HostRecordRow)>> {
        let (r, d) = (run.clone(), details.clone());
        let rows = blocking(&self.inner.store, move |s| {
            let mut rows = Vec::new();
            let mut todo = vec![(r, 0usize)];
            while let Some((run, depth)) = todo.pop() {
                if depth >= MAX_DEPTH {
                    continue;
                }
                for (call, n) in live_nested(s, &run)? {
                    let details = Halt {
                        outer: Some((run.clone(), call)),
                        ..d.clone()
                    };
                    let row = s.record_host(&n, HostRecord::now(HostDetails::Halt(details)))?;
                    rows.push((n.clone(), row));
                    todo.push((n, depth + 1));
                }
            }
            Ok(rows)
        })
        .await?;
        for (n, _) in &rows {
            self.inner.paused.forget(n);
            self.publish(n.as_str(), "halted", json!({}));
        }
        Ok(rows)
    }

    /// A nested run whose outer call was closed (a `wait_for: any` join, a
    /// fault): halted with the runs it drives, answering nothing (NEST-18).
    pub(super) async fn halt_closed(&self, run: &RunId) {
        let details = Halt {
            reason: Some("the outer call was closed".into()),
            ..Halt::default()
        };
        let (r, d) = (run.clone(), details.clone());
        let halted = blocking(&self.inner.store, move |s| {
            if s.run_info(&r)?.ending.is_some() {
                return Ok(false);
            }
            s.record_host(&r, HostRecord::now(HostDetails::Halt(d)))?;
            Ok(true)
        })
        .await;
        match halted {
            Ok(true) => {
                self.inner.paused.forget(run);
                self.publish(run.as_str(), "halted", json!({}));
                if let Err(e) = self.halt_below(run, &details).await {
                    tracing::warn!(run.id = %run, error = %e, "nested runs not halted");
                }
            }
            Ok(false) => {}
            Err(e) => tracing::warn!(run.id = %run, error = %e, "nested run not halted"),
        }
    }

    /// Carries out a nested call of `outer`: starts the nested run, or
    /// continues the one recorded for the call (with the reply it carries).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn nested<'a>(
        &'a self,
        outer: RunId,
        call: CallId,
        program: Arc<Program>,
        run: RunId,
        fresh: bool,
        n: NestedCall,
        args: Map<String, Json>,
        host: &'a Host,
        writes: &'a Writes,
    ) -> Pin<Box<dyn Future<Output = Answer> + Send + 'a>> {
        Box::pin(async move {
            let NestedCall {
                module,
                reply,
                ack,
                open,
                ..
            } = n;
            let input = args
                .get("input")
                .cloned()
                .unwrap_or(Json::Object(Map::new()));
            let r = run.clone();
            let info = blocking(&self.inner.store, move |s| match Seen::read(s, &r) {
                Ok(i) => Ok(Some(i)),
                Err(flow_store::Error::UnknownRun(_)) => Ok(None),
                Err(e) => Err(e.into()),
            })
            .await;
            let result = match info {
                Err(e) => Err(e),
                // Linked, never created (a crash between): created now.
                Ok(None) => {
                    self.start_nested(
                        &outer, &call, program, &run, fresh, module, input, host, writes,
                    )
                    .await
                }
                Ok(Some(i)) if i.info.ending.is_some() => {
                    let (r, last) = (run.clone(), i.info.last_fact.n);
                    blocking(&self.inner.store, move |s| recorded_ending(s, &r, last))
                        .await
                        .map(Driven::Result)
                }
                Ok(Some(Seen { info: i, records })) => {
                    let (direct, deep) = match reply {
                        Some(d) if d.below.is_empty() => (Some(d.reply), None),
                        d => (None, d),
                    };
                    match self
                        .ready(&run, &i.last_fact, records, direct, deep, open)
                        .await
                    {
                        Ok(mut ready) => {
                            let settled = self
                                .settle(
                                    &run,
                                    host,
                                    &mut ready.machine,
                                    ready.crashed,
                                    open,
                                    &mut ready.first,
                                )
                                .await;
                            match settled {
                                Ok(more) => {
                                    ready.resend.extend(more);
                                    Box::pin(self.drive(
                                        &run,
                                        ready.program,
                                        ready.machine,
                                        ready.first,
                                        host,
                                        ready.resend,
                                        i.last_fact.n,
                                        ack,
                                        writes,
                                        None,
                                    ))
                                    .await
                                }
                                Err(e) => {
                                    if let Some(a) = ack {
                                        let _ = a.send(Err(e.clone()));
                                    }
                                    Err(e)
                                }
                            }
                        }
                        // Refused (nothing recorded): the outer call stays
                        // open, as the nested run is.
                        Err(e @ (Error::Conflict(_) | Error::Refused(_))) => {
                            tracing::warn!(run.id = %run, error = %e, "nested run not continued");
                            if let Some(a) = ack {
                                let _ = a.send(Err(e));
                            }
                            return Answer::Paused;
                        }
                        Err(e) => {
                            if let Some(a) = ack {
                                let _ = a.send(Err(e.clone()));
                            }
                            Err(e)
                        }
                    }
                }
            };
            match &result {
                Ok(Driven::Result(r)) => {
                    if matches!(r, RunResult::Paused { .. }) {
                        self.inner.deadlines.watch_run(self, &run).await;
                    }
                    self.publish(run.as_str(), r.state(), json!({"outer": outer.as_str()}));
                }
                Ok(Driven::Drained) => {}
                Err(e) => tracing::warn!(run.id = %run, error = %e, "nested run cut short"),
            }
            ended_outcome(result)
        })
    }

    /// A new nested run of `module` with `input`, id `run`: its Start names
    /// the outer run and call (DESIGN §4); the outer run's host record
    /// naming it is written first, unless it was (`fresh` false).
    #[allow(clippy::too_many_arguments)]
    async fn start_nested(
        &self,
        outer: &RunId,
        call: &CallId,
        program: Arc<Program>,
        run: &RunId,
        fresh: bool,
        module: String,
        input: Json,
        host: &Host,
        writes: &Writes,
    ) -> Result<Driven> {
        let outer_call = call.clone();
        let (machine, effects) =
            match start_machine(program.clone(), module.clone(), input.clone()).await? {
                Ok(x) => x,
                // The nested run is refused: a failure of the outer call.
                Err(e) => {
                    return Ok(Driven::Result(RunResult::Faulted {
                        run: run.clone(),
                        why: format!("nested run refused: {e}"),
                    }));
                }
            };
        let (s, r, o, c) = (
            self.inner.store.clone(),
            run.clone(),
            outer.clone(),
            call.clone(),
        );
        let head = tokio::task::spawn_blocking(move || -> Result<_> {
            let sources = super::prepare::start_sources(&*s, &o)?;
            let start = super::prepare::start_fact(
                &r,
                &module,
                &sources,
                input,
                None,
                Some((&o, &outer_call)),
            );
            // Linked both ways: the nested Start names the outer run and
            // call; the outer run's host record names the nested run that
            // served the call (which implementation served a call is the
            // host's record, host-boundary.txt "Binding").
            if fresh {
                s.record_host(
                    &o,
                    HostRecord::now(HostDetails::NestedRun {
                        call: c.clone(),
                        nested_run: r.clone(),
                    }),
                )?;
            }
            // The store places a nested run beside its outer run.
            create(&*s, &Namespace::default(), start, &sources, &[], Vec::new())
        })
        .await
        .map_err(super::drive::engine_lost)??;
        Box::pin(self.drive(
            run,
            program,
            machine,
            steps(effects),
            host,
            Vec::new(),
            head.n,
            None,
            writes,
            None,
        ))
        .await
    }
}

/// The dispatch that continues the nested run `next` of `run` serving an
/// open call, carrying `reply` down.
pub(super) fn continue_call(
    program: &Program,
    c: &OpenCall,
    next: RunId,
    reply: Option<DeepReply>,
    open: Option<OpenChoice>,
) -> Option<ToDispatch> {
    let module = program.nested_module(&c.tool)?.to_string();
    Some(ToDispatch {
        call: c.call.clone(),
        tool: c.tool.clone(),
        args: match &c.args {
            Json::Object(m) => m.clone(),
            _ => Map::new(),
        },
        nested: Some(NestedCall {
            module,
            run: Some(next),
            reply,
            ack: None,
            open,
        }),
        attempt: 1,
    })
}
