//! `flow serve`: the HTTP API (DESIGN §6) on the same run driver as the CLI.
//!
//! The server is a function (STYLE rule 1): [`run`] takes a bound listener,
//! a shutdown token and the [`AppState`]; [`app`] builds the router. The
//! binary only parses flags, opens the store, binds and calls `run`.
//!
//! Runs are driven by the run service ([`crate::service`]), the same one the
//! CLI uses: a started or resumed run is driven by a task of the service; a
//! paused run holds no task. Every task ends on the one shutdown token (its
//! Tool calls are settled on the next start, as the CLI's `flow resume`
//! settles them), and [`run`] continues every run left `running` before it
//! accepts requests.

pub mod answers;
pub mod archive;
pub mod auth;
pub mod blobs;
pub mod chain;
pub mod check;
pub mod cli;
pub mod confine;
pub mod dashboard;
pub mod delete;
pub mod diff;
pub mod error;
pub mod facts;
pub mod feed;
pub mod fork;
pub mod gate;
pub mod guard;
pub mod halt;
pub mod headers;
pub mod health;
pub mod inbox;
pub mod inspect;
pub mod lineage;
pub mod listing;
pub mod metrics;
pub mod ndjson;
pub mod openapi;
pub mod params;
pub mod program;
pub mod recover;
pub mod recoveries;
pub mod redact;
pub mod replay;
pub mod respond;
pub mod resume;
pub mod run;
pub mod sse;
pub mod start;
pub mod timeline;
pub mod wait;
pub mod workers;

use crate::service::bind::Bindings;
use crate::service::remote::{WorkerOptions, Workers};
use crate::service::store::StoreRef;
use crate::service::{LeaseOptions, RunService, ServiceOptions};
use auth::Tokens;
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use error::ApiError;
use flow_tools::manifest::Manifest;
use guard::typed;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::timeout::TimeoutLayer;
use utoipa_axum::router::{OpenApiRouter, UtoipaMethodRouterExt};
use utoipa_axum::routes;

/// The default `--archive-limit`: a server takes its own exports of large
/// runs (a 10,000-fact run packs to a few MiB; docs/http.md).
pub const DEFAULT_ARCHIVE_LIMIT: u64 = 256 << 20;

/// What the server is configured with.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Parsed `--tools` flow.toml files, first match wins: the only source
    /// of bindings for submitted flows.
    pub manifests: Vec<Manifest>,
    /// `--tokens`: `None` means no authentication (loopback or --insecure).
    pub tokens: Option<Tokens>,
    /// Largest request body accepted (bytes), archives excepted.
    pub body_limit: usize,
    /// Largest archive `POST /v1/archives` accepts (bytes); the body is
    /// streamed to a temporary file, not held in memory.
    pub archive_limit: u64,
    /// `--trusted-keys`: the keys whose signed archives `POST
    /// /v1/archives` accepts; with them, unsigned archives and other keys
    /// are refused (docs/custody.md).
    pub trusted_keys: Option<Arc<crate::signing::keys::TrustedKeys>>,
    /// `--allow-host`: names besides the listen address a `Host` may give.
    pub allow_hosts: Vec<String>,
    /// `--cors-origin`: browser origins that may call the server.
    pub cors_origins: Vec<String>,
    /// A request that has no response headers after this long gets 408.
    pub request_timeout: Duration,
    /// Continue runs left `running` at start.
    pub recover: bool,
    /// `--max-steps`: the step ceiling for submitted flows.
    pub max_steps: u64,
    /// Run leases, when several servers share the store (`--postgres`).
    pub lease: Option<LeaseOptions>,
    /// Remote workers: which declarations they serve (`--workers`), and
    /// how long silence makes one lost.
    pub workers: WorkerOptions,
    /// `/mcp` sessions: how many, and how long one may sit unused.
    pub mcp_sessions: crate::mcp::sessions::SessionLimits,
    /// The runtime runs are driven on (`flow serve` builds one of its own:
    /// [`crate::service::ServiceOptions::drives`]); `None` for the
    /// server's own.
    pub drives: Option<tokio::runtime::Handle>,
    /// `--otlp-endpoint`: where runs' spans go.
    pub otlp: Option<crate::service::otlp::Tracer>,
}

impl Default for ServeOptions {
    fn default() -> ServeOptions {
        ServeOptions {
            manifests: Vec::new(),
            tokens: None,
            body_limit: 4 << 20,
            archive_limit: DEFAULT_ARCHIVE_LIMIT,
            trusted_keys: None,
            allow_hosts: Vec::new(),
            cors_origins: Vec::new(),
            request_timeout: Duration::from_secs(60),
            recover: true,
            max_steps: crate::service::MAX_STEPS,
            lease: None,
            workers: WorkerOptions::default(),
            mcp_sessions: Default::default(),
            drives: None,
            otlp: None,
        }
    }
}

/// Shared state: a cheap `Clone` handle, wiring only — the run service
/// drives runs; the server adds its options, metrics and the feeds.
#[derive(Clone)]
pub struct AppState {
    inner: Arc<Inner>,
}

struct Inner {
    service: RunService,
    options: ServeOptions,
    metrics: metrics::Metrics,
    /// Run state changes across runs (`GET /v1/events`).
    feed: Arc<feed::Feed>,
}

impl AppState {
    pub fn new(store: StoreRef, options: ServeOptions, shutdown: CancellationToken) -> AppState {
        let workers = Workers::new(store.clone(), options.workers.clone(), shutdown.clone());
        let service = RunService::new(
            store,
            ServiceOptions {
                bindings: Bindings::served(options.manifests.clone(), workers),
                progress: None,
                max_steps: Some(options.max_steps),
                lease: options.lease.clone(),
                drives: options.drives.clone(),
                otlp: options.otlp.clone(),
            },
            shutdown,
        );
        AppState {
            inner: Arc::new(Inner {
                service,
                options,
                metrics: metrics::Metrics::default(),
                feed: Arc::default(),
            }),
        }
    }

    pub fn service(&self) -> &RunService {
        &self.inner.service
    }

    pub fn store(&self) -> &StoreRef {
        self.inner.service.store()
    }

    pub fn options(&self) -> &ServeOptions {
        &self.inner.options
    }

    pub fn shutdown(&self) -> &CancellationToken {
        self.inner.service.shutdown_token()
    }

    /// Refuses new work once shutdown began (503): runs started now would
    /// only be cut short.
    pub fn accepting(&self) -> Result<(), error::ApiError> {
        if !self.inner.service.accepting() {
            return Err(error::ApiError::unavailable("the server is shutting down"));
        }
        Ok(())
    }

    pub fn metrics(&self) -> &metrics::Metrics {
        &self.inner.metrics
    }

    pub fn feed(&self) -> &feed::Feed {
        &self.inner.feed
    }
}

/// Every route of the API, each declared once (issue 37 §5): `routes!`
/// reads a handler's method and path from its `#[utoipa::path]`, registers
/// the axum route and adds the operation, with the schemas its bodies
/// name, to the OpenAPI document ([`openapi::document`]). Handlers of one
/// path share a `routes!` (axum takes a path once). `typed` is the
/// guard's Content-Type rule, a layer of the route's own methods
/// ([`guard::typed`]). A new route is its handler and one line here.
/// Not here, as they are not API operations: the dashboard's page and
/// files, `/docs` and `/openapi.json`, and `/mcp` ([`app`] adds them).
///
/// Two groups, because [`app`] layers them differently.
struct Table {
    /// Under the JSON body limit.
    json: OpenApiRouter<AppState>,
    /// Bodies streamed to disk under their own limit (`--archive-limit`).
    uploads: OpenApiRouter<AppState>,
}

fn table() -> Table {
    let json = OpenApiRouter::default()
        .routes(routes!(health::get_health))
        .routes(routes!(metrics::get_metrics))
        .routes(routes!(check::check_flow).map(typed))
        .routes(routes!(gate::gate_runs).map(typed))
        .routes(routes!(recover::recover_runs).map(typed))
        .routes(routes!(recoveries::list_recoveries))
        .routes(routes!(recoveries::get_recovery))
        .routes(routes!(start::start_run, listing::list_runs).map(typed))
        .routes(routes!(run::get_run, delete::delete_run))
        .routes(routes!(facts::list_facts))
        .routes(routes!(inspect::inspect_run))
        .routes(routes!(timeline::get_timeline))
        .routes(routes!(chain::get_checkpoint))
        .routes(routes!(chain::verify_run))
        .routes(routes!(diff::diff_runs))
        .routes(routes!(lineage::get_lineage))
        .routes(routes!(sse::run_events))
        .routes(routes!(resume::resume_run).map(typed))
        .routes(routes!(replay::replay_run).map(typed))
        .routes(routes!(fork::fork_run).map(typed))
        .routes(routes!(halt::halt_run).map(typed))
        .routes(routes!(redact::redact_run).map(typed))
        .routes(routes!(blobs::get_source))
        .routes(routes!(archive::export_archive))
        .routes(routes!(blobs::get_blob))
        .routes(routes!(inbox::list_calls))
        .routes(routes!(feed::state_events))
        .routes(routes!(workers::register_worker, workers::list_workers).map(typed))
        .routes(routes!(workers::delete_worker).map(typed))
        .routes(routes!(workers::poll_worker).map(typed))
        .routes(routes!(workers::reply_worker).map(typed));
    let uploads = OpenApiRouter::default().routes(routes!(archive::import_archive).map(typed));
    Table { json, uploads }
}

/// The router with every layer: the browser guard ([`guard`]), body
/// limits (both axum's extractor limit and tower-http's; the archive
/// upload has its own), request timeouts, tracing, panic catching, auth,
/// security headers ([`headers`]).
/// `bound` is the listening address, which the guard checks `Host`
/// against.
pub fn app(state: AppState, bound: std::net::SocketAddr) -> std::io::Result<Router> {
    let options = state.options();
    let guard = guard::Guard::new(
        bound,
        options.tokens.is_none(),
        &options.allow_hosts,
        &options.cors_origins,
    )
    .map_err(std::io::Error::other)?;
    let limit = options.body_limit;
    let timeout = options.request_timeout;
    // The request timeout is for `/v1`: an MCP `run` answers when the run
    // ends or pauses, however long that takes (its client decides how long
    // to wait, and cancelling halts the run).
    let table = table();
    let doc = openapi::document_of(&table);
    let limited = Router::from(table.json)
        .merge(openapi::router(doc))
        .merge(dashboard::router())
        .layer(DefaultBodyLimit::max(limit))
        .layer(RequestBodyLimitLayer::new(limit));
    // The archive upload streams its body under its own limit.
    let timed = limited
        .merge(Router::from(table.uploads))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            timeout,
        ));
    let api = timed
        // rmcp limits the body itself (to the same body limit).
        .nest_service("/mcp", crate::mcp::http::service(&state))
        // Inside auth, which names the caller: a run of another namespace
        // is 404 before any handler (issue 40 item 4).
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            confine::runs,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::require,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            metrics::count,
        ))
        .with_state(state)
        .fallback(|| async { ApiError::not_found("no such endpoint; see /openapi.json") });
    // Router::layer wraps: the last one added is the outermost.
    Ok(api
        .layer(axum::middleware::map_response(problem_envelope))
        .layer(axum::middleware::from_fn_with_state(
            Arc::new(guard),
            guard::check,
        ))
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(
            |_: Box<dyn std::any::Any + Send>| {
                axum::response::IntoResponse::into_response(ApiError::internal(
                    "a handler panicked",
                ))
            },
        ))
        // Around everything that answers, refusals and panics included.
        .layer(axum::middleware::from_fn(headers::set))
        .layer(tower_http::trace::TraceLayer::new_for_http())
        .layer(
            tower_http::sensitive_headers::SetSensitiveRequestHeadersLayer::new([
                axum::http::header::AUTHORIZATION,
            ]),
        ))
}

/// tower-http's limit and timeout layers and axum's routing (405, and
/// the Swagger UI's 404s under `/docs/`) answer with plain text or nothing;
/// give those answers our envelope.
async fn problem_envelope(r: axum::response::Response) -> axum::response::Response {
    use axum::response::IntoResponse;
    let is_problem = r
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/problem+json"));
    if is_problem {
        return r;
    }
    match r.status() {
        StatusCode::PAYLOAD_TOO_LARGE => error::too_large().into_response(),
        StatusCode::REQUEST_TIMEOUT => ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "timeout",
            "the request took longer than the server's request timeout",
        )
        .into_response(),
        StatusCode::NOT_FOUND => {
            ApiError::not_found("no such endpoint or file; see /openapi.json").into_response()
        }
        // axum adds `Allow` around this (the method router sets it last).
        StatusCode::METHOD_NOT_ALLOWED => ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method-not-allowed",
            "this endpoint does not take the request's method; the Allow header lists those it takes",
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
        let n = state.service().recover().await;
        if n > 0 {
            tracing::info!(runs = n, "continued runs left running");
        }
    }
    // hitl deadlines: armed from the store, fired while serving.
    state.service().serve_deadlines();
    // With a shared store: this server's leases kept, dead servers' runs
    // taken over.
    state.service().serve_leases();
    // Paused runs resumed when a worker comes for their parked calls.
    state.service().serve_workers();
    // The state feed: the service's changes, and the runs index's for
    // other processes' writes.
    let forwarder = feed::forward(
        state.inner.feed.clone(),
        state.store().clone(),
        state.service().events(),
    )?;
    let poller = tokio::spawn(feed::poll(state.clone()));
    let addr = listener.local_addr()?;
    tracing::info!(listen = %addr, "flowd listening");
    let router = app(state.clone(), addr)?;
    let token = shutdown.clone();
    // TCP_NODELAY: a small SSE frame must not wait for the client's
    // delayed ACK (Nagle; issue 16: 10 ms p50 for one subscriber).
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::warn!(error = %e, "could not set TCP_NODELAY");
        }
    });
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
    state.service().shutdown(Duration::from_secs(10)).await;
    // The poller ends on the server's token, cancelled above; the
    // forwarder once it told the feed of every change made until now.
    state.service().close_events();
    let _ = poller.await;
    let _ = tokio::task::spawn_blocking(move || forwarder.join()).await;
    r
}
