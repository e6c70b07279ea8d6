//! Rows of a read decoded into the shared column types: a fact row, a
//! runs row (and the columns a query selects for it).

use crate::error::Error;
use crate::fact::FactKind;
use crate::hash::from_column;
use crate::index::RunColumns;
use crate::read::FactRow;
use tokio_postgres::Row;

pub(super) fn fact_row(r: &Row) -> Result<FactRow, String> {
    fact_row_at(r, 0)
}

/// A fact row whose `n, kind, hash, body` are columns `at..at + 4`.
pub(super) fn fact_row_at(r: &Row, at: usize) -> Result<FactRow, String> {
    let get = || -> Result<FactRow, tokio_postgres::Error> {
        let kind: &str = r.try_get(at + 1)?;
        let hash: &[u8] = r.try_get(at + 2)?;
        Ok((
            r.try_get(at)?,
            FactKind::parse(kind),
            from_column(hash),
            r.try_get(at + 3)?,
        ))
    };
    get().map_err(|e| Error::from(e).to_string())
}

/// The runs row in columns `at..at + 17` (as `ReadDb::run_columns`
/// selects them).
pub(super) fn run_columns_at(
    r: &Row,
    at: usize,
) -> std::result::Result<RunColumns, tokio_postgres::Error> {
    Ok(RunColumns {
        key: r.try_get(at)?,
        state: r.try_get(at + 1)?,
        entry_module: r.try_get(at + 2)?,
        entry_function: r.try_get(at + 3)?,
        program: r.try_get(at + 4)?,
        parent_run: r.try_get(at + 5)?,
        parent_checkpoint: r.try_get(at + 6)?,
        outer_run: r.try_get(at + 7)?,
        outer_call: r.try_get(at + 8)?,
        ending: r.try_get(at + 9)?,
        last_n: r.try_get(at + 10)?,
        last_hash: r.try_get(at + 11)?,
        created_ms: r.try_get(at + 12)?,
        updated_ms: r.try_get(at + 13)?,
        state_ms: r.try_get(at + 14)?,
        imported_ms: r.try_get(at + 15)?,
        namespace: r.try_get(at + 16)?,
    })
}

/// The runs row's columns as `run_columns_at` reads them.
pub(super) const RUN_COLUMNS: &str = "key, state, entry_module, entry_function, program, parent_run, parent_checkpoint, outer_run, outer_call, ending, last_n, last_hash, created_ms, updated_ms, state_ms, imported_ms, namespace";
