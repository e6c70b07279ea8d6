//! hitl deadlines (DESIGN §4: "`timeout_seconds` is a durable deadline (it
//! survives restarts)").
//!
//! A drive records each deadline as a `timeout` host record with its
//! `due_ms`; a resume applies the ones that passed (`Machine::expire`).
//! This part only decides *when*: it keeps the due times of paused runs in
//! a min-heap — filled at start from every paused run's host records, and
//! again whenever a drive pauses — sleeps until the earliest, and then
//! continues that run with no reply, as `POST …/resume {}` does. Because
//! the due time is durable, a deadline that passed while the server was
//! down fires at the next start.
//!
//! With several servers on one store every server keeps the heap (loaded
//! again every [`RELOAD`], so a run paused by a server that died is
//! found), and a deadline fires once: firing claims the run (its lease),
//! and only under the claim checks that the run is still paused with a
//! deadline passed on a call still open. Whoever comes second finds the
//! lease taken or the call closed.

use super::RunService;
use flow_store::{HostDetails, RunId, RunState};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet};
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::Notify;

/// How often a server sharing its store loads every paused run's
/// deadlines again.
const RELOAD: Duration = Duration::from_secs(30);

/// A deadline: `(due_ms, run)`.
type Due = (i64, String);

/// The pending deadlines, earliest first, each once.
#[derive(Default)]
pub struct Deadlines {
    heap: Mutex<(BinaryHeap<Reverse<Due>>, HashSet<Due>)>,
    changed: Notify,
}

/// The wall clock, unix milliseconds (the host's, never the engine's).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl Deadlines {
    /// Adds the deadlines of `run`'s calls still open (an expired or
    /// answered call has its Close or Reply).
    pub(super) async fn watch_run(&self, service: &RunService, run: &RunId) {
        let (s, r) = (service.clone(), run.clone());
        let due = tokio::task::spawn_blocking(move || due_of(&s, &r)).await;
        if let Ok(due) = due {
            self.arm(run.as_str(), due);
        }
    }

    /// Adds deadlines of `run` due at `due` (unix milliseconds), each
    /// once, and wakes the timer.
    fn arm(&self, run: &str, due: Vec<i64>) {
        if due.is_empty() {
            return;
        }
        if let Ok(mut h) = self.heap.lock() {
            let (heap, armed) = &mut *h;
            for d in due {
                if armed.insert((d, run.to_string())) {
                    heap.push(Reverse((d, run.to_string())));
                }
            }
        }
        self.changed.notify_one();
    }

    /// The runs whose deadlines passed, by `clock` (unix milliseconds):
    /// at once when some have, else once the earliest passes or an
    /// earlier one is added; none when `limit` passed first.
    async fn next(&self, clock: &(dyn Fn() -> i64 + Sync), limit: Duration) -> Vec<String> {
        let began = tokio::time::Instant::now();
        loop {
            let changed = self.changed.notified();
            let (due, next) = self.pop_due(clock());
            if !due.is_empty() {
                return due;
            }
            let left = limit.saturating_sub(began.elapsed());
            if left.is_zero() {
                return due;
            }
            // Not due yet: at least a millisecond away by `clock`.
            let wait = match next {
                Some(at) => Duration::from_millis((at - clock()).max(1) as u64).min(left),
                None => left,
            };
            tokio::select! {
                () = changed => {}
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    fn pop_due(&self, now: i64) -> (Vec<String>, Option<i64>) {
        let mut due = Vec::new();
        let Ok(mut h) = self.heap.lock() else {
            return (due, None);
        };
        let (heap, armed) = &mut *h;
        while let Some(Reverse((at, _))) = heap.peek() {
            if *at > now {
                break;
            }
            if let Some(Reverse((at, run))) = heap.pop() {
                armed.remove(&(at, run.clone()));
                if !due.contains(&run) {
                    due.push(run);
                }
            }
        }
        (due, heap.peek().map(|Reverse((at, _))| *at))
    }
}

/// The due times of `run`'s deadlines on calls still open.
fn due_of(service: &RunService, run: &RunId) -> Vec<i64> {
    let Ok(records) = service.store().host_records(run) else {
        return Vec::new();
    };
    let due: Vec<(&str, i64)> = records
        .iter()
        .filter_map(|r| match &r.details {
            HostDetails::Timeout { call, due_ms } => Some((call.as_str(), *due_ms)),
            _ => None,
        })
        .collect();
    if due.is_empty() {
        return Vec::new();
    }
    let Ok(open) = service.open_calls(run) else {
        return Vec::new();
    };
    due.into_iter()
        .filter(|(c, _)| open.iter().any(|o| o.call == *c))
        .map(|(_, at)| at)
        .collect()
}

/// Every paused run (at start, and every [`RELOAD`] when the store is
/// shared).
async fn load(service: &RunService) {
    let paused = super::store::blocking(service.store(), |s| super::inbox::paused_runs(s, None));
    let Ok(runs) = paused.await else {
        return;
    };
    for id in &runs {
        service.inner.deadlines.watch_run(service, id).await;
    }
}

/// The deadline loop: ends on shutdown.
pub(super) async fn service(service: RunService) {
    let token = service.shutdown_token().clone();
    load(&service).await;
    let mut loaded = tokio::time::Instant::now();
    loop {
        if service.inner.leasing.is_some() && loaded.elapsed() >= RELOAD {
            load(&service).await;
            loaded = tokio::time::Instant::now();
        }
        let due = tokio::select! {
            () = token.cancelled() => return,
            due = service.inner.deadlines.next(&now_ms, RELOAD) => due,
        };
        for run in due {
            fire(&service, &run).await;
        }
    }
}

/// Continues a paused run whose deadline passed. A run being driven now
/// (here or by another server) will pause again and re-arm its deadline.
async fn fire(service: &RunService, run: &str) {
    let Ok(run) = RunId::parse(run) else { return };
    // A draining server starts no drive; the deadline fires where the run
    // is continued next (another server's reload, or this one's restart).
    if !service.accepting() {
        return;
    }
    // A nested run's deadline is applied by the outermost run whose drive
    // carries it: continuing that run continues the nested one.
    let r = run.clone();
    let root = super::store::blocking(service.store(), move |s| {
        Ok(super::nested::live_root(s, &r)?.0)
    })
    .await
    .unwrap_or_else(|_| run.clone());
    let claim = match service.claim(&root, false).await {
        Ok(c) => c,
        Err(e) => {
            tracing::debug!(run.id = %run, error = %e, "deadline: the run is driven now");
            return;
        }
    };
    // Under the claim: still paused, with a deadline passed on a call still
    // open (another server may have fired it already).
    let (s, r) = (service.clone(), run.clone());
    let due = tokio::task::spawn_blocking(move || {
        matches!(s.store().run_info(&r), Ok(i) if i.state == RunState::Paused)
            && due_of(&s, &r).iter().any(|d| *d <= now_ms())
    })
    .await;
    if !matches!(due, Ok(true)) {
        return;
    }
    tracing::info!(run.id = %run, "hitl deadline passed; continuing the run");
    if let Err(e) = service.resume_claimed(claim, None).await {
        tracing::warn!(run.id = %run, error = %e, "deadline: the run cannot be continued");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use tokio::time::Instant;

    /// A wall clock that moves with tokio's (paused) clock.
    fn clock() -> impl Fn() -> i64 + Send + Sync {
        let start = Instant::now();
        move || 1_000_000 + start.elapsed().as_millis() as i64
    }

    #[tokio::test(start_paused = true)]
    async fn deadlines_fire_in_order_each_once_when_due() {
        let (d, now) = (Deadlines::default(), clock());
        let start = Instant::now();
        d.arm("run-a", vec![now() + 5_000]);
        d.arm("run-b", vec![now() + 2_000, now() + 2_000]);
        assert_eq!(d.next(&now, RELOAD).await, vec!["run-b"]);
        assert_eq!(start.elapsed(), Duration::from_secs(2));
        assert_eq!(d.next(&now, RELOAD).await, vec!["run-a"]);
        assert_eq!(start.elapsed(), Duration::from_secs(5));
        // Nothing armed: the timer gives up at the limit.
        assert!(d.next(&now, Duration::from_secs(30)).await.is_empty());
        assert_eq!(start.elapsed(), Duration::from_secs(35));
    }

    #[tokio::test(start_paused = true)]
    async fn an_earlier_deadline_armed_while_waiting_fires_first() {
        let d = Arc::new(Deadlines::default());
        let now = Arc::new(clock());
        let start = Instant::now();
        d.arm("run-late", vec![now() + 60_000]);
        let waiting = {
            let (d, now) = (d.clone(), now.clone());
            tokio::spawn(async move { d.next(&*now, RELOAD).await })
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        d.arm("run-soon", vec![now() + 2_000]);
        assert_eq!(waiting.await.unwrap(), vec!["run-soon"]);
        assert_eq!(start.elapsed(), Duration::from_secs(3));
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_that_passed_while_down_fires_at_once() {
        let (d, now) = (Deadlines::default(), clock());
        let start = Instant::now();
        d.arm("run-past", vec![now() - 10_000]);
        assert_eq!(d.next(&now, RELOAD).await, vec!["run-past"]);
        assert_eq!(start.elapsed(), Duration::ZERO);
    }
}
