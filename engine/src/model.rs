//! The FlowSpec model (0.2.0 and 1.0.0) read from a `serde_json::Value`.
//!
//! Every field of `seeds/flowspec-reference.txt` and of buildaharness's own
//! schema (`flowspec-corpus/flowspec.schema.json`) is read: the top-level
//! fields, the 14 base node types with their configs, both edge types, the
//! tools registry, agents, memory_stores, model_defaults, flow_config and
//! harness_meta. Reading is syntax only: wrong types, missing required
//! fields, bad enum values, unknown fields (warnings, REQUIREMENTS
//! GAP-FS-1), and the syntax of paths, expressions and templates, which are
//! compiled here. Cross-references and graph rules live in `check.rs`.
//!
//! When the diagnostics hold an error, some fields hold placeholders (an
//! empty id, a `false` condition, …): such a model is for tooling, never for
//! running. [`crate::check::check`] hands out a model to run only when there
//! are no errors.

use crate::diag::{Code, Diagnostic, push_token};
use crate::expr::{Expr, Lit};
use crate::path::{Path, Target};
use crate::read::{Cx, Obj, kind};
use crate::template::Template;
use serde_json::{Number, Value};
use std::collections::BTreeMap;

/// `spec_version`: "`"0.2.0"` or `"1.0.0"`. Existing v0.2.0 flows validate
/// without changes." Both read the same way (REQUIREMENTS GAP-FS-2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpecVersion {
    V0_2_0,
    V1_0_0,
}

/// A FlowSpec document.
#[derive(Debug, Clone, PartialEq)]
pub struct Flow {
    pub spec_version: SpecVersion,
    /// "Kebab-case flow identifier".
    pub id: String,
    pub name: Option<String>,
    pub description: Option<String>,
    pub runtime_hints: Option<RuntimeHints>,
    pub state_schema: Option<StateSchema>,
    pub agents: Vec<Agent>,
    pub nodes: Vec<Node>,
    pub edges: Vec<Edge>,
    pub tools: BTreeMap<String, ToolDef>,
    pub memory_stores: BTreeMap<String, MemoryStore>,
    pub model_defaults: Option<ModelDefaults>,
    pub flow_config: Option<FlowConfig>,
    pub harness_meta: Option<HarnessMeta>,
}

/// A JSON Schema embedded in the flow, kept as written (flow-abi reads it
/// into a type) with the pointer where it sits.
#[derive(Debug, Clone, PartialEq)]
pub struct Schema {
    pub ptr: String,
    pub json: Value,
    /// The FlowSpec shorthand, a bare map of field name to schema (DESIGN
    /// §2), as `flow_abi::schema::is_shorthand` decides.
    pub shorthand: bool,
}

/// `runtime_hints`: "Non-binding. Adapters ignore unknown fields."
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RuntimeHints {
    pub preferred_adapter: Option<String>,
    pub compatible: Vec<String>,
    pub python_version: Option<String>,
    pub node_version: Option<String>,
    pub langgraph_version: Option<String>,
    pub crewai_version: Option<String>,
    pub mastra_version: Option<String>,
    pub ms_agent_framework_version: Option<String>,
}

/// How writes to a state field combine (reference, "Reducer strategies").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reducer {
    /// "`replace` (default) Last write wins." `last_wins` reads as this
    /// (DESIGN §4: "`last_wins` as `replace`").
    Replace,
    /// "Concatenates arrays."
    Append,
    /// "Deep object merge."
    Merge,
    /// "Requires `reducer_fn_ref`"; a check error until fn_ref reducers exist
    /// (DESIGN §4).
    Custom,
}

/// `state_schema` with the FlowSpec keywords (`reducer`, `reducer_fn_ref`)
/// picked out per property.
#[derive(Debug, Clone, PartialEq)]
pub struct StateSchema {
    pub schema: Schema,
    /// Declared properties, by name.
    pub fields: BTreeMap<String, StateField>,
    pub required: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct StateField {
    pub ptr: String,
    pub reducer: Reducer,
    pub reducer_fn_ref: Option<String>,
}

/// An agent persona.
#[derive(Debug, Clone, PartialEq)]
pub struct Agent {
    pub ptr: String,
    pub id: String,
    pub name: Option<String>,
    pub role: Option<String>,
    pub backstory: Option<String>,
    pub goal: Option<String>,
    pub model: Option<String>,
    /// "Tool IDs from the flow's `tools` registry."
    pub tools: Vec<String>,
    pub memory_config: Option<MemoryConfig>,
    /// "Maximum ReAct iterations (default 10)."
    pub max_iter: u64,
    pub allow_delegation: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct MemoryConfig {
    pub short_term: Option<bool>,
    pub long_term: Option<bool>,
    pub entity: Option<bool>,
    pub user: Option<bool>,
}

/// `model_params`; numbers are kept exact.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ModelParams {
    pub temperature: Option<Number>,
    pub max_tokens: Option<u64>,
    pub top_p: Option<Number>,
    pub frequency_penalty: Option<Number>,
    pub presence_penalty: Option<Number>,
    pub stop: Option<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct ModelDefaults {
    pub model: Option<String>,
    pub embedding_model: Option<String>,
    pub model_params: Option<ModelParams>,
}

/// A `tools` registry entry.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolDef {
    pub ptr: String,
    pub tool_ref: String,
    pub source: Option<ToolSource>,
    pub mcp_server_url: Option<String>,
    pub description: Option<String>,
    pub input_schema: Option<Schema>,
    pub output_schema: Option<Schema>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolSource {
    Npm,
    Local,
    Mcp,
}

/// A `memory_stores` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryStore {
    pub ptr: String,
    pub kind: StoreKind,
    pub description: Option<String>,
    pub backend: Option<String>,
    pub connection_env: Option<String>,
    pub embedding_model: Option<String>,
    pub dimensions: Option<u64>,
    pub scope: Option<String>,
    pub namespace: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    KeyValue,
    Vector,
    Hybrid,
}

/// `flow_config`: adapter deployment settings. flowd's history is always
/// durable whatever `checkpoint` says (REQUIREMENTS GAP-C-16); these are
/// read and validated, and otherwise informational.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FlowConfig {
    pub checkpoint: Option<CheckpointConfig>,
    pub streaming: Option<StreamingConfig>,
    pub telemetry: Option<TelemetryConfig>,
    pub process_type: Option<String>,
    pub manager_agent_ref: Option<String>,
    pub a2a_config: Option<A2aConfig>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct CheckpointConfig {
    pub enabled: Option<bool>,
    pub backend: Option<String>,
    pub connection_env: Option<String>,
    pub namespace: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct StreamingConfig {
    pub enabled: Option<bool>,
    pub mode: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct TelemetryConfig {
    pub enabled: Option<bool>,
    pub provider: Option<String>,
    pub project: Option<String>,
    pub endpoint_env: Option<String>,
    pub trace_all_nodes: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct A2aConfig {
    pub enabled: Option<bool>,
    pub agent_name: Option<String>,
    pub agent_description: Option<String>,
    pub version: Option<String>,
    pub capabilities: Vec<String>,
    pub authentication: Option<String>,
    pub input_schema_ref: Option<String>,
    pub output_schema_ref: Option<String>,
    /// Skill cards, kept as written.
    pub skills: Vec<Value>,
}

/// `harness_meta`. `max_steps` is undocumented but honoured as the run's
/// step limit (DESIGN §4, REQUIREMENTS GAP-C-7).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HarnessMeta {
    pub enabled: bool,
    pub harness_version: Option<String>,
    pub phase: Option<String>,
    pub input_key: Option<String>,
    pub process_concept_id: Option<String>,
    pub max_steps: Option<u64>,
}

/// A node: base fields plus its type's config.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub ptr: String,
    pub id: String,
    pub label: Option<String>,
    pub description: Option<String>,
    /// "canvas layout only, adapters ignore".
    pub position: Option<(Number, Number)>,
    /// Adapter name → `full | partial | missing`.
    pub runtime_support: BTreeMap<String, String>,
    pub kind: NodeKind,
}

/// The 14 base node types, plus the harness and unknown types kept only so
/// the checker can say why they are refused.
#[derive(Debug, Clone, PartialEq)]
pub enum NodeKind {
    Input(Input),
    Output(Output),
    LlmCall(Box<LlmCall>),
    ToolInvoke(ToolInvoke),
    Condition(ConditionNode),
    ParallelFork(ParallelFork),
    ParallelJoin(ParallelJoin),
    Hitl(Hitl),
    MemoryRead(MemoryRead),
    MemoryWrite(MemoryWrite),
    Transform(Transform),
    Subgraph(Subgraph),
    AgentRole(AgentRole),
    AgentDebate(AgentDebate),
    /// One of buildaharness's harness node types (refused, FS0701).
    Harness(String),
    /// A type that is neither (refused, FS0703).
    Unknown(String),
}

/// The harness node types of the reference ("Harness node types (12
/// types)") plus `process_concept` from buildaharness's schema.
pub const HARNESS_TYPES: &[&str] = &[
    "world_model",
    "hypothesis_set",
    "gather_evidence",
    "apply_tool_reliability",
    "update_world_model",
    "control_state",
    "task_graph_node",
    "verification_gate",
    "recovery_node",
    "evidence_store_node",
    "experience_store_node",
    "reviewer_pass",
    "process_concept",
];

impl NodeKind {
    /// The `type` string.
    pub fn type_name(&self) -> &str {
        match self {
            NodeKind::Input(_) => "input",
            NodeKind::Output(_) => "output",
            NodeKind::LlmCall(_) => "llm_call",
            NodeKind::ToolInvoke(_) => "tool_invoke",
            NodeKind::Condition(_) => "condition",
            NodeKind::ParallelFork(_) => "parallel_fork",
            NodeKind::ParallelJoin(_) => "parallel_join",
            NodeKind::Hitl(_) => "hitl_breakpoint",
            NodeKind::MemoryRead(_) => "memory_read",
            NodeKind::MemoryWrite(_) => "memory_write",
            NodeKind::Transform(_) => "transform",
            NodeKind::Subgraph(_) => "subgraph",
            NodeKind::AgentRole(_) => "agent_role",
            NodeKind::AgentDebate(_) => "agent_debate",
            NodeKind::Harness(t) | NodeKind::Unknown(t) => t,
        }
    }
}

/// `input`: "Entry point of the flow."
#[derive(Debug, Clone, PartialEq)]
pub struct Input {
    /// Absent in real files: the input is then typed by `state_schema`
    /// (DESIGN §4).
    pub output_schema: Option<Schema>,
}

/// `output`: "Terminal node."
#[derive(Debug, Clone, PartialEq)]
pub struct Output {
    /// "default `"success"`".
    pub exit_code: String,
    pub input_schema: Option<Schema>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct LlmCall {
    pub model: Option<String>,
    pub system_prompt: Option<Template>,
    pub prompt_template: Option<Template>,
    pub prompt_ref: Option<PromptRef>,
    pub model_params: Option<ModelParams>,
    pub structured_output: Option<Schema>,
    pub output_key: Option<String>,
    pub output_validator: Option<OutputValidator>,
    pub fail_branch: Option<FailBranch>,
}

/// "Langfuse-managed prompt reference".
#[derive(Debug, Clone, PartialEq)]
pub struct PromptRef {
    pub name: String,
    pub version: Option<u64>,
    pub label: Option<String>,
}

/// A `module:function` reference, bound as the declaration
/// `fn/<module>#<function>` (DESIGN §4).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct FnRef {
    pub module: String,
    pub function: String,
}

impl FnRef {
    /// Splits `module:function` at the last `:`.
    pub fn parse(s: &str) -> Option<FnRef> {
        let (m, f) = s.rsplit_once(':')?;
        let ok = |p: &str| !p.is_empty() && !p.chars().any(char::is_whitespace);
        (ok(m) && ok(f)).then(|| FnRef {
            module: m.to_string(),
            function: f.to_string(),
        })
    }

    /// The declaration identity, `fn/<module>#<function>`.
    pub fn identity(&self) -> String {
        format!("fn/{}#{}", self.module, self.function)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnFail {
    Raise,
    Retry,
    Skip,
}

#[derive(Debug, Clone, PartialEq)]
pub struct OutputValidator {
    pub fn_ref: FnRef,
    pub on_fail: OnFail,
    /// 1–5, default 1.
    pub max_retries: u64,
    pub retry_prompt: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backoff {
    Fixed,
    Exponential,
}

/// `fail_branch`: "routes failures to a designated node".
#[derive(Debug, Clone, PartialEq)]
pub struct FailBranch {
    pub target: String,
    pub retry: Option<Retry>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Retry {
    /// 1–10, default 3.
    pub max_attempts: u64,
    pub backoff: Option<Backoff>,
    /// Default 1000.
    pub delay_ms: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ToolInvoke {
    pub tool_id: String,
    /// Tool parameter → state path.
    pub input_map: BTreeMap<String, Path>,
    /// Reply field → state target.
    pub output_map: BTreeMap<String, Target>,
    pub output_validator: Option<OutputValidator>,
}

/// A branch condition.
#[derive(Debug, Clone, PartialEq)]
pub enum Condition {
    /// `{ "type": "expr", "expr": "…" }`, compiled.
    Expr(Expr),
    /// `{ "type": "fn_ref", "fn_ref": "module:function" }`.
    FnRef(FnRef),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Branch {
    pub ptr: String,
    pub condition: Condition,
    pub target: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ConditionNode {
    /// "First matching branch wins."
    pub branches: Vec<Branch>,
    pub default_target: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ParallelFork {
    pub targets: Vec<String>,
    /// Branch (target id) → (branch input key → state path).
    pub input_map: BTreeMap<String, BTreeMap<String, Path>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitFor {
    All,
    Any,
    Count(u64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinReducer {
    Merge,
    Append,
    FnRef,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ParallelJoin {
    pub wait_for: WaitFor,
    pub join_reducer: JoinReducer,
    pub join_fn_ref: Option<FnRef>,
    pub output_key: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnTimeout {
    Raise,
    Skip,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Hitl {
    pub prompt: Option<Template>,
    pub resume_schema: Option<Schema>,
    pub output_key: Option<String>,
    /// `None` = no timeout.
    pub timeout_seconds: Option<u64>,
    pub on_timeout: OnTimeout,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetrievalMode {
    KeyValue,
    Semantic,
}

#[derive(Debug, Clone, PartialEq)]
pub struct MemoryRead {
    pub store_id: String,
    pub retrieval_mode: RetrievalMode,
    pub key_expr: Option<Path>,
    pub query_expr: Option<Path>,
    /// "default 5"; `None` when not written (see [`MemoryRead::top_k`]).
    pub top_k: Option<u64>,
    pub min_score: Option<Number>,
    pub output_key: String,
}

impl MemoryRead {
    /// "Number of results to return (default 5)."
    pub fn top_k(&self) -> u64 {
        self.top_k.unwrap_or(5)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteMode {
    Upsert,
    Overwrite,
}

#[derive(Debug, Clone, PartialEq)]
pub struct MemoryWrite {
    pub store_id: String,
    pub key_expr: Path,
    pub value_expr: Path,
    pub write_mode: WriteMode,
    pub tier: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransformMode {
    Mapping,
    FnRef,
}

/// One `from` → `to` of a transform mapping.
#[derive(Debug, Clone, PartialEq)]
pub struct Assignment {
    /// The entry (`/mapping/0`) or the output_map member (`/output_map/key`).
    pub ptr: String,
    /// Where `from` and `to` are written (equal to `ptr` for output_map).
    pub from_ptr: String,
    pub to_ptr: String,
    pub from: Path,
    pub to: Target,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Transform {
    pub mode: TransformMode,
    /// `mapping: [{from, to}]` entries in order, then `output_map: {to:
    /// from}` entries in key order (DESIGN §4 accepts both forms).
    pub assignments: Vec<Assignment>,
    pub fn_ref: Option<FnRef>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Subgraph {
    /// "ID of the flow to embed": the `id` of a FlowSpec file in the same
    /// directory (DESIGN §4).
    pub flow_ref: String,
    /// Sub-flow input field → parent state path.
    pub input_map: BTreeMap<String, Path>,
    /// Sub-flow output field → parent state target.
    pub output_map: BTreeMap<String, Target>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryAccess {
    Isolated,
    Shared,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolApproval {
    Auto,
    Human,
}

#[derive(Debug, Clone, PartialEq)]
pub struct AgentRole {
    pub agent_ref: String,
    pub task_description: Template,
    pub expected_output: Option<String>,
    pub async_execution: Option<bool>,
    pub output_field: Option<String>,
    pub structured_output: Option<Schema>,
    pub memory_access: MemoryAccess,
    pub memory_store_id: Option<String>,
    pub tool_approval: ToolApproval,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpeakerSelection {
    Auto,
    RoundRobin,
    Custom,
}

#[derive(Debug, Clone, PartialEq)]
pub struct AgentDebate {
    pub agents: Vec<String>,
    /// Default 10.
    pub max_rounds: u64,
    pub termination_condition: Option<Condition>,
    /// Default `auto` when absent (schema.ts has no default; the reference
    /// lists `auto` first).
    pub speaker_selection: Option<SpeakerSelection>,
    pub speaker_selection_fn_ref: Option<FnRef>,
    /// Default true.
    pub allow_repeat_speaker: bool,
    pub output_field: Option<String>,
}

/// An edge.
#[derive(Debug, Clone, PartialEq)]
pub struct Edge {
    pub ptr: String,
    pub id: Option<String>,
    pub from: String,
    pub kind: EdgeKind,
}

#[derive(Debug, Clone, PartialEq)]
pub enum EdgeKind {
    /// "Fixed transition". An edge without `type` is direct (DESIGN §4).
    Direct {
        to: String,
        label: Option<String>,
        context_from: Vec<String>,
    },
    /// "Routes to different nodes based on runtime state."
    Conditional {
        branches: Vec<EdgeBranch>,
        default_target: String,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct EdgeBranch {
    pub ptr: String,
    pub condition: Condition,
    pub to: String,
    pub label: Option<String>,
}

// ------------------------------------------------------------------ reading

/// Reads a FlowSpec document. Returns the model and every problem found
/// while reading (in emission order; [`crate::check::check`] sorts).
pub fn parse(doc: &Value) -> (Flow, Vec<Diagnostic>) {
    let mut cx = Cx::default();
    let flow = read_flow(&mut cx, doc);
    (flow, cx.diags)
}

fn empty_flow() -> Flow {
    Flow {
        spec_version: SpecVersion::V1_0_0,
        id: String::new(),
        name: None,
        description: None,
        runtime_hints: None,
        state_schema: None,
        agents: Vec::new(),
        nodes: Vec::new(),
        edges: Vec::new(),
        tools: BTreeMap::new(),
        memory_stores: BTreeMap::new(),
        model_defaults: None,
        flow_config: None,
        harness_meta: None,
    }
}

fn read_flow(cx: &mut Cx, doc: &Value) -> Flow {
    let mut flow = empty_flow();
    let Some(mut o) = Obj::new(cx, doc, "", "a FlowSpec document") else {
        return flow;
    };
    match o.req_str(cx, "spec_version").as_deref() {
        Some("0.2.0") => flow.spec_version = SpecVersion::V0_2_0,
        Some("1.0.0") | None => {}
        Some(other) => cx.push(
            Code::UnsupportedVersion,
            "/spec_version",
            format!("spec_version `{other}` is not supported; flowd reads \"0.2.0\" and \"1.0.0\""),
        ),
    }
    flow.id = req_id(cx, &mut o, "id");
    flow.name = o.str(cx, "name");
    flow.description = o.str(cx, "description");
    if let Some(v) = o.get("runtime_hints") {
        flow.runtime_hints = read_runtime_hints(cx, v, "/runtime_hints");
    }
    if let Some(v) = o.get("state_schema") {
        flow.state_schema = read_state_schema(cx, v, "/state_schema");
    }
    if let Some(v) = o.get("agents") {
        flow.agents = read_array(cx, v, "/agents", "`agents`", read_agent);
    }
    if let Some(v) = o.req(cx, "nodes") {
        flow.nodes = read_array(cx, v, "/nodes", "`nodes`", read_node);
    }
    if let Some(v) = o.req(cx, "edges") {
        flow.edges = read_array(cx, v, "/edges", "`edges`", read_edge);
    }
    if let Some(v) = o.get("tools") {
        flow.tools = read_named(cx, v, "/tools", "`tools`", read_tool);
    }
    if let Some(v) = o.get("memory_stores") {
        flow.memory_stores = read_named(cx, v, "/memory_stores", "`memory_stores`", read_store);
    }
    if let Some(v) = o.get("model_defaults") {
        flow.model_defaults = read_model_defaults(cx, v, "/model_defaults");
    }
    if let Some(v) = o.get("flow_config") {
        flow.flow_config = read_flow_config(cx, v, "/flow_config");
    }
    if let Some(v) = o.get("harness_meta") {
        flow.harness_meta = read_harness_meta(cx, v, "/harness_meta");
    }
    o.finish(cx);
    flow
}

/// A required id; an explicit empty string is reported here (the checker
/// validates the form of non-empty ids).
fn req_id(cx: &mut Cx, o: &mut Obj<'_>, key: &'static str) -> String {
    let id = o.req_str(cx, key).unwrap_or_default();
    if id.is_empty() && o.has(key) && o.map.get(key).is_some_and(Value::is_string) {
        cx.push(Code::BadId, o.at(key), "an id must not be empty");
    }
    id
}

fn read_array<T>(
    cx: &mut Cx,
    v: &Value,
    ptr: &str,
    what: &str,
    f: impl Fn(&mut Cx, &Value, String) -> Option<T>,
) -> Vec<T> {
    let Value::Array(items) = v else {
        cx.push(
            Code::WrongType,
            ptr,
            format!("{what} must be an array, not {}", kind(v)),
        );
        return Vec::new();
    };
    items
        .iter()
        .enumerate()
        .filter_map(|(i, item)| f(cx, item, push_token(ptr, &i.to_string())))
        .collect()
}

fn read_named<T>(
    cx: &mut Cx,
    v: &Value,
    ptr: &str,
    what: &str,
    f: impl Fn(&mut Cx, &Value, String) -> Option<T>,
) -> BTreeMap<String, T> {
    let Value::Object(m) = v else {
        cx.push(
            Code::WrongType,
            ptr,
            format!("{what} must be an object, not {}", kind(v)),
        );
        return BTreeMap::new();
    };
    m.iter()
        .filter_map(|(k, item)| f(cx, item, push_token(ptr, k)).map(|t| (k.clone(), t)))
        .collect()
}

fn read_runtime_hints(cx: &mut Cx, v: &Value, ptr: &str) -> Option<RuntimeHints> {
    const ADAPTERS: &[&str] = &["langgraph", "crewai", "mastra", "microsoft_agent_framework"];
    let mut o = Obj::new(cx, v, ptr, "`runtime_hints`")?;
    let mut h = RuntimeHints {
        preferred_adapter: o.choice(cx, "preferred_adapter", ADAPTERS, Code::IgnoredValue),
        ..RuntimeHints::default()
    };
    h.compatible = o.str_list(cx, "compatible").unwrap_or_default();
    for (i, a) in h.compatible.iter().enumerate() {
        if !ADAPTERS.contains(&a.as_str()) {
            cx.push(
                Code::IgnoredValue,
                push_token(&o.at("compatible"), &i.to_string()),
                format!("`{a}` is not a known adapter; it is ignored"),
            );
        }
    }
    h.python_version = o.str(cx, "python_version");
    h.node_version = o.str(cx, "node_version");
    h.langgraph_version = o.str(cx, "langgraph_version");
    h.crewai_version = o.str(cx, "crewai_version");
    h.mastra_version = o.str(cx, "mastra_version");
    h.ms_agent_framework_version = o.str(cx, "ms_agent_framework_version");
    o.finish(cx);
    Some(h)
}

/// Wraps an embedded schema; it must be an object.
fn read_schema(cx: &mut Cx, v: &Value, ptr: String, what: &str) -> Option<Schema> {
    let Value::Object(m) = v else {
        cx.push(
            Code::WrongType,
            &ptr,
            format!("{what} must be a JSON Schema object, not {}", kind(v)),
        );
        return None;
    };
    let shorthand = flow_abi::schema::is_shorthand(m);
    Some(Schema {
        ptr,
        json: v.clone(),
        shorthand,
    })
}

fn read_state_schema(cx: &mut Cx, v: &Value, ptr: &str) -> Option<StateSchema> {
    let schema = read_schema(cx, v, ptr.to_string(), "`state_schema`")?;
    let Value::Object(m) = v else { return None };
    if let Some(t) = m.get("type")
        && t != "object"
    {
        cx.push(
            Code::BadValue,
            push_token(ptr, "type"),
            "`state_schema` describes the state object, so its `type` must be \"object\"",
        );
    }
    let mut fields = BTreeMap::new();
    match m.get("properties") {
        None => {}
        Some(Value::Object(props)) => {
            for (name, p) in props {
                let pptr = push_token(&push_token(ptr, "properties"), name);
                let Value::Object(pm) = p else {
                    cx.push(
                        Code::WrongType,
                        &pptr,
                        format!(
                            "state field `{name}` must be a schema object, not {}",
                            kind(p)
                        ),
                    );
                    continue;
                };
                let reducer = match pm.get("reducer") {
                    None => Reducer::Replace,
                    Some(Value::String(s)) => match s.as_str() {
                        "replace" | "last_wins" => Reducer::Replace,
                        "append" => Reducer::Append,
                        "merge" => Reducer::Merge,
                        "custom" => Reducer::Custom,
                        other => {
                            cx.push(
                                Code::BadValue,
                                push_token(&pptr, "reducer"),
                                format!("reducer `{other}` is not one of `replace`, `append`, `merge`, `last_wins`, `custom`"),
                            );
                            Reducer::Replace
                        }
                    },
                    Some(other) => {
                        cx.push(
                            Code::WrongType,
                            push_token(&pptr, "reducer"),
                            format!("`reducer` must be a string, not {}", kind(other)),
                        );
                        Reducer::Replace
                    }
                };
                let reducer_fn_ref = match pm.get("reducer_fn_ref") {
                    None => None,
                    Some(Value::String(s)) => Some(s.clone()),
                    Some(other) => {
                        cx.push(
                            Code::WrongType,
                            push_token(&pptr, "reducer_fn_ref"),
                            format!("`reducer_fn_ref` must be a string, not {}", kind(other)),
                        );
                        None
                    }
                };
                fields.insert(
                    name.clone(),
                    StateField {
                        ptr: pptr,
                        reducer,
                        reducer_fn_ref,
                    },
                );
            }
        }
        Some(other) => cx.push(
            Code::WrongType,
            push_token(ptr, "properties"),
            format!("`properties` must be an object, not {}", kind(other)),
        ),
    }
    let mut required = Vec::new();
    match m.get("required") {
        None => {}
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                match item {
                    Value::String(s) => required.push(s.clone()),
                    other => cx.push(
                        Code::WrongType,
                        push_token(&push_token(ptr, "required"), &i.to_string()),
                        format!("items of `required` must be strings, not {}", kind(other)),
                    ),
                }
            }
        }
        Some(other) => cx.push(
            Code::WrongType,
            push_token(ptr, "required"),
            format!(
                "`required` must be an array of strings, not {}",
                kind(other)
            ),
        ),
    }
    Some(StateSchema {
        schema,
        fields,
        required,
    })
}

fn read_agent(cx: &mut Cx, v: &Value, ptr: String) -> Option<Agent> {
    let mut o = Obj::new(cx, v, &ptr, "an agent")?;
    let id = req_id(cx, &mut o, "id");
    let memory_config = match o.get("memory_config") {
        None => None,
        Some(mv) => {
            let mptr = o.at("memory_config");
            Obj::new(cx, mv, &mptr, "`memory_config`").map(|mut m| {
                let mc = MemoryConfig {
                    short_term: m.bool(cx, "short_term"),
                    long_term: m.bool(cx, "long_term"),
                    entity: m.bool(cx, "entity"),
                    user: m.bool(cx, "user"),
                };
                m.finish(cx);
                mc
            })
        }
    };
    let a = Agent {
        ptr: ptr.clone(),
        id,
        name: o.str(cx, "name"),
        role: o.str(cx, "role"),
        backstory: o.str(cx, "backstory"),
        goal: o.str(cx, "goal"),
        model: o.str(cx, "model"),
        tools: o.str_list(cx, "tools").unwrap_or_default(),
        memory_config,
        max_iter: o.uint(cx, "max_iter", 1, None).unwrap_or(10),
        allow_delegation: o.bool(cx, "allow_delegation"),
    };
    o.finish(cx);
    Some(a)
}

fn read_model_params(cx: &mut Cx, v: &Value, ptr: &str) -> Option<ModelParams> {
    // Bounds from buildaharness's schema (REQUIREMENTS GAP-FS-3).
    let mut o = Obj::new(cx, v, ptr, "`model_params`")?;
    let p = ModelParams {
        temperature: o.number(cx, "temperature", Some("0"), Some("2")),
        max_tokens: o.uint(cx, "max_tokens", 1, None),
        top_p: o.number(cx, "top_p", Some("0"), Some("1")),
        frequency_penalty: o.number(cx, "frequency_penalty", Some("-2"), Some("2")),
        presence_penalty: o.number(cx, "presence_penalty", Some("-2"), Some("2")),
        stop: o.str_list(cx, "stop"),
    };
    o.finish(cx);
    Some(p)
}

fn read_model_defaults(cx: &mut Cx, v: &Value, ptr: &str) -> Option<ModelDefaults> {
    let mut o = Obj::new(cx, v, ptr, "`model_defaults`")?;
    let mut d = ModelDefaults {
        model: o.str(cx, "model"),
        embedding_model: o.str(cx, "embedding_model"),
        model_params: None,
    };
    if let Some(mp) = o.get("model_params") {
        d.model_params = read_model_params(cx, mp, &o.at("model_params"));
    }
    o.finish(cx);
    Some(d)
}

fn read_tool(cx: &mut Cx, v: &Value, ptr: String) -> Option<ToolDef> {
    let mut o = Obj::new(cx, v, &ptr, "a tool")?;
    let source = o
        .choice(cx, "source", &["npm", "local", "mcp"], Code::BadValue)
        .map(|s| match s.as_str() {
            "npm" => ToolSource::Npm,
            "local" => ToolSource::Local,
            _ => ToolSource::Mcp,
        });
    let mut t = ToolDef {
        ptr: ptr.clone(),
        tool_ref: o.req_str(cx, "tool_ref").unwrap_or_default(),
        source,
        mcp_server_url: o.str(cx, "mcp_server_url"),
        description: o.str(cx, "description"),
        input_schema: None,
        output_schema: None,
    };
    if let Some(s) = o.get("input_schema") {
        t.input_schema = read_schema(cx, s, o.at("input_schema"), "`input_schema`");
    }
    if let Some(s) = o.get("output_schema") {
        t.output_schema = read_schema(cx, s, o.at("output_schema"), "`output_schema`");
    }
    o.finish(cx);
    Some(t)
}

fn read_store(cx: &mut Cx, v: &Value, ptr: String) -> Option<MemoryStore> {
    let mut o = Obj::new(cx, v, &ptr, "a memory store")?;
    let kind = match o.req_str(cx, "type").as_deref() {
        Some("key_value") | None => StoreKind::KeyValue,
        Some("vector") => StoreKind::Vector,
        Some("hybrid") => StoreKind::Hybrid,
        Some(other) => {
            cx.push(
                Code::BadValue,
                o.at("type"),
                format!("store type `{other}` is not one of `key_value`, `vector`, `hybrid`"),
            );
            StoreKind::KeyValue
        }
    };
    let s = MemoryStore {
        ptr: ptr.clone(),
        kind,
        description: o.str(cx, "description"),
        backend: o.choice(
            cx,
            "backend",
            &[
                "in_memory",
                "postgres",
                "sqlite",
                "redis",
                "upstash",
                "qdrant",
                "pinecone",
                "azure_ai_search",
            ],
            Code::IgnoredValue,
        ),
        connection_env: o.str(cx, "connection_env"),
        embedding_model: o.str(cx, "embedding_model"),
        dimensions: o.uint(cx, "dimensions", 1, None),
        scope: o.choice(
            cx,
            "scope",
            &["thread", "resource", "global"],
            Code::BadValue,
        ),
        namespace: o.str(cx, "namespace"),
    };
    o.finish(cx);
    Some(s)
}

fn read_flow_config(cx: &mut Cx, v: &Value, ptr: &str) -> Option<FlowConfig> {
    let mut o = Obj::new(cx, v, ptr, "`flow_config`")?;
    let mut c = FlowConfig::default();
    if let Some(cv) = o.get("checkpoint") {
        let cptr = o.at("checkpoint");
        if let Some(mut k) = Obj::new(cx, cv, &cptr, "`checkpoint`") {
            c.checkpoint = Some(CheckpointConfig {
                enabled: k.bool(cx, "enabled"),
                backend: k.choice(
                    cx,
                    "backend",
                    &[
                        "in_memory",
                        "sqlite",
                        "postgres",
                        "redis",
                        "dapr",
                        "orleans",
                    ],
                    Code::IgnoredValue,
                ),
                connection_env: k.str(cx, "connection_env"),
                namespace: k.str(cx, "namespace"),
            });
            k.finish(cx);
        }
    }
    if let Some(sv) = o.get("streaming") {
        let sptr = o.at("streaming");
        if let Some(mut k) = Obj::new(cx, sv, &sptr, "`streaming`") {
            let enabled = k.bool(cx, "enabled");
            let mode = k.choice(
                cx,
                "mode",
                &["updates", "tokens", "debug"],
                Code::IgnoredValue,
            );
            if let Some(m @ ("tokens" | "debug")) = mode.as_deref() {
                // REQUIREMENTS GAP-C-6: only the fact stream is served.
                cx.push(
                    Code::IgnoredValue,
                    k.at("mode"),
                    format!("streaming mode `{m}` is served as `updates`: flowd streams accepted facts, not tokens"),
                );
            }
            c.streaming = Some(StreamingConfig { enabled, mode });
            k.finish(cx);
        }
    }
    if let Some(tv) = o.get("telemetry") {
        let tptr = o.at("telemetry");
        if let Some(mut k) = Obj::new(cx, tv, &tptr, "`telemetry`") {
            c.telemetry = Some(TelemetryConfig {
                enabled: k.bool(cx, "enabled"),
                provider: k.choice(
                    cx,
                    "provider",
                    &["langsmith", "langfuse", "otel", "azure_monitor"],
                    Code::IgnoredValue,
                ),
                project: k.str(cx, "project"),
                endpoint_env: k.str(cx, "endpoint_env"),
                trace_all_nodes: k.bool(cx, "trace_all_nodes"),
            });
            k.finish(cx);
        }
    }
    c.process_type = o.choice(
        cx,
        "process_type",
        &["sequential", "hierarchical", "consensual"],
        Code::IgnoredValue,
    );
    c.manager_agent_ref = o.str(cx, "manager_agent_ref");
    if let Some(av) = o.get("a2a_config") {
        let aptr = o.at("a2a_config");
        if let Some(mut k) = Obj::new(cx, av, &aptr, "`a2a_config`") {
            let mut a = A2aConfig {
                enabled: k.bool(cx, "enabled"),
                agent_name: k.str(cx, "agent_name"),
                agent_description: k.str(cx, "agent_description"),
                version: k.str(cx, "version"),
                capabilities: k.str_list(cx, "capabilities").unwrap_or_default(),
                authentication: k.choice(
                    cx,
                    "authentication",
                    &["api_key", "oauth2", "none"],
                    Code::IgnoredValue,
                ),
                input_schema_ref: k.str(cx, "input_schema_ref"),
                output_schema_ref: k.str(cx, "output_schema_ref"),
                skills: Vec::new(),
            };
            if let Some(sk) = k.get("skills") {
                match sk {
                    Value::Array(items) => a.skills = items.clone(),
                    other => cx.push(
                        Code::WrongType,
                        k.at("skills"),
                        format!("`skills` must be an array, not {}", kind(other)),
                    ),
                }
            }
            c.a2a_config = Some(a);
            k.finish(cx);
        }
    }
    o.finish(cx);
    Some(c)
}

fn read_harness_meta(cx: &mut Cx, v: &Value, ptr: &str) -> Option<HarnessMeta> {
    let mut o = Obj::new(cx, v, ptr, "`harness_meta`")?;
    let h = HarnessMeta {
        enabled: o.bool(cx, "enabled").unwrap_or(false),
        harness_version: o.str(cx, "harness_version"),
        phase: o.str(cx, "phase"),
        input_key: o.str(cx, "input_key"),
        process_concept_id: o.str(cx, "process_concept_id"),
        max_steps: o.uint(cx, "max_steps", 1, None),
    };
    o.finish(cx);
    Some(h)
}

// ------------------------------------------------------------------ nodes

fn read_node(cx: &mut Cx, v: &Value, ptr: String) -> Option<Node> {
    let mut o = Obj::new(cx, v, &ptr, "a node")?;
    let id = req_id(cx, &mut o, "id");
    let ty = o.req_str(cx, "type").unwrap_or_default();
    let label = o.str(cx, "label");
    let description = o.str(cx, "description");
    let position = o.get("position").and_then(|pv| {
        let pptr = o.at("position");
        let mut p = Obj::new(cx, pv, &pptr, "`position`")?;
        let x = p.number(cx, "x", None, None);
        let y = p.number(cx, "y", None, None);
        if !p.has("x") || !p.has("y") {
            cx.push(
                Code::MissingField,
                &pptr,
                "`position` needs both `x` and `y`",
            );
        }
        p.finish(cx);
        Some((x?, y?))
    });
    let mut runtime_support = BTreeMap::new();
    for (k, s, p) in o.str_map(cx, "runtime_support") {
        if !["full", "partial", "missing"].contains(&s.as_str()) {
            cx.push(
                Code::IgnoredValue,
                p,
                format!("`{s}` is not one of `full`, `partial`, `missing`; it is ignored"),
            );
        }
        runtime_support.insert(k, s);
    }
    let kind = match ty.as_str() {
        "input" => NodeKind::Input(Input {
            output_schema: o.get("output_schema").and_then(|s| {
                read_schema(cx, s, push_token(&ptr, "output_schema"), "`output_schema`")
            }),
        }),
        "output" => NodeKind::Output(Output {
            exit_code: o.str(cx, "exit_code").unwrap_or_else(|| "success".into()),
            input_schema: o.get("input_schema").and_then(|s| {
                read_schema(cx, s, push_token(&ptr, "input_schema"), "`input_schema`")
            }),
        }),
        "llm_call" => NodeKind::LlmCall(Box::new(read_llm_call(cx, &mut o))),
        "tool_invoke" => NodeKind::ToolInvoke(ToolInvoke {
            tool_id: o.req_str(cx, "tool_id").unwrap_or_default(),
            input_map: source_map(cx, &mut o, "input_map"),
            output_map: target_map(cx, &mut o, "output_map"),
            output_validator: read_validator(cx, &mut o),
        }),
        "condition" => NodeKind::Condition(read_condition_node(cx, &mut o)),
        "parallel_fork" => NodeKind::ParallelFork(read_fork(cx, &mut o)),
        "parallel_join" => NodeKind::ParallelJoin(read_join(cx, &mut o)),
        "hitl_breakpoint" => NodeKind::Hitl(read_hitl(cx, &mut o)),
        "memory_read" => NodeKind::MemoryRead(read_memory_read(cx, &mut o)),
        "memory_write" => NodeKind::MemoryWrite(MemoryWrite {
            store_id: o.req_str(cx, "store_id").unwrap_or_default(),
            key_expr: req_expr_path(cx, &mut o, "key_expr"),
            value_expr: req_expr_path(cx, &mut o, "value_expr"),
            write_mode: match o
                .choice(cx, "write_mode", &["upsert", "overwrite"], Code::BadValue)
                .as_deref()
            {
                Some("overwrite") => WriteMode::Overwrite,
                _ => WriteMode::Upsert,
            },
            tier: o.choice(
                cx,
                "tier",
                &["short", "long", "entity", "user"],
                Code::IgnoredValue,
            ),
        }),
        "transform" => NodeKind::Transform(read_transform(cx, &mut o)),
        "subgraph" => NodeKind::Subgraph(Subgraph {
            flow_ref: o.req_str(cx, "flow_ref").unwrap_or_default(),
            input_map: source_map(cx, &mut o, "input_map"),
            output_map: target_map(cx, &mut o, "output_map"),
        }),
        "agent_role" => NodeKind::AgentRole(read_agent_role(cx, &mut o)),
        "agent_debate" => NodeKind::AgentDebate(read_agent_debate(cx, &mut o)),
        "" => NodeKind::Unknown(String::new()),
        t if HARNESS_TYPES.contains(&t) => {
            o.ignore(&["harness_config"]);
            NodeKind::Harness(t.to_string())
        }
        t => NodeKind::Unknown(t.to_string()),
    };
    // Unknown fields are only worth reporting on a type we understand.
    if matches!(kind, NodeKind::Harness(_) | NodeKind::Unknown(_)) {
        o.ignore_all();
    }
    o.finish(cx);
    Some(Node {
        ptr,
        id,
        label,
        description,
        position,
        runtime_support,
        kind,
    })
}

fn template_field(cx: &mut Cx, o: &mut Obj<'_>, key: &'static str) -> Option<Template> {
    let src = o.str(cx, key)?;
    Some(compile_template(cx, &src, o.at(key)))
}

fn compile_template(cx: &mut Cx, src: &str, ptr: String) -> Template {
    match Template::parse(src) {
        Ok(t) => t,
        Err(e) => {
            cx.push(Code::BadTemplate, ptr, e.to_string());
            Template { parts: Vec::new() }
        }
    }
}

/// A placeholder path used only when a diagnostic already refuses the flow.
fn placeholder_path() -> Path {
    Path::state(Vec::new())
}

/// A bare-JSONPath `*_expr` field: "*_expr fields use bare JSONPath, not
/// mustache … Do not use {{}} syntax here." (reference, memory_read).
fn expr_path(cx: &mut Cx, src: &str, ptr: String) -> Path {
    if src.contains("{{") {
        cx.push(
            Code::BadPath,
            ptr,
            format!("`{src}` uses `{{{{}}}}`; *_expr fields take a bare JSONPath such as `$.state.question`"),
        );
        return placeholder_path();
    }
    source_path(cx, src, ptr)
}

fn source_path(cx: &mut Cx, src: &str, ptr: String) -> Path {
    match Path::parse_source(src) {
        Ok(p) => p,
        Err(e) => {
            cx.push(Code::BadPath, ptr, format!("bad path `{src}`: {e}"));
            placeholder_path()
        }
    }
}

fn opt_expr_path(cx: &mut Cx, o: &mut Obj<'_>, key: &'static str) -> Option<Path> {
    let src = o.str(cx, key)?;
    Some(expr_path(cx, &src, o.at(key)))
}

fn req_expr_path(cx: &mut Cx, o: &mut Obj<'_>, key: &'static str) -> Path {
    match o.req_str(cx, key) {
        Some(src) => expr_path(cx, &src, o.at(key)),
        None => placeholder_path(),
    }
}

fn source_map(cx: &mut Cx, o: &mut Obj<'_>, key: &'static str) -> BTreeMap<String, Path> {
    o.str_map(cx, key)
        .into_iter()
        .map(|(k, src, ptr)| (k, source_path(cx, &src, ptr)))
        .collect()
}

fn target(cx: &mut Cx, src: &str, ptr: String) -> Target {
    match Target::parse(src) {
        Ok(t) => t,
        Err(e) => {
            cx.push(Code::BadPath, ptr, format!("bad target `{src}`: {e}"));
            Target {
                field: String::new(),
                below: Vec::new(),
            }
        }
    }
}

fn target_map(cx: &mut Cx, o: &mut Obj<'_>, key: &'static str) -> BTreeMap<String, Target> {
    o.str_map(cx, key)
        .into_iter()
        .map(|(k, src, ptr)| (k, target(cx, &src, ptr)))
        .collect()
}

fn fn_ref(cx: &mut Cx, src: &str, ptr: String) -> FnRef {
    FnRef::parse(src).unwrap_or_else(|| {
        cx.push(
            Code::BadFnRef,
            ptr,
            format!("fn_ref `{src}` must be `module:function`; flowd binds it as the declaration `fn/<module>#<function>`"),
        );
        FnRef {
            module: String::new(),
            function: String::new(),
        }
    })
}

fn opt_fn_ref(cx: &mut Cx, o: &mut Obj<'_>, key: &'static str) -> Option<FnRef> {
    let s = o.str(cx, key)?;
    Some(fn_ref(cx, &s, o.at(key)))
}

fn read_validator(cx: &mut Cx, o: &mut Obj<'_>) -> Option<OutputValidator> {
    let v = o.get("output_validator")?;
    let ptr = o.at("output_validator");
    let mut k = Obj::new(cx, v, &ptr, "`output_validator`")?;
    let f = k
        .req_str(cx, "fn_ref")
        .map(|s| fn_ref(cx, &s, k.at("fn_ref")));
    let on_fail = match k
        .choice(cx, "on_fail", &["raise", "retry", "skip"], Code::BadValue)
        .as_deref()
    {
        Some("retry") => OnFail::Retry,
        Some("skip") => OnFail::Skip,
        _ => OnFail::Raise,
    };
    let val = OutputValidator {
        fn_ref: f.unwrap_or(FnRef {
            module: String::new(),
            function: String::new(),
        }),
        on_fail,
        max_retries: k.uint(cx, "max_retries", 1, Some(5)).unwrap_or(1),
        retry_prompt: k.str(cx, "retry_prompt"),
    };
    k.finish(cx);
    Some(val)
}

fn read_llm_call(cx: &mut Cx, o: &mut Obj<'_>) -> LlmCall {
    let prompt_ref = o.get("prompt_ref").and_then(|v| {
        let ptr = o.at("prompt_ref");
        let mut k = Obj::new(cx, v, &ptr, "`prompt_ref`")?;
        let name = k.req_str(cx, "name").unwrap_or_default();
        if name.is_empty() && k.has("name") {
            cx.push(
                Code::OutOfRange,
                k.at("name"),
                "`prompt_ref.name` must not be empty",
            );
        }
        let r = PromptRef {
            name,
            version: k.uint(cx, "version", 1, None),
            label: k.str(cx, "label"),
        };
        k.finish(cx);
        Some(r)
    });
    let model_params = o
        .get("model_params")
        .and_then(|v| read_model_params(cx, v, &o.at("model_params")));
    let structured_output = read_structured_output(cx, o);
    let fail_branch = o.get("fail_branch").and_then(|v| {
        let ptr = o.at("fail_branch");
        let mut k = Obj::new(cx, v, &ptr, "`fail_branch`")?;
        let target = k.req_str(cx, "target").unwrap_or_default();
        let retry = k.get("retry").and_then(|rv| {
            let rptr = k.at("retry");
            let mut r = Obj::new(cx, rv, &rptr, "`retry`")?;
            let backoff = match r
                .choice(cx, "backoff", &["fixed", "exponential"], Code::BadValue)
                .as_deref()
            {
                Some("fixed") => Some(Backoff::Fixed),
                Some(_) => Some(Backoff::Exponential),
                None => None,
            };
            let out = Retry {
                max_attempts: r.uint(cx, "max_attempts", 1, Some(10)).unwrap_or(3),
                backoff,
                delay_ms: r.uint(cx, "delay_ms", 0, None).unwrap_or(1000),
            };
            r.finish(cx);
            Some(out)
        });
        k.finish(cx);
        Some(FailBranch { target, retry })
    });
    LlmCall {
        model: o.str(cx, "model"),
        system_prompt: template_field(cx, o, "system_prompt"),
        prompt_template: template_field(cx, o, "prompt_template"),
        prompt_ref,
        model_params,
        structured_output,
        output_key: o.str(cx, "output_key"),
        output_validator: read_validator(cx, o),
        fail_branch,
    }
}

fn read_structured_output(cx: &mut Cx, o: &mut Obj<'_>) -> Option<Schema> {
    let v = o.get("structured_output")?;
    let ptr = o.at("structured_output");
    let mut k = Obj::new(cx, v, &ptr, "`structured_output`")?;
    let s = k.req(cx, "schema").and_then(|s| {
        read_schema(
            cx,
            s,
            push_token(&ptr, "schema"),
            "`structured_output.schema`",
        )
    });
    k.finish(cx);
    s
}

/// `{type: "expr"|"fn_ref", expr?, fn_ref?}`.
fn read_condition(cx: &mut Cx, v: &Value, ptr: &str) -> Condition {
    let fallback = Condition::Expr(Expr::Lit(Lit::Bool(false)));
    let Some(mut k) = Obj::new(cx, v, ptr, "a condition") else {
        return fallback;
    };
    let ty = k.req_str(cx, "type");
    let expr = k.str(cx, "expr");
    let f = k.str(cx, "fn_ref");
    let out = match ty.as_deref() {
        Some("expr") => {
            if f.is_some() {
                cx.push(
                    Code::IgnoredForMode,
                    k.at("fn_ref"),
                    "`fn_ref` is ignored when the condition type is `expr`",
                );
            }
            match expr {
                None => {
                    cx.push(
                        Code::MissingForMode,
                        ptr,
                        "a condition of type `expr` needs `expr`",
                    );
                    fallback
                }
                Some(src) => match Expr::parse(&src) {
                    Ok(e) => Condition::Expr(e),
                    Err(e) => {
                        cx.push(
                            Code::BadExpression,
                            k.at("expr"),
                            format!("bad expression `{src}`: {e}"),
                        );
                        fallback
                    }
                },
            }
        }
        Some("fn_ref") => {
            if expr.is_some() {
                cx.push(
                    Code::IgnoredForMode,
                    k.at("expr"),
                    "`expr` is ignored when the condition type is `fn_ref`",
                );
            }
            match f {
                None => {
                    cx.push(
                        Code::MissingForMode,
                        ptr,
                        "a condition of type `fn_ref` needs `fn_ref`",
                    );
                    fallback
                }
                Some(s) => Condition::FnRef(fn_ref(cx, &s, k.at("fn_ref"))),
            }
        }
        Some(other) => {
            cx.push(
                Code::BadValue,
                k.at("type"),
                format!("condition type `{other}` is not `expr` or `fn_ref`"),
            );
            fallback
        }
        None => fallback,
    };
    k.finish(cx);
    out
}

fn read_condition_node(cx: &mut Cx, o: &mut Obj<'_>) -> ConditionNode {
    let mut branches = Vec::new();
    if let Some(v) = o.req(cx, "branches") {
        let bptr = o.at("branches");
        match v {
            Value::Array(items) => {
                if items.is_empty() {
                    cx.push(
                        Code::OutOfRange,
                        &bptr,
                        "`branches` needs at least one branch",
                    );
                }
                for (i, item) in items.iter().enumerate() {
                    let ptr = push_token(&bptr, &i.to_string());
                    let Some(mut k) = Obj::new(cx, item, &ptr, "a branch") else {
                        continue;
                    };
                    let condition = match k.req(cx, "condition") {
                        Some(c) => read_condition(cx, c, &k.at("condition")),
                        None => Condition::Expr(Expr::Lit(Lit::Bool(false))),
                    };
                    let target = k.req_str(cx, "target").unwrap_or_default();
                    k.finish(cx);
                    branches.push(Branch {
                        ptr,
                        condition,
                        target,
                    });
                }
            }
            other => cx.push(
                Code::WrongType,
                bptr,
                format!("`branches` must be an array, not {}", kind(other)),
            ),
        }
    }
    ConditionNode {
        branches,
        default_target: o.req_str(cx, "default_target").unwrap_or_default(),
    }
}

fn read_fork(cx: &mut Cx, o: &mut Obj<'_>) -> ParallelFork {
    let targets = if o.has("targets") {
        o.str_list(cx, "targets").unwrap_or_default()
    } else {
        o.req(cx, "targets");
        Vec::new()
    };
    let mut input_map = BTreeMap::new();
    if let Some(v) = o.get("input_map") {
        let iptr = o.at("input_map");
        match v {
            Value::Object(m) => {
                for (branch, inner) in m {
                    let bptr = push_token(&iptr, branch);
                    let Value::Object(im) = inner else {
                        cx.push(
                            Code::WrongType,
                            &bptr,
                            format!(
                                "`input_map.{branch}` must be an object of paths, not {}",
                                kind(inner)
                            ),
                        );
                        continue;
                    };
                    let mut paths = BTreeMap::new();
                    for (key, src) in im {
                        let kptr = push_token(&bptr, key);
                        match src {
                            Value::String(s) => {
                                paths.insert(key.clone(), source_path(cx, s, kptr));
                            }
                            other => cx.push(
                                Code::WrongType,
                                kptr,
                                format!(
                                    "input_map values must be path strings, not {}",
                                    kind(other)
                                ),
                            ),
                        }
                    }
                    input_map.insert(branch.clone(), paths);
                }
            }
            other => cx.push(
                Code::WrongType,
                iptr,
                format!("`input_map` must be an object, not {}", kind(other)),
            ),
        }
    }
    ParallelFork { targets, input_map }
}

fn read_join(cx: &mut Cx, o: &mut Obj<'_>) -> ParallelJoin {
    let wait_for = match o.get("wait_for") {
        None => WaitFor::All,
        Some(Value::String(s)) if s == "all" => WaitFor::All,
        Some(Value::String(s)) if s == "any" => WaitFor::Any,
        Some(v @ Value::Number(_)) => match crate::read::int_value(v) {
            Some(n) if n >= 1 => WaitFor::Count(n),
            _ => {
                cx.push(
                    Code::OutOfRange,
                    o.at("wait_for"),
                    "`wait_for` as a number must be a whole number of at least 1",
                );
                WaitFor::All
            }
        },
        Some(other) => {
            cx.push(
                Code::BadValue,
                o.at("wait_for"),
                format!(
                    "`wait_for` must be \"all\", \"any\" or a whole number, not {}",
                    match other {
                        Value::String(s) => format!("`{s}`"),
                        v => kind(v).to_string(),
                    }
                ),
            );
            WaitFor::All
        }
    };
    let join_reducer = match o
        .choice(
            cx,
            "join_reducer",
            &["merge", "append", "fn_ref"],
            Code::BadValue,
        )
        .as_deref()
    {
        Some("append") => JoinReducer::Append,
        Some("fn_ref") => JoinReducer::FnRef,
        _ => JoinReducer::Merge,
    };
    ParallelJoin {
        wait_for,
        join_reducer,
        join_fn_ref: opt_fn_ref(cx, o, "join_fn_ref"),
        output_key: o.str(cx, "output_key"),
    }
}

fn read_hitl(cx: &mut Cx, o: &mut Obj<'_>) -> Hitl {
    let timeout_seconds = match o.get("timeout_seconds") {
        None | Some(Value::Null) => None,
        Some(v) => match crate::read::int_value(v) {
            Some(n) => Some(n),
            None if v.is_number() => {
                cx.push(
                    Code::OutOfRange,
                    o.at("timeout_seconds"),
                    "`timeout_seconds` must be a whole number of seconds, at least 0",
                );
                None
            }
            None => {
                cx.push(
                    Code::WrongType,
                    o.at("timeout_seconds"),
                    format!(
                        "`timeout_seconds` must be a whole number or null, not {}",
                        kind(v)
                    ),
                );
                None
            }
        },
    };
    Hitl {
        prompt: template_field(cx, o, "prompt"),
        resume_schema: o
            .get("resume_schema")
            .and_then(|s| read_schema(cx, s, o.at("resume_schema"), "`resume_schema`")),
        output_key: o.str(cx, "output_key"),
        timeout_seconds,
        on_timeout: match o
            .choice(cx, "on_timeout", &["raise", "skip"], Code::BadValue)
            .as_deref()
        {
            Some("skip") => OnTimeout::Skip,
            _ => OnTimeout::Raise,
        },
    }
}

fn read_memory_read(cx: &mut Cx, o: &mut Obj<'_>) -> MemoryRead {
    MemoryRead {
        store_id: o.req_str(cx, "store_id").unwrap_or_default(),
        retrieval_mode: match o
            .choice(
                cx,
                "retrieval_mode",
                &["key_value", "semantic"],
                Code::BadValue,
            )
            .as_deref()
        {
            Some("semantic") => RetrievalMode::Semantic,
            _ => RetrievalMode::KeyValue,
        },
        key_expr: opt_expr_path(cx, o, "key_expr"),
        query_expr: opt_expr_path(cx, o, "query_expr"),
        top_k: o.uint(cx, "top_k", 1, None),
        min_score: o.number(cx, "min_score", Some("0"), Some("1")),
        output_key: o.req_str(cx, "output_key").unwrap_or_default(),
    }
}

fn read_transform(cx: &mut Cx, o: &mut Obj<'_>) -> Transform {
    let mode = match o.req_str(cx, "mode").as_deref() {
        Some("fn_ref") => TransformMode::FnRef,
        Some("mapping") | None => TransformMode::Mapping,
        Some(other) => {
            cx.push(
                Code::BadValue,
                o.at("mode"),
                format!("transform mode `{other}` is not `mapping` or `fn_ref`"),
            );
            TransformMode::Mapping
        }
    };
    let mut assignments = Vec::new();
    if let Some(v) = o.get("mapping") {
        let mptr = o.at("mapping");
        match v {
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    let ptr = push_token(&mptr, &i.to_string());
                    let Some(mut k) = Obj::new(cx, item, &ptr, "a mapping entry") else {
                        continue;
                    };
                    let from = k
                        .req_str(cx, "from")
                        .map(|s| source_path(cx, &s, k.at("from")));
                    let to = k.req_str(cx, "to").map(|s| target(cx, &s, k.at("to")));
                    k.finish(cx);
                    if let (Some(from), Some(to)) = (from, to) {
                        let (from_ptr, to_ptr) = (push_token(&ptr, "from"), push_token(&ptr, "to"));
                        assignments.push(Assignment {
                            ptr,
                            from_ptr,
                            to_ptr,
                            from,
                            to,
                        });
                    }
                }
            }
            other => cx.push(
                Code::WrongType,
                mptr,
                format!("`mapping` must be an array, not {}", kind(other)),
            ),
        }
    }
    for (to, from, ptr) in o.str_map(cx, "output_map") {
        let to_ptr = ptr.clone();
        let from = source_path(cx, &from, ptr.clone());
        let to = target(cx, &to, to_ptr);
        assignments.push(Assignment {
            from_ptr: ptr.clone(),
            to_ptr: ptr.clone(),
            ptr,
            from,
            to,
        });
    }
    Transform {
        mode,
        assignments,
        fn_ref: opt_fn_ref(cx, o, "fn_ref"),
    }
}

fn read_agent_role(cx: &mut Cx, o: &mut Obj<'_>) -> AgentRole {
    let empty = AgentRole {
        agent_ref: String::new(),
        task_description: Template { parts: Vec::new() },
        expected_output: None,
        async_execution: None,
        output_field: None,
        structured_output: None,
        memory_access: MemoryAccess::Isolated,
        memory_store_id: None,
        tool_approval: ToolApproval::Auto,
    };
    let Some(v) = o.req(cx, "config") else {
        return empty;
    };
    let ptr = o.at("config");
    let Some(mut k) = Obj::new(cx, v, &ptr, "`config`") else {
        return empty;
    };
    let task = k.req_str(cx, "task_description");
    let r = AgentRole {
        agent_ref: k.req_str(cx, "agent_ref").unwrap_or_default(),
        task_description: task
            .map(|s| compile_template(cx, &s, k.at("task_description")))
            .unwrap_or(Template { parts: Vec::new() }),
        expected_output: k.str(cx, "expected_output"),
        async_execution: k.bool(cx, "async_execution"),
        output_field: k.str(cx, "output_field"),
        structured_output: read_structured_output(cx, &mut k),
        memory_access: match k
            .choice(cx, "memory_access", &["isolated", "shared"], Code::BadValue)
            .as_deref()
        {
            Some("shared") => MemoryAccess::Shared,
            _ => MemoryAccess::Isolated,
        },
        memory_store_id: k.str(cx, "memory_store_id"),
        tool_approval: match k
            .choice(cx, "tool_approval", &["auto", "human"], Code::BadValue)
            .as_deref()
        {
            Some("human") => ToolApproval::Human,
            _ => ToolApproval::Auto,
        },
    };
    k.finish(cx);
    r
}

fn read_agent_debate(cx: &mut Cx, o: &mut Obj<'_>) -> AgentDebate {
    let empty = AgentDebate {
        agents: Vec::new(),
        max_rounds: 10,
        termination_condition: None,
        speaker_selection: None,
        speaker_selection_fn_ref: None,
        allow_repeat_speaker: true,
        output_field: None,
    };
    let Some(v) = o.req(cx, "config") else {
        return empty;
    };
    let ptr = o.at("config");
    let Some(mut k) = Obj::new(cx, v, &ptr, "`config`") else {
        return empty;
    };
    let agents = if k.has("agents") {
        k.str_list(cx, "agents").unwrap_or_default()
    } else {
        k.req(cx, "agents");
        Vec::new()
    };
    let d = AgentDebate {
        agents,
        max_rounds: k.uint(cx, "max_rounds", 1, None).unwrap_or(10),
        termination_condition: k
            .get("termination_condition")
            .map(|c| read_condition(cx, c, &k.at("termination_condition"))),
        speaker_selection: k
            .choice(
                cx,
                "speaker_selection",
                &["auto", "round_robin", "custom"],
                Code::BadValue,
            )
            .map(|s| match s.as_str() {
                "round_robin" => SpeakerSelection::RoundRobin,
                "custom" => SpeakerSelection::Custom,
                _ => SpeakerSelection::Auto,
            }),
        speaker_selection_fn_ref: opt_fn_ref(cx, &mut k, "speaker_selection_fn_ref"),
        allow_repeat_speaker: k.bool(cx, "allow_repeat_speaker").unwrap_or(true),
        output_field: k.str(cx, "output_field"),
    };
    k.finish(cx);
    d
}

// ------------------------------------------------------------------ edges

fn read_edge(cx: &mut Cx, v: &Value, ptr: String) -> Option<Edge> {
    let mut o = Obj::new(cx, v, &ptr, "an edge")?;
    let ty = o.str(cx, "type");
    let id = o.str(cx, "id");
    let from = o.req_str(cx, "from").unwrap_or_default();
    let kind = match ty.as_deref() {
        // DESIGN §4: "edges without `type` (direct)".
        None | Some("direct") => EdgeKind::Direct {
            to: o.req_str(cx, "to").unwrap_or_default(),
            label: o.str(cx, "label"),
            context_from: o.str_list(cx, "context_from").unwrap_or_default(),
        },
        Some("conditional") => {
            let mut branches = Vec::new();
            if let Some(bv) = o.req(cx, "branches") {
                let bptr = o.at("branches");
                match bv {
                    Value::Array(items) => {
                        for (i, item) in items.iter().enumerate() {
                            let iptr = push_token(&bptr, &i.to_string());
                            let Some(mut k) = Obj::new(cx, item, &iptr, "a branch") else {
                                continue;
                            };
                            let condition = match k.req(cx, "condition") {
                                Some(c) => read_condition(cx, c, &k.at("condition")),
                                None => Condition::Expr(Expr::Lit(Lit::Bool(false))),
                            };
                            let to = k.req_str(cx, "to").unwrap_or_default();
                            let label = k.str(cx, "label");
                            k.finish(cx);
                            branches.push(EdgeBranch {
                                ptr: iptr,
                                condition,
                                to,
                                label,
                            });
                        }
                    }
                    other => cx.push(
                        Code::WrongType,
                        bptr,
                        format!("`branches` must be an array, not {}", kind(other)),
                    ),
                }
            }
            EdgeKind::Conditional {
                branches,
                default_target: o.req_str(cx, "default_target").unwrap_or_default(),
            }
        }
        Some(other) => {
            cx.push(
                Code::BadValue,
                o.at("type"),
                format!("edge type `{other}` is not `direct` or `conditional`"),
            );
            o.ignore_all();
            o.finish(cx);
            return None;
        }
    };
    o.finish(cx);
    Some(Edge {
        ptr,
        id,
        from,
        kind,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_the_minimal_flow() {
        // FS-MIN-1: the reference's "Minimal valid flow".
        let doc = json!({
          "spec_version": "1.0.0", "id": "hello-world",
          "nodes": [
            { "id": "start", "type": "input", "output_schema": { "name": { "type": "string" } } },
            { "id": "greet", "type": "llm_call", "prompt_template": "Greet {{state.name}} warmly in one sentence.", "output_key": "greeting" },
            { "id": "done", "type": "output" }
          ],
          "edges": [
            { "type": "direct", "from": "start", "to": "greet" },
            { "type": "direct", "from": "greet", "to": "done" }
          ]
        });
        let (flow, diags) = parse(&doc);
        assert!(diags.is_empty(), "{diags:?}");
        assert_eq!(flow.nodes.len(), 3);
        let NodeKind::Input(i) = &flow.nodes[0].kind else {
            panic!()
        };
        assert!(i.output_schema.as_ref().unwrap().shorthand);
        let NodeKind::Output(o) = &flow.nodes[2].kind else {
            panic!()
        };
        assert_eq!(o.exit_code, "success");
    }

    #[test]
    fn not_an_object() {
        let (_, d) = parse(&json!([1]));
        assert_eq!(d[0].code, Code::WrongType);
        assert_eq!(d[0].pointer, "");
    }

    #[test]
    fn fn_refs() {
        assert_eq!(
            FnRef::parse("rag_utils:format_chunks").unwrap().identity(),
            "fn/rag_utils#format_chunks"
        );
        assert!(FnRef::parse("nocolon").is_none());
        assert!(FnRef::parse(":f").is_none());
    }
}
