//! Every case of `../shared/vectors/values.json` (read in place, never
//! copied): schema → type, then decode the raw input and compare the
//! canonical text, or expect a refusal.

use flow_abi::schema::{self, ReadContext};
use flow_abi::{TypeSet, decode};
use std::path::PathBuf;

fn shared_dir() -> PathBuf {
    std::env::var_os("FLOW_SHARED").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared"),
        PathBuf::from,
    )
}

#[test]
fn values_json_vectors() {
    let path = shared_dir().join("vectors/values.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let cases = doc["cases"].as_array().unwrap();
    assert!(cases.len() >= 50, "the vector file shrank");
    let mut failures = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let name = case["name"].as_str().unwrap();
        let mut types = TypeSet::new();
        let mut ctx = ReadContext::new(&mut types, "vectors.json");
        let ty = schema::read(&case["schema"], &format!("case{i}"), "", &mut ctx);
        let Some(ty) = ty else {
            failures.push(format!("{name}: schema not read: {:?}", ctx.diagnostics));
            continue;
        };
        let input = case["input"].as_str().unwrap();
        let got = decode(input, &ty, &types);
        match (case.get("canonical"), got) {
            (Some(want), Ok(v)) => {
                let want = want.as_str().unwrap();
                if v.canonical() != want {
                    failures.push(format!("{name}: got {}, want {want}", v.canonical()));
                }
            }
            (Some(_), Err(e)) => failures.push(format!("{name}: refused: {e}")),
            (None, Ok(v)) => failures.push(format!("{name}: accepted as {}", v.canonical())),
            (None, Err(e)) => {
                // A refusal must say where and what.
                let msg = e.to_string();
                if !msg.starts_with('$') || msg.len() < 5 {
                    failures.push(format!("{name}: unclear error {msg:?}"));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
