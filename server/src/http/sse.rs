//! Server-Sent Events (DESIGN §6; STYLE rule 9).
//!
//! `GET /v1/runs/{run}/events`: one event per accepted fact, `id` = fact
//! number, `event` = kind, `data` = the stored canonical fact (the form the
//! hash chain covers: values over 1 KiB are `{"$blob":…}` references, to be
//! fetched from `/v1/blobs/{hash}`).
//!
//! A subscriber reads the store after the last number it yielded, and
//! waits on the run's head in the service's one registry of followed runs
//! ([`crate::service::heads`]: a watch and a ring of rendered frames per
//! run, shared by its subscribers), so
//! the backlog and the live part are one code path, facts come strictly by
//! number (no gap, no duplicate), and a slow subscriber costs no memory and
//! never slows the writer — it is never skipped ahead; it reads on from the
//! store when it is ready, or reconnects with `Last-Event-ID`. The stream
//! ends after End and on shutdown.
//!
//! With `?states=true` the feed also carries the run's state changes
//! (`event: state`, no `id`), from [`super::feed`].
//!
//! **Paced writes.** Each write to a stream costs a system call on both
//! ends (on loopback the sender's also delivers it), about as much CPU as
//! a step of the run it follows; with many subscribers a write per
//! subscriber per step takes the run's cores. So a stream writes again no
//! sooner than [`pace`] after its last write — nothing while there are
//! few streams, growing with the server's open streams to at most
//! [`PACE_MAX`] — and takes every frame that came meanwhile in that one
//! write: the frames are the same, only grouped, and delivery waits at
//! most the pace.

use super::AppState;
use super::error::{ApiError, ApiResult, PathArgs, QueryArgs, run_id};
use crate::service::heads::{Frame, READ_BATCH, Ring};
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::Response;
use flow_store::{FactKind, RunId, RunInfo, StoredFact};
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use utoipa::{IntoParams, ToSchema};

/// How long one blocking tail step waits before checking for shutdown.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The pace per open stream: the server as a whole writes to its streams
/// about once per this, whatever their number.
const PACE_PER_STREAM: Duration = Duration::from_micros(50);
/// The longest pace (so a delivery waits at most this for it).
const PACE_MAX: Duration = Duration::from_millis(10);
/// Paces shorter than this are not kept (a timer's granularity): a few
/// streams write at once.
const PACE_MIN: Duration = Duration::from_millis(1);

/// How long a stream waits after a write before its next, with `streams`
/// open on the server.
fn pace(streams: i64) -> Duration {
    let p = PACE_PER_STREAM
        .saturating_mul(u32::try_from(streams.max(0)).unwrap_or(u32::MAX))
        .min(PACE_MAX);
    if p < PACE_MIN { Duration::ZERO } else { p }
}

#[derive(Debug, Default, Serialize, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    /// Yield facts after this number (`Last-Event-ID` wins when both are
    /// given).
    #[serde(default, deserialize_with = "super::params::query_int64")]
    pub after: Option<u64>,
    /// Also send `event: state` frames (no `id`) when the run pauses, is
    /// halted or goes on, each after the fact it happened at (issue 13).
    pub states: Option<bool>,
}

/// One event of a feed as a client reads it (the OpenAPI schema of each
/// `text/event-stream` item; `data` is JSON text).
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct SseEvent {
    /// A fact's number (`/v1/runs/{run}/events`) or `<boot>-<seq>`
    /// (`/v1/events`); a `state` or `error` frame of a run's feed has none
    /// of its own.
    pub id: Option<String>,
    /// A fact's kind, `state`, `error` or `resync`.
    pub event: String,
    /// The stored fact, a state change or a failure, as canonical JSON.
    pub data: String,
    pub retry: Option<u64>,
}

/// Decrements the subscriber gauge when the stream is dropped.
struct Subscribed(AppState);

impl Drop for Subscribed {
    fn drop(&mut self) {
        self.0.metrics().sse_subscribers.dec();
    }
}

#[utoipa::path(get, path = "/v1/runs/{run}/events", operation_id = "stream_run_events", tag = "history",
    params(("run" = String, Path, description = "A run id"), EventsQuery,
        ("Last-Event-ID" = Option<u64>, Header, description = "Resume after this fact number")),
    responses(
        (status = 200, description = "`text/event-stream`: backlog then live; `id` = fact number, `event` = kind, `data` = the stored fact; ends after End", body = SseEvent, content_type = "text/event-stream"),
        (status = 400, description = "Bad Last-Event-ID or after", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such run", body = super::openapi::Problem, content_type = "application/problem+json")))]
pub async fn run_events(
    State(state): State<AppState>,
    PathArgs(run): PathArgs<String>,
    QueryArgs(q): QueryArgs<EventsQuery>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let run = run_id(&run)?;
    let after = match headers.get("last-event-id") {
        Some(v) => super::params::int64(
            "Last-Event-ID (a fact number)",
            String::from_utf8_lossy(v.as_bytes()).trim(),
        )?,
        None => q.after.unwrap_or(0),
    };
    // State changes are taken before the run's row is read, so none
    // between the read and the subscription is missed.
    let states = q.states.unwrap_or(false).then(|| state.feed().receiver());
    // Subscribe first (STYLE rule 9): take the run's head watch before the
    // first read, so a fact committed after that read still wakes us.
    let info = {
        let s = state.clone();
        let r = run.clone();
        tokio::task::spawn_blocking(move || require_run(&s, &r))
            .await
            .map_err(ApiError::internal)??
    };
    if info.ending.is_some() && after >= info.last_fact.n {
        // Nothing after the End the client already has.
        let mut r = Response::new(Body::empty());
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        return Ok(r);
    }
    let (rx, ring) = state.service().follow(&run, info.last_fact.n);
    state.metrics().sse_subscribers.inc();
    let sub = Subscriber {
        state: state.clone(),
        run,
        last: after,
        buf: VecDeque::new(),
        rx,
        ring,
        done: false,
        failure: None,
        written: None,
        _guard: Subscribed(state.clone()),
    };
    // The body is written by hand rather than through `Sse`: every fact's
    // frame is rendered once (shared by all subscribers), and the frames a
    // subscriber has ready go out as one chunk — one write instead of one
    // per fact when a subscriber is behind.
    let stream = futures_util::stream::unfold(sub, |mut sub| async move {
        if let Some(at) = sub.written {
            let wait = pace(sub.state.metrics().sse_subscribers.get());
            if !wait.is_zero() {
                tokio::time::sleep_until(at + wait).await;
            }
        }
        let first = match tokio::time::timeout(KEEP_ALIVE, sub.next()).await {
            // Keep-alive comment: proxies and clients see the stream live.
            Err(_) => return Some(((sub.last, false, Bytes::from_static(b":\n\n")), sub)),
            // A storage failure ends the stream with an `error` event
            // naming it (after every fact before it that verifies).
            Ok(None) => {
                let failure = sub.failure.take()?;
                return Some(((sub.last, true, failure), sub));
            }
            Ok(Some(f)) => f,
        };
        let mut chunk = Vec::with_capacity(first.wire.len() * 2);
        chunk.extend_from_slice(&first.wire);
        while chunk.len() < CHUNK {
            match sub.pop_ready() {
                Some(f) => chunk.extend_from_slice(&f.wire),
                None => break,
            }
        }
        sub.written = Some(tokio::time::Instant::now());
        Some(((sub.last, sub.done, Bytes::from(chunk)), sub))
    })
    .take_until(state.shutdown().clone().cancelled_owned());
    let body = match states {
        Some(rx) => Body::from_stream(super::feed::with_states(
            stream,
            rx,
            state.clone(),
            &info,
            after,
        )),
        None => Body::from_stream(stream.map(|(_, _, b)| Ok::<_, Infallible>(b))),
    };
    let mut r = Response::new(body);
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(r)
}

/// `event: error` (no `id`): what stopped the stream, for a client to show
/// rather than reconnect to. `data` is `{status, detail, fact?}`.
fn error_frame(e: &flow_store::Error) -> Bytes {
    let mut v = serde_json::json!({
        "status": if e.is_corruption() { "unreadable" } else { "failed" },
        "detail": e.to_string(),
    });
    if let flow_store::Error::Corrupt { n, .. } = e {
        v["fact"] = serde_json::json!(n);
    }
    Bytes::from(format!(
        "event: error\ndata: {}\n\n",
        flow_abi::json::canonical(&v)
    ))
}

/// Largest chunk a subscriber writes at once.
const CHUNK: usize = 256 * 1024;

/// One SSE subscriber's cursor: facts come from catch-up reads of the
/// store after `last`; the run's watch only says when to read again.
struct Subscriber {
    state: AppState,
    run: RunId,
    last: u64,
    buf: VecDeque<Arc<Frame>>,
    rx: watch::Receiver<u64>,
    ring: Ring,
    done: bool,
    /// The `error` frame to send last: the history does not read on.
    failure: Option<Bytes>,
    /// When the last chunk of facts was written (see [`pace`]).
    written: Option<tokio::time::Instant>,
    _guard: Subscribed,
}

impl Subscriber {
    /// Moves the frames after `last` from the shared ring into `buf`; false
    /// when the ring does not hold `last + 1` (the subscriber is further
    /// behind, or nothing new came).
    fn take_ring(&mut self) -> bool {
        let Ok(ring) = self.ring.lock() else {
            return false;
        };
        let (Some(first), Some(last)) = (ring.front(), ring.back()) else {
            return false;
        };
        let want = self.last + 1;
        if want < first.n || want > last.n {
            return false;
        }
        let skip = (want - first.n) as usize;
        self.buf
            .extend(ring.iter().skip(skip).take(READ_BATCH as usize).cloned());
        true
    }

    /// The next frame if it is already buffered and next in order.
    fn pop_ready(&mut self) -> Option<Arc<Frame>> {
        if self.done || self.buf.front().is_none_or(|f| f.n != self.last + 1) {
            return None;
        }
        let f = self.buf.pop_front()?;
        self.last = f.n;
        self.done = f.kind == FactKind::End;
        Some(f)
    }

    /// Up to `count` facts after the last one sent, from the store.
    async fn read_after(&self, count: u32) -> Option<flow_store::Result<Vec<StoredFact>>> {
        let (s, r, last) = (self.state.clone(), self.run.clone(), self.last);
        tokio::task::spawn_blocking(move || s.store().read_after(&r, last, count))
            .await
            .ok()
    }

    /// Reads on from the store into the buffer: true when frames came,
    /// false when there was nothing to read, `None` when the stream ends
    /// (a failure, said by the error frame).
    async fn read_store(&mut self) -> Option<bool> {
        let e = match self.read_after(READ_BATCH).await? {
            Ok(f) => {
                self.buf.extend(f.iter().map(Frame::of));
                return Some(!f.is_empty());
            }
            Err(e) => e,
        };
        // Send what verifies: the facts before a damaged one come first
        // (issue 17, item 7).
        if let flow_store::Error::Corrupt { n, .. } = &e
            && *n > self.last + 1
        {
            let count = (*n - 1 - self.last).min(u64::from(READ_BATCH)) as u32;
            if let Some(Ok(f)) = self.read_after(count).await
                && !f.is_empty()
            {
                self.buf.extend(f.iter().map(Frame::of));
                return Some(true);
            }
        }
        tracing::warn!(run.id = %self.run, error = %e, "SSE read failed; ending the stream");
        self.failure = Some(error_frame(&e));
        self.done = true;
        None
    }

    async fn next(&mut self) -> Option<Arc<Frame>> {
        loop {
            if let Some(f) = self.buf.pop_front() {
                // Strictly by number: never a gap, never a duplicate.
                if f.n != self.last + 1 {
                    tracing::warn!(run.id = %self.run, fact.n = f.n, "SSE read out of order; ending the stream");
                    return None;
                }
                self.last = f.n;
                self.done = f.kind == FactKind::End;
                return Some(f);
            }
            if self.done || self.state.shutdown().is_cancelled() {
                return None;
            }
            // Mark the current head seen before reading: a later bump
            // wakes `changed()` below.
            let head = *self.rx.borrow_and_update();
            // Live subscribers share the watcher's frames; only one that is
            // behind the ring reads the store.
            if self.take_ring() {
                continue;
            }
            // Behind what the follower has announced, and not in the ring
            // (fell behind it, or it has a gap): read the store. A
            // subscriber caught up waits for the next commit without
            // reading anything.
            if head > self.last && self.read_store().await? {
                continue;
            }
            if self.rx.changed().await.is_err() {
                // The watcher stopped (its run ended or it failed): one
                // more read decides; if the run goes on, watch it again.
                let ended = self
                    .state
                    .store()
                    .run_info(&self.run)
                    .map(|i| i.ending.is_some() && i.last_fact.n <= self.last)
                    .unwrap_or(true);
                if ended {
                    return None;
                }
                (self.rx, self.ring) = self.state.service().follow(&self.run, self.last);
            }
        }
    }
}

/// A run must exist.
pub(super) fn require_run(state: &AppState, run: &RunId) -> ApiResult<RunInfo> {
    Ok(state.store().run_info(run)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pace_grows_with_the_open_streams_within_its_bounds() {
        assert_eq!(pace(1), Duration::ZERO);
        assert_eq!(pace(10), Duration::ZERO);
        assert_eq!(pace(100), Duration::from_millis(5));
        assert_eq!(pace(100_000), PACE_MAX);
        assert_eq!(pace(-1), Duration::ZERO);
    }
}
