//! The calls paused runs wait on, as the store indexes them (migration
//! 0013): the inbox's page and count (`GET /v1/calls`, issue 38 §2).

use crate::namespace::Namespaces;
use flow_abi::fact::{CallId, RunId};

/// Which waiting calls a page holds. Every filter is an index lookup on
/// `waiting_calls`.
#[derive(Clone, Debug, Default)]
pub struct WaitingQuery {
    /// Only this run's calls.
    pub run: Option<RunId>,
    pub node: Option<String>,
    pub tool: Option<String>,
    /// Only calls of runs paused at or before this time (unix ms): the
    /// inbox's "waiting at least".
    pub since_at_most: Option<i64>,
    /// Only calls with a deadline before this time (unix ms).
    pub due_before: Option<i64>,
    pub sort: WaitingSort,
    /// The page after this one.
    pub after: Option<WaitingCursor>,
    /// At most this many calls (1 to 1000).
    pub limit: u32,
    /// Only calls of runs in these namespaces (each one index range,
    /// migration 0019).
    pub namespaces: Namespaces,
}

/// A waiting calls page's order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WaitingSort {
    /// Longest waiting first (pause time, then run, then call).
    #[default]
    Age,
    /// Nearest deadline first, calls with none last (as [`i64::MAX`]).
    Due,
}

/// Where a page ended: its last call's sort key, run and call.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct WaitingCursor {
    pub key: i64,
    pub run: String,
    pub call: String,
}

/// One call a paused run waits on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WaitingCall {
    pub run: RunId,
    pub call: CallId,
    pub task: String,
    pub node: String,
    pub tool: String,
    /// The Call's fact number.
    pub fact: u64,
    /// When the run paused (unix ms).
    pub since_ms: i64,
    pub due_ms: Option<i64>,
}

impl WaitingCall {
    /// This call's place in `sort`.
    pub fn cursor(&self, sort: WaitingSort) -> WaitingCursor {
        WaitingCursor {
            key: match sort {
                WaitingSort::Age => self.since_ms,
                WaitingSort::Due => self.due_ms.unwrap_or(i64::MAX),
            },
            run: self.run.to_string(),
            call: self.call.to_string(),
        }
    }
}

/// A page of waiting calls.
#[derive(Clone, Debug, Default)]
pub struct WaitingPage {
    pub calls: Vec<WaitingCall>,
    /// More calls follow the page.
    pub more: bool,
    /// How many calls the filter matches (the cursor aside).
    pub total: u64,
}
