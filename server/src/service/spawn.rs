//! The drive tasks: a claimed, bound, prepared run moved into a task of
//! the service's `JoinSet`, what the task does with its lease and its
//! waiters when the drive ends, and recovery of runs a crash or a
//! shutdown left running.

use super::bind::Bound;
use super::lease::Claim;
use super::outcome::{Accepted, Acknowledging, RunResult};
use super::store::blocking;
use super::{RunService, drive, nested};
use crate::error::Error;
use flow_engine::machine::Machine;
use flow_engine::program::Program;
use flow_store::{DiscoveryQuery, FactRef, RunId, RunState};
use serde_json::json;
use std::sync::Arc;
use tokio::sync::watch;

/// How a new run's drive begins: with its Start to record in the first
/// round's commit, or held until `gate` opens (or is dropped) with its
/// Start already durable; a drive of a run that exists begins as
/// `default`.
#[derive(Default)]
pub(super) struct Start {
    pub creating: Option<drive::Creating>,
    pub gate: Option<tokio::sync::oneshot::Receiver<()>>,
}

impl RunService {
    /// Continues every run left `running` (a crash or a shutdown cut its
    /// drive short): settles its open Tool calls as `flow resume` does and
    /// drives on. Nested runs are continued by their outer run's settling.
    pub async fn recover(&self) -> usize {
        let mut after: Option<String> = None;
        let mut found = Vec::new();
        loop {
            let q = DiscoveryQuery {
                limit: Some(DiscoveryQuery::MAX_LIMIT),
                after: after.clone(),
                state: Some(RunState::Running),
            };
            let page = match blocking(&self.inner.store, move |s| Ok(s.discover(&q)?)).await {
                Ok(p) => p,
                Err(e) => {
                    tracing::error!(error = %e, "recovery: discovery failed");
                    break;
                }
            };
            found.extend(page.runs.iter().filter_map(|r| RunId::parse(&r.run).ok()));
            match page.next_after {
                Some(n) => after = Some(n),
                None => break,
            }
        }
        // A nested run left running is continued by the outermost run
        // whose drive carries it (which may itself be paused: a reply
        // carried down to the nested run was durable before the crash).
        let mut roots = Vec::new();
        for run in found {
            let r = run.clone();
            let root = blocking(&self.inner.store, move |s| {
                let i = s.run_info(&r)?;
                if i.state != RunState::Running {
                    return Ok(None);
                }
                let (root, _) = nested::live_root(s, &r)?;
                let live = root == r || s.run_info(&root)?.ending.is_none();
                Ok((i.outer.is_none() || root != r)
                    .then_some(root)
                    .filter(|_| live))
            })
            .await;
            if let Ok(Some(root)) = root
                && !roots.contains(&root)
            {
                roots.push(root);
            }
        }
        let mut resumed = 0;
        for run in roots {
            // A recovery that fails keeps the lease until it expires.
            let claim = match self.claim(&run, false).await {
                Ok(c) => c.keep_lease(),
                Err(e @ Error::Leased { .. }) => {
                    tracing::info!(run.id = %run, "recovery: {e}");
                    continue;
                }
                Err(e) => {
                    tracing::error!(run.id = %run, error = %e, "recovery: cannot continue");
                    continue;
                }
            };
            tracing::info!(run.id = %run, "recovery: continuing a run left running");
            match self.resume_claimed(claim, None).await {
                Ok(_) => resumed += 1,
                Err(e) => tracing::error!(run.id = %run, error = %e, "recovery: cannot continue"),
            }
        }
        resumed
    }

    /// Moves a claimed, bound, prepared run into a drive task (`start`:
    /// how a new run's drive begins).
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn spawn_drive(
        &self,
        claim: Claim,
        bound: Bound,
        program: Arc<Program>,
        machine: Machine,
        first: Vec<drive::Step>,
        resend: Vec<drive::ToDispatch>,
        head: FactRef,
        start: Start,
    ) -> Acknowledging {
        let Start { creating, gate } = start;
        let (tx, rx) = watch::channel(None);
        let (ack_tx, ack_rx) = tokio::sync::oneshot::channel();
        let run = claim.run.clone();
        let this = self.clone();
        let task = async move {
            let token = claim.token.clone();
            let writes = drive::Writes::new(claim.drain.clone());
            let drive = async {
                if let Some(gate) = gate {
                    // Open or dropped: either way, drive on.
                    let _ = gate.await;
                }
                this.drive(
                    &claim.run,
                    program,
                    machine,
                    first,
                    &bound.host,
                    resend,
                    head.n,
                    Some(ack_tx),
                    &writes,
                    creating,
                )
                .await
            };
            let r = tokio::select! {
                biased;
                r = drive => Some(r),
                _ = token.cancelled() => None,
            };
            // A commit handed to the store before the stop finishes first.
            let _done = writes.lock().await;
            // The lease goes when the run paused or ended, or (handed over)
            // when the drive drained or was stopped at shutdown; a drive
            // that failed keeps it until it expires (a retry a lease time
            // later), and one stopped or drained by a halt or stopped by a
            // fence keeps it for the halt or does not hold it.
            let stopping = !this.inner.running.accepting();
            let release = match &r {
                Some(Ok(drive::Driven::Drained)) | None => stopping,
                Some(r) => r.is_ok(),
            };
            bound.release().await;
            let run = claim.run.clone();
            claim.finish(release).await;
            let r = match r {
                Some(Ok(drive::Driven::Result(r))) => Ok(r),
                Some(Err(e)) => Err(e),
                Some(Ok(drive::Driven::Drained)) => {
                    // No call is out; the run goes on where it is continued
                    // next. Its waiters hear nothing (it is still running).
                    tracing::info!(run.id = %run, "drive drained");
                    return;
                }
                None => {
                    // Halted or cut short by shutdown: the run stays as the
                    // halt left it; open calls are settled on resume.
                    tracing::info!(run.id = %run, "drive stopped");
                    let _ = tx.send(Some(Err(Error::Halted(run.to_string()))));
                    return;
                }
            };
            match &r {
                Ok(res) => {
                    this.inner.stats.finished(res.state());
                    if matches!(res, RunResult::Paused { .. }) {
                        this.inner.deadlines.watch_run(&this, &run).await;
                    }
                    this.publish(run.as_str(), res.state(), json!({}));
                }
                Err(e) => {
                    tracing::warn!(run.id = %run, error = %e, "drive ended with an error");
                    // A run whose Start was refused with its first round
                    // does not exist: nothing to tell.
                    let r2 = run.clone();
                    if let Ok(st) =
                        blocking(&this.inner.store, move |s| Ok(s.run_info(&r2)?.state)).await
                    {
                        this.publish(run.as_str(), st.as_str(), json!({}));
                    }
                }
            }
            let _ = tx.send(Some(r));
        };
        self.inner.running.spawn(task, true);
        Accepted {
            run,
            head,
            outcome: rx,
        }
        .with_ack(ack_rx)
    }
}
