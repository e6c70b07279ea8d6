//! examples/tools: the committed `flow tools` documents, and a Tool process
//! in Python on the Python toolkit (kv) through the real protocol client.
//! The Rust toolkit's example (calc) is tested beside its binary, in
//! toolkit/tests/calc.rs.
//! REQUIREMENTS PRO-4 (one protocol, any language), TKT-2..TKT-6.

mod common;

use common::*;
use flow_abi::fact::{CallId, RunId};
use flow_tools::manifest::{Binding, Launch};
use flow_tools::process::ProcessOptions;
use flow_tools::{CallOutcome, CallRequest, Declarations, ProcessHandle};
use tokio_util::sync::CancellationToken;

/// The committed `flow tools` documents are what the declarations produce
/// (regenerate with UPDATE_EXAMPLES=1).
#[test]
fn example_documents_are_current() {
    for (name, (types, decls)) in [("calc", calc_decls()), ("kv", kv_decls())] {
        let doc = flow_toolkit::document::document(name, &decls, &types);
        let mut text = serde_json::to_string_pretty(&doc).unwrap();
        text.push('\n');
        let path = examples().join(name).join("tools.json");
        if std::env::var_os("UPDATE_EXAMPLES").is_some() {
            std::fs::write(&path, &text).unwrap();
        }
        let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            on_disk == text,
            "{} is stale: run with UPDATE_EXAMPLES=1",
            path.display()
        );
    }
}

fn call(id: &str, tool: &str, a: serde_json::Value) -> CallRequest {
    CallRequest {
        run: RunId::parse(RUN).unwrap(),
        call: CallId::parse(id).unwrap(),
        tool: tool.into(),
        args: args(a),
    }
}

async fn start(argv: Vec<String>, decls: Declarations) -> ProcessHandle {
    let b = Binding {
        launch: Launch::Command(argv),
        dir: examples(),
        resend: false,
    };
    ProcessHandle::start(
        &b,
        decls,
        ProcessOptions::default(),
        CancellationToken::new(),
    )
    .await
    .unwrap()
}

/// PRO-4: the protocol is language neutral: a Python process (on the
/// Python toolkit) serves the same declarations.
#[tokio::test]
async fn kv_in_plain_python() {
    let (types, decls) = kv_decls();
    let p = start(
        vec!["python3".into(), "kv/kv.py".into(), "kv/tools.json".into()],
        Declarations::new(types, decls),
    )
    .await;
    let out = p
        .call(call(
            "c1:root#1",
            "kv.json#put",
            serde_json::json!({"key": "k", "value": "vé"}),
        ))
        .await;
    assert_eq!(out, CallOutcome::Ok(flow_abi::Value::Unit));
    let out = p
        .call(call(
            "c1:root#2",
            "kv.json#get",
            serde_json::json!({"key": "k"}),
        ))
        .await;
    assert_eq!(out, CallOutcome::Ok(flow_abi::Value::Text("vé".into())));
    let out = p
        .call(call(
            "c1:root#3",
            "kv.json#get",
            serde_json::json!({"key": "nope"}),
        ))
        .await;
    assert_eq!(
        out.into_outcome().to_json(),
        serde_json::json!({"Failed": {"message": "no value for nope"}})
    );
}
