//! Every write to state is checked against `state_schema` (issue 11, item
//! 2): a dynamic value (a json.Value tool reply, a structured answer, a
//! hitl reply, a value a transform copies) is decoded against the field's
//! type at the write; one that does not fit is a failure of the reply that
//! carried it (`BadReply` naming the path and the type: `fail_branch`,
//! else a fault), never a silent write, and replay reaches the same
//! verdict (PRO-13: a reply that does not decode against the declared
//! types is admitted as BadReply). And a subgraph's `fail_branch` routes a
//! nested run's failure (NEST-14).

mod common;

use common::*;
use flow_abi::protocol::Outcome;
use serde_json::{Value as Json, json};
use std::collections::BTreeMap;

/// `n` is an integer, `note` a string, `tags` a list of strings grown by
/// `append`, `blob` any JSON. The tool declares no output (json.Value),
/// the hitl no resume_schema (json.Value), the llm a structured answer of
/// any JSON — all dynamic, so each is decoded at its write.
fn flow() -> Json {
    json!({
        "spec_version": "1.0.0", "id": "typed-writes",
        "state_schema": {"type": "object", "properties": {
            "n": {"type": "integer"},
            "note": {"type": "string"},
            "tags": {"type": "array", "items": {"type": "string"}, "reducer": "append"},
            "blob": {},
            "error": {"type": "object"}
        }, "required": ["blob"]},
        "tools": {"lookup": {"tool_ref": "x:lookup", "input_schema": {"type": "object", "properties": {}}}},
        "nodes": [
            {"id": "start", "type": "input", "output_schema": {"blob": {}}},
            {"id": "fetch", "type": "tool_invoke", "tool_id": "lookup", "input_map": {},
             "output_map": {"value": "n", "tag": "tags"}},
            {"id": "ask", "type": "hitl_breakpoint", "prompt": "Note?", "output_key": "note"},
            {"id": "guess", "type": "llm_call", "prompt_template": "A number?",
             "structured_output": {"schema": {}}, "output_key": "n",
             "fail_branch": {"target": "fallback"}},
            {"id": "copy", "type": "transform", "mode": "mapping",
             "mapping": [{"from": "$.state.blob", "to": "n"}]},
            {"id": "fallback", "type": "transform", "mode": "mapping",
             "mapping": [{"from": "$.error", "to": "error"}]},
            {"id": "done", "type": "output"}
        ],
        "edges": [
            {"from": "start", "to": "fetch"}, {"from": "fetch", "to": "ask"},
            {"from": "ask", "to": "guess"}, {"from": "guess", "to": "copy"},
            {"from": "copy", "to": "done"}, {"from": "fallback", "to": "done"}
        ]
    })
}

fn start(blob: Json) -> Run {
    let mut files = BTreeMap::new();
    files.insert("typed-writes.json".to_string(), flow());
    let p = program_of(files, "typed-writes.json");
    Run::start(&p, "typed-writes.json", json!({ "blob": blob })).0
}

/// The run fed up to `guess`'s call with fitting values.
fn at_guess(blob: Json) -> Run {
    let mut run = start(blob);
    run.feed("c1:root#1", ok(json!({"value": 2, "tag": "a"})));
    run.feed("c1:root#2", ok(json!("fine")));
    assert_eq!(run.open(), ["c1:root#3"]);
    run
}

#[test]
fn a_tool_reply_that_does_not_fit_its_field_faults_naming_path_and_type() {
    let mut run = start(json!(1));
    let e = run.feed("c1:root#1", ok(json!({"value": "hi x", "tag": "a"})));
    let why = run.fault();
    assert!(why.starts_with("node fetch: call c1:root#1 to"), "{why}");
    assert!(
        why.contains(r#"BadReply"#) && why.contains("state field `n` is declared Int"),
        "{why}"
    );
    // Nothing of the reply was written: no checkpoint after it.
    assert!(checkpoints(&e).is_empty(), "{e:?}");
    run.assert_replays();
}

#[test]
fn an_appended_element_is_decoded_against_the_item_type() {
    let mut run = start(json!(1));
    run.feed("c1:root#1", ok(json!({"value": 2, "tag": 5})));
    let why = run.fault();
    assert!(
        why.contains("state field `tags` is declared List<Text>") && why.contains("expected Text"),
        "{why}"
    );
    run.assert_replays();
}

#[test]
fn a_hitl_reply_object_is_not_written_to_a_string_field() {
    let mut run = start(json!(1));
    run.feed("c1:root#1", ok(json!({"value": 2, "tag": "a"})));
    run.feed("c1:root#2", ok(json!({"decision": "yes"})));
    let why = run.fault();
    assert!(
        why.starts_with("node ask: call c1:root#2 to std/human#input")
            && why.contains("state field `note` is declared Text"),
        "{why}"
    );
    run.assert_replays();
}

#[test]
fn a_structured_answer_that_does_not_fit_goes_to_fail_branch() {
    let mut run = at_guess(json!(1));
    run.feed("c1:root#3", ok(json!("hi")));
    let out = run.output();
    // `n` kept the tool's 2; `$.error` says what did not fit.
    assert_eq!(out["n"], 2, "{out}");
    assert_eq!(out["error"]["node"], "guess", "{out}");
    let bad = out["error"]["outcome"]["BadReply"].as_str().unwrap();
    assert!(bad.contains("state field `n` is declared Int"), "{bad}");
    assert_eq!(out["tags"], json!(["a"]));
    assert_eq!(out["note"], "fine");
    run.assert_replays();
}

#[test]
fn a_transform_copy_that_does_not_fit_faults_naming_the_node() {
    let mut run = at_guess(json!("text"));
    run.feed("c1:root#3", ok(json!(7)));
    let why = run.fault();
    assert!(
        why.starts_with("node copy: state field `n` is declared Int"),
        "{why}"
    );
    run.assert_replays();
}

#[test]
fn values_that_fit_are_written() {
    let mut run = at_guess(json!(9));
    run.feed("c1:root#3", ok(json!(7)));
    assert_eq!(
        run.output(),
        json!({"blob": 9, "n": 9, "note": "fine", "tags": ["a"]})
    );
    run.assert_replays();
}

/// Replaying the same history reaches the same verdict: a recorded Reply
/// that does not fit faults the replay exactly as it faulted the run.
#[test]
fn the_verdict_is_deterministic_in_replay() {
    let mut run = start(json!(1));
    run.feed("c1:root#1", ok(json!({"value": [1], "tag": "a"})));
    let why = run.fault();
    let r = flow_engine::replay::replay(run.program.clone(), typed(&run.facts));
    assert_eq!(r.verdict, flow_engine::replay::Verdict::Matched);
    match r.machine.as_ref().and_then(|m| m.ending()) {
        Some(flow_engine::machine::Ending::Faulted(w)) => assert_eq!(*w, why),
        other => panic!("{other:?}"),
    }
}

/// NEST-14: a nested run's failure is the subgraph call's `Failed` reply;
/// `fail_branch` retries the call, then routes to its target with
/// `$.error`, and the outer run completes.
#[test]
fn a_subgraph_fail_branch_routes_the_nested_failure() {
    let mut files = BTreeMap::new();
    files.insert(
        "outer.json".to_string(),
        json!({
            "spec_version": "1.0.0", "id": "outer-flow",
            "state_schema": {"type": "object", "properties": {"x": {"type": "string"}, "error": {"type": "object"}}},
            "nodes": [
                {"id": "start", "type": "input", "output_schema": {"x": {"type": "string"}}},
                {"id": "sub", "type": "subgraph", "flow_ref": "inner-flow", "input_map": {"x": "$.state.x"},
                 "fail_branch": {"target": "note", "retry": {"max_attempts": 2, "backoff": "fixed", "delay_ms": 5}}},
                {"id": "note", "type": "transform", "mode": "mapping", "mapping": [{"from": "$.error", "to": "error"}]},
                {"id": "done", "type": "output"},
                {"id": "failed", "type": "output", "exit_code": "failed"}
            ],
            "edges": [{"from": "start", "to": "sub"}, {"from": "sub", "to": "done"}, {"from": "note", "to": "failed"}]
        }),
    );
    files.insert(
        "inner.json".to_string(),
        json!({
            "spec_version": "1.0.0", "id": "inner-flow",
            "nodes": [
                {"id": "start", "type": "input", "output_schema": {"x": {"type": "string"}}},
                {"id": "done", "type": "output"}
            ],
            "edges": [{"from": "start", "to": "done"}]
        }),
    );
    let p = program_of(files, "outer.json");
    let (mut run, first) = Run::start(&p, "outer.json", json!({"x": "hi"}));
    assert_eq!(
        calls(&first),
        [r#"Call c1:root#1 inner.json#main nested=inner.json {"input":{"x":"hi"}}"#]
    );
    let nested_fault = Outcome::Failed(json!({"message": "step limit"}));
    let e = run.feed("c1:root#1", nested_fault.clone());
    assert_eq!(calls(&e), [r#"Call c1:root#2 std/clock#sleep {"ms":5}"#]);
    let e = run.feed("c1:root#2", ok(Json::Null));
    assert_eq!(
        calls(&e),
        [r#"Call c1:root#3 inner.json#main nested=inner.json {"input":{"x":"hi"}}"#]
    );
    let e = run.feed("c1:root#3", nested_fault);
    assert_eq!(
        calls(&e),
        [
            r#"End Completed failed {"error":{"call":"c1:root#3","node":"sub","outcome":{"Failed":{"message":"step limit"}}},"x":"hi"}"#
        ]
    );
    run.assert_replays();
}

/// Issue 41 item 1 (PRO-13, LIVE-2): `Machine::misfit` tells a host, before
/// it records a reply, that the machine would fail it at once, and why. A
/// history recorded with that BadReply (as hosts now record it) and one
/// recorded with the Ok reply (as they did) lead to the same facts after
/// the Reply, the same fault or `$.error`, and both replay matched: stored
/// histories keep their bytes and their verdict.
#[test]
fn a_misfit_recorded_as_bad_reply_or_as_ok_gives_the_same_run() {
    // A tool reply that does not fit: the fault.
    let reply = ok(json!({"value": "hi x", "tag": "a"}));
    let mut old = start(json!(1));
    let why = old
        .machine
        .misfit("c1:root#1", &reply)
        .expect("the machine would fail this reply");
    assert!(why.contains("state field `n` is declared Int"), "{why}");
    old.feed("c1:root#1", reply);
    let mut new = start(json!(1));
    new.feed("c1:root#1", Outcome::BadReply(why.clone()));
    assert_eq!(old.fault(), new.fault());
    assert_eq!(new.facts[4]["outcome"]["BadReply"], json!(why));
    assert_eq!(
        old.facts[5..],
        new.facts[5..],
        "the same facts after the Reply"
    );
    old.assert_replays();
    new.assert_replays();

    // A structured answer that does not fit: fail_branch, `$.error`.
    let answer = ok(json!("hi"));
    let mut old = at_guess(json!(1));
    let why = old.machine.misfit("c1:root#3", &answer).unwrap();
    old.feed("c1:root#3", answer);
    let mut new = at_guess(json!(1));
    new.feed("c1:root#3", Outcome::BadReply(why));
    assert_eq!(old.output(), new.output());
    old.assert_replays();
    new.assert_replays();

    // A reply that fits, another call's, or a non-Ok outcome: none.
    let fine = at_guess(json!(9));
    assert_eq!(fine.machine.misfit("c1:root#3", &ok(json!(7))), None);
    assert_eq!(fine.machine.misfit("c1:root#9", &ok(json!("x"))), None);
    assert_eq!(fine.machine.misfit("c1:root#3", &failed("no")), None);
}
