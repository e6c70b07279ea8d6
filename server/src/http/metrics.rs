//! `/metrics` in the Prometheus text format, from a small registry owned by
//! the [`super::AppState`] (no process-global recorder, so every test
//! server has its own numbers).

use super::AppState;
use crate::service::RunService;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use flow_store::{DiscoveryQuery, RunState};
use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

#[derive(Default)]
pub struct Counter(AtomicU64);

impl Counter {
    pub fn inc(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

#[derive(Default)]
pub struct Gauge(AtomicI64);

impl Gauge {
    pub fn inc(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
    pub fn dec(&self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
    pub fn get(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Request latency buckets (seconds).
const BUCKETS: [f64; 8] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0];

#[derive(Default)]
pub struct Metrics {
    pub runs_started: Counter,
    pub resumes: Counter,
    pub sse_subscribers: Gauge,
    requests: Mutex<Vec<(u16, u64)>>,
    latency: Mutex<([u64; 8], u64, f64)>,
}

impl Metrics {
    fn request(&self, status: u16, secs: f64) {
        if let Ok(mut r) = self.requests.lock() {
            match r.iter_mut().find(|(s, _)| *s == status) {
                Some((_, n)) => *n += 1,
                None => r.push((status, 1)),
            }
        }
        if let Ok(mut l) = self.latency.lock() {
            for (i, b) in BUCKETS.iter().enumerate() {
                if secs <= *b {
                    l.0[i] += 1;
                }
            }
            l.1 += 1;
            l.2 += secs;
        }
    }

    /// The text exposition; `runs` are the counts by state from the store,
    /// the drive counts the run service's.
    pub fn render(&self, runs: &[(RunState, u64)], service: &RunService) -> String {
        let stats = service.stats();
        let get = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
        let mut s = String::new();
        let _ = writeln!(
            s,
            "# HELP flowd_runs Stored runs by state.\n# TYPE flowd_runs gauge"
        );
        for (st, n) in runs {
            let _ = writeln!(s, "flowd_runs{{state=\"{}\"}} {n}", st.as_str());
        }
        let counters = [
            (
                "flowd_runs_started_total",
                "Runs started over HTTP.",
                self.runs_started.get(),
            ),
            (
                "flowd_resumes_total",
                "Replies admitted over HTTP.",
                self.resumes.get(),
            ),
            (
                "flowd_facts_appended_total",
                "Facts appended by the server's drives.",
                get(&stats.facts),
            ),
        ];
        for (name, help, v) in counters {
            let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}");
        }
        let _ = writeln!(
            s,
            "# HELP flowd_drives_ended_total Drives that ended or paused, by outcome.\n# TYPE flowd_drives_ended_total counter"
        );
        for (o, v) in [
            ("completed", get(&stats.completed)),
            ("faulted", get(&stats.faulted)),
            ("paused", get(&stats.paused)),
        ] {
            let _ = writeln!(s, "flowd_drives_ended_total{{outcome=\"{o}\"}} {v}");
        }
        let gauges = [
            (
                "flowd_drives_active",
                "Driver tasks alive.",
                service.active_drives() as i64,
            ),
            (
                "flowd_sse_subscribers",
                "Open SSE streams.",
                self.sse_subscribers.get(),
            ),
        ];
        for (name, help, v) in gauges {
            let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
        }
        let _ = writeln!(
            s,
            "# HELP flowd_http_requests_total HTTP responses by status.\n# TYPE flowd_http_requests_total counter"
        );
        if let Ok(r) = self.requests.lock() {
            let mut r = r.clone();
            r.sort();
            for (st, n) in r {
                let _ = writeln!(s, "flowd_http_requests_total{{status=\"{st}\"}} {n}");
            }
        }
        let _ = writeln!(
            s,
            "# HELP flowd_http_request_duration_seconds Time to response headers.\n# TYPE flowd_http_request_duration_seconds histogram"
        );
        if let Ok(l) = self.latency.lock() {
            for (i, b) in BUCKETS.iter().enumerate() {
                let _ = writeln!(
                    s,
                    "flowd_http_request_duration_seconds_bucket{{le=\"{b}\"}} {}",
                    l.0[i]
                );
            }
            let _ = writeln!(
                s,
                "flowd_http_request_duration_seconds_bucket{{le=\"+Inf\"}} {}",
                l.1
            );
            let _ = writeln!(s, "flowd_http_request_duration_seconds_sum {}", l.2);
            let _ = writeln!(s, "flowd_http_request_duration_seconds_count {}", l.1);
        }
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
