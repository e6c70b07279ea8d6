//! The browser guard (issue 17 item 5): what keeps a web page from driving
//! a tokenless local server, as Jupyter and the Docker API guard theirs.
//! One middleware ([`check`]), in front of every route (`/mcp` included),
//! applies the first two rules before anything else runs; the third is a
//! layer ([`typed`]) in front of every `/v1` handler that takes a body:
//!
//! * **Host** (DNS rebinding): on a server without `--tokens`, the `Host`
//!   must name the server — `localhost`, a loopback address, the bound
//!   address itself (any address literal when bound to `0.0.0.0` or
//!   `[::]`), or a name given with `--allow-host` — on any port: the name
//!   is what a rebinding page controls (its port is the server's anyway),
//!   and a port forward (`ssh -L`, `docker -p`, a local proxy) changes the
//!   port only. A page on `attacker.example` whose name was rebound to
//!   127.0.0.1 sends `Host: attacker.example`: 403 `host-not-allowed`. With `--tokens` every request that reads or writes
//!   is authenticated, which a rebinding page cannot do, so any `Host` is
//!   accepted.
//! * **Origin** (CSRF): a request whose `Origin` is not the origin of its
//!   own `Host` — the same scheme (`http`, or a TLS proxy's
//!   `X-Forwarded-Proto`), host and port — is refused (403
//!   `origin-not-allowed`) unless the origin was given with
//!   `--cors-origin`; those get CORS answers (preflight
//!   `OPTIONS`, `Access-Control-Allow-*`, `Vary: Origin`). The dashboard
//!   at `/` is same-origin and passes.
//! * **Content-Type**: a request with a body (or a declared type) to a JSON
//!   endpoint must be `application/json`, an archive upload
//!   `application/x-tar` or `application/octet-stream` (415
//!   `unsupported-media-type`): the types a form or a no-CORS `fetch` can
//!   send without a preflight are never accepted. `/mcp` checks its own
//!   types (rmcp). This rule is a layer of each route's own methods
//!   ([`typed`]): a method the route does not take is 405 with `Allow`
//!   whatever its body.
//!
//! A refused request reaches no handler, so nothing is recorded.

use super::error::ApiError;
use axum::extract::{Request, State};
use axum::http::header::{self, HeaderMap, HeaderValue};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::MethodRouter;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

/// An origin as browsers send it: scheme, host and the port (explicit or
/// the scheme's default), all lowercase.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    scheme: String,
    host: String,
    port: u16,
}

fn default_port(scheme: &str) -> Option<u16> {
    match scheme {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    }
}

impl Origin {
    /// Parses `scheme://host[:port]` (no path, no user): what an `Origin`
    /// header and `--cors-origin` hold. `None` for anything else
    /// (`null` included).
    pub fn parse(s: &str) -> Option<Origin> {
        let (scheme, rest) = s.split_once("://")?;
        let scheme = scheme.to_ascii_lowercase();
        let authority = Authority::parse(rest)?;
        let port = match authority.port {
            Some(p) => p,
            None => default_port(&scheme)?,
        };
        Some(Origin {
            scheme,
            host: authority.host,
            port,
        })
    }
}

impl Origin {
    /// Whether this is the origin of a request made with `scheme` to
    /// `host`: scheme, host and port all equal (issue 36: a page from
    /// `https://127.0.0.1:PORT` is not this plain-HTTP server's page). A
    /// `Host` without a port names the request scheme's default port.
    fn same_as(&self, scheme: &str, host: &Authority) -> bool {
        self.scheme == scheme
            && self.host == host.host
            && Some(self.port) == host.port.or(default_port(scheme))
    }
}

/// The scheme the client used: `http` (the server speaks no TLS), or what
/// a TLS proxy in front says in `X-Forwarded-Proto`. Trusting that header
/// opens nothing to a page: a cross-origin request can carry it only
/// after a preflight, and the preflight (which cannot carry it) is
/// refused as cross-origin.
fn scheme(req: &Request) -> String {
    req.headers()
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(',').next())
        .map(|v| v.trim().to_ascii_lowercase())
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "http".to_string())
}

/// A `Host` value: the host (lowercase; an IPv6 literal keeps its
/// brackets) and the port if one was given.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Authority {
    host: String,
    port: Option<u16>,
}

impl Authority {
    fn parse(s: &str) -> Option<Authority> {
        if s.is_empty() || s.contains(['/', '@', '?', '#', ' ']) {
            return None;
        }
        let a: axum::http::uri::Authority = s.parse().ok()?;
        // `host:` (an empty port) parses, and means no port.
        if a.as_str().ends_with(':') {
            return None;
        }
        Some(Authority {
            host: a.host().to_ascii_lowercase(),
            port: a.port_u16(),
        })
    }

    fn ip(&self) -> Option<IpAddr> {
        self.host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse()
            .ok()
    }
}

/// A `--allow-host` value: a host name or address, no port.
pub fn parse_allowed_host(s: &str) -> Option<String> {
    let a = Authority::parse(s)?;
    a.port.is_none().then_some(a.host)
}

/// The guard's configuration: the bound address and the flags.
#[derive(Debug, Clone)]
pub struct Guard {
    bound: SocketAddr,
    /// Off with `--tokens` (see the module documentation).
    check_host: bool,
    allow_hosts: Vec<String>,
    cors_origins: Vec<(Origin, HeaderValue)>,
}

/// The request headers an allowed cross-origin page may send.
const ALLOW_HEADERS: &str =
    "authorization, content-type, accept, last-event-id, mcp-session-id, mcp-protocol-version";
const ALLOW_METHODS: &str = "GET, POST, DELETE, OPTIONS";
const EXPOSE_HEADERS: &str = "location, content-disposition, mcp-session-id";

impl Guard {
    /// `allow_hosts` and `cors_origins` as given on the command line;
    /// values that do not parse are refused here (`flow serve` checks them
    /// first, with the flag's name).
    pub fn new(
        bound: SocketAddr,
        check_host: bool,
        allow_hosts: &[String],
        cors_origins: &[String],
    ) -> Result<Guard, String> {
        let mut hosts = Vec::new();
        for h in allow_hosts {
            hosts.push(parse_allowed_host(h).ok_or_else(|| {
                format!("--allow-host {h:?}: expected a host name or address, without a port")
            })?);
        }
        let mut origins = Vec::new();
        for o in cors_origins {
            let parsed = Origin::parse(o).ok_or_else(|| {
                format!("--cors-origin {o:?}: expected an origin, scheme://host[:port]")
            })?;
            let v = HeaderValue::from_str(o).map_err(|e| format!("--cors-origin {o:?}: {e}"))?;
            origins.push((parsed, v));
        }
        Ok(Guard {
            bound,
            check_host,
            allow_hosts: hosts,
            cors_origins: origins,
        })
    }

    fn host_allowed(&self, a: &Authority) -> bool {
        if self.allow_hosts.contains(&a.host) || a.host == "localhost" {
            return true;
        }
        a.ip().is_some_and(|ip| {
            ip.is_loopback() || ip == self.bound.ip() || self.bound.ip().is_unspecified()
        })
    }
}

/// The authority the request names: HTTP/2's `:authority` or `Host`.
fn authority(req: &Request) -> Option<Authority> {
    if let Some(a) = req.uri().authority() {
        return Authority::parse(a.as_str());
    }
    let h = req.headers().get(header::HOST)?.to_str().ok()?;
    Authority::parse(h)
}

fn forbidden(kind: &'static str, detail: String) -> Response {
    ApiError::new(StatusCode::FORBIDDEN, kind, detail).into_response()
}

/// The media type of a header map's `Content-Type`, lowercase, without
/// parameters; `Some("")` when the header is not text.
fn media_type(h: &HeaderMap) -> Option<String> {
    h.get(header::CONTENT_TYPE).map(|v| {
        v.to_str()
            .unwrap_or("")
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase()
    })
}

fn has_body(h: &HeaderMap) -> bool {
    h.contains_key(header::TRANSFER_ENCODING)
        || h.get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim() != "0")
}

/// The Content-Type rule; `None` when the request may go on.
fn media_refusal(req: &Request) -> Option<ApiError> {
    let m = req.method();
    if m == Method::GET || m == Method::HEAD || m == Method::OPTIONS {
        return None;
    }
    let path = req.uri().path();
    if path == "/mcp" || path.starts_with("/mcp/") {
        return None;
    }
    let ty = media_type(req.headers());
    let refuse = |want: &str| {
        Some(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported-media-type",
            format!(
                "{} {path} takes {want}; the request's Content-Type is {}",
                req.method(),
                ty.as_deref()
                    .map_or("missing".to_string(), |t| format!("{t:?}"))
            ),
        ))
    };
    if path == "/v1/archives" {
        return match ty.as_deref() {
            Some("application/x-tar" | "application/octet-stream") => None,
            _ => refuse("a tar stream (Content-Type: application/x-tar)"),
        };
    }
    match ty.as_deref() {
        Some("application/json") => None,
        None if !has_body(req.headers()) => None,
        _ => refuse("a JSON body (Content-Type: application/json)"),
    }
}

/// The Content-Type rule on a route's own methods: every `/v1` route that
/// takes a body is declared through this. A method router's route layer
/// runs only once the route took the request's method, so a body sent
/// with a method the route does not take is 405 with `Allow` (issue 36),
/// not 415 (axum's `Router::route_layer` would run for the 405 too).
pub fn typed<S: Clone + Send + Sync + 'static>(r: MethodRouter<S>) -> MethodRouter<S> {
    r.route_layer(axum::middleware::from_fn(media))
}

async fn media(req: Request, next: Next) -> Response {
    match media_refusal(&req) {
        Some(e) => e.into_response(),
        None => next.run(req).await,
    }
}

/// The Host and Origin rules (module documentation).
pub async fn check(State(g): State<Arc<Guard>>, req: Request, next: Next) -> Response {
    let host = authority(&req);
    if g.check_host {
        match &host {
            Some(a) if g.host_allowed(a) => {}
            _ => {
                let shown = req
                    .headers()
                    .get(header::HOST)
                    .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
                return forbidden(
                    "host-not-allowed",
                    format!(
                        "Host {} does not name this server (listening on {}); start it with --allow-host NAME to serve another name",
                        shown.map_or("(missing)".to_string(), |h| format!("{h:?}")),
                        g.bound
                    ),
                );
            }
        }
    }
    let origin = req.headers().get(header::ORIGIN).cloned();
    let mut cors = None;
    if let Some(o) = &origin {
        let text = String::from_utf8_lossy(o.as_bytes()).into_owned();
        let parsed = Origin::parse(&text);
        let same = match (&parsed, &host) {
            (Some(p), Some(a)) => p.same_as(&scheme(&req), a),
            _ => false,
        };
        if !same {
            match g
                .cors_origins
                .iter()
                .find(|(c, _)| Some(c) == parsed.as_ref())
            {
                Some((_, v)) => cors = Some(v.clone()),
                None => {
                    return forbidden(
                        "origin-not-allowed",
                        format!(
                            "a page from {text:?} may not call this server; start it with --cors-origin {text} to allow that origin"
                        ),
                    );
                }
            }
        }
    }
    if let Some(o) = &cors
        && req.method() == Method::OPTIONS
        && req
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD)
    {
        let mut r = StatusCode::NO_CONTENT.into_response();
        let h = r.headers_mut();
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, o.clone());
        h.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static(ALLOW_METHODS),
        );
        h.insert(
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            HeaderValue::from_static(ALLOW_HEADERS),
        );
        h.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from_static("600"),
        );
        h.append(header::VARY, HeaderValue::from_static("origin"));
        return r;
    }
    let mut r = next.run(req).await;
    let h = r.headers_mut();
    if origin.is_some() {
        h.append(header::VARY, HeaderValue::from_static("origin"));
    }
    if let Some(o) = cors {
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, o);
        h.insert(
            header::ACCESS_CONTROL_EXPOSE_HEADERS,
            HeaderValue::from_static(EXPOSE_HEADERS),
        );
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard(bound: &str, hosts: &[&str]) -> Guard {
        let hosts: Vec<String> = hosts.iter().map(|s| s.to_string()).collect();
        Guard::new(bound.parse().unwrap(), true, &hosts, &[]).unwrap()
    }

    fn allowed(g: &Guard, host: &str) -> bool {
        Authority::parse(host).is_some_and(|a| g.host_allowed(&a))
    }

    #[test]
    fn hosts_that_name_a_loopback_server() {
        let g = guard("127.0.0.1:8080", &["flow.internal"]);
        for ok in [
            "127.0.0.1:8080",
            "localhost:8080",
            "LOCALHOST:8080",
            "[::1]:8080",
            "flow.internal",
            "flow.internal:443",
            // A port forward changes the port only.
            "127.0.0.1:9000",
            "localhost",
        ] {
            assert!(allowed(&g, ok), "{ok}");
        }
        for bad in [
            "attacker.example:8080",
            "attacker.example",
            "localhost.attacker.example",
            "10.0.0.1:8080",
            "127.0.0.1:8080@x",
            "",
            "localhost:",
        ] {
            assert!(!allowed(&g, bad), "{bad}");
        }
    }

    #[test]
    fn an_unspecified_bind_accepts_address_literals_only() {
        let g = guard("0.0.0.0:80", &[]);
        assert!(allowed(&g, "10.1.2.3"));
        assert!(allowed(&g, "192.168.0.7:8080"));
        assert!(!allowed(&g, "myhost"));
        let g = guard("10.0.0.5:9000", &[]);
        assert!(allowed(&g, "10.0.0.5:9000"));
        assert!(!allowed(&g, "10.0.0.6:9000"));
        assert!(!allowed(&g, "myhost:9000"));
    }

    #[test]
    fn origins_parse_with_default_ports() {
        let o = Origin::parse("HTTPS://App.Example").unwrap();
        assert_eq!(o, Origin::parse("https://app.example:443").unwrap());
        assert_ne!(o, Origin::parse("http://app.example").unwrap());
        for bad in [
            "null",
            "app.example",
            "http://a/b",
            "ftp://a",
            "http://",
            "http://u@a",
        ] {
            assert!(Origin::parse(bad).is_none(), "{bad}");
        }
        assert!(Guard::new("127.0.0.1:1".parse().unwrap(), true, &[], &["nope".into()]).is_err());
        assert!(Guard::new("127.0.0.1:1".parse().unwrap(), true, &["a:1".into()], &[]).is_err());
    }

    #[test]
    fn the_same_origin_has_the_same_scheme_host_and_port() {
        let host = Authority::parse("127.0.0.1:8080").unwrap();
        let same = |o: &str, scheme: &str| Origin::parse(o).unwrap().same_as(scheme, &host);
        assert!(same("http://127.0.0.1:8080", "http"));
        assert!(same("HTTP://127.0.0.1:8080", "http"));
        assert!(same("https://127.0.0.1:8080", "https"));
        for other in [
            "https://127.0.0.1:8080",
            "ws://127.0.0.1:8080",
            "http://127.0.0.1:8081",
            "http://127.0.0.1",
            "http://127.0.0.1.:8080",
            "http://localhost:8080",
        ] {
            assert!(!same(other, "http"), "{other}");
        }
        assert!(!same("http://127.0.0.1:8080", "https"));
        // No port in Host: the request scheme's default port.
        let bare = Authority::parse("flow.example").unwrap();
        assert!(
            Origin::parse("https://flow.example")
                .unwrap()
                .same_as("https", &bare)
        );
        assert!(
            !Origin::parse("https://flow.example")
                .unwrap()
                .same_as("http", &bare)
        );
        assert!(
            !Origin::parse("http://flow.example:443")
                .unwrap()
                .same_as("https", &bare)
        );
    }
}
