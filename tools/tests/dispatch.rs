//! The workers: binding from flow.toml, per-binding concurrency, per-call
//! timeout, graceful shutdown (REQUIREMENTS BND-*, PRO-15).

mod common;

use common::*;
use flow_tools::dispatch::{
    BindOptions, BindRefusal, BoxFuture, Dispatcher, Implementation, Interrupted, Limits, ToBind,
    bind,
};
use flow_tools::manifest::{Resolver, Source};
use flow_tools::process::ProcessOptions;
use flow_tools::{CallOutcome, CallRequest, ProcessHandle};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

async fn process(dir: &std::path::Path) -> ProcessHandle {
    ProcessHandle::start(
        &misbehave(dir, &[]),
        declarations(),
        ProcessOptions::default(),
        CancellationToken::new(),
    )
    .await
    .unwrap()
}

fn dispatcher(p: ProcessHandle, limits: Limits) -> Dispatcher {
    Dispatcher::builder()
        .route(
            ["t.json#echo".to_string(), "t.json#other".to_string()],
            Arc::new(p),
            &limits,
        )
        .grace(Duration::from_millis(500))
        .build()
}

/// A binding's concurrency limit holds across its declarations.
#[tokio::test]
async fn concurrency_limit_per_binding() {
    let dir = tempfile::tempdir().unwrap();
    let d = dispatcher(
        process(dir.path()).await,
        Limits {
            concurrency: 2,
            timeout: None,
        },
    );
    let t0 = Instant::now();
    let calls = (0..6).map(|i| {
        let tool = if i % 2 == 0 {
            "t.json#echo"
        } else {
            "t.json#other"
        };
        d.call(req(&format!("c1:root#{}", i + 1), tool, "sleep:0.3:x"))
    });
    let outs = futures_util::future::join_all(calls).await;
    let took = t0.elapsed();
    assert!(
        outs.iter().all(|o| matches!(o, Ok(CallOutcome::Ok(_)))),
        "{outs:?}"
    );
    assert!(
        took >= Duration::from_millis(850),
        "3 waves of 2 take at least 0.9 s: {took:?}"
    );
    assert!(took < Duration::from_millis(2500), "{took:?}");
}

/// A call with no reply within the timeout is cancelled and Unknown.
#[tokio::test]
async fn timeout_is_unknown() {
    let dir = tempfile::tempdir().unwrap();
    let d = dispatcher(
        process(dir.path()).await,
        Limits {
            concurrency: 4,
            timeout: Some(Duration::from_millis(200)),
        },
    );
    let out = d
        .call(req("c1:root#1", "t.json#echo", "hang"))
        .await
        .unwrap();
    assert!(
        matches!(&out, CallOutcome::Unknown(w) if w.contains("no reply within 200 ms")),
        "{out:?}"
    );
    // The binding still works, and fast calls are unaffected.
    let out = d
        .call(req("c1:root#2", "t.json#echo", "ok:fine"))
        .await
        .unwrap();
    assert_eq!(ok_text(&out).as_deref(), Some("fine"));
    // Unbound identities are NotRun without reaching anything.
    assert!(matches!(
        d.call(req("c1:root#3", "t.json#nope", "ok:x")).await,
        Ok(CallOutcome::NotRun(_))
    ));
}

/// Shutdown cancels outstanding calls; a reply that cancel brings within the
/// grace period is the call's outcome; later calls are interrupted.
#[tokio::test]
async fn graceful_shutdown_cancels() {
    let dir = tempfile::tempdir().unwrap();
    let d = dispatcher(process(dir.path()).await, Limits::default());
    let d2 = d.clone();
    let hung = tokio::spawn(async move { d2.call(req("c1:root#1", "t.json#echo", "hang")).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    d.shutdown().await;
    // misbehave.py answers a cancel with Unknown("cancelled").
    assert_eq!(
        hung.await.unwrap(),
        Ok(CallOutcome::Unknown("cancelled".into()))
    );
    assert_eq!(
        d.call(req("c1:root#2", "t.json#echo", "ok:x")).await,
        Err(Interrupted)
    );
}

/// An implementation registered in code (BND-8: "an embedding application
/// registers implementations in code"; tests bind fakes).
struct Fake;
impl Implementation for Fake {
    fn call(&self, req: CallRequest) -> BoxFuture<'static, CallOutcome> {
        Box::pin(
            async move { CallOutcome::Ok(flow_abi::Value::Text(format!("fake {}", req.call))) },
        )
    }
    fn cancel(&self, _run: &str, _call: &str) {}
    fn shutdown(&self) -> BoxFuture<'static, ()> {
        Box::pin(async {})
    }
}

#[tokio::test]
async fn in_process_implementation() {
    let d = Dispatcher::builder()
        .route(
            ["t.json#echo".to_string()],
            Arc::new(Fake),
            &Limits::default(),
        )
        .build();
    let out = d.call(req("c1:root#1", "t.json#echo", "x")).await.unwrap();
    assert_eq!(ok_text(&out).as_deref(), Some("fake c1:root#1"));
}

/// BND-2, BND-3, BND-5, BND-12: every declaration is bound before the run
/// from the nearest flow.toml, one process per command; unbound
/// declarations and mismatched fingerprints are all reported.
#[tokio::test]
async fn bind_from_flow_toml() {
    let dir = tempfile::tempdir().unwrap();
    let doc = write_doc(dir.path());
    let script = fixture("misbehave.py");
    std::fs::write(
        dir.path().join("flow.toml"),
        format!(
            "[tools.\"t.json\"]\ncommand = \"python3 '{}' '{}' --state starts\"\nresend = true\n",
            script.display(),
            doc.display()
        ),
    )
    .unwrap();
    let (types, decls) = echo_decls();
    let source = Source::Local {
        program_dir: dir.path().to_path_buf(),
    };
    let to_bind: Vec<ToBind> = decls
        .iter()
        .map(|d| ToBind {
            decl: d.clone(),
            source: source.clone(),
        })
        .collect();
    let d = bind(
        &to_bind,
        types.clone(),
        &mut Resolver::new(),
        &BindOptions::default(),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    let a = d
        .call(req("c1:root#1", "t.json#echo", "start"))
        .await
        .unwrap();
    let b = d
        .call(req("c1:root#2", "t.json#other", "start"))
        .await
        .unwrap();
    assert_eq!(
        (ok_text(&a), ok_text(&b)),
        (Some("1".into()), Some("1".into())),
        "one process for both"
    );
    // Commands run in the manifest's directory: the relative state file is there.
    assert!(dir.path().join("starts").is_file());
    assert!(d.resends("t.json#echo"));
    d.shutdown().await;

    // An unbound declaration and a fingerprint mismatch, reported together.
    let mut other = decls[0].clone();
    other.identity = "elsewhere.json#x".into();
    let mut changed = decls[1].clone();
    changed.ok = flow_abi::Type::Int;
    let to_bind = vec![
        ToBind {
            decl: other,
            source: source.clone(),
        },
        ToBind {
            decl: changed,
            source: source.clone(),
        },
    ];
    let refusals = bind(
        &to_bind,
        types,
        &mut Resolver::new(),
        &BindOptions::default(),
        CancellationToken::new(),
    )
    .await
    .err()
    .unwrap();
    assert_eq!(refusals.len(), 2, "{refusals:?}");
    assert!(matches!(&refusals[0], BindRefusal::Unbound(id) if id == "elsewhere.json#x"));
    assert!(
        matches!(&refusals[1], BindRefusal::Process(_)),
        "{refusals:?}"
    );
}
