//! What the run query indexes beyond a Start's own columns (issue 38 item
//! 1), decided here once for every backend: the root flow's id, a faulted
//! run's reason, and the run's search attributes — named typed values
//! (string, integer, boolean) that the root FlowSpec document declares in
//! `runtime_hints.search_attributes` as JSON pointers into `{"input": …}`:
//!
//! ```json
//! "runtime_hints": { "search_attributes": { "customer": "/input/customer" } }
//! ```
//!
//! A pointer into `{"state": …}` (`"/state/stage"`) takes its value from
//! the run's state at each Checkpoint instead: the latest Checkpoint's
//! value replaces the one before (none, when its state has no such value).
//!
//! The store reads input attributes once, when the run's Start is written
//! (or imported), and state attributes with each Checkpoint, into the
//! `run_attrs` side table; the history's bytes are never touched. A
//! declaration the store cannot use (a bad name, a pointer outside `/input`
//! and `/state`) is skipped, and so is a value of another type or a
//! string longer than [`MAX_TEXT`]: the run is simply not found by it.

use serde_json::Value;

/// Longest attribute name.
pub const MAX_NAME: usize = 64;
/// Longest string value indexed (bytes).
pub const MAX_TEXT: usize = 256;
/// Most attributes indexed per run.
pub const MAX_ATTRS: usize = 16;

/// An attribute name: 1 to 64 of `[A-Za-z0-9_.-]`.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// The indexed text of a value a query or a run gives: its canonical JSON
/// (`"acme"`, `42`, `true`); `None` for a type the index does not keep.
pub fn value_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) if s.len() <= MAX_TEXT => Some(Value::String(s.clone()).to_string()),
        Value::Number(n) if n.is_i64() || n.is_u64() => n.as_i64().map(|i| i.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// The root document's `id` and its search attribute declarations
/// `(name, pointer into {"input": …})`, from the root source's text.
pub(crate) fn root_doc(text: &str) -> (Option<String>, Vec<(String, String)>) {
    let Ok(Value::Object(doc)) = serde_json::from_str::<Value>(text) else {
        return (None, Vec::new());
    };
    let id = doc.get("id").and_then(Value::as_str).map(str::to_string);
    let decls = doc
        .get("runtime_hints")
        .and_then(|h| h.get("search_attributes"))
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter(|(name, _)| valid_name(name))
                .filter_map(|(name, p)| Some((name.clone(), p.as_str()?.to_string())))
                .filter(|(_, p)| {
                    ["/input", "/state"]
                        .iter()
                        .any(|r| p == r || p.starts_with(&format!("{r}/")))
                })
                .take(MAX_ATTRS)
                .collect()
        })
        .unwrap_or_default();
    (id, decls)
}

/// Most sensitive pointers a flow declares that the store keeps.
pub const MAX_SENSITIVE: usize = 64;

/// The pointers the root document declares in `runtime_hints.sensitive`
/// (docs/custody.md "Sensitive values"): JSON pointers into `{"input": …}`
/// or `{"state": …}` whose values are always stored as blobs, so that they
/// can become holes. A pointer outside `/input/…` and `/state/FIELD…` is
/// skipped (the checker does not read this hint; the store does, as it
/// reads `search_attributes`).
pub(crate) fn sensitive_of(text: &str) -> Vec<String> {
    let Ok(Value::Object(doc)) = serde_json::from_str::<Value>(text) else {
        return Vec::new();
    };
    doc.get("runtime_hints")
        .and_then(|h| h.get("sensitive"))
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .filter_map(Value::as_str)
                .filter(|p| p.starts_with("/input/") || p.starts_with("/state/"))
                .take(MAX_SENSITIVE)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// The pins of the sensitive pointers under `root` (`input` or `state`):
/// each pointer's segments after the root, unescaped (`~1` `/`, `~0` `~`).
pub(crate) fn pins_in<'a>(
    pointers: impl IntoIterator<Item = &'a str>,
    root: &str,
) -> crate::merkle::Pins {
    let top = format!("/{root}/");
    crate::merkle::Pins::new(
        pointers
            .into_iter()
            .filter_map(|p| p.strip_prefix(&top))
            .map(|rest| {
                rest.split('/')
                    .map(|s| s.replace("~1", "/").replace("~0", "~"))
                    .collect()
            })
            .collect(),
    )
}

/// The declarations that point into `root` (`input` or `state`).
pub(crate) fn decls_in(decls: &[(String, String)], root: &str) -> Vec<(String, String)> {
    let top = format!("/{root}");
    decls
        .iter()
        .filter(|(_, p)| *p == top || p.starts_with(&format!("{top}/")))
        .cloned()
        .collect()
}

/// The attributes `(name, value text)` a run's input gives its declarations.
pub(crate) fn attrs_of(decls: &[(String, String)], input: &Value) -> Vec<(String, String)> {
    attrs_at(decls, "input", input)
}

/// The attributes `(name, value text)` that `value`, the run's `root`
/// (`input` or `state`), gives the declarations pointing into it.
pub(crate) fn attrs_at(
    decls: &[(String, String)],
    root: &str,
    value: &Value,
) -> Vec<(String, String)> {
    let top = format!("/{root}");
    let mut out: Vec<(String, String)> = decls
        .iter()
        .filter_map(|(name, p)| {
            let rest = p.strip_prefix(&top)?;
            if !(rest.is_empty() || rest.starts_with('/')) {
                return None;
            }
            Some((name.clone(), value_text(value.pointer(rest)?)?))
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn declarations_and_values() {
        let doc = json!({"id": "orders", "runtime_hints": {"search_attributes": {
            "customer": "/input/customer", "n": "/input/n", "vip": "/input/vip",
            "bad name": "/input/x", "state": "/state/x", "deep": "/input/a/b"}}})
        .to_string();
        let (id, decls) = root_doc(&doc);
        assert_eq!(id.as_deref(), Some("orders"));
        assert_eq!(decls.len(), 5);
        assert_eq!(
            attrs_at(&decls_in(&decls, "state"), "state", &json!({"x": "s"})),
            vec![("state".to_string(), "\"s\"".to_string())]
        );
        let attrs = attrs_of(
            &decls,
            &json!({"customer": "acme", "n": 42, "vip": true, "a": {"b": 1.5}}),
        );
        assert_eq!(
            attrs,
            vec![
                ("customer".to_string(), "\"acme\"".to_string()),
                ("n".to_string(), "42".to_string()),
                ("vip".to_string(), "true".to_string()),
            ]
        );
        assert_eq!(root_doc("not json"), (None, Vec::new()));
    }
}
