//! A typed HTTP client of one flowd server (issue 37 §5): what `flow
//! --server URL …`, `flow worker` and the benches say to a server, and
//! nothing else. Each method sends the server's own request type
//! (each handler's own, e.g. `http::start::StartRequest`, `http::workers`, …) and reads the answer as the
//! server's own response type (`http::answers`, …): both sides share one
//! definition of the wire, and `openapi/openapi.json` describes both.
//!
//! This module owns the transport: the base URL, the bearer token,
//! deadlines, and reading a failure as the server's problem document
//! ([`Error::Refused`]). What a failure means — an exit code, a retry —
//! is the caller's: the CLI maps [`Error`] to `crate::error::Error`, the
//! worker to its own `Failure`. It never retries on its own; a caller
//! that tries again waits with [`backoff`] (backon's jittered
//! exponential backoff). It must not depend on the CLI or the worker.

mod archives;
pub mod backoff;
mod error;
#[cfg(test)]
pub(crate) mod fake;
mod recoveries;
mod runs;
#[cfg(test)]
mod tests;
mod workers;

pub use error::{Error, Result};
pub use runs::{Feed, RunEvent};

use crate::http::openapi::Problem;
use reqwest::{Method, RequestBuilder, Response};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::marker::PhantomData;
use std::time::Duration;

/// How a [`Client`] talks to its server.
#[derive(Debug, Clone)]
pub struct Options {
    /// How long a request may take, unless its method says otherwise (a
    /// long poll, a stream that lasts as long as the work it reports).
    pub timeout: Duration,
    /// Take proxies from the environment (`HTTP_PROXY`, `NO_PROXY`), as a
    /// worker on another host does; otherwise the client talks to the URL
    /// it was given, straight.
    pub env_proxy: bool,
}

/// How long connecting may take, within any request's deadline.
const CONNECT: Duration = Duration::from_secs(10);
/// A stream's deadline: it lasts as long as the work it reports (a gate,
/// a recovery, a run's feed), so in effect none.
const STREAM: Duration = Duration::from_secs(365 * 24 * 3600);

/// A server at one base URL, with an optional bearer token. Cheap to
/// clone (the connection pool is shared).
#[derive(Clone)]
pub struct Client {
    base: String,
    token: Option<String>,
    http: reqwest::Client,
    timeout: Duration,
}

impl Client {
    pub fn new(base: &str, token: Option<String>, options: Options) -> Result<Client> {
        let mut http = reqwest::Client::builder()
            .connect_timeout(CONNECT.min(options.timeout))
            .tcp_nodelay(true);
        if !options.env_proxy {
            http = http.no_proxy();
        }
        Ok(Client {
            base: base.trim_end_matches('/').to_string(),
            token,
            http: http.build().map_err(Error::Setup)?,
            timeout: options.timeout,
        })
    }

    /// The base URL, without a trailing `/`.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// A request to `path` (under the base URL), with the token and the
    /// default deadline.
    fn request(&self, method: Method, path: &str) -> RequestBuilder {
        let req = self
            .http
            .request(method, format!("{}{path}", self.base))
            .timeout(self.timeout);
        match &self.token {
            Some(t) => req.bearer_auth(t),
            None => req,
        }
    }

    /// Sends `req`: its response when the server says 2xx, else the
    /// refusal its problem document says.
    async fn send(&self, req: RequestBuilder) -> Result<Response> {
        let r = req.send().await.map_err(|source| Error::Unreachable {
            base: self.base.clone(),
            source,
        })?;
        let status = r.status();
        if status.is_success() {
            return Ok(r);
        }
        let body = r.bytes().await.map_err(|e| self.broken(&e))?;
        Err(Error::Refused {
            base: self.base.clone(),
            status,
            problem: serde_json::from_slice::<Problem>(&body).ok().map(Box::new),
        })
    }

    /// The answer to `req`, read as `A`.
    async fn read<A: DeserializeOwned>(&self, req: RequestBuilder) -> Result<A> {
        let body = self
            .send(req)
            .await?
            .bytes()
            .await
            .map_err(|e| self.broken(&e))?;
        serde_json::from_slice(&body)
            .map_err(|e| self.unreadable(format!("an answer that does not read: {e}")))
    }

    /// `method path` with `body` as JSON, the answer read as `A`.
    async fn call<A: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: &impl Serialize,
    ) -> Result<A> {
        self.read(self.request(method, path).json(body)).await
    }

    /// `GET path` (with `query`), the answer read as `A`.
    async fn get<A: DeserializeOwned>(&self, path: &str, query: &impl Serialize) -> Result<A> {
        self.read(self.request(Method::GET, path).query(query))
            .await
    }

    /// An NDJSON answer to `req`, read a line at a time, however long it
    /// takes.
    async fn lines<T: DeserializeOwned>(&self, req: RequestBuilder) -> Result<Lines<T>> {
        let req = req
            .header(reqwest::header::ACCEPT, "application/x-ndjson")
            .timeout(STREAM);
        Ok(Lines {
            client: self.clone(),
            response: self.send(req).await?,
            buf: Vec::new(),
            line: PhantomData,
        })
    }

    /// The answer broke off before it was read whole.
    fn broken(&self, e: &reqwest::Error) -> Error {
        Error::Broken {
            base: self.base.clone(),
            why: causes(e),
        }
    }

    fn unreadable(&self, why: String) -> Error {
        Error::Unreadable {
            base: self.base.clone(),
            why,
        }
    }
}

/// An NDJSON answer (`application/x-ndjson`: one JSON value a line), read
/// as its lines come.
pub struct Lines<T> {
    client: Client,
    response: Response,
    buf: Vec<u8>,
    line: PhantomData<fn() -> T>,
}

impl<T: DeserializeOwned> Lines<T> {
    /// The next whole line; `None` once the answer ends (a last line
    /// without its newline is not one).
    pub async fn next(&mut self) -> Result<Option<T>> {
        loop {
            if let Some(end) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=end).collect();
                return serde_json::from_slice(&line).map(Some).map_err(|e| {
                    self.client
                        .unreadable(format!("a line that does not read: {e}"))
                });
            }
            match self.response.chunk().await {
                Ok(Some(chunk)) => self.buf.extend_from_slice(&chunk),
                Ok(None) => return Ok(None),
                Err(e) => return Err(self.client.broken(&e)),
            }
        }
    }
}

/// One path segment, percent-encoded (all but the unreserved characters):
/// a run id or a recovery id as the user typed it stays one segment.
fn segment(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// An error and its causes (reqwest's own message leaves out whether it
/// was a refusal, a reset or a timeout).
pub fn causes(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cur = c.source();
    }
    out
}
