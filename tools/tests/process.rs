//! The Tool process protocol client against real child processes
//! (tests/fixtures/misbehave.py): no mock of the protocol.

mod common;

use common::*;
use flow_tools::CallOutcome;
use flow_tools::process::{ProcessError, ProcessHandle, ProcessOptions};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

async fn start(dir: &std::path::Path, extra: &[&str]) -> Result<ProcessHandle, ProcessError> {
    ProcessHandle::start(
        &misbehave(dir, extra),
        declarations(),
        ProcessOptions {
            describe_timeout: Duration::from_secs(10),
            stop_grace: Duration::from_secs(1),
        },
        CancellationToken::new(),
    )
    .await
}

/// PRO-5, PRO-12: describe first, then a call answered Ok with a decoded value.
#[tokio::test]
async fn describe_then_call() {
    let dir = tempfile::tempdir().unwrap();
    let p = start(dir.path(), &[]).await.unwrap();
    let out = p.call(req("c1:root#1", "t.json#echo", "ok:hello")).await;
    assert_eq!(ok_text(&out).as_deref(), Some("hello"), "{out:?}");
    let out = p.call(req("c1:root#2", "t.json#echo", "failed")).await;
    match out {
        CallOutcome::Failed(v) => assert_eq!(v.canonical(), r#"{"message":"nope"}"#),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        p.call(req("c1:root#3", "t.json#echo", "notrun")).await,
        CallOutcome::NotRun("refused".into())
    );
    assert_eq!(
        p.call(req("c1:root#4", "t.json#echo", "unknown")).await,
        CallOutcome::Unknown("lost track".into())
    );
    // GAP-PRO-4: a line that is not JSON-RPC is logged and ignored; stderr
    // goes to logs only.
    let out = p.call(req("c1:root#5", "t.json#echo", "noise:quiet")).await;
    assert_eq!(ok_text(&out).as_deref(), Some("quiet"));
    p.shutdown().await;
}

/// PRO-17, PRO-18: many outstanding, replies in any order, correlated by
/// (run, call) only.
#[tokio::test]
async fn multiplexed_out_of_order() {
    let dir = tempfile::tempdir().unwrap();
    let p = start(dir.path(), &[]).await.unwrap();
    let t0 = Instant::now();
    let slow = p.call(req("c1:root#1", "t.json#echo", "sleep:0.6:slow"));
    let fast = async {
        let out = p
            .call(req("c1:root#2", "t.json#echo", "sleep:0.1:fast"))
            .await;
        (out, t0.elapsed())
    };
    let many = futures_util::future::join_all((0..20).map(|i| {
        p.call(req(
            &format!("c1:root/many#{}", i + 1),
            "t.json#other",
            &format!("ok:{i}"),
        ))
    }));
    let (slow, (fast, fast_at), many) = tokio::join!(slow, fast, many);
    assert_eq!(ok_text(&slow).as_deref(), Some("slow"));
    assert_eq!(ok_text(&fast).as_deref(), Some("fast"));
    assert!(
        fast_at < Duration::from_millis(550),
        "the fast reply waited for the slow one: {fast_at:?}"
    );
    for (i, o) in many.iter().enumerate() {
        assert_eq!(ok_text(o), Some(i.to_string()));
    }
}

/// PRO-13, DEC-9: a value that does not decode, a malformed outcome, and an
/// outcome of BadReply are BadReply with the reason (PRO-14).
#[tokio::test]
async fn bad_replies() {
    let dir = tempfile::tempdir().unwrap();
    let p = start(dir.path(), &[]).await.unwrap();
    match p.call(req("c1:root#1", "t.json#echo", "bad")).await {
        CallOutcome::BadReply(why) => assert!(why.contains("expected Text"), "{why}"),
        other => panic!("{other:?}"),
    }
    match p.call(req("c1:root#2", "t.json#echo", "malformed")).await {
        CallOutcome::BadReply(why) => assert!(why.contains("exactly one"), "{why}"),
        other => panic!("{other:?}"),
    }
    match p.call(req("c1:root#3", "t.json#echo", "badreply")).await {
        CallOutcome::BadReply(why) => assert!(why.contains("never sent"), "{why}"),
        other => panic!("{other:?}"),
    }
    // The process is still fine afterwards.
    assert_eq!(
        ok_text(&p.call(req("c1:root#4", "t.json#echo", "ok:x")).await).as_deref(),
        Some("x")
    );
}

/// PRO-13: a reply line the strict reader refuses (a number past its
/// limits, a duplicate key, nesting too deep) or whose envelope is malformed
/// is BadReply for the call it names, read from its envelope; never a hang.
/// A line naming its call twice is ambiguous and names none.
#[tokio::test]
async fn replies_past_the_readers_limits_are_bad_replies() {
    let dir = tempfile::tempdir().unwrap();
    let p = start(dir.path(), &[]).await.unwrap();
    for (i, (raw, needle)) in [
        ("bignum", "does not decode"),
        ("dupkey", "does not decode"),
        ("deep", "does not decode"),
        ("extra", "carries no id"),
    ]
    .into_iter()
    .enumerate()
    {
        let call = format!("c1:root#{}", i + 1);
        let out = tokio::time::timeout(
            Duration::from_secs(10),
            p.call(req(&call, "t.json#echo", &format!("raw:{raw}"))),
        )
        .await
        .unwrap_or_else(|_| panic!("{raw}: no outcome"));
        match out {
            CallOutcome::BadReply(why) => assert!(why.contains(needle), "{raw}: {why}"),
            other => panic!("{raw}: {other:?}"),
        }
    }
    // The ambiguous line is dropped; the reply after it counts.
    let out = p
        .call(req("c1:root#9", "t.json#echo", "raw:twocalls"))
        .await;
    assert_eq!(ok_text(&out).as_deref(), Some("after an ambiguous line"));
}

/// DEC-7: a reply larger than the limit is BadReply for its call, and the
/// process carries on.
#[tokio::test]
async fn oversized_reply() {
    let dir = tempfile::tempdir().unwrap();
    let p = start(
        dir.path(),
        &["--state", &dir.path().join("s").display().to_string()],
    )
    .await
    .unwrap();
    match p.call(req("c1:root#1", "t.json#echo", "huge")).await {
        CallOutcome::BadReply(why) => assert!(why.contains("larger than the limit"), "{why}"),
        other => panic!("{other:?}"),
    }
    // Same process (start count 1): an oversized reply does not end it.
    assert_eq!(
        ok_text(&p.call(req("c1:root#2", "t.json#echo", "start")).await).as_deref(),
        Some("1")
    );
}

/// PRO-22: a duplicate reply and a reply for a call that is not open are
/// dropped and change nothing.
#[tokio::test]
async fn duplicate_and_stray_replies_are_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let p = start(dir.path(), &[]).await.unwrap();
    assert_eq!(
        ok_text(&p.call(req("c1:root#1", "t.json#echo", "dup:first")).await).as_deref(),
        Some("first")
    );
    assert_eq!(
        ok_text(&p.call(req("c1:root#2", "t.json#echo", "stray:real")).await).as_deref(),
        Some("real")
    );
    // The second reply to c1 did not leak into a later call with another id.
    assert_eq!(
        ok_text(
            &p.call(req("c1:root#3", "t.json#echo", "sleep:0.2:later"))
                .await
        )
        .as_deref(),
        Some("later")
    );
}

/// PRO-20, PRO-21: a call out when the process crashed is Unknown; the next
/// call starts the process again, which describes again.
#[tokio::test]
async fn crash_mid_call_then_restart() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let p = start(dir.path(), &["--state", &state.display().to_string()])
        .await
        .unwrap();
    let slow = p.call(req("c1:root#100", "t.json#echo", "sleep:5:never"));
    let crash = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        p.call(req("c1:root#1", "t.json#echo", "crash")).await
    };
    let (slow, crash) = tokio::join!(slow, crash);
    assert!(
        matches!(&crash, CallOutcome::Unknown(w) if w.contains("after the call was sent")),
        "{crash:?}"
    );
    assert!(matches!(&slow, CallOutcome::Unknown(_)), "{slow:?}");
    assert_eq!(
        ok_text(&p.call(req("c1:root#2", "t.json#echo", "start")).await).as_deref(),
        Some("2")
    );
}

/// PRO-21: a call that did not reach the process (its stdin was closed) is
/// NotRun when the process ends.
#[tokio::test]
async fn call_that_never_reached_is_not_run() {
    let dir = tempfile::tempdir().unwrap();
    let p = start(dir.path(), &[]).await.unwrap();
    assert_eq!(
        ok_text(&p.call(req("c1:root#1", "t.json#echo", "closein")).await).as_deref(),
        Some("closing")
    );
    // The fixture closes its stdin right after that reply and lives 0.5 s.
    tokio::time::sleep(Duration::from_millis(250)).await;
    let out = p.call(req("c1:root#2", "t.json#echo", "ok:x")).await;
    assert!(
        matches!(&out, CallOutcome::NotRun(w) if w.contains("before the call was sent")),
        "{out:?}"
    );
}

/// PRO-20: after a restart, a declaration the process no longer fits makes
/// the call NotRun.
#[tokio::test]
async fn restart_that_no_longer_fits() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let p = start(
        dir.path(),
        &[
            "--state",
            &state.display().to_string(),
            "--wrong-after-restart",
        ],
    )
    .await
    .unwrap();
    assert!(matches!(
        p.call(req("c1:root#1", "t.json#echo", "crash")).await,
        CallOutcome::Unknown(_)
    ));
    let out = p.call(req("c1:root#2", "t.json#echo", "ok:x")).await;
    assert!(
        matches!(&out, CallOutcome::NotRun(w) if w.contains("no longer fits")),
        "{out:?}"
    );
}

/// BND-3, FPR-9: a fingerprint mismatch refuses the binding and lists the
/// declarations.
#[tokio::test]
async fn wrong_fingerprint_refuses() {
    let dir = tempfile::tempdir().unwrap();
    match start(dir.path(), &["--wrong-fingerprint"]).await {
        Err(ProcessError::Mismatch { declarations, .. }) => {
            let tools: Vec<_> = declarations.iter().map(|m| m.tool.as_str()).collect();
            assert_eq!(tools, ["t.json#echo", "t.json#other"]);
            assert!(
                declarations[0]
                    .served
                    .as_deref()
                    .unwrap()
                    .starts_with("sha256:0000")
            );
        }
        other => panic!("{other:?}"),
    }
}

/// PRO-8, VER-3: another data major is a version refusal, distinct from a
/// shape error; another minor of the same major binds.
#[tokio::test]
async fn other_data_major_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    match start(dir.path(), &["--data", "2.0"]).await {
        Err(ProcessError::Version { theirs, ours, .. }) => {
            assert_eq!(theirs, "2.0");
            assert_eq!(ours, flow_abi::DATA_VERSION);
        }
        other => panic!("{other:?}"),
    }
    assert!(start(dir.path(), &["--data", "1.7"]).await.is_ok());
    match start(dir.path(), &["--data", "one"]).await {
        Err(ProcessError::Describe { message, .. }) => {
            assert!(message.contains("major.minor"), "{message}")
        }
        other => panic!("{other:?}"),
    }
}

/// A process that never answers describe, or cannot start, is refused.
#[tokio::test]
async fn describe_timeout_and_start_failure() {
    let dir = tempfile::tempdir().unwrap();
    let r = ProcessHandle::start(
        &misbehave(dir.path(), &["--no-describe"]),
        declarations(),
        ProcessOptions {
            describe_timeout: Duration::from_millis(500),
            stop_grace: Duration::from_millis(200),
        },
        CancellationToken::new(),
    )
    .await;
    assert!(matches!(r, Err(ProcessError::Describe { .. })), "{r:?}");
    let mut b = misbehave(dir.path(), &[]);
    b.launch = flow_tools::manifest::Launch::Command(vec!["/nonexistent/tool".into()]);
    let r = ProcessHandle::start(
        &b,
        declarations(),
        ProcessOptions::default(),
        CancellationToken::new(),
    )
    .await;
    assert!(matches!(r, Err(ProcessError::Start { .. })), "{r:?}");
}

/// PRO-15: cancel reaches the process; the call stays open until answered.
/// Dropping a call's future abandons it: a later reply is dropped.
#[tokio::test]
async fn cancel_and_abandon() {
    let dir = tempfile::tempdir().unwrap();
    let p = start(dir.path(), &[]).await.unwrap();
    let p2 = p.clone();
    let hung = tokio::spawn(async move { p2.call(req("c1:root#1", "t.json#echo", "hang")).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    p.cancel(common::RUN, "c1:root#1");
    assert_eq!(
        hung.await.unwrap(),
        CallOutcome::Unknown("cancelled".into())
    );
    // A timed-out caller abandons; the fixture's reply to the cancel is for a
    // call that is no longer open.
    let r = tokio::time::timeout(
        Duration::from_millis(200),
        p.call(req("c1:root#2", "t.json#echo", "hang")),
    )
    .await;
    assert!(r.is_err());
    // The fixture answers the cancel of c2 with a reply for a call that is
    // no longer open: it is dropped and does not disturb the next call.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        ok_text(&p.call(req("c1:root#3", "t.json#echo", "ok:again")).await).as_deref(),
        Some("again")
    );
}

/// STYLE rule 8: the child is killed when its owner drops.
#[tokio::test]
async fn child_killed_when_handles_drop() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let p = start(dir.path(), &["--state", &state.display().to_string()])
        .await
        .unwrap();
    let pid = ok_text(&p.call(req("c1:root#1", "t.json#echo", "pid")).await).unwrap();
    let alive = || {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .map(|s| !s.contains("State:\tZ"))
            .unwrap_or(false)
    };
    assert!(alive());
    let shutdown = CancellationToken::new();
    let q = ProcessHandle::start(
        &misbehave(dir.path(), &[]),
        declarations(),
        ProcessOptions::default(),
        shutdown.clone(),
    )
    .await
    .unwrap();
    drop(p);
    for _ in 0..50 {
        if !alive() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!alive(), "the child outlived every handle");
    shutdown.cancel();
    // A call through a stopped service is NotRun, never sent.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(matches!(
        q.call(req("c1:root#9", "t.json#echo", "ok:x")).await,
        CallOutcome::NotRun(_)
    ));
}
