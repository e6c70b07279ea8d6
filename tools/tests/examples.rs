//! examples/tools: a Tool process written with the Rust toolkit (calc) and
//! one in Python on the Python toolkit (kv), both through the real protocol client.
//! REQUIREMENTS PRO-4 (one protocol, any language), TKT-2..TKT-6.

mod common;

use common::*;
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
        run: "run-1".into(),
        call: id.into(),
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

/// TKT-2, TKT-3: exact big integers and decimals; TKT-5: args that do not
/// decode are NotRun; the declared error is Failed.
#[tokio::test]
async fn calc_with_the_rust_toolkit() {
    let (types, decls) = calc_decls();
    let p = start(
        vec![
            env!("CARGO_BIN_EXE_flow-example-calc").into(),
            "calc/tools.json".into(),
        ],
        Declarations::new(types, decls),
    )
    .await;
    let big = "123456789012345678901234567890";
    let out = p
        .call(call(
            "c1",
            "calc.json#add",
            serde_json::json!({"a": big.parse::<serde_json::Number>().unwrap(), "b": 1}),
        ))
        .await;
    assert_eq!(
        out.to_json().to_string(),
        r#"{"Ok":123456789012345678901234567891}"#
    );
    let out = p
        .call(call(
            "c2",
            "calc.json#div",
            serde_json::json!({"a": 1, "b": 8}),
        ))
        .await;
    assert_eq!(out.to_json().to_string(), r#"{"Ok":0.125}"#);
    let out = p
        .call(call(
            "c3",
            "calc.json#div",
            serde_json::json!({"a": 1, "b": 0}),
        ))
        .await;
    assert_eq!(
        out.to_json(),
        serde_json::json!({"Failed": {"message": "division by zero"}})
    );
    let out = p
        .call(call(
            "c4",
            "calc.json#add",
            serde_json::json!({"a": "one", "b": 1}),
        ))
        .await;
    assert!(
        matches!(&out, CallOutcome::NotRun(w) if w.contains("args do not decode")),
        "{out:?}"
    );
    // 1.5 is not an Int: decoding never coerces.
    let out = p
        .call(call(
            "c5",
            "calc.json#add",
            serde_json::json!({"a": 1.5, "b": 1}),
        ))
        .await;
    assert!(matches!(out, CallOutcome::NotRun(_)), "{out:?}");
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
            "c1",
            "kv.json#put",
            serde_json::json!({"key": "k", "value": "vé"}),
        ))
        .await;
    assert_eq!(out, CallOutcome::Ok(flow_abi::Value::Unit));
    let out = p
        .call(call("c2", "kv.json#get", serde_json::json!({"key": "k"})))
        .await;
    assert_eq!(out, CallOutcome::Ok(flow_abi::Value::Text("vé".into())));
    let out = p
        .call(call(
            "c3",
            "kv.json#get",
            serde_json::json!({"key": "nope"}),
        ))
        .await;
    assert_eq!(
        out.to_json(),
        serde_json::json!({"Failed": {"message": "no value for nope"}})
    );
}
