//! What a redaction names (docs/custody.md "Holes"): [`ValuePath`], a path
//! to values of a run's facts or a blob's hash, and the blobs such targets
//! reach in a stored run, found on one snapshot before the redaction is
//! written.
//!
//! A path is a JSON pointer (RFC 6901: `~1` for `/`, `~0` for `~`) under
//! one of these roots, each naming values of the run's logical facts:
//!
//! | path | values |
//! | --- | --- |
//! | `/input/…` | Start's input |
//! | `/state/FIELD/…` | that field in every Checkpoint (a snapshot's state, a delta's `set`) |
//! | `/output/…` | a completed End's output |
//! | `/calls/CALL/args/…` | the args of the Call with id CALL |
//! | `/calls/CALL/reply/…` | the value of its Reply (`Ok` or `Failed`) |
//! | `/facts/N/…` | fact N as stored (e.g. `/facts/7/delta/append/log/0`) |
//! | `blake3:<hex>` | that blob, if the run's facts reach it |
//!
//! A path must lead to a value stored as a blob (over 1 KiB, or declared
//! sensitive): a small value is inline in a chained fact's bytes and
//! cannot become a hole without breaking the chain.

use crate::error::{Error, Result};
use crate::hash::{hash_text, parse_hash};
use crate::merkle::{as_reference, collect_refs, escape_key};
use crate::read::{ReadDb, read_history, run_key, stored_value};
use flow_abi::fact::{Fact, RunId};
use flow_abi::schema::pointer_token;
use serde_json::Value;
use std::collections::{BTreeSet, HashSet};
use std::fmt;

/// A redaction target, parsed strictly.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ValuePath {
    Input(Vec<String>),
    State(Vec<String>),
    Output(Vec<String>),
    Args { call: String, at: Vec<String> },
    Reply { call: String, at: Vec<String> },
    Fact { n: u64, at: Vec<String> },
    Blob([u8; 32]),
}

const FORMS: &str = "/input/…, /state/FIELD/…, /output/…, /calls/CALL/args/…, /calls/CALL/reply/…, /facts/N/… (JSON pointers) or blake3:<hex>";

fn unescape(seg: &str) -> Result<String, String> {
    let mut out = String::with_capacity(seg.len());
    let mut it = seg.chars();
    while let Some(c) = it.next() {
        if c != '~' {
            out.push(c);
            continue;
        }
        match it.next() {
            Some('0') => out.push('~'),
            Some('1') => out.push('/'),
            _ => return Err(format!("{seg:?}: `~` must be followed by 0 or 1")),
        }
    }
    Ok(out)
}

impl ValuePath {
    /// Parses a target; the error says which forms there are.
    pub fn parse(s: &str) -> Result<ValuePath, String> {
        if s.starts_with("blake3:") {
            return parse_hash(s)
                .map(ValuePath::Blob)
                .ok_or_else(|| format!("{s:?} is not a blob hash (blake3: and 64 hex digits)"));
        }
        let Some(rest) = s.strip_prefix('/') else {
            return Err(format!("{s:?} is not a value path: use one of {FORMS}"));
        };
        let segs = rest
            .split('/')
            .map(unescape)
            .collect::<Result<Vec<_>, _>>()?;
        let tail = |from: usize| segs[from.min(segs.len())..].to_vec();
        let call = |i: usize| {
            segs.get(i)
                .filter(|c| !c.is_empty())
                .cloned()
                .ok_or_else(|| format!("{s:?} names no call id after /calls/"))
        };
        Ok(match segs[0].as_str() {
            "input" => ValuePath::Input(tail(1)),
            "output" => ValuePath::Output(tail(1)),
            "state" if segs.len() >= 2 && !segs[1].is_empty() => ValuePath::State(tail(1)),
            "state" => return Err(format!("{s:?}: name a state field, as /state/FIELD")),
            "calls" => match segs.get(2).map(String::as_str) {
                Some("args") => ValuePath::Args {
                    call: call(1)?,
                    at: tail(3),
                },
                Some("reply") => ValuePath::Reply {
                    call: call(1)?,
                    at: tail(3),
                },
                _ => {
                    return Err(format!(
                        "{s:?}: a call's values are /calls/CALL/args/… and /calls/CALL/reply/…"
                    ));
                }
            },
            "facts" => ValuePath::Fact {
                n: segs
                    .get(1)
                    .and_then(|n| n.parse().ok())
                    .filter(|n| *n >= 1)
                    .ok_or_else(|| format!("{s:?}: /facts/ takes a fact number from 1"))?,
                at: tail(2),
            },
            _ => return Err(format!("{s:?} is not a value path: use one of {FORMS}")),
        })
    }
}

impl fmt::Display for ValuePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ptr = |at: &[String]| {
            at.iter()
                .map(|s| format!("/{}", pointer_token(s)))
                .collect::<String>()
        };
        match self {
            ValuePath::Input(at) => write!(f, "/input{}", ptr(at)),
            ValuePath::State(at) => write!(f, "/state{}", ptr(at)),
            ValuePath::Output(at) => write!(f, "/output{}", ptr(at)),
            ValuePath::Args { call, at } => {
                write!(f, "/calls/{}/args{}", pointer_token(call), ptr(at))
            }
            ValuePath::Reply { call, at } => {
                write!(f, "/calls/{}/reply{}", pointer_token(call), ptr(at))
            }
            ValuePath::Fact { n, at } => write!(f, "/facts/{n}{}", ptr(at)),
            ValuePath::Blob(h) => f.write_str(&hash_text(h)),
        }
    }
}

/// Where a path's pointer ends in one fact.
enum Reached {
    /// At a reference: the blob to make a hole.
    Blob([u8; 32]),
    /// Inside a value that is a hole already.
    Hole([u8; 32]),
    /// At an inline value: there is no blob to make a hole.
    Inline,
}

/// The stored values of `typed` (whose stored form is `fact`) that `path`
/// names, each with the pointer left to follow in it. Which fact it is
/// comes from the typed fact; the values come from the stored form: the
/// blob references a hole is made of, and a Checkpoint stored as a delta,
/// are only there.
fn positions<'a>(
    path: &'a ValuePath,
    typed: &Fact,
    fact: &'a Value,
) -> Vec<(&'a Value, &'a [String])> {
    let at = |v: Option<&'a Value>, rest: &'a [String]| v.map(|v| (v, rest)).into_iter().collect();
    match (path, typed) {
        (ValuePath::Input(p), Fact::Start { .. }) => at(fact.get("input"), p),
        (ValuePath::Output(p), Fact::End { .. }) => at(fact.pointer("/ending/Completed/output"), p),
        (ValuePath::Args { call, at: p }, Fact::Call { call: c, .. }) if c.as_str() == call => {
            at(fact.get("args"), p)
        }
        (ValuePath::Reply { call, at: p }, Fact::Reply { call: c, .. }) if c.as_str() == call => {
            let outcome = fact.get("outcome");
            at(
                outcome
                    .and_then(|o| o.get("Ok"))
                    .or_else(|| outcome.and_then(|o| o.get("Failed"))),
                p,
            )
        }
        (ValuePath::State(p), Fact::Checkpoint { .. }) => match fact.get("state") {
            Some(state) if !state.is_null() => at(Some(state), p),
            _ => match p.split_first() {
                Some((field, rest)) => at(
                    fact.pointer("/delta/set")
                        .and_then(|s| s.get(escape_key(field))),
                    rest,
                ),
                None => Vec::new(),
            },
        },
        (ValuePath::Fact { n, at: p }, _) if typed.n() == *n => at(Some(fact), p),
        _ => Vec::new(),
    }
}

/// Follows `rest` from `v`, loading the blobs on the way.
fn follow(
    db: &mut dyn ReadDb,
    holes: &HashSet<[u8; 32]>,
    v: &Value,
    rest: &[String],
) -> Result<Option<Reached>> {
    if let Value::Object(m) = v
        && let Some(r) = as_reference(m)
    {
        let (h, _) = r.map_err(|reason| Error::CorruptBlob {
            hash: String::new(),
            reason,
        })?;
        if rest.is_empty() {
            return Ok(Some(Reached::Blob(h)));
        }
        if holes.contains(&h) {
            return Ok(Some(Reached::Hole(h)));
        }
        let inner = stored_value(db, &h)?;
        return follow(db, holes, &inner, rest);
    }
    let Some((seg, rest)) = rest.split_first() else {
        return Ok(Some(Reached::Inline));
    };
    let next = match v {
        Value::Object(m) => m.get(&escape_key(seg)),
        Value::Array(a) => seg.parse::<usize>().ok().and_then(|i| a.get(i)),
        _ => None,
    };
    match next {
        Some(n) => follow(db, holes, n, rest),
        None => Ok(None),
    }
}

/// Adds `h` and every blob nested in it (not holes, not missing) to `out`.
fn with_nested(
    db: &mut dyn ReadDb,
    holes: &HashSet<[u8; 32]>,
    h: [u8; 32],
    out: &mut BTreeSet<[u8; 32]>,
) -> Result<()> {
    if !out.insert(h) || holes.contains(&h) || db.load_blob(&h)?.is_none() {
        return Ok(());
    }
    let mut refs = Vec::new();
    collect_refs(&stored_value(db, &h)?, &mut refs).map_err(|reason| Error::CorruptBlob {
        hash: hash_text(&h),
        reason,
    })?;
    for (inner, _) in refs {
        with_nested(db, holes, inner, out)?;
    }
    Ok(())
}

/// The blobs `targets` reach in `run`'s verified history, with every blob
/// nested in them, in hash order. A target that names no value of the
/// run, or only values stored inline, is refused, saying what to do.
pub(crate) fn reached(
    db: &mut dyn ReadDb,
    run: &RunId,
    targets: &[ValuePath],
) -> Result<Vec<[u8; 32]>> {
    if targets.is_empty() {
        return Err(Error::InvalidArgument(
            "name at least one value to redact (a path such as /input/ssn, or a blob hash)".into(),
        ));
    }
    let history = read_history(db, run)?;
    let key = run_key(db, run)?;
    let holes: HashSet<[u8; 32]> = db.holes(key)?.into_iter().collect();
    let facts: Vec<Value> = history.facts.iter().map(|f| f.stored_json()).collect();
    let mut out = BTreeSet::new();
    let mut every: Option<BTreeSet<[u8; 32]>> = None;
    for target in targets {
        if let ValuePath::Blob(h) = target {
            if every.is_none() {
                let mut all = BTreeSet::new();
                for f in &facts {
                    let mut refs = Vec::new();
                    collect_refs(f, &mut refs).map_err(Error::InvalidFact)?;
                    for (r, _) in refs {
                        with_nested(db, &holes, r, &mut all)?;
                    }
                }
                every = Some(all);
            }
            if !every.as_ref().is_some_and(|all| all.contains(h)) {
                return Err(Error::InvalidArgument(format!(
                    "blob {} is not a value of run {run}",
                    hash_text(h)
                )));
            }
            with_nested(db, &holes, *h, &mut out)?;
            continue;
        }
        let (mut named, mut blobs) = (false, 0usize);
        for (stored, f) in history.facts.iter().zip(&facts) {
            for (v, rest) in positions(target, &stored.fact, f) {
                match follow(db, &holes, v, rest)? {
                    None => {}
                    Some(Reached::Inline) => named = true,
                    Some(Reached::Blob(h)) | Some(Reached::Hole(h)) => {
                        named = true;
                        blobs += 1;
                        with_nested(db, &holes, h, &mut out)?;
                    }
                }
            }
        }
        if !named {
            return Err(Error::InvalidArgument(format!(
                "{target} names no value of run {run} (paths: {FORMS})"
            )));
        }
        if blobs == 0 {
            return Err(Error::InvalidArgument(format!(
                "the value at {target} of run {run} is stored inline (under 1 KiB): it is part of a chained fact's bytes and cannot become a hole; declare it in the flow's runtime_hints.sensitive to make it redactable in runs started from then on, or redact an enclosing value stored as a blob"
            )));
        }
    }
    Ok(out.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_parse_and_print_back() {
        for s in [
            "/input/ssn",
            "/input",
            "/state/notes/2",
            "/output/text",
            "/calls/c1:root~1branch-a#2/args/q",
            "/calls/c1:root#1/reply",
            "/facts/7/delta/append/log/0",
        ] {
            assert_eq!(ValuePath::parse(s).unwrap().to_string(), s);
        }
        let h = format!("blake3:{}", "ab".repeat(32));
        assert_eq!(ValuePath::parse(&h).unwrap().to_string(), h);
        for bad in [
            "input/x",
            "/nope",
            "/state",
            "/calls/c1/x",
            "/facts/0",
            "/input/a~2",
            "blake3:zz",
        ] {
            assert!(ValuePath::parse(bad).is_err(), "{bad}");
        }
    }
}
