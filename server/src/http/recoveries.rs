//! `GET /v1/recoveries` and `GET /v1/recoveries/{id}`: the record of bulk
//! recoveries (`service/recoveries.rs`): who began each, its status and
//! counts, and the forks it made.

use super::AppState;
use super::error::{ApiError, ApiResult, PathArgs, QueryArgs};
use super::respond::{blocking, typed_response};
use crate::service::recoveries::{MAX_PAGE, RecoveryDetail, RecoveryList};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use utoipa::IntoParams;

/// `GET /v1/recoveries`' paging.
#[derive(Debug, Default, Serialize, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct RecoveriesParams {
    /// Only recoveries begun before this (unix ms): a page's `nextBefore`.
    #[serde(default)]
    pub before: Option<i64>,
    /// At most this many (1 to 200; default 50).
    #[serde(default)]
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<u32>,
}

#[utoipa::path(get, path = "/v1/recoveries", operation_id = "list_recoveries", tag = "runs",
    params(RecoveriesParams),
    responses(
        (status = 200, description = "Recoveries newest first: who began each, FIXED's flow and program, running, ended (its counts, or why it stopped short) or interrupted (its server stopped)", body = RecoveryList),
        (status = 400, description = "A bad `before` or `limit`", body = super::openapi::Problem, content_type = "application/problem+json")))]
pub async fn list_recoveries(
    State(state): State<AppState>,
    QueryArgs(p): QueryArgs<RecoveriesParams>,
) -> ApiResult<Response> {
    let limit = p.limit.unwrap_or(50);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(ApiError::bad_request(format!(
            "limit {limit}: give 1 to {MAX_PAGE} recoveries a page"
        )));
    }
    let list = blocking(&state, move |s| {
        Ok(s.service().recoveries(p.before, limit)?)
    })
    .await?;
    typed_response(StatusCode::OK, &list)
}

#[utoipa::path(get, path = "/v1/recoveries/{id}", operation_id = "get_recovery", tag = "runs",
    params(("id" = String, Path, description = "A recovery id (`rec-…`)")),
    responses(
        (status = 200, description = "The recovery and the forks it made (fork, the run it recovers, the checkpoint it started from), oldest first", body = RecoveryDetail),
        (status = 404, description = "No such recovery", body = super::openapi::Problem, content_type = "application/problem+json")))]
pub async fn get_recovery(
    State(state): State<AppState>,
    PathArgs(id): PathArgs<String>,
) -> ApiResult<Response> {
    let detail = blocking(&state, move |s| Ok(s.service().recovery(&id)?)).await?;
    typed_response(StatusCode::OK, &detail)
}
