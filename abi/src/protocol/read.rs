//! Reading Tool protocol lines: the envelope first (which call), then the
//! message's fields, each refusal naming its JSON Pointer.

use super::*;

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
pub(super) fn reply_key(v: &Json) -> Option<(String, String)> {
    if v.get("method")?.as_str()? != "reply" {
        return None;
    }
    let p = v.get("params")?;
    Some((
        p.get("run")?.as_str()?.to_string(),
        p.get("call")?.as_str()?.to_string(),
    ))
}

pub(super) fn read_message(v: &Json) -> Result<Message, Error> {
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

pub(super) fn read_id(v: Option<&Json>, null_ok: bool) -> Result<Id, Error> {
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

pub(super) fn read_call(p: &Map<String, Json>) -> Result<Call, Error> {
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
pub(super) fn read_reply(p: &Map<String, Json>) -> Result<Reply, Error> {
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

pub(super) fn read_cancel(p: &Map<String, Json>) -> Result<Cancel, Error> {
    let at = "/params";
    exact(p, at, &["run", "call"], &[], "cancel params")?;
    Ok(Cancel {
        run: read_text(p, at, "run")?,
        call: read_text(p, at, "call")?,
    })
}

/// Reads a describe result: the data version first, so that another major
/// is a version refusal whatever the rest looks like.
pub(super) fn read_describe_result(v: &Json) -> Result<DescribeResult, Error> {
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

pub(super) fn read_signature(v: &Json, at: &str) -> Result<Signature, Error> {
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
pub(super) fn schema_at(v: &Json, at: &str) -> Result<(), Error> {
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

pub(super) fn read_rpc_error(v: &Json) -> Result<RpcError, Error> {
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

pub(super) fn describe_result_json(r: &DescribeResult) -> Json {
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

pub(super) fn rpc_error_json(e: &RpcError) -> Json {
    let mut m = Map::new();
    m.insert("code".into(), Json::Number(Number::from(e.code)));
    m.insert("message".into(), Json::String(e.message.clone()));
    if let Some(d) = &e.data {
        m.insert("data".into(), d.clone());
    }
    Json::Object(m)
}

/// `major.minor`, each a decimal number without leading zeros.
pub(super) fn parse_version(s: &str) -> Option<(u64, u64)> {
    let (major, minor) = s.split_once('.')?;
    let num = |p: &str| {
        let ok = !p.is_empty()
            && p.bytes().all(|b| b.is_ascii_digit())
            && (p == "0" || !p.starts_with('0'));
        if ok { p.parse::<u64>().ok() } else { None }
    };
    Some((num(major)?, num(minor)?))
}

pub(super) fn is_fingerprint(s: &str) -> bool {
    s.strip_prefix("sha256:").is_some_and(|h| {
        h.len() == 64
            && h.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// Refuses missing required and unknown members.
pub(super) fn exact(
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
pub(super) fn read_text(m: &Map<String, Json>, at: &str, key: &str) -> Result<String, Error> {
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

pub(super) fn ptr(at: &str, key: &str) -> String {
    format!("{at}/{}", key.replace('~', "~0").replace('/', "~1"))
}

pub(super) fn one(key: &str, v: Json) -> Json {
    let mut m = Map::new();
    m.insert(key.to_string(), v);
    Json::Object(m)
}

pub(super) fn json_kind(v: &Json) -> &'static str {
    match v {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "an array",
        Json::Object(_) => "an object",
    }
}
