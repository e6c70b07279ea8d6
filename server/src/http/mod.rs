//! `flow serve`: the HTTP API (DESIGN §6) on the same run driver as the CLI.
//!
//! The server is a function (STYLE rule 1): [`run`] takes a bound listener,
//! a shutdown token and the [`AppState`]; [`app`] builds the router. The
//! binary only parses flags, opens the store, binds and calls `run`.
//!
//! Runs live in the server: a started or resumed run is driven by a task in
//! one `JoinSet`; a paused run holds no task. Every task ends on the one
//! shutdown token (its Tool calls are settled on the next start, as the
//! CLI's `flow resume` settles them), and [`run`] continues every run left
//! `running` before it accepts requests.

pub mod archive;
pub mod auth;
pub mod cli;
pub mod dashboard;
pub mod deadlines;
pub mod error;
pub mod feed;
pub mod listing;
pub mod metrics;
pub mod openapi;
pub mod routes;
pub mod sse;

use crate::driver::{Driver, RunResult};
use crate::error::Error;
use crate::host::{Host, HostOptions};
use auth::Tokens;
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use error::ApiError;
use flow_engine::program::Program;
use flow_store::{Discover, DiscoveryQuery, ReadHistory, RunId, RunState, SqliteStore};
use flow_tools::manifest::{Manifest, Resolver};
use serde_json::{Value as Json, json};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::timeout::TimeoutLayer;

/// What the server is configured with.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Parsed `--tools` flow.toml files, first match wins: the only source
    /// of bindings for submitted flows.
    pub manifests: Vec<Manifest>,
    /// `--tokens`: `None` means no authentication (loopback or --insecure).
    pub tokens: Option<Tokens>,
    /// Largest request body accepted (bytes).
    pub body_limit: usize,
    /// A request that has no response headers after this long gets 408.
    pub request_timeout: Duration,
    /// Continue runs left `running` at start.
    pub recover: bool,
}

impl Default for ServeOptions {
    fn default() -> ServeOptions {
        ServeOptions {
            manifests: Vec::new(),
            tokens: None,
            body_limit: 4 << 20,
            request_timeout: Duration::from_secs(60),
            recover: true,
        }
    }
}

/// Shared state: a cheap `Clone` handle.
#[derive(Clone)]
pub struct AppState {
    inner: Arc<Inner>,
}

struct Inner {
    driver: Driver,
    options: ServeOptions,
    shutdown: CancellationToken,
    /// Driver tasks (STYLE rule 7: spawned tasks live in a JoinSet).
    tasks: Mutex<JoinSet<()>>,
    /// Runs a task is driving now, each with the token that stops its
    /// drive (a child of `shutdown`): a second resume of one is 409, a halt
    /// cancels it.
    active: Mutex<HashMap<String, CancellationToken>>,
    /// Run state changes across runs (`GET /v1/events`).
    feed: feed::Feed,
    metrics: metrics::Metrics,
    /// Per-run head watches shared by SSE subscribers.
    hub: sse::Hub,
    deadlines: deadlines::Deadlines,
}

/// A drive's result as JSON, or the API error it ended with; `None` while
/// it is still going.
pub type Outcome = Option<Result<Json, ApiError>>;

type Drive = Pin<Box<dyn Future<Output = crate::error::Result<RunResult>> + Send + 'static>>;

impl AppState {
    pub fn new(
        store: Arc<SqliteStore>,
        options: ServeOptions,
        shutdown: CancellationToken,
    ) -> AppState {
        AppState {
            inner: Arc::new(Inner {
                driver: Driver::new(store),
                options,
                shutdown,
                tasks: Mutex::new(JoinSet::new()),
                active: Mutex::new(HashMap::new()),
                feed: feed::Feed::default(),
                metrics: metrics::Metrics::default(),
                hub: sse::Hub::default(),
                deadlines: deadlines::Deadlines::default(),
            }),
        }
    }

    pub fn driver(&self) -> &Driver {
        &self.inner.driver
    }

    pub fn store(&self) -> &Arc<SqliteStore> {
        &self.inner.driver.store
    }

    pub fn options(&self) -> &ServeOptions {
        &self.inner.options
    }

    pub fn shutdown(&self) -> &CancellationToken {
        &self.inner.shutdown
    }

    /// Refuses new work once shutdown began (503): runs started now would
    /// only be cut short.
    pub fn accepting(&self) -> Result<(), error::ApiError> {
        if self.inner.shutdown.is_cancelled() {
            return Err(error::ApiError::unavailable("the server is shutting down"));
        }
        Ok(())
    }

    pub fn metrics(&self) -> &metrics::Metrics {
        &self.inner.metrics
    }

    pub fn deadlines(&self) -> &deadlines::Deadlines {
        &self.inner.deadlines
    }

    pub fn hub(&self) -> &sse::Hub {
        &self.inner.hub
    }

    pub fn feed(&self) -> &feed::Feed {
        &self.inner.feed
    }

    /// Tells `/v1/events` subscribers that `run` is now in `state`.
    pub fn publish(&self, run: &str, state: &str, extra: Json) {
        self.inner.feed.publish(self.store(), run, state, extra);
    }

    /// Marks `run` as driven; false when a task drives it already.
    pub fn claim(&self, run: &RunId) -> bool {
        let Ok(mut a) = self.inner.active.lock() else {
            return false;
        };
        if a.contains_key(run.as_str()) {
            return false;
        }
        a.insert(run.to_string(), self.inner.shutdown.child_token());
        true
    }

    /// Stops the drive of `run`, if one is going, and waits (bounded) until
    /// its task has let go of the run. True when no drive is left.
    pub async fn stop_drive(&self, run: &RunId) -> bool {
        let token = self
            .inner
            .active
            .lock()
            .ok()
            .and_then(|a| a.get(run.as_str()).cloned());
        let Some(token) = token else {
            return true;
        };
        token.cancel();
        for _ in 0..500 {
            if !self.is_active(run.as_str()) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }

    fn drive_token(&self, run: Option<&RunId>) -> CancellationToken {
        run.and_then(|r| {
            self.inner
                .active
                .lock()
                .ok()
                .and_then(|a| a.get(r.as_str()).cloned())
        })
        .unwrap_or_else(|| self.inner.shutdown.clone())
    }

    pub fn release(&self, run: &str) {
        if let Ok(mut a) = self.inner.active.lock() {
            a.remove(run);
        }
    }

    pub fn is_active(&self, run: &str) -> bool {
        self.inner
            .active
            .lock()
            .map(|a| a.contains_key(run))
            .unwrap_or(false)
    }

    /// Binds a program's Tools from the server's own configuration: a
    /// submitted flow has no filesystem bindings of its own, so each
    /// declaration is looked up in the `--tools` manifests (by its module
    /// and tool id, as flow.toml keys them) and bound as a host override.
    pub async fn bind(&self, program: &Program) -> Result<Host, ApiError> {
        let mut resolver = Resolver::new();
        for m in program.modules.values() {
            for d in m.decls.values() {
                let Some((module, tool)) = d.identity.rsplit_once('#') else {
                    continue;
                };
                if let Some(b) = self
                    .inner
                    .options
                    .manifests
                    .iter()
                    .find_map(|man| man.lookup(module, tool))
                {
                    resolver.override_binding(&d.identity, b.clone());
                }
            }
        }
        let mut opts = HostOptions {
            program_dir: None,
            resolver,
            ..HostOptions::default()
        };
        match Host::bind(program, &mut opts).await {
            Ok(h) => Ok(h),
            Err(Error::Bind(msgs)) => Err(ApiError::from(Error::Bind(
                msgs.iter().map(|m| self.redact(m)).collect(),
            ))),
            Err(e) => Err(e.into()),
        }
    }

    /// Hides the server's own paths (the `--tools` manifests and their
    /// directories) in a message meant for a client.
    fn redact(&self, msg: &str) -> String {
        let mut out = msg.to_string();
        let mut paths: Vec<String> = Vec::new();
        for m in &self.inner.options.manifests {
            paths.push(m.path.display().to_string());
            paths.push(m.dir.display().to_string());
        }
        // Longest first, so a file's path goes before its directory's.
        paths.sort_by_key(|p| std::cmp::Reverse(p.len()));
        for p in paths.iter().filter(|p| !p.is_empty() && p.as_str() != ".") {
            out = out.replace(p.as_str(), "<tools>");
        }
        out
    }

    /// Wraps a drive so that it ends on shutdown, stops its Tools, releases
    /// the run and reports the outcome (events, metrics, `done`).
    fn wrap(
        &self,
        run: Option<RunId>,
        host: Host,
        make: impl FnOnce(Arc<Host>) -> Drive + Send + 'static,
        done: watch::Sender<Outcome>,
    ) -> Drive {
        let state = self.clone();
        Box::pin(async move {
            let host = Arc::new(host);
            let token = state.drive_token(run.as_ref());
            let before = match &run {
                Some(r) => state
                    .store()
                    .run_info(r)
                    .map(|i| i.last_fact.n)
                    .unwrap_or(0),
                None => 0,
            };
            state.inner.metrics.drives.inc();
            let drive = make(host.clone());
            let r = tokio::select! {
                biased;
                r = drive => Some(r),
                _ = token.cancelled() => None,
            };
            let r = match r {
                Some(r) => r,
                None => {
                    host.shutdown().await;
                    state.inner.metrics.drives.dec();
                    // Cut short by shutdown: the run stays `running`; its
                    // open Tool calls are settled on the next start.
                    if let Some(run) = &run {
                        tracing::info!(run.id = %run, "drive cancelled by shutdown");
                        state.release(run.as_str());
                    }
                    let _ = done.send(Some(Err(ApiError::unavailable(
                        "the server is shutting down",
                    ))));
                    return Err(Error::Refused("the server is shutting down".into()));
                }
            };
            let id = match (&r, &run) {
                (Ok(res), _) => Some(res.run().clone()),
                (Err(_), Some(run)) => Some(run.clone()),
                _ => None,
            };
            if let Some(id) = &id {
                state.release(id.as_str());
                let after = state
                    .store()
                    .run_info(id)
                    .map(|i| i.last_fact.n)
                    .unwrap_or(before);
                state.inner.metrics.facts.add(after.saturating_sub(before));
            }
            match &r {
                Ok(res) => {
                    let j = res.to_json();
                    let st = j["state"].as_str().unwrap_or("").to_string();
                    state.inner.metrics.finished(&st);
                    if st == "paused" {
                        state.deadlines().watch_run(&state, res.run());
                    }
                    state.publish(res.run().as_str(), &st, json!({}));
                    let _ = done.send(Some(Ok(j)));
                }
                Err(e) => {
                    if let Some(id) = &id {
                        tracing::warn!(run.id = %id, error = %e, "drive ended with an error");
                        let st = state
                            .store()
                            .run_info(id)
                            .map(|i| i.state.as_str())
                            .unwrap_or("running");
                        state.publish(id.as_str(), st, json!({}));
                    }
                    let _ = done.send(Some(Err(clone_err(e))));
                }
            }
            // The outcome is out before the Tools are stopped: stopping
            // Tool processes awaits, and a refusal found in the drive's
            // first step must reach `drive_checked` in that step.
            host.shutdown().await;
            state.inner.metrics.drives.dec();
            r
        })
    }

    /// Spawns a drive into the JoinSet.
    fn spawn(&self, fut: Drive) {
        if let Ok(mut set) = self.inner.tasks.lock() {
            // Reap finished tasks so the set does not grow.
            while set.try_join_next().is_some() {}
            set.spawn(async move {
                let _ = fut.await;
            });
        }
    }

    /// Drives `run` (already recorded) in a task; the receiver gets the
    /// outcome.
    pub fn drive_in_task(
        &self,
        run: RunId,
        host: Host,
        make: impl FnOnce(Arc<Host>) -> Drive + Send + 'static,
    ) -> watch::Receiver<Outcome> {
        let (tx, rx) = watch::channel(None);
        let fut = self.wrap(Some(run), host, make, tx);
        self.spawn(fut);
        rx
    }

    /// Polls a drive once in the caller (so that a refusal before anything
    /// is recorded is answered synchronously, with its status), then moves
    /// it into a task. `Err` is that refusal; `Ok` gives the receiver of the
    /// outcome, which may already be there.
    pub async fn drive_checked(
        &self,
        run: Option<RunId>,
        host: Host,
        make: impl FnOnce(Arc<Host>) -> Drive + Send + 'static,
    ) -> Result<watch::Receiver<Outcome>, ApiError> {
        let (tx, rx) = watch::channel(None);
        let mut fut = self.wrap(run, host, make, tx);
        match futures_util::poll!(&mut fut) {
            std::task::Poll::Ready(Err(e)) => Err(ApiError::from(e)),
            std::task::Poll::Ready(Ok(_)) => Ok(rx),
            std::task::Poll::Pending => {
                self.spawn(fut);
                // Refused in the first step, but still stopping its Tools.
                if let Some(Err(e)) = rx.borrow().clone() {
                    return Err(e);
                }
                Ok(rx)
            }
        }
    }

    /// Continues every run left `running` (a crash or a shutdown cut its
    /// drive short): settles its open Tool calls as `flow resume` does and
    /// drives on. Nested runs are continued by their outer run's settling.
    pub async fn recover(&self) -> usize {
        let mut after: Option<String> = None;
        let mut found = Vec::new();
        loop {
            let q = DiscoveryQuery {
                limit: Some(DiscoveryQuery::MAX_LIMIT),
                after: after.clone(),
                state: Some(RunState::Running),
            };
            let page = match self.store().discover(&q) {
                Ok(p) => p,
                Err(e) => {
                    tracing::error!(error = %e, "recovery: discovery failed");
                    break;
                }
            };
            for row in &page.runs {
                if let Ok(id) = RunId::parse(&row.run) {
                    found.push(id);
                }
            }
            match page.next_after {
                Some(n) => after = Some(n),
                None => break,
            }
        }
        let mut resumed = 0;
        for run in found {
            match self.store().run_info(&run) {
                Ok(i) if i.outer.is_none() && i.state == RunState::Running => {}
                _ => continue,
            }
            let (_, program, facts) = match self.driver().program_of(&run) {
                Ok(x) => x,
                Err(e) => {
                    tracing::error!(run.id = %run, error = %e, "recovery: unreadable run");
                    continue;
                }
            };
            let host = match self.bind(&program).await {
                Ok(h) => h,
                Err(e) => {
                    tracing::error!(run.id = %run, detail = %e.detail, "recovery: cannot bind");
                    continue;
                }
            };
            if !self.claim(&run) {
                continue;
            }
            tracing::info!(run.id = %run, "recovery: continuing a run left running");
            let driver = self.driver().clone();
            let r = run.clone();
            let _ = self.drive_in_task(run, host, move |host| {
                Box::pin(async move { driver.resume(&r, program, facts, None, &host).await })
            });
            resumed += 1;
        }
        resumed
    }

    /// Cancels every drive and waits (bounded) for the tasks to finish.
    async fn drain(&self, deadline: Duration) {
        self.inner.shutdown.cancel();
        let mut set = match self.inner.tasks.lock() {
            Ok(mut s) => std::mem::take(&mut *s),
            Err(_) => return,
        };
        let all = async { while set.join_next().await.is_some() {} };
        if tokio::time::timeout(deadline, all).await.is_err() {
            tracing::warn!("drain deadline passed; aborting driver tasks");
        }
    }
}

fn clone_err(e: &Error) -> ApiError {
    match e {
        Error::Refused(s) => ApiError::from(Error::Refused(s.clone())),
        Error::Check(v) => ApiError::from(Error::Check(v.clone())),
        Error::Bind(v) => ApiError::from(Error::Bind(v.clone())),
        Error::NotFound(s) => ApiError::from(Error::NotFound(s.clone())),
        Error::Conflict(s) => ApiError::from(Error::Conflict(s.clone())),
        Error::Unreadable(s) => ApiError::from(Error::Unreadable(s.clone())),
        Error::Store(e) => {
            tracing::error!(error = %e, "storage failure");
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "storage",
                "the store could not accept or give back facts; the cause is in the server log",
            )
        }
    }
}

/// The router with every layer: body limits (both axum's extractor limit
/// and tower-http's), request timeouts, tracing, panic catching, auth.
pub fn app(state: AppState) -> Router {
    let limit = state.options().body_limit;
    let timeout = state.options().request_timeout;
    let api = routes::router()
        .merge(openapi::router())
        .merge(dashboard::router())
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::require,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            metrics::count,
        ))
        .with_state(state);
    // Router::layer wraps: the last one added is the outermost.
    api.layer(DefaultBodyLimit::max(limit))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            timeout,
        ))
        .layer(RequestBodyLimitLayer::new(limit))
        .layer(axum::middleware::map_response(problem_413))
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(
            |_: Box<dyn std::any::Any + Send>| {
                axum::response::IntoResponse::into_response(ApiError::internal(
                    "a handler panicked",
                ))
            },
        ))
        .layer(tower_http::trace::TraceLayer::new_for_http())
        .layer(
            tower_http::sensitive_headers::SetSensitiveRequestHeadersLayer::new([
                axum::http::header::AUTHORIZATION,
            ]),
        )
        .fallback(|| async { ApiError::not_found("no such endpoint; see /openapi.json") })
}

/// tower-http's limit and timeout layers answer with plain text; give
/// those answers our envelope.
async fn problem_413(r: axum::response::Response) -> axum::response::Response {
    use axum::response::IntoResponse;
    let is_problem = r
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/problem+json"));
    match r.status() {
        StatusCode::PAYLOAD_TOO_LARGE if !is_problem => error::too_large().into_response(),
        StatusCode::REQUEST_TIMEOUT if !is_problem => ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "timeout",
            "the request took longer than the server's request timeout",
        )
        .into_response(),
        _ => r,
    }
}

/// Serves until `shutdown` is cancelled: continues runs left running,
/// accepts requests, then stops accepting, ends SSE streams (they
/// `take_until` the token), cancels driver tasks and waits for them.
pub async fn run(
    listener: tokio::net::TcpListener,
    shutdown: CancellationToken,
    state: AppState,
) -> std::io::Result<()> {
    if state.options().recover {
        let n = state.recover().await;
        if n > 0 {
            tracing::info!(runs = n, "continued runs left running");
        }
    }
    // hitl deadlines: armed from the store, fired while serving.
    {
        let s = state.clone();
        if let Ok(mut set) = state.inner.tasks.lock() {
            set.spawn(deadlines::service(s));
            // The state feed's poller: other processes' changes too.
            set.spawn(feed::poll(state.clone()));
        }
    }
    let addr = listener.local_addr()?;
    tracing::info!(listen = %addr, "flowd listening");
    let router = app(state.clone());
    let token = shutdown.clone();
    let serve = axum::serve(listener, router).with_graceful_shutdown(async move {
        token.cancelled().await;
    });
    // The server's own token is the one SSE streams and drives watch;
    // `shutdown` cancels it.
    let own = state.shutdown().clone();
    let link = shutdown.clone();
    tokio::spawn(async move {
        link.cancelled().await;
        own.cancel();
    });
    let r = serve.await;
    state.drain(Duration::from_secs(10)).await;
    r
}
