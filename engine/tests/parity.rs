//! Issue 11, item 6: `flow check` accepts what buildaharness accepts and
//! refuses what it refuses. One test per rule, each on a fixture document
//! of `tests/flows/parity/` taken from buildaharness's schema
//! (`spec/schema.ts`), its cross-reference validation and its schema tests
//! (each fixture's `source` names which); docs/engine.md, "buildaharness
//! parity", says what was decided and why.

mod common;

use common::{Run, failed, program_of, text};
use flow_engine::{Code, Report, Severity, check};
use serde_json::{Value as Json, json};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// The `flow` of `flows/parity/<name>.json`.
fn doc(name: &str) -> Json {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/flows/parity")
        .join(format!("{name}.json"));
    let text = std::fs::read_to_string(&path).unwrap();
    let d = flow_abi::json::parse(&text).unwrap();
    assert!(d["about"].is_string() && d["source"].is_string(), "{name}");
    d["flow"].clone()
}

fn errors(r: &Report) -> Vec<String> {
    r.errors().map(|d| d.to_string()).collect()
}

/// The (code, pointer) of every diagnostic with `severity`.
fn found(r: &Report, severity: Severity) -> Vec<(&'static str, String)> {
    r.diagnostics
        .iter()
        .filter(|d| d.severity == severity)
        .map(|d| (d.code.code(), d.pointer.clone()))
        .collect()
}

fn at(code: &'static str, pointer: &str) -> (&'static str, String) {
    (code, pointer.to_string())
}

fn run_of(name: &str, input: Json) -> (Run, Vec<flow_engine::machine::Effect>) {
    let module = format!("{name}.json");
    let p = program_of(BTreeMap::from([(module.clone(), doc(name))]), &module);
    Run::start(&p, &module, input)
}

/// FS-IN-2: `output_schema: {}` says nothing, so the input is any object.
#[test]
fn an_input_node_with_an_empty_output_schema_is_accepted() {
    let r = check(&doc("input-empty-schema"));
    assert!(errors(&r).is_empty(), "{:#?}", errors(&r));
    let (run, _) = run_of("input-empty-schema", json!({}));
    assert_eq!(run.output(), json!({}));
    run.assert_replays();
}

/// FS-TR-3, read with buildaharness's canvas schema and tests.
#[test]
fn a_transform_with_no_mapping_entries_is_accepted_with_a_warning() {
    let r = check(&doc("transform-empty-mapping"));
    assert!(errors(&r).is_empty(), "{:#?}", errors(&r));
    assert_eq!(
        found(&r, Severity::Warning)
            .into_iter()
            .filter(|(c, _)| *c == Code::NoEffect.code())
            .collect::<Vec<_>>(),
        [at("FS0803", "/nodes/1"), at("FS0803", "/nodes/2")]
    );
    let (run, _) = run_of("transform-empty-mapping", json!({"x": 1}));
    assert_eq!(run.output(), json!({"x": 1}), "a no-op changes nothing");
    run.assert_replays();
}

/// FS-LLM-10, GAP-GRAPH-1: the drawn fail edge is not a second route.
#[test]
fn a_fail_branch_target_drawn_as_a_direct_edge_is_the_failure_route() {
    let r = check(&doc("fail-branch-drawn"));
    assert!(errors(&r).is_empty(), "{:#?}", errors(&r));
    // The route is the edge to `done`, whichever order the edges are in.
    let (mut run, _) = run_of("fail-branch-drawn", json!({"x": "a"}));
    run.feed("c1:root#1", text("hi"));
    assert_eq!(run.output(), json!({"x": "a", "answer": "hi"}));
    run.assert_replays();
    // Failures go to `handler` after the retries.
    let (mut run, _) = run_of("fail-branch-drawn", json!({"x": "a"}));
    for k in [1, 3, 5] {
        run.feed(&format!("c1:root#{k}"), failed("down"));
        if k < 5 {
            run.feed(&format!("c1:root#{}", k + 1), common::ok(Json::Null));
        }
    }
    assert_eq!(run.output(), json!({"x": "a"}));
    assert!(
        run.effects
            .iter()
            .any(|e| matches!(e, flow_engine::machine::Effect::Checkpoint { node, .. } if node == "handler")),
        "routed to the handler"
    );
    run.assert_replays();
}

/// FS-TR-3: `to` is "a state key".
#[test]
fn a_mapping_target_may_be_a_plain_key_with_a_hyphen() {
    let r = check(&doc("hyphen-target"));
    assert!(
        r.diagnostics.is_empty(),
        "no error and no warning: {:#?}",
        r.diagnostics
    );
    let (run, _) = run_of("hyphen-target", json!({"name": "ada"}));
    assert_eq!(run.output(), json!({"name": "ada", "user-name": "ada"}));
    run.assert_replays();
}

/// FS-TI-2, FS-MR-2, read with buildaharness's validateCrossRefs.
#[test]
fn tools_and_stores_of_a_flow_without_registries_are_accepted_with_a_warning() {
    let r = check(&doc("no-registry"));
    assert!(errors(&r).is_empty(), "{:#?}", errors(&r));
    let warned: Vec<_> = found(&r, Severity::Warning)
        .into_iter()
        .filter(|(c, _)| *c == "FS0308")
        .collect();
    assert_eq!(
        warned,
        [
            at("FS0308", "/nodes/1/tool_id"),
            at("FS0308", "/nodes/2/store_id")
        ]
    );
    // The tool is bound by FILE#ID.
    let files = BTreeMap::from([("no-registry.json".to_string(), doc("no-registry"))]);
    let p = program_of(files, "no-registry.json");
    let m = p.root_module().unwrap();
    assert!(
        m.decls.contains_key("no-registry.json#any-tool"),
        "{:?}",
        m.decls.keys()
    );
    // Declared registries, even empty ones, are checked (buildaharness
    // "catches tool_invoke referencing an unregistered tool").
    let mut declared = doc("no-registry");
    declared["tools"] = json!({});
    declared["memory_stores"] = json!({});
    let r = check(&declared);
    assert_eq!(
        found(&r, Severity::Error),
        [
            at("FS0302", "/nodes/1/tool_id"),
            at("FS0303", "/nodes/2/store_id")
        ]
    );
}

/// FS-TR-4, GAP-FN-1: every form names an `fn/` declaration.
#[test]
fn fn_refs_in_npm_and_path_form_name_fn_declarations() {
    let r = check(&doc("fn-ref-forms"));
    assert!(errors(&r).is_empty(), "{:#?}", errors(&r));
    let files = BTreeMap::from([("fn-ref-forms.json".to_string(), doc("fn-ref-forms"))]);
    let p = program_of(files, "fn-ref-forms.json");
    let ids: Vec<&String> = p.root_module().unwrap().decls.keys().collect();
    assert_eq!(
        ids,
        [
            "fn/@scope/pkg#fn",
            "fn/validators/quality.ts#default",
            "std/llm#chat"
        ]
    );
    // A bare path with no `./` (neither form) is still refused.
    let mut bad = doc("fn-ref-forms");
    bad["nodes"][2]["fn_ref"] = json!("validators/quality.ts");
    assert_eq!(
        found(&check(&bad), Severity::Error),
        [at("FS0305", "/nodes/2/fn_ref")]
    );
}

/// FS-LLM-4, FS-LLM-5: one of the two prompts is needed.
#[test]
fn an_llm_call_without_a_prompt_is_refused() {
    let r = check(&doc("llm-without-prompt"));
    assert_eq!(found(&r, Severity::Error), [at("FS0102", "/nodes/1")]);
}

/// FS-TOOL-3, GAP-C-3.
#[test]
fn an_mcp_server_url_must_be_a_url_or_an_environment_reference() {
    let r = check(&doc("mcp-url"));
    assert_eq!(
        found(&r, Severity::Error),
        [at("FS0104", "/tools/bad/mcp_server_url")]
    );
    assert!(
        found(&r, Severity::Warning).contains(&at("FS0802", "/tools/literal/mcp_server_url")),
        "a literal URL is accepted with a warning"
    );
    assert!(
        !r.diagnostics
            .iter()
            .any(|d| d.pointer.starts_with("/tools/env")),
        "an environment reference is clean"
    );
}

/// FS-MW-4.
#[test]
fn an_unknown_memory_tier_is_refused() {
    let r = check(&doc("memory-tier"));
    assert_eq!(found(&r, Severity::Error), [at("FS0104", "/nodes/5/tier")]);
}
