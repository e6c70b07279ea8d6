//! The wall-clock times of a drive's calls (issue 38 §3): when each call
//! went, to what and which attempt, and when its Reply was admitted, kept
//! as host records beside the history (never in it). Answered calls are
//! gathered into one `timings` record riding a step's commit.

use super::store::Store;
use flow_abi::fact::CallId;
use flow_store::{CallTiming, HostDetails, HostRecord, RunId};
use std::collections::BTreeMap;
use std::sync::Arc;

/// A call out: when it went, to what, which attempt (its timing record's
/// first half, written with its Reply).
pub(super) struct Sent {
    pub(super) tool: String,
    pub(super) at_ms: i64,
    pub(super) route: &'static str,
    pub(super) attempt: u32,
}

/// Calls answered since the last timings record: the drive writes their
/// times together, at most this many or this old (ms), and whatever is
/// left when it stops, so a steady step costs no row of its own (issue 38
/// §3; a crash loses at most these, and a lost time is shown as none).
pub(super) const TIMINGS_MAX: usize = 64;
pub(super) const TIMINGS_AGE_MS: i64 = 1000;

/// An answered call's times, kept for the next timings record.
pub(super) struct Answered {
    pub(super) call: CallId,
    pub(super) tool: String,
    pub(super) route: &'static str,
    /// The remote worker that answered (route `worker`).
    pub(super) worker: Option<String>,
    pub(super) attempt: u32,
    pub(super) sent_ms: i64,
    pub(super) replied_ms: i64,
}

/// A drive's calls out and answered calls whose times are not recorded
/// yet. A drive that is dropped (a forced halt, a shutdown) records what
/// is left when this drops, off the runtime and best effort, so a call
/// out at a forced halt still says when it went.
pub(super) struct Times {
    pub(super) store: Arc<dyn Store>,
    pub(super) run: RunId,
    pub(super) sent: BTreeMap<CallId, Sent>,
    pub(super) answered: Vec<Answered>,
}

impl Drop for Times {
    fn drop(&mut self) {
        if self.sent.is_empty() && self.answered.is_empty() {
            return;
        }
        let mut left: Vec<HostDetails> = std::mem::take(&mut self.sent)
            .iter()
            .map(|(c, s)| sent_only(c, s))
            .collect();
        if !self.answered.is_empty() {
            left.push(timings(std::mem::take(&mut self.answered)));
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (store, run) = (self.store.clone(), self.run.clone());
        rt.spawn_blocking(move || {
            for d in left {
                if let Err(e) = store.record_host(&run, HostRecord::now(d)) {
                    tracing::debug!(run.id = %run, "a timing record was not kept: {e}");
                }
            }
        });
    }
}

/// One `timing` record of many answered calls.
pub(super) fn timings(done: Vec<Answered>) -> HostDetails {
    HostDetails::Timings(
        done.into_iter()
            .map(|a| CallTiming {
                call: a.call,
                route: Some(a.route.to_string()),
                worker: a.worker,
                attempt: Some(a.attempt),
                sent_ms: Some(a.sent_ms),
                replied_ms: Some(a.replied_ms),
                via: None,
                by: None,
            })
            .collect(),
    )
}

/// A timing record (issue 38 §3).
pub(super) fn timing(
    call: &CallId,
    route: Option<&str>,
    attempt: Option<u32>,
    sent_ms: Option<i64>,
    replied_ms: Option<i64>,
    via: Option<&str>,
) -> HostDetails {
    HostDetails::Timing(CallTiming {
        call: call.clone(),
        route: route.map(str::to_string),
        worker: None,
        attempt,
        sent_ms,
        replied_ms,
        via: via.map(str::to_string),
        by: None,
    })
}

/// A sent-only timing record for a call still out when its drive stops
/// (or closed before it answered).
pub(super) fn sent_only(call: &CallId, s: &Sent) -> HostDetails {
    timing(
        call,
        Some(s.route),
        Some(s.attempt),
        Some(s.at_ms),
        None,
        None,
    )
}
