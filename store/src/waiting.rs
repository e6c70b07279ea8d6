//! The calls a paused run waits on (migration 0013, issue 38 §1): the rows
//! the writer stores with a `pause` host record, derived here once for
//! both backends from what the store already holds — the Call facts the
//! record names (task, node, tool, fact number), the run's `timeout`
//! records (deadlines) and its `binding` records (a call that drives a
//! nested run not ended has no row: the nested run lists its own calls).
//!
//! Deriving them in the store rather than taking them from the caller
//! keeps every writer of a pause (the server, `flow run` on a local store)
//! right without trusting it, and lets the same code fill the table for
//! runs paused before the migration (`backfill` in each backend, at open).

use crate::api::{HostDetails, RunState};
use crate::error::{Error, Result};
use crate::fact::{FactKind, parse_stored};
use crate::read::{HostPage, ReadDb};
use flow_abi::fact::{Fact, RunId};
use std::collections::{BTreeMap, BTreeSet};

/// One row of `waiting_calls`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WaitingRow {
    pub call: String,
    pub task: String,
    pub node: String,
    pub tool: String,
    /// The Call's fact number.
    pub fact: u64,
    /// The pause record's time (unix ms).
    pub since_ms: i64,
    pub due_ms: Option<i64>,
}

/// How many facts the first read takes while looking for the Calls, and
/// the most one read takes (each next read takes twice the last).
const FIRST: u64 = 16;
const PAGE: u64 = 512;

/// The rows of run `key` (`run`) paused at `since_ms` with `open` calls.
pub(crate) fn rows(
    db: &mut dyn ReadDb,
    key: i64,
    run: &RunId,
    open: &[String],
    since_ms: i64,
) -> Result<Vec<WaitingRow>> {
    if open.is_empty() {
        return Ok(Vec::new());
    }
    let wanted: BTreeSet<&str> = open.iter().map(String::as_str).collect();
    let (mut due, mut nested) = (BTreeMap::new(), BTreeMap::new());
    for h in db.host_columns(key, HostPage::ALL)? {
        if h.kind != "timeout" && h.kind != "binding" {
            continue;
        }
        match h.check(run)?.details {
            HostDetails::Timeout { call, due_ms } => {
                due.insert(call.as_str().to_string(), due_ms);
            }
            HostDetails::NestedRun { call, nested_run } => {
                nested.insert(call.as_str().to_string(), nested_run);
            }
            _ => {}
        }
    }
    // The open calls' Calls are the latest ones as a rule (a pause's is
    // among the last few facts): read back from the head a window at a
    // time, growing, until every one is found — a pause after many steps
    // reads a few facts, not the history; a Call that names none of them
    // is not parsed.
    let mut out = Vec::new();
    let mut hi = db.run_columns(run)?.map_or(0, |c| c.last_n.max(0) as u64);
    let mut window = FIRST;
    while hi >= 1 && out.len() < wanted.len() {
        let lo = hi.saturating_sub(window - 1).max(1);
        window = (window * 2).min(PAGE);
        for row in db.fact_range(key, lo, hi)? {
            let (n, kind, _, body) = row.map_err(|e| Error::corrupt(run.as_str(), lo, e))?;
            if kind != Some(FactKind::Call) || !wanted.iter().any(|w| body.contains(w)) {
                continue;
            }
            let Fact::Call {
                call,
                task,
                node,
                tool,
                ..
            } = parse_stored(&body)?.fact
            else {
                continue;
            };
            let call = call.as_str().to_string();
            if !wanted.contains(call.as_str()) {
                continue;
            }
            if let Some(nested_run) = nested.get(&call)
                && db
                    .run_columns(nested_run)?
                    .is_some_and(|c| c.ending.is_none())
            {
                // Counted as found: the nested run lists its own calls.
                out.push(None);
                continue;
            }
            out.push(Some(WaitingRow {
                due_ms: due.get(&call).copied(),
                call,
                task,
                node,
                tool,
                fact: n as u64,
                since_ms,
            }));
        }
        hi = lo - 1;
    }
    let mut rows: Vec<WaitingRow> = out.into_iter().flatten().collect();
    rows.sort_by_key(|r| r.fact);
    Ok(rows)
}

/// The rows of a run the index says is paused, from its latest pause
/// record (the back-fill of runs paused before migration 0013); none when
/// it is not paused or has no such record.
pub(crate) fn rows_of_paused(db: &mut dyn ReadDb, run: &RunId) -> Result<Vec<WaitingRow>> {
    let Some(cols) = db.run_columns(run)? else {
        return Ok(Vec::new());
    };
    if RunState::parse(&cols.state) != Some(RunState::Paused) {
        return Ok(Vec::new());
    }
    let mut pause = None;
    for h in db.host_columns(cols.key, HostPage::ALL)? {
        if h.kind == "pause" {
            pause = Some(h);
        }
    }
    let Some(h) = pause else {
        return Ok(Vec::new());
    };
    let at_ms = h.at_ms;
    let HostDetails::Pause { open } = h.check(run)?.details else {
        return Ok(Vec::new());
    };
    let open: Vec<String> = open.iter().map(|c| c.as_str().to_string()).collect();
    rows(db, cols.key, run, &open, at_ms)
}
