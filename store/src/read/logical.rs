//! Logical reads: values with their references loaded, Checkpoint
//! states with their deltas applied, and the walk replay takes.

use super::*;
use std::cell::Cell;
use std::collections::HashSet;

/// Loads and checks one value blob's stored form.
pub(crate) fn stored_value(db: &mut dyn ReadDb, h: &[u8; 32]) -> Result<Value> {
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

/// A stored value of `run` with every reference loaded and verified, and
/// each of the run's holes shown as its marker ([`merkle::hole_marker`]):
/// the read of a page, a fact or a call to show, never of a value to
/// continue from.
pub(crate) fn expand(db: &mut dyn ReadDb, run: &RunId, stored: &Value) -> Result<Value> {
    let RunRow { key, .. } = run_row(db, run)?;
    let holes = RunHoles::new(key).read(db)?;
    db.prefetch(&[stored])?;
    let marked = merkle::mark_holes(stored.clone(), &holes);
    merkle::expand_owned(marked, &mut |h| {
        stored_value(db, h).map(|v| merkle::mark_holes(v, &holes))
    })
}

/// A run's holes (migration 0018), read when a read first needs a blob:
/// a fact with no reference (most facts) costs no query.
pub(super) struct RunHoles {
    key: i64,
    set: Option<HashSet<[u8; 32]>>,
}

impl RunHoles {
    pub(super) fn new(key: i64) -> RunHoles {
        RunHoles { key, set: None }
    }

    /// The holes, read once.
    pub(super) fn get(&mut self, db: &mut dyn ReadDb) -> Result<&HashSet<[u8; 32]>> {
        if self.set.is_none() {
            self.set = Some(db.holes(self.key)?.into_iter().collect());
        }
        Ok(self.set.get_or_insert_with(HashSet::new))
    }

    /// The holes, owned.
    pub(super) fn read(mut self, db: &mut dyn ReadDb) -> Result<HashSet<[u8; 32]>> {
        self.get(db)?;
        Ok(self.set.unwrap_or_default())
    }
}

/// Loads value blob `h` for a read that needs the value: a hole of the
/// run is [`Error::Hole`] at fact `n`, kept in `hit` as well so that it
/// survives the callers that turn errors into text.
fn needed_value(
    db: &mut dyn ReadDb,
    holes: &mut RunHoles,
    (run, n): (&RunId, u64),
    h: &[u8; 32],
    hit: &Cell<Option<Error>>,
) -> Result<Value> {
    if holes.get(db)?.contains(h) {
        let hole = || Error::Hole {
            run: run.to_string(),
            n,
            hash: hash_text(h),
        };
        hit.set(Some(hole()));
        return Err(hole());
    }
    stored_value(db, h)
}

/// The error of a read at fact `n`: the hole it met, else a storage
/// failure naming the fact.
fn at_fact(run: &RunId, n: u64, hit: &Cell<Option<Error>>, e: impl std::fmt::Display) -> Error {
    hit.take()
        .unwrap_or_else(|| Error::corrupt(run.as_str(), n, e.to_string()))
}

/// The verified history as logical facts, in one walk, each handed to
/// `visit` as it is made (which stops the walk by answering false), so a
/// walk holds one Checkpoint's whole state at a time, not every one: each
/// distinct blob is loaded and checked once, and a Checkpoint stored as a delta against
/// the Checkpoint before it (as writers store them) is rebuilt from that
/// one's state, already in hand (and handed on with what its delta
/// changed); any other base is read as [`checkpoint_state`] reads it.
/// A fact that needs a hole's value ends the walk with [`Error::Hole`],
/// after the facts before it.
pub(crate) fn walk_logical(db: &mut dyn ReadDb, run: &RunId, visit: &mut Visit<'_>) -> Result<()> {
    let mut loaded: HashMap<[u8; 32], Value> = HashMap::new();
    let mut last: Option<(u64, Value)> = None;
    let mut holes = RunHoles::new(run_row(db, run)?.key);
    let hit = Cell::new(None);
    walk_stored(db, run, &mut |db, f, spent| {
        let n = f.n;
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
                    let v = needed_value(db, &mut holes, (run, n), h, &hit)?;
                    loaded.insert(*h, v.clone());
                    Ok(v)
                };
                // The fact's value with its references loaded; a delta's
                // state built on the Checkpoint before it, in hand (any
                // other base is read back).
                if let Some(v) = fact.value_mut() {
                    *v = match delta {
                        None => merkle::expand_owned(std::mem::take(v), &mut |h| blob(h, db))
                            .map_err(|e| at_fact(run, n, &hit, e))?,
                        Some(d) => match last.take() {
                            Some((b, mut state)) if base == Some(b) => {
                                change = Some(
                                    apply_delta(&mut state, &d, &mut |v| {
                                        merkle::expand(v, &mut |h| blob(h, db))
                                    })
                                    .map_err(|e| at_fact(run, n, &hit, e))?,
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

/// What a read of a value does at one of the run's holes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnHole {
    /// Fails with [`Error::Hole`]: the value is needed.
    Refuse,
    /// Shows the hole's marker: the value is shown, or is to be supplied.
    Show,
}

/// The logical state of Checkpoint `n`; a hole in it is refused.
pub(crate) fn checkpoint_state(db: &mut dyn ReadDb, run: &RunId, n: u64) -> Result<Value> {
    checkpoint_state_with(db, run, n, OnHole::Refuse)
}

/// The logical state of Checkpoint `n`, each hole as `on_hole` says.
pub(crate) fn checkpoint_state_with(
    db: &mut dyn ReadDb,
    run: &RunId,
    n: u64,
    on_hole: OnHole,
) -> Result<Value> {
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
    let (mut holes, hit) = (RunHoles::new(key), Cell::new(None));
    let shown = match on_hole {
        OnHole::Show => Some(RunHoles::new(key).read(db)?),
        OnHole::Refuse => None,
    };
    let mut value = |v: &Value| -> Result<Value> {
        match &shown {
            Some(set) => merkle::expand_owned(merkle::mark_holes(v.clone(), set), &mut |h| {
                stored_value(db, h).map(|x| merkle::mark_holes(x, set))
            }),
            None => merkle::expand(v, &mut |h| needed_value(db, &mut holes, (run, n), h, &hit)),
        }
    };
    let (snap_n, snap) = chain
        .pop()
        .ok_or_else(|| Error::corrupt(run.as_str(), n, "no snapshot"))?;
    let stored_state = snap
        .get("state")
        .ok_or_else(|| Error::corrupt(run.as_str(), snap_n, "checkpoint has no state"))?;
    let mut state = value(stored_state).map_err(|e| at_fact(run, snap_n, &hit, e))?;
    while let Some((dn, fact)) = chain.pop() {
        let d = match delta_of(&fact) {
            Some(Ok((_, d))) => d,
            _ => return Err(Error::corrupt(run.as_str(), dn, "malformed delta")),
        };
        apply_delta(&mut state, d, &mut |v| value(v)).map_err(|e| at_fact(run, dn, &hit, e))?;
    }
    Ok(state)
}

/// Fact `n`, checked against its predecessor's recorded hash.
fn linked_fact(db: &mut dyn ReadDb, key: i64, run: &RunId, n: u64) -> Result<(Value, FactKind)> {
    linked_fact_hashed(db, key, run, n).map(|(fact, kind, _)| (fact, kind))
}

/// [`linked_fact`] with the fact's chain hash.
pub(super) fn linked_fact_hashed(
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
