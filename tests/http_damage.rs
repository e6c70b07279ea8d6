//! Reads never hide a storage failure (issue 17, item 7; DESIGN §3: "a
//! mismatch is a storage failure"): the SSE stream of a damaged run sends
//! every fact before the damage, then an `error` event naming it, and
//! ends; `GET /v1/calls` lists a paused run it cannot read as a problem
//! instead of dropping it.

mod common;

use common::{review_flow, serve_with};
use eventsource_stream::Eventsource;
use futures_util::StreamExt;
use serde_json::{Value, json};
use std::time::Duration;

#[tokio::test]
async fn a_damaged_history_is_said_on_the_stream_and_in_the_inbox() {
    let dir = tempfile::tempdir().unwrap();
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let (mut child, base) = serve_with(dir.path(), None, &[]);
    let mut runs = Vec::new();
    for text in ["damaged", "intact"] {
        let r = client
            .post(format!("{base}/v1/runs"))
            .json(&json!({"flow": review_flow(), "input": {"text": text}, "wait": 10}))
            .send()
            .await
            .unwrap();
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["state"], "paused", "{v}");
        runs.push(v["run"].as_str().unwrap().to_string());
    }
    child.kill().unwrap();
    child.wait().unwrap();
    // Fact 4 of the first run (the Checkpoint at `review`, whose delta
    // sets `draft`) and fact 5 (the review's Call, whose arguments carry
    // the draft) no longer match their hashes. The stream stops at the
    // first; the inbox reads only the Call (checked against fact 4's
    // recorded hash: its cost follows the page, not the histories) and
    // finds the second.
    {
        let db = rusqlite::Connection::open(dir.path().join("flow.db")).unwrap();
        for n in [4, 5] {
            let changed = db
                .execute(
                    "UPDATE facts SET body = replace(body, 'damaged', 'damaget') \
                     WHERE n = ?2 AND body LIKE '%damaged%' AND run_key = (SELECT key FROM runs WHERE id = ?1)",
                    rusqlite::params![&runs[0], n],
                )
                .unwrap();
            assert_eq!(changed, 1, "fact {n} holds the text");
        }
    }
    let (mut child, base) = serve_with(dir.path(), None, &[]);

    // The stream: facts 1 to 3, then the error, then the end.
    let r = client
        .get(format!("{base}/v1/runs/{}/events", runs[0]))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let events: Vec<_> = tokio::time::timeout(
        Duration::from_secs(10),
        r.bytes_stream().eventsource().collect::<Vec<_>>(),
    )
    .await
    .expect("the stream of a damaged run ends");
    let events: Vec<_> = events.into_iter().map(Result::unwrap).collect();
    let ids: Vec<&str> = events.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(events.len(), 4, "{events:?}");
    assert_eq!(events[0].event, "Start");
    assert_eq!(&ids[..3], ["1", "2", "3"]);
    assert_eq!(events[3].event, "error", "{events:?}");
    assert_eq!(
        ids[3], "3",
        "no id of its own: the last id stays the last fact's"
    );
    let e: Value = serde_json::from_str(&events[3].data).unwrap();
    assert_eq!(
        (&e["status"], &e["fact"]),
        (&json!("unreadable"), &json!(4))
    );
    assert!(e["detail"].as_str().unwrap().contains("fact 4"), "{e}");

    // A client that already has the intact facts hears of the damage at
    // once.
    let r = client
        .get(format!("{base}/v1/runs/{}/events", runs[0]))
        .header("Last-Event-ID", "3")
        .send()
        .await
        .unwrap();
    let events: Vec<_> = r.bytes_stream().eventsource().collect().await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].as_ref().unwrap().event, "error");

    // The inbox: the intact run's call, and the damaged run as a problem.
    let v: Value = common::get_json(&client, format!("{base}/v1/calls")).await;
    let calls: Vec<&str> = v["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["run"].as_str().unwrap())
        .collect();
    assert_eq!(calls, [runs[1].as_str()], "{v}");
    let problems = v["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 1, "{v}");
    assert_eq!(problems[0]["run"], runs[0]);
    assert_eq!(problems[0]["status"], "unreadable");
    child.kill().unwrap();
    child.wait().unwrap();
}

/// `/healthz` says when the store stops committing (issue 17, item 4):
/// another process holds the database's write lock, so a run's Start waits
/// in the writer; once it has waited 2 s the probe answers 503 `stalled`,
/// and 200 again once the lock is let go and the Start is durable.
#[tokio::test]
async fn healthz_reports_a_stalled_store() {
    let dir = tempfile::tempdir().unwrap();
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let (mut child, base) = serve_with(dir.path(), None, &[]);
    let health = |client: reqwest::Client, base: String| async move {
        let r = client.get(format!("{base}/healthz")).send().await.unwrap();
        let s = r.status().as_u16();
        (s, r.json::<Value>().await.unwrap())
    };
    let (s, v) = health(client.clone(), base.clone()).await;
    assert_eq!(
        (s, &v["status"], &v["store"]),
        (200, &json!("ok"), &json!("ok")),
        "{v}"
    );
    let db = rusqlite::Connection::open(dir.path().join("flow.db")).unwrap();
    db.execute_batch("BEGIN IMMEDIATE; UPDATE runs SET state = state;")
        .unwrap();
    let start = tokio::spawn({
        let (client, base) = (client.clone(), base.clone());
        async move {
            client
                .post(format!("{base}/v1/runs"))
                .json(&json!({"flow": review_flow(), "input": {"text": "t"}}))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    });
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let (s, v) = health(client.clone(), base.clone()).await;
    assert_eq!((s, &v["status"]), (503, &json!("stalled")), "{v}");
    assert!(
        v["store"].as_str().unwrap().contains("commit has waited"),
        "{v}"
    );
    db.execute_batch("COMMIT;").unwrap();
    drop(db);
    // The Start went through (or the store's busy timeout refused it);
    // either way nothing waits any more.
    let started = start.await.unwrap();
    assert!(started == 201 || started == 503, "{started}");
    let (s, v) = health(client.clone(), base.clone()).await;
    assert_eq!((s, &v["status"]), (200, &json!("ok")), "{v}");
    child.kill().unwrap();
    child.wait().unwrap();
}
