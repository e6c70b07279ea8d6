//! Verified reads on a pooled read connection. Each public function runs in
//! one short read transaction (a consistent snapshot).

use crate::api::*;
use crate::checkpoint::{MAX_DELTA_CHAIN, apply_delta, delta_of};
use crate::error::{Error, Result};
use crate::fact::FactKind;
use crate::hash::{blob_hash, chain_next, chain_start, from_column, hash_text, parse_hash};
use crate::id::RunId;
use crate::merkle::{self, BlobVerifier};
use crate::verify::check_stored_fact;
use flow_abi::json::canonical;
use rusqlite::{Connection, OptionalExtension, params};
use serde_json::Value;

/// Runs `f` inside a read transaction.
pub(super) fn snapshot<T>(
    conn: &mut Connection,
    f: impl FnOnce(&Connection) -> Result<T>,
) -> Result<T> {
    let tx = conn.transaction()?;
    let out = f(&tx);
    // Read-only: ending it cannot lose anything.
    let _ = tx.finish();
    out
}

pub(super) struct RunRow {
    pub(super) key: i64,
    pub(super) info: RunInfo,
}

pub(super) fn run_row(conn: &Connection, run: &RunId) -> Result<RunRow> {
    let row = conn
        .prepare_cached(
            "SELECT key, state, entry_module, entry_function, program, parent_run, parent_checkpoint, outer_run, outer_call, ending, last_n, last_hash, created_ms, updated_ms
             FROM runs WHERE id = ?1",
        )?
        .query_row([run.as_str()], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, String>(3)?,
                r.get::<_, String>(4)?,
                r.get::<_, Option<String>>(5)?,
                r.get::<_, Option<i64>>(6)?,
                r.get::<_, Option<String>>(7)?,
                r.get::<_, Option<String>>(8)?,
                r.get::<_, Option<String>>(9)?,
                r.get::<_, i64>(10)?,
                r.get::<_, Vec<u8>>(11)?,
                r.get::<_, i64>(12)?,
                r.get::<_, i64>(13)?,
            ))
        })
        .optional()?;
    let (
        key,
        state,
        module,
        function,
        program,
        prun,
        pck,
        orun,
        ocall,
        ending,
        last_n,
        last_hash,
        created_ms,
        updated_ms,
    ) = row.ok_or_else(|| Error::UnknownRun(run.to_string()))?;
    let last_n = last_n as u64;
    let corrupt = |what: &str| {
        Error::corrupt(
            run.as_str(),
            last_n,
            format!("the runs index holds a malformed {what}"),
        )
    };
    let state = RunState::parse(&state).ok_or_else(|| corrupt("state"))?;
    let hash = from_column(&last_hash).ok_or_else(|| corrupt("hash"))?;
    let ending = match ending.as_deref() {
        None => None,
        Some("completed") => Some(Ending::Completed),
        Some("faulted") => Some(Ending::Faulted),
        Some(_) => return Err(corrupt("ending")),
    };
    Ok(RunRow {
        key,
        info: RunInfo {
            run: run.clone(),
            state,
            entry: Entry { module, function },
            program,
            parent: prun.zip(pck.map(|c| c as u64)),
            outer: orun.zip(ocall),
            ending,
            last_fact: FactRef {
                n: last_n,
                hash: hash_text(&hash),
            },
            created_ms,
            updated_ms,
        },
    })
}

pub(super) fn run_info(conn: &mut Connection, run: &RunId) -> Result<RunInfo> {
    snapshot(conn, |c| Ok(run_row(c, run)?.info))
}

fn load_blob(conn: &Connection, hash: &[u8; 32]) -> Result<Option<Vec<u8>>> {
    Ok(conn
        .prepare_cached("SELECT body FROM blobs WHERE hash = ?1")?
        .query_row([&hash[..]], |r| r.get::<_, Vec<u8>>(0))
        .optional()?)
}

/// Verifies the rows of one run from `prev` on: numbering, canonical form,
/// envelope, chain, and every blob a fact uses (DESIGN §3: "Reading a history
/// verifies the chain and every blob it uses; a mismatch is a storage failure
/// naming the fact").
struct RowChecker<'a> {
    conn: &'a Connection,
    run: &'a RunId,
    prev: [u8; 32],
    expected: u64,
    ended: bool,
    blobs: BlobVerifier,
}

impl RowChecker<'_> {
    fn check(
        &mut self,
        row: rusqlite::Result<(i64, String, Vec<u8>, String)>,
    ) -> Result<StoredFact> {
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
        let (fact, kind) =
            check_stored_fact(run, n, &body).map_err(|reason| Error::corrupt(run, n, reason))?;
        if kind.as_str() != kind_col {
            return Err(Error::corrupt(
                run,
                n,
                "the kind column differs from the fact",
            ));
        }
        let h = chain_next(&self.prev, &body);
        if from_column(&hash_col) != Some(h) {
            return Err(Error::corrupt(run, n, "the chain hash does not match"));
        }
        let conn = self.conn;
        let mut load = |hash: &[u8; 32]| load_blob(conn, hash);
        self.blobs
            .verify_refs_in(&fact, &mut load)
            .map_err(|reason| Error::corrupt(run, n, reason))?;
        if kind == FactKind::Start {
            for s in fact
                .get("sources")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let hash = s.get("hash").and_then(Value::as_str).and_then(parse_hash);
                let len = s.get("length").and_then(Value::as_u64);
                let (Some(hash), Some(len)) = (hash, len) else {
                    return Err(Error::corrupt(run, n, "a source entry is malformed"));
                };
                self.blobs
                    .verify_source(&hash, len, &mut load)
                    .map_err(|reason| Error::corrupt(run, n, reason))?;
            }
        }
        self.prev = h;
        self.expected += 1;
        self.ended = kind == FactKind::End;
        Ok(StoredFact {
            n,
            kind,
            hash: hash_text(&h),
            fact,
        })
    }
}

pub(super) fn read_history(conn: &mut Connection, run: &RunId) -> Result<History> {
    snapshot(conn, |c| {
        let RunRow { key, info } = run_row(c, run)?;
        let mut st = c.prepare_cached(
            "SELECT n, kind, hash, body FROM facts WHERE run_key = ?1 ORDER BY n",
        )?;
        let rows = st.query_map([key], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?;
        let mut checker = RowChecker {
            conn: c,
            run,
            prev: chain_start(run.as_str()),
            expected: 1,
            ended: false,
            blobs: BlobVerifier::default(),
        };
        let mut facts = Vec::new();
        for row in rows {
            facts.push(checker.check(row)?);
        }
        let last = info.last_fact.n;
        if facts.len() as u64 != last {
            let n = (facts.len() as u64 + 1).min(last.max(1));
            return Err(Error::corrupt(
                run.as_str(),
                n,
                format!(
                    "the history has {} facts, the runs index says {last}",
                    facts.len()
                ),
            ));
        }
        if hash_text(&checker.prev) != info.last_fact.hash {
            return Err(Error::corrupt(
                run.as_str(),
                last,
                "the last hash differs from the runs index",
            ));
        }
        Ok(History {
            run: run.clone(),
            facts,
        })
    })
}

pub(super) fn read_after(
    conn: &mut Connection,
    run: &RunId,
    after: u64,
    limit: u32,
) -> Result<Vec<StoredFact>> {
    snapshot(conn, |c| {
        let RunRow { key, info } = run_row(c, run)?;
        if after >= info.last_fact.n {
            return Ok(Vec::new());
        }
        let prev = if after == 0 {
            chain_start(run.as_str())
        } else {
            let h: Option<Vec<u8>> = c
                .prepare_cached("SELECT hash FROM facts WHERE run_key = ?1 AND n = ?2")?
                .query_row(params![key, after as i64], |r| r.get(0))
                .optional()?;
            h.as_deref().and_then(from_column).ok_or_else(|| {
                Error::corrupt(
                    run.as_str(),
                    after,
                    "fact is missing or its hash is malformed",
                )
            })?
        };
        let mut st = c.prepare_cached("SELECT n, kind, hash, body FROM facts WHERE run_key = ?1 AND n > ?2 ORDER BY n LIMIT ?3")?;
        let rows = st.query_map(params![key, after as i64, i64::from(limit.max(1))], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })?;
        let mut checker = RowChecker {
            conn: c,
            run,
            prev,
            expected: after + 1,
            ended: false,
            blobs: BlobVerifier::default(),
        };
        let mut facts = Vec::new();
        for row in rows {
            facts.push(checker.check(row)?);
        }
        Ok(facts)
    })
}

pub(super) fn blob(conn: &mut Connection, hash: &str) -> Result<Vec<u8>> {
    let h = parse_hash(hash)
        .ok_or_else(|| Error::InvalidArgument(format!("not a blob hash: {hash:?}")))?;
    let bytes = snapshot(conn, |c| load_blob(c, &h))?
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
fn stored_value(conn: &Connection, h: &[u8; 32]) -> Result<Value> {
    let name = hash_text(h);
    let bad = |reason: &str| Error::CorruptBlob {
        hash: name.clone(),
        reason: reason.to_string(),
    };
    let bytes = load_blob(conn, h)?.ok_or_else(|| Error::UnknownBlob(name.clone()))?;
    if blob_hash(&bytes) != *h {
        return Err(bad("content does not match its hash"));
    }
    let text = std::str::from_utf8(&bytes).map_err(|_| bad("not UTF-8"))?;
    let v = flow_abi::json::parse(text).map_err(|e| bad(&format!("not JSON: {e}")))?;
    if canonical(&v) != text {
        return Err(bad("not canonical"));
    }
    Ok(v)
}

fn expand_in(conn: &Connection, stored: &Value) -> Result<Value> {
    merkle::expand(stored, &mut |h| stored_value(conn, h))
}

pub(super) fn expand(conn: &mut Connection, stored: &Value) -> Result<Value> {
    snapshot(conn, |c| expand_in(c, stored))
}

pub(super) fn checkpoint_state(conn: &mut Connection, run: &RunId, n: u64) -> Result<Value> {
    snapshot(conn, |c| {
        let RunRow { key, .. } = run_row(c, run)?;
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
            let fact = linked_fact(c, key, run, at)?;
            if fact.get("fact").and_then(Value::as_str) != Some("Checkpoint") {
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
        let (snap_n, snap) = chain
            .pop()
            .ok_or_else(|| Error::corrupt(run.as_str(), n, "no snapshot"))?;
        let stored_state = snap
            .get("state")
            .ok_or_else(|| Error::corrupt(run.as_str(), snap_n, "checkpoint has no state"))?;
        let mut state = expand_in(c, stored_state)
            .map_err(|e| Error::corrupt(run.as_str(), snap_n, e.to_string()))?;
        while let Some((dn, fact)) = chain.pop() {
            let d = match delta_of(&fact) {
                Some(Ok((_, d))) => d,
                _ => return Err(Error::corrupt(run.as_str(), dn, "malformed delta")),
            };
            apply_delta(&mut state, d, &mut |v| expand_in(c, v))
                .map_err(|e| Error::corrupt(run.as_str(), dn, e))?;
        }
        Ok(state)
    })
}

/// Fact `n`, checked against its predecessor's recorded hash.
fn linked_fact(conn: &Connection, key: i64, run: &RunId, n: u64) -> Result<Value> {
    let mut st = conn.prepare_cached("SELECT n, kind, hash, body FROM facts WHERE run_key = ?1 AND n BETWEEN ?2 AND ?3 ORDER BY n")?;
    let rows: Vec<(i64, String, Vec<u8>, String)> = st
        .query_map(params![key, n.saturating_sub(1) as i64, n as i64], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })?
        .collect::<rusqlite::Result<_>>()
        .map_err(|e| Error::corrupt(run.as_str(), n, format!("row unreadable: {e}")))?;
    let prev = if n == 1 {
        chain_start(run.as_str())
    } else {
        rows.iter()
            .find(|r| r.0 as u64 == n - 1)
            .and_then(|r| from_column(&r.2))
            .ok_or_else(|| Error::corrupt(run.as_str(), n - 1, "fact is missing"))?
    };
    let (_, _, hash, body) = rows
        .iter()
        .find(|r| r.0 as u64 == n)
        .ok_or_else(|| Error::InvalidArgument(format!("run {run} has no fact {n}")))?;
    let (fact, _) = check_stored_fact(run.as_str(), n, body)
        .map_err(|reason| Error::corrupt(run.as_str(), n, reason))?;
    if from_column(hash) != Some(chain_next(&prev, body)) {
        return Err(Error::corrupt(
            run.as_str(),
            n,
            "the chain hash does not match",
        ));
    }
    Ok(fact)
}

pub(super) fn host_records(conn: &mut Connection, run: &RunId) -> Result<Vec<HostRecordRow>> {
    snapshot(conn, |c| {
        let RunRow { key, .. } = run_row(c, run)?;
        let mut st = c.prepare_cached("SELECT seq, kind, at_ms, head_n, head_hash, details FROM host_records WHERE run_key = ?1 ORDER BY seq")?;
        let rows = st.query_map([key], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, i64>(2)?,
                r.get::<_, i64>(3)?,
                r.get::<_, Vec<u8>>(4)?,
                r.get::<_, String>(5)?,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (seq, kind, at_ms, head_n, head_hash, details) = row?;
            let bad = |what: &str| {
                Error::corrupt(
                    run.as_str(),
                    head_n as u64,
                    format!("host record {seq}: malformed {what}"),
                )
            };
            out.push(HostRecordRow {
                seq: seq as u64,
                kind: HostRecordKind::parse(&kind).ok_or_else(|| bad("kind"))?,
                at_ms,
                head: FactRef {
                    n: head_n as u64,
                    hash: hash_text(&from_column(&head_hash).ok_or_else(|| bad("head hash"))?),
                },
                details: flow_abi::json::parse(&details).map_err(|_| bad("details"))?,
            });
        }
        Ok(out)
    })
}
