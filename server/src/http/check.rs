//! `POST /v1/check`: a submitted program's diagnostics, nothing recorded.

use super::AppState;
use super::answers::CheckAnswer;
use super::error::{ApiError, ApiResult, Body};
use super::program::sources;
use super::respond::typed_response;
use crate::service::checks::Checks;
use axum::extract::{FromRequest, State};
use axum::http::{StatusCode, header};
use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;
use std::collections::BTreeMap;
use utoipa::ToSchema;

/// A submitted program: the root flow and the modules its subgraphs name.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckRequest {
    /// The root FlowSpec document (a JSON object, or its text as a string).
    #[schema(value_type = Value)]
    pub flow: Json,
    /// Other modules by name (`flow_ref` targets), each a document or text.
    #[schema(value_type = Option<Object>)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modules: Option<BTreeMap<String, Json>>,
    /// The root module's name (default `flow.json`); `--tools` flow.toml
    /// keys name modules by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, max_length = 256)]
    pub name: Option<String>,
}

#[utoipa::path(post, path = "/v1/check", operation_id = "check_flow", tag = "runs", request_body = CheckRequest,
    responses(
        (status = 200, description = "Diagnostics (errors counts the error ones)", body = CheckAnswer),
        (status = 400, description = "Malformed JSON", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 422, description = "A body of the wrong shape", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 503, description = "Busy: as many large programs as the server checks at once are being checked; again after Retry-After", body = super::openapi::Problem, content_type = "application/problem+json")))]
pub async fn check_flow(
    State(state): State<AppState>,
    request: axum::extract::Request,
) -> ApiResult<Response> {
    // A large program checks off the async runtime, a bounded number at
    // once (service::checks; 503 busy past it). The body's length bounds
    // the sources' (a chunked body counts as large); the permit is taken
    // before the body is parsed, so a busy answer costs no parsing. The
    // body is still read (and dropped): a client still sending it would
    // otherwise see its connection reset rather than the 503.
    let size = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse().ok())
        .unwrap_or(usize::MAX);
    let permit = match state.service().checks().permit(size) {
        Ok(p) => p,
        Err(busy) => {
            let limit = state.options().body_limit;
            let _ = axum::body::to_bytes(request.into_body(), limit).await;
            return Err(busy.into());
        }
    };
    let Body(req) = Body::<CheckRequest>::from_request(request, &state).await?;
    let (all, errors) = Checks::under(permit, move || {
        let sources = sources(&req.flow, &req.modules, &req.name)?;
        Ok::<_, ApiError>(sources.diagnostics())
    })
    .await?;
    typed_response(
        StatusCode::OK,
        &CheckAnswer {
            diagnostics: all,
            errors: errors as u64,
            ok: errors == 0,
        },
    )
}
