//! The MCP tools' one contact with the run machinery: the driver, the CLI's
//! binding and approval rules, the HTTP server's run table and the store's
//! bounded views. Every tool is one call of a function here, so pointing
//! MCP at another run service changes this file only.
//!
//! Two hosts serve the same tools ("with the same meaning" as the CLI,
//! running-a-program.txt "The CLI and MCP surface"):
//! - `flow mcp` ([`Mode::Local`]) binds as `flow run` does — flow.toml
//!   beside a program read from disk, its commands started only with
//!   `--allow`, never after asking — plus the `--tools` manifests, and
//!   drives a run in the request's own task, as `flow run` does in its
//!   process;
//! - `/mcp` on `flow serve` ([`Mode::Server`]) binds and drives as the
//!   server drives every run: `--tools` only, in its task set, claimed, so
//!   `/v1` sees it, 409s a second resume and can halt it.
//!
//! A cancelled run or resume halts its run as an interrupt does (How a run
//! ends): the drive is dropped, a `halt` host record is written, no End.

use super::args::{HistoryArgs, ProgramArgs, ResumeArgs, RunsArgs};
use crate::driver::{Driver, RunResult};
use crate::error::Error;
use crate::host::{Host, HostOptions};
use crate::http::AppState;
use crate::http::error::ApiError;
use crate::source::Sources;
use flow_engine::program::Program;
use flow_engine::replay::Verdict;
use flow_store::{
    Discover, DiscoveryQuery, FactRef, HistoryQuery, HostRecord, HostRecordKind, HostRecords,
    ReadHistory, RunId,
};
use flow_tools::manifest::Manifest;
use serde_json::{Value as Json, json};
use std::collections::BTreeSet;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// How the server binds and drives runs.
pub enum Mode {
    /// `flow mcp`.
    Local {
        /// `--allow`: start the commands a program's flow.toml names.
        allow: bool,
        /// `--tools`: flow.toml files that bind declarations for any
        /// program (as `flow serve --tools` does).
        manifests: Vec<Manifest>,
    },
    /// `/mcp` on `flow serve`.
    Server(AppState),
}

/// A refused request: nothing was recorded (or, for `run`/`resume`, the
/// drive ended in an error). `kind` is a stable slug.
#[derive(Debug, Clone)]
pub struct Refusal {
    pub kind: &'static str,
    pub message: String,
    pub diagnostics: Vec<Json>,
}

impl Refusal {
    pub fn new(kind: &'static str, message: impl Into<String>) -> Refusal {
        Refusal {
            kind,
            message: message.into(),
            diagnostics: Vec::new(),
        }
    }

    fn refused(message: impl Into<String>) -> Refusal {
        Refusal::new("refused", message)
    }

    pub fn to_json(&self) -> Json {
        let mut v = json!({"error": self.kind, "message": self.message});
        if !self.diagnostics.is_empty() {
            v["diagnostics"] = Json::Array(self.diagnostics.clone());
        }
        v
    }
}

impl From<ApiError> for Refusal {
    fn from(e: ApiError) -> Refusal {
        Refusal {
            kind: e.kind,
            message: e.detail,
            diagnostics: e.diagnostics.unwrap_or_default(),
        }
    }
}

pub type Answer<T> = Result<T, Refusal>;

/// Start as storage accepted it: what the accepted-Start progress
/// notification reports.
#[derive(Debug, Clone)]
pub struct Accepted {
    pub run: RunId,
    pub fact: FactRef,
}

type Drive = Pin<Box<dyn Future<Output = crate::error::Result<RunResult>> + Send + 'static>>;

/// The MCP server's run service: cheap to share (`Arc`).
pub struct Service {
    driver: Driver,
    mode: Mode,
    /// Runs `flow mcp` drives now: a second resume of one is refused.
    driving: Mutex<BTreeSet<String>>,
    /// Every drive `flow mcp` has going, so that it exits only once each
    /// cancelled one has recorded its halt.
    drives: TaskTracker,
}

impl Service {
    /// `flow mcp` on `store`.
    pub fn local(
        store: Arc<flow_store::SqliteStore>,
        allow: bool,
        manifests: Vec<Manifest>,
    ) -> Service {
        Service::new(Driver::new(store), Mode::Local { allow, manifests })
    }

    /// `/mcp` on the server whose state is `state`.
    pub fn server(state: AppState) -> Service {
        Service::new(state.driver().clone(), Mode::Server(state))
    }

    fn new(driver: Driver, mode: Mode) -> Service {
        Service {
            driver,
            mode,
            driving: Mutex::new(BTreeSet::new()),
            drives: TaskTracker::new(),
        }
    }

    /// Waits (at most `deadline`) for every drive to end, after the
    /// transport closed and cancelled them.
    pub async fn drain(&self, deadline: std::time::Duration) {
        self.drives.close();
        if tokio::time::timeout(deadline, self.drives.wait())
            .await
            .is_err()
        {
            tracing::warn!("mcp: drives still going at exit");
        }
    }

    /// `check`: every diagnostic, as `flow check --json` and `POST
    /// /v1/check` give them.
    pub async fn check(&self, p: ProgramArgs) -> Answer<Json> {
        let sources = self.sources(p).await?;
        let (all, errors) = blocking(move || Ok(sources.diagnostics()))
            .await
            .map_err(|e| self.refusal(e))?;
        Ok(json!({"diagnostics": all, "errors": errors, "ok": errors == 0}))
    }

    /// `run`: binds every Tool (refusing what the configuration has not
    /// approved), records Start, tells `accepted` (and waits for it) before
    /// any further driving, then drives until the run ends or pauses.
    /// `None`: `cancel` fired and the run was halted.
    pub async fn start<F, Fut>(
        &self,
        p: ProgramArgs,
        input: &Json,
        cancel: CancellationToken,
        accepted: F,
    ) -> Answer<Option<Json>>
    where
        F: FnOnce(Accepted) -> Fut + Send,
        Fut: Future<Output = ()> + Send,
    {
        let _drive = self.drives.token();
        self.accepting()?;
        let sources = self.sources(p).await?;
        let program = {
            let s = sources.clone();
            blocking(move || s.program())
                .await
                .map_err(|e| self.refusal(e))?
        };
        let host = self.bind(&program, sources.dir.clone()).await?;
        let input = flow_abi::json::canonical(input);
        let driver = self.driver.clone();
        let created =
            tokio::task::spawn_blocking(move || driver.create_run(&sources, program, &input)).await;
        let started = match created {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                host.shutdown().await;
                return Err(self.refusal(e));
            }
            Err(e) => {
                host.shutdown().await;
                return Err(Refusal::new("internal", format!("recording Start: {e}")));
            }
        };
        let run = started.run.clone();
        let mut claimed = self.claim(&run);
        if let Mode::Server(state) = &self.mode {
            state.metrics().runs_started.inc();
            state.publish(run.as_str(), "running", json!({"started": true}));
        }
        accepted(Accepted {
            run: run.clone(),
            fact: started.start.clone(),
        })
        .await;
        if let Some(c) = claimed.as_mut() {
            c.hand_over();
        }
        let r = self
            .drive(run, host, cancel, move |driver, host| {
                Box::pin(async move { driver.drive_started(started, &host).await })
            })
            .await;
        drop(claimed);
        r
    }

    /// `resume`: admits `reply` for the open `call` and drives on, or with
    /// neither continues a halted or crashed run, settling its open calls.
    /// `None`: `cancel` fired and the run was halted.
    pub async fn resume(&self, a: ResumeArgs, cancel: CancellationToken) -> Answer<Option<Json>> {
        let _drive = self.drives.token();
        self.accepting()?;
        let run = run_id(&a.run)?;
        let reply = match (a.call, a.reply) {
            (Some(c), Some(r)) => Some((c, flow_abi::json::canonical(&r))),
            (None, None) => None,
            _ => {
                return Err(Refusal::refused(
                    "give both call and reply (admit a reply), or neither (continue a halted or crashed run)",
                ));
            }
        };
        let info = {
            let (s, r) = (self.driver.store.clone(), run.clone());
            blocking(move || Ok(s.run_info(&r)?))
                .await
                .map_err(|e| self.refusal(e))?
        };
        if info.ending.is_some() {
            return Err(Refusal::new(
                "conflict",
                match &reply {
                    Some((c, _)) => format!("{run} has ended; call {c} is not open"),
                    None => format!("{run} has ended; nothing to continue"),
                },
            ));
        }
        let Some(mut claimed) = self.claim(&run) else {
            return Err(Refusal::new(
                "conflict",
                format!("{run} is being driven now; resume a call once the run pauses"),
            ));
        };
        let prepared = {
            let (d, r) = (self.driver.clone(), run.clone());
            blocking(move || Ok((d.program_of(&r)?, d.program_dir(&r)?)))
                .await
                .map_err(|e| self.refusal(e))?
        };
        let ((_, program, facts), dir) = prepared;
        let host = self.bind(&program, dir).await?;
        if let Mode::Server(state) = &self.mode {
            state.metrics().resumes.inc();
            state.publish(run.as_str(), "running", json!({"resumed": true}));
        }
        let r = run.clone();
        claimed.hand_over();
        let out = self
            .drive(run, host, cancel, move |driver, host| {
                Box::pin(async move { driver.resume(&r, program, facts, reply, &host).await })
            })
            .await;
        drop(claimed);
        out
    }

    /// `replay`: the verdict, as `flow replay --json` gives it.
    pub async fn replay(&self, run: &str) -> Answer<Json> {
        let run = run_id(run)?;
        let d = self.driver.clone();
        let verdict = blocking(move || d.replay(&run).map(|v| (run, v)))
            .await
            .map_err(|e| self.refusal(e))?;
        let (run, verdict) = verdict;
        Ok(match verdict {
            Verdict::Diverged { fact, reason } => {
                json!({"run": run.as_str(), "verdict": "diverged", "fact": fact, "reason": reason})
            }
            v => json!({"run": run.as_str(), "verdict": v.to_string()}),
        })
    }

    /// `history`: the store's bounded page (kind filter, then offset and
    /// limit; text and value bounds) and, when asked, one page of a
    /// recorded source. Reads only the verified record: nothing is
    /// evaluated or bound.
    pub async fn history(&self, a: HistoryArgs) -> Answer<Json> {
        let run = run_id(&a.run)?;
        if a.source.is_none() && a.source_offset.is_some() {
            return Err(Refusal::refused(
                "source_offset pages a recorded source: give source too",
            ));
        }
        let q = HistoryQuery {
            kind: a.kind,
            search: None,
            offset: a.offset,
            limit: limit(a.limit)?,
        };
        let source = a.source.map(|m| (m, a.source_offset.unwrap_or(0)));
        let store = self.driver.store.clone();
        blocking(move || {
            store.run_info(&run)?;
            let page = store.history_page(&run, &q)?;
            let mut v = serde_json::to_value(&page)
                .map_err(|e| Error::Refused(format!("the page cannot be shown: {e}")))?;
            let src = match source {
                Some((module, offset)) => {
                    serde_json::to_value(store.source_page(&run, &module, offset)?)
                        .map_err(|e| Error::Refused(format!("the source cannot be shown: {e}")))?
                }
                None => Json::Null,
            };
            v["source"] = src;
            Ok(v)
        })
        .await
        .map_err(|e| self.refusal(e))
    }

    /// `runs`: discovery over the configured store (`{runs, nextAfter,
    /// problems}`); invalid arguments are refused before inspection.
    pub async fn runs(&self, a: RunsArgs) -> Answer<Json> {
        let q = DiscoveryQuery {
            limit: limit(a.limit)?,
            after: a.after,
            state: None,
        };
        q.check().map_err(|e| self.refusal(Error::from(e)))?;
        let store = self.driver.store.clone();
        blocking(move || {
            let page = store.discover(&q)?;
            serde_json::to_value(&page)
                .map_err(|e| Error::Refused(format!("the page cannot be shown: {e}")))
        })
        .await
        .map_err(|e| self.refusal(e))
    }

    /// The program's sources: a file `flow mcp` reads, or a submitted
    /// document (with its modules) as `POST /v1/runs` takes it.
    async fn sources(&self, p: ProgramArgs) -> Answer<Sources> {
        match (p.path, p.flow) {
            (Some(_), Some(_)) => Err(Refusal::refused(
                "give the program as path or as flow, not both",
            )),
            (None, None) => Err(Refusal::refused(
                "give the program: path (a FlowSpec file) or flow (the document)",
            )),
            (Some(path), None) => {
                if matches!(self.mode, Mode::Server(_)) {
                    return Err(Refusal::refused(
                        "the server reads no files: give the program as flow (the document)",
                    ));
                }
                if p.modules.is_some() || p.name.is_some() {
                    return Err(Refusal::refused(
                        "modules and name go with flow; a path's modules are the FlowSpec files beside it",
                    ));
                }
                blocking(move || Sources::read(Path::new(&path)))
                    .await
                    .map_err(|e| self.refusal(e))
            }
            (None, Some(flow)) => Ok(crate::http::routes::sources(&flow, &p.modules, &p.name)?),
        }
    }

    /// Binds every Tool the program can reach from the configuration, or
    /// refuses. `flow mcp` never asks: a command flow.toml names starts
    /// only under `--allow`, unless `--tools` binds that declaration.
    async fn bind(&self, program: &Program, dir: Option<PathBuf>) -> Answer<Host> {
        match &self.mode {
            Mode::Server(state) => Ok(state.bind(program).await?),
            Mode::Local { allow, manifests } => {
                let (resolver, bound) = crate::host::manifest_overrides(manifests, program);
                if dir.is_some() && !allow {
                    let unapproved: Vec<String> = crate::cli::commands_needed(program)
                        .into_iter()
                        .filter(|id| !bound.contains(id))
                        .collect();
                    if !unapproved.is_empty() {
                        return Err(Refusal::new(
                            "unapproved",
                            format!(
                                "the run is refused, nothing was recorded: it would start the Tool commands flow.toml names for {}, and flow mcp never asks; start flow mcp with --allow to approve them, or bind them with --tools",
                                unapproved.join(", ")
                            ),
                        ));
                    }
                }
                let mut opts = HostOptions {
                    program_dir: dir,
                    resolver,
                    memory: Some(self.driver.store.clone()),
                    ..HostOptions::default()
                };
                Host::bind(program, &mut opts)
                    .await
                    .map_err(|e| self.refusal(e))
            }
        }
    }

    /// Drives a recorded run until it ends or pauses, or until `cancel`
    /// fires: then the drive is dropped and the run halted.
    async fn drive(
        &self,
        run: RunId,
        host: Host,
        cancel: CancellationToken,
        make: impl FnOnce(Driver, Arc<Host>) -> Drive + Send + 'static,
    ) -> Answer<Option<Json>> {
        match &self.mode {
            Mode::Local { .. } => {
                let host = Arc::new(host);
                let work = make(self.driver.clone(), host.clone());
                let r = tokio::select! {
                    biased;
                    r = work => Some(r),
                    _ = cancel.cancelled() => None,
                };
                host.shutdown().await;
                match r {
                    Some(r) => r.map(|r| Some(r.to_json())).map_err(|e| self.refusal(e)),
                    None => {
                        self.halt(&run).await;
                        Ok(None)
                    }
                }
            }
            Mode::Server(state) => {
                let driver = self.driver.clone();
                let mut rx = state.drive_in_task(run.clone(), host, move |h| make(driver, h));
                let outcome = tokio::select! {
                    biased;
                    o = rx.wait_for(Option::is_some) => Some(o.ok().and_then(|o| o.clone())),
                    _ = cancel.cancelled() => None,
                };
                let Some(outcome) = outcome else {
                    // A server shutting down leaves its runs `running`, to
                    // be continued when it starts again.
                    if !state.shutdown().is_cancelled() {
                        if !state.stop_drive(&run).await {
                            tracing::warn!(run.id = %run, "mcp: the cancelled drive did not stop in time");
                        }
                        self.halt(&run).await;
                        state.publish(run.as_str(), "halted", json!({}));
                    }
                    return Ok(None);
                };
                match outcome {
                    Some(Ok(v)) => Ok(Some(v)),
                    Some(Err(e)) => Err(e.into()),
                    None => Err(Refusal::new("unavailable", "the server is shutting down")),
                }
            }
        }
    }

    /// Records that the host halted `run` (no End: it resumes like a
    /// crashed run), unless it ended meanwhile.
    async fn halt(&self, run: &RunId) {
        let (store, r) = (self.driver.store.clone(), run.clone());
        let done = tokio::task::spawn_blocking(move || {
            if store.run_info(&r)?.ending.is_some() {
                return Ok(());
            }
            store
                .record_host(
                    &r,
                    HostRecord {
                        kind: HostRecordKind::Halt,
                        at_ms: None,
                        details: json!({"by": "mcp", "reason": "cancelled"}),
                    },
                )
                .map(|_| ())
        })
        .await;
        match done {
            Ok(Ok(())) => tracing::info!(run.id = %run, "mcp: run halted on cancellation"),
            Ok(Err(e)) => tracing::error!(run.id = %run, error = %e, "mcp: halt not recorded"),
            Err(e) => tracing::error!(run.id = %run, error = %e, "mcp: halt not recorded"),
        }
    }

    /// Marks `run` as driven; `None` when it is driven already. The claim
    /// ends when the returned guard drops, unless it was handed to the
    /// server's drive task, which ends it itself.
    fn claim(&self, run: &RunId) -> Option<Claim<'_>> {
        let claimed = match &self.mode {
            Mode::Server(state) => state.claim(run),
            Mode::Local { .. } => self
                .driving
                .lock()
                .is_ok_and(|mut d| d.insert(run.to_string())),
        };
        claimed.then(|| Claim {
            service: self,
            run: run.to_string(),
            armed: true,
        })
    }

    fn accepting(&self) -> Answer<()> {
        match &self.mode {
            Mode::Server(state) => Ok(state.accepting()?),
            Mode::Local { .. } => Ok(()),
        }
    }

    /// A driver error as the tools report it. The server keeps a storage
    /// failure's or unreadable history's cause in its log, as `/v1` does;
    /// `flow mcp` says it, as `flow` does.
    fn refusal(&self, e: Error) -> Refusal {
        if let Mode::Server(_) = self.mode {
            return ApiError::from(e).into();
        }
        let ds = |v: Vec<String>| -> Vec<Json> {
            v.into_iter()
                .map(|m| json!({"severity": "error", "message": m}))
                .collect()
        };
        match e {
            Error::Refused(m) => Refusal::refused(m),
            Error::Check(v) => Refusal {
                kind: "check",
                message: "the program does not check; see diagnostics".into(),
                diagnostics: ds(v),
            },
            Error::Bind(v) => Refusal {
                kind: "unbound",
                message: "the run is refused, nothing was recorded: declarations it can reach have no binding; see diagnostics".into(),
                diagnostics: ds(v),
            },
            Error::NotFound(m) => Refusal::new("not-found", m),
            Error::Conflict(m) => Refusal::new("conflict", m),
            e @ Error::Unreadable(_) => Refusal::new("unreadable", e.to_string()),
            e @ Error::Store(_) => Refusal::new("storage", e.to_string()),
        }
    }
}

/// A claimed run, released on drop (see [`Service::claim`]).
struct Claim<'a> {
    service: &'a Service,
    run: String,
    armed: bool,
}

impl Claim<'_> {
    /// About to drive: the server's drive task releases its claim when it
    /// ends (a later release here could end someone else's claim).
    fn hand_over(&mut self) {
        if let Mode::Server(_) = self.service.mode {
            self.armed = false;
        }
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        match &self.service.mode {
            Mode::Server(state) => state.release(&self.run),
            Mode::Local { .. } => {
                if let Ok(mut s) = self.service.driving.lock() {
                    s.remove(&self.run);
                }
            }
        }
    }
}

/// A limit argument: the store checks its range (1 to 200); one that is
/// not even a count is refused here with the same words.
fn limit(v: Option<i64>) -> Answer<Option<u32>> {
    match v {
        None => Ok(None),
        Some(n) => u32::try_from(n)
            .map(Some)
            .map_err(|_| Refusal::refused(format!("limit must be from 1 to 200, not {n}"))),
    }
}

fn run_id(s: &str) -> Answer<RunId> {
    RunId::parse(s).map_err(|e| Refusal::new("not-found", format!("no run {s:?}: {e}")))
}

/// Runs blocking work (SQLite, file reads, checking) off the runtime.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> crate::error::Result<T> + Send + 'static,
) -> crate::error::Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::Refused(format!("the work stopped: {e}")))?
}
