//! The record of bulk recoveries as the surfaces show it (`GET
//! /v1/recoveries`, `flow recoveries`): who began each, onto which
//! program, whether it runs, ended or was interrupted, its counts, and the
//! forks it made of which runs from which checkpoints. The store keeps
//! the record (`Recoveries`, migration 0014); `recover.rs` writes it.
//!
//! A caller confined to namespaces (docs/custody.md "Namespaces") sees the
//! recoveries it began, and those that made a fork in one of its
//! namespaces — with only those forks listed; any other is the missing
//! recovery's 404.

use super::RunService;
use super::recover::RecoveryEnd;
use crate::error::{Error, Result};
use flow_store::{Namespaces, RecoveryFork, RecoveryRow, RecoveryStatus, RunId};
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

/// Who reads the record: the namespaces it sees and who it is, as
/// recoveries name who began them (`cli`, `http`, `token:<tag>`).
pub struct Reader<'a> {
    pub seen: &'a Namespaces,
    pub who: &'a str,
}

impl Reader<'_> {
    /// Everything: the CLI and `flow mcp` on a local store.
    pub const LOCAL: Reader<'static> = Reader {
        seen: &Namespaces::All,
        who: "cli",
    };
}

impl RunService {
    /// Recoveries newest first, begun before `before` (unix ms) when
    /// given, at most `limit` (1 to [`MAX_PAGE`]), that `reader` sees. A
    /// confined reader's page may hold fewer (those it does not see are
    /// passed over); `nextBefore` still goes on from the last one read.
    pub fn recoveries(
        &self,
        before: Option<i64>,
        limit: u32,
        reader: &Reader,
    ) -> Result<RecoveryList> {
        if !(1..=MAX_PAGE).contains(&limit) {
            return Err(Error::Refused(format!(
                "limit {limit}: give 1 to {MAX_PAGE} recoveries a page"
            )));
        }
        let rows = self.inner.store.recoveries(before, limit + 1)?;
        let more = rows.len() > limit as usize;
        let rows: Vec<RecoveryRow> = rows.into_iter().take(limit as usize).collect();
        let next_before = more.then(|| rows.last().map(|r| r.started_ms)).flatten();
        let mut recoveries = Vec::with_capacity(rows.len());
        for row in rows {
            if self.sees(&row, reader)? {
                recoveries.push(RecoveryView::from(row));
            }
        }
        Ok(RecoveryList {
            recoveries,
            next_before,
        })
    }

    /// One recovery and the forks it made that `reader` sees.
    pub fn recovery(&self, id: &str, reader: &Reader) -> Result<RecoveryDetail> {
        let missing = || {
            Error::NotFound(format!(
                "no recovery {id}: flow recoveries (GET /v1/recoveries) lists them"
            ))
        };
        let (row, forks) = self.inner.store.recovery(id)?.ok_or_else(missing)?;
        let mut shown = Vec::with_capacity(forks.len());
        for f in forks {
            if self.fork_seen(&f, reader.seen)? {
                shown.push(RecoveryForkView::from(f));
            }
        }
        if *reader.seen != Namespaces::All && row.who != reader.who && shown.is_empty() {
            return Err(missing());
        }
        Ok(RecoveryDetail {
            recovery: row.into(),
            forks: shown,
        })
    }

    /// Whether `reader` sees recovery `row`: every one, unconfined; else
    /// one it began, or one with a fork in its namespaces.
    fn sees(&self, row: &RecoveryRow, reader: &Reader) -> Result<bool> {
        if *reader.seen == Namespaces::All || row.who == reader.who {
            return Ok(true);
        }
        let Some((_, forks)) = self.inner.store.recovery(&row.id)? else {
            return Ok(false);
        };
        for f in &forks {
            if self.fork_seen(f, reader.seen)? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Whether a fork is in `seen`'s namespaces: the fork's own, or, once
    /// it was deleted, the run it recovers (whose it inherited).
    fn fork_seen(&self, f: &RecoveryFork, seen: &Namespaces) -> Result<bool> {
        if *seen == Namespaces::All {
            return Ok(true);
        }
        for id in [&f.fork, &f.run] {
            let Ok(run) = RunId::parse(id) else { continue };
            match self.inner.store.run_info(&run) {
                Ok(info) => return Ok(seen.contains(&info.namespace)),
                Err(flow_store::Error::UnknownRun(_)) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Ok(false)
    }
}
