//! The Postgres backend (ECOSYSTEM §3: tokio-postgres + deadpool-postgres):
//! the same traits and semantics as [`crate::SqliteStore`], passing the same
//! [`crate::conformance`] suite.
//!
//! **How the synchronous API sits on an async client.** The store owns a
//! private two-thread tokio runtime that drives the read pool and the
//! listener, and the writer thread owns a current-thread runtime of its
//! own that drives the writer's connection (`writer`). A caller never
//! enters either: a write is sent over a bounded `std` channel to the
//! dedicated writer thread (and a `Notify` wakes it), a read is handed to
//! the private runtime's blocking pool, and the caller waits on a plain
//! `std` channel for the answer. So the store works the same from a plain thread, from
//! `spawn_blocking` in any tokio app (the caller's runtime is never asked to
//! run or block on our futures, so it cannot deadlock or panic with
//! "runtime within a runtime"), and the handle can be dropped anywhere (the
//! runtime shuts down in the background). The sync `postgres` crate was the
//! other option; it runs a runtime per connection and `block_on`s on the
//! caller's thread, which panics on a tokio worker, and it cannot host the
//! LISTEN task and a shared pool the later multi-server work needs.
//!
//! * **Writes**: one writer thread with group commit (see `writer`): every
//!   command queued when a batch starts goes into one transaction; the head
//!   of every touched run is read and locked inside it, and an append must
//!   follow the stored last fact (fencing); COMMIT with
//!   `synchronous_commit = on` makes it durable before anyone is answered.
//! * **Reads**: a deadpool of connections, each read one `REPEATABLE READ,
//!   READ ONLY` transaction, verified by the shared code in
//!   [`crate::read`] exactly as with SQLite.
//! * **Live tail**: the writer NOTIFYs `run:n` inside the append
//!   transaction; one dedicated connection per store LISTENs and bumps the
//!   local heads the tail waits on, so a tail sees facts any process
//!   appends (see `listen`).
//! * **Schema**: each store lives in its own Postgres schema
//!   ([`PostgresOptions::schema`]), set as `search_path` on every
//!   connection; `migrations/postgres/` are applied and recorded with
//!   checksums as for SQLite.

mod appends;
mod blob_locks;
mod connect;
mod counts;
mod delete;
mod leases;
mod listen;
mod memory;
mod queue_notes;
mod read;
mod recoveries;
mod redact;
mod rows;
mod seal;
pub use read::CHILDREN_QUERY;
mod sql;
mod statements;
mod waiting;
mod workers;
mod writer;

pub use connect::schema_version;

use crate::api::*;
use crate::error::{Error, Result};
use crate::tail::Heads;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use flow_abi::fact::RunId;
use flow_abi::fact::{Fact, RecordedChange};
use read::Session;
use serde_json::Value;
use std::sync::mpsc::{SyncSender, sync_channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;
use tokio::runtime::Handle;
use tokio_postgres::NoTls;

/// Most commands committed in one transaction.
pub const MAX_BATCH: usize = 256;

/// Queued commands before callers wait (back-pressure).
const QUEUE_DEPTH: usize = 4096;

/// Read connections in the pool.
const READ_CONNECTIONS: usize = 8;

/// Where a store lives: a connection URL (`postgres://user@host:port/db`)
/// and the schema that holds its tables (created if needed).
#[derive(Clone, Debug)]
pub struct PostgresOptions {
    pub url: String,
    pub schema: String,
    /// Master keys (a key file): with them the store seals what it writes
    /// (docs/custody.md "Encryption at rest"); an encrypted store does not
    /// open without them.
    pub keys: Option<Arc<crate::seal::Keyring>>,
}

/// What reads and the writer share.
pub(crate) struct Shared {
    pub(crate) handle: Handle,
    pub(crate) pool: Pool,
    /// Seals the rows the store writes and opens those it reads.
    pub(crate) seal: crate::seal::Sealer,
}

struct Inner {
    shared: Arc<Shared>,
    runtime: Mutex<Option<tokio::runtime::Runtime>>,
    tx: Mutex<Option<SyncSender<writer::Command>>>,
    /// Wakes the writer after a command is queued (see `writer`).
    wake: Arc<tokio::sync::Notify>,
    thread: Mutex<Option<JoinHandle<()>>>,
    heads: Arc<Heads>,
    /// Who hears the worker queue's notes (see `workers`).
    queue: Arc<queue_notes::Observers>,
    schema: String,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Closing the channel ends the writer loop once its batch is done.
        if let Ok(mut tx) = self.tx.lock() {
            tx.take();
        }
        self.wake.notify_one();
        if let Ok(mut t) = self.thread.lock()
            && let Some(t) = t.take()
        {
            let _ = t.join();
        }
        self.shared.pool.close();
        // Never blocks, so the last handle may be dropped inside an async
        // task of the caller's runtime.
        if let Ok(mut rt) = self.runtime.lock()
            && let Some(rt) = rt.take()
        {
            rt.shutdown_background();
        }
    }
}

/// What [`PostgresStore::start`] makes: the shared pool, the writer, and
/// what the listener feeds (the heads, the queue's observers).
type Started = (
    Arc<Shared>,
    writer::Writer,
    Arc<Heads>,
    Arc<queue_notes::Observers>,
    Arc<tokio::sync::Notify>,
);

/// A handle to a Postgres store; clones share one writer, one read pool and
/// one listener.
#[derive(Clone)]
pub struct PostgresStore {
    inner: Arc<Inner>,
}

impl PostgresStore {
    /// Connects, creates the schema and applies migrations if needed, and
    /// starts the writer and the listener. An unreachable server is
    /// [`Error::Unavailable`] naming where it was looked for.
    pub fn open(opts: PostgresOptions) -> Result<PostgresStore> {
        let cfg = connect::config(&opts)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("flow-store-pg")
            .enable_all()
            .build()
            .map_err(|e| Error::io("tokio runtime", e))?;
        let handle = runtime.handle().clone();
        // Build on the runtime's blocking pool: the caller may be anywhere.
        let (tx, rx) = sync_channel(1);
        let (h, schema, keys) = (handle.clone(), opts.schema.clone(), opts.keys.clone());
        handle.spawn_blocking(move || {
            let _ = tx.send(Self::start(h, cfg, schema, keys));
        });
        let started = rx.recv().map_err(|_| Error::WriterGone);
        let (shared, writer, heads, queue, wake) = match started.and_then(|r| r) {
            Ok(parts) => parts,
            Err(e) => {
                runtime.shutdown_background();
                return Err(e);
            }
        };
        let (tx, rx) = sync_channel(QUEUE_DEPTH);
        let thread = std::thread::Builder::new()
            .name("flow-store-pg-writer".into())
            .spawn(move || writer.run(rx))
            .map_err(|e| Error::io("writer thread", e))?;
        Ok(PostgresStore {
            inner: Arc::new(Inner {
                shared,
                runtime: Mutex::new(Some(runtime)),
                tx: Mutex::new(Some(tx)),
                wake,
                thread: Mutex::new(Some(thread)),
                heads,
                queue,
                schema: opts.schema,
            }),
        })
    }

    fn start(
        handle: Handle,
        cfg: tokio_postgres::Config,
        schema: String,
        keys: Option<Arc<crate::seal::Keyring>>,
    ) -> Result<Started> {
        let seal = handle.block_on(async {
            let client = connect::connect(&cfg).await?;
            connect::migrate(&client, &schema).await?;
            seal::load(&client, &schema, keys.as_deref()).await
        })?;
        let mgr = Manager::from_config(
            cfg.clone(),
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(mgr)
            .max_size(READ_CONNECTIONS)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(Duration::from_secs(30)))
            .create_timeout(Some(Duration::from_secs(10)))
            .build()
            .map_err(|e| Error::Unavailable(format!("postgres pool: {e}")))?;
        let heads = Arc::new(Heads::default());
        let channel = format!("flow_facts:{schema}");
        let queue = Arc::new(queue_notes::Observers::default());
        listen::start(
            &handle,
            cfg.clone(),
            listen::Channels {
                facts: channel.clone(),
                queue: queue_notes::channel(&schema),
            },
            heads.clone(),
            queue.clone(),
        )?;
        let shared = Arc::new(Shared { handle, pool, seal });
        waiting::backfill(&shared)?;
        let wake = Arc::new(tokio::sync::Notify::new());
        let writer =
            writer::Writer::open(shared.clone(), cfg, channel, heads.clone(), wake.clone())?;
        Ok((shared, writer, heads, queue, wake))
    }

    /// The schema the store lives in.
    pub fn schema(&self) -> &str {
        &self.inner.schema
    }

    fn sender(&self) -> Result<SyncSender<writer::Command>> {
        self.inner
            .tx
            .lock()
            .map_err(|_| Error::WriterGone)?
            .clone()
            .ok_or(Error::WriterGone)
    }

    fn send<T>(&self, make: impl FnOnce(SyncSender<Result<T>>) -> writer::Command) -> Result<T> {
        let (reply_tx, reply_rx) = sync_channel(1);
        self.sender()?
            .send(make(reply_tx))
            .map_err(|_| Error::WriterGone)?;
        self.inner.wake.notify_one();
        reply_rx.recv().map_err(|_| Error::WriterGone)?
    }

    /// Runs `f` on one read session on the private runtime's blocking pool.
    fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Session) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let shared = self.inner.shared.clone();
        let (tx, rx) = sync_channel(1);
        self.inner.shared.handle.spawn_blocking(move || {
            let mut s = Session::new(shared);
            let out = f(&mut s);
            s.finish();
            let _ = tx.send(out);
        });
        rx.recv().map_err(|_| Error::WriterGone)?
    }

    /// Runs `f` on one read session, its rows opened by the store's sealer.
    fn snapshot<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut dyn crate::read::ReadDb) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        self.read(move |s| {
            let seal = s.seal();
            crate::seal::read::opened(s, &seal, f)
        })
    }

    /// Whether the store seals what it writes (it was opened with keys).
    pub fn is_sealed(&self) -> bool {
        self.inner.shared.seal.is_on()
    }

    /// `flow keys rotate` (docs/custody.md "Rotation"): every data key
    /// re-wrapped by `ring`'s active master key, then the rows still in
    /// plaintext sealed, on a connection of its own.
    pub fn rotate_keys(&self, ring: &crate::seal::Keyring) -> Result<crate::sqlite::Rotated> {
        let ring = ring.clone();
        let schema = self.inner.schema.clone();
        self.on_pool(move |conn| async move { seal::rotate(&conn, &schema, &ring).await })
    }

    /// Runs `f` with a pooled connection on the private runtime (the small
    /// writes outside the writer's batches: memory, leases).
    fn on_pool<T, F, Fut>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(deadpool_postgres::Object) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<T>> + Send + 'static,
    {
        let (tx, rx) = sync_channel(1);
        self.on_pool_then(
            f,
            Box::new(move |r| {
                let _ = tx.send(r);
            }),
        );
        rx.recv().map_err(|_| Error::WriterGone)?
    }

    /// [`PostgresStore::on_pool`] without waiting: `done` gets the result
    /// on the store's runtime.
    fn on_pool_then<T, F, Fut>(&self, f: F, done: Box<dyn FnOnce(Result<T>) + Send>)
    where
        T: Send + 'static,
        F: FnOnce(deadpool_postgres::Object) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<T>> + Send + 'static,
    {
        let shared = self.inner.shared.clone();
        self.inner.shared.handle.spawn(async move {
            done(match shared.pool.get().await {
                Ok(conn) => f(conn).await,
                Err(e) => Err(Error::Unavailable(format!("postgres pool: {e}"))),
            })
        });
    }

    /// Number of blob rows (for tests and benchmarks).
    pub fn blob_count(&self) -> Result<u64> {
        self.read(|s| {
            let rows = s.query("SELECT COUNT(*) FROM blobs", &[])?;
            let n: i64 = rows.first().map(|r| r.try_get(0)).transpose()?.unwrap_or(0);
            Ok(n as u64)
        })
    }
}

impl ReadHistory for PostgresStore {
    fn run_info(&self, run: &RunId) -> Result<RunInfo> {
        let run = run.clone();
        self.snapshot(move |s| crate::read::run_info(s, &run))
    }

    fn read_history(&self, run: &RunId) -> Result<History> {
        let run = run.clone();
        self.snapshot(move |s| crate::read::read_history(s, &run))
    }

    fn walk_logical(&self, run: &RunId, visit: &mut Visit<'_>) -> Result<()> {
        // The session's reads run on the runtime's blocking pool: facts
        // come over a bounded channel, so the walk holds a few at a time.
        let (tx, rx) = sync_channel::<(Fact, Option<RecordedChange>)>(64);
        let (run, shared) = (run.clone(), self.inner.shared.clone());
        let (done_tx, done_rx) = sync_channel(1);
        self.inner.shared.handle.spawn_blocking(move || {
            let mut s = Session::new(shared);
            let seal = s.seal();
            let out = crate::seal::read::opened(&mut s, &seal, |db| {
                crate::read::walk_logical(db, &run, &mut |f, c| {
                    tx.send((f.clone(), c.cloned())).is_ok()
                })
            });
            s.finish();
            let _ = done_tx.send(out);
        });
        for (f, c) in rx.iter() {
            if !visit(&f, c.as_ref()) {
                break;
            }
        }
        // Dropping the receiver stops a walk the visitor left early.
        drop(rx);
        done_rx.recv().map_err(|_| Error::WriterGone)?
    }

    fn read_after(&self, run: &RunId, after: u64, limit: u32) -> Result<Vec<StoredFact>> {
        let run = run.clone();
        self.snapshot(move |s| crate::read::read_after(s, &run, after, limit))
    }

    fn blob(&self, hash: &str) -> Result<Vec<u8>> {
        let hash = hash.to_string();
        self.snapshot(move |s| crate::read::blob(s, &hash))
    }

    fn blob_in(&self, hash: &str, namespaces: &Namespaces) -> Result<Vec<u8>> {
        let (hash, namespaces) = (hash.to_string(), namespaces.clone());
        self.snapshot(move |s| crate::read::blob_in(s, &hash, &namespaces))
    }

    fn expand(&self, run: &RunId, stored: &Value) -> Result<Value> {
        let (run, stored) = (run.clone(), stored.clone());
        self.snapshot(move |s| crate::read::expand(s, &run, &stored))
    }

    fn checkpoint_state(&self, run: &RunId, n: u64) -> Result<Value> {
        let run = run.clone();
        self.snapshot(move |s| crate::read::checkpoint_state(s, &run, n))
    }

    fn checkpoint_state_shown(&self, run: &RunId, n: u64) -> Result<Value> {
        let run = run.clone();
        self.snapshot(move |s| {
            crate::read::checkpoint_state_with(s, &run, n, crate::read::OnHole::Show)
        })
    }

    fn holes(&self, run: &RunId) -> Result<Vec<String>> {
        let run = run.clone();
        self.snapshot(move |s| crate::read::holes(s, &run))
    }

    /// One session for the page: the history's blobs, fetched to verify
    /// it, also serve the values the page shows.
    fn history_page(&self, run: &RunId, query: &HistoryQuery) -> Result<HistoryPage> {
        let q = crate::view::check_query(query)?;
        let run = run.clone();
        self.snapshot(move |s| {
            let info = crate::read::run_info(s, &run)?;
            let history = crate::read::read_history(s, &run)?;
            let holes = crate::view::hole_set(&crate::read::holes(s, &run)?);
            crate::view::page(&info, &history, &q, &holes, &mut |v| {
                crate::read::expand(s, &run, v)
            })
        })
    }
}

impl Discover for PostgresStore {
    fn discover(&self, query: &DiscoveryQuery) -> Result<DiscoveryPage> {
        let q = query.check()?;
        self.snapshot(move |s| crate::read::discover(s, &q))
    }
}

impl ListRuns for PostgresStore {
    fn list_runs(&self, query: &RunListQuery) -> Result<RunListPage> {
        let q = query.check()?;
        self.snapshot(move |s| crate::listing::list_runs(s, &q))
    }

    fn count_runs(&self, query: &RunListQuery) -> Result<RunCounts> {
        let q = query.check()?;
        self.snapshot(move |s| crate::listing::count_runs(s, &q))
    }

    fn runs_changed_since(&self, since_ms: i64, limit: u32) -> Result<Vec<RunInfo>> {
        self.snapshot(move |s| crate::listing::changed_since(s, since_ms, limit))
    }

    fn children(&self, run: &RunId, limit: u32) -> Result<ChildPage> {
        let run = run.clone();
        self.snapshot(move |s| crate::listing::children(s, &run, limit))
    }

    fn waiting_calls(&self, query: &WaitingQuery) -> Result<WaitingPage> {
        let q = query.clone();
        self.snapshot(move |s| crate::read::waiting::page(s, &q))
    }

    fn calls_at(&self, at: &[(RunId, u64)]) -> Result<Vec<Result<(Fact, RunInfo)>>> {
        let at = at.to_vec();
        self.snapshot(move |s| crate::read::waiting::calls_at(s, &at))
    }
}

impl Subscribe for PostgresStore {
    fn subscribe(&self, run: &RunId, after: u64) -> Result<Box<dyn Tail>> {
        Ok(Box::new(crate::tail::StoreTail::new(
            self.clone(),
            self.inner.heads.clone(),
            run,
            after,
        )?))
    }

    fn observe_heads(&self, observer: HeadObserver) {
        self.inner.heads.observe(observer);
    }
}
