//! The MCP adapter: an MCP server over stdio answering Flow calls.
//!
//! host-boundary.txt, "Adapters":
//! * "The adapter starts the named MCP server, offers each declaration as
//!   the MCP tool of the same name, passes args as the tool's arguments, and
//!   decodes the structured result against the declared types. A result the
//!   adapter cannot map is BadReply."
//! * "The adapter completes MCP's initialize handshake and lists the
//!   server's tools before the run starts, and answers describe from the
//!   declarations, as a toolkit does; a declaration the server offers no tool
//!   of its name for is unbound."
//! * "A call is a tools/call request whose id is the call's history id."
//! * "The structured result is the result's structuredContent or, when it
//!   has none, the JSON its one text content block holds; it is decoded
//!   against the success type, or against the error type when the result is
//!   marked isError. An error response is a result the adapter cannot map."
//! * "A cancel is MCP's notifications/cancelled, and a server that ends is a
//!   process that ends."
//!
//! The adapter shares the process service of [`crate::process`] (start,
//! restart, written flags, Unknown/NotRun at a crash, size limit, kill on
//! drop); only the dialect differs. The handshake and request shapes come
//! from rmcp's model ([`rmcp::model`], pinned `=3.11.0`): the protocol
//! version is `ProtocolVersion::LATEST_WITH_INITIALIZE`. The JSON-RPC framing
//! is our own, because rmcp's client numbers its requests itself, and the
//! seed wants the call's history id as the request id. Responses are read
//! with flow-abi's strict reader, so `structuredContent` keeps exact numbers.
//!
//! Decisions the seed leaves open:
//! * A declaration `<module>#<tool-id>` is offered as the MCP tool
//!   `<tool-id>`.
//! * Two runs may have calls with equal history ids open on one server at
//!   once; JSON-RPC ids must be unique among a connection's open requests,
//!   so the second uses `<call id>@<run id>`.
//! * A server-to-client request (`ping`, `roots/list`, ...) is answered:
//!   `ping` with an empty result, anything else with "method not found".

use crate::outcome::Declarations;
use flow_abi::protocol::Outcome;
use serde_json::{Map, Value as Json, json};
use std::collections::BTreeMap;

pub use crate::process::ProcessHandle as McpHandle;

/// Why an MCP server could not be bound: the process errors, whose
/// `Describe` case covers a failed handshake or tool list.
pub type McpError = crate::process::ProcessError;

/// The MCP tool name a declaration is offered as: its tool id.
pub fn tool_name(identity: &str) -> &str {
    identity.rsplit_once('#').map_or(identity, |(_, t)| t)
}

pub(crate) fn initialize_request(id: &str) -> String {
    let params = rmcp::model::InitializeRequestParams::new(
        rmcp::model::ClientCapabilities::default(),
        rmcp::model::Implementation::new("flowd", env!("CARGO_PKG_VERSION")),
    )
    .with_protocol_version(rmcp::model::ProtocolVersion::LATEST_WITH_INITIALIZE);
    let params = serde_json::to_value(params).unwrap_or_else(|_| json!({}));
    line(json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": params}))
}

pub(crate) fn initialized_notification() -> String {
    line(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
}

pub(crate) fn list_tools_request(id: &str, cursor: Option<&str>) -> String {
    let params = match cursor {
        Some(c) => json!({"cursor": c}),
        None => json!({}),
    };
    line(json!({"jsonrpc": "2.0", "id": id, "method": "tools/list", "params": params}))
}

pub(crate) fn call_request(id: &str, name: &str, args: Map<String, Json>) -> String {
    line(json!({
        "jsonrpc": "2.0",
        "id": id,
        "method": "tools/call",
        "params": {"name": name, "arguments": Json::Object(args)},
    }))
}

pub(crate) fn cancelled_notification(id: &str) -> String {
    line(json!({
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": id, "reason": "cancelled by the host"},
    }))
}

/// The answer to a server-to-client request.
pub(crate) fn answer_server_request(id: &Json, method: &str) -> String {
    if method == "ping" {
        line(json!({"jsonrpc": "2.0", "id": id, "result": {}}))
    } else {
        line(json!({
            "jsonrpc": "2.0",
            "id": id,
            "error": {"code": -32601, "message": format!("method not found: {method}")},
        }))
    }
}

fn line(v: Json) -> String {
    let mut s = flow_abi::json::canonical(&v);
    s.push('\n');
    s
}

/// One page of `tools/list`: the tool names and the next cursor.
pub(crate) fn read_tool_list(result: &Json) -> Result<(Vec<String>, Option<String>), String> {
    let list: rmcp::model::ListToolsResult = serde_json::from_value(result.clone())
        .map_err(|e| format!("tools/list result does not read: {e}"))?;
    Ok((
        list.tools.iter().map(|t| t.name.to_string()).collect(),
        list.next_cursor,
    ))
}

/// The declarations the listed tools leave unbound: identity → reason.
pub(crate) fn unbound(decls: &Declarations, names: &[String]) -> BTreeMap<String, String> {
    decls
        .decls
        .keys()
        .filter(|id| !names.iter().any(|n| n == tool_name(id)))
        .map(|id| {
            (
                id.clone(),
                format!("the MCP server offers no tool named {}", tool_name(id)),
            )
        })
        .collect()
}

/// Maps a `tools/call` response to an outcome whose value is still to be
/// decoded against the declared types.
pub(crate) fn call_outcome(response: Result<&Json, &Json>) -> Outcome {
    let result = match response {
        Ok(r) => r,
        Err(e) => {
            let code = e
                .get("code")
                .map(flow_abi::json::canonical)
                .unwrap_or_default();
            let msg = e.get("message").and_then(Json::as_str).unwrap_or("");
            return Outcome::BadReply(format!("the MCP server answered with error {code}: {msg}"));
        }
    };
    let Some(m) = result.as_object() else {
        return Outcome::BadReply("a tools/call result is not an object".into());
    };
    let is_error = match m.get("isError") {
        None | Some(Json::Null) => false,
        Some(Json::Bool(b)) => *b,
        Some(_) => return Outcome::BadReply("isError is not a boolean".into()),
    };
    let value = match m.get("structuredContent") {
        Some(v) if !v.is_null() => v.clone(),
        _ => {
            let blocks = m.get("content").and_then(Json::as_array);
            let texts: Vec<&str> = blocks
                .map(|b| {
                    b.iter()
                        .filter(|c| c.get("type").and_then(Json::as_str) == Some("text"))
                        .filter_map(|c| c.get("text").and_then(Json::as_str))
                        .collect()
                })
                .unwrap_or_default();
            let [text] = texts.as_slice() else {
                return Outcome::BadReply(format!(
                    "the result has no structuredContent and {} text content blocks, not one",
                    texts.len()
                ));
            };
            match flow_abi::json::parse(text) {
                Ok(v) => v,
                Err(e) => {
                    return Outcome::BadReply(format!(
                        "the result's text content is not JSON: {e}"
                    ));
                }
            }
        }
    };
    let size = flow_abi::json::canonical(&value).len();
    if size > flow_abi::limits::MAX_REPLY_BYTES {
        return Outcome::BadReply(format!(
            "reply value of {size} bytes is larger than the limit of {} bytes",
            flow_abi::limits::MAX_REPLY_BYTES
        ));
    }
    if is_error {
        Outcome::Failed(value)
    } else {
        Outcome::Ok(value)
    }
}
