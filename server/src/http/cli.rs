//! `flow serve`: parses the server's flags, binds and calls [`super::run`]
//! (STYLE rule 1: the binary only parses config, binds and runs).

use super::auth::{Tokens, is_loopback};
use super::{AppState, ServeOptions};
use crate::error::{Error, Result};
use crate::service::LeaseOptions;
use crate::service::otlp::Tracer;
use crate::service::remote::WorkerOptions;
use crate::service::retention::{Retention, sweeper};
use crate::service::store::StoreRef;
use clap::Args;
use flow_tools::manifest::Manifest;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

#[derive(Args, Debug, Clone)]
pub struct ServeArgs {
    /// Address to listen on; port 0 picks a free port (printed at start).
    /// A non-loopback address needs --tokens (or --insecure).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    /// Bearer tokens: one `token scope[,scope]` per line (read, run, admin,
    /// worker); `token worker KEY[,KEY]` confines a worker token to those
    /// declarations (docs/deploy.md "Tokens").
    #[arg(long)]
    pub tokens: Option<PathBuf>,
    /// flow.toml files whose bindings serve submitted flows' Tools
    /// (repeatable; the first that binds a declaration wins).
    #[arg(long = "tools")]
    pub tools: Vec<PathBuf>,
    /// Listen on a non-loopback address without tokens.
    #[arg(long)]
    pub insecure: bool,
    /// Largest request body, in bytes (archive uploads excepted).
    #[arg(long, default_value_t = 4 << 20)]
    pub body_limit: usize,
    /// Largest archive `POST /v1/archives` takes, in bytes.
    #[arg(long, default_value_t = super::DEFAULT_ARCHIVE_LIMIT)]
    pub archive_limit: u64,
    /// Accept only archives signed by a key this file lists (one
    /// `ed25519:<base64> NAME` a line, as `flow keys new-signing`
    /// prints): unsigned archives and other keys are refused.
    #[arg(long, value_name = "FILE")]
    pub trusted_keys: Option<PathBuf>,
    /// A host name (or address) clients may reach the server by besides
    /// its listen address, e.g. a reverse proxy's (repeatable). Without
    /// --tokens any other `Host` is refused (DNS rebinding).
    #[arg(long = "allow-host", value_name = "NAME")]
    pub allow_hosts: Vec<String>,
    /// A browser origin (scheme://host[:port]) whose pages may call the
    /// server, answered with CORS headers (repeatable). Other cross-origin
    /// requests are refused.
    #[arg(long = "cors-origin", value_name = "ORIGIN")]
    pub cors_origins: Vec<String>,
    /// Seconds before a request without a response gets 408.
    #[arg(long, default_value_t = 60)]
    pub request_timeout: u64,
    /// Do not continue runs left running at start.
    #[arg(long)]
    pub no_recover: bool,
    /// The most node executions a submitted flow may ask for
    /// (`harness_meta.max_steps`); more is refused (422).
    #[arg(long, default_value_t = crate::service::MAX_STEPS)]
    pub max_steps: u64,
    /// Keep runs in PostgreSQL at this URL (postgres://user@host:port/db)
    /// instead of the SQLite file under --data. Any number of servers on
    /// one database and schema act as one service (docs/deploy.md).
    #[arg(long, value_name = "URL")]
    pub postgres: Option<String>,
    /// The Postgres schema that holds the store's tables (created if
    /// needed).
    #[arg(
        long,
        value_name = "NAME",
        default_value = "public",
        requires = "postgres"
    )]
    pub postgres_schema: String,
    /// How long a server's lease on a run it drives lasts unless renewed
    /// (renewed every third of it); a run whose server died is taken over
    /// within about this long. With --postgres.
    #[arg(long, value_name = "SECONDS", requires = "postgres", value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub lease_seconds: Option<u64>,
    /// How the other servers name this one when it drives a run (the
    /// `holder` of a 409): a URL they can reach it at. Default: the URL it
    /// listens on. With --postgres.
    #[arg(long, value_name = "NAME", requires = "postgres")]
    pub node: Option<String>,
    /// Declarations served by remote workers (`flow worker`) instead of
    /// --tools, keyed as flow.toml keys them: a module (`triage.json`), one
    /// Tool (`triage.json#classify`) or a built-in module (`std/llm`).
    /// Comma-separated or repeated. A run that can reach one is refused
    /// (422) unless a live worker serves it with its fingerprint.
    #[arg(long = "workers", value_name = "KEY", value_delimiter = ',')]
    pub workers: Vec<String>,
    /// With --workers: accept a run whose worker-served Tools have no live
    /// worker, and park each such call (the run pauses) until a worker
    /// arrives, instead of refusing it.
    #[arg(long)]
    pub worker_wait: bool,
    /// A worker not heard from within this many seconds is lost: its calls
    /// are settled Unknown, or sent again with `resend = true` in its
    /// flow.toml. Polls are held half as long.
    #[arg(long, value_name = "SECONDS", default_value_t = crate::service::remote::TIMEOUT_SECONDS, value_parser = clap::value_parser!(u64).range(1..=600))]
    pub worker_timeout: u64,
    /// On SIGTERM (or Ctrl-C), how long the calls out may take to finish:
    /// the server takes no new drive, records the Replies of the calls out
    /// and sends nothing new, then lets go of each run (another server
    /// continues it at once). Calls still out when it ends are settled as
    /// after a crash. A second signal stops at once.
    #[arg(long, value_name = "SECONDS", default_value_t = DRAIN_SECONDS, value_parser = clap::value_parser!(u64).range(0..=3600))]
    pub drain_seconds: u64,
    /// The most MCP sessions (`/mcp`) open at once; past it an
    /// `initialize` is refused 503.
    #[arg(long, value_name = "N", default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub mcp_sessions: u64,
    /// The most MCP sessions one token may hold open (a tokenless server
    /// is one token); past it an `initialize` is refused 429.
    #[arg(long, value_name = "N", default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub mcp_sessions_per_token: u64,
    /// An MCP session with no request in flight for this many seconds is
    /// closed.
    #[arg(long, value_name = "SECONDS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub mcp_idle_seconds: u64,
    /// Delete runs that have been in a state longer than this, with a
    /// background sweeper (docs/custody.md): `completed=30d,faulted=90d`;
    /// per flow (the root FlowSpec's id) `flow:ID:completed=7d`, which
    /// replaces the general rule for that state. States completed, faulted,
    /// halted; ages in s, m, h or d. Comma-separated or repeated.
    #[arg(long, value_name = "RULES")]
    pub retain: Vec<String>,
    /// Send each run's trace (a span per call, one for the run at its
    /// end) to an OpenTelemetry collector over OTLP/HTTP (protobuf), e.g.
    /// http://127.0.0.1:4318 (docs/deploy.md "Traces").
    #[arg(long, value_name = "URL", env = "FLOW_OTLP_ENDPOINT", value_parser = crate::service::otlp::endpoint)]
    pub otlp_endpoint: Option<String>,
}

/// The drain grace unless --drain-seconds says otherwise.
pub const DRAIN_SECONDS: u64 = 30;

/// The lease time unless --lease-seconds says otherwise.
pub const LEASE_SECONDS: u64 = 10;

/// Builds the options from the flags: reads the tokens and manifests, and
/// refuses a non-loopback listen address without tokens.
pub fn options(args: &ServeArgs) -> Result<ServeOptions> {
    let tokens = match &args.tokens {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .map_err(|e| Error::Refused(format!("--tokens {}: {e}", p.display())))?;
            Some(
                Tokens::parse(&text)
                    .map_err(|e| Error::Refused(format!("--tokens {}: {e}", p.display())))?,
            )
        }
        None => None,
    };
    if tokens.is_none() && !is_loopback(&args.listen) && !args.insecure {
        return Err(Error::Refused(format!(
            "refusing to listen on {} without --tokens; pass --tokens FILE, or --insecure to serve it unauthenticated",
            args.listen
        )));
    }
    // Checked here, with the flags' names, so a bad value stops the start.
    super::guard::Guard::new(
        args.listen,
        tokens.is_none(),
        &args.allow_hosts,
        &args.cors_origins,
    )
    .map_err(Error::Refused)?;
    let mut manifests = Vec::new();
    for p in &args.tools {
        manifests.push(Manifest::read(p).map_err(|e| Error::Refused(e.to_string()))?);
    }
    for k in &args.workers {
        if !crate::service::remote::key_ok(k) {
            return Err(Error::Refused(format!(
                "--workers {k:?}: expected a module (triage.json), one Tool (triage.json#classify) or a built-in module (std/llm)"
            )));
        }
    }
    let trusted_keys = match &args.trusted_keys {
        Some(p) => Some(std::sync::Arc::new(
            crate::signing::keys::TrustedKeys::read(p)
                .map_err(|e| Error::Refused(format!("--trusted-keys: {e}")))?
                .named("the server's --trusted-keys"),
        )),
        None => None,
    };
    Ok(ServeOptions {
        manifests,
        tokens,
        trusted_keys,
        body_limit: args.body_limit.max(1024),
        archive_limit: args.archive_limit.max(1024),
        allow_hosts: args.allow_hosts.clone(),
        cors_origins: args.cors_origins.clone(),
        request_timeout: Duration::from_secs(args.request_timeout.max(super::wait::MAX_WAIT + 5)),
        recover: !args.no_recover,
        max_steps: args.max_steps,
        lease: args.postgres.as_ref().map(|_| LeaseOptions {
            node: args.node.clone().unwrap_or_default(),
            ttl: Duration::from_secs(args.lease_seconds.unwrap_or(LEASE_SECONDS)),
        }),
        workers: WorkerOptions {
            keys: args.workers.clone(),
            wait: args.worker_wait,
            timeout: Duration::from_secs(args.worker_timeout),
        },
        mcp_sessions: crate::mcp::sessions::SessionLimits {
            global: args.mcp_sessions as usize,
            per_token: args.mcp_sessions_per_token as usize,
            idle: Duration::from_secs(args.mcp_idle_seconds),
        },
        drives: None,
        otlp: None,
    })
}

/// The runtime `flow serve` drives runs on, beside the one serving HTTP:
/// a step (a Tool's answer read, the commit, the next call written) is
/// then scheduled by the kernel beside the SSE fan-out and the request
/// handlers instead of queued behind them on shared workers (issue 16:
/// 100 subscribers slowed a run by 40-70 % on shared workers). Dropped
/// without blocking, as the server's own runtime is still running then.
struct Drives(Option<tokio::runtime::Runtime>);

impl Drop for Drives {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

/// Runs the server until Ctrl-C or SIGTERM.
pub async fn serve(store: StoreRef, args: ServeArgs) -> Result<u8> {
    let mut opts = options(&args)?;
    let retention = Retention::parse(&args.retain)?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| Error::Refused(format!("cannot listen on {}: {e}", args.listen)))?;
    let addr = listener
        .local_addr()
        .map_err(|e| Error::Refused(format!("cannot listen on {}: {e}", args.listen)))?;
    if let Some(l) = opts.lease.as_mut().filter(|l| l.node.is_empty()) {
        l.node = format!("http://{addr}");
    }
    // The first line stays as it is: tests and .ci/run read the address
    // from it. One write, and its failure ignored: a reader that closes
    // the pipe after that line must not stop the server (println! would
    // panic on the broken pipe).
    {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        let _ = write!(
            out,
            "flowd listening on http://{addr}\n  dashboard: http://{addr}/\n  API docs:  http://{addr}/docs/ (OpenAPI: http://{addr}/openapi.json)\n"
        );
        let _ = out.flush();
    }
    let shutdown = CancellationToken::new();
    let drives = Drives(Some(crate::cli::runtime("flow-drive").map_err(|e| {
        Error::Refused(format!("cannot start the drives' runtime: {e}"))
    })?));
    opts.drives = drives.0.as_ref().map(|rt| rt.handle().clone());
    opts.otlp = args
        .otlp_endpoint
        .as_deref()
        .map(|url| Tracer::start(url, store.clone()))
        .transpose()?;
    let tracer = opts.otlp.clone();
    let state = AppState::new(store, opts, shutdown.clone());
    if !retention.is_empty() {
        tokio::spawn(sweeper(state.store().clone(), retention, shutdown.clone()));
    }
    // A signal drains (the server goes on answering meanwhile: reads, SSE,
    // workers' replies, `/healthz` saying `draining`), then stops; a second
    // signal stops at once.
    let (token, service) = (shutdown.clone(), state.service().clone());
    let grace = Duration::from_secs(args.drain_seconds);
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!(grace_s = grace.as_secs(), "draining");
        tokio::select! {
            _ = service.drain(grace) => tracing::info!("drained; shutting down"),
            _ = wait_for_signal() => tracing::info!("a second signal; shutting down now"),
        }
        token.cancel();
    });
    super::run(listener, shutdown, state)
        .await
        .map_err(|e| Error::Refused(format!("the server stopped: {e}")))?;
    // Every drive has ended or been aborted (`run` waits for them).
    drop(drives);
    // The spans still queued go out, if the collector takes them soon.
    if let Some(t) = tracer {
        t.flush(Duration::from_secs(5)).await;
    }
    Ok(0)
}

/// Resolves at Ctrl-C or SIGTERM.
pub(crate) async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}
