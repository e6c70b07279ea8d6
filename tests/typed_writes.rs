//! Every write to state is checked against `state_schema` (issue 11, item
//! 2), with the real `flow` binary and the real flow-llm offline model:
//! where the value's type is known before the run, `flow check` refuses
//! with a located FS0901 and `flow run` records nothing; where it is only
//! known at the write (a structured answer of any JSON), the value is
//! decoded there and a misfit is the reply's failure, recorded as its
//! BadReply with the reason — `fail_branch` when the node has one, else a
//! fault naming the node, the call and that reason — and replay reaches
//! the same verdict (PRO-13: a reply that does not decode against the
//! declared types is BadReply). A person's reply that does not fit is
//! refused and nothing is recorded (RES-10, GAP-RES-1).

mod common;
#[path = "fixtures/fixtures.rs"]
mod fixtures;

use common::TestApp;
use serde_json::{Value as Json, json};

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
    let run = v["run"].as_str().unwrap();
    f.assert_matched(run);
    // Issue 41 item 1: the history records the model's reply as the
    // BadReply it was, with the reason `$.error` carries.
    let (_, h) = f.json(&["history", run, "--kind", "Reply"]);
    assert_eq!(h["facts"][0]["fact"]["outcome"]["BadReply"], why, "{h}");
    let text = history_text(&f, run);
    assert!(
        text.contains(&format!("Reply c1:root#1 BadReply: {why}")),
        "{text}"
    );
}

/// `flow history RUN`'s text.
fn history_text(f: &TestApp, run: &str) -> String {
    let out = f.cmd(&["history", run]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Issue 41 item 1 (PRO-13, LIVE-2, GAP-HIST-2): a Tool's reply that does
/// not fit the state field it is written to faults the run, and the record
/// explains it: the Reply fact is `{"BadReply": reason}` (the field, its
/// type, what was found), the End's fault names the node, the call and the
/// same reason, and `flow history` shows both; the run replays matched.
#[test]
fn a_tool_reply_that_does_not_fit_is_recorded_as_bad_reply_and_explains_the_fault() {
    let f = TestApp::new();
    let (code, v) = f.json(&[
        "run",
        &fixture("misfit.json"),
        "--allow",
        "--input",
        r#"{"topic":"owls"}"#,
    ]);
    assert_eq!((code, v["state"].as_str()), (1, Some("faulted")), "{v}");
    let run = v["run"].as_str().unwrap().to_string();
    let (code, h) = f.json(&["history", &run]);
    assert_eq!(code, 0, "{h}");
    let facts = h["facts"].as_array().unwrap();
    let reply = facts.iter().find(|x| x["kind"] == "Reply").unwrap();
    let why = reply["fact"]["outcome"]["BadReply"]
        .as_str()
        .unwrap_or_else(|| panic!("not a BadReply: {reply}"));
    assert!(
        why.starts_with("state field `n` is declared Int; the value written does not fit")
            && why.contains("found string"),
        "{why}"
    );
    let end = facts.last().unwrap();
    let fault = end["fact"]["ending"]["Faulted"].as_str().unwrap();
    assert!(
        fault.starts_with("node count: call c1:root#1 to std/llm#chat failed: ")
            && fault.contains("BadReply")
            && fault.contains("state field `n` is declared Int"),
        "{fault}"
    );
    assert_eq!(v["fault"], fault, "{v}");
    let text = history_text(&f, &run);
    assert!(
        text.contains(&format!("Reply c1:root#1 BadReply: {why}")),
        "{text}"
    );
    assert!(text.contains(&format!("End Faulted: {fault}")), "{text}");
    f.assert_matched(&run);
}

/// Issue 41 item 1 (RES-10, GAP-RES-1): a person's reply that does not fit
/// the state field its hitl writes is refused, naming the field and its
/// type (exit 2), and nothing is recorded: the call stays open, and a reply
/// that fits completes the run. (Before, it was recorded as `Ok` and the
/// run faulted every time.)
#[test]
fn a_reply_object_into_a_string_field_is_refused_naming_field_and_type() {
    let f = TestApp::new();
    let (code, v) = f.json(&[
        "run",
        &fixture("note.json"),
        "--input",
        r#"{"topic":"owls"}"#,
    ]);
    assert_eq!(code, 3, "{v}");
    let run = v["run"].as_str().unwrap().to_string();
    let facts = f.facts(&run);
    let (code, v) = f.json(&[
        "resume",
        &run,
        "--call",
        "c1:root#1",
        "--reply",
        r#"{"Ok":{"decision":"yes"}}"#,
    ]);
    assert_eq!(code, 2, "{v}");
    let why = v["error"].as_str().unwrap();
    assert!(
        why.starts_with("the reply does not fit call c1:root#1 of node ask: ")
            && why.contains("state field `note` is declared Text"),
        "{why}"
    );
    assert_eq!(f.facts(&run), facts, "nothing recorded");
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

/// The FS0901/FS0902 diagnostic of `flow check --json FILE` (exit `code`),
/// with its pointer and the pointers of its `related` declarations.
fn state_type(f: &TestApp, file: &str, code: i32, want: &str) -> (Json, Vec<String>) {
    let (exit, v) = f.json(&["check", &fixture(file)]);
    assert_eq!(exit, code, "{v}");
    let d = v["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["code"] == want)
        .unwrap_or_else(|| panic!("no {want}: {v}"))
        .clone();
    let related = d["related"]
        .as_array()
        .unwrap_or_else(|| panic!("no related: {d}"))
        .iter()
        .map(|r| r["location"]["pointer"].as_str().unwrap().to_string())
        .collect();
    (d, related)
}

/// Issue 41 item 2 (GAP-DIAG-1 `related`): a structured object answer
/// written to a field declared an array can never fit (as in the shared
/// corpus's flow-research-write and flow-plan-execute): `flow check`
/// refuses it, naming the node's schema and the state field, and `flow
/// run` records nothing.
#[test]
fn a_structured_object_into_an_array_field_is_refused_with_both_declarations() {
    let f = TestApp::new();
    let (d, related) = state_type(&f, "structured-into-array.json", 2, "FS0901");
    assert_eq!(d["severity"], "error");
    assert_eq!(d["location"]["pointer"], "/nodes/1/output_key", "{d}");
    assert_eq!(
        related,
        [
            "/nodes/1/structured_output/schema",
            "/state_schema/properties/queries"
        ],
        "{d}"
    );
    let msg = d["message"].as_str().unwrap();
    assert!(
        msg.contains("state field `queries`, declared List<Text>") && msg.contains("never fit"),
        "{msg}"
    );
    // The text form shows both declarations.
    let out = f.cmd(&["check", &fixture("structured-into-array.json")]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("error[FS0901] structured-into-array.json#/nodes/1/output_key:")
            && text.contains("  structured-into-array.json#/nodes/1/structured_output/schema: ")
            && text.contains("  structured-into-array.json#/state_schema/properties/queries: "),
        "{text}"
    );
    let (code, v) = f.json(&[
        "run",
        &fixture("structured-into-array.json"),
        "--allow",
        "--input",
        r#"{"goal":"owls"}"#,
    ]);
    assert_eq!(code, 2, "{v}");
    assert_eq!(f.runs(), 0, "nothing recorded");
}

/// Issue 41 item 2: a hitl `resume_schema` object written to a string
/// field can never fit: refused at check with both declarations.
#[test]
fn a_resume_schema_object_into_a_string_field_is_refused_with_both_declarations() {
    let f = TestApp::new();
    let (d, related) = state_type(&f, "reply-into-string.json", 2, "FS0901");
    assert_eq!(d["location"]["pointer"], "/nodes/1/output_key", "{d}");
    assert_eq!(
        related,
        ["/nodes/1/resume_schema", "/state_schema/properties/note"],
        "{d}"
    );
    assert!(
        d["message"]
            .as_str()
            .unwrap()
            .contains("state field `note`, declared Text"),
        "{d}"
    );
}

/// Issue 41 item 2: a structured `number` written to an `integer` field
/// may not fit: FS0902 warns (the program still checks and runs, the
/// write decoded at run time), with both declarations.
#[test]
fn a_structured_number_into_an_integer_field_warns_that_it_may_not_fit() {
    let f = TestApp::new();
    let (d, related) = state_type(&f, "number-into-integer.json", 0, "FS0902");
    assert_eq!(d["severity"], "warning");
    assert_eq!(d["name"], "state-type-may-not-fit");
    assert_eq!(
        related,
        [
            "/nodes/1/structured_output/schema",
            "/state_schema/properties/n"
        ],
        "{d}"
    );
    // Values whose type is not known before the run are not judged.
    let (code, v) = f.json(&["check", &fixture("guess.json")]);
    assert_eq!(code, 0, "{v}");
    assert!(
        v["diagnostics"]
            .as_array()
            .unwrap()
            .iter()
            .all(|d| d["code"] != "FS0901" && d["code"] != "FS0902"),
        "{v}"
    );
}
