//! `/mcp` on `flow serve`: the same tools over MCP streamable HTTP, on the
//! server's own run service (its runs are the server's like any other). Mounted behind the server's
//! bearer auth; each tool checks the token's scope (read for check,
//! history, runs and replay; run for run and resume).
//!
//! rmcp accepts only loopback `Host` headers by default (DNS rebinding
//! protection for an unauthenticated local server, ECOSYSTEM §7). With
//! `--tokens` every request is authenticated, so any host is accepted.

use super::service::Service;
use super::tools::FlowMcp;
use crate::http::AppState;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use std::sync::Arc;

/// The `/mcp` service: sessions end with the server's shutdown token, so
/// an open MCP stream never holds up shutdown.
pub fn service(state: &AppState) -> StreamableHttpService<FlowMcp, LocalSessionManager> {
    let mut config = StreamableHttpServerConfig::default()
        .with_cancellation_token(state.shutdown().child_token())
        .with_max_request_body_bytes(state.options().body_limit);
    if state.options().tokens.is_some() {
        config = config.disable_allowed_hosts();
    }
    let svc = Arc::new(Service::server(state.clone()));
    StreamableHttpService::new(
        move || Ok(FlowMcp::new(svc.clone())),
        LocalSessionManager::default().into(),
        config,
    )
}
