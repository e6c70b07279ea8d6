//! The worker's side of `/v1/workers` (docs/http.md "Workers"): plain HTTP
//! out to one server, `Authorization: Bearer` with the worker's token,
//! reading and writing the server's own request and answer types
//! (`http/workers.rs`).
//! Proxies come from the environment (`HTTP_PROXY`, `NO_PROXY`), as for
//! any HTTP client.

use crate::error::{Error, Result};
use crate::http::workers::{
    PollAnswer, PollRequest, RegisterAnswer, RegisterRequest, RepliesAnswer, RepliesRequest,
    ReplyItem, ServedView,
};
use flow_store::ServedTool;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
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
    /// The server could not be reached, or answered 5xx: try again later.
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

#[derive(Clone)]
pub struct Client {
    base: String,
    token: Option<String>,
    http: reqwest::Client,
}

impl Client {
    pub fn new(base: &str, token: Option<String>) -> Result<Client> {
        let base = base.trim_end_matches('/').to_string();
        if !base.starts_with("http://") {
            return Err(Error::Refused(format!(
                "--server {base}: a worker speaks plain http:// (put TLS in a proxy in front of the servers)"
            )));
        }
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .tcp_nodelay(true)
            .build()
            .map_err(|e| Error::Refused(format!("--server: {e}")))?;
        Ok(Client { base, token, http })
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    /// Sends `body` as JSON and reads the answer as `A`.
    async fn send<A: DeserializeOwned>(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&impl Serialize>,
        timeout: Duration,
    ) -> std::result::Result<A, Failure> {
        let text = self.send_text(method, path, body, timeout).await?;
        serde_json::from_str(&text).map_err(|e| {
            Failure::Transient(format!("{}: an answer that does not read: {e}", self.base))
        })
    }

    /// Sends `body` as JSON: the answer's text on success.
    async fn send_text(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&impl Serialize>,
        timeout: Duration,
    ) -> std::result::Result<String, Failure> {
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.base))
            .timeout(timeout);
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            let text = serde_json::to_string(b)
                .map_err(|e| Failure::Refused(format!("a request that does not encode: {e}")))?;
            req = req.header("content-type", "application/json").body(text);
        }
        let r = req.send().await.map_err(|e| {
            Failure::Transient(format!("cannot reach {}: {}", self.base, causes(&e)))
        })?;
        let status = r.status();
        let text = r
            .text()
            .await
            .map_err(|e| Failure::Transient(format!("{}: {}", self.base, causes(&e))))?;
        if status.is_success() {
            return Ok(text);
        }
        #[derive(Deserialize)]
        struct Problem {
            detail: String,
        }
        let detail = serde_json::from_str::<Problem>(&text)
            .map(|p| p.detail)
            .unwrap_or_else(|_| format!("HTTP {status}"));
        Err(match status.as_u16() {
            404 => Failure::Gone,
            408 | 429 | 500..=599 => {
                Failure::Transient(format!("{}: {status}: {detail}", self.base))
            }
            _ => Failure::Refused(format!("{}: {status}: {detail}", self.base)),
        })
    }

    /// `POST /v1/workers`.
    pub async fn register(
        &self,
        name: &str,
        tools: &[ServedTool],
    ) -> std::result::Result<Session, Failure> {
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
        let a: RegisterAnswer = self
            .send(
                reqwest::Method::POST,
                "/v1/workers",
                Some(&request),
                Duration::from_secs(30),
            )
            .await
            .map_err(|f| match f {
                // No worker routes at all: not a flowd that takes workers.
                Failure::Gone => Failure::Refused(format!(
                    "{}: no /v1/workers here; is it a flowd server?",
                    self.base
                )),
                f => f,
            })?;
        Ok(Session {
            worker: a.worker,
            poll: Duration::from_millis(a.poll_ms),
            reply_limit: a.reply_limit,
        })
    }

    /// `POST /v1/workers/{worker}/poll`: calls to run and calls to stop.
    pub async fn poll(&self, s: &Session, max: u32) -> std::result::Result<PollAnswer, Failure> {
        let request = PollRequest { max, wait_ms: None };
        self.send(
            reqwest::Method::POST,
            &format!("/v1/workers/{}/poll", s.worker),
            Some(&request),
            s.poll + Duration::from_secs(15),
        )
        .await
    }

    /// `POST /v1/workers/{worker}/replies`: which were admitted.
    pub async fn reply(
        &self,
        worker: &str,
        replies: Vec<ReplyItem>,
    ) -> std::result::Result<RepliesAnswer, Failure> {
        self.send(
            reqwest::Method::POST,
            &format!("/v1/workers/{worker}/replies"),
            Some(&RepliesRequest { replies }),
            Duration::from_secs(60),
        )
        .await
    }

    /// `DELETE /v1/workers/{worker}`.
    pub async fn leave(&self, worker: &str) -> std::result::Result<(), Failure> {
        self.send_text(
            reqwest::Method::DELETE,
            &format!("/v1/workers/{worker}"),
            None::<&()>,
            Duration::from_secs(10),
        )
        .await
        .map(|_| ())
    }
}

/// An error and its causes (reqwest's own message leaves out whether it
/// was a refusal, a reset or a timeout).
fn causes(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cur = c.source();
    }
    out
}
