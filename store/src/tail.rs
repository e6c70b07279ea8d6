//! Live tail (issue 3 §4; DESIGN §6 SSE: "backlog first, then live").
//!
//! The writer bumps a per-run head (the last durable fact number) after each
//! COMMIT; a tail waits on it with a `Condvar` and catches up by reading the
//! store. STYLE rule 9: "subscribe first, then read the backlog, drop
//! duplicates by fact number" — here the order is made safe differently:
//! the tail reads the store, and only waits while the head it sees (under
//! the heads lock) is not past what it has yielded, so a commit between the
//! read and the wait is never missed; facts are yielded strictly by number
//! (`last + 1` next), so nothing is duplicated or skipped. No async runtime
//! is needed; a server drives a tail from `spawn_blocking`.

use crate::api::{HeadNote, HeadObserver, ReadHistory, StoredFact, Tail, TailEvent};
use crate::error::Result;
use crate::fact::FactKind;
use flow_abi::fact::RunId;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// `now + timeout`, saturating: a caller's huge timeout never panics.
fn deadline_after(timeout: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(timeout)
        .unwrap_or_else(|| now + Duration::from_secs(365 * 24 * 3600))
}

/// A run some blocking tail waits on: the highest durable head told
/// since the first tail of it began, and how many tails wait on it.
struct Watched {
    head: u64,
    tails: usize,
}

#[derive(Default)]
struct HeadMap {
    heads: HashMap<String, Watched>,
    /// Bumped by [`Heads::resync`], so a waiter re-reads the store rather
    /// than missing a head nobody could tell.
    generation: u64,
}

/// Where durable heads are told: to every observer (the server's one
/// registry of followed runs, `service/heads.rs`, which feeds SSE), and
/// to the blocking tails ([`StoreTail`], the local `flow watch`) waiting
/// on their run. Only runs a tail waits on are kept, so a commit of any
/// other run costs one map look-up here.
#[derive(Default)]
pub struct Heads {
    map: Mutex<HeadMap>,
    changed: Condvar,
    observers: Mutex<Vec<HeadObserver>>,
}

impl Heads {
    /// Adds an observer of every bump from now on.
    pub fn observe(&self, observer: HeadObserver) {
        if let Ok(mut o) = self.observers.lock() {
            o.push(observer);
        }
    }

    /// Records new durable heads, wakes waiters and tells observers.
    pub fn bump(&self, items: &[HeadNote]) {
        if items.is_empty() {
            return;
        }
        if let Ok(o) = self.observers.lock() {
            for f in o.iter() {
                for note in items {
                    f(note);
                }
            }
        }
        let mut told = false;
        if let Ok(mut m) = self.map.lock() {
            for note in items {
                if let Some(w) = m.heads.get_mut(note.run.as_str()) {
                    w.head = w.head.max(note.n);
                    told = true;
                }
            }
        }
        if told {
            self.changed.notify_all();
        }
    }

    /// A tail begins waiting on `run`: its heads are kept from now on.
    fn watch(&self, run: &str) {
        if let Ok(mut m) = self.map.lock() {
            m.heads
                .entry(run.to_string())
                .or_insert(Watched { head: 0, tails: 0 })
                .tails += 1;
        }
    }

    /// A tail of `run` ended; the run's head is forgotten with its last.
    fn unwatch(&self, run: &str) {
        if let Ok(mut m) = self.map.lock()
            && let Some(w) = m.heads.get_mut(run)
        {
            w.tails -= 1;
            if w.tails == 0 {
                m.heads.remove(run);
            }
        }
    }

    /// Wakes every waiter to read the store again: heads may have moved
    /// while nobody could tell (a notification connection was lost).
    pub fn resync(&self) {
        if let Ok(mut m) = self.map.lock() {
            m.generation += 1;
        }
        self.changed.notify_all();
    }

    /// Waits until `run`'s head passes `after` (or a resync) or `timeout`
    /// elapses; true when the caller should read the store again. Only a
    /// watched run's head is told (a [`StoreTail`] watches its run).
    pub fn wait_past(&self, run: &str, after: u64, timeout: Duration) -> bool {
        let deadline = deadline_after(timeout);
        let Ok(mut m) = self.map.lock() else {
            return false;
        };
        let generation = m.generation;
        loop {
            if m.generation != generation || m.heads.get(run).is_some_and(|w| w.head > after) {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            match self.changed.wait_timeout(m, deadline - now) {
                Ok((g, _)) => m = g,
                Err(_) => return false,
            }
        }
    }
}

/// A tail over any [`ReadHistory`] whose writes bump `heads`.
pub struct StoreTail<R> {
    store: R,
    heads: Arc<Heads>,
    run: RunId,
    last: u64,
    buf: VecDeque<StoredFact>,
    ended: bool,
}

impl<R: ReadHistory> StoreTail<R> {
    /// A tail of `run` yielding facts after `after`. Refuses an unknown run.
    /// The run is watched before the store is first read, so no head
    /// committed after that read is missed.
    pub fn new(store: R, heads: Arc<Heads>, run: &RunId, after: u64) -> Result<StoreTail<R>> {
        heads.watch(run.as_str());
        let tail = StoreTail {
            store,
            heads,
            run: run.clone(),
            last: after,
            buf: VecDeque::new(),
            ended: false,
        };
        tail.store.run_info(run)?;
        Ok(tail)
    }
}

impl<R> Drop for StoreTail<R> {
    fn drop(&mut self) {
        self.heads.unwatch(self.run.as_str());
    }
}

impl<R: ReadHistory + Send> Tail for StoreTail<R> {
    fn next_event(&mut self, timeout: Duration) -> Result<TailEvent> {
        let deadline = deadline_after(timeout);
        loop {
            if let Some(f) = self.buf.pop_front() {
                self.last = f.n;
                self.ended = f.kind() == FactKind::End;
                return Ok(TailEvent::Fact(Box::new(f)));
            }
            if self.ended {
                return Ok(TailEvent::Ended);
            }
            let facts = self.store.read_after(&self.run, self.last, 256)?;
            if !facts.is_empty() {
                self.buf.extend(facts);
                continue;
            }
            let now = Instant::now();
            if now >= deadline
                || !self
                    .heads
                    .wait_past(self.run.as_str(), self.last, deadline - now)
            {
                return Ok(TailEvent::Idle);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "run-01m8a3x9n2b4c5d6e7f8g9h0j1";
    const B: &str = "run-01m8a3x9n2b4c5d6e7f8g9h0j2";

    fn note(run: &str, n: u64) -> HeadNote {
        HeadNote {
            run: RunId::parse(run).unwrap(),
            n,
            facts: Vec::new(),
        }
    }

    #[test]
    fn only_watched_runs_keep_their_heads_and_their_waiters_wake() {
        let heads = Arc::new(Heads::default());
        heads.bump(&[note(A, 3)]);
        assert!(heads.map.lock().unwrap().heads.is_empty());
        heads.watch(A);
        heads.watch(A);
        let h = heads.clone();
        let waiter = std::thread::spawn(move || h.wait_past(A, 3, Duration::from_secs(30)));
        heads.bump(&[note(B, 9), note(A, 4)]);
        assert!(waiter.join().unwrap());
        assert!(!heads.wait_past(A, 4, Duration::from_millis(1)));
        heads.unwatch(A);
        assert!(heads.wait_past(A, 3, Duration::ZERO));
        heads.unwatch(A);
        assert!(heads.map.lock().unwrap().heads.is_empty());
    }
}
