//! `POST /v1/gate`: the replay gate (issue 39, item 1; the service is
//! `service/gate.rs`). The body is the candidate program as `POST
//! /v1/runs` gives it; the query string selects runs with the run
//! query's filters (those of `GET /v1/runs`, the flow id being the
//! candidate's). The answer is the report; with `Accept:
//! application/x-ndjson` it streams instead: one `{"run": …}` line per
//! run as its replay finishes, then one `{"report": …}` line (or one
//! `{"error": …}` line when the gate fails after it began).

use super::AppState;
use super::error::{ApiError, ApiResult, Body, QueryArgs};
use super::listing::{RunsQuery, run_list_query};
use super::ndjson;
use super::program::sources;
use super::respond::typed_response;
use crate::service::gate::{GateReport, GateRun};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;
use std::collections::BTreeMap;
use tokio::sync::mpsc;
use utoipa::ToSchema;

/// `POST /v1/gate`: the candidate program.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GateRequest {
    /// The candidate's root FlowSpec document (a JSON object, or its text).
    #[schema(value_type = Value)]
    pub flow: Json,
    /// Other modules by name (`flow_ref` targets), each a document or text.
    #[schema(value_type = Option<Object>)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modules: Option<BTreeMap<String, Json>>,
    /// The root module's name (default `flow.json`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, max_length = 256)]
    pub name: Option<String>,
}

/// One line of a streamed gate (`application/x-ndjson`).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum GateLine {
    /// A run's verdict, as its replay finished.
    Run(GateRun),
    /// The report, last.
    Report(GateReport),
    /// The gate failed after it began (a storage failure): no report.
    Error(String),
}

#[utoipa::path(post, path = "/v1/gate", operation_id = "gate_runs", tag = "runs", request_body = GateRequest,
    params(RunsQuery),
    responses(
        (status = 200, description = "The report: every selected run of the candidate's flow replayed against the candidate, `passed` when none diverged. With `Accept: application/x-ndjson`, GateLine objects, one a line: a `run` per replay, then the `report`", body = GateReport),
        (status = 400, description = "A bad filter, or a paging parameter (the gate takes every run the filters select)", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 422, description = "The candidate does not check (its diagnostics), or names another flow than the `flow` filter", body = super::openapi::Problem, content_type = "application/problem+json")))]
pub async fn gate_runs(
    State(state): State<AppState>,
    caller: Option<axum::Extension<super::auth::Caller>>,
    headers: HeaderMap,
    QueryArgs(q): QueryArgs<RunsQuery>,
    Body(req): Body<GateRequest>,
) -> ApiResult<Response> {
    if q.limit.is_some()
        || q.after.is_some()
        || q.before.is_some()
        || q.order.is_some()
        || q.counts.is_some()
    {
        return Err(ApiError::bad_request(
            "the gate replays every run the filters select: leave out limit, after, before, order and counts",
        ));
    }
    let query = run_list_query(q, &super::auth::Caller::seen(caller.as_deref()))?;
    let candidate = sources(&req.flow, &req.modules, &req.name)?;
    if !ndjson::wanted(&headers) {
        let report = state.service().gate(candidate, query, None).await?;
        return typed_response(StatusCode::OK, &report);
    }
    // Refusals (a candidate that does not check, a flow filter of another
    // flow) come before the first line, as a problem: the candidate is
    // checked here first (the program cache makes the gate's own check
    // free).
    ndjson::check_program(
        &candidate,
        query.flow.as_deref(),
        "the gate replays runs of the candidate's flow id",
    )
    .await?;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (lines_tx, lines_rx) = mpsc::unbounded_channel::<GateLine>();
    let service = state.service().clone();
    let forward = lines_tx.clone();
    // Each verdict becomes a line as it comes; the report goes last, once
    // every verdict is forwarded (the gate drops its sender when done).
    let forwarding = tokio::spawn(async move {
        while let Some(r) = rx.recv().await {
            let _ = forward.send(GateLine::Run(r));
        }
    });
    tokio::spawn(async move {
        let gated = service.gate(candidate, query, Some(tx)).await;
        let _ = forwarding.await;
        let line = match gated {
            Ok(report) => GateLine::Report(report),
            Err(e) => {
                tracing::warn!(error = %e, "gate failed after it began");
                GateLine::Error(match e {
                    crate::error::Error::Store(_) | crate::error::Error::Unreadable(_) => {
                        "a storage failure ended the gate: the server's log says which".into()
                    }
                    e => e.to_string(),
                })
            }
        };
        let _ = lines_tx.send(line);
    });
    Ok(ndjson::response(lines_rx))
}
