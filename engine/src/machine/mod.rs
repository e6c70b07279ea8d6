//! The interpreter: one run of one module as a pure state machine.
//!
//! The host calls [`Machine::start`] (or [`Machine::resume_at`] for a fork),
//! then [`Machine::feed`] with each call's outcome and [`Machine::expire`]
//! when a durable deadline passes. Each returns the effects to carry out, in
//! a deterministic order: Call (record, then dispatch), Checkpoint, Close
//! (record, then cancel), Deadline (a host record), End. The machine reads no
//! clock, does no IO and draws no random number; the same inputs give the
//! same effects, which is what replay relies on.
//!
//! Tasks: the root task is `root`; a parallel branch is
//! `<parent>/<branch-node-id>` (DESIGN §3). Ready tasks run in task-id order,
//! each until it waits on a call. Call ids are `c1:<task>#<k>`, k counting
//! that task's calls from 1, so they never depend on reply arrival order.
//!
//! Parallel branches work on a copy of the state taken at the fork and keep
//! the list of their writes; at the join, the winners' writes are applied to
//! the parent's state in target order (DESIGN §4: "results reduced in target
//! order, not arrival order"), through the state's reducers.
//!
//! This module holds the types and the host-facing API; the interpreter's
//! parts are one file each: `run` (the loop and node entry), `replies`,
//! `routing`, `parallel`, `agents`, `debates`, `harness` (harness nodes),
//! `prompts` (`prompt_ref`), `plumbing` (tasks, state, faults), `typed`
//! (state writes checked against `state_schema`) and
//! `helpers` (free functions).

use crate::model::{
    Agent, Condition, EdgeKind, Flow, Node, NodeKind, OnFail, OnTimeout, OutputValidator, Reducer,
    RetrievalMode, SpeakerSelection, ToolApproval, TransformMode, WaitFor, WriteMode,
};
use crate::path::{Path, Scope, Target};
use crate::program::{Module, Program, subflow_entry};
pub use flow_abi::fact::Ending;
use flow_abi::fact::{CallId, Fact, FactKind};
use flow_abi::protocol::Outcome;
use flow_abi::{Type, decode_json};
use serde_json::{Map, Value as Json};
use std::collections::BTreeMap;
use std::sync::Arc;

mod agents;
mod changes;
mod debates;
mod harness;
mod helpers;
mod parallel;
mod plumbing;
mod prompts;
mod replies;
mod routing;
mod run;
mod typed;

use helpers::*;

/// Node executions allowed by default (DESIGN §4).
pub const DEFAULT_MAX_STEPS: u64 = 10_000;

/// Effects one slice of work produces at most: a run that loops without
/// waiting on a call stops after this many and is continued with
/// [`Machine::proceed`], so the host records them (and can serve others)
/// before the next slice — the work between two commits stays bounded
/// whatever the flow's step limit. Slicing changes no fact and no order.
pub const SLICE: usize = 1024;

/// What the host must do, in order.
///
/// Every effect but a Deadline records a fact: [`Effect::fact`] is that
/// fact, not numbered yet (n = 0; the appender numbers it). The variants
/// hold the fact's fields plus what the host needs to act on it.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Record a Call fact, then dispatch it. `nested` names the module of a
    /// subgraph: the host runs it as a nested run instead of a Tool.
    Call {
        call: CallId,
        task: String,
        node: String,
        tool: String,
        fingerprint: String,
        args: Json,
        nested: Option<String>,
    },
    /// Record a Checkpoint fact.
    Checkpoint {
        task: String,
        node: String,
        state: Json,
    },
    /// Record a Checkpoint fact whose state is the run's previous
    /// Checkpoint's with `change` applied (only once the host asked for
    /// them: [`Machine::checkpoint_by_change`]).
    Changed {
        task: String,
        node: String,
        change: flow_abi::fact::StateChange,
    },
    /// Record a Close fact, then cancel the call.
    Close { call: CallId, reason: String },
    /// Keep a durable deadline (a host record): call [`Machine::expire`]
    /// for `call` once `seconds` have passed since the Call was recorded.
    Deadline { call: CallId, seconds: u64 },
    /// Record the End fact.
    End(Ending),
}

impl Effect {
    /// The kind of fact this effect records; `None` for a Deadline.
    pub fn kind(&self) -> Option<FactKind> {
        Some(match self {
            Effect::Call { .. } => FactKind::Call,
            Effect::Checkpoint { .. } | Effect::Changed { .. } => FactKind::Checkpoint,
            Effect::Close { .. } => FactKind::Close,
            Effect::End(_) => FactKind::End,
            Effect::Deadline { .. } => return None,
        })
    }

    /// [`Effect::fact`] of an effect the caller is done with: its values
    /// move into the fact (a Checkpoint's whole state is not copied).
    /// `None` also for [`Effect::Changed`]: only the store, which keeps the
    /// previous Checkpoint's state, makes its whole fact.
    pub fn into_fact(self) -> Option<Fact> {
        Some(match self {
            Effect::Call {
                call,
                task,
                node,
                tool,
                fingerprint,
                args,
                ..
            } => Fact::Call {
                n: 0,
                call,
                task,
                node,
                tool,
                fingerprint,
                args,
            },
            Effect::Checkpoint { task, node, state } => Fact::Checkpoint {
                n: 0,
                task,
                node,
                state,
            },
            Effect::Close { call, reason } => Fact::Close { n: 0, call, reason },
            Effect::Deadline { .. } | Effect::Changed { .. } => return None,
            Effect::End(ending) => Fact::End { n: 0, ending },
        })
    }

    /// The fact this effect records, not numbered yet (n = 0); `None` for a
    /// Deadline, which is a host record.
    pub fn fact(&self) -> Option<Fact> {
        self.clone().into_fact()
    }
}

/// A run refused before anything is recorded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the program has no module {0}")]
    NoModule(String),
    #[error("the flow has no input node")]
    NoInput,
    #[error("input refused: {0}")]
    Input(String),
    #[error("no node {0} to start from")]
    NoNode(String),
}

/// A feed the machine cannot take.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FeedError {
    #[error("call {0} is not open")]
    NotOpen(String),
    #[error("the run has ended")]
    Ended,
    #[error(
        "call {0} has no deadline (only a hitl_breakpoint's own call with timeout_seconds has one)"
    )]
    NoDeadline(String),
    #[error("the run has work left from its last slice: proceed first")]
    Busy,
}

/// An open call, as hosts and views see it.
#[derive(Debug, Clone, PartialEq)]
pub struct OpenCall {
    pub call: CallId,
    pub task: String,
    pub node: String,
    pub tool: String,
    pub args: Json,
}

/// Why a call was made, so its reply continues the right work.
#[derive(Debug, Clone, PartialEq)]
enum Purpose {
    /// The node's own call (tool_invoke, llm_call, hitl, memory, subgraph).
    Node,
    /// A retry backoff before attempt `attempt`.
    Sleep,
    /// The output validator of the node's result.
    Validate(Json),
    /// A transform fn_ref.
    Transform,
    /// Condition branch `index` of the route being chosen.
    Route(usize),
    /// A join fn_ref reducing the branches' results.
    Join,
    /// An agent's model turn.
    AgentChat,
    /// Approval of the agent's pending tool call.
    AgentApprove,
    /// The agent's tool call.
    AgentTool,
    /// A debate speaker's turn.
    DebateTurn(String),
    /// A custom speaker selection.
    DebateSpeaker,
    /// A debate termination fn_ref.
    DebateStop,
    /// An llm_call's `prompt_ref`: the template text, before the model call.
    Prompt,
    /// A harness node's `std/harness#<type>` call.
    Harness,
    /// A gather_evidence node's call of its source tool.
    Evidence,
}

#[derive(Debug, Clone)]
struct Pending {
    task: String,
    node: String,
    tool: String,
    args: Json,
    purpose: Purpose,
}

/// Where a task is within its node.
#[derive(Debug, Clone, PartialEq)]
enum Stage {
    /// About to enter `node`.
    Enter,
    /// Waiting on a call.
    Waiting,
    /// Choosing the route out of the node after it finished; branch `next`
    /// is the next conditional branch to try.
    Route { next: usize },
    /// A parallel_fork waiting for its branches.
    Forked(Box<ForkWait>),
    /// A branch that reached its join.
    AtJoin,
    /// Agent loop.
    Agent(Box<AgentStage>),
    /// Debate loop.
    Debate(Box<DebateStage>),
}

#[derive(Debug, Clone, PartialEq)]
struct ForkWait {
    /// Branch task ids in target order.
    branches: Vec<String>,
    /// Branches that reached the join, in arrival (recorded) order.
    done: Vec<String>,
    join: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
struct AgentStage {
    iter: u64,
    messages: Vec<Json>,
    /// Tool calls asked for by the last model turn, not yet made.
    queue: Vec<(String, Json)>,
}

#[derive(Debug, Clone, PartialEq)]
struct DebateStage {
    round: u64,
    transcript: Vec<Json>,
    last_speaker: Option<String>,
}

#[derive(Debug, Clone)]
struct Task {
    node: String,
    stage: Stage,
    /// Calls made so far.
    k: u64,
    parent: Option<String>,
    /// A branch's own state (None for the root, which uses the run state).
    local: Option<Json>,
    /// A branch's writes since the fork, in order.
    writes: Vec<(Target, Json)>,
    /// Attempts of the current node's call (retries).
    attempts: u64,
    /// Output-validator retries of the current node.
    validations: u64,
    /// Re-entering a join after joining its branches: pass through it.
    passing_join: bool,
    /// The current llm_call's template, fetched for its `prompt_ref`.
    prompt: Option<crate::template::Template>,
}

/// One run of one module.
#[derive(Debug, Clone)]
pub struct Machine {
    program: Arc<Program>,
    module: String,
    state: Json,
    tasks: BTreeMap<String, Task>,
    calls: BTreeMap<CallId, Pending>,
    steps: u64,
    max_steps: u64,
    ended: Option<Ending>,
    error: Option<Json>,
    out: Vec<Effect>,
    /// Set once the host asked for Checkpoints by change (`changes.rs`).
    changes: Option<changes::Changes>,
}

type Step = Result<(), String>;

impl Machine {
    /// Starts a run of `module` with `input`, a JSON object keyed by the
    /// input node's `output_schema` fields (or `state_schema`'s when it has
    /// none). Unknown or missing fields refuse the run (DESIGN §4).
    pub fn start(
        program: Arc<Program>,
        module: &str,
        input: &Json,
    ) -> Result<(Machine, Vec<Effect>), Refusal> {
        Machine::start_within(program, module, input, SLICE)
    }

    /// [`Machine::start`] with a first slice of at most `limit` effects
    /// (at most [`SLICE`]), as [`Machine::feed_within`]: a host computes a
    /// short start where it is and the rest of a busy machine with
    /// [`Machine::proceed`]. The effects are the same, in the same order,
    /// whatever the limit.
    pub fn start_within(
        program: Arc<Program>,
        module: &str,
        input: &Json,
        limit: usize,
    ) -> Result<(Machine, Vec<Effect>), Refusal> {
        let m = program
            .module(module)
            .ok_or_else(|| Refusal::NoModule(module.to_string()))?;
        let input_node = m
            .report
            .flow
            .nodes
            .iter()
            .find(|n| matches!(n.kind, NodeKind::Input(_)))
            .ok_or(Refusal::NoInput)?;
        let mut state = decode_input(m, input_node, input).map_err(Refusal::Input)?;
        // A field reduced by `append` is a list that starts empty, so a
        // template or path that reads it before the first append sees `[]`.
        if let (Some(ss), Json::Object(obj)) = (&m.report.flow.state_schema, &mut state) {
            for (name, f) in &ss.fields {
                if f.reducer == Reducer::Append && !obj.contains_key(name) {
                    obj.insert(name.clone(), Json::Array(Vec::new()));
                }
            }
        }
        let node = input_node.id.clone();
        Ok(Machine::begin(program.clone(), module, node, state, limit))
    }

    /// Starts at a checkpoint's node with its state: a fork, or a resume
    /// that rebuilds from a checkpoint. Fields replaced by a fork must have
    /// been decoded against `state_schema` by the caller
    /// ([`Machine::decode_state_field`]).
    pub fn resume_at(
        program: Arc<Program>,
        module: &str,
        node: &str,
        state: Json,
    ) -> Result<(Machine, Vec<Effect>), Refusal> {
        let m = program
            .module(module)
            .ok_or_else(|| Refusal::NoModule(module.to_string()))?;
        if !m.report.flow.nodes.iter().any(|n| n.id == node) {
            return Err(Refusal::NoNode(node.to_string()));
        }
        Ok(Machine::begin(
            program.clone(),
            module,
            node.to_string(),
            state,
            SLICE,
        ))
    }

    /// Decodes a value for state field `field` against `state_schema`
    /// (fork `--set`). A flow without that field declared refuses it.
    pub fn decode_state_field(
        program: &Program,
        module: &str,
        field: &str,
        text: &str,
    ) -> Result<Json, String> {
        let m = program
            .module(module)
            .ok_or_else(|| format!("no module {module}"))?;
        let ss = m
            .report
            .flow
            .state_schema
            .as_ref()
            .ok_or("the flow declares no state_schema")?;
        let ty = m
            .report
            .schema_types
            .get(&ss.schema.ptr)
            .ok_or("the state_schema did not read")?;
        let fields = crate::program::record_fields(ty, &m.report.types);
        let f = fields
            .iter()
            .find(|f| f.name == field)
            .ok_or_else(|| format!("state_schema has no field {field:?}"))?;
        let fty = match &f.ty {
            Type::Option(t) => t.as_ref(),
            t => t,
        };
        flow_abi::decode(text, fty, &m.report.types)
            .map(|v| v.to_json())
            .map_err(|e| format!("{field}: {e}"))
    }

    fn begin(
        program: Arc<Program>,
        module: &str,
        node: String,
        state: Json,
        limit: usize,
    ) -> (Machine, Vec<Effect>) {
        let max_steps = program
            .module(module)
            .and_then(|m| m.report.flow.harness_meta.as_ref())
            .and_then(|h| h.max_steps)
            .unwrap_or(DEFAULT_MAX_STEPS);
        let mut tasks = BTreeMap::new();
        tasks.insert("root".to_string(), Task::new(node, None, None));
        let mut m = Machine {
            program,
            module: module.to_string(),
            state,
            tasks,
            calls: BTreeMap::new(),
            steps: 0,
            max_steps,
            ended: None,
            error: None,
            out: Vec::new(),
            changes: None,
        };
        m.run_within(limit);
        let effects = std::mem::take(&mut m.out);
        (m, effects)
    }

    /// Admits the outcome of an open call and runs until every task waits
    /// (or the slice is full).
    pub fn feed(&mut self, call: &str, outcome: &Outcome) -> Result<Vec<Effect>, FeedError> {
        self.feed_within(call, outcome, SLICE)
    }

    /// [`Machine::feed`] in a smaller slice: no node is entered once
    /// `limit` effects (at most [`SLICE`]) are out. A host computes a short
    /// step where it is and, when the
    /// machine is still [`Machine::busy`], the rest with
    /// [`Machine::proceed`] where long work may run. The effects are the
    /// same, in the same order, whatever the limit.
    pub fn feed_within(
        &mut self,
        call: &str,
        outcome: &Outcome,
        limit: usize,
    ) -> Result<Vec<Effect>, FeedError> {
        if self.ended.is_some() {
            return Err(FeedError::Ended);
        }
        if self.busy() {
            return Err(FeedError::Busy);
        }
        let p = self
            .calls
            .remove(call)
            .ok_or_else(|| FeedError::NotOpen(call.to_string()))?;
        if let Err(why) = self.on_reply(call, p, outcome) {
            self.fault(why);
        }
        self.run_within(limit);
        Ok(std::mem::take(&mut self.out))
    }

    /// A durable deadline passed: the hitl call is closed with reason
    /// `timeout`, then the run faults (`on_timeout: raise`) or goes on
    /// without writing `output_key` (`skip`) (DESIGN §4).
    pub fn expire(&mut self, call: &str) -> Result<Vec<Effect>, FeedError> {
        if self.ended.is_some() {
            return Err(FeedError::Ended);
        }
        if self.busy() {
            return Err(FeedError::Busy);
        }
        let p = self
            .calls
            .get(call)
            .ok_or_else(|| FeedError::NotOpen(call.to_string()))?;
        // Only the calls a Deadline effect was given for can expire.
        let on_timeout = match self.node(&p.node).map(|n| &n.kind) {
            Some(NodeKind::Hitl(h))
                if p.purpose == Purpose::Node && h.timeout_seconds.is_some() =>
            {
                h.on_timeout
            }
            _ => return Err(FeedError::NoDeadline(call.to_string())),
        };
        let Some((id, p)) = self.calls.remove_entry(call) else {
            return Err(FeedError::NotOpen(call.to_string()));
        };
        self.out.push(Effect::Close {
            call: id,
            reason: "timeout".into(),
        });
        match on_timeout {
            OnTimeout::Raise => self.fault(format!(
                "node {}: call {call} to {} timed out",
                p.node, p.tool
            )),
            OnTimeout::Skip => self.route(&p.task),
        }
        self.run();
        Ok(std::mem::take(&mut self.out))
    }

    /// True when a slice ended with work left that needs no outside input:
    /// the host records the effects it has, then calls
    /// [`Machine::proceed`]. Feeding or expiring a busy machine is refused.
    pub fn busy(&self) -> bool {
        self.ended.is_none() && (self.tasks.values().any(|t| t.ready()) || self.tasks.is_empty())
    }

    /// The next slice of a busy machine's work.
    pub fn proceed(&mut self) -> Vec<Effect> {
        self.run();
        std::mem::take(&mut self.out)
    }

    /// Runs every slice to the rest: `effects` (what the last call
    /// returned) and all that follow until the machine waits or ends. For
    /// hosts that hold everything in memory anyway (replay, `flow test`).
    pub fn settle(&mut self, mut effects: Vec<Effect>) -> Vec<Effect> {
        while self.busy() {
            effects.extend(self.proceed());
        }
        effects
    }

    pub fn ending(&self) -> Option<&Ending> {
        self.ended.as_ref()
    }

    pub fn module(&self) -> &str {
        &self.module
    }

    /// The run state (the root task's view).
    pub fn state(&self) -> &Json {
        &self.state
    }

    /// Whether `call` is open (a reply to it would be admitted).
    pub fn is_open(&self, call: &str) -> bool {
        self.calls.contains_key(call)
    }

    /// Open calls in call-id order.
    pub fn open_calls(&self) -> Vec<OpenCall> {
        self.calls
            .iter()
            .map(|(c, p)| OpenCall {
                call: c.clone(),
                task: p.task.clone(),
                node: p.node.clone(),
                tool: p.tool.clone(),
                args: p.args.clone(),
            })
            .collect()
    }
}
