//! The heads notifier: one per service (so one per process and store), no
//! thread per watched run (issue 10, item 4). Whoever follows a run live
//! (the SSE hub) takes a `watch` of its head; the store's head observer
//! bumps it for every durable head the store learns of — this process's
//! commits, with the facts' stored text, and on Postgres every other
//! server's too, from the store's one LISTEN connection, with the number
//! only. A followed run keeps its latest committed facts, so a follower
//! hands them on as they were stored, without reading them back. Appends
//! the store cannot tell of (`flow run` on the same SQLite file) are found
//! by the follower's own (backed-off) check of the run's head.

use flow_store::{Appended, HeadNote, RunId};
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use tokio::sync::watch;

/// The facts a followed run keeps for its follower, at most.
const RECENT: usize = 1024;

#[derive(Default)]
pub struct Heads {
    runs: Mutex<HashMap<RunId, Followed>>,
}

struct Followed {
    head: watch::Sender<u64>,
    /// Consecutive facts up to the head, as committed here.
    recent: VecDeque<Appended>,
}

impl Heads {
    /// A watch of `run`'s durable head (the last fact number), starting at
    /// `head` unless the run is followed already.
    pub fn watch(&self, run: &RunId, head: u64) -> watch::Receiver<u64> {
        let Ok(mut runs) = self.runs.lock() else {
            return watch::channel(head).1;
        };
        runs.entry(run.clone())
            .or_insert_with(|| Followed {
                head: watch::channel(head).0,
                recent: VecDeque::new(),
            })
            .head
            .subscribe()
    }

    /// The committed facts of `run` after `after`, if this process holds
    /// every one of them up to the head it last told of; `None` means
    /// read them from the store.
    pub fn since(&self, run: &RunId, after: u64) -> Option<Vec<Appended>> {
        let runs = self.runs.lock().ok()?;
        let f = runs.get(run)?;
        let head = *f.head.borrow();
        let first = f.recent.front()?.n;
        let last = f.recent.back()?.n;
        if first > after + 1 || last != head {
            return None;
        }
        Some(f.recent.iter().filter(|a| a.n > after).cloned().collect())
    }

    /// Tells followers of a run that facts up to `note.n` are durable.
    pub(super) fn bump(&self, note: &HeadNote) {
        let Ok(mut runs) = self.runs.lock() else {
            return;
        };
        if runs.is_empty() {
            return;
        }
        let Ok(run) = RunId::parse(&note.run) else {
            return;
        };
        let Some(f) = runs.get_mut(&run) else {
            return;
        };
        if f.head.receiver_count() == 0 {
            runs.remove(&run);
            return;
        }
        for a in &note.facts {
            if f.recent.back().is_some_and(|b| b.n + 1 != a.n) {
                f.recent.clear();
            }
            if f.recent.back().is_none_or(|b| b.n < a.n) {
                f.recent.push_back(a.clone());
            }
        }
        while f.recent.len() > RECENT {
            f.recent.pop_front();
        }
        f.head.send_if_modified(|h| {
            let moved = note.n > *h;
            *h = (*h).max(note.n);
            moved
        });
    }

    /// Forgets runs nobody follows any more.
    pub fn sweep(&self) {
        if let Ok(mut runs) = self.runs.lock() {
            runs.retain(|_, f| f.head.receiver_count() > 0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flow_store::FactKind;

    fn note(run: &RunId, ns: std::ops::RangeInclusive<u64>) -> HeadNote {
        HeadNote {
            run: run.to_string(),
            n: *ns.end(),
            facts: ns
                .map(|n| Appended {
                    run: run.clone(),
                    n,
                    kind: FactKind::Call,
                    hash: format!("h{n}"),
                    body: format!("{{\"n\":{n}}}").into(),
                })
                .collect(),
        }
    }

    fn numbers(a: Option<Vec<Appended>>) -> Option<Vec<u64>> {
        a.map(|v| v.iter().map(|a| a.n).collect())
    }

    #[test]
    fn a_follower_gets_the_committed_facts_or_is_told_to_read() {
        let heads = Heads::default();
        let run = RunId::from_parts(1_700_000_000_000, [1; 10]);
        // Nobody follows: nothing is kept.
        heads.bump(&note(&run, 2..=3));
        assert!(heads.runs.lock().unwrap().is_empty());
        let rx = heads.watch(&run, 3);
        heads.bump(&note(&run, 4..=5));
        heads.bump(&note(&run, 6..=6));
        assert_eq!(*rx.borrow(), 6);
        assert_eq!(numbers(heads.since(&run, 3)), Some(vec![4, 5, 6]));
        assert_eq!(numbers(heads.since(&run, 5)), Some(vec![6]));
        // Facts before what is kept are the store's to give.
        assert_eq!(numbers(heads.since(&run, 2)), None);
        // Another writer's head (the number only) is read from the store,
        // and so is what follows it until the kept facts are whole again.
        heads.bump(&HeadNote {
            run: run.to_string(),
            n: 8,
            facts: Vec::new(),
        });
        assert_eq!(numbers(heads.since(&run, 6)), None);
        heads.bump(&note(&run, 9..=9));
        assert_eq!(numbers(heads.since(&run, 6)), None);
        assert_eq!(numbers(heads.since(&run, 8)), Some(vec![9]));
        drop(rx);
        heads.sweep();
        assert!(heads.runs.lock().unwrap().is_empty());
    }
}
