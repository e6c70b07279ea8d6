//! The record of bulk recoveries as the surfaces show it (`GET
//! /v1/recoveries`, `flow recoveries`): who began each, onto which
//! program, whether it runs, ended or was interrupted, its counts, and the
//! forks it made of which runs from which checkpoints. The store keeps
//! the record (`Recoveries`, migration 0014); `recover.rs` writes it.

use super::RunService;
use super::recover::RecoveryEnd;
use crate::error::{Error, Result};
use flow_store::{RecoveryFork, RecoveryRow, RecoveryStatus};
use serde::{Deserialize, Serialize};

/// The most recoveries one page lists.
pub const MAX_PAGE: u32 = 200;

/// A recovery as recorded.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecoveryView {
    /// `rec-…`.
    pub id: String,
    /// FIXED's flow id and program hash.
    pub flow: String,
    pub program: String,
    /// Who began it: `cli`, `http` (a server without tokens) or
    /// `token:<tag>`.
    pub who: String,
    /// `running` (it holds its flow's lock), `ended`, or `interrupted`
    /// (its server stopped before it ended: recovering the flow again goes
    /// on where it stopped).
    pub status: RecoveryStatus,
    /// Unix ms.
    pub started_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_ms: Option<i64>,
    /// Its counts, or why it stopped short, once ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended: Option<RecoveryEnd>,
}

/// A fork a recovery made.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RecoveryForkView {
    /// The fork, the run it recovers, and the root Checkpoint (its fact
    /// number in the run) it was forked from.
    pub fork: String,
    pub run: String,
    pub checkpoint: u64,
}

/// One recovery and its forks, oldest first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RecoveryDetail {
    #[serde(flatten)]
    pub recovery: RecoveryView,
    pub forks: Vec<RecoveryForkView>,
}

/// A page of recoveries, newest first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecoveryList {
    pub recoveries: Vec<RecoveryView>,
    /// Pass as `before` for the next (older) page; none at the end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_before: Option<i64>,
}

impl From<RecoveryRow> for RecoveryView {
    fn from(r: RecoveryRow) -> Self {
        RecoveryView {
            id: r.id,
            flow: r.flow,
            program: r.program,
            who: r.who,
            status: r.status,
            started_ms: r.started_ms,
            ended_ms: r.ended_ms,
            // Written by this host (recover.rs): one that does not read is
            // shown as not given rather than failing the listing.
            ended: r.report.and_then(|t| serde_json::from_str(&t).ok()),
        }
    }
}

impl From<RecoveryFork> for RecoveryForkView {
    fn from(f: RecoveryFork) -> Self {
        RecoveryForkView {
            fork: f.fork,
            run: f.run,
            checkpoint: f.checkpoint,
        }
    }
}

impl RunService {
    /// Recoveries newest first, begun before `before` (unix ms) when
    /// given, at most `limit` (1 to [`MAX_PAGE`]).
    pub fn recoveries(&self, before: Option<i64>, limit: u32) -> Result<RecoveryList> {
        if !(1..=MAX_PAGE).contains(&limit) {
            return Err(Error::Refused(format!(
                "limit {limit}: give 1 to {MAX_PAGE} recoveries a page"
            )));
        }
        let rows = self.inner.store.recoveries(before, limit + 1)?;
        let more = rows.len() > limit as usize;
        let recoveries: Vec<RecoveryView> = rows
            .into_iter()
            .take(limit as usize)
            .map(RecoveryView::from)
            .collect();
        let next_before = more
            .then(|| recoveries.last().map(|r| r.started_ms))
            .flatten();
        Ok(RecoveryList {
            recoveries,
            next_before,
        })
    }

    /// One recovery and the forks it made.
    pub fn recovery(&self, id: &str) -> Result<RecoveryDetail> {
        let (row, forks) = self.inner.store.recovery(id)?.ok_or_else(|| {
            Error::NotFound(format!(
                "no recovery {id}: flow recoveries (GET /v1/recoveries) lists them"
            ))
        })?;
        Ok(RecoveryDetail {
            recovery: row.into(),
            forks: forks.into_iter().map(RecoveryForkView::from).collect(),
        })
    }
}
