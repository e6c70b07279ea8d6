//! The Tool process protocol messages (host-boundary.txt, "The Tool process
//! protocol"; DESIGN §5).
//!
//! JSON-RPC 2.0, one message per line, four messages:
//!
//! * `describe`, a request (with an id) from the host, answered by a
//!   response whose result is `{"data": version, "tools": [{tool,
//!   fingerprint, signature}]}`;
//! * `call`, a notification from the host: `{run, call, tool, args}` plus,
//!   for a generic Tool, both `schema` and `types`;
//! * `reply`, a notification from the implementation: `{run, call,
//!   outcome}`;
//! * `cancel`, a notification from the host: `{run, call}`.
//!
//! The pair (run, call) is the only correlation key.
//!
//! Reading is strict and hand-walked over [`serde_json::Value`] (serde's
//! tagged and untagged enums do not survive `arbitrary_precision` numbers):
//! a line is read with [`crate::json::parse`] (duplicate keys, lone
//! surrogates and numbers past their limits refused), and every message has
//! exactly its listed members. Values (args, `Ok` and `Failed` payloads) stay
//! JSON here; the runtime decodes them against the declared types with
//! [`crate::decode_json`]. A generic call's `types` view is validated with
//! [`crate::typespec::CallView::from_json`] against the served TypeSpec.
//!
//! Writing produces one line of canonical JSON ([`crate::json::canonical`])
//! ending in `\n`; canonical JSON escapes control characters, so the text
//! never holds a raw newline.
//!
//! Line length is the reader's business. A reader buffers at most
//! [`MAX_LINE_BYTES`] of one line and skims the rest for its envelope
//! (flow-tools' `lines`), so a longer reply is still BadReply for its call;
//! [`parse_line`] refuses a longer line as [`Error::LineTooLong`] as a
//! backstop. A reply that fits in a line but whose value is larger than
//! [`crate::limits::MAX_REPLY_BYTES`] is attributable, and is refused as
//! [`Error::BadOutcome`] so the runtime admits it as BadReply; so is any
//! shape problem of a message that names a reply's run and call. A line the
//! strict reader refuses ([`Error::Json`], e.g. a number past its limits) is
//! attributed by the reader from its skimmed envelope the same way.
//!
//! Members: within a data major version, minors only add. A describe result
//! from an implementation speaking a newer minor may carry members this
//! version does not know; those are ignored in the result and its tool
//! entries. Everywhere else an unknown member is refused.

use crate::error::DecodeError;
use crate::json;
use crate::limits;
use serde_json::{Map, Number, Value as Json};
use std::collections::BTreeSet;
use std::fmt;

mod read;
#[cfg(test)]
mod tests;

use read::*;
pub use read::{parse_line, parse_message};

/// The JSON-RPC version every message carries.
pub const JSONRPC: &str = "2.0";

/// Room for the envelope (method, run and call ids, whitespace) beside a
/// reply value of [`limits::MAX_REPLY_BYTES`].
pub const ENVELOPE_BYTES: usize = 1 << 20;

/// The longest line a reader keeps: a largest allowed reply plus its
/// envelope.
pub const MAX_LINE_BYTES: usize = limits::MAX_REPLY_BYTES + ENVELOPE_BYTES;

/// Why a line was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The line is longer than [`MAX_LINE_BYTES`].
    #[error("line of {len} bytes is longer than the limit of {max} bytes")]
    LineTooLong { len: usize, max: usize },
    /// The line is not one strict JSON text.
    #[error("not a JSON message: {0}")]
    Json(DecodeError),
    /// The message does not have the shape of a protocol message.
    #[error("{}: {message}", if pointer.is_empty() { "(message)" } else { pointer })]
    Shape { pointer: String, message: String },
    /// The implementation speaks another data major version: binding is
    /// refused. Distinct from any shape error.
    #[error("data version {theirs} refused: this host speaks {ours}")]
    VersionRefused { theirs: String, ours: String },
    /// A reply for (run, call) whose outcome is malformed or too large: the
    /// runtime admits it as BadReply with this reason.
    #[error("reply to run {run} call {call} is malformed: {reason}")]
    BadOutcome {
        run: String,
        call: String,
        reason: String,
    },
    /// A BadReply outcome was about to be sent; only the runtime decides it.
    #[error("BadReply is never sent; only the runtime decides it")]
    BadReplyNotSent,
}

fn shape(pointer: &str, message: impl Into<String>) -> Error {
    Error::Shape {
        pointer: pointer.to_string(),
        message: message.into(),
    }
}

/// A JSON-RPC request id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Id {
    Number(Number),
    Text(String),
    /// Only in an error response to a request whose id could not be read.
    Null,
}

impl Id {
    pub fn to_json(&self) -> Json {
        match self {
            Id::Number(n) => Json::Number(n.clone()),
            Id::Text(s) => Json::String(s.clone()),
            Id::Null => Json::Null,
        }
    }
}

impl From<u64> for Id {
    fn from(n: u64) -> Id {
        Id::Number(Number::from(n))
    }
}

/// A declaration's signature as `describe` lists it: the canonical
/// signature's members with schemas as "Schemas" writes them, descriptions
/// and versions included.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signature {
    /// `[name, schema]` pairs in declaration order.
    pub params: Vec<(String, Json)>,
    pub ok: Json,
    pub err: Json,
    /// Type parameter names in declaration order.
    pub generic: Vec<String>,
}

/// One entry of a describe result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribedTool {
    /// The declaration's identity.
    pub tool: String,
    /// `sha256:` and 64 lowercase hex digits.
    pub fingerprint: String,
    pub signature: Signature,
}

/// The result of `describe`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribeResult {
    /// The data version, `major.minor`.
    pub data: String,
    pub tools: Vec<DescribedTool>,
}

/// A JSON-RPC error object, the answer to a describe the implementation
/// could not serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    pub data: Option<Json>,
}

/// The views a generic call carries (host-boundary.txt, "Type
/// descriptions"): neither may be null or missing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenericViews {
    /// The success type's schema view.
    pub schema: Json,
    /// The types view; see [`crate::typespec::CallView`].
    pub types: Json,
}

/// `call`: run one Tool call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub run: String,
    /// The call's history id.
    pub call: String,
    /// The declaration's identity.
    pub tool: String,
    /// Keyed by parameter name, holding canonical values.
    pub args: Map<String, Json>,
    /// Present exactly for a generic Tool.
    pub generic: Option<GenericViews>,
}

/// `reply`: the answer to one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub run: String,
    pub call: String,
    pub outcome: Outcome,
}

/// `cancel`: a request to stop work on a call. It proves nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cancel {
    pub run: String,
    pub call: String,
}

/// A call's outcome. The first four cross the wire; [`Outcome::BadReply`]
/// is the runtime's own verdict on a reply that did not decode, was too
/// large or was malformed, and exists only in history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The declared success value.
    Ok(Json),
    /// The declared error value.
    Failed(Json),
    /// The call definitely did not happen.
    NotRun(String),
    /// The call may or may not have happened.
    Unknown(String),
    /// The runtime could not admit the reply.
    BadReply(String),
}

impl Outcome {
    /// The case name, as the outcome object's key.
    pub fn tag(&self) -> &'static str {
        match self {
            Outcome::Ok(_) => "Ok",
            Outcome::Failed(_) => "Failed",
            Outcome::NotRun(_) => "NotRun",
            Outcome::Unknown(_) => "Unknown",
            Outcome::BadReply(_) => "BadReply",
        }
    }

    /// Reads an outcome as an implementation sends it (a reply message, or
    /// a reply supplied to resume): one of `{"Ok": v}`, `{"Failed": e}`,
    /// `{"NotRun": "reason"}`, `{"Unknown": "reason"}`. BadReply and
    /// anything malformed are refused; pointers are relative to the outcome.
    pub fn from_wire(v: &Json) -> Result<Outcome, Error> {
        read_outcome(v.clone(), false)
    }

    /// Reads an outcome as history records it: the four wire cases and
    /// `{"BadReply": "reason"}`.
    pub fn from_record(v: &Json) -> Result<Outcome, Error> {
        read_outcome(v.clone(), true)
    }

    /// [`Outcome::from_record`] taking the outcome object by value, so the
    /// value inside moves instead of being copied (the fact reader's case).
    pub fn from_record_value(v: Json) -> Result<Outcome, Error> {
        read_outcome(v, true)
    }

    /// The outcome object (all five cases; the wire writer refuses
    /// BadReply).
    pub fn to_json(&self) -> Json {
        let value = match self {
            Outcome::Ok(v) | Outcome::Failed(v) => v.clone(),
            Outcome::NotRun(r) | Outcome::Unknown(r) | Outcome::BadReply(r) => {
                Json::String(r.clone())
            }
        };
        one(self.tag(), value)
    }
}

fn read_outcome(v: Json, allow_bad_reply: bool) -> Result<Outcome, Error> {
    let m = match v {
        Json::Object(m) => m,
        other => {
            return Err(shape(
                "",
                format!("an outcome is an object, found {}", json_kind(&other)),
            ));
        }
    };
    if m.len() != 1 {
        let keys: Vec<&str> = m.keys().map(String::as_str).collect();
        return Err(shape(
            "",
            format!(
                "an outcome has exactly one of Ok, Failed, NotRun or Unknown, found {} member(s) [{}]",
                m.len(),
                keys.join(", ")
            ),
        ));
    }
    let Some((tag, inner)) = m.into_iter().next() else {
        return Err(shape("", "an outcome has one member"));
    };
    // The pointer is written only for an error.
    let at = || ptr("", &tag);
    let reason = |inner: Json| match inner {
        Json::String(s) => Ok(s),
        other => Err(shape(
            &at(),
            format!(
                "{tag} holds a reason (a string), found {}",
                json_kind(&other)
            ),
        )),
    };
    match tag.as_str() {
        "Ok" => Ok(Outcome::Ok(inner)),
        "Failed" => Ok(Outcome::Failed(inner)),
        "NotRun" => reason(inner).map(Outcome::NotRun),
        "Unknown" => reason(inner).map(Outcome::Unknown),
        "BadReply" if allow_bad_reply => reason(inner).map(Outcome::BadReply),
        "BadReply" => Err(shape(
            &at(),
            "BadReply is never sent; only the runtime decides it",
        )),
        other => Err(shape(
            &at(),
            format!("unknown outcome \"{other}\" (expected Ok, Failed, NotRun or Unknown)"),
        )),
    }
}

/// One protocol message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// The describe request (host to implementation).
    Describe {
        id: Id,
    },
    /// The response to describe (implementation to host).
    Described {
        id: Id,
        result: Result<DescribeResult, RpcError>,
    },
    Call(Call),
    Reply(Reply),
    Cancel(Cancel),
}

impl Message {
    /// The JSON-RPC object. Refuses a reply carrying BadReply.
    pub fn to_json(&self) -> Result<Json, Error> {
        if let Message::Reply(r) = self
            && matches!(r.outcome, Outcome::BadReply(_))
        {
            return Err(Error::BadReplyNotSent);
        }
        Ok(self.json_unchecked())
    }

    /// The JSON-RPC object, whatever the outcome of a reply.
    fn json_unchecked(&self) -> Json {
        let mut m = Map::new();
        m.insert("jsonrpc".into(), Json::String(JSONRPC.into()));
        match self {
            Message::Describe { id } => {
                m.insert("id".into(), id.to_json());
                m.insert("method".into(), Json::String("describe".into()));
            }
            Message::Described { id, result } => {
                m.insert("id".into(), id.to_json());
                match result {
                    Ok(r) => m.insert("result".into(), describe_result_json(r)),
                    Err(e) => m.insert("error".into(), rpc_error_json(e)),
                };
            }
            Message::Call(c) => {
                let mut p = Map::new();
                p.insert("run".into(), Json::String(c.run.clone()));
                p.insert("call".into(), Json::String(c.call.clone()));
                p.insert("tool".into(), Json::String(c.tool.clone()));
                p.insert("args".into(), Json::Object(c.args.clone()));
                if let Some(g) = &c.generic {
                    p.insert("schema".into(), g.schema.clone());
                    p.insert("types".into(), g.types.clone());
                }
                m.insert("method".into(), Json::String("call".into()));
                m.insert("params".into(), Json::Object(p));
            }
            Message::Reply(r) => {
                let mut p = Map::new();
                p.insert("run".into(), Json::String(r.run.clone()));
                p.insert("call".into(), Json::String(r.call.clone()));
                p.insert("outcome".into(), r.outcome.to_json());
                m.insert("method".into(), Json::String("reply".into()));
                m.insert("params".into(), Json::Object(p));
            }
            Message::Cancel(c) => {
                let mut p = Map::new();
                p.insert("run".into(), Json::String(c.run.clone()));
                p.insert("call".into(), Json::String(c.call.clone()));
                m.insert("method".into(), Json::String("cancel".into()));
                m.insert("params".into(), Json::Object(p));
            }
        }
        Json::Object(m)
    }

    /// The message as one line of canonical JSON, ending in `\n`. Refuses a
    /// reply carrying BadReply.
    pub fn to_line(&self) -> Result<String, Error> {
        let mut line = json::canonical(&self.to_json()?);
        line.push('\n');
        Ok(line)
    }
}

/// `{"id":…,"jsonrpc":"2.0","method":"describe"}` as a line.
pub fn write_describe(id: &Id) -> String {
    line_of(&Message::Describe { id: id.clone() })
}

/// The describe response as a line.
pub fn write_described(id: &Id, result: &Result<DescribeResult, RpcError>) -> String {
    line_of(&Message::Described {
        id: id.clone(),
        result: result.clone(),
    })
}

/// The call notification as a line.
pub fn write_call(call: &Call) -> String {
    // Straight from the call, not through its message's tree (one line per
    // Tool step): the members in code-point order, as canonical JSON has
    // them, each value written once.
    let mut line = String::with_capacity(128);
    line.push_str("{\"jsonrpc\":");
    json::write_str(JSONRPC, &mut line);
    line.push_str(",\"method\":\"call\",\"params\":{\"args\":");
    json::write_canonical_object(&call.args, &mut line);
    line.push_str(",\"call\":");
    json::write_str(&call.call, &mut line);
    line.push_str(",\"run\":");
    json::write_str(&call.run, &mut line);
    if let Some(g) = &call.generic {
        line.push_str(",\"schema\":");
        json::write_canonical(&g.schema, &mut line);
    }
    line.push_str(",\"tool\":");
    json::write_str(&call.tool, &mut line);
    if let Some(g) = &call.generic {
        line.push_str(",\"types\":");
        json::write_canonical(&g.types, &mut line);
    }
    line.push_str("}}\n");
    line
}

/// The reply notification as a line; refuses a BadReply outcome, which is
/// never sent.
pub fn write_reply(reply: &Reply) -> Result<String, Error> {
    Message::Reply(reply.clone()).to_line()
}

/// The cancel notification as a line.
pub fn write_cancel(cancel: &Cancel) -> String {
    line_of(&Message::Cancel(cancel.clone()))
}

/// For messages that cannot carry BadReply.
fn line_of(m: &Message) -> String {
    let mut line = json::canonical(&m.json_unchecked());
    line.push('\n');
    line
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&json::canonical(&self.to_json()))
    }
}
