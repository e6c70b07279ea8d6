//! Driving a run: the engine's effects carried out against the store and
//! the bound Tools, until the run ends or pauses.
//!
//! DESIGN §3: "Each fact is accepted (durable) before its consequence: a
//! Call before the call is dispatched, a Reply before the program observes
//! it, End before the output is reported." Facts with no outside effect
//! between them are appended together (one commit, one fsync per step),
//! and nothing acts on a fact before its append returned.

use super::calls::Calls;
use super::nested::{Answer, NestedCall};
use super::store::Store;
use super::times::{
    Answered, Sent, TIMINGS_AGE_MS, TIMINGS_MAX, Times, sent_only, timing, timings,
};
use super::{RunResult, RunService, new_run_id};
use crate::error::{Error, Result};
use crate::host::{HUMAN, Host, SLEEP};
use crate::source::Sources;
use flow_abi::fact::Fact;
use flow_engine::machine::{Effect, Machine};
use flow_engine::program::Program;
use flow_store::{Appending, Decision, FactRef, HostDetails, HostRecord, OpenCallDecision, RunId};
use flow_tools::outcome::CallRequest;
use futures_util::future::{AbortHandle, Abortable, Aborted};
use serde_json::{Map, Value as Json};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

/// Most effects a reply's slice computes on the async runtime; a machine
/// still busy after them goes on in the blocking pool's slices.
const INLINE: usize = 16;

/// What the drive records, in the order the machine saw it: an effect of
/// the machine, or a fact the host decided (a Reply it admitted on resume).
pub(super) enum Step {
    Effect(Effect),
    Fact(Fact),
    /// A host record committed with the facts before it (a reply's timing).
    Host(HostDetails),
}

pub(super) fn steps(effects: Vec<Effect>) -> Vec<Step> {
    effects.into_iter().map(Step::Effect).collect()
}

/// A call to send once its fact is durable; `nested` when it is carried
/// out as a nested run.
pub(super) struct ToDispatch {
    pub call: String,
    pub tool: String,
    pub args: Map<String, Json>,
    pub nested: Option<NestedCall>,
    /// 1 for the first send; a resend after a crash or halt counts on.
    pub attempt: u32,
}

pub(super) type Pending<'a> =
    Pin<Box<dyn Future<Output = std::result::Result<(String, Answer), Aborted>> + Send + 'a>>;

/// What a drive shares with the drives of its nested runs: the lock each
/// commit holds, and the signal to drain.
///
/// Draining (a server's graceful shutdown, or a halt that waits for the
/// calls out) lets the calls already sent finish and records their
/// Replies, but sends nothing new: a call the program makes meanwhile is
/// recorded (its Call is durable, as always, before anything else happens)
/// and withheld, with an `open-call-decision` host record saying it was
/// never sent. Once no call is out the drive ends ([`Driven::Drained`]) and
/// whoever continues the run sends the withheld calls: they never ran, so
/// sending them is no repeat whatever their binding's `resend` says.
#[derive(Clone, Default)]
pub(super) struct Writes {
    lock: Arc<tokio::sync::Mutex<()>>,
    pub drain: tokio_util::sync::CancellationToken,
}

impl Writes {
    pub(super) fn new(drain: tokio_util::sync::CancellationToken) -> Writes {
        Writes {
            lock: Arc::default(),
            drain,
        }
    }

    /// Waits for the commit under way, if any.
    pub(super) async fn lock(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.lock.lock().await
    }

    /// Held by a commit until it is done.
    async fn lock_owned(&self) -> tokio::sync::OwnedMutexGuard<()> {
        self.lock.clone().lock_owned().await
    }
}

/// How a drive ended for now.
pub(super) enum Driven {
    /// Ended or paused.
    Result(RunResult),
    /// Drained: no call is out; the calls the program made meanwhile are
    /// recorded and were never sent (see [`Writes`]). The run goes on where
    /// it is continued next.
    Drained,
}

/// Told once the drive's first step is durable (its head then).
pub(super) type Ack = tokio::sync::oneshot::Sender<Result<FactRef>>;

/// The engine's blocking task ended without an answer (it panicked).
pub(super) fn engine_lost(e: tokio::task::JoinError) -> Error {
    Error::Unreadable(format!("the engine's task ended: {e}"))
}

/// Starts `module`'s machine off the async runtime (its first slice is
/// bounded, but can be long).
pub(super) async fn start_machine(
    program: Arc<Program>,
    module: String,
    input: Json,
) -> Result<std::result::Result<(Machine, Vec<Effect>), flow_engine::machine::Refusal>> {
    tokio::task::spawn_blocking(move || Machine::start(program, &module, &input))
        .await
        .map_err(engine_lost)
}

/// Records a new run's Start and source texts with the program directory
/// it was read from (resume and fork keep the original local source base:
/// host-boundary.txt, "Binding"), in one commit, durable on return.
/// The `--tools` manifests that bound some of its Tools (`tools`, kept so
/// a resume line printed for the run carries them: issue 41 §7) go in a
/// `binding` record of their own.
pub(super) fn create(
    store: &dyn Store,
    start: Fact,
    sources: &Sources,
    tools: &[PathBuf],
) -> Result<FactRef> {
    let mut records = Vec::new();
    if let Some(dir) = &sources.dir {
        let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.clone());
        records.push(HostRecord::now(HostDetails::ProgramDir {
            program_dir: dir.to_string_lossy().into_owned(),
        }));
    }
    if !tools.is_empty() {
        records.push(HostRecord::now(HostDetails::Tools {
            tools: tools
                .iter()
                .map(|t| t.to_string_lossy().into_owned())
                .collect(),
        }));
    }
    let a = store.create_run(start, &sources.source_texts(), records)?;
    Ok(FactRef {
        n: a.n,
        hash: a.hash,
    })
}

impl RunService {
    /// Carries out effects until the run ends or pauses. `head` is the
    /// run's last durable fact; `ack` is told when the first batch is.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn drive<'h>(
        &'h self,
        run: &RunId,
        program: Arc<Program>,
        mut machine: Machine,
        mut effects: Vec<Step>,
        host: &'h Host,
        resend: Vec<ToDispatch>,
        head: u64,
        mut ack: Option<Ack>,
        writes: &'h Writes,
    ) -> Result<Driven> {
        let module = machine.module().to_string();
        // Every Checkpoint from here on is recorded in order, so one of the
        // state before can be given by what changed (the next is whole).
        machine.checkpoint_by_change();
        let mut resend = resend;
        // A reply carried down to a nested run is acknowledged there, once
        // it is durable in that run's history.
        if let Some(n) = resend
            .iter_mut()
            .find_map(|d| d.nested.as_mut().filter(|n| n.reply.is_some()))
        {
            n.ack = ack.take();
        }
        let mut resend = Some(resend);
        let mut last = FactRef {
            n: head,
            hash: String::new(),
        };
        let mut inflight = Calls::new();
        // Abort handles of dispatched calls: a Close drops the call's future,
        // which cancels it at its implementation.
        let mut aborts: BTreeMap<String, AbortHandle> = BTreeMap::new();
        // The nested run serving each nested call out now.
        let mut serving: BTreeMap<String, RunId> = BTreeMap::new();
        let mut facts: Vec<Appending> = Vec::new();
        // Host records that ride with the next commit (timings, deadlines).
        let mut records: Vec<HostDetails> = Vec::new();
        // Calls out, for their timing records, and calls answered whose
        // times are not recorded yet.
        let mut times = Times {
            store: self.inner.store.clone(),
            run: run.clone(),
            sent: BTreeMap::new(),
            answered: Vec::new(),
        };
        let now_ms = super::deadlines::now_ms;
        // Replies that came while the machine computed a slice.
        let mut arrived: VecDeque<(String, Answer)> = VecDeque::new();
        // Draining: Tool calls recorded and never sent, and whether a
        // nested run drained with its own.
        let mut withheld: Vec<String> = Vec::new();
        let mut nested_withheld = false;
        // `std/clock#sleep` calls out: a wait the host serves with no
        // effect, so a drain cuts it short and it counts as never sent.
        let mut sleeping: BTreeSet<String> = BTreeSet::new();
        loop {
            // Calls open at a crash whose binding says `resend = true` go out
            // again with the same (run, call) pair (DESIGN §5).
            let mut dispatch: Vec<ToDispatch> = resend.take().unwrap_or_default();
            let mut ended = None;
            // Nested runs whose outer call was closed: halted (NEST-18).
            let mut stopped = Vec::new();
            for step in effects.drain(..) {
                let e = match step {
                    Step::Fact(f) => {
                        facts.push(f.into());
                        continue;
                    }
                    Step::Host(d) => {
                        records.push(d);
                        continue;
                    }
                    Step::Effect(e) => e,
                };
                // A Checkpoint is only recorded: its state moves into the
                // fact.
                match e {
                    Effect::Checkpoint { .. } => {
                        facts.extend(e.into_fact().map(Appending::Fact));
                        continue;
                    }
                    Effect::Changed { task, node, change } => {
                        facts.push(Appending::Changed {
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
                    facts.push(f.into());
                }
                match e {
                    Effect::Call {
                        call,
                        tool,
                        args,
                        nested,
                        ..
                    } => {
                        if tool == HUMAN {
                            // A person's call is out once its Call is
                            // durable (this commit).
                            records.push(timing(
                                call.as_str(),
                                Some("person"),
                                None,
                                Some(now_ms()),
                                None,
                                None,
                            )?);
                            continue;
                        }
                        let args = match args {
                            Json::Object(m) => m,
                            _ => Map::new(),
                        };
                        dispatch.push(ToDispatch {
                            call: call.to_string(),
                            tool,
                            args,
                            nested: nested.map(NestedCall::start),
                            attempt: 1,
                        });
                    }
                    Effect::Close { call, .. } => {
                        if let Some(a) = aborts.remove(call.as_str()) {
                            a.abort();
                            host.closed(&module, run.as_str(), call.as_str());
                        }
                        stopped.extend(serving.remove(call.as_str()));
                        if let Some(s) = times.sent.remove(call.as_str()) {
                            records.push(sent_only(call.as_str(), &s)?);
                        }
                    }
                    Effect::Deadline { call, seconds } => {
                        let due = super::deadlines::now_ms().saturating_add(
                            seconds.saturating_mul(1000).min(i64::MAX as u64) as i64,
                        );
                        records.push(HostDetails::Timeout {
                            call: call.clone(),
                            due_ms: due,
                        });
                    }
                    Effect::End(ending) => ended = Some(ending),
                    Effect::Checkpoint { .. } | Effect::Changed { .. } => {}
                }
            }
            if let Some(first) = times.answered.first()
                && (ended.is_some()
                    || times.answered.len() >= TIMINGS_MAX
                    || now_ms() - first.replied_ms >= TIMINGS_AGE_MS)
            {
                records.push(timings(std::mem::take(&mut times.answered))?);
            }
            let appended = self
                .append_all(run, &mut last, &mut facts, &mut records, writes)
                .await;
            if let Some(a) = ack.take() {
                let _ = a.send(appended.clone().map(|()| last.clone()));
            }
            appended?;
            if !stopped.is_empty() {
                // After the Close is durable, and after any commit the
                // dropped nested drive handed to the store.
                let _done = writes.lock().await;
                for n in stopped {
                    self.halt_closed(&n).await;
                }
            }
            if let Some(ending) = ended {
                return Ok(Driven::Result(RunResult::ended(run, ending)));
            }
            if writes.drain.is_cancelled() && !dispatch.is_empty() {
                // Nothing new goes out while draining. A nested call's run
                // is started or continued by whoever continues this run; a
                // Tool call is recorded as never sent once none is out.
                for d in dispatch.drain(..) {
                    match d.nested {
                        Some(_) => nested_withheld = true,
                        None => withheld.push(d.call),
                    }
                }
            }
            for d in dispatch {
                let ToDispatch {
                    call,
                    tool,
                    args,
                    nested,
                    attempt,
                } = d;
                let route = match nested {
                    Some(_) => "nested",
                    None => host.route(&module, &tool),
                };
                times.sent.insert(
                    call.clone(),
                    Sent {
                        tool: tool.clone(),
                        at_ms: now_ms(),
                        route,
                        attempt,
                    },
                );
                let (handle, registration) = AbortHandle::new_pair();
                aborts.insert(call.clone(), handle);
                if let Some(mut n) = nested {
                    let (id, fresh) = match n.run.take() {
                        Some(id) => (id, false),
                        None => (new_run_id(), true),
                    };
                    serving.insert(call.clone(), id.clone());
                    let fut = self.nested(
                        run.clone(),
                        call.clone(),
                        program.clone(),
                        id,
                        fresh,
                        n,
                        args,
                        host,
                        writes,
                    );
                    let fut = async move { (call, fut.await) };
                    inflight.push(Box::pin(Abortable::new(fut, registration)));
                    continue;
                }
                if tool == SLEEP {
                    sleeping.insert(call.clone());
                }
                let req = CallRequest {
                    run: run.to_string(),
                    call: call.clone(),
                    tool,
                    args,
                };
                let module = module.clone();
                let fut = async move {
                    let out = match host.dispatch(&module, req).await {
                        Some(o) => Answer::Reply(o),
                        // Parked for an absent worker: the call stays open.
                        None => Answer::Paused,
                    };
                    (call, out)
                };
                inflight.push(Box::pin(Abortable::new(fut, registration)));
            }
            if let Some(p) = &self.inner.progress {
                p(run, last.n, inflight.len());
            }
            if machine.busy() {
                // A long stretch without calls comes in slices, each
                // recorded before the next is computed; replies that arrive
                // meanwhile wait their turn.
                let job = tokio::task::spawn_blocking(move || {
                    let more = machine.proceed();
                    (machine, more)
                });
                tokio::pin!(job);
                let (m, more) = loop {
                    tokio::select! {
                        r = &mut job => break r.map_err(engine_lost)?,
                        Some(x) = inflight.next() => {
                            if let Ok(x) = x {
                                arrived.push_back(x);
                            }
                        }
                    }
                };
                machine = m;
                effects = steps(more);
                continue;
            }
            let next = match arrived.pop_front() {
                Some(x) => Some(x),
                None => loop {
                    tokio::select! {
                        biased;
                        x = inflight.next() => match x {
                            // A call closed (or a sleep cut short by a
                            // drain) meanwhile: its future was dropped.
                            Some(Err(Aborted)) => continue,
                            Some(Ok(x)) => break Some(x),
                            None => break None,
                        },
                        _ = writes.drain.cancelled(), if !sleeping.is_empty() => {
                            for call in std::mem::take(&mut sleeping) {
                                if let Some(a) = aborts.remove(&call) {
                                    a.abort();
                                }
                                withheld.push(call);
                            }
                        }
                    }
                },
            };
            let Some((call, answer)) = next else {
                // Calls still out (parked, in a paused or drained nested
                // run) keep when they went.
                let mut out = std::mem::take(&mut times.sent)
                    .iter()
                    .map(|(c, s)| sent_only(c, s))
                    .collect::<Result<Vec<_>>>()?;
                if !times.answered.is_empty() {
                    out.push(timings(std::mem::take(&mut times.answered))?);
                }
                self.record_all(run, out).await?;
                if !withheld.is_empty() || nested_withheld {
                    self.withheld(run, &withheld).await?;
                    return Ok(Driven::Drained);
                }
                return self
                    .paused(run, last, program, machine)
                    .await
                    .map(Driven::Result);
            };
            aborts.remove(&call);
            sleeping.remove(&call);
            let outcome = match answer {
                Answer::Reply(o) => o,
                // A nested run paused, or the call is parked for an absent
                // worker: it stays open, and this run pauses once nothing
                // else is out.
                Answer::Paused => continue,
                // A nested run drained: the call stays open, and this run
                // drains too once nothing else is out.
                Answer::Drained => {
                    nested_withheld = true;
                    continue;
                }
            };
            serving.remove(&call);
            let out = times.sent.remove(&call);
            // A reply for a call closed meanwhile is dropped.
            if !machine.is_open(&call) {
                tracing::info!(run.id = %run, call.id = %call, "reply to a closed call dropped");
                continue;
            }
            // A reply the machine would fail at once (it does not fit the
            // node's schema or the state fields it is written to) is
            // recorded as the BadReply it is, with the reason (PRO-13).
            let o = outcome.into_outcome();
            let o = match machine.misfit(&call, &o) {
                Some(why) => flow_abi::protocol::Outcome::BadReply(why),
                None => o,
            };
            // A reply's first few effects are computed here (a Tool step's
            // Checkpoint and next Call: no thread hand-off per step); a
            // longer stretch goes on where it is recorded next, off the
            // async runtime (`machine.busy()` above), so a worker others
            // need is never held for more than INLINE effects. The Reply
            // is buffered before them all the same (the effects are
            // recorded after the facts buffered here).
            // A process that ended before answering leaves its last
            // words (issue 38 §4).
            if matches!(
                o,
                flow_abi::protocol::Outcome::Unknown(_) | flow_abi::protocol::Outcome::NotRun(_)
            ) && let Some(s) = &out
                && let Some(text) = host.take_stderr(&module, &s.tool, run.as_str(), &call)
            {
                records.push(HostDetails::Stderr {
                    call: Some(call_id(&call)?),
                    tool: s.tool.clone(),
                    text,
                });
            }
            let more = machine.feed_within(&call, &o, INLINE);
            facts.push(super::prepare::reply_fact(&call, o)?.into());
            match out {
                Some(s) => {
                    let replied_ms = now_ms();
                    self.inner
                        .stats
                        .call_took(&s.tool, s.route, replied_ms - s.at_ms);
                    times.answered.push(Answered {
                        call,
                        route: s.route,
                        attempt: s.attempt,
                        sent_ms: s.at_ms,
                        replied_ms,
                    })
                }
                None => records.push(timing(&call, None, None, None, Some(now_ms()), None)?),
            }
            effects = steps(more.map_err(|e| Error::Conflict(e.to_string()))?);
        }
    }

    /// Records host records of `run` (off the runtime), each its own commit:
    /// for a drive that stops, when no fact is left to ride with.
    async fn record_all(&self, run: &RunId, records: Vec<HostDetails>) -> Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        let r = run.clone();
        super::store::blocking(&self.inner.store, move |s| {
            for d in records {
                s.record_host(&r, HostRecord::now(d))?;
            }
            Ok(())
        })
        .await
    }

    /// Records that the Tool calls `calls` (durable, open) were never sent:
    /// the drive drained before sending them.
    async fn withheld(&self, run: &RunId, calls: &[String]) -> Result<()> {
        if calls.is_empty() {
            return Ok(());
        }
        let (r, calls) = (run.clone(), calls.to_vec());
        super::store::blocking(&self.inner.store, move |s| {
            for call in calls {
                s.record_host(
                    &r,
                    HostRecord::now(HostDetails::OpenCall(OpenCallDecision {
                        call: call_id(&call)?,
                        decision: Decision::Unsent,
                        reason: "draining".into(),
                        chosen: None,
                    })),
                )?;
            }
            Ok(())
        })
        .await
    }

    /// Every live task waits on a call no live implementation will answer:
    /// the pause is a host record (nothing is written to the history), and
    /// the machine is kept for the resume that follows.
    async fn paused(
        &self,
        run: &RunId,
        last: FactRef,
        program: Arc<Program>,
        machine: Machine,
    ) -> Result<RunResult> {
        let own = machine.open_calls();
        let open = own
            .iter()
            .map(|c| call_id(&c.call))
            .collect::<Result<Vec<_>>>()?;
        let r = run.clone();
        let row = super::store::blocking(&self.inner.store, move |s| {
            Ok(s.record_host(&r, HostRecord::now(HostDetails::Pause { open }))?)
        })
        .await?;
        // The calls to answer: a nested run's pending calls stand for the
        // call that drives it.
        let (this, r) = (self.clone(), run.clone());
        let open = tokio::task::spawn_blocking(move || this.pending_of(&r, own))
            .await
            .map_err(engine_lost)??;
        // The pause record's head is the run's head: the machine is valid
        // exactly while it stays so.
        debug_assert!(last.hash.is_empty() || last == row.head);
        self.remember_paused(run, row.head, program, machine);
        Ok(RunResult::Paused {
            run: run.clone(),
            open,
        })
    }

    /// Appends the buffered facts, numbering them, and the host records
    /// made with them (deadlines, timings: after the facts, in the same
    /// commit, so a deadline counts from its durable Call and a step's
    /// timings cost no commit of their own); returns once every one is
    /// durable.
    ///
    /// The store's writer commits whatever is queued in one transaction, so
    /// many runs queue at once and share each commit (group commit). When
    /// it is idle, SQLite's commits this step on the calling worker at once
    /// (one fsync, no hand-off to its thread and back: the W1 step).
    async fn append_all(
        &self,
        run: &RunId,
        last: &mut FactRef,
        facts: &mut Vec<Appending>,
        records: &mut Vec<HostDetails>,
        writes: &Writes,
    ) -> Result<()> {
        if facts.is_empty() {
            // Records with no fact to ride with (rare: a step that only
            // dropped a reply) wait for their own commit.
            return self.record_all(run, std::mem::take(records)).await;
        }
        let mut n = last.n;
        let batch: Vec<Appending> = facts
            .drain(..)
            .map(|mut f| {
                n += 1;
                f.set_n(n);
                f
            })
            .collect();
        let count = batch.len() as u64;
        let records: Vec<HostRecord> = records.drain(..).map(HostRecord::now).collect();
        let (store, r) = (self.inner.store.clone(), run.clone());
        // The guard goes with the commit: a drive stopped while this commit
        // is under way lets go of its run only once it is done, so a halt
        // record never precedes a fact of the drive it halted.
        let guard = writes.lock_owned().await;
        let committing = self.inner.commits.begin();
        let began = std::time::Instant::now();
        let lost = |e: &dyn std::fmt::Display| {
            Error::Unreadable(format!("the store's writer could not be reached: {e}"))
        };
        // The writer answers this task itself (or this worker commits it,
        // the writer being idle), so no other thread waits for the commit.
        let (tx, rx) = tokio::sync::oneshot::channel();
        store.append_all_with_then(
            &r,
            batch,
            records,
            Box::new(move |res| {
                let _writing = (guard, committing);
                let _ = tx.send(res);
            }),
        );
        let appended = rx.await.map_err(|e| lost(&e))??;
        if let Some(a) = appended.last() {
            *last = FactRef {
                n: a.n,
                hash: a.hash.clone(),
            };
        }
        let stats = &self.inner.stats;
        stats.commit.observe(began.elapsed().as_secs_f64());
        stats
            .facts
            .fetch_add(count, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }
}

/// A call id the engine made, typed for a host record. The engine makes
/// only ids that parse; one that does not is a broken invariant, refused.
pub(super) fn call_id(call: &str) -> Result<flow_abi::fact::CallId> {
    flow_abi::fact::CallId::parse(call)
        .map_err(|e| Error::Unreadable(format!("the engine made a malformed call id: {e}")))
}
