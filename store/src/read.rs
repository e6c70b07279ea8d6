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
    /// A hint: the blobs these stored values reference are about to be
    /// loaded (a backend with costly round trips fetches them together).
    fn prefetch(&mut self, _values: &[&Value]) -> Result<()> {
        Ok(())
    }
    fn host_columns(&mut self, key: i64) -> Result<Vec<HostColumns>>;
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

pub(crate) fn run_info(db: &mut dyn ReadDb, run: &RunId) -> Result<RunInfo> {
    Ok(run_row(db, run)?.info)
}

/// Verifies the rows of one run from `prev` on: numbering, canonical form,
/// envelope, chain, and every blob a fact uses.
struct RowChecker<'a> {
    run: &'a RunId,
    prev: [u8; 32],
    expected: u64,
    ended: bool,
    blobs: BlobVerifier,
}

/// A row that checked out, its hash not yet written as text.
struct CheckedRow {
    n: u64,
    hash: [u8; 32],
    fact: Checked,
    body: String,
}

impl CheckedRow {
    fn into_stored(self) -> StoredFact {
        let (fact, delta) = match self.fact {
            Checked::Logical(fact) => (fact, None),
            Checked::Stored(ReadStored { fact, delta }) => (fact, delta),
        };
        StoredFact {
            n: self.n,
            hash: hash_text(&self.hash),
            fact,
            delta,
            body: self.body,
        }
    }
}

/// A row as far as it was read ahead of its turn: what [`check_stored`]
/// made of its text, and its chain hash computed from the hash column of
/// the row before (`(prev, hash)`), which is the fact's own chain hash
/// when `prev` is the hash the walk verified for that row.
struct Ahead {
    checked: std::result::Result<(Checked, FactKind), String>,
    chain: ([u8; 32], [u8; 32]),
}

/// Reads row `i` of a history's rows (fact `i + 1`) as far as it needs no
/// other row: its text parsed, canonical, a fact numbered `i + 1`, and its
/// chain hash from `prev` (the hash column of the row before, or the
/// chain's start), which it then sets to this row's column. `None` for a
/// row that could not be read.
fn read_ahead(
    run: &str,
    i: usize,
    row: &Result<FactRow, String>,
    prev: &mut [u8; 32],
) -> Option<Ahead> {
    let (_, _, hash_col, body) = row.as_ref().ok()?;
    let ahead = Ahead {
        checked: check_stored(run, i as u64 + 1, body),
        chain: (*prev, chain_next(prev, body)),
    };
    *prev = hash_col.unwrap_or([0; 32]);
    Some(ahead)
}

/// Rows at least this many are parsed on a thread of their own, ahead of
/// the checks that need the row before (chain, blobs) and of the visitor.
const PARSE_AHEAD_FROM: usize = 256;

/// Rows parsed ahead cross to the checking thread in batches this large.
const PARSE_BATCH: usize = 128;

/// A history is read this many rows at a time.
const READ_WINDOW: u32 = 2048;

/// Where the next window of rows starts, and whether there is one: not
/// after a short window, nor after a row that could not be read (the walk
/// ends there with that row's error).
struct Window {
    last: u64,
    more: bool,
}

impl Window {
    fn after(rows: &[Result<FactRow, String>]) -> Window {
        match rows.last() {
            Some(Ok(r)) => Window {
                last: r.0 as u64,
                more: rows.len() == READ_WINDOW as usize,
            },
            _ => Window {
                last: 0,
                more: false,
            },
        }
    }
}

impl RowChecker<'_> {
    /// Checks `row` as the next fact, `ahead` being what was read of it
    /// ahead of its turn (by [`read_ahead`], for the number this row must
    /// have), else read here.
    fn admit(
        &mut self,
        db: &mut dyn ReadDb,
        row: Result<FactRow, String>,
        ahead: Option<Ahead>,
    ) -> Result<CheckedRow> {
        let run = self.run.as_str();
        let n = self.expected;
        let (row_n, kind_col, hash_col, body) =
            row.map_err(|e| Error::corrupt(run, n, format!("row unreadable: {e}")))?;
        if row_n as u64 != n {
            return Err(Error::corrupt(
                run,
                n,
                format!("fact {n} is missing (the next row is {row_n})"),
            ));
        }
        if self.ended {
            return Err(Error::corrupt(run, n, "a fact follows End"));
        }
        let (checked, chain) = match ahead {
            Some(a) => (a.checked, Some(a.chain)),
            None => (check_stored(run, n, &body), None),
        };
        let (mut fact, kind) = checked.map_err(|reason| Error::corrupt(run, n, reason))?;
        if Some(kind) != kind_col {
            return Err(Error::corrupt(
                run,
                n,
                "the kind column differs from the fact",
            ));
        }
        let h = match chain {
            Some((prev, h)) if prev == self.prev => h,
            _ => chain_next(&self.prev, &body),
        };
        if hash_col != Some(h) {
            return Err(Error::corrupt(run, n, "the chain hash does not match"));
        }
        let mut load = |hash: &[u8; 32]| db.load_blob(hash);
        // A fact read as logical has no reference (verify.rs).
        if let Checked::Stored(r) = &mut fact {
            let value = r.fact.value_mut().map(|v| &*v);
            for v in value
                .into_iter()
                .chain(r.delta.iter().flat_map(|d| d.values()))
            {
                self.blobs
                    .verify_refs_in(v, &mut load)
                    .map_err(|reason| Error::corrupt(run, n, reason))?;
            }
        }
        if let Fact::Start { sources, .. } = fact.fact() {
            for s in sources {
                let hash = parse_hash(&s.hash)
                    .ok_or_else(|| Error::corrupt(run, n, "a source entry is malformed"))?;
                self.blobs
                    .verify_source(&hash, s.length, &mut load)
                    .map_err(|reason| Error::corrupt(run, n, reason))?;
            }
        }
        self.prev = h;
        self.expected += 1;
        self.ended = kind == FactKind::End;
        Ok(CheckedRow {
            n,
            hash: h,
            fact,
            body,
        })
    }
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

/// A visit of [`walk_stored`]: the database (for blobs), the row that
/// checked out, and where to put what it is done with.
type StoredVisit<'a> = dyn FnMut(&mut dyn ReadDb, CheckedRow, &mut Vec<Fact>) -> Result<bool> + 'a;

/// The verified history, each stored fact handed to `visit` (with the
/// database, for its blobs) once its own row checks out: numbered in
/// order, canonical, chained to the one before, its blobs matching. The
/// whole-history checks (as many facts as the runs index says, ending at
/// its hash) come after the last; a visit that answers false ends the walk
/// without them. One parsed fact is held at a time. A visit puts what it
/// is done with in `spent`, to be dropped by the thread that parsed it
/// (a block freed by the thread that made it goes straight back to that
/// thread's free list, not through the allocator's cross-thread path).
fn walk_stored(db: &mut dyn ReadDb, run: &RunId, visit: &mut StoredVisit<'_>) -> Result<()> {
    let RunRow { key, info } = run_row(db, run)?;
    let first = db.facts_after(key, 0, READ_WINDOW)?;
    let mut checker = RowChecker {
        run,
        prev: chain_start(run.as_str()),
        expected: 1,
        ended: false,
        blobs: BlobVerifier::default(),
    };
    let mut count = 0u64;
    let mut spent = Vec::new();
    let mut take = |db: &mut dyn ReadDb, row, ahead, spent: &mut Vec<Fact>| -> Result<bool> {
        let f = checker.admit(db, row, ahead)?;
        count += 1;
        visit(db, f, spent)
    };
    if first.len() < PARSE_AHEAD_FROM {
        for row in first {
            let more = take(db, row, None, &mut spent)?;
            spent.clear();
            if !more {
                return Ok(());
            }
        }
    } else {
        // Parsing is most of a read and needs no other row: a thread of
        // its own parses ahead, and hashes each row on the hash column of
        // the row before, while this one reads the next windows of rows,
        // checks numbering, that chain and the blobs, and hands the facts
        // to the visitor (replay's engine, on this thread too), whose
        // spent facts go back to the parser to drop. At most two windows
        // are read and not yet checked, so memory stays bounded.
        let whole = std::thread::scope(|scope| {
            let (rows_tx, rows_rx) = std::sync::mpsc::channel::<Vec<Result<FactRow, String>>>();
            let (tx, rx) = std::sync::mpsc::channel();
            let (spent_tx, spent_rx) = std::sync::mpsc::channel::<Vec<Fact>>();
            let name = run.as_str();
            scope.spawn(move || {
                let mut batch = Vec::with_capacity(PARSE_BATCH);
                let mut prev = chain_start(name);
                for (i, row) in rows_rx.into_iter().flatten().enumerate() {
                    let ahead = read_ahead(name, i, &row, &mut prev);
                    batch.push((row, ahead));
                    if batch.len() == PARSE_BATCH {
                        if tx
                            .send(std::mem::replace(
                                &mut batch,
                                Vec::with_capacity(PARSE_BATCH),
                            ))
                            .is_err()
                        {
                            return;
                        }
                        spent_rx.try_iter().for_each(drop);
                    }
                }
                let _ = tx.send(batch);
                // The checks end when `tx` is gone; until then, what they
                // are done with comes back here.
                drop(tx);
                spent_rx.into_iter().for_each(drop);
            });
            let mut window = Window::after(&first);
            let mut read = first.len();
            let _ = rows_tx.send(first);
            let mut rows_tx = Some(rows_tx);
            let mut checked = 0;
            loop {
                while window.more && read - checked < 2 * READ_WINDOW as usize {
                    let rows = db.facts_after(key, window.last, READ_WINDOW)?;
                    window = Window::after(&rows);
                    read += rows.len();
                    if let Some(t) = &rows_tx {
                        let _ = t.send(rows);
                    }
                }
                if !window.more {
                    // The parser ends after the last window.
                    rows_tx = None;
                }
                // Leaving early drops `rx`: the parser stops at its next batch.
                let Ok(batch) = rx.recv() else { break };
                for (row, ahead) in batch {
                    checked += 1;
                    if !take(db, row, ahead, &mut spent)? {
                        return Ok(false);
                    }
                }
                if !spent.is_empty() {
                    let _ = spent_tx.send(std::mem::take(&mut spent));
                }
            }
            Ok::<_, Error>(true)
        })?;
        if !whole {
            return Ok(());
        }
    }
    let last = info.last_fact.n;
    if count != last {
        let n = (count + 1).min(last.max(1));
        return Err(Error::corrupt(
            run.as_str(),
            n,
            format!("the history has {count} facts, the runs index says {last}"),
        ));
    }
    if hash_text(&checker.prev) != info.last_fact.hash {
        return Err(Error::corrupt(
            run.as_str(),
            last,
            "the last hash differs from the runs index",
        ));
    }
    Ok(())
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
    let mut checker = RowChecker {
        run,
        prev,
        expected: after + 1,
        ended: false,
        blobs: BlobVerifier::default(),
    };
    let mut facts = Vec::with_capacity(rows.len());
    for row in rows {
        facts.push(checker.admit(db, row, None)?.into_stored());
    }
    Ok(facts)
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

/// Loads and checks one value blob's stored form.
fn stored_value(db: &mut dyn ReadDb, h: &[u8; 32]) -> Result<Value> {
    let name = hash_text(h);
    let bad = |reason: &str| Error::CorruptBlob {
        hash: name.clone(),
        reason: reason.to_string(),
    };
    let bytes = db
        .load_blob(h)?
        .ok_or_else(|| Error::UnknownBlob(name.clone()))?;
    if blob_hash(&bytes) != *h {
        return Err(bad("content does not match its hash"));
    }
    let text = std::str::from_utf8(&bytes).map_err(|_| bad("not UTF-8"))?;
    let (v, canonical) = flow_abi::json::parse_checking_canonical(text)
        .map_err(|e| bad(&format!("not JSON: {e}")))?;
    if !canonical {
        return Err(bad("not canonical"));
    }
    Ok(v)
}

/// A stored value with every reference loaded and verified.
pub(crate) fn expand(db: &mut dyn ReadDb, stored: &Value) -> Result<Value> {
    db.prefetch(&[stored])?;
    merkle::expand(stored, &mut |h| stored_value(db, h))
}

/// The verified history as logical facts, in one walk, each handed to
/// `visit` as it is made (which stops the walk by answering false), so a
/// walk holds one Checkpoint's whole state at a time, not every one: each
/// distinct blob is loaded and checked once, and a Checkpoint stored as a delta against
/// the Checkpoint before it (as writers store them) is rebuilt from that
/// one's state, already in hand (and handed on with what its delta
/// changed); any other base is read as [`checkpoint_state`] reads it.
pub(crate) fn walk_logical(db: &mut dyn ReadDb, run: &RunId, visit: &mut Visit<'_>) -> Result<()> {
    let mut loaded: HashMap<[u8; 32], Value> = HashMap::new();
    let mut last: Option<(u64, Value)> = None;
    walk_stored(db, run, &mut |db, f, spent| {
        let corrupt = |e: &dyn std::fmt::Display| Error::corrupt(run.as_str(), f.n, e.to_string());
        let mut change = None;
        let mut fact = match f.fact {
            Checked::Logical(fact) => fact,
            Checked::Stored(r) => {
                let base = r.base();
                let ReadStored { mut fact, delta } = r;
                let mut blob = |h: &[u8; 32], db: &mut dyn ReadDb| {
                    if let Some(v) = loaded.get(h) {
                        return Ok(v.clone());
                    }
                    let v = stored_value(db, h)?;
                    loaded.insert(*h, v.clone());
                    Ok(v)
                };
                // The fact's value with its references loaded; a delta's
                // state built on the Checkpoint before it, in hand (any
                // other base is read back).
                if let Some(v) = fact.value_mut() {
                    *v = match delta {
                        None => merkle::expand_owned(std::mem::take(v), &mut |h| blob(h, db))
                            .map_err(|e| corrupt(&e))?,
                        Some(d) => match last.take() {
                            Some((b, mut state)) if base == Some(b) => {
                                change = Some(
                                    apply_delta(&mut state, &d, &mut |v| {
                                        merkle::expand(v, &mut |h| blob(h, db))
                                    })
                                    .map_err(|e| corrupt(&e))?,
                                );
                                state
                            }
                            _ => checkpoint_state(db, run, f.n)?,
                        },
                    };
                }
                fact
            }
        };
        let more = visit(&fact, change.as_ref());
        // The next delta's base: this state, moved out of the fact.
        if let Fact::Checkpoint { state, .. } = &mut fact {
            last = Some((f.n, std::mem::take(state)));
        }
        spent.push(fact);
        Ok(more)
    })
}

/// The run's latest Checkpoint read back, as the base of a Checkpoint given
/// by change when the writer keeps none (see `checkpoint.rs`).
pub(crate) fn latest_checkpoint(db: &mut dyn ReadDb, run: &RunId) -> Result<CkptCache> {
    let RunRow { key, .. } = run_row(db, run)?;
    let n = db.last_checkpoint(key)?.ok_or_else(|| {
        Error::InvalidFact(format!("{run} has no Checkpoint for a change to follow"))
    })?;
    Ok(CkptCache::reread(n, checkpoint_state(db, run, n)?))
}

pub(crate) fn checkpoint_state(db: &mut dyn ReadDb, run: &RunId, n: u64) -> Result<Value> {
    let RunRow { key, .. } = run_row(db, run)?;
    // Walk back from n to its snapshot, checking each fact's link to its
    // predecessor, then apply the deltas forward.
    let mut chain: Vec<(u64, Value)> = Vec::new();
    let mut at = n;
    loop {
        if chain.len() as u32 > MAX_DELTA_CHAIN + 1 {
            return Err(Error::corrupt(
                run.as_str(),
                n,
                "checkpoint delta chain is too long",
            ));
        }
        let (fact, kind) = linked_fact(db, key, run, at)?;
        if kind != FactKind::Checkpoint {
            return Err(if at == n {
                Error::InvalidArgument(format!("fact {n} of {run} is not a Checkpoint"))
            } else {
                Error::corrupt(run.as_str(), at, "a delta's base is not a Checkpoint")
            });
        }
        let base = match delta_of(&fact) {
            Some(d) => Some(
                d.map_err(|e| Error::corrupt(run.as_str(), at, e.to_string()))?
                    .0,
            ),
            None => None,
        };
        chain.push((at, fact));
        match base {
            Some(b) if b < at && b >= 1 => at = b,
            Some(_) => {
                return Err(Error::corrupt(
                    run.as_str(),
                    at,
                    "a delta's base does not precede it",
                ));
            }
            None => break,
        }
    }
    db.prefetch(&chain.iter().map(|(_, f)| f).collect::<Vec<_>>())?;
    let (snap_n, snap) = chain
        .pop()
        .ok_or_else(|| Error::corrupt(run.as_str(), n, "no snapshot"))?;
    let stored_state = snap
        .get("state")
        .ok_or_else(|| Error::corrupt(run.as_str(), snap_n, "checkpoint has no state"))?;
    let mut state = merkle::expand(stored_state, &mut |h| stored_value(db, h))
        .map_err(|e| Error::corrupt(run.as_str(), snap_n, e.to_string()))?;
    while let Some((dn, fact)) = chain.pop() {
        let d = match delta_of(&fact) {
            Some(Ok((_, d))) => d,
            _ => return Err(Error::corrupt(run.as_str(), dn, "malformed delta")),
        };
        apply_delta(&mut state, d, &mut |v| {
            merkle::expand(v, &mut |h| stored_value(db, h))
        })
        .map_err(|e| Error::corrupt(run.as_str(), dn, e))?;
    }
    Ok(state)
}

/// Fact `n`, checked against its predecessor's recorded hash.
fn linked_fact(db: &mut dyn ReadDb, key: i64, run: &RunId, n: u64) -> Result<(Value, FactKind)> {
    linked_fact_hashed(db, key, run, n).map(|(fact, kind, _)| (fact, kind))
}

/// [`linked_fact`] with the fact's chain hash.
fn linked_fact_hashed(
    db: &mut dyn ReadDb,
    key: i64,
    run: &RunId,
    n: u64,
) -> Result<(Value, FactKind, [u8; 32])> {
    let rows: Vec<FactRow> = db
        .fact_range(key, n.saturating_sub(1), n)?
        .into_iter()
        .collect::<Result<_, String>>()
        .map_err(|e| Error::corrupt(run.as_str(), n, format!("row unreadable: {e}")))?;
    let prev = if n == 1 {
        chain_start(run.as_str())
    } else {
        rows.iter()
            .find(|r| r.0 as u64 == n - 1)
            .and_then(|r| r.2)
            .ok_or_else(|| Error::corrupt(run.as_str(), n - 1, "fact is missing"))?
    };
    let (_, _, hash, body) = rows
        .iter()
        .find(|r| r.0 as u64 == n)
        .ok_or_else(|| Error::InvalidArgument(format!("run {run} has no fact {n}")))?;
    let (fact, kind) = check_stored_fact(run.as_str(), n, body)
        .map_err(|reason| Error::corrupt(run.as_str(), n, reason))?;
    let h = chain_next(&prev, body);
    if *hash != Some(h) {
        return Err(Error::corrupt(
            run.as_str(),
            n,
            "the chain hash does not match",
        ));
    }
    Ok((fact, kind, h))
}

pub(crate) fn host_records(db: &mut dyn ReadDb, run: &RunId) -> Result<Vec<HostRecordRow>> {
    let RunRow { key, .. } = run_row(db, run)?;
    db.host_columns(key)?
        .into_iter()
        .map(|c| c.check(run))
        .collect()
}

pub(crate) fn discover(db: &mut dyn ReadDb, q: &CheckedDiscovery) -> Result<DiscoveryPage> {
    let after = q.after.as_ref().map(RunId::as_str).unwrap_or("");
    let rows = db.discovery_columns(after, q.limit, q.state)?;
    let keys: Vec<i64> = rows.iter().map(|r| r.key).collect();
    let mut page = discovery_page(rows, q.limit);
    for (row, key) in page.runs.iter_mut().zip(keys) {
        verify_ends(db, key, row)?;
    }
    Ok(page)
}

/// DISC-13: "record is complete when the validated prefix ends in End". A
/// row of the runs index is not taken on its word: the run's Start and the
/// head fact the row reports (`lastFact`) are read and each checked against
/// its recorded chain hash (from its predecessor's), the head against the
/// index's hash, and its kind against the index's ending. A row that does
/// not hold is `unreadable`, its problem naming the fact, with nothing it
/// reported from the unverified facts (ending, lastFact, hostDecision, and
/// entry and program when Start fails). Backend failures are errors.
pub(crate) fn verify_ends(db: &mut dyn ReadDb, key: i64, row: &mut DiscoveryRow) -> Result<()> {
    if row.record == RecordStatus::Unreadable {
        return Ok(());
    }
    let Some(head) = row.last_fact.clone() else {
        return Ok(());
    };
    let run = match RunId::parse(&row.run) {
        Ok(r) => r,
        Err(e) => {
            unreadable(row, true, format!("the run id does not parse: {e}"));
            return Ok(());
        }
    };
    let verdict = |db: &mut dyn ReadDb, n: u64| match linked_fact_hashed(db, key, &run, n) {
        Ok(ok) => Ok(Ok(ok)),
        Err(e @ (Error::Corrupt { .. } | Error::InvalidArgument(_))) => Ok(Err(e.to_string())),
        Err(e) => Err(e),
    };
    match verdict(db, 1)? {
        Ok((_, FactKind::Start, _)) => {}
        Ok((_, kind, _)) => {
            let why = format!("fact 1 is a {}, not a Start", kind.as_str());
            unreadable(row, true, why);
            return Ok(());
        }
        Err(why) => {
            unreadable(row, true, why);
            return Ok(());
        }
    }
    let (kind, hash) = match verdict(db, head.n)? {
        Ok((_, kind, h)) => (kind, hash_text(&h)),
        Err(why) => {
            unreadable(row, false, why);
            return Ok(());
        }
    };
    let why = if hash != head.hash {
        format!(
            "fact {}: the runs index holds hash {}, the fact {hash}",
            head.n, head.hash
        )
    } else if (kind == FactKind::End) != row.ending.is_some() {
        format!(
            "fact {}: the runs index says the run {}, the fact is a {}",
            head.n,
            if row.ending.is_some() {
                "ended"
            } else {
                "has not ended"
            },
            kind.as_str()
        )
    } else {
        return Ok(());
    };
    unreadable(row, false, why);
    Ok(())
}

/// Marks a discovery row unreadable, dropping what the unverified facts
/// said (and what Start said, when `start` failed).
fn unreadable(row: &mut DiscoveryRow, start: bool, detail: String) {
    row.record = RecordStatus::Unreadable;
    row.ending = None;
    row.last_fact = None;
    row.host_decision = None;
    if start {
        row.entry = None;
        row.program = None;
    }
    row.problem = Some(Problem {
        component: "facts".into(),
        status: ProblemStatus::Unreadable,
        detail,
    });
}
