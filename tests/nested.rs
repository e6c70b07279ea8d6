//! Nested runs (issue 11, item 1), with the real `flow` binary and `flow
//! serve`: a sub-flow that asks a person pauses its parent, whose pending
//! calls are the sub-flow's (with its run id); answering one — by the
//! nested run's id or by the outer run's — continues the nested run, whose
//! ending is the outer call's Reply, and the outer run goes on (NEST-13),
//! two levels deep too and across a server restart. A faulted sub-flow is
//! the subgraph node's failure, routed by its `fail_branch`, never the
//! outer run's fault (NEST-14). Halting the outer run halts the nested
//! run, which records its own halt, and a resume continues both (NEST-19).

mod common;
#[path = "fixtures/fixtures.rs"]
mod fixtures;

use common::{Server, TestApp, get_json, serve};
use serde_json::{Value as Json, json};
use std::time::Duration;

const APPROVED: &str = r#"{"Ok":{"decision":"approved"}}"#;
const REJECTED: &str = r#"{"Ok":{"decision":"rejected"}}"#;

fn fixture(name: &str) -> String {
    fixtures::repo()
        .join("tests/fixtures/flows/nested")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

fn doc(name: &str) -> Json {
    serde_json::from_str(&std::fs::read_to_string(fixture(name)).unwrap()).unwrap()
}

/// The runs of `f`'s store: `(run, state)` in creation order.
fn states(f: &TestApp) -> Vec<(String, String)> {
    let (_, v) = f.json(&["runs"]);
    v["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let state = match (r["ending"].as_str(), r["hostDecision"]["kind"].as_str()) {
                (Some(e), _) => e,
                (None, Some("pause")) => "paused",
                (None, Some("halt")) => "halted",
                _ => "running",
            };
            (r["run"].as_str().unwrap().to_string(), state.to_string())
        })
        .collect()
}

/// NEST-13: the outer run pauses on the nested run's hitl; `flow run` and
/// `flow history` list that call with the nested run's id; a reply that
/// does not fit is refused with nothing recorded; the fitting one, sent to
/// the nested run, continues both runs, and both replay `matched`.
#[test]
fn a_sub_flow_that_asks_pauses_its_parent_and_its_answer_continues_both() {
    let f = TestApp::new();
    let (code, v) = f.json(&["run", &fixture("outer.json"), "--input", r#"{"text":"hi"}"#]);
    assert_eq!((code, v["state"].as_str()), (3, Some("paused")), "{v}");
    let outer = v["run"].as_str().unwrap().to_string();
    let pending = v["pending"].as_array().unwrap();
    assert_eq!(pending.len(), 1, "{v}");
    let inner = pending[0]["run"].as_str().unwrap().to_string();
    assert_ne!(inner, outer, "the pending call is the nested run's: {v}");
    assert_eq!(pending[0]["tool"], "std/human#input", "{v}");
    assert_eq!(pending[0]["node"], "ask", "{v}");
    assert_eq!(pending[0]["args"]["prompt"], "Approve this draft?\n\nhi");
    let (_, h) = f.json(&["history", &outer]);
    assert_eq!(h["pending"][0]["run"], inner.as_str(), "{h}");
    assert_eq!(h["pending"][0]["call"], "c1:root#1", "{h}");
    assert_eq!(
        states(&f),
        vec![
            (outer.clone(), "paused".to_string()),
            (inner.clone(), "paused".to_string())
        ]
    );
    // Refused before anything is recorded, in either run.
    let (outer_facts, inner_facts) = (f.facts(&outer), f.facts(&inner));
    let (code, v) = f.json(&[
        "resume",
        &inner,
        "--call",
        "c1:root#1",
        "--reply",
        r#"{"Ok":{"decision":"maybe"}}"#,
    ]);
    assert_eq!(code, 2, "{v}");
    assert_eq!(
        (f.facts(&outer), f.facts(&inner)),
        (outer_facts, inner_facts)
    );
    // Answered by the nested run's id: the outer run completes.
    let (code, v) = f.json(&["resume", &inner, "--call", "c1:root#1", "--reply", APPROVED]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(
        v["run"],
        outer.as_str(),
        "the outermost run is reported: {v}"
    );
    assert_eq!(
        v["output"],
        json!({"text": "hi", "verdict": {"decision": "approved"}})
    );
    // The outer history holds one Call and its Reply: the nested ending.
    let (_, reply) = f.json(&["history", &outer, "--fact", "5"]);
    assert_eq!(
        reply["outcome"],
        json!({"Ok": {"draft": "hi", "review": {"decision": "approved"}}}),
        "{reply}"
    );
    for r in [&outer, &inner] {
        f.assert_matched(r);
    }
    assert!(states(&f).iter().all(|(_, s)| s == "completed"));
}

/// NEST-13, two levels deep, answered by the outermost run's id: the
/// pending call names the innermost run; the answer continues all three.
#[test]
fn the_outermost_run_id_answers_a_call_two_levels_down() {
    let f = TestApp::new();
    let (code, v) = f.json(&["run", &fixture("deep.json"), "--input", r#"{"text":"hi"}"#]);
    assert_eq!(code, 3, "{v}");
    let deep = v["run"].as_str().unwrap().to_string();
    let runs = states(&f);
    assert_eq!(runs.len(), 3, "{runs:?}");
    // Runs are listed in creation order: deep, middle, approve.
    assert_eq!(v["pending"][0]["run"], runs[2].0.as_str(), "{v}");
    let (code, v) = f.json(&["resume", &deep, "--call", "c1:root#1", "--reply", REJECTED]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(
        v["output"]["verdict"],
        json!({"decision": "rejected"}),
        "{v}"
    );
    for (r, state) in states(&f) {
        assert_eq!(state, "completed", "{r}");
        f.assert_matched(&r);
    }
}

/// Two sub-flows paused at once in parallel branches: both calls are
/// pending (the same call id in two nested runs, so the outer run's id is
/// ambiguous and refused); each nested run's id answers its own, and the
/// run completes once both are answered.
#[test]
fn parallel_sub_flows_pause_together_and_are_answered_one_by_one() {
    let f = TestApp::new();
    let (code, v) = f.json(&["run", &fixture("pair.json"), "--input", r#"{"text":"x"}"#]);
    assert_eq!(code, 3, "{v}");
    let outer = v["run"].as_str().unwrap().to_string();
    let runs: Vec<String> = v["pending"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["run"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(runs.len(), 2, "{v}");
    assert_ne!(runs[0], runs[1]);
    let out = f.cmd(&["resume", &outer, "--call", "c1:root#1", "--reply", APPROVED]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("several nested runs"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (code, v) = f.json(&[
        "resume",
        &runs[0],
        "--call",
        "c1:root#1",
        "--reply",
        APPROVED,
    ]);
    assert_eq!(code, 3, "{v}");
    assert_eq!(v["pending"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["pending"][0]["run"], runs[1].as_str(), "{v}");
    let (code, v) = f.json(&[
        "resume",
        &runs[1],
        "--call",
        "c1:root#1",
        "--reply",
        REJECTED,
    ]);
    assert_eq!(code, 0, "{v}");
    // Pending calls come in the outer run's call-id order: the branch
    // `c1:root/brand-review#1` before `c1:root/legal-review#1`.
    assert_eq!(v["output"]["brand"], json!({"decision": "approved"}), "{v}");
    assert_eq!(v["output"]["legal"], json!({"decision": "rejected"}), "{v}");
    for (r, _) in states(&f) {
        f.assert_matched(&r);
    }
}

/// NEST-14: a sub-flow that faults fails the subgraph's call; its
/// `fail_branch` retries it (a second nested run) and then routes, with
/// `$.error` naming the node, the call and the nested fault. The same for
/// a fault that follows a person's `Failed` answer in a paused sub-flow.
#[test]
fn fail_branch_routes_a_sub_flow_that_faults() {
    let f = TestApp::new();
    let (code, v) = f.json(&["run", &fixture("retry.json"), "--input", r#"{"text":"x"}"#]);
    assert_eq!((code, v["exit"].as_str()), (4, Some("gave_up")), "{v}");
    let error = &v["output"]["error"];
    assert_eq!(error["node"], "try", "{v}");
    let message = error["outcome"]["Failed"]["message"].as_str().unwrap();
    assert!(message.contains("step limit"), "{message}");
    let runs = states(&f);
    let faulted = runs.iter().filter(|(_, s)| s == "faulted").count();
    assert_eq!((runs.len(), faulted), (3, 2), "two tries: {runs:?}");
    for (r, _) in &runs {
        f.assert_matched(r);
    }

    let g = TestApp::new();
    let (code, v) = g.json(&["run", &fixture("outer.json"), "--input", r#"{"text":"hi"}"#]);
    assert_eq!(code, 3, "{v}");
    let inner = v["pending"][0]["run"].as_str().unwrap().to_string();
    let (code, v) = g.json(&[
        "resume",
        &inner,
        "--call",
        "c1:root#1",
        "--reply",
        r#"{"Failed":{"message":"not today"}}"#,
    ]);
    assert_eq!(
        (code, v["exit"].as_str()),
        (4, Some("sub_flow_failed")),
        "{v}"
    );
    assert_eq!(v["output"]["error"]["node"], "approval", "{v}");
    let runs = states(&g);
    assert_eq!(runs[0].1, "completed");
    assert_eq!(runs[1].1, "faulted");
}

async fn post(c: &reqwest::Client, url: String, body: Json) -> (u16, Json) {
    let r = c.post(url).json(&body).send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

/// Starts the approval program over HTTP and waits until it pauses.
async fn start_outer(c: &reqwest::Client, s: &Server) -> (String, String) {
    let (status, v) = post(
        c,
        format!("{}/v1/runs", s.base),
        json!({"flow": doc("outer.json"), "modules": {"approve.json": doc("approve.json")},
               "input": {"text": "hi"}, "wait": 10}),
    )
    .await;
    assert_eq!((status, v["state"].as_str()), (201, Some("paused")), "{v}");
    let run = v["run"].as_str().unwrap().to_string();
    let inner = v["pending"][0]["run"].as_str().unwrap().to_string();
    assert_ne!(run, inner, "{v}");
    (run, inner)
}

/// NEST-13 over HTTP: `GET /v1/runs/{run}` and `/v1/calls` list the
/// nested run's call with its run id; `POST …/resume` on the outer run
/// answers it and the outer run completes; a second run, paused when the
/// server is killed, is answered after the restart by the nested run's id.
#[tokio::test]
async fn over_http_the_nested_call_is_listed_and_answered_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let c = client();
    let s = serve(dir.path(), &[]);
    let (run, inner) = start_outer(&c, &s).await;
    let view = get_json(&c, format!("{}/v1/runs/{run}", s.base)).await;
    assert_eq!(view["state"], "paused", "{view}");
    assert_eq!(view["pending"][0]["run"], inner.as_str(), "{view}");
    assert_eq!(view["pending"][0]["call"], "c1:root#1", "{view}");
    assert_eq!(view["children"][0]["run"], inner.as_str(), "{view}");
    let lineage = get_json(&c, format!("{}/v1/runs/{inner}/lineage", s.base)).await;
    assert_eq!(
        lineage["ancestors"],
        json!([{"run": inner, "from": run, "kind": "nested", "call": "c1:root#1"}]),
        "{lineage}"
    );
    let calls = get_json(&c, format!("{}/v1/calls", s.base)).await;
    let calls = calls["calls"].as_array().unwrap();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0]["run"], inner.as_str());
    assert_eq!(calls[0]["outer"], run.as_str());
    assert_eq!(calls[0]["tool"], "std/human#input");
    let (status, v) = post(
        &c,
        format!("{}/v1/runs/{run}/resume", s.base),
        json!({"call": "c1:root#1", "reply": {"Ok": {"decision": "approved"}}, "wait": 10}),
    )
    .await;
    assert_eq!(
        (status, v["state"].as_str()),
        (202, Some("completed")),
        "{v}"
    );
    assert_eq!(
        v["output"]["verdict"],
        json!({"decision": "approved"}),
        "{v}"
    );

    // Two levels deep: the innermost run's call, answered by its id.
    let (status, v) = post(
        &c,
        format!("{}/v1/runs", s.base),
        json!({"flow": doc("deep.json"),
               "modules": {"middle.json": doc("middle.json"), "approve.json": doc("approve.json")},
               "input": {"text": "deep"}, "wait": 10}),
    )
    .await;
    assert_eq!((status, v["state"].as_str()), (201, Some("paused")), "{v}");
    let deep = v["run"].as_str().unwrap().to_string();
    let innermost = v["pending"][0]["run"].as_str().unwrap().to_string();
    let view = get_json(&c, format!("{}/v1/runs/{deep}", s.base)).await;
    assert_eq!(view["pending"][0]["run"], innermost.as_str(), "{view}");
    let (status, v) = post(
        &c,
        format!("{}/v1/runs/{innermost}/resume", s.base),
        json!({"call": "c1:root#1", "reply": {"Ok": {"decision": "approved"}}, "wait": 10}),
    )
    .await;
    assert_eq!(
        (status, v["run"].as_str()),
        (202, Some(deep.as_str())),
        "{v}"
    );
    assert_eq!(
        v["output"]["verdict"],
        json!({"decision": "approved"}),
        "{v}"
    );

    let (run2, inner2) = start_outer(&c, &s).await;
    drop(s); // SIGKILL while both runs are paused
    let s = serve(dir.path(), &[]);
    let view = get_json(&c, format!("{}/v1/runs/{run2}", s.base)).await;
    assert_eq!(view["state"], "paused", "{view}");
    assert_eq!(view["pending"][0]["run"], inner2.as_str(), "{view}");
    let (status, v) = post(
        &c,
        format!("{}/v1/runs/{inner2}/resume", s.base),
        json!({"call": "c1:root#1", "reply": {"Ok": {"decision": "rejected"}}, "wait": 10}),
    )
    .await;
    assert_eq!(
        (status, v["state"].as_str()),
        (202, Some("completed")),
        "{v}"
    );
    assert_eq!(v["run"], run2.as_str(), "{v}");
    assert_eq!(
        v["output"]["verdict"],
        json!({"decision": "rejected"}),
        "{v}"
    );
    for r in [&run, &inner, &run2, &inner2] {
        let (status, v) = post(&c, format!("{}/v1/runs/{r}/replay", s.base), json!({})).await;
        assert_eq!(
            (status, v["verdict"].as_str()),
            (200, Some("matched")),
            "{r}: {v}"
        );
    }
}

/// NEST-19: while the nested run waits on a call (a ten-minute retry
/// wait), halting it halts the outer run that drives it, and halting
/// records a halt for each. A halt that waits for the calls out cuts the
/// wait short (a host-served sleep has no effect: it counts as never
/// sent), and a continue sends it again; a forced halt leaves it out, and
/// `POST …/resume {"open": "unknown"}` settles it `Unknown("halted")`,
/// both runs going on to their endings.
#[tokio::test]
async fn halting_the_outer_run_halts_the_nested_run_and_resume_continues_both() {
    let dir = tempfile::tempdir().unwrap();
    let c = client();
    let s = serve(dir.path(), &[]);
    let (run, slow) = start_waiting(&c, &s).await;
    // Halted by the nested run's id: the outermost run's drive is stopped.
    let (status, h) = post(&c, format!("{}/v1/runs/{slow}/halt", s.base), json!({})).await;
    assert_eq!((status, h["state"].as_str()), (200, Some("halted")), "{h}");
    for r in [&run, &slow] {
        let view = get_json(&c, format!("{}/v1/runs/{r}", s.base)).await;
        assert_eq!(view["state"], "halted", "{r}: {view}");
        assert_eq!(view["driving"], false, "{view}");
    }
    // Continued: the wait is sent again (the nested run waits once more).
    let (status, v) = post(&c, format!("{}/v1/runs/{run}/resume", s.base), json!({})).await;
    assert_eq!((status, v["state"].as_str()), (202, Some("running")), "{v}");
    let facts = get_json(&c, format!("{}/v1/runs/{slow}/facts?kind=Reply", s.base)).await;
    assert!(!facts.to_string().contains("Unknown"), "{facts}");
    // The nested run's wait was sent again once its decision is recorded.
    let db = rusqlite::Connection::open(dir.path().join("flow.db")).unwrap();
    let last_decision = || -> Option<String> {
        db.query_row(
            "SELECT h.details FROM host_records h JOIN runs r ON r.key = h.run_key
             WHERE r.id = ?1 AND h.kind = 'open-call-decision' ORDER BY h.seq DESC LIMIT 1",
            [slow.as_str()],
            |row| row.get(0),
        )
        .ok()
    };
    let mut decision = None;
    for _ in 0..200 {
        decision = last_decision();
        if decision.as_deref().is_some_and(|d| d.contains("\"send\"")) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(
        decision
            .as_deref()
            .is_some_and(|d| d.contains("never sent")),
        "{decision:?}"
    );
    // Forced: the wait stays out, and the continue settles it Unknown.
    let mut halted = json!(null);
    for _ in 0..100 {
        let (status, h) = post(
            &c,
            format!("{}/v1/runs/{run}/halt", s.base),
            json!({"force": true}),
        )
        .await;
        halted = h;
        if status == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(halted["state"], "halted", "{halted}");
    let (status, v) = post(
        &c,
        format!("{}/v1/runs/{run}/resume", s.base),
        json!({"wait": 10, "open": "unknown"}),
    )
    .await;
    assert_eq!(
        (status, v["state"].as_str()),
        (202, Some("completed")),
        "{v}"
    );
    assert_eq!(v["output"]["draft"], "hi", "{v}");
    let view = get_json(&c, format!("{}/v1/runs/{slow}", s.base)).await;
    assert_eq!(view["state"], "completed", "{view}");
    assert_eq!(view["exit"], "gave_up", "{view}");
    // The wait out at the halt was settled as the halt left it.
    let facts = get_json(&c, format!("{}/v1/runs/{slow}/facts?kind=Reply", s.base)).await;
    let facts = facts.to_string();
    assert!(
        facts.contains("halted") && !facts.contains("host restarted"),
        "{facts}"
    );
    // The choice made for the outer run held for the nested one.
    let decision = last_decision().unwrap();
    assert!(decision.contains(r#""chosen":"unknown""#), "{decision}");
    let runs = get_json(&c, format!("{}/v1/runs", s.base)).await;
    for r in runs["runs"].as_array().unwrap() {
        let r = r["run"].as_str().unwrap();
        let (status, v) = post(&c, format!("{}/v1/runs/{r}/replay", s.base), json!({})).await;
        assert_eq!(
            (status, v["verdict"].as_str()),
            (200, Some("matched")),
            "{r}: {v}"
        );
    }
}

/// Starts the halting program over HTTP and waits until its nested run
/// waits on its ten-minute retry: the outer run and the nested one.
async fn start_waiting(c: &reqwest::Client, s: &Server) -> (String, String) {
    let (status, v) = post(
        c,
        format!("{}/v1/runs", s.base),
        json!({"flow": doc("halting.json"),
               "modules": {"slow.json": doc("slow.json"), "fails.json": doc("fails.json")},
               "input": {"text": "hi"}}),
    )
    .await;
    assert_eq!(status, 201, "{v}");
    let run = v["run"].as_str().unwrap().to_string();
    // The outer run's pending call is the nested run's recorded wait.
    for _ in 0..400 {
        let view = get_json(c, format!("{}/v1/runs/{run}", s.base)).await;
        if view["pending"][0]["tool"] == "std/clock#sleep" {
            assert_eq!(view["state"], "running", "{view}");
            let slow = view["pending"][0]["run"].as_str().unwrap().to_string();
            assert_ne!(slow, run);
            return (run, slow);
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the nested run of {run} never waited");
}

/// A crash while a nested run is being driven: at the restart the outer
/// run's recovery continues the nested run (its call out at the crash
/// settled `Unknown("host restarted")`), and both end.
#[tokio::test]
async fn a_server_killed_while_a_nested_run_works_continues_both_at_restart() {
    let dir = tempfile::tempdir().unwrap();
    let c = client();
    let s = serve(dir.path(), &[]);
    let (run, slow) = start_waiting(&c, &s).await;
    drop(s); // SIGKILL
    let s = serve(dir.path(), &[]);
    for _ in 0..400 {
        let view = get_json(&c, format!("{}/v1/runs/{run}", s.base)).await;
        if view["state"] == "completed" {
            let inner = get_json(&c, format!("{}/v1/runs/{slow}", s.base)).await;
            assert_eq!(inner["exit"], "gave_up", "{inner}");
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{run} was not continued at the restart");
}
