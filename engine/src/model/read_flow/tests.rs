use super::*;
use crate::model::NodeKind;
use serde_json::json;

#[test]
fn reads_the_minimal_flow() {
    // FS-MIN-1: the reference's "Minimal valid flow".
    let doc = json!({
      "spec_version": "1.0.0", "id": "hello-world",
      "nodes": [
        { "id": "start", "type": "input", "output_schema": { "name": { "type": "string" } } },
        { "id": "greet", "type": "llm_call", "prompt_template": "Greet {{state.name}} warmly in one sentence.", "output_key": "greeting" },
        { "id": "done", "type": "output" }
      ],
      "edges": [
        { "type": "direct", "from": "start", "to": "greet" },
        { "type": "direct", "from": "greet", "to": "done" }
      ]
    });
    let (flow, diags) = parse(&doc);
    assert!(diags.is_empty(), "{diags:?}");
    assert_eq!(flow.nodes.len(), 3);
    let NodeKind::Input(i) = &flow.nodes[0].kind else {
        panic!()
    };
    assert!(i.output_schema.as_ref().unwrap().shorthand);
    let NodeKind::Output(o) = &flow.nodes[2].kind else {
        panic!()
    };
    assert_eq!(o.exit_code, "success");
}

#[test]
fn not_an_object() {
    let (_, d) = parse(&json!([1]));
    assert_eq!(d[0].code, Code::WrongType);
    assert_eq!(d[0].pointer, "");
}
