//! Bearer tokens (ECOSYSTEM §13): `--tokens FILE`, one `token scope[,scope]`
//! per line, scopes `read`, `run`, `admin` (each implies the ones before
//! it) and `worker`, which stands alone: a `flow worker`'s token serves
//! Tool calls (`/v1/workers`) and can do nothing else, and no other token
//! but `admin` may act as a worker. A worker line may name the
//! declarations its workers may serve (`token worker triage.json,std/llm`,
//! keyed as `--workers` keys them); a worker is bound to the token that
//! registered it ([`Caller::owner`]), so no other token may poll, reply or
//! leave as it. A line may end `ns=a,b` (issue 40 item 4): the token sees
//! and acts on the runs of those namespaces only; a line without `ns=` is
//! confined to `default` (so a tokens file written before namespaces
//! keeps what it could do: every run was in `default`), and `ns=*` (an
//! `admin` token's only) sees every namespace. A presented token is hashed with SHA-256 and compared with
//! every configured hash in constant time (`subtle`), so neither the length
//! nor the prefix of a token leaks through timing, and the loop never exits
//! early.

use super::AppState;
use super::error::ApiError;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use flow_store::{Namespace, Namespaces};
use sha2::{Digest, Sha256};
use std::sync::Arc;
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

/// Who sent a request, as its token says: what it may do, and the tag the
/// workers it registers are bound to. Put in the request's extensions by
/// [`require`]; absent on a server without tokens (no request has an
/// identity there, so any may act for any worker).
#[derive(Clone, Debug)]
pub struct Caller {
    pub scope: Scope,
    /// A tag derived from the token (SHA-256 of a fixed prefix and the
    /// token, 16 bytes in hex): the same on every server of a cluster that
    /// lists the token, and no use for recovering it. The store keeps it
    /// beside each worker the token registers.
    pub owner: String,
    /// A worker token's declarations, keyed as `--workers` keys them; `None`
    /// when its line names none (it may register any declaration).
    pub serves: Option<Arc<[String]>>,
    /// The name its line gives it (`name=ann`), if any.
    pub name: Option<Arc<str>>,
    /// The namespaces whose runs it sees and acts on (`ns=`).
    pub namespaces: Namespaces,
}

impl Caller {
    /// The namespaces a request may see: its token's, or every one on a
    /// server without tokens.
    pub fn seen(caller: Option<&Caller>) -> Namespaces {
        caller.map_or(Namespaces::All, |c| c.namespaces.clone())
    }

    /// Who answered a person's call, for its timing record: the token's
    /// name, else `token` and the first 8 hex digits of its owner tag.
    pub fn answerer(&self) -> String {
        match &self.name {
            Some(n) => n.to_string(),
            None => format!("token {}", &self.owner[..self.owner.len().min(8)]),
        }
    }

    /// Who a request came from, as records name it: `token:<tag>`, or
    /// `http` on a server without tokens.
    pub fn who(caller: Option<axum::Extension<Caller>>) -> String {
        match caller {
            Some(axum::Extension(c)) => format!("token:{}", c.owner),
            None => "http".to_string(),
        }
    }

    /// Whether this caller may act for a worker registered with `owner`:
    /// the token that registered it, or any `admin` token.
    pub fn acts_for(&self, owner: &str) -> bool {
        self.scope == Scope::Admin || self.owner == owner
    }

    /// Whether this caller's workers may serve declaration `identity`.
    pub fn may_serve(&self, identity: &str) -> bool {
        self.serves
            .as_deref()
            .is_none_or(|keys| crate::service::remote::key_covers(keys, identity))
    }
}

/// One configured token.
#[derive(Clone)]
struct Entry {
    hash: [u8; 32],
    scope: Scope,
    owner: String,
    serves: Option<Arc<[String]>>,
    name: Option<Arc<str>>,
    namespaces: Namespaces,
}

/// The namespaces of an `ns=` value: `*` for every one, else names
/// separated by commas.
fn parse_namespaces(v: &str) -> Result<Namespaces, String> {
    if v == "*" {
        return Ok(Namespaces::All);
    }
    let names = v
        .split(',')
        .map(|n| Namespace::parse(n).map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Namespaces::only(names))
}

/// Whether `name` may name a token: 1 to 64 letters, digits, `-`, `_`,
/// `.` or `@` (it is shown in timelines and history as it is).
fn name_ok(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '@'))
}

/// The configured tokens, kept only as hashes.
#[derive(Clone)]
pub struct Tokens {
    entries: Vec<Entry>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tokens({} configured)", self.entries.len())
    }
}

fn digest(token: &[u8]) -> [u8; 32] {
    Sha256::digest(token).into()
}

/// The owner tag of a token (see [`Caller::owner`]): a hash of its own,
/// unlike the one compared, so the tag stored in the database is not the
/// in-memory digest.
fn owner_tag(token: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(b"flowd worker owner\0");
    h.update(token);
    hex::encode(&h.finalize()[..16])
}

impl Tokens {
    /// Parses the tokens file text: `token scope[,scope]`, or `token worker
    /// KEY[,KEY]` for a worker token confined to those declarations, each
    /// optionally ending `ns=NS[,NS]` (the namespaces it sees; `default`
    /// without it, every one with an admin's `ns=*`) and `name=NAME` (who
    /// answers with it, in timelines), in either order.
    /// Blank lines and `#` comments are skipped; a line's highest scope is
    /// what the token may do. Errors name the line, never the token.
    pub fn parse(text: &str) -> Result<Tokens, String> {
        let mut entries = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut words: Vec<&str> = line.split_whitespace().collect();
            let (mut name, mut namespaces) = (None, None);
            let twice = || {
                format!(
                    "line {}: give `name=NAME` and `ns=NS[,NS]` once each, at the end of the line",
                    i + 1
                )
            };
            while let Some(last) = words.last() {
                if let Some(n) = last.strip_prefix("name=") {
                    if name.is_some() {
                        return Err(twice());
                    }
                    if !name_ok(n) {
                        return Err(format!(
                            "line {}: {n:?} is not a token name: 1 to 64 letters, digits, '-', '_', '.' or '@'",
                            i + 1
                        ));
                    }
                    name = Some(Arc::<str>::from(n));
                } else if let Some(v) = last.strip_prefix("ns=") {
                    if namespaces.is_some() {
                        return Err(twice());
                    }
                    namespaces = Some(parse_namespaces(v).map_err(|e| {
                        format!(
                            "line {}: ns={v}: {e}; or `ns=*` for every namespace (admin only)",
                            i + 1
                        )
                    })?);
                } else {
                    break;
                }
                words.pop();
            }
            if words
                .iter()
                .any(|w| w.starts_with("name=") || w.starts_with("ns="))
            {
                return Err(twice());
            }
            let mut words = words.into_iter();
            let (Some(token), Some(scopes), keys, None) =
                (words.next(), words.next(), words.next(), words.next())
            else {
                return Err(format!(
                    "line {}: expected `token scope[,scope] [name=NAME]` or `token worker KEY[,KEY] [name=NAME]`",
                    i + 1
                ));
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
            let serves = match keys {
                None => None,
                Some(_) if best != Some(Scope::Worker) => {
                    return Err(format!(
                        "line {}: only a worker token names the declarations it serves (`token worker KEY[,KEY]`)",
                        i + 1
                    ));
                }
                Some(keys) => {
                    let keys: Vec<String> = keys.split(',').map(str::to_string).collect();
                    if let Some(bad) = keys.iter().find(|k| !crate::service::remote::key_ok(k)) {
                        return Err(format!(
                            "line {}: {bad:?} is not a declaration key: a module (triage.json), one Tool (triage.json#classify) or a built-in module (std/llm)",
                            i + 1
                        ));
                    }
                    Some(Arc::from(keys))
                }
            };
            let namespaces = namespaces.unwrap_or_else(Namespaces::default_only);
            if namespaces == Namespaces::All && best != Some(Scope::Admin) {
                return Err(format!(
                    "line {}: only an admin token sees every namespace (`ns=*`); name the namespaces (`ns=team-a,team-b`)",
                    i + 1
                ));
            }
            if let Some(scope) = best {
                entries.push(Entry {
                    namespaces,
                    hash: digest(token.as_bytes()),
                    scope,
                    owner: owner_tag(token.as_bytes()),
                    serves,
                    name,
                });
            }
        }
        if entries.is_empty() {
            return Err("the tokens file names no token".into());
        }
        Ok(Tokens { entries })
    }

    /// Who a presented token is: every entry is compared, in constant time;
    /// a token listed twice is its highest scope's line.
    pub fn caller_of(&self, presented: &str) -> Option<Caller> {
        let d = digest(presented.as_bytes());
        let mut found: Option<&Entry> = None;
        for e in &self.entries {
            if bool::from(e.hash.ct_eq(&d)) && found.is_none_or(|f| e.scope > f.scope) {
                found = Some(e);
            }
        }
        found.map(|e| Caller {
            scope: e.scope,
            owner: e.owner.clone(),
            serves: e.serves.clone(),
            name: e.name.clone(),
            namespaces: e.namespaces.clone(),
        })
    }
}

/// The scope a request needs: none for health, the API document, the
/// docs page and the dashboard's page and files; `read` for reads (and the feeds and metrics); `run` for
/// anything that records or drives; `admin` for imports and deletions; `worker` for what
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
    // Imports, deleting a run (issue 40: `DELETE /v1/runs/{run}`) and
    // redacting one (`POST /v1/runs/{run}/redact`).
    if path == "/v1/archives"
        || method == Method::DELETE && path.starts_with("/v1/runs/")
        || method == Method::POST && path.starts_with("/v1/runs/") && path.ends_with("/redact")
    {
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
    match tokens.caller_of(presented) {
        None => unauthorized("the bearer token is not known to this server"),
        Some(Caller { scope: have, .. }) if !have.allows(need) => ApiError::new(
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
        Some(caller) => {
            // What the token may do, for handlers that check per operation
            // (the MCP tools), and who it is (the worker routes).
            req.extensions_mut().insert(caller.scope);
            req.extensions_mut().insert(caller);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_line_may_name_the_declarations_it_serves() {
        let t = Tokens::parse(
            "confined-0123456789 worker triage.json#classify,std/llm\nfree-0123456789abc worker\nadmin-0123456789abc admin\n",
        )
        .unwrap();
        let confined = t.caller_of("confined-0123456789").unwrap();
        assert!(confined.may_serve("triage.json#classify"));
        assert!(confined.may_serve("std/llm#chat"));
        assert!(!confined.may_serve("triage.json#route"));
        let free = t.caller_of("free-0123456789abc").unwrap();
        assert!(free.may_serve("anything.json#x"));
        assert_ne!(confined.owner, free.owner, "each token its own tag");
        assert!(!free.acts_for(&confined.owner));
        assert!(
            t.caller_of("admin-0123456789abc")
                .unwrap()
                .acts_for(&confined.owner)
        );
    }

    #[test]
    fn only_a_worker_line_names_declarations_and_each_must_be_a_key() {
        let e = Tokens::parse("run-token-0123456789 run triage.json\n").unwrap_err();
        assert!(
            e.contains("line 1") && e.contains("only a worker token"),
            "{e}"
        );
        let e = Tokens::parse("worker-token-0123456789 worker triage.json,#x\n").unwrap_err();
        assert!(e.contains("\"#x\" is not a declaration key"), "{e}");
        let e = Tokens::parse("worker-token-0123456789 worker a b\n").unwrap_err();
        assert!(e.contains("expected"), "{e}");
    }

    #[test]
    fn a_line_may_name_its_token_and_the_name_says_who_answered() {
        let t = Tokens::parse(
            "ann-token-0123456789 run name=ann@example.com\nworker-token-0123456789 worker triage.json name=w.1\nplain-token-0123456789 read\n",
        )
        .unwrap();
        let ann = t.caller_of("ann-token-0123456789").unwrap();
        assert_eq!(ann.scope, Scope::Run);
        assert_eq!(ann.answerer(), "ann@example.com");
        let w = t.caller_of("worker-token-0123456789").unwrap();
        assert!(w.may_serve("triage.json#classify") && !w.may_serve("other.json#x"));
        let plain = t.caller_of("plain-token-0123456789").unwrap();
        assert_eq!(plain.answerer(), format!("token {}", &plain.owner[..8]));
        for bad in ["name=", "name=a b", "name=<script>"] {
            let e = Tokens::parse(&format!("ann-token-0123456789 run {bad}\n")).unwrap_err();
            assert!(e.contains("line 1"), "{bad}: {e}");
        }
        let e = Tokens::parse("ann-token-0123456789 run name=a name=b\n").unwrap_err();
        assert!(e.contains("once each, at the end"), "{e}");
    }

    /// Issue 40 item 4: a line's namespaces; none said is `default`, as
    /// every run was before namespaces; every one only for an admin.
    #[test]
    fn a_line_may_confine_its_token_to_namespaces() {
        let t = Tokens::parse(
            "team-token-0123456789 read,run ns=team-b,team-a name=ann\nold-token-0123456789a run\nroot-token-0123456789 admin ns=*\nwork-token-0123456789 worker triage.json ns=team-a\n",
        )
        .unwrap();
        let ns = |n: &str| Namespace::parse(n).unwrap();
        let team = t.caller_of("team-token-0123456789").unwrap();
        assert_eq!(
            team.namespaces,
            Namespaces::only([ns("team-a"), ns("team-b")])
        );
        assert_eq!(team.answerer(), "ann");
        let old = t.caller_of("old-token-0123456789a").unwrap();
        assert_eq!(old.namespaces, Namespaces::default_only());
        let root = t.caller_of("root-token-0123456789").unwrap();
        assert_eq!(root.namespaces, Namespaces::All);
        let worker = t.caller_of("work-token-0123456789").unwrap();
        assert!(worker.may_serve("triage.json#x"));
        assert_eq!(worker.namespaces, Namespaces::only([ns("team-a")]));
        for (bad, says) in [
            ("run ns=*", "only an admin token"),
            ("run ns=Team", "a-z, 0-9"),
            ("run ns=", "is not a namespace"),
            ("run ns=a ns=b", "once each"),
            ("run ns=a run", "at the end"),
        ] {
            let e = Tokens::parse(&format!("x-token-0123456789ab {bad}\n")).unwrap_err();
            assert!(e.contains("line 1") && e.contains(says), "{bad}: {e}");
        }
    }
}
