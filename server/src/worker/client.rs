//! The worker's side of `/v1/workers` (docs/http.md "Workers"): plain HTTP
//! out to one server, `Authorization: Bearer` with the worker's token.
//! Proxies come from the environment (`HTTP_PROXY`, `NO_PROXY`), as for
//! any HTTP client.

use crate::error::{Error, Result};
use flow_store::ServedTool;
use serde_json::{Value as Json, json};
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

    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Json>,
        timeout: Duration,
    ) -> std::result::Result<Json, Failure> {
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.base))
            .timeout(timeout);
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req
                .header("content-type", "application/json")
                .body(b.to_string());
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
            if text.is_empty() {
                return Ok(Json::Null);
            }
            return serde_json::from_str(&text).map_err(|e| {
                Failure::Transient(format!("{}: an answer that is not JSON: {e}", self.base))
            });
        }
        let detail = serde_json::from_str::<Json>(&text)
            .ok()
            .and_then(|v| v.get("detail").and_then(Json::as_str).map(str::to_string))
            .unwrap_or_else(|| format!("HTTP {status}"));
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
        let tools: Vec<Json> = tools
            .iter()
            .map(|t| json!({"tool": t.tool, "fingerprint": t.fingerprint, "resend": t.resend}))
            .collect();
        let v = self
            .send(
                reqwest::Method::POST,
                "/v1/workers",
                Some(json!({"name": name, "tools": tools})),
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
        let worker = v
            .get("worker")
            .and_then(Json::as_str)
            .ok_or_else(|| {
                Failure::Transient(format!("{}: a registration without a worker id", self.base))
            })?
            .to_string();
        let ms = |k: &str, d: u64| v.get(k).and_then(Json::as_u64).unwrap_or(d);
        Ok(Session {
            worker,
            poll: Duration::from_millis(ms("pollMs", 2_500)),
            reply_limit: ms("replyLimit", 4 << 20) as usize,
        })
    }

    /// `POST /v1/workers/{worker}/poll`: `{calls, cancels}`.
    pub async fn poll(&self, s: &Session, max: u32) -> std::result::Result<Json, Failure> {
        self.send(
            reqwest::Method::POST,
            &format!("/v1/workers/{}/poll", s.worker),
            Some(json!({"max": max})),
            s.poll + Duration::from_secs(15),
        )
        .await
    }

    /// `POST /v1/workers/{worker}/replies`: which were admitted.
    pub async fn reply(
        &self,
        worker: &str,
        replies: Vec<Json>,
    ) -> std::result::Result<Json, Failure> {
        self.send(
            reqwest::Method::POST,
            &format!("/v1/workers/{worker}/replies"),
            Some(json!({"replies": replies})),
            Duration::from_secs(60),
        )
        .await
    }

    /// `DELETE /v1/workers/{worker}`.
    pub async fn leave(&self, worker: &str) -> std::result::Result<(), Failure> {
        self.send(
            reqwest::Method::DELETE,
            &format!("/v1/workers/{worker}"),
            None,
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
