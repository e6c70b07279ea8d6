//! examples/tools/calc, the Rust toolkit's example Tool process (the
//! `flow-example-calc` binary of this package), through the host's real
//! protocol client. REQUIREMENTS TKT-2..TKT-5. Its declarations are read
//! from the committed `flow tools` document, which flow-tools'
//! `example_documents_are_current` keeps equal to what they generate.

use flow_abi::fact::{CallId, RunId};
use flow_tools::manifest::{Binding, Launch};
use flow_tools::process::ProcessOptions;
use flow_tools::{CallOutcome, CallRequest, Declarations, ProcessHandle};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// The repository's examples/tools folder.
const RUN: &str = "run-00000000000000000000000001";

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/tools")
}

fn args(v: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
    // Numbers read strictly, so they are canonical.
    match flow_abi::json::parse(&v.to_string()).unwrap() {
        serde_json::Value::Object(m) => m,
        _ => panic!("args must be an object"),
    }
}

/// `calc.json#add(a: Int, b: Int) -> Int` and `calc.json#div(a: Decimal,
/// b: Decimal) -> Decimal`, as examples/tools/calc/tools.json lists them.
fn calc_decls() -> Declarations {
    let text = std::fs::read_to_string(examples().join("calc/tools.json")).unwrap();
    let doc = flow_abi::json::parse(&text).unwrap();
    let (listed, types) = flow_toolkit::document::read(&doc).unwrap();
    Declarations::new(Arc::new(types), listed.into_iter().map(|l| l.decl))
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

/// TKT-2, TKT-3: exact big integers and decimals; TKT-5: args that do not
/// decode are NotRun; the declared error is Failed.
#[tokio::test]
async fn calc_with_the_rust_toolkit() {
    let p = start(
        vec![
            env!("CARGO_BIN_EXE_flow-example-calc").into(),
            "calc/tools.json".into(),
        ],
        calc_decls(),
    )
    .await;
    let big = "123456789012345678901234567890";
    let out = p
        .call(call(
            "c1:root#1",
            "calc.json#add",
            serde_json::json!({"a": big.parse::<serde_json::Number>().unwrap(), "b": 1}),
        ))
        .await;
    assert_eq!(
        out.into_outcome().to_json().to_string(),
        r#"{"Ok":123456789012345678901234567891}"#
    );
    let out = p
        .call(call(
            "c1:root#2",
            "calc.json#div",
            serde_json::json!({"a": 1, "b": 8}),
        ))
        .await;
    assert_eq!(out.into_outcome().to_json().to_string(), r#"{"Ok":0.125}"#);
    let out = p
        .call(call(
            "c1:root#3",
            "calc.json#div",
            serde_json::json!({"a": 1, "b": 0}),
        ))
        .await;
    assert_eq!(
        out.into_outcome().to_json(),
        serde_json::json!({"Failed": {"message": "division by zero"}})
    );
    let out = p
        .call(call(
            "c1:root#4",
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
            "c1:root#5",
            "calc.json#add",
            serde_json::json!({"a": 1.5, "b": 1}),
        ))
        .await;
    assert!(matches!(out, CallOutcome::NotRun(_)), "{out:?}");
}
