//! What a host record says, typed (DESIGN §3: "bindings used, approvals,
//! halts, retries, decisions about open calls, timestamps) live beside the
//! history, never inside it").
//!
//! A record is stored as its kind and its details, canonical JSON. Every
//! record this host writes is one of [`HostDetails`]' typed variants; a
//! record in any other shape (an imported archive's, another host's) reads
//! as [`HostDetails::Other`] and is kept byte for byte. Reading a typed
//! record's details and writing them again gives the same JSON, so an
//! export never changes what was stored.

use flow_abi::fact::{CallId, RunId};
use serde::Serialize;
use serde_json::{Map, Value};

mod stored;

/// The kinds of host record, as the store's `kind` column names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum HostRecordKind {
    Binding,
    Approval,
    Halt,
    Pause,
    OpenCallDecision,
    Retry,
    Timeout,
    StorageFailure,
    Timing,
    Stderr,
    Recovery,
}

impl HostRecordKind {
    pub fn as_str(self) -> &'static str {
        match self {
            HostRecordKind::Binding => "binding",
            HostRecordKind::Approval => "approval",
            HostRecordKind::Halt => "halt",
            HostRecordKind::Pause => "pause",
            HostRecordKind::OpenCallDecision => "open-call-decision",
            HostRecordKind::Retry => "retry",
            HostRecordKind::Timeout => "timeout",
            HostRecordKind::StorageFailure => "storage-failure",
            HostRecordKind::Timing => "timing",
            HostRecordKind::Stderr => "stderr",
            HostRecordKind::Recovery => "recovery",
        }
    }

    pub fn parse(s: &str) -> Option<HostRecordKind> {
        Some(match s {
            "binding" => HostRecordKind::Binding,
            "approval" => HostRecordKind::Approval,
            "halt" => HostRecordKind::Halt,
            "pause" => HostRecordKind::Pause,
            "open-call-decision" => HostRecordKind::OpenCallDecision,
            "retry" => HostRecordKind::Retry,
            "timeout" => HostRecordKind::Timeout,
            "storage-failure" => HostRecordKind::StorageFailure,
            "timing" => HostRecordKind::Timing,
            "stderr" => HostRecordKind::Stderr,
            "recovery" => HostRecordKind::Recovery,
            _ => return None,
        })
    }
}

/// What a host record says.
#[derive(Clone, Debug, PartialEq)]
pub enum HostDetails {
    /// The directory a run's Tools were bound from (its flow.toml's), so a
    /// resume on this host binds them again. Kind `binding`.
    ProgramDir { program_dir: String },
    /// The `--tools` manifests (canonical paths) that bound some of the
    /// run's Tools when a server started it, so a command printed for the
    /// run carries them. Kind `binding`.
    Tools { tools: Vec<String> },
    /// The nested run that stands for one of the run's calls (NEST-*).
    /// Kind `binding`.
    NestedRun { call: CallId, nested_run: RunId },
    /// The run was halted, by whom and why; `outer` when the halt came
    /// down from the run driving it.
    Halt(Halt),
    /// The run paused with these calls open.
    Pause { open: Vec<CallId> },
    /// What became of a call that was out (or never went) when the run's
    /// drive stopped.
    OpenCall(OpenCallDecision),
    /// A call's deadline, unix milliseconds (`timeout_ms` of its node).
    Timeout { call: CallId, due_ms: i64 },
    /// When a call went out and to what, and when its Reply was admitted
    /// (issue 38 §3). Kind `timing`.
    Timing(CallTiming),
    /// Many calls' times in one record: the drive's steady state, where a
    /// record per step would cost each step a row (issue 38 §3: the W1
    /// step must not get slower by more than 5 %). Each has `route`,
    /// `attempt`, `sent_ms` and `replied_ms`. Kind `timing`.
    Timings(Vec<CallTiming>),
    /// The end of a Tool process's stderr (at most [`STDERR_MAX`] bytes)
    /// when it ended before answering `call`, or failed describe (no
    /// call). Kind `stderr`.
    Stderr {
        call: Option<CallId>,
        tool: String,
        text: String,
    },
    /// The run is a fork a bulk recovery made (issue 39 §2): written with
    /// its Start, so the fork and its lineage "recovered by R" are durable
    /// together. Kind `recovery`.
    Recovered { recovery: String },
    /// A record in a shape this host does not write: kept as it is.
    Other {
        kind: HostRecordKind,
        details: Value,
    },
}

/// Most bytes of a Tool's stderr a [`HostDetails::Stderr`] keeps (its end).
pub const STDERR_MAX: usize = 8 * 1024;

/// One call's wall-clock times, unix milliseconds. A record carries what
/// its writer knew: calls a Tool answered within the drive that sent them
/// go, with both times, into a [`HostDetails::Timings`] record of many,
/// committed with a later step's facts; a call still out when the drive
/// stopped gets one with `sent_ms` only, and its Reply later one with
/// `replied_ms` only (a person's answer, a timeout, a settled Unknown).
/// Readers take the latest of each.
#[derive(Clone, Debug, PartialEq)]
pub struct CallTiming {
    pub call: CallId,
    /// What served it: `process` (a Tool process), `mcp` (an MCP server),
    /// `worker` (a remote worker), `nested` (a nested run), `person` (a
    /// resume), `clock` (`std/clock#sleep`), `memory`, `host`.
    pub route: Option<String>,
    /// The remote worker (its id) that answered a call of route `worker`.
    pub worker: Option<String>,
    /// 1 for the first send, 2 for the first resend after a crash or halt.
    pub attempt: Option<u32>,
    pub sent_ms: Option<i64>,
    pub replied_ms: Option<i64>,
    /// How the Reply came when not from `route`: `person`, `timeout`,
    /// `settled` (Unknown at a resume).
    pub via: Option<String>,
    /// The token name of the person who answered (absent without tokens).
    pub by: Option<String>,
}

/// Who halted a run, and why.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Halt {
    /// `http`, `mcp`, … (absent for `flow run`'s interrupt).
    pub by: Option<String>,
    pub reason: Option<String>,
    /// Halted at once, calls out left open; absent on a halt passed down.
    pub force: Option<bool>,
    /// The outer run and call whose halt reached this nested run.
    pub outer: Option<(RunId, CallId)>,
}

impl Halt {
    /// A halt asked for over `by` (`http`, `mcp`).
    pub fn by(by: &str) -> Halt {
        Halt {
            by: Some(by.into()),
            ..Halt::default()
        }
    }
}

/// What a resume (or a drain) decided for a call that was open.
#[derive(Clone, Debug, PartialEq)]
pub struct OpenCallDecision {
    pub call: CallId,
    pub decision: Decision,
    /// Why the call was open: `never sent`, `halted`, `host restarted`,
    /// `draining`.
    pub reason: String,
    /// What the person continuing the run chose, when they did.
    pub chosen: Option<Choice>,
}

/// What became of an open call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Made while draining and never sent; the next drive sends it.
    Unsent,
    /// It never went: sent now.
    Send,
    /// It waits in the worker queue: the drive attaches to it.
    Worker,
    /// Sent again.
    Resend,
    /// Settled `Unknown`.
    Unknown,
    /// Answered by the host with the reply a what-if fork supplied in
    /// place of its parent's (`reason` names the parent's call).
    WhatIf,
}

/// What a person chose for calls that were out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    Resend,
    Unknown,
}

impl Decision {
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Unsent => "unsent",
            Decision::Send => "send",
            Decision::Worker => "worker",
            Decision::Resend => "resend",
            Decision::Unknown => "unknown",
            Decision::WhatIf => "what-if",
        }
    }

    fn parse(s: &str) -> Option<Decision> {
        Some(match s {
            "unsent" => Decision::Unsent,
            "send" => Decision::Send,
            "worker" => Decision::Worker,
            "resend" => Decision::Resend,
            "unknown" => Decision::Unknown,
            "what-if" => Decision::WhatIf,
            _ => return None,
        })
    }
}

impl Choice {
    pub fn as_str(self) -> &'static str {
        match self {
            Choice::Resend => "resend",
            Choice::Unknown => "unknown",
        }
    }

    fn parse(s: &str) -> Option<Choice> {
        Some(match s {
            "resend" => Choice::Resend,
            "unknown" => Choice::Unknown,
            _ => return None,
        })
    }
}

impl HostDetails {
    pub fn kind(&self) -> HostRecordKind {
        match self {
            HostDetails::ProgramDir { .. }
            | HostDetails::Tools { .. }
            | HostDetails::NestedRun { .. } => HostRecordKind::Binding,
            HostDetails::Halt(_) => HostRecordKind::Halt,
            HostDetails::Pause { .. } => HostRecordKind::Pause,
            HostDetails::OpenCall(_) => HostRecordKind::OpenCallDecision,
            HostDetails::Timeout { .. } => HostRecordKind::Timeout,
            HostDetails::Timing(_) | HostDetails::Timings(_) => HostRecordKind::Timing,
            HostDetails::Stderr { .. } => HostRecordKind::Stderr,
            HostDetails::Recovered { .. } => HostRecordKind::Recovery,
            HostDetails::Other { kind, .. } => *kind,
        }
    }
}
