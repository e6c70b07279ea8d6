//! The worker's tries of an unreachable or busy server, on a paused
//! clock: each test serves a fake `/v1/workers` on a real loopback
//! socket, and tokio's clock advances by itself whenever every task
//! waits, so the backoff's seconds pass at once and are measured exactly.

use super::*;
use crate::client::fake::Seen;
use axum::http::StatusCode;
use axum::routing::MethodFilter;
use tokio::time::Instant;

/// Serves `POST path` on `listener`: the n-th request (from 0) gets
/// `answer(n)`.
fn fake(
    listener: tokio::net::TcpListener,
    path: &str,
    answer: impl Fn(usize) -> (StatusCode, Json) + Clone + Send + Sync + 'static,
) -> Seen {
    crate::client::fake::serve(listener, MethodFilter::POST, path, answer)
}

async fn listener() -> tokio::net::TcpListener {
    tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind")
}

fn client(addr: std::net::SocketAddr) -> Client {
    let options = client::Options {
        timeout: Duration::from_secs(30),
        env_proxy: false,
    };
    Client::new(&format!("http://{addr}"), None, options).expect("client")
}

fn registered() -> Json {
    json!({"worker": "w-1", "pollMs": 20000, "timeoutMs": 60000, "replyLimit": 1048576})
}

fn session() -> Session {
    Session {
        worker: "w-1".into(),
        poll: Duration::from_secs(20),
        reply_limit: 1 << 20,
    }
}

/// `(lo, hi)` of each wait of a [`client::backoff::policy`] of `first` and
/// [`BACKOFF_MAX`]: `[first/2 · 2ⁿ, first · 2ⁿ)`, at most 1 s.
fn bounds(first: Duration, waits: usize) -> Vec<(Duration, Duration)> {
    let mut hi = first;
    (0..waits)
        .map(|_| {
            let b = (hi / 2, hi);
            hi = (hi * 2).min(BACKOFF_MAX);
            b
        })
        .collect()
}

/// The gaps between the requests `seen` lie within the policy's waits
/// (tokio's timers count whole milliseconds, rounding a wait up: a gap
/// may reach the bound).
fn assert_gaps(seen: &Seen, first: Duration) {
    let at = seen.lock().expect("seen").clone();
    let gaps: Vec<Duration> = at.windows(2).map(|w| w[1] - w[0]).collect();
    for (gap, (lo, hi)) in gaps.iter().zip(bounds(first, gaps.len())) {
        assert!(
            *gap >= lo && *gap <= hi,
            "a wait of {gap:?} is not in [{lo:?}, {hi:?}]: {gaps:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn registration_waits_out_a_server_that_is_down() {
    // The server's port, closed until it comes up 12 s in.
    let addr = listener().await.local_addr().expect("addr");
    let up = Duration::from_secs(12);
    tokio::spawn(async move {
        tokio::time::sleep(up).await;
        let l = tokio::net::TcpListener::bind(addr).await.expect("rebind");
        fake(l, "/v1/workers", |_| (StatusCode::CREATED, registered()));
    });
    let t = Instant::now();
    let s = register(&client(addr), "w", &[], &CancellationToken::new())
        .await
        .expect("registered")
        .expect("not stopped");
    assert_eq!(s.worker, "w-1");
    assert_eq!(s.poll, Duration::from_secs(20));
    // Tried at 0, then after waits that double from 125–250 ms to
    // 0.5–1 s: the first try after 12 s comes within one longest wait.
    let took = t.elapsed();
    assert!(took >= up && took <= up + BACKOFF_MAX, "{took:?}");
}

#[tokio::test(start_paused = true)]
async fn registration_stops_waiting_when_the_worker_stops() {
    let addr = listener().await.local_addr().expect("addr");
    let stop = CancellationToken::new();
    let s = stop.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(3)).await;
        s.cancel();
    });
    let t = Instant::now();
    let r = register(&client(addr), "w", &[], &stop)
        .await
        .expect("no refusal");
    assert!(r.is_none());
    assert_eq!(t.elapsed(), Duration::from_secs(3));
}

#[tokio::test(start_paused = true)]
async fn a_refused_registration_is_not_tried_again() {
    let l = listener().await;
    let addr = l.local_addr().expect("addr");
    let problem = json!({"type": "urn:flowd:problem:unauthorized", "title": "Unauthorized",
        "status": 401, "detail": "a bearer token is needed"});
    let seen = fake(l, "/v1/workers", move |_| {
        (StatusCode::UNAUTHORIZED, problem.clone())
    });
    let t = Instant::now();
    let e = register(&client(addr), "w", &[], &CancellationToken::new())
        .await
        .expect_err("refused");
    assert!(e.to_string().contains("a bearer token is needed"), "{e}");
    assert_eq!(t.elapsed(), Duration::ZERO);
    assert_eq!(seen.lock().expect("seen").len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_busy_server_is_polled_again_with_growing_waits() {
    let l = listener().await;
    let addr = l.local_addr().expect("addr");
    let seen = fake(l, "/v1/workers/w-1/poll", |n| match n {
        0..5 => (StatusCode::SERVICE_UNAVAILABLE, json!({"detail": "busy"})),
        _ => (StatusCode::OK, json!({"calls": [], "cancels": []})),
    });
    let a = poll(&client(addr), &session(), 8).await.expect("answered");
    assert!(a.calls.is_empty());
    assert_eq!(seen.lock().expect("seen").len(), 6);
    assert_gaps(&seen, Duration::from_millis(250));
}

#[tokio::test(start_paused = true)]
async fn a_lost_worker_is_not_polled_again() {
    let l = listener().await;
    let addr = l.local_addr().expect("addr");
    let seen = fake(l, "/v1/workers/w-1/poll", |_| {
        (StatusCode::NOT_FOUND, json!({"detail": "no worker w-1"}))
    });
    let r = poll(&client(addr), &session(), 8).await;
    assert!(matches!(r, Err(Failure::Gone)), "{r:?}");
    assert_eq!(seen.lock().expect("seen").len(), 1);
}

#[tokio::test(start_paused = true)]
async fn replies_are_sent_again_until_taken() {
    let l = listener().await;
    let addr = l.local_addr().expect("addr");
    let seen = fake(l, "/v1/workers/w-1/replies", |n| match n {
        0..3 => (StatusCode::BAD_GATEWAY, json!({"detail": "down"})),
        _ => (
            StatusCode::OK,
            json!({"replies": [{"run": "r", "call": "c", "admitted": true}]}),
        ),
    });
    let item = ReplyItem {
        run: "r".into(),
        call: "c".into(),
        outcome: json!({"Ok": 1}),
    };
    deliver(&client(addr), "w-1", vec![item]).await;
    assert_eq!(seen.lock().expect("seen").len(), 4);
    assert_gaps(&seen, Duration::from_millis(100));
}
