//! hitl deadlines in the server (issue 7: "keeps every hitl deadline").
//!
//! The driver records each deadline as a `timeout` host record with its
//! `due_ms` and applies the ones that passed when a run is resumed without
//! a reply (`Driver::resume` calls `Machine::expire`). This service only
//! decides *when*: it keeps the due times of paused runs in a min-heap —
//! filled at start from every paused run's host records, and again
//! whenever one of the server's drives pauses — sleeps until the earliest,
//! and then continues that run with no reply, as `POST …/resume {}` does.
//! Because the due time is durable, a deadline that passed while the
//! server was down fires at the next start.

use super::AppState;
use flow_store::{
    Discover, DiscoveryQuery, HostRecordKind, HostRecords, ReadHistory, RunId, RunState,
};
use serde_json::Value as Json;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::Notify;

/// The pending deadlines: `(due_ms, run)`, earliest first.
#[derive(Default)]
pub struct Deadlines {
    heap: Mutex<BinaryHeap<Reverse<(i64, String)>>>,
    changed: Notify,
}

impl Deadlines {
    /// Adds the deadlines `run`'s host records name (the ones already
    /// applied are harmless: the run is then no longer paused on them).
    pub fn watch_run(&self, state: &AppState, run: &RunId) {
        let Ok(records) = state.store().host_records(run) else {
            return;
        };
        // Only deadlines of calls still open: an expired or answered call
        // has its Close or Reply.
        let Ok(open) = super::routes::open_call_ids(state, run) else {
            return;
        };
        let mut added = false;
        if let Ok(mut h) = self.heap.lock() {
            for r in records.iter().filter(|r| r.kind == HostRecordKind::Timeout) {
                let call = r.details.get("call").and_then(Json::as_str);
                if let (Some(due), Some(true)) = (
                    r.details.get("due_ms").and_then(Json::as_i64),
                    call.map(|c| open.contains(c)),
                ) {
                    h.push(Reverse((due, run.to_string())));
                    added = true;
                }
            }
        }
        if added {
            self.changed.notify_one();
        }
    }

    /// Scans every paused run once (at start).
    pub fn load(&self, state: &AppState) {
        let mut after = None;
        loop {
            let q = DiscoveryQuery {
                limit: Some(DiscoveryQuery::MAX_LIMIT),
                after: after.clone(),
                state: Some(RunState::Paused),
            };
            let Ok(page) = state.store().discover(&q) else {
                return;
            };
            for row in &page.runs {
                if let Ok(id) = RunId::parse(&row.run) {
                    self.watch_run(state, &id);
                }
            }
            match page.next_after {
                Some(n) => after = Some(n),
                None => return,
            }
        }
    }

    fn pop_due(&self, now: i64) -> (Vec<String>, Option<i64>) {
        let mut due = Vec::new();
        let Ok(mut h) = self.heap.lock() else {
            return (due, None);
        };
        while let Some(Reverse((at, _))) = h.peek() {
            if *at > now {
                break;
            }
            if let Some(Reverse((_, run))) = h.pop()
                && !due.contains(&run)
            {
                due.push(run);
            }
        }
        (due, h.peek().map(|Reverse((at, _))| *at))
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The service loop: ends on shutdown.
pub async fn service(state: AppState) {
    let token = state.shutdown().clone();
    {
        let s = state.clone();
        let _ = tokio::task::spawn_blocking(move || s.deadlines().load(&s)).await;
    }
    loop {
        let (due, next) = state.deadlines().pop_due(now_ms());
        for run in due {
            fire(&state, &run).await;
        }
        let wait = match next {
            Some(at) => Duration::from_millis((at - now_ms()).clamp(0, 60_000) as u64),
            None => Duration::from_secs(60),
        };
        tokio::select! {
            _ = token.cancelled() => return,
            _ = state.deadlines().changed.notified() => {}
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// Continues a paused run whose deadline passed.
async fn fire(state: &AppState, run: &str) {
    let Ok(run) = RunId::parse(run) else { return };
    match state.store().run_info(&run) {
        Ok(i) if i.state == RunState::Paused => {}
        _ => return,
    }
    let Ok((_, program, facts)) = state.driver().program_of(&run) else {
        return;
    };
    let Ok(host) = state.bind(&program).await else {
        tracing::warn!(run.id = %run, "deadline: the run's Tools cannot be bound");
        return;
    };
    if !state.claim(&run) {
        // A drive is going; it will pause again and re-arm the deadline.
        return;
    }
    tracing::info!(run.id = %run, "hitl deadline passed; continuing the run");
    let driver = state.driver().clone();
    let r = run.clone();
    let _ = state.drive_in_task(run, host, move |host| {
        Box::pin(async move { driver.resume(&r, program, facts, None, &host).await })
    });
}
