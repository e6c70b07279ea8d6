//! flow-engine: FlowSpec programs as a pure state machine (DESIGN §3–§4).
//!
//! Owns the FlowSpec model, the checker and its diagnostics, the interpreter
//! and replay verdicts. It does no IO, reads no clock, spawns nothing and
//! depends only on flow-abi: the host feeds it events and carries out the
//! effects it returns. Nothing observable depends on hash-map iteration
//! order: maps are `BTreeMap`s and lists keep document order.
//!
//! - [`model`]: the FlowSpec document read from a `serde_json::Value`.
//! - [`check`]: every rule of the checker; [`check::check`] is the entry.
//! - [`diag`]: diagnostics with stable codes and JSON Pointers.
//! - [`expr`], [`template`], [`path`]: the condition language, prompt
//!   templates and singular JSONPath, compiled at check time.

pub mod check;
pub mod diag;
pub mod expr;
pub mod machine;
pub mod model;
pub mod path;
pub mod program;
mod read;
pub mod replay;
pub mod template;

pub use check::{Report, check};
pub use diag::{Code, Diagnostic, Severity};
pub use model::Flow;
