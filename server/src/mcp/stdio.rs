//! `flow mcp`: the MCP server over standard input and output, on the
//! CLI's store (`--data`). Its configuration is its approval: `--allow`
//! lets it start the commands a program's flow.toml names, `--tools` binds
//! declarations from flow.toml files it was given (as `flow serve --tools`
//! does); it never asks (running-a-program.txt, "Running a repository's
//! implementations"). Standard output carries protocol messages only; logs
//! go to standard error.

use super::service::Service;
use super::tools::FlowMcp;
use crate::error::{Error, Result};
use crate::service::store::StoreRef;
use clap::Args;
use flow_tools::manifest::Manifest;
use rmcp::ServiceExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[derive(Args, Debug, Clone)]
pub struct McpArgs {
    /// Start the Tool commands a program's flow.toml names (flow mcp never
    /// asks; without this such a run is refused).
    #[arg(long)]
    pub allow: bool,
    /// flow.toml files whose bindings serve any program's Tools
    /// (repeatable; the first that binds a declaration wins).
    #[arg(long = "tools")]
    pub tools: Vec<PathBuf>,
}

/// How long exiting waits for cancelled runs to record their halt.
const DRAIN: Duration = Duration::from_secs(10);

/// Serves MCP on stdio until the client closes it, or until Ctrl-C or
/// SIGTERM: then every run still driven is halted (a host record, no End),
/// as an interrupt halts `flow run`.
pub async fn serve(store: StoreRef, args: McpArgs) -> Result<u8> {
    let mut manifests = Vec::new();
    for p in &args.tools {
        manifests.push(Manifest::read(p).map_err(|e| Error::Refused(e.to_string()))?);
    }
    let service = Arc::new(Service::local(store, args.allow, manifests));
    let running = FlowMcp::new(service.clone())
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| Error::Refused(format!("mcp: the client did not connect: {e}")))?;
    let stop = running.cancellation_token();
    let signals = tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("mcp: stopping on a signal");
        stop.cancel();
    });
    let reason = running.waiting().await;
    signals.abort();
    tracing::info!(?reason, "mcp: the session ended");
    service.drain(DRAIN).await;
    Ok(0)
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}
