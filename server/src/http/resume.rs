//! `POST /v1/runs/{run}/resume`: admit a reply to an open call, or
//! continue a halted or crashed run.

use super::AppState;
use super::answers::RunAnswer;
use super::error::{ApiError, ApiResult, Body, PathArgs, run_id};
use super::respond::typed_response;
use super::wait::await_outcome;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;
use utoipa::ToSchema;

/// `POST /v1/runs/{run}/resume`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResumeRequest {
    /// The open call's id, e.g. `c1:root#1`. Leave out `call` and `reply`
    /// to continue a halted or crashed run, settling its open Tool calls
    /// (as `flow resume RUN` does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call: Option<String>,
    /// The outcome, e.g. `{"Ok": {"decision": "approved"}}`.
    #[schema(value_type = Option<Object>)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply: Option<Json>,
    /// With neither `call` nor `reply`: what to do with the Tool calls
    /// that were out when the run was halted with `force` or its server
    /// crashed — `resend` them (they may run twice) or settle them
    /// `unknown`. Left out, each call's binding decides (`resend = true`
    /// sends it again, else Unknown). Calls a draining server or a halt
    /// never sent are sent either way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open: Option<crate::service::OpenChoice>,
    #[serde(
        default,
        deserialize_with = "super::params::body_opt_int64",
        skip_serializing_if = "Option::is_none"
    )]
    pub wait: Option<u64>,
}

#[utoipa::path(post, path = "/v1/runs/{run}/resume", operation_id = "resume_run", tag = "runs", request_body = ResumeRequest,
    params(("run" = String, Path, description = "A run id")),
    responses(
        (status = 202, description = "Admitted; the run goes on in the server (with `wait`, its ending or pending calls)", body = RunAnswer),
        (status = 400, description = "Malformed JSON", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such run", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 409, description = "The call is not open, the run has ended, or the server drives it now", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 422, description = "The reply does not decode against the call's declared type; nothing was recorded", body = super::openapi::Problem, content_type = "application/problem+json")))]
pub async fn resume_run(
    State(state): State<AppState>,
    caller: Option<axum::Extension<super::auth::Caller>>,
    PathArgs(run): PathArgs<String>,
    Body(req): Body<ResumeRequest>,
) -> ApiResult<Response> {
    state.accepting()?;
    let began = std::time::Instant::now();
    let run = run_id(&run)?;
    let ResumeRequest {
        call,
        reply,
        open,
        wait,
    } = req;
    let reply = match (call, reply, open) {
        (Some(call), Some(outcome), None) => Some(crate::service::Reply { call, outcome }),
        (None, None, _) => None,
        (Some(_), Some(_), Some(_)) => {
            return Err(ApiError::unprocessable(
                "`open` decides the calls out when a halted or crashed run is continued; send it without call and reply",
            ));
        }
        _ => {
            return Err(ApiError::unprocessable(
                "send both call and reply (admit a reply), or neither (continue a halted or crashed run)",
            ));
        }
    };
    // Every refusal comes back here, before anything is recorded; the
    // answer goes out once the Reply and its step are durable.
    let mut accepted = match reply {
        Some(reply) => {
            // Who answered, for the timing record: the token's name, else
            // its owner tag's first 8 hex digits.
            let by = caller.map(|axum::Extension(c)| c.answerer());
            state.service().resume_by(&run, reply, by).await?
        }
        None => state.service().continue_run(&run, open).await?,
    };
    let metrics = state.metrics();
    metrics.resumes.inc();
    metrics
        .resume_latency
        .observe(began.elapsed().as_secs_f64());
    // A nested run is resumed through its outermost run: that run answers.
    let driven = accepted.run.clone();
    let body = match await_outcome(&mut accepted, wait).await {
        Some(Ok(a)) => a,
        Some(Err(e)) => return Err(e),
        None => RunAnswer::running(driven.as_str()),
    };
    typed_response(StatusCode::ACCEPTED, &body)
}
