//! The `/v1` routes (DESIGN §6 "HTTP API"); each handler lives in a file
//! of its own job.

use super::AppState;
use super::guard::typed;
use axum::Router;
use axum::routing::{get, post};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(super::health::get_health))
        .route("/metrics", get(super::metrics::get_metrics))
        .route("/v1/check", typed(post(super::check::check_flow)))
        .route("/v1/gate", typed(post(super::gate::gate_runs)))
        .route("/v1/recover", typed(post(super::recover::recover_runs)))
        .route("/v1/recoveries", get(super::recoveries::list_recoveries))
        .route("/v1/recoveries/{id}", get(super::recoveries::get_recovery))
        .route(
            "/v1/runs",
            typed(post(super::start::start_run).get(super::listing::list_runs)),
        )
        .route(
            "/v1/runs/{run}",
            get(super::run::get_run).delete(super::delete::delete_run),
        )
        .route("/v1/runs/{run}/facts", get(super::facts::list_facts))
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
        .route(
            "/v1/runs/{run}/resume",
            typed(post(super::resume::resume_run)),
        )
        .route(
            "/v1/runs/{run}/replay",
            typed(post(super::replay::replay_run)),
        )
        .route("/v1/runs/{run}/fork", typed(post(super::fork::fork_run)))
        .route("/v1/runs/{run}/halt", typed(post(super::halt::halt_run)))
        .route(
            "/v1/runs/{run}/sources/{module}",
            get(super::blobs::get_source),
        )
        .route(
            "/v1/runs/{run}/archive",
            get(super::archive::export_archive),
        )
        .route("/v1/blobs/{hash}", get(super::blobs::get_blob))
        .route("/v1/calls", get(super::inbox::list_calls))
        .route("/v1/events", get(super::feed::state_events))
}
