//! The run driver: the engine's effects carried out against the store and
//! the bound Tools. The CLI and the HTTP server both drive runs through it.
//!
//! DESIGN §3: "Each fact is accepted (durable) before its consequence: a Call
//! before the call is dispatched, a Reply before the program observes it,
//! End before the output is reported." Every append below returns only once
//! the fact is durable, and nothing acts on a fact before its append
//! returned.

use crate::error::{Error, Result};
use crate::host::{HUMAN, Host};
use crate::source::Sources;
use flow_abi::protocol::Outcome;
use flow_engine::machine::{Effect, Ending, Machine, OpenCall};
use flow_engine::program::Program;
use flow_engine::replay::{Verdict, replay};
use flow_store::{
    AppendFacts, HostRecord, HostRecordKind, HostRecords, ReadHistory, RunId, SqliteStore,
};
use flow_tools::CallOutcome;
use flow_tools::outcome::CallRequest;
use futures_util::StreamExt;
use futures_util::future::{AbortHandle, Abortable, Aborted};
use futures_util::stream::FuturesUnordered;
use serde_json::{Map, Value as Json, json};
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

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
    Paused {
        run: RunId,
        open: Vec<OpenCall>,
    },
}

impl RunResult {
    pub fn run(&self) -> &RunId {
        match self {
            RunResult::Completed { run, .. }
            | RunResult::Faulted { run, .. }
            | RunResult::Paused { run, .. } => run,
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
                "pending": open.iter().map(|c| json!({
                    "call": c.call, "task": c.task, "node": c.node, "tool": c.tool, "args": c.args,
                })).collect::<Vec<_>>()}),
        }
    }
}

/// A new run id: creation time and 80 random bits.
pub fn new_run_id() -> RunId {
    RunId::generate()
}

/// A run whose Start is recorded, ready to drive.
pub struct Started {
    pub run: RunId,
    program: Arc<Program>,
    machine: Machine,
    effects: Vec<Effect>,
}

/// Told after each durable step: the run, its last fact number, and how
/// many calls are out.
pub type Progress = Arc<dyn Fn(&RunId, u64, usize) + Send + Sync>;

/// Drives runs against one store.
#[derive(Clone)]
pub struct Driver {
    pub store: Arc<SqliteStore>,
    /// The CLI's live progress line, when stderr is a terminal.
    pub progress: Option<Progress>,
}

/// What the driver records, in the order the machine saw it: an effect of
/// the machine, or a fact the host decided (a Reply it admitted on resume).
enum Step {
    Effect(Effect),
    Fact(Json),
}

fn steps(effects: Vec<Effect>) -> Vec<Step> {
    effects.into_iter().map(Step::Effect).collect()
}

/// A call to send once its fact is durable: call id, tool, args, nested
/// module.
type ToDispatch = (String, String, Map<String, Json>, Option<String>);

type Pending<'a> =
    Pin<Box<dyn Future<Output = std::result::Result<(String, CallOutcome), Aborted>> + Send + 'a>>;

impl Driver {
    pub fn new(store: Arc<SqliteStore>) -> Driver {
        Driver {
            store,
            progress: None,
        }
    }

    /// Starts a run: the program checks, every Tool is bound (by the
    /// caller, into `host`), the input decodes, then Start is recorded and
    /// the run is driven until it ends or pauses. A refusal records nothing.
    pub async fn start(
        &self,
        sources: &Sources,
        program: Arc<Program>,
        input_text: &str,
        host: &Host,
    ) -> Result<RunResult> {
        let started = self.create_run(sources, program, input_text)?;
        self.drive_started(started, host).await
    }

    /// Records a new run's Start (after the input decodes) without driving
    /// it: the server answers with the run id at once and drives it in a
    /// task ([`Driver::drive_started`]).
    pub fn create_run(
        &self,
        sources: &Sources,
        program: Arc<Program>,
        input_text: &str,
    ) -> Result<Started> {
        let input = flow_abi::json::parse(input_text)
            .map_err(|e| Error::Refused(format!("input is not valid JSON: {e}")))?;
        let (machine, effects) = Machine::start(program.clone(), &program.root, &input)
            .map_err(|e| Error::Refused(e.to_string()))?;
        let run = new_run_id();
        let start = json!({
            "fact": "Start", "n": 1, "run": run.as_str(), "data": flow_abi::DATA_VERSION,
            "entry": {"module": program.root, "function": flow_engine::program::ENTRY},
            "program": sources.program_hash(), "sources": sources.start_entries(),
            "input": input,
        });
        self.create(&run, &start, sources)?;
        Ok(Started {
            run,
            program,
            machine,
            effects,
        })
    }

    /// Drives a run recorded by [`Driver::create_run`] until it ends or
    /// pauses.
    pub async fn drive_started(&self, started: Started, host: &Host) -> Result<RunResult> {
        let Started {
            run,
            program,
            machine,
            effects,
        } = started;
        self.drive(&run, program, machine, steps(effects), host, Vec::new())
            .await
    }

    fn create(&self, run: &RunId, start: &Json, sources: &Sources) -> Result<()> {
        self.store.create_run(start, &sources.source_texts())?;
        if let Some(dir) = &sources.dir {
            // Resume and fork keep the original local source base
            // (host-boundary.txt, "Binding").
            let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.clone());
            self.store.record_host(
                run,
                HostRecord {
                    kind: HostRecordKind::Binding,
                    at_ms: None,
                    details: json!({"program_dir": dir.to_string_lossy()}),
                },
            )?;
        }
        Ok(())
    }

    /// Carries out effects until the run ends or pauses.
    async fn drive<'h>(
        &'h self,
        run: &RunId,
        program: Arc<Program>,
        mut machine: Machine,
        mut effects: Vec<Step>,
        host: &'h Host,
        resend: Vec<ToDispatch>,
    ) -> Result<RunResult> {
        let module = machine.module().to_string();
        let mut resend = Some(resend);
        let mut last = self.store.run_info(run)?.last_fact.n;
        let mut inflight: FuturesUnordered<Pending<'h>> = FuturesUnordered::new();
        // Abort handles of dispatched calls: a Close drops the call's future,
        // which cancels it at its implementation.
        let mut aborts: BTreeMap<String, AbortHandle> = BTreeMap::new();
        // Facts with no outside effect between them go to the store together
        // (one transaction, one fsync per step); every one is durable before
        // any call below is dispatched.
        let mut facts: Vec<Json> = Vec::new();
        loop {
            // Calls open at a crash whose binding says `resend = true` go out
            // again with the same (run, call) pair (DESIGN §5).
            let mut dispatch: Vec<ToDispatch> = resend.take().unwrap_or_default();
            let mut ended = None;
            for step in effects.drain(..) {
                let e = match step {
                    Step::Fact(f) => {
                        facts.push(f);
                        continue;
                    }
                    Step::Effect(e) => e,
                };
                if let Some(f) = e.fact() {
                    facts.push(f);
                }
                match e {
                    Effect::Call {
                        call,
                        tool,
                        args,
                        nested,
                        ..
                    } => {
                        if tool == HUMAN {
                            continue;
                        }
                        let args = match args {
                            Json::Object(m) => m,
                            _ => Map::new(),
                        };
                        dispatch.push((call, tool, args, nested));
                    }
                    Effect::Close { call, .. } => {
                        if let Some(a) = aborts.remove(&call) {
                            a.abort();
                        }
                    }
                    Effect::Deadline { call, seconds } => {
                        let due = now_ms().saturating_add(seconds.saturating_mul(1000) as i64);
                        self.store.record_host(
                            run,
                            HostRecord {
                                kind: HostRecordKind::Timeout,
                                at_ms: None,
                                details: json!({"call": call, "due_ms": due}),
                            },
                        )?;
                    }
                    Effect::End(ending) => ended = Some(ending),
                    Effect::Checkpoint { .. } => {}
                }
            }
            self.append_all(run, &mut last, &mut facts).await?;
            if let Some(ending) = ended {
                return Ok(match ending {
                    Ending::Completed { exit, output } => RunResult::Completed {
                        run: run.clone(),
                        exit,
                        output,
                    },
                    Ending::Faulted(why) => RunResult::Faulted {
                        run: run.clone(),
                        why,
                    },
                });
            }
            for (call, tool, args, nested) in dispatch {
                if let Some(sub) = nested {
                    let outcome = self
                        .nested(run, &call, program.clone(), sub, args, host)
                        .await;
                    inflight.push(Box::pin(std::future::ready(Ok((call, outcome)))));
                    continue;
                }
                let req = CallRequest {
                    run: run.to_string(),
                    call: call.clone(),
                    tool,
                    args,
                };
                let module = module.clone();
                let (handle, registration) = AbortHandle::new_pair();
                aborts.insert(call.clone(), handle);
                let fut = async move {
                    let out = host.call(&module, req).await;
                    (call, out)
                };
                inflight.push(Box::pin(Abortable::new(fut, registration)));
            }
            if let Some(p) = &self.progress {
                p(run, last, inflight.len());
            }
            let next = loop {
                match inflight.next().await {
                    // A call closed meanwhile: its future was dropped.
                    Some(Err(Aborted)) => continue,
                    Some(Ok(x)) => break Some(x),
                    None => break None,
                }
            };
            let Some((call, outcome)) = next else {
                let open = machine.open_calls();
                self.store.record_host(
                    run,
                    HostRecord {
                        kind: HostRecordKind::Pause,
                        at_ms: None,
                        details: json!({"open": open.iter().map(|c| c.call.as_str()).collect::<Vec<_>>()}),
                    },
                )?;
                return Ok(RunResult::Paused {
                    run: run.clone(),
                    open,
                });
            };
            aborts.remove(&call);
            let outcome_json = outcome.to_json();
            // A reply for a call closed meanwhile is dropped.
            if !machine.is_open(&call) {
                tracing::info!(run.id = %run, call.id = %call, "reply to a closed call dropped");
                continue;
            }
            facts.push(json!({"fact": "Reply", "call": call, "outcome": outcome_json}));
            let o = Outcome::from_record(&outcome_json)
                .map_err(|e| Error::Refused(format!("reply: {e}")))?;
            effects = steps(
                machine
                    .feed(&call, &o)
                    .map_err(|e| Error::Conflict(e.to_string()))?,
            );
        }
    }

    /// Appends the buffered facts, numbering them; returns once every one is
    /// durable.
    ///
    /// The store's writer is a thread that commits whatever is queued in one
    /// transaction; waiting for it happens off the async runtime
    /// (`spawn_blocking`), so many runs queue at once and share each commit
    /// (group commit) instead of holding the runtime's few workers.
    async fn append_all(&self, run: &RunId, last: &mut u64, facts: &mut Vec<Json>) -> Result<()> {
        if facts.is_empty() {
            return Ok(());
        }
        for f in facts.iter_mut() {
            if let Json::Object(m) = f {
                *last += 1;
                m.insert("n".into(), Json::Number((*last).into()));
            }
        }
        let batch = std::mem::take(facts);
        let (store, run) = (self.store.clone(), run.clone());
        tokio::task::spawn_blocking(move || store.append_all(&run, &batch))
            .await
            .map_err(|e| {
                Error::Unreadable(format!("the store's writer could not be reached: {e}"))
            })??;
        Ok(())
    }

    /// A subgraph's nested run: its own run id and history, Start naming the
    /// outer run and call (DESIGN §4). Its ending becomes the outer call's
    /// outcome; a nested pause leaves the outer call open.
    fn nested<'a>(
        &'a self,
        outer: &'a RunId,
        call: &'a str,
        program: Arc<Program>,
        module: String,
        args: Map<String, Json>,
        host: &'a Host,
    ) -> Pin<Box<dyn Future<Output = CallOutcome> + Send + 'a>> {
        Box::pin(async move {
            let input = args
                .get("input")
                .cloned()
                .unwrap_or(Json::Object(Map::new()));
            let (machine, effects) = match Machine::start(program.clone(), &module, &input) {
                Ok(x) => x,
                Err(e) => return CallOutcome::NotRun(format!("nested run refused: {e}")),
            };
            let run = new_run_id();
            let sources = program_sources(&self.store, outer);
            let Ok(sources) = sources else {
                return CallOutcome::NotRun("the outer run's sources cannot be read".into());
            };
            let start = json!({
                "fact": "Start", "n": 1, "run": run.as_str(), "data": flow_abi::DATA_VERSION,
                "entry": {"module": module, "function": flow_engine::program::ENTRY},
                "program": sources.program_hash(), "sources": sources.start_entries(),
                "input": input, "outer": {"run": outer.as_str(), "call": call},
            });
            if let Err(e) = self.create(&run, &start, &sources) {
                return CallOutcome::Unknown(format!("nested run not recorded: {e}"));
            }
            // Linked both ways: the nested Start names the outer run and
            // call; the outer run's host record names the nested run that
            // served the call (which implementation served a call is the
            // host's record, host-boundary.txt "Binding").
            if let Err(e) = self.store.record_host(
                outer,
                HostRecord {
                    kind: HostRecordKind::Binding,
                    at_ms: None,
                    details: json!({"call": call, "nested_run": run.as_str()}),
                },
            ) {
                return CallOutcome::Unknown(format!("nested run not linked: {e}"));
            }
            match Box::pin(self.drive(&run, program, machine, steps(effects), host, Vec::new()))
                .await
            {
                Ok(RunResult::Completed { output, .. }) => match flow_abi::decode_json(
                    &output,
                    &flow_abi::Type::Json,
                    &flow_abi::TypeSet::new(),
                ) {
                    Ok(v) => CallOutcome::Ok(v),
                    Err(e) => CallOutcome::BadReply(e.to_string()),
                },
                Ok(RunResult::Faulted { why, .. }) => {
                    let mut m = std::collections::BTreeMap::new();
                    m.insert("message".to_string(), flow_abi::Value::Text(why));
                    CallOutcome::Failed(flow_abi::Value::Record(m))
                }
                Ok(RunResult::Paused { run, .. }) => {
                    CallOutcome::Unknown(format!("nested run {run} paused"))
                }
                Err(e) => CallOutcome::Unknown(format!("nested run cut short: {e}")),
            }
        })
    }

    /// A run's verified history as logical facts: every value loaded, every
    /// Checkpoint with its whole state (not the stored delta).
    pub fn facts(&self, run: &RunId) -> Result<Vec<Json>> {
        let history = self.store.read_history(run)?;
        let mut facts = Vec::with_capacity(history.facts.len());
        for f in &history.facts {
            let mut v = self.store.expand(&f.fact)?;
            if f.kind == flow_store::FactKind::Checkpoint {
                let state = self.store.checkpoint_state(run, f.n)?;
                if let Json::Object(m) = &mut v {
                    m.remove("delta");
                    m.insert("state".into(), state);
                }
            }
            facts.push(v);
        }
        Ok(facts)
    }

    /// Reads a run's program back from its history.
    pub fn program_of(&self, run: &RunId) -> Result<(Sources, Arc<Program>, Vec<Json>)> {
        let facts = self.facts(run)?;
        let start = facts
            .first()
            .ok_or_else(|| Error::Unreadable(format!("{run} has no Start")))?;
        let sources = Sources::from_start(&*self.store, start)?;
        let program = sources.program()?;
        Ok((sources, program, facts))
    }

    /// Replays a run against its recorded program.
    pub fn replay(&self, run: &RunId) -> Result<Verdict> {
        let (_, program, facts) = self.program_of(run)?;
        Ok(replay(program, &facts).verdict)
    }

    /// The program directory recorded at Start, if the run was read from
    /// disk.
    pub fn program_dir(&self, run: &RunId) -> Result<Option<std::path::PathBuf>> {
        Ok(self
            .store
            .host_records(run)?
            .iter()
            .find(|r| r.kind == HostRecordKind::Binding)
            .and_then(|r| r.details.get("program_dir"))
            .and_then(Json::as_str)
            .map(std::path::PathBuf::from))
    }

    /// Resumes a run: replays its history into the machine, admits `reply`
    /// (an outcome for an open call) when given, settles calls left open by
    /// a crash (`Unknown("host restarted")`), and drives on.
    pub async fn resume(
        &self,
        run: &RunId,
        program: Arc<Program>,
        facts: Vec<Json>,
        reply: Option<(String, String)>,
        host: &Host,
    ) -> Result<RunResult> {
        let r = replay(program.clone(), &facts);
        let mut machine = match (r.verdict, r.machine) {
            (Verdict::Diverged { fact, reason }, _) => {
                return Err(Error::Unreadable(format!(
                    "{run} does not replay against its program: diverged at fact {fact}: {reason}"
                )));
            }
            (_, None) => return Err(Error::Unreadable(format!("{run} cannot be rebuilt"))),
            (_, Some(m)) => m,
        };
        if machine.ending().is_some() {
            return Err(Error::Conflict(format!(
                "{run} has ended; nothing to resume"
            )));
        }
        // Effects derived past the record's end come first: record them.
        let mut first: Vec<Step> = steps(r.unrecorded);
        let mut resend: Vec<ToDispatch> = Vec::new();
        // Durable hitl deadlines that passed while nothing drove the run:
        // close the call (`timeout`) as the engine says (DESIGN §4).
        let now = now_ms();
        for r in self.store.host_records(run)? {
            if r.kind != HostRecordKind::Timeout {
                continue;
            }
            let (Some(call), Some(due)) = (
                r.details.get("call").and_then(Json::as_str),
                r.details.get("due_ms").and_then(Json::as_i64),
            ) else {
                continue;
            };
            if due <= now && machine.is_open(call) {
                let more = machine
                    .expire(call)
                    .map_err(|e| Error::Conflict(e.to_string()))?;
                first.extend(steps(more));
            }
        }
        // Admit the supplied reply.
        let open = machine.open_calls();
        let recorded_calls: std::collections::BTreeSet<String> = facts
            .iter()
            .filter(|f| f["fact"] == "Call")
            .filter_map(|f| f["call"].as_str().map(str::to_string))
            .collect();
        if let Some((call, text)) = &reply {
            let Some(c) = open.iter().find(|c| &c.call == call) else {
                return Err(Error::Conflict(format!("call {call} of {run} is not open")));
            };
            let outcome_json = flow_abi::json::parse(text)
                .map_err(|e| Error::Refused(format!("reply is not valid JSON: {e}")))?;
            let outcome = Outcome::from_wire(&outcome_json)
                .map_err(|e| Error::Refused(format!("reply: {e}")))?;
            let outcome = check_reply(&program, &machine, c, outcome)?;
            first.push(Step::Fact(
                json!({"fact": "Reply", "call": call, "outcome": outcome.to_json()}),
            ));
            let more = machine
                .feed(call, &outcome)
                .map_err(|e| Error::Conflict(e.to_string()))?;
            first.extend(steps(more));
        } else {
            // Settle calls a crash left open (not the human ones, which stay
            // open until answered): sent again when the binding says
            // `resend = true`, else Unknown (DESIGN §5).
            for c in open
                .iter()
                .filter(|c| c.tool != HUMAN && recorded_calls.contains(&c.call))
            {
                let resending = host.resends(machine.module(), &c.tool);
                let decision = if resending { "resend" } else { "unknown" };
                self.store.record_host(
                    run,
                    HostRecord {
                        kind: HostRecordKind::OpenCallDecision,
                        at_ms: None,
                        details: json!({"call": c.call, "decision": decision, "reason": "host restarted"}),
                    },
                )?;
                if resending {
                    let args = match &c.args {
                        Json::Object(m) => m.clone(),
                        _ => Map::new(),
                    };
                    resend.push((c.call.clone(), c.tool.clone(), args, None));
                    continue;
                }
                let outcome = Outcome::Unknown("host restarted".into());
                first.push(Step::Fact(
                    json!({"fact": "Reply", "call": c.call, "outcome": outcome.to_json()}),
                ));
                let more = machine
                    .feed(&c.call, &outcome)
                    .map_err(|e| Error::Conflict(e.to_string()))?;
                first.extend(steps(more));
            }
        }
        self.drive(run, program, machine, first, host, resend).await
    }

    /// Forks a run from a root-task Checkpoint: a new run whose Start names
    /// the parent and checkpoint, whose first Checkpoint is that node with
    /// that state (fields replaced as `sets` say, each decoded against
    /// `state_schema`).
    pub async fn fork(
        &self,
        parent: &RunId,
        checkpoint: u64,
        sets: &[(String, String)],
        host: &Host,
    ) -> Result<RunResult> {
        let (sources, program, facts) = self.program_of(parent)?;
        let cp = facts
            .iter()
            .find(|f| f["n"].as_u64() == Some(checkpoint))
            .filter(|f| f["fact"] == "Checkpoint")
            .ok_or_else(|| {
                Error::NotFound(format!("{parent} has no Checkpoint at fact {checkpoint}"))
            })?;
        if cp["task"] != "root" {
            return Err(Error::Refused(format!(
                "fact {checkpoint} is a checkpoint of parallel branch {}; fork from a root checkpoint",
                cp["task"]
            )));
        }
        let node = cp["node"].as_str().unwrap_or_default().to_string();
        let mut state = cp["state"].clone();
        for (field, text) in sets {
            let v = Machine::decode_state_field(&program, &program.root, field, text)
                .map_err(Error::Refused)?;
            if let Json::Object(m) = &mut state {
                m.insert(field.clone(), v);
            }
        }
        let module = facts[0]["entry"]["module"]
            .as_str()
            .unwrap_or(&program.root)
            .to_string();
        let (machine, effects) = Machine::resume_at(program.clone(), &module, &node, state.clone())
            .map_err(|e| Error::Refused(e.to_string()))?;
        let run = new_run_id();
        let start = json!({
            "fact": "Start", "n": 1, "run": run.as_str(), "data": flow_abi::DATA_VERSION,
            "entry": {"module": module, "function": flow_engine::program::ENTRY},
            "program": sources.program_hash(), "sources": sources.start_entries(),
            "input": state, "parent": {"run": parent.as_str(), "checkpoint": checkpoint},
        });
        let mut s = sources.clone();
        s.dir = self.program_dir(parent)?;
        self.create(&run, &start, &s)?;
        self.drive(&run, program, machine, steps(effects), host, Vec::new())
            .await
    }
}

/// Decodes a resume reply's value against the call's declared type: the
/// hitl node's `resume_schema` for `std/human#input` (DESIGN §4: "A resume
/// reply that does not decode against the call's declared type is refused
/// ... and nothing is recorded").
fn check_reply(
    program: &Program,
    machine: &Machine,
    c: &OpenCall,
    outcome: Outcome,
) -> Result<Outcome> {
    let Outcome::Ok(v) = &outcome else {
        return Ok(outcome);
    };
    let Some(m) = program.module(machine.module()) else {
        return Ok(outcome);
    };
    let node = m.report.flow.nodes.iter().find(|n| n.id == c.node);
    let ty = match node.map(|n| &n.kind) {
        Some(flow_engine::model::NodeKind::Hitl(h)) => h
            .resume_schema
            .as_ref()
            .and_then(|s| m.report.schema_types.get(&s.ptr)),
        _ => None,
    };
    let ty = match ty {
        Some(t) => t.clone(),
        None => match m.decls.get(&c.tool) {
            Some(d) => d.ok.clone(),
            None => return Ok(outcome),
        },
    };
    let decoded = flow_abi::decode_json(v, &ty, &m.report.types)
        .map_err(|e| Error::Refused(format!("the reply does not fit call {}: {e}", c.call)))?;
    Ok(Outcome::Ok(decoded.to_json()))
}

fn program_sources(store: &SqliteStore, run: &RunId) -> Result<Sources> {
    let h = store.read_history(run)?;
    let start = h
        .facts
        .first()
        .ok_or_else(|| Error::Unreadable("no Start".into()))?;
    let start = store.expand(&start.fact)?;
    Sources::from_start(store, &start)
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
