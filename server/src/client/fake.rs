//! A fake flowd for the client's and the worker's tests: one route on a
//! real loopback socket, its n-th request answered by `answer(n)`, each
//! request's (virtual, when tokio's clock is paused) time kept.

use axum::Router;
use axum::http::StatusCode;
use axum::routing::{MethodFilter, on};
use serde_json::Value as Json;
use std::sync::{Arc, Mutex};
use tokio::time::Instant;

/// When each request came, in order.
pub(crate) type Seen = Arc<Mutex<Vec<Instant>>>;

/// Serves `method path` on `listener` until the test's runtime ends.
pub(crate) fn serve(
    listener: tokio::net::TcpListener,
    method: MethodFilter,
    path: &str,
    answer: impl Fn(usize) -> (StatusCode, Json) + Clone + Send + Sync + 'static,
) -> Seen {
    let seen: Seen = Arc::default();
    let s = seen.clone();
    let app = Router::new().route(
        path,
        on(method, move || {
            let (s, answer) = (s.clone(), answer.clone());
            async move {
                let n = {
                    let mut s = s.lock().expect("seen");
                    s.push(Instant::now());
                    s.len() - 1
                };
                let (status, body) = answer(n);
                (status, axum::Json(body))
            }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    seen
}
