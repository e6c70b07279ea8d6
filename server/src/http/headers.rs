//! The security headers every answer carries (issue 36 item 6), one
//! policy per kind of answer, set in one place around the whole router (so
//! refusals, 404s and 405s carry them too):
//!
//! * **the dashboard** (`/`, `/assets/…`): its own origin only, no inline
//!   script, no CDN;
//! * **the API docs** (`/docs/…`, Swagger UI from the vendored bundle):
//!   scripts and styles of this origin (Swagger UI styles its widgets
//!   inline), the document fetched from this origin;
//! * **everything else** (JSON, problem+json, SSE, tar, blobs): nothing
//!   may load or run — an answer is data, never a page.
//!
//! All three forbid framing (`frame-ancestors 'none'`: no clickjacking of
//! the dashboard's buttons), and every answer carries `nosniff` (a blob or
//! a fact is never sniffed into HTML) and `no-referrer`.

use axum::http::{HeaderValue, header};
use axum::response::Response;

/// The dashboard's policy.
const DASHBOARD: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'none'; base-uri 'none'; frame-ancestors 'none'";

/// The API docs' policy.
const DOCS: &str = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; form-action 'none'; base-uri 'none'; frame-ancestors 'none'";

/// Every other answer's policy.
const API: &str = "default-src 'none'; form-action 'none'; base-uri 'none'; frame-ancestors 'none'";

/// The policy for a request path.
pub fn policy(path: &str) -> &'static str {
    if path == "/" || path.starts_with("/assets/") {
        DASHBOARD
    } else if path == "/docs" || path.starts_with("/docs/") {
        DOCS
    } else {
        API
    }
}

/// Sets the headers on an answer to a request for `path`.
pub fn secure(path: &str, mut r: Response) -> Response {
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(policy(path)),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    r
}

/// The middleware: [`secure`] on every answer.
pub async fn set(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let path = req.uri().path().to_owned();
    secure(&path, next.run(req).await)
}
