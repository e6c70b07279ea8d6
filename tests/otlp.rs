//! OpenTelemetry traces over OTLP/HTTP (issue 38 §5): a real `flow serve
//! --otlp-endpoint` (SQLite, and Postgres with `FLOW_OTLP_ENDPOINT`)
//! drives runs of the counter fixture (a real Python Tool process) and a
//! real OTLP/HTTP receiver in this test decodes what it sends
//! (`ExportTraceServiceRequest`, protobuf, with `opentelemetry-proto`'s
//! types): one trace per run, its id derived from the run id; one span per
//! call, a child of the run's span, with the run, call, fact numbers (the
//! same as the run's timeline), Tool, node, outcome, route and attempt;
//! the run's span at its End. A collector that is down stops no run, and
//! the spans it could not take are counted (`flowd_otlp_dropped_spans`).
//! A malformed endpoint stops the start with a message saying what to
//! give.
//!
//! Real parts: the `flow` binary, real SQLite and Postgres, the Python
//! Tool process, an HTTP server decoding protobuf. Waits are bounded
//! polls, never timed assertions.

mod common;

use axum::body::Bytes;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Steps of each run: each a call of `count.json#step`.
const STEPS: u64 = 3;

/// A span as received, with the service that sent it.
struct Got {
    service: String,
    span: Span,
}

/// An OTLP/HTTP receiver on 127.0.0.1: `POST /v1/traces` with a protobuf
/// `ExportTraceServiceRequest`, answered with an empty
/// `ExportTraceServiceResponse`.
struct Receiver {
    url: String,
    spans: Arc<Mutex<Vec<Got>>>,
}

impl Receiver {
    async fn start() -> Receiver {
        let spans: Arc<Mutex<Vec<Got>>> = Arc::default();
        let kept = spans.clone();
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |headers: axum::http::HeaderMap, body: Bytes| {
                let kept = kept.clone();
                async move {
                    assert_eq!(
                        headers["content-type"], "application/x-protobuf",
                        "OTLP/HTTP in protobuf"
                    );
                    let req = ExportTraceServiceRequest::decode(body).expect("a protobuf request");
                    let mut k = kept.lock().unwrap();
                    for rs in req.resource_spans {
                        let service = rs
                            .resource
                            .as_ref()
                            .and_then(|r| r.attributes.iter().find(|a| a.key == "service.name"))
                            .and_then(|a| text(a.value.as_ref()?.value.as_ref()?))
                            .unwrap_or_default();
                        for ss in rs.scope_spans {
                            for span in ss.spans {
                                k.push(Got {
                                    service: service.clone(),
                                    span,
                                });
                            }
                        }
                    }
                    (
                        [("content-type", "application/x-protobuf")],
                        Vec::<u8>::new(),
                    )
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Receiver {
            url: format!("http://{addr}"),
            spans,
        }
    }

    /// Waits (at most 60 s) until `runs` each have their run span and
    /// [`STEPS`] call spans; returns each run's spans.
    async fn wait_for(&self, runs: &[String]) -> BTreeMap<String, Vec<(String, Span)>> {
        for _ in 0..600 {
            let by_run = by_run(&self.spans.lock().unwrap());
            let done = runs.iter().all(|r| {
                by_run
                    .get(r)
                    .is_some_and(|s| s.len() as u64 > STEPS && s.iter().any(|(_, s)| is_run(s)))
            });
            if done {
                return by_run;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let got = self.spans.lock().unwrap();
        panic!(
            "spans of {runs:?} did not all arrive within 60 s; got {:#?}",
            got.iter().map(|g| &g.span).collect::<Vec<_>>()
        );
    }
}

fn text(v: &Any) -> Option<String> {
    match v {
        Any::StringValue(s) => Some(s.clone()),
        _ => None,
    }
}

/// A span's attribute, as JSON (strings and integers).
fn attr(s: &Span, key: &str) -> Value {
    s.attributes
        .iter()
        .find(|a| a.key == key)
        .and_then(|a| a.value.as_ref()?.value.as_ref())
        .map_or(Value::Null, |v| match v {
            Any::StringValue(s) => json!(s),
            Any::IntValue(i) => json!(i),
            other => panic!("{key}: unexpected value {other:?}"),
        })
}

fn is_run(s: &Span) -> bool {
    s.parent_span_id.is_empty()
}

/// Spans by their `flow.run`, with the service that sent each.
fn by_run(got: &[Got]) -> BTreeMap<String, Vec<(String, Span)>> {
    let mut out: BTreeMap<String, Vec<(String, Span)>> = BTreeMap::new();
    for g in got {
        let run = attr(&g.span, "flow.run").as_str().unwrap().to_string();
        out.entry(run)
            .or_default()
            .push((g.service.clone(), g.span.clone()));
    }
    out
}

/// The trace id the server derives from a run id.
fn trace_of(run: &str) -> Vec<u8> {
    let mut h = Sha256::new();
    h.update(b"flowd otlp\0");
    h.update(run.as_bytes());
    h.finalize()[..16].to_vec()
}

/// Runs of the counter to completion (`wait`), one after another.
async fn complete_runs(c: &reqwest::Client, base: &str, n: usize) -> Vec<String> {
    let flow: Value = serde_json::from_str(
        &std::fs::read_to_string(common::roll::fixture().join("count.json")).unwrap(),
    )
    .unwrap();
    let mut runs = Vec::new();
    for _ in 0..n {
        let (status, v) = common::post_json(
            c,
            format!("{base}/v1/runs"),
            &json!({"flow": flow, "name": "count.json", "input": {"count": 0, "limit": STEPS}, "wait": 30}),
        )
        .await;
        assert_eq!(status, 201, "{v}");
        assert_eq!(v["state"], "completed", "{v}");
        runs.push(v["run"].as_str().unwrap().to_string());
    }
    runs
}

/// A counter's value in the server's `/metrics`.
async fn metric(c: &reqwest::Client, base: &str, name: &str) -> Option<u64> {
    let text = c
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} "))?.parse().ok())
}

/// One run's spans: one trace, the id derived from the run; the run span
/// the root, every call span its child, one per call, with the run's
/// timeline's fact numbers.
async fn check_run(c: &reqwest::Client, base: &str, run: &str, spans: &[(String, Span)]) {
    assert!(spans.iter().all(|(svc, _)| svc == "flowd"), "service.name");
    let trace = trace_of(run);
    for (_, s) in spans {
        assert_eq!(s.trace_id, trace, "one trace per run, derived from its id");
    }
    let roots: Vec<&Span> = spans.iter().map(|(_, s)| s).filter(|s| is_run(s)).collect();
    assert_eq!(roots.len(), 1, "one run span: {roots:#?}");
    let root = roots[0];
    assert_eq!(attr(root, "flow.outcome"), "Completed");
    assert_eq!(attr(root, "flow.state"), "completed");
    assert_eq!(root.name, "run count.json.main", "{root:#?}");
    let calls: Vec<&Span> = spans
        .iter()
        .map(|(_, s)| s)
        .filter(|s| !is_run(s))
        .collect();
    assert_eq!(calls.len() as u64, STEPS, "one span per call: {calls:#?}");

    let timeline = common::get_json(c, format!("{base}/v1/runs/{run}/timeline")).await;
    let mut seen = BTreeSet::new();
    for s in &calls {
        assert_eq!(s.parent_span_id, root.span_id, "a call is the run's child");
        let call = attr(s, "flow.call");
        assert!(seen.insert(call.to_string()), "one span per call: {call}");
        let t = timeline["calls"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["call"] == call)
            .unwrap_or_else(|| panic!("{call} in the timeline {timeline}"));
        assert_eq!(attr(s, "flow.fact.call"), t["fact"], "{t}");
        assert_eq!(attr(s, "flow.fact.reply"), t["replyFact"], "{t}");
        assert_eq!(attr(s, "flow.tool"), "count.json#step");
        assert_eq!(attr(s, "flow.node"), "step");
        assert_eq!(attr(s, "flow.outcome"), "Ok");
        assert_eq!(attr(s, "flow.route"), "process");
        assert_eq!(attr(s, "flow.attempt"), 1);
        assert_eq!(s.name, "call count.json#step");
        // Start and end are the timeline's sent and replied (ms).
        let ms = |ns: u64| json!(ns / 1_000_000);
        assert_eq!(ms(s.start_time_unix_nano), t["sentMs"], "{t}");
        assert_eq!(ms(s.end_time_unix_nano), t["repliedMs"], "{t}");
        assert!(
            root.start_time_unix_nano <= s.start_time_unix_nano
                && s.end_time_unix_nano <= root.end_time_unix_nano,
            "the call within its run"
        );
    }
}

/// (issue 38 §5) SQLite: two runs, two traces, every call a span.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_server_sends_one_trace_per_run_and_a_span_per_call() {
    let rx = Receiver::start().await;
    let data = tempfile::tempdir().unwrap();
    let tools = common::roll::fixture().join("flow.toml");
    let s = common::serve_bound(data.path(), Some(&tools), &["--otlp-endpoint", &rx.url]);
    let c = common::roll::client();
    let runs = complete_runs(&c, &s.base, 2).await;
    let got = rx.wait_for(&runs).await;
    for run in &runs {
        check_run(&c, &s.base, run, &got[run]).await;
    }
    assert_ne!(trace_of(&runs[0]), trace_of(&runs[1]));
    let exported = metric(&c, &s.base, "flowd_otlp_exported_spans_total")
        .await
        .unwrap();
    assert!(exported > 2 * STEPS, "{exported}");
    assert_eq!(
        metric(&c, &s.base, "flowd_otlp_dropped_spans_total").await,
        Some(0)
    );
}

/// A call recorded before the drive that admits its Reply — a person's
/// answer to a paused run — has its span named as any other: its node,
/// its Tool and its Call's fact, read back from the history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_answered_after_a_pause_has_its_node_and_call_fact() {
    let rx = Receiver::start().await;
    let data = tempfile::tempdir().unwrap();
    let s = common::serve_bound(data.path(), None, &["--otlp-endpoint", &rx.url]);
    let c = common::roll::client();
    let (status, v) = common::post_json(
        &c,
        format!("{}/v1/runs", s.base),
        &json!({"flow": common::review_flow(), "input": {"text": "traced"}, "wait": 10}),
    )
    .await;
    assert_eq!((status, v["state"].as_str()), (201, Some("paused")), "{v}");
    let run = v["run"].as_str().unwrap().to_string();
    let call = v["pending"][0]["call"].as_str().unwrap().to_string();
    // While it is paused the run has no span of its own (a span is sent
    // when it ends), but its drive's segment is there, saying so.
    let mut segment = None;
    for _ in 0..600 {
        segment = by_run(&rx.spans.lock().unwrap())
            .remove(&run)
            .unwrap_or_default()
            .into_iter()
            .map(|(_, s)| s)
            .find(|s| attr(s, "flow.stop") == "paused");
        if segment.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let segment = segment.unwrap_or_else(|| panic!("no segment span for the paused {run}"));
    assert_eq!(segment.trace_id, trace_of(&run));
    assert_eq!(attr(&segment, "flow.state"), "paused");
    assert_eq!(attr(&segment, "flow.waiting"), call.as_str());
    // The drive began once the Start was durable.
    assert_eq!(attr(&segment, "flow.fact.from"), 1);
    assert!(attr(&segment, "flow.fact.to").as_i64().unwrap() > 1);
    assert!(segment.name.ends_with(" paused"), "{segment:#?}");
    let (status, v) = common::post_json(
        &c,
        format!("{}/v1/runs/{run}/resume", s.base),
        &json!({"call": call, "reply": {"Ok": {"decision": "approved"}}, "wait": 10}),
    )
    .await;
    assert_eq!(
        (status, v["state"].as_str()),
        (202, Some("completed")),
        "{v}"
    );
    let mut spans = Vec::new();
    for _ in 0..600 {
        spans = by_run(&rx.spans.lock().unwrap())
            .remove(&run)
            .unwrap_or_default();
        if spans.iter().any(|(_, s)| is_run(s)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let timeline = common::get_json(&c, format!("{}/v1/runs/{run}/timeline", s.base)).await;
    let t = &timeline["calls"][0];
    let human = spans
        .iter()
        .map(|(_, s)| s)
        .find(|s| attr(s, "flow.call") == call.as_str())
        .unwrap_or_else(|| panic!("a span for {call}: {spans:#?}"));
    assert_eq!(attr(human, "flow.node"), "review");
    assert_eq!(attr(human, "flow.tool"), "std/human#input");
    assert_eq!(attr(human, "flow.fact.call"), t["fact"], "{timeline}");
    assert_eq!(attr(human, "flow.fact.reply"), t["replyFact"], "{timeline}");
    // The run span, sent at End, is the parent of the pause's segment and
    // of the call the person answered.
    let root = spans.iter().map(|(_, s)| s).find(|s| is_run(s)).unwrap();
    assert_eq!(segment.parent_span_id, root.span_id);
    assert_eq!(human.parent_span_id, root.span_id);
}

/// (issue 38 §5) Postgres, the endpoint given as `FLOW_OTLP_ENDPOINT`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_too_with_the_endpoint_from_the_environment() {
    let Some(db) = common::Schema::new() else {
        return;
    };
    let rx = Receiver::start().await;
    let data = tempfile::tempdir().unwrap();
    let tools = common::roll::fixture().join("flow.toml");
    let (child, base) = common::serve_args(
        data.path(),
        Some(&tools),
        &[("FLOW_OTLP_ENDPOINT", &rx.url)],
        &["--postgres", &db.url, "--postgres-schema", &db.name],
    );
    let mut child = KillOnDrop(child);
    let c = common::roll::client();
    let runs = complete_runs(&c, &base, 1).await;
    let got = rx.wait_for(&runs).await;
    check_run(&c, &base, &runs[0], &got[&runs[0]]).await;
    common::roll::stop(&mut child.0, &base).await;
}

/// (issue 38 §5) A collector that is down: runs complete all the same, and
/// the spans it could not take are counted as dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_is_down_stops_no_run() {
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let data = tempfile::tempdir().unwrap();
    let tools = common::roll::fixture().join("flow.toml");
    let url = format!("http://127.0.0.1:{port}");
    let s = common::serve_bound(data.path(), Some(&tools), &["--otlp-endpoint", &url]);
    let c = common::roll::client();
    complete_runs(&c, &s.base, 2).await;
    for _ in 0..600 {
        if metric(&c, &s.base, "flowd_otlp_dropped_spans_total")
            .await
            .is_some_and(|n| n > 0)
        {
            assert_eq!(
                metric(&c, &s.base, "flowd_otlp_exported_spans_total").await,
                Some(0)
            );
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no span was counted as dropped within 60 s");
}

/// (issue 38 §5) A malformed endpoint stops the start, saying what to give.
#[test]
fn a_malformed_endpoint_is_refused_at_start() {
    let data = tempfile::tempdir().unwrap();
    for (bad, says) in [
        ("not a url", "is not a URL"),
        ("grpc://127.0.0.1:4317", "is not OTLP/HTTP"),
        ("https://collector:4318", "plain HTTP only"),
    ] {
        let out = common::flow()
            .arg("--data")
            .arg(data.path())
            .args(["serve", "--otlp-endpoint", bad])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("--otlp-endpoint")
                && err.contains(says)
                && err.contains("http://127.0.0.1:4318"),
            "{bad}: {err}"
        );
    }
}

/// A server process killed if the test fails before it stopped it.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
