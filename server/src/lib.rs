//! flowd: the run service (engine + store + tools), the `flow` CLI, the
//! HTTP server and the MCP server on the same service.
//!
//! The run service ([`service::RunService`]) is the one code path that
//! starts, resumes, forks, halts and recovers runs, turning the engine's
//! effects into durable facts and dispatched calls; the CLI and the servers
//! only choose what to ask of it and how to show the answer. `flow worker`
//! ([`worker`]) serves a flow.toml's Tools to servers on other hosts; it,
//! `flow --server URL …` and the benches speak to a server through one
//! typed HTTP client ([`client`]). Archives travel as tar streams
//! ([`tarball`]); signed ones and their import are [`signing`]'s.

pub mod cli;
pub mod client;
pub mod error;
pub mod host;
pub mod http;
pub mod mcp;
pub mod service;
pub mod signing;
pub mod source;
pub mod tarball;
pub mod testing;
pub mod worker;
