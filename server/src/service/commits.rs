//! Commits under way: when each began, so `/healthz` can tell a store that
//! stopped committing (a locked database, a hung disk) from one that is
//! merely busy.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Default)]
pub struct Commits {
    next: AtomicU64,
    open: Mutex<BTreeMap<u64, Instant>>,
}

/// One commit under way; dropping it (done or failed) ends it.
pub struct Committing {
    commits: Arc<Commits>,
    id: u64,
}

impl Commits {
    pub fn begin(self: &Arc<Self>) -> Committing {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut o) = self.open.lock() {
            o.insert(id, Instant::now());
        }
        Committing {
            commits: self.clone(),
            id,
        }
    }

    /// How long the oldest commit under way has waited.
    pub fn oldest(&self) -> Option<Duration> {
        let o = self.open.lock().ok()?;
        o.values().next().map(Instant::elapsed)
    }
}

impl Drop for Committing {
    fn drop(&mut self) {
        if let Ok(mut o) = self.commits.open.lock() {
            o.remove(&self.id);
        }
    }
}
