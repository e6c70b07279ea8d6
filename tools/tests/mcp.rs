//! The MCP adapter against a real MCP server (tests/fixtures/mcp_server.py,
//! raw JSON-RPC over stdio).

mod common;

use common::fixture;
use flow_abi::fact::{CallId, RunId};
use flow_abi::signature::{ToolDecl, tool_error};
use flow_abi::types::{Body, Decl, Field, Type, TypeSet};
use flow_tools::manifest::{Binding, Launch};
use flow_tools::process::{ProcessError, ProcessOptions};
use flow_tools::{CallOutcome, CallRequest, Declarations, ProcessHandle};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

const RUN: &str = "run-00000000000000000000000001";

fn decls(extra: &[&str]) -> Declarations {
    let mut types = TypeSet::new();
    let err = tool_error(&mut types);
    let sum = types
        .add(Decl {
            identity: "m.json.Sum".into(),
            name: "Sum".into(),
            doc: None,
            body: Body::Record(vec![Field {
                name: "sum".into(),
                ty: Type::Int,
                doc: None,
            }]),
        })
        .unwrap();
    let text_tool = |name: &str| ToolDecl {
        identity: format!("m.json#{name}"),
        doc: None,
        params: vec![Field {
            name: "text".into(),
            ty: Type::Text,
            doc: None,
        }],
        ok: Type::Text,
        err: err.clone(),
    };
    let mut out: Vec<ToolDecl> = [
        "echo", "fail", "errresp", "twotext", "notjson", "slow", "crash",
    ]
    .iter()
    .chain(extra)
    .map(|n| text_tool(n))
    .collect();
    out.push(ToolDecl {
        identity: "m.json#add".into(),
        doc: None,
        params: vec![
            Field {
                name: "a".into(),
                ty: Type::Int,
                doc: None,
            },
            Field {
                name: "b".into(),
                ty: Type::Int,
                doc: None,
            },
        ],
        ok: Type::Named(sum),
        err: err.clone(),
    });
    Declarations::new(Arc::new(types), out)
}

fn binding(dir: &Path) -> Binding {
    Binding {
        launch: Launch::Mcp(vec![
            "python3".into(),
            fixture("mcp_server.py").display().to_string(),
            dir.join("log.jsonl").display().to_string(),
        ]),
        dir: dir.to_path_buf(),
        resend: false,
    }
}

async fn start(dir: &Path) -> ProcessHandle {
    ProcessHandle::start(
        &binding(dir),
        decls(&[]),
        ProcessOptions::default(),
        CancellationToken::new(),
    )
    .await
    .unwrap()
}

fn req(call: &str, tool: &str, args: serde_json::Value) -> CallRequest {
    CallRequest {
        run: RunId::parse(RUN).unwrap(),
        call: CallId::parse(call).unwrap(),
        tool: format!("m.json#{tool}"),
        args: args.as_object().unwrap().clone(),
    }
}

fn log(dir: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("log.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// MCPA-4, MCPA-7, MCPA-8, MCPA-9: handshake and tool list before any call;
/// tools/call's id is the call's history id; structuredContent, or the one
/// text block's JSON, decoded against the declared types; isError is the
/// error type.
#[tokio::test]
async fn calls_map_to_outcomes() {
    let dir = tempfile::tempdir().unwrap();
    let p = start(dir.path()).await;
    let out = p
        .call(req("c1:root#1", "echo", serde_json::json!({"text": "hi"})))
        .await;
    assert_eq!(
        out,
        CallOutcome::Ok(flow_abi::Value::Text("hi|c1:root#1".into()))
    );
    let out = p
        .call(req(
            "c1:root#2",
            "add",
            serde_json::json!({"a": 2, "b": 40}),
        ))
        .await;
    assert_eq!(
        out.into_outcome().to_json(),
        serde_json::json!({"Ok": {"sum": 42}})
    );
    let out = p
        .call(req(
            "c1:root#3",
            "fail",
            serde_json::json!({"text": "nope"}),
        ))
        .await;
    assert_eq!(
        out.into_outcome().to_json(),
        serde_json::json!({"Failed": {"message": "nope"}})
    );
    let msgs = log(dir.path());
    let methods: Vec<&str> = msgs.iter().filter_map(|m| m["method"].as_str()).collect();
    assert_eq!(
        &methods[..4],
        [
            "initialize",
            "notifications/initialized",
            "tools/list",
            "tools/list"
        ]
    );
    // The server's ping was answered.
    assert!(
        msgs.iter()
            .any(|m| m["id"] == "server-ping-1" && m.get("result").is_some())
    );
    let call = msgs.iter().find(|m| m["method"] == "tools/call").unwrap();
    assert_eq!(call["id"], "c1:root#1");
    assert_eq!(call["params"]["name"], "echo");
    assert_eq!(
        call["params"]["arguments"],
        serde_json::json!({"text": "hi"})
    );
}

/// MCPA-2, MCPA-8, MCPA-10: results the adapter cannot map are BadReply.
#[tokio::test]
async fn unmappable_results_are_bad_reply() {
    let dir = tempfile::tempdir().unwrap();
    let p = start(dir.path()).await;
    for (tool, want) in [
        ("errresp", "error -32000: it broke"),
        ("twotext", "2 text content blocks"),
        ("notjson", "not JSON"),
    ] {
        match p
            .call(req(
                &format!("c1:root/{tool}#1"),
                tool,
                serde_json::json!({"text": "x"}),
            ))
            .await
        {
            CallOutcome::BadReply(why) => assert!(why.contains(want), "{tool}: {why}"),
            other => panic!("{tool}: {other:?}"),
        }
    }
    // A value that does not decode against the declared type is BadReply
    // too: echo's text block holds a JSON string, declared here as Int.
    let mut d = decls(&[]);
    if let Some((decl, _)) = d.decls.get_mut("m.json#echo") {
        decl.ok = Type::Int;
    }
    let fp = d.decls["m.json#echo"].0.fingerprint(&d.types);
    d.decls.get_mut("m.json#echo").unwrap().1 = fp;
    let dir2 = tempfile::tempdir().unwrap();
    let q = ProcessHandle::start(
        &binding(dir2.path()),
        d,
        ProcessOptions::default(),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    match q
        .call(req("c1:root#9", "echo", serde_json::json!({"text": "x"})))
        .await
    {
        CallOutcome::BadReply(why) => assert!(why.contains("expected Int"), "{why}"),
        other => panic!("{other:?}"),
    }
}

/// MCPA-6: a declaration the server offers no tool of its name for is
/// unbound, refusing the binding.
#[tokio::test]
async fn missing_tool_is_unbound() {
    let dir = tempfile::tempdir().unwrap();
    let r = ProcessHandle::start(
        &binding(dir.path()),
        decls(&["missing"]),
        ProcessOptions::default(),
        CancellationToken::new(),
    )
    .await;
    match r {
        Err(ProcessError::Mismatch { declarations, .. }) => {
            assert_eq!(declarations.len(), 1);
            assert_eq!(declarations[0].tool, "m.json#missing");
        }
        other => panic!("{other:?}"),
    }
}

/// MCPA-11: a cancel is notifications/cancelled with the request id; a
/// server that ends is a process that ends (Unknown for a call out to it),
/// and it is started again for the next call.
#[tokio::test]
async fn cancel_and_crash() {
    let dir = tempfile::tempdir().unwrap();
    let p = start(dir.path()).await;
    let r = tokio::time::timeout(
        Duration::from_millis(300),
        p.call(req(
            "c1:root/slow#1",
            "slow",
            serde_json::json!({"text": "x"}),
        )),
    )
    .await;
    assert!(r.is_err());
    // The cancel reaches the server (poll: it is written asynchronously).
    let cancelled = |m: &serde_json::Value| {
        m["method"] == "notifications/cancelled" && m["params"]["requestId"] == "c1:root/slow#1"
    };
    for _ in 0..60 {
        if log(dir.path()).iter().any(cancelled) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        log(dir.path()).iter().any(cancelled),
        "{:?}",
        log(dir.path())
    );
    let out = p
        .call(req("c1:root#2", "crash", serde_json::json!({"text": "x"})))
        .await;
    assert!(
        matches!(&out, CallOutcome::Unknown(w) if w.contains("after the call was sent")),
        "{out:?}"
    );
    let out = p
        .call(req(
            "c1:root#3",
            "echo",
            serde_json::json!({"text": "back"}),
        ))
        .await;
    assert_eq!(
        out,
        CallOutcome::Ok(flow_abi::Value::Text("back|c1:root#3".into()))
    );
    let inits = log(dir.path())
        .iter()
        .filter(|m| m["method"] == "initialize")
        .count();
    assert_eq!(inits, 2, "the restarted server was initialized again");
}

/// Two runs with the same history id open at once on one server.
#[tokio::test]
async fn equal_call_ids_of_two_runs() {
    let dir = tempfile::tempdir().unwrap();
    let p = start(dir.path()).await;
    let mut a = req("c1:root#1", "echo", serde_json::json!({"text": "a"}));
    a.run = RunId::parse("run-0000000000000000000000000a").unwrap();
    let mut b = req("c1:root#1", "echo", serde_json::json!({"text": "b"}));
    b.run = RunId::parse("run-0000000000000000000000000b").unwrap();
    let (x, y) = tokio::join!(p.call(a), p.call(b));
    let texts = [x, y].map(|o| match o {
        CallOutcome::Ok(flow_abi::Value::Text(t)) => t,
        other => panic!("{other:?}"),
    });
    assert!(texts[0].starts_with("a|c1:root#1"), "{texts:?}");
    assert!(texts[1].starts_with("b|c1:root#1"), "{texts:?}");
}
