//! What a client sends (the request bodies and query strings of
//! `routes.rs`) and how a submitted program becomes [`Sources`]. The
//! handlers read these; `flow --server`, `flow worker` and the benches
//! write them (`crate::client`), so both sides share one definition. A
//! field left out is not sent (`skip_serializing_if`): the handlers' own
//! defaults apply, as for any client that leaves it out.

use super::error::{ApiError, ApiResult};
use crate::source::{Sources, module_name_ok};
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;
use std::collections::BTreeMap;
use utoipa::{IntoParams, ToSchema};

/// A submitted program: the root flow and the modules its subgraphs name.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckRequest {
    /// The root FlowSpec document (a JSON object, or its text as a string).
    #[schema(value_type = Value)]
    pub flow: Json,
    /// Other modules by name (`flow_ref` targets), each a document or text.
    #[schema(value_type = Option<Object>)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modules: Option<BTreeMap<String, Json>>,
    /// The root module's name (default `flow.json`); `--tools` flow.toml
    /// keys name modules by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, max_length = 256)]
    pub name: Option<String>,
}

/// `POST /v1/runs`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StartRequest {
    /// The root FlowSpec document (a JSON object, or its text as a string).
    #[schema(value_type = Value)]
    pub flow: Json,
    #[schema(value_type = Option<Object>)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modules: Option<BTreeMap<String, Json>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, max_length = 256)]
    pub name: Option<String>,
    /// The run's input (decoded against the input node's schema).
    #[schema(value_type = Object)]
    pub input: Json,
    /// Seconds to wait for the run to end or pause (at most 30).
    #[serde(
        default,
        deserialize_with = "super::params::body_opt_int64",
        skip_serializing_if = "Option::is_none"
    )]
    pub wait: Option<u64>,
}

/// `POST /v1/runs/{run}/resume`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResumeRequest {
    /// The open call's id, e.g. `c1:root#1`. Leave out `call` and `reply`
    /// to continue a halted or crashed run, settling its open Tool calls
    /// (as `flow resume RUN` does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call: Option<String>,
    /// The outcome, e.g. `{"Ok": {"decision": "approved"}}`.
    #[schema(value_type = Option<Object>)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply: Option<Json>,
    /// With neither `call` nor `reply`: what to do with the Tool calls
    /// that were out when the run was halted with `force` or its server
    /// crashed — `resend` them (they may run twice) or settle them
    /// `unknown`. Left out, each call's binding decides (`resend = true`
    /// sends it again, else Unknown). Calls a draining server or a halt
    /// never sent are sent either way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open: Option<crate::service::OpenChoice>,
    #[serde(
        default,
        deserialize_with = "super::params::body_opt_int64",
        skip_serializing_if = "Option::is_none"
    )]
    pub wait: Option<u64>,
}

/// `POST /v1/runs/{run}/halt`; the body may be left out.
#[derive(Debug, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HaltRequest {
    /// Halt at once, leaving the Tool calls out open (a continue then
    /// decides them: `open`). By default the halt waits for the calls out
    /// to finish, records their Replies, sends nothing new, and halts
    /// where no call is out.
    #[serde(default)]
    pub force: bool,
}

/// `POST /v1/runs/{run}/fork`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkRequest {
    /// The fact number of a root-task Checkpoint; or else `call` and
    /// `reply`.
    #[serde(
        default,
        deserialize_with = "super::params::body_opt_int64",
        skip_serializing_if = "Option::is_none"
    )]
    pub checkpoint: Option<u64>,
    /// A what-if fork: a call the run recorded. The fork starts at the
    /// root Checkpoint before it, and the call is answered with `reply`
    /// instead of being made again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, max_length = 256)]
    pub call: Option<String>,
    /// The outcome that replaces `call`'s reply, decoded against the call's
    /// declared type as a resume's reply is: `{"Ok": value}` or
    /// `{"Failed": value}`.
    #[schema(value_type = Option<Object>)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply: Option<Json>,
    /// State fields to replace, each decoded against `state_schema`.
    #[schema(value_type = Option<Object>)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set: Option<BTreeMap<String, Json>>,
    /// Fork onto this program instead of the recorded one, as the start
    /// body gives it (with `modules` and `name`): it must have the same flow
    /// id, the checkpoint's node, and a `state_schema` the checkpoint's
    /// state fits, or the fork is refused (422) and nothing is recorded.
    #[schema(value_type = Option<Value>)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flow: Option<Json>,
    #[schema(value_type = Option<Object>)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modules: Option<BTreeMap<String, Json>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, max_length = 256)]
    pub name: Option<String>,
    #[serde(
        default,
        deserialize_with = "super::params::body_opt_int64",
        skip_serializing_if = "Option::is_none"
    )]
    pub wait: Option<u64>,
}

#[derive(Debug, Default, Serialize, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct FactsQuery {
    pub kind: Option<String>,
    /// Only the fact with this recorded number.
    #[serde(default, deserialize_with = "super::params::query_int64")]
    pub fact: Option<u64>,
    pub search: Option<String>,
    #[serde(default, deserialize_with = "super::params::query_int64")]
    pub offset: Option<u64>,
    /// 1 to 200, default 50.
    #[param(minimum = 1, maximum = 200)]
    #[serde(default, deserialize_with = "super::params::query_int32")]
    pub limit: Option<u32>,
}

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
