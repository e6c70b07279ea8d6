//! The host side of a run's Tools: every declaration bound before Start,
//! built-ins served in the host, calls dispatched, cancels passed on.
//!
//! host-boundary.txt, "Binding": "Every Tool a run can reach is bound before
//! it starts ... A declaration with no binding, or a binding whose
//! fingerprint does not match, refuses the run before anything is recorded."

use crate::error::{Error, Result};
use crate::service::remote::Workers;
use flow_abi::fact::{CallId, RunId};
use flow_engine::program::Program;
use flow_tools::CallOutcome;
use flow_tools::dispatch::{BindOptions, Dispatcher, ToBind, bind};
use flow_tools::manifest::{Resolver, Source};
use flow_tools::outcome::{CallRequest, Declarations};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// `std/human#input` has no implementation: its calls stay open and the run
/// pauses until a client resumes it (DESIGN §4).
pub const HUMAN: &str = "std/human#input";
/// `std/clock#sleep` is served by the host: a recorded wait.
pub const SLEEP: &str = "std/clock#sleep";
/// `std/memory#read|write` are served by the host from the store's own
/// database when the host has one (DESIGN §4).
pub const MEMORY_READ: &str = "std/memory#read";
pub const MEMORY_WRITE: &str = "std/memory#write";

/// Where the host keeps key-value memory.
pub type MemoryBackend = Arc<dyn flow_store::Memory + Send + Sync>;

/// A call's outcome and, for a call a remote worker served, which worker
/// (its id: issue 38 §3 records it with the call's times).
pub struct Served {
    pub outcome: CallOutcome,
    pub worker: Option<String>,
}

impl Served {
    /// An outcome from this server: a Tool process, an MCP server, the
    /// host itself.
    pub fn here(outcome: CallOutcome) -> Served {
        Served {
            outcome,
            worker: None,
        }
    }
}

/// What a host binds with.
#[derive(Clone, Default)]
pub struct HostOptions {
    /// The program root on disk, for flow.toml; `None` for submitted source.
    pub program_dir: Option<PathBuf>,
    /// Host overrides by declaration identity (tests, `flow test` fakes,
    /// the server's configuration).
    pub resolver: Resolver,
    pub bind: BindOptions,
    /// Serves `std/memory#read|write` in the host; without it they must be
    /// bound like any Tool.
    pub memory: Option<MemoryBackend>,
    /// A server's worker queue: the declarations its `--workers` names are
    /// served by remote workers, overriding any other binding.
    pub workers: Option<Workers>,
}

/// The bound Tools of one run.
pub struct Host {
    /// One dispatcher per module of the program (each has its own types).
    dispatchers: BTreeMap<String, Dispatcher>,
    shutdown: CancellationToken,
    memory: Option<MemoryBackend>,
    /// `(module, memory store id)` of the thread-scoped stores: their keys
    /// live per run.
    thread_scoped: BTreeSet<(String, String)>,
    /// Per module, the declarations remote workers serve, and the queue.
    remote: BTreeMap<String, Arc<Declarations>>,
    workers: Option<Workers>,
}

impl Host {
    /// Binds every declaration the program can reach (nested runs use the
    /// outer run's bindings), or refuses with every unbound or unfitting
    /// one.
    pub async fn bind(program: &Program, options: &mut HostOptions) -> Result<Host> {
        let shutdown = CancellationToken::new();
        let source = match &options.program_dir {
            Some(dir) => Source::Local {
                program_dir: dir.clone(),
            },
            None => Source::Submitted,
        };
        let mut dispatchers = BTreeMap::new();
        let mut remote = BTreeMap::new();
        let mut refusals = Vec::new();
        for (path, m) in &program.modules {
            let (to_workers, local): (Vec<_>, Vec<_>) = m
                .decls
                .values()
                .filter(|d| {
                    d.identity != HUMAN
                        && d.identity != SLEEP
                        && !(options.memory.is_some()
                            && (d.identity == MEMORY_READ || d.identity == MEMORY_WRITE))
                        && !m
                            .subflows
                            .values()
                            .any(|s| d.identity == flow_engine::program::subflow_entry(s))
                })
                .partition(|d| {
                    options
                        .workers
                        .as_ref()
                        .is_some_and(|w| w.serves(&d.identity))
                });
            if !to_workers.is_empty() {
                let types = Arc::new(m.report.types.clone());
                remote.insert(
                    path.clone(),
                    Arc::new(Declarations::new(types, to_workers.into_iter().cloned())),
                );
            }
            let decls: Vec<ToBind> = local
                .into_iter()
                .map(|d| ToBind {
                    decl: d.clone(),
                    source: source.clone(),
                })
                .collect();
            match bind(
                &decls,
                Arc::new(m.report.types.clone()),
                &mut options.resolver,
                &options.bind,
                shutdown.child_token(),
            )
            .await
            {
                Ok(d) => {
                    dispatchers.insert(path.clone(), d);
                }
                Err(errs) => refusals.extend(errs.into_iter().map(|e| e.to_string())),
            }
        }
        if !refusals.is_empty() {
            for d in dispatchers.values() {
                d.shutdown().await;
            }
            return Err(Error::Bind(refusals));
        }
        let thread_scoped = program
            .modules
            .iter()
            .flat_map(|(path, m)| {
                m.report
                    .flow
                    .memory_stores
                    .iter()
                    .filter(|(_, s)| s.scope.as_deref() == Some("thread"))
                    .map(move |(id, _)| (path.clone(), id.clone()))
            })
            .collect();
        Ok(Host {
            dispatchers,
            shutdown,
            memory: options.memory.clone(),
            thread_scoped,
            remote,
            workers: options.workers.clone(),
        })
    }

    /// Bind before start for the declarations remote workers serve: a
    /// live worker serves each with its fingerprint (checked at every
    /// start and resume: workers come and go, the bound host is pooled).
    pub async fn check_workers(&self) -> Result<()> {
        let Some(w) = &self.workers else {
            return Ok(());
        };
        let needed: BTreeSet<(String, String)> = self
            .remote
            .values()
            .flat_map(|d| d.decls.iter().map(|(id, (_, fp))| (id.clone(), fp.clone())))
            .collect();
        w.check(&needed).await
    }

    /// Whether remote workers serve `tool` as `module` calls it.
    pub fn is_remote(&self, module: &str, tool: &str) -> bool {
        self.remote
            .get(module)
            .is_some_and(|d| d.get(tool).is_some())
    }

    /// The worker queue, when remote workers serve some of the program.
    pub fn workers(&self) -> Option<&Workers> {
        self.workers.as_ref().filter(|_| !self.remote.is_empty())
    }

    /// The program closed `call` of `run`: if remote workers serve some of
    /// `module`, it is cancelled at the queue (a no-op for a call that is
    /// not there); a local call is cancelled by dropping its future.
    pub fn closed(&self, module: &str, run: &RunId, call: &CallId) {
        if let Some(w) = &self.workers
            && self.remote.contains_key(module)
        {
            w.cancel(run, call);
        }
    }

    /// What serves `tool`'s calls, for a timing record (issue 38 §3):
    /// `worker`, `clock`, `memory`, `process`, `mcp`, or `host` when
    /// nothing is bound (the call is answered NotRun here).
    pub fn route(&self, module: &str, tool: &str) -> &'static str {
        if self.workers.is_some()
            && self
                .remote
                .get(module)
                .is_some_and(|d| d.get(tool).is_some())
        {
            return "worker";
        }
        if tool == SLEEP {
            return "clock";
        }
        if self.memory.is_some() && (tool == MEMORY_READ || tool == MEMORY_WRITE) {
            return "memory";
        }
        self.dispatchers
            .get(module)
            .and_then(|d| d.kind(tool))
            .unwrap_or("host")
    }

    /// The end of the stderr of the process serving `tool` when it ended
    /// before answering `(run, call)`, once (issue 38 §4).
    pub fn take_stderr(&self, module: &str, tool: &str, run: &str, call: &str) -> Option<String> {
        self.dispatchers.get(module)?.take_stderr(tool, run, call)
    }

    /// Sends a call to whatever serves it and waits for its outcome;
    /// `None` when the call is parked for a remote worker that is absent
    /// (it stays open: DESIGN §4).
    pub async fn dispatch(&self, module: &str, req: CallRequest) -> Option<Served> {
        if let (Some(w), Some(d)) = (&self.workers, self.remote.get(module))
            && let Some((_, fp)) = d.get(&req.tool)
        {
            let fp = fp.clone();
            return w.call(req, &fp, d).await;
        }
        Some(Served::here(self.call(module, req).await))
    }

    /// Sends a call and waits for its admitted outcome. `std/clock#sleep`
    /// is served here.
    async fn call(&self, module: &str, req: CallRequest) -> CallOutcome {
        if req.tool == SLEEP {
            let ms = req
                .args
                .get("ms")
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(ms.min(3_600_000))).await;
            return CallOutcome::Ok(flow_abi::Value::Unit);
        }
        if let Some(mem) = &self.memory
            && (req.tool == MEMORY_READ || req.tool == MEMORY_WRITE)
        {
            return self.memory_call(mem.clone(), module, req).await;
        }
        let Some(d) = self.dispatchers.get(module) else {
            return CallOutcome::NotRun(format!("{} is not bound", req.tool));
        };
        match d.call(req).await {
            Ok(o) => o,
            Err(_) => CallOutcome::Unknown("the host is shutting down".into()),
        }
    }

    /// Serves a memory call from the store's database (off the runtime:
    /// SQLite is synchronous).
    async fn memory_call(&self, mem: MemoryBackend, module: &str, req: CallRequest) -> CallOutcome {
        let Some(store_id) = req.args.get("store").and_then(serde_json::Value::as_str) else {
            return CallOutcome::NotRun("a memory call names its store".into());
        };
        let ns = if self
            .thread_scoped
            .contains(&(module.to_string(), store_id.to_string()))
        {
            format!("{}/{store_id}", req.run)
        } else {
            store_id.to_string()
        };
        let key = req
            .args
            .get("key")
            .cloned()
            .unwrap_or(serde_json::Value::Null);
        let write = req.tool == MEMORY_WRITE;
        let value = req
            .args
            .get("value")
            .cloned()
            .unwrap_or(serde_json::Value::Null);
        let merge = req.args.get("mode").and_then(serde_json::Value::as_str) != Some("overwrite");
        let done = tokio::task::spawn_blocking(move || {
            if write {
                mem.memory_write(&ns, &key, &value, merge).map(|()| None)
            } else {
                mem.memory_read(&ns, &key)
                    .map(|v| Some(v.unwrap_or(serde_json::Value::Null)))
            }
        })
        .await;
        match done {
            Ok(Ok(None)) => CallOutcome::Ok(flow_abi::Value::Unit),
            Ok(Ok(Some(v))) => CallOutcome::Ok(flow_abi::Value::Json(v)),
            // Whether a write landed is not known once it was attempted.
            Ok(Err(e)) if write => CallOutcome::Unknown(format!("memory write: {e}")),
            Ok(Err(e)) => CallOutcome::NotRun(format!("memory read: {e}")),
            Err(e) => CallOutcome::Unknown(format!("memory call stopped: {e}")),
        }
    }

    /// Whether a call to `tool` open at a crash is sent again (its binding
    /// says `resend = true`).
    pub fn resends(&self, module: &str, tool: &str) -> bool {
        self.dispatchers
            .get(module)
            .is_some_and(|d| d.resends(tool))
    }

    /// Stops every implementation.
    pub async fn shutdown(&self) {
        self.shutdown.cancel();
        for d in self.dispatchers.values() {
            d.shutdown().await;
        }
    }
}
