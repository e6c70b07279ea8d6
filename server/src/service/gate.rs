//! The replay gate (issue 39, item 1): every selected stored run of a
//! flow replayed against a CANDIDATE program — the one a team is about to
//! deploy — with nothing bound and nothing dispatched, in parallel, each
//! with the verdict the seed defines (running-a-program, "Replay":
//! matched, incomplete, or diverged at a fact with the reason).
//!
//! The candidate stands where the recorded program stood: the engine's
//! [`Replayer`] never compares the Start's program hash (it re-derives
//! every later fact and compares those), so a changed program replays
//! like the recorded one, and a run it no longer fits diverges at the
//! first fact it would record differently. That is the seed's rule for a
//! saved history replayed "against the current program" (`flow test`),
//! here applied to the live store (docs/recovery.md).
//!
//! A storage failure while reading a run is the gate's error (exit 5),
//! never a verdict (seed: "A storage failure found while reading is
//! reported as a storage failure, never as a verdict").

use super::RunService;
use crate::error::{Error, Result};
use crate::source::Sources;
use flow_abi::fact::Fact;
use flow_engine::program::Program;
use flow_engine::replay::{Replayer, Verdict};
use flow_store::{RunId, RunListQuery};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;

/// A run's verdict under the candidate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum GateVerdict {
    /// Every recorded fact re-derived, the same End.
    Matched,
    /// Every recorded fact re-derived, but the record ends first (a
    /// paused, running, halted or crashed run).
    Incomplete,
    /// The candidate derives another fact at `fact`.
    Diverged,
}

/// One run replayed against the candidate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct GateRun {
    pub run: String,
    pub verdict: GateVerdict,
    /// Diverged: the first recorded fact the candidate does not re-derive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fact: Option<u64>,
    /// Diverged: why (the seed's reason: other tool, other arguments,
    /// other node, a call the record lacks, a different ending).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The recorded facts read (a divergence stops the reading).
    pub facts: u64,
}

/// Runs with one verdict and reason, and one of them to look at.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct GateGroup {
    pub verdict: GateVerdict,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// How many runs have this verdict and reason.
    pub runs: u64,
    /// One of them (the first selected), and where it diverged.
    pub example: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fact: Option<u64>,
}

/// What the gate found. `passed` is the CI answer: no run diverged
/// (incomplete runs pass: every fact they recorded re-derives under the
/// candidate; what they have not recorded yet, no program can be held
/// to). Exit codes: 0 passed, 1 a run diverged, 2 refused.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct GateReport {
    /// The candidate's flow id: the runs selected are runs of it.
    pub flow: String,
    /// The candidate's program hash.
    pub program: String,
    pub passed: bool,
    /// Runs replayed, and how many had each verdict.
    pub runs: u64,
    pub matched: u64,
    pub incomplete: u64,
    pub diverged: u64,
    /// Recorded facts read over every run.
    pub facts: u64,
    /// Always false for now: every selected run is replayed (no static
    /// graph diff skips a run that never reached a changed node).
    pub skipped_static: bool,
    /// By verdict and reason, diverged first, each with one example run.
    pub groups: Vec<GateGroup>,
    /// Every run, in the order selected.
    pub results: Vec<GateRun>,
}

impl GateReport {
    /// The CLI's exit code for this report.
    pub fn exit_code(&self) -> u8 {
        if self.passed { 0 } else { 1 }
    }

    fn of(flow: String, program: String, results: Vec<GateRun>) -> GateReport {
        let count = |v| results.iter().filter(|r| r.verdict == v).count() as u64;
        let (matched, incomplete, diverged) = (
            count(GateVerdict::Matched),
            count(GateVerdict::Incomplete),
            count(GateVerdict::Diverged),
        );
        // Grouped by (verdict, reason), diverged first, then the most
        // runs, then the reason's text (a stable order to print).
        let mut groups: Vec<GateGroup> = Vec::new();
        let mut at: HashMap<(GateVerdict, Option<String>), usize> = HashMap::new();
        for r in &results {
            let key = (r.verdict, r.reason.clone());
            match at.get(&key) {
                Some(&i) => groups[i].runs += 1,
                None => {
                    at.insert(key, groups.len());
                    groups.push(GateGroup {
                        verdict: r.verdict,
                        reason: r.reason.clone(),
                        runs: 1,
                        example: r.run.clone(),
                        fact: r.fact,
                    });
                }
            }
        }
        let rank = |v: GateVerdict| match v {
            GateVerdict::Diverged => 0,
            GateVerdict::Incomplete => 1,
            GateVerdict::Matched => 2,
        };
        groups.sort_by(|a, b| {
            (rank(a.verdict), std::cmp::Reverse(a.runs), &a.reason).cmp(&(
                rank(b.verdict),
                std::cmp::Reverse(b.runs),
                &b.reason,
            ))
        });
        GateReport {
            flow,
            program,
            passed: diverged == 0,
            runs: results.len() as u64,
            matched,
            incomplete,
            diverged,
            facts: results.iter().map(|r| r.facts).sum(),
            skipped_static: false,
            groups,
            results,
        }
    }
}

/// The checked candidate, and its program rooted under each entry module
/// name the runs recorded (a run started from `triage.json` records that
/// root; the same flow submitted over HTTP records `flow.json`): the
/// candidate's root document stands in for the recorded root, whatever
/// its own file name.
pub(super) struct Candidate {
    pub(super) sources: Sources,
    pub(super) program: Arc<Program>,
    rooted: Mutex<BTreeMap<String, Arc<Program>>>,
}

impl Candidate {
    /// The candidate checked (off the async runtime: a check is CPU work),
    /// and its flow id.
    pub(super) fn new(sources: Sources) -> Result<(Candidate, String)> {
        let program = sources.program()?;
        let flow = program
            .root_module()
            .map(|m| m.report.flow.id.clone())
            .unwrap_or_default();
        let candidate = Candidate {
            sources,
            program,
            rooted: Mutex::new(BTreeMap::new()),
        };
        Ok((candidate, flow))
    }

    /// The selection of runs `query` makes, confined to the candidate's
    /// flow id (another flow id in the query is refused).
    pub(super) fn confine(flow: &str, query: &mut RunListQuery, what: &str) -> Result<()> {
        match &query.flow {
            Some(f) if f != flow => Err(Error::Refused(format!(
                "the {what}'s flow id is {flow:?}: only runs of that flow are selected, not of {f:?} (leave out the flow filter)"
            ))),
            _ => {
                query.flow = Some(flow.to_string());
                Ok(())
            }
        }
    }

    fn rooted(&self, module: &str) -> Result<Arc<Program>> {
        if module == self.sources.root {
            return Ok(self.program.clone());
        }
        if let Some(p) = self.rooted.lock().ok().and_then(|m| m.get(module).cloned()) {
            return Ok(p);
        }
        if self.sources.texts.contains_key(module) {
            return Err(Error::Refused(format!(
                "a run's root module is {module:?}, which the candidate has as another module: name the candidate's root file {module}"
            )));
        }
        let mut s = self.sources.clone();
        let text = s.texts.remove(&s.root).unwrap_or_default();
        s.texts.insert(module.to_string(), text);
        s.root = module.to_string();
        let p = s.program()?;
        if let Ok(mut m) = self.rooted.lock() {
            m.insert(module.to_string(), p.clone());
        }
        Ok(p)
    }
}

/// The most runs one page of the selection reads.
const PAGE: u32 = 200;

impl RunService {
    /// The replay gate: every run `query` selects of the candidate's flow
    /// (its flow filter is the candidate's id; another id is refused),
    /// replayed against `candidate` on blocking threads, as many at once
    /// as the machine has cores. Each verdict is sent on `progress` as it
    /// comes (in the order replays finish); the report lists them in the
    /// order selected. A candidate that does not check is refused
    /// ([`Error::Check`], its diagnostics), before any run is read.
    pub async fn gate(
        &self,
        candidate: Sources,
        mut query: RunListQuery,
        progress: Option<mpsc::UnboundedSender<GateRun>>,
    ) -> Result<GateReport> {
        let this = self.clone();
        let (candidate, runs) = tokio::task::spawn_blocking(move || {
            let (candidate, flow) = Candidate::new(candidate)?;
            Candidate::confine(&flow, &mut query, "candidate")?;
            let runs = this.select(query)?;
            Ok::<_, Error>(((Arc::new(candidate), flow), runs))
        })
        .await
        .map_err(|e| Error::Unreadable(format!("a gate task ended: {e}")))??;
        let ((candidate, flow), runs) = (candidate, runs);
        let hash = candidate.sources.program_hash();
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let permits = Arc::new(Semaphore::new(cores));
        let mut set = JoinSet::new();
        for (i, run) in runs.into_iter().enumerate() {
            let (this, candidate, permits) = (self.clone(), candidate.clone(), permits.clone());
            set.spawn(async move {
                let _permit = permits.acquire_owned().await;
                let r = tokio::task::spawn_blocking(move || {
                    this.gate_one(&run, &candidate, &mut |_| {})
                })
                .await
                .map_err(|e| Error::Unreadable(format!("a gate replay ended: {e}")))?;
                r.map(|r| (i, r))
            });
        }
        let mut results: Vec<(usize, GateRun)> = Vec::new();
        while let Some(joined) = set.join_next().await {
            let (i, r) =
                joined.map_err(|e| Error::Unreadable(format!("a gate replay ended: {e}")))??;
            if let Some(tx) = &progress {
                // A listener that has gone stops hearing, not the gate.
                let _ = tx.send(r.clone());
            }
            results.push((i, r));
        }
        results.sort_by_key(|(i, _)| *i);
        Ok(GateReport::of(
            flow,
            hash,
            results.into_iter().map(|(_, r)| r).collect(),
        ))
    }

    /// Every run id `query` selects, oldest first (page by page).
    pub(super) fn select(&self, mut query: RunListQuery) -> Result<Vec<RunId>> {
        query.limit = Some(PAGE);
        let mut runs = Vec::new();
        loop {
            let page = self.inner.store.list_runs(&query)?;
            for r in &page.runs {
                runs.push(RunId::parse(&r.row.run).map_err(|e| Error::Unreadable(e.to_string()))?);
            }
            match page.next {
                Some(next) => query.cursor = Some(next),
                None => return Ok(runs),
            }
        }
    }

    /// One run's history walked into a replay against the candidate
    /// (rooted under the run's recorded entry module), stopping at the
    /// first divergence. `see` is shown each fact read (the divergent one
    /// last).
    pub(super) fn gate_one(
        &self,
        run: &RunId,
        candidate: &Candidate,
        see: &mut dyn FnMut(&Fact),
    ) -> Result<GateRun> {
        let store = &*self.inner.store;
        let mut replaying: Option<Replayer> = None;
        let mut refused = None;
        let mut facts = 0u64;
        let walked = store.walk_logical(run, &mut |f, change| {
            facts += 1;
            see(f);
            if replaying.is_none() {
                let program = match f {
                    Fact::Start { entry, .. } => candidate.rooted(&entry.module),
                    _ => Ok(candidate.program.clone()),
                };
                match program {
                    Ok(p) => replaying = Some(Replayer::new(p)),
                    Err(e) => {
                        refused = Some(e);
                        return false;
                    }
                }
            }
            replaying.as_mut().is_some_and(|r| r.push(f, change))
        });
        if let Some(e) = refused {
            return Err(e);
        }
        // A fact that holds a hole ends the replay there: incomplete, hole.
        let verdict = match walked {
            Err(flow_store::Error::Hole { n, .. }) => Verdict::Hole { fact: n },
            walked => {
                walked?;
                replaying
                    .ok_or_else(|| Error::Unreadable(format!("{run} has no Start")))?
                    .finish()
                    .verdict
            }
        };
        let (verdict, fact, reason) = match verdict {
            Verdict::Matched => (GateVerdict::Matched, None, None),
            Verdict::Incomplete => (GateVerdict::Incomplete, None, None),
            Verdict::Hole { fact } => (GateVerdict::Incomplete, Some(fact), Some("hole".into())),
            Verdict::Diverged { fact, reason } => (GateVerdict::Diverged, Some(fact), Some(reason)),
        };
        Ok(GateRun {
            run: run.to_string(),
            verdict,
            fact,
            reason,
            facts,
        })
    }
}
