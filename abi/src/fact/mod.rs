//! Facts: the records of a run's history (DESIGN §3), as one type with one
//! strict reader ([`Fact::from_value`], [`Fact::from_json`], [`Fact::parse`])
//! and one canonical writer ([`Fact::into_json`], [`Fact::to_json`],
//! [`Fact::to_canonical`]).
//!
//! ```text
//! {"fact":"Start","n":1,"run":R,"data":"1.0","entry":{"module":M,"function":F},
//!  "program":"sha256:…","sources":[{"module":M,"hash":H,"length":L}],"input":V,
//!  "parent":{"run":R,"checkpoint":N}?,"outer":{"run":R,"call":C}?}
//! {"fact":"Call","n":…,"call":C,"task":T,"node":NODE,"tool":ID,"fingerprint":FP,"args":V}
//! {"fact":"Reply","n":…,"call":C,"outcome":{"Ok":V}|{"Failed":V}|{"NotRun":"why"}|{"Unknown":"why"}|{"BadReply":"why"}}
//! {"fact":"Close","n":…,"call":C,"reason":"why"}
//! {"fact":"Checkpoint","n":…,"task":T,"node":NODE,"state":V}
//! {"fact":"End","n":…,"ending":{"Completed":{"exit":"success","output":V}}|{"Faulted":"why"}}
//! ```
//!
//! A `Fact` is the *logical* fact. Values (`input`, `args`, the outcome's
//! value, `state`, `output`) stay `json.Value`s, opaque here. The store keeps
//! them Merkle-style (a value over 1 KiB becomes a `$blob` reference) and may
//! keep a Checkpoint as a `delta` against an earlier one; both are the
//! store's business. Because values are opaque, a stored fact that is not a
//! delta Checkpoint reads as a `Fact` too (its values then hold references)
//! and writes back byte for byte.
//!
//! Numbering: `n` is part of every fact, and whoever appends assigns it. A
//! fact the engine derived and nobody appended yet has `n = 0` ("not
//! numbered yet"); [`Fact::numbered`] gives it its number. The reader
//! refuses 0, since a recorded fact is numbered from 1.

mod change;
mod id;
mod read;
mod write;

pub use change::{FieldChange, RecordedChange, StateChange, Touched};
pub use id::{CallId, IdError, RunId, is_node_id, is_task_id};
pub use read::FactError;

use crate::protocol::Outcome;
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

/// The six fact kinds of DESIGN §3.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug, Hash, Serialize, Deserialize)]
pub enum FactKind {
    Start,
    Call,
    Reply,
    Close,
    Checkpoint,
    End,
}

impl FactKind {
    pub const ALL: [FactKind; 6] = [
        FactKind::Start,
        FactKind::Call,
        FactKind::Reply,
        FactKind::Close,
        FactKind::Checkpoint,
        FactKind::End,
    ];

    pub fn parse(s: &str) -> Option<FactKind> {
        FactKind::ALL.into_iter().find(|k| k.as_str() == s)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            FactKind::Start => "Start",
            FactKind::Call => "Call",
            FactKind::Reply => "Reply",
            FactKind::Close => "Close",
            FactKind::Checkpoint => "Checkpoint",
            FactKind::End => "End",
        }
    }
}

/// The recorded entry: module and function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub module: String,
    pub function: String,
}

/// A recorded source text as Start lists it: `hash` is `blake3:<hex>` of the
/// text's UTF-8 bytes and `length` its length in code points
/// (REQUIREMENTS HIST-15). The text itself is a blob.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Source {
    pub module: String,
    pub hash: String,
    pub length: u64,
}

/// A fork's parent run and the fact number of the Checkpoint it forked at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Parent {
    pub run: RunId,
    pub checkpoint: u64,
}

/// A nested run's outer run and the call it serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outer {
    pub run: RunId,
    pub call: CallId,
}

/// How a run ended: `{"Completed":{"exit":…,"output":…}}` or
/// `{"Faulted":"why"}`.
#[derive(Debug, Clone, PartialEq)]
pub enum Ending {
    Completed { exit: String, output: Json },
    Faulted(String),
}

/// One fact of a history, with exactly the fields of DESIGN §3.
#[derive(Debug, Clone, PartialEq)]
pub enum Fact {
    Start {
        n: u64,
        run: RunId,
        /// The data version (`flow_abi::DATA_VERSION` when written).
        data: String,
        entry: Entry,
        program: String,
        sources: Vec<Source>,
        input: Json,
        parent: Option<Parent>,
        outer: Option<Outer>,
    },
    Call {
        n: u64,
        call: CallId,
        task: String,
        node: String,
        tool: String,
        fingerprint: String,
        args: Json,
    },
    Reply {
        n: u64,
        call: CallId,
        outcome: Outcome,
    },
    Close {
        n: u64,
        call: CallId,
        reason: String,
    },
    Checkpoint {
        n: u64,
        task: String,
        node: String,
        /// The whole flow state at this point (logically; see the module doc).
        state: Json,
    },
    End {
        n: u64,
        ending: Ending,
    },
}

impl Fact {
    pub fn kind(&self) -> FactKind {
        match self {
            Fact::Start { .. } => FactKind::Start,
            Fact::Call { .. } => FactKind::Call,
            Fact::Reply { .. } => FactKind::Reply,
            Fact::Close { .. } => FactKind::Close,
            Fact::Checkpoint { .. } => FactKind::Checkpoint,
            Fact::End { .. } => FactKind::End,
        }
    }

    /// The fact's number; 0 when it is not numbered yet.
    pub fn n(&self) -> u64 {
        match self {
            Fact::Start { n, .. }
            | Fact::Call { n, .. }
            | Fact::Reply { n, .. }
            | Fact::Close { n, .. }
            | Fact::Checkpoint { n, .. }
            | Fact::End { n, .. } => *n,
        }
    }

    /// Gives the fact its number (the appender's job).
    pub fn set_n(&mut self, number: u64) {
        match self {
            Fact::Start { n, .. }
            | Fact::Call { n, .. }
            | Fact::Reply { n, .. }
            | Fact::Close { n, .. }
            | Fact::Checkpoint { n, .. }
            | Fact::End { n, .. } => *n = number,
        }
    }

    /// The fact with number `n`.
    pub fn numbered(mut self, n: u64) -> Fact {
        self.set_n(n);
        self
    }

    /// The one value the fact carries, if any, to read or change in place:
    /// Start `input`, Call `args`, a Reply's `Ok` or `Failed` value,
    /// Checkpoint `state`, a completed End's `output` (DESIGN §3, the
    /// positions a store keeps as blobs).
    pub fn value_mut(&mut self) -> Option<&mut Json> {
        match self {
            Fact::Start { input: v, .. }
            | Fact::Call { args: v, .. }
            | Fact::Reply {
                outcome: Outcome::Ok(v) | Outcome::Failed(v),
                ..
            }
            | Fact::Checkpoint { state: v, .. }
            | Fact::End {
                ending: Ending::Completed { output: v, .. },
                ..
            } => Some(v),
            _ => None,
        }
    }

    /// The one value the fact carries, if any (see [`Fact::value_mut`]).
    pub fn value(&self) -> Option<&Json> {
        match self {
            Fact::Start { input: v, .. }
            | Fact::Call { args: v, .. }
            | Fact::Reply {
                outcome: Outcome::Ok(v) | Outcome::Failed(v),
                ..
            }
            | Fact::Checkpoint { state: v, .. }
            | Fact::End {
                ending: Ending::Completed { output: v, .. },
                ..
            } => Some(v),
            _ => None,
        }
    }

    /// The source of `module` a Start lists.
    pub fn source(&self, module: &str) -> Option<&Source> {
        match self {
            Fact::Start { sources, .. } => sources.iter().find(|s| s.module == module),
            _ => None,
        }
    }

    /// The call a Call, Reply or Close names.
    pub fn call(&self) -> Option<&CallId> {
        match self {
            Fact::Call { call, .. } | Fact::Reply { call, .. } | Fact::Close { call, .. } => {
                Some(call)
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests;
