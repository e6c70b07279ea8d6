//! Runs: start, resume, fork, halt, replay, delete, check a program; read
//! a run's view, list, history, timeline and diff; follow a run until it
//! settles, or its feed fact by fact (`/v1/runs…`, `/v1/check`).

use super::{Client, Error, Result, STREAM, segment};
use crate::http::answers::{CheckAnswer, HaltAnswer, ReplayAnswer, RunAnswer, RunView};
use crate::http::chain::CheckpointView;
use crate::http::check::CheckRequest;
use crate::http::delete::{DeleteAnswer, DeleteParams};
use crate::http::facts::FactsQuery;
use crate::http::feed::StateChange;
use crate::http::fork::ForkRequest;
use crate::http::halt::HaltRequest;
use crate::http::inspect::InspectQuery;
use crate::http::listing::{RunList, RunsQuery, StateName};
use crate::http::redact::{RedactAnswer, RedactRequest};
use crate::http::resume::ResumeRequest;
use crate::http::sse::EventsQuery;
use crate::http::start::StartRequest;
use crate::service::diff::RunDiff;
use crate::service::timeline::Timeline;
use backon::BackoffBuilder;
use eventsource_stream::{Event, EventStreamError, Eventsource};
use flow_abi::fact::{Fact, FactKind};
use flow_store::HistoryPage;
use futures_util::{Stream, StreamExt};
use reqwest::Method;
use serde_json::Value as Json;
use std::pin::Pin;

impl Client {
    /// `POST /v1/runs`.
    pub async fn start_run(&self, req: &StartRequest) -> Result<RunAnswer> {
        self.call(Method::POST, "/v1/runs", req).await
    }

    /// `POST /v1/runs/{run}/resume`.
    pub async fn resume_run(&self, run: &str, req: &ResumeRequest) -> Result<RunAnswer> {
        let path = format!("/v1/runs/{}/resume", segment(run));
        self.call(Method::POST, &path, req).await
    }

    /// `POST /v1/runs/{run}/fork`.
    pub async fn fork_run(&self, run: &str, req: &ForkRequest) -> Result<RunAnswer> {
        let path = format!("/v1/runs/{}/fork", segment(run));
        self.call(Method::POST, &path, req).await
    }

    /// `POST /v1/runs/{run}/halt`.
    pub async fn halt_run(&self, run: &str, req: &HaltRequest) -> Result<HaltAnswer> {
        let path = format!("/v1/runs/{}/halt", segment(run));
        self.call(Method::POST, &path, req).await
    }

    /// `POST /v1/runs/{run}/replay` (an empty body).
    pub async fn replay_run(&self, run: &str) -> Result<ReplayAnswer> {
        let path = format!("/v1/runs/{}/replay", segment(run));
        self.call(Method::POST, &path, &serde_json::Map::new())
            .await
    }

    /// `DELETE /v1/runs/{run}`.
    pub async fn delete_run(&self, run: &str, params: &DeleteParams) -> Result<DeleteAnswer> {
        let path = format!("/v1/runs/{}", segment(run));
        self.read(self.request(Method::DELETE, &path).query(params))
            .await
    }

    /// `POST /v1/runs/{run}/redact`.
    pub async fn redact_run(&self, run: &str, req: &RedactRequest) -> Result<RedactAnswer> {
        let path = format!("/v1/runs/{}/redact", segment(run));
        self.call(Method::POST, &path, req).await
    }

    /// `POST /v1/check`.
    pub async fn check_flow(&self, req: &CheckRequest) -> Result<CheckAnswer> {
        self.call(Method::POST, "/v1/check", req).await
    }

    /// `GET /v1/runs/{run}`.
    pub async fn get_run(&self, run: &str) -> Result<RunView> {
        self.get(&format!("/v1/runs/{}", segment(run)), &()).await
    }

    /// Reads `run`'s view until the run is no longer running (it ended,
    /// paused or was halted), waiting [`super::backoff::follow`] between
    /// reads: for a run that goes on past the server's `wait`.
    pub async fn follow_run(&self, run: &str) -> Result<RunView> {
        let mut waits = super::backoff::follow().build();
        loop {
            let wait = waits.next().unwrap_or(std::time::Duration::from_secs(1));
            tokio::time::sleep(wait).await;
            let view = self.get_run(run).await?;
            if !matches!(view.state, StateName::Running) {
                return Ok(view);
            }
        }
    }

    /// `GET /v1/runs`.
    pub async fn list_runs(&self, q: &RunsQuery) -> Result<RunList> {
        self.get("/v1/runs", q).await
    }

    /// `GET /v1/runs/{run}/inspect`: the inspection view, as the service
    /// builds it (untyped: `RunService::inspect`'s JSON).
    pub async fn inspect_run(&self, run: &str, q: &InspectQuery) -> Result<Json> {
        self.get(&format!("/v1/runs/{}/inspect", segment(run)), q)
            .await
    }

    /// `GET /v1/runs/{run}/facts`.
    pub async fn list_facts(&self, run: &str, q: &FactsQuery) -> Result<HistoryPage> {
        self.get(&format!("/v1/runs/{}/facts", segment(run)), q)
            .await
    }

    /// `GET /v1/runs/{run}/checkpoints/{fact}`.
    pub async fn get_checkpoint(&self, run: &str, fact: u64) -> Result<CheckpointView> {
        let path = format!("/v1/runs/{}/checkpoints/{fact}", segment(run));
        self.get(&path, &()).await
    }

    /// `GET /v1/runs/{run}/timeline`.
    pub async fn get_timeline(&self, run: &str) -> Result<Timeline> {
        self.get(&format!("/v1/runs/{}/timeline", segment(run)), &())
            .await
    }

    /// `GET /v1/runs/{run}/diff/{other}`.
    pub async fn diff_runs(&self, run: &str, other: &str) -> Result<RunDiff> {
        let path = format!("/v1/runs/{}/diff/{}", segment(run), segment(other));
        self.get(&path, &()).await
    }

    /// `GET /v1/runs/{run}/events`: the run's feed, as long as it lasts.
    pub async fn run_events(&self, run: &str, q: &EventsQuery) -> Result<Feed> {
        let path = format!("/v1/runs/{}/events", segment(run));
        let req = self.request(Method::GET, &path).query(q).timeout(STREAM);
        let events = self.send(req).await?.bytes_stream().eventsource();
        Ok(Feed {
            client: self.clone(),
            events: Box::pin(events),
        })
    }
}

/// One event of a run's feed.
#[derive(Debug)]
pub enum RunEvent {
    /// A fact as stored: its text as the feed sent it (canonical JSON) and
    /// the fact read from it.
    Fact { text: String, fact: Fact },
    /// The run paused, was halted or went on (with `states=true`).
    State(StateChange),
    /// What stopped the feed (a storage failure): its data as sent.
    Error(String),
}

type Events = Pin<
    Box<dyn Stream<Item = std::result::Result<Event, EventStreamError<reqwest::Error>>> + Send>,
>;

/// A run's feed (`text/event-stream`), read an event at a time.
pub struct Feed {
    client: Client,
    events: Events,
}

impl Feed {
    /// The next fact, state change or error; `None` once the feed closes.
    /// Keep-alives and `resync` frames are passed over.
    pub async fn next(&mut self) -> Result<Option<RunEvent>> {
        while let Some(e) = self.events.next().await {
            let e = e.map_err(|e| Error::Broken {
                base: self.client.base.clone(),
                why: format!("the feed broke: {e}"),
            })?;
            match (e.event.as_str(), FactKind::parse(&e.event)) {
                ("state", _) => {
                    let change = serde_json::from_str(&e.data).map_err(|err| {
                        self.client
                            .unreadable(format!("a state change in the feed: {err}"))
                    })?;
                    return Ok(Some(RunEvent::State(change)));
                }
                ("error", _) => return Ok(Some(RunEvent::Error(e.data))),
                (_, Some(_)) => {
                    let fact = flow_store::fact::parse_stored(&e.data)
                        .map_err(|err| {
                            self.client.unreadable(format!("a fact in the feed: {err}"))
                        })?
                        .fact;
                    return Ok(Some(RunEvent::Fact { text: e.data, fact }));
                }
                _ => {}
            }
        }
        Ok(None)
    }
}
