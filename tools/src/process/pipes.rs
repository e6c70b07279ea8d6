//! The child's pipes: the reader task (lines to events, in either
//! dialect), and the writes: a short line with nothing queued before it
//! is written by the actor itself ([`Writes::send`]); the rest go to the
//! writer task (batches, flushes, marks calls written).

use super::Key;
use super::actor::Live;
use crate::lines::{Line, Skim, read_line};
use crate::mcp;
use flow_abi::protocol::{self, Message};
use serde_json::Value as Json;
use std::io::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use tokio::io::{AsyncWriteExt, BufReader, BufWriter};
use tokio::process::{ChildStdin, ChildStdout};
use tokio::sync::mpsc;

/// Which protocol the child speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Dialect {
    /// The Tool process protocol.
    Flow,
    /// MCP, through the adapter ([`crate::mcp`]).
    Mcp,
}

/// A line for the writer, and the flag to set once it is flushed.
pub(super) struct Write {
    pub(super) line: String,
    pub(super) written: Option<Arc<AtomicBool>>,
}

/// The way to the child's stdin, held by the actor; dropping it closes
/// stdin once the writer task has written what it holds.
pub(super) struct Writes {
    tx: mpsc::UnboundedSender<Write>,
    /// Stdin again (the same open pipe, non-blocking as tokio set it up),
    /// for writes made at once.
    direct: std::fs::File,
    /// Lines handed to the writer task and not yet flushed by it.
    queued: Arc<AtomicUsize>,
}

/// The longest line written at once: a non-blocking pipe write of at most
/// `PIPE_BUF` bytes is atomic, all of it or nothing (EAGAIN), so a full
/// pipe never leaves part of a line behind.
#[cfg(target_os = "linux")]
const DIRECT_MAX: usize = 4096;
/// POSIX's least `PIPE_BUF`.
#[cfg(not(target_os = "linux"))]
const DIRECT_MAX: usize = 512;

impl Writes {
    /// The writes to `stdin` and the writer task that serves them.
    pub(super) fn open(stdin: ChildStdin) -> std::io::Result<(Writes, impl Future<Output = ()>)> {
        use std::os::fd::AsFd;
        let direct = std::fs::File::from(stdin.as_fd().try_clone_to_owned()?);
        let (tx, rx) = mpsc::unbounded_channel();
        let queued = Arc::new(AtomicUsize::new(0));
        let task = writer(stdin, rx, queued.clone());
        Ok((Writes { tx, direct, queued }, task))
    }

    /// Writes `w` now if it is short and nothing is queued before it (so a
    /// call's line costs the actor one write, no hand-off to the writer
    /// task and back: issue 16); otherwise queues it for the writer task.
    /// The line reaches the pipe in the order sent either way.
    pub(super) fn send(&self, w: Write) {
        if w.line.len() <= DIRECT_MAX
            && self.queued.load(Ordering::Acquire) == 0
            && (&self.direct).write(w.line.as_bytes()).ok() == Some(w.line.len())
        {
            if let Some(f) = w.written {
                f.store(true, Ordering::Release);
            }
            return;
        }
        // The pipe is full (or the line long, or lines are queued): the
        // writer task waits for room.
        self.queued.fetch_add(1, Ordering::AcqRel);
        if let Err(mpsc::error::SendError(_)) = self.tx.send(w) {
            self.queued.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// What the reader saw.
pub(super) enum Event {
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

/// Reads the child's stdout into events until it closes.
pub(super) async fn reader(stdout: ChildStdout, events: mpsc::Sender<Event>, dialect: Dialect) {
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
                // PRO-13: the strict reader refused the text (a number past
                // its limits, a duplicate key...); the envelope still says
                // which call it answers.
                Err(protocol::Error::Json(e)) => skimmed(
                    &Skim::of(t.as_bytes()),
                    dialect,
                    format!("the reply does not decode: {e}"),
                )
                .unwrap_or_else(|| Event::Stray(format!("not a JSON message: {e}"))),
                Err(e) if is_response(&t) => Event::BadResponse(e.to_string()),
                Err(e) => Event::Stray(e.to_string()),
            },
            Ok(Some(Line::NotUtf8)) => Event::Stray("a line that is not UTF-8".into()),
            Ok(Some(Line::Oversized { len, skim })) => {
                let reason = format!(
                    "reply line of {len} bytes is larger than the limit of {} bytes",
                    protocol::MAX_LINE_BYTES
                );
                skimmed(&skim, dialect, reason).unwrap_or_else(|| {
                    Event::Stray(format!("a line of {len} bytes that names no call"))
                })
            }
        };
        if events.send(ev).await.is_err() {
            return;
        }
    }
    let _ = events.send(Event::Closed).await;
}

/// The event for a line that cannot be read as a message, from its skimmed
/// envelope: BadReply for the call a Tool process reply names, or for the
/// request an MCP response answers; `None` when it names neither.
fn skimmed(skim: &Skim, dialect: Dialect, reason: String) -> Option<Event> {
    let text = |m: &str| {
        skim.member(m)
            .and_then(|raw| flow_abi::json::parse(raw).ok())
            .and_then(|v| v.as_str().map(str::to_string))
    };
    match dialect {
        Dialect::Flow => match (
            text("method").as_deref(),
            text("params.run"),
            text("params.call"),
        ) {
            (Some("reply"), Some(run), Some(call)) => Some(Event::BadReply {
                key: (run, call),
                reason,
            }),
            _ => None,
        },
        Dialect::Mcp => {
            let id = skim
                .member("id")
                .and_then(|raw| flow_abi::json::parse(raw).ok())?;
            skim.member("method")
                .is_none()
                .then(|| Event::BadResponseTo {
                    id: id_text(&id),
                    reason,
                })
        }
    }
}

/// One request-response exchange of the MCP handshake; server requests in
/// between are answered.
pub(super) async fn mcp_exchange(
    live: &mut Live,
    label: &str,
    line: String,
    id: &str,
) -> Result<Json, String> {
    if let Some(w) = &live.writes {
        w.send(Write {
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
                    w.send(Write {
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
        Err(e) => {
            return skimmed(
                &Skim::of(line.as_bytes()),
                Dialect::Mcp,
                format!("the response does not decode: {e}"),
            )
            .unwrap_or_else(|| Event::Stray(format!("not JSON: {e}")));
        }
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
/// the batch's calls as written and counts them off `queued`.
async fn writer(
    stdin: ChildStdin,
    mut rx: mpsc::UnboundedReceiver<Write>,
    queued: Arc<AtomicUsize>,
) {
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
        let flushed = batch.len();
        for x in batch.drain(..) {
            if let Some(f) = x.written {
                f.store(true, Ordering::Release);
            }
        }
        queued.fetch_sub(flushed, Ordering::AcqRel);
    }
    // Channel closed: close stdin so the child sees end of input.
    let _ = w.shutdown().await;
}
