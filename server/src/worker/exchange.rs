//! The worker's reading of its exchanges with the server
//! (`crate::client`'s `/v1/workers` methods): what registration granted
//! ([`Session`]) and what a failure means for the worker ([`Failure`]):
//! try again, register again, or stop.

use crate::client::{self, Client, causes};
use crate::http::workers::{
    PollAnswer, PollRequest, RegisterRequest, RepliesAnswer, RepliesRequest, ReplyItem, ServedView,
};
use flow_store::ServedTool;
use std::time::Duration;

/// What the server told the worker at registration.
#[derive(Debug, Clone)]
pub struct Session {
    pub worker: String,
    /// How long the server holds a poll with nothing to hand out.
    pub poll: Duration,
    /// The largest request body the server takes (bytes).
    pub reply_limit: usize,
}

/// Why a request did not do what it asked.
#[derive(Debug)]
pub enum Failure {
    /// The server could not be reached, or answered 408, 429 or 5xx: try
    /// again later.
    Transient(String),
    /// The server does not know this worker (judged lost): register again.
    Gone,
    /// The server refused (a bad token, a bad request): trying again will
    /// not help.
    Refused(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Transient(s) | Failure::Refused(s) => f.write_str(s),
            Failure::Gone => f.write_str("the server no longer knows this worker"),
        }
    }
}

impl From<client::Error> for Failure {
    fn from(e: client::Error) -> Failure {
        use client::Error as E;
        match &e {
            E::Setup(_) => Failure::Refused(e.to_string()),
            E::Unreachable { base, source } => {
                Failure::Transient(format!("cannot reach {base}: {}", causes(source)))
            }
            E::Broken { .. } | E::Unreadable { .. } => Failure::Transient(e.to_string()),
            E::Refused { status, .. } => match status.as_u16() {
                404 => Failure::Gone,
                408 | 429 | 500..=599 => Failure::Transient(e.to_string()),
                _ => Failure::Refused(e.to_string()),
            },
        }
    }
}

/// `POST /v1/workers` with what this worker serves.
pub async fn register(
    client: &Client,
    name: &str,
    tools: &[ServedTool],
) -> Result<Session, Failure> {
    let request = RegisterRequest {
        name: name.to_string(),
        tools: tools
            .iter()
            .map(|t| ServedView {
                tool: t.tool.clone(),
                fingerprint: t.fingerprint.clone(),
                resend: t.resend,
            })
            .collect(),
    };
    let a = client
        .register_worker(&request)
        .await
        .map_err(|e| match Failure::from(e) {
            // No worker routes at all: not a flowd that takes workers.
            Failure::Gone => Failure::Refused(format!(
                "{}: no /v1/workers here; is it a flowd server?",
                client.base()
            )),
            f => f,
        })?;
    Ok(Session {
        worker: a.worker,
        poll: Duration::from_millis(a.poll_ms),
        reply_limit: a.reply_limit,
    })
}

/// Polls for at most `max` calls (0: none, only to be heard from).
pub async fn poll(client: &Client, s: &Session, max: u32) -> Result<PollAnswer, Failure> {
    let request = PollRequest { max, wait_ms: None };
    Ok(client.poll_worker(&s.worker, &request, s.poll).await?)
}

/// Sends replies under `worker`: which were admitted.
pub async fn reply(
    client: &Client,
    worker: &str,
    replies: Vec<ReplyItem>,
) -> Result<RepliesAnswer, Failure> {
    let request = RepliesRequest { replies };
    Ok(client.reply_worker(worker, &request).await?)
}
