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
//!
//! Sessions are capped and expire when unused ([`super::sessions`]).

use super::service::Service;
use super::sessions::{Sessions, limit};
use super::tools::FlowMcp;
use crate::http::AppState;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use std::sync::Arc;

/// The `/mcp` service: sessions end with the server's shutdown token, so
/// an open MCP stream never holds up shutdown; new ones are refused past
/// the caps, and unused ones closed, by [`limit`] and its reaper.
pub fn service(state: &AppState) -> axum::Router {
    let config = StreamableHttpServerConfig::default()
        .with_cancellation_token(state.shutdown().child_token())
        .with_max_request_body_bytes(state.options().body_limit)
        .disable_allowed_hosts();
    let mut manager = LocalSessionManager::default();
    // rmcp's keep-alive counts a `run` that takes long as inactivity and
    // would close its session under it; the reaper expires idle sessions
    // instead (a request in flight is use).
    manager.session_config.keep_alive = None;
    let manager = Arc::new(manager);
    let sessions = Sessions::new(state.options().mcp_sessions.clone(), manager.clone());
    sessions.serve_reaper(state.shutdown().child_token());
    let svc = Arc::new(Service::server(state.clone()));
    let mcp = StreamableHttpService::new(move || Ok(FlowMcp::new(svc.clone())), manager, config);
    axum::Router::new()
        .fallback_service(mcp)
        .layer(axum::middleware::from_fn_with_state(sessions, limit))
}
