//! flow-tools: binding a program's Tools to the implementations that answer
//! them, and calling them.
//!
//! Owns flow.toml and host overrides ([`manifest`]), the Tool process
//! protocol client ([`process`]), the MCP adapter and the worker pool
//! ([`dispatch`]). Among flowd's crates it depends only on flow-abi (values,
//! types, protocol messages); it knows nothing of the engine or the store
//! (DESIGN §1). The `flow-llm` Tool process is a crate of its own.

mod child;
pub mod dispatch;
pub mod lines;
pub mod manifest;
pub mod mcp;
pub mod outcome;
pub mod process;
pub mod stderr;

pub use outcome::{CallOutcome, CallRequest, Declarations};
pub use process::{ProcessError, ProcessHandle, ProcessOptions};
