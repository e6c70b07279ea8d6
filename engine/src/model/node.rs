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
    /// One of buildaharness's harness node types, run as a Call (valid
    /// only with `harness_meta.enabled: true`, FS0701 otherwise).
    Harness(Harness),
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
            NodeKind::Harness(h) => &h.node_type,
            NodeKind::Unknown(t) => t,
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

/// A harness node (FS-HN): its behaviour belongs to a harness, so it is
/// one Call to `std/harness#<type>` with `{harness_config, node, state}`,
/// or, for `gather_evidence` with a `source_tool`, a Call of that tool
/// whose reply is recorded as evidence (docs/engine.md, "Harness nodes").
#[derive(Debug, Clone, PartialEq)]
pub struct Harness {
    /// The node `type`, one of [`HARNESS_TYPES`].
    pub node_type: String,
    /// `harness_config` as written (`{}` when absent): what the harness is
    /// sent. Its fields were checked as buildaharness's schema checks them.
    pub config: serde_json::Value,
    /// `gather_evidence`'s source, when its config names one.
    pub evidence: Option<EvidenceSource>,
}

/// The state field a `gather_evidence` node appends its evidence entries to.
pub const EVIDENCE_KEY: &str = "evidence";

/// Where a `gather_evidence` node collects from.
#[derive(Debug, Clone, PartialEq)]
pub struct EvidenceSource {
    /// A tool of the flow's registry (or, in a flow without one, bound by
    /// `<module>#<source_tool>`).
    pub source_tool: String,
    /// `OBSERVATION`, `INFERENCE` or `SYSTEM_ERROR`.
    pub evidence_type: String,
    /// `HIGH`, `MEDIUM` or `LOW`; `None` when absent or null.
    pub reliability_override: Option<String>,
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

/// A function reference, bound as the declaration
/// `fn/<module>#<function>` (DESIGN §4). Three spellings are read
/// (buildaharness's `NpmOrLocalRef`: "npm package ref '@scope/pkg/fn' or
/// local path './path/to/fn.ts'", and the reference's `module:function`):
///
/// | written | module | function |
/// |---|---|---|
/// | `rag_utils:format_chunks` | `rag_utils` | `format_chunks` |
/// | `@acme/checks/quality` | `@acme/checks` | `quality` |
/// | `./validators/quality.ts` | `validators/quality.ts` | `default` |
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct FnRef {
    pub module: String,
    pub function: String,
}

impl FnRef {
    /// Reads one of the three spellings; `None` for anything else (an npm
    /// ref needs a scope, a package and a function; a path starts with
    /// `./` and never climbs out with `..`).
    pub fn parse(s: &str) -> Option<FnRef> {
        let word = |p: &str| !p.is_empty() && !p.chars().any(|c| c.is_whitespace() || c == '#');
        let make = |m: &str, f: &str| FnRef {
            module: m.to_string(),
            function: f.to_string(),
        };
        if let Some((m, f)) = s.rsplit_once(':') {
            return (word(m) && word(f)).then(|| make(m, f));
        }
        if s.starts_with('@') {
            let (m, f) = s.rsplit_once('/')?;
            let segments_ok =
                m.split('/').count() >= 2 && s.split('/').all(|seg| word(seg) && seg != "@");
            return segments_ok.then(|| make(m, f));
        }
        let path = s.strip_prefix("./")?;
        let segments_ok = path
            .split('/')
            .all(|seg| word(seg) && seg != "." && seg != "..");
        segments_ok.then(|| make(path, "default"))
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
        let id = |s: &str| FnRef::parse(s).map(|f| f.identity());
        assert_eq!(
            id("rag_utils:format_chunks").as_deref(),
            Some("fn/rag_utils#format_chunks")
        );
        assert_eq!(id("@scope/pkg/fn").as_deref(), Some("fn/@scope/pkg#fn"));
        assert_eq!(
            id("@acme/tools/checks/quality").as_deref(),
            Some("fn/@acme/tools/checks#quality")
        );
        assert_eq!(
            id("./validators/quality.ts").as_deref(),
            Some("fn/validators/quality.ts#default")
        );
        assert_eq!(id("./v.ts").as_deref(), Some("fn/v.ts#default"));
        for bad in [
            "nocolon",
            ":f",
            "m:",
            "@scope/fn",
            "@/pkg/fn",
            "@scope//fn",
            "./",
            "./../up.ts",
            "./a/./b.ts",
            "validators/quality.ts",
            "../up.ts",
            "a b:c",
            "m:f#g",
        ] {
            assert!(FnRef::parse(bad).is_none(), "{bad}");
        }
    }
}
