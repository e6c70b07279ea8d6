//! The record of bulk recoveries (issue 39 §2, migration 0014): which
//! recoveries ran, which one holds a flow now, and which forks each made.

use crate::error::Result;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// A recovery being begun.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewRecovery {
    /// `rec-…`, unique.
    pub id: String,
    /// FIXED's flow id: the lock is per flow.
    pub flow: String,
    /// FIXED's program hash.
    pub program: String,
    /// A token's name, or `cli`.
    pub who: String,
}

/// A recovery as recorded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RecoveryRow {
    pub id: String,
    pub flow: String,
    pub program: String,
    pub who: String,
    /// Unix ms (the store's clock).
    pub started_ms: i64,
    /// Unix ms; none while it runs or when it was interrupted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended_ms: Option<i64>,
    pub status: RecoveryStatus,
    /// Its counts once ended (canonical JSON the service wrote).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub report: Option<String>,
}

/// Where a recovery stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum RecoveryStatus {
    /// It holds its flow's lock now.
    Running,
    /// It ended and recorded its counts.
    Ended,
    /// Its lock expired before it ended: its server stopped. Running a
    /// recovery of the flow again goes on where it stopped.
    Interrupted,
}

impl RecoveryStatus {
    /// From the row's times, by `now_ms` of the clock that set them.
    pub fn of(ended_ms: Option<i64>, expires_ms: Option<i64>, now_ms: i64) -> RecoveryStatus {
        match (ended_ms, expires_ms) {
            (Some(_), _) => RecoveryStatus::Ended,
            (None, Some(e)) if e > now_ms => RecoveryStatus::Running,
            _ => RecoveryStatus::Interrupted,
        }
    }
}

/// A fork a recovery made: written with the fork's Start.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RecoveryFork {
    pub fork: String,
    pub recovery: String,
    /// The run it recovers, and the checkpoint the fork started from.
    pub run: String,
    pub checkpoint: u64,
}

/// What beginning a recovery found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecoveryBegun {
    /// The recovery holds its flow's lock for the given time.
    Holding,
    /// Another recovery of the flow holds it.
    HeldBy(RecoveryRow),
}

/// The recoveries' record. A recovery that forks takes its flow's lock
/// (at most one recovery of a flow forks at a time, on any server of the
/// store), renews it while it goes, and ends recording its counts.
pub trait Recoveries {
    /// Records `new` holding its flow for `ttl`, unless another recovery of
    /// the flow holds it now.
    fn begin_recovery(&self, new: &NewRecovery, ttl: Duration) -> Result<RecoveryBegun>;
    /// Extends the lock of a recovery that has not ended; false when it
    /// has ended (or is unknown).
    fn renew_recovery(&self, id: &str, ttl: Duration) -> Result<bool>;
    /// Ends a recovery: its lock goes, its counts are kept.
    fn end_recovery(&self, id: &str, report: &str) -> Result<()>;
    /// Recoveries newest first, started before `before_ms` when given.
    fn recoveries(&self, before_ms: Option<i64>, limit: u32) -> Result<Vec<RecoveryRow>>;
    /// One recovery and the forks it made, oldest first.
    fn recovery(&self, id: &str) -> Result<Option<(RecoveryRow, Vec<RecoveryFork>)>>;
    /// The recovery that made `fork`, when one did.
    fn recovery_of(&self, fork: &str) -> Result<Option<RecoveryFork>>;
}
