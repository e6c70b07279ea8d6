//! Bulk recovery (issue 39, item 2): every selected stored run of a flow
//! that a FIXED program no longer replays is forked onto FIXED from the
//! latest root Checkpoint that precedes its first divergence and that
//! FIXED fits (FORK-4), and the fork is started — as `flow fork RUN
//! --checkpoint N --flow FIXED` does, one run after another, at most
//! `rate` forks a second. Every recorded Reply before the fork point is
//! kept: nothing before it runs again.
//!
//! A recovery that forks is recorded outside every history (the store's
//! `recoveries`, migration 0014): its id `rec-…`, who began it, FIXED's
//! flow and program, when it began and ended and its counts — and, written
//! in the same commit as each fork's Start (a `recovery` host record),
//! which fork it made of which run from which checkpoint. While it goes it
//! holds its flow's lock (at most one recovery of a flow forks at a time,
//! on any server of the store), renewed every few seconds; a recovery
//! whose server stopped shows `interrupted` once its lock expires.
//!
//! Each fork's Start also names its parent and checkpoint (FORK-1) and
//! records FIXED's program hash. A run that already has a fork whose
//! program is FIXED's is `already recovered` (with the recovery that made
//! it), so a recovery run again — after an interruption, even a kill -9
//! between two forks — forks only the runs still without one. The forks
//! are runs of the same flow, replayed matched by FIXED: a later recovery
//! selects them as `not needed`.

use super::fork::fit;
use super::gate::{Candidate, GateVerdict};
mod select;

pub use select::{NAMED, Selection};

use super::outcome::new_run_id;
use super::prepare::read_start;
use super::store::blocking;
use super::{Accepted, RunService};
use crate::error::{Error, Result};
use crate::service::whatif::ForkAt;
use crate::source::Sources;
use flow_abi::fact::Fact;
use flow_store::{HostDetails, HostRecord, NewRecovery, RecoveryBegun, RunId, RunListQuery};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// What became of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub enum RecoverOutcome {
    /// Forked onto FIXED and started (`fork` is the new run).
    Recovered,
    /// The dry run: it would be forked from `checkpoint`.
    Recoverable,
    /// It replays matched or incomplete under FIXED: nothing to recover.
    NotNeeded,
    /// It already has a fork onto FIXED's program (`fork`): not forked
    /// again.
    AlreadyRecovered,
    /// No root Checkpoint before its divergence that FIXED fits (`why`),
    /// or the fork was refused.
    Unrecoverable,
}

/// A recorded Call after the fork point: the fork makes it again.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AgainCall {
    /// The Call's fact number in the run.
    pub fact: u64,
    pub call: String,
    pub node: String,
    pub tool: String,
}

/// One run of a recovery.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RecoverRun {
    pub run: String,
    pub outcome: RecoverOutcome,
    /// The first recorded fact FIXED does not re-derive, and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diverged: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The fork point: a root Checkpoint's fact number, and its node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The fork (recovered now, or already).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fork: Option<String>,
    /// The recovery that made the fork (`rec-…`): this one, or for a run
    /// already recovered an earlier one (none when the fork was made by
    /// hand, `flow fork --flow`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery: Option<String>,
    /// The recorded Calls between the fork point and the divergence: the
    /// fork makes these again (from the divergence on FIXED decides).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub again: Vec<AgainCall>,
    /// Unrecoverable: why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

impl RecoverRun {
    /// `run`'s line with `outcome` and nothing else said yet.
    fn new(run: String, outcome: RecoverOutcome) -> RecoverRun {
        RecoverRun {
            run,
            outcome,
            diverged: None,
            reason: None,
            checkpoint: None,
            node: None,
            fork: None,
            recovery: None,
            again: Vec::new(),
            why: None,
        }
    }
}

/// What a recovery did (or, dry, would do). Exit codes: 0 every run
/// recovered, recoverable, already recovered or not needed; 1 a run
/// cannot be recovered; 2 refused.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecoverReport {
    /// This recovery's id (`rec-…`: `flow recoveries ID`, `GET
    /// /v1/recoveries/{id}`); none for a dry run, which records nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery: Option<String>,
    /// FIXED's flow id: the runs selected are runs of it.
    pub flow: String,
    /// FIXED's program hash: the forks record it.
    pub program: String,
    pub dry_run: bool,
    pub runs: u64,
    pub recovered: u64,
    pub recoverable: u64,
    pub not_needed: u64,
    pub already_recovered: u64,
    pub unrecoverable: u64,
    /// Wall time of the whole recovery, in milliseconds.
    pub elapsed_ms: u64,
    /// Every run, in the order selected.
    pub results: Vec<RecoverRun>,
}

impl RecoverReport {
    /// The CLI's exit code for this report.
    pub fn exit_code(&self) -> u8 {
        if self.unrecoverable == 0 { 0 } else { 1 }
    }

    /// Its counts, as the record keeps them.
    fn counts(&self) -> RecoverCounts {
        RecoverCounts {
            runs: self.runs,
            recovered: self.recovered,
            already_recovered: self.already_recovered,
            not_needed: self.not_needed,
            unrecoverable: self.unrecoverable,
            elapsed_ms: self.elapsed_ms,
        }
    }
}

/// A recovery's counts, kept in its record when it ends.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecoverCounts {
    pub runs: u64,
    pub recovered: u64,
    pub already_recovered: u64,
    pub not_needed: u64,
    pub unrecoverable: u64,
    pub elapsed_ms: u64,
}

/// How a recorded recovery ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum RecoveryEnd {
    /// It went through every selected run.
    Counts(RecoverCounts),
    /// It stopped short (Tools not bound, a storage failure, the server
    /// stopping): why. The forks it made are kept; recovering again goes
    /// on from there.
    Failed(String),
}

/// How a recovery goes.
#[derive(Clone, Copy, Debug)]
pub struct RecoverOptions {
    /// List what would happen; fork nothing.
    pub dry_run: bool,
    /// At most this many forks a second (0: no limit).
    pub rate: f64,
}

/// The default `rate`: forks a second.
pub const RATE: f64 = 10.0;

/// How long a recovery's lock on its flow lasts unless renewed: a
/// recovery whose server stopped is `interrupted` after this, and the
/// flow can be recovered again.
pub const LOCK: Duration = Duration::from_secs(10);

/// A recovery begun: FIXED checked, its runs selected and — unless it is a
/// dry run — recorded under its id, holding its flow's lock (renewed
/// while this lives; dropping it lets the lock expire).
pub struct Recovery {
    /// `rec-…`; none for a dry run, which records nothing.
    id: Option<String>,
    candidate: Arc<Candidate>,
    flow: String,
    runs: Vec<std::result::Result<RunId, RecoverRun>>,
    options: RecoverOptions,
    began: Instant,
    _renewing: Option<tokio_util::sync::DropGuard>,
}

impl Recovery {
    /// Its id (`rec-…`), none for a dry run.
    pub fn id(&self) -> Option<&str> {
        self.id.as_deref()
    }
}

impl RunService {
    /// Begins a recovery of every run `selection` takes of FIXED's flow (a
    /// flow filter is FIXED's id; another id is refused): FIXED that does
    /// not check is refused ([`Error::Check`]) before any run is read; a
    /// recovery that forks is recorded as `who`'s and takes the flow's
    /// lock — refused ([`Error::Conflict`], naming it) while another
    /// recovery of the flow holds it, on any server of the store.
    pub async fn begin_recovery(
        &self,
        fixed: Sources,
        selection: impl Into<Selection>,
        options: RecoverOptions,
        who: &str,
    ) -> Result<Recovery> {
        let began = Instant::now();
        let this = self.clone();
        let selection = selection.into();
        let (candidate, flow, runs) = tokio::task::spawn_blocking(move || {
            let (candidate, flow) = Candidate::new(fixed)?;
            let runs = this.selected(&flow, selection)?;
            Ok::<_, Error>((Arc::new(candidate), flow, runs))
        })
        .await
        .map_err(|e| Error::Unreadable(format!("a recovery task ended: {e}")))??;
        let mut recovery = Recovery {
            id: None,
            candidate,
            flow,
            runs,
            options,
            began,
            _renewing: None,
        };
        if options.dry_run {
            return Ok(recovery);
        }
        let new = NewRecovery {
            id: new_run_id().as_str().replacen("run-", "rec-", 1),
            flow: recovery.flow.clone(),
            program: recovery.candidate.sources.program_hash(),
            who: who.to_string(),
        };
        let id = new.id.clone();
        match blocking(
            &self.inner.store,
            move |s| Ok(s.begin_recovery(&new, LOCK)?),
        )
        .await?
        {
            RecoveryBegun::Holding => {}
            RecoveryBegun::HeldBy(r) => {
                return Err(Error::Conflict(format!(
                    "recovery {} of flow {} (by {}) is running: wait for it to end (flow recoveries {} shows it), or for its lock to expire within {} s if its server stopped",
                    r.id,
                    r.flow,
                    r.who,
                    r.id,
                    LOCK.as_secs()
                )));
            }
        }
        recovery._renewing = Some(self.renew_recovery(id.clone()).drop_guard());
        recovery.id = Some(id);
        Ok(recovery)
    }

    /// Renews recovery `id`'s lock every quarter of [`LOCK`] until the
    /// token is cancelled (the [`Recovery`] dropped).
    fn renew_recovery(&self, id: String) -> tokio_util::sync::CancellationToken {
        let done = tokio_util::sync::CancellationToken::new();
        let (store, stop) = (self.inner.store.clone(), done.clone());
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(LOCK / 4) => {}
                }
                let id = id.clone();
                match blocking(&store, move |s| Ok(s.renew_recovery(&id, LOCK)?)).await {
                    Ok(true) => {}
                    // Ended: nothing to hold.
                    Ok(false) => return,
                    // The next renewal tries again; the lock lasts LOCK.
                    Err(e) => tracing::warn!(error = %e, "a recovery's lock was not renewed"),
                }
            }
        });
        done
    }

    /// Goes through a begun recovery: each selected run that FIXED does not
    /// replay is forked onto FIXED (at most `rate` forks a second), each
    /// run's line sent on `progress` as it is done. The forks' drives are
    /// returned (a CLI waits for them before it exits). The recovery is
    /// ended in the record with its counts — or, when it fails, with why.
    pub async fn run_recovery(
        &self,
        recovery: Recovery,
        progress: Option<mpsc::UnboundedSender<RecoverRun>>,
    ) -> Result<(RecoverReport, Vec<Accepted>)> {
        let id = recovery.id.clone();
        let gone = self.recover_each(&recovery, progress).await;
        if let Some(id) = id {
            let ended = match &gone {
                Ok((report, _)) => RecoveryEnd::Counts(report.counts()),
                Err(e) => RecoveryEnd::Failed(e.to_string()),
            };
            let text = serde_json::to_string(&ended).unwrap_or_default();
            blocking(&self.inner.store, move |s| Ok(s.end_recovery(&id, &text)?)).await?;
        }
        drop(recovery);
        gone
    }

    async fn recover_each(
        &self,
        recovery: &Recovery,
        progress: Option<mpsc::UnboundedSender<RecoverRun>>,
    ) -> Result<(RecoverReport, Vec<Accepted>)> {
        let (candidate, options) = (&recovery.candidate, recovery.options);
        let hash = candidate.sources.program_hash();
        let gap = (options.rate > 0.0).then(|| Duration::from_secs_f64(1.0 / options.rate));
        let mut next_fork = Instant::now();
        let (mut results, mut drives) = (Vec::new(), Vec::new());
        for run in &recovery.runs {
            let run = match run {
                Ok(run) => run,
                // Named, but not a run of FIXED's flow here: said, not planned.
                Err(line) => {
                    if let Some(tx) = &progress {
                        let _ = tx.send(line.clone());
                    }
                    results.push(line.clone());
                    continue;
                }
            };
            let (this, c, h, r) = (self.clone(), candidate.clone(), hash.clone(), run.clone());
            let mut line = tokio::task::spawn_blocking(move || this.plan(&r, &c, &h))
                .await
                .map_err(|e| Error::Unreadable(format!("a recovery task ended: {e}")))??;
            if let (RecoverOutcome::Recoverable, Some(id)) = (line.outcome, &recovery.id) {
                if let Some(gap) = gap {
                    tokio::time::sleep_until(next_fork.into()).await;
                    next_fork = Instant::now() + gap;
                }
                let at = ForkAt::Checkpoint(line.checkpoint.unwrap_or_default());
                let by = HostDetails::Recovered {
                    recovery: id.clone(),
                };
                match self
                    .fork_recorded(
                        run,
                        at,
                        &[],
                        Some(candidate.sources.clone()),
                        vec![HostRecord::now(by)],
                    )
                    .await
                {
                    Ok((accepted, _)) => {
                        line.outcome = RecoverOutcome::Recovered;
                        line.fork = Some(accepted.run.to_string());
                        line.recovery = Some(id.clone());
                        drives.push(accepted);
                    }
                    // This run's own refusal: reported, the others go on.
                    Err(e @ (Error::Refused(_) | Error::NotFound(_) | Error::Conflict(_))) => {
                        line.outcome = RecoverOutcome::Unrecoverable;
                        line.why = Some(format!("the fork was refused: {e}"));
                    }
                    // What would refuse every fork (Tools not bound, a
                    // storage failure, the service stopping) ends the
                    // recovery: the forks made so far are recorded, and
                    // running it again goes on from there.
                    Err(e) => return Err(e),
                }
            }
            if line.outcome == RecoverOutcome::AlreadyRecovered && !options.dry_run {
                // A fork a crash cut short right after its Start is
                // continued: it starts as the fork would have.
                if let Some(accepted) = self.continue_stub(line.fork.as_deref()).await? {
                    drives.push(accepted);
                }
            }
            if let Some(tx) = &progress {
                // A listener that has gone stops hearing, not the recovery.
                let _ = tx.send(line.clone());
            }
            results.push(line);
        }
        let count = |o| results.iter().filter(|r| r.outcome == o).count() as u64;
        let report = RecoverReport {
            recovery: recovery.id.clone(),
            flow: recovery.flow.clone(),
            program: hash,
            dry_run: options.dry_run,
            runs: results.len() as u64,
            recovered: count(RecoverOutcome::Recovered),
            recoverable: count(RecoverOutcome::Recoverable),
            not_needed: count(RecoverOutcome::NotNeeded),
            already_recovered: count(RecoverOutcome::AlreadyRecovered),
            unrecoverable: count(RecoverOutcome::Unrecoverable),
            elapsed_ms: recovery.began.elapsed().as_millis() as u64,
            results,
        };
        Ok((report, drives))
    }

    /// One run's plan (off the async runtime): replayed against FIXED as
    /// the gate does; when it diverges, its forks looked up for one onto
    /// FIXED's program `hash`, else its fork point found: the latest root
    /// Checkpoint before the divergence that FIXED fits.
    fn plan(&self, run: &RunId, fixed: &Candidate, hash: &str) -> Result<RecoverRun> {
        let store = &*self.inner.store;
        let start = read_start(store, run)?;
        let not_needed = RecoverRun::new(run.to_string(), RecoverOutcome::NotNeeded);
        // A run of FIXED already (an earlier recovery's fork among them,
        // even one a crash cut short after its Start): nothing to move.
        if matches!(&start, Fact::Start { program, .. } if program == hash) {
            return Ok(not_needed);
        }
        let (mut checkpoints, mut calls) = (Vec::new(), Vec::new());
        let gated = self.gate_one(run, fixed, &mut |f| match f {
            Fact::Checkpoint { n, task, node, .. } if task == "root" => {
                checkpoints.push((*n, node.clone()));
            }
            Fact::Call {
                n,
                call,
                node,
                tool,
                ..
            } => calls.push(AgainCall {
                fact: *n,
                call: call.to_string(),
                node: node.clone(),
                tool: tool.clone(),
            }),
            _ => {}
        })?;
        let mut line = RecoverRun {
            diverged: gated.fact,
            reason: gated.reason,
            ..not_needed
        };
        let Some(diverged) = gated
            .fact
            .filter(|_| gated.verdict == GateVerdict::Diverged)
        else {
            return Ok(line);
        };
        if let Some((fork, checkpoint)) = self.fork_onto(run, hash)? {
            line.outcome = RecoverOutcome::AlreadyRecovered;
            line.recovery = store.recovery_of(&fork)?.map(|f| f.recovery);
            line.fork = Some(fork);
            line.checkpoint = Some(checkpoint);
            return Ok(line);
        }
        let recorded = self.program(&Sources::from_start(store, &start)?)?;
        let mut refused = None;
        for (n, node) in checkpoints.iter().rev().filter(|(n, _)| *n < diverged) {
            let state = store.checkpoint_state(run, *n)?;
            match fit(&recorded, &fixed.program, node, &state) {
                Ok(()) => {
                    line.outcome = RecoverOutcome::Recoverable;
                    line.checkpoint = Some(*n);
                    line.node = Some(node.clone());
                    line.again = calls
                        .into_iter()
                        .filter(|c| c.fact > *n && c.fact < diverged)
                        .collect();
                    return Ok(line);
                }
                Err(e) => {
                    refused.get_or_insert((*n, e.to_string()));
                }
            }
        }
        line.outcome = RecoverOutcome::Unrecoverable;
        line.why = Some(match refused {
            Some((n, e)) => format!(
                "no root Checkpoint before fact {diverged} fits the fixed program (the latest, at fact {n}: {e})"
            ),
            None => format!("no root Checkpoint before fact {diverged}, where it diverges"),
        });
        Ok(line)
    }

    /// Continues `fork` when a crash cut it short right after its Start
    /// (its history is only the Start and nobody drives it); a fork that
    /// is being driven, or went further, is left as it is.
    async fn continue_stub(&self, fork: Option<&str>) -> Result<Option<super::Accepted>> {
        let Some(fork) = fork.and_then(|f| RunId::parse(f).ok()) else {
            return Ok(None);
        };
        let (s, f) = (self.inner.store.clone(), fork.clone());
        let info = tokio::task::spawn_blocking(move || s.run_info(&f))
            .await
            .map_err(|e| Error::Unreadable(format!("a recovery task ended: {e}")))??;
        if info.last_fact.n != 1 || info.ending.is_some() {
            return Ok(None);
        }
        match self.continue_run(&fork, None).await {
            Ok(accepted) => Ok(Some(accepted)),
            // Driven already (a takeover got to it first).
            Err(Error::Conflict(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// A fork of `run` onto the program `hash` (the first by id), with the
    /// checkpoint it started from:
    /// the runs index's forks of the run (FORK-1 lineage), each row with
    /// its program hash and head.
    fn fork_onto(&self, run: &RunId, hash: &str) -> Result<Option<(String, u64)>> {
        let mut query = RunListQuery {
            fork_of: Some(run.to_string()),
            limit: Some(200),
            ..RunListQuery::default()
        };
        loop {
            let page = self.inner.store.list_runs(&query)?;
            // A fork a crash cut short right after its Start counts too:
            // the recovery continues it (`continue_stub`).
            let found = page
                .runs
                .iter()
                .find(|r| r.row.program.as_deref() == Some(hash));
            if let Some(r) = found {
                let checkpoint = r.parent.as_ref().map_or(0, |(_, n)| *n);
                return Ok(Some((r.row.run.clone(), checkpoint)));
            }
            match page.next {
                Some(next) => query.cursor = Some(next),
                None => return Ok(None),
            }
        }
    }
}
