//! The six tools (running-a-program.txt, "The CLI and MCP surface"):
//! check, run, resume, replay, history and runs, each one call of the
//! [`Service`]. Results are structured content (and the same JSON as
//! text); a refusal is a tool error (`isError`) whose structured content
//! says `{error, message, diagnostics?}`, so an agent can read and correct
//! it. rmcp answers each request in its own task, so a long run holds up no
//! other request (REQUIREMENTS MCPS-2).

use super::args::{CheckArgs, HistoryArgs, ReplayArgs, ResumeArgs, RunArgs, RunsArgs};
use super::service::{Answer, Refusal, Service};
use crate::http::auth::Scope;
use flow_store::{FactRef, RunId};
use flow_store::{Namespace, Namespaces};
use rmcp::handler::server::{router::tool::ToolRouter, wrapper::Parameters};
use rmcp::model::{
    CallToolResult, ErrorCode, ErrorData, MetaObject, NotificationMetaObject,
    ProgressNotificationParam,
};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServerHandler, tool, tool_handler, tool_router};
use serde_json::{Map, Value as Json};
use std::sync::Arc;
use std::time::Duration;

/// The `_meta` keys of the accepted-Start progress notification
/// (running-a-program.txt, "Accepted-Start transport view").
pub const META_REQUEST: &str = "ng.flowla/request";
pub const META_RUN: &str = "ng.flowla/run";
pub const META_FACT: &str = "ng.flowla/fact";
pub const META_HASH: &str = "ng.flowla/hash";

/// How long the accepted-Start notification may take to hand to the
/// transport: an observational failure never holds up the run (MCPS-10).
const NOTIFY_DEADLINE: Duration = Duration::from_secs(5);

/// The MCP server: the tools over one run service.
#[derive(Clone)]
pub struct FlowMcp {
    service: Arc<Service>,
    tool_router: ToolRouter<Self>,
}

#[tool_router(router = tool_router)]
impl FlowMcp {
    pub fn new(service: Arc<Service>) -> FlowMcp {
        FlowMcp {
            service,
            tool_router: Self::tool_router(),
        }
    }

    #[tool(
        name = "check",
        description = "Check a FlowSpec program, as `flow check` does: every diagnostic (each naming its module), the number of errors, and ok. Give the program as `path` (a file; flow mcp only) or `flow` (the document, with `modules` and `name`).",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn check(
        &self,
        Parameters(a): Parameters<CheckArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        Ok(answer(match allowed(&ctx, Scope::Read, "check") {
            Ok(()) => self.service.check(a).await,
            Err(r) => Err(r),
        }))
    }

    #[tool(
        name = "run",
        description = "Run a FlowSpec program with an input, as `flow run` does, until it ends or pauses: the ending ({run, state: completed, exit, output} or {run, state: faulted, fault}), or when paused the run id and its pending calls ({run, state: paused, pending: [{run, call, task, node, tool, args}]}, `run` naming a nested run for a sub-flow's call) to answer with `resume`. Tools are bound only as the server's configuration approves; nothing is asked. With a progress token, one progress notification reports Start (its run, fact number and hash) once it is recorded. Cancelling the request halts the run (no End; `resume` with the run id alone continues it).",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            open_world_hint = true
        )
    )]
    async fn run(
        &self,
        Parameters(a): Parameters<RunArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        if let Err(r) = allowed(&ctx, Scope::Run, "run") {
            return Ok(answer(Err(r)));
        }
        let token = ctx.meta.get_progress_token();
        let request = serde_json::to_value(&ctx.id).unwrap_or(Json::Null);
        let peer = ctx.peer.clone();
        let notify = move |run: RunId, start: FactRef| async move {
            let Some(token) = token else { return };
            let sent = tokio::time::timeout(
                NOTIFY_DEADLINE,
                peer.notify_progress(accepted_start(token, request, &run, &start)),
            )
            .await;
            if !matches!(sent, Ok(Ok(()))) {
                tracing::warn!(run.id = %run, "mcp: the accepted-Start notification was not sent");
            }
        };
        let program = a.program();
        let namespace = match seen(&ctx) {
            Namespaces::Only(v) if !v.contains(&Namespace::default()) && !v.is_empty() => {
                v[0].clone()
            }
            _ => Namespace::default(),
        };
        let r = self
            .service
            .start(&namespace, program, &a.input, ctx.ct.clone(), notify)
            .await;
        driven(r)
    }

    #[tool(
        name = "resume",
        description = "Resume a run, as `flow resume` does: with `call` and `reply` (an outcome such as {\"Ok\": {...}}), admit that reply for the open call and drive on; with neither, continue a halted or crashed run, settling its open calls. Answers like `run`. Cancelling the request halts the run.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            open_world_hint = true
        )
    )]
    async fn resume(
        &self,
        Parameters(a): Parameters<ResumeArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        if let Err(r) = allowed(&ctx, Scope::Run, "resume") {
            return Ok(answer(Err(r)));
        }
        if let Err(r) = self.service.confine(&seen(&ctx), &a.run).await {
            return Ok(answer(Err(r)));
        }
        // Who answers, for the call's timing record, as over HTTP.
        let by = ctx
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|p| p.extensions.get::<crate::http::auth::Caller>())
            .map(|c| c.answerer());
        driven(self.service.resume(a, by, ctx.ct.clone()).await)
    }

    #[tool(
        name = "replay",
        description = "Replay a run against its recorded program, as `flow replay` does, calling nothing: {run, verdict} with verdict matched, incomplete or diverged (then with fact and reason).",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn replay(
        &self,
        Parameters(a): Parameters<ReplayArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        Ok(answer(match allowed(&ctx, Scope::Read, "replay") {
            Ok(()) => match self.service.confine(&seen(&ctx), &a.run).await {
                Ok(()) => self.service.replay(&a.run).await,
                Err(r) => Err(r),
            },
            Err(r) => Err(r),
        }))
    }

    #[tool(
        name = "history",
        description = "A run's verified history, bounded: its identity, state, truncation and recorded sources (module, commit, hash, length), the facts selected by kind then paged by offset and limit (1 to 200, default 50; facts keep their numbers; page has total, offset, limit and nextOffset, null at the end). Fact text is cut at 1024 code points (saysTruncated); a value over 4096 bytes of JSON is left out whole (valuesOmitted; its hash stays). With `source`, up to 4096 code points of that recorded module from `source_offset` (source.nextOffset null at the end).",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn history(
        &self,
        Parameters(a): Parameters<HistoryArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        Ok(answer(match allowed(&ctx, Scope::Read, "history") {
            Ok(()) => match self.service.confine(&seen(&ctx), &a.run).await {
                Ok(()) => self.service.history(a).await,
                Err(r) => Err(r),
            },
            Err(r) => Err(r),
        }))
    }

    #[tool(
        name = "runs",
        description = "Discover stored runs, ordered by id: limit (1 to 200, default 50) candidates after `after`. Each row has run, historyPresent, record, truncated, ending, entry, program, lastFact, hostDecision and problem; nextAfter names the next page's `after` (null at the end); problems lists what could not be inspected. Optional filters, all combined, each an index lookup: state (comma-separated states), flow (the root FlowSpec id), entry (module or module#function), started_from/started_to and updated_from/updated_to (unix ms, [from, to)), fork_of, nested_in (run ids), fault (text in a faulted run's fault), waiting_node / waiting_tool (paused runs waiting on a call at that node or to that Tool), attrs (search attributes the flow declares in runtime_hints.search_attributes, e.g. {\"customer\": \"acme\"}).",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn runs(
        &self,
        Parameters(a): Parameters<RunsArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        Ok(answer(match allowed(&ctx, Scope::Read, "runs") {
            Ok(()) => self.service.runs(a, seen(&ctx)).await,
            Err(r) => Err(r),
        }))
    }
}

#[tool_handler(
    router = self.tool_router,
    name = "flowd",
    instructions = "flowd runs FlowSpec workflows with a durable, hash-chained history per run. check a program, run it (it ends, or pauses with pending calls you answer with resume), inspect it with history, find runs with runs, and replay one to verify it. Run ids are explicit; nothing is selected for you."
)]
impl ServerHandler for FlowMcp {}

/// The accepted-Start progress notification: the token copied, progress
/// 1, a message naming the run, and `_meta` describing the accepted record
/// only (MCPS-5..8): the original request id as typed, the run, the fact
/// number as a decimal string and its hash.
fn accepted_start(
    token: rmcp::model::ProgressToken,
    request: Json,
    run: &RunId,
    start: &FactRef,
) -> ProgressNotificationParam {
    let mut meta = Map::new();
    meta.insert(META_REQUEST.into(), request);
    meta.insert(META_RUN.into(), Json::String(run.to_string()));
    meta.insert(META_FACT.into(), Json::String(start.n.to_string()));
    meta.insert(META_HASH.into(), Json::String(start.hash.clone()));
    let mut p = ProgressNotificationParam::new(token, 1.0)
        .with_message(format!("{run} started: Start recorded as fact {}", start.n));
    p.meta = Some(NotificationMetaObject(MetaObject(meta)));
    p
}

/// The namespaces the request's token sees (issue 40 item 4): every one
/// over stdio and on a server without tokens. An MCP `run` starts in
/// `default`, or, for a token without it, in the first of its namespaces.
fn seen(ctx: &RequestContext<RoleServer>) -> Namespaces {
    crate::http::auth::Caller::seen(
        ctx.extensions
            .get::<axum::http::request::Parts>()
            .and_then(|p| p.extensions.get::<crate::http::auth::Caller>()),
    )
}

/// The scope a token needs for `tool` on `/mcp` (read for check, history,
/// runs and replay; run for run and resume). The auth middleware put the
/// token's scope into the HTTP request, which rmcp hands over; over stdio,
/// and on a server without tokens, there is none and nothing is checked.
fn allowed(ctx: &RequestContext<RoleServer>, need: Scope, tool: &str) -> Answer<()> {
    let have = ctx
        .extensions
        .get::<axum::http::request::Parts>()
        .and_then(|p| p.extensions.get::<Scope>());
    match have {
        Some(have) if !have.allows(need) => Err(Refusal::new(
            "forbidden",
            format!(
                "this token has scope {}; the {tool} tool needs scope {}",
                have.as_str(),
                need.as_str()
            ),
        )),
        _ => Ok(()),
    }
}

fn answer(r: Answer<Json>) -> CallToolResult {
    match r {
        Ok(v) => CallToolResult::structured(v),
        Err(r) => CallToolResult::structured_error(r.to_json()),
    }
}

/// A drive's answer. A halted drive (the request was cancelled) gets an
/// error that rmcp never sends: the cancelled request is answered by
/// nothing (MCPS-3).
fn driven(r: Answer<Option<Json>>) -> Result<CallToolResult, ErrorData> {
    match r {
        Ok(Some(v)) => Ok(CallToolResult::structured(v)),
        Ok(None) => Err(ErrorData::new(
            ErrorCode::INTERNAL_ERROR,
            "the request was cancelled; its run was halted",
            None,
        )),
        Err(r) => Ok(answer(Err(r))),
    }
}
