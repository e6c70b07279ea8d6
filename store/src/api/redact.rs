//! Holes: redacting values of a stored run after the fact (issue 40 item
//! 2, docs/custody.md "Holes"): the trait, what a redaction is asked and
//! what it did, and its audit log.

use crate::error::Result;
use crate::redact::ValuePath;
use flow_abi::fact::RunId;
use serde::Serialize;

/// Who redacts and what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Redaction {
    /// Recorded in the audit log: a token's tag, `cli`, `http`.
    pub who: String,
    /// The values to make holes: paths into the run's facts or blob hashes.
    pub targets: Vec<ValuePath>,
}

/// What a redaction did; also a row of the audit log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Redacted {
    /// The audit log's sequence number of this redaction.
    pub seq: u64,
    pub run: String,
    pub who: String,
    /// When (the store's clock, unix ms).
    pub at_ms: i64,
    /// The targets asked for, as given.
    pub paths: Vec<String>,
    /// The blobs that are holes of the run now (`blake3:<hex>`): those the
    /// targets reach and every blob nested in them.
    pub hashes: Vec<String>,
    /// Blobs removed: those no other run referenced.
    pub blobs_removed: u64,
}

/// Redaction and its audit log. A redaction turns the value blobs the
/// targets reach into holes of the run: its facts keep their references
/// (the chain covers only those), its reads show a hole marker in their
/// place, a read that needs the value is refused with
/// [`crate::Error::Hole`], and each blob no other run references is
/// deleted, in one transaction with the audit row. A `running` run, or
/// one whose lease is live, is refused.
pub trait Redact {
    /// Redacts `how.targets` of `run`; [`crate::Error::UnknownRun`] when
    /// there is none, [`crate::Error::InvalidArgument`] for a target that
    /// reaches no blob of the run (nothing changes).
    fn redact(&self, run: &RunId, how: &Redaction) -> Result<Redacted>;
    /// The audit log after `after` (a sequence number), oldest first, at
    /// most `limit`.
    fn redactions(&self, after: u64, limit: u32) -> Result<Vec<Redacted>>;
    /// The blobs a redaction of `targets` would make holes, changing
    /// nothing (`flow export --redact`); refused as [`Redact::redact`]
    /// refuses them.
    fn reached(&self, run: &RunId, targets: &[ValuePath]) -> Result<Vec<[u8; 32]>>;
}
