//! The FlowSpec model (0.2.0 and 1.0.0) read from a `serde_json::Value`.
//!
//! Every field of `seeds/flowspec-reference.txt` and of buildaharness's own
//! schema (`flowspec-corpus/flowspec.schema.json`) is read: the top-level
//! fields, the 14 base node types with their configs, both edge types, the
//! tools registry, agents, memory_stores, model_defaults, flow_config and
//! harness_meta. Reading is syntax only: wrong types, missing required
//! fields, bad enum values, unknown fields (warnings, REQUIREMENTS
//! GAP-FS-1), and the syntax of paths, expressions and templates, which are
//! compiled here. Cross-references and graph rules live in [`crate::check`].
//!
//! When the diagnostics hold an error, some fields hold placeholders (an
//! empty id, a `false` condition, …): such a model is for tooling, never for
//! running. [`crate::check::check`] hands out a model to run only when there
//! are no errors.
//!
//! Layout: `flow`, `node` and `edge` hold the model's types; `read_flow`,
//! `read_node`, `read_harness` (harness configs) and `read_edge` read
//! them, and `compile` compiles the
//! templates, paths and references written inside string fields.

mod compile;
mod edge;
mod flow;
mod node;
mod read_edge;
mod read_flow;
mod read_harness;
mod read_node;

pub use edge::*;
pub use flow::*;
pub use node::*;
pub use read_flow::parse;
