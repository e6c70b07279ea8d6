//! `/mcp` on `flow serve`: the same tools over MCP streamable HTTP, on the
//! server's own run service (its runs are the server's like any other). Mounted behind the server's
//! bearer auth; each tool checks the token's scope (read for check,
//! history, runs and replay; run for run and resume).
//!
//! `Host` and `Origin` are checked by the server's browser guard
//! (`crate::http::guard`) in front of every route, `/mcp` included, by one
//! rule (`--allow-host`, `--cors-origin`); rmcp's own loopback-only Host
//! list is turned off so that the two cannot disagree (a name given with
//! `--allow-host` is served on `/mcp` too).

use super::service::Service;
use super::tools::FlowMcp;
use crate::http::AppState;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use std::sync::Arc;

/// The `/mcp` service: sessions end with the server's shutdown token, so
/// an open MCP stream never holds up shutdown.
pub fn service(state: &AppState) -> StreamableHttpService<FlowMcp, LocalSessionManager> {
    let config = StreamableHttpServerConfig::default()
        .with_cancellation_token(state.shutdown().child_token())
        .with_max_request_body_bytes(state.options().body_limit)
        .disable_allowed_hosts();
    let svc = Arc::new(Service::server(state.clone()));
    StreamableHttpService::new(
        move || Ok(FlowMcp::new(svc.clone())),
        LocalSessionManager::default().into(),
        config,
    )
}
