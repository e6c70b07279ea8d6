//! The stores the CLI opens: the embedded SQLite store under `--data`
//! (the one place the CLI names a backend, besides `flow serve
//! --postgres`), and where a missing run was looked for.

use super::Global;
use crate::error::{Error, Result};
use crate::service::store::StoreRef;
use flow_store::{RunId, SqliteOptions, SqliteStore};
use std::sync::Arc;

/// A run that is not there, said with the store it was looked for in:
/// the `--data` directory (and that no store is there, when none is) or
/// the `--server` URL (issue 41 §8).
pub(super) fn located(g: &Global, e: Error) -> Error {
    match e {
        Error::NotFound(m) if m.starts_with("no run ") => {
            let at = match &g.server {
                Some(url) => format!("on the server at {url}"),
                None if !g.data.join("flow.db").exists() => format!(
                    "in the store at {} (--data): there is no store there; nothing has run with that --data",
                    g.data.display()
                ),
                None => format!("in the store at {} (--data)", g.data.display()),
            };
            Error::NotFound(format!("{m} {at}"))
        }
        e => e,
    }
}

/// The store under `--data` for a command about `run`, which must be in
/// it: when no store is there, "no run" — the directory is not created
/// (a read leaves nothing behind).
pub(super) fn open_existing(g: &Global, run: &RunId) -> Result<StoreRef> {
    if !g.data.join("flow.db").exists() {
        return Err(Error::NotFound(format!("no run {run}")));
    }
    open_store(g)
}

/// The embedded store under `--data` (the binary's wiring: the one place
/// the CLI names a backend).
pub(super) fn open_store(g: &Global) -> Result<StoreRef> {
    std::fs::create_dir_all(&g.data)
        .map_err(|e| Error::Refused(format!("{}: {e}", g.data.display())))?;
    let opts = SqliteOptions {
        keys: keyring(g)?,
        ..SqliteOptions::default()
    };
    Ok(Arc::new(SqliteStore::open(g.data.join("flow.db"), opts)?))
}

/// The master keys of `--key-file` (or `FLOW_KEY_FILE`), when given: every
/// store a command opens is opened with them (docs/custody.md).
pub(super) fn keyring(g: &Global) -> Result<Option<Arc<flow_store::Keyring>>> {
    match &g.key_file {
        None => Ok(None),
        Some(path) => Ok(Some(Arc::new(flow_store::Keyring::load(path)?))),
    }
}

/// `flow serve --postgres`: the store in `schema` of the database at
/// `url` (connected and migrated off the runtime).
pub(super) fn open_postgres(g: &Global, url: &str, schema: &str) -> Result<StoreRef> {
    let opts = flow_store::PostgresOptions {
        url: url.to_string(),
        schema: schema.to_string(),
        keys: keyring(g)?,
    };
    Ok(Arc::new(flow_store::PostgresStore::open(opts)?))
}
