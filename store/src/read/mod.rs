//! Verified reads, written once for every backend (DESIGN §3: "Reading a
//! history verifies the chain and every blob it uses; a mismatch is a
//! storage failure naming the fact").
//!
//! A backend implements [`ReadDb`]: a handful of plain queries on one
//! consistent snapshot. Everything a read checks — numbering, canonical
//! form, envelope, chain, blobs, the runs index agreeing with the facts,
//! checkpoint deltas — lives here, so SQLite and Postgres verify exactly
//! alike.

use crate::api::*;
use crate::checkpoint::{CkptCache, MAX_DELTA_CHAIN, apply_delta, delta_of};
use crate::error::{Error, Result};
use crate::fact::FactKind;
use crate::fact::ReadStored;
use crate::hash::{blob_hash, chain_next, chain_start, from_column, hash_text, parse_hash};
use crate::index::{DiscoveryColumns, HostColumns, RunColumns, RunRow, discovery_page};
use crate::merkle::{self, BlobVerifier};
use crate::verify::{Checked, check_stored, check_stored_fact};
use flow_abi::fact::{Fact, RunId};
use serde_json::Value;
use std::collections::HashMap;

/// One facts row: `(n, kind, hash, body)`, the kind `None` when its
/// column names no kind and the hash `None` when its column is not 32
/// bytes (both then fail the row's checks), so a row costs one allocation,
/// its body.
pub(crate) type FactRow = (i64, Option<FactKind>, Option<[u8; 32]>, String);

/// The queries a backend answers, all on one snapshot. A row that cannot
/// be decoded is `Err(reason)` in place (reported as a storage failure
/// naming the fact); a failing query is the backend's error.
pub(crate) trait ReadDb {
    fn run_columns(&mut self, run: &RunId) -> Result<Option<RunColumns>>;
    /// Facts of run `key` numbered above `after`, in order, at most `limit`.
    fn facts_after(
        &mut self,
        key: i64,
        after: u64,
        limit: u32,
    ) -> Result<Vec<Result<FactRow, String>>>;
    /// Facts numbered `from..=to`, in order.
    fn fact_range(&mut self, key: i64, from: u64, to: u64) -> Result<Vec<Result<FactRow, String>>>;
    fn fact_hash(&mut self, key: i64, n: u64) -> Result<Option<Vec<u8>>>;
    /// The number of run `key`'s latest Checkpoint.
    fn last_checkpoint(&mut self, key: i64) -> Result<Option<u64>>;
    fn load_blob(&mut self, hash: &[u8; 32]) -> Result<Option<Vec<u8>>>;
    /// The holes of run `key` (migration 0018): blobs it may not read.
    fn holes(&mut self, key: i64) -> Result<Vec<[u8; 32]>>;
    /// Whether a run of one of `namespaces` references the blob (its
    /// `blob_refs` rows, by the hash index, each run's by its key).
    fn blob_referenced_in(&mut self, hash: &[u8; 32], namespaces: &[Namespace]) -> Result<bool>;
    /// A hint: the blobs these stored values reference are about to be
    /// loaded (a backend with costly round trips fetches them together).
    fn prefetch(&mut self, _values: &[&Value]) -> Result<()> {
        Ok(())
    }
    /// A hint: the runs rows, the facts `(run, n)` and their predecessors'
    /// hashes are about to be read (a backend with costly round trips
    /// fetches them together: the inbox page's calls).
    fn prefetch_calls(&mut self, _at: &[(RunId, u64)]) -> Result<()> {
        Ok(())
    }
    /// The run's host records in seq order, those `page` takes.
    fn host_columns(&mut self, key: i64, page: HostPage) -> Result<Vec<HostColumns>>;
    /// Up to `limit + 1` runs with an id above `after` (and the state), by
    /// id; the extra row only tells that more exist, so it needs no
    /// decision.
    fn discovery_columns(
        &mut self,
        after: &str,
        limit: u32,
        state: Option<RunState>,
    ) -> Result<Vec<DiscoveryColumns>>;
    /// How this backend spells the run query's SQL.
    fn dialect(&self) -> crate::listing::Dialect;
    /// The ids a run query's page SQL selects, in its order.
    fn query_ids(&mut self, sql: &crate::listing::Sql) -> Result<Vec<String>>;
    /// The listing rows of these runs, in this order (an id without a row
    /// is left out), each with its latest pause or halt record.
    fn listing_rows(&mut self, ids: &[String]) -> Result<Vec<crate::listing::ListingColumns>>;
    /// `(group, count)` rows of a run query's count SQL.
    fn group_counts(&mut self, sql: &crate::listing::Sql) -> Result<Vec<(Option<String>, i64)>>;
    /// The `waiting_calls` rows a waiting calls page's SQL selects.
    fn waiting_rows(&mut self, sql: &crate::listing::Sql) -> Result<Vec<waiting::WaitingColumns>>;
    /// Ids of the runs whose row changed at or after `since_ms`, oldest
    /// change first, at most `limit`.
    fn changed_ids(&mut self, since_ms: i64, limit: u32) -> Result<Vec<String>>;
    /// Up to `limit` runs whose `parent_run` or `outer_run` is `run`, by id.
    fn child_columns(&mut self, run: &str, limit: u32)
    -> Result<Vec<crate::listing::ChildColumns>>;
}

fn run_row(db: &mut dyn ReadDb, run: &RunId) -> Result<RunRow> {
    db.run_columns(run)?
        .ok_or_else(|| Error::UnknownRun(run.to_string()))?
        .check(run)
}

/// The run's holes (`blake3:<hex>`), in hash order.
pub(crate) fn holes(db: &mut dyn ReadDb, run: &RunId) -> Result<Vec<String>> {
    let key = run_key(db, run)?;
    let mut holes = db.holes(key)?;
    holes.sort_unstable();
    Ok(holes.iter().map(hash_text).collect())
}

/// The run's key in its backend (the `run_key` of its rows).
pub(crate) fn run_key(db: &mut dyn ReadDb, run: &RunId) -> Result<i64> {
    Ok(run_row(db, run)?.key)
}

pub(crate) fn run_info(db: &mut dyn ReadDb, run: &RunId) -> Result<RunInfo> {
    Ok(run_row(db, run)?.info)
}

pub(crate) fn read_history(db: &mut dyn ReadDb, run: &RunId) -> Result<History> {
    let mut facts = Vec::new();
    walk_stored(db, run, &mut |_, f, _| {
        facts.push(f.into_stored());
        Ok(true)
    })?;
    Ok(History {
        run: run.clone(),
        facts,
    })
}

pub(crate) fn read_after(
    db: &mut dyn ReadDb,
    run: &RunId,
    after: u64,
    limit: u32,
) -> Result<Vec<StoredFact>> {
    let RunRow { key, info } = run_row(db, run)?;
    if after >= info.last_fact.n {
        return Ok(Vec::new());
    }
    let prev = if after == 0 {
        chain_start(run.as_str())
    } else {
        let h = db.fact_hash(key, after)?;
        h.as_deref().and_then(from_column).ok_or_else(|| {
            Error::corrupt(
                run.as_str(),
                after,
                "fact is missing or its hash is malformed",
            )
        })?
    };
    let rows = db.facts_after(key, after, limit.max(1))?;
    let mut checker = RowChecker::new(run, key, prev, after + 1);
    let mut facts = Vec::with_capacity(rows.len());
    for row in rows {
        facts.push(checker.admit(db, row, None)?.into_stored());
    }
    Ok(facts)
}

/// [`blob`] for a caller that sees only `namespaces`: a blob no run of
/// theirs references is unknown to it, as one never stored.
pub(crate) fn blob_in(db: &mut dyn ReadDb, hash: &str, namespaces: &Namespaces) -> Result<Vec<u8>> {
    if let Some(names) = namespaces.listed() {
        let h = parse_hash(hash)
            .ok_or_else(|| Error::InvalidArgument(format!("not a blob hash: {hash:?}")))?;
        if !db.blob_referenced_in(&h, names)? {
            return Err(Error::UnknownBlob(hash.to_string()));
        }
    }
    blob(db, hash)
}

pub(crate) fn blob(db: &mut dyn ReadDb, hash: &str) -> Result<Vec<u8>> {
    let h = parse_hash(hash)
        .ok_or_else(|| Error::InvalidArgument(format!("not a blob hash: {hash:?}")))?;
    let bytes = db
        .load_blob(&h)?
        .ok_or_else(|| Error::UnknownBlob(hash.to_string()))?;
    if blob_hash(&bytes) != h {
        return Err(Error::CorruptBlob {
            hash: hash.to_string(),
            reason: "content does not match its hash".into(),
        });
    }
    Ok(bytes)
}

/// Which of a run's host records a read takes: those after the seq
/// `after` (0: from the first), at most `limit` (`None`: all).
#[derive(Clone, Copy, Debug)]
pub(crate) struct HostPage {
    pub after: i64,
    pub limit: Option<u32>,
}

impl HostPage {
    pub(crate) const ALL: HostPage = HostPage {
        after: 0,
        limit: None,
    };

    /// `limit` as an SQL integer; `None`: no limit (Postgres's
    /// `LIMIT NULL`; SQLite takes a negative one).
    pub(crate) fn sql_limit(self) -> Option<i64> {
        self.limit.map(i64::from)
    }
}

pub(crate) fn host_records(db: &mut dyn ReadDb, run: &RunId) -> Result<Vec<HostRecordRow>> {
    let RunRow { key, .. } = run_row(db, run)?;
    db.host_columns(key, HostPage::ALL)?
        .into_iter()
        .map(|c| c.check(run))
        .collect()
}

/// Host records read at a time by [`start_records`].
const START_PAGE: u32 = 16;

/// The host records made with `run`'s Start (their head is fact 1: where
/// its program was read from, the `--tools` that bound it), read a page at
/// a time in seq order up to the first record made later: what a fork
/// binds by costs the same whatever the length of the run's history.
pub(crate) fn start_records(db: &mut dyn ReadDb, run: &RunId) -> Result<Vec<HostRecordRow>> {
    let RunRow { key, .. } = run_row(db, run)?;
    let (mut out, mut after) = (Vec::new(), 0);
    loop {
        let page = db.host_columns(
            key,
            HostPage {
                after,
                limit: Some(START_PAGE),
            },
        )?;
        let full = page.len() == START_PAGE as usize;
        for c in page {
            if c.head_n != 1 {
                return Ok(out);
            }
            after = c.seq;
            out.push(c.check(run)?);
        }
        if !full {
            return Ok(out);
        }
    }
}

mod discovery;
mod logical;
pub(crate) mod waiting;
mod walk;

pub(crate) use discovery::{discover, verify_ends};
use logical::linked_fact_hashed;
pub(crate) use logical::{
    OnHole, checkpoint_state, checkpoint_state_with, expand, latest_checkpoint, stored_value,
    walk_logical,
};
use walk::{RowChecker, walk_stored};
