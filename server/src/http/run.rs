//! `GET /v1/runs/{run}`: one run's view — state, ending, output, pending
//! calls, last fact, parent and children. A caller confined to namespaces
//! sees the children of its namespaces only, and a parent of another as a
//! deleted one (service/lineage.rs).

use super::AppState;
use super::answers::{ChildRef, EndingName, OuterRef, ParentRef, RunView, WaitingCall};
use super::auth::Caller;
use super::error::{ApiResult, PathArgs, run_id};
use super::listing::EntryView;
use super::respond::{blocking, typed_response};
use crate::service::lineage::{self, Link, Step};
use axum::Extension;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use flow_store::{ChildLink, Namespaces, RunId, RunInfo};
use serde_json::{Value as Json, json};

/// Runs created after `run` whose parent or outer run is `run` (ids are
/// creation-ordered, so children come after their parent). Bounded: at
/// most `cap` later runs are looked at; those of namespaces outside `seen`
/// are left out.
fn children(
    state: &AppState,
    run: &RunId,
    cap: u32,
    seen: &Namespaces,
) -> ApiResult<(Vec<ChildRef>, bool)> {
    // By the runs index's parent and outer columns (issue 36: reading
    // every run after this one took 0.5-0.8 s at 2,200 runs on Postgres).
    let page = state.store().children(run, cap)?;
    let out = page
        .children
        .into_iter()
        .filter(|c| seen.contains(&c.namespace))
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

fn run_view(state: &AppState, run: &RunId, seen: &Namespaces) -> ApiResult<RunView> {
    let info: RunInfo = state.store().run_info(run)?;
    let service = state.service();
    let waits = service.pending(run)?;
    let calls_out = service.calls_out(run, &waits.open)?;
    let (children, children_truncated) = children(state, run, 2000, seen)?;
    let (exit, output, fault) = match waits.ending {
        Some(flow_abi::fact::Ending::Completed { exit, output }) => {
            (json!(exit), output, Json::Null)
        }
        Some(flow_abi::fact::Ending::Faulted(why)) => (Json::Null, Json::Null, json!(why)),
        None => (Json::Null, Json::Null, Json::Null),
    };
    let parent = match lineage::step(&**state.store(), run, &info, seen)? {
        Some(Step {
            from,
            link: Link::Fork {
                checkpoint,
                recovery,
            },
            deleted,
            ..
        }) => Some(ParentRef {
            run: from.to_string(),
            checkpoint,
            deleted,
            recovery,
        }),
        _ => None,
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
        parent,
        outer: info.outer.map(|(run, call)| OuterRef {
            run: run.to_string(),
            call: call.to_string(),
        }),
        children,
        children_truncated,
        created_ms: info.created_ms,
        updated_ms: info.updated_ms,
        holes: state.store().holes(run)?,
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
    caller: Option<Extension<Caller>>,
) -> ApiResult<Response> {
    let run = run_id(&run)?;
    let seen = Caller::seen(caller.as_deref());
    let v = blocking(&state, move |s| run_view(s, &run, &seen)).await?;
    typed_response(StatusCode::OK, &v)
}
