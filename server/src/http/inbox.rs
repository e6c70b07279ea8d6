//! The inbox (`GET /v1/calls`): the open calls of paused runs, paged,
//! filtered and counted by the run service's inbox (`service/inbox.rs`),
//! each with its prompt, reply schema and deadline.

use super::AppState;
use super::error::{ApiError, ApiResult, QueryArgs};
use super::respond::{blocking, typed_response};
use crate::service::{InboxCursor, InboxQuery, InboxSort};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use flow_store::RunId;
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;
use utoipa::{IntoParams, ToSchema};

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct CallsQuery {
    /// Only `open` is supported.
    pub state: Option<String>,
    /// At most this many calls (1 to 1000, default 200).
    #[param(minimum = 1, maximum = 1000)]
    #[serde(default, deserialize_with = "super::params::query_int32")]
    pub limit: Option<u32>,
    /// The page after this cursor (`next` of the previous page).
    pub after: Option<String>,
    /// Only this run's calls.
    pub run: Option<String>,
    /// Only calls at this node.
    pub node: Option<String>,
    /// Only calls to this Tool (e.g. `std/human#input`).
    pub tool: Option<String>,
    /// Only calls waiting at least this many milliseconds.
    #[serde(default, deserialize_with = "super::params::query_int64")]
    pub waiting_ms: Option<u64>,
    /// Only calls whose deadline is before this time (unix ms).
    #[serde(default, deserialize_with = "super::params::query_int64")]
    pub due_before_ms: Option<u64>,
    /// `age` (longest waiting first, the default) or `due` (nearest
    /// deadline first, calls with none last).
    pub sort: Option<String>,
}

/// An open call waiting on a person.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CallView {
    pub run: String,
    /// The outer run when `run` is a nested run (its Start names it): the
    /// call can be answered by either run id.
    pub outer: Option<String>,
    /// The call id to resume, e.g. `c1:root#3`.
    pub call: String,
    pub node: Option<String>,
    pub tool: Option<String>,
    /// The prompt shown to the person.
    pub prompt: Option<String>,
    /// The JSON Schema the reply's `Ok` value must fit (`resume_schema`).
    #[schema(value_type = Option<Object>)]
    pub schema: Option<Json>,
    /// The Call's fact number.
    pub fact: u64,
    /// When the run paused (unix ms).
    pub since_ms: Option<i64>,
    /// When the call's deadline passes (unix ms), if it has one.
    pub due_ms: Option<i64>,
}

/// `GET /v1/calls`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Inbox {
    pub calls: Vec<CallView>,
    /// More calls follow this page (`next` fetches them).
    pub truncated: bool,
    /// The cursor of the next page (`after=`), or null on the last.
    pub next: Option<String>,
    /// How many open calls the filter matches, on every page.
    pub total: u64,
    /// Paused runs whose open calls cannot be read (a storage failure):
    /// listed, never dropped (issue 17, item 7).
    pub problems: Vec<RunProblem>,
}

/// A run a listing could not read.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RunProblem {
    pub run: String,
    /// `history`.
    pub component: String,
    /// `unreadable`, or `failed` for another error.
    pub status: String,
    pub detail: String,
}

#[utoipa::path(get, path = "/v1/calls", operation_id = "list_calls", tag = "calls", params(CallsQuery),
    responses(
        (status = 200, description = "The inbox: the open calls of paused runs, oldest run first", body = Inbox),
        (status = 400, description = "Unsupported state or limit", body = super::openapi::Problem, content_type = "application/problem+json")))]
pub async fn list_calls(
    State(state): State<AppState>,
    caller: Option<axum::Extension<super::auth::Caller>>,
    QueryArgs(q): QueryArgs<CallsQuery>,
) -> ApiResult<Response> {
    if let Some(s) = &q.state
        && s != "open"
    {
        return Err(ApiError::bad_request(format!(
            "state {s:?} is not supported; use state=open"
        )));
    }
    let limit = q.limit.unwrap_or(200);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::bad_request(format!(
            "limit must be from 1 to 1000, not {limit}"
        )));
    }
    let bad = |what: &str, v: &str| {
        ApiError::bad_request(format!(
            "{what} {v:?} is not valid; {}",
            match what {
                "after" => "send the `next` of the previous page, as it came",
                "sort" => "use sort=age or sort=due",
                _ => "send a run id as GET /v1/runs lists them",
            }
        ))
    };
    let mut query = InboxQuery {
        node: q.node,
        tool: q.tool,
        waiting_ms: q.waiting_ms.map(|v| v as i64),
        due_before_ms: q.due_before_ms.map(|v| v as i64),
        limit: limit as usize,
        now_ms: crate::service::now_ms(),
        namespaces: super::auth::Caller::seen(caller.as_deref()),
        ..InboxQuery::default()
    };
    if let Some(r) = &q.run {
        query.run = Some(RunId::parse(r).map_err(|_| bad("run", r))?);
    }
    if let Some(a) = &q.after {
        query.after = Some(InboxCursor::parse(a).ok_or_else(|| bad("after", a))?);
    }
    if let Some(o) = &q.sort {
        query.sort = InboxSort::parse(o).ok_or_else(|| bad("sort", o))?;
    }
    let page = blocking(&state, move |s| Ok(s.service().inbox(&query)?)).await?;
    let v = Inbox {
        truncated: page.next.is_some(),
        next: page.next,
        total: page.total as u64,
        calls: page
            .calls
            .into_iter()
            .map(|c| {
                let text = |k: &str| {
                    c.open
                        .args
                        .get(k)
                        .and_then(Json::as_str)
                        .map(str::to_string)
                };
                CallView {
                    run: c.run.to_string(),
                    outer: c.outer.as_ref().map(RunId::to_string),
                    node: Some(c.open.node.clone()),
                    tool: Some(c.open.tool.clone()),
                    prompt: text("prompt"),
                    schema: c.open.args.get("schema").filter(|v| v.is_object()).cloned(),
                    fact: c.fact,
                    since_ms: Some(c.since_ms),
                    due_ms: c.due_ms,
                    call: c.open.call.to_string(),
                }
            })
            .collect(),
        problems: page
            .problems
            .into_iter()
            .map(|(run, e)| RunProblem {
                run: run.to_string(),
                component: "history".into(),
                status: if e.is_corruption() {
                    "unreadable".into()
                } else {
                    "failed".into()
                },
                detail: e.to_string(),
            })
            .collect(),
    };
    typed_response(StatusCode::OK, &v)
}
