//! A run's chain, read at a point: the state at a checkpoint
//! (`GET /v1/runs/{run}/checkpoints/{fact}`) and the chain's verification
//! (`GET /v1/runs/{run}/verify`), typed in the OpenAPI document.

use super::AppState;
use super::error::{ApiError, ApiResult, PathArgs, run_id};
use super::listing::FactRefView;
use super::respond::{blocking, typed_response};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;
use utoipa::ToSchema;

/// The state at a checkpoint.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CheckpointView {
    pub run: String,
    /// The Checkpoint's fact number.
    pub fact: u64,
    pub task: Option<String>,
    pub node: Option<String>,
    /// The whole state, deltas applied and large values loaded.
    #[schema(value_type = Object)]
    pub state: Json,
}

#[utoipa::path(get, path = "/v1/runs/{run}/checkpoints/{fact}", operation_id = "get_checkpoint", tag = "history",
    params(("run" = String, Path, description = "A run id"), ("fact" = u64, Path, description = "A Checkpoint's fact number")),
    responses(
        (status = 200, description = "The state at the checkpoint", body = CheckpointView),
        (status = 400, description = "A malformed fact number", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such run, or that fact is not a Checkpoint", body = super::openapi::Problem, content_type = "application/problem+json")))]
pub async fn get_checkpoint(
    State(state): State<AppState>,
    PathArgs((run, fact)): PathArgs<(String, String)>,
) -> ApiResult<Response> {
    let run = run_id(&run)?;
    let fact = super::params::int64("fact", &fact)?;
    let v = blocking(&state, move |s| {
        let info = s.store().run_info(&run)?;
        let none = || ApiError::not_found(format!("{run} has no Checkpoint at fact {fact}"));
        if fact == 0 || fact > info.last_fact.n {
            return Err(none());
        }
        let f = s
            .store()
            .read_after(&run, fact - 1, 1)?
            .into_iter()
            .next()
            .ok_or_else(none)?;
        let flow_store::Fact::Checkpoint { task, node, .. } = f.fact else {
            return Err(none());
        };
        // A state to show: its holes as markers, not refused.
        let st = s.store().checkpoint_state_shown(&run, fact)?;
        Ok(CheckpointView {
            run: run.to_string(),
            fact,
            task: Some(task),
            node: Some(node),
            state: st,
        })
    })
    .await?;
    typed_response(StatusCode::OK, &v)
}

/// A run's chain, checked by the server.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Verification {
    pub run: String,
    /// Every fact's hash links to its predecessor's and every blob it uses
    /// matches its hash.
    pub verified: bool,
    /// Facts checked.
    pub facts: u64,
    /// The last fact checked.
    pub head: Option<FactRefView>,
    /// Where the check failed.
    pub fact: Option<u64>,
    pub reason: Option<String>,
}

#[utoipa::path(get, path = "/v1/runs/{run}/verify", operation_id = "verify_run", tag = "history",
    params(("run" = String, Path, description = "A run id")),
    responses(
        (status = 200, description = "The verdict of reading the whole history back: chain and blobs", body = Verification),
        (status = 404, description = "No such run", body = super::openapi::Problem, content_type = "application/problem+json")))]
pub async fn verify_run(
    State(state): State<AppState>,
    PathArgs(run): PathArgs<String>,
) -> ApiResult<Response> {
    let run = run_id(&run)?;
    let v = blocking(&state, move |s| {
        let info = s.store().run_info(&run)?;
        let failed = |fact: Option<u64>, reason: String| Verification {
            run: run.to_string(),
            verified: false,
            facts: info.last_fact.n,
            head: None,
            fact,
            reason: Some(reason),
        };
        Ok(match s.store().read_history(&run) {
            Ok(h) => Verification {
                run: run.to_string(),
                verified: true,
                facts: h.facts.len() as u64,
                head: h.facts.last().map(|f| FactRefView {
                    n: f.n,
                    hash: f.hash.clone(),
                }),
                fact: None,
                reason: None,
            },
            Err(flow_store::Error::Corrupt { n, reason, .. }) => failed(Some(n), reason),
            Err(flow_store::Error::CorruptBlob { hash, reason }) => {
                failed(None, format!("blob {hash}: {reason}"))
            }
            Err(e) => return Err(e.into()),
        })
    })
    .await?;
    typed_response(StatusCode::OK, &v)
}
