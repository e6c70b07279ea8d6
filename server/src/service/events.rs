//! The run service's state changes, handed to one consumer: the server's
//! state feed (`http/feed.rs`), which reads each run's row on a thread of
//! its own. A bounded queue, not a broadcast on the async runtime: telling
//! the feed costs the publishing drive no more than waking that one thread,
//! and no task hop to the runtime and from it to the blocking pool and back
//! (issue 42: six of a one-step run's 23 thread sleeps were the feed's).
//!
//! With no consumer (the CLI) a change is dropped at once. A full queue
//! drops it too, with a warning: the feed's poller still reports what the
//! runs index shows, as it did for a broadcast that lagged.

use super::RunEvent;
use std::sync::Mutex;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};

/// Changes the feed has not taken yet, at most.
const QUEUED: usize = 1024;

#[derive(Default)]
pub(super) struct Events {
    tx: Mutex<Option<SyncSender<RunEvent>>>,
}

impl Events {
    /// The consumer's end; a later call replaces an earlier consumer.
    pub(super) fn take(&self) -> Receiver<RunEvent> {
        let (tx, rx) = sync_channel(QUEUED);
        if let Ok(mut g) = self.tx.lock() {
            *g = Some(tx);
        }
        rx
    }

    pub(super) fn send(&self, ev: RunEvent) {
        let Ok(g) = self.tx.lock() else {
            return;
        };
        let Some(tx) = g.as_ref() else {
            return;
        };
        match tx.try_send(ev) {
            Ok(()) | Err(TrySendError::Disconnected(_)) => {}
            Err(TrySendError::Full(ev)) => tracing::warn!(
                run.id = %ev.run,
                "state feed: fell behind the run service's changes; its poller reports them"
            ),
        }
    }

    /// Ends the consumer's queue: it sees the end once it took what was
    /// sent before.
    pub(super) fn close(&self) {
        if let Ok(mut g) = self.tx.lock() {
            g.take();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn change(run: &str) -> RunEvent {
        RunEvent {
            run: run.into(),
            state: "running",
            extra: json!({}),
        }
    }

    #[test]
    fn the_consumer_takes_what_comes_after_it_and_sees_the_end_once_closed() {
        let events = Events::default();
        // No consumer yet (the CLI): dropped, not kept.
        events.send(change("before"));
        let rx = events.take();
        events.send(change("a"));
        events.send(change("b"));
        events.close();
        events.send(change("after"));
        let runs: Vec<String> = rx.iter().map(|e| e.run).collect();
        assert_eq!(runs, ["a", "b"]);
    }

    #[test]
    fn a_full_queue_drops_the_change_and_keeps_the_rest() {
        let events = Events::default();
        let rx = events.take();
        for i in 0..QUEUED + 5 {
            events.send(change(&i.to_string()));
        }
        events.close();
        let runs: Vec<String> = rx.iter().map(|e| e.run).collect();
        assert_eq!(runs.len(), QUEUED);
        assert_eq!(runs.first().map(String::as_str), Some("0"));
    }
}
