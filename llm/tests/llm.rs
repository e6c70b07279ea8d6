//! flow-llm against its two backends: `offline` (deterministic, no network)
//! and `openai` against a tiny OpenAI-compatible HTTP server on
//! 127.0.0.1:0 started here (never the internet).

use flow_abi::fact::{CallId, RunId};
use flow_tools::manifest::{Binding, Launch};
use flow_tools::process::ProcessOptions;
use flow_tools::{CallOutcome, CallRequest, Declarations, ProcessHandle};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

const RUN: &str = "run-00000000000000000000000001";

fn chat_decls() -> Declarations {
    let mut types = flow_abi::TypeSet::new();
    let decl = flow_abi::builtin::llm_chat(&mut types);
    Declarations::new(Arc::new(types), [decl])
}

async fn flow_llm(backend: &str, env: &[(&str, String)]) -> ProcessHandle {
    // The binding runs a shell-free command; pass the environment through
    // `env`, as a user's shell would have it.
    let mut argv: Vec<String> = vec!["env".into()];
    argv.extend(env.iter().map(|(k, v)| format!("{k}={v}")));
    argv.extend([
        env!("CARGO_BIN_EXE_flow-llm").to_string(),
        "--backend".into(),
        backend.into(),
    ]);
    let b = Binding {
        launch: Launch::Command(argv),
        dir: std::env::temp_dir(),
        resend: false,
    };
    ProcessHandle::start(
        &b,
        chat_decls(),
        ProcessOptions::default(),
        CancellationToken::new(),
    )
    .await
    .unwrap()
}

fn chat(call: &str, args: serde_json::Value) -> CallRequest {
    let args = match flow_abi::json::parse(&args.to_string()).unwrap() {
        serde_json::Value::Object(m) => m,
        _ => unreachable!(),
    };
    CallRequest {
        run: RunId::parse(RUN).unwrap(),
        call: CallId::parse(call).unwrap(),
        tool: "std/llm#chat".into(),
        args,
    }
}

/// The offline model answers from its prompt; with a schema, a value that
/// fits it, the same every time.
#[tokio::test]
async fn offline_backend_is_deterministic() {
    let p = flow_llm("offline", &[]).await;
    let out = p
        .call(chat(
            "c1:root#1",
            serde_json::json!({"model": "m", "prompt": "Say hi"}),
        ))
        .await;
    assert_eq!(
        out.into_outcome().to_json(),
        serde_json::json!({"Ok": {"text": "Say hi"}})
    );
    let schema = serde_json::json!({
        "type": "object",
        "properties": {"route": {"enum": ["a", "b", "c"]}, "n": {"type": "integer", "minimum": 3, "maximum": 4}},
        "required": ["route", "n"]
    });
    let args = serde_json::json!({"model": "m", "prompt": "Pick one", "system": "be terse", "schema": schema});
    let a = p.call(chat("c1:root#2", args.clone())).await;
    let b = p.call(chat("c1:root#3", args)).await;
    assert_eq!(a, b);
    let v = a.into_outcome().to_json()["Ok"].clone();
    assert!(
        ["a", "b", "c"].contains(&v["route"].as_str().unwrap()),
        "{v}"
    );
    assert!(["3", "4"].contains(&v["n"].to_string().as_str()), "{v}");
    // Args that do not decode never reach the model (TKT-5).
    let out = p
        .call(chat(
            "c1:root#4",
            serde_json::json!({"model": 3, "prompt": "x"}),
        ))
        .await;
    assert!(matches!(out, CallOutcome::NotRun(_)), "{out:?}");
}

#[derive(Default)]
struct Seen {
    requests: Vec<(String, String)>,
}

/// A tiny OpenAI-compatible endpoint: answers by the request's model name.
async fn fake_openai(seen: Arc<Mutex<Seen>>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut tmp = [0u8; 4096];
                let (head, body) = loop {
                    let n = sock.read(&mut tmp).await.unwrap();
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&tmp[..n]);
                    let text = String::from_utf8_lossy(&buf).to_string();
                    if let Some(i) = text.find("\r\n\r\n") {
                        let head = text[..i].to_string();
                        let len: usize = head
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase()
                                    .strip_prefix("content-length:")
                                    .map(|v| v.trim().parse().unwrap())
                            })
                            .unwrap_or(0);
                        if buf.len() >= i + 4 + len {
                            break (
                                head,
                                String::from_utf8_lossy(&buf[i + 4..i + 4 + len]).to_string(),
                            );
                        }
                    }
                };
                seen.lock()
                    .unwrap()
                    .requests
                    .push((head.clone(), body.clone()));
                let req: serde_json::Value = serde_json::from_str(&body).unwrap();
                let content = |c: &str| {
                    serde_json::json!({"choices": [{"message": {"role": "assistant", "content": c}}]}).to_string()
                };
                let (status, body) = match req["model"].as_str().unwrap() {
                    "ok" => ("200 OK", content("Hello from the model")),
                    "structured" => (
                        "200 OK",
                        content(r#"{"route":"b","n":12345678901234567890}"#),
                    ),
                    "prose" => ("200 OK", content("not json")),
                    "bad-key" => (
                        "401 Unauthorized",
                        r#"{"error":{"message":"Incorrect API key"}}"#.to_string(),
                    ),
                    _ => (
                        "500 Internal Server Error",
                        r#"{"error":{"message":"overloaded"}}"#.to_string(),
                    ),
                };
                let resp = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = sock.write_all(resp.as_bytes()).await;
            });
        }
    });
    format!("http://{addr}/v1")
}

/// Structured output via response_format json_schema; HTTP errors mapped
/// honestly: 4xx Failed, 5xx Unknown, no connection NotRun.
#[tokio::test]
async fn openai_backend_against_a_local_server() {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let base = fake_openai(seen.clone()).await;
    let p = flow_llm(
        "openai",
        &[
            ("FLOW_LLM_BASE_URL", base),
            ("FLOW_LLM_API_KEY", "sk-test".into()),
        ],
    )
    .await;
    let out = p
        .call(chat("c1:root#1", serde_json::json!({"model": "ok", "prompt": "hi", "system": "sys", "params": {"temperature": 0.2}})))
        .await;
    assert_eq!(
        out.into_outcome().to_json(),
        serde_json::json!({"Ok": {"text": "Hello from the model"}})
    );
    {
        let seen = seen.lock().unwrap();
        let (head, body) = &seen.requests[0];
        assert!(head.starts_with("POST /v1/chat/completions"), "{head}");
        assert!(
            head.to_ascii_lowercase()
                .contains("authorization: bearer sk-test"),
            "{head}"
        );
        let body: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(
            body["messages"][0],
            serde_json::json!({"role": "system", "content": "sys"})
        );
        assert_eq!(
            body["messages"][1],
            serde_json::json!({"role": "user", "content": "hi"})
        );
        assert_eq!(body["temperature"].to_string(), "0.2");
    }
    let schema = serde_json::json!({"type": "object", "properties": {"route": {"type": "string"}}});
    let out = p
        .call(chat(
            "c1:root#2",
            serde_json::json!({"model": "structured", "prompt": "route?", "schema": schema}),
        ))
        .await;
    // Exact numbers survive (no binary floating point).
    assert_eq!(
        out.into_outcome().to_json().to_string(),
        r#"{"Ok":{"n":12345678901234567890,"route":"b"}}"#
    );
    {
        let seen = seen.lock().unwrap();
        let body: serde_json::Value = serde_json::from_str(&seen.requests[1].1).unwrap();
        assert_eq!(body["response_format"]["type"], "json_schema");
        assert_eq!(body["response_format"]["json_schema"]["schema"], schema);
    }
    let out = p
        .call(chat(
            "c1:root#3",
            serde_json::json!({"model": "prose", "prompt": "x", "schema": schema}),
        ))
        .await;
    assert!(matches!(&out, CallOutcome::Failed(_)), "{out:?}");
    let out = p
        .call(chat(
            "c1:root#4",
            serde_json::json!({"model": "bad-key", "prompt": "x"}),
        ))
        .await;
    match &out {
        CallOutcome::Failed(v) => {
            assert!(v.canonical().contains("401") && v.canonical().contains("Incorrect API key"))
        }
        other => panic!("{other:?}"),
    }
    let out = p
        .call(chat(
            "c1:root#5",
            serde_json::json!({"model": "boom", "prompt": "x"}),
        ))
        .await;
    assert!(
        matches!(&out, CallOutcome::Unknown(w) if w.contains("500")),
        "{out:?}"
    );

    // Nothing listening: the request was never sent.
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dead = format!("http://{}/v1", closed.local_addr().unwrap());
    drop(closed);
    let q = flow_llm("openai", &[("FLOW_LLM_BASE_URL", dead)]).await;
    let out = q
        .call(chat(
            "c1:root#6",
            serde_json::json!({"model": "ok", "prompt": "x"}),
        ))
        .await;
    assert!(
        matches!(&out, CallOutcome::NotRun(w) if w.contains("could not reach")),
        "{out:?}"
    );
}
