//! Walking a history's rows: each checked (numbering, canonical form,
//! envelope, chain, blobs) as it is read, parsed ahead on a thread of its
//! own when the history is long.

use super::logical;
use super::*;

/// Verifies the rows of one run from `prev` on: numbering, canonical form,
/// envelope, chain, and every blob a fact uses.
pub(super) struct RowChecker<'a> {
    pub(super) run: &'a RunId,
    pub(super) prev: [u8; 32],
    pub(super) expected: u64,
    pub(super) ended: bool,
    pub(super) blobs: BlobVerifier,
    /// The run's holes, given to `blobs` before the first fact with a
    /// reference is checked.
    pub(super) holes: Option<logical::RunHoles>,
}

impl<'a> RowChecker<'a> {
    /// A checker of run `run` (key `key`) from fact `expected`, chained
    /// on `prev`.
    pub(super) fn new(run: &'a RunId, key: i64, prev: [u8; 32], expected: u64) -> RowChecker<'a> {
        RowChecker {
            run,
            prev,
            expected,
            ended: false,
            blobs: BlobVerifier::default(),
            holes: Some(logical::RunHoles::new(key)),
        }
    }
}

/// A row that checked out, its hash not yet written as text.
pub(super) struct CheckedRow {
    pub(super) n: u64,
    pub(super) hash: [u8; 32],
    pub(super) fact: Checked,
    pub(super) body: String,
}

impl CheckedRow {
    pub(super) fn into_stored(self) -> StoredFact {
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
pub(super) struct Ahead {
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
    pub(super) fn admit(
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
        // A fact read as logical has no reference (verify.rs).
        if let Checked::Stored(r) = &mut fact {
            if let Some(holes) = self.holes.take() {
                self.blobs.add_holes(holes.read(db)?);
            }
            let mut load = |hash: &[u8; 32]| db.load_blob(hash);
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
            let mut load = |hash: &[u8; 32]| db.load_blob(hash);
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

/// A visit of [`walk_stored`]: the database (for blobs), the row that
/// checked out, and where to put what it is done with.
pub(super) type StoredVisit<'a> =
    dyn FnMut(&mut dyn ReadDb, CheckedRow, &mut Vec<Fact>) -> Result<bool> + 'a;

/// The verified history, each stored fact handed to `visit` (with the
/// database, for its blobs) once its own row checks out: numbered in
/// order, canonical, chained to the one before, its blobs matching. The
/// whole-history checks (as many facts as the runs index says, ending at
/// its hash) come after the last; a visit that answers false ends the walk
/// without them. One parsed fact is held at a time. A visit puts what it
/// is done with in `spent`, to be dropped by the thread that parsed it
/// (a block freed by the thread that made it goes straight back to that
/// thread's free list, not through the allocator's cross-thread path).
pub(super) fn walk_stored(
    db: &mut dyn ReadDb,
    run: &RunId,
    visit: &mut StoredVisit<'_>,
) -> Result<()> {
    let RunRow { key, info } = run_row(db, run)?;
    let first = db.facts_after(key, 0, READ_WINDOW)?;
    let mut checker = RowChecker::new(run, key, chain_start(run.as_str()), 1);
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
