//! The `flow` binary: parses the command line and runs it.

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("FLOW_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .try_init();
    let cli = flowd::cli::Cli::parse();
    ExitCode::from(flowd::cli::main_with(cli))
}
