//! The `flow` binary: parses the command line and runs it.
//!
//! Logs go to stderr, filtered by `FLOW_LOG` (default `warn`; e.g.
//! `FLOW_LOG=info` for `flow serve`), as text, or as one JSON object per line
//! with `FLOW_LOG_FORMAT=json` (for log shippers). Fields are dotted
//! (`run.id`, `call.id`, `tool.process`), never payloads.

use clap::Parser;
use std::process::ExitCode;

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let filter = tracing_subscriber::EnvFilter::try_from_env("FLOW_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter);
    let _ = if std::env::var("FLOW_LOG_FORMAT").is_ok_and(|f| f == "json") {
        builder.json().try_init()
    } else {
        builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .try_init()
    };
    let cli = flowd::cli::Cli::parse();
    ExitCode::from(flowd::cli::main_with(cli))
}
