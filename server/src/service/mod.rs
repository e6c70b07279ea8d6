//! The run service: the one component that starts, resumes, forks, halts,
//! recovers and fires the deadlines of runs (issue 10, item 2). The CLI,
//! the HTTP server and the MCP server all drive runs through it; none of
//! them drives a run on its own.
//!
//! A [`RunService`] is a cheap `Clone` handle (STYLE rule 7) over one
//! [`Inner`], which holds the store (through its traits only:
//! [`store::Store`]), how Tools bind ([`bind::Bindings`]) and parts that
//! each own their state behind their own lock, locked by no one else:
//! the drives going on and their tasks ([`running::Running`]), the two
//! private caches ([`caches`]), the leases ([`lease`]), the deadlines
//! ([`Deadlines`]), the followed heads ([`heads::Heads`]), the commits
//! under way, the program checks, and the queue of run state changes
//! ([`events`]).
//! What it does is split by job: start, resume and fork (`runs.rs`), a
//! resume's preparation (`prepare.rs`), the drive (`drive/`), halts,
//! nested runs, recoveries.
//!
//! Acknowledgement (DESIGN §3, issue 17 item 1): every method returns only
//! once what it acknowledges is durable — `start` and `fork` after their
//! Start, `resume` after the admitted Reply and the facts of its first
//! step — and every refusal (a reply that does not fit, a call that is not
//! open, a missing checkpoint) comes back before anything is recorded, as
//! an error. Driving on happens in a task; [`Accepted`] carries its
//! outcome.
//!
//! The machine cache is the seed's "runtime's own snapshot of a run ... a
//! private cache", and "a resume that uses it behaves exactly as one that
//! does not": an entry is used only while the run's head is the fact the
//! machine was left at; anything else replays the history.

mod admit;
pub mod bind;
mod caches;
mod calls;
pub mod checks;
mod commits;
mod deadlines;
pub mod diff;
mod drive;
mod events;
mod examples;
mod fork;
pub mod gate;
mod halt;
pub mod heads;
mod inbox;
mod inspect;
mod lease;
pub mod lineage;
mod nested;
pub mod otlp;
mod outcome;
mod pending;
mod prepare;
pub mod recover;
pub mod recoveries;
pub mod remote;
pub mod retention;
mod running;
mod runs;
mod settle;
mod spawn;
pub mod store;
mod stub;
pub mod timeline;
mod times;
mod whatif;

use crate::error::{Error, Result};
use crate::source::Sources;
use bind::Bindings;
use flow_engine::machine::OpenCall;
use flow_engine::program::Program;
use flow_engine::replay::Verdict;
use flow_store::RunId;
use serde_json::Value as Json;
use std::sync::Arc;
use std::time::Duration;
use store::StoreRef;
use tokio_util::sync::CancellationToken;

pub use admit::Reply;
pub use deadlines::{Deadlines, now_ms};
pub use inbox::{InboxCall, InboxCursor, InboxPage, InboxQuery, InboxSort};
pub use lease::LeaseOptions;
pub use nested::nested_runs;
pub use outcome::{
    Accepted, Acknowledging, CallLabel, Gate, Outcome, PendingCall, Progress, RunEvent, RunResult,
    Stats, new_run_id, record_start,
};
pub use pending::{Waits, waiting};
pub use prepare::OpenChoice;
pub use settle::unsent;
pub use whatif::ForkAt;

/// How the service is set up.
pub struct ServiceOptions {
    pub bindings: Bindings,
    pub progress: Option<Progress>,
    /// The most node executions a flow may ask for
    /// (`harness_meta.max_steps`); `None` for no ceiling (the local CLI,
    /// whose user runs their own flows). A server takes requests from
    /// others: `flow serve --max-steps` (issue 17).
    pub max_steps: Option<u64>,
    /// With several servers on one store (`flow serve --postgres`): the
    /// run leases' options. `None` for a single process: no lease is ever
    /// asked for.
    pub lease: Option<LeaseOptions>,
    /// The runtime drives and their Tool processes run on (`flow serve`:
    /// one of their own, so a run's step is scheduled beside the SSE
    /// fan-out and the HTTP handlers rather than queued behind them);
    /// `None` for the runtime the service is called on.
    pub drives: Option<tokio::runtime::Handle>,
    /// Where drives send their runs' spans (`flow serve --otlp-endpoint`).
    pub otlp: Option<otlp::Tracer>,
}

impl ServiceOptions {
    /// One process binding with `bindings`: no step ceiling, no leases,
    /// no progress, no traces, drives on the caller's runtime (the CLI,
    /// `flow mcp`, the benches); change a field with `..` where needed.
    pub fn local(bindings: Bindings) -> ServiceOptions {
        ServiceOptions {
            bindings,
            progress: None,
            max_steps: None,
            lease: None,
            drives: None,
            otlp: None,
        }
    }
}

/// The server's step ceiling unless `--max-steps` says otherwise.
pub const MAX_STEPS: u64 = 1_000_000;

/// The run service's handle.
#[derive(Clone)]
pub struct RunService {
    inner: Arc<Inner>,
}

struct Inner {
    store: StoreRef,
    bindings: Bindings,
    progress: Option<Progress>,
    max_steps: Option<u64>,
    /// The drives going on here, their tasks, and whether new work is
    /// taken.
    running: running::Running,
    programs: caches::Programs,
    paused: caches::PausedMachines,
    /// Leases, when several servers share the store.
    leasing: Option<lease::Leasing>,
    events: events::Events,
    stats: Stats,
    deadlines: Deadlines,
    heads: Arc<heads::Heads>,
    commits: Arc<commits::Commits>,
    /// Large programs' checks, off the async runtime and bounded.
    checks: checks::Checks,
    otlp: Option<otlp::Tracer>,
}

impl RunService {
    pub fn new(store: StoreRef, options: ServiceOptions, shutdown: CancellationToken) -> Self {
        // Every durable head the store learns of — its own commits and, on
        // Postgres, other servers' (LISTEN/NOTIFY) — wakes the followers.
        let heads = Arc::new(heads::Heads::default());
        let h = heads.clone();
        store.observe_heads(Arc::new(move |note| h.bump(note)));
        RunService {
            inner: Arc::new(Inner {
                store,
                bindings: options.bindings,
                progress: options.progress,
                max_steps: options.max_steps,
                running: running::Running::new(shutdown, options.drives),
                programs: caches::Programs::default(),
                paused: caches::PausedMachines::default(),
                leasing: options.lease.map(lease::Leasing::new),
                events: events::Events::default(),
                stats: Stats::default(),
                deadlines: Deadlines::default(),
                heads,
                commits: Arc::default(),
                checks: checks::Checks::default(),
                otlp: options.otlp,
            }),
        }
    }

    pub fn store(&self) -> &StoreRef {
        &self.inner.store
    }

    /// Where runs' spans go, if anywhere (`/metrics` reads its counts).
    pub fn tracer(&self) -> Option<&otlp::Tracer> {
        self.inner.otlp.as_ref()
    }

    /// Where large programs are checked ([`checks`]).
    pub fn checks(&self) -> &checks::Checks {
        &self.inner.checks
    }

    /// How long the oldest commit under way has waited (`/healthz`).
    pub fn oldest_commit(&self) -> Option<std::time::Duration> {
        self.inner.commits.oldest()
    }

    pub fn stats(&self) -> &Stats {
        &self.inner.stats
    }

    pub fn shutdown_token(&self) -> &CancellationToken {
        self.inner.running.shutdown()
    }

    /// Refuses new work once draining or shutdown began: runs started now
    /// would only be cut short.
    pub fn accepting(&self) -> bool {
        self.inner.running.accepting()
    }

    /// Whether a graceful shutdown is under way ([`RunService::drain`]).
    pub fn draining(&self) -> bool {
        self.inner.running.draining()
    }

    /// The first half of a graceful shutdown (SIGTERM): no new drive starts
    /// here (start, resume, fork, takeovers and deadlines are refused or
    /// left to others), and every drive going on drains — the calls out
    /// finish and their Replies are recorded, nothing new is sent — and
    /// lets go of its run (its lease handed over at once, so another server
    /// continues it). Returns once no drive is left, or `grace` passed
    /// (true when none is left); [`RunService::shutdown`] then stops the
    /// rest as a crash would.
    pub async fn drain(&self, grace: Duration) -> bool {
        self.inner.running.begin_drain();
        let drained = self.inner.running.idle(grace).await;
        if !drained {
            tracing::warn!(
                drives = self.active_drives(),
                "drain grace passed with calls still out; they are settled as after a crash"
            );
        }
        drained
    }

    /// The state changes from now on, for the one consumer that takes
    /// them (the server's state feed); ends after [`RunService::close_events`].
    pub fn events(&self) -> std::sync::mpsc::Receiver<RunEvent> {
        self.inner.events.take()
    }

    /// Ends the queue [`RunService::events`] returned.
    pub fn close_events(&self) {
        self.inner.events.close();
    }

    /// Tells `/v1/events` subscribers that `run` is now in `state`.
    pub fn publish(&self, run: &str, state: &'static str, extra: Json) {
        self.inner.events.send(RunEvent {
            run: run.to_string(),
            state,
            extra,
        });
    }

    pub fn is_active(&self, run: &RunId) -> bool {
        self.inner.running.contains(run)
    }

    /// Drives going on now.
    pub fn active_drives(&self) -> usize {
        self.inner.running.len()
    }

    /// The checked program of `sources` ([`caches::Programs`]).
    fn program(&self, sources: &Sources) -> Result<Arc<Program>> {
        self.inner.programs.get(sources)
    }

    /// Replays a run against its recorded program.
    pub async fn replay(&self, run: &RunId) -> Result<Verdict> {
        let this = self.clone();
        let r = run.clone();
        tokio::task::spawn_blocking(move || Ok(this.replayed(&r, &mut |_| {})?.1.verdict))
            .await
            .map_err(|e| Error::Unreadable(format!("a replay task ended: {e}")))?
    }

    /// The calls open now in `run` (its machine from the cache, or its
    /// history replayed).
    pub fn open_calls(&self, run: &RunId) -> Result<Vec<OpenCall>> {
        let info = self.inner.store.run_info(run)?;
        if let Some(open) = self.inner.paused.open_calls(run, &info.last_fact) {
            return Ok(open);
        }
        let (_, r) = self.replayed(run, &mut |_| {})?;
        Ok(r.machine.map(|m| m.open_calls()).unwrap_or_default())
    }

    /// Arms the deadlines of paused runs and fires them while the service
    /// runs (a task in the service's JoinSet; ends on shutdown).
    pub fn serve_deadlines(&self) {
        let s = self.clone();
        self.inner.running.spawn(deadlines::service(s), false);
    }

    /// Cancels every drive, waits (bounded) for the tasks to finish, and
    /// stops every pooled Tool.
    pub async fn shutdown(&self, deadline: Duration) {
        self.inner.running.stop_all(deadline).await;
        self.inner.bindings.shutdown().await;
    }

    fn refuse_if_stopping(&self) -> Result<()> {
        if self.accepting() {
            Ok(())
        } else {
            Err(Error::Unavailable(
                "the server is shutting down (draining its runs); send the request to another server, or again once it is back".into(),
            ))
        }
    }
}
