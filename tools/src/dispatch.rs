//! The workers: binding every declaration a run can reach before it starts,
//! and routing calls to the implementations with a per-binding concurrency
//! limit, an optional per-call timeout and a graceful shutdown.
//!
//! host-boundary.txt, "Binding": "Every Tool a run can reach is bound before
//! it starts ... A declaration with no binding, or a binding whose
//! fingerprint does not match, refuses the run before anything is recorded
//! ... Nothing is bound lazily at a first call." So [`bind`] starts every
//! implementation and checks every fingerprint, and reports every refusal at
//! once.
//!
//! One interface, no topology: "The same messages and the same rules hold
//! whether an implementation is a function registered in process, a child
//! process ... or an adapter in front of something else." Every
//! implementation is an [`Implementation`]: a process
//! ([`crate::ProcessHandle`]), the MCP adapter, or a host's own code.
//!
//! Timeouts and shutdown:
//! * A call with no reply within the binding's timeout is cancelled and
//!   answered Unknown: it may or may not have happened.
//! * [`Dispatcher::shutdown`] cancels every outstanding call, waits a grace
//!   period for the replies that cancel may still bring, and ends the rest
//!   with [`Interrupted`]: no outcome is invented for them. The host leaves
//!   such a call open, and settles it as it settles calls open at a crash
//!   (DESIGN §5: `Unknown("host restarted")`, or sent again with
//!   `resend = true`). Then every implementation is stopped.

use crate::manifest::{Binding, ConfigError, Launch, Origin, Resolver, Source};
use crate::outcome::{CallOutcome, CallRequest, Declarations};
use crate::process::{ProcessError, ProcessHandle, ProcessOptions};
use flow_abi::TypeSet;
use flow_abi::signature::ToolDecl;
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// A boxed future, for object-safe implementations.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Anything that answers calls: "one Rust Tool trait serves built-ins,
/// processes and MCP" (REQUIREMENTS PRO-1).
pub trait Implementation: Send + Sync + 'static {
    /// Sends one call and resolves to its admitted outcome. Dropping the
    /// future abandons the call (and cancels it where that means anything).
    fn call(&self, req: CallRequest) -> BoxFuture<'static, CallOutcome>;
    /// Asks the implementation to stop work on an open call; proves nothing.
    fn cancel(&self, run: &str, call: &str);
    /// Stops the implementation (its process, if any).
    fn shutdown(&self) -> BoxFuture<'static, ()>;
    /// What serves the calls, for timings: `process`, `mcp`, ….
    fn kind(&self) -> &'static str {
        "process"
    }
    /// The end of the implementation's stderr when it ended before
    /// answering `(run, call)`, once.
    fn take_stderr(&self, _run: &str, _call: &str) -> Option<String> {
        None
    }
}

impl Implementation for ProcessHandle {
    fn call(&self, req: CallRequest) -> BoxFuture<'static, CallOutcome> {
        let h = self.clone();
        Box::pin(async move { h.call(req).await })
    }
    fn cancel(&self, run: &str, call: &str) {
        ProcessHandle::cancel(self, run, call);
    }
    fn shutdown(&self) -> BoxFuture<'static, ()> {
        let h = self.clone();
        Box::pin(async move { h.shutdown().await })
    }
    fn kind(&self) -> &'static str {
        ProcessHandle::kind(self)
    }
    fn take_stderr(&self, run: &str, call: &str) -> Option<String> {
        ProcessHandle::take_stderr(self, run, call)
    }
}

/// A call the host's shutdown interrupted before any reply: it stays open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the call was interrupted by the host's shutdown before any reply")]
pub struct Interrupted;

/// Limits of one binding.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Calls in flight at once through this binding; more wait their turn.
    pub concurrency: usize,
    /// A call with no reply by then is cancelled and answered Unknown.
    pub timeout: Option<Duration>,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            concurrency: 64,
            timeout: None,
        }
    }
}

struct Route {
    imp: Arc<dyn Implementation>,
    resend: bool,
    permits: Arc<Semaphore>,
    timeout: Option<Duration>,
}

struct Inner {
    routes: BTreeMap<String, Route>,
    /// Every implementation once, for shutdown.
    implementations: Vec<Arc<dyn Implementation>>,
    shutdown: CancellationToken,
    in_flight: TaskTracker,
    grace: Duration,
}

/// Routes calls by declaration identity. Cheap to clone.
#[derive(Clone)]
pub struct Dispatcher {
    inner: Arc<Inner>,
}

/// Assembles a [`Dispatcher`].
pub struct DispatcherBuilder {
    routes: BTreeMap<String, Route>,
    implementations: Vec<Arc<dyn Implementation>>,
    grace: Duration,
}

impl DispatcherBuilder {
    /// Routes `identities` to `imp`, sharing one concurrency limit: a
    /// binding's limit holds across every declaration it answers.
    pub fn route(
        mut self,
        identities: impl IntoIterator<Item = String>,
        imp: Arc<dyn Implementation>,
        limits: &Limits,
    ) -> DispatcherBuilder {
        let permits = Arc::new(Semaphore::new(limits.concurrency.max(1)));
        for id in identities {
            self.routes.insert(
                id,
                Route {
                    imp: imp.clone(),
                    resend: false,
                    permits: permits.clone(),
                    timeout: limits.timeout,
                },
            );
        }
        self.implementations.push(imp);
        self
    }

    /// Marks `identities` as bound with `resend = true` (DESIGN §5): a call
    /// open at a host crash is sent again instead of settled Unknown.
    pub fn resend(mut self, identities: impl IntoIterator<Item = String>) -> DispatcherBuilder {
        for id in identities {
            if let Some(r) = self.routes.get_mut(&id) {
                r.resend = true;
            }
        }
        self
    }

    /// How long shutdown waits for replies to the cancels it sends.
    pub fn grace(mut self, grace: Duration) -> DispatcherBuilder {
        self.grace = grace;
        self
    }

    pub fn build(self) -> Dispatcher {
        Dispatcher {
            inner: Arc::new(Inner {
                routes: self.routes,
                implementations: self.implementations,
                shutdown: CancellationToken::new(),
                in_flight: TaskTracker::new(),
                grace: self.grace,
            }),
        }
    }
}

impl Dispatcher {
    pub fn builder() -> DispatcherBuilder {
        DispatcherBuilder {
            routes: BTreeMap::new(),
            implementations: Vec::new(),
            grace: Duration::from_secs(2),
        }
    }

    /// Whether calls of `identity` open at a crash are to be sent again
    /// (the binding's `resend = true`).
    pub fn resends(&self, identity: &str) -> bool {
        self.inner.routes.get(identity).is_some_and(|r| r.resend)
    }

    /// What serves `identity` (`process`, `mcp`), when it is bound.
    pub fn kind(&self, identity: &str) -> Option<&'static str> {
        self.inner.routes.get(identity).map(|r| r.imp.kind())
    }

    /// The end of the stderr of the process serving `identity` when it
    /// ended before answering `(run, call)`, once.
    pub fn take_stderr(&self, identity: &str, run: &str, call: &str) -> Option<String> {
        self.inner.routes.get(identity)?.imp.take_stderr(run, call)
    }

    /// Whether `identity` is bound.
    pub fn is_bound(&self, identity: &str) -> bool {
        self.inner.routes.contains_key(identity)
    }

    /// Sends one call through its binding and waits for its outcome.
    pub async fn call(&self, req: CallRequest) -> Result<CallOutcome, Interrupted> {
        let inner = &self.inner;
        let Some(route) = inner.routes.get(&req.tool) else {
            return Ok(CallOutcome::NotRun(format!("{} is not bound", req.tool)));
        };
        if inner.shutdown.is_cancelled() {
            return Err(Interrupted);
        }
        let _token = inner.in_flight.token();
        // Wait for a turn, unless the host shuts down meanwhile.
        let _permit = tokio::select! {
            p = route.permits.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => return Err(Interrupted),
            },
            _ = inner.shutdown.cancelled() => return Err(Interrupted),
        };
        let (run, call) = (req.run.clone(), req.call.clone());
        let mut fut = route.imp.call(req);
        let timeout = async {
            match route.timeout {
                Some(t) => tokio::time::sleep(t).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            out = &mut fut => Ok(out),
            _ = timeout => {
                // Dropping the future abandons the call; say why first.
                route.imp.cancel(run.as_str(), call.as_str());
                drop(fut);
                let ms = route.timeout.map_or(0, |t| t.as_millis());
                tracing::warn!(run.id = %run, call.id = %call, "no reply within {ms} ms: Unknown");
                Ok(CallOutcome::Unknown(format!("no reply within {ms} ms; the call was cancelled")))
            }
            _ = inner.shutdown.cancelled() => {
                route.imp.cancel(run.as_str(), call.as_str());
                match tokio::time::timeout(inner.grace, &mut fut).await {
                    Ok(out) => Ok(out),
                    Err(_) => Err(Interrupted),
                }
            }
        }
    }

    /// Cancels outstanding calls, waits for them to end (at most the grace
    /// period), then stops every implementation.
    pub async fn shutdown(&self) {
        let inner = &self.inner;
        inner.shutdown.cancel();
        inner.in_flight.close();
        let _ = tokio::time::timeout(inner.grace * 2, inner.in_flight.wait()).await;
        for imp in &inner.implementations {
            imp.shutdown().await;
        }
    }
}

/// One declaration to bind.
#[derive(Debug, Clone)]
pub struct ToBind {
    pub decl: ToolDecl,
    pub source: Source,
}

/// Why a run is refused at binding. Every refusal is reported, not only the
/// first.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BindRefusal {
    #[error("{0} is unbound: no host binding and no flow.toml table names it")]
    Unbound(String),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Process(#[from] ProcessError),
}

/// Options of [`bind`].
#[derive(Debug, Clone, Default)]
pub struct BindOptions {
    pub process: ProcessOptions,
    pub limits: Limits,
}

/// Binds every declaration: resolves its binding (host override, then the
/// nearest flow.toml), starts each distinct implementation once, and checks
/// every fingerprint. `shutdown` stops every started implementation.
pub async fn bind(
    decls: &[ToBind],
    types: Arc<TypeSet>,
    resolver: &mut Resolver,
    options: &BindOptions,
    shutdown: CancellationToken,
) -> Result<Dispatcher, Vec<BindRefusal>> {
    let mut refusals = Vec::new();
    // Group by what is started, so one process answers all its tables.
    let mut groups: BTreeMap<(Launch, std::path::PathBuf), (Binding, Vec<ToolDecl>)> =
        BTreeMap::new();
    for d in decls {
        match resolver.resolve(&d.decl.identity, &d.source) {
            Ok(Some((binding, origin))) => {
                if let Origin::Manifest { path, table } = &origin {
                    tracing::debug!(tool.id = %d.decl.identity, manifest = %path.display(), table = %table, "bound by flow.toml");
                }
                groups
                    .entry(binding.process_key())
                    .or_insert_with(|| (binding.clone(), Vec::new()))
                    .1
                    .push(d.decl.clone());
            }
            Ok(None) => refusals.push(BindRefusal::Unbound(d.decl.identity.clone())),
            Err(e) => refusals.push(BindRefusal::Config(e)),
        }
    }
    let mut builder = Dispatcher::builder();
    let mut started: Vec<Arc<dyn Implementation>> = Vec::new();
    for (_, (binding, group)) in groups {
        let ids: Vec<String> = group.iter().map(|d| d.identity.clone()).collect();
        let declarations = Declarations::new(types.clone(), group);
        // A command and an MCP server share the process service; the
        // launch kind picks the dialect.
        let imp = ProcessHandle::start(
            &binding,
            declarations,
            options.process.clone(),
            shutdown.child_token(),
        )
        .await
        .map(|h| Arc::new(h) as Arc<dyn Implementation>)
        .map_err(BindRefusal::from);
        match imp {
            Ok(imp) => {
                started.push(imp.clone());
                builder = builder.route(ids.clone(), imp, &options.limits);
                if binding.resend {
                    builder = builder.resend(ids);
                }
            }
            Err(e) => refusals.push(e),
        }
    }
    if refusals.is_empty() {
        Ok(builder.build())
    } else {
        for imp in started {
            imp.shutdown().await;
        }
        Err(refusals)
    }
}
