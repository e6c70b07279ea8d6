//! The model of a FlowSpec document's top level: the flow, its schemas,
//! state, agents, tools, memory stores and configuration.

use super::{Edge, Node};
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
    /// Whether the document has a `tools` member at all (even `{}`):
    /// buildaharness checks tool references only then (its
    /// `validateCrossRefs`), so a flow without one binds each tool it names
    /// by `<module>#<tool_id>` (docs/engine.md, "buildaharness parity").
    pub declares_tools: bool,
    /// The same for `memory_stores`.
    pub declares_memory_stores: bool,
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
    /// flowd's: JSON pointers into the run's input (`/input/…`) or state
    /// (`/state/FIELD…`) whose values the store keeps as blobs whatever
    /// their size, so that they can be redacted later (docs/custody.md
    /// "Sensitive values"). The store reads them from the recorded source.
    pub sensitive: Vec<String>,
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
