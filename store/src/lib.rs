//! flow-store: the home of every history (DESIGN §3, §6 "Run archives").
//!
//! Owns the fact log, content-addressed blobs, the hash chain, the runs index,
//! discovery, host records and archives. It never interprets a program and
//! depends only on flow-abi.
//!
//! * [`api`]: the narrow traits ([`AppendFacts`], [`ReadHistory`],
//!   [`Discover`], [`HostRecords`], [`ImportRuns`], [`Subscribe`]) and their
//!   types; [`SqliteStore`] and [`PostgresStore`] (feature `postgres`, on by
//!   default) implement them all.
//! * [`merkle`]: values over 1 KiB become blake3 blobs, innermost first.
//! * [`checkpoint`]: checkpoints cost O(what changed).
//! * [`archive`]: export, verified import, inspection of archive directories.
//! * [`seal`]: encryption at rest of the columns that hold values.
//! * [`workers`]: the queue of Tool calls for remote workers.
//! * [`conformance`]: the suite every backend runs.

pub mod api;
pub mod archive;
pub mod checkpoint;
pub mod conformance;
mod error;
pub mod fact;
pub mod hash;
mod id;
mod index;
mod listing;
pub mod merkle;
mod migrate;
mod namespace;
#[cfg(feature = "postgres")]
pub mod postgres;
mod prepare;
mod read;
pub mod redact;
mod run_counts;
pub mod seal;
pub mod search;
pub mod sqlite;
mod step;
pub mod tail;
mod verify;
pub mod view;
mod waiting;
pub mod workers;

pub use api::*;
pub use archive::{
    ExportSummary, Layout, TornTail, VerifiedArchive, archive_layout, export_run,
    export_run_redacted, export_runs, host_jsonl, import_run, import_runs, inspect_archives,
    lineage_runs, read_archive, read_archives,
};
pub use error::{Error, Result};
pub use fact::FactKind;
pub use flow_abi::fact::{Fact, RunId};
pub use id::GenerateRunId;
#[cfg(feature = "postgres")]
pub use postgres::{PostgresOptions, PostgresStore};
pub use seal::{Keyring, Sealer};
pub use sqlite::{SqliteOptions, SqliteStore, Synchronous};
pub use workers::{
    Claimed, QueueNote, QueueObserver, RemoteCall, RemoteCallState, ServedTool, WorkerInfo,
    WorkerQueue,
};

/// The Start entry of a source text: `(hash, length)` with `hash` =
/// `blake3:<hex>` of its UTF-8 bytes and `length` its code points.
pub fn source_ref(text: &str) -> (String, u64) {
    (
        hash::hash_text(&hash::blob_hash(text.as_bytes())),
        text.chars().count() as u64,
    )
}
