//! `GET /v1/runs` as one run query (issue 38 item 1) on a real `flow
//! serve`, on SQLite and on Postgres: every filter against a brute-force
//! reference over the same runs, counts by state and flow, paging both
//! ways, and bad filters refused 400 with a message saying what to give.
//! Filters on the store itself are checked exhaustively in
//! store/tests/run_query.rs; here the wire: parameter names, parsing and
//! the answer's shape (REQUIREMENTS DISC-4, DISC-5, DISC-9, DISC-11).

mod common;

use common::{review_flow, serve};
use serde_json::{Value, json};

fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

/// The review flow (it pauses at a person's review) as flow `id`, with
/// the search attributes `text` and `n` taken from its input.
fn flow(id: &str) -> Value {
    let mut f = review_flow();
    f["id"] = json!(id);
    f["runtime_hints"] = json!({"search_attributes": {
        "text": "/input/text", "n": "/input/n", "draft": "/state/draft"}});
    f["state_schema"]["properties"]["n"] = json!({"type": "integer"});
    f["nodes"][0]["output_schema"]["n"] = json!({"type": "integer"});
    f
}

async fn get(c: &reqwest::Client, base: &str, q: &str) -> (u16, Value) {
    let r = c.get(format!("{base}/v1/runs?{q}")).send().await.unwrap();
    let s = r.status().as_u16();
    (s, r.json().await.unwrap())
}

fn ids(v: &Value) -> Vec<String> {
    v["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run"].as_str().unwrap().to_string())
        .collect()
}

/// Every page of `q`, newest first, following `nextBefore`.
async fn walk(c: &reqwest::Client, base: &str, q: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cursor = String::new();
    loop {
        let (s, v) = get(c, base, &format!("order=newest&limit=2&{q}{cursor}")).await;
        assert_eq!(s, 200, "{q}: {v}");
        out.extend(ids(&v));
        match v["nextBefore"].as_str() {
            Some(n) => cursor = format!("&before={n}"),
            None => return out,
        }
    }
}

struct Made {
    run: String,
    flow: &'static str,
    text: &'static str,
    n: u64,
}

async fn check(base: &str) {
    let c = client();
    let mut made = Vec::new();
    let texts = ["alpha", "beta"];
    for i in 0..6u64 {
        let flow_id = if i % 3 == 0 { "orders" } else { "billing" };
        let text = texts[(i % 2) as usize];
        let r = c
            .post(format!("{base}/v1/runs"))
            .json(&json!({"flow": flow(flow_id), "input": {"text": text, "n": i % 3}, "wait": 10}))
            .send()
            .await
            .unwrap();
        let status = r.status();
        let v: Value = r.json().await.unwrap();
        assert_eq!(status, 201, "{v}");
        assert_eq!(v["state"], "paused", "{v}");
        made.push(Made {
            run: v["run"].as_str().unwrap().to_string(),
            flow: flow_id,
            text,
            n: i % 3,
        });
    }
    // Halt two, so states differ.
    for m in &made[..2] {
        let r = c
            .post(format!("{base}/v1/runs/{}/halt", m.run))
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{}", r.text().await.unwrap());
    }
    let halted = |m: &Made| made[..2].iter().any(|h| h.run == m.run);
    let newest = |f: &dyn Fn(&Made) -> bool| -> Vec<String> {
        made.iter()
            .rev()
            .filter(|m| f(m))
            .map(|m| m.run.clone())
            .collect()
    };

    let (_, all) = get(&c, base, "order=newest&limit=200&counts=true").await;
    let created: Vec<i64> = all["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["createdMs"].as_i64().unwrap())
        .collect();
    assert_eq!(all["counts"]["total"], 6);
    assert_eq!(all["counts"]["byState"]["halted"], 2);
    assert_eq!(all["counts"]["byState"]["paused"], 4);
    assert_eq!(all["counts"]["byState"]["completed"], 0);
    assert_eq!(
        all["counts"]["byFlow"],
        json!([{"flow": "billing", "count": 4}, {"flow": "orders", "count": 2}])
    );
    assert_eq!(all["runs"][0]["flow"]["id"], made[5].flow);

    let cases: Vec<(String, Vec<String>)> = vec![
        ("state=paused".into(), newest(&|m| !halted(m))),
        ("state=halted,paused".into(), newest(&|_| true)),
        ("flow=orders".into(), newest(&|m| m.flow == "orders")),
        (
            "flow=billing&state=halted".into(),
            newest(&|m| m.flow == "billing" && halted(m)),
        ),
        (
            format!("attrs={}", urlencode(r#"{"text":"alpha"}"#)),
            newest(&|m| m.text == "alpha"),
        ),
        (
            format!(
                "attrs={}&flow=billing",
                urlencode(r#"{"text":"beta","n":1}"#)
            ),
            newest(&|m| m.text == "beta" && m.n == 1 && m.flow == "billing"),
        ),
        (format!("attrs={}", urlencode(r#"{"n":"1"}"#)), Vec::new()),
        // From the state at the run's last Checkpoint (the draft node
        // copied the text into `draft` before the review paused it).
        (
            format!("attrs={}", urlencode(r#"{"draft":"beta"}"#)),
            newest(&|m| m.text == "beta"),
        ),
        (
            format!("started_from={}", created[2]),
            all["runs"].as_array().unwrap()[..3]
                .iter()
                .filter(|r| r["createdMs"].as_i64().unwrap() >= created[2])
                .map(|r| r["run"].as_str().unwrap().to_string())
                .collect(),
        ),
        ("entry=review.json%23main".into(), Vec::new()),
        (format!("fork_of={}", made[0].run), Vec::new()),
        ("fault=boom".into(), Vec::new()),
        // Paused runs by the call they wait on (the waiting calls index,
        // migration 0013): halted runs wait on nothing.
        (
            "waiting_tool=std%2Fhuman%23input".into(),
            newest(&|m| !halted(m)),
        ),
        (
            "waiting_node=review&flow=orders".into(),
            newest(&|m| !halted(m) && m.flow == "orders"),
        ),
        ("waiting_tool=std%2Fllm".into(), Vec::new()),
        ("waiting_node=review&state=halted".into(), Vec::new()),
    ];
    for (q, want) in cases {
        assert_eq!(walk(&c, base, &q).await, want, "{q}");
        let (s, v) = get(&c, base, &format!("{q}&counts=true")).await;
        assert_eq!(s, 200);
        assert_eq!(v["counts"]["total"], want.len(), "{q}: {v}");
    }
    // The started range agrees with the listing's own createdMs on each
    // side of a boundary.
    let mid = created[3];
    let later = walk(&c, base, &format!("started_from={mid}")).await;
    let earlier = walk(&c, base, &format!("started_to={mid}")).await;
    assert_eq!(later.len() + earlier.len(), 6);

    // Oldest first pages with `after`.
    let (_, p1) = get(&c, base, "limit=3&flow=billing").await;
    let next = p1["nextAfter"].as_str().unwrap();
    let (_, p2) = get(&c, base, &format!("limit=3&flow=billing&after={next}")).await;
    let mut both = ids(&p1);
    both.extend(ids(&p2));
    let mut want = newest(&|m| m.flow == "billing");
    want.reverse();
    assert_eq!(both, want);
    assert!(p2["nextAfter"].is_null());

    // A resumed run waits on nothing: it leaves the filter and the inbox.
    let waiting = walk(&c, base, "waiting_tool=std%2Fhuman%23input").await;
    let run = &waiting[0];
    let r = c
        .get(format!("{base}/v1/calls?run={run}"))
        .send()
        .await
        .unwrap();
    let calls: Value = r.json().await.unwrap();
    assert_eq!(calls["total"], 1, "{calls}");
    assert_eq!(calls["calls"][0]["tool"], "std/human#input", "{calls}");
    let call = calls["calls"][0]["call"].as_str().unwrap();
    let r = c
        .post(format!("{base}/v1/runs/{run}/resume"))
        .json(&json!({"call": call, "reply": {"Ok": {"decision": "approved"}}, "wait": 10}))
        .send()
        .await
        .unwrap();
    let v: Value = r.json().await.unwrap();
    assert_ne!(v["state"], "paused", "{v}");
    let after = walk(&c, base, "waiting_tool=std%2Fhuman%23input").await;
    assert_eq!(after, waiting[1..], "the resumed run is gone");
    let r = c
        .get(format!("{base}/v1/calls?run={run}"))
        .send()
        .await
        .unwrap();
    let calls: Value = r.json().await.unwrap();
    assert_eq!(calls["total"], 0, "{calls}");

    for (q, says) in [
        ("state=sleeping", "not one of running, paused"),
        ("started_from=5&started_to=5", "range is empty"),
        ("started_from=yesterday", "started_from"),
        ("fork_of=nope", "is not a run id"),
        ("attrs=customer", "attrs must be a JSON object"),
        ("attrs=%7B%22a%22%3A%5B1%5D%7D", "must equal a string"),
        ("entry=%23main", "entry module must be 1 to"),
        ("counts=maybe", "counts"),
        ("flow=", "flow must be 1 to 256 bytes"),
    ] {
        let (s, v) = get(&c, base, q).await;
        assert_eq!(s, 400, "{q}: {v}");
        let detail = v["detail"].as_str().unwrap_or_default();
        assert!(detail.contains(says), "{q}: {detail}");
    }
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[tokio::test]
async fn run_query_over_http_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let s = serve(dir.path(), &[]);
    check(&s.base).await;
}

#[tokio::test]
async fn run_query_over_http_on_postgres() {
    let Some(db) = common::Schema::new() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let s = serve(
        dir.path(),
        &["--postgres", &db.url, "--postgres-schema", &db.name],
    );
    check(&s.base).await;
}
