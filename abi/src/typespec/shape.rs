//! Strict readers of JSON shapes shared by both term languages: objects with
//! exact members, names, docs, integers, and a term's outer form. Every
//! problem goes into a [`Sink`] with its JSON Pointer.

use super::{Prim, TypeSpecError};
use crate::limits;
use crate::number::Num;
use serde_json::{Map, Value as Json};
use std::collections::BTreeMap;

// ---------------------------------------------------------------------------
// Reading: shapes.
// ---------------------------------------------------------------------------

#[derive(Default)]
pub(super) struct Sink(pub(super) Vec<TypeSpecError>);

impl Sink {
    pub(super) fn err(&mut self, at: &str, message: impl Into<String>) {
        self.0.push(err_at(at, message));
    }
}

pub(super) fn err_at(at: &str, message: impl Into<String>) -> TypeSpecError {
    TypeSpecError {
        pointer: at.to_string(),
        message: message.into(),
    }
}

/// `at` extended by one object key, escaped as RFC 6901 says.
pub(super) fn ptr(at: &str, key: &str) -> String {
    format!("{at}/{}", key.replace('~', "~0").replace('/', "~1"))
}

pub(super) fn ptr_i(at: &str, i: usize) -> String {
    format!("{at}/{i}")
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

pub(super) fn as_object<'a>(
    v: &'a Json,
    at: &str,
    what: &str,
    sink: &mut Sink,
) -> Option<&'a Map<String, Json>> {
    match v {
        Json::Object(m) => Some(m),
        other => {
            sink.err(
                at,
                format!("expected {what} (an object), found {}", json_kind(other)),
            );
            None
        }
    }
}

pub(super) fn as_array<'a>(
    v: &'a Json,
    at: &str,
    what: &str,
    sink: &mut Sink,
) -> Option<&'a Vec<Json>> {
    match v {
        Json::Array(a) => Some(a),
        other => {
            sink.err(
                at,
                format!("expected {what} (an array), found {}", json_kind(other)),
            );
            None
        }
    }
}

/// Reports missing required members and members that are neither required
/// nor optional. Returns whether the object has exactly the allowed shape.
pub(super) fn check_members(
    m: &Map<String, Json>,
    at: &str,
    required: &[&str],
    optional: &[&str],
    what: &str,
    sink: &mut Sink,
) -> bool {
    let mut ok = true;
    for r in required {
        if !m.contains_key(*r) {
            sink.err(at, format!("{what} is missing member \"{r}\""));
            ok = false;
        }
    }
    for k in m.keys() {
        if !required.contains(&k.as_str()) && !optional.contains(&k.as_str()) {
            sink.err(&ptr(at, k), format!("unknown member \"{k}\" in {what}"));
            ok = false;
        }
    }
    ok
}

pub(super) fn read_name(v: &Json, at: &str, what: &str, sink: &mut Sink) -> Option<String> {
    match v {
        Json::String(s) if !s.is_empty() => Some(s.clone()),
        Json::String(_) => {
            sink.err(at, format!("{what} must not be empty"));
            None
        }
        other => {
            sink.err(
                at,
                format!("expected {what} (a string), found {}", json_kind(other)),
            );
            None
        }
    }
}

pub(super) fn read_doc(v: &Json, at: &str, sink: &mut Sink) -> Option<Option<String>> {
    match v {
        Json::Null => Some(None),
        Json::String(s) => Some(Some(s.clone())),
        other => {
            sink.err(
                at,
                format!(
                    "expected doc (a string or null), found {}",
                    json_kind(other)
                ),
            );
            None
        }
    }
}

pub(super) fn read_bool(v: &Json, at: &str, what: &str, sink: &mut Sink) -> Option<bool> {
    match v {
        Json::Bool(b) => Some(*b),
        other => {
            sink.err(
                at,
                format!("expected {what} (a boolean), found {}", json_kind(other)),
            );
            None
        }
    }
}

/// Reads an integer at least `min`, judged by value (so `1.0` and `1e0` are
/// 1), never expanding a huge exponent.
pub(super) fn read_uint(v: &Json, at: &str, what: &str, min: u64, sink: &mut Sink) -> Option<u64> {
    let expected = if min == 0 {
        "a nonnegative integer"
    } else {
        "a positive integer"
    };
    let Json::Number(n) = v else {
        sink.err(
            at,
            format!("expected {what} ({expected}), found {}", json_kind(v)),
        );
        return None;
    };
    let parsed = Num::parse(n.as_str().as_bytes())
        .ok()
        .filter(|x| x.is_integer() && !x.is_negative());
    let Some(num) = parsed else {
        sink.err(
            at,
            format!("expected {what} ({expected}), found {}", n.as_str()),
        );
        return None;
    };
    // u64::MAX has 20 digits; anything longer is out of range without
    // writing it out.
    let value = if num.integer_digits() > 20 {
        None
    } else {
        num.canonical().parse::<u64>().ok()
    };
    match value {
        Some(x) if x >= min => Some(x),
        Some(_) => {
            sink.err(
                at,
                format!("expected {what} ({expected}), found {}", n.as_str()),
            );
            None
        }
        None => {
            sink.err(at, format!("{what} is out of range (at most {})", u64::MAX));
            None
        }
    }
}

/// An array of unique, non-empty names.
pub(super) fn read_names(v: &Json, at: &str, what: &str, sink: &mut Sink) -> Option<Vec<String>> {
    let arr = as_array(v, at, what, sink)?;
    let mut out = Vec::with_capacity(arr.len());
    let mut ok = true;
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, item) in arr.iter().enumerate() {
        let at_i = ptr_i(at, i);
        match read_name(item, &at_i, "a name", sink) {
            Some(name) => {
                if let Json::String(s) = item
                    && let Some(first) = seen.insert(s.as_str(), i)
                {
                    sink.err(
                        &at_i,
                        format!("duplicate name \"{s}\" in {what} (also at index {first})"),
                    );
                    ok = false;
                }
                out.push(name);
            }
            None => ok = false,
        }
    }
    ok.then_some(out)
}

/// What every term is: a primitive by name, or a one-member object
/// `{tag: inner}` (`at` is the inner term's pointer).
pub(super) enum TermForm<'v> {
    Prim(Prim),
    Compound {
        tag: &'v str,
        inner: &'v Json,
        at: String,
    },
}

/// Reads a term's form, refusing (into `sink`) a term nested too deep, an
/// unknown name, an object without exactly one member, or any other JSON.
/// `noun` names the primitives in the message.
pub(super) fn term_form<'v>(
    v: &'v Json,
    at: &str,
    depth: usize,
    noun: &str,
    sink: &mut Sink,
) -> Option<TermForm<'v>> {
    if depth >= limits::MAX_DEPTH {
        sink.err(at, format!("term nested deeper than {}", limits::MAX_DEPTH));
        return None;
    }
    match v {
        Json::String(s) => match Prim::from_name(s) {
            Some(p) => Some(TermForm::Prim(p)),
            None => {
                sink.err(at, format!("unknown term \"{s}\""));
                None
            }
        },
        Json::Object(m) => {
            let mut members = m.iter();
            let (Some((tag, inner)), None) = (members.next(), members.next()) else {
                sink.err(
                    at,
                    format!(
                        "a compound term is an object with exactly one member, found {}",
                        m.len()
                    ),
                );
                return None;
            };
            Some(TermForm::Compound {
                tag,
                inner,
                at: ptr(at, tag),
            })
        }
        other => {
            sink.err(
                at,
                format!(
                    "expected a term (a {noun} name or a one-member object), found {}",
                    json_kind(other)
                ),
            );
            None
        }
    }
}

/// The parts of a `Dict` (exactly two) or a `Tuple` (at least two).
pub(super) fn term_parts<'v>(
    inner: &'v Json,
    at: &str,
    tag: &str,
    sink: &mut Sink,
) -> Option<&'v [Json]> {
    let (what, ok, rule) = match tag {
        "Dict" => (
            "Dict's [key, value]",
            inner.as_array().is_some_and(|a| a.len() == 2),
            "exactly two",
        ),
        _ => (
            "Tuple's parts",
            inner.as_array().is_some_and(|a| a.len() >= 2),
            "at least two",
        ),
    };
    let arr = as_array(inner, at, what, sink)?;
    if !ok {
        sink.err(at, format!("{tag} holds {rule} terms, found {}", arr.len()));
        return None;
    }
    Some(arr)
}
