//! The client against fake servers on real loopback sockets: refusals
//! read as the CLI reads them (the same messages and exit codes as
//! before the client was typed), and following a run on a paused clock.

use super::fake::Seen;
use super::*;
use axum::http::StatusCode;
use axum::routing::MethodFilter;
use serde_json::{Value as Json, json};
use tokio::time::Instant;

/// Serves `GET path`: the n-th request (from 0) gets `answer(n)`; when
/// each came.
async fn fake(
    path: &str,
    answer: impl Fn(usize) -> (StatusCode, Json) + Clone + Send + Sync + 'static,
) -> (Client, Seen) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = l.local_addr().expect("addr");
    let seen = super::fake::serve(l, MethodFilter::GET, path, answer);
    (client(&format!("http://{addr}")), seen)
}

fn client(base: &str) -> Client {
    let options = Options {
        timeout: Duration::from_secs(60),
        env_proxy: false,
    };
    Client::new(base, None, options).expect("client")
}

fn view(state: &str) -> Json {
    json!({"run": "run-1", "state": state, "driving": state == "running",
        "entry": {"module": "flow.json", "function": "main"}, "program": "sha256:00",
        "ending": null, "exit": null, "output": null, "fault": null, "pending": [],
        "callsOut": [], "lastFact": {"n": 3, "hash": "blake3:00"}, "parent": null,
        "outer": null, "children": [], "childrenTruncated": false,
        "createdMs": 1, "updatedMs": 2})
}

fn problem(status: u16, kind: &str, detail: &str) -> Json {
    json!({"type": format!("urn:flowd:problem:{kind}"), "title": "", "status": status,
        "detail": detail})
}

#[tokio::test(start_paused = true)]
async fn following_a_run_reads_it_less_often_until_it_settles() {
    let (c, seen) = fake("/v1/runs/{run}", |n| match n {
        0..6 => (StatusCode::OK, view("running")),
        _ => (StatusCode::OK, view("paused")),
    })
    .await;
    let t = Instant::now();
    let v = c.follow_run("run-1").await.expect("settled");
    assert!(matches!(v.state, crate::http::listing::StateName::Paused));
    let at = seen.lock().expect("seen").clone();
    assert_eq!(at.len(), 7);
    // Each read after a wait in [200 ms/2 · 2ⁿ, 200 ms · 2ⁿ), at most 1 s
    // (tokio's timers round a wait up to whole milliseconds).
    let mut hi = Duration::from_millis(200);
    let mut last = t;
    for a in at {
        let gap = a - last;
        assert!(
            gap >= hi / 2 && gap <= hi,
            "{gap:?} not in [{:?}, {hi:?}]",
            hi / 2
        );
        hi = (hi * 2).min(Duration::from_secs(1));
        last = a;
    }
}

#[tokio::test]
async fn refusals_read_as_the_cli_read_them() {
    use crate::error::Error as E;
    let (c, _) = fake("/v1/runs/{run}", |n| match n {
        0 => (
            StatusCode::NOT_FOUND,
            problem(404, "not-found", "no run run-1"),
        ),
        1 => (
            StatusCode::CONFLICT,
            problem(409, "conflict", "driven here"),
        ),
        2 => (
            StatusCode::SERVICE_UNAVAILABLE,
            problem(503, "unavailable", "disk"),
        ),
        3 => (
            StatusCode::UNPROCESSABLE_ENTITY,
            problem(422, "refused", "no"),
        ),
        _ => (StatusCode::BAD_GATEWAY, json!("not a problem")),
    })
    .await;
    let next = async || E::from(c.get_run("run-1").await.expect_err("refused"));
    assert!(matches!(next().await, E::NotFound(m) if m == "no run run-1"));
    assert!(matches!(next().await, E::Conflict(m) if m == "driven here"));
    let e = next().await;
    assert_eq!((e.exit_code(), e.to_string().contains("disk")), (5, true));
    assert!(matches!(next().await, E::Refused(m) if m == "no"));
    assert!(matches!(next().await, E::Refused(m) if m == "HTTP 502 Bad Gateway"));
}

#[tokio::test]
async fn an_unreachable_server_is_said_so() {
    let addr = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind")
        .local_addr()
        .expect("addr");
    let base = format!("http://{addr}");
    let e = crate::error::Error::from(client(&base).get_run("run-1").await.expect_err("down"));
    assert_eq!(e.exit_code(), 2);
    assert!(
        e.to_string().starts_with(&format!("cannot reach {base}: ")),
        "{e}"
    );
}

#[test]
fn segments_are_encoded() {
    assert_eq!(segment("run-01ab_x.y~z"), "run-01ab_x.y~z");
    assert_eq!(segment("a/b c?"), "a%2Fb%20c%3F");
}
