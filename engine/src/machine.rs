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

use crate::model::{
    Agent, Condition, EdgeKind, Flow, Node, NodeKind, OnFail, OnTimeout, OutputValidator, Reducer,
    RetrievalMode, SpeakerSelection, ToolApproval, TransformMode, WaitFor, WriteMode,
};
use crate::path::{Path, Scope, Target};
use crate::program::{Module, Program, subflow_entry};
pub use flow_abi::fact::Ending;
use flow_abi::fact::{CallId, Fact};
use flow_abi::protocol::Outcome;
use flow_abi::{Type, decode_json};
use serde_json::{Map, Value as Json};
use std::collections::BTreeMap;
use std::sync::Arc;

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
    /// Record a Close fact, then cancel the call.
    Close { call: CallId, reason: String },
    /// Keep a durable deadline (a host record): call [`Machine::expire`]
    /// for `call` once `seconds` have passed since the Call was recorded.
    Deadline { call: CallId, seconds: u64 },
    /// Record the End fact.
    End(Ending),
}

impl Effect {
    /// The fact this effect records, not numbered yet (n = 0); `None` for a
    /// Deadline, which is a host record.
    pub fn fact(&self) -> Option<Fact> {
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
                call: call.clone(),
                task: task.clone(),
                node: node.clone(),
                tool: tool.clone(),
                fingerprint: fingerprint.clone(),
                args: args.clone(),
            },
            Effect::Checkpoint { task, node, state } => Fact::Checkpoint {
                n: 0,
                task: task.clone(),
                node: node.clone(),
                state: state.clone(),
            },
            Effect::Close { call, reason } => Fact::Close {
                n: 0,
                call: call.clone(),
                reason: reason.clone(),
            },
            Effect::Deadline { .. } => return None,
            Effect::End(e) => Fact::End {
                n: 0,
                ending: e.clone(),
            },
        })
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
    pub call: String,
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
        Ok(Machine::begin(program.clone(), module, node, state))
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
        };
        m.run();
        let effects = std::mem::take(&mut m.out);
        (m, effects)
    }

    /// Admits the outcome of an open call and runs until every task waits.
    pub fn feed(&mut self, call: &str, outcome: &Outcome) -> Result<Vec<Effect>, FeedError> {
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
        self.run();
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
                call: c.to_string(),
                task: p.task.clone(),
                node: p.node.clone(),
                tool: p.tool.clone(),
                args: p.args.clone(),
            })
            .collect()
    }

    // ------------------------------------------------------------ plumbing

    fn module_ref(&self) -> &Module {
        // The module was checked to exist when the machine was made.
        self.program
            .module(&self.module)
            .unwrap_or_else(|| unreachable_module())
    }

    fn flow(&self) -> &Flow {
        &self.module_ref().report.flow
    }

    fn node(&self, id: &str) -> Option<&Node> {
        self.module_ref().node(id)
    }

    fn fault(&mut self, why: String) {
        if self.ended.is_some() {
            return;
        }
        let calls: Vec<CallId> = self.calls.keys().cloned().collect();
        for c in calls {
            self.out.push(Effect::Close {
                call: c,
                reason: "run faulted".into(),
            });
        }
        self.calls.clear();
        let e = Ending::Faulted(why);
        self.out.push(Effect::End(e.clone()));
        self.ended = Some(e);
        self.tasks.clear();
    }

    fn task_state(&self, task: &str) -> &Json {
        self.tasks
            .get(task)
            .and_then(|t| t.local.as_ref())
            .unwrap_or(&self.state)
    }

    fn scope<'a>(&'a self, task: &str, last_message: Option<&'a Json>) -> Scope<'a> {
        Scope {
            state: self.task_state(task),
            last_message,
            error: self.error.as_ref(),
        }
    }

    fn resolve(&self, task: &str, path: &Path) -> Result<Json, String> {
        path.resolve(&self.scope(task, None))
            .map(|v| v.cloned().unwrap_or(Json::Null))
            .map_err(|e| format!("{path}: {e}"))
    }

    /// Issues a call for `task`; the task waits.
    fn call(&mut self, task: &str, node: &str, tool: &str, args: Json, purpose: Purpose) -> Step {
        let fingerprint = self
            .module_ref()
            .fingerprint(tool)
            .ok_or_else(|| format!("node {node}: no declaration {tool}"))?;
        let t = self
            .tasks
            .get_mut(task)
            .ok_or_else(|| format!("no task {task}"))?;
        t.k += 1;
        let call = CallId::new(task, t.k).map_err(|e| format!("node {node}: {e}"))?;
        if t.stage == Stage::Enter {
            t.stage = Stage::Waiting;
        }
        let nested = tool
            .strip_suffix(crate::program::ENTRY)
            .and_then(|m| m.strip_suffix('#'))
            .filter(|m| self.program.module(m).is_some())
            .map(str::to_string);
        self.out.push(Effect::Call {
            call: call.clone(),
            task: task.to_string(),
            node: node.to_string(),
            tool: tool.to_string(),
            fingerprint,
            args: args.clone(),
            nested,
        });
        if purpose == Purpose::Node
            && tool == "std/human#input"
            && let Some(NodeKind::Hitl(h)) = self.node(node).map(|n| &n.kind)
            && let Some(seconds) = h.timeout_seconds
        {
            self.out.push(Effect::Deadline {
                call: call.clone(),
                seconds,
            });
        }
        self.calls.insert(
            call,
            Pending {
                task: task.to_string(),
                node: node.to_string(),
                tool: tool.to_string(),
                args,
                purpose,
            },
        );
        Ok(())
    }

    /// Writes `value` at `target` in `task`'s state through the field's
    /// reducer.
    fn write(&mut self, task: &str, target: &Target, value: Json) {
        let reducer = self
            .flow()
            .state_schema
            .as_ref()
            .and_then(|s| s.fields.get(&target.field))
            .map_or(Reducer::Replace, |f| f.reducer);
        let is_branch = self.tasks.get(task).is_some_and(|t| t.local.is_some());
        if is_branch {
            if let Some(t) = self.tasks.get_mut(task) {
                t.writes.push((target.clone(), value.clone()));
                if let Some(local) = t.local.as_mut() {
                    apply(local, target, value, reducer);
                }
            }
        } else {
            apply(&mut self.state, target, value, reducer);
        }
    }

    fn write_key(&mut self, task: &str, key: &str, value: Json) {
        self.write(
            task,
            &Target {
                field: key.to_string(),
                below: Vec::new(),
            },
            value,
        );
    }

    // ------------------------------------------------------------ the loop

    /// Runs ready tasks until every task waits, the run ends, or the slice
    /// is full ([`SLICE`]; then [`Machine::busy`] is true).
    fn run(&mut self) {
        while self.ended.is_none() && self.out.len() < SLICE {
            let next = self
                .tasks
                .iter()
                .find(|(_, t)| t.ready())
                .map(|(id, _)| id.clone());
            let Some(task) = next else { break };
            let r = match self.tasks.get(&task).map(|t| t.stage.clone()) {
                Some(Stage::Enter) => self.enter(&task),
                Some(Stage::Route { next }) => self.choose_route(&task, next),
                _ => Ok(()),
            };
            if let Err(why) = r {
                self.fault(why);
            }
        }
        if self.ended.is_none() && self.tasks.is_empty() && self.out.len() < SLICE {
            self.fault("every task ended without reaching an output node".into());
        }
    }

    fn enter(&mut self, task: &str) -> Step {
        let node_id = self
            .tasks
            .get(task)
            .map(|t| t.node.clone())
            .ok_or("no task")?;
        self.steps += 1;
        if self.steps > self.max_steps {
            return Err(format!(
                "step limit of {} node executions reached at node {node_id}",
                self.max_steps
            ));
        }
        // Borrow the node from a handle on the program, not from `self`, so
        // no per-step clone of the node is needed.
        let program = self.program.clone();
        let node = program
            .module(&self.module)
            .and_then(|m| m.node(&node_id))
            .ok_or_else(|| format!("no node {node_id}"))?;
        // A branch that reaches a parallel_join stops there; its parent
        // joins it (target order, DESIGN §4).
        let passing = self
            .tasks
            .get_mut(task)
            .map(|t| std::mem::take(&mut t.passing_join))
            .unwrap_or(false);
        if let NodeKind::ParallelJoin(_) = node.kind
            && !passing
            && self.tasks.get(task).is_some_and(|t| t.parent.is_some())
        {
            return self.arrive_at_join(task, &node_id);
        }
        let branch_live = self.tasks.len() > 1;
        if task != "root" || !branch_live {
            let state = self.task_state(task).clone();
            self.out.push(Effect::Checkpoint {
                task: task.to_string(),
                node: node_id.clone(),
                state,
            });
        }
        if let Some(t) = self.tasks.get_mut(task) {
            t.attempts = 0;
            t.validations = 0;
        }
        match &node.kind {
            NodeKind::Input(_) | NodeKind::ParallelJoin(_) => {
                self.route(task);
                Ok(())
            }
            NodeKind::Output(o) => {
                if task != "root" {
                    return Err(format!(
                        "parallel branch {task} reached output node {node_id} before its join"
                    ));
                }
                let output = self.project_output(o.input_schema.as_ref().map(|s| &s.ptr));
                let e = Ending::Completed {
                    exit: o.exit_code.clone(),
                    output,
                };
                self.out.push(Effect::End(e.clone()));
                self.ended = Some(e);
                Ok(())
            }
            NodeKind::Condition(_) => {
                self.set_stage(task, Stage::Route { next: 0 });
                Ok(())
            }
            NodeKind::ParallelFork(f) => {
                let mut branches = Vec::new();
                let base = self.task_state(task).clone();
                for target in &f.targets {
                    let id = format!("{task}/{target}");
                    let mut local = base.clone();
                    if let Some(map) = f.input_map.get(target) {
                        for (key, path) in map {
                            let v = self.resolve(task, path)?;
                            set_member(&mut local, key, v);
                        }
                    }
                    self.tasks.insert(
                        id.clone(),
                        Task::new(target.clone(), Some(task.to_string()), Some(local)),
                    );
                    branches.push(id);
                }
                self.set_stage(
                    task,
                    Stage::Forked(Box::new(ForkWait {
                        branches,
                        done: Vec::new(),
                        join: None,
                    })),
                );
                Ok(())
            }
            NodeKind::Transform(t) if t.mode == TransformMode::Mapping => {
                for a in &t.assignments {
                    let v = self.resolve(task, &a.from)?;
                    self.write(task, &a.to, v);
                }
                self.route(task);
                Ok(())
            }
            NodeKind::AgentRole(_) => {
                self.set_stage(
                    task,
                    Stage::Agent(Box::new(AgentStage {
                        iter: 0,
                        messages: Vec::new(),
                        queue: Vec::new(),
                    })),
                );
                self.agent_turn(task, node)
            }
            NodeKind::AgentDebate(_) => {
                self.set_stage(
                    task,
                    Stage::Debate(Box::new(DebateStage {
                        round: 0,
                        transcript: Vec::new(),
                        last_speaker: None,
                    })),
                );
                self.debate_next(task, node)
            }
            NodeKind::Harness(t) | NodeKind::Unknown(t) => {
                Err(format!("node {node_id}: node type {t} is not supported"))
            }
            _ => self.node_call(task, node),
        }
    }

    fn set_stage(&mut self, task: &str, stage: Stage) {
        if let Some(t) = self.tasks.get_mut(task) {
            t.stage = stage;
        }
    }

    /// The node's own call (tool_invoke, llm_call, hitl, memory, subgraph,
    /// transform fn_ref).
    fn node_call(&mut self, task: &str, node: &Node) -> Step {
        let (tool, args, purpose) = self.node_args(task, node)?;
        if let Some(t) = self.tasks.get_mut(task) {
            t.attempts += 1;
        }
        self.call(task, &node.id, &tool, args, purpose)
    }

    fn node_args(&self, task: &str, node: &Node) -> Result<(String, Json, Purpose), String> {
        let module = self.module_ref();
        let flow = &module.report.flow;
        let mut args = Map::new();
        let tool = match &node.kind {
            NodeKind::ToolInvoke(t) => {
                let tool = format!("{}#{}", module.path, t.tool_id);
                if t.input_map.is_empty() {
                    // GAP-TOOL-3: without input_map each parameter takes
                    // state[param]; a missing required one faults.
                    let state = self.task_state(task);
                    if let Some(d) = module.decls.get(&tool) {
                        for p in &d.params {
                            match state.get(&p.name) {
                                Some(v) => {
                                    args.insert(p.name.clone(), v.clone());
                                }
                                None if matches!(p.ty, Type::Option(_)) => {}
                                None => {
                                    return Err(format!(
                                        "node {}: tool {} needs parameter {:?}, which the state does not hold (no input_map)",
                                        node.id, t.tool_id, p.name
                                    ));
                                }
                            }
                        }
                    }
                } else {
                    for (param, path) in &t.input_map {
                        args.insert(param.clone(), self.resolve(task, path)?);
                    }
                }
                tool
            }
            NodeKind::LlmCall(l) => {
                let defaults = flow.model_defaults.as_ref();
                let model = l
                    .model
                    .clone()
                    .or_else(|| defaults.and_then(|d| d.model.clone()))
                    .unwrap_or_else(|| "default".into());
                args.insert("model".into(), Json::String(model));
                let scope = self.scope(task, None);
                let render = |t: &crate::template::Template| {
                    t.render(&scope)
                        .map_err(|e| format!("node {}: {e}", node.id))
                };
                if let Some(s) = &l.system_prompt {
                    args.insert("system".into(), Json::String(render(s)?));
                }
                let prompt = match &l.prompt_template {
                    Some(t) => render(t)?,
                    None => String::new(),
                };
                args.insert("prompt".into(), Json::String(prompt));
                let params = l
                    .model_params
                    .as_ref()
                    .or_else(|| defaults.and_then(|d| d.model_params.as_ref()));
                if let Some(p) = params {
                    args.insert("params".into(), model_params(p));
                }
                if let Some(s) = &l.structured_output {
                    args.insert("schema".into(), self.schema_of(&s.ptr));
                }
                if let Some(c) = self.context_for(task, &node.id) {
                    args.insert("context".into(), c);
                }
                "std/llm#chat".into()
            }
            NodeKind::Hitl(h) => {
                if let Some(p) = &h.prompt {
                    let text = p
                        .render(&self.scope(task, None))
                        .map_err(|e| format!("node {}: {e}", node.id))?;
                    args.insert("prompt".into(), Json::String(text));
                }
                if let Some(s) = &h.resume_schema {
                    args.insert("schema".into(), self.schema_of(&s.ptr));
                }
                "std/human#input".into()
            }
            NodeKind::MemoryRead(r) => {
                args.insert("store".into(), Json::String(r.store_id.clone()));
                match r.retrieval_mode {
                    RetrievalMode::KeyValue => {
                        let key = r
                            .key_expr
                            .as_ref()
                            .ok_or_else(|| format!("node {}: no key_expr", node.id))?;
                        args.insert("key".into(), self.resolve(task, key)?);
                        "std/memory#read".into()
                    }
                    RetrievalMode::Semantic => {
                        let q = r
                            .query_expr
                            .as_ref()
                            .ok_or_else(|| format!("node {}: no query_expr", node.id))?;
                        args.insert("query".into(), self.resolve(task, q)?);
                        args.insert("top_k".into(), Json::Number(r.top_k().into()));
                        if let Some(s) = &r.min_score {
                            args.insert("min_score".into(), Json::Number(s.clone()));
                        }
                        "std/memory#search".into()
                    }
                }
            }
            NodeKind::MemoryWrite(w) => {
                args.insert("store".into(), Json::String(w.store_id.clone()));
                args.insert("key".into(), self.resolve(task, &w.key_expr)?);
                args.insert("value".into(), self.resolve(task, &w.value_expr)?);
                let mode = match w.write_mode {
                    WriteMode::Upsert => "upsert",
                    WriteMode::Overwrite => "overwrite",
                };
                args.insert("mode".into(), Json::String(mode.into()));
                "std/memory#write".into()
            }
            NodeKind::Subgraph(s) => {
                let sub = module
                    .subflows
                    .get(&s.flow_ref)
                    .ok_or_else(|| format!("node {}: no flow {}", node.id, s.flow_ref))?;
                let input = if s.input_map.is_empty() {
                    self.task_state(task).clone()
                } else {
                    let mut m = Map::new();
                    for (k, p) in &s.input_map {
                        m.insert(k.clone(), self.resolve(task, p)?);
                    }
                    Json::Object(m)
                };
                args.insert("input".into(), input);
                subflow_entry(sub)
            }
            NodeKind::Transform(t) => {
                let f = t
                    .fn_ref
                    .as_ref()
                    .ok_or_else(|| format!("node {}: no fn_ref", node.id))?;
                args.insert("input".into(), fn_input(self.task_state(task), None));
                return Ok((f.identity(), Json::Object(args), Purpose::Transform));
            }
            other => {
                return Err(format!(
                    "node {}: {} makes no call",
                    node.id,
                    other.type_name()
                ));
            }
        };
        Ok((tool, Json::Object(args), Purpose::Node))
    }

    /// The generated schema of an embedded schema (what a Tool is sent).
    fn schema_of(&self, ptr: &str) -> Json {
        let m = self.module_ref();
        m.report
            .schema_types
            .get(ptr)
            .map_or(Json::Object(Map::new()), |t| {
                flow_abi::schema::generate(t, &m.report.types, true)
            })
    }

    /// DESIGN §4: "`context_from`: the listed nodes' `output_key` values are
    /// passed to an llm_call or agent_role as a `context` argument, in list
    /// order."
    fn context_for(&self, task: &str, node: &str) -> Option<Json> {
        let ids: Vec<&String> = self
            .module_ref()
            .in_edges(node)
            .filter_map(|e| match &e.kind {
                EdgeKind::Direct {
                    to, context_from, ..
                } if to == node => Some(context_from),
                _ => None,
            })
            .flatten()
            .collect();
        if ids.is_empty() {
            return None;
        }
        let state = self.task_state(task);
        let items = ids
            .iter()
            .map(|id| {
                self.node(id)
                    .and_then(output_key)
                    .and_then(|k| state.get(k).cloned())
                    .unwrap_or(Json::Null)
            })
            .collect();
        Some(Json::Array(items))
    }

    fn project_output(&self, schema_ptr: Option<&String>) -> Json {
        let m = self.module_ref();
        let fields = schema_ptr
            .and_then(|p| m.report.schema_types.get(p))
            .map(|t| crate::program::record_fields(t, &m.report.types));
        match (fields, &self.state) {
            (Some(fields), Json::Object(state)) if !fields.is_empty() => Json::Object(
                fields
                    .iter()
                    .filter_map(|f| state.get(&f.name).map(|v| (f.name.clone(), v.clone())))
                    .collect(),
            ),
            _ => self.state.clone(),
        }
    }

    // ------------------------------------------------------------ replies

    fn on_reply(&mut self, call: &str, p: Pending, outcome: &Outcome) -> Step {
        let program = self.program.clone();
        let node = program
            .module(&self.module)
            .and_then(|m| m.node(&p.node))
            .ok_or_else(|| format!("no node {}", p.node))?;
        let task = p.task.clone();
        match p.purpose {
            Purpose::Node => match outcome {
                Outcome::Ok(v) => self.node_ok(&task, node, call, v.clone()),
                failed => self.node_failed(&task, node, call, failed),
            },
            Purpose::Sleep => self.node_call(&task, node),
            Purpose::Validate(value) => {
                // GAP-FN-1: `{valid: Bool, reason?: Text}`; a bare Bool is
                // read as `{valid}`.
                let (valid, reason) = match outcome {
                    Outcome::Ok(Json::Bool(b)) => (*b, None),
                    Outcome::Ok(Json::Object(m))
                        if matches!(m.get("valid"), Some(Json::Bool(_))) =>
                    {
                        (
                            m.get("valid") == Some(&Json::Bool(true)),
                            m.get("reason").and_then(Json::as_str).map(str::to_string),
                        )
                    }
                    Outcome::Ok(other) => {
                        return Err(format!(
                            "node {}: output validator answered {}, not {{\"valid\": Bool, \"reason\"?: Text}}",
                            node.id,
                            flow_abi::json::canonical(other)
                        ));
                    }
                    failed => {
                        return Err(format!(
                            "node {}: output validator call {call} failed: {failed}",
                            node.id
                        ));
                    }
                };
                let v = validator(node).cloned();
                match (valid, v) {
                    (true, _) | (false, None) => {
                        self.store_result(&task, node, value)?;
                        self.route(&task);
                        Ok(())
                    }
                    (false, Some(v)) => match v.on_fail {
                        OnFail::Raise => Err(format!(
                            "node {}: output failed validation{}",
                            node.id,
                            reason
                                .as_deref()
                                .map(|r| format!(": {r}"))
                                .unwrap_or_default()
                        )),
                        OnFail::Skip => {
                            self.route(&task);
                            Ok(())
                        }
                        OnFail::Retry => {
                            let n = self.tasks.get(&task).map_or(0, |t| t.validations);
                            if n >= v.max_retries {
                                return Err(format!(
                                    "node {}: output failed validation after {} retries",
                                    node.id, v.max_retries
                                ));
                            }
                            if let Some(t) = self.tasks.get_mut(&task) {
                                t.validations += 1;
                            }
                            self.node_call(&task, node)
                        }
                    },
                }
            }
            Purpose::Transform => match outcome {
                Outcome::Ok(Json::Object(m)) => {
                    for (k, v) in m {
                        self.write_key(&task, k, v.clone());
                    }
                    self.route(&task);
                    Ok(())
                }
                Outcome::Ok(other) => Err(format!(
                    "node {}: transform function answered {}, not an object of state fields",
                    node.id,
                    flow_abi::json::canonical(other)
                )),
                failed => Err(failed_msg(&node.id, call, &p.tool, failed)),
            },
            Purpose::Route(i) => match outcome {
                Outcome::Ok(Json::Bool(true)) => {
                    let to = self.route_target(&node.id, i)?;
                    self.goto(&task, to);
                    Ok(())
                }
                Outcome::Ok(Json::Bool(false)) => {
                    self.set_stage(&task, Stage::Route { next: i + 1 });
                    Ok(())
                }
                Outcome::Ok(other) => Err(format!(
                    "node {}: condition function answered {}, not a boolean",
                    node.id,
                    flow_abi::json::canonical(other)
                )),
                failed => Err(failed_msg(&node.id, call, &p.tool, failed)),
            },
            Purpose::Join => match outcome {
                Outcome::Ok(v) => {
                    self.finish_join(&task, node, Some(v.clone()));
                    Ok(())
                }
                failed => Err(failed_msg(&node.id, call, &p.tool, failed)),
            },
            Purpose::AgentChat => self.agent_reply(&task, node, call, outcome),
            Purpose::AgentApprove => {
                let approved = matches!(outcome, Outcome::Ok(Json::Object(m)) if m.get("approved") == Some(&Json::Bool(true)));
                let Some(Stage::Agent(mut st)) = self.tasks.get(&task).map(|t| t.stage.clone())
                else {
                    return Err("agent stage lost".into());
                };
                if approved {
                    let (tool, args) = st.queue.first().cloned().ok_or("no pending tool")?;
                    self.call(&task, &node.id, &tool, args, Purpose::AgentTool)
                } else {
                    let (tool, _) = st.queue.remove(0);
                    st.messages.push(tool_message(
                        &tool,
                        &Json::String("denied by the reviewer".into()),
                    ));
                    self.set_stage(&task, Stage::Agent(st));
                    self.agent_continue(&task, node)
                }
            }
            Purpose::AgentTool => {
                let Some(Stage::Agent(mut st)) = self.tasks.get(&task).map(|t| t.stage.clone())
                else {
                    return Err("agent stage lost".into());
                };
                let (tool, _) = st.queue.remove(0);
                st.messages.push(tool_message(&tool, &outcome.to_json()));
                self.set_stage(&task, Stage::Agent(st));
                self.agent_continue(&task, node)
            }
            Purpose::DebateTurn(speaker) => self.debate_reply(&task, node, call, &speaker, outcome),
            Purpose::DebateSpeaker => match outcome {
                Outcome::Ok(Json::String(s)) => self.debate_turn(&task, node, s.clone()),
                Outcome::Ok(other) => Err(format!(
                    "node {}: speaker selection answered {}, not an agent id",
                    node.id,
                    flow_abi::json::canonical(other)
                )),
                failed => Err(failed_msg(&node.id, call, &p.tool, failed)),
            },
            Purpose::DebateStop => match outcome {
                Outcome::Ok(Json::Bool(stop)) => {
                    if *stop {
                        self.debate_end(&task, node)
                    } else {
                        self.debate_next(&task, node)
                    }
                }
                Outcome::Ok(other) => Err(format!(
                    "node {}: termination function answered {}, not a boolean",
                    node.id,
                    flow_abi::json::canonical(other)
                )),
                failed => Err(failed_msg(&node.id, call, &p.tool, failed)),
            },
        }
    }

    fn node_ok(&mut self, task: &str, node: &Node, call: &str, v: Json) -> Step {
        // A structured llm answer must fit its schema; one that does not is
        // a failure of the node's call (GAP-LLM-1, GAP-FAIL-1), handled like
        // a Failed reply: retry, fail_branch, or a fault.
        let value = match &node.kind {
            NodeKind::LlmCall(l) => match &l.structured_output {
                Some(s) => {
                    let m = self.module_ref();
                    match m.report.schema_types.get(&s.ptr) {
                        Some(t) => match decode_json(&v, t, &m.report.types) {
                            Ok(x) => x.to_json(),
                            Err(e) => {
                                let why = Outcome::BadReply(format!(
                                    "the answer does not fit structured_output: {e}"
                                ));
                                return self.node_failed(task, node, call, &why);
                            }
                        },
                        None => v,
                    }
                }
                None => match v.get("text") {
                    Some(t) => t.clone(),
                    None => {
                        let why = Outcome::BadReply("the model's answer has no \"text\"".into());
                        return self.node_failed(task, node, call, &why);
                    }
                },
            },
            _ => v,
        };
        if let Some(val) = validator(node) {
            // GAP-FN-1: validator `(output, state) → {valid, reason?}`.
            let mut input = Map::new();
            input.insert("output".into(), value.clone());
            input.insert("state".into(), self.task_state(task).clone());
            let input = Json::Object(input);
            let mut args = Map::new();
            args.insert("input".into(), input);
            return self.call(
                task,
                &node.id,
                &val.fn_ref.identity(),
                Json::Object(args),
                Purpose::Validate(value),
            );
        }
        self.store_result(task, node, value)?;
        self.route(task);
        Ok(())
    }

    fn store_result(&mut self, task: &str, node: &Node, value: Json) -> Step {
        match &node.kind {
            // GAP-TOOL-3: without output_map, an object reply is written
            // key by key into the same-named state keys.
            NodeKind::ToolInvoke(t) if t.output_map.is_empty() => {
                if let Json::Object(m) = value {
                    for (k, v) in m {
                        self.write_key(task, &k, v);
                    }
                }
            }
            NodeKind::ToolInvoke(t) => {
                for (field, target) in &t.output_map {
                    let v = value.get(field).cloned().ok_or_else(|| {
                        format!(
                            "node {}: tool {} replied without field {field:?} that output_map reads",
                            node.id, t.tool_id
                        )
                    })?;
                    self.write(task, target, v);
                }
            }
            NodeKind::Subgraph(s) => {
                for (field, target) in &s.output_map {
                    let v = value.get(field).cloned().unwrap_or(Json::Null);
                    self.write(task, target, v);
                }
            }
            // GAP-LLM-4: a structured answer without output_key writes each
            // top-level key to the same-named state key, through its reducer.
            NodeKind::LlmCall(l) if l.output_key.is_none() && l.structured_output.is_some() => {
                if let Json::Object(m) = value {
                    for (k, v) in m {
                        self.write_key(task, &k, v);
                    }
                }
            }
            other => {
                if let Some(k) = output_key_of(other) {
                    let k = k.to_string();
                    self.write_key(task, &k, value);
                }
            }
        }
        Ok(())
    }

    /// A failed call of the node itself: retry, route to fail_branch, or
    /// fault (DESIGN §4: "A failed call with no fail_branch faults the run
    /// with a message naming the node and the call").
    fn node_failed(&mut self, task: &str, node: &Node, call: &str, outcome: &Outcome) -> Step {
        let fb = match &node.kind {
            NodeKind::LlmCall(l) => l.fail_branch.clone(),
            _ => None,
        };
        let Some(fb) = fb else {
            let tool = self.calls_tool(node);
            return Err(failed_msg(&node.id, call, &tool, outcome));
        };
        let attempts = self.tasks.get(task).map_or(1, |t| t.attempts);
        if let Some(r) = &fb.retry
            && attempts < r.max_attempts
        {
            // GAP-RETRY-1: fixed = delay_ms, exponential = delay_ms·2^(n−1)
            // for the n-th retry (delay_ms defaults to 1000 in the model).
            let base = r.delay_ms;
            let ms = match r.backoff {
                Some(crate::model::Backoff::Exponential) => {
                    base.saturating_mul(1u64 << (attempts - 1).min(32))
                }
                _ => base,
            };
            let mut args = Map::new();
            args.insert("ms".into(), Json::Number(ms.into()));
            return self.call(
                task,
                &node.id,
                "std/clock#sleep",
                Json::Object(args),
                Purpose::Sleep,
            );
        }
        let mut e = Map::new();
        e.insert("node".into(), Json::String(node.id.clone()));
        e.insert("call".into(), Json::String(call.to_string()));
        e.insert("outcome".into(), outcome.to_json());
        self.error = Some(Json::Object(e));
        self.goto(task, fb.target.clone());
        Ok(())
    }

    fn calls_tool(&self, node: &Node) -> String {
        match &node.kind {
            NodeKind::ToolInvoke(t) => format!("{}#{}", self.module, t.tool_id),
            NodeKind::LlmCall(_) => "std/llm#chat".into(),
            NodeKind::Hitl(_) => "std/human#input".into(),
            other => other.type_name().to_string(),
        }
    }

    // ------------------------------------------------------------ routing

    /// The node finished: choose the route out.
    fn route(&mut self, task: &str) {
        self.set_stage(task, Stage::Route { next: 0 });
    }

    fn goto(&mut self, task: &str, to: String) {
        if let Some(t) = self.tasks.get_mut(task) {
            t.node = to;
            t.stage = Stage::Enter;
        }
    }

    /// Branch `i` of the route out of `node`: a condition node's branches,
    /// else its conditional edge's.
    fn route_target(&self, node: &str, i: usize) -> Result<String, String> {
        let (branches, _) = route_of(self.module_ref(), node);
        branches
            .get(i)
            .map(|(_, to)| to.to_string())
            .ok_or_else(|| format!("node {node}: no branch {i}"))
    }

    /// Tries conditional branches from `next` on: the first that holds
    /// wins, else the default (DESIGN §4: "first matching branch wins, else
    /// `default_target`").
    fn choose_route(&mut self, task: &str, next: usize) -> Step {
        let node = self
            .tasks
            .get(task)
            .map(|t| t.node.clone())
            .ok_or("no task")?;
        // Borrow the routes from a handle on the program: no clone of the
        // conditions per step.
        let program = self.program.clone();
        let module = program
            .module(&self.module)
            .ok_or_else(|| format!("no module {}", self.module))?;
        let (branches, default) = route_of(module, &node);
        for (i, (cond, to)) in branches.iter().enumerate().skip(next) {
            match cond {
                Condition::Expr(e) => {
                    let holds = e
                        .eval(&self.scope(task, None))
                        .map_err(|err| format!("node {node}: condition {}", expr_error(e, &err)))?;
                    if holds {
                        self.goto(task, to.to_string());
                        return Ok(());
                    }
                }
                Condition::FnRef(f) => {
                    let mut args = Map::new();
                    args.insert("input".into(), fn_input(self.task_state(task), None));
                    self.set_stage(task, Stage::Route { next: i });
                    self.call(
                        task,
                        &node,
                        &f.identity(),
                        Json::Object(args),
                        Purpose::Route(i),
                    )?;
                    // The reply decides; the task waits.
                    if let Some(t) = self.tasks.get_mut(task) {
                        t.stage = Stage::Waiting;
                    }
                    return Ok(());
                }
            }
        }
        match default {
            Some(to) => {
                self.goto(task, to.to_string());
                Ok(())
            }
            None => Err(format!("node {node} has no route out")),
        }
    }

    // ------------------------------------------------------------ parallel

    fn arrive_at_join(&mut self, task: &str, join: &str) -> Step {
        let parent = self
            .tasks
            .get(task)
            .and_then(|t| t.parent.clone())
            .ok_or("branch without parent")?;
        self.set_stage(task, Stage::AtJoin);
        let Some(Stage::Forked(mut fw)) = self.tasks.get(&parent).map(|t| t.stage.clone()) else {
            return Err(format!(
                "branch {task} reached join {join} but its fork is gone"
            ));
        };
        fw.done.push(task.to_string());
        if fw.join.is_none() {
            fw.join = Some(join.to_string());
        }
        let wait_for = match self.node(join).map(|n| &n.kind) {
            Some(NodeKind::ParallelJoin(j)) => j.wait_for,
            _ => WaitFor::All,
        };
        let need = match wait_for {
            WaitFor::All => fw.branches.len(),
            WaitFor::Any => 1,
            WaitFor::Count(n) => usize::try_from(n)
                .unwrap_or(usize::MAX)
                .min(fw.branches.len()),
        };
        let satisfied = fw.done.len() >= need;
        self.set_stage(&parent, Stage::Forked(fw.clone()));
        if !satisfied {
            return Ok(());
        }
        // Close the branches that did not make it, with their open calls.
        for b in &fw.branches {
            if !fw.done.contains(b) {
                self.close_task(b);
            }
        }
        let join_node = self.node(join).cloned().ok_or("join vanished")?;
        if let NodeKind::ParallelJoin(j) = &join_node.kind
            && j.join_reducer == crate::model::JoinReducer::FnRef
            && let Some(f) = &j.join_fn_ref
        {
            let results = Json::Array(
                self.winners(&parent)
                    .iter()
                    .map(|b| self.branch_result(b))
                    .collect(),
            );
            // GAP-FN-1: join `(results: List<json.Value>) → json.Value`,
            // the winners' results in target order.
            let mut input = Map::new();
            input.insert("results".into(), results);
            let mut args = Map::new();
            args.insert("input".into(), Json::Object(input));
            if let Some(t) = self.tasks.get_mut(&parent) {
                t.node = join.to_string();
            }
            return self.call(
                &parent,
                join,
                &f.identity(),
                Json::Object(args),
                Purpose::Join,
            );
        }
        self.finish_join(&parent, &join_node, None);
        Ok(())
    }

    /// The branches that reached the join and count, in target order.
    fn winners(&self, parent: &str) -> Vec<String> {
        match self.tasks.get(parent).map(|t| &t.stage) {
            Some(Stage::Forked(fw)) => fw
                .branches
                .iter()
                .filter(|b| fw.done.contains(b) && self.tasks.contains_key(*b))
                .cloned()
                .collect(),
            _ => Vec::new(),
        }
    }

    /// A branch's result: the final value of each state field it wrote.
    fn branch_result(&self, branch: &str) -> Json {
        let Some(t) = self.tasks.get(branch) else {
            return Json::Object(Map::new());
        };
        let local = t.local.as_ref();
        let mut m = Map::new();
        for (target, _) in &t.writes {
            if let Some(v) = local.and_then(|l| l.get(&target.field)) {
                m.insert(target.field.clone(), v.clone());
            }
        }
        Json::Object(m)
    }

    fn finish_join(&mut self, parent: &str, join: &Node, reduced: Option<Json>) {
        let winners = self.winners(parent);
        let results: Vec<Json> = winners.iter().map(|b| self.branch_result(b)).collect();
        let writes: Vec<(Target, Json)> = winners
            .iter()
            .filter_map(|b| self.tasks.get(b))
            .flat_map(|t| t.writes.clone())
            .collect();
        for b in &winners {
            self.tasks.remove(b);
        }
        for (target, v) in writes {
            self.write(parent, &target, v);
        }
        if let NodeKind::ParallelJoin(j) = &join.kind
            && let Some(key) = &j.output_key
        {
            let value = reduced.unwrap_or_else(|| match j.join_reducer {
                crate::model::JoinReducer::Append => Json::Array(results.clone()),
                _ => {
                    let mut acc = Json::Object(Map::new());
                    for r in &results {
                        merge_into(&mut acc, r.clone());
                    }
                    acc
                }
            });
            self.write_key(parent, key, value);
        }
        // The parent continues at the join node, which checkpoints there
        // and passes through it.
        if let Some(t) = self.tasks.get_mut(parent) {
            t.node = join.id.clone();
            t.stage = Stage::Enter;
            t.passing_join = true;
        }
    }

    /// Removes a task and its descendants, closing their open calls.
    fn close_task(&mut self, task: &str) {
        let doomed: Vec<String> = self
            .tasks
            .keys()
            .filter(|id| *id == task || id.starts_with(&format!("{task}/")))
            .cloned()
            .collect();
        for id in &doomed {
            self.tasks.remove(id);
        }
        let calls: Vec<CallId> = self
            .calls
            .iter()
            .filter(|(_, p)| doomed.contains(&p.task))
            .map(|(c, _)| c.clone())
            .collect();
        for c in calls {
            self.calls.remove(&c);
            self.out.push(Effect::Close {
                call: c,
                reason: "join satisfied".into(),
            });
        }
    }

    // ------------------------------------------------------------ agents

    fn agent_of(&self, node: &Node) -> Result<(Agent, crate::model::AgentRole), String> {
        let NodeKind::AgentRole(a) = &node.kind else {
            return Err(format!("node {} is not an agent_role", node.id));
        };
        let agent = self
            .flow()
            .agents
            .iter()
            .find(|x| x.id == a.agent_ref)
            .cloned()
            .ok_or_else(|| format!("node {}: no agent {}", node.id, a.agent_ref))?;
        Ok((agent, a.clone()))
    }

    /// One model turn of the ReAct loop (DESIGN §4: "a bounded ReAct loop
    /// of `std/llm#chat` Calls and Tool Calls (max_iter)"). The last
    /// allowed turn offers no tools, so the agent must answer.
    fn agent_turn(&mut self, task: &str, node: &Node) -> Step {
        let (agent, role) = self.agent_of(node)?;
        let Some(Stage::Agent(st)) = self.tasks.get(task).map(|t| t.stage.clone()) else {
            return Err("agent stage lost".into());
        };
        let mut args = self.agent_args(&agent);
        let mut prompt = role
            .task_description
            .render(&self.scope(task, None))
            .map_err(|e| format!("node {}: {e}", node.id))?;
        if let Some(x) = &role.expected_output {
            prompt.push_str("\n\nExpected output: ");
            prompt.push_str(x);
        }
        args.insert("prompt".into(), Json::String(prompt));
        if !st.messages.is_empty() {
            args.insert("messages".into(), Json::Array(st.messages.clone()));
        }
        if st.iter + 1 < agent.max_iter && !agent.tools.is_empty() {
            let m = self.module_ref();
            let tools = agent
                .tools
                .iter()
                .filter_map(|t| {
                    let id = format!("{}#{t}", m.path);
                    let d = m.decls.get(&id)?;
                    let mut o = Map::new();
                    o.insert("tool".into(), Json::String(t.clone()));
                    if let Some(doc) = &d.doc {
                        o.insert("description".into(), Json::String(doc.clone()));
                    }
                    o.insert("signature".into(), d.signature(&m.report.types, true));
                    Some(Json::Object(o))
                })
                .collect();
            args.insert("tools".into(), Json::Array(tools));
        }
        if let Some(s) = &role.structured_output {
            args.insert("schema".into(), self.schema_of(&s.ptr));
        }
        if let Some(c) = self.context_for(task, &node.id) {
            args.insert("context".into(), c);
        }
        self.call(
            task,
            &node.id,
            "std/llm#chat",
            Json::Object(args),
            Purpose::AgentChat,
        )
    }

    fn agent_reply(&mut self, task: &str, node: &Node, call: &str, outcome: &Outcome) -> Step {
        let (agent, role) = self.agent_of(node)?;
        let Outcome::Ok(v) = outcome else {
            return Err(failed_msg(&node.id, call, "std/llm#chat", outcome));
        };
        let Some(Stage::Agent(mut st)) = self.tasks.get(task).map(|t| t.stage.clone()) else {
            return Err("agent stage lost".into());
        };
        st.iter += 1;
        let asked: Vec<(String, Json)> = v
            .get("tool_calls")
            .and_then(Json::as_array)
            .map(|calls| {
                calls
                    .iter()
                    .filter_map(|c| {
                        let t = c.get("tool")?.as_str()?;
                        Some((
                            t.to_string(),
                            c.get("args").cloned().unwrap_or(Json::Object(Map::new())),
                        ))
                    })
                    .collect()
            })
            .unwrap_or_default();
        if asked.is_empty() {
            // GAP-AGENT-1: `{"final": v}` is the answer; a plain
            // `{"text": …}` (or the structured value itself) is read the
            // same way an llm_call's answer is.
            let answer = v.get("final");
            let result = match &role.structured_output {
                Some(s) => {
                    let m = self.module_ref();
                    match m.report.schema_types.get(&s.ptr) {
                        Some(t) => decode_json(answer.unwrap_or(v), t, &m.report.types)
                            .map(|x| x.to_json())
                            .map_err(|e| {
                                format!(
                                    "node {}: answer does not fit structured_output: {e}",
                                    node.id
                                )
                            })?,
                        None => v.clone(),
                    }
                }
                None => answer.or_else(|| v.get("text")).cloned().ok_or_else(|| {
                    format!(
                        "node {}: the model's answer has neither \"final\" nor \"text\"",
                        node.id
                    )
                })?,
            };
            if let Some(f) = &role.output_field {
                let f = f.clone();
                self.write_key(task, &f, result);
            }
            self.route(task);
            return Ok(());
        }
        if st.iter >= agent.max_iter {
            return Err(format!(
                "node {}: agent {} did not answer within max_iter {}",
                node.id, agent.id, agent.max_iter
            ));
        }
        for (tool, _) in &asked {
            if !agent.tools.contains(tool) {
                return Err(format!(
                    "node {}: the model asked for tool {tool:?}, which agent {} does not have",
                    node.id, agent.id
                ));
            }
        }
        let mut turn = Map::new();
        turn.insert("speaker".into(), Json::String(agent.id.clone()));
        turn.insert("text".into(), v.get("text").cloned().unwrap_or(Json::Null));
        turn.insert(
            "tool_calls".into(),
            v.get("tool_calls").cloned().unwrap_or(Json::Null),
        );
        st.messages.push(Json::Object(turn));
        st.queue = asked
            .into_iter()
            .map(|(t, a)| (format!("{}#{t}", self.module), a))
            .collect();
        self.set_stage(task, Stage::Agent(st));
        self.agent_continue(task, node)
    }

    /// Makes the next queued tool call (asking approval first when the node
    /// says so), or the next model turn.
    fn agent_continue(&mut self, task: &str, node: &Node) -> Step {
        let (_, role) = self.agent_of(node)?;
        let Some(Stage::Agent(st)) = self.tasks.get(task).map(|t| t.stage.clone()) else {
            return Err("agent stage lost".into());
        };
        let Some((tool, args)) = st.queue.first().cloned() else {
            return self.agent_turn(task, node);
        };
        if role.tool_approval == ToolApproval::Human {
            let mut a = Map::new();
            a.insert(
                "prompt".into(),
                Json::String(format!(
                    "Approve the call of {tool} with {}?",
                    flow_abi::json::canonical(&args)
                )),
            );
            let schema: Json = serde_json::from_str(
                r#"{"type":"object","properties":{"approved":{"type":"boolean"}},"required":["approved"]}"#,
            )
            .unwrap_or(Json::Null);
            a.insert("schema".into(), schema);
            return self.call(
                task,
                &node.id,
                "std/human#input",
                Json::Object(a),
                Purpose::AgentApprove,
            );
        }
        self.call(task, &node.id, &tool, args, Purpose::AgentTool)
    }

    // ------------------------------------------------------------ debates

    /// The `model` (the agent's, else `model_defaults`', else "default")
    /// and `system` (the agent's persona) of an agent's model turn.
    fn agent_args(&self, agent: &Agent) -> Map<String, Json> {
        let model = agent
            .model
            .clone()
            .or_else(|| {
                self.flow()
                    .model_defaults
                    .as_ref()
                    .and_then(|d| d.model.clone())
            })
            .unwrap_or_else(|| "default".into());
        let mut args = Map::new();
        args.insert("model".into(), Json::String(model));
        args.insert("system".into(), Json::String(persona(agent)));
        args
    }

    fn debate_cfg(&self, node: &Node) -> Result<crate::model::AgentDebate, String> {
        match &node.kind {
            NodeKind::AgentDebate(d) => Ok(d.clone()),
            _ => Err(format!("node {} is not an agent_debate", node.id)),
        }
    }

    /// Picks the next speaker (round_robin; `auto` reads as round_robin) or
    /// asks the custom selection function.
    fn debate_next(&mut self, task: &str, node: &Node) -> Step {
        let d = self.debate_cfg(node)?;
        let Some(Stage::Debate(st)) = self.tasks.get(task).map(|t| t.stage.clone()) else {
            return Err("debate stage lost".into());
        };
        if st.round >= d.max_rounds {
            return self.debate_end(task, node);
        }
        if d.speaker_selection == Some(SpeakerSelection::Custom)
            && let Some(f) = &d.speaker_selection_fn_ref
        {
            let mut input = Map::new();
            input.insert(
                "agents".into(),
                Json::Array(d.agents.iter().map(|a| Json::String(a.clone())).collect()),
            );
            // GAP-FN-1: speaker `(transcript, agents) → Text`.
            input.insert("transcript".into(), Json::Array(st.transcript.clone()));
            let mut args = Map::new();
            args.insert("input".into(), Json::Object(input));
            return self.call(
                task,
                &node.id,
                &f.identity(),
                Json::Object(args),
                Purpose::DebateSpeaker,
            );
        }
        let n = d.agents.len().max(1) as u64;
        let speaker = d
            .agents
            .get((st.round % n) as usize)
            .cloned()
            .ok_or_else(|| format!("node {}: no agents", node.id))?;
        self.debate_turn(task, node, speaker)
    }

    fn debate_turn(&mut self, task: &str, node: &Node, speaker: String) -> Step {
        let d = self.debate_cfg(node)?;
        let Some(Stage::Debate(st)) = self.tasks.get(task).map(|t| t.stage.clone()) else {
            return Err("debate stage lost".into());
        };
        if !d.agents.contains(&speaker) {
            return Err(format!(
                "node {}: {speaker:?} is not one of the debate's agents",
                node.id
            ));
        }
        if !d.allow_repeat_speaker && st.last_speaker.as_deref() == Some(speaker.as_str()) {
            return Err(format!(
                "node {}: {speaker} would speak twice in a row",
                node.id
            ));
        }
        let agent = self
            .flow()
            .agents
            .iter()
            .find(|a| a.id == speaker)
            .cloned()
            .ok_or_else(|| format!("node {}: no agent {speaker}", node.id))?;
        let mut args = self.agent_args(&agent);
        let topic = node
            .description
            .clone()
            .or_else(|| node.label.clone())
            .unwrap_or_else(|| "Continue the discussion.".into());
        args.insert(
            "prompt".into(),
            Json::String(format!(
                "Round {} of {}. {topic}",
                st.round + 1,
                d.max_rounds
            )),
        );
        if !st.transcript.is_empty() {
            args.insert("messages".into(), Json::Array(st.transcript.clone()));
        }
        if let Some(c) = self.context_for(task, &node.id) {
            args.insert("context".into(), c);
        }
        self.call(
            task,
            &node.id,
            "std/llm#chat",
            Json::Object(args),
            Purpose::DebateTurn(speaker),
        )
    }

    fn debate_reply(
        &mut self,
        task: &str,
        node: &Node,
        call: &str,
        speaker: &str,
        outcome: &Outcome,
    ) -> Step {
        let d = self.debate_cfg(node)?;
        let Outcome::Ok(v) = outcome else {
            return Err(failed_msg(&node.id, call, "std/llm#chat", outcome));
        };
        let text = v
            .get("text")
            .cloned()
            .ok_or_else(|| format!("node {}: the model's answer has no \"text\"", node.id))?;
        let Some(Stage::Debate(mut st)) = self.tasks.get(task).map(|t| t.stage.clone()) else {
            return Err("debate stage lost".into());
        };
        let mut turn = Map::new();
        turn.insert("speaker".into(), Json::String(speaker.to_string()));
        turn.insert("text".into(), text.clone());
        st.transcript.push(Json::Object(turn));
        st.round += 1;
        st.last_speaker = Some(speaker.to_string());
        self.set_stage(task, Stage::Debate(st));
        match &d.termination_condition {
            Some(Condition::Expr(e)) => {
                let holds = e.eval(&self.scope(task, Some(&text))).map_err(|err| {
                    format!(
                        "node {}: termination condition {}",
                        node.id,
                        expr_error(e, &err)
                    )
                })?;
                if holds {
                    return self.debate_end(task, node);
                }
                self.debate_next(task, node)
            }
            Some(Condition::FnRef(f)) => {
                // GAP-AGENT-3: the termination condition sees
                // `{last_message, transcript, state}`.
                let transcript = match self.tasks.get(task).map(|t| &t.stage) {
                    Some(Stage::Debate(st)) => Json::Array(st.transcript.clone()),
                    _ => Json::Array(Vec::new()),
                };
                let mut input = Map::new();
                input.insert("last_message".into(), text);
                input.insert("state".into(), self.task_state(task).clone());
                input.insert("transcript".into(), transcript);
                let mut args = Map::new();
                args.insert("input".into(), Json::Object(input));
                self.call(
                    task,
                    &node.id,
                    &f.identity(),
                    Json::Object(args),
                    Purpose::DebateStop,
                )
            }
            None => self.debate_next(task, node),
        }
    }

    /// The debate is over: `output_field` gets `{transcript, last_message}`
    /// (GAP-AGENT-3).
    fn debate_end(&mut self, task: &str, node: &Node) -> Step {
        let d = self.debate_cfg(node)?;
        let (transcript, last) = match self.tasks.get(task).map(|t| &t.stage) {
            Some(Stage::Debate(st)) => (
                st.transcript.clone(),
                st.transcript
                    .last()
                    .and_then(|t| t.get("text").cloned())
                    .unwrap_or(Json::Null),
            ),
            _ => (Vec::new(), Json::Null),
        };
        if let Some(f) = &d.output_field {
            let f = f.clone();
            let mut out = Map::new();
            out.insert("last_message".into(), last);
            out.insert("transcript".into(), Json::Array(transcript));
            self.write_key(task, &f, Json::Object(out));
        }
        self.route(task);
        Ok(())
    }
}

impl Task {
    /// Can run without outside input.
    fn ready(&self) -> bool {
        matches!(self.stage, Stage::Enter | Stage::Route { .. })
    }

    fn new(node: String, parent: Option<String>, local: Option<Json>) -> Task {
        Task {
            node,
            stage: Stage::Enter,
            k: 0,
            parent,
            local,
            writes: Vec::new(),
            attempts: 0,
            validations: 0,
            passing_join: false,
        }
    }
}

fn unreachable_module() -> &'static Module {
    // A Machine is only made for a module of its program; this keeps the
    // type checker honest without a panic path in release code.
    static EMPTY: std::sync::OnceLock<Module> = std::sync::OnceLock::new();
    EMPTY.get_or_init(|| {
        Module::new(
            String::new(),
            crate::check::check(&Json::Null),
            BTreeMap::new(),
        )
    })
}

/// The route out of `node`: its conditional branches in order (a
/// condition node's own, else its conditional edge's) and the default
/// target (a condition's or conditional edge's `default_target`, else the
/// target of its direct edge). A condition node's direct edges only repeat
/// its targets and are ignored (GAP-GRAPH-1).
fn route_of<'m>(m: &'m Module, node: &str) -> (Vec<(&'m Condition, &'m str)>, Option<&'m str>) {
    let Some((n, edges)) = m.node_and_out_edges(node) else {
        return (Vec::new(), None);
    };
    if let NodeKind::Condition(c) = &n.kind {
        return (
            c.branches
                .iter()
                .map(|b| (&b.condition, b.target.as_str()))
                .collect(),
            Some(c.default_target.as_str()),
        );
    }
    let mut direct = None;
    for e in edges {
        match &e.kind {
            EdgeKind::Conditional {
                branches,
                default_target,
            } => {
                return (
                    branches
                        .iter()
                        .map(|b| (&b.condition, b.to.as_str()))
                        .collect(),
                    Some(default_target.as_str()),
                );
            }
            EdgeKind::Direct { to, .. } => {
                if direct.is_none() {
                    direct = Some(to.as_str());
                }
            }
        }
    }
    (Vec::new(), direct)
}

/// `` `expr`: why ``, naming the expression once even when the error names
/// the (same) failing sub-expression.
fn expr_error(e: &impl std::fmt::Display, err: &impl std::fmt::Display) -> String {
    let whole = format!("`{e}`");
    let why = err.to_string();
    match why.strip_prefix(&format!("{whole}: ")) {
        Some(rest) => format!("{whole}: {rest}"),
        None => format!("{whole}: {why}"),
    }
}

fn failed_msg(node: &str, call: &str, tool: &str, outcome: &Outcome) -> String {
    format!("node {node}: call {call} to {tool} failed: {outcome}")
}

fn validator(node: &Node) -> Option<&OutputValidator> {
    match &node.kind {
        NodeKind::LlmCall(l) => l.output_validator.as_ref(),
        NodeKind::ToolInvoke(t) => t.output_validator.as_ref(),
        _ => None,
    }
}

/// The state key a node's result goes to.
fn output_key_of(kind: &NodeKind) -> Option<&str> {
    match kind {
        NodeKind::LlmCall(l) => l.output_key.as_deref(),
        NodeKind::Hitl(h) => h.output_key.as_deref(),
        NodeKind::MemoryRead(r) => Some(&r.output_key),
        NodeKind::ParallelJoin(j) => j.output_key.as_deref(),
        NodeKind::AgentRole(a) => a.output_field.as_deref(),
        NodeKind::AgentDebate(d) => d.output_field.as_deref(),
        _ => None,
    }
}

fn output_key(node: &Node) -> Option<&str> {
    output_key_of(&node.kind)
}

fn persona(agent: &Agent) -> String {
    let mut s = String::new();
    for (label, v) in [
        ("Name", &agent.name),
        ("Role", &agent.role),
        ("Goal", &agent.goal),
        ("Backstory", &agent.backstory),
    ] {
        if let Some(v) = v {
            if !s.is_empty() {
                s.push('\n');
            }
            s.push_str(label);
            s.push_str(": ");
            s.push_str(v);
        }
    }
    s
}

fn tool_message(tool: &str, result: &Json) -> Json {
    let mut m = Map::new();
    m.insert("speaker".into(), Json::String("tool".into()));
    m.insert("tool".into(), Json::String(tool.to_string()));
    m.insert("result".into(), result.clone());
    Json::Object(m)
}

fn fn_input(state: &Json, value: Option<&Json>) -> Json {
    let mut m = Map::new();
    m.insert("state".into(), state.clone());
    if let Some(v) = value {
        m.insert("value".into(), v.clone());
    }
    Json::Object(m)
}

fn model_params(p: &crate::model::ModelParams) -> Json {
    let mut m = Map::new();
    let num = |n: &serde_json::Number| Json::Number(n.clone());
    if let Some(v) = &p.temperature {
        m.insert("temperature".into(), num(v));
    }
    if let Some(v) = p.max_tokens {
        m.insert("max_tokens".into(), Json::Number(v.into()));
    }
    if let Some(v) = &p.top_p {
        m.insert("top_p".into(), num(v));
    }
    if let Some(v) = &p.frequency_penalty {
        m.insert("frequency_penalty".into(), num(v));
    }
    if let Some(v) = &p.presence_penalty {
        m.insert("presence_penalty".into(), num(v));
    }
    if let Some(v) = &p.stop {
        m.insert(
            "stop".into(),
            Json::Array(v.iter().map(|s| Json::String(s.clone())).collect()),
        );
    }
    Json::Object(m)
}

/// Decodes run input against the input node's `output_schema` (or the
/// `state_schema` when it has none); unknown fields refuse the run.
fn decode_input(m: &Module, input_node: &Node, input: &Json) -> Result<Json, String> {
    let Json::Object(obj) = input else {
        return Err("input is a JSON object keyed by field name".into());
    };
    let ptr = match &input_node.kind {
        NodeKind::Input(i) => i.output_schema.as_ref().map(|s| s.ptr.clone()),
        _ => None,
    }
    .or_else(|| {
        m.report
            .flow
            .state_schema
            .as_ref()
            .map(|s| s.schema.ptr.clone())
    });
    let Some(ty) = ptr.and_then(|p| m.report.schema_types.get(&p)) else {
        // No schema at all: any object (json.Value).
        return Ok(input.clone());
    };
    let fields = crate::program::record_fields(ty, &m.report.types);
    if !fields.is_empty() {
        for k in obj.keys() {
            if !fields.iter().any(|f| &f.name == k) {
                return Err(format!(
                    "$.{k}: unknown input field (expected {})",
                    fields
                        .iter()
                        .map(|f| f.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
        }
    }
    decode_json(input, ty, &m.report.types)
        .map(|v| v.to_json())
        .map_err(|e| e.to_string())
}

/// Writes `value` at `target` through `reducer` (for a whole field; a write
/// below a field replaces that member).
fn apply(state: &mut Json, target: &Target, value: Json, reducer: Reducer) {
    if !state.is_object() {
        *state = Json::Object(Map::new());
    }
    let Json::Object(root) = state else { return };
    if !target.below.is_empty() {
        let mut cur = root.entry(target.field.clone()).or_insert(Json::Null);
        for (i, name) in target.below.iter().enumerate() {
            if !cur.is_object() {
                *cur = Json::Object(Map::new());
            }
            let Json::Object(m) = cur else { return };
            if i + 1 == target.below.len() {
                m.insert(name.clone(), value);
                return;
            }
            cur = m.entry(name.clone()).or_insert(Json::Null);
        }
        return;
    }
    let slot = root.entry(target.field.clone()).or_insert(Json::Null);
    match reducer {
        Reducer::Append => {
            let mut items = match std::mem::take(slot) {
                Json::Array(a) => a,
                Json::Null => Vec::new(),
                other => vec![other],
            };
            match value {
                Json::Array(a) => items.extend(a),
                v => items.push(v),
            }
            *slot = Json::Array(items);
        }
        Reducer::Merge => merge_into(slot, value),
        Reducer::Replace | Reducer::Custom => *slot = value,
    }
}

/// Deep object merge: objects merge member by member, anything else is
/// replaced.
fn merge_into(slot: &mut Json, value: Json) {
    match (slot, value) {
        (Json::Object(a), Json::Object(b)) => {
            for (k, v) in b {
                merge_into(a.entry(k).or_insert(Json::Null), v);
            }
        }
        (slot, v) => *slot = v,
    }
}

fn set_member(state: &mut Json, key: &str, v: Json) {
    if let Json::Object(m) = state {
        m.insert(key.to_string(), v);
    }
}
