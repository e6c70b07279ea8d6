//! `GET /v1/runs/{run}/timeline`: where a run's time went — each call's
//! wall-clock span (sent, replied, duration, route, attempt, outcome), its
//! pauses and who answered them, the run's own span (issue 38 §3), from
//! `RunService::timeline`, the one implementation `flow history` and the
//! dashboard use too.

use super::AppState;
use super::error::{ApiResult, PathArgs, run_id};
use super::respond::{blocking, json_response};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

#[utoipa::path(get, path = "/v1/runs/{run}/timeline", operation_id = "get_timeline", tag = "history",
    params(("run" = String, Path, description = "A run id")),
    responses(
        (status = 200, description = "The run's calls in history order, each with its Call and Reply fact numbers, task, node, tool, route (`process`, `mcp`, `worker`, `nested`, `person`, `clock`, `memory`, `host`), attempt, `sentMs`, `repliedMs`, `durationMs` (unix ms; absent when not recorded: a run from before timings, an imported archive), outcome and reason, and the end of a crashed Tool's stderr; its pauses (when, open calls, answered when and by whom); its start, end and duration", body = crate::service::timeline::Timeline),
        (status = 400, description = "Invalid arguments", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such run", body = super::openapi::Problem, content_type = "application/problem+json")))]
pub async fn get_timeline(
    State(state): State<AppState>,
    PathArgs(run): PathArgs<String>,
) -> ApiResult<Response> {
    let run = run_id(&run)?;
    let t = blocking(&state, move |s| Ok(s.service().timeline(&run)?)).await?;
    Ok(json_response(
        StatusCode::OK,
        serde_json::to_value(&t).unwrap_or_default(),
    ))
}
