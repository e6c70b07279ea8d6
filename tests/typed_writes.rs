//! Every write to state is checked against `state_schema` (issue 11, item
//! 2), with the real `flow` binary and the real flow-llm offline model:
//! where the value's type is known before the run, `flow check` refuses
//! with a located FS0901 and `flow run` records nothing; where it is only
//! known at the write (a structured answer, a person's reply), the value is
//! decoded there and a misfit is the reply's failure — `fail_branch` when
//! the node has one, else a fault naming the path and the type — and
//! replay reaches the same verdict (PRO-13: a reply that does not decode
//! against the declared types is BadReply).

mod common;
#[path = "fixtures/fixtures.rs"]
mod fixtures;

use common::TestApp;
use serde_json::json;

fn fixture(name: &str) -> String {
    fixtures::repo()
        .join("tests/fixtures/flows/typed")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

#[test]
fn a_text_answer_into_an_integer_field_is_refused_at_check_with_its_pointer() {
    let f = TestApp::new();
    let (code, v) = f.json(&["check", &fixture("text-into-int.json")]);
    assert_eq!(code, 2, "{v}");
    let d = v["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["code"] == "FS0901")
        .unwrap_or_else(|| panic!("{v}"));
    assert_eq!(d["location"]["pointer"], "/nodes/1/output_key", "{d}");
    assert_eq!(d["severity"], "error");
    assert!(
        d["message"].as_str().unwrap().contains("declared Int"),
        "{d}"
    );
    let (code, v) = f.json(&[
        "run",
        &fixture("text-into-int.json"),
        "--allow",
        "--input",
        r#"{"topic":"owls"}"#,
    ]);
    assert_eq!(code, 2, "{v}");
    assert_eq!(f.runs(), 0, "nothing recorded");
}

#[test]
fn a_structured_answer_that_does_not_fit_its_field_goes_to_fail_branch() {
    let f = TestApp::new();
    let (code, v) = f.json(&[
        "run",
        &fixture("guess.json"),
        "--allow",
        "--input",
        r#"{"topic":"owls at night"}"#,
    ]);
    assert_eq!((code, v["exit"].as_str()), (4, Some("misfit")), "{v}");
    let out = &v["output"];
    assert!(out.get("n").is_none(), "never written: {out}");
    assert_eq!(out["error"]["node"], "count", "{out}");
    let why = out["error"]["outcome"]["BadReply"].as_str().unwrap();
    assert!(
        why.contains("state field `n` is declared Int") && why.contains("found string"),
        "{why}"
    );
    f.assert_matched(v["run"].as_str().unwrap());
}

#[test]
fn a_reply_object_into_a_string_field_faults_naming_field_and_type() {
    let f = TestApp::new();
    let (code, v) = f.json(&[
        "run",
        &fixture("note.json"),
        "--input",
        r#"{"topic":"owls"}"#,
    ]);
    assert_eq!(code, 3, "{v}");
    let run = v["run"].as_str().unwrap().to_string();
    let (code, v) = f.json(&[
        "resume",
        &run,
        "--call",
        "c1:root#1",
        "--reply",
        r#"{"Ok":{"decision":"yes"}}"#,
    ]);
    assert_eq!((code, v["state"].as_str()), (1, Some("faulted")), "{v}");
    let why = v["fault"].as_str().unwrap();
    assert!(
        why.starts_with("node ask: call c1:root#1 to std/human#input")
            && why.contains("state field `note` is declared Text"),
        "{why}"
    );
    f.assert_matched(&run);

    // The same reply as text fits.
    let (_, v) = f.json(&[
        "run",
        &fixture("note.json"),
        "--input",
        r#"{"topic":"owls"}"#,
    ]);
    let run = v["run"].as_str().unwrap().to_string();
    let (code, v) = f.json(&[
        "resume",
        &run,
        "--call",
        "c1:root#1",
        "--reply",
        r#"{"Ok":"hoot"}"#,
    ]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["output"], json!({"note": "hoot", "topic": "owls"}));
    f.assert_matched(&run);
}
