//! The toolkit over the real protocol lines (an in-memory pipe stands in for
//! stdin/stdout). REQUIREMENTS TKT-4, TKT-5, TKT-6, TKT-12.

use flow_abi::protocol::{self, Message, Outcome};
use flow_abi::signature::{ToolDecl, tool_error};
use flow_abi::types::{Field, Type, TypeSet};
use flow_toolkit::{ToolError, Toolkit, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

fn decls() -> (Vec<ToolDecl>, TypeSet) {
    let mut types = TypeSet::new();
    let err = tool_error(&mut types);
    let d = |id: &str| ToolDecl {
        identity: id.into(),
        doc: None,
        params: vec![
            Field {
                name: "n".into(),
                ty: Type::Int,
                doc: None,
            },
            Field {
                name: "note".into(),
                ty: Type::Option(Box::new(Type::Text)),
                doc: None,
            },
        ],
        ok: Type::Int,
        err: err.clone(),
    };
    (
        vec![
            d("t.json#ok"),
            d("t.json#panics"),
            d("t.json#other"),
            d("t.json#wrong"),
            d("t.json#badfail"),
            d("t.json#slow"),
            d("t.json#unhandled"),
        ],
        types,
    )
}

/// Runs the toolkit on a pipe, sends `lines`, returns every line it wrote
/// (replies in completion order) once its input ends.
async fn exchange(lines: &[String]) -> Vec<Message> {
    let (decls, types) = decls();
    let tk = Toolkit::from_decls(&decls, &types)
        .unwrap()
        .handle("t.json#ok", |c| async move {
            match (c.arg("n"), c.text("note")) {
                (Some(Value::Int(n)), None) => Ok(Value::Int(n * 2)),
                (Some(Value::Int(n)), Some(_)) => Ok(Value::Int(-n.clone())),
                _ => Err(ToolError::Other("unreachable".into())),
            }
        })
        .unwrap()
        .handle("t.json#panics", |_c| async move {
            let v: Vec<u8> = Vec::new();
            Ok(Value::Int(v[3].into()))
        })
        .unwrap()
        .handle("t.json#other", |_c| async move {
            Err(ToolError::Other("disk full".into()))
        })
        .unwrap()
        .handle("t.json#wrong", |_c| async move {
            Ok(Value::Text("not an Int".into()))
        })
        .unwrap()
        .handle("t.json#badfail", |_c| async move {
            Err(ToolError::Failed(Value::Int(1.into())))
        })
        .unwrap()
        .handle("t.json#slow", |_c| async move {
            tokio::time::sleep(std::time::Duration::from_secs(30)).await;
            Ok(Value::Int(0.into()))
        })
        .unwrap();
    let (host, tool) = tokio::io::duplex(1 << 16);
    let (tool_r, tool_w) = tokio::io::split(tool);
    let server = tokio::spawn(tk.serve(tool_r, tool_w));
    let (host_r, mut host_w) = tokio::io::split(host);
    for l in lines {
        host_w.write_all(l.as_bytes()).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    host_w.shutdown().await.unwrap();
    let mut out = Vec::new();
    let mut r = BufReader::new(host_r).lines();
    while let Some(l) = r.next_line().await.unwrap() {
        out.push(protocol::parse_line(&l).unwrap());
    }
    server.await.unwrap().unwrap();
    out
}

fn call(id: &str, tool: &str, args: serde_json::Value) -> String {
    protocol::write_call(&protocol::Call {
        run: "r".into(),
        call: id.into(),
        tool: tool.into(),
        args: flow_abi::json::parse(&args.to_string())
            .unwrap()
            .as_object()
            .unwrap()
            .clone(),
        generic: None,
    })
}

fn outcome(msgs: &[Message], id: &str) -> Outcome {
    msgs.iter()
        .find_map(|m| match m {
            Message::Reply(r) if r.call == id => Some(r.outcome.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no reply to {id}: {msgs:?}"))
}

#[tokio::test]
async fn toolkit_rules() {
    let (decls, types) = decls();
    let msgs = exchange(&[
        protocol::write_describe(&protocol::Id::from(7)),
        call("ok", "t.json#ok", serde_json::json!({"n": 21})),
        call(
            "opt",
            "t.json#ok",
            serde_json::json!({"n": 5, "note": "neg"}),
        ),
        call("undecodable", "t.json#ok", serde_json::json!({"n": "21"})),
        call("missing", "t.json#ok", serde_json::json!({})),
        call("unserved", "t.json#nope", serde_json::json!({"n": 1})),
        call("unhandled", "t.json#unhandled", serde_json::json!({"n": 1})),
        call("panics", "t.json#panics", serde_json::json!({"n": 1})),
        call("other", "t.json#other", serde_json::json!({"n": 1})),
        call("wrong", "t.json#wrong", serde_json::json!({"n": 1})),
        call("badfail", "t.json#badfail", serde_json::json!({"n": 1})),
        call("slow", "t.json#slow", serde_json::json!({"n": 1})),
        protocol::write_cancel(&protocol::Cancel {
            run: "r".into(),
            call: "slow".into(),
        }),
    ])
    .await;
    // TKT-4: describe answers with the declarations' own fingerprints; a
    // tool without a handler is not described.
    let described = msgs
        .iter()
        .find_map(|m| match m {
            Message::Described { id, result: Ok(r) } if *id == protocol::Id::from(7) => {
                Some(r.clone())
            }
            _ => None,
        })
        .unwrap();
    assert_eq!(described.data, flow_abi::DATA_VERSION);
    assert_eq!(described.tools.len(), 6);
    let ok = described
        .tools
        .iter()
        .find(|t| t.tool == "t.json#ok")
        .unwrap();
    assert_eq!(ok.fingerprint, decls[0].fingerprint(&types));
    assert!(!described.tools.iter().any(|t| t.tool == "t.json#unhandled"));

    assert_eq!(outcome(&msgs, "ok"), Outcome::Ok(serde_json::json!(42)));
    // The record-field rule for Option parameters: Some(v) is v.
    assert_eq!(outcome(&msgs, "opt").to_json().to_string(), r#"{"Ok":-5}"#);
    // TKT-5: args that do not decode, and an unserved declaration, are NotRun.
    for id in ["undecodable", "missing", "unserved", "unhandled"] {
        assert!(matches!(outcome(&msgs, id), Outcome::NotRun(_)), "{id}");
    }
    // TKT-6: a panic or an undeclared error is Unknown.
    assert!(matches!(outcome(&msgs, "panics"), Outcome::Unknown(w) if w.contains("panicked")));
    assert!(matches!(outcome(&msgs, "other"), Outcome::Unknown(w) if w.contains("disk full")));
    // TKT-12: a result or error of the wrong type after the author ran is Unknown.
    assert!(matches!(outcome(&msgs, "wrong"), Outcome::Unknown(_)));
    assert!(matches!(outcome(&msgs, "badfail"), Outcome::Unknown(_)));
    // A cancel stops the handler; what it did is not known.
    assert!(matches!(outcome(&msgs, "slow"), Outcome::Unknown(w) if w.contains("cancelled")));
}

#[test]
fn document_errors_name_the_place() {
    let err = Toolkit::from_document_text(r#"{"data":"1.0","programs":[{"root":"x","diagnostics":[],"tools":[{"tool":"a#b"}],"types":{}}]}"#)
        .err()
        .unwrap();
    assert!(err.to_string().contains("/programs/0/tools/0"), "{err}");
    let err = Toolkit::from_document_text(
        r#"{"data":"1.0","programs":[{"root":"x","diagnostics":[],"tools":[],"types":{}}]}"#,
    )
    .unwrap()
    .handle("a#b", |_c| async move { Ok(Value::Unit) })
    .err()
    .unwrap();
    assert!(err.to_string().contains("does not list a#b"), "{err}");
}
