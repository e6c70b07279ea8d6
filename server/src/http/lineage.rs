//! `GET /v1/runs/{run}/lineage`: the runs a run came from, nearest first
//! (the service's `lineage`).

use super::AppState;
use super::auth::Caller;
use super::error::{ApiResult, PathArgs, run_id};
use super::respond::{blocking, typed_response};
use crate::service::lineage::{self, Link};
use axum::Extension;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A run's lineage.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct LineageAnswer {
    pub run: String,
    /// Nearest first: the run's parent or outer run, then theirs, up to
    /// a run that came from none (or a deleted one).
    pub ancestors: Vec<Ancestor>,
    /// The chain is longer than the 64 ancestors listed.
    pub truncated: bool,
}

/// One step up: `run` came from `from`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Ancestor {
    pub run: String,
    pub from: String,
    /// `fork` (from a Checkpoint of `from`) or `nested` (run by a call of
    /// `from`).
    pub kind: String,
    /// A fork's checkpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<u64>,
    /// The bulk recovery that made a fork (`GET /v1/recoveries/{id}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery: Option<String>,
    /// A nested run's call in `from`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call: Option<String>,
    /// `from` has been deleted: the chain ends here.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deleted: bool,
}

#[utoipa::path(get, path = "/v1/runs/{run}/lineage", operation_id = "get_lineage", tag = "runs",
    params(("run" = String, Path, description = "A run id")),
    responses(
        (status = 200, description = "The runs this run came from, nearest first (forks' parents, nested runs' outer runs)", body = LineageAnswer),
        (status = 404, description = "No such run", body = super::openapi::Problem, content_type = "application/problem+json")))]
pub async fn get_lineage(
    State(state): State<AppState>,
    PathArgs(run): PathArgs<String>,
    caller: Option<Extension<Caller>>,
) -> ApiResult<Response> {
    let run = run_id(&run)?;
    let seen = Caller::seen(caller.as_deref());
    let answer = blocking(&state, move |s| {
        let (steps, truncated) = lineage::lineage(&**s.store(), &run, &seen)?;
        Ok(LineageAnswer {
            run: run.to_string(),
            ancestors: steps
                .into_iter()
                .map(|s| {
                    let (kind, checkpoint, recovery, call) = match s.link {
                        Link::Fork {
                            checkpoint,
                            recovery,
                        } => ("fork", Some(checkpoint), recovery, None),
                        Link::Nested { call } => ("nested", None, None, Some(call.to_string())),
                    };
                    Ancestor {
                        run: s.run.to_string(),
                        from: s.from.to_string(),
                        kind: kind.into(),
                        checkpoint,
                        recovery,
                        call,
                        deleted: s.deleted,
                    }
                })
                .collect(),
            truncated,
        })
    })
    .await?;
    typed_response(StatusCode::OK, &answer)
}
