//! `POST /v1/runs/{run}/replay`: replay a run's history against its
//! recorded program.

use super::AppState;
use super::answers::{ReplayAnswer, VerdictName};
use super::error::{ApiResult, PathArgs, run_id};
use super::respond::typed_response;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use flow_engine::replay::Verdict;

#[utoipa::path(post, path = "/v1/runs/{run}/replay", operation_id = "replay_run", tag = "runs",
    params(("run" = String, Path, description = "A run id")),
    responses(
        (status = 200, description = "`{run, verdict, fact?, reason?}`: matched, incomplete or diverged", body = ReplayAnswer),
        (status = 404, description = "No such run", body = super::openapi::Problem, content_type = "application/problem+json")))]
pub async fn replay_run(
    State(state): State<AppState>,
    PathArgs(run): PathArgs<String>,
) -> ApiResult<Response> {
    let run = run_id(&run)?;
    let verdict = state.service().replay(&run).await?;
    let (verdict, fact, reason) = match verdict {
        Verdict::Matched => (VerdictName::Matched, None, None),
        Verdict::Incomplete => (VerdictName::Incomplete, None, None),
        Verdict::Hole { fact } => (VerdictName::Incomplete, Some(fact), Some("hole".into())),
        Verdict::Diverged { fact, reason } => (VerdictName::Diverged, Some(fact), Some(reason)),
    };
    typed_response(
        StatusCode::OK,
        &ReplayAnswer {
            run: run.to_string(),
            verdict,
            fact,
            reason,
        },
    )
}
