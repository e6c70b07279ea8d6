//! Fact shapes (DESIGN §3) as far as the store needs them: it checks the
//! envelope of each kind and knows where values sit, and never interprets a
//! program.

use crate::error::{Error, Result};
use crate::hash::parse_hash;
use crate::merkle::{NewBlob, escape_value, externalize};
use serde::Serialize;
use serde_json::{Map, Value};

/// The six fact kinds of DESIGN §3.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash, Serialize)]
pub enum FactKind {
    Start,
    Call,
    Reply,
    Close,
    Checkpoint,
    End,
}

impl FactKind {
    pub fn parse(s: &str) -> Option<FactKind> {
        Some(match s {
            "Start" => FactKind::Start,
            "Call" => FactKind::Call,
            "Reply" => FactKind::Reply,
            "Close" => FactKind::Close,
            "Checkpoint" => FactKind::Checkpoint,
            "End" => FactKind::End,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            FactKind::Start => "Start",
            FactKind::Call => "Call",
            FactKind::Reply => "Reply",
            FactKind::Close => "Close",
            FactKind::Checkpoint => "Checkpoint",
            FactKind::End => "End",
        }
    }

    /// Where this kind's values sit, as paths of object keys. DESIGN §3:
    /// Start `input`, Call `args`, Reply `outcome.Ok` / `outcome.Failed`,
    /// Checkpoint `state`, End `ending.Completed.output`.
    pub(crate) fn value_paths(self) -> &'static [&'static [&'static str]] {
        match self {
            FactKind::Start => &[&["input"]],
            FactKind::Call => &[&["args"]],
            FactKind::Reply => &[&["outcome", "Ok"], &["outcome", "Failed"]],
            FactKind::Checkpoint => &[&["state"]],
            FactKind::End => &[&["ending", "Completed", "output"]],
            FactKind::Close => &[],
        }
    }
}

/// Which form a fact is checked in.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Form {
    /// As the engine hands it over: values are plain JSON.
    Logical,
    /// As stored: values may be references, a Checkpoint may carry `delta`.
    Stored,
}

fn field<'a>(m: &'a Map<String, Value>, key: &str, kind: FactKind) -> Result<&'a Value> {
    m.get(key)
        .ok_or_else(|| Error::InvalidFact(format!("{} has no {key}", kind.as_str())))
}

fn text<'a>(m: &'a Map<String, Value>, key: &str, kind: FactKind) -> Result<&'a str> {
    field(m, key, kind)?
        .as_str()
        .ok_or_else(|| Error::InvalidFact(format!("{}.{key} is not a string", kind.as_str())))
}

fn count(m: &Map<String, Value>, key: &str, kind: FactKind) -> Result<u64> {
    field(m, key, kind)?
        .as_u64()
        .ok_or_else(|| Error::InvalidFact(format!("{}.{key} is not a count", kind.as_str())))
}

fn object<'a>(
    m: &'a Map<String, Value>,
    key: &str,
    kind: FactKind,
) -> Result<&'a Map<String, Value>> {
    field(m, key, kind)?
        .as_object()
        .ok_or_else(|| Error::InvalidFact(format!("{}.{key} is not an object", kind.as_str())))
}

fn single_tag<'a>(
    m: &'a Map<String, Value>,
    what: &str,
    tags: &[&str],
) -> Result<(&'a str, &'a Value)> {
    let mut it = m.iter();
    match (it.next(), it.next()) {
        (Some((k, v)), None) if tags.contains(&k.as_str()) => Ok((k.as_str(), v)),
        _ => Err(Error::InvalidFact(format!(
            "{what} must be one of {}",
            tags.join(" | ")
        ))),
    }
}

/// Checks a fact's envelope and returns its kind and number.
pub(crate) fn check(fact: &Value, form: Form) -> Result<(FactKind, u64)> {
    let m = fact
        .as_object()
        .ok_or_else(|| Error::InvalidFact("a fact is a JSON object".into()))?;
    let kind_text = m
        .get("fact")
        .and_then(Value::as_str)
        .ok_or_else(|| Error::InvalidFact("a fact names its kind in \"fact\"".into()))?;
    let kind = FactKind::parse(kind_text)
        .ok_or_else(|| Error::InvalidFact(format!("unknown fact kind {kind_text:?}")))?;
    let n = count(m, "n", kind)?;
    if n == 0 {
        return Err(Error::InvalidFact("facts are numbered from 1".into()));
    }
    match kind {
        FactKind::Start => {
            text(m, "run", kind)?;
            let data = text(m, "data", kind)?;
            // REQUIREMENTS VER-3: a reader refuses a history whose major is unknown.
            if data.split('.').next() != Some("1") {
                return Err(Error::InvalidFact(format!("unknown data version {data:?}")));
            }
            let entry = object(m, "entry", kind)?;
            text(entry, "module", kind)?;
            text(entry, "function", kind)?;
            text(m, "program", kind)?;
            let sources = field(m, "sources", kind)?
                .as_array()
                .ok_or_else(|| Error::InvalidFact("Start.sources is not a list".into()))?;
            for s in sources {
                let s = s
                    .as_object()
                    .ok_or_else(|| Error::InvalidFact("a Start source is an object".into()))?;
                text(s, "module", kind)?;
                parse_hash(text(s, "hash", kind)?).ok_or_else(|| {
                    Error::InvalidFact("a Start source hash is blake3:<hex>".into())
                })?;
                count(s, "length", kind)?;
            }
            field(m, "input", kind)?;
            if let Some(p) = m.get("parent") {
                let p = p
                    .as_object()
                    .ok_or_else(|| Error::InvalidFact("Start.parent is an object".into()))?;
                text(p, "run", kind)?;
                count(p, "checkpoint", kind)?;
            }
            if let Some(o) = m.get("outer") {
                let o = o
                    .as_object()
                    .ok_or_else(|| Error::InvalidFact("Start.outer is an object".into()))?;
                text(o, "run", kind)?;
                text(o, "call", kind)?;
            }
        }
        FactKind::Call => {
            for k in ["call", "task", "node", "tool", "fingerprint"] {
                text(m, k, kind)?;
            }
            field(m, "args", kind)?;
        }
        FactKind::Reply => {
            text(m, "call", kind)?;
            let o = object(m, "outcome", kind)?;
            let (tag, v) = single_tag(
                o,
                "Reply.outcome",
                &["Ok", "Failed", "NotRun", "Unknown", "BadReply"],
            )?;
            if !matches!(tag, "Ok" | "Failed") && !v.is_string() {
                return Err(Error::InvalidFact(format!(
                    "Reply.outcome.{tag} is a reason string"
                )));
            }
        }
        FactKind::Close => {
            text(m, "call", kind)?;
            text(m, "reason", kind)?;
        }
        FactKind::Checkpoint => {
            text(m, "task", kind)?;
            text(m, "node", kind)?;
            match (form, m.get("state"), m.get("delta")) {
                (_, Some(_), None) => {}
                (Form::Stored, None, Some(d)) => {
                    let d = d.as_object().ok_or_else(|| {
                        Error::InvalidFact("Checkpoint.delta is an object".into())
                    })?;
                    count(d, "base", kind)?;
                }
                _ => return Err(Error::InvalidFact("Checkpoint has no state".into())),
            }
        }
        FactKind::End => {
            let e = object(m, "ending", kind)?;
            let (tag, v) = single_tag(e, "End.ending", &["Completed", "Faulted"])?;
            if tag == "Completed" {
                let c = v.as_object().ok_or_else(|| {
                    Error::InvalidFact("End.ending.Completed is an object".into())
                })?;
                text(c, "exit", kind)?;
                field(c, "output", kind)?;
            } else if !v.is_string() {
                return Err(Error::InvalidFact(
                    "End.ending.Faulted is a reason string".into(),
                ));
            }
        }
    }
    Ok((kind, n))
}

/// The stored form of a checked logical fact: value positions are stored
/// Merkle-style, every other field only has its keys escaped.
pub(crate) fn store_fact(fact: &Value, kind: FactKind, blobs: &mut Vec<NewBlob>) -> Result<Value> {
    store_at(fact, kind.value_paths(), 0, blobs)
}

/// Like [`store_fact`] but leaving the top-level field `skip` out.
pub(crate) fn store_fact_without(
    fact: &Value,
    kind: FactKind,
    skip: &str,
    blobs: &mut Vec<NewBlob>,
) -> Result<Map<String, Value>> {
    match store_at_skipping(fact, kind.value_paths(), 0, Some(skip), blobs)? {
        Value::Object(m) => Ok(m),
        _ => Err(Error::InvalidFact("a fact is a JSON object".into())),
    }
}

fn store_at(v: &Value, paths: &[&[&str]], depth: usize, blobs: &mut Vec<NewBlob>) -> Result<Value> {
    store_at_skipping(v, paths, depth, None, blobs)
}

fn store_at_skipping(
    v: &Value,
    paths: &[&[&str]],
    depth: usize,
    skip: Option<&str>,
    blobs: &mut Vec<NewBlob>,
) -> Result<Value> {
    let Value::Object(m) = v else {
        return Ok(escape_value(v));
    };
    let mut out = Map::new();
    for (k, c) in m {
        if skip == Some(k.as_str()) {
            continue;
        }
        let here: Vec<&[&str]> = paths
            .iter()
            .copied()
            .filter(|p| p.get(depth) == Some(&k.as_str()))
            .collect();
        let stored = if here.iter().any(|p| p.len() == depth + 1) {
            externalize(c, blobs)?.value
        } else if here.is_empty() {
            escape_value(c)
        } else {
            store_at(c, &here, depth + 1, blobs)?
        };
        out.insert(crate::merkle::escape_key(k), stored);
    }
    Ok(Value::Object(out))
}

/// The summary line searched by `--search` (REQUIREMENTS GAP-HIST-5):
/// `<kind> <call id> <tool> <node> <outcome tag>`, fields that a kind lacks
/// left out. Presentation only, never parsed.
pub fn summary(fact: &Value) -> String {
    let Some(m) = fact.as_object() else {
        return String::new();
    };
    let mut parts: Vec<String> = Vec::new();
    if let Some(k) = m.get("fact").and_then(Value::as_str) {
        parts.push(k.to_string());
    }
    for key in ["call", "tool", "node"] {
        if let Some(s) = m.get(key).and_then(Value::as_str) {
            parts.push(s.to_string());
        }
    }
    for key in ["outcome", "ending"] {
        if let Some(tag) = m
            .get(key)
            .and_then(Value::as_object)
            .and_then(|o| o.keys().next())
        {
            parts.push(tag.clone());
        }
    }
    if let Some(r) = m.get("reason").and_then(Value::as_str) {
        parts.push(r.to_string());
    }
    parts.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use flow_abi::json::parse;

    #[test]
    fn envelopes() {
        let ok = [
            r#"{"fact":"Call","n":2,"call":"c1:root#1","task":"root","node":"a","tool":"m#t","fingerprint":"sha256:0","args":{}}"#,
            r#"{"fact":"Reply","n":3,"call":"c1:root#1","outcome":{"Ok":1}}"#,
            r#"{"fact":"Reply","n":3,"call":"c1:root#1","outcome":{"NotRun":"why"}}"#,
            r#"{"fact":"Close","n":4,"call":"c1:root#1","reason":"timeout"}"#,
            r#"{"fact":"Checkpoint","n":5,"task":"root","node":"a","state":{}}"#,
            r#"{"fact":"End","n":6,"ending":{"Faulted":"boom"}}"#,
            r#"{"fact":"End","n":6,"ending":{"Completed":{"exit":"success","output":null}}}"#,
        ];
        for f in ok {
            check(&parse(f).unwrap(), Form::Logical).unwrap();
        }
        let bad = [
            r#"[]"#,
            r#"{"fact":"Nope","n":1}"#,
            r#"{"fact":"Close","n":0,"call":"c","reason":"r"}"#,
            r#"{"fact":"Reply","n":3,"call":"c","outcome":{"Ok":1,"Failed":2}}"#,
            r#"{"fact":"Reply","n":3,"call":"c","outcome":{"NotRun":1}}"#,
            r#"{"fact":"End","n":6,"ending":{"Completed":{"output":1}}}"#,
            r#"{"fact":"Checkpoint","n":5,"task":"root","node":"a","delta":{"base":1}}"#,
        ];
        for f in bad {
            assert!(check(&parse(f).unwrap(), Form::Logical).is_err(), "{f}");
        }
    }

    #[test]
    fn only_value_positions_become_blobs() {
        let big = "z".repeat(1500);
        let f = parse(&format!(
            r#"{{"fact":"Reply","n":3,"call":"c","outcome":{{"Ok":"{big}"}}}}"#
        ))
        .unwrap();
        let mut blobs = Vec::new();
        let s = store_fact(&f, FactKind::Reply, &mut blobs).unwrap();
        assert_eq!(blobs.len(), 1);
        assert!(s["outcome"]["Ok"].get("$blob").is_some());
        let g = parse(&format!(
            r#"{{"fact":"Close","n":3,"call":"c","reason":"{big}"}}"#
        ))
        .unwrap();
        let mut blobs = Vec::new();
        assert_eq!(store_fact(&g, FactKind::Close, &mut blobs).unwrap(), g);
        assert!(blobs.is_empty());
    }
}
