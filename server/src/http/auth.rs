//! Bearer tokens (ECOSYSTEM §13): `--tokens FILE`, one `token scope[,scope]`
//! per line, scopes `read`, `run`, `admin` (each implies the ones before
//! it) and `worker`, which stands alone: a `flow worker`'s token serves
//! Tool calls (`/v1/workers`) and can do nothing else, and no other token
//! but `admin` may act as a worker. A presented token is hashed with SHA-256 and compared with every
//! configured hash in constant time (`subtle`), so neither the length nor
//! the prefix of a token leaks through timing, and the loop never exits
//! early.

use super::AppState;
use super::error::ApiError;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    Read,
    Run,
    Admin,
    /// A remote worker's: the worker routes, nothing else.
    Worker,
}

impl Scope {
    pub fn parse(s: &str) -> Option<Scope> {
        match s {
            "read" => Some(Scope::Read),
            "run" => Some(Scope::Run),
            "admin" => Some(Scope::Admin),
            "worker" => Some(Scope::Worker),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Run => "run",
            Scope::Admin => "admin",
            Scope::Worker => "worker",
        }
    }

    /// Whether a token of this scope may do what `need` asks for: `read` <
    /// `run` < `admin`, each allowing the ones before it; `worker` allows
    /// only itself, and only `worker` and `admin` allow `worker`.
    pub fn allows(self, need: Scope) -> bool {
        match (self, need) {
            (Scope::Worker, need) => need == Scope::Worker,
            (Scope::Admin, _) => true,
            (_, Scope::Worker) => false,
            (have, need) => have >= need,
        }
    }
}

/// The configured tokens, kept only as hashes.
#[derive(Clone)]
pub struct Tokens {
    entries: Vec<([u8; 32], Scope)>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tokens({} configured)", self.entries.len())
    }
}

fn digest(token: &[u8]) -> [u8; 32] {
    Sha256::digest(token).into()
}

impl Tokens {
    /// Parses the tokens file text. Blank lines and `#` comments are
    /// skipped; a line's highest scope is what the token may do. Errors
    /// name the line, never the token.
    pub fn parse(text: &str) -> Result<Tokens, String> {
        let mut entries = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut words = line.split_whitespace();
            let (Some(token), Some(scopes), None) = (words.next(), words.next(), words.next())
            else {
                return Err(format!("line {}: expected `token scope[,scope]`", i + 1));
            };
            if token.len() < 16 {
                return Err(format!(
                    "line {}: the token is shorter than 16 characters",
                    i + 1
                ));
            }
            let mut best = None;
            let mut count = 0;
            for s in scopes.split(',') {
                let sc = Scope::parse(s).ok_or_else(|| {
                    format!(
                        "line {}: unknown scope {s:?} (read, run, admin, worker)",
                        i + 1
                    )
                })?;
                best = best.max(Some(sc));
                count += 1;
            }
            if best == Some(Scope::Worker) && count > 1 {
                return Err(format!(
                    "line {}: the worker scope stands alone (a worker's token can do nothing else)",
                    i + 1
                ));
            }
            if let Some(sc) = best {
                entries.push((digest(token.as_bytes()), sc));
            }
        }
        if entries.is_empty() {
            return Err("the tokens file names no token".into());
        }
        Ok(Tokens { entries })
    }

    /// The scope of a presented token, compared with every entry in
    /// constant time.
    pub fn scope_of(&self, presented: &str) -> Option<Scope> {
        let d = digest(presented.as_bytes());
        let mut found = None;
        for (h, s) in &self.entries {
            if bool::from(h.ct_eq(&d)) {
                found = found.max(Some(*s));
            }
        }
        found
    }
}

/// The scope a request needs: none for health, the API document, the
/// docs page and the dashboard's page and files; `read` for reads (and the feeds and metrics); `run` for
/// anything that records or drives; `admin` for imports; `worker` for what
/// a remote worker does (register, poll, reply, leave; listing the workers
/// is a read).
pub fn needed(method: &Method, path: &str) -> Option<Scope> {
    // The dashboard's page and files hold no data: it asks for a token
    // itself and sends it with every API request.
    if path == "/healthz"
        || path == "/openapi.json"
        || path == "/docs"
        || path.starts_with("/docs/")
        || path == "/"
        || path.starts_with("/assets/")
    {
        return None;
    }
    if path == "/v1/archives" {
        return Some(Scope::Admin);
    }
    if (path == "/v1/workers" || path.starts_with("/v1/workers/"))
        && method != Method::GET
        && method != Method::HEAD
    {
        return Some(Scope::Worker);
    }
    // MCP: any token may speak the protocol; each tool checks the scope it
    // needs (read for check, history, runs, replay; run for run, resume).
    if path == "/mcp" || path.starts_with("/mcp/") {
        return Some(Scope::Read);
    }
    if method == Method::GET || method == Method::HEAD {
        return Some(Scope::Read);
    }
    // POST /v1/check records nothing, but it is work on the server's
    // behalf: `run`, like starting.
    Some(Scope::Run)
}

/// The auth middleware: 401 without a valid token, 403 when its scope is
/// too small; a passing request carries the token's [`Scope`]. With no
/// tokens configured every request passes, carrying none.
pub async fn require(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    let Some(tokens) = &state.options().tokens else {
        return next.run(req).await;
    };
    let Some(need) = needed(req.method(), req.uri().path()) else {
        return next.run(req).await;
    };
    let presented = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim);
    let Some(presented) = presented else {
        return unauthorized("send `Authorization: Bearer <token>`");
    };
    match tokens.scope_of(presented) {
        None => unauthorized("the bearer token is not known to this server"),
        Some(have) if !have.allows(need) => ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!(
                "this token has scope {}; {} {} needs scope {}",
                have.as_str(),
                req.method(),
                req.uri().path(),
                need.as_str()
            ),
        )
        .into_response(),
        Some(have) => {
            // What the token may do, for handlers that check per operation
            // (the MCP tools).
            req.extensions_mut().insert(have);
            next.run(req).await
        }
    }
}

fn unauthorized(detail: &str) -> Response {
    let mut r = ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", detail).into_response();
    r.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        axum::http::HeaderValue::from_static("Bearer"),
    );
    r
}

/// Whether an address is loopback (the default, safe without tokens).
pub fn is_loopback(addr: &std::net::SocketAddr) -> bool {
    addr.ip().is_loopback()
}
