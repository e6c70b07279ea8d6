//! Run listings over the runs index, written once for every backend: the
//! dashboard's listing (either order, state and id-prefix filters, the
//! index's other columns) and the changes since a time (what a live feed
//! polls to see other processes' writes). A row is turned into its
//! discovery row by the same code as discovery, so the two never disagree.

use crate::api::*;
use crate::error::{Error, Result};
use crate::index::{DiscoveryColumns, RunColumns};
use crate::read::{ReadDb, run_info};
use flow_abi::fact::RunId;

/// One listed row: the run's id, its index columns and its latest pause or
/// halt record `(kind, at_ms, head_n, head_hash)`.
pub(crate) struct ListingColumns {
    pub id: String,
    pub cols: RunColumns,
    pub decision: Option<(String, i64, i64, Vec<u8>)>,
}

/// A row naming another run: its id, `(parent_run, parent_checkpoint)`
/// and `(outer_run, outer_call)`.
pub(crate) struct ChildColumns {
    pub id: String,
    pub parent: Option<(String, i64)>,
    pub outer: Option<(String, String)>,
}

/// A run's children (one row may be both a fork and a nested run of it:
/// two entries), from `limit + 1` rows, so `truncated` needs no count.
pub(crate) fn children(db: &mut dyn ReadDb, run: &RunId, limit: u32) -> Result<ChildPage> {
    let rows = db.child_columns(run.as_str(), limit.saturating_add(1))?;
    let truncated = rows.len() > limit as usize;
    let mut children = Vec::new();
    for r in rows.into_iter().take(limit as usize) {
        if let Some((p, cp)) = &r.parent
            && p == run.as_str()
        {
            children.push(ChildRun {
                run: r.id.clone(),
                link: ChildLink::Fork {
                    checkpoint: u64::try_from(*cp).unwrap_or(0),
                },
            });
        }
        if let Some((o, call)) = r.outer
            && o == run.as_str()
        {
            children.push(ChildRun {
                run: r.id,
                link: ChildLink::Nested { call },
            });
        }
    }
    Ok(ChildPage {
        children,
        truncated,
    })
}

/// Largest `limit` of [`changed_since`].
pub const CHANGED_MAX: u32 = 10_000;

/// The `[from, to)` id range of the ids starting with `prefix`: ids are
/// ASCII below `~`, so the id index serves it.
pub(crate) fn prefix_range(prefix: &str) -> (String, String) {
    (prefix.to_string(), format!("{prefix}~"))
}

pub(crate) fn list_runs(db: &mut dyn ReadDb, q: &CheckedRunList) -> Result<RunListPage> {
    let rows = db.listing_columns(q)?;
    let more = rows.len() > q.limit as usize;
    let mut runs = Vec::with_capacity(rows.len());
    for ListingColumns { id, cols, decision } in rows.into_iter().take(q.limit as usize) {
        let key = cols.key;
        let mut row = DiscoveryColumns {
            key,
            id,
            entry_module: cols.entry_module,
            entry_function: cols.entry_function,
            program: cols.program,
            ending: cols.ending,
            last_n: cols.last_n,
            last_hash: cols.last_hash,
            decision,
        }
        .row();
        crate::read::verify_ends(db, key, &mut row)?;
        runs.push(ListedRun {
            row,
            // The table's CHECK admits only the five states.
            state: RunState::parse(&cols.state).unwrap_or(RunState::Running),
            parent: cols
                .parent_run
                .zip(cols.parent_checkpoint.map(|c| c as u64)),
            outer: cols.outer_run.zip(cols.outer_call),
            created_ms: cols.created_ms,
            updated_ms: cols.updated_ms,
        });
    }
    let next = if more {
        runs.last().map(|r| r.row.run.clone())
    } else {
        None
    };
    Ok(RunListPage { runs, next })
}

pub(crate) fn changed_since(
    db: &mut dyn ReadDb,
    since_ms: i64,
    limit: u32,
) -> Result<Vec<RunInfo>> {
    if !(1..=CHANGED_MAX).contains(&limit) {
        return Err(Error::InvalidArgument(format!(
            "limit must be from 1 to {CHANGED_MAX}, not {limit}"
        )));
    }
    let ids = db.changed_ids(since_ms, limit)?;
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        // A malformed id or row names nothing a feed can report.
        let Ok(run) = RunId::parse(&id) else {
            continue;
        };
        if let Ok(info) = run_info(db, &run) {
            out.push(info);
        }
    }
    Ok(out)
}
