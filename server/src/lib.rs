//! flowd: the run driver (engine + store + tools), the `flow` CLI, the
//! HTTP server and the MCP server on the same driver.
//!
//! The driver is the one code path that turns the engine's effects into
//! durable facts and dispatched calls; the CLI and the server only choose
//! what to drive and how to show it.

pub mod cli;
pub mod driver;
pub mod error;
pub mod host;
pub mod http;
pub mod mcp;
pub mod source;
pub mod testing;
