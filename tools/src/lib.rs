//! flow-tools: binding a program's Tools to the implementations that answer
//! them, and calling them.
//!
//! Owns flow.toml and host overrides ([`manifest`]), the Tool process
//! protocol client ([`process`]), the MCP adapter, the worker pool
//! ([`dispatch`]) and the `flow-llm` Tool process. Depends only on flow-abi
//! (values, types, protocol messages) and flow-toolkit; it knows nothing of
//! the engine or the store (DESIGN §1).

mod child;
pub mod dispatch;
pub mod lines;
pub mod llm;
pub mod manifest;
pub mod mcp;
pub mod outcome;
pub mod process;

pub use outcome::{CallOutcome, CallRequest, Declarations};
pub use process::{ProcessError, ProcessHandle, ProcessOptions};
