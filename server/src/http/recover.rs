//! `POST /v1/recover`: bulk recovery (issue 39, item 2; the service is
//! `service/recover.rs`). The body is the fixed program as `POST
//! /v1/runs` gives it, with `dryRun` and `rate`; the query string selects
//! runs with the run query's filters, as `POST /v1/gate` takes them, or
//! `runs` names them (the dashboard's multi-select). The
//! answer is the report; with `Accept: application/x-ndjson` it streams:
//! one `{"run": …}` line per run as it is done, then one `{"report": …}`
//! line (or one `{"error": …}` line when the recovery fails after it
//! began). The forks are driven by this server, as `POST
//! /v1/runs/{run}/fork` drives one.

use super::AppState;
use super::auth::Caller;
use super::error::{ApiError, ApiResult, Body, QueryArgs};
use super::listing::{RunsQuery, run_list_query};
use super::ndjson;
use super::program::sources;
use super::respond::typed_response;
use crate::service::recover::{NAMED, RATE, RecoverOptions, RecoverReport, RecoverRun, Selection};
use axum::Extension;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;
use std::collections::BTreeMap;
use tokio::sync::mpsc;
use utoipa::ToSchema;

/// `POST /v1/recover`: the fixed program, and how to recover.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RecoverRequest {
    /// The fixed root FlowSpec document (a JSON object, or its text).
    #[schema(value_type = Value)]
    pub flow: Json,
    /// Other modules by name (`flow_ref` targets), each a document or text.
    #[schema(value_type = Option<Object>)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modules: Option<BTreeMap<String, Json>>,
    /// The root module's name (default `flow.json`). It is part of the
    /// program hash the forks record: recover with the same name again to
    /// find them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, max_length = 256)]
    pub name: Option<String>,
    /// List what would happen; fork nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// At most this many forks a second (default 10; 0: no limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    /// These runs, by id, instead of the query string's filters (1 to
    /// 1,000; the dashboard's multi-select). An id that is malformed, not
    /// in the store or of another flow is that run's `unrecoverable` with
    /// why; the others are recovered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_items = 1, max_items = 1000)]
    pub runs: Option<Vec<String>>,
}

/// One line of a streamed recovery (`application/x-ndjson`).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum RecoverLine {
    /// A run, as it was done.
    Run(RecoverRun),
    /// The report, last.
    Report(RecoverReport),
    /// The recovery failed after it began: no report (the forks made so
    /// far stay; recovering again goes on from there).
    Error(String),
}

#[utoipa::path(post, path = "/v1/recover", operation_id = "recover_runs", tag = "runs", request_body = RecoverRequest,
    params(RunsQuery),
    responses(
        (status = 200, description = "The report: per selected run of the fixed program's flow, recovered (forked onto it and started), recoverable (dry run), already recovered, not needed, or unrecoverable and why. With `Accept: application/x-ndjson`, RecoverLine objects, one a line: a `run` per run, then the `report`", body = RecoverReport),
        (status = 400, description = "A bad filter, a paging parameter (a recovery takes every run the filters select), a bad rate, or `runs` empty, over 1,000 ids, or beside filters", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 409, description = "Another recovery of the flow is running (its id named): at most one recovery of a flow forks at a time", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 422, description = "The fixed program does not check (its diagnostics), or names another flow than the `flow` filter", body = super::openapi::Problem, content_type = "application/problem+json")))]
pub async fn recover_runs(
    State(state): State<AppState>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
    QueryArgs(q): QueryArgs<RunsQuery>,
    caller: Option<Extension<Caller>>,
    Body(req): Body<RecoverRequest>,
) -> ApiResult<Response> {
    if q.limit.is_some()
        || q.after.is_some()
        || q.before.is_some()
        || q.order.is_some()
        || q.counts.is_some()
    {
        return Err(ApiError::bad_request(
            "a recovery takes every run the filters select: leave out limit, after, before, order and counts",
        ));
    }
    let rate = req.rate.unwrap_or(RATE);
    if !(rate >= 0.0 && rate.is_finite()) {
        return Err(ApiError::bad_request(
            "rate: forks a second, 0 or more (0: no limit)",
        ));
    }
    if !req.dry_run {
        state.accepting()?;
    }
    let seen = Caller::seen(caller.as_deref());
    let selection = match req.runs {
        None => run_list_query(q, &seen)?.into(),
        Some(_) if raw.is_some_and(|r| !r.is_empty()) => {
            return Err(ApiError::bad_request(
                "name the runs (runs) or select them with filters in the query string, not both",
            ));
        }
        Some(runs) if runs.is_empty() || runs.len() > NAMED => {
            return Err(ApiError::bad_request(format!(
                "runs: 1 to {NAMED} run ids, not {} (select more with filters instead)",
                runs.len()
            )));
        }
        Some(runs) => {
            // Named runs of another namespace are unknown, as over a path.
            super::confine::visible(&state, &seen, &runs).await?;
            Selection::Named(runs)
        }
    };
    let flow_filter = match &selection {
        Selection::Filters(query) => query.flow.clone(),
        Selection::Named(_) => None,
    };
    let fixed = sources(&req.flow, &req.modules, &req.name)?;
    let options = RecoverOptions {
        dry_run: req.dry_run,
        rate,
    };
    let who = Caller::who(caller);
    let service = state.service().clone();
    if !ndjson::wanted(&headers) {
        let recovery = service
            .begin_recovery(fixed, selection, options, &who)
            .await?;
        let (report, _) = service.run_recovery(recovery, None).await?;
        return typed_response(StatusCode::OK, &report);
    }
    // Refusals come before the first line, as a problem: FIXED is checked
    // and the recovery begun (its flow's lock taken) first.
    ndjson::check_program(
        &fixed,
        flow_filter.as_deref(),
        "only runs are recovered of the fixed program's flow id",
    )
    .await?;
    let recovery = service
        .begin_recovery(fixed, selection, options, &who)
        .await?;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (lines_tx, lines_rx) = mpsc::unbounded_channel::<RecoverLine>();
    let forward = lines_tx.clone();
    let forwarding = tokio::spawn(async move {
        while let Some(r) = rx.recv().await {
            let _ = forward.send(RecoverLine::Run(r));
        }
    });
    // The recovery goes on if the client goes: each fork is recorded as
    // it is made, so it is never half done.
    tokio::spawn(async move {
        let recovered = service.run_recovery(recovery, Some(tx)).await;
        let _ = forwarding.await;
        let line = match recovered {
            Ok((report, _)) => RecoverLine::Report(report),
            Err(e) => {
                tracing::warn!(error = %e, "recovery failed after it began");
                RecoverLine::Error(match e {
                    crate::error::Error::Store(_) | crate::error::Error::Unreadable(_) => {
                        "a storage failure ended the recovery: the server's log says which".into()
                    }
                    e => e.to_string(),
                })
            }
        };
        let _ = lines_tx.send(line);
    });
    Ok(ndjson::response(lines_rx))
}
