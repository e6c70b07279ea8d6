//! `GET /healthz`: up, and able to read its store.
//!
//! A server whose store no longer answers — its blocking pool taken by
//! other work, the database locked by another process, a disk that hangs —
//! is not healthy even though its listener is (issue 17, item 4). Each
//! probe reads one row of the runs index on the blocking pool, as every
//! request does, and waits at most [`PROBE`]: no answer, or a commit that
//! has been under way longer than that, is `503 stalled`; an error is
//! `503 failing`. The answer needs no token (orchestrators probe
//! without one).

use super::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use flow_store::DiscoveryQuery;
use serde::Serialize;
use std::time::{Duration, Instant};
use utoipa::ToSchema;

/// How long the store has to answer a probe.
pub const PROBE: Duration = Duration::from_secs(2);

/// `GET /healthz`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Health {
    /// `ok`, `draining` (a graceful shutdown is under way: the server
    /// takes no new drive, so a load balancer should send requests
    /// elsewhere), `stalled` (the store did not answer within 2 s, or a
    /// commit has waited longer) or `failing` (it answered with an error).
    pub status: String,
    /// What the store probe found: `ok`, or why not.
    pub store: String,
    /// How long the probe took (ms).
    pub store_ms: u64,
    pub shutting_down: bool,
}

#[utoipa::path(get, path = "/healthz", operation_id = "get_health", tag = "service", security(()),
    responses(
        (status = 200, description = "The server is up and its store answers", body = Health),
        (status = 503, description = "The server is draining, or its store is stalled or failing", body = Health)))]
pub async fn get_health(State(state): State<AppState>) -> Response {
    let began = Instant::now();
    let s = state.clone();
    let probe = tokio::time::timeout(
        PROBE,
        tokio::task::spawn_blocking(move || {
            s.store().discover(&DiscoveryQuery {
                limit: Some(1),
                after: None,
                state: None,
            })
        }),
    )
    .await;
    let waited = state.service().oldest_commit().filter(|d| *d > PROBE);
    let (status, store) = match probe {
        Ok(Ok(Ok(_))) if waited.is_some() => (
            "stalled",
            format!(
                "a commit has waited {} ms",
                waited.unwrap_or_default().as_millis()
            ),
        ),
        Ok(Ok(Ok(_))) if state.service().draining() => ("draining", "ok".to_string()),
        Ok(Ok(Ok(_))) => ("ok", "ok".to_string()),
        Ok(Ok(Err(e))) => ("failing", e.to_string()),
        Ok(Err(e)) => ("failing", format!("the probe's task ended: {e}")),
        Err(_) => (
            "stalled",
            format!("the store did not answer within {} s", PROBE.as_secs()),
        ),
    };
    if status != "ok" && status != "draining" {
        tracing::warn!(status, store = %store, "health probe");
    }
    let body = Health {
        status: status.into(),
        store,
        store_ms: began.elapsed().as_millis() as u64,
        shutting_down: state.shutdown().is_cancelled() || state.service().draining(),
    };
    let code = if status == "ok" {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    super::respond::json_response(code, serde_json::to_value(&body).unwrap_or_default())
}
