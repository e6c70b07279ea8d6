//! How a handler answers: reads off the runtime (rusqlite is synchronous)
//! and canonical JSON bodies.

use super::AppState;
use super::error::{ApiError, ApiResult};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value as Json;

/// Runs a blocking read off the runtime.
pub(super) async fn blocking<T: Send + 'static>(
    state: &AppState,
    f: impl FnOnce(&AppState) -> ApiResult<T> + Send + 'static,
) -> ApiResult<T> {
    let s = state.clone();
    tokio::task::spawn_blocking(move || f(&s))
        .await
        .map_err(ApiError::internal)?
}

pub(super) fn json_response(status: StatusCode, v: Json) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        flow_abi::json::canonical(&v),
    )
        .into_response()
}

/// A typed answer as canonical JSON.
pub(super) fn typed_response(status: StatusCode, v: &impl serde::Serialize) -> ApiResult<Response> {
    Ok(json_response(
        status,
        serde_json::to_value(v).map_err(ApiError::internal)?,
    ))
}
