//! The calls a drive has out, as one set of futures that does not wake its
//! task for nothing (issue 16).
//!
//! `FuturesUnordered` yields after a poll in which it polled every future
//! it holds: it wakes its own task and returns `Pending`. A drive with one
//! call out (every sequential step) polls its one new call and so woke
//! itself on every step; on tokio's multi-thread runtime a task that wakes
//! itself goes to the back of the run queue and wakes the other worker,
//! which then takes the drive over: a cross-thread hand-off per step, a
//! third of a W1 step's context switches. A future that never completes
//! stays in the set, is polled once and never again, so "every future
//! polled" is never the case; the set counts without it.

use super::drive::Pending;
use super::nested::Answer;
use flow_abi::fact::CallId;
use futures_util::StreamExt;
use futures_util::future::Aborted;
use futures_util::stream::FuturesUnordered;

pub(super) struct Calls<'a> {
    set: FuturesUnordered<Pending<'a>>,
}

impl<'a> Calls<'a> {
    pub(super) fn new() -> Calls<'a> {
        let set = FuturesUnordered::new();
        set.push(Box::pin(std::future::pending()) as Pending<'a>);
        Calls { set }
    }

    pub(super) fn push(&mut self, call: Pending<'a>) {
        self.set.push(call);
    }

    /// Calls out.
    pub(super) fn len(&self) -> usize {
        self.set.len() - 1
    }

    /// The next call to finish; `None` at once when none is out.
    pub(super) async fn next(&mut self) -> Option<Result<(CallId, Answer), Aborted>> {
        if self.len() == 0 {
            return None;
        }
        self.set.next().await
    }
}
