//! What a call comes to, as the host admits it.

use flow_abi::fact::{CallId, RunId};
use flow_abi::protocol::Outcome;
use flow_abi::signature::ToolDecl;
use flow_abi::{Type, TypeSet, Value};
use serde_json::Value as Json;
use std::collections::BTreeMap;
use std::sync::Arc;

/// One call to send: host-boundary.txt, "The Tool process protocol": "call
/// names the call by its history id (history.md) and the host's run id.
/// tool is the declaration's identity, and args an object keyed by
/// parameter name holding canonical values."
#[derive(Debug, Clone, PartialEq)]
pub struct CallRequest {
    pub run: RunId,
    pub call: CallId,
    pub tool: String,
    /// Keyed by parameter name; numbers canonical, as
    /// [`flow_abi::json::parse`] and [`Value::to_json`] make them.
    pub args: serde_json::Map<String, Json>,
}

/// A call's outcome after the host admitted the reply: the four outcomes an
/// implementation may send, with values decoded against the declared
/// types, and BadReply, which "is never sent; only the runtime decides it".
#[derive(Debug, Clone, PartialEq)]
pub enum CallOutcome {
    Ok(Value),
    Failed(Value),
    NotRun(String),
    Unknown(String),
    BadReply(String),
}

impl CallOutcome {
    /// The outcome as history records it (DESIGN §3, the Reply fact), the
    /// values in their canonical JSON: `{"Ok": v}`, `{"Failed": v}`,
    /// `{"NotRun": why}`, `{"Unknown": why}`, `{"BadReply": why}` once
    /// written ([`Outcome::to_json`]).
    pub fn into_outcome(self) -> Outcome {
        match self {
            CallOutcome::Ok(v) => Outcome::Ok(v.to_json()),
            CallOutcome::Failed(v) => Outcome::Failed(v.to_json()),
            CallOutcome::NotRun(s) => Outcome::NotRun(s),
            CallOutcome::Unknown(s) => Outcome::Unknown(s),
            CallOutcome::BadReply(s) => Outcome::BadReply(s),
        }
    }

    /// The outcome's name, for logs.
    pub fn kind(&self) -> &'static str {
        match self {
            CallOutcome::Ok(_) => "Ok",
            CallOutcome::Failed(_) => "Failed",
            CallOutcome::NotRun(_) => "NotRun",
            CallOutcome::Unknown(_) => "Unknown",
            CallOutcome::BadReply(_) => "BadReply",
        }
    }
}

/// The declarations a binding answers, with the types their terms use.
#[derive(Debug, Clone)]
pub struct Declarations {
    pub types: Arc<TypeSet>,
    /// Identity → declaration and its fingerprint.
    pub decls: BTreeMap<String, (ToolDecl, String)>,
}

impl Declarations {
    pub fn new(types: Arc<TypeSet>, decls: impl IntoIterator<Item = ToolDecl>) -> Declarations {
        let decls = decls
            .into_iter()
            .map(|d| {
                let fp = d.fingerprint(&types);
                (d.identity.clone(), (d, fp))
            })
            .collect();
        Declarations { types, decls }
    }

    pub fn get(&self, identity: &str) -> Option<&(ToolDecl, String)> {
        self.decls.get(identity)
    }

    /// A reply's value decoded against the declared type: host-boundary.txt,
    /// "Decoding": "A decoding failure of a Tool reply is BadReply, with the
    /// reason in its text".
    pub fn admit(&self, tool: &str, raw: Outcome) -> CallOutcome {
        let Some((decl, _)) = self.decls.get(tool) else {
            return CallOutcome::NotRun(format!("{tool} is not bound here"));
        };
        let decode = |v: &Json, ty: &Type, what: &str| {
            flow_abi::decode_json(v, ty, &self.types).map_err(|e| {
                CallOutcome::BadReply(format!("the {what} value does not decode: {e}"))
            })
        };
        match raw {
            Outcome::Ok(v) => decode(&v, &decl.ok, "Ok").map_or_else(|e| e, CallOutcome::Ok),
            Outcome::Failed(v) => {
                decode(&v, &decl.err, "Failed").map_or_else(|e| e, CallOutcome::Failed)
            }
            Outcome::NotRun(s) => CallOutcome::NotRun(s),
            Outcome::Unknown(s) => CallOutcome::Unknown(s),
            Outcome::BadReply(s) => CallOutcome::BadReply(s),
        }
    }
}
