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

/// Most runs whose heads are remembered; past it the map starts over.
const MAX_HEADS: usize = 100_000;

#[derive(Default)]
struct HeadMap {
    heads: HashMap<String, u64>,
    /// Bumped when the map starts over, so a waiter re-reads the store
    /// rather than missing a head that was forgotten.
    generation: u64,
}

/// Durable heads of runs written through this process's writer.
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
        if let Ok(mut m) = self.map.lock() {
            if m.heads.len() + items.len() > MAX_HEADS {
                m.heads.clear();
                m.generation += 1;
            }
            for note in items {
                match m.heads.get_mut(&note.run) {
                    Some(e) => *e = (*e).max(note.n),
                    None => {
                        m.heads.insert(note.run.clone(), note.n);
                    }
                }
            }
        }
        self.changed.notify_all();
    }

    /// Wakes every waiter to read the store again: heads may have moved
    /// while nobody could tell (a notification connection was lost).
    pub fn resync(&self) {
        if let Ok(mut m) = self.map.lock() {
            m.generation += 1;
        }
        self.changed.notify_all();
    }

    /// Waits until `run`'s head passes `after` (or the map started over) or
    /// `timeout` elapses; true when the caller should read the store again.
    pub fn wait_past(&self, run: &str, after: u64, timeout: Duration) -> bool {
        let deadline = deadline_after(timeout);
        let Ok(mut m) = self.map.lock() else {
            return false;
        };
        let generation = m.generation;
        loop {
            if m.generation != generation || m.heads.get(run).copied().unwrap_or(0) > after {
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
    pub fn new(store: R, heads: Arc<Heads>, run: &RunId, after: u64) -> Result<StoreTail<R>> {
        store.run_info(run)?;
        Ok(StoreTail {
            store,
            heads,
            run: run.clone(),
            last: after,
            buf: VecDeque::new(),
            ended: false,
        })
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
