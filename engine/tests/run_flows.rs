//! One run flow per node type and behaviour (engine/tests/flows/run/),
//! each driven with replies given by the test, asserting the exact effects,
//! call ids, final state and ending; every recorded history then replays
//! `matched` (or `incomplete` when paused).

mod common;

use common::*;
use serde_json::json;

#[test]
fn every_run_flow_loads_without_errors() {
    let mut names: Vec<String> = std::fs::read_dir(flows_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().to_string())
        .collect();
    names.sort();
    for n in &names {
        if n == "subgraph-child" {
            continue;
        }
        if n == "subgraph" {
            program(&["subgraph", "subgraph-child"]);
        } else {
            program(&[n.as_str()]);
        }
    }
    assert!(names.len() >= 15, "{names:?}");
    let _ = json!(null);
}

// ------------------------------------------------------------ tool_invoke

#[test]
fn tool_invoke_maps_args_and_reply_fields() {
    let (mut run, first) = Run::of("tool-invoke", json!({"q": "rust", "limit": 2}));
    assert_eq!(
        lines(&first),
        [
            "Checkpoint root start",
            "Checkpoint root search",
            r#"Call c1:root#1 tool-invoke.json#search {"limit":2,"query":"rust"}"#,
        ]
    );
    let e = run.feed("c1:root#1", ok(json!({"hits": ["a", "b"], "total": 7})));
    assert_eq!(
        lines(&e),
        [
            "Checkpoint root done",
            r#"End Completed success {"hits":["a","b"],"limit":2,"meta":{"total":7},"q":"rust"}"#,
        ]
    );
    run.assert_replays();
}

#[test]
fn tool_invoke_without_maps_reads_and_writes_same_named_keys() {
    // GAP-TOOL-3.
    let (mut run, first) = Run::of("tool-invoke-implicit", json!({"query": "q1"}));
    assert_eq!(
        calls(&first),
        [r#"Call c1:root#1 tool-invoke-implicit.json#search {"query":"q1"}"#]
    );
    run.feed("c1:root#1", ok(json!({"hits": ["x"], "total": 1})));
    assert_eq!(
        run.output(),
        json!({"hits": ["x"], "query": "q1", "total": 1})
    );
    run.assert_replays();
}

#[test]
fn tool_invoke_failed_call_faults_naming_node_and_call() {
    let (mut run, _) = Run::of("tool-invoke", json!({"q": "rust", "limit": 2}));
    let e = run.feed("c1:root#1", failed("down"));
    assert_eq!(
        lines(&e),
        [
            r#"End Faulted node search: call c1:root#1 to tool-invoke.json#search failed: {"Failed":{"code":"test","message":"down"}}"#
        ]
    );
    run.assert_replays();
}

// ------------------------------------------------------------ llm_call

#[test]
fn llm_call_templates_model_defaults_and_context() {
    let (mut run, first) = Run::of("llm-call", json!({"topic": "owls", "n": 3}));
    // model_defaults give model and params; the three template forms.
    assert_eq!(
        calls(&first),
        [
            r#"Call c1:root#1 std/llm#chat {"model":"m-default","params":{"max_tokens":100,"temperature":0.2},"prompt":"Write 3 lines on owls (owls).","system":"Be brief."}"#
        ]
    );
    let e = run.feed("c1:root#1", text("Owls hoot."));
    // The node's model and params win; params are replaced whole
    // (GAP-LLM-3); context_from lists the nodes' output_key values in list
    // order (an input node has none: null).
    assert_eq!(
        calls(&e),
        [
            r#"Call c1:root#2 std/llm#chat {"context":["Owls hoot.",null],"model":"m-node","params":{"max_tokens":5},"prompt":"Polish: Owls hoot."}"#
        ]
    );
    let e = run.feed("c1:root#2", text("Owls hoot softly."));
    // The output is projected onto the output node's input_schema.
    assert_eq!(
        calls(&e),
        [r#"End Completed success {"final":"Owls hoot softly."}"#]
    );
    assert_eq!(
        run.machine.state(),
        &json!({"draft": "Owls hoot.", "final": "Owls hoot softly.", "n": 3, "topic": "owls"})
    );
    run.assert_replays();
}

#[test]
fn llm_call_answer_without_text_faults() {
    let (mut run, _) = Run::of("llm-call", json!({"topic": "owls", "n": 3}));
    let e = run.feed("c1:root#1", ok(json!({"words": "x"})));
    assert_eq!(
        calls(&e),
        [
            r#"End Faulted node draft: call c1:root#1 to std/llm#chat failed: {"BadReply":"the model's answer has no \"text\""}"#
        ]
    );
    run.assert_replays();
}

#[test]
fn llm_call_structured_output_with_and_without_output_key() {
    let (mut run, first) = Run::of("llm-structured", json!({"text": "fine"}));
    assert_eq!(
        calls(&first),
        [
            r##"Call c1:root#1 std/llm#chat {"model":"offline","prompt":"Judge fine","schema":{"$defs":{"llm-structured.json.nodes.judge.structured":{"properties":{"label":{"type":"string"},"ok":{"type":"boolean"}},"required":["label","ok"],"type":"object"}},"$ref":"#/$defs/llm-structured.json.nodes.judge.structured"}}"##
        ]
    );
    let e = run.feed("c1:root#1", ok(json!({"label": "good", "ok": true})));
    assert_eq!(calls(&e).len(), 1);
    // GAP-LLM-4: no output_key, so each top-level key goes to its state
    // key through its reducer (tags appends to []).
    run.feed("c1:root#2", ok(json!({"score": 9, "tags": ["a", "b"]})));
    assert_eq!(
        run.output(),
        json!({"score": 9, "tags": ["a", "b"], "text": "fine",
               "verdict": {"label": "good", "ok": true}})
    );
    run.assert_replays();
}

#[test]
fn llm_call_structured_answer_that_does_not_fit_fails_the_node() {
    // GAP-LLM-1: a mismatch is a node failure; with no fail_branch the run
    // faults naming the node, the call and why.
    let (mut run, _) = Run::of("llm-structured", json!({"text": "fine"}));
    let e = run.feed("c1:root#1", ok(json!({"label": 3, "ok": true})));
    let why = match &e[..] {
        [common_end] => line(common_end),
        other => panic!("{other:?}"),
    };
    assert!(
        why.starts_with("End Faulted node judge: call c1:root#1 to std/llm#chat failed: {\"BadReply\":\"the answer does not fit structured_output: "),
        "{why}"
    );
    assert!(why.contains("label"), "{why}");
    run.assert_replays();
}

// ------------------------------------------------------------ routing

#[test]
fn condition_node_first_match_wins_else_default() {
    for (input, exit) in [
        // Both branches hold: the first wins.
        (json!({"n": 20, "tag": "x"}), "big"),
        (json!({"n": 20, "tag": "small"}), "mid"),
        (json!({"n": 1, "tag": "mid-size"}), "mid"),
        (json!({"n": 1, "tag": "x"}), "small"),
    ] {
        let (run, e) = Run::of("condition", input.clone());
        assert_eq!(
            checkpoints(&e),
            ["root:start", "root:route", &format!("root:{exit}")]
        );
        assert_eq!(
            run.ending(),
            Some(&flow_engine::machine::Ending::Completed {
                exit: exit.into(),
                output: input
            })
        );
        run.assert_replays();
    }
}

#[test]
fn conditional_edges_first_match_wins_else_default() {
    for (score, exit) in [
        (json!(0.9), "high"),
        (json!(0.3), "also-high"),
        (json!(0.1), "low"),
    ] {
        let (mut run, _) = Run::of("conditional-edges", json!({"q": "a"}));
        let e = run.feed("c1:root#1", ok(json!({"score": score})));
        assert_eq!(checkpoints(&e), [format!("root:{exit}")]);
        assert!(matches!(
            run.ending(),
            Some(flow_engine::machine::Ending::Completed { exit: x, .. }) if x == exit
        ));
        run.assert_replays();
    }
}

#[test]
fn condition_expression_error_faults_with_a_clear_message() {
    let (mut run, _) = Run::of("conditional-edges", json!({"q": "a"}));
    let e = run.feed("c1:root#1", ok(json!({"score": "high"})));
    assert_eq!(
        lines(&e),
        [
            "End Faulted node rate: condition `$.state.score >= 0.5`: cannot order a string and a number"
        ]
    );
    run.assert_replays();
}
