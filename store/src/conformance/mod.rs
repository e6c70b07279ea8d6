//! The conformance suite every backend runs (STYLE rule 4: "One conformance
//! suite runs against every backend"). A backend's test calls
//! [`run_suite`] with a factory that makes a fresh, empty store and a
//! scratch directory for archives; every case reports a failure as text
//! rather than panicking.

use crate::api::*;
use crate::archive::{export_run, import_run};
use crate::error::Error;
use crate::source_ref;
use flow_abi::fact::{CallId, Ending as FactEnding, Entry, Fact, RunId, Source};
use flow_abi::protocol::Outcome;
use serde_json::{Value, json};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

type Case<B> = fn(&mut dyn FnMut() -> B, &Path) -> Result<(), String>;

macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+));
        }
    };
}

fn e<T: std::fmt::Display>(x: T) -> String {
    x.to_string()
}

mod archive;
mod changes;
mod counts;
mod delete;
mod discovery;
mod facts;
mod history;
mod leases;
mod live;
mod namespaces;
mod recoveries;
mod redact;
mod waiting;
mod workers;

use archive::*;
use changes::*;
use counts::run_counts;
use delete::deletion;
pub use delete::{blob_refs_in, fork_start, run_blobs};
use discovery::*;
pub use facts::*;
use history::*;
use leases::*;
use live::*;
use namespaces::namespaces;
use recoveries::recoveries;
use redact::holes;
use waiting::waiting_calls;
use workers::*;

/// Every case, by name.
pub fn cases<B: Backend + Sync>() -> Vec<(&'static str, Case<B>)> {
    vec![
        ("round_trip", round_trip::<B>),
        ("create_with_first_facts", create_with_first_facts::<B>),
        ("refusals_change_nothing", refusals_change_nothing::<B>),
        (
            "merkle_values_and_escaping",
            merkle_values_and_escaping::<B>,
        ),
        ("checkpoint_states", checkpoint_states::<B>),
        ("checkpoints_by_change", checkpoints_by_change::<B>),
        (
            "discovery_cursor_and_limit",
            discovery_cursor_and_limit::<B>,
        ),
        (
            "host_records_and_decisions",
            host_records_and_decisions::<B>,
        ),
        (
            "host_records_ride_with_facts",
            host_records_ride_with_facts::<B>,
        ),
        ("children_by_index", children_by_index::<B>),
        ("live_tail", live_tail::<B>),
        ("history_pages", history_pages::<B>),
        ("archive_round_trip", archive_round_trip::<B>),
        ("archive_several_runs", archive_several_runs::<B>),
        ("concurrent_runs", concurrent_runs::<B>),
        ("leases", leases::<B>),
        ("workers", workers::<B>),
        ("deletion", deletion::<B>),
        ("holes", holes::<B>),
        ("waiting_calls", waiting_calls::<B>),
        ("recoveries", recoveries::<B>),
        ("run_counts", run_counts::<B>),
        ("namespaces", namespaces::<B>),
    ]
}

/// Runs every case on fresh stores; returns the failures (empty = pass).
pub fn run_suite<B: Backend + Sync>(factory: &mut dyn FnMut() -> B, scratch: &Path) -> Vec<String> {
    let mut failures = Vec::new();
    for (name, case) in cases::<B>() {
        let dir = scratch.join(name);
        if let Err(msg) = case(factory, &dir) {
            failures.push(format!("{name}: {msg}"));
        }
    }
    failures
}
