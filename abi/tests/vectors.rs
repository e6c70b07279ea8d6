//! Value vectors: for each case, schema → type, then decode the raw input
//! and compare the canonical text, or expect a refusal that says where and
//! what. The repository's own vectors (`tests/fixtures/values.json`) always
//! run; the shared upstream vectors are an extra conformance pass
//! (`shared_values_vectors`, run by `.ci/run` when `../shared` exists).

#[path = "../../tests/fixtures/fixtures.rs"]
mod fixtures;

use flow_abi::schema::{self, ReadContext};
use flow_abi::{TypeSet, decode};
use serde_json::Value as Json;
use std::collections::BTreeSet;
use std::path::Path;

/// Runs every case of a vector file; returns the rules it covered.
fn check_vectors(path: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let doc: Json = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()));
    let cases = doc["cases"]
        .as_array()
        .unwrap_or_else(|| panic!("{} has no `cases` list", path.display()));
    let mut rules = BTreeSet::new();
    let mut names = BTreeSet::new();
    let mut failures = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let name = case["name"]
            .as_str()
            .unwrap_or_else(|| panic!("case {i} has no name"));
        let name = match case["rule"].as_str() {
            Some(rule) => {
                rules.insert(rule.to_string());
                format!("{rule}: {name}")
            }
            None => name.to_string(),
        };
        assert!(names.insert(name.clone()), "two cases are named {name:?}");
        let mut types = TypeSet::new();
        let mut ctx = ReadContext::new(&mut types, "values.json");
        let ty = schema::read(&case["schema"], &format!("case{i}"), "", &mut ctx);
        let Some(ty) = ty else {
            failures.push(format!("{name}: schema not read: {:?}", ctx.diagnostics));
            continue;
        };
        let input = case["input"]
            .as_str()
            .unwrap_or_else(|| panic!("{name}: input is not a string"));
        let got = decode(input, &ty, &types);
        match (case.get("canonical"), case.get("error"), got) {
            (Some(want), None, Ok(v)) => {
                let want = want.as_str().unwrap_or_else(|| panic!("{name}: canonical"));
                if v.canonical() != want {
                    failures.push(format!("{name}: got {}, want {want}", v.canonical()));
                }
            }
            (Some(_), None, Err(e)) => failures.push(format!("{name}: refused: {e}")),
            (None, Some(_), Ok(v)) => {
                failures.push(format!("{name}: accepted as {}", v.canonical()))
            }
            (None, Some(want), Err(e)) => {
                // A refusal says where (a JSONPath) and what.
                let msg = e.to_string();
                if !msg.starts_with('$') || msg.len() < 5 {
                    failures.push(format!("{name}: unclear error {msg:?}"));
                }
                if let Some(part) = want.as_str()
                    && !msg.contains(part)
                {
                    failures.push(format!("{name}: error {msg:?} does not say {part:?}"));
                }
            }
            _ => failures.push(format!("{name}: needs exactly one of canonical or error")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    rules
}

/// The repository's vectors: every type, canonical forms, numbers by value,
/// limits, escapes and refusals (ENC-3…ENC-17, DEC-2…DEC-8, GAP-DEC-1/3).
#[test]
fn value_vectors() {
    let rules = check_vectors(&fixtures::repo().join("abi/tests/fixtures/values.json"));
    let want = [
        "int",
        "decimal",
        "text",
        "bool",
        "unit",
        "record",
        "enum",
        "list",
        "set",
        "tuple",
        "dict",
        "named",
        "instant",
        "duration",
        "bytes",
        "json",
        "assertion",
    ];
    for rule in want {
        assert!(rules.contains(rule), "no case covers {rule}");
    }
}

/// The shared upstream vectors, read in place.
#[test]
#[ignore = "shared conformance: run by .ci/run when ../shared exists"]
fn shared_values_vectors() {
    let Some(dir) = fixtures::shared("vectors") else {
        return;
    };
    check_vectors(&dir.join("values.json"));
}
