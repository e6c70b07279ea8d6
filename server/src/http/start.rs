//! `POST /v1/runs`: start a run of a submitted program.

use super::AppState;
use super::answers::RunAnswer;
use super::auth::Caller;
use super::error::ApiError;
use super::error::{ApiResult, Body};
use super::listing::StateName;
use super::program::sources;
use super::respond::{blocking, typed_response};
use super::wait::await_outcome;
use axum::Extension;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::Response;
use flow_store::{Namespace, Namespaces, RunId};
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;
use std::collections::BTreeMap;
use utoipa::ToSchema;

/// `POST /v1/runs`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StartRequest {
    /// The root FlowSpec document (a JSON object, or its text as a string).
    #[schema(value_type = Value)]
    pub flow: Json,
    #[schema(value_type = Option<Object>)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modules: Option<BTreeMap<String, Json>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, max_length = 256)]
    pub name: Option<String>,
    /// The run's input (decoded against the input node's schema).
    #[schema(value_type = Object)]
    pub input: Json,
    /// Seconds to wait for the run to end or pause (at most 30).
    #[serde(
        default,
        deserialize_with = "super::params::body_opt_int64",
        skip_serializing_if = "Option::is_none"
    )]
    pub wait: Option<u64>,
    /// The namespace the run belongs to (default `default`): 1 to 64 of
    /// a-z, 0-9, '-', '_' and '.', one of the token's namespaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, max_length = 64, pattern = "^[a-z0-9][a-z0-9._-]*$")]
    pub namespace: Option<String>,
}

#[utoipa::path(post, path = "/v1/runs", operation_id = "start_run", tag = "runs", request_body = StartRequest,
    responses(
        (status = 201, description = "Started: `{run, state}` (with `wait`, the ending or the pending calls)", body = RunAnswer),
        (status = 400, description = "Malformed JSON", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 403, description = "The token may not start runs in the namespace asked for", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body too large", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 422, description = "The program does not check, a Tool is unbound, or the input does not decode; nothing was recorded", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 503, description = "Busy: as many large programs as the server checks at once are being checked; again after Retry-After", body = super::openapi::Problem, content_type = "application/problem+json")))]
pub async fn start_run(
    State(state): State<AppState>,
    caller: Option<Extension<Caller>>,
    Body(req): Body<StartRequest>,
) -> ApiResult<Response> {
    state.accepting()?;
    let namespace = match &req.namespace {
        Some(n) => Namespace::parse(n).map_err(|e| ApiError::bad_request(e.to_string()))?,
        None => Namespace::default(),
    };
    let seen = Caller::seen(caller.as_deref());
    if !seen.contains(&namespace) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!(
                "this token may not start runs in namespace {namespace}; give one of its namespaces ({}) in `namespace`",
                shown(&seen)
            ),
        ));
    }
    let sources = sources(&req.flow, &req.modules, &req.name)?;
    let input = flow_abi::json::canonical(&req.input);
    // Returns once Start is durable: the 201 acknowledges it.
    let mut accepted = state.service().start(&namespace, sources, &input).await?;
    let run = accepted.run.clone();
    state.metrics().runs_started.inc();
    let body = match await_outcome(&mut accepted, req.wait).await {
        Some(Ok(a)) => a,
        Some(Err(e)) => {
            let r = run.clone();
            let st = blocking(&state, move |s| Ok(run_state(s, &r))).await?;
            RunAnswer {
                error: Some(e.body()),
                ..RunAnswer::at(run.as_str(), st)
            }
        }
        None => RunAnswer::running(run.as_str()),
    };
    let mut r = typed_response(StatusCode::CREATED, &body)?;
    if let Ok(v) = axum::http::HeaderValue::from_str(&format!("/v1/runs/{run}")) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    Ok(r)
}

/// A token's namespaces, for a refusal.
fn shown(seen: &Namespaces) -> String {
    match seen {
        Namespaces::All => "every namespace".into(),
        Namespaces::Only(v) if v.is_empty() => "none".into(),
        Namespaces::Only(v) => v.iter().map(|n| n.as_str()).collect::<Vec<_>>().join(", "),
    }
}

fn run_state(state: &AppState, run: &RunId) -> StateName {
    state
        .store()
        .run_info(run)
        .map(|i| i.state.into())
        .unwrap_or(StateName::Running)
}
