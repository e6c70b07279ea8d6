//! Answers streamed as NDJSON (`application/x-ndjson`: one JSON object a
//! line), as the replay gate and bulk recovery send their progress: a line
//! per run as it is done, then the report.

use super::error::{ApiError, ApiResult};
use crate::source::Sources;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use tokio::sync::mpsc;

pub const NDJSON: &str = "application/x-ndjson";

/// Whether the request asks for the stream (`Accept: application/x-ndjson`).
pub fn wanted(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains(NDJSON))
}

/// Refuses, before the first line, a program that does not check or a
/// `flow` filter naming another flow than the program's (`what`: how the
/// refusal names the program and what it does with runs of its flow).
pub async fn check_program(program: &Sources, flow: Option<&str>, what: &str) -> ApiResult<()> {
    let check = program.clone();
    let program = tokio::task::spawn_blocking(move || check.program())
        .await
        .map_err(ApiError::internal)??;
    let id = program.root_module().map(|m| m.report.flow.id.clone());
    if let (Some(f), Some(id)) = (flow, &id)
        && f != id
    {
        return Err(ApiError::unprocessable(format!(
            "{what} {id:?}, not of {f:?} (leave out the flow filter)"
        )));
    }
    Ok(())
}

/// The response sending each line `lines` yields until it closes.
pub fn response<L: Serialize + Send + 'static>(lines: mpsc::UnboundedReceiver<L>) -> Response {
    let body = futures_util::stream::unfold(lines, |mut rx| async move {
        let line = rx.recv().await?;
        let mut text = serde_json::to_string(&line).unwrap_or_default();
        text.push('\n');
        Some((Ok::<_, std::convert::Infallible>(text), rx))
    });
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, NDJSON)],
        axum::body::Body::from_stream(body),
    )
        .into_response()
}
