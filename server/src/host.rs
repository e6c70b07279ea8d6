//! The host side of a run's Tools: every declaration bound before Start,
//! built-ins served in the host, calls dispatched, cancels passed on.
//!
//! host-boundary.txt, "Binding": "Every Tool a run can reach is bound before
//! it starts ... A declaration with no binding, or a binding whose
//! fingerprint does not match, refuses the run before anything is recorded."

use crate::error::{Error, Result};
use flow_engine::program::Program;
use flow_tools::CallOutcome;
use flow_tools::dispatch::{BindOptions, Dispatcher, ToBind, bind};
use flow_tools::manifest::{Resolver, Source};
use flow_tools::outcome::CallRequest;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// `std/human#input` has no implementation: its calls stay open and the run
/// pauses until a client resumes it (DESIGN §4).
pub const HUMAN: &str = "std/human#input";
/// `std/clock#sleep` is served by the host: a recorded wait.
pub const SLEEP: &str = "std/clock#sleep";

/// What a host binds with.
#[derive(Debug, Clone, Default)]
pub struct HostOptions {
    /// The program root on disk, for flow.toml; `None` for submitted source.
    pub program_dir: Option<PathBuf>,
    /// Host overrides by declaration identity (tests, `flow test` fakes,
    /// the server's configuration).
    pub resolver: Resolver,
    pub bind: BindOptions,
}

/// The bound Tools of one run.
pub struct Host {
    /// One dispatcher per module of the program (each has its own types).
    dispatchers: BTreeMap<String, Dispatcher>,
    shutdown: CancellationToken,
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
        let mut refusals = Vec::new();
        for (path, m) in &program.modules {
            let decls: Vec<ToBind> = m
                .decls
                .values()
                .filter(|d| {
                    d.identity != HUMAN
                        && d.identity != SLEEP
                        && !m
                            .subflows
                            .values()
                            .any(|s| d.identity == flow_engine::program::subflow_entry(s))
                })
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
        Ok(Host {
            dispatchers,
            shutdown,
        })
    }

    /// Sends a call and waits for its admitted outcome. `std/clock#sleep`
    /// is served here.
    pub async fn call(&self, module: &str, req: CallRequest) -> CallOutcome {
        if req.tool == SLEEP {
            let ms = req
                .args
                .get("ms")
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(ms.min(3_600_000))).await;
            return CallOutcome::Ok(flow_abi::Value::Unit);
        }
        let Some(d) = self.dispatchers.get(module) else {
            return CallOutcome::NotRun(format!("{} is not bound", req.tool));
        };
        match d.call(req).await {
            Ok(o) => o,
            Err(_) => CallOutcome::Unknown("the host is shutting down".into()),
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
