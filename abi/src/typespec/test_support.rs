//! Builders and assertions shared by the typespec unit tests.

use crate::typespec::{TypeSpec, TypeSpecError};
use serde_json::{Value as Json, json};

pub(super) fn spec_errors(v: Json) -> Vec<TypeSpecError> {
    match TypeSpec::from_json(&v) {
        Ok(_) => Vec::new(),
        Err(e) => e,
    }
}

/// Asserts that `v` is refused with a problem at `pointer` whose message
/// contains `needle`.
#[track_caller]
pub(super) fn refused(v: Json, pointer: &str, needle: &str) {
    let errs = spec_errors(v);
    assert!(
        errs.iter()
            .any(|e| e.pointer == pointer && e.message.contains(needle)),
        "expected a problem at {pointer:?} containing {needle:?}, got {errs:#?}"
    );
}

#[track_caller]
pub(super) fn accepted(v: Json) -> TypeSpec {
    match TypeSpec::from_json(&v) {
        Ok(s) => {
            assert_eq!(s.to_json(), v, "round trip");
            s
        }
        Err(e) => panic!("refused: {e:#?}"),
    }
}

pub(super) fn record(name: &str, generic: Json, fields: Json) -> Json {
    json!({
        "name": name, "identity": format!("acme@1.0/lib.flow.{name}"),
        "lexical_ordinal": 1, "generic": generic, "opaque": false,
        "kind": "record", "doc": null, "fields": fields
    })
}

pub(super) fn named(id: &str, args: Json) -> Json {
    json!({"Named": {"declaration": id, "args": args}})
}

pub(super) fn param(owner: &str, index: u64) -> Json {
    json!({"Param": {"owner": owner, "index": index}})
}

/// A non-generic Tool: `(query: Text) -> Result<Int, Err>`.
pub(super) fn simple() -> Json {
    json!({
        "generic": [],
        "params": [{"name": "query", "type": "Text"}],
        "ok": "Int",
        "err": named("e", json!([])),
        "declarations": {
            "e": record("Err", json!([]), json!([{"name": "message", "type": "Text", "doc": "why"}]))
        }
    })
}

/// A generic Tool: `<T>(items: List<T>) -> Result<Box<T>, Text>` with
/// `Box<A> { value: A }`.
pub(super) fn generic() -> Json {
    json!({
        "generic": ["T"],
        "params": [{"name": "items", "type": {"List": param("tool", 0)}}],
        "ok": named("box", json!([param("tool", 0)])),
        "err": "Text",
        "declarations": {
            "box": record("Box", json!(["A"]), json!([{"name": "value", "type": param("box", 0), "doc": null}]))
        }
    })
}

/// `v` with the member at `pointer` set (an object member is added when
/// missing).
pub(super) fn with(mut v: Json, pointer: &str, new: Json) -> Json {
    if let Some(slot) = v.pointer_mut(pointer) {
        *slot = new;
        return v;
    }
    let (parent, key) = pointer.rsplit_once('/').expect("a pointer");
    match v.pointer_mut(parent) {
        Some(Json::Object(m)) => {
            m.insert(key.replace("~1", "/").replace("~0", "~"), new);
        }
        _ => panic!("no object at {parent}"),
    }
    v
}

pub(super) fn without(mut v: Json, pointer: &str, key: &str) -> Json {
    match v.pointer_mut(pointer) {
        Some(Json::Object(m)) => {
            m.remove(key);
        }
        _ => panic!("no object at {pointer}"),
    }
    v
}

#[track_caller]
pub(super) fn bad_term(term: Json, pointer: &str, needle: &str) {
    let v = with(generic(), "/params/0/type", term);
    refused(v, &format!("/params/0/type{pointer}"), needle);
}
