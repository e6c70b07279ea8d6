//! Namespaces at the edge (issue 40 item 4, docs/custody.md
//! "Namespaces"): a request of a token confined to namespaces that names a
//! run (`/v1/runs/{run}/…`, and `{other}` of a diff) is answered here,
//! before any handler, when the run is not in one of its namespaces —
//! with the same 404 as a run that does not exist, because a run that
//! does not exist is answered here too, by the same code. So no handler
//! (nor a route added later) can tell a confined caller that another
//! namespace's run exists: not by its status, its body, or by validating
//! the request body first.
//!
//! A caller that sees every namespace (a server without tokens, an
//! `ns=*` admin token) is not looked at: its requests cost nothing more.

use super::AppState;
use super::auth::Caller;
use super::error::ApiError;
use crate::error::Error;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use flow_store::{Namespaces, RunId};
use percent_encoding::percent_decode_str;

/// The runs a path names: each segment after `/v1/runs/` that is a run id
/// once percent-decoded (as axum's `Path` decodes it for the handler).
fn named_runs(path: &str) -> Vec<RunId> {
    let Some(rest) = path.strip_prefix("/v1/runs/") else {
        return Vec::new();
    };
    rest.split('/')
        .filter_map(|s| {
            let s = percent_decode_str(s).decode_utf8().ok()?;
            RunId::parse(&s).ok()
        })
        .collect()
}

/// The guard (module documentation). Runs after auth, which put the
/// [`Caller`] in the request.
pub async fn runs(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let seen = Caller::seen(req.extensions().get::<Caller>());
    let runs = named_runs(req.uri().path());
    match confined(&state, &seen, runs).await {
        Ok(()) => next.run(req).await,
        Err(e) => e.into_response(),
    }
}

/// Refuses, as unknown, the first of `runs` (ids as a request gives them)
/// that is not a stored run of `seen`'s namespaces: what a handler that
/// takes run ids in its body (a recovery's `runs`) checks, as the guard
/// does for a path. An id that does not parse is left to the handler.
pub async fn visible(state: &AppState, seen: &Namespaces, runs: &[String]) -> Result<(), ApiError> {
    let runs = runs.iter().filter_map(|r| RunId::parse(r).ok()).collect();
    confined(state, seen, runs).await
}

async fn confined(state: &AppState, seen: &Namespaces, runs: Vec<RunId>) -> Result<(), ApiError> {
    if *seen == Namespaces::All || runs.is_empty() {
        return Ok(());
    }
    let (store, seen) = (state.store().clone(), seen.clone());
    let hidden = tokio::task::spawn_blocking(move || {
        for run in runs {
            match store.run_info(&run) {
                Ok(info) if seen.contains(&info.namespace) => {}
                Ok(_) | Err(flow_store::Error::UnknownRun(_)) => return Ok(Some(run)),
                Err(e) => return Err(e),
            }
        }
        Ok(None)
    })
    .await
    .map_err(|e| ApiError::internal(format!("the namespace check failed: {e}")))?;
    match hidden {
        Ok(None) => Ok(()),
        Ok(Some(run)) => Err(ApiError::from(Error::from(flow_store::Error::UnknownRun(
            run.to_string(),
        )))),
        Err(e) => Err(ApiError::from(Error::from(e))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_names_its_runs_as_the_handler_reads_them() {
        let a = "run-01hf7yat040005yy8000000107";
        let b = "run-01hf7yat050005yy8000000187";
        let ids =
            |p: &str| -> Vec<String> { named_runs(p).iter().map(|r| r.to_string()).collect() };
        assert_eq!(ids(&format!("/v1/runs/{a}")), [a]);
        assert_eq!(ids(&format!("/v1/runs/{a}/diff/{b}")), [a, b]);
        assert_eq!(ids(&format!("/v1/runs/{a}/sources/demo.json")), [a]);
        // Percent-encoded, as a client may send it.
        assert_eq!(ids("/v1/runs/run-01hf7yat0%340005yy8000000107/facts"), [a]);
        assert!(ids("/v1/runs").is_empty() && ids("/v1/calls").is_empty());
    }
}
