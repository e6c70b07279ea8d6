//! The MCP tools' one contact with the run machinery: the run service
//! ([`RunService`], the same one the CLI and `/v1` ask) for run, resume,
//! replay and halts, and the store's bounded views and
//! [`Sources::diagnostics`] for check, history and runs. Nothing here
//! binds, claims or drives a run.
//!
//! Two hosts serve the same tools ("with the same meaning" as the CLI,
//! running-a-program.txt "The CLI and MCP surface"):
//! - `flow mcp` ([`Service::local`]) has its own run service, bound as
//!   [`Bindings::unattended`] says: flow.toml beside a program read from
//!   disk, its commands started only with `--allow`, never after asking,
//!   plus the `--tools` manifests;
//! - `/mcp` on `flow serve` ([`Service::server`]) asks the server's run
//!   service, so its runs are the server's like any other: `/v1` sees them
//!   driven, 409s a second resume and can halt them.
//!
//! A cancelled run or resume halts its run as an interrupt does (How a run
//! ends): the run service stops the drive and records a `halt` host
//! record, no End.

use super::args::{HistoryArgs, ProgramArgs, ResumeArgs, RunsArgs};
use crate::error::Error;
use crate::http::AppState;
use crate::http::error::ApiError;
use crate::service::bind::Bindings;
use crate::service::store::{StoreRef, blocking};
use crate::service::{Accepted, RunService, ServiceOptions};
use crate::source::Sources;
use flow_store::{
    DiscoveryQuery, FactRef, HistoryQuery, Namespace, Namespaces, RunId, RunListQuery, TimeRange,
};
use flow_tools::manifest::Manifest;
use serde_json::{Value as Json, json};
use std::future::Future;
use std::path::Path;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

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

/// The MCP server's contact with the run service: cheap to share (`Arc`).
pub struct Service {
    runs: RunService,
    /// `/mcp`: the server whose run service `runs` is. Its metrics count
    /// MCP runs as `/v1` runs; its errors are reported as `/v1` reports
    /// them (a storage failure's cause stays in its log).
    server: Option<AppState>,
    /// The run and resume requests going on, so that `flow mcp` exits only
    /// once each cancelled one has recorded its halt.
    requests: TaskTracker,
}

impl Service {
    /// `flow mcp` on `store`: `allow` is `--allow`, `manifests` `--tools`.
    pub fn local(store: StoreRef, allow: bool, manifests: Vec<Manifest>) -> Service {
        let runs = RunService::new(
            store,
            ServiceOptions {
                max_steps: Some(crate::service::MAX_STEPS),
                ..ServiceOptions::local(Bindings::unattended(allow, manifests))
            },
            CancellationToken::new(),
        );
        Service::new(runs, None)
    }

    /// `/mcp` on the server whose state is `state`.
    pub fn server(state: AppState) -> Service {
        Service::new(state.service().clone(), Some(state))
    }

    fn new(runs: RunService, server: Option<AppState>) -> Service {
        Service {
            runs,
            server,
            requests: TaskTracker::new(),
        }
    }

    /// `flow mcp`'s exit, after the transport closed and cancelled its
    /// requests: waits (at most `deadline`) for their halts to be
    /// recorded, then stops the run service (its drives and Tools).
    pub async fn drain(&self, deadline: Duration) {
        self.requests.close();
        if tokio::time::timeout(deadline, self.requests.wait())
            .await
            .is_err()
        {
            tracing::warn!("mcp: requests still going at exit");
        }
        self.runs.shutdown(deadline).await;
    }

    /// `check`: every diagnostic, as `flow check --json` and `POST
    /// /v1/check` give them.
    pub async fn check(&self, p: ProgramArgs) -> Answer<Json> {
        let sources = self.sources(p).await?;
        let (all, errors) = self
            .runs
            .checks()
            .run(sources.size(), move || {
                Ok::<_, Error>(sources.diagnostics())
            })
            .await
            .map_err(|e| self.refusal(e))?;
        Ok(json!({"diagnostics": all, "errors": errors, "ok": errors == 0}))
    }

    /// `run`: the run service's start (every refusal first, nothing
    /// recorded); once Start is durable, tells `accepted` its run and fact
    /// (and waits for it), then waits until the run ends or pauses.
    /// `None`: `cancel` fired and the run was halted.
    pub async fn start<F, Fut>(
        &self,
        namespace: &Namespace,
        p: ProgramArgs,
        input: &Json,
        cancel: CancellationToken,
        accepted: F,
    ) -> Answer<Option<Json>>
    where
        F: FnOnce(RunId, FactRef) -> Fut + Send,
        Fut: Future<Output = ()> + Send,
    {
        let _request = self.requests.token();
        let sources = self.sources(p).await?;
        let input = flow_abi::json::canonical(input);
        let (started, gate) = self
            .runs
            .start_gated(namespace, sources, &input)
            .await
            .map_err(|e| self.refusal(e))?;
        if let Some(state) = &self.server {
            state.metrics().runs_started.inc();
        }
        // The Accepted-Start notification goes out before further driving.
        accepted(started.run.clone(), started.head.clone()).await;
        gate.open();
        self.finish(started, cancel).await
    }

    /// `resume`: the run service's resume — admits `reply` for the open
    /// `call`, or with neither continues a halted or crashed run, settling
    /// its open calls — then waits until the run ends or pauses. `None`:
    /// `cancel` fired and the run was halted.
    /// `by`: who answers (the token's name or tag), for the timing record.
    pub async fn resume(
        &self,
        a: ResumeArgs,
        by: Option<String>,
        cancel: CancellationToken,
    ) -> Answer<Option<Json>> {
        let _request = self.requests.token();
        let run = run_id(&a.run)?;
        let reply = match (a.call, a.reply) {
            (Some(c), Some(r)) => Some(crate::service::Reply {
                call: c,
                outcome: r,
            }),
            (None, None) => None,
            _ => {
                return Err(Refusal::refused(
                    "give both call and reply (admit a reply), or neither (continue a halted or crashed run)",
                ));
            }
        };
        let resumed = match reply {
            Some(reply) => self.runs.resume_by(&run, reply, by).await,
            None => self.runs.resume(&run, None).await,
        }
        .map_err(|e| self.refusal(e))?;
        if let Some(state) = &self.server {
            state.metrics().resumes.inc();
        }
        self.finish(resumed, cancel).await
    }

    /// Refuses `run` as unknown, as the store refuses a run it does not
    /// hold, when it is not a run of `seen`'s namespaces (issue 40 item
    /// 4): a confined token's `resume`, `replay` and `history` cannot tell
    /// another namespace's run from none. An id that does not parse is
    /// left to the tool.
    pub async fn confine(&self, seen: &Namespaces, run: &str) -> Answer<()> {
        let Ok(run) = RunId::parse(run) else {
            return Ok(());
        };
        if *seen == Namespaces::All {
            return Ok(());
        }
        let seen = seen.clone();
        blocking(self.runs.store(), move |store| match store.run_info(&run) {
            Ok(info) if seen.contains(&info.namespace) => Ok(()),
            Ok(_) => Err(flow_store::Error::UnknownRun(run.to_string()).into()),
            Err(e) => Err(e.into()),
        })
        .await
        .map_err(|e| self.refusal(e))
    }

    /// `replay`: the verdict, as `flow replay --json` gives it (a recorded
    /// program that no longer checks is an unreadable history, as there).
    pub async fn replay(&self, run: &str) -> Answer<Json> {
        let run = run_id(run)?;
        let verdict = match self.runs.replay(&run).await {
            Ok(v) => v,
            Err(e @ (Error::Unreadable(_) | Error::Check(_))) => {
                return Err(self.refusal(Error::Unreadable(e.to_string())));
            }
            Err(e) => return Err(self.refusal(e)),
        };
        let (name, fact, reason) = verdict.parts();
        let mut v = json!({"run": run.as_str(), "verdict": name});
        if let (Some(fact), Some(reason)) = (fact, reason) {
            v["fact"] = json!(fact);
            v["reason"] = json!(reason);
        }
        Ok(v)
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
        blocking(self.runs.store(), move |store| {
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
    /// A confined caller's (`seen` not every namespace) is always the run
    /// query, which filters by namespace.
    pub async fn runs(&self, a: RunsArgs, seen: Namespaces) -> Answer<Json> {
        if a.filtered() || seen != Namespaces::All {
            return self.run_query(a, seen).await;
        }
        let q = DiscoveryQuery {
            limit: limit(a.limit)?,
            after: a.after,
            state: None,
        };
        q.check().map_err(|e| self.refusal(Error::from(e)))?;
        blocking(self.runs.store(), move |store| {
            let page = store.discover(&q)?;
            serde_json::to_value(&page)
                .map_err(|e| Error::Refused(format!("the page cannot be shown: {e}")))
        })
        .await
        .map_err(|e| self.refusal(e))
    }

    /// `runs` with the run query's filters: the store's indexed query, in
    /// id order, answered with discovery's shape and row fields (`{runs,
    /// nextAfter, problems}`, DISC-7, DISC-11).
    async fn run_query(&self, a: RunsArgs, seen: Namespaces) -> Answer<Json> {
        let states = match a.state.as_deref() {
            None => Vec::new(),
            Some(s) => crate::http::listing::parse_states(s).map_err(Refusal::refused)?,
        };
        let (entry_module, entry_function) = a
            .entry
            .as_deref()
            .map(crate::http::listing::parse_entry)
            .unwrap_or_default();
        let q = RunListQuery {
            limit: limit(a.limit)?,
            cursor: a.after,
            states,
            flow: a.flow,
            entry_module,
            entry_function,
            started: TimeRange {
                from: a.started_from,
                to: a.started_to,
            },
            updated: TimeRange {
                from: a.updated_from,
                to: a.updated_to,
            },
            fork_of: a.fork_of,
            nested_in: a.nested_in,
            fault: a.fault,
            attrs: a.attrs.map(|m| m.into_iter().collect()).unwrap_or_default(),
            waiting_node: a.waiting_node,
            waiting_tool: a.waiting_tool,
            namespaces: seen,
            ..RunListQuery::default()
        };
        q.check().map_err(|e| self.refusal(Error::from(e)))?;
        blocking(self.runs.store(), move |store| {
            let page = store.list_runs(&q)?;
            let rows: Vec<_> = page.runs.into_iter().map(|r| r.row).collect();
            Ok(json!({"runs": rows, "nextAfter": page.next, "problems": []}))
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
                if self.server.is_some() {
                    return Err(Refusal::refused(
                        "the server reads no files: give the program as flow (the document)",
                    ));
                }
                if p.modules.is_some() || p.name.is_some() {
                    return Err(Refusal::refused(
                        "modules and name go with flow; a path's modules are the FlowSpec files beside it",
                    ));
                }
                off_runtime(move || Sources::read(Path::new(&path)))
                    .await
                    .map_err(|e| self.refusal(e))
            }
            (None, Some(flow)) => Ok(crate::http::program::sources(&flow, &p.modules, &p.name)?),
        }
    }

    /// Waits until an accepted run ends or pauses, or until `cancel`
    /// fires: then the run service halts it (the request is answered by
    /// nothing). A server shutting down cancels every MCP request too; its
    /// runs are left `running`, to be continued when it starts again.
    async fn finish(&self, accepted: Accepted, cancel: CancellationToken) -> Answer<Option<Json>> {
        let run = accepted.run.clone();
        let r = tokio::select! {
            biased;
            r = accepted.finished() => r,
            _ = cancel.cancelled() => {
                if self.runs.accepting() {
                    self.halt(&run).await;
                }
                return Ok(None);
            }
        };
        r.map(|r| Some(r.to_json())).map_err(|e| self.refusal(e))
    }

    /// Halts `run` for a cancelled request; a run that ended meanwhile is
    /// left as it ended.
    async fn halt(&self, run: &RunId) {
        match self
            .runs
            .halt(
                run,
                true,
                flow_store::Halt {
                    reason: Some("cancelled".into()),
                    ..flow_store::Halt::by("mcp")
                },
            )
            .await
        {
            Ok(_) => tracing::info!(run.id = %run, "mcp: run halted on cancellation"),
            Err(e @ Error::Conflict(_)) => {
                tracing::info!(run.id = %run, error = %e, "mcp: not halted")
            }
            Err(e) => tracing::error!(run.id = %run, error = %e, "mcp: halt not recorded"),
        }
    }

    /// A run service error as the tools report it. The server keeps a
    /// storage failure's or unreadable history's cause in its log, as `/v1`
    /// does; `flow mcp` says it, as `flow` does.
    fn refusal(&self, e: Error) -> Refusal {
        if self.server.is_some() {
            return ApiError::from(e).into();
        }
        let diagnostics = e.diagnostics().unwrap_or_default();
        match e {
            Error::Refused(m) => Refusal::refused(m),
            Error::Check(_) => Refusal {
                kind: "check",
                message: "the program does not check; see diagnostics".into(),
                diagnostics,
            },
            Error::Bind(_) => Refusal {
                kind: "unbound",
                message: "the run is refused, nothing was recorded: declarations it can reach have no binding; see diagnostics".into(),
                diagnostics,
            },
            Error::NotFound(m) => Refusal::new("not-found", m),
            Error::Conflict(m) => Refusal::new("conflict", m),
            e @ Error::Leased { .. } => Refusal::new("conflict", e.to_string()),
            Error::Halted(run) => Refusal::new(
                "conflict",
                format!("{run} was halted before it ended or paused"),
            ),
            Error::Unavailable(m) => Refusal::new("unavailable", m),
            Error::Busy(m) => Refusal::new("busy", m),
            e @ Error::Unreadable(_) => Refusal::new("unreadable", e.to_string()),
            e @ Error::Store(_) => Refusal::new("storage", e.to_string()),
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

/// Runs blocking work that is not the store's (file reads, checking) off
/// the runtime.
async fn off_runtime<T: Send + 'static>(
    f: impl FnOnce() -> crate::error::Result<T> + Send + 'static,
) -> crate::error::Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::Refused(format!("the work stopped: {e}")))?
}
