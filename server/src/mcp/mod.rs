//! The MCP server (running-a-program.txt, "The CLI and MCP surface"): the
//! tools check, run, resume, replay, history and runs, "with the same
//! meaning" as the CLI, over stdio (`flow mcp`) and at `/mcp` on
//! `flow serve` (MCP streamable HTTP), built on rmcp's server side.
//!
//! - [`args`]: the tools' arguments;
//! - [`tools`]: the tools themselves and the accepted-Start notification;
//! - [`service`]: the one contact with the run service (the CLI's and the
//!   HTTP server's) and the store;
//! - [`stdio`] and [`http`]: the two transports;
//! - [`sessions`]: `/mcp`'s sessions capped and expired when unused.

pub mod args;
pub mod http;
pub mod service;
pub mod sessions;
pub mod stdio;
pub mod tools;
