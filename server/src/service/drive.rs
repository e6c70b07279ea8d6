//! Driving a run: the engine's effects carried out against the store and
//! the bound Tools, until the run ends or pauses.
//!
//! DESIGN §3: "Each fact is accepted (durable) before its consequence: a
//! Call before the call is dispatched, a Reply before the program observes
//! it, End before the output is reported." Facts with no outside effect
//! between them are appended together (one commit, one fsync per step),
//! and nothing acts on a fact before its append returned.

use super::nested::{Answer, NestedCall};
use super::store::Store;
use super::{RunResult, RunService};
use crate::error::{Error, Result};
use crate::host::Host;
use crate::source::Sources;
use flow_abi::fact::{CallId, Fact};
use flow_engine::machine::{Effect, Machine};
use flow_engine::program::Program;
use flow_store::{
    Appending, Decision, FactRef, HostDetails, HostRecord, Namespace, OpenCallDecision, RunId,
    SourceText,
};
use futures_util::future::Aborted;
use serde_json::{Map, Value as Json};
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

/// Most effects a start's or a reply's slice computes on the async
/// runtime; a machine still busy after them goes on in the blocking pool's
/// slices.
const INLINE: usize = 16;

mod driving;
use driving::Driving;

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
    pub call: CallId,
    pub tool: String,
    pub args: Map<String, Json>,
    pub nested: Option<NestedCall>,
    /// 1 for the first send; a resend after a crash or halt counts on.
    pub attempt: u32,
}

pub(super) type Pending<'a> =
    Pin<Box<dyn Future<Output = std::result::Result<(CallId, Answer), Aborted>> + Send + 'a>>;

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

/// Starts `module`'s machine: a first slice of [`INLINE`] effects where it
/// is (a small program's whole start, without two thread hand-offs: issue
/// 42), and a machine still busy after them its next slice on the blocking
/// pool, its effects after the first (one slice as [`Machine::start`]
/// would have made it, recorded in the same first commit).
pub(super) async fn start_machine(
    program: Arc<Program>,
    module: String,
    input: Json,
) -> Result<std::result::Result<(Machine, Vec<Effect>), flow_engine::machine::Refusal>> {
    let (mut machine, mut effects) = match Machine::start_within(program, &module, &input, INLINE) {
        Ok(started) => started,
        Err(refused) => return Ok(Err(refused)),
    };
    if machine.busy() {
        let (m, more) = tokio::task::spawn_blocking(move || {
            let more = machine.proceed();
            (machine, more)
        })
        .await
        .map_err(engine_lost)?;
        machine = m;
        effects.extend(more);
    }
    Ok(Ok((machine, effects)))
}

/// A new run's Start, its source texts and the host records made with
/// it, to be recorded in one commit ([`create`], or with the drive's first
/// round: [`RunService::drive`]).
pub(super) struct Creating {
    /// Where a root run goes (a fork or nested run: its parent's, as the
    /// store places it).
    pub namespace: Namespace,
    pub start: Fact,
    pub sources: Vec<SourceText>,
    pub records: Vec<HostRecord>,
}

/// What a new run's Start is recorded with: its source texts, the program
/// directory it was read from (resume and fork keep the original local
/// source base: host-boundary.txt, "Binding"), and the `--tools` manifests
/// that bound some of its Tools (`tools`, kept so a resume line printed
/// for the run carries them: issue 41 §7) in a `binding` record of their
/// own; `records` besides them.
pub(super) fn creating(
    namespace: &Namespace,
    start: Fact,
    sources: &Sources,
    tools: &[PathBuf],
    mut records: Vec<HostRecord>,
) -> Creating {
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
    Creating {
        namespace: namespace.clone(),
        start,
        sources: sources.source_texts(),
        records,
    }
}

/// Records a new run's Start ([`creating`]) in one commit, durable on
/// return.
pub(super) fn create(
    store: &dyn Store,
    namespace: &Namespace,
    start: Fact,
    sources: &Sources,
    tools: &[PathBuf],
    records: Vec<HostRecord>,
) -> Result<FactRef> {
    let c = creating(namespace, start, sources, tools, records);
    let a = store.create_run_in(&c.namespace, c.start, &c.sources, c.records)?;
    Ok(FactRef {
        n: a.n,
        hash: a.hash,
    })
}

impl RunService {
    /// Carries out effects until the run ends or pauses. `head` is the
    /// run's last durable fact; `ack` is told when the first batch is.
    /// `creating`: the run is new and its Start is recorded with the first
    /// round, in one commit (`head` is then 1).
    ///
    /// Each round: the effects absorbed (facts, host records, calls to
    /// send), committed, the calls sent; then a busy machine's next slice,
    /// or the next answer admitted — or, with no call out, the drive stops
    /// (paused or drained).
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn drive<'h>(
        &'h self,
        run: &RunId,
        program: Arc<Program>,
        mut machine: Machine,
        mut effects: Vec<Step>,
        host: &'h Host,
        mut resend: Vec<ToDispatch>,
        head: u64,
        mut ack: Option<Ack>,
        writes: &'h Writes,
        creating: Option<Creating>,
    ) -> Result<Driven> {
        let module = machine.module().to_string();
        // Every Checkpoint from here on is recorded in order, so one of the
        // state before can be given by what changed (the next is whole).
        machine.checkpoint_by_change();
        // A reply carried down to a nested run is acknowledged there, once
        // it is durable in that run's history.
        if let Some(n) = resend
            .iter_mut()
            .find_map(|d| d.nested.as_mut().filter(|n| n.reply.is_some()))
        {
            n.ack = ack.take();
        }
        let mut d = Driving::new(
            self, run, module, program, host, writes, head, ack, creating,
        );
        // Calls open at a crash whose binding says `resend = true` go out
        // again with the same (run, call) pair (DESIGN §5).
        let mut resend = Some(resend);
        loop {
            let mut round = d.absorb(effects, resend.take().unwrap_or_default())?;
            d.commit(&mut round).await?;
            if let Some(ending) = round.ended {
                return Ok(Driven::Result(RunResult::ended(run, ending)));
            }
            d.send(round.dispatch);
            if machine.busy() {
                (machine, effects) = d.slice(machine).await?;
                continue;
            }
            let Some((call, answer)) = d.next_answer().await else {
                return d.stop(machine).await;
            };
            effects = d.admit(&mut machine, call, answer)?;
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
    async fn withheld(&self, run: &RunId, calls: &[CallId]) -> Result<()> {
        if calls.is_empty() {
            return Ok(());
        }
        let (r, calls) = (run.clone(), calls.to_vec());
        super::store::blocking(&self.inner.store, move |s| {
            for call in calls {
                s.record_host(
                    &r,
                    HostRecord::now(HostDetails::OpenCall(OpenCallDecision {
                        call,
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
        let open = own.iter().map(|c| c.call.clone()).collect();
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
        self.inner.paused.remember(run, row.head, program, machine);
        Ok(RunResult::Paused {
            run: run.clone(),
            open,
        })
    }

    /// Appends the buffered facts, numbering them, and the host records
    /// made with them (deadlines, timings: after the facts, in the same
    /// commit, so a deadline counts from its durable Call and a step's
    /// timings cost no commit of their own); returns once every one is
    /// durable. With `creating`, the run is created in the same commit,
    /// before them.
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
        creating: Option<Creating>,
    ) -> Result<()> {
        if facts.is_empty() && creating.is_none() {
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
        let done: flow_store::AppendDone = Box::new(move |res| {
            let _writing = (guard, committing);
            let _ = tx.send(res);
        });
        match creating {
            Some(c) => store.create_run_then(
                &c.namespace,
                c.start,
                &c.sources,
                c.records,
                batch,
                records,
                done,
            ),
            None => store.append_all_with_then(&r, batch, records, done),
        }
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
