//! `POST /v1/runs/{run}/fork`: a new run from a root checkpoint, or a
//! what-if fork that answers a recorded call differently.

use super::AppState;
use super::answers::{ParentRef, RunAnswer};
use super::error::{ApiError, ApiResult, Body, PathArgs, run_id};
use super::program::sources;
use super::respond::typed_response;
use super::wait::await_outcome;
use crate::service::ForkAt;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;
use std::collections::BTreeMap;
use utoipa::ToSchema;

/// `POST /v1/runs/{run}/fork`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkRequest {
    /// The fact number of a root-task Checkpoint; or else `call` and
    /// `reply`.
    #[serde(
        default,
        deserialize_with = "super::params::body_opt_int64",
        skip_serializing_if = "Option::is_none"
    )]
    pub checkpoint: Option<u64>,
    /// A what-if fork: a call the run recorded. The fork starts at the
    /// root Checkpoint before it, and the call is answered with `reply`
    /// instead of being made again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, max_length = 256)]
    pub call: Option<String>,
    /// The outcome that replaces `call`'s reply, decoded against the call's
    /// declared type as a resume's reply is: `{"Ok": value}` or
    /// `{"Failed": value}`.
    #[schema(value_type = Option<Object>)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply: Option<Json>,
    /// State fields to replace, each decoded against `state_schema`.
    #[schema(value_type = Option<Object>)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set: Option<BTreeMap<String, Json>>,
    /// Fork onto this program instead of the recorded one, as the start
    /// body gives it (with `modules` and `name`): it must have the same flow
    /// id, the checkpoint's node, and a `state_schema` the checkpoint's
    /// state fits, or the fork is refused (422) and nothing is recorded.
    #[schema(value_type = Option<Value>)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flow: Option<Json>,
    #[schema(value_type = Option<Object>)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modules: Option<BTreeMap<String, Json>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, max_length = 256)]
    pub name: Option<String>,
    #[serde(
        default,
        deserialize_with = "super::params::body_opt_int64",
        skip_serializing_if = "Option::is_none"
    )]
    pub wait: Option<u64>,
}

#[utoipa::path(post, path = "/v1/runs/{run}/fork", operation_id = "fork_run", tag = "runs", request_body = ForkRequest,
    params(("run" = String, Path, description = "The parent run id")),
    responses(
        (status = 201, description = "The new run: `{run, state, parent}`", body = RunAnswer),
        (status = 400, description = "Malformed JSON", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such run, checkpoint or recorded call", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 422, description = "Not a root checkpoint, neither or both of `checkpoint` and `call`, a `set` value or `reply` does not decode, or the `flow` does not check or does not fit the checkpoint", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 503, description = "Busy: as many large programs as the server checks at once are being checked; again after Retry-After", body = super::openapi::Problem, content_type = "application/problem+json")))]
pub async fn fork_run(
    State(state): State<AppState>,
    PathArgs(parent): PathArgs<String>,
    Body(req): Body<ForkRequest>,
) -> ApiResult<Response> {
    state.accepting()?;
    let parent = run_id(&parent)?;
    let sets: Vec<(String, String)> = req
        .set
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), flow_abi::json::canonical(v)))
        .collect();
    let onto = match &req.flow {
        Some(flow) => Some(sources(flow, &req.modules, &req.name)?),
        None if req.modules.is_some() || req.name.is_some() => {
            return Err(ApiError::unprocessable(
                "modules and name go with flow (the program to fork onto)",
            ));
        }
        None => None,
    };
    let at = ForkAt::new(
        req.checkpoint,
        req.call,
        req.reply.as_ref().map(flow_abi::json::canonical),
    )?;
    // Returns once the fork's Start is durable; a missing checkpoint or
    // call, a `set` or `reply` that does not decode or a program that does
    // not fit is refused first.
    let (mut accepted, checkpoint) = state.service().fork(&parent, at, &sets, onto).await?;
    let run = accepted.run.clone();
    let mut body = match await_outcome(&mut accepted, req.wait).await {
        Some(Ok(a)) => a,
        Some(Err(e)) => return Err(e),
        None => RunAnswer::running(run.as_str()),
    };
    body.parent = Some(ParentRef {
        run: parent.to_string(),
        checkpoint,
        deleted: false,
        recovery: None,
    });
    typed_response(StatusCode::CREATED, &body)
}
