//! `DELETE /v1/runs/{run}` (issue 40 item 1, docs/custody.md): scope
//! `admin`. The run's facts, host records, index rows, search attributes,
//! lease and the blobs no other run references go in one transaction, and
//! the deletion is recorded in the audit log with the token's tag.

use super::AppState;
use super::auth::Caller;
use super::error::{ApiResult, PathArgs, QueryArgs, run_id};
use super::listing::{FactRefView, StateName};
use super::respond::{blocking, typed_response};
use axum::Extension;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use flow_store::{Deleted, Deletion};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

/// `DELETE /v1/runs/{run}?force=true`.
#[derive(Debug, Default, Serialize, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct DeleteParams {
    /// Also delete a `running` run, or one a server holds the lease of: its
    /// driver finds the history gone and stops. Without it such a run is
    /// refused (409); halt it first. Default false.
    #[serde(default)]
    pub force: Option<bool>,
}

/// What a deletion removed (also its row of the audit log).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeleteAnswer {
    pub run: String,
    /// The audit log's sequence number of this deletion.
    pub seq: u64,
    /// The run's state when it was deleted.
    pub state: StateName,
    /// Its last fact then.
    pub head: FactRefView,
    /// Who deleted it: `http` (a server without tokens) or `token:<tag>`.
    pub who: String,
    /// When (unix ms).
    pub at_ms: i64,
    /// Fact rows removed.
    pub facts: u64,
    /// Blobs removed (those no other run referenced).
    pub blobs_removed: u64,
}

impl From<Deleted> for DeleteAnswer {
    fn from(d: Deleted) -> DeleteAnswer {
        DeleteAnswer {
            run: d.run,
            seq: d.seq,
            state: d.state.into(),
            head: (&d.head).into(),
            who: d.who,
            at_ms: d.at_ms,
            facts: d.facts,
            blobs_removed: d.blobs_removed,
        }
    }
}

#[utoipa::path(delete, path = "/v1/runs/{run}", operation_id = "delete_run", tag = "runs",
    params(("run" = String, Path, description = "A run id"), DeleteParams),
    responses(
        (status = 200, description = "Deleted: its facts, host records, index rows, search attributes and the blobs no other run references are gone; the audit log has the deletion", body = DeleteAnswer),
        (status = 400, description = "A malformed run id or `force` (true or false)", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 401, description = "No token, or one this server does not know", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 403, description = "The token's scope is not `admin`", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such run", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 409, description = "The run is running or leased; halt it first, or send `force=true`", body = super::openapi::Problem, content_type = "application/problem+json")))]
pub async fn delete_run(
    State(state): State<AppState>,
    PathArgs(run): PathArgs<String>,
    QueryArgs(params): QueryArgs<DeleteParams>,
    caller: Option<Extension<Caller>>,
) -> ApiResult<Response> {
    let run = run_id(&run)?;
    let who = Caller::who(caller);
    let how = Deletion {
        who,
        force: params.force.unwrap_or(false),
    };
    let d = blocking(&state, move |s| Ok(s.store().delete_run(&run, &how)?)).await?;
    typed_response(StatusCode::OK, &DeleteAnswer::from(d))
}
