//! Run state changes across runs: `GET /v1/events`, and the `state` frames
//! a per-run stream carries with `?states=true`.
//!
//! Two sources feed one sequence:
//! * the run service's events (`RunService::events`), published as it
//!   starts, resumes, pauses, ends or halts a run, forwarded by one thread
//!   ([`forward`] into [`Feed::publish`], at once);
//! * one poller task reads the runs index every [`POLL`] for rows changed
//!   since its last look ([`flow_store::ListRuns::runs_changed_since`]), so
//!   changes made by another process on the same store — the CLI — are
//!   reported too. It reports a row only once it is [`SETTLE`] old, by
//!   which time the server's own publish of the same change has landed, and
//!   only when what it sees differs from what subscribers were last told
//!   (another state, or a new pause at another fact): no change is reported
//!   twice by the two sources.
//!
//! Every event has an id `<boot>-<seq>` (`boot` is the server's start time,
//! so ids of an earlier server are recognised). The last [`RING`] events
//! are kept: a client reconnecting with `Last-Event-ID` gets exactly the
//! ones it missed; one whose id is unknown or too old, or that fell behind
//! the broadcast, gets `event: resync` and re-reads `GET /v1/runs`. Nothing
//! is skipped silently.

use super::AppState;
use super::error::{ApiError, ApiResult};
use crate::service::RunEvent;
use crate::service::store::Store;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use flow_store::{Namespace, Namespaces, RunId, RunInfo, RunState};
use futures_util::{Stream, StreamExt};
use serde::{Deserialize, Serialize};
use serde_json::{Value as Json, json};
use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::broadcast;
use utoipa::ToSchema;

/// How often the poller reads the runs index.
pub const POLL: Duration = Duration::from_millis(500);
/// How old a change must be before the poller reports it.
const SETTLE: i64 = 200;
/// Events kept for `Last-Event-ID`.
const RING: usize = 1024;
/// Rows read per poll.
const POLL_ROWS: u32 = 2000;
/// Reported states kept for deduplication before old ones are dropped.
const REPORTED_MAX: usize = 50_000;
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The data of a state event.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct StateChange {
    pub run: String,
    /// running, paused, completed, faulted or halted.
    pub state: String,
    /// The run's last fact when the change was seen.
    pub last_fact: Option<super::listing::FactRefView>,
    /// The runs index's host time of the change (unix ms, its `state_ms`).
    pub updated_ms: Option<i64>,
    /// `server` (this server's drive) or `store` (seen in the store: another
    /// process, such as the CLI, changed it).
    pub source: String,
    /// The server started the run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started: Option<bool>,
    /// The server resumed the run, with a reply to this call (null: continued
    /// with no reply).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub resumed: Option<Json>,
}

/// One event of the sequence.
pub struct Sequenced {
    pub seq: u64,
    pub run: String,
    pub fact: u64,
    /// The run's namespace; `None` when its row could not be read (then
    /// only a subscriber that sees every namespace is told).
    pub namespace: Option<Namespace>,
    /// The canonical JSON of the [`StateChange`].
    pub data: String,
}

impl Sequenced {
    /// Whether a subscriber that sees `seen` is told of this change.
    fn shown_to(&self, seen: &Namespaces) -> bool {
        match &self.namespace {
            Some(n) => seen.contains(n),
            None => *seen == Namespaces::All,
        }
    }
}

struct Reported {
    state: RunState,
    fact: u64,
    updated_ms: i64,
}

struct Inner {
    seq: u64,
    ring: VecDeque<Arc<Sequenced>>,
    reported: HashMap<String, Reported>,
}

/// The state feed: a cheap shared handle lives in the server's state.
pub struct Feed {
    boot: i64,
    tx: broadcast::Sender<Arc<Sequenced>>,
    inner: Mutex<Inner>,
}

impl Default for Feed {
    fn default() -> Feed {
        let (tx, _) = broadcast::channel(RING);
        Feed {
            boot: crate::service::now_ms(),
            tx,
            inner: Mutex::new(Inner {
                seq: 0,
                ring: VecDeque::new(),
                reported: HashMap::new(),
            }),
        }
    }
}

/// Where a client resumes the feed.
enum Resume {
    /// Only what comes from now on.
    Live,
    /// After this sequence number of this server.
    After(u64),
    /// An id of another server, or one not understood as ours.
    Unknown,
}

impl Feed {
    /// Reports a change the server made (`extra` carries `started` or
    /// `resumed`). Reads the run's row for its head (one indexed read).
    pub fn publish(&self, store: &dyn Store, run: &str, state: &str, extra: Json) {
        let info = RunId::parse(run).ok().and_then(|r| store.run_info(&r).ok());
        let change = StateChange {
            run: run.to_string(),
            state: state.to_string(),
            last_fact: info.as_ref().map(|i| (&i.last_fact).into()),
            updated_ms: info.as_ref().map(|i| i.state_ms),
            source: "server".into(),
            started: extra.get("started").and_then(Json::as_bool),
            resumed: extra.get("resumed").cloned(),
        };
        let st = RunState::parse(state).unwrap_or(RunState::Running);
        let (fact, namespace) = info.map_or((0, None), |i| (i.last_fact.n, Some(i.namespace)));
        self.send(change, st, fact, namespace);
    }

    fn send(&self, change: StateChange, state: RunState, fact: u64, namespace: Option<Namespace>) {
        let Ok(mut g) = self.inner.lock() else {
            return;
        };
        g.seq += 1;
        let ev = Arc::new(Sequenced {
            seq: g.seq,
            run: change.run.clone(),
            fact,
            namespace,
            data: canonical(&change),
        });
        g.reported.insert(
            change.run.clone(),
            Reported {
                state,
                fact,
                updated_ms: change.updated_ms.unwrap_or_else(crate::service::now_ms),
            },
        );
        g.ring.push_back(ev.clone());
        while g.ring.len() > RING {
            g.ring.pop_front();
        }
        // Sent under the lock, so the ring and the broadcast agree on order
        // for a subscriber that takes both under it. No receiver is fine.
        let _ = self.tx.send(ev);
    }

    /// Reports the rows the poller found that subscribers have not been
    /// told about.
    fn observe(&self, rows: &[RunInfo], settled_before: i64) {
        for info in rows.iter().filter(|i| i.state_ms <= settled_before) {
            let news = match self.inner.lock() {
                Ok(g) => match g.reported.get(info.run.as_str()) {
                    None => true,
                    Some(r) => {
                        r.state != info.state
                            || (info.state != RunState::Running && r.fact != info.last_fact.n)
                    }
                },
                Err(_) => false,
            };
            if news {
                let change = StateChange {
                    run: info.run.to_string(),
                    state: info.state.as_str().into(),
                    last_fact: Some((&info.last_fact).into()),
                    updated_ms: Some(info.state_ms),
                    source: "store".into(),
                    started: None,
                    resumed: None,
                };
                self.send(
                    change,
                    info.state,
                    info.last_fact.n,
                    Some(info.namespace.clone()),
                );
            }
        }
        if let Ok(mut g) = self.inner.lock()
            && g.reported.len() > REPORTED_MAX
        {
            // Rows older than the poll window are never read again.
            let old = settled_before - 10_000;
            g.reported.retain(|_, r| r.updated_ms >= old);
        }
    }

    /// The receiver and the events after `from` still in the ring, taken
    /// together (no gap, no duplicate); `true` when the events asked for are
    /// no longer all there.
    fn subscribe(
        &self,
        from: Resume,
    ) -> (
        broadcast::Receiver<Arc<Sequenced>>,
        Vec<Arc<Sequenced>>,
        bool,
    ) {
        let Ok(g) = self.inner.lock() else {
            return (self.tx.subscribe(), Vec::new(), true);
        };
        let rx = self.tx.subscribe();
        match from {
            Resume::Live => (rx, Vec::new(), false),
            Resume::Unknown => (rx, Vec::new(), true),
            Resume::After(s) => {
                let first = g.ring.front().map_or(g.seq + 1, |e| e.seq);
                let missing = s > g.seq || s + 1 < first;
                let backlog = if missing {
                    Vec::new()
                } else {
                    g.ring.iter().filter(|e| e.seq > s).cloned().collect()
                };
                (rx, backlog, missing)
            }
        }
    }

    /// A receiver for per-run streams.
    pub fn receiver(&self) -> broadcast::Receiver<Arc<Sequenced>> {
        self.tx.subscribe()
    }

    fn id(&self, seq: u64) -> String {
        format!("{}-{seq}", self.boot)
    }

    fn parse_id(&self, v: &str) -> Option<Resume> {
        let (b, s) = v.trim().split_once('-')?;
        let (b, s) = (b.parse::<i64>().ok()?, s.parse::<u64>().ok()?);
        Some(if b == self.boot {
            Resume::After(s)
        } else {
            Resume::Unknown
        })
    }
}

fn canonical<T: Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .map(|j| flow_abi::json::canonical(&j))
        .unwrap_or_else(|_| "{}".into())
}

/// The forwarder: the run service's state changes into the feed, in the
/// order the service published them, on a thread of its own (publishing
/// reads the run's row, which blocks). `events` is taken before the server
/// accepts requests, so no change of its runs is missed; the thread ends
/// once the service closes them ([`crate::service::RunService::close_events`]).
pub fn forward(
    feed: Arc<Feed>,
    store: crate::service::store::StoreRef,
    events: std::sync::mpsc::Receiver<RunEvent>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("flow-feed".into())
        .spawn(move || {
            for RunEvent {
                run,
                state: st,
                extra,
            } in events
            {
                feed.publish(&*store, &run, st, extra);
            }
        })
}

/// The poller: reads the runs index every [`POLL`] until shutdown.
pub async fn poll(state: AppState) {
    let mut cursor = crate::service::now_ms() - SETTLE;
    let mut tick = tokio::time::interval(POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = state.shutdown().cancelled() => return,
            _ = tick.tick() => {}
        }
        let s = state.clone();
        let since = cursor;
        let read = tokio::task::spawn_blocking(move || {
            let settled = crate::service::now_ms() - SETTLE;
            s.store()
                .runs_changed_since(since, POLL_ROWS)
                .map(|rows| (rows, settled))
        })
        .await;
        match read {
            Ok(Ok((rows, settled))) => {
                state.feed().observe(&rows, settled);
                // Rows at `settled` or later are read again next time
                // (at-or-after), and deduplicated then.
                cursor = if rows.len() as u32 >= POLL_ROWS {
                    rows.last().map_or(settled, |r| r.state_ms.min(settled))
                } else {
                    settled
                };
            }
            Ok(Err(e)) => tracing::warn!(error = %e, "state feed: reading the runs index failed"),
            Err(e) => tracing::warn!(error = %e, "state feed: the poll task failed"),
        }
    }
}

#[utoipa::path(get, path = "/v1/events", operation_id = "stream_events", tag = "events",
    params(("Last-Event-ID" = Option<String>, Header, description = "Resume after this event id (`<boot>-<seq>`)")),
    responses(
        (status = 200, description = "`text/event-stream` of run state changes across runs, including those made by other processes on the store: `event: state`, `id: <boot>-<seq>`, data a StateChange; `event: resync` when changes may have been missed (re-read `GET /v1/runs`)", body = super::sse::SseEvent, content_type = "text/event-stream"),
        (status = 400, description = "A malformed Last-Event-ID", body = super::openapi::Problem, content_type = "application/problem+json")))]
pub async fn state_events(
    State(state): State<AppState>,
    caller: Option<axum::Extension<super::auth::Caller>>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    // Only the changes of runs in the token's namespaces (issue 40 item 4).
    let seen = super::auth::Caller::seen(caller.as_deref());
    let from = match headers.get("last-event-id") {
        None => Resume::Live,
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|v| state.feed().parse_id(v))
            .ok_or_else(|| {
                ApiError::bad_request("Last-Event-ID must be an id of this feed (<boot>-<seq>)")
            })?,
    };
    let (rx, backlog, missed) = state.feed().subscribe(from);
    state.metrics().sse_subscribers.inc();
    let guard = Subscribed(state.clone());
    let resync = |why: &str| {
        Event::default()
            .event("resync")
            .data(flow_abi::json::canonical(&json!({"reason": why})))
    };
    let first: Vec<Event> = if missed {
        vec![resync(
            "the changes after this id are no longer kept; re-read GET /v1/runs",
        )]
    } else {
        Vec::new()
    };
    let st = state.clone();
    let frame = move |e: &Sequenced| {
        Event::default()
            .id(st.feed().id(e.seq))
            .event("state")
            .data(e.data.clone())
    };
    let frame2 = frame.clone();
    let backlog: Vec<Event> = backlog
        .iter()
        .filter(|e| e.shown_to(&seen))
        .map(|e| frame(e))
        .collect();
    let live = tokio_stream::wrappers::BroadcastStream::new(rx).filter_map(move |r| {
        let _keep = &guard;
        let shown = match r {
            Ok(e) if e.shown_to(&seen) => Some(frame2(&e)),
            Ok(_) => None,
            // Fell behind: say so, and go on with what comes next.
            Err(_) => Some(
                Event::default()
                    .event("resync")
                    .data(flow_abi::json::canonical(
                        &json!({"reason": "this subscriber fell behind; re-read GET /v1/runs"}),
                    )),
            ),
        };
        std::future::ready(shown)
    });
    let stream = futures_util::stream::iter(first.into_iter().chain(backlog))
        .chain(live)
        .map(Ok::<_, Infallible>)
        .take_until(state.shutdown().clone().cancelled_owned());
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response())
}

/// Decrements the subscriber gauge when the stream is dropped.
struct Subscribed(AppState);

impl Drop for Subscribed {
    fn drop(&mut self) {
        self.0.metrics().sse_subscribers.dec();
    }
}

/// Adds `event: state` frames (no `id`, so a client's Last-Event-ID stays
/// the last fact's number) to a run's fact stream: each once the stream has
/// sent the fact the change happened at, so "paused" never comes before the
/// facts that led to it. `facts` yields each chunk with the number of the
/// last fact in it and whether that fact is End (no state frame follows
/// End: the stream ends there); `after` is the last fact the client already has. A run
/// that is paused or halted when the stream starts says so once its
/// backlog is out.
pub fn with_states(
    facts: impl Stream<Item = (u64, bool, Bytes)> + Send + 'static,
    states: broadcast::Receiver<Arc<Sequenced>>,
    state: AppState,
    info: &RunInfo,
    after: u64,
) -> impl Stream<Item = Result<Bytes, Infallible>> + Send + 'static {
    let run = info.run.to_string();
    let initial = matches!(info.state, RunState::Paused | RunState::Halted).then(|| {
        let change = StateChange {
            run: run.clone(),
            state: info.state.as_str().into(),
            last_fact: Some((&info.last_fact).into()),
            updated_ms: Some(info.state_ms),
            source: "store".into(),
            started: None,
            resumed: None,
        };
        (info.last_fact.n, state_frame(&canonical(&change)))
    });
    struct Merge<S> {
        facts: std::pin::Pin<Box<S>>,
        sent: u64,
        pending: VecDeque<(u64, Bytes)>,
        open: bool,
        /// End was sent: the stream ends, and no state comes after it.
        ended: bool,
    }
    let m = Merge {
        facts: Box::pin(facts),
        sent: after,
        pending: initial.into_iter().collect(),
        open: true,
        ended: false,
    };
    futures_util::stream::unfold((m, states), move |(mut m, mut rx)| {
        let run = run.clone();
        let state = state.clone();
        async move {
            loop {
                if m.ended {
                    return None;
                }
                if m.pending.front().is_some_and(|(n, _)| *n <= m.sent) {
                    let (_, b) = m.pending.pop_front()?;
                    return Some((Ok(b), (m, rx)));
                }
                tokio::select! {
                    biased;
                    f = m.facts.next() => {
                        let (n, ended, b) = f?;
                        m.sent = m.sent.max(n);
                        m.ended = ended;
                        return Some((Ok(b), (m, rx)));
                    }
                    s = rx.recv(), if m.open => match s {
                        Ok(e) if e.run == run => m.pending.push_back((e.fact, state_frame(&e.data))),
                        Ok(_) => {}
                        Err(broadcast::error::RecvError::Lagged(_)) => {
                            // Missed some: the row says where the run is now.
                            if let Ok(id) = RunId::parse(&run)
                                && let Ok(i) = state.store().run_info(&id)
                            {
                                let change = StateChange {
                                    run: run.clone(),
                                    state: i.state.as_str().into(),
                                    last_fact: Some((&i.last_fact).into()),
                                    updated_ms: Some(i.state_ms),
                                    source: "store".into(),
                                    started: None,
                                    resumed: None,
                                };
                                m.pending.push_back((i.last_fact.n, state_frame(&canonical(&change))));
                            }
                        }
                        Err(broadcast::error::RecvError::Closed) => m.open = false,
                    },
                }
            }
        }
    })
}

fn state_frame(data: &str) -> Bytes {
    Bytes::from(format!("event: state\ndata: {data}\n\n"))
}
