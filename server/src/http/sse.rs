//! Server-Sent Events (DESIGN §6; STYLE rule 9).
//!
//! `GET /v1/runs/{run}/events`: one event per accepted fact, `id` = fact
//! number, `event` = kind, `data` = the stored canonical fact (the form the
//! hash chain covers: values over 1 KiB are `{"$blob":…}` references, to be
//! fetched from `/v1/blobs/{hash}`).
//!
//! The feed is the store's live tail ([`flow_store::Subscribe`]): it reads
//! the store after the last number it yielded and waits on the writer's
//! per-run head, so the backlog and the live part are one code path, facts
//! come strictly by number (no gap, no duplicate), and a slow subscriber
//! costs no memory — it is never skipped ahead; it simply reads on from the
//! store when it is ready, or reconnects with `Last-Event-ID`. The tail is
//! blocking (a `Condvar`), so each step runs on `spawn_blocking` with a
//! short timeout; the stream ends after End and on shutdown.
//!
//! `GET /v1/events`: run state changes across all runs (`event: state`,
//! data `{run, state, …}`), from a broadcast channel; a subscriber that
//! lags behind it is disconnected (it re-reads `GET /v1/runs` and
//! reconnects) rather than silently skipping changes.

use super::AppState;
use super::error::{ApiError, ApiResult, PathArgs, QueryArgs, run_id};
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use flow_store::{Subscribe, Tail, TailEvent};
use futures_util::{Stream, StreamExt};
use serde::Deserialize;
use std::convert::Infallible;
use std::time::Duration;
use tokio_stream::wrappers::BroadcastStream;
use utoipa::IntoParams;

/// How long one blocking tail step waits before checking for shutdown.
const STEP: Duration = Duration::from_millis(500);
const KEEP_ALIVE: Duration = Duration::from_secs(15);

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    /// Yield facts after this number (`Last-Event-ID` wins when both are
    /// given).
    pub after: Option<u64>,
}

/// Decrements the subscriber gauge when the stream is dropped.
struct Subscribed(AppState);

impl Drop for Subscribed {
    fn drop(&mut self) {
        self.0.metrics().sse_subscribers.dec();
    }
}

#[utoipa::path(get, path = "/v1/runs/{run}/events", operation_id = "stream_run_events",
    params(("run" = String, Path, description = "A run id"), EventsQuery,
        ("Last-Event-ID" = Option<u64>, Header, description = "Resume after this fact number")),
    responses(
        (status = 200, description = "`text/event-stream`: backlog then live; `id` = fact number, `event` = kind, `data` = the stored fact; ends after End", body = String, content_type = "text/event-stream"),
        (status = 400, description = "Bad Last-Event-ID or after", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such run", body = super::openapi::Problem, content_type = "application/problem+json")))]
pub async fn run_events(
    State(state): State<AppState>,
    PathArgs(run): PathArgs<String>,
    QueryArgs(q): QueryArgs<EventsQuery>,
    headers: HeaderMap,
) -> ApiResult<Sse<impl Stream<Item = Result<Event, Infallible>>>> {
    let run = run_id(&run)?;
    let after = match headers.get("last-event-id") {
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .ok_or_else(|| ApiError::bad_request("Last-Event-ID must be a fact number"))?,
        None => q.after.unwrap_or(0),
    };
    let tail = {
        let s = state.clone();
        let r = run.clone();
        tokio::task::spawn_blocking(move || -> ApiResult<Box<dyn Tail>> {
            super::routes::require_run(&s, &r)?;
            Ok(s.store().subscribe(&r, after)?)
        })
        .await
        .map_err(ApiError::internal)??
    };
    state.metrics().sse_subscribers.inc();
    let guard = Subscribed(state.clone());
    let stream = futures_util::stream::unfold((tail, guard), |(mut tail, guard)| async move {
        loop {
            let r = tokio::task::spawn_blocking(move || {
                let e = tail.next_event(STEP);
                (tail, e)
            })
            .await;
            let Ok((t, e)) = r else {
                return None;
            };
            tail = t;
            match e {
                Ok(TailEvent::Fact(f)) => {
                    let data = flow_abi::json::canonical(&f.fact);
                    let ev = Event::default()
                        .id(f.n.to_string())
                        .event(f.kind.as_str())
                        .data(data);
                    return Some((Ok(ev), (tail, guard)));
                }
                Ok(TailEvent::Idle) => {
                    if guard.0.shutdown().is_cancelled() {
                        return None;
                    }
                    continue;
                }
                Ok(TailEvent::Ended) => return None,
                Err(e) => {
                    tracing::warn!(error = %e, "SSE tail failed; ending the stream");
                    return None;
                }
            }
        }
    });
    let stream = stream.take_until(state.shutdown().clone().cancelled_owned());
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(KEEP_ALIVE)))
}

#[utoipa::path(get, path = "/v1/events", operation_id = "stream_events",
    responses((status = 200, description = "`text/event-stream` of run state changes: `event: state`, data `{run, state, …}`", body = String, content_type = "text/event-stream")))]
pub async fn state_events(
    State(state): State<AppState>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let rx = state.events();
    state.metrics().sse_subscribers.inc();
    let guard = Subscribed(state.clone());
    let stream = BroadcastStream::new(rx)
        // A lagging subscriber is disconnected, never silently skipped.
        .take_while(|r| std::future::ready(r.is_ok()))
        .filter_map(|r| std::future::ready(r.ok()))
        .map(move |v| {
            let _keep = &guard;
            Ok(Event::default()
                .event("state")
                .data(flow_abi::json::canonical(&v)))
        });
    let stream = stream.take_until(state.shutdown().clone().cancelled_owned());
    Sse::new(stream).keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
}
