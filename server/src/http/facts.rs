//! `GET /v1/runs/{run}/facts`: a page of a run's history.

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
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct FactsQuery {
    pub kind: Option<String>,
    /// Only the fact with this recorded number.
    #[serde(default, deserialize_with = "super::params::query_int64")]
    pub fact: Option<u64>,
    pub search: Option<String>,
    #[serde(default, deserialize_with = "super::params::query_int64")]
    pub offset: Option<u64>,
    /// 1 to 200, default 50.
    #[param(minimum = 1, maximum = 200)]
    #[serde(default, deserialize_with = "super::params::query_int32")]
    pub limit: Option<u32>,
}

#[utoipa::path(get, path = "/v1/runs/{run}/facts", operation_id = "list_facts", tag = "history",
    params(("run" = String, Path, description = "A run id"), FactsQuery),
    responses(
        (status = 200, description = "A history page", body = flow_store::HistoryPage),
        (status = 400, description = "Invalid arguments", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such run", body = super::openapi::Problem, content_type = "application/problem+json")))]
pub async fn list_facts(
    State(state): State<AppState>,
    PathArgs(run): PathArgs<String>,
    QueryArgs(q): QueryArgs<FactsQuery>,
) -> ApiResult<Response> {
    let run = run_id(&run)?;
    let hq = HistoryQuery {
        kind: q.kind,
        search: q.search,
        offset: q.offset,
        limit: q.limit,
    };
    let fact = q.fact;
    let page = blocking(&state, move |s| {
        s.store().run_info(&run)?;
        let page = match fact {
            Some(n) => s.store().history_fact(&run, n),
            None => s.store().history_page(&run, &hq),
        };
        page.map_err(|e| match e {
            flow_store::Error::InvalidArgument(d) => ApiError::bad_request(d),
            e => ApiError::from(e),
        })
    })
    .await?;
    Ok(json_response(
        StatusCode::OK,
        serde_json::to_value(&page).map_err(ApiError::internal)?,
    ))
}
