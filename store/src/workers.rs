//! The remote-worker queue (docs/deploy.md "Workers"): the `flow worker`
//! processes connected to any server of a store, the declarations each
//! serves, and the Tool calls travelling to them and their replies back.
//!
//! It is host state beside the histories, never inside them: a call's
//! Call and Reply facts are the record, a row here is how the call gets to
//! a worker connected to any server and how its reply gets back to the
//! server driving the run. Rows are kept until their run ends, so a server
//! that takes a run over finds each open call's state: never sent (send
//! it), sent to a live worker (wait for it), answered (admit the answer).
//!
//! Liveness is judged by the store's clock (the database's on Postgres): a
//! worker is live while it was heard from within the `within` the caller
//! gives. The rules every backend keeps (the conformance case `workers`):
//!
//! * A call is queued once per `(run, call)`: queuing it again keeps the
//!   row's state (a resend or a takeover attaches to it), only withdrawing
//!   an earlier cancel or park of a call never sent.
//! * No call of an ended run is handed out, and a parked call only once
//!   queued again (its run resumed).
//! * A call is handed out, and counted as served, only to a worker that
//!   serves its run's namespace (the namespaces of the token that
//!   registered it; issue 40 item 4): a worker of one team never sees
//!   another's calls.
//! * A claim hands a queued call to one worker only (`FOR UPDATE SKIP
//!   LOCKED` on Postgres, the write lock on SQLite), and only to a worker
//!   that registered the call's declaration with the call's fingerprint.
//! * An outcome is stored once: the first reply of the worker the call was
//!   sent to, or the host's decision when that worker was lost; any later
//!   reply is dropped.

use crate::error::Result;
use crate::namespace::Namespaces;
use flow_abi::fact::{CallId, RunId};
use serde_json::Value;
use std::time::Duration;

/// A declaration a worker serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServedTool {
    /// Declaration identity, `<module>#<tool-id>`.
    pub tool: String,
    pub fingerprint: String,
    /// The worker's binding says `resend = true`: a call out at it when it
    /// is lost is queued again rather than settled Unknown.
    pub resend: bool,
}

/// A live worker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerInfo {
    pub id: String,
    pub name: String,
    pub tools: Vec<ServedTool>,
    /// Milliseconds since it was last heard from.
    pub seen_ms_ago: i64,
    /// The namespaces whose runs' calls it is handed.
    pub namespaces: Namespaces,
}

/// One call for a worker, as queued and as handed out.
#[derive(Clone, Debug, PartialEq)]
pub struct RemoteCall {
    pub run: RunId,
    pub call: CallId,
    pub tool: String,
    pub fingerprint: String,
    /// The call's args object (canonical values).
    pub args: Value,
}

/// Where a queued call is.
#[derive(Clone, Debug, PartialEq)]
pub enum RemoteCallState {
    /// Not sent to any worker. `served`: a live worker serves its
    /// declaration (with its fingerprint), so a claim will come; without
    /// one the call is parked. `cancelled`: a cancel withdrew it.
    Queued { served: bool, cancelled: bool },
    /// Sent to `worker`, no outcome yet. `live`: the worker is still heard
    /// from; `resend`: its binding says `resend = true`; `cancelled`: a
    /// cancel was asked for.
    Sent {
        worker: String,
        live: bool,
        resend: bool,
        cancelled: bool,
    },
    /// Its outcome (`{"Ok": v}`, …), stored once; `worker`: the worker it
    /// was sent to (the one that answered, or was lost with it), none for
    /// a call settled before any worker took it.
    Done {
        outcome: Value,
        worker: Option<String>,
    },
}

/// What one claim hands a worker.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Claimed {
    pub calls: Vec<RemoteCall>,
    /// Calls sent to it earlier that it is asked to stop: `(run, call)`.
    pub cancels: Vec<(RunId, CallId)>,
}

/// What a queue write tells the servers of the store, so none has to poll
/// for it: on Postgres a NOTIFY on `flow_workers:<schema>`, sent inside the
/// write's transaction and so delivered on its commit, to every server's
/// LISTEN connection (the writer's own included).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QueueNote {
    /// A call was queued (or queued again, or a cancel asked for): held
    /// polls look again.
    Queued,
    /// `(run, call)` has its outcome stored (a worker's reply, or the
    /// host's decision): its driver looks again.
    Settled { run: RunId, call: CallId },
    /// A worker left (its calls out are now a lost worker's), or a note
    /// too long to send: every driver looks again.
    Everyone,
    /// Notes may have been missed (the LISTEN connection was opened again):
    /// everything is looked at again.
    Resync,
}

/// Called with each [`QueueNote`], on the store's own thread: it must only
/// wake tasks, never block.
pub type QueueObserver = std::sync::Arc<dyn Fn(&QueueNote) + Send + Sync>;

/// The queue of calls for remote workers, and the workers.
pub trait WorkerQueue {
    /// Registers `observer` for every [`QueueNote`] of this store. SQLite
    /// sends none: its store is one server's, whose own wake-ups cover
    /// every write it makes.
    fn observe_queue(&self, observer: QueueObserver);
    /// Records a worker, the token tag `owner` it belongs to (`""` for
    /// none), the namespaces whose calls it serves and the declarations it
    /// serves, heard from now.
    fn register_worker(
        &self,
        id: &str,
        name: &str,
        owner: &str,
        namespaces: &Namespaces,
        tools: &[ServedTool],
    ) -> Result<()>;
    /// The owner tag `id` was registered with (live or not); `None` for a
    /// worker the store does not know (never registered, or swept).
    fn worker_owner(&self, id: &str) -> Result<Option<String>>;
    /// Marks `id` as heard from now, if it is still live (heard from within
    /// `within`); false for a worker unknown or already judged lost, which
    /// must register again.
    fn touch_worker(&self, id: &str, within: Duration) -> Result<bool>;
    /// A worker that leaves: judged lost at once (its calls are settled as
    /// a lost worker's).
    fn remove_worker(&self, id: &str) -> Result<()>;
    /// The workers heard from within `within`, by id.
    fn live_workers(&self, within: Duration) -> Result<Vec<WorkerInfo>>;
    /// Queues a call unless its `(run, call)` is queued already; returns
    /// where it is then (live workers being those heard from within
    /// `within`), so the driver need not read it back.
    fn queue_call(&self, call: &RemoteCall, within: Duration) -> Result<RemoteCallState>;
    /// Hands `worker` at most `limit` queued calls of the declarations it
    /// registered (the same fingerprint) and of runs in its namespaces,
    /// oldest first — none parked, none of an ended run — and the cancels of calls sent to it it has not
    /// been told of.
    fn claim_calls(&self, worker: &str, limit: u32) -> Result<Claimed>;
    /// Stores `outcome` for a call sent to `worker` that has none; false
    /// (the reply is dropped) otherwise.
    fn reply_call(&self, worker: &str, run: &RunId, call: &CallId, outcome: &Value)
    -> Result<bool>;
    /// [`WorkerQueue::reply_call`] for each of a worker's replies `(run,
    /// call, outcome)`, in order (a second reply to one call in the batch
    /// is dropped); Postgres stores them in one statement.
    fn reply_calls(&self, worker: &str, replies: &[(RunId, CallId, Value)]) -> Result<Vec<bool>> {
        replies
            .iter()
            .map(|(run, call, outcome)| self.reply_call(worker, run, call, outcome))
            .collect()
    }
    /// The state of a queued call; `None` when it was never queued (or its
    /// run ended and the row is gone).
    fn call_state(
        &self,
        run: &RunId,
        call: &CallId,
        within: Duration,
    ) -> Result<Option<RemoteCallState>>;
    /// The host decides a call that has no outcome and is where it saw it:
    /// sent to `worker`, or never sent (`None`). Stores `outcome`, or with
    /// `None` queues a sent call again. False when another outcome came
    /// first or the call moved meanwhile (claimed, or queued again).
    fn settle_call(
        &self,
        run: &RunId,
        call: &CallId,
        worker: Option<&str>,
        outcome: Option<&Value>,
    ) -> Result<bool>;
    /// Asks for a call to stop: a queued one is withdrawn (never handed
    /// out), a sent one marked so its worker hears of it at its next claim.
    fn cancel_call(&self, run: &RunId, call: &CallId) -> Result<()>;
    /// Parks `call` of `run` (every call of `run` with `None`) if never
    /// sent: its drive stops waiting (the run pauses, or was halted) and it
    /// is handed out no more until queued again. Returns how many were
    /// parked (0 for a call claimed or settled meanwhile).
    fn park_calls(&self, run: &RunId, call: Option<&CallId>) -> Result<u64>;
    /// Paused runs with a parked call that a live worker serves now (a
    /// worker arrived for it), at most `limit`.
    fn parked_runs(&self, within: Duration, limit: u32) -> Result<Vec<RunId>>;
    /// Forgets the calls of ended runs and the workers not heard from
    /// within `forget`; returns the rows removed.
    fn sweep_workers(&self, forget: Duration) -> Result<u64>;
}

/// What `worker_namespaces` (migration 0020) holds for `namespaces`: one
/// row each, or the one row `*` for every namespace.
pub(crate) fn namespace_rows(namespaces: &Namespaces) -> Vec<String> {
    match namespaces.listed() {
        None => vec![ALL_NAMESPACES.to_string()],
        Some(names) => names.iter().map(|n| n.as_str().to_string()).collect(),
    }
}

/// The `worker_namespaces` row of a worker that serves every namespace
/// (never a namespace's name: `*` does not parse as one).
pub(crate) const ALL_NAMESPACES: &str = "*";

/// The namespaces `worker_namespaces` rows say (the inverse of
/// [`namespace_rows`]).
pub(crate) fn namespaces_of(rows: &[String]) -> Result<Namespaces> {
    if rows.iter().any(|r| r == ALL_NAMESPACES) {
        return Ok(Namespaces::All);
    }
    rows.iter()
        .map(|r| crate::namespace::Namespace::parse(r))
        .collect::<Result<Vec<_>>>()
        .map(Namespaces::only)
}

/// A duration as whole milliseconds for SQL (saturating).
pub(crate) fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 4)
}
