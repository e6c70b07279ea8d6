//! Tool calls served by remote workers (`flow worker`, docs/deploy.md
//! "Workers"): the host override `flow serve --workers KEY` routes the
//! declarations it names to the store's worker queue
//! ([`flow_store::WorkerQueue`]) instead of a child process, and workers
//! connected to any server of the store take the calls from there.
//!
//! * **Bind before start.** A run that can reach a worker-served
//!   declaration is refused unless a live worker serves it with the same
//!   fingerprint ([`Workers::check`]) — or, with `--worker-wait`, accepted,
//!   its calls then parked until a worker comes.
//! * **A call** ([`Workers::call`]) is queued once its Call fact is durable,
//!   then waited for, never polled for: woken at once, and handed the
//!   outcome, by a reply admitted on this server; woken by the store's
//!   note (Postgres NOTIFY, [`flow_store::QueueNote`]) for a reply
//!   admitted on another server, then reading the row once. A slow look
//!   (a quarter of `--worker-timeout`) remains, for a lost notification
//!   and to notice a worker gone silent. A call that no live
//!   worker serves is parked (marked so in the queue): `None` goes back to
//!   the drive, which pauses the run once nothing else is under way
//!   (DESIGN §4). The queue's scan ([`RunService::serve_workers`]) resumes
//!   a paused run as soon as a worker serves its parked call.
//! * **A lost worker** (not heard from within `--worker-timeout`): each
//!   call out at it is settled `Unknown` (it reached the worker, which may
//!   have acted) or, when the worker's binding says `resend = true`, queued
//!   again for the next worker. The store takes the first outcome only, so
//!   a late reply from a worker judged lost is dropped, never admitted
//!   twice.
//! * **Cancels.** A call the program closes (a `wait_for: any` join) is
//!   withdrawn from the queue or, if sent, cancelled at its worker. A drive
//!   that stops (shutdown, halt, fence) cancels nothing: the calls out stay
//!   with their workers, and whoever drives the run next attaches to them;
//!   a halt parks the calls not yet handed out ([`Workers::halted`]).

use super::RunService;
use super::store::{StoreRef, blocking};
use crate::error::{Error, Result};
use crate::host::Served;
use flow_abi::fact::CallId;
use flow_abi::protocol::Outcome;
use flow_store::{Claimed, QueueNote, RemoteCall, RemoteCallState, RunId, ServedTool, WorkerInfo};
use flow_tools::outcome::{CallOutcome, CallRequest, Declarations};
use serde_json::{Value as Json, json};
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// The default `--worker-timeout`.
pub const TIMEOUT_SECONDS: u64 = 5;
/// Parked runs resumed per scan.
const RESUME_PER_SCAN: u32 = 32;
/// The longest poll hold: well inside the server's request timeout.
const MAX_HOLD: Duration = Duration::from_secs(25);
/// Scans between sweeps of ended runs' calls and long-lost workers.
const SCANS_PER_SWEEP: u32 = 30;

/// Whether `key` reads as a declaration key, as flow.toml keys them: a
/// module (`triage.json`), one Tool (`triage.json#classify`) or a built-in
/// module (`std/llm`) — for `--workers` and a worker token's line.
pub fn key_ok(key: &str) -> bool {
    !key.is_empty()
        && !key.starts_with('#')
        && !key.ends_with('#')
        && key.matches('#').count() <= 1
        && !key.chars().any(char::is_control)
}

/// Whether one of `keys` names declaration `identity`: its own key or its
/// module's.
pub fn key_covers(keys: &[String], identity: &str) -> bool {
    let module = identity.rsplit_once('#').map_or(identity, |(m, _)| m);
    keys.iter().any(|k| k == identity || k == module)
}

/// How this server routes Tool calls to workers.
#[derive(Clone, Debug)]
pub struct WorkerOptions {
    /// `--workers`: the declarations served by workers, keyed as flow.toml
    /// keys them (`triage.json` for a module, `triage.json#classify` for
    /// one Tool, `std/llm` for a built-in module).
    pub keys: Vec<String>,
    /// `--worker-wait`: park a call no live worker serves (the run pauses)
    /// instead of refusing the run at start, or answering NotRun later.
    pub wait: bool,
    /// `--worker-timeout`: a worker not heard from within it is lost.
    pub timeout: Duration,
}

impl Default for WorkerOptions {
    fn default() -> WorkerOptions {
        WorkerOptions {
            keys: Vec::new(),
            wait: false,
            timeout: Duration::from_secs(TIMEOUT_SECONDS),
        }
    }
}

/// The worker queue's handle on this server. Cheap to clone.
#[derive(Clone)]
pub struct Workers {
    inner: Arc<Inner>,
}

struct Inner {
    store: StoreRef,
    options: WorkerOptions,
    /// Wakes this server's long polls when a call is queued or cancelled
    /// here.
    queued: Notify,
    /// The drives waiting here for a call's reply, by `(run, call)`.
    waiting: Mutex<HashMap<(RunId, CallId), Arc<Waiter>>>,
    /// Wakes the scan when a worker registers here.
    arrived: Notify,
    /// When this server last marked each worker heard from in the store.
    touched: Mutex<HashMap<String, std::time::Instant>>,
    /// Each worker's owner tag, as read from the store once: it never
    /// changes (an id is minted at registration, never reused).
    owners: Mutex<HashMap<String, String>>,
    shutdown: CancellationToken,
}

impl Inner {
    /// A note of the store: wakes whoever waits for what it says. The
    /// woken look at the store themselves (nothing is handed over).
    fn noted(&self, note: &QueueNote) {
        match note {
            QueueNote::Queued => self.queued.notify_waiters(),
            QueueNote::Settled { run, call } => {
                if let Ok(waiting) = self.waiting.lock()
                    && let Some(w) = waiting.get(&(run.clone(), call.clone()))
                {
                    w.notify.notify_one();
                }
            }
            QueueNote::Everyone | QueueNote::Resync => {
                if let Ok(waiting) = self.waiting.lock() {
                    for w in waiting.values() {
                        w.notify.notify_one();
                    }
                }
                if *note == QueueNote::Resync {
                    self.queued.notify_waiters();
                }
            }
        }
    }
}

/// A drive waiting for a call: woken by a reply admitted here, which it is
/// handed (stored already: the store took it first).
#[derive(Default)]
struct Waiter {
    notify: Notify,
    /// A reply admitted on this server, with the worker that sent it.
    outcome: Mutex<Option<(Json, String)>>,
}

/// One reply a worker sends.
#[derive(Debug, Clone)]
pub struct WorkerReply {
    pub run: String,
    pub call: String,
    pub outcome: Json,
}

impl Workers {
    pub fn new(store: StoreRef, options: WorkerOptions, shutdown: CancellationToken) -> Workers {
        let workers = Workers {
            inner: Arc::new(Inner {
                store,
                options,
                queued: Notify::new(),
                waiting: Mutex::new(HashMap::new()),
                arrived: Notify::new(),
                touched: Mutex::new(HashMap::new()),
                owners: Mutex::new(HashMap::new()),
                shutdown,
            }),
        };
        // What other servers of the store write wakes this one's drives and
        // polls (a weak handle: the store outlives no Workers through it).
        let weak = Arc::downgrade(&workers.inner);
        workers
            .inner
            .store
            .observe_queue(Arc::new(move |note: &QueueNote| {
                if let Some(inner) = weak.upgrade() {
                    inner.noted(note);
                }
            }));
        workers
    }

    pub fn options(&self) -> &WorkerOptions {
        &self.inner.options
    }

    /// How long a poll waits for a call before it answers with none: half
    /// the timeout (at most 25 s), so a worker always polls again before
    /// it is lost.
    pub fn hold(&self) -> Duration {
        (self.inner.options.timeout / 2).clamp(Duration::from_millis(250), MAX_HOLD)
    }

    /// The safety look: the longest wait between two looks at the store
    /// without a wake-up. What it finds is a worker gone silent, or a
    /// note lost (every write another server waits for sends one).
    fn tick(&self) -> Duration {
        (self.inner.options.timeout / 4).max(Duration::from_millis(50))
    }

    /// Whether `--workers` routes declaration `identity` to workers: its
    /// own key or its module's.
    pub fn serves(&self, identity: &str) -> bool {
        key_covers(&self.inner.options.keys, identity)
    }

    /// Bind before start: every worker-served declaration `(identity,
    /// fingerprint)` a run can reach has a live worker serving it with
    /// that fingerprint, or the run is refused naming each one (with
    /// `--worker-wait`, nothing is refused).
    pub async fn check(&self, needed: &BTreeSet<(String, String)>) -> Result<()> {
        if needed.is_empty() || self.inner.options.wait {
            return Ok(());
        }
        let timeout = self.inner.options.timeout;
        let live = blocking(&self.inner.store, move |s| Ok(s.live_workers(timeout)?)).await?;
        let mut refusals = Vec::new();
        for (tool, fp) in needed {
            let fits = |w: &WorkerInfo| {
                w.tools
                    .iter()
                    .any(|t| &t.tool == tool && &t.fingerprint == fp)
            };
            if live.iter().any(fits) {
                continue;
            }
            let other: BTreeSet<&str> = live
                .iter()
                .flat_map(|w| w.tools.iter())
                .filter(|t| &t.tool == tool)
                .map(|t| t.fingerprint.as_str())
                .collect();
            refusals.push(if other.is_empty() {
                format!(
                    "{tool} is served by remote workers (flow serve --workers) and no live worker serves it: start `flow worker` with a flow.toml that binds it, or start the server with --worker-wait to park its calls until one connects"
                )
            } else {
                format!(
                    "{tool}: the live workers serve fingerprint {}, the run declares {fp} (if the flow changed, regenerate the document the worker's Tool serves from, in the flow's directory: `flow --json tools {} > tools.json`, and restart `flow worker`)",
                    other.into_iter().collect::<Vec<_>>().join(", "),
                    tool.rsplit_once('#').map_or(tool.as_str(), |(m, _)| m)
                )
            });
        }
        if refusals.is_empty() {
            Ok(())
        } else {
            Err(Error::Bind(refusals))
        }
    }

    /// Sends one call through the queue and waits for its outcome, decoded
    /// against `decls`; `None` when the call is parked (no live worker
    /// serves it, and the server waits for workers). A call queued before
    /// (sent again, or taken over from another server) is attached to as
    /// it stands.
    pub async fn call(
        &self,
        req: CallRequest,
        fingerprint: &str,
        decls: &Declarations,
    ) -> Option<Served> {
        let run = req.run.clone();
        let waiter = Arc::new(Waiter::default());
        let _guard = Waiting {
            workers: self.clone(),
            run: run.clone(),
            call: req.call.clone(),
        };
        if let Ok(mut w) = self.inner.waiting.lock() {
            w.insert((req.run.clone(), req.call.clone()), waiter.clone());
        }
        let row = RemoteCall {
            run: run.clone(),
            call: req.call.clone(),
            tool: req.tool.clone(),
            fingerprint: fingerprint.to_string(),
            args: Json::Object(req.args.clone()),
        };
        let timeout = self.inner.options.timeout;
        let mut state =
            match blocking(&self.inner.store, move |s| Ok(s.queue_call(&row, timeout)?)).await {
                Ok(st) => Ok(Some(st)),
                Err(e) => {
                    return Some(Served::here(CallOutcome::Unknown(format!(
                        "the worker queue could not take the call: {e}"
                    ))));
                }
            };
        self.inner.queued.notify_waiters();
        loop {
            let notified = waiter.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let handed = waiter.outcome.lock().ok().and_then(|mut o| o.take());
            if let Some((outcome, worker)) = handed {
                return Some(Served {
                    outcome: admit(decls, &req.tool, &outcome),
                    worker: Some(worker),
                });
            }
            // Whether to wait before looking again (else at once: the
            // host just decided something).
            let wait = match std::mem::replace(&mut state, Ok(None)) {
                Ok(Some(RemoteCallState::Done { outcome, worker })) => {
                    return Some(Served {
                        outcome: admit(decls, &req.tool, &outcome),
                        worker,
                    });
                }
                Ok(Some(RemoteCallState::Queued { served: false, .. }))
                    if self.inner.options.wait =>
                {
                    let (r, c) = (run.clone(), req.call.clone());
                    match blocking(&self.inner.store, move |s| Ok(s.park_calls(&r, Some(&c))?))
                        .await
                    {
                        Ok(1) => {
                            tracing::info!(run.id = %run, call.id = %req.call, tool.id = %req.tool, "no live worker serves the call: parked");
                            return None;
                        }
                        // Claimed meanwhile: look again.
                        Ok(_) => false,
                        Err(e) => {
                            tracing::warn!(run.id = %run, call.id = %req.call, error = %e, "cannot park a worker call; trying again");
                            true
                        }
                    }
                }
                Ok(Some(RemoteCallState::Queued { served: false, .. })) => {
                    let why = json!({"NotRun": format!("no live worker serves {} (flow serve --workers)", req.tool)});
                    // Only while it is still unsent: a claim may have won.
                    !self.settle(&run, &req.call, None, Some(why)).await
                }
                Ok(Some(RemoteCallState::Sent {
                    worker,
                    cancelled: true,
                    ..
                })) => {
                    // Cancelled at its worker (a Close not yet recorded
                    // when its server stopped): no reply is coming.
                    let why =
                        json!({"Unknown": format!("the call was cancelled at worker {worker}")});
                    !self.settle(&run, &req.call, Some(worker), Some(why)).await
                }
                Ok(Some(RemoteCallState::Sent {
                    worker,
                    live: false,
                    resend,
                    ..
                })) => {
                    let decision = (!resend).then(|| {
                        json!({"Unknown": format!("worker {worker} was lost with the call out (it left before the call finished, or was not heard from within {} s)", timeout.as_secs())})
                    });
                    tracing::warn!(run.id = %run, call.id = %req.call, worker = %worker, resend, "a worker was lost with a call out");
                    !self.settle(&run, &req.call, Some(worker), decision).await
                }
                Ok(Some(_)) => true,
                Ok(None) => {
                    return Some(Served::here(CallOutcome::Unknown(
                        "the call's place in the worker queue is gone".into(),
                    )));
                }
                Err(e) => {
                    tracing::warn!(run.id = %run, call.id = %req.call, error = %e, "the worker queue cannot be read; trying again");
                    true
                }
            };
            if wait {
                tokio::select! {
                    _ = &mut notified => {}
                    _ = tokio::time::sleep(self.tick()) => {}
                }
                if waiter.outcome.lock().is_ok_and(|o| o.is_some()) {
                    continue;
                }
            }
            state = self.state(&run, &req.call).await;
        }
    }

    async fn state(&self, run: &RunId, call: &CallId) -> Result<Option<RemoteCallState>> {
        let (r, c, t) = (run.clone(), call.clone(), self.inner.options.timeout);
        blocking(&self.inner.store, move |s| Ok(s.call_state(&r, &c, t)?)).await
    }

    /// Asks for a call the program closed to stop: withdrawn if still
    /// queued, else its worker is told at its next poll (in the
    /// background: a Close does not wait for it).
    pub fn cancel(&self, run: &RunId, call: &CallId) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (workers, run, call) = (self.clone(), run.clone(), call.clone());
        rt.spawn(async move {
            let (r, c) = (run.clone(), call.clone());
            match blocking(&workers.inner.store, move |s| Ok(s.cancel_call(&r, &c)?)).await {
                Ok(()) => workers.inner.queued.notify_waiters(),
                Err(e) => {
                    tracing::warn!(run.id = %run, call.id = %call, error = %e, "cannot cancel a worker call")
                }
            }
        });
    }

    /// A halted run's calls not yet handed out are parked: no worker runs
    /// them until the run is resumed.
    pub async fn halted(&self, run: &RunId) -> Result<()> {
        let r = run.clone();
        blocking(&self.inner.store, move |s| Ok(s.park_calls(&r, None)?)).await?;
        Ok(())
    }

    /// The host's decision on a call (see `settle_call`); false when the
    /// store could not be reached (the caller waits a tick before trying
    /// again), true otherwise — taken or overtaken, the call is to be
    /// looked at again.
    async fn settle(
        &self,
        run: &RunId,
        call: &CallId,
        worker: Option<String>,
        outcome: Option<Json>,
    ) -> bool {
        let (r, c) = (run.clone(), call.clone());
        let done = blocking(&self.inner.store, move |s| {
            Ok(s.settle_call(&r, &c, worker.as_deref(), outcome.as_ref())?)
        })
        .await;
        // A call queued again may go to a worker polling here.
        self.inner.queued.notify_waiters();
        match done {
            Ok(_) => true,
            Err(e) => {
                tracing::warn!(run.id = %run, call.id = %call, error = %e, "cannot settle a worker call; trying again");
                false
            }
        }
    }

    /// Whether `(run, call)` has a place in the queue (a takeover attaches
    /// to it; a call without one was never queued, or lost with a crash of
    /// the database, and is settled as a crash settles an open call).
    pub async fn queued(&self, run: &RunId, call: &CallId) -> Result<bool> {
        let (r, c, t) = (run.clone(), call.clone(), self.inner.options.timeout);
        blocking(&self.inner.store, move |s| {
            Ok(s.call_state(&r, &c, t)?.is_some())
        })
        .await
    }
}

/// A drive waiting for a call's reply; dropped, it stops listening. It
/// cancels nothing: a drive dropped at shutdown, by a halt or by a fence
/// leaves the call with its worker for whoever drives the run next (a
/// Close cancels explicitly: [`Workers::cancel`]).
struct Waiting {
    workers: Workers,
    run: RunId,
    call: CallId,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if let Ok(mut w) = self.workers.inner.waiting.lock() {
            w.remove(&(self.run.clone(), self.call.clone()));
        }
    }
}

/// A stored outcome decoded against the declaration, as a process reply
/// is (host-boundary.txt, "Decoding").
fn admit(decls: &Declarations, tool: &str, outcome: &Json) -> CallOutcome {
    match Outcome::from_record(outcome) {
        Ok(o) => decls.admit(tool, o),
        Err(e) => CallOutcome::BadReply(format!("the worker's outcome is malformed: {e}")),
    }
}

mod scan;
mod served;
