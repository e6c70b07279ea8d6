//! The drives going on in this process, and the tasks they run in: the
//! one place that knows which runs are driven here (one drive per run),
//! each with the tokens that stop or drain it and its lease's epoch, and
//! whether the service still takes new work. Its state is its own: no
//! other part of the service locks it.
//!
//! A lock poisoned by a panic elsewhere is taken as it was left (the
//! state is a map and a task set, whole between any two calls), so a drive
//! is never silently not started or not stopped.

use crate::error::{Error, Result};
use flow_store::RunId;
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// A drive going on here.
struct Driving {
    /// Stops the drive at once.
    token: CancellationToken,
    /// Drains it: the calls out finish, nothing new is sent
    /// (`drive::Writes`).
    drain: CancellationToken,
    epoch: Option<u64>,
}

/// The tokens a drive of a run marked here is stopped and drained by.
pub(super) struct Marked {
    pub token: CancellationToken,
    pub drain: CancellationToken,
}

/// The drives of this process and their tasks.
pub(super) struct Running {
    drives: Mutex<HashMap<RunId, Driving>>,
    /// Told whenever a run is let go of.
    released: Notify,
    /// Drive tasks and the service's own (STYLE rule 7: spawned tasks live
    /// in a JoinSet).
    tasks: Mutex<JoinSet<()>>,
    /// Where drives and Tool processes run (`ServiceOptions::drives`).
    runtime: Option<tokio::runtime::Handle>,
    shutdown: CancellationToken,
    /// Cancelled when a graceful shutdown begins; each drive's drain
    /// token is a child of it.
    draining: CancellationToken,
}

impl Running {
    pub(super) fn new(
        shutdown: CancellationToken,
        runtime: Option<tokio::runtime::Handle>,
    ) -> Self {
        Running {
            drives: Mutex::default(),
            released: Notify::new(),
            tasks: Mutex::new(JoinSet::new()),
            runtime,
            shutdown,
            draining: CancellationToken::new(),
        }
    }

    fn drives(&self) -> MutexGuard<'_, HashMap<RunId, Driving>> {
        self.drives.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn tasks(&self) -> MutexGuard<'_, JoinSet<()>> {
        self.tasks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Marks `run` as driven here, with the lease of `epoch` if one is
    /// claimed already; refused when it is driven here already.
    pub(super) fn mark(&self, run: &RunId, epoch: Option<u64>) -> Result<Marked> {
        let mut d = self.drives();
        if d.contains_key(run) {
            return Err(Error::Conflict(format!(
                "{run} is being driven now; resume a call once the run pauses"
            )));
        }
        let token = self.shutdown.child_token();
        let drain = self.draining.child_token();
        d.insert(
            run.clone(),
            Driving {
                token: token.clone(),
                drain: drain.clone(),
                epoch,
            },
        );
        Ok(Marked { token, drain })
    }

    /// The lease `run`'s drive holds now.
    pub(super) fn set_epoch(&self, run: &RunId, epoch: u64) {
        if let Some(d) = self.drives().get_mut(run) {
            d.epoch = Some(epoch);
        }
    }

    /// `run` is no longer driven here.
    pub(super) fn unmark(&self, run: &RunId) {
        self.drives().remove(run);
        self.released.notify_waiters();
    }

    pub(super) fn contains(&self, run: &RunId) -> bool {
        self.drives().contains_key(run)
    }

    /// Drives going on now.
    pub(super) fn len(&self) -> usize {
        self.drives().len()
    }

    /// The runs driven here under a lease, with its epoch.
    pub(super) fn leased(&self) -> Vec<(RunId, u64)> {
        self.drives()
            .iter()
            .filter_map(|(r, d)| d.epoch.map(|e| (r.clone(), e)))
            .collect()
    }

    /// Stops `run`'s drive if it holds the lease of `epoch` (only that
    /// drive: a newer claim here stays). True when one was stopped.
    pub(super) fn fence(&self, run: &RunId, epoch: u64) -> bool {
        match self.drives().get(run).filter(|d| d.epoch == Some(epoch)) {
            Some(d) => {
                d.token.cancel();
                true
            }
            None => false,
        }
    }

    /// Stops `run`'s drive at once; false when none is going.
    pub(super) fn stop(&self, run: &RunId) -> bool {
        let token = self.drives().get(run).map(|d| d.token.clone());
        token.inspect(CancellationToken::cancel).is_some()
    }

    /// Drains `run`'s drive; false when none is going.
    pub(super) fn drain(&self, run: &RunId) -> bool {
        let drain = self.drives().get(run).map(|d| d.drain.clone());
        drain.inspect(CancellationToken::cancel).is_some()
    }

    /// Waits until `until` holds of the drives, looking again whenever a
    /// run is let go of; false when `limit` passed first.
    async fn wait(&self, limit: Duration, until: impl Fn(&Self) -> bool) -> bool {
        tokio::time::timeout(limit, async {
            loop {
                let released = self.released.notified();
                tokio::pin!(released);
                released.as_mut().enable();
                if until(self) {
                    return;
                }
                released.await;
            }
        })
        .await
        .is_ok()
    }

    /// Waits until `run` is no longer driven here; false when `limit`
    /// passed first.
    pub(super) async fn released(&self, run: &RunId, limit: Duration) -> bool {
        self.wait(limit, |r| !r.contains(run)).await
    }

    /// Waits until no run is driven here; false when `limit` passed first.
    pub(super) async fn idle(&self, limit: Duration) -> bool {
        self.wait(limit, |r| r.len() == 0).await
    }

    /// Runs `task` in the service's set: on the drives' runtime when
    /// `on_drives`, else on the caller's.
    pub(super) fn spawn(&self, task: impl Future<Output = ()> + Send + 'static, on_drives: bool) {
        let mut set = self.tasks();
        // Reap finished tasks so the set does not grow.
        while set.try_join_next().is_some() {}
        match (&self.runtime, on_drives) {
            (Some(rt), true) => set.spawn_on(task, rt),
            _ => set.spawn(task),
        };
    }

    /// The runtime drives and their Tool processes run on, if one of their
    /// own.
    pub(super) fn runtime(&self) -> Option<&tokio::runtime::Handle> {
        self.runtime.as_ref()
    }

    /// Stops every drive (as a crash would) and waits, bounded by
    /// `deadline`, for every task to end.
    pub(super) async fn stop_all(&self, deadline: Duration) {
        self.shutdown.cancel();
        let mut set = std::mem::take(&mut *self.tasks());
        let all = async { while set.join_next().await.is_some() {} };
        if tokio::time::timeout(deadline, all).await.is_err() {
            tracing::warn!("drain deadline passed; aborting driver tasks");
        }
    }

    /// New work is taken: no shutdown or drain began.
    pub(super) fn accepting(&self) -> bool {
        !self.shutdown.is_cancelled() && !self.draining.is_cancelled()
    }

    /// A graceful shutdown began ([`Running::begin_drain`]).
    pub(super) fn draining(&self) -> bool {
        self.draining.is_cancelled()
    }

    /// Every drive going on drains; no new one starts.
    pub(super) fn begin_drain(&self) {
        self.draining.cancel();
    }

    pub(super) fn shutdown(&self) -> &CancellationToken {
        &self.shutdown
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(n: u8) -> RunId {
        RunId::from_parts(u64::from(n), [0; 10])
    }

    #[tokio::test(start_paused = true)]
    async fn a_run_is_driven_once_and_waiters_wake_when_it_is_let_go_of() {
        let r = std::sync::Arc::new(Running::new(CancellationToken::new(), None));
        let m = r.mark(&run(1), None).unwrap();
        assert!(matches!(r.mark(&run(1), None), Err(Error::Conflict(_))));
        assert!(!r.released(&run(1), Duration::from_secs(5)).await);
        let r2 = r.clone();
        let waiter =
            tokio::spawn(async move { r2.released(&run(1), Duration::from_secs(60)).await });
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!m.token.is_cancelled());
        assert!(r.stop(&run(1)));
        assert!(m.token.is_cancelled());
        r.unmark(&run(1));
        assert!(waiter.await.unwrap());
        assert!(r.idle(Duration::ZERO).await);
    }

    #[tokio::test(start_paused = true)]
    async fn a_fence_stops_only_the_drive_of_its_epoch() {
        let r = Running::new(CancellationToken::new(), None);
        let m = r.mark(&run(2), Some(3)).unwrap();
        assert_eq!(r.leased(), vec![(run(2), 3)]);
        assert!(!r.fence(&run(2), 2));
        assert!(!m.token.is_cancelled());
        r.set_epoch(&run(2), 4);
        assert!(r.fence(&run(2), 4));
        assert!(m.token.is_cancelled());
    }

    #[tokio::test(start_paused = true)]
    async fn a_drain_drains_every_drive_and_refuses_new_work() {
        let r = Running::new(CancellationToken::new(), None);
        let m = r.mark(&run(3), None).unwrap();
        assert!(r.accepting());
        r.begin_drain();
        assert!(m.drain.is_cancelled() && !m.token.is_cancelled());
        assert!(!r.accepting() && r.draining());
        r.stop_all(Duration::from_secs(1)).await;
        assert!(m.token.is_cancelled());
    }
}
