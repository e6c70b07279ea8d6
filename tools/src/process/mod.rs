//! A process implementation: one child speaking the Tool process protocol,
//! owned by a service that hands out a cheap [`ProcessHandle`].
//!
//! host-boundary.txt, "The Tool process protocol":
//! * "describe comes first." No call is written before the describe
//!   response has been read and checked.
//! * "A data version whose major differs from the host's refuses the
//!   binding, as a version refusal distinct from any shape error."
//! * "Calls are multiplexed. Several may be outstanding, and replies may
//!   arrive in any order ... The pair of run id and call id is the only
//!   correlation key."
//! * "A process that ends is started again for the next call sent to it, and
//!   answers describe again before that call is sent; a declaration it no
//!   longer serves, or no longer fits, makes that call NotRun. A call that
//!   was out to it when it ended is Unknown if it reached the process and
//!   NotRun if it did not."
//! * "The host accepts at most one reply per call. A reply for a call that is
//!   not open, or a second reply for one call, is dropped and changes nothing
//!   in history; the host may log it."
//!
//! "Reached the process" is decided as REQUIREMENTS GAP-PRO-3 proposes: the
//! call's line was fully written and flushed to the child's stdin. The
//! writer task sets a per-call flag after the flush; when the process ends,
//! the service first waits for the writer to stop (a write to a dead child
//! fails), then reads the flags.
//!
//! # Concurrency
//!
//! One actor task owns the child, the table of open calls and the pipes'
//! tasks (STYLE rule 7). Callers talk to it over an unbounded channel (the
//! dispatcher bounds how many calls are in flight per binding). Three tasks
//! per running child live in the actor's `JoinSet`: a reader (lines to
//! events; parsing happens here, off the actor), a writer (batches lines,
//! flushes, then marks calls written) and the stderr drain. Reply values are
//! decoded in the caller's task, so decoding scales with callers, not with
//! the actor. The child is spawned with `kill_on_drop`: when the actor ends
//! (every handle dropped, the shutdown token cancelled, or the runtime
//! stopping) the child dies with it.
//!
//! Layout: this file holds the handle and its errors; `actor` the task that
//! owns the child and its open calls, `lifecycle` starting, describing and
//! ending the child, and `pipes` the reader and writer tasks.

mod actor;
mod lifecycle;
mod pipes;

use crate::manifest::{Binding, Launch};
use crate::outcome::{CallOutcome, CallRequest, Declarations};
use actor::Actor;
use flow_abi::protocol::Outcome;
use pipes::Dialect;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

/// Options of one process service.
#[derive(Debug, Clone)]
pub struct ProcessOptions {
    /// How long a (re)started process may take to answer describe.
    pub describe_timeout: Duration,
    /// How long to wait for a process to finish on its own when stopping,
    /// and for its last lines after it exits, before killing it.
    pub stop_grace: Duration,
}

impl Default for ProcessOptions {
    fn default() -> ProcessOptions {
        ProcessOptions {
            describe_timeout: Duration::from_secs(30),
            stop_grace: Duration::from_secs(2),
        }
    }
}

/// Why a process could not be bound.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProcessError {
    #[error("{process}: cannot start: {message}")]
    Start { process: String, message: String },
    /// "a version refusal distinct from any shape error" (PRO-8).
    #[error("{process}: data version {theirs} refused: this host speaks {ours}")]
    Version {
        process: String,
        theirs: String,
        ours: String,
    },
    /// describe was not answered, or not with a describe result.
    #[error("{process}: describe failed: {message}")]
    Describe { process: String, message: String },
    /// Declarations the process does not serve or does not fit.
    #[error("{process}: {}", .declarations.iter().map(|m| m.to_string()).collect::<Vec<_>>().join("; "))]
    Mismatch {
        process: String,
        declarations: Vec<Mismatch>,
    },
}

/// One declaration a process does not fit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{tool}: {}", match .served { Some(fp) => format!("fingerprint {fp} served, {expected} declared (if the flow changed, regenerate the document the Tool serves from, in the flow's directory: `flow --json tools {} > tools.json`)", module_of(tool)), None => "not served".to_string() })]
pub struct Mismatch {
    pub tool: String,
    pub expected: String,
    /// The fingerprint the process serves, or `None` when it does not list
    /// the declaration.
    pub served: Option<String>,
}

/// The module of a Tool identity (`triage.json#classify` → `triage.json`).
pub(crate) fn module_of(tool: &str) -> &str {
    tool.split_once('#').map_or(tool, |(m, _)| m)
}

type Key = (String, String);

enum Command {
    Call {
        req: CallRequest,
        tx: oneshot::Sender<Outcome>,
    },
    Cancel {
        key: Key,
    },
    /// The caller gave up (timeout or dropped future): cancel and forget.
    Abandon {
        key: Key,
    },
    Shutdown {
        done: oneshot::Sender<()>,
    },
}

/// A cheap, cloneable handle to one process service.
#[derive(Clone)]
pub struct ProcessHandle {
    tx: mpsc::UnboundedSender<Command>,
    decls: Arc<Declarations>,
    label: Arc<str>,
    mcp: bool,
    crashed: Crashed,
}

/// The end of a process's stderr for each call it ended without answering
/// (`(run, call)` → text), kept until the caller takes it (issue 38 §4);
/// at most [`CRASHED_MAX`] entries, the oldest forgotten first.
pub type Crashed = Arc<std::sync::Mutex<std::collections::VecDeque<(Key, String)>>>;

/// Most stderr tails a process keeps for calls nobody asked about yet.
pub const CRASHED_MAX: usize = 64;

impl std::fmt::Debug for ProcessHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessHandle")
            .field("process", &self.label)
            .finish()
    }
}

impl ProcessHandle {
    /// Starts `binding`'s command, answers describe and checks every
    /// declaration of `decls` against it. On success the process keeps
    /// running behind the returned handle until every handle is dropped,
    /// [`ProcessHandle::shutdown`] is called, or `shutdown` is cancelled.
    pub async fn start(
        binding: &Binding,
        decls: Declarations,
        options: ProcessOptions,
        shutdown: CancellationToken,
    ) -> Result<ProcessHandle, ProcessError> {
        let label: Arc<str> = Arc::from(binding.launch.to_string());
        let decls = Arc::new(decls);
        let (tx, rx) = mpsc::unbounded_channel();
        let dialect = match binding.launch {
            Launch::Command(_) => Dialect::Flow,
            Launch::Mcp(_) => Dialect::Mcp,
        };
        let crashed = Crashed::default();
        let mut actor = Actor {
            crashed: crashed.clone(),
            dialect,
            mcp_ids: HashMap::new(),
            binding: binding.clone(),
            decls: decls.clone(),
            options,
            label: label.clone(),
            rx,
            live: None,
            pending: HashMap::new(),
            unfit: BTreeMap::new(),
            next_id: 0,
            shutdown,
        };
        actor.begin().await?;
        if !actor.unfit.is_empty() {
            let declarations = actor
                .unfit
                .iter()
                .map(|(tool, (served, _))| Mismatch {
                    tool: tool.clone(),
                    expected: decls.get(tool).map(|d| d.1.clone()).unwrap_or_default(),
                    served: served.clone(),
                })
                .collect();
            return Err(ProcessError::Mismatch {
                process: label.to_string(),
                declarations,
            });
        }
        tokio::spawn(actor.run());
        Ok(ProcessHandle {
            tx,
            decls,
            label,
            mcp: dialect == Dialect::Mcp,
            crashed,
        })
    }

    /// Sends one call and waits for its admitted outcome. Dropping the
    /// future before it resolves cancels the call and forgets it: a reply
    /// arriving later is for a call that is not open, and is dropped.
    pub async fn call(&self, req: CallRequest) -> CallOutcome {
        if self.decls.get(&req.tool).is_none() {
            return CallOutcome::NotRun(format!("{} is not bound to {}", req.tool, self.label));
        }
        let tool = req.tool.clone();
        let key = (req.run.to_string(), req.call.to_string());
        let (tx, rx) = oneshot::channel();
        if self.tx.send(Command::Call { req, tx }).is_err() {
            return CallOutcome::NotRun(format!("{} has been shut down", self.label));
        }
        let mut guard = AbandonGuard {
            tx: &self.tx,
            key: Some(key),
        };
        let raw = rx.await;
        guard.key = None;
        match raw {
            Ok(raw) => self.decls.admit(&tool, raw),
            // The actor always answers an accepted call before it ends; a
            // dropped sender means it died mid-call.
            Err(_) => CallOutcome::Unknown(format!("{} stopped during the call", self.label)),
        }
    }

    /// host-boundary.txt: "cancel is a request to stop work on a call. It
    /// proves nothing". The call stays open until it is answered or
    /// abandoned.
    pub fn cancel(&self, run: &str, call: &str) {
        let _ = self.tx.send(Command::Cancel {
            key: (run.to_string(), call.to_string()),
        });
    }

    /// Stops the process: open calls are cancelled, stdin is closed, and the
    /// child is killed if it has not ended within the grace period. Open
    /// calls are then answered as for a process that ends.
    pub async fn shutdown(&self) {
        let (done, wait) = oneshot::channel();
        if self.tx.send(Command::Shutdown { done }).is_ok() {
            let _ = wait.await;
        }
    }

    /// The declarations this process answers.
    pub fn declarations(&self) -> &Declarations {
        &self.decls
    }

    /// `mcp` for an MCP server, `process` for a Tool process.
    pub fn kind(&self) -> &'static str {
        if self.mcp { "mcp" } else { "process" }
    }

    /// The end of the process's stderr when it ended before answering
    /// `(run, call)`, once (taken).
    pub fn take_stderr(&self, run: &str, call: &str) -> Option<String> {
        let mut c = self.crashed.lock().unwrap_or_else(|p| p.into_inner());
        let i = c.iter().position(|((r, k), _)| r == run && k == call)?;
        c.remove(i).map(|(_, t)| t)
    }

    /// The command, for logs.
    pub fn label(&self) -> &str {
        &self.label
    }
}

/// Abandons a call whose caller stopped waiting.
struct AbandonGuard<'a> {
    tx: &'a mpsc::UnboundedSender<Command>,
    key: Option<Key>,
}

impl Drop for AbandonGuard<'_> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            let _ = self.tx.send(Command::Abandon { key });
        }
    }
}
