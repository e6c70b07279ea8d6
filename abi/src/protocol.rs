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
    let at = ptr("", &tag);
    let reason = |inner: Json| match inner {
        Json::String(s) => Ok(s),
        other => Err(shape(
            &at,
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
            &at,
            "BadReply is never sent; only the runtime decides it",
        )),
        other => Err(shape(
            &at,
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
    line_of(&Message::Call(call.clone()))
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

/// Reads one line (a trailing `\n` or `\r\n` is allowed) into a message.
pub fn parse_line(line: &str) -> Result<Message, Error> {
    if line.len() > MAX_LINE_BYTES {
        return Err(Error::LineTooLong {
            len: line.len(),
            max: MAX_LINE_BYTES,
        });
    }
    let text = line
        .strip_suffix('\n')
        .map_or(line, |l| l.strip_suffix('\r').unwrap_or(l));
    let v = json::parse(text).map_err(Error::Json)?;
    parse_message(&v)
}

/// Reads an already parsed JSON-RPC object into a message.
///
/// A message that names a reply's call (`method` "reply" and string
/// `params.run` and `params.call`) is that call's reply whatever else is
/// wrong with it: any shape problem is [`Error::BadOutcome`] for the call
/// (PRO-13: the envelope is read before the rest is judged).
pub fn parse_message(v: &Json) -> Result<Message, Error> {
    read_message(v).map_err(|e| match (e, reply_key(v)) {
        (e @ Error::Shape { .. }, Some((run, call))) => Error::BadOutcome {
            run,
            call,
            reason: e.to_string(),
        },
        (e, _) => e,
    })
}

/// The (run, call) a message that says it is a reply names.
fn reply_key(v: &Json) -> Option<(String, String)> {
    if v.get("method")?.as_str()? != "reply" {
        return None;
    }
    let p = v.get("params")?;
    Some((
        p.get("run")?.as_str()?.to_string(),
        p.get("call")?.as_str()?.to_string(),
    ))
}

fn read_message(v: &Json) -> Result<Message, Error> {
    let Json::Object(m) = v else {
        return Err(shape(
            "",
            format!("a message is a JSON object, found {}", json_kind(v)),
        ));
    };
    match m.get("jsonrpc") {
        Some(Json::String(s)) if s == JSONRPC => {}
        Some(other) => {
            return Err(shape(
                "/jsonrpc",
                format!("jsonrpc must be \"2.0\", found {}", json::canonical(other)),
            ));
        }
        None => return Err(shape("", "missing member \"jsonrpc\"")),
    }
    if let Some(method) = m.get("method") {
        let Json::String(method) = method else {
            return Err(shape("/method", "method must be a string"));
        };
        return match method.as_str() {
            "describe" => {
                exact(
                    m,
                    "",
                    &["jsonrpc", "method", "id"],
                    &["params"],
                    "a describe request",
                )?;
                match m.get("params") {
                    None => {}
                    Some(Json::Object(p)) if p.is_empty() => {}
                    Some(_) => {
                        return Err(shape("/params", "describe takes no params"));
                    }
                }
                let id = read_id(m.get("id"), false)?;
                Ok(Message::Describe { id })
            }
            "call" | "reply" | "cancel" => {
                if m.contains_key("id") {
                    return Err(shape(
                        "/id",
                        format!("{method} is a notification and carries no id"),
                    ));
                }
                exact(
                    m,
                    "",
                    &["jsonrpc", "method", "params"],
                    &[],
                    "a notification",
                )?;
                let params = match m.get("params") {
                    Some(Json::Object(p)) => p,
                    _ => return Err(shape("/params", "params must be an object")),
                };
                match method.as_str() {
                    "call" => read_call(params).map(Message::Call),
                    "reply" => read_reply(params).map(Message::Reply),
                    _ => read_cancel(params).map(Message::Cancel),
                }
            }
            other => Err(shape(
                "/method",
                format!("unknown method \"{other}\" (expected describe, call, reply or cancel)"),
            )),
        };
    }
    // A response: to describe, the only request.
    let result = match (m.get("result"), m.get("error")) {
        (Some(_), Some(_)) => {
            return Err(shape("", "a response has result or error, not both"));
        }
        (None, None) => {
            return Err(shape(
                "",
                "a message has a method (request or notification) or a result or error (response)",
            ));
        }
        (Some(r), None) => {
            exact(m, "", &["jsonrpc", "id", "result"], &[], "a response")?;
            Ok(read_describe_result(r)?)
        }
        (None, Some(e)) => {
            exact(m, "", &["jsonrpc", "id", "error"], &[], "an error response")?;
            Err(read_rpc_error(e)?)
        }
    };
    let id = read_id(m.get("id"), result.is_err())?;
    Ok(Message::Described { id, result })
}

fn read_id(v: Option<&Json>, null_ok: bool) -> Result<Id, Error> {
    match v {
        Some(Json::Number(n)) => Ok(Id::Number(n.clone())),
        Some(Json::String(s)) => Ok(Id::Text(s.clone())),
        Some(Json::Null) if null_ok => Ok(Id::Null),
        Some(other) => Err(shape(
            "/id",
            format!(
                "id must be a string or a number, found {}",
                json_kind(other)
            ),
        )),
        None => Err(shape("", "missing member \"id\"")),
    }
}

fn read_call(p: &Map<String, Json>) -> Result<Call, Error> {
    let at = "/params";
    exact(
        p,
        at,
        &["run", "call", "tool", "args"],
        &["schema", "types"],
        "call params",
    )?;
    let run = read_text(p, at, "run")?;
    let call = read_text(p, at, "call")?;
    let tool = read_text(p, at, "tool")?;
    let args = match p.get("args") {
        Some(Json::Object(a)) => a.clone(),
        Some(other) => {
            return Err(shape(
                &ptr(at, "args"),
                format!(
                    "args is an object keyed by parameter name, found {}",
                    json_kind(other)
                ),
            ));
        }
        None => Map::new(),
    };
    let generic = match (p.get("schema"), p.get("types")) {
        (None, None) => None,
        (Some(schema), Some(types)) => {
            for (k, v) in [("schema", schema), ("types", types)] {
                if v.is_null() {
                    return Err(shape(
                        &ptr(at, k),
                        format!("a generic call's {k} may not be null"),
                    ));
                }
            }
            Some(GenericViews {
                schema: schema.clone(),
                types: types.clone(),
            })
        }
        (Some(_), None) | (None, Some(_)) => {
            return Err(shape(
                at,
                "a generic call carries both schema and types; a nongeneric call carries neither",
            ));
        }
    };
    Ok(Call {
        run,
        call,
        tool,
        args,
        generic,
    })
}

/// Envelope problems make the reply unattributable; once run and call are
/// read, any other problem is the reply's and is [`Error::BadOutcome`].
fn read_reply(p: &Map<String, Json>) -> Result<Reply, Error> {
    let at = "/params";
    let run = read_text(p, at, "run")?;
    let call = read_text(p, at, "call")?;
    let bad = |reason: String| Error::BadOutcome {
        run: run.clone(),
        call: call.clone(),
        reason,
    };
    if let Some(k) = p
        .keys()
        .find(|k| !["run", "call", "outcome"].contains(&k.as_str()))
    {
        return Err(bad(format!("unknown member \"{k}\" in reply params")));
    }
    let Some(v) = p.get("outcome") else {
        return Err(bad("missing member \"outcome\"".into()));
    };
    let outcome = Outcome::from_wire(v).map_err(|e| match e {
        Error::Shape { pointer, message } if pointer.is_empty() => bad(message),
        Error::Shape { pointer, message } => bad(format!("outcome{pointer}: {message}")),
        other => bad(other.to_string()),
    })?;
    if let Outcome::Ok(value) | Outcome::Failed(value) = &outcome {
        let size = json::canonical(value).len();
        if size > limits::MAX_REPLY_BYTES {
            return Err(bad(format!(
                "reply value of {size} bytes is larger than the limit of {} bytes",
                limits::MAX_REPLY_BYTES
            )));
        }
    }
    Ok(Reply { run, call, outcome })
}

fn read_cancel(p: &Map<String, Json>) -> Result<Cancel, Error> {
    let at = "/params";
    exact(p, at, &["run", "call"], &[], "cancel params")?;
    Ok(Cancel {
        run: read_text(p, at, "run")?,
        call: read_text(p, at, "call")?,
    })
}

/// Reads a describe result: the data version first, so that another major
/// is a version refusal whatever the rest looks like.
fn read_describe_result(v: &Json) -> Result<DescribeResult, Error> {
    let at = "/result";
    let Json::Object(m) = v else {
        return Err(shape(
            at,
            format!("a describe result is an object, found {}", json_kind(v)),
        ));
    };
    let data = read_text(m, at, "data")?;
    let (theirs, ours) = match (parse_version(&data), parse_version(crate::DATA_VERSION)) {
        (Some(t), Some(o)) => (t, o),
        _ => {
            return Err(shape(
                &ptr(at, "data"),
                format!("data version \"{data}\" is not major.minor"),
            ));
        }
    };
    if theirs.0 != ours.0 {
        return Err(Error::VersionRefused {
            theirs: data,
            ours: crate::DATA_VERSION.to_string(),
        });
    }
    let lenient = theirs.1 > ours.1;
    if !lenient {
        exact(m, at, &["data", "tools"], &[], "a describe result")?;
    }
    let at_t = ptr(at, "tools");
    let Some(Json::Array(entries)) = m.get("tools") else {
        return Err(shape(&at_t, "tools must be an array"));
    };
    let mut tools = Vec::with_capacity(entries.len());
    let mut seen = BTreeSet::new();
    for (i, e) in entries.iter().enumerate() {
        let at_i = format!("{at_t}/{i}");
        let Json::Object(em) = e else {
            return Err(shape(&at_i, "a tool entry is an object"));
        };
        if !lenient {
            exact(
                em,
                &at_i,
                &["tool", "fingerprint", "signature"],
                &[],
                "a tool entry",
            )?;
        }
        let tool = read_text(em, &at_i, "tool")?;
        if !seen.insert(tool.clone()) {
            return Err(shape(
                &ptr(&at_i, "tool"),
                format!("tool \"{tool}\" is listed twice"),
            ));
        }
        let fingerprint = read_text(em, &at_i, "fingerprint")?;
        if !is_fingerprint(&fingerprint) {
            return Err(shape(
                &ptr(&at_i, "fingerprint"),
                format!("fingerprint \"{fingerprint}\" is not sha256: and 64 lowercase hex digits"),
            ));
        }
        let at_s = ptr(&at_i, "signature");
        let signature = match em.get("signature") {
            Some(s) => read_signature(s, &at_s)?,
            None => return Err(shape(&at_i, "missing member \"signature\"")),
        };
        tools.push(DescribedTool {
            tool,
            fingerprint,
            signature,
        });
    }
    Ok(DescribeResult { data, tools })
}

fn read_signature(v: &Json, at: &str) -> Result<Signature, Error> {
    let Json::Object(m) = v else {
        return Err(shape(at, "a signature is an object"));
    };
    exact(
        m,
        at,
        &["params", "ok", "err", "generic"],
        &[],
        "a signature",
    )?;
    let at_p = ptr(at, "params");
    let Some(Json::Array(ps)) = m.get("params") else {
        return Err(shape(
            &at_p,
            "params must be an array of [name, schema] pairs",
        ));
    };
    let mut params = Vec::with_capacity(ps.len());
    let mut names = BTreeSet::new();
    for (i, p) in ps.iter().enumerate() {
        let at_i = format!("{at_p}/{i}");
        let (Json::String(name), Some(schema)) = (
            p.get(0).unwrap_or(&Json::Null),
            p.as_array().filter(|a| a.len() == 2).and_then(|a| a.get(1)),
        ) else {
            return Err(shape(&at_i, "a parameter is a [name, schema] pair"));
        };
        schema_at(schema, &format!("{at_i}/1"))?;
        if name.is_empty() || !names.insert(name.clone()) {
            return Err(shape(
                &format!("{at_i}/0"),
                format!("parameter name \"{name}\" is empty or repeated"),
            ));
        }
        params.push((name.clone(), schema.clone()));
    }
    let ok = m.get("ok").cloned().unwrap_or(Json::Null);
    let err = m.get("err").cloned().unwrap_or(Json::Null);
    schema_at(&ok, &ptr(at, "ok"))?;
    schema_at(&err, &ptr(at, "err"))?;
    let at_g = ptr(at, "generic");
    let Some(Json::Array(gs)) = m.get("generic") else {
        return Err(shape(&at_g, "generic must be an array of names"));
    };
    let mut generic = Vec::with_capacity(gs.len());
    for (i, g) in gs.iter().enumerate() {
        match g {
            Json::String(s) if !s.is_empty() && !generic.contains(s) => generic.push(s.clone()),
            _ => {
                return Err(shape(
                    &format!("{at_g}/{i}"),
                    "generic names are unique non-empty strings",
                ));
            }
        }
    }
    Ok(Signature {
        params,
        ok,
        err,
        generic,
    })
}

/// A JSON Schema is an object or a boolean.
fn schema_at(v: &Json, at: &str) -> Result<(), Error> {
    match v {
        Json::Object(_) | Json::Bool(_) => Ok(()),
        other => Err(shape(
            at,
            format!(
                "a schema is an object or a boolean, found {}",
                json_kind(other)
            ),
        )),
    }
}

fn read_rpc_error(v: &Json) -> Result<RpcError, Error> {
    let at = "/error";
    let Json::Object(m) = v else {
        return Err(shape(at, "an error is an object"));
    };
    exact(m, at, &["code", "message"], &["data"], "an error")?;
    let code = match m.get("code") {
        Some(Json::Number(n)) => n.as_i64(),
        _ => None,
    };
    let Some(code) = code else {
        return Err(shape(&ptr(at, "code"), "code must be an integer"));
    };
    let message = match m.get("message") {
        Some(Json::String(s)) => s.clone(),
        _ => return Err(shape(&ptr(at, "message"), "message must be a string")),
    };
    Ok(RpcError {
        code,
        message,
        data: m.get("data").cloned(),
    })
}

fn describe_result_json(r: &DescribeResult) -> Json {
    let tools = r
        .tools
        .iter()
        .map(|t| {
            let s = &t.signature;
            let mut sig = Map::new();
            sig.insert(
                "params".into(),
                Json::Array(
                    s.params
                        .iter()
                        .map(|(n, schema)| {
                            Json::Array(vec![Json::String(n.clone()), schema.clone()])
                        })
                        .collect(),
                ),
            );
            sig.insert("ok".into(), s.ok.clone());
            sig.insert("err".into(), s.err.clone());
            sig.insert(
                "generic".into(),
                Json::Array(s.generic.iter().map(|g| Json::String(g.clone())).collect()),
            );
            let mut e = Map::new();
            e.insert("tool".into(), Json::String(t.tool.clone()));
            e.insert("fingerprint".into(), Json::String(t.fingerprint.clone()));
            e.insert("signature".into(), Json::Object(sig));
            Json::Object(e)
        })
        .collect();
    let mut m = Map::new();
    m.insert("data".into(), Json::String(r.data.clone()));
    m.insert("tools".into(), Json::Array(tools));
    Json::Object(m)
}

fn rpc_error_json(e: &RpcError) -> Json {
    let mut m = Map::new();
    m.insert("code".into(), Json::Number(Number::from(e.code)));
    m.insert("message".into(), Json::String(e.message.clone()));
    if let Some(d) = &e.data {
        m.insert("data".into(), d.clone());
    }
    Json::Object(m)
}

/// `major.minor`, each a decimal number without leading zeros.
fn parse_version(s: &str) -> Option<(u64, u64)> {
    let (major, minor) = s.split_once('.')?;
    let num = |p: &str| {
        let ok = !p.is_empty()
            && p.bytes().all(|b| b.is_ascii_digit())
            && (p == "0" || !p.starts_with('0'));
        if ok { p.parse::<u64>().ok() } else { None }
    };
    Some((num(major)?, num(minor)?))
}

fn is_fingerprint(s: &str) -> bool {
    s.strip_prefix("sha256:").is_some_and(|h| {
        h.len() == 64
            && h.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// Refuses missing required and unknown members.
fn exact(
    m: &Map<String, Json>,
    at: &str,
    required: &[&str],
    optional: &[&str],
    what: &str,
) -> Result<(), Error> {
    if let Some(r) = required.iter().find(|r| !m.contains_key(**r)) {
        return Err(shape(at, format!("{what} is missing member \"{r}\"")));
    }
    if let Some(k) = m
        .keys()
        .find(|k| !required.contains(&k.as_str()) && !optional.contains(&k.as_str()))
    {
        return Err(shape(
            &ptr(at, k),
            format!("unknown member \"{k}\" in {what}"),
        ));
    }
    Ok(())
}

/// A required non-empty string member.
fn read_text(m: &Map<String, Json>, at: &str, key: &str) -> Result<String, Error> {
    match m.get(key) {
        Some(Json::String(s)) if !s.is_empty() => Ok(s.clone()),
        Some(Json::String(_)) => Err(shape(&ptr(at, key), format!("{key} must not be empty"))),
        Some(other) => Err(shape(
            &ptr(at, key),
            format!("{key} must be a string, found {}", json_kind(other)),
        )),
        None => Err(shape(at, format!("missing member \"{key}\""))),
    }
}

fn ptr(at: &str, key: &str) -> String {
    format!("{at}/{}", key.replace('~', "~0").replace('/', "~1"))
}

fn one(key: &str, v: Json) -> Json {
    let mut m = Map::new();
    m.insert(key.to_string(), v);
    Json::Object(m)
}

fn json_kind(v: &Json) -> &'static str {
    match v {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "an array",
        Json::Object(_) => "an object",
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&json::canonical(&self.to_json()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const FP: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn parse(v: Json) -> Result<Message, Error> {
        parse_line(&v.to_string())
    }

    #[track_caller]
    fn shape_err(v: Json, pointer: &str, needle: &str) {
        match parse(v) {
            Err(Error::Shape {
                pointer: p,
                message,
            }) => {
                assert_eq!(p, pointer, "{message}");
                assert!(message.contains(needle), "{message:?} lacks {needle:?}");
            }
            other => panic!("expected a shape error, got {other:?}"),
        }
    }

    #[track_caller]
    fn bad_outcome(v: Json, needle: &str) {
        match parse(v) {
            Err(Error::BadOutcome { run, call, reason }) => {
                assert_eq!((run.as_str(), call.as_str()), ("run-1", "c1:root#1"));
                assert!(reason.contains(needle), "{reason:?} lacks {needle:?}");
            }
            other => panic!("expected BadOutcome, got {other:?}"),
        }
    }

    /// Writes `m`, checks the line is one line of canonical JSON, reads it
    /// back and compares.
    #[track_caller]
    fn round_trip(m: Message) -> String {
        let line = m.to_line().unwrap();
        assert!(line.ends_with('\n'));
        let body = &line[..line.len() - 1];
        assert!(!body.contains('\n'));
        assert_eq!(body, json::canonical(&json::parse(body).unwrap()));
        assert_eq!(parse_line(&line).unwrap(), m);
        line
    }

    fn signature() -> Json {
        json!({"params": [["query", {"type": "string", "description": "what to look for"}]],
            "ok": {"type": "array", "items": {"type": "string"}}, "err": {"$ref": "#/$defs/x"}, "generic": []})
    }

    fn described(data: &str) -> Json {
        json!({"jsonrpc": "2.0", "id": 1, "result": {"data": data, "tools": [
            {"tool": "support.json#web-search", "fingerprint": FP, "signature": signature()}]}})
    }

    fn reply(outcome: Json) -> Json {
        json!({"jsonrpc": "2.0", "method": "reply", "params": {"run": "run-1", "call": "c1:root#1", "outcome": outcome}})
    }

    fn call() -> Json {
        json!({"jsonrpc": "2.0", "method": "call", "params": {"run": "run-1", "call": "c1:root#1",
            "tool": "support.json#web-search", "args": {"query": "rust"}}})
    }

    // --- describe ---

    #[test]
    fn describe_request() {
        let line = round_trip(Message::Describe { id: Id::from(7) });
        assert_eq!(
            line,
            "{\"id\":7,\"jsonrpc\":\"2.0\",\"method\":\"describe\"}\n"
        );
        assert_eq!(write_describe(&Id::from(7)), line);
        round_trip(Message::Describe {
            id: Id::Text("d-1".into()),
        });
        // Empty params are allowed; anything else is not.
        let m =
            parse(json!({"jsonrpc": "2.0", "id": 1, "method": "describe", "params": {}})).unwrap();
        assert_eq!(m, Message::Describe { id: Id::from(1) });
        shape_err(
            json!({"jsonrpc": "2.0", "id": 1, "method": "describe", "params": {"x": 1}}),
            "/params",
            "no params",
        );
        // describe is a request: it needs an id, and not a null one.
        shape_err(
            json!({"jsonrpc": "2.0", "method": "describe"}),
            "",
            "missing member \"id\"",
        );
        shape_err(
            json!({"jsonrpc": "2.0", "id": null, "method": "describe"}),
            "/id",
            "string or a number",
        );
    }

    #[test]
    fn describe_response() {
        let m = parse(described("1.0")).unwrap();
        let Message::Described { id, result: Ok(r) } = &m else {
            panic!("{m:?}")
        };
        assert_eq!(*id, Id::from(1));
        assert_eq!(r.data, "1.0");
        assert_eq!(r.tools[0].tool, "support.json#web-search");
        assert_eq!(r.tools[0].signature.params[0].0, "query");
        round_trip(m.clone());
        let Message::Described { id, result } = m else {
            unreachable!()
        };
        assert_eq!(write_described(&id, &result), m_line(&described("1.0")));
    }

    fn m_line(v: &Json) -> String {
        format!("{}\n", json::canonical(v))
    }

    #[test]
    fn describe_error_response() {
        let m = parse(json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32603, "message": "boom", "data": {"x": 1}}})).unwrap();
        assert_eq!(
            m,
            Message::Described {
                id: Id::from(1),
                result: Err(RpcError {
                    code: -32603,
                    message: "boom".into(),
                    data: Some(json!({"x": 1}))
                })
            }
        );
        round_trip(m);
        // An error response may carry a null id.
        let m = parse(json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "parse error"}})).unwrap();
        round_trip(m);
        shape_err(
            json!({"jsonrpc": "2.0", "id": 1, "error": {"code": 1.5, "message": "x"}}),
            "/error/code",
            "integer",
        );
        shape_err(
            json!({"jsonrpc": "2.0", "id": 1, "result": {}, "error": {"code": 1, "message": "x"}}),
            "",
            "not both",
        );
        shape_err(json!({"jsonrpc": "2.0", "id": 1}), "", "a method");
        let mut no_id = described("1.0");
        no_id.as_object_mut().unwrap().remove("id");
        shape_err(no_id, "", "missing member \"id\"");
    }

    #[test]
    fn describe_version_refused_is_distinct() {
        for data in ["2.0", "0.9", "10.0"] {
            match parse(described(data)) {
                Err(Error::VersionRefused { theirs, ours }) => {
                    assert_eq!(theirs, data);
                    assert_eq!(ours, crate::DATA_VERSION);
                }
                other => panic!("{data}: {other:?}"),
            }
        }
        // Refused by version even when the rest would be a shape error.
        let v = json!({"jsonrpc": "2.0", "id": 1, "result": {"data": "2.0", "tools": "whatever", "more": 1}});
        assert!(matches!(parse(v), Err(Error::VersionRefused { .. })));
        let e = parse(described("2.0")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "data version 2.0 refused: this host speaks 1.0"
        );
        // Not a version at all is a shape error.
        for data in ["1", "v1.0", "1.0.0", "01.0", ""] {
            assert!(
                matches!(parse(described(data)), Err(Error::Shape { .. })),
                "{data}"
            );
        }
    }

    #[test]
    fn describe_newer_minor_may_add_members() {
        let mut v = described("1.7");
        v["result"]["extensions"] = json!({"x": 1});
        v["result"]["tools"][0]["title"] = json!("Search");
        let Message::Described { result: Ok(r), .. } = parse(v).unwrap() else {
            panic!()
        };
        assert_eq!(r.data, "1.7");
        // At our own minor, an unknown member is refused.
        let mut v = described("1.0");
        v["result"]["extensions"] = json!({"x": 1});
        shape_err(v, "/result/extensions", "unknown member");
        let mut v = described("1.0");
        v["result"]["tools"][0]["title"] = json!("Search");
        shape_err(v, "/result/tools/0/title", "unknown member");
    }

    #[test]
    fn describe_entries_are_checked() {
        let mut v = described("1.0");
        v["result"]["tools"][0]["fingerprint"] = json!("sha256:ABC");
        shape_err(v, "/result/tools/0/fingerprint", "64 lowercase hex");
        let mut v = described("1.0");
        let entry = v["result"]["tools"][0].clone();
        v["result"]["tools"] = json!([entry.clone(), entry]);
        shape_err(v, "/result/tools/1/tool", "listed twice");
        let mut v = described("1.0");
        v["result"]["tools"][0]["signature"]["params"] = json!([["query"]]);
        shape_err(v, "/result/tools/0/signature/params/0", "[name, schema]");
        let mut v = described("1.0");
        v["result"]["tools"][0]["signature"]["params"] = json!([["q", {}], ["q", {}]]);
        shape_err(v, "/result/tools/0/signature/params/1/0", "repeated");
        let mut v = described("1.0");
        v["result"]["tools"][0]["signature"]["ok"] = json!("string");
        shape_err(v, "/result/tools/0/signature/ok", "a schema");
        let mut v = described("1.0");
        v["result"]["tools"][0]["signature"]
            .as_object_mut()
            .unwrap()
            .remove("generic");
        shape_err(v, "/result/tools/0/signature", "missing member \"generic\"");
        let mut v = described("1.0");
        v["result"]["tools"][0]["signature"]["generic"] = json!(["T", "T"]);
        shape_err(v, "/result/tools/0/signature/generic/1", "unique");
        let mut v = described("1.0");
        v["result"]["tools"] = json!({});
        shape_err(v, "/result/tools", "an array");
    }

    #[test]
    fn describe_reads_what_signature_generates() {
        let mut types = crate::TypeSet::new();
        let err = crate::signature::tool_error(&mut types);
        let decl = crate::signature::ToolDecl {
            identity: "support.json#web-search".into(),
            doc: None,
            params: vec![crate::Field {
                name: "query".into(),
                ty: crate::Type::Text,
                doc: Some("what to look for".into()),
            }],
            ok: crate::Type::List(Box::new(crate::Type::Text)),
            err,
        };
        let result = DescribeResult {
            data: crate::DATA_VERSION.into(),
            tools: vec![DescribedTool {
                tool: decl.identity.clone(),
                fingerprint: decl.fingerprint(&types),
                signature: match read_signature(&decl.signature(&types, true), "") {
                    Ok(s) => s,
                    Err(e) => panic!("{e}"),
                },
            }],
        };
        let line = write_described(&Id::from(1), &Ok(result.clone()));
        assert_eq!(
            parse_line(&line).unwrap(),
            Message::Described {
                id: Id::from(1),
                result: Ok(result)
            }
        );
    }

    // --- call ---

    #[test]
    fn call_round_trip() {
        let m = parse(call()).unwrap();
        let Message::Call(c) = &m else { panic!() };
        assert_eq!(c.run, "run-1");
        assert_eq!(c.call, "c1:root#1");
        assert_eq!(c.args["query"], json!("rust"));
        assert!(c.generic.is_none());
        let line = round_trip(m.clone());
        assert_eq!(write_call(c), line);
    }

    #[test]
    fn generic_call_carries_both_views() {
        let mut v = call();
        v["params"]["schema"] = json!({"type": "integer"});
        v["params"]["types"] =
            json!({"bindings": [], "params": [], "ok": "Int", "err": "Text", "declarations": {}});
        let m = parse(v.clone()).unwrap();
        let Message::Call(c) = &m else { panic!() };
        assert_eq!(
            c.generic.as_ref().unwrap().schema,
            json!({"type": "integer"})
        );
        round_trip(m);
        // Neither may be missing or null.
        let mut one = v.clone();
        one["params"].as_object_mut().unwrap().remove("types");
        shape_err(one, "/params", "both schema and types");
        let mut one = v.clone();
        one["params"].as_object_mut().unwrap().remove("schema");
        shape_err(one, "/params", "both schema and types");
        let mut null = v;
        null["params"]["types"] = Json::Null;
        shape_err(null, "/params/types", "may not be null");
    }

    #[test]
    fn call_refusals() {
        for key in ["run", "call", "tool", "args"] {
            let mut v = call();
            v["params"].as_object_mut().unwrap().remove(key);
            shape_err(v, "/params", &format!("missing member \"{key}\""));
        }
        let mut v = call();
        v["params"]["run"] = json!(3);
        shape_err(v, "/params/run", "a string");
        let mut v = call();
        v["params"]["call"] = json!("");
        shape_err(v, "/params/call", "must not be empty");
        let mut v = call();
        v["params"]["args"] = json!(["rust"]);
        shape_err(v, "/params/args", "keyed by parameter name");
        let mut v = call();
        v["params"]["retry"] = json!(1);
        shape_err(v, "/params/retry", "unknown member");
        // A notification carries no id.
        let mut v = call();
        v["id"] = json!(1);
        shape_err(v, "/id", "notification");
        let mut v = call();
        v["params"] = json!([1]);
        shape_err(v, "/params", "an object");
    }

    // --- reply and outcomes ---

    #[test]
    fn reply_round_trip_each_outcome() {
        for outcome in [
            Outcome::Ok(json!({"hits": [1, 2]})),
            Outcome::Ok(Json::Null),
            Outcome::Failed(json!({"message": "rate limited"})),
            Outcome::NotRun("no such tool".into()),
            Outcome::Unknown("connection reset".into()),
        ] {
            let r = Reply {
                run: "run-1".into(),
                call: "c1:root#1".into(),
                outcome,
            };
            let line = round_trip(Message::Reply(r.clone()));
            assert_eq!(write_reply(&r).unwrap(), line);
        }
    }

    #[test]
    fn bad_reply_is_never_sent_or_read() {
        let r = Reply {
            run: "run-1".into(),
            call: "c1:root#1".into(),
            outcome: Outcome::BadReply("x".into()),
        };
        assert_eq!(write_reply(&r), Err(Error::BadReplyNotSent));
        assert_eq!(Message::Reply(r).to_line(), Err(Error::BadReplyNotSent));
        bad_outcome(reply(json!({"BadReply": "x"})), "never sent");
    }

    #[test]
    fn malformed_outcomes_are_attributed() {
        bad_outcome(
            reply(json!({"Ok": 1, "Failed": 2})),
            "found 2 member(s) [Failed, Ok]",
        );
        bad_outcome(reply(json!({})), "found 0 member(s)");
        bad_outcome(reply(json!("Ok")), "an object");
        bad_outcome(reply(json!({"Success": 1})), "unknown outcome \"Success\"");
        bad_outcome(
            reply(json!({"NotRun": {"why": "x"}})),
            "NotRun holds a reason",
        );
        bad_outcome(reply(json!({"Unknown": null})), "Unknown holds a reason");
        let mut v = reply(json!({"Ok": 1}));
        v["params"]["extra"] = json!(1);
        bad_outcome(v, "unknown member \"extra\"");
        let mut v = reply(json!({"Ok": 1}));
        v["params"].as_object_mut().unwrap().remove("outcome");
        bad_outcome(v, "missing member \"outcome\"");
    }

    /// PRO-13: a reply whose envelope names its call is that call's reply,
    /// whatever else is wrong with the message.
    #[test]
    fn envelope_problems_of_a_named_reply_are_attributed() {
        let mut v = reply(json!({"Ok": 1}));
        v["extra"] = json!(1);
        bad_outcome(v, "unknown member \"extra\"");
        let mut v = reply(json!({"Ok": 1}));
        v["id"] = json!(3);
        bad_outcome(v, "carries no id");
        let mut v = reply(json!({"Ok": 1}));
        v["jsonrpc"] = json!("1.0");
        bad_outcome(v, "jsonrpc must be");
    }

    #[test]
    fn reply_without_correlation_is_a_shape_error() {
        for key in ["run", "call"] {
            let mut v = reply(json!({"Ok": 1}));
            v["params"].as_object_mut().unwrap().remove(key);
            shape_err(v, "/params", &format!("missing member \"{key}\""));
        }
    }

    #[test]
    fn oversized_reply_value_is_bad_outcome() {
        let big = "x".repeat(limits::MAX_REPLY_BYTES);
        bad_outcome(reply(json!({"Ok": big})), "larger than the limit");
        // Exactly at the limit is admitted (the string's quotes count).
        let fits = "x".repeat(limits::MAX_REPLY_BYTES - 2);
        assert!(matches!(
            parse(reply(json!({"Failed": fits}))),
            Ok(Message::Reply(_))
        ));
    }

    #[test]
    fn line_too_long_is_refused_before_parsing() {
        let line = " ".repeat(MAX_LINE_BYTES + 1);
        assert_eq!(
            parse_line(&line),
            Err(Error::LineTooLong {
                len: MAX_LINE_BYTES + 1,
                max: MAX_LINE_BYTES
            })
        );
    }

    #[test]
    fn outcome_records_and_wire() {
        let all = [
            Outcome::Ok(json!(1)),
            Outcome::Failed(json!("e")),
            Outcome::NotRun("n".into()),
            Outcome::Unknown("u".into()),
            Outcome::BadReply("b".into()),
        ];
        for o in &all {
            assert_eq!(Outcome::from_record(&o.to_json()).unwrap(), *o);
            let wire = Outcome::from_wire(&o.to_json());
            if matches!(o, Outcome::BadReply(_)) {
                assert!(matches!(wire, Err(Error::Shape { .. })));
            } else {
                assert_eq!(wire.unwrap(), *o);
            }
        }
        assert_eq!(all[4].to_string(), "{\"BadReply\":\"b\"}");
        // A resume reply is read with the same reader.
        let v = json::parse(r#"{"Ok": "Safari 17.4"}"#).unwrap();
        assert_eq!(
            Outcome::from_wire(&v).unwrap(),
            Outcome::Ok(json!("Safari 17.4"))
        );
    }

    // --- cancel ---

    #[test]
    fn cancel_round_trip_and_refusals() {
        let c = Cancel {
            run: "run-1".into(),
            call: "c1:root/branch-a#2".into(),
        };
        let line = round_trip(Message::Cancel(c.clone()));
        assert_eq!(write_cancel(&c), line);
        assert_eq!(
            line,
            "{\"jsonrpc\":\"2.0\",\"method\":\"cancel\",\"params\":{\"call\":\"c1:root/branch-a#2\",\"run\":\"run-1\"}}\n"
        );
        shape_err(
            json!({"jsonrpc": "2.0", "method": "cancel", "params": {"run": "run-1"}}),
            "/params",
            "missing member \"call\"",
        );
        shape_err(
            json!({"jsonrpc": "2.0", "method": "cancel", "params": {"run": "r", "call": "c", "reason": "x"}}),
            "/params/reason",
            "unknown member",
        );
    }

    // --- envelopes ---

    #[test]
    fn envelope_refusals() {
        let mut v = call();
        v["jsonrpc"] = json!("1.0");
        shape_err(v, "/jsonrpc", "must be \"2.0\"");
        let mut v = call();
        v.as_object_mut().unwrap().remove("jsonrpc");
        shape_err(v, "", "missing member \"jsonrpc\"");
        let mut v = call();
        v["method"] = json!("invoke");
        shape_err(v, "/method", "unknown method \"invoke\"");
        let mut v = call();
        v["method"] = json!(1);
        shape_err(v, "/method", "a string");
        let mut v = call();
        v["extra"] = json!(1);
        shape_err(v, "/extra", "unknown member");
        shape_err(json!([1]), "", "a JSON object");
        assert!(matches!(parse_line("{not json"), Err(Error::Json(_))));
        assert!(matches!(parse_line(""), Err(Error::Json(_))));
        // Strict reading: duplicate keys are refused.
        let dup = r#"{"jsonrpc":"2.0","jsonrpc":"2.0","method":"cancel","params":{"run":"r","call":"c"}}"#;
        assert!(matches!(parse_line(dup), Err(Error::Json(_))));
        // Two messages on one line are refused.
        let two = format!("{}{}", call(), call());
        assert!(matches!(parse_line(&two), Err(Error::Json(_))));
    }

    #[test]
    fn line_endings_and_numbers() {
        let line = format!("{}\r\n", call());
        assert!(matches!(parse_line(&line), Ok(Message::Call(_))));
        // Values keep exact numbers, read by value.
        let v = r#"{"jsonrpc":"2.0","method":"reply","params":{"run":"r","call":"c","outcome":{"Ok":1.50e1}}}"#;
        let Ok(Message::Reply(r)) = parse_line(v) else {
            panic!()
        };
        assert_eq!(json::canonical(&r.outcome.to_json()), "{\"Ok\":15}");
        let big = r#"{"jsonrpc":"2.0","method":"reply","params":{"run":"r","call":"c","outcome":{"Ok":123456789012345678901234567890}}}"#;
        let Ok(Message::Reply(r)) = parse_line(big) else {
            panic!()
        };
        assert_eq!(
            r.outcome.to_string(),
            "{\"Ok\":123456789012345678901234567890}"
        );
    }

    #[test]
    fn error_messages_name_the_place() {
        let e =
            parse(json!({"jsonrpc": "2.0", "method": "cancel", "params": {"run": 1, "call": "c"}}))
                .unwrap_err();
        assert_eq!(
            e.to_string(),
            "/params/run: run must be a string, found a number"
        );
        let e = parse(reply(json!({"Ok": 1, "Failed": 2}))).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("reply to run run-1 call c1:root#1 is malformed: ")
        );
    }
}
