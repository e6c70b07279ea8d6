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

use crate::child;
use crate::lines::{Line, read_line};
use crate::manifest::{Binding, Launch};
use crate::mcp;
use crate::outcome::{CallOutcome, CallRequest, Declarations};
use flow_abi::protocol::{self, DescribeResult, Id, Message, Outcome};
use serde_json::Value as Json;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::io::{AsyncWriteExt, BufReader, BufWriter};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;
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
#[error("{tool}: {}", match .served { Some(fp) => format!("fingerprint {fp} served, {expected} declared"), None => "not served".to_string() })]
pub struct Mismatch {
    pub tool: String,
    pub expected: String,
    /// The fingerprint the process serves, or `None` when it does not list
    /// the declaration.
    pub served: Option<String>,
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
}

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
        let mut actor = Actor {
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
        Ok(ProcessHandle { tx, decls, label })
    }

    /// Sends one call and waits for its admitted outcome. Dropping the
    /// future before it resolves cancels the call and forgets it: a reply
    /// arriving later is for a call that is not open, and is dropped.
    pub async fn call(&self, req: CallRequest) -> CallOutcome {
        if self.decls.get(&req.tool).is_none() {
            return CallOutcome::NotRun(format!("{} is not bound to {}", req.tool, self.label));
        }
        let tool = req.tool.clone();
        let key = (req.run.clone(), req.call.clone());
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

struct Pending {
    written: Arc<AtomicBool>,
    tx: oneshot::Sender<Outcome>,
    /// The JSON-RPC request id of an MCP call.
    mcp_id: Option<String>,
}

/// Which protocol the child speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dialect {
    /// The Tool process protocol.
    Flow,
    /// MCP, through the adapter ([`crate::mcp`]).
    Mcp,
}

/// A line for the writer, and the flag to set once it is flushed.
struct Write {
    line: String,
    written: Option<Arc<AtomicBool>>,
}

/// What the reader saw.
enum Event {
    Message(Message),
    /// A reply that cannot be admitted, tied to its call.
    BadReply {
        key: Key,
        reason: String,
    },
    /// A line that is not a protocol message and names no call.
    Stray(String),
    /// A response (the answer to describe) that is not a describe result.
    BadResponse(String),
    /// A describe result of another data major version.
    VersionRefused {
        theirs: String,
        ours: String,
    },
    /// MCP: a response, by request id (see [`id_text`]): its result or error.
    Response {
        id: String,
        result: Result<Json, Json>,
    },
    /// MCP: a response that cannot be admitted, by request id.
    BadResponseTo {
        id: String,
        reason: String,
    },
    /// MCP: a request from the server.
    ServerRequest {
        id: Json,
        method: String,
    },
    /// End of the child's stdout.
    Closed,
}

struct Live {
    child: Child,
    writes: Option<mpsc::UnboundedSender<Write>>,
    writer: tokio::task::JoinHandle<()>,
    events: mpsc::Receiver<Event>,
    tasks: JoinSet<()>,
}

enum LiveEvent {
    Event(Event),
    Exited(String),
}

struct Actor {
    dialect: Dialect,
    /// MCP request id → the open call it carries.
    mcp_ids: HashMap<String, Key>,
    binding: Binding,
    decls: Arc<Declarations>,
    options: ProcessOptions,
    label: Arc<str>,
    rx: mpsc::UnboundedReceiver<Command>,
    live: Option<Live>,
    pending: HashMap<Key, Pending>,
    /// Declarations the last describe did not fit: tool → (served
    /// fingerprint, reason).
    unfit: BTreeMap<String, (Option<String>, String)>,
    next_id: u64,
    shutdown: CancellationToken,
}

impl Actor {
    async fn run(mut self) {
        loop {
            tokio::select! {
                _ = self.shutdown.cancelled() => {
                    self.stop("the host shut down").await;
                    break;
                }
                cmd = self.rx.recv() => match cmd {
                    None => {
                        self.stop("every handle was dropped").await;
                        break;
                    }
                    Some(Command::Shutdown { done }) => {
                        self.stop("the host shut down").await;
                        let _ = done.send(());
                        break;
                    }
                    Some(cmd) => self.command(cmd).await,
                },
                ev = next_live_event(&mut self.live) => match ev {
                    LiveEvent::Event(Event::Closed) => self.ended("the process ended").await,
                    LiveEvent::Event(ev) => self.event(ev),
                    LiveEvent::Exited(status) => {
                        self.drain_after_exit().await;
                        self.ended(&format!("the process ended ({status})")).await;
                    }
                },
            }
        }
        tracing::debug!(tool.process = %self.label, "process service stopped");
    }

    async fn command(&mut self, cmd: Command) {
        match cmd {
            Command::Call { req, tx } => self.call(req, tx).await,
            Command::Cancel { key } => {
                if self.pending.contains_key(&key) {
                    self.write_cancel(&key);
                }
            }
            Command::Abandon { key } => {
                if self.pending.contains_key(&key) {
                    self.write_cancel(&key);
                }
                if let Some(p) = self.pending.remove(&key)
                    && let Some(id) = p.mcp_id
                {
                    self.mcp_ids.remove(&id);
                }
            }
            Command::Shutdown { .. } => {}
        }
    }

    async fn call(&mut self, req: CallRequest, tx: oneshot::Sender<Outcome>) {
        let key = (req.run.clone(), req.call.clone());
        if self.pending.contains_key(&key) {
            let _ = tx.send(Outcome::NotRun(format!(
                "call {} of run {} is already open",
                req.call, req.run
            )));
            return;
        }
        if self.live.is_none() {
            // "A process that ends is started again for the next call sent
            // to it, and answers describe again before that call is sent."
            if let Err(e) = self.begin().await {
                let _ = tx.send(Outcome::NotRun(e.to_string()));
                return;
            }
        }
        if let Some((_, reason)) = self.unfit.get(&req.tool) {
            let _ = tx.send(Outcome::NotRun(reason.clone()));
            return;
        }
        let (line, mcp_id) = match self.dialect {
            Dialect::Flow => (
                protocol::write_call(&protocol::Call {
                    run: req.run,
                    call: req.call,
                    tool: req.tool,
                    args: req.args,
                    generic: None,
                }),
                None,
            ),
            Dialect::Mcp => {
                // "A call is a tools/call request whose id is the call's
                // history id" (unless another run's equal id is open).
                let id = if self.mcp_ids.contains_key(&req.call) {
                    format!("{}@{}", req.call, req.run)
                } else {
                    req.call.clone()
                };
                if self.mcp_ids.contains_key(&id) {
                    let _ = tx.send(Outcome::NotRun(format!(
                        "request id {id} is already open on the MCP server"
                    )));
                    return;
                }
                self.mcp_ids.insert(id.clone(), key.clone());
                (
                    mcp::call_request(&id, mcp::tool_name(&req.tool), req.args),
                    Some(id),
                )
            }
        };
        let written = Arc::new(AtomicBool::new(false));
        if let Some(w) = self.live.as_ref().and_then(|l| l.writes.as_ref()) {
            // A failed send leaves the flag unset: the call did not reach
            // the process, which the end of the process will settle.
            let _ = w.send(Write {
                line,
                written: Some(written.clone()),
            });
        }
        self.pending.insert(
            key,
            Pending {
                written,
                tx,
                mcp_id,
            },
        );
    }

    fn write_cancel(&self, key: &Key) {
        let line = match self.pending.get(key).and_then(|p| p.mcp_id.as_deref()) {
            Some(id) => mcp::cancelled_notification(id),
            None => protocol::write_cancel(&protocol::Cancel {
                run: key.0.clone(),
                call: key.1.clone(),
            }),
        };
        self.write(line);
    }

    fn write(&self, line: String) {
        if let Some(w) = self.live.as_ref().and_then(|l| l.writes.as_ref()) {
            let _ = w.send(Write {
                line,
                written: None,
            });
        }
    }

    fn event(&mut self, ev: Event) {
        match ev {
            Event::Message(Message::Reply(r)) => self.settle((r.run, r.call), r.outcome),
            Event::BadReply { key, reason } => self.settle(key, Outcome::BadReply(reason)),
            Event::Message(other) => {
                let kind = match other {
                    Message::Describe { .. } => "describe",
                    Message::Described { .. } => "a describe response",
                    Message::Call(_) => "call",
                    Message::Cancel(_) => "cancel",
                    Message::Reply(_) => "reply",
                };
                tracing::warn!(tool.process = %self.label, "ignored an unexpected {kind} message");
            }
            Event::Response { id, result } => match self.mcp_ids.get(&id).cloned() {
                Some(key) => self.settle(key, mcp::call_outcome(result.as_ref())),
                None => {
                    tracing::warn!(tool.process = %self.label, "dropped a response to request {id}, which is not open")
                }
            },
            Event::BadResponseTo { id, reason } => match self.mcp_ids.get(&id).cloned() {
                Some(key) => self.settle(key, Outcome::BadReply(reason)),
                None => {
                    tracing::warn!(tool.process = %self.label, "dropped a response to request {id}: {reason}")
                }
            },
            Event::ServerRequest { id, method } => {
                self.write(mcp::answer_server_request(&id, &method));
            }
            Event::Stray(why) | Event::BadResponse(why) => {
                tracing::warn!(tool.process = %self.label, "ignored a line: {why}");
            }
            Event::VersionRefused { theirs, .. } => {
                tracing::warn!(tool.process = %self.label, "ignored a describe response of data version {theirs}");
            }
            Event::Closed => {}
        }
    }

    /// "The host accepts at most one reply per call."
    fn settle(&mut self, key: Key, outcome: Outcome) {
        match self.pending.remove(&key) {
            Some(p) => {
                if let Some(id) = &p.mcp_id {
                    self.mcp_ids.remove(id);
                }
                let _ = p.tx.send(outcome);
            }
            None => tracing::warn!(
                tool.process = %self.label,
                run.id = %key.0,
                call.id = %key.1,
                "dropped a reply for a call that is not open (unknown, abandoned or already answered)"
            ),
        }
    }

    /// Starts the process and checks its describe against the declarations.
    async fn begin(&mut self) -> Result<(), ProcessError> {
        let mut tasks = JoinSet::new();
        let process = self.label.to_string();
        let started = child::start(
            &self.binding.launch,
            &self.binding.dir,
            &self.label,
            &mut tasks,
        )
        .map_err(|e| ProcessError::Start {
            process: process.clone(),
            message: e.to_string(),
        })?;
        let (ev_tx, events) = mpsc::channel(1024);
        tasks.spawn(reader(started.stdout, ev_tx, self.dialect));
        let (writes, w_rx) = mpsc::unbounded_channel();
        let writer = tokio::spawn(writer(started.stdin, w_rx));
        let mut live = Live {
            child: started.child,
            writes: Some(writes),
            writer,
            events,
            tasks,
        };
        let result = match self.dialect {
            Dialect::Flow => self.describe(&mut live, process).await,
            Dialect::Mcp => self.mcp_handshake(&mut live, process).await,
        };
        match result {
            Ok(()) => {
                tracing::info!(tool.process = %self.label, tool.pid = ?live.child.id(), "process described");
                self.live = Some(live);
                Ok(())
            }
            Err(e) => {
                // Dropping `live` kills the child (kill_on_drop).
                live.tasks.abort_all();
                tracing::warn!(tool.process = %self.label, "binding refused: {e}");
                Err(e)
            }
        }
    }

    /// The Tool process protocol's describe, checked.
    async fn describe(&mut self, live: &mut Live, process: String) -> Result<(), ProcessError> {
        self.next_id += 1;
        let id = Id::from(self.next_id);
        if let Some(w) = &live.writes {
            let _ = w.send(Write {
                line: protocol::write_describe(&id),
                written: None,
            });
        }
        let answer = tokio::time::timeout(self.options.describe_timeout, async {
            loop {
                match live.events.recv().await {
                    None | Some(Event::Closed) => {
                        break Err(Ok("the process ended before answering describe".to_string()));
                    }
                    Some(Event::Message(Message::Described { id: got, result })) if got == id => {
                        break Ok(result);
                    }
                    Some(Event::VersionRefused { theirs, ours }) => {
                        break Err(Err((theirs, ours)));
                    }
                    Some(Event::BadResponse(why)) => break Err(Ok(why)),
                    Some(_) => {
                        tracing::warn!(tool.process = %self.label, "ignored a line before the describe response");
                    }
                }
            }
        })
        .await;
        match answer {
            Err(_) => Err(ProcessError::Describe {
                process,
                message: format!(
                    "no describe response within {} ms",
                    self.options.describe_timeout.as_millis()
                ),
            }),
            Ok(Err(Err((theirs, ours)))) => Err(ProcessError::Version {
                process,
                theirs,
                ours,
            }),
            Ok(Err(Ok(message))) => Err(ProcessError::Describe { process, message }),
            Ok(Ok(Err(rpc))) => Err(ProcessError::Describe {
                process,
                message: format!("error {}: {}", rpc.code, rpc.message),
            }),
            Ok(Ok(Ok(described))) => {
                self.check(&described);
                Ok(())
            }
        }
    }

    /// MCP: initialize, initialized, then every page of tools/list. A
    /// declaration with no tool of its name is unbound.
    async fn mcp_handshake(
        &mut self,
        live: &mut Live,
        process: String,
    ) -> Result<(), ProcessError> {
        let timeout = self.options.describe_timeout;
        let fail = |message: String| ProcessError::Describe {
            process: process.clone(),
            message,
        };
        let label = self.label.clone();
        self.next_id += 1;
        let n = self.next_id;
        let names = tokio::time::timeout(timeout, async {
            let init_id = format!("flowd-initialize-{n}");
            mcp_exchange(live, &label, mcp::initialize_request(&init_id), &init_id).await?;
            if let Some(w) = &live.writes {
                let _ = w.send(Write {
                    line: mcp::initialized_notification(),
                    written: None,
                });
            }
            let mut names = Vec::new();
            let mut cursor: Option<String> = None;
            for page in 0..1000 {
                let id = format!("flowd-tools-list-{n}-{page}");
                let result = mcp_exchange(
                    live,
                    &label,
                    mcp::list_tools_request(&id, cursor.as_deref()),
                    &id,
                )
                .await?;
                let (more, next) = mcp::read_tool_list(&result)?;
                names.extend(more);
                match next {
                    Some(c) if !c.is_empty() => cursor = Some(c),
                    _ => break,
                }
            }
            Ok::<_, String>(names)
        })
        .await
        .map_err(|_| {
            fail(format!(
                "no MCP handshake within {} ms",
                timeout.as_millis()
            ))
        })?
        .map_err(fail)?;
        self.unfit = mcp::unbound(&self.decls, &names)
            .into_iter()
            .map(|(k, reason)| (k, (None, reason)))
            .collect();
        Ok(())
    }

    /// Records which declarations the described process does not fit.
    fn check(&mut self, described: &DescribeResult) {
        self.unfit.clear();
        for (tool, (_, expected)) in &self.decls.decls {
            let served = described.tools.iter().find(|t| &t.tool == tool);
            match served {
                Some(t) if &t.fingerprint == expected => {}
                Some(t) => {
                    self.unfit.insert(
                        tool.clone(),
                        (
                            Some(t.fingerprint.clone()),
                            format!(
                                "{} no longer fits {tool}: it serves fingerprint {}, the declaration's is {expected}",
                                self.label, t.fingerprint
                            ),
                        ),
                    );
                }
                None => {
                    self.unfit.insert(
                        tool.clone(),
                        (None, format!("{} no longer serves {tool}", self.label)),
                    );
                }
            }
        }
    }

    /// After the child exited, its last lines may still be in the pipe:
    /// read them for a short while (a grandchild may hold stdout open).
    async fn drain_after_exit(&mut self) {
        let grace = self.options.stop_grace;
        let deadline = tokio::time::Instant::now() + grace;
        loop {
            let Some(live) = self.live.as_mut() else {
                return;
            };
            match tokio::time::timeout_at(deadline, live.events.recv()).await {
                Ok(Some(Event::Closed)) | Ok(None) | Err(_) => return,
                Ok(Some(ev)) => self.event(ev),
            }
        }
    }

    /// The process ended: settle every open call by whether it reached it.
    async fn ended(&mut self, reason: &str) {
        let Some(mut live) = self.live.take() else {
            return;
        };
        let _ = live.child.start_kill();
        // Stop feeding the writer and wait until it gives up: a write to a
        // dead child fails, so afterwards every flag is final.
        live.writes = None;
        let _ = tokio::time::timeout(self.options.stop_grace, &mut live.writer).await;
        live.writer.abort();
        let status = match tokio::time::timeout(self.options.stop_grace, live.child.wait()).await {
            Ok(Ok(s)) => s.to_string(),
            Ok(Err(e)) => e.to_string(),
            Err(_) => "did not exit".to_string(),
        };
        live.tasks.abort_all();
        self.mcp_ids.clear();
        let open = self.pending.len();
        for (_, p) in self.pending.drain() {
            let outcome = if p.written.load(Ordering::Acquire) {
                Outcome::Unknown(format!("{reason} after the call was sent to it"))
            } else {
                Outcome::NotRun(format!("{reason} before the call was sent to it"))
            };
            let _ = p.tx.send(outcome);
        }
        if open > 0 {
            tracing::warn!(tool.process = %self.label, open.calls = open, "process ended: {status}");
        } else {
            tracing::debug!(tool.process = %self.label, "process ended: {status}");
        }
    }

    /// Stops on shutdown: cancels open calls, closes stdin, waits a grace
    /// period, then kills.
    async fn stop(&mut self, reason: &str) {
        let keys: Vec<Key> = self.pending.keys().cloned().collect();
        for key in &keys {
            self.write_cancel(key);
        }
        // Take the child out while draining, so settling can borrow self.
        if let Some(mut live) = self.live.take() {
            live.writes = None;
            let grace = self.options.stop_grace;
            let _ = tokio::time::timeout(grace, async {
                // Replies to cancelled calls may still come.
                while !self.pending.is_empty() {
                    match live.events.recv().await {
                        None | Some(Event::Closed) => break,
                        Some(Event::Message(Message::Reply(r))) => {
                            self.settle((r.run, r.call), r.outcome);
                        }
                        Some(
                            ev @ (Event::Response { .. }
                            | Event::BadReply { .. }
                            | Event::BadResponseTo { .. }),
                        ) => self.event(ev),
                        Some(_) => {}
                    }
                }
            })
            .await;
            // With stdin closed, a well-behaved process exits by itself;
            // give it the grace period before `ended` kills it.
            // (The writer task owns stdin and ends once `writes` is gone;
            // `ended` awaits it, so it is not polled here.)
            let _ = tokio::time::timeout(grace, live.child.wait()).await;
            self.live = Some(live);
        }
        self.ended(reason).await;
    }
}

async fn next_live_event(live: &mut Option<Live>) -> LiveEvent {
    let Some(live) = live.as_mut() else {
        return std::future::pending().await;
    };
    tokio::select! {
        ev = live.events.recv() => LiveEvent::Event(ev.unwrap_or(Event::Closed)),
        status = live.child.wait() => LiveEvent::Exited(match status {
            Ok(s) => s.to_string(),
            Err(e) => e.to_string(),
        }),
    }
}

/// Reads the child's stdout into events until it closes.
async fn reader(stdout: ChildStdout, events: mpsc::Sender<Event>, dialect: Dialect) {
    let mut r = BufReader::with_capacity(64 * 1024, stdout);
    let mut buf = Vec::new();
    loop {
        let ev = match read_line(&mut r, protocol::MAX_LINE_BYTES, &mut buf).await {
            Ok(None) | Err(_) => break,
            Ok(Some(Line::Text(t))) if t.trim().is_empty() => continue,
            Ok(Some(Line::Text(t))) if dialect == Dialect::Mcp => mcp_event(&t),
            Ok(Some(Line::Text(t))) => match protocol::parse_line(&t) {
                Ok(m) => Event::Message(m),
                Err(protocol::Error::BadOutcome { run, call, reason }) => Event::BadReply {
                    key: (run, call),
                    reason,
                },
                Err(protocol::Error::VersionRefused { theirs, ours }) => {
                    Event::VersionRefused { theirs, ours }
                }
                Err(e) if is_response(&t) => Event::BadResponse(e.to_string()),
                Err(e) => Event::Stray(e.to_string()),
            },
            Ok(Some(Line::NotUtf8)) => Event::Stray("a line that is not UTF-8".into()),
            Ok(Some(Line::Oversized { len, skim })) => {
                let text = |m: &str| {
                    skim.member(m)
                        .and_then(|raw| flow_abi::json::parse(raw).ok())
                        .and_then(|v| v.as_str().map(str::to_string))
                };
                let reason = format!(
                    "reply line of {len} bytes is larger than the limit of {} bytes",
                    protocol::MAX_LINE_BYTES
                );
                match (
                    text("method").as_deref(),
                    text("params.run"),
                    text("params.call"),
                ) {
                    (Some("reply"), Some(run), Some(call)) if dialect == Dialect::Flow => {
                        Event::BadReply {
                            key: (run, call),
                            reason,
                        }
                    }
                    (None, _, _) if dialect == Dialect::Mcp && skim.member("id").is_some() => {
                        Event::BadResponseTo {
                            id: skim
                                .member("id")
                                .and_then(|raw| flow_abi::json::parse(raw).ok())
                                .map(|v| id_text(&v))
                                .unwrap_or_default(),
                            reason,
                        }
                    }
                    _ => Event::Stray(format!("a line of {len} bytes that names no call")),
                }
            }
        };
        if events.send(ev).await.is_err() {
            return;
        }
    }
    let _ = events.send(Event::Closed).await;
}

/// One request-response exchange of the MCP handshake; server requests in
/// between are answered.
async fn mcp_exchange(
    live: &mut Live,
    label: &str,
    line: String,
    id: &str,
) -> Result<Json, String> {
    if let Some(w) = &live.writes {
        let _ = w.send(Write {
            line,
            written: None,
        });
    }
    loop {
        match live.events.recv().await {
            None | Some(Event::Closed) => {
                return Err("the MCP server ended during the handshake".to_string());
            }
            Some(Event::Response { id: got, result }) if got == id => {
                return result.map_err(|e| {
                    format!(
                        "the MCP server answered with an error: {}",
                        flow_abi::json::canonical(&e)
                    )
                });
            }
            Some(Event::BadResponseTo { reason, .. }) => return Err(reason),
            Some(Event::ServerRequest { id, method }) => {
                if let Some(w) = &live.writes {
                    let _ = w.send(Write {
                        line: mcp::answer_server_request(&id, &method),
                        written: None,
                    });
                }
            }
            Some(_) => {
                tracing::debug!(tool.process = %label, "ignored a line during the MCP handshake");
            }
        }
    }
}

/// A JSON-RPC id as the text the adapter keys requests by: a string id's
/// own text, any other id's canonical JSON.
fn id_text(id: &Json) -> String {
    match id {
        Json::String(s) => s.clone(),
        other => flow_abi::json::canonical(other),
    }
}

/// Reads one MCP line: a response, a server request, or a notification.
fn mcp_event(line: &str) -> Event {
    let v = match flow_abi::json::parse(line) {
        Ok(v) => v,
        Err(e) => return Event::Stray(format!("not JSON: {e}")),
    };
    let Some(m) = v.as_object() else {
        return Event::Stray("not a JSON-RPC object".into());
    };
    match (m.get("id"), m.get("method").and_then(Json::as_str)) {
        (Some(id), Some(method)) => Event::ServerRequest {
            id: id.clone(),
            method: method.to_string(),
        },
        (None, Some(_)) => Event::Stray("a notification".into()),
        (Some(id), None) => {
            let id = id_text(id);
            match (m.get("result"), m.get("error")) {
                (Some(r), None) => Event::Response {
                    id,
                    result: Ok(r.clone()),
                },
                (None, Some(e)) => Event::Response {
                    id,
                    result: Err(e.clone()),
                },
                _ => Event::BadResponseTo {
                    id,
                    reason: "a response has exactly one of result and error".into(),
                },
            }
        }
        (None, None) => Event::Stray("neither a request nor a response".into()),
    }
}

/// Whether a line that did not parse as a message is a JSON-RPC response
/// (an object with an id and no method).
fn is_response(line: &str) -> bool {
    flow_abi::json::parse(line).is_ok_and(|v| {
        v.as_object()
            .is_some_and(|m| m.contains_key("id") && !m.contains_key("method"))
    })
}

/// Writes lines to the child's stdin in batches; after each flush, marks
/// the batch's calls as written.
async fn writer(stdin: ChildStdin, mut rx: mpsc::UnboundedReceiver<Write>) {
    let mut w = BufWriter::with_capacity(64 * 1024, stdin);
    let mut batch: Vec<Write> = Vec::new();
    while let Some(first) = rx.recv().await {
        batch.push(first);
        while batch.len() < 256 {
            match rx.try_recv() {
                Ok(x) => batch.push(x),
                Err(_) => break,
            }
        }
        for x in &batch {
            if w.write_all(x.line.as_bytes()).await.is_err() {
                return;
            }
        }
        if w.flush().await.is_err() {
            return;
        }
        for x in batch.drain(..) {
            if let Some(f) = x.written {
                f.store(true, Ordering::Release);
            }
        }
    }
    // Channel closed: close stdin so the child sees end of input.
    let _ = w.shutdown().await;
}
