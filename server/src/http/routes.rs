//! The `/v1` handlers (DESIGN §6 "HTTP API"). Each turns a request into
//! a driver or store call and its result into JSON; errors go through
//! [`ApiError`]. Reads run on `spawn_blocking` (rusqlite is synchronous).

use super::AppState;
use super::answers::{
    CheckAnswer, ChildRef, EndingName, HaltAnswer, OuterRef, ParentRef, ReplayAnswer, RunAnswer,
    RunView, VerdictName, WaitingCall,
};
use super::error::{ApiError, ApiResult, Body, OptionalBody, PathArgs, QueryArgs, run_id};
use super::guard::typed;
use super::listing::{EntryView, StateName};
use super::requests::{
    CheckRequest, FactsQuery, ForkRequest, HaltRequest, ResumeRequest, StartRequest, sources,
};
use crate::service::checks::Checks;
use crate::service::{Accepted, ForkAt};
use axum::Router;
use axum::extract::FromRequest;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use flow_engine::replay::Verdict;
use flow_store::{ChildLink, HistoryQuery, RunId, RunInfo};
use serde_json::{Value as Json, json};
use std::time::Duration;

/// The longest `wait` a request may ask for (seconds); below the request
/// timeout so a waiting request is never cut off by it.
pub const MAX_WAIT: u64 = 30;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(super::health::get_health))
        .route("/metrics", get(get_metrics))
        .route("/v1/check", typed(post(check_flow)))
        .route("/v1/gate", typed(post(super::gate::gate_runs)))
        .route("/v1/recover", typed(post(super::recover::recover_runs)))
        .route("/v1/recoveries", get(super::recoveries::list_recoveries))
        .route("/v1/recoveries/{id}", get(super::recoveries::get_recovery))
        .route(
            "/v1/runs",
            typed(post(start_run).get(super::listing::list_runs)),
        )
        .route(
            "/v1/runs/{run}",
            get(get_run).delete(super::delete::delete_run),
        )
        .route("/v1/runs/{run}/facts", get(list_facts))
        .route("/v1/runs/{run}/inspect", get(super::inspect::inspect_run))
        .route(
            "/v1/runs/{run}/timeline",
            get(super::timeline::get_timeline),
        )
        .route(
            "/v1/runs/{run}/checkpoints/{fact}",
            get(super::listing::get_checkpoint),
        )
        .route("/v1/runs/{run}/verify", get(super::listing::verify_run))
        .route("/v1/runs/{run}/diff/{other}", get(super::diff::diff_runs))
        .route("/v1/runs/{run}/events", get(super::sse::run_events))
        .route("/v1/runs/{run}/resume", typed(post(resume_run)))
        .route("/v1/runs/{run}/replay", typed(post(replay_run)))
        .route("/v1/runs/{run}/fork", typed(post(fork_run)))
        .route("/v1/runs/{run}/halt", typed(post(halt_run)))
        .route("/v1/runs/{run}/sources/{module}", get(get_source))
        .route(
            "/v1/runs/{run}/archive",
            get(super::archive::export_archive),
        )
        .route("/v1/blobs/{hash}", get(get_blob))
        .route("/v1/calls", get(super::inbox::list_calls))
        .route("/v1/events", get(super::feed::state_events))
}

/// Runs a blocking read off the runtime.
pub(super) async fn blocking<T: Send + 'static>(
    state: &AppState,
    f: impl FnOnce(&AppState) -> ApiResult<T> + Send + 'static,
) -> ApiResult<T> {
    let s = state.clone();
    tokio::task::spawn_blocking(move || f(&s))
        .await
        .map_err(ApiError::internal)?
}

pub(super) fn json_response(status: StatusCode, v: Json) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        flow_abi::json::canonical(&v),
    )
        .into_response()
}

/// A typed answer as canonical JSON.
pub(super) fn typed_response(status: StatusCode, v: &impl serde::Serialize) -> ApiResult<Response> {
    Ok(json_response(
        status,
        serde_json::to_value(v).map_err(ApiError::internal)?,
    ))
}

#[utoipa::path(get, path = "/metrics", operation_id = "get_metrics", tag = "service",
    responses((status = 200, description = "Prometheus text format", body = String, content_type = "text/plain")))]
pub async fn get_metrics(State(state): State<AppState>) -> ApiResult<Response> {
    let workers = match state.service().workers() {
        Some(w) => Some(w.list().await?.len() as u64),
        None => None,
    };
    let text = blocking(&state, move |s| {
        let store = super::metrics::StoreGauges {
            runs: super::metrics::run_counts(s),
            open_calls: super::metrics::open_calls(s),
            workers,
        };
        Ok(s.metrics().render(&store, s.service()))
    })
    .await?;
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        text,
    )
        .into_response())
}

#[utoipa::path(post, path = "/v1/check", operation_id = "check_flow", tag = "runs", request_body = CheckRequest,
    responses(
        (status = 200, description = "Diagnostics (errors counts the error ones)", body = CheckAnswer),
        (status = 400, description = "Malformed JSON", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 422, description = "A body of the wrong shape", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 503, description = "Busy: as many large programs as the server checks at once are being checked; again after Retry-After", body = super::openapi::Problem, content_type = "application/problem+json")))]
pub async fn check_flow(
    State(state): State<AppState>,
    request: axum::extract::Request,
) -> ApiResult<Response> {
    // A large program checks off the async runtime, a bounded number at
    // once (service::checks; 503 busy past it). The body's length bounds
    // the sources' (a chunked body counts as large); the permit is taken
    // before the body is parsed, so a busy answer costs no parsing. The
    // body is still read (and dropped): a client still sending it would
    // otherwise see its connection reset rather than the 503.
    let size = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse().ok())
        .unwrap_or(usize::MAX);
    let permit = match state.service().checks().permit(size) {
        Ok(p) => p,
        Err(busy) => {
            let limit = state.options().body_limit;
            let _ = axum::body::to_bytes(request.into_body(), limit).await;
            return Err(busy.into());
        }
    };
    let Body(req) = Body::<CheckRequest>::from_request(request, &state).await?;
    let (all, errors) = Checks::under(permit, move || {
        let sources = sources(&req.flow, &req.modules, &req.name)?;
        Ok::<_, ApiError>(sources.diagnostics())
    })
    .await?;
    typed_response(
        StatusCode::OK,
        &CheckAnswer {
            diagnostics: all,
            errors: errors as u64,
            ok: errors == 0,
        },
    )
}

/// Waits up to `wait` seconds for a drive's outcome (`None`: still going).
async fn await_outcome(accepted: &mut Accepted, wait: Option<u64>) -> Option<ApiResult<RunAnswer>> {
    let secs = wait.unwrap_or(0).min(MAX_WAIT);
    accepted
        .within(Duration::from_secs(secs))
        .await
        .map(|r| r.map(|res| RunAnswer::of(&res)).map_err(ApiError::from))
}

#[utoipa::path(post, path = "/v1/runs", operation_id = "start_run", tag = "runs", request_body = StartRequest,
    responses(
        (status = 201, description = "Started: `{run, state}` (with `wait`, the ending or the pending calls)", body = RunAnswer),
        (status = 400, description = "Malformed JSON", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body too large", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 422, description = "The program does not check, a Tool is unbound, or the input does not decode; nothing was recorded", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 503, description = "Busy: as many large programs as the server checks at once are being checked; again after Retry-After", body = super::openapi::Problem, content_type = "application/problem+json")))]
pub async fn start_run(
    State(state): State<AppState>,
    Body(req): Body<StartRequest>,
) -> ApiResult<Response> {
    state.accepting()?;
    let sources = sources(&req.flow, &req.modules, &req.name)?;
    let input = flow_abi::json::canonical(&req.input);
    // Returns once Start is durable: the 201 acknowledges it.
    let mut accepted = state.service().start(sources, &input).await?;
    let run = accepted.run.clone();
    state.metrics().runs_started.inc();
    let body = match await_outcome(&mut accepted, req.wait).await {
        Some(Ok(a)) => a,
        Some(Err(e)) => {
            let r = run.clone();
            let st = blocking(&state, move |s| Ok(run_state(s, &r))).await?;
            RunAnswer {
                error: Some(e.body()),
                ..RunAnswer::at(run.as_str(), st)
            }
        }
        None => RunAnswer::running(run.as_str()),
    };
    let mut r = typed_response(StatusCode::CREATED, &body)?;
    if let Ok(v) = axum::http::HeaderValue::from_str(&format!("/v1/runs/{run}")) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    Ok(r)
}

fn run_state(state: &AppState, run: &RunId) -> StateName {
    state
        .store()
        .run_info(run)
        .map(|i| i.state.into())
        .unwrap_or(StateName::Running)
}

/// Runs created after `run` whose parent or outer run is `run` (ids are
/// creation-ordered, so children come after their parent). Bounded: at
/// most `cap` later runs are looked at.
fn children(state: &AppState, run: &RunId, cap: u32) -> ApiResult<(Vec<ChildRef>, bool)> {
    // By the runs index's parent and outer columns (issue 36: reading
    // every run after this one took 0.5-0.8 s at 2,200 runs on Postgres).
    let page = state.store().children(run, cap)?;
    let out = page
        .children
        .into_iter()
        .map(|c| match c.link {
            ChildLink::Fork { checkpoint } => ChildRef {
                run: c.run,
                kind: "fork".into(),
                checkpoint: Some(checkpoint),
                call: None,
            },
            ChildLink::Nested { call } => ChildRef {
                run: c.run,
                kind: "nested".into(),
                checkpoint: None,
                call: Some(call),
            },
        })
        .collect();
    Ok((out, page.truncated))
}

fn run_view(state: &AppState, run: &RunId) -> ApiResult<RunView> {
    let info: RunInfo = state.store().run_info(run)?;
    let service = state.service();
    let waits = service.pending(run)?;
    let calls_out = service.calls_out(run, &waits.open)?;
    let (children, children_truncated) = children(state, run, 2000)?;
    let (exit, output, fault) = match waits.ending {
        Some(flow_abi::fact::Ending::Completed { exit, output }) => {
            (json!(exit), output, Json::Null)
        }
        Some(flow_abi::fact::Ending::Faulted(why)) => (Json::Null, Json::Null, json!(why)),
        None => (Json::Null, Json::Null, Json::Null),
    };
    Ok(RunView {
        run: run.to_string(),
        state: info.state.into(),
        driving: service.is_active(run),
        entry: EntryView {
            module: info.entry.module,
            function: info.entry.function,
        },
        program: info.program,
        ending: info.ending.map(|e| match e {
            flow_store::Ending::Completed => EndingName::Completed,
            flow_store::Ending::Faulted => EndingName::Faulted,
        }),
        exit,
        output,
        fault,
        pending: WaitingCall::all(service, &waits.open),
        calls_out,
        last_fact: (&info.last_fact).into(),
        parent: match info.parent {
            Some((run_of, checkpoint)) => Some(ParentRef {
                deleted: RunId::parse(&run_of).is_ok_and(|p| {
                    matches!(
                        state.store().run_info(&p),
                        Err(flow_store::Error::UnknownRun(_))
                    )
                }),
                recovery: state.store().recovery_of(run.as_str())?.map(|f| f.recovery),
                run: run_of,
                checkpoint,
            }),
            None => None,
        },
        outer: info.outer.map(|(run, call)| OuterRef { run, call }),
        children,
        children_truncated,
        created_ms: info.created_ms,
        updated_ms: info.updated_ms,
    })
}

#[utoipa::path(get, path = "/v1/runs/{run}", operation_id = "get_run", tag = "runs",
    params(("run" = String, Path, description = "A run id")),
    responses(
        (status = 200, description = "State, ending, output, pending calls, lastFact, parent, children", body = RunView),
        (status = 404, description = "No such run", body = super::openapi::Problem, content_type = "application/problem+json")))]
pub async fn get_run(
    State(state): State<AppState>,
    PathArgs(run): PathArgs<String>,
) -> ApiResult<Response> {
    let run = run_id(&run)?;
    let v = blocking(&state, move |s| run_view(s, &run)).await?;
    typed_response(StatusCode::OK, &v)
}

#[utoipa::path(get, path = "/v1/runs/{run}/facts", operation_id = "list_facts", tag = "history",
    params(("run" = String, Path, description = "A run id"), FactsQuery),
    responses(
        (status = 200, description = "A history page", body = flow_store::HistoryPage),
        (status = 400, description = "Invalid arguments", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such run", body = super::openapi::Problem, content_type = "application/problem+json")))]
pub async fn list_facts(
    State(state): State<AppState>,
    PathArgs(run): PathArgs<String>,
    QueryArgs(q): QueryArgs<FactsQuery>,
) -> ApiResult<Response> {
    let run = run_id(&run)?;
    let hq = HistoryQuery {
        kind: q.kind,
        search: q.search,
        offset: q.offset,
        limit: q.limit,
    };
    let fact = q.fact;
    let page = blocking(&state, move |s| {
        s.store().run_info(&run)?;
        let page = match fact {
            Some(n) => s.store().history_fact(&run, n),
            None => s.store().history_page(&run, &hq),
        };
        page.map_err(|e| match e {
            flow_store::Error::InvalidArgument(d) => ApiError::bad_request(d),
            e => ApiError::from(e),
        })
    })
    .await?;
    Ok(json_response(
        StatusCode::OK,
        serde_json::to_value(&page).map_err(ApiError::internal)?,
    ))
}

#[utoipa::path(post, path = "/v1/runs/{run}/resume", operation_id = "resume_run", tag = "runs", request_body = ResumeRequest,
    params(("run" = String, Path, description = "A run id")),
    responses(
        (status = 202, description = "Admitted; the run goes on in the server (with `wait`, its ending or pending calls)", body = RunAnswer),
        (status = 400, description = "Malformed JSON", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such run", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 409, description = "The call is not open, the run has ended, or the server drives it now", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 422, description = "The reply does not decode against the call's declared type; nothing was recorded", body = super::openapi::Problem, content_type = "application/problem+json")))]
pub async fn resume_run(
    State(state): State<AppState>,
    caller: Option<axum::Extension<super::auth::Caller>>,
    PathArgs(run): PathArgs<String>,
    Body(req): Body<ResumeRequest>,
) -> ApiResult<Response> {
    state.accepting()?;
    let began = std::time::Instant::now();
    let run = run_id(&run)?;
    let reply = match (&req.call, &req.reply, req.open) {
        (Some(c), Some(r), None) => Some((c.clone(), flow_abi::json::canonical(r))),
        (None, None, _) => None,
        (Some(_), Some(_), Some(_)) => {
            return Err(ApiError::unprocessable(
                "`open` decides the calls out when a halted or crashed run is continued; send it without call and reply",
            ));
        }
        _ => {
            return Err(ApiError::unprocessable(
                "send both call and reply (admit a reply), or neither (continue a halted or crashed run)",
            ));
        }
    };
    // Every refusal comes back here, before anything is recorded; the
    // answer goes out once the Reply and its step are durable.
    let mut accepted = match reply {
        Some(reply) => {
            // Tokens carry no name: the answering token's owner tag (its
            // first 8 hex digits) says who, for the timing record.
            let by = caller
                .map(|axum::Extension(c)| format!("token {}", &c.owner[..c.owner.len().min(8)]));
            state.service().resume_by(&run, reply, by).await?
        }
        None => state.service().continue_run(&run, req.open).await?,
    };
    let metrics = state.metrics();
    metrics.resumes.inc();
    metrics
        .resume_latency
        .observe(began.elapsed().as_secs_f64());
    // A nested run is resumed through its outermost run: that run answers.
    let driven = accepted.run.clone();
    let body = match await_outcome(&mut accepted, req.wait).await {
        Some(Ok(a)) => a,
        Some(Err(e)) => return Err(e),
        None => RunAnswer::running(driven.as_str()),
    };
    typed_response(StatusCode::ACCEPTED, &body)
}

#[utoipa::path(post, path = "/v1/runs/{run}/halt", operation_id = "halt_run", tag = "runs", request_body(content = Option<HaltRequest>, description = "Optional: `{\"force\": true}` halts at once"),
    params(("run" = String, Path, description = "A run id")),
    responses(
        (status = 200, description = "Halted: a host record, no End; `POST …/resume` with no call continues it. Without `force`, answered once the calls out have finished", body = HaltAnswer),
        (status = 400, description = "Malformed JSON", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such run", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 409, description = "The run has ended", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body too large", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 422, description = "A body of the wrong shape: only `force` (a boolean) is accepted", body = super::openapi::Problem, content_type = "application/problem+json")))]
pub async fn halt_run(
    State(state): State<AppState>,
    PathArgs(run): PathArgs<String>,
    OptionalBody(req): OptionalBody<HaltRequest>,
) -> ApiResult<Response> {
    let run = run_id(&run)?;
    let row = state
        .service()
        .halt(&run, req.force, flow_store::Halt::by("http"))
        .await?;
    typed_response(
        StatusCode::OK,
        &HaltAnswer {
            run: run.to_string(),
            state: StateName::Halted,
            head: (&row.head).into(),
            at_ms: row.at_ms,
        },
    )
}

#[utoipa::path(post, path = "/v1/runs/{run}/replay", operation_id = "replay_run", tag = "runs",
    params(("run" = String, Path, description = "A run id")),
    responses(
        (status = 200, description = "`{run, verdict, fact?, reason?}`: matched, incomplete or diverged", body = ReplayAnswer),
        (status = 404, description = "No such run", body = super::openapi::Problem, content_type = "application/problem+json")))]
pub async fn replay_run(
    State(state): State<AppState>,
    PathArgs(run): PathArgs<String>,
) -> ApiResult<Response> {
    let run = run_id(&run)?;
    let verdict = state.service().replay(&run).await?;
    let (verdict, fact, reason) = match verdict {
        Verdict::Matched => (VerdictName::Matched, None, None),
        Verdict::Incomplete => (VerdictName::Incomplete, None, None),
        Verdict::Diverged { fact, reason } => (VerdictName::Diverged, Some(fact), Some(reason)),
    };
    typed_response(
        StatusCode::OK,
        &ReplayAnswer {
            run: run.to_string(),
            verdict,
            fact,
            reason,
        },
    )
}

#[utoipa::path(post, path = "/v1/runs/{run}/fork", operation_id = "fork_run", tag = "runs", request_body = ForkRequest,
    params(("run" = String, Path, description = "The parent run id")),
    responses(
        (status = 201, description = "The new run: `{run, state, parent}`", body = RunAnswer),
        (status = 400, description = "Malformed JSON", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such run, checkpoint or recorded call", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 422, description = "Not a root checkpoint, neither or both of `checkpoint` and `call`, a `set` value or `reply` does not decode, or the `flow` does not check or does not fit the checkpoint", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 503, description = "Busy: as many large programs as the server checks at once are being checked; again after Retry-After", body = super::openapi::Problem, content_type = "application/problem+json")))]
pub async fn fork_run(
    State(state): State<AppState>,
    PathArgs(parent): PathArgs<String>,
    Body(req): Body<ForkRequest>,
) -> ApiResult<Response> {
    state.accepting()?;
    let parent = run_id(&parent)?;
    let sets: Vec<(String, String)> = req
        .set
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), flow_abi::json::canonical(v)))
        .collect();
    let onto = match &req.flow {
        Some(flow) => Some(sources(flow, &req.modules, &req.name)?),
        None if req.modules.is_some() || req.name.is_some() => {
            return Err(ApiError::unprocessable(
                "modules and name go with flow (the program to fork onto)",
            ));
        }
        None => None,
    };
    let at = ForkAt::new(
        req.checkpoint,
        req.call,
        req.reply.as_ref().map(flow_abi::json::canonical),
    )?;
    // Returns once the fork's Start is durable; a missing checkpoint or
    // call, a `set` or `reply` that does not decode or a program that does
    // not fit is refused first.
    let (mut accepted, checkpoint) = state.service().fork(&parent, at, &sets, onto).await?;
    let run = accepted.run.clone();
    let mut body = match await_outcome(&mut accepted, req.wait).await {
        Some(Ok(a)) => a,
        Some(Err(e)) => return Err(e),
        None => RunAnswer::running(run.as_str()),
    };
    body.parent = Some(ParentRef {
        run: parent.to_string(),
        checkpoint,
        deleted: false,
        recovery: None,
    });
    typed_response(StatusCode::CREATED, &body)
}

#[utoipa::path(get, path = "/v1/runs/{run}/sources/{module}", operation_id = "get_source", tag = "history",
    params(("run" = String, Path, description = "A run id"), ("module" = String, Path, description = "A module name as recorded in Start")),
    responses(
        (status = 200, description = "The recorded source text: a FlowSpec document (a source checked before it was recorded, so it is JSON)", body = Value, content_type = "application/json"),
        (status = 404, description = "No such run or module", body = super::openapi::Problem, content_type = "application/problem+json")))]
pub async fn get_source(
    State(state): State<AppState>,
    PathArgs((run, module)): PathArgs<(String, String)>,
) -> ApiResult<Response> {
    let run = run_id(&run)?;
    let text = blocking(&state, move |s| {
        // Only Start is needed: not the whole history.
        let first = s.store().read_after(&run, 0, 1)?;
        let start = first
            .first()
            .ok_or_else(|| ApiError::not_found(format!("{run} has no Start")))?;
        let hash = start
            .fact
            .source(&module)
            .map(|s| s.hash.clone())
            .ok_or_else(|| ApiError::not_found(format!("{run} recorded no module {module:?}")))?;
        let bytes = s.store().blob(&hash)?;
        String::from_utf8(bytes).map_err(|_| ApiError::internal("a source blob is not UTF-8"))
    })
    .await?;
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        text,
    )
        .into_response())
}

#[utoipa::path(get, path = "/v1/blobs/{hash}", operation_id = "get_blob", tag = "history",
    params(("hash" = String, Path, description = "`blake3:<hex>`")),
    responses(
        (status = 200, description = "The blob's verified bytes", body = Vec<u8>, content_type = "application/octet-stream"),
        (status = 404, description = "No such blob", body = super::openapi::Problem, content_type = "application/problem+json")))]
pub async fn get_blob(
    State(state): State<AppState>,
    PathArgs(hash): PathArgs<String>,
) -> ApiResult<Response> {
    let ok = hash.strip_prefix("blake3:").is_some_and(|h| {
        h.len() == 64
            && h.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    });
    if !ok {
        return Err(ApiError::not_found(format!(
            "no blob {hash:?}: blob hashes are blake3:<64 lowercase hex digits>"
        )));
    }
    let bytes = blocking(&state, move |s| Ok(s.store().blob(&hash)?)).await?;
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/octet-stream")],
        bytes,
    )
        .into_response())
}

/// Shared with the SSE module: a run must exist.
pub(super) fn require_run(state: &AppState, run: &RunId) -> ApiResult<RunInfo> {
    Ok(state.store().run_info(run)?)
}
