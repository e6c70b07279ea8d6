//! `GET /v1/runs/{run}/inspect`: one run's inspection view — its history
//! page with the replay verdict, the pending calls, the rounds a fork can
//! start from and the reachable Tools — exactly what `flow history`
//! prints from (`RunService::inspect`), so `flow --server URL history`
//! shows the same text as a local `flow history`.

use super::AppState;
use super::error::{ApiError, ApiResult, PathArgs, QueryArgs, run_id};
use super::respond::{blocking, json_response};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use flow_store::HistoryQuery;
use serde::{Deserialize, Serialize};
use utoipa::IntoParams;

#[derive(Debug, Default, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct InspectQuery {
    /// Only facts of this kind (Start, Call, Reply, Close, Checkpoint, End).
    pub kind: Option<String>,
    /// Only facts whose text contains this.
    pub search: Option<String>,
    #[serde(default, deserialize_with = "super::params::query_int64")]
    pub offset: Option<u64>,
    /// 1 to 200, default 50.
    #[param(minimum = 1, maximum = 200)]
    #[serde(default, deserialize_with = "super::params::query_int32")]
    pub limit: Option<u32>,
}

#[utoipa::path(get, path = "/v1/runs/{run}/inspect", operation_id = "inspect_run", tag = "history",
    params(("run" = String, Path, description = "A run id"), InspectQuery),
    responses(
        (status = 200, description = "The inspection view: `facts` and `page` (as `GET …/facts`), `state`, `record`, `entry`, `verdict` (the recorded program re-run over the facts), `pending` (the calls to answer, each with an `exampleReply` when one can be built, or \"unknown\"), `rounds` (the Checkpoints a fork can start from) and `tools` (the reachable declarations and fingerprints)", body = Object),
        (status = 400, description = "Invalid arguments", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such run", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 422, description = "A kind, offset or limit out of range", body = super::openapi::Problem, content_type = "application/problem+json")))]
pub async fn inspect_run(
    State(state): State<AppState>,
    PathArgs(run): PathArgs<String>,
    QueryArgs(q): QueryArgs<InspectQuery>,
) -> ApiResult<Response> {
    let run = run_id(&run)?;
    let q = HistoryQuery {
        kind: q.kind,
        search: q.search,
        offset: q.offset,
        limit: q.limit,
    };
    let v = blocking(&state, move |s| {
        s.service().inspect(&run, &q).map_err(|e| match e {
            crate::error::Error::Store(e)
                if matches!(*e, flow_store::Error::InvalidArgument(_)) =>
            {
                ApiError::bad_request(e.to_string())
            }
            e => ApiError::from(e),
        })
    })
    .await?;
    Ok(json_response(StatusCode::OK, v))
}
