//! The store as the run service sees it: every narrow trait a run needs,
//! behind one trait object, so the service never names a backend (issue
//! 10: "outside `store/` and the binary's wiring, nothing names
//! `SqliteStore`"). SQLite and Postgres both implement it by the blanket
//! impl below.

use flow_store::{Backend, Memory};
use std::sync::Arc;

/// Everything the run service and the HTTP handlers use of a store.
pub trait Store: Backend + Memory + Send + Sync + 'static {}

impl<T: Backend + Memory + Send + Sync + 'static> Store for T {}

/// A shared store handle.
pub type StoreRef = Arc<dyn Store>;

/// Runs a synchronous store call off the async runtime (STYLE rule 10):
/// rusqlite, and a commit's fsync, block their thread.
pub async fn blocking<T: Send + 'static>(
    store: &StoreRef,
    f: impl FnOnce(&dyn Store) -> crate::error::Result<T> + Send + 'static,
) -> crate::error::Result<T> {
    let s = store.clone();
    tokio::task::spawn_blocking(move || f(&*s))
        .await
        .map_err(|e| crate::error::Error::Unreadable(format!("a store task ended: {e}")))?
}
