//! Recorded bytes: a run's module sources (`GET
//! /v1/runs/{run}/sources/{module}`) and blobs by hash (`GET
//! /v1/blobs/{hash}`). A caller confined to namespaces is served a blob
//! by hash only when a run of its namespaces references it; any other is
//! the missing blob's 404 (docs/custody.md "Namespaces").

use super::AppState;
use super::auth::Caller;
use super::error::{ApiError, ApiResult, PathArgs, run_id};
use super::respond::blocking;
use axum::Extension;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

#[utoipa::path(get, path = "/v1/runs/{run}/sources/{module}", operation_id = "get_source", tag = "history",
    params(("run" = String, Path, description = "A run id"), ("module" = String, Path, description = "A module name as recorded in Start")),
    responses(
        (status = 200, description = "The recorded source text: a FlowSpec document (a source checked before it was recorded, so it is JSON)", body = Value, content_type = "application/json"),
        (status = 404, description = "No such run or module", body = super::openapi::Problem, content_type = "application/problem+json")))]
pub async fn get_source(
    State(state): State<AppState>,
    PathArgs((run, module)): PathArgs<(String, String)>,
) -> ApiResult<Response> {
    let run = run_id(&run)?;
    let text = blocking(&state, move |s| {
        // Only Start is needed: not the whole history.
        let first = s.store().read_after(&run, 0, 1)?;
        let start = first
            .first()
            .ok_or_else(|| ApiError::not_found(format!("{run} has no Start")))?;
        let hash = start
            .fact
            .source(&module)
            .map(|s| s.hash.clone())
            .ok_or_else(|| ApiError::not_found(format!("{run} recorded no module {module:?}")))?;
        let bytes = s.store().blob(&hash)?;
        String::from_utf8(bytes).map_err(|_| ApiError::internal("a source blob is not UTF-8"))
    })
    .await?;
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        text,
    )
        .into_response())
}

#[utoipa::path(get, path = "/v1/blobs/{hash}", operation_id = "get_blob", tag = "history",
    params(("hash" = String, Path, description = "`blake3:<hex>`")),
    responses(
        (status = 200, description = "The blob's verified bytes", body = Vec<u8>, content_type = "application/octet-stream"),
        (status = 404, description = "No such blob, or none that a run of the token's namespaces references", body = super::openapi::Problem, content_type = "application/problem+json")))]
pub async fn get_blob(
    State(state): State<AppState>,
    PathArgs(hash): PathArgs<String>,
    caller: Option<Extension<Caller>>,
) -> ApiResult<Response> {
    let ok = hash.strip_prefix("blake3:").is_some_and(|h| {
        h.len() == 64
            && h.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    });
    if !ok {
        return Err(ApiError::not_found(format!(
            "no blob {hash:?}: blob hashes are blake3:<64 lowercase hex digits>"
        )));
    }
    let seen = Caller::seen(caller.as_deref());
    let bytes = blocking(&state, move |s| Ok(s.store().blob_in(&hash, &seen)?)).await?;
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/octet-stream")],
        bytes,
    )
        .into_response())
}
