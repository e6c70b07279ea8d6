//! `GET /v1/runs/{a}/diff/{b}`: two runs side by side (issue 39, item 4;
//! the service is `service/diff.rs`).

use super::AppState;
use super::error::{ApiResult, PathArgs, run_id};
use super::respond::typed_response;
use crate::service::diff::RunDiff;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

#[utoipa::path(get, path = "/v1/runs/{run}/diff/{other}", operation_id = "diff_runs", tag = "history",
    params(("run" = String, Path, description = "Run A (a fork's parent, say)"),
           ("other" = String, Path, description = "Run B (the fork, say)")),
    responses(
        (status = 200, description = "The two histories aligned (a fork beside its parent from its checkpoint, else fact by fact), where they part, and each call and checkpoint that differs, field by field", body = RunDiff),
        (status = 404, description = "No such run", body = super::openapi::Problem, content_type = "application/problem+json")))]
pub async fn diff_runs(
    State(state): State<AppState>,
    PathArgs((a, b)): PathArgs<(String, String)>,
) -> ApiResult<Response> {
    let (a, b) = (run_id(&a)?, run_id(&b)?);
    let diff = state.service().diff(&a, &b).await?;
    typed_response(StatusCode::OK, &diff)
}
