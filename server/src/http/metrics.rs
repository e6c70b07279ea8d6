//! `/metrics` in the Prometheus text format (0.0.4), from a
//! `prometheus-client` registry owned by the [`super::AppState`] (no
//! process-global recorder, so every test server has its own numbers).

use super::AppState;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use flow_store::{Discover, DiscoveryQuery, RunState};
use prometheus_client::encoding::{EncodeLabelSet, prometheus_text};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Metric, Registry};

/// Request latency buckets (seconds).
const BUCKETS: [f64; 8] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0];

/// The outcomes `flowd_drives_ended_total` counts, each always exported.
const OUTCOMES: [&str; 3] = ["completed", "faulted", "paused"];

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

pub struct Metrics {
    pub runs_started: Counter,
    pub resumes: Counter,
    /// Facts appended by the server's drives.
    pub facts: Counter,
    /// Driver tasks alive now.
    pub drives: Gauge,
    pub sse_subscribers: Gauge,
    /// Drives that ended, by outcome.
    ended: Family<OutcomeLabel, Counter>,
    /// Stored runs by state, set from the store at each scrape.
    runs: Family<StateLabel, Gauge>,
    requests: Family<StatusLabel, Counter>,
    latency: Histogram,
    registry: Registry,
}

/// Registers `metric` under `name` and hands it back. Help texts have no
/// final period: the registry adds one.
fn add<M: Clone + Metric>(registry: &mut Registry, name: &str, help: &str, metric: M) -> M {
    registry.register(name, help, metric.clone());
    metric
}

impl Default for Metrics {
    fn default() -> Metrics {
        let mut registry = Registry::default();
        let r = &mut registry;
        let runs = add(r, "flowd_runs", "Stored runs by state", Family::default());
        let runs_started = add(
            r,
            "flowd_runs_started",
            "Runs started over HTTP",
            Counter::default(),
        );
        let resumes = add(
            r,
            "flowd_resumes",
            "Replies admitted over HTTP",
            Counter::default(),
        );
        let facts = add(
            r,
            "flowd_facts_appended",
            "Facts appended by the server's drives",
            Counter::default(),
        );
        let ended: Family<OutcomeLabel, Counter> = add(
            r,
            "flowd_drives_ended",
            "Drives that ended or paused, by outcome",
            Family::default(),
        );
        let drives = add(
            r,
            "flowd_drives_active",
            "Driver tasks alive",
            Gauge::default(),
        );
        let sse_subscribers = add(
            r,
            "flowd_sse_subscribers",
            "Open SSE streams",
            Gauge::default(),
        );
        let requests = add(
            r,
            "flowd_http_requests",
            "HTTP responses by status",
            Family::default(),
        );
        let latency = add(
            r,
            "flowd_http_request_duration_seconds",
            "Time to response headers",
            Histogram::new(BUCKETS),
        );
        for outcome in OUTCOMES {
            // Created now so every outcome is exported, at 0 until it happens.
            drop(ended.get_or_create(&OutcomeLabel { outcome }));
        }
        Metrics {
            runs_started,
            resumes,
            facts,
            drives,
            sse_subscribers,
            ended,
            runs,
            requests,
            latency,
            registry,
        }
    }
}

impl Metrics {
    pub fn finished(&self, state: &str) {
        if let Some(outcome) = OUTCOMES.into_iter().find(|o| *o == state) {
            self.ended.get_or_create(&OutcomeLabel { outcome }).inc();
        }
    }

    fn request(&self, status: u16, secs: f64) {
        self.requests.get_or_create(&StatusLabel { status }).inc();
        self.latency.observe(secs);
    }

    /// The text exposition; `runs` are the counts by state from the store.
    pub fn render(&self, runs: &[(RunState, u64)]) -> String {
        for (st, n) in runs {
            let state = st.as_str();
            self.runs
                .get_or_create(&StateLabel { state })
                .set(i64::try_from(*n).unwrap_or(i64::MAX));
        }
        let mut s = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_text::encode(&mut s, &self.registry);
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

/// Runs by state, counted through discovery (bounded: at most 50 pages of
/// 200 per state, so a scrape stays cheap).
pub fn run_counts(state: &AppState) -> Vec<(RunState, u64)> {
    let mut out = Vec::new();
    for st in [
        RunState::Running,
        RunState::Paused,
        RunState::Completed,
        RunState::Faulted,
        RunState::Halted,
    ] {
        let mut n = 0u64;
        let mut after = None;
        for _ in 0..50 {
            let q = DiscoveryQuery {
                limit: Some(DiscoveryQuery::MAX_LIMIT),
                after: after.clone(),
                state: Some(st),
            };
            let Ok(p) = state.store().discover(&q) else {
                break;
            };
            n += p.runs.len() as u64;
            match p.next_after {
                Some(a) => after = Some(a),
                None => break,
            }
        }
        out.push((st, n));
    }
    out
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
        m.facts.inc_by(3);
        m.drives.inc();
        m.finished("completed");
        m.request(200, 0.02);
        let text = m.render(&[(RunState::Completed, 2), (RunState::Paused, 0)]);
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
