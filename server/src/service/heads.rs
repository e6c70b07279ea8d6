//! The one registry of followed runs' heads (issue 37 §4): from a commit to
//! an SSE frame, one map and one ring per run, no thread per run (issue 10,
//! item 4).
//!
//! Whoever follows a run live (an SSE subscriber) takes a `watch` of its
//! head and the run's ring of recent frames, each fact rendered once and
//! shared by every subscriber. The watch announces a number only once the
//! ring holds its frame. The store's head observer calls [`Heads::bump`]
//! for every durable head it learns of: this process's commits come with
//! their stored text and go straight into the ring (no task hop between
//! the commit and the subscribers); a head told by number only (another
//! server's, through Postgres LISTEN), or one past a gap, wakes the run's
//! follower task, which reads the missing facts from the store once for
//! every subscriber. The follower also checks the store's head itself,
//! backed off, for appends nobody tells of (`flow run` on the same SQLite
//! file). It ends when its run ends, when nobody follows it, or on
//! shutdown.

use super::RunService;
use axum::body::Bytes;
use flow_store::{Appended, FactKind, HeadNote, RunId, StoredFact};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, watch};

/// Facts a follower reads at once.
pub const READ_BATCH: u32 = 256;
/// Frames a followed run keeps, at most.
const RING: usize = 4096;
/// How long a follower waits before checking the store's head itself, at
/// first and at most.
const POLL_FIRST: Duration = Duration::from_millis(50);
const POLL_MAX: Duration = Duration::from_secs(2);

/// One fact as the feed sends it: `id: n`, `event: kind`, `data: <stored
/// canonical fact>` and the blank line, made once and shared.
pub struct Frame {
    pub n: u64,
    pub kind: FactKind,
    pub wire: Bytes,
}

impl Frame {
    /// A fact read back from the store: its stored text as read.
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

/// A followed run's most recent frames (at most [`RING`]), consecutive, in
/// number order.
pub type Ring = Arc<Mutex<VecDeque<Arc<Frame>>>>;

#[derive(Default)]
pub struct Heads {
    runs: Mutex<HashMap<RunId, Followed>>,
}

struct Followed {
    /// The last fact whose frame the ring holds (or the head the run was
    /// followed at), announced to subscribers.
    head: watch::Sender<u64>,
    ring: Ring,
    /// The latest head told of, perhaps past what the ring holds.
    known: u64,
    /// Wakes the follower when `known` passed the announced head.
    behind: Arc<Notify>,
}

impl Followed {
    /// Adds frames that follow the announced head (others are skipped) and
    /// announces the last; whether the ended run's End came.
    fn extend(&mut self, frames: impl IntoIterator<Item = Arc<Frame>>) -> bool {
        let mut at = *self.head.borrow();
        let mut ended = false;
        if let Ok(mut r) = self.ring.lock() {
            for f in frames {
                if f.n != at + 1 {
                    continue;
                }
                if r.back().is_some_and(|b| b.n + 1 != f.n) {
                    r.clear();
                }
                at = f.n;
                ended |= f.kind == FactKind::End;
                r.push_back(f);
            }
            while r.len() > RING {
                r.pop_front();
            }
        }
        // The frames are in the ring before the head moves, so a woken
        // subscriber finds them there.
        self.known = self.known.max(at);
        self.head.send_if_modified(|h| {
            let moved = at > *h;
            *h = (*h).max(at);
            moved
        });
        ended
    }
}

impl Heads {
    /// Tells followers of a run that facts up to `note.n` are durable: the
    /// facts this process committed go into the ring at once; a head past
    /// them wakes the follower to read the rest.
    pub(super) fn bump(&self, note: &HeadNote) {
        let Ok(mut runs) = self.runs.lock() else {
            return;
        };
        if runs.is_empty() {
            return;
        }
        let Some(f) = runs.get_mut(&note.run) else {
            return;
        };
        f.extend(note.facts.iter().map(Frame::committed));
        f.known = f.known.max(note.n);
        if f.known > *f.head.borrow() {
            f.behind.notify_one();
        }
    }

    /// Forgets `run` if `tx` is still its watch.
    fn forget(&self, run: &RunId, tx: &watch::Sender<u64>) {
        if let Ok(mut runs) = self.runs.lock()
            && runs.get(run).is_some_and(|f| f.head.same_channel(tx))
        {
            runs.remove(run);
        }
    }
}

impl RunService {
    /// Follows `run` (whose head is `head`): the watch of the last fact
    /// whose frame the ring holds, and the ring, shared by every
    /// subscriber of the run; the first subscriber starts its follower.
    pub fn follow(&self, run: &RunId, head: u64) -> (watch::Receiver<u64>, Ring) {
        let heads = &self.inner.heads;
        let Ok(mut runs) = heads.runs.lock() else {
            // A poisoned map: a closed channel makes the subscriber read.
            return (watch::channel(head).1, Ring::default());
        };
        if let Some(f) = runs.get(run)
            && !f.head.is_closed()
        {
            return (f.head.subscribe(), f.ring.clone());
        }
        let (tx, rx) = watch::channel(head);
        let (ring, behind) = (Ring::default(), Arc::new(Notify::new()));
        runs.insert(
            run.clone(),
            Followed {
                head: tx.clone(),
                ring: ring.clone(),
                known: head,
                behind: behind.clone(),
            },
        );
        drop(runs);
        tokio::spawn(follow(self.clone(), run.clone(), tx, behind));
        (rx, ring)
    }
}

/// What the follower should do next.
enum Wake {
    /// Read the store after the announced head.
    Read,
    Stop,
}

/// The follower task of one run: reads what the ring lacks from the store.
async fn follow(service: RunService, run: RunId, tx: watch::Sender<u64>, behind: Arc<Notify>) {
    let heads = &service.inner.heads;
    let shutdown = service.shutdown_token().clone();
    let mut poll = POLL_FIRST;
    loop {
        // Nobody follows any more, or the run is no longer followed
        // through this channel: leave, deciding under the map's lock so a
        // new subscriber never gets a dying channel.
        let (announced, known) = {
            let Ok(runs) = heads.runs.lock() else {
                return;
            };
            match runs.get(&run) {
                Some(f) if f.head.same_channel(&tx) && tx.receiver_count() > 0 => {
                    (*f.head.borrow(), f.known)
                }
                _ => break,
            }
        };
        if known <= announced {
            let wake = tokio::select! {
                _ = shutdown.cancelled() => Wake::Stop,
                _ = behind.notified() => continue,
                _ = tokio::time::sleep(poll) => {
                    let (s, r) = (service.store().clone(), run.clone());
                    match tokio::task::spawn_blocking(move || s.run_info(&r)).await {
                        Ok(Ok(i)) if i.last_fact.n > announced => Wake::Read,
                        Ok(Ok(i)) if i.ending.is_none() => {
                            poll = (poll * 2).min(POLL_MAX);
                            continue;
                        }
                        _ => Wake::Stop,
                    }
                }
            };
            if let Wake::Stop = wake {
                break;
            }
        }
        poll = POLL_FIRST;
        let (s, r) = (service.store().clone(), run.clone());
        let read =
            tokio::task::spawn_blocking(move || s.read_after(&r, announced, READ_BATCH)).await;
        let frames: Vec<Arc<Frame>> = match read {
            Ok(Ok(f)) => f.iter().map(Frame::of).collect(),
            Ok(Err(e)) => {
                tracing::warn!(run.id = %run, error = %e, "SSE follower could not read");
                break;
            }
            Err(_) => break,
        };
        let ended = {
            let Ok(mut runs) = heads.runs.lock() else {
                return;
            };
            match runs.get_mut(&run) {
                Some(f) if f.head.same_channel(&tx) => {
                    // Nothing more to read than the store holds now.
                    if frames.is_empty() {
                        f.known = *f.head.borrow();
                    }
                    f.extend(frames)
                }
                _ => break,
            }
        };
        if ended {
            break;
        }
    }
    heads.forget(&run, &tx);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(run: &RunId, ns: std::ops::RangeInclusive<u64>) -> HeadNote {
        HeadNote {
            run: run.clone(),
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

    fn followed(heads: &Heads, run: &RunId, head: u64) -> (watch::Receiver<u64>, Ring) {
        let (tx, rx) = watch::channel(head);
        let ring = Ring::default();
        heads.runs.lock().unwrap().insert(
            run.clone(),
            Followed {
                head: tx,
                ring: ring.clone(),
                known: head,
                behind: Arc::default(),
            },
        );
        (rx, ring)
    }

    fn numbers(ring: &Ring) -> Vec<u64> {
        ring.lock().unwrap().iter().map(|f| f.n).collect()
    }

    #[test]
    fn committed_facts_go_into_the_ring_and_a_gap_is_left_to_the_follower() {
        let heads = Heads::default();
        let run = RunId::from_parts(1_700_000_000_000, [1; 10]);
        // Nobody follows: nothing is kept.
        heads.bump(&note(&run, 2..=3));
        assert!(heads.runs.lock().unwrap().is_empty());
        let (rx, ring) = followed(&heads, &run, 3);
        heads.bump(&note(&run, 4..=5));
        heads.bump(&note(&run, 6..=6));
        assert_eq!(*rx.borrow(), 6);
        assert_eq!(numbers(&ring), vec![4, 5, 6]);
        // Another writer's head (the number only): announced only once
        // the follower read it; what follows waits for it too.
        heads.bump(&HeadNote {
            run: run.clone(),
            n: 8,
            facts: Vec::new(),
        });
        heads.bump(&note(&run, 9..=9));
        assert_eq!(*rx.borrow(), 6);
        assert_eq!(heads.runs.lock().unwrap()[&run].known, 9);
        // The follower's read fills the gap; the ring stays consecutive.
        let read: Vec<_> = (7..=9)
            .map(|n| Frame::new(n, FactKind::Call, "{}"))
            .collect();
        heads
            .runs
            .lock()
            .unwrap()
            .get_mut(&run)
            .unwrap()
            .extend(read);
        assert_eq!(*rx.borrow(), 9);
        assert_eq!(numbers(&ring), vec![4, 5, 6, 7, 8, 9]);
        // An End announced ends the run's following.
        let end = Frame::new(10, FactKind::End, "{}");
        assert!(
            heads
                .runs
                .lock()
                .unwrap()
                .get_mut(&run)
                .unwrap()
                .extend([end])
        );
        drop(rx);
    }
}
