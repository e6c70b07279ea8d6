//! Per-run live heads for SSE (ECOSYSTEM §1 "Fan-out"), with no thread
//! per watched run (issue 10, item 4).
//!
//! For each run someone follows, one async follower task keeps a ring of
//! the run's most recent frames (each fact rendered once, shared by every
//! subscriber) and publishes the latest fact number on a `watch`. It wakes
//! on the run service's heads notifier ([`crate::service::heads`]) when this
//! process appended, and otherwise checks the store's head itself with a
//! back-off (a run driven by `flow run` on the same file, or by another
//! server). Facts this process committed come with their stored text and
//! are sent as is; only others' are read, once, off the runtime. A
//! follower ends when its run ends, when nobody follows it, or on shutdown.

use super::AppState;
use axum::body::Bytes;
use flow_store::{Appended, FactKind, RunId, StoredFact};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

/// Facts a follower reads at once.
pub const READ_BATCH: u32 = 256;
/// How long a follower waits before checking the store's head itself, at
/// first and at most.
const POLL_FIRST: Duration = Duration::from_millis(50);
const POLL_MAX: Duration = Duration::from_secs(2);
/// Subscribers per ms of a follower's pause between wake-ups.
const COALESCE_PER_MS: usize = 50;
/// The longest pause between two wake-ups of a run's subscribers.
const COALESCE_MAX: Duration = Duration::from_millis(20);

/// The followed runs.
#[derive(Default)]
pub struct Hub {
    runs: Mutex<HashMap<String, (watch::Sender<u64>, Ring)>>,
}

/// One fact as the feed sends it: its canonical text made once, shared.
pub struct Frame {
    pub n: u64,
    pub kind: FactKind,
    /// `id: n`, `event: kind`, `data: <canonical fact>` and the blank line.
    pub wire: Bytes,
}

impl Frame {
    /// A fact read back from the store.
    pub fn of(f: &StoredFact) -> Arc<Frame> {
        Frame::new(f.n, f.kind(), &f.body)
    }

    /// A fact as this process committed it: its stored canonical text.
    fn committed(a: &Appended) -> Arc<Frame> {
        Frame::new(a.n, a.kind, &a.body)
    }

    fn new(n: u64, kind: FactKind, data: &str) -> Arc<Frame> {
        let mut w = format!("id: {}\nevent: {}\n", n, kind.as_str());
        // Canonical JSON escapes control characters, so this is one line;
        // split anyway, as SSE requires.
        for line in data.split('\n') {
            w.push_str("data: ");
            w.push_str(line.trim_end_matches('\r'));
            w.push('\n');
        }
        w.push('\n');
        Arc::new(Frame {
            n,
            kind,
            wire: Bytes::from(w),
        })
    }
}

/// The follower's most recent frames (at most [`RING`]), in number order.
pub type Ring = Arc<Mutex<VecDeque<Arc<Frame>>>>;
const RING: usize = 4096;

impl Hub {
    /// Follows `run` (whose head is `head`): the watch of its latest fact
    /// number and the ring of its recent frames, shared by every
    /// subscriber of the run.
    pub fn watch(&self, state: &AppState, run: &RunId, head: u64) -> (watch::Receiver<u64>, Ring) {
        let Ok(mut runs) = self.runs.lock() else {
            // A poisoned map: a closed channel makes the subscriber read.
            return (watch::channel(head).1, Ring::default());
        };
        if let Some((tx, ring)) = runs.get(run.as_str())
            && !tx.is_closed()
        {
            return (tx.subscribe(), ring.clone());
        }
        let (tx, rx) = watch::channel(head);
        let ring = Ring::default();
        runs.insert(run.to_string(), (tx.clone(), ring.clone()));
        drop(runs);
        tokio::spawn(follow(state.clone(), run.clone(), head, tx, ring.clone()));
        (rx, ring)
    }

    fn forget(&self, run: &RunId, tx: &watch::Sender<u64>) {
        if let Ok(mut runs) = self.runs.lock()
            && runs.get(run.as_str()).is_some_and(|t| t.0.same_channel(tx))
        {
            runs.remove(run.as_str());
        }
    }
}

/// The follower task of one run.
async fn follow(state: AppState, run: RunId, mut last: u64, tx: watch::Sender<u64>, ring: Ring) {
    let mut local = state.service().heads().watch(&run, last);
    let shutdown = state.shutdown().clone();
    let mut poll = POLL_FIRST;
    loop {
        // Nobody follows any more: leave, deciding under the map's lock so
        // a new subscriber never gets a dying channel.
        {
            let Ok(mut runs) = state.hub().runs.lock() else {
                return;
            };
            if tx.receiver_count() == 0 {
                if runs
                    .get(run.as_str())
                    .is_some_and(|t| t.0.same_channel(&tx))
                {
                    runs.remove(run.as_str());
                }
                state.service().heads().sweep();
                return;
            }
        }
        let known = *local.borrow_and_update();
        if known <= last {
            // Nothing this process appended: wait for it, or check the
            // store's own head after the back-off.
            let checked = tokio::select! {
                _ = shutdown.cancelled() => break,
                r = local.changed() => { if r.is_err() { break } false }
                _ = tokio::time::sleep(poll) => true,
            };
            if checked {
                let (s, r) = (state.store().clone(), run.clone());
                let head = tokio::task::spawn_blocking(move || s.run_info(&r)).await;
                match head {
                    Ok(Ok(i)) if i.last_fact.n > last => poll = POLL_FIRST,
                    Ok(Ok(i)) => {
                        poll = (poll * 2).min(POLL_MAX);
                        if i.ending.is_some() {
                            break;
                        }
                        continue;
                    }
                    _ => break,
                }
            } else {
                continue;
            }
        }
        // What is new: as this process committed it, or else read from the
        // store, once for every subscriber.
        let frames: Vec<Arc<Frame>> = match state.service().heads().since(&run, last) {
            Some(committed) => committed.iter().map(Frame::committed).collect(),
            None => {
                let (s, r) = (state.store().clone(), run.clone());
                let facts =
                    tokio::task::spawn_blocking(move || s.read_after(&r, last, READ_BATCH)).await;
                match facts {
                    Ok(Ok(f)) => f.iter().map(Frame::of).collect(),
                    Ok(Err(e)) => {
                        tracing::warn!(run.id = %run, error = %e, "SSE follower could not read");
                        break;
                    }
                    Err(_) => break,
                }
            }
        };
        let mut ended = false;
        if let Ok(mut r) = ring.lock() {
            for f in &frames {
                if r.back().is_some_and(|b| b.n + 1 != f.n) {
                    r.clear();
                }
                r.push_back(f.clone());
                ended |= f.kind == FactKind::End;
            }
            while r.len() > RING {
                r.pop_front();
            }
        }
        // The frames go into the ring before the head moves, so a woken
        // subscriber finds them there.
        if let Some(f) = frames.last() {
            last = f.n;
            tx.send_replace(last);
        }
        if ended {
            break;
        }
        // Many subscribers: let commits gather before the next wake-up, so
        // each subscriber wakes (and writes to its socket) once per batch
        // rather than once per commit. The pause grows with the count (1 ms
        // per COALESCE_PER_MS subscribers, at most COALESCE_MAX); a few are
        // woken at once. It delays delivery only, never the run's writer.
        let subscribers = tx.receiver_count();
        if subscribers >= COALESCE_PER_MS {
            let ms = (subscribers / COALESCE_PER_MS) as u64;
            tokio::time::sleep(Duration::from_millis(ms).min(COALESCE_MAX)).await;
        }
    }
    state.hub().forget(&run, &tx);
}
