//! Halting a run: its drive drained (or stopped at once with `force`),
//! a `halt` host record at the fact boundary where it stopped, and a halt
//! of its own for every nested run it drives (NEST-19).

use super::store::blocking;
use super::{RunService, nested, settle};
use crate::error::{Error, Result};
use flow_store::{Halt, HostDetails, HostRecord, HostRecordRow, RunId};
use serde_json::json;
use std::time::Duration;

impl RunService {
    /// Halts a run (a host record, no End), so no fact follows the halt's
    /// head; every nested run it drives records its own halt (NEST-19). A
    /// nested run is halted with the outermost run whose drive carries it;
    /// the row returned is the one of `run`.
    ///
    /// By default the halt waits for the calls out: the drive drains (the
    /// calls out finish and their Replies are recorded; a call the program
    /// makes meanwhile is recorded and never sent) and the run halts at the
    /// fact boundary where no call is out, so a continue sends only what
    /// never went. `force` halts at once: calls out stay open, and a
    /// continue decides them ([`OpenChoice`]). The halt goes on in a task
    /// of its own, so a caller that gives up waiting does not leave it
    /// half done.
    pub async fn halt(&self, run: &RunId, force: bool, details: Halt) -> Result<HostRecordRow> {
        let this = self.clone();
        let run = run.clone();
        tokio::spawn(async move { this.halt_now(&run, force, details).await })
            .await
            .map_err(|e| Error::Unreadable(format!("the halt's task ended: {e}")))?
    }

    async fn halt_now(&self, run: &RunId, force: bool, details: Halt) -> Result<HostRecordRow> {
        let asked = run.clone();
        let r = run.clone();
        let (info, root) = blocking(&self.inner.store, move |s| {
            if s.run_info(&r)?.ending.is_some() {
                return Err(Error::Conflict(format!(
                    "{r} has ended; there is nothing to halt"
                )));
            }
            let (root, _) = nested::live_root(s, &r)?;
            Ok((s.run_info(&root)?, root))
        })
        .await?;
        let run = &root;
        if info.ending.is_some() {
            return Err(Error::Conflict(format!(
                "{run} has ended; there is nothing to halt"
            )));
        }
        if force {
            if !self.stop_drive(run).await {
                return Err(Error::Conflict(format!(
                    "{run}'s drive did not stop in time; try again"
                )));
            }
        } else {
            self.drain_drive(run).await;
        }
        // Held until the halt is recorded: no other drive (here, or another
        // server's takeover) continues the run meanwhile.
        let claim = self.claim(run, true).await?;
        let r = run.clone();
        let (info, records) = blocking(&self.inner.store, move |s| {
            Ok((s.run_info(&r)?, s.host_records(&r)?))
        })
        .await?;
        if info.ending.is_some() {
            return Err(Error::Conflict(format!(
                "{run} ended while the halt waited for its calls out; there is nothing to halt"
            )));
        }
        // Halted already (a second halt, or one that raced this one): the
        // halt stands as recorded.
        if let Some(row) = settle::halt_at(&records, &info.last_fact).filter(|_| asked == root) {
            return Ok(row.clone());
        }
        self.inner.paused.forget(run);
        if let Some(w) = self.workers() {
            w.halted(run).await?;
        }
        let details = Halt {
            force: Some(force),
            ..details
        };
        let (r, d) = (run.clone(), details.clone());
        let row = blocking(&self.inner.store, move |s| {
            Ok(s.record_host(&r, HostRecord::now(HostDetails::Halt(d)))?)
        })
        .await?;
        let below = self.halt_below(run, &details).await;
        claim.finish(true).await;
        self.publish(run.as_str(), "halted", json!({}));
        if asked == root {
            return Ok(row);
        }
        below?
            .into_iter()
            .find(|(n, _)| *n == asked)
            .map(|(_, row)| row)
            .ok_or_else(|| Error::Conflict(format!("{asked} was not halted with {root}")))
    }

    /// Drains the drive of `run`, if one is going (see `drive::Writes`),
    /// and waits until its task has let go of the run: as long as its
    /// calls out take.
    pub(super) async fn drain_drive(&self, run: &RunId) {
        if self.inner.running.drain(run) {
            self.inner.running.released(run, Duration::MAX).await;
        }
    }

    /// Stops the drive of `run`, if one is going, and waits (bounded) until
    /// its task has let go of the run. True when no drive is left.
    pub(super) async fn stop_drive(&self, run: &RunId) -> bool {
        !self.inner.running.stop(run)
            || self
                .inner
                .running
                .released(run, Duration::from_secs(5))
                .await
    }
}
