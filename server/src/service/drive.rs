//! Driving a run: the engine's effects carried out against the store and
//! the bound Tools, until the run ends or pauses.
//!
//! DESIGN §3: "Each fact is accepted (durable) before its consequence: a
//! Call before the call is dispatched, a Reply before the program observes
//! it, End before the output is reported." Facts with no outside effect
//! between them are appended together (one commit, one fsync per step),
//! and nothing acts on a fact before its append returned.

use super::store::Store;
use super::{RunResult, RunService, new_run_id};
use crate::error::{Error, Result};
use crate::host::{HUMAN, Host};
use crate::source::Sources;
use flow_abi::fact::{CallId, Fact};
use flow_abi::protocol::Outcome;
use flow_engine::machine::{Effect, Machine};
use flow_engine::program::Program;
use flow_store::{FactRef, HostRecord, HostRecordKind, RunId};
use flow_tools::CallOutcome;
use flow_tools::outcome::CallRequest;
use futures_util::StreamExt;
use futures_util::future::{AbortHandle, Abortable, Aborted};
use futures_util::stream::FuturesUnordered;
use serde_json::{Map, Value as Json, json};
use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// What the drive records, in the order the machine saw it: an effect of
/// the machine, or a fact the host decided (a Reply it admitted on resume).
pub(super) enum Step {
    Effect(Effect),
    Fact(Fact),
}

pub(super) fn steps(effects: Vec<Effect>) -> Vec<Step> {
    effects.into_iter().map(Step::Effect).collect()
}

/// A call to send once its fact is durable: call id, tool, args, nested
/// module.
pub(super) type ToDispatch = (String, String, Map<String, Json>, Option<String>);

/// A call's outcome once it comes; `None` for a call parked for a remote
/// worker that is absent (it stays open, the run may pause).
type Pending<'a> = Pin<
    Box<
        dyn Future<Output = std::result::Result<(String, Option<CallOutcome>), Aborted>>
            + Send
            + 'a,
    >,
>;

/// Held by each commit of a drive (and of its nested runs).
pub(super) type Writes = Arc<tokio::sync::Mutex<()>>;

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

/// Records a new run's Start and source texts (durable on return), and the
/// program directory it was read from (resume and fork keep the original
/// local source base: host-boundary.txt, "Binding").
pub(super) fn create(
    store: &dyn Store,
    run: &RunId,
    start: &Fact,
    sources: &Sources,
) -> Result<FactRef> {
    let a = store.create_run(&start.to_json(), &sources.source_texts())?;
    if let Some(dir) = &sources.dir {
        let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.clone());
        store.record_host(
            run,
            HostRecord {
                kind: HostRecordKind::Binding,
                at_ms: None,
                details: json!({"program_dir": dir.to_string_lossy()}),
            },
        )?;
    }
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
    ) -> Result<RunResult> {
        let module = machine.module().to_string();
        let mut resend = Some(resend);
        let mut last = FactRef {
            n: head,
            hash: String::new(),
        };
        let mut inflight: FuturesUnordered<Pending<'h>> = FuturesUnordered::new();
        // Abort handles of dispatched calls: a Close drops the call's future,
        // which cancels it at its implementation.
        let mut aborts: BTreeMap<String, AbortHandle> = BTreeMap::new();
        let mut facts: Vec<Fact> = Vec::new();
        // Replies that came while the machine computed a slice.
        let mut arrived: VecDeque<(String, CallOutcome)> = VecDeque::new();
        loop {
            // Calls open at a crash whose binding says `resend = true` go out
            // again with the same (run, call) pair (DESIGN §5).
            let mut dispatch: Vec<ToDispatch> = resend.take().unwrap_or_default();
            let mut ended = None;
            let mut deadlines = Vec::new();
            for step in effects.drain(..) {
                let e = match step {
                    Step::Fact(f) => {
                        facts.push(f);
                        continue;
                    }
                    Step::Effect(e) => e,
                };
                if let Some(f) = e.fact() {
                    facts.push(f);
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
                            continue;
                        }
                        let args = match args {
                            Json::Object(m) => m,
                            _ => Map::new(),
                        };
                        dispatch.push((call.to_string(), tool, args, nested));
                    }
                    Effect::Close { call, .. } => {
                        if let Some(a) = aborts.remove(call.as_str()) {
                            a.abort();
                            host.closed(&module, run.as_str(), call.as_str());
                        }
                    }
                    Effect::Deadline { call, seconds } => {
                        let due = super::deadlines::now_ms().saturating_add(
                            seconds.saturating_mul(1000).min(i64::MAX as u64) as i64,
                        );
                        deadlines.push(json!({"call": call.as_str(), "due_ms": due}));
                    }
                    Effect::End(ending) => ended = Some(ending),
                    Effect::Checkpoint { .. } => {}
                }
            }
            let appended = self
                .append_all(run, &mut last, &mut facts, deadlines, writes)
                .await;
            if let Some(a) = ack.take() {
                let _ = a.send(appended.clone().map(|()| last.clone()));
            }
            appended?;
            if let Some(ending) = ended {
                return Ok(RunResult::ended(run, ending));
            }
            for (call, tool, args, nested) in dispatch {
                if let Some(sub) = nested {
                    let outcome = self
                        .nested(run, &call, program.clone(), sub, args, host, writes)
                        .await;
                    inflight.push(Box::pin(std::future::ready(Ok((call, Some(outcome))))));
                    continue;
                }
                let req = CallRequest {
                    run: run.to_string(),
                    call: call.clone(),
                    tool,
                    args,
                };
                let module = module.clone();
                let (handle, registration) = AbortHandle::new_pair();
                aborts.insert(call.clone(), handle);
                let fut = async move {
                    let out = host.dispatch(&module, req).await;
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
                            if let Ok((call, Some(o))) = x {
                                arrived.push_back((call, o));
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
                    match inflight.next().await {
                        // A call closed meanwhile: its future was dropped.
                        Some(Err(Aborted)) => continue,
                        // Parked: the call stays open, waiting for a worker.
                        Some(Ok((_, None))) => continue,
                        Some(Ok((call, Some(o)))) => break Some((call, o)),
                        None => break None,
                    }
                },
            };
            let Some((call, outcome)) = next else {
                return self.paused(run, last, program, machine).await;
            };
            aborts.remove(&call);
            let outcome_json = outcome.to_json();
            // A reply for a call closed meanwhile is dropped.
            if !machine.is_open(&call) {
                tracing::info!(run.id = %run, call.id = %call, "reply to a closed call dropped");
                continue;
            }
            let o = Outcome::from_record(&outcome_json)
                .map_err(|e| Error::Refused(format!("reply: {e}")))?;
            facts.push(super::prepare::reply_fact(&call, o.clone())?);
            // The engine runs off the async runtime: a slice is bounded, but
            // not free, and never holds a worker others need.
            let (m, more) = tokio::task::spawn_blocking(move || {
                let more = machine.feed(&call, &o);
                (machine, more)
            })
            .await
            .map_err(engine_lost)?;
            machine = m;
            effects = steps(more.map_err(|e| Error::Conflict(e.to_string()))?);
        }
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
        let open = machine.open_calls();
        let details = json!({"open": open.iter().map(|c| c.call.as_str()).collect::<Vec<_>>()});
        let r = run.clone();
        let row = super::store::blocking(&self.inner.store, move |s| {
            Ok(s.record_host(
                &r,
                HostRecord {
                    kind: HostRecordKind::Pause,
                    at_ms: None,
                    details,
                },
            )?)
        })
        .await?;
        // The pause record's head is the run's head: the machine is valid
        // exactly while it stays so.
        debug_assert!(last.hash.is_empty() || last == row.head);
        self.remember_paused(run, row.head, program, machine);
        Ok(RunResult::Paused {
            run: run.clone(),
            open,
        })
    }

    /// Appends the buffered facts, numbering them, and the deadlines they
    /// start (host records, after the facts: a deadline counts from its
    /// durable Call); returns once every one is durable.
    ///
    /// The store's writer commits whatever is queued in one transaction;
    /// waiting for it happens off the async runtime (`spawn_blocking`), so
    /// many runs queue at once and share each commit (group commit).
    async fn append_all(
        &self,
        run: &RunId,
        last: &mut FactRef,
        facts: &mut Vec<Fact>,
        deadlines: Vec<Json>,
        writes: &Writes,
    ) -> Result<()> {
        if facts.is_empty() && deadlines.is_empty() {
            return Ok(());
        }
        let mut n = last.n;
        let batch: Vec<Json> = facts
            .drain(..)
            .map(|f| {
                n += 1;
                f.numbered(n).into_json()
            })
            .collect();
        let count = batch.len() as u64;
        let (store, r) = (self.inner.store.clone(), run.clone());
        // The guard goes into the blocking task: a drive stopped while this
        // commit is under way lets go of its run only once it is done, so a
        // halt record never precedes a fact of the drive it halted.
        let guard = writes.clone().lock_owned().await;
        let committing = self.inner.commits.begin();
        let appended = tokio::task::spawn_blocking(move || -> Result<_> {
            let _writing = (guard, committing);
            let a = if batch.is_empty() {
                Vec::new()
            } else {
                store.append_all(&r, &batch)?
            };
            for d in deadlines {
                store.record_host(
                    &r,
                    HostRecord {
                        kind: HostRecordKind::Timeout,
                        at_ms: None,
                        details: d,
                    },
                )?;
            }
            Ok(a)
        })
        .await
        .map_err(|e| {
            Error::Unreadable(format!("the store's writer could not be reached: {e}"))
        })??;
        if let Some(a) = appended.last() {
            *last = FactRef {
                n: a.n,
                hash: a.hash.clone(),
            };
            self.inner.heads.bump(run, a.n);
        }
        self.inner
            .stats
            .facts
            .fetch_add(count, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// A subgraph's nested run: its own run id and history, Start naming the
    /// outer run and call (DESIGN §4). Its ending becomes the outer call's
    /// outcome; a nested pause leaves the outer call open.
    #[allow(clippy::too_many_arguments)]
    fn nested<'a>(
        &'a self,
        outer: &'a RunId,
        call: &'a str,
        program: Arc<Program>,
        module: String,
        args: Map<String, Json>,
        host: &'a Host,
        writes: &'a Writes,
    ) -> Pin<Box<dyn Future<Output = CallOutcome> + Send + 'a>> {
        Box::pin(async move {
            let input = args
                .get("input")
                .cloned()
                .unwrap_or(Json::Object(Map::new()));
            let (machine, effects) =
                match start_machine(program.clone(), module.clone(), input.clone()).await {
                    Ok(Ok(x)) => x,
                    Ok(Err(e)) => return CallOutcome::NotRun(format!("nested run refused: {e}")),
                    Err(e) => return CallOutcome::Unknown(e.to_string()),
                };
            let run = new_run_id();
            let o = outer.clone();
            let sources = super::store::blocking(&self.inner.store, move |s| {
                super::prepare::start_sources(s, &o)
            })
            .await;
            let Ok(sources) = sources else {
                return CallOutcome::NotRun("the outer run's sources cannot be read".into());
            };
            let Ok(outer_call) = CallId::parse(call) else {
                return CallOutcome::NotRun(format!("{call} is not a call id"));
            };
            let start = super::prepare::start_fact(
                &run,
                &module,
                &sources,
                input,
                None,
                Some((outer, &outer_call)),
            );
            let created = {
                let (s, r, o, c) = (
                    self.inner.store.clone(),
                    run.clone(),
                    outer.clone(),
                    call.to_string(),
                );
                tokio::task::spawn_blocking(move || -> Result<FactRef> {
                    let head = create(&*s, &r, &start, &sources)?;
                    // Linked both ways: the nested Start names the outer run
                    // and call; the outer run's host record names the nested
                    // run that served the call (which implementation served a
                    // call is the host's record, host-boundary.txt "Binding").
                    s.record_host(
                        &o,
                        HostRecord {
                            kind: HostRecordKind::Binding,
                            at_ms: None,
                            details: json!({"call": c, "nested_run": r.as_str()}),
                        },
                    )?;
                    Ok(head)
                })
                .await
            };
            let head = match created {
                Ok(Ok(h)) => h,
                Ok(Err(e)) => return CallOutcome::Unknown(format!("nested run not recorded: {e}")),
                Err(e) => return CallOutcome::Unknown(format!("nested run not recorded: {e}")),
            };
            match Box::pin(self.drive(
                &run,
                program,
                machine,
                steps(effects),
                host,
                Vec::new(),
                head.n,
                None,
                writes,
            ))
            .await
            {
                Ok(RunResult::Completed { output, .. }) => match flow_abi::decode_json(
                    &output,
                    &flow_abi::Type::Json,
                    &flow_abi::TypeSet::new(),
                ) {
                    Ok(v) => CallOutcome::Ok(v),
                    Err(e) => CallOutcome::BadReply(e.to_string()),
                },
                Ok(RunResult::Faulted { why, .. }) => {
                    let mut m = std::collections::BTreeMap::new();
                    m.insert("message".to_string(), flow_abi::Value::Text(why));
                    CallOutcome::Failed(flow_abi::Value::Record(m))
                }
                Ok(RunResult::Paused { run, .. }) => {
                    CallOutcome::Unknown(format!("nested run {run} paused"))
                }
                Err(e) => CallOutcome::Unknown(format!("nested run cut short: {e}")),
            }
        })
    }
}
