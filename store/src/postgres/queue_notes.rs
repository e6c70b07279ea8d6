//! The worker queue's notifications (see [`super::workers`]): the channel
//! of a schema, the payloads a server sends and reads, and the observers a
//! note wakes.

use crate::workers::*;
use flow_abi::fact::{CallId, RunId};

/// The worker queue's notification channel of `schema`.
pub(super) fn channel(schema: &str) -> String {
    format!("flow_workers:{schema}")
}

/// The longest payload sent; a longer `o` note is sent as `*`
/// (Postgres takes 8000 bytes).
const MAX_PAYLOAD: usize = 7900;

/// Reads a payload of the queue's channel: `q ORIGIN`, `* ORIGIN` or `o
/// ORIGIN RUN CALL` (a run id has no space; a call id is the rest). A note
/// this store sent itself is `None`: the server that wrote woke its own
/// waiters already, and a second wake-up would only cost a read.
pub(super) fn parse_note(payload: &str, own: &str) -> Option<QueueNote> {
    let (kind, rest) = payload.split_once(' ')?;
    let (origin, rest) = rest.split_once(' ').unwrap_or((rest, ""));
    if origin == own {
        return None;
    }
    match kind {
        "q" => Some(QueueNote::Queued),
        "*" => Some(QueueNote::Everyone),
        "o" => {
            let (run, call) = rest.split_once(' ')?;
            Some(QueueNote::Settled {
                run: RunId::parse(run).ok()?,
                call: CallId::parse(call).ok()?,
            })
        }
        _ => None,
    }
}

/// The observers of one store's queue notes, and the tag its own notes
/// carry.
pub(super) struct Observers {
    /// This store's tag: its process id and when it opened (ns), unique
    /// enough that two stores never share it.
    origin: String,
    list: std::sync::Mutex<Vec<QueueObserver>>,
}

impl Default for Observers {
    fn default() -> Observers {
        use std::sync::atomic::{AtomicU64, Ordering};
        static OPENED: AtomicU64 = AtomicU64::new(0);
        let ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        Observers {
            origin: format!(
                "{}.{ns:x}.{}",
                std::process::id(),
                OPENED.fetch_add(1, Ordering::Relaxed)
            ),
            list: std::sync::Mutex::new(Vec::new()),
        }
    }
}

impl Observers {
    pub(super) fn origin(&self) -> &str {
        &self.origin
    }

    pub(super) fn add(&self, o: QueueObserver) {
        if let Ok(mut v) = self.list.lock() {
            v.push(o);
        }
    }

    pub(super) fn note(&self, note: &QueueNote) {
        let all = self.list.lock().map(|v| v.clone()).unwrap_or_default();
        for o in all {
            o(note);
        }
    }

    /// The payload of a call queued (again) or cancelled.
    pub(super) fn queued(&self) -> String {
        format!("q {}", self.origin)
    }

    /// The payload of a worker gone.
    pub(super) fn everyone(&self) -> String {
        format!("* {}", self.origin)
    }

    /// The payload of `(run, call)` settled.
    pub(super) fn settled(&self, run: &str, call: &str) -> String {
        let p = format!("o {} {run} {call}", self.origin);
        if p.len() > MAX_PAYLOAD {
            self.everyone()
        } else {
            p
        }
    }
}
