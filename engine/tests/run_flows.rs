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

// ------------------------------------------------------------ transform

#[test]
fn transform_mapping_is_pure_and_fn_ref_is_a_call_with_a_patch() {
    let (mut run, first) = Run::of("transform", json!({"a": "A", "b": "B"}));
    assert_eq!(
        lines(&first),
        [
            "Checkpoint root start",
            "Checkpoint root shape",
            "Checkpoint root shape2",
            "Checkpoint root custom",
            r#"Call c1:root#1 fn/fixes#patch {"input":{"state":{"a":"A","b":"B","copy":"A","output":{"first":"A","second":"B"}}}}"#,
        ]
    );
    let e = run.feed(
        "c1:root#1",
        ok(json!({"patched": "yes", "output": {"third": 3}})),
    );
    assert_eq!(
        calls(&e),
        [
            r#"End Completed success {"a":"A","b":"B","copy":"A","output":{"first":"A","second":"B","third":3},"patched":"yes"}"#
        ]
    );
    run.assert_replays();
}

#[test]
fn transform_fn_ref_reply_that_is_not_an_object_faults() {
    let (mut run, _) = Run::of("transform", json!({"a": "A", "b": "B"}));
    let e = run.feed("c1:root#1", ok(json!([1])));
    assert_eq!(
        lines(&e),
        ["End Faulted node custom: transform function answered [1], not an object of state fields"]
    );
    run.assert_replays();
}

// ------------------------------------------------------------ parallel

fn parallel(
    wait_for: serde_json::Value,
    reducer: &str,
) -> std::sync::Arc<flow_engine::program::Program> {
    let mut doc = flow_doc("parallel");
    let nodes = doc["nodes"].as_array_mut().unwrap();
    let join = nodes.iter_mut().find(|n| n["id"] == "join").unwrap();
    join["wait_for"] = wait_for;
    join["join_reducer"] = json!(reducer);
    let mut files = std::collections::BTreeMap::new();
    files.insert("parallel.json".to_string(), doc);
    program_of(files, "parallel.json")
}

#[test]
fn parallel_all_merge_branch_local_state_and_target_order() {
    let p = parallel(json!("all"), "merge");
    let (mut run, first) = Run::start(&p, "parallel.json", json!({"topic": "t"}));
    // One task per target, run in task-id order; per-branch input_map.
    assert_eq!(
        lines(&first),
        [
            "Checkpoint root start",
            "Checkpoint root fork",
            "Checkpoint root/a a",
            r#"Call c1:root/a#1 parallel.json#search {"query":"t"}"#,
            "Checkpoint root/b b",
            r#"Call c1:root/b#1 parallel.json#search {"query":"t"}"#,
            "Checkpoint root/c c",
            r#"Call c1:root/c#1 parallel.json#search {"query":"t"}"#,
        ]
    );
    // Branch states are local: c's transform reads c's own write.
    let e = run.feed("c1:root/c#1", ok(json!({"hit": "C"})));
    assert_eq!(lines(&e), ["Checkpoint root/c c2"]);
    assert_eq!(run.machine.state(), &json!({"found": [], "topic": "t"}));
    assert!(run.feed("c1:root/b#1", ok(json!({"hit": "B"}))).is_empty());
    let e = run.feed("c1:root/a#1", ok(json!({"hit": "A"})));
    // At the join, writes apply in target order a, b, c: found appends A
    // then C; last is C (the last target's replace wins, GAP-PAR-2); q was
    // only branch input and never a write.
    assert_eq!(
        lines(&e),
        [
            "Checkpoint root join",
            "Checkpoint root done",
            r#"End Completed success {"found":["A","C"],"joined":{"found":["C"],"last":"C"},"last":"C","topic":"t"}"#,
        ]
    );
    run.assert_replays();
}

#[test]
fn parallel_all_append_lists_each_branch_result_in_target_order() {
    let p = parallel(json!("all"), "append");
    let (mut run, _) = Run::start(&p, "parallel.json", json!({"topic": "t"}));
    run.feed("c1:root/b#1", ok(json!({"hit": "B"})));
    run.feed("c1:root/a#1", ok(json!({"hit": "A"})));
    run.feed("c1:root/c#1", ok(json!({"hit": "C"})));
    assert_eq!(
        run.output()["joined"],
        json!([{"found": ["A"]}, {"last": "B"}, {"found": ["C"], "last": "C"}])
    );
    run.assert_replays();
}

#[test]
fn parallel_any_closes_the_losing_branches_open_calls() {
    let p = parallel(json!("any"), "merge");
    let (mut run, _) = Run::start(&p, "parallel.json", json!({"topic": "t"}));
    let e = run.feed("c1:root/b#1", ok(json!({"hit": "B"})));
    assert_eq!(
        lines(&e),
        [
            "Close c1:root/a#1 join satisfied",
            "Close c1:root/c#1 join satisfied",
            "Checkpoint root join",
            "Checkpoint root done",
            r#"End Completed success {"found":[],"joined":{"last":"B"},"last":"B","topic":"t"}"#,
        ]
    );
    assert!(run.open().is_empty());
    // A late reply to a closed call is refused.
    assert!(
        run.machine
            .feed("c1:root/a#1", &ok(json!({"hit": "A"})))
            .is_err()
    );
    run.assert_replays();
}

#[test]
fn parallel_wait_for_n_joins_the_first_n_in_target_order() {
    let p = parallel(json!(2), "append");
    let (mut run, _) = Run::start(&p, "parallel.json", json!({"topic": "t"}));
    assert!(calls(&run.feed("c1:root/c#1", ok(json!({"hit": "C"})))).is_empty());
    let e = run.feed("c1:root/a#1", ok(json!({"hit": "A"})));
    assert_eq!(
        calls(&e),
        [
            "Close c1:root/b#1 join satisfied",
            r#"End Completed success {"found":["A","C"],"joined":[{"found":["A"]},{"found":["C"],"last":"C"}],"last":"C","topic":"t"}"#,
        ]
    );
    run.assert_replays();
}

#[test]
fn parallel_branch_failure_faults_and_closes_the_other_calls() {
    let p = parallel(json!("all"), "merge");
    let (mut run, _) = Run::start(&p, "parallel.json", json!({"topic": "t"}));
    let e = run.feed("c1:root/b#1", failed("no"));
    assert_eq!(
        lines(&e),
        [
            "Close c1:root/a#1 run faulted",
            "Close c1:root/c#1 run faulted",
            r#"End Faulted node b: call c1:root/b#1 to parallel.json#search failed: {"Failed":{"code":"test","message":"no"}}"#,
        ]
    );
    run.assert_replays();
}

// ------------------------------------------------------------ hitl

fn hitl(on_timeout: &str) -> std::sync::Arc<flow_engine::program::Program> {
    let mut doc = flow_doc("hitl");
    doc["nodes"][1]["on_timeout"] = json!(on_timeout);
    let mut files = std::collections::BTreeMap::new();
    files.insert("hitl.json".to_string(), doc);
    program_of(files, "hitl.json")
}

#[test]
fn hitl_pauses_with_a_deadline_and_resumes_with_the_reply() {
    let p = hitl("raise");
    let (mut run, first) = Run::start(&p, "hitl.json", json!({"draft": "d1"}));
    assert_eq!(
        lines(&first),
        [
            "Checkpoint root start",
            "Checkpoint root review",
            r##"Call c1:root#1 std/human#input {"prompt":"Approve d1?","schema":{"$defs":{"hitl.json.nodes.review.resume":{"properties":{"ok":{"type":"boolean"}},"required":["ok"],"type":"object"}},"$ref":"#/$defs/hitl.json.nodes.review.resume"}}"##,
            "Deadline c1:root#1 60",
        ]
    );
    // Paused: the history so far replays incomplete.
    run.assert_replays();
    run.feed("c1:root#1", ok(json!({"ok": true})));
    assert_eq!(run.output(), json!({"draft": "d1", "review": {"ok": true}}));
    run.assert_replays();
}

#[test]
fn hitl_timeout_raise_closes_the_call_then_faults() {
    let p = hitl("raise");
    let (mut run, _) = Run::start(&p, "hitl.json", json!({"draft": "d1"}));
    let e = run.expire("c1:root#1");
    assert_eq!(
        lines(&e),
        [
            "Close c1:root#1 timeout",
            "End Faulted node review: call c1:root#1 to std/human#input timed out",
        ]
    );
    run.assert_replays();
}

#[test]
fn hitl_timeout_skip_goes_on_without_output_key() {
    let p = hitl("skip");
    let (mut run, _) = Run::start(&p, "hitl.json", json!({"draft": "d1"}));
    let e = run.expire("c1:root#1");
    assert_eq!(
        lines(&e),
        [
            "Close c1:root#1 timeout",
            "Checkpoint root done",
            r#"End Completed success {"draft":"d1"}"#,
        ]
    );
    // Neither a reply nor a second expiry is taken for a closed call.
    assert!(run.machine.expire("c1:root#1").is_err());
    run.assert_replays();
}

// ------------------------------------------------------------ memory

#[test]
fn memory_write_read_and_search_args() {
    let (mut run, first) = Run::of("memory", json!({"user": "u1", "note": "likes owls"}));
    assert_eq!(
        calls(&first),
        [
            r#"Call c1:root#1 std/memory#write {"key":"u1","mode":"overwrite","store":"kv","value":"likes owls"}"#
        ]
    );
    let e = run.feed("c1:root#1", ok(json!(null)));
    assert_eq!(
        calls(&e),
        [r#"Call c1:root#2 std/memory#read {"key":"u1","store":"kv"}"#]
    );
    let e = run.feed("c1:root#2", ok(json!("likes owls")));
    assert_eq!(
        calls(&e),
        [
            r#"Call c1:root#3 std/memory#search {"min_score":0.7,"query":"likes owls","store":"vec","top_k":3}"#
        ]
    );
    run.feed("c1:root#3", ok(json!([{"value": "owls", "score": 0.9}])));
    assert_eq!(
        run.output(),
        json!({"note": "likes owls", "recalled": "likes owls",
               "similar": [{"score": 0.9, "value": "owls"}], "user": "u1"})
    );
    run.assert_replays();
}

// ------------------------------------------------------------ subgraph

#[test]
fn subgraph_is_one_nested_call_with_mapped_input_and_output() {
    let p = program(&["subgraph", "subgraph-child"]);
    assert_eq!(
        p.module("subgraph.json").unwrap().subflows["subgraph-child"],
        "subgraph-child.json"
    );
    let (mut run, first) = Run::start(&p, "subgraph.json", json!({"text": "long"}));
    assert_eq!(
        calls(&first),
        [
            r#"Call c1:root#1 subgraph-child.json#main nested=subgraph-child.json {"input":{"body":"long"}}"#
        ]
    );
    // The host runs the nested module as its own run with that input.
    let (mut child, e) = Run::start(&p, "subgraph-child.json", json!({"body": "long"}));
    assert_eq!(
        calls(&e),
        [r#"Call c1:root#1 std/llm#chat {"model":"offline","prompt":"Summarise long"}"#]
    );
    child.feed("c1:root#1", text("short"));
    assert_eq!(child.output(), json!({"summary": "short"}));
    child.assert_replays();
    let e = run.feed("c1:root#1", ok(child.output()));
    assert_eq!(
        calls(&e),
        [r#"End Completed success {"child":"short","text":"long"}"#]
    );
    run.assert_replays();
}

// ------------------------------------------------------------ agents

fn agent(approval: &str, max_iter: u64) -> std::sync::Arc<flow_engine::program::Program> {
    let mut doc = flow_doc("agent");
    doc["nodes"][1]["config"]["tool_approval"] = json!(approval);
    doc["agents"][0]["max_iter"] = json!(max_iter);
    let mut files = std::collections::BTreeMap::new();
    files.insert("agent.json".to_string(), doc);
    program_of(files, "agent.json")
}

const AGENT_TOOLS: &str = r#""tools":[{"description":"Search the web.","signature":{"err":"#;

#[test]
fn agent_react_loop_calls_tools_then_answers() {
    let p = agent("auto", 3);
    let (mut run, first) = Run::start(&p, "agent.json", json!({"topic": "owls"}));
    let first = calls(&first);
    assert_eq!(first.len(), 1);
    assert!(
        first[0].starts_with(r#"Call c1:root#1 std/llm#chat {"model":"m-agent","prompt":"Research owls\n\nExpected output: A paragraph.","system":"Role: Researcher\nGoal: Find facts","#),
        "{}",
        first[0]
    );
    // The agent's tools, with their signatures.
    assert!(first[0].contains(AGENT_TOOLS), "{}", first[0]);
    assert!(first[0].ends_with(r#""tool":"search"}]}"#), "{}", first[0]);
    // Two tool calls in one turn: made in list order, one after another.
    let e = run.feed(
        "c1:root#1",
        ok(json!({"text": "searching", "tool_calls": [
            {"tool": "search", "args": {"query": "owls"}},
            {"tool": "search", "args": {"query": "owl diet"}}]})),
    );
    assert_eq!(
        calls(&e),
        [r#"Call c1:root#2 agent.json#search {"query":"owls"}"#]
    );
    let e = run.feed("c1:root#2", ok(json!({"hits": ["h1"]})));
    assert_eq!(
        calls(&e),
        [r#"Call c1:root#3 agent.json#search {"query":"owl diet"}"#]
    );
    let e = run.feed("c1:root#3", ok(json!({"hits": ["h2"]})));
    // The next turn carries the transcript; with max_iter 3 it is the
    // second of three turns, so it still offers the tools.
    let next = calls(&e);
    assert_eq!(next.len(), 1);
    assert!(
        next[0].starts_with(
            r#"Call c1:root#4 std/llm#chat {"messages":[{"speaker":"researcher","text":"searching","tool_calls":[{"args":{"query":"owls"},"tool":"search"},{"args":{"query":"owl diet"},"tool":"search"}]},{"result":{"Ok":{"hits":["h1"]}},"speaker":"tool","tool":"agent.json#search"},{"result":{"Ok":{"hits":["h2"]}},"speaker":"tool","tool":"agent.json#search"}],"model":"m-agent","prompt":"Research owls\n\nExpected output: A paragraph.","system":"Role: Researcher\nGoal: Find facts","#
        ),
        "{}",
        next[0]
    );
    assert!(next[0].contains(AGENT_TOOLS), "{}", next[0]);
    // GAP-AGENT-1: {"final": v} is the answer.
    run.feed("c1:root#4", ok(json!({"final": "Owls eat mice."})));
    assert_eq!(
        run.output(),
        json!({"report": "Owls eat mice.", "topic": "owls"})
    );
    run.assert_replays();
}

#[test]
fn agent_with_human_approval_asks_before_each_tool_call_and_takes_a_denial() {
    let p = agent("human", 3);
    let (mut run, _) = Run::start(&p, "agent.json", json!({"topic": "owls"}));
    let e = run.feed(
        "c1:root#1",
        ok(json!({"text": "", "tool_calls": [
            {"tool": "search", "args": {"query": "owls"}},
            {"tool": "search", "args": {"query": "bats"}}]})),
    );
    assert_eq!(
        calls(&e),
        [
            r#"Call c1:root#2 std/human#input {"prompt":"Approve the call of agent.json#search with {\"query\":\"owls\"}?","schema":{"properties":{"approved":{"type":"boolean"}},"required":["approved"],"type":"object"}}"#
        ]
    );
    // Paused on the approval: incomplete.
    run.assert_replays();
    let e = run.feed("c1:root#2", ok(json!({"approved": true})));
    assert_eq!(
        calls(&e),
        [r#"Call c1:root#3 agent.json#search {"query":"owls"}"#]
    );
    let e = run.feed("c1:root#3", ok(json!({"hits": []})));
    assert!(calls(&e)[0].starts_with("Call c1:root#4 std/human#input"));
    // Denied: the tool is not called; the transcript says so.
    let e = run.feed("c1:root#4", ok(json!({"approved": false})));
    let next = calls(&e);
    assert!(
        next[0].starts_with("Call c1:root#5 std/llm#chat"),
        "{next:?}"
    );
    assert!(
        next[0].contains(
            r#"{"result":"denied by the reviewer","speaker":"tool","tool":"agent.json#search"}"#
        ),
        "{next:?}"
    );
    run.feed("c1:root#5", text("Owls."));
    assert_eq!(run.output()["report"], json!("Owls."));
    run.assert_replays();
}

#[test]
fn agent_past_max_iter_faults() {
    let p = agent("auto", 2);
    let (mut run, _) = Run::start(&p, "agent.json", json!({"topic": "owls"}));
    let ask = json!({"text": "", "tool_calls": [{"tool": "search", "args": {"query": "x"}}]});
    run.feed("c1:root#1", ok(ask.clone()));
    run.feed("c1:root#2", ok(json!({"hits": []})));
    // The model asks for a tool again on its last turn.
    let e = run.feed("c1:root#3", ok(ask));
    assert_eq!(
        lines(&e),
        ["End Faulted node agent: agent researcher did not answer within max_iter 2"]
    );
    run.assert_replays();
}

#[test]
fn agent_asking_for_a_tool_it_does_not_have_faults() {
    let p = agent("auto", 3);
    let (mut run, _) = Run::start(&p, "agent.json", json!({"topic": "owls"}));
    let e = run.feed(
        "c1:root#1",
        ok(json!({"text": "", "tool_calls": [{"tool": "rm", "args": {}}]})),
    );
    assert_eq!(
        lines(&e),
        [
            "End Faulted node agent: the model asked for tool \"rm\", which agent researcher does not have"
        ]
    );
    run.assert_replays();
}

// ------------------------------------------------------------ debate

#[test]
fn debate_round_robin_until_the_termination_condition() {
    let (mut run, first) = Run::of("debate", json!({"topic": "tea"}));
    assert_eq!(
        calls(&first),
        [
            r#"Call c1:root#1 std/llm#chat {"model":"m-default","prompt":"Round 1 of 4. Debate the topic.","system":"Role: Advocate"}"#
        ]
    );
    let e = run.feed("c1:root#1", text("Tea is good."));
    assert_eq!(
        calls(&e),
        [
            r#"Call c1:root#2 std/llm#chat {"messages":[{"speaker":"pro","text":"Tea is good."}],"model":"m-con","prompt":"Round 2 of 4. Debate the topic.","system":"Role: Critic"}"#
        ]
    );
    let e = run.feed("c1:root#2", text("AGREED, mostly."));
    // GAP-AGENT-3: output_field gets {transcript, last_message}.
    assert_eq!(
        calls(&e),
        [
            r#"End Completed success {"topic":"tea","verdict":{"last_message":"AGREED, mostly.","transcript":[{"speaker":"pro","text":"Tea is good."},{"speaker":"con","text":"AGREED, mostly."}]}}"#
        ]
    );
    run.assert_replays();
}

#[test]
fn debate_stops_at_max_rounds() {
    let mut doc = flow_doc("debate");
    doc["nodes"][1]["config"]["max_rounds"] = json!(3);
    let mut files = std::collections::BTreeMap::new();
    files.insert("debate.json".to_string(), doc);
    let p = program_of(files, "debate.json");
    let (mut run, _) = Run::start(&p, "debate.json", json!({"topic": "tea"}));
    let mut speakers = Vec::new();
    for k in 1..=3 {
        let call = format!("c1:root#{k}");
        let open = run.machine.open_calls();
        assert_eq!(open.len(), 1);
        speakers.push(open[0].args["system"].as_str().unwrap().to_string());
        run.feed(&call, text(&format!("turn {k}")));
    }
    assert_eq!(
        speakers,
        ["Role: Advocate", "Role: Critic", "Role: Advocate"]
    );
    assert_eq!(run.output()["verdict"]["last_message"], json!("turn 3"));
    assert_eq!(
        run.output()["verdict"]["transcript"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    run.assert_replays();
}

// ------------------------------------------------------------ reducers

#[test]
fn reducers_append_merge_replace_and_last_wins() {
    let (mut run, first) = Run::of(
        "reducers",
        json!({"item": "i1", "obj": {"a": {"x": 1}, "b": [1]}}),
    );
    // An append field starts as [], so a reader sees a list at once.
    let Some(flow_engine::machine::Effect::Checkpoint { state, .. }) = first.first() else {
        panic!()
    };
    assert_eq!(state["log"], json!([]));
    // w1 appended "i1" to log, merged obj into merged (empty so far).
    let e = run.feed(
        "c1:root#1",
        ok(
            json!({"log": ["i2", "i3"], "merged": {"a": {"y": 2}, "b": [2]},
                  "plain": "p2", "lw": "l2"}),
        ),
    );
    assert_eq!(
        calls(&e),
        [
            r#"End Completed success {"item":"i1","log":["i1","i2","i3"],"lw":"l2","merged":{"a":{"x":1,"y":2},"b":[2]},"obj":{"a":{"x":1},"b":[1]},"plain":"p2"}"#
        ]
    );
    run.assert_replays();
}

// ------------------------------------------------------------ fail_branch

#[test]
fn fail_branch_retries_with_recorded_backoff_then_routes_with_error() {
    let (mut run, first) = Run::of("fail-branch", json!({"topic": "t"}));
    assert_eq!(
        calls(&first),
        [r#"Call c1:root#1 std/llm#chat {"model":"offline","prompt":"Draft t"}"#]
    );
    // Attempt 1 fails: sleep 100 ms (2^0), then attempt 2 is a new call.
    let e = run.feed("c1:root#1", failed("busy"));
    assert_eq!(calls(&e), [r#"Call c1:root#2 std/clock#sleep {"ms":100}"#]);
    let e = run.feed("c1:root#2", ok(json!(null)));
    assert_eq!(
        calls(&e),
        [r#"Call c1:root#3 std/llm#chat {"model":"offline","prompt":"Draft t"}"#]
    );
    // Attempt 2 fails: sleep 200 ms (2^1).
    let e = run.feed("c1:root#3", failed("busy"));
    assert_eq!(calls(&e), [r#"Call c1:root#4 std/clock#sleep {"ms":200}"#]);
    run.feed("c1:root#4", ok(json!(null)));
    // Attempt 3 (max_attempts) fails: no more retries; the target runs
    // with $.error in its template.
    let e = run.feed("c1:root#5", failed("gone"));
    assert_eq!(
        lines(&e),
        [
            "Checkpoint root recover",
            r#"Call c1:root#6 std/llm#chat {"model":"offline","prompt":"Node draft failed at c1:root#5: {\"Failed\":{\"code\":\"test\",\"message\":\"gone\"}}"}"#
        ]
    );
    run.feed("c1:root#6", text("sorry"));
    assert_eq!(
        run.ending(),
        Some(&flow_engine::machine::Ending::Completed {
            exit: "recovered".into(),
            output: json!({"apology": "sorry", "topic": "t"})
        })
    );
    run.assert_replays();
}

#[test]
fn fail_branch_success_on_a_retry_goes_on_normally() {
    let (mut run, _) = Run::of("fail-branch", json!({"topic": "t"}));
    run.feed("c1:root#1", failed("busy"));
    run.feed("c1:root#2", ok(json!(null)));
    run.feed("c1:root#3", text("draft"));
    assert_eq!(run.output(), json!({"draft": "draft", "topic": "t"}));
    run.assert_replays();
}

#[test]
fn fail_branch_takes_a_structured_mismatch_as_a_failure() {
    // A not-fitting answer is a node failure (GAP-LLM-1), so fail_branch
    // handles it like a Failed reply.
    let mut doc = flow_doc("fail-branch");
    doc["nodes"][1]["structured_output"] = json!({"schema": {"type": "object", "properties": {"draft": {"type": "string"}}, "required": ["draft"]}});
    // Without output_key the answer's `draft` goes to the `draft` field
    // (an object into the Text field would not check: FS0901).
    doc["nodes"][1]
        .as_object_mut()
        .unwrap()
        .remove("output_key");
    doc["nodes"][1]["fail_branch"]["retry"]["max_attempts"] = json!(1);
    let mut files = std::collections::BTreeMap::new();
    files.insert("fail-branch.json".to_string(), doc);
    let p = program_of(files, "fail-branch.json");
    let (mut run, _) = Run::start(&p, "fail-branch.json", json!({"topic": "t"}));
    let e = run.feed("c1:root#1", ok(json!({"draft": 5})));
    let l = calls(&e);
    assert!(
        l[0].starts_with(r#"Call c1:root#2 std/llm#chat {"model":"offline","prompt":"Node draft failed at c1:root#1: {\"BadReply\":\"the answer does not fit structured_output: "#),
        "{l:?}"
    );
    run.feed("c1:root#2", text("sorry"));
    assert_eq!(run.output()["apology"], json!("sorry"));
    run.assert_replays();
}

// ------------------------------------------------------------ validator

fn validator(on_fail: &str) -> std::sync::Arc<flow_engine::program::Program> {
    let mut doc = flow_doc("validator");
    doc["nodes"][1]["output_validator"]["on_fail"] = json!(on_fail);
    let mut files = std::collections::BTreeMap::new();
    files.insert("validator.json".to_string(), doc);
    program_of(files, "validator.json")
}

#[test]
fn validator_valid_output_is_written() {
    let p = validator("raise");
    let (mut run, _) = Run::start(&p, "validator.json", json!({"q": "2+2"}));
    let e = run.feed("c1:root#1", ok(json!({"answer": "4"})));
    assert_eq!(
        calls(&e),
        [
            r#"Call c1:root#2 fn/checks#answer {"input":{"output":{"answer":"4"},"state":{"q":"2+2"}}}"#
        ]
    );
    run.feed("c1:root#2", ok(json!({"valid": true})));
    assert_eq!(run.output(), json!({"answer": "4", "q": "2+2"}));
    run.assert_replays();
}

#[test]
fn validator_raise_faults_with_the_reason() {
    let p = validator("raise");
    let (mut run, _) = Run::start(&p, "validator.json", json!({"q": "2+2"}));
    run.feed("c1:root#1", ok(json!({"answer": "5"})));
    let e = run.feed(
        "c1:root#2",
        ok(json!({"valid": false, "reason": "wrong sum"})),
    );
    assert_eq!(
        lines(&e),
        ["End Faulted node ask: output failed validation: wrong sum"]
    );
    run.assert_replays();
}

#[test]
fn validator_retry_calls_the_node_again_up_to_max_retries() {
    let p = validator("retry");
    let (mut run, _) = Run::start(&p, "validator.json", json!({"q": "2+2"}));
    run.feed("c1:root#1", ok(json!({"answer": "5"})));
    let e = run.feed("c1:root#2", ok(json!({"valid": false})));
    assert_eq!(
        calls(&e),
        [r#"Call c1:root#3 validator.json#ask {"q":"2+2"}"#]
    );
    run.feed("c1:root#3", ok(json!({"answer": "3"})));
    run.feed("c1:root#4", ok(json!({"valid": false})));
    run.feed("c1:root#5", ok(json!({"answer": "6"})));
    // max_retries 2 used up.
    let e = run.feed("c1:root#6", ok(json!(false)));
    assert_eq!(
        lines(&e),
        ["End Faulted node ask: output failed validation after 2 retries"]
    );
    run.assert_replays();
    // And a retry that passes goes on.
    let (mut run, _) = Run::start(&p, "validator.json", json!({"q": "2+2"}));
    run.feed("c1:root#1", ok(json!({"answer": "5"})));
    run.feed("c1:root#2", ok(json!({"valid": false})));
    run.feed("c1:root#3", ok(json!({"answer": "4"})));
    run.feed("c1:root#4", ok(json!({"valid": true})));
    assert_eq!(run.output(), json!({"answer": "4", "q": "2+2"}));
    run.assert_replays();
}

#[test]
fn validator_skip_goes_on_without_writing() {
    let p = validator("skip");
    let (mut run, _) = Run::start(&p, "validator.json", json!({"q": "2+2"}));
    run.feed("c1:root#1", ok(json!({"answer": "5"})));
    let e = run.feed("c1:root#2", ok(json!({"valid": false})));
    assert_eq!(calls(&e), [r#"End Completed success {"q":"2+2"}"#]);
    run.assert_replays();
}

#[test]
fn validator_reply_of_the_wrong_shape_faults() {
    let p = validator("raise");
    let (mut run, _) = Run::start(&p, "validator.json", json!({"q": "2+2"}));
    run.feed("c1:root#1", ok(json!({"answer": "5"})));
    let e = run.feed("c1:root#2", ok(json!("yes")));
    assert_eq!(
        lines(&e),
        [
            r#"End Faulted node ask: output validator answered "yes", not {"valid": Bool, "reason"?: Text}"#
        ]
    );
    run.assert_replays();
}

// ------------------------------------------------------------ limits

#[test]
fn step_limit_faults() {
    let (run, e) = Run::of("steps", json!({"x": "a"}));
    // start, spin ×4 = 5 node executions; the sixth faults.
    assert_eq!(
        lines(&e),
        [
            "Checkpoint root start",
            "Checkpoint root spin",
            "Checkpoint root spin",
            "Checkpoint root spin",
            "Checkpoint root spin",
            "End Faulted step limit of 5 node executions reached at node spin",
        ]
    );
    run.assert_replays();
}

/// Issue 17 item 3: a loop without calls comes in slices of at most
/// `SLICE` effects, each handed to the host before the next is computed;
/// the slices together are exactly the run at rest, and replay matches.
#[test]
fn a_long_loop_without_calls_comes_in_bounded_slices() {
    use flow_engine::machine::{FeedError, Machine, SLICE};
    let p = {
        let mut doc = flow_doc("steps");
        doc["harness_meta"]["max_steps"] = json!(5_000);
        let mut files = std::collections::BTreeMap::new();
        files.insert("steps.json".to_string(), doc);
        program_of(files, "steps.json")
    };
    let input = json!({"x": "a"});
    let (mut m, first) = Machine::start(p.clone(), "steps.json", &input).unwrap();
    assert_eq!(first.len(), SLICE);
    assert!(m.busy() && m.ending().is_none());
    // A busy machine takes no reply: the host proceeds first.
    assert!(matches!(
        m.feed("c1:root#1", &ok(json!({}))),
        Err(FeedError::Busy)
    ));
    let mut sliced = first;
    let mut slices = 1;
    while m.busy() {
        let more = m.proceed();
        assert!(!more.is_empty() && more.len() <= SLICE);
        sliced.extend(more);
        slices += 1;
    }
    assert_eq!(slices, 5_000 / SLICE + 1);
    // 5,000 checkpoints, then the fault at the limit.
    assert_eq!(sliced.len(), 5_001);
    assert!(lines(&sliced[5_000..])[0].starts_with("End Faulted step limit of 5000"));
    let (whole, _) = Run::start(&p, "steps.json", input);
    assert_eq!(
        whole.effects, sliced,
        "slicing changes no effect and no order"
    );
    whole.assert_replays();
}

/// tool-invoke with two transforms, `t1` and `t2`, joined as `edges` say.
fn tool_invoke_with_transforms(
    edges: serde_json::Value,
) -> std::sync::Arc<flow_engine::program::Program> {
    let mut doc = flow_doc("tool-invoke");
    let copy = |id: &str| {
        json!({"id": id, "type": "transform", "mode": "mapping",
        "mapping": [{"from": "$.state.q", "to": "q"}]})
    };
    doc["nodes"]
        .as_array_mut()
        .unwrap()
        .extend([copy("t1"), copy("t2")]);
    doc["edges"] = edges;
    let mut files = std::collections::BTreeMap::new();
    files.insert("tool-invoke.json".to_string(), doc);
    program_of(files, "tool-invoke.json")
}

/// A slice of at most `limit` effects (`first`), checked to have stopped
/// there when the `whole` run had more, then the busy machine's next
/// slices to the rest: all the effects.
fn sliced_to_the_rest(
    m: &mut flow_engine::machine::Machine,
    mut first: Vec<flow_engine::machine::Effect>,
    limit: usize,
    whole: usize,
) -> Vec<flow_engine::machine::Effect> {
    // A slice stops entering nodes once `limit` effects are out.
    assert_eq!(m.busy(), first.len() < whole, "slice of {limit}");
    if limit == 1 {
        assert!(m.busy(), "{} effects came in one slice of 1", first.len());
    }
    while m.busy() {
        first.extend(m.proceed());
    }
    first
}

#[test]
fn a_reply_fed_within_a_small_slice_derives_the_same_effects() {
    use flow_engine::machine::{Machine, SLICE};
    let p = tool_invoke_with_transforms(
        json!([{"from": "start", "to": "search"}, {"from": "search", "to": "t1"},
            {"from": "t1", "to": "t2"}, {"from": "t2", "to": "done"}]),
    );
    let input = json!({"q": "rust", "limit": 2});
    let reply = ok(json!({"hits": ["a"], "total": 1}));
    let (mut whole, _) = Machine::start(p.clone(), "tool-invoke.json", &input).unwrap();
    let all = whole.feed("c1:root#1", &reply).unwrap();
    assert!(all.len() > 1 && !whole.busy());
    for limit in [1, 2, SLICE] {
        let (mut m, _) = Machine::start(p.clone(), "tool-invoke.json", &input).unwrap();
        let first = m.feed_within("c1:root#1", &reply, limit).unwrap();
        let sliced = sliced_to_the_rest(&mut m, first, limit, all.len());
        assert_eq!(
            sliced, all,
            "a slice of {limit} changes no effect and no order"
        );
        assert_eq!(m.ending(), whole.ending());
    }
}

#[test]
fn a_start_within_a_small_slice_derives_the_same_effects() {
    use flow_engine::machine::{Machine, SLICE};
    let p = tool_invoke_with_transforms(
        json!([{"from": "start", "to": "t1"}, {"from": "t1", "to": "t2"},
            {"from": "t2", "to": "search"}, {"from": "search", "to": "done"}]),
    );
    let input = json!({"q": "rust", "limit": 2});
    let (whole, all) = Machine::start(p.clone(), "tool-invoke.json", &input).unwrap();
    assert!(all.len() > 2 && !whole.busy(), "{} effects", all.len());
    for limit in [1, 2, SLICE] {
        let (mut m, first) =
            Machine::start_within(p.clone(), "tool-invoke.json", &input, limit).unwrap();
        let sliced = sliced_to_the_rest(&mut m, first, limit, all.len());
        assert_eq!(
            sliced, all,
            "a slice of {limit} changes no effect and no order"
        );
        assert_eq!(m.open_calls().len(), whole.open_calls().len());
    }
}

// ------------------------------------------------------------ fork

#[test]
fn fork_resumes_at_a_checkpoint_with_a_replaced_field() {
    let p = program(&["tool-invoke"]);
    let (mut run, first) = Run::start(&p, "tool-invoke.json", json!({"q": "rust", "limit": 2}));
    run.feed("c1:root#1", ok(json!({"hits": ["a"], "total": 1})));
    // The checkpoint at `search`, with q replaced (decoded against
    // state_schema, GAP-CKPT-2).
    let flow_engine::machine::Effect::Checkpoint { state, .. } = &first[1] else {
        panic!()
    };
    let mut state = state.clone();
    let q =
        flow_engine::machine::Machine::decode_state_field(&p, "tool-invoke.json", "q", r#""go""#)
            .unwrap();
    state["q"] = q;
    let (m, e) = flow_engine::machine::Machine::resume_at(
        p.clone(),
        "tool-invoke.json",
        "search",
        state.clone(),
    )
    .unwrap();
    assert_eq!(
        lines(&e),
        [
            "Checkpoint root search",
            r#"Call c1:root#1 tool-invoke.json#search {"limit":2,"query":"go"}"#
        ]
    );
    // The fork's own history: Start with a parent, its first Checkpoint,
    // then on; it replays matched.
    let mut fork = Run {
        program: p.clone(),
        module: "tool-invoke.json".into(),
        machine: m,
        effects: Vec::new(),
        facts: vec![{
            let mut s = start_fact("tool-invoke.json", &json!({}));
            s["parent"] = json!({"run": TEST_RUN, "checkpoint": 3});
            s
        }],
    };
    for f in e.iter().filter_map(|e| e.fact()) {
        let n = fork.facts.len() as u64 + 1;
        fork.facts.push(f.numbered(n).into_json());
    }
    fork.feed("c1:root#1", ok(json!({"hits": ["g"], "total": 9})));
    assert_eq!(
        fork.output(),
        json!({"hits": ["g"], "limit": 2, "meta": {"total": 9}, "q": "go"})
    );
    fork.assert_replays();
}

#[test]
fn fork_refuses_unknown_fields_wrong_types_and_unknown_nodes() {
    use flow_engine::machine::{Machine, Refusal};
    let p = program(&["tool-invoke"]);
    let m = "tool-invoke.json";
    assert_eq!(
        Machine::decode_state_field(&p, m, "nope", "1").unwrap_err(),
        "state_schema has no field \"nope\""
    );
    let e = Machine::decode_state_field(&p, m, "limit", r#""ten""#).unwrap_err();
    assert!(e.starts_with("limit: "), "{e}");
    let e = Machine::decode_state_field(&p, m, "limit", "1.5").unwrap_err();
    assert!(e.starts_with("limit: "), "{e}");
    assert_eq!(
        Machine::decode_state_field(&p, m, "limit", "10").unwrap(),
        json!(10)
    );
    // An object field takes any object, nothing else.
    assert!(Machine::decode_state_field(&p, m, "meta", r#"{"a":1}"#).is_ok());
    assert!(Machine::decode_state_field(&p, m, "meta", "[1]").is_err());
    assert!(Machine::decode_state_field(&p, "other.json", "q", "1").is_err());
    assert_eq!(
        Machine::resume_at(p.clone(), m, "nowhere", json!({})).unwrap_err(),
        Refusal::NoNode("nowhere".into())
    );
    assert_eq!(
        Machine::resume_at(p.clone(), "other.json", "search", json!({})).unwrap_err(),
        Refusal::NoModule("other.json".into())
    );
}

// ------------------------------------------------------------ fn_ref roles

#[test]
fn condition_fn_refs_are_calls_tried_in_order() {
    let (mut run, first) = Run::of("fn-refs", json!({"n": 5}));
    assert_eq!(
        calls(&first),
        [r#"Call c1:root#1 fn/cond#big {"input":{"state":{"n":5}}}"#]
    );
    // false: the expression branch is tried (n > 100 does not hold), then
    // the next fn_ref.
    let e = run.feed("c1:root#1", ok(json!(false)));
    assert_eq!(
        calls(&e),
        [r#"Call c1:root#2 fn/cond#small {"input":{"state":{"n":5}}}"#]
    );
    let e = run.feed("c1:root#2", ok(json!(true)));
    assert_eq!(
        lines(&e),
        ["Checkpoint root small", r#"End Completed small {"n":5}"#]
    );
    run.assert_replays();
    // An answer that is not a boolean faults.
    let (mut run, _) = Run::of("fn-refs", json!({"n": 5}));
    let e = run.feed("c1:root#1", ok(json!("yes")));
    assert_eq!(
        lines(&e),
        [r#"End Faulted node route: condition function answered "yes", not a boolean"#]
    );
    run.assert_replays();
}

#[test]
fn join_fn_ref_gets_the_results_in_target_order() {
    let (mut run, first) = Run::of("fn-refs", json!({"n": 5}));
    assert_eq!(calls(&first).len(), 1);
    let e = run.feed("c1:root#1", ok(json!(true)));
    // Both branches are mappings: they reach the join at once; the join
    // function is the root task's next call.
    assert_eq!(
        lines(&e),
        [
            "Checkpoint root fork",
            "Checkpoint root/left left",
            "Checkpoint root/right right",
            r#"Call c1:root#2 fn/joins#sum {"input":{"results":[{"left":5},{"right":5}]}}"#,
        ]
    );
    let e = run.feed("c1:root#2", ok(json!({"sum": 10})));
    assert_eq!(
        lines(&e),
        [
            "Checkpoint root join",
            "Checkpoint root big",
            r#"End Completed big {"joined":{"sum":10},"left":5,"n":5,"right":5}"#,
        ]
    );
    run.assert_replays();
}

#[test]
fn debate_custom_speaker_and_no_repeat() {
    let mut doc = flow_doc("debate");
    let cfg = &mut doc["nodes"][1]["config"];
    cfg["speaker_selection"] = json!("custom");
    cfg["speaker_selection_fn_ref"] = json!("pick:next");
    cfg["allow_repeat_speaker"] = json!(false);
    let mut files = std::collections::BTreeMap::new();
    files.insert("debate.json".to_string(), doc);
    let p = program_of(files, "debate.json");
    let (mut run, first) = Run::start(&p, "debate.json", json!({"topic": "tea"}));
    assert_eq!(
        calls(&first),
        [r#"Call c1:root#1 fn/pick#next {"input":{"agents":["pro","con"],"transcript":[]}}"#]
    );
    let e = run.feed("c1:root#1", ok(json!("con")));
    assert!(calls(&e)[0].starts_with(r#"Call c1:root#2 std/llm#chat {"model":"m-con""#));
    let e = run.feed("c1:root#2", text("No."));
    assert_eq!(
        calls(&e),
        [
            r#"Call c1:root#3 fn/pick#next {"input":{"agents":["pro","con"],"transcript":[{"speaker":"con","text":"No."}]}}"#
        ]
    );
    // con again, with allow_repeat_speaker false: a fault.
    let e = run.feed("c1:root#3", ok(json!("con")));
    assert_eq!(
        lines(&e),
        ["End Faulted node debate: con would speak twice in a row"]
    );
    run.assert_replays();
    // An id that is not one of the debate's agents.
    let (mut run, _) = Run::start(&p, "debate.json", json!({"topic": "tea"}));
    let e = run.feed("c1:root#1", ok(json!("judge")));
    assert_eq!(
        lines(&e),
        ["End Faulted node debate: \"judge\" is not one of the debate's agents"]
    );
}

#[test]
fn only_a_hitl_call_with_a_deadline_can_expire() {
    use flow_engine::machine::FeedError;
    let (mut run, _) = Run::of("tool-invoke", json!({"q": "rust", "limit": 2}));
    assert_eq!(
        run.machine.expire("c1:root#1"),
        Err(FeedError::NoDeadline("c1:root#1".into()))
    );
    // Nothing changed: the call is still open and answers normally.
    assert_eq!(run.open(), ["c1:root#1"]);
    run.feed("c1:root#1", ok(json!({"hits": [], "total": 0})));
    assert!(run.output().is_object());
    run.assert_replays();
    // A forged timeout Close of that call in a history diverges.
    let (run, _) = Run::of("tool-invoke", json!({"q": "rust", "limit": 2}));
    let mut f = run.facts.clone();
    f.push(json!({"fact": "Close", "n": 5, "call": "c1:root#1", "reason": "timeout"}));
    let (n, why) = diverged_at(&run.program, &f);
    assert_eq!(n, 5);
    assert!(why.contains("has no deadline"), "{why}");
}
