//! `POST /v1/runs/{run}/halt`: halt a run (a host record, no End).

use super::AppState;
use super::answers::HaltAnswer;
use super::error::{ApiResult, OptionalBody, PathArgs, run_id};
use super::listing::StateName;
use super::respond::typed_response;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `POST /v1/runs/{run}/halt`; the body may be left out.
#[derive(Debug, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HaltRequest {
    /// Halt at once, leaving the Tool calls out open (a continue then
    /// decides them: `open`). By default the halt waits for the calls out
    /// to finish, records their Replies, sends nothing new, and halts
    /// where no call is out.
    #[serde(default)]
    pub force: bool,
}

#[utoipa::path(post, path = "/v1/runs/{run}/halt", operation_id = "halt_run", tag = "runs", request_body(content = Option<HaltRequest>, description = "Optional: `{\"force\": true}` halts at once"),
    params(("run" = String, Path, description = "A run id")),
    responses(
        (status = 200, description = "Halted: a host record, no End; `POST …/resume` with no call continues it. Without `force`, answered once the calls out have finished", body = HaltAnswer),
        (status = 400, description = "Malformed JSON", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such run", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 409, description = "The run has ended", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body too large", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 422, description = "A body of the wrong shape: only `force` (a boolean) is accepted", body = super::openapi::Problem, content_type = "application/problem+json")))]
pub async fn halt_run(
    State(state): State<AppState>,
    PathArgs(run): PathArgs<String>,
    OptionalBody(req): OptionalBody<HaltRequest>,
) -> ApiResult<Response> {
    let run = run_id(&run)?;
    let row = state
        .service()
        .halt(&run, req.force, flow_store::Halt::by("http"))
        .await?;
    typed_response(
        StatusCode::OK,
        &HaltAnswer {
            run: run.to_string(),
            state: StateName::Halted,
            head: (&row.head).into(),
            at_ms: row.at_ms,
        },
    )
}
