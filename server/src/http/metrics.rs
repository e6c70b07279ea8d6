//! `/metrics` in the Prometheus text format (0.0.4), encoded by
//! `prometheus-client` from metrics owned by the [`super::AppState`] (no
//! process-global recorder, so every test server has its own numbers) and
//! the run service's drive counts. They are totals over every namespace
//! and name Tools by identity, so a token confined to namespaces is
//! refused them (403): an `ns=*` admin token's, or a server without
//! tokens' (docs/custody.md "Namespaces").

use super::AppState;
use super::auth::Caller;
use super::error::{ApiError, ApiResult};
use super::respond::blocking;
use crate::service::{CallLabel, RunService};
use axum::Extension;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use flow_store::{Namespaces, RunListQuery, RunState, WaitingQuery};
use prometheus_client::encoding::{EncodeLabelSet, prometheus_text};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Metric, Registry};
use std::sync::atomic::Ordering;

/// Request latency buckets (seconds).
const BUCKETS: [f64; 8] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabel {
    status: u16,
}

/// What the server counts itself. The store's run counts and the run
/// service's drive counts are read at each scrape.
pub struct Metrics {
    pub runs_started: Counter,
    pub resumes: Counter,
    /// Seconds from a resume request to its reply admitted: the Reply
    /// and the step it starts durable (a `wait` after that is not counted).
    pub resume_latency: Histogram,
    pub sse_subscribers: Gauge,
    requests: Family<StatusLabel, Counter>,
    latency: Histogram,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics {
            runs_started: Counter::default(),
            resumes: Counter::default(),
            resume_latency: Histogram::new(BUCKETS),
            sse_subscribers: Gauge::default(),
            requests: Family::default(),
            latency: Histogram::new(BUCKETS),
        }
    }
}

/// The run service's drive counts at one scrape.
struct Drives {
    facts: u64,
    /// Drives that ended or paused: completed, faulted, paused.
    ended: [(&'static str, u64); 3],
    active: u64,
    leases: u64,
    commit: Histogram,
    calls: Family<CallLabel, Histogram, fn() -> Histogram>,
    /// Spans exported and dropped, with `--otlp-endpoint`.
    otlp: Option<(u64, u64)>,
}

/// Registers `metric` under `name`. Help texts have no final period: the
/// registry adds one.
fn add(registry: &mut Registry, name: &str, help: &str, metric: impl Metric) {
    registry.register(name, help, metric);
}

/// A counter that reads `v`: the source is itself monotonic.
fn counter(v: u64) -> Counter {
    let c = Counter::default();
    c.inc_by(v);
    c
}

fn gauge(v: u64) -> Gauge {
    let g = Gauge::default();
    g.set(i64::try_from(v).unwrap_or(i64::MAX));
    g
}

impl Metrics {
    fn request(&self, status: u16, secs: f64) {
        self.requests.get_or_create(&StatusLabel { status }).inc();
        self.latency.observe(secs);
    }

    /// The text exposition; `store` what the store counts, the drive
    /// counts the run service's.
    pub fn render(&self, store: &StoreGauges, service: &RunService) -> String {
        let stats = service.stats();
        let get = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
        let drives = Drives {
            facts: get(&stats.facts),
            ended: [
                ("completed", get(&stats.completed)),
                ("faulted", get(&stats.faulted)),
                ("paused", get(&stats.paused)),
            ],
            active: service.active_drives() as u64,
            leases: service.leases_held() as u64,
            commit: stats.commit.clone(),
            calls: stats.calls.clone(),
            otlp: service.tracer().map(|t| {
                let c = t.counts();
                (get(&c.exported), get(&c.dropped))
            }),
        };
        self.encode(store, &drives)
    }

    /// One registry per scrape: the server's own metrics are shared handles
    /// (registering a clone is cheap), the others are read now.
    fn encode(&self, store: &StoreGauges, drives: &Drives) -> String {
        let mut r = Registry::default();
        let by_state: Family<StateLabel, Gauge> = Family::default();
        for (st, n) in &store.runs {
            let state = st.as_str();
            by_state
                .get_or_create(&StateLabel { state })
                .set(i64::try_from(*n).unwrap_or(i64::MAX));
        }
        let ended: Family<OutcomeLabel, Counter> = Family::default();
        for (outcome, n) in drives.ended {
            ended.get_or_create(&OutcomeLabel { outcome }).inc_by(n);
        }
        add(&mut r, "flowd_runs", "Stored runs by state", by_state);
        add(
            &mut r,
            "flowd_runs_started",
            "Runs started over HTTP",
            self.runs_started.clone(),
        );
        add(
            &mut r,
            "flowd_resumes",
            "Replies admitted over HTTP",
            self.resumes.clone(),
        );
        add(
            &mut r,
            "flowd_facts_appended",
            "Facts appended by the server's drives",
            counter(drives.facts),
        );
        add(
            &mut r,
            "flowd_drives_ended",
            "Drives that ended or paused, by outcome",
            ended,
        );
        add(
            &mut r,
            "flowd_drives_active",
            "Driver tasks alive",
            gauge(drives.active),
        );
        add(
            &mut r,
            "flowd_open_calls",
            "Calls paused runs wait on (the inbox's count)",
            gauge(store.open_calls),
        );
        if let Some(n) = store.workers {
            add(
                &mut r,
                "flowd_workers",
                "Live workers (registered and seen within the worker timeout)",
                gauge(n),
            );
        }
        add(
            &mut r,
            "flowd_leases_held",
            "Run leases this server holds (runs it drives under a lease)",
            gauge(drives.leases),
        );
        add(
            &mut r,
            "flowd_step_commit_seconds",
            "Time from a drive handing its facts to the store to their commit being durable",
            drives.commit.clone(),
        );
        add(
            &mut r,
            "flowd_call_duration_seconds",
            "Time from a call being sent to its reply, by Tool and by what served it",
            drives.calls.clone(),
        );
        add(
            &mut r,
            "flowd_resume_duration_seconds",
            "Time from a resume request to its Reply and the step it starts being durable",
            self.resume_latency.clone(),
        );
        add(
            &mut r,
            "flowd_sse_subscribers",
            "Open SSE streams",
            self.sse_subscribers.clone(),
        );
        add(
            &mut r,
            "flowd_http_requests",
            "HTTP responses by status",
            self.requests.clone(),
        );
        add(
            &mut r,
            "flowd_http_request_duration_seconds",
            "Time to response headers",
            self.latency.clone(),
        );
        if let Some((exported, dropped)) = drives.otlp {
            add(
                &mut r,
                "flowd_otlp_exported_spans",
                "Spans the OTLP collector took",
                counter(exported),
            );
            add(
                &mut r,
                "flowd_otlp_dropped_spans",
                "Spans dropped: the export queue was full, or the collector refused or could not be reached",
                counter(dropped),
            );
        }
        let mut s = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_text::encode(&mut s, &r);
        s
    }
}

/// Counts responses by status and their latency.
pub async fn count(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let t = std::time::Instant::now();
    let r = next.run(req).await;
    state
        .metrics()
        .request(r.status().as_u16(), t.elapsed().as_secs_f64());
    r
}

#[utoipa::path(get, path = "/metrics", operation_id = "get_metrics", tag = "service",
    responses(
        (status = 200, description = "Prometheus text format", body = String, content_type = "text/plain"),
        (status = 403, description = "The token is confined to namespaces: the metrics are every namespace's (an `ns=*` token reads them)", body = super::openapi::Problem, content_type = "application/problem+json")))]
pub async fn get_metrics(
    State(state): State<AppState>,
    caller: Option<Extension<Caller>>,
) -> ApiResult<Response> {
    if Caller::seen(caller.as_deref()) != Namespaces::All {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "/metrics counts every namespace's runs and names their Tools: read it with a token whose line says `ns=*` (an admin token)",
        ));
    }
    let workers = match state.service().workers() {
        Some(w) => Some(w.list().await?.len() as u64),
        None => None,
    };
    let text = blocking(&state, move |s| {
        let store = StoreGauges {
            runs: run_counts(s),
            open_calls: open_calls(s),
            workers,
        };
        Ok(s.metrics().render(&store, s.service()))
    })
    .await?;
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        text,
    )
        .into_response())
}

/// Runs by state: the run query's counts over every run, which the store
/// reads from its maintained counters (migration 0014: a few rows per flow
/// and state, exact, the same cost at any store size). Every state is
/// named, a state with no run as 0.
/// What `/metrics` reads from the store at a scrape, each one query that
/// costs the same at any store size: runs by state (the maintained
/// counters), the calls paused runs wait on (the inbox's count over the
/// waiting calls index), and the live workers (with `--workers`).
pub struct StoreGauges {
    pub runs: Vec<(RunState, u64)>,
    pub open_calls: u64,
    pub workers: Option<u64>,
}

/// The calls paused runs wait on: the inbox's exact count.
pub fn open_calls(state: &AppState) -> u64 {
    let one = WaitingQuery {
        limit: 1,
        ..WaitingQuery::default()
    };
    state
        .store()
        .waiting_calls(&one)
        .map_or(0, |page| page.total)
}

pub fn run_counts(state: &AppState) -> Vec<(RunState, u64)> {
    let counts = state
        .store()
        .count_runs(&RunListQuery::default())
        .map(|c| c.by_state)
        .unwrap_or_default();
    [
        RunState::Running,
        RunState::Paused,
        RunState::Completed,
        RunState::Faulted,
        RunState::Halted,
    ]
    .into_iter()
    .map(|st| {
        let n = counts.iter().find(|(s, _)| *s == st).map_or(0, |(_, n)| *n);
        (st, n)
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every metric keeps its name, and the exposition is the 0.0.4 text
    /// format `/metrics` declares.
    #[test]
    fn render_names_every_metric() {
        let m = Metrics::default();
        m.runs_started.inc();
        m.request(200, 0.02);
        m.resume_latency.observe(0.004);
        let stats = crate::service::Stats::default();
        stats.commit.observe(0.0003);
        stats.call_took("calc.json#add", "process", 3);
        let drives = Drives {
            facts: 3,
            ended: [("completed", 1), ("faulted", 0), ("paused", 0)],
            active: 1,
            leases: 2,
            commit: stats.commit.clone(),
            calls: stats.calls.clone(),
            otlp: Some((5, 1)),
        };
        let store = StoreGauges {
            runs: vec![(RunState::Completed, 2), (RunState::Paused, 0)],
            open_calls: 4,
            workers: Some(1),
        };
        let text = m.encode(&store, &drives);
        for line in [
            "# TYPE flowd_runs gauge",
            "flowd_runs{state=\"completed\"} 2",
            "flowd_runs{state=\"paused\"} 0",
            "# HELP flowd_runs_started_total Runs started over HTTP.",
            "# TYPE flowd_runs_started_total counter",
            "flowd_runs_started_total 1",
            "flowd_resumes_total 0",
            "flowd_facts_appended_total 3",
            "flowd_drives_ended_total{outcome=\"completed\"} 1",
            "flowd_drives_ended_total{outcome=\"faulted\"} 0",
            "flowd_drives_ended_total{outcome=\"paused\"} 0",
            "flowd_drives_active 1",
            "flowd_sse_subscribers 0",
            "flowd_http_requests_total{status=\"200\"} 1",
            "# TYPE flowd_http_request_duration_seconds histogram",
            "flowd_http_request_duration_seconds_bucket{le=\"0.01\"} 0",
            "flowd_http_request_duration_seconds_bucket{le=\"0.025\"} 1",
            "flowd_http_request_duration_seconds_bucket{le=\"+Inf\"} 1",
            "flowd_http_request_duration_seconds_count 1",
            "flowd_leases_held 2",
            "flowd_open_calls 4",
            "flowd_workers 1",
            "# TYPE flowd_call_duration_seconds histogram",
            "flowd_call_duration_seconds_bucket{tool=\"calc.json#add\",route=\"process\",le=\"0.0025\"} 0",
            "flowd_call_duration_seconds_bucket{tool=\"calc.json#add\",route=\"process\",le=\"0.005\"} 1",
            "# TYPE flowd_step_commit_seconds histogram",
            "flowd_step_commit_seconds_bucket{le=\"0.00025\"} 0",
            "flowd_step_commit_seconds_bucket{le=\"0.0005\"} 1",
            "flowd_step_commit_seconds_count 1",
            "# TYPE flowd_resume_duration_seconds histogram",
            "flowd_resume_duration_seconds_bucket{le=\"0.005\"} 1",
            "flowd_resume_duration_seconds_count 1",
            "flowd_otlp_exported_spans_total 5",
            "flowd_otlp_dropped_spans_total 1",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line:?} missing from\n{text}"
            );
        }
        assert!(
            !text.contains("# EOF"),
            "OpenMetrics, not 0.0.4 text:\n{text}"
        );
    }
}
