//! Deleting runs (issue 40 item 1, docs/custody.md): the trait, what a
//! deletion is asked and what it did, and the audit log it leaves.

use super::{FactRef, RunState};
use crate::error::Result;
use flow_abi::fact::RunId;
use serde::Serialize;

/// Who deletes and whether a driven run may go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deletion {
    /// Recorded in the audit log: a token's name, `cli`, `sweeper`.
    pub who: String,
    /// Deletes a `running` run, or one whose lease is live, as well. Without
    /// it such a run is refused ([`crate::Error::Active`]): its driver would
    /// find its history gone under it.
    pub force: bool,
}

impl Deletion {
    pub fn by(who: impl Into<String>) -> Deletion {
        Deletion {
            who: who.into(),
            force: false,
        }
    }
}

/// What a deletion removed; also a row of the audit log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Deleted {
    /// The audit log's sequence number of this deletion.
    pub seq: u64,
    pub run: String,
    /// The run's state when it was deleted.
    pub state: RunState,
    /// The run's last fact (number and chain hash) when it was deleted.
    pub head: FactRef,
    pub who: String,
    /// When (the store's clock, unix ms).
    pub at_ms: i64,
    /// Fact rows removed.
    pub facts: u64,
    /// Blobs removed: those no other run referenced.
    pub blobs_removed: u64,
}

/// The sweeper's question: which runs of `state` last changed state
/// before `before_ms`, optionally only of one flow (or of no flow in
/// `except_flows`, the flows a more specific rule covers).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExpiredQuery {
    pub state: RunState,
    pub before_ms: i64,
    pub flow: Option<String>,
    pub except_flows: Vec<String>,
    pub limit: u32,
}

/// Deletion and its audit log. Deleting a run removes its facts, host
/// records, runs index row, search attributes, lease and queued worker
/// calls, and each of its blobs that no other run references, in one
/// transaction; the deletion's audit row is written in the same
/// transaction. A fork or nested run of the deleted run is untouched
/// (its own facts reference every blob it reads).
pub trait DeleteRuns {
    /// Deletes `run`; [`crate::Error::UnknownRun`] when there is none.
    fn delete_run(&self, run: &RunId, how: &Deletion) -> Result<Deleted>;
    /// Deletes each of `runs` as [`DeleteRuns::delete_run`] would, each
    /// refused or done on its own, answered in order. A backend may commit
    /// them together (SQLite: one writer batch, one fsync; Postgres: one
    /// transaction): the retention sweeper's way.
    fn delete_runs(&self, runs: &[RunId], how: &Deletion) -> Vec<Result<Deleted>> {
        runs.iter().map(|r| self.delete_run(r, how)).collect()
    }
    /// The audit log after `after` (a sequence number), oldest first, at
    /// most `limit`.
    fn deletions(&self, after: u64, limit: u32) -> Result<Vec<Deleted>>;
    /// Runs a retention rule selects, oldest state change first.
    fn expired_runs(&self, query: &ExpiredQuery) -> Result<Vec<RunId>>;
}

/// The advisory lock key of a blob on Postgres (its hash's first 8 bytes):
/// writers take it shared, deletions exclusive (docs/custody.md).
pub fn blob_lock_key(hash: &[u8]) -> i64 {
    let mut k = [0u8; 8];
    let n = hash.len().min(8);
    k[..n].copy_from_slice(&hash[..n]);
    i64::from_be_bytes(k)
}
