//! Issue 11, item 8: harness nodes and `prompt_ref` run as Calls instead of
//! being refused (engine/tests/flows/run/harness.json, prompt-ref.json),
//! with the exact calls, the reply rules of docs/engine.md ("Harness nodes",
//! "prompt_ref") and a replay `matched` of every recorded history.

mod common;

use common::*;
use serde_json::json;

// ------------------------------------------------------------- harness

#[test]
fn harness_nodes_are_calls_and_evidence_is_appended() {
    let (mut run, first) = Run::of("harness", json!({"topic": "rust"}));
    assert_eq!(
        calls(&first),
        [
            r#"Call c1:root#1 std/harness#world_model {"harness_config":{"display_mode":"summary","max_beliefs_shown":3},"node":"world","state":{"evidence":[],"topic":"rust"}}"#
        ]
    );
    // A display node passes the state through: no `state` patch.
    let e = run.feed("c1:root#1", ok(json!({"shown": 0})));
    assert_eq!(
        calls(&e),
        [r#"Call c1:root#2 harness.json#grep {"topic":"rust"}"#],
        "gather_evidence calls its source tool, args from the state"
    );
    let e = run.feed("c1:root#2", ok(json!({"lines": ["rust is fast"]})));
    let evidence = json!([{"evidence_type": "OBSERVATION", "node": "gather", "reliability": "LOW",
        "source_tool": "grep", "value": {"lines": ["rust is fast"]}}]);
    assert_eq!(
        calls(&e),
        [format!(
            r#"Call c1:root#3 std/harness#verification_gate {{"harness_config":{{"enabled_layers":["syntax","unit"]}},"node":"verify","state":{}}}"#,
            flow_abi::json::canonical(&json!({"evidence": evidence, "topic": "rust"}))
        )]
    );
    // An active node's `state` patch is written through the reducers.
    run.feed(
        "c1:root#3",
        ok(json!({"state": {"verdict": {"passed": true}, "evidence": [{"note": "checked"}]}, "log": "kept in history only"})),
    );
    let mut all = evidence.as_array().unwrap().clone();
    all.push(json!({"note": "checked"}));
    assert_eq!(
        run.output(),
        json!({"topic": "rust", "evidence": all, "verdict": {"passed": true}})
    );
    run.assert_replays();
}

#[test]
fn a_harness_reply_that_is_not_a_state_patch_faults() {
    for (reply, why) in [
        (json!([1]), "not an object such as"),
        (
            json!({"state": 3}),
            "`state` 3, not an object of state fields",
        ),
    ] {
        let (mut run, _) = Run::of("harness", json!({"topic": "t"}));
        run.feed("c1:root#1", ok(reply));
        assert!(run.fault().contains(why), "{}", run.fault());
        run.assert_replays();
    }
    // A failed harness call faults naming the node and the call.
    let (mut run, _) = Run::of("harness", json!({"topic": "t"}));
    run.feed("c1:root#1", failed("no harness"));
    assert!(
        run.fault()
            .starts_with("node world: call c1:root#1 to std/harness#world_model failed"),
        "{}",
        run.fault()
    );
    run.assert_replays();
}

#[test]
fn harness_declarations_are_built_ins_bound_like_any_tool() {
    let p = program(&["harness"]);
    let ids: Vec<&String> = p.root_module().unwrap().decls.keys().collect();
    assert_eq!(
        ids,
        [
            "harness.json#grep",
            "std/harness#verification_gate",
            "std/harness#world_model"
        ]
    );
}

// ---------------------------------------------------------- prompt_ref

#[test]
fn prompt_ref_fetches_the_template_then_calls_the_model() {
    let (mut run, first) = Run::of("prompt-ref", json!({"topic": "rust"}));
    assert_eq!(
        calls(&first),
        [r#"Call c1:root#1 std/prompts#get {"label":"production","name":"summary","version":2}"#]
    );
    let e = run.feed("c1:root#1", ok(json!("Summarise {{topic}} in one line")));
    assert_eq!(
        calls(&e),
        [
            r#"Call c1:root#2 std/llm#chat {"model":"default","prompt":"Summarise rust in one line"}"#
        ]
    );
    run.feed("c1:root#2", text("Rust: fast."));
    assert_eq!(
        run.output(),
        json!({"topic": "rust", "summary": "Rust: fast."})
    );
    run.assert_replays();
}

#[test]
fn a_retry_reuses_the_fetched_template() {
    let (mut run, _) = Run::of("prompt-ref", json!({"topic": "rust"}));
    run.feed("c1:root#1", ok(json!("About {{topic}}")));
    let e = run.feed("c1:root#2", failed("model down"));
    assert_eq!(calls(&e), [r#"Call c1:root#3 std/clock#sleep {"ms":10}"#]);
    let e = run.feed("c1:root#3", ok(serde_json::Value::Null));
    assert_eq!(
        calls(&e),
        [r#"Call c1:root#4 std/llm#chat {"model":"default","prompt":"About rust"}"#],
        "no second fetch"
    );
    run.feed("c1:root#4", text("ok"));
    assert_eq!(run.output()["summary"], "ok");
    run.assert_replays();
}

#[test]
fn a_failed_or_unusable_fetch_is_a_failure_of_the_node() {
    // Failed, then a reply that is not a template: both attempts spent, the
    // fail_branch routes to `failed`.
    let (mut run, _) = Run::of("prompt-ref", json!({"topic": "rust"}));
    let e = run.feed("c1:root#1", failed("no prompt service"));
    assert_eq!(calls(&e), [r#"Call c1:root#2 std/clock#sleep {"ms":10}"#]);
    let e = run.feed("c1:root#2", ok(serde_json::Value::Null));
    assert_eq!(
        calls(&e),
        [r#"Call c1:root#3 std/prompts#get {"label":"production","name":"summary","version":2}"#],
        "a failed fetch is fetched again"
    );
    let e = run.feed("c1:root#3", ok(json!("Unclosed {{topic")));
    assert!(
        calls(&e).last().unwrap().starts_with("End Completed error"),
        "{e:?}"
    );
    run.assert_replays();
    // Without fail_branch the run faults, naming the prompt call.
    let mut doc = flow_doc("prompt-ref");
    doc["nodes"][1]
        .as_object_mut()
        .unwrap()
        .remove("fail_branch");
    let p = program_of(
        std::collections::BTreeMap::from([("prompt-ref.json".to_string(), doc)]),
        "prompt-ref.json",
    );
    let (mut run, _) = Run::start(&p, "prompt-ref.json", json!({"topic": "rust"}));
    run.feed("c1:root#1", ok(json!(7)));
    assert_eq!(
        run.fault(),
        "node summarise: call c1:root#1 to std/prompts#get failed: {\"BadReply\":\"the prompt is 7, not Text\"}"
    );
    run.assert_replays();
}
