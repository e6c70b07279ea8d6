//! The one error envelope of the HTTP API (STYLE rules 2 and 3): every
//! failure, including a rejected path, query or body, is an RFC 9457
//! `application/problem+json` document with `type`, `title`, `status`,
//! `detail` and, where there are some, `diagnostics`.
//!
//! A 5xx never carries internals: the cause is logged once, here, and the
//! body says only what kind of failure it was.

use crate::error::Error;
use axum::body::Bytes;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde_json::{Value as Json, json};

/// A problem as the API reports it.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    /// A short stable slug; the `type` URI is `urn:flowd:problem:<kind>`.
    pub kind: &'static str,
    pub detail: String,
    pub diagnostics: Option<Vec<Json>>,
    /// Extension members of the problem (RFC 9457 §3.2), e.g. the
    /// `holder` of a run driven by another server.
    pub members: Vec<(&'static str, Json)>,
    /// `Retry-After` (seconds): when the client may try again.
    pub retry_after: Option<u32>,
}

impl ApiError {
    pub fn new(status: StatusCode, kind: &'static str, detail: impl Into<String>) -> ApiError {
        ApiError {
            status,
            kind,
            detail: detail.into(),
            diagnostics: None,
            members: Vec::new(),
            retry_after: None,
        }
    }

    pub fn bad_request(detail: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "bad-request", detail)
    }

    pub fn not_found(detail: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not-found", detail)
    }

    pub fn conflict(detail: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::CONFLICT, "conflict", detail)
    }

    pub fn unprocessable(detail: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "refused", detail)
    }

    pub fn unavailable(detail: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", detail)
    }

    /// Too much of some work under way: 503 `busy`, again in a second.
    pub fn busy(detail: impl Into<String>) -> ApiError {
        let mut e = ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "busy", detail);
        e.retry_after = Some(1);
        e
    }

    /// An internal failure: `cause` is logged, never sent.
    pub fn internal(cause: impl std::fmt::Display) -> ApiError {
        tracing::error!(error = %cause, "internal error");
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "the server could not complete the request; the cause is in its log",
        )
    }

    pub fn with_diagnostics(mut self, d: Vec<Json>) -> ApiError {
        self.diagnostics = Some(d);
        self
    }

    /// The problem document.
    pub fn body(&self) -> Json {
        let mut v = json!({
            "type": format!("urn:flowd:problem:{}", self.kind),
            "title": self.status.canonical_reason().unwrap_or("Error"),
            "status": self.status.as_u16(),
            "detail": self.detail,
        });
        if let Json::Object(m) = &mut v {
            if let Some(d) = &self.diagnostics {
                m.insert("diagnostics".into(), Json::Array(d.clone()));
            }
            for (k, x) in &self.members {
                m.insert((*k).into(), x.clone());
            }
        }
        v
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = flow_abi::json::canonical(&self.body());
        let mut r = (self.status, body).into_response();
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if let Some(s) = self.retry_after {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        r
    }
}

impl From<Error> for ApiError {
    /// The driver's errors: refusals are 422 (nothing was recorded), a
    /// missing run/call/checkpoint 404, a call that is not open 409. An
    /// unreadable history or a storage failure is a 5xx whose cause stays in
    /// the log (it may name files).
    fn from(e: Error) -> ApiError {
        match e {
            Error::Refused(d) => ApiError::unprocessable(d),
            e @ Error::Check(_) => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "check",
                "the program does not check; see diagnostics",
            )
            .with_diagnostics(e.diagnostics().unwrap_or_default()),
            e @ Error::Bind(_) => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "unbound",
                "the run is refused, nothing was recorded: declarations it can reach have no fitting binding (the server's --tools configuration, or a live worker for those its --workers names)",
            )
            .with_diagnostics(e.diagnostics().unwrap_or_default()),
            Error::NotFound(d) => ApiError::not_found(d),
            Error::Conflict(d) => ApiError::conflict(d),
            ref e @ Error::Leased {
                ref holder,
                expires_in_ms,
                ..
            } => {
                let mut a = ApiError::new(StatusCode::CONFLICT, "leased", e.to_string());
                a.members = vec![
                    ("holder", json!(holder)),
                    ("leaseExpiresInMs", json!(expires_in_ms)),
                ];
                a
            }
            Error::Halted(run) => {
                ApiError::conflict(format!("{run} was halted before it ended or paused"))
            }
            Error::Unavailable(d) => ApiError::unavailable(d),
            Error::Busy(d) => ApiError::busy(d),
            e @ Error::Unreadable(_) => {
                tracing::error!(error = %e, "unreadable history");
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "unreadable",
                    "the run's history cannot be read back as a run; the cause is in the server log",
                )
            }
            Error::Store(e) => {
                tracing::error!(error = %e, "storage failure");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "storage",
                    "the store could not accept or give back facts; the cause is in the server log",
                )
            }
        }
    }
}

impl From<flow_store::Error> for ApiError {
    fn from(e: flow_store::Error) -> ApiError {
        ApiError::from(Error::from(e))
    }
}

pub type ApiResult<T> = std::result::Result<T, ApiError>;

/// A JSON body read as bytes and parsed strictly (flow_abi's parser: no
/// duplicate keys, exact numbers), then typed with serde. Malformed JSON is
/// 400, a body of the wrong shape 422; both speak our envelope.
pub struct Body<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send + 'static> FromRequest<S> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> ApiResult<Self> {
        match read_body(req, state).await? {
            Some(t) => Ok(Body(t)),
            None => Err(ApiError::bad_request(
                "the request body is empty; send a JSON object",
            )),
        }
    }
}

/// A JSON body that may be left out: an empty body is `T::default()`
/// (a request whose every field is optional, such as a halt).
pub struct OptionalBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Default + Send + 'static> FromRequest<S>
    for OptionalBody<T>
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> ApiResult<Self> {
        Ok(OptionalBody(
            read_body(req, state).await?.unwrap_or_default(),
        ))
    }
}

/// The body read as JSON and decoded; `None` when it is empty.
async fn read_body<S: Send + Sync, T: DeserializeOwned + Send + 'static>(
    req: Request,
    state: &S,
) -> ApiResult<Option<T>> {
    let bytes = Bytes::from_request(req, state).await.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            too_large()
        } else {
            ApiError::bad_request(format!("cannot read the request body: {e}"))
        }
    })?;
    // Parsing a large body is CPU work (a 2.5 MB flow: ~15 ms in a
    // release build, ten times that in a debug one): off the async
    // runtime, so the server keeps answering meanwhile (issue 36). The
    // body limit bounds each.
    if bytes.len() < crate::service::checks::LARGE {
        return decode(&bytes);
    }
    tokio::task::spawn_blocking(move || decode(&bytes))
        .await
        .map_err(ApiError::internal)?
}

/// A JSON body's bytes, parsed strictly and typed; `None` when empty.
fn decode<T: DeserializeOwned>(bytes: &[u8]) -> ApiResult<Option<T>> {
    let text = std::str::from_utf8(bytes)
        .map_err(|_| ApiError::bad_request("the request body is not UTF-8"))?;
    if text.trim().is_empty() {
        return Ok(None);
    }
    let v = flow_abi::json::parse(text)
        .map_err(|e| ApiError::bad_request(format!("the request body is not valid JSON: {e}")))?;
    serde_json::from_value(v)
        .map(Some)
        .map_err(|e| ApiError::unprocessable(format!("the request body does not fit: {e}")))
}

/// The 413 problem.
pub fn too_large() -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "too-large",
        "the request body exceeds the server's limit (--body-limit); send a smaller body",
    )
}

/// A typed path whose rejection is ours.
pub struct PathArgs<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for PathArgs<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> ApiResult<Self> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| PathArgs(p.0))
            .map_err(|e: PathRejection| ApiError::bad_request(e.body_text()))
    }
}

/// A typed query whose rejection is ours.
pub struct QueryArgs<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for QueryArgs<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> ApiResult<Self> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|q| QueryArgs(q.0))
            .map_err(|e: QueryRejection| ApiError::bad_request(e.body_text()))
    }
}

/// A run id from a path, strictly parsed. A malformed id names no run:
/// 404, with a detail that says what run ids look like.
pub fn run_id(s: &str) -> ApiResult<flow_store::RunId> {
    flow_store::RunId::parse(s).map_err(|_| {
        ApiError::not_found(format!(
            "no run {s:?}: run ids are run- and a lowercase ULID"
        ))
    })
}
