//! Benchmarks of the HTTP server (issue 7), as ignored tests so that CI does
//! not time anything (DESIGN §7: performance is measured by benchmarks,
//! never by timed assertions). Run:
//!
//! ```text
//! cargo test -p flowd --release --test http_bench -- --ignored --nocapture
//! ```
//!
//! * run start latency over HTTP: `POST /v1/runs` (no wait) p50/p99;
//! * SSE fan-out: BENCH_SUBSCRIBERS (default 1,000) subscribers on one run
//!   while BENCH_FACTS (default 10,000) facts are appended; delivery latency
//!   (from just before the append call to the event's arrival) p50/p99, and
//!   the number of subscribers that missed a fact or saw one twice.

use eventsource_stream::Eventsource;
use flow_store::{AppendFacts, Fact, SqliteOptions, SqliteStore};
use flowd::http::{AppState, ServeOptions};
use futures_util::StreamExt;
use serde_json::json;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

fn review_flow() -> serde_json::Value {
    let p = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/flows/review/review.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn pct(v: &mut [u64], p: f64) -> u64 {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i]
}

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

async fn server(store: Arc<SqliteStore>) -> (String, CancellationToken) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let state = AppState::new(
        store,
        ServeOptions {
            recover: false,
            ..ServeOptions::default()
        },
        shutdown.clone(),
    );
    tokio::spawn(flowd::http::run(listener, shutdown.clone(), state));
    (format!("http://{addr}"), shutdown)
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "benchmark"]
async fn bench_start_latency() {
    let dir = tempfile::tempdir().unwrap();
    let store =
        Arc::new(SqliteStore::open(dir.path().join("flow.db"), SqliteOptions::default()).unwrap());
    let (base, shutdown) = server(store).await;
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let body = json!({"flow": review_flow(), "input": {"text": "bench"}}).to_string();
    let n = env("BENCH_STARTS", 300);
    let mut lat = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let r = client
            .post(format!("{base}/v1/runs"))
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
        let _ = r.bytes().await.unwrap();
        lat.push(t.elapsed().as_micros() as u64);
    }
    let (p50, p99) = (pct(&mut lat, 0.5), pct(&mut lat, 0.99));
    println!(
        "start latency over HTTP ({n} runs): p50 {:.2} ms, p99 {:.2} ms",
        p50 as f64 / 1000.0,
        p99 as f64 / 1000.0
    );
    shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "benchmark"]
async fn bench_sse_fan_out() {
    let subscribers = env("BENCH_SUBSCRIBERS", 1000);
    let facts = env("BENCH_FACTS", 10_000);
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(
        SqliteStore::open(
            dir.path().join("flow.db"),
            SqliteOptions {
                read_connections: 64,
                ..SqliteOptions::default()
            },
        )
        .unwrap(),
    );
    // A recorded run the bench appends to directly (the server does not
    // drive it: recovery is off).
    let sources = flowd::source::Sources {
        dir: None,
        root: "flow.json".into(),
        texts: [("flow.json".to_string(), review_flow().to_string())].into(),
    };
    let run = flowd::service::record_start(&*store, &sources, "{\"text\": \"fan-out\"}").unwrap();
    let (base, shutdown) = server(store.clone()).await;

    let submitted: Arc<Vec<OnceLock<Instant>>> =
        Arc::new((0..facts + 3).map(|_| OnceLock::new()).collect());
    let client = reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let mut subs = tokio::task::JoinSet::new();
    let ready = Arc::new(tokio::sync::Barrier::new(subscribers + 1));
    for _ in 0..subscribers {
        let (client, url, submitted, ready) = (
            client.clone(),
            format!("{base}/v1/runs/{run}/events"),
            submitted.clone(),
            ready.clone(),
        );
        subs.spawn(async move {
            let r = client.get(url).send().await.unwrap();
            let mut s = r.bytes_stream().eventsource();
            // The Start fact: the stream is live.
            let first = s.next().await.unwrap().unwrap();
            ready.wait().await;
            let mut expect = first.id.parse::<u64>().unwrap() + 1;
            let mut ok = first.id == "1";
            let mut lat: Vec<u32> = Vec::with_capacity(facts);
            while let Some(Ok(e)) = s.next().await {
                let n: u64 = e.id.parse().unwrap();
                if n != expect {
                    ok = false;
                }
                expect = n + 1;
                if let Some(t) = submitted[n as usize].get() {
                    lat.push(t.elapsed().as_micros().min(u32::MAX as u128) as u32);
                }
                if e.event == "End" {
                    break;
                }
            }
            (ok && expect == facts as u64 + 3, lat)
        });
    }
    ready.wait().await;
    let t0 = Instant::now();
    let appender = {
        let (store, run, submitted) = (store.clone(), run.clone(), submitted.clone());
        tokio::task::spawn_blocking(move || {
            for k in 0..facts as u64 {
                let n = k + 2;
                let _ = submitted[n as usize].set(Instant::now());
                store
                    .append(&run, Fact::from_value(json!({"fact": "Checkpoint", "n": n, "task": "root", "node": "draft", "state": {"text": "fan-out", "i": k}})).unwrap())
                    .unwrap();
            }
            let n = facts as u64 + 2;
            let _ = submitted[n as usize].set(Instant::now());
            store
                .append(&run, Fact::from_value(json!({"fact": "End", "n": n, "ending": {"Completed": {"exit": "success", "output": {}}}})).unwrap())
                .unwrap();
        })
    };
    appender.await.unwrap();
    let append_secs = t0.elapsed().as_secs_f64();
    let mut all: Vec<u64> = Vec::new();
    let mut missed = 0;
    while let Some(r) = subs.join_next().await {
        let (ok, lat) = r.unwrap();
        if !ok {
            missed += 1;
        }
        all.extend(lat.into_iter().map(u64::from));
    }
    let total = t0.elapsed().as_secs_f64();
    let (p50, p99) = (pct(&mut all, 0.5), pct(&mut all, 0.99));
    println!(
        "SSE fan-out: {subscribers} subscribers, {} facts appended in {append_secs:.1} s, all delivered in {total:.1} s; delivery latency p50 {:.2} ms, p99 {:.2} ms; subscribers that missed or repeated a fact: {missed}",
        facts + 1,
        p50 as f64 / 1000.0,
        p99 as f64 / 1000.0
    );
    shutdown.cancel();
    tokio::time::sleep(Duration::from_millis(100)).await;
}
