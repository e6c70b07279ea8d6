//! A program as a request submits it (`flow`, `modules`, `name`): the
//! sources a check, start, fork, gate, recovery or MCP `run` is given.

use super::error::{ApiError, ApiResult};
use crate::source::{Sources, module_name_ok};
use serde_json::Value as Json;
use std::collections::BTreeMap;

fn text_of(what: &str, v: &Json) -> ApiResult<String> {
    match v {
        Json::String(s) => Ok(s.clone()),
        Json::Object(_) => Ok(flow_abi::json::canonical(v)),
        _ => Err(ApiError::unprocessable(format!(
            "{what} must be a FlowSpec document (a JSON object) or its text"
        ))),
    }
}

/// The program's sources from a request: no directory (a submitted flow has
/// no filesystem bindings), the root named `name`.
pub(crate) fn sources(
    flow: &Json,
    modules: &Option<BTreeMap<String, Json>>,
    name: &Option<String>,
) -> ApiResult<Sources> {
    let root = name.clone().unwrap_or_else(|| "flow.json".to_string());
    if !module_name_ok(&root) {
        return Err(ApiError::unprocessable(format!(
            "name {root:?} is not a module name (a relative path like flow.json, without control characters)"
        )));
    }
    let mut texts = BTreeMap::new();
    texts.insert(root.clone(), text_of("flow", flow)?);
    for (m, doc) in modules.iter().flatten() {
        if !module_name_ok(m) {
            return Err(ApiError::unprocessable(format!(
                "modules: {m:?} is not a module name (a relative path like other.json, without control characters)"
            )));
        }
        if *m == root {
            return Err(ApiError::unprocessable(format!(
                "modules: {m:?} is the root module's name"
            )));
        }
        texts.insert(m.clone(), text_of(&format!("modules.{m}"), doc)?);
    }
    Ok(Sources {
        dir: None,
        root,
        texts,
    })
}
