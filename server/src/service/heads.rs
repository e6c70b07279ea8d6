//! The heads notifier: one per service (so one per process and store), no
//! thread per watched run (issue 10, item 4). Whoever follows a run live
//! (the SSE hub) takes a `watch` of its head; the service bumps it after
//! each durable append of its own drives, and the store's head observer
//! bumps it for every head the store learns of — on Postgres, every
//! server's commits, from the store's one LISTEN connection. Appends the
//! store cannot tell of (`flow run` on the same SQLite file) are found by
//! the follower's own (backed-off) check of the run's head.

use flow_store::RunId;
use std::collections::HashMap;
use std::sync::Mutex;
use tokio::sync::watch;

#[derive(Default)]
pub struct Heads {
    runs: Mutex<HashMap<RunId, watch::Sender<u64>>>,
}

impl Heads {
    /// A watch of `run`'s durable head (the last fact number), starting at
    /// `head` unless the run is followed already.
    pub fn watch(&self, run: &RunId, head: u64) -> watch::Receiver<u64> {
        let Ok(mut runs) = self.runs.lock() else {
            return watch::channel(head).1;
        };
        runs.entry(run.clone())
            .or_insert_with(|| watch::channel(head).0)
            .subscribe()
    }

    /// Tells followers of `run` that facts up to `n` are durable.
    pub(super) fn bump(&self, run: &RunId, n: u64) {
        let Ok(mut runs) = self.runs.lock() else {
            return;
        };
        if let Some(tx) = runs.get(run) {
            if tx.receiver_count() == 0 {
                runs.remove(run);
            } else {
                tx.send_if_modified(|h| {
                    let moved = n > *h;
                    *h = (*h).max(n);
                    moved
                });
            }
        }
    }

    /// [`Heads::bump`] from the store's observer (any server's commit).
    pub(super) fn bump_str(&self, run: &str, n: u64) {
        let followed = self.runs.lock().is_ok_and(|r| !r.is_empty());
        if followed && let Ok(run) = RunId::parse(run) {
            self.bump(&run, n);
        }
    }

    /// Forgets runs nobody follows any more.
    pub fn sweep(&self) {
        if let Ok(mut runs) = self.runs.lock() {
            runs.retain(|_, tx| tx.receiver_count() > 0);
        }
    }
}
