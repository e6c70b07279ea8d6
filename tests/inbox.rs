//! The inbox for thousands (issue 38 §2): `GET /v1/calls` pages by an
//! opaque cursor without gaps or repeats while runs are added, filters by
//! run, node, tool, waiting time and deadline, sorts by age or deadline,
//! and counts exactly what the filter matches; bad values are refused with
//! what to send. A real `flow serve` on a real SQLite file and on Postgres.

mod common;

use serde_json::{Value, json};
use std::collections::BTreeSet;

async fn start_paused(c: &reqwest::Client, base: &str) -> String {
    let (_, v) = common::post_json(
        c,
        format!("{base}/v1/runs"),
        &json!({"flow": common::review_flow(), "input": {"text": "inbox"}, "wait": 10}),
    )
    .await;
    assert_eq!(v["state"], "paused", "{v}");
    v["run"].as_str().unwrap().to_string()
}

async fn get(c: &reqwest::Client, url: String) -> (u16, Value) {
    let r = c.get(url).send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

/// Every page from the first, following `next`.
async fn all_pages(c: &reqwest::Client, base: &str, query: &str) -> Vec<Vec<(String, String)>> {
    let mut pages = Vec::new();
    let mut after = String::new();
    loop {
        let (s, v) = get(c, format!("{base}/v1/calls?{query}{after}")).await;
        assert_eq!(s, 200, "{v}");
        let page: Vec<(String, String)> = v["calls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["run"].as_str().unwrap().into(),
                    c["call"].as_str().unwrap().into(),
                )
            })
            .collect();
        pages.push(page);
        match v["next"].as_str() {
            Some(n) => {
                assert_eq!(v["truncated"], true);
                after = format!("&after={}", urlencode(n));
            }
            None => return pages,
        }
    }
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[tokio::test]
async fn the_inbox_pages_filters_sorts_and_counts() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::serve(dir.path(), &["--listen", "127.0.0.1:0"]);
    check(&server.base).await;
}

/// The same on Postgres: the inbox reads the waiting calls index
/// (migration 0013) both backends keep.
#[tokio::test]
async fn the_inbox_on_postgres() {
    let Some(db) = common::Schema::new() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let server = common::serve(dir.path(), &db.serve_args(&["--listen", "127.0.0.1:0"]));
    check(&server.base).await;
}

async fn check(base: &str) {
    let (c, base) = (reqwest::Client::new(), base.to_string());
    let mut runs = Vec::new();
    for _ in 0..7 {
        runs.push(start_paused(&c, &base).await);
    }

    // Pages of 3: 3 + 3 + 1, each call once, oldest first, the count on
    // every page.
    let (_, first) = get(&c, format!("{base}/v1/calls?limit=3")).await;
    assert_eq!(first["total"], 7, "{first}");
    let pages = all_pages(&c, &base, "limit=3").await;
    assert_eq!(pages.iter().map(Vec::len).collect::<Vec<_>>(), [3, 3, 1]);
    let listed: Vec<String> = pages.concat().into_iter().map(|(r, _)| r).collect();
    assert_eq!(
        listed, runs,
        "longest waiting first: in the order they paused"
    );

    // Runs paused while a client pages come after the pages it read: no
    // gap, no repeat.
    let (_, p1) = get(&c, format!("{base}/v1/calls?limit=4")).await;
    let more = vec![start_paused(&c, &base).await, start_paused(&c, &base).await];
    let next = urlencode(p1["next"].as_str().unwrap());
    let (_, p2) = get(&c, format!("{base}/v1/calls?limit=10&after={next}")).await;
    let seen: Vec<&str> = p1["calls"]
        .as_array()
        .unwrap()
        .iter()
        .chain(p2["calls"].as_array().unwrap())
        .map(|c| c["run"].as_str().unwrap())
        .collect();
    let want: Vec<&str> = runs.iter().chain(&more).map(String::as_str).collect();
    assert_eq!(seen, want);
    assert_eq!(p2["total"], 9);
    assert_eq!(p2["next"], Value::Null);
    runs.extend(more);

    // Filters: by run, node, tool, waiting time, deadline.
    let (_, one) = get(&c, format!("{base}/v1/calls?run={}", runs[2])).await;
    assert_eq!(one["total"], 1, "{one}");
    assert_eq!(one["calls"][0]["run"], runs[2].as_str());
    let node = one["calls"][0]["node"].as_str().unwrap().to_string();
    let (_, by_node) = get(&c, format!("{base}/v1/calls?node={node}")).await;
    assert_eq!(by_node["total"], 9, "{by_node}");
    let (_, other) = get(&c, format!("{base}/v1/calls?node=elsewhere")).await;
    assert_eq!(
        (other["total"].clone(), other["calls"].clone()),
        (json!(0), json!([]))
    );
    let (_, tool) = get(&c, format!("{base}/v1/calls?tool=std%2Fhuman%23input")).await;
    assert_eq!(tool["total"], 9);
    let (_, long) = get(&c, format!("{base}/v1/calls?waiting_ms=3600000")).await;
    assert_eq!(long["total"], 0, "no call has waited an hour: {long}");
    let (_, waited) = get(&c, format!("{base}/v1/calls?waiting_ms=0")).await;
    assert_eq!(waited["total"], 9);
    let (_, due) = get(&c, format!("{base}/v1/calls?due_before_ms=9999999999999")).await;
    assert_eq!(due["total"], 0, "the review has no deadline: {due}");

    // Sort by deadline: none has one, so every call, by run.
    let pages = all_pages(&c, &base, "sort=due&limit=4").await;
    let by_due: BTreeSet<(String, String)> = pages.concat().into_iter().collect();
    assert_eq!(by_due.len(), 9);

    // A resumed run leaves the inbox; the count follows.
    let (run, call) = {
        let c0 = &first["calls"][0];
        (
            c0["run"].as_str().unwrap().to_string(),
            c0["call"].as_str().unwrap().to_string(),
        )
    };
    let (_, v) = common::post_json(
        &c,
        format!("{base}/v1/runs/{run}/resume"),
        &json!({"call": call, "reply": {"Ok": {"decision": "approved"}}, "wait": 10}),
    )
    .await;
    assert_ne!(v["state"], "paused", "{v}");
    let (_, after) = get(&c, format!("{base}/v1/calls")).await;
    assert_eq!(after["total"], 8, "{after}");
    let (_, gone) = get(&c, format!("{base}/v1/calls?run={run}")).await;
    assert_eq!(gone["total"], 0, "{gone}");
    let (_, by_tool) = get(&c, format!("{base}/v1/calls?tool=std%2Fhuman%23input")).await;
    assert_eq!(by_tool["total"], 8, "{by_tool}");

    // Bad values: 400, saying what to send.
    for (q, says) in [
        ("after=nonsense", "next"),
        ("sort=newest", "sort=age"),
        ("run=not-a-run", "run id"),
        ("limit=0", "limit"),
    ] {
        let (s, v) = get(&c, format!("{base}/v1/calls?{q}")).await;
        assert_eq!(s, 400, "{q}: {v}");
        assert!(v["detail"].as_str().unwrap().contains(says), "{q}: {v}");
    }
}
