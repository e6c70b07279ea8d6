//! The model of a node: its base fields and each node type's config.

use super::{ModelParams, Schema};
use crate::expr::Expr;
use crate::path::{Path, Target};
use crate::template::Template;
use serde_json::Number;
use std::collections::BTreeMap;

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

    /// The node's `fail_branch`: an llm_call's, or a subgraph's (a nested
    /// run that faults or is refused is its call's failure).
    pub fn fail_branch(&self) -> Option<&FailBranch> {
        match self {
            NodeKind::LlmCall(l) => l.fail_branch.as_ref(),
            NodeKind::Subgraph(s) => s.fail_branch.as_ref(),
            _ => None,
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
    /// Where a nested run that faults (or is refused) routes, as an
    /// llm_call's failure does.
    pub fail_branch: Option<FailBranch>,
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

#[cfg(test)]
mod tests {
    use super::*;

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
