//! The embedded SQLite backend (ECOSYSTEM §3).
//!
//! * One writer owns the only write connection (STYLE rule 10): rusqlite is
//!   synchronous, an append-only log suits a single writer, and SQLite has
//!   one writer anyway, so there is no `SQLITE_BUSY` churn and no
//!   deferred→write upgrade deadlock. A command finding the writer idle is
//!   committed by its caller's thread at once; otherwise the writer thread
//!   drains up to [`MAX_BATCH`] queued commands (`committer`), runs them
//!   inside one `BEGIN IMMEDIATE` transaction (a refused one changing
//!   nothing) and commits once (one fsync for the whole batch: group commit
//!   across concurrent runs). Only after COMMIT are callers answered and the
//!   live-tail heads bumped, so an acknowledged fact is durable and a
//!   subscriber never sees a fact that could still roll back.
//! * Reads use a small pool of separate connections (WAL lets them run while
//!   the writer commits); each read is one short read transaction, so it sees
//!   one consistent snapshot and does not hold back WAL checkpoints for long.

mod committer;
mod delete;
mod leases;
mod queue;
mod read;
mod recoveries;
mod redact;
mod seal;
pub use read::CHILDREN_QUERY;
pub use seal::Rotated;
mod waiting;
mod workers;
mod writer;

use crate::api::*;
use crate::archive::VerifiedArchive;
use crate::error::{Error, Result};
use crate::migrate;
use crate::step::{Creation, step_commands, sync_reply};
use crate::tail::Heads;
use flow_abi::fact::Fact;
use flow_abi::fact::RunId;
use rusqlite::{Connection, OptionalExtension};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{SyncSender, sync_channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Most commands committed in one transaction.
pub const MAX_BATCH: usize = 256;

/// Page size for a new database. 16 KiB rather than SQLite's 4 KiB: blobs
/// just over 2 KiB (a typical LLM answer) would otherwise take a whole 4 KiB
/// page each, since two do not fit in one (see docs/store.md, "Bytes on disk").
pub const PAGE_SIZE: u32 = 16384;

/// `PRAGMA synchronous` for the writer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Synchronous {
    /// ECOSYSTEM §3: "For durable histories use FULL and pay one fsync per
    /// batch (group commit)." An acknowledged fact survives power loss.
    #[default]
    Full,
    /// "In WAL mode, NORMAL keeps the database consistent and survives an
    /// application crash, but can lose the last commits on power loss or an
    /// OS crash."
    Normal,
}

/// Options for [`SqliteStore::open`].
#[derive(Clone, Debug)]
pub struct SqliteOptions {
    pub synchronous: Synchronous,
    /// Read connections kept in the pool.
    pub read_connections: usize,
    /// Queued commands before callers wait (back-pressure).
    pub queue_depth: usize,
    /// Page size of a new database (ignored for an existing one).
    pub page_size: u32,
    /// Master keys (a key file): with them the store seals what it writes
    /// (docs/custody.md "Encryption at rest"); an encrypted store does not
    /// open without them.
    pub keys: Option<Arc<crate::seal::Keyring>>,
}

impl Default for SqliteOptions {
    fn default() -> SqliteOptions {
        SqliteOptions {
            synchronous: Synchronous::Full,
            read_connections: 4,
            queue_depth: 4096,
            page_size: PAGE_SIZE,
            keys: None,
        }
    }
}

pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// All pragmas live here (STYLE rule 10).
fn configure(conn: &Connection, opts: &SqliteOptions, writer: bool) -> Result<()> {
    conn.busy_timeout(Duration::from_secs(5))?;
    if writer {
        // page_size only takes effect before the first table exists.
        let size = if opts.page_size.is_power_of_two() && (512..=65536).contains(&opts.page_size) {
            opts.page_size
        } else {
            PAGE_SIZE
        };
        conn.execute_batch(&format!("PRAGMA page_size = {size};"))?;
        let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(Error::Schema(format!(
                "could not enable WAL (journal_mode is {mode})"
            )));
        }
        let sync = match opts.synchronous {
            Synchronous::Full => "FULL",
            Synchronous::Normal => "NORMAL",
        };
        conn.execute_batch(&format!("PRAGMA synchronous = {sync}; PRAGMA foreign_keys = ON; PRAGMA temp_store = MEMORY; PRAGMA journal_size_limit = 67108864; PRAGMA cache_size = -65536;"))?;
    } else {
        conn.execute_batch(
            "PRAGMA foreign_keys = ON; PRAGMA temp_store = MEMORY; PRAGMA query_only = ON; PRAGMA cache_size = -16384;",
        )?;
    }
    Ok(())
}

/// Applies the migrations not yet recorded and refuses a database that is
/// newer than this build or whose applied migrations were edited. It all
/// happens in one IMMEDIATE transaction, so two processes opening a new
/// store at once (a `flow serve` and a `flow runs`) never both apply a
/// migration: the second waits for the write lock (busy timeout), then
/// finds it recorded.
fn migrate(conn: &mut Connection) -> Result<()> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    tx.execute_batch(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
            version INTEGER PRIMARY KEY, name TEXT NOT NULL, checksum TEXT NOT NULL, applied_ms INTEGER NOT NULL)",
    )?;
    let applied: Vec<(i64, String)> = {
        let mut st =
            tx.prepare("SELECT version, checksum FROM schema_migrations ORDER BY version")?;
        st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?
    };
    for (version, name, sql) in migrate::pending(migrate::SQLITE, &applied)? {
        tx.execute_batch(sql)?;
        tx.execute(
            "INSERT INTO schema_migrations (version, name, checksum, applied_ms) VALUES (?1, ?2, ?3, ?4)",
            rusqlite::params![version, name, migrate::checksum(sql), now_ms()],
        )?;
    }
    tx.commit()?;
    Ok(())
}

/// The writer's connection, configured and migrated. Switching a new
/// database to WAL can answer "database is locked" at once, without the
/// busy timeout, while another process does the same: that open is tried
/// again (bounded, 5 s in all).
fn open_writer(path: &Path, opts: &SqliteOptions) -> Result<Connection> {
    let mut tries = 0;
    loop {
        let mut conn = Connection::open(path)?;
        match configure(&conn, opts, true).and_then(|()| migrate(&mut conn)) {
            Err(Error::Sqlite(rusqlite::Error::SqliteFailure(e, _)))
                if e.code == rusqlite::ErrorCode::DatabaseBusy && tries < 50 =>
            {
                tries += 1;
                std::thread::sleep(Duration::from_millis(100));
            }
            r => return r.map(|()| conn),
        }
    }
}

/// The schema version this build writes.
pub fn schema_version() -> i64 {
    migrate::latest(migrate::SQLITE)
}

pub(crate) struct Inner {
    path: PathBuf,
    opts: SqliteOptions,
    committer: Arc<committer::Committer>,
    thread: Mutex<Option<JoinHandle<()>>>,
    readers: Mutex<Vec<Connection>>,
    /// Seals the rows the store writes and opens those it reads.
    seal: crate::seal::Sealer,
    /// The worker queue's own writer (`queue`), started on first use.
    queue: queue::QueueWriter,
    pub(crate) heads: Arc<Heads>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Closing the committer ends the writer thread once the queue is
        // drained; joining it closes the write connection before the files
        // can be removed.
        self.committer.close();
        if let Ok(mut t) = self.thread.lock()
            && let Some(t) = t.take()
        {
            let _ = t.join();
        }
    }
}

/// A handle to a SQLite store; clones share one writer and one read pool.
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

impl SqliteStore {
    /// Opens (creating if needed) the store at `path`, applies migrations and
    /// starts the writer thread.
    pub fn open(path: impl AsRef<Path>, opts: SqliteOptions) -> Result<SqliteStore> {
        let path = path.as_ref().to_path_buf();
        let mut conn = open_writer(&path, &opts)?;
        let seal = seal::load(&mut conn, opts.keys.as_deref())?;
        waiting::backfill(&mut conn, &seal)?;
        let heads = Arc::new(Heads::default());
        let committer = Arc::new(committer::Committer::new(
            writer::Writer::new(conn, heads.clone(), seal.clone()),
            opts.queue_depth,
        ));
        let c = committer.clone();
        let thread = std::thread::Builder::new()
            .name("flow-store-writer".into())
            .spawn(move || c.run())
            .map_err(|e| Error::io(&path, e))?;
        Ok(SqliteStore {
            inner: Arc::new(Inner {
                path,
                opts,
                committer,
                thread: Mutex::new(Some(thread)),
                readers: Mutex::new(Vec::new()),
                seal,
                queue: queue::QueueWriter::default(),
                heads,
            }),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    fn send<T>(&self, make: impl FnOnce(SyncSender<Result<T>>) -> writer::Command) -> Result<T> {
        let (reply_tx, reply_rx) = sync_channel(1);
        self.inner.committer.submit(make(reply_tx));
        reply_rx.recv().map_err(|_| Error::WriterGone)?
    }

    /// Whether the store seals what it writes (it was opened with keys).
    pub fn is_sealed(&self) -> bool {
        self.inner.seal.is_on()
    }

    /// `flow keys rotate` (docs/custody.md "Rotation"): every data key
    /// re-wrapped by `ring`'s active master key, then the rows still in
    /// plaintext sealed, on a connection of its own. The store must have
    /// been opened with keys that hold every data key's master key.
    pub fn rotate_keys(&self, ring: &crate::seal::Keyring) -> Result<Rotated> {
        let mut conn = self.side_connection()?;
        seal::rotate(&mut conn, ring)
    }

    /// Runs `f` on one read snapshot, its rows opened by the store's sealer.
    fn snapshot<T>(&self, f: impl FnOnce(&mut dyn crate::read::ReadDb) -> Result<T>) -> Result<T> {
        self.with_reader(|c| read::snapshot(c, &self.inner.seal, f))
    }

    /// Runs `f` on a pooled read connection.
    pub(crate) fn with_reader<T>(&self, f: impl FnOnce(&mut Connection) -> Result<T>) -> Result<T> {
        let pooled = self.inner.readers.lock().ok().and_then(|mut p| p.pop());
        let mut conn = match pooled {
            Some(c) => c,
            None => {
                let c = Connection::open(&self.inner.path)?;
                configure(&c, &self.inner.opts, false)?;
                c
            }
        };
        let out = f(&mut conn);
        // A connection left inside a transaction by an error is not reused.
        if conn.is_autocommit()
            && let Ok(mut p) = self.inner.readers.lock()
            && p.len() < self.inner.opts.read_connections
        {
            p.push(conn);
        }
        out
    }

    /// A write connection of its own, for the rare small writes outside
    /// the writer's batches (memory, leases): SQLite serializes them with
    /// the writer thread's batches through its lock and busy timeout.
    pub(crate) fn side_connection(&self) -> Result<Connection> {
        let conn = Connection::open(&self.inner.path)?;
        conn.busy_timeout(Duration::from_secs(5))?;
        let sync = match self.inner.opts.synchronous {
            Synchronous::Full => "FULL",
            Synchronous::Normal => "NORMAL",
        };
        conn.execute_batch(&format!("PRAGMA synchronous = {sync};"))?;
        Ok(conn)
    }

    /// Number of blob rows (for tests and benchmarks).
    pub fn blob_count(&self) -> Result<u64> {
        self.with_reader(|c| {
            Ok(c.query_row("SELECT COUNT(*) FROM blobs", [], |r| r.get::<_, i64>(0))? as u64)
        })
    }

    /// Bytes the database occupies (page_count × page_size, after folding the
    /// WAL into the main file).
    pub fn bytes_on_disk(&self) -> Result<u64> {
        self.send(writer::Command::Checkpoint)?;
        self.with_reader(|c| {
            let pages: i64 = c.query_row("PRAGMA page_count", [], |r| r.get(0))?;
            let size: i64 = c.query_row("PRAGMA page_size", [], |r| r.get(0))?;
            Ok((pages * size) as u64)
        })
    }
}

impl AppendFacts for SqliteStore {
    fn create_run_in(
        &self,
        namespace: &Namespace,
        start: Fact,
        sources: &[SourceText],
        records: Vec<HostRecord>,
    ) -> Result<Appended> {
        let sources = sources.to_vec();
        self.send(|reply| writer::Command::Create {
            namespace: namespace.clone(),
            start,
            sources,
            records,
            at_ms: now_ms(),
            reply: sync_reply(reply),
        })
    }

    fn append(&self, run: &RunId, fact: Fact) -> Result<Appended> {
        let run = run.clone();
        self.send(|reply| writer::Command::Append {
            run,
            fact: fact.into(),
            at_ms: now_ms(),
            reply: sync_reply(reply),
            fresh: false,
        })
    }

    /// One command holding every fact and record, so the writer takes them
    /// into one batch: one transaction and one fsync for the lot.
    fn append_all_with_then(
        &self,
        run: &RunId,
        facts: Vec<Appending>,
        records: Vec<HostRecord>,
        done: AppendDone,
    ) {
        let cmds = step_commands(run, None, facts, records, done);
        self.inner.committer.submit(writer::Command::Many(cmds));
    }

    /// As one command, like a step (see `append_all_with_then`).
    fn create_run_then(
        &self,
        namespace: &Namespace,
        start: Fact,
        sources: &[SourceText],
        created: Vec<HostRecord>,
        facts: Vec<Appending>,
        records: Vec<HostRecord>,
        done: AppendDone,
    ) {
        let Fact::Start { run, .. } = &start else {
            return done(Err(Error::InvalidFact(
                "a run is created with a Start".into(),
            )));
        };
        let run = run.clone();
        let creation = Creation {
            namespace: namespace.clone(),
            start,
            sources: sources.to_vec(),
            records: created,
        };
        let cmds = step_commands(&run, Some(creation), facts, records, done);
        self.inner.committer.submit(writer::Command::Many(cmds));
    }
}

impl HostRecords for SqliteStore {
    fn record_host(&self, run: &RunId, record: HostRecord) -> Result<HostRecordRow> {
        let run = run.clone();
        let at_ms = record.at_ms.unwrap_or_else(now_ms);
        self.send(|reply| writer::Command::Host {
            run,
            record,
            at_ms,
            reply,
            fresh: false,
        })
    }

    fn host_records(&self, run: &RunId) -> Result<Vec<HostRecordRow>> {
        self.snapshot(|db| crate::read::host_records(db, run))
    }

    fn start_records(&self, run: &RunId) -> Result<Vec<HostRecordRow>> {
        self.snapshot(|db| crate::read::start_records(db, run))
    }
}

impl ImportRuns for SqliteStore {
    fn import_verified_all_in(
        &self,
        namespace: &Namespace,
        archives: Vec<VerifiedArchive>,
    ) -> Result<Vec<ImportOutcome>> {
        crate::archive::check_distinct(&archives)?;
        self.send(|reply| writer::Command::Import {
            namespace: namespace.clone(),
            archives,
            at_ms: now_ms(),
            reply,
        })
    }
}

impl ReadHistory for SqliteStore {
    fn run_info(&self, run: &RunId) -> Result<RunInfo> {
        self.snapshot(|db| crate::read::run_info(db, run))
    }

    fn read_history(&self, run: &RunId) -> Result<History> {
        self.snapshot(|db| crate::read::read_history(db, run))
    }

    fn walk_logical(&self, run: &RunId, visit: &mut Visit<'_>) -> Result<()> {
        self.snapshot(|db| crate::read::walk_logical(db, run, visit))
    }

    fn read_after(&self, run: &RunId, after: u64, limit: u32) -> Result<Vec<StoredFact>> {
        self.snapshot(|db| crate::read::read_after(db, run, after, limit))
    }

    fn blob(&self, hash: &str) -> Result<Vec<u8>> {
        self.snapshot(|db| crate::read::blob(db, hash))
    }

    fn blob_in(&self, hash: &str, namespaces: &Namespaces) -> Result<Vec<u8>> {
        self.snapshot(|db| crate::read::blob_in(db, hash, namespaces))
    }

    fn expand(&self, run: &RunId, stored: &Value) -> Result<Value> {
        self.snapshot(|db| crate::read::expand(db, run, stored))
    }

    fn checkpoint_state(&self, run: &RunId, n: u64) -> Result<Value> {
        self.snapshot(|db| crate::read::checkpoint_state(db, run, n))
    }

    fn checkpoint_state_shown(&self, run: &RunId, n: u64) -> Result<Value> {
        self.snapshot(|db| {
            crate::read::checkpoint_state_with(db, run, n, crate::read::OnHole::Show)
        })
    }

    fn holes(&self, run: &RunId) -> Result<Vec<String>> {
        self.snapshot(|db| crate::read::holes(db, run))
    }

    fn history_page(&self, run: &RunId, query: &HistoryQuery) -> Result<HistoryPage> {
        let q = crate::view::check_query(query)?;
        let info = self.run_info(run)?;
        let history = self.read_history(run)?;
        let holes = crate::view::hole_set(&self.holes(run)?);
        crate::view::page(&info, &history, &q, &holes, &mut |v| self.expand(run, v))
    }
}

impl Discover for SqliteStore {
    fn discover(&self, query: &DiscoveryQuery) -> Result<DiscoveryPage> {
        let q = query.check()?;
        self.snapshot(|db| crate::read::discover(db, &q))
    }
}

impl ListRuns for SqliteStore {
    fn list_runs(&self, query: &RunListQuery) -> Result<RunListPage> {
        let q = query.check()?;
        self.snapshot(|db| crate::listing::list_runs(db, &q))
    }

    fn count_runs(&self, query: &RunListQuery) -> Result<RunCounts> {
        let q = query.check()?;
        self.snapshot(|db| crate::listing::count_runs(db, &q))
    }

    fn runs_changed_since(&self, since_ms: i64, limit: u32) -> Result<Vec<RunInfo>> {
        self.snapshot(|db| crate::listing::changed_since(db, since_ms, limit))
    }

    fn children(&self, run: &RunId, limit: u32) -> Result<ChildPage> {
        self.snapshot(|db| crate::listing::children(db, run, limit))
    }

    fn waiting_calls(&self, query: &WaitingQuery) -> Result<WaitingPage> {
        self.snapshot(|db| crate::read::waiting::page(db, query))
    }

    fn calls_at(&self, at: &[(RunId, u64)]) -> Result<Vec<Result<(Fact, RunInfo)>>> {
        self.snapshot(|db| crate::read::waiting::calls_at(db, at))
    }
}

impl Subscribe for SqliteStore {
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

impl crate::api::Memory for SqliteStore {
    fn memory_read(&self, store: &str, key: &Value) -> Result<Option<Value>> {
        let key = flow_abi::json::canonical(key);
        let text: Option<String> = self.with_reader(|c| {
            Ok(
                c.prepare_cached("SELECT value FROM memory WHERE store = ?1 AND key = ?2")?
                    .query_row(rusqlite::params![store, key], |r| r.get(0))
                    .optional()?,
            )
        })?;
        self.inner.seal.open_memory(store, &key, text)
    }

    /// Memory writes are rare and small: they take their own connection
    /// with an IMMEDIATE transaction (SQLite serializes them with the
    /// writer thread's batches through its lock and busy timeout).
    fn memory_write(&self, store: &str, key: &Value, value: &Value, merge: bool) -> Result<()> {
        let key = flow_abi::json::canonical(key);
        let mut conn = self.side_connection()?;
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let mut value = value.clone();
        if merge {
            let old: Option<String> = tx
                .prepare_cached("SELECT value FROM memory WHERE store = ?1 AND key = ?2")?
                .query_row(rusqlite::params![store, key], |r| r.get(0))
                .optional()?;
            value = self.inner.seal.merged_memory(store, &key, old, value)?;
        }
        tx.execute(
            "INSERT INTO memory (store, key, value, updated_ms) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (store, key) DO UPDATE SET value = excluded.value, updated_ms = excluded.updated_ms",
            rusqlite::params![
                store,
                key,
                &*self.inner.seal.seal_text(
                    crate::seal::Place::Memory(store, &key),
                    &flow_abi::json::canonical(&value)
                )?,
                now_ms()
            ],
        )?;
        tx.commit()?;
        Ok(())
    }
}
