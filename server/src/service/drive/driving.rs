//! One drive's state between its rounds, and the rounds' steps: effects
//! absorbed into facts, records and calls to send; those committed; the
//! calls sent along their routes; a busy machine's next slice computed;
//! the next answer awaited and admitted. [`RunService::drive`] runs them in
//! order until the run ends, pauses or drains.

use super::super::calls::Calls;
use super::super::nested::{Answer, NestedCall};
use super::super::otlp::{Spans, Stop};
use super::super::times::{
    Answered, Sent, TIMINGS_AGE_MS, TIMINGS_MAX, Times, sent_only, timing, timings,
};
use super::super::{RunService, new_run_id};
use super::{Ack, Creating, Driven, INLINE, Step, ToDispatch, Writes, engine_lost, steps};
use crate::error::{Error, Result};
use crate::host::{HUMAN, Host, SLEEP, Served};
use flow_abi::fact::{CallId, Ending};
use flow_abi::protocol::Outcome;
use flow_engine::machine::{Effect, Machine};
use flow_engine::program::Program;
use flow_store::{Appending, FactRef, HostDetails, RunId};
use flow_tools::outcome::CallRequest;
use futures_util::future::{AbortHandle, Abortable, Aborted};
use serde_json::{Map, Value as Json};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use super::super::deadlines::now_ms;

/// What one round of effects asks of the drive once it is committed.
#[derive(Default)]
pub(super) struct Round {
    /// Calls to send, their Calls durable with this round's commit.
    pub dispatch: Vec<ToDispatch>,
    pub ended: Option<Ending>,
    /// Nested runs whose outer call was closed: halted (NEST-18).
    pub stopped: Vec<RunId>,
}

/// A drive's state between rounds (the machine is the drive's own: it
/// moves to the blocking pool for a slice and back).
pub(super) struct Driving<'h> {
    svc: &'h RunService,
    run: RunId,
    module: String,
    program: Arc<Program>,
    host: &'h Host,
    writes: &'h Writes,
    /// Told once the first round is durable.
    ack: Option<Ack>,
    /// A new run's Start, recorded with the first round.
    creating: Option<Creating>,
    /// The run's last durable fact.
    last: FactRef,
    inflight: Calls<'h>,
    /// Abort handles of dispatched calls: a Close drops the call's future,
    /// which cancels it at its implementation.
    aborts: BTreeMap<CallId, AbortHandle>,
    /// The nested run serving each nested call out now.
    serving: BTreeMap<CallId, RunId>,
    facts: Vec<Appending>,
    /// Host records that ride with the next commit (timings, deadlines).
    records: Vec<HostDetails>,
    /// Calls out, for their timing records, and calls answered whose times
    /// are not recorded yet.
    times: Times,
    /// With `--otlp-endpoint`: what each commit makes durable, as spans.
    spans: Option<Spans>,
    /// Replies that came while the machine computed a slice.
    arrived: VecDeque<(CallId, Answer)>,
    /// Draining: Tool calls recorded and never sent, and whether a nested
    /// run drained with its own.
    withheld: Vec<CallId>,
    nested_withheld: bool,
    /// `std/clock#sleep` calls out: a wait the host serves with no effect,
    /// so a drain cuts it short and it counts as never sent.
    sleeping: BTreeSet<CallId>,
}

impl<'h> Driving<'h> {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        svc: &'h RunService,
        run: &RunId,
        module: String,
        program: Arc<Program>,
        host: &'h Host,
        writes: &'h Writes,
        head: u64,
        ack: Option<Ack>,
        creating: Option<Creating>,
    ) -> Driving<'h> {
        Driving {
            svc,
            run: run.clone(),
            module,
            program,
            host,
            writes,
            ack,
            creating,
            last: FactRef {
                n: head,
                hash: String::new(),
            },
            inflight: Calls::new(),
            aborts: BTreeMap::new(),
            serving: BTreeMap::new(),
            facts: Vec::new(),
            records: Vec::new(),
            times: Times {
                store: svc.inner.store.clone(),
                run: run.clone(),
                sent: BTreeMap::new(),
                answered: Vec::new(),
            },
            spans: svc.inner.otlp.as_ref().map(|t| t.spans(run, head)),
            arrived: VecDeque::new(),
            withheld: Vec::new(),
            nested_withheld: false,
            sleeping: BTreeSet::new(),
        }
    }

    /// Takes in a round's effects (after `resend`, the calls to send again):
    /// facts and host records to commit, calls to send after them.
    pub(super) fn absorb(&mut self, effects: Vec<Step>, resend: Vec<ToDispatch>) -> Result<Round> {
        let mut round = Round {
            dispatch: resend,
            ..Round::default()
        };
        for step in effects {
            let e = match step {
                Step::Fact(f) => {
                    self.facts.push(f.into());
                    continue;
                }
                Step::Host(d) => {
                    self.records.push(d);
                    continue;
                }
                Step::Effect(e) => e,
            };
            // A Checkpoint is only recorded: its state moves into the fact.
            match e {
                Effect::Checkpoint { .. } => {
                    self.facts.extend(e.into_fact().map(Appending::Fact));
                    continue;
                }
                Effect::Changed { task, node, change } => {
                    self.facts.push(Appending::Changed {
                        n: 0,
                        task,
                        node,
                        change,
                    });
                    continue;
                }
                _ => {}
            }
            if let Some(f) = e.fact() {
                self.facts.push(f.into());
            }
            self.effect(e, &mut round)?;
        }
        Ok(round)
    }

    /// What an effect other than a Checkpoint asks beside its fact.
    fn effect(&mut self, e: Effect, round: &mut Round) -> Result<()> {
        match e {
            Effect::Call {
                call,
                tool,
                args,
                nested,
                ..
            } => {
                if tool == HUMAN {
                    // A person's call is out once its Call is durable
                    // (this commit).
                    self.records.push(timing(
                        &call,
                        Some("person"),
                        None,
                        Some(now_ms()),
                        None,
                        None,
                    ));
                    return Ok(());
                }
                let args = match args {
                    Json::Object(m) => m,
                    _ => Map::new(),
                };
                round.dispatch.push(ToDispatch {
                    call,
                    tool,
                    args,
                    nested: nested.map(NestedCall::start),
                    attempt: 1,
                });
            }
            Effect::Close { call, .. } => {
                if let Some(a) = self.aborts.remove(call.as_str()) {
                    a.abort();
                    self.host.closed(&self.module, &self.run, &call);
                }
                round.stopped.extend(self.serving.remove(call.as_str()));
                if let Some(s) = self.times.sent.remove(call.as_str()) {
                    self.records.push(sent_only(&call, &s));
                }
            }
            Effect::Deadline { call, seconds } => {
                let due = now_ms()
                    .saturating_add(seconds.saturating_mul(1000).min(i64::MAX as u64) as i64);
                self.records.push(HostDetails::Timeout {
                    call: call.clone(),
                    due_ms: due,
                });
            }
            Effect::End(ending) => round.ended = Some(ending),
            Effect::Checkpoint { .. } | Effect::Changed { .. } => {}
        }
        Ok(())
    }

    /// Commits what the round buffered (with the timings due), tells the
    /// first caller waiting for it, and halts the nested runs whose calls
    /// were closed once their Closes are durable.
    pub(super) async fn commit(&mut self, round: &mut Round) -> Result<()> {
        // Its Replies and End as spans, sent once they are durable.
        let noted = self
            .spans
            .as_mut()
            .map(|s| s.note(self.last.n, &self.facts, &self.times.answered));
        if let Some(first) = self.times.answered.first()
            && (round.ended.is_some()
                || self.times.answered.len() >= TIMINGS_MAX
                || now_ms() - first.replied_ms >= TIMINGS_AGE_MS)
        {
            self.records
                .push(timings(std::mem::take(&mut self.times.answered)));
        }
        let created = self.creating.is_some();
        let appended = self
            .svc
            .append_all(
                &self.run,
                &mut self.last,
                &mut self.facts,
                &mut self.records,
                self.writes,
                self.creating.take(),
            )
            .await;
        if let Some(a) = self.ack.take() {
            let _ = a.send(appended.clone().map(|()| self.last.clone()));
        }
        appended?;
        if created {
            // Before anything this drive publishes next.
            self.svc.started(&self.run);
        }
        if let (Some(s), Some(n)) = (&self.spans, noted) {
            s.durable(n);
        }
        if !round.stopped.is_empty() {
            // After the Close is durable, and after any commit the dropped
            // nested drive handed to the store.
            let _done = self.writes.lock().await;
            for n in std::mem::take(&mut round.stopped) {
                self.svc.halt_closed(&n).await;
            }
        }
        Ok(())
    }

    /// Sends the round's calls, each along its route (a nested run, or the
    /// host's: child process, MCP server, worker); while draining, none:
    /// they are withheld.
    pub(super) fn send(&mut self, mut dispatch: Vec<ToDispatch>) {
        if self.writes.drain.is_cancelled() && !dispatch.is_empty() {
            // Nothing new goes out while draining. A nested call's run is
            // started or continued by whoever continues this run; a Tool
            // call is recorded as never sent once none is out.
            for d in dispatch.drain(..) {
                match d.nested {
                    Some(_) => self.nested_withheld = true,
                    None => self.withheld.push(d.call),
                }
            }
        }
        for d in dispatch {
            self.dispatch(d);
        }
        if let Some(p) = &self.svc.inner.progress {
            p(&self.run, self.last.n, self.inflight.len());
        }
    }

    fn dispatch(&mut self, d: ToDispatch) {
        let ToDispatch {
            call,
            tool,
            args,
            nested,
            attempt,
        } = d;
        let route = match nested {
            Some(_) => "nested",
            None => self.host.route(&self.module, &tool),
        };
        self.times.sent.insert(
            call.clone(),
            Sent {
                tool: tool.clone(),
                at_ms: now_ms(),
                route,
                attempt,
            },
        );
        let (handle, registration) = AbortHandle::new_pair();
        self.aborts.insert(call.clone(), handle);
        if let Some(mut n) = nested {
            let (id, fresh) = match n.run.take() {
                Some(id) => (id, false),
                None => (new_run_id(), true),
            };
            self.serving.insert(call.clone(), id.clone());
            let fut = self.svc.nested(
                self.run.clone(),
                call.clone(),
                self.program.clone(),
                id,
                fresh,
                n,
                args,
                self.host,
                self.writes,
            );
            let fut = async move { (call, fut.await) };
            self.inflight
                .push(Box::pin(Abortable::new(fut, registration)));
            return;
        }
        if tool == SLEEP {
            self.sleeping.insert(call.clone());
        }
        let req = CallRequest {
            run: self.run.clone(),
            call: call.clone(),
            tool,
            args,
        };
        let (host, module) = (self.host, self.module.clone());
        let fut = async move {
            let out = match host.dispatch(&module, req).await {
                Some(s) => Answer::Reply(s),
                // Parked for an absent worker: the call stays open.
                None => Answer::Paused,
            };
            (call, out)
        };
        self.inflight
            .push(Box::pin(Abortable::new(fut, registration)));
    }

    /// A long stretch without calls comes in slices, each recorded before
    /// the next is computed (off the async runtime); replies that arrive
    /// meanwhile wait their turn.
    pub(super) async fn slice(&mut self, mut machine: Machine) -> Result<(Machine, Vec<Step>)> {
        let job = tokio::task::spawn_blocking(move || {
            let more = machine.proceed();
            (machine, more)
        });
        tokio::pin!(job);
        let (m, more) = loop {
            tokio::select! {
                r = &mut job => break r.map_err(engine_lost)?,
                Some(x) = self.inflight.next() => {
                    if let Ok(x) = x {
                        self.arrived.push_back(x);
                    }
                }
            }
        };
        Ok((m, steps(more)))
    }

    /// The next answer to a call out (one that came during a slice first);
    /// `None` once no call is out. A drain cuts sleeps short.
    pub(super) async fn next_answer(&mut self) -> Option<(CallId, Answer)> {
        if let Some(x) = self.arrived.pop_front() {
            return Some(x);
        }
        loop {
            tokio::select! {
                biased;
                x = self.inflight.next() => match x {
                    // A call closed (or a sleep cut short by a drain)
                    // meanwhile: its future was dropped.
                    Some(Err(Aborted)) => continue,
                    Some(Ok(x)) => return Some(x),
                    None => return None,
                },
                _ = self.writes.drain.cancelled(), if !self.sleeping.is_empty() => {
                    for call in std::mem::take(&mut self.sleeping) {
                        if let Some(a) = self.aborts.remove(&call) {
                            a.abort();
                        }
                        self.withheld.push(call);
                    }
                }
            }
        }
    }

    /// No call is out: the drive stops, drained or paused, with the times
    /// of the calls still out (parked, in a paused or drained nested run)
    /// recorded.
    pub(super) async fn stop(mut self, machine: Machine) -> Result<Driven> {
        let mut out = std::mem::take(&mut self.times.sent)
            .iter()
            .map(|(c, s)| sent_only(c, s))
            .collect::<Vec<_>>();
        if !self.times.answered.is_empty() {
            out.push(timings(std::mem::take(&mut self.times.answered)));
        }
        self.svc.record_all(&self.run, out).await?;
        if !self.withheld.is_empty() || self.nested_withheld {
            self.svc.withheld(&self.run, &self.withheld).await?;
            if let Some(s) = &mut self.spans {
                s.stopped(Stop::Drained, Vec::new());
            }
            return Ok(Driven::Drained);
        }
        // The calls a pause waits on, for its segment span (only traced).
        let waiting: Vec<_> = match &self.spans {
            Some(_) => machine.open_calls().into_iter().map(|c| c.call).collect(),
            None => Vec::new(),
        };
        let paused = self
            .svc
            .paused(&self.run, self.last, self.program, machine)
            .await?;
        if let Some(s) = &mut self.spans {
            s.stopped(Stop::Paused, waiting);
        }
        Ok(Driven::Result(paused))
    }

    /// Admits an answer to `call`: its Reply buffered, and the first few
    /// effects the machine derives from it. Nothing for an answer that
    /// leaves the call open (a nested run paused or drained, a call parked
    /// for an absent worker) or a reply to a call closed meanwhile.
    pub(super) fn admit(
        &mut self,
        machine: &mut Machine,
        call: CallId,
        answer: Answer,
    ) -> Result<Vec<Step>> {
        self.aborts.remove(&call);
        self.sleeping.remove(&call);
        let Served { outcome, worker } = match answer {
            Answer::Reply(s) => s,
            // A nested run paused, or the call is parked for an absent
            // worker: it stays open, and this run pauses once nothing else
            // is out.
            Answer::Paused => return Ok(Vec::new()),
            // A nested run drained: the call stays open, and this run
            // drains too once nothing else is out.
            Answer::Drained => {
                self.nested_withheld = true;
                return Ok(Vec::new());
            }
        };
        self.serving.remove(&call);
        let out = self.times.sent.remove(&call);
        // A reply for a call closed meanwhile is dropped.
        if !machine.is_open(call.as_str()) {
            tracing::info!(run.id = %self.run, call.id = %call, "reply to a closed call dropped");
            return Ok(Vec::new());
        }
        // A reply the machine would fail at once (it does not fit the
        // node's schema or the state fields it is written to) is recorded
        // as the BadReply it is, with the reason (PRO-13).
        let o = outcome.into_outcome();
        let o = match machine.misfit(call.as_str(), &o) {
            Some(why) => Outcome::BadReply(why),
            None => o,
        };
        // A process that ended before answering leaves its last words
        // (issue 38 §4).
        if matches!(o, Outcome::Unknown(_) | Outcome::NotRun(_))
            && let Some(s) = &out
            && let Some(text) =
                self.host
                    .take_stderr(&self.module, &s.tool, self.run.as_str(), call.as_str())
        {
            self.records.push(HostDetails::Stderr {
                call: Some(call.clone()),
                tool: s.tool.clone(),
                text,
            });
        }
        // A reply's first few effects are computed here (a Tool step's
        // Checkpoint and next Call: no thread hand-off per step); a longer
        // stretch goes on where it is recorded next, off the async runtime
        // (`machine.busy()`), so a worker others need is never held for
        // more than INLINE effects. The Reply is buffered before them all
        // the same (the effects are recorded after the facts buffered
        // here).
        let more = machine.feed_within(call.as_str(), &o, INLINE);
        self.facts
            .push(super::super::prepare::reply_fact(&call, o).into());
        self.answered(call, out, worker);
        Ok(steps(more.map_err(|e| Error::Conflict(e.to_string()))?))
    }

    /// The times of an answered call: sent and replied when this drive
    /// sent it, else replied only (a call sent before a restart).
    fn answered(&mut self, call: CallId, out: Option<Sent>, worker: Option<String>) {
        match out {
            Some(s) => {
                let replied_ms = now_ms();
                self.svc
                    .inner
                    .stats
                    .call_took(&s.tool, s.route, replied_ms - s.at_ms);
                self.times.answered.push(Answered {
                    call,
                    tool: s.tool,
                    route: s.route,
                    worker,
                    attempt: s.attempt,
                    sent_ms: s.at_ms,
                    replied_ms,
                })
            }
            None => self
                .records
                .push(timing(&call, None, None, None, Some(now_ms()), None)),
        }
    }
}
