//! One FlowSpec file per check rule, good and bad, under
//! `tests/flows/check/` (issue 4, "Tests"). A bad file names the requirement
//! it breaks and the diagnostics (code and JSON Pointer) it must produce;
//! it is either a whole `flow` or a `patch` (RFC 6902 add/replace/remove) of
//! the good `kitchen-sink` flow, so each file shows exactly the mistake. A
//! good file must check with no errors.

use flow_engine::{Code, Severity, check};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::PathBuf;

fn files(kind: &str) -> Vec<(String, Value)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/flows/check")
        .join(kind);
    let mut out: Vec<(String, Value)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            let name = p.file_stem().unwrap().to_string_lossy().to_string();
            (name, flow_abi::json::parse(&text).unwrap())
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// The flow a bad file describes: its `flow`, or its `base` with `patch`.
fn bad_flow(doc: &Value) -> Value {
    if let Some(f) = doc.get("flow") {
        return f.clone();
    }
    let base = doc["base"].as_str().unwrap();
    let (_, good) = files("good").into_iter().find(|(n, _)| n == base).unwrap();
    let mut flow = good["flow"].clone();
    for op in doc["patch"].as_array().unwrap() {
        apply(&mut flow, op);
    }
    flow
}

/// The add/replace/remove subset of RFC 6902 JSON Patch.
fn apply(doc: &mut Value, op: &Value) {
    let path = op["path"].as_str().unwrap();
    let (parent, last) = path.rsplit_once('/').unwrap();
    let last = last.replace("~1", "/").replace("~0", "~");
    let target = doc
        .pointer_mut(parent)
        .unwrap_or_else(|| panic!("no {parent}"));
    match (op["op"].as_str().unwrap(), target) {
        ("remove", Value::Array(a)) => {
            a.remove(last.parse().unwrap());
        }
        ("remove", Value::Object(m)) => {
            m.remove(&last).unwrap();
        }
        ("add", Value::Array(a)) if last == "-" => a.push(op["value"].clone()),
        ("add", Value::Array(a)) => a.insert(last.parse().unwrap(), op["value"].clone()),
        ("replace", Value::Array(a)) => a[last.parse::<usize>().unwrap()] = op["value"].clone(),
        ("add", Value::Object(m)) => {
            m.insert(last, op["value"].clone());
        }
        ("replace", Value::Object(m)) => {
            assert!(m.contains_key(&last), "replace of a missing {path}");
            m.insert(last, op["value"].clone());
        }
        (o, _) => panic!("unsupported patch op {o} at {path}"),
    }
}

#[test]
fn good_flows_check_without_errors() {
    let good = files("good");
    assert!(good.len() >= 3);
    for (name, doc) in good {
        let report = check(&doc["flow"]);
        let errors: Vec<String> = report.errors().map(|d| d.to_string()).collect();
        assert!(errors.is_empty(), "{name}: {errors:#?}");
        assert!(report.flow().is_some());
    }
}

/// The kitchen-sink flow covers all 14 base node types (FS-NODE-2) and
/// both edge types (FS-EDGE-1, FS-EDGE-4), with no warnings at all.
#[test]
fn kitchen_sink_covers_every_base_type_cleanly() {
    let (_, doc) = files("good")
        .into_iter()
        .find(|(n, _)| n == "kitchen-sink")
        .unwrap();
    let report = check(&doc["flow"]);
    assert!(report.diagnostics.is_empty(), "{:#?}", report.diagnostics);
    let types: BTreeSet<&str> = report
        .flow
        .nodes
        .iter()
        .map(|n| n.kind.type_name())
        .collect();
    assert_eq!(types.len(), 14, "{types:?}");
    // Every schema was read into a type (DESIGN §2).
    assert_eq!(
        report.schema_types.len(),
        5,
        "{:?}",
        report.schema_types.keys()
    );
}

#[test]
fn bad_flows_report_exactly_where() {
    let bad = files("bad");
    assert!(bad.len() >= 60);
    for (name, doc) in &bad {
        let report = check(&bad_flow(doc));
        assert!(
            doc["requirement"].is_string(),
            "{name} names no requirement"
        );
        for want in doc["expect"].as_array().unwrap() {
            let code = want["code"].as_str().unwrap();
            let pointer = want["pointer"].as_str().unwrap();
            let found = report
                .diagnostics
                .iter()
                .find(|d| d.code.code() == code && d.pointer == pointer);
            let Some(d) = found else {
                panic!(
                    "{name}: expected {code} at {pointer}, got:\n{}",
                    report
                        .diagnostics
                        .iter()
                        .map(|d| format!("  {d}\n"))
                        .collect::<String>()
                );
            };
            assert_eq!(d.severity, d.code.severity());
            if d.severity == Severity::Error {
                assert!(
                    report.flow().is_none(),
                    "{name}: an error must withhold the flow"
                );
            }
        }
    }
}

/// Every diagnostic code has at least one bad flow that produces it.
#[test]
fn every_code_is_exercised() {
    let mut seen = BTreeSet::new();
    for (_, doc) in files("bad") {
        for d in check(&bad_flow(&doc)).diagnostics {
            seen.insert(d.code);
        }
    }
    let missing: Vec<&Code> = Code::ALL.iter().filter(|c| !seen.contains(c)).collect();
    assert!(
        missing.is_empty(),
        "codes no bad flow produces: {missing:?}"
    );
}

/// All problems are reported at once: two unrelated mistakes give two errors.
#[test]
fn reports_everything_at_once() {
    let (_, doc) = files("good")
        .into_iter()
        .find(|(n, _)| n == "kitchen-sink")
        .unwrap();
    let mut flow = doc["flow"].clone();
    flow["id"] = "Bad_Id".into();
    flow["nodes"][1]["fail_branch"]["target"] = "nowhere".into();
    flow["nodes"][7]["on_timeout"] = "explode".into();
    let report = check(&flow);
    let codes: Vec<&str> = report.errors().map(|d| d.code.code()).collect();
    assert_eq!(codes, ["FS0201", "FS0205", "FS0104"]);
}
