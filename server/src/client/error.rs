//! Why a request to the server did not do what it asked, and what the
//! CLI makes of it: the same messages and exit codes as before the client
//! was typed (a refusal is the problem's `detail`, exit 2; a storage
//! failure, 503, exit 5; a server that cannot be reached, exit 2 and
//! "cannot reach …").

use crate::http::openapi::Problem;
use reqwest::StatusCode;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The HTTP client could not be set up.
    #[error("--server: {0}")]
    Setup(#[source] reqwest::Error),
    /// No answer: the server could not be reached, or the exchange failed
    /// (refused, reset, timed out) before its answer began.
    #[error("cannot reach {base}: {source}")]
    Unreachable {
        base: String,
        #[source]
        source: reqwest::Error,
    },
    /// The answer broke off before it was read whole.
    #[error("{base}: {why}")]
    Broken { base: String, why: String },
    /// An answer that does not read as what was asked for.
    #[error("{base}: {why}")]
    Unreadable { base: String, why: String },
    /// The server answered with an error status; `problem` is its problem
    /// document, when the body is one (boxed: errors stay small).
    #[error("{base}: {status}: {}", detail(*.status, .problem.as_deref()))]
    Refused {
        base: String,
        status: StatusCode,
        problem: Option<Box<Problem>>,
    },
}

/// What a refusal says: its problem's `detail`, else its status.
fn detail(status: StatusCode, problem: Option<&Problem>) -> String {
    problem.map_or_else(|| format!("HTTP {status}"), |p| p.detail.clone())
}

impl From<Error> for crate::error::Error {
    /// The CLI's reading of a failure: the problem's `detail` as the
    /// refusal (404 not found, 409 conflict, 503 a storage failure, a 422
    /// check or binding refusal with its diagnostics, so `--json` prints
    /// them structured as the embedded store's refusal does).
    fn from(e: Error) -> crate::error::Error {
        use crate::error::Error as E;
        let (status, problem) = match e {
            Error::Refused {
                status, problem, ..
            } => (status, problem),
            e @ Error::Unreadable { .. } => return E::Unreadable(e.to_string()),
            e => return E::Refused(e.to_string()),
        };
        let detail = detail(status, problem.as_deref());
        let (kind, diagnostics) = match problem {
            Some(p) => (p.kind, p.diagnostics.unwrap_or_default()),
            None => (String::new(), Vec::new()),
        };
        match (status.as_u16(), kind.as_str()) {
            (404, _) => E::NotFound(detail),
            (409, _) => E::Conflict(detail),
            (503, _) => E::Store(std::sync::Arc::new(flow_store::Error::CommitFailed(detail))),
            (422, "urn:flowd:problem:check") if !diagnostics.is_empty() => E::Check(diagnostics),
            (422, "urn:flowd:problem:unbound") if !diagnostics.is_empty() => E::Bind(
                diagnostics
                    .iter()
                    .map(|d| d["message"].as_str().unwrap_or_default().to_string())
                    .collect(),
            ),
            _ => E::Refused(detail),
        }
    }
}
