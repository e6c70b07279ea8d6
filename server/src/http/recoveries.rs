//! `GET /v1/recoveries` and `GET /v1/recoveries/{id}`: the record of bulk
//! recoveries (`service/recoveries.rs`): who began each, its status and
//! counts, and the forks it made.

use super::AppState;
use super::auth::Caller;
use super::error::{ApiError, ApiResult, PathArgs, QueryArgs};
use super::respond::{blocking, typed_response};
use crate::service::recoveries::{MAX_PAGE, Reader, RecoveryDetail, RecoveryList};
use axum::Extension;
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
        (status = 200, description = "Recoveries newest first: who began each, FIXED's flow and program, running, ended (its counts, or why it stopped short) or interrupted (its server stopped). A token confined to namespaces sees those it began and those with a fork in its namespaces (a page may then hold fewer than `limit`; follow `nextBefore`)", body = RecoveryList),
        (status = 400, description = "A bad `before` or `limit`", body = super::openapi::Problem, content_type = "application/problem+json")))]
pub async fn list_recoveries(
    State(state): State<AppState>,
    QueryArgs(p): QueryArgs<RecoveriesParams>,
    caller: Option<Extension<Caller>>,
) -> ApiResult<Response> {
    let limit = p.limit.unwrap_or(50);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(ApiError::bad_request(format!(
            "limit {limit}: give 1 to {MAX_PAGE} recoveries a page"
        )));
    }
    let (seen, who) = (Caller::seen(caller.as_deref()), Caller::who(caller));
    let list = blocking(&state, move |s| {
        let reader = Reader {
            seen: &seen,
            who: &who,
        };
        Ok(s.service().recoveries(p.before, limit, &reader)?)
    })
    .await?;
    typed_response(StatusCode::OK, &list)
}

#[utoipa::path(get, path = "/v1/recoveries/{id}", operation_id = "get_recovery", tag = "runs",
    params(("id" = String, Path, description = "A recovery id (`rec-…`)")),
    responses(
        (status = 200, description = "The recovery and the forks it made (fork, the run it recovers, the checkpoint it started from), oldest first; for a token confined to namespaces, the forks in them", body = RecoveryDetail),
        (status = 404, description = "No such recovery, or one a confined token neither began nor has a fork of", body = super::openapi::Problem, content_type = "application/problem+json")))]
pub async fn get_recovery(
    State(state): State<AppState>,
    PathArgs(id): PathArgs<String>,
    caller: Option<Extension<Caller>>,
) -> ApiResult<Response> {
    let (seen, who) = (Caller::seen(caller.as_deref()), Caller::who(caller));
    let detail = blocking(&state, move |s| {
        let reader = Reader {
            seen: &seen,
            who: &who,
        };
        Ok(s.service().recovery(&id, &reader)?)
    })
    .await?;
    typed_response(StatusCode::OK, &detail)
}
