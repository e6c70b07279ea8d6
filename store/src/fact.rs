//! Facts as far as the store needs them. A logical fact is read by the one
//! reader, [`flow_abi::fact::Fact`]; the store adds what is its own: where
//! values sit (they are stored Merkle-style) and the stored form of a delta
//! Checkpoint (docs/store.md). It never interprets a program.

use crate::error::{Error, Result};
use crate::merkle::{NewBlob, escape_value, externalize, write_stored};
pub use flow_abi::fact::FactKind;
use flow_abi::fact::{Fact, FactError};
use flow_abi::json::{Members, write_str};
use serde_json::{Map, Value};
use std::borrow::Cow;

/// Where a kind's values sit, as paths of object keys. DESIGN §3: Start
/// `input`, Call `args`, Reply `outcome.Ok` / `outcome.Failed`, Checkpoint
/// `state`, End `ending.Completed.output`.
pub(crate) fn value_paths(kind: FactKind) -> &'static [&'static [&'static str]] {
    match kind {
        FactKind::Start => &[&["input"]],
        FactKind::Call => &[&["args"]],
        FactKind::Reply => &[&["outcome", "Ok"], &["outcome", "Failed"]],
        FactKind::Checkpoint => &[&["state"]],
        FactKind::End => &[&["ending", "Completed", "output"]],
        FactKind::Close => &[],
    }
}

fn invalid(e: FactError) -> Error {
    Error::InvalidFact(e.to_string())
}

/// Reads a logical fact, as the engine hands it over.
pub fn read_logical(fact: Value) -> Result<Fact> {
    Fact::from_value(fact).map_err(invalid)
}

/// A fact in stored form, read: its values may be references, and a delta
/// Checkpoint carries `state: null` beside its `delta`.
#[derive(Debug)]
pub struct ReadStored {
    pub fact: Fact,
    /// A delta Checkpoint's delta (checked: `base` a fact number, each
    /// member of its shape).
    pub delta: Option<Map<String, Value>>,
}

impl ReadStored {
    /// The delta's base: the Checkpoint it applies to.
    pub fn base(&self) -> Option<u64> {
        self.delta.as_ref()?.get("base")?.as_u64()
    }

    /// The stored form again.
    pub fn into_json(self) -> Value {
        let v = self.fact.into_json();
        match (self.delta, v) {
            (Some(delta), Value::Object(mut m)) => {
                m.remove("state");
                m.insert("delta".into(), Value::Object(delta));
                Value::Object(m)
            }
            (_, v) => v,
        }
    }
}

/// Reads a stored fact's text (as a feed sends it): strict JSON, then
/// [`read_stored`].
pub fn parse_stored(text: &str) -> Result<ReadStored> {
    let (members, _) = flow_abi::json::parse_object_checking_canonical(text)
        .map_err(|e| Error::InvalidFact(format!("not JSON: {e}")))?;
    read_stored(members)
}

/// Checks a fact in stored form and reads it.
///
/// Every stored fact but a delta Checkpoint has the logical shape (its
/// values may be references, which the reader takes as the opaque values
/// they are), so the fact reader checks it. A delta Checkpoint is the
/// Checkpoint envelope with `delta` in place of `state`: the reader checks
/// the envelope, this checks the delta.
pub fn read_stored(mut fact: Members<'_>) -> Result<ReadStored> {
    let Some(at) = fact.iter().position(|(k, _)| k == "delta") else {
        return Ok(ReadStored {
            fact: Fact::from_members(fact).map_err(invalid)?,
            delta: None,
        });
    };
    let delta = fact.swap_remove(at).1;
    if fact.iter().any(|(k, _)| k == "state") {
        return Err(Error::InvalidFact(
            "$.delta: a Checkpoint holds either its state or a delta".into(),
        ));
    }
    fact.push((Cow::Borrowed("state"), Value::Null));
    let f = Fact::from_members(fact).map_err(|e| {
        if e.path() == "$.state" {
            Error::InvalidFact("$.delta: only a Checkpoint is stored as a delta".into())
        } else {
            invalid(e)
        }
    })?;
    if f.kind() != FactKind::Checkpoint {
        return Err(Error::InvalidFact(
            "$.delta: only a Checkpoint is stored as a delta".into(),
        ));
    }
    let Value::Object(delta) = delta else {
        return Err(Error::InvalidFact("$.delta: is an object".into()));
    };
    check_delta(&delta)?;
    Ok(ReadStored {
        fact: f,
        delta: Some(delta),
    })
}

/// `{"base":B,"set":{…}?,"append":{field:[…]}?,"unset":[field…]?}`.
fn check_delta(m: &Map<String, Value>) -> Result<()> {
    let bad = |at: &str, what: &str| Error::InvalidFact(format!("$.delta{at}: {what}"));
    if let Some(k) = m
        .keys()
        .find(|k| !["base", "set", "append", "unset"].contains(&k.as_str()))
    {
        return Err(bad(
            &format!(".{k}"),
            "unknown key: a delta has base, set, append and unset",
        ));
    }
    match m.get("base").map(Value::as_u64) {
        Some(Some(b)) if b >= 1 => {}
        Some(_) => return Err(bad(".base", "expected a fact number from 1")),
        None => return Err(bad(".base", "missing")),
    }
    if m.get("set").is_some_and(|s| !s.is_object()) {
        return Err(bad(".set", "is an object"));
    }
    if let Some(a) = m.get("append") {
        let a = a
            .as_object()
            .ok_or_else(|| bad(".append", "is an object"))?;
        if a.values().any(|items| !items.is_array()) {
            return Err(bad(".append", "holds lists of items"));
        }
    }
    if let Some(u) = m.get("unset")
        && !u
            .as_array()
            .is_some_and(|names| names.iter().all(Value::is_string))
    {
        return Err(bad(".unset", "is a list of field names"));
    }
    Ok(())
}

/// The stored form of a checked logical fact: value positions are stored
/// Merkle-style, every other field only has its keys escaped.
pub(crate) fn store_fact(fact: &Value, kind: FactKind, blobs: &mut Vec<NewBlob>) -> Result<Value> {
    store_at(fact, value_paths(kind), 0, blobs)
}

/// The canonical stored text of a checked Call, Reply, Close or End: the
/// text `canonical(&store_fact(&fact.to_json(), …))` is, with the same
/// blobs, written from the typed fact in one pass (a step's write path
/// builds no JSON tree of it). Keys are written in canonical (byte) order;
/// none of a fact's own keys is escaped. `None` for a Start (stored through
/// its tree, once a run) or a Checkpoint (stored by `checkpoint`: a delta
/// written from its parts, a snapshot through its tree).
pub(crate) fn stored_text(fact: &Fact, blobs: &mut Vec<NewBlob>) -> Result<Option<String>> {
    use flow_abi::fact::Ending;
    use flow_abi::protocol::Outcome;
    let mut out = String::with_capacity(256);
    let kind = |out: &mut String| {
        out.push_str(",\"fact\":");
        write_str(fact.kind().as_str(), out);
        out.push_str(",\"n\":");
        out.push_str(&fact.n().to_string());
    };
    match fact {
        Fact::Call {
            call,
            task,
            node,
            tool,
            fingerprint,
            args,
            ..
        } => {
            out.push_str("{\"args\":");
            write_stored(args, &mut out, blobs)?;
            out.push_str(",\"call\":");
            write_str(call.as_str(), &mut out);
            out.push_str(",\"fact\":\"Call\",\"fingerprint\":");
            write_str(fingerprint, &mut out);
            out.push_str(",\"n\":");
            out.push_str(&fact.n().to_string());
            out.push_str(",\"node\":");
            write_str(node, &mut out);
            out.push_str(",\"task\":");
            write_str(task, &mut out);
            out.push_str(",\"tool\":");
            write_str(tool, &mut out);
        }
        Fact::Reply { call, outcome, .. } => {
            out.push_str("{\"call\":");
            write_str(call.as_str(), &mut out);
            kind(&mut out);
            out.push_str(",\"outcome\":{");
            write_str(outcome.tag(), &mut out);
            out.push(':');
            match outcome {
                Outcome::Ok(v) | Outcome::Failed(v) => {
                    write_stored(v, &mut out, blobs)?;
                }
                Outcome::NotRun(r) | Outcome::Unknown(r) | Outcome::BadReply(r) => {
                    write_str(r, &mut out)
                }
            }
            out.push('}');
        }
        Fact::Close { call, reason, .. } => {
            out.push_str("{\"call\":");
            write_str(call.as_str(), &mut out);
            kind(&mut out);
            out.push_str(",\"reason\":");
            write_str(reason, &mut out);
        }
        Fact::End { ending, .. } => {
            out.push_str("{\"ending\":{");
            match ending {
                Ending::Completed { exit, output } => {
                    out.push_str("\"Completed\":{\"exit\":");
                    write_str(exit, &mut out);
                    out.push_str(",\"output\":");
                    write_stored(output, &mut out, blobs)?;
                    out.push('}');
                }
                Ending::Faulted(why) => {
                    out.push_str("\"Faulted\":");
                    write_str(why, &mut out);
                }
            }
            out.push('}');
            kind(&mut out);
        }
        Fact::Start { .. } | Fact::Checkpoint { .. } => return Ok(None),
    }
    out.push('}');
    Ok(Some(out))
}

fn store_at(v: &Value, paths: &[&[&str]], depth: usize, blobs: &mut Vec<NewBlob>) -> Result<Value> {
    let Value::Object(m) = v else {
        return Ok(escape_value(v));
    };
    let mut out = Map::new();
    for (k, c) in m {
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
/// left out; a Close's reason after it, and a reason the outcome or ending
/// carries as text (NotRun, Unknown, BadReply, Faulted) after `: `, so the
/// history's text says why a call failed or a run faulted. Presentation
/// only, never parsed.
pub fn summary(fact: &Fact) -> String {
    use flow_abi::fact::Ending;
    use flow_abi::protocol::Outcome;
    let mut parts: Vec<&str> = vec![fact.kind().as_str()];
    if let Some(call) = fact.call() {
        parts.push(call.as_str());
    }
    // A reason in text (NotRun, Unknown, BadReply, a fault) is what
    // explains the fact: shown after it (issue 41 item 1).
    let mut why = None;
    match fact {
        Fact::Call { tool, node, .. } => parts.extend([tool.as_str(), node.as_str()]),
        Fact::Checkpoint { node, .. } => parts.push(node),
        Fact::Reply { outcome, .. } => {
            parts.push(outcome.tag());
            why = match outcome {
                Outcome::Ok(v) | Outcome::Failed(v) => v.as_str(),
                Outcome::NotRun(r) | Outcome::Unknown(r) | Outcome::BadReply(r) => Some(r),
            };
        }
        Fact::End { ending, .. } => match ending {
            Ending::Completed { .. } => parts.push("Completed"),
            Ending::Faulted(r) => {
                parts.push("Faulted");
                why = Some(r);
            }
        },
        Fact::Close { reason, .. } => parts.push(reason),
        Fact::Start { .. } => {}
    }
    let text = parts.join(" ");
    match why {
        Some(w) => format!("{text}: {w}"),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flow_abi::json::parse;

    fn members(f: &str) -> Members<'_> {
        flow_abi::json::parse_object_checking_canonical(f)
            .unwrap()
            .0
    }

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
            read_logical(parse(f).unwrap()).unwrap();
            let r = read_stored(members(f)).unwrap();
            assert_eq!(
                flow_abi::json::canonical(&r.into_json()),
                flow_abi::json::canonical(&parse(f).unwrap())
            );
        }
        let bad = [
            r#"[]"#,
            r#"{"fact":"Nope","n":1}"#,
            r#"{"fact":"Close","n":0,"call":"c1:root#1","reason":"r"}"#,
            r#"{"fact":"Reply","n":3,"call":"c1:root#1","outcome":{"Ok":1,"Failed":2}}"#,
            r#"{"fact":"Reply","n":3,"call":"c1:root#1","outcome":{"NotRun":1}}"#,
            r#"{"fact":"End","n":6,"ending":{"Completed":{"output":1}}}"#,
            r#"{"fact":"Checkpoint","n":5,"task":"root","node":"a","delta":{"base":1}}"#,
        ];
        for f in bad {
            assert!(read_logical(parse(f).unwrap()).is_err(), "{f}");
        }
    }

    /// A delta stands in for `state` in the stored form only, and only in
    /// a Checkpoint.
    #[test]
    fn stored_delta_checkpoints() {
        let ok = [
            r#"{"delta":{"base":1},"fact":"Checkpoint","n":5,"node":"a","task":"root"}"#,
            r#"{"delta":{"append":{"m":[1]},"base":2,"set":{"a":{"$blob":"blake3:00","length":2000}},"unset":["b"]},"fact":"Checkpoint","n":5,"node":"a","task":"root"}"#,
        ];
        for f in ok {
            let r = read_stored(members(f)).unwrap();
            assert_eq!((r.fact.kind(), r.fact.n()), (FactKind::Checkpoint, 5));
            assert!(r.base().is_some());
            assert_eq!(flow_abi::json::canonical(&r.into_json()), f);
        }
        let bad = [
            (
                r#"{"fact":"Checkpoint","n":5,"task":"root","node":"a","delta":{"base":1},"state":{}}"#,
                "either its state or a delta",
            ),
            (
                r#"{"fact":"Call","n":5,"call":"c1:root#1","task":"root","node":"a","tool":"t","fingerprint":"f","args":{},"delta":{"base":1}}"#,
                "only a Checkpoint",
            ),
            (
                r#"{"fact":"Checkpoint","n":5,"task":"root","node":"a","delta":{}}"#,
                "$.delta.base: missing",
            ),
            (
                r#"{"fact":"Checkpoint","n":5,"task":"root","node":"a","delta":{"base":0}}"#,
                "$.delta.base",
            ),
            (
                r#"{"fact":"Checkpoint","n":5,"task":"root","node":"a","delta":{"base":1,"put":{}}}"#,
                "$.delta.put: unknown key",
            ),
            (
                r#"{"fact":"Checkpoint","n":5,"task":"root","node":"a","delta":{"base":1,"append":{"m":1}}}"#,
                "$.delta.append",
            ),
            (
                r#"{"fact":"Checkpoint","n":5,"task":"root","node":"a","delta":{"base":1,"unset":[1]}}"#,
                "$.delta.unset",
            ),
            (
                r#"{"fact":"Checkpoint","n":5,"task":"root","delta":{"base":1}}"#,
                "$.node: missing",
            ),
            (
                r#"{"fact":"Checkpoint","n":5,"task":"root","node":"a","delta":[]}"#,
                "$.delta: is an object",
            ),
        ];
        for (f, needle) in bad {
            let e = read_stored(members(f)).unwrap_err().to_string();
            assert!(e.contains(needle), "{f}: {e}");
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

    proptest::proptest! {
        /// A Call, Reply, Close or End written in one pass is the canonical
        /// text of its stored tree, with the same blobs: the bytes the chain
        /// hashes do not move.
        #[test]
        fn stored_text_is_the_stored_trees_canonical_text(
            v in crate::merkle::props::value(),
            text in "[a-z\"\\\\\n\u{e9}\u{1F600}]{0,12}",
            which in 0usize..8,
            n in 2u64..u64::MAX,
        ) {
            use flow_abi::fact::{CallId, Ending};
            use flow_abi::protocol::Outcome;
            let call = CallId::new("root/b", n).unwrap();
            let fact = match which {
                0 => Fact::Call { n, call, task: "root/b".into(), node: text.clone(), tool: format!("t{text}"), fingerprint: "sha256:00".into(), args: v },
                1 => Fact::Reply { n, call, outcome: Outcome::Ok(v) },
                2 => Fact::Reply { n, call, outcome: Outcome::Failed(v) },
                3 => Fact::Reply { n, call, outcome: Outcome::Unknown(text) },
                4 => Fact::Reply { n, call, outcome: Outcome::NotRun(text) },
                5 => Fact::Close { n, call, reason: text },
                6 => Fact::End { n, ending: Ending::Completed { exit: text, output: v } },
                _ => Fact::End { n, ending: Ending::Faulted(text) },
            };
            let mut tree_blobs = Vec::new();
            let tree = store_fact(&fact.to_json(), fact.kind(), &mut tree_blobs).unwrap();
            let mut blobs = Vec::new();
            let text = stored_text(&fact, &mut blobs).unwrap().unwrap();
            proptest::prop_assert_eq!(text, flow_abi::json::canonical(&tree));
            let pairs = |b: &[NewBlob]| b.iter().map(|b| (b.hash, b.body.clone())).collect::<Vec<_>>();
            proptest::prop_assert_eq!(pairs(&blobs), pairs(&tree_blobs));
        }
    }
}
