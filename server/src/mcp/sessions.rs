//! Bounds on `/mcp` sessions (issue 36 item 6: each `initialize` kept a
//! session of ~100 kB for 5 minutes, with no cap; 26,000 took a server to
//! 2.7 GB in 26 s, with a read token or none).
//!
//! A middleware in front of rmcp's streamable HTTP service counts
//! sessions by the token that opened them (one bucket on a tokenless
//! server) and refuses an `initialize` past [`SessionLimits::per_token`]
//! (429) or [`SessionLimits::global`] (503), both problem+json with
//! `Retry-After`, before rmcp creates anything. A session is *in use*
//! while a request of it is in flight — its answer, an SSE stream, is
//! still being sent (a `run` answers when its run ends, however long that
//! takes) — and *idle* otherwise; a reaper closes sessions idle for
//! [`SessionLimits::idle`] (60 s by default). rmcp's own 5-minute
//! keep-alive counts a long `run` as inactivity, so it is off: the reaper
//! is the one expiry. rmcp's session map is the truth about which sessions
//! live (a client's `DELETE`, the shutdown); this registry follows it.

use crate::http::error::ApiError;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use rmcp::transport::streamable_http_server::session::SessionId;
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const SESSION_HEADER: &str = "mcp-session-id";

/// How many sessions may be open, and how long one may sit unused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionLimits {
    /// Sessions open at once on the server (`--mcp-sessions`).
    pub global: usize,
    /// Sessions one token may hold open (`--mcp-sessions-per-token`); a
    /// tokenless server is one token.
    pub per_token: usize,
    /// A session with no request in flight for this long is closed
    /// (`--mcp-idle-seconds`).
    pub idle: Duration,
}

impl Default for SessionLimits {
    /// At ~100 kB a session, 256 sessions are ~26 MB.
    fn default() -> SessionLimits {
        SessionLimits {
            global: 256,
            per_token: 32,
            idle: Duration::from_secs(60),
        }
    }
}

/// Who opened a session: the SHA-256 of its bearer token (the server
/// keeps no other form of it), or empty on a tokenless server.
type Holder = Vec<u8>;

#[derive(Debug)]
struct Entry {
    holder: Holder,
    /// Requests of the session whose answers are still being sent.
    in_flight: usize,
    /// When the last one ended (or the session opened).
    since: Instant,
}

#[derive(Debug, Default)]
struct Registry {
    open: HashMap<SessionId, Entry>,
    /// `initialize` requests let through and not yet answered, by holder:
    /// counted with the open sessions, so concurrent ones cannot overshoot.
    opening: HashMap<Holder, usize>,
}

impl Registry {
    fn holding(&self, h: &Holder) -> usize {
        self.open.values().filter(|e| e.holder == *h).count()
            + self.opening.get(h).copied().unwrap_or(0)
    }

    fn total(&self) -> usize {
        self.open.len() + self.opening.values().sum::<usize>()
    }

    /// Sessions idle for `idle` at `now`.
    fn idle(&self, idle: Duration, now: Instant) -> Vec<SessionId> {
        self.open
            .iter()
            .filter(|(_, e)| e.in_flight == 0 && now.duration_since(e.since) >= idle)
            .map(|(id, _)| id.clone())
            .collect()
    }
}

/// The sessions' registry and rmcp's session manager: a cheap handle.
#[derive(Clone)]
pub struct Sessions {
    limits: SessionLimits,
    registry: Arc<Mutex<Registry>>,
    manager: Arc<LocalSessionManager>,
}

impl Sessions {
    pub fn new(limits: SessionLimits, manager: Arc<LocalSessionManager>) -> Sessions {
        Sessions {
            limits,
            registry: Arc::default(),
            manager,
        }
    }

    /// Forgets sessions rmcp no longer has (closed by the client, by the
    /// reaper, or ended).
    async fn follow(&self) {
        let live = self.manager.sessions.read().await;
        if let Ok(mut r) = self.registry.lock() {
            r.open.retain(|id, _| live.contains_key(id));
        }
    }

    /// Takes a place for a new session of `holder`, or the refusal.
    fn reserve(&self, holder: &Holder) -> Result<Opening, ApiError> {
        let mut r = self
            .registry
            .lock()
            .map_err(|_| ApiError::internal("the MCP session registry is poisoned"))?;
        if r.holding(holder) >= self.limits.per_token {
            let mut e = ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "too-many-sessions",
                format!(
                    "this token holds {} MCP sessions already, the most it may (--mcp-sessions-per-token); close one (DELETE /mcp with its Mcp-Session-Id) or wait for an idle one to expire ({} s)",
                    self.limits.per_token,
                    self.limits.idle.as_secs()
                ),
            );
            e.retry_after = Some(self.retry_after());
            return Err(e);
        }
        if r.total() >= self.limits.global {
            let mut e = ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "busy",
                format!(
                    "the server holds {} MCP sessions, the most it may (--mcp-sessions); try again once idle ones expire",
                    self.limits.global
                ),
            );
            e.retry_after = Some(self.retry_after());
            return Err(e);
        }
        *r.opening.entry(holder.clone()).or_default() += 1;
        Ok(Opening {
            sessions: self.clone(),
            holder: holder.clone(),
        })
    }

    /// A place is freed within an idle period (the reaper runs at a tenth
    /// of it).
    fn retry_after(&self) -> u32 {
        u32::try_from(self.limits.idle.as_secs().max(1)).unwrap_or(u32::MAX)
    }

    /// Marks a request of session `id` in flight; `None` for a session
    /// the registry does not know (rmcp answers for it).
    fn begin(&self, id: &SessionId) -> Option<InFlight> {
        let mut r = self.registry.lock().ok()?;
        let e = r.open.get_mut(id)?;
        e.in_flight += 1;
        Some(InFlight {
            sessions: self.clone(),
            id: id.clone(),
        })
    }

    /// Closes the sessions idle now; their number.
    pub async fn reap(&self) -> usize {
        self.follow().await;
        let idle = match self.registry.lock() {
            Ok(r) => r.idle(self.limits.idle, Instant::now()),
            Err(_) => return 0,
        };
        for id in &idle {
            if let Err(e) = self.manager.close_session(id).await {
                tracing::warn!(error = %e, "could not close an idle MCP session");
            }
        }
        if let Ok(mut r) = self.registry.lock() {
            for id in &idle {
                r.open.remove(id);
            }
        }
        idle.len()
    }

    /// Reaps idle sessions every tenth of the idle time until `stop`.
    pub fn serve_reaper(&self, stop: CancellationToken) {
        let this = self.clone();
        let every = (self.limits.idle / 10).max(Duration::from_millis(100));
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tick.tick() => {
                        let n = this.reap().await;
                        if n > 0 {
                            tracing::debug!(sessions = n, "closed idle MCP sessions");
                        }
                    }
                }
            }
        });
    }
}

/// A place taken for a session being opened; given back on drop (the
/// session, if one opened, is then counted as open).
struct Opening {
    sessions: Sessions,
    holder: Holder,
}

impl Opening {
    /// The session opened: counted from now on, with the request that
    /// opened it in flight.
    fn opened(self, id: SessionId) -> Option<InFlight> {
        let mut r = self.sessions.registry.lock().ok()?;
        r.open.insert(
            id.clone(),
            Entry {
                holder: self.holder.clone(),
                in_flight: 1,
                since: Instant::now(),
            },
        );
        drop(r);
        Some(InFlight {
            sessions: self.sessions.clone(),
            id,
        })
    }
}

impl Drop for Opening {
    fn drop(&mut self) {
        if let Ok(mut r) = self.sessions.registry.lock()
            && let Some(n) = r.opening.get_mut(&self.holder)
        {
            *n -= 1;
            if *n == 0 {
                r.opening.remove(&self.holder);
            }
        }
    }
}

/// A request of a session in flight until its answer is sent (or its
/// client goes away): dropped with the answer's body.
struct InFlight {
    sessions: Sessions,
    id: SessionId,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Ok(mut r) = self.sessions.registry.lock()
            && let Some(e) = r.open.get_mut(&self.id)
        {
            e.in_flight = e.in_flight.saturating_sub(1);
            e.since = Instant::now();
        }
    }
}

/// The bearer token as the server's auth reads it (either case of the
/// scheme, trimmed), so one token is one holder however it is spelled.
fn holder(req: &Request) -> Holder {
    req.headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            let token = v
                .strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
                .unwrap_or(v)
                .trim();
            Sha256::digest(token.as_bytes()).to_vec()
        })
        .unwrap_or_default()
}

fn session_id(h: &axum::http::HeaderMap) -> Option<SessionId> {
    h.get(SESSION_HEADER)?.to_str().ok().map(SessionId::from)
}

/// The answer with `guard` held until its body is sent or dropped.
fn holding(r: Response, guard: InFlight) -> Response {
    let (parts, body) = r.into_parts();
    let stream = body.into_data_stream().map(move |chunk| {
        let _held = &guard;
        chunk
    });
    Response::from_parts(parts, Body::from_stream(stream))
}

/// The middleware (module documentation).
pub async fn limit(State(s): State<Sessions>, req: Request, next: Next) -> Response {
    match session_id(req.headers()) {
        Some(id) => match s.begin(&id) {
            Some(guard) => holding(next.run(req).await, guard),
            None => next.run(req).await,
        },
        // Without a session id only an `initialize` is served (rmcp
        // refuses anything else): a new session.
        None if req.method() == Method::POST => {
            s.follow().await;
            let opening = match s.reserve(&holder(&req)) {
                Ok(o) => o,
                Err(e) => return e.into_response(),
            };
            let r = next.run(req).await;
            let opened = r
                .status()
                .is_success()
                .then(|| session_id(r.headers()))
                .flatten();
            match opened.and_then(|id| opening.opened(id)) {
                Some(guard) => holding(r, guard),
                None => r,
            }
        }
        None => next.run(req).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(holder: &[u8], in_flight: usize, since: Instant) -> Entry {
        Entry {
            holder: holder.to_vec(),
            in_flight,
            since,
        }
    }

    #[test]
    fn sessions_are_counted_by_holder_and_idle_only_with_nothing_in_flight() {
        let t0 = Instant::now();
        let mut r = Registry::default();
        r.open.insert("a".into(), entry(b"x", 0, t0));
        r.open.insert("b".into(), entry(b"x", 1, t0));
        r.open.insert("c".into(), entry(b"y", 0, t0));
        r.opening.insert(b"x".to_vec(), 2);
        assert_eq!(r.holding(&b"x".to_vec()), 4);
        assert_eq!(r.holding(&b"y".to_vec()), 1);
        assert_eq!(r.holding(&b"z".to_vec()), 0);
        assert_eq!(r.total(), 5);
        let idle = Duration::from_secs(60);
        assert!(r.idle(idle, t0 + Duration::from_secs(59)).is_empty());
        let mut ids: Vec<String> = r
            .idle(idle, t0 + idle)
            .iter()
            .map(|s| s.to_string())
            .collect();
        ids.sort();
        // "b" has a request in flight: a long `run` is not idleness.
        assert_eq!(ids, ["a", "c"]);
    }
}
