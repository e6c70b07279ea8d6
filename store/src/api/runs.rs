//! A run as the runs index keeps it: its state, how it ended, its entry
//! and the index row itself.

use super::{FactRef, Namespace};

use flow_abi::fact::{CallId, RunId};
use serde::{Deserialize, Serialize};

/// DESIGN §6: `running`, `paused`, `completed`, `faulted`, `halted`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunState {
    Running,
    Paused,
    Completed,
    Faulted,
    Halted,
}

impl RunState {
    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Running => "running",
            RunState::Paused => "paused",
            RunState::Completed => "completed",
            RunState::Faulted => "faulted",
            RunState::Halted => "halted",
        }
    }

    pub fn parse(s: &str) -> Option<RunState> {
        Some(match s {
            "running" => RunState::Running,
            "paused" => RunState::Paused,
            "completed" => RunState::Completed,
            "faulted" => RunState::Faulted,
            "halted" => RunState::Halted,
            _ => return None,
        })
    }
}

/// Seed "Stored-run discovery": "ending distinguishes completed from faulted
/// evaluation".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Ending {
    Completed,
    Faulted,
}

/// The recorded entry: module and function.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Entry {
    pub module: String,
    pub function: String,
}

/// A row of the runs index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunInfo {
    pub run: RunId,
    pub state: RunState,
    pub entry: Entry,
    pub program: String,
    /// A fork's parent run and checkpoint fact number.
    pub parent: Option<(RunId, u64)>,
    /// A nested run's outer run and call.
    pub outer: Option<(RunId, CallId)>,
    pub ending: Option<Ending>,
    pub last_fact: FactRef,
    /// Host timestamps (unix milliseconds), outside the chain: the run's
    /// creation, its last commit, and the last change of its state (start,
    /// pause, resume, end, halt).
    pub created_ms: i64,
    pub updated_ms: i64,
    pub state_ms: i64,
    /// When the run came in by archive import; `None` for runs this store
    /// created (its host records then are this host's own).
    pub imported_ms: Option<i64>,
    /// The namespace the run belongs to (host metadata, not a fact).
    pub namespace: Namespace,
}
