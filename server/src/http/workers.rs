//! `/v1/workers`: how a remote worker (`flow worker`, docs/deploy.md
//! "Workers") takes part. It connects out over plain HTTP — so it passes
//! proxies and NAT — and long-polls:
//!
//! 1. `POST /v1/workers` registers the declarations it serves, by identity
//!    and fingerprint (from its Tools' describe), and gets its id, how long
//!    a poll is held and how long silence makes it lost.
//! 2. `POST /v1/workers/{worker}/poll` answers as soon as calls for it are
//!    queued (on any server of the store), or with none after the hold;
//!    each poll counts as hearing from the worker.
//! 3. `POST /v1/workers/{worker}/replies` brings outcomes back. Each is
//!    admitted once, keyed by `(run, call)`: the answer says `admitted:
//!    false` for a second reply, a reply for a call not sent to this
//!    worker, or one the host settled meanwhile (its worker was judged
//!    lost). Always 200, so a worker that sends a batch again after a lost
//!    answer needs no special case (docs/http.md).
//! 4. `DELETE /v1/workers/{worker}` leaves: calls still out at it are
//!    settled as a lost worker's (it is lost at once).
//!
//! A 404 on poll or replies means the server no longer knows the worker
//! (judged lost): it registers again. Tokens: scope `worker` (or `admin`)
//! for all of these; listing the workers (`GET`) is a read. A worker is
//! bound to the token that registered it: its poll, replies and leaving
//! under another token are 403 and change nothing (an `admin` token may act
//! for any worker); a worker token whose line names declarations registers
//! only those (403 naming the others, nothing registered). A worker is
//! handed only calls of runs in its registering token's namespaces, and
//! `GET` lists only the workers that serve one of the caller's
//! (docs/custody.md "Namespaces").

use super::AppState;
use super::auth::Caller;
use super::error::{ApiError, ApiResult, Body, PathArgs};
use super::respond::typed_response;
use crate::service::remote::{WorkerReply, Workers};
use axum::Extension;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use flow_abi::protocol::Outcome;
use flow_store::ServedTool;
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;
use std::time::Duration;
use utoipa::ToSchema;

/// Declarations one worker may register, calls or replies in one request.
const MAX_ITEMS: usize = 10_000;
/// Calls one poll hands out at most.
const MAX_POLL: u32 = 256;

// The request and answer types below are the wire both sides share: the
// server's handlers and the typed client (`client/workers.rs`, which `flow worker` uses) read and
// write the same structs.

/// A declaration a worker serves.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ServedView {
    /// Declaration identity, `<module>#<tool-id>`.
    pub tool: String,
    /// `sha256:<hex>`, as the Tool's describe answers it.
    pub fingerprint: String,
    /// Its binding says `resend = true`: a call out at the worker when it
    /// is lost is sent again (to the next worker) instead of settled
    /// Unknown.
    #[serde(default)]
    pub resend: bool,
}

/// `POST /v1/workers`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RegisterRequest {
    /// How the worker is named in logs and listings (its host, say).
    #[schema(min_length = 1, max_length = 256)]
    pub name: String,
    pub tools: Vec<ServedView>,
}

/// A registered worker.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RegisterAnswer {
    /// The worker's id in the paths of its other requests.
    pub worker: String,
    /// How long a poll is held when there is nothing to do (ms).
    pub poll_ms: u64,
    /// A worker not heard from within this long is lost (ms).
    pub timeout_ms: u64,
    /// The largest request body the server takes (bytes): a reply that
    /// does not fit is sent as BadReply.
    pub reply_limit: usize,
}

/// `POST /v1/workers/{worker}/poll`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PollRequest {
    /// Calls the worker can start now — its free slots (`flow worker`
    /// sends its `--concurrency` less the calls it holds), so calls left
    /// over go to other workers; at most 256. 0 while it drains: no call is
    /// handed out, the poll keeps it heard from and brings cancels.
    #[schema(minimum = 0, maximum = 256)]
    pub max: u32,
    /// How long to wait for a call, at most the server's hold (ms).
    #[serde(
        default,
        deserialize_with = "super::params::body_opt_int64",
        skip_serializing_if = "Option::is_none"
    )]
    pub wait_ms: Option<u64>,
}

/// A call handed to a worker: the Tool process protocol's `call`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct WorkCall {
    pub run: String,
    pub call: String,
    pub tool: String,
    #[schema(value_type = Object)]
    pub args: Json,
}

/// `(run, call)`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct CallKey {
    pub run: String,
    pub call: String,
}

/// What a poll hands out.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PollAnswer {
    pub calls: Vec<WorkCall>,
    /// Calls sent earlier to stop working on (a cancel proves nothing).
    pub cancels: Vec<CallKey>,
}

/// One outcome.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplyItem {
    pub run: String,
    pub call: String,
    /// `{"Ok": v}`, `{"Failed": v}`, `{"NotRun": why}`, `{"Unknown": why}`,
    /// or `{"BadReply": why}` for a reply the worker could not decode.
    #[schema(value_type = Object)]
    pub outcome: Json,
}

/// `POST /v1/workers/{worker}/replies`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RepliesRequest {
    pub replies: Vec<ReplyItem>,
}

/// Whether each reply was admitted.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ReplyResult {
    pub run: String,
    pub call: String,
    /// False: dropped (a second reply, a call not sent to this worker, or
    /// one settled meanwhile); history is unchanged.
    pub admitted: bool,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct RepliesAnswer {
    pub replies: Vec<ReplyResult>,
}

/// A live worker.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkerView {
    pub worker: String,
    pub name: String,
    pub tools: Vec<ServedView>,
    /// Milliseconds since it was last heard from.
    pub seen_ms_ago: i64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct WorkersAnswer {
    pub workers: Vec<WorkerView>,
}

fn workers(state: &AppState) -> ApiResult<&Workers> {
    state
        .service()
        .workers()
        .ok_or_else(|| ApiError::not_found("this server takes no workers"))
}

/// A worker id from a path: one this server handed out looks like
/// `worker-<lowercase ULID>`; anything else names no worker.
fn worker_id(s: &str) -> ApiResult<String> {
    let ok = s.strip_prefix("worker-").is_some_and(|u| {
        u.len() == 26
            && u.bytes()
                .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase())
    });
    if ok {
        Ok(s.to_string())
    } else {
        Err(ApiError::not_found(format!(
            "no worker {s:?} (worker ids are worker- and a lowercase ULID, from POST /v1/workers)"
        )))
    }
}

/// Checks that `caller` may act for `worker`: 404 for a worker the store
/// does not know (register again), 403 for one another token registered.
/// Without tokens there is no identity to check.
async fn act_for(w: &Workers, worker: &str, caller: Option<&Caller>) -> ApiResult<()> {
    let owner = w.owner(worker).await?.ok_or_else(|| gone(worker))?;
    match caller {
        Some(c) if !c.acts_for(&owner) => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!(
                "worker {worker} was registered with another token: a worker polls, replies and leaves only with the token that registered it (or an admin token)"
            ),
        )),
        _ => Ok(()),
    }
}

fn gone(worker: &str) -> ApiError {
    ApiError::not_found(format!(
        "worker {worker} is not known here or was judged lost; register again (POST /v1/workers)"
    ))
}

fn fingerprint_ok(fp: &str) -> bool {
    fp.strip_prefix("sha256:").is_some_and(|h| {
        h.len() == 64
            && h.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

#[utoipa::path(post, path = "/v1/workers", operation_id = "register_worker", tag = "workers", request_body = RegisterRequest,
    responses(
        (status = 400, description = "Malformed JSON", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body too large", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 201, description = "Registered", body = RegisterAnswer),
        (status = 403, description = "The token's scope is not worker (or admin), or its line does not name a declaration listed; nothing was recorded", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 422, description = "A declaration that is not `<module>#<tool>` with a sha256 fingerprint; nothing was recorded", body = super::openapi::Problem, content_type = "application/problem+json")))]
pub async fn register_worker(
    State(state): State<AppState>,
    caller: Option<Extension<Caller>>,
    Body(req): Body<RegisterRequest>,
) -> ApiResult<Response> {
    state.accepting()?;
    let w = workers(&state)?;
    if req.name.is_empty() || req.name.len() > 256 || req.name.chars().any(char::is_control) {
        return Err(ApiError::unprocessable(
            "name must be 1 to 256 characters, none of them control characters",
        ));
    }
    if req.tools.is_empty() || req.tools.len() > MAX_ITEMS {
        return Err(ApiError::unprocessable(format!(
            "tools must list 1 to {MAX_ITEMS} declarations"
        )));
    }
    let mut tools = Vec::with_capacity(req.tools.len());
    for t in req.tools {
        let named = t
            .tool
            .rsplit_once('#')
            .is_some_and(|(m, id)| !m.is_empty() && !id.is_empty());
        if !named || t.tool.len() > 512 || t.tool.chars().any(char::is_control) {
            return Err(ApiError::unprocessable(format!(
                "tools: {:?} is not a declaration identity (<module>#<tool-id>)",
                t.tool
            )));
        }
        if !fingerprint_ok(&t.fingerprint) {
            return Err(ApiError::unprocessable(format!(
                "tools: {}: {:?} is not a fingerprint (sha256: and 64 lowercase hex digits)",
                t.tool, t.fingerprint
            )));
        }
        tools.push(ServedTool {
            tool: t.tool,
            fingerprint: t.fingerprint,
            resend: t.resend,
        });
    }
    let caller = caller.map(|Extension(c)| c);
    if let Some(c) = &caller {
        let refused: Vec<&str> = tools
            .iter()
            .filter(|t| !c.may_serve(&t.tool))
            .map(|t| t.tool.as_str())
            .collect();
        if !refused.is_empty() {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!(
                    "this worker token may not serve {}: its line in the server's tokens file names the declarations it serves (`token worker KEY[,KEY]`); nothing was registered",
                    refused.join(", ")
                ),
            ));
        }
    }
    let owner = caller.as_ref().map_or("", |c| c.owner.as_str());
    let id = w
        .register(&req.name, owner, Caller::seen(caller.as_ref()), tools)
        .await?;
    typed_response(
        StatusCode::CREATED,
        &RegisterAnswer {
            worker: id,
            poll_ms: w.hold().as_millis() as u64,
            timeout_ms: w.options().timeout.as_millis() as u64,
            reply_limit: state.options().body_limit,
        },
    )
}

#[utoipa::path(post, path = "/v1/workers/{worker}/poll", operation_id = "poll_worker", tag = "workers", request_body = PollRequest,
    params(("worker" = String, Path, description = "The worker's id")),
    responses(
        (status = 400, description = "Malformed JSON", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 200, description = "Calls for the worker (none after the hold)", body = PollAnswer),
        (status = 403, description = "The worker was registered with another token; nothing was handed out", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 404, description = "Unknown or lost worker: register again", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 422, description = "max out of 0..256", body = super::openapi::Problem, content_type = "application/problem+json")))]
pub async fn poll_worker(
    State(state): State<AppState>,
    PathArgs(worker): PathArgs<String>,
    caller: Option<Extension<Caller>>,
    Body(req): Body<PollRequest>,
) -> ApiResult<Response> {
    let worker = worker_id(&worker)?;
    let w = workers(&state)?;
    if req.max > MAX_POLL {
        return Err(ApiError::unprocessable(format!(
            "max must be 0 to {MAX_POLL}"
        )));
    }
    act_for(w, &worker, caller.as_deref()).await?;
    let wait = Duration::from_millis(req.wait_ms.unwrap_or(u64::MAX / 4));
    let claimed = w
        .poll(&worker, req.max, wait)
        .await?
        .ok_or_else(|| gone(&worker))?;
    typed_response(
        StatusCode::OK,
        &PollAnswer {
            calls: claimed
                .calls
                .into_iter()
                .map(|c| WorkCall {
                    run: c.run.to_string(),
                    call: c.call.to_string(),
                    tool: c.tool,
                    args: c.args,
                })
                .collect(),
            cancels: claimed
                .cancels
                .into_iter()
                .map(|(run, call)| CallKey {
                    run: run.to_string(),
                    call: call.to_string(),
                })
                .collect(),
        },
    )
}

#[utoipa::path(post, path = "/v1/workers/{worker}/replies", operation_id = "reply_worker", tag = "workers", request_body = RepliesRequest,
    params(("worker" = String, Path, description = "The worker's id")),
    responses(
        (status = 400, description = "Malformed JSON", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body too large", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 200, description = "Each reply admitted once, or dropped (`admitted: false`)", body = RepliesAnswer),
        (status = 403, description = "The worker was registered with another token; nothing was admitted", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such worker id", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 422, description = "A reply that is not an outcome, or a run id that is not one; nothing was admitted", body = super::openapi::Problem, content_type = "application/problem+json")))]
pub async fn reply_worker(
    State(state): State<AppState>,
    PathArgs(worker): PathArgs<String>,
    caller: Option<Extension<Caller>>,
    Body(req): Body<RepliesRequest>,
) -> ApiResult<Response> {
    let worker = worker_id(&worker)?;
    let w = workers(&state)?;
    act_for(w, &worker, caller.as_deref()).await?;
    if req.replies.len() > MAX_ITEMS {
        return Err(ApiError::unprocessable(format!(
            "replies: at most {MAX_ITEMS} in one request"
        )));
    }
    // Every reply is checked before any is admitted.
    let mut replies = Vec::with_capacity(req.replies.len());
    for r in req.replies {
        flow_store::RunId::parse(&r.run)
            .map_err(|e| ApiError::unprocessable(format!("replies: {e}")))?;
        Outcome::from_record(&r.outcome)
            .map_err(|e| ApiError::unprocessable(format!("replies: {} {}: {e}", r.run, r.call)))?;
        replies.push(WorkerReply {
            run: r.run,
            call: r.call,
            outcome: r.outcome,
        });
    }
    let keys: Vec<(String, String)> = replies
        .iter()
        .map(|r| (r.run.clone(), r.call.clone()))
        .collect();
    let admitted = w.reply(&worker, replies).await?;
    typed_response(
        StatusCode::OK,
        &RepliesAnswer {
            replies: keys
                .into_iter()
                .zip(admitted)
                .map(|((run, call), admitted)| ReplyResult {
                    run,
                    call,
                    admitted,
                })
                .collect(),
        },
    )
}

#[utoipa::path(delete, path = "/v1/workers/{worker}", operation_id = "delete_worker", tag = "workers",
    params(("worker" = String, Path, description = "The worker's id")),
    responses(
        (status = 204, description = "Left: calls still out at it are settled as a lost worker's"),
        (status = 403, description = "The worker was registered with another token; it stays", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such worker id", body = super::openapi::Problem, content_type = "application/problem+json")))]
pub async fn delete_worker(
    State(state): State<AppState>,
    PathArgs(worker): PathArgs<String>,
    caller: Option<Extension<Caller>>,
) -> ApiResult<Response> {
    let worker = worker_id(&worker)?;
    let w = workers(&state)?;
    act_for(w, &worker, caller.as_deref()).await?;
    w.leave(&worker).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[utoipa::path(get, path = "/v1/workers", operation_id = "list_workers", tag = "workers",
    responses((status = 200, description = "The live workers that serve one of the token's namespaces, and what they serve", body = WorkersAnswer)))]
pub async fn list_workers(
    State(state): State<AppState>,
    caller: Option<Extension<Caller>>,
) -> ApiResult<Response> {
    // A confined caller sees the workers that serve one of its namespaces.
    let seen = Caller::seen(caller.as_deref());
    let mut list = workers(&state)?.list().await?;
    list.retain(|w| seen.meets(&w.namespaces));
    typed_response(
        StatusCode::OK,
        &WorkersAnswer {
            workers: list
                .into_iter()
                .map(|w| WorkerView {
                    worker: w.id,
                    name: w.name,
                    seen_ms_ago: w.seen_ms_ago,
                    tools: w
                        .tools
                        .into_iter()
                        .map(|t| ServedView {
                            tool: t.tool,
                            fingerprint: t.fingerprint,
                            resend: t.resend,
                        })
                        .collect(),
                })
                .collect(),
        },
    )
}
