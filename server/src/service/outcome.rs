//! What the run service hands back: a drive's result, the acknowledgement
//! of a start, resume or fork with the outcome still to come, the gate that
//! holds a drive, run state changes, counters.

use crate::error::{Error, Result};
use crate::source::Sources;
use flow_engine::machine::{Ending, Machine, OpenCall};
use flow_store::{FactRef, Namespace, RunId};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use serde_json::{Value as Json, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::watch;

/// How a drive ended for now.
#[derive(Debug, Clone, PartialEq)]
pub enum RunResult {
    Completed {
        run: RunId,
        exit: String,
        output: Json,
    },
    Faulted {
        run: RunId,
        why: String,
    },
    /// Every live task waits on a call no live implementation will answer.
    /// `open` lists the calls to answer: the run's own, and for a call
    /// that drives a paused nested run, that run's (in turn).
    Paused {
        run: RunId,
        open: Vec<PendingCall>,
    },
}

/// A call a client answers to continue a paused run: `run` is the run
/// whose call it is — the paused run itself, or a nested run it drives
/// (`flow resume` and `POST /v1/runs/{run}/resume` take either run id).
#[derive(Debug, Clone, PartialEq)]
pub struct PendingCall {
    pub run: RunId,
    /// The Call's fact number, when read from the history (a live
    /// machine's open calls do not know it).
    pub fact: Option<u64>,
    pub open: OpenCall,
}

impl PendingCall {
    pub fn to_json(&self) -> Json {
        let c = &self.open;
        json!({
            "run": self.run.as_str(), "call": c.call, "task": c.task, "node": c.node,
            "tool": c.tool, "args": c.args,
        })
    }
}

impl RunResult {
    pub fn run(&self) -> &RunId {
        match self {
            RunResult::Completed { run, .. }
            | RunResult::Faulted { run, .. }
            | RunResult::Paused { run, .. } => run,
        }
    }

    pub(super) fn ended(run: &RunId, ending: Ending) -> RunResult {
        match ending {
            Ending::Completed { exit, output } => RunResult::Completed {
                run: run.clone(),
                exit,
                output,
            },
            Ending::Faulted(why) => RunResult::Faulted {
                run: run.clone(),
                why,
            },
        }
    }

    pub fn state(&self) -> &'static str {
        match self {
            RunResult::Completed { .. } => "completed",
            RunResult::Faulted { .. } => "faulted",
            RunResult::Paused { .. } => "paused",
        }
    }

    /// The CLI exit code (DESIGN §6): 0 completed `success`, 4 completed
    /// with another exit code, 3 paused, 1 faulted.
    pub fn exit_code(&self) -> u8 {
        match self {
            RunResult::Completed { exit, .. } if exit == "success" => 0,
            RunResult::Completed { .. } => 4,
            RunResult::Paused { .. } => 3,
            RunResult::Faulted { .. } => 1,
        }
    }

    /// The result as JSON, for `--json` and the HTTP API.
    pub fn to_json(&self) -> Json {
        match self {
            RunResult::Completed { run, exit, output } => json!({
                "run": run.as_str(), "state": "completed", "exit": exit, "output": output}),
            RunResult::Faulted { run, why } => json!({
                "run": run.as_str(), "state": "faulted", "fault": why}),
            RunResult::Paused { run, open } => json!({
                "run": run.as_str(), "state": "paused",
                "pending": open.iter().map(PendingCall::to_json).collect::<Vec<_>>()}),
        }
    }
}

/// A new run id: creation time and 80 random bits.
pub fn new_run_id() -> RunId {
    flow_store::GenerateRunId::generate()
}

/// Records a new run's Start (after its program checks and its input
/// decodes) and drives nothing: what a crash right after Start leaves.
/// Recovery and `resume` continue such a run; tests and benchmarks make
/// one with this.
pub fn record_start(
    store: &dyn super::store::Store,
    sources: &Sources,
    input: &str,
) -> Result<RunId> {
    let program = sources.program()?;
    let input = flow_abi::json::parse(input)
        .map_err(|e| Error::Refused(format!("input is not valid JSON: {e}")))?;
    Machine::start(program.clone(), &program.root, &input)
        .map_err(|e| Error::Refused(e.to_string()))?;
    let run = new_run_id();
    let start = super::prepare::start_fact(&run, &program.root, sources, input, None, None);
    super::drive::create(
        store,
        &Namespace::default(),
        start,
        sources,
        &[],
        Vec::new(),
    )?;
    Ok(run)
}

/// A drive's outcome; `None` while it goes on.
pub type Outcome = Option<Result<RunResult>>;

/// What a start, resume or fork acknowledged: the run, durable as far as
/// the method promised, and the outcome of driving it on.
pub struct Accepted {
    pub run: RunId,
    /// The head when the acknowledgement was given.
    pub head: FactRef,
    pub(super) outcome: watch::Receiver<Outcome>,
}

impl Accepted {
    /// Waits until the drive ends or pauses.
    pub async fn finished(mut self) -> Result<RunResult> {
        match self.outcome.wait_for(|o| o.is_some()).await {
            Ok(o) => o.clone().unwrap_or_else(|| Err(gone())),
            Err(_) => Err(gone()),
        }
    }

    /// The outcome if the drive ended or paused within `wait`.
    pub async fn within(&mut self, wait: Duration) -> Outcome {
        if let Some(o) = self.outcome.borrow().clone() {
            return Some(o);
        }
        if wait.is_zero() {
            return None;
        }
        match tokio::time::timeout(wait, self.outcome.wait_for(|o| o.is_some())).await {
            Ok(Ok(o)) => o.clone(),
            _ => None,
        }
    }
}

fn gone() -> Error {
    Error::Unreadable("the drive ended without an outcome (the server is shutting down)".into())
}

/// Holds a started run's driving until opened (or dropped).
pub struct Gate(pub(super) tokio::sync::oneshot::Sender<()>);

impl Gate {
    pub fn open(self) {
        let _ = self.0.send(());
    }
}

/// A run state change, for the server's state feed (`GET /v1/events`).
#[derive(Debug, Clone)]
pub struct RunEvent {
    pub run: String,
    pub state: &'static str,
    pub extra: Json,
}

/// Told after each durable step: the run, its last fact number, and how
/// many calls are out (the CLI's progress line).
pub type Progress = Arc<dyn Fn(&RunId, u64, usize) + Send + Sync>;

/// Counters the service keeps (the server's `/metrics` reads them).
pub struct Stats {
    pub started: AtomicU64,
    pub resumed: AtomicU64,
    pub facts: AtomicU64,
    pub completed: AtomicU64,
    pub faulted: AtomicU64,
    pub paused: AtomicU64,
    /// Seconds from a drive handing its facts to the store to their
    /// commit being durable (a step's commit latency, group commits
    /// included).
    pub commit: Histogram,
    /// Seconds from a call being sent to its reply, by Tool and by what
    /// served it (`process`, `mcp`, `worker`, `nested`, …).
    pub calls: Family<CallLabel, Histogram, fn() -> Histogram>,
}

/// A call latency's labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
pub struct CallLabel {
    pub tool: String,
    pub route: &'static str,
}

/// Call latency buckets (seconds): a Rust Tool answers in well under a
/// millisecond, a model call in seconds, a worker's call in between.
const CALL_BUCKETS: [f64; 12] = [
    0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0,
];

fn call_histogram() -> Histogram {
    Histogram::new(CALL_BUCKETS)
}

/// Commit latency buckets (seconds): a step's commit is one fsync on a
/// quiet disk, up to the wait for a busy writer.
const COMMIT_BUCKETS: [f64; 10] = [
    0.000_25, 0.000_5, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5,
];

impl Default for Stats {
    fn default() -> Stats {
        Stats {
            started: AtomicU64::default(),
            resumed: AtomicU64::default(),
            facts: AtomicU64::default(),
            completed: AtomicU64::default(),
            faulted: AtomicU64::default(),
            paused: AtomicU64::default(),
            commit: Histogram::new(COMMIT_BUCKETS),
            calls: Family::new_with_constructor(call_histogram),
        }
    }
}

impl Stats {
    /// Counts a call answered `ms` after it was sent.
    pub fn call_took(&self, tool: &str, route: &'static str, ms: i64) {
        let label = CallLabel {
            tool: tool.to_string(),
            route,
        };
        self.calls
            .get_or_create(&label)
            .observe(ms.max(0) as f64 / 1000.0);
    }
}

impl Stats {
    pub(super) fn finished(&self, state: &str) {
        let c = match state {
            "completed" => &self.completed,
            "faulted" => &self.faulted,
            "paused" => &self.paused,
            _ => return,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }
}

/// Waiting for the first durable step of a resumed drive.
pub struct Acknowledging {
    pub(super) accepted: Accepted,
    ack: tokio::sync::oneshot::Receiver<Result<FactRef>>,
}

impl Accepted {
    pub(super) fn with_ack(
        self,
        ack: tokio::sync::oneshot::Receiver<Result<FactRef>>,
    ) -> Acknowledging {
        Acknowledging {
            accepted: self,
            ack,
        }
    }
}

impl Acknowledging {
    /// Returns once the drive's first step is durable (or the drive ended
    /// before it, e.g. by a refusal of the store).
    pub async fn acknowledged(self) -> Result<Accepted> {
        let Acknowledging { mut accepted, ack } = self;
        match ack.await {
            Ok(Ok(head)) => {
                accepted.head = head;
                Ok(accepted)
            }
            Ok(Err(e)) => Err(e),
            // The drive ended (or was stopped) before its first append:
            // its outcome says how.
            Err(_) => match accepted.within(Duration::from_secs(1)).await {
                Some(Err(e)) => Err(e),
                _ => Ok(accepted),
            },
        }
    }
}
