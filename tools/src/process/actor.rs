//! The actor that owns one child: its table of open calls, the commands
//! from handles and the events from the reader.

use super::pipes::{Dialect, Event, Write, Writes};
use super::{Command, Key, ProcessOptions};
use crate::manifest::Binding;
use crate::mcp;
use crate::outcome::{CallRequest, Declarations};
use flow_abi::protocol::{self, Message, Outcome};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use tokio::process::Child;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

pub(super) struct Pending {
    pub(super) written: Arc<AtomicBool>,
    pub(super) tx: oneshot::Sender<Outcome>,
    /// The JSON-RPC request id of an MCP call.
    pub(super) mcp_id: Option<String>,
}

pub(super) struct Live {
    pub(super) child: Child,
    pub(super) stderr: crate::stderr::StderrTail,
    pub(super) writes: Option<Writes>,
    pub(super) writer: tokio::task::JoinHandle<()>,
    pub(super) events: mpsc::Receiver<Event>,
    pub(super) tasks: JoinSet<()>,
}

pub(super) enum LiveEvent {
    Event(Event),
    Exited(String),
}

pub(super) struct Actor {
    /// Stderr tails of calls the process ended without answering.
    pub(super) crashed: super::Crashed,
    pub(super) dialect: Dialect,
    /// MCP request id → the open call it carries.
    pub(super) mcp_ids: HashMap<String, Key>,
    pub(super) binding: Binding,
    pub(super) decls: Arc<Declarations>,
    pub(super) options: ProcessOptions,
    pub(super) label: Arc<str>,
    pub(super) rx: mpsc::UnboundedReceiver<Command>,
    pub(super) live: Option<Live>,
    pub(super) pending: HashMap<Key, Pending>,
    /// Declarations the last describe did not fit: tool → (served
    /// fingerprint, reason).
    pub(super) unfit: BTreeMap<String, (Option<String>, String)>,
    pub(super) next_id: u64,
    pub(super) shutdown: CancellationToken,
}

impl Actor {
    pub(super) async fn run(mut self) {
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

    pub(super) async fn command(&mut self, cmd: Command) {
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

    pub(super) async fn call(&mut self, req: CallRequest, tx: oneshot::Sender<Outcome>) {
        let key = (req.run.to_string(), req.call.to_string());
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
                    run: key.0.clone(),
                    call: key.1.clone(),
                    tool: req.tool,
                    args: req.args,
                    generic: None,
                }),
                None,
            ),
            Dialect::Mcp => {
                // "A call is a tools/call request whose id is the call's
                // history id" (unless another run's equal id is open).
                let id = if self.mcp_ids.contains_key(req.call.as_str()) {
                    format!("{}@{}", req.call, req.run)
                } else {
                    key.1.clone()
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
            w.send(Write {
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

    pub(super) fn write_cancel(&self, key: &Key) {
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
            w.send(Write {
                line,
                written: None,
            });
        }
    }

    pub(super) fn event(&mut self, ev: Event) {
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
    pub(super) fn settle(&mut self, key: Key, outcome: Outcome) {
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
}

pub(super) async fn next_live_event(live: &mut Option<Live>) -> LiveEvent {
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
